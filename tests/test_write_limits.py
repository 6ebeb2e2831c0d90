"""The writer keeps its reader's limits (writing §2): every tree the reader would refuse is
refused before anything is written, with the reader's rule (LIMIT-002..004, JSON-003, ZARR-005,
OCDBT-008) or WRITE-005 for names the array store cannot hold; a tree exactly at a limit saves
and loads back; random trees either load back equal or are refused, leaving nothing behind."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ockpt
from ockpt import limits as limits_module
from ockpt import write_limits
from ockpt._zarr_write import ArrayWrite
from ockpt.errors import FormatError
from ockpt.limits import LIMITS
from ockpt.paths import KeyEntry, KeyType
from ockpt.store import commit
from ockpt.writer import JsonItem


def _deep(depth: int, leaf: object) -> object:
    """`leaf` under `depth` nested dicts: a key path of `depth` keys."""
    for _ in range(depth):
        leaf = {"k": leaf}
    return leaf


def _assert_equal(expected: object, got: object, where: str = "") -> None:
    """`got` is what `load_pytree` returns for the saved `expected`: dict keys as text,
    sequences as lists (an empty tuple stays a tuple), scalars and arrays of equal values."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), where
        assert sorted(got) == sorted(str(k) for k in expected), where
        for k, v in expected.items():
            _assert_equal(v, got[str(k)], f"{where}/{k}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected), where
        if not expected:
            assert type(got) is type(expected), where
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            _assert_equal(e, g, f"{where}/{i}")
    elif expected is None or isinstance(expected, str):
        assert got == expected and type(got) is type(expected), where
    else:
        want, have = np.asarray(expected), np.asarray(got)
        assert have.shape == want.shape, where
        if isinstance(expected, np.ndarray):
            assert have.dtype == want.dtype, where
        assert np.array_equal(have, want), where


def _refused(parent: Path, tree: object, rule: str, **kw: object) -> ockpt.FormatError:
    """Save `tree` at `parent/c`: refused with `rule`, and nothing left in `parent`."""
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.save_pytree(parent / "c", tree, **kw)
    assert isinstance(info.value, ockpt.OckptError)
    assert info.value.rule == rule, str(info.value)
    assert os.listdir(parent) == []
    return info.value


def _round_trip(path: Path, tree: object, **kw: object) -> None:
    ockpt.save_pytree(path, tree, **kw)
    _assert_equal(tree, ockpt.load_pytree(path))


# ---------------------------------------------------------------------------------------------
# Refused before anything is written

ARRAY = np.arange(3.0)

REFUSED = {
    "200-levels": (_deep(200, ARRAY), {}, "LIMIT-004"),
    "65-levels": (_deep(65, ARRAY), {}, "LIMIT-004"),
    "65-levels-empty-node": (_deep(65, {}), {}, "LIMIT-004"),
    "70000-byte-key-ocdbt": ({"a" * 70_000: ARRAY}, {}, "LIMIT-003"),
    "70000-byte-key-string": ({"a" * 70_000: "s"}, {}, "LIMIT-003"),
    "65536-byte-key-none": ({"é" * 32_768: None}, {}, "LIMIT-003"),
    "ocdbt-key-v3": ({"a" * 65_526: ARRAY}, {}, "OCDBT-008"),  # + "/zarr.json"
    "ocdbt-key-v2": ({"a" * 65_528: ARRAY}, {"layout": "item"}, "OCDBT-008"),  # + "/.zarray"
    "ocdbt-chunk-key": (  # "/c/0/0/0/0/0" is longer than "/zarr.json" (rank 5 and more)
        {"a" * 65_525: np.zeros((1,) * 5)},
        {},
        "OCDBT-008",
    ),
    "300-byte-key-per-leaf": ({"a" * 300: ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "256-byte-name-per-leaf": ({"a" * 200: {"b" * 55: ARRAY}}, {"use_ocdbt": False}, "WRITE-005"),
    # 128 characters but 256 UTF-8 bytes: the directory-name limit counts bytes (issue 32)
    "256-byte-multibyte-name-per-leaf": ({"é" * 128: ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "backslash-per-leaf": ({"a\\b": ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    # one directory on a case-insensitive or normalizing file system (issue 32 item 3)
    "case-per-leaf": ({"W": ARRAY, "w": ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "nested-case-per-leaf": (
        {"L/x": ARRAY, "l/y": ARRAY},
        {"use_ocdbt": False},
        "WRITE-005",
    ),
    "normalization-per-leaf": (
        {"\u00e9": ARRAY, "e\u0301": ARRAY},
        {"use_ocdbt": False},
        "WRITE-005",
    ),
    "item-file-per-leaf": ({"_METADATA": ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "ocdbt-dir-per-leaf": ({"ocdbt.process_0": ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "data-dir-per-leaf": ({"d/x": ARRAY}, {"use_ocdbt": False}, "WRITE-005"),
    "lone-surrogate": ({"\ud800": None}, {}, "WRITE-005"),
    "strings-nesting": ({"/".join(["s"] * 64): "deep"}, {}, "JSON-003"),  # 63 '/'
    "33-dimensions": ({"a": np.zeros((1,) * 33)}, {}, "ZARR-005"),
    "too-many-chunks": (
        {"a": np.zeros(2**24 + 1, np.int8)},
        {"chunk_byte_size": 1, "use_ocdbt": False},
        "ZARR-005",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_before_writing(case, tmp_path):
    tree, kw, rule = REFUSED[case]
    _refused(tmp_path, tree, rule, **kw)


@pytest.mark.parametrize("layout", ["v1", "item"])
def test_deep_tree_refused_in_either_layout(layout, tmp_path):
    error = _refused(tmp_path, _deep(200, ARRAY), "LIMIT-004", layout=layout)
    assert error.got == 200 and len(str(error)) < 1000


def test_every_save_entry_point_refuses(tmp_path):
    deep = _deep(200, ARRAY)
    saves = {
        "async": lambda: ockpt.save_pytree_async(tmp_path / "a", deep),
        "checkpointables": lambda: ockpt.save_checkpointables(tmp_path / "b", {"state": deep}),
        "manager": lambda: ockpt.CheckpointManager(tmp_path / "root").save(0, deep),
    }
    for name, save in saves.items():
        with pytest.raises(ockpt.FormatError) as info:
            save()
        assert info.value.rule == "LIMIT-004", name
    assert os.listdir(tmp_path) == []


def test_path_longer_than_path_max_refused(tmp_path):
    name = "/".join(["p" * 200] * 25)  # segments within NAME_MAX, a path over PATH_MAX
    _refused(tmp_path, {name: ARRAY}, "WRITE-005", use_ocdbt=False)


def test_deep_custom_metadata_and_json_item_refused(tmp_path):
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.save_pytree(tmp_path / "c", {"a": 1}, custom_metadata=_deep(63, 1))
    assert info.value.rule == "JSON-003"
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.save_checkpointables(tmp_path / "c", {"state": {"a": 1}, "j": JsonItem(_deep(64, 1))})
    assert info.value.rule == "JSON-003"
    assert os.listdir(tmp_path) == []
    # one level less fits: the innermost value at depth 64 (custom metadata is the second
    # level of _CHECKPOINT_METADATA, a JSON item's value the first of data.json)
    ockpt.save_pytree(tmp_path / "a", {"a": 1}, custom_metadata=_deep(62, 1))
    ockpt.save_checkpointables(tmp_path / "b", {"state": {"a": 1}, "j": JsonItem(_deep(63, 1))})
    assert not ockpt.validate(tmp_path / "a").findings
    assert not ockpt.validate(tmp_path / "b").findings


def _limits(monkeypatch, **kw: int) -> None:
    monkeypatch.setattr(write_limits, "LIMITS", dataclasses.replace(write_limits.LIMITS, **kw))


def test_too_many_entries_refused(tmp_path, monkeypatch):
    """LIMIT-002 with a lowered limit (2^24 leaves take minutes): empty nodes count too."""
    _limits(monkeypatch, max_tree_entries=3)
    _refused(tmp_path, {"a": 1, "b": None, "c": {}, "d": "s"}, "LIMIT-002")
    _round_trip(tmp_path / "ok", {"a": 1, "b": None, "c": {}})


def test_document_over_the_json_limit_refused(tmp_path, monkeypatch):
    """JSON-003 with a lowered limit: a document is built and measured only when the cheap
    bound exceeds the limit, so a tree near it (bound above, size below) still saves."""
    _limits(monkeypatch, max_json_bytes=4096)
    error = _refused(tmp_path, {"s": "x" * 5000}, "JSON-003")
    assert error.file == "_strings.json"
    _refused(tmp_path, {f"leaf{i}": None for i in range(100)}, "JSON-003")
    _round_trip(tmp_path / "ok", {"s": "x" * 1000})


# ---------------------------------------------------------------------------------------------
# Exactly at the limits: saved and loaded back


def test_depth_at_the_limit(tmp_path):
    depth = LIMITS.max_depth
    _round_trip(tmp_path / "a", _deep(depth, ARRAY))
    _round_trip(tmp_path / "b", {"x": _deep(depth - 1, {}), "y": _deep(depth - 1, "s")})


def test_names_that_differ_in_case_save_with_ocdbt(tmp_path):
    """In OCDBT the names are keys, not directories: `W` and `w` are two arrays."""
    _round_trip(tmp_path / "a", {"W": ARRAY, "w": ARRAY * 2})


def test_a_directory_name_at_name_max_utf8_bytes_saves(tmp_path):
    """The per-leaf directory of a key of 254 UTF-8 bytes (127 two-byte characters) and of 255
    one-byte ones is written and read back: the limit is NAME_MAX bytes, not characters, and
    not less (the refused side: "256-byte-multibyte-name-per-leaf")."""
    tree = {"é" * 127: ARRAY, "a" * 255: ARRAY}
    _round_trip(tmp_path / "a", tree, use_ocdbt=False, layout="item")
    assert (tmp_path / "a" / ("é" * 127)).is_dir()


def test_key_text_at_the_limit(tmp_path):
    limit = LIMITS.max_key_bytes
    _round_trip(tmp_path / "a", {"a" * limit: "s", "b" * limit: None})
    _round_trip(tmp_path / "b", {"é" * (limit // 2) + "a": None})  # 65535 UTF-8 bytes


@pytest.mark.parametrize(("layout", "suffix"), [("v1", "/zarr.json"), ("item", "/.zarray")])
def test_ocdbt_key_at_the_limit(layout, suffix, tmp_path):
    name = "a" * (LIMITS.max_key_bytes - len(suffix))
    _round_trip(tmp_path / "c", {name: ARRAY}, layout=layout)


def test_per_leaf_names_at_the_limit(tmp_path):
    tree = {"a" * 255: ARRAY, "€" * 85: ARRAY, "y/" + "x" * 255: ARRAY, "d.x": [ARRAY, 1]}
    _round_trip(tmp_path / "c", tree, use_ocdbt=False)


def test_strings_nesting_at_the_limit(tmp_path):
    """62 '/': the string is the 64th level of `_strings.json` (the document, 62 objects)."""
    _round_trip(tmp_path / "c", {"/".join(["s"] * 63): "deep"})


def _path_max_name(final: Path, extra: int) -> str:
    """A param name whose longest file (`state/<name>/zarr.json.__lock` under the save's
    temporary directory) is `extra` bytes over the longest path PATH_MAX allows."""
    item_dir = os.fsencode(os.path.join(commit.temporary_name(str(final), 0), "state"))
    room = write_limits.PATH_MAX - 1 - len(item_dir) - len("/zarr.json.__lock") - 1 + extra
    segments = ["q" * 200] * ((room - 1) // 201)  # and a last one of 1..201 bytes
    return "/".join([*segments, "r" * (room - 201 * len(segments))])


def test_path_max_boundary(tmp_path):
    """The boundary of WRITE-005's path check is where tensorstore's writes start failing."""
    final = tmp_path / "c"
    _round_trip(final, {_path_max_name(final, 0): ARRAY}, use_ocdbt=False)
    over = tmp_path / "over"
    over.mkdir()
    _refused(over, {_path_max_name(over / "c", 1): ARRAY}, "WRITE-005", use_ocdbt=False)


def test_orbax_restores_trees_at_the_limits(tmp_path):
    """Orbax 0.12.8 restores what ockpt saved at the limits it accepts (v1 checkpoints: their
    item `state/`, with zarr v3; items: zarr v2)."""
    ocp = pytest.importorskip("orbax.checkpoint")
    per_leaf = {"a" * 255: ARRAY, "€" * 85: ARRAY, "y/" + "x" * 255: 1}
    cases = {
        "deep": (_deep(LIMITS.max_depth, ARRAY), {"layout": "item"}),
        "ocdbt-key-v2": ({"a" * (LIMITS.max_key_bytes - 8): ARRAY}, {"layout": "item"}),
        "ocdbt-key-v3": ({"a" * (LIMITS.max_key_bytes - 10): ARRAY}, {}),
        "per-leaf": (per_leaf, {"use_ocdbt": False, "layout": "item"}),
        "path-max": ({_path_max_name(tmp_path / "path-max", 0): ARRAY}, {"use_ocdbt": False}),
    }
    for name, (tree, kw) in cases.items():
        ockpt.save_pytree(tmp_path / name, tree, **kw)
        item = tmp_path / name / ("state" if "layout" not in kw else "")
        _assert_equal(tree, ocp.PyTreeCheckpointer().restore(item), name)


# ---------------------------------------------------------------------------------------------
# Property: a random tree loads back equal, or is refused and nothing is written

ODD_KEYS = [
    "", ".", "..", "/", "a/", "/a", "a/b", "a.b", "a//b", "%", "%2F", " ", " x ", "\t", "\n",
    "~", "\\", "[", "{", '"', "'", "\x00", "\x7f", "0", "1", "10", "c", "d", "_METADATA",
    "_strings.json", "ocdbt.process_0", "manifest.ocdbt", "zarr.json", ".zarray", "ключ", "😀",
    "é" * 128, "😀" * 64, "a" * 255, "a" * 256,
]  # fmt: skip

KEYS = st.one_of(
    st.sampled_from(ODD_KEYS),
    st.text(max_size=6),
    st.integers(0, 300).map(lambda n: "k" * n),  # around NAME_MAX once joined
    st.integers(-2, 12),  # int keys: str(1) == "1" collides
)

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.sampled_from(
        [np.arange(3, dtype=np.float32), np.ones((2, 2), np.int8), np.array(7), np.array([True])]
    ),
    st.sampled_from([{}, [], ()]),
)

SUBTREES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.dictionaries(KEYS, children, max_size=3),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
    ),
    max_leaves=5,
)


@st.composite
def trees(draw: st.DrawFn) -> object:
    """A small tree under a spine of 0..80 dicts and lists: key paths around the limit 64."""
    node = draw(SUBTREES)
    for _ in range(draw(st.integers(0, 80))):
        node = {draw(KEYS): node} if draw(st.booleans()) else [node]
    return node


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree=trees(), use_ocdbt=st.booleans(), layout=st.sampled_from(["v1", "item"]))
def test_random_tree_loads_back_or_is_refused(tmp_path_factory, tree, use_ocdbt, layout):
    parent = tmp_path_factory.mktemp("tree")
    path = parent / "c"
    try:
        ockpt.save_pytree(path, tree, layout=layout, use_ocdbt=use_ocdbt)
    except ockpt.OckptError:
        assert os.listdir(parent) == []
        return
    _assert_equal(tree, ockpt.load_pytree(path))
    report = ockpt.validate(path, deep=True)
    assert report.ok and not report.warnings, report.format_text()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), layout=st.sampled_from(["v1", "item"]))
def test_documents_bound_is_an_upper_bound(tree, layout):
    """The bound that spares building the documents twice is never below their size."""
    try:
        _assert_bound(tree, layout)
    except ockpt.OckptError:
        pass  # a tree the writer refuses has no documents


def test_documents_bound_covers_shardings_and_odd_text():
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("ä\\x", '"y😀'))
    sharded = jax.device_put(np.zeros((4, 8)), NamedSharding(mesh, PartitionSpec("ä\\x", '"y😀')))
    tree = {
        "😀\u0001'\"" * 20: sharded,
        "\U000e0001\x7f": {"s": "\U0001f600\x01" * 50, "t": jax.numpy.ones(3)},
    }
    _assert_bound(tree, "v1")


def _assert_bound(tree: object, layout: str) -> None:
    from ockpt import writer

    opts = writer._resolve(ockpt.SaveOptions(), layout)
    job = writer._job()
    plan = writer._plan(tree, opts, job, copy=False)
    sizes = sum(len(data) for data in writer._all_documents(plan, opts, job).values())
    assert writer._documents_bound(plan) >= sizes


# --- write_limits: _shown, _utf8_bytes, _refuse, check_key_paths, _check_key_text,
# check_string_name, check_array_name, check_array_dirs, zarr_key_bytes, _stored_grid,
# check_array, check_array_path, check_documents, check_json (called directly) ---


def _path(*keys: str):
    return tuple(KeyEntry(k, KeyType.DICT) for k in keys)


def _array(name="a", shape=(4,), dtype=np.float32, chunk=None, write=None) -> ArrayWrite:
    chunk = shape if chunk is None else chunk
    return ArrayWrite(
        param_name=name,
        shape=tuple(shape),
        dtype=np.dtype(dtype),
        chunk_shape=tuple(chunk),
        write_shape=tuple(chunk if write is None else write),
        pieces=(),
        write_metadata=True,
    )


def test_item_names_and_os_limits() -> None:
    assert write_limits.NAME_MAX == 255 and write_limits.PATH_MAX == 4096
    assert write_limits.ITEM_NAMES == {
        "_METADATA",
        "_CHECKPOINT_METADATA",
        "_sharding",
        "array_metadatas",
        "_strings.json",
        "checkpoint",
        "manifest.ocdbt",
        "d",
        "commit_success.txt",
    }


def test_a_long_leaf_name_is_shown_cut_short() -> None:
    assert write_limits._shown("a" * 80) == repr("a" * 80)
    assert write_limits._shown("a" * 81) == repr("a" * 60) + "... (81 characters)"
    err = write_limits._refuse("b" * 81, "too long", "R-1", expected=1, got=2)
    assert err.pointer == "b" * 60 + "..."
    assert err.rule == "R-1" and (err.expected, err.got) == (1, 2)
    assert err.message == f"leaf {'b' * 60!r}... (81 characters): too long"
    short = write_limits._refuse("c" * 80, "m", "R-2")
    assert short.pointer == "c" * 80 and short.message == f"leaf {'c' * 80!r}: m"


def test_utf8_bytes_counts_bytes_or_none_without_an_encoding() -> None:
    assert write_limits._utf8_bytes("é") == 2
    assert write_limits._utf8_bytes("") == 0
    assert write_limits._utf8_bytes("\ud800") is None


def test_check_key_paths_counts_entries_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_tree_entries=3)
    write_limits.check_key_paths([_path("a"), _path("b"), _path("c")])
    with pytest.raises(FormatError) as e:
        write_limits.check_key_paths([_path("a"), _path("b"), _path("c"), _path("d")])
    assert e.value.rule == "LIMIT-002"
    assert (e.value.expected, e.value.got) == ("<= 3", 4)
    assert e.value.message == "too many leaves and empty nodes for _METADATA"


def test_check_key_paths_depth_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_depth=3)
    write_limits.check_key_paths([_path("a", "b", "c")])
    with pytest.raises(FormatError) as e:
        write_limits.check_key_paths([_path("a"), _path("a", "b", "c", "d")])
    assert e.value.rule == "LIMIT-004"
    assert e.value.pointer == "a.b.c.d"
    assert (e.value.expected, e.value.got) == ("<= 3 keys", 4)
    assert e.value.message == "leaf 'a.b.c.d': key path too deep"


def test_check_key_paths_key_text_bytes_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_key_bytes=4)
    write_limits.check_key_paths([_path("x", "éé")])  # 4 bytes
    with pytest.raises(FormatError) as e:
        write_limits.check_key_paths([_path("ok"), _path("x", "ééa")])  # 5 bytes
    assert e.value.rule == "LIMIT-003"
    assert e.value.pointer == "x.ééa"
    assert (e.value.expected, e.value.got) == ("<= 4 UTF-8 bytes", 5)
    assert e.value.message == "leaf 'x.ééa': key text too long"


def test_check_key_paths_refuses_a_key_without_utf8(monkeypatch) -> None:
    with pytest.raises(FormatError) as e:
        write_limits.check_key_paths([_path("p", "\ud800")])
    assert e.value.rule == "WRITE-005"
    assert e.value.pointer == "p.\ud800"
    assert e.value.message == "leaf 'p.\\ud800': key '\\ud800' has no UTF-8 encoding"


def test_check_string_name_nesting_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_depth=4)
    write_limits.check_string_name("a/b/c")  # depth 2 + 2
    with pytest.raises(FormatError) as e:
        write_limits.check_string_name("a/b/c/d")
    assert e.value.rule == "JSON-003"
    assert e.value.pointer == "a/b/c/d"
    assert (e.value.expected, e.value.got) == ("<= 4 levels", 5)
    assert e.value.message == "leaf 'a/b/c/d': its '/'s nest _strings.json too deep"


def test_check_array_name_with_ocdbt_allows_any_name() -> None:
    for name in ("_METADATA", "a\\b", "x" * 300, "ocdbt.process_0", "d/e"):
        write_limits.check_array_name(name, use_ocdbt=True)


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("_METADATA", "_METADATA"),
        ("d/x", "d"),
        ("ocdbt.process_12/x", "ocdbt.process_12"),
        ("commit_success.txt", "commit_success.txt"),
    ],
)
def test_check_array_name_refuses_the_items_own_names(name, first) -> None:
    with pytest.raises(FormatError) as e:
        write_limits.check_array_name(name, use_ocdbt=False)
    assert e.value.rule == "WRITE-005" and e.value.pointer == name
    assert e.value.message == (
        f"leaf {name!r}: without OCDBT its directory {first!r} is the item's own"
    )


def test_check_array_name_allows_names_near_the_items_own() -> None:
    for name in ("x/_METADATA", "dd", "ocdbt.process_01", "ocdbt.process_x", "_metadata.x"):
        write_limits.check_array_name(name, use_ocdbt=False)


def test_check_array_name_refuses_a_backslash() -> None:
    with pytest.raises(FormatError) as e:
        write_limits.check_array_name("a/b\\c", use_ocdbt=False)
    assert e.value.rule == "WRITE-005" and e.value.pointer == "a/b\\c"
    assert e.value.message == "leaf 'a/b\\\\c': without OCDBT a '\\' would separate directories"


def test_check_array_name_segment_bytes_at_name_max() -> None:
    write_limits.check_array_name("a/" + "é" * 127 + "x", use_ocdbt=False)  # 255 bytes
    name = "é" * 128 + "/b"  # 256 bytes in the first segment
    with pytest.raises(FormatError) as e:
        write_limits.check_array_name(name, use_ocdbt=False)
    assert e.value.rule == "WRITE-005"
    assert (e.value.expected, e.value.got) == ("<= 255 UTF-8 bytes", 256)
    assert e.value.message == (
        f"leaf {write_limits._shown(name)}: without OCDBT each '/'-separated part is a "
        "directory name, and one is too long"
    )
    with pytest.raises(FormatError) as e:
        write_limits.check_array_name("a/" + "b" * 300, use_ocdbt=False)
    assert e.value.got == 300


def test_check_array_dirs_refuses_names_one_only_on_folding_file_systems() -> None:
    write_limits.check_array_dirs(["W", "w", "\u00e9", "e\u0301"], use_ocdbt=True)
    write_limits.check_array_dirs(["a/x", "a/y", "a", "b/x", "ab"], use_ocdbt=False)
    with pytest.raises(FormatError) as e:
        write_limits.check_array_dirs(["ok", "L/x", "l/y"], use_ocdbt=False)
    assert e.value.rule == "WRITE-005" and e.value.pointer == "l/y"
    assert e.value.message == (
        "leaf 'l/y': without OCDBT its directory 'l' and 'L' differ only in case or Unicode "
        "normalization: one directory on macOS and Windows"
    )
    with pytest.raises(FormatError) as e:
        write_limits.check_array_dirs(["a/\u00e9", "a/e\u0301"], use_ocdbt=False)
    assert "its directory 'a/e\u0301' and 'a/\u00e9' differ" in e.value.message
    with pytest.raises(FormatError) as e:  # the second segment only
        write_limits.check_array_dirs(["a/Straße/x", "a/STRASSE"], use_ocdbt=False)
    assert "'a/STRASSE' and 'a/Straße'" in e.value.message


def test_zarr_key_bytes_of_both_versions() -> None:
    assert write_limits.zarr_key_bytes((), (), 2) == len(".zarray")
    assert write_limits.zarr_key_bytes((), (), 3) == len("zarr.json")
    assert write_limits.zarr_key_bytes((10**9, 10**9), (1, 1), 2) == len("999999999.999999999")
    assert write_limits.zarr_key_bytes((10**9, 10), (1, 1), 3) == len("c/999999999/9")
    assert write_limits.zarr_key_bytes((10, 10), (3, 5), 2) == len(".zarray")  # "3.1"
    assert write_limits.zarr_key_bytes((1,) * 5, (1,) * 5, 3) == len("c/0/0/0/0/0")
    assert write_limits.zarr_key_bytes((100,) * 4, (1,) * 4, 2) == len("99.99.99.99")
    assert write_limits.zarr_key_bytes((7,), (7,), 2) == len(".zarray")
    with pytest.raises(ValueError):
        write_limits.zarr_key_bytes((1, 2), (1,), 3)


def test_stored_grid_is_the_chunk_in_v2_and_the_shard_in_v3() -> None:
    a = _array(shape=(8,), chunk=(2,), write=(4,))
    assert write_limits._stored_grid(a, 2) == (2,)
    assert write_limits._stored_grid(a, 3) == (4,)


def test_check_array_rank_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_zarr_ndim=3)
    write_limits.check_array(_array(shape=(1, 1, 1)), zarr_version=3, use_ocdbt=True)
    with pytest.raises(FormatError) as e:
        write_limits.check_array(_array("w", shape=(1,) * 4), zarr_version=3, use_ocdbt=True)
    assert e.value.rule == "ZARR-005" and e.value.pointer == "w"
    assert (e.value.expected, e.value.got) == ("<= 3", 4)
    assert e.value.message == "leaf 'w': too many dimensions for a zarr array"


def _grid_limits(**kw: int):
    return limits_module.applied(dataclasses.replace(limits_module.LIMITS, **kw))


def test_check_array_checks_the_grid_of_the_stored_chunks(monkeypatch) -> None:
    # more than max_chunks elements: the grids of v3 shards and inner chunks are checked
    _limits(monkeypatch, max_chunks=8)
    with _grid_limits(max_chunks=8):
        write_limits.check_array(_array(shape=(16,), chunk=(2,)), zarr_version=2, use_ocdbt=False)
        with pytest.raises(FormatError) as e:
            write_limits.check_array(
                _array("g", shape=(18,), chunk=(2,)), zarr_version=2, use_ocdbt=False
            )
        assert e.value.rule == "ZARR-005" and e.value.got == 9
        assert e.value.pointer == "'g'"
        # v3: the inner chunk grid is checked too, not only the shards'
        with pytest.raises(FormatError) as e:
            write_limits.check_array(
                _array(shape=(18,), chunk=(2,), write=(6,)), zarr_version=3, use_ocdbt=False
            )
        assert e.value.got == 9
        # v2 ignores the write shape
        write_limits.check_array(
            _array(shape=(16,), chunk=(2,), write=(1,)), zarr_version=2, use_ocdbt=False
        )


def test_check_array_checks_the_grid_only_above_the_element_or_byte_bound(monkeypatch) -> None:
    with _grid_limits(max_chunks=2):
        # 4 elements, 16 bytes: under both bounds, the grid (4 chunks) is not computed
        _limits(monkeypatch, max_chunks=4, max_chunk_bytes=16)
        write_limits.check_array(_array(shape=(4,), chunk=(1,)), zarr_version=2, use_ocdbt=False)
        # 5 elements: over max_chunks
        _limits(monkeypatch, max_chunks=4, max_chunk_bytes=1 << 30)
        with pytest.raises(FormatError):
            write_limits.check_array(
                _array(shape=(5,), chunk=(1,)), zarr_version=2, use_ocdbt=False
            )
        # 4 elements of 8 bytes: over max_chunk_bytes (16) only
        _limits(monkeypatch, max_chunks=4, max_chunk_bytes=16)
        with pytest.raises(FormatError):
            write_limits.check_array(
                _array(shape=(4,), dtype=np.float64, chunk=(1,)), zarr_version=2, use_ocdbt=False
            )
        # 4 elements of 4 bytes: exactly at both bounds
        write_limits.check_array(_array(shape=(4,), chunk=(1,)), zarr_version=2, use_ocdbt=False)


def test_check_array_ocdbt_key_length_at_the_limit(monkeypatch) -> None:
    _limits(monkeypatch, max_key_bytes=40)
    # v3 "<name>/zarr.json": name of 30 bytes -> 40
    write_limits.check_array(_array("a" * 30), zarr_version=3, use_ocdbt=True)
    with pytest.raises(FormatError) as e:
        write_limits.check_array(_array("a" * 31), zarr_version=3, use_ocdbt=True)
    assert e.value.rule == "OCDBT-008" and e.value.pointer == "a" * 31
    assert (e.value.expected, e.value.got) == ("<= 40 bytes", 41)
    assert e.value.message == f"leaf {'a' * 31!r}: its OCDBT keys would be too long"
    # v2 "<name>/.zarray": 32 + 1 + 7 = 40
    write_limits.check_array(_array("a" * 32), zarr_version=2, use_ocdbt=True)
    with pytest.raises(FormatError):
        write_limits.check_array(_array("a" * 33), zarr_version=2, use_ocdbt=True)
    # UTF-8 bytes count: 15 "é" are 30 bytes
    write_limits.check_array(_array("é" * 15), zarr_version=3, use_ocdbt=True)
    with pytest.raises(FormatError) as e:
        write_limits.check_array(_array("é" * 15 + "a"), zarr_version=3, use_ocdbt=True)
    assert e.value.got == 41
    # the chunk keys of a v3 shard grid: "<name>/c/99/99/99" is longer than "zarr.json"
    with pytest.raises(FormatError) as e:
        write_limits.check_array(
            _array("a" * 30, shape=(100, 100, 100), chunk=(1, 1, 1)),
            zarr_version=3,
            use_ocdbt=True,
        )
    assert e.value.got == 31 + len("c/99/99/99")
    # v3 counts shards (write shape), not inner chunks: 1 shard, key "c/0/0/0"
    write_limits.check_array(
        _array("a" * 30, shape=(100, 100, 100), chunk=(1, 1, 1), write=(100, 100, 100)),
        zarr_version=3,
        use_ocdbt=True,
    )
    # v2 counts chunks: "<name>/99.99.99" is longer than ".zarray"
    with pytest.raises(FormatError) as e:
        write_limits.check_array(
            _array("a" * 32, shape=(100, 100, 100), chunk=(1, 1, 1), write=(100, 100, 100)),
            zarr_version=2,
            use_ocdbt=True,
        )
    assert e.value.got == 33 + len("99.99.99")
    # without OCDBT no key is checked
    write_limits.check_array(_array("a" * 100), zarr_version=3, use_ocdbt=False)


def test_check_array_skips_the_key_check_for_short_names_only(monkeypatch) -> None:
    # a name is checked when 4 * its characters reach half the key limit
    _limits(monkeypatch, max_key_bytes=40)
    write_limits.check_array(_array("a" * 4), zarr_version=3, use_ocdbt=True)
    _limits(monkeypatch, max_key_bytes=10)  # half: 5; 4 * 1 = 4 < 5 is skipped
    write_limits.check_array(_array("a"), zarr_version=3, use_ocdbt=True)
    _limits(monkeypatch, max_key_bytes=9)  # half 4: 4 is not below, checked
    with pytest.raises(FormatError) as e:
        write_limits.check_array(_array("a"), zarr_version=3, use_ocdbt=True)
    assert e.value.got == 2 + len("zarr.json")


def test_check_array_path_at_path_max(tmp_path) -> None:
    item = "/x"
    # "/x/<name>" + "/" + ".zarray" + ".__lock" must stay under 4096
    room = 4096 - len("/x/") - 1 - len(".zarray") - len(".__lock")
    write_limits.check_array_path(item, _array("a" * (room - 1)), zarr_version=2)
    with pytest.raises(FormatError) as e:
        write_limits.check_array_path(item, _array("a" * room), zarr_version=2)
    assert e.value.rule == "WRITE-005"
    assert (e.value.expected, e.value.got) == ("< 4096 bytes", 4096)
    assert e.value.message == (
        f"leaf {'a' * room!r}... ({room} characters): without OCDBT the path of one of its "
        "files would be too long"
    ).replace(repr("a" * room), repr("a" * 60))
    # v3: "zarr.json" is two bytes longer than ".zarray"
    with pytest.raises(FormatError) as e:
        write_limits.check_array_path(item, _array("a" * (room - 2)), zarr_version=3)
    assert e.value.got == 4096
    write_limits.check_array_path(item, _array("a" * (room - 3)), zarr_version=3)
    # bytes of the file system encoding, and the shard key of v3
    with pytest.raises(FormatError) as e:
        write_limits.check_array_path(item, _array("é" * (room // 2)), zarr_version=2)
    assert e.value.rule == "WRITE-005"
    assert e.value.got == 3 + 2 * (room // 2) + 1 + 7 + 7
    big = _array("a" * (room - 7), shape=(10**12,), chunk=(1,), write=(1,))
    with pytest.raises(FormatError) as e:
        write_limits.check_array_path(item, big, zarr_version=3)
    assert e.value.got == 3 + room - 7 + 1 + len("c/999999999999") + 7
    big2 = _array("a" * (room - 7), shape=(10**14,), chunk=(1,), write=(10**14,))
    write_limits.check_array_path(item, big2, zarr_version=3)  # one shard: "zarr.json"
    # v2 names chunks, whatever the write shape: "99999999999999" is longer than ".zarray"
    with pytest.raises(FormatError) as e:
        write_limits.check_array_path(item, big2, zarr_version=2)
    assert e.value.got == 3 + room - 7 + 1 + len("99999999999999") + 7
    assert os.fsencode("é") == "é".encode()


def test_check_documents_builds_and_measures_only_above_the_bound(monkeypatch) -> None:
    _limits(monkeypatch, max_json_bytes=4)
    built = []

    def build():
        built.append(1)
        return {"a.json": b"1234", "b.json": b"12345"}

    write_limits.check_documents(4, build)
    assert built == []
    with pytest.raises(FormatError) as e:
        write_limits.check_documents(5, build)
    assert built == [1]
    assert e.value.rule == "JSON-003" and e.value.file == "b.json"
    assert (e.value.expected, e.value.got) == ("<= 4 bytes", 5)
    assert e.value.message == "document too large"
    write_limits.check_documents(100, lambda: {"a.json": b"1234", "c": b""})


def test_check_json_refuses_what_the_reader_refuses() -> None:
    write_limits.check_json(b'{"a": [1]}', file="x.json")
    deep = b"[" * 65 + b"]" * 65
    with pytest.raises(FormatError) as e:
        write_limits.check_json(deep, file="x.json")
    assert e.value.rule == "JSON-003" and e.value.file == "x.json"
