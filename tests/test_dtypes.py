"""The dtype table and the cast table of spec/loading.md (LOAD-020..022; ZARR-001)."""

from __future__ import annotations

import ast
import itertools
import math
import operator
import re
import warnings
from fractions import Fraction
from pathlib import Path

import _record
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ockpt
from ockpt import dtypes
from ockpt.dtypes import astype, decode_bits, lossy_values
from ockpt.errors import ZarrFormatError
from tests.support import FIXTURES
from tests.support.errors import assert_error, error_fields

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
    assert_error(info, rule="ZARR-001", file="x/.zarray")


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
#: the casts from a wide type that the table calls exact: the only pairs the test below draws
EXACT_FROM_WIDE = [
    (src, dst) for src in WIDE for dst in NAMES if dtypes.cast_kind(src, dst) == "exact"
]


def test_wide_types_have_exact_casts_to_draw():
    assert {src for src, _ in EXACT_FROM_WIDE} == set(WIDE)
    assert any(src != dst for src, dst in EXACT_FROM_WIDE)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(EXACT_FROM_WIDE), st.data())
def test_exact_casts_keep_random_values(pair, data):
    """LOAD-022: a cast the table calls exact changes no value (every example a cast the
    table calls exact: no draw is thrown away)."""
    src, dst = pair
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


# ---------------------------------------------------------------------------------------------
# Bit layouts (spec/arrays.md §7.1, §7.2): the spec's tables, parsed from the spec text, decode
# every bit pattern as ml_dtypes does; the stored bytes of Orbax 0.12.8 and of ockpt's writer
# are the patterns themselves.

ARRAYS_MD = Path(__file__).resolve().parents[1] / "spec" / "arrays.md"


def _section(title: str) -> str:
    text = ARRAYS_MD.read_text(encoding="utf-8")
    start = text.index(f"\n### {title}\n")
    end = min(i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1)) if i > 0)
    return text[start:end]


