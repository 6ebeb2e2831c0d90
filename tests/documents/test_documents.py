"""Document models on real Orbax bytes (round trips) and on hand-made invalid documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ockpt
from ockpt import DocumentError, FormatError
from ockpt.documents import (
    ArrayMetadatas,
    CheckpointMetadata,
    MetadataDocument,
    NamedShardingSpec,
    RootMetadata,
    ShardingDocument,
    StringsDocument,
)
from tests.support import case_id, fixture_cases
from tests.support.documents import INVALID
from tests.support.errors import assert_error, error_fields

MODELS = {
    "_METADATA": MetadataDocument,
    "_CHECKPOINT_METADATA": CheckpointMetadata,
    "_ROOT_METADATA": RootMetadata,
    "_sharding": ShardingDocument,
    "_strings.json": StringsDocument,
}


def documents_of(case: Path) -> list[tuple[Path, type]]:
    """Every JSON document under a fixture's checkpoint, with its model."""
    found = []
    for path in sorted((case / "checkpoint").rglob("*")):
        if not path.is_file():
            continue
        if path.name in MODELS:
            found.append((path, MODELS[path.name]))
        elif path.parent.name == "array_metadatas":
            found.append((path, ArrayMetadatas))
    return found


ALL_DOCUMENTS = [(doc, model) for case in fixture_cases() for doc, model in documents_of(case)]


def test_fixtures_hold_documents():
    kinds = {model for _, model in ALL_DOCUMENTS}
    assert {
        MetadataDocument,
        CheckpointMetadata,
        ShardingDocument,
        StringsDocument,
        ArrayMetadatas,
    } <= kinds


@pytest.mark.parametrize(
    "path, model", ALL_DOCUMENTS, ids=[str(p.relative_to(p.parents[3])) for p, _ in ALL_DOCUMENTS]
)
def test_real_document_round_trips(path, model):
    raw = json.loads(path.read_bytes())
    doc = model.read(path)
    assert doc.to_json() == raw
    assert model.from_bytes(doc.to_bytes()) == doc


@pytest.mark.parametrize("case", fixture_cases(), ids=case_id)
def test_metadata_tree_matches_expected_structure(case):
    """The tree rebuilt from `_METADATA` has the saved tree's keys (lists for sequences)."""
    from _record import as_restored, load_expected

    expected = load_expected(case)
    for rel in expected["items"]:
        meta = case / "checkpoint" / rel / "_METADATA"
        if not meta.exists():
            continue
        tree = MetadataDocument.read(meta).tree()
        want = _expected_shape(as_restored(expected, rel, case))  # less what the release loses
        assert _shape(tree) == want, rel


