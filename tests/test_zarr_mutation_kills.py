"""Tests written to kill the mutants of `ockpt.zarr._common`, `ockpt.zarr.array`,
`ockpt.zarr.v2` and `ockpt.zarr.v3` (tests/mutation/RESULTS.md, sections zarr/_common.py,
zarr/array.py, zarr/v2.py, zarr/v3.py), grouped by the function they guard.

They need no tensorstore (the mutation run blocks it, which skips all of tests/test_zarr.py):
chunks and shards are built here from numpy bytes, as the spec lays them out (spec/arrays.md),
and each error is asserted whole: message, rule, file, pointer, expected and got.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ockpt.bytecodecs import crc32c
from ockpt.errors import MissingDataError, ZarrFormatError
from ockpt.limits import LIMITS, Limits, applied
from ockpt.zarr import _common, array
from ockpt.zarr.array import (
    chunks_for_region,
    missing_chunk,
    open_metadata,
    overlap,
    read_region,
)
from ockpt.zarr.codecs import BytesCodec, TransposeCodec, ZstdCodec
from ockpt.zarr.shard_index import ShardingCodec
from ockpt.zarr.v2 import ArrayV2Metadata
from ockpt.zarr.v3 import ArrayV3Metadata

EMPTY = 2**64 - 1


def _raises(fn, kind=ZarrFormatError):
    with pytest.raises(kind) as info:
        fn()
    return info.value


def _bits(a: np.ndarray) -> bytes:
    return np.asarray(a).tobytes()


# --------------------------------------------------------------------------------------------
# _common.intermediate_bound, fail, load_json


def test_intermediate_bound_is_twice_the_chunk_plus_one_mib_capped():
    """The bound on an inner codec's output: 2 * size + 2**20, at most the limits'
    `max_chunk_bytes` (2**34 by default). Kills intermediate_bound 1-10."""
    assert _common.intermediate_bound(0) == 1 << 20
    assert _common.intermediate_bound(3) == 6 + (1 << 20)
    assert _common.intermediate_bound(1 << 33) == 1 << 34
    assert _common.intermediate_bound(1 << 34) == 1 << 34
    assert LIMITS.max_chunk_bytes == 1 << 34
    with applied(Limits(max_chunk_bytes=5 << 20)):
        assert _common.intermediate_bound(2 << 20) == 5 << 20


def test_fail_builds_a_zarr_format_error_with_every_field():
    """`fail` passes message, rule, file, pointer and the details through.
    Kills fail 1-9."""
    err = _common.fail("bad thing", "ZARR-099", file=Path("a/b"), pointer="/x", got=3)
    assert type(err) is ZarrFormatError
    assert (err.message, err.rule, err.file, err.pointer, err.got) == (
        "bad thing",
        "ZARR-099",
        "a/b",
        "/x",
        3,
    )
    assert str(err) == "a/b at /x: bad thing (got 3) [ZARR-099]"
    plain = _common.fail("m", "R")
    assert (plain.file, plain.pointer, str(plain)) == (None, None, "m [R]")


def test_load_json_parses_strictly_and_names_the_file():
    """A metadata document is parsed strictly (duplicate keys refused) with a bound of 16 MiB;
    every error is a ZarrFormatError naming the file (str() of a Path, "None" for none), the
    JSON rule, and the document pointer "". Kills load_json 1-15."""
    assert _common.load_json(b'{"a": [1, 2.5, null]}', file="f") == {"a": [1, 2.5, None]}
    err = _raises(lambda: _common.load_json(b'{"a": 1, "a": 2}', file=Path("x/.zarray")))
    assert type(err) is ZarrFormatError
    assert str(err) == "x/.zarray: duplicate key 'a' [JSON-002]"
    assert (err.rule, err.file, err.pointer) == ("JSON-002", "x/.zarray", "")
    err = _raises(lambda: _common.load_json(b"{", file=None))
    assert err.file == "None" and err.rule == "JSON-001"
    limit = 1 << 24
    assert LIMITS.max_array_metadata_bytes == limit
    assert _common.load_json(b" " * (limit - 3) + b"[1]", file="f") == [1]
    err = _raises(lambda: _common.load_json(b" " * (limit - 2) + b"[1]", file="big"))
    assert str(err) == "big: document too large [JSON-003]"
    assert (err.rule, err.file, err.pointer) == ("JSON-003", "big", "")


# --------------------------------------------------------------------------------------------
# _common.dims, numpy_dtype


def test_dims_accepts_bounded_lists_of_bounded_integers():
    """A list of at most 32 ints, each >= minimum and < 2**62, as a tuple.
    Kills dims 1-35."""
    assert _common.dims([], file="f", pointer="/s", rule="R") == ()
    got = _common.dims([0, 3, (1 << 62) - 1], file="f", pointer="/s", rule="R")
    assert got == (0, 3, (1 << 62) - 1) and type(got) is tuple
    assert _common.dims([1] * 32, file="f", pointer="/s", rule="R") == (1,) * 32
    assert _common.dims([1, 1], file="f", pointer="/s", rule="R", minimum=1) == (1, 1)
    err = _raises(lambda: _common.dims((1, 2), file="f", pointer="/shape", rule="R-1"))
    assert str(err) == "f at /shape: must be a list of at most 32 integers (got (1, 2)) [R-1]"
    assert (err.rule, err.file, err.pointer, err.got) == ("R-1", "f", "/shape", (1, 2))
    err = _raises(lambda: _common.dims([1] * 33, file="f", pointer="/shape", rule="R-1"))
    assert err.message == "must be a list of at most 32 integers" and err.got == [1] * 33
    for bad, minimum, message in [
        (True, 0, "must be an integer >= 0"),
        (1.0, 0, "must be an integer >= 0"),
        (-1, 0, "must be an integer >= 0"),
        (0, 1, "must be an integer >= 1"),
        (1 << 62, 0, "must be an integer >= 0"),
        ("2", 0, "must be an integer >= 0"),
    ]:
        err = _raises(
            lambda bad=bad, minimum=minimum: _common.dims(
                [5, bad], file="g", pointer="/chunks", rule="R-2", minimum=minimum
            )
        )
        assert str(err) == f"g at /chunks/1: {message} (got {bad!r}) [R-2]"
        assert (err.rule, err.file, err.pointer, err.got) == ("R-2", "g", "/chunks/1", bad)


def test_numpy_dtype_names_file_and_pointer():
    """The dtype of a zarr type string; an unsupported one names the file (str() of it, or
    none) and the pointer given. Kills numpy_dtype 1-10."""
    assert _common.numpy_dtype("<f4", file=None, pointer="/dtype") == np.dtype("<f4")
    assert _common.numpy_dtype(">i2", file="f", pointer="/dtype") == np.dtype(">i2")
    assert _common.numpy_dtype("bfloat16", file="f", pointer="/d") == ml_dtypes.bfloat16
    err = _raises(lambda: _common.numpy_dtype("<U4", file=Path("x/y"), pointer="/data_type"))
    assert (err.rule, err.file, err.pointer, err.got) == ("ZARR-001", "x/y", "/data_type", "<U4")
    err = _raises(lambda: _common.numpy_dtype("<U4", file=None, pointer="/dtype"))
    assert (err.file, err.pointer) == (None, "/dtype")
    assert str(err).startswith("at /dtype: unsupported element type")


# --------------------------------------------------------------------------------------------
# _common.check_extent


def test_check_extent_bounds_chunk_array_and_grid():
    """ZARR-005 for a chunk over 2**34 bytes, an array over 2**40 bytes, a grid of more than
    2**24 chunks (ceil division per dimension); each limit itself is allowed.
    Kills check_extent 1-52."""
    u1, f4 = np.dtype("u1"), np.dtype("<f4")
    ok = _common.check_extent
    ok((2**34,), (2**34,), u1, file="f", pointer="/p")  # a chunk of exactly the limit
    ok((2**32,), (2**32,), f4, file="f", pointer="/p")
    ok((2**40,), (2**16,), u1, file="f", pointer="/p")  # 2**24 chunks, 2**40 bytes
    ok((2**38, 1), (2**14, 1), f4, file="f", pointer="/p")
    ok((2**25, 3), (2, 3), u1, file="f", pointer="/p")  # 2**24 chunks
    ok((), (), f4, file="f", pointer="/p")
    err = _raises(lambda: ok((4,), (2**32 + 1,), f4, file="f", pointer="/chunks"))
    assert str(err) == (
        "f at /chunks: chunk too large for this reader "
        "(expected '<= 17179869184 bytes', got 17179869188) [ZARR-005]"
    )
    assert (err.rule, err.file, err.pointer) == ("ZARR-005", "f", "/chunks")
    err = _raises(lambda: ok((2**38 + 1,), (2**20,), f4, file="g", pointer="/q"))
    assert str(err) == (
        "g at /q: array too large for this reader "
        "(expected '<= 1099511627776 bytes', got 1099511627780) [ZARR-005]"
    )
    err = _raises(lambda: ok((2**25 + 1, 3), (2, 2), u1, file="h", pointer="/r"))
    assert str(err) == (
        "h at /r: the chunk grid holds more chunks than the limit "
        "(expected '<= 16777216', got 33554434) [ZARR-005]"
    )
    err = _raises(lambda: ok((2**25 + 1,), (2,), u1, file="h", pointer="/r"))
    assert err.got == 2**24 + 1 and err.expected == "<= 16777216"
    with pytest.raises(ValueError, match="zip"):
        ok((4, 4), (2,), u1, file="f", pointer="/p")  # ranks differ: a caller's bug


# --------------------------------------------------------------------------------------------
# _common.fill_array, _scalar, _int_range


def _fill(value, dtype):
    return _common.fill_array(value, np.dtype(dtype), file="f", pointer="/fill_value")


def _fill_error(value, dtype, pointer="/fill_value"):
    err = _raises(lambda: _fill(value, dtype))
    assert (err.rule, err.file, err.pointer) == ("ZARR-007", "f", pointer)
    return err


def test_fill_of_null_and_zero_is_all_zero_bits():
    """null, 0 and 0.0 are the all-zero pattern (float8_e8m0fnu has no zero: a cast would be
    NaN); -0.0 keeps its sign bit; the result is a 0-d array of the dtype; a float too large
    for the type is inf, without a warning. Kills fill_array 1-6, 65-84, 88-91."""
    for value in (None, 0, 0.0):
        out = _fill(value, ml_dtypes.float8_e8m0fnu)
        assert out.shape == () and out.dtype == ml_dtypes.float8_e8m0fnu
        assert _bits(out) == b"\0"
    assert _bits(_fill(None, "<f4")) == b"\0" * 4
    assert _bits(_fill(-0.0, "<f4")) == b"\0\0\0\x80"
    assert _bits(_fill(-0.0, ml_dtypes.float8_e8m0fnu)) == _bits(
        np.array(-0.0, np.float32).astype(ml_dtypes.float8_e8m0fnu)
    )
    assert _bits(_fill(0, "<i8")) == b"\0" * 8
    assert _fill(False, "bool").item() is False
    assert _fill(0.5, "<f4").item() == 0.5
    assert _fill(1, "<f8").item() == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cast's overflow warning is silenced
        assert _bits(_fill(1e10, "<f2")) == _bits(np.array(np.inf, "<f2"))  # overflow is inf


def test_fill_of_bool():
    """bool takes true/false and 0/1; nothing else, not even hex. Kills _scalar 1-11 and its
    error (65-76)."""
    assert _fill(True, "bool").item() is True
    assert _fill(1, "bool").item() is True
    assert _fill(0, "bool").item() is False
    for bad in (2, -1, "0x01", 1.0, "true"):
        err = _fill_error(bad, "bool")
        assert str(err) == (
            f"f at /fill_value: fill_value does not fit the element type bool "
            f"(got {bad!r}) [ZARR-007]"
        )


def test_fill_of_hex_bit_patterns():
    """A "0x..." fill is the element's raw bits, little-endian, whatever the dtype's byte order;
    more bits than the element holds, or no hex number, is ZARR-007.
    Kills _scalar 12-45 (24 is equivalent)."""
    assert _fill("0x3f800000", "<f4").item() == 1.0
    assert _fill("0x3f800000", ">f4").item() == 1.0
    assert _bits(_fill("0xffffffff", "<f4")) == b"\xff" * 4
    assert _bits(_fill("0x0", "<f4")) == b"\0" * 4
    assert _fill("0x1", "<u2").item() == 1
    assert _fill("0x0100", "<u2").item() == 256
    assert _fill("0xffff", "<i2").item() == -1
    assert _fill("0x3f80", ml_dtypes.bfloat16).astype(np.float32).item() == 1.0
    assert _fill("0x7", "int4").astype(np.int8).item() == 7
    for bad, dtype, name in [
        ("0x100000000", "<f4", "float32"),
        ("0x10000", "<u2", "uint16"),
        ("0xzz", "<f4", "float32"),
        ("0x-1", "<f4", "float32"),
        ("0x", "<u1", "uint8"),
    ]:
        err = _fill_error(bad, dtype)
        assert str(err) == (
            f"f at /fill_value: fill_value does not fit the element type {name} "
            f"(got {bad!r}) [ZARR-007]"
        )


def test_fill_of_integers_is_range_checked():
    """Integer types take ints in their range (numpy's, or ml_dtypes' for int4/uint4 ...),
    no bool, float or string. Kills _scalar 46-60 (53, 54 are equivalent) and _int_range 1-10
    (2, 6, 7 are equivalent)."""
    assert _fill(-128, "i1").item() == -128
    assert _fill(127, "i1").item() == 127
    assert _fill(255, "u1").item() == 255
    assert _fill(2**64 - 1, "<u8").item() == 2**64 - 1
    assert _fill(-(2**63), "<i8").item() == -(2**63)
    assert _fill(-8, "int4").astype(np.int8).item() == -8
    assert _fill(7, "int4").astype(np.int8).item() == 7
    assert _fill(15, "uint4").astype(np.int8).item() == 15
    assert _common._int_range(np.dtype("i1")) == (-128, 127)
    assert _common._int_range(np.dtype(ml_dtypes.int4)) == (-8, 7)
    assert _common._int_range(np.dtype(ml_dtypes.uint4)) == (0, 15)
    for bad, dtype, name in [
        (-129, "i1", "int8"),
        (128, "i1", "int8"),
        (256, "u1", "uint8"),
        (-1, "u1", "uint8"),
        (8, "int4", "int4"),
        (-9, "int4", "int4"),
        (16, "uint4", "uint4"),
        (True, "i1", "int8"),
        (1.0, "<i4", "int32"),
        ("NaN", "<i4", "int32"),
        ("1", "<i4", "int32"),
    ]:
        err = _fill_error(bad, dtype)
        assert str(err) == (
            f"f at /fill_value: fill_value does not fit the element type {name} "
            f"(got {bad!r}) [ZARR-007]"
        )


def test_fill_of_floats():
    """Floats take numbers and "NaN", "Infinity", "-Infinity"; not bool, not other strings.
    Kills _scalar 61-64."""
    assert np.isnan(_fill("NaN", "<f4").item())
    assert _fill("Infinity", "<f8").item() == np.inf
    assert _fill("-Infinity", "<f2").item() == -np.inf
    assert _fill(2.5, ml_dtypes.bfloat16).astype(np.float32).item() == 2.5
    assert _fill(-3, "<f8").item() == -3.0
    for bad in (True, False, "nan", "inf", "1.5", [1.0]):
        err = _fill_error(bad, "<f4")
        assert str(err) == (
            f"f at /fill_value: fill_value does not fit the element type float32 "
            f"(got {bad!r}) [ZARR-007]"
        )


def test_fill_of_complex_is_real_and_imaginary_parts():
    """A complex fill is [real, imag], each a float32 (complex64) or float64 (complex128)
    value: hex of that width, number or special; errors point at the part.
    Kills fill_array 7-64."""
    out = _fill(["0x3f800000", "0x40000000"], "complex64")
    assert out.dtype == np.complex64 and out.shape == () and out.item() == 1 + 2j
    out = _fill(["0x3ff0000000000000", "-Infinity"], "complex128")
    assert out.dtype == np.complex128 and out.item() == complex(1, -np.inf)
    assert _fill([0.5, -1], "complex128").item() == 0.5 - 1j
    assert _fill([0, 0], "complex64").item() == 0
    for bad in (5, [1.0], [1.0, 2.0, 3.0], (1.0, 2.0)):
        err = _fill_error(bad, "complex64")
        assert str(err) == (
            f"f at /fill_value: complex fill_value must be [real, imag] (got {bad!r}) [ZARR-007]"
        )
    err = _fill_error(["0x3ff0000000000000", 1], "complex64", "/fill_value/0")
    assert str(err) == (
        "f at /fill_value/0: fill_value does not fit the element type float32 "
        "(got '0x3ff0000000000000') [ZARR-007]"
    )
    err = _fill_error([1, "x"], "complex128", "/fill_value/1")
    assert str(err) == (
        "f at /fill_value/1: fill_value does not fit the element type float64 (got 'x') [ZARR-007]"
    )


# --------------------------------------------------------------------------------------------
# v2: ArrayV2Metadata


def _v2(**change) -> dict:
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


def _v2_error(d, file="a/.zarray"):
    return _raises(lambda: ArrayV2Metadata.from_dict(d, file=file))


def test_v2_metadata_fields_and_round_trip():
    """Every field of a .zarray is kept as read, the derived fields are those of the
    document, and to_dict gives the document back, keys in tensorstore's (sorted) order,
    unknown keys last. Kills ArrayV2Metadata.from_dict return-value mutants, to_dict 1-26."""
    d = _v2(compressor={"id": "zstd", "level": 3}, fill_value=-2, extra_key={"x": 1})
    m = ArrayV2Metadata.from_dict(d, file="a/.zarray")
    assert (m.shape, m.chunks, m.chunk_shape, m.dtype) == ((5, 7), (2, 3), (2, 3), "<i4")
    assert m.compressor == {"id": "zstd", "level": 3} and m.fill_value == -2
    assert (m.order, m.filters, m.dimension_separator) == ("C", None, ".")
    assert m.extra == {"extra_key": {"x": 1}}
    assert m.numpy_dtype == np.dtype("<i4") and m.zarr_format == 2
    assert m.fill.dtype == np.dtype("<i4") and m.fill.item() == -2
    assert m.pipeline.array_to_array == ()
    assert m.pipeline.array_to_bytes == BytesCodec("little")
    assert m.pipeline.bytes_to_bytes == (ZstdCodec(3),)
    out = m.to_dict()
    assert out == d
    assert list(out) == [
        "chunks",
        "compressor",
        "dimension_separator",
        "dtype",
        "fill_value",
        "filters",
        "order",
        "shape",
        "zarr_format",
        "extra_key",
    ]
    assert type(out["chunks"]) is list and type(out["shape"]) is list
    # an absent separator stays absent; filters [] and order F are kept
    d = _v2(dimension_separator="absent", filters=[], order="F", dtype=">f8", fill_value="NaN")
    m = ArrayV2Metadata.from_dict(d)
    assert m.dimension_separator is None and m.separator == "."
    assert (m.filters, m.order, m.extra) == ([], "F", {})
    assert m.numpy_dtype == np.dtype(">f8")
    assert m.pipeline.array_to_array == (TransposeCodec((1, 0)),)
    assert m.pipeline.array_to_bytes == BytesCodec("big")
    assert m.to_dict() == d and "dimension_separator" not in m.to_dict()
    assert list(m.to_dict())[1:3] == ["compressor", "dtype"]


def test_v2_optional_fields_default():
    """order absent is C, filters and dimension_separator absent are None.
    Kills ArrayV2Metadata.from_dict d.get(...) default mutants."""
    d = _v2(order="absent", filters="absent", dimension_separator="absent")
    m = ArrayV2Metadata.from_dict(d)
    assert (m.order, m.filters, m.dimension_separator) == ("C", None, None)
    assert m.pipeline.array_to_array == ()
    assert m.to_dict() == dict(d, order="C", filters=None)


def test_v2_chunk_keys():
    """Indices joined by the separator ("." when absent); "0" for a 0-d array.
    Kills ArrayV2Metadata.chunk_key 1-4."""
    m = ArrayV2Metadata.from_dict(_v2())
    assert m.chunk_key((1, 10)) == "1.10"
    assert ArrayV2Metadata.from_dict(_v2(dimension_separator="/")).chunk_key((1, 10)) == "1/10"
    m = ArrayV2Metadata.from_dict(_v2(dimension_separator="absent"))
    assert m.chunk_key((2, 0)) == "2.0"
    m = ArrayV2Metadata.from_dict(_v2(shape=[], chunks=[]))
    assert m.chunk_key(()) == "0"


def test_v2_from_bytes_parses_and_names_the_file():
    """from_bytes parses JSON, then the dict, both naming the file.
    Kills ArrayV2Metadata.from_bytes 1-8."""
    d = _v2()
    m = ArrayV2Metadata.from_bytes(json.dumps(d).encode(), file="p/.zarray")
    assert m.to_dict() == d
    err = _raises(lambda: ArrayV2Metadata.from_bytes(b"[1", file="p/.zarray"))
    assert err.file == "p/.zarray" and err.rule == "JSON-001"
    bad = json.dumps(_v2(order="X")).encode()
    err = _raises(lambda: ArrayV2Metadata.from_bytes(bad, file="p/.zarray"))
    assert str(err) == "p/.zarray at /order: order must be 'C' or 'F' (got 'X') [ZARR-004]"


@pytest.mark.parametrize(
    "key", ["zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value"]
)
def test_v2_required_fields(key):
    """Each required field missing is ZARR-002 at its pointer.
    Kills ArrayV2Metadata.from_dict required-field mutants."""
    err = _v2_error(_v2(**{key: "absent"}))
    assert str(err) == f"a/.zarray at /{key}: missing required field {key!r} [ZARR-002]"
    assert (err.rule, err.pointer) == ("ZARR-002", f"/{key}")


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"zarr_format": 3}, "at /zarr_format: zarr_format must be 2 (got 3) [ZARR-002]"),
        ({"zarr_format": "2"}, "at /zarr_format: zarr_format must be 2 (got '2') [ZARR-002]"),
        (
            {"shape": [5, -7]},
            "at /shape/1: must be an integer >= 0 (got -7) [ZARR-005]",
        ),
        (
            {"shape": "5"},
            "at /shape: must be a list of at most 32 integers (got '5') [ZARR-005]",
        ),
        ({"chunks": [2, 0]}, "at /chunks/1: must be an integer >= 1 (got 0) [ZARR-005]"),
        (
            {"chunks": [2]},
            "at /chunks: chunks must have the rank of shape (expected 2, got 1) [ZARR-005]",
        ),
        (
            {"chunks": [2, 3, 4]},
            "at /chunks: chunks must have the rank of shape (expected 2, got 3) [ZARR-005]",
        ),
        ({"order": "c"}, "at /order: order must be 'C' or 'F' (got 'c') [ZARR-004]"),
        ({"order": None}, "at /order: order must be 'C' or 'F' (got None) [ZARR-004]"),
        (
            {"filters": [{"id": "delta"}]},
            "at /filters: filters must be null (got [{'id': 'delta'}]) [ZARR-004]",
        ),
        ({"filters": {}}, "at /filters: filters must be null (got {}) [ZARR-004]"),
        (
            {"dimension_separator": "-"},
            "at /dimension_separator: dimension_separator must be '.' or '/' (got '-') [ZARR-006]",
        ),
        (
            {"shape": [2**40 + 1, 1], "chunks": [2**20, 1], "dtype": "|u1"},
            "at /chunks: array too large for this reader "
            "(expected '<= 1099511627776 bytes', got 1099511627777) [ZARR-005]",
        ),
        (
            {"compressor": {"id": "blosc"}},
            "at /compressor: compressor 'blosc' is not one the spec allows "
            "(expected 'null, zstd, gzip or zlib', got 'blosc') [ZARR-004]",
        ),
        (
            {"fill_value": 1.5},
            "at /fill_value: fill_value does not fit the element type int32 (got 1.5) [ZARR-007]",
        ),
    ],
)
def test_v2_refusals_name_file_pointer_and_rule(change, text):
    """Each check of a .zarray, its whole error: file, pointer, message, details, rule.
    Kills ArrayV2Metadata.from_dict check mutants."""
    assert str(_v2_error(_v2(**change))) == "a/.zarray " + text


def test_v2_not_an_object_and_dtype():
    """A .zarray that is no object is ZARR-002 at the root; a bad dtype is ZARR-001 at /dtype.
    Kills ArrayV2Metadata.from_dict 1-15 and the numpy_dtype call mutants."""
    err = _v2_error([1], file=Path("q/.zarray"))
    assert str(err) == "q/.zarray: .zarray must be a JSON object [ZARR-002]"
    assert (err.rule, err.file, err.pointer) == ("ZARR-002", "q/.zarray", "")
    err = _v2_error(_v2(dtype="|O"))
    assert (err.rule, err.file, err.pointer, err.got) == ("ZARR-001", "a/.zarray", "/dtype", "|O")


def test_v2_zarr_format_is_an_integer_two():
    """zarr_format 2 is accepted whatever the other keys; true (== 1) is not 2.
    Kills ArrayV2Metadata.from_dict zarr_format mutants."""
    assert ArrayV2Metadata.from_dict(_v2(zarr_format=2)).zarr_format == 2
    err = _v2_error(_v2(zarr_format=True))
    assert str(err) == "a/.zarray at /zarr_format: zarr_format must be 2 (got True) [ZARR-002]"


# --------------------------------------------------------------------------------------------
# v3: ArrayV3Metadata

_LE = {"name": "bytes", "configuration": {"endian": "little"}}


def _sharding(inner, codecs=None, index_location=None) -> dict:
    conf = {
        "chunk_shape": list(inner),
        "codecs": codecs or [_LE],
        "index_codecs": [_LE, {"name": "crc32c"}],
    }
    if index_location:
        conf["index_location"] = index_location
    return {"name": "sharding_indexed", "configuration": conf}


def _v3(shape=(5, 7), chunk=(2, 3), codecs=None, **change) -> dict:
    d = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 7,
        "codecs": codecs or [_LE],
    }
    d.update(change)
    return {k: v for k, v in d.items() if v != "absent"}


def _v3_error(d, file="a/zarr.json"):
    return _raises(lambda: ArrayV3Metadata.from_dict(d, file=file))


def test_v3_metadata_fields_and_round_trip():
    """Every field of a zarr.json is kept as read, the derived fields are those of the
    document, and to_dict gives it back, keys in tensorstore's (sorted) order, unknown keys
    (must_understand: false) last. Kills ArrayV3Metadata.from_dict return-value mutants and
    to_dict 1-45."""
    d = _v3(
        attributes={"a": 1},
        dimension_names=["x", None],
        storage_transformers=[],
        chunk_key_encoding={"name": "v2", "configuration": {"separator": "/"}},
        fill_value="0x00000009",
        ext={"must_understand": False, "y": 2},
    )
    m = ArrayV3Metadata.from_dict(d, file="a/zarr.json")
    assert (m.shape, m.chunk_shape, m.data_type) == ((5, 7), (2, 3), "int32")
    assert m.chunk_grid == d["chunk_grid"] and m.chunk_key_encoding == d["chunk_key_encoding"]
    assert (m.fill_value, m.codecs, m.attributes) == ("0x00000009", (_LE,), {"a": 1})
    assert (m.dimension_names, m.storage_transformers) == (("x", None), ())
    assert m.extra == {"ext": {"must_understand": False, "y": 2}}
    assert (m.separator, m.key_encoding, m.zarr_format) == ("/", "v2", 3)
    assert m.numpy_dtype == np.dtype("int32") and m.fill.item() == 9
    assert m.fill.dtype == np.dtype("int32")
    assert m.pipeline.array_to_bytes == BytesCodec("little") and m.sharding is None
    out = m.to_dict()
    assert out == d
    assert list(out) == [
        "attributes",
        "chunk_grid",
        "chunk_key_encoding",
        "codecs",
        "data_type",
        "dimension_names",
        "fill_value",
        "node_type",
        "shape",
        "storage_transformers",
        "zarr_format",
        "ext",
    ]
    assert type(out["codecs"]) is list and type(out["shape"]) is list
    assert type(out["dimension_names"]) is list and type(out["storage_transformers"]) is list
    m = ArrayV3Metadata.from_dict(_v3())
    assert (m.attributes, m.dimension_names, m.storage_transformers, m.extra) == (
        None,
        None,
        None,
        {},
    )
    assert (m.separator, m.key_encoding) == ("/", "default")
    assert m.to_dict() == _v3()
    assert list(m.to_dict()) == [
        "chunk_grid",
        "chunk_key_encoding",
        "codecs",
        "data_type",
        "fill_value",
        "node_type",
        "shape",
        "zarr_format",
    ]


def test_v3_chunk_keys():
    """default: "c" then each index after the separator ("/" unless configured); v2: the
    indices joined by the separator ("." unless configured), "0" for a 0-d array.
    Kills ArrayV3Metadata.chunk_key 1-12 and the separator default mutants."""
    key = lambda enc, index, shape=(5, 7), chunk=(2, 3): ArrayV3Metadata.from_dict(  # noqa: E731
        _v3(shape=shape, chunk=chunk, chunk_key_encoding=enc)
    ).chunk_key(index)
    assert key({"name": "default"}, (1, 10)) == "c/1/10"
    assert key({"name": "default", "configuration": {}}, (1, 10)) == "c/1/10"
    assert key({"name": "default", "configuration": {"separator": "."}}, (1, 10)) == "c.1.10"
    assert key({"name": "default"}, (), (), ()) == "c"
    assert key({"name": "v2"}, (1, 10)) == "1.10"
    assert key({"name": "v2", "configuration": {"separator": "/"}}, (1, 10)) == "1/10"
    assert key({"name": "v2"}, (), (), ()) == "0"


def test_v3_from_bytes_parses_and_names_the_file():
    """from_bytes parses JSON, then the dict, both naming the file.
    Kills ArrayV3Metadata.from_bytes 1-8."""
    d = _v3()
    m = ArrayV3Metadata.from_bytes(json.dumps(d).encode(), file="p/zarr.json")
    assert m.to_dict() == d
    err = _raises(lambda: ArrayV3Metadata.from_bytes(b"[1", file="p/zarr.json"))
    assert err.file == "p/zarr.json" and err.rule == "JSON-001"
    bad = json.dumps(_v3(node_type="group")).encode()
    err = _raises(lambda: ArrayV3Metadata.from_bytes(bad, file="p/zarr.json"))
    assert str(err) == (
        "p/zarr.json at /node_type: node_type must be 'array' (got 'group') [ZARR-010]"
    )


@pytest.mark.parametrize(
    "key",
    [
        "zarr_format",
        "node_type",
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
    ],
)
def test_v3_required_fields(key):
    """Each required field missing is ZARR-010 at its pointer.
    Kills ArrayV3Metadata.from_dict required-field mutants."""
    d = _v3()
    del d[key]
    err = _v3_error(d)
    assert str(err) == f"a/zarr.json at /{key}: missing required field {key!r} [ZARR-010]"
    assert (err.rule, err.pointer) == ("ZARR-010", f"/{key}")


_ENC_ERR = "at /chunk_key_encoding/configuration: chunk_key_encoding separator must be '/' or '.'"
_GRID = "at /chunk_grid: chunk_grid must be the regular grid"


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"ext": 1}, "at /ext: unknown field 'ext' without must_understand: false [ZARR-010]"),
        (
            {"ext": {"must_understand": True}},
            "at /ext: unknown field 'ext' without must_understand: false [ZARR-010]",
        ),
        (
            {"ext": {"must_understand": 0}},
            "at /ext: unknown field 'ext' without must_understand: false [ZARR-010]",
        ),
        ({"ext": {}}, "at /ext: unknown field 'ext' without must_understand: false [ZARR-010]"),
        ({"zarr_format": 2}, "at /zarr_format: zarr_format must be 3 (got 2) [ZARR-010]"),
        ({"zarr_format": True}, "at /zarr_format: zarr_format must be 3 (got True) [ZARR-010]"),
        (
            {"node_type": "group"},
            "at /node_type: node_type must be 'array' (got 'group') [ZARR-010]",
        ),
        ({"shape": [5, -1]}, "at /shape/1: must be an integer >= 0 (got -1) [ZARR-005]"),
        (
            {"data_type": "float128"},
            'at /data_type: unsupported element type (expected "a numeric zarr dtype '
            "(e.g. '<f4', 'bfloat16', 'int4')\", got 'float128') [ZARR-001]",
        ),
        ({"chunk_grid": [2, 3]}, f"{_GRID} (got [2, 3]) [ZARR-011]"),
        (
            {"chunk_grid": {"name": "rectangular", "configuration": {"chunk_shape": [2, 3]}}},
            f"{_GRID} (got {{'name': 'rectangular', 'configuration': {{'chunk_shape': [2, 3]}}}})"
            " [ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": [2, 3]}},
            f"{_GRID} (got {{'name': 'regular', 'configuration': [2, 3]}}) [ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular"}},
            f"{_GRID} (got {{'name': 'regular'}}) [ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {}}},
            "at /chunk_grid/configuration/chunk_shape: must be a list of at most 32 integers "
            "(got None) [ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 0]}}},
            "at /chunk_grid/configuration/chunk_shape/1: must be an integer >= 1 (got 0) "
            "[ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}},
            "at /chunk_grid/configuration: chunk_shape must have the rank of shape "
            "(expected 2, got 1) [ZARR-011]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3, 1]}}},
            "at /chunk_grid/configuration: chunk_shape must have the rank of shape "
            "(expected 2, got 3) [ZARR-011]",
        ),
        (
            {
                "chunk_grid": {
                    "name": "regular",
                    "configuration": {"chunk_shape": [2, 3], "x": 1},
                }
            },
            "at /chunk_grid/configuration: chunk_shape must have the rank of shape "
            "(expected 2, got 2) [ZARR-011]",
        ),
        (
            {"chunk_key_encoding": "default"},
            "at /chunk_key_encoding: chunk_key_encoding must be 'default' or 'v2' "
            "(got 'default') [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "v3"}},
            "at /chunk_key_encoding: chunk_key_encoding must be 'default' or 'v2' "
            "(got {'name': 'v3'}) [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "-"}}},
            f"{_ENC_ERR} (got {{'separator': '-'}}) [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": None}}},
            f"{_ENC_ERR} (got {{'separator': None}}) [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": ["/"]}},
            f"{_ENC_ERR} (got ['/']) [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": ".", "x": 1}}},
            f"{_ENC_ERR} (got {{'separator': '.', 'x': 1}}) [ZARR-012]",
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"x": 1}}},
            f"{_ENC_ERR} (got {{'x': 1}}) [ZARR-012]",
        ),
        (
            {"storage_transformers": [{"name": "t"}]},
            "at /storage_transformers: storage_transformers must be empty "
            "(got [{'name': 't'}]) [ZARR-010]",
        ),
        (
            {"storage_transformers": {}},
            "at /storage_transformers: storage_transformers must be empty (got {}) [ZARR-010]",
        ),
        (
            {"dimension_names": ["x"]},
            "at /dimension_names: dimension_names must list one name (or null) per dimension "
            "(got ['x']) [ZARR-010]",
        ),
        (
            {"dimension_names": "xy"},
            "at /dimension_names: dimension_names must list one name (or null) per dimension "
            "(got 'xy') [ZARR-010]",
        ),
        (
            {"dimension_names": ["x", "y", "z"]},
            "at /dimension_names: dimension_names must list one name (or null) per dimension "
            "(got ['x', 'y', 'z']) [ZARR-010]",
        ),
        ({"attributes": []}, "at /attributes: attributes must be an object (got []) [ZARR-010]"),
        (
            {"attributes": "a"},
            "at /attributes: attributes must be an object (got 'a') [ZARR-010]",
        ),
        (
            {"shape": [2**38 + 1, 1], "data_type": "float32"},
            "at /chunk_grid/configuration/chunk_shape: array too large for this reader "
            "(expected '<= 1099511627776 bytes', got 1099511627780) [ZARR-005]",
        ),
        (
            {"fill_value": "Infinity"},
            "at /fill_value: fill_value does not fit the element type int32 (got 'Infinity') "
            "[ZARR-007]",
        ),
    ],
)
def test_v3_refusals_name_file_pointer_and_rule(change, text):
    """Each check of a zarr.json, its whole error: file, pointer, message, details, rule.
    Kills ArrayV3Metadata.from_dict check mutants."""
    assert str(_v3_error(_v3(**change))) == "a/zarr.json " + text


def test_v3_not_an_object():
    """A zarr.json that is no object is ZARR-010 at the root.
    Kills ArrayV3Metadata.from_dict 1-15."""
    err = _v3_error([1], file=Path("q/zarr.json"))
    assert str(err) == "q/zarr.json: zarr.json must be a JSON object [ZARR-010]"
    assert (err.rule, err.file, err.pointer) == ("ZARR-010", "q/zarr.json", "")


def test_v3_codecs_are_parsed_for_the_rank_dtype_and_file():
    """The codec chain is parsed with the array's rank (transpose order), element type
    (bytes endian) and file. Kills the parse_codecs call mutants."""
    codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}}, _LE]
    m = ArrayV3Metadata.from_dict(_v3(codecs=codecs))
    assert m.pipeline.array_to_array == (TransposeCodec((1, 0)),)
    err = _v3_error(_v3(codecs=[{"name": "transpose", "configuration": {"order": [0]}}, _LE]))
    assert (err.rule, err.file) == ("ZARR-013", "a/zarr.json")
    err = _v3_error(_v3(codecs=[{"name": "bytes"}]))  # int32 needs an endian
    assert (err.rule, err.file) == ("ZARR-013", "a/zarr.json")
    m = ArrayV3Metadata.from_dict(_v3(codecs=[{"name": "bytes"}], data_type="uint8"))
    assert m.numpy_dtype == np.dtype("uint8")


def test_v3_sharding_checks():
    """Sharding: no array->array codec before it (ZARR-014), the shard shape a multiple of
    the inner chunk shape (ZARR-014, with both shapes), and the inner grid within the limits
    (ZARR-005 at /codecs). Kills ArrayV3Metadata.from_dict sharding mutants."""
    m = ArrayV3Metadata.from_dict(_v3(shape=(8, 6), chunk=(4, 6), codecs=[_sharding((2, 3))]))
    assert m.sharding is m.pipeline.array_to_bytes
    assert isinstance(m.sharding, ShardingCodec) and m.sharding.chunk_shape == (2, 3)
    m = ArrayV3Metadata.from_dict(_v3(shape=(8, 6), chunk=(4, 6), codecs=[_sharding((4, 6))]))
    assert m.sharding.chunk_shape == (4, 6)
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    err = _v3_error(_v3(shape=(8, 6), chunk=(4, 6), codecs=[transpose, _sharding((2, 3))]))
    assert str(err) == (
        "a/zarr.json at /codecs: array->array codecs before sharding_indexed are not in the "
        "spec's subset [ZARR-014]"
    )
    for inner in ((3, 3), (4, 4), (2, 4)):
        err = _v3_error(_v3(shape=(8, 6), chunk=(4, 6), codecs=[_sharding(inner)]))
        assert str(err) == (
            "a/zarr.json at /codecs: the shard shape must be a multiple of the inner chunk "
            f"shape (expected 'divisors of [4, 6]', got {list(inner)}) [ZARR-014]"
        )
    err = _v3_error(_v3(shape=(2**25, 1), chunk=(2**25, 1), codecs=[_sharding((1, 1))]))
    assert str(err) == (
        "a/zarr.json at /codecs: the chunk grid holds more chunks than the limit "
        "(expected '<= 16777216', got 33554432) [ZARR-005]"
    )
    ArrayV3Metadata.from_dict(_v3(shape=(2**24, 1), chunk=(2**24, 1), codecs=[_sharding((1, 1))]))


# --------------------------------------------------------------------------------------------
# array: open_metadata


def _json(d: dict) -> bytes:
    return json.dumps(d).encode()


def test_open_metadata_reads_zarray_first_then_zarr_json():
    """Without a version, .zarray is read first, zarr.json only when it is absent; with 2 or
    3 only that file is asked for; none: None. Keys take the prefix; errors name
    "<file>/<key>", or the key without a file. Kills open_metadata 1-39 (lookups, order,
    names)."""
    array._PARSED.clear()
    v2, v3 = _json(_v2()), _json(_v3())
    asked = []

    def getter(store):
        def get(key):
            asked.append(key)
            return store.get(key)

        return get

    both = getter({"p/.zarray": v2, "p/zarr.json": v3})
    assert type(open_metadata(both, prefix="p/")) is ArrayV2Metadata
    assert asked == ["p/.zarray"]
    asked.clear()
    assert type(open_metadata(both, prefix="p/", zarr_version=3)) is ArrayV3Metadata
    assert asked == ["p/zarr.json"]
    asked.clear()
    assert type(open_metadata(both, prefix="p/", zarr_version=2)) is ArrayV2Metadata
    assert asked == ["p/.zarray"]
    asked.clear()
    only3 = getter({"zarr.json": v3})
    assert type(open_metadata(only3)) is ArrayV3Metadata
    assert asked == [".zarray", "zarr.json"]
    asked.clear()
    assert open_metadata(only3, zarr_version=2) is None
    assert open_metadata(getter({}), prefix="p/") is None
    assert asked == [".zarray", "p/.zarray", "p/zarr.json"]
    bad2, bad3 = _json(_v2(order="X")), _json(_v3(node_type="group"))
    err = _raises(lambda: open_metadata({"p/.zarray": bad2}.get, prefix="p/", file="ck"))
    assert (err.file, err.pointer, err.rule) == ("ck/p/.zarray", "/order", "ZARR-004")
    err = _raises(lambda: open_metadata({"p/zarr.json": bad3}.get, prefix="p/"))
    assert (err.file, err.pointer, err.rule) == ("p/zarr.json", "/node_type", "ZARR-010")
    err = _raises(lambda: open_metadata({"zarr.json": bad3}.get, file=Path("d")))
    assert err.file == "d/zarr.json"
    # bytes-like values are parsed too
    m = open_metadata({"zarr.json": bytearray(_json(_v3(fill_value=5)))}.get)
    assert m.fill.item() == 5


def test_open_metadata_parses_each_document_once_per_class():
    """Equal bytes give the same (immutable) metadata object, per class and per limits in
    force; the memo is emptied when it holds 4096 documents. Kills open_metadata memo
    mutants."""
    array._PARSED.clear()
    v2 = _json(_v2(fill_value=11))
    a = open_metadata({".zarray": v2}.get)
    b = open_metadata({"x/.zarray": bytearray(v2)}.get, prefix="x/")
    assert a is b and a.fill.item() == 11
    assert array._PARSED == {(ArrayV2Metadata, v2, LIMITS): a}
    with applied(Limits(max_array_bytes=1)):  # other limits: parsed (and refused) again
        assert _raises(lambda: open_metadata({".zarray": v2}.get)).rule == "ZARR-005"
    # the same bytes as a zarr.json are parsed as v3 (and refused), not served from the memo
    err = _raises(lambda: open_metadata({"zarr.json": v2}.get))
    assert err.rule == "ZARR-010"
    array._PARSED.clear()
    for i in range(array._PARSED_KEEP - 1):
        array._PARSED[(ArrayV2Metadata, b"%d" % i, LIMITS)] = a
    open_metadata({".zarray": v2}.get)
    assert len(array._PARSED) == array._PARSED_KEEP == 4096
    open_metadata({"zarr.json": _json(_v3())}.get)
    assert len(array._PARSED) == 1
    assert list(array._PARSED) == [(ArrayV3Metadata, _json(_v3()), LIMITS)]
    array._PARSED.clear()


# --------------------------------------------------------------------------------------------
# array: check_box, chunks_for_region, overlap, missing_chunk


def test_regions_must_lie_within_the_shape():
    """A region has one (start, stop) per dimension with 0 <= start <= stop <= size; None is
    the whole array. Kills check_box 1-21 (15, 18, 19 are equivalent)."""
    m = ArrayV2Metadata.from_dict(_v2())  # shape (5, 7)
    assert array.check_box(m, None, "f") == [(0, 5), (0, 7)]
    assert array.check_box(m, [[0, 5], (7, 7)], "f") == [(0, 5), (7, 7)]
    assert array.check_box(m, [(5, 5), (0, 0)], "f") == [(5, 5), (0, 0)]
    for box in (
        [(0, 5)],
        [(0, 5), (0, 7), (0, 1)],
        [(-1, 5), (0, 7)],
        [(0, 6), (0, 7)],
        [(3, 2), (0, 7)],
        [(0, 5), (0, 8)],
        [(0, 5), (8, 8)],
    ):
        err = _raises(lambda box=box: array.check_box(m, box, "f"), ValueError)
        assert str(err) == f"f: region {[tuple(b) for b in box]} is not within shape [5, 7]"


def test_chunks_for_region_are_the_overlapped_chunks_in_c_order():
    """The grid indices a region overlaps (ceil at the stop), C order; an empty region has
    none. Kills chunks_for_region 1-25 (20, 23, 24 are
    equivalent)."""
    m = ArrayV2Metadata.from_dict(_v2())  # shape (5, 7), chunks (2, 3)
    assert list(chunks_for_region(m)) == [(i, j) for i in range(3) for j in range(3)]
    assert list(chunks_for_region(m, [(1, 4), (3, 4)])) == [(0, 1), (1, 1)]
    assert list(chunks_for_region(m, [(2, 3), (5, 7)])) == [(1, 1), (1, 2)]
    assert list(chunks_for_region(m, [(4, 5), (6, 7)])) == [(2, 2)]
    assert list(chunks_for_region(m, [(1, 1), (0, 7)])) == []
    assert list(chunks_for_region(m, [(0, 5), (3, 3)])) == []
    m0 = ArrayV2Metadata.from_dict(_v2(shape=[], chunks=[]))
    assert list(chunks_for_region(m0)) == [()]
    err = _raises(lambda: chunks_for_region(m, [(0, 9), (0, 7)]), ValueError)
    assert str(err) == "None: region [(0, 9), (0, 7)] is not within shape [5, 7]"


def test_overlap_gives_target_and_source_slices():
    """Per dimension, the part of a chunk at `lo` of `size` inside the region, as a slice of
    the output and of the chunk. Kills overlap 1-36 (5, 9, 10 are equivalent)."""
    assert overlap([(1, 6), (0, 4)], (4, 0), (3, 2)) == (
        (slice(3, 5), slice(0, 2)),
        (slice(0, 2), slice(0, 2)),
    )
    assert overlap([(5, 9)], (3,), (4,)) == ((slice(0, 2),), (slice(2, 4),))
    assert overlap([(2, 3)], (0,), (8,)) == ((slice(0, 1),), (slice(2, 3),))
    assert overlap([], (), ()) == ((), ())


def test_missing_chunk_error():
    """The error of a chunk absent where every chunk is stored: LOAD-041, naming ZARR-008.
    Kills missing_chunk 1-9."""
    err = missing_chunk("x/c/0: chunk [0]")
    assert type(err) is MissingDataError and isinstance(err, KeyError)
    assert err.rule == "LOAD-041" and err.file is None and err.pointer is None
    assert str(err) == (
        "x/c/0: chunk [0] is missing and the checkpoint stores every chunk "
        "(store_array_data_equal_to_fill_value; ZARR-008) [LOAD-041]"
    )


# --------------------------------------------------------------------------------------------
# array: read_region (plain chunks)

VALUES = np.arange(35, dtype="<i4").reshape(5, 7) * 3 - 40


def _chunks(meta, values, *, order="C", skip=()) -> dict[str, bytes]:
    """Every chunk of `meta`'s grid, edge chunks padded with 99, as raw bytes."""
    store = {}
    for index in chunks_for_region(meta):
        if index in skip:
            continue
        chunk = np.full(meta.chunk_shape, 99, values.dtype)
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, meta.chunk_shape, strict=True))
        part = values[sl]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        store[meta.chunk_key(index)] = chunk.tobytes(order=order)
    return store


