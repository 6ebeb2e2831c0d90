"""The language-neutral view of a pytree: a flat list of leaf records plus ``.npy`` files.

One format serves both directions of the language-neutral suite: the expected values of an
export (``ockpt conformance export``, `export.py`) and what a reader run by the command adapter
writes (`command.py`; the protocol is in conformance/README.md). A record is a JSON object:

- ``path``: the key path, one element per level: a string for a dict key (or a NamedTuple
  field), an integer for a list or tuple index; ``[]`` when the tree is a single leaf;
- ``leaf_name``: informative, ockpt's leaf-name spelling of the path (spec key-paths);
- ``kind`` and what it needs:

  ==============  =================================================================================
  ``array``       ``dtype`` (numpy / ml_dtypes name), ``shape``, ``file`` (a ``.npy``, see below)
  ``scalar``      ``dtype``; ``value`` (JSON; ints, bools, and floats as numbers or ``"nan"``,
                  ``"inf"``, ``"-inf"``) or ``file`` (a 0-d ``.npy``: exact bits); optional
                  ``py_type`` (``int``, ``float``, ``bool``, ``complex``): the reader gave a
                  host-language scalar rather than a typed one
  ``string``      ``value``
  ``prng_key``    ``impl`` (``threefry2x32``, ``rbg``, ``unsafe_rbg``), ``shape`` (the key shape),
                  ``file`` (the uint32 key data, shape ``shape + [2]`` or ``+ [4]``)
  ``none``        nothing else
  ``empty_dict``  an empty dict (or NamedTuple / custom node without children)
  ``empty_list``  an empty list or tuple
  ==============  =================================================================================

A ``.npy`` file holds plain numpy dtypes only. An ml_dtypes type (bfloat16, float8_*, float6_*,
float4_e2m1fn, int2, int4, uint2, uint4) is stored as its raw bits, the unsigned integer of its
width in bytes (``uint16`` for bfloat16, ``uint8`` for the others): for a type narrower than a
byte, the element in the low bits and zeros above (spec/arrays.md §7.2: -1 as int4 is ``0x0f``).
These are the bytes zarr stores, so a reader can copy a decoded chunk as it is. The record's
``dtype`` names the real type and ``npy_dtype`` the stored one.

Rebuilding a tree (`tree_from_records`) makes dicts from string path elements and lists from
integer ones; a tuple, a NamedTuple and an int dict key therefore come back as a list, a dict
and a string key, which is what a load without target may give (spec/loading.md §3.1).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import SUPPORTED
from ..paths import leaf_name
from ..random_keys import RandomKey

__all__ = [
    "KINDS",
    "OutputError",
    "storage_dtype",
    "to_storage",
    "from_storage",
    "iter_leaves",
    "write_records",
    "tree_from_records",
    "tree_features",
]

KINDS = ("array", "scalar", "string", "prng_key", "none", "empty_dict", "empty_list")
_PY_DTYPE = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


class OutputError(ValueError):
    """A reader's output does not follow the protocol (a failure of that reader)."""