def _table(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _number(text: str) -> float | None:
    """A table cell such as ``(2 − 2^−7) × 2^127``, ``2^−14``, ``15.5`` or ``none``."""
    if text == "none":
        return None
    expr = text.replace("−", "-").replace("×", "*").replace("^", "**")

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
            ops[ast.Pow] = operator.pow
            return ops[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"not a number of the table: {text!r}")

    return float(ev(ast.parse(expr, mode="eval").body))


def _patterns(text: str) -> set[int] | None:
    """``none``, ```0x7F`, `0xFF``` or ```0x7D`–`0x7F`, ...``; None for prose (wide types)."""
    if text == "none":
        return set()
    if "*" in text:
        return None
    out: set[int] = set()
    for part in text.split(","):
        ends = [int(h, 16) for h in re.findall(r"`0x([0-9A-F]+)`", part)]
        out.update(range(ends[0], ends[-1] + 1))
    return out


FLOAT_ROWS = {
    row[0].strip("`"): {
        "bits": int(row[1]),
        "sign": int(row[2]),
        "exponent": int(row[3]),
        "mantissa": int(row[4]),
        "bias": int(row[5]),
        "class": row[6].strip("`"),
        "inf": _patterns(row[7]),
        "nan": _patterns(row[8]),
        "neg_zero": {"yes": True, "no": False}[row[9]],
        "max": _number(row[10]),
        "min_normal": _number(row[11]),
        "min_subnormal": _number(row[12]),
    }
    for row in _table(_section("7.1 Bit layouts of the floating types"))
}


def _spec_decode(row: dict, pattern: int) -> float:
    """The value of one pattern, by the rules of spec/arrays.md §7.1 (written from the text,
    with exact fractions: not ockpt's decoder)."""
    m, e, b = row["mantissa"], row["exponent"], row["bias"]
    man = pattern & ((1 << m) - 1)
    exp = (pattern >> m) & ((1 << e) - 1)
    negative = bool(row["sign"]) and bool((pattern >> (m + e)) & 1)
    e_all, m_all = (1 << e) - 1, (1 << m) - 1
    kind = row["class"]
    if kind == "e8m0":
        return math.nan if exp == e_all else float(Fraction(2) ** (exp - b))
    if kind == "ieee" and exp == e_all:
        return math.nan if man else (-math.inf if negative else math.inf)
    if kind == "fn" and exp == e_all and man == m_all:
        return math.nan
    if kind == "fnuz" and negative and exp == 0 and man == 0:
        return math.nan
    if exp == 0:
        magnitude = man * Fraction(2) ** (1 - b - m)
    else:
        magnitude = (1 + Fraction(man, 2**m)) * Fraction(2) ** (exp - b)
    return -float(magnitude) if negative else float(magnitude)


def _all_patterns(bits: int) -> np.ndarray:
    return np.arange(2**bits, dtype=np.uint16 if bits > 8 else np.uint8)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit as values: equal numbers with the same sign (zeros included), and NaN exactly
    where the other is NaN (NaN sign and payload are not compared: they carry no meaning)."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    same = (a == b) & (np.signbit(a) == np.signbit(b))
    return bool(np.array_equal(nan_a, nan_b) and np.all(same | nan_a))


def test_spec_layout_table_lists_every_floating_type_and_matches_the_code():
    floats = {
        n for n in NAMES if n not in ("bool",) and dtypes._category(dtypes.SUPPORTED[n]) == "float"
    }
    assert set(FLOAT_ROWS) == floats == set(dtypes.FLOAT_LAYOUTS)
    for name, row in FLOAT_ROWS.items():
        lay = dtypes.FLOAT_LAYOUTS[name]
        got = (lay.bits, lay.sign, lay.exponent, lay.mantissa, lay.bias, lay.kind)
        want = tuple(row[k] for k in ("bits", "sign", "exponent", "mantissa", "bias", "class"))
        assert got == want, name
        assert row["sign"] + row["exponent"] + row["mantissa"] == row["bits"], name


@pytest.mark.parametrize("name", [n for n, r in FLOAT_ROWS.items() if r["bits"] <= 16])
def test_every_bit_pattern_decodes_as_the_spec_says(name):
    """Each pattern of each floating type of up to 16 bits, decoded by the spec's rules and
    table, is ml_dtypes' value (numpy's for float16); the table's special patterns, −0 and
    extremes are those of the decoded values and of finfo."""
    row, dtype = FLOAT_ROWS[name], dtypes.SUPPORTED[name]
    patterns = _all_patterns(row["bits"])
    mine = np.array([_spec_decode(row, int(p)) for p in patterns])
    with np.errstate(invalid="ignore"):
        reference = patterns.view(dtype).astype(np.float64)
    assert _same(mine, reference), name
    assert _same(dtypes.decode_bits(name, patterns), reference), name
    assert set(patterns[np.isnan(mine)].tolist()) == row["nan"]
    assert set(patterns[np.isinf(mine)].tolist()) == row["inf"]
    assert bool(np.any((mine == 0) & np.signbit(mine))) == row["neg_zero"]
    finite = mine[np.isfinite(mine)]
    positive = finite[finite > 0]
    exponent_field = (patterns >> row["mantissa"]) & ((1 << row["exponent"]) - 1)
    normal = mine[
        np.isfinite(mine) & (mine > 0) & ((exponent_field > 0) | (row["class"] == "e8m0"))
    ]
    info = ml_dtypes.finfo(dtype) if dtype.isbuiltin == 2 else np.finfo(dtype)
    assert row["max"] == finite.max() == float(info.max)
    assert row["min_normal"] == normal.min() == float(info.tiny)
    if row["min_subnormal"] is None:  # float8_e8m0fnu: no subnormals (finfo gives its tiny)
        assert positive.min() == row["min_normal"] == float(info.smallest_subnormal)
    else:
        assert row["min_subnormal"] == positive.min() == float(info.smallest_subnormal)


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_wide_ieee_types_decode_as_the_spec_says(name):
    """float32 and float64: a seeded sample of patterns plus every special class."""
    row, dtype = FLOAT_ROWS[name], dtypes.SUPPORTED[name]
    width = np.dtype(f"uint{row['bits']}")
    rng = np.random.default_rng(18)
    sample = rng.integers(0, 2 ** row["bits"] - 1, 20000, dtype=width, endpoint=True)
    m, e = row["mantissa"], row["exponent"]
    top = ((1 << e) - 1) << m
    edges = [0, 1, (1 << m) - 1, 1 << m, top, top + 1, top - 1, (1 << (row["bits"] - 1))]
    edges += [x | (1 << (row["bits"] - 1)) for x in edges]
    patterns = np.concatenate([sample, np.array(edges, dtype=width)])
    mine = np.array([_spec_decode(row, int(p)) for p in patterns])
    with np.errstate(invalid="ignore"):  # float32 NaN patterns widened
        reference = patterns.view(dtype).astype(np.float64)
    assert _same(mine, reference) and _same(dtypes.decode_bits(name, patterns), reference)
    info = np.finfo(dtype)
    assert (row["max"], row["min_normal"], row["min_subnormal"]) == (
        float(info.max),
        float(info.tiny),
        float(info.smallest_subnormal),
    )
    assert row["inf"] == {top, top | (1 << (row["bits"] - 1))}


@pytest.mark.parametrize("name", list(FLOAT_ROWS))
def test_cast_table_traits_are_those_of_the_spec_table(name):
    """loading §4.2 reads precision, range and special values from arrays §7.1: the traits the
    cast table uses are the table's."""
    row, t = FLOAT_ROWS[name], dtypes._float_traits(dtypes.SUPPORTED[name])
    smallest = row["min_subnormal"] or row["min_normal"]
    assert t.nmant == row["mantissa"] and t.max == row["max"]
    assert 2.0**t.min_exp == smallest
    assert t.inf == (row["class"] == "ieee") and t.nan == (row["class"] != "finite")
    assert t.neg_zero == row["neg_zero"] and t.negative == bool(row["sign"])
    assert t.zero == (row["class"] != "e8m0")


SUB_BYTE_ROWS = {
    name.strip("` "): (values, stored)
    for names, values, stored in _table(_section("7.2 Types narrower than a byte"))
    for name in names.split(",")
}


def test_sub_byte_table_one_element_per_byte_low_bits_no_sign_extension():
    """Every value of int2/int4/uint2/uint4 is the byte §7.2 gives; one byte per element; the
    bits above the element are zero (ml_dtypes in memory, which tensorstore stores as is)."""
    assert set(SUB_BYTE_ROWS) == set(dtypes.SUB_BYTE_BITS)
    for name, bits in dtypes.SUB_BYTE_BITS.items():
        dtype = dtypes.SUPPORTED[name]
        assert dtype.itemsize == 1 and np.zeros(5, dtype).nbytes == 5
        values, stored = SUB_BYTE_ROWS[name]
        low, high = (int(h, 16) for h in re.findall(r"`0x([0-9A-F]{2})`", stored)[-2:])
        if name.startswith(("int", "uint")):
            lo, hi = (int(v.replace("−", "-")) for v in values.split("…"))
            info = ml_dtypes.iinfo(dtype)
            signed = name.startswith("int")
            width = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
            assert (lo, hi) == (int(info.min), int(info.max)) == width
            every = np.arange(lo, hi + 1).astype(dtype)
            stored_bytes = every.view(np.uint8)
            assert stored_bytes.max() < 2**bits  # no sign extension
            assert np.array_equal(dtypes.decode_bits(name, stored_bytes), np.arange(lo, hi + 1))
            for v, h in re.findall(r"(−?\d+): `0x([0-9A-F]{2})`", stored):
                byte = np.array([int(v.replace("−", "-"))]).astype(dtype).view(np.uint8)[0]
                assert byte == int(h, 16), (name, v)
            if name.startswith("uint"):
                assert np.array_equal(stored_bytes, np.arange(lo, hi + 1))
        else:  # floating: the patterns 0 .. 2^bits − 1 are the type's values
            assert (low, high) == (0, 2**bits - 1)
            decoded = np.arange(2**bits, dtype=np.uint8).view(dtype).astype(np.float64)
            assert _same(decoded, dtypes.decode_bits(name, np.arange(2**bits, dtype=np.uint8)))
            if values != "§7.1":
                listed = {float(x.replace("±", "")) for x in values.split(",")}
                assert {abs(float(x)) for x in decoded} == listed
        with pytest.raises(ValueError):  # a byte with bits above the element is no value
            dtypes.decode_bits(name, np.array([1 << bits], np.uint8))


def test_spec_examples_of_stored_bytes():
    """The worked examples of §7.1 and §7.2, as ml_dtypes (and so tensorstore) lays them out."""

    def raw(values, name):
        return np.array(values, np.float64).astype(dtypes.SUPPORTED[name]).tobytes()

    assert raw([1.0, -2.0], "bfloat16") == bytes.fromhex("803f00c0")
    assert raw([448.0], "float8_e4m3fn") == b"\x7e"
    assert raw([0.0, -0.0], "float8_e4m3fnuz") == b"\x00\x00"  # no negative zero
    assert np.isnan(np.frombuffer(b"\x80", dtypes.SUPPORTED["float8_e4m3fnuz"]).astype(float)[0])
    assert raw([1.0, 0.5], "float8_e8m0fnu") == b"\x7f\x7e"
    assert raw([-0.5, 6.0, -0.0], "float4_e2m1fn") == b"\x09\x07\x08"
    assert np.array([-2, -8, 7]).astype(dtypes.SUPPORTED["int4"]).tobytes() == b"\x0e\x08\x07"
    assert np.array([-2, -1, 1]).astype(dtypes.SUPPORTED["int2"]).tobytes() == b"\x02\x03\x01"


def _pattern_tree() -> dict[str, np.ndarray]:
    """The leaves of the dtype_bit_patterns fixtures: each type's patterns in pattern order."""
    out = {}
    for name in [n for n in dtypes.EXTENSION_NAMES if n in dtypes.SUPPORTED]:
        dtype = dtypes.SUPPORTED[name]
        if name == "bfloat16":
            top = np.arange(512, dtype=np.uint16) << 7
            low = np.array([0x00, 0x01, 0x3F, 0x40, 0x7E, 0x7F], np.uint16)
            out[name] = (top[:, None] | low[None, :]).reshape(-1).view(dtype)
        else:
            bits = dtypes.SUB_BYTE_BITS.get(name, 8)
            out[name] = np.arange(2**bits, dtype=np.uint8).view(dtype)
    return out


def _chunk_bytes(raw: bytes, zarr_version: int) -> bytes:
    """The decoded bytes of a zstd chunk (zarr v3: the one inner chunk of a shard)."""
    zstandard = pytest.importorskip("zstandard")
    if zarr_version == 3:  # index at the end: (offset, nbytes) uint64 LE, then crc32c
        offset, nbytes = (int(x) for x in np.frombuffer(raw[-20:-4], "<u8"))
        raw = raw[offset : offset + nbytes]
    return zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 20)


