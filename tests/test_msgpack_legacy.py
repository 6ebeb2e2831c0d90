"""Tests of the legacy msgpack ``checkpoint`` decoder (reference/ockpt/msgpack_legacy.py).

Three groups: real Orbax 0.5.15 bytes from ``fixtures/orbax-0.5.15`` (decoded and compared with
the case's ``expected.json``, then corrupted byte by byte), hand-made inputs for every rule, and
Hypothesis fuzzing (only `MsgpackError` may escape the decoder).
"""

from __future__ import annotations

import json
import math
import mmap
import re
import sys
import tracemalloc
import types
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ockpt import dtypes, msgpack_legacy
from ockpt.errors import FormatError, MsgpackError, NotACheckpointError
from ockpt.limits import LIMITS
from ockpt.msgpack_legacy import (
    Placeholder,
    decode_checkpoint,
    placeholders,
    read_checkpoint_file,
    to_json_view,
)
from ockpt.rules import RULES as RULE_REGISTRY
from tests.support.errors import assert_error, error_fields

MAX_DEPTH = LIMITS.max_depth
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "orbax-0.5.15"
sys.path.insert(0, str(ROOT / "fixtures"))
import _record  # noqa: E402

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None


# --------------------------------------------------------------------------------------------
# helpers: build msgpack the way Orbax 0.5.15 lays it out (see the module docstring)
# --------------------------------------------------------------------------------------------


def nd(
    array: np.ndarray,
    *,
    code: int = 1,
    name: str | None = None,
    shape=None,
    data: bytes | None = None,
) -> msgpack.ExtType:
    """An ndarray (ext 1) or numpy scalar (ext 3) value."""
    array = np.asarray(array)
    payload = msgpack.packb(
        [
            list(array.shape) if shape is None else shape,
            array.dtype.name if name is None else name,
            array.tobytes() if data is None else data,
        ]
    )
    return msgpack.ExtType(code, payload)


def tup(*items) -> msgpack.ExtType:
    return msgpack.ExtType(4, msgpack.packb(list(items)))


def cplx(z: complex) -> msgpack.ExtType:
    return msgpack.ExtType(2, msgpack.packb([z.real, z.imag]))


def chunked(array: np.ndarray, per_chunk: int) -> dict:
    """The chunked-array map, as Orbax 0.5.15 writes it (observed with a lowered chunk limit)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    pieces = [flat[i : i + per_chunk] for i in range(0, flat.size, per_chunk)]
    return {
        "__msgpack_chunked_array__": True,
        "shape": {str(i): d for i, d in enumerate(array.shape)},
        "chunks": {str(i): nd(p) for i, p in enumerate(pieces)},
    }


def pack(tree) -> bytes:
    return msgpack.packb(tree)


def expect_error(
    data: bytes, rule: str, pointer: str | None = None, *, file: str = "ckpt/x", **kw
) -> MsgpackError:
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(data, file=file, **kw)
    err = info.value
    assert err.rule == rule, str(err)
    assert err.file == file
    if pointer is not None:
        assert err.pointer == pointer, str(err)
    return err


# --------------------------------------------------------------------------------------------
# real Orbax 0.5.15 bytes
# --------------------------------------------------------------------------------------------


def _cases() -> list[str]:
    if not FIXTURES.is_dir():
        return []
    return sorted(p.parent.parent.name for p in FIXTURES.glob("msgpack_*/checkpoint/checkpoint"))


def _case(name: str) -> Path:
    case = FIXTURES / name
    if not (case / "checkpoint" / "checkpoint").is_file():
        pytest.skip(f"fixture case {name} not generated")
    return case


def _real_bytes(name: str) -> bytes:
    return (_case(name) / "checkpoint" / "checkpoint").read_bytes()


def _sorted_items(node: dict) -> list[tuple[str, dict]]:
    """A dict node's items in the order the writer flattens them (jax sorts dict keys)."""
    key_types = node.get("key_types", {})
    keys = [(int(k) if key_types.get(k) == "int" else k) for k in node["items"]]
    return [(str(k), node["items"][str(k)]) for k in sorted(keys)]


def _expected_placeholders(node: dict, path: tuple[str, ...] = ()) -> object:
    """What 0.5.15 writes in `checkpoint` for a plain save, from the record of the saved tree.

    Observed: every leaf, None, empty dict and empty list becomes ``PLACEHOLDER://<param
    name>``; an empty tuple becomes nil; tuples become arrays and NamedTuples maps.
    """
    t = node["type"]
    here = Placeholder(".".join(path), "PLACEHOLDER")
    if t == "dict":
        items = _sorted_items(node)
        return {k: _expected_placeholders(v, path + (k,)) for k, v in items} if items else here
    if t in ("list", "tuple"):
        if not node["items"]:
            return here if t == "list" else None
        return [_expected_placeholders(v, path + (str(i),)) for i, v in enumerate(node["items"])]
    if t == "namedtuple":
        return {k: _expected_placeholders(v, path + (k,)) for k, v in node["fields"].items()}
    return here


def _expected_inline(node: dict, case: Path) -> object:
    """What 0.5.15 writes in `checkpoint` for a save with aggregate=True, from the record.

    Observed: values inline; tuples become arrays, NamedTuples maps; an empty tuple, a Python
    complex and numpy bool / bfloat16 scalars become nil (the case lists them in
    ``restored_as_none``).
    """
    t = node["type"]
    if t == "dict":
        return {k: _expected_inline(v, case) for k, v in _sorted_items(node)}
    if t == "namedtuple":
        return {k: _expected_inline(v, case) for k, v in node["fields"].items()}
    if t in ("list", "tuple"):
        if t == "tuple" and not node["items"]:
            return None
        return [_expected_inline(v, case) for v in node["items"]]
    if t == "scalar" and (
        node["py_type"] == "complex"
        or node.get("dtype") in ("bool", "bfloat16")
        and node["py_type"] == "numpy"
    ):
        return None
    return _record.decode_tree(node, case)


def _same(got, want, path="") -> None:
    """Equal with exact types, dtypes and bits (nan equals nan)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (path, got)
        for k in want:
            _same(got[k], want[k], f"{path}/{k}")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (path, got)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{path}/{i}")
    elif isinstance(want, (np.ndarray, np.generic)):
        assert type(got) is type(want), (path, type(got), type(want))
        assert got.dtype == want.dtype and got.shape == want.shape, (path, got, want)
        assert got.tobytes() == want.tobytes(), (path, got, want)
    elif isinstance(want, float):
        assert type(got) is float, (path, got)
        assert got == want or (math.isnan(got) and math.isnan(want)), (path, got, want)
    else:
        assert type(got) is type(want) and got == want, (path, got, want)


def _top_level_nils(tree: dict) -> set[str]:
    return {k for k, v in tree.items() if v is None}


def test_fixture_cases_present():
    if not FIXTURES.is_dir():
        pytest.skip("fixtures/orbax-0.5.15 not generated")
    assert {
        "msgpack_placeholders",
        "msgpack_aggregated",
        "msgpack_lossy",
        "msgpack_chunked",
    } <= set(_cases())


def test_placeholders_fixture():
    case = _case("msgpack_placeholders")
    record = _record.load_expected(case)
    assert record["versions"]["orbax-checkpoint"] == "0.5.15"
    node = record["items"][""]
    tree = read_checkpoint_file(case / "checkpoint" / "checkpoint")
    _same(tree, _expected_placeholders(node))
    found = placeholders(tree)
    assert all(p.scheme == "PLACEHOLDER" for p in found.values())
    # every array / scalar / string / None / empty container of the tree has one
    assert "empty_dict" in found and "empty_list" in found and "none" in found
    assert "layers.1" in found and "point.y" in found and "sharded" in found
    assert _top_level_nils(tree) == set(record["restored_as_none"]) == {"empty_tuple"}
    view = to_json_view(tree)
    assert view["params"]["w"] == {
        "__placeholder__": {"scheme": "PLACEHOLDER", "param_name": "params.w"}
    }
    json.dumps(view, allow_nan=False)


@pytest.mark.parametrize(
    ("release", "case", "expected"),
    [
        ("0.3.5", "nested", (b"\x80", b"\x90", b"\xc0")),
        ("0.4.8", "nested", (b"\x80", b"\x90", b"\xc0")),
        ("0.5.15", "msgpack_placeholders", (b"\xb8", b"\xb8", b"\xb2")),
    ],
)
def test_empty_containers_and_none_by_release(release, case, expected):
    """msgpack §2: 0.3.5 and 0.4.8 write an empty dict as an empty map, an empty list as an
    empty array and None as nil; 0.5.15 writes placeholders for all three; the empty tuple is
    nil in every release. A reader gives {}, [] and None back."""
    import ockpt

    case_dir = ROOT / "fixtures" / f"orbax-{release}" / case
    raw = (case_dir / "checkpoint" / "checkpoint").read_bytes()
    for key, first_byte in zip(("empty_dict", "empty_list", "none"), expected, strict=True):
        text = key.encode()
        at = raw.index(bytes([0xA0 | len(text)]) + text) + 1 + len(text)
        assert raw[at : at + 1] == first_byte, key  # 80 / 90 / c0, or a str8 / fixstr
    tree = read_checkpoint_file(case_dir / "checkpoint" / "checkpoint")
    assert tree["empty_tuple"] is None
    if release == "0.5.15":
        assert {tree[k].param_name for k in ("empty_dict", "empty_list", "none")} == {
            "empty_dict",
            "empty_list",
            "none",
        }
    else:
        assert tree["empty_dict"] == {} and isinstance(tree["empty_dict"], dict)
        assert tree["empty_list"] == [] and isinstance(tree["empty_list"], list)
        assert tree["none"] is None
    got = ockpt.load_pytree(case_dir / "checkpoint")
    assert got["empty_dict"] == {} and type(got["empty_dict"]) is dict
    assert got["empty_list"] == [] and type(got["empty_list"]) is list
    assert got["none"] is None and got["empty_tuple"] is None


def test_aggregated_fixture():
    case = _case("msgpack_aggregated")
    record = _record.load_expected(case)
    node = record["items"][""]
    tree = read_checkpoint_file(case / "checkpoint" / "checkpoint")
    _same(tree, _expected_inline(node, case))
    assert placeholders(tree) == {}
    assert _top_level_nils(tree) == set()
    # the dtypes the fixture promises really are inline, with their names
    view = to_json_view(tree)
    assert view["bfloat16"] == {"__ndarray__": {"dtype": "bfloat16", "shape": [2, 2]}}
    assert view["int4"] == {"__ndarray__": {"dtype": "int4", "shape": [4]}}
    assert view["float64_0d"] == {"__ndarray__": {"dtype": "float64", "shape": []}}
    assert view["np_complex64"] == {"__npscalar__": {"dtype": "complex64"}}
    assert isinstance(tree["tuple"], list) and isinstance(tree["point"], dict)
    json.dumps(view, allow_nan=False)


def test_lossy_fixture():
    case = _case("msgpack_lossy")
    record = _record.load_expected(case)
    tree = read_checkpoint_file(case / "checkpoint" / "checkpoint")
    _same(tree, _expected_inline(record["items"][""], case))
    assert _top_level_nils(tree) == set(record["restored_as_none"])
    assert tree["kept"] == np.int32(1) and tree["kept"].dtype == np.int32


def test_chunked_fixture():
    case = _case("msgpack_chunked")
    record = _record.load_expected(case)
    data = _real_bytes("msgpack_chunked")
    assert data.count(b"__msgpack_chunked_array__") == 2  # 'big' and 'bf16', not 'small'
    tree = decode_checkpoint(data)
    _same(tree, _expected_inline(record["items"][""], case))
    # the hand-made `chunked` helper used by the tests below builds exactly Orbax's layout
    limit = record["options"]["msgpack_max_chunk_size"]
    raw = msgpack.unpackb(data, ext_hook=msgpack.ExtType)
    for name in ("big", "bf16"):
        assert raw[name] == chunked(tree[name], limit // tree[name].dtype.itemsize)
        assert pack({name: raw[name]}) == pack(
            {name: chunked(tree[name], limit // tree[name].dtype.itemsize)}
        )


def test_chunked_fixture_corruptions():
    data = _real_bytes("msgpack_chunked")
    raw = msgpack.unpackb(data, ext_hook=msgpack.ExtType)
    bad = dict(raw, big=dict(raw["big"], chunks=dict(raw["big"]["chunks"])))
    del bad["big"]["chunks"]["2"]  # 3 chunks of 16 int32 + ... : drop one
    bad["big"]["chunks"] = {str(i): c for i, c in enumerate(bad["big"]["chunks"].values())}
    expect_error(pack(bad), "MSGPACK-015", "/big/chunks")
    bad = dict(raw, bf16=dict(raw["bf16"], shape={"0": 34}))
    expect_error(pack(bad), "MSGPACK-015", "/bf16/chunks")


def _ext_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(offset of the ext header, offset of its payload, payload length) of top-level-map exts.

    Only the fixext / ext8 forms Orbax uses for small payloads are recognised; enough to aim
    corruptions at real bytes.
    """
    spans = []
    for m in re.finditer(rb"\xc7(.)([\x01-\x04])", data, re.S):
        length = m.group(1)[0]
        start = m.end()
        if start + length <= len(data):
            spans.append((m.start(), start, length))
    return spans


