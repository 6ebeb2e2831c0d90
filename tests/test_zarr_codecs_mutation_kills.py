"""Tests written to kill the mutants of `ockpt.zarr.codecs`, `ockpt.zarr.shard_index` and
`ockpt.zarr.stream` that survived the mutation run (tests/mutation/RESULTS.md), grouped by the
function they guard.

None needs tensorstore (the run goes with ``OCKPT_BLOCK_TENSORSTORE=1``, which skips
tests/test_zarr.py whole). Each builds real chunk, shard or codec bytes and asserts what a
reader sees: the values decoded, or the whole text (rule, file, pointer) of the error.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import tracemalloc
import zlib
from types import SimpleNamespace

import google_crc32c
import numpy as np
import pytest
import zstandard

from ockpt import limits
from ockpt.errors import MemoryLimitError, MissingDataError, ZarrFormatError
from ockpt.store.byterange import ByteRange
from ockpt.zarr import codecs, stream
from ockpt.zarr.codecs import (
    BytesCodec,
    CodecPipeline,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
    from_v2_compressor,
    parse_codecs,
)
from ockpt.zarr.shard_index import EMPTY, ShardIndex, ShardingCodec

F4 = np.dtype("<f4")


def _error(call) -> ZarrFormatError:  # type: ignore[no-untyped-def]
    """The ZarrFormatError `call()` raises."""
    with pytest.raises(ZarrFormatError) as info:
        call()
    return info.value


def _crc(data: bytes) -> bytes:
    return data + google_crc32c.value(data).to_bytes(4, "little")


# --------------------------------------------------------------------------------------------
# codecs._listed


def test_listed_joins_names_with_commas_and_a_final_or():
    """`_listed` (the "expected" of an unknown codec or compressor): one name alone, two with
    "or", more with commas then "or". Kills `_listed` 1-16 but 16 (equivalent, below)."""
    assert codecs._listed([]) == ""
    assert codecs._listed(["a"]) == "a"
    assert codecs._listed(["a", "b"]) == "a or b"
    assert codecs._listed(["a", "b", "c", "d"]) == "a, b, c or d"


def test_an_unknown_codec_lists_the_known_ones():
    """parse_codec of a name `CODECS` lacks: ZARR-013 at the entry, listing every codec
    (through `_listed`). Kills `_listed` mutants via the message and `parse_codec`'s."""
    e = _error(lambda: parse_codecs(["blosc"], rank=1, dtype=F4, file="a/zarr.json"))
    assert str(e) == (
        "a/zarr.json at /codecs/0: codec 'blosc' is not one the spec allows (expected "
        "'bytes, transpose, zstd, gzip, crc32c or sharding_indexed', got 'blosc') [ZARR-013]"
    )


def test_an_unknown_v2_compressor_lists_null_and_the_known_ones():
    """from_v2_compressor of an id `V2_COMPRESSORS` lacks: ZARR-004, listing null and the
    compressors. Kills `_listed` mutants and `from_v2_compressor`'s message/pointer ones."""
    e = _error(lambda: from_v2_compressor({"id": "blosc"}, F4, file="a/.zarray"))
    assert str(e) == (
        "a/.zarray at /compressor: compressor 'blosc' is not one the spec allows "
        "(expected 'null, zstd, gzip or zlib', got 'blosc') [ZARR-004]"
    )


# --------------------------------------------------------------------------------------------
# codecs.register_codec (runs at import: re-run with --fresh)


def test_every_codec_is_registered_under_its_json_name():
    """`register_codec` stores each parser under its name: every name parses to its codec.
    Kills `register_codec` mutants (``CODECS[name] = None``, a wrong key) in a fresh
    interpreter."""
    assert list(codecs.CODECS) == [
        "bytes",
        "transpose",
        "zstd",
        "gzip",
        "crc32c",
        "sharding_indexed",
    ]
    p = parse_codecs(
        [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "gzip", "configuration": {"level": 3}},
            {"name": "zstd", "configuration": {"level": -2, "checksum": True}},
            {"name": "crc32c"},
        ],
        rank=2,
        dtype=F4,
        file="a/zarr.json",
    )
    assert p == CodecPipeline(
        (TransposeCodec((1, 0)),),
        BytesCodec("big"),
        (GzipCodec(3), ZstdCodec(-2, True), Crc32cCodec()),
    )


# --------------------------------------------------------------------------------------------
# GzipCodec.decode


@pytest.mark.parametrize("wbits, make", [(31, gzip.compress), (15, zlib.compress)])
def test_gzip_decodes_within_the_bound(wbits, make):
    """A gzip (wbits 31) or zlib (15) stream of exactly `max_size` bytes decodes; one byte more
    is refused, as are a truncated stream and trailing bytes."""
    codec = GzipCodec(0, wbits)
    data = bytes(range(200)) * 5
    assert codec.decode(make(data), max_size=1000, file="f", pointer="/p") == data
    e = _error(lambda: codec.decode(make(data), max_size=999, file="f", pointer="/p"))
    assert str(e) == "f at /p: gzip stream decodes to more than the chunk size [ZARR-003]"
    for bad in (make(data)[:-3], make(data) + b"\0"):
        e = _error(lambda bad=bad: codec.decode(bad, max_size=1000, file="f", pointer="/p"))
        assert str(e) == "f at /p: truncated or trailing gzip stream [ZARR-003]"


def test_a_corrupt_gzip_stream_names_file_and_pointer():
    """A stream zlib refuses: ZARR-003 with zlib's reason, the file and the pointer. Kills
    `GzipCodec.decode` 10, 12, 13, 16, 17."""
    e = _error(lambda: GzipCodec().decode(b"garbage!", max_size=10, file="a/c/0", pointer="/x"))
    assert str(e) == (
        "a/c/0 at /x: corrupt gzip stream: Error -3 while decompressing data: incorrect "
        "header check [ZARR-003]"
    )


