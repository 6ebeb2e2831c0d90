"""backend="python": the same arrays, regions and key listings as the tensorstore backend."""

from __future__ import annotations

import ast
import json
import shutil
from importlib import resources

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from conftest import assert_backends_agree
from ocdbt_support import fixture_items, short
from ockpt import python_backend as pb
from ockpt import storage
from ockpt.errors import MissingDataError

ITEMS = fixture_items()
ROOT = pb.__file__.rsplit("/", 1)[0]


def _kind(item) -> str:
    names = {p.name for p in item.iterdir()}
    if "manifest.ocdbt" in names:
        return "ocdbt"
    if any(n.startswith("ocdbt.process_") for n in names):
        return "ocdbt_processes"
    return "per_leaf"


def _processes(item) -> list[int]:
    return sorted(int(p.name.split("_")[-1]) for p in item.glob("ocdbt.process_*"))


def _compare(item, kind):
    keys = pb.item_keys(item, storage=kind)
    params = sorted(pb.key_listing(keys)["params"])
    loc = storage.Location.of(item)
    theirs = storage.ArrayStore(
        loc,
        storage=kind,
        zarr_version=None,
        context=storage.new_context(),
        processes=_processes(item),
    )
    mine = pb.ArrayStore(loc, storage=kind, zarr_version=None, processes=_processes(item))
    assert sorted(mine.list_keys()) == sorted(keys)
    for name in params:
        a, b = mine.open(name), theirs.open(name)
        assert (a.shape, a.dtype, a.chunk_shape, a.zarr_version) == (
            b.shape,
            b.dtype,
            b.chunk_shape,
            b.zarr_version,
        ), name
        full = tuple((0, n) for n in a.shape)
        x, y = a.read(full).result(), np.asarray(b.read(full).result())
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
        if a.shape and int(np.prod(a.shape)) > 1:
            box = tuple((n // 3, max(n // 3 + 1, n - n // 4)) for n in a.shape)
            x, y = a.read(box).result(), np.asarray(b.read(box).result())
            assert x.tobytes() == y.tobytes(), (name, box)
            if a.dtype.kind == "f":
                x = a.read(box, np.dtype("float64")).result()
                y = np.asarray(b.read(box, np.dtype("float64")).result())
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    return params


@pytest.mark.parametrize("item", ITEMS, ids=short)
def test_same_arrays_as_tensorstore_backend(item):
    _compare(item, _kind(item))


@pytest.mark.parametrize(
    "item", [i for i in ITEMS if (i / "ocdbt.process_0").is_dir()][:3], ids=short
)
def test_per_process_databases_without_root(tmp_path, item):
    copy = tmp_path / "item"
    shutil.copytree(item, copy)
    (copy / "manifest.ocdbt").unlink()
    shutil.rmtree(copy / "d")
    assert _compare(copy, "ocdbt_processes")


def test_missing_chunk_policy(tmp_path):
    """ZARR-008: an absent chunk reads as the fill value, or fails with LOAD-041."""
    item = next(i for i in ITEMS if _kind(i) == "per_leaf")
    copy = tmp_path / "item"
    shutil.copytree(item, copy)
    keys = pb.key_listing(pb.item_keys(copy))
    name, entry = next((n, e) for n, e in keys["params"].items() if e["chunk_keys"])
    (copy / name / entry["chunk_keys"][0]).unlink()
    loose = pb.ArrayStore(copy, storage="per_leaf", zarr_version=None).open(name)
    loose.read().result()  # the missing chunk reads as the fill value
    strict = pb.ArrayStore(
        copy, storage="per_leaf", zarr_version=None, missing_chunks_are_errors=True
    )
    with pytest.raises(MissingDataError, match="LOAD-041"):
        strict.open(name).read().result()
    with pytest.raises(MissingDataError, match="LOAD-040"):
        strict.open("no_such_param")


def test_read_into_preallocated(tmp_path):
    item = next(i for i in ITEMS if _kind(i) == "ocdbt")
    store = pb.ArrayStore(item, storage="ocdbt", zarr_version=None)
    name = next(n for n in pb.key_listing(store.list_keys())["params"] if store.open(n).shape)
    arr = store.open(name)
    out = np.empty(arr.shape, arr.dtype)
    assert arr.read_into(out) is out
    assert out.tobytes() == arr.read().result().tobytes()


# ---------------------------------------------------------------------------------------------
# key listings and their schema


def _schema():
    text = resources.files("ockpt").joinpath("schemas/ocdbt-keys.schema.json").read_text()
    return json.loads(text)


@pytest.mark.parametrize("item", ITEMS, ids=short)
def test_key_listing_meets_schema_and_rules(item):
    listing = pb.key_listing(pb.item_keys(item))
    Draft202012Validator(_schema()).validate(listing)
    assert "unclaimed" not in listing
    store = pb.ArrayStore(item, storage=_kind(item), zarr_version=None, processes=_processes(item))
    for name, entry in listing["params"].items():
        meta = store.open(name).metadata
        grid = [-(-n // c) for n, c in zip(meta.shape, meta.chunk_shape, strict=False)]
        valid = {meta.chunk_key(i) for i in np.ndindex(*grid)} if all(grid) else set()
        assert set(entry["chunk_keys"]) <= valid, name  # ZARR-021: keys on the chunk grid


def test_key_listing_groups_and_flags():
    """ZARR-020 (one metadata key per param) and ZARR-021 (no unclaimed keys) are flagged."""
    listing = pb.key_listing(
        ["a/.zarray", "a/0.0", "a.b/zarr.json", "a.b/c/0", "zarr.json", "c/0", "x"]
    )
    assert listing["params"]["a"] == {"metadata_key": "a/.zarray", "chunk_keys": ["0.0"]}
    assert listing["params"]["a.b"]["chunk_keys"] == ["c/0"]
    assert listing["params"][""]["chunk_keys"] == ["c/0", "x"]
    listing = pb.key_listing(["a/.zarray", "a/zarr.json", "b/0"])
    assert listing["params"]["a"]["extra_metadata_keys"] == ["a/zarr.json"]
    assert listing["unclaimed"] == ["b/0"]


# ---------------------------------------------------------------------------------------------
# dependencies: numpy, ml_dtypes, zstandard, google-crc32c and the standard library only

ALLOWED = {"numpy", "ml_dtypes", "zstandard", "google_crc32c"}


def test_decoder_modules_import_no_heavy_dependency():
    import sys

    files = [f"{ROOT}/python_backend.py"]
    for sub in ("ocdbt", "zarr"):
        files += [
            str(p) for p in (resources.files("ockpt") / sub).iterdir() if p.name.endswith(".py")
        ]
    for f in files:
        tree = ast.parse(open(f).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                assert top in ALLOWED or top in sys.stdlib_module_names or top == "__future__", (
                    f,
                    n,
                )


@pytest.mark.parametrize(
    "index",
    [
        (slice(None),),
        (slice(1, None, 2),),
        (slice(None, None, -1),),
        (slice(5, 0, -2), 1),
        (Ellipsis, 0),
        (-1,),
        (slice(3, 3),),
    ],
)
def test_view_matches_numpy_indexing(index):
    item = next(i for i in ITEMS if _kind(i) == "ocdbt")
    store = pb.ArrayStore(item, storage="ocdbt", zarr_version=None)
    arr = next(
        a
        for n in pb.key_listing(store.list_keys())["params"]
        if len((a := store.open(n)).shape) == 2
    )
    full = arr.read().result()
    assert np.array_equal(arr.view(index).read().result(), full[index])


# ---------------------------------------------------------------------------------------------
# the reader with backend="python"


def _loadable_cases():
    from conftest import fixture_cases

    return fixture_cases()  # every golden case loads (none is skipped)


@pytest.mark.parametrize("case", _loadable_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_load_pytree_backend_python_equals_tensorstore(case):
    assert_backends_agree(case / "checkpoint")


def test_lazy_checkpoint_backend_python():
    import ockpt

    case = next(c for c in _loadable_cases() if "sharded" in str(c))
    with ockpt.open(case / "checkpoint", backend="python") as mine:
        with ockpt.open(case / "checkpoint", backend="tensorstore") as ref:
            assert mine.keys() == ref.keys()
            for name in ref.keys():
                a, b = mine[name], ref[name]
                if not hasattr(b, "shape"):
                    continue
                x, y = np.asarray(a[...]), np.asarray(b[...])
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
                if len(b.shape) >= 1 and b.shape[0] > 1:
                    assert np.asarray(a[1:]).tobytes() == np.asarray(b[1:]).tobytes()
                    assert np.asarray(a[-1]).tobytes() == np.asarray(b[-1]).tobytes()
    with pytest.raises(ValueError, match="backend"):
        ockpt.open(case / "checkpoint", backend="nope")


def test_memory_per_leaf_of_a_many_leaf_load(tmp_path):
    """Loading 5,000 small leaves holds about 2.3 KB per leaf at its peak (Python's own
    allocations, tracemalloc): `_METADATA` entries become typed entries as they are parsed
    and arrays are opened one at a time. Parsing the whole JSON first and opening every
    array before reading, as before, peaked at 3.9 KB per leaf."""
    import tracemalloc

    import ockpt
    from ockpt.documents import metadata

    n = 5000
    tree = {
        f"b{j // 100}": {f"p{i % 100}": np.full((4,), i, np.float32) for i in range(j, j + 100)}
        for j in range(0, n, 100)
    }
    ockpt.save_pytree(tmp_path / "c", tree)
    ockpt.load_pytree(tmp_path / "c", backend="python")  # imports and thread pool warm
    metadata._PARSED.clear()
    tracemalloc.start()
    try:
        got = ockpt.load_pytree(tmp_path / "c", backend="python")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got["b7"]["p12"].tolist() == [712.0] * 4
    assert peak / n < 3000, f"{peak / n:.0f} bytes per leaf"
