"""Run mutmut over ockpt's format core: ``python tests/mutation/run.py run [MUTANT_GLOB ...]``.

mutmut 3 names each mutant by its file's path with a leading ``src.`` dropped and makes the
mutated copy importable from ``mutants/src``; ockpt lives in ``reference/``. So this script
builds a small stage, ``build/mutation/``, whose ``src`` (and ``tests``, ``fixtures``, ...)
are links to the checkout, and runs ``mutmut`` there with the arguments given
(``run``, ``results``, ``show <id>``, ...). mutmut copies the stage into
``build/mutation/mutants/``, drops the checkout's ``reference/`` (the editable install) from the
test process's ``sys.path`` and puts ``mutants/src`` first; ``PYTHONPATH`` does the same for
the Python subprocesses tests start. Configuration: ``[tool.mutmut]`` in pyproject.toml.
Results and every surviving mutant: tests/mutation/RESULTS.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def main(argv: list[str]) -> int:
    """Run ``mutmut argv...`` in the stage; its exit status."""
    build_stage()
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or "mutmut"
    mutated = STAGE / "mutants" / "src"
    # made before Python starts: a sys.path entry missing at the first import is never searched
    mutated.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(mutated))
    return subprocess.run([mutmut, *argv], cwd=STAGE, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
