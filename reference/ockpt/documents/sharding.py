"""`_sharding`: how each jax.Array leaf was sharded when saved.

The outer document maps `sharding_key(param name)` to a JSON *string* that itself holds one
sharding object. The saved sharding is informative only: arrays are read through the zarr chunk
grid, and a reader must not need the saved devices to exist.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import DocumentError
from ..names import SHARDING_FILE
from ..paths import decode_sharding_key, sharding_key
from ._base import Document
from ._json import (
    child,
    dump_json,
    expect,
    expect_int_list,
    expect_object,
    parse_json,
    require,
)

__all__ = [
    "AxisSpec",
    "NamedShardingSpec",
    "SingleDeviceShardingSpec",
    "ShardingSpec",
    "ShardingDocument",
]


#: One partition-spec entry: unsharded (None), one mesh axis, or several mesh axes.
AxisSpec = None | str | tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class NamedShardingSpec:
    """A `NamedSharding`: a device mesh with named axes and a partition spec."""

    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    partition_spec: tuple[AxisSpec, ...]
    device_ids: tuple[int, ...] | None = None  # mesh device ids in C order (absent before 0.6)
    axis_types: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    sharding_type = "NamedSharding"

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, file: str, pointer: str) -> NamedShardingSpec:
        rest = dict(obj)
        rest.pop("sharding_type")

        def take(key: str) -> Any:
            value = require(rest, key, file=file, pointer=pointer, rule="SHARD-003")
            rest.pop(key)
            return value

        mesh_shape = expect_int_list(
            take("shape"), file=file, pointer=child(pointer, "shape"), rule="SHARD-003"
        )
        names = expect(
            take("axis_names"),
            list,
            file=file,
            pointer=child(pointer, "axis_names"),
            rule="SHARD-003",
        )
        axis_names = tuple(
            expect(n, str, file=file, pointer=child(pointer, "axis_names"), rule="SHARD-003")
            for n in names
        )
        if len(axis_names) != len(mesh_shape):
            raise DocumentError(
                "axis_names and shape differ in length",
                rule="SHARD-003",
                file=file,
                pointer=pointer,
                expected=len(mesh_shape),
                got=len(axis_names),
            )
        axis_types = None
        if "axis_types" in rest:
            raw = expect(
                rest.pop("axis_types"),
                list,
                file=file,
                pointer=child(pointer, "axis_types"),
                rule="SHARD-003",
            )
            axis_types = tuple(
                expect(t, str, file=file, pointer=child(pointer, "axis_types"), rule="SHARD-003")
                for t in raw
            )
        spec_ptr = child(pointer, "partition_spec")
        spec = tuple(
            _axis_spec(e, axis_names, file=file, pointer=child(spec_ptr, i))
            for i, e in enumerate(
                expect(take("partition_spec"), list, file=file, pointer=spec_ptr, rule="SHARD-003")
            )
        )
        mesh_ptr = child(pointer, "device_mesh")
        ids = None
        if "device_mesh" in rest:  # Orbax 0.5.x wrote no device_mesh
            device_mesh = expect_object(
                take("device_mesh"), file=file, pointer=mesh_ptr, rule="SHARD-003"
            )
            ids = _device_ids(
                require(device_mesh, "mesh", file=file, pointer=mesh_ptr, rule="SHARD-003"),
                mesh_shape,
                file=file,
                pointer=child(mesh_ptr, "mesh"),
            )
        return cls(
            mesh_shape=mesh_shape,
            axis_names=axis_names,
            partition_spec=spec,
            device_ids=ids,
            axis_types=axis_types,
            extra=rest,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sharding_type": self.sharding_type,
            "shape": list(self.mesh_shape),
            "axis_names": list(self.axis_names),
        }
        if self.axis_types is not None:
            out["axis_types"] = list(self.axis_types)
        out["partition_spec"] = [
            list(e) if isinstance(e, tuple) else e for e in self.partition_spec
        ]
        if self.device_ids is not None:
            out["device_mesh"] = {"mesh": _nest(self.device_ids, self.mesh_shape)}
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True)
class SingleDeviceShardingSpec:
    """A `SingleDeviceSharding`: the whole array on one named device."""

    device_str: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    sharding_type = "SingleDeviceSharding"

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, file: str, pointer: str) -> SingleDeviceShardingSpec:
        rest = dict(obj)
        rest.pop("sharding_type")
        device = expect(
            require(rest, "device_str", file=file, pointer=pointer, rule="SHARD-003"),
            str,
            file=file,
            pointer=child(pointer, "device_str"),
            rule="SHARD-003",
        )
        rest.pop("device_str")
        return cls(device_str=device, extra=rest)

    def to_json(self) -> dict[str, Any]:
        return {"sharding_type": self.sharding_type, "device_str": self.device_str, **self.extra}


ShardingSpec = NamedShardingSpec | SingleDeviceShardingSpec

_KINDS: dict[str, Any] = {
    "NamedSharding": NamedShardingSpec,
    "SingleDeviceSharding": SingleDeviceShardingSpec,
}


def _axis_spec(entry: Any, axis_names: tuple[str, ...], *, file: str, pointer: str) -> AxisSpec:
    names: tuple[str, ...]
    if entry is None:
        return None
    if isinstance(entry, str):
        names = (entry,)
    else:
        items = expect(entry, list, file=file, pointer=pointer, rule="SHARD-003")
        names = tuple(expect(n, str, file=file, pointer=pointer, rule="SHARD-003") for n in items)
    for name in names:
        if name not in axis_names:
            raise DocumentError(
                "partition_spec names an axis the mesh lacks",
                rule="SHARD-003",
                file=file,
                pointer=pointer,
                expected=list(axis_names),
                got=name,
            )
    return names[0] if isinstance(entry, str) else names


def _device_ids(mesh: Any, shape: tuple[int, ...], *, file: str, pointer: str) -> tuple[int, ...]:
    """Flatten the nested `[[{"id": n}, ...], ...]` mesh, checking it has `shape`."""
    ids: list[int] = []

    def walk(node: Any, depth: int, ptr: str) -> None:
        if depth == len(shape):
            cell = expect_object(node, file=file, pointer=ptr, rule="SHARD-003")
            ident = require(cell, "id", file=file, pointer=ptr, rule="SHARD-003")
            ids.append(expect(ident, int, file=file, pointer=child(ptr, "id"), rule="SHARD-003"))
            return
        items = expect(node, list, file=file, pointer=ptr, rule="SHARD-003")
        if len(items) != shape[depth]:
            raise DocumentError(
                "device mesh does not have the declared shape",
                rule="SHARD-003",
                file=file,
                pointer=ptr,
                expected=shape[depth],
                got=len(items),
            )
        for i, item in enumerate(items):
            walk(item, depth + 1, child(ptr, i))

    if math.prod(shape) > 1 << 24:
        raise DocumentError(
            "device mesh too large",
            rule="SHARD-003",
            file=file,
            pointer=pointer,
            expected=f"<= {1 << 24} devices",
            got=math.prod(shape),
        )
    walk(mesh, 0, pointer)
    return tuple(ids)


def _nest(ids: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    if not shape:
        return {"id": ids[0]}
    step = len(ids) // shape[0] if shape[0] else 0
    return [_nest(ids[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def parse_sharding(text: Any, *, file: str = SHARDING_FILE, pointer: str = "") -> ShardingSpec:
    """Parse one value of `_sharding`: a JSON string holding a sharding object."""
    text = expect(text, str, file=file, pointer=pointer, rule="SHARD-002")
    obj = expect_object(
        parse_json(text, file=file, pointer=pointer), file=file, pointer=pointer, rule="SHARD-002"
    )
    kind = expect(
        require(obj, "sharding_type", file=file, pointer=pointer, rule="SHARD-003"),
        str,
        file=file,
        pointer=child(pointer, "sharding_type"),
        rule="SHARD-003",
    )
    if kind not in _KINDS:
        raise DocumentError(
            "unknown sharding_type",
            rule="SHARD-003",
            file=file,
            pointer=child(pointer, "sharding_type"),
            expected=sorted(_KINDS),
            got=kind,
        )
    return _KINDS[kind].from_json(obj, file=file, pointer=pointer)


@dataclass(frozen=True, kw_only=True)
class ShardingDocument(Document):
    """The parsed `_sharding` file: param name -> saved sharding."""

    FILE_NAME: ClassVar[str] = SHARDING_FILE
    COMPACT: ClassVar[bool] = True  # the outer map has no spaces; inner strings have them

    shardings: Mapping[str, ShardingSpec]

    @classmethod
    def from_json(cls, obj: Any, *, file: str = SHARDING_FILE) -> ShardingDocument:
        obj = expect_object(obj, file=file, pointer="", rule="SHARD-002")
        out: dict[str, ShardingSpec] = {}
        for key, value in obj.items():
            name = decode_sharding_key(key, file=file)
            out[name] = parse_sharding(value, file=file, pointer=child("", key))
        return cls(shardings=out)

    def to_json(self) -> dict[str, str]:
        return {
            sharding_key(name): dump_json(spec.to_json()).decode("utf-8")
            for name, spec in self.shardings.items()
        }
