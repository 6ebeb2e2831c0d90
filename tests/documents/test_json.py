"""`ockpt.documents._json`, the strict JSON layer: the same value or the same error (rule, file,
pointer, line and column) whether a document is parsed whole or member by member (the streamed
parse of a `_METADATA` over `_json._STREAM_ABOVE` bytes), the nesting limit exactly at
`MAX_DEPTH`, the rule of a file refused for its size, and the helpers the models use.
"""

from __future__ import annotations

import json

import pytest

from ockpt.documents import _json
from ockpt.documents._json import parse_json, read_json
from ockpt.errors import DocumentError, FormatError
from ockpt.limits import LIMITS, Limits, applied
from tests.support.errors import assert_error, error_fields

MAX_DEPTH = LIMITS.max_depth


# ---------------------------------------------------------------------------------------------
# _parse_streamed and _object_members: the member-by-member parse of a large document.
# `_STREAM_ABOVE` set to 0 sends every document through it; 1 GiB parses every one whole
# (then `_convert_members`). Both must give the same value, or the same error text.

MODES = pytest.mark.parametrize("above", [0, 1 << 30], ids=["streamed", "whole"])


def _tag(key, value):  # type: ignore[no-untyped-def]
    return ("converted", key, value)


def _parse(text: str, streamed=None):  # type: ignore[no-untyped-def]
    try:
        return parse_json(text, file="f.json", streamed=streamed or {"t": _tag})
    except DocumentError as e:
        return error_fields(e)


VALID = [
    # members of "t" converted, other objects (nested or top-level) left as parsed
    (
        '{"t":{"a":1,"bb":[2,{"c":3}],"d":{}},"u":{"x":{"t":{}}},"v":[{}],"w":"s"}',
        {
            "t": {
                "a": ("converted", "a", 1),
                "bb": ("converted", "bb", [2, {"c": 3}]),
                "d": ("converted", "d", {}),
            },
            "u": {"x": {"t": {}}},
            "v": [{}],
            "w": "s",
        },
    ),
    ('{"t":{"a":1},"b":2}', {"t": {"a": ("converted", "a", 1)}, "b": 2}),
    ('{"b":{"x":1},"t":{"y":[]}}', {"b": {"x": 1}, "t": {"y": ("converted", "y", [])}}),
    ("{}", {}),
    ('{"t":{}}', {"t": {}}),
    ('{"t":{},"b":1}', {"t": {}, "b": 1}),
    ('{"t":{"a":12}}', {"t": {"a": ("converted", "a", 12)}}),
    ('{"t":[1]}', {"t": [1]}),  # "t" not an object: its value as parsed, not converted
    ('{"t":"x"}', {"t": "x"}),
    # whitespace everywhere JSON allows it
    (
        ' \n{ "t" : { "a" : 1 , "b" :\t2 } ,\r\n "c" : [ ] } \n',
        {"t": {"a": ("converted", "a", 1), "b": ("converted", "b", 2)}, "c": []},
    ),
    ("{ }", {}),
    ('{"t":{ }}', {"t": {}}),
    # a document that is no object is parsed whole, strictly
    ('[{"t":{"a":1}}]', [{"t": {"a": 1}}]),
    (' "s"', "s"),
    ("[1.5]", [1.5]),
]


