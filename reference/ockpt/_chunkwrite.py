"""Encoding the chunks of zarr arrays, in parallel, as the values a save stores.

Each zarr v2 chunk is the C-order bytes of the full chunk (an edge chunk padded with zeros),
then one zstd frame unless the array is stored raw; each zarr v3 shard is its inner chunks so
encoded, in C order, then the index of (offset, nbytes) pairs, ``2^64-1`` twice for an inner
chunk wholly outside the array, and the index's CRC-32C (WRITE-011, WRITE-012; every chunk
stored, WRITE-013). Chunks are encoded in a pool of one thread per core (``zstandard``, numpy
copies and the CRC release the GIL); a raw chunk that is contiguous in its slice is handed on
as a view of it, not copied, and a chunk of many MiB is compressed as one frame on every core.
Encodings run ahead of the writes by a bounded number of chunks and bytes, so the encoded
bytes held at once stay bounded. The encoded values go to a ``sink(key, parts)``: the process's
OCDBT database (`ocdbt.write.DatabaseWriter`) or one file per key.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._threads import workers  # one thread per core, as the reader
from .paths import array_prefix
from .zarr.codecs import BytesCodec, ZstdCodec
from .zarr.shard_index import EMPTY, encode_index

__all__ = ["Sink", "encode_window", "write_chunks"]

#: ``sink(key, parts)``: store the value made of the buffers `parts` under the key.
Sink = Callable[[str, list[Any]], None]

#: Raw bytes of the chunks being encoded ahead of their writes (beyond the first).
ENCODE_AHEAD_BYTES = 128 << 20

#: Chunks under this many bytes are encoded in the calling thread when no other is pending.
INLINE_BYTES = 64 << 10

#: Chunks of at least this many bytes are compressed on every core, one frame each.
PARALLEL_FRAME_BYTES = 8 << 20

Job = tuple[str, int, Callable[[], list[Any]]]  # key, raw bytes, encoding


def _cells(
    start: Sequence[int], shape: Sequence[int], cell: Sequence[int]
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """(grid index, slices within the piece) of every grid cell a piece at `start` overlaps."""
    ranges = [range(s // c, -(-(s + n) // c)) for s, n, c in zip(start, shape, cell, strict=True)]
    for index in itertools.product(*ranges):
        local = tuple(
            slice(i * c - s, min((i + 1) * c, s + n) - s)
            for i, s, n, c in zip(index, start, shape, cell, strict=True)
        )
        yield index, local


def _check_whole(
    a: Any,
    index: tuple[int, ...],
    start: Sequence[int],
    local: tuple[slice, ...],
    cell: Sequence[int],
) -> None:
    """A cell must lie in one piece up to the array's edge: chunk edges lie on slice edges
    (WRITE-010), so a cell that a piece covers only in part would lose the rest."""
    for i, sl, c, n in zip(index, local, cell, a.shape, strict=True):
        if sl.stop - sl.start != min(c, n - i * c):
            raise ValueError(
                f"{a.param_name}: chunk {index} of {tuple(cell)} crosses the edge of the slice at "
                f"{tuple(start)} (WRITE-010: chunk edges lie on slice edges)"
            )


def _full(part: np.ndarray, chunk: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous chunk of the full chunk shape (an edge chunk padded with zeros)."""
    if part.shape != chunk:
        full = np.zeros(chunk, dtype=part.dtype)
        full[tuple(slice(0, n) for n in part.shape)] = part
        part = full
    return np.ascontiguousarray(part)


def _encoder(level: int | None) -> Callable[[np.ndarray], Any]:
    """C-contiguous chunk -> its stored bytes (`zarr.codecs`): a zstd frame of its bytes
    (large chunks on every core), or (raw) a byte view of it."""
    to_bytes = BytesCodec().encode
    if level is None:
        return to_bytes
    zstd = ZstdCodec(level=level)

    def encode(chunk: np.ndarray) -> bytes:
        data = to_bytes(chunk)
        return zstd.encode(data, threads=workers() if data.nbytes >= PARALLEL_FRAME_BYTES else 0)

    return encode


def _v2_jobs(a: Any, encode: Callable[[np.ndarray], Any]) -> Iterator[Job]:
    """(key, raw bytes, encoding) of every zarr v2 chunk of every piece of `a`."""
    chunk = tuple([int(c) for c in a.chunk_shape])
    nbytes = math.prod(chunk) * a.dtype.itemsize
    for piece in a.pieces:
        value = piece.value
        if not chunk:  # 0-d
            part = np.ascontiguousarray(value).reshape(())
            yield array_prefix(a.param_name) + "0", nbytes, lambda part=part: [encode(part)]
            continue
        if value.shape == chunk and not any(piece.start):  # the whole array: one chunk
            key = array_prefix(a.param_name) + ".".join("0" * len(chunk))
            yield key, nbytes, lambda value=value: [encode(np.ascontiguousarray(value))]
            continue
        for index, local in _cells(piece.start, value.shape, chunk):
            _check_whole(a, index, piece.start, local, chunk)
            key = array_prefix(a.param_name) + ".".join(str(i) for i in index)
            yield key, nbytes, lambda local=local, value=value: [encode(_full(value[local], chunk))]


