"""`ockpt.layout.detect` on small hand-made trees, compared whole: every field of every
layout (kind, reason, handler, times, problems, steps, children) as detection gives it, for
each kind of item a step or v1 checkpoint can hold, given inside one and directly, and for
manager roots on a local disk and on a store without rename."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ockpt.layout import (
    ContainerLayout,
    ItemFormat,
    Kind,
    Layout,
    ManagerRootLayout,
    Problem,
    PytreeItemLayout,
    Step,
    Storage,
    detect,
    scan_steps,
)
from ockpt.store.memory import MemoryStore

COMMIT = "Checkpoint commit was successful"
EMPTY = ItemFormat(Storage.NONE, None, has_metadata=True, has_msgpack=False)
EMPTY_REASON = "pytree item: no array storage; _METADATA"
NOTHING = (
    "no _METADATA, checkpoint file, manifest.ocdbt, per-leaf zarr arrays, _CHECKPOINT_METADATA, "
    "orbax.checkpoint marker or step directories"
)
PYTREE = "orbax.checkpoint.PyTreeCheckpointHandler"
JSON = "orbax.checkpoint.JsonCheckpointHandler"
PROTO = "orbax.checkpoint.ProtoCheckpointHandler"
JAX_KEY = "orbax.checkpoint.JaxRandomKeyCheckpointHandler"
NP_KEY = "orbax.checkpoint.NumpyRandomKeyCheckpointHandler"
UNREAD = "orbax.checkpoint.StatefulCheckpointableHandler"
ODD = "some.module.OddHandler"


def _item(path: Path, *, handler: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "_METADATA").write_text('{"tree_metadata": {}}')
    if handler is not None:
        _own(path, handler)
    return path


def _file(path: Path, name: str, *, handler: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / name).write_text('{"loss": 1.5}')
    if handler is not None:
        _own(path, handler)
    return path


def _own(path: Path, handlers, **times) -> None:
    doc = {"item_handlers": handlers, **times}
    (path / "_CHECKPOINT_METADATA").write_text(json.dumps(doc))


def _key(path: Path, data: str = "jax_random_key", *, handler: str | None = None) -> Path:
    _item(path / data)
    _file(path / f"{data}_metadata", "metadata")
    if handler is not None:
        _own(path, handler)
    return path


# What detection gives: `location` is not compared (it is the store); `_located` checks it.


def pytree(path: Path, *, handler: str | None = None, **kw) -> PytreeItemLayout:
    return PytreeItemLayout(
        str(path), Kind.PYTREE_ITEM, EMPTY_REASON, item=EMPTY, handler=handler, location=None, **kw
    )


def plain(path: Path, kind: Kind, reason: str, **kw) -> Layout:
    return Layout(str(path), kind, reason, **kw)


def container(path: Path, kind: Kind, reason: str, children: dict, **kw) -> ContainerLayout:
    return ContainerLayout(str(path), kind, reason, checkpointables=children, location=None, **kw)


def jax_key(path: Path, *, handler: str | None = None, **kw) -> ContainerLayout:
    reason = "JAX random key: data in jax_random_key/, metadata in jax_random_key_metadata/"
    children = {
        "jax_random_key": pytree(path / "jax_random_key"),
        "jax_random_key_metadata": plain(
            path / "jax_random_key_metadata", Kind.JSON_ITEM, "holds the JSON file 'metadata'"
        ),
    }
    return container(path, Kind.RANDOM_KEY_ITEM, reason, children, handler=handler, **kw)


def _located(layout: Layout) -> None:
    """Every layout's store is the directory it describes."""
    assert layout.location is not None and layout.location.display == layout.path
    for child in layout.checkpointables.values():
        _located(child)


def _detected(path: Path, want: Layout) -> None:
    got = detect(path)
    assert got == want
    _located(got)


# ---------------------------------------------------------------------------------------------
# A step holding every kind of item


