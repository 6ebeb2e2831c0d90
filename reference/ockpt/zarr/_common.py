"""Helpers shared by the zarr modules: strict JSON, typed fields, fill values, limits."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..documents._json import parse_json
from ..errors import DocumentError, ZarrFormatError
from ..limits import current as limits_in_force


def intermediate_bound(final_size: int) -> int:
    """The most a codec of a chunk's chain other than the last one undone may decode to (its
    output is the encoded form of the chunk's `final_size` bytes: no codec expands data that
    much): twice the chunk plus 1 MiB, within the limits' `max_chunk_bytes` (ZARR-003, limits
    §2)."""
    return min(2 * final_size + (1 << 20), limits_in_force().max_chunk_bytes)


def fail(message: str, rule: str, *, file: object = None, pointer: str | None = None, **kw):
    return ZarrFormatError(message, rule=rule, file=file, pointer=pointer, **kw)


def load_json(data: bytes, *, file: object) -> Any:
    try:
        return parse_json(
            data, file=str(file), max_bytes=limits_in_force().max_array_metadata_bytes
        )
    except DocumentError as e:
        raise ZarrFormatError(e.message, rule=e.rule, file=e.file, pointer=e.pointer) from None


def dims(value: object, *, file: object, pointer: str, rule: str, minimum: int = 0) -> tuple:
    """A list of non-negative (or >= minimum) integers of bounded length."""
    max_rank = limits_in_force().max_zarr_ndim
    if not isinstance(value, list) or len(value) > max_rank:
        raise fail(
            f"must be a list of at most {max_rank} integers",
            rule,
            file=file,
            pointer=pointer,
            got=value,
        )
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v >= 1 << 62:
            raise fail(
                f"must be an integer >= {minimum}",
                rule,
                file=file,
                pointer=f"{pointer}/{i}",
                got=v,
            )
    return tuple(value)


def numpy_dtype(text: object, *, file: object, pointer: str) -> np.dtype:
    return _dtypes.from_zarr(text, file=None if file is None else str(file), pointer=pointer)


def check_extent(
    shape: tuple[int, ...], chunk_shape: tuple[int, ...], dtype: np.dtype, *, file, pointer
) -> None:
    """Refuse (ZARR-005) a declared array whose chunk, whole size or chunk count is over the
    limits (spec/limits.md), before anything is allocated or iterated for it: a chunk of at
    most `max_chunk_bytes`, an array of at most `max_array_bytes` (numpy represents it), a
    grid of at most `max_chunks` chunks."""
    limits = limits_in_force()
    for what, value, limit in (
        ("chunk", math.prod(chunk_shape) * dtype.itemsize, limits.max_chunk_bytes),
        ("array", math.prod(shape) * dtype.itemsize, limits.max_array_bytes),
    ):
        if value > limit:
            raise fail(
                f"{what} too large for this reader",
                "ZARR-005",
                file=file,
                pointer=pointer,
                expected=f"<= {limit} bytes",
                got=value,
            )
    chunks = math.prod(-(-n // c) for n, c in zip(shape, chunk_shape, strict=True))
    if chunks > limits.max_chunks:
        raise fail(
            "the chunk grid holds more chunks than the limit",
            "ZARR-005",
            file=file,
            pointer=pointer,
            expected=f"<= {limits.max_chunks}",
            got=chunks,
        )


_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _scalar(value: object, dtype: np.dtype, *, file, pointer: str) -> Any:
    kind = dtype.kind
    name = _dtypes.dtype_name(dtype)
    if name == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif isinstance(value, str) and value.startswith("0x"):
        # v3: the raw bit pattern of the element, as hex
        try:
            bits = int(value, 16)
        except ValueError:
            bits = -1
        if 0 <= bits < 1 << (8 * dtype.itemsize):
            raw = bits.to_bytes(dtype.itemsize, "little")
            return np.frombuffer(raw, dtype=dtype.newbyteorder("<"))[0]
    elif name.startswith(("int", "uint")) or kind in "iu":
        if isinstance(value, int) and not isinstance(value, bool):
            lo, hi = _int_range(dtype)
            if lo <= value <= hi:
                return value
    elif isinstance(value, str) and value in _SPECIAL:
        return _SPECIAL[value]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise fail(
        f"fill_value does not fit the element type {name}",
        "ZARR-007",
        file=file,
        pointer=pointer,
        got=value,
    )


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    import ml_dtypes

    info = np.iinfo(dtype) if dtype.kind in "iu" else ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def fill_array(value: object, dtype: np.dtype, *, file, pointer: str) -> np.ndarray:
    """The fill value as a 0-d array of `dtype`; JSON null means zero (as tensorstore reads)."""
    out = np.zeros((), dtype=dtype)
    if value is None:
        return out
    if dtype.kind == "c":
        if not isinstance(value, list) or len(value) != 2:
            raise fail(
                "complex fill_value must be [real, imag]",
                "ZARR-007",
                file=file,
                pointer=pointer,
                got=value,
            )
        part = np.dtype(np.float32 if dtype.itemsize == 8 else np.float64)
        re_ = _scalar(value[0], part, file=file, pointer=pointer + "/0")
        im_ = _scalar(value[1], part, file=file, pointer=pointer + "/1")
        out[()] = complex(float(re_), float(im_))
        return out
    v = _scalar(value, dtype, file=file, pointer=pointer)
    if (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and v == 0
        and not math.copysign(1, v) < 0
    ):
        # zero is the all-zero bit pattern (also for float8_e8m0fnu, which has no zero and
        # where tensorstore reads it so; a cast would give NaN)
        return out
    with np.errstate(all="ignore"):
        out[()] = v
    return out
