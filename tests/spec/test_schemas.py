"""JSON Schemas: valid against the 2020-12 metaschema, shipped as package data, accept every
document of every real-Orbax fixture, and reject hand-made invalid documents for the stated rule.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import msgpack
import numpy as np
import pytest
from jsonschema import Draft202012Validator

from ockpt import dtypes, msgpack_legacy, schema
from ockpt.findings import Finding
from ockpt.rules import RULES
from tests.support import fixture_cases
from tests.support.documents import (
    DOCS,
    FIXTURE_DOCUMENTS,
    INVALID,
    INVALID_TABLE,
    SCHEMA_INVALID,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC_SCHEMAS = ROOT / "spec" / "schemas"
RULE_ID = re.compile(r"[A-Z]+(?:-[A-Z]+)*-[0-9]{3}")


# ---------------------------------------------------------------------------------------------
# the schemas themselves


@pytest.mark.parametrize("kind", schema.schema_kinds())
def test_schema_passes_the_metaschema(kind):
    doc = schema.load_schema(kind)
    Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"] == f"https://ockpt.dev/schemas/{schema.SCHEMA_FILES[kind]}"


@pytest.mark.parametrize("kind", schema.schema_kinds())
def test_schema_ships_inside_the_package(kind):
    """Loaded through importlib.resources, as an installed package would load it."""
    res = resources.files("ockpt").joinpath("schemas", schema.SCHEMA_FILES[kind])
    assert res.is_file()
    assert json.loads(res.read_text(encoding="utf-8")) == schema.load_schema(kind)


def _comments(node):
    if isinstance(node, dict):
        if "$comment" in node:
            yield node["$comment"]
        for value in node.values():
            yield from _comments(value)
    elif isinstance(node, list):
        for value in node:
            yield from _comments(value)


@pytest.mark.parametrize("kind", schema.schema_kinds())
def test_schema_comments_are_registered_rule_ids(kind):
    comments = list(_comments(schema.load_schema(kind)))
    assert comments, "every schema carries rule ids"
    for comment in comments:
        assert RULE_ID.fullmatch(comment) and comment in RULES, comment


def test_spec_schemas_directory_is_a_pointer():
    """spec/schemas holds no diverging copies; its README lists every schema file."""
    readme = (SPEC_SCHEMAS / "README.md").read_text(encoding="utf-8")
    for name in schema.SCHEMA_FILES.values():
        assert f"`{name}`" in readme, name
    package = resources.files("ockpt").joinpath("schemas")
    for copy in SPEC_SCHEMAS.glob("*.json"):
        assert copy.read_bytes() == package.joinpath(copy.name).read_bytes(), copy.name


def test_msgpack_view_dtypes_match_the_decoder():
    view = schema.load_schema("msgpack-view")
    names = set(view["$defs"]["dtype"]["enum"])
    # the decoder accepts exactly the names of the dtype table (ockpt.dtypes)
    assert names == set(dtypes.SUPPORTED) | set(dtypes.EXTENSION_NAMES)


def test_unknown_kind_is_refused():
    with pytest.raises(KeyError):
        schema.validate_document("zarray-nope", {})


# ---------------------------------------------------------------------------------------------
# every document of every real-Orbax fixture validates




def test_fixtures_cover_every_document_kind():
    kinds = {kind for _, kind in FIXTURE_DOCUMENTS}
    expected = {"metadata", "checkpoint-metadata", "root-metadata", "sharding"}
    expected |= {"array-metadatas", "strings"}
    assert expected <= kinds, sorted(expected - kinds)


@pytest.mark.parametrize(
    "path, kind",
    FIXTURE_DOCUMENTS,
    ids=[
        str(p.relative_to(p.parents[3])) if len(p.parents) > 3 else str(p)
        for p, _ in FIXTURE_DOCUMENTS
    ],
)
def test_fixture_document_validates(path, kind):
    findings = schema.check_document(kind, path.read_bytes(), file=str(path))
    assert findings == [], [str(f) for f in findings]


def test_sharding_inner_documents_are_checked():
    """A fixture's inner sharding documents each validate against sharding-spec."""
    docs = [p for p, k in FIXTURE_DOCUMENTS if k == "sharding"]
    assert docs
    for path in docs:
        for value in json.loads(path.read_bytes()).values():
            inner = json.loads(value)
            assert schema.validate_document("sharding-spec", inner) == []


# ---------------------------------------------------------------------------------------------
# msgpack files and their JSON view


def _ext(code: int, payload) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(payload, use_bin_type=True))


