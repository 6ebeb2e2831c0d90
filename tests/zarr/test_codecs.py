"""`ockpt.zarr.codecs`: the codec registry, each codec's decode, the codec pipeline, the parsers of
zarr v3 codec lists and the zarr v2 compressors, on real codec bytes; each error is asserted with
its rule, file and pointer. None needs tensorstore (the mutants each kills:
tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import functools
import gzip
import tracemalloc
import zlib

import numpy as np
import pytest
import zstandard

from ockpt import limits
from ockpt.errors import MemoryLimitError, ZarrFormatError
from ockpt.zarr import codecs
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
from tests.support.errors import error_fields, raised
from tests.support.zarr import BYTES_LE, with_crc32c

F4 = np.dtype("<f4")


_error = functools.partial(raised, ZarrFormatError)  # the ZarrFormatError call() raises


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
    assert error_fields(e) == {
        "rule": "ZARR-013",
        "file": "a/zarr.json",
        "message": "codec 'blosc' is not one the spec allows",
        "pointer": "/codecs/0",
        "expected": "bytes, transpose, zstd, gzip, crc32c or sharding_indexed",
        "got": "blosc",
    }


def test_an_unknown_v2_compressor_lists_null_and_the_known_ones():
    """from_v2_compressor of an id `V2_COMPRESSORS` lacks: ZARR-004, listing null and the
    compressors. Kills `_listed` mutants and `from_v2_compressor`'s message/pointer ones."""
    e = _error(lambda: from_v2_compressor({"id": "blosc"}, F4, file="a/.zarray"))
    assert error_fields(e) == {
        "rule": "ZARR-004",
        "file": "a/.zarray",
        "message": "compressor 'blosc' is not one the spec allows",
        "pointer": "/compressor",
        "expected": "null, zstd, gzip or zlib",
        "got": "blosc",
    }


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
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "f",
        "message": "gzip stream decodes to more than the chunk size",
        "pointer": "/p",
    }
    for bad in (make(data)[:-3], make(data) + b"\0"):
        e = _error(lambda bad=bad: codec.decode(bad, max_size=1000, file="f", pointer="/p"))
        assert error_fields(e) == {
            "rule": "ZARR-003",
            "file": "f",
            "message": "truncated or trailing gzip stream",
            "pointer": "/p",
        }


def test_a_corrupt_gzip_stream_names_file_and_pointer():
    """A stream zlib refuses: ZARR-003 with zlib's reason, the file and the pointer. Kills
    `GzipCodec.decode` 10, 12, 13, 16, 17."""
    e = _error(lambda: GzipCodec().decode(b"garbage!", max_size=10, file="a/c/0", pointer="/x"))
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "a/c/0",
        "message": "corrupt gzip stream: Error -3 while decompressing data: incorrect header check",
        "pointer": "/x",
    }


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
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "f",
        "message": "gzip stream decodes to more than the chunk size",
        "pointer": None,
    }
    assert peak < 4 << 20


# --------------------------------------------------------------------------------------------
# Crc32cCodec.decode, BytesCodec.decode, ZstdCodec.decode


