"""zarr v2 and v3 arrays as Orbax writes them (spec/arrays.md), decoded with numpy alone.

`open_metadata(get)` parses ``.zarray`` / ``zarr.json``; `read_region(meta, get, out, box)` fills
`out` from the chunks (and inner chunks of shards) that the region overlaps.
"""

from .array import ArrayMetadata, chunks_for_region, grid_index, open_metadata, read_region
from .shard_index import EMPTY, ShardIndex, ShardingCodec
from .v2 import ArrayV2Metadata
from .v3 import ArrayV3Metadata

__all__ = [
    "ArrayMetadata",
    "ArrayV2Metadata",
    "ArrayV3Metadata",
    "ShardingCodec",
    "ShardIndex",
    "EMPTY",
    "open_metadata",
    "read_region",
    "chunks_for_region",
    "grid_index",
]
