"""Tests written to kill the mutants of paths.py, dtypes.py and msgpack_legacy.py that survived
the mutation run of the format core (tests/mutation/RESULTS.md names each mutant and the test
here that now kills it). They pin what the modules promise: exact error messages and fields,
the pattern matcher's backtracking and `**` closure, the per-value check of a cast, and the
index order of a chunked array's pieces."""

from __future__ import annotations

import warnings

import msgpack
import numpy as np
import pytest

import ockpt
from ockpt.dtypes import astype, decode_bits, lossy_values
from ockpt.errors import MsgpackError, NotACheckpointError
from ockpt.msgpack_legacy import decode_checkpoint, read_checkpoint_file
from ockpt.paths import LeafPattern, name_not_found, parse_leaf_name, select_paths

# ---------------------------------------------------------------------------------------------
# paths.py: leaf names and selection patterns (spec/key-paths.md §7).

EMPTY_KEY_WHY = "an empty key (write an empty key text as \\e)"


def test_malformed_names_and_patterns_say_which_they_are():
    """PATH-006 names the text, and says whether it was read as a leaf name or a pattern."""
    with pytest.raises(ockpt.LeafNameError) as info:
        parse_leaf_name("a//b")
    e = info.value
    assert e.message == f"malformed leaf name 'a//b': {EMPTY_KEY_WHY}"
    assert e.rule == "PATH-006" and e.name == "a//b"
    with pytest.raises(ockpt.LeafNameError) as info:
        LeafPattern.parse("a//b")
    assert info.value.message == f"malformed selection pattern 'a//b': {EMPTY_KEY_WHY}"
    assert info.value.name == "a//b"


def test_select_paths_names_a_malformed_pattern_in_full():
    paths = [("params", "w")]
    with pytest.raises(ockpt.LeafNameError) as info:
        select_paths(["a//b"], paths, file="ckpt")
    e = info.value
    assert (e.rule, e.name, e.file) == ("PATH-006", "a//b", "ckpt")
    assert e.message == f"malformed selection pattern 'a//b': {EMPTY_KEY_WHY}"


def test_select_paths_says_no_leaf_matches_the_pattern():
    with pytest.raises(ockpt.LeafNameError) as info:
        select_paths(["zzz/**"], [("params", "w")])
    assert info.value.message == "no leaf matches the pattern 'zzz/**'"


def _never_called(texts: tuple[str, ...]) -> bool:
    raise AssertionError(f"exists called with {texts!r}")


def test_name_not_found_messages_and_close_names():
    """The default wording, no hint when nothing is close, at most three close names, each
    once, joined with ', '."""
    e = name_not_found("nope", ["params/w"])
    assert e.message == "no leaf or subtree named 'nope'" and e.close == ()
    assert e.rule == "PATH-007" and e.name == "nope"
    e = name_not_found("layer", ["layer1", "layer2", "layer3", "layer4"])
    assert len(e.close) == 3 and set(e.close) <= {"layer1", "layer2", "layer3", "layer4"}
    hint = ", ".join(repr(c) for c in e.close)
    assert e.message == f"no leaf or subtree named 'layer'; did you mean {hint}?"
    e = name_not_found("params/x", ["params/w"])
    assert e.close == ("params/w",)
    # a name with '.' and no `exists`: no guess from the param name, no call
    e = name_not_found("a.b", ["a.c"])
    assert e.close == ("a.c",)


def test_name_not_found_guesses_a_leaf_name_only_where_it_exists():
    assert name_not_found("x.y", [], exists=lambda texts: False).close == ()
    assert name_not_found("x.y", [], exists=lambda texts: texts == ("x", "y")).close == ("x/y",)
    # "a..b" with '.' -> '/' is no leaf name ("a//b"): nothing to look up
    assert name_not_found("a..b", [], exists=_never_called).close == ()


def test_name_not_found_searches_up_to_the_candidate_limit():
    """Up to 20,000 names are searched for close matches (`_MAX_CLOSE_CANDIDATES`)."""
    names = [f"n{i:05d}" for i in range(19_999)] + ["params/w"]
    assert name_not_found("params/x", names).close == ("params/w",)
    assert name_not_found("params/x", [*names, "other"]).close == ()


@pytest.mark.parametrize(
    ("pattern", "texts", "hit"),
    [
        ("*ab", ("xbb",), False),  # the `*` backtracks to the token right after it
        ("*ab", ("b",), False),
        ("*ab", ("xab",), True),
        ("**/**/a", ("a",), True),  # a `**` after a `**` also matches no key
        ("**/a/b", ("a", "a", "b"), True),  # `**` takes one key, then a/b follows
        ("a/**/**", ("a",), True),
    ],
)
def test_pattern_backtracking_and_deep_closure(pattern, texts, hit):
    parsed = LeafPattern.parse(pattern)
    assert parsed.text == pattern and parsed.matches(texts) is hit


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


# ---------------------------------------------------------------------------------------------
# msgpack_legacy.py: the fields of each error (spec/msgpack.md).


def _error(data: bytes) -> MsgpackError:
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(data, file="ckpt")
    return info.value


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
