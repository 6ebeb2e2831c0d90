"""The `ockpt` command as a user runs it (a subprocess), on real fixtures."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"


def ockpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_detect_text_and_json():
    result = ockpt(
        "detect",
        str(CASES / "manager" / "checkpoint"),
        str(CASES / "v1_checkpointables" / "checkpoint"),
    )
    assert result.returncode == 0, result.stderr
    assert "manager_root" in result.stdout and "step 2 (2): committed" in result.stdout
    assert "v1_checkpoint" in result.stdout and "item 'state':" in result.stdout
    result = ockpt("detect", "--json", str(CASES / "sharded" / "checkpoint"))
    assert result.returncode == 0
    (layout,) = json.loads(result.stdout)
    assert layout["kind"] == "pytree_item" and layout["item"]["storage"] == "ocdbt"
    assert layout["committed"] is True


def test_detect_exit_code_for_non_checkpoints(tmp_path):
    result = ockpt("detect", str(tmp_path))
    assert result.returncode == 1 and "not_a_checkpoint" in result.stdout


def test_tree_lists_leaves():
    result = ockpt("tree", "--json", str(CASES / "nested" / "checkpoint"))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows and all({"key_path", "param_name", "value_type"} <= set(r) for r in rows)
    assert {"None", "Dict", "List"} <= {r["value_type"] for r in rows}


def test_tree_reports_malformed_metadata(tmp_path):
    (tmp_path / "_METADATA").write_text('{"tree_metadata": {"x": 1}}')
    result = ockpt("tree", str(tmp_path))
    assert result.returncode == 1
    assert "_METADATA" in result.stderr and "META-002" in result.stderr
    assert "Traceback" not in result.stderr
