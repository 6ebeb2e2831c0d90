"""ockpt: the open specification and reference implementation of the Orbax checkpoint format.

Importing ockpt never imports jax or orbax.
"""

from .checkpointables import load_checkpointables
from .documents import (
    ArrayMetadatas,
    CheckpointMetadata,
    MetadataDocument,
    RootMetadata,
    ShardingDocument,
    StringsDocument,
)
from .errors import (
    DocumentError,
    FormatError,
    LeafNameError,
    MemoryLimitError,
    MissingDataError,
    MsgpackError,
    NotACheckpointError,
    OcdbtError,
    OckptError,
    OckptWarning,
    PathNotFoundError,
    TargetError,
    UnsupportedError,
    WriteConflictError,
    ZarrFormatError,
)
from .layout import Kind, Layout, detect
from .manager import CheckpointManager
from .paths import leaf_name, parse_leaf_name
from .random_keys import RandomKey
from .reader import (
    Checkpoint,
    LazyArray,
    LeafMetadata,
    Subtree,
    load_pytree,
    open,
    pytree_metadata,
)
from .save_options import SaveOptions
from .validate import Report, validate
from .writer import (
    JsonItem,
    SaveHandle,
    save_checkpointables,
    save_pytree,
    save_pytree_async,
)

__version__ = "0.1.0"

__all__ = [
    "save_pytree",
    "save_checkpointables",
    "save_pytree_async",
    "SaveOptions",
    "SaveHandle",
    "JsonItem",
    "CheckpointManager",
    "detect",
    "Kind",
    "Layout",
    "MetadataDocument",
    "CheckpointMetadata",
    "RootMetadata",
    "ShardingDocument",
    "ArrayMetadatas",
    "StringsDocument",
    "OckptError",
    "NotACheckpointError",
    "PathNotFoundError",
    "FormatError",
    "DocumentError",
    "MsgpackError",
    "ZarrFormatError",
    "OcdbtError",
    "MissingDataError",
    "UnsupportedError",
    "WriteConflictError",
    "TargetError",
    "MemoryLimitError",
    "LeafNameError",
    "OckptWarning",
    "load_pytree",
    "load_checkpointables",
    "pytree_metadata",
    "open",
    "Checkpoint",
    "Subtree",
    "LazyArray",
    "LeafMetadata",
    "RandomKey",
    "leaf_name",
    "parse_leaf_name",
    "validate",
    "Report",
]
