"""Memory maps of local files: the zero-copy view of raw values (spec loading §6.1).

`FileMaps` maps each file once, whole, read-only, and hands out views of byte ranges of it: the
values of one OCDBT data file share one mapping, so the process's count of mappings (Linux's
``vm.max_map_count``, 65530 by default) grows with the files of a checkpoint, not its values.
`assemble` maps several ranges (the chunks of one array, each starting on a page of its file)
side by side into one span of address space (Linux ``MAP_FIXED``), so an array stored in
chunks along its first axis is one view too; its pages are private copy-on-write, so a write
through it never reaches the file. A view keeps its mappings alive; nothing is unmapped while
an array uses it. A file truncated while mapped makes a later access of the lost pages fault
(SIGBUS), as with any memory map: map only checkpoints nothing rewrites while they are in use.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from .byterange import ByteRange

__all__ = ["FileMaps", "MapRefused", "assemble"]

_MAP_FIXED = 0x10  # Linux's values (the mmap module exports neither)
_PROT_NONE = 0
_libc: Any = None


class MapRefused(Exception):
    """A range that cannot be mapped, and why (the reader reads it instead, or says so)."""


class FileMaps:
    """The mappings of one load or one opened checkpoint, by file (device and inode)."""

    def __init__(self) -> None:
        self._maps: dict[tuple[int, int], mmap.mmap] = {}

    def view(self, src: ByteRange) -> memoryview:
        """The bytes of `src` as a read-only view of its file's pages (no copy). Raises
        `MapRefused` where the file is shorter than the range or cannot be mapped."""
        st = os.fstat(src.fd)
        end = src.offset + src.length
        if st.st_size < end:
            raise MapRefused(f"the file holds {st.st_size} bytes, the value ends at {end}")
        key = (st.st_dev, st.st_ino)
        mapped = self._maps.get(key)
        if mapped is None or len(mapped) < end:
            try:
                mapped = mmap.mmap(src.fd, 0, access=mmap.ACCESS_READ)  # the whole file
            except (OSError, ValueError) as e:  # ENOMEM: the process's map count; or emptied
                raise MapRefused(f"the file cannot be mapped ({e})") from None
            if len(mapped) < end:  # cut short since the fstat
                raise MapRefused(f"the file holds {len(mapped)} bytes, the value ends at {end}")
            self._maps[key] = mapped
        return memoryview(mapped)[src.offset : end]


def _c() -> Any:
    """The C library's mmap and munmap, typed (loaded on first use)."""
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        )
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        _libc = libc
    return _libc


def assemble(parts: Sequence[tuple[ByteRange, int]]) -> memoryview:
    """The first `used` bytes of each range of `parts` ((range, used)), side by side, as one
    view of their files' pages. Every range must start on a page of its file, every part but
    the last use whole pages, and each file hold its range; `MapRefused` otherwise."""
    if not sys.platform.startswith("linux"):
        raise MapRefused("a view of several chunks needs Linux (MAP_FIXED)")
    page = mmap.PAGESIZE
    for i, (src, used) in enumerate(parts):
        if src.offset % page:
            raise MapRefused(f"a chunk starts at byte {src.offset} of its file, not on a page")
        if i < len(parts) - 1 and used % page:
            raise MapRefused(f"its chunks hold {used} bytes, not whole pages of {page}")
        if used > src.length or os.fstat(src.fd).st_size < src.offset + used:
            raise MapRefused("a chunk's file is shorter than its value")
    total = sum(used for _, used in parts)
    span = -(-total // page) * page
    c = _c()
    base = c.mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base is None or base == ctypes.c_void_p(-1).value:
        raise MapRefused(f"no address space for it ({os.strerror(ctypes.get_errno())})")
    view = (ctypes.c_char * total).from_address(base)
    weakref.finalize(view, c.munmap, base, span)  # once the last array over it is gone
    at = 0
    for src, used in parts:
        length = -(-used // page) * page
        flags = mmap.MAP_PRIVATE | _MAP_FIXED
        prot = mmap.PROT_READ | mmap.PROT_WRITE  # private: a write copies the page
        if c.mmap(base + at, length, prot, flags, src.fd, src.offset) != base + at:
            raise MapRefused(f"a chunk cannot be mapped ({os.strerror(ctypes.get_errno())})")
        at += used
    return memoryview(view).cast("B")
