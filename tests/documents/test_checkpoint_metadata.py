"""`ockpt.documents.checkpoint_metadata`: `_CHECKPOINT_METADATA` and the root metadata of real
steps and hand-made faults (file, pointer, rule), and exact round trips in field order.
"""

from __future__ import annotations

import functools
import json

from ockpt.documents import (
    CheckpointMetadata,
    RootMetadata,
    metadata,
)
from ockpt.errors import DocumentError
from tests.support import FIXTURES
from tests.support.errors import error_fields, raised, raised_fields

_error = functools.partial(raised, DocumentError)
_fields = functools.partial(raised_fields, DocumentError)


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

    def fields(obj):
        return _fields(CheckpointMetadata.from_json, obj, file="c")

    e = _error(CheckpointMetadata.from_json, [], file="c")
    assert error_fields(e) == {
        "rule": "CKPT-001",
        "file": "c",
        "message": "wrong type",
        "pointer": "",
        "expected": "object",
        "got": "array",
    }
    assert fields({"item_handlers": 5}) == {
        "rule": "CKPT-001",
        "file": "c",
        "message": "wrong type",
        "pointer": "/item_handlers",
        "expected": "string or object",
        "got": "integer",
    }
    assert fields({"item_handlers": {"ok": "h", "a/b": 1}}) == {
        "rule": "CKPT-001",
        "file": "c",
        "message": "wrong type",
        "pointer": "/item_handlers/a~1b",
        "expected": "string",
        "got": "integer",
    }
    for name in ("metrics", "performance_metrics", "custom_metadata", "custom"):
        assert fields({name: []}) == {
            "rule": "CKPT-001",
            "file": "c",
            "message": "wrong type",
            "pointer": f"/{name}",
            "expected": "object",
            "got": "array",
        }
    for name in ("init_timestamp_nsecs", "commit_timestamp_nsecs"):
        assert fields({name: 1.5}) == {
            "rule": "CKPT-001",
            "file": "c",
            "message": "wrong type",
            "pointer": f"/{name}",
            "expected": "integer",
            "got": "number",
        }
        assert fields({name: True}) == {
            "rule": "CKPT-001",
            "file": "c",
            "message": "wrong type",
            "pointer": f"/{name}",
            "expected": "integer",
            "got": "boolean",
        }
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
    assert error_fields(e) == {
        "rule": "ROOT-001",
        "file": "r",
        "message": "wrong type",
        "pointer": "",
        "expected": "object",
        "got": "string",
    }
    assert _error(RootMetadata.from_json, "x").file == "metadata/_ROOT_METADATA"
    for name in ("internal_metadata", "custom_metadata"):
        assert _fields(RootMetadata.from_json, {name: 1}, file="r") == {
            "rule": "ROOT-001",
            "file": "r",
            "message": "wrong type",
            "pointer": f"/{name}",
            "expected": "object",
            "got": "integer",
        }
    raw = {"internal_metadata": {"v": 1}, "custom_metadata": None, "extra": 1}
    doc = RootMetadata.from_json(raw)
    assert (doc.internal_metadata, doc.custom_metadata, doc.extra) == ({"v": 1}, None, {"extra": 1})
    assert doc.to_json() == raw and list(doc.to_json()) == list(raw)
    assert RootMetadata.from_json({}).to_json() == {}
    assert RootMetadata.from_json({"custom_metadata": {"s": 2}}).to_json() == {
        "custom_metadata": {"s": 2}
    }
