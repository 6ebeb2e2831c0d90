"""Writing zarr chunks into an OCDBT database without tensorstore's zarr drivers.

`_ts_write` creates each array's zarr metadata with tensorstore, then hands the chunks of the
arrays this module can encode here: plain little-endian numeric dtypes, OCDBT, zarr v2 or
zarr v3 whose shards tile the written pieces. Each zarr v2 chunk (C-order bytes of the full
chunk, an edge chunk padded with zeros, then one zstd frame unless the array is stored raw) or
zarr v3 shard (its inner chunks so encoded, in C order, then the index of (offset, nbytes)
pairs and its CRC-32C) is encoded in a pool of one thread per core (``zstandard``, numpy
copies and the CRC release the GIL) and written as one value of the process's database
through tensorstore's OCDBT key-value store, in transactions of about `BATCH_BYTES`, so the
encoded bytes held at once stay bounded. The stored bytes are those of tensorstore's zarr
drivers: the same zarr arrays (WRITE-011, WRITE-012), every chunk stored (WRITE-013).
"""

from __future__ import annotations

import itertools
import struct
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .engines.python.fastread import workers  # one thread per core, as the reader
from .paths import array_prefix

__all__ = ["direct", "encode_window", "write_chunks"]

#: Encoded bytes per OCDBT transaction (at most two are held: one committing, one filling).
BATCH_BYTES = 64 << 20


def direct(a: Any, *, zarr_version: int, use_ocdbt: bool) -> bool:
    """Whether the chunks of the array write `a` (`_ts_write.ArrayWrite`) are written here."""
    dtype = np.dtype(a.dtype)
    plain = (
        use_ocdbt
        and dtype.kind in "biufc"
        and type(dtype).__module__.startswith("numpy")
        and (dtype.byteorder in "=|<")
        and (dtype.byteorder != "=" or np.little_endian)
    )
    if not plain or zarr_version == 2:
        return plain
    return bool(a.shape) and all(_tiles(a, piece) for piece in a.pieces)


def _tiles(a: Any, piece: Any) -> bool:
    """Whether a piece is a whole number of zarr v3 shards (none crossing the array's edge)."""
    return all(
        s % w == 0 and n % w == 0
        for s, n, w in zip(piece.start, piece.value.shape, a.write_shape, strict=True)
    )


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


def _v2_jobs(a: Any, encode: Callable[[np.ndarray], bytes]) -> Iterator[tuple[str, Any]]:
    """(key, encoding job) for every zarr v2 chunk of every piece of `a`."""
    chunk = tuple(int(c) for c in a.chunk_shape)
    for piece in a.pieces:
        value = piece.value
        if not chunk:  # 0-d
            part = np.ascontiguousarray(value).reshape(())
            yield array_prefix(a.param_name) + "0", lambda part=part: encode(part)
            continue
        for index, local in _cells(piece.start, value.shape, chunk):
            key = array_prefix(a.param_name) + ".".join(str(i) for i in index)
            yield key, lambda local=local, value=value: encode(_full(value[local], chunk))


def _v3_jobs(a: Any, encode: Callable[[np.ndarray], bytes]) -> Iterator[tuple[str, Any]]:
    """(key, encoding job) for every zarr v3 shard of every piece of `a`."""
    shard = tuple(int(c) for c in a.write_shape)
    inner = tuple(int(c) for c in a.chunk_shape)
    for piece in a.pieces:
        for index, local in _cells(piece.start, piece.value.shape, shard):
            key = array_prefix(a.param_name) + "c/" + "/".join(str(i) for i in index)
            view = piece.value[local]
            yield key, lambda view=view: _encode_shard(view, inner, encode)


def _full(part: np.ndarray, chunk: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous chunk of the full chunk shape (an edge chunk padded with zeros)."""
    if part.shape != chunk:
        full = np.zeros(chunk, dtype=part.dtype)
        full[tuple(slice(0, n) for n in part.shape)] = part
        part = full
    return np.ascontiguousarray(part)


def _encode_shard(
    shard: np.ndarray, inner: tuple[int, ...], encode: Callable[[np.ndarray], bytes]
) -> bytes:
    """One zarr v3 shard: its inner chunks encoded in C order, then the index (a little-endian
    uint64 (offset, nbytes) pair per inner chunk) and the index's CRC-32C."""
    from .ocdbt.format import crc32c

    parts, index, offset = [], [], 0
    for _, local in _cells((0,) * shard.ndim, shard.shape, inner):
        data = encode(np.ascontiguousarray(shard[local]))
        parts.append(data)
        index.append((offset, len(data)))
        offset += len(data)
    table = struct.pack(f"<{2 * len(index)}Q", *itertools.chain.from_iterable(index))
    return b"".join([*parts, table, struct.pack("<I", crc32c(table))])


def _encoder(level: int | None) -> Callable[[np.ndarray], bytes]:
    import zstandard

    if level is None:
        return lambda chunk: chunk.tobytes()
    return lambda chunk: zstandard.ZstdCompressor(level=level).compress(
        memoryview(chunk.reshape(-1).view(np.uint8))
    )


def encode_window() -> int:
    """How many chunks (or shards) are encoded ahead of their writes: the encoded bytes held
    at once are at most one more than this many of the largest, plus a transaction of
    `BATCH_BYTES`."""
    return max(2 * workers(), 4)


def write_chunks(
    kvstore: Any,
    arrays: Sequence[Any],
    *,
    documents: Mapping[str, bytes],
    zarr_version: int,
    compression_level: int | None,
    transaction: Any,
) -> None:
    """Write `documents` (key -> zarr metadata bytes) and encode and write every chunk (zarr
    v3: shard) of `arrays` (`_ts_write.ArrayWrite`) into `kvstore` (the process's OCDBT
    database, tensorstore); `transaction` is ``tensorstore.Transaction``."""
    cells = _v2_jobs if zarr_version == 2 else _v3_jobs
    jobs = (  # lazy: a chunk that is not contiguous in its piece is copied when encoded
        job for a in arrays for job in cells(a, _encoder(compression_level if a.compress else None))
    )
    threads = workers()
    previous: tuple[Any, list[Any]] | None = None  # the batch being committed

    def finish(batch: tuple[Any, list[Any]] | None) -> None:
        if batch is not None:
            batch[0].result()
            for w in batch[1]:
                w.result()

    txn = transaction(atomic=False)
    target = kvstore.with_transaction(txn)
    writes: list[Any] = [target.write(key, data) for key, data in documents.items()]
    held = 0
    window = encode_window()  # encodings ahead of the writes: bounded memory
    with ThreadPoolExecutor(threads, thread_name_prefix="ockpt-encode") as pool:
        it = iter(jobs)
        pending = deque((key, pool.submit(job)) for key, job in itertools.islice(it, window))
        while pending:
            key, future = pending.popleft()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt[0], pool.submit(nxt[1])))
            data = future.result()
            writes.append(target.write(key, data))
            held += len(data)
            del data
            if held >= BATCH_BYTES:
                finish(previous)
                previous = (txn.commit_async(), writes)
                txn = transaction(atomic=False)
                target = kvstore.with_transaction(txn)
                writes, held = [], 0
    finish(previous)
    finish((txn.commit_async(), writes))