def test_msgpack_view_of_a_decoded_file_validates():
    tree = {
        "a": _ext(1, [[4], "float32", np.arange(4, dtype="<f4").tobytes()]),
        "b": [_ext(3, [[], "int32", b"\x03\x00\x00\x00"]), 2.5],
        "c": _ext(2, [1.0, float("nan")]),
        "t": _ext(4, [1, "x"]),
        "p": "PLACEHOLDER://p",
        "q": "AGGREGATED://q",
        "raw": b"ab",
        "inf": float("inf"),
        "tagged": {"__tuple__": 1},
    }
    data = msgpack.packb(tree, use_bin_type=True)
    assert schema.check_document("msgpack-view", data, file="checkpoint") == []
    view = msgpack_legacy.to_json_view(msgpack_legacy.decode_checkpoint(data))
    assert schema.validate_document("msgpack-view", view) == []
    assert view["a"] == {"__ndarray__": {"dtype": "float32", "shape": [4]}}


def test_msgpack_file_errors_become_findings():
    bad = msgpack.packb({"a": msgpack.ExtType(9, b"")}, use_bin_type=True)
    (finding,) = schema.check_document("msgpack-view", bad, file="checkpoint")
    assert finding.rule == "MSGPACK-008" and finding.file == "checkpoint"
    twice = msgpack.packb({"a": "PLACEHOLDER://x", "b": "PLACEHOLDER://x"})
    assert [f.rule for f in schema.check_document("msgpack-view", twice)] == ["MSGPACK-017"]


MSGPACK_FILES = [
    p for case in fixture_cases() for p in sorted((case / "checkpoint").rglob("checkpoint"))
]


@pytest.mark.parametrize(
    "path", MSGPACK_FILES, ids=[str(p.relative_to(p.parents[3])) for p in MSGPACK_FILES]
)
def test_fixture_msgpack_files_validate(path):
    if not path.is_file():
        pytest.skip("a directory named checkpoint")
    assert schema.check_document("msgpack-view", path.read_bytes(), file=str(path)) == []


# ---------------------------------------------------------------------------------------------
# hand-made invalid documents (support.documents.INVALID_TABLE)


def test_every_invalid_file_is_in_the_table():
    on_disk = {f"{p.parent.name}/{p.name}" for d in (INVALID, SCHEMA_INVALID) for p in d.iterdir()}
    assert sorted(on_disk) == sorted(INVALID_TABLE)


def _findings(kind: str, path: Path) -> list[Finding]:
    data = path.read_bytes()
    if kind == "msgpack-view":  # the view is JSON; msgpack bytes are tested above
        return schema.validate_document(kind, json.loads(data), file=str(path))
    return schema.check_document(kind, data, file=str(path))


@pytest.mark.parametrize("name", sorted(INVALID_TABLE))
def test_invalid_document_is_rejected_for_its_rule(name):
    kind, rule, fragment = INVALID_TABLE[name]
    path = DOCS / name
    findings = _findings(kind, path)
    assert findings, "no finding at all"
    first = findings[0]
    assert first.rule == rule, [str(f) for f in findings]
    assert first.severity == RULES[rule].severity
    assert first.file == str(path)
    assert fragment in (first.pointer or ""), first.pointer
    assert f"[{rule}]" in str(first)
    if RULES[rule].severity == "error":
        assert any(f.is_error for f in findings)


def test_warning_rule_does_not_make_a_document_invalid():
    """META-007 is a warning: a strict reader still parses the document."""
    from ockpt.documents import MetadataDocument

    path = SCHEMA_INVALID / "metadata-unknown-value-type.json"
    findings = _findings("metadata", path)
    assert [f.severity for f in findings] == ["warning"]
    MetadataDocument.read(path)


def test_rule_comes_from_the_nearest_comment():
    """A failure inside a $ref'd subschema reports that subschema's rule, not the root's."""
    doc = {"tree_metadata": {"('a',)": {"key_metadata": [{"key": "a", "key_type": 5}]}}}
    rules = sorted(f.rule for f in schema.validate_document("metadata", doc))
    assert rules == ["META-002", "META-004"]
    (finding,) = schema.validate_document("metadata", [])
    assert finding.rule == "META-001" and finding.pointer == ""


def test_finding_from_format_error_keeps_rule_and_details():
    from ockpt.errors import DocumentError

    err = DocumentError("bad", rule="SHARD-001", file="x", pointer="/k", expected="a", got="b")
    f = Finding.from_error(err)
    assert (f.rule, f.severity, f.file, f.pointer) == ("SHARD-001", "error", "x", "/k")
    assert "expected 'a'" in f.message and "got 'b'" in f.message
    assert f.to_json()["rule"] == "SHARD-001"


def test_kind_for_path():
    assert schema.kind_for_path("x/_METADATA") == "metadata"
    assert schema.kind_for_path("x/array_metadatas/process_12") == "array-metadatas"
    assert schema.kind_for_path("x/array_metadatas/process_01") is None
    assert schema.kind_for_path("x/metadata/_ROOT_METADATA") == "root-metadata"
    assert schema.kind_for_path("x/a/.zarray") is None


def test_every_shipped_schema_is_registered():
    from importlib import resources

    from ockpt.schema import SCHEMA_FILES

    shipped = {
        p.name
        for p in resources.files("ockpt").joinpath("schemas").iterdir()
        if p.name.endswith(".schema.json")
    }
    assert shipped == set(SCHEMA_FILES.values())