def _dtype(name: str) -> np.dtype:
    if name in SUPPORTED:
        return np.dtype(SUPPORTED[name])
    raise OutputError(f"unknown dtype {name!r}")


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The plain numpy dtype a ``.npy`` holds for `dtype` (itself when numpy has it)."""
    dtype = np.dtype(dtype)
    if dtype.isbuiltin != 2:  # numpy's own
        return dtype
    return np.dtype(f"uint{dtype.itemsize * 8}")


def to_storage(array: np.ndarray) -> np.ndarray:
    """`array` as a ``.npy`` can hold it (raw bits, see the module docstring)."""
    want = storage_dtype(array.dtype)
    return array if want == array.dtype else array.view(want)


def from_storage(stored: np.ndarray, dtype_name: str) -> np.ndarray:
    """The array of dtype `dtype_name` that a ``.npy`` holding `stored` stands for."""
    dtype = _dtype(dtype_name)
    if stored.dtype == dtype:
        return stored
    want = storage_dtype(dtype)
    if stored.dtype != want:
        raise OutputError(
            f"a {dtype_name} array is stored as {want}, the file holds {stored.dtype}"
        )
    return stored.view(dtype)


# -- tree -> records --------------------------------------------------------------------------


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _key_parts(x: Any) -> tuple[str, np.ndarray] | None:
    """(implementation, uint32 key data) of a typed PRNG key; None for anything else."""
    impl = getattr(x, "impl", None)
    if isinstance(impl, str) and hasattr(getattr(x, "data", None), "shape"):
        return impl, np.asarray(x.data)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return str(jax.random.key_impl(x)), np.asarray(jax.random.key_data(x))
    return None


def _children(x: Any) -> list[tuple[str | int, Any]] | None:
    """The keyed children of a container; None for a leaf."""
    if isinstance(x, dict):
        return [(str(k), v) for k, v in x.items()]
    if _is_namedtuple(x):
        return list(x._asdict().items())
    if isinstance(x, (list, tuple)):
        return list(enumerate(x))
    return None


def iter_leaves(tree: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[list, Any]]:
    """(path, leaf) in tree order; an empty container is a leaf (itself)."""
    if _key_parts(tree) is None:
        children = _children(tree)
        if children:
            for key, child in children:
                yield from iter_leaves(child, (*path, key))
            return
    yield list(path), tree


def _float_json(value: float) -> Any:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _record(path: list, leaf: Any, save: Any) -> dict[str, Any]:
    """The record of one leaf; `save(array) -> file name` stores an array."""
    out: dict[str, Any] = {"path": path, "leaf_name": leaf_name([str(p) for p in path])}
    key = _key_parts(leaf)
    if key is not None:
        impl, data = key
        width = 2 if impl == "threefry2x32" else 4
        return out | {
            "kind": "prng_key",
            "impl": impl,
            "shape": list(data.shape[:-1]) if data.shape[-1:] == (width,) else list(data.shape),
            "file": save(np.asarray(data)),
        }
    if leaf is None:
        return out | {"kind": "none"}
    if isinstance(leaf, str):
        return out | {"kind": "string", "value": leaf}
    if isinstance(leaf, dict) or _is_namedtuple(leaf):
        return out | {"kind": "empty_dict"}
    if isinstance(leaf, (list, tuple)):
        return out | {"kind": "empty_list"}
    if isinstance(leaf, np.generic):  # before Python scalars: np.float64 is a float
        rec = out | {"kind": "scalar", "dtype": np.dtype(leaf.dtype).name}
        if leaf.dtype.kind in "biu":
            return rec | {"value": leaf.item()}
        return rec | {"file": save(np.asarray(leaf))}
    if isinstance(leaf, (bool, int, float, complex)):
        py = next(t for t in (bool, int, float, complex) if isinstance(leaf, t))
        rec = out | {"kind": "scalar", "dtype": _PY_DTYPE[py], "py_type": py.__name__}
        if py in (float, complex):
            return rec | {"file": save(np.asarray(leaf, dtype=rec["dtype"]))}
        return rec | {"value": py(leaf)}
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        array = np.asarray(leaf)
        rec = out | {"kind": "array", "dtype": array.dtype.name, "shape": list(array.shape)}
        stored = storage_dtype(array.dtype)
        if stored != array.dtype:
            rec["npy_dtype"] = stored.name
        return rec | {"file": save(array)}
    raise TypeError(
        f"{leaf_name([str(p) for p in path]) or '<root>'}: cannot record a {type(leaf).__name__}"
    )


def write_records(tree: Any, directory: Path, prefix: str = "arrays") -> list[dict[str, Any]]:
    """The records of `tree`'s leaves; arrays are saved as ``<directory>/<prefix>/NNNN.npy``
    and named relative to `directory`."""
    directory = Path(directory)
    count = [0]

    def save(array: np.ndarray) -> str:
        rel = f"{prefix}/{count[0]:04d}.npy"
        count[0] += 1
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(directory / rel, to_storage(array), allow_pickle=False)
        return rel

    return [_record(path, leaf, save) for path, leaf in iter_leaves(tree)]


# -- records -> tree --------------------------------------------------------------------------


def _load_npy(base: Path, rel: Any) -> np.ndarray:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in Path(rel).parts:
        raise OutputError(f"bad file name {rel!r}")
    try:
        return np.load(base / rel, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise OutputError(f"{rel}: {e}") from None


def _scalar_from_json(value: Any, dtype: np.dtype) -> Any:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        value = float(value)
    if isinstance(value, list) and len(value) == 2:
        value = complex(*value)
    if not isinstance(value, (bool, int, float, complex)):
        raise OutputError(f"scalar value {value!r} is not a JSON number or boolean")
    return np.asarray(value, dtype=dtype)[()]


def _leaf_value(rec: dict[str, Any], base: Path) -> Any:
    kind = rec.get("kind")
    if kind == "none":
        return None
    if kind == "empty_dict":
        return {}
    if kind == "empty_list":
        return []
    if kind == "string":
        if not isinstance(rec.get("value"), str):
            raise OutputError("a string record needs a string `value`")
        return rec["value"]
    if kind == "prng_key":
        data = _load_npy(base, rec.get("file"))
        if data.dtype != np.uint32 or not isinstance(rec.get("impl"), str):
            raise OutputError("a prng_key record needs `impl` and uint32 key data")
        return RandomKey(rec["impl"], data)
    if kind == "array":
        array = from_storage(_load_npy(base, rec.get("file")), str(rec.get("dtype")))
        if list(array.shape) != list(rec.get("shape", array.shape)):
            raise OutputError(f"shape {rec.get('shape')} but the file holds {list(array.shape)}")
        return array
    if kind == "scalar":
        dtype = _dtype(str(rec.get("dtype")))
        if "file" in rec:
            array = from_storage(_load_npy(base, rec["file"]), dtype.name)
            if array.shape != ():
                raise OutputError(f"a scalar file holds shape {list(array.shape)}")
            value = array[()]
        elif "value" in rec:
            value = _scalar_from_json(rec["value"], dtype)
        else:
            raise OutputError("a scalar record needs `value` or `file`")
        py = rec.get("py_type")
        if py is None:
            return value
        types = {"int": int, "float": float, "bool": bool, "complex": complex}
        if py not in types:
            raise OutputError(f"unknown py_type {py!r}")
        return types[py](value.item())
    raise OutputError(f"unknown kind {kind!r}")


class _Node:
    __slots__ = ("children", "sequence")

    def __init__(self, sequence: bool) -> None:
        self.sequence = sequence
        self.children: dict[Any, Any] = {}


def _build(node: Any, where: str) -> Any:
    if not isinstance(node, _Node):
        return node
    if node.sequence:
        n = len(node.children)
        if sorted(node.children) != list(range(n)):
            raise OutputError(
                f"{where or '<root>'}: list indices {sorted(node.children)} are not 0..{n - 1}"
            )
        return [_build(node.children[i], f"{where}/{i}") for i in range(n)]
    return {k: _build(v, f"{where}/{k}") for k, v in node.children.items()}


def tree_from_records(records: Any, base: Path) -> Any:
    """The tree the records describe (arrays loaded from files relative to `base`)."""
    if not isinstance(records, list):
        raise OutputError("`leaves` is not a list")
    root: Any = None
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("path"), list):
            raise OutputError(f"a leaf record without a `path` list: {str(rec)[:80]}")
        path = rec["path"]
        for p in path:
            if isinstance(p, bool) or not isinstance(p, (str, int)):
                raise OutputError(f"path element {p!r} is neither a string nor an integer")
        try:
            value = _leaf_value(rec, base)
        except OutputError as e:
            raise OutputError(f"{'/'.join(map(str, path)) or '<root>'}: {e}") from None
        if not path:
            if root is not None or len(records) != 1:
                raise OutputError("a root leaf must be the only record")
            return value
        if root is None:
            root = _Node(isinstance(path[0], int))
        node = root
        for depth, key in enumerate(path):
            if not isinstance(node, _Node) or node.sequence != isinstance(key, int):
                raise OutputError(f"{'/'.join(map(str, path))}: conflicts with another record")
            if depth == len(path) - 1:
                if key in node.children:
                    raise OutputError(f"{'/'.join(map(str, path))}: recorded twice")
                node.children[key] = value
            else:
                nxt = node.children.get(key)
                if nxt is None:
                    nxt = node.children[key] = _Node(isinstance(path[depth + 1], int))
                node = nxt
    if root is None:
        raise OutputError("no leaves (an empty tree is one `empty_dict` record at path [])")
    return _build(root, "")


# -- features ---------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tree_features(tree: Any) -> list[str]:
    """What a tree asks of a reader beyond arrays in nested dicts (the ``features`` of a case):
    ``scalars``, ``strings``, ``none``, ``empty`` (empty containers), ``sequences`` (lists,
    tuples, NamedTuples), ``typed_keys``, ``odd_keys`` (a dict key that is not an identifier),
    ``ml_dtypes`` (an array of a type numpy lacks), ``zero_size`` (an array without elements)."""
    found: set[str] = set()

    def walk(x: Any) -> None:
        if _key_parts(x) is not None:
            found.add("typed_keys")
            return
        if isinstance(x, dict):
            for k in x:
                if not (isinstance(k, str) and _PLAIN_KEY.fullmatch(k)):
                    found.add("odd_keys")
        children = _children(x)
        if children is not None:
            if not children:
                found.add("empty")
            elif isinstance(x, (list, tuple)):  # NamedTuples too
                found.add("sequences")
            for _, c in children:
                walk(c)
            return
        if x is None:
            found.add("none")
        elif isinstance(x, str):
            found.add("strings")
        elif isinstance(x, (bool, int, float, complex, np.generic)):
            found.add("scalars")
        elif hasattr(x, "dtype") and hasattr(x, "shape"):
            if np.dtype(x.dtype).isbuiltin == 2:
                found.add("ml_dtypes")
            if 0 in tuple(x.shape):
                found.add("zero_size")

    walk(tree)
    return sorted(found)
