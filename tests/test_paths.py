"""Key paths -> tree keys, param names, sharding keys and string pointers."""

from __future__ import annotations

import collections
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ockpt import DocumentError, FormatError
from ockpt.paths import (
    EmptyNode,
    KeyEntry,
    KeyType,
    check_param_names,
    decode_sharding_key,
    find_collisions,
    flatten,
    param_name,
    sharding_key,
    strings_pointer,
    tree_key,
    unflatten,
)

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
    assert "_sharding" in str(e.value)


def test_collisions():
    assert find_collisions(["a", "b", "a"]) == [("a", "a")]
    assert find_collisions(["a", "a/b"]) == [("a", "a/b")]
    assert find_collisions(["a.b", "ab", "a/bc"]) == []


def test_writer_refuses_colliding_param_names():
    dotted = (KeyEntry("a.b", D),)
    nested = (KeyEntry("a", D), KeyEntry("b", D))
    with pytest.raises(FormatError) as e:
        check_param_names([dotted, nested])
    assert e.value.rule == "PATH-001" and "'a.b'" in str(e.value)
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
    assert e.value.rule == "META-006" and message in str(e.value)


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
