"""`DataFile`: one file of a checkpoint read by byte ranges, local or an object behind a URL.

OCDBT data files are read a range at a time (a node, a value). Locally a `LocalFile` keeps
the file's descriptor open and reads with ``pread``; behind a kvstore URL an `ObjectFile`
asks the store for each range. Both read like ``pread``: a range that reaches past the end of
the file comes back short, and the caller names the fault.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from .byterange import ByteRange
from .files import open_regular

if TYPE_CHECKING:
    from .location import Location

__all__ = ["DataFile", "LocalFile", "ObjectFile", "open_data_file"]


class DataFile(Protocol):
    """An open data file: its `display` name and `size` (None where a store tells no size
    without a read: object stores)."""

    display: str
    size: int | None

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
    """A local regular file on a kept descriptor (opened through `files.open_regular`)."""

    def __init__(self, path: str, display: str) -> None:
        self.fd = open_regular(path, file=display)  # a FIFO or directory: PATH-005
        self.size: int | None = os.fstat(self.fd).st_size
        self.display = display

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def preadv(self, view: memoryview, offset: int) -> int:
        return os.preadv(self.fd, [view], offset)

    def byte_range(self, offset: int, length: int) -> ByteRange:
        return ByteRange(os.dup(self.fd), offset, length, self.display)

    def close(self) -> None:
        os.close(self.fd)


class ObjectFile:
    """An object of a kvstore URL directory, each range read by a ranged request."""

    def __init__(self, location: Location, name: str, display: str) -> None:
        self.location = location
        self.name = name
        self.display = display
        self.size: int | None = None
        self.store = location.kvstore()  # one open store for every range of the file
        if not location.exists(name, store=self.store):
            raise FileNotFoundError(display)

    def pread(self, length: int, offset: int) -> bytes:
        data = self.location.read_range(self.name, offset, length, store=self.store)
        if data is None:  # deleted since it was opened
            return b""
        return data

    def preadv(self, view: memoryview, offset: int) -> int:
        data = self.pread(len(view), offset)
        view[: len(data)] = data
        return len(data)

    def byte_range(self, offset: int, length: int) -> None:
        return None

    def close(self) -> None:
        pass


def open_data_file(location: Location, name: str, *, full: str | None, display: str) -> DataFile:
    """The data file `name` of `location`: a `LocalFile` at the resolved local path `full`
    for a local directory, else an `ObjectFile`. Raises FileNotFoundError when it is absent."""
    if location.local is not None:
        assert full is not None
        return LocalFile(full, display)
    return ObjectFile(location, name, display)
