"""Pausing Python's cyclic garbage collector while a save or read builds per-leaf objects.

A tree of 100,000 leaves makes several objects per leaf (key paths, entries, plans), all kept
until the call returns; each full collection that their allocation triggers walks every one
made so far, which cost about a third of a save's planning. Reference counting still frees
everything that is not in a cycle.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside; the collector is back on after, if it was on before."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
