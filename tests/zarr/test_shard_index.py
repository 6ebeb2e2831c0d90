"""`ockpt.zarr.shard_index`: the sharding codec's configuration, its chunk grid and the shard index
(its size, checksum and entries) on real shard bytes. None needs tensorstore (the mutants each
kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import functools
import struct

import numpy as np
import pytest

from ockpt.errors import ZarrFormatError
from ockpt.zarr.codecs import (
    BytesCodec,
    CodecPipeline,
    ZstdCodec,
    parse_codecs,
)
from ockpt.zarr.shard_index import EMPTY, ShardIndex, ShardingCodec
from tests.support.errors import assert_error, error_fields, raised
from tests.support.zarr import BYTES_LE, build_shard

F4 = np.dtype("<f4")


_error = functools.partial(raised, ZarrFormatError)  # the ZarrFormatError call() raises


# --------------------------------------------------------------------------------------------
# shard_index: parse_sharding, ShardingCodec.grid / index_nbytes / decode_index, ShardIndex.get


SHARD_OK = {"chunk_shape": [2, 2], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE, "crc32c"]}


def _sharding(conf: object, rank: int = 2):  # type: ignore[no-untyped-def]
    entry = {"name": "sharding_indexed"}
    if conf is not None:
        entry["configuration"] = conf
    return parse_codecs([entry], rank=rank, dtype=F4, file="a/zarr.json").array_to_bytes


def test_sharding_parses_its_configuration():
    """`parse_sharding`: the inner chunk shape and codecs, a crc32c index, the location
    (``end`` when absent)."""
    assert _sharding(SHARD_OK) == ShardingCodec(
        (2, 2), CodecPipeline((), BytesCodec("little"), ()), True, "end"
    )
    plain = dict(SHARD_OK, index_codecs=[BYTES_LE], index_location="start")
    assert _sharding(plain) == ShardingCodec(
        (2, 2), CodecPipeline((), BytesCodec("little"), ()), False, "start"
    )
    inner = dict(SHARD_OK, chunk_shape=[3], codecs=[BYTES_LE, "zstd"], index_location="end")
    assert _sharding(inner, rank=1).codecs.bytes_to_bytes == (ZstdCodec(),)


@pytest.mark.parametrize(
    "conf, want",
    [
        (
            None,
            {
                "rule": "ZARR-014",
                "message": "sharding_indexed needs a configuration",
                "pointer": "/codecs/0/configuration",
            },
        ),
        (
            [1],
            {
                "rule": "ZARR-014",
                "message": "sharding_indexed needs a configuration",
                "pointer": "/codecs/0/configuration",
            },
        ),
        (
            dict(SHARD_OK, x=1, a=2),
            {
                "rule": "ZARR-014",
                "message": "unknown sharding_indexed keys ['a', 'x']",
                "pointer": "/codecs/0/configuration",
            },
        ),
        (
            dict(SHARD_OK, chunk_shape=[2]),
            {
                "rule": "ZARR-014",
                "message": "sharding chunk_shape rank differs from the array's",
                "pointer": "/codecs/0/configuration/chunk_shape",
                "expected": 2,
                "got": 1,
            },
        ),
        (
            dict(SHARD_OK, chunk_shape=[1, 0]),
            {
                "rule": "ZARR-014",
                "message": "must be an integer >= 1",
                "pointer": "/codecs/0/configuration/chunk_shape/1",
                "got": 0,
            },
        ),
        (
            dict(SHARD_OK, codecs=[{"name": "sharding_indexed", "configuration": SHARD_OK}]),
            {
                "rule": "ZARR-014",
                "message": "nested sharding is not in the spec's subset",
                "pointer": "/codecs/0/configuration/codecs",
            },
        ),
        (
            dict(SHARD_OK, codecs=[]),
            {
                "rule": "ZARR-013",
                "message": "codecs must be a non-empty list",
                "pointer": "/codecs/0/configuration/codecs",
                "got": [],
            },
        ),
        (
            dict(SHARD_OK, index_codecs=[BYTES_LE, "blosc"]),
            {
                "rule": "ZARR-013",
                "message": "codec 'blosc' is not one the spec allows",
                "pointer": "/codecs/0/configuration/index_codecs/1",
            },
        ),
        (
            dict(SHARD_OK, index_location="middle"),
            {
                "rule": "ZARR-014",
                "message": "index_location must be 'start' or 'end'",
                "pointer": "/codecs/0/configuration/index_location",
                "got": "middle",
            },
        ),
    ]
    + [
        (
            dict(SHARD_OK, index_codecs=ic),
            {
                "rule": "ZARR-014",
                "message": "index_codecs must be bytes (little endian), optionally followed "
                "by crc32c",
                "pointer": "/codecs/0/configuration/index_codecs",
            },
        )
        for ic in (
            [{"name": "bytes", "configuration": {"endian": "big"}}],
            [BYTES_LE, "crc32c", "crc32c"],
            [BYTES_LE, "gzip"],
            [BYTES_LE, "zstd"],
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE],
        )
    ],
)
def test_sharding_configuration_refused(conf, want):
    """Each refusal of `parse_sharding`: ZARR-014 (ZARR-013 for a codec list it parses) with
    the pointer under the entry's /configuration. Kills `parse_sharding`'s message, pointer
    and condition mutants."""
    e = _error(lambda: _sharding(conf))
    if want["message"].endswith("is not one the spec allows"):  # expected, got: test_codecs
        assert_error(e, file="a/zarr.json", **want)
        return
    assert error_fields(e) == {"file": "a/zarr.json", **want}


def _codec(*, crc: bool, start: bool, inner=(2, 2)) -> ShardingCodec:  # type: ignore[no-untyped-def]
    return ShardingCodec(
        inner, CodecPipeline((), BytesCodec(None), ()), crc, "start" if start else "end"
    )


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("start", [False, True])
def test_shard_index_decodes_at_either_end(crc, start):
    """`decode_index` of a shard of 2 x 3 inner chunks (one not stored), the index at the end
    or the start, with or without its CRC-32C: every entry as written, `get` giving None for
    the one not stored. `grid` is shard // inner; `index_nbytes` 16 a chunk (+ 4)."""
    chunks = [b"a" * 3, None, b"", b"bb", b"c" * 5, b"d"]
    shard, pairs = build_shard(chunks, crc=crc, start=start)
    codec = _codec(crc=crc, start=start)
    assert codec.grid((4, 6)) == (2, 3)
    assert codec.grid((5, 7)) == (2, 3)
    assert codec.index_nbytes((4, 6)) == 96 + (4 if crc else 0)
    index = codec.decode_index(shard, (4, 6), file="f", pointer="/s")
    assert index.entries.shape == (2, 3, 2)
    got = [index.get((i, j)) for i in range(2) for j in range(3)]
    assert got == [None if p[0] == EMPTY else p for p in pairs]


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("start", [False, True])
def test_one_chunk_shard_index_decodes_at_either_end(crc, start):
    """The fast path of a shard of one inner chunk: its (offset, nbytes), or None when not
    stored; `get` of (0, 0) reads the one pair; the entries are uint64 as `ShardIndex` says.
    Kills `decode_index` 91, 93 (the entries' dtype left to numpy: int64)."""
    for chunk in (b"xyz", b"", None):
        shard, pairs = build_shard([chunk], crc=crc, start=start)
        codec = _codec(crc=crc, start=start)
        index = codec.decode_index(shard, (2, 2), file="f", pointer="/s")
        assert index.entries.shape == (1, 1, 2)
        assert index.entries.dtype == np.uint64  # as the numpy path gives (`ShardIndex`)
        assert index.get((0, 0)) == (None if chunk is None else pairs[0])
    # a rank-0 array: one inner chunk, the grid ()
    shard, pairs = build_shard([b"abcd"], crc=crc, start=start)
    index = _codec(crc=crc, start=start, inner=()).decode_index(shard, (), file="f", pointer=None)
    assert index.get(()) == pairs[0]