def _first_array_ext(data: bytes) -> tuple[int, int, int]:
    for head, start, length in _ext_spans(data):
        if data[head + 2] == 1 and data[start] == 0x93:
            return head, start, length
    raise AssertionError("no ext 1 in fixture")


def _key_before(data: bytes, offset: int) -> str:
    """The fixstr map key right before ``offset`` (how the fixture's top-level keys look)."""
    for n in range(1, 32):
        if offset - n - 1 >= 0 and data[offset - n - 1] == 0xA0 | n:
            return data[offset - n : offset].decode()
    raise AssertionError("no key before offset")


class TestRealCorruption:
    """Targeted corruptions of real 0.5.15 bytes: each names its rule, file and key path."""

    @pytest.fixture()
    def real(self):
        return _real_bytes("msgpack_aggregated")

    def test_truncated_file(self, real):
        expect_error(real[:-3], "MSGPACK-003", f"@{len(real) - 3}")

    def test_trailing_garbage(self, real):
        expect_error(real + b"\x00\x01", "MSGPACK-004", f"@{len(real)}")

    def test_truncated_ext_payload(self, real):
        head, start, length = _first_array_ext(real)
        key = _key_before(real, head)
        # shorten the ext by one byte: the payload's bin now ends early
        bad = (
            real[:head]
            + bytes([0xC7, length - 1, 1])
            + real[start : start + length - 1]
            + real[start + length :]
        )
        expect_error(bad, "MSGPACK-009", f"/{key}")

    def test_wrong_dtype_name(self, real):
        head, start, length = _first_array_ext(real)
        key = _key_before(real, head)
        payload = msgpack.unpackb(real[start : start + length])
        name = payload[1].encode()
        at = real.index(name, start)
        bad = real[:at] + b"O" * len(name) + real[at + len(name) :]
        err = expect_error(bad, "MSGPACK-010", f"/{key}")
        assert err.got == "O" * len(name)

    def test_shape_byte_count_mismatch(self, real):
        head, start, length = _first_array_ext(real)
        key = _key_before(real, head)
        # payload = 0x93, shape array header, first dim as positive fixint: bump it
        assert real[start + 1] & 0xF0 == 0x90 and real[start + 2] < 0x7F
        bad = bytearray(real)
        bad[start + 2] += 1
        expect_error(bytes(bad), "MSGPACK-012", f"/{key}")

    def test_unknown_ext_code(self, real):
        head, start, length = _first_array_ext(real)
        key = _key_before(real, head)
        bad = bytearray(real)
        bad[head + 2] = 9
        err = expect_error(bytes(bad), "MSGPACK-008", f"/{key}")
        assert err.got == 9

    def test_placeholder_fixture_truncated(self):
        real = _real_bytes("msgpack_placeholders")
        for cut in (1, len(real) // 2, len(real) - 1):
            expect_error(real[:cut], "MSGPACK-003")


# --------------------------------------------------------------------------------------------
# hand-made inputs: decoding
# --------------------------------------------------------------------------------------------


RULES = sorted(r for r in RULE_REGISTRY if r.startswith("MSGPACK-"))


def test_rules_table():
    assert len(RULES) == 17
    assert all(RULE_REGISTRY[r].spec == "msgpack.md" for r in RULES)


def test_plain_values_and_placeholders():
    data = pack(
        {
            "a": "PLACEHOLDER://a",
            "b": {"c": "AGGREGATED://b.c", "d": [1, -2, 3.5, True, None, "s", b"by"]},
            "": "PLACEHOLDER://",
        }
    )
    tree = decode_checkpoint(data)
    assert tree == {
        "a": Placeholder("a", "PLACEHOLDER"),
        "b": {"c": Placeholder("b.c", "AGGREGATED"), "d": [1, -2, 3.5, True, None, "s", b"by"]},
        "": Placeholder("", "PLACEHOLDER"),
    }
    assert list(tree) == ["a", "b", ""]  # file order kept
    assert placeholders(tree) == {
        "a": Placeholder("a", "PLACEHOLDER"),
        "b.c": Placeholder("b.c", "AGGREGATED"),
        "": Placeholder("", "PLACEHOLDER"),
    }
    assert Placeholder("b.c", "AGGREGATED").uri == "AGGREGATED://b.c"


DTYPES = [
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
]
ML_DTYPES = [
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3b11fnuz",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "int4",
    "uint4",
]


@pytest.mark.parametrize("name", DTYPES + ML_DTYPES)
def test_ndarray_and_scalar_dtypes(name):
    dtype = _record.numpy_dtype(name)
    array = (
        np.arange(6).reshape(2, 3).astype(dtype)
        if name != "bool"
        else np.array([[True, False, True], [False, False, True]])
    )
    scalar = array.reshape(-1)[1]
    tree = decode_checkpoint(pack({"x": nd(array), "s": nd(scalar, code=3), "z": nd(array[0, 0])}))
    assert tree["x"].dtype == dtype and tree["x"].shape == (2, 3)
    assert tree["x"].tobytes() == array.tobytes()
    assert not tree["x"].flags.writeable
    assert isinstance(tree["s"], np.generic) and tree["s"].dtype == dtype
    assert tree["s"].tobytes() == scalar.tobytes()
    assert isinstance(tree["z"], np.ndarray) and tree["z"].shape == ()
    assert to_json_view(tree) == {
        "x": {"__ndarray__": {"dtype": name, "shape": [2, 3]}},
        "s": {"__npscalar__": {"dtype": name}},
        "z": {"__ndarray__": {"dtype": name, "shape": []}},
    }


def test_int4_bytes_as_orbax_writes_them():
    # Orbax 0.5.15 wrote int4 [-8, 7, 0, 1] as one byte per element, low nibble: 08 07 00 01
    data = pack({"i4": msgpack.ExtType(1, msgpack.packb([[4], "int4", b"\x08\x07\x00\x01"]))})
    got = decode_checkpoint(data)["i4"]
    assert got.astype(np.int8).tolist() == [-8, 7, 0, 1]


def test_empty_and_zero_d_arrays():
    tree = decode_checkpoint(pack([nd(np.zeros((0, 3), np.float32)), nd(np.array(5, np.int16))]))
    assert tree[0].shape == (0, 3) and tree[0].dtype == np.float32
    assert tree[1].shape == () and int(tree[1]) == 5


def test_tuple_and_complex_ext():
    data = pack({"t": tup(1, tup(), tup(cplx(1 - 2j), {"k": nd(np.int8(3), code=3)}))})
    tree = decode_checkpoint(data)
    assert tree == {"t": (1, (), ((1 - 2j), {"k": np.int8(3)}))}
    assert isinstance(tree["t"][2][0], complex)
    assert to_json_view(tree) == {
        "t": {
            "__tuple__": [
                1,
                {"__tuple__": []},
                {
                    "__tuple__": [
                        {"__complex__": [1.0, -2.0]},
                        {"k": {"__npscalar__": {"dtype": "int8"}}},
                    ]
                },
            ]
        }
    }


def test_chunked_array_reassembled():
    array = np.arange(30, dtype=np.int32).reshape(3, 10)
    tree = decode_checkpoint(pack({"w": chunked(array, 4), "after": 1}))
    assert tree["w"].dtype == np.int32 and tree["w"].shape == (3, 10)
    assert np.array_equal(tree["w"], array) and not tree["w"].flags.writeable
    assert tree["after"] == 1


def test_chunked_bfloat16_single_chunk():
    if ml_dtypes is None:
        pytest.skip("ml_dtypes missing")
    array = np.linspace(-1, 1, 7).astype(ml_dtypes.bfloat16)
    tree = decode_checkpoint(pack(chunked(array, 7)))
    assert tree.dtype == array.dtype and tree.tobytes() == array.tobytes()


def test_json_view_escapes_and_special_floats():
    tree = decode_checkpoint(
        pack(
            {
                "a": {"__tuple__": 1},
                "f": [math.inf, -math.inf],
                "c": cplx(complex(math.nan, 1.0)),
                "b": b"abc",
            }
        )
    )
    view = to_json_view(tree)
    assert view == {
        "a": {"__dict__": {"__tuple__": 1}},
        "f": [{"__float__": "inf"}, {"__float__": "-inf"}],
        "c": {"__complex__": ["nan", 1.0]},
        "b": {"__bytes__": {"length": 3}},
    }
    json.dumps(view, allow_nan=False)
    assert to_json_view(Placeholder("x.y", "PLACEHOLDER")) == {
        "__placeholder__": {"scheme": "PLACEHOLDER", "param_name": "x.y"}
    }


def test_read_checkpoint_file(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(pack({"a": 1}))
    assert read_checkpoint_file(path) == {"a": 1}
    with pytest.raises(MsgpackError) as info:
        read_checkpoint_file(path, max_bytes=3)
    assert_error(info, rule="MSGPACK-001", file=str(path))
    with pytest.raises(NotACheckpointError):
        read_checkpoint_file(tmp_path / "missing")
    with pytest.raises(FormatError) as info:  # a directory in its place (PATH-005)
        read_checkpoint_file(tmp_path)
    assert info.value.rule == "PATH-005"
    path.write_bytes(pack({"a": nd(np.zeros(2, np.int8), name="object")}))
    with pytest.raises(MsgpackError) as info:
        read_checkpoint_file(path)
    assert info.value.file == str(path) and info.value.pointer == "/a"


def test_non_bytes_input_is_a_type_error():
    with pytest.raises(TypeError):
        decode_checkpoint("not bytes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# hand-made inputs: one test per rule
# --------------------------------------------------------------------------------------------


def test_001_size_limit():
    expect_error(pack({"a": 1}), "MSGPACK-001", max_bytes=2)
    assert decode_checkpoint(pack({"a": 1}), max_bytes=4) == {"a": 1}  # 4 bytes: at the limit


@pytest.mark.parametrize("data", [b"\xc1", b"\x81\xa1a\xc1", b"\xa2\xff\xfe", b"\xd4\xff\x00"])
def test_002_malformed(data):
    expect_error(data, "MSGPACK-002")


@pytest.mark.parametrize("data", [b"", b"\x92\x01", b"\xc4\x05ab", b"\x81\xa1a", b"\xc7\x05\x01a"])
def test_003_truncated(data):
    expect_error(data, "MSGPACK-003", f"@{len(data)}")


def test_004_trailing():
    expect_error(pack({"a": 1}) + b"\xc0", "MSGPACK-004", "@4")


def test_005_depth():
    ok = [None]
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    decode_checkpoint(pack(ok))
    expect_error(pack([ok]), "MSGPACK-005", "/0" * MAX_DEPTH)
    deep_map = b"\x81\xa1k" * (MAX_DEPTH + 1) + b"\xc0"
    expect_error(deep_map, "MSGPACK-005", "/k" * MAX_DEPTH)
    # deeper than msgpack's own stack: still a clean error, never RecursionError
    expect_error(b"\x91" * 100_000 + b"\xc0", "MSGPACK-005")
    # tuples count too
    t = tup()
    for _ in range(MAX_DEPTH + 1):
        t = tup(t)
    expect_error(pack(t), "MSGPACK-005")


@pytest.mark.parametrize("key", [1, b"k", None, 1.5, True])
def test_006_non_str_key(key):
    data = msgpack.packb({"a": {key: 1}})
    err = expect_error(data, "MSGPACK-006", "/a")
    assert err.expected == "str"


def test_006_container_keys():
    # maps and arrays as keys reach the rule too (no TypeError from hashing)
    expect_error(b"\x81\x81\xa1a\x01\x02", "MSGPACK-006", "")
    expect_error(b"\x81\x91\x01\x02", "MSGPACK-006", "")


def test_007_duplicate_key():
    data = b"\x81\xa1b\x82\xa1x\x01\xa1x\x02"
    expect_error(data, "MSGPACK-007", "/b/x")


@pytest.mark.parametrize("code", [0, 5, 127, -5, -128])
def test_008_unknown_ext(code):
    # fixext 1 with the code as a signed byte (msgpack.ExtType refuses negative codes)
    data = b"\x81\xa1a\x92\x01\xd4" + code.to_bytes(1, "big", signed=True) + b"\x90"
    err = expect_error(data, "MSGPACK-008", "/a/1")
    assert err.got == code


def test_008_timestamp_ext():
    data = msgpack.packb({"t": msgpack.Timestamp(1, 0)})
    expect_error(data, "MSGPACK-008", "/t")


@pytest.mark.parametrize(
    "payload",
    [
        msgpack.packb([[2], "int8"]),  # 2 fields
        msgpack.packb({"shape": [2]}),  # a map
        msgpack.packb([2, "int8", b"\x00\x00"]),  # shape not an array
        msgpack.packb([[2], 7, b"\x00\x00"]),  # dtype not a str
        msgpack.packb([[2], "int8", "xx"]),  # data str, not bin
        msgpack.packb([[2], "int8", b"\x00\x00"]) + b"\x00",  # trailing byte in payload
        msgpack.packb([[2], "int8", b"\x00\x00"])[:-1],  # payload ends early
        b"\xc1",
    ],
)
def test_009_bad_ndarray_payload(payload):
    expect_error(pack({"x": {"y": msgpack.ExtType(1, payload)}}), "MSGPACK-009", "/x/y")


@pytest.mark.parametrize(
    "payload",
    [msgpack.packb([1.0]), msgpack.packb([1, 2]), msgpack.packb([1.0, "a"]), msgpack.packb(1.0)],
)
def test_009_bad_complex_payload(payload):
    expect_error(pack([msgpack.ExtType(2, payload)]), "MSGPACK-009", "/0")


def test_009_bad_tuple_payload():
    expect_error(pack({"t": msgpack.ExtType(4, msgpack.packb({"a": 1}))}), "MSGPACK-009", "/t")
    expect_error(pack({"t": msgpack.ExtType(4, b"\x92\x01")}), "MSGPACK-009", "/t")


@pytest.mark.parametrize(
    "name",
    [
        "object",
        "O",
        "|O",
        "<U1",
        "str32",
        "V8",
        "void64",
        "[('a','<i4')]",
        "float128",
        "datetime64",
        "int",
        "Float32",
        "bfloat16 ",
        "",
    ],
)
def test_010_dtype_allow_list(name):
    err = expect_error(
        pack({"x": nd(np.zeros(8, np.uint8), name=name, shape=[1])}), "MSGPACK-010", "/x"
    )
    assert err.got == name


@pytest.mark.parametrize(
    "shape",
    [
        [-1],
        [2, -3],
        [1.0],
        [True],
        ["2"],
        [None],
        [[2]],
        [1] * 65,
        [2**62, 2**62, 0],
        [2**64 - 1, 0],
    ],
)
def test_011_bad_shape(shape):
    expect_error(pack({"x": nd(np.zeros(0, np.float32), shape=shape)}), "MSGPACK-011", "/x")


def test_011_shape_at_limits():
    tree = decode_checkpoint(pack({"x": nd(np.zeros(0, np.int8), shape=[1] * 63 + [0])}))
    assert tree["x"].shape == (1,) * 63 + (0,)


@pytest.mark.parametrize(
    "shape,size", [([2, 3], 23), ([2, 3], 25), ([], 0), ([0], 1), ([2**40], 8)]
)
def test_012_byte_count(shape, size):
    err = expect_error(
        pack({"w": nd(np.zeros(1, np.float32), shape=shape, data=b"\x00" * size)}),
        "MSGPACK-012",
        "/w",
    )
    assert err.expected == math.prod(shape) * 4 and err.got == size


def test_013_scalar_shape():
    expect_error(pack({"s": nd(np.zeros(2, np.int32), code=3)}), "MSGPACK-013", "/s")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c.pop("shape"),
        lambda c: c.update(extra=1),
        lambda c: c.update(__msgpack_chunked_array__=1),
        lambda c: c.update(__msgpack_chunked_array__=False),
        lambda c: c.update(shape=[3, 10]),
        lambda c: c.update(shape={"0": 3, "2": 10}),
        lambda c: c.update(shape={"0": 3, "01": 10}),
        lambda c: c.update(chunks=[1]),
        lambda c: c.update(chunks={"1": c["chunks"]["0"]}),
    ],
)
def test_014_chunked_marker(mutate):
    c = chunked(np.arange(30, dtype=np.int32).reshape(3, 10), 8)
    mutate(c)
    expect_error(pack({"w": c}), "MSGPACK-014")


def test_014_chunked_key_rules_apply():
    raw = pack({"w": chunked(np.arange(4, dtype=np.int8), 2)})
    bad = raw.replace(b"\xa1\x31", b"\xa1\x30")  # chunks '0','0'
    expect_error(bad, "MSGPACK-007", "/w/chunks/0")


@pytest.mark.parametrize(
    "mutate,pointer",
    [
        (lambda c: c["chunks"].update({"0": 5}), "/w/chunks/0"),
        (lambda c: c["chunks"].update({"0": nd(np.int32(1), code=3)}), "/w/chunks/0"),
        (lambda c: c["chunks"].update({"1": nd(np.arange(8, dtype=np.int64))}), "/w/chunks/1"),
        (
            lambda c: c["chunks"].update({"1": nd(np.arange(8, dtype=np.int32).reshape(2, 4))}),
            "/w/chunks/1",
        ),
        (lambda c: c["chunks"].update({"3": nd(np.arange(1, dtype=np.int32))}), "/w/chunks"),
        (lambda c: c["chunks"].update({"3": nd(np.arange(0, dtype=np.int32))}), "/w/chunks/3"),
        (lambda c: c.update(chunks={}), "/w/chunks"),
    ],
)
def test_015_chunks(mutate, pointer):
    c = chunked(np.arange(24, dtype=np.int32).reshape(3, 8), 8)
    mutate(c)
    expect_error(pack({"w": c}), "MSGPACK-015", pointer)


def test_015_chunk_payload_rules_apply():
    c = chunked(np.arange(24, dtype=np.int32), 8)
    c["chunks"]["2"] = nd(np.arange(8, dtype=np.int32), name="object")
    expect_error(pack({"w": c}), "MSGPACK-010", "/w/chunks/2")


def test_016_bool_bytes():
    err = expect_error(
        pack({"b": nd(np.zeros(3, bool), data=b"\x01\x00\x02")}), "MSGPACK-016", "/b"
    )
    assert err.got == 2
    expect_error(pack({"b": nd(np.bool_(True), code=3, data=b"\xff")}), "MSGPACK-016", "/b")


def test_017_duplicate_param_names():
    tree = decode_checkpoint(pack({"a.b": "PLACEHOLDER://a.b", "a": {"b": "PLACEHOLDER://a.b"}}))
    with pytest.raises(MsgpackError) as info:
        placeholders(tree, file="item/checkpoint")
    assert_error(info, rule="MSGPACK-017", pointer="/a/b", file="item/checkpoint")


def test_pointer_escaping():
    expect_error(pack({"a/b": {"c~d": nd(np.int8(1), code=9)}}), "MSGPACK-008", "/a~1b/c~0d")


def test_every_rule_has_a_test():
    text = Path(__file__).read_text()
    for rule in RULES:
        assert f'"{rule}"' in text, rule


# --------------------------------------------------------------------------------------------
# fuzzing: nothing but MsgpackError escapes
# --------------------------------------------------------------------------------------------


def _decode_or_msgpack_error(data: bytes) -> None:
    try:
        tree = decode_checkpoint(data)
    except MsgpackError as e:
        assert isinstance(e, FormatError) and e.rule in RULES, e
        return
    json.dumps(to_json_view(tree), allow_nan=False)
    try:
        placeholders(tree)
    except MsgpackError as e:
        assert e.rule == "MSGPACK-017"


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.binary(max_size=256))
def test_fuzz_random_bytes(data):
    _decode_or_msgpack_error(data)


