"""ockpt.CheckpointManager: its directories are a real Orbax CheckpointManager's, both ways."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")
jax = pytest.importorskip("jax")

import orbax.checkpoint as ocp  # noqa: E402

import ockpt  # noqa: E402
from ockpt.manager import CheckpointManager  # noqa: E402
from ockpt.names import TMP_MARKER  # noqa: E402
from ockpt.store import commit  # noqa: E402
from ockpt.writer import JsonItem  # noqa: E402
from tests.support.errors import assert_error  # noqa: E402


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))


def _state(step: int) -> dict:
    sharding = jax.sharding.NamedSharding(_mesh(), jax.sharding.PartitionSpec("x"))
    return {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3) + step,
        "b": jax.device_put(np.arange(8, dtype=np.float32) * step, sharding),
        "step": step,
    }


def _same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        if isinstance(a[k], (np.ndarray, jax.Array)):
            x, y = np.asarray(a[k]), np.asarray(b[k])
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), k
        else:
            assert a[k] == b[k], k


def test_ockpt_steps_read_by_orbax(tmp_path):
    root = tmp_path / "root"
    mngr = CheckpointManager(root, max_to_keep=2, metadata={"run": "x"})
    for step in range(4):
        assert mngr.save(step, _state(step))
    assert mngr.all_steps() == [2, 3] and mngr.latest_step() == 3
    assert sorted(os.listdir(root)) == ["2", "3", "metadata"]
    om = ocp.CheckpointManager(root)
    assert list(om.all_steps()) == [2, 3] and om.latest_step() == 3
    assert om.metadata().custom_metadata == {"run": "x"}
    _same(om.restore(3, args=ocp.args.StandardRestore()), _state(3))
    _same(om.restore(2), _state(2))  # without args: handler chosen from item_handlers
    abstract = jax.tree_util.tree_map(
        lambda x: (
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if isinstance(x, jax.Array)
            else x
        ),
        _state(3),
    )
    got = om.restore(3, args=ocp.args.StandardRestore(abstract))
    assert got["b"].sharding.is_equivalent_to(_state(3)["b"].sharding, 1)
    om.close()
    _same(mngr.restore(3, _state(0)), _state(3))


def test_orbax_steps_read_by_ockpt(tmp_path):
    root = tmp_path / "root"
    om = ocp.CheckpointManager(root, options=ocp.CheckpointManagerOptions(max_to_keep=3))
    for step in (0, 5, 10):
        om.save(step, args=ocp.args.StandardSave(_state(step)))
    om.wait_until_finished()
    om.close()
    mngr = CheckpointManager(root)
    assert mngr.all_steps() == [0, 5, 10] and mngr.latest_step() == 10
    _same(mngr.restore(5, _state(0)), _state(5))
    _same(mngr.restore(target=_state(0)), _state(10))
    mngr.delete(0)
    assert mngr.all_steps() == [5, 10]
    mngr.save(15, _state(15))  # ockpt adds a step to an Orbax root; Orbax sees all of them
    om = ocp.CheckpointManager(root)
    assert list(om.all_steps()) == [5, 10, 15]
    _same(om.restore(15, args=ocp.args.StandardRestore()), _state(15))
    om.close()


def test_string_leaves_in_a_step(tmp_path):
    """Orbax's StandardSave refuses strings, but restores them from a step ockpt wrote."""
    root = tmp_path / "root"
    CheckpointManager(root).save(0, {"s": "text", "n": np.ones(2)})
    om = ocp.CheckpointManager(root)
    got = om.restore(0, args=ocp.args.StandardRestore())
    assert got["s"] == "text"
    om.close()


