"""Which key's value holds which stored bytes: a value is never decoded for two keys.

An OCDBT leaf entry points at a byte range of a data file, and nothing in the format stops many
keys from pointing at the same range; a per-leaf zarr chunk file can be a hard link to, or be
linked inside the checkpoint to, another. A 4 KB checkpoint whose 16,384 chunk keys all point
at one 2 KB zstd frame that decodes to 64 MiB would make a reader decode a terabyte. Writers
never share stored bytes between keys (spec/ocdbt.md OCDBT-024, spec/directories.md PATH-008),
so a reader records the bytes of each value it is about to read, by what the file is (not by its
name), and refuses one whose bytes overlap another key's: decoding work stays bounded by the
bytes stored, not by how many keys point at them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Hashable

from ..errors import FormatError
from ..names import ZARR_DOCUMENTS
from .base import Store

__all__ = ["ChunkFiles", "ValueClaims"]

#: ranges per sorted block: an insertion moves at most about this many list entries
_BLOCK = 512


class _Ranges:
    """Disjoint ``[start, end)`` ranges of one data file with the key holding each, sorted by
    start in blocks of at most 2 x `_BLOCK` (an insertion costs a bisect and a short list
    insertion, whatever the order ranges come in)."""

    def __init__(self) -> None:
        self.firsts: list[int] = []  # the first start of each block
        self.blocks: list[tuple[list[int], list[int], list[bytes]]] = []  # starts, ends, keys

    def holder(self, start: int, end: int) -> tuple[bytes, int, int] | None:
        """The (key, start, end) of a recorded range that overlaps ``[start, end)``."""
        b = bisect.bisect_right(self.firsts, start) - 1
        for j in (b, b + 1):  # the range before `start`, and the first one after it
            if not 0 <= j < len(self.blocks):
                continue
            starts, ends, keys = self.blocks[j]
            i = bisect.bisect_right(starts, start) - 1
            for k in (i, i + 1):
                if 0 <= k < len(starts) and starts[k] < end and start < ends[k]:
                    return keys[k], starts[k], ends[k]
        return None

    def add(self, start: int, end: int, key: bytes) -> None:
        if not self.blocks:
            self.firsts.append(start)
            self.blocks.append(([start], [end], [key]))
            return
        b = max(0, bisect.bisect_right(self.firsts, start) - 1)
        starts, ends, keys = self.blocks[b]
        i = bisect.bisect_right(starts, start)
        starts.insert(i, start)
        ends.insert(i, end)
        keys.insert(i, key)
        self.firsts[b] = starts[0]
        if len(starts) > 2 * _BLOCK:  # split: the second half becomes a block of its own
            half = (starts[_BLOCK:], ends[_BLOCK:], keys[_BLOCK:])
            del starts[_BLOCK:], ends[_BLOCK:], keys[_BLOCK:]
            self.blocks.insert(b + 1, half)
            self.firsts.insert(b + 1, half[0][0])


class ValueClaims:
    """The stored ranges of the values read from one database so far, by data file (by what
    the file is, not by its name: two names linked to one file are one file)."""

    def __init__(self) -> None:
        self._files: dict[Hashable, _Ranges] = {}
        self._lock = threading.Lock()

    def claim(
        self, key: bytes, file: Hashable, start: int, end: int
    ) -> tuple[bytes, int, int] | None:
        """Record that `key`'s value is bytes ``[start, end)`` of `file`; the (key, start, end)
        of another key's value whose stored bytes overlap it instead, where one does (nothing
        is recorded then). A key read again with the same range is no conflict; an empty value
        shares no byte."""
        if start == end:
            return None
        with self._lock:
            ranges = self._files.setdefault(file, _Ranges())
            found = ranges.holder(start, end)
            if found is None:
                ranges.add(start, end, key)
                return None
        return None if found == (key, start, end) else found


class ChunkFiles:
    """The chunk files of per-leaf zarr arrays read so far, by what they are."""

    def __init__(self) -> None:
        self._claims = ValueClaims()

    def claim(self, store: Store, key: str) -> None:
        """Before the file `key` of the item directory `store` is read as a chunk:
        PATH-008 where another chunk key named the same file (a hard link, a link inside the
        checkpoint). The documents of an array directory are no chunks."""
        if key.rsplit("/", 1)[-1] in ZARR_DOCUMENTS:
            return
        identity = store.identity(key)
        if identity is None:
            return
        holder = self._claims.claim(key.encode("utf-8", "surrogateescape"), identity, 0, 1)
        if holder is not None:
            raise FormatError(
                f"chunk file {key!r} is the same file as chunk file "
                f"{holder[0].decode('utf-8', 'surrogateescape')!r} (a hard link or a link "
                "inside the checkpoint): no two keys may share stored bytes",
                rule="PATH-008",
                file=store.file(key),
            )
