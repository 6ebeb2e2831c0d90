"""WRITE-010: how a written slice is subdivided into chunks under `chunk_byte_size`, as Orbax
0.12.8 does it, proven on the bytes of `fixtures/orbax-0.12.8/chunk_subdivision` (zarr v2) and
`chunk_subdivision_zarr3` (zarr v3: the outer chunk is subdivided as the inner one), and
ockpt's writer choosing the same chunks (issue 18).

The rule: lower one dimension at a time to the next smaller divisor of the slice's size in
that dimension, the largest dimension among those in which the slice is smaller than the
array while any of them is above 1, then the largest of all, the lowest index on ties.
"""

from __future__ import annotations

import json

import _record  # noqa: E402  (fixtures/, on sys.path through conftest)
import numpy as np
import pytest

import ockpt  # noqa: E402
from ockpt import _zarr_write  # noqa: E402
from ockpt.ocdbt import Database  # noqa: E402
from tests.support import FIXTURES

CASES = {
    "chunk_subdivision": FIXTURES / "orbax-0.12.8" / "chunk_subdivision",
    "chunk_subdivision_zarr3": FIXTURES / "orbax-0.12.8" / "chunk_subdivision_zarr3",
}
#: Leaves Orbax 0.12.8 splits across replicas (its slice, `write_shape`, is a replica's part of
#: the shard); ockpt writes each shard whole (allowed: writing §3.1), so its slice differs.
REPLICA_SPLIT = {"partly_replicated", "replicated", "no_limit"}


def _zarr(db: Database, name: str) -> dict:
    for key in (f"{name}/.zarray", f"{name}/zarr.json"):
        raw = db.get(key.encode())
        if raw is not None:
            return json.loads(raw)
    raise KeyError(name)


