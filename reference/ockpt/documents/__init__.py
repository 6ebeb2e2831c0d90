"""Typed, immutable models of the JSON documents of an Orbax checkpoint.

Each model parses with `from_json` / `from_bytes` / `read` (raising `DocumentError` that names
the file and JSON pointer) and serializes with `to_json` / `to_bytes`; unknown keys are kept so
a round trip is exact.
"""

from ._json import ABSENT
from .array_metadatas import ArrayMetadata, ArrayMetadatas
from .checkpoint_metadata import CheckpointMetadata, RootMetadata
from .metadata import MetadataDocument, TreeEntry, ValueMetadata
from .sharding import (
    NamedShardingSpec,
    ShardingDocument,
    ShardingSpec,
    SingleDeviceShardingSpec,
    parse_sharding,
)
from .strings import StringsDocument

__all__ = [
    "ABSENT",
    "ArrayMetadata",
    "ArrayMetadatas",
    "CheckpointMetadata",
    "RootMetadata",
    "MetadataDocument",
    "TreeEntry",
    "ValueMetadata",
    "NamedShardingSpec",
    "ShardingDocument",
    "ShardingSpec",
    "SingleDeviceShardingSpec",
    "parse_sharding",
    "StringsDocument",
]
