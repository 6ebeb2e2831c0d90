"""Read-only memory maps of local files: the zero-copy view of a raw value (spec loading §6.1).

`FileMaps` maps each file once, whole, and hands out views of byte ranges of it: the values of
one OCDBT data file share one mapping, so the process's count of mappings (Linux's
``vm.max_map_count``, 65530 by default) grows with the files of a checkpoint, not its values.
A view keeps its mapping alive; nothing is unmapped while an array uses it. A file truncated
while mapped makes a later access of the lost pages fault (SIGBUS), as with any memory map:
map only checkpoints that nothing rewrites while they are in use.
"""

from __future__ import annotations

import mmap
import os

from .byterange import ByteRange

__all__ = ["FileMaps", "MapRefused"]


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
