"""`ockpt.documents.sharding`: the `_sharding` document and its sharding specs (named, single
device, positional), each fault's file, pointer and rule, and exact round trips.
"""

from __future__ import annotations

import functools
import json

from ockpt.documents import (
    NamedShardingSpec,
    ShardingDocument,
    SingleDeviceShardingSpec,
)
from ockpt.documents.sharding import parse_sharding
from ockpt.errors import DocumentError
from tests.support.errors import error_fields, raised, raised_fields

_error = functools.partial(raised, DocumentError)
_fields = functools.partial(raised_fields, DocumentError)


# ---------------------------------------------------------------------------------------------
# sharding.py

from tests.support import FIXTURES  # noqa: E402

SHARDED = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint" / "_sharding"
MESH_4X2 = [[{"id": 2 * r + c} for c in range(2)] for r in range(4)]


def test_real_shardings_decode_to_their_specs():
    """The `_sharding` of Orbax 0.12.8's sharded fixture: each param's mesh, axis names and
    types, partition spec (None, one axis, several axes as a tuple), device ids in C order,
    and the single-device one; each spec's `to_json` is its inner JSON, lists for tuples.
    Kills NamedShardingSpec.from_json / to_json 18, _axis_spec and _device_ids mutants on the
    values they build."""
    raw = json.loads(SHARDED.read_bytes())
    doc = ShardingDocument.read(SHARDED)
    specs = doc.shardings
    assert sorted(specs) == [
        "bf16_x", "none_y", "replicated", "single_device", "x", "xy", "xy_joint", "yx",
    ]  # fmt: skip
    auto = ("AxisType.Auto", "AxisType.Auto")
    for name, partition in [
        ("none_y", (None, "y")),
        ("replicated", ()),
        ("x", ("x",)),
        ("xy", ("x", "y")),
        ("xy_joint", (("x", "y"),)),
        ("yx", ("y", "x")),
    ]:
        assert specs[name] == NamedShardingSpec(
            mesh_shape=(4, 2),
            axis_names=("x", "y"),
            partition_spec=partition,
            device_ids=tuple(range(8)),
            axis_types=auto,
        ), name
    assert specs["single_device"] == SingleDeviceShardingSpec(device_str="cpu:3")
    from ockpt.paths import sharding_key

    for name, spec in specs.items():
        inner = json.loads(raw[sharding_key(name)])
        assert spec.to_json() == inner and list(spec.to_json()) == list(inner), name
    assert doc.to_json() == raw and doc.to_bytes() == SHARDED.read_bytes()


def _named(**fields):
    base = {
        "sharding_type": "NamedSharding",
        "shape": [4, 2],
        "axis_names": ["x", "y"],
        "partition_spec": ["x"],
    }
    return json.dumps({**base, **fields})


def _drop(name):
    return json.dumps({k: v for k, v in json.loads(_named()).items() if k != name})


