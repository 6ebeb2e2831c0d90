"""`OrbaxReader`: a `torch.distributed.checkpoint` storage reader for Orbax checkpoints.

``dcp.load(state_dict, storage_reader=OrbaxReader(path))`` fills a state dict of tensors,
DTensors on a DeviceMesh (any saved sharding, any number of ranks) or, for string and Python
scalar leaves, any value, from a pytree item of an Orbax checkpoint (spec/loading.md §9.2,
LOAD-063):

* `read_metadata` builds DCP's `Metadata` from the item's tree metadata alone (no array
  bytes): one `TensorStorageMetadata` per array leaf (its global shape and the torch dtype of
  `state_dict.torch_dtype_name`, widened for dtypes torch lacks) and a `BytesStorageMetadata`
  per string leaf and per Python scalar leaf (value type ``scalar``), named as
  `load_state_dict` names them (the key path joined with `sep`, ``"."`` by default, which is
  how DCP's default planner flattens nested dicts and lists: ``{"params": {"w": t}}`` asks
  for ``"params.w"``).
* Each array is declared as **one** storage chunk covering it. DCP's planner intersects every
  local shard with the declared chunks, so each shard becomes one read item whose region
  (``storage_offsets``, ``lengths``) is exactly the shard; `read_data` reads that region
  through ockpt's lazy slice reads, which read only the zarr chunks (and OCDBT values) it
  touches. A rank thus reads only what its shards need, whatever the saved chunking, sharding
  or process count was; declaring Orbax's chunk grid instead would only multiply the read
  items.
* `read_data` copies each region into the tensor the planner resolves (``copy_``, so a target
  of another dtype is cast by torch, as DCP's own file reader does) and commits it; a string
  or a Python scalar is handed to the planner's `load_bytes` in ``torch.save``'s format,
  which the planner reads back with ``torch.load``.
"""

from __future__ import annotations

import io
import os
import uuid
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from ..errors import OckptError
from ..layout import Kind, detect
from ..sources import Leaf, OrbaxSource
from .state_dict import flat_leaves, to_tensor, torch_dtype_name

__all__ = ["OrbaxReader"]

#: What `validate_checkpoint_id` accepts: the layouts a pytree item is found in (spec loading §2).
_LOADABLE = frozenset({Kind.PYTREE_ITEM, Kind.V1_CHECKPOINT, Kind.STEP, Kind.MANAGER_ROOT})


class OrbaxReader(StorageReader):
    """Reads the pytree item at `path` (item, v1 checkpoint, step or manager root; local or a
    kvstore URL) for `torch.distributed.checkpoint.load`.

    `step` / `item` choose a step and an item as `ockpt.load_pytree`; `sep` joins key paths
    into names; `widen` lets leaves of dtypes torch lacks load as a wider dtype, exactly
    (otherwise reading one raises `UnsupportedError`). A ``checkpoint_id`` given to
    ``dcp.load`` replaces `path`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        step: int | None = None,
        item: str | None = None,
        sep: str = ".",
        widen: bool = False,
    ) -> None:
        super().__init__()
        self.path = path
        self.step = step
        self.item = item
        self.sep = sep
        self.widen = widen
        self._source: OrbaxSource | None = None
        self._leaves: dict[str, Leaf] = {}
        self.load_id = uuid.uuid4().hex

    def _opened(self) -> OrbaxSource:
        """The checkpoint, opened (tree documents only) on first use."""
        if self._source is None:
            self._source = OrbaxSource(self.path, step=self.step, item=self.item)
            self._leaves = dict(flat_leaves(self._source, sep=self.sep))
        return self._source

    def close(self) -> None:
        """Close the checkpoint (it is reopened when read again)."""
        if self._source is not None:
            self._source.close()
        self._source = None
        self._leaves = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.close()
        if checkpoint_id:
            self.path = checkpoint_id
        self.load_id = uuid.uuid4().hex

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether `checkpoint_id` is a directory ockpt can load a pytree from."""
        try:
            kind = detect(checkpoint_id).kind
        except (OckptError, OSError, TypeError, ValueError):
            return False
        return kind in _LOADABLE

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._opened()
        described: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
        for name, leaf in self._leaves.items():
            if _is_value(leaf):
                described[name] = BytesStorageMetadata()
            else:
                described[name] = _tensor_metadata(leaf, name, widen=True)
        meta = StorageMeta(checkpoint_id=os.fspath(self.path), load_id=self.load_id)
        return Metadata(state_dict_metadata=described, storage_data={}, storage_meta=meta)

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self._opened()

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        source = self._opened()
        for request in plan.items:
            name = request.storage_index.fqn
            leaf = self._leaves[name]
            if request.type == LoadItemType.BYTE_IO:
                value = source.read(leaf)
                data = io.BytesIO()
                torch.save(value if isinstance(value, str) else value[()].item(), data)
                data.seek(0)
                planner.load_bytes(request, data)
                continue
            region = source.read(leaf, _region(request))
            values = to_tensor(region, name=name, widen=self.widen, file=source.path)
            target = planner.resolve_tensor(request).detach()
            if target.size() != values.size():
                raise ValueError(
                    f"{source.path}: leaf {name!r}: the region read has shape "
                    f"{tuple(values.size())}, the state dict's {tuple(target.size())}"
                )
            target.copy_(values)
            planner.commit_tensor(request, target)
        done: Future[None] = Future()
        done.set_result(None)
        return done


def _is_value(leaf: Leaf) -> bool:
    """Whether a leaf is a non-tensor value in a state dict: a string, or a scalar saved from
    a Python ``int``, ``float`` or ``bool`` (value type ``scalar``), as `OrbaxWriter` saves a
    state dict's Python values; a 0-d array is a 0-d tensor."""
    return leaf.kind == "string" or getattr(leaf.ref, "value_type", None) == "scalar"


def _tensor_metadata(leaf: Leaf, name: str, *, widen: bool) -> TensorStorageMetadata:
    """The DCP description of an array leaf: its torch dtype, global shape and one chunk."""
    assert leaf.dtype is not None
    dtype = getattr(torch, torch_dtype_name(leaf.dtype, name=name, widen=widen))
    size = torch.Size(leaf.shape)
    chunk = ChunkStorageMetadata(offsets=torch.Size([0] * len(size)), sizes=size)
    return TensorStorageMetadata(TensorProperties(dtype=dtype), size, [chunk])


def _region(request: ReadItem) -> tuple[slice, ...]:
    """The index of the region a read item asks for, in the leaf's coordinates (the declared
    chunk's offsets plus the item's offsets within it)."""
    base = request.storage_index.offset or torch.Size([0] * len(request.lengths))
    return tuple(
        slice(b + o, b + o + n)
        for b, o, n in zip(base, request.storage_offsets, request.lengths, strict=True)
    )
