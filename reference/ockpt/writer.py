"""The reference writer: save a pytree as an Orbax checkpoint (spec/writing.md).

`save_pytree` writes one pytree, either as a v1 checkpoint (``orbax.checkpoint`` marker,
``_CHECKPOINT_METADATA``, the item in ``state/``) or as a single item directory (the v0
layout of ``PyTreeCheckpointer``). `save_checkpointables` writes a v1 checkpoint of several
named pytrees. `save_pytree_async` copies every value to the host before it returns and
writes in the background.

A save runs in the steps of the public save protocol (`plan_save` gives a `SavePlan`, whose
`begin`, `write_shards` and `commit` the other processes of a job, `CheckpointManager` and
`ockpt.torch.OrbaxWriter` drive; `SavePlan.save` runs them all):

1. **plan** (`plan_save`; no I/O but checking the target): flatten the tree, classify each
   leaf, refuse what cannot be stored
   (WRITE-001..WRITE-005, PATH-001, PATH-002) and what a reader would refuse (`write_limits`:
   LIMIT-002..004, JSON-003, ZARR-005, OCDBT-008), choose each array's chunk grid, copy this
   process's unique shards to the host;
2. **begin** (`SavePlan.begin`, the primary; the others join by its token): where the
   store's save protocol says to write (`Store.begin`: a temporary directory, or in an
   object store the final one);
3. **write shards** (`SavePlan.write_shards`, every process): each process writes its own
   pieces, then waits for the others;
4. **commit** (`SavePlan.commit`, the primary): the zarr metadata, the numpy and scalar
   leaves, the merge of the OCDBT databases, the JSON documents, ``commit_success.txt`` last,
   then (where the store has one) the rename (`Pending.commit`); locally with fsync first.

ockpt never imports jax: jax.Arrays, custom pytree nodes and multi-process jobs are handled
through the jax the caller has already imported (`sys.modules`); numpy-only saves work without
it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import zstandard

from . import _gc, _jax, _zarr_write, dtypes, random_keys, write_limits
from ._zarr_write import Piece
from .documents import (
    ArrayMetadata,
    ArrayMetadatas,
    CheckpointMetadata,
    MetadataDocument,
    NamedShardingSpec,
    ShardingDocument,
    ShardingSpec,
    SingleDeviceShardingSpec,
    StringsDocument,
    TreeEntry,
    ValueMetadata,
)
from .errors import FormatError, OckptError, UnsupportedError
from .names import (
    ARRAY_METADATAS_DIR,
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    METADATA_FILE,
    PYTREE_CHECKPOINTABLES,
    SHARDING_FILE,
    STEP_JSON_FILE,
    STRINGS_FILE,
    TMP_MARKER,
    V1_JSON_FILE,
    V1_MARKER,
)
from .ocdbt.write import Entry
from .paths import EmptyNode, KeyEntry, KeyPath, KeyType, check_param_names, flatten, param_name
from .random_keys import RandomKey
from .save_options import UNSET, Compression, SaveOptions, StorageDtypes, Unset, from_keywords
from .store import Pending, Store, as_store
from .store.commit import new_token

__all__ = [
    "save_pytree",
    "save_checkpointables",
    "save_pytree_async",
    "SaveOptions",
    "SaveHandle",
    "JsonItem",
    "plan_save",
    "SavePlan",
    "Job",
    "ShardedArray",
    "Piece",
]

#: Handler names written in `_CHECKPOINT_METADATA.item_handlers` (data, never imported).
PYTREE_HANDLER = "orbax.checkpoint._src.handlers.pytree_checkpoint_handler.PyTreeCheckpointHandler"
V1_PYTREE_HANDLER = "orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler"
STANDARD_HANDLER = (
    "orbax.checkpoint._src.handlers.standard_checkpoint_handler.StandardCheckpointHandler"
)
JSON_HANDLER = "orbax.checkpoint._src.handlers.json_checkpoint_handler.JsonCheckpointHandler"
V1_JSON_HANDLER = "orbax.checkpoint.experimental.v1._src.handlers.json_handler.JsonHandler"

Layout = Literal["v1", "item"]

_INT64 = (-(1 << 63), (1 << 63) - 1)


# ---------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class _Options:
    """`SaveOptions` with the layout's defaults filled in: what the planning and writing use."""

    use_ocdbt: bool
    zarr_version: int
    compression_level: int | None
    chunk_byte_size: int | None
    storage_dtypes: StorageDtypes
    auto: bool = False  # compression="auto": per array, zstd only where it pays (WRITE-015)


def _resolve(options: SaveOptions, layout: str) -> _Options:
    """The zarr version and zstd level of `options` for `layout` (as Orbax: zarr v3 for a
    v1 checkpoint, v2 for an item; level 1 for zarr v2, 3 for v3)."""
    if layout not in ("v1", "item"):
        raise ValueError(f"layout must be 'v1' or 'item', got {layout!r}")
    zarr_version = options.zarr_version
    if zarr_version is None:
        zarr_version = 3 if layout == "v1" else 2
    level = options.compression_level
    if options.compression is not None and level is None:
        level = _zarr_write.ZSTD_LEVEL[zarr_version]
    return _Options(
        options.use_ocdbt,
        zarr_version,
        level,
        options.chunk_byte_size,
        options.storage_dtypes,
        options.compression == "auto",
    )


# ---------------------------------------------------------------------------------------------
# Processes: jax.distributed by default, or a job the caller describes (`Job`). A single-process
# save never imports jax for this.

