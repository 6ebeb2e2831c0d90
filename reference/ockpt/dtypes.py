"""The dtype table and the cast policy of loading.

Zarr metadata names an element type in one of two spellings: zarr v2 ``dtype`` strings
(``"<f4"``, ``"|b1"``, plus the extension names ``"bfloat16"``, ``"float8_e4m3fn"``, ``"int4"``
that tensorstore writes) and zarr v3 ``data_type`` names (``"float32"``, ``"bool"``,
``"bfloat16"``). `from_zarr` maps both to numpy dtypes (ml_dtypes for the extension types);
`to_zarr_v2` / `to_zarr_v3` map back.

`FLOAT_LAYOUTS` and `SUB_BYTE_BITS` are the bit layouts of spec/arrays.md §7.1 and §7.2 as data,
and `decode_bits` turns raw bit patterns into values from them alone (numpy, no ml_dtypes): the
tests check both against the spec's table and against ml_dtypes, pattern by pattern.

`cast_kind(src, dst)` is the spec's cast table (spec/loading.md §4.2, LOAD-020..LOAD-022): a cast is
``"exact"`` when every value of `src` has the same value in `dst` (NaN stays NaN, -0.0 stays
-0.0), else ``"lossy"``. It depends on the two dtypes only. `lossy_values` is the value-dependent
check used when a caller opts into checked casts: it finds the elements a cast would change.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache
from typing import Literal

import ml_dtypes
import numpy as np

from .errors import ZarrFormatError

__all__ = [
    "CastKind",
    "from_zarr",
    "to_zarr_v2",
    "to_zarr_v3",
    "dtype_name",
    "cast_kind",
    "lossy_values",
    "astype",
    "SUPPORTED",
    "EXTENSION_NAMES",
    "NOT_WRITABLE",
    "TORCH_NAMES",
    "FloatLayout",
    "FLOAT_LAYOUTS",
    "SUB_BYTE_BITS",
    "decode_bits",
]

CastKind = Literal["exact", "lossy"]

#: ml_dtypes extension types, by the name zarr metadata (v2 and v3) gives them.
EXTENSION_NAMES = (
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "int2",
    "int4",
    "uint2",
    "uint4",
)
_NUMPY_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)


def _ml(name: str) -> np.dtype | None:
    t = getattr(ml_dtypes, name, None)
    return None if t is None else np.dtype(t)


#: name -> dtype for every element type a checkpoint may hold.
SUPPORTED: dict[str, np.dtype] = {
    **{n: np.dtype(n) for n in _NUMPY_NAMES},
    **{n: d for n in EXTENSION_NAMES if (d := _ml(n)) is not None},
}

#: Names in the table that tensorstore, the array engine of Orbax, can neither write nor read:
#: the reference writer refuses them before writing anything, as no Orbax release could
#: restore them (spec/arrays.md §7).
NOT_WRITABLE = frozenset({"float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "uint2", "uint4"})

#: Names in the table that PyTorch has a tensor dtype of the same name and width for
#: (`ockpt.torch`, the .pt converter); it lacks the sub-byte integers, float4, float6 and the
#: other float8 variants.
TORCH_NAMES = _NUMPY_NAMES + (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)

# ---------------------------------------------------------------------------------------------
# Bit layouts (spec/arrays.md §7.1, §7.2).

LayoutClass = Literal["ieee", "fn", "fnuz", "finite", "e8m0"]


@dataclass(frozen=True)
class FloatLayout:
    """A floating type's bits, most significant first: sign, exponent, mantissa.

    `kind` names its special patterns: ``ieee`` (exponent all ones: infinity with a zero
    mantissa, NaN otherwise), ``fn`` (no infinity; exponent and mantissa all ones: NaN),
    ``fnuz`` (no infinity, no negative zero; sign 1 with the rest zero: the only NaN),
    ``finite`` (none), ``e8m0`` (no sign, no mantissa: 2**(E - bias), all ones: NaN).
    """

    bits: int
    sign: int
    exponent: int
    mantissa: int
    bias: int
    kind: LayoutClass


#: name -> layout of every floating type of the dtype table (spec/arrays.md §7.1).
FLOAT_LAYOUTS: dict[str, FloatLayout] = {
    "float16": FloatLayout(16, 1, 5, 10, 15, "ieee"),
    "bfloat16": FloatLayout(16, 1, 8, 7, 127, "ieee"),
    "float32": FloatLayout(32, 1, 8, 23, 127, "ieee"),
    "float64": FloatLayout(64, 1, 11, 52, 1023, "ieee"),
    "float8_e5m2": FloatLayout(8, 1, 5, 2, 15, "ieee"),
    "float8_e4m3": FloatLayout(8, 1, 4, 3, 7, "ieee"),
    "float8_e3m4": FloatLayout(8, 1, 3, 4, 3, "ieee"),
    "float8_e4m3fn": FloatLayout(8, 1, 4, 3, 7, "fn"),
    "float8_e4m3fnuz": FloatLayout(8, 1, 4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": FloatLayout(8, 1, 5, 2, 16, "fnuz"),
    "float8_e4m3b11fnuz": FloatLayout(8, 1, 4, 3, 11, "fnuz"),
    "float8_e8m0fnu": FloatLayout(8, 0, 8, 0, 127, "e8m0"),
    "float4_e2m1fn": FloatLayout(4, 1, 2, 1, 1, "finite"),
    "float6_e2m3fn": FloatLayout(6, 1, 2, 3, 1, "finite"),
    "float6_e3m2fn": FloatLayout(6, 1, 3, 2, 3, "finite"),
}

#: Types narrower than a byte -> their width in bits: one element per byte, in the low bits,
#: the bits above zero (no sign extension); int2/int4 in two's complement (spec/arrays.md §7.2).
SUB_BYTE_BITS: dict[str, int] = {
    "int2": 2,
    "int4": 4,
    "uint2": 2,
    "uint4": 4,
    "float4_e2m1fn": 4,
    "float6_e2m3fn": 6,
    "float6_e3m2fn": 6,
}


def decode_bits(name: str, patterns: object) -> np.ndarray:
    """The values of raw bit patterns of type `name`, from the layout tables alone.

    Floating types give float64 (exact for every type of the table: NaN where the pattern is
    a NaN, the sign of zero kept); int2/int4/uint2/uint4 give int64. A pattern with bits set
    above the type's width is no value of the type (ValueError).
    """
    p = np.asarray(patterns)
    if p.dtype.kind not in "ui":
        raise TypeError(f"bit patterns must be integers, not {p.dtype}")
    p = p.astype(np.uint64)
    if name in ("int2", "int4", "uint2", "uint4"):
        bits = SUB_BYTE_BITS[name]
        if np.any(p >> np.uint64(bits)):
            raise ValueError(f"a {name} pattern has bits set above its {bits} bits")
        v = p.astype(np.int64)
        return v - (v >> (bits - 1)) * (1 << bits) if name.startswith("int") else v
    lay = FLOAT_LAYOUTS[name]
    if lay.bits < 64 and np.any(p >> np.uint64(lay.bits)):
        raise ValueError(f"a {name} pattern has bits set above its {lay.bits} bits")
    m, e = lay.mantissa, lay.exponent
    man = (p & np.uint64((1 << m) - 1)).astype(np.float64)
    exp = ((p >> np.uint64(m)) & np.uint64((1 << e) - 1)).astype(np.int64)
    neg = np.zeros(p.shape, bool)
    if lay.sign:
        neg = ((p >> np.uint64(m + e)) & np.uint64(1)).astype(bool)
    e_max, m_max = (1 << e) - 1, (1 << m) - 1
    with np.errstate(over="ignore"):  # exponent all ones overflows; replaced below
        if lay.kind == "e8m0":
            out = np.ldexp(1.0, exp - lay.bias)
        else:
            significand = man + np.where(exp > 0, float(1 << m), 0.0)  # exact: <= 53 bits
            out = np.ldexp(significand, np.maximum(exp, 1) - lay.bias - m)
    out = np.where(neg, -out, out)
    nan = np.zeros(p.shape, bool)
    if lay.kind == "ieee":
        top = exp == e_max
        out = np.where(top & (man == 0), np.where(neg, -np.inf, np.inf), out)
        nan = top & (man != 0)
    elif lay.kind == "fn":
        nan = (exp == e_max) & (man == m_max)
    elif lay.kind == "fnuz":
        nan = neg & (exp == 0) & (man == 0)
    elif lay.kind == "e8m0":
        nan = exp == e_max
    return np.where(nan, np.nan, out)


#: zarr v2 typestr (little-endian or byte-order-free) -> name.
_V2_TYPESTR = {
    "|b1": "bool",
    "|i1": "int8",
    "<i2": "int16",
    "<i4": "int32",
    "<i8": "int64",
    "|u1": "uint8",
    "<u2": "uint16",
    "<u4": "uint32",
    "<u8": "uint64",
    "<f2": "float16",
    "<f4": "float32",
    "<f8": "float64",
    "<c8": "complex64",
    "<c16": "complex128",
}
_V2_BIG = {"|b1", "|i1", "|u1"}
_NAME_TO_V2 = {v: k for k, v in _V2_TYPESTR.items()}


def from_zarr(text: object, *, file: str | None = None, pointer: str = "/dtype") -> np.dtype:
    """The numpy dtype for a zarr v2 ``dtype`` or zarr v3 ``data_type`` (ZARR-001).

    Big-endian v2 strings (``">f4"``) are accepted and give the big-endian numpy dtype.
    Structured, string and object types are refused.
    """
    if isinstance(text, str):
        if text in _V2_TYPESTR:
            return SUPPORTED[_V2_TYPESTR[text]]
        if text.startswith(">") and "<" + text[1:] in _V2_TYPESTR and text not in _V2_BIG:
            return SUPPORTED[_V2_TYPESTR["<" + text[1:]]].newbyteorder(">")
        if text in SUPPORTED:
            return SUPPORTED[text]
    raise ZarrFormatError(
        "unsupported element type",
        rule="ZARR-001",
        file=file,
        pointer=pointer,
        expected="a numeric zarr dtype (e.g. '<f4', 'bfloat16', 'int4')",
        got=text,
    )


#: native-order dtype -> its name in the table (the first name, where two are equal).
_NAMES: dict[np.dtype, str] = {}
for _name, _dtype in SUPPORTED.items():
    _NAMES.setdefault(_dtype, _name)


def dtype_name(dtype: np.dtype) -> str:
    """The spec's name of a dtype (numpy / ml_dtypes name, byte order dropped)."""
    dtype = np.dtype(dtype)
    name = _NAMES.get(dtype.newbyteorder("="))
    if name is None:
        raise ValueError(f"dtype {dtype} is not one a checkpoint can hold")
    return name


