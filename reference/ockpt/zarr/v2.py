"""zarr v2 array metadata (``.zarray``) as tensorstore writes it for Orbax (spec/arrays.md).

Chunk keys are the chunk's grid indices joined by ``dimension_separator`` (``"0.1"``); the one
chunk of a 0-d array is ``"0"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._common import check_extent, dims, fail, fill_array, load_json, numpy_dtype
from .codecs import CodecPipeline, from_v2_compressor

__all__ = ["ArrayV2Metadata"]

_KNOWN = {
    "zarr_format",
    "shape",
    "chunks",
    "dtype",
    "compressor",
    "fill_value",
    "order",
    "filters",
    "dimension_separator",
}


@dataclass(frozen=True, kw_only=True)
class ArrayV2Metadata:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    compressor: Mapping[str, Any] | None
    fill_value: Any
    order: str = "C"
    filters: Any = None
    dimension_separator: str | None = None  # absent: "."
    extra: Mapping[str, Any] = field(default_factory=dict)
    # derived
    numpy_dtype: np.dtype = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    pipeline: CodecPipeline = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    fill: np.ndarray = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    zarr_format = 2

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.chunks

    @property
    def separator(self) -> str:
        return self.dimension_separator or "."

    def chunk_key(self, index: tuple[int, ...]) -> str:
        """``"i.j.k"`` (or with ``/``); ``"0"`` for a 0-d array."""
        if not index:
            return "0"
        return self.separator.join(str(i) for i in index)

    @classmethod
    def from_bytes(cls, data: bytes, *, file: object = None) -> ArrayV2Metadata:
        return cls.from_dict(load_json(data, file=file), file=file)

    @classmethod
    def from_dict(cls, d: object, *, file: object = None) -> ArrayV2Metadata:
        if not isinstance(d, dict):
            raise fail(".zarray must be a JSON object", "ZARR-002", file=file, pointer="")
        for key in ("zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value"):
            if key not in d:
                raise fail(
                    f"missing required field {key!r}", "ZARR-002", file=file, pointer=f"/{key}"
                )
        if d["zarr_format"] != 2:  # refuses true (== 1); 2.0 is the JSON number 2
            raise fail(
                "zarr_format must be 2",
                "ZARR-002",
                file=file,
                pointer="/zarr_format",
                got=d["zarr_format"],
            )
        shape = dims(d["shape"], file=file, pointer="/shape", rule="ZARR-005")
        chunks = dims(d["chunks"], file=file, pointer="/chunks", rule="ZARR-005", minimum=1)
        if len(chunks) != len(shape):
            raise fail(
                "chunks must have the rank of shape",
                "ZARR-005",
                file=file,
                pointer="/chunks",
                expected=len(shape),
                got=len(chunks),
            )
        dtype_text = d["dtype"]
        dt = numpy_dtype(dtype_text, file=file, pointer="/dtype")
        order = d.get("order", "C")
        if order not in ("C", "F"):
            raise fail(
                "order must be 'C' or 'F'", "ZARR-004", file=file, pointer="/order", got=order
            )
        filters = d.get("filters")
        if filters not in (None, []):
            raise fail(
                "filters must be null", "ZARR-004", file=file, pointer="/filters", got=filters
            )
        sep = d.get("dimension_separator")
        if sep not in (None, ".", "/"):
            raise fail(
                "dimension_separator must be '.' or '/'",
                "ZARR-006",
                file=file,
                pointer="/dimension_separator",
                got=sep,
            )
        check_extent(shape, chunks, dt, file=file, pointer="/chunks")
        pipeline = from_v2_compressor(d["compressor"], dt, order=order, rank=len(shape), file=file)
        fill = fill_array(d["fill_value"], dt, file=file, pointer="/fill_value")
        return cls(
            shape=shape,
            chunks=chunks,
            dtype=dtype_text,
            compressor=d["compressor"],
            fill_value=d["fill_value"],
            order=order,
            filters=filters,
            dimension_separator=sep,
            extra={k: v for k, v in d.items() if k not in _KNOWN},
            numpy_dtype=dt,
            pipeline=pipeline,
            fill=fill,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "chunks": list(self.chunks),
            "compressor": self.compressor,
        }
        if self.dimension_separator is not None:
            out["dimension_separator"] = self.dimension_separator
        out.update(
            {
                "dtype": self.dtype,
                "fill_value": self.fill_value,
                "filters": self.filters,
                "order": self.order,
                "shape": list(self.shape),
                "zarr_format": 2,
            }
        )
        out.update(self.extra)
        return out
