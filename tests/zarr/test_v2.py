"""`ockpt.zarr.v2`: `ArrayV2Metadata` (.zarray of zarr v2 arrays): every field, its bounds and the
error of each fault. None needs tensorstore (the mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ockpt.errors import ZarrFormatError
from ockpt.zarr.codecs import BytesCodec, TransposeCodec, ZstdCodec
from ockpt.zarr.v2 import ArrayV2Metadata
from tests.support.errors import error_fields, raised
from tests.support.zarr import array_v2

# --------------------------------------------------------------------------------------------
# v2: ArrayV2Metadata


def _v2_error(d, file="a/.zarray"):
    return raised(ZarrFormatError, lambda: ArrayV2Metadata.from_dict(d, file=file))


def test_v2_metadata_fields_and_round_trip():
    """Every field of a .zarray is kept as read, the derived fields are those of the
    document, and to_dict gives the document back, keys in tensorstore's (sorted) order,
    unknown keys last. Kills ArrayV2Metadata.from_dict return-value mutants, to_dict 1-26."""
    d = array_v2(compressor={"id": "zstd", "level": 3}, fill_value=-2, extra_key={"x": 1})
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
    d = array_v2(dimension_separator="absent", filters=[], order="F", dtype=">f8", fill_value="NaN")
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
    d = array_v2(order="absent", filters="absent", dimension_separator="absent")
    m = ArrayV2Metadata.from_dict(d)
    assert (m.order, m.filters, m.dimension_separator) == ("C", None, None)
    assert m.pipeline.array_to_array == ()
    assert m.to_dict() == dict(d, order="C", filters=None)


def test_v2_chunk_keys():
    """Indices joined by the separator ("." when absent); "0" for a 0-d array.
    Kills ArrayV2Metadata.chunk_key 1-4."""
    m = ArrayV2Metadata.from_dict(array_v2())
    assert m.chunk_key((1, 10)) == "1.10"
    assert ArrayV2Metadata.from_dict(array_v2(dimension_separator="/")).chunk_key((1, 10)) == "1/10"
    m = ArrayV2Metadata.from_dict(array_v2(dimension_separator="absent"))
    assert m.chunk_key((2, 0)) == "2.0"
    m = ArrayV2Metadata.from_dict(array_v2(shape=[], chunks=[]))
    assert m.chunk_key(()) == "0"


def test_v2_from_bytes_parses_and_names_the_file():
    """from_bytes parses JSON, then the dict, both naming the file.
    Kills ArrayV2Metadata.from_bytes 1-8."""
    d = array_v2()
    m = ArrayV2Metadata.from_bytes(json.dumps(d).encode(), file="p/.zarray")
    assert m.to_dict() == d
    err = raised(ZarrFormatError, lambda: ArrayV2Metadata.from_bytes(b"[1", file="p/.zarray"))
    assert err.file == "p/.zarray" and err.rule == "JSON-001"
    bad = json.dumps(array_v2(order="X")).encode()
    err = raised(ZarrFormatError, lambda: ArrayV2Metadata.from_bytes(bad, file="p/.zarray"))
    assert error_fields(err) == {
        "rule": "ZARR-004",
        "file": "p/.zarray",
        "message": "order must be 'C' or 'F'",
        "pointer": "/order",
        "got": "X",
    }


@pytest.mark.parametrize(
    "key", ["zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value"]
)
def test_v2_required_fields(key):
    """Each required field missing is ZARR-002 at its pointer.
    Kills ArrayV2Metadata.from_dict required-field mutants."""
    err = _v2_error(array_v2(**{key: "absent"}))
    assert error_fields(err) == {
        "rule": "ZARR-002",
        "file": "a/.zarray",
        "message": f"missing required field {key!r}",
        "pointer": f"/{key}",
    }
    assert (err.rule, err.pointer) == ("ZARR-002", f"/{key}")


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (
            {"zarr_format": 3},
            {
                "rule": "ZARR-002",
                "message": "zarr_format must be 2",
                "pointer": "/zarr_format",
                "got": 3,
            },
        ),
        (
            {"zarr_format": "2"},
            {
                "rule": "ZARR-002",
                "message": "zarr_format must be 2",
                "pointer": "/zarr_format",
                "got": "2",
            },
        ),
        (
            {"shape": [5, -7]},
            {
                "rule": "ZARR-005",
                "message": "must be an integer >= 0",
                "pointer": "/shape/1",
                "got": -7,
            },
        ),
        (
            {"shape": "5"},
            {
                "rule": "ZARR-005",
                "message": "must be a list of at most 32 integers",
                "pointer": "/shape",
                "got": "5",
            },
        ),
        (
            {"chunks": [2, 0]},
            {
                "rule": "ZARR-005",
                "message": "must be an integer >= 1",
                "pointer": "/chunks/1",
                "got": 0,
            },
        ),
        (
            {"chunks": [2]},
            {
                "rule": "ZARR-005",
                "message": "chunks must have the rank of shape",
                "pointer": "/chunks",
                "expected": 2,
                "got": 1,
            },
        ),
        (
            {"chunks": [2, 3, 4]},
            {
                "rule": "ZARR-005",
                "message": "chunks must have the rank of shape",
                "pointer": "/chunks",
                "expected": 2,
                "got": 3,
            },
        ),
        (
            {"order": "c"},
            {
                "rule": "ZARR-004",
                "message": "order must be 'C' or 'F'",
                "pointer": "/order",
                "got": "c",
            },
        ),
        (
            {"order": None},
            {
                "rule": "ZARR-004",
                "message": "order must be 'C' or 'F'",
                "pointer": "/order",
                "got": None,
            },
        ),
        (
            {"filters": [{"id": "delta"}]},
            {
                "rule": "ZARR-004",
                "message": "filters must be null",
                "pointer": "/filters",
                "got": [{"id": "delta"}],
            },
        ),
        (
            {"filters": {}},
            {
                "rule": "ZARR-004",
                "message": "filters must be null",
                "pointer": "/filters",
                "got": {},
            },
        ),
        (
            {"dimension_separator": "-"},
            {
                "rule": "ZARR-006",
                "message": "dimension_separator must be '.' or '/'",
                "pointer": "/dimension_separator",
                "got": "-",
            },
        ),
        (
            {"shape": [2**40 + 1, 1], "chunks": [2**20, 1], "dtype": "|u1"},
            {
                "rule": "ZARR-005",
                "message": "array too large for this reader",
                "pointer": "/chunks",
                "expected": "<= 1099511627776 bytes",
                "got": 1099511627777,
            },
        ),
        (
            {"compressor": {"id": "blosc"}},
            {
                "rule": "ZARR-004",
                "message": "compressor 'blosc' is not one the spec allows",
                "pointer": "/compressor",
                "expected": "null, zstd, gzip or zlib",
                "got": "blosc",
            },
        ),
        (
            {"fill_value": 1.5},
            {
                "rule": "ZARR-007",
                "message": "fill_value does not fit the element type int32",
                "pointer": "/fill_value",
                "got": 1.5,
            },
        ),
    ],
)
def test_v2_refusals_name_file_pointer_and_rule(change, want):
    """Each check of a .zarray, its whole error: file, pointer, message, details, rule.
    Kills ArrayV2Metadata.from_dict check mutants."""
    assert error_fields(_v2_error(array_v2(**change))) == {"file": "a/.zarray", **want}


def test_v2_not_an_object_and_dtype():
    """A .zarray that is no object is ZARR-002 at the root; a bad dtype is ZARR-001 at /dtype.
    Kills ArrayV2Metadata.from_dict 1-15 and the numpy_dtype call mutants."""
    err = _v2_error([1], file=Path("q/.zarray"))
    assert error_fields(err) == {
        "rule": "ZARR-002",
        "file": "q/.zarray",
        "message": ".zarray must be a JSON object",
        "pointer": "",
    }
    err = _v2_error(array_v2(dtype="|O"))
    assert (err.rule, err.file, err.pointer, err.got) == ("ZARR-001", "a/.zarray", "/dtype", "|O")


def test_v2_zarr_format_is_an_integer_two():
    """zarr_format 2 is accepted whatever the other keys; true (== 1) is not 2.
    Kills ArrayV2Metadata.from_dict zarr_format mutants."""
    assert ArrayV2Metadata.from_dict(array_v2(zarr_format=2)).zarr_format == 2
    err = _v2_error(array_v2(zarr_format=True))
    assert error_fields(err) == {
        "rule": "ZARR-002",
        "file": "a/.zarray",
        "message": "zarr_format must be 2",
        "pointer": "/zarr_format",
        "got": True,
    }
    assert err.got is True  # not 1, which == True