def to_zarr_v2(dtype: np.dtype) -> str:
    """The zarr v2 ``dtype`` string tensorstore writes for this dtype."""
    name = dtype_name(dtype)
    return _NAME_TO_V2.get(name, name)


def to_zarr_v3(dtype: np.dtype) -> str:
    """The zarr v3 ``data_type`` name for this dtype."""
    return dtype_name(dtype)


# ---------------------------------------------------------------------------------------------
# The cast table.


@dataclass(frozen=True)
class _FloatTraits:
    """What a floating type can represent."""

    nmant: int  # explicit mantissa bits (precision nmant + 1)
    max: float  # largest finite value
    min_exp: int  # exponent of the smallest subnormal step: minexp - nmant
    inf: bool
    nan: bool
    neg_zero: bool
    negative: bool
    zero: bool


@cache
def _float_traits(dtype: np.dtype) -> _FloatTraits:
    info = ml_dtypes.finfo(dtype) if dtype.isbuiltin == 2 else np.finfo(dtype)
    with np.errstate(all="ignore"):
        probe = np.array([np.inf, np.nan, -0.0, -1.0, 0.0]).astype(dtype).astype(np.float64)
    return _FloatTraits(
        nmant=int(info.nmant),
        max=float(info.max),
        min_exp=int(info.minexp) - int(info.nmant),
        inf=bool(np.isinf(probe[0])),
        nan=bool(np.isnan(probe[1])),
        neg_zero=bool(probe[2] == 0 and np.signbit(probe[2])),
        negative=bool(probe[3] == -1.0),
        zero=bool(probe[4] == 0),
    )


