"""Worker threads: one per core this process may run on, in one pool per kind of work (chunk
reads, deep checks), each made at first use and kept for the life of the process. A forked
child starts with no pool: it inherits the pool objects but not their threads, and a pool that
counts threads it does not have never runs what it is given."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["pool", "workers"]

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def _forget_pools() -> None:
    """In a forked child: drop the parent's pools (their threads stayed in the parent) and its
    lock (another thread may have held it at the fork)."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_pools)


def workers() -> int:
    """Threads per pool: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def pool(name: str) -> ThreadPoolExecutor:
    """The pool of the work `name` (its threads are named ``name-N``)."""
    with _lock:
        if name not in _pools:
            _pools[name] = ThreadPoolExecutor(workers(), thread_name_prefix=name)
        return _pools[name]