def test_a_gzip_bomb_is_decoded_no_further_than_the_bound():
    """A gzip stream of 16 MiB of zeros, asked for 10 bytes: refused having decoded at most
    11 bytes (``max_length = max_size + 1``), not the whole 16 MiB. Kills `GzipCodec.decode`
    7 (no max_length)."""
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    bomb = c.compress(bytes(16 << 20)) + c.flush()
    tracemalloc.start()
    try:
        e = _error(lambda: GzipCodec().decode(bomb, max_size=10, file="f", pointer=None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e) == "f: gzip stream decodes to more than the chunk size [ZARR-003]"
    assert peak < 4 << 20


# --------------------------------------------------------------------------------------------
# Crc32cCodec.decode, BytesCodec.decode, ZstdCodec.decode


def test_crc32c_codec_checks_and_strips_the_checksum():
    """The body before a stored CRC-32C (little endian) is returned when they match; a
    mismatch and a stream shorter than 4 bytes are ZARR-016 with the values."""
    body = b"some chunk bytes"
    assert Crc32cCodec().decode(_crc(body), max_size=99, file="f", pointer="/p") == body
    assert Crc32cCodec().decode(_crc(b""), max_size=0, file="f", pointer="/p") == b""
    e = _error(lambda: Crc32cCodec().decode(b"abcdefg", max_size=10, file="f", pointer="/p"))
    assert str(e) == (
        "f at /p: crc32c mismatch (expected '0x364b3fb7', got '0x67666564') [ZARR-016]"
    )
    e = _error(lambda: Crc32cCodec().decode(b"abc", max_size=10, file="f", pointer="/p"))
    assert str(e) == "f at /p: too short for a crc32c checksum (got 3) [ZARR-016]"


@pytest.mark.parametrize("endian, code", [("little", "<"), ("big", ">")])
def test_bytes_codec_reads_its_endianness(endian, code):
    """`BytesCodec.decode`: the bytes as the element type in the codec's byte order, of the
    chunk's shape (2-byte elements too); a length other than shape x itemsize is ZARR-003
    with both sizes. Kills `BytesCodec.decode` 22 (``itemsize > 2``)."""
    a = np.arange(6, dtype=code + "i4").reshape(2, 3)
    out = BytesCodec(endian).decode(a.tobytes(), (2, 3), np.dtype("<i4"), file="f", pointer="/p")
    assert out.tolist() == a.tolist()
    assert out.dtype.byteorder in (code, "=")
    two = np.array([1, 258, -2], dtype=code + "i2")  # 2-byte elements are swapped too
    out2 = BytesCodec(endian).decode(two.tobytes(), (3,), np.dtype("<i2"), file="f", pointer="/p")
    assert out2.tolist() == [1, 258, -2]
    one = BytesCodec(None).decode(b"\x01\xff", (2,), np.dtype("u1"), file="f", pointer="/p")
    assert one.tolist() == [1, 255]
    e = _error(
        lambda: BytesCodec(endian).decode(b"abcdefg", (2,), np.dtype("<i4"), file="f", pointer="/p")
    )
    assert str(e) == (
        "f at /p: chunk bytes do not match the chunk shape and element size "
        "(expected 8, got 7) [ZARR-003]"
    )


def test_zstd_codec_decodes_and_bounds_with_rule_zarr_003():
    """`ZstdCodec.decode`: a frame decodes; one larger than `max_size` is refused with ZARR-003
    (its rule) and the file and pointer, as a ZarrFormatError."""
    data = b"zstd data " * 100
    frame = zstandard.ZstdCompressor().compress(data)
    assert ZstdCodec().decode(frame, max_size=1000, file="f", pointer="/p") == data
    e = _error(lambda: ZstdCodec().decode(frame, max_size=999, file="f", pointer="/p"))
    assert (e.rule, e.file, e.pointer) == ("ZARR-003", "f", "/p")


# --------------------------------------------------------------------------------------------
# TransposeCodec, CodecPipeline.decode


def test_transpose_undoes_a_three_axis_permutation():
    """A rank-3 chunk stored transposed by order [2, 0, 1] (not a reversal, not its own
    inverse): `encoded_shape` is the shape permuted, `decode` applies the inverse (argsort).
    Kills `TransposeCodec.encoded_shape` 1 and `TransposeCodec.decode` 1-5."""
    a = np.arange(24, dtype="<i4").reshape(2, 3, 4)
    codec = TransposeCodec((2, 0, 1))
    assert codec.encoded_shape((2, 3, 4)) == (4, 2, 3)
    stored = np.transpose(a, (2, 0, 1))
    assert codec.decode(stored).tolist() == a.tolist()
    pipeline = parse_codecs(
        [
            {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
            {"name": "bytes", "configuration": {"endian": "little"}},
        ],
        rank=3,
        dtype=np.dtype("<i4"),
        file="f",
    )
    out = pipeline.decode(stored.tobytes(), (2, 3, 4), np.dtype("<i4"), file="f", pointer="/p")
    assert out.shape == (2, 3, 4)
    assert out.tolist() == a.tolist()


def test_pipeline_bounds_every_stage():
    """`decode_bytes` undoes the bytes codecs last first; the innermost output is bounded by
    the chunk size, the others by `intermediate_bound` (twice plus 1 MiB): a zstd frame inside
    gzip decodes; one byte over the chunk size is refused by the innermost codec, naming the
    file and pointer `decode` was given (to the bytes codec too). Kills `CodecPipeline.decode`
    7, 8, 19, 20."""
    data = bytes(range(256)) * 4
    stored = gzip.compress(zstandard.ZstdCompressor().compress(data))
    p = CodecPipeline((), BytesCodec(None), (ZstdCodec(), GzipCodec()))
    out = p.decode(stored, (1024,), np.dtype("u1"), file="f", pointer="/p")
    assert out.tobytes() == data
    assert p.decode_bytes(stored, 1024, file="f", pointer="/p") == data
    e = _error(lambda: p.decode_bytes(stored, 1023, file="f", pointer="/p"))
    assert (e.rule, e.file, e.pointer) == ("ZARR-003", "f", "/p")
    e = _error(lambda: p.decode(stored, (1023,), np.dtype("u1"), file="g", pointer="/q"))
    assert (e.rule, e.file, e.pointer) == ("ZARR-003", "g", "/q")
    raw = CodecPipeline((), BytesCodec(None), ())
    e = _error(lambda: raw.decode(b"abc", (4,), np.dtype("u1"), file="g", pointer="/q"))
    assert str(e) == (
        "g at /q: chunk bytes do not match the chunk shape and element size (expected 4, got 3) "
        "[ZARR-003]"
    )
    # a gzip stream (outer codec) decoding to 2 x 1 + 1 MiB + 1 bytes is over its bound
    big = gzip.compress(bytes(2 + (1 << 20) + 1))
    q = CodecPipeline((), BytesCodec(None), (Crc32cCodec(), GzipCodec()))
    e = _error(lambda: q.decode_bytes(big, 1, file="f", pointer="/p"))
    assert str(e) == "f at /p: gzip stream decodes to more than the chunk size [ZARR-003]"
    ok = gzip.compress(_crc(b"x"))
    assert q.decode_bytes(ok, 1, file="f", pointer="/p") == b"x"


def test_pipeline_refuses_a_chunk_too_large_for_memory(monkeypatch):
    """`decode_bytes` asks `check_allocation` for the largest output before decoding (the
    chunk itself for none or one bytes codec, `intermediate_bound` for more): LIMIT-006 with
    the size and the file. Kills `CodecPipeline.decode_bytes` mutants of `n`, `largest` and
    the `check_allocation` call."""
    monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(limits, "memory_available", lambda: 100)
    none = CodecPipeline((), BytesCodec(None), ())
    assert none.decode_bytes(b"x" * 100, 100, file="f", pointer="/p") == b"x" * 100
    one = CodecPipeline((), BytesCodec(None), (Crc32cCodec(),))
    assert one.decode_bytes(_crc(b"x" * 100), 100, file="f", pointer="/p") == b"x" * 100
    with pytest.raises(MemoryLimitError) as info:
        one.decode_bytes(_crc(b"x" * 101), 101, file="f", pointer="/p")
    assert str(info.value) == (
        "f: the decoded chunk needs 101 bytes, more than the 100 bytes of memory available "
        "[LIMIT-006]"
    )
    two = CodecPipeline((), BytesCodec(None), (Crc32cCodec(), Crc32cCodec()))
    with pytest.raises(MemoryLimitError) as info:
        two.decode_bytes(_crc(_crc(b"x")), 1, file="f", pointer="/p")
    assert str(info.value) == (
        f"f: the decoded chunk needs {2 + (1 << 20)} bytes, more than the 100 bytes of memory "
        "available [LIMIT-006]"
    )


# --------------------------------------------------------------------------------------------
# codecs: _config, _int, parse_codec, the parsers, parse_codecs


BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}


@pytest.mark.parametrize(
    "entries, rank, text",
    [
        ([], 1, "at /codecs: codecs must be a non-empty list (got []) [ZARR-013]"),
        ("bytes", 1, "at /codecs: codecs must be a non-empty list (got 'bytes') [ZARR-013]"),
        (
            [BYTES_LE] * 17,
            1,
            "at /codecs: codecs must be a non-empty list (got "
            + repr([BYTES_LE] * 17)
            + ") [ZARR-013]",
        ),
        ([1], 1, "at /codecs/0: a codec must be an object with a name (got 1) [ZARR-013]"),
        (
            [{"configuration": {}}],
            1,
            "at /codecs/0: a codec must be an object with a name (got {'configuration': {}}) "
            "[ZARR-013]",
        ),
        (
            [{"name": 7}],
            1,
            "at /codecs/0: a codec must be an object with a name (got {'name': 7}) [ZARR-013]",
        ),
        (
            [{"name": "bytes", "foo": 1, "bar": 2}],
            1,
            "at /codecs/0: unknown codec keys ['bar', 'foo'] [ZARR-013]",
        ),
        (
            [{"name": "bytes", "configuration": []}],
            1,
            "at /codecs/0/configuration: codec configuration must be an object [ZARR-013]",
        ),
        (
            [{"name": "bytes", "configuration": {"endian": "little", "y": 1, "x": 1}}],
            1,
            "at /codecs/0/configuration: unknown codec configuration keys ['x', 'y'] [ZARR-013]",
        ),
        (
            [{"name": "bytes", "configuration": {"endian": "middle"}}],
            1,
            "at /codecs/0: bytes endian must be 'little' or 'big' (got 'middle') [ZARR-013]",
        ),
        (
            ["bytes"],
            1,
            "at /codecs/0: bytes codec needs endian for multi-byte element types [ZARR-013]",
        ),
        (
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, "crc32c"],
            2,
            "at /codecs/1: bytes->bytes codec before the array->bytes codec [ZARR-013]",
        ),
        (
            [BYTES_LE, BYTES_LE],
            1,
            "at /codecs/1: more than one array->bytes codec [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "transpose", "configuration": {"order": [0]}}],
            1,
            "at /codecs/1: array->array codec after the array->bytes codec [ZARR-013]",
        ),
        (
            [{"name": "transpose", "configuration": {"order": [0]}}],
            1,
            "at /codecs: codecs lack an array->bytes codec [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"checksum": 1}}],
            1,
            "at /codecs/1: zstd checksum must be a boolean (got 1) [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"level": 1 << 31}}],
            1,
            "at /codecs/1/configuration/level: level must be a 32-bit integer "
            "(got 2147483648) [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": -(1 << 31) - 1}}],
            1,
            "at /codecs/1/configuration/level: level must be a 32-bit integer "
            "(got -2147483649) [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": True}}],
            1,
            "at /codecs/1/configuration/level: level must be a 32-bit integer "
            "(got True) [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": 1.0}}],
            1,
            "at /codecs/1/configuration/level: level must be a 32-bit integer (got 1.0) [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": 1, "checksum": True}}],
            1,
            "at /codecs/1/configuration: unknown codec configuration keys ['checksum'] [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "crc32c", "configuration": {"a": 1}}],
            1,
            "at /codecs/1/configuration: unknown codec configuration keys ['a'] [ZARR-013]",
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"level": 1, "x": 2}}],
            1,
            "at /codecs/1/configuration: unknown codec configuration keys ['x'] [ZARR-013]",
        ),
        (
            [{"name": "transpose", "configuration": {"order": [0, 1], "x": 1}}, BYTES_LE],
            2,
            "at /codecs/0/configuration: unknown codec configuration keys ['x'] [ZARR-013]",
        ),
    ]
    + [
        (
            [{"name": "transpose", "configuration": {"order": order}}, BYTES_LE],
            2,
            f"at /codecs/0: transpose order must be a permutation of the dimensions "
            f"(got {order!r}) [ZARR-013]",
        )
        for order in ([0, 1.0], [0, True], [0, "1"], [0, 0], [1, 2], [0], [0, 1, 2], "01", None)
    ],
)
def test_codecs_refused_with_rule_pointer_and_values(entries, rank, text):
    """Every refusal of `parse_codecs` and the codec parsers (`_config`, `_int`, `parse_codec`,
    `_parse_bytes`, `_parse_transpose`, `_parse_zstd`, `_parse_gzip`, `_parse_crc32c`): the
    whole text, so the message, rule, pointer (the entry's index, ``/configuration``, the key)
    and value are pinned. Kills the mutants of those messages, pointers and bounds."""
    e = _error(lambda: parse_codecs(entries, rank=rank, dtype=F4, file="a/zarr.json"))
    assert str(e) == "a/zarr.json " + text