def _category(dtype: np.dtype) -> str:
    name = dtype_name(dtype)
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint")):
        return "int"
    if name.startswith("complex"):
        return "complex"
    return "float"


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype) if dtype.isbuiltin == 2 else np.iinfo(dtype)
    return int(info.min), int(info.max)


def _component(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype_name(dtype) == "complex64" else np.dtype(np.float64)


def _float_to_float(src: np.dtype, dst: np.dtype) -> bool:
    s, d = _float_traits(src), _float_traits(dst)
    return (
        d.nmant >= s.nmant
        and d.max >= s.max
        and d.min_exp <= s.min_exp
        and (d.inf or not s.inf)
        and (d.nan or not s.nan)
        and (d.neg_zero or not s.neg_zero)
        and (d.negative or not s.negative)
        and (d.zero or not s.zero)
    )


def _int_to_float(lo: int, hi: int, dst: np.dtype) -> bool:
    d = _float_traits(dst)
    reach = max(-lo, hi)  # every integer of magnitude <= 2**(nmant+1) is exact
    return (
        reach <= 2 ** (d.nmant + 1)
        and reach <= d.max
        and (d.negative or lo >= 0)
        and (d.zero or not lo <= 0 <= hi)
    )


def cast_kind(src: np.dtype | str, dst: np.dtype | str) -> CastKind:
    """``"exact"`` if every value of `src` keeps its value in `dst`, else ``"lossy"``.

    The rule (spec/loading.md): the same type is exact; bool goes exactly into every type
    that holds 0 and 1; an integer type goes exactly into an integer type whose range contains
    its range, and into a floating type whose precision covers every integer of its range;
    a floating type goes exactly into one with at least its precision, range and subnormal
    reach and with each special value (inf, NaN, -0.0, negatives, zero) it has; a real type
    goes into a complex type as it would into the component type, complex into complex
    component-wise. Every other cast (float -> int, anything -> bool, complex -> real,
    narrowing) is lossy.
    """
    s = SUPPORTED[src] if isinstance(src, str) else np.dtype(src).newbyteorder("=")
    d = SUPPORTED[dst] if isinstance(dst, str) else np.dtype(dst).newbyteorder("=")
    return "exact" if _exact(s, d) else "lossy"


@cache
def _exact(src: np.dtype, dst: np.dtype) -> bool:
    if src == dst:
        return True
    sc, dc = _category(src), _category(dst)
    if dc == "complex":
        if sc == "complex":
            return _exact(_component(src), _component(dst))
        return _exact(src, _component(dst))
    if sc == "complex" or dc == "bool":
        return False
    if sc == "bool":
        return dc == "int" or _int_to_float(0, 1, dst)
    if sc == "int":
        lo, hi = _int_range(src)
        if dc == "int":
            dlo, dhi = _int_range(dst)
            return dlo <= lo and hi <= dhi
        return _int_to_float(lo, hi, dst)
    if dc == "int":
        return False
    return _float_to_float(src, dst)


def astype(values: np.ndarray, dst: np.dtype) -> np.ndarray:
    """`values` cast to `dst` with numpy's rounding; pairs of extension types that have no
    direct cast go through float64 (exact for every value of a type of up to 32 bits)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return values.astype(dst)
        except TypeError:
            return values.astype(np.float64).astype(dst)


def lossy_values(values: np.ndarray, dst: np.dtype) -> np.ndarray:
    """A boolean mask of the elements of `values` that a cast to `dst` would change.

    An element is unchanged when the cast keeps its sign and casting it back gives the same
    value (NaN counts as equal to NaN); a zero cast to a floating type keeps its sign.
    """
    values = np.asarray(values)
    dst = np.dtype(dst)
    there = astype(values, dst)
    back = astype(there, values.dtype)
    cat, dcat = _category(values.dtype), _category(dst)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cat == "bool":
            return back != values
        if cat == "complex":
            v = values.astype(np.complex128)
            b = back.astype(np.complex128)
            same = ((v.real == b.real) | (np.isnan(v.real) & np.isnan(b.real))) & (
                (v.imag == b.imag) | (np.isnan(v.imag) & np.isnan(b.imag))
            )
            return ~same
        wide = (
            np.float64 if cat == "float" else (np.uint64 if values.dtype.kind == "u" else np.int64)
        )
        v = values.astype(wide)
        b = back.astype(wide)
        same = v == b
        if cat == "float":
            nan_v, nan_b = np.isnan(v), np.isnan(b)
            same = np.where(nan_v | nan_b, nan_v & nan_b, same)
            if dcat != "int":
                same &= (v != 0) | (np.signbit(v) == np.signbit(b))
        if dcat != "bool":
            t = there.astype(np.complex128).real if dcat == "complex" else there.astype(np.float64)
            same &= np.isnan(v.astype(np.float64)) | ((v < 0) == (t < 0))
        return ~same