def _seed_inputs() -> list[bytes]:
    seeds = [
        pack(
            {
                "a": nd(np.arange(6, dtype=np.int32).reshape(2, 3)),
                "b": {"c": nd(np.float32(2.5), code=3), "d": [1, 2.0, "PLACEHOLDER://b.d.2", None]},
                "t": tup(cplx(1j), nd(np.array([True, False]))),
                "w": chunked(np.arange(6, dtype=np.int16), 4),
            }
        )
    ]
    for name in ("msgpack_aggregated", "msgpack_placeholders"):
        path = FIXTURES / name / "checkpoint" / "checkpoint"
        if path.is_file():
            seeds.append(path.read_bytes())
    return seeds


SEEDS = _seed_inputs()


@FUZZ
@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 10**6),
    st.booleans(),
)
def test_fuzz_mutated_valid_bytes(seed, edits, cut, do_cut):
    data = bytearray(seed)
    for at, value in edits:
        data[at % len(data)] = value
    if do_cut:
        data = data[: cut % (len(data) + 1)]
    _decode_or_msgpack_error(bytes(data))


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from(["PLACEHOLDER://x", "AGGREGATED://y.0"]),
    st.builds(
        lambda code, data: msgpack.ExtType(code, data), st.integers(0, 127), st.binary(max_size=24)
    ),
    st.builds(
        lambda shape, name, data: msgpack.ExtType(1, msgpack.packb([shape, name, data])),
        st.lists(st.integers(-2, 2**64 - 1), max_size=3),
        st.sampled_from(["int8", "float32", "bfloat16", "bool", "O", "int4"]),
        st.binary(max_size=16),
    ),
)
_tree = st.recursive(
    _leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1)), kids, max_size=4
        ),
        st.builds(lambda xs: msgpack.ExtType(4, msgpack.packb(xs)), st.lists(kids, max_size=3)),
        st.builds(
            lambda shape, n: chunked(np.arange(n, dtype=np.int8), 3) | {"shape": shape},
            st.dictionaries(st.sampled_from(["0", "1"]), st.integers(-1, 5)),
            st.integers(0, 7),
        ),
    ),
    max_leaves=12,
)


