"""Layout detection on every real fixture and on arbitrary directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ockpt
from ockpt.layout import Kind, Storage, is_temporary_name, parse_step_name
from tests.support import case_id, fixture_cases

CASES = fixture_cases()


def expected_of(case: Path) -> dict:
    from _record import load_expected

    return load_expected(case)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_detects_every_fixture(case):
    expected = expected_of(case)
    want = expected["layout"]
    layout = ockpt.detect(case / "checkpoint")
    assert layout.problems == ()
    kind = {"item": Kind.PYTREE_ITEM, "v1": Kind.V1_CHECKPOINT, "manager": Kind.MANAGER_ROOT}[
        want["kind"]
    ]
    assert layout.kind is kind, layout.reason
    for rel in expected["items"]:
        item = _find(layout, case / "checkpoint", rel)
        assert item.kind is Kind.PYTREE_ITEM, (rel, item.reason)
        assert item.problems == ()
        fmt = item.item
        stores_arrays = fmt.storage not in (Storage.INLINE, Storage.NONE)
        if "ocdbt" in want and stores_arrays:  # the option makes no database if all is inline
            assert (fmt.storage is Storage.OCDBT) == want["ocdbt"], rel
        if "zarr_version" in want and stores_arrays:
            if fmt.zarr_version is None:  # only said by _METADATA or keys inside the database
                assert not fmt.has_metadata and fmt.storage is Storage.OCDBT, rel
            else:
                assert fmt.zarr_version == want["zarr_version"], rel
    if layout.kind is Kind.V1_CHECKPOINT:  # state/, pytree/ or the only pytree (LOAD-051)
        names = set(expected["items"])
        one = bool(names & {"state", "pytree"}) or len(names) == 1
        assert (layout.pytree is not None) is one, sorted(names)
    if layout.kind is Kind.MANAGER_ROOT and "steps" in expected:
        assert [s.step for s in layout.steps if s.committed] == expected["steps"]
        assert layout.latest_step.step == max(expected["steps"])


def _find(layout, root: Path, rel: str):
    """The detected layout of the item at `rel` under `root` (walking steps and items)."""
    if rel == "":
        return layout
    node = layout
    parts = rel.split("/")
    for i, part in enumerate(parts):
        if node.kind is Kind.MANAGER_ROOT:
            node = ockpt.detect(root.joinpath(*parts[: i + 1]))
        else:
            node = node.checkpointables[part]
    return node


def test_temporary_directories(tmp_path):
    tmp = tmp_path / "7.orbax-checkpoint-tmp-1712"
    (tmp / "default").mkdir(parents=True)
    assert ockpt.detect(tmp).kind is Kind.TEMPORARY
    assert not ockpt.detect(tmp).committed
    (tmp_path / "3" / "default").mkdir(parents=True)
    (tmp_path / "3" / "default" / "_METADATA").write_text('{"tree_metadata": {}}')
    root = ockpt.detect(tmp_path)
    assert root.kind is Kind.MANAGER_ROOT
    assert [(s.step, s.committed) for s in root.steps] == [(3, True), (7, False)]
    assert root.latest_step.step == 3 and root.temporaries == (tmp.name,)
    assert is_temporary_name("state.orbax-checkpoint-tmp")
    assert parse_step_name("run_0012") == ("run", 12) and parse_step_name("x") is None


def test_not_a_checkpoint(tmp_path):
    assert ockpt.detect(tmp_path / "missing").kind is Kind.NOT_A_CHECKPOINT
    (tmp_path / "file").write_text("x")
    assert ockpt.detect(tmp_path / "file").reason == "not a directory"
    (tmp_path / "empty").mkdir()
    assert ockpt.detect(tmp_path / "empty").kind is Kind.NOT_A_CHECKPOINT
    (tmp_path / "2024" / "photos").mkdir(parents=True)
    assert ockpt.detect(tmp_path).kind is Kind.NOT_A_CHECKPOINT


def test_malformed_metadata_is_reported_not_raised(tmp_path):
    (tmp_path / "_METADATA").write_text("{oops")
    layout = ockpt.detect(tmp_path)
    assert layout.kind is Kind.PYTREE_ITEM
    assert len(layout.problems) == 1 and layout.problems[0].rule == "JSON-001"


def test_symlink_loop_and_unreadable(tmp_path):
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    assert ockpt.detect(tmp_path / "loop").kind is Kind.NOT_A_CHECKPOINT
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "d", tmp_path / "d" / "self")
    assert ockpt.detect(tmp_path / "d").kind is Kind.NOT_A_CHECKPOINT


names = st.sampled_from(
    [
        "_METADATA",
        "_CHECKPOINT_METADATA",
        "checkpoint",
        "manifest.ocdbt",
        "orbax.checkpoint",
        "commit_success.txt",
        "metadata",
        "d",
        "0",
        "12",
        "x.orbax-checkpoint-tmp",
        "ocdbt.process_0",
        ".zarray",
        "zarr.json",
        "state",
        "default",
        "run_3",
        "array_metadatas",
    ]
)
trees = st.recursive(
    st.sampled_from(["", "{}", "not json", '{"tree_metadata": 5}']),
    lambda c: st.dictionaries(names, c, max_size=4),
    max_leaves=15,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=st.dictionaries(names, trees, max_size=5))
def test_detect_never_raises(tmp_path_factory, tree):
    root = tmp_path_factory.mktemp("arb")
    _materialize(root, tree)
    layout = ockpt.detect(root)
    assert isinstance(layout.kind, Kind) and layout.reason


def _materialize(path: Path, tree: dict) -> None:
    for name, value in tree.items():
        if isinstance(value, dict):
            (path / name).mkdir()
            _materialize(path / name, value)
        else:
            (path / name).write_text(value)


NO_OCDBT_SAVES = """
import sys
import numpy as np
import orbax.checkpoint as ocp

