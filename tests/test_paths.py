"""Key paths -> tree keys, param names, sharding keys and string pointers."""

from __future__ import annotations

import collections
import re
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ockpt
from ockpt import DocumentError, FormatError, LeafNameError
from ockpt.paths import (
    EmptyNode,
    KeyEntry,
    KeyType,
    LeafPattern,
    array_prefix,
    check_param_names,
    check_relative,
    decode_sharding_key,
    find_collisions,
    flatten,
    key_texts,
    name_not_found,
    nest,
    param_name,
    parse_leaf_name,
    resolve_name,
    select_paths,
    sharding_key,
    strings_pointer,
    tree_key,
    unflatten,
    unsafe_path,
)
from tests.support.errors import assert_error, error_fields

D, S = KeyType.DICT, KeyType.SEQUENCE


def test_names_of_a_path():
    path = (KeyEntry("opt", D), KeyEntry("1", S), KeyEntry("count", D))
    assert tree_key(path) == "('opt', '1', 'count')"
    assert param_name(path) == "opt.1.count"
    assert sharding_key("a") == "YQ=="  # as seen in real `_sharding` files
    assert strings_pointer("b.e") == "/b.e"
    assert tree_key(()) == "()" and param_name(()) == ""


def test_tree_key_quotes_like_python_repr():
    # Seen in a real _METADATA: "('e', 'q\\'\"\\n')" for the key q'"<newline>
    assert tree_key(["e", "q'\"\n"]) == "('e', 'q\\'\"\\n')"
    assert tree_key(["it's"]) == '("it\'s",)'


@given(st.text())
def test_sharding_key_round_trip(name):
    assert decode_sharding_key(sharding_key(name)) == name


@pytest.mark.parametrize("key", ["YQ", "YQ=", "Y!==", "YR==", "+/==", "////"])
def test_sharding_key_rejects_non_canonical(key):
    with pytest.raises(DocumentError) as e:
        decode_sharding_key(key)
    assert e.value.rule == "SHARD-001"
    assert e.value.file == "_sharding"


def test_collisions():
    assert find_collisions(["a", "b", "a"]) == [("a", "a")]
    assert find_collisions(["a", "a/b"]) == [("a", "a/b")]
    assert find_collisions(["a.b", "ab", "a/bc"]) == []


def test_writer_refuses_colliding_param_names():
    dotted = (KeyEntry("a.b", D),)
    nested = (KeyEntry("a", D), KeyEntry("b", D))
    with pytest.raises(FormatError) as e:
        check_param_names([dotted, nested])
    assert_error(e, rule="PATH-001", pointer="a.b")
    assert "'a.b'" in e.value.message
    with pytest.raises(FormatError) as e:
        check_param_names([(KeyEntry("a", D),), (KeyEntry("a/b", D),)])
    assert e.value.rule == "PATH-001"
    with pytest.raises(FormatError) as e:
        check_param_names([(KeyEntry("c~d", D),)], string_leaves=[(KeyEntry("c~d", D),)])
    assert e.value.rule == "PATH-002"
    check_param_names([dotted, (KeyEntry("c~d", D),)])  # '~' is fine for array leaves


def test_flatten_orders_and_types_keys():
    Point = collections.namedtuple("Point", "y x")
    tree = {"b": [1, (2, None)], "a": {}, 10: "s", 9: Point(3, 4), "e": []}
    with pytest.raises(TypeError):
        sorted(tree)  # mixed keys: flatten falls back to text order
    got = [(tree_key(p), [int(e.key_type) for e in p], v) for p, v in flatten(tree)]
    assert got == [
        ("('10',)", [2], "s"),
        ("('9', 'y')", [2, 2], 3),
        ("('9', 'x')", [2, 2], 4),
        ("('a',)", [2], EmptyNode.DICT),
        ("('b', '0')", [2, 1], 1),
        ("('b', '1', '0')", [2, 1, 1], 2),
        ("('b', '1', '1')", [2, 1, 1], EmptyNode.NONE),
        ("('e',)", [2], EmptyNode.LIST),
    ]
    assert [tree_key(p) for p, _ in flatten({2: 0, 10: 1})] == ["('2',)", "('10',)"]


def test_flatten_refuses_keys_with_equal_text():
    with pytest.raises(FormatError) as e:
        list(flatten({1: 0, "1": 1}))
    assert e.value.rule == "PATH-001"