def test_crc32c_codec_checks_and_strips_the_checksum():
    """The body before a stored CRC-32C (little endian) is returned when they match; a
    mismatch and a stream shorter than 4 bytes are ZARR-016 with the values."""
    body = b"some chunk bytes"
    assert Crc32cCodec().decode(with_crc32c(body), max_size=99, file="f", pointer="/p") == body
    assert Crc32cCodec().decode(with_crc32c(b""), max_size=0, file="f", pointer="/p") == b""
    e = _error(lambda: Crc32cCodec().decode(b"abcdefg", max_size=10, file="f", pointer="/p"))
    assert error_fields(e) == {
        "rule": "ZARR-016",
        "file": "f",
        "message": "crc32c mismatch",
        "pointer": "/p",
        "expected": "0x364b3fb7",
        "got": "0x67666564",
    }
    e = _error(lambda: Crc32cCodec().decode(b"abc", max_size=10, file="f", pointer="/p"))
    assert error_fields(e) == {
        "rule": "ZARR-016",
        "file": "f",
        "message": "too short for a crc32c checksum",
        "pointer": "/p",
        "got": 3,
    }


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
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "f",
        "message": "chunk bytes do not match the chunk shape and element size",
        "pointer": "/p",
        "expected": 8,
        "got": 7,
    }


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
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "g",
        "message": "chunk bytes do not match the chunk shape and element size",
        "pointer": "/q",
        "expected": 4,
        "got": 3,
    }
    # a gzip stream (outer codec) decoding to 2 x 1 + 1 MiB + 1 bytes is over its bound
    big = gzip.compress(bytes(2 + (1 << 20) + 1))
    q = CodecPipeline((), BytesCodec(None), (Crc32cCodec(), GzipCodec()))
    e = _error(lambda: q.decode_bytes(big, 1, file="f", pointer="/p"))
    assert error_fields(e) == {
        "rule": "ZARR-003",
        "file": "f",
        "message": "gzip stream decodes to more than the chunk size",
        "pointer": "/p",
    }
    ok = gzip.compress(with_crc32c(b"x"))
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
    assert one.decode_bytes(with_crc32c(b"x" * 100), 100, file="f", pointer="/p") == b"x" * 100
    with pytest.raises(MemoryLimitError) as info:
        one.decode_bytes(with_crc32c(b"x" * 101), 101, file="f", pointer="/p")
    assert error_fields(info) == {
        "rule": "LIMIT-006",
        "file": "f",
        "message": "the decoded chunk needs 101 bytes, more than the 100 bytes of memory available",
    }
    two = CodecPipeline((), BytesCodec(None), (Crc32cCodec(), Crc32cCodec()))
    with pytest.raises(MemoryLimitError) as info:
        two.decode_bytes(with_crc32c(with_crc32c(b"x")), 1, file="f", pointer="/p")
    assert error_fields(info) == {
        "rule": "LIMIT-006",
        "file": "f",
        "message": f"the decoded chunk needs {2 + (1 << 20)} bytes, more than the 100 bytes of "
        "memory available",
    }


# --------------------------------------------------------------------------------------------
# codecs: _config, _int, parse_codec, the parsers, parse_codecs


