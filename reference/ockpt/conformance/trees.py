"""Trees the round-trip and consumer cases save: deterministic, built from seeds.

`build(name, jax_mesh=None)` returns a fresh tree; the same call in another process gives the
same values, so worker processes rebuild the expected tree instead of receiving it.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["build", "leaf_kinds", "TREE_DTYPES", "Point"]

#: the dtypes of the "dtypes" tree: those every Orbax release since 0.4 writes.
TREE_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "int4",
]

Point = namedtuple("Point", ["x", "y"])


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def _values(name: str, rng: np.random.Generator) -> np.ndarray:
    dt = _dtype(name)
    if name == "bool":
        return np.array([[True, False, True], [False, False, True]])
    if dt.kind in "iu" or name in ("int4",):
        info = ml_dtypes.iinfo(dt) if name == "int4" else np.iinfo(dt)
        vals = [info.min, info.max, 0, 1, info.max // 3, info.min // 2]
        return (
            np.array(vals, dtype=np.int64 if info.min < 0 else np.uint64).astype(dt).reshape(2, 3)
        )
    specials = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 1e-3]
    base = np.array(specials + list(rng.standard_normal(4)), dtype=np.float64)
    with np.errstate(all="ignore"):
        if dt.kind == "c":
            return (base + 1j * base[::-1]).astype(dt).reshape(3, 4)
        return base.astype(dt).reshape(3, 4)


def _dtypes_tree(rng: np.random.Generator) -> dict[str, Any]:
    return {name: _values(name, rng) for name in TREE_DTYPES}


def _containers_tree(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "params": {
            "w": rng.standard_normal((4, 3)).astype(np.float32),
            "b": np.arange(3, dtype=np.int32),
            "layers": [
                {"k": np.full((2,), 0.5, np.float32)},
                {"k": np.zeros((2,), np.float32), "frozen": True},
            ],
        },
        "point": Point(x=np.arange(4, dtype=np.float64), y=2.5),
        "pair": (np.array(7, dtype=np.int16), "second"),
        "step": 1234567890123,
        "lr": 3e-4,
        "flag": False,
        "f32": np.float32(0.25),
        "i8": np.int8(-7),
        "zero_d": np.array(1.25, dtype=np.float32),
        "name": "run-\u00e9\U0001f600",
        "empty_str": "",
        "none": None,
        "empty_dict": {},
        "empty_list": [],
        "empty_tuple": (),
        "odd key.with/dots": np.array([1, 2], dtype=np.uint8),
    }


def _sharded_tree(mesh: Any) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    specs = {
        "xy": P("x", "y"),
        "x": P("x"),
        "y": P(None, "y"),
        "yx": P("y", "x"),
        "rep": P(),
        "bf16": P(("x", "y")),
    }
    host = sharded_values()
    values = {key: (host[key], spec) for key, spec in specs.items()}
    out: dict[str, Any] = {}
    for key, (value, spec) in values.items():
        sharding = NamedSharding(mesh, spec)
        out[key] = jax.make_array_from_callback(value.shape, sharding, lambda idx, v=value: v[idx])
    out["host"] = host["host"]
    return out


def sharded_values() -> dict[str, Any]:
    """The host values of the "sharded" tree (no jax needed)."""
    rng = np.random.default_rng(3)
    return {
        "xy": rng.standard_normal((8, 4)).astype(np.float32),
        "x": np.arange(24, dtype=np.int32).reshape(8, 3),
        "y": rng.standard_normal((4, 6)).astype(np.float32),
        "yx": np.arange(16, dtype=np.float32).reshape(4, 4),
        "rep": np.arange(6, dtype=np.float32),
        "bf16": rng.standard_normal((8,)).astype(ml_dtypes.bfloat16),
        "host": np.linspace(0, 1, 5, dtype=np.float32),
    }


def build(name: str, mesh: Any = None) -> Any:
    """The tree `name` ("dtypes", "containers", "sharded"); "sharded" needs a (4, 2) mesh with
    axes ("x", "y") (the default: the first 8 jax devices)."""
    if name == "dtypes":
        return _dtypes_tree(np.random.default_rng(1))
    if name == "containers":
        return _containers_tree(np.random.default_rng(2))
    if name == "sharded":
        if mesh is None:
            import jax

            devices = jax.devices()
            if len(devices) < 8:
                raise RuntimeError(
                    f"the sharded tree needs 8 devices, this process has {len(devices)}"
                )
            mesh = jax.sharding.Mesh(np.array(devices[:8]).reshape(4, 2), ("x", "y"))
        return _sharded_tree(mesh)
    raise KeyError(name)


def leaf_kinds(tree: Any) -> set[str]:
    """The leaf kinds of the capability vocabulary that `tree` holds."""
    kinds: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if not x:
                kinds.add("empty")
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            if not x:
                kinds.add("empty")
            for v in x:
                walk(v)
        elif x is None:
            kinds.add("none")
        elif isinstance(x, str):
            kinds.add("string")
        elif isinstance(x, np.ndarray):
            kinds.add("ndarray")
        elif isinstance(x, np.generic):
            kinds.add("numpy_scalar")
        elif isinstance(x, (bool, int, float)):
            kinds.add("scalar")
        else:
            kinds.add("jax.Array")

    walk(tree)
    return kinds


def tree_dtypes(tree: Any) -> set[str]:
    out: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif hasattr(x, "dtype") and hasattr(x, "shape"):
            out.add(np.dtype(x.dtype).name)

    walk(tree)
    return out


def leaves(tree: Any) -> list[Any]:
    """The leaves of nested dicts, lists and tuples (NamedTuples included)."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [leaf for v in tree for leaf in leaves(v)]
    return [tree]


def keys_as_data(tree: Any) -> Any:
    """`tree` with each typed PRNG key (an object with `impl` and `data`) replaced by its uint32
    key data: the target under which every reader gives a key's raw data back."""
    if isinstance(tree, dict):
        return type(tree)({k: keys_as_data(v) for k, v in tree.items()})
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        return type(tree)(*(keys_as_data(v) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(keys_as_data(v) for v in tree)
    if isinstance(getattr(tree, "impl", None), str) and hasattr(tree, "data"):
        return np.asarray(tree.data)
    return tree
