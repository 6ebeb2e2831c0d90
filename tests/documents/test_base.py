"""`ockpt.documents._base` (`Document.from_bytes`, `read`, `to_bytes`) and
`ockpt.documents.strings` (`_strings.json`): the file each error names, the strict JSON layer
under the model, exact round trips.
"""

from __future__ import annotations

import pytest

from ockpt.documents._json import parse_json
from ockpt.errors import DocumentError

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
    for data, file, text in [
        (b'{"a":1}', None, "_strings.json at /a: string leaf is not a string "
                           "(expected 'string', got 'integer') [STR-001]"),
        (b'{"a":1}', "g.json", "g.json at /a: string leaf is not a string "
                               "(expected 'string', got 'integer') [STR-001]"),
        (b'{"a":"x","a":"y"}', None, "_strings.json: duplicate key 'a' [JSON-002]"),
        (b'{"a":"x","a":"y"}', "g.json", "g.json: duplicate key 'a' [JSON-002]"),
    ]:  # fmt: skip
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_bytes(data, file=file)
        assert str(info.value) == text
    path = tmp_path / "s.json"
    path.write_bytes(b'{"p":{"q":"v"}}')
    read = StringsDocument.read(path)
    assert read.values == {"p": {"q": "v"}} and read.file == str(path)
    assert read.get("p/q") == "v"
    path.write_bytes(b'{"p":{"q":[]}}')
    with pytest.raises(DocumentError) as info:
        StringsDocument.read(path)
    assert str(info.value) == (
        f"{path} at /p/q: string leaf is not a string (expected 'string', got 'array') [STR-001]"
    )


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
    for bad, text in [
        ({"a": {"b/c": {"d~": None}}},
         "s.json at /a/b~1c/d~0: string leaf is not a string (expected 'string', got 'null') "
         "[STR-001]"),
        ({"a": "x", "b": 1.5}, "s.json at /b: string leaf is not a string "
                                "(expected 'string', got 'number') [STR-001]"),
        (["x"], "s.json: wrong type (expected 'object', got 'array') [STR-001]"),
    ]:  # fmt: skip
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_json(bad, file="s.json")
        assert str(info.value) == text
    assert info.value.pointer == ""  # the root: the empty JSON pointer


def test_strings_from_values_nests_and_refuses_collisions():
    """Param names nest at ``/``; a leaf under another leaf, or two leaves at one place, are
    refused (PATH-001) naming the param. Kills StringsDocument.from_values 1-36."""
    from ockpt.documents import StringsDocument

    doc = StringsDocument.from_values({"a/b/c": "x", "a/d": "y", "e": "z", "": "r"})
    assert doc.values == {"a": {"b": {"c": "x"}, "d": "y"}, "e": "z", "": "r"}
    assert doc.file == "_strings.json"
    for values, text in [
        ({"a": "x", "a/b": "y"},
         "_strings.json at a/b: string leaf 'a/b' nests under another string leaf [PATH-001]"),
        ({"a/b": "x", "a": "y"},
         "_strings.json at a: string leaf 'a' collides with another [PATH-001]"),
    ]:  # fmt: skip
        with pytest.raises(DocumentError) as info:
            StringsDocument.from_values(values)
        assert str(info.value) == text


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
    for name, text in [
        ("a/z", "s.json: no string at '/a/z' for param 'a/z' [STR-002]"),
        ("a/b/c", "s.json: no string at '/a/b/c' for param 'a/b/c' [STR-002]"),
        ("a/c", "s.json: '/a/c' holds an object, not the string of param 'a/c' [STR-002]"),
        ("a", "s.json: '/a' holds an object, not the string of param 'a' [STR-002]"),
    ]:
        with pytest.raises(MissingDataError) as info:
            doc.get(name)
        assert str(info.value) == text
    flat = StringsDocument({"x/y": {"z": "w"}, "x": {"y": 1}}, "s.json")
    with pytest.raises(MissingDataError) as info:  # the flat member is no string: STR-002
        flat.get("x/y")
    assert str(info.value) == (
        "s.json: '/x/y' holds an object, not the string of param 'x/y' [STR-002]"
    )


def test_text_with_a_lone_surrogate_is_scanned_like_any_other():
    """The pre-scan reads text as UTF-8 with surrogates passed through: a str holding a lone
    surrogate (which `json` reads) and enough brackets to be scanned parses as it would
    unscanned. Kills _windows 15, 18, 19."""
    text = "[" + "[]," * 63 + '"\ud800"]'  # 64 opening brackets, nesting 2 deep
    value = parse_json(text, file="f.json")
    assert len(value) == 64 and value[-1] == "\ud800" and value[0] == []
