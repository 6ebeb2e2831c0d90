"""Worker of tests/torch/test_dcp_writer.py: one rank of a DCP save with `OrbaxWriter`.

    python -m torch.distributed.run --standalone --nproc-per-node N _torch_dcp_writer_child.py \
        MODE OUT

MODE ``save``: the state dict of `full_values` as DTensors on a DeviceMesh (1-D for 2 ranks,
2×2 for 4), plain tensors and Python values, saved to ``OUT/v1`` and ``OUT/item``.
MODE ``fail``: the same, over the committed ``OUT/v1`` with overwrite, rank 1 failing while it
writes its chunks; then an unsupported value, refused while planning.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

SEED = 20
OBJECTS = {"train.step": 7, "train.lr": 0.5, "train.name": "run-1", "train.done": True}


def full_values() -> dict[str, np.ndarray]:
    """The global tensors of the state dict as numpy (bfloat16 through ml_dtypes)."""
    g = torch.Generator().manual_seed(SEED)
    tensors = {
        "model.embed.weight": torch.randn(10, 6, generator=g),
        "model.layers.0.proj.weight": torch.randn(6, 7, generator=g).to(torch.bfloat16),
        "model.layers.0.proj.bias": torch.randint(-999, 999, (5,), generator=g, dtype=torch.int32),
        "model.norm.scale": torch.randn((), generator=g),
        "model.grid": torch.randn(8, 6, generator=g),
        "model.uneven": torch.randn(5, 3, generator=g),
        "buffers.count": torch.arange(12, dtype=torch.int32).reshape(3, 4),
    }
    return {k: _numpy(t) for k, t in tensors.items()}


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _torch(value: np.ndarray) -> torch.Tensor:
    if value.dtype.name == "bfloat16":
        return torch.from_numpy(value.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(value.copy())


def _placements(world: int) -> dict[str, list]:
    from torch.distributed.tensor import Replicate, Shard

    if world == 2:
        return {
            "model.embed.weight": [Shard(0)],
            "model.layers.0.proj.weight": [Shard(1)],  # 7 columns: 4 + 3
            "model.layers.0.proj.bias": [Replicate()],
            "model.norm.scale": [Replicate()],
            "model.grid": [Shard(1)],
            "model.uneven": [Shard(0)],  # 3 + 2
        }
    return {
        "model.embed.weight": [Shard(0), Replicate()],
        "model.layers.0.proj.weight": [Replicate(), Shard(1)],
        "model.layers.0.proj.bias": [Replicate(), Replicate()],
        "model.norm.scale": [Replicate(), Replicate()],
        "model.grid": [Shard(0), Shard(1)],
        "model.uneven": [Shard(0), Shard(0)],  # 5 -> 3, 2 -> 2, 1, 1, 1
    }


def _same(got: dict, want: dict) -> bool:
    """The same nested state dict: local shards bit for bit, Python values of the same type."""
    from torch.distributed.tensor import DTensor

    if set(got) != set(want):
        return False
    for key, value in want.items():
        other = got[key]
        if isinstance(value, dict):
            if not (isinstance(other, dict) and _same(other, value)):
                return False
        elif isinstance(value, torch.Tensor):
            mine = value.to_local() if isinstance(value, DTensor) else value
            theirs = other.to_local() if isinstance(other, DTensor) else other
            if not torch.equal(
                mine.reshape(-1).view(torch.uint8), theirs.reshape(-1).view(torch.uint8)
            ):
                return False
        elif type(other) is not type(value) or other != value:
            return False
    return True


def state_dict(world: int, fill: int | None = None) -> dict:
    """The (nested) state dict every rank passes to dcp.save; with `fill`, the same layout
    holding `fill` everywhere (a target for dcp.load)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    shape = (world,) if world == 2 else (2, 2)
    mesh = init_device_mesh("cpu", shape)
    values = full_values()
    placements = _placements(world)
    model: dict = {}
    for name, value in values.items():
        t = _torch(value)
        if fill is not None:
            t = torch.full_like(t, fill)
        if name in placements:
            t = distribute_tensor(t, mesh, placements[name])
        model[name] = t
    nested: dict = {"model": {}, "buffers": {}}
    for name, t in model.items():
        top, rest = name.split(".", 1)
        nested[top][rest] = t
    nested["train"] = {k.split(".", 1)[1]: v for k, v in OBJECTS.items()}
    if fill is not None:
        nested["train"] = {k: type(v)() for k, v in nested["train"].items()}
    return nested


def main() -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from ockpt import SaveOptions
    from ockpt.torch import OrbaxReader, OrbaxWriter

    mode, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sd = state_dict(world)
    if mode == "save":
        dcp.save(sd, storage_writer=OrbaxWriter(os.path.join(out, "v1")))
        dcp.save(sd, storage_writer=OrbaxWriter(os.path.join(out, "item"), layout="item"))
        # compression="auto" votes across ranks on the sharded tensors only: the Python values
        # are rank 0's alone
        auto = OrbaxWriter(os.path.join(out, "auto"), options=SaveOptions(compression="auto"))
        dcp.save(sd, storage_writer=auto)
        # and back through OrbaxReader: tensors into DTensors, Python values as their types
        back = state_dict(world, fill=0)
        dcp.load(back, storage_reader=OrbaxReader(os.path.join(out, "v1"), item="state"))
        print(f"round trip {rank}: {_same(back, sd)}", flush=True)
    else:
        import ockpt._zarr_write as zarr_write

        real = zarr_write.write_arrays

        def boom(*args, **kwargs):
            raise OSError("injected failure")

        if rank == 1:
            zarr_write.write_arrays = boom
        try:
            dcp.save(sd, storage_writer=OrbaxWriter(os.path.join(out, "v1"), overwrite=True))
        except BaseException as e:  # noqa: BLE001 - DCP raises CheckpointException(BaseException)
            print(f"write failed on {rank}: {type(e).__name__}", flush=True)
        zarr_write.write_arrays = real
        sd["train"]["bad"] = object()
        try:
            refused = OrbaxWriter(
                os.path.join(out, "refused"), options=SaveOptions(compression="auto")
            )
            dcp.save(sd, storage_writer=refused)
        except BaseException as e:  # noqa: BLE001 - DCP raises CheckpointException(BaseException)
            print(f"plan failed on {rank}: {'WRITE-001' in str(e)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"done {rank}", flush=True)


if __name__ == "__main__":
    main()