root = sys.argv[1]
tree = {"a": np.arange(4.0), "b": {"c": np.arange(3, dtype=np.int32)}}
saving = ocp.v1.options.ArrayOptions.Saving(use_ocdbt=False)
with ocp.v1.Context(array_options=ocp.v1.options.ArrayOptions(saving=saving)):
    ocp.v1.save(root + "/v1", tree)
mgr = ocp.CheckpointManager(root + "/mgr",
                            item_handlers=ocp.PyTreeCheckpointHandler(use_ocdbt=False))
mgr.save(5, args=ocp.args.PyTreeSave(tree))
mgr.wait_until_finished()
"""


def test_per_leaf_items_inside_v1_and_steps(tmp_path):
    """Real Orbax: a v1 root and a step whose items keep per-leaf zarr directories are
    composites, not items (their leaves' array directories sit one level down)."""
    import subprocess
    import sys

    pytest.importorskip("orbax.checkpoint")
    subprocess.run(
        [sys.executable, "-c", NO_OCDBT_SAVES, str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    v1 = ockpt.detect(tmp_path / "v1")
    assert v1.kind is Kind.V1_CHECKPOINT
    assert v1.pytree.item.storage is Storage.PER_LEAF_ZARR and v1.pytree.item.zarr_version == 3
    step = ockpt.detect(tmp_path / "mgr" / "5")
    assert step.kind is Kind.STEP
    item = step.checkpointables["default"]
    assert item.item.storage is Storage.PER_LEAF_ZARR and item.item.zarr_version == 2
    assert [s.step for s in ockpt.detect(tmp_path / "mgr").steps] == [5]


def test_directories_linked_into_themselves_end(tmp_path):
    """A random-key item or a step whose items are links to itself is detected to a bounded
    depth, not recursed into for ever (2 branches per level up to the 40-link limit)."""
    import time

    key = tmp_path / "k"
    key.mkdir()
    (key / "jax_random_key").symlink_to(".")
    (key / "jax_random_key_metadata").symlink_to(".")
    step = tmp_path / "7"
    step.mkdir()
    (step / "_CHECKPOINT_METADATA").write_text('{"item_handlers": {"a": "x.Y", "b": "x.Y"}}')
    (step / "a").symlink_to(".")
    (step / "b").symlink_to(".")
    for path in (key, step):
        start = time.monotonic()
        layout = ockpt.detect(path)
        assert time.monotonic() - start < 10
        assert layout.kind is not ockpt.Kind.NOT_A_CHECKPOINT or layout.reason
    with pytest.raises(ockpt.OckptError):
        ockpt.load_checkpointables(key)


# ---------------------------------------------------------------------------------------------
# Step names a hostile root may hold (issue 32 item 6): the same step twice, huge, negative


def _root_with_steps(tmp_path: Path, names: list[str]) -> Path:
    import shutil

    from tests.support import FIXTURES

    root = tmp_path / "root"
    step = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint" / "0"
    for name in names:
        shutil.copytree(step, root / name)
    return root


def test_layout_007_two_directories_of_one_step_are_never_read(tmp_path):
    """`7` and `007` are both step 7: a read of step 7 (asked for, or the latest) is refused
    naming both, where a reader took one by name order; the validator reports the root."""
    root = _root_with_steps(tmp_path, ["6", "7", "007"])
    for kw in ({"step": 7}, {}):
        with pytest.raises(ockpt.NotACheckpointError) as e:
            ockpt.load_pytree(root, item="params", **kw)
        assert e.value.rule == "LAYOUT-007" and "'007', '7'" in e.value.message
    assert ockpt.load_pytree(root, item="params", step=6)  # the other steps read
    report = ockpt.validate(root)
    assert [f.rule for f in report.errors] == ["LAYOUT-007"]


def test_huge_and_negative_step_numbers(tmp_path):
    """A step of 40 digits is a step (the integer value orders it); `-5` and `1e9` are no
    step names (directories §5.1), so they are not steps of the root."""
    huge = "9" * 40
    root = _root_with_steps(tmp_path, ["3", huge, "-5", "1e9"])
    layout = ockpt.detect(root)
    assert [s.step for s in layout.steps] == [3, int(huge)]
    assert ockpt.load_pytree(root, item="params", step=int(huge))
    assert ockpt.validate(root).ok
