"""Leaf names (spec/key-paths.md §7): one way to name a leaf or a subtree, taken and printed
alike by `ockpt.open(path)[...]`, `cat`, `inspect`, `tree`, `diff` and `convert --select`, on
real-Orbax golden fixtures (odd_keys holds keys with `.`, `/`, `\\`, an empty key, and both
`{"a/b": x}` and `{"a": {"b": y}}` under one node)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ockpt
from ockpt.cli import main
from ockpt.convert import convert
from ockpt.engines import tensorstore as ts_engine
from ockpt.paths import LeafPattern, leaf_name, param_name, parse_leaf_name, select_paths
from tests.support import FIXTURES
from tests.support.errors import assert_error
from tests.support.expected import assert_same, expected_items

CASES = FIXTURES / "orbax-0.12.8"
ODD = CASES / "odd_keys"
NESTED = CASES / "nested"

key_texts = st.lists(st.text(), max_size=6).map(tuple)


# ---------------------------------------------------------------------------------------------
# Syntax (§7.1, §7.2).


@settings(max_examples=500, deadline=None)
@given(key_texts)
def test_leaf_name_round_trips_over_arbitrary_key_texts(texts):
    name = leaf_name(texts)
    assert parse_leaf_name(name) == texts
    assert LeafPattern.parse(name.replace("*", "\\*").replace("?", "\\?")).literal == texts


@settings(max_examples=300, deadline=None)
@given(key_texts, key_texts)
def test_distinct_key_paths_have_distinct_leaf_names(a, b):
    assert (leaf_name(a) == leaf_name(b)) == (a == b)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1).filter(lambda t: "/" not in t and "\\" not in t), max_size=5))
def test_plain_keys_leaf_name_is_the_param_name_with_slashes(texts):
    assert leaf_name(texts) == "/".join(texts)
    assert leaf_name(texts).replace("/", ".") == param_name(texts)


@pytest.mark.parametrize(
    ("texts", "name"),
    [
        (("params", "dense", "kernel"), "params/dense/kernel"),
        (("dot", "a.b"), "dot/a.b"),
        (("slash_and_nested", "a/b"), "slash_and_nested/a\\/b"),
        (("backslash", "a\\b"), "backslash/a\\\\b"),
        (("empty_key", ""), "empty_key/\\e"),
        (("",), "\\e"),
        ((), ""),
    ],
)
def test_leaf_names_of_the_spec_table(texts, name):
    assert leaf_name(texts) == name and parse_leaf_name(name) == texts


@pytest.mark.parametrize("bad", ["a//b", "a/", "/a", "a\\q", "a\\", "x\\ey", "\\e\\e", "a\\.b"])
def test_malformed_leaf_names_are_refused(bad):
    with pytest.raises(ockpt.LeafNameError) as info:
        parse_leaf_name(bad)
    assert_error(info, rule="PATH-006", name=bad)
    assert repr(bad) in info.value.message


@settings(max_examples=300, deadline=None)
@given(key_texts, key_texts)
def test_a_pattern_selects_its_subtree(prefix, rest):
    escaped = leaf_name(prefix).replace("*", "\\*").replace("?", "\\?")
    assert LeafPattern.parse(escaped).matches(prefix + rest)
    deep = LeafPattern.parse(escaped + "/**" if prefix else "**")
    assert deep.matches(prefix + rest)


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("params/**", ("params", "dense", "kernel"), True),
        ("params/**", ("opt_state", "mu"), False),
        ("**/kernel", ("params", "dense", "kernel"), True),
        ("**/kernel", ("params", "kernels"), False),
        ("opt/*/mu", ("opt", "0", "mu", "w"), True),
        ("opt/*/mu", ("opt", "mu"), False),
        ("l?yer*", ("layers_0", "w"), True),
        ("a\\*b", ("axb",), False),
        ("a\\*b", ("a*b",), True),
        ("\\e/*", ("", "x"), True),
        ("*", ("a\nb",), True),
    ],
)
def test_pattern_matching(pattern, path, hit):
    assert LeafPattern.parse(pattern).matches(path) is hit


def test_select_paths_refuses_patterns_that_select_nothing():
    paths = [("params", "w"), ("opt", "mu", "w")]
    assert select_paths(["params"], paths) == [0]
    assert select_paths(["**/w"], paths) == [0, 1]
    assert select_paths(["opt.mu.w"], paths) == [1]  # a param name, as a last resort
    with pytest.raises(ockpt.LeafNameError) as info:
        select_paths(["opt.mu"], paths, file="ckpt")
    assert info.value.rule == "PATH-007" and "'opt/mu'" in info.value.message
    assert info.value.file == "ckpt" and info.value.name == "opt.mu"
    with pytest.raises(ockpt.LeafNameError) as info:
        select_paths(["a//b"], paths)
    assert info.value.rule == "PATH-006"


# ---------------------------------------------------------------------------------------------
# ockpt.open(path)[...]: leaf names, param names, key tuples, lazy subtrees (§7.3).


def _leaves(meta, path=()):
    if isinstance(meta, ockpt.LeafMetadata):
        yield path, meta
    elif isinstance(meta, dict):
        for k, v in meta.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(meta, list):
        for i, v in enumerate(meta):
            yield from _leaves(v, (*path, str(i)))


def _same(value, want, where):
    if isinstance(want, str):
        assert value == want, where
    else:
        np.testing.assert_array_equal(np.asarray(value[...]), np.asarray(want), err_msg=where)


def _at(tree, texts):
    """The node of a recorded tree (int dict keys, named tuples) at key texts."""
    for t in texts:
        if isinstance(tree, dict):
            tree = tree[t] if t in tree else tree[int(t)]
        elif hasattr(tree, "_fields"):
            tree = getattr(tree, t)
        else:
            tree = tree[int(t)]
    return tree


@pytest.mark.parametrize("case", ["odd_keys", "odd_keys_no_ocdbt", "nested"])
def test_open_takes_leaf_names_tuples_and_unambiguous_param_names(case):
    path = CASES / case / "checkpoint"
    expected = expected_items(CASES / case)[""]
    with ockpt.open(path) as ckpt:
        leaves = list(_leaves(ckpt.metadata))
        assert ckpt.keys() == [leaf_name(p) for p, _ in leaves]
        names = set(ckpt.keys())
        for texts, meta in leaves:
            want = _at(expected, texts)
            _same(ckpt[leaf_name(texts)], want, leaf_name(texts))
            _same(ckpt[texts], want, repr(texts))
            if meta.param_name not in names:  # the param name is no other leaf's name
                _same(ckpt[meta.param_name], want, meta.param_name)
            assert leaf_name(texts) in ckpt and texts in ckpt


def test_the_leaf_name_reading_wins_over_the_param_name():
    """odd_keys holds {"a/b": x, "a": {"b": y}} under `slash_and_nested`."""
    expected = expected_items(ODD)[""]["slash_and_nested"]
    with ockpt.open(ODD / "checkpoint") as ckpt:
        nested, slashed = expected["a"]["b"], expected["a/b"]
        assert not np.array_equal(nested, slashed)
        assert np.array_equal(ckpt["slash_and_nested/a/b"][...], nested)
        assert np.array_equal(ckpt["slash_and_nested/a\\/b"][...], slashed)
        assert np.array_equal(ckpt["slash_and_nested", "a/b"][...], slashed)
        assert np.array_equal(ckpt["slash_and_nested.a/b"][...], slashed)  # param name
        assert np.array_equal(ckpt["slash_and_nested.a.b"][...], nested)  # param name
        sub = ckpt["slash_and_nested"]
        assert isinstance(sub, ockpt.Subtree) and sorted(sub.keys()) == ["a/b", "a\\/b"]
        assert np.array_equal(sub["a\\/b"][...], slashed)


def test_subtrees_are_lazy_views():
    path = NESTED / "checkpoint"
    expected = expected_items(NESTED)[""]
    with ockpt.open(path, backend="tensorstore") as ckpt:
        before = ts_engine.chunk_reads()
        layers = ckpt["layers"]
        assert isinstance(layers, ockpt.Subtree) and layers.name == "layers"
        assert layers.keys() == ["0/b", "0/w", "1/w"] and len(layers) == 3
        first = layers[0]  # an int key, relative to the subtree
        assert isinstance(first, ockpt.Subtree) and first.key_path == ("layers", "0")
        assert ckpt[("layers", "0")].keys() == first.keys() == ["b", "w"]
        assert [k for k, _ in layers.items()] == layers.keys()
        meta = layers.metadata
        assert meta == ockpt.pytree_metadata(path)["layers"]
        assert all(k in layers for k in ("0/w", "0.w", ("0", "w"), (0, "w")))
        w = first["w"]
        assert w.shape == (2, 3)
        assert ts_engine.chunk_reads() == before  # nothing read yet
        assert np.array_equal(w[1:, :2], expected["layers"][0]["w"][1:, :2])
        assert ts_engine.chunk_reads() > before
        assert_same(layers.load(), expected["layers"])
        assert_same(ckpt["point", "y"].load(), _at(expected, ("point", "y")))
        assert ckpt["layers/1/b"] is None and ckpt["empty_dict"] == {} and ckpt["opt/2"] == ()
        target = [{"b": np.zeros(3, np.float64), "w": ...}, {"b": None, "w": ...}]
        part = layers.load(target)
        assert part[0]["w"] is Ellipsis and part[0]["b"].dtype == np.float64
        assert ckpt[""].keys() == ckpt.keys() and ckpt[()].keys() == ckpt.keys()


def test_unknown_names_are_ockpt_errors_with_close_matches():
    path = NESTED / "checkpoint"
    with ockpt.open(path) as ckpt:
        with pytest.raises(ockpt.LeafNameError) as info:
            ckpt["layers.1"]  # a param name names leaves only; the subtree is layers/1
        e = info.value
        assert e.rule == "PATH-007" and isinstance(e, KeyError)
        assert_error(e, rule="PATH-007", file=str(path), name="layers.1")
        assert "'layers.1'" in e.message and e.close[0] == "layers/1"
        with pytest.raises(ockpt.LeafNameError) as info:
            ckpt["layers"]["2"]
        assert info.value.rule == "PATH-007" and "subtree 'layers'" in info.value.message
        with pytest.raises(ockpt.LeafNameError) as info:
            ckpt["layers", "9", "w"]
        assert info.value.rule == "PATH-007" and "'layers/9/w'" in info.value.message
        with pytest.raises(ockpt.LeafNameError) as info:
            ckpt["layers//w"]
        assert info.value.rule == "PATH-006"
        with pytest.raises(TypeError):
            ckpt["layers", 1.5]
        assert ckpt.get("nope") is None and "nope" not in ckpt and "layers" in ckpt


# ---------------------------------------------------------------------------------------------
# The command line: every command takes and prints the same names.


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_commands_print_and_take_the_same_names(capsys):
    path = str(ODD / "checkpoint")
    with ockpt.open(path) as ckpt:
        names = ckpt.keys()
    expected = expected_items(ODD)[""]
    code, out, _ = run(capsys, "inspect", "--json", path)
    assert code == 0 and [r["name"] for r in json.loads(out)["leaves"]] == names
    code, out, _ = run(capsys, "tree", "--json", path)
    assert code == 0 and [r["leaf_name"] for r in json.loads(out)] == names
    code, out, _ = run(capsys, "tree", path)
    assert "slash_and_nested/a\\/b: np.ndarray  param_name='slash_and_nested.a/b'" in out
    for name in names:
        code, out, err = run(capsys, "cat", "--json", path, name)
        assert code == 0, err
        data = json.loads(out)
        assert data["name"] == name
        want = _at(expected, parse_leaf_name(name))
        if isinstance(want, str):
            assert data["values"] == want
        else:
            assert np.array_equal(np.array(data["values"]), want), name


def test_diff_names_leaves_by_leaf_name(capsys, tmp_path):
    tree = ockpt.load_pytree(ODD / "checkpoint")
    tree["slash_and_nested"]["a/b"] = tree["slash_and_nested"]["a/b"] + 1
    del tree["empty_key"], tree["trailing_slash"]  # names ockpt's writer refuses (WRITE-004)
    ockpt.save_pytree(tmp_path / "changed", tree)
    code, out, _ = run(capsys, "diff", "--json", str(ODD / "checkpoint"), str(tmp_path / "changed"))
    found = {(d["kind"], d["name"]) for d in json.loads(out)["differences"]}
    assert code == 1
    assert found == {
        ("values", "slash_and_nested/a\\/b"),
        ("only_in_a", "empty_key/\\e"),
        ("only_in_a", "trailing_slash/a\\/"),
    }
    with ockpt.open(ODD / "checkpoint") as ckpt:
        assert all(name in ckpt for _, name in found)


def test_cat_refuses_a_subtree_and_malformed_names(capsys):
    path = str(NESTED / "checkpoint")
    code, _, err = run(capsys, "cat", path, "layers/0")
    assert code == 2 and "names a subtree of 2 leaves ('layers/0/b', 'layers/0/w')" in err
    code, _, err = run(capsys, "cat", path, "layers\\/0")
    assert code == 1 and "PATH-007" in err
    code, _, err = run(capsys, "cat", path, "layers\\x")
    assert code == 2 and "PATH-006" in err
    code, out, _ = run(capsys, "cat", "--json", path, "layers.0.w")  # a param name still works
    assert code == 0 and json.loads(out)["name"] == "layers/0/w"


@pytest.mark.parametrize(
    "where",
    [
        ["manager/checkpoint"],
        ["manager/checkpoint/1"],
        ["manager/checkpoint", "--step", "0"],
        ["manager_prefixed/checkpoint"],
        ["v1_checkpointables/checkpoint"],
        ["../orbax-0.3.5/manager/checkpoint"],  # no _METADATA: the legacy msgpack file
        ["../orbax-0.5.15/msgpack_aggregated/checkpoint"],
    ],
)
def test_tree_accepts_every_path_the_other_commands_accept(capsys, where):
    args = [str(CASES / where[0]), *where[1:]]
    code, out, err = run(capsys, "tree", "--json", *args)
    assert code == 0, err
    rows = json.loads(out)
    code, out, _ = run(capsys, "inspect", "--json", *args)
    assert code == 0
    report = json.loads(out)
    assert [r["leaf_name"] for r in rows] == [r["name"] for r in report["leaves"]]


def test_inspect_calls_0d_arrays_0d_arrays(capsys):
    path = str(CASES / "zero_d_and_edge" / "checkpoint")
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "0-d arrays" in out.splitlines()[-1] and "scalar" not in out.split()[-8:]
    code, out, _ = run(capsys, "inspect", "--json", path)
    report = json.loads(out)
    zero_d = [r for r in report["leaves"] if r.get("dtype") and r["shape"] == []]
    assert zero_d and report["totals"]["zero_d_arrays"] == len(zero_d)
    assert "scalars" not in report["totals"]


# ---------------------------------------------------------------------------------------------
# convert --select (§7.4).


def test_convert_select_on_a_manager_step(capsys, tmp_path):
    from safetensors.numpy import load_file

    expected = expected_items(CASES / "manager")["1/params"]
    step = str(CASES / "manager" / "checkpoint" / "1")
    out_file = tmp_path / "w.safetensors"
    code, _, err = run(
        capsys, "convert", "--no-progress", step, str(out_file), "--select", "w", "--select", "b"
    )
    assert code == 0, err
    assert "selected 2 of 3 leaves with --select 'w' --select 'b'; left out 1: step (1)" in err
    got = load_file(out_file)
    assert got.keys() == {"w", "b"}
    assert np.array_equal(got["w"], expected["w"]) and np.array_equal(got["b"], expected["b"])
    root = str(CASES / "manager" / "checkpoint")
    code, out, err = run(
        capsys, "convert", "--json", "--no-progress", root, str(tmp_path / "s.npz"),
        "--step", "0", "--select", "s*",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["leaves"] == 1 and result["select"] == ["s*"]
    assert sorted(result["left_out"]) == ["b", "w"]
    with np.load(tmp_path / "s.npz") as data:
        assert (
            list(data) == ["step"]
            and data["step"] == expected_items(CASES / "manager")["0/params"]["step"]
        )


def test_convert_select_a_subtree_of_a_v1_checkpoint(tmp_path):
    from safetensors.numpy import load_file

    src = CASES / "v1_checkpointables" / "checkpoint"
    params = expected_items(CASES / "v1_checkpointables")["state"]["params"]
    for i, pattern in enumerate(("params", "params/**", "params/*", "**/emb", "params/[!]")):
        out = tmp_path / f"{i}.safetensors"
        try:
            result = convert(str(src), str(out), select=[pattern], progress=False)
        except ockpt.LeafNameError as e:
            assert pattern == "params/[!]" and e.rule == "PATH-007"
            continue
        want = ["emb"] if pattern == "**/emb" else sorted(params)
        assert result.leaves == len(want) and "step" in result.left_out
        data = load_file(out)
        assert sorted(data) == [f"params.{k}" for k in want]
        for k in want:
            np.testing.assert_array_equal(data[f"params.{k}"], params[k])


def test_convert_select_errors_as_a_user_sees_them(tmp_path):
    src = str(ODD / "checkpoint")

    def ockpt_cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
        )

    result = ockpt_cli("convert", src, str(tmp_path / "x.npz"), "--select", "slash_and_nestd/**")
    assert result.returncode == 1 and "PATH-007" in result.stderr
    assert "'slash_and_nestd/**'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.npz").exists()
    result = ockpt_cli("convert", src, str(tmp_path / "x.npz"), "--select", "a//b")
    assert result.returncode == 2 and "PATH-006" in result.stderr
    result = ockpt_cli(
        "convert", "--json", src, str(tmp_path / "x.npz"), "--select", "slash_and_nested/a\\/b"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["leaves"] == 1
    with np.load(tmp_path / "x.npz") as data:
        assert list(data) == ["slash_and_nested.a/b"]


def test_a_pattern_on_a_hostile_key_takes_linear_time():
    """`*` backtracks only to the last star: a 60,000-character key with many `_` does not
    make a pattern with several stars run for minutes (a regex took seconds at 4,000)."""
    import fnmatch
    import time

    from ockpt.paths import LeafPattern

    key = "a_" * 30_000
    start = time.monotonic()
    assert not LeafPattern.parse("*_*_*kernel").matches((key,))
    assert LeafPattern.parse("*_*_*a_").matches((key,))
    assert time.monotonic() - start < 5
    for pat, text in [("a*b?c", "axxbyc"), ("*", ""), ("?", ""), ("a*", "a"), ("*a*a", "aXa")]:
        assert LeafPattern.parse(pat).segments[0].fullmatch(text) == fnmatch.fnmatchcase(text, pat)
