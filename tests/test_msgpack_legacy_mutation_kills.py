"""Tests written to kill the mutants of `ockpt.msgpack_legacy` that survived the mutation run at
88f069a (tests/mutation/RESULTS.md, section msgpack_legacy.py), grouped by the function they
guard.

Each builds the bytes of a legacy msgpack ``checkpoint`` file as Orbax's writer lays them out
(spec/msgpack.md) and asserts what a reader sees: the decoded value, or the whole rendered
error (message, JSON pointer, ``expected``, ``got``, rule and file, in one string).
"""

from __future__ import annotations

import mmap
import tracemalloc
import types

import ml_dtypes
import msgpack
import numpy as np
import pytest

from ockpt import dtypes, msgpack_legacy
from ockpt.errors import MsgpackError
from ockpt.limits import LIMITS
from ockpt.msgpack_legacy import (
    Placeholder,
    decode_checkpoint,
    placeholders,
    read_checkpoint_file,
    to_json_view,
)

MAX_DEPTH = LIMITS.max_depth
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
    assert str(e) == (
        "ckpt at @4: extra bytes after the top-level msgpack value "
        "(expected '4 bytes', got '5 bytes') [MSGPACK-004]"
    )
    e = _error({"t": msgpack.ExtType(4, msgpack.packb([1]) + b"\xc0")})
    assert str(e) == (
        "ckpt at /t: tuple (ext 4) payload: extra bytes after the payload value "
        "(expected '2 bytes', got '3 bytes') [MSGPACK-009]"
    )


def test_nesting_past_the_unpackers_stack_in_the_file_and_in_a_payload():
    """msgpack's own stack limit is MSGPACK-005: for the file with no pointer, for an ext
    payload at the ext value. Kills `_unpack` 61, 62, 63, 67, 71, 73 (ids at 88f069a)."""
    e = _error(b"\x91" * 100_000 + b"\xc0")
    assert str(e) == (
        "ckpt: checkpoint: msgpack nesting exceeds the unpacker's stack "
        f"(expected 'depth <= {MAX_DEPTH}') [MSGPACK-005]"
    )
    e = _error({"t": msgpack.ExtType(4, b"\x91" * 5000 + b"\xc0")})
    assert str(e) == (
        "ckpt at /t: tuple (ext 4) payload: msgpack nesting exceeds the unpacker's stack "
        f"(expected 'depth <= {MAX_DEPTH}') [MSGPACK-005]"
    )


def _in_tuple(payload: bytes) -> bytes:
    """A file whose one value is a tuple (ext 4) with these payload bytes."""
    return msgpack.packb({"t": msgpack.ExtType(4, payload)})


