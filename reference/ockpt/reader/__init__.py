"""The reference reader: `pytree_metadata`, `load_pytree` and `open`.

Reading follows spec/loading.md. A load resolves the path to one pytree item (LOAD-050..054),
builds the saved tree from `_METADATA` and/or the legacy msgpack `checkpoint` file, matches the
caller's target against it (LOAD-001..005), checks every requested dtype and shape
(LOAD-020..031), then reads only the regions the target needs, through an array engine
(`engines`).

Nothing here imports jax: jax targets go through `_jax`, which imports jax lazily and only when
the caller has imported it already. Nothing here imports tensorstore either: the tensorstore
engine does, on first use. Local checkpoints are read by ockpt's own decoders
(``backend="python"``, the default for them) and need no tensorstore; URLs (whose objects
the python engine can read too, by ranged requests) and ``backend="tensorstore"`` use it.

The package is divided by job: `item` (one opened item and its saved tree, `saved_tree`),
`metadata` (`pytree_metadata`), `load` (planning and loading) and `lazy` (`open`).
"""

from .lazy import Checkpoint, LazyArray, Subtree, open
from .load import CastPolicy, load_pytree
from .metadata import LeafMetadata, pytree_metadata

__all__ = [
    "LeafMetadata",
    "Checkpoint",
    "Subtree",
    "LazyArray",
    "CastPolicy",
    "pytree_metadata",
    "load_pytree",
    "open",
]