def test_codecs_parse_to_their_configuration():
    """What each parser gives for accepted input: the codecs' fields from the configuration,
    the defaults when absent (zstd level 0, no checksum; gzip level 0, wbits 31), a bare
    string as a codec name, endian absent for 1-byte types, a custom pointer, 16 codecs."""
    u1 = np.dtype("u1")
    p = parse_codecs(["bytes", "zstd", "gzip", "crc32c"], rank=0, dtype=u1, file="f")
    assert p == CodecPipeline(
        (), BytesCodec(None), (ZstdCodec(0, False), GzipCodec(0, 31), Crc32cCodec())
    )
    assert p.bytes_to_bytes[1].wbits == 31
    p = parse_codecs(
        [
            {"name": "transpose", "configuration": {"order": [0]}, "must_understand": True},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "zstd", "configuration": {"level": (1 << 31) - 1, "checksum": False}},
            {"name": "gzip", "configuration": {"level": -(1 << 31)}},
        ],
        rank=1,
        dtype=F4,
        file="f",
    )
    assert p == CodecPipeline(
        (TransposeCodec((0,)),),
        BytesCodec("big"),
        (ZstdCodec((1 << 31) - 1, False), GzipCodec(-(1 << 31))),
    )
    assert (
        parse_codecs([BYTES_LE] + ["crc32c"] * 15, rank=1, dtype=F4, file="f").bytes_to_bytes
        == (Crc32cCodec(),) * 15
    )
    e = _error(lambda: parse_codecs(["bytes", 5], rank=1, dtype=u1, file="f", pointer="/x/codecs"))
    assert str(e) == "f at /x/codecs/1: a codec must be an object with a name (got 5) [ZARR-013]"


