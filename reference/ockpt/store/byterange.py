"""A byte range of an open file, read in bounded pieces (large chunks are streamed from it).

A stored value of hundreds of MiB (one zarr chunk holding a whole unsharded array, as Orbax
writes them) is decoded straight from its file rather than read into memory first:
`ByteRange` gives the zstd stream decoder a ``read(n)`` source, ``readinto`` and
``read_scattered`` (many buffers, one ``os.preadv``) for raw chunks, and indexing with tiny
reads so that the frame's block headers can be walked to check its length
(`ocdbt.format.zstd_frame_size`) without reading the blocks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ByteRange", "vectored"]

_WINDOW = 64  # bytes read per miss when indexing (block headers are 3 bytes)
#: Buffers per ``preadv``/``writev`` call (Linux's IOV_MAX; the smallest of the platforms
#: Python runs on is 1024).
IOV_MAX = 1024


def vectored(buffers: Sequence[Any], call: Callable[[list[Any], int], int]) -> int:
    """Move the bytes of the 1-D byte `buffers` (memoryviews, uint8 arrays), in order, with
    ``call(batch, done)`` (a ``preadv`` or ``writev`` of at most `IOV_MAX` buffers, `done`
    the bytes moved before it, returning how many it moved): a buffer moved in part is
    continued by the next call. Returns the bytes moved: short only when a call moved none."""
    done, i, head = 0, 0, None  # head: what is left of buffers[i] once partly moved
    while i < len(buffers):
        batch = list(buffers[i : i + IOV_MAX])
        if head is not None:
            batch[0] = head
        n = call(batch, done)
        if not n:
            break
        done += n
        for b in batch:
            if n < len(b):
                head = b[n:]
                break
            n -= len(b)
            i += 1
            head = None
    return done


class ByteRange:
    """`length` bytes at `offset` of the open file `fd`, which this object closes (unless it
    is a `part` of another)."""

    def __init__(
        self, fd: int, offset: int, length: int, display: str, *, owner: bool = True
    ) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length
        self.display = display
        self.owner = owner  # False: a part of another range, which closes the file
        self.position = 0  # of the sequential `read`/`readinto`
        self._window_at = -1
        self._window = b""

    def __enter__(self) -> ByteRange:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0 and self.owner:
            os.close(self.fd)
        self.fd = -1

    def part(self, offset: int, length: int) -> ByteRange:
        """`length` bytes at `offset` within this range, on the same file (not owned)."""
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"part [{offset}, {offset + length}) outside a range of {self.length}")
        return ByteRange(self.fd, self.offset + offset, length, self.display, owner=False)

    def __len__(self) -> int:
        return self.length

    def pread(self, at: int, n: int) -> bytes:
        """Up to `n` bytes at `at` within the range (fewer at its end or if the file shrank)."""
        n = max(0, min(n, self.length - at))
        return os.pread(self.fd, n, self.offset + at) if n else b""

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.length)
            if step != 1:
                raise ValueError("ByteRange slices take step 1")
            return self.pread(start, stop - start)
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        if not self._window_at <= index < self._window_at + len(self._window):
            self._window_at, self._window = index, self.pread(index, _WINDOW)
            if not self._window:
                raise IndexError(index)
        return self._window[index - self._window_at]

    def read(self, n: int = -1) -> bytes:
        """The next `n` bytes (all that remain when n < 0): a source for a stream decoder."""
        if n < 0:
            n = self.length - self.position
        data = self.pread(self.position, n)
        self.position += len(data)
        return data

    def read_scattered(self, buffers: Sequence[Any], at: int) -> int:
        """Fill the 1-D byte `buffers` (memoryviews, uint8 arrays) one after another from `at`
        within the range: ``os.preadv`` copies from the page cache straight into them, so a
        raw chunk lands in the rows of its output with no copy in between. The number of
        bytes read (short only when the file shrank); buffers that run past the range are
        refused."""
        if at < 0 or at + sum(len(b) for b in buffers) > self.length:
            raise ValueError(f"buffers from {at} run past a range of {self.length}")
        start = self.offset + at
        return vectored(buffers, lambda batch, done: os.preadv(self.fd, batch, start + done))

    def readinto(self, view: memoryview) -> int:
        """Fill `view` from the current position; the number of bytes read (short at the end
        of the range or when the file shrank)."""
        got = 0
        want = min(len(view), self.length - self.position)
        while got < want:
            n = os.preadv(self.fd, [view[got:want]], self.offset + self.position + got)
            if not n:
                break
            got += n
        self.position += got
        return got