#: This process's int32 vector -> every process's, stacked in process order (``(count, n)``).
AllGather = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Job:
    """The processes that write one save together: this one's `index` among `count` (the
    primary is index 0), and how they exchange small integer vectors.

    `all_gather` None uses jax's ``multihost_utils.process_allgather`` (a job of
    ``jax.distributed``); a job of another framework passes its own collective, for example
    `ockpt.torch.OrbaxWriter` one over ``torch.distributed``. Every barrier of a save
    (`agree`, `share`, compression="auto") is one call of it, made by every process in the
    same order.
    """

    index: int
    count: int
    all_gather: AllGather | None = None

    @property
    def primary(self) -> bool:
        return self.index == 0

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Every process's int32 `values` (this one's included), shape ``(count, len)``."""
        mine = np.asarray(values, dtype=np.int32).reshape(-1)
        if self.count == 1:
            return mine.reshape(1, -1)
        if self.all_gather is None:
            from jax.experimental import multihost_utils

            got = multihost_utils.process_allgather(mine)
        else:
            got = self.all_gather(mine)
        return np.asarray(got).reshape(self.count, -1)

    def agree(self, ok: bool, what: str) -> None:
        """Barrier: raise on every process if `ok` is False on any of them."""
        if self.count == 1:
            return
        flags = self.gather(np.array([1 if ok else 0]))[:, 0]
        if not ok:
            return  # the caller re-raises its own error
        if not flags.all():
            failed = [int(i) for i in np.flatnonzero(flags == 0)]
            raise OckptError(f"save failed on process(es) {failed} while {what}")

    def share(self, token: int) -> int:
        """The primary's 48-bit `token`, on every process (sent as two 24-bit halves: jax
        without x64 has no 64-bit integers)."""
        if self.count == 1:
            return token
        got = self.gather(np.array([token >> 24, token & 0xFFFFFF]))
        return (int(got[0, 0]) << 24) | int(got[0, 1])


def _job() -> Job:
    jax = sys.modules.get("jax")
    if jax is None:
        return Job(0, 1)
    try:
        return Job(int(jax.process_index()), int(jax.process_count()))
    except Exception:  # noqa: BLE001 - a jax without a backend: single process
        return Job(0, 1)


# ---------------------------------------------------------------------------------------------
# Leaves


@dataclass(frozen=True)
class ShardedArray:
    """A global array given as the pieces this process writes, without jax: stored and
    described like a `jax.Array` leaf (``value_type`` ``jax.Array``, its `write_shape`, its
    `sharding` in ``_sharding``). `ockpt.torch.OrbaxWriter` saves DTensors as these.

    Every process of the job passes the same `shape`, `dtype`, `write_shape` and `sharding`.
    `pieces` are this process's regions (global start index, host array of `dtype`); each is
    a whole number of `write_shape` blocks (blocks at the array's edge may be cut short), and
    each block is written by exactly one process of the job (WRITE-030). The chunk grid is
    `write_shape`, divided as for a jax.Array's shard (WRITE-010).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    write_shape: tuple[int, ...]
    pieces: tuple[Piece, ...] = ()
    sharding: ShardingSpec | None = None


@dataclass(frozen=True)
class _Leaf:
    path: KeyPath
    name: str  # the param name of `path`, made once
    kind: Literal["jax", "numpy", "scalar", "string", "empty"]
    value: Any = None
    empty: EmptyNode | None = None
    key_impl: str | None = None  # a typed PRNG key array: `value` is its key data (WRITE-006)


def _jax_array_type() -> type | None:
    jax = sys.modules.get("jax")
    return None if jax is None else jax.Array


def _custom_children(node: Any) -> list[tuple[KeyEntry, Any]] | None:
    """The children of a custom pytree node registered with jax, or None for a leaf."""
    jax = sys.modules.get("jax")
    if jax is None or isinstance(node, (np.ndarray, np.generic, str, bytes, int, float, complex)):
        return None
    if isinstance(node, jax.Array):
        return None
    tu = jax.tree_util
    items, _ = tu.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    if len(items) == 1 and items[0][0] == ():
        return None  # not a registered node
    out = []
    for keys, child in items:
        (key,) = keys
        if isinstance(key, tu.DictKey):
            out.append((KeyEntry(str(key.key), KeyType.DICT), child))
        elif isinstance(key, tu.GetAttrKey):
            out.append((KeyEntry(str(key.name), KeyType.DICT), child))
        elif isinstance(key, tu.SequenceKey):
            out.append((KeyEntry(str(key.idx), KeyType.SEQUENCE), child))
        elif isinstance(key, tu.FlattenedIndexKey):
            out.append((KeyEntry(str(key.key), KeyType.SEQUENCE), child))
        else:
            return None
    return out


def _walk(tree: Any, prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    """`paths.flatten`, expanding custom pytree nodes registered with jax (by their keys)."""
    for path, leaf in flatten(tree):
        if type(leaf) is np.ndarray or isinstance(leaf, EmptyNode):  # never a custom node
            yield prefix + path if prefix else path, leaf
            continue
        children = _custom_children(leaf)
        if children is None:
            yield prefix + path, leaf
            continue
        if not children:
            raise FormatError(
                f"leaf {param_name(prefix + path)!r}: custom pytree node "
                f"{type(leaf).__name__} has no children, which the format cannot record",
                rule="WRITE-001",
                pointer=param_name(prefix + path),
            )
        for entry, child in children:
            yield from _walk(child, prefix + path + (entry,))


def _refuse(path: KeyPath, message: str, rule: str = "WRITE-001", **kw: Any) -> FormatError:
    name = param_name(path)
    return FormatError(f"leaf {name!r}: {message}", rule=rule, pointer=name, **kw)


def _classify(path: KeyPath, value: Any) -> _Leaf:
    name = ".".join([e.key for e in path])  # `param_name`, for a key path
    if type(value) is np.ndarray:  # the usual leaf first
        _check_array(path, value.shape, value.dtype)
        return _Leaf(path, name, "numpy", value)
    if isinstance(value, EmptyNode):
        return _Leaf(path, name, "empty", empty=value)
    if isinstance(value, str):
        return _Leaf(path, name, "string", value)
    if isinstance(value, RandomKey):  # a key loaded without jax goes back as the key it was
        if importlib.util.find_spec("jax") is None:
            raise UnsupportedError(
                f"leaf {param_name(path)!r}: saving a RandomKey ({value.impl}) needs jax "
                "installed; save its key data (RandomKey.data) to store it as plain uint32",
                rule="WRITE-006",
            )
        value = value.to_jax()
    if isinstance(value, ShardedArray):
        _check_array(path, value.shape, value.dtype)
        return _Leaf(path, name, "jax", value)
    jax_array = _jax_array_type()
    if jax_array is not None and isinstance(value, jax_array):
        key = _jax.key_parts(value)
        if key is not None:  # stored as its key data, the implementation recorded (WRITE-006)
            impl, data = key
            random_keys.key_data_shape(impl, leaf=param_name(path))
            return _Leaf(path, name, "jax", data, key_impl=impl)
        _check_array(path, value.shape, value.dtype)
        return _Leaf(path, name, "jax", value)
    if isinstance(value, np.ndarray):
        _check_array(path, value.shape, value.dtype)
        return _Leaf(path, name, "numpy", value)
    if isinstance(value, bool):
        return _Leaf(path, name, "scalar", np.asarray(value, dtype=np.bool_))
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise _refuse(path, "Python int outside the int64 range", rule="WRITE-002", got=value)
        return _Leaf(path, name, "scalar", np.asarray(value, dtype=np.int64))
    if isinstance(value, float):
        return _Leaf(path, name, "scalar", np.asarray(value, dtype=np.float64))
    if isinstance(value, np.generic):
        arr = np.asarray(value)
        _check_array(path, arr.shape, arr.dtype)
        return _Leaf(path, name, "scalar", arr)
    raise _refuse(
        path,
        f"unsupported leaf type {type(value).__module__}.{type(value).__qualname__} (a checkpoint "
        "holds arrays, scalars, strings, None and containers)",
    )


#: dtypes `_check_array` found writable (most trees hold a few, over many leaves).
_WRITABLE: set[np.dtype] = set()


def _check_array(path: KeyPath, shape: tuple[int, ...], dtype: Any) -> None:
    if isinstance(dtype, np.dtype) and dtype in _WRITABLE:
        if not shape or math.prod(shape):
            return
        raise _refuse(path, f"zero-size array of shape {tuple(shape)}", rule="WRITE-003")
    try:
        name = dtypes.dtype_name(np.dtype(dtype))
    except (TypeError, ValueError):
        raise _refuse(path, f"unsupported dtype {dtype}", got=str(dtype)) from None
    if name in dtypes.NOT_WRITABLE:
        raise _refuse(
            path, f"dtype {name} cannot be written: Orbax (tensorstore) cannot read it", got=name
        )
    if np.dtype(dtype).byteorder == ">":
        raise _refuse(path, "big-endian arrays are not supported", got=str(dtype))
    if math.prod(shape) == 0 and len(shape) > 0:
        raise _refuse(path, f"zero-size array of shape {tuple(shape)}", rule="WRITE-003")
    if isinstance(dtype, np.dtype):
        _WRITABLE.add(dtype)


_BAD_SEGMENTS = ("", ".", "..")


def _check_names(leaves: list[_Leaf], *, use_ocdbt: bool) -> None:
    """Refuse key paths and param names that the reader refuses or the store cannot hold
    (LIMIT-002..004, PATH-001, PATH-002, JSON-003, WRITE-004, WRITE-005)."""
    write_limits.check_key_paths([leaf.path for leaf in leaves])
    stored = [leaf for leaf in leaves if leaf.kind != "empty"]
    check_param_names(
        [leaf.path for leaf in stored],
        string_leaves=[leaf.path for leaf in stored if leaf.kind == "string"],
        names=[leaf.name for leaf in stored],
    )
    for leaf in stored:
        name = leaf.name
        if leaf.kind == "string":
            write_limits.check_string_name(name)
            continue
        if name == "" and use_ocdbt:
            continue  # a bare leaf: keys `zarr.json`, `c/0` at the database root
        if "\0" in name or (
            any(seg in _BAD_SEGMENTS for seg in name.split("/"))
            if "/" in name
            else name in _BAD_SEGMENTS
        ):
            raise FormatError(
                f"param name {name!r} has an empty, '.' or '..' path segment, or a NUL",
                rule="WRITE-004",
                pointer=name,
            )
        write_limits.check_array_name(name, use_ocdbt=use_ocdbt)
    arrays = [leaf.name for leaf in stored if leaf.kind != "string"]
    write_limits.check_array_dirs(arrays, use_ocdbt=use_ocdbt)


# ---------------------------------------------------------------------------------------------
# Planning


@dataclass
class _ItemPlan:
    leaves: list[_Leaf]
    arrays: list[_zarr_write.ArrayWrite]  # what this process writes
    jax_meta: dict[str, tuple[tuple[int, ...], tuple[int, ...], ShardingSpec | None]] = field(
        default_factory=dict
    )  # param name -> (write shape, chunk shape, sharding)


def _storage_dtype(opts: _Options, name: str, dtype: np.dtype) -> np.dtype:
    sd = opts.storage_dtypes
    if sd is None:
        return dtype
    if isinstance(sd, Mapping):
        want = sd.get(name)
    else:
        want = sd(name, dtype)
    if want is None:
        return dtype
    try:
        out = np.dtype(want)
        stored = dtypes.dtype_name(out)
    except (TypeError, ValueError):
        stored = None
    if stored is None or stored in dtypes.NOT_WRITABLE:
        raise FormatError(
            f"leaf {name!r}: unsupported storage dtype {want!r}", rule="WRITE-001", pointer=name
        )
    return out


def _sharding_spec(sharding: Any) -> ShardingSpec | None:
    jax = sys.modules["jax"]
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        types = getattr(mesh, "axis_types", None)
        return NamedShardingSpec(
            mesh_shape=tuple(int(n) for n in mesh.devices.shape),
            axis_names=tuple(str(a) for a in mesh.axis_names),
            axis_types=None if types is None else tuple(str(t) for t in types),
            partition_spec=tuple(
                tuple(e) if isinstance(e, (tuple, list)) else e for e in tuple(sharding.spec)
            ),
            device_ids=tuple(int(d.id) for d in mesh.devices.flat),
        )
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        (device,) = sharding.device_set
        return SingleDeviceShardingSpec(device_str=str(device))
    return None


def _plan(tree: Any, opts: _Options, job: Job, *, copy: bool) -> _ItemPlan:
    """What this process writes of one item. Every process of a job then waits for the others
    (a failure anywhere fails the save on every process, WRITE-032) before the one exchange of
    planning, the compression="auto" vote, so that no process is left in a collective that a
    failed one never reaches."""
    try:
        with _gc.paused():
            plan = _plan_leaves(tree, opts, job, copy=copy)
    except BaseException:
        job.agree(False, "planning")
        raise
    job.agree(True, "planning")
    if opts.auto:
        _choose_compression(plan, opts, job)
    return plan


def _plan_leaves(tree: Any, opts: _Options, job: Job, *, copy: bool) -> _ItemPlan:
    leaves = [_classify(path, value) for path, value in _walk(tree)]
    _check_names(leaves, use_ocdbt=opts.use_ocdbt)
    plan = _ItemPlan(leaves, [])
    grids: dict[tuple[tuple[int, ...], int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for leaf in leaves:
        if leaf.kind in ("numpy", "scalar"):
            value = np.asarray(leaf.value)
            dtype = (
                _storage_dtype(opts, leaf.name, value.dtype)
                if leaf.kind == "numpy"
                else value.dtype
            )
            shape = tuple(value.shape)
            grid = grids.get((shape, dtype.itemsize))  # (chunk, shard): a few shapes, many leaves
            if grid is None:
                chunk = _zarr_write.chunk_shape_for(shape, dtype.itemsize, opts.chunk_byte_size)
                shard = _zarr_write.shard_shape_for(shape, chunk, opts.chunk_byte_size)
                grid = grids[(shape, dtype.itemsize)] = (chunk, shard)
            pieces: tuple[Piece, ...] = ()
            if job.primary:
                host = value.astype(dtype, copy=copy) if dtype != value.dtype or copy else value
                if type(host) is not np.ndarray or not host.flags.c_contiguous:
                    host = np.require(host, requirements="C")
                pieces = (Piece((0,) * len(shape), host),)
            plan.arrays.append(
                _zarr_write.ArrayWrite(leaf.name, shape, dtype, *grid, pieces, job.primary)
            )
        elif isinstance(leaf.value, ShardedArray):
            plan.arrays.append(_plan_sharded(leaf, opts, job, plan, copy=copy))
        elif leaf.kind == "jax":
            plan.arrays.append(_plan_jax(leaf, opts, job, plan, copy=copy))
    for a in plan.arrays:
        write_limits.check_array(a, zarr_version=opts.zarr_version, use_ocdbt=opts.use_ocdbt)
    write_limits.check_documents(_documents_bound(plan), lambda: _all_documents(plan, opts, job))
    return plan


#: compression="auto" stores an array uncompressed when that makes it at most this many times
#: larger than zstd would (zstd saves under 1 - 1/1.1 = 9.1%; random float32 weights: ~8%).
AUTO_MAX_GROWTH = 1.10
_AUTO_SAMPLE_BYTES = 1 << 20


def _compresses(pieces: tuple[Piece, ...], level: int) -> bool | None:
    """Whether zstd at `level` pays on a sample (up to 1 MiB from the middle of this process's
    first piece): the raw sample is over `AUTO_MAX_GROWTH` times its compressed size. None when
    this process holds no piece."""
    if not pieces or pieces[0].value.nbytes == 0:
        return None
    raw = memoryview(np.ascontiguousarray(pieces[0].value).reshape(-1).view(np.uint8))
    if len(raw) > _AUTO_SAMPLE_BYTES:
        start = (len(raw) - _AUTO_SAMPLE_BYTES) // 2
        raw = raw[start : start + _AUTO_SAMPLE_BYTES]
    size = len(zstandard.ZstdCompressor(level=level).compress(raw))
    return len(raw) > AUTO_MAX_GROWTH * size


def _choose_compression(plan: _ItemPlan, opts: _Options, job: Job) -> None:
    """compression="auto" (WRITE-015): per array, zstd where it pays on a sample, no
    compressor elsewhere. Every process must write the same zarr metadata, so in a
    multi-process job a sharded array (a jax.Array, a `ShardedArray`: every process has it)
    is compressed when any process's sample says so (or none holds a piece of it). Other
    leaves are the primary's alone, which decides by its own sample: a job's processes may
    differ in them (`ockpt.torch.OrbaxWriter` gives non-tensor values to the primary only)."""
    assert opts.compression_level is not None
    votes = [_compresses(a.pieces, opts.compression_level) for a in plan.arrays]
    codes = np.array([-1 if v is None else int(v) for v in votes], dtype=np.int8)
    keep = codes != 0
    shared = [i for i, a in enumerate(plan.arrays) if a.param_name in plan.jax_meta]
    if job.count > 1 and shared:  # the same sharded arrays, in the same order, everywhere
        every = job.gather(codes[shared])
        keep[shared] = (every == 1).any(axis=0) | (every == -1).all(axis=0)
    plan.arrays = [
        a if k else dataclasses.replace(a, compress=False)
        for a, k in zip(plan.arrays, keep.tolist(), strict=True)
    ]


def _plan_jax(
    leaf: _Leaf, opts: _Options, job: Job, plan: _ItemPlan, *, copy: bool
) -> _zarr_write.ArrayWrite:
    """One jax.Array: the chunk grid is its shard shape; each unique shard (replica 0) is
    copied to the host by the process that holds it (WRITE-030)."""
    arr = leaf.value
    shape = tuple(int(n) for n in arr.shape)
    src = np.dtype(arr.dtype)
    # key data keeps its uint32: another type would no longer be the key (WRITE-006)
    dtype = src if leaf.key_impl is not None else _storage_dtype(opts, leaf.name, src)
    write_shape = tuple(int(n) for n in arr.sharding.shard_shape(arr.shape))
    chunk = _zarr_write.chunk_shape_for(
        write_shape, dtype.itemsize, opts.chunk_byte_size, array_shape=shape
    )
    pieces = []
    seen: set[tuple[int, ...]] = set()
    for shard in arr.addressable_shards:
        if shard.replica_id != 0:
            continue
        start = tuple(
            0 if s.start is None else int(s.start) for s in _full_index(shard.index, len(shape))
        )
        if start in seen:
            continue
        seen.add(start)
        host = np.asarray(shard.data)
        if dtype != host.dtype:
            host = host.astype(dtype)
        elif copy and (host.base is not None or not host.flags.owndata):
            host = np.array(host, copy=True)  # own the bytes: the device buffer may be reused
        pieces.append(Piece(start, np.require(host, requirements="C")))
    plan.jax_meta[leaf.name] = (write_shape, chunk, _sharding_spec(arr.sharding))
    shard = _zarr_write.shard_shape_for(write_shape, chunk, opts.chunk_byte_size)
    return _zarr_write.ArrayWrite(leaf.name, shape, dtype, chunk, shard, tuple(pieces), job.primary)


def _plan_sharded(
    leaf: _Leaf, opts: _Options, job: Job, plan: _ItemPlan, *, copy: bool
) -> _zarr_write.ArrayWrite:
    """One `ShardedArray`: as `_plan_jax`, its pieces given rather than found in shards."""
    arr: ShardedArray = leaf.value
    shape = tuple(int(n) for n in arr.shape)
    write_shape = tuple(int(n) for n in arr.write_shape)
    if len(write_shape) != len(shape) or any(w < 1 for w in write_shape):
        raise ValueError(f"leaf {leaf.name!r}: write_shape {write_shape} for shape {shape}")
    src = np.dtype(arr.dtype)
    dtype = _storage_dtype(opts, leaf.name, src)
    chunk = _zarr_write.chunk_shape_for(
        write_shape, dtype.itemsize, opts.chunk_byte_size, array_shape=shape
    )
    pieces = []
    for piece in arr.pieces:
        value = np.asarray(piece.value)
        start = tuple(int(i) for i in piece.start)
        if (
            value.dtype != src
            or len(start) != len(shape)
            or any(i < 0 or i + n > m for i, n, m in zip(start, value.shape, shape, strict=True))
        ):
            raise ValueError(
                f"leaf {leaf.name!r}: a piece of {value.dtype} {value.shape} at {start} does "
                f"not lie in the {src} array of shape {shape}"
            )
        if value.size == 0:
            continue
        if dtype != src:
            value = value.astype(dtype)
        elif copy:
            value = np.array(value, copy=True)
        pieces.append(Piece(start, np.require(value, requirements="C")))
    plan.jax_meta[leaf.name] = (write_shape, chunk, arr.sharding)
    shard = _zarr_write.shard_shape_for(write_shape, chunk, opts.chunk_byte_size)
    return _zarr_write.ArrayWrite(leaf.name, shape, dtype, chunk, shard, tuple(pieces), job.primary)


def _full_index(index: tuple[Any, ...], ndim: int) -> tuple[slice, ...]:
    out = list(index) + [slice(None)] * (ndim - len(index))
    return tuple(s if isinstance(s, slice) else slice(int(s), int(s) + 1) for s in out)


# ---------------------------------------------------------------------------------------------
# Documents (pure: they return bytes)


#: The value metadata of a leaf kind that records nothing per leaf: one object each.
_KIND_VALUES = {
    kind: ValueMetadata(value_type=value_type, skip_deserialize=False)
    for kind, value_type in (("numpy", "np.ndarray"), ("scalar", "scalar"), ("string", "string"))
}


def _value_metadata(leaf: _Leaf, plan: _ItemPlan) -> ValueMetadata:
    if leaf.kind == "empty":
        assert leaf.empty is not None
        return ValueMetadata(value_type=leaf.empty.value, skip_deserialize=True)
    if leaf.kind == "jax":
        write_shape = plan.jax_meta[leaf.name][0]
        return ValueMetadata(
            value_type="jax.Array", skip_deserialize=False, write_shape=write_shape
        )
    return _KIND_VALUES[leaf.kind]


def _metadata_document(plan: _ItemPlan, opts: _Options) -> MetadataDocument:
    """`_METADATA` of the item (WRITE-020)."""
    return MetadataDocument(
        entries=tuple(
            TreeEntry(path=leaf.path, value=_value_metadata(leaf, plan)) for leaf in plan.leaves
        ),
        use_ocdbt=opts.use_ocdbt,
        use_zarr3=opts.zarr_version == 3,
        store_array_data_equal_to_fill_value=True,
        custom_metadata=None,
    )


def _item_documents(plan: _ItemPlan, opts: _Options) -> dict[str, bytes]:
    """Every JSON document the primary writes into an item directory."""
    docs = {METADATA_FILE: _metadata_document(plan, opts).to_bytes()}
    shardings = {n: s for n, (_, _, s) in plan.jax_meta.items() if s is not None}
    if shardings:
        docs[SHARDING_FILE] = ShardingDocument(shardings=shardings).to_bytes()
    strings = {leaf.name: leaf.value for leaf in plan.leaves if leaf.kind == "string"}
    if strings:
        docs[STRINGS_FILE] = StringsDocument.from_values(strings).to_bytes()
    return docs


def _array_metadatas(plan: _ItemPlan) -> bytes | None:
    if not plan.jax_meta:
        return None
    impls = {leaf.name: leaf.key_impl for leaf in plan.leaves if leaf.key_impl is not None}
    return ArrayMetadatas(
        arrays=tuple(
            ArrayMetadata(
                param_name=name,
                write_shape=ws,
                chunk_shape=cs,
                ext_metadata={"random_key_impl": impls[name]} if name in impls else None,
            )
            for name, (ws, cs, _) in plan.jax_meta.items()
        )
    ).to_bytes()


def _all_documents(plan: _ItemPlan, opts: _Options, job: Job) -> dict[str, bytes]:
    """Every JSON document of an item, by file name, `array_metadatas` included."""
    docs = _item_documents(plan, opts)
    meta = _array_metadatas(plan)
    if meta is not None:
        docs[f"{ARRAY_METADATAS_DIR}/process_{job.index}"] = meta
    return docs


def _documents_bound(plan: _ItemPlan) -> int:
    """An upper bound on the bytes of `_all_documents` together, from the lengths of names
    and values: a character takes at most 12 bytes of JSON (a surrogate pair's escapes), 24
    in a tree key (repr, then JSON); an entry's other fields at most a few hundred."""
    total = 1024  # the documents' own fields
    for leaf in plan.leaves:
        total += 40 * sum(len(e.key) for e in leaf.path) + 64 * len(leaf.path) + 256
        if leaf.kind == "string":
            total += 12 * (len(leaf.value) + len(leaf.name)) + 16
    for name, (write_shape, _, spec) in plan.jax_meta.items():
        total += 24 * len(name) + 64 * len(write_shape) + 256
        total += 0 if spec is None else _spec_bound(spec)
    return total


def _spec_bound(spec: ShardingSpec) -> int:
    """An upper bound on the bytes of one `_sharding` value: the spec's JSON (numbers of at
    most 20 digits, nested lists of device ids) escaped once more as a JSON string."""
    if isinstance(spec, SingleDeviceShardingSpec):
        return 2 * (128 + 12 * len(spec.device_str))
    texts = [*spec.axis_names, *(spec.axis_types or ())]
    for entry in spec.partition_spec:
        texts += [str(e) for e in (entry if isinstance(entry, tuple) else (entry,))]
    numbers = len(spec.mesh_shape) + len(spec.device_ids or ())
    return 2 * (256 + 32 * numbers + sum(12 * len(t) + 8 for t in texts))


def _checkpoint_metadata(
    handlers: str | Mapping[str, str], custom: Mapping[str, Any] | None, init_ns: int
) -> bytes:
    return CheckpointMetadata(
        item_handlers=handlers if isinstance(handlers, str) else dict(handlers),
        metrics={},
        performance_metrics={},
        init_timestamp_nsecs=init_ns,
        commit_timestamp_nsecs=time.time_ns(),
        custom_metadata=dict(custom or {}),
    ).to_bytes()


def _check_custom_metadata(custom: Any) -> None:
    if custom is None:
        return
    if not isinstance(custom, Mapping):
        raise ValueError(f"custom_metadata must be a JSON object (a dict), got {type(custom)}")
    try:
        json.dumps(custom, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"custom_metadata is not JSON: {e}") from None


# ---------------------------------------------------------------------------------------------
# Writing one item (every process), then committing (the primary)


def _write_item(item: Store, plan: _ItemPlan, opts: _Options, job: Job) -> list[Entry] | None:
    """This process's part of an item: its array pieces and its array_metadatas file; returns
    the entries of the process's OCDBT database (None without one)."""
    entries = None
    if plan.arrays:
        entries = _zarr_write.write_arrays(
            item,
            plan.arrays,
            use_ocdbt=opts.use_ocdbt,
            zarr_version=opts.zarr_version,
            compression_level=opts.compression_level,
            process_index=job.index,
        )
    meta = _array_metadatas(plan)
    if meta is not None:
        item.set(f"{ARRAY_METADATAS_DIR}/process_{job.index}", meta)
    return entries


def _finish_item(
    item: Store,
    plan: _ItemPlan,
    opts: _Options,
    job: Job,
    entries: list[Entry] | None,
) -> None:
    """The primary's part after every process wrote: merge the databases (its own from
    `entries`, the others' from their files), write documents."""
    with _gc.paused():  # a node entry per key, an object per leaf: no large writes here
        if opts.use_ocdbt and plan.arrays:
            known = {} if entries is None else {job.index: entries}
            _zarr_write.merge_databases(item, range(job.count), known=known)
        documents = _item_documents(plan, opts)
    for name, data in documents.items():
        item.set(name, data)


@dataclass(frozen=True)
class JsonItem:
    """A JSON checkpointable (v1, ``<name>/data.json``) or JSON item of a step
    (``<name>/metadata``): any JSON value, written as is."""

    value: Any


@dataclass(frozen=True)
class _JsonPart:
    file_name: str
    data: bytes


_Part = tuple[_ItemPlan, _Options] | _JsonPart


@dataclass
class SavePlan:
    """One save, planned (`plan_save`): the parts it writes (relative directory -> pytree
    plan or JSON), where, and how to commit them. The public save protocol: every process of
    the job calls `begin`, then `write_shards`; the primary then calls `commit` and tells the
    others how it went (`save` does all of it, with the job's barriers)."""

    store: Store  # where the checkpoint is saved
    parts: dict[str, _Part]  # relative item directory ('' = the root itself) -> part
    layout: Literal["v1", "item", "step"]
    custom_metadata: Mapping[str, Any] | None
    overwrite: bool
    job: Job
    handlers: str | Mapping[str, str]
    init_ns: int = field(default_factory=time.time_ns)

    def begin(self) -> Pending:
        """Begin the save in its store (primary), agreed by every process: the others join
        it by the primary's token."""
        pending = None
        error: BaseException | None = None
        token = new_token() if self.job.primary else 0
        if self.job.primary:
            try:
                pending = self.store.begin(overwrite=self.overwrite, token=token)
            except BaseException as e:  # noqa: BLE001 - re-raised after the barrier
                error = e
        self.job.agree(error is None, "creating the temporary directory")
        if error is not None:
            raise error
        if pending is None:
            pending = self.store.join(self.job.share(token), overwrite=self.overwrite)
        elif self.job.count > 1:
            self.job.share(token)
        return pending

    def save(self, pending: Pending | None = None) -> None:
        """The whole protocol: `begin` (unless `pending` is given), `write_shards`, and the
        primary's `commit` agreed by every process; on failure what the save wrote is
        removed (primary) and the error re-raised everywhere."""
        pending = self.begin() if pending is None else pending
        written = self.write_shards(pending)
        error: BaseException | None = None
        if self.job.primary:
            try:
                self.commit(pending, written)
            except BaseException as e:  # noqa: BLE001 - re-raised after the barrier
                error = e
        try:
            self.job.agree(error is None, "committing")
        except BaseException as e:  # noqa: BLE001
            error = error or e
        if error is not None:
            _raise(error, pending)

    def write_shards(self, pending: Pending) -> dict[str, list[Entry] | None]:
        """Every process: write its part of every item, then wait for the others (WRITE-032).
        On a failure anywhere the primary removes the temporary directory and every process
        raises. Returns what `commit` needs of this process (its databases' entries)."""
        error: BaseException | None = None
        written: dict[str, list[Entry] | None] = {}
        try:
            for rel, part in self.parts.items():
                if not isinstance(part, _JsonPart):
                    plan, opts = part
                    written[rel] = _write_item(_item(pending, rel), plan, opts, self.job)
        except BaseException as e:  # noqa: BLE001
            error = e
        try:
            self.job.agree(error is None, "writing arrays")
        except BaseException as e:  # noqa: BLE001
            error = error or e
        if error is not None:
            if self.job.primary:
                pending.abort()
            _raise(error, pending)
        return written

    def commit(self, pending: Pending, written: Mapping[str, list[Entry] | None]) -> None:
        """The primary, once every process has written (`write_shards`): merge the databases,
        write the documents and commit; on failure remove the temporary directory and raise.
        No barrier: the caller tells the other processes how it went."""
        try:
            self._commit(pending, written)
        except BaseException as e:  # noqa: BLE001
            pending.abort()
            _raise(e, pending)

    def _commit(self, pending: Pending, written: Mapping[str, list[Entry] | None]) -> None:
        """The primary's duties once every process has written (WRITE-032, DIR-004)."""
        for rel, part in self.parts.items():
            item = _item(pending, rel)
            if isinstance(part, _JsonPart):
                item.set(part.file_name, part.data)
            else:
                plan, opts = part
                _finish_item(item, plan, opts, self.job, written.get(rel))
        if self.layout == "v1":
            pending.store.set(V1_MARKER, b"")
        pending.store.set(
            CHECKPOINT_METADATA_FILE,
            _checkpoint_metadata(self.handlers, self.custom_metadata, self.init_ns),
        )
        # every item of a step is marked too, as Orbax marks them (directories §7)
        pending.commit([*(self.parts if self.layout == "step" else ()), ""])


def _item(pending: Pending, rel: str) -> Store:
    """The directory of the item `rel` of a save (``""``: the checkpoint itself)."""
    return pending.store.child(rel) if rel else pending.store


def plan_save(
    path: Any,
    items: Mapping[str, Any],
    *,
    layout: Literal["v1", "item", "step"],
    overwrite: bool,
    custom_metadata: Any,
    copy: bool,
    options: SaveOptions,
    job: Job | None = None,
) -> SavePlan:
    """Plan a save before anything is written: its parts (host copies made with `copy`),
    options and handlers; bad options, leaves and targets are refused here, in every process.
    `items`: item name -> pytree or `JsonItem` (``{"": tree}`` for ``layout="item"``);
    `job`: the processes that save together (None: those of jax.distributed, or this process
    alone). Then `SavePlan.save`, or its steps one by one."""
    opts = _resolve(options, "item" if layout == "step" else layout)
    _check_custom_metadata(custom_metadata)
    job = _job() if job is None else job
    store = as_store(path)
    store.check_target(overwrite=overwrite)  # refuse early, before copying
    parts: dict[str, _Part] = {}
    handlers: str | dict[str, str]
    if layout == "item":
        (tree,) = items.values()
        parts[""] = (_plan(tree, opts, job, copy=copy), opts)
        handlers = PYTREE_HANDLER
    else:
        handlers = {}
        for name, value in items.items():
            _check_item_name(name)
            if isinstance(value, JsonItem):
                try:
                    data = json.dumps(value.value, allow_nan=False).encode("utf-8")
                except (TypeError, ValueError) as e:
                    raise ValueError(f"JSON item {name!r} is not JSON: {e}") from None
                file_name = V1_JSON_FILE if layout == "v1" else STEP_JSON_FILE
                write_limits.check_json(data, file=f"{name}/{file_name}")
                parts[name] = _JsonPart(file_name, data)
                handlers[name] = V1_JSON_HANDLER if layout == "v1" else JSON_HANDLER
            else:
                parts[name] = (_plan(value, opts, job, copy=copy), opts)
                handlers[name] = V1_PYTREE_HANDLER if layout == "v1" else STANDARD_HANDLER
    _check_storage_dtype_names(opts, parts)
    _check_paths(store, parts)
    write_limits.check_json(
        _checkpoint_metadata(handlers, custom_metadata, time.time_ns()),
        file=CHECKPOINT_METADATA_FILE,
    )
    return SavePlan(
        store=store,
        parts=parts,
        layout=layout,
        custom_metadata=custom_metadata,
        overwrite=overwrite,
        job=job,
        handlers=handlers,
    )


def _check_storage_dtype_names(opts: _Options, parts: Mapping[str, _Part]) -> None:
    """A mapping of storage dtypes must name array leaves only (of any item of the save)."""
    if not isinstance(opts.storage_dtypes, Mapping):
        return
    arrays = {
        leaf.name
        for part in parts.values()
        if not isinstance(part, _JsonPart)
        for leaf in part[0].leaves
        if leaf.kind in ("jax", "numpy")
    }
    unknown = sorted(set(opts.storage_dtypes) - arrays)
    if unknown:
        raise ValueError(f"storage_dtypes names no array leaf: {unknown}")


def _check_paths(store: Store, parts: Mapping[str, _Part]) -> None:
    """WRITE-005: the files of per-leaf arrays fit in a path under the directory a save to
    `store` writes (its temporary directory, longer than the final one: they fit once
    committed too)."""
    tmp = store.write_path()
    for rel, part in parts.items():
        if isinstance(part, _JsonPart) or part[1].use_ocdbt:
            continue
        plan, opts = part
        for a in plan.arrays:
            write_limits.check_array_path(os.path.join(tmp, rel), a, zarr_version=opts.zarr_version)


def _check_item_name(name: Any) -> None:
    if (
        not isinstance(name, str)
        or name in ("", ".", "..", V1_MARKER, CHECKPOINT_METADATA_FILE, COMMIT_FILE)
        or "/" in name
        or TMP_MARKER in name
    ):
        raise ValueError(f"checkpointable name {name!r} is not a valid directory name")


# ---------------------------------------------------------------------------------------------
# Public API


def _save(
    path: str | os.PathLike[str],
    items: Mapping[str, Any],
    *,
    layout: Layout,
    overwrite: bool,
    custom_metadata: Mapping[str, Any] | None,
    options: SaveOptions,
) -> None:
    """Write `items` (checkpointable name -> tree) and commit, the way the store allows."""
    plan_save(
        path,
        items,
        layout=layout,
        overwrite=overwrite,
        custom_metadata=custom_metadata,
        copy=False,
        options=options,
    ).save()


def _pytree_items(tree: Any, layout: str) -> dict[str, Any]:
    """The one pytree of `save_pytree`: the item itself, or the v1 checkpointable ``state``."""
    return {"": tree} if layout == "item" else {PYTREE_CHECKPOINTABLES[0]: tree}


def save_pytree(
    path: str | os.PathLike[str] | Store,
    tree: Any,
    *,
    layout: Layout = "v1",
    overwrite: bool = False,
    options: SaveOptions | None = None,
    use_ocdbt: bool | Unset = UNSET,
    zarr_version: int | None | Unset = UNSET,
    compression: Compression | Unset = UNSET,
    compression_level: int | None | Unset = UNSET,
    chunk_byte_size: int | None | Unset = UNSET,
    storage_dtypes: StorageDtypes | Unset = UNSET,
    custom_metadata: Mapping[str, Any] | None = None,
) -> None:
    """Save `tree` as a checkpoint at `path` that Orbax restores exactly.

    Args:
        path: a local directory that does not exist yet (or exists and `overwrite`), an
            object-store URL (``s3://``, ``gs://``: written straight there, with
            ``commit_success.txt`` last), or a `store.Store`.
        tree: nested dicts, lists, tuples, NamedTuples and custom pytree nodes registered with
            jax, whose leaves are jax.Arrays (any sharding), numpy arrays (every dtype of the
            spec's table, incl. bfloat16, float8_*, int4), Python and numpy scalars, strings
            and None; empty containers are kept.
        layout: ``"v1"`` (default): a v1 checkpoint with the pytree in ``state/``, as
            ``ocp.v1.save_pytree`` writes; ``"item"``: a single item directory, as
            ``ocp.PyTreeCheckpointer().save`` writes.
        overwrite: replace an existing checkpoint at `path` (committed atomically).
        options: how arrays are stored (`SaveOptions`; its defaults when None). Every save
            call and `CheckpointManager` take it.
        use_ocdbt, zarr_version, compression, compression_level, chunk_byte_size,
            storage_dtypes: shortcuts for the fields of `SaveOptions`, here only (one that
            contradicts `options` is a ValueError).
        custom_metadata: a JSON object stored in ``_CHECKPOINT_METADATA.custom_metadata``.

    Raises:
        ValueError: an option is not valid.
        FormatError: a leaf cannot be stored (rule WRITE-001..005, names the leaf), param names
            collide (PATH-001, PATH-002), the tree or a document exceeds a reader's limits
            (LIMIT-002..004, JSON-003, ZARR-005, OCDBT-008), or the path is not usable
            (DIR-001). Nothing is written then.
        WriteConflictError: a checkpoint exists at `path` and `overwrite` is False (DIR-002),
            or another save committed there while this one wrote (DIR-002, DIR-008).
    """
    opts = from_keywords(
        options,
        use_ocdbt=use_ocdbt,
        zarr_version=zarr_version,
        compression=compression,
        compression_level=compression_level,
        chunk_byte_size=chunk_byte_size,
        storage_dtypes=storage_dtypes,
    )
    _save(
        path,
        _pytree_items(tree, layout),
        layout=layout,
        overwrite=overwrite,
        custom_metadata=custom_metadata,
        options=opts,
    )


def save_checkpointables(
    path: str | os.PathLike[str] | Store,
    checkpointables: Mapping[str, Any],
    *,
    overwrite: bool = False,
    options: SaveOptions | None = None,
    custom_metadata: Mapping[str, Any] | None = None,
) -> None:
    """Save several named pytrees as one v1 checkpoint (one item directory per name).

    The pytree that `ocp.v1.load_pytree` restores is the one named ``"state"``. `options`
    (`SaveOptions`) apply to every checkpointable.
    """
    opts = from_keywords(options)
    if not isinstance(checkpointables, Mapping) or not checkpointables:
        raise ValueError("checkpointables must be a non-empty mapping name -> pytree")
    _save(
        path,
        checkpointables,
        layout="v1",
        overwrite=overwrite,
        custom_metadata=custom_metadata,
        options=opts,
    )


class SaveHandle:
    """A save running in the background. `result()` waits and re-raises its error."""

    def __init__(self, run: Callable[[], None] | None) -> None:
        self._error: BaseException | None = None
        self._done = threading.Event()
        if run is None:
            self._done.set()
            self._thread = None
            return

        def target() -> None:
            try:
                run()
            except BaseException as e:  # noqa: BLE001 - handed to result()
                self._error = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=target, name="ockpt-save", daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> None:
        """Wait until the save is committed; raise its error if it failed."""
        if not self._done.wait(timeout):
            raise TimeoutError("the save has not finished")
        if self._error is not None:
            raise self._error


def save_pytree_async(
    path: str | os.PathLike[str] | Store,
    tree: Any,
    *,
    layout: Layout = "v1",
    overwrite: bool = False,
    options: SaveOptions | None = None,
    custom_metadata: Mapping[str, Any] | None = None,
) -> SaveHandle:
    """`save_pytree` in the background (its arguments; storage options as `options` only).

    Every value is copied to host memory (device-to-host transfers included) and the temporary
    directory is created before this returns, so the caller may mutate or delete its arrays at
    once. Errors about the options, the tree or the path are raised here; errors while writing
    come from ``handle.result()``. In a multi-process job the save runs to completion before
    returning (its barriers need the calling thread).
    """
    opts = from_keywords(options)
    save = plan_save(
        path,
        _pytree_items(tree, layout),
        layout=layout,
        overwrite=overwrite,
        custom_metadata=custom_metadata,
        copy=True,
        options=opts,
    )
    pending = save.begin()
    if save.job.count > 1:
        save.save(pending)
        return SaveHandle(None)
    return SaveHandle(lambda: save.save(pending))


def _raise(error: BaseException, pending: Pending) -> None:
    """Re-raise `error` of a save to `pending`, a full disk as the OSError it is."""
    full = _disk_full(error, pending.final)
    if full is not None:
        raise full from error
    raise error


def _disk_full(error: BaseException, final: str) -> OSError | None:
    """tensorstore reports a full disk as a ValueError (RESOURCE_EXHAUSTED, os error 28): give it
    back as the OSError(ENOSPC) it is, saying that nothing was committed."""
    text = str(error)
    if isinstance(error, OSError) or not (
        "No space left on device" in text or "os_error_code='28'" in text
    ):
        return None
    import errno

    return OSError(
        errno.ENOSPC,
        f"No space left on device: the save to {final} failed, its temporary directory was "
        f"removed and nothing was committed ({text.split(' [tensorstore_spec=')[0][:300]})",
    )