def test_every_kind_of_item_of_a_step(tmp_path):
    step = tmp_path / "7"
    step.mkdir()
    handlers = {
        "default": PYTREE,
        "metrics": JSON,
        "proto": PROTO,
        "key": JAX_KEY,
        "badkey": JAX_KEY,
        "nojson": JSON,
        "unread": UNREAD,
        "odd": ODD,
        "gone": JSON,
        "listed": None,
    }
    _own(step, handlers, init_timestamp_nsecs=5, commit_timestamp_nsecs=9)
    _item(step / "default")
    _file(step / "metrics", "metrics")
    _file(step / "proto", "proto.pbtxt")
    _key(step / "key")
    _item(step / "badkey")
    _file(step / "nojson", "a")
    (step / "nojson" / "b").write_text("1")
    _file(step / "unread", "x")
    (step / "odd" / "sub").mkdir(parents=True)
    _item(step / "listed")
    (step / "junk" / "sub").mkdir(parents=True)  # named by no handler, and no item
    _file(step / "notes", "notes.json")  # named by no handler: its one file makes it JSON
    (step / "runs" / "1").mkdir(parents=True)
    _own(step / "runs" / "1", {})  # steps of their own: no manager root inside a step
    _item(step / "later.orbax-checkpoint-tmp-3")
    children = {
        "badkey": plain(
            step / "badkey",
            Kind.UNKNOWN_ITEM,
            "written by JaxRandomKeyCheckpointHandler, but no jax_random_key/ and "
            "jax_random_key_metadata/",
            handler=JAX_KEY,
        ),
        "default": pytree(step / "default", handler=PYTREE),
        "junk": plain(step / "junk", Kind.UNKNOWN_ITEM, NOTHING),
        "notes": plain(step / "notes", Kind.JSON_ITEM, "holds the JSON file 'notes.json'"),
        "runs": plain(step / "runs", Kind.UNKNOWN_ITEM, NOTHING),
        "key": jax_key(step / "key", handler=JAX_KEY),
        "listed": pytree(step / "listed"),
        "metrics": plain(
            step / "metrics",
            Kind.JSON_ITEM,
            "JSON item (JsonCheckpointHandler): holds the JSON file 'metrics'",
            handler=JSON,
        ),
        "nojson": plain(
            step / "nojson",
            Kind.UNKNOWN_ITEM,
            "written by JsonCheckpointHandler, but holds no single file",
            handler=JSON,
        ),
        "odd": plain(
            step / "odd", Kind.UNKNOWN_ITEM, f"written by OddHandler, but {NOTHING}", handler=ODD
        ),
        "proto": plain(
            step / "proto",
            Kind.PROTO_ITEM,
            "protobuf text format in 'proto.pbtxt', written by ProtoCheckpointHandler; ockpt "
            "does not read it",
            handler=PROTO,
        ),
        "unread": plain(
            step / "unread",
            Kind.UNKNOWN_ITEM,
            "written by StatefulCheckpointableHandler, whose files ockpt does not read",
            handler=UNREAD,
        ),
    }
    want = container(
        step,
        Kind.STEP,
        "checkpoint-manager step with 12 item(s): badkey, default, junk, key, listed, metrics, "
        "nojson, notes, odd, proto, runs, unread",
        children,
        temporaries=("later.orbax-checkpoint-tmp-3",),
        problems=(
            Problem("LAYOUT-003", "_CHECKPOINT_METADATA names items with no directory: ['gone']"),
        ),
        init_time_ns=5,
        commit_time_ns=9,
    )
    _detected(step, want)


def test_items_given_directly_name_their_own_handler(tmp_path):
    """An item's own `_CHECKPOINT_METADATA` names its handler (a string); where what it
    holds does not match, it is no checkpoint (inside a step it is an unknown item)."""
    _detected(
        _item(tmp_path / "tree", handler=PYTREE),
        pytree(tmp_path / "tree", handler=PYTREE),
    )
    _detected(
        _file(tmp_path / "m", "anything.json", handler=JSON),
        plain(
            tmp_path / "m",
            Kind.JSON_ITEM,
            "JSON item (JsonCheckpointHandler): holds the JSON file 'anything.json'",
            handler=JSON,
        ),
    )
    _detected(
        _item(tmp_path / "badkey", handler=JAX_KEY),
        plain(
            tmp_path / "badkey",
            Kind.NOT_A_CHECKPOINT,
            "written by JaxRandomKeyCheckpointHandler, but no jax_random_key/ and "
            "jax_random_key_metadata/",
            handler=JAX_KEY,
        ),
    )
    nojson = _file(tmp_path / "nojson", "a", handler=JSON)
    (nojson / "b").write_text("1")
    _detected(
        nojson,
        plain(
            nojson,
            Kind.NOT_A_CHECKPOINT,
            "written by JsonCheckpointHandler, but holds no single file",
            handler=JSON,
        ),
    )
    _detected(
        _file(tmp_path / "unread", "x", handler=UNREAD),
        plain(
            tmp_path / "unread",
            Kind.NOT_A_CHECKPOINT,
            "written by StatefulCheckpointableHandler, whose files ockpt does not read",
            handler=UNREAD,
        ),
    )
    _detected(
        _key(tmp_path / "key", handler=JAX_KEY),
        jax_key(tmp_path / "key", handler=JAX_KEY),
    )
    _detected(
        _file(tmp_path / "proto", "proto.pbtxt", handler="x.ProtoHandler"),
        plain(
            tmp_path / "proto",
            Kind.PROTO_ITEM,
            "protobuf text format in 'proto.pbtxt', written by ProtoHandler; ockpt does not "
            "read it",
            handler="x.ProtoHandler",
        ),
    )
    # an unknown handler: typed by what the directory holds; one file is a JSON item
    # whatever its name, as the handler named one item
    _detected(_item(tmp_path / "odd", handler=ODD), pytree(tmp_path / "odd", handler=ODD))
    _detected(
        _file(tmp_path / "oddjson", "anything.json", handler=ODD),
        plain(
            tmp_path / "oddjson", Kind.JSON_ITEM, "holds the JSON file 'anything.json'", handler=ODD
        ),
    )
    _detected(
        _file(tmp_path / "oddproto", "proto.pbtxt", handler=ODD),
        plain(
            tmp_path / "oddproto",
            Kind.PROTO_ITEM,
            "protobuf text format in 'proto.pbtxt', written by OddHandler; ockpt does not read it",
            handler=ODD,
        ),
    )
    oddroot = tmp_path / "oddroot"
    _own(_item(oddroot / "1" / "default").parent, {"default": PYTREE})
    _own(oddroot, ODD)
    _detected(
        oddroot,
        plain(oddroot, Kind.NOT_A_CHECKPOINT, f"written by OddHandler, but {NOTHING}", handler=ODD),
    )
    # its times
    timed = _item(tmp_path / "timed")
    _own(timed, PYTREE, init_timestamp_nsecs=11, commit_timestamp_nsecs=22)
    (timed / "commit_success.txt").write_text(COMMIT)
    _detected(
        timed,
        pytree(timed, handler=PYTREE, init_time_ns=11, commit_time_ns=22, has_commit_file=True),
    )
    tmp = _item(tmp_path / "x.orbax-checkpoint-tmp-1")
    _detected(
        tmp,
        plain(tmp, Kind.TEMPORARY, "name contains '.orbax-checkpoint-tmp': an unfinished save"),
    )


