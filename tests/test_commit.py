"""Overwrite and recovery in `ockpt.store.commit`: the atomic exchange (renameat2) and its fallback,
putting back a checkpoint that an interrupted overwrite left under ``-replaced`` (DIR-006,
DIR-007), and what readers and the manager do with such a name (LAYOUT-006).

The SIGKILL tests of tests/test_crash.py kill real overwrites at every event; these tests
check each piece alone, in process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import time
import warnings

import numpy as np
import pytest

import ockpt
from ockpt.layout import Kind
from ockpt.names import COMMIT_FILE, DELETED_SUFFIX, OWN_TMP_NAME, REPLACED_SUFFIX
from ockpt.store import commit
from ockpt.store.inflight import BackgroundWriter

OLD = {"a": np.arange(6, dtype=np.int32), "s": "old"}
NEW = {"a": np.arange(6, dtype=np.int32) * 10, "s": "new"}


def load(path):  # type: ignore[no-untyped-def]
    return ockpt.load_pytree(path, backend="python")


def same(got, want) -> bool:  # type: ignore[no-untyped-def]
    return got["s"] == want["s"] and np.asarray(got["a"]).tobytes() == want["a"].tobytes()


@pytest.fixture
def no_exchange(monkeypatch):
    """renameat2 unavailable (another OS, an old kernel or libc, a file system without it)."""
    monkeypatch.setattr(commit, "_renameat2", lambda src, dst, flags: False)


def interrupted(path) -> None:  # type: ignore[no-untyped-def]
    """The state a SIGKILL between the two renames of the fallback leaves: the old checkpoint
    under ``-replaced``, the new one complete (with its marker) under the temporary name."""
    ockpt.save_pytree(path, OLD)
    ockpt.save_pytree(str(path) + "-new", NEW)
    os.rename(path, commit.replaced_name(str(path)))
    os.rename(str(path) + "-new", commit.temporary_name(str(path), 1))
    assert COMMIT_FILE in os.listdir(commit.temporary_name(str(path), 1))


# ---------------------------------------------------------------------------------------------
# renameat2


def test_renameat2_exchange_and_noreplace(tmp_path):
    if commit._load_renameat2() is None:
        pytest.skip("renameat2 is not available here")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("from a")
    assert commit._renameat2(str(a), str(b), commit._RENAME_EXCHANGE)
    assert (b / "x").read_text() == "from a" and not (a / "x").exists()
    with pytest.raises(FileExistsError):
        commit._renameat2(str(a), str(b), commit._RENAME_NOREPLACE)
    with pytest.raises(FileNotFoundError):
        commit._renameat2(str(tmp_path / "none"), str(b), commit._RENAME_EXCHANGE)


@pytest.mark.parametrize("err", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
def test_renameat2_unsupported_means_fall_back(monkeypatch, tmp_path, err):
    def fake(*args):  # type: ignore[no-untyped-def]
        ctypes.set_errno(err)
        return -1

    monkeypatch.setattr(commit, "_libc_renameat2", fake)
    assert commit._renameat2(str(tmp_path / "a"), str(tmp_path / "b"), 2) is False


def test_renameat2_other_errors_raise(monkeypatch, tmp_path):
    def fake(*args):  # type: ignore[no-untyped-def]
        ctypes.set_errno(errno.EACCES)
        return -1

    monkeypatch.setattr(commit, "_libc_renameat2", fake)
    with pytest.raises(PermissionError):
        commit._renameat2(str(tmp_path / "a"), str(tmp_path / "b"), 2)


def test_renameat2_absent(monkeypatch):
    monkeypatch.setattr(commit, "_libc_renameat2", False)  # no such symbol in libc
    assert commit._renameat2("a", "b", 2) is False
    monkeypatch.setattr(commit, "_libc_renameat2", None)
    monkeypatch.setattr(sys, "platform", "darwin")  # looked up on Linux only
    assert commit._load_renameat2() is None
    assert commit._renameat2("a", "b", 2) is False


# ---------------------------------------------------------------------------------------------
# Overwrite (DIR-006)


def test_overwrite_exchanges_atomically(tmp_path, monkeypatch):
    """DIR-006: with exchange, the final name is never renamed away: one renameat2 exchange,
    no ``-replaced`` name, and the old checkpoint is removed from the temporary name."""
    if commit._load_renameat2() is None:
        pytest.skip("renameat2 is not available here")
    path = tmp_path / "c"
    ockpt.save_pytree(path, OLD)
    calls = []
    real_rename, real_renameat2 = os.rename, commit._renameat2
    monkeypatch.setattr(os, "rename", lambda a, b: (calls.append(("rename", a)), real_rename(a, b)))
    monkeypatch.setattr(
        commit,
        "_renameat2",
        lambda a, b, f: (calls.append(("renameat2", f)), real_renameat2(a, b, f))[1],
    )
    ockpt.save_pytree(path, NEW, overwrite=True)
    assert calls == [("renameat2", commit._RENAME_EXCHANGE)], calls
    assert same(load(path), NEW)
    assert os.listdir(tmp_path) == ["c"]


def test_overwrite_without_exchange(tmp_path, no_exchange):
    path = tmp_path / "c"
    ockpt.save_pytree(path, OLD)
    ockpt.save_pytree(path, NEW, overwrite=True)
    assert same(load(path), NEW)
    assert os.listdir(tmp_path) == ["c"]


def test_fallback_puts_old_back_when_second_rename_fails(tmp_path, no_exchange, monkeypatch):
    path = tmp_path / "c"
    ockpt.save_pytree(path, OLD)
    real = os.rename

    def rename(src, dst):  # type: ignore[no-untyped-def]
        if OWN_TMP_NAME.fullmatch(os.path.basename(src)) and str(dst).endswith("c"):
            raise OSError(errno.EIO, "I/O error")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="I/O error"):
        ockpt.save_pytree(path, NEW, overwrite=True)
    monkeypatch.undo()
    assert same(load(path), OLD)
    assert os.listdir(tmp_path) == ["c"]


@pytest.mark.parametrize("exchange", [True, False])
def test_overwrite_tidies_leftovers(tmp_path, monkeypatch, exchange):
    """A stale ``-replaced`` next to an existing checkpoint (older than it) and a partly
    removed ``-deleted`` directory are removed by the next overwrite."""
    if not exchange:
        monkeypatch.setattr(commit, "_renameat2", lambda src, dst, flags: False)
    path = tmp_path / "c"
    ockpt.save_pytree(path, OLD)
    ockpt.save_pytree(tmp_path / "x", OLD)
    os.rename(tmp_path / "x", commit.replaced_name(str(path)))
    (tmp_path / ("c" + DELETED_SUFFIX)).mkdir()
    ockpt.save_pytree(path, NEW, overwrite=True)
    assert same(load(path), NEW)
    assert os.listdir(tmp_path) == ["c"]
    (tmp_path / ("c" + DELETED_SUFFIX)).mkdir()
    ockpt.save_pytree(path, OLD, overwrite=True)
    assert os.listdir(tmp_path) == ["c"]


def test_noreplace_commit_never_replaces(tmp_path, monkeypatch):
    """A save without overwrite whose final name appears just before the rename (an empty
    directory replaced silently by rename(2)) is refused instead (DIR-002)."""
    if commit._load_renameat2() is None:
        pytest.skip("renameat2 is not available here")
    path = tmp_path / "c"
    real = commit._renameat2

    def racing(src, dst, flags):  # type: ignore[no-untyped-def]
        os.mkdir(dst)  # another process created it meanwhile
        return real(src, dst, flags)

    monkeypatch.setattr(commit, "_renameat2", racing)
    with pytest.raises(ockpt.WriteConflictError, match="DIR-002"):
        ockpt.save_pytree(path, NEW)
    assert os.listdir(path) == []


# ---------------------------------------------------------------------------------------------
# Recovery (DIR-007) and readers (LAYOUT-006)


def test_recover(tmp_path):
    path = tmp_path / "c"
    parked = commit.replaced_name(str(path))
    assert commit.recover(path) is False  # nothing to do
    interrupted(path)
    assert commit.recover(path) is True
    assert same(load(path), OLD)
    assert not os.path.exists(parked)
    assert commit.recover(path) is False  # the final path exists: never touched
    os.symlink(path, parked)
    os.rename(path, tmp_path / "elsewhere")
    assert commit.recover(path) is False  # a link is not a parked checkpoint


def test_reader_names_the_parked_checkpoint(tmp_path):
    """LAYOUT-006: a missing path whose ``-replaced`` sibling exists: the errors name it, and
    the reader renames nothing."""
    path = tmp_path / "c"
    interrupted(path)
    name = "c" + REPLACED_SUFFIX
    with pytest.raises(ockpt.NotACheckpointError, match=name):
        load(path)
    with pytest.raises(ockpt.NotACheckpointError, match=name):
        ockpt.validate(path)
    layout = ockpt.detect(path)
    assert layout.kind is Kind.NOT_A_CHECKPOINT and name in layout.reason
    assert ockpt.detect(tmp_path / name).kind is Kind.TEMPORARY
    assert not path.exists()
    assert "replaced" not in ockpt.detect(tmp_path / "other").reason


def test_save_without_overwrite_recovers_then_refuses(tmp_path):
    """DIR-007: the old checkpoint is put back first; then it is an existing checkpoint
    (DIR-002); the committed temporary directory of the interrupted save stays temporary."""
    path = tmp_path / "c"
    interrupted(path)
    with pytest.warns(ockpt.OckptWarning, match="DIR-007"):
        with pytest.raises(ockpt.WriteConflictError, match="DIR-002"):
            ockpt.save_pytree(path, NEW)
    assert same(load(path), OLD)
    assert sorted(os.listdir(tmp_path)) == ["c", os.path.basename(commit.temporary_name("c", 1))]


def test_save_with_overwrite_recovers_then_replaces(tmp_path):
    path = tmp_path / "c"
    interrupted(path)
    with pytest.warns(ockpt.OckptWarning, match="DIR-007"):
        ockpt.save_pytree(path, NEW, overwrite=True)
    assert same(load(path), NEW)
    assert os.listdir(tmp_path) == ["c"]


def test_manager_restores_a_parked_step_instead_of_removing_it(tmp_path):
    """DIR-007: remove_temporaries never removes the only copy of a step: a step missing but
    parked under ``-replaced`` is renamed back; a ``-replaced`` next to its step is removed."""
    root = tmp_path / "root"
    mgr = ockpt.CheckpointManager(root)
    for step in (1, 2):
        mgr.save(step, {"a": np.full(3, step)})
    os.rename(root / "1", commit.replaced_name(str(root / "1")))  # step 1 parked, missing
    os.mkdir(commit.temporary_name(str(root / "1"), 1))
    ockpt.save_pytree(tmp_path / "x", {"a": np.zeros(3)})  # step 2 present, stale -replaced
    os.rename(tmp_path / "x", commit.replaced_name(str(root / "2")))
    with pytest.warns(ockpt.OckptWarning, match="DIR-007"):
        mgr = ockpt.CheckpointManager(root)
    assert 1 not in mgr.all_steps()
    found = mgr.temporaries()
    assert len(found) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mgr.remove_temporaries() == found
    assert mgr.temporaries() == []
    assert {1, 2} <= set(mgr.all_steps())
    np.testing.assert_array_equal(mgr.restore(1)["a"], np.full(3, 1))
    np.testing.assert_array_equal(mgr.restore(2)["a"], np.full(3, 2))


def test_manager_save_of_a_parked_step(tmp_path):
    """A manager save of a step whose directory is parked puts it back, then refuses."""
    root = tmp_path / "root"
    mgr = ockpt.CheckpointManager(root)
    mgr.save(1, {"a": np.ones(3)})
    os.rename(root / "1", commit.replaced_name(str(root / "1")))
    with pytest.warns(ockpt.OckptWarning):
        mgr = ockpt.CheckpointManager(root)
    with pytest.warns(ockpt.OckptWarning, match="DIR-007"):
        with pytest.raises(ockpt.WriteConflictError, match="DIR-002"):
            mgr.save(1, {"a": np.zeros(3)})
    np.testing.assert_array_equal(mgr.restore(1)["a"], np.ones(3))


# ---------------------------------------------------------------------------------------------
# Locks (DIR-003, DIR-008)


def test_parent_reached_through_a_link_is_locked(tmp_path):
    """A checkpoint root reached through a symbolic link (`/work/ckpt -> /scratch/ckpt`) is
    locked like its target: saves through the link and saves to the target exclude each
    other, and the save's own directory is locked."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with commit._locked(str(link)):
        assert commit._Lock.take(str(real), wait=False) is None  # held through the link
    pending = commit.begin(link / "c")
    assert pending.lock is not None and pending.lock.held
    assert commit._claim(pending.tmp) is None  # a live save's directory is never claimed
    commit.abort(pending)
    assert os.listdir(real) == []


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    """flock belongs to the open file, which fork shares: a child forked while a save holds a
    lock (a data loader's workers) closes its copy, so the lock is free once the save lets go."""
    lock = commit._Lock.take(str(tmp_path), wait=True)
    ready, tell = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (its fork hooks have run) outlives the lock
        os.write(tell, b"x")
        time.sleep(3)
        os._exit(0)
    try:
        assert os.read(ready, 1) == b"x"
        lock.release()
        again = commit._Lock.take(str(tmp_path), wait=False)
        assert again is not None and again.held
        again.release()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready)
        os.close(tell)


