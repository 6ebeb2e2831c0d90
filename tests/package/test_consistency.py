"""One resolver: every read command and API agrees on every fixture path of every era.

Each path of the golden fixtures (written by Orbax 0.3.5 ... 0.12.8 and by ockpt): the
checkpoint given (item, v1 checkpoint, manager root), each step of a manager root (bare
old-style steps of 0.3/0.4 included) and each item of a step or v1 checkpoint. For each, the
Python API (`load_pytree`, `pytree_metadata`, `open`), and the commands `inspect`, `cat`,
`tree`, `convert`, `diff`, `ls`, `validate` and `cp`, run in-process, must agree: the same
item read, the same leaves, the same steps and commit state, or the same refusal with the same
rule (spec/loading.md §6) and exit status 1. A missing path is "no such file or directory",
exit 2, from every command.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import ockpt
from ockpt import cli
from ockpt.layout import Kind, detect, resolve
from tests.support import FIXTURES, fixture_cases

COMMANDS = ("inspect", "cat", "tree", "convert", "diff")


def _paths() -> list[Path]:
    out: list[Path] = []
    for case in fixture_cases():
        top = case / "checkpoint"
        out.append(top)
        layout = detect(top)
        steps = [top / s.name for s in layout.steps if s.committed]
        out += steps
        for container in [top, *steps]:
            found = detect(container)
            out += [container / name for name in found.checkpointables]
    return out


PATHS = _paths()


def _id(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _names(tree: object, key: tuple[str, ...] = ()) -> list[str]:
    """The leaf name of every leaf and every empty container or None (key-paths §7)."""
    if isinstance(tree, dict) and tree:
        return sorted(n for k, v in tree.items() for n in _names(v, (*key, str(k))))
    if isinstance(tree, (list, tuple)) and tree:
        return sorted(n for i, v in enumerate(tree) for n in _names(v, (*key, str(i))))
    return [ockpt.leaf_name(key)]


def test_fixture_paths_cover_every_kind():
    kinds = {detect(p).kind for p in PATHS}
    assert {
        Kind.PYTREE_ITEM,
        Kind.JSON_ITEM,
        Kind.RANDOM_KEY_ITEM,
        Kind.PROTO_ITEM,
        Kind.STEP,
        Kind.V1_CHECKPOINT,
        Kind.MANAGER_ROOT,
    } <= kinds
    bare = [
        p
        for p in PATHS
        if detect(p).kind is Kind.STEP and not (p / "_CHECKPOINT_METADATA").exists()
    ]
    assert bare, "no bare old-style step (LAYOUT-005) among the fixture paths"


@pytest.mark.parametrize("path", PATHS, ids=[_id(p) for p in PATHS])
def test_every_reader_agrees(path: Path, tmp_path: Path):
    try:
        target = resolve(path).target
        refused = None
    except ockpt.NotACheckpointError as e:
        target, refused = None, e.rule
        assert refused and refused.startswith("LOAD-05"), e
    item = None  # an item that is no pytree, which inspect and cat show whole (HANDLER-004)
    if refused == "LOAD-050" and detect(path).kind is not Kind.NOT_A_CHECKPOINT:
        item = resolve(path, what="item").target
        assert item.kind is not Kind.PYTREE_ITEM

    # the Python API
    for read in (ockpt.load_pytree, ockpt.pytree_metadata, ockpt.open):
        if refused:
            with pytest.raises(ockpt.NotACheckpointError) as e:
                read(path)
            assert e.value.rule == refused, (read.__name__, e.value)
    if not refused:
        assert target is not None
        loaded = ockpt.load_pytree(path)
        names = _names(loaded)
        assert _names(ockpt.pytree_metadata(path)) == names
        with ockpt.open(path) as ckpt:
            assert ckpt.path == target.path
            assert ckpt.resolved.target.path == target.path

    # the commands that read one item
    code, out, err = _run("inspect", "--json", str(path))
    if item is not None:
        assert code == 0, err
        assert json.loads(out)["item_kind"] == item.kind.value
        code, _, err = _run("cat", str(path))
        unread = item.kind in (Kind.PROTO_ITEM, Kind.UNKNOWN_ITEM)
        assert code == (1 if unread else 0), err
        assert not unread or "[HANDLER-004]" in err, err
    elif refused:
        assert code == 1 and f"[{refused}]" in err, err
    else:
        assert code == 0, err
        report = json.loads(out)
        assert report["item_path"] == target.path
        assert sorted(r["name"] for r in report["leaves"]) == names
    leaf = (
        next((r["name"] for r in json.loads(out)["leaves"] if "nbytes" in r), None)
        if not refused
        else None
        if item is not None
        else "x"
    )
    if leaf is not None:
        code, _, err = _run("cat", str(path), leaf)
        assert code == (1 if refused else 0), err
        if refused:
            assert f"[{refused}]" in err
    code, _, err = _run("tree", str(path))
    if refused:
        assert code == 1 and f"[{refused}]" in err, err
    elif target is not None and target.item is not None and target.item.has_metadata:
        assert code == 0, err
    code, _, err = _run(
        "convert", str(path), str(tmp_path / "out.npz"), "--skip-unsupported", "--no-progress"
    )
    assert code == (1 if refused else 0), err
    if refused:
        assert f"[{refused}]" in err
    code, _, err = _run("diff", str(path), str(path), "--no-progress")
    assert code == (1 if refused else 0), err
    if refused:
        assert f"[{refused}]" in err

    # the commands that take any checkpoint path
    layout = detect(path)
    code, out, err = _run("ls", "--json", str(path))
    assert code == 0, err
    listed = json.loads(out)
    assert listed["kind"] == layout.kind.value
    code, out, err = _run("validate", "--json", str(path))
    assert code in (0, 1), err
    assert json.loads(out)["kind"] == layout.kind.value
    if layout.kind is Kind.MANAGER_ROOT:
        steps = [(s.step, s.committed) for s in layout.steps]
        assert [(c["step"], c["committed"]) for c in listed["children"]] == steps
        committed = [s for s, ok in steps if ok]
        mngr = ockpt.CheckpointManager(path, step_prefix=layout.step_prefix)
        assert mngr.all_steps() == committed
        assert json.loads(out)["checked"]["steps"] == len(committed)
        if not refused:
            assert Path(target.path).parent.name == str(layout.latest_step.name)

    # a copy reads as the original
    if not refused and layout.kind is not Kind.JSON_ITEM:
        copy = tmp_path / "copies" / path.name  # a bare old-style step is known by its name
        code, _, err = _run("cp", str(path), str(copy), "--no-progress")
        assert code == 0, err
        assert _names(ockpt.load_pytree(copy)) == names


@pytest.mark.parametrize(
    "argv",
    [
        ("inspect", "{}"),
        ("ls", "{}"),
        ("cat", "{}", "x"),
        ("tree", "{}"),
        ("convert", "{}", "{}.npz"),
        ("diff", "{}", "{}"),
        ("validate", "{}"),
        ("cp", "{}", "{}-copy"),
        ("detect", "{}"),
    ],
    ids=lambda a: a[0],
)
def test_missing_path_is_an_io_error_everywhere(argv, tmp_path: Path):
    missing = str(tmp_path / "nowhere")
    code, _, err = _run(*(a.format(missing) for a in argv))
    assert code == 2, err
    assert "no such file or directory" in err and "Traceback" not in err


def test_missing_path_from_the_api_is_path_not_found(tmp_path: Path):
    missing = tmp_path / "nowhere"
    for read in (ockpt.load_pytree, ockpt.pytree_metadata, ockpt.open, ockpt.validate):
        with pytest.raises(ockpt.PathNotFoundError) as e:
            read(missing)
        assert isinstance(e.value, FileNotFoundError) and e.value.filename == str(missing)
    assert detect(missing).kind is Kind.NOT_A_CHECKPOINT
