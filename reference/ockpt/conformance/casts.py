"""The saved x target dtype table (spec/loading.md §4.2) as test data.

`saved_values(name)` gives the values a saved array of dtype `name` holds: every bit pattern of
a type of up to 16 bits (every value of a sub-byte type), and the specials plus a seeded
sample for wider types. `expected_kind(S, D)` is the spec's verdict (`ockpt.dtypes.cast_kind`);
`check_exact` and `check_lossy` judge what a reader returned.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import SUPPORTED, astype, cast_kind

__all__ = ["saved_values", "expected_kind", "check_exact", "check_lossy", "TARGETS"]

#: every element type of the table, in the spec's order.
TARGETS = list(SUPPORTED)


def saved_values(name: str) -> np.ndarray:
    dt = SUPPORTED[name]
    bits = dt.itemsize * 8
    if name == "bool":
        return np.array([False, True])
    if dt.kind in "iu" and bits <= 16 and dt.isbuiltin != 2:
        info = np.iinfo(dt)
        return np.arange(info.min, info.max + 1, dtype=np.int64).astype(dt)
    if name in ("int2", "int4", "uint2", "uint4"):
        import ml_dtypes

        info = ml_dtypes.iinfo(dt)
        return np.arange(info.min, info.max + 1, dtype=np.int64).astype(dt)
    if name in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"):
        import ml_dtypes

        info = ml_dtypes.finfo(dt)
        width = {"float4_e2m1fn": 4, "float6_e2m3fn": 6, "float6_e3m2fn": 6}[name]
        grid = np.linspace(-float(info.max), float(info.max), 4 * 2**width)
        return np.unique(grid.astype(dt).view(np.uint8)).view(dt)
    if bits <= 16 and dt.kind != "c":
        return np.arange(2**bits, dtype=np.uint64).astype(f"uint{bits}").view(dt)
    rng = np.random.default_rng(7)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        edge = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
        if info.min < 0:
            edge += [-1, -2]
        sample = rng.integers(info.min, info.max, size=256, dtype=dt, endpoint=True)
        return np.concatenate([np.array(edge, dtype=dt), sample])
    real = np.dtype(f"float{bits // 2}") if dt.kind == "c" else dt
    fi = np.finfo(real)
    specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        0.1,
        fi.max,
        -fi.max,
        fi.tiny,
        fi.smallest_subnormal,
        -fi.smallest_subnormal,
        np.inf,
        -np.inf,
        np.nan,
        2.0**24 + 1,
        65504.0,
        1e5,
        3.0e38,
    ]
    with np.errstate(all="ignore"):
        base = np.concatenate(
            [np.array(specials, dtype=np.float64).astype(real), rng.standard_normal(128)]
        ).astype(real)
        width = real.itemsize * 8
        raw = rng.integers(0, 2**width - 1, size=128, dtype=f"uint{width}", endpoint=True)
        raw = raw.view(real)
        values = np.concatenate([base, raw])
    if dt.kind == "c":
        with np.errstate(all="ignore"):
            return (values + 1j * values[::-1]).astype(dt)
    return values


_SUB_BYTE = {"int2", "int4", "uint2", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"}


def expected_kind(src: str, dst: str) -> str:
    return cast_kind(src, dst)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: equal bits, or both NaN (any payload)."""
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        return _same(a.real.copy(), b.real.copy()) & _same(a.imag.copy(), b.imag.copy())
    if a.dtype != b.dtype:
        return np.zeros(a.shape, dtype=bool)
    if a.dtype.name in _SUB_BYTE:  # only the low bits of each byte are the value
        wide = np.float32 if "float" in a.dtype.name else np.int8
        return _same(a.astype(wide), b.astype(wide))
    raw = a.view(f"uint{a.dtype.itemsize * 8}") if a.dtype.itemsize in (1, 2, 4, 8) else a
    other = b.view(f"uint{b.dtype.itemsize * 8}") if b.dtype.itemsize in (1, 2, 4, 8) else b
    with np.errstate(all="ignore"):
        nan = np.zeros(a.shape, dtype=bool)
        if a.dtype.kind not in "biu":
            try:
                fa, fb = a.astype(np.float64), b.astype(np.float64)
                nan = np.isnan(fa) & np.isnan(fb)
            except (TypeError, ValueError):
                pass
    return (raw == other) | nan


def check_exact(src: np.ndarray, got: object, dst: str) -> str | None:
    """None when `got` is `src` in `dst` with every value unchanged (LOAD-022)."""
    got = np.asarray(got)
    dt = SUPPORTED[dst]
    if got.dtype != dt or got.shape != src.shape:
        return f"returned {got.dtype}{list(got.shape)}, want {dst}{list(src.shape)}"
    back = astype(got, src.dtype)
    bad = ~_same(back, src)
    if src.dtype.kind == "f" or src.dtype.isbuiltin == 2:
        pass
    if bad.any():
        i = int(np.argmax(bad))
        return f"value {src.ravel()[i]!r} came back as {got.ravel()[i]!r}"
    return None


def check_lossy(src: np.ndarray, got: object, dst: str) -> str | None:
    """None when `got` is numpy's ``astype`` of `src` (out-of-range and NaN conversions to an
    integer type are unspecified and not compared)."""
    got = np.asarray(got)
    dt = SUPPORTED[dst]
    if got.dtype != dt or got.shape != src.shape:
        return f"returned {got.dtype}{list(got.shape)}, want {dst}{list(src.shape)}"
    want = astype(src, dt)
    ok = _same(got, want)
    if dt.kind in "iub" or dt.name in ("int2", "int4", "uint2", "uint4"):
        if src.dtype.kind not in "iub" and src.dtype.name not in ("int2", "int4", "uint2", "uint4"):
            with np.errstate(all="ignore"):
                f = astype(src, np.dtype(np.complex128 if src.dtype.kind == "c" else np.float64))
                f = f.real if np.iscomplexobj(f) else f
                lo, hi = (0, 1) if dt.kind == "b" else _int_range(dt)
                unspecified = ~np.isfinite(f) | (f < lo) | (f > hi)
            ok |= unspecified
    if not ok.all():
        i = int(np.argmax(~ok))
        return f"value {src.ravel()[i]!r} came back as {got.ravel()[i]!r}, want {want.ravel()[i]!r}"
    return None


def _int_range(dt: np.dtype) -> tuple[int, int]:
    import ml_dtypes

    info = ml_dtypes.iinfo(dt) if dt.isbuiltin == 2 else np.iinfo(dt)
    return int(info.min), int(info.max)