@pytest.mark.parametrize("case", ["dtype_bit_patterns", "dtype_bit_patterns_zarr3"])
def test_orbax_stores_each_pattern_as_it_is(case):
    """From the bytes Orbax 0.12.8 wrote (read with tensorstore's OCDBT driver): each leaf's
    one chunk is its patterns, byte for byte (bfloat16 little-endian); what it refused is
    exactly what the dtype table marks unwritable."""
    ts = pytest.importorskip("tensorstore")
    path = FIXTURES / "orbax-0.12.8" / case
    record = _record.load_expected(path)
    version = record["layout"]["zarr_version"]
    kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{path / 'checkpoint'}/"}).result()
    expected = _pattern_tree()
    assert set(record["refused"]) == set(dtypes.NOT_WRITABLE)
    assert set(record["items"][""]["items"]) == set(expected) - dtypes.NOT_WRITABLE
    for name in record["items"][""]["items"]:
        key = f"{name}/{'c/0' if version == 3 else '0'}"
        stored = _chunk_bytes(kv.read(key).result().value, version)
        assert stored == expected[name].tobytes(), name
        if name != "bfloat16":  # 0x00, 0x01, ...: the pattern is the byte
            assert stored == bytes(range(len(stored))), name
        else:
            assert stored[:4] == bytes.fromhex("00000100")  # 0x0000, 0x0001 little-endian
    for backend in ("python", "tensorstore"):
        tree = ockpt.load_pytree(path / "checkpoint", backend=backend)
        for name, value in tree.items():
            assert (
                value.dtype == expected[name].dtype and value.tobytes() == expected[name].tobytes()
            )