@pytest.mark.parametrize(
    ("payload", "file_error", "payload_error"),
    [
        (  # msgpack raises UnicodeDecodeError
            b"\xa1\xff",
            "ckpt: checkpoint: a string is not valid UTF-8 (invalid start byte) [MSGPACK-002]",
            "ckpt at /t: tuple (ext 4) payload: a string is not valid UTF-8 (invalid start byte) "
            "[MSGPACK-009]",
        ),
        (  # a map of 2 in 3 bytes: its first key is read (msgpack's default limit, n // 2
            # entries, would refuse the header first and call it truncated)
            b"\x82\xa1\xff",
            "ckpt: checkpoint: a string is not valid UTF-8 (invalid start byte) [MSGPACK-002]",
            "ckpt at /t: tuple (ext 4) payload: a string is not valid UTF-8 (invalid start byte) "
            "[MSGPACK-009]",
        ),
        (  # ValueError "15 exceeds max_array_len(1)": a header longer than the input
            b"\x9f",
            "ckpt at @1: data ends inside the msgpack value "
            "(expected 'more bytes', got '1 bytes') [MSGPACK-003]",
            "ckpt at /t: tuple (ext 4) payload: payload ends inside its msgpack value "
            "(expected 'more bytes', got '1 bytes') [MSGPACK-009]",
        ),
        (  # ValueError "incomplete input"
            b"\x92\x01",
            "ckpt at @2: data ends inside the msgpack value "
            "(expected 'more bytes', got '2 bytes') [MSGPACK-003]",
            "ckpt at /t: tuple (ext 4) payload: payload ends inside its msgpack value "
            "(expected 'more bytes', got '2 bytes') [MSGPACK-009]",
        ),
        (  # another ValueError: a timestamp (ext -1) of 1 byte (msgpack's text varies)
            b"\xd4\xff\x00",
            ("ckpt: checkpoint: not well-formed msgpack (ValueError: ", ") [MSGPACK-002]"),
            (
                "ckpt at /t: tuple (ext 4) payload: not well-formed msgpack (ValueError: ",
                ") [MSGPACK-009]",
            ),
        ),
        (  # msgpack.FormatError (a ValueError): 0xc1 is never used
            b"\xc1",
            "ckpt: checkpoint: not well-formed msgpack (FormatError: ) [MSGPACK-002]",
            "ckpt at /t: tuple (ext 4) payload: not well-formed msgpack (FormatError: ) "
            "[MSGPACK-009]",
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
    for text, want in [
        (str(_error(payload)), file_error),
        (str(_error(_in_tuple(payload))), payload_error),
    ]:
        if isinstance(want, tuple):  # (start, end) around msgpack's own words
            assert text.startswith(want[0]) and text.endswith(want[1]), text
        else:
            assert text == want


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
            f"ckpt: checkpoint: nesting too deep (expected 'depth <= {MAX_DEPTH}') [MSGPACK-005]",
            "ckpt at /t: tuple (ext 4) payload: nesting too deep "
            f"(expected 'depth <= {MAX_DEPTH}') [MSGPACK-005]",
        ),
        (
            msgpack.OutOfData(),
            "ckpt at @3: data ends inside the msgpack value "
            "(expected 'more bytes', got '3 bytes') [MSGPACK-003]",
            "ckpt at /t: tuple (ext 4) payload: payload ends inside its msgpack value "
            "(expected 'more bytes', got '2 bytes') [MSGPACK-009]",
        ),
        (
            OverflowError("too big"),
            "ckpt: checkpoint: not well-formed msgpack (OverflowError: too big) [MSGPACK-002]",
            "ckpt at /t: tuple (ext 4) payload: not well-formed msgpack "
            "(OverflowError: too big) [MSGPACK-009]",
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
    assert str(_error(b"\x92\x01\x02")) == file_error
    monkeypatch.undo()
    _failing_unpackb(monkeypatch, exc, after=1)
    assert str(_error(_in_tuple(b"\x91\x01"))) == payload_error


def test_a_value_of_a_type_msgpack_never_gives(monkeypatch):
    """The last guard of `_decode_value`, for a value of a type the unpacker options never
    produce (here `msgpack.unpackb` is made to return a complex inside an array). Kills
    `_decode_value` 81-89 (ids at 88f069a)."""
    monkeypatch.setattr(msgpack, "unpackb", lambda data, **kwargs: [1, 2j])
    e = _error(b"\x92\x01\x02")
    assert str(e) == "ckpt at /1: unexpected msgpack value of type complex [MSGPACK-002]"


# --------------------------------------------------------------------------------------------
# _decode_value, _decode_ext: ext type codes


def test_a_timestamp_ext_is_an_unknown_ext_type():
    """msgpack's timestamp (ext -1) is refused as ext code -1 (MSGPACK-008), with the codes
    that are known. Kills `_decode_value` 61, 63, 64, 68, 69, 72, 73, 75-80 (ids at 88f069a)."""
    e = _error({"t": msgpack.Timestamp(1, 0)})
    assert str(e) == (
        "ckpt at /t: unknown ext type code (expected [1, 2, 3, 4], got -1) [MSGPACK-008]"
    )


def test_an_unknown_ext_code_names_the_known_ones():
    """Kills `_decode_ext` 84, 89, 93, 94, 96-99 (ids at 88f069a)."""
    e = _error({"e": msgpack.ExtType(5, b"")})
    assert str(e) == (
        "ckpt at /e: unknown ext type code (expected [1, 2, 3, 4], got 5) [MSGPACK-008]"
    )


def test_tuple_payload_errors_and_item_pointers():
    """A tuple (ext 4) payload that is no array, or ends early, is MSGPACK-009 naming the
    tuple; an error inside a tuple item points at the item's index. Kills `_decode_ext` 40, 45,
    46, 50, 52, 53, 57, 58, 61, 62, 64, 65, 66, 77 (ids at 88f069a)."""
    e = _error({"t": _ext(4, 7)})
    assert str(e) == (
        "ckpt at /t: tuple (ext 4) payload must be a msgpack array "
        "(expected 'array', got 'int 7') [MSGPACK-009]"
    )
    e = _error({"t": msgpack.ExtType(4, b"\x92\x01")})
    assert str(e) == (
        "ckpt at /t: tuple (ext 4) payload: payload ends inside its msgpack value "
        "(expected 'more bytes', got '2 bytes') [MSGPACK-009]"
    )
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
    assert str(e) == (
        f"ckpt at {'/0' * MAX_DEPTH}: containers nest too deep "
        f"(expected 'depth < {MAX_DEPTH}', got {MAX_DEPTH}) [MSGPACK-005]"
    )


def test_map_key_errors_in_full():
    """A non-string key (MSGPACK-006) says what it found; a repeated key (MSGPACK-007) names
    itself. Kills `_map_items` 5, 8, 13, 16, 17, 21, 24 (ids at 88f069a)."""
    e = _error({"a": {1: 1}})
    assert str(e) == (
        "ckpt at /a: map key is not a string (expected 'str', got 'int 1') [MSGPACK-006]"
    )
    e = _error(b"\x81\xa1b\x82\xa1x\x01\xa1x\x02")  # {"b": {"x": 1, "x": 2}}
    assert str(e) == "ckpt at /b/x: map key 'x' appears twice [MSGPACK-007]"


# --------------------------------------------------------------------------------------------
# _decode_array: the payload of ext 1 and ext 3


@pytest.mark.parametrize(("code", "what"), [(1, "ndarray (ext 1)"), (3, "numpy scalar (ext 3)")])
def test_array_payload_errors_name_the_ext_type(code, what):
    """Every MSGPACK-009 of an array payload names its ext type, with what was expected and
    found. Kills `_decode_array` 1-7, 12, 22-27, 29, 31, 32, 36, 37, 41, 42, 47, 49, 50, 54,
    55, 59, 60, 61, 65, 67, 68, 72, 73, 77, 78, 79, 84 and `_resolve_dtype` 4, 6, 7, 11, 12,
    16, 17, 18 (ids at 88f069a)."""

    def rendered(payload) -> str:
        return str(_error({"a": _ext(code, payload)}))

    assert rendered(7) == (
        f"ckpt at /a: {what} payload must be [shape, dtype name, data] "
        "(expected 'array of 3', got 'int 7') [MSGPACK-009]"
    )
    assert rendered([[], "int8"]) == (
        f"ckpt at /a: {what} payload must be [shape, dtype name, data] "
        "(expected 'array of 3', got 'array of 2') [MSGPACK-009]"
    )
    assert str(_error({"a": msgpack.ExtType(code, b"\x93\x90")})) == (
        f"ckpt at /a: {what} payload: payload ends inside its msgpack value "
        "(expected 'more bytes', got '2 bytes') [MSGPACK-009]"
    )
    assert rendered([5, "int8", b""]) == (
        f"ckpt at /a: {what}: shape must be a msgpack array "
        "(expected 'array', got 'int 5') [MSGPACK-009]"
    )
    assert rendered([[], "int8", "x"]) == (
        f"ckpt at /a: {what}: data must be msgpack bin "
        "(expected 'bin', got \"str 'x'\") [MSGPACK-009]"
    )
    assert rendered([[], 5, b""]) == (
        f"ckpt at /a: {what}: dtype name must be a string "
        "(expected 'str', got 'int 5') [MSGPACK-009]"
    )


def test_a_numpy_scalar_with_a_shape():
    """Kills `_decode_array` 102, 104, 105, 109, 110, 113, 114 (ids at 88f069a)."""
    e = _error({"s": _ext(3, [[1], "int8", b"\x01"])})
    assert str(e) == (
        "ckpt at /s: numpy scalar (ext 3) must have shape [] (expected [], got [1]) [MSGPACK-013]"
    )


def test_shape_and_size_errors_name_the_ext_type():
    """The `what` passed on to the shape and size checks. Kills `_decode_array` 94, 123 and
    `_array_from_bytes` 6 (ids at 88f069a)."""
    e = _error({"a": _ext(1, [[-1], "int8", b""])})
    assert e.message == "ndarray (ext 1): shape entries must be non-negative ints"
    e = _error({"a": _ext(1, [[2], "int16", b"\x00"])})
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): data size does not match shape and dtype [2] int16 "
        "(expected 4, got 1) [MSGPACK-012]"
    )


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
        assert str(e) == (
            "ckpt at /a: ndarray (ext 1): dtype name is not allowed "
            f"(expected {expected!r}, got {shown!r}) [MSGPACK-010]"
        )


def test_an_ml_dtypes_name_the_installed_package_lacks(monkeypatch):
    """A name of `dtypes.EXTENSION_NAMES` missing from `dtypes.SUPPORTED` (an older ml_dtypes
    package, simulated by removing it from the table) says a newer package is needed.
    Kills `_resolve_dtype` 28-38 (ids at 88f069a)."""
    table = {k: v for k, v in dtypes.SUPPORTED.items() if k != "float8_e8m0fnu"}
    monkeypatch.setattr(dtypes, "SUPPORTED", table)
    e = _error({"a": _ext(1, [[], "float8_e8m0fnu", b"\x7f"])})
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): dtype 'float8_e8m0fnu' needs a newer ml_dtypes package "
        "than the one installed (got 'float8_e8m0fnu') [MSGPACK-010]"
    )


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
    assert str(e) == (
        f"ckpt at /a: ndarray (ext 1): too many dimensions "
        f"(expected '<= {MAX_NDIM}', got {MAX_NDIM + 1}) [MSGPACK-011]"
    )
    e = _error({"a": _ext(1, [[2, -1], "int8", b""])})
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): shape entries must be non-negative ints "
        "(expected 'uint', got 'int -1') [MSGPACK-011]"
    )