@FUZZ
@given(_tree)
def test_fuzz_structured(tree):
    try:
        data = msgpack.packb(tree)
    except (ValueError, OverflowError, TypeError):
        return
    _decode_or_msgpack_error(data)


def test_msgpack_001_values_a_decode_builds_are_bounded():
    """A decode builds a Python object for every value and map key: at most the limits'
    `max_json_values` of them (issue 32 item 1). Counted as one for the top-level value, the
    length of every array and twice that of every map; an array or map declaring more is
    refused before it is built."""
    from ockpt.limits import Limits, applied

    data = msgpack.packb({"a": [1, [2, 3], {"b": None}]})  # 1 + 2 + 3 + 2 + 2 values
    with applied(Limits(max_json_values=10)):
        assert decode_checkpoint(data) == {"a": [1, [2, 3], {"b": None}]}
    with applied(Limits(max_json_values=9)), pytest.raises(MsgpackError) as e:
        decode_checkpoint(data)
    assert e.value.rule == "MSGPACK-001" and e.value.expected == "<= 9 values and map keys"
    # many small containers: refused once their count passes the limit, not after the decode
    wide = msgpack.packb({"x": [[0] * 10 for _ in range(1_000)]})
    with applied(Limits(max_json_values=500)), pytest.raises(MsgpackError) as e:
        decode_checkpoint(wide)
    assert e.value.rule == "MSGPACK-001"
    # one array declaring more elements than the limit: refused from its header
    long = b"\x81\xa1x\xdd" + (3_000_000).to_bytes(4, "big") + b"\xc0" * 3_000_000
    with applied(Limits(max_json_values=1_000_000)), pytest.raises(MsgpackError) as e:
        decode_checkpoint(long)
    assert e.value.rule == "MSGPACK-001"
    assert len(decode_checkpoint(long)["x"]) == 3_000_000  # within the default




# ---------------------------------------------------------------------------------------------
# msgpack_legacy.py: the fields of each error (spec/msgpack.md).


def test_truncated_file_and_truncated_payload():
    e = _error(b"\x92\x01")  # an array of 2 that holds 1
    assert (e.rule, e.message, e.pointer) == (
        "MSGPACK-003",
        "data ends inside the msgpack value",
        "@2",
    )
    assert (e.expected, e.got) == ("more bytes", "2 bytes")
    e = _error(msgpack.packb({"c": msgpack.ExtType(2, b"\x92\xcb")}))
    assert (e.rule, e.pointer) == ("MSGPACK-009", "/c")
    assert e.message == "complex (ext 2) payload: payload ends inside its msgpack value"
    assert (e.expected, e.got) == ("more bytes", "2 bytes")


@pytest.mark.parametrize(
    ("payload", "got"),
    [
        ([1.0], "array"),
        ({"a": 1.0}, "map"),
        (msgpack.ExtType(5, b""), "ext 5"),
        (7, "int 7"),
        ("x" * 38, "str '" + "x" * 38 + "'"),  # a repr of 40 characters: whole
        ("x" * 39, "str '" + "x" * 39 + "..."),  # 41: cut at 40
    ],
)
def test_bad_complex_payload_describes_what_it_found(payload, got):
    e = _error(msgpack.packb({"c": msgpack.ExtType(2, msgpack.packb(payload))}))
    assert (e.rule, e.pointer) == ("MSGPACK-009", "/c")
    assert e.message == "complex (ext 2) payload must be [real, imag] floats"
    assert (e.expected, e.got) == ("[float, float]", got)


def test_a_missing_checkpoint_file(tmp_path):
    name = str(tmp_path / "checkpoint")
    with pytest.raises(NotACheckpointError) as info:
        read_checkpoint_file(name)
    e = info.value
    assert (e.rule, e.file) == ("LOAD-050", name)
    assert e.message == "cannot read the msgpack checkpoint file (No such file or directory)"


def _ndarray(array: np.ndarray) -> msgpack.ExtType:
    """An ndarray as Orbax's msgpack writer stores it (ext 1)."""
    return msgpack.ExtType(1, msgpack.packb([list(array.shape), array.dtype.name, array.tobytes()]))