# --------------------------------------------------------------------------------------------
# codecs.from_v2_compressor, _v2_zstd, _v2_deflate (the latter at import: --fresh)


def test_v2_compressors_make_their_codecs():
    """Each zarr v2 compressor id gives its codec: zstd and gzip/zlib with the level given
    (0 when absent), gzip with wbits 31 (gzip header), zlib with 15 (zlib header); null none.
    The raw bytes are big endian for a ``>`` type, little otherwise, none for 1-byte types;
    F order of rank > 1 is a transpose reversing the axes. Kills `_v2_deflate` 1-7, 10-12,
    15-17 and `_v2_zstd`, `from_v2_compressor` mutants of endian, order and rank (80:
    ``rank > 2``)."""
    i4, u1 = np.dtype("<i4"), np.dtype("u1")
    assert from_v2_compressor(None, i4) == CodecPipeline((), BytesCodec("little"), ())
    assert from_v2_compressor(None, np.dtype(">i4")) == CodecPipeline((), BytesCodec("big"), ())
    assert from_v2_compressor(None, u1) == CodecPipeline((), BytesCodec(None), ())
    got = [
        from_v2_compressor(c, i4).bytes_to_bytes
        for c in (
            {"id": "zstd", "level": 5},
            {"id": "zstd"},
            {"id": "gzip", "level": 5},
            {"id": "gzip"},
            {"id": "zlib", "level": 7},
            {"id": "zlib"},
        )
    ]
    assert got == [
        (ZstdCodec(5),),
        (ZstdCodec(0),),
        (GzipCodec(5, 31),),
        (GzipCodec(0, 31),),
        (GzipCodec(7, 15),),
        (GzipCodec(0, 15),),
    ]
    assert [c[0].wbits for c in got[2:]] == [31, 31, 15, 15]
    assert from_v2_compressor(None, i4, order="F", rank=3).array_to_array == (
        TransposeCodec((2, 1, 0)),
    )
    assert from_v2_compressor(None, i4, order="F", rank=2).array_to_array == (
        TransposeCodec((1, 0)),
    )
    assert from_v2_compressor(None, i4, order="F", rank=1).array_to_array == ()
    assert from_v2_compressor(None, i4, order="C", rank=3).array_to_array == ()
    data = b"zlib data" * 50
    codec = from_v2_compressor({"id": "zlib"}, u1).bytes_to_bytes[0]
    assert codec.decode(zlib.compress(data), max_size=len(data), file="f", pointer="/p") == data


@pytest.mark.parametrize("cid", ["zstd", "gzip", "zlib"])
def test_a_v2_compressor_level_must_be_an_integer(cid):
    """A non-integer ``level`` of a v2 compressor is refused (through `_int`) as a bad
    compressor, ZARR-004, naming the file, the value and ``/compressor/level`` (a v2 compressor
    holds its settings directly, not under ``configuration`` as a v3 codec). Kills
    `_v2_deflate` 8, 9, 13, 14 and `_v2_zstd`'s file/pointer mutants."""
    e = _error(lambda: from_v2_compressor({"id": cid, "level": True}, F4, file="a/.zarray"))
    assert str(e) == (
        "a/.zarray at /compressor/level: level must be a 32-bit integer (got True) [ZARR-004]"
    )