json_trees = st.recursive(
    st.integers() | st.text(max_size=3) | st.none(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


@given(json_trees)
def test_unflatten_inverts_flatten(tree):
    assert unflatten(flatten(tree)) == tree


@pytest.mark.parametrize(
    "entries, message",
    [
        (
            [((KeyEntry("a", D),), 1), ((KeyEntry("a", D), KeyEntry("b", D)), 2)],
            "both a leaf and a node",
        ),
        (  # a leaf that is a dict is still no node
            [((KeyEntry("a", D),), {}), ((KeyEntry("a", D), KeyEntry("b", D)), 2)],
            "both a leaf and a node",
        ),
        (
            [((KeyEntry("a", D), KeyEntry("b", D)), 2), ((KeyEntry("a", D),), 1)],
            "appears twice or holds children",
        ),
        (
            [((KeyEntry("a", D), KeyEntry("0", S)), 1), ((KeyEntry("a", D), KeyEntry("x", D)), 2)],
            "both key types",
        ),
        ([((KeyEntry("1", S),), 1)], "not 0..n-1"),
        # siblings (entries after the first under one parent start at the parent)
        (
            [((KeyEntry("a", D), KeyEntry("b", D)), 1), ((KeyEntry("a", D), KeyEntry("b", D)), 2)],
            "appears twice",
        ),
        (
            [((KeyEntry("a", D), KeyEntry("b", D)), 1), ((KeyEntry("a", D), KeyEntry("0", S)), 2)],
            "both key types",
        ),
        (
            [
                ((KeyEntry("a", D), KeyEntry("b", D)), 1),
                ((KeyEntry("a", D), KeyEntry("b", D), KeyEntry("c", D)), 2),
            ],
            "both a leaf and a node",
        ),
        (
            [((KeyEntry("a", D), KeyEntry("0", S)), 1), ((KeyEntry("a", D), KeyEntry("2", S)), 2)],
            "not 0..n-1",
        ),
        ([((KeyEntry("a", D),), 1), ((KeyEntry("a", D),), 1)], "appears twice"),
        ([((), 1), ((KeyEntry("a", D),), 1)], "root leaf"),
    ],
)
def test_unflatten_rejects_inconsistent_trees(entries, message):
    with pytest.raises(DocumentError) as e:
        unflatten(entries)
    assert e.value.rule == "META-006" and message in e.value.message


def test_unflatten_of_siblings_with_equal_but_distinct_keys():
    """Siblings whose parent keys are equal objects or only equal ones build the same tree."""
    shared = KeyEntry("a", D)
    ones = [((shared, KeyEntry(str(i), S)), i) for i in range(3)]
    fresh = [((KeyEntry("a", D), KeyEntry(str(i), S)), i) for i in range(3)]
    deep = [((KeyEntry("a", D), KeyEntry("0", S), KeyEntry("x", D)), 9)]
    assert unflatten(ones) == unflatten(fresh) == {"a": [0, 1, 2]}
    assert unflatten(deep + [((KeyEntry("a", D), KeyEntry("1", S)), 1)]) == {"a": [{"x": 9}, 1]}


def test_sequence_key_must_be_an_index():
    with pytest.raises(ValueError):
        KeyEntry("x", S)


def test_nest_builds_the_tree_and_refuses_keys_that_would_hold_each_other():
    """`paths.nest` (flat sources: safetensors names, torch state-dict keys): a tree of dicts,
    and a ValueError naming the keys for each way two key paths cannot both be leaves."""
    from ockpt.paths import nest

    assert nest([(("a", "b"), 1), (("a", "c"), 2), (("d",), 3)]) == {"a": {"b": 1, "c": 2}, "d": 3}
    cases = [
        ([(("a",), 1), (("a", "b"), 2)], "keys 'a' and 'a/b' collide"),  # leaf first
        ([(("a", "b"), 1), (("a",), 2)], "key 'a' is a leaf and a subtree"),  # subtree first
        ([(("a", "b"), 1), (("a", "b"), 2)], "key 'a/b' is repeated"),
        ([(("a", ""), 1)], "key 'a/' has an empty '/'-separated part"),
        ([((), 1)], "key '' has an empty"),
    ]
    for items, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            nest(items)
    with pytest.raises(ValueError, match=re.escape("keys 'x' and 'x.y' collide")):
        nest([(("x",), 1), (("x", "y"), 2)], sep=".")




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




def _path(*keys: str) -> tuple[KeyEntry, ...]:
    """A key path of DICT keys, SEQUENCE where the text is a decimal index."""
    return tuple(KeyEntry(k, S if k.isdigit() else D) for k in keys)


# ---------------------------------------------------------------------------------------------
# unsafe_path / check_relative (PATH-003)


@pytest.mark.parametrize(
    "name, why",
    [
        ("a\0b", "NUL byte in path"),
        ("/etc/passwd", "absolute path"),
        ("a/../../b", "'..' path segment"),
    ],
)
def test_check_relative_says_why_a_name_would_leave_the_checkpoint(name, why):
    """`unsafe_path`'s three reasons, word for word, and the whole PATH-003 error
    `check_relative` builds from them: message, file, got.
    Kills unsafe_path 4, 5, 6 (NUL), 11, 12 (absolute), 20, 21 ('..');
    check_relative 8 (message), 10, 14 (file), 11, 15 (got)."""
    assert unsafe_path(name) == why
    with pytest.raises(FormatError) as info:
        check_relative(name, file="item/_METADATA")
    assert error_fields(info) == {
        "rule": "PATH-003",
        "file": "item/_METADATA",
        "message": f"{why}: {name!r} would leave the checkpoint",
        "pointer": None,
        "got": name,
    }


def test_check_relative_passes_absolute_ok_on():
    """A per-leaf param name may begin with ``/`` when the caller says so (`absolute_ok`);
    a ``..`` segment is refused all the same.
    Kills check_relative 4 (absolute_ok=None), 6 (absolute_ok dropped)."""
    assert check_relative("/params/w/", absolute_ok=True) is None
    with pytest.raises(FormatError) as info:
        check_relative("/params/../w", absolute_ok=True)
    assert info.value.message == "'..' path segment: '/params/../w' would leave the checkpoint"
    with pytest.raises(FormatError) as info:
        check_relative("/params/w/")
    assert info.value.message == "absolute path: '/params/w/' would leave the checkpoint"


# ---------------------------------------------------------------------------------------------
# decode_sharding_key (SHARD-001)


@pytest.mark.parametrize("key", ["ab+c", "ab/c", "abc", "a=bc"])
def test_a_sharding_key_that_is_not_padded_url_safe_base64(key):
    """A key outside the URL-safe alphabet (even of a length that is a multiple of 4) or of a
    length that is not one fails the first check, with its own message.
    Kills decode_sharding_key 1 (`and` for `or`: ``ab+c`` would decode, ``abc`` fail to), 6,
    14, 15, 16 (message)."""
    with pytest.raises(DocumentError) as info:
        decode_sharding_key(key, file="item/_sharding")
    assert error_fields(info) == {
        "rule": "SHARD-001",
        "file": "item/_sharding",
        "message": "not padded URL-safe base64",
        "pointer": "/" + key,
    }


def test_a_sharding_key_that_is_not_utf8():
    """``_w==`` is canonical base64 of the byte 0xff, which is no UTF-8: the error says so
    with the codec's words, the rule, the file and the key as pointer.
    Kills decode_sharding_key 30-41 (message, rule, file, pointer of the undecodable key)."""
    why = "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    with pytest.raises(DocumentError) as info:
        decode_sharding_key("_w==", file="item/_sharding")
    assert error_fields(info) == {
        "rule": "SHARD-001",
        "file": "item/_sharding",
        "message": f"undecodable key: {why}",
        "pointer": "/_w==",
    }
    with pytest.raises(DocumentError) as info:
        decode_sharding_key("_w==")
    assert error_fields(info) == {
        "rule": "SHARD-001",
        "file": "_sharding",
        "message": f"undecodable key: {why}",
        "pointer": "/_w==",
    }


def test_a_non_canonical_sharding_key():
    """``AB==`` decodes (to the byte 0) but is not what `sharding_key` writes for it (``AA==``):
    the error gives both, the rule and the key as pointer.
    Kills decode_sharding_key 44, 56, 57 (message), 47, 53, 61 (pointer), 48, 54 (expected),
    49, 55 (got)."""
    with pytest.raises(DocumentError) as info:
        decode_sharding_key("AB==", file="item/_sharding")
    assert error_fields(info) == {
        "rule": "SHARD-001",
        "file": "item/_sharding",
        "message": "non-canonical base64",
        "pointer": "/AB==",
        "expected": "AA==",
        "got": "AB==",
    }


# ---------------------------------------------------------------------------------------------
# check_param_names / find_collisions (PATH-001, PATH-002)


def test_key_paths_that_share_a_param_name():
    """Three key paths with the param name ``a.b.c``: the error shows the first two, joined
    with `` and ``, and points at the name.
    Kills check_param_names 10, 12, 13, 14 (the paths shown), 16 (three shown), 19, 22
    (pointer)."""
    paths = [_path("a.b.c"), _path("a", "b.c"), _path("a.b", "c")]
    with pytest.raises(FormatError) as info:
        check_param_names(paths)
    assert error_fields(info) == {
        "rule": "PATH-001",
        "file": None,
        "message": "key paths ('a.b.c',) and ('a', 'b.c') share the param name 'a.b.c'",
        "pointer": "a.b.c",
    }


def test_a_param_name_that_nests_inside_another():
    """``a/b`` nests inside ``a``: the error names both and points at the inner one.
    Kills check_param_names 27 (message), 29, 32 (pointer)."""
    with pytest.raises(FormatError) as info:
        check_param_names([_path("a"), _path("a/b")])
    assert error_fields(info) == {
        "rule": "PATH-001",
        "file": None,
        "message": "param name 'a/b' nests inside param name 'a'",
        "pointer": "a/b",
    }


def test_a_string_leaf_with_a_tilde():
    """A string leaf's name holding ``~`` is refused (PATH-002), pointing at the name.
    Kills check_param_names 39 (message), 41, 44 (pointer)."""
    with pytest.raises(FormatError) as info:
        check_param_names([_path("x", "a~b")], string_leaves=[_path("x", "a~b")])
    assert error_fields(info) == {
        "rule": "PATH-002",
        "file": None,
        "message": "string leaf 'x.a~b': '~' cannot appear in its JSON pointer",
        "pointer": "x.a~b",
    }


def test_find_collisions_prefixes_are_whole_segments_joined_with_slash():
    """Prefixes are joined back with ``/`` (``a/b`` inside ``a/b/c``), and the empty prefix is
    not one: the empty name (a root leaf) collides with nothing but itself.
    Kills find_collisions 13 (`range(len(parts))`), 18 (joined with ``XX/XX``)."""
    assert find_collisions(["a/b", "a/b/c"]) == [("a/b", "a/b/c")]
    assert find_collisions(["", "a", "b/c"]) == []
    assert find_collisions(["", ""]) == [("", "")]


# ---------------------------------------------------------------------------------------------
# resolve_name / key_texts / KeyEntry


def _nothing_exists(texts: tuple[str, ...]) -> bool:
    return False


def test_resolve_name_of_an_int_and_of_a_key_entry():
    """An int or a `KeyEntry` is a key path of one key.
    Kills resolve_name 2 (`keys = None`)."""
    seen: list[tuple[str, ...]] = []

    def exists(texts: tuple[str, ...]) -> bool:
        seen.append(texts)
        return True

    kw = {"exists": exists, "param_names": dict, "names": list}
    assert resolve_name(3, **kw) == ("3",)
    assert resolve_name(KeyEntry("w", D), **kw) == ("w",)
    assert seen == [("3",), ("w",)]


def test_resolve_name_errors_name_the_file():
    """A name of another type is a TypeError that shows it; a tuple that names nothing is
    PATH-007 with the file; a malformed leaf name that is no param name is PATH-006 with the
    message of the malformed name, the name and the file.
    Kills resolve_name 4 (TypeError text), 10, 13 (file of PATH-007), 23, 25, 26, 30
    (message, name, file of PATH-006)."""
    kw = {"exists": _nothing_exists, "param_names": dict, "names": list, "file": "ckpt/0"}
    with pytest.raises(TypeError) as info:
        resolve_name(1.5, **kw)
    assert str(info.value) == "a name is a str, an int or a tuple of keys, not 1.5"
    with pytest.raises(LeafNameError) as info:
        resolve_name(("params", "w"), **kw)
    e = info.value
    assert (e.message, e.rule, e.name, e.file) == (
        "no leaf or subtree named 'params/w'",
        "PATH-007",
        "params/w",
        "ckpt/0",
    )
    with pytest.raises(LeafNameError) as info:
        resolve_name("a//b", **kw)
    assert error_fields(info) == {
        "rule": "PATH-006",
        "file": "ckpt/0",
        "message": "malformed leaf name 'a//b': an empty key (write an empty key text as \\e)",
        "name": "a//b",
        "close": (),
    }


def test_key_texts_of_each_kind_of_key():
    """`KeyEntry` gives its text, str itself, int its decimal text; bool is refused, with a
    TypeError naming its type and value.
    Kills key_texts 2 (KeyEntry -> None), 5 (`isinstance(k, bool)`), 6, 7 (int -> None,
    ``'None'``), 8, 9 (TypeError text)."""
    assert key_texts([KeyEntry("w", D), "b", 12]) == ("w", "b", "12")
    with pytest.raises(TypeError) as info:
        key_texts(["a", True])
    assert str(info.value) == "a key path holds str and int keys, not bool: True"
    with pytest.raises(TypeError) as info:
        key_texts([None])
    assert str(info.value) == "a key path holds str and int keys, not NoneType: None"


def test_a_sequence_key_must_be_a_decimal_index():
    """Kills KeyEntry.__post_init__ 5 (the ValueError's text)."""
    with pytest.raises(ValueError) as info:
        KeyEntry("01", S)
    assert str(info.value) == "sequence index must be a decimal integer, got '01'"


# ---------------------------------------------------------------------------------------------
# array_prefix / nest / flatten


def test_array_prefix_edges():
    """Only a per-leaf name loses its leading and trailing ``/`` (and no other character);
    the empty name has the empty prefix.
    Kills array_prefix 1 (`per_leaf=True` by default), 4 (`strip("XX/XX")`), 6 (``XXXX``)."""
    assert array_prefix("/a/") == "/a/"
    assert array_prefix("/a/", per_leaf=True) == "a/"
    assert array_prefix("XaX", per_leaf=True) == "XaX/"
    assert array_prefix("") == ""
    assert array_prefix("/", per_leaf=True) == ""


def test_nest_names_the_key_that_would_hold_another():
    """The collision message names the key up to the part that is a leaf: ``a/b`` for
    ``a/b`` and ``a/b/c``.
    Kills nest 22 (`key[: depth - 1]`)."""
    with pytest.raises(ValueError) as info:
        nest([(("a", "b"), 1), (("a", "b", "c"), 2)])
    assert str(info.value) == "keys 'a/b' and 'a/b/c' collide: one would hold the other"


def test_flatten_refuses_two_dict_keys_with_one_text():
    """``1`` and ``"1"`` both read ``1``: PATH-001 with the param name as pointer.
    Kills flatten 11 (message), 13, 16 (pointer)."""
    with pytest.raises(FormatError) as info:
        list(flatten({"x": {1: "a", "1": "b"}}))
    assert error_fields(info) == {
        "rule": "PATH-001",
        "file": None,
        "message": "two dict keys both read '1'",
        "pointer": "x.1",
    }


class _Empty(NamedTuple):
    pass


def test_flatten_goes_on_after_empty_containers():
    """An empty NamedTuple and an empty tuple are leaves (their own `EmptyNode`), and the walk
    goes on after them.
    Kills flatten 31 (`break` after an empty NamedTuple), 43 (an empty tuple given as LIST)."""
    got = list(flatten({"a": _Empty(), "b": (), "c": [], "d": 1}))
    assert got == [
        (_path("a"), EmptyNode.NAMED_TUPLE),
        (_path("b"), EmptyNode.TUPLE),
        (_path("c"), EmptyNode.LIST),
        (_path("d"), 1),
    ]


# ---------------------------------------------------------------------------------------------
# leaf names: _segments (PATH-006)


def test_a_bad_escape_in_a_leaf_name_and_in_a_pattern():
    """``\\*`` is an escape in a pattern only, ``\\X`` in neither; the message shows the bad
    escape, where it is and the escapes allowed there.
    Kills _segments 4 (pattern escapes in leaf names), 5, 6 (``X`` taken as escapable), 30,
    32, 34, 36, 37 (the escapes listed), 38, 39, 41 (the bad escape shown), 43 (message), 44
    (pattern=None: "leaf name")."""
    with pytest.raises(LeafNameError) as info:
        parse_leaf_name(r"a\*")
    e = info.value
    assert e.message == r"malformed leaf name 'a\\*': '\\*' at 1 is not an escape (\\, \/, \e)"
    assert (e.rule, e.name) == ("PATH-006", r"a\*")
    with pytest.raises(LeafNameError) as info:
        parse_leaf_name(r"a/\X")
    assert info.value.message == (
        r"malformed leaf name 'a/\\X': '\\X' at 2 is not an escape (\\, \/, \e)"
    )
    assert LeafPattern.parse(r"a\*").segments == ("a*",)
    with pytest.raises(LeafNameError) as info:
        LeafPattern.parse(r"a\X")
    assert info.value.message == (
        r"malformed selection pattern 'a\\X': '\\X' at 1 is not an escape (\\, \/, \*, \?, \e)"
    )


def test_the_empty_key_escape_stands_alone():
    """``\\e`` beside other characters in a key is malformed, in a leaf name and in a pattern.
    Kills _segments 85, 90, 91 (message), 86 (pattern=None: "leaf name")."""
    with pytest.raises(LeafNameError) as info:
        parse_leaf_name(r"a\e")
    assert info.value.message == r"malformed leaf name 'a\\e': \e stands for a whole key"
    with pytest.raises(LeafNameError) as info:
        LeafPattern.parse(r"x/\e*")
    assert info.value.message == (
        r"malformed selection pattern 'x/\\e*': \e stands for a whole key"
    )


# ---------------------------------------------------------------------------------------------
# unflatten / _materialize (META-006)


def _meta006(entries, message, pointer=None, file="item/_METADATA"):
    with pytest.raises(DocumentError) as info:
        unflatten(entries, file=file)
    assert error_fields(info) == {
        "rule": "META-006",
        "file": file,
        "message": message,
        "pointer": pointer,
    }


def test_a_root_leaf_beside_other_entries():
    """A root leaf (the empty key path) after other entries, or before them, is META-006 with
    the file.
    Kills unflatten 6-15 (the error for a root leaf after others), 24, 27, 28 (the error for
    entries after a root leaf), 32, 33 (`have_any` not set by a non-root entry: the root leaf
    would replace the tree)."""
    _meta006([(_path("a"), 1), ((), 2)], "a root leaf beside other entries")
    _meta006([((), 2), (_path("a"), 1)], "a root leaf beside other entries")


def test_unflatten_errors_point_at_the_key_path():
    """Each META-006 error of a node names the node or key path and points at it, in the given
    file.
    Kills unflatten 50, 51, 54, 55 (both key types: file, pointer), 71, 72, 75, 76 (a key path
    twice: file, pointer), 100, 101 (leaf and node: the name), 105 (its pointer)."""
    _meta006(
        [(_path("a", "0"), 1), (_path("a", "b"), 2)],
        "node ('a',) has keys of both key types",
        "('a', 'b')",
    )
    _meta006(
        [(_path("a", "b"), 1), (_path("a", "b"), 2)],
        "key path ('a', 'b') appears twice or holds children",
        "('a', 'b')",
    )
    _meta006(
        [(_path("a", "b"), 1), (_path("a", "b", "c", "d"), 2)],
        "'a.b' is both a leaf and a node",
        "('a', 'b')",
    )


def test_sequence_holes_name_the_sequence_and_the_file():
    """A sequence without index 0..n-1, at the top, inside a dict and inside a list: the error
    points at that sequence and names the file given (or `_METADATA`).
    Kills unflatten 119 (file of the top node); _materialize 13 (file inside a dict), 27, 31
    (file of the error), 40 (file inside a list), 47 (the list index in the pointer)."""
    _meta006([(_path("1"), 1)], "sequence () has indices [1], not 0..n-1", "()")
    _meta006([(_path("1"), 1)], "sequence () has indices [1], not 0..n-1", "()", file="_METADATA")
    with pytest.raises(DocumentError) as info:
        unflatten([(_path("1"), 1)])
    assert info.value.file == "_METADATA"
    _meta006([(_path("a", "1"), 1)], "sequence ('a',) has indices [1], not 0..n-1", "('a',)")
    _meta006(
        [(_path("0", "0"), 1), (_path("1", "2"), 1)],
        "sequence ('1',) has indices [2], not 0..n-1",
        "('1',)",
    )


def test_a_root_leaf_that_is_a_dict_is_a_leaf():
    """A tree that is one leaf whose value is a dict gives that dict back, as it is.
    Kills unflatten 109 (`kinds` None for the root leaf)."""
    value = {"x": [1]}
    assert unflatten([((), value)]) is value
    assert unflatten([((), EmptyNode.DICT)]) == {}