def _grid(meta: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(outer chunk, chunk) of zarr metadata; zarr v2 has one grid."""
    if meta["zarr_format"] == 2:
        return tuple(meta["chunks"]), tuple(meta["chunks"])
    (codec,) = meta["codecs"]
    assert codec["name"] == "sharding_indexed"
    outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    return outer, tuple(codec["configuration"]["chunk_shape"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_orbax_chunks_follow_the_rule(case):
    """Every leaf of the fixture: Orbax's chunk is chunk_shape_for(its slice, limit)."""
    case_dir = CASES[case]
    record = _record.load_expected(case_dir)
    limits = record["options"]["chunk_byte_size"]
    saved = ockpt.pytree_metadata(case_dir / "checkpoint")
    db = Database(case_dir / "checkpoint")
    seen = {}
    for name, limit in limits.items():
        leaf = saved[name]
        slice_shape = leaf.write_shape or leaf.shape  # numpy leaves: the whole array
        outer, chunk = _grid(_zarr(db, name))
        want = _zarr_write.chunk_shape_for(
            slice_shape, leaf.storage_dtype.itemsize, limit, array_shape=leaf.shape
        )
        assert chunk == want, (name, slice_shape, limit)
        assert outer == chunk, name  # zarr v3: one inner chunk per outer chunk, also with a limit
        seen[name] = chunk
    # the examples the spec gives (writing §3.1)
    assert seen["np_wide"] == (32, 32)  # the largest dimension first, not dimension 0
    assert seen["np_divisor"] == (4,)  # 12 -> 6 -> 4: divisors, not prime factors (3)
    assert seen["np_ties"] == (2, 4)  # (8, 12) -> (8, 6) -> (4, 6) -> (4, 4) -> (2, 4)
    assert seen["sharded_cols"] == (16, 1)  # the sharded dimension first
    assert seen["sharded_then_rest"] == (1, 16)  # sharded dimension at 1: then the others
    assert seen["replicated"] == (4, 256)  # a replica's slice (4, 256) of (32, 256): no division
    assert saved["replicated"].write_shape == (4, 256)


def test_chunk_shape_rule():
    """More shapes, dtypes and limits seen with Orbax 0.12.8 (chunk_byte_size per leaf), given
    as (array shape, slice, item size, limit, Orbax's chunk)."""
    seen = [
        ((64, 512), (64, 512), 4, 16384, (64, 64)),
        ((64, 512), (8, 512), 4, 16384, (8, 512)),  # replicated on 8 devices: a replica's slice
        ((6, 10), (6, 10), 4, 40, (3, 2)),
        ((9, 4), (9, 4), 4, 16, (1, 2)),
        ((5, 8, 3), (5, 8, 3), 4, 50, (1, 4, 3)),
        ((30,), (30,), 1, 4, (3,)),
        ((100,), (100,), 4, 30, (5,)),
        ((6, 6), (6, 6), 4, 24, (2, 3)),
        ((16, 16), (16, 16), 4, 4, (1, 1)),
        ((32, 256), (4, 256), 4, 1024, (1, 256)),
        ((8, 48), (4, 12), 4, 64, (4, 4)),  # 12 -> 6 -> 4
        ((12, 20), (3, 10), 4, 12, (1, 2)),
        ((64, 6, 16), (64, 6, 2), 4, 16, (2, 2, 1)),
        ((8, 12, 10), (2, 12, 5), 4, 8, (1, 2, 1)),
        ((24, 30), (3, 30), 4, 20, (1, 5)),
        ((40, 18), (5, 18), 2, 12, (1, 6)),
        ((1, 1, 64), (1, 1, 64), 4, 16, (1, 1, 4)),
        ((64,), (64,), 8, 24, (2,)),
        # Orbax 0.5.15 (zarr v3; no split across replicas): the shard is the slice
        ((32, 64), (32, 32), 4, 256, (32, 2)),
        ((8, 48), (8, 12), 4, 64, (8, 2)),
    ]
    for shape, slice_shape, itemsize, limit, want in seen:
        got = _zarr_write.chunk_shape_for(slice_shape, itemsize, limit, array_shape=shape)
        assert got == want, (shape, slice_shape, limit)
    assert _zarr_write.chunk_shape_for((), 8, 8) == ()
    assert _zarr_write.chunk_shape_for((8, 4), 4, 1 << 20) == (8, 4)


def test_limit_below_one_element_refused():
    """Orbax 0.12.8 refuses it too (`target_byte_size=1 must be >= 8`)."""
    with pytest.raises(ValueError, match="WRITE-010"):
        _zarr_write.chunk_shape_for((7,), 8, 1)
    with pytest.raises(ValueError, match="WRITE-010"):
        _zarr_write.chunk_shape_for((), 4, 2)


def test_zarr3_shard_is_the_chunk():
    """WRITE-010: with zarr v3 the outer chunk is the chunk, with or without a limit."""
    assert _zarr_write.shard_shape_for((32, 256), (32, 32), 4096) == (32, 32)
    assert _zarr_write.shard_shape_for((8, 4), (8, 4), None) == (8, 4)


def test_ockpt_010_chunk_byte_size_was_written_by_the_old_rule():
    """`fixtures/ockpt-0.1.0/chunk_byte_size` (frozen) was written before issue 18 by the old
    rule (the largest dimension by its smallest prime factor; with zarr v3 the outer chunk was
    the slice). It stays valid zarr that every reader restores; today's writer chooses Orbax's
    chunks for the same slices."""
    case = FIXTURES / "ockpt-0.1.0" / "chunk_byte_size"
    ckpt = case / "checkpoint" / "state"
    saved = ockpt.pytree_metadata(case / "checkpoint")
    db = Database(ckpt)
    changed = {}
    for name, leaf in saved.items():
        slice_shape = leaf.write_shape or leaf.shape
        outer, chunk = _grid(_zarr(db, name))
        assert outer == slice_shape, name  # the old outer chunk: the whole slice
        now = _zarr_write.chunk_shape_for(
            slice_shape, leaf.storage_dtype.itemsize, 64, array_shape=leaf.shape
        )
        if now != chunk:
            changed[name] = (chunk, now)
    # (16, 6) int32 on P('x'): slice (4, 6), 16 elements a chunk; the old rule lowered the
    # largest dimension (4, 3), Orbax lowers the sharded one (2, 6)
    assert changed == {"sharded_x": ((4, 3), (2, 6))}


@pytest.mark.parametrize("zarr_version", [2, 3])
def test_ockpt_writes_the_chunks_orbax_writes(tmp_path, zarr_version):
    """ockpt's writer, given the fixture's leaves and limits, chooses Orbax's chunk grid for
    every leaf whose slice is the same in both (all but those Orbax splits across replicas)."""
    pytest.importorskip("jax")
    pytest.importorskip("tensorstore")
    import _harness

    case_dir = CASES["chunk_subdivision" if zarr_version == 2 else "chunk_subdivision_zarr3"]
    record = _record.load_expected(case_dir)
    node = record["items"][""]
    orbax_db = Database(case_dir / "checkpoint")
    by_limit: dict[int | None, dict] = {}
    for name, limit in record["options"]["chunk_byte_size"].items():
        if name not in REPLICA_SPLIT:
            leaf = _harness.target_from_node(node["items"][name], case_dir)
            by_limit.setdefault(limit, {})[name] = leaf
    assert sum(len(t) for t in by_limit.values()) == 13
    for limit, tree in by_limit.items():
        path = tmp_path / f"limit-{limit}"
        ockpt.save_pytree(
            path, tree, layout="item", zarr_version=zarr_version, chunk_byte_size=limit
        )
        ours = Database(path)
        for name in tree:
            assert _grid(_zarr(ours, name)) == _grid(_zarr(orbax_db, name)), name
        got = ockpt.load_pytree(path)
        for name, value in tree.items():
            assert np.asarray(got[name]).tobytes() == np.asarray(value).tobytes(), name
