"""ockpt.SaveOptions: the storage options of every save, validated once; the keyword and the
options-object forms of the save functions and of CheckpointManager write the same checkpoint."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from pathlib import Path

import numpy as np
import pytest

ts = pytest.importorskip("tensorstore")

import ockpt  # noqa: E402
from ockpt import SaveOptions  # noqa: E402
from ockpt.manager import CheckpointManager  # noqa: E402
from ockpt.names import CHECKPOINT_METADATA_FILE, COMMIT_FILE, MANIFEST_FILE  # noqa: E402
from ockpt.writer import JsonItem, save_checkpointables, save_pytree, save_pytree_async  # noqa: E402

TREE = {
    "w": np.arange(24, dtype=np.float32).reshape(4, 6),
    "nested": {"i": np.arange(10, dtype=np.int32), "s": "text", "n": 7},
    "z": np.zeros(100, dtype=np.float64),
}

#: keyword form -> the same options as a SaveOptions (layout and the rest stay keywords).
CASES = [
    {},
    {"zarr_version": 2, "compression_level": 3},
    {"use_ocdbt": False, "zarr_version": 3, "compression": None},
    {"compression": "auto", "chunk_byte_size": 64},
    {"storage_dtypes": {"w": np.float16}, "compression_level": 5},
]


def _contents(root: Path) -> dict[str, object]:
    """What a checkpoint stores, comparable across two saves: every file's bytes, except the
    timestamps of `_CHECKPOINT_METADATA`, the path in `commit_success.txt`, and OCDBT
    databases (their data files have random names), which are compared key by key."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if MANIFEST_FILE in filenames:
            kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{dirpath}/"}).result()
            for key in kv.list().result():
                out[f"{rel}/ocdbt:{key.decode()}"] = kv.read(key).result().value
            dirnames[:] = [d for d in dirnames if d != "d" and not d.startswith("ocdbt.process_")]
            filenames = [f for f in filenames if f != MANIFEST_FILE]
        for name in filenames:
            data = (Path(dirpath) / name).read_bytes()
            if name == CHECKPOINT_METADATA_FILE:
                doc = json.loads(data)
                doc.pop("init_timestamp_nsecs")
                doc.pop("commit_timestamp_nsecs")
                out[f"{rel}/{name}"] = doc
            elif name != COMMIT_FILE:
                out[f"{rel}/{name}"] = data
    return out


# ---------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"zarr_version": 4}, "zarr_version must be 2 or 3"),
        ({"compression": "gzip"}, "compression must be 'zstd', 'auto' or None"),
        ({"compression": None, "compression_level": 3}, "compression_level needs compression"),
        ({"compression_level": 2.5}, "compression_level must be an int"),
        ({"compression_level": True}, "compression_level must be an int"),
        ({"compression_level": 23}, "zstd level must be in -131072..22"),
        ({"compression_level": -131073}, "zstd level must be in -131072..22"),
        ({"chunk_byte_size": 0}, "chunk_byte_size must be a positive int"),
        ({"chunk_byte_size": -5}, "chunk_byte_size must be a positive int"),
        ({"chunk_byte_size": 1.5}, "chunk_byte_size must be a positive int"),
        ({"chunk_byte_size": True}, "chunk_byte_size must be a positive int"),
        ({"storage_dtypes": "float16"}, "storage_dtypes must be a mapping"),
    ],
)
def test_bad_options_refused_when_built(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        SaveOptions(**kw)
    with pytest.raises(ValueError, match=message):  # the keyword form: the same check
        save_pytree(tmp_path / "c", {"a": 1}, **kw)
    assert os.listdir(tmp_path) == []


def test_defaults_and_frozen():
    opts = SaveOptions()
    assert (opts.use_ocdbt, opts.zarr_version, opts.compression) == (True, None, "zstd")
    assert (opts.compression_level, opts.chunk_byte_size, opts.storage_dtypes) == (None,) * 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.use_ocdbt = False  # type: ignore[misc]
    dtypes = {"w": "float16"}
    held = SaveOptions(storage_dtypes=dtypes)
    dtypes["w"] = "int8"  # the options keep their own read-only copy
    assert dict(held.storage_dtypes) == {"w": "float16"}
    with pytest.raises(TypeError):
        held.storage_dtypes["w"] = "int8"  # type: ignore[index]
    assert dataclasses.replace(opts, zarr_version=2).zarr_version == 2
    with pytest.raises(ValueError, match="zarr_version"):
        dataclasses.replace(opts, zarr_version=5)


def test_bad_layout_still_refused(tmp_path):
    with pytest.raises(ValueError, match="layout must be 'v1' or 'item'"):
        save_pytree(tmp_path / "c", {"a": 1}, layout="v2", options=SaveOptions())  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Keyword form == options form


@pytest.mark.parametrize("layout", ["v1", "item"])
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(kw) or "defaults")
def test_keyword_and_options_forms_write_the_same(tmp_path, layout, kw):
    save_pytree(tmp_path / "kw", TREE, layout=layout, custom_metadata={"r": 1}, **kw)
    save_pytree(
        tmp_path / "obj", TREE, layout=layout, custom_metadata={"r": 1}, options=SaveOptions(**kw)
    )
    # a keyword that agrees with the options object is no conflict
    opts = SaveOptions(**kw)
    save_pytree(
        tmp_path / "both", TREE, layout=layout, custom_metadata={"r": 1}, options=opts, **kw
    )
    want = _contents(tmp_path / "kw")
    assert any(k.endswith("_METADATA") for k in want)
    assert _contents(tmp_path / "obj") == want
    assert _contents(tmp_path / "both") == want
    np.testing.assert_array_equal(ockpt.load_pytree(tmp_path / "obj")["nested"]["i"], np.arange(10))


