"""`ockpt.reader.item`: `OpenedItem` on golden fixtures and items changed on disk: the limits it
holds (when opened and for every read after), the engine it picks and what it tells the engine
(zarr version, whether a missing chunk is an error), its documents (metadata file, msgpack
file, strings, shardings, array metadatas, typed keys) read once, the arrays it keeps, and
what it releases when closed."""

from __future__ import annotations

import dataclasses
import json
import shutil

import msgpack
import numpy as np
import pytest

import ockpt
import ockpt.limits
from ockpt import engines
from ockpt.errors import FormatError, MissingDataError, NotACheckpointError, TargetError
from ockpt.item_files import ItemFiles
from ockpt.reader import item as item_module
from ockpt.reader.item import OpenedItem, in_its_limits
from ockpt.saved_tree import SavedLeaf
from tests.support import FIXTURES
from tests.support.errors import assert_error
from tests.support.expected import assert_same, expected_items

V0128 = FIXTURES / "orbax-0.12.8"
SHARDED = V0128 / "sharded" / "checkpoint"
KEYS = V0128 / "random_keys" / "checkpoint"
NO_OCDBT = V0128 / "no_ocdbt" / "checkpoint"
AGGREGATED = FIXTURES / "orbax-0.5.15" / "msgpack_aggregated" / "checkpoint"


def _open(path, **kw) -> OpenedItem:  # type: ignore[no-untyped-def]
    return OpenedItem(path, **{"step": None, "item": None, "context": None, **kw})


def _copy(src, tmp_path):  # type: ignore[no-untyped-def]
    dst = tmp_path / "item"
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------------------------------------
# Limits.


class _Holder:
    def __init__(self, limits: ockpt.limits.Limits) -> None:
        self.limits = limits

    @in_its_limits
    def in_force(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return ockpt.limits.current(), args, kwargs


def test_a_method_runs_under_its_objects_limits():
    mine, other = ockpt.limits.Limits(max_depth=3), ockpt.limits.Limits(max_depth=4)
    holder = _Holder(mine)
    assert holder.in_force(1, k=2) == (mine, (1,), {"k": 2})
    with ockpt.limits.applied(other):
        assert holder.in_force() == (mine, (), {})
        assert ockpt.limits.current() is other
    with ockpt.limits.applied(mine):
        assert holder.in_force(5) == (mine, (5,), {})
    assert ockpt.limits.current() is ockpt.limits.LIMITS
    assert _Holder.in_force.__name__ == "in_force"


def test_the_limits_in_force_when_opened_are_kept():
    mine = ockpt.limits.Limits(max_depth=40)
    with ockpt.limits.applied(mine):
        opened = _open(SHARDED)
    assert opened.limits is mine
    assert _open(SHARDED).limits is ockpt.limits.LIMITS
    given = ockpt.limits.Limits(max_depth=41)
    with ockpt.limits.applied(mine):
        assert _open(SHARDED, limits=given).limits is given


def test_the_documents_are_read_under_the_limits_given():
    size = (SHARDED / "_METADATA").stat().st_size
    with pytest.raises(FormatError) as info:
        _open(SHARDED, limits=ockpt.limits.Limits(max_json_bytes=size - 1))
    assert_error(info, rule="JSON-003", file=str(SHARDED / "_METADATA"))
    assert _open(SHARDED, limits=ockpt.limits.Limits(max_json_bytes=size)).has_metadata


def test_the_msgpack_file_is_held_to_max_msgpack_bytes():
    size = (AGGREGATED / "checkpoint").stat().st_size
    with pytest.raises(FormatError) as info:
        _open(AGGREGATED, limits=ockpt.limits.Limits(max_msgpack_bytes=size - 1))
    assert_error(info, rule="MSGPACK-001", file=str(AGGREGATED / "checkpoint"))
    with ockpt.limits.applied(ockpt.limits.Limits(max_msgpack_bytes=size - 1)):
        opened = _open(AGGREGATED, limits=ockpt.limits.Limits(max_msgpack_bytes=size))
    assert opened.msgpack is not None


def test_later_reads_are_held_to_the_items_limits(tmp_path):
    """The strings, shardings and array metadatas read after opening: each under the item's
    limits at the time (its `limits`), not those in force around the call."""
    path = _copy(NO_OCDBT, tmp_path)
    files = {
        "strings": path / "_strings.json",
        "shardings": path / "_sharding",
        "array_metadatas": path / "array_metadatas" / "process_0",
    }
    for what, file in files.items():
        size = file.stat().st_size
        tight = ockpt.limits.Limits(max_json_bytes=size - 1)
        roomy = ockpt.limits.Limits(max_json_bytes=size)
        opened = _open(path)
        call = {
            "strings": lambda o: o.strings(o.leaves["name"]),
            "shardings": lambda o: o.shardings(),
            "array_metadatas": lambda o: o.array_metadatas(),
        }[what]
        opened.limits = roomy
        with ockpt.limits.applied(tight):
            assert call(opened), what
        opened = _open(path)
        opened.limits = tight
        with ockpt.limits.applied(roomy), pytest.raises(FormatError) as info:
            call(opened)
        assert_error(info, rule="JSON-003", file=str(file))


# ---------------------------------------------------------------------------------------------
# The engine.


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError) as info:
        _open(SHARDED, backend="numpy")
    assert str(info.value) == "backend must be 'auto', 'tensorstore' or 'python', not 'numpy'"