@MODES
@pytest.mark.parametrize("text, value", VALID, ids=range(len(VALID)))
def test_streamed_and_whole_parse_give_the_same_value(text, value, above, monkeypatch):
    """Each member of a streamed object ("t") goes through the converter as ``f(key, value)``
    and nothing else does; keys, values and the end of every object are found exactly.
    Kills _parse_streamed 1-13, 22, 24-60, 62-79, _object_members 1-24, 34-45, 49-59, 69-101
    and the same mutants of _convert_members."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    assert _parse(text) == value


def _malformed(message: str) -> dict:
    """The fields of the error for JSON `json` refuses with `message`, in the file f.json."""
    return {
        "rule": "JSON-001",
        "file": "f.json",
        "message": f"malformed JSON: {message}",
        "pointer": "",
    }


INVALID = [
    (
        '{"t":{1:2}}',
        _malformed("Expecting property name enclosed in double quotes: line 1 column 7 (char 6)"),
    ),
    (
        '{"t":{,}}',
        _malformed("Expecting property name enclosed in double quotes: line 1 column 7 (char 6)"),
    ),
    (
        '{"t":{"a":1,}}',
        _malformed("Expecting property name enclosed in double quotes: line 1 column 13 (char 12)"),
    ),
    (
        '{"t":{"a":1},}',
        _malformed("Expecting property name enclosed in double quotes: line 1 column 14 (char 13)"),
    ),
    (
        "{",
        _malformed("Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ),
    ('{"t":{"a" 1}}', _malformed("Expecting ':' delimiter: line 1 column 11 (char 10)")),
    ('{"t"', _malformed("Expecting ':' delimiter: line 1 column 5 (char 4)")),
    ('{"t":{"a":1 "b":2}}', _malformed("Expecting ',' delimiter: line 1 column 13 (char 12)")),
    ('{"t":{"a":1,"b":2}', _malformed("Expecting ',' delimiter: line 1 column 19 (char 18)")),
    ('{"t":', _malformed("Expecting value: line 1 column 6 (char 5)")),
    ('{"t":{"a":1}} x', _malformed("Extra data: line 1 column 15 (char 14)")),
    ('{"t":{"a":1}}\n}', _malformed("Extra data: line 2 column 1 (char 14)")),
    ('{"t":{"a\tb":1}}', _malformed("Invalid control character at: line 1 column 9 (char 8)")),
    ('{"t":{"a":NaN}}', _malformed("NaN is not JSON")),
    ('{"t":{"a":1e999}}', _malformed("number 1e999 is out of the range of a double")),
    ("[NaN]", _malformed("NaN is not JSON")),
    ("[-Infinity]", _malformed("-Infinity is not JSON")),
    ("[1e999]", _malformed("number 1e999 is out of the range of a double")),
    (
        '{"t":{"a":1,"a":2}}',
        {
            "rule": "JSON-002",
            "file": "f.json",
            "message": "duplicate key 'a'",
            "pointer": "",
        },
    ),
    (
        '{"t":{"a":1},"t":{}}',
        {
            "rule": "JSON-002",
            "file": "f.json",
            "message": "duplicate key 't'",
            "pointer": "",
        },
    ),
    (
        '{"a":1,"b":2,"b":3,"a":4}',
        {
            "rule": "JSON-002",
            "file": "f.json",
            "message": "duplicate key 'b'",
            "pointer": "",
        },
    ),  # the first repeated
    (
        '{"u":{"a":1,"a":2}}',
        {
            "rule": "JSON-002",
            "file": "f.json",
            "message": "duplicate key 'a'",
            "pointer": "",
        },
    ),  # in an unstreamed member
    (
        '[{"a":1,"a":2}]',
        {
            "rule": "JSON-002",
            "file": "f.json",
            "message": "duplicate key 'a'",
            "pointer": "",
        },
    ),
]


@MODES
@pytest.mark.parametrize("text, error", INVALID, ids=range(len(INVALID)))
def test_streamed_and_whole_parse_refuse_with_the_same_text(text, error, above, monkeypatch):
    """A fault of the JSON is reported with `json`'s own words and position (line, column,
    char) in both modes, duplicate keys with the first key repeated; a document that is no
    object keeps the strict parse (no NaN, no infinity, no duplicate keys). Kills
    _parse_streamed 14-21, 80-88, _object_members 25-33, 46-48, 60-68, 98-99, 102-110."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    assert _parse(text) == error