def test_shard_index_get_reads_each_entry():
    """`ShardIndex.get` of a grid of several chunks reads the entry at the index given (the
    first too), and of a one-chunk grid its only pair."""
    entries = np.array([[[0, 4], [4, 2]], [[EMPTY, EMPTY], [6, 0]]], dtype=np.uint64)
    index = ShardIndex(entries)
    assert [index.get((i, j)) for i in (0, 1) for j in (0, 1)] == [(0, 4), (4, 2), None, (6, 0)]
    assert ShardIndex(np.array([[7, 9]], dtype=np.uint64)).get((0,)) == (7, 9)
    assert ShardIndex(np.array([EMPTY, EMPTY], dtype=np.uint64)).get(()) is None


@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("n_chunks", [1, 4])
def test_shard_index_refusals(start, n_chunks):
    """`decode_index` refusals, in the one-chunk fast path and the numpy path: a shard
    shorter than its index; half an empty marker; an entry before or after the chunk data,
    or running past its end (``[lo, hi)`` in the error, the entry as got); a bad CRC-32C.
    Entries ending exactly at the data's end, or empty at its end, are accepted; the error
    names the first bad entry (not the first entry). Kills `decode_index` and `_outside`
    mutants of bounds, messages and values (144: ``np.argmax(None)``)."""
    codec = _codec(crc=False, start=start, inner=(1,))
    shape = (n_chunks,)
    size = 16 * n_chunks
    data_len = 10
    lo, hi = (size, size + data_len) if start else (0, data_len)

    def shard_of(pair):
        pairs = [pair] + [(lo, 0)] * (n_chunks - 1)
        index = b"".join(struct.pack("<QQ", *p) for p in pairs)
        return index + b"z" * data_len if start else b"z" * data_len + index

    def refused(pair):
        return error_fields(
            _error(lambda: codec.decode_index(shard_of(pair), shape, file="f", pointer="/s"))
        )

    for ok in ((lo, data_len), (hi, 0), (lo + 3, data_len - 3), (EMPTY, EMPTY), (lo, 0)):
        got = codec.decode_index(shard_of(ok), shape, file="f", pointer="/s").get((0,))
        assert got == (None if ok[0] == EMPTY else ok)
    outside = {
        "rule": "ZARR-015",
        "file": "f",
        "message": "a shard index entry points outside the shard's chunk data",
        "pointer": "/s",
        "expected": f"[{lo}, {hi})",
    }
    for bad in ((lo, data_len + 1), (hi, 1), (hi + 1, 0), (lo + 3, data_len - 2), (EMPTY - 1, 2)):
        assert refused(bad) == {**outside, "got": bad}
    if start:
        bad = (lo - 1, 1)
        assert refused(bad) == {**outside, "got": bad}
    if n_chunks == 4:  # the error names the first bad entry, not the first entry
        pairs = [(lo, 2), (EMPTY, EMPTY), (lo + 2, 3), (hi, 1)]
        index = b"".join(struct.pack("<QQ", *p) for p in pairs)
        shard = index + b"z" * data_len if start else b"z" * data_len + index
        e = _error(lambda: codec.decode_index(shard, shape, file="f", pointer="/s"))
        assert error_fields(e) == {**outside, "got": (hi, 1)}
    half = {
        "rule": "ZARR-015",
        "file": "f",
        "message": "a shard index entry has one of offset, nbytes = 2**64-1 but not both",
        "pointer": "/s",
    }
    assert refused((EMPTY, 0)) == half
    assert refused((0, EMPTY)) == half
    short = b"z" * (size - 1)
    e = _error(lambda: codec.decode_index(short, shape, file="f", pointer="/s"))
    assert error_fields(e) == {
        "rule": "ZARR-015",
        "file": "f",
        "message": "shard shorter than its index",
        "pointer": "/s",
        "expected": f">= {size} bytes",
        "got": size - 1,
    }
    assert codec.decode_index(b"\xff" * size, shape, file="f", pointer="/s").get((0,)) is None


def test_shard_index_crc32c_is_checked():
    """A crc32c index: the CRC-32C covers the pairs; a mismatch is ZARR-016 at the pointer."""
    shard, _ = build_shard([b"abc"], crc=True, start=False)
    bad = shard[:-1] + bytes([shard[-1] ^ 1])
    e = _error(
        lambda: _codec(crc=True, start=False).decode_index(bad, (2, 2), file="f", pointer="/s")
    )
    assert (e.rule, e.file, e.pointer, e.message) == ("ZARR-016", "f", "/s", "crc32c mismatch")
