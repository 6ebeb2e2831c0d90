"""Dates of the format history proven on fixture bytes (issue 18, spec/history.md): which
release first writes the `_CHECKPOINT_METADATA` fields, `custom` before `custom_metadata`, and
`metadata/_ROOT_METADATA` only for a manager given metadata. (The OCDBT configuration and value
placement by release: tests/ocdbt/test_tree_tensorstore.py.)"""

from __future__ import annotations

import json

import pytest

import ockpt  # noqa: E402
from ockpt.documents import CheckpointMetadata  # noqa: E402
from ockpt.errors import DocumentError  # noqa: E402
from tests.support import FIXTURES

TIMESTAMPS = {"init_timestamp_nsecs", "commit_timestamp_nsecs"}
HANDLERS = {"item_handlers", "metrics", "performance_metrics"}


def _keys(path) -> set[str]:
    return set(json.loads(path.read_text(encoding="utf-8")))


def test_checkpoint_metadata_fields_arrive_in_0_11_1():
    """json-documents §3 (CKPT-001): 0.10.3 writes only the two timestamps; 0.11.1 adds the
    handler names, metrics and the user metadata as `custom`; 0.11.8 calls it
    `custom_metadata`."""
    step = "manager/checkpoint/0/_CHECKPOINT_METADATA"
    assert _keys(FIXTURES / "orbax-0.10.3" / step) == TIMESTAMPS
    assert _keys(FIXTURES / "orbax-0.11.1" / step) == TIMESTAMPS | HANDLERS | {"custom"}
    later = FIXTURES / "orbax-0.11.8" / "random_keys" / "checkpoint" / "_CHECKPOINT_METADATA"
    assert _keys(later) == TIMESTAMPS | HANDLERS | {"custom_metadata"}
    doc = CheckpointMetadata.read(FIXTURES / "orbax-0.11.1" / step)
    assert doc.user_metadata == {} and doc.custom_metadata is ockpt.documents.ABSENT
    assert sorted(doc.item_names) == ["meta", "params"]
    assert CheckpointMetadata.read(later).user_metadata == {}
    assert CheckpointMetadata.read(FIXTURES / "orbax-0.10.3" / step).user_metadata is None
    # _METADATA.custom_metadata arrives with the same release
    params = "manager/checkpoint/0/params/_METADATA"
    assert "custom_metadata" not in _keys(FIXTURES / "orbax-0.10.3" / params)
    assert "custom_metadata" in _keys(FIXTURES / "orbax-0.11.1" / params)


def test_custom_is_checked_as_custom_metadata():
    """CKPT-001 holds for `custom` as for `custom_metadata`: an object or null."""
    with pytest.raises(DocumentError, match="CKPT-001"):
        CheckpointMetadata.from_json({"custom": [1]})
    doc = CheckpointMetadata.from_json({"custom": {"run": 1}, "custom_metadata": None})
    assert doc.user_metadata == {"run": 1}
    assert doc.to_json() == {"custom": {"run": 1}, "custom_metadata": None}


@pytest.mark.parametrize(
    ("case", "given"),
    [
        ("orbax-0.10.3/manager", True),
        ("orbax-0.11.1/manager", True),
        ("orbax-0.12.8/manager", True),
        ("orbax-0.12.8/checkpointables_all", False),
        ("orbax-0.12.8/v1_training", False),
    ],
)
def test_root_metadata_only_when_given(case, given):
    """json-documents §4: `metadata/_ROOT_METADATA` exists when the manager was given
    metadata; without it the root has no `metadata/` at all, and is still a manager root."""
    root = FIXTURES / case / "checkpoint"
    record = json.loads((FIXTURES / case / "expected.json").read_text(encoding="utf-8"))
    assert ("manager_metadata" in record) is given
    assert (root / "metadata" / "_ROOT_METADATA").is_file() is given
    assert (root / "metadata").exists() is given
    layout = ockpt.detect(root)
    assert layout.kind is ockpt.Kind.MANAGER_ROOT
    assert layout.latest_step is not None
