"""`DataFile`: one value of a store read by byte ranges (an OCDBT data file).

OCDBT data files are read a range at a time (a node, a value). A `LocalFile` keeps the file's
descriptor open and reads with ``pread``; a `base.RangedFile` asks its store for each range
(an object behind a URL, a value in memory). Both read like ``pread``: a range that reaches past
the end of the value comes back short, and the caller names the fault.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from typing import Protocol

from .byterange import ByteRange

__all__ = ["DataFile", "LocalFile"]


class DataFile(Protocol):
    """An open data file: its `display` name, `size` (None where a store tells no size
    without a read: object stores) and `identity`: what the file is, the same for every name
    of it (a local file's device and inode; None where each name is an object of its own)."""

    display: str
    size: int | None
    identity: Hashable | None

    def pread(self, length: int, offset: int) -> bytes:
        """Up to `length` bytes at `offset`; fewer (or none) where the file ends earlier."""
        ...

    def preadv(self, view: memoryview, offset: int) -> int:
        """Fill `view` from `offset`; the bytes read (fewer where the file ends earlier)."""
        ...

    def byte_range(self, offset: int, length: int) -> ByteRange | None:
        """The range as a `ByteRange` on a descriptor of its own, for streaming; None where
        the file is no local file."""
        ...

    def close(self) -> None: ...


class LocalFile:
    """A local regular file on a kept descriptor (`fd`, from `files.open_inside`, is owned and
    closed by it)."""

    def __init__(self, fd: int, display: str) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.size: int | None = st.st_size
        self.identity: Hashable | None = (st.st_dev, st.st_ino)
        self.display = display

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def preadv(self, view: memoryview, offset: int) -> int:
        return os.preadv(self.fd, [view], offset)

    def byte_range(self, offset: int, length: int) -> ByteRange:
        return ByteRange(os.dup(self.fd), offset, length, self.display)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