BOXES = [None, [(0, 5), (0, 7)], [(1, 4), (2, 6)], [(3, 5), (6, 7)], [(0, 1), (0, 1)]]


@pytest.mark.parametrize("version", [2, 3])
def test_read_region_reads_each_overlapped_chunk(version):
    """A region is filled from the chunks it overlaps, each asked for once under the prefix,
    edge chunks cut to the array. Kills read_region 1-91 on the chunk path."""
    meta = (
        ArrayV2Metadata.from_dict(_v2())
        if version == 2
        else ArrayV3Metadata.from_dict(_v3(chunk_key_encoding={"name": "v2"}))
    )
    store = {"p/" + k: v for k, v in _chunks(meta, VALUES).items()}
    for box in BOXES:
        asked: list[str] = []

        def get(key, asked=asked):
            asked.append(key)
            return store.get(key)

        full = [(0, 5), (0, 7)] if box is None else box
        out = np.full([b - a for a, b in full], -1, "<i4")
        got = read_region(meta, get, out, box, prefix="p/", missing="error", file="ck")
        assert got is out
        assert np.array_equal(out, VALUES[tuple(slice(a, b) for a, b in full)])
        want = ["p/" + meta.chunk_key(i) for i in chunks_for_region(meta, box)]
        assert asked == want
    assert asked == ["p/0.0"]


