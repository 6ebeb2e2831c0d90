"""`ockpt.documents.array_metadatas`: the per-process `array_metadatas/` documents of real
checkpoints and hand-made faults (file, pointer, rule), and exact round trips.
"""

from __future__ import annotations

import functools

from ockpt.documents import (
    ArrayMetadatas,
)
from ockpt.documents.array_metadatas import ArrayMetadata, process_index
from ockpt.errors import DocumentError
from tests.support import FIXTURES
from tests.support.errors import error_fields, raised, raised_fields

_error = functools.partial(raised, DocumentError)
_fields = functools.partial(raised_fields, DocumentError)


# ---------------------------------------------------------------------------------------------
# array_metadatas.py

RANDOM_KEYS = FIXTURES / "orbax-0.12.8" / "random_keys" / "checkpoint" / "array_metadatas"


def test_real_array_metadatas_and_random_key_impls():
    """The array_metadatas/process_0 of Orbax 0.12.8's random_keys fixture: each array's
    param name, write and chunk shapes (tuples), and the PRNG implementation its ext_metadata
    records (None for a plain array). Kills ArrayMetadatas.from_json / ArrayMetadata.from_json
    mutants on the values they build."""
    path = RANDOM_KEYS / "process_0"
    doc = ArrayMetadatas.read(path)
    by_name = doc.by_param_name()
    assert list(by_name) == [a.param_name for a in doc.arrays]
    assert by_name["legacy.prng_key"] == ArrayMetadata(
        param_name="legacy.prng_key", write_shape=(2,), chunk_shape=(2,), ext_metadata=None
    )
    assert by_name["rngs.grid"] == ArrayMetadata(
        param_name="rngs.grid",
        write_shape=(1, 1, 2),
        chunk_shape=(1, 1, 2),
        ext_metadata={"random_key_impl": "threefry2x32"},
    )
    impls = {a.param_name: a.random_key_impl for a in doc.arrays}
    assert impls["params.w"] is None and impls["rngs.rbg"] == "rbg"
    assert impls["rngs.sharded_unsafe_rbg"] == "unsafe_rbg"
    assert doc.to_bytes() == path.read_bytes() and doc.extra == {}
    assert process_index(path.name) == 0


def test_array_metadata_faults_name_file_pointer_and_rule():
    """Every fault of an array_metadatas document is ARRM-001 at its pointer: not an object,
    no or a mistyped list, an entry that is not an object or holds more than
    'array_metadata' (expected and got the fields), an array without a string param_name,
    shapes that are not lists of sizes, an ext_metadata that is not an object. The default
    file name is the directory's. Kills ArrayMetadatas.from_json and ArrayMetadata.from_json
    mutants on those messages, rules, files, pointers, expected and got values."""

    def fields(obj):
        return _fields(ArrayMetadatas.from_json, obj, file="a")

    def one(**members):
        first = {"array_metadata": {"param_name": "p"}}
        return fields(
            {"array_metadatas": [first, {"array_metadata": {"param_name": "w", **members}}]}
        )

    A = "/array_metadatas/1/array_metadata"
    e = _error(ArrayMetadatas.from_json, [], file="a")
    assert error_fields(e) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": "",
        "expected": "object",
        "got": "array",
    }
    e = _error(ArrayMetadatas.from_json, {}, file="a")
    assert error_fields(e) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "required field 'array_metadatas' is missing",
        "pointer": "",
    }
    assert fields({"array_metadatas": {}}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": "/array_metadatas",
        "expected": "array",
        "got": "object",
    }
    assert fields({"array_metadatas": [{"array_metadata": {"param_name": "p"}}, []]}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": "/array_metadatas/1",
        "expected": "object",
        "got": "array",
    }
    e = _error(
        ArrayMetadatas.from_json, {"array_metadatas": [{"array_metadata": {}, "x": 1}]}, file="a"
    )
    assert error_fields(e) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "entry must hold exactly 'array_metadata'",
        "pointer": "/array_metadatas/0",
        "expected": ["array_metadata"],
        "got": ["array_metadata", "x"],
    }
    assert e.got == ["array_metadata", "x"] and e.expected == ["array_metadata"]
    assert fields({"array_metadatas": [{}]}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "entry must hold exactly 'array_metadata'",
        "pointer": "/array_metadatas/0",
        "expected": ["array_metadata"],
        "got": [],
    }
    assert fields({"array_metadatas": [{"array_metadata": "p"}]}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": "/array_metadatas/0/array_metadata",
        "expected": "object",
        "got": "string",
    }
    assert fields({"array_metadatas": [{"array_metadata": {"write_shape": [1]}}]}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "required field 'param_name' is missing",
        "pointer": "/array_metadatas/0/array_metadata",
    }
    assert fields({"array_metadatas": [{"array_metadata": {"param_name": 1}}]}) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": "/array_metadatas/0/array_metadata/param_name",
        "expected": "string",
        "got": "integer",
    }
    assert one(write_shape=2) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": f"{A}/write_shape",
        "expected": "array",
        "got": "integer",
    }
    assert one(chunk_shape=[1, -1]) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "negative size",
        "pointer": f"{A}/chunk_shape/1",
        "expected": ">= 0",
        "got": -1,
    }
    assert one(ext_metadata=[]) == {
        "rule": "ARRM-001",
        "file": "a",
        "message": "wrong type",
        "pointer": f"{A}/ext_metadata",
        "expected": "object",
        "got": "array",
    }
    assert _error(ArrayMetadatas.from_json, []).file == "array_metadatas"