def test_chunked_array_of_eleven_chunks_in_index_order():
    """Keys '0'..'10' are read by their number ('10' after '9'), not in text order."""
    array = np.arange(11, dtype=np.int32)
    chunks = {str(i): _ndarray(array[i : i + 1]) for i in range(11)}
    raw = {"__msgpack_chunked_array__": True, "shape": {"0": 11}, "chunks": chunks}
    assert decode_checkpoint(msgpack.packb({"w": raw}))["w"].tolist() == array.tolist()


def test_chunked_array_index_maps_say_what_is_wrong():
    piece = _ndarray(np.arange(2, dtype=np.int8))
    raw = {"__msgpack_chunked_array__": True, "shape": [2], "chunks": {"0": piece}}
    e = _error(msgpack.packb({"w": raw}))
    assert (e.rule, e.pointer) == ("MSGPACK-014", "/w/shape")
    assert e.message == "chunked array 'shape' must be a map"
    assert (e.expected, e.got) == ("map", "array")
    raw = {"__msgpack_chunked_array__": True, "shape": {"0": 18}}
    raw["chunks"] = {str(i): piece for i in range(1, 10)}  # '1'..'9': no '0'
    e = _error(msgpack.packb({"w": raw}))
    assert (e.rule, e.pointer) == ("MSGPACK-014", "/w/chunks")
    assert e.message == "chunked array 'chunks' keys must be '0'..'n-1'"
    assert e.expected == [str(i) for i in range(8)]
    assert e.got == [str(i) for i in range(1, 9)]




MAX_NDIM = LIMITS.max_ndim
MARKER = "__msgpack_chunked_array__"


def _error(tree_or_bytes) -> MsgpackError:
    data = tree_or_bytes if isinstance(tree_or_bytes, bytes) else msgpack.packb(tree_or_bytes)
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(data, file="ckpt")
    return info.value


def _ext(code: int, payload) -> msgpack.ExtType:
    """An ext value whose payload is one msgpack value."""
    return msgpack.ExtType(code, msgpack.packb(payload))


def _nd(array: np.ndarray, name: str | None = None) -> msgpack.ExtType:
    """An ndarray as Orbax's msgpack writer stores it (ext 1)."""
    return _ext(1, [list(array.shape), name or array.dtype.name, array.tobytes()])


