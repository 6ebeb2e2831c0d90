"""Which key's value holds which stored bytes: a value is never decoded for two keys.

An OCDBT leaf entry points at a byte range of a data file, and nothing in the format stops many
keys from pointing at the same range. A 4 KB checkpoint whose 16,384 chunk keys all point at
one 2 KB zstd frame that decodes to 64 MiB would make a reader decode a terabyte. Writers never
share stored bytes between keys (spec/ocdbt.md, OCDBT-024), so a reader records the range of
each value it is about to read and refuses one whose bytes overlap another key's: decoding work
stays bounded by the bytes stored, not by how many keys point at them.
"""

from __future__ import annotations

import bisect
import threading

from .format import IndirectDataReference

__all__ = ["ValueClaims"]

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
    """The stored ranges of the values read from one database so far, by data file."""

    def __init__(self) -> None:
        self._files: dict[bytes, _Ranges] = {}
        self._lock = threading.Lock()

    def claim(self, key: bytes, ref: IndirectDataReference) -> tuple[bytes, int, int] | None:
        """Record that `key`'s value is `ref`; the (key, start, end) of another key's value
        whose stored bytes overlap it instead, where one does (nothing is recorded then). A key
        read again with the same range is no conflict; an empty value shares no byte."""
        start, end = ref.offset, ref.offset + ref.length
        if start == end:
            return None
        with self._lock:
            ranges = self._files.setdefault(ref.file_id.path, _Ranges())
            found = ranges.holder(start, end)
            if found is None:
                ranges.add(start, end, key)
                return None
        return None if found == (key, start, end) else found
