"""`OrbaxWriter`: a `torch.distributed.checkpoint` storage writer whose save is one Orbax
checkpoint (spec/writing.md §9).

``dcp.save(state_dict, storage_writer=OrbaxWriter(path))`` from N ranks writes what a job of N
JAX processes writes with `ockpt.save_pytree`: each rank its own chunks into its own OCDBT
database ``ocdbt.process_<rank>/``, the coordinator (rank 0) the zarr metadata, the merged root
database and the JSON documents, all under a temporary directory committed atomically.

DCP's steps map onto the public save protocol (`ockpt.writer.plan_save`, `SavePlan`, and the
store's `Store.begin` / `Store.join`):

* ``prepare_local_plan`` (every rank) notes which non-tensor values the rank holds;
* ``prepare_global_plan`` (coordinator) sees every rank's chunks after DCP has removed
  replicas, so each chunk is written once (WRITE-030); it chooses each array's write shape and
  saved sharding, gives every non-tensor value to the coordinator, and begins the save in the
  store (`Store.begin`), whose token travels to the ranks in their plans (`Store.join`);
* ``write_data`` (every rank) plans the save of the rank's pieces as `ShardedArray` leaves
  (`plan_save`) and writes them (`SavePlan.write_shards`), then waits for the others
  (WRITE-032): on a failure anywhere what the save wrote is removed;
* ``finish`` (coordinator) merges the databases, writes the documents and commits
  (`SavePlan.commit`).

The checkpoint's tree: a state dict key ``a.b.c`` (DCP's flattened name) is the leaf
``{"a": {"b": {"c": ...}}}``, so its param name is ``a.b.c`` again. Tensors (DTensors, plain
tensors) are ``jax.Array`` leaves; Python ``bool``, ``int``, ``float`` and ``str`` values are
scalar and string leaves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from .. import dtypes
from ..documents import NamedShardingSpec
from ..errors import OckptError, UnsupportedError
from ..names import PYTREE_CHECKPOINTABLES
from ..paths import nest
from ..save_options import SaveOptions
from ..store import Pending, as_store
from ..store.commit import new_token
from ..writer import Job, Piece, ShardedArray, plan_save

__all__ = ["OrbaxWriter"]


@dataclass(frozen=True)
class _LocalInfo:
    """The storage data of a rank's local plan: the non-tensor values it holds."""

    objects: frozenset[str]


@dataclass(frozen=True)
class _ArrayLayout:
    """One tensor of the save, the same on every rank."""

    fqn: str
    shape: tuple[int, ...]
    dtype: str  # a name of `dtypes.TORCH_NAMES`
    write_shape: tuple[int, ...]
    sharding: NamedShardingSpec | None


@dataclass(frozen=True)
class _GlobalInfo:
    """The storage data of every rank's global plan: where the save writes and what."""

    path: str  # the checkpoint
    token: int  # the save's, for `Store.join`
    arrays: tuple[_ArrayLayout, ...]
    objects: tuple[str, ...]  # non-tensor values, written by the coordinator