def _recording_open_store(monkeypatch) -> list[dict]:
    """What `open_store` is asked, each call; the python engine opens the item."""
    seen: list[dict] = []
    original = engines.open_store

    def record(location, fmt, **kw):  # type: ignore[no-untyped-def]
        seen.append(kw)
        return original(location, fmt, **{**kw, "backend": "python"})

    monkeypatch.setattr(engines, "open_store", record)
    return seen


def test_auto_picks_python_for_random_access_and_tensorstore_else(monkeypatch):
    seen = _recording_open_store(monkeypatch)
    assert _open(SHARDED).format.storage.value == "ocdbt"
    real = item_module.as_store

    def remote(path, *, context):  # type: ignore[no-untyped-def]
        loc = real(path, context=context)
        caps = dataclasses.replace(loc.capabilities, random_access=False)
        loc.capabilities = caps  # as a store behind a network says
        return loc

    monkeypatch.setattr(item_module, "as_store", remote)
    _open(SHARDED)
    _open(SHARDED, backend="python")
    assert [s["backend"] for s in seen] == ["python", "tensorstore", "python"]


@pytest.mark.parametrize(
    "path,zarr_version,strict",
    [
        (SHARDED, 2, True),
        (V0128 / "zarr3" / "checkpoint", 3, True),
        (FIXTURES / "orbax-0.4.8" / "no_ocdbt" / "checkpoint", 2, False),
        (FIXTURES / "orbax-0.3.5" / "aggregated" / "checkpoint", None, False),
        (FIXTURES / "orbax-0.3.5" / "tree_metadata" / "checkpoint", None, False),
    ],
)
def test_what_the_engine_is_told(monkeypatch, path, zarr_version, strict):
    """`use_zarr3` gives the zarr version (none: found out per array); a missing chunk is an
    error only where `store_array_data_equal_to_fill_value` is true."""
    seen = _recording_open_store(monkeypatch)
    opened = _open(path, backend="python")
    assert seen == [
        {"backend": "python", "zarr_version": zarr_version, "missing_chunks_are_errors": strict}
    ]
    assert opened.store.zarr_version == zarr_version
    assert opened.store.missing_chunks_are_errors is strict


def test_a_missing_chunk_is_the_fill_value_where_the_item_allows_it(tmp_path):
    path = _copy(NO_OCDBT, tmp_path)
    (path / "sharded" / "1.1").unlink()
    with pytest.raises(MissingDataError) as info:
        ockpt.load_pytree(path, backend="python")
    assert info.value.rule == "LOAD-041"
    doc = json.loads((path / "_METADATA").read_text())
    doc["store_array_data_equal_to_fill_value"] = False
    (path / "_METADATA").write_text(json.dumps(doc))
    got = ockpt.load_pytree(path, backend="python")["sharded"]
    want = expected_items(V0128 / "no_ocdbt")[""]["sharded"].copy()
    want[2:4, 1:2] = 0  # chunk (1, 1) of (2, 1)
    assert np.array_equal(got, want)
    del doc["store_array_data_equal_to_fill_value"]  # not said: not strict
    (path / "_METADATA").write_text(json.dumps(doc))
    assert not _open(path).store.missing_chunks_are_errors