def test_read_region_of_f_order_v2_chunks():
    """A v2 array in F order stores each chunk transposed. Kills the order argument mutants
    of ArrayV2Metadata.from_dict."""
    meta = ArrayV2Metadata.from_dict(_v2(order="F"))
    out = np.empty((5, 7), "<i4")
    read_region(meta, _chunks(meta, VALUES, order="F").get, out)
    assert np.array_equal(out, VALUES)
    big = ArrayV2Metadata.from_dict(_v2(dtype=">i4", dimension_separator="/"))
    stored = {
        k: np.frombuffer(v, "<i4").astype(">i4").tobytes() for k, v in _chunks(big, VALUES).items()
    }
    out = np.empty((5, 7), ">i4")
    read_region(big, stored.get, out)
    assert np.array_equal(out, VALUES) and "1/2" in stored


def test_read_region_missing_chunks_fill_or_fail():
    """An absent chunk reads as the fill value, or with missing="error" is LOAD-041 naming
    "<file>/<prefix><key>: chunk [i, j]" (the key alone without a file).
    Kills read_region missing-chunk mutants."""
    meta = ArrayV3Metadata.from_dict(_v3(fill_value=-5))
    store = _chunks(meta, VALUES, skip={(1, 1)})
    out = np.zeros((5, 7), "<i4")
    read_region(meta, {"p/" + k: v for k, v in store.items()}.get, out, prefix="p/")
    want = VALUES.copy()
    want[2:4, 3:6] = -5
    assert np.array_equal(out, want)
    out = np.zeros((2, 2), "<i4")
    read_region(meta, store.get, out, [(3, 5), (4, 6)])
    assert out.tolist() == [[-5, -5], [VALUES[4, 4], VALUES[4, 5]]]
    err = _raises(
        lambda: read_region(meta, store.get, np.zeros((5, 7), "<i4"), missing="error", file="ck"),
        MissingDataError,
    )
    assert str(err) == (
        "ck/c/1/1: chunk [1, 1] is missing and the checkpoint stores every chunk "
        "(store_array_data_equal_to_fill_value; ZARR-008) [LOAD-041]"
    )
    err = _raises(
        lambda: read_region(
            meta, {}.get, np.zeros((1, 1), "<i4"), [(4, 5), (6, 7)], missing="error"
        ),
        MissingDataError,
    )
    assert str(err).startswith("c/2/2: chunk [2, 2] is missing") and err.rule == "LOAD-041"


