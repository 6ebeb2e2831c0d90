"""Tests written to kill the mutants of documents/metadata.py, sharding.py, array_metadatas.py
and checkpoint_metadata.py that survived the mutation run of the format core (or that it gave
no verdict: tests/mutation/RESULTS.md names each mutant and the test here that kills it). They
pin what the document models promise: the whole text of each error (message, file, JSON
pointer, expected, got and rule), what the full `_METADATA` parser reads when the quick paths
step aside, where the quick paths step aside, the parse cache, and exact round trips."""

from __future__ import annotations

import json

import pytest

from ockpt.documents import (
    ArrayMetadatas,
    CheckpointMetadata,
    MetadataDocument,
    NamedShardingSpec,
    RootMetadata,
    ShardingDocument,
    SingleDeviceShardingSpec,
    metadata,
)
from ockpt.documents.array_metadatas import ArrayMetadata, process_index
from ockpt.documents.metadata import TreeEntry, ValueMetadata
from ockpt.documents.sharding import parse_sharding
from ockpt.errors import DocumentError
from ockpt.limits import LIMITS
from ockpt.paths import EmptyNode, KeyEntry, KeyType


def _error(fn, *args, **kwargs) -> DocumentError:
    with pytest.raises(DocumentError) as info:
        fn(*args, **kwargs)
    return info.value


def _text(fn, *args, **kwargs) -> str:
    """The whole text of the DocumentError that `fn(*args, **kwargs)` raises."""
    return str(_error(fn, *args, **kwargs))


# ---------------------------------------------------------------------------------------------
# metadata.py: one tree entry through the full parser (what the quick paths leave to it).

KEY_A = "('a',)"
PTR_A = "/tree_metadata/('a',)"


def _entry(value, keys=None, **more):
    keys = [{"key": "a", "key_type": 2}] if keys is None else keys
    return {"key_metadata": keys, "value_metadata": value, **more}


def _full(key, obj, file="m"):
    """`TreeEntry.from_json` with the quick path asked first; `obj` is not plain, so the full
    parser reads it (asserted)."""
    assert metadata._plain_entry(TreeEntry, key, obj, {}) is None
    return TreeEntry.from_json(key, obj, file=file)


def test_value_metadata_faults_name_file_pointer_and_rule():
    """Every fault of `value_metadata` names the file, its JSON pointer and its rule (META-002
    for its shape, JSON-004 for a field's type). Kills ValueMetadata.from_json 3-5, 9-11,
    17-18, 25-27, 32, 35-38, 41-42, 53-54, 62-63, 66-67, 84 (and the same on its other
    arguments)."""
    vm = PTR_A + "/value_metadata"
    assert _text(_full, KEY_A, _entry([])) == (
        f"m at {vm}: wrong type (expected 'object', got 'array') [META-002]"
    )
    assert _text(_full, KEY_A, _entry({"skip_deserialize": True})) == (
        f"m at {vm}: required field 'value_type' is missing [META-002]"
    )
    assert _text(_full, KEY_A, _entry({"value_type": 1, "x": 0})) == (
        f"m at {vm}/value_type: wrong type (expected 'string', got 'integer') [JSON-004]"
    )
    assert _text(_full, KEY_A, _entry({"value_type": "scalar", "skip_deserialize": 1})) == (
        f"m at {vm}/skip_deserialize: wrong type (expected 'boolean', got 'integer') [JSON-004]"
    )
    assert _text(_full, KEY_A, _entry({"value_type": "scalar", "write_shape": [1, "2"]})) == (
        f"m at {vm}/write_shape/1: wrong type (expected 'integer', got 'string') [JSON-004]"
    )
    assert _text(_full, KEY_A, _entry({"value_type": "scalar", "write_shape": [-1]})) == (
        f"m at {vm}/write_shape/0: negative size (expected '>= 0', got -1) [JSON-004]"
    )
    # the pointer it is given is the one it extends (a key with '/' and '~' is escaped)
    assert _text(ValueMetadata.from_json, {"value_type": None}, file="f", pointer="/p~1q") == (
        "f at /p~1q/value_type: wrong type (expected 'string', got 'null') [JSON-004]"
    )


def test_value_metadata_fields_read_by_the_full_parser():
    """The full parser keeps value_type, skip_deserialize (None when absent), write_shape (None
    when absent or null) and every other field, and writes back exactly what it read. Kills
    ValueMetadata.from_json 14, 46-50, 68, 90-93, 95-97."""
    cases = [
        ({"value_type": "jax.Array", "future": 1}, None, None, {"future": 1}),
        ({"value_type": "scalar", "skip_deserialize": True, "x": [1]}, True, None, {"x": [1]}),
        ({"value_type": "scalar", "skip_deserialize": False, "x": 0}, False, None, {"x": 0}),
        ({"value_type": "np.ndarray", "write_shape": [2, 0], "y": {}}, None, (2, 0), {"y": {}}),
        ({"value_type": "np.ndarray", "write_shape": None, "w": 2}, None, None, {"w": 2}),
    ]
    for raw, skip, shape, extra in cases:
        got = _full(KEY_A, _entry(raw))
        assert got.value == ValueMetadata(
            value_type=raw["value_type"], skip_deserialize=skip, write_shape=shape, extra=extra
        )
        assert type(got.value.extra) is dict
        direct = ValueMetadata.from_json(raw, file="f", pointer="/p")
        assert direct == got.value
        assert direct.to_json() == {k: v for k, v in raw.items() if v is not None}


def test_tree_entry_faults_name_file_pointer_and_rule():
    """The faults of one tree entry: not an object, a missing or mistyped key_metadata, a
    missing value_metadata (META-002), a key path over the depth limit (LIMIT-004, with the
    limit and the length), and a tree key that is not `tree_key` of its path (META-003, with
    both). The pointer escapes '/' in the tree key. Kills TreeEntry.from_json mutants on
    those messages, rules, files, pointers, expected and got values, and the `>` of the depth
    check."""
    assert _text(TreeEntry.from_json, KEY_A, [1], file="m") == (
        f"m at {PTR_A}: wrong type (expected 'object', got 'array') [META-002]"
    )
    assert _text(TreeEntry.from_json, KEY_A, {"value_metadata": {}}, file="m") == (
        f"m at {PTR_A}: required field 'key_metadata' is missing [META-002]"
    )
    assert _text(TreeEntry.from_json, KEY_A, _entry({}, keys={}), file="m") == (
        f"m at {PTR_A}/key_metadata: wrong type (expected 'array', got 'object') [JSON-004]"
    )
    no_value = {"key_metadata": [{"key": "a", "key_type": 2}]}
    assert _text(TreeEntry.from_json, KEY_A, no_value, file="m") == (
        f"m at {PTR_A}: required field 'value_metadata' is missing [META-002]"
    )
    deep = [{"key": "k", "key_type": 2}] * (LIMITS.max_depth + 1)
    key = repr(("k",) * (LIMITS.max_depth + 1))
    e = _error(TreeEntry.from_json, key, _entry({"value_type": "scalar"}, keys=deep), file="m")
    assert (e.message, e.rule, e.file, e.pointer) == (
        "key path too long",
        "LIMIT-004",
        "m",
        f"/tree_metadata/{key}/key_metadata",
    )
    assert (e.expected, e.got) == (f"<= {LIMITS.max_depth} keys", LIMITS.max_depth + 1)
    at_limit = deep[:-1]
    key = repr(("k",) * LIMITS.max_depth)
    got = TreeEntry.from_json(
        key, _entry({"value_type": "scalar", "z": 1}, keys=at_limit), file="m"
    )
    assert len(got.path) == LIMITS.max_depth
    slash = "('a/b',)"
    bad = _entry({"value_type": "scalar"}, keys=[{"key": "a/b", "key_type": 2}], more=1)
    e = _error(TreeEntry.from_json, "('b',)", bad, file="m")
    assert str(e) == (
        "m at /tree_metadata/('b',): tree key disagrees with its key_metadata "
        f"(expected {slash!r}, got \"('b',)\") [META-003]"
    )
    assert (e.expected, e.got) == (slash, "('b',)")
    e = _error(
        TreeEntry.from_json, slash, _entry([], keys=[{"key": "a/b", "key_type": 2}]), file="m"
    )
    assert e.pointer == "/tree_metadata/('a~1b',)/value_metadata"


