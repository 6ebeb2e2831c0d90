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
