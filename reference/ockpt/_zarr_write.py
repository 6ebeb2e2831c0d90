"""Writing zarr arrays with the settings Orbax uses, with ockpt's own encoders.

Each array is a zarr array (v2, or v3 with the ``sharding_indexed`` codec) named by its param
name, either in the writing process's OCDBT database ``ocdbt.process_<N>/`` or in a plain
directory ``<param name>/`` of the item; `_chunkwrite` encodes the chunks, `ocdbt.write` the
databases. After every process has written, the primary merges the per-process databases into
the root database of the item (`merge_databases`): the root's B+tree then refers to the data
files of the per-process databases, nothing is copied.

`chunk_shape_for` and `zarr_metadata` are pure (no I/O). Nothing here imports jax or
tensorstore.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _chunkwrite, _gc, dtypes
from .names import MANIFEST_FILE, ZARR2_METADATA, ZARR3_METADATA
from .ocdbt import write as write_ocdbt
from .ocdbt.tree import Database
from .ocdbt.write import DatabaseWriter, Entry
from .paths import array_prefix
from .store import NewFile, Store
from .store.inflight import BackgroundWriter
from .zarr import ArrayMetadata
from .zarr.v2 import ArrayV2Metadata
from .zarr.v3 import ArrayV3Metadata

__all__ = [
    "ZSTD_LEVEL",
    "Piece",
    "ArrayWrite",
    "zarr_metadata",
    "chunk_shape_for",
    "shard_shape_for",
    "process_dir",
    "write_arrays",
    "merge_databases",
]

#: Default zstd level per zarr version (what Orbax 0.12.8 writes).
ZSTD_LEVEL = {2: 1, 3: 3}


def process_dir(process_index: int) -> str:
    return f"ocdbt.process_{process_index}"


@dataclass(frozen=True)
class Piece:
    """One region of an array, held on the host: ``value`` goes to ``array[start:start+shape]``."""

    start: tuple[int, ...]
    value: np.ndarray


@dataclass(frozen=True)
class ArrayWrite:
    """What one process writes of one array."""

    param_name: str
    shape: tuple[int, ...]
    dtype: np.dtype  # the storage dtype
    chunk_shape: tuple[int, ...]  # the zarr chunk grid (v3: the inner chunk)
    write_shape: tuple[int, ...]  # v3: the shard (outer chunk)
    pieces: tuple[Piece, ...]
    write_metadata: bool  # the primary writes the zarr metadata once
    compress: bool = True  # False: chunks stored uncompressed (compression="auto", WRITE-015)


#: Without a caller's limit, slices above this are divided into chunks of at most this size,
#: unless that leaves chunks under `MIN_DEFAULT_CHUNK_BYTES` (WRITE-016).
DEFAULT_MAX_CHUNK_BYTES = 64 << 20
MIN_DEFAULT_CHUNK_BYTES = 1 << 20


def chunk_shape_for(
    write_shape: Sequence[int],
    itemsize: int,
    chunk_byte_size: int | None,
    *,
    array_shape: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The chunk shape of an array of `array_shape` written in slices of `write_shape`
    (WRITE-010), as Orbax 0.12.8 chooses it.

    With a byte limit, the chunk starts as the slice and, while it holds more than
    `chunk_byte_size` bytes, one dimension is lowered to the next smaller divisor of the slice's
    size in that dimension: the largest dimension among those in which the slice is smaller
    than the array (the sharded ones) while any of them is above 1, then the largest of all;
    the lowest index on ties. Chunk edges so stay on slice edges. A limit below one element
    is refused, as Orbax refuses it. Without a limit, the chunk is the slice, divided the same
    way to `DEFAULT_MAX_CHUNK_BYTES` when that keeps chunks of a useful size (WRITE-016).
    `array_shape` None: the slice is the whole array (no sharded dimension).
    """
    whole = tuple(int(n) for n in write_shape)
    full = whole if array_shape is None else tuple(int(n) for n in array_shape)
    if chunk_byte_size is None:
        if math.prod(whole) * itemsize <= DEFAULT_MAX_CHUNK_BYTES:
            return whole
        divided = _divide(whole, full, itemsize, DEFAULT_MAX_CHUNK_BYTES)
        return divided if math.prod(divided) * itemsize >= MIN_DEFAULT_CHUNK_BYTES else whole
    if chunk_byte_size < itemsize:
        raise ValueError(
            f"chunk_byte_size={chunk_byte_size} is smaller than one {itemsize}-byte element: "
            "no chunk can hold it (WRITE-010)"
        )
    return _divide(whole, full, itemsize, chunk_byte_size)