def test_read_region_checks_out_and_skips_empty_regions():
    """`out` must have the region's shape (ValueError naming the file); an empty region or a
    zero-size array reads nothing, even with missing="error".
    Kills read_region shape-check and empty-region mutants."""
    meta = ArrayV2Metadata.from_dict(_v2())
    err = _raises(lambda: read_region(meta, {}.get, np.zeros((5, 6), "<i4"), file="ck"), ValueError)
    assert str(err) == "ck: out has shape (5, 6), region has shape (5, 7)"
    err = _raises(
        lambda: read_region(meta, {}.get, np.zeros((2, 2), "<i4"), [(0, 2), (0, 3)]), ValueError
    )
    assert str(err) == "None: out has shape (2, 2), region has shape (2, 3)"
    err = _raises(lambda: read_region(meta, {}.get, np.zeros((5, 7), "<i4"), [(0, 5)]), ValueError)
    assert str(err) == "None: region [(0, 5)] is not within shape [5, 7]"
    err = _raises(
        lambda: read_region(meta, {}.get, np.zeros((1, 1), "<i4"), [(0, 1), (7, 8)], file="ck"),
        ValueError,
    )
    assert str(err) == "ck: region [(0, 1), (7, 8)] is not within shape [5, 7]"

    def never(key):
        raise AssertionError(key)

    out = np.full((0, 7), 1, "<i4")
    assert read_region(meta, never, out, [(2, 2), (0, 7)], missing="error") is out
    out = np.full((3, 0), 1, "<i4")
    assert read_region(meta, never, out, [(2, 5), (4, 4)], missing="error") is out
    zero = ArrayV3Metadata.from_dict(_v3(shape=(0, 4), chunk=(2, 2)))
    out = np.zeros((0, 4), "<i4")
    assert read_region(zero, never, out, missing="error") is out


