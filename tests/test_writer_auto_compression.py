"""compression="auto" (WRITE-015): arrays that zstd barely shrinks (stored raw they take at most
10% more disk, as float weights do) are stored without a compressor, the others with zstd; real
Orbax 0.12.8 and ockpt (both backends) restore the result exactly. No timing is asserted here:
speed is measured by benchmarks/run.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")
jax = pytest.importorskip("jax")

import orbax.checkpoint as ocp  # noqa: E402

import ockpt  # noqa: E402
from ockpt.engines import python as python_engine  # noqa: E402
from ockpt.writer import save_pytree  # noqa: E402

P = jax.sharding.PartitionSpec


def _tree():
    rng = np.random.default_rng(7)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    weights = rng.standard_normal((64, 256)).astype(np.float32)
    return {
        "weights": rng.standard_normal((128, 96)).astype(np.float32),  # incompressible
        "zeros": np.zeros((128, 96), np.float32),  # compressible
        "ramp": np.arange(4096, dtype=np.int64),
        "sharded": jax.device_put(weights, jax.sharding.NamedSharding(mesh, P("x", "y"))),
        "sharded_zeros": jax.device_put(
            np.zeros((64, 256), np.float32), jax.sharding.NamedSharding(mesh, P("x", "y"))
        ),
        "step": 3,
        "name": "run",
    }


def _restore_args(x):
    if isinstance(x, jax.Array):
        return ocp.ArrayRestoreArgs(sharding=x.sharding)
    if isinstance(x, np.ndarray):
        return ocp.RestoreArgs(restore_type=np.ndarray)
    return ocp.RestoreArgs()


def _assert_same(expected, got):
    assert set(expected) == set(got)
    for k, v in expected.items():
        if isinstance(v, str):
            assert got[k] == v
            continue
        e, g = np.asarray(v), np.asarray(got[k])
        assert g.dtype == e.dtype and g.shape == e.shape, k
        assert np.array_equal(g, e), k


def _zarray(item, name):
    kv = python_engine.open_item_store(item)
    try:
        return json.loads(kv.get(f"{name}/.zarray"))
    finally:
        kv.close()


def test_auto_leaves_float_weights_uncompressed_and_orbax_restores(tmp_path):
    tree = _tree()
    path = tmp_path / "ckpt"
    save_pytree(path, tree, layout="item", zarr_version=2, compression="auto")
    assert _zarray(path, "weights")["compressor"] is None
    assert _zarray(path, "sharded")["compressor"] is None
    assert _zarray(path, "zeros")["compressor"] == {"id": "zstd", "level": 1}
    assert _zarray(path, "sharded_zeros")["compressor"] == {"id": "zstd", "level": 1}
    assert _zarray(path, "ramp")["compressor"] == {"id": "zstd", "level": 1}
    got = ocp.PyTreeCheckpointer().restore(
        path,
        args=ocp.args.PyTreeRestore(
            item=tree, restore_args=jax.tree_util.tree_map(_restore_args, tree)
        ),
    )
    _assert_same(tree, got)
    assert got["sharded"].sharding == tree["sharded"].sharding
    for backend in ("tensorstore", "python"):
        _assert_same(tree, ockpt.load_pytree(path, tree, backend=backend))
    assert ockpt.validate(path).ok


def test_auto_with_zarr3_and_a_level(tmp_path):
    tree = _tree()
    save_pytree(tmp_path / "c", tree, compression="auto", compression_level=5)  # v1, zarr v3
    item = tmp_path / "c" / "state"
    kv = python_engine.open_item_store(item)
    try:
        codecs = {
            n: json.loads(kv.get(f"{n}/zarr.json"))["codecs"][0]["configuration"]["codecs"]
            for n in ("weights", "zeros")
        }
    finally:
        kv.close()
    assert [c["name"] for c in codecs["weights"]] == ["bytes"]
    assert codecs["zeros"][-1]["name"] == "zstd"
    assert codecs["zeros"][-1]["configuration"]["level"] == 5
    abstract = jax.tree_util.tree_map(
        lambda x: (
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if isinstance(x, jax.Array)
            else x
        ),
        tree,
    )
    _assert_same(tree, ocp.v1.load_pytree(tmp_path / "c", abstract))
    _assert_same(tree, ockpt.load_pytree(tmp_path / "c", tree, backend="python"))


def test_auto_needs_no_level_and_bad_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'auto'"):
        save_pytree(tmp_path / "x", {"a": np.ones(3)}, compression="lz4")
    save_pytree(tmp_path / "y", {"a": np.ones(3)}, compression="auto", layout="item")
    assert ockpt.load_pytree(tmp_path / "y")["a"].tolist() == [1.0, 1.0, 1.0]