@MODES
def test_converter_error_stops_the_calls_and_passes_through(above, monkeypatch):
    """The converter is called in document order with the key and the parsed value; its first
    error stops further calls and is raised unchanged, but only after the whole document
    parsed: a fault of the JSON later on is reported instead. Kills _parse_streamed 23, 55-61
    and the same mutants of _convert_members."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    calls = []
    failure = KeyError("b refused")

    def convert(key, value):  # type: ignore[no-untyped-def]
        calls.append((key, value))
        if key == "b":
            raise failure
        return value

    text = '{"t":{"a":1,"b":[2],"c":3},"u":{"t":{"x":4}},"t2":{"d":5}}'
    with pytest.raises(KeyError) as info:
        parse_json(text, file="f.json", streamed={"t": convert, "t2": convert})
    assert info.value is failure
    assert calls == [("a", 1), ("b", [2])]
    calls.clear()
    with pytest.raises(DocumentError) as doc_info:
        parse_json(text[:-1] + ',"z":NaN}', file="f.json", streamed={"t": convert})
    assert error_fields(doc_info) == _malformed("NaN is not JSON")
    # streamed: converted as parsed, up to the error; whole: the parse failed before any call
    assert calls == ([("a", 1), ("b", [2])] if above == 0 else [])
    calls.clear()
    assert parse_json(text, file="f.json", streamed={"t2": convert}) == json.loads(text)
    assert calls == [("d", 5)]


# ---------------------------------------------------------------------------------------------
# _check_depth: values nest one deeper than their container; MAX_DEPTH levels are allowed.


def _nested_arrays(n: int, inner: str = "") -> str:
    return "[" * n + inner + "]" * n


def _nested_objects(n: int, inner: str = "{}") -> str:
    return '{"a":' * (n - 1) + inner + "}" * (n - 1)


def test_nesting_of_exactly_max_depth_is_accepted():
    """MAX_DEPTH (64) nested arrays or objects, the innermost empty, are read; a list's items
    and an object's values are each one level deeper than their container. Kills _check_depth
    4, 6, 19, 20, 22."""
    assert MAX_DEPTH == 64
    value = parse_json(_nested_arrays(64), file="f.json")
    for _ in range(63):
        assert len(value) == 1
        value = value[0]
    assert value == []
    value = parse_json(_nested_objects(64), file="f.json")
    for _ in range(63):
        value = value["a"]
    assert value == {}
    mixed = '[{"a":' * 32 + "[]" + "}]" * 32  # 65 brackets, the last array at depth 65
    with pytest.raises(DocumentError):
        parse_json(mixed, file="f.json")
    assert parse_json('[{"a":' * 31 + "[[]]" + "}]" * 31, file="f.json") is not None  # 64


@pytest.mark.parametrize(
    "text",
    [_nested_arrays(64, "1"), _nested_objects(64, '{"b":1}'), _nested_arrays(64, "[]")],
    ids=["arrays", "objects", "arrays-65"],
)
def test_nesting_one_deeper_than_max_depth_is_refused_with_the_pointer(text):
    """A value at depth MAX_DEPTH + 1 is refused (JSON-003), naming the file and the pointer of
    JSON nested in a string of another document. Kills _check_depth 10, 14, 21."""
    with pytest.raises(DocumentError) as info:
        parse_json(text, file="f.json", pointer="/custom")
    e = info.value
    assert (e.rule, e.file, e.pointer) == ("JSON-003", "f.json", "/custom")
    assert error_fields(e) == {
        "rule": "JSON-003",
        "file": "f.json",
        "message": "JSON nesting deeper than 64",
        "pointer": "/custom",
    }


# ---------------------------------------------------------------------------------------------
# read_json


def test_read_json_refuses_a_file_over_max_bytes_with_json_003(tmp_path, monkeypatch):
    """A file larger than the limits' `max_json_bytes` is refused before it is read (JSON-003);
    one of exactly that size is parsed; a malformed one is refused naming its path. Kills
    read_json 6, 10, 11, 13."""
    path = tmp_path / "doc.json"
    path.write_bytes(b'{"a": [1, 2, 3]}')  # 16 bytes
    with pytest.raises(FormatError) as info, applied(Limits(max_json_bytes=15)):
        read_json(path)
    e = info.value
    assert error_fields(e) == {
        "rule": "JSON-003",
        "file": str(path),
        "message": "file larger than its size limit",
        "pointer": None,
        "expected": "<= 15 bytes",
        "got": 16,
    }
    with applied(Limits(max_json_bytes=16)):
        assert read_json(path) == {"a": [1, 2, 3]}
    path.write_bytes(b'{"a": NaN}')
    with pytest.raises(DocumentError) as doc_info:  # a fault of the JSON names the file too
        read_json(path)
    assert error_fields(doc_info) == {
        "rule": "JSON-001",
        "file": str(path),
        "message": "malformed JSON: NaN is not JSON",
        "pointer": "",
    }


# ---------------------------------------------------------------------------------------------
# _finite_float, type_name, ABSENT


def test_a_number_out_of_range_is_refused_naming_its_first_40_characters():
    """A float literal that overflows a double (Infinity by another name) is refused in either
    sign; the message quotes the literal's first 40 characters. Kills _finite_float 10, 11."""
    digits = "1234567890" * 5  # 50 digits: only 40 are quoted
    for literal in (digits + "e999", "-" + digits + "e999"):
        with pytest.raises(DocumentError) as info:
            parse_json(f"[{literal}]", file="f.json")
        assert error_fields(info) == _malformed(
            f"number {literal[:40]} is out of the range of a double"
        )
    assert parse_json(f"[{digits}e-999, {digits}.5]", file="f.json") == [0.0, float(digits)]


