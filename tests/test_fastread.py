"""The python backend's parallel region reads (`ockpt._fastread`): each chunk decoded once into
every region it overlaps. Results must equal the tensorstore backend's for every target kind:
numpy (whole arrays, casts, padding), jax.Arrays on the saved sharding and resharded, partial
loads, zarr v2 and v3, edge chunks, raw (uncompressed) chunks; errors keep their rules."""

from __future__ import annotations

import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import ockpt  # noqa: E402
from ockpt import _fastread  # noqa: E402
from ockpt.writer import save_pytree  # noqa: E402

P = jax.sharding.PartitionSpec


def _mesh(shape, names):
    n = int(np.prod(shape))
    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(shape), names)


def _tree():
    rng = np.random.default_rng(3)
    mesh = _mesh((4, 2), ("x", "y"))
    return {
        "w": jax.device_put(
            rng.standard_normal((64, 48)).astype(np.float32),
            jax.sharding.NamedSharding(mesh, P("x", "y")),
        ),
        "odd": rng.integers(0, 1000, (37, 11)).astype(np.int32),  # one chunk, odd shape
        "v": rng.standard_normal(130),
        "s": np.float32(2.5),
    }


@pytest.fixture(params=[(2, "zstd"), (3, "zstd"), (2, None), (2, "auto")])
def saved(request, tmp_path):
    zarr_version, compression = request.param
    path = tmp_path / "c"
    save_pytree(
        path,
        _tree(),
        layout="item",
        zarr_version=zarr_version,
        compression=compression,
        chunk_byte_size=512,  # many chunks, some at the edges
    )
    return path


def _equal(a, b):
    assert type(a) is type(b) or (isinstance(a, np.generic) and isinstance(b, np.generic))
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_numpy_and_casts_match_tensorstore(saved):
    for target in (
        None,
        {"w": np.zeros((64, 48), np.float64), "odd": np.zeros((37, 11), np.int64),
         "v": np.zeros(130), "s": np.float32(0)},
        {"w": np.zeros((70, 40), np.float32), "odd": ..., "v": ..., "s": ...},
    ):  # fmt: skip
        opts = {"pad_or_truncate": True} if target and target["odd"] is ... else {}
        py = ockpt.load_pytree(saved, target, backend="python", **opts)
        ts = ockpt.load_pytree(saved, target, backend="tensorstore", **opts)
        assert set(py) == set(ts)
        for k in py:
            if py[k] is not ...:
                _equal(py[k], ts[k])


@pytest.mark.parametrize(
    "mesh_shape, spec",
    [((4, 2), P("x", "y")), ((8,), P("x", None)), ((2,), P(None, "x")), ((1,), P())],
)
def test_jax_targets_any_sharding(saved, mesh_shape, spec):
    names = ("x", "y")[: len(mesh_shape)]
    sharding = jax.sharding.NamedSharding(_mesh(mesh_shape, names), spec)
    target = {"w": jax.ShapeDtypeStruct((64, 48), np.float32, sharding=sharding)}
    got = ockpt.load_pytree(saved, target, backend="python", partial=True)["w"]
    want = ockpt.load_pytree(saved, target, backend="tensorstore", partial=True)["w"]
    assert got.sharding == sharding
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want)[shard.index])


def test_outputs_are_aligned_and_writable(saved):
    out = ockpt.load_pytree(saved, backend="python")
    assert out["w"].ctypes.data % 64 == 0 and out["w"].flags.writeable
    out["w"][0, 0] = 1.0


def test_missing_chunk_names_its_rule(tmp_path):
    path = tmp_path / "c"
    save_pytree(path, {"a": np.arange(64, dtype=np.float32)}, layout="item", use_ocdbt=False,
                chunk_byte_size=64)  # fmt: skip
    os.remove(path / "a" / "3")
    with pytest.raises(ockpt.MissingDataError, match="LOAD-041"):
        ockpt.load_pytree(path, backend="python")


def test_one_worker_per_core():
    assert _fastread.workers() >= 1
