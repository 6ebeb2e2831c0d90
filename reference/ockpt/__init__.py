"""ockpt: the open specification and reference implementation of the Orbax checkpoint format.

Importing ockpt never imports jax or orbax.
"""

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
    MissingDataError,
    MsgpackError,
    NotACheckpointError,
    OcdbtError,
    OckptError,
    OckptWarning,
    UnsupportedError,
    WriteConflictError,
    ZarrFormatError,
)
from .layout import Kind, Layout, detect

__version__ = "0.1.0"

__all__ = [
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
    "FormatError",
    "DocumentError",
    "MsgpackError",
    "ZarrFormatError",
    "OcdbtError",
    "MissingDataError",
    "UnsupportedError",
    "WriteConflictError",
    "OckptWarning",
]