def test_type_name_says_the_json_type_or_the_python_type():
    """Parsed values are named by their JSON type; anything else by its Python type's name.
    Kills type_name 1-6."""
    from ockpt.documents._json import type_name

    names = [type_name(v) for v in ({}, [], "s", True, 1, 1.5, None)]
    assert names == ["object", "array", "string", "boolean", "integer", "number", "null"]
    assert type_name((1,)) == "tuple" and type_name(b"") == "bytes"


def test_absent_is_a_false_singleton_shown_as_absent():
    """`ABSENT` (an optional field a document lacks) is one object, false, and shows as ABSENT
    (it appears in error texts of the models). Kills _Absent.__repr__ 1-2, __bool__ 1."""
    from ockpt.documents._json import ABSENT, _Absent

    assert _Absent() is ABSENT
    assert repr(ABSENT) == "ABSENT" and f"{ABSENT!r}" == "ABSENT"
    assert bool(ABSENT) is False and not ABSENT


# ---------------------------------------------------------------------------------------------
# _bracket_depth: the pre-scan that decides whether a document may nest too deep. Checked
# against a character-by-character model of its documented rule, for every window size.


def _model_depth(doc: str) -> int:
    """The documented result of `_bracket_depth`, one character at a time: below MAX_DEPTH
    opening brackets, their number; else the deepest nesting outside strings, where a quote
    after an odd run of backslashes is no quote, and the quote of a string that never closes
    counts as a closing bracket with every bracket after it counted."""
    opens = doc.count("{") + doc.count("[")
    if opens < MAX_DEPTH:
        return opens
    depth = deepest = 0
    run = 0  # backslashes just before
    string_at = None  # the depth before the quote of the string open now
    quote = 0  # where that quote is
    for i, ch in enumerate(doc):
        if ch == "\\":
            run += 1
            continue
        escaped, run = run % 2 == 1, 0
        if ch == '"' and not escaped:
            string_at, quote = (depth, i) if string_at is None else (None, quote)
        elif ch in "[{" and string_at is None:
            depth += 1
        elif ch in "]}" and string_at is None:
            depth -= 1
        deepest = max(deepest, depth)
    if string_at is not None:  # re-read from the unclosed quote, brackets counting
        depth = string_at - 1
        for ch in doc[quote + 1 :]:
            depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
            deepest = max(deepest, depth)
    return deepest


def _random_documents(seed: int, count: int):  # type: ignore[no-untyped-def]
    import random

    rng = random.Random(seed)
    pieces = ['"', "[", "]", "{", "}", "\\", "X", "é", "[[", "{{", "\\\\", '\\"', "]]", " "]
    for _ in range(count):
        weights = [rng.random() for _ in pieces]
        doc = "".join(rng.choices(pieces, weights, k=rng.randint(0, 200)))
        if rng.random() < 0.7:
            doc = "[" * rng.randint(MAX_DEPTH - 8, MAX_DEPTH + 8) + doc
        yield doc


