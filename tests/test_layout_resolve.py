"""`ockpt.layout.resolve` and `select` on small hand-made trees: which step, container and
item a read of a path means, and every refusal's rule, file and message (LOAD-050..055,
LAYOUT-007)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ockpt
from ockpt import layout as layout_module
from ockpt.errors import NotACheckpointError, PathNotFoundError
from ockpt.layout import Kind, Step, resolve, select
from ockpt.store import as_store
from tests.support.errors import error_fields, raised

COMMIT = "Checkpoint commit was successful"


def _item(path: Path) -> Path:
    """A pytree item with an empty tree."""
    path.mkdir(parents=True)
    (path / "_METADATA").write_text('{"tree_metadata": {}}')
    return path


def _json_item(path: Path, name: str = "metrics") -> Path:
    path.mkdir(parents=True)
    (path / name).write_text('{"loss": 1.5}')
    return path


def _step(path: Path, items: dict[str, str], *, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "_CHECKPOINT_METADATA").write_text(json.dumps({"item_handlers": items}))
    if commit:
        (path / "commit_success.txt").write_text(COMMIT)
    return path


PYTREE = "orbax.checkpoint.PyTreeCheckpointHandler"
JSON = "orbax.checkpoint.JsonCheckpointHandler"


def _manager(root: Path, steps=(1, 2), items=("default", "metrics")) -> Path:
    for number in steps:
        handlers = {n: (JSON if n == "metrics" else PYTREE) for n in items}
        step = _step(root / str(number), handlers)
        for name in items:
            (_json_item if name == "metrics" else _item)(step / name)
    return root


def _not_a_checkpoint(
    path: Path, *, rule: str, message: str, fn=resolve, file: Path | None = None, **kw
) -> None:
    """`fn(path, **kw)` raises NotACheckpointError of `rule` naming `file` (else `path`)."""
    err = raised(NotACheckpointError, fn, path, **kw)
    want = {"rule": rule, "file": str(file or path), "message": message}
    assert error_fields(err) == want


# ---------------------------------------------------------------------------------------------
# What a read means


def test_resolve_a_manager_root_reads_the_latest_steps_default_item(tmp_path):
    root = _manager(tmp_path / "root")
    got = resolve(root)
    assert got.top.kind is Kind.MANAGER_ROOT and got.top.path == str(root)
    assert got.step == Step(2, "2", committed=True, has_commit_file=True)
    assert got.container is not None and got.container.path == str(root / "2")
    assert got.container.kind is Kind.STEP
    assert got.target.path == str(root / "2" / "default")
    assert got.target.kind is Kind.PYTREE_ITEM
    assert got.location.display == str(root / "2" / "default")
    assert got.pytree is got.target


def test_resolve_a_named_step_and_item(tmp_path):
    root = _manager(tmp_path / "root")
    got = resolve(root, step=1, item="metrics", what="item")
    assert got.step == Step(1, "1", committed=True, has_commit_file=True)
    assert got.target.kind is Kind.JSON_ITEM
    assert got.target.path == got.location.display == str(root / "1" / "metrics")
    assert got.container.path == str(root / "1")


def test_resolve_what_checkpoint_stops_at_the_step(tmp_path):
    root = _manager(tmp_path / "root")
    got = resolve(root, what="checkpoint")
    assert got.target.kind is Kind.STEP and got.container is None
    assert got.target.path == got.location.display == str(root / "2")
    assert got.step.step == 2
    # the item named is still picked
    got = resolve(root, what="checkpoint", item="metrics")
    assert got.target.kind is Kind.JSON_ITEM and got.container.path == str(root / "2")
    assert got.location.display == str(root / "2" / "metrics")
    # a step given directly
    got = resolve(root / "1", what="checkpoint")
    assert got.target is got.top and got.step is None and got.container is None
    assert got.location.display == str(root / "1")


def test_resolve_what_item_picks_the_pytree_item_or_takes_one_given(tmp_path):
    root = _manager(tmp_path / "root")
    got = resolve(root / "1", what="item")
    assert got.target.path == str(root / "1" / "default") and got.step is None
    got = resolve(root / "1" / "metrics", what="item")
    assert got.target.kind is Kind.JSON_ITEM and got.container is None
    assert got.location.display == str(root / "1" / "metrics")


def test_select_applies_only_what_was_asked(tmp_path):
    root = _manager(tmp_path / "root")
    got = select(root)
    assert got.target is got.top and got.target.kind is Kind.MANAGER_ROOT
    assert got.step is None and got.container is None
    assert got.location.display == str(root)
    got = select(root, step=1)
    assert got.step.step == 1 and got.target.kind is Kind.STEP and got.container is None
    assert got.location.display == str(root / "1")
    got = select(root, item="metrics")  # the latest committed step's item
    assert got.step.step == 2 and got.target.kind is Kind.JSON_ITEM
    assert got.location.display == str(root / "2" / "metrics")
    got = select(root / "1")
    assert got.target.kind is Kind.STEP and got.container is None
    got = select(root / "1" / "metrics")
    assert got.target.kind is Kind.JSON_ITEM


def test_select_a_temporary_directory_is_listed_but_never_read(tmp_path):
    tmp = _item(tmp_path / "x.orbax-checkpoint-tmp-5")
    got = select(tmp)
    assert got.target.kind is Kind.TEMPORARY and got.location.display == str(tmp)
    message = "an unfinished save (temporary name): never read"
    _not_a_checkpoint(tmp, rule="LOAD-054", message=message)
    _not_a_checkpoint(tmp, rule="LOAD-054", message=message, fn=select, item="x")
    _not_a_checkpoint(tmp, rule="LOAD-054", message=message, what="checkpoint")


# ---------------------------------------------------------------------------------------------
# Picking an item of a step or v1 checkpoint (LOAD-051, LOAD-052)


@pytest.mark.parametrize(
    "items, picked",
    [
        (["a", "default", "pytree", "state"], "default"),
        (["a", "pytree", "state"], "state"),
        (["a", "pytree"], "pytree"),
        (["only"], "only"),
    ],
)
def test_the_pytree_item_of_a_step(tmp_path, items, picked):
    step = _step(tmp_path / "3", dict.fromkeys(items, PYTREE))
    for name in items:
        _item(step / name)
    _json_item(step / "metrics")
    got = resolve(step)
    assert got.container.path == str(step)
    assert got.target.path == got.location.display == str(step / picked)


def test_a_step_with_several_pytree_items_and_no_name_is_refused(tmp_path):
    step = _step(tmp_path / "3", {"a": PYTREE, "b": PYTREE, "metrics": JSON})
    _item(step / "a")
    _item(step / "b")
    _json_item(step / "metrics")
    message = (
        "holds 2 pytree items (['a', 'b']) among ['a', 'b', 'metrics']: pick one with item=NAME"
    )
    _not_a_checkpoint(step, rule="LOAD-052", message=message)
    assert resolve(step, item="b").target.path == str(step / "b")
    message = "no item 'c'; items: ['a', 'b', 'metrics']"
    _not_a_checkpoint(step, rule="LOAD-052", message=message, item="c")
    _not_a_checkpoint(step, rule="LOAD-052", message=message, fn=select, item="c")


def test_a_v1_checkpoint_with_several_pytrees_and_no_name_is_refused(tmp_path):
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "orbax.checkpoint").write_text("")
    _item(v1 / "params")
    _item(v1 / "opt_state")
    _json_item(v1 / "extra", "data.json")
    message = (
        "v1 checkpoint without a state/ or pytree/ checkpointable, with 2 pytree checkpointables "
        "['opt_state', 'params']; it holds ['extra', 'opt_state', 'params']: pick one with "
        "item=NAME, or load them all with load_checkpointables"
    )
    _not_a_checkpoint(v1, rule="LOAD-051", message=message)
    assert ockpt.detect(v1).pytree is None
    assert resolve(v1, item="params").target.path == str(v1 / "params")
    _item(v1 / "state")
    assert resolve(v1).target.path == str(v1 / "state")
    assert ockpt.detect(v1).pytree.path == str(v1 / "state")


def test_an_item_asked_of_what_holds_no_items_is_refused(tmp_path):
    item = _item(tmp_path / "item")
    message = "item='x' asked for, but this is a pytree_item"
    _not_a_checkpoint(item, rule="LOAD-052", message=message, item="x")
    _not_a_checkpoint(item, rule="LOAD-052", message=message, fn=select, item="x")


def test_a_random_key_item_is_an_item_not_a_step(tmp_path):
    key = tmp_path / "key"
    _item(key / "jax_random_key")
    _json_item(key / "jax_random_key_metadata", "metadata")
    got = resolve(key, what="item")
    assert got.target.kind is Kind.RANDOM_KEY_ITEM and got.container is None
    assert got.location.display == str(key)
    message = "item='jax_random_key' asked for, but this is a random_key_item"
    _not_a_checkpoint(key, rule="LOAD-052", message=message, item="jax_random_key")
    message = "not a pytree item: JAX random key: data in jax_random_key/, metadata in "
    message += "jax_random_key_metadata/"
    _not_a_checkpoint(key, rule="LOAD-050", message=message)
    assert resolve(key, what="checkpoint").target.kind is Kind.RANDOM_KEY_ITEM


# ---------------------------------------------------------------------------------------------
# Steps (LOAD-053, LOAD-055, LAYOUT-007)


def test_a_step_asked_of_what_is_no_manager_root_is_refused(tmp_path):
    root = _manager(tmp_path / "root")
    message = "step=1 asked for, but this is a step"
    _not_a_checkpoint(root / "1", rule="LOAD-053", message=message, step=1)
    _not_a_checkpoint(root / "1", rule="LOAD-053", message=message, fn=select, step=1)
    message = "step=0 asked for, but this is a pytree_item"
    _not_a_checkpoint(root / "1" / "default", rule="LOAD-053", message=message, step=0)


def test_a_step_not_committed_is_refused(tmp_path):
    root = _manager(tmp_path / "root")
    _item(_step(root / "3.orbax-checkpoint-tmp-1", {"default": PYTREE}, commit=False) / "default")
    message = "no committed step 3; steps: [1, 2]"
    _not_a_checkpoint(root, rule="LOAD-053", message=message, step=3)
    _not_a_checkpoint(root, rule="LOAD-053", message=message, fn=select, step=3)
    assert resolve(root).step.step == 2


def test_a_manager_root_without_a_committed_step_is_refused(tmp_path):
    root = tmp_path / "root"
    (root / "metadata").mkdir(parents=True)
    message = "checkpoint-manager root without a committed step"
    _not_a_checkpoint(root, rule="LOAD-053", message=message)
    _not_a_checkpoint(root, rule="LOAD-053", message=message, fn=select, item="default")
    got = select(root)
    assert got.target.kind is Kind.MANAGER_ROOT and got.step is None
    _item(_step(root / "4.orbax-checkpoint-tmp", {"default": PYTREE}, commit=False) / "default")
    _not_a_checkpoint(root, rule="LOAD-053", message=message)


def test_two_directories_of_one_step_are_refused(tmp_path):
    root = _manager(tmp_path / "root", steps=(1, 2))
    _item(_step(root / "002", {"default": PYTREE}) / "default")
    message = "step 2 has several directories ['002', '2']: which one is meant is unknown"
    _not_a_checkpoint(root, rule="LAYOUT-007", message=message)
    _not_a_checkpoint(root, rule="LAYOUT-007", message=message, step=2)
    assert resolve(root, step=1).step.name == "1"


def test_a_step_removed_after_the_root_was_listed(tmp_path, monkeypatch):
    import shutil

    root = _manager(tmp_path / "root")
    detect_step = layout_module.detect_step

    def removed_first(top, step):
        shutil.rmtree(root / step.name)
        return detect_step(top, step)

    monkeypatch.setattr(layout_module, "detect_step", removed_first)
    err = raised(NotACheckpointError, resolve, root)
    assert error_fields(err) == {
        "rule": "LOAD-055",
        "file": str(root / "2"),
        "message": "step removed meanwhile",
    }


# ---------------------------------------------------------------------------------------------
# What a read cannot mean (LOAD-050)


def test_what_is_no_checkpoint_is_refused(tmp_path):
    (tmp_path / "photos" / "2024").mkdir(parents=True)
    reason = ockpt.detect(tmp_path / "photos").reason
    message = f"not a checkpoint: {reason}"
    _not_a_checkpoint(tmp_path / "photos", rule="LOAD-050", message=message)
    _not_a_checkpoint(tmp_path / "photos", rule="LOAD-050", message=message, fn=select)


def test_an_unknown_item_is_an_item_but_no_pytree(tmp_path):
    step = _step(tmp_path / "5", {"default": PYTREE, "odd": "some.module.OddHandler"})
    _item(step / "default")
    (step / "odd" / "x").mkdir(parents=True)
    got = resolve(step, item="odd", what="item")
    assert got.target.kind is Kind.UNKNOWN_ITEM
    reason = got.target.reason
    message = f"not a pytree item: {reason}"
    _not_a_checkpoint(step, rule="LOAD-050", message=message, item="odd", file=step / "odd")
    err = raised(NotACheckpointError, lambda: got.pytree)
    assert error_fields(err) == {
        "rule": "LOAD-050",
        "file": str(step / "odd"),
        "message": message,
    }


def test_what_item_refuses_a_directory_that_is_no_item(tmp_path):
    root = _manager(tmp_path / "root")
    got = resolve(root / "1", what="checkpoint")
    assert got.target.kind is Kind.STEP
    message = "not a pytree item: " + ockpt.detect(root / "1").reason
    # a step of a step: what=item over a step given directly picks its item
    assert resolve(root / "1", what="item").target.kind is Kind.PYTREE_ITEM
    # a v1 checkpoint is no item: "item" and "pytree" pick inside it
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "orbax.checkpoint").write_text("")
    _json_item(v1 / "extra", "data.json")
    message = (
        "v1 checkpoint without a state/ or pytree/ checkpointable, with 0 pytree checkpointables "
        "[]; it holds ['extra']: pick one with item=NAME, or load them all with "
        "load_checkpointables"
    )
    _not_a_checkpoint(v1, rule="LOAD-051", message=message, what="item")
    got = resolve(v1, item="extra", what="item")
    assert got.target.kind is Kind.JSON_ITEM
    message = "not a pytree item: " + got.target.reason
    _not_a_checkpoint(v1, rule="LOAD-050", message=message, item="extra", file=v1 / "extra")


# ---------------------------------------------------------------------------------------------
# A missing path, and the checkpoint an interrupted overwrite parked beside it (LAYOUT-006)


def test_a_missing_path_is_an_io_error(tmp_path):
    from ockpt.store.memory import MemoryStore

    missing = tmp_path / "c"
    for fn in (resolve, select):
        err = raised(PathNotFoundError, fn, missing)
        assert error_fields(err) == {
            "rule": None,
            "file": str(missing),
            "message": "no such file or directory",
        }
    (tmp_path / "c.orbax-checkpoint-tmp-replaced").write_text("a file, no checkpoint")
    err = raised(PathNotFoundError, resolve, missing)
    assert (err.rule, err.message) == (None, "no such file or directory")
    # a store at the top of its namespace has no sibling to look for
    err = raised(PathNotFoundError, resolve, MemoryStore(display="mem://"))
    assert error_fields(err) == {
        "rule": None,
        "file": "mem://",
        "message": "no such file or directory",
    }


def test_a_missing_path_names_its_parked_checkpoint(tmp_path):
    missing = tmp_path / "c"
    parked = _item(tmp_path / "c.orbax-checkpoint-tmp-replaced")
    note = (
        f"; an interrupted overwrite left the checkpoint at {parked}: the next save to this "
        "path renames it back, or rename it back yourself"
    )
    err = raised(PathNotFoundError, resolve, missing)
    assert error_fields(err) == {
        "rule": "LAYOUT-006",
        "file": str(missing),
        "message": "no such file or directory" + note,
    }
    assert ockpt.detect(missing).reason == "cannot stat: no such file or directory" + note
    assert layout_module.interrupted_overwrite_note(as_store(missing)) == note
    assert layout_module.interrupted_overwrite_note(as_store(tmp_path / "d")) == ""


def test_the_context_reaches_the_store(tmp_path, monkeypatch):
    """The tensorstore context given is the one the path's store is opened with."""
    root = _manager(tmp_path / "root")
    seen = []

    def recording(path, *, context=None):
        seen.append(context)
        return as_store(path)

    monkeypatch.setattr(layout_module, "as_store", recording)
    context = object()
    layout_module.detect(root, context=context)
    layout_module.scan_steps(root, context=context)
    resolve(root, context=context)
    select(root, context=context)
    assert seen == [context] * 4


def test_what_item_refuses_a_checkpoint_inside_a_checkpoint(tmp_path):
    """A v1 checkpoint may hold another: it is no item, so a read of one item refuses it."""
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "orbax.checkpoint").write_text("")
    inner = v1 / "inner"
    inner.mkdir()
    (inner / "orbax.checkpoint").write_text("")
    _item(inner / "x")
    message = "not an item: v1 checkpoint with 1 item(s): x"
    _not_a_checkpoint(v1, rule="LOAD-050", message=message, item="inner", what="item", file=inner)
    got = resolve(v1, item="inner", what="checkpoint")
    assert got.target.kind is Kind.V1_CHECKPOINT and got.location.display == str(inner)