def _v3_jobs(a: Any, encode: Callable[[np.ndarray], Any]) -> Iterator[Job]:
    """(key, raw bytes, encoding) of every zarr v3 shard of every piece of `a`."""
    shard = tuple(int(c) for c in a.write_shape)
    inner = tuple(int(c) for c in a.chunk_shape)
    nbytes = math.prod(shard) * a.dtype.itemsize
    for piece in a.pieces:
        if not shard:  # 0-d: one shard of one inner chunk
            view = np.ascontiguousarray(piece.value).reshape(())
            yield (
                array_prefix(a.param_name) + "c",
                nbytes,
                lambda view=view: _encode_shard(view, (), (), encode),
            )
            continue
        if piece.value.shape == shard and not any(piece.start):  # the whole array: one shard
            key = array_prefix(a.param_name) + "c/" + "/".join("0" * len(shard))
            yield key, nbytes, lambda view=piece.value: _encode_shard(view, shard, inner, encode)
            continue
        for index, local in _cells(piece.start, piece.value.shape, shard):
            _check_whole(a, index, piece.start, local, shard)
            key = array_prefix(a.param_name) + "c/" + "/".join(str(i) for i in index)
            view = piece.value[local]
            yield key, nbytes, lambda view=view: _encode_shard(view, shard, inner, encode)


def _encode_shard(
    view: np.ndarray,
    shard: tuple[int, ...],
    inner: tuple[int, ...],
    encode: Callable[[np.ndarray], Any],
) -> list[Any]:
    """One zarr v3 shard of shape `shard` whose part inside the array is `view`: its inner
    chunks encoded in C order, then the index (a little-endian uint64 (offset, nbytes) pair per
    inner chunk; ``2^64-1`` twice for one wholly outside the array) and its CRC-32C."""
    if view.shape == shard == inner:  # one inner chunk, inside the array: most shards
        data = encode(np.ascontiguousarray(view))
        return [data, encode_index((0, memoryview(data).nbytes))]
    present = tuple(-(-n // c) for n, c in zip(view.shape, inner, strict=True))
    parts: list[Any] = []
    index: list[int] = []
    offset = 0
    for cell in itertools.product(*(range(s // c) for s, c in zip(shard, inner, strict=True))):
        if any(c >= p for c, p in zip(cell, present, strict=True)):
            index += (EMPTY, EMPTY)
            continue
        local = tuple(slice(c * n, (c + 1) * n) for c, n in zip(cell, inner, strict=True))
        data = encode(_full(view[local], inner))
        size = memoryview(data).nbytes
        parts.append(data)
        index += (offset, size)
        offset += size
    parts.append(encode_index(index))
    return parts


def encode_window() -> int:
    """How many chunks (or shards) are encoded ahead of their writes, at most (and at most
    `ENCODE_AHEAD_BYTES` of them beyond the first)."""
    return max(2 * workers(), 4)


def write_chunks(
    sink: Sink,
    arrays: Sequence[Any],
    *,
    zarr_version: int,
    compression_level: int | None,
) -> None:
    """Encode every chunk (zarr v3: shard) of `arrays` (`_zarr_write.ArrayWrite`) and hand
    each to `sink` in order, as soon as it and those before it are encoded."""
    cells = _v2_jobs if zarr_version == 2 else _v3_jobs
    encoders = {level: _encoder(level) for level in {compression_level, None}}
    jobs = (  # lazy: a chunk that is not contiguous in its piece is copied when encoded
        job for a in arrays for job in cells(a, encoders[compression_level if a.compress else None])
    )
    window = encode_window()
    with ThreadPoolExecutor(workers(), thread_name_prefix="ockpt-encode") as pool:
        pending: deque[tuple[str, int, Any]] = deque()
        ahead = 0  # raw bytes of the pending encodings
        it = iter(jobs)
        nxt = next(it, None)
        while nxt is not None or pending:
            if not pending and nxt is not None and nxt[1] < INLINE_BYTES:
                sink(nxt[0], nxt[2]())  # a small chunk: a hand-off costs more than encoding it
                nxt = next(it, None)
                continue
            while nxt is not None and (
                not pending or (len(pending) < window and ahead + nxt[1] <= ENCODE_AHEAD_BYTES)
            ):
                key, nbytes, job = nxt
                pending.append((key, nbytes, pool.submit(job)))
                ahead += nbytes
                nxt = next(it, None)
            key, nbytes, future = pending.popleft()
            ahead -= nbytes
            sink(key, future.result())