def test_bracket_depth_follows_its_rule_for_every_window(monkeypatch):
    """Strings (escaped quotes, runs of backslashes, a string left open) and windows that cut
    a run of backslashes or an escape in two: the scan of the text and of its UTF-8 bytes
    gives the model's depth, with every window size. Kills most _bracket_depth mutants (the
    counts, escapes, string state carried over, the open-string re-read, the depth carried
    from window to window)."""
    docs = list(_random_documents(21, 120))
    docs += [
        "[" * 70 + '"\\\\"' + "[" * 3,  # an escaped backslash ends the string: brackets count
        "[" * 70 + '"\\"[[[' + '"',  # an escaped quote does not end it
        "[" * 70 + '"' + "]" * 5 + "[" * 9,  # never closes: counted from its quote, minus 1
        "[" * 66 + '"x"' + "]" * 66,
        "[" * 70 + '"X"[[[',  # a window ending in a letter carries no backslash over
        "{" * 64 + "}" * 64 + "[" * 3,
    ]
    for doc in docs:
        want = _model_depth(doc)
        for window in (1, 2, 3, 7, 1 << 20):
            monkeypatch.setattr(_json, "_SCAN_WINDOW", window)
            assert _json._bracket_depth(doc) == want, (doc, window)
            assert _json._bracket_depth(doc.encode()) == want, (doc, window)


def test_bracket_depth_below_max_depth_brackets_is_their_count():
    """Fewer than MAX_DEPTH opening brackets cannot nest deeper: their count is returned
    without a scan (brackets in strings included); MAX_DEPTH of them are scanned."""
    assert _json._bracket_depth('["[{", {"a": [1]}]') == 5
    assert _json._bracket_depth(b'["[{", {"a": [1]}]') == 5
    assert _json._bracket_depth("[" * 63 + "]" * 63) == 63
    assert _json._bracket_depth('"' + "[" * 64 + '"') == 0
    assert _json._bracket_depth(b'"' + b"{" * 64 + b'"') == 0
    assert _json._bracket_depth("[" * 32 + "{" * 32 + "}" * 32 + "]" * 32) == 64


@pytest.mark.parametrize("window, want", [(1, 64), (10, 70), (1 << 20, 100)])
def test_bracket_depth_stops_at_the_window_where_it_reaches_stop(window, want, monkeypatch):
    """With `stop`, the scan ends with the first window in which the depth reaches `stop`
    and returns the depth reached by then; without it, the deepest of the whole document."""
    monkeypatch.setattr(_json, "_SCAN_WINDOW", window)
    doc = "[" * 100 + "]" * 100
    assert _json._bracket_depth(doc, stop=64) == want
    assert _json._bracket_depth(doc.encode(), stop=64) == want
    assert _json._bracket_depth(doc) == 100
    assert _json._bracket_depth("[" * 70 + "]" * 70, stop=71) == 70


