"""The python engine (`ockpt.engines.python`, backend="python"): its own reads, views and key
listings, its dependencies, and the reader with it (equal to the tensorstore backend)."""

from __future__ import annotations

import ast
import json
from importlib import resources

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from ockpt.engines import python as pb
from ockpt.layout import Storage, detect
from tests.support import assert_case_backends_agree
from tests.support.ocdbt import fixture_items, short

ITEMS = fixture_items()
ENGINE = pb.__file__.rsplit("/", 1)[0]


def _kind(item) -> tuple[Storage, bool]:
    fmt = detect(item).item
    return fmt.storage, fmt.has_root_manifest


# The engine contract (tests/engines/test_contract.py) compares this engine with the tensorstore
# engine on every fixture item, per-process databases, missing arrays and chunks.


def test_read_into_preallocated(tmp_path):
    item = next(i for i in ITEMS if _kind(i) == (Storage.OCDBT, True))
    store = pb.ArrayStore(item)
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
    store = pb.ArrayStore(item)
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

    files = [str(p) for p in (resources.files("ockpt") / "engines" / "python").iterdir()]
    files = [f for f in files if f.endswith(".py")]
    files += [f"{ENGINE}/../contract.py", f"{ENGINE}/../__init__.py"]
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
    item = next(i for i in ITEMS if _kind(i) == (Storage.OCDBT, True))
    store = pb.ArrayStore(item)
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
    from tests.support import fixture_cases

    return fixture_cases()  # every golden case loads (none is skipped)


@pytest.mark.parametrize("case", _loadable_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_load_pytree_backend_python_equals_tensorstore(case):
    assert_case_backends_agree(case)


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


def test_several_databases_agree_on_the_owner_of_a_key(tmp_path):
    """Issue 32 item 5: a key several per-process databases hold is taken from the first one,
    by `get` and by `value_range` alike: the first holds it inline, so there is no range to
    stream, and the second's out-of-line value is not passed over to."""
    from tests.support.ocdbt import build_database

    build_database(tmp_path / "p0", {b"k": b"small"})
    build_database(tmp_path / "p1", {b"k": b"x" * 5000, b"only1": b"y" * 5000})
    stores = [pb.OcdbtStore(str(tmp_path / p)) for p in ("p0", "p1")]
    multi = pb.MultiOcdbtStore(stores, str(tmp_path))
    try:
        assert multi.get("k") == b"small"
        assert multi.value_range("k") is None  # p0's value is inline: nothing to stream
        assert stores[1].value_range("k") is not None  # what the loop used to pick
        with multi.value_range("only1") as found:
            assert found.read() == b"y" * 5000
        assert multi.get("absent") is None and multi.value_range("absent") is None
    finally:
        multi.close()


def test_pytree_metadata_walks_the_btree_once(tmp_path, monkeypatch):
    """Issue 33 item 4: `pytree_metadata` of an OCDBT item finds every array's zarr metadata
    key by one walk of the B+tree (`ArrayStore.metadata_store`), not a lookup per array, and
    gives what a lookup per array gives; a walk that meets a fault leaves each array to its
    own lookup, which names it."""
    import ockpt
    from ockpt.engines.python import store as store_module
    from ockpt.errors import FormatError
    from ockpt.ocdbt.tree import Database

    tree: dict = {}
    for i in range(300):
        tree.setdefault(f"l{i // 50}", {})[f"p{i % 50}"] = np.full((2, 1 + i % 3), i, np.float32)
    ockpt.save_pytree(tmp_path / "c", tree, layout="item")
    looked_up = []
    real_get = Database.get

    def get(db, key, **kw):
        looked_up.append(key)
        return real_get(db, key, **kw)

    monkeypatch.setattr(Database, "get", get)
    walked = ockpt.pytree_metadata(tmp_path / "c", backend="python")
    assert looked_up == []
    monkeypatch.setattr(store_module, "_WALK_FROM", 10**9)
    each = ockpt.pytree_metadata(tmp_path / "c", backend="python")
    assert walked == each and len(looked_up) == 300
    assert walked["l3"]["p7"].shape == (2, 1 + 157 % 3) and walked["l3"]["p7"].chunk_shape

    monkeypatch.setattr(store_module, "_WALK_FROM", 256)
    real_nodes = Database.leaf_nodes

    def broken(db, *a, **kw):
        yield from list(real_nodes(db, *a, **kw))[:1]
        raise FormatError("a fault in the tree", rule="OCDBT-044")

    monkeypatch.setattr(Database, "leaf_nodes", broken)
    looked_up.clear()
    assert ockpt.pytree_metadata(tmp_path / "c", backend="python") == each
    assert len(looked_up) == 300


def test_walked_metadata_opens_an_array_per_metadata_document(tmp_path):
    """The walked metadata store (`ArrayStore.metadata_store`) opens the first array of each
    zarr metadata document and gives it for every array with the same document (their shape,
    dtype, chunks, size and file are its); an absent array is the store's LOAD-040."""
    import ockpt
    from ockpt.errors import MissingDataError
    from ockpt.reader.item import OpenedItem

    tree = {f"p{i:03}": np.zeros((2,) if i % 2 else (3,), np.float32) for i in range(300)}
    ockpt.save_pytree(tmp_path / "c", tree, layout="item")
    with OpenedItem(tmp_path / "c", step=None, item=None, context=None, backend="python") as it:
        quick = it.store.metadata_store(300)
        odd, even = quick.open("p001"), quick.open("p000")
        assert quick.open("p299") is odd and quick.open("p298") is even and odd is not even
        assert (odd.shape, even.shape, odd.nbytes) == ((2,), (3,), 8)
        assert odd.file == it.store.open("p003").file
        with pytest.raises(MissingDataError, match="LOAD-040"):
            quick.open("absent")
        quick.close()


def test_pytree_metadata_leaves_no_cycle_holding_the_item(tmp_path, monkeypatch):
    """`pytree_metadata` runs under one pause of the collector, and the item it opened (its
    saved tree: a node and a leaf per saved leaf) is freed by reference counting when it
    returns, so the collector's next run walks the result alone."""
    import gc
    import weakref

    import ockpt
    from ockpt.reader import metadata as reader_metadata

    ockpt.save_pytree(tmp_path / "c", {"a": {"b": np.ones(2, np.float32)}}, layout="item")
    opened = []
    real = reader_metadata.OpenedItem

    def tracked(*a, **kw):
        item = real(*a, **kw)
        opened.append(weakref.ref(item))
        return item

    monkeypatch.setattr(reader_metadata, "OpenedItem", tracked)
    was = gc.isenabled()
    gc.disable()
    try:
        got = ockpt.pytree_metadata(tmp_path / "c", backend="python")
        assert len(opened) == 1 and opened[0]() is None
    finally:
        if was:
            gc.enable()
    assert got["a"]["b"].shape == (2,)
