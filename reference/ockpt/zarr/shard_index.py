"""The zarr v3 ``sharding_indexed`` codec: its configuration and its shard index (spec/arrays.md).

A shard is the stored value of one outer chunk: the encoded inner chunks, then (or, with
``index_location: "start"``, before them) an index of one ``(offset, nbytes)`` pair of uint64
little-endian per inner chunk in C order, followed by the CRC-32C of those pairs when the index
codecs end with ``crc32c``. A pair of two 2**64-1 marks an inner chunk that is not stored.

This module registers ``sharding_indexed`` in `codecs.CODECS` (the inner and index codecs are
parsed by `codecs.parse_codecs`; `codecs` never imports this module).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._common import dims, fail
from .codecs import BytesCodec, CodecPipeline, Crc32cCodec, Kind, parse_codecs, register_codec

__all__ = ["EMPTY", "ShardingCodec", "parse_sharding", "ShardIndex", "encode_index"]

#: offset and nbytes of an inner chunk that is not stored
EMPTY = (1 << 64) - 1

_HALF_EMPTY = "a shard index entry has one of offset, nbytes = 2**64-1 but not both"


def encode_index(pairs: Sequence[int], *, crc: bool = True) -> bytes:
    """A shard index as stored: the (offset, nbytes) pairs of `pairs` (flat, inner chunks in
    C order, `EMPTY` twice for one not stored) as little-endian uint64, then, with `crc`,
    their CRC-32C (the ``crc32c`` index codec)."""
    table = struct.pack(f"<{len(pairs)}Q", *pairs)
    return Crc32cCodec().encode(table) if crc else table


@dataclass(frozen=True)
class ShardIndex:
    """The decoded index of one shard: `entries[grid index] = (offset, nbytes)`."""

    entries: np.ndarray  # uint64, shape grid + (2,)

    def get(self, index: tuple[int, ...]) -> tuple[int, int] | None:
        if self.entries.size == 2 and not any(index):  # one inner chunk, at (0, ..., 0)
            off, nbytes = self.entries.reshape(2).tolist()
        else:
            off, nbytes = self.entries[index].tolist()
        return None if off == EMPTY else (off, nbytes)


@dataclass(frozen=True)
class ShardingCodec:
    chunk_shape: tuple[int, ...]  # the inner chunk shape
    codecs: CodecPipeline  # the inner chunks' codecs
    index_crc32c: bool
    index_location: str  # "end" or "start"
    name = "sharding_indexed"
    kind: ClassVar[Kind] = "array_to_bytes"

    def grid(self, shard_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(shard_shape, self.chunk_shape, strict=False))

    def encode_index(self, pairs: Sequence[int]) -> bytes:
        """This codec's index of a shard whose inner chunks are at `pairs` (`encode_index`)."""
        return encode_index(pairs, crc=self.index_crc32c)

    def index_nbytes(self, shard_shape: tuple[int, ...]) -> int:
        return 16 * math.prod(self.grid(shard_shape)) + (4 if self.index_crc32c else 0)

    def decode_index(
        self, shard: bytes, shard_shape: tuple[int, ...], *, file: object, pointer: str | None
    ) -> ShardIndex:
        grid = self.grid(shard_shape)
        size = self.index_nbytes(shard_shape)
        if len(shard) < size:
            raise fail(
                "shard shorter than its index",
                "ZARR-015",
                file=file,
                pointer=pointer,
                expected=f">= {size} bytes",
                got=len(shard),
            )
        raw = shard[len(shard) - size :] if self.index_location == "end" else shard[:size]
        if self.index_crc32c:
            raw = Crc32cCodec().decode(raw, max_size=size, file=file, pointer=pointer)
        lo, hi = (0, len(shard) - size) if self.index_location == "end" else (size, len(shard))
        if len(raw) == 16:  # one inner chunk (most shards): Python ints, no numpy per check
            off, n = struct.unpack("<QQ", raw)
            if (off == EMPTY) != (n == EMPTY):
                raise fail(_HALF_EMPTY, "ZARR-015", file=file, pointer=pointer)
            if off != EMPTY and not (lo <= off <= hi and n <= hi - off):
                raise _outside(lo, hi, off, n, file=file, pointer=pointer)
            return ShardIndex(np.array([off, n], dtype=np.uint64).reshape(grid + (2,)))
        entries = np.frombuffer(raw, dtype="<u8").reshape(grid + (2,))
        offsets, nbytes = entries[..., 0], entries[..., 1]
        empty_off, empty_n = offsets == EMPTY, nbytes == EMPTY
        if np.any(empty_off != empty_n):
            raise fail(_HALF_EMPTY, "ZARR-015", file=file, pointer=pointer)
        stored = ~empty_off
        off_s, n_s = offsets[stored], nbytes[stored]
        bad = (off_s < lo) | (off_s > hi)
        bad |= n_s > (np.uint64(hi) - np.minimum(off_s, np.uint64(hi)))
        if np.any(bad):
            i = int(np.argmax(bad))
            raise _outside(lo, hi, int(off_s[i]), int(n_s[i]), file=file, pointer=pointer)
        return ShardIndex(entries)


