"""The reference reader into jax.Arrays: any mesh (1, 2, 4, 8 devices), any PartitionSpec,
shard-by-shard reads, custom pytree nodes."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import ockpt
from ockpt.engines import tensorstore as ts_engine
from ockpt.errors import TargetError
from tests.support.expected import (
    ITEMS,
    count_reads,
    expected_items,
    fixture_case,
    load_kwargs,
)

jax = pytest.importorskip("jax")
from jax.sharding import NamedSharding, SingleDeviceSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from tests.support.errors import assert_error  # noqa: E402
from tests.support.jax_targets import check_jax, jax_target, mesh  # noqa: E402

MESHES = [
    ((1,), ("a",)),
    ((2,), ("a",)),
    ((4,), ("a",)),
    ((2, 2), ("a", "b")),
    ((8,), ("a",)),
    ((4, 2), ("b", "a")),
    ((2, 4), ("a", "b")),
]


@pytest.mark.parametrize("mesh_shape,names", MESHES, ids=lambda v: str(v))
@pytest.mark.parametrize("case,rel", ITEMS)
def test_fixture_as_jax_arrays(case, rel, mesh_shape, names):
    """LOAD-032: any mesh and PartitionSpec, independent of the saved sharding."""
    expected = expected_items(case, target=True)[rel]
    m = mesh(mesh_shape, names)
    target = jax_target(expected, m, [sum(mesh_shape)])
    with jax.enable_x64(True):
        got = ockpt.load_pytree(case / "checkpoint", target, **load_kwargs(case, rel))
        check_jax(got, target, expected)


def test_shards_read_only_their_regions(monkeypatch):
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]["xy"]  # (8, 4), saved on P('x', 'y') of a (4, 2) mesh
    reads = count_reads(monkeypatch)
    m = mesh((8,), ("a",))
    target = {"xy": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(m, P("a")))}
    before = ts_engine.chunk_reads()
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True, backend="tensorstore")["xy"]
    boxes = sorted(box for name, box in reads if name == "xy")
    assert boxes == [((i, i + 1), (0, 4)) for i in range(8)]
    assert ts_engine.chunk_reads() - before == 16  # each (2, 2) chunk read by 2 shards
    assert np.array_equal(np.asarray(got), exp)
    # replicated: one read of the whole array serves every device
    reads.clear()
    target = {"xy": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(m, P()))}
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True, backend="tensorstore")["xy"]
    assert [box for _, box in reads] == [((0, 8), (0, 4))]
    assert len(got.addressable_shards) == 8


def test_shape_dtype_struct_without_sharding_and_jax_array_target():
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]
    got = ockpt.load_pytree(
        case / "checkpoint", {"none_y": jax.ShapeDtypeStruct((3, 4), np.float32)}, partial=True
    )["none_y"]
    assert isinstance(got.sharding, SingleDeviceSharding)
    assert np.array_equal(np.asarray(got), exp["none_y"])
    m = mesh((2, 2), ("p", "q"))
    like = jax.device_put(np.zeros((2, 8), np.float32), NamedSharding(m, P("p", "q")))
    got = ockpt.load_pytree(case / "checkpoint", {"yx": like}, partial=True)["yx"]
    assert got.sharding == like.sharding and np.array_equal(np.asarray(got), exp["yx"])


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Layer:
    w: object
    b: object


class Pair(NamedTuple):  # a different class with the saved NamedTuple's fields
    x: object
    y: object


def test_custom_nodes_keep_their_types():
    case = fixture_case("0.12.8", "nested")
    exp = expected_items(case)[""]
    m = mesh((2,), ("a",))

    def sds(a):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(m, P()))

    layer0 = exp["layers"][0]
    target = {
        "layers": [Layer(w=sds(layer0["w"]), b=layer0["b"]), ...],
        "point": Pair(x=np.zeros(3, np.int16), y=...),
    }
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True)
    assert isinstance(got["layers"][0], Layer) and isinstance(got["point"], Pair)
    assert np.array_equal(np.asarray(got["layers"][0].w), layer0["w"])
    assert np.array_equal(got["layers"][0].b, layer0["b"])
    assert got["layers"][1] is ... and got["point"].y is ...
    # a dataclass field that is not in the checkpoint is reported by name
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"deep": Layer(w=1, b=2)}, partial=True)
    assert set(info.value.missing) == {"deep.w", "deep.b"}


def test_64_bit_jax_targets_need_x64():
    case = fixture_case("0.12.8", "numpy_dtypes")
    exp = expected_items(case)[""]["int64"]  # (2, 2, 3) with int64 min and max
    with jax.enable_x64(False):
        wide = {"int64": jax.ShapeDtypeStruct((2, 2, 3), np.int64)}
        with pytest.raises(TargetError) as e:
            ockpt.load_pytree(case / "checkpoint", wide, partial=True)
        assert_error(e, rule="LOAD-024", leaf="int64")
        narrow = {"int64": jax.ShapeDtypeStruct((2, 2, 3), np.int32)}
        with pytest.raises(TargetError) as e:
            ockpt.load_pytree(case / "checkpoint", narrow, partial=True)
        assert_error(e, rule="LOAD-020", leaf="int64")
        with pytest.raises(TargetError) as e:
            ockpt.load_pytree(case / "checkpoint", narrow, partial=True, cast="checked")
        assert_error(e, rule="LOAD-021", leaf="int64")
        got = ockpt.load_pytree(case / "checkpoint", narrow, partial=True, cast="lossy")
        assert np.array_equal(np.asarray(got["int64"]), exp.astype(np.int32))
    with jax.enable_x64(True):
        got = ockpt.load_pytree(case / "checkpoint", wide, partial=True)
        assert np.asarray(got["int64"]).tobytes() == exp.tobytes()


def test_pad_and_truncate_per_shard():
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]["x"]  # int32 (8, 3)
    m = mesh((2,), ("a",))
    target = {"x": jax.ShapeDtypeStruct((10, 2), np.int32, sharding=NamedSharding(m, P("a")))}
    with pytest.raises(TargetError, match="LOAD-030"):
        ockpt.load_pytree(case / "checkpoint", target, partial=True)
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True, pad_or_truncate=True)["x"]
    want = np.zeros((10, 2), np.int32)
    want[:8] = exp[:, :2]
    assert np.array_equal(np.asarray(got), want)
    target = {"x": jax.ShapeDtypeStruct((4, 3), np.int32, sharding=NamedSharding(m, P("a")))}
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True, pad_or_truncate=True)["x"]
    assert np.array_equal(np.asarray(got), exp[:4])


def test_inline_msgpack_values_as_jax_arrays():
    case = fixture_case("0.5.15", "msgpack_aggregated")
    exp = expected_items(case)[""]
    key = next(k for k, v in exp.items() if isinstance(v, np.ndarray) and v.dtype == np.float32)
    m = mesh((1,), ("a",))
    sharding = NamedSharding(m, P())
    target = {key: jax.ShapeDtypeStruct(exp[key].shape, exp[key].dtype, sharding=sharding)}
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True)[key]
    assert isinstance(got, jax.Array) and np.array_equal(np.asarray(got), exp[key])


def test_matches_orbax_restore():
    """Cross-check: real Orbax restores the same values onto the same target sharding."""
    ocp = pytest.importorskip("orbax.checkpoint")
    case = fixture_case("0.12.8", "sharded")
    m = mesh((2, 2), ("a", "b"))
    exp = expected_items(case)[""]
    target = {
        k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(m, P()))
        for k, v in exp.items()
        if k not in ("xy_joint",)
    }
    ours = ockpt.load_pytree(case / "checkpoint", target, partial=True)
    with ocp.StandardCheckpointer() as ckptr:
        theirs = ckptr.restore(
            case / "checkpoint", {**target, "xy_joint": exp["xy_joint"].astype(np.int32)}
        )
    for k in target:
        assert np.asarray(ours[k]).tobytes() == np.asarray(theirs[k]).tobytes(), k