def test_named_items_and_json(tmp_path):
    root = tmp_path / "root"
    mngr = CheckpointManager(root)
    mngr.save(1, items={"params": _state(1), "meta": JsonItem({"loss": 0.5})})
    step = root / "1"
    assert sorted(os.listdir(step)) == [
        "_CHECKPOINT_METADATA",
        "commit_success.txt",
        "meta",
        "params",
    ]
    assert (step / "meta" / "metadata").is_file()
    assert (step / "params" / "commit_success.txt").is_file()
    om = ocp.CheckpointManager(root, item_names=("params", "meta"))
    got = om.restore(
        1, args=ocp.args.Composite(params=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
    )
    _same(got.params, _state(1))
    assert got.meta == {"loss": 0.5}
    om.close()
    assert mngr.restore(1, item="meta") == {"loss": 0.5}
    _same(mngr.restore(1, _state(0), item="params"), _state(1))
    assert ockpt.detect(step).kind == ockpt.Kind.STEP


def test_interval_force_and_conflicts(tmp_path):
    mngr = CheckpointManager(tmp_path / "root", save_interval_steps=5)
    assert not mngr.save(3, _state(3))
    assert mngr.save(5, _state(5))
    assert mngr.save(7, _state(7), force=True)
    assert mngr.all_steps() == [5, 7]
    with pytest.raises(ockpt.WriteConflictError) as info:
        mngr.save(5, _state(5))
    assert_error(info, rule="DIR-002", file=str(tmp_path / "root" / "5"))
    with pytest.raises(ValueError):
        mngr.save(-1, _state(0), force=True)
    with pytest.raises(ValueError):
        CheckpointManager(tmp_path / "x", max_to_keep=0)


def test_prefix_and_padding_match_orbax(tmp_path):
    root = tmp_path / "root"
    mngr = CheckpointManager(root, step_prefix="run", step_format_fixed_length=4)
    mngr.save(7, _state(7))
    assert (root / "run_0007").is_dir()
    om = ocp.CheckpointManager(
        root,
        options=ocp.CheckpointManagerOptions(step_prefix="run", step_format_fixed_length=4),
    )
    assert list(om.all_steps()) == [7]
    _same(om.restore(7, args=ocp.args.StandardRestore()), _state(7))
    om.close()


def test_temporary_and_uncommitted_steps_are_not_steps(tmp_path):
    root = tmp_path / "root"
    mngr = CheckpointManager(root)
    mngr.save(1, _state(1))
    (root / ("2" + TMP_MARKER)).mkdir()
    (root / "3").mkdir()  # no _CHECKPOINT_METADATA, no commit_success.txt
    assert mngr.all_steps() == [1]


def test_delete_renames_first(tmp_path, monkeypatch):
    """DIR-005: a step is renamed to a temporary name before its files are removed."""
    root = tmp_path / "root"
    mngr = CheckpointManager(root, max_to_keep=1)
    mngr.save(1, _state(1))
    removed = []

    real = commit.remove_path

    def spy(path):
        removed.append(os.path.basename(path))
        real(path)

    monkeypatch.setattr(commit, "remove_path", spy)
    mngr.save(2, _state(2))
    assert removed and all(TMP_MARKER in name for name in removed)
    assert mngr.all_steps() == [2]
    with pytest.raises(ockpt.NotACheckpointError):
        mngr.delete(1)


def test_step_removed_while_listing_or_restoring(tmp_path, monkeypatch):
    """LOAD-055: another process's retention delete between listing the root and reading a step: the
    removed step is simply not listed, and restoring it is a NotACheckpointError, never an
    OSError (found by the concurrent-reader crash test in CI)."""
    root = tmp_path / "root"
    mngr = CheckpointManager(root)
    for step in (1, 2):
        mngr.save(step, _state(step))
    import ockpt.store.files as kv_files

    real_scandir = os.scandir

    def scandir_after_delete(path="."):
        if isinstance(path, (str, os.PathLike)) and os.path.basename(path) == "1":
            commit.remove_path(str(root / "1"))
        return real_scandir(path)

    monkeypatch.setattr(kv_files.os, "scandir", scandir_after_delete)
    assert mngr.all_steps() == [2]
    monkeypatch.setattr(kv_files.os, "scandir", real_scandir)
    mngr.save(3, _state(3))
    step = mngr._step(3)
    commit.remove_path(step.display)
    monkeypatch.setattr(mngr, "_step", lambda number: step)  # listed just before the delete
    with pytest.raises(ockpt.NotACheckpointError) as e:
        mngr.restore(3)
    assert_error(e, rule="LOAD-055", file=step.display, message="step 3 was removed meanwhile")


def test_json_item_with_nan_written_by_orbax(tmp_path):
    """A JSON item is user JSON as Orbax writes it with Python's json: NaN is allowed there
    (directories §6), unlike in the format's own documents (JSON-001)."""
    root = tmp_path / "root"
    om = ocp.CheckpointManager(root, item_names=("m",))
    om.save(0, args=ocp.args.Composite(m=ocp.args.JsonSave({"loss": float("nan"), "x": 1})))
    om.wait_until_finished()
    om.close()
    assert (root / "0" / "m" / "metadata").read_text() == '{"loss": NaN, "x": 1}'
    got = CheckpointManager(root).restore(0, item="m")
    assert np.isnan(got["loss"]) and got["x"] == 1
    (root / "0" / "m" / "metadata").write_text('{"loss": ')
    with pytest.raises(ockpt.FormatError) as info:
        CheckpointManager(root).restore(0, item="m")
    assert_error(info, rule="JSON-001", file=str(root / "0" / "m" / "metadata"))