@MODES
def test_a_document_nesting_63_deep_is_still_converted_member_by_member(above, monkeypatch):
    """Below the depth limit (values at depth 64 at most) a document is not "deep": its
    streamed members are converted in both modes; at depth 65 it is refused."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    inner = "[" * 61 + "]" * 61  # "t" (depth 2) -> "a" value: 61 arrays, 63 brackets in all
    value = parse_json('{"t":{"a":' + inner + "}}", file="f.json", streamed={"t": _tag})
    assert value["t"]["a"][:2] == ("converted", "a")
    with pytest.raises(DocumentError) as info:
        parse_json('{"t":{"a":' + "[" * 62 + "1" + "]" * 62 + "}}", file="f.json",
                   streamed={"t": _tag})  # fmt: skip
    assert info.value.rule == "JSON-003"


# ---------------------------------------------------------------------------------------------
# parse_json: its bounds, input types, modes and the fields of each error


def test_parse_json_refuses_a_document_over_max_bytes():
    """More than `max_bytes` (bytes, or characters of a str) is refused before parsing, naming
    file and pointer; exactly `max_bytes` is parsed. Kills parse_json 3-19."""
    with pytest.raises(DocumentError) as info:
        parse_json(b"[1,2]", file="f.json", pointer="/p", max_bytes=4)
    e = info.value
    assert (e.rule, e.file, e.pointer, e.expected, e.got) == (
        "JSON-003",
        "f.json",
        "/p",
        "<= 4 bytes",
        5,
    )
    assert error_fields(e) == {
        "rule": "JSON-003",
        "file": "f.json",
        "message": "document too large",
        "pointer": "/p",
        "expected": "<= 4 bytes",
        "got": 5,
    }
    assert parse_json(b"[1,2]", file="f.json", max_bytes=5) == [1, 2]
    assert parse_json("[1,2]", file="f.json", max_bytes=5) == [1, 2]


def test_parse_json_takes_text_bytes_bytearray_and_memoryview():
    """Every input form parses to the same value. Kills parse_json 21-29."""
    data = '{"k": ["é", 1]}'.encode()
    for form in (data, bytearray(data), memoryview(data), data.decode()):
        assert parse_json(form, file="f.json") == {"k": ["é", 1]}


@pytest.mark.parametrize(
    "data, want",
    [
        (
            b'["\xff"]',
            {
                "rule": "JSON-001",
                "file": "f.json",
                "message": "not UTF-8 at byte 2",
                "pointer": "/p",
            },
        ),
        (
            b'["\xed\xa0\x80"]',
            {
                "rule": "JSON-001",
                "file": "f.json",
                "message": "not UTF-8 at byte 2",
                "pointer": "/p",
            },
        ),  # a surrogate
        (
            b"\xef\xbb\xbf[1]",
            {
                "rule": "JSON-001",
                "file": "f.json",
                "message": "malformed JSON: Unexpected UTF-8 BOM (decode using utf-8-sig): "
                "line 1 column 1 (char 0)",
                "pointer": "/p",
            },
        ),
        (
            "[1]".encode("utf-16-le"),
            {
                "rule": "JSON-001",
                "file": "f.json",
                "message": "malformed JSON: Expecting value: line 1 column 2 (char 1)",
                "pointer": "/p",
            },
        ),
    ],
    ids=["bad-byte", "surrogate", "bom", "utf-16"],
)
def test_parse_json_reads_strict_utf8_only(data, want):
    """The bytes are decoded as strict UTF-8 (no BOM, no UTF-16 or -32 guessed from the first
    bytes, no encoded surrogate), as `json.loads` of bytes would not do. Kills parse_json 27,
    76-85."""
    with pytest.raises(DocumentError) as info:
        parse_json(data, file="f.json", pointer="/p")
    assert error_fields(info) == want


def test_parse_json_errors_name_the_pointer_of_nested_json():
    """JSON nested in a string of another document: each error names that string's pointer.
    Kills parse_json 69, 73, 97, 101 (and 1: no pointer when none is given)."""
    for text, rule, message in [
        ('{"a":1,"a":2}', "JSON-002", "duplicate key 'a'"),
        ("[NaN]", "JSON-001", "malformed JSON: NaN is not JSON"),
    ]:
        want = {"rule": rule, "file": "f.json", "message": message}
        with pytest.raises(DocumentError) as info:
            parse_json(text, file="f.json", pointer="/custom")
        assert error_fields(info) == {**want, "pointer": "/custom"}
        with pytest.raises(DocumentError) as info:
            parse_json(text, file="f.json")
        assert error_fields(info) == {**want, "pointer": ""}


def test_parse_json_constants_are_read_only_when_asked():
    """`constants=True` reads NaN and the infinities (the user JSON of a JSON item); by default
    they are refused. Kills parse_json 2, 57, 58."""
    value = parse_json("[NaN, Infinity, -Infinity, 1.5]", file="f.json", constants=True)
    assert value[0] != value[0] and value[1:] == [float("inf"), float("-inf"), 1.5]
    with pytest.raises(DocumentError) as info:
        parse_json("[Infinity]", file="f.json")
    assert_error(info, rule="JSON-001")
    assert "Infinity is not JSON" in info.value.message


def test_nesting_far_deeper_than_python_recurses_is_refused():
    """Nesting deep enough to exhaust the parser's recursion is refused as too deep (not a
    RecursionError), naming the pointer of JSON nested in a string as every other refusal does.
    Kills parse_json 86-93."""
    with pytest.raises(DocumentError) as info:
        parse_json("[" * 100_000 + "]" * 100_000, file="f.json", pointer="/custom")
    e = info.value
    assert (e.rule, e.file, e.pointer) == ("JSON-003", "f.json", "/custom")
    assert error_fields(e) == {
        "rule": "JSON-003",
        "file": "f.json",
        "message": "JSON nesting deeper than 64",
        "pointer": "/custom",
    }


@MODES
def test_a_too_deep_streamed_member_is_refused_before_any_conversion(above, monkeypatch):
    """A document that may nest too deep is parsed whole and checked, its streamed members not
    converted: a converter that flattens values cannot hide a member nesting 65 deep. Kills
    parse_json 40, 41, 105, 108."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    calls = []

    def flatten(key, value):  # type: ignore[no-untyped-def]
        calls.append(key)
        return "flat"

    text = '{"t":{"a":' + "[" * 63 + "]" * 63 + "}}"  # the innermost array at depth 65
    with pytest.raises(DocumentError) as info:
        parse_json(text, file="f.json", streamed={"t": flatten})
    assert (info.value.rule, info.value.file) == ("JSON-003", "f.json")
    assert calls == []