def test_the_shape_bound_is_the_product_of_all_extents_up_to_int64_max():
    """size * itemsize is bounded by 2**63 - 1, over all extents (zeros count as 1): at the
    bound the shape passes (and the missing data is MSGPACK-012), one step over it is
    MSGPACK-011. Kills `_check_shape` 37, 38, 44, 46, 48, 49, 53, 54 (ids at 88f069a)."""
    at_bound = [7, 7, 73, 127, 337, 92737, 649657]  # product: 2**63 - 1
    e = _error({"a": _ext(1, [at_bound, "int8", b""])})
    assert (e.rule, e.expected, e.got) == ("MSGPACK-012", 2**63 - 1, 0)
    e = _error({"a": _ext(1, [[2**32, 0, 2**32], "int8", b""])})
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): shape too large "
        f"(expected 'size * itemsize <= {2**63 - 1}', got [{2**32}, 0, {2**32}]) [MSGPACK-011]"
    )
    e = _error({"a": _ext(1, [[2**62, 1], "int16", b""])})  # 2**63 bytes: one over
    assert (e.rule, e.message) == ("MSGPACK-011", "ndarray (ext 1): shape too large")


# --------------------------------------------------------------------------------------------
# _array_from_bytes


def test_a_bool_byte_that_is_not_0_or_1():
    """Kills `_array_from_bytes` 37, 39, 44, 49, 50 (ids at 88f069a)."""
    e = _error({"a": _ext(1, [[3], "bool", b"\x00\x01\x02"])})
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): bool data byte 2 is not 0 or 1 "
        "(expected '0 or 1', got 2) [MSGPACK-016]"
    )


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
    assert str(e) == (
        "ckpt at /a: ndarray (ext 1): numpy cannot represent this array (no memory) "
        "(got [2]) [MSGPACK-011]"
    )


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
    assert str(e) == (
        "ckpt at /w: chunked array map has wrong keys "
        f"(expected [{MARKER!r}, 'chunks', 'shape'], "
        f"got [{MARKER!r}, 'a', 'b', 'c', 'd', 'e', 'f', 'g']) [MSGPACK-014]"
    )
    e = _error(_chunked(**{MARKER: 1}))
    assert str(e) == (
        f"ckpt at /w/{MARKER}: chunked array marker must be true "
        "(expected True, got 'int 1') [MSGPACK-014]"
    )