def test_tree_entry_full_parser_keeps_the_path_value_and_other_fields():
    """What the full parser builds: the key path (dict keys and sequence indices), the value
    and the entry's other fields (kept, written back). Kills TreeEntry.from_json mutants on
    the path, the value and `extra`."""
    keys = [{"key": "layers", "key_type": 2}, {"key": "0", "key_type": 1}]
    raw = _entry({"value_type": "jax.Array", "skip_deserialize": False}, keys=keys, note="n")
    got = _full("('layers', '0')", raw)
    assert got.path == (KeyEntry("layers", KeyType.DICT), KeyEntry("0", KeyType.SEQUENCE))
    assert got.value == ValueMetadata(value_type="jax.Array", skip_deserialize=False)
    assert got.extra == {"note": "n"}
    assert got.to_json() == raw
    assert (got.tree_key, got.param_name) == ("('layers', '0')", "layers.0")


def test_key_entry_faults_name_file_pointer_and_rule():
    """The faults of one key_metadata entry (read by the full parser): its shape (META-002),
    a mistyped key or key_type (JSON-004), an unknown key_type (META-004, expected [1, 2]),
    a key over the byte limit (LIMIT-003, with its UTF-8 size), a sequence index that is not
    decimal (META-005) and unknown fields (META-002, named, sorted). Kills _key_entry mutants
    on those messages, rules, files, pointers, expected and got values."""
    ptr = PTR_A + "/key_metadata/0"
    value = {"value_type": "scalar"}

    def text(key_entry, key=KEY_A):
        return _text(TreeEntry.from_json, key, _entry(value, keys=[key_entry]), file="m")

    assert text("a") == f"m at {ptr}: wrong type (expected 'object', got 'string') [META-002]"
    assert text({"key_type": 2}) == f"m at {ptr}: required field 'key' is missing [META-002]"
    assert text({"key": "a"}) == f"m at {ptr}: required field 'key_type' is missing [META-002]"
    assert text({"key": 1, "key_type": 2}) == (
        f"m at {ptr}/key: wrong type (expected 'string', got 'integer') [JSON-004]"
    )
    assert text({"key": "a", "key_type": "2"}) == (
        f"m at {ptr}/key_type: wrong type (expected 'integer', got 'string') [JSON-004]"
    )
    e = _error(
        TreeEntry.from_json, KEY_A, _entry(value, keys=[{"key": "a", "key_type": 3}]), file="m"
    )
    assert str(e) == f"m at {ptr}/key_type: unknown key_type (expected [1, 2], got 3) [META-004]"
    assert e.__cause__ is None and e.__suppress_context__
    assert text({"key": "x", "key_type": 1}, "('x',)") == (
        "m at /tree_metadata/('x',)/key_metadata/0/key: sequence index is not a decimal "
        "integer (got 'x') [META-005]"
    )
    assert text({"key": "a", "key_type": 2, "z": 0, "y": 1}) == (
        f"m at {ptr}: unknown fields ['y', 'z'] [META-002]"
    )
    # the byte limit: 65535 UTF-8 bytes pass, one more does not; 3 bytes a character
    limit = LIMITS.max_key_bytes
    for n, fits in ((limit // 3, True), (limit // 3 + 1, False)):
        k = "\u20ac" * n
        raw = _entry(value, keys=[{"key": k, "key_type": 2, "more": 0}])
        if fits:
            with pytest.raises(DocumentError, match=r"unknown fields \['more'\]"):
                TreeEntry.from_json(repr((k,)), raw, file="m")
            continue
        e = _error(TreeEntry.from_json, repr((k,)), raw, file="m")
        assert (e.message, e.rule, e.file, e.pointer) == (
            "key too long",
            "LIMIT-003",
            "m",
            f"/tree_metadata/{repr((k,))}/key_metadata/0/key",
        )
        assert (e.expected, e.got) == (f"<= {limit} UTF-8 bytes", 3 * n)
    ok = "k" * limit  # ASCII: one byte each, exactly at the limit
    got = TreeEntry.from_json(
        repr((ok,)), _entry(value, keys=[{"key": ok, "key_type": 2}]), file="m"
    )
    assert got.path == (KeyEntry(ok, KeyType.DICT),)


def test_key_entry_reads_both_key_types():
    """The full parser reads key_type 2 as a dict key and 1 (a decimal text) as a sequence
    index; the entry is the key text and its type. Kills _key_entry mutants on its result."""
    keys = [{"key": "a", "key_type": 2, "k": 0}, {"key": "10", "key_type": 1, "k": 0}]
    with pytest.raises(DocumentError, match="unknown fields"):
        TreeEntry.from_json("('a', '10')", _entry({"value_type": "scalar"}, keys=keys), file="m")
    keys = [{"key": "a", "key_type": 2}, {"key": "10", "key_type": 1}]
    raw = _entry({"value_type": "scalar", "q": 1}, keys=keys)
    got = _full("('a', '10')", raw)
    assert got.path == (KeyEntry("a", KeyType.DICT), KeyEntry("10", KeyType.SEQUENCE))
    assert [type(e.key_type) for e in got.path] == [KeyType, KeyType]


# ---------------------------------------------------------------------------------------------
# metadata.py: the document, its limits and its parse cache.


def _doc_bytes(*paths, **fields) -> bytes:
    """A `_METADATA` as Orbax writes it (json.dumps' separators): one np.ndarray per path."""
    tree = {
        repr(tuple(p)): {
            "key_metadata": [{"key": k, "key_type": 2} for k in p],
            "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False},
        }
        for p in paths
    }
    return json.dumps({"tree_metadata": tree, **fields}).encode()


@pytest.fixture
def no_cache(monkeypatch):
    """An empty parse cache of `MetadataDocument.from_bytes` for the test."""
    monkeypatch.setattr(metadata, "_PARSED", {})
    return metadata


def test_too_many_entries_is_limit_002_in_both_parsers(no_cache, in_force):
    """LIMIT-002 (lowered to 2): a parsed document given to `from_json` is refused with its
    count; `from_bytes` refuses at the first entry past the limit ("more than 2"), whether the
    document is plain (the quick path steps aside at the limit) or not. Two entries pass.
    Kills _too_many 1-18, the count and comparison mutants of MetadataDocument.from_json and
    from_bytes, and _plain_document's limit check."""
    in_force(max_tree_entries=2)
    want = (
        "m at /tree_metadata: too many tree_metadata entries (expected '<= 2', got {}) [LIMIT-002]"
    )
    three = _doc_bytes(["a"], ["b"], ["c"])
    e = _error(MetadataDocument.from_json, json.loads(three), file="m")
    assert str(e) == want.format(3) and (e.got, e.pointer) == (3, "/tree_metadata")
    for data in (three, three.replace(b": ", b":"), _doc_bytes(*[[f"k{i}"] for i in range(9)])):
        e = _error(MetadataDocument.from_bytes, data, file="m")
        assert str(e) == want.format("'more than 2'") and e.got == "more than 2"
    two = _doc_bytes(["a"], ["b"])
    assert metadata._plain_document(two, {}) is not None
    assert metadata._plain_document(three, {}) is None
    for data in (two, two.replace(b": ", b":")):
        assert len(MetadataDocument.from_bytes(data, file="m").entries) == 2
    assert len(MetadataDocument.from_json(json.loads(two), file="m").entries) == 2


def test_read_refuses_a_file_over_the_document_limit(tmp_path, no_cache, in_force):
    """`MetadataDocument.read` refuses a file larger than the JSON document limit before
    reading it, with JSON-003 (the limit lowered to 40 bytes here). Kills
    MetadataDocument.read 9, 13, 14 (and its other limit mutants)."""
    path = tmp_path / "_METADATA"
    data = _doc_bytes(["a"])
    path.write_bytes(data)
    in_force(max_json_bytes=len(data))
    assert MetadataDocument.read(path).entries[0].tree_key == KEY_A
    in_force(max_json_bytes=len(data) - 1)
    with pytest.raises(Exception) as info:
        MetadataDocument.read(path)
    assert str(info.value) == (
        f"{path}: file larger than its size limit "
        f"(expected '<= {len(data) - 1} bytes', got {len(data)}) [JSON-003]"
    )


def test_document_faults_name_file_pointer_and_rule(no_cache):
    """The faults of the document itself: not an object, no tree_metadata, a tree_metadata
    that is not an object (META-001), a flag, custom_metadata or value_metadata_tree of the
    wrong type (JSON-004, at its pointer), and entries that do not form one tree (META-006,
    naming the file). Kills MetadataDocument.from_json mutants on those messages, rules,
    files and pointers."""
    e = _error(MetadataDocument.from_json, [], file="m")
    assert str(e) == "m: wrong type (expected 'object', got 'array') [META-001]"
    assert e.pointer == ""
    e = _error(MetadataDocument.from_json, {"use_ocdbt": True}, file="m")
    assert str(e) == "m: required field 'tree_metadata' is missing [META-001]"
    assert e.pointer == ""
    assert _text(MetadataDocument.from_json, {"tree_metadata": []}, file="m") == (
        "m at /tree_metadata: wrong type (expected 'object', got 'array') [META-001]"
    )
    for name in ("use_ocdbt", "use_zarr3", "store_array_data_equal_to_fill_value"):
        assert _text(MetadataDocument.from_json, {"tree_metadata": {}, name: 1}, file="m") == (
            f"m at /{name}: wrong type (expected 'boolean', got 'integer') [JSON-004]"
        )
    assert _text(
        MetadataDocument.from_json, {"tree_metadata": {}, "custom_metadata": []}, file="m"
    ) == ("m at /custom_metadata: wrong type (expected 'object', got 'array') [JSON-004]")
    assert (
        _text(MetadataDocument.from_json, {"tree_metadata": {}, "value_metadata_tree": 1}, file="m")
        == "m at /value_metadata_tree: wrong type (expected 'string', got 'integer') [JSON-004]"
    )
    e = _error(MetadataDocument.from_bytes, _doc_bytes(["a"], ["a", "b"]), file="m")
    assert (e.rule, e.file) == ("META-006", "m")
    e = _error(MetadataDocument.from_json, json.loads(_doc_bytes(["a"], ["a", "b"])), file="m")
    assert (e.rule, e.file) == ("META-006", "m")
    # an entry's fault names the file given, in both parsers
    bad_entry = {"tree_metadata": {KEY_A: []}}
    want = f"m at {PTR_A}: wrong type (expected 'object', got 'array') [META-002]"
    assert _text(MetadataDocument.from_json, bad_entry, file="m") == want
    assert _text(MetadataDocument.from_bytes, json.dumps(bad_entry).encode(), file="m") == want
    # the default file name
    assert _error(MetadataDocument.from_json, []).file == "_METADATA"
    assert _error(MetadataDocument.from_bytes, b"[]").file == "_METADATA"


def test_document_fields_round_trip(no_cache):
    """Every optional field is read (None kept as None, absent kept absent) and written back
    in place; unknown fields are kept. Kills MetadataDocument.from_json and to_json mutants
    on the flags, custom_metadata, value_metadata_tree and extra."""
    full = {
        "tree_metadata": json.loads(_doc_bytes(["a"]))["tree_metadata"],
        "use_ocdbt": True,
        "use_zarr3": False,
        "store_array_data_equal_to_fill_value": True,
        "custom_metadata": {"k": [1]},
        "value_metadata_tree": "t",
        "future": 2,
    }
    doc = MetadataDocument.from_json(full, file="m")
    assert (doc.use_ocdbt, doc.use_zarr3, doc.store_array_data_equal_to_fill_value) == (
        True,
        False,
        True,
    )
    assert (doc.custom_metadata, doc.value_metadata_tree, doc.extra) == (
        {"k": [1]},
        "t",
        {"future": 2},
    )
    assert doc.to_json() == full and list(doc.to_json()) == list(full)
    assert MetadataDocument.from_bytes(json.dumps(full).encode()) == doc
    nulls = {"tree_metadata": {}, "custom_metadata": None, "value_metadata_tree": None}
    doc = MetadataDocument.from_json(nulls)
    assert doc.custom_metadata is None and doc.value_metadata_tree is None
    assert doc.to_json() == nulls
    bare = MetadataDocument.from_json({"tree_metadata": {}})
    assert bare.to_json() == {"tree_metadata": {}}
    assert bare.use_ocdbt is metadata.ABSENT and bare.custom_metadata is metadata.ABSENT


def test_by_param_name_and_tree_leave_out_nothing_and_keep_empty_nodes(no_cache):
    """`by_param_name` maps param names to the entries that store a value, not empty nodes;
    `tree` rebuilds empty containers and None where the entries say so. Kills
    MetadataDocument.by_param_name 1 and the tree mutants."""
    tree = {
        "('a', 'w')": _entry({"value_type": "jax.Array"}, keys=[
            {"key": "a", "key_type": 2}, {"key": "w", "key_type": 2}]),
        "('e',)": _entry({"value_type": "Dict"}, keys=[{"key": "e", "key_type": 2}]),
        "('n',)": _entry({"value_type": "None"}, keys=[{"key": "n", "key_type": 2}]),
        "('l', '0')": _entry({"value_type": "scalar"}, keys=[
            {"key": "l", "key_type": 2}, {"key": "0", "key_type": 1}]),
    }  # fmt: skip
    doc = MetadataDocument.from_json({"tree_metadata": tree})
    assert doc.entries[1].value.empty_node is EmptyNode("Dict")
    assert doc.entries[2].value.empty_node is EmptyNode("None")
    assert sorted(doc.by_param_name()) == ["a.w", "l.0"]
    assert doc.by_param_name()["a.w"] is doc.entries[0]
    assert doc.tree() == {"a": {"w": doc.entries[0]}, "e": {}, "n": None, "l": [doc.entries[3]]}


def test_from_bytes_cache_is_per_class_and_keeps_four(no_cache):
    """`from_bytes` keeps the last four documents parsed, keyed by a digest of their bytes: the
    same bytes give the same object, a subclass gets its own parse, and the oldest is dropped
    first. Kills MetadataDocument.from_bytes mutants on the cache."""
    datas = [_doc_bytes([f"k{i}"]) for i in range(6)]
    first = MetadataDocument.from_bytes(datas[0])
    assert MetadataDocument.from_bytes(datas[0]) is first

    class Sub(MetadataDocument):
        pass

    sub = Sub.from_bytes(datas[0])
    assert type(sub) is Sub and sub is not first and sub.entries == first.entries
    assert Sub.from_bytes(datas[0]) is sub
    assert len(metadata._PARSED) == 1  # one digest: the subclass's parse replaced it
    docs = [MetadataDocument.from_bytes(d) for d in datas[1:5]]
    assert len(metadata._PARSED) == 4
    assert [MetadataDocument.from_bytes(d) for d in datas[1:5]] == docs
    assert all(
        MetadataDocument.from_bytes(d) is doc for d, doc in zip(datas[1:5], docs, strict=True)
    )
    again = MetadataDocument.from_bytes(datas[0])  # dropped: parsed anew
    assert again == first and again is not first
    assert MetadataDocument.from_bytes(datas[1]) is not docs[0]  # the oldest went first
    assert len(metadata._PARSED) == 4
    assert MetadataDocument.from_bytes(datas[4]) is docs[3]


# ---------------------------------------------------------------------------------------------
# metadata.py: the quick paths (`_plain_entry`, `_built_entry`, `_plain_document`). What they
# accept they must read exactly as the full parser does; where they step aside (None) is their
# documented domain: plain entries within the limits, written as Orbax writes them.


def _slow(key, obj):
    """The entry as the full parser alone reads it."""
    original = metadata._plain_entry
    metadata._plain_entry = lambda cls, key, obj, shared: None
    try:
        return TreeEntry.from_json(key, obj, file="m")
    finally:
        metadata._plain_entry = original


PLAIN_ENTRIES = [
    (KEY_A, _entry({"value_type": "scalar"})),
    (KEY_A, _entry({"value_type": "jax.Array", "skip_deserialize": True})),
    (KEY_A, _entry({"value_type": "np.ndarray", "skip_deserialize": False, "write_shape": []})),
    (KEY_A, _entry({"value_type": "np.ndarray", "write_shape": [0, 12, 3]})),
    (KEY_A, _entry({"value_type": "string", "write_shape": None})),
    ("('l', '0')", _entry({"value_type": "None"}, keys=[
        {"key": "l", "key_type": 2}, {"key": "0", "key_type": 1}])),
    ("('0', '17')", _entry({"value_type": "scalar"}, keys=[
        {"key": "0", "key_type": 2}, {"key": "17", "key_type": 1}])),
    (repr(("k",) * LIMITS.max_depth), _entry({"value_type": "scalar"}, keys=[
        {"key": "k", "key_type": 2}] * LIMITS.max_depth)),
    (repr(("k" * (LIMITS.max_key_bytes // 4),)), _entry({"value_type": "scalar"}, keys=[
        {"key": "k" * (LIMITS.max_key_bytes // 4), "key_type": 2}])),
]  # fmt: skip


@pytest.mark.parametrize("key, obj", PLAIN_ENTRIES, ids=range(len(PLAIN_ENTRIES)))
def test_plain_entries_take_the_quick_path_and_read_as_the_full_parser(key, obj):
    """A plain entry (two fields; keys of type 2, or 1 with a decimal text; up to 64 keys of
    up to max_key_bytes / 4 characters; a string value type, a boolean or absent
    skip_deserialize, a list of sizes or null write shape) is built by `_plain_entry`, equal
    to what the full parser reads. Kills _plain_entry and _built_entry mutants that refuse a
    plain entry or build another one."""
    shared: dict = {}
    fast = metadata._plain_entry(TreeEntry, key, obj, shared)
    assert fast is not None
    assert fast == _slow(key, obj) == TreeEntry.from_json(key, obj, file="m")
    assert fast.extra == {} and type(fast.value.extra) is dict
    assert [type(e.key_type) for e in fast.path] == [KeyType] * len(fast.path)


NOT_PLAIN = [
    (KEY_A, [1]),
    (KEY_A, _entry({"value_type": "scalar"}, more=1)),
    (KEY_A, {"key_metadata": [{"key": "a", "key_type": 2}]}),
    (KEY_A, {"key_metadata": {}, "value_metadata": {"value_type": "scalar"}}),
    (KEY_A, {"key_metadata": [{"key": "a", "key_type": 2}], "value_metadata": []}),
    (KEY_A, _entry({"value_type": "scalar", "custom": 1})),
    (KEY_A, _entry({"value_type": "scalar"}, keys=["a"])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": 2, "x": 1}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a"}])),
    ("()", _entry({"value_type": "scalar"}, keys=[])),
    (repr(("k",) * (LIMITS.max_depth + 1)), _entry({"value_type": "scalar"}, keys=[
        {"key": "k", "key_type": 2}] * (LIMITS.max_depth + 1))),
    ("(1,)", _entry({"value_type": "scalar"}, keys=[{"key": 1, "key_type": 2}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": True}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": 2.0}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": 3}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": 0}])),
    (KEY_A, _entry({"value_type": "scalar"}, keys=[{"key": "a", "key_type": 1}])),
    ("('01',)", _entry({"value_type": "scalar"}, keys=[{"key": "01", "key_type": 1}])),
    (repr(("k" * (LIMITS.max_key_bytes // 4 + 1),)), _entry({"value_type": "scalar"}, keys=[
        {"key": "k" * (LIMITS.max_key_bytes // 4 + 1), "key_type": 2}])),
    (KEY_A, _entry({"value_type": 1})),
    (KEY_A, _entry({"skip_deserialize": True})),
    (KEY_A, _entry({"value_type": "scalar", "skip_deserialize": None})),
    (KEY_A, _entry({"value_type": "scalar", "skip_deserialize": 0})),
    (KEY_A, _entry({"value_type": "scalar", "write_shape": (1,)})),
    (KEY_A, _entry({"value_type": "scalar", "write_shape": 1})),
    (KEY_A, _entry({"value_type": "scalar", "write_shape": [1, -1]})),
    (KEY_A, _entry({"value_type": "scalar", "write_shape": [True]})),
    (KEY_A, _entry({"value_type": "scalar", "write_shape": [1.0]})),
    ("('b',)", _entry({"value_type": "scalar"})),
    ("['a']", _entry({"value_type": "scalar"})),
]  # fmt: skip


@pytest.mark.parametrize("key, obj", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_unusual_entries_are_left_to_the_full_parser(key, obj):
    """`_plain_entry` steps aside (None) for anything but a plain entry: another shape, an
    unknown field, no key or more than 64, a key text that is not a string or too long for
    the quick check, a key_type that is not the int 1 or 2 (nor a bool), a sequence index
    that is not decimal, a value type that is not a string, a skip_deserialize that is not a
    boolean (null too), a write shape that is not a list of non-negative ints, a tree key
    that is not `tree_key` of the path. Kills _plain_entry and _built_entry mutants that
    accept such an entry (the full parser then refuses it or reads it with its details)."""
    assert metadata._plain_entry(TreeEntry, key, obj, {}) is None


def test_quick_path_shares_equal_keys_and_values():
    """Equal key entries and equal value metadata of many leaves are one object each, stored
    in the per-document `shared` dict by (text, key_type) and (value_type, skip, shape); the
    full parser's entries are equal, and `MetadataDocument.from_json` passes one `shared` to
    all its entries. Kills _built_entry mutants on `shared` and MetadataDocument.from_json 51,
    59, 63 (no `shared` passed on)."""
    shared: dict = {}
    keys = [{"key": "p", "key_type": 2}, {"key": "0", "key_type": 1}]
    value = {"value_type": "jax.Array", "skip_deserialize": False, "write_shape": [4]}
    one = metadata._plain_entry(TreeEntry, "('p', '0')", _entry(value, keys=keys), shared)
    keys2 = [{"key": "p", "key_type": 2}, {"key": "1", "key_type": 1}]
    two = metadata._plain_entry(TreeEntry, "('p', '1')", _entry(dict(value), keys=keys2), shared)
    assert one.path[0] is two.path[0] and one.value is two.value
    assert shared == {
        ("p", 2): KeyEntry("p", KeyType.DICT),
        ("0", 1): KeyEntry("0", KeyType.SEQUENCE),
        ("1", 1): KeyEntry("1", KeyType.SEQUENCE),
        ("jax.Array", False, (4,)): one.value,
    }
    assert shared[("0", 1)] is one.path[1] and shared[("p", 2)] is one.path[0]
    # no skip_deserialize: None in the value and in its `shared` key
    three = metadata._plain_entry(TreeEntry, KEY_A, _entry({"value_type": "s"}), shared)
    assert three.value.skip_deserialize is None and shared[("s", None, None)] is three.value
    # the full parser shares the same way through `from_json`'s `shared`
    doc = MetadataDocument.from_json(
        {
            "tree_metadata": {
                "('p', '0')": _entry(value, keys=keys),
                "('p', '1')": _entry(value, keys=keys2),
            }
        }
    )
    assert doc.entries[0].value is doc.entries[1].value
    assert doc.entries[0].path[0] is doc.entries[1].path[0]


def _plain_bytes(tree: dict, **fields) -> bytes:
    return json.dumps({"tree_metadata": tree, **fields}).encode()


def _one(name, value, kind=2):
    return repr((name,)), _entry(value, keys=[{"key": name, "key_type": kind}])


PLAIN_TREE = dict(
    [
        _one("a", {"value_type": "scalar"}),
        _one("b", {"value_type": "jax.Array", "skip_deserialize": True}),
        _one("c", {"value_type": "np.ndarray", "skip_deserialize": False, "write_shape": []}),
        _one("d", {"value_type": "np.ndarray", "write_shape": [0, 12, 3]}),
        _one("e", {"value_type": "jax.Array", "skip_deserialize": True, "write_shape": [7]}),
        PLAIN_ENTRIES[5],
        PLAIN_ENTRIES[6],
    ]
)


def test_plain_document_reads_what_the_full_parser_reads():
    """A document written as Orbax writes it is read by `_plain_document` (one regular
    expression per entry): its entries are the full parser's, in order, and the rest of the
    document (flags, unknown fields) is read too. Kills _plain_document mutants on the match
    groups, the key types, skip_deserialize, the write shape and the rest of the document."""
    data = _plain_bytes(PLAIN_TREE, use_zarr3=True, future=[1, {"a": None}])
    shared: dict = {}
    obj = metadata._plain_document(data, shared)
    assert obj is not None
    assert list(obj) == ["tree_metadata", "use_zarr3", "future"]
    assert (obj["use_zarr3"], obj["future"]) == (True, [1, {"a": None}])
    assert list(obj["tree_metadata"]) == list(PLAIN_TREE)
    for key, raw in PLAIN_TREE.items():
        assert obj["tree_metadata"][key] == _slow(key, raw), key
    assert shared[("a", 2)] is obj["tree_metadata"][KEY_A].path[0]
    # one entry, ASCII-free text (json.dumps with ensure_ascii=False)
    text = json.dumps({"tree_metadata": {"('é',)": _entry({"value_type": "scalar"}, keys=[
        {"key": "é", "key_type": 2}])}}, ensure_ascii=False).encode()  # fmt: skip
    obj = metadata._plain_document(text, {})
    assert obj is not None and obj["tree_metadata"]["('é',)"].path == (KeyEntry("é", KeyType.DICT),)


NOT_PLAIN_DOCUMENTS = [
    _plain_bytes(PLAIN_TREE).replace(b": ", b":"),  # compact separators
    _plain_bytes({KEY_A: _entry({"value_type": "s"}, more=1)}),  # an unknown field
    _plain_bytes({"('a\"',)": _entry({"value_type": "s"}, keys=[{"key": 'a"', "key_type": 2}])}),
    _plain_bytes(
        {"('\\u00e9',)": _entry({"value_type": "s"}, keys=[{"key": "\u00e9", "key_type": 2}])}
    ),
    _plain_bytes({"('b',)": _entry({"value_type": "s"})}),  # tree key disagrees
    _plain_bytes({"('01',)": _entry({"value_type": "s"}, keys=[{"key": "01", "key_type": 1}])}),
    _plain_bytes({KEY_A: _entry({"value_type": "s"}, keys=[{"key": "a", "key_type": 3}])}),
    _plain_bytes({KEY_A: _entry({"value_type": "s", "write_shape": [1, -2]})}),
    _plain_bytes({KEY_A: _entry({"value_type": "s", "write_shape": [10**18]})}),
    _plain_bytes({KEY_A: _entry({"value_type": "s", "skip_deserialize": None})}),
    _plain_bytes({}),  # no entry
    b" " + _plain_bytes(PLAIN_TREE),
    _plain_bytes(PLAIN_TREE)[:-1] + b"\xff}",  # not UTF-8
    _plain_bytes(PLAIN_TREE) + b"x",  # the rest is not JSON
    _plain_bytes({KEY_A: _entry({"value_type": "s"})})[:-2] + b', "(\'a\',)": '
    + json.dumps(_entry({"value_type": "s"})).encode() + b"}}",  # a tree key twice
]  # fmt: skip


@pytest.mark.parametrize("data", NOT_PLAIN_DOCUMENTS, ids=range(len(NOT_PLAIN_DOCUMENTS)))
def test_unusual_documents_are_left_to_the_full_parser(data):
    """`_plain_document` steps aside (None) for a document not written exactly as Orbax
    writes it (other separators or spacing, escapes in a text, an unknown field), for an
    entry the quick path does not build, for no entry, bytes that are not UTF-8, a rest that
    is not JSON, and a tree key given twice (which the full parser refuses as JSON-002). Kills
    _plain_document mutants that accept such a document."""
    assert metadata._plain_document(data, {}) is None


def test_plain_document_bounds(in_force):
    """`_plain_document` reads only `bytes` within the document size limit, and only while the
    nesting limit lets the full parser read a plain entry (8 levels). Kills the size, type and
    depth mutants of its first check."""
    data = _plain_bytes(PLAIN_TREE)
    assert metadata._plain_document(data, {}) is not None
    assert metadata._plain_document(bytearray(data), {}) is None
    assert metadata._plain_document(data.decode(), {}) is None
    in_force(max_json_bytes=len(data))
    assert metadata._plain_document(data, {}) is not None
    in_force(max_json_bytes=len(data) - 1)
    assert metadata._plain_document(data, {}) is None
    in_force(max_depth=8)
    assert metadata._plain_document(data, {}) is not None
    in_force(max_depth=7)
    assert metadata._plain_document(data, {}) is None


def test_duplicate_tree_key_is_json_002_not_a_quiet_overwrite(no_cache):
    """A tree key given twice in a plain document is refused by the full parser (JSON-002), not
    kept once by the quick path. Kills _plain_document's duplicate check."""
    data = NOT_PLAIN_DOCUMENTS[-1]
    e = _error(MetadataDocument.from_bytes, data, file="m")
    assert (e.rule, e.file) == ("JSON-002", "m")


# ---------------------------------------------------------------------------------------------
# sharding.py

from conftest import FIXTURES  # noqa: E402

SHARDED = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint" / "_sharding"
MESH_4X2 = [[{"id": 2 * r + c} for c in range(2)] for r in range(4)]


def test_real_shardings_decode_to_their_specs():
    """The `_sharding` of Orbax 0.12.8's sharded fixture: each param's mesh, axis names and
    types, partition spec (None, one axis, several axes as a tuple), device ids in C order,
    and the single-device one; each spec's `to_json` is its inner JSON, lists for tuples.
    Kills NamedShardingSpec.from_json / to_json 18, _axis_spec and _device_ids mutants on the
    values they build."""
    raw = json.loads(SHARDED.read_bytes())
    doc = ShardingDocument.read(SHARDED)
    specs = doc.shardings
    assert sorted(specs) == [
        "bf16_x", "none_y", "replicated", "single_device", "x", "xy", "xy_joint", "yx",
    ]  # fmt: skip
    auto = ("AxisType.Auto", "AxisType.Auto")
    for name, partition in [
        ("none_y", (None, "y")),
        ("replicated", ()),
        ("x", ("x",)),
        ("xy", ("x", "y")),
        ("xy_joint", (("x", "y"),)),
        ("yx", ("y", "x")),
    ]:
        assert specs[name] == NamedShardingSpec(
            mesh_shape=(4, 2),
            axis_names=("x", "y"),
            partition_spec=partition,
            device_ids=tuple(range(8)),
            axis_types=auto,
        ), name
    assert specs["single_device"] == SingleDeviceShardingSpec(device_str="cpu:3")
    from ockpt.paths import sharding_key

    for name, spec in specs.items():
        inner = json.loads(raw[sharding_key(name)])
        assert spec.to_json() == inner and list(spec.to_json()) == list(inner), name
    assert doc.to_json() == raw and doc.to_bytes() == SHARDED.read_bytes()


def _named(**fields):
    base = {
        "sharding_type": "NamedSharding",
        "shape": [4, 2],
        "axis_names": ["x", "y"],
        "partition_spec": ["x"],
    }
    return json.dumps({**base, **fields})


def _drop(name):
    return json.dumps({k: v for k, v in json.loads(_named()).items() if k != name})


def test_named_sharding_faults_name_file_pointer_and_rule():
    """Every fault of a NamedSharding is SHARD-003 at its JSON pointer inside the `_sharding`
    value (the param's key): a missing field, a mistyped shape, axis name, axis type or
    partition spec, names and shape of different lengths (expected the shape's), an axis the
    mesh lacks (expected the names), a device mesh that is not an object or lacks "mesh".
    Kills NamedShardingSpec.from_json and _axis_spec mutants on those messages, rules, files,
    pointers, expected and got values."""
    P = "/eA=="

    def text(value):
        return _text(parse_sharding, value, file="s", pointer=P)

    for name in ("shape", "axis_names", "partition_spec"):
        assert text(_drop(name)) == f"s at {P}: required field {name!r} is missing [SHARD-003]"
    assert text(_named(shape=2)) == (
        f"s at {P}/shape: wrong type (expected 'array', got 'integer') [SHARD-003]"
    )
    assert text(_named(shape=[4, -2])) == (
        f"s at {P}/shape/1: negative size (expected '>= 0', got -2) [SHARD-003]"
    )
    assert text(_named(axis_names="xy")) == (
        f"s at {P}/axis_names: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(axis_names=["x", 1])) == (
        f"s at {P}/axis_names: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert text(_named(axis_names=["x"])) == (
        f"s at {P}: axis_names and shape differ in length (expected 2, got 1) [SHARD-003]"
    )
    assert text(_named(axis_types="Auto")) == (
        f"s at {P}/axis_types: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(axis_types=["Auto", None])) == (
        f"s at {P}/axis_types: wrong type (expected 'string', got 'null') [SHARD-003]"
    )
    assert text(_named(partition_spec="x")) == (
        f"s at {P}/partition_spec: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(partition_spec=[None, 1])) == (
        f"s at {P}/partition_spec/1: wrong type (expected 'array', got 'integer') [SHARD-003]"
    )
    assert text(_named(partition_spec=[["x", 2]])) == (
        f"s at {P}/partition_spec/0: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert text(_named(partition_spec=[None, "z"])) == (
        f"s at {P}/partition_spec/1: partition_spec names an axis the mesh lacks "
        "(expected ['x', 'y'], got 'z') [SHARD-003]"
    )
    assert text(_named(partition_spec=[["y", "w"]])) == (
        f"s at {P}/partition_spec/0: partition_spec names an axis the mesh lacks "
        "(expected ['x', 'y'], got 'w') [SHARD-003]"
    )
    assert text(_named(device_mesh=[])) == (
        f"s at {P}/device_mesh: wrong type (expected 'object', got 'array') [SHARD-003]"
    )
    assert text(_named(device_mesh={"ids": []})) == (
        f"s at {P}/device_mesh: required field 'mesh' is missing [SHARD-003]"
    )


def test_device_mesh_faults_name_the_cell():
    """The nested device mesh must have the declared shape, level by level (expected the
    size, got the length), its cells must be objects with an integer id; a mesh of more than
    2^24 devices is refused before it is walked (exactly 2^24 is walked). Kills _device_ids
    mutants on those messages, rules, files, pointers, depths, expected and got values, and
    the bound."""
    M = "/k/device_mesh/mesh"

    def text(mesh, shape=(4, 2)):
        value = _named(
            shape=list(shape), axis_names=["x", "y"][: len(shape)], device_mesh={"mesh": mesh}
        )
        return _text(parse_sharding, value, file="s", pointer="/k")

    assert text(MESH_4X2[:3]) == (
        f"s at {M}: device mesh does not have the declared shape (expected 4, got 3) [SHARD-003]"
    )
    short = [row[:] for row in MESH_4X2]
    short[2] = short[2][:1]
    assert text(short) == (
        f"s at {M}/2: device mesh does not have the declared shape (expected 2, got 1) [SHARD-003]"
    )
    bad = [row[:] for row in MESH_4X2]
    bad[3] = {"id": 6}
    assert text(bad) == f"s at {M}/3: wrong type (expected 'array', got 'object') [SHARD-003]"
    bad[3] = [{"id": 6}, 7]
    assert text(bad) == f"s at {M}/3/1: wrong type (expected 'object', got 'integer') [SHARD-003]"
    bad[3] = [{"id": 6}, {"di": 7}]
    assert text(bad) == f"s at {M}/3/1: required field 'id' is missing [SHARD-003]"
    bad[3] = [{"id": 6}, {"id": "7"}]
    assert text(bad) == (
        f"s at {M}/3/1/id: wrong type (expected 'integer', got 'string') [SHARD-003]"
    )
    assert text({}, shape=(4097, 4097)) == (
        f"s at {M}: device mesh too large (expected '<= 16777216 devices', got 16785409) "
        "[SHARD-003]"
    )
    assert text([], shape=(1 << 24,)) == (
        f"s at {M}: device mesh does not have the declared shape (expected 16777216, got 0) "
        "[SHARD-003]"
    )


def test_device_meshes_round_trip_in_c_order():
    """Device ids are read in C order and nested back the same way, for any order of ids, a
    0-d mesh (one cell) and a mesh with a zero-sized axis (no cell). Kills _device_ids and
    _nest mutants (7: a division by a zero axis; 11 is equivalent, see RESULTS.md)."""
    ids = [5, 3, 7, 1, 0, 2, 6, 4]
    mesh = [[{"id": ids[2 * r + c]} for c in range(2)] for r in range(4)]
    spec = parse_sharding(_named(device_mesh={"mesh": mesh}))
    assert spec.device_ids == tuple(ids)
    assert spec.to_json()["device_mesh"] == {"mesh": mesh}
    mesh3 = [[[{"id": 4 * a + 2 * b + c} for c in range(2)] for b in range(2)] for a in range(2)]
    spec = parse_sharding(
        _named(
            shape=[2, 2, 2],
            axis_names=["a", "b", "c"],
            partition_spec=[],
            device_mesh={"mesh": mesh3},
        )
    )
    assert spec.device_ids == tuple(range(8)) and spec.to_json()["device_mesh"]["mesh"] == mesh3
    zero_d = parse_sharding(
        _named(shape=[], axis_names=[], partition_spec=[], device_mesh={"mesh": {"id": 9}})
    )
    assert zero_d.device_ids == (9,) and zero_d.mesh_shape == ()
    assert zero_d.to_json()["device_mesh"] == {"mesh": {"id": 9}}
    for shape, mesh in (([0], []), ([0, 3], []), ([2, 0], [[], []])):
        names = ["a", "b"][: len(shape)]
        spec = parse_sharding(
            _named(shape=shape, axis_names=names, partition_spec=[], device_mesh={"mesh": mesh})
        )
        assert spec.device_ids == ()
        assert spec.to_json()["device_mesh"] == {"mesh": mesh}


def test_named_sharding_fields_and_order_round_trip():
    """NamedSharding's `to_json` writes its fields in Orbax's order (sharding_type, shape,
    axis_names, axis_types when read, partition_spec, device_mesh when read, then unknown
    fields, which are kept); 0.5.x specs without axis types and mesh stay without them.
    Kills NamedShardingSpec.from_json / to_json mutants on each field."""
    raw = {
        "sharding_type": "NamedSharding",
        "shape": [4, 2],
        "axis_names": ["x", "y"],
        "axis_types": ["Explicit", "Auto"],
        "partition_spec": [["x", "y"], None],
        "device_mesh": {"mesh": MESH_4X2},
        "memory_kind": "device",
    }
    spec = parse_sharding(json.dumps(raw))
    assert spec.axis_types == ("Explicit", "Auto") and spec.extra == {"memory_kind": "device"}
    assert spec.partition_spec == (("x", "y"), None)
    assert type(spec.partition_spec[0]) is tuple and type(spec.mesh_shape) is tuple
    assert spec.to_json() == raw and list(spec.to_json()) == list(raw)
    old = json.loads(_named(partition_spec=[None, "y"]))
    spec = parse_sharding(json.dumps(old))
    assert (spec.axis_types, spec.device_ids, spec.extra) == (None, None, {})
    assert spec.to_json() == old and list(spec.to_json()) == list(old)


def test_parse_sharding_and_single_device_faults():
    """A `_sharding` value must be a string (SHARD-002) holding JSON (JSON-001 at the key) of
    an object (SHARD-002) with a string sharding_type that is known (SHARD-003, expected the
    known names); a SingleDeviceSharding needs a string device_str (SHARD-003). The default
    file is `_sharding`, the default pointer the document's root. Kills parse_sharding and
    SingleDeviceShardingSpec.from_json mutants on those messages, rules, files, pointers,
    expected and got values."""
    P = "/k"
    assert _text(parse_sharding, 1, file="s", pointer=P) == (
        f"s at {P}: wrong type (expected 'string', got 'integer') [SHARD-002]"
    )
    e = _error(parse_sharding, "{", file="s", pointer=P)
    assert (e.rule, e.file, e.pointer) == ("JSON-001", "s", P)
    assert _text(parse_sharding, "[]", file="s", pointer=P) == (
        f"s at {P}: wrong type (expected 'object', got 'array') [SHARD-002]"
    )
    assert _text(parse_sharding, "{}", file="s", pointer=P) == (
        f"s at {P}: required field 'sharding_type' is missing [SHARD-003]"
    )
    assert _text(parse_sharding, '{"sharding_type": 1}', file="s", pointer=P) == (
        f"s at {P}/sharding_type: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert _text(parse_sharding, '{"sharding_type": "GSPMDSharding"}', file="s", pointer=P) == (
        f"s at {P}/sharding_type: unknown sharding_type "
        "(expected ['NamedSharding', 'SingleDeviceSharding'], got 'GSPMDSharding') [SHARD-003]"
    )
    single = '{"sharding_type": "SingleDeviceSharding"}'
    assert _text(parse_sharding, single, file="s", pointer=P) == (
        f"s at {P}: required field 'device_str' is missing [SHARD-003]"
    )
    single = '{"sharding_type": "SingleDeviceSharding", "device_str": 0}'
    assert _text(parse_sharding, single, file="s", pointer=P) == (
        f"s at {P}/device_str: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    e = _error(parse_sharding, 1)
    assert (e.file, e.pointer) == ("_sharding", "")
    e = _error(parse_sharding, '{"sharding_type": "NamedSharding"}')
    assert str(e) == "_sharding: required field 'shape' is missing [SHARD-003]"
    raw = {"sharding_type": "SingleDeviceSharding", "device_str": "cpu:1", "memory_kind": "x"}
    spec = parse_sharding(json.dumps(raw))
    assert spec == SingleDeviceShardingSpec(device_str="cpu:1", extra={"memory_kind": "x"})
    assert spec.to_json() == raw and list(spec.to_json()) == list(raw)


def test_sharding_document_faults_and_round_trip():
    """The outer `_sharding` must be an object (SHARD-002, at its root); each key decodes to a
    param name (faults name the file) and each value is parsed at the key's pointer; the
    document writes back compact, its values with spaces, as Orbax writes them. Kills
    ShardingDocument.from_json and to_json mutants (to_json 5, "UTF-8" for "utf-8", is
    equivalent: codec names are case-insensitive)."""
    e = _error(ShardingDocument.from_json, [], file="s")
    assert str(e) == "s: wrong type (expected 'object', got 'array') [SHARD-002]"
    assert e.pointer == ""
    assert _error(ShardingDocument.from_json, []).file == "_sharding"
    e = _error(ShardingDocument.from_json, {"a": "{}"}, file="s")
    assert (e.rule, e.file, e.pointer) == ("SHARD-001", "s", "/a")
    e = _error(ShardingDocument.from_json, {"YQ==": "{}", "Yg==": "[]"}, file="s")
    assert str(e) == "s at /YQ==: required field 'sharding_type' is missing [SHARD-003]"
    single = {"sharding_type": "SingleDeviceSharding", "device_str": "cpu:0"}
    doc = ShardingDocument.from_json({"YQ==": json.dumps(single), "w6k=": _named()})
    assert doc.shardings == {
        "a": SingleDeviceShardingSpec(device_str="cpu:0"),
        "\u00e9": NamedShardingSpec(
            mesh_shape=(4, 2), axis_names=("x", "y"), partition_spec=("x",)
        ),
    }
    assert doc.to_bytes() == (
        b'{"YQ==":"{\\"sharding_type\\": \\"SingleDeviceSharding\\", '
        b'\\"device_str\\": \\"cpu:0\\"}",'
        b'"w6k=":"{\\"sharding_type\\": \\"NamedSharding\\", \\"shape\\": [4, 2], '
        b'\\"axis_names\\": [\\"x\\", \\"y\\"], \\"partition_spec\\": [\\"x\\"]}"}'
    )


# ---------------------------------------------------------------------------------------------
# array_metadatas.py

RANDOM_KEYS = FIXTURES / "orbax-0.12.8" / "random_keys" / "checkpoint" / "array_metadatas"


def test_real_array_metadatas_and_random_key_impls():
    """The array_metadatas/process_0 of Orbax 0.12.8's random_keys fixture: each array's
    param name, write and chunk shapes (tuples), and the PRNG implementation its ext_metadata
    records (None for a plain array). Kills ArrayMetadatas.from_json / ArrayMetadata.from_json
    mutants on the values they build."""
    path = RANDOM_KEYS / "process_0"
    doc = ArrayMetadatas.read(path)
    by_name = doc.by_param_name()
    assert list(by_name) == [a.param_name for a in doc.arrays]
    assert by_name["legacy.prng_key"] == ArrayMetadata(
        param_name="legacy.prng_key", write_shape=(2,), chunk_shape=(2,), ext_metadata=None
    )
    assert by_name["rngs.grid"] == ArrayMetadata(
        param_name="rngs.grid",
        write_shape=(1, 1, 2),
        chunk_shape=(1, 1, 2),
        ext_metadata={"random_key_impl": "threefry2x32"},
    )
    impls = {a.param_name: a.random_key_impl for a in doc.arrays}
    assert impls["params.w"] is None and impls["rngs.rbg"] == "rbg"
    assert impls["rngs.sharded_unsafe_rbg"] == "unsafe_rbg"
    assert doc.to_bytes() == path.read_bytes() and doc.extra == {}
    assert process_index(path.name) == 0


def test_array_metadata_faults_name_file_pointer_and_rule():
    """Every fault of an array_metadatas document is ARRM-001 at its pointer: not an object,
    no or a mistyped list, an entry that is not an object or holds more than
    'array_metadata' (expected and got the fields), an array without a string param_name,
    shapes that are not lists of sizes, an ext_metadata that is not an object. The default
    file name is the directory's. Kills ArrayMetadatas.from_json and ArrayMetadata.from_json
    mutants on those messages, rules, files, pointers, expected and got values."""

    def text(obj):
        return _text(ArrayMetadatas.from_json, obj, file="a")

    def one(**fields):
        first = {"array_metadata": {"param_name": "p"}}
        return text({"array_metadatas": [first, {"array_metadata": {"param_name": "w", **fields}}]})

    A = "a at /array_metadatas/1/array_metadata"
    e = _error(ArrayMetadatas.from_json, [], file="a")
    assert str(e) == "a: wrong type (expected 'object', got 'array') [ARRM-001]" and e.pointer == ""
    e = _error(ArrayMetadatas.from_json, {}, file="a")
    assert str(e) == "a: required field 'array_metadatas' is missing [ARRM-001]"
    assert e.pointer == ""
    assert text({"array_metadatas": {}}) == (
        "a at /array_metadatas: wrong type (expected 'array', got 'object') [ARRM-001]"
    )
    assert text({"array_metadatas": [{"array_metadata": {"param_name": "p"}}, []]}) == (
        "a at /array_metadatas/1: wrong type (expected 'object', got 'array') [ARRM-001]"
    )
    e = _error(
        ArrayMetadatas.from_json, {"array_metadatas": [{"array_metadata": {}, "x": 1}]}, file="a"
    )
    assert str(e) == (
        "a at /array_metadatas/0: entry must hold exactly 'array_metadata' "
        "(expected ['array_metadata'], got ['array_metadata', 'x']) [ARRM-001]"
    )
    assert e.got == ["array_metadata", "x"] and e.expected == ["array_metadata"]
    assert text({"array_metadatas": [{}]}) == (
        "a at /array_metadatas/0: entry must hold exactly 'array_metadata' "
        "(expected ['array_metadata'], got []) [ARRM-001]"
    )
    assert text({"array_metadatas": [{"array_metadata": "p"}]}) == (
        "a at /array_metadatas/0/array_metadata: wrong type (expected 'object', got 'string') "
        "[ARRM-001]"
    )
    assert text({"array_metadatas": [{"array_metadata": {"write_shape": [1]}}]}) == (
        "a at /array_metadatas/0/array_metadata: required field 'param_name' is missing [ARRM-001]"
    )
    assert text({"array_metadatas": [{"array_metadata": {"param_name": 1}}]}) == (
        "a at /array_metadatas/0/array_metadata/param_name: wrong type "
        "(expected 'string', got 'integer') [ARRM-001]"
    )
    assert one(write_shape=2) == (
        f"{A}/write_shape: wrong type (expected 'array', got 'integer') [ARRM-001]"
    )
    assert one(chunk_shape=[1, -1]) == (
        f"{A}/chunk_shape/1: negative size (expected '>= 0', got -1) [ARRM-001]"
    )
    assert one(ext_metadata=[]) == (
        f"{A}/ext_metadata: wrong type (expected 'object', got 'array') [ARRM-001]"
    )
    assert _error(ArrayMetadatas.from_json, []).file == "array_metadatas"


def test_array_metadata_round_trips_null_shapes_and_unknown_fields():
    """An array with null or absent shapes and ext_metadata reads them as None and writes
    them back as null; unknown fields of an array and of the document are kept. Kills
    ArrayMetadata.to_json 6 and 12 (a null shape written as list(None)) and the to_json /
    from_json mutants on each field."""
    raw = {
        "array_metadatas": [
            {"array_metadata": {"param_name": "a", "write_shape": None, "chunk_shape": None,
                                "ext_metadata": None}},
            {"array_metadata": {"param_name": "b", "write_shape": [3, 0], "chunk_shape": [1, 0],
                                "ext_metadata": {"random_key_impl": 7}, "more": True}},
        ],
        "process": 0,
    }  # fmt: skip
    doc = ArrayMetadatas.from_json(raw)
    a, b = doc.arrays
    assert (a.write_shape, a.chunk_shape, a.ext_metadata, a.random_key_impl) == (None,) * 4
    assert (b.write_shape, b.chunk_shape, b.extra) == ((3, 0), (1, 0), {"more": True})
    assert b.random_key_impl is None  # not a string
    assert doc.extra == {"process": 0}
    assert doc.to_json() == raw
    assert list(doc.to_json()["array_metadatas"][1]["array_metadata"]) == [
        "param_name", "write_shape", "chunk_shape", "ext_metadata", "more",
    ]  # fmt: skip
    bare = ArrayMetadatas.from_json({"array_metadatas": [{"array_metadata": {"param_name": "c"}}]})
    nulls = {"param_name": "c", "write_shape": None, "chunk_shape": None, "ext_metadata": None}
    assert bare.to_json() == {"array_metadatas": [{"array_metadata": nulls}]}


def test_process_index_of_file_names():
    """`process_index` reads N of `process_<N>` (decimal, no leading zero, at most 9 digits)
    and is None for any other name. Kills process_index mutants."""
    assert [process_index(n) for n in ("process_0", "process_7", "process_123456789")] == [
        0, 7, 123456789,
    ]  # fmt: skip
    for name in ("process_01", "process_", "process_1234567890", "process_x", "xprocess_1",
                 "process_1x", "_sharding"):  # fmt: skip
        assert process_index(name) is None, name


# ---------------------------------------------------------------------------------------------
# checkpoint_metadata.py

MANAGER_0_11_1 = FIXTURES / "orbax-0.11.1" / "manager" / "checkpoint" / "2" / "_CHECKPOINT_METADATA"


def test_real_checkpoint_metadata_of_a_step():
    """The `_CHECKPOINT_METADATA` of a 0.11.1 manager step: item handlers by item name, empty
    metrics, both timestamps, and the user metadata under its old name `custom` (kept as an
    unknown field, read by `user_metadata`). Kills CheckpointMetadata.from_json mutants on
    the values it keeps."""
    raw = json.loads(MANAGER_0_11_1.read_bytes())
    doc = CheckpointMetadata.read(MANAGER_0_11_1)
    assert doc.item_names == ("meta", "params")
    assert doc.item_handlers == raw["item_handlers"]
    assert (doc.metrics, doc.performance_metrics) == ({}, {})
    assert (doc.init_timestamp_nsecs, doc.commit_timestamp_nsecs) == (
        raw["init_timestamp_nsecs"],
        raw["commit_timestamp_nsecs"],
    )
    assert doc.custom_metadata is metadata.ABSENT and doc.extra == {"custom": {}}
    assert doc.user_metadata == {}
    assert doc.to_json() == raw and list(doc.to_json()) == list(raw)
    assert doc.to_bytes() == MANAGER_0_11_1.read_bytes()


def test_checkpoint_metadata_faults_name_file_pointer_and_rule():
    """Every fault of `_CHECKPOINT_METADATA` is CKPT-001 at its field: not an object, item
    handlers neither a string nor an object, or with a handler that is not a string (at its
    escaped item name), metrics / performance metrics / user metadata (both names) that are
    not objects, timestamps that are not integers. Null is accepted everywhere. The default
    file name is `_CHECKPOINT_METADATA`. Kills CheckpointMetadata.from_json and _optional
    mutants on those messages, rules, files, pointers and checks."""

    def text(obj):
        return _text(CheckpointMetadata.from_json, obj, file="c")

    e = _error(CheckpointMetadata.from_json, [], file="c")
    assert str(e) == "c: wrong type (expected 'object', got 'array') [CKPT-001]" and e.pointer == ""
    assert text({"item_handlers": 5}) == (
        "c at /item_handlers: wrong type (expected 'string or object', got 'integer') [CKPT-001]"
    )
    assert text({"item_handlers": {"ok": "h", "a/b": 1}}) == (
        "c at /item_handlers/a~1b: wrong type (expected 'string', got 'integer') [CKPT-001]"
    )
    for name in ("metrics", "performance_metrics", "custom_metadata", "custom"):
        assert text({name: []}) == (
            f"c at /{name}: wrong type (expected 'object', got 'array') [CKPT-001]"
        )
    for name in ("init_timestamp_nsecs", "commit_timestamp_nsecs"):
        assert text({name: 1.5}) == (
            f"c at /{name}: wrong type (expected 'integer', got 'number') [CKPT-001]"
        )
        assert text({name: True}) == (
            f"c at /{name}: wrong type (expected 'integer', got 'boolean') [CKPT-001]"
        )
    assert _error(CheckpointMetadata.from_json, []).file == "_CHECKPOINT_METADATA"
    nulls = {
        "item_handlers": {"a": None, "b": "h"},
        "metrics": None,
        "performance_metrics": None,
        "init_timestamp_nsecs": None,
        "commit_timestamp_nsecs": None,
        "custom_metadata": None,
        "custom": None,
    }
    doc = CheckpointMetadata.from_json(nulls)
    assert doc.to_json() == nulls and doc.user_metadata is None
    assert (doc.metrics, doc.commit_timestamp_nsecs, doc.custom_metadata) == (None, None, None)


def test_checkpoint_metadata_fields_round_trip_in_order():
    """Each field is read into its attribute and written back in Orbax's order, unknown fields
    after them; absent fields stay absent; `user_metadata` prefers custom_metadata, then
    custom, else None; `item_names` is None for a single handler name. Kills
    CheckpointMetadata.from_json / to_json / user_metadata / item_names and _emit mutants."""
    raw = {
        "item_handlers": "H",
        "metrics": {"loss": 1.5},
        "performance_metrics": {"t": 2},
        "init_timestamp_nsecs": 10,
        "commit_timestamp_nsecs": 20,
        "custom_metadata": {"u": 1},
        "custom": {"old": 1},
        "future": [],
    }
    doc = CheckpointMetadata.from_json(raw, file="c")
    assert (doc.item_handlers, doc.metrics, doc.performance_metrics) == (
        "H",
        {"loss": 1.5},
        {"t": 2},
    )
    assert (doc.init_timestamp_nsecs, doc.commit_timestamp_nsecs) == (10, 20)
    assert doc.custom_metadata == {"u": 1} and doc.extra == {"custom": {"old": 1}, "future": []}
    assert doc.to_json() == raw and list(doc.to_json()) == list(raw)
    assert doc.user_metadata == {"u": 1} and doc.item_names is None
    assert CheckpointMetadata.from_json(
        {"custom_metadata": None, "custom": {"o": 2}}
    ).user_metadata == {"o": 2}
    assert CheckpointMetadata.from_json({"custom": {"o": 2}}).user_metadata == {"o": 2}
    assert CheckpointMetadata.from_json({}).user_metadata is None
    assert CheckpointMetadata.from_json({}).to_json() == {}
    assert CheckpointMetadata.from_json({"item_handlers": {"b": "x", "a": "y"}}).item_names == (
        "b",
        "a",
    )
    old = {"init_timestamp_nsecs": 1, "commit_timestamp_nsecs": 2}
    doc = CheckpointMetadata.from_json(old)
    assert doc.item_handlers is metadata.ABSENT and doc.to_json() == old


def test_root_metadata_faults_and_round_trip():
    """`_ROOT_METADATA`: an object (ROOT-001) whose internal_metadata and custom_metadata are
    objects or null (ROOT-001 at the field); both kept, unknown fields too, written back in
    order. Kills RootMetadata.from_json / to_json and _optional / _emit mutants."""
    e = _error(RootMetadata.from_json, "x", file="r")
    assert (
        str(e) == "r: wrong type (expected 'object', got 'string') [ROOT-001]" and e.pointer == ""
    )
    assert _error(RootMetadata.from_json, "x").file == "metadata/_ROOT_METADATA"
    for name in ("internal_metadata", "custom_metadata"):
        assert _text(RootMetadata.from_json, {name: 1}, file="r") == (
            f"r at /{name}: wrong type (expected 'object', got 'integer') [ROOT-001]"
        )
    raw = {"internal_metadata": {"v": 1}, "custom_metadata": None, "extra": 1}
    doc = RootMetadata.from_json(raw)
    assert (doc.internal_metadata, doc.custom_metadata, doc.extra) == ({"v": 1}, None, {"extra": 1})
    assert doc.to_json() == raw and list(doc.to_json()) == list(raw)
    assert RootMetadata.from_json({}).to_json() == {}
    assert RootMetadata.from_json({"custom_metadata": {"s": 2}}).to_json() == {
        "custom_metadata": {"s": 2}
    }


def test_quick_path_key_bound_is_exact(in_force):
    """The quick path takes a key of up to max_key_bytes / 4 characters (4 UTF-8 bytes at most
    each, so it is within the limit whatever its text), and leaves a longer one to the full
    parser, which measures its bytes; with the limit lowered to 64, 16 characters are quick and
    17 are not (the default 65535 is not a multiple of 4). Kills _built_entry 15 (`>=`)."""
    in_force(max_key_bytes=64)
    for n, quick in ((16, True), (17, False)):
        key = "\U0001f600" * n  # 4 UTF-8 bytes each
        raw = _entry({"value_type": "scalar"}, keys=[{"key": key, "key_type": 2}])
        got = metadata._plain_entry(TreeEntry, repr((key,)), raw, {})
        assert (got is not None) == quick, n
        if quick:
            assert got == _slow(repr((key,)), raw)
        else:
            assert _error(TreeEntry.from_json, repr((key,)), raw, file="m").rule == "LIMIT-003"


def test_from_bytes_reads_a_plain_document_by_the_quick_path_and_shares(no_cache, monkeypatch):
    """`from_bytes` reads a plain `_METADATA` by `_plain_document` alone (no entry goes through
    `TreeEntry.from_json`); any other document goes through the streamed full parser, which
    shares equal keys and values across its entries too. Kills MetadataDocument.from_bytes
    26, 30 (no `shared` for the streamed entries), 31, 32 (the quick path never taken)."""
    tree = {k: v for k, v in PLAIN_TREE.items() if k != "('0', '17')"}  # one valid tree
    data = _plain_bytes(tree)
    compact = data.replace(b": ", b":")  # not plain: the streamed parser
    want = MetadataDocument.from_json(json.loads(data))
    calls = []
    original = TreeEntry.from_json.__func__

    def spy(cls, key, obj, **kwargs):
        calls.append(key)
        return original(cls, key, obj, **kwargs)

    monkeypatch.setattr(TreeEntry, "from_json", classmethod(spy))
    assert MetadataDocument.from_bytes(data) == want and calls == []
    doc = MetadataDocument.from_bytes(compact)
    assert doc == want and calls == list(tree)
    same = {"value_type": "jax.Array", "skip_deserialize": False}
    keys = [{"key": "k", "key_type": 2}]
    tree = {repr(("k", str(i))): _entry(same, keys=keys + [{"key": str(i), "key_type": 1}])
            for i in range(3)}  # fmt: skip
    doc = MetadataDocument.from_bytes(
        json.dumps({"tree_metadata": tree}, separators=(",", ":")).encode()
    )
    assert len({id(e.value) for e in doc.entries}) == 1
    assert len({id(e.path[0]) for e in doc.entries}) == 1
    assert doc.entries[0].value == ValueMetadata(**same)
