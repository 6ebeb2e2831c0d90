"""Reading a region of a zarr array from a key-value getter, touching only the chunks it needs.

`get(key) -> bytes | None` is any key-value lookup (an OCDBT database, a directory); keys are
the array's key prefix plus its metadata or chunk key. A chunk the getter lacks reads as the
fill value, or is an error when the checkpoint promises every chunk is stored (`missing="error"`,
from `_METADATA.store_array_data_equal_to_fill_value`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, Union

import numpy as np

from ..errors import MissingDataError
from ..limits import Limits
from ..limits import current as limits_in_force
from ..names import ZARR2_METADATA, ZARR3_METADATA
from .shard_index import ShardingCodec
from .v2 import ArrayV2Metadata
from .v3 import ArrayV3Metadata

__all__ = [
    "ArrayMetadata",
    "Getter",
    "open_metadata",
    "read_region",
    "chunks_for_region",
    "missing_chunk",
    "overlap",
]

ArrayMetadata = Union[ArrayV2Metadata, ArrayV3Metadata]  # noqa: UP007
Getter = Callable[[str], "bytes | None"]
Box = Sequence[tuple[int, int]]


def open_metadata(
    get: Getter, *, prefix: str = "", file: object = None, zarr_version: int | None = None
) -> ArrayMetadata | None:
    """The array's metadata (``.zarray`` first, then ``zarr.json``); None when neither exists."""
    for version in _VERSIONS[zarr_version]:
        key = prefix + (ZARR2_METADATA if version == 2 else ZARR3_METADATA)
        data = get(key)
        if data is None:
            continue
        cls = ArrayV2Metadata if version == 2 else ArrayV3Metadata
        memo = (cls, bytes(data), limits_in_force())  # parsed again under other limits
        hit = _PARSED.get(memo)
        if hit is None:
            where = f"{file}/{key}" if file is not None else key
            hit = cls.from_bytes(data, file=where)
            if len(_PARSED) >= _PARSED_KEEP:
                _PARSED.clear()
            _PARSED[memo] = hit
        return hit
    return None


#: The zarr versions `open_metadata` looks for, in order, by the version it is given.
_VERSIONS = {2: (2,), 3: (3,), None: (2, 3)}

# Parsed metadata by document bytes: the arrays of a model repeat a few shapes (one per
# parameter of a layer), so opening thousands of arrays parses each distinct document once.
# The models are immutable.
_PARSED: dict[tuple[type, bytes, Limits], ArrayMetadata] = {}
_PARSED_KEEP = 4096


def check_box(meta: ArrayMetadata, box: Box | None, file: object) -> list[tuple[int, int]]:
    """`box` as a list of (start, stop), the whole array when None; ValueError naming `file`
    when it is not within the shape."""
    if box is None:
        return [(0, n) for n in meta.shape]
    box = [tuple(b) for b in box]  # type: ignore[misc]
    if len(box) != len(meta.shape) or any(
        not (0 <= a <= b <= n) for (a, b), n in zip(box, meta.shape, strict=False)
    ):
        raise ValueError(f"{file}: region {box} is not within shape {list(meta.shape)}")
    return box  # type: ignore[return-value]