def test_use_zarr3_not_said(tmp_path):
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    del doc["use_zarr3"]
    (path / "_METADATA").write_text(json.dumps(doc))
    opened = _open(path)
    assert opened.store.zarr_version is None
    assert_same(ockpt.load_pytree(path, backend="python"), expected_items(V0128 / "no_ocdbt")[""])


# ---------------------------------------------------------------------------------------------
# Documents.


def _vanishing(monkeypatch, name: str) -> None:
    """`name` is gone once the item's layout has been resolved (a rename under the reader)."""
    real = item_module.resolve

    def resolve(loc, **kw):  # type: ignore[no-untyped-def]
        resolved = real(loc, **kw)
        get = resolved.location.get

        def gone(key, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None if key == name else get(key, *args, **kwargs)

        monkeypatch.setattr(resolved.location, "get", gone)
        return resolved

    monkeypatch.setattr(item_module, "resolve", resolve)


@pytest.mark.parametrize("name", ["_METADATA", "checkpoint"])
def test_a_document_removed_meanwhile(monkeypatch, name):
    _vanishing(monkeypatch, name)
    with pytest.raises(MissingDataError) as info:
        _open(AGGREGATED)
    assert_error(info, rule="LOAD-050", file=str(AGGREGATED / name), message="removed meanwhile")


def test_the_path_and_context_reach_the_store(monkeypatch):
    seen = []
    real = item_module.as_store

    def record(path, *, context):  # type: ignore[no-untyped-def]
        seen.append((path, context))
        return real(path, context=None)

    monkeypatch.setattr(item_module, "as_store", record)
    context = object()
    opened = _open(SHARDED, context=context)
    assert seen == [(SHARDED, context)] and opened.location.display == str(SHARDED)


def test_a_bad_msgpack_file_is_named(tmp_path):
    path = _copy(AGGREGATED, tmp_path)
    (path / "_METADATA").unlink()
    (path / "checkpoint").write_bytes(b"\xc1 not msgpack")
    with pytest.raises(FormatError) as info:
        _open(path)
    assert info.value.rule.startswith("MSGPACK-") and info.value.file == str(path / "checkpoint")


def test_two_leaves_of_one_param_name_are_refused_naming_the_document(tmp_path):
    """PATH-001, named in the document the tree came from."""
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    entry = json.loads(json.dumps(doc["tree_metadata"]["('a',)"]))
    entry["key_metadata"] = [{"key": "b.c", "key_type": 2}]  # beside ('b', 'c')
    doc["tree_metadata"]["('b.c',)"] = entry
    (path / "_METADATA").write_text(json.dumps(doc))
    with pytest.raises(FormatError) as info:
        _open(path)
    assert_error(info, rule="PATH-001", file=str(path / "_METADATA"), pointer="b.c")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "checkpoint").write_bytes(
        msgpack.packb({"a": {"b": "PLACEHOLDER://x"}, "c": "PLACEHOLDER://x"})
    )
    with pytest.raises(FormatError) as info:
        _open(legacy)
    assert_error(info, rule="PATH-001", file=str(legacy / "checkpoint"), pointer="x")


def test_the_document_leaves_the_parse_cache_once_the_tree_is_built(tmp_path):
    """`_METADATA` parsed to detect the layout is kept in the cache of parsed documents; the
    item, its last reader, takes it out (a tree of 100,000 leaves: 12 MB)."""
    import hashlib

    from ockpt.documents import metadata as metadata_document

    path = _copy(SHARDED, tmp_path)
    data = (path / "_METADATA").read_bytes()
    digest = hashlib.blake2b(data, digest_size=32).digest()

    def cached() -> bool:
        return any(key[:2] == (len(data), digest) for key in metadata_document._PARSED)

    metadata_document.MetadataDocument.from_bytes(data)
    assert cached()
    opened = _open(path)
    assert opened.has_metadata and not cached()


