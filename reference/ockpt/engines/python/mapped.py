"""Zero-copy reads of the python engine: a raw array viewed in its files' pages.

An array whose one chunk is the whole array (zarr v3: one shard holding one inner chunk), stored
raw (no compression, native byte order) as an out-of-line value of an OCDBT data file or as a
per-leaf chunk file, is a byte range of a local file: `map_array` returns a read-only numpy
array over the file's pages (`store.mapping`), touching no byte of it. An array stored in chunks
of whole rows, each starting on a page of its file (ockpt's writer places values of 1 MiB or
more so; Orbax's per-process files often hold one chunk each), is mapped chunk after chunk into
one view (`store.mapping.assemble`). A small value that an
OCDBT node holds inline is viewed in the node's bytes, which the lookup already read.
Everything else is refused with the reason (`MapRefused`), and the caller reads it instead or
says why it cannot.
The value is claimed as a read claims it (OCDBT-024, PATH-008) and must hold exactly the
array's bytes (a value of another length is read, and the read names the fault).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from ...store.mapping import FileMaps, MapRefused, assemble
from ...zarr.v3 import ArrayV3Metadata

__all__ = ["map_array"]


#: An array of more chunks than this is read, not assembled from one mapping per chunk (the
#: process's count of mappings is bounded: 65530 by default on Linux).
MAX_CHUNKS = 1024


def _raw_pipeline(meta: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """(the codecs of a chunk, the sharding codec or None); `MapRefused` unless the array's
    chunks are stored raw in the machine's byte order, each spanning every dimension but the
    first (so that side by side they are the array's bytes)."""
    chunk = tuple(meta.chunk_shape)
    if chunk[1:] != shape[1:]:
        raise MapRefused(f"it is stored in chunks of {list(chunk)}, which split more than rows")
    pipeline, sharding = meta.pipeline, None
    if isinstance(meta, ArrayV3Metadata) and meta.sharding is not None:
        sharding = meta.sharding
        if tuple(sharding.chunk_shape) != chunk:
            raise MapRefused(f"its shards hold inner chunks of {list(sharding.chunk_shape)}")
        pipeline = sharding.codecs
    if pipeline.array_to_array:
        raise MapRefused("its chunk is stored transposed")
    if pipeline.bytes_to_bytes:
        names = ", ".join(getattr(c, "name", type(c).__name__) for c in pipeline.bytes_to_bytes)
        raise MapRefused(f"it is stored encoded ({names})")
    endian = getattr(pipeline.array_to_bytes, "endian", None)
    if meta.numpy_dtype.itemsize > 1 and endian != ("little" if np.little_endian else "big"):
        raise MapRefused(f"it is stored {endian}-endian")
    return pipeline, sharding


def map_array(array: Any, maps: FileMaps) -> np.ndarray:
    """The whole of the python engine's `StoredArray` `array` as a read-only array over its
    file's pages (a value an OCDBT node holds inline: over the node's bytes, already in
    memory); `MapRefused` (with the reason) where it is not one raw value."""
    meta, shape, dtype = array.metadata, tuple(array.shape), array.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        raise MapRefused("it holds no element")
    _, sharding = _raw_pipeline(meta, shape)
    if tuple(meta.chunk_shape) != shape:
        return _assembled(array, sharding, nbytes)
    key = array._prefix + meta.chunk_key((0,) * len(shape))
    inline = array._store.inline_value(key)
    if inline is not None:
        if sharding is not None:
            at, length = _inner_chunk(sharding, inline, shape, array.file, key)
            inline = inline[at : at + length]
        return _view(memoryview(inline), nbytes, shape, dtype)
    src = array._store.value_range(key)
    if src is None:
        raise MapRefused("its value is not a byte range of a local file (remote or absent)")
    with src:
        if sharding is not None:
            src = src.part(*_inner_chunk(sharding, src, shape, array.file, key))
        if len(src) != nbytes:
            raise MapRefused(f"its value holds {len(src)} bytes, not {nbytes}")
        if src.offset % dtype.alignment:
            raise MapRefused(
                f"its value starts at offset {src.offset}, not a multiple of {dtype.alignment}"
            )
        return _view(maps.view(src), nbytes, shape, dtype)


def _assembled(array: Any, sharding: Any, nbytes: int) -> np.ndarray:
    """An array stored in chunks of whole rows, each an out-of-line value starting on a page of
    its file, mapped chunk after chunk into one view (`store.mapping.assemble`)."""
    meta, shape, dtype = array.metadata, tuple(array.shape), array.dtype
    rows = meta.chunk_shape[0]
    count = -(-shape[0] // rows)
    if count > MAX_CHUNKS:
        raise MapRefused(f"it is stored in {count} chunks (at most {MAX_CHUNKS} are mapped)")
    chunk_bytes = nbytes // shape[0] * rows  # a stored chunk is whole, the last one too
    with contextlib.ExitStack() as opened:
        parts = []
        for i in range(count):
            index = (i,) + (0,) * (len(shape) - 1)
            key = array._prefix + meta.chunk_key(index)
            src = array._store.value_range(key)
            if src is None:
                raise MapRefused(f"chunk {key!r} is no byte range of a local file")
            opened.enter_context(src)
            if sharding is not None:
                src = src.part(*_inner_chunk(sharding, src, meta.chunk_shape, array.file, key))
            if len(src) != chunk_bytes:
                raise MapRefused(f"chunk {key!r} holds {len(src)} bytes, not {chunk_bytes}")
            parts.append((src, min(chunk_bytes, nbytes - i * chunk_bytes)))
        return _view(assemble(parts), nbytes, shape, dtype)


def _inner_chunk(
    sharding: Any, shard: Any, chunk: tuple[int, ...], file: str, key: str
) -> tuple[int, int]:
    """(offset, length) of the one inner chunk of the shard `shard` (bytes or a file range)."""
    entry = sharding.decode_index(shard, tuple(chunk), file=file, pointer=key).get(
        (0,) * len(chunk)
    )
    if entry is None:
        raise MapRefused(f"the shard {key!r} stores no chunk")
    return entry


def _view(data: memoryview, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """`data` (exactly `nbytes`) as a read-only array of `shape` and `dtype`, no copy."""
    if data.nbytes != nbytes:
        raise MapRefused(f"its value holds {data.nbytes} bytes, not {nbytes}")
    out = np.frombuffer(data, dtype=dtype, count=math.prod(shape)).reshape(shape)
    out.flags.writeable = False
    return out