def test_items_given_directly_without_a_handler(tmp_path):
    """Without `_CHECKPOINT_METADATA`, only what a directory holds types it."""
    _detected(
        _file(tmp_path / "proto", "proto.pbtxt"),
        plain(
            tmp_path / "proto",
            Kind.PROTO_ITEM,
            "protobuf text format in 'proto.pbtxt', written by a proto handler; ockpt does not "
            "read it",
        ),
    )
    _detected(
        _file(tmp_path / "metrics", "metrics"),
        plain(tmp_path / "metrics", Kind.JSON_ITEM, "holds the JSON file 'metrics'"),
    )
    _detected(  # a file of another name, given directly, is no JSON item (directories §6)
        _file(tmp_path / "notes", "notes.txt"),
        plain(tmp_path / "notes", Kind.NOT_A_CHECKPOINT, NOTHING),
    )
    _detected(_key(tmp_path / "key"), jax_key(tmp_path / "key"))
    np_key = _key(tmp_path / "np", "np_random_key")
    want = container(
        np_key,
        Kind.RANDOM_KEY_ITEM,
        "numpy random state: data in np_random_key/, metadata in np_random_key_metadata/",
        {
            "np_random_key": pytree(np_key / "np_random_key"),
            "np_random_key_metadata": plain(
                np_key / "np_random_key_metadata",
                Kind.JSON_ITEM,
                "holds the JSON file 'metadata'",
            ),
        },
        has_commit_file=True,
    )
    (np_key / "commit_success.txt").write_text(COMMIT)
    (np_key / "np_random_key.orbax-checkpoint-tmp-9").mkdir()  # an unfinished save aside
    _detected(np_key, want)


def test_the_parts_of_a_random_key_item_given_directly(tmp_path):
    """Its parts are items (depth 1): one whose handler's files are missing is an unknown
    item, not the end of detection."""
    key = tmp_path / "key"
    _item(key / "jax_random_key")
    _file(key / "jax_random_key_metadata", "a", handler=JSON)
    (key / "jax_random_key_metadata" / "b").write_text("{}")
    want = container(
        key,
        Kind.RANDOM_KEY_ITEM,
        "JAX random key: data in jax_random_key/, metadata in jax_random_key_metadata/",
        {
            "jax_random_key": pytree(key / "jax_random_key"),
            "jax_random_key_metadata": plain(
                key / "jax_random_key_metadata",
                Kind.UNKNOWN_ITEM,
                "written by JsonCheckpointHandler, but holds no single file",
                handler=JSON,
            ),
        },
    )
    _detected(key, want)


def test_a_random_key_item_holds_exactly_its_two_parts(tmp_path):
    key = _key(tmp_path / "key")
    (key / "extra.txt").write_text("x")
    got = detect(key)
    assert got.kind is not Kind.RANDOM_KEY_ITEM
    key = _key(tmp_path / "key2")
    _item(key / "more")
    assert detect(key).kind is not Kind.RANDOM_KEY_ITEM


def _v1(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "orbax.checkpoint").write_text("")
    return path