def _outside(lo: int, hi: int, offset: int, nbytes: int, *, file: object, pointer: str | None):
    """The error of an index entry pointing outside the chunk data ``[lo, hi)`` (ZARR-015)."""
    return fail(
        "a shard index entry points outside the shard's chunk data",
        "ZARR-015",
        file=file,
        pointer=pointer,
        expected=f"[{lo}, {hi})",
        got=(offset, nbytes),
    )


@register_codec("sharding_indexed")
def parse_sharding(
    entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str
) -> ShardingCodec:
    conf = entry.get("configuration")
    where = pointer + "/configuration"
    if not isinstance(conf, dict):
        raise fail("sharding_indexed needs a configuration", "ZARR-014", file=file, pointer=where)
    extra = set(conf) - {"chunk_shape", "codecs", "index_codecs", "index_location"}
    if extra:
        raise fail(
            f"unknown sharding_indexed keys {sorted(extra)}", "ZARR-014", file=file, pointer=where
        )
    chunk_shape = dims(
        conf.get("chunk_shape"),
        file=file,
        pointer=where + "/chunk_shape",
        rule="ZARR-014",
        minimum=1,
    )
    if len(chunk_shape) != rank:
        raise fail(
            "sharding chunk_shape rank differs from the array's",
            "ZARR-014",
            file=file,
            pointer=where + "/chunk_shape",
            expected=rank,
            got=len(chunk_shape),
        )
    inner = parse_codecs(
        conf.get("codecs"), rank=rank, dtype=dtype, file=file, pointer=where + "/codecs"
    )
    if isinstance(inner.array_to_bytes, ShardingCodec):
        raise fail(
            "nested sharding is not in the spec's subset",
            "ZARR-014",
            file=file,
            pointer=where + "/codecs",
        )
    index = parse_codecs(
        conf.get("index_codecs"),
        rank=rank,
        dtype=np.dtype("<u8"),
        file=file,
        pointer=where + "/index_codecs",
    )
    ok_index = (
        not index.array_to_array
        and isinstance(index.array_to_bytes, BytesCodec)
        and index.array_to_bytes.endian == "little"
        and all(isinstance(c, Crc32cCodec) for c in index.bytes_to_bytes)
        and len(index.bytes_to_bytes) <= 1
    )
    if not ok_index:
        raise fail(
            "index_codecs must be bytes (little endian), optionally followed by crc32c",
            "ZARR-014",
            file=file,
            pointer=where + "/index_codecs",
        )
    location = conf.get("index_location", "end")
    if location not in ("end", "start"):
        raise fail(
            "index_location must be 'start' or 'end'",
            "ZARR-014",
            file=file,
            pointer=where + "/index_location",
            got=location,
        )
    return ShardingCodec(chunk_shape, inner, bool(index.bytes_to_bytes), location)