def test_a_deleted_step_never_comes_back_from_a_stale_replaced(tmp_path):
    """A stale ``-replaced`` copy next to a step (an overwrite killed after it committed) goes
    with the step when the step is deleted, so DIR-007 cannot bring the step back."""
    root = tmp_path / "root"
    mgr = ockpt.CheckpointManager(root)
    for step in (1, 2):
        mgr.save(step, {"a": np.full(3, step)})
    ockpt.save_pytree(tmp_path / "x", {"a": np.zeros(3)})
    os.rename(tmp_path / "x", commit.replaced_name(str(root / "1")))
    mgr.delete(1)
    assert mgr.remove_temporaries() == []
    assert mgr.all_steps() == [2]
    assert sorted(os.listdir(root)) == ["2"]


def test_leftover_replaced_is_renamed_before_it_is_removed(tmp_path, monkeypatch):
    """DIR-006: a ``-replaced`` directory next to its checkpoint is removed under another
    name, never in place (a removal killed half way must not leave a partial tree there)."""
    root = tmp_path / "root"
    mgr = ockpt.CheckpointManager(root)
    mgr.save(1, {"a": np.ones(3)})
    ockpt.save_pytree(tmp_path / "x", {"a": np.zeros(3)})
    parked = commit.replaced_name(str(root / "1"))
    os.rename(tmp_path / "x", parked)
    removed = []
    real = commit.remove_path
    monkeypatch.setattr(commit, "remove_path", lambda p: (removed.append(p), real(p)))
    assert mgr.remove_temporaries() == [parked]
    assert parked not in removed and all(
        OWN_TMP_NAME.fullmatch(os.path.basename(p)) for p in removed
    )
    assert sorted(os.listdir(root)) == ["1"]