def test_read_region_chunk_errors_name_the_chunk_file():
    """A chunk that does not decode is an error naming "<file>/<prefix><key>", or the key.
    Kills read_region where/decode-argument mutants."""
    meta = ArrayV2Metadata.from_dict(_v2())
    err = _raises(
        lambda: read_region(
            meta,
            {"p/0.0": b"\0" * 23}.get,
            np.zeros((1, 1), "<i4"),
            [(0, 1), (0, 1)],
            prefix="p/",
            file="ck",
        )
    )
    assert str(err) == (
        "ck/p/0.0: chunk bytes do not match the chunk shape and element size "
        "(expected 24, got 23) [ZARR-003]"
    )
    assert err.pointer is None
    err = _raises(
        lambda: read_region(
            meta, {"1.2": b"\0" * 25}.get, np.zeros((1, 1), "<i4"), [(2, 3), (6, 7)]
        )
    )
    assert err.file == "1.2" and err.got == 25


# --------------------------------------------------------------------------------------------
# array: _read_shard


def _shard(values, inner, *, skip=(), end=True, reverse=True) -> bytes:
    """A shard of raw little-endian inner chunks, stored in reverse C order (so offsets are
    not the C-order positions), with a CRC-32C'd index at the end (or start)."""
    grid = tuple(s // c for s, c in zip(values.shape, inner, strict=True))
    cells = list(np.ndindex(*grid))
    pieces, index = {}, {}
    for idx in cells:
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, inner, strict=True))
        pieces[idx] = np.ascontiguousarray(values[sl]).astype("<i4").tobytes()
    nidx = 16 * len(cells) + 4
    data = bytearray()
    base = 0 if end else nidx
    for idx in reversed(cells) if reverse else cells:
        if idx in skip:
            index[idx] = (EMPTY, EMPTY)
            continue
        index[idx] = (base + len(data), len(pieces[idx]))
        data += pieces[idx]
    raw = np.array([index[i] for i in cells], "<u8").tobytes()
    raw += crc32c(raw).to_bytes(4, "little")
    return bytes(data) + raw if end else raw + bytes(data)


