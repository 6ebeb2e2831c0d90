"""One rank of tests/torch/test_dcp_reader.py, started by ``torch.distributed.run``.

argv: OUT_DIR CHECKPOINT [CHECKPOINT ...]. Each rank joins a gloo process group, builds a state
dict of DTensors (and plain tensors) for the first checkpoint, counts the bytes it reads from
the checkpoint's data files (``os.pread``/``os.preadv`` of files in a ``d/`` directory, where
OCDBT keeps chunks and tree nodes) while ``dcp.load`` fills it through `OrbaxReader`, then
compares its local shards with the matching slice of `ockpt.load_pytree`. The other
checkpoints are loaded the same way (all leaves, Shard(0) where they divide, strings kept),
uncounted. It writes ``rank<N>.json``: bytes read, shards checked, differences found.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import ockpt
from ockpt.torch import OrbaxReader, load_state_dict

_COUNTED = {"bytes": 0}
_PREAD, _PREADV = os.pread, os.preadv


def _is_data_file(fd: int) -> bool:
    return f"{os.sep}d{os.sep}" in os.readlink(f"/proc/self/fd/{fd}")


def _pread(fd: int, n: int, at: int) -> bytes:
    data = _PREAD(fd, n, at)
    if _is_data_file(fd):
        _COUNTED["bytes"] += len(data)
    return data


def _preadv(fd: int, buffers: list, at: int) -> int:
    n = _PREADV(fd, buffers, at)
    if _is_data_file(fd):
        _COUNTED["bytes"] += n
    return n


def _placements(world: int) -> tuple[tuple[int, ...], dict[str, tuple]]:
    """The mesh shape and each leaf's placements: every kernel (64, 64) is saved in (16, 32)
    chunks, every embedding (32, 64) in (32, 32) chunks, every bias (32,) in one chunk."""
    if world == 4:
        s01, s10 = (Shard(0), Shard(1)), (Shard(1), Shard(0))
        return (2, 2), {
            "layer_0.kernel": s01,
            "layer_1.kernel": s10,
            "layer_2.kernel": (Shard(0), Replicate()),
            "layer_0.embedding": s10,
            "layer_1.embedding": (Shard(1), Replicate()),
            "layer_0.bias": (Shard(0), Replicate()),
            "layer_1.bias": (Replicate(), Replicate()),
        }
    return (world,), {
        "layer_0.kernel": (Shard(0),),
        "layer_1.kernel": (Shard(1),),
        "layer_2.kernel": (Shard(0),),
        "layer_0.embedding": (Shard(1),),
        "layer_1.embedding": (Shard(1),),
        "layer_0.bias": (Shard(0),),
        "layer_1.bias": (Replicate(),),
    }


def _region(shape, mesh, placements) -> tuple[slice, ...]:  # type: ignore[no-untyped-def]
    """The rank's region of a global `shape` as DTensor lays out even shards (torch.chunk:
    pieces of ceil(n / parts) elements)."""
    coordinate = mesh.get_coordinate()
    bounds = [[0, n] for n in shape]
    for mesh_dim, placement in enumerate(placements):
        if isinstance(placement, Shard):
            lo, hi = bounds[placement.dim]
            step = -(-(hi - lo) // mesh.size(mesh_dim))
            start = min(hi, lo + step * coordinate[mesh_dim])
            bounds[placement.dim] = [start, min(hi, start + step)]
    return tuple(slice(lo, hi) for lo, hi in bounds)


def _expected_local(full: torch.Tensor, mesh, placements) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The rank's part of `full`."""
    return full[_region(full.shape, mesh, placements)]


def _chunks_touched(region: tuple[slice, ...], chunk: tuple[int, ...]) -> int:
    """How many chunks of shape `chunk` the region overlaps."""
    count = 1
    for s, c in zip(region, chunk, strict=True):
        count *= (s.stop + c - 1) // c - s.start // c if s.stop > s.start else 0
    return count


def _dtensor(shape, dtype, mesh, placements) -> DTensor:  # type: ignore[no-untyped-def]
    """An uninitialised DTensor of global `shape`, built locally (no collective: gloo lacks
    some dtypes)."""
    full = torch.empty(shape, dtype=dtype, device="meta")
    local = _expected_local(full, mesh, placements)
    return DTensor.from_local(
        torch.empty(local.shape, dtype=dtype),
        mesh,
        list(placements),
        run_check=False,
        shape=torch.Size(shape),
        stride=full.stride(),
    )


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bytes of `t` (so NaN payloads and -0.0 compare)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _nest(flat: dict[str, object]) -> dict[str, object]:
    """``{"a.b": x}`` as ``{"a": {"b": x}}``: DCP's planner flattens it back to ``"a.b"``."""
    tree: dict[str, object] = {}
    for name, value in flat.items():
        *parents, last = name.split(".")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})  # type: ignore[assignment]
        node[last] = value
    return tree