def test_the_item_asked_for_is_opened():
    """`item` reaches the layout's resolution: a v1 checkpoint's other pytree item."""
    path = V0128 / "v1_checkpointables" / "checkpoint"
    items = expected_items(V0128 / "v1_checkpointables")
    default, aux = _open(path), _open(path, item="aux")
    assert default.location.display == str(path / "state")
    assert aux.location.display == str(path / "aux")
    assert_same(ockpt.load_pytree(path, item="aux", backend="python"), items["aux"])
    assert set(aux.leaves) != set(default.leaves)


def test_a_bad_metadata_document_is_named(tmp_path):
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    doc["tree_metadata"]["('a',)"]["key_metadata"][0]["key_type"] = 9
    (path / "_METADATA").write_text(json.dumps(doc))
    with pytest.raises(FormatError) as info:
        _open(path)
    assert_error(info, rule="META-004", file=str(path / "_METADATA"))


def test_the_msgpack_file_is_refused_before_it_is_read_whole(monkeypatch):
    """The msgpack file is asked of the store with the item's `max_msgpack_bytes` and its
    rule, so that one too large is refused before it is read."""
    asked = []
    real = item_module.resolve

    def resolve(loc, **kw):  # type: ignore[no-untyped-def]
        resolved = real(loc, **kw)
        get = resolved.location.get

        def record(key, *args, **kwargs):  # type: ignore[no-untyped-def]
            asked.append((key, kwargs))
            return get(key, *args, **kwargs)

        monkeypatch.setattr(resolved.location, "get", record)
        return resolved

    monkeypatch.setattr(item_module, "resolve", resolve)
    limits = ockpt.limits.Limits(max_msgpack_bytes=123456)
    _open(AGGREGATED, limits=limits)
    assert ("checkpoint", {"limit": 123456, "rule": "MSGPACK-001"}) in asked


def test_the_metadata_file_is_the_document_the_tree_comes_from(tmp_path):
    opened = _open(AGGREGATED)
    assert opened.has_metadata and opened.metadata_file == str(AGGREGATED / "_METADATA")
    assert opened.msgpack is not None and opened.format.has_msgpack
    path = _copy(AGGREGATED, tmp_path)
    (path / "_METADATA").unlink()
    opened = _open(path)
    assert not opened.has_metadata and opened.metadata_file == str(path / "checkpoint")
    assert opened.random_key_impls() == {}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, {"int": np.zeros(3)}, partial=True)
    assert_error(info, rule="LOAD-030", file=str(path / "checkpoint"), leaf="int")
    meta = _open(SHARDED)
    assert meta.msgpack is None and meta.metadata_file == str(SHARDED / "_METADATA")


def test_an_item_with_neither_document(monkeypatch, tmp_path):
    """LOAD-050, where the layout still took it for an item (a race, or a layout that says
    so): neither `_METADATA` nor the msgpack file gives a tree."""
    path = _copy(AGGREGATED, tmp_path)
    real = item_module.resolve

    def resolve(loc, **kw):  # type: ignore[no-untyped-def]
        resolved = real(loc, **kw)
        fmt = dataclasses.replace(resolved.pytree.item, has_metadata=False, has_msgpack=False)
        pytree = dataclasses.replace(resolved.pytree, item=fmt)
        return dataclasses.replace(resolved, target=pytree)

    monkeypatch.setattr(item_module, "resolve", resolve)
    with pytest.raises(NotACheckpointError) as info:
        _open(path)
    assert_error(info, rule="LOAD-050", file=str(path))
    assert info.value.message == "neither _METADATA nor checkpoint"


