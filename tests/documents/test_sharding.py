"""`ockpt.documents.sharding`: the `_sharding` document and its sharding specs (named, single
device, positional), each fault's file, pointer and rule, and exact round trips.
"""

from __future__ import annotations

import json

import pytest

from ockpt.documents import (
    NamedShardingSpec,
    ShardingDocument,
    SingleDeviceShardingSpec,
)
from ockpt.documents.sharding import parse_sharding
from ockpt.errors import DocumentError


def _error(fn, *args, **kwargs) -> DocumentError:
    with pytest.raises(DocumentError) as info:
        fn(*args, **kwargs)
    return info.value


def _text(fn, *args, **kwargs) -> str:
    """The whole text of the DocumentError that `fn(*args, **kwargs)` raises."""
    return str(_error(fn, *args, **kwargs))


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

    def text(value):
        return _text(parse_sharding, value, file="s", pointer=P)

    for name in ("shape", "axis_names", "partition_spec"):
        assert text(_drop(name)) == f"s at {P}: required field {name!r} is missing [SHARD-003]"
    assert text(_named(shape=2)) == (
        f"s at {P}/shape: wrong type (expected 'array', got 'integer') [SHARD-003]"
    )
    assert text(_named(shape=[4, -2])) == (
        f"s at {P}/shape/1: negative size (expected '>= 0', got -2) [SHARD-003]"
    )
    assert text(_named(axis_names="xy")) == (
        f"s at {P}/axis_names: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(axis_names=["x", 1])) == (
        f"s at {P}/axis_names: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert text(_named(axis_names=["x"])) == (
        f"s at {P}: axis_names and shape differ in length (expected 2, got 1) [SHARD-003]"
    )
    assert text(_named(axis_types="Auto")) == (
        f"s at {P}/axis_types: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(axis_types=["Auto", None])) == (
        f"s at {P}/axis_types: wrong type (expected 'string', got 'null') [SHARD-003]"
    )
    assert text(_named(partition_spec="x")) == (
        f"s at {P}/partition_spec: wrong type (expected 'array', got 'string') [SHARD-003]"
    )
    assert text(_named(partition_spec=[None, 1])) == (
        f"s at {P}/partition_spec/1: wrong type (expected 'array', got 'integer') [SHARD-003]"
    )
    assert text(_named(partition_spec=[["x", 2]])) == (
        f"s at {P}/partition_spec/0: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert text(_named(partition_spec=[None, "z"])) == (
        f"s at {P}/partition_spec/1: partition_spec names an axis the mesh lacks "
        "(expected ['x', 'y'], got 'z') [SHARD-003]"
    )
    assert text(_named(partition_spec=[["y", "w"]])) == (
        f"s at {P}/partition_spec/0: partition_spec names an axis the mesh lacks "
        "(expected ['x', 'y'], got 'w') [SHARD-003]"
    )
    assert text(_named(device_mesh=[])) == (
        f"s at {P}/device_mesh: wrong type (expected 'object', got 'array') [SHARD-003]"
    )
    assert text(_named(device_mesh={"ids": []})) == (
        f"s at {P}/device_mesh: required field 'mesh' is missing [SHARD-003]"
    )