def _counted_load(path: str, mesh, world: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Load the sharded state dict of `path` through dcp.load, counting data-file bytes."""
    _, layout = _placements(world)
    meta = ockpt.open(path).metadata
    flat: dict[str, object] = {}
    for name, placements in layout.items():
        leaf = meta[name.split(".")[0]][name.split(".")[1]]
        flat[name] = _dtensor(leaf.shape, getattr(torch, leaf.dtype.name), mesh, placements)
    flat["layer_3.bias"] = torch.empty(32, dtype=torch.float32)  # a plain tensor on every rank
    state = _nest(flat)
    loaded = _counting(lambda: dcp.load(state, storage_reader=OrbaxReader(path)))
    direct, whole, share = _direct_reads(path, mesh, layout)
    want = ockpt.load_pytree(path)
    differences, shards = [], {}
    for name, placements in layout.items():
        group, leaf = name.split(".")
        got = state[group][leaf]  # type: ignore[index]
        assert isinstance(got, DTensor)
        expected = _expected_local(torch.from_numpy(want[group][leaf]), mesh, placements)
        shards[name] = list(got.to_local().shape)
        if not torch.equal(got.to_local(), expected):
            differences.append(name)
    if not torch.equal(state["layer_3"]["bias"], torch.from_numpy(want["layer_3"]["bias"])):  # type: ignore[index]
        differences.append("layer_3.bias")
    return {
        "bytes": loaded,
        "direct_bytes": direct,
        "whole_bytes": whole,
        "share_bytes": share,
        "shards": shards,
        "differences": differences,
    }


def _counting(read) -> int:  # type: ignore[no-untyped-def]
    """The data-file bytes `read()` reads."""
    os.pread, os.preadv = _pread, _preadv
    before = _COUNTED["bytes"]
    try:
        read()
    finally:
        os.pread, os.preadv = _PREAD, _PREADV
    return _COUNTED["bytes"] - before


def _direct_reads(path: str, mesh, layout) -> tuple[int, int, float]:  # type: ignore[no-untyped-def]
    """Bytes `ockpt.open` reads for this rank's regions (no DCP), for the whole of the same
    leaves, and this rank's chunk share of the whole: per leaf, its whole bytes times the
    fraction of its chunks that the rank's region touches."""
    names = [*layout, "layer_3.bias"]
    regions = {
        n: _region(ockpt.open(path)[n.replace(".", "/")].shape, mesh, layout[n]) for n in layout
    }
    regions["layer_3.bias"] = (slice(0, 32),)
    with ockpt.open(path) as ckpt:
        direct = _counting(lambda: [ckpt[n.replace(".", "/")][regions[n]] for n in names])
    share = 0.0
    whole = 0
    for n in names:
        with ockpt.open(path) as ckpt:
            lazy = ckpt[n.replace(".", "/")]
            leaf_bytes = _counting(lambda: lazy[...])  # noqa: B023 - called at once
        whole += leaf_bytes
        total = _chunks_touched(tuple(slice(0, k) for k in lazy.shape), lazy.chunk_shape)
        share += leaf_bytes * _chunks_touched(regions[n], lazy.chunk_shape) / total
    return direct, whole, share


def _load_all(path: str, mesh) -> list[str]:  # type: ignore[no-untyped-def]
    """Every leaf of `path` through dcp.load (1-D mesh: Shard(0) where dim 0 divides by the
    mesh size, else replicated; strings as str), compared with `load_state_dict`."""
    want = load_state_dict(path)
    described = OrbaxReader(path).read_metadata().state_dict_metadata
    values = {k for k, v in described.items() if isinstance(v, BytesStorageMetadata)}
    n = mesh.size()
    state: dict[str, object] = {}
    for name, value in want.items():
        if name in values:  # a string, or a Python scalar: a value, not a tensor (loading §9.2)
            state[name] = None
            continue
        shard = value.ndim > 0 and value.shape[0] % n == 0
        placement = Shard(0) if shard else Replicate()
        state[name] = _dtensor(value.shape, value.dtype, mesh, [placement])
    dcp.load(state, storage_reader=OrbaxReader(path))
    differences = []
    for name, value in want.items():
        got = state[name]
        if isinstance(value, str):
            ok = got == value
        elif name in values:
            ok = not isinstance(got, torch.Tensor) and got == value.item()
        else:
            assert isinstance(got, DTensor)
            placement = got.placements[0]
            expected = _expected_local(value, mesh, [placement])
            ok = torch.equal(_bits(got.to_local()), _bits(expected))
        if not ok:
            differences.append(name)
    return differences


def main() -> None:
    out, counted, *others = sys.argv[1:]
    warnings.simplefilter("ignore")  # torch's notes on gloo and DTensor
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    shape, _ = _placements(world)
    mesh = init_device_mesh("cpu", shape)
    result = _counted_load(counted, mesh, world)
    flat_mesh = init_device_mesh("cpu", (world,))
    result["others"] = {p: _load_all(p, flat_mesh) for p in others}
    result["rank"] = rank
    result["coordinate"] = list(mesh.get_coordinate())
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