@pytest.mark.parametrize("name", ["..", "a/../b", "x/.."])
def test_a_per_leaf_param_name_leaving_the_item_is_refused(tmp_path, name):
    """PATH-003: a per-leaf item's array is the directory of its param name; an absolute one
    is joined to the item (as Orbax does) and allowed; an OCDBT item's names are keys only."""
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    entry = doc["tree_metadata"].pop("('a',)")
    entry["key_metadata"] = [{"key": name, "key_type": 2}]
    doc["tree_metadata"][repr((name,))] = entry
    (path / "_METADATA").write_text(json.dumps(doc))
    with pytest.raises(FormatError) as info:
        _open(path)
    assert_error(info, rule="PATH-003", file=str(path / "_METADATA"), got=name)


def test_absolute_and_ocdbt_param_names_are_not_paths(tmp_path):
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    entry = doc["tree_metadata"].pop("('a',)")
    entry["key_metadata"] = [{"key": "/a", "key_type": 2}]
    doc["tree_metadata"]["('/a',)"] = entry
    (path / "_METADATA").write_text(json.dumps(doc))
    assert "/a" in _open(path).leaves
    ocdbt = tmp_path / "ocdbt"
    shutil.copytree(SHARDED, ocdbt)
    doc = json.loads((ocdbt / "_METADATA").read_text())
    entry = doc["tree_metadata"].pop("('x',)")
    entry["key_metadata"] = [{"key": "..", "key_type": 2}]
    doc["tree_metadata"]["('..',)"] = entry
    (ocdbt / "_METADATA").write_text(json.dumps(doc))
    assert ".." in _open(ocdbt).leaves


