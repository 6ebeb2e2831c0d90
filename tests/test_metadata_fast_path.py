"""`_METADATA` entries of the usual form are built by a fast path (`metadata._plain_entry`); it
must give exactly what the full parser gives, and leave everything unusual to it."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from ockpt.documents import metadata
from ockpt.documents.metadata import MetadataDocument
from ockpt.errors import DocumentError

_FILES = sorted(FIXTURES.glob("orbax-*/*/checkpoint/**/_METADATA"))


@pytest.mark.parametrize("path", _FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fast_path_equals_full_parser(path, monkeypatch):
    data = path.read_bytes()
    fast = MetadataDocument.from_json(json.loads(data))
    monkeypatch.setattr(metadata, "_plain_entry", lambda cls, key, obj, shared: None)
    assert MetadataDocument.from_json(json.loads(data)) == fast


def _entry(**value):
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
    got = metadata.TreeEntry.from_json("('a',)", _entry(**value), file="f")
    assert metadata._plain_entry(metadata.TreeEntry, "('a',)", _entry(**value), {}) in (None, got)
    assert got.to_json() == _entry(**value) or value.get("write_shape", 0) is None


@pytest.mark.parametrize(
    "entry, rule",
    [
        (_entry(value_type="scalar", write_shape=[True]), "JSON-004"),
        (_entry(value_type="scalar", skip_deserialize=1), "JSON-004"),
        (_entry(value_type="scalar", skip_deserialize=None), "JSON-004"),
        ({"key_metadata": [{"key": "x", "key_type": 1}], "value_metadata": {"value_type": "s"}},
         "META-005"),
        (_entry(value_type="scalar") | {"more": 1}, None),
    ],
)  # fmt: skip
def test_faults_still_raise_with_their_rule(entry, rule):
    if rule is None:  # an unknown entry field is kept, not refused
        assert metadata.TreeEntry.from_json("('a',)", entry, file="f").extra == {"more": 1}
        return
    with pytest.raises(DocumentError, match=rule):
        metadata.TreeEntry.from_json(
            "('x',)" if entry["key_metadata"][0]["key"] == "x" else "('a',)", entry, file="f"
        )


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
    with pytest.raises(DocumentError, match="META-005") as e:
        MetadataDocument.from_bytes(json.dumps(doc).encode())
    assert e.value.pointer.startswith("/tree_metadata/('x',)")
    with pytest.raises(DocumentError, match="JSON-001"):  # the JSON's fault comes first
        MetadataDocument.from_bytes(json.dumps(doc).encode() + b"}")


# -- `_plain_document`: whole documents of plain entries, read by a regular expression ------


def _outcome(data: bytes, monkeypatch, *, quick: bool):
    """The document `from_bytes` gives for `data` (with or without `_plain_document`), or the
    fault it raises as (type, message, rule, pointer)."""
    monkeypatch.setattr(metadata, "_PARSED", {})
    if not quick:
        monkeypatch.setattr(metadata, "_plain_document", lambda data, shared: None)
    try:
        return MetadataDocument.from_bytes(data, file="f")
    except DocumentError as e:
        return type(e), str(e), e.rule, e.pointer
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