@pytest.mark.parametrize("compressor", ["zstd", {"id": 3}, {"level": 1}, 0])
def test_a_v2_compressor_must_be_null_or_an_object_with_an_id(compressor):
    """Anything else than null or an object with a string id: ZARR-004 at /compressor."""
    e = _error(lambda: from_v2_compressor(compressor, F4, file="a/.zarray"))
    assert str(e) == (
        "a/.zarray at /compressor: compressor must be null or an object with an id "
        f"(got {compressor!r}) [ZARR-004]"
    )


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
    "conf, text",
    [
        (None, "/configuration: sharding_indexed needs a configuration"),
        ([1], "/configuration: sharding_indexed needs a configuration"),
        (
            dict(SHARD_OK, x=1, a=2),
            "/configuration: unknown sharding_indexed keys ['a', 'x']",
        ),
        (
            dict(SHARD_OK, chunk_shape=[2]),
            "/configuration/chunk_shape: sharding chunk_shape rank differs from the array's "
            "(expected 2, got 1)",
        ),
        (
            dict(SHARD_OK, chunk_shape=[1, 0]),
            "/configuration/chunk_shape/1: must be an integer >= 1 (got 0)",
        ),
        (
            dict(SHARD_OK, codecs=[{"name": "sharding_indexed", "configuration": SHARD_OK}]),
            "/configuration/codecs: nested sharding is not in the spec's subset",
        ),
        (
            dict(SHARD_OK, codecs=[]),
            "/configuration/codecs: codecs must be a non-empty list (got [])",
        ),
        (
            dict(SHARD_OK, index_codecs=[BYTES_LE, "blosc"]),
            "/configuration/index_codecs/1: codec 'blosc' is not one the spec allows",
        ),
        (
            dict(SHARD_OK, index_location="middle"),
            "/configuration/index_location: index_location must be 'start' or 'end' (got 'middle')",
        ),
    ]
    + [
        (
            dict(SHARD_OK, index_codecs=ic),
            "/configuration/index_codecs: index_codecs must be bytes (little endian), "
            "optionally followed by crc32c",
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
def test_sharding_configuration_refused(conf, text):
    """Each refusal of `parse_sharding`: ZARR-014 (ZARR-013 for a codec list it parses) with
    the pointer under the entry's /configuration. Kills `parse_sharding`'s message, pointer
    and condition mutants."""
    e = _error(lambda: _sharding(conf))
    if "is not one the spec allows" in text:
        assert str(e).startswith("a/zarr.json at /codecs/0" + text)
        assert e.rule == "ZARR-013"
        return
    rule = "ZARR-013" if "non-empty list" in text else "ZARR-014"
    assert str(e) == f"a/zarr.json at /codecs/0{text} [{rule}]"


def _shard(chunks: list, *, crc: bool, start: bool) -> tuple[bytes, list]:
    """A shard holding `chunks` (bytes, or None: not stored) and the index of their
    (offset, nbytes), offsets from the shard's start."""
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
        index = _crc(index)
    return (index + data if start else data + index), pairs


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
    shard, pairs = _shard(chunks, crc=crc, start=start)
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
        shard, pairs = _shard([chunk], crc=crc, start=start)
        codec = _codec(crc=crc, start=start)
        index = codec.decode_index(shard, (2, 2), file="f", pointer="/s")
        assert index.entries.shape == (1, 1, 2)
        assert index.entries.dtype == np.uint64  # as the numpy path gives (`ShardIndex`)
        assert index.get((0, 0)) == (None if chunk is None else pairs[0])
    # a rank-0 array: one inner chunk, the grid ()
    shard, pairs = _shard([b"abcd"], crc=crc, start=start)
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
        return str(
            _error(lambda: codec.decode_index(shard_of(pair), shape, file="f", pointer="/s"))
        )

    for ok in ((lo, data_len), (hi, 0), (lo + 3, data_len - 3), (EMPTY, EMPTY), (lo, 0)):
        got = codec.decode_index(shard_of(ok), shape, file="f", pointer="/s").get((0,))
        assert got == (None if ok[0] == EMPTY else ok)
    outside = "f at /s: a shard index entry points outside the shard's chunk data"
    for bad in ((lo, data_len + 1), (hi, 1), (hi + 1, 0), (lo + 3, data_len - 2), (EMPTY - 1, 2)):
        assert refused(bad) == f"{outside} (expected '[{lo}, {hi})', got {bad!r}) [ZARR-015]"
    if start:
        bad = (lo - 1, 1)
        assert refused(bad) == f"{outside} (expected '[{lo}, {hi})', got {bad!r}) [ZARR-015]"
    if n_chunks == 4:  # the error names the first bad entry, not the first entry
        pairs = [(lo, 2), (EMPTY, EMPTY), (lo + 2, 3), (hi, 1)]
        index = b"".join(struct.pack("<QQ", *p) for p in pairs)
        shard = index + b"z" * data_len if start else b"z" * data_len + index
        e = _error(lambda: codec.decode_index(shard, shape, file="f", pointer="/s"))
        assert str(e) == f"{outside} (expected '[{lo}, {hi})', got {(hi, 1)!r}) [ZARR-015]"
    half = (
        "f at /s: a shard index entry has one of offset, nbytes = 2**64-1 but not both [ZARR-015]"
    )
    assert refused((EMPTY, 0)) == half
    assert refused((0, EMPTY)) == half
    short = b"z" * (size - 1)
    e = _error(lambda: codec.decode_index(short, shape, file="f", pointer="/s"))
    assert str(e) == (
        f"f at /s: shard shorter than its index (expected '>= {size} bytes', got {size - 1}) "
        "[ZARR-015]"
    )
    assert codec.decode_index(b"\xff" * size, shape, file="f", pointer="/s").get((0,)) is None


def test_shard_index_crc32c_is_checked():
    """A crc32c index: the CRC-32C covers the pairs; a mismatch is ZARR-016 at the pointer."""
    shard, _ = _shard([b"abc"], crc=True, start=False)
    bad = shard[:-1] + bytes([shard[-1] ^ 1])
    e = _error(
        lambda: _codec(crc=True, start=False).decode_index(bad, (2, 2), file="f", pointer="/s")
    )
    assert (e.rule, e.file, e.pointer, e.message) == ("ZARR-016", "f", "/s", "crc32c mismatch")


# --------------------------------------------------------------------------------------------
# stream: check_chunk and its stages


DATA = bytes(range(256)) * 40  # 10240 bytes
FRAME = zstandard.ZstdCompressor().compress(DATA)  # single segment, 2-byte content size
NOSIZE = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)


class Trickle:
    """A source giving at most `k` bytes a read, recording the sizes asked."""

    def __init__(self, data: bytes, k: int) -> None:
        self.data = io.BytesIO(data)
        self.k = k
        self.asked: list[int] = []

    def read(self, n: int) -> bytes:
        self.asked.append(n)
        return self.data.read(min(n, self.k))


def _check(codecs_: tuple, data: bytes, nbytes: int, k: int | None = None) -> object:
    """True/False from `stream.check_chunk`, or the text of the error it raises."""
    pipeline = CodecPipeline((), BytesCodec(None), codecs_)
    source = io.BytesIO(data) if k is None else Trickle(data, k)
    try:
        return stream.check_chunk(pipeline, source, nbytes, file="f", pointer="/p")
    except ZarrFormatError as e:
        return str(e)


SIZE = "f at /p: chunk bytes do not match the chunk shape and element size"
Z, G, C = (ZstdCodec(),), (GzipCodec(),), (Crc32cCodec(),)


@pytest.mark.parametrize("k", [None, 3, 1000])
@pytest.mark.parametrize(
    "codecs_, data, nbytes, want",
    [
        ((), DATA, 10240, True),
        ((), DATA, 10241, f"{SIZE} (expected 10241, got 10240) [ZARR-003]"),
        ((), DATA, 10239, f"{SIZE} (expected 10239, got '> 10239') [ZARR-003]"),
        ((), b"", 0, True),
        ((), b"x", 0, f"{SIZE} (expected 0, got '> 0') [ZARR-003]"),
        (Z, FRAME, 10240, True),
        (Z, NOSIZE, 10240, True),
        (Z, FRAME, 10241, f"{SIZE} (expected 10241, got 10240) [ZARR-003]"),
        (
            Z,
            FRAME,
            10239,
            "f at /p: zstd content size exceeds the chunk size (expected 10239, got 10240) "
            "[ZARR-003]",
        ),
        (
            Z,
            NOSIZE,
            10239,
            "f at /p: zstd stream decodes to more than the chunk size "
            "(expected '<= 10239', got '> 10239') [ZARR-003]",
        ),
        (Z, FRAME[:3], 10240, "f at /p: truncated zstd stream (frame header) [ZARR-003]"),
        (Z, FRAME[:6], 10240, "f at /p: truncated zstd stream (frame header) [ZARR-003]"),
        (Z, b"", 0, "f at /p: truncated zstd stream (frame header) [ZARR-003]"),
        (Z, b"abcdefgh", 10240, "f at /p: not a zstd frame [ZARR-003]"),
        (
            Z,
            FRAME[:4] + bytes([FRAME[4] | 0x08]) + FRAME[5:],
            10240,
            "f at /p: not a zstd frame: reserved bit set [ZARR-003]",
        ),
        (
            Z,
            NOSIZE[:5] + b"\xff" + NOSIZE[6:],
            10240,
            "f at /p: corrupt zstd frame: cannot get frame parameters: Frame requires too much "
            "memory for decoding [ZARR-003]",
        ),
        (Z, FRAME[:-2], 10240, "f at /p: truncated zstd frame [ZARR-003]"),
        (G, gzip.compress(DATA), 10240, True),
        ((GzipCodec(0, 15),), zlib.compress(DATA), 10240, True),
        (
            G,
            gzip.compress(DATA),
            10239,
            "f at /p: gzip stream decodes to more than the chunk size "
            "(expected '<= 10239', got '> 10239') [ZARR-003]",
        ),
        (
            G,
            gzip.compress(DATA)[:-1],
            10240,
            "f at /p: truncated or trailing gzip stream [ZARR-003]",
        ),
        (G, b"", 0, "f at /p: truncated or trailing gzip stream [ZARR-003]"),
        (
            G,
            b"garbage",
            10240,
            "f at /p: corrupt gzip stream: Error -3 while decompressing data: incorrect header "
            "check [ZARR-003]",
        ),
        (C, _crc(DATA), 10240, True),
        (C, _crc(b""), 0, True),
        (
            C,
            _crc(DATA)[:-1] + b"\0",
            10240,
            "f at /p: crc32c mismatch (expected '0xbd846cd7', got '0x00846cd7') [ZARR-016]",
        ),
        (C, b"abc", 0, "f at /p: too short for a crc32c checksum (got 3) [ZARR-016]"),
        (C, b"", 0, "f at /p: too short for a crc32c checksum (got 0) [ZARR-016]"),
        (C, _crc(DATA), 10239, f"{SIZE} (expected 10239, got '> 10239') [ZARR-003]"),
        (Z + C, _crc(FRAME), 10240, True),
        (G + Z + C, _crc(zstandard.ZstdCompressor().compress(gzip.compress(DATA))), 10240, True),
    ],
)
def test_streamed_check_gives_the_whole_error(codecs_, data, nbytes, want, k):
    """`check_chunk` of each codec, whole or damaged, read in any piece size (`k` bytes a read
    at most, None: all at once): True when the chunk is right, else the error with its
    message, values and rule, as the in-memory decode words it. Kills the message, bound and
    loop mutants of `_check_chunk`, `_Stage.read`/`exact`, `_Zstd.header`/`more`,
    `_Gzip.more`, `_Crc32c.more`."""
    assert _check(codecs_, data, nbytes, k) == want


@pytest.mark.parametrize("k", [None, 1, 3, 7])
def test_bytes_after_a_stream_are_refused(k):
    """Bytes after the end of a zstd frame or gzip stream: refused, whether they arrive with
    the stream's last bytes (zstd "frame", gzip "truncated or trailing") or in a later read
    (`no_trailing`: "bytes after the ... stream")."""
    zstd = _check(Z, FRAME + b"x", 10240, k)
    gz = _check(G, gzip.compress(DATA) + b"x", 10240, k)
    assert zstd in (
        "f at /p: bytes after the zstd frame [ZARR-003]",
        "f at /p: bytes after the zstd stream [ZARR-003]",
    )
    assert gz in (
        "f at /p: truncated or trailing gzip stream [ZARR-003]",
        "f at /p: bytes after the gzip stream [ZARR-003]",
    )
    if k == 1:  # the frame's last byte comes alone: the extra byte is read by `no_trailing`
        assert zstd == "f at /p: bytes after the zstd stream [ZARR-003]"
        assert gz == "f at /p: bytes after the gzip stream [ZARR-003]"
    if k is None:  # one read holds the end and the extra byte
        assert zstd == "f at /p: bytes after the zstd frame [ZARR-003]"
        assert gz == "f at /p: truncated or trailing gzip stream [ZARR-003]"
    empty = zstandard.ZstdCompressor().compress(b"")
    assert _check(Z, empty, 0, k) is True
    assert _check(Z, empty + b"x", 0, k) in (
        "f at /p: bytes after the zstd frame [ZARR-003]",
        "f at /p: bytes after the zstd stream [ZARR-003]",
    )


def test_an_outer_checksum_is_reported_before_an_inner_fault():
    """A crc32c-wrapped zstd frame whose checksum is wrong and whose frame is truncated: the
    checksum's fault (ZARR-016) comes first, as in memory: a stage's error waits for the
    stages outside it to read all their input (`_Stage.fail`)."""
    data = FRAME[:-5] + b"\0\0\0\0"
    crc = google_crc32c.value(FRAME[:-5])
    want = f"f at /p: crc32c mismatch (expected '0x{crc:08x}', got '0x00000000') [ZARR-016]"
    for k in (None, 1, 5):
        assert _check(Z + C, data, 10240, k) == want
    pipeline = CodecPipeline((), BytesCodec(None), Z + C)
    assert str(_error(lambda: pipeline.decode_bytes(data, 10240, file="f", pointer="/p"))) == want


def test_a_large_zstd_window_is_not_streamed_but_small_ones_are():
    """A frame header asking a window over 2^27 bytes: `check_chunk` gives False (the chunk is
    not checked, not called corrupt); 2^27 itself is streamed (here the frame then fails)."""
    big = NOSIZE[:5] + bytes([(28 - 10) << 3]) + NOSIZE[6:]  # window 2^28
    assert _check(Z, big, 10240) is False
    edge = NOSIZE[:5] + bytes([(27 - 10) << 3]) + NOSIZE[6:]  # window 2^27
    assert _check(Z, edge, 10240) is True
    assert stream.WINDOW_MAX == 1 << 27


def test_streaming_reads_in_steps_and_feeds_a_kib_at_a_time(monkeypatch):
    """The check asks its source for `STEP` bytes at a time (the zstd header's exact bytes
    aside) and feeds zstd `FEED` bytes at a time."""
    fed: list[int] = []
    real = stream._Zstd.feed

    def feed(self, data):  # type: ignore[no-untyped-def]
        fed.append(len(data))
        return real(self, data)

    monkeypatch.setattr(stream._Zstd, "feed", feed)
    big = zstandard.ZstdCompressor(level=1).compress(np.random.default_rng(0).bytes(5000))
    source = Trickle(big, 1 << 30)
    pipeline = CodecPipeline((), BytesCodec(None), Z)
    assert stream.check_chunk(pipeline, source, 5000, file="f", pointer=None)
    # the header's 5 bytes, its content size (2 bytes), one STEP, then one byte: no trailing
    assert source.asked == [5, 2, stream.STEP, 1]
    assert fed == [7] + [stream.FEED] * ((len(big) - 7) // stream.FEED) + [
        (len(big) - 7) % stream.FEED
    ]
    assert stream.STEP == 1 << 20 and stream.FEED == 1 << 10
    src = Trickle(_crc(DATA), 1 << 30)
    assert stream.check_chunk(
        CodecPipeline((), BytesCodec(None), C), src, 10240, file="f", pointer=None
    )
    assert src.asked[0] == stream.STEP


def test_streamable_pipelines():
    """`streamable`: bytes then any of zstd, gzip, crc32c; not sharding, not another codec."""
    assert stream.streamable(
        CodecPipeline((), BytesCodec(), (ZstdCodec(), GzipCodec(), Crc32cCodec()))
    )
    assert stream.streamable(CodecPipeline((TransposeCodec((1, 0)),), BytesCodec(), ()))
    sharding = ShardingCodec((1,), CodecPipeline((), BytesCodec(), ()), False, "end")
    assert not stream.streamable(CodecPipeline((), sharding, ()))
    assert not stream.streamable(CodecPipeline((), BytesCodec(), (ZstdCodec(), object())))


def _meta(codecs_: tuple, inner: tuple, outer: tuple, *, crc: bool = True, start: bool = False):  # type: ignore[no-untyped-def]
    sharding = ShardingCodec(
        inner, CodecPipeline((), BytesCodec("little"), codecs_), crc, "start" if start else "end"
    )
    return SimpleNamespace(sharding=sharding, chunk_shape=list(outer), numpy_dtype=np.dtype("<u2"))


@pytest.mark.parametrize("start", [False, True])
def test_check_shard_checks_every_inner_chunk(tmp_path, start):
    """`check_shard` of a shard of 2 x 2 inner chunks of 3 x 2 uint16 (12 bytes), zstd: every
    stored one is checked, from bytes or from a `ByteRange`; the fault of one names it
    (``inner chunk [i, j]``); one not stored is an error (LOAD-041) only with
    ``missing="error"``, else skipped (the chunks after it still checked). Kills `check_shard`
    mutants (34: ``break`` for ``continue``)."""
    good = zstandard.ZstdCompressor().compress(bytes(range(12)))
    short = zstandard.ZstdCompressor().compress(bytes(range(11)))
    meta = _meta(Z, (3, 2), (6, 4), start=start)
    for chunks, missing, want in (
        ([good, good, good, good], "error", True),
        ([good, None, good, good], "fill", True),
        (
            [good, None, good, short],
            "fill",
            "shard-0 at inner chunk [1, 1]: chunk bytes do not match the chunk shape and "
            "element size (expected 12, got 11) [ZARR-003]",
        ),
        (
            [good, b"junkjunk", good, None],
            "fill",
            "shard-0 at inner chunk [0, 1]: not a zstd frame [ZARR-003]",
        ),
    ):
        shard, _ = _shard(chunks, crc=True, start=start)
        for as_range in (False, True):
            if as_range:
                path = tmp_path / "shard"
                path.write_bytes(shard)
                fd = os.open(path, os.O_RDONLY)
                source = ByteRange(fd, 0, len(shard), "shard")
            else:
                source = shard
            try:
                got = stream.check_shard(meta, source, file="shard-0", missing=missing)
            except ZarrFormatError as e:
                got = str(e)
            finally:
                if as_range:
                    source.close()
            assert got == want, (chunks, as_range)
    shard, _ = _shard([good, None, good, good], crc=True, start=start)
    with pytest.raises(MissingDataError) as info:
        stream.check_shard(meta, shard, file="shard-0", missing="error")
    assert str(info.value) == (
        "shard-0: inner chunk [0, 1] of the shard is missing and the checkpoint stores every "
        "chunk (store_array_data_equal_to_fill_value; ZARR-008) [LOAD-041]"
    )


def test_check_shard_refuses_a_bad_index_and_skips_what_it_cannot_stream():
    """The shard's index is decoded first (its faults: "shard index"); a shard whose inner
    codecs cannot be streamed gives False untouched, as does an inner chunk whose zstd window
    is too large."""
    meta = _meta(Z, (3, 2), (6, 4))
    shard, _ = _shard([b"a"] * 4, crc=True, start=False)
    bad = shard[:-1] + bytes([shard[-1] ^ 1])
    e = _error(lambda: stream.check_shard(meta, bad, file="s", missing="fill"))
    assert (e.rule, e.file, e.pointer, e.message) == (
        "ZARR-016",
        "s",
        "shard index",
        "crc32c mismatch",
    )
    nested = SimpleNamespace(
        sharding=ShardingCodec((3, 2), CodecPipeline((), meta.sharding, ()), True, "end"),
        chunk_shape=[6, 4],
        numpy_dtype=np.dtype("<u2"),
    )
    assert stream.check_shard(nested, b"", file="s", missing="fill") is False
    wide = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(12))
    wide = wide[:5] + bytes([(28 - 10) << 3]) + wide[6:]
    good = zstandard.ZstdCompressor().compress(bytes(12))
    shard, _ = _shard([good, wide, good, good], crc=True, start=False)
    assert stream.check_shard(meta, shard, file="s", missing="fill") is False


