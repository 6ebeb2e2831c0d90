"""`import ockpt` leaves the writer and the checkpoint manager for their first use (a reader
does not pay for them), and the public names stay where they were."""

from __future__ import annotations

import subprocess
import sys

import pytest

_LAZY = ("ockpt.writer", "ockpt.manager", "ockpt._zarr_write", "ockpt.store.commit")


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_ockpt_imports_neither_writer_nor_manager():
    _run(f"import sys, ockpt; assert not [m for m in {_LAZY!r} if m in sys.modules]")


def test_reading_imports_neither_writer_nor_manager():
    from tests.support import FIXTURES

    item = FIXTURES / "orbax-0.12.8" / "nested" / "checkpoint"
    _run(
        f"import sys, ockpt; ockpt.pytree_metadata({str(item)!r}); "
        f"assert not [m for m in {_LAZY!r} if m in sys.modules]"
    )


@pytest.mark.parametrize(
    "name", ["save_pytree", "save_pytree_async", "save_checkpointables", "SaveHandle",
             "JsonItem", "CheckpointManager"],
)  # fmt: skip
def test_lazy_names_are_the_modules_own(name):
    _run(
        f"import ockpt; from ockpt import {name}; from ockpt import writer, manager; "
        f"assert {name} is getattr(writer if hasattr(writer, {name!r}) else manager, {name!r}); "
        f"assert ockpt.{name} is {name} and {name!r} in dir(ockpt)"
    )


def test_every_public_name_is_listed_and_reachable():
    import ockpt

    assert set(ockpt.__all__) <= set(dir(ockpt))
    assert all(getattr(ockpt, name) is not None for name in ockpt.__all__)
    assert callable(ockpt.validate)  # the function, not the module of the same name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ockpt.nope  # noqa: B018