def test_a_string_leaf_named_like_a_path_is_no_array(tmp_path):
    """Only array leaves are directories: a string leaf's name is checked by the strings
    document, not as a path."""
    path = _copy(NO_OCDBT, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    entry = doc["tree_metadata"].pop("('name',)")
    entry["key_metadata"] = [{"key": "..", "key_type": 2}]
    doc["tree_metadata"]["('..',)"] = entry
    (path / "_METADATA").write_text(json.dumps(doc))
    assert _open(path).leaves[".."].source == "string"


@pytest.fixture
def strings_reads(monkeypatch) -> list[list[str]]:
    """The candidates of each `ItemFiles.strings_document` call (each read of a strings
    document), in order."""
    calls: list[list[str]] = []
    original = ItemFiles.strings_document

    def record(self, candidates):  # type: ignore[no-untyped-def]
        calls.append(list(candidates))
        return original(self, candidates)

    monkeypatch.setattr(ItemFiles, "strings_document", record)
    return calls


def test_placeholders_of_strings_without_metadata(tmp_path, strings_reads):
    """A msgpack file alone: its placeholders are strings where the strings document names
    them (read once), arrays else; a file without placeholders reads no strings document."""
    calls = strings_reads
    case = FIXTURES / "orbax-0.5.15" / "msgpack_placeholders"
    path = _copy(case / "checkpoint", tmp_path)
    (path / "_METADATA").unlink()
    opened = _open(path)
    assert opened.leaves["name"].source == "string" and opened.leaves["lr"].source == "array"
    assert len(calls) == 1 and "name" in calls[0]
    assert opened.strings(opened.leaves["name"]) == "msgpack" and len(calls) == 1
    assert opened._msgpack_strings() == {"name"} and len(calls) == 1
    calls.clear()
    agg = _copy(AGGREGATED, tmp_path / "agg")
    (agg / "_METADATA").unlink()
    assert _open(agg).leaves["str"].source == "inline" and calls == []


def test_strings_are_read_once_and_missing_ones_named(tmp_path, strings_reads):
    calls = strings_reads
    opened = _open(V0128 / "scalars_strings" / "checkpoint")
    assert calls == []
    assert opened.strings(opened.leaves["str"]) == "hello"
    assert opened.strings(opened.leaves["nested.names.1"]) == "beta"
    assert len(calls) == 1 and "str" in calls[0] and "np_float32" not in calls[0]
    path = _copy(NO_OCDBT, tmp_path)
    (path / "_strings.json").unlink()
    opened = _open(path)
    with pytest.raises(MissingDataError) as info:
        opened.strings(opened.leaves["name"])
    assert_error(info, rule="LOAD-042", file=str(path / "_strings.json"))
    assert "needed for string leaf 'name'" in info.value.message


def test_shardings_and_array_metadatas():
    opened = _open(SHARDED)
    shardings = opened.shardings()
    assert set(shardings) == set(opened.leaves) and shardings["xy"].mesh_shape == (4, 2)
    assert _open(AGGREGATED).shardings() == {}
    found = opened.array_metadatas()
    assert set(found) == set(opened.leaves) and found["xy"].write_shape == (2, 2)
    assert _open(SHARDED).array_metadatas(marker=b"random_key_impl") == {}
    keys = _open(KEYS).array_metadatas(marker=b"random_key_impl")
    assert keys["rngs.grid"].random_key_impl == "threefry2x32"


def test_random_key_impls_of_array_leaves_read_once(tmp_path, monkeypatch):
    opened = _open(KEYS)
    impls = opened.random_key_impls()
    assert impls["rngs.rbg"] == "rbg" and impls["rngs.grid"] == "threefry2x32"
    assert "params.w" not in impls and "legacy.prng_key" not in impls
    assert opened.random_key_impls() is impls
    path = _copy(KEYS, tmp_path)
    doc = path / "array_metadatas" / "process_0"
    text = doc.read_text()
    # a key recorded for a param that is no array leaf of the tree is left out
    text = text.replace('"param_name": "rngs.rbg"', '"param_name": "rngs.gone"')
    doc.write_text(text)
    impls = _open(path).random_key_impls()
    assert "rngs.gone" not in impls and "rngs.rbg" not in impls and "rngs.grid" in impls


def test_a_key_recorded_for_a_string_leaf_is_no_key(tmp_path):
    path = _copy(KEYS, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    doc["tree_metadata"]["('rngs', 'rbg')"]["value_metadata"]["value_type"] = "string"
    (path / "_METADATA").write_text(json.dumps(doc))
    opened = _open(path)
    assert opened.leaves["rngs.rbg"].source == "string"
    assert "rngs.rbg" not in opened.random_key_impls() and "rngs.grid" in opened.random_key_impls()


# ---------------------------------------------------------------------------------------------
# Arrays and closing.


def test_arrays_are_opened_together_and_kept(monkeypatch):
    opened = _open(SHARDED, backend="python")
    store_type = type(opened.store)
    batches = []
    original = store_type.open_many

    def record(self, names):  # type: ignore[no-untyped-def]
        batches.append(list(names))
        return original(self, names)

    monkeypatch.setattr(store_type, "open_many", record)
    first = opened.arrays(["xy", "x"])
    assert list(first) == ["xy", "x"] and first["xy"].shape == (8, 4)
    again = opened.arrays(["x", "yx", "xy"])
    assert list(again) == ["x", "yx", "xy"] and again["xy"] is first["xy"]
    assert batches == [["xy", "x"], ["yx"]]
    assert opened.arrays(["x"]) == {"x": first["x"]} and len(batches) == 2
    assert opened.array("xy") is first["xy"]
    single = opened.array("bf16_x")
    assert single.shape == (4, 2) and opened.array("bf16_x") is not single


def test_close_releases_what_the_item_holds(monkeypatch):
    closed = []
    with _open(SHARDED, backend="python") as opened:
        assert isinstance(opened, OpenedItem)
        kept = opened.arrays(["xy"])["xy"]
        monkeypatch.setattr(opened.store, "close", lambda: closed.append("store"))
        loc_close = opened.location.close
        monkeypatch.setattr(
            opened.location, "close", lambda: closed.append("location") or loc_close()
        )
    assert closed == ["store", "location"]
    assert opened._arrays == {}
    assert opened.arrays(["xy"])["xy"] is not kept


def test_an_opened_item_loads_as_saved():
    opened = _open(SHARDED, backend="python")
    leaf = opened.leaves["xy"]
    assert isinstance(leaf, SavedLeaf) and leaf.source == "array"
    assert opened.location.display == str(SHARDED) and opened.files is not None
    assert_same(ockpt.load_pytree(SHARDED, backend="python"), expected_items(V0128 / "sharded")[""])