def _frame(single: int, did: int, fcs: int) -> tuple[bytes, bytes]:
    """A zstd frame of `DATA` with the header fields given (single segment flag, dictionary
    id size code `did`, content size size code `fcs`; dictionary id 0: none), and its header:
    the blocks of `NOSIZE` after a header written here."""
    h = _ZMAGIC + bytes([(fcs << 6) | (single << 5) | did])
    if not single:
        h += NOSIZE[5:6]  # the window descriptor
    h += bytes((0, 1, 2, 4)[did])
    n = len(DATA)
    h += {1: struct.pack("<H", n - 256), 2: struct.pack("<I", n), 3: struct.pack("<Q", n)}.get(
        fcs, b""
    )
    return h, h + NOSIZE[6:]


_ZMAGIC = b"\x28\xb5\x2f\xfd"
HEADERS = [(s, d, f) for s in (0, 1) for d in range(4) for f in range(4) if not (s and f == 0)]


@pytest.mark.parametrize("single, did, fcs", HEADERS)
def test_every_zstd_frame_header_layout_is_read(single, did, fcs):
    """Frames with every header layout (single segment or a window descriptor, a dictionary id
    of 0, 1, 2 or 4 bytes, a content size of 0, 1, 2, 4 or 8 bytes): the header is read to its
    exact end, so a frame cut right after its header is a truncated frame, one cut inside it a
    truncated header, whatever the source's read sizes; a content size over the chunk is
    refused. Kills `_Zstd.header` mutants of the flag bits and the field sizes (`rest`), and
    `_Stage.exact` 6 (asking ``n + len(data)``: reads past the header)."""
    header, frame = _frame(single, did, fcs)
    assert zstandard.ZstdDecompressor().decompress(frame, max_output_size=len(DATA)) == DATA
    for k in (None, 1, 3):  # the source giving all at once, or 1 or 3 bytes a read
        assert _check(Z, frame, len(DATA), k) is True
        assert _check(Z, header, len(DATA), k) == "f at /p: truncated zstd frame [ZARR-003]"
        assert (
            _check(Z, header[:-1], len(DATA), k)
            == "f at /p: truncated zstd stream (frame header) [ZARR-003]"
        )
    if fcs:
        assert _check(Z, frame, len(DATA) - 1) == (
            "f at /p: zstd content size exceeds the chunk size (expected 10239, got 10240) "
            "[ZARR-003]"
        )
    else:
        assert _check(Z, frame, len(DATA) - 1) == (
            "f at /p: zstd stream decodes to more than the chunk size "
            "(expected '<= 10239', got '> 10239') [ZARR-003]"
        )


