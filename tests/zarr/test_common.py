"""`ockpt.zarr._common`: bounds, dims, dtypes, extents and fill values of zarr array metadata,
built from numpy bytes as spec/arrays.md lays them out; each error is asserted whole. None needs
tensorstore (the mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ockpt.errors import ZarrFormatError
from ockpt.limits import LIMITS, Limits, applied
from ockpt.zarr import _common
from tests.support.errors import error_fields, raised


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
    assert error_fields(err) == {
        "rule": "ZARR-099",
        "file": "a/b",
        "message": "bad thing",
        "pointer": "/x",
        "got": 3,
    }
    plain = _common.fail("m", "R")
    assert error_fields(plain) == {"rule": "R", "file": None, "message": "m", "pointer": None}


def test_load_json_parses_strictly_and_names_the_file():
    """A metadata document is parsed strictly (duplicate keys refused) with a bound of 16 MiB;
    every error is a ZarrFormatError naming the file (str() of a Path, "None" for none), the
    JSON rule, and the document pointer "". Kills load_json 1-15."""
    assert _common.load_json(b'{"a": [1, 2.5, null]}', file="f") == {"a": [1, 2.5, None]}
    err = raised(
        ZarrFormatError, lambda: _common.load_json(b'{"a": 1, "a": 2}', file=Path("x/.zarray"))
    )
    assert type(err) is ZarrFormatError
    assert error_fields(err) == {
        "rule": "JSON-002",
        "file": "x/.zarray",
        "message": "duplicate key 'a'",
        "pointer": "",
    }
    err = raised(ZarrFormatError, lambda: _common.load_json(b"{", file=None))
    assert err.file == "None" and err.rule == "JSON-001"
    limit = 1 << 24
    assert LIMITS.max_array_metadata_bytes == limit
    assert _common.load_json(b" " * (limit - 3) + b"[1]", file="f") == [1]
    err = raised(
        ZarrFormatError, lambda: _common.load_json(b" " * (limit - 2) + b"[1]", file="big")
    )
    assert error_fields(err) == {
        "rule": "JSON-003",
        "file": "big",
        "message": "document too large",
        "pointer": "",
    }


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
    err = raised(
        ZarrFormatError, lambda: _common.dims((1, 2), file="f", pointer="/shape", rule="R-1")
    )
    assert error_fields(err) == {
        "rule": "R-1",
        "file": "f",
        "message": "must be a list of at most 32 integers",
        "pointer": "/shape",
        "got": (1, 2),
    }
    assert (err.rule, err.file, err.pointer, err.got) == ("R-1", "f", "/shape", (1, 2))
    err = raised(
        ZarrFormatError, lambda: _common.dims([1] * 33, file="f", pointer="/shape", rule="R-1")
    )
    assert err.message == "must be a list of at most 32 integers" and err.got == [1] * 33
    for bad, minimum, message in [
        (True, 0, "must be an integer >= 0"),
        (1.0, 0, "must be an integer >= 0"),
        (-1, 0, "must be an integer >= 0"),
        (0, 1, "must be an integer >= 1"),
        (1 << 62, 0, "must be an integer >= 0"),
        ("2", 0, "must be an integer >= 0"),
    ]:
        err = raised(
            ZarrFormatError,
            lambda bad=bad, minimum=minimum: _common.dims(
                [5, bad], file="g", pointer="/chunks", rule="R-2", minimum=minimum
            ),
        )
        assert error_fields(err) == {
            "rule": "R-2",
            "file": "g",
            "message": message,
            "pointer": "/chunks/1",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it
        assert (err.rule, err.file, err.pointer, err.got) == ("R-2", "g", "/chunks/1", bad)


def test_numpy_dtype_names_file_and_pointer():
    """The dtype of a zarr type string; an unsupported one names the file (str() of it, or
    none) and the pointer given. Kills numpy_dtype 1-10."""
    assert _common.numpy_dtype("<f4", file=None, pointer="/dtype") == np.dtype("<f4")
    assert _common.numpy_dtype(">i2", file="f", pointer="/dtype") == np.dtype(">i2")
    assert _common.numpy_dtype("bfloat16", file="f", pointer="/d") == ml_dtypes.bfloat16
    err = raised(
        ZarrFormatError, lambda: _common.numpy_dtype("<U4", file=Path("x/y"), pointer="/data_type")
    )
    assert (err.rule, err.file, err.pointer, err.got) == ("ZARR-001", "x/y", "/data_type", "<U4")
    err = raised(ZarrFormatError, lambda: _common.numpy_dtype("<U4", file=None, pointer="/dtype"))
    assert (err.file, err.pointer) == (None, "/dtype")
    assert err.rule == "ZARR-001" and err.message.startswith("unsupported element type")


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
    err = raised(ZarrFormatError, lambda: ok((4,), (2**32 + 1,), f4, file="f", pointer="/chunks"))
    assert error_fields(err) == {
        "rule": "ZARR-005",
        "file": "f",
        "message": "chunk too large for this reader",
        "pointer": "/chunks",
        "expected": "<= 17179869184 bytes",
        "got": 17179869188,
    }
    assert (err.rule, err.file, err.pointer) == ("ZARR-005", "f", "/chunks")
    err = raised(ZarrFormatError, lambda: ok((2**38 + 1,), (2**20,), f4, file="g", pointer="/q"))
    assert error_fields(err) == {
        "rule": "ZARR-005",
        "file": "g",
        "message": "array too large for this reader",
        "pointer": "/q",
        "expected": "<= 1099511627776 bytes",
        "got": 1099511627780,
    }
    err = raised(ZarrFormatError, lambda: ok((2**25 + 1, 3), (2, 2), u1, file="h", pointer="/r"))
    assert error_fields(err) == {
        "rule": "ZARR-005",
        "file": "h",
        "message": "the chunk grid holds more chunks than the limit",
        "pointer": "/r",
        "expected": "<= 16777216",
        "got": 33554434,
    }
    err = raised(ZarrFormatError, lambda: ok((2**25 + 1,), (2,), u1, file="h", pointer="/r"))
    assert err.got == 2**24 + 1 and err.expected == "<= 16777216"
    with pytest.raises(ValueError, match="zip"):
        ok((4, 4), (2,), u1, file="f", pointer="/p")  # ranks differ: a caller's bug


# --------------------------------------------------------------------------------------------
# _common.fill_array, _scalar, _int_range


def _fill(value, dtype):
    return _common.fill_array(value, np.dtype(dtype), file="f", pointer="/fill_value")


def _fill_error(value, dtype, pointer="/fill_value"):
    err = raised(ZarrFormatError, lambda: _fill(value, dtype))
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
        assert error_fields(err) == {
            "rule": "ZARR-007",
            "file": "f",
            "message": "fill_value does not fit the element type bool",
            "pointer": "/fill_value",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it


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
        assert error_fields(err) == {
            "rule": "ZARR-007",
            "file": "f",
            "message": f"fill_value does not fit the element type {name}",
            "pointer": "/fill_value",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it


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
        assert error_fields(err) == {
            "rule": "ZARR-007",
            "file": "f",
            "message": f"fill_value does not fit the element type {name}",
            "pointer": "/fill_value",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it


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
        assert error_fields(err) == {
            "rule": "ZARR-007",
            "file": "f",
            "message": "fill_value does not fit the element type float32",
            "pointer": "/fill_value",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it


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
        assert error_fields(err) == {
            "rule": "ZARR-007",
            "file": "f",
            "message": "complex fill_value must be [real, imag]",
            "pointer": "/fill_value",
            "got": bad,
        }
        assert type(err.got) is type(bad)  # True == 1 == 1.0: the type as the text showed it
    err = _fill_error(["0x3ff0000000000000", 1], "complex64", "/fill_value/0")
    assert error_fields(err) == {
        "rule": "ZARR-007",
        "file": "f",
        "message": "fill_value does not fit the element type float32",
        "pointer": "/fill_value/0",
        "got": "0x3ff0000000000000",
    }
    err = _fill_error([1, "x"], "complex128", "/fill_value/1")
    assert error_fields(err) == {
        "rule": "ZARR-007",
        "file": "f",
        "message": "fill_value does not fit the element type float64",
        "pointer": "/fill_value/1",
        "got": "x",
    }
