"""Every public call closes what it opens: no file descriptor of a checkpoint outlives the call
(`load_pytree`, `pytree_metadata`, `validate`, `detect`, `ockpt.open` ... `close()`, `cp`,
`convert`), on every golden case of every release, with both engines."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import ockpt
from ockpt import transfer
from ockpt.convert import convert
from tests.support import HAVE_TENSORSTORE, case_id, fixture_cases

CASES = fixture_cases()
ENGINES = ["python", *(["tensorstore"] if HAVE_TENSORSTORE else [])]


def _open_files(root: Path, settle: float = 2.0) -> list[str]:
    """The files under `root` that this process holds a descriptor of, once none is (or after
    `settle` seconds): tensorstore closes a file on its own threads just after a read's result
    is handed over."""
    deadline = time.monotonic() + settle
    while True:
        found = _held(root)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def _held(root: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(str(root)):
            out.append(target)
    return sorted(out)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_reading_calls_leave_no_descriptor_open(case, engine, tmp_path):
    path = case / "checkpoint"
    layout = ockpt.detect(path)
    calls = {
        "detect": lambda: ockpt.detect(path),
        "validate --deep": lambda: ockpt.validate(path, deep=True),
    }
    if layout.kind in (ockpt.Kind.PYTREE_ITEM, ockpt.Kind.V1_CHECKPOINT, ockpt.Kind.STEP) or (
        layout.kind is ockpt.Kind.MANAGER_ROOT
    ):
        try:
            ockpt.pytree_metadata(path, backend=engine)
        except ockpt.OckptError:
            pass  # no default pytree item here (several items, or none): the calls refuse alike
        else:
            calls["pytree_metadata"] = lambda: ockpt.pytree_metadata(path, backend=engine)
            calls["load_pytree"] = lambda: ockpt.load_pytree(path, backend=engine)

            def lazy() -> None:
                with ockpt.open(path, backend=engine) as ckpt:
                    for name in list(ckpt)[:3]:
                        ckpt[name]  # opens the array (metadata), reads nothing

            calls["open ... close"] = lazy
    before = _open_files(case)  # what another test in this process may still hold
    for what, call in calls.items():
        call()
        assert _open_files(case) == before, f"{what} left descriptors open"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_writing_calls_leave_no_descriptor_open(tmp_path):
    case = Path(CASES[0]).parent / "nested" / "checkpoint"
    transfer.copy(case, tmp_path / "copy", progress=False)
    assert _open_files(case) == [] and _open_files(tmp_path) == []
    convert(str(case), str(tmp_path / "m.safetensors"), progress=False, skip_unsupported=True)
    assert _open_files(case) == [] and _open_files(tmp_path) == []
    ockpt.save_pytree(tmp_path / "saved", ockpt.load_pytree(case))
    assert _open_files(tmp_path) == []