def test_a_one_byte_content_size_is_read():
    """A small single-segment frame (its content size in 1 byte): read, checked, bounded."""
    data = b"ab" * 100
    frame = zstandard.ZstdCompressor().compress(data)
    assert frame[4] >> 5 == 1 and len(frame) > 6  # single segment, fcs 0: 1 byte
    assert _check(Z, frame, 200) is True
    assert _check(Z, frame[:6], 200) == "f at /p: truncated zstd frame [ZARR-003]"
    assert _check(Z, frame, 199) == (
        "f at /p: zstd content size exceeds the chunk size (expected 199, got 200) [ZARR-003]"
    )


def test_stage_bounds_in_a_chain():
    """In a chain the innermost stage (last undone) is bounded by the chunk size, the others by
    `intermediate_bound`: a zstd frame inside crc32c declaring one byte more than the chunk is
    refused by zstd's content size check. Kills `_check_chunk` 7-11."""
    assert _check(Z + C, _crc(FRAME), 10239) == (
        "f at /p: zstd content size exceeds the chunk size (expected 10239, got 10240) [ZARR-003]"
    )
    assert _check(C + Z, zstandard.ZstdCompressor().compress(_crc(DATA)), 10240) is True
    assert _check(C + Z, zstandard.ZstdCompressor().compress(_crc(DATA)), 10239) == (
        f"{SIZE} (expected 10239, got '> 10239') [ZARR-003]"
    )


