"""`ockpt.documents.metadata`, the `_METADATA` document: entries of the usual form are built by a
fast path (`metadata._plain_entry`) that must give exactly what the full parser gives and leave
everything unusual to it; the full parser's reading of each field and the whole error of each
fault (file, JSON pointer, expected, got, rule); the document's limits and its parse cache."""

from __future__ import annotations

import functools
import json

import pytest

from ockpt.documents import metadata
from ockpt.documents.metadata import MetadataDocument, TreeEntry, ValueMetadata
from ockpt.errors import DocumentError
from ockpt.limits import LIMITS
from ockpt.paths import EmptyNode, KeyEntry, KeyType
from tests.support import FIXTURES
from tests.support.errors import assert_error, error_fields, raised, raised_fields

_FILES = sorted(FIXTURES.glob("orbax-*/*/checkpoint/**/_METADATA"))


@pytest.mark.parametrize("path", _FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fast_path_equals_full_parser(path, monkeypatch):
    data = path.read_bytes()
    fast = MetadataDocument.from_json(json.loads(data))
    monkeypatch.setattr(metadata, "_plain_entry", lambda cls, key, obj, shared: None)
    assert MetadataDocument.from_json(json.loads(data)) == fast


def _entry_of(**value):
    return {"key_metadata": [{"key": "a", "key_type": 2}], "value_metadata": value}


@pytest.mark.parametrize(
    "value",
    [
        {"value_type": "scalar", "custom": 1},
        {"value_type": "jax.Array", "write_shape": None},
        {"value_type": "jax.Array", "write_shape": [2, 3]},
    ],
)
def test_unusual_entries_take_the_full_parser(value):
    got = metadata.TreeEntry.from_json("('a',)", _entry_of(**value), file="f")
    fast = metadata._plain_entry(metadata.TreeEntry, "('a',)", _entry_of(**value), {})
    assert fast in (None, got)
    assert got.to_json() == _entry_of(**value) or value.get("write_shape", 0) is None


@pytest.mark.parametrize(
    "entry, rule",
    [
        (_entry_of(value_type="scalar", write_shape=[True]), "JSON-004"),
        (_entry_of(value_type="scalar", skip_deserialize=1), "JSON-004"),
        (_entry_of(value_type="scalar", skip_deserialize=None), "JSON-004"),
        ({"key_metadata": [{"key": "x", "key_type": 1}], "value_metadata": {"value_type": "s"}},
         "META-005"),
        (_entry_of(value_type="scalar") | {"more": 1}, None),
    ],
)  # fmt: skip
def test_faults_still_raise_with_their_rule(entry, rule):
    if rule is None:  # an unknown entry field is kept, not refused
        assert metadata.TreeEntry.from_json("('a',)", entry, file="f").extra == {"more": 1}
        return
    with pytest.raises(DocumentError) as info:
        metadata.TreeEntry.from_json(
            "('x',)" if entry["key_metadata"][0]["key"] == "x" else "('a',)", entry, file="f"
        )
    assert_error(info, rule=rule)


def test_equal_keys_and_values_are_one_object():
    """Many leaves with the same key texts and value metadata keep one object for each (the
    memory of a 100,000-leaf tree), and the document is still what the full parser gives."""
    tree = {}
    for block in range(3):
        for name in ("kernel", "bias"):
            path = [
                {"key": "layers", "key_type": 2},
                {"key": str(block), "key_type": 1},
                {"key": name, "key_type": 2},
            ]
            key = repr(("layers", str(block), name))
            tree[key] = {
                "key_metadata": path,
                "value_metadata": {"value_type": "jax.Array", "skip_deserialize": False},
            }
    doc = MetadataDocument.from_json({"tree_metadata": tree})
    layers = {id(e.path[0]) for e in doc.entries}
    kernels = {id(e.path[2]) for e in doc.entries if e.path[2].key == "kernel"}
    assert len(layers) == 1 and len(kernels) == 1
    assert len({id(e.value) for e in doc.entries}) == 1
    assert doc.entries[0].path[1] is doc.entries[1].path[1]  # "0" of both leaves of block 0
    assert doc.to_json() == {"tree_metadata": tree}


@pytest.mark.parametrize("path", _FILES[:8], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_whole_and_streamed_parse_agree(path, monkeypatch):
    """A `_METADATA` up to `_json._STREAM_ABOVE` bytes is parsed whole, then its entries
    converted (the C parser, twice as fast); a larger one entry by entry (memory). Both give
    the same document."""
    from ockpt.documents import _json

    data = path.read_bytes()
    assert len(data) <= _json._STREAM_ABOVE
    monkeypatch.setattr(metadata, "_plain_document", lambda data, shared: None)
    streamed = []
    real = _json._parse_streamed
    monkeypatch.setattr(_json, "_parse_streamed", lambda *a: streamed.append(1) or real(*a))
    monkeypatch.setattr(metadata, "_PARSED", {})
    whole = MetadataDocument.from_bytes(data)
    assert streamed == []
    monkeypatch.setattr(metadata, "_PARSED", {})
    monkeypatch.setattr(_json, "_STREAM_ABOVE", 0)
    assert MetadataDocument.from_bytes(data) == whole and streamed == [1]


@pytest.mark.parametrize("stream_above", [0, 1 << 20])
def test_whole_and_streamed_parse_fault_alike(stream_above, monkeypatch):
    """The first bad entry is reported (after any fault of the JSON itself) in both modes."""
    from ockpt.documents import _json

    monkeypatch.setattr(_json, "_STREAM_ABOVE", stream_above)
    good = {"key_metadata": [{"key": "a", "key_type": 2}], "value_metadata": {"value_type": "s"}}
    bad = {"key_metadata": [{"key": "x", "key_type": 1}], "value_metadata": {"value_type": "s"}}
    doc = {"tree_metadata": {"('a',)": good, "('x',)": bad, "('y',)": bad}}
    with pytest.raises(DocumentError) as e:
        MetadataDocument.from_bytes(json.dumps(doc).encode())
    assert_error(e, rule="META-005")
    assert e.value.pointer.startswith("/tree_metadata/('x',)")
    with pytest.raises(DocumentError) as e:  # the JSON's fault comes first
        MetadataDocument.from_bytes(json.dumps(doc).encode() + b"}")
    assert_error(e, rule="JSON-001")


# -- `_plain_document`: whole documents of plain entries, read by a regular expression ------


def _outcome(data: bytes, monkeypatch, *, quick: bool):
    """The document `from_bytes` gives for `data` (with or without `_plain_document`), or the
    fault it raises as (type, its fields)."""
    monkeypatch.setattr(metadata, "_PARSED", {})
    if not quick:
        monkeypatch.setattr(metadata, "_plain_document", lambda data, shared: None)
    try:
        return MetadataDocument.from_bytes(data, file="f")
    except DocumentError as e:
        return type(e), error_fields(e)
    finally:
        monkeypatch.undo()


_ALL_FILES = sorted(FIXTURES.glob("**/_METADATA"))


@pytest.mark.parametrize("path", _ALL_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_plain_document_equals_full_parser(path, monkeypatch):
    data = path.read_bytes()
    assert _outcome(data, monkeypatch, quick=True) == _outcome(data, monkeypatch, quick=False)


def test_most_fixtures_take_the_plain_document_path():
    """Orbax (0.4.8 to 0.12.8) and ockpt write plain documents: only escapes, a bad fixture
    or an odd entry send one to the full parser."""
    plain = [p for p in _ALL_FILES if metadata._plain_document(p.read_bytes(), {}) is not None]
    assert len(plain) >= 0.9 * len(_ALL_FILES)


_PLAIN = (
    '{"tree_metadata": {'
    '"(\'a\', \'0\')": {"key_metadata": [{"key": "a", "key_type": 2}, {"key": "0", '
    '"key_type": 1}], "value_metadata": {"value_type": "jax.Array", "skip_deserialize": false, '
    '"write_shape": [2, 3]}}, '
    '"(\'b\',)": {"key_metadata": [{"key": "b", "key_type": 2}], "value_metadata": '
    '{"value_type": "scalar", "write_shape": []}}, '
    '"(\'c\',)": {"key_metadata": [{"key": "c", "key_type": 2}], "value_metadata": '
    '{"value_type": "Dict", "skip_deserialize": true}}'
    '}, "use_ocdbt": true, "use_zarr3": false, "custom_metadata": null}'
)

#: edits of `_PLAIN` (old, new, count): each either still plain or sent to the full parser
_VARIANTS = [
    ("", "", 0),
    ('"key": "b"', '"key": "\\u0062"', 1),  # an escape
    ("'b'", "'b\\\\x'", 1),  # a backslash in the tree key only: META-003
    ('"key": "b"', '"key": "b}, {x"', 1),  # brackets in a key text
    (
        '(\'b\',)": {"key_metadata": [{"key": "b"',
        '(\'b}, {x\',)": {"key_metadata": [{"key": "b}, {x"',
        1,
    ),  # the separator of key entries inside a key text, its tree key alike: still plain
    (
        '(\'b\',)": {"key_metadata": [{"key": "b"',
        '(\'}, {\',)": {"key_metadata": [{"key": "}, {"',
        1,
    ),
    ('"key": "b"', '"key": "\u043a"', 1),  # a non-ASCII key, unescaped (META-003)
    ('"key": "b"', '"key": "b\x01"', 1),  # a control character: JSON-001
    ("('c',)", "('b',)", 1),  # a repeated tree key: JSON-002
    ("('c',)", "('d',)", 1),  # a tree key unlike its key texts
    ('"key_type": 1', '"key_type": 2', 1),  # the sequence index "0" as a dict key
    ('"key": "0"', '"key": "01"', 1),  # not a sequence index: META-005
    ('"key_type": 1', '"key_type": 3', 1),  # META-004
    ('"key_type": 1', '"key_type": 1.0', 1),
    ('"skip_deserialize": false', '"skip_deserialize": null', 1),
    ('"skip_deserialize": false', '"skip_deserialize": 0', 1),
    ("[2, 3]", "[2, -3]", 1),
    ("[2, 3]", "[2, 3.0]", 1),
    ("[2, 3]", "[2, 03]", 1),  # JSON-001
    ("[2, 3]", "[2,3]", 1),
    ("[2, 3]", "[" + "9" * 19 + "]", 1),
    ("[2, 3]", "[" + "9" * 5000 + "]", 1),  # past int's digit limit
    ("[2, 3]", "null", 1),
    ('"write_shape": []', '"write_shape": [], "more": 1', 1),
    ("}}, \"('b", '}, "more": 1}, "(\'b', 1),  # an unknown entry field
    ('[{"key": "b", "key_type": 2}]', "[]", 1),
    ('"value_type": "scalar"', '"value_type": 7', 1),
    ('"value_type": "scalar"', '"value_type": "sc\\"alar"', 1),
    ('", "skip_deserialize": true', '", "skip_deserialize": true, "write_shape": [1]', 1),
    (
        '"skip_deserialize": false, "write_shape": [2, 3]',
        '"write_shape": [2, 3], "skip_deserialize": false',
        1,
    ),
    (": {", ":{", 1),
    (", ", ",", 1),
    ('}, "use_ocdbt', '}, }, "use_ocdbt', 1),  # a trailing comma in tree_metadata
    ('"use_ocdbt": true', '"use_ocdbt": tru', 1),
    ('"use_ocdbt": true', '"use_ocdbt": 1', 1),
    ('"use_ocdbt": true', '"tree_metadata": {}', 1),  # a repeated member
    ('"custom_metadata": null', '"custom_metadata": ' + "[" * 70 + "]" * 70, 1),  # JSON-003
    ('"custom_metadata": null}', '"custom_metadata": null}}', 1),  # extra data
    ('"custom_metadata": null}', '"custom_metadata": null', 1),  # cut short
    ('{"tree_metadata": {', '\ufeff{"tree_metadata": {', 1),  # a byte-order mark
    ('{"tree_metadata": {', ' {"tree_metadata": {', 1),
    (
        '0\')": {"key_metadata": [{"key": "a", "key_type": 2}, {"key": "0"',
        '1\')": {"key_metadata": [{"key": "a", "key_type": 2}, {"key": "1"',
        1,
    ),  # a sequence with a hole: META-006
    (
        '(\'c\',)": {"key_metadata": [{"key": "c"',
        '(\'a\',)": {"key_metadata": [{"key": "a"',
        1,
    ),  # a leaf and a node: META-006
    (
        '(\'b\',)": {"key_metadata": [{"key": "b"',
        '(\'\u043a\',)": {"key_metadata": [{"key": "\u043a"',
        1,
    ),  # a non-ASCII key
]


@pytest.mark.parametrize("old, new, count", _VARIANTS)
def test_plain_document_faults_as_the_full_parser(old, new, count, monkeypatch):
    text = _PLAIN.replace(old, new, count) if count else _PLAIN
    assert text != _PLAIN or not count
    for data in (text.encode("utf-8", "surrogatepass"), text.encode()[:-3] + b"\xff}"):
        want = _outcome(data, monkeypatch, quick=False)
        assert _outcome(data, monkeypatch, quick=True) == want


def test_plain_document_splits_key_texts_with_separators():
    """A key text holding the ``}, {`` that key entries are split at is read by the per-entry
    expression instead (`metadata._cached_path` gives up), to the same entry."""
    text = _PLAIN.replace(
        '(\'b\',)": {"key_metadata": [{"key": "b"',
        '(\'b}, {x\',)": {"key_metadata": [{"key": "b}, {x"',
        1,
    )
    obj = metadata._plain_document(text.encode(), {})
    assert obj is not None
    assert [e.key for e in obj["tree_metadata"]["('b}, {x',)"].path] == ["b}, {x"]


def test_plain_document_reads_the_usual_shapes(monkeypatch):
    """The mechanism: a plain document never reaches the JSON parser entry by entry, and
    gives the full parser's document (keys and values shared alike)."""
    calls = []
    real = metadata._plain_entry
    monkeypatch.setattr(metadata, "_plain_entry", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(metadata, "_PARSED", {})
    doc = MetadataDocument.from_bytes(_PLAIN.encode())
    assert calls == [] and len(doc.entries) == 3
    assert doc.entries[0].value.write_shape == (2, 3) and doc.entries[1].value.write_shape == ()
    assert doc.entries[1].value.skip_deserialize is None
    assert doc.to_json() == json.loads(_PLAIN)
    monkeypatch.setattr(metadata, "_PARSED", {})
    monkeypatch.setattr(metadata, "_plain_document", lambda data, shared: None)
    assert MetadataDocument.from_bytes(_PLAIN.encode()) == doc and len(calls) == 3


def _generic_bytes(doc: MetadataDocument) -> bytes:
    """The bytes `Document.to_bytes` gives: `to_json` encoded by `json.dumps`."""
    return json.dumps(doc.to_json(), allow_nan=False).encode()


@pytest.mark.parametrize("path", _FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_to_bytes_equals_json_dumps(path):
    """`MetadataDocument.to_bytes` writes each entry from fragments: the bytes `json.dumps`
    writes for `to_json`, for every Orbax fixture."""
    doc = MetadataDocument.from_bytes(path.read_bytes())
    assert doc.to_bytes() == _generic_bytes(doc)


def test_to_bytes_equals_json_dumps_for_unusual_documents():
    """Escapes, non-ASCII keys, sequence keys, write shapes, entry and value extras, shared
    and distinct objects, no flags or extras, and an empty tree all encode as `json.dumps`."""
    keys = ['a"b', "\\", "é\u2028", "\ud800", "", "x y"]
    tree = {}
    for i, text in enumerate(keys):
        path = [
            {"key": text, "key_type": 2},
            {"key": "0", "key_type": 1},
        ]
        value = {"value_type": "jax.Array", "skip_deserialize": False, "write_shape": [i, 2]}
        if i % 2:
            value = {"value_type": "scalar", "odd": [1.5, None]}
        entry = {"key_metadata": path, "value_metadata": value}
        if i == 3:
            entry["more"] = {"k": "\u00ff"}
        tree[repr((text, "0"))] = entry
    docs = [
        {"tree_metadata": tree, "use_ocdbt": True, "custom_metadata": {"é": 1}, "z": [1]},
        {"tree_metadata": tree},
        {"tree_metadata": {}},
        {"tree_metadata": {}, "use_zarr3": False},
    ]
    for obj in docs:
        doc = MetadataDocument.from_json(obj)
        assert doc.to_bytes() == _generic_bytes(doc) == json.dumps(obj).encode()


def test_the_last_reader_takes_the_document_out_of_the_cache(tmp_path, monkeypatch):
    """Detecting a layout parses `_METADATA` and keeps it; the item that then opens takes that
    same document out (`keep=False`) and holds only its saved tree, so the entries of a large
    tree live no longer than the tree is being built."""
    import numpy as np

    import ockpt
    from ockpt.reader.item import OpenedItem

    monkeypatch.setattr(metadata, "_PARSED", {})
    data = _PLAIN.encode()
    doc = MetadataDocument.from_bytes(data)
    assert len(metadata._PARSED) == 1
    assert MetadataDocument.from_bytes(data, keep=False) is doc and metadata._PARSED == {}
    again = MetadataDocument.from_bytes(data, keep=False)
    assert again == doc and again is not doc and metadata._PARSED == {}

    ockpt.save_pytree(tmp_path / "c", {"a": np.ones(3, np.float32), "b": {"c": 1}}, layout="item")
    parses = []
    real = metadata._plain_document
    monkeypatch.setattr(metadata, "_plain_document", lambda *a: parses.append(1) or real(*a))
    with OpenedItem(tmp_path / "c", step=None, item=None, context=None) as item:
        assert sorted(item.leaves) == ["a", "b.c"] and item.has_metadata
        assert not hasattr(item, "doc")
    assert len(parses) == 1 and metadata._PARSED == {}


def test_a_document_no_kept_one_could_be_is_not_hashed(monkeypatch):
    """Issue 33 item 4: `from_bytes(keep=False)` hashes the bytes only where a kept document of
    the same size could be the same one (a 1,000,000-leaf `_METADATA`, too large for layout
    detection to peek at, is parsed by the item alone); the cache still finds a kept one."""
    hashed = []
    real = metadata.hashlib.blake2b
    monkeypatch.setattr(
        metadata.hashlib, "blake2b", lambda *a, **k: hashed.append(1) or real(*a, **k)
    )
    monkeypatch.setattr(metadata, "_PARSED", {})
    data = _PLAIN.encode()
    alone = MetadataDocument.from_bytes(data, keep=False)
    assert hashed == [] and metadata._PARSED == {}
    doc = MetadataDocument.from_bytes(data)
    assert doc == alone and doc is not alone and hashed == [1]
    assert MetadataDocument.from_bytes(data + b" ", keep=False) == doc and hashed == [1]
    assert MetadataDocument.from_bytes(data, keep=False) is doc and hashed == [1, 1]
    assert metadata._PARSED == {}


_error = functools.partial(raised, DocumentError)
_fields = functools.partial(raised_fields, DocumentError)


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
    assert _fields(_full, KEY_A, _entry([])) == {
        "rule": "META-002",
        "file": "m",
        "message": "wrong type",
        "pointer": vm,
        "expected": "object",
        "got": "array",
    }
    assert _fields(_full, KEY_A, _entry({"skip_deserialize": True})) == {
        "rule": "META-002",
        "file": "m",
        "message": "required field 'value_type' is missing",
        "pointer": vm,
    }
    assert _fields(_full, KEY_A, _entry({"value_type": 1, "x": 0})) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{vm}/value_type",
        "expected": "string",
        "got": "integer",
    }
    assert _fields(_full, KEY_A, _entry({"value_type": "scalar", "skip_deserialize": 1})) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{vm}/skip_deserialize",
        "expected": "boolean",
        "got": "integer",
    }
    assert _fields(_full, KEY_A, _entry({"value_type": "scalar", "write_shape": [1, "2"]})) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{vm}/write_shape/1",
        "expected": "integer",
        "got": "string",
    }
    assert _fields(_full, KEY_A, _entry({"value_type": "scalar", "write_shape": [-1]})) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "negative size",
        "pointer": f"{vm}/write_shape/0",
        "expected": ">= 0",
        "got": -1,
    }
    # the pointer it is given is the one it extends (a key with '/' and '~' is escaped)
    assert _fields(ValueMetadata.from_json, {"value_type": None}, file="f", pointer="/p~1q") == {
        "rule": "JSON-004",
        "file": "f",
        "message": "wrong type",
        "pointer": "/p~1q/value_type",
        "expected": "string",
        "got": "null",
    }


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
    assert _fields(TreeEntry.from_json, KEY_A, [1], file="m") == {
        "rule": "META-002",
        "file": "m",
        "message": "wrong type",
        "pointer": PTR_A,
        "expected": "object",
        "got": "array",
    }
    assert _fields(TreeEntry.from_json, KEY_A, {"value_metadata": {}}, file="m") == {
        "rule": "META-002",
        "file": "m",
        "message": "required field 'key_metadata' is missing",
        "pointer": PTR_A,
    }
    assert _fields(TreeEntry.from_json, KEY_A, _entry({}, keys={}), file="m") == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{PTR_A}/key_metadata",
        "expected": "array",
        "got": "object",
    }
    no_value = {"key_metadata": [{"key": "a", "key_type": 2}]}
    assert _fields(TreeEntry.from_json, KEY_A, no_value, file="m") == {
        "rule": "META-002",
        "file": "m",
        "message": "required field 'value_metadata' is missing",
        "pointer": PTR_A,
    }
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
    assert error_fields(e) == {
        "rule": "META-003",
        "file": "m",
        "message": "tree key disagrees with its key_metadata",
        "pointer": "/tree_metadata/('b',)",
        "expected": slash,
        "got": "('b',)",
    }
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

    def fields(key_entry, key=KEY_A):
        return _fields(TreeEntry.from_json, key, _entry(value, keys=[key_entry]), file="m")

    assert fields("a") == {
        "rule": "META-002",
        "file": "m",
        "message": "wrong type",
        "pointer": ptr,
        "expected": "object",
        "got": "string",
    }
    assert fields({"key_type": 2}) == {
        "rule": "META-002",
        "file": "m",
        "message": "required field 'key' is missing",
        "pointer": ptr,
    }
    assert fields({"key": "a"}) == {
        "rule": "META-002",
        "file": "m",
        "message": "required field 'key_type' is missing",
        "pointer": ptr,
    }
    assert fields({"key": 1, "key_type": 2}) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{ptr}/key",
        "expected": "string",
        "got": "integer",
    }
    assert fields({"key": "a", "key_type": "2"}) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": f"{ptr}/key_type",
        "expected": "integer",
        "got": "string",
    }
    e = _error(
        TreeEntry.from_json, KEY_A, _entry(value, keys=[{"key": "a", "key_type": 3}]), file="m"
    )
    assert error_fields(e) == {
        "rule": "META-004",
        "file": "m",
        "message": "unknown key_type",
        "pointer": f"{ptr}/key_type",
        "expected": [1, 2],
        "got": 3,
    }
    assert e.__cause__ is None and e.__suppress_context__
    assert fields({"key": "x", "key_type": 1}, "('x',)") == {
        "rule": "META-005",
        "file": "m",
        "message": "sequence index is not a decimal integer",
        "pointer": "/tree_metadata/('x',)/key_metadata/0/key",
        "got": "x",
    }
    assert fields({"key": "a", "key_type": 2, "z": 0, "y": 1}) == {
        "rule": "META-002",
        "file": "m",
        "message": "unknown fields ['y', 'z']",
        "pointer": ptr,
    }
    # the byte limit: 65535 UTF-8 bytes pass, one more does not; 3 bytes a character
    limit = LIMITS.max_key_bytes
    for n, fits in ((limit // 3, True), (limit // 3 + 1, False)):
        k = "\u20ac" * n
        raw = _entry(value, keys=[{"key": k, "key_type": 2, "more": 0}])
        if fits:
            e = _error(TreeEntry.from_json, repr((k,)), raw, file="m")
            assert (e.rule, e.message) == ("META-002", "unknown fields ['more']")
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
    e = _error(
        TreeEntry.from_json, "('a', '10')", _entry({"value_type": "scalar"}, keys=keys), file="m"
    )
    assert e.rule == "META-002" and "unknown fields" in e.message
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
    want = {
        "rule": "LIMIT-002",
        "file": "m",
        "message": "too many tree_metadata entries",
        "pointer": "/tree_metadata",
        "expected": "<= 2",
    }
    three = _doc_bytes(["a"], ["b"], ["c"])
    e = _error(MetadataDocument.from_json, json.loads(three), file="m")
    assert error_fields(e) == {**want, "got": 3}
    for data in (three, three.replace(b": ", b":"), _doc_bytes(*[[f"k{i}"] for i in range(9)])):
        e = _error(MetadataDocument.from_bytes, data, file="m")
        assert error_fields(e) == {**want, "got": "more than 2"}
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
    assert error_fields(info) == {
        "rule": "JSON-003",
        "file": str(path),
        "message": "file larger than its size limit",
        "pointer": None,
        "expected": f"<= {len(data) - 1} bytes",
        "got": len(data),
    }


def test_document_faults_name_file_pointer_and_rule(no_cache):
    """The faults of the document itself: not an object, no tree_metadata, a tree_metadata
    that is not an object (META-001), a flag, custom_metadata or value_metadata_tree of the
    wrong type (JSON-004, at its pointer), and entries that do not form one tree (META-006,
    naming the file). Kills MetadataDocument.from_json mutants on those messages, rules,
    files and pointers."""
    e = _error(MetadataDocument.from_json, [], file="m")
    assert error_fields(e) == {
        "rule": "META-001",
        "file": "m",
        "message": "wrong type",
        "pointer": "",
        "expected": "object",
        "got": "array",
    }
    e = _error(MetadataDocument.from_json, {"use_ocdbt": True}, file="m")
    assert error_fields(e) == {
        "rule": "META-001",
        "file": "m",
        "message": "required field 'tree_metadata' is missing",
        "pointer": "",
    }
    assert _fields(MetadataDocument.from_json, {"tree_metadata": []}, file="m") == {
        "rule": "META-001",
        "file": "m",
        "message": "wrong type",
        "pointer": "/tree_metadata",
        "expected": "object",
        "got": "array",
    }
    for name in ("use_ocdbt", "use_zarr3", "store_array_data_equal_to_fill_value"):
        assert _fields(MetadataDocument.from_json, {"tree_metadata": {}, name: 1}, file="m") == {
            "rule": "JSON-004",
            "file": "m",
            "message": "wrong type",
            "pointer": f"/{name}",
            "expected": "boolean",
            "got": "integer",
        }
    assert _fields(
        MetadataDocument.from_json, {"tree_metadata": {}, "custom_metadata": []}, file="m"
    ) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": "/custom_metadata",
        "expected": "object",
        "got": "array",
    }
    assert _fields(
        MetadataDocument.from_json, {"tree_metadata": {}, "value_metadata_tree": 1}, file="m"
    ) == {
        "rule": "JSON-004",
        "file": "m",
        "message": "wrong type",
        "pointer": "/value_metadata_tree",
        "expected": "string",
        "got": "integer",
    }
    e = _error(MetadataDocument.from_bytes, _doc_bytes(["a"], ["a", "b"]), file="m")
    assert (e.rule, e.file) == ("META-006", "m")
    e = _error(MetadataDocument.from_json, json.loads(_doc_bytes(["a"], ["a", "b"])), file="m")
    assert (e.rule, e.file) == ("META-006", "m")
    # an entry's fault names the file given, in both parsers
    bad_entry = {"tree_metadata": {KEY_A: []}}
    want = {
        "rule": "META-002",
        "file": "m",
        "message": "wrong type",
        "pointer": PTR_A,
        "expected": "object",
        "got": "array",
    }
    assert _fields(MetadataDocument.from_json, bad_entry, file="m") == want
    assert _fields(MetadataDocument.from_bytes, json.dumps(bad_entry).encode(), file="m") == want
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