def test_chunked_array_chunk_errors():
    """No chunks, a chunk that is no ext 1, a chunk that is not 1-D, chunks of two dtypes,
    and too few elements for the shape. Kills `_decode_chunked` 78, 80, 81, 85, 86, 89, 90,
    95, 96, 97, 111, 113, 114, 118, 119, 122, 123, 125, 126, 127, 144, 146, 147, 151, 152,
    155-157, 159, 160, 166, 168, 169, 173, 174, 177, 178, 201, 203, 204, 208, 209 (ids at
    88f069a)."""
    e = _error(_chunked(chunks={}))
    assert str(e) == (
        "ckpt at /w/chunks: chunked array has no chunks (expected '>= 1 chunk', got 0) "
        "[MSGPACK-015]"
    )
    e = _error(_chunked(chunks={"0": 5}))
    assert str(e) == (
        "ckpt at /w/chunks/0: a chunk must be an ndarray (ext 1) "
        "(expected 'ext 1', got 'int 5') [MSGPACK-015]"
    )
    e = _error(_chunked(chunks={"0": _nd(np.zeros((1, 2), np.int8))}))
    assert str(e) == (
        "ckpt at /w/chunks/0: a chunk must be a non-empty 1-D array "
        "(expected 'shape [n], n >= 1', got [1, 2]) [MSGPACK-015]"
    )
    two = {"0": _nd(np.zeros(1, np.int8)), "1": _nd(np.zeros(1, np.int16))}
    e = _error(_chunked(chunks=two))
    assert str(e) == (
        "ckpt at /w/chunks/1: chunks must share one dtype "
        "(expected 'int8', got 'int16') [MSGPACK-015]"
    )
    e = _error(_chunked(shape={"0": 5}))
    assert str(e) == (
        "ckpt at /w/chunks: chunks hold 2 elements, shape [5] needs 5 (expected 5, got 2) "
        "[MSGPACK-015]"
    )