SHARDED = np.arange(96, dtype="<i4").reshape(8, 12) * 7 - 300


def _sharded_meta(inner=(2, 3), **kw) -> ArrayV3Metadata:
    return ArrayV3Metadata.from_dict(
        _v3(shape=(8, 12), chunk=(4, 6), codecs=[_sharding(inner, **kw)], fill_value=-1)
    )


def _shard_store(meta, values, **kw) -> dict[str, bytes]:
    store = {}
    for index in chunks_for_region(meta):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, meta.chunk_shape, strict=True))
        store[meta.chunk_key(index)] = _shard(values[sl], meta.sharding.chunk_shape, **kw)
    return store


SHARD_BOXES = [None, [(1, 7), (2, 11)], [(4, 8), (6, 12)], [(3, 5), (5, 7)], [(5, 6), (7, 8)]]


@pytest.mark.parametrize(
    ("location", "inner"), [("end", (2, 3)), ("start", (2, 3)), ("end", (1, 6))]
)
def test_read_region_of_sharded_arrays(location, inner):
    """Regions across shards read the inner chunks they overlap, wherever the index puts
    them; the shard's position, the region clipped to each shard (from 0: inner chunks of
    one row) and the inner-chunk offsets all count. Kills _read_shard 1-106 on the read
    path."""
    meta = _sharded_meta(index_location=location, inner=inner)
    store = _shard_store(meta, SHARDED, end=location == "end")
    for box in SHARD_BOXES:
        full = [(0, 8), (0, 12)] if box is None else box
        out = np.full([b - a for a, b in full], 12345, "<i4")
        read_region(meta, store.get, out, box, missing="error")
        assert np.array_equal(out, SHARDED[tuple(slice(a, b) for a, b in full)]), box


