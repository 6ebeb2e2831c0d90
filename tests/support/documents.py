"""Documents the document and schema tests share: the hand-made invalid documents of
tests/documents/ (`invalid/`, shared by the models and the schemas; `schema-invalid/`, for the
schemas) with the rule each breaks, and every JSON document of every golden fixture."""

from __future__ import annotations

from pathlib import Path

from ockpt import schema
from tests.support import ROOT, fixture_cases

DOCS = ROOT / "tests" / "documents"
INVALID = DOCS / "invalid"  # shared by the models (tests/documents/) and the schemas
SCHEMA_INVALID = DOCS / "schema-invalid"  # added for the schemas


def _fixture_documents() -> list[tuple[Path, str]]:
    """(path, document kind) of every file of every golden case that has a schema."""
    found = []
    for case in fixture_cases():
        for path in sorted((case / "checkpoint").rglob("*")):
            kind = schema.kind_for_path(path) if path.is_file() else None
            if kind is not None:
                found.append((path, kind))
    return found


FIXTURE_DOCUMENTS = _fixture_documents()


#: hand-made invalid document -> (kind, rule, pointer fragment)

INVALID_TABLE: dict[str, tuple[str, str, str]] = {
    # tests/documents/invalid (shared with the model tests)
    "invalid/metadata-not-json.json": ("metadata", "JSON-001", ""),
    "invalid/metadata-duplicate-key.json": ("metadata", "JSON-002", ""),
    "invalid/metadata-nan.json": ("metadata", "JSON-001", ""),
    "invalid/metadata-no-tree.json": ("metadata", "META-001", ""),
    "invalid/metadata-tree-not-object.json": ("metadata", "META-001", "/tree_metadata"),
    "invalid/metadata-entry-no-value.json": ("metadata", "META-002", "/tree_metadata/('a',)"),
    "invalid/metadata-key-mismatch.json": ("metadata", "META-003", "('b',)"),
    "invalid/metadata-bad-key-type.json": ("metadata", "META-004", "/key_type"),
    "invalid/metadata-bad-index.json": ("metadata", "META-005", "/key_metadata/0/key"),
    "invalid/metadata-leaf-and-node.json": ("metadata", "META-006", "('a',)"),
    "invalid/metadata-flag-type.json": ("metadata", "JSON-004", "/use_ocdbt"),
    "invalid/metadata-write-shape-negative.json": ("metadata", "JSON-004", "/write_shape/1"),
    "invalid/metadata-too-deep.json": ("metadata", "JSON-003", ""),
    "invalid/checkpoint-metadata-handlers-type.json": (
        "checkpoint-metadata",
        "CKPT-001",
        "/item_handlers",
    ),
    "invalid/checkpoint-metadata-timestamp-type.json": (
        "checkpoint-metadata",
        "CKPT-001",
        "/init_timestamp_nsecs",
    ),
    "invalid/checkpoint-metadata-not-object.json": ("checkpoint-metadata", "CKPT-001", ""),
    "invalid/root-metadata-custom-type.json": ("root-metadata", "ROOT-001", "/custom_metadata"),
    "invalid/sharding-bad-key.json": ("sharding", "SHARD-001", "/YQ"),
    "invalid/sharding-value-not-string.json": ("sharding", "SHARD-002", "/YQ=="),
    "invalid/sharding-inner-not-json.json": ("sharding", "JSON-001", "/YQ=="),
    "invalid/sharding-unknown-type.json": ("sharding", "SHARD-003", "/YQ==/sharding_type"),
    "invalid/sharding-mesh-shape.json": ("sharding", "SHARD-003", "/YQ==/device_mesh/mesh"),
    "invalid/sharding-unknown-axis.json": ("sharding", "SHARD-003", "/YQ==/partition_spec/0"),
    "invalid/sharding-missing-device-str.json": ("sharding", "SHARD-003", "/YQ=="),
    "invalid/array-metadatas-not-list.json": ("array-metadatas", "ARRM-001", "/array_metadatas"),
    "invalid/array-metadatas-wrapper.json": ("array-metadatas", "ARRM-001", "/array_metadatas/0"),
    "invalid/array-metadatas-chunk-shape.json": ("array-metadatas", "ARRM-001", "chunk_shape/0"),
    "invalid/array-metadatas-no-name.json": ("array-metadatas", "ARRM-001", "/array_metadata"),
    "invalid/strings-not-string.json": ("strings", "STR-001", "/a/b"),
    "invalid/strings-not-object.json": ("strings", "STR-001", ""),
    "invalid/strings-not-utf8.json": ("strings", "JSON-001", ""),
    # tests/documents/schema-invalid (added for the schemas)
    "schema-invalid/metadata-unknown-value-type.json": ("metadata", "META-007", "/value_type"),
    "schema-invalid/metadata-key-extra-field.json": ("metadata", "META-002", "/key_metadata/0"),
    "schema-invalid/metadata-key-type-string.json": ("metadata", "JSON-004", "/key_type"),
    "schema-invalid/metadata-no-value-type.json": ("metadata", "META-002", "/value_metadata"),
    "schema-invalid/metadata-sequence-hole.json": ("metadata", "META-006", "()"),
    "schema-invalid/metadata-index-leading-zero.json": ("metadata", "META-005", "/key"),
    "schema-invalid/metadata-custom-not-object.json": ("metadata", "JSON-004", "/custom_metadata"),
    "schema-invalid/checkpoint-metadata-handler-value.json": (
        "checkpoint-metadata",
        "CKPT-001",
        "/item_handlers/state",
    ),
    "schema-invalid/checkpoint-metadata-metrics-type.json": (
        "checkpoint-metadata",
        "CKPT-001",
        "/metrics",
    ),
    "schema-invalid/checkpoint-metadata-timestamp-float.json": (
        "checkpoint-metadata",
        "CKPT-001",
        "/init_timestamp_nsecs",
    ),
    "schema-invalid/root-metadata-internal-type.json": (
        "root-metadata",
        "ROOT-001",
        "/internal_metadata",
    ),
    "schema-invalid/sharding-noncanonical-key.json": ("sharding", "SHARD-001", "/YR=="),
    "schema-invalid/sharding-inner-not-object.json": ("sharding", "SHARD-002", "/YQ=="),
    "schema-invalid/sharding-inner-duplicate-key.json": ("sharding", "JSON-002", "/YQ=="),
    "schema-invalid/sharding-named-no-partition-spec.json": ("sharding", "SHARD-003", "/YQ=="),
    "schema-invalid/sharding-axis-names-length.json": ("sharding", "SHARD-003", "/YQ=="),
    "schema-invalid/sharding-mesh-negative-id.json": ("sharding", "SHARD-003", "/device_mesh"),
    "schema-invalid/array-metadatas-ext-type.json": (
        "array-metadatas",
        "ARRM-001",
        "/ext_metadata",
    ),
    "schema-invalid/array-metadatas-name-type.json": ("array-metadatas", "ARRM-001", "/param_name"),
    "schema-invalid/strings-array-leaf.json": ("strings", "STR-001", "/a"),
    "schema-invalid/strings-null-leaf.json": ("strings", "STR-001", "/a/b"),
    "schema-invalid/msgpack-view-bad-dtype.json": ("msgpack-view", "MSGPACK-010", "/dtype"),
    "schema-invalid/msgpack-view-negative-shape.json": ("msgpack-view", "MSGPACK-011", "/shape/0"),
    "schema-invalid/msgpack-view-placeholder-no-name.json": (
        "msgpack-view",
        "JSON-005",
        "/a/__placeholder__",
    ),
    "schema-invalid/msgpack-view-bad-scheme.json": ("msgpack-view", "JSON-004", "/scheme"),
    "schema-invalid/msgpack-view-complex-arity.json": ("msgpack-view", "JSON-004", "/__complex__"),
}