def test_checkpoints_nest_three_levels_deep(tmp_path):
    """A v1 checkpoint (0) may hold v1 checkpoints to depth 3; a directory below that is an
    unknown item, whatever it holds, and a random-key item's parts are one level below it."""
    a = _v1(_v1(tmp_path / "v1") / "a")
    b = _v1(a / "b")
    c = _v1(b / "c")
    _item(c / "d")
    _key(a / "key")  # parts at depth 3
    _key(b / "key")  # parts at depth 4
    got = detect(tmp_path / "v1")
    level_b = got.checkpointables["a"].checkpointables["b"]
    level_c = level_b.checkpointables["c"]
    assert level_b.kind is level_c.kind is Kind.V1_CHECKPOINT
    deep = "nested more than 3 checkpoint levels deep"
    assert level_c.checkpointables == {"d": plain(c / "d", Kind.UNKNOWN_ITEM, deep)}
    _located(got)
    assert level_b.checkpointables["key"] == container(
        b / "key",
        Kind.RANDOM_KEY_ITEM,
        "JAX random key: data in jax_random_key/, metadata in jax_random_key_metadata/",
        {
            "jax_random_key": plain(b / "key" / "jax_random_key", Kind.UNKNOWN_ITEM, deep),
            "jax_random_key_metadata": plain(
                b / "key" / "jax_random_key_metadata", Kind.UNKNOWN_ITEM, deep
            ),
        },
    )
    assert got.checkpointables["a"].checkpointables["key"] == jax_key(a / "key")


# ---------------------------------------------------------------------------------------------
# Steps without `_CHECKPOINT_METADATA` (LAYOUT-005: releases up to 0.4.8)


def test_a_bare_step(tmp_path):
    step = tmp_path / "12"
    _item(step / "default")
    _file(step / "metrics", "metrics")
    (step / "commit_success.txt").write_text(COMMIT)
    (step / "x.orbax-checkpoint-tmp-1").mkdir()
    want = container(
        step,
        Kind.STEP,
        "checkpoint-manager step with 2 item(s): default, metrics",
        {
            "default": pytree(step / "default"),
            "metrics": plain(step / "metrics", Kind.JSON_ITEM, "holds the JSON file 'metrics'"),
        },
        temporaries=("x.orbax-checkpoint-tmp-1",),
        has_commit_file=True,
    )
    _detected(step, want)


def test_what_is_no_bare_step(tmp_path):
    # not a step name
    _item(tmp_path / "twelve" / "default")
    assert detect(tmp_path / "twelve").kind is Kind.NOT_A_CHECKPOINT
    # a file besides the commit marker
    _item(tmp_path / "3" / "default")
    (tmp_path / "3" / "notes.txt").write_text("x")
    assert detect(tmp_path / "3").kind is Kind.NOT_A_CHECKPOINT
    # a directory that is no item
    _item(tmp_path / "4" / "default")
    (tmp_path / "4" / "photos").mkdir()
    assert detect(tmp_path / "4").kind is Kind.NOT_A_CHECKPOINT
    # a JSON file of another name
    _file(tmp_path / "5" / "notes", "notes.txt")
    assert detect(tmp_path / "5").kind is Kind.NOT_A_CHECKPOINT
    # only unfinished saves
    _item(tmp_path / "6" / "default.orbax-checkpoint-tmp-1")
    assert detect(tmp_path / "6").kind is Kind.NOT_A_CHECKPOINT


def test_a_bare_step_with_its_items_among_unfinished_saves(tmp_path):
    """An unfinished save inside is skipped, not the end of the look: whatever order the
    names are listed in (each directory's names differ, so the orders do too)."""
    for n in range(16):
        step = tmp_path / f"{n}"
        for t in range(6):
            (step / f"t{n}x{t}.orbax-checkpoint-tmp-{t}").mkdir(parents=True)
        _item(step / f"item{n}")
        (step / f"z{n}").mkdir()  # no item: this is no step
        assert detect(step).kind is Kind.NOT_A_CHECKPOINT, n
        (step / f"z{n}").rmdir()
        assert detect(step).kind is Kind.STEP, n


def test_a_pytree_item_is_read_with_its_zarr_version(tmp_path):
    """A bare step's items are typed without reading `_METADATA`; the items themselves say
    their zarr version."""
    step = tmp_path / "3"
    item = step / "default"
    item.mkdir(parents=True)
    (item / "_METADATA").write_text('{"tree_metadata": {}, "use_zarr3": true}')
    (item / "manifest.ocdbt").write_text("")
    got = detect(step)
    assert got.kind is Kind.STEP
    fmt = got.checkpointables["default"].item
    assert fmt == ItemFormat(Storage.OCDBT, 3, True, False, (), True)


# ---------------------------------------------------------------------------------------------
# Manager roots


