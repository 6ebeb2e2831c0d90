"""ockpt: the open specification and reference implementation of the Orbax checkpoint format.

Importing ockpt never imports jax or orbax. The writer and the checkpoint manager are imported
when first named (`ockpt.save_pytree`, `from ockpt import CheckpointManager`): a reader does not
pay for them.
"""

from typing import TYPE_CHECKING, Any

from .checkpointables import load_checkpointables
from .compatibility import CompatReport, compat
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
from .fingerprints import fingerprint
from .layout import Kind, Layout, detect
from .limits import Limits
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

if TYPE_CHECKING:
    from .manager import CheckpointManager
    from .writer import (
        JsonItem,
        SaveHandle,
        save_checkpointables,
        save_pytree,
        save_pytree_async,
    )

#: names imported when first asked for (`__getattr__`)
_WRITER_NAMES = frozenset(
    {"JsonItem", "SaveHandle", "save_checkpointables", "save_pytree", "save_pytree_async"}
)
_LAZY_NAMES = _WRITER_NAMES | {"CheckpointManager"}

__version__ = "0.1.0"

__all__ = [
    "save_pytree",
    "save_checkpointables",
    "save_pytree_async",
    "SaveOptions",
    "Limits",
    "SaveHandle",
    "JsonItem",
    "CheckpointManager",
    "detect",
    "fingerprint",
    "compat",
    "CompatReport",
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


def __getattr__(name: str) -> Any:
    """The writer's and the manager's public names, imported on first use (PEP 562) and then
    kept as attributes of the package."""
    if name in _WRITER_NAMES:
        from . import writer as module
    elif name == "CheckpointManager":
        from . import manager as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_NAMES)
