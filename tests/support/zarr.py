"""Zarr documents and shards built as spec/arrays.md lays them out, for the tests of `ockpt.zarr`
(none needs tensorstore): array metadata of zarr v2 and v3 with one field changed, the sharding
codec's configuration, a crc32c-suffixed index and a shard of given chunks."""

from __future__ import annotations

import struct

import google_crc32c

from ockpt.zarr.shard_index import EMPTY

#: The zarr v3 ``bytes`` codec, little-endian.
BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}


def array_v2(**change) -> dict:  # type: ignore[no-untyped-def]
    """A .zarray of a (5, 7) int32 array in (2, 3) chunks; a field given the value
    ``"absent"`` is left out."""
    d = {
        "chunks": [2, 3],
        "compressor": None,
        "dimension_separator": ".",
        "dtype": "<i4",
        "fill_value": 7,
        "filters": None,
        "order": "C",
        "shape": [5, 7],
        "zarr_format": 2,
    }
    d.update(change)
    return {k: v for k, v in d.items() if v != "absent"}


def sharding_codec(inner, codecs=None, index_location=None) -> dict:  # type: ignore[no-untyped-def]
    """The ``sharding_indexed`` codec of inner chunks `inner`, its index crc32c-checked."""
    conf = {
        "chunk_shape": list(inner),
        "codecs": codecs or [BYTES_LE],
        "index_codecs": [BYTES_LE, {"name": "crc32c"}],
    }
    if index_location:
        conf["index_location"] = index_location
    return {"name": "sharding_indexed", "configuration": conf}


def array_v3(shape=(5, 7), chunk=(2, 3), codecs=None, **change) -> dict:  # type: ignore[no-untyped-def]
    """A zarr.json of an int32 array; a field given the value ``"absent"`` is left out."""
    d = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 7,
        "codecs": codecs or [BYTES_LE],
    }
    d.update(change)
    return {k: v for k, v in d.items() if v != "absent"}


def with_crc32c(data: bytes) -> bytes:
    """`data` followed by its crc32c, little-endian (the crc32c codec's encoding)."""
    return data + google_crc32c.value(data).to_bytes(4, "little")


def build_shard(chunks: list, *, crc: bool, start: bool) -> tuple[bytes, list]:
    """A shard holding `chunks` (bytes, or None: not stored), its index at the start or the
    end, and the index's (offset, nbytes) pairs, offsets from the shard's start."""
    n_index = 16 * len(chunks) + (4 if crc else 0)
    base = n_index if start else 0
    data, pairs = b"", []
    for c in chunks:
        if c is None:
            pairs.append((EMPTY, EMPTY))
        else:
            pairs.append((base + len(data), len(c)))
            data += c
    index = b"".join(struct.pack("<QQ", *p) for p in pairs)
    if crc:
        index = with_crc32c(index)
    return (index + data if start else data + index), pairs
