"""Writing zarr v2 chunks into an OCDBT database without tensorstore's zarr driver.

`_ts_write` creates each array's ``.zarray`` with tensorstore, then hands the chunks of the
arrays this module can encode here: plain little-endian numeric dtypes, zarr v2, OCDBT. Each
chunk (C-order bytes of the full chunk, an edge chunk padded with zeros, then one zstd frame
unless the array is stored raw) is encoded in a pool of one thread per core (``zstandard`` and
numpy copies release the GIL) and written as the value ``<param name>/<i>.<j>...`` of the
process's database through tensorstore's OCDBT key-value store, in transactions of about
`BATCH_BYTES`, so the encoded bytes held at once stay bounded. The stored bytes are those of
tensorstore's zarr driver: the same zarr arrays (WRITE-011), every chunk stored (WRITE-013).
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["direct", "write_chunks"]

#: Encoded bytes per OCDBT transaction (at most two are held: one committing, one filling).
BATCH_BYTES = 64 << 20


def direct(dtype: np.dtype, *, zarr_version: int, use_ocdbt: bool) -> bool:
    """Whether the chunks of an array of `dtype` are written here."""
    dtype = np.dtype(dtype)
    return (
        zarr_version == 2
        and use_ocdbt
        and dtype.kind in "biufc"
        and type(dtype).__module__.startswith("numpy")
        and (dtype.byteorder in "=|<")
        and (dtype.byteorder != "=" or np.little_endian)
    )


def _chunks(a: Any) -> Iterator[tuple[str, np.ndarray]]:
    """(key, full-size C-contiguous chunk) for every chunk of every piece of `a`."""
    chunk = tuple(int(c) for c in a.chunk_shape)
    for piece in a.pieces:
        value = piece.value
        if not chunk:  # 0-d
            yield f"{a.param_name}/0", np.ascontiguousarray(value).reshape(())
            continue
        ranges = [
            range(s // c, -(-(s + n) // c))
            for s, n, c in zip(piece.start, value.shape, chunk, strict=True)
        ]
        for index in itertools.product(*ranges):
            lo = [i * c for i, c in zip(index, chunk, strict=True)]
            local = tuple(
                slice(low - s, min(low + c, s + n) - s)
                for low, s, n, c in zip(lo, piece.start, value.shape, chunk, strict=True)
            )
            part = value[local]
            if part.shape != chunk:  # an edge chunk: zarr v2 stores it full size
                full = np.zeros(chunk, dtype=value.dtype)
                full[tuple(slice(0, n) for n in part.shape)] = part
                part = full
            key = a.param_name + "/" + ".".join(str(i) for i in index)
            yield key, np.ascontiguousarray(part)


def _encoder(level: int | None):  # type: ignore[no-untyped-def]
    import zstandard

    if level is None:
        return lambda chunk: chunk.tobytes()
    return lambda chunk: zstandard.ZstdCompressor(level=level).compress(
        memoryview(chunk.reshape(-1).view(np.uint8))
    )


def write_chunks(
    kvstore: Any,
    arrays: Sequence[Any],
    *,
    compression_level: int | None,
    transaction: Any,
) -> None:
    """Encode and write every chunk of `arrays` (`_ts_write.ArrayWrite`) into `kvstore` (the
    process's OCDBT database, tensorstore); `transaction` is ``tensorstore.Transaction``."""
    jobs = (  # lazy: a chunk that is not contiguous in its piece is copied when reached
        (key, chunk, _encoder(compression_level if a.compress else None))
        for a in arrays
        for key, chunk in _chunks(a)
    )
    try:
        workers = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        workers = max(1, os.cpu_count() or 1)
    previous: tuple[Any, list[Any]] | None = None  # the batch being committed

    def finish(batch: tuple[Any, list[Any]] | None) -> None:
        if batch is not None:
            batch[0].result()
            for w in batch[1]:
                w.result()

    txn = transaction(atomic=False)
    target = kvstore.with_transaction(txn)
    writes: list[Any] = []
    held = 0
    window = max(2 * workers, 4)  # encodings ahead of the writes: bounded memory
    with ThreadPoolExecutor(workers, thread_name_prefix="ockpt-encode") as pool:
        it = iter(jobs)
        pending = deque(
            (key, pool.submit(encode, chunk)) for key, chunk, encode in itertools.islice(it, window)
        )
        while pending:
            key, future = pending.popleft()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt[0], pool.submit(nxt[2], nxt[1])))
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
