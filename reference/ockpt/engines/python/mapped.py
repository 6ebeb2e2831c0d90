"""Zero-copy reads of the python engine: a raw array stored as one value, viewed in place.

An array whose one chunk is the whole array (zarr v3: one shard holding one inner chunk), stored
raw (no compression, native byte order) as an out-of-line value of an OCDBT data file or as a
per-leaf chunk file, is a byte range of a local file: `map_array` returns a read-only numpy
array over the file's pages (`store.mapping`), touching no byte of it. A small value that an
OCDBT node holds inline is viewed in the node's bytes, which the lookup already read.
Everything else is refused with the reason (`MapRefused`), and the caller reads it instead or
says why it cannot.
The value is claimed as a read claims it (OCDBT-024, PATH-008) and must hold exactly the
array's bytes (a value of another length is read, and the read names the fault).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...store.mapping import FileMaps, MapRefused
from ...zarr.v3 import ArrayV3Metadata

__all__ = ["map_array"]


def _raw_pipeline(meta: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """(the codecs of the one chunk, the sharding codec or None); `MapRefused` unless the
    array is one chunk stored raw in the machine's byte order."""
    if tuple(meta.chunk_shape) != shape:
        raise MapRefused(f"it is stored in chunks of {list(meta.chunk_shape)}, not as one value")
    pipeline, sharding = meta.pipeline, None
    if isinstance(meta, ArrayV3Metadata) and meta.sharding is not None:
        sharding = meta.sharding
        if tuple(sharding.chunk_shape) != shape:
            raise MapRefused(f"its shard holds inner chunks of {list(sharding.chunk_shape)}")
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
    key = array._prefix + meta.chunk_key((0,) * len(shape))
    inline = array._store.inline_value(key)
    if inline is not None:
        if sharding is not None:
            index = sharding.decode_index(inline, shape, file=array.file, pointer="shard index")
            entry = index.get((0,) * len(shape))
            if entry is None:
                raise MapRefused("its shard stores no chunk")
            inline = inline[entry[0] : entry[0] + entry[1]]
        return _view(memoryview(inline), nbytes, shape, dtype)
    src = array._store.value_range(key)
    if src is None:
        raise MapRefused("its value is not a byte range of a local file (remote or absent)")
    with src:
        if sharding is not None:
            index = sharding.decode_index(src, shape, file=array.file, pointer="shard index")
            entry = index.get((0,) * len(shape))
            if entry is None:
                raise MapRefused("its shard stores no chunk")
            src = src.part(*entry)
        if len(src) != nbytes:
            raise MapRefused(f"its value holds {len(src)} bytes, not {nbytes}")
        if src.offset % dtype.alignment:
            raise MapRefused(
                f"its value starts at offset {src.offset}, not a multiple of {dtype.alignment}"
            )
        return _view(maps.view(src), nbytes, shape, dtype)


def _view(data: memoryview, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """`data` (exactly `nbytes`) as a read-only array of `shape` and `dtype`, no copy."""
    if data.nbytes != nbytes:
        raise MapRefused(f"its value holds {data.nbytes} bytes, not {nbytes}")
    out = np.frombuffer(data, dtype=dtype, count=math.prod(shape)).reshape(shape)
    out.flags.writeable = False
    return out
