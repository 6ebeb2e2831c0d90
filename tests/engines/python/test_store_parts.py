"""The parts of the python engine's store (`ockpt.engines.python.store`) called directly on
real files: the key-value views (`OcdbtStore` of any generation, `MultiOcdbtStore`,
`DirectoryStore`), `per_leaf_skip`, `item_format`, `open_item_store`, `item_keys`,
`key_listing`, and `ArrayStore`, `StoredArray`, its views and the walked metadata store."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.engines import python as pb
from ockpt.engines.python import store as store_module
from ockpt.errors import FormatError, MissingDataError, NotACheckpointError
from ockpt.layout import ItemFormat, Storage, detect
from ockpt.limits import LIMITS, applied
from ockpt.store import LocalStore
from tests.support import FIXTURES
from tests.support.errors import assert_error, error_fields, raised
from tests.support.ocdbt import build_database, database_case

OCDBT_ITEM = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"
PER_LEAF_ITEM = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"
PROCESS_ITEM = FIXTURES / "orbax-0.12.8" / "multiprocess" / "checkpoint"


# ---------------------------------------------------------------------------------------------
# key-value stores


def test_an_ocdbt_store_reads_the_generation_it_is_given():
    path = str(database_case("many_generations"))
    latest, old = pb.OcdbtStore(path), pb.OcdbtStore(path, generation=2)
    try:
        keys = latest.list()
        old_keys = old.list()
        assert old_keys == sorted(k.decode() for k in old.db.list(generation=2))
        assert 0 < len(old_keys) < len(keys)
        # a key written after generation 2, whose value is out of line
        key = next(k for k in keys if k not in old_keys and latest.value_range(k) is not None)
        assert latest.get(key) is not None and latest.holds(key)
        assert old.get(key) is None and not old.holds(key)
        assert old.value_range(key) is None and old.inline_value(key) is None
        assert pb.OcdbtStore(path, generation=1).list() == []
        prefix = keys[-1].rsplit("/", 1)[0] + "/"
        assert latest.list(prefix) == [k for k in keys if k.startswith(prefix)] != keys
    finally:
        latest.close()
        old.close()


def test_stores_are_named_as_they_are_shown(tmp_path):
    path = str(database_case("many_generations"))
    assert pb.OcdbtStore(path).display == path
    assert pb.OcdbtStore(path, display="shown").display == "shown"
    multi = pb.MultiOcdbtStore([pb.OcdbtStore(path)], "several")
    assert multi.display == "several"
    local = LocalStore(str(PER_LEAF_ITEM))
    assert pb.DirectoryStore(local).display == local.display == str(PER_LEAF_ITEM)
    shown = pb.DirectoryStore(local, display="item")
    assert shown.display == shown.store.display == "item"
    (tmp_path / "x").mkdir()
    os.mkfifo(tmp_path / "x" / "fifo")
    err = raised(
        FormatError, pb.DirectoryStore(LocalStore(str(tmp_path)), display="it").get, "x/fifo"
    )
    assert_error(err, rule="PATH-005", file="it/x/fifo")


def test_keys_that_are_no_utf_8_are_listed_escaped_in_byte_order(tmp_path):
    """OCDBT keys are bytes: one that is not UTF-8 is listed with its bytes escaped
    (surrogateescape), and several databases list their keys in byte order, where an escaped
    byte 0xff sorts after U+E000 (whose code point is larger)."""
    build_database(tmp_path / "p0", {b"a/\xff": b"1", "a/\ue000".encode(): b"2", b"b": b"3"})
    build_database(tmp_path / "p1", {b"a/0": b"4", b"c": b"5"})
    one = pb.OcdbtStore(str(tmp_path / "p0"))
    assert one.list() == ["a/\ue000", "a/\udcff", "b"]
    assert one.list("a/") == ["a/\ue000", "a/\udcff"]
    multi = pb.MultiOcdbtStore([one, pb.OcdbtStore(str(tmp_path / "p1"))], str(tmp_path))
    try:
        assert multi.list() == ["a/0", "a/\ue000", "a/\udcff", "b", "c"]
        assert multi.list("a/") == ["a/0", "a/\ue000", "a/\udcff"]
        assert multi.inline_value("c") == b"5" and multi.inline_value("a/0") == b"4"
        assert multi.inline_value("absent") is None
    finally:
        multi.close()


def test_several_databases_give_the_inline_value_of_the_first_holding_the_key(tmp_path):
    build_database(tmp_path / "p0", {b"k": b"small"})
    build_database(tmp_path / "p1", {b"k": b"other", b"only1": b"y"}, inline_max=100)
    multi = pb.MultiOcdbtStore(
        [pb.OcdbtStore(str(tmp_path / p)) for p in ("p0", "p1")], str(tmp_path)
    )
    try:
        assert multi.inline_value("k") == b"small" and multi.inline_value("only1") == b"y"
    finally:
        multi.close()


@pytest.mark.parametrize(
    "key, valid",
    [
        ("a", True),
        ("a/b.c/0.0", True),
        ("..a/.b/c..", True),
        ("a b/c", True),
        ("", False),
        ("a//b", False),
        ("/a", False),
        ("a/", False),
        ("./a", False),
        ("a/./b", False),
        ("a/..", False),
        ("../a", False),
        ("a\\b", False),
        ("a\0b", False),
        ("a/b\\", False),
    ],
)
def test_directory_store_keys(key, valid):
    assert pb.DirectoryStore._valid(key) is valid


def test_directory_store_refuses_invalid_keys_unread(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_bytes(b"x")
    kv = pb.DirectoryStore(LocalStore(str(tmp_path)))
    assert kv.get("a/b") == b"x"
    for key in ("a/./b", "a//b", "./a/b", "a/../a/b"):
        assert kv.get(key) is None and kv.value_range(key) is None, key


def test_directory_store_claims_chunk_files_it_does_not_skip(tmp_path):
    """Two chunk keys naming one file (a hard link) are refused (PATH-008); a key the store
    skips (an item's top-level document) is never claimed."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0").write_bytes(b"x")
    os.link(tmp_path / "a" / "0", tmp_path / "a" / "1")
    os.link(tmp_path / "a" / "0", tmp_path / "doc")
    kv = pb.DirectoryStore(LocalStore(str(tmp_path)), skip=pb.store.per_leaf_skip)
    assert kv.get("doc") == b"x" and kv.get("a/0") == b"x" and kv.get("doc") == b"x"
    err = raised(FormatError, kv.get, "a/1")
    assert_error(err, rule="PATH-008", file=f"{tmp_path}/a/1")
    unskipped = pb.DirectoryStore(LocalStore(str(tmp_path)))
    assert unskipped.get("doc") == b"x"
    assert_error(raised(FormatError, unskipped.get, "a/0"), rule="PATH-008")


def test_directory_store_reads_chunks_within_the_chunk_limit(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0").write_bytes(b"x" * 100)
    kv = pb.DirectoryStore(LocalStore(str(tmp_path)))
    with applied(dataclasses.replace(LIMITS, max_chunk_bytes=99)):
        err = raised(FormatError, kv.get, "a/0")
    assert_error(err, rule="ZARR-003", file=f"{tmp_path}/a/0")
    with applied(dataclasses.replace(LIMITS, max_chunk_bytes=100)):
        assert kv.get("a/0") == b"x" * 100


def test_directory_store_a_directory_in_place_of_a_value_holds_none(tmp_path):
    (tmp_path / "a" / "0").mkdir(parents=True)
    os.mkfifo(tmp_path / "a" / "1")
    kv = pb.DirectoryStore(LocalStore(str(tmp_path)))
    assert kv.get("a/0") is None and kv.value_range("a/0") is None
    for read in (kv.get, kv.value_range):
        assert_error(raised(FormatError, read, "a/1"), rule="PATH-005", file=f"{tmp_path}/a/1")


@pytest.mark.parametrize(
    "key, skipped",
    [
        ("_METADATA", True),
        ("a", True),
        ("array_metadatas/process_0", True),
        ("ocdbt.process_0/manifest.ocdbt", True),
        ("d/0123abcd", True),
        ("a/_strings.json", True),
        ("a/0.0", False),
        ("dx/0", False),
        ("d.e/0", False),
        ("Ocdbt.process_0/x", False),
        ("a/b/.zarray", False),
    ],
)
def test_per_leaf_skip(key, skipped):
    assert pb.store.per_leaf_skip(key) is skipped


# ---------------------------------------------------------------------------------------------
# items


def test_item_format_of_a_directory_that_is_no_pytree_item(tmp_path):
    err = raised(NotACheckpointError, pb.store.item_format, tmp_path)
    assert error_fields(err) == {
        "rule": "LOAD-050",
        "file": str(tmp_path),
        "message": "not a pytree item",
    }


@pytest.mark.parametrize(
    "item, kind",
    [
        (OCDBT_ITEM, pb.OcdbtStore),
        (PER_LEAF_ITEM, pb.DirectoryStore),
    ],
)
def test_open_item_store_named_as_displayed(item, kind):
    kv = pb.open_item_store(item, display="shown")
    try:
        assert isinstance(kv, kind) and kv.display == "shown"
    finally:
        kv.close()
    kv = pb.open_item_store(item)
    try:
        assert kv.display == str(item)
    finally:
        kv.close()


def _per_process_fmt(item: Path) -> ItemFormat:
    fmt = detect(item).item
    assert fmt is not None and fmt.has_root_manifest and fmt.ocdbt_processes
    return ItemFormat(fmt.storage, fmt.zarr_version, True, False, fmt.ocdbt_processes, False)


def test_open_item_store_of_the_per_process_databases():
    kv = pb.open_item_store(PROCESS_ITEM, _per_process_fmt(PROCESS_ITEM), display="shown")
    try:
        assert isinstance(kv, pb.MultiOcdbtStore) and kv.display == "shown"
        assert [s.display for s in kv.stores] == [
            f"shown/ocdbt.process_{p}" for p in _per_process_fmt(PROCESS_ITEM).ocdbt_processes
        ]
    finally:
        kv.close()


def test_item_keys_of_the_format_given():
    """The format given is the one listed (not the one detected): an OCDBT item listed as
    per-leaf zarr is its directory's files."""
    per_leaf = ItemFormat(Storage.PER_LEAF_ZARR, None, True, False)
    files = pb.item_keys(OCDBT_ITEM, per_leaf)
    assert "manifest.ocdbt" not in files and any(k.startswith("d/") for k in files) is False
    assert "_METADATA" not in files  # top-level documents are skipped
    assert files != pb.item_keys(OCDBT_ITEM)
    assert pb.item_keys(OCDBT_ITEM, detect(OCDBT_ITEM).item) == pb.item_keys(OCDBT_ITEM)


def test_key_listing_owners_and_extra_metadata_keys():
    listing = pb.key_listing(
        ["a/.zarray", "a/zarr.json", "a/0", "a/b/c/.zarray", "a/b/c/d/e", "a/b/x/0", "q"]
    )
    assert listing["params"] == {
        "a": {
            "metadata_key": "a/.zarray",
            "chunk_keys": ["0", "b/x/0"],
            "extra_metadata_keys": ["a/zarr.json"],
        },
        "a/b/c": {"metadata_key": "a/b/c/.zarray", "chunk_keys": ["d/e"]},
    }
    assert listing["unclaimed"] == ["q"]


# ---------------------------------------------------------------------------------------------
# arrays


def _copy(item: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "item"
    shutil.copytree(item, copy)
    return copy


def _first_chunked(store: pb.ArrayStore, item: Path) -> tuple[str, str]:
    listing = pb.key_listing(pb.item_keys(item))
    return next(
        (n, e["chunk_keys"][0]) for n, e in sorted(listing["params"].items()) if e["chunk_keys"]
    )  # noqa: E501


def test_stored_array_fields():
    for item, file in ((OCDBT_ITEM, f"{OCDBT_ITEM}/manifest.ocdbt"), (PER_LEAF_ITEM, None)):
        store = pb.ArrayStore(item)
        try:
            for name in pb.key_listing(store.list_keys())["params"]:
                array = store.open(name)
                meta = array.metadata
                assert array.param_name == name
                assert array.file == (file or f"{item}/{name}") == store.file(name)
                assert array.zarr_version == meta.zarr_format in (2, 3)
                assert array.shape == meta.shape and array.dtype.isnative
        finally:
            store.close()


def test_an_absent_chunk_names_its_file(tmp_path):
    """A chunk absent where every chunk must be stored names its file: the per-leaf chunk
    file (<item>/<param>/<key>), or the OCDBT manifest holding the key (<manifest>/<key>);
    by default it reads as the fill value."""
    item = _copy(PER_LEAF_ITEM, tmp_path)
    store = pb.ArrayStore(item, missing_chunks_are_errors=True)
    name, chunk = _first_chunked(store, item)
    os.unlink(item / name / chunk)
    array = store.open(name)
    err = raised(MissingDataError, array.read_into, np.empty(array.shape, array.dtype))
    assert_error(err, rule="LOAD-041", file=f"{item}/{name}/{chunk}")
    assert pb.ArrayStore(item).open(name).read().result().shape == array.shape
    item = FIXTURES / "bad" / "zarr_missing_chunk_ocdbt" / "checkpoint"
    array = pb.ArrayStore(item, missing_chunks_are_errors=True).open("x")
    err = raised(MissingDataError, array.read_into, np.empty(array.shape, array.dtype))
    assert_error(err, rule="LOAD-041", file=f"{item}/manifest.ocdbt/x/3.0")


def test_read_a_box_outside_the_array_names_its_file():
    store = pb.ArrayStore(PER_LEAF_ITEM)
    array = store.open("a")
    err = raised(ValueError, array.read(tuple((0, n + 1) for n in array.shape)).result)
    assert err.args[0].startswith(f"{PER_LEAF_ITEM}/a: region ")
    store.close()


def test_read_cast():
    store = pb.ArrayStore(PER_LEAF_ITEM)
    array = store.open("a")
    same = array.read().result()
    for dtype in (np.float64, np.dtype("float64"), "float64"):
        wide = array.read(None, dtype).result()
        assert wide.dtype == np.float64 and np.array_equal(wide, same.astype(np.float64))
    assert array.read(None, array.dtype).result().dtype == array.dtype
    store.close()


def _matrix() -> tuple[pb.ArrayStore, pb.StoredArray]:
    store = pb.ArrayStore(OCDBT_ITEM)
    for name in pb.key_listing(store.list_keys())["params"]:
        array = store.open(name)
        if len(array.shape) == 2 and min(array.shape) > 2:
            return store, array
    raise AssertionError("no matrix")


@pytest.mark.parametrize(
    "index",
    [
        1,
        -1,
        slice(1, None),
        (0, Ellipsis),
        (Ellipsis, 1),
        (slice(2, 2), 0),
        (slice(None, None, -2),),
    ],
)
def test_views(index):
    store, array = _matrix()
    full = array.read().result()
    got = array.view(index).read().result()
    assert got.shape == full[index].shape and np.array_equal(got, full[index])
    store.close()


def test_view_index_bounds():
    store, array = _matrix()
    n = array.shape[0]
    full = array.read().result()
    assert np.array_equal(array.view(-n).read().result(), full[0])
    err = raised(IndexError, array.view, n)
    assert err.args == (f"index {n} is out of bounds for size {n}",)
    err = raised(IndexError, array.view, -n - 1)
    assert err.args == (f"index {-n - 1} is out of bounds for size {n}",)
    err = raised(IndexError, array.view, (0, 0, 0))
    assert err.args == ("too many indices for an array of rank 2",)
    store.close()


def test_array_store_defaults_and_the_format_given(tmp_path):
    item = _copy(PER_LEAF_ITEM, tmp_path)
    store = pb.ArrayStore(item)
    name, chunk = _first_chunked(store, item)
    os.unlink(item / name / chunk)
    assert store.missing_chunks_are_errors is False
    store.open(name).read().result()  # the fill value
    # the format given, not the one detected: the per-process databases of an item that has a
    # root database too
    fmt = _per_process_fmt(PROCESS_ITEM)
    given = pb.ArrayStore(PROCESS_ITEM, fmt)
    assert given.fmt is fmt and isinstance(given.kv, pb.MultiOcdbtStore)
    assert given.file("x") == f"{PROCESS_ITEM}/ocdbt.process_*/manifest.ocdbt"
    given.close()


def test_array_store_of_one_zarr_version():
    """A store told the zarr version opens that version's metadata only."""
    store = pb.ArrayStore(PER_LEAF_ITEM, zarr_version=3)
    err = raised(MissingDataError, store.open, "a")
    assert_error(err, rule="LOAD-040", file=f"{PER_LEAF_ITEM}/a")
    assert pb.ArrayStore(PER_LEAF_ITEM, zarr_version=2).open("a").zarr_version == 2


def test_a_broken_zarr_metadata_document_names_its_file(tmp_path):
    item = _copy(PER_LEAF_ITEM, tmp_path)
    (item / "a" / ".zarray").write_text("{")
    err = raised(FormatError, pb.ArrayStore(item).open, "a")
    assert err.file == f"{item}/a/.zarray"


def test_open_a_per_leaf_param_named_with_slashes(tmp_path):
    """A per-leaf param's directory loses its leading and trailing `/` (`array_prefix`)."""
    item = _copy(PER_LEAF_ITEM, tmp_path)
    store = pb.ArrayStore(item)
    assert store.open("/a/").shape == store.open("a").shape


def test_big_endian_arrays_open_in_native_order(tmp_path):
    item = _copy(PER_LEAF_ITEM, tmp_path)
    zarray = item / "a" / ".zarray"
    doc = json.loads(zarray.read_text())
    store = pb.ArrayStore(item)
    want = store.open("a").read().result()
    assert doc["dtype"][0] == "<" and doc["compressor"] is not None
    doc["dtype"] = ">" + doc["dtype"][1:]
    zarray.write_text(json.dumps(doc))
    array = pb.ArrayStore(item).open("a")
    assert array.dtype == want.dtype and array.dtype.isnative
    assert np.array_equal(array.read().result(), want.byteswap())


def test_sharded_arrays_read_on_their_inner_chunks(tmp_path):
    item = tmp_path / "item"
    ockpt.save_pytree(
        item, {"x": np.zeros((8, 4), np.float32)}, layout="item", zarr_version=3, use_ocdbt=False
    )  # noqa: E501
    doc_file = item / "x" / "zarr.json"
    doc = json.loads(doc_file.read_text())
    assert doc["codecs"][0]["name"] == "sharding_indexed"
    doc["codecs"][0]["configuration"]["chunk_shape"] = [4, 4]
    doc_file.write_text(json.dumps(doc))
    array = pb.ArrayStore(item).open("x")
    assert array.chunk_shape == (4, 4) and array.metadata.chunk_shape == (8, 4)


def test_metadata_store_from_the_walk_bound():
    store = pb.ArrayStore(OCDBT_ITEM)
    assert store.metadata_store(store_module._WALK_FROM - 1) is None
    walked = store.metadata_store(store_module._WALK_FROM)
    assert walked is not None
    assert pb.ArrayStore(PER_LEAF_ITEM).metadata_store(10**6) is None
    names = pb.key_listing(store.list_keys())["params"]
    for name in names:
        assert walked.open(name).shape == store.open(name).shape
    err = raised(MissingDataError, walked.open, "absent")
    assert error_fields(err)["message"] == (
        "no zarr array for param 'absent' (neither .zarray nor zarr.json)"
    )
    walked.close()
    name = next(iter(names))
    assert walked.open(name).shape == store.open(name).shape  # through the store
    store.close()


def _zarray(shape: list[int]) -> bytes:
    return json.dumps(
        {"chunks": shape, "compressor": None, "dimension_separator": ".", "dtype": "<f4",
         "fill_value": 0, "filters": None, "order": "C", "shape": shape, "zarr_format": 2}
    ).encode()  # fmt: skip


def _zarr_json(shape: list[int]) -> bytes:
    return json.dumps(
        {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
         "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
         "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
    ).encode()  # fmt: skip


def _root_db(path: Path, entries: dict[bytes, bytes], zarr_version: int | None = None):
    build_database(path, entries, inline_max=1 << 20)
    fmt = ItemFormat(Storage.OCDBT, zarr_version, False, False, (), True)
    return pb.ArrayStore(LocalStore(str(path)), fmt, zarr_version=zarr_version)


def test_walked_metadata_of_the_bare_param(tmp_path):
    """The param named "" keeps its metadata at the bare key `.zarray`."""
    store = _root_db(tmp_path / "db", {b".zarray": _zarray([3]), b"0": b"\0" * 12})
    walked = store.metadata_store(store_module._WALK_FROM)
    assert walked.open("").shape == (3,)


def test_walked_metadata_of_one_zarr_version_and_any(tmp_path):
    """Arrays with both documents (ZARR-020) of the same `.zarray` and other `zarr.json`: a
    store of zarr v3 opens each by its `zarr.json`, one of v2 by its `.zarray`; a store of
    either version opens both by the `.zarray` found first."""
    entries = {
        b"a/.zarray": _zarray([2]),
        b"b/.zarray": _zarray([2]),
        b"a/zarr.json": _zarr_json([5]),
        b"b/zarr.json": _zarr_json([7]),
    }
    for version, want in ((3, (5, 7)), (2, (2, 2)), (None, (2, 2))):
        store = _root_db(tmp_path / f"v{version}", entries, version)
        walked = store.metadata_store(store_module._WALK_FROM)
        assert (walked.open("a").shape[0], walked.open("b").shape[0]) == want, version


def test_read_cast_to_a_narrower_type(tmp_path):
    """A float64 leaf read as float32 and as float16: the values cast (`dtypes.astype`)."""
    x = np.linspace(-3, 3, 50)
    ockpt.save_pytree(tmp_path / "item", {"x": x}, layout="item", use_ocdbt=False)
    array = pb.ArrayStore(tmp_path / "item").open("x")
    assert array.dtype == np.float64
    for dtype in (np.float32, np.float16):
        got = array.read(None, dtype).result()
        assert got.dtype == dtype and np.array_equal(got, x.astype(dtype))


def test_views_of_an_array_with_no_element():
    item = FIXTURES / "orbax-0.5.15" / "zero_size_no_ocdbt" / "checkpoint"
    store = pb.ArrayStore(item)
    for name in ("rows0", "cols0", "mid0"):
        array = store.open(name)
        full = np.zeros(array.shape, array.dtype)
        for index in (
            (slice(None),),
            (slice(0, 0),),
            (Ellipsis, slice(1, 1)),
            (slice(None),) * len(array.shape),
        ):  # noqa: E501
            got = array.view(index).read().result()
            assert got.shape == full[index].shape, (name, index)


def test_walked_metadata_claims_each_metadata_value(tmp_path):
    """Two params whose metadata keys name the same stored bytes (OCDBT-024): the second is
    refused when the walked store opens it, though its document is the first's."""
    from ockpt.ocdbt import Database
    from ockpt.ocdbt.format import IndirectDataReference
    from ockpt.ocdbt.write import DatabaseWriter
    from ockpt.store import as_store

    doc = _zarray([2]) + b" " * 100
    path = tmp_path / "db"
    build_database(path, {b"a/.zarray": doc, b"b/.zarray": doc + b" "}, inline_max=8)
    with Database(path) as db:
        entries = [(k, e.value) for k, e in db.entries()]
    first = dict(entries)[b"a/.zarray"]
    assert isinstance(first, IndirectDataReference)
    (path / "manifest.ocdbt").unlink()
    writer = DatabaseWriter("", open_file=as_store(path).writer)
    for key, value in entries:
        writer.put_entry(key, first if key == b"b/.zarray" else value)
    writer.commit()
    fmt = ItemFormat(Storage.OCDBT, 2, False, False, (), True)
    walked = pb.ArrayStore(LocalStore(str(path)), fmt).metadata_store(store_module._WALK_FROM)
    assert walked.open("a").shape == (2,)
    err = raised(FormatError, walked.open, "b")
    assert_error(err, rule="OCDBT-024")
