"""Run mutmut over ockpt's format core: ``python tests/mutation/run.py run [MUTANT_GLOB ...]``.

mutmut 3 names each mutant by its file's path with a leading ``src.`` dropped and makes the
mutated copy importable from ``mutants/src``; ockpt lives in ``reference/``. So this script
builds a small stage, ``build/mutation/``, whose ``src`` (and ``tests``, ``fixtures``, ...)
are links to the checkout, and runs mutmut there with the arguments given (``run``,
``results``, ``show <id>``, ...). mutmut copies the stage into ``build/mutation/mutants/``,
drops the checkout's ``reference/`` (the editable install) from the test process's
``sys.path`` and puts ``mutants/src`` first; ``PYTHONPATH`` does the same for the Python
subprocesses tests start. Configuration: ``[tool.mutmut]`` in pyproject.toml. Results and
every surviving mutant: tests/mutation/RESULTS.md.

The run blocks tensorstore (``OCKPT_BLOCK_TENSORSTORE=1`` unless set; ../../conftest.py):
mutmut forks each mutant's child from the process that ran the stats, and once tensorstore's
threads had started there the children died of SIGABRT with no verdict (592 of ocdbt/format.py's
2,570 mutants in one run; none in the run with it blocked). Tests that need tensorstore skip.

mutmut runs in this process, with one change: its stats run keeps the caller of each
instrumented call in a `contextvars.ContextVar`, whose ``set`` segfaulted in that run here
(mutmut 3.8.1, Python 3.11.7; at a different test each time, once from inside the json
module's object hook); `ThreadCallStack` keeps the same (caller, depth) pairs in a per-thread
list.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "build" / "mutation"
#: Stage entry -> checkout path it links to (what mutmut reads and copies).
LINKS = {
    "src": "reference",
    "tests": "tests",
    "fixtures": "fixtures",
    "spec": "spec",
    "conformance": "conformance",
    "conftest.py": "conftest.py",
    "pyproject.toml": "pyproject.toml",
}


def build_stage() -> None:
    """Create `STAGE` with its links (idempotent; mutants/ and its results are kept)."""
    STAGE.mkdir(parents=True, exist_ok=True)
    for name, target in LINKS.items():
        link = STAGE / name
        if not link.is_symlink():
            link.symlink_to(ROOT / target)


class ThreadCallStack(threading.local):
    """What mutmut's ``MutmutCallStack._ctx`` does (get; set, returning a token; reset to a
    token), kept per thread in a list instead of a ContextVar."""

    def __init__(self) -> None:
        self.stack: list[tuple[str | None, int]] = [(None, 0)]

    def get(self) -> tuple[str | None, int]:
        return self.stack[-1]

    def set(self, value: tuple[str | None, int]) -> int:
        self.stack.append(value)
        return len(self.stack) - 1

    def reset(self, token: int) -> None:
        del self.stack[token:]


def main(argv: list[str]) -> int:
    """Run ``mutmut argv...`` in the stage; its exit status."""
    build_stage()
    mutated = STAGE / "mutants" / "src"
    mutated.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = str(mutated)  # for the Python subprocesses tests start
    os.environ.setdefault("OCKPT_BLOCK_TENSORSTORE", "1")
    os.chdir(STAGE)  # mutmut reads its configuration when first imported
    from mutmut.__main__ import cli
    from mutmut.core import MutmutCallStack

    MutmutCallStack._ctx = ThreadCallStack()  # type: ignore[assignment]
    return cli.main(argv, prog_name="mutmut", standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
