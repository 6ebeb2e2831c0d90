"""The limits ockpt enforces on what a checkpoint's files declare (spec/limits.md).

A checkpoint is untrusted input: every size, count, length and depth that a file declares is
checked against one of these limits before anything is allocated or recursed into, so that no
input makes a reader allocate without bound, recurse without bound or hang. The defaults are
`LIMITS`; a caller sets others for one call with ``limits=`` (`ockpt.open`, `load_pytree`,
`pytree_metadata`, `validate`) or for a block with `applied`. Each parser reads the limits in
force (`current`) when it runs, and the entry points that take a size option (``max_bytes=``,
``max_decoded_bytes=``) default to them. Exceeding a limit is a `FormatError`
with the rule of the structure (``JSON-003``, ``MSGPACK-001``, ``OCDBT-006`` ...) and, where
no other rule covers the limit, ``LIMIT-002`` .. ``LIMIT-004``.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import BinaryIO

__all__ = [
    "Limits",
    "LIMITS",
    "current",
    "applied",
    "read_capped",
    "memory_available",
    "check_allocation",
    "Allocations",
]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Upper bounds on what a checkpoint may declare (all inclusive)."""

    #: Bytes of one JSON document (`_METADATA` of a 1M-leaf tree is ~200 MiB). JSON-003
    max_json_bytes: int = 1 << 30
    #: Bytes of one zarr metadata document (``.zarray``, ``zarr.json``). JSON-003
    max_array_metadata_bytes: int = 1 << 24
    #: Values and member names one JSON document holds at once, counted as its commas, colons
    #: and opening brackets outside strings, plus one (a parse builds an object for each: at
    #: most about 2.5 GiB). The entries of a streamed `_METADATA` tree_metadata count one at a
    #: time. A 1M-leaf `array_metadatas` file holds about 15M. The same bound holds the
    #: values and map keys of the msgpack ``checkpoint`` file. JSON-003, MSGPACK-001
    max_json_values: int = 1 << 25
    #: Nesting depth of JSON values, msgpack containers, key paths (LIMIT-004) and
    #: OCDBT trees. JSON-003, MSGPACK-005
    max_depth: int = 64
    #: Entries of `_METADATA`'s tree_metadata (leaves and empty nodes). LIMIT-002
    max_tree_entries: int = 1 << 24
    #: UTF-8 bytes of one key text, param name, OCDBT key or data file path. LIMIT-003, OCDBT-008
    max_key_bytes: int = 65535
    #: Decoded bytes of one OCDBT manifest, version node or B+tree node. OCDBT-006
    max_node_bytes: int = 1 << 30
    #: Stored bytes of one OCDBT manifest file. OCDBT-006
    max_manifest_bytes: int = 1 << 26
    #: Decoded bytes of one zarr chunk (or shard), and bytes of any one stored value. ZARR-005
    max_chunk_bytes: int = 1 << 34
    #: Bytes of the legacy msgpack ``checkpoint`` file. MSGPACK-001
    max_msgpack_bytes: int = 1 << 34
    #: Dimensions of one msgpack array. MSGPACK-011
    max_ndim: int = 64
    #: Dimensions of one zarr array (tensorstore's rank limit). ZARR-005
    max_zarr_ndim: int = 32
    #: Bytes of one whole array as its shape and element type declare them. ZARR-005
    max_array_bytes: int = 1 << 40
    #: Chunks (zarr v3: inner chunks) of one array's grid. ZARR-005
    max_chunks: int = 1 << 24
    #: Entries of one directory that a reader lists (a per-leaf item of 1M leaves has 1M). LIMIT-005
    max_directory_entries: int = 1 << 24

    def __hash__(self) -> int:
        """The fields' hash, computed once: parsed documents are cached by the limits they were
        read under, a lookup per array of a load."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = hash(
                tuple(getattr(self, f.name) for f in fields(self))
            )
        return found  # type: ignore[no-any-return]


#: The limits every parser of ockpt enforces unless a caller passes its own.
LIMITS = Limits()

#: The limits in force in this context (a thread or task that a reader starts for its work
#: runs in a copy of its caller's context, so it sees the caller's limits).
_IN_FORCE: contextvars.ContextVar[Limits] = contextvars.ContextVar("ockpt_limits", default=LIMITS)


def current() -> Limits:
    """The limits in force: `LIMITS`, or those an enclosing `applied` (a ``limits=``) set."""
    return _IN_FORCE.get()


@contextmanager
def applied(limits: Limits | None) -> Iterator[Limits]:
    """Make `limits` the limits in force inside the block (None leaves those in force)."""
    if limits is None:
        yield current()
        return
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be an ockpt.limits.Limits, got {type(limits).__name__}")
    token = _IN_FORCE.set(limits)
    try:
        yield limits
    finally:
        _IN_FORCE.reset(token)


def memory_available() -> int | None:
    """Bytes this process may still allocate: the least of the system's available memory
    (``MemAvailable``), what its control group's limit leaves (cgroup v2 ``memory.max``, v1
    ``memory.limit_in_bytes``: a container's or a batch job's), and what its address-space
    limit leaves; None where none is known."""
    bounds = []
    meminfo = _system_file("/proc/meminfo")
    for line in (meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            bounds.append(int(line.split()[1]) * 1024)
            break
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        cap, used = _number(_system_file(limit)), _number(_system_file(usage))
        if cap is not None and used is not None and cap < 1 << 60:  # v1: 2^63 for no limit
            bounds.append(max(0, cap - used))
            break
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        statm = _number((_system_file("/proc/self/statm") or "").split(" ")[0])
        if soft != resource.RLIM_INFINITY and statm is not None:
            bounds.append(max(0, soft - statm * os.sysconf("SC_PAGE_SIZE")))
    except (ImportError, OSError, ValueError):
        pass
    return min(bounds) if bounds else None


def _system_file(path: str) -> str | None:
    """The text of a small file of the system (``/proc``, ``/sys``), or None."""
    try:
        with open(path, "rb") as f:  # not a checkpoint's file
            return f.read(1 << 16).decode("ascii", "replace")
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    """The integer `text` holds (``max``, the cgroup v2 word for no limit, is None)."""
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


#: Allocations smaller than this are not checked (a declared-size bomb is one large array;
#: reading the memory figures costs tens of microseconds, too much for each of 100,000 leaves).
CHECKED_ALLOCATION_BYTES = 64 << 20


def check_allocation(nbytes: int, *, what: str, file: object = None) -> None:
    """Refuse (`MemoryLimitError`, LIMIT-006) to allocate `nbytes` sized from declared shapes
    when that is more than `memory_available`, before anything is allocated."""
    if nbytes < CHECKED_ALLOCATION_BYTES:
        return
    available = memory_available()
    if available is not None and nbytes > available:
        from .errors import MemoryLimitError

        raise MemoryLimitError(
            f"{what} needs {nbytes} bytes, more than the {available} bytes of memory available",
            file=file,
        )


class Allocations:
    """The allocations of one load, checked as they add up (LIMIT-006): one of
    `CHECKED_ALLOCATION_BYTES` or more on its own (`check_allocation`), smaller ones each time
    they reach it together, so that a million small leaves cannot exhaust memory unchecked
    (each check reads what is left after those before it were made)."""

    def __init__(self) -> None:
        self._unchecked = 0

    def check(self, nbytes: int, *, what: str, file: object = None) -> None:
        if nbytes >= CHECKED_ALLOCATION_BYTES:
            check_allocation(nbytes, what=what, file=file)
            return
        self._unchecked += nbytes
        if self._unchecked >= CHECKED_ALLOCATION_BYTES:
            pending, self._unchecked = self._unchecked, 0
            check_allocation(pending, what=f"{what} and the smaller ones before it", file=file)


def read_capped(f: BinaryIO, limit: int) -> bytes:
    """The bytes of the open file `f`, at most ``limit + 1`` of them (more than `limit` tells
    the caller the file is over its limit), allocating for the file's size, not the limit."""
    try:
        size = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        size = limit
    return f.read(min(size, limit) + 1)