def test_sharded_reads_decode_only_the_overlapped_inner_chunks(monkeypatch):
    """Only the inner chunks a region overlaps are decoded, each once, from its own bytes.
    Kills _read_shard range mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED)
    decoded = []
    real = BytesCodec.decode

    def spy(self, data, shape, dtype, **kw):
        decoded.append((bytes(data), kw["pointer"]))
        return real(self, data, shape, dtype, **kw)

    monkeypatch.setattr(BytesCodec, "decode", spy)
    out = np.zeros((2, 2), "<i4")
    read_region(meta, store.get, out, [(3, 5), (5, 7)])
    assert np.array_equal(out, SHARDED[3:5, 5:7])
    pointers = [p for _, p in decoded]
    assert pointers == [
        "inner chunk [1, 1]",
        "inner chunk [1, 0]",
        "inner chunk [0, 1]",
        "inner chunk [0, 0]",
    ]
    assert decoded[0][0] == SHARDED[2:4, 3:6].tobytes()
    assert decoded[3][0] == SHARDED[4:6, 6:9].tobytes()


def test_sharded_missing_inner_chunks_fill_or_fail():
    """An inner chunk the index marks absent reads as the fill value, or with
    missing="error" is LOAD-041 naming the shard and the inner chunk; a missing shard
    likewise. Kills _read_shard missing mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED, skip={(1, 0)})
    out = np.zeros((8, 12), "<i4")
    read_region(meta, store.get, out)
    want = SHARDED.copy()
    for r in (0, 4):
        for c in (0, 6):
            want[r + 2 : r + 4, c : c + 3] = -1
    assert np.array_equal(out, want)
    err = _raises(
        lambda: read_region(meta, store.get, np.zeros((8, 12), "<i4"), missing="error", file="ck"),
        MissingDataError,
    )
    assert str(err) == (
        "ck/c/0/0: inner chunk [1, 0] of the shard is missing and the checkpoint stores every "
        "chunk (store_array_data_equal_to_fill_value; ZARR-008) [LOAD-041]"
    )
    out = np.zeros((2, 3), "<i4")
    read_region(meta, store.get, out, [(0, 2), (0, 3)], missing="error")  # (0, 0) is stored
    assert np.array_equal(out, SHARDED[0:2, 0:3])
    del store["c/1/1"]
    out = np.zeros((8, 12), "<i4")
    read_region(meta, store.get, out, missing="fill")
    assert (out[4:, 6:] == -1).all() and np.array_equal(out[:2], SHARDED[:2])
    err = _raises(
        lambda: read_region(meta, store.get, np.zeros((8, 12), "<i4"), missing="error"),
        MissingDataError,
    )
    assert str(err).startswith("c/0/0: inner chunk [1, 0] of the shard is missing")