class OrbaxWriter(StorageWriter):
    """Save a (sharded) state dict through `torch.distributed.checkpoint` as one Orbax
    checkpoint that Orbax 0.12.8 and `ockpt.load_pytree` restore.

    Args:
        path: the checkpoint directory (or give it as ``dcp.save(checkpoint_id=...)``): a
            local path on storage every rank shares.
        layout: ``"v1"`` (default): a v1 checkpoint, the state dict in ``state/``
            (``ocp.v1.load_pytree``); ``"item"``: one item directory
            (``ocp.PyTreeCheckpointer().restore``).
        overwrite: replace an existing checkpoint at `path` (committed atomically).
        options: how arrays are stored (`ockpt.SaveOptions`), as for `ockpt.save_pytree`.
        process_group: the group DCP saves with (None: the default group).

    The coordinator must be rank 0 of the group. A DTensor's shards and a plain tensor are
    written by the one rank DCP assigns each to; replicas are not written. ``_sharding``
    records, per tensor, the grid its stored shards form (spec/writing.md §9): Orbax rebuilds
    it only where JAX has devices with those ids, so restore with a target sharding or as
    numpy.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        layout: Literal["v1", "item"] = "v1",
        overwrite: bool = False,
        options: SaveOptions | None = None,
        process_group: Any = None,
    ) -> None:
        super().__init__()
        if path is not None:
            self._check_path(path)
        self.path = None if path is None else os.fspath(path)
        self.layout = layout
        self.overwrite = overwrite
        self.options = SaveOptions() if options is None else options
        self._group = process_group
        self._job = Job(0, 1)
        self._pending: Pending | None = None
        self._commit: Any = None  # (save, written) of the coordinator, for `finish`

    @staticmethod
    def _check_path(path: str | os.PathLike[str]) -> None:
        if not OrbaxWriter.validate_checkpoint_id(path):
            raise UnsupportedError(f"{os.fspath(path)}: OrbaxWriter saves to local paths only")

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new save begins (DCP passes ``checkpoint_id``, the path, when given one)."""
        if checkpoint_id is not None:
            self._check_path(checkpoint_id)
            self.path = os.fspath(checkpoint_id)
        self._abandon()

    def _abandon(self) -> None:
        """Remove the temporary directory of a save that will not commit (a DCP failure
        between planning and finishing), if this rank holds one."""
        pending, self._pending, self._commit = self._pending, None, None
        if pending is not None:
            pending.abort()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether `checkpoint_id` is a path this writer saves to: a local directory (the
        store of the path has one in the operating system's file system)."""
        try:
            return as_store(checkpoint_id).os_path() is not None
        except OckptError:  # a URL whose store cannot be opened here (no tensorstore)
            return False

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Every rank: learn the job (rank, world size) from torch.distributed."""
        self._job = _torch_job(self._group)
        if not kwargs.get("use_collectives", True) and self._job.count > 1:
            raise UnsupportedError("OrbaxWriter needs DCP's collectives (use_collectives=True)")
        if is_coordinator != self._job.primary:
            raise UnsupportedError(
                f"OrbaxWriter needs rank 0 as DCP's coordinator (this is rank {self._job.index}, "
                f"coordinator: {is_coordinator})"
            )

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Every rank: note which non-tensor values this rank holds."""
        if not plan.usable:
            raise UnsupportedError("OrbaxWriter does not support DCP's plan caching")
        objects = frozenset(i.index.fqn for i in plan.items if i.type == WriteItemType.BYTE_IO)
        return dataclasses.replace(plan, storage_data=_LocalInfo(objects))

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """The coordinator: lay out every array, give the non-tensor values to itself, create
        the temporary directory; every rank's plan carries the result."""
        if self.path is None:
            raise ValueError("OrbaxWriter has no path: pass one, or checkpoint_id to dcp.save")
        tensors = [[i for i in p.items if i.type != WriteItemType.BYTE_IO] for p in plans]
        objects = {
            i.index.fqn: i for p in plans for i in p.items if i.type == WriteItemType.BYTE_IO
        }
        mine = plans[0].storage_data.objects
        elsewhere = sorted(set(objects) - mine)
        if elsewhere:
            raise UnsupportedError(
                f"non-tensor values {elsewhere[:5]} are not in rank 0's state dict: OrbaxWriter "
                "writes non-tensor values from the coordinator's"
            )
        arrays = _layouts(tensors)
        _nest(dict.fromkeys([a.fqn for a in arrays] + list(objects)))  # refuse collisions now
        token = new_token()
        self._pending = as_store(self.path).begin(overwrite=self.overwrite, token=token)
        info = _GlobalInfo(os.fspath(self.path), token, arrays, tuple(sorted(objects)))
        return [
            dataclasses.replace(
                p, items=[*items, *objects.values()] if rank == 0 else items, storage_data=info
            )
            for rank, (p, items) in enumerate(zip(plans, tensors, strict=True))
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Every rank: write its pieces, then wait for the others (WRITE-032)."""
        info: _GlobalInfo = plan.storage_data
        job = self._job
        pending = self._pending if job.primary else None
        if pending is None:
            pending = as_store(info.path).join(info.token, overwrite=self.overwrite)
        try:
            tree = _tree(info, plan.items, planner, primary=job.primary)
        except BaseException:
            with contextlib.suppress(BaseException):  # the planning error is the one to raise
                job.agree(False, "planning")  # the others' barrier in the writer's planning
            self._abandon()
            raise
        try:  # a failure in planning is agreed on by every rank there (writer._plan)
            save = plan_save(
                info.path,
                {"": tree} if self.layout == "item" else {PYTREE_CHECKPOINTABLES[0]: tree},
                layout=self.layout,
                overwrite=self.overwrite,
                custom_metadata=None,
                copy=False,
                options=self.options,
                job=job,
            )
        except BaseException:
            self._abandon()
            raise
        try:
            written = save.write_shards(pending)
        except BaseException:
            self._pending = None  # write_parts removed it (the primary)
            raise
        if job.primary:
            self._commit = (save, written)
        results = [
            WriteResult(index=item.index, size_in_bytes=_nbytes(item), storage_data=None)
            for item in plan.items
        ]
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """The coordinator, once every rank has written: merge, write documents, commit."""
        del metadata, results  # the checkpoint's own documents describe it
        assert self._commit is not None and self._pending is not None
        save, written = self._commit
        pending, self._pending, self._commit = self._pending, None, None
        save.commit(pending, written)  # on failure it removes what the save wrote


# ---------------------------------------------------------------------------------------------
# The job


def _torch_job(group: Any) -> Job:
    """This rank and the world of `group` as a `Job`, its barriers gloo/NCCL all-gathers of a
    few int32 values (tensors only, never Python objects)."""
    if not (dist.is_available() and dist.is_initialized()):
        return Job(0, 1)
    count = dist.get_world_size(group)
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"

    def all_gather(values: np.ndarray) -> np.ndarray:
        mine = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int32)).to(device)
        every = [torch.empty_like(mine) for _ in range(count)]
        dist.all_gather(every, mine, group=group)
        return torch.stack(every).cpu().numpy()

    return Job(dist.get_rank(group), count, all_gather)


# ---------------------------------------------------------------------------------------------
# Global planning (coordinator, pure)


def _layouts(plans: Sequence[Sequence[WriteItem]]) -> tuple[_ArrayLayout, ...]:
    """Every tensor of the save from each rank's tensor items: its write shape and sharding."""
    boxes: dict[str, list[tuple[tuple[int, ...], tuple[int, ...], int]]] = {}
    props: dict[str, tuple[tuple[int, ...], str]] = {}
    for rank, items in enumerate(plans):
        for item in items:
            data = item.tensor_data
            assert data is not None and data.chunk is not None
            fqn = item.index.fqn
            props[fqn] = (tuple(int(n) for n in data.size), _dtype_name(fqn, data.properties.dtype))
            chunk = data.chunk
            offsets, sizes = (tuple(int(n) for n in t) for t in (chunk.offsets, chunk.sizes))
            if math.prod(sizes) > 0:  # an empty shard (an uneven split's last) holds nothing
                boxes.setdefault(fqn, []).append((offsets, sizes, rank))
    return tuple(
        _ArrayLayout(
            fqn,
            shape,
            dtype,
            _write_shape(shape, boxes.get(fqn, [])),
            _grid_sharding(shape, boxes.get(fqn, [])),
        )
        for fqn, (shape, dtype) in sorted(props.items())
    )


def _dtype_name(fqn: str, dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in dtypes.TORCH_NAMES or name in dtypes.NOT_WRITABLE:
        raise UnsupportedError(f"{fqn}: tensors of {dtype} cannot be stored in a checkpoint")
    return name


def _write_shape(
    shape: tuple[int, ...], boxes: Iterable[tuple[tuple[int, ...], tuple[int, ...], int]]
) -> tuple[int, ...]:
    """The largest block, per dimension, whose multiples every shard's edges fall on (the
    array's end aside): each shard is then a whole number of blocks, so no block (chunk) is
    shared by two writers. ``torch.chunk``-style splits give their shard size."""
    steps = [0] * len(shape)
    for offsets, sizes, _ in boxes:
        for d, (o, n) in enumerate(zip(offsets, sizes, strict=True)):
            steps[d] = math.gcd(steps[d], o, 0 if o + n == shape[d] else o + n)
    return tuple(step or n for step, n in zip(steps, shape, strict=True))


def _grid_sharding(
    shape: tuple[int, ...], boxes: Sequence[tuple[tuple[int, ...], tuple[int, ...], int]]
) -> NamedShardingSpec | None:
    """The stored shards as a named sharding: one mesh axis ``dim_<d>`` per dimension split
    into several shards (sized by their count), each device the rank that wrote the shard;
    ``replica`` of size 1 for an array stored whole. None when the shards form no grid."""
    starts = [sorted({b[0][d] for b in boxes}) for d in range(len(shape))]
    split = [d for d in range(len(shape)) if len(starts[d]) > 1]
    writer = {tuple(starts[d].index(o[d]) for d in split): rank for o, _, rank in boxes}
    mesh = tuple(len(starts[d]) for d in split) or (1,)
    if not boxes or len(writer) != len(boxes) or len(writer) != math.prod(mesh):
        return None
    cells = np.ndindex(*mesh) if split else [()]
    return NamedShardingSpec(
        mesh_shape=mesh,
        axis_names=tuple(f"dim_{d}" for d in split) or ("replica",),
        axis_types=None,
        partition_spec=tuple(f"dim_{d}" if d in split else None for d in range(len(shape))),
        device_ids=tuple(writer[cell] for cell in cells),
    )


# ---------------------------------------------------------------------------------------------
# Writing (every rank)


def _tree(
    info: _GlobalInfo, items: Iterable[WriteItem], planner: SavePlanner, *, primary: bool
) -> dict[str, Any]:
    """This rank's tree: every array with this rank's pieces, and (the coordinator) the
    non-tensor values."""
    pieces: dict[str, list[Piece]] = {}
    kinds = {a.fqn: dtypes.SUPPORTED[a.dtype] for a in info.arrays}
    for item in items:
        if item.type == WriteItemType.BYTE_IO:
            continue
        assert item.tensor_data is not None and item.tensor_data.chunk is not None
        fqn = item.index.fqn
        start = tuple(int(n) for n in item.tensor_data.chunk.offsets)
        value = _host(planner.resolve_data(item), kinds[fqn])
        pieces.setdefault(fqn, []).append(Piece(start, value))
    leaves: dict[str, Any] = {
        a.fqn: ShardedArray(
            a.shape, kinds[a.fqn], a.write_shape, tuple(pieces.get(a.fqn, ())), a.sharding
        )
        for a in info.arrays
    }
    if primary and info.objects:
        lookup = getattr(planner, "lookup_object", None)
        if lookup is None:
            raise UnsupportedError(
                f"non-tensor values {list(info.objects[:5])}: OrbaxWriter reads them through "
                "the planner's lookup_object (DefaultSavePlanner has it)"
            )
        by_name = {i.index.fqn: i.index for i in items if i.type == WriteItemType.BYTE_IO}
        for fqn in info.objects:
            leaves[fqn] = lookup(by_name[fqn])  # the writer refuses a type it cannot store
    return _nest(leaves)


def _nest(leaves: Mapping[str, Any]) -> dict[str, Any]:
    """The tree of a flat state dict (``a.b.c`` -> ``{"a": {"b": {"c": ...}}}``; keys nest at
    ``.``): `paths.nest` over the keys in order, so a collision names the shorter key first."""
    return nest(((fqn.split("."), leaves[fqn]) for fqn in sorted(leaves)), sep=".")


def _host(tensor: Any, dtype: np.dtype) -> np.ndarray:
    """A tensor on the host as a numpy array of `dtype` (its bytes reinterpreted, so that
    bfloat16 and float8 need no conversion; no copy for a contiguous CPU tensor)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"the planner resolved a tensor item to {type(tensor).__name__}")
    t = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
    if t.numel() == 0:
        return np.zeros(tuple(t.shape), dtype)
    return t.reshape(-1).view(torch.uint8).numpy().view(dtype).reshape(tuple(t.shape))


def _nbytes(item: WriteItem) -> int:
    """The raw bytes of a tensor item (DCP's statistics); 0 for a non-tensor value."""
    size = item.tensor_storage_size()
    return 0 if size is None else int(size)
