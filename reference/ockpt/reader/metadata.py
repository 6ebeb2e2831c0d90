"""`pytree_metadata`: the saved tree with a `LeafMetadata` per leaf, no array bytes read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _gc, random_keys
from ..documents.sharding import ShardingSpec
from ..errors import OckptError, UnsupportedError
from ..limits import Limits, applied
from ..paths import KeyType

if TYPE_CHECKING:
    import tensorstore as ts
from ..saved_tree import EMPTY_VALUES, Empty, SavedLeaf, ordered
from .item import OpenedItem

__all__ = ["LeafMetadata", "pytree_metadata", "metadata_tree"]

# ---------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class LeafMetadata:
    """What a checkpoint says about one leaf, read without touching array bytes.

    `path` is the key path (key texts), `value_type` the `_METADATA` value type (``"array"``
    for a msgpack-era array leaf of unknown kind, ``"inline"`` for a value stored in the
    msgpack file). `dtype` is what `load_pytree` gives without a target; `storage_dtype` the
    element type of the stored zarr array. `chunk_shape` is the zarr chunk grid (None for
    strings and inline values). `sharding` is the saved `_sharding` entry, as data.
    A typed PRNG key array has `random_key_impl` (``threefry2x32``, ``rbg``, ``unsafe_rbg``)
    and `key_shape`, the key array's shape; `shape` and `dtype` are those of its stored
    ``uint32`` key data (LOAD-025). `key_shape` is None for an implementation ockpt does
    not know.
    """

    path: tuple[str, ...]
    param_name: str
    value_type: str
    shape: tuple[int, ...]
    dtype: np.dtype | None
    storage_dtype: np.dtype | None
    chunk_shape: tuple[int, ...] | None
    nbytes: int
    sharding: ShardingSpec | None = None
    write_shape: tuple[int, ...] | None = None
    random_key_impl: str | None = None
    key_shape: tuple[int, ...] | None = None


# ---------------------------------------------------------------------------------------------
# Metadata.


def _leaf_metadata(
    item: OpenedItem,
    leaf: SavedLeaf,
    open_array: Callable[[str], Any],
    shardings: Mapping[str, ShardingSpec],
    written: Mapping[str, Any],
    key_impls: Mapping[str, str],
) -> LeafMetadata:
    sharding = shardings.get(leaf.param_name)
    ws = getattr(written.get(leaf.param_name), "write_shape", None)
    if leaf.source == "array":
        a = open_array(leaf.param_name)
        impl = key_impls.get(leaf.param_name)
        key = None
        if impl is not None:
            try:
                key = random_keys.key_shape(
                    impl, a.shape, a.dtype, file=a.file, leaf=leaf.param_name
                )
            except UnsupportedError:
                pass  # an implementation outside the table: named, its key shape unknown
        return LeafMetadata(
            leaf.path,
            leaf.param_name,
            leaf.value_type,
            a.shape,
            a.dtype,
            a.dtype,
            a.chunk_shape,
            a.nbytes,
            sharding,
            ws,
            impl,
            key,
        )
    if leaf.source == "string":
        text = item.strings(leaf)
        return LeafMetadata(
            leaf.path, leaf.param_name, leaf.value_type, (), None, None, None, len(text.encode())
        )
    value = leaf.inline
    if isinstance(value, (str, bytes)):
        size = len(value.encode()) if isinstance(value, str) else len(value)
        return LeafMetadata(leaf.path, leaf.param_name, leaf.value_type, (), None, None, None, size)
    arr = np.asarray(value)
    return LeafMetadata(
        leaf.path,
        leaf.param_name,
        leaf.value_type,
        tuple(arr.shape),
        arr.dtype,
        None,
        None,
        int(arr.nbytes),
        sharding,
    )


def _quick_store(item: OpenedItem, names: list[str]) -> Any:
    """A store that opens the zarr metadata of `names` faster than the item's, one array at a
    time (the tensorstore engine's: ockpt's own decoder instead of a tensorstore open per
    array; the python engine's: every metadata key found by one walk of the B+tree of an
    OCDBT item, not a lookup per array); None when there is none."""
    return item.store.metadata_store(len(names))


def metadata_tree(item: OpenedItem) -> Any:
    """The saved tree with a `LeafMetadata` per leaf. Arrays are opened one at a time and not
    kept where that costs nothing extra (the python decoder), so memory is the result's."""
    with applied(item.limits), _gc.paused():  # a `LeafMetadata` per leaf, all kept
        return _metadata_tree(item)


def _metadata_tree(item: OpenedItem) -> Any:
    names = [n for n, leaf in item.leaves.items() if leaf.source == "array"]
    quick = _quick_store(item, names)
    if quick is not None:
        try:
            return _build_metadata(item, quick.open)
        except (OckptError, OSError, ValueError):
            pass  # the item's own store opens the arrays below and names the fault
        finally:
            quick.close()
    if not item.store.BULK_OPEN:
        return _build_metadata(item, item.array)
    return _build_metadata(item, item.arrays(names).__getitem__)


def _build_metadata(item: OpenedItem, open_array: Callable[[str], Any]) -> Any:
    shardings = item.shardings()
    written = item.array_metadatas()
    key_impls = item.random_key_impls()

    def leaf(node: SavedLeaf) -> LeafMetadata:
        return _leaf_metadata(item, node, open_array, shardings, written, key_impls)

    return _built(item.tree, leaf)


def _built(node: Any, leaf: Callable[[SavedLeaf], LeafMetadata]) -> Any:
    """The saved tree `node` with ``leaf(l)`` for each leaf `l` (a module function, not a
    closure that calls itself: that cycle kept the item alive until the collector ran)."""
    if isinstance(node, SavedLeaf):
        return leaf(node)
    if isinstance(node, Empty):
        return EMPTY_VALUES[node.node]()
    if node.kind is KeyType.SEQUENCE:
        return [_built(v, leaf) for _, v in ordered(node)]
    return {k: _built(v, leaf) for k, v in node.children.items()}


def pytree_metadata(
    path: Any,
    *,
    step: int | None = None,
    item: str | None = None,
    context: ts.Context | None = None,
    backend: str = "auto",
    limits: Limits | None = None,
) -> Any:
    """The saved tree with a `LeafMetadata` per leaf; reads no array bytes, never imports jax.

    `path`: an item directory, a v1 checkpoint root, a checkpoint-manager root (`step`, latest
    by default) or step, local or a tensorstore kvstore URL. Dict nodes come back as dicts,
    sequence nodes as lists, empty nodes as empty containers / None. `limits` replaces the
    default `ockpt.limits.LIMITS` on what the checkpoint's files may declare.
    """
    # one pause of the collector for the item and the result: the item (its saved tree, a
    # node and a leaf per saved leaf) is gone before the collector next runs, which then
    # walks the result alone
    with _gc.paused():
        return _opened_metadata(path, step, item, context, backend, limits)


def _opened_metadata(
    path: Any,
    step: int | None,
    item: str | None,
    context: Any,
    backend: str,
    limits: Limits | None,
) -> Any:
    opened = OpenedItem(path, step=step, item=item, context=context, backend=backend, limits=limits)
    with opened:
        return metadata_tree(opened)