def _shape(tree):
    if isinstance(tree, dict):
        return {k: _shape(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_shape(v) for v in tree]
    if tree is None or tree == ():
        return tree
    return "leaf"


def _expected_shape(node):
    kind = node["type"]
    if kind == "dict":
        return {k: _expected_shape(v) for k, v in node["items"].items()} if node["items"] else {}
    if kind == "namedtuple":
        return {k: _expected_shape(v) for k, v in node["fields"].items()} or ()
    if kind == "list":
        return [_expected_shape(v) for v in node["items"]]
    if kind == "tuple":
        return [_expected_shape(v) for v in node["items"]] if node["items"] else ()
    if kind == "none":
        return None
    return "leaf"


def test_sharding_documents_decode_saved_meshes():
    shardings = [ShardingDocument.read(p) for p, m in ALL_DOCUMENTS if m is ShardingDocument]
    named = [
        s for doc in shardings for s in doc.shardings.values() if isinstance(s, NamedShardingSpec)
    ]
    assert named, "the sharded fixture must hold NamedShardings"
    for spec in named:
        if spec.device_ids is None:  # Orbax 0.5.x wrote no device_mesh
            assert "device_mesh" not in spec.to_json()
            continue
        assert len(spec.device_ids) == len(set(spec.device_ids))
        assert spec.to_json()["device_mesh"]["mesh"]


INVALID_CASES = [  # the file, its model, the rule, and a field of the error that holds a text
    ("metadata-not-json.json", MetadataDocument, "JSON-001", "message", ""),
    ("metadata-duplicate-key.json", MetadataDocument, "JSON-002", "message", "use_zarr3"),
    ("metadata-nan.json", MetadataDocument, "JSON-001", "message", "NaN"),
    ("metadata-no-tree.json", MetadataDocument, "META-001", "message", "tree_metadata"),
    ("metadata-tree-not-object.json", MetadataDocument, "META-001", "pointer", "/tree_metadata"),
    ("metadata-entry-no-value.json", MetadataDocument, "META-002", "message", "value_metadata"),
    ("metadata-key-mismatch.json", MetadataDocument, "META-003", "pointer", "('b',)"),
    ("metadata-bad-key-type.json", MetadataDocument, "META-004", "message", "key_type"),
    ("metadata-bad-index.json", MetadataDocument, "META-005", "pointer", "/key"),
    (
        "metadata-leaf-and-node.json",
        MetadataDocument,
        "META-006",
        "message",
        "both a leaf and a node",
    ),
    ("metadata-flag-type.json", MetadataDocument, "JSON-004", "pointer", "/use_ocdbt"),
    (
        "metadata-write-shape-negative.json",
        MetadataDocument,
        "JSON-004",
        "pointer",
        "write_shape/1",
    ),
    ("metadata-too-deep.json", MetadataDocument, "JSON-003", "message", "nesting"),
    (
        "checkpoint-metadata-handlers-type.json",
        CheckpointMetadata,
        "CKPT-001",
        "pointer",
        "/item_handlers",
    ),
    (
        "checkpoint-metadata-timestamp-type.json",
        CheckpointMetadata,
        "CKPT-001",
        "pointer",
        "/init_timestamp_nsecs",
    ),
    ("checkpoint-metadata-not-object.json", CheckpointMetadata, "CKPT-001", "expected", "object"),
    ("root-metadata-custom-type.json", RootMetadata, "ROOT-001", "pointer", "/custom_metadata"),
    ("sharding-bad-key.json", ShardingDocument, "SHARD-001", "pointer", "/YQ"),
    ("sharding-value-not-string.json", ShardingDocument, "SHARD-002", "pointer", "/YQ=="),
    ("sharding-inner-not-json.json", ShardingDocument, "JSON-001", "pointer", "/YQ=="),
    ("sharding-unknown-type.json", ShardingDocument, "SHARD-003", "got", "PositionalSharding"),
    ("sharding-mesh-shape.json", ShardingDocument, "SHARD-003", "pointer", "device_mesh/mesh"),
    ("sharding-unknown-axis.json", ShardingDocument, "SHARD-003", "pointer", "partition_spec/0"),
    ("sharding-missing-device-str.json", ShardingDocument, "SHARD-003", "message", "device_str"),
    ("array-metadatas-not-list.json", ArrayMetadatas, "ARRM-001", "pointer", "/array_metadatas"),
    ("array-metadatas-wrapper.json", ArrayMetadatas, "ARRM-001", "pointer", "/array_metadatas/0"),
    ("array-metadatas-chunk-shape.json", ArrayMetadatas, "ARRM-001", "pointer", "chunk_shape/0"),
    ("array-metadatas-no-name.json", ArrayMetadatas, "ARRM-001", "message", "param_name"),
    ("strings-not-string.json", StringsDocument, "STR-001", "pointer", "/a/b"),
    ("strings-not-object.json", StringsDocument, "STR-001", "expected", "object"),
    ("strings-not-utf8.json", StringsDocument, "JSON-001", "message", "UTF-8"),
]


def test_every_invalid_document_is_in_the_table():
    assert sorted(name for name, *_ in INVALID_CASES) == sorted(p.name for p in INVALID.iterdir())


@pytest.mark.parametrize(
    "name, model, rule, field, fragment", INVALID_CASES, ids=[c[0] for c in INVALID_CASES]
)
def test_invalid_document_is_rejected(name, model, rule, field, fragment):
    path = INVALID / name
    with pytest.raises(DocumentError) as e:
        model.read(path)
    err = e.value
    assert err.rule == rule
    assert err.file == str(path)
    assert fragment in error_fields(err)[field]
    assert isinstance(err, FormatError) and isinstance(err, ockpt.OckptError)


def test_absent_and_null_fields_round_trip_exactly():
    for raw in (
        {"tree_metadata": {}},
        {"tree_metadata": {}, "custom_metadata": None},
        {"tree_metadata": {}, "use_zarr3": True, "future_field": [1]},
    ):
        assert MetadataDocument.from_json(raw).to_json() == raw
    old = {"init_timestamp_nsecs": 1, "commit_timestamp_nsecs": 2}
    assert CheckpointMetadata.from_json(old).to_json() == old
    assert CheckpointMetadata.from_json(old).item_names is None


def test_strings_document_nests_at_slash():
    doc = StringsDocument.from_values({"a/b": "x", "c.d": "y", "": "root"})
    assert doc.to_json() == {"a": {"b": "x"}, "c.d": "y", "": "root"}
    assert doc.get("a/b") == "x" and doc.get("") == "root"
    assert sorted(doc.names()) == ["", "a/b", "c.d"]
    with pytest.raises(ockpt.MissingDataError) as e:
        doc.get("a")
    assert_error(e, rule="STR-002")
    with pytest.raises(DocumentError) as e:
        StringsDocument.from_values({"a": "x", "a/b": "y"})
    assert e.value.rule == "PATH-001"
