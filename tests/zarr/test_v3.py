"""`ockpt.zarr.v3`: `ArrayV3Metadata` (zarr.json of zarr v3 arrays): every field, its bounds and the
error of each fault. None needs tensorstore (the mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ockpt.errors import ZarrFormatError
from ockpt.zarr.codecs import BytesCodec, TransposeCodec
from ockpt.zarr.shard_index import ShardingCodec
from ockpt.zarr.v3 import ArrayV3Metadata
from tests.support.errors import error_fields, raised
from tests.support.zarr import BYTES_LE, array_v3, sharding_codec

# --------------------------------------------------------------------------------------------
# v3: ArrayV3Metadata


def _v3_error(d, file="a/zarr.json"):
    return raised(ZarrFormatError, lambda: ArrayV3Metadata.from_dict(d, file=file))


def test_v3_metadata_fields_and_round_trip():
    """Every field of a zarr.json is kept as read, the derived fields are those of the
    document, and to_dict gives it back, keys in tensorstore's (sorted) order, unknown keys
    (must_understand: false) last. Kills ArrayV3Metadata.from_dict return-value mutants and
    to_dict 1-45."""
    d = array_v3(
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
    assert (m.fill_value, m.codecs, m.attributes) == ("0x00000009", (BYTES_LE,), {"a": 1})
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
    m = ArrayV3Metadata.from_dict(array_v3())
    assert (m.attributes, m.dimension_names, m.storage_transformers, m.extra) == (
        None,
        None,
        None,
        {},
    )
    assert (m.separator, m.key_encoding) == ("/", "default")
    assert m.to_dict() == array_v3()
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
        array_v3(shape=shape, chunk=chunk, chunk_key_encoding=enc)
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
    d = array_v3()
    m = ArrayV3Metadata.from_bytes(json.dumps(d).encode(), file="p/zarr.json")
    assert m.to_dict() == d
    err = raised(ZarrFormatError, lambda: ArrayV3Metadata.from_bytes(b"[1", file="p/zarr.json"))
    assert err.file == "p/zarr.json" and err.rule == "JSON-001"
    bad = json.dumps(array_v3(node_type="group")).encode()
    err = raised(ZarrFormatError, lambda: ArrayV3Metadata.from_bytes(bad, file="p/zarr.json"))
    assert error_fields(err) == {
        "rule": "ZARR-010",
        "file": "p/zarr.json",
        "message": "node_type must be 'array'",
        "pointer": "/node_type",
        "got": "group",
    }


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
    d = array_v3()
    del d[key]
    err = _v3_error(d)
    assert error_fields(err) == {
        "rule": "ZARR-010",
        "file": "a/zarr.json",
        "message": f"missing required field {key!r}",
        "pointer": f"/{key}",
    }


_ENC_ERR = {
    "rule": "ZARR-012",
    "message": "chunk_key_encoding separator must be '/' or '.'",
    "pointer": "/chunk_key_encoding/configuration",
}
_GRID = {
    "rule": "ZARR-011",
    "message": "chunk_grid must be the regular grid",
    "pointer": "/chunk_grid",
}


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (
            {"ext": 1},
            {
                "rule": "ZARR-010",
                "message": "unknown field 'ext' without must_understand: false",
                "pointer": "/ext",
            },
        ),
        (
            {"ext": {"must_understand": True}},
            {
                "rule": "ZARR-010",
                "message": "unknown field 'ext' without must_understand: false",
                "pointer": "/ext",
            },
        ),
        (
            {"ext": {"must_understand": 0}},
            {
                "rule": "ZARR-010",
                "message": "unknown field 'ext' without must_understand: false",
                "pointer": "/ext",
            },
        ),
        (
            {"ext": {}},
            {
                "rule": "ZARR-010",
                "message": "unknown field 'ext' without must_understand: false",
                "pointer": "/ext",
            },
        ),
        (
            {"zarr_format": 2},
            {
                "rule": "ZARR-010",
                "message": "zarr_format must be 3",
                "pointer": "/zarr_format",
                "got": 2,
            },
        ),
        (
            {"zarr_format": True},
            {
                "rule": "ZARR-010",
                "message": "zarr_format must be 3",
                "pointer": "/zarr_format",
                "got": True,
            },
        ),
        (
            {"node_type": "group"},
            {
                "rule": "ZARR-010",
                "message": "node_type must be 'array'",
                "pointer": "/node_type",
                "got": "group",
            },
        ),
        (
            {"shape": [5, -1]},
            {
                "rule": "ZARR-005",
                "message": "must be an integer >= 0",
                "pointer": "/shape/1",
                "got": -1,
            },
        ),
        (
            {"data_type": "float128"},
            {
                "rule": "ZARR-001",
                "message": "unsupported element type",
                "pointer": "/data_type",
                "expected": "a numeric zarr dtype (e.g. '<f4', 'bfloat16', 'int4')",
                "got": "float128",
            },
        ),
        ({"chunk_grid": [2, 3]}, {**_GRID, "got": [2, 3]}),
        (
            {"chunk_grid": {"name": "rectangular", "configuration": {"chunk_shape": [2, 3]}}},
            {
                **_GRID,
                "got": {"name": "rectangular", "configuration": {"chunk_shape": [2, 3]}},
            },
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": [2, 3]}},
            {**_GRID, "got": {"name": "regular", "configuration": [2, 3]}},
        ),
        (
            {"chunk_grid": {"name": "regular"}},
            {**_GRID, "got": {"name": "regular"}},
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {}}},
            {
                "rule": "ZARR-011",
                "message": "must be a list of at most 32 integers",
                "pointer": "/chunk_grid/configuration/chunk_shape",
                "got": None,
            },
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 0]}}},
            {
                "rule": "ZARR-011",
                "message": "must be an integer >= 1",
                "pointer": "/chunk_grid/configuration/chunk_shape/1",
                "got": 0,
            },
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}},
            {
                "rule": "ZARR-011",
                "message": "chunk_shape must have the rank of shape",
                "pointer": "/chunk_grid/configuration",
                "expected": 2,
                "got": 1,
            },
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3, 1]}}},
            {
                "rule": "ZARR-011",
                "message": "chunk_shape must have the rank of shape",
                "pointer": "/chunk_grid/configuration",
                "expected": 2,
                "got": 3,
            },
        ),
        (
            {
                "chunk_grid": {
                    "name": "regular",
                    "configuration": {"chunk_shape": [2, 3], "x": 1},
                }
            },
            {
                "rule": "ZARR-011",
                "message": "chunk_shape must have the rank of shape",
                "pointer": "/chunk_grid/configuration",
                "expected": 2,
                "got": 2,
            },
        ),
        (
            {"chunk_key_encoding": "default"},
            {
                "rule": "ZARR-012",
                "message": "chunk_key_encoding must be 'default' or 'v2'",
                "pointer": "/chunk_key_encoding",
                "got": "default",
            },
        ),
        (
            {"chunk_key_encoding": {"name": "v3"}},
            {
                "rule": "ZARR-012",
                "message": "chunk_key_encoding must be 'default' or 'v2'",
                "pointer": "/chunk_key_encoding",
                "got": {"name": "v3"},
            },
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "-"}}},
            {**_ENC_ERR, "got": {"separator": "-"}},
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": None}}},
            {**_ENC_ERR, "got": {"separator": None}},
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": ["/"]}},
            {**_ENC_ERR, "got": ["/"]},
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": ".", "x": 1}}},
            {**_ENC_ERR, "got": {"separator": ".", "x": 1}},
        ),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"x": 1}}},
            {**_ENC_ERR, "got": {"x": 1}},
        ),
        (
            {"storage_transformers": [{"name": "t"}]},
            {
                "rule": "ZARR-010",
                "message": "storage_transformers must be empty",
                "pointer": "/storage_transformers",
                "got": [{"name": "t"}],
            },
        ),
        (
            {"storage_transformers": {}},
            {
                "rule": "ZARR-010",
                "message": "storage_transformers must be empty",
                "pointer": "/storage_transformers",
                "got": {},
            },
        ),
        (
            {"dimension_names": ["x"]},
            {
                "rule": "ZARR-010",
                "message": "dimension_names must list one name (or null) per dimension",
                "pointer": "/dimension_names",
                "got": ["x"],
            },
        ),
        (
            {"dimension_names": "xy"},
            {
                "rule": "ZARR-010",
                "message": "dimension_names must list one name (or null) per dimension",
                "pointer": "/dimension_names",
                "got": "xy",
            },
        ),
        (
            {"dimension_names": ["x", "y", "z"]},
            {
                "rule": "ZARR-010",
                "message": "dimension_names must list one name (or null) per dimension",
                "pointer": "/dimension_names",
                "got": ["x", "y", "z"],
            },
        ),
        (
            {"attributes": []},
            {
                "rule": "ZARR-010",
                "message": "attributes must be an object",
                "pointer": "/attributes",
                "got": [],
            },
        ),
        (
            {"attributes": "a"},
            {
                "rule": "ZARR-010",
                "message": "attributes must be an object",
                "pointer": "/attributes",
                "got": "a",
            },
        ),
        (
            {"shape": [2**38 + 1, 1], "data_type": "float32"},
            {
                "rule": "ZARR-005",
                "message": "array too large for this reader",
                "pointer": "/chunk_grid/configuration/chunk_shape",
                "expected": "<= 1099511627776 bytes",
                "got": 1099511627780,
            },
        ),
        (
            {"fill_value": "Infinity"},
            {
                "rule": "ZARR-007",
                "message": "fill_value does not fit the element type int32",
                "pointer": "/fill_value",
                "got": "Infinity",
            },
        ),
    ],
)
def test_v3_refusals_name_file_pointer_and_rule(change, want):
    """Each check of a zarr.json, its whole error: file, pointer, message, details, rule.
    Kills ArrayV3Metadata.from_dict check mutants."""
    assert error_fields(_v3_error(array_v3(**change))) == {"file": "a/zarr.json", **want}


def test_v3_not_an_object():
    """A zarr.json that is no object is ZARR-010 at the root.
    Kills ArrayV3Metadata.from_dict 1-15."""
    err = _v3_error([1], file=Path("q/zarr.json"))
    assert error_fields(err) == {
        "rule": "ZARR-010",
        "file": "q/zarr.json",
        "message": "zarr.json must be a JSON object",
        "pointer": "",
    }


def test_v3_codecs_are_parsed_for_the_rank_dtype_and_file():
    """The codec chain is parsed with the array's rank (transpose order), element type
    (bytes endian) and file. Kills the parse_codecs call mutants."""
    codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE]
    m = ArrayV3Metadata.from_dict(array_v3(codecs=codecs))
    assert m.pipeline.array_to_array == (TransposeCodec((1, 0)),)
    err = _v3_error(
        array_v3(codecs=[{"name": "transpose", "configuration": {"order": [0]}}, BYTES_LE])
    )
    assert (err.rule, err.file) == ("ZARR-013", "a/zarr.json")
    err = _v3_error(array_v3(codecs=[{"name": "bytes"}]))  # int32 needs an endian
    assert (err.rule, err.file) == ("ZARR-013", "a/zarr.json")
    m = ArrayV3Metadata.from_dict(array_v3(codecs=[{"name": "bytes"}], data_type="uint8"))
    assert m.numpy_dtype == np.dtype("uint8")


def test_v3_sharding_checks():
    """Sharding: no array->array codec before it (ZARR-014), the shard shape a multiple of
    the inner chunk shape (ZARR-014, with both shapes), and the inner grid within the limits
    (ZARR-005 at /codecs). Kills ArrayV3Metadata.from_dict sharding mutants."""
    m = ArrayV3Metadata.from_dict(
        array_v3(shape=(8, 6), chunk=(4, 6), codecs=[sharding_codec((2, 3))])
    )
    assert m.sharding is m.pipeline.array_to_bytes
    assert isinstance(m.sharding, ShardingCodec) and m.sharding.chunk_shape == (2, 3)
    m = ArrayV3Metadata.from_dict(
        array_v3(shape=(8, 6), chunk=(4, 6), codecs=[sharding_codec((4, 6))])
    )
    assert m.sharding.chunk_shape == (4, 6)
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    err = _v3_error(
        array_v3(shape=(8, 6), chunk=(4, 6), codecs=[transpose, sharding_codec((2, 3))])
    )
    assert error_fields(err) == {
        "rule": "ZARR-014",
        "file": "a/zarr.json",
        "message": "array->array codecs before sharding_indexed are not in the spec's subset",
        "pointer": "/codecs",
    }
    for inner in ((3, 3), (4, 4), (2, 4)):
        err = _v3_error(array_v3(shape=(8, 6), chunk=(4, 6), codecs=[sharding_codec(inner)]))
        assert error_fields(err) == {
            "rule": "ZARR-014",
            "file": "a/zarr.json",
            "message": "the shard shape must be a multiple of the inner chunk shape",
            "pointer": "/codecs",
            "expected": "divisors of [4, 6]",
            "got": list(inner),
        }
    err = _v3_error(array_v3(shape=(2**25, 1), chunk=(2**25, 1), codecs=[sharding_codec((1, 1))]))
    assert error_fields(err) == {
        "rule": "ZARR-005",
        "file": "a/zarr.json",
        "message": "the chunk grid holds more chunks than the limit",
        "pointer": "/codecs",
        "expected": "<= 16777216",
        "got": 33554432,
    }
    ArrayV3Metadata.from_dict(
        array_v3(shape=(2**24, 1), chunk=(2**24, 1), codecs=[sharding_codec((1, 1))])
    )