def test_only_documents_with_streamed_members_over_the_size_are_streamed(monkeypatch):
    """Above `_STREAM_ABOVE` bytes (strictly) a document with streamed members is converted as
    parsed; a document without streamed members is parsed whole whatever its size. Kills
    parse_json 39, 42, 59."""
    calls = []

    def convert(key, value):  # type: ignore[no-untyped-def]
        calls.append(key)
        return value

    text = '{"t":{"a":1,"b":2},"u":{"c":3}, NaN}'  # the fault after "t": seen by a streamed parse
    for above, seen in [(len(text), []), (len(text) - 1, ["a", "b"])]:
        monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
        calls.clear()
        with pytest.raises(DocumentError):
            parse_json(text, file="f.json", streamed={"t": convert})
        assert calls == seen
    monkeypatch.setattr(_json, "_STREAM_ABOVE", 0)
    assert parse_json('{"t":{"a":{"b":1}}}', file="f.json") == {"t": {"a": {"b": 1}}}
    assert parse_json("[{}]", file="f.json") == [{}]


@MODES
def test_every_streamed_member_is_converted(above, monkeypatch):
    """Several streamed members, before and after others: each is converted. Kills
    _convert_members 10, 20 and _parse_streamed 32, 33."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", above)
    text = '{"x":{"k":0},"t":{"a":1},"y":2,"t2":{"b":[3]},"z":{}}'
    assert parse_json(text, file="f.json", streamed={"t": _tag, "t2": _tag}) == {
        "x": {"k": 0},
        "t": {"a": ("converted", "a", 1)},
        "y": 2,
        "t2": {"b": ("converted", "b", [3])},
        "z": {},
    }


# ---------------------------------------------------------------------------------------------
# dump_json, expect, expect_object, require, expect_int_list, child


def test_dump_json_writes_python_or_compact_separators_and_no_nan():
    """Orbax's separators (Python's default) or none (`compact`), UTF-8 bytes, NaN refused.
    Kills dump_json 1-14."""
    from ockpt.documents._json import dump_json

    value = {"a": [1, 2.5], "é": None}
    assert dump_json(value) == b'{"a": [1, 2.5], "\\u00e9": null}'
    assert dump_json(value, compact=True) == b'{"a":[1,2.5],"\\u00e9":null}'
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            dump_json([bad])


def test_expect_checks_types_and_never_takes_a_bool_for_an_int():
    """`expect` returns the value of the asked kind; a bool is an int only where bool is
    asked for; the error names the JSON types wanted and got, the rule (JSON-004 unless
    given), file and pointer. Kills expect 1-36, expect_object 1-12."""
    from ockpt.documents._json import expect, expect_object

    assert expect(1, int, file="f", pointer="/p") == 1
    assert expect(True, bool, file="f", pointer="/p") is True
    assert expect(True, (int, bool), file="f", pointer="/p") is True
    assert expect(2.5, (int, float), file="f", pointer="/p") == 2.5
    cases = [
        (
            True,
            int,
            {},
            {
                "rule": "JSON-004",
                "file": "f",
                "message": "wrong type",
                "pointer": "/p",
                "expected": "integer",
                "got": "boolean",
            },
        ),
        (
            "x",
            (int, float),
            {"rule": "R-1"},
            {
                "rule": "R-1",
                "file": "f",
                "message": "wrong type",
                "pointer": "/p",
                "expected": "integer or number",
                "got": "string",
            },
        ),
        (
            [],
            tuple,
            {},
            {
                "rule": "JSON-004",
                "file": "f",
                "message": "wrong type",
                "pointer": "/p",
                "expected": "tuple",
                "got": "array",
            },
        ),
        (
            None,
            dict,
            {},
            {
                "rule": "JSON-004",
                "file": "f",
                "message": "wrong type",
                "pointer": "/p",
                "expected": "object",
                "got": "null",
            },
        ),
    ]
    for value, kind, extra, want in cases:
        with pytest.raises(DocumentError) as info:
            expect(value, kind, file="f", pointer="/p", **extra)
        assert error_fields(info) == want
    assert expect_object({"a": 1}, file="f", pointer="/p") == {"a": 1}
    with pytest.raises(DocumentError) as info:
        expect_object([1], file="f", pointer="/p")
    assert error_fields(info) == {
        "rule": "JSON-004",
        "file": "f",
        "message": "wrong type",
        "pointer": "/p",
        "expected": "object",
        "got": "array",
    }
    with pytest.raises(DocumentError) as info:
        expect_object(1.5, file="f", pointer="/q", rule="X-2")
    assert error_fields(info) == {
        "rule": "X-2",
        "file": "f",
        "message": "wrong type",
        "pointer": "/q",
        "expected": "object",
        "got": "number",
    }


def test_require_names_the_missing_field():
    """`require` returns the member, or refuses naming the key (JSON-005 unless given).
    Kills require 1-11."""
    from ockpt.documents._json import require

    assert require({"k": None}, "k", file="f", pointer="/p") is None
    with pytest.raises(DocumentError) as info:
        require({"x": 1}, "k", file="f", pointer="/p")
    assert error_fields(info) == {
        "rule": "JSON-005",
        "file": "f",
        "message": "required field 'k' is missing",
        "pointer": "/p",
    }
    assert info.value.pointer == "/p"
    with pytest.raises(DocumentError) as info:
        require({}, "k", file="f", pointer="", rule="R-9")
    assert error_fields(info) == {
        "rule": "R-9",
        "file": "f",
        "message": "required field 'k' is missing",
        "pointer": "",
    }


def test_expect_int_list_reads_sizes_and_names_the_bad_item():
    """A JSON array of integers as a tuple; a negative item refused unless allowed, a
    non-integer (or a bool) refused, each naming the item's pointer. Kills expect_int_list
    1-47."""
    from ockpt.documents._json import expect_int_list

    assert expect_int_list([3, 0, 1], file="f", pointer="/s") == (3, 0, 1)
    assert expect_int_list([], file="f", pointer="/s") == ()
    assert expect_int_list([-2, 5], file="f", pointer="/s", non_negative=False) == (-2, 5)
    cases = [
        (
            [1, -1],
            {},
            {
                "rule": "JSON-004",
                "file": "f",
                "message": "negative size",
                "pointer": "/s/1",
                "expected": ">= 0",
                "got": -1,
            },
        ),
        (
            [0, 1, True],
            {"rule": "Z-1"},
            {
                "rule": "Z-1",
                "file": "f",
                "message": "wrong type",
                "pointer": "/s/2",
                "expected": "integer",
                "got": "boolean",
            },
        ),
        (
            (1,),
            {},
            {
                "rule": "JSON-004",
                "file": "f",
                "message": "wrong type",
                "pointer": "/s",
                "expected": "array",
                "got": "tuple",
            },
        ),
        (
            {},
            {"rule": "Z-3"},
            {
                "rule": "Z-3",
                "file": "f",
                "message": "wrong type",
                "pointer": "/s",
                "expected": "array",
                "got": "object",
            },
        ),
        (
            [-1],
            {"rule": "Z-2"},
            {
                "rule": "Z-2",
                "file": "f",
                "message": "negative size",
                "pointer": "/s/0",
                "expected": ">= 0",
                "got": -1,
            },
        ),
    ]
    for value, extra, want in cases:
        with pytest.raises(DocumentError) as info:
            expect_int_list(value, file="f", pointer="/s", **extra)
        assert error_fields(info) == want


def test_child_escapes_tilde_then_slash():
    """A reference token escapes ``~`` as ``~0`` and ``/`` as ``~1`` (RFC 6901); ints are
    indices. Kills child 1-14."""
    from ockpt.documents._json import child

    assert child("/a", "b/c~d") == "/a/b~1c~0d"
    assert child("", "~1/") == "/~01~1"
    assert child("/x", 3) == "/x/3"