def test_device_mesh_faults_name_the_cell():
    """The nested device mesh must have the declared shape, level by level (expected the
    size, got the length), its cells must be objects with an integer id; a mesh of more than
    2^24 devices is refused before it is walked (exactly 2^24 is walked). Kills _device_ids
    mutants on those messages, rules, files, pointers, depths, expected and got values, and
    the bound."""
    M = "/k/device_mesh/mesh"

    def text(mesh, shape=(4, 2)):
        value = _named(
            shape=list(shape), axis_names=["x", "y"][: len(shape)], device_mesh={"mesh": mesh}
        )
        return _text(parse_sharding, value, file="s", pointer="/k")

    assert text(MESH_4X2[:3]) == (
        f"s at {M}: device mesh does not have the declared shape (expected 4, got 3) [SHARD-003]"
    )
    short = [row[:] for row in MESH_4X2]
    short[2] = short[2][:1]
    assert text(short) == (
        f"s at {M}/2: device mesh does not have the declared shape (expected 2, got 1) [SHARD-003]"
    )
    bad = [row[:] for row in MESH_4X2]
    bad[3] = {"id": 6}
    assert text(bad) == f"s at {M}/3: wrong type (expected 'array', got 'object') [SHARD-003]"
    bad[3] = [{"id": 6}, 7]
    assert text(bad) == f"s at {M}/3/1: wrong type (expected 'object', got 'integer') [SHARD-003]"
    bad[3] = [{"id": 6}, {"di": 7}]
    assert text(bad) == f"s at {M}/3/1: required field 'id' is missing [SHARD-003]"
    bad[3] = [{"id": 6}, {"id": "7"}]
    assert text(bad) == (
        f"s at {M}/3/1/id: wrong type (expected 'integer', got 'string') [SHARD-003]"
    )
    assert text({}, shape=(4097, 4097)) == (
        f"s at {M}: device mesh too large (expected '<= 16777216 devices', got 16785409) "
        "[SHARD-003]"
    )
    assert text([], shape=(1 << 24,)) == (
        f"s at {M}: device mesh does not have the declared shape (expected 16777216, got 0) "
        "[SHARD-003]"
    )


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
    assert _text(parse_sharding, 1, file="s", pointer=P) == (
        f"s at {P}: wrong type (expected 'string', got 'integer') [SHARD-002]"
    )
    e = _error(parse_sharding, "{", file="s", pointer=P)
    assert (e.rule, e.file, e.pointer) == ("JSON-001", "s", P)
    assert _text(parse_sharding, "[]", file="s", pointer=P) == (
        f"s at {P}: wrong type (expected 'object', got 'array') [SHARD-002]"
    )
    assert _text(parse_sharding, "{}", file="s", pointer=P) == (
        f"s at {P}: required field 'sharding_type' is missing [SHARD-003]"
    )
    assert _text(parse_sharding, '{"sharding_type": 1}', file="s", pointer=P) == (
        f"s at {P}/sharding_type: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    assert _text(parse_sharding, '{"sharding_type": "GSPMDSharding"}', file="s", pointer=P) == (
        f"s at {P}/sharding_type: unknown sharding_type "
        "(expected ['NamedSharding', 'SingleDeviceSharding'], got 'GSPMDSharding') [SHARD-003]"
    )
    single = '{"sharding_type": "SingleDeviceSharding"}'
    assert _text(parse_sharding, single, file="s", pointer=P) == (
        f"s at {P}: required field 'device_str' is missing [SHARD-003]"
    )
    single = '{"sharding_type": "SingleDeviceSharding", "device_str": 0}'
    assert _text(parse_sharding, single, file="s", pointer=P) == (
        f"s at {P}/device_str: wrong type (expected 'string', got 'integer') [SHARD-003]"
    )
    e = _error(parse_sharding, 1)
    assert (e.file, e.pointer) == ("_sharding", "")
    e = _error(parse_sharding, '{"sharding_type": "NamedSharding"}')
    assert str(e) == "_sharding: required field 'shape' is missing [SHARD-003]"
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
    assert str(e) == "s: wrong type (expected 'object', got 'array') [SHARD-002]"
    assert e.pointer == ""
    assert _error(ShardingDocument.from_json, []).file == "_sharding"
    e = _error(ShardingDocument.from_json, {"a": "{}"}, file="s")
    assert (e.rule, e.file, e.pointer) == ("SHARD-001", "s", "/a")
    e = _error(ShardingDocument.from_json, {"YQ==": "{}", "Yg==": "[]"}, file="s")
    assert str(e) == "s at /YQ==: required field 'sharding_type' is missing [SHARD-003]"
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
