"""`ockpt.documents._base` (`Document.from_bytes`, `read`, `to_bytes`) and
`ockpt.documents.strings` (`_strings.json`): the file each error names, the strict JSON layer
under the model, exact round trips.
"""

from __future__ import annotations

import pytest

from ockpt.documents._json import parse_json
from ockpt.errors import DocumentError
from tests.support.errors import error_fields

# ---------------------------------------------------------------------------------------------
# documents/_base.py (Document.from_bytes, read, to_bytes) and documents/strings.py


def test_from_bytes_and_read_name_the_file_in_errors(tmp_path):
    """`from_bytes` names `FILE_NAME` unless given a file; `read` names the path it read;
    both apply the strict JSON layer, then the model. Kills Document.from_bytes 1-12, read
    1-6."""
    from ockpt.documents import StringsDocument

    doc = StringsDocument.from_bytes(b'{"a":{"b":"x"}}')
    assert doc.values == {"a": {"b": "x"}} and doc.file == "_strings.json"
    assert StringsDocument.from_bytes(b'{"a":"x"}', file="g.json").file == "g.json"
    for data, file, want in [
        (
            b'{"a":1}',
            None,
            {
                "rule": "STR-001",
                "file": "_strings.json",
                "message": "string leaf is not a string",
                "pointer": "/a",
                "expected": "string",
                "got": "integer",
            },
        ),
        (
            b'{"a":1}',
            "g.json",
            {
                "rule": "STR-001",
                "file": "g.json",
                "message": "string leaf is not a string",
                "pointer": "/a",
                "expected": "string",
                "got": "integer",
            },
        ),
        (
            b'{"a":"x","a":"y"}',
            None,
            {
                "rule": "JSON-002",
                "file": "_strings.json",
                "message": "duplicate key 'a'",
                "pointer": "",
            },
        ),
        (
            b'{"a":"x","a":"y"}',
            "g.json",
            {
                "rule": "JSON-002",
                "file": "g.json",
                "message": "duplicate key 'a'",
                "pointer": "",
            },
        ),
    ]:
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_bytes(data, file=file)
        assert error_fields(info) == want
    path = tmp_path / "s.json"
    path.write_bytes(b'{"p":{"q":"v"}}')
    read = StringsDocument.read(path)
    assert read.values == {"p": {"q": "v"}} and read.file == str(path)
    assert read.get("p/q") == "v"
    path.write_bytes(b'{"p":{"q":[]}}')
    with pytest.raises(DocumentError) as info:
        StringsDocument.read(path)
    assert error_fields(info) == {
        "rule": "STR-001",
        "file": str(path),
        "message": "string leaf is not a string",
        "pointer": "/p/q",
        "expected": "string",
        "got": "array",
    }


def test_to_bytes_writes_each_model_with_its_separators():
    """`to_bytes` writes the model's JSON, compact for the documents tensorstore writes
    (`_strings.json`), with Python's separators for the others. Kills Document.to_bytes 1-4."""
    from ockpt.documents import StringsDocument
    from ockpt.documents.checkpoint_metadata import RootMetadata

    assert StringsDocument({"a": {"b": "x"}}).to_bytes() == b'{"a":{"b":"x"}}'
    root = RootMetadata.from_json({"custom_metadata": {"k": [1, 2]}})
    assert root.to_bytes() == b'{"custom_metadata": {"k": [1, 2]}}'


def test_strings_from_json_names_the_pointer_of_a_bad_leaf():
    """Every leaf of the nested objects must be a string (STR-001), named by its escaped JSON
    pointer; the root must be an object. Kills StringsDocument.from_json 1-45."""
    from ockpt.documents import StringsDocument

    raw = {"a": {"b/c": {"d": "x"}, "e": "y"}, "": "z"}
    doc = StringsDocument.from_json(raw, file="s.json")
    assert doc.values == raw and doc.file == "s.json"
    assert StringsDocument.from_json({}).file == "_strings.json"
    for bad, want in [
        (
            {"a": {"b/c": {"d~": None}}},
            {
                "rule": "STR-001",
                "file": "s.json",
                "message": "string leaf is not a string",
                "pointer": "/a/b~1c/d~0",
                "expected": "string",
                "got": "null",
            },
        ),
        (
            {"a": "x", "b": 1.5},
            {
                "rule": "STR-001",
                "file": "s.json",
                "message": "string leaf is not a string",
                "pointer": "/b",
                "expected": "string",
                "got": "number",
            },
        ),
        (
            ["x"],
            {
                "rule": "STR-001",
                "file": "s.json",
                "message": "wrong type",
                "pointer": "",  # the root: the empty JSON pointer
                "expected": "object",
                "got": "array",
            },
        ),
    ]:
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_json(bad, file="s.json")
        assert error_fields(info) == want