@pytest.mark.parametrize("zarr_version", [2, 3])
def test_ockpt_writer_stores_each_pattern_as_it_is(tmp_path, zarr_version):
    """ockpt's writer (through tensorstore) stores the same bytes, and refuses the types
    tensorstore cannot write."""
    pytest.importorskip("tensorstore")
    tree = _pattern_tree()
    writable = {k: v for k, v in tree.items() if k not in dtypes.NOT_WRITABLE}
    path = tmp_path / f"v{zarr_version}"
    ockpt.save_pytree(path, writable, layout="item", use_ocdbt=False, zarr_version=zarr_version)
    for name, value in writable.items():
        chunk = path / name / ("c/0" if zarr_version == 3 else "0")
        assert _chunk_bytes(chunk.read_bytes(), zarr_version) == value.tobytes(), name
    for name in sorted(dtypes.NOT_WRITABLE):
        with pytest.raises(ockpt.OckptError):
            ockpt.save_pytree(tmp_path / name, {name: tree[name]}, layout="item", use_ocdbt=False)




# ---------------------------------------------------------------------------------------------
# dtypes.py: bit layouts and the value check of a cast (spec/arrays.md §7, spec/loading.md §4).


def test_decode_bits_says_what_is_wrong():
    with pytest.raises(TypeError, match="bit patterns must be integers, not float64"):
        decode_bits("float16", np.array([1.0]))
    with pytest.raises(ValueError, match="a int4 pattern has bits set above its 4 bits"):
        decode_bits("int4", [16])
    with pytest.raises(ValueError, match="a float16 pattern has bits set above its 16 bits"):
        decode_bits("float16", [1 << 16])