def test_a_chunked_array_shape_error_points_at_its_shape():
    """The chunked shape is checked as "chunked array" at ``.../shape``. Kills
    `_decode_chunked` 47, 48, 49, 187, 194, 195 (ids at 88f069a)."""
    e = _error(_chunked(shape={"0": -2}))
    assert str(e) == (
        "ckpt at /w/shape: chunked array: shape entries must be non-negative ints "
        "(expected 'uint', got 'int -2') [MSGPACK-011]"
    )


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
    assert str(info.value) == "ckpt at /a/1: param name 'p' is also used at '/a/0' [MSGPACK-017]"


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
    assert str(info.value) == (
        "ckpt: checkpoint file is larger than the size limit "
        "(expected '<= 7 bytes', got 8) [MSGPACK-001]"
    )


def test_bytes_at_the_size_limit_and_one_over():
    """Kills `decode_checkpoint` 2, 3, 22, 23, 24, 28, 29, 32, 33 (ids at 88f069a)."""
    assert decode_checkpoint(DATA, max_bytes=len(DATA)) == {"ab": "xyz"}
    assert decode_checkpoint(bytearray(DATA), max_bytes=len(DATA)) == {"ab": "xyz"}
    with pytest.raises(MsgpackError) as info:
        decode_checkpoint(DATA, file="ckpt", max_bytes=len(DATA) - 1)
    assert str(info.value) == (
        "ckpt: checkpoint file is larger than the size limit "
        "(expected '<= 7 bytes', got 8) [MSGPACK-001]"
    )
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
