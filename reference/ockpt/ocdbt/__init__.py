"""OCDBT, tensorstore's key-value database, as Orbax writes it (spec/ocdbt.md).

`format` decodes bytes into structures with no I/O; `tree.Database` reads a database directory;
`dump` renders structures as JSON comparable with ``tensorstore.ocdbt.dump()``.
"""

from .format import (
    BtreeGenerationReference,
    BtreeNode,
    Config,
    DataFileId,
    IndirectDataReference,
    InteriorNodeEntry,
    LeafNodeEntry,
    Manifest,
    VersionNodeReference,
    VersionTreeNode,
    decode_btree_node,
    decode_manifest,
    decode_version_tree_node,
)
from .tree import Database

__all__ = [
    "Database",
    "Manifest",
    "Config",
    "DataFileId",
    "IndirectDataReference",
    "BtreeGenerationReference",
    "VersionNodeReference",
    "VersionTreeNode",
    "BtreeNode",
    "LeafNodeEntry",
    "InteriorNodeEntry",
    "decode_manifest",
    "decode_version_tree_node",
    "decode_btree_node",
]
