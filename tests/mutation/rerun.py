"""Re-run mutants by hand: ``python tests/mutation/rerun.py [--fresh|--warm] TEST... -- MUTANT...``.

Run it from ``build/mutation/mutants/`` with ``PYTHONPATH=$PWD/src`` (after
``tests/mutation/run.py`` made that copy). Each mutant runs ``pytest -x TEST...`` in a child
forked from this process, where no mutant is active, with the caches of ``dtypes._exact``
and ``dtypes._float_traits`` cleared: mutmut forks its children from the process that ran
its stats, whose caches hold the original answers, so mutants of the cast table's helpers
are never called there. ``--fresh`` starts a new interpreter per mutant instead, for code
that runs at import (``dtypes._ml`` builds ``SUPPORTED``). ``--warm`` runs the tests once
with no mutant first (they must pass), so each child starts with every module imported and
collection cached: about 1.5 s a mutant instead of 15 on a loaded machine; a mutant of a
function whose result that run cached (other than the two above) can then survive unexecuted,
so re-run its survivors without ``--warm``. Prints one line per mutant:
``killed`` (a test failed), ``survived`` (all passed), ``timeout`` (a forked child still
running after ``RERUN_TIMEOUT`` seconds, 300 unless set: SIGALRM ends it, as mutmut's time
limit would) or ``exit N`` (2: the tests did not collect, because of the mutant when a run
with no mutant, ``none``, survives).
Results: tests/mutation/RESULTS.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts="]
#: Seconds a forked child may run (an infinite loop of a mutant is a kill, as in mutmut).
TIMEOUT = int(os.environ.get("RERUN_TIMEOUT", "300"))


def run_forked(mutant: str, tests: list[str]) -> int:
    """pytest's exit status for `tests` with `mutant` active, in a forked child."""
    import pytest

    from ockpt import dtypes

    pid = os.fork()
    if pid == 0:
        signal.alarm(TIMEOUT)
        os.environ["MUTANT_UNDER_TEST"] = mutant
        dtypes._exact.cache_clear()
        dtypes._float_traits.cache_clear()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os._exit(int(pytest.main([*PYTEST_ARGS, *tests])))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run_fresh(mutant: str, tests: list[str]) -> int:
    """pytest's exit status for `tests` with `mutant` active from interpreter start."""
    env = dict(os.environ, MUTANT_UNDER_TEST=mutant)
    command = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests]
    return subprocess.run(command, env=env, capture_output=True, timeout=900).returncode


def warm_up(tests: list[str]) -> int:
    """pytest's exit status for `tests` with no mutant, run in this process (output dropped)."""
    import pytest

    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        return int(pytest.main([*PYTEST_ARGS, *tests]))
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def main(argv: list[str]) -> int:
    """Run each mutant after ``--`` against the tests before it; print the verdicts."""
    mode = argv[0] if argv[:1] in (["--fresh"], ["--warm"]) else ""
    if mode:
        argv = argv[1:]
    fresh = mode == "--fresh"
    split = argv.index("--")
    tests, mutants = argv[:split], argv[split + 1 :]
    if mode == "--warm" and (code := warm_up(tests)) != 0:
        print(f"the tests fail with no mutant (exit {code})", file=sys.stderr)
        return 1
    for mutant in mutants:
        code = run_fresh(mutant, tests) if fresh else run_forked(mutant, tests)
        verdict = {0: "survived", 1: "killed", -signal.SIGALRM: "timeout"}.get(code, f"exit {code}")
        print(f"{mutant} {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
