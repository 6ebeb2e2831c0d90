"""Tests written to kill the mutants of dtypes.py that survived the mutation run at 88f069a
(tests/mutation/RESULTS.md names each mutant and the test here that now kills it). They pin what
the module promises: the field a refused element type is reported at, the message for a dtype
outside the table, the zarr v2 spelling of each type, that a string given to `cast_kind` is a
name of the table, that an ml_dtypes release lacking a type leaves it out of the table, and that
the value check of a cast answers whatever numpy error state the caller set, signalling NaNs
included."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ockpt import dtypes
from ockpt.errors import ZarrFormatError

EXPECTED = "a numeric zarr dtype (e.g. '<f4', 'bfloat16', 'int4')"


def test_a_refused_element_type_is_reported_at_the_dtype_field():
    """ZARR-001 points at ``/dtype`` (the zarr v2 field) unless the caller names another field.
    Kills from_zarr 1, 2 (ids at 88f069a: the default pointer mutated)."""
    with pytest.raises(ZarrFormatError) as info:
        dtypes.from_zarr("|O")
    e = info.value
    assert (e.rule, e.file, e.pointer, e.got) == ("ZARR-001", None, "/dtype", "|O")
    assert str(e) == (
        f"at /dtype: unsupported element type (expected {EXPECTED!r}, got '|O') [ZARR-001]"
    )
    with pytest.raises(ZarrFormatError) as info:
        dtypes.from_zarr("string", file="a/zarr.json", pointer="/data_type")
    assert str(info.value) == (
        "a/zarr.json at /data_type: unsupported element type "
        f"(expected {EXPECTED!r}, got 'string') [ZARR-001]"
    )


@pytest.mark.parametrize(
    ("dtype", "text"),
    [("<U4", "<U4"), ("|S3", "|S3"), ("<m8[s]", "timedelta64[s]"), ("O", "object")],
)
def test_dtype_name_refuses_a_type_outside_the_table(dtype, text):
    """A dtype no checkpoint can hold is refused with its numpy spelling; a big-endian dtype
    of the table is named without its byte order. Kills dtype_name 8 (ids at 88f069a: the
    message dropped)."""
    with pytest.raises(ValueError) as info:
        dtypes.dtype_name(np.dtype(dtype))
    assert str(info.value) == f"dtype {text} is not one a checkpoint can hold"
    assert dtypes.dtype_name(np.dtype(">i2")) == "int16"


#: The zarr v2 ``dtype`` string tensorstore writes for each type of the table.
V2_SPELLING = {
    "bool": "|b1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<c8",
    "complex128": "<c16",
    **{name: name for name in dtypes.EXTENSION_NAMES},
}


def test_to_zarr_v2_spells_numpy_types_as_typestrings():
    """numpy's types get their little-endian (or byte-order-free) typestring, the ml_dtypes types
    their name; a big-endian dtype is spelled as the little-endian one, since tensorstore writes
    that. Kills to_zarr_v2 3 (ids at 88f069a: the name for every type)."""
    assert set(V2_SPELLING) == set(dtypes.SUPPORTED)
    for name, spelling in V2_SPELLING.items():
        assert dtypes.to_zarr_v2(dtypes.SUPPORTED[name]) == spelling, name
        assert dtypes.from_zarr(spelling) == dtypes.SUPPORTED[name]
    assert dtypes.to_zarr_v2(np.dtype(">f4")) == "<f4"
    assert dtypes.to_zarr_v3(np.dtype(">f4")) == "float32"


@pytest.mark.parametrize(
    ("src", "dst"), [("<f4", "float64"), ("float32", "<f8"), ("float", "float64")]
)
def test_cast_kind_reads_a_string_as_a_name_of_the_table(src, dst):
    """A string is a name of the dtype table; a zarr v2 typestring or another numpy spelling is
    none (`from_zarr` reads those), while the dtype they spell is answered. Kills cast_kind 2
    (`src`), 8 (`dst`) (ids at 88f069a: every string read by `np.dtype`)."""
    with pytest.raises(KeyError):
        dtypes.cast_kind(src, dst)
    assert dtypes.cast_kind(np.dtype(src), np.dtype(dst)) == "exact"


def test_an_ml_dtypes_without_a_type_leaves_it_out(monkeypatch):
    """`_ml` gives None for a name the installed ml_dtypes lacks (an older release without
    float8_e3m4), so the table leaves that type out, and the dtype of a name it has. Kills _ml 6
    (AttributeError), 7 (float64 for the missing name), and 1-5, 8-10 in a forked run (ids at
    88f069a)."""
    monkeypatch.delattr(ml_dtypes, "float8_e3m4")
    assert dtypes._ml("float8_e3m4") is None
    assert dtypes._ml("bfloat16") == np.dtype(ml_dtypes.bfloat16)
    assert dtypes._ml("int4") == np.dtype(ml_dtypes.int4)


#: Signalling NaNs (quiet bit clear): casting one to a wider float sets numpy's "invalid" flag.
SIGNALLING_NAN = {
    "float16": np.array([0x7C01], np.uint16).view(np.float16),
    "float32": np.array([0x7F800001], np.uint32).view(np.float32),
    "bfloat16": np.array([0x7F81], np.uint16).view(ml_dtypes.bfloat16),
}


@pytest.mark.parametrize(
    ("src", "dst", "lossy"),
    [
        ("float32", "float64", False),  # NaN stays NaN
        ("float32", "float32", False),
        ("float32", "complex64", False),
        ("float32", "int8", True),  # an int has no NaN
        ("float16", "float32", False),
        ("bfloat16", "float16", False),
    ],
)
def test_lossy_values_of_a_signalling_nan_under_a_raising_error_state(src, dst, lossy):
    """`lossy_values` widens the values to compare them; a signalling NaN sets numpy's invalid
    flag there, which must not raise where the caller made numpy raise on floating-point errors.
    Kills lossy_values 18 (ids at 88f069a: `np.errstate(all=None)`, the caller's state)."""
    with np.errstate(all="raise"):
        mask = dtypes.lossy_values(SIGNALLING_NAN[src], dtypes.SUPPORTED[dst])
    assert mask.tolist() == [lossy]