def test_sharded_errors_name_the_shard_and_inner_chunk():
    """A damaged shard index, or inner chunk, is an error naming "<file>/<key>" and the
    pointer "shard index" or "inner chunk [i, j]". Kills _read_shard error-argument
    mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED)
    shard = bytearray(store["c/1/0"])
    shard[-1] ^= 1
    err = _raises(
        lambda: read_region(
            meta, {"c/1/0": bytes(shard)}.get, np.zeros((1, 1), "<i4"), [(4, 5), (0, 1)], file="ck"
        )
    )
    assert (err.file, err.pointer, err.rule) == ("ck/c/1/0", "shard index", "ZARR-016")
    # inner chunk (0, 1) of shard (1, 0) is stored first (reverse order): give it 4 bytes less
    cells = list(np.ndindex(2, 2))
    index = np.frombuffer(bytes(store["c/1/0"][-68:-4]), "<u8").reshape(4, 2).copy()
    assert index[cells.index((1, 1))].tolist() == [0, 24]
    index[cells.index((1, 1))] = [0, 20]
    raw = index.tobytes()
    shard = store["c/1/0"][:-68] + raw + crc32c(raw).to_bytes(4, "little")
    err = _raises(
        lambda: read_region(meta, {"c/1/0": shard}.get, np.zeros((4, 6), "<i4"), [(4, 8), (0, 6)])
    )
    assert str(err) == (
        "c/1/0 at inner chunk [1, 1]: chunk bytes do not match the chunk shape and element size "
        "(expected 24, got 20) [ZARR-003]"
    )