def test_a_raw_chunk_with_one_byte_too_many_after_an_exact_read():
    """Reads that reach the chunk size exactly, then one byte more: still refused (the check
    goes on reading until the source ends). Kills `_check_chunk` 29 (``>=``)."""
    assert (
        _check((), DATA + b"x", 10240, k=1024)
        == f"{SIZE} (expected 10240, got '> 10240') [ZARR-003]"
    )
    assert _check((), DATA, 10240, k=1024) is True


def test_a_streamed_gzip_bomb_is_decoded_a_step_at_a_time():
    """A gzip stream of 16 MiB of zeros checked as a chunk of 10 bytes: refused with the stage
    decoding at most a `STEP` per call, not the whole stream at once. Kills `_Gzip.more` 10."""
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    bomb = c.compress(bytes(16 << 20)) + c.flush()
    tracemalloc.start()
    try:
        got = _check(G, bomb, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (
        "f at /p: gzip stream decodes to more than the chunk size (expected '<= 10', got '> 10') "
        "[ZARR-003]"
    )
    assert peak < 8 << 20


def test_a_stage_bounds_its_whole_output_not_each_piece():
    """A gzip stream decoding to 1 MiB + 10 bytes checked as a chunk of 1 MiB + 5: the first
    read gives a whole `STEP`, within the bound; the second passes it, and the stage refuses
    (its count of bytes produced is cumulative). A stream decoding to 3 STEPs from one read
    is decoded whole. Kills `_Stage.read` 10, `_Gzip.more` 16 (the unconsumed input
    dropped)."""
    data = np.random.default_rng(1).bytes(stream.STEP + 10)
    nbytes = stream.STEP + 5
    assert _check(G, gzip.compress(data, 1), nbytes) == (
        f"f at /p: gzip stream decodes to more than the chunk size (expected '<= {nbytes}', "
        f"got '> {nbytes}') [ZARR-003]"
    )
    assert _check(G, gzip.compress(data, 1), stream.STEP + 10) is True
    # 3 MiB of zeros from a few KiB: each call decodes at most a STEP and keeps the input
    # it did not consume (`unconsumed_tail`) for the next
    zeros = gzip.compress(bytes(3 * stream.STEP))
    assert len(zeros) < stream.STEP
    assert _check(G, zeros, 3 * stream.STEP) is True


def test_a_stage_reads_no_further_than_it_was_asked():
    """A gzip stream of a STEP + 100 zeros, then junk, checked as a chunk of a STEP - 1: the
    first read stops once it holds the STEP it was asked for, so the bound is the fault
    reported, as `GzipCodec.decode` reports it in memory, and not the trailing junk one more
    call would reach first. Kills `_Stage.read` 2 (``<=``: one `more()` past what was asked)."""
    data = gzip.compress(bytes(stream.STEP + 100)) + b"junk"
    nbytes = stream.STEP - 1
    bound = "gzip stream decodes to more than the chunk size"
    assert _check(G, data, nbytes) == (
        f"f at /p: {bound} (expected '<= {nbytes}', got '> {nbytes}') [ZARR-003]"
    )
    with pytest.raises(ZarrFormatError) as info:
        GzipCodec().decode(data, max_size=nbytes, file="f", pointer="/p")
    assert str(info.value) == f"f at /p: {bound} [ZARR-003]"
    assert (
        _check(G, data, stream.STEP + 100)
        == "f at /p: truncated or trailing gzip stream [ZARR-003]"
    )


def test_a_zstd_frame_the_decoder_refuses_names_its_reason():
    """A frame whose header declares one byte more than its blocks hold: zstd's own stream
    decoder refuses it at the end (`_Zstd.feed`), ZARR-003 with zstd's reason. Kills
    `_Zstd.feed` 2 (message None)."""
    frame = FRAME[:5] + struct.pack("<H", len(DATA) + 1 - 256) + FRAME[7:]
    assert _check(Z, frame, 20000) == (
        "f at /p: corrupt zstd frame: zstd decompressor error: Data corruption detected [ZARR-003]"
    )