def _root(array: np.ndarray) -> object:
    """The object at the end of an array's ``.base`` chain (what owns its memory)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


# --------------------------------------------------------------------------------------------
# _unpack: the container layer


def test_extra_bytes_after_the_file_and_after_a_payload():
    """Trailing bytes are MSGPACK-004 at the offset where the value ended (the file) or
    MSGPACK-009 at the ext value (a payload), with the lengths. Kills `_unpack` 34, 36, 37,
    41, 42, 45, 46, 48, 50, 51, 55, 56 (ids at 88f069a)."""
    e = _error(msgpack.packb({"a": 1}) + b"\xc0")
    assert error_fields(e) == {
        "rule": "MSGPACK-004",
        "file": "ckpt",
        "message": "extra bytes after the top-level msgpack value",
        "pointer": "@4",
        "expected": "4 bytes",
        "got": "5 bytes",
    }
    e = _error({"t": msgpack.ExtType(4, msgpack.packb([1]) + b"\xc0")})
    assert error_fields(e) == {
        "rule": "MSGPACK-009",
        "file": "ckpt",
        "message": "tuple (ext 4) payload: extra bytes after the payload value",
        "pointer": "/t",
        "expected": "2 bytes",
        "got": "3 bytes",
    }


def test_nesting_past_the_unpackers_stack_in_the_file_and_in_a_payload():
    """msgpack's own stack limit is MSGPACK-005: for the file with no pointer, for an ext
    payload at the ext value. Kills `_unpack` 61, 62, 63, 67, 71, 73 (ids at 88f069a)."""
    e = _error(b"\x91" * 100_000 + b"\xc0")
    assert error_fields(e) == {
        "rule": "MSGPACK-005",
        "file": "ckpt",
        "message": "checkpoint: msgpack nesting exceeds the unpacker's stack",
        "pointer": None,
        "expected": f"depth <= {MAX_DEPTH}",
    }
    e = _error({"t": msgpack.ExtType(4, b"\x91" * 5000 + b"\xc0")})
    assert error_fields(e) == {
        "rule": "MSGPACK-005",
        "file": "ckpt",
        "message": "tuple (ext 4) payload: msgpack nesting exceeds the unpacker's stack",
        "pointer": "/t",
        "expected": f"depth <= {MAX_DEPTH}",
    }


def _in_tuple(payload: bytes) -> bytes:
    """A file whose one value is a tuple (ext 4) with these payload bytes."""
    return msgpack.packb({"t": msgpack.ExtType(4, payload)})


@pytest.mark.parametrize(
    ("payload", "file_error", "payload_error"),
    [
        (  # msgpack raises UnicodeDecodeError
            b"\xa1\xff",
            {
                "rule": "MSGPACK-002",
                "file": "ckpt",
                "message": "checkpoint: a string is not valid UTF-8 (invalid start byte)",
                "pointer": None,
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": (
                    "tuple (ext 4) payload: a string is not valid UTF-8 (invalid start byte)"
                ),
                "pointer": "/t",
            },
        ),
        (  # a map of 2 in 3 bytes: its first key is read (msgpack's default limit, n // 2
            # entries, would refuse the header first and call it truncated)
            b"\x82\xa1\xff",
            {
                "rule": "MSGPACK-002",
                "file": "ckpt",
                "message": "checkpoint: a string is not valid UTF-8 (invalid start byte)",
                "pointer": None,
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": (
                    "tuple (ext 4) payload: a string is not valid UTF-8 (invalid start byte)"
                ),
                "pointer": "/t",
            },
        ),
        (  # ValueError "15 exceeds max_array_len(1)": a header longer than the input
            b"\x9f",
            {
                "rule": "MSGPACK-003",
                "file": "ckpt",
                "message": "data ends inside the msgpack value",
                "pointer": "@1",
                "expected": "more bytes",
                "got": "1 bytes",
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": "tuple (ext 4) payload: payload ends inside its msgpack value",
                "pointer": "/t",
                "expected": "more bytes",
                "got": "1 bytes",
            },
        ),
        (  # ValueError "incomplete input"
            b"\x92\x01",
            {
                "rule": "MSGPACK-003",
                "file": "ckpt",
                "message": "data ends inside the msgpack value",
                "pointer": "@2",
                "expected": "more bytes",
                "got": "2 bytes",
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": "tuple (ext 4) payload: payload ends inside its msgpack value",
                "pointer": "/t",
                "expected": "more bytes",
                "got": "2 bytes",
            },
        ),
        (  # another ValueError: a timestamp (ext -1) of 1 byte (msgpack's text varies)
            b"\xd4\xff\x00",
            {
                "rule": "MSGPACK-002",
                "file": "ckpt",
                "message": ("checkpoint: not well-formed msgpack (ValueError: ", ")"),
                "pointer": None,
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": ("tuple (ext 4) payload: not well-formed msgpack (ValueError: ", ")"),
                "pointer": "/t",
            },
        ),
        (  # msgpack.FormatError (a ValueError): 0xc1 is never used
            b"\xc1",
            {
                "rule": "MSGPACK-002",
                "file": "ckpt",
                "message": "checkpoint: not well-formed msgpack (FormatError: )",
                "pointer": None,
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": "tuple (ext 4) payload: not well-formed msgpack (FormatError: )",
                "pointer": "/t",
            },
        ),
    ],
    ids=["utf8", "utf8-map-key", "exceeds-max", "incomplete", "ValueError", "FormatError"],
)
def test_malformed_msgpack_in_the_file_and_in_a_payload(payload, file_error, payload_error):
    """Each kind of malformed msgpack gives its rule: MSGPACK-002 / -003 for the file (no
    pointer, or the offset where the data ends), MSGPACK-009 at the ext value for a payload.
    Kills `_unpack` 24 (``max_map_len`` left to msgpack's default), 98, 105, 106, 111 (the
    UnicodeDecodeError branch), 140, 145 (the ValueError branch) and `decode_checkpoint` 37,
    42, 43 (the file's ``what``) (ids at 88f069a)."""
    for got, want in [
        (error_fields(_error(payload)), file_error),
        (error_fields(_error(_in_tuple(payload))), payload_error),
    ]:
        if isinstance(want["message"], tuple):  # (start, end) around msgpack's own words
            start, end = want["message"]
            assert got["message"].startswith(start) and got["message"].endswith(end), got
            want = {**want, "message": got["message"]}
        assert got == want


def _failing_unpackb(monkeypatch, exc: BaseException, *, after: int) -> None:
    """Make msgpack.unpackb raise `exc` from its call number `after` + 1 on."""
    real = msgpack.unpackb
    calls = []

    def unpackb(data, **kwargs):
        calls.append(1)
        if len(calls) > after:
            raise exc
        return real(data, **kwargs)

    monkeypatch.setattr(msgpack, "unpackb", unpackb)


@pytest.mark.parametrize(
    ("exc", "file_error", "payload_error"),
    [
        (
            RecursionError("deep"),
            {
                "rule": "MSGPACK-005",
                "file": "ckpt",
                "message": "checkpoint: nesting too deep",
                "pointer": None,
                "expected": f"depth <= {MAX_DEPTH}",
            },
            {
                "rule": "MSGPACK-005",
                "file": "ckpt",
                "message": "tuple (ext 4) payload: nesting too deep",
                "pointer": "/t",
                "expected": f"depth <= {MAX_DEPTH}",
            },
        ),
        (
            msgpack.OutOfData(),
            {
                "rule": "MSGPACK-003",
                "file": "ckpt",
                "message": "data ends inside the msgpack value",
                "pointer": "@3",
                "expected": "more bytes",
                "got": "3 bytes",
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": "tuple (ext 4) payload: payload ends inside its msgpack value",
                "pointer": "/t",
                "expected": "more bytes",
                "got": "2 bytes",
            },
        ),
        (
            OverflowError("too big"),
            {
                "rule": "MSGPACK-002",
                "file": "ckpt",
                "message": "checkpoint: not well-formed msgpack (OverflowError: too big)",
                "pointer": None,
            },
            {
                "rule": "MSGPACK-009",
                "file": "ckpt",
                "message": (
                    "tuple (ext 4) payload: not well-formed msgpack (OverflowError: too big)"
                ),
                "pointer": "/t",
            },
        ),
    ],
    ids=["RecursionError", "OutOfData", "other"],
)
def test_what_only_other_msgpack_builds_raise(monkeypatch, exc, file_error, payload_error):
    """RecursionError (msgpack's pure-Python unpacker on deep nesting), OutOfData and any other
    exception are not raised by the installed C unpacker for these inputs; `msgpack.unpackb`
    is made to raise them (for the file, then for a payload after the file decoded).
    Kills `_unpack` 74-81 (OutOfData), 82-95 (RecursionError), 150-168 (any other exception)
    (ids at 88f069a)."""
    _failing_unpackb(monkeypatch, exc, after=0)
    assert error_fields(_error(b"\x92\x01\x02")) == file_error
    monkeypatch.undo()
    _failing_unpackb(monkeypatch, exc, after=1)
    assert error_fields(_error(_in_tuple(b"\x91\x01"))) == payload_error


def test_a_value_of_a_type_msgpack_never_gives(monkeypatch):
    """The last guard of `_decode_value`, for a value of a type the unpacker options never
    produce (here `msgpack.unpackb` is made to return a complex inside an array). Kills
    `_decode_value` 81-89 (ids at 88f069a)."""
    monkeypatch.setattr(msgpack, "unpackb", lambda data, **kwargs: [1, 2j])
    e = _error(b"\x92\x01\x02")
    assert error_fields(e) == {
        "rule": "MSGPACK-002",
        "file": "ckpt",
        "message": "unexpected msgpack value of type complex",
        "pointer": "/1",
    }


# --------------------------------------------------------------------------------------------
# _decode_value, _decode_ext: ext type codes


def test_a_timestamp_ext_is_an_unknown_ext_type():
    """msgpack's timestamp (ext -1) is refused as ext code -1 (MSGPACK-008), with the codes
    that are known. Kills `_decode_value` 61, 63, 64, 68, 69, 72, 73, 75-80 (ids at 88f069a)."""
    e = _error({"t": msgpack.Timestamp(1, 0)})
    assert error_fields(e) == {
        "rule": "MSGPACK-008",
        "file": "ckpt",
        "message": "unknown ext type code",
        "pointer": "/t",
        "expected": [1, 2, 3, 4],
        "got": -1,
    }


def test_an_unknown_ext_code_names_the_known_ones():
    """Kills `_decode_ext` 84, 89, 93, 94, 96-99 (ids at 88f069a)."""
    e = _error({"e": msgpack.ExtType(5, b"")})
    assert error_fields(e) == {
        "rule": "MSGPACK-008",
        "file": "ckpt",
        "message": "unknown ext type code",
        "pointer": "/e",
        "expected": [1, 2, 3, 4],
        "got": 5,
    }


def test_tuple_payload_errors_and_item_pointers():
    """A tuple (ext 4) payload that is no array, or ends early, is MSGPACK-009 naming the
    tuple; an error inside a tuple item points at the item's index. Kills `_decode_ext` 40, 45,
    46, 50, 52, 53, 57, 58, 61, 62, 64, 65, 66, 77 (ids at 88f069a)."""
    e = _error({"t": _ext(4, 7)})
    assert error_fields(e) == {
        "rule": "MSGPACK-009",
        "file": "ckpt",
        "message": "tuple (ext 4) payload must be a msgpack array",
        "pointer": "/t",
        "expected": "array",
        "got": "int 7",
    }
    e = _error({"t": msgpack.ExtType(4, b"\x92\x01")})
    assert error_fields(e) == {
        "rule": "MSGPACK-009",
        "file": "ckpt",
        "message": "tuple (ext 4) payload: payload ends inside its msgpack value",
        "pointer": "/t",
        "expected": "more bytes",
        "got": "2 bytes",
    }
    e = _error({"t": _ext(4, [1, msgpack.ExtType(9, b"")])})
    assert (e.rule, e.pointer) == ("MSGPACK-008", "/t/1")


def test_tuples_nest_exactly_to_the_depth_limit():
    """Each tuple (ext 4) is one level deeper than its parent: MAX_DEPTH nested tuples decode,
    one more is MSGPACK-005. Kills `_decode_ext` 79 (ids at 88f069a)."""
    t = None
    for _ in range(MAX_DEPTH):
        t = _ext(4, [t])
    tree = decode_checkpoint(msgpack.packb(t))
    for _ in range(MAX_DEPTH):
        assert type(tree) is tuple and len(tree) == 1
        tree = tree[0]
    assert tree is None
    assert _error(_ext(4, [t])).rule == "MSGPACK-005"


# --------------------------------------------------------------------------------------------
# _check_depth, _map_items


def test_containers_nest_too_deep_says_how_deep():
    """Kills `_check_depth` 3, 5, 6, 10, 11, 14, 15 (ids at 88f069a)."""
    deep: object = None
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    e = _error(deep)
    assert error_fields(e) == {
        "rule": "MSGPACK-005",
        "file": "ckpt",
        "message": "containers nest too deep",
        "pointer": "/0" * MAX_DEPTH,
        "expected": f"depth < {MAX_DEPTH}",
        "got": MAX_DEPTH,
    }


def test_map_key_errors_in_full():
    """A non-string key (MSGPACK-006) says what it found; a repeated key (MSGPACK-007) names
    itself. Kills `_map_items` 5, 8, 13, 16, 17, 21, 24 (ids at 88f069a)."""
    e = _error({"a": {1: 1}})
    assert error_fields(e) == {
        "rule": "MSGPACK-006",
        "file": "ckpt",
        "message": "map key is not a string",
        "pointer": "/a",
        "expected": "str",
        "got": "int 1",
    }
    e = _error(b"\x81\xa1b\x82\xa1x\x01\xa1x\x02")  # {"b": {"x": 1, "x": 2}}
    assert error_fields(e) == {
        "rule": "MSGPACK-007",
        "file": "ckpt",
        "message": "map key 'x' appears twice",
        "pointer": "/b/x",
    }


# --------------------------------------------------------------------------------------------
# _decode_array: the payload of ext 1 and ext 3


@pytest.mark.parametrize(("code", "what"), [(1, "ndarray (ext 1)"), (3, "numpy scalar (ext 3)")])
def test_array_payload_errors_name_the_ext_type(code, what):
    """Every MSGPACK-009 of an array payload names its ext type, with what was expected and
    found. Kills `_decode_array` 1-7, 12, 22-27, 29, 31, 32, 36, 37, 41, 42, 47, 49, 50, 54,
    55, 59, 60, 61, 65, 67, 68, 72, 73, 77, 78, 79, 84 and `_resolve_dtype` 4, 6, 7, 11, 12,
    16, 17, 18 (ids at 88f069a)."""

    def fields(payload) -> dict:
        return error_fields(_error({"a": _ext(code, payload)}))

    def at_a(message: str, expected: str, got: str) -> dict:
        return {
            "rule": "MSGPACK-009",
            "file": "ckpt",
            "message": message,
            "pointer": "/a",
            "expected": expected,
            "got": got,
        }

    assert fields(7) == at_a(
        f"{what} payload must be [shape, dtype name, data]", "array of 3", "int 7"
    )
    assert fields([[], "int8"]) == at_a(
        f"{what} payload must be [shape, dtype name, data]", "array of 3", "array of 2"
    )
    assert error_fields(_error({"a": msgpack.ExtType(code, b"\x93\x90")})) == at_a(
        f"{what} payload: payload ends inside its msgpack value", "more bytes", "2 bytes"
    )
    assert fields([5, "int8", b""]) == at_a(
        f"{what}: shape must be a msgpack array", "array", "int 5"
    )
    assert fields([[], "int8", "x"]) == at_a(f"{what}: data must be msgpack bin", "bin", "str 'x'")
    assert fields([[], 5, b""]) == at_a(f"{what}: dtype name must be a string", "str", "int 5")


def test_a_numpy_scalar_with_a_shape():
    """Kills `_decode_array` 102, 104, 105, 109, 110, 113, 114 (ids at 88f069a)."""
    e = _error({"s": _ext(3, [[1], "int8", b"\x01"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-013",
        "file": "ckpt",
        "message": "numpy scalar (ext 3) must have shape []",
        "pointer": "/s",
        "expected": [],
        "got": [1],
    }


def test_shape_and_size_errors_name_the_ext_type():
    """The `what` passed on to the shape and size checks. Kills `_decode_array` 94, 123 and
    `_array_from_bytes` 6 (ids at 88f069a)."""
    e = _error({"a": _ext(1, [[-1], "int8", b""])})
    assert e.message == "ndarray (ext 1): shape entries must be non-negative ints"
    e = _error({"a": _ext(1, [[2], "int16", b"\x00"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-012",
        "file": "ckpt",
        "message": "ndarray (ext 1): data size does not match shape and dtype [2] int16",
        "pointer": "/a",
        "expected": 4,
        "got": 1,
    }


# --------------------------------------------------------------------------------------------
# _resolve_dtype


def test_a_dtype_name_that_is_not_allowed_is_shown_cut_at_40_characters():
    """Kills `_resolve_dtype` 27 (an unknown name is not an ml_dtypes name), 41-46, 48, 50,
    55, 60, 61 (ids at 88f069a)."""
    expected = "a numpy or ml_dtypes name such as 'float32' or 'bfloat16'"
    for name, shown in [
        ("float33", "float33"),
        ("x" * 40, "x" * 40),
        ("x" * 41, "x" * 40 + "..."),
    ]:
        e = _error({"a": _ext(1, [[], name, b"\x00"])})
        assert error_fields(e) == {
            "rule": "MSGPACK-010",
            "file": "ckpt",
            "message": "ndarray (ext 1): dtype name is not allowed",
            "pointer": "/a",
            "expected": expected,
            "got": shown,
        }


def test_an_ml_dtypes_name_the_installed_package_lacks(monkeypatch):
    """A name of `dtypes.EXTENSION_NAMES` missing from `dtypes.SUPPORTED` (an older ml_dtypes
    package, simulated by removing it from the table) says a newer package is needed.
    Kills `_resolve_dtype` 28-38 (ids at 88f069a)."""
    table = {k: v for k, v in dtypes.SUPPORTED.items() if k != "float8_e8m0fnu"}
    monkeypatch.setattr(dtypes, "SUPPORTED", table)
    e = _error({"a": _ext(1, [[], "float8_e8m0fnu", b"\x7f"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-010",
        "file": "ckpt",
        "message": (
            "ndarray (ext 1): dtype 'float8_e8m0fnu' needs a newer ml_dtypes package than the "
            "one installed"
        ),
        "pointer": "/a",
        "got": "float8_e8m0fnu",
    }


def test_decoded_dtypes_are_little_endian_numpy_and_native_ml_dtypes():
    """numpy dtypes come back explicitly little-endian (``'<'``: data is little-endian on any
    host); ml_dtypes types, which exist in native order only, come back as the package defines
    them (``'='``; big-endian hosts swap their bytes in `_array_from_bytes`).
    Kills `_resolve_dtype` 21, 22, 23, 24 (ids at 88f069a)."""
    tree = decode_checkpoint(
        msgpack.packb(
            {
                "f": _nd(np.arange(3, dtype="<f4")),
                "i": _nd(np.arange(3, dtype="<i8")),
                "b": _nd(np.arange(3, dtype=ml_dtypes.bfloat16)),
            }
        )
    )
    assert tree["f"].dtype.byteorder == "<" and tree["i"].dtype.byteorder == "<"
    assert tree["b"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert tree["b"].dtype.byteorder == "="
    assert tree["b"].tolist() == [0.0, 1.0, 2.0]


# --------------------------------------------------------------------------------------------
# _check_shape


def test_too_many_dimensions_and_a_bad_shape_entry():
    """Kills `_check_shape` 3, 5, 6, 10, 11, 21, 23, 24, 28, 29, 33, 34, 35 (ids at
    88f069a)."""
    e = _error({"a": _ext(1, [[1] * (MAX_NDIM + 1), "int8", b"\x00"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-011",
        "file": "ckpt",
        "message": "ndarray (ext 1): too many dimensions",
        "pointer": "/a",
        "expected": f"<= {MAX_NDIM}",
        "got": MAX_NDIM + 1,
    }
    e = _error({"a": _ext(1, [[2, -1], "int8", b""])})
    assert error_fields(e) == {
        "rule": "MSGPACK-011",
        "file": "ckpt",
        "message": "ndarray (ext 1): shape entries must be non-negative ints",
        "pointer": "/a",
        "expected": "uint",
        "got": "int -1",
    }


def test_the_shape_bound_is_the_product_of_all_extents_up_to_int64_max():
    """size * itemsize is bounded by 2**63 - 1, over all extents (zeros count as 1): at the
    bound the shape passes (and the missing data is MSGPACK-012), one step over it is
    MSGPACK-011. Kills `_check_shape` 37, 38, 44, 46, 48, 49, 53, 54 (ids at 88f069a)."""
    at_bound = [7, 7, 73, 127, 337, 92737, 649657]  # product: 2**63 - 1
    e = _error({"a": _ext(1, [at_bound, "int8", b""])})
    assert (e.rule, e.expected, e.got) == ("MSGPACK-012", 2**63 - 1, 0)
    e = _error({"a": _ext(1, [[2**32, 0, 2**32], "int8", b""])})
    assert error_fields(e) == {
        "rule": "MSGPACK-011",
        "file": "ckpt",
        "message": "ndarray (ext 1): shape too large",
        "pointer": "/a",
        "expected": f"size * itemsize <= {2**63 - 1}",
        "got": [2**32, 0, 2**32],
    }
    e = _error({"a": _ext(1, [[2**62, 1], "int16", b""])})  # 2**63 bytes: one over
    assert (e.rule, e.message) == ("MSGPACK-011", "ndarray (ext 1): shape too large")


# --------------------------------------------------------------------------------------------
# _array_from_bytes


def test_a_bool_byte_that_is_not_0_or_1():
    """Kills `_array_from_bytes` 37, 39, 44, 49, 50 (ids at 88f069a)."""
    e = _error({"a": _ext(1, [[3], "bool", b"\x00\x01\x02"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-016",
        "file": "ckpt",
        "message": "ndarray (ext 1): bool data byte 2 is not 0 or 1",
        "pointer": "/a",
        "expected": "0 or 1",
        "got": 2,
    }


def test_arrays_are_read_only_views_of_the_payload_on_a_little_endian_host():
    """On a little-endian host no dtype needs a byte swap: every array is a read-only view of
    its payload bytes, never a copy. Kills `_array_from_bytes` 52, 58, 59, 60 (ids at
    88f069a), which send ml_dtypes arrays through the big-endian copy."""
    arrays = {
        "b": np.arange(4, dtype=ml_dtypes.bfloat16),
        "f": np.arange(4, dtype="<f4"),
        "e": np.arange(4, dtype=ml_dtypes.float8_e4m3fn),
    }
    tree = decode_checkpoint(msgpack.packb({k: _nd(v) for k, v in arrays.items()}))
    for key, want in arrays.items():
        got = tree[key]
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
        assert type(_root(got)) is bytes, key
        assert not got.flags.writeable


def test_the_big_endian_path_swaps_ml_dtypes_arrays_only(monkeypatch):
    """As on a big-endian host (`sys.byteorder` seen by the module set to ``"big"``; on this
    little-endian machine the swap itself is a no-op): multi-byte ml_dtypes arrays go through
    the unsigned-view swap, a copy with the same values; numpy dtypes (explicit ``'<'``) and
    one-byte types are still views of the payload. Kills `_array_from_bytes` 54, 55, 56, 61-73
    (ids at 88f069a)."""
    monkeypatch.setattr(msgpack_legacy, "sys", types.SimpleNamespace(byteorder="big"))
    arrays = {
        "b": np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3),
        "f": np.arange(6, dtype="<f4").reshape(3, 2),
        "e": np.arange(4, dtype=ml_dtypes.float8_e4m3fn),
    }
    tree = decode_checkpoint(msgpack.packb({k: _nd(v) for k, v in arrays.items()}))
    for key, want in arrays.items():
        got = tree[key]
        assert got.dtype == want.dtype and got.shape == want.shape, key
        assert got.tolist() == want.tolist(), key
        assert not got.flags.writeable
    assert type(_root(tree["b"])) is np.ndarray  # swapped into new memory
    assert type(_root(tree["f"])) is bytes and type(_root(tree["e"])) is bytes


def test_numpy_failing_to_build_the_array_is_msgpack_011(monkeypatch):
    """The guard around numpy (out of memory in the big-endian copy, or numpy refusing the
    buffer), reached here by making `np.frombuffer` fail. Kills `_array_from_bytes` 80-91 (ids
    at 88f069a)."""

    def fail(*args, **kwargs):
        raise MemoryError("no memory")

    monkeypatch.setattr(np, "frombuffer", fail)
    e = _error({"a": _ext(1, [[2], "int16", b"\x00\x00\x00\x00"])})
    assert error_fields(e) == {
        "rule": "MSGPACK-011",
        "file": "ckpt",
        "message": "ndarray (ext 1): numpy cannot represent this array (no memory)",
        "pointer": "/a",
        "got": [2],
    }


# --------------------------------------------------------------------------------------------
# _decode_chunked


def _chunked(**fields) -> dict:
    piece = _nd(np.arange(2, dtype=np.int8))
    raw = {MARKER: True, "shape": {"0": 2}, "chunks": {"0": piece}}
    raw.update(fields)
    return {"w": raw}


def test_chunked_array_map_keys_and_marker():
    """Kills `_decode_chunked` 10-13, 17, 18, 21, 22, 26, 30-33, 37, 38, 41, 42, 45, 46 (ids
    at 88f069a)."""
    tree = _chunked()
    tree["w"].pop("chunks")
    tree["w"].update({c: 0 for c in "abcdefghi"})  # 12 keys: 8 shown
    e = _error(tree)
    assert error_fields(e) == {
        "rule": "MSGPACK-014",
        "file": "ckpt",
        "message": "chunked array map has wrong keys",
        "pointer": "/w",
        "expected": [MARKER, "chunks", "shape"],
        "got": [MARKER, "a", "b", "c", "d", "e", "f", "g"],
    }
    e = _error(_chunked(**{MARKER: 1}))
    assert error_fields(e) == {
        "rule": "MSGPACK-014",
        "file": "ckpt",
        "message": "chunked array marker must be true",
        "pointer": f"/w/{MARKER}",
        "expected": True,
        "got": "int 1",
    }


def test_chunked_array_chunk_errors():
    """No chunks, a chunk that is no ext 1, a chunk that is not 1-D, chunks of two dtypes,
    and too few elements for the shape. Kills `_decode_chunked` 78, 80, 81, 85, 86, 89, 90,
    95, 96, 97, 111, 113, 114, 118, 119, 122, 123, 125, 126, 127, 144, 146, 147, 151, 152,
    155-157, 159, 160, 166, 168, 169, 173, 174, 177, 178, 201, 203, 204, 208, 209 (ids at
    88f069a)."""
    e = _error(_chunked(chunks={}))
    assert error_fields(e) == {
        "rule": "MSGPACK-015",
        "file": "ckpt",
        "message": "chunked array has no chunks",
        "pointer": "/w/chunks",
        "expected": ">= 1 chunk",
        "got": 0,
    }
    e = _error(_chunked(chunks={"0": 5}))
    assert error_fields(e) == {
        "rule": "MSGPACK-015",
        "file": "ckpt",
        "message": "a chunk must be an ndarray (ext 1)",
        "pointer": "/w/chunks/0",
        "expected": "ext 1",
        "got": "int 5",
    }
    e = _error(_chunked(chunks={"0": _nd(np.zeros((1, 2), np.int8))}))
    assert error_fields(e) == {
        "rule": "MSGPACK-015",
        "file": "ckpt",
        "message": "a chunk must be a non-empty 1-D array",
        "pointer": "/w/chunks/0",
        "expected": "shape [n], n >= 1",
        "got": [1, 2],
    }
    two = {"0": _nd(np.zeros(1, np.int8)), "1": _nd(np.zeros(1, np.int16))}
    e = _error(_chunked(chunks=two))
    assert error_fields(e) == {
        "rule": "MSGPACK-015",
        "file": "ckpt",
        "message": "chunks must share one dtype",
        "pointer": "/w/chunks/1",
        "expected": "int8",
        "got": "int16",
    }
    e = _error(_chunked(shape={"0": 5}))
    assert error_fields(e) == {
        "rule": "MSGPACK-015",
        "file": "ckpt",
        "message": "chunks hold 2 elements, shape [5] needs 5",
        "pointer": "/w/chunks",
        "expected": 5,
        "got": 2,
    }


def test_a_chunked_array_shape_error_points_at_its_shape():
    """The chunked shape is checked as "chunked array" at ``.../shape``. Kills
    `_decode_chunked` 47, 48, 49, 187, 194, 195 (ids at 88f069a)."""
    e = _error(_chunked(shape={"0": -2}))
    assert error_fields(e) == {
        "rule": "MSGPACK-011",
        "file": "ckpt",
        "message": "chunked array: shape entries must be non-negative ints",
        "pointer": "/w/shape",
        "expected": "uint",
        "got": "int -2",
    }


# --------------------------------------------------------------------------------------------
# read_checkpoint_file


def test_read_checkpoint_file_passes_its_size_limit_to_the_decoder(tmp_path, monkeypatch):
    """A limit above the 16 GiB default holds for the decoder too: a (sparse, memory-mapped)
    file one byte over 16 GiB, under the caller's limit, is decoded (here: refused as not
    well-formed, MSGPACK-002), not refused by size. `read_file` is replaced by a map of the
    file so the test reads no 16 GiB. Kills `read_checkpoint_file` 27 (ids at 88f069a)."""
    size = LIMITS.max_msgpack_bytes + 1
    path = tmp_path / "checkpoint"
    with open(path, "wb") as f:
        f.write(b"\xc1")  # a byte msgpack never uses
        f.truncate(size)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    view = memoryview(mapped)

    def read_file(name, *, limit, rule, error):
        assert (name, limit, rule, error) == (str(path), 2**40, "MSGPACK-001", MsgpackError)
        return view

    monkeypatch.setattr(msgpack_legacy, "read_file", read_file)
    try:
        with pytest.raises(MsgpackError) as info:
            read_checkpoint_file(path, max_bytes=2**40)
        rule = info.value.rule
    finally:
        view.release()
        mapped.close()
    assert rule == "MSGPACK-002"


# --------------------------------------------------------------------------------------------
# to_json_view, _view, _json_float


def _nest(kind: str, levels: int) -> object:
    """None inside `levels` containers of one kind."""
    x: object = None
    for _ in range(levels):
        x = {"k": x} if kind == "dict" else (x,) if kind == "tuple" else [x]
    return x


@pytest.mark.parametrize("kind", ["dict", "tuple", "list"])
def test_to_json_view_nests_to_max_depth_plus_2(kind):
    """A leaf at depth MAX_DEPTH + 2 (the top level is 0) is viewed, one level more is a
    ValueError; each kind of container adds one level. Kills `to_json_view` 5, `_view` 1-6, 50,
    51, 66, 67, 72, 73 (ids at 88f069a)."""
    view = to_json_view(_nest(kind, MAX_DEPTH + 2))
    for _ in range(MAX_DEPTH + 2):
        view = view["k"] if kind == "dict" else view["__tuple__"][0] if kind == "tuple" else view[0]
    assert view is None
    with pytest.raises(ValueError) as info:
        to_json_view(_nest(kind, MAX_DEPTH + 3))
    assert str(info.value) == "tree nests too deep for to_json_view"


def test_to_json_view_refuses_what_decoding_never_gives():
    """Kills `_view` 74, 75 (ids at 88f069a)."""
    with pytest.raises(TypeError) as info:
        to_json_view({"a": {1, 2}})
    assert str(info.value) == "to_json_view: not a decoded checkpoint value: set"


# --------------------------------------------------------------------------------------------
# placeholders, _walk


@pytest.mark.parametrize("kind", ["dict", "tuple", "list"])
def test_placeholders_walk_to_max_depth_plus_2(kind):
    """Kills `placeholders` 9, `_walk` 1-6, 15, 16, 26, 27 (ids at 88f069a)."""
    leaf = Placeholder(param_name="w", scheme="PLACEHOLDER")

    def nest(levels: int) -> object:
        x: object = leaf
        for _ in range(levels):
            x = {"k": x} if kind == "dict" else (x,) if kind == "tuple" else [x]
        return x

    assert placeholders(nest(MAX_DEPTH + 2)) == {"w": leaf}
    with pytest.raises(ValueError) as info:
        placeholders(nest(MAX_DEPTH + 3))
    assert str(info.value) == "tree nests too deep"


def test_a_param_name_used_twice_names_both_places():
    """Kills `placeholders` 11, `_walk` 25 (ids at 88f069a)."""
    tree = decode_checkpoint(msgpack.packb({"a": ["PLACEHOLDER://p", "AGGREGATED://p"]}))
    with pytest.raises(MsgpackError) as info:
        placeholders(tree, file="ckpt")
    assert error_fields(info.value) == {
        "rule": "MSGPACK-017",
        "file": "ckpt",
        "message": "param name 'p' is also used at '/a/0'",
        "pointer": "/a/1",
    }


# --------------------------------------------------------------------------------------------
# decode_checkpoint: bytes-like input and the size limit

DATA = msgpack.packb({"ab": "xyz"})  # 8 bytes


def _views() -> dict[str, memoryview]:
    """Views of DATA's 8 bytes of other shapes and item sizes."""
    words = np.frombuffer(DATA, dtype=np.uint32)
    spread = np.zeros(4, dtype=np.uint32)
    spread[::2] = words
    return {
        "u16": memoryview(DATA).cast("H"),
        "u32": memoryview(DATA).cast("I"),
        "2d": memoryview(DATA).cast("B", (2, 4)),
        "strided-u32": memoryview(spread[::2]),  # not contiguous
    }


@pytest.mark.parametrize("kind", ["u16", "u32", "2d", "strided-u32"])
def test_any_memoryview_is_read_as_its_bytes(kind):
    """A memoryview of any item size or shape, contiguous or not, is decoded as its bytes in
    C order, and measured in bytes against the limit. Kills `decode_checkpoint` 8-13, 15, 16,
    17 (ids at 88f069a)."""
    view = _views()[kind]
    assert view.tobytes() == DATA
    assert decode_checkpoint(view) == {"ab": "xyz"}
    assert decode_checkpoint(view, max_bytes=8) == {"ab": "xyz"}
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(view, file="ckpt", max_bytes=7)
    assert error_fields(info.value) == {
        "rule": "MSGPACK-001",
        "file": "ckpt",
        "message": "checkpoint file is larger than the size limit",
        "pointer": None,
        "expected": "<= 7 bytes",
        "got": 8,
    }


def test_bytes_at_the_size_limit_and_one_over():
    """Kills `decode_checkpoint` 2, 3, 22, 23, 24, 28, 29, 32, 33 (ids at 88f069a)."""
    assert decode_checkpoint(DATA, max_bytes=len(DATA)) == {"ab": "xyz"}
    assert decode_checkpoint(bytearray(DATA), max_bytes=len(DATA)) == {"ab": "xyz"}
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(DATA, file="ckpt", max_bytes=len(DATA) - 1)
    assert error_fields(info.value) == {
        "rule": "MSGPACK-001",
        "file": "ckpt",
        "message": "checkpoint file is larger than the size limit",
        "pointer": None,
        "expected": "<= 7 bytes",
        "got": 8,
    }
    with pytest.raises(TypeError) as info:
        decode_checkpoint("text")
    assert str(info.value) == "data must be bytes-like, got str"


def test_a_contiguous_memoryview_is_not_copied():
    """A C-contiguous view of another shape is cast to bytes in place, not copied: unpacking
    a 2-D view of an 8 MiB file (refused for a trailing byte once the container layer read it,
    MSGPACK-004) allocates about the one copy msgpack makes of the ext payload, not a second
    copy of the whole file. Kills `decode_checkpoint` 14 (ids at 88f069a)."""
    size = 8 << 20
    data = msgpack.packb({"a": _ext(1, [[size], "uint8", bytes(size)])})
    data += b"\xc0" * (8 - len(data) % 8)  # 1 to 8 trailing nils: a multiple of 8 bytes
    view = memoryview(data).cast("B", (8, len(data) // 8))
    tracemalloc.start()
    try:
        with pytest.raises(MsgpackError) as info:
            decode_checkpoint(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.rule == "MSGPACK-004"
    assert size < peak < size * 3 // 2
