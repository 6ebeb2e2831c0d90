"""A real training run read by ockpt (issue 16): flax linen + nnx + optax on a (4, 2) mesh, saved
by Orbax's CheckpointManager as Composite(state, nnx, metadata=JsonSave) and by v1 save_pytree.

Every leaf of every kept step (typed keys and the JSON item included) must equal Orbax's own
restore; `eval_shape` targets on other meshes must load; ockpt's re-save of the loaded state
must restore in Orbax exactly into the original train state, typed keys included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
import pytest

import ockpt  # noqa: E402
from tests.support import training_run as tr  # noqa: E402

pytestmark = pytest.mark.slow  # the slow matrix: a real training run with flax and optax


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("training")
    saved = tr.run(root)
    saved["root"] = root / "run"
    return saved


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def assert_same_leaf(got: Any, want: Any, where: str) -> None:
    """Bit-exact equality; a typed key must come back as a key of the same implementation."""
    if _is_key(want):
        assert _is_key(got), f"{where}: {type(got).__name__} {getattr(got, 'dtype', '')}"
        assert str(jax.random.key_impl(got)) == str(jax.random.key_impl(want)), where
        got, want = jax.random.key_data(got), jax.random.key_data(want)
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (where, g.dtype, w.dtype, g.shape, w.shape)
    assert g.tobytes() == w.tobytes(), where


def assert_same_tree(got: Any, want: Any) -> int:
    """Same key paths and leaves; returns the number of leaves compared."""
    g = jax.tree_util.tree_flatten_with_path(got)[0]
    w = jax.tree_util.tree_flatten_with_path(want)[0]
    gk = [jax.tree_util.keystr(p) for p, _ in g]
    wk = [jax.tree_util.keystr(p) for p, _ in w]
    assert gk == wk
    for (path, a), (_, b) in zip(g, w, strict=True):
        assert_same_leaf(a, b, jax.tree_util.keystr(path))
    return len(g)


def test_every_leaf_of_every_kept_step_equals_orbax_restore(run: dict[str, Any]) -> None:
    root = run["root"]
    steps = ockpt.CheckpointManager(root).all_steps()
    assert steps == list(range(tr.STEPS - tr.KEEP + 1, tr.STEPS + 1))
    keys = 0
    with ocp.CheckpointManager(root) as mngr:
        for step in steps:
            want = mngr.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(),
                    nnx=ocp.args.StandardRestore(),
                    metadata=ocp.args.JsonRestore(),
                ),
            )
            items = ockpt.load_checkpointables(root, step=step)
            assert set(items) == {"state", "nnx", "metadata"}
            for name in ("state", "nnx"):
                got = items[name]
                assert assert_same_tree(got, dict(want[name])) > 0
                keys += sum(_is_key(x) for x in jax.tree_util.tree_leaves(got))
                # load_pytree of the one item gives the same tree
                assert_same_tree(ockpt.load_pytree(root, step=step, item=name), got)
            assert items["metadata"] == want["metadata"] == run["json"][step]
    assert keys == 2 * (1 + 3)  # the train state's rng and the nnx state's three stream keys


def test_the_saved_state_is_what_was_trained(run: dict[str, Any]) -> None:
    m = run["mesh"]
    got = ockpt.load_pytree(run["root"], tr.abstract_state(m), step=tr.STEPS, item="state")
    assert isinstance(got, tr.TrainState)
    assert assert_same_tree(got, run["states"][tr.STEPS]) == 95
    assert _is_key(got.rng) and not _is_key(got.raw_rng)


@pytest.mark.parametrize(("shape", "names"), [((8,), ("x",)), ((2, 4), ("data", "model"))])
def test_eval_shape_targets_load_on_other_meshes(
    run: dict[str, Any], shape: tuple[int, ...], names: tuple[str, ...]
) -> None:
    m = tr.mesh(shape, names)
    target = tr.abstract_state(m)
    got = ockpt.load_pytree(run["root"], target, step=tr.STEPS, item="state")
    assert_same_tree(got, run["states"][tr.STEPS])
    for leaf, want in zip(jax.tree.leaves(got), jax.tree.leaves(target), strict=True):
        assert leaf.sharding.is_equivalent_to(want.sharding, len(want.shape))
    # the nnx state (typed keys inside nnx Variables) onto the new mesh
    nnx_target = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=tr.sharding_for(m, s)),
        jax.eval_shape(tr.nnx_state),
    )
    nnx_got = ockpt.load_pytree(run["root"], nnx_target, step=tr.STEPS, item="nnx")
    assert type(nnx_got) is type(run["nnx"])
    assert_same_tree(nnx_got, run["nnx"])


def test_ockpt_resave_restores_in_orbax_into_the_train_state(
    run: dict[str, Any], tmp_path: Path
) -> None:
    moved = tr.mesh((2, 4), ("data", "model"))
    state = ockpt.load_pytree(run["root"], tr.abstract_state(moved), step=tr.STEPS, item="state")
    ockpt.save_pytree(tmp_path / "resaved", state)
    report = ockpt.validate(tmp_path / "resaved", deep=True)
    assert report.ok, report.findings
    target = tr.abstract_state(run["mesh"])
    restored = ocp.StandardCheckpointer().restore(tmp_path / "resaved" / "state", target)
    assert isinstance(restored, tr.TrainState)
    assert assert_same_tree(restored, run["states"][tr.STEPS]) == 95
    assert _is_key(restored.rng)
    # and the next training step runs from it
    tokens = jax.random.randint(jax.random.key(9), (tr.BATCH, tr.SEQ), 0, tr.VOCAB)
    restored = restored.replace(tx=run["states"][tr.STEPS].tx)
    assert int(tr.train_step(restored, tokens).step) == tr.STEPS + 1


def test_orbax_v1_save_pytree_of_the_state(run: dict[str, Any]) -> None:
    m = tr.mesh((8,), ("x",))
    got = ockpt.load_pytree(run["v1"], tr.abstract_state(m))
    assert_same_tree(got, run["states"][tr.STEPS])
    meta = ockpt.pytree_metadata(run["v1"])
    assert meta["rng"].random_key_impl == "threefry2x32" and meta["rng"].key_shape == ()
    assert meta["raw_rng"].random_key_impl is None and meta["raw_rng"].shape == (2,)