# ---------------------------------------------------------------------------------------------
# plainly valid `_METADATA` entries are not given to jsonschema (`schema._schema_input`)


def _plain(keys, value):
    return {"key_metadata": keys, "value_metadata": value}


_KEY = {"key": "a", "key_type": 2}
_VALUE = {"value_type": "jax.Array", "skip_deserialize": False}
ENTRY_VARIANTS = [
    _plain([_KEY], _VALUE),
    _plain([_KEY, {"key": "10", "key_type": 1}], {"value_type": "scalar", "write_shape": [0, 3]}),
    _plain([], {"value_type": "Dict", "write_shape": None}),
    _plain([_KEY], _VALUE) | {"more": 1},  # extra entry fields: the schema allows them
    _plain([_KEY], _VALUE | {"more": [1]}),
    # faults (or forms the quick test leaves to jsonschema)
    _plain([{"key": "a", "key_type": 3}], _VALUE),
    _plain([{"key": "01", "key_type": 1}], _VALUE),
    _plain([{"key": "1\n", "key_type": 1}], _VALUE),
    _plain([{"key": "a", "key_type": True}], _VALUE),
    _plain([{"key": "a", "key_type": 2.0}], _VALUE),
    _plain([{"key": "a", "key_type": 2, "x": 1}], _VALUE),
    _plain([{"key": 1, "key_type": 2}], _VALUE),
    _plain([_KEY], {"value_type": "jax.array"}),
    _plain([_KEY], {"value_type": "scalar", "skip_deserialize": 0}),
    _plain([_KEY], {"value_type": "scalar", "write_shape": [-1]}),
    _plain([_KEY], {"value_type": "scalar", "write_shape": [2.0]}),
    _plain([_KEY], {"value_type": "scalar", "write_shape": [True]}),
    _plain([_KEY], {"skip_deserialize": False}),
    _plain([_KEY], []),
    {"key_metadata": [_KEY]},
    {"key_metadata": _KEY, "value_metadata": _VALUE},
    [],
]


def test_metadata_value_types_are_the_schema_enum():
    """The quick test's value types are the schema's (`documents.metadata.VALUE_TYPES`)."""
    from ockpt.documents.metadata import VALUE_TYPES

    value = schema.load_schema("metadata")["$defs"]["value"]["properties"]["value_type"]
    assert set(value["allOf"][0]["enum"]) == VALUE_TYPES


@pytest.mark.parametrize("i", range(len(ENTRY_VARIANTS)))
def test_quick_entry_test_never_passes_what_the_schema_refuses(i, monkeypatch):
    """Findings are the same with and without the quick path; an entry it passes is one the
    schema accepts (it is a sufficient test)."""
    doc = {"tree_metadata": {"('a',)": ENTRY_VARIANTS[i]}, "use_zarr3": "no"}  # a fault too
    passed = schema._schema_input("metadata", doc)["tree_metadata"] == {}
    assert passed == (i < 5)  # the first five are plainly valid
    quick = schema.validate_document("metadata", doc, file="m")
    monkeypatch.setattr(schema, "_schema_input", lambda kind, obj: obj)
    full = schema.validate_document("metadata", doc, file="m")
    assert quick == full and any(f.pointer == "/use_zarr3" for f in full)
    if passed:
        assert not [f for f in full if f.pointer.startswith("/tree_metadata")]


def test_plain_metadata_entries_do_not_reach_jsonschema(monkeypatch):
    """A `_METADATA` of plainly valid entries is checked by jsonschema without them (its top
    level only); one odd entry sends the whole document to jsonschema."""
    seen = []
    real = schema._schema_findings
    monkeypatch.setattr(
        schema,
        "_schema_findings",
        lambda kind, obj, **kw: seen.append(obj) or real(kind, obj, **kw),
    )
    tree = {repr((f"p{i}",)): _plain([{"key": f"p{i}", "key_type": 2}], _VALUE) for i in range(50)}
    assert schema.validate_document("metadata", {"tree_metadata": tree}, file="m") == []
    assert seen[-1] == {"tree_metadata": {}}
    tree["('p3',)"] = _plain([{"key": "p3", "key_type": 2}], {"value_type": "jax.array"})
    findings = schema.validate_document("metadata", {"tree_metadata": tree}, file="m")
    assert seen[-1]["tree_metadata"] == tree
    assert [f.rule for f in findings] == ["META-007"]


def test_importing_ockpt_does_not_import_jsonschema():
    """jsonschema (about 60 ms to import) is imported when a document is first checked."""
    import subprocess
    import sys

    code = (
        "import sys, ockpt; assert 'jsonschema' not in sys.modules, 'eager'; "
        "ockpt.schema.validate_document('metadata', {'tree_metadata': {}}); "
        "assert 'jsonschema' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