def shard_shape_for(
    write_shape: Sequence[int], chunk_shape: Sequence[int], chunk_byte_size: int | None
) -> tuple[int, ...]:
    """The zarr v3 outer chunk (shard) of an array written in slices of `write_shape`: the
    chunk itself, one inner chunk per shard, as Orbax 0.12.8 writes it with and without
    `chunk_byte_size` (WRITE-010), so that no stored value exceeds a caller's limit or
    `DEFAULT_MAX_CHUNK_BYTES` (WRITE-016). zarr v2 ignores it."""
    del write_shape, chunk_byte_size  # the chunk already lies on slice edges
    return tuple(int(n) for n in chunk_shape)


def _divisors(n: int) -> list[int]:
    """The divisors of n (n >= 1), ascending."""
    low, high = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            low.append(d)
            if d != n // d:
                high.append(n // d)
    return low + high[::-1]


def _divide(
    write_shape: Sequence[int], array_shape: Sequence[int], itemsize: int, limit: int
) -> tuple[int, ...]:
    slice_shape = [max(1, int(n)) for n in write_shape]
    chunk = list(slice_shape)
    pairs = zip(write_shape, array_shape, strict=True)
    sharded = [i for i, (w, a) in enumerate(pairs) if int(w) < int(a)]
    options = [_divisors(n) for n in slice_shape]  # each ends with the slice's own size
    while math.prod(chunk) * itemsize > limit:
        splittable = [i for i in sharded if chunk[i] > 1] or [
            i for i, n in enumerate(chunk) if n > 1
        ]
        if not splittable:
            break
        i = max(splittable, key=lambda j: (chunk[j], -j))
        options[i].pop()
        chunk[i] = options[i][-1]
    return tuple(chunk)


def zarr_metadata(
    *,
    zarr_version: int,
    shape: Sequence[int],
    dtype: np.dtype,
    chunk_shape: Sequence[int],
    write_shape: Sequence[int],
    compression_level: int | None,
) -> ArrayMetadata:
    """The zarr metadata of one array (WRITE-011, WRITE-012), as the model the reader parses
    (`zarr.v2` / `zarr.v3`: built from its JSON form, so the writer's metadata passes the
    reader's own checks first). `compression_level` None means no compression."""
    if zarr_version == 2:
        return ArrayV2Metadata.from_dict(_v2_dict(shape, dtype, chunk_shape, compression_level))
    return ArrayV3Metadata.from_dict(
        _v3_dict(shape, dtype, chunk_shape, write_shape, compression_level)
    )


def _v2_dict(
    shape: Sequence[int], dtype: np.dtype, chunk_shape: Sequence[int], level: int | None
) -> dict[str, Any]:
    """The ``.zarray`` of an array as tensorstore writes it for Orbax (WRITE-011)."""
    return {
        "zarr_format": 2,
        "shape": [int(n) for n in shape],
        "chunks": [int(n) for n in chunk_shape],
        "dtype": dtypes.to_zarr_v2(dtype),
        "compressor": None if level is None else {"id": "zstd", "level": level},
        "fill_value": None,
        "filters": None,
        "order": "C",
        "dimension_separator": ".",
    }


def _v3_dict(
    shape: Sequence[int],
    dtype: np.dtype,
    chunk_shape: Sequence[int],
    write_shape: Sequence[int],
    level: int | None,
) -> dict[str, Any]:
    """The ``zarr.json`` of an array as tensorstore writes it for Orbax (WRITE-012): one shard
    per write shape, inner chunks of `chunk_shape`."""
    inner: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if np.dtype(dtype).itemsize == 1:  # no byte order to state (tensorstore omits it)
        inner = [{"name": "bytes"}]
    if level is not None:
        inner.append({"name": "zstd", "configuration": {"level": level, "checksum": False}})
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [int(n) for n in shape],
        "data_type": dtypes.to_zarr_v3(dtype),
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [int(n) for n in write_shape]},
        },
        "chunk_key_encoding": {"name": "default"},
        "fill_value": _v3_fill(dtype),
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [int(n) for n in chunk_shape],
                    "codecs": inner,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                },
            }
        ],
    }