def test_options_change_what_is_written(tmp_path):
    """The comparison above is not vacuous: other options write other bytes."""
    save_pytree(tmp_path / "a", TREE, options=SaveOptions(zarr_version=2))
    save_pytree(tmp_path / "b", TREE, options=SaveOptions(zarr_version=3))
    assert _contents(tmp_path / "a") != _contents(tmp_path / "b")


def test_save_checkpointables_options(tmp_path):
    items = {"state": TREE, "extra": JsonItem({"k": [1, 2]})}
    save_checkpointables(
        tmp_path / "obj", items, options=SaveOptions(use_ocdbt=False, compression_level=7)
    )
    save_pytree(tmp_path / "one", TREE, use_ocdbt=False, compression_level=7)
    got, want = _contents(tmp_path / "obj"), _contents(tmp_path / "one")
    assert [k for k in want if k.startswith("state/w/")]  # per-leaf: the options reached it
    assert {k: v for k, v in got.items() if k.startswith("state/")} == {
        k: v for k, v in want.items() if k.startswith("state/")
    }
    with pytest.raises(TypeError):  # one spelling: options= (shortcuts: save_pytree only)
        save_checkpointables(tmp_path / "kw", items, use_ocdbt=False)  # type: ignore[call-arg]


def test_async_options(tmp_path):
    opts = SaveOptions(zarr_version=2, compression="auto", storage_dtypes={"w": np.float16})
    save_pytree_async(tmp_path / "obj", TREE, layout="item", options=opts).result(timeout=60)
    save_pytree(tmp_path / "sync", TREE, layout="item", options=opts)
    assert _contents(tmp_path / "obj") == _contents(tmp_path / "sync")
    assert ockpt.load_pytree(tmp_path / "obj")["w"].dtype == np.float16
    with pytest.raises(ValueError, match="zarr_version"):
        save_pytree_async(tmp_path / "bad", TREE, options=SaveOptions(zarr_version=1))
    with pytest.raises(TypeError):
        save_pytree_async(tmp_path / "bad", TREE, zarr_version=2)  # type: ignore[call-arg]
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------
# Conflicts and wrong types


def test_conflicting_keyword_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"zarr_version=2 \(options has 3\)"):
        save_pytree(tmp_path / "c", TREE, options=SaveOptions(zarr_version=3), zarr_version=2)
    # a keyword at its default value still contradicts an options object that says otherwise
    with pytest.raises(ValueError, match="compression='zstd'"):
        save_pytree(tmp_path / "c", TREE, options=SaveOptions(compression=None), compression="zstd")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "save",
    [
        lambda p, **kw: save_pytree(p, TREE, **kw),
        lambda p, **kw: save_checkpointables(p, {"state": TREE}, **kw),
        lambda p, **kw: save_pytree_async(p, TREE, **kw).result(timeout=60),
        lambda p, **kw: CheckpointManager(p, **kw),
    ],
    ids=["save_pytree", "save_checkpointables", "save_pytree_async", "CheckpointManager"],
)
def test_options_must_be_save_options(tmp_path, save):
    with pytest.raises(TypeError, match="SaveOptions"):
        save(tmp_path / "c", options={"zarr_version": 2})
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# CheckpointManager


def test_manager_with_save_options(tmp_path):
    opts = SaveOptions(use_ocdbt=False, zarr_version=3, compression_level=4)
    mngr = CheckpointManager(tmp_path / "obj", options=opts)
    assert mngr.save(1, TREE)
    step = _contents(tmp_path / "obj" / "1")
    assert not any("ocdbt:" in k for k in step)  # use_ocdbt=False reached the save
    zarr = step["default/w/zarr.json"]  # zarr v3, not a step's default v2
    assert b'"name":"zstd"' in zarr and b'"level":4' in zarr  # type: ignore[operator]
    np.testing.assert_array_equal(mngr.restore(1)["w"], TREE["w"])


# ---------------------------------------------------------------------------------------------
# Signatures


@pytest.mark.parametrize(
    "fn", [save_pytree, save_checkpointables, save_pytree_async, CheckpointManager.__init__]
)
def test_public_signatures_are_explicit(fn):
    """One spelling of the options: `options=` everywhere, keyword-only; the fields of
    `SaveOptions` as shortcuts on `save_pytree` alone."""
    params = inspect.signature(fn).parameters
    assert all(p.kind is not p.VAR_KEYWORD for p in params.values())
    assert params["options"].kind is params["options"].KEYWORD_ONLY
    fields = {f.name for f in dataclasses.fields(SaveOptions)}
    if fn is save_pytree:
        assert fields <= set(params)
        assert all(params[name].kind is params[name].KEYWORD_ONLY for name in fields)
    else:
        assert not fields & set(params)


def test_exported():
    assert ockpt.SaveOptions is SaveOptions and "SaveOptions" in ockpt.__all__
