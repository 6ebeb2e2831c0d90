"""Run Python as if tensorstore were not installed (``OCKPT_BLOCK_TENSORSTORE=1``).

The root ``conftest.py`` puts this directory first on ``PYTHONPATH`` when the variable is set,
so that the test process and every Python subprocess it starts import this module at startup
and refuse tensorstore, and the packages that cannot be installed without it (orbax, flax),
with ``ModuleNotFoundError``: what ``pip install ockpt`` without the ``tensorstore`` extra gives.
The error records the file whose import statement asked (`importer`), so the test run can tell a
test that needs tensorstore from ockpt code that should not. (This directory's
``sitecustomize`` takes the place of any other on the path, of which this project has none.)
"""

from __future__ import annotations

import importlib.abc
import os
import sys

#: Top-level packages refused: tensorstore and those that require it.
BLOCKED = ("tensorstore", "orbax", "flax")
REASON = "needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set"


class Blocked(ModuleNotFoundError):
    """A refused import; `importer` is the file of the import statement that asked."""

    def __init__(self, name: str, importer: str) -> None:
        super().__init__(f"No module named {name!r} ({REASON})", name=name)
        self.importer = importer


def _importer() -> str:
    """The file of the first frame outside the import machinery and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        file = frame.f_code.co_filename
        if not (file.startswith("<frozen") or file == __file__ or "importlib" in file):
            return file
        frame = frame.f_back
    return "?"


class BlockTensorstore(importlib.abc.MetaPathFinder):
    """Refuses the `BLOCKED` packages and their submodules."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name.partition(".")[0] in BLOCKED:
            raise Blocked(name, _importer())
        return None


def install() -> None:
    """Put the blocker first on `sys.meta_path` (once)."""
    if not any(isinstance(f, BlockTensorstore) for f in sys.meta_path):
        sys.meta_path.insert(0, BlockTensorstore())


if os.environ.get("OCKPT_BLOCK_TENSORSTORE", "") not in ("", "0"):
    install()
