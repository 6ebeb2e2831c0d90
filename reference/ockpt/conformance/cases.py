"""The case catalogue, as data.

Each group lists its cases with what they need from the adapters' capabilities (see
`protocol.supports`), the spec rule they check and their expected outcome. The runner
(`runner.py`) interprets these tables; adding a case is adding a row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "GROUPS",
    "WRITE_LAYOUTS",
    "ROUND_TRIP_TREES",
    "READ_TREE",
    "READ_CASES",
    "CHECKED_PAIRS",
    "TOPOLOGY_DEVICES",
    "READER_RULES",
    "FEATURES",
]

#: group name -> what it checks (report headings).
GROUPS = {
    "round_trip": "producer writes a tree, consumer loads it (with and without target)",
    "fixtures": "every golden fixture written by a real Orbax release, read by every reader",
    "reads": "partial loads, placeholders, missing keys, pad/truncate, checked and lossy casts",
    "casts": "the full saved x target dtype table: exact casts give every value, lossy refused",
    "topology": "saved on a (4, 2) mesh or by 2 processes; loaded on 1, 2, 4, 8 devices",
    "bad_corpus": "damaged checkpoints (fixtures/bad): a clean refusal where the damage is read",
    "databases": "bare OCDBT databases (interior nodes, version trees): their latest keys",
}

#: features of a case: what it asks of a reader beyond arrays in nested dicts. A reader that
#: declares ``features`` in its reads capabilities runs only the cases whose features it lists
#: (`leaves.tree_features` and `fixture_cases` compute them).
FEATURES: dict[str, str] = {
    "scalars": "scalar leaves (Python or numpy scalars)",
    "strings": "string leaves (_strings.json, or the msgpack file in old releases)",
    "none": "None leaves",
    "empty": "empty containers ({}, [], ())",
    "sequences": "lists, tuples or NamedTuples (integer path elements)",
    "typed_keys": "typed PRNG keys (array_metadatas ext_metadata random_key_impl)",
    "odd_keys": "dict keys that are not identifiers (dots, slashes, spaces, non-ASCII, empty)",
    "ml_dtypes": "arrays of types numpy lacks (bfloat16, float8_*, int4, ...)",
    "zero_size": "arrays without elements (no chunk keys)",
    "multiprocess": "saved by several processes (ocdbt.process_<N>/, per-process array_metadatas)",
    "aggregated": "values stored inline in the legacy msgpack `checkpoint` file",
    "msgpack": "the item has the legacy msgpack `checkpoint` file (structure, placeholders)",
    "no_metadata": "the item has no _METADATA: its tree is in the msgpack file only",
    "btree_interior_nodes": "an OCDBT B+tree of height > 0",
    "version_tree_nodes": "an OCDBT manifest with version tree nodes (more generations than arity)",
    "uncompressed_nodes": "OCDBT manifest and nodes stored without compression",
}

#: bad corpus: rules a reader's refusal may name for damage a validator reports under the key
#: (the same damage seen from the loading side, spec/loading.md §6 and §2). A reader scored by
#: rule id (capability ``errors: "rules"``) passes a variant when its refusal names the
#: validator's rule, one of the validator's ``also`` rules, or one of these.
READER_RULES: dict[str, tuple[str, ...]] = {
    "VAL-004": ("LOAD-040",),  # a leaf without its array: the array is missing
    "VAL-005": ("LOAD-040",),  # the zarr version disagrees: the named array is not found
    "ZARR-008": ("LOAD-041",),  # a missing chunk
    "OCDBT-022": ("LOAD-040", "LOAD-041"),  # a missing data file: the array or chunk is missing
    "LAYOUT-001": ("LOAD-052", "LOAD-054"),  # a temporary item or step is not chosen
    "LAYOUT-003": ("LOAD-051",),  # a v1 checkpoint without its pytree checkpointable
}

#: save options of the round trips: (name, layout, zarr, ocdbt, extra options).
WRITE_LAYOUTS: list[tuple[str, str, int, bool, dict[str, Any]]] = [
    ("item-zarr2-ocdbt", "item", 2, True, {}),
    ("item-zarr2-dirs", "item", 2, False, {}),
    ("item-zarr3-ocdbt", "item", 3, True, {}),
    ("item-zarr3-dirs", "item", 3, False, {}),
    ("v1-zarr3-ocdbt", "v1", 3, True, {}),
    ("item-zarr2-ocdbt-chunked", "item", 2, True, {"chunk_byte_size": 16}),
]

#: trees of the round trips (trees.build names); "sharded" needs 8 jax devices.
ROUND_TRIP_TREES = ["dtypes", "containers", "sharded"]


def read_tree() -> dict[str, Any]:
    """The tree the consumer cases ("reads") load from, written as item / zarr v2 / no OCDBT."""
    return {
        "a": np.arange(12, dtype=np.float32).reshape(4, 3),
        "b": np.arange(5, dtype=np.int32) + 10,
        "c": {"d": np.full((2, 2), 0.5), "e": "text"},
        "s": 3.5,
        "chk": {
            "i2f_ok": np.array([0, 1, 2**24, -(2**24)], dtype=np.int32),
            "i2f_bad": np.array([0, 2**24 + 1], dtype=np.int32),
            "f2h_ok": np.array([0.5, 1.0, -2.0, 0.0], dtype=np.float32),
            "f2h_bad": np.array([0.5, 0.1], dtype=np.float32),
            "f2i_ok": np.array([1.0, -3.0], dtype=np.float64),
            "f2i_bad": np.array([1.0, 1.5], dtype=np.float64),
            "i2b_ok": np.array([0, 1], dtype=np.int8),
            "i2b_bad": np.array([0, 2], dtype=np.int8),
        },
    }


READ_TREE = "reads"


def _like(x: np.ndarray, dtype: Any = None, shape: tuple[int, ...] | None = None) -> np.ndarray:
    return np.zeros(x.shape if shape is None else shape, dtype=x.dtype if dtype is None else dtype)


def _checked(name: str, dtype: Any, cast: str) -> dict[str, Any]:
    return {"target": lambda t: {"chk": {name: _like(t["chk"][name], dtype)}}, "cast": cast}


#: consumer cases on the "reads" tree. Keys: needs (reads capabilities), rule, target (a
#: function of the saved tree), options, delete (param names whose arrays are removed from a
#: copy first: loading must not touch them), expect ("load" with an `expected` function, or
#: "refuse").
READ_CASES: list[dict[str, Any]] = [
    {
        "name": "partial_subset",
        "needs": {"options": ["partial"]},
        "rule": "LOAD-033",
        "target": lambda t: {"a": _like(t["a"]), "c": {"e": ""}},
        "options": {"partial": True},
        "delete": ["b", "c.d"],
        "expect": "load",
        "expected": lambda t: {"a": t["a"], "c": {"e": t["c"]["e"]}},
    },
    {
        "name": "subset_without_partial_refused",
        "needs": {},
        "rule": "LOAD-002",
        "target": lambda t: {"a": _like(t["a"])},
        "options": {},
        "expect": "refuse",
    },
    {
        "name": "placeholders",
        "needs": {"options": ["placeholder", "partial"]},
        "rule": "LOAD-033",
        "target": lambda t: {"a": ..., "b": _like(t["b"]), "c": {"d": ..., "e": ""}, "s": 0.0},
        "options": {"partial": True},
        "delete": ["a", "c.d"],
        "expect": "load",
        "expected": lambda t: {"a": ..., "b": t["b"], "c": {"d": ..., "e": "text"}, "s": 3.5},
    },
    {
        "name": "missing_key_refused",
        "needs": {"options": ["partial"]},
        "rule": "LOAD-001",
        "target": lambda t: {"a": _like(t["a"]), "zzz": np.zeros(2, np.float32)},
        "options": {"partial": True},
        "expect": "refuse",
    },
    {
        "name": "shape_mismatch_refused",
        "needs": {"options": ["partial"]},
        "rule": "LOAD-030",
        "target": lambda t: {"a": _like(t["a"], shape=(5, 4))},
        "options": {"partial": True},
        "expect": "refuse",
    },
    {
        "name": "pad",
        "needs": {"options": ["partial", "pad_or_truncate"]},
        "rule": "LOAD-031",
        "target": lambda t: {"a": _like(t["a"], shape=(5, 4))},
        "options": {"partial": True, "pad_or_truncate": True},
        "expect": "load",
        "expected": lambda t: {"a": np.pad(t["a"], ((0, 1), (0, 1)))},
    },
    {
        "name": "truncate",
        "needs": {"options": ["partial", "pad_or_truncate"]},
        "rule": "LOAD-031",
        "target": lambda t: {"b": _like(t["b"], shape=(3,)), "a": _like(t["a"], shape=(2, 5))},
        "options": {"partial": True, "pad_or_truncate": True},
        "expect": "load",
        "expected": lambda t: {"b": t["b"][:3], "a": np.pad(t["a"][:2], ((0, 0), (0, 2)))},
    },
    {
        "name": "pad_rank_change_refused",
        "needs": {"options": ["partial", "pad_or_truncate"]},
        "rule": "LOAD-030",
        "target": lambda t: {"a": _like(t["a"], shape=(12,))},
        "options": {"partial": True, "pad_or_truncate": True},
        "expect": "refuse",
    },
    {
        "name": "lossy_cast_refused",
        "needs": {"options": ["partial"]},
        "rule": "LOAD-020",
        "target": lambda t: {"chk": {"i2f_bad": _like(t["chk"]["i2f_bad"], np.float32)}},
        "options": {"partial": True},
        "expect": "refuse",
    },
]

#: checked / lossy opt-in cases: (leaf, target dtype, cast policy, expectation, rule).
CHECKED_PAIRS: list[tuple[str, str, str, str, str]] = [
    ("i2f_ok", "float32", "checked", "load", "LOAD-021"),
    ("i2f_bad", "float32", "checked", "refuse", "LOAD-021"),
    ("f2h_ok", "float16", "checked", "load", "LOAD-021"),
    ("f2h_bad", "float16", "checked", "refuse", "LOAD-021"),
    ("f2i_ok", "int32", "checked", "load", "LOAD-021"),
    ("f2i_bad", "int32", "checked", "refuse", "LOAD-021"),
    ("i2b_ok", "bool", "checked", "load", "LOAD-021"),
    ("i2b_bad", "bool", "checked", "refuse", "LOAD-021"),
    ("i2f_bad", "float32", "lossy", "load", "LOAD-020"),
    ("f2i_bad", "int32", "lossy", "load", "LOAD-020"),
]

for _leaf, _dtype, _cast, _expect, _rule in CHECKED_PAIRS:
    READ_CASES.append(
        {
            "name": f"{_cast}_{_leaf}_to_{_dtype}",
            "needs": {"options": ["partial", f"cast:{_cast}"]},
            "rule": _rule,
            "target": (lambda t, leaf=_leaf, dt=_dtype: {"chk": {leaf: _like(t["chk"][leaf], dt)}}),
            "options": {"partial": True, "cast": _cast},
            "expect": _expect,
            "expected": (
                lambda t, leaf=_leaf, dt=_dtype: {"chk": {leaf: _astype(t["chk"][leaf], dt)}}
            ),
        }
    )


def _astype(x: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(dtype)


#: device counts of the topology cases and the mesh each loads on (axes "x", "y").
TOPOLOGY_DEVICES: dict[int, tuple[int, int]] = {1: (1, 1), 2: (1, 2), 4: (2, 2), 8: (2, 4)}
