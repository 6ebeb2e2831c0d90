"""zarr v3 array metadata (``zarr.json``) as tensorstore writes it for Orbax (spec/arrays.md).

With the ``default`` chunk key encoding a chunk's key is ``"c"`` followed by its grid indices,
each after the separator (``"c/0/1"``); the one chunk of a 0-d array is ``"c"``. With the ``v2``
encoding keys are as in zarr v2 (``"0.1"``, ``"0"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._common import check_extent, dims, fail, fill_array, load_json, numpy_dtype
from .codecs import CodecPipeline, parse_codecs
from .shard_index import ShardingCodec

__all__ = ["ArrayV3Metadata"]

_REQUIRED = (
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
)
_OPTIONAL = ("attributes", "dimension_names", "storage_transformers")


@dataclass(frozen=True, kw_only=True)
class ArrayV3Metadata:
    shape: tuple[int, ...]
    data_type: str
    chunk_grid: Mapping[str, Any]
    chunk_key_encoding: Mapping[str, Any]
    fill_value: Any
    codecs: tuple[Any, ...]
    attributes: Mapping[str, Any] | None = None
    dimension_names: tuple | None = None
    storage_transformers: tuple | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown keys (must_understand: false)
    # derived
    chunk_shape: tuple[int, ...] = field(repr=False, compare=False, default=())
    separator: str = field(repr=False, compare=False, default="/")
    key_encoding: str = field(repr=False, compare=False, default="default")
    numpy_dtype: np.dtype = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    pipeline: CodecPipeline = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    fill: np.ndarray = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    zarr_format = 3

    @property
    def sharding(self) -> ShardingCodec | None:
        a2b = self.pipeline.array_to_bytes
        return a2b if isinstance(a2b, ShardingCodec) else None

    def chunk_key(self, index: tuple[int, ...]) -> str:
        if self.key_encoding == "v2":
            return self.separator.join(str(i) for i in index) if index else "0"
        return self.separator.join(["c", *(str(i) for i in index)])

    @classmethod
    def from_bytes(cls, data: bytes, *, file: object = None) -> ArrayV3Metadata:
        return cls.from_dict(load_json(data, file=file), file=file)

    @classmethod
    def from_dict(cls, d: object, *, file: object = None) -> ArrayV3Metadata:
        if not isinstance(d, dict):
            raise fail("zarr.json must be a JSON object", "ZARR-010", file=file, pointer="")
        for key in _REQUIRED:
            if key not in d:
                raise fail(
                    f"missing required field {key!r}", "ZARR-010", file=file, pointer=f"/{key}"
                )
        extra = {k: v for k, v in d.items() if k not in _REQUIRED and k not in _OPTIONAL}
        for k, v in extra.items():
            if not (isinstance(v, dict) and v.get("must_understand") is False):
                raise fail(
                    f"unknown field {k!r} without must_understand: false",
                    "ZARR-010",
                    file=file,
                    pointer=f"/{k}",
                )
        if d["zarr_format"] != 3:  # refuses true (== 1); 3.0 is the JSON number 3
            raise fail(
                "zarr_format must be 3",
                "ZARR-010",
                file=file,
                pointer="/zarr_format",
                got=d["zarr_format"],
            )
        if d["node_type"] != "array":
            raise fail(
                "node_type must be 'array'",
                "ZARR-010",
                file=file,
                pointer="/node_type",
                got=d["node_type"],
            )
        shape = dims(d["shape"], file=file, pointer="/shape", rule="ZARR-005")
        dt = numpy_dtype(d["data_type"], file=file, pointer="/data_type")
        grid = d["chunk_grid"]
        if not (
            isinstance(grid, dict)
            and grid.get("name") == "regular"
            and isinstance(grid.get("configuration"), dict)
        ):
            raise fail(
                "chunk_grid must be the regular grid",
                "ZARR-011",
                file=file,
                pointer="/chunk_grid",
                got=grid,
            )
        chunk_shape = dims(
            grid["configuration"].get("chunk_shape"),
            file=file,
            pointer="/chunk_grid/configuration/chunk_shape",
            rule="ZARR-011",
            minimum=1,
        )
        if len(chunk_shape) != len(shape) or set(grid["configuration"]) != {"chunk_shape"}:
            raise fail(
                "chunk_shape must have the rank of shape",
                "ZARR-011",
                file=file,
                pointer="/chunk_grid/configuration",
                expected=len(shape),
                got=len(chunk_shape),
            )
        enc = d["chunk_key_encoding"]
        if not (isinstance(enc, dict) and enc.get("name") in ("default", "v2")):
            raise fail(
                "chunk_key_encoding must be 'default' or 'v2'",
                "ZARR-012",
                file=file,
                pointer="/chunk_key_encoding",
                got=enc,
            )
        conf = enc.get("configuration", {})
        default_sep = "/" if enc["name"] == "default" else "."
        sep = conf.get("separator", default_sep) if isinstance(conf, dict) else None
        if sep not in ("/", ".") or (isinstance(conf, dict) and set(conf) - {"separator"}):
            raise fail(
                "chunk_key_encoding separator must be '/' or '.'",
                "ZARR-012",
                file=file,
                pointer="/chunk_key_encoding/configuration",
                got=conf,
            )
        transformers = d.get("storage_transformers")
        if transformers not in (None, []):
            raise fail(
                "storage_transformers must be empty",
                "ZARR-010",
                file=file,
                pointer="/storage_transformers",
                got=transformers,
            )
        names = d.get("dimension_names")
        if names is not None and (not isinstance(names, list) or len(names) != len(shape)):
            raise fail(
                "dimension_names must list one name (or null) per dimension",
                "ZARR-010",
                file=file,
                pointer="/dimension_names",
                got=names,
            )
        attrs = d.get("attributes")
        if attrs is not None and not isinstance(attrs, dict):
            raise fail(
                "attributes must be an object",
                "ZARR-010",
                file=file,
                pointer="/attributes",
                got=attrs,
            )
        check_extent(
            shape, chunk_shape, dt, file=file, pointer="/chunk_grid/configuration/chunk_shape"
        )
        pipeline = parse_codecs(d["codecs"], rank=len(shape), dtype=dt, file=file)
        sharding = pipeline.array_to_bytes
        if isinstance(sharding, ShardingCodec):
            if pipeline.array_to_array:
                raise fail(
                    "array->array codecs before sharding_indexed are not in the spec's subset",
                    "ZARR-014",
                    file=file,
                    pointer="/codecs",
                )
            if any(s % c for s, c in zip(chunk_shape, sharding.chunk_shape, strict=False)):
                raise fail(
                    "the shard shape must be a multiple of the inner chunk shape",
                    "ZARR-014",
                    file=file,
                    pointer="/codecs",
                    expected=f"divisors of {list(chunk_shape)}",
                    got=list(sharding.chunk_shape),
                )
            check_extent(shape, sharding.chunk_shape, dt, file=file, pointer="/codecs")
        fill = fill_array(d["fill_value"], dt, file=file, pointer="/fill_value")
        return cls(
            shape=shape,
            data_type=d["data_type"],
            chunk_grid=grid,
            chunk_key_encoding=enc,
            fill_value=d["fill_value"],
            codecs=tuple(d["codecs"]),
            attributes=attrs,
            dimension_names=None if names is None else tuple(names),
            storage_transformers=None if transformers is None else tuple(transformers),
            extra=extra,
            chunk_shape=chunk_shape,
            separator=sep,
            key_encoding=enc["name"],
            numpy_dtype=dt,
            pipeline=pipeline,
            fill=fill,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.attributes is not None:
            out["attributes"] = self.attributes
        out["chunk_grid"] = self.chunk_grid
        out["chunk_key_encoding"] = self.chunk_key_encoding
        out["codecs"] = list(self.codecs)
        out["data_type"] = self.data_type
        if self.dimension_names is not None:
            out["dimension_names"] = list(self.dimension_names)
        out["fill_value"] = self.fill_value
        out["node_type"] = "array"
        out["shape"] = list(self.shape)
        if self.storage_transformers is not None:
            out["storage_transformers"] = list(self.storage_transformers)
        out["zarr_format"] = 3
        out.update(self.extra)
        return out
