"""Hypothesis strategies for pytrees of every dtype and shape the format holds, and for the
save options that pick its layouts: for property tests of code that writes or reads checkpoints.

    from hypothesis import given
    from ockpt.testing import strategies as cst

    @given(tree=cst.pytrees(), options=cst.save_options())
    def test_round_trip(tmp_path_factory, tree, options):
        path = tmp_path_factory.mktemp("c") / "ckpt"
        ockpt.save_pytree(path, tree, **options)
        assert_trees_equal(ockpt.load_pytree(path), tree)

Needs hypothesis (``pip install hypothesis``; ockpt's ``test`` extra has it).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from ..dtypes import NOT_WRITABLE, SUPPORTED

__all__ = ["dtypes", "arrays", "leaves", "keys", "pytrees", "save_options"]

#: Every dtype a checkpoint may hold that Orbax (tensorstore) can also write, by name.
WRITABLE = {name: dtype for name, dtype in SUPPORTED.items() if name not in NOT_WRITABLE}


def dtypes() -> st.SearchStrategy[np.dtype]:
    """Every writable dtype: numpy's, bfloat16, the float8s, float4, int2/int4 and more."""
    return st.sampled_from(sorted(WRITABLE.values(), key=str))


def _elements(dtype: np.dtype) -> st.SearchStrategy[Any]:
    """Values of `dtype`, as Python numbers the cast to `dtype` keeps exactly."""
    if dtype == np.bool_:
        return st.booleans()
    if dtype.kind in "iu" or (dtype.kind == "V" and "int" in dtype.name):
        info = ml_dtypes.iinfo(dtype) if dtype.kind == "V" else np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    if dtype.kind == "c":
        part = st.floats(-1e3, 1e3, width=32)
        return st.builds(complex, part, part)
    special = st.sampled_from([0.0, -0.0, 1.0, -1.0, float("nan"), float("inf")])
    return st.one_of(special, st.floats(-8, 8, width=32))


def arrays(
    dtype: np.dtype | None = None, *, max_dims: int = 3, max_side: int = 5
) -> st.SearchStrategy[np.ndarray]:
    """numpy arrays of `dtype` (default: any of `dtypes`), 0 to `max_dims` dimensions of 1 to
    `max_side` each (Orbax, and so ockpt's writer, refuses zero-size arrays); values as
    `dtype` holds them after a cast (NaN, inf and -0.0 included where it has them)."""
    if dtype is None:
        return dtypes().flatmap(lambda d: arrays(d, max_dims=max_dims, max_side=max_side))
    dtype = np.dtype(dtype)
    shapes = st.lists(st.integers(1, max_side), max_size=max_dims).map(tuple)

    def build(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
        count = int(np.prod(shape, dtype=np.int64))
        values = st.lists(_elements(dtype), min_size=count, max_size=count)
        if dtype.kind in "biuc":  # numpy's own: every value fits as it is
            wide = dtype
        else:  # ml_dtypes' floats and sub-byte integers: cast from a wide type
            wide = np.dtype(np.int64 if "int" in dtype.name else np.float64)
        return values.map(lambda v: np.array(v, dtype=wide).astype(dtype).reshape(shape))

    return shapes.flatmap(build)


def leaves() -> st.SearchStrategy[Any]:
    """A leaf of any kind a pytree checkpoint holds: an array, a Python or numpy scalar, a
    string, None or an empty container."""
    return st.one_of(
        arrays(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False),
        st.booleans(),
        dtypes().flatmap(lambda d: arrays(d, max_dims=0)).map(lambda a: a[()]),
        st.text(max_size=8),
        st.sampled_from([None, {}, [], ()]),
    )


def keys() -> st.SearchStrategy[str]:
    """Dict keys: names as models use them, and some a path or URL would escape. (Keys with
    ``.`` or ``~`` are left out: param names join keys with ``.``, and a string leaf's JSON
    pointer cannot hold ``~``, so the writer refuses some trees of them, PATH-001/002.)"""
    return st.one_of(
        st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
        st.sampled_from(["with space", "ключ", "0", "-1", "%", "a/b"]),
    )


def pytrees(
    leaf: st.SearchStrategy[Any] | None = None, *, max_leaves: int = 8
) -> st.SearchStrategy[Any]:
    """Nested dicts, lists and tuples of `leaf` (default: `leaves`), a dict at the top (what
    a checkpoint's tree is), at most `max_leaves` leaves."""
    children = st.recursive(
        leaf if leaf is not None else leaves(),
        lambda inner: st.one_of(
            st.dictionaries(keys(), inner, min_size=1, max_size=3),
            st.lists(inner, min_size=1, max_size=3),
            st.lists(inner, min_size=1, max_size=3).map(tuple),
        ),
        max_leaves=max_leaves,
    )
    return st.dictionaries(keys(), children, min_size=1, max_size=4)


def save_options() -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments of `ockpt.save_pytree` that choose a layout: v1 or item, OCDBT or
    per-leaf zarr, zarr v2 or v3, zstd or raw."""
    return st.fixed_dictionaries(
        {
            "layout": st.sampled_from(["v1", "item"]),
            "use_ocdbt": st.booleans(),
            "zarr_version": st.sampled_from([2, 3]),
            "compression": st.sampled_from(["zstd", None]),
        }
    )