def test_strings_from_values_nests_and_refuses_collisions():
    """Param names nest at ``/``; a leaf under another leaf, or two leaves at one place, are
    refused (PATH-001) naming the param. Kills StringsDocument.from_values 1-36."""
    from ockpt.documents import StringsDocument

    doc = StringsDocument.from_values({"a/b/c": "x", "a/d": "y", "e": "z", "": "r"})
    assert doc.values == {"a": {"b": {"c": "x"}, "d": "y"}, "e": "z", "": "r"}
    assert doc.file == "_strings.json"
    for values, want in [
        (
            {"a": "x", "a/b": "y"},
            {
                "rule": "PATH-001",
                "file": "_strings.json",
                "message": "string leaf 'a/b' nests under another string leaf",
                "pointer": "a/b",
            },
        ),
        (
            {"a/b": "x", "a": "y"},
            {
                "rule": "PATH-001",
                "file": "_strings.json",
                "message": "string leaf 'a' collides with another",
                "pointer": "a",
            },
        ),
    ]:
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_values(values)
        assert error_fields(info) == want


def test_strings_get_by_pointer_then_flat_and_names():
    """`get` follows the pointer ``/name``; when that finds nothing, a top-level member named
    exactly `name` holding a string (releases up to 0.3.x); else STR-002 naming the pointer,
    the param and the file. `names` lists every leaf as its param name. Kills
    StringsDocument.get 1-3, _at_pointer 1-28, names 1-7."""
    from ockpt.documents import StringsDocument
    from ockpt.errors import MissingDataError

    doc = StringsDocument({"a": {"b": "x", "c": {"d": "y"}}, "p/q": "flat", "": "r"}, "s.json")
    assert doc.get("a/b") == "x" and doc.get("a/c/d") == "y" and doc.get("") == "r"
    assert doc.get("p/q") == "flat"
    assert sorted(doc.names()) == ["", "a/b", "a/c/d", "p/q"]
    for name, want in [
        (
            "a/z",
            {
                "rule": "STR-002",
                "file": "s.json",
                "message": "no string at '/a/z' for param 'a/z'",
                "pointer": None,
            },
        ),
        (
            "a/b/c",
            {
                "rule": "STR-002",
                "file": "s.json",
                "message": "no string at '/a/b/c' for param 'a/b/c'",
                "pointer": None,
            },
        ),
        (
            "a/c",
            {
                "rule": "STR-002",
                "file": "s.json",
                "message": "'/a/c' holds an object, not the string of param 'a/c'",
                "pointer": None,
            },
        ),
        (
            "a",
            {
                "rule": "STR-002",
                "file": "s.json",
                "message": "'/a' holds an object, not the string of param 'a'",
                "pointer": None,
            },
        ),
    ]:
        with pytest.raises(MissingDataError) as info:
            doc.get(name)
        assert error_fields(info) == want
    flat = StringsDocument({"x/y": {"z": "w"}, "x": {"y": 1}}, "s.json")
    with pytest.raises(MissingDataError) as info:  # the flat member is no string: STR-002
        flat.get("x/y")
    assert error_fields(info) == {
        "rule": "STR-002",
        "file": "s.json",
        "message": "'/x/y' holds an object, not the string of param 'x/y'",
        "pointer": None,
    }


def test_text_with_a_lone_surrogate_is_scanned_like_any_other():
    """The pre-scan reads text as UTF-8 with surrogates passed through: a str holding a lone
    surrogate (which `json` reads) and enough brackets to be scanned parses as it would
    unscanned. Kills _windows 15, 18, 19."""
    text = "[" + "[]," * 63 + '"\ud800"]'  # 64 opening brackets, nesting 2 deep
    value = parse_json(text, file="f.json")
    assert len(value) == 64 and value[-1] == "\ud800" and value[0] == []