def test_named_sharding_faults_name_file_pointer_and_rule():
    """Every fault of a NamedSharding is SHARD-003 at its JSON pointer inside the `_sharding`
    value (the param's key): a missing field, a mistyped shape, axis name, axis type or
    partition spec, names and shape of different lengths (expected the shape's), an axis the
    mesh lacks (expected the names), a device mesh that is not an object or lacks "mesh".
    Kills NamedShardingSpec.from_json and _axis_spec mutants on those messages, rules, files,
    pointers, expected and got values."""
    P = "/eA=="

    def fields(value):
        return _fields(parse_sharding, value, file="s", pointer=P)

    for name in ("shape", "axis_names", "partition_spec"):
        assert fields(_drop(name)) == {
            "rule": "SHARD-003",
            "file": "s",
            "message": f"required field {name!r} is missing",
            "pointer": f"{P}",
        }
    assert fields(_named(shape=2)) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/shape",
        "expected": "array",
        "got": "integer",
    }
    assert fields(_named(shape=[4, -2])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "negative size",
        "pointer": f"{P}/shape/1",
        "expected": ">= 0",
        "got": -2,
    }
    assert fields(_named(axis_names="xy")) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/axis_names",
        "expected": "array",
        "got": "string",
    }
    assert fields(_named(axis_names=["x", 1])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/axis_names",
        "expected": "string",
        "got": "integer",
    }
    assert fields(_named(axis_names=["x"])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "axis_names and shape differ in length",
        "pointer": f"{P}",
        "expected": 2,
        "got": 1,
    }
    assert fields(_named(axis_types="Auto")) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/axis_types",
        "expected": "array",
        "got": "string",
    }
    assert fields(_named(axis_types=["Auto", None])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/axis_types",
        "expected": "string",
        "got": "null",
    }
    assert fields(_named(partition_spec="x")) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/partition_spec",
        "expected": "array",
        "got": "string",
    }
    assert fields(_named(partition_spec=[None, 1])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/partition_spec/1",
        "expected": "array",
        "got": "integer",
    }
    assert fields(_named(partition_spec=[["x", 2]])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/partition_spec/0",
        "expected": "string",
        "got": "integer",
    }
    assert fields(_named(partition_spec=[None, "z"])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "partition_spec names an axis the mesh lacks",
        "pointer": f"{P}/partition_spec/1",
        "expected": ["x", "y"],
        "got": "z",
    }
    assert fields(_named(partition_spec=[["y", "w"]])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "partition_spec names an axis the mesh lacks",
        "pointer": f"{P}/partition_spec/0",
        "expected": ["x", "y"],
        "got": "w",
    }
    assert fields(_named(device_mesh=[])) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/device_mesh",
        "expected": "object",
        "got": "array",
    }
    assert fields(_named(device_mesh={"ids": []})) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "required field 'mesh' is missing",
        "pointer": f"{P}/device_mesh",
    }


def test_device_mesh_faults_name_the_cell():
    """The nested device mesh must have the declared shape, level by level (expected the
    size, got the length), its cells must be objects with an integer id; a mesh of more than
    2^24 devices is refused before it is walked (exactly 2^24 is walked). Kills _device_ids
    mutants on those messages, rules, files, pointers, depths, expected and got values, and
    the bound."""
    M = "/k/device_mesh/mesh"

    def fields(mesh, shape=(4, 2)):
        value = _named(
            shape=list(shape), axis_names=["x", "y"][: len(shape)], device_mesh={"mesh": mesh}
        )
        return _fields(parse_sharding, value, file="s", pointer="/k")

    assert fields(MESH_4X2[:3]) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "device mesh does not have the declared shape",
        "pointer": f"{M}",
        "expected": 4,
        "got": 3,
    }
    short = [row[:] for row in MESH_4X2]
    short[2] = short[2][:1]
    assert fields(short) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "device mesh does not have the declared shape",
        "pointer": f"{M}/2",
        "expected": 2,
        "got": 1,
    }
    bad = [row[:] for row in MESH_4X2]
    bad[3] = {"id": 6}
    assert fields(bad) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{M}/3",
        "expected": "array",
        "got": "object",
    }
    bad[3] = [{"id": 6}, 7]
    assert fields(bad) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{M}/3/1",
        "expected": "object",
        "got": "integer",
    }
    bad[3] = [{"id": 6}, {"di": 7}]
    assert fields(bad) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "required field 'id' is missing",
        "pointer": f"{M}/3/1",
    }
    bad[3] = [{"id": 6}, {"id": "7"}]
    assert fields(bad) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{M}/3/1/id",
        "expected": "integer",
        "got": "string",
    }
    assert fields({}, shape=(4097, 4097)) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "device mesh too large",
        "pointer": f"{M}",
        "expected": "<= 16777216 devices",
        "got": 16785409,
    }
    assert fields([], shape=(1 << 24,)) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "device mesh does not have the declared shape",
        "pointer": f"{M}",
        "expected": 16777216,
        "got": 0,
    }