def test_a_copy_whose_commit_conflicts_leaves_nothing(tmp_path, monkeypatch):
    """`ockpt cp` to a local path: a commit refused (another writer committed there) removes
    the copy's temporary directory and lets go of its lock."""
    from ockpt import transfer

    def conflict(pending):  # type: ignore[no-untyped-def]
        raise ockpt.WriteConflictError("committed meanwhile", rule="DIR-002")

    src = tmp_path / "src"
    ockpt.save_pytree(src, OLD)
    monkeypatch.setattr(commit, "_commit", conflict)
    with pytest.raises(ockpt.WriteConflictError):
        transfer.copy(src, tmp_path / "dst", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_background_writes_fail_the_save(tmp_path, monkeypatch):
    """A write that fails on the writer's own thread (`BackgroundWriter`) fails the
    save with that error, and leaves no directory behind, committed or temporary."""
    import errno

    import numpy as np

    import ockpt

    def full(self, parts):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(commit.NewFile, "append", full)
    tree = {"w": np.arange(300_000, dtype=np.float32)}
    with pytest.raises(OSError):
        ockpt.save_pytree(tmp_path / "c", tree)
    assert list(tmp_path.iterdir()) == []
    writer = BackgroundWriter()
    file = writer.queue(commit.NewFile(str(tmp_path / "f"), sync_on_close=False))
    file.append([b"x" * 10])
    with pytest.raises(OSError, match="No space"):
        writer.finish()
