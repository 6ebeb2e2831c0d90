"""Everything of loading that touches jax, imported lazily.

No function here imports jax unless the caller's target already holds jax objects, so a load
into numpy never imports it (`jax_loaded` checks `sys.modules`, never imports).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "jax_loaded",
    "is_array_target",
    "children",
    "target_spec",
    "shard_boxes",
    "assemble",
    "key_target",
    "key_data_sharding",
    "wrap_key",
    "key_parts",
]

Box = tuple[tuple[int, int], ...]


def jax_loaded() -> bool:
    """True when the caller has imported jax (ockpt never does so on its own)."""
    return "jax" in sys.modules


def is_array_target(x: Any) -> bool:
    """A jax.Array or jax.ShapeDtypeStruct (a leaf that asks for a jax.Array)."""
    if not jax_loaded():
        return False
    import jax

    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct))


def children(node: Any) -> tuple[list[tuple[str, Any]], Callable[[list[Any]], Any]] | None:
    """One level of a custom pytree node (dataclass, flax struct, registered class).

    Returns ([(key text, child)], rebuild) where rebuild(list of new children) makes a node of
    the same type; None if jax is not loaded or jax sees `node` as a leaf.
    """
    if not jax_loaded():
        return None
    import jax

    if jax.tree_util.all_leaves([node]):
        return None
    flat, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    out = []
    for path, child in flat:
        if len(path) != 1:  # pragma: no cover - is_leaf stops one level down
            raise TypeError(f"cannot take {type(node).__name__} apart one level at a time")
        out.append((key_text(path[0]), child))
    return out, treedef.unflatten


def key_text(key: Any) -> str:
    """The key text the format stores for one jax key entry."""
    import jax

    tu = jax.tree_util
    if isinstance(key, tu.DictKey):
        return str(key.key)
    if isinstance(key, tu.SequenceKey):
        return str(key.idx)
    if isinstance(key, tu.GetAttrKey):
        return str(key.name)
    if isinstance(key, tu.FlattenedIndexKey):
        return str(key.key)
    return str(key)


def target_spec(x: Any) -> tuple[tuple[int, ...], np.dtype, Any]:
    """(shape, dtype, sharding) asked for by a jax.Array / ShapeDtypeStruct leaf.

    A ShapeDtypeStruct without a sharding asks for the default device.
    """
    import jax

    sharding = getattr(x, "sharding", None)
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return tuple(int(n) for n in x.shape), np.dtype(x.dtype), sharding


def canonical_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype jax would store an array of `dtype` as (64-bit types narrow without x64)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def shard_boxes(shape: Sequence[int], sharding: Any) -> dict[Any, Box]:
    """The region of the global array each addressable device of `sharding` holds."""
    out: dict[Any, Box] = {}
    for device, index in sharding.addressable_devices_indices_map(tuple(shape)).items():
        box = []
        for dim, s in zip(shape, index, strict=True):
            start, stop, step = s.indices(dim)
            if step != 1:  # pragma: no cover - jax shardings are contiguous
                raise NotImplementedError("strided shards")
            box.append((start, stop))
        out[device] = tuple(box)
    return out


def assemble(shape: Sequence[int], sharding: Any, per_device: dict[Any, Any]) -> Any:
    """A global jax.Array from one single-device array per addressable device."""
    import jax

    arrays = [per_device[d] for d in sharding.addressable_devices_indices_map(tuple(shape))]
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, arrays)


def to_device(host: np.ndarray, device: Any) -> Any:
    import jax

    return jax.device_put(host, device)


def from_host(host: Any, sharding: Any) -> Any:
    """An in-memory value (an inline msgpack-era leaf) placed with `sharding`."""
    import jax

    return jax.device_put(np.asarray(host), sharding)


# ---------------------------------------------------------------------------------------------
# Typed PRNG keys (spec loading §4.3).

#: the short names jax prints in a key dtype (``key<fry>``) -> the implementation's name
_KEY_TAGS = {"fry": "threefry2x32", "rbg": "rbg", "urbg": "unsafe_rbg"}


def _is_key_dtype(dtype: Any) -> bool:
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        return False


def _impl_name(dtype: Any) -> str:
    """The implementation name of a key dtype (``threefry2x32`` for ``key<fry>``)."""
    impl = getattr(dtype, "_impl", None)  # jax keeps the spec here; the printed tag is shorter
    name = getattr(impl, "name", None)
    if isinstance(name, str):
        return name
    tag = str(dtype).removeprefix("key<").removesuffix(">")
    return _KEY_TAGS.get(tag, tag)


def key_target(x: Any) -> tuple[tuple[int, ...], str, Any] | None:
    """(key shape, implementation, sharding) of a typed-key target leaf (a key jax.Array or a
    ShapeDtypeStruct of a key dtype); None for any other leaf."""
    if not jax_loaded() or not _is_key_dtype(getattr(x, "dtype", None)):
        return None
    import jax

    sharding = getattr(x, "sharding", None)
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return tuple(int(n) for n in x.shape), _impl_name(x.dtype), sharding


def key_data_sharding(sharding: Any, key_ndim: int, data_ndim: int) -> Any:
    """The sharding of the key data of a key array placed with `sharding`: the key-data
    dimensions are never split. None when the sharding is of a kind this cannot extend."""
    import jax

    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec) + (None,) * (key_ndim - len(tuple(sharding.spec)))
        return jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(*spec, *(None,) * data_ndim)
        )
    return None


def wrap_key(data: Any, impl: str) -> Any:
    """The typed key array whose key data is `data` (a jax.Array keeps its placement; jax
    spells a key array's sharding with one entry per dimension: ``P()`` becomes ``P(None)``)."""
    import jax

    return jax.random.wrap_key_data(data, impl=impl)


def key_parts(value: Any) -> tuple[str, Any] | None:
    """(implementation, key data as a jax.Array) of a typed key jax.Array; None otherwise."""
    if not jax_loaded() or not _is_key_dtype(getattr(value, "dtype", None)):
        return None
    import jax

    return _impl_name(value.dtype), jax.random.key_data(value)