def test_device_meshes_round_trip_in_c_order():
    """Device ids are read in C order and nested back the same way, for any order of ids, a
    0-d mesh (one cell) and a mesh with a zero-sized axis (no cell). Kills _device_ids and
    _nest mutants (7: a division by a zero axis; 11 is equivalent, see RESULTS.md)."""
    ids = [5, 3, 7, 1, 0, 2, 6, 4]
    mesh = [[{"id": ids[2 * r + c]} for c in range(2)] for r in range(4)]
    spec = parse_sharding(_named(device_mesh={"mesh": mesh}))
    assert spec.device_ids == tuple(ids)
    assert spec.to_json()["device_mesh"] == {"mesh": mesh}
    mesh3 = [[[{"id": 4 * a + 2 * b + c} for c in range(2)] for b in range(2)] for a in range(2)]
    spec = parse_sharding(
        _named(
            shape=[2, 2, 2],
            axis_names=["a", "b", "c"],
            partition_spec=[],
            device_mesh={"mesh": mesh3},
        )
    )
    assert spec.device_ids == tuple(range(8)) and spec.to_json()["device_mesh"]["mesh"] == mesh3
    zero_d = parse_sharding(
        _named(shape=[], axis_names=[], partition_spec=[], device_mesh={"mesh": {"id": 9}})
    )
    assert zero_d.device_ids == (9,) and zero_d.mesh_shape == ()
    assert zero_d.to_json()["device_mesh"] == {"mesh": {"id": 9}}
    for shape, mesh in (([0], []), ([0, 3], []), ([2, 0], [[], []])):
        names = ["a", "b"][: len(shape)]
        spec = parse_sharding(
            _named(shape=shape, axis_names=names, partition_spec=[], device_mesh={"mesh": mesh})
        )
        assert spec.device_ids == ()
        assert spec.to_json()["device_mesh"] == {"mesh": mesh}


def test_named_sharding_fields_and_order_round_trip():
    """NamedSharding's `to_json` writes its fields in Orbax's order (sharding_type, shape,
    axis_names, axis_types when read, partition_spec, device_mesh when read, then unknown
    fields, which are kept); 0.5.x specs without axis types and mesh stay without them.
    Kills NamedShardingSpec.from_json / to_json mutants on each field."""
    raw = {
        "sharding_type": "NamedSharding",
        "shape": [4, 2],
        "axis_names": ["x", "y"],
        "axis_types": ["Explicit", "Auto"],
        "partition_spec": [["x", "y"], None],
        "device_mesh": {"mesh": MESH_4X2},
        "memory_kind": "device",
    }
    spec = parse_sharding(json.dumps(raw))
    assert spec.axis_types == ("Explicit", "Auto") and spec.extra == {"memory_kind": "device"}
    assert spec.partition_spec == (("x", "y"), None)
    assert type(spec.partition_spec[0]) is tuple and type(spec.mesh_shape) is tuple
    assert spec.to_json() == raw and list(spec.to_json()) == list(raw)
    old = json.loads(_named(partition_spec=[None, "y"]))
    spec = parse_sharding(json.dumps(old))
    assert (spec.axis_types, spec.device_ids, spec.extra) == (None, None, {})
    assert spec.to_json() == old and list(spec.to_json()) == list(old)


