"""The conversion rules of ockpt/convert_rules.py parsed and applied directly: `Rules` (truth,
`+`, `target_name`, `axes`, `cast`), the text forms of `parse_rules` (rename, transpose,
dtype) and `load_rules_file`, with every refusal's text. tests/test_convert_hf.py runs them
through whole conversions and the command line."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from ockpt import dtypes, limits
from ockpt.convert_rules import Rules, load_rules_file, parse_rules
from ockpt.errors import FormatError

# --- convert_rules: Rules (bool, +, target_name, axes, cast), _family, _split, parse_rules
# (rename, transpose, dtype) and load_rules_file ---


def test_empty_rules_are_false_and_map_every_leaf_to_itself() -> None:
    rules = Rules()
    assert not rules and bool(rules) is False
    assert rules.target_name("params.k") == "params.k"
    assert rules.axes("params.k", (2, 3)) is None
    assert rules.cast("params.k", np.dtype(np.float32)) == np.float32
    for one in (
        parse_rules(rename=["a=b"]),
        parse_rules(transpose=["a"]),
        parse_rules(dtype=["a=float16"]),
    ):
        assert bool(one) is True


def test_adding_rules_keeps_each_kind_in_order() -> None:
    a = parse_rules(rename=["x=y"], transpose=["k"], dtype=["w=float16"])
    b = parse_rules(rename=["y=z"], transpose=["k=1,0"], dtype=["w=bfloat16"])
    both = a + b
    assert [p.pattern for p, _ in both.rename] == ["x", "y"]
    assert [r for _, r in both.rename] == ["y", "z"]
    assert [(p.pattern, ax) for p, ax in both.transpose] == [("k", None), ("k", (1, 0))]
    assert [(p.pattern, d.name) for p, d in both.dtype] == [("w", "float16"), ("w", "bfloat16")]
    assert both.target_name("x") == "z"  # all renames, in order
    assert (b + a).target_name("x") == "y"


def test_rename_rules_apply_all_in_order_to_every_match() -> None:
    rules = parse_rules(rename=["a=b", "b=c", ("(\\d)", "<\\1>")])
    assert rules.target_name("aab1") == "ccc<1>"
    assert rules.target_name("x2y3") == "x<2>y<3>"
    assert parse_rules(rename=["^p\\.="]).target_name("p.p.k") == "p.k"


def test_axes_of_the_first_matching_transpose_rule() -> None:
    rules = parse_rules(transpose=["^conv=2,0,1", "kernel$", "kernel"])
    assert rules.axes("conv.kernel", (2, 3, 4)) == (2, 0, 1)
    assert rules.axes("dense.kernel", (2, 3)) == (1, 0)
    assert rules.axes("bias", (3,)) is None
    assert parse_rules(transpose=["x=0"]).axes("x", (5,)) == (0,)


def test_axes_without_a_permutation_refuses_leaves_not_2d_and_suggests_one() -> None:
    rules = parse_rules(transpose=["kernel"])
    with pytest.raises(ValueError) as e:
        rules.axes("conv.kernel", (2, 3, 4))
    assert str(e.value) == (
        "--transpose 'kernel' matches 'conv.kernel' of shape (2, 3, 4): without axes it "
        "transposes 2-D leaves only; give the permutation, for example "
        "--transpose 'kernel=2,1,0'"
    )
    with pytest.raises(ValueError, match=re.escape("--transpose 'kernel=0'")):
        rules.axes("kernel", (7,))


def test_axes_refuses_a_permutation_of_another_rank() -> None:
    rules = parse_rules(transpose=["k=1,0"])
    with pytest.raises(ValueError) as e:
        rules.axes("a.k", (2, 3, 4))
    assert str(e.value) == (
        "--transpose 'k': axes (1, 0) are no permutation of the 3 axes of 'a.k' (shape (2, 3, 4))"
    )
    with pytest.raises(ValueError, match="no permutation of the 1 axes"):
        rules.axes("k", (4,))
    assert rules.axes("k", (4, 5)) == (1, 0)


def test_cast_within_a_family_by_the_first_matching_rule() -> None:
    rules = parse_rules(dtype=["emb=bfloat16", "emb=float16", "count=int64", "u=uint8"])
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    assert rules.cast("emb", f32).name == "bfloat16"
    assert rules.cast("emb", np.dtype(np.float64)).name == "bfloat16"
    assert rules.cast("emb", i32) == i32  # integers keep their dtype
    assert rules.cast("emb", np.dtype(bool)) == np.dtype(bool)
    assert rules.cast("count", i32) == np.int64
    assert rules.cast("count", np.dtype(np.uint16)) == np.int64  # signed and unsigned: int
    assert rules.cast("u", np.dtype(np.int8)) == np.uint8
    assert rules.cast("count", f32) == f32
    assert rules.cast("count", np.dtype(np.complex64)) == np.complex64
    assert rules.cast("other", f32) == f32
    bf16 = dtypes.SUPPORTED["bfloat16"]
    assert parse_rules(dtype=["x=float32"]).cast("x", bf16) == np.float32  # bfloat is float


def test_rename_rule_forms_and_the_equals_split() -> None:
    assert parse_rules(rename=["a\\=b=c"]).target_name("a=b") == "c"  # \= inside the regex
    assert parse_rules(rename=["a=b=c"]).target_name("a") == "b=c"  # the first '='
    assert parse_rules(rename=["a\\\\=x"]).target_name("a\\") == "x"  # an escaped backslash
    assert parse_rules(rename=["a=\nb"]).target_name("a") == "\nb"  # DOTALL
    assert parse_rules(rename=["=x"]).target_name("ab") == "xaxbx"  # empty regex
    assert parse_rules(rename=[["^k$", "w"]]).target_name("k") == "w"
    assert parse_rules(rename=[("k", "w=v")]).target_name("k") == "w=v"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            "no-equals",
            "--rename REGEX=REPLACEMENT: 'no-equals' has no '=' (expected REGEX=REPLACEMENT)",
        ),
        ("a\\=b", "--rename REGEX=REPLACEMENT: 'a\\\\=b' has no '=' (expected REGEX=REPLACEMENT)"),
        (["a"], "--rename: a rename is 'REGEX=REPLACEMENT' or [REGEX, REPLACEMENT]"),
        (["a", "b", "c"], "--rename: a rename is 'REGEX=REPLACEMENT' or [REGEX, REPLACEMENT]"),
        (["a", 1], "--rename: a rename is 'REGEX=REPLACEMENT' or [REGEX, REPLACEMENT]"),
        (7, "--rename: a rename is 'REGEX=REPLACEMENT' or [REGEX, REPLACEMENT]"),
    ],
)
def test_rename_rules_refused_by_form(rule, message) -> None:
    with pytest.raises(ValueError) as e:
        parse_rules(rename=[rule])
    assert str(e.value) == message


def test_rename_rules_refused_for_their_regex_or_replacement() -> None:
    with pytest.raises(ValueError) as e:
        parse_rules(rename=["(=x"])
    assert str(e.value).startswith("--rename: '(' is not a regular expression: ")
    with pytest.raises(ValueError) as e:
        parse_rules(rename=["a=\\2"])
    assert str(e.value).startswith("--rename: replacement '\\\\2': ")
    with pytest.raises(ValueError) as e:  # an unknown group name: IndexError
        parse_rules(rename=["(?P<x>a)=\\g<y>"])
    assert str(e.value).startswith("--rename: replacement '\\\\g<y>': ")


def test_transpose_rule_forms() -> None:
    ((p, axes),) = parse_rules(transpose=["k$"]).transpose
    assert (p.pattern, axes) == ("k$", None)
    ((p, axes),) = parse_rules(transpose=["a=b= 2 , 0,1 "]).transpose
    assert (p.pattern, axes) == ("a=b", (2, 0, 1))
    ((p, axes),) = parse_rules(transpose=["k=x"]).transpose  # no axes: all of it is the pattern
    assert (p.pattern, axes) == ("k=x", None)
    ((p, axes),) = parse_rules(transpose=["k\n=1,0"]).transpose
    assert (p.pattern, axes) == ("k\n", (1, 0))


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("x=0,0", "--transpose: axes '0,0' are no permutation of 0..1"),
        ("x=1,2", "--transpose: axes '1,2' are no permutation of 0..1"),
        ("x=1", "--transpose: axes '1' are no permutation of 0..0"),
        (["k"], "--transpose: a transpose rule is 'PATTERN' or 'PATTERN=AXES'"),
    ],
)
def test_transpose_rules_refused(rule, message) -> None:
    with pytest.raises(ValueError) as e:
        parse_rules(transpose=[rule])
    assert str(e.value) == message


def test_transpose_rule_with_a_bad_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^--transpose: '\(' is not a regular expression"):
        parse_rules(transpose=["("])
    with pytest.raises(ValueError, match=r"^--transpose: '\[' is not a regular expression"):
        parse_rules(transpose=["[=1,0"])


def test_dtype_rule_forms() -> None:
    ((p, d),) = parse_rules(dtype=["a=b= bfloat16 "]).dtype  # the last '=', name stripped
    assert (p.pattern, d) == ("a=b", dtypes.SUPPORTED["bfloat16"])
    ((p, d),) = parse_rules(dtype=["x=uint16"]).dtype
    assert (p.pattern, d) == ("x", np.dtype(np.uint16))


def test_dtype_rules_refused() -> None:
    known = sorted(
        n for n, d in dtypes.SUPPORTED.items() if n.startswith(("int", "uint", "float", "bfloat"))
    )
    for rule, name in (
        ("x=float128", "float128"),
        ("x=bool", "bool"),
        ("x=complex64", "complex64"),
    ):
        with pytest.raises(ValueError) as e:
            parse_rules(dtype=[rule])
        assert str(e.value) == f"--dtype: unknown dtype {name!r}; one of {', '.join(known)}"
    with pytest.raises(ValueError) as e:
        parse_rules(dtype=["x"])
    assert str(e.value) == "--dtype PATTERN=DTYPE: 'x' has no '=' (expected PATTERN=DTYPE)"
    with pytest.raises(ValueError) as e:
        parse_rules(dtype=[("x", "float16")])
    assert str(e.value) == "--dtype: a dtype rule is 'PATTERN=DTYPE'"
    with pytest.raises(ValueError, match=r"^--dtype: '\(' is not a regular expression"):
        parse_rules(dtype=["(=float16"])


def test_load_rules_file(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            {
                "rename": [["^p\\.", ""], "k$=w"],
                "transpose": ["k$", "c=2,0,1"],
                "dtype": ["emb=bfloat16"],
            }
        )
    )
    rules = load_rules_file(str(path))
    assert rules.target_name("p.k") == "w"
    assert rules.axes("p.k", (2, 3)) == (1, 0)
    assert rules.axes("c", (1, 2, 3)) == (2, 0, 1)
    assert rules.cast("emb", np.dtype(np.float32)).name == "bfloat16"
    path.write_text(json.dumps({"transpose": ["k"]}))  # every key optional
    only = load_rules_file(str(path))
    assert only.rename == () and only.dtype == () and len(only.transpose) == 1
    path.write_text("{}")
    assert not load_rules_file(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"renames": []}', "expected an object with the lists rename, transpose, dtype"),
        ('[["a", "b"]]', "expected an object with the lists rename, transpose, dtype"),
        ('{"rename": "a=b"}', "'rename' must be a list"),
        ('{"transpose": {"k": 1}}', "'transpose' must be a list"),
        ('{"dtype": null}', "'dtype' must be a list"),
        ('{"dtype": ["x=nope"]}', "--dtype: unknown dtype 'nope'; one of "),
        (
            '{"rename": ["x"]}',
            "--rename REGEX=REPLACEMENT: 'x' has no '=' (expected REGEX=REPLACEMENT)",
        ),
    ],
)
def test_load_rules_file_refuses_a_bad_file_naming_it(tmp_path, text, message) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        load_rules_file(str(path))
    assert str(e.value).startswith(f"{path}: {message}")


def test_load_rules_file_refuses_what_is_not_json(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"rename": [')
    with pytest.raises(ValueError) as e:
        load_rules_file(str(path))
    assert str(e.value).startswith(f"{path}: not JSON: ")
    assert "JSON-" not in str(e.value).split("not JSON: ", 1)[0]


def test_load_rules_file_over_the_json_limit_is_refused_unread(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"rename": ["a=b"]}')  # 19 bytes
    with limits.applied(dataclasses.replace(limits.LIMITS, max_json_bytes=19)):
        assert load_rules_file(str(path)).target_name("a") == "b"
    with limits.applied(dataclasses.replace(limits.LIMITS, max_json_bytes=18)):
        with pytest.raises(FormatError) as e:
            load_rules_file(str(path))
    assert e.value.rule == "JSON-003"
    assert e.value.file == str(path)
    assert (e.value.expected, e.value.got) == ("<= 18 bytes", 19)
