"""The JSON Schemas alone, as another implementation would use them: plain `jsonschema`
(draft 2020-12) over the schema files, no ockpt code. Each schema must accept every real
document of every fixture and reject every invalid example whose fault a JSON Schema can
express; the faults it cannot (not JSON at all, duplicate keys, depth, facts that tie one
entry or file to another) are listed with the reason, and ockpt's own checks catch them
(`test_schemas.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.support import ROOT
from tests.support.documents import DOCS, FIXTURE_DOCUMENTS, INVALID_TABLE

SCHEMAS = ROOT / "reference" / "ockpt" / "schemas"

#: Invalid examples no JSON Schema can refuse, and why.
BEYOND_SCHEMA = {
    "invalid/metadata-not-json.json": "not JSON: there is no instance to validate",
    "invalid/strings-not-utf8.json": "not UTF-8: there is no instance to validate",
    "invalid/metadata-duplicate-key.json": "a JSON parser keeps one of the duplicates",
    "invalid/sharding-inner-not-json.json": "the inner document is a string holding JSON",
    "schema-invalid/sharding-inner-duplicate-key.json": "the inner document is a string",
    "schema-invalid/sharding-inner-not-object.json": "the inner document is a string",
    "invalid/metadata-nan.json": "NaN is not JSON; Python's parser reads it as a number",
    "invalid/metadata-too-deep.json": "a depth bound of the reader, not of the format",
    "invalid/metadata-key-mismatch.json": "a tree key must be the repr of its key path",
    "invalid/metadata-leaf-and-node.json": "one entry's path is the prefix of another's",
    "schema-invalid/metadata-sequence-hole.json": "a list's indices span several entries",
    "invalid/sharding-mesh-shape.json": "the mesh's nesting must match the `shape` array",
    "invalid/sharding-unknown-axis.json": "a partition_spec name must be one of axis_names",
    "schema-invalid/sharding-axis-names-length.json": "axis_names is as long as `shape`",
}


def _validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def _instance(path: Path):
    return json.loads(path.read_bytes())


def _valid(kind: str, instance) -> bool:
    """Plain validation; a `_sharding` value is a string holding JSON, whose decoded value
    the schema names as its content (`contentSchema`: sharding-spec), checked here as such."""
    if not _validator(kind).is_valid(instance):
        return False
    if kind == "sharding":
        inner = _validator("sharding-spec")
        return all(inner.is_valid(json.loads(v)) for v in instance.values())
    return True


#: The JSON documents of the fixtures (the msgpack files' schema describes a decoded view).
JSON_DOCUMENTS = [(p, k) for p, k in FIXTURE_DOCUMENTS if k != "msgpack-view"]


@pytest.mark.parametrize("path, kind", JSON_DOCUMENTS, ids=[str(p) for p, _ in JSON_DOCUMENTS])
def test_every_fixture_document_is_valid_by_the_schema_alone(path, kind):
    instance = _instance(path)
    errors = list(_validator(kind).iter_errors(instance))
    assert errors == [], [e.message for e in errors]
    assert _valid(kind, instance)


@pytest.mark.parametrize("name", sorted(set(INVALID_TABLE) - set(BEYOND_SCHEMA)))
def test_every_invalid_example_is_refused_by_the_schema_alone(name):
    kind = INVALID_TABLE[name][0]
    assert not _valid(kind, _instance(DOCS / name)), f"{kind} schema accepts {name}"


def test_the_exceptions_are_examples_that_exist():
    assert set(BEYOND_SCHEMA) <= set(INVALID_TABLE)