def _step(path: Path, *, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    _own(path, {"default": PYTREE})
    _item(path / "default")
    if commit:
        (path / "commit_success.txt").write_text(COMMIT)
    return path


def test_a_manager_root_on_a_local_disk(tmp_path):
    root = tmp_path / "root"
    _step(root / "run_1")
    _step(root / "run_2", commit=False)  # a rename committed it: the marker is a warning
    _step(root / "run_3.orbax-checkpoint-tmp-7", commit=False)
    # listed before the steps: an empty directory (removed meanwhile, or never written), one
    # that is no step, and an unfinished save
    (root / "run_0").mkdir()
    (root / "run_00" / "photos").mkdir(parents=True)
    _step(root / "run_000.orbax-checkpoint-tmp-1", commit=False)
    _item(root / "metadata")  # the root's metadata, never a step
    (root / "notes").mkdir()
    want = ManagerRootLayout(
        str(root),
        Kind.MANAGER_ROOT,
        "checkpoint-manager root with 2 committed step(s) and 2 unfinished",
        steps=(
            Step(0, "run_000.orbax-checkpoint-tmp-1", committed=False, has_commit_file=False),
            Step(1, "run_1", committed=True, has_commit_file=True),
            Step(2, "run_2", committed=True, has_commit_file=False),
            Step(3, "run_3.orbax-checkpoint-tmp-7", committed=False, has_commit_file=False),
        ),
        step_prefix="run",
        temporaries=("run_000.orbax-checkpoint-tmp-1", "run_3.orbax-checkpoint-tmp-7"),
        location=None,
    )
    _detected(root, want)
    assert scan_steps(root) == want.steps
    assert scan_steps(str(root), context=None) == want.steps


def test_a_manager_root_with_several_prefixes_and_one_step_twice(tmp_path):
    root = tmp_path / "root"
    _step(root / "2")
    _step(root / "002")
    _step(root / "run_3")
    want = ManagerRootLayout(
        str(root),
        Kind.MANAGER_ROOT,
        "checkpoint-manager root with 3 committed step(s)",
        steps=(
            Step(2, "002", committed=True, has_commit_file=True),
            Step(2, "2", committed=True, has_commit_file=True),
            Step(3, "run_3", committed=True, has_commit_file=True),
        ),
        problems=(
            Problem("LAYOUT-004", "step directories use several prefixes: ['None', 'run']"),
            Problem("LAYOUT-007", "step 2 has several directories: ['002', '2']"),
        ),
        location=None,
    )
    _detected(root, want)


def test_a_manager_root_of_only_its_metadata(tmp_path):
    root = tmp_path / "root"
    (root / "metadata").mkdir(parents=True)
    want = ManagerRootLayout(
        str(root),
        Kind.MANAGER_ROOT,
        "checkpoint-manager root with 0 committed step(s)",
        steps=(),
        location=None,
    )
    _detected(root, want)


class _ObjectStore(MemoryStore):
    """A memory store with an object store's capability: no atomic rename, so a step is
    committed only once it holds `commit_success.txt`."""

    capabilities = dataclasses.replace(MemoryStore.capabilities, atomic_rename=False)


def test_a_manager_root_on_a_store_without_rename(tmp_path):
    root = _ObjectStore(display="mem://root")
    for name, commit in (("1", True), ("2", False), ("3", True), ("4", False)):
        root.set(f"{name}/_CHECKPOINT_METADATA", json.dumps({"item_handlers": {}}).encode())
        root.set(f"{name}/default/_METADATA", b'{"tree_metadata": {}}')
        if commit:
            root.set(f"{name}/commit_success.txt", COMMIT.encode())
    root.set("5.orbax-checkpoint-tmp/default/_METADATA", b'{"tree_metadata": {}}')
    want = ManagerRootLayout(
        "mem://root",
        Kind.MANAGER_ROOT,
        "checkpoint-manager root with 2 committed step(s), 2 without commit_success.txt and 1 "
        "unfinished",
        steps=(
            Step(1, "1", committed=True, has_commit_file=True),
            Step(2, "2", committed=False, has_commit_file=False),
            Step(3, "3", committed=True, has_commit_file=True),
            Step(4, "4", committed=False, has_commit_file=False),
            Step(5, "5.orbax-checkpoint-tmp", committed=False, has_commit_file=False),
        ),
        step_prefix=None,
        temporaries=("5.orbax-checkpoint-tmp",),
        location=None,
    )
    got = detect(root)
    assert got == want
    assert got.latest_step == want.steps[2]
    assert got.committed_steps() == [want.steps[0], want.steps[2]]


def test_steps_are_what_looks_like_a_step(tmp_path):
    """A step holds step metadata, a v1 marker, is itself an item, or holds one; a step's
    items are typed without `_METADATA` being read (a broken one is the item's problem)."""
    root = tmp_path / "root"
    (root / "1").mkdir(parents=True)
    (root / "1" / "_CHECKPOINT_METADATA").write_text("{}")
    (root / "2").mkdir()
    (root / "2" / "orbax.checkpoint").write_text("")
    (root / "3").mkdir()
    (root / "3" / "_METADATA").write_text("{broken")
    _file(root / "4" / "metrics", "metrics")
    (root / "5" / "x.orbax-checkpoint-tmp").mkdir(parents=True)
    (root / "5" / "x.orbax-checkpoint-tmp" / "_METADATA").write_text("{}")
    (root / "6" / "photos").mkdir(parents=True)
    (root / "7" / "a").mkdir(parents=True)
    (root / "7" / "b" / "_METADATA").parent.mkdir()
    (root / "7" / "b" / "_METADATA").write_text("{broken")
    assert [s.step for s in scan_steps(root)] == [1, 2, 3, 4, 7]


def test_times_of_a_step_are_integers_only(tmp_path):
    step = tmp_path / "3"
    step.mkdir()
    _own(step, {}, init_timestamp_nsecs=1.5, commit_timestamp_nsecs="9")
    got = detect(step)
    assert (got.init_time_ns, got.commit_time_ns) == (None, None)
    _own(step, {}, init_timestamp_nsecs=12)
    got = detect(step)
    assert (got.init_time_ns, got.commit_time_ns) == (12, None)
    _own(step, {}, commit_timestamp_nsecs=13)
    got = detect(step)
    assert (got.init_time_ns, got.commit_time_ns) == (None, 13)


# ---------------------------------------------------------------------------------------------
# What detection cannot read: never raised, said


def test_what_is_missing_or_no_directory(tmp_path):
    missing = tmp_path / "missing"
    gone = "cannot stat: no such file or directory"
    assert detect(missing) == plain(missing, Kind.NOT_A_CHECKPOINT, gone, exists=False)
    assert detect(MemoryStore(display="mem://run")) == Layout(
        "mem://run", Kind.NOT_A_CHECKPOINT, gone, exists=False
    )
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # PATH-005 where the directory is
    (tmp_path / "empty").mkdir()
    for name, reason in (
        ("file", "not a directory"),
        ("loop", "not a directory"),
        ("empty", NOTHING),
    ):
        _detected(tmp_path / name, plain(tmp_path / name, Kind.NOT_A_CHECKPOINT, reason))
    assert detect(f"{tmp_path}/a\0b") == Layout(
        f"{tmp_path}/a\0b", Kind.NOT_A_CHECKPOINT, "cannot read directory: embedded null byte"
    )


class _Recording(MemoryStore):
    """A memory store that records the listings and the document reads of its directory and
    of its children (on an object store, each is a request)."""

    def __init__(self, prefix: str = "", *, log: list | None = None, **kw) -> None:
        super().__init__(prefix, **kw)
        self.log = log if log is not None else []

    def child(self, name: str) -> _Recording:
        c = super().child(name)
        return _Recording(c.prefix, display=c.display, values=c._values, log=self.log)

    def list_dir(self, name: str = ""):
        self.log.append(("list", self.prefix + name))
        return super().list_dir(name)

    def get(self, key: str, **kw):
        self.log.append(("get", self.prefix + key))
        return super().get(key, **kw)


def _store(display: str, files: dict[str, bytes]) -> _Recording:
    store = _Recording(display=display)
    for key, value in files.items():
        store.set(key, value)
    return store


def test_the_directory_given_is_listed_and_its_documents_read_once():
    meta = b'{"tree_metadata": {}}'
    item = _store("mem://item", {"_METADATA": meta})
    assert detect(item) == PytreeItemLayout(
        "mem://item", Kind.PYTREE_ITEM, EMPTY_REASON, item=EMPTY, location=None
    )
    assert item.log == [("list", ""), ("get", "_METADATA")]
    inline = _store("mem://inline", {"checkpoint": b""})
    assert detect(inline).item == ItemFormat(Storage.INLINE, None, False, True)
    assert inline.log == [("list", "")]  # no _METADATA to read


def test_steps_are_found_without_reading_their_items_documents():
    """Listing a manager root's steps reads no `_METADATA`; detecting a step reads each
    document once (a bare step's items are typed first without it)."""
    meta = b'{"tree_metadata": {}}'
    root = _store(
        "mem://run",
        {"1/default/_METADATA": meta, "2/metrics/metrics": b"{}", "3/_METADATA": meta},
    )
    assert [s.step for s in detect(root).steps] == [1, 2, 3]
    assert [key for op, key in root.log if op == "get"] == []
    steps = _store(
        "mem://run",
        {
            "5/default/_METADATA": meta,
            "5/metrics/metrics": b"{}",
            "8/_CHECKPOINT_METADATA": b'{"item_handlers": {"default": "x.PyTreeHandler"}}',
            "8/default/_METADATA": meta,
        },
    )
    assert detect(steps.child("5")).kind is Kind.STEP
    assert detect(steps.child("8")).kind is Kind.STEP
    reads = [key for op, key in steps.log if op == "get"]
    assert reads == ["5/default/_METADATA", "8/_CHECKPOINT_METADATA", "8/default/_METADATA"]


# ---------------------------------------------------------------------------------------------
# How a pytree item stores its arrays


def _tree(path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def _format(path: Path, reason: str, fmt: ItemFormat, **kw) -> None:
    want = PytreeItemLayout(
        str(path), Kind.PYTREE_ITEM, f"pytree item: {reason}", item=fmt, location=None, **kw
    )
    _detected(path, want)


META = '{"tree_metadata": {}}'
ZARR3 = '{"tree_metadata": {}, "use_zarr3": true}'
ZARR2 = '{"tree_metadata": {}, "use_zarr3": false}'


def test_item_formats(tmp_path):
    _format(
        _tree(tmp_path / "ocdbt", {"_METADATA": ZARR3, "manifest.ocdbt": "", "d/x": ""}),
        "OCDBT database; _METADATA",
        ItemFormat(Storage.OCDBT, 3, True, False, (), True),
    )
    _format(
        _tree(
            tmp_path / "processes",
            {
                "_METADATA": ZARR2,
                "ocdbt.process_10/manifest.ocdbt": "",
                "ocdbt.process_2/manifest.ocdbt": "",
            },
        ),
        "OCDBT database (per-process databases only, no merged root manifest); _METADATA",
        ItemFormat(Storage.OCDBT, 2, True, False, (2, 10), False),
    )
    _format(
        _tree(tmp_path / "bare_processes", {"ocdbt.process_0/manifest.ocdbt": ""}),
        "OCDBT database (per-process databases only, no merged root manifest); no _METADATA",
        ItemFormat(Storage.OCDBT, None, False, False, (0,), False),
    )
    _format(
        _tree(tmp_path / "manifest", {"manifest.ocdbt": "", "x/.zarray": "{}"}),
        "OCDBT database; no _METADATA",  # not per-leaf: x/ is not looked into
        ItemFormat(Storage.OCDBT, None, False, False, (), True),
    )
    _format(
        _tree(tmp_path / "zarr2", {"a/.zarray": "{}", "b/zarr.json": "{}"}),
        "per-leaf zarr directories; no _METADATA",
        ItemFormat(Storage.PER_LEAF_ZARR, 2, False, False),
    )
    _format(
        _tree(tmp_path / "zarr3", {"_METADATA": META, "p/q/r/zarr.json": "{}"}),
        "per-leaf zarr directories; _METADATA",
        ItemFormat(Storage.PER_LEAF_ZARR, 3, True, False),
    )
    _format(
        _tree(tmp_path / "inline", {"checkpoint": ""}),
        "values inline in the msgpack checkpoint file; no _METADATA, legacy msgpack checkpoint "
        "file",
        ItemFormat(Storage.INLINE, None, False, True),
    )
    _format(
        _tree(tmp_path / "both", {"checkpoint": "", "_METADATA": ZARR3}),
        "values inline in the msgpack checkpoint file; _METADATA, legacy msgpack checkpoint file",
        ItemFormat(Storage.INLINE, 3, True, True),
    )


def test_per_leaf_arrays_are_searched_where_leaves_keep_them(tmp_path):
    """Not in the OCDBT data or array metadata directories, an unfinished save or an item of
    its own; at most 64 directories a level and 8 levels deep."""
    none = ItemFormat(Storage.NONE, None, True, False)
    _format(
        _tree(
            tmp_path / "skipped",
            {
                "_METADATA": META,
                "array_metadatas/.zarray": "{}",
                "d/zarr.json": "{}",
                "a.orbax-checkpoint-tmp/.zarray": "{}",
                "a/_METADATA": "{}",
                "a/x/.zarray": "{}",
            },
        ),
        "no array storage; _METADATA",
        none,
    )
    files = {
        "_METADATA": META,
        "array_metadatas/x": "",
        "a.orbax-checkpoint-tmp/.zarray": "{}",
        "a/_METADATA": "{}",
        "a/x/.zarray": "{}",
        "b/zarr.json": "{}",
    }
    _format(
        _tree(tmp_path / "after", files),
        "per-leaf zarr directories; _METADATA",
        ItemFormat(Storage.PER_LEAF_ZARR, 3, True, False),
    )
    # 8 levels deep is found, 9 is not
    eight = "/".join("klmnopqr")  # (not "d": the OCDBT data directory)
    _format(
        _tree(tmp_path / "eight", {"_METADATA": META, f"{eight}/.zarray": "{}"}),
        "per-leaf zarr directories; _METADATA",
        ItemFormat(Storage.PER_LEAF_ZARR, 2, True, False),
    )
    _format(
        _tree(tmp_path / "nine", {"_METADATA": META, f"{eight}/i/.zarray": "{}"}),
        "no array storage; _METADATA",
        none,
    )
    # the 64th directory of a level is looked into, the 65th is not
    for count, found in ((63, True), (64, False)):
        item = _tree(tmp_path / f"wide{count}", {"_METADATA": META, "z/.zarray": "{}"})
        for i in range(count):
            (item / f"e{i:03d}").mkdir()
        if found:
            _format(
                item,
                "per-leaf zarr directories; _METADATA",
                ItemFormat(Storage.PER_LEAF_ZARR, 2, True, False),
            )
        else:
            _format(item, "no array storage; _METADATA", none)


def test_a_zarr_array_alone_is_no_pytree_item(tmp_path):
    array = _tree(tmp_path / "array", {".zarray": "{}", "0.0": ""})
    _detected(array, plain(array, Kind.NOT_A_CHECKPOINT, NOTHING))


def test_metadata_too_large_to_peek_at_is_left_to_the_reader(tmp_path, monkeypatch):
    from ockpt import layout as layout_module

    item = _tree(tmp_path / "item", {"_METADATA": ZARR3 + " " * 100})
    _format(item, "no array storage; _METADATA", ItemFormat(Storage.NONE, 3, True, False))
    monkeypatch.setattr(layout_module, "_MAX_PEEK_BYTES", 100)
    _format(item, "no array storage; _METADATA", ItemFormat(Storage.NONE, None, True, False))


def test_documents_that_fail_to_parse_are_problems(tmp_path):
    import os

    broken = _tree(tmp_path / "broken", {"_METADATA": "{oops"})
    _format(
        broken,
        "no array storage; _METADATA",
        ItemFormat(Storage.NONE, None, True, False),
        problems=(
            Problem(
                "JSON-001",
                "malformed JSON: Expecting property name enclosed in double quotes: line 1 "
                "column 2 (char 1)",
            ),
        ),
    )
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "_METADATA")
    _format(
        fifo,
        "no array storage; _METADATA",
        ItemFormat(Storage.NONE, None, True, False),
        problems=(Problem("PATH-005", "a FIFO stands where a regular file must be"),),
    )
    step = _tree(tmp_path / "step", {"_CHECKPOINT_METADATA": '{"item_handlers": 5}'})
    _detected(
        step,
        container(
            step,
            Kind.STEP,
            "checkpoint-manager step with 0 item(s): none",
            {},
            problems=(Problem("CKPT-001", "wrong type"),),
        ),
    )
    # an item's own problems come first, then those of its _CHECKPOINT_METADATA
    both = _tree(tmp_path / "both", {"_METADATA": "{oops", "_CHECKPOINT_METADATA": "[]"})
    got = detect(both)
    assert [p.rule for p in got.problems] == ["JSON-001", "CKPT-001"]


def test_a_step_whose_items_are_among_unfinished_saves_is_a_step(tmp_path):
    """An unfinished save inside a step candidate is skipped, not the end of the look,
    whatever order the names are listed in (each directory's names differ)."""
    root = tmp_path / "root"
    for n in range(16):
        for t in range(6):
            (root / f"{n}" / f"t{n}x{t}.orbax-checkpoint-tmp-{t}").mkdir(parents=True)
        _item(root / f"{n}" / f"item{n}")
    assert [s.step for s in scan_steps(root)] == list(range(16))


def test_a_v1_checkpoint(tmp_path):
    v1 = _v1(tmp_path / "v1")
    _item(v1 / "state")
    _file(v1 / "extra", "data.json")
    (v1 / "commit_success.txt").write_text(COMMIT)
    want = container(
        v1,
        Kind.V1_CHECKPOINT,
        "v1 checkpoint with 2 item(s): extra, state",
        {
            "extra": plain(v1 / "extra", Kind.JSON_ITEM, "holds the JSON file 'data.json'"),
            "state": pytree(v1 / "state"),
        },
        has_commit_file=True,
    )
    _detected(v1, want)
    empty = _v1(tmp_path / "empty")
    _detected(empty, container(empty, Kind.V1_CHECKPOINT, "v1 checkpoint with 0 item(s): none", {}))


def test_a_step_read_through_its_root_is_the_step_given_directly(tmp_path):
    """As deep as given directly: a v1 checkpoint in a step, holding one that holds one."""
    from ockpt.layout import resolve

    root = tmp_path / "root"
    step = root / "1"
    step.mkdir(parents=True)
    _own(step, {"a": "x.CompositeHandler"})
    (step / "commit_success.txt").write_text(COMMIT)
    _item(_v1(_v1(step / "a") / "b") / "c")
    got = resolve(root, what="checkpoint").target
    assert got == detect(step)
    assert got.checkpointables["a"].checkpointables["b"].checkpointables["c"] == pytree(
        step / "a" / "b" / "c"
    )