def test_parse_sharding_and_single_device_faults():
    """A `_sharding` value must be a string (SHARD-002) holding JSON (JSON-001 at the key) of
    an object (SHARD-002) with a string sharding_type that is known (SHARD-003, expected the
    known names); a SingleDeviceSharding needs a string device_str (SHARD-003). The default
    file is `_sharding`, the default pointer the document's root. Kills parse_sharding and
    SingleDeviceShardingSpec.from_json mutants on those messages, rules, files, pointers,
    expected and got values."""
    P = "/k"
    assert _fields(parse_sharding, 1, file="s", pointer=P) == {
        "rule": "SHARD-002",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}",
        "expected": "string",
        "got": "integer",
    }
    e = _error(parse_sharding, "{", file="s", pointer=P)
    assert (e.rule, e.file, e.pointer) == ("JSON-001", "s", P)
    assert _fields(parse_sharding, "[]", file="s", pointer=P) == {
        "rule": "SHARD-002",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}",
        "expected": "object",
        "got": "array",
    }
    assert _fields(parse_sharding, "{}", file="s", pointer=P) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "required field 'sharding_type' is missing",
        "pointer": f"{P}",
    }
    assert _fields(parse_sharding, '{"sharding_type": 1}', file="s", pointer=P) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/sharding_type",
        "expected": "string",
        "got": "integer",
    }
    assert _fields(parse_sharding, '{"sharding_type": "GSPMDSharding"}', file="s", pointer=P) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "unknown sharding_type",
        "pointer": f"{P}/sharding_type",
        "expected": ["NamedSharding", "SingleDeviceSharding"],
        "got": "GSPMDSharding",
    }
    single = '{"sharding_type": "SingleDeviceSharding"}'
    assert _fields(parse_sharding, single, file="s", pointer=P) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "required field 'device_str' is missing",
        "pointer": f"{P}",
    }
    single = '{"sharding_type": "SingleDeviceSharding", "device_str": 0}'
    assert _fields(parse_sharding, single, file="s", pointer=P) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "wrong type",
        "pointer": f"{P}/device_str",
        "expected": "string",
        "got": "integer",
    }
    e = _error(parse_sharding, 1)
    assert (e.file, e.pointer) == ("_sharding", "")
    e = _error(parse_sharding, '{"sharding_type": "NamedSharding"}')
    assert error_fields(e) == {
        "rule": "SHARD-003",
        "file": "_sharding",
        "message": "required field 'shape' is missing",
        "pointer": "",
    }
    raw = {"sharding_type": "SingleDeviceSharding", "device_str": "cpu:1", "memory_kind": "x"}
    spec = parse_sharding(json.dumps(raw))
    assert spec == SingleDeviceShardingSpec(device_str="cpu:1", extra={"memory_kind": "x"})
    assert spec.to_json() == raw and list(spec.to_json()) == list(raw)


def test_sharding_document_faults_and_round_trip():
    """The outer `_sharding` must be an object (SHARD-002, at its root); each key decodes to a
    param name (faults name the file) and each value is parsed at the key's pointer; the
    document writes back compact, its values with spaces, as Orbax writes them. Kills
    ShardingDocument.from_json and to_json mutants (to_json 5, "UTF-8" for "utf-8", is
    equivalent: codec names are case-insensitive)."""
    e = _error(ShardingDocument.from_json, [], file="s")
    assert error_fields(e) == {
        "rule": "SHARD-002",
        "file": "s",
        "message": "wrong type",
        "pointer": "",
        "expected": "object",
        "got": "array",
    }
    assert _error(ShardingDocument.from_json, []).file == "_sharding"
    e = _error(ShardingDocument.from_json, {"a": "{}"}, file="s")
    assert (e.rule, e.file, e.pointer) == ("SHARD-001", "s", "/a")
    e = _error(ShardingDocument.from_json, {"YQ==": "{}", "Yg==": "[]"}, file="s")
    assert error_fields(e) == {
        "rule": "SHARD-003",
        "file": "s",
        "message": "required field 'sharding_type' is missing",
        "pointer": "/YQ==",
    }
    single = {"sharding_type": "SingleDeviceSharding", "device_str": "cpu:0"}
    doc = ShardingDocument.from_json({"YQ==": json.dumps(single), "w6k=": _named()})
    assert doc.shardings == {
        "a": SingleDeviceShardingSpec(device_str="cpu:0"),
        "\u00e9": NamedShardingSpec(
            mesh_shape=(4, 2), axis_names=("x", "y"), partition_spec=("x",)
        ),
    }
    assert doc.to_bytes() == (
        b'{"YQ==":"{\\"sharding_type\\": \\"SingleDeviceSharding\\", '
        b'\\"device_str\\": \\"cpu:0\\"}",'
        b'"w6k=":"{\\"sharding_type\\": \\"NamedSharding\\", \\"shape\\": [4, 2], '
        b'\\"axis_names\\": [\\"x\\", \\"y\\"], \\"partition_spec\\": [\\"x\\"]}"}'
    )
