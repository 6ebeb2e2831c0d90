"""Parallel region reads of the python engine (`StoredArray.read_regions`, which
`engines.read_regions` calls for its arrays).

Each zarr chunk that any requested region overlaps is fetched and decoded once, in a pool of
one thread per core, and copied straight into every output it overlaps: a full-array read and
the shards of a resharded jax target each decode every chunk exactly once. zstd decoding
(``zstandard``), ``os.pread`` and numpy copies release the GIL, so the threads run in parallel.
A raw (uncompressed) chunk is read by ``os.preadv`` from its file straight into the rows of its
outputs (`_read_raw`): one copy, out of the page cache.

Requests are grouped by array (the reader issues all regions of one leaf together); a group's
requests are yielded, in order, once all of its chunks are in. At most `max_in_flight` chunks
(at least two per core) are decoded or waiting at once, so memory stays at the outputs of the
arrays in flight plus one decoded chunk per worker.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import zstandard

from ... import dtypes
from ..._threads import pool, workers
from ...bytecodecs import zstd_frame_size
from ...errors import FormatError
from ...store.byterange import ByteRange
from ...zarr.array import grid_index, missing_chunk, overlap, read_region
from ...zarr.codecs import BytesCodec, ZstdCodec
from ...zarr.v3 import ArrayV3Metadata

__all__ = ["follows_stored_chunks", "read_regions", "workers"]


def _executor() -> ThreadPoolExecutor:
    """The reader threads (`_threads.pool`)."""
    return pool("ockpt-read")


#: Arrays whose outputs and stored chunks are smaller than this are read in the calling
#: thread (`_small`): handing a tiny chunk to a worker (a future, a lock, the GIL passed back
#: and forth) costs more than decoding it. See benchmarks/RESULTS-scale.md for a tree of
#: 100,000 small leaves.
INLINE_BYTES = 1 << 16

#: zstd frames that decode to fewer bytes than this are decoded by one call into fresh bytes
#: and copied (`_zstd_into`); larger ones are streamed into their destination.
ONE_SHOT_BYTES = 1 << 16

_ALIGN = 64
_ALIGN_FROM = 1 << 16

#: Chunks that decode to more than this are streamed from their file in slabs of at most
#: `SLAB_BYTES` along their first axis (or straight into the output when it takes the whole
#: chunk), so a one-chunk array of many GiB costs its output and not twice or thrice that.
STREAM_BYTES = 64 << 20
SLAB_BYTES = 16 << 20
_READ_SIZE = 1 << 20  # compressed bytes handed to the zstd stream decoder at a time

#: Raw (uncompressed) chunks from this size on are read from their file straight into the
#: rows of their outputs (`_read_raw`): one copy, not a read into a buffer and a copy out of
#: it. Below it the one `os.dup` of the file that this takes is not worth saving a copy.
DIRECT_BYTES = 1 << 16
#: The smallest run of contiguous output bytes read by a raw chunk's `os.preadv` (one
#: buffer each); narrower rows go through a buffer and a strided copy instead.
RUN_BYTES = 1 << 11


def _aligned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array whose data starts on a 64-byte boundary (numpy's large arrays
    start 16 bytes into a page): jax on CPU then adopts it without a copy (`device_put`).
    Arrays under `_ALIGN_FROM` bytes are plain (a copy of them costs nothing; the two extra
    array objects would cost more than their data in a tree of many small leaves)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _ALIGN_FROM:
        return np.empty(shape, dtype=dtype)
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    offset = -raw.ctypes.data % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


class _Group:
    """The requests of one array, their outputs, and the chunks still to come."""

    def __init__(self, array: Any, requests: list[Any]) -> None:
        self.array = array
        self.requests = requests
        self.outs: list[np.ndarray] = []
        self.remaining = 0

    def allocate(self) -> None:
        for r in self.requests:
            dtype = np.dtype(r.dtype) if r.dtype is not None else self.array.dtype
            self.outs.append(_aligned(tuple(b - a for a, b in r.box), dtype))

    def tasks(self) -> Iterator[tuple[tuple[int, ...], list[tuple[int, tuple, tuple]]]]:
        """(chunk grid index, [(request number, box within the array, target slices)]).

        A chunk is one task, except a large zarr v3 shard: one task per inner chunk (each
        reads the shard index and its inner chunk from the file), decoded in parallel."""
        meta = self.array.metadata
        chunk = tuple(meta.chunk_shape)
        unit = chunk
        if _large_shard(meta, self.array.dtype):
            unit = tuple(meta.sharding.chunk_shape)
        elif len(self.requests) == 1 and tuple(meta.shape) == chunk:  # one chunk, read whole
            box = tuple(tuple(b) for b in self.requests[0].box)
            if all(a == 0 and b == n for (a, b), n in zip(box, chunk, strict=True)):
                yield (0,) * len(chunk), [(0, box, tuple(slice(0, n) for n in chunk))]
                return
        boxes = [tuple(tuple(b) for b in r.box) for r in self.requests]
        count = sum(_count(box, unit) for box in boxes)
        if count > _PLAN_UNITS and unit == chunk:
            stored = self._stored_chunks()
            if stored is not None and len(stored) < count:
                yield from self._sparse_tasks(boxes, stored, count)
                return
        if len(boxes) == 1 or count > _PLAN_UNITS:
            # one request, or too many units to plan at once: each streamed from the grid
            # (a unit two requests share is read for each)
            for n, box in enumerate(boxes):
                for index, dest in _units(n, box, unit):
                    yield _chunk_of(index, unit, chunk), [dest]
            return
        by_unit: dict[tuple[int, ...], list[tuple[int, tuple, tuple]]] = {}
        for n, box in enumerate(boxes):  # several requests: a unit they share is read once
            for index, dest in _units(n, box, unit):
                by_unit.setdefault(index, []).append(dest)
        for index, dests in by_unit.items():
            yield _chunk_of(index, unit, chunk), dests

    def _stored_chunks(self) -> set[tuple[int, ...]] | None:
        """The grid indices of the chunks stored for the array (one listing of its keys); None
        where it cannot be listed within the limits (the grid is then followed)."""
        array = self.array
        meta = array.metadata
        grid = tuple(
            -(-s // c) if c else 0 for s, c in zip(meta.shape, meta.chunk_shape, strict=True)
        )
        try:
            keys = array._store.list(array._prefix)
        except FormatError:  # more files than a listing holds (LIMIT-005)
            return None
        start = len(array._prefix)
        return {i for k in keys if (i := grid_index(meta, k[start:], grid)) is not None}

    def _sparse_tasks(
        self, boxes: list[tuple[tuple[int, int], ...]], stored: set, count: int
    ) -> Iterator[tuple[tuple[int, ...], list[tuple[int, tuple, tuple]]]]:
        """The tasks of a grid of which fewer chunks are stored than the requests cover (a
        few KiB may declare 2^24 chunks): work follows the chunks stored, not the grid. The
        rest is the fill value, set in one pass; where every chunk must be stored, the first
        one missing is read instead (and refused)."""
        chunk = tuple(self.array.metadata.chunk_shape)
        tasks = []
        for index in sorted(stored):
            dests = [d for n, box in enumerate(boxes) if (d := _dest(n, box, index, chunk))]
            if dests:
                tasks.append((index, dests))
        if sum(len(dests) for _, dests in tasks) < count:  # some chunk of a request is missing
            if self.array._missing == "error":
                for n, box in enumerate(boxes):
                    for index, dest in _units(n, box, chunk):
                        if index not in stored:
                            yield index, [dest]  # read, and refused as missing
                            return
            fill = self.array.metadata.fill
            for out in self.outs:
                _assign(out, (...,), np.broadcast_to(fill, out.shape))
        yield from tasks


#: above this many units (chunks, or inner chunks of a large shard) a group's requests are not
#: planned together: the plan would hold an entry for each (spec/limits.md: a grid may have
#: 2^24 chunks), and a grid of fewer chunks stored than that follows the chunks stored
_PLAN_UNITS = 1 << 16


def follows_stored_chunks(meta: Any, box: Any) -> bool:
    """Whether a read of `box` touches more chunks than a plan holds (`_PLAN_UNITS`), so that
    it follows the chunks stored where fewer are (`_Group.tasks`)."""
    return _count(tuple(tuple(b) for b in box), tuple(meta.chunk_shape)) > _PLAN_UNITS


def _count(box: tuple[tuple[int, int], ...], unit: tuple[int, ...]) -> int:
    """How many units of the grid `unit` the box `box` touches."""
    if any(a >= b for a, b in box):
        return 0
    return math.prod(-(-b // c) - a // c for (a, b), c in zip(box, unit, strict=True))


def _dest(
    n: int, box: tuple[tuple[int, int], ...], index: tuple[int, ...], unit: tuple[int, ...]
) -> tuple[int, tuple, tuple] | None:
    """(request number `n`, part of `box` in the unit `index`, target slices); None where the
    box does not touch the unit."""
    lo = tuple(i * c for i, c in zip(index, unit, strict=True))
    sub = tuple(
        (max(a, low), min(b, low + c)) for (a, b), low, c in zip(box, lo, unit, strict=True)
    )
    if any(a >= b for a, b in sub):
        return None
    target = tuple(slice(s - a, e - a) for (s, e), (a, _) in zip(sub, box, strict=True))
    return n, sub, target


def _units(
    n: int, box: tuple[tuple[int, int], ...], unit: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], tuple[int, tuple, tuple]]]:
    """(unit grid index, `_dest`) for each unit the box `box` touches, in grid order, made
    as they are consumed."""
    if any(a >= b for a, b in box):
        return
    ranges = [range(a // c, -(-b // c)) for (a, b), c in zip(box, unit, strict=True)]
    for index in itertools.product(*ranges):
        yield index, _dest(n, box, index, unit)  # type: ignore[misc]


def _chunk_of(index: tuple[int, ...], unit: tuple[int, ...], chunk: tuple[int, ...]) -> tuple:
    """The chunk (or shard) grid index of the unit `index`."""
    return tuple(i * u // c for i, u, c in zip(index, unit, chunk, strict=True))


def _large_shard(meta: Any, stored: np.dtype) -> bool:
    """A zarr v3 shard above `STREAM_BYTES`: read by inner chunk from its file."""
    sharding = getattr(meta, "sharding", None)
    return sharding is not None and math.prod(meta.chunk_shape) * stored.itemsize > STREAM_BYTES


def _assign(out: np.ndarray, target: tuple, value: np.ndarray) -> None:
    if value.dtype != out.dtype:
        value = dtypes.astype(np.ascontiguousarray(value), out.dtype)
    out[target] = value


_local = threading.local()


def _scratch(nbytes: int, name: str = "buf") -> np.ndarray:
    """One of this thread's reusable buffers (fresh memory costs a page fault per page); a
    request above `STREAM_BYTES` gets fresh memory that is freed after use, not kept."""
    if nbytes > STREAM_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    buf = getattr(_local, name, None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 1), dtype=np.uint8)
        setattr(_local, name, buf)
    return buf[:nbytes]


def _raw(nbytes: int) -> memoryview:
    return memoryview(_scratch(nbytes, "raw"))


def _plain(p: Any) -> str | None:
    """`"zstd"` when chunks are C-order native little-endian bytes under one zstd frame
    (Orbax's zarr v2), "raw" when they are those bytes alone; None for any other pipeline."""
    if (
        sys.byteorder != "little"
        or p.array_to_array
        or not isinstance(p.array_to_bytes, BytesCodec)
        or p.array_to_bytes.endian not in ("little", None)
    ):
        return None
    if not p.bytes_to_bytes:
        return "raw"
    if len(p.bytes_to_bytes) == 1 and isinstance(p.bytes_to_bytes[0], ZstdCodec):
        return "zstd"
    return None


def _zstd_into(data: Any, dst: np.ndarray) -> bool:
    """Decode one zstd frame straight into the C-contiguous `dst`; False (and `dst` in any
    state) when the frame is not exactly one frame of dst.nbytes bytes: the caller then takes
    the checked path, which names the fault."""
    try:
        if zstandard.get_frame_parameters(data).content_size != dst.nbytes:
            return False
    except zstandard.ZstdError:
        return False
    if zstd_frame_size(data) != len(data):
        return False
    try:
        if dst.nbytes < ONE_SHOT_BYTES:  # one call: a stream reader costs more than the copy
            out = _decoder().decompress(data)
            if len(out) != dst.nbytes:
                return False
            memoryview(dst.reshape(-1).view(np.uint8))[:] = out
            return True
        reader = _decoder().stream_reader(data, read_size=len(data), read_across_frames=False)
        return _fill(reader, dst) and not reader.read(1)
    except zstandard.ZstdError:
        return False


def _fill(source: Any, dst: np.ndarray) -> bool:
    """Fill the C-contiguous `dst` from ``source.readinto``; False if the source ends first."""
    view = memoryview(dst.reshape(-1).view(np.uint8))
    got = 0
    while got < len(view):
        n = source.readinto(view[got:])
        if not n:
            return False
        got += n
    return True


def _decoder() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _stream(
    src: ByteRange,
    kind: str,
    chunk: tuple[int, ...],
    stored: np.dtype,
    lo: tuple[int, ...],
    group: _Group,
    dests: list[tuple[int, tuple, tuple]],
) -> bool:
    """Decode the large chunk at `lo` from `src` into its destinations: straight into the
    output when one region takes the whole chunk, else in slabs along the first axis. False
    (outputs in any state) when the bytes are not exactly one frame (or raw bytes) of the
    chunk's size, or the layout does not allow slabs: the caller then takes the checked
    path, which names the fault."""
    nbytes = math.prod(chunk) * stored.itemsize
    whole = tuple((low, low + c) for low, c in zip(lo, chunk, strict=True))
    direct = None
    if len(dests) == 1 and dests[0][1] == whole:
        n, _, target = dests[0]
        region = group.outs[n][(*target, ...)]
        if region.dtype == stored and region.flags.c_contiguous:
            direct = region
    row = math.prod(chunk[1:]) * stored.itemsize
    if direct is None and (not chunk or row > SLAB_BYTES):
        return False
    if kind == "zstd":
        try:
            if zstandard.get_frame_parameters(src.pread(0, 18)).content_size != nbytes:
                return False
        except zstandard.ZstdError:
            return False
        if zstd_frame_size(src) != len(src):
            return False
        source: Any = _decoder().stream_reader(src, read_size=_READ_SIZE, read_across_frames=False)
    elif len(src) != nbytes:
        return False
    else:
        source = src

    try:
        if direct is not None:
            if not _fill(source, direct):
                return False
        else:
            rows = max(1, SLAB_BYTES // max(row, 1))
            buf = np.empty((min(rows, chunk[0]), *chunk[1:]), dtype=stored)
            last = max(sub[0][1] for _, sub, _ in dests) - lo[0]  # rows after it are not needed
            for r0 in range(0, last, rows):
                slab = buf[: min(rows, chunk[0] - r0)]
                if not _fill(source, slab):
                    return False
                top = lo[0] + r0
                for n, sub, target in dests:
                    a, b = max(sub[0][0], top), min(sub[0][1], top + len(slab))
                    if a >= b:
                        continue
                    part = ((a, b), *sub[1:])
                    first = target[0].start + a - sub[0][0]
                    to = (slice(first, first + b - a), *target[1:])
                    _, source_slices = overlap(part, (top, *lo[1:]), slab.shape)
                    _assign(group.outs[n], to, slab[source_slices])
            if last < chunk[0]:
                return True  # the rest of the chunk is not decoded (nor checked)
        return not source.read(1)
    except zstandard.ZstdError:
        return False


def _runs(region: np.ndarray) -> list[np.ndarray] | None:
    """The C-order contiguous runs of the view `region`, as 1-D uint8 views (one when it is
    contiguous, else one per row of its contiguous trailing block); None when a run would be
    under `RUN_BYTES` or the runs are not one strided sequence."""
    if region.flags.c_contiguous:
        return [region.reshape(-1).view(np.uint8)]
    block, k = region.itemsize, region.ndim
    while k > 0 and region.strides[k - 1] == block:
        block *= region.shape[k - 1]
        k -= 1
    if block < RUN_BYTES:
        return None
    try:  # leading dimensions as one; copy=False raises where that needs a copy
        rows = np.reshape(region, (-1, block // region.itemsize), copy=False)
    except ValueError:
        return None
    return list(rows.view(np.uint8))


def _raw_plan(
    group: _Group,
    chunk: tuple[int, ...],
    stored: np.dtype,
    lo: tuple[int, ...],
    dests: list[tuple[int, tuple, tuple]],
) -> list[tuple[int, list[np.ndarray]]] | None:
    """How to read a raw chunk straight into its destinations: (offset within the chunk's
    bytes, the destination's runs in memory) per destination. None when one of them cannot
    be: another dtype, a part of the chunk that is not one run of its bytes (it must span
    every dimension but the first), or runs under `RUN_BYTES`."""
    if not chunk:
        return None
    row = math.prod(chunk[1:]) * stored.itemsize  # bytes per index along the first axis
    plan = []
    for n, sub, target in dests:
        out = group.outs[n]
        spans = all(
            s == (low, low + c) for s, low, c in zip(sub[1:], lo[1:], chunk[1:], strict=True)
        )
        if out.dtype != stored or not spans:
            return None
        runs = _runs(out[(*target, ...)])
        if runs is None:
            return None
        plan.append(((sub[0][0] - lo[0]) * row, runs))
    return plan


def _read_raw(src: ByteRange, nbytes: int, plan: list[tuple[int, list[np.ndarray]]]) -> bool:
    """Read a raw chunk from its file into the runs of its destinations (`_raw_plan`): one
    copy, from the page cache into the outputs. False (outputs in any state, nothing read
    when the length is wrong) when the value is not exactly `nbytes` long or the file shrank:
    the caller then reads it as any other chunk, which names the fault."""
    if len(src) != nbytes:
        return False
    for at, runs in plan:
        if src.read_scattered(runs, at) != sum(len(r) for r in runs):
            return False
    return True


def _fetch(array: Any, key: str) -> Any:
    db = getattr(array._store, "db", None)
    if db is not None and hasattr(db, "get_into"):  # one OCDBT database: no fresh memory
        return db.get_into(key, _raw, generation=getattr(array._store, "generation", None))
    return array._store.get(key)


def _missing(group: _Group, dests: list[tuple[int, tuple, tuple]], where: str, what: str) -> None:
    """A chunk that is not stored: the fill value, or an error where every chunk is stored."""
    array = group.array
    if array._missing == "error":
        raise missing_chunk(where, what)
    for n, _, target in dests:
        out = group.outs[n]
        _assign(out, target, np.broadcast_to(array.metadata.fill, out[target].shape))


def _decode(
    group: _Group,
    pipeline: Any,
    chunk: tuple[int, ...],
    lo: tuple[int, ...],
    data: Any,
    dests: list[tuple[int, tuple, tuple]],
    *,
    where: str,
    pointer: str | None,
) -> None:
    """Decode one chunk at `lo` (bytes, or a `ByteRange` of its file when it is large) into
    every destination it overlaps: zstd straight into an output that takes the whole chunk,
    a large chunk streamed, anything else (and every fault) through the checked pipeline."""
    stored = group.array.dtype
    kind = _plain(pipeline)
    if isinstance(data, ByteRange):
        if kind is not None and _stream(data, kind, chunk, stored, lo, group, dests):
            return
        data = data[:]  # the checked path below names the fault
    decoded = None
    if kind == "zstd":
        whole = tuple((low, low + c) for low, c in zip(lo, chunk, strict=True))
        if len(dests) == 1 and dests[0][1] == whole:  # one region takes the whole chunk
            n, _, target = dests[0]
            region = group.outs[n][(*target, ...)]
            if region.dtype == stored and region.flags.c_contiguous:
                if _zstd_into(data, region):
                    return
        buf = _scratch(math.prod(chunk) * stored.itemsize).view(stored).reshape(chunk)
        if _zstd_into(data, buf):
            decoded = buf
    if decoded is None:  # every other codec pipeline, and every error
        numpy_dtype = group.array.metadata.numpy_dtype
        decoded = pipeline.decode(data, chunk, numpy_dtype, file=where, pointer=pointer)
    for n, sub, target in dests:
        _, source = overlap(sub, lo, chunk)
        _assign(group.outs[n], target, decoded[source])


def _read_inner_chunk(
    group: _Group,
    index: tuple[int, ...],
    src: ByteRange,
    dests: list[tuple[int, tuple, tuple]],
    where: str,
) -> None:
    """One inner chunk of a large zarr v3 shard (every destination lies within it), read
    from the shard's file: the shard index, then the inner chunk's bytes."""
    meta = group.array.metadata
    sharding = meta.sharding
    shard = tuple(meta.chunk_shape)
    inner = tuple(sharding.chunk_shape)
    shard_index = sharding.decode_index(src, shard, file=where, pointer="shard index")
    first = dests[0][1]  # (start, stop) per dimension
    sub = tuple(
        (a - i * s) // c for (a, _), i, s, c in zip(first, index, shard, inner, strict=True)
    )
    lo = tuple(i * s + j * c for i, s, j, c in zip(index, shard, sub, inner, strict=True))
    entry = shard_index.get(sub)
    if entry is None:
        _missing(group, dests, where, f"inner chunk {list(sub)} of the shard")
        return
    offset, nbytes = entry
    data: Any = src.part(offset, nbytes)
    if math.prod(inner) * group.array.dtype.itemsize <= STREAM_BYTES:
        data = data[:]
    pointer = f"inner chunk {list(sub)}"
    _decode(group, sharding.codecs, inner, lo, data, dests, where=where, pointer=pointer)


def _read_shard(
    group: _Group,
    data: Any,
    lo: tuple[int, ...],
    dests: list[tuple[int, tuple, tuple]],
    where: str,
) -> None:
    """Decode, from one zarr v3 shard's bytes (the shard at `lo`), only the inner chunks each
    region needs. A shard of one inner chunk with plain codecs (Orbax's and ockpt's, every
    small array) is decoded directly, without the generic region reader."""
    array = group.array
    sharding = array.metadata.sharding
    shard = tuple(array.metadata.chunk_shape)
    if tuple(sharding.chunk_shape) == shard and _plain(sharding.codecs) is not None:
        entry = sharding.decode_index(data, shard, file=where, pointer="shard index").get(
            (0,) * len(shard)
        )
        if entry is None:
            _missing(group, dests, where, f"inner chunk {[0] * len(shard)} of the shard")
            return
        offset, nbytes = entry
        pointer = f"inner chunk {[0] * len(shard)}"
        chunk = data[offset : offset + nbytes]
        _decode(group, sharding.codecs, shard, lo, chunk, dests, where=where, pointer=pointer)
        return
    get = lambda key: data  # noqa: E731 - the one shard this task reads
    for n, sub, target in dests:
        out = group.outs[n]
        if out.dtype == array.dtype:
            region = out[(*target, ...)]  # a view, also when 0-d
            if region.flags.c_contiguous or region.ndim == 0:
                read_region(array.metadata, get, region, sub, prefix=array._prefix,
                            missing=array._missing, file=array._keys_root)  # fmt: skip
                continue
        tmp = np.empty(tuple(b - a for a, b in sub), dtype=array.dtype)
        read_region(array.metadata, get, tmp, sub, prefix=array._prefix,
                    missing=array._missing, file=array._keys_root)  # fmt: skip
        _assign(out, target, tmp)


def _read_chunk(group: _Group, index: tuple[int, ...], dests: list[tuple[int, tuple, tuple]]):
    """Read one chunk grid cell (a chunk, or a zarr v3 shard) into its destinations."""
    array = group.array
    meta = array.metadata
    key = array._prefix + meta.chunk_key(index)
    where = f"{array._keys_root}/{key}"
    chunk = tuple(meta.chunk_shape)
    lo = tuple(i * c for i, c in zip(index, chunk, strict=True))
    sharded = isinstance(meta, ArrayV3Metadata) and meta.sharding is not None
    nbytes = math.prod(chunk) * array.dtype.itemsize
    if not sharded and nbytes >= DIRECT_BYTES and _plain(meta.pipeline) == "raw":
        plan = _raw_plan(group, chunk, array.dtype, lo, dests)
        src = None if plan is None else array._store.value_range(key)
        if plan is not None and src is not None:
            with src:
                if _read_raw(src, nbytes, plan):
                    return
            # not a raw chunk of its size: the paths below name the fault
    if _large_shard(meta, array.dtype) or (
        not sharded and nbytes > STREAM_BYTES and _plain(meta.pipeline) is not None
    ):
        src = array._store.value_range(key)  # None: inline, absent, or not in one file
        if src is not None:
            with src:
                if sharded:
                    _read_inner_chunk(group, index, src, dests, where)
                else:
                    _decode(group, meta.pipeline, chunk, lo, src, dests, where=where, pointer=None)
            return
    data = _fetch(array, key)
    if data is None:
        _missing(group, dests, where, f"chunk {list(index)}")
    elif sharded:
        _read_shard(group, data, lo, dests, where)
    else:
        _decode(group, meta.pipeline, chunk, lo, data, dests, where=where, pointer=None)


def _groups(requests: Iterable[Any]) -> Iterator[_Group]:
    """Consecutive requests of one array as one group, each made when the next array starts."""
    group: _Group | None = None
    for r in requests:
        if group is not None and group.array is r.array:
            group.requests.append(r)
            continue
        if group is not None:
            yield group
        group = _Group(r.array, [r])
    if group is not None:
        yield group


def _small(group: _Group) -> bool:
    """Read in the calling thread: outputs and stored chunks (or shards) under INLINE_BYTES."""
    meta = group.array.metadata
    stored = math.prod(meta.chunk_shape) * group.array.dtype.itemsize
    return stored < INLINE_BYTES and sum(out.nbytes for out in group.outs) < INLINE_BYTES


def _whole_plan(meta: Any, stored: np.dtype) -> str | None:
    """The key (after the array's prefix) of the one chunk of an array stored as one small
    unsharded chunk of plain zstd bytes (`_read_whole`); None for any other array."""
    shape = tuple(meta.shape)
    if (
        shape != tuple(meta.chunk_shape)
        or not all(shape)
        or getattr(meta, "sharding", None) is not None
        or math.prod(shape) * stored.itemsize >= INLINE_BYTES
        or _plain(meta.pipeline) != "zstd"
    ):
        return None
    return meta.chunk_key((0,) * len(shape))  # type: ignore[no-any-return]


def _read_whole(group: _Group, plans: dict[int, tuple[Any, str | None]]) -> bool:
    """Read a group that is one request for the whole of an array of one small zstd chunk
    (a leaf of a tree of many small leaves) straight into its output, its plan made once per
    zarr metadata object (`plans`, by id; arrays of one document share it). False (output in
    any state) for any other group and for a chunk that is absent or not one frame of the
    array's bytes: `_Group.tasks` and `_read_chunk` then read it, and name any fault."""
    array = group.array
    meta = array.metadata
    plan = plans.get(id(meta))
    if plan is None or plan[0] is not meta:
        plan = plans[id(meta)] = (meta, _whole_plan(meta, array.dtype))
    key = plan[1]
    if key is None or len(group.requests) != 1:
        return False
    out = group.outs[0]
    if out.dtype != array.dtype or not all(
        a == 0 and b == n for (a, b), n in zip(group.requests[0].box, meta.shape, strict=True)
    ):
        return False
    data = _fetch(array, array._prefix + key)
    return data is not None and _zstd_into(data, out)


def read_regions(requests: Iterable[Any], *, max_in_flight: int) -> Iterator[tuple[Any, Any]]:
    """Yield (request, numpy array) for each request (python-engine arrays only).

    `requests` is consumed as reading proceeds, and a group is dropped once yielded: memory
    holds the groups in flight and their outputs, not every request of a 100,000-leaf load."""
    groups = _groups(requests)
    pool = _executor()
    limit = max(max_in_flight, 2 * workers())
    window: deque[tuple[_Group, Future]] = deque()
    done: deque[_Group] = deque()
    plans: dict[int, tuple[Any, str | None]] = {}  # `_read_whole`'s, kept for this read

    def settle(group: _Group, future: Future) -> None:
        future.result()
        group.remaining -= 1

    try:
        for g in groups:
            g.allocate()
            done.append(g)
            if _small(g):
                if not _read_whole(g, plans):
                    for index, dests in g.tasks():
                        _read_chunk(g, index, dests)
                while window and window[0][1].done():
                    settle(*window.popleft())
                while done and done[0].remaining == 0:  # this group, and any finished before
                    ready = done.popleft()
                    yield from zip(ready.requests, ready.outs, strict=True)
                continue
            for index, dests in g.tasks():
                while len(window) >= limit:
                    settle(*window.popleft())
                    while done and done[0].remaining == 0 and done[0] is not g:
                        ready = done.popleft()
                        yield from zip(ready.requests, ready.outs, strict=True)
                g.remaining += 1
                # in a copy of the caller's context: the worker sees the caller's limits
                task = contextvars.copy_context().run
                window.append((g, pool.submit(task, _read_chunk, g, index, dests)))
        while window:
            settle(*window.popleft())
        while done:
            ready = done.popleft()
            yield from zip(ready.requests, ready.outs, strict=True)
    finally:
        for _, f in window:
            f.cancel()
        for _, f in window:
            if not f.cancelled():
                try:
                    f.result()
                except BaseException:  # noqa: BLE001 - the first error is already raised
                    pass