@pytest.mark.parametrize(
    "entries, rank, want",
    [
        (
            [],
            1,
            {
                "rule": "ZARR-013",
                "message": "codecs must be a non-empty list",
                "pointer": "/codecs",
                "got": [],
            },
        ),
        (
            "bytes",
            1,
            {
                "rule": "ZARR-013",
                "message": "codecs must be a non-empty list",
                "pointer": "/codecs",
                "got": "bytes",
            },
        ),
        (
            [BYTES_LE] * 17,
            1,
            {
                "rule": "ZARR-013",
                "message": "codecs must be a non-empty list",
                "pointer": "/codecs",
                "got": [BYTES_LE] * 17,
            },
        ),
        (
            [1],
            1,
            {
                "rule": "ZARR-013",
                "message": "a codec must be an object with a name",
                "pointer": "/codecs/0",
                "got": 1,
            },
        ),
        (
            [{"configuration": {}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "a codec must be an object with a name",
                "pointer": "/codecs/0",
                "got": {"configuration": {}},
            },
        ),
        (
            [{"name": 7}],
            1,
            {
                "rule": "ZARR-013",
                "message": "a codec must be an object with a name",
                "pointer": "/codecs/0",
                "got": {"name": 7},
            },
        ),
        (
            [{"name": "bytes", "foo": 1, "bar": 2}],
            1,
            {
                "rule": "ZARR-013",
                "message": "unknown codec keys ['bar', 'foo']",
                "pointer": "/codecs/0",
            },
        ),
        (
            [{"name": "bytes", "configuration": []}],
            1,
            {
                "rule": "ZARR-013",
                "message": "codec configuration must be an object",
                "pointer": "/codecs/0/configuration",
            },
        ),
        (
            [{"name": "bytes", "configuration": {"endian": "little", "y": 1, "x": 1}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "unknown codec configuration keys ['x', 'y']",
                "pointer": "/codecs/0/configuration",
            },
        ),
        (
            [{"name": "bytes", "configuration": {"endian": "middle"}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "bytes endian must be 'little' or 'big'",
                "pointer": "/codecs/0",
                "got": "middle",
            },
        ),
        (
            ["bytes"],
            1,
            {
                "rule": "ZARR-013",
                "message": "bytes codec needs endian for multi-byte element types",
                "pointer": "/codecs/0",
            },
        ),
        (
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, "crc32c"],
            2,
            {
                "rule": "ZARR-013",
                "message": "bytes->bytes codec before the array->bytes codec",
                "pointer": "/codecs/1",
            },
        ),
        (
            [BYTES_LE, BYTES_LE],
            1,
            {
                "rule": "ZARR-013",
                "message": "more than one array->bytes codec",
                "pointer": "/codecs/1",
            },
        ),
        (
            [BYTES_LE, {"name": "transpose", "configuration": {"order": [0]}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "array->array codec after the array->bytes codec",
                "pointer": "/codecs/1",
            },
        ),
        (
            [{"name": "transpose", "configuration": {"order": [0]}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "codecs lack an array->bytes codec",
                "pointer": "/codecs",
            },
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"checksum": 1}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "zstd checksum must be a boolean",
                "pointer": "/codecs/1",
                "got": 1,
            },
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"level": 1 << 31}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "level must be a 32-bit integer",
                "pointer": "/codecs/1/configuration/level",
                "got": 2147483648,
            },
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": -(1 << 31) - 1}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "level must be a 32-bit integer",
                "pointer": "/codecs/1/configuration/level",
                "got": -2147483649,
            },
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": True}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "level must be a 32-bit integer",
                "pointer": "/codecs/1/configuration/level",
                "got": True,
            },
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": 1.0}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "level must be a 32-bit integer",
                "pointer": "/codecs/1/configuration/level",
                "got": 1.0,
            },
        ),
        (
            [BYTES_LE, {"name": "gzip", "configuration": {"level": 1, "checksum": True}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "unknown codec configuration keys ['checksum']",
                "pointer": "/codecs/1/configuration",
            },
        ),
        (
            [BYTES_LE, {"name": "crc32c", "configuration": {"a": 1}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "unknown codec configuration keys ['a']",
                "pointer": "/codecs/1/configuration",
            },
        ),
        (
            [BYTES_LE, {"name": "zstd", "configuration": {"level": 1, "x": 2}}],
            1,
            {
                "rule": "ZARR-013",
                "message": "unknown codec configuration keys ['x']",
                "pointer": "/codecs/1/configuration",
            },
        ),
        (
            [{"name": "transpose", "configuration": {"order": [0, 1], "x": 1}}, BYTES_LE],
            2,
            {
                "rule": "ZARR-013",
                "message": "unknown codec configuration keys ['x']",
                "pointer": "/codecs/0/configuration",
            },
        ),
    ]
    + [
        (
            [{"name": "transpose", "configuration": {"order": order}}, BYTES_LE],
            2,
            {
                "rule": "ZARR-013",
                "message": "transpose order must be a permutation of the dimensions",
                "pointer": "/codecs/0",
                "got": order,
            },
        )
        for order in ([0, 1.0], [0, True], [0, "1"], [0, 0], [1, 2], [0], [0, 1, 2], "01", None)
    ],
)
def test_codecs_refused_with_rule_pointer_and_values(entries, rank, want):
    """Every refusal of `parse_codecs` and the codec parsers (`_config`, `_int`, `parse_codec`,
    `_parse_bytes`, `_parse_transpose`, `_parse_zstd`, `_parse_gzip`, `_parse_crc32c`): every
    field, so the message, rule, pointer (the entry's index, ``/configuration``, the key) and
    value are pinned. Kills the mutants of those messages, pointers and bounds."""
    e = _error(lambda: parse_codecs(entries, rank=rank, dtype=F4, file="a/zarr.json"))
    assert error_fields(e) == {"file": "a/zarr.json", **want}


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
    assert error_fields(e) == {
        "rule": "ZARR-013",
        "file": "f",
        "message": "a codec must be an object with a name",
        "pointer": "/x/codecs/1",
        "got": 5,
    }


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
    assert error_fields(e) == {
        "rule": "ZARR-004",
        "file": "a/.zarray",
        "message": "level must be a 32-bit integer",
        "pointer": "/compressor/level",
        "got": True,
    }


@pytest.mark.parametrize("compressor", ["zstd", {"id": 3}, {"level": 1}, 0])
def test_a_v2_compressor_must_be_null_or_an_object_with_an_id(compressor):
    """Anything else than null or an object with a string id: ZARR-004 at /compressor."""
    e = _error(lambda: from_v2_compressor(compressor, F4, file="a/.zarray"))
    assert error_fields(e) == {
        "rule": "ZARR-004",
        "file": "a/.zarray",
        "message": "compressor must be null or an object with an id",
        "pointer": "/compressor",
        "got": compressor,
    }
