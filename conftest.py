"""The suite without tensorstore: ``OCKPT_BLOCK_TENSORSTORE=1 python -m pytest -q``.

With the variable set, tensorstore (and orbax and flax, which require it) cannot be imported in
the test process or in any Python subprocess it starts (`tests/site_no_tensorstore`), as after
``pip install ockpt`` without the ``tensorstore`` extra. What needs tensorstore skips, with the
reason "needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set":

* a test module whose own import of tensorstore, orbax or flax fails (at collection);
* a test parametrized with the value ``"tensorstore"`` or ``"ockpt-tensorstore"`` (an engine or
  conformance adapter), for that value;
* a test that fails because test code imported a refused package, or because ockpt refused a
  request for tensorstore that test code made in so many words (``"tensorstore"`` as a value, a
  ``memory://``, ``s3://`` or ``gs://`` URL).

Anything else that meets a refused import fails: ockpt's local reads, writes, validation and
conversions must not need tensorstore. Without the variable this file changes nothing.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "reference" / "ockpt"
SITE = ROOT / "tests" / "site_no_tensorstore"
BLOCKING = os.environ.get("OCKPT_BLOCK_TENSORSTORE", "") not in ("", "0")

#: Parameter values that select tensorstore: the engine, and the conformance adapter using it.
TENSORSTORE_PARAMS = ("tensorstore", "ockpt-tensorstore")
#: Test code that asks ockpt for tensorstore: the engine by name, or a URL only it can open.
_ASKS_FOR_TENSORSTORE = re.compile(r"""["']tensorstore["']|["'](memory|s3|gs)://""")

if BLOCKING:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SITE), os.environ.get("PYTHONPATH")) if p
    )
    sys.path.insert(0, str(SITE))
    import sitecustomize  # installs the blocker in this process too

    REASON = sitecustomize.REASON
    if any(m.partition(".")[0] in sitecustomize.BLOCKED for m in sys.modules):
        raise pytest.UsageError("OCKPT_BLOCK_TENSORSTORE: tensorstore was imported before")


def _blocked_imports(exc: BaseException | None) -> Iterator[ModuleNotFoundError]:
    """The refused imports in the chain of `exc` (its causes and contexts)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sitecustomize.Blocked):
            yield exc
        exc = exc.__cause__ or exc.__context__


def _in_package(file: str) -> bool:
    return Path(file).resolve().is_relative_to(PACKAGE)


def _asks_for_tensorstore(exc: BaseException) -> bool:
    """True when a frame of test code (outside ockpt) on `exc`'s traceback asks for it: in its
    source, or with a local variable (``for backend in BACKENDS``) naming it."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        file = frame.f_code.co_filename
        if _in_package(file) or not Path(file).resolve().is_relative_to(ROOT):
            continue
        values = [repr(v) for v in frame.f_locals.values() if isinstance(v, str)]
        try:
            values.append(inspect.getsource(frame.f_code))
        except OSError:
            pass
        if any(_ASKS_FOR_TENSORSTORE.search(text) for text in values):
            return True
    return False


def _skip_if_tensorstore_needed(exc: BaseException) -> None:
    """Skip instead of failing on `exc` when it comes of a test's own need for tensorstore."""
    for blocked in _blocked_imports(exc):
        if not _in_package(blocked.importer) or _asks_for_tensorstore(exc):
            pytest.skip(f"{REASON} ({blocked.name} imported by {blocked.importer})")


if BLOCKING:

    class _Module(pytest.Module):
        """A test module that skips when importing it meets a refused import."""

        def collect(self):  # type: ignore[no-untyped-def]
            try:
                return list(super().collect())
            except self.CollectError as e:
                for blocked in _blocked_imports(e.__cause__):
                    reason = f"{REASON} ({blocked.name} imported by {blocked.importer})"
                    pytest.skip(reason, allow_module_level=True)
                raise

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(module_path: Path, parent):  # type: ignore[no-untyped-def]
        return _Module.from_parent(parent, path=module_path)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
        try:
            return (yield)
        except Exception as e:
            _skip_if_tensorstore_needed(e)
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
        try:
            return (yield)
        except Exception as e:
            _skip_if_tensorstore_needed(e)
            raise


def _skip_tensorstore_params(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(isinstance(v, str) and v in TENSORSTORE_PARAMS for v in params.values()):
            item.add_marker(pytest.mark.skip(reason=REASON))


# ---------------------------------------------------------------------------------------------
# The slow matrix (issue 34): tests marked ``slow`` run only with ``--slow`` (`.ci/run` passes
# it); the default run keeps every contract, rule and fixture release (tests/package/test_tiers.py).


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the slow matrix (tests marked slow: old Orbax releases, emulators, "
        "torchrun, many processes, crash and concurrency trials, long property runs)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """pyproject's addopts give the default run, the whole suite, a worker per core. Unless -n
    is given on the command line, run in this one process instead with --slow (the slow
    matrix starts many processes itself: 16 JAX processes, torchrun ranks, killed writers, and
    its timed trials are not to share the cores with another worker) and when tests are named
    (a file or a test starts at once, without workers to start first)."""
    given = any(a.startswith(("-n", "--numprocesses")) for a in config.invocation_params.args)
    named = config.args_source is not pytest.Config.ArgsSource.TESTPATHS
    if (config.getoption("--slow") or named) and not given and hasattr(config.option, "dist"):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.option.tx = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--slow"):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    if BLOCKING:
        _skip_tensorstore_params(items)