def _v3_fill(dtype: np.dtype) -> Any:
    """The zero fill value as tensorstore writes it for the data type (int4 included)."""
    name = dtypes.dtype_name(np.dtype(dtype))
    if name == "bool":
        return False
    if name.startswith(("int", "uint")):
        return 0
    if name.startswith("complex"):
        return [0.0, 0.0]
    return 0.0


def write_arrays(
    item: Store,
    arrays: Iterable[ArrayWrite],
    *,
    use_ocdbt: bool,
    zarr_version: int,
    compression_level: int | None,
    process_index: int,
) -> list[Entry] | None:
    """Write this process's pieces of every array (and, where asked, their zarr metadata): as
    the values of the process's new OCDBT database ``ocdbt.process_<N>/`` (WRITE-014), whose
    entries are returned (for `merge_databases`), or as files of the zarr directory
    ``<param name>/`` of each array."""
    arrays = list(arrays)
    name = ZARR2_METADATA if zarr_version == 2 else ZARR3_METADATA
    stored: dict[tuple, bytes] = {}  # arrays of one shape and dtype share one document
    documents = {}
    for a in arrays:
        if not a.write_metadata:
            continue
        level = compression_level if a.compress else None
        which = (a.shape, a.dtype, a.chunk_shape, a.write_shape, level)
        if which not in stored:
            stored[which] = stored_metadata(
                zarr_metadata(
                    zarr_version=zarr_version,
                    shape=a.shape,
                    dtype=a.dtype,
                    chunk_shape=a.chunk_shape,
                    write_shape=a.write_shape,
                    compression_level=level,
                )
            )
        documents[array_prefix(a.param_name) + name] = stored[which]
    database = None
    files = BackgroundWriter()  # writes overlap encoding; flushed at commit (DIR-004)

    def open_file(key: str) -> NewFile:
        return item.writer(key, background=files)

    if use_ocdbt:
        database = DatabaseWriter(process_dir(process_index), open_file=open_file)

        def sink(key: str, parts: list[Any]) -> None:
            database.put(key.encode(), parts)
    else:

        def sink(key: str, parts: list[Any]) -> None:
            file = open_file(key)
            file.append(parts)
            file.close()

    try:
        for key, data in documents.items():
            sink(key, [data])
        _chunkwrite.write_chunks(
            sink, arrays, zarr_version=zarr_version, compression_level=compression_level
        )
        if database is None:
            return None
        with _gc.paused():  # the B+tree: an entry per key, no large writes
            return database.commit()
    finally:
        if database is not None:
            database.close()  # after a failure: its last data file
        files.finish()


def stored_metadata(metadata: ArrayMetadata) -> bytes:
    """A zarr metadata model (`zarr_metadata`) as tensorstore's zarr drivers store its
    ``to_dict``: keys sorted, no spaces."""
    return json.dumps(metadata.to_dict(), sort_keys=True, separators=(",", ":")).encode()


def merge_databases(
    item: Store, process_indices: Iterable[int], *, known: Mapping[int, list[Entry]]
) -> None:
    """Write the item's root OCDBT database as the union of the per-process databases: its
    B+tree refers to the values where each process wrote them (``ocdbt.process_<N>/d/``);
    nothing is copied but the inline values. `known`: the entries of databases this process
    wrote (`write_arrays`), taken as they are; the others are read from their files."""
    root = DatabaseWriter("", open_file=item.writer)
    for p in sorted(set(process_indices)):
        base = item.child(process_dir(p))
        if p in known:
            write_ocdbt.merge(root, [((process_dir(p) + "/").encode(), known[p])])
        elif base.exists(MANIFEST_FILE):
            with Database(base) as database:
                write_ocdbt.merge(root, [((process_dir(p) + "/").encode(), database.entries())])
    root.commit()