def test_decode_bits_of_infinity_warns_of_nothing():
    """The exponent-all-ones patterns overflow in the arithmetic; that is no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decode_bits("float64", [0x7FF0000000000000])[0] == np.inf


def test_casts_ignore_the_callers_numpy_error_state():
    """`astype` and `lossy_values` answer (inf, NaN, wrapped integers) where the caller made
    numpy raise on floating-point errors."""
    with np.errstate(all="raise"):
        assert astype(np.array([1e300]), np.dtype(np.float16))[0] == np.inf
        assert lossy_values(np.array([1e300, -1.0]), np.dtype(np.float16)).tolist() == [True, False]


@pytest.mark.parametrize(
    ("values", "dst", "lossy"),
    [
        (np.array([-0.0, 0.0, 1.5]), np.int32, [False, False, True]),  # an int has no -0
        (np.array([-0.0]), np.float16, [False]),
        (np.array([complex(np.nan, 0), complex(0, np.nan), 1 + 0j]), np.int64, [True, True, False]),
        (np.array([2**53 + 1, 2**53], np.int64), np.float32, [True, False]),  # compared as ints
        (np.array([2**63 + 1, 1], np.uint64), np.int64, [True, False]),  # wraps negative
    ],
)
def test_lossy_values_compares_in_the_source_type(values, dst, lossy):
    assert lossy_values(values, np.dtype(dst)).tolist() == lossy




EXPECTED = "a numeric zarr dtype (e.g. '<f4', 'bfloat16', 'int4')"


def test_a_refused_element_type_is_reported_at_the_dtype_field():
    """ZARR-001 points at ``/dtype`` (the zarr v2 field) unless the caller names another field.
    Kills from_zarr 1, 2 (ids at 88f069a: the default pointer mutated)."""
    with pytest.raises(ZarrFormatError) as info:
        dtypes.from_zarr("|O")
    assert error_fields(info) == {
        "rule": "ZARR-001",
        "file": None,
        "message": "unsupported element type",
        "pointer": "/dtype",
        "expected": EXPECTED,
        "got": "|O",
    }
    with pytest.raises(ZarrFormatError) as info:
        dtypes.from_zarr("string", file="a/zarr.json", pointer="/data_type")
    assert error_fields(info) == {
        "rule": "ZARR-001",
        "file": "a/zarr.json",
        "message": "unsupported element type",
        "pointer": "/data_type",
        "expected": EXPECTED,
        "got": "string",
    }


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