def chunks_for_region(meta: ArrayMetadata, box: Box | None = None) -> Iterator[tuple[int, ...]]:
    """The grid indices of the (outer) chunks a region overlaps, in C order, made as they are
    consumed (a grid may hold 2^24 chunks)."""
    box = check_box(meta, box, None)
    if any(a == b for a, b in box):
        return iter(())
    ranges = [range(a // c, -(-b // c)) for (a, b), c in zip(box, meta.chunk_shape, strict=False)]
    return itertools.product(*ranges)


def grid_index(meta: ArrayMetadata, key: str, grid: tuple[int, ...]) -> tuple[int, ...] | None:
    """The grid index of the chunk key `key` (relative to the array) of `meta`'s grid `grid`,
    or None for a key that names no chunk (not the canonical key of an index, or outside the
    grid)."""
    parts = re.findall(r"[0-9]+", key) if grid else []
    if any(len(p) > 19 for p in parts):  # no grid index of this reader has more digits
        return None
    index = tuple(int(p) for p in parts)
    if len(index) != len(grid) or any(not 0 <= i < g for i, g in zip(index, grid, strict=True)):
        return None
    return index if meta.chunk_key(index) == key else None


def overlap(box, lo, size):
    """Per dimension: (target slice in out, source slice in the chunk)."""
    target, source = [], []
    for (a, b), low, c in zip(box, lo, size, strict=False):
        s, e = max(a, low), min(b, low + c)
        target.append(slice(s - a, e - a))
        source.append(slice(s - low, e - low))
    return tuple(target), tuple(source)


def missing_chunk(file: object, what: str) -> MissingDataError:
    """The error for a chunk (`what`, in `file`: the chunk's or the shard's key) that is absent
    where the checkpoint stores every chunk."""
    return MissingDataError(
        f"{what} is missing and the checkpoint stores every chunk "
        "(store_array_data_equal_to_fill_value; ZARR-008)",
        rule="LOAD-041",
        file=file,
    )


def read_region(
    meta: ArrayMetadata,
    get: Getter,
    out: np.ndarray,
    box: Box | None = None,
    *,
    prefix: str = "",
    missing: Literal["fill", "error"] = "fill",
    file: object = None,
) -> np.ndarray:
    """Fill `out` (shape = the region's shape) with the region `box` ((start, stop) per dim)."""
    box = check_box(meta, box, file)
    want = tuple(b - a for a, b in box)
    if tuple(out.shape) != want:
        raise ValueError(f"{file}: out has shape {out.shape}, region has shape {want}")
    if any(n == 0 for n in want):
        # An empty region, or a zero-size array (ZARR-009): its grid has no chunk, so nothing
        # is read and nothing is missing, also with missing="error".
        return out
    chunk = meta.chunk_shape
    dtype = meta.numpy_dtype
    sharding = meta.sharding if isinstance(meta, ArrayV3Metadata) else None
    for index in chunks_for_region(meta, box):
        lo = tuple(i * c for i, c in zip(index, chunk, strict=False))
        key = prefix + meta.chunk_key(index)
        where = f"{file}/{key}" if file is not None else key
        target, source = overlap(box, lo, chunk)
        data = get(key)
        if data is None:
            if missing == "error":
                raise missing_chunk(where, f"chunk {list(index)}")
            out[target] = meta.fill
            continue
        if sharding is not None:
            _read_shard(meta, sharding, data, index, box, out, where, missing)
            continue
        decoded = meta.pipeline.decode(data, chunk, dtype, file=where, pointer=None)
        out[target] = decoded[source]
    return out


def _read_shard(meta, sharding: ShardingCodec, data: bytes, index, box, out, where, missing):
    shard_shape = meta.chunk_shape
    shard_lo = tuple(i * c for i, c in zip(index, shard_shape, strict=False))
    inner = sharding.chunk_shape
    idx = sharding.decode_index(data, shard_shape, file=where, pointer="shard index")
    # the region relative to the shard, clipped to it
    rel = [
        (max(a - low, 0), min(b - low, s))
        for (a, b), low, s in zip(box, shard_lo, shard_shape, strict=False)
    ]
    ranges = [range(a // c, -(-b // c)) for (a, b), c in zip(rel, inner, strict=False)]
    for sub in itertools.product(*ranges):
        lo = tuple(sl + i * c for sl, i, c in zip(shard_lo, sub, inner, strict=False))
        target, source = overlap(box, lo, inner)
        entry = idx.get(sub)
        if entry is None:
            if missing == "error":
                raise missing_chunk(where, f"inner chunk {list(sub)} of the shard")
            out[target] = meta.fill
            continue
        off, nbytes = entry
        piece = data[off : off + nbytes]
        decoded = sharding.codecs.decode(
            piece, inner, meta.numpy_dtype, file=where, pointer=f"inner chunk {list(sub)}"
        )
        out[target] = decoded[source]
