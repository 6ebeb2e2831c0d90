"""The dtype table and the cast table of spec/loading.md (LOAD-020..022; ZARR-001)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ockpt import dtypes
from ockpt.errors import ZarrFormatError

NAMES = list(dtypes.SUPPORTED)


@pytest.mark.parametrize(
    "text,name",
    [
        ("|b1", "bool"),
        ("|i1", "int8"),
        ("<i2", "int16"),
        ("<i4", "int32"),
        ("<i8", "int64"),
        ("|u1", "uint8"),
        ("<u2", "uint16"),
        ("<u4", "uint32"),
        ("<u8", "uint64"),
        ("<f2", "float16"),
        ("<f4", "float32"),
        ("<f8", "float64"),
        ("<c8", "complex64"),
        ("<c16", "complex128"),
        ("bfloat16", "bfloat16"),
        ("float8_e4m3fn", "float8_e4m3fn"),
        ("float8_e5m2", "float8_e5m2"),
        ("int4", "int4"),
        ("uint4", "uint4"),
        ("float32", "float32"),  # zarr v3 data_type names
        ("bool", "bool"),
        ("complex128", "complex128"),
    ],
)
def test_from_zarr(text, name):
    assert dtypes.from_zarr(text) == dtypes.SUPPORTED[name]
    assert dtypes.dtype_name(dtypes.from_zarr(text)) == name


def test_big_endian_v2():
    assert dtypes.from_zarr(">f4") == np.dtype(">f4")
    assert dtypes.dtype_name(np.dtype(">f4")) == "float32"


@pytest.mark.parametrize("text", ["|O", "<U4", "|S3", "float128", ">b1", [["a", "<f4"]], 4, ""])
def test_from_zarr_refuses(text):
    with pytest.raises(ZarrFormatError) as info:
        dtypes.from_zarr(text, file="x/.zarray")
    assert info.value.rule == "ZARR-001" and "x/.zarray" in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_zarr_names_round_trip(name):
    d = dtypes.SUPPORTED[name]
    assert dtypes.from_zarr(dtypes.to_zarr_v2(d)) == d
    assert dtypes.from_zarr(dtypes.to_zarr_v3(d)) == d


def _every_value(d: np.dtype) -> np.ndarray | None:
    """Every value of a type of at most 16 bits (None for wider types)."""
    name = dtypes.dtype_name(d)
    if name == "bool":
        return np.array([False, True])
    if d.itemsize > 2:
        return None
    if name.startswith(("int", "uint")):
        info = ml_dtypes.iinfo(d) if d.isbuiltin == 2 else np.iinfo(d)
        return np.arange(int(info.min), int(info.max) + 1).astype(d)
    bits = np.arange(2 ** (8 * d.itemsize), dtype=np.uint16 if d.itemsize == 2 else np.uint8)
    values = bits.view(d)
    if name.startswith(("float4", "float6")):  # sub-byte floats: the bytes are not all valid
        values = np.concatenate([np.unique(values.astype(np.float64)), [-0.0]]).astype(d)
    return values


SMALL = [n for n in NAMES if _every_value(dtypes.SUPPORTED[n]) is not None]


@pytest.mark.parametrize("src", SMALL)
def test_cast_table_agrees_with_every_value(src):
    """For every type of up to 16 bits, the table says exact exactly when no value changes."""
    values = _every_value(dtypes.SUPPORTED[src])
    for dst in NAMES:
        changed = dtypes.lossy_values(values, dtypes.SUPPORTED[dst])
        brute = "lossy" if changed.any() else "exact"
        assert dtypes.cast_kind(src, dst) == brute, (src, dst)


@pytest.mark.parametrize(
    "src,dst,kind",
    [
        ("int32", "float64", "exact"),
        ("int32", "float32", "lossy"),
        ("int64", "float64", "lossy"),
        ("int64", "float32", "lossy"),
        ("uint32", "int64", "exact"),
        ("uint64", "int64", "lossy"),
        ("int64", "uint64", "lossy"),
        ("int32", "complex128", "exact"),
        ("int32", "complex64", "lossy"),
        ("float32", "float64", "exact"),
        ("float64", "float32", "lossy"),
        ("float32", "bfloat16", "lossy"),
        ("float32", "complex64", "exact"),
        ("complex64", "complex128", "exact"),
        ("complex128", "complex64", "lossy"),
        ("complex64", "float32", "lossy"),
        ("float32", "int64", "lossy"),
        ("float64", "bool", "lossy"),
        ("bool", "float32", "exact"),
        ("bool", "float8_e8m0fnu", "lossy"),  # no zero
        ("float16", "float32", "exact"),
        ("bfloat16", "float32", "exact"),
        ("bfloat16", "float16", "lossy"),
        ("float8_e4m3fn", "bfloat16", "exact"),
        ("float8_e5m2", "float8_e4m3fn", "lossy"),
        ("float8_e4m3fn", "float8_e4m3fnuz", "lossy"),  # -0.0
        ("int4", "int8", "exact"),
        ("int8", "int4", "lossy"),
        ("uint4", "float8_e4m3fn", "exact"),
    ],
)
def test_cast_table(src, dst, kind):
    assert dtypes.cast_kind(src, dst) == kind
    assert dtypes.cast_kind(dtypes.SUPPORTED[src], dtypes.SUPPORTED[dst]) == kind


def test_same_type_is_exact_and_table_is_transitive():
    for name in NAMES:
        assert dtypes.cast_kind(name, name) == "exact"
    for a, b, c in itertools.product(NAMES, repeat=3):
        if dtypes.cast_kind(a, b) == "exact" and dtypes.cast_kind(b, c) == "exact":
            assert dtypes.cast_kind(a, c) == "exact", (a, b, c)


WIDE = ["int32", "int64", "uint32", "uint64", "float32", "float64", "complex64", "complex128"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(WIDE), st.sampled_from(NAMES), st.data())
def test_exact_casts_keep_random_values(src, dst, data):
    """LOAD-022: a cast the table calls exact changes no value."""
    if dtypes.cast_kind(src, dst) != "exact":
        return
    values = data.draw(hnp.arrays(dtypes.SUPPORTED[src], st.integers(1, 16)))
    assert not dtypes.lossy_values(values, dtypes.SUPPORTED[dst]).any()


def test_lossy_values_details():
    f = np.array([np.nan, -0.0, 1.5, 16777217.0], np.float64)
    assert dtypes.lossy_values(f, np.float32).tolist() == [False, False, False, True]
    assert dtypes.lossy_values(f[:3], ml_dtypes.float8_e4m3fnuz).tolist() == [False, True, False]
    i = np.array([-1, 127, 300, 2**24 + 1], np.int64)
    assert dtypes.lossy_values(i, np.uint8).tolist() == [True, False, True, True]
    assert dtypes.lossy_values(i, np.float32).tolist() == [False, False, False, True]
    assert dtypes.lossy_values(np.array([0.0, 2.5]), np.int32).tolist() == [False, True]
    assert dtypes.lossy_values(np.array([1 + 1j, 2 + 0j]), np.float64).tolist() == [True, False]
    assert dtypes.lossy_values(np.array([True, False]), np.int8).tolist() == [False, False]