def test_array_metadata_round_trips_null_shapes_and_unknown_fields():
    """An array with null or absent shapes and ext_metadata reads them as None and writes
    them back as null; unknown fields of an array and of the document are kept. Kills
    ArrayMetadata.to_json 6 and 12 (a null shape written as list(None)) and the to_json /
    from_json mutants on each field."""
    raw = {
        "array_metadatas": [
            {"array_metadata": {"param_name": "a", "write_shape": None, "chunk_shape": None,
                                "ext_metadata": None}},
            {"array_metadata": {"param_name": "b", "write_shape": [3, 0], "chunk_shape": [1, 0],
                                "ext_metadata": {"random_key_impl": 7}, "more": True}},
        ],
        "process": 0,
    }  # fmt: skip
    doc = ArrayMetadatas.from_json(raw)
    a, b = doc.arrays
    assert (a.write_shape, a.chunk_shape, a.ext_metadata, a.random_key_impl) == (None,) * 4
    assert (b.write_shape, b.chunk_shape, b.extra) == ((3, 0), (1, 0), {"more": True})
    assert b.random_key_impl is None  # not a string
    assert doc.extra == {"process": 0}
    assert doc.to_json() == raw
    assert list(doc.to_json()["array_metadatas"][1]["array_metadata"]) == [
        "param_name", "write_shape", "chunk_shape", "ext_metadata", "more",
    ]  # fmt: skip
    bare = ArrayMetadatas.from_json({"array_metadatas": [{"array_metadata": {"param_name": "c"}}]})
    nulls = {"param_name": "c", "write_shape": None, "chunk_shape": None, "ext_metadata": None}
    assert bare.to_json() == {"array_metadatas": [{"array_metadata": nulls}]}


def test_process_index_of_file_names():
    """`process_index` reads N of `process_<N>` (decimal, no leading zero, at most 9 digits)
    and is None for any other name. Kills process_index mutants."""
    assert [process_index(n) for n in ("process_0", "process_7", "process_123456789")] == [
        0, 7, 123456789,
    ]  # fmt: skip
    for name in ("process_01", "process_", "process_1234567890", "process_x", "xprocess_1",
                 "process_1x", "_sharding"):  # fmt: skip
        assert process_index(name) is None, name
