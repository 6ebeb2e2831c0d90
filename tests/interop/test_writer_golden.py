"""ockpt writes what real Orbax wrote: re-save each golden fixture's values with ockpt, then
restore with real orbax-checkpoint 0.12.8 (the same checks `fixtures/generate.py --verify` runs
on Orbax's own output) and with ockpt's reader, comparing values, dtypes and structure.

Orbax is imported here only, never by ockpt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import FIXTURES

pytest.importorskip("orbax.checkpoint")
pytest.importorskip("jax")

import _harness  # noqa: E402
import _record  # noqa: E402

import ockpt  # noqa: E402
from ockpt.manager import CheckpointManager  # noqa: E402
from ockpt.writer import JsonItem, save_checkpointables, save_pytree  # noqa: E402

RELEASE = FIXTURES / "orbax-0.12.8"
ITEM_CASES = ["numpy_dtypes", "scalars_strings", "nested", "sharded", "no_ocdbt", "zarr3"]


@pytest.fixture(scope="module")
def cases():
    return _harness.case_module("_cases_0_12")


def _verify(cases, ckpt: Path, record: dict, case_dir: Path) -> list[str]:
    """Run the release's restore checks; return the failures (empty when all pass)."""
    failures = []
    checks = 0
    for label, kind, expected, actual in cases.VERIFY[record["layout"]["kind"]](
        ckpt, record, case_dir
    ):
        checks += 1
        if isinstance(actual, BaseException):
            failures.append(f"{label}: restore raised {type(actual).__name__}: {actual}")
            continue
        if kind == "json":
            if actual != expected:
                failures.append(f"{label}: {actual!r} != {expected!r}")
            continue
        cmp = _harness.Comparison(case_dir, strict=(kind == "strict")).run(expected, actual)
        failures += [f"{label} [{kind}]: {e}" for e in cmp.errors]
    assert checks >= 2, "the release's checks did not run"
    return failures


def _reader_check(ckpt: Path, node: dict, case_dir: Path, **kw) -> list[str]:
    target = _harness.target_from_node(node, case_dir)
    got = ockpt.load_pytree(ckpt, target, **kw)
    return _harness.Comparison(case_dir, strict=True).run(node, got).errors


@pytest.mark.parametrize("case", ITEM_CASES)
def test_item_case_restored_by_orbax_and_ockpt(cases, case, tmp_path):
    case_dir = RELEASE / case
    record = _record.load_expected(case_dir)
    node = record["items"][""]
    tree = _harness.target_from_node(node, case_dir)
    ckpt = tmp_path / "checkpoint"
    save_pytree(
        ckpt,
        tree,
        layout="item",
        use_ocdbt=record["layout"]["ocdbt"],
        zarr_version=record["layout"]["zarr_version"],
    )
    assert _verify(cases, ckpt, record, case_dir) == []
    assert _reader_check(ckpt, node, case_dir) == []
    assert not list(tmp_path.glob("*.orbax-checkpoint-tmp*"))


def test_item_case_standard_checkpointer_restores(cases, tmp_path):
    """The abstract-target restore of StandardCheckpointer, on a tree with every array kind."""
    case_dir = RELEASE / "sharded"
    record = _record.load_expected(case_dir)
    ckpt = tmp_path / "checkpoint"
    save_pytree(ckpt, _harness.target_from_node(record["items"][""], case_dir), layout="item")
    record = dict(record, api="ocp.StandardCheckpointer().save(path, tree)")
    assert _verify(cases, ckpt, record, case_dir) == []


def test_v1_pytree(cases, tmp_path):
    case_dir = RELEASE / "v1_pytree"
    record = _record.load_expected(case_dir)
    tree = _harness.target_from_node(record["items"]["state"], case_dir)
    ckpt = tmp_path / "checkpoint"
    save_pytree(ckpt, tree, custom_metadata=record["options"]["custom_metadata"])
    assert sorted(os.listdir(ckpt)) == [
        "_CHECKPOINT_METADATA",
        "commit_success.txt",
        "orbax.checkpoint",
        "state",
    ]
    assert _verify(cases, ckpt, record, case_dir) == []
    assert _reader_check(ckpt, record["items"]["state"], case_dir) == []
    doc = json.loads((ckpt / "_CHECKPOINT_METADATA").read_text())
    assert doc["custom_metadata"] == record["options"]["custom_metadata"]


def test_v1_checkpointables(cases, tmp_path):
    case_dir = RELEASE / "v1_checkpointables"
    record = _record.load_expected(case_dir)
    parts = {
        name: _harness.target_from_node(node, case_dir) for name, node in record["items"].items()
    }
    parts.update({name: JsonItem(value) for name, value in record["json_items"].items()})
    ckpt = tmp_path / "checkpoint"
    save_checkpointables(ckpt, parts)
    assert (ckpt / "extra" / "data.json").is_file()
    assert _verify(cases, ckpt, record, case_dir) == []
    for name, node in record["items"].items():
        assert _reader_check(ckpt, node, case_dir, item=name) == []


def test_manager(cases, tmp_path):
    case_dir = RELEASE / "manager"
    record = _record.load_expected(case_dir)
    ckpt = tmp_path / "checkpoint"
    mngr = CheckpointManager(ckpt, metadata=record["manager_metadata"])
    for step in record["steps"]:
        params = _harness.target_from_node(record["items"][f"{step}/params"], case_dir)
        meta = JsonItem(record["json_items"][f"{step}/meta"])
        assert mngr.save(step, items={"params": params, "meta": meta})
    assert _verify(cases, ckpt, record, case_dir) == []
    for step in record["steps"]:
        node = record["items"][f"{step}/params"]
        target = _harness.target_from_node(node, case_dir)
        got = mngr.restore(step, target, item="params")
        assert _harness.Comparison(case_dir, strict=True).run(node, got).errors == []
        assert mngr.restore(step, item="meta") == record["json_items"][f"{step}/meta"]
