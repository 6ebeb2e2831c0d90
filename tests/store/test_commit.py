"""Overwrite and recovery in `ockpt.store.commit`: the atomic exchange (renameat2) and its fallback,
putting back a checkpoint that an interrupted overwrite left under ``-replaced`` (DIR-006,
DIR-007), and what readers and the manager do with such a name (LAYOUT-006).

The SIGKILL tests of tests/durability/test_crash.py kill real overwrites at every event; these tests
check each piece alone, in process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings

import numpy as np
import pytest

import ockpt
from ockpt.layout import Kind
from ockpt.names import (
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    DELETED_SUFFIX,
    OWN_TMP_NAME,
    OWN_TMP_SUFFIX,
    REPLACED_SUFFIX,
    TMP_MARKER,
)
from ockpt.store import commit
from ockpt.store.inflight import BackgroundWriter
from tests.support.errors import assert_error, error_fields

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
    with pytest.raises(ockpt.WriteConflictError) as info:
        ockpt.save_pytree(path, NEW)
    assert info.value.rule == "DIR-002"
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
    with pytest.raises(ockpt.NotACheckpointError) as info:
        load(path)
    assert_error(info, rule="LAYOUT-006", file=str(path))
    assert name in info.value.message
    with pytest.raises(ockpt.NotACheckpointError) as info:
        ockpt.validate(path)
    assert_error(info, rule="LAYOUT-006", file=str(path))
    assert name in info.value.message
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
        with pytest.raises(ockpt.WriteConflictError) as info:
            ockpt.save_pytree(path, NEW)
    assert info.value.rule == "DIR-002"
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
        with pytest.raises(ockpt.WriteConflictError) as info:
            mgr.save(1, {"a": np.zeros(3)})
    assert info.value.rule == "DIR-002"
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




TREE = {"a": np.arange(6, dtype=np.int32)}


def _libc_has(name: str) -> bool:
    """Whether this process's C library exports `name` (asked of ctypes, not of ockpt)."""
    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), name)


# ---------------------------------------------------------------------------------------------
# _conflict: the error of a save that lost the race (DIR-002)


@pytest.mark.parametrize("when", ["while writing", "at the rename", "at the fallback rename"])
def test_a_lost_concurrent_save_names_the_rule_and_the_path(tmp_path, monkeypatch, when):
    """Another save commits at the path while this one writes (the commit finds the path
    taken) or just before this one's rename (renameat2 NOREPLACE or rename(2) refuses): the
    error is a WriteConflictError citing DIR-002 and naming the final path."""
    path = tmp_path / "c"
    pending = commit.begin(path)
    if when == "while writing":
        ockpt.save_pytree(path, TREE)
    else:
        ockpt.save_pytree(tmp_path / "other", TREE)
        real = commit._renameat2

        def racing(src, dst, flags):  # type: ignore[no-untyped-def]
            os.rename(tmp_path / "other", dst)  # the other save's commit, just before this one's
            return real(src, dst, flags) if when == "at the rename" else False

        monkeypatch.setattr(commit, "_renameat2", racing)
    with pytest.raises(ockpt.WriteConflictError) as caught:
        commit.finish(pending)
    commit.abort(pending)
    err = caught.value
    assert (err.rule, err.file) == ("DIR-002", str(path))
    assert err.message == "another save committed here while this one was writing"
    assert os.listdir(tmp_path) == ["c"]
    np.testing.assert_array_equal(ockpt.load_pytree(path, backend="python")["a"], TREE["a"])


def test_an_overwrite_that_loses_the_race_keeps_the_winner(tmp_path, monkeypatch):
    """The rename fallback of an overwrite: a writer without locks (Orbax) commits at the path
    between the two renames; the overwrite raises the DIR-002 conflict naming the path, the
    winner's checkpoint stays, and the old one is kept under ``-replaced``."""
    path = tmp_path / "c"
    ockpt.save_pytree(path, TREE)
    ockpt.save_pytree(tmp_path / "other", {"a": TREE["a"] * 2})
    pending = commit.begin(path, overwrite=True)
    monkeypatch.setattr(commit, "_renameat2", lambda src, dst, flags: False)
    real = os.rename

    def rename(src, dst):  # type: ignore[no-untyped-def]
        real(src, dst)
        if str(dst).endswith(REPLACED_SUFFIX):
            real(tmp_path / "other", path)  # the other writer's commit

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(ockpt.WriteConflictError) as caught:
        commit.finish(pending)
    monkeypatch.undo()
    commit.abort(pending)
    assert (caught.value.rule, caught.value.file) == ("DIR-002", str(path))
    assert sorted(os.listdir(tmp_path)) == ["c", "c" + REPLACED_SUFFIX]
    got = ockpt.load_pytree(path, backend="python")["a"]
    np.testing.assert_array_equal(got, TREE["a"] * 2)


# ---------------------------------------------------------------------------------------------
# _libc_function: renameat2 and sync_file_range from the C library


@pytest.mark.skipif(not _libc_has("renameat2"), reason="no renameat2 in this C library")
def test_renameat2_is_found_where_the_c_library_has_it(monkeypatch, tmp_path):
    """Where libc exports renameat2 (glibc 2.28 or later), the commit uses it, and reads the
    errno of its failures: a missing source is FileNotFoundError naming both paths, not a
    fallback. The errno is ctypes' copy, kept only for a function loaded with ``use_errno``
    (`_libc_function` 10, 12, 13 at 88f069a: without it, the copy stays 0 and the error is
    ``OSError(0)``); it is reset first, so that the copy an earlier call left cannot pass."""
    monkeypatch.setattr(commit, "_libc_renameat2", None)  # looked up again, here
    assert commit._load_renameat2() is not None
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert commit._renameat2(str(tmp_path / "a"), str(tmp_path / "b"), commit._RENAME_EXCHANGE)
    ctypes.set_errno(0)  # ctypes' saved errno: a stale ENOENT of an earlier call must not count
    with pytest.raises(FileNotFoundError) as caught:
        commit._renameat2(str(tmp_path / "none"), str(tmp_path / "b"), commit._RENAME_EXCHANGE)
    err = caught.value
    assert (err.errno, err.strerror) == (errno.ENOENT, os.strerror(errno.ENOENT))
    assert (err.filename, err.filename2) == (str(tmp_path / "none"), str(tmp_path / "b"))


@pytest.mark.skipif(not _libc_has("sync_file_range"), reason="no sync_file_range here")
def test_sync_file_range_is_called_with_its_prototype(monkeypatch, tmp_path):
    """The write-back of a closed data file calls sync_file_range, declared with its C
    prototype: an offset past 32 bits reaches it whole (undeclared, ctypes would pass it as a
    C int, cut to -1, which the kernel refuses with EINVAL), and its int result comes back."""
    monkeypatch.setattr(commit, "_libc_sync_file_range", None)  # looked up again, here
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        commit._start_writeback(fd)
        sync_file_range = commit._libc_sync_file_range
        assert sync_file_range
        assert sync_file_range(fd, 0xFFFF_FFFF, 4096, commit._SYNC_FILE_RANGE_WRITE) == 0
    finally:
        os.close(fd)


def test_write_back_asks_for_the_whole_file_and_is_skipped_where_absent(monkeypatch, tmp_path):
    """A data file closed without its own fsync asks the kernel to write back the whole file
    (offset 0, length 0: to its end); where the C library has no sync_file_range, closing it
    does nothing more."""
    calls = []
    monkeypatch.setattr(commit, "_libc_sync_file_range", lambda *args: calls.append(args) or 0)
    file = commit.NewFile(str(tmp_path / "f"), sync_on_close=False)
    file.append([b"x" * 10])
    file.close()
    [(fd, *asked)] = calls
    assert asked == [0, 0, commit._SYNC_FILE_RANGE_WRITE]
    monkeypatch.setattr(commit, "_libc_sync_file_range", None)
    monkeypatch.setattr(commit, "_libc_function", lambda name, argtypes: None)
    file = commit.NewFile(str(tmp_path / "g"), sync_on_close=False)
    file.append([b"y"])
    file.close()
    assert commit._libc_sync_file_range is False
    assert (tmp_path / "g").read_bytes() == b"y"


# ---------------------------------------------------------------------------------------------
# _set_aside_stale: leftovers next to a checkpoint, removed under a name of ockpt's own


def test_a_stale_deleted_goes_even_when_the_stale_replaced_cannot_be_moved(tmp_path, monkeypatch):
    """A ``-replaced`` that cannot be renamed aside is left for a later save; the ``-deleted``
    next to it is still renamed aside and removed."""
    path = tmp_path / "c"
    ockpt.save_pytree(path, TREE)
    os.mkdir(commit.replaced_name(str(path)))
    os.mkdir(str(path) + DELETED_SUFFIX)
    real = os.rename

    def rename(src, dst):  # type: ignore[no-untyped-def]
        if str(src).endswith(REPLACED_SUFFIX):
            raise OSError(errno.EBUSY, "Device or resource busy", src)
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    assert commit.remove_committed(str(path))
    assert os.listdir(tmp_path) == ["c" + REPLACED_SUFFIX]


def test_leftovers_of_a_name_ending_in_a_space_are_its_own(tmp_path):
    """The ``-deleted`` leftover of ``"c "`` is ``"c .orbax-checkpoint-tmp-deleted"``: removed
    with it; that of ``"c"``, another checkpoint's, is left alone."""
    for name in ("c ", "c"):
        os.mkdir(tmp_path / (name + DELETED_SUFFIX))
    ockpt.save_pytree(tmp_path / "c ", TREE)
    assert commit.remove_committed(str(tmp_path / "c "))
    assert os.listdir(tmp_path) == ["c" + DELETED_SUFFIX]


# ---------------------------------------------------------------------------------------------
# remove_committed and the manager's delete (DIR-005, LOAD-055)


def test_removing_a_step_that_is_gone_says_so(tmp_path):
    """`remove_committed` of a step another process removed meanwhile returns False (the
    manager's delete then raises NotACheckpointError, LOAD-055), not True."""
    mgr = ockpt.CheckpointManager(tmp_path / "root")
    mgr.save(1, TREE)
    path = str(tmp_path / "root" / "1")
    assert commit.remove_committed(path) is True
    assert commit.remove_committed(path) is False
    assert os.listdir(tmp_path / "root") == []


# ---------------------------------------------------------------------------------------------
# remove_leftovers (DIR-003, DIR-007)


def _ended(parent, token: int) -> str:  # type: ignore[no-untyped-def]
    """A temporary directory of an ockpt save that has ended (its lock free)."""
    path = commit.temporary_name(str(parent / "c"), token)
    os.mkdir(path)
    return path


def test_a_kept_replaced_does_not_stop_the_other_removals(tmp_path):
    """A ``-replaced`` that is not a directory, with its checkpoint missing, cannot be renamed
    back and is kept; the leftovers after it are still removed."""
    parked = commit.replaced_name(str(tmp_path / "c"))
    with open(parked, "wb") as f:
        f.write(b"not a checkpoint")
    ended = _ended(tmp_path, 1)
    assert commit.remove_leftovers([parked, ended]) == [ended]
    assert os.listdir(tmp_path) == [os.path.basename(parked)]


def test_a_running_save_does_not_stop_the_other_removals(tmp_path):
    """The directory of a save still running is skipped; those of ended saves after it in the
    same parent are removed."""
    running = commit.begin(tmp_path / "c", token=0)
    ended = _ended(tmp_path, 1)
    try:
        assert commit.remove_leftovers([running.tmp, ended]) == [ended]
        assert os.listdir(tmp_path) == [os.path.basename(running.tmp)]
    finally:
        commit.abort(running)


def test_leftovers_of_other_forms_are_removed(tmp_path):
    """An Orbax temporary directory and a ``-deleted`` one (no lock to take) and a file under
    ockpt's own temporary name (a killed `replace_file`) are removed and returned."""
    orbax = tmp_path / "c.orbax-checkpoint-tmp-1700000000000000"
    orbax.mkdir()
    (orbax / "x").write_bytes(b"x")
    deleted = tmp_path / ("d" + DELETED_SUFFIX)
    deleted.mkdir()
    own_file = tmp_path / f"metadata{OWN_TMP_SUFFIX}000000000001"
    own_file.write_bytes(b"{}")
    paths = sorted(str(p) for p in (orbax, deleted, own_file))
    assert commit.remove_leftovers(paths) == paths
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# abort


def test_abort_lets_go_of_the_lock_and_needs_none(tmp_path):
    """`abort` removes the temporary directory and releases this save's lock (its descriptor
    closed); the Pending of a save begun in another process (no lock here) is aborted too."""
    pending = commit.begin(tmp_path / "c")
    assert pending.lock is not None and pending.lock.held
    commit.abort(pending)
    assert not pending.lock.held
    assert os.listdir(tmp_path) == []
    os.mkdir(pending.tmp)
    commit.abort(commit.Pending(pending.final, pending.tmp, overwrite=False))
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# remove_path


def test_remove_path_removes_files_and_links_never_targets(tmp_path):
    """A file, a link to a directory and a dangling link are removed (the link itself, its
    target kept); a tree is removed whole; a missing path is no error."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_bytes(b"x")
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "f").write_bytes(b"x")
    for name in ("file", "link", "dangling", "tree", "none"):
        commit.remove_path(str(tmp_path / name))
    assert os.listdir(tmp_path) == ["target"]
    assert os.listdir(target) == ["kept"]


def test_an_old_checkpoint_that_cannot_be_removed_does_not_fail_the_overwrite(
    tmp_path, monkeypatch
):
    """The overwrite has committed when the old checkpoint is removed: a file of it that
    cannot be removed is left, the save still succeeds, and a later save removes the rest."""
    path = tmp_path / "c"
    ockpt.save_pytree(path, TREE)
    real = os.unlink

    def unlink(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.path.basename(name) == CHECKPOINT_METADATA_FILE:
            raise PermissionError(errno.EACCES, "Permission denied", name)
        real(name, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    ockpt.save_pytree(path, {"a": TREE["a"] * 10}, overwrite=True)
    monkeypatch.undo()
    np.testing.assert_array_equal(ockpt.load_pytree(path, backend="python")["a"], TREE["a"] * 10)
    left = [n for n in os.listdir(tmp_path) if n != "c"]
    assert len(left) == 1 and left[0].startswith("c" + OWN_TMP_SUFFIX)
    assert os.listdir(tmp_path / left[0]) == [CHECKPOINT_METADATA_FILE]
    ockpt.save_pytree(path, TREE, overwrite=True)
    assert os.listdir(tmp_path) == ["c"]


# ---------------------------------------------------------------------------------------------
# temporary_name, replaced_name: the names of a checkpoint's own leftovers (DIR-003, DIR-006)


def test_temporary_names_keep_the_whole_checkpoint_name():
    """A trailing separator is dropped, a trailing space is part of the name: the temporary
    name parses back (OWN_TMP_NAME) to the checkpoint it belongs to."""
    assert commit.temporary_name("/r/c/", 1) == f"/r/c{OWN_TMP_SUFFIX}000000000001"
    assert commit.replaced_name("/r/c/") == "/r/c" + REPLACED_SUFFIX
    assert commit.replaced_name("/r/c ") == "/r/c " + REPLACED_SUFFIX
    tmp = commit.temporary_name("/r/c ", 0xABC)
    assert tmp == f"/r/c {OWN_TMP_SUFFIX}000000000abc"
    assert OWN_TMP_NAME.fullmatch(os.path.basename(tmp))["name"] == "c "


# ---------------------------------------------------------------------------------------------
# final_path (DIR-001)


def test_final_path_takes_local_paths_and_file_urls_only(tmp_path, monkeypatch):
    """A ``file://`` URL is its local path; any other URL is refused (DIR-001) naming it."""
    monkeypatch.chdir(tmp_path)  # where a URL taken for a relative path would be written
    assert commit.final_path(f"file://{tmp_path}/c") == str(tmp_path / "c")
    assert commit.final_path(tmp_path / "c") == str(tmp_path / "c")
    with pytest.raises(ockpt.FormatError) as caught:
        commit.begin("gs://bucket/c")
    err = caught.value
    assert (err.rule, err.file) == ("DIR-001", "gs://bucket/c")
    assert err.message == "the reference writer saves to local directories only"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("path", ["", "file://"])
def test_an_empty_checkpoint_path_is_refused_naming_the_rule(path):
    """An empty path, also one left by ``file://``, is refused (DIR-001), its file the empty
    text it came to. Kills `final_path` 25-34 (message, rule, file; ids at 88f069a)."""
    with pytest.raises(ockpt.FormatError) as caught:
        commit.final_path(path)
    assert error_fields(caught) == {
        "rule": "DIR-001",
        "file": "",
        "message": "empty checkpoint path",
        "pointer": None,
    }


# ---------------------------------------------------------------------------------------------
# check_target (DIR-001, DIR-002)


def test_a_target_named_like_a_leftover_is_refused(tmp_path):
    """A checkpoint name holding the temporary marker is refused before anything is written
    (DIR-001), naming the whole absolute path and the marker. Kills `check_target` 6-13
    (message, rule, file; ids at 88f069a)."""
    path = tmp_path / f"c{TMP_MARKER}-1"
    with pytest.raises(ockpt.FormatError) as caught:
        commit.check_target(path, overwrite=True)
    assert error_fields(caught) == {
        "rule": "DIR-001",
        "file": str(path),
        "message": f"a checkpoint name must not contain {TMP_MARKER!r}",
        "pointer": None,
    }
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "link to a directory"])
def test_a_target_that_is_not_a_real_directory_is_refused_even_to_overwrite(tmp_path, kind):
    """A file, or a link to a directory, at the target is never overwritten: DIR-001, even
    with `overwrite`; a real directory is taken then. Kills `check_target` 15 (``and`` for
    ``or``: a file passed on to the overwrite, a link to a directory taken for one) and 19-28
    (message, rule, file); ids at 88f069a."""
    (tmp_path / "d").mkdir()
    path = tmp_path / "c"
    if kind == "file":
        path.write_bytes(b"x")
    else:
        path.symlink_to(tmp_path / "d")
    with pytest.raises(ockpt.FormatError) as caught:
        commit.check_target(path, overwrite=True)
    err = caught.value
    assert (err.rule, err.file) == ("DIR-001", str(path))
    assert err.message == "the checkpoint path exists and is not a directory"
    assert commit.check_target(tmp_path / "d", overwrite=True) == str(tmp_path / "d")


def test_an_existing_checkpoint_is_kept_without_overwrite(tmp_path):
    """An existing directory at the target is refused without `overwrite` (DIR-002), naming
    the path and the way out. Kills `check_target` 30, 32, 35 (message, file; ids at
    88f069a)."""
    with pytest.raises(ockpt.WriteConflictError) as caught:
        commit.check_target(tmp_path, overwrite=False)
    assert error_fields(caught) == {
        "rule": "DIR-002",
        "file": str(tmp_path),
        "message": "a checkpoint already exists there; pass overwrite=True to replace it",
    }


def test_new_tokens_fit_the_twelve_hex_digits_of_a_temporary_name():
    """A token is 48 bits: its temporary name has exactly 12 hex digits and parses back
    (OWN_TMP_NAME). Kills `new_token` 2 (49 bits: of 64 tokens, all below 2^48 by chance
    once in 2^64); id at 88f069a."""
    tokens = [commit.new_token() for _ in range(64)]
    assert max(tokens) < 2**48
    assert all(OWN_TMP_NAME.fullmatch(commit.temporary_name("c", t)) for t in tokens)


# ---------------------------------------------------------------------------------------------
# _claim, _recover


def test_a_leftover_is_claimed_only_with_its_lock_held(tmp_path, monkeypatch):
    """`_claim` gives the lock of a directory whose lock is free, held; None where another
    holds it, and None where there are no locks (no one can tell if its save still runs).
    Kills `_claim` 8 (the unheld UNLOCKED given as a claim); id at 88f069a."""
    path = str(tmp_path)
    lock = commit._claim(path)
    assert lock is not None and lock.held
    try:
        assert commit._claim(path) is None
    finally:
        lock.release()
    monkeypatch.setattr(commit, "fcntl", None)
    assert commit._Lock.take(path, wait=False) is commit.UNLOCKED
    assert commit._claim(path) is None


@pytest.mark.skipif(commit.fcntl is None, reason="no locks on this system")
def test_a_link_named_like_a_temporary_directory_is_never_claimed(tmp_path):
    """A link that carries the name of an ockpt temporary directory is not one: its lock is
    never taken through it (O_NOFOLLOW), so `remove_leftovers` leaves it, and its target, in
    place. Kills `_Lock.take` 1 (``follow=True`` by default: the target's lock taken and the
    link removed as a leftover); id at 88f069a."""
    (tmp_path / "d").mkdir()
    link = tmp_path / f"c{OWN_TMP_SUFFIX}000000000001"
    link.symlink_to(tmp_path / "d")
    assert commit._claim(str(link)) is None
    assert commit.remove_leftovers([str(link)]) == []
    assert os.path.islink(link) and os.path.isdir(tmp_path / "d")


@pytest.mark.skipif(commit.fcntl is None, reason="no locks on this system")
def test_a_file_is_never_claimed_as_a_directory(tmp_path):
    """Only a directory has a lock to claim (O_DIRECTORY): a file where a leftover directory
    was expected is not claimed. Kills `_Lock.take` 4 (``O_NONBLOCK & O_DIRECTORY``: neither
    flag, the file's lock taken); id at 88f069a."""
    path = tmp_path / f"c{OWN_TMP_SUFFIX}000000000001"
    path.write_bytes(b"x")
    assert commit._claim(str(path)) is None
    assert path.read_bytes() == b"x"


def test_a_save_goes_through_a_parent_that_is_a_link(tmp_path):
    """The parent's lock follows a link (the parent of a checkpoint may be reached through
    one): a save begins and ends under a linked parent. Kills `_Lock.take` 20 (O_NOFOLLOW
    always: ELOOP for the linked parent); id at 88f069a."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    pending = commit.begin(tmp_path / "link" / "c")
    commit.abort(pending)
    assert os.listdir(tmp_path / "real") == []


def test_recover_leaves_a_replaced_alone_when_the_checkpoint_exists(tmp_path, monkeypatch):
    """A ``-replaced`` directory is renamed back only when the checkpoint is missing: an
    existing one, even an empty directory that rename(2) would replace, is kept as it is.
    Kills `_recover` 4 (``and`` for the first ``or``); id at 88f069a."""
    monkeypatch.setattr(commit, "_libc_renameat2", False)  # rename(2), as without renameat2
    final = tmp_path / "c"
    final.mkdir()
    old = tmp_path / ("c" + REPLACED_SUFFIX)
    old.mkdir()
    (old / "f").write_bytes(b"x")
    assert commit._recover(str(final)) is False
    assert os.listdir(final) == [] and os.listdir(old) == ["f"]


def test_recover_renames_back_with_rename_where_renameat2_is_missing(tmp_path, monkeypatch):
    """Without renameat2, a ``-replaced`` directory whose checkpoint is missing is renamed
    back with rename(2), whole. Kills `_recover` 17-20 (the fallback's arguments); ids at
    88f069a."""
    monkeypatch.setattr(commit, "_libc_renameat2", False)
    final = tmp_path / "c"
    old = tmp_path / ("c" + REPLACED_SUFFIX)
    old.mkdir()
    (old / "f").write_bytes(b"x")
    assert commit._recover(str(final)) is True
    assert os.listdir(tmp_path) == ["c"] and (final / "f").read_bytes() == b"x"


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.EIO])
def test_recover_that_loses_a_race_says_so_and_other_errors_go_on(tmp_path, monkeypatch, code):
    """A rename back that fails because another writer recovered the checkpoint or committed
    one meanwhile (ENOENT, EEXIST, ENOTEMPTY) is no recovery (False); any other failure is
    raised. Kills `_recover` 21 (the test inverted), 22 (True); ids at 88f069a."""

    def lose(src, dst, flags):
        raise OSError(code, os.strerror(code), src)

    monkeypatch.setattr(commit, "_renameat2", lose)
    (tmp_path / ("c" + REPLACED_SUFFIX)).mkdir()
    if code == errno.EIO:
        with pytest.raises(OSError) as caught:
            commit._recover(str(tmp_path / "c"))
        assert caught.value.errno == errno.EIO
    else:
        assert commit._recover(str(tmp_path / "c")) is False


# ---------------------------------------------------------------------------------------------
# begin (DIR-001, DIR-003, DIR-007)


def test_begin_uses_the_token_given_and_refuses_a_second_save_with_it(tmp_path):
    """A save begun with a token writes under that token's temporary name; a second save
    with the same token finds the directory taken and is refused (DIR-003), naming it. Kills
    `begin` 13 (the token ignored for a new one), 47-56 (message, rule, file); ids at
    88f069a."""
    final = str(tmp_path / "c")
    pending = commit.begin(final, token=0xABC)
    try:
        assert pending.tmp == commit.temporary_name(final, 0xABC)
        assert os.listdir(tmp_path) == [os.path.basename(pending.tmp)]
        with pytest.raises(ockpt.WriteConflictError) as caught:
            commit.begin(final, token=0xABC)
        assert error_fields(caught) == {
            "rule": "DIR-003",
            "file": pending.tmp,
            "message": "another save uses this temporary directory",
        }
    finally:
        commit.abort(pending)
    assert os.listdir(tmp_path) == []


def test_begin_under_a_file_cannot_create_the_parent(tmp_path):
    """A checkpoint path under a file: its parent directory cannot be created, DIR-001 naming
    the path and the system's reason, its strerror alone. Kills `begin` 22-30 (message,
    ``strerror and e``, rule, file); ids at 88f069a."""
    (tmp_path / "f").write_bytes(b"x")
    final = str(tmp_path / "f" / "d" / "c")
    with pytest.raises(ockpt.FormatError) as caught:
        commit.begin(final)
    reason = os.strerror(errno.ENOTDIR)
    assert error_fields(caught) == {
        "rule": "DIR-001",
        "file": final,
        "message": f"cannot create the parent directory: {reason}",
        "pointer": None,
    }


def test_begin_where_the_temporary_directory_cannot_be_made(tmp_path):
    """A checkpoint name that fits, whose temporary name is too long for the file system: the
    save is refused before anything is written, DIR-001 naming the checkpoint path and the
    system's reason, its strerror alone. Kills `begin` 57-65 (message, ``strerror and e``,
    rule, file); ids at 88f069a."""
    final = str(tmp_path / ("c" * 230))  # its temporary name is over 255 bytes
    with pytest.raises(ockpt.FormatError) as caught:
        commit.begin(final)
    reason = os.strerror(errno.ENAMETOOLONG)
    assert error_fields(caught) == {
        "rule": "DIR-001",
        "file": final,
        "message": f"cannot create the checkpoint directory: {reason}",
        "pointer": None,
    }
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(commit.fcntl is None, reason="no locks on this system")
def test_begin_waits_for_the_lock_of_its_own_temporary_directory(tmp_path, monkeypatch):
    """`begin` waits for the lock of the directory it just made when someone holds it, and
    the save holds it then: it never runs unlocked. Kills `begin` 68, 71 (``wait=None`` /
    ``False``: no lock, ``pending.lock`` None); ids at 88f069a."""
    mkdir = os.mkdir
    final = str(tmp_path / "c")

    def mkdir_and_hold(path, *args, **kwargs):
        mkdir(path, *args, **kwargs)
        if os.path.dirname(path) == str(tmp_path) and path != final:
            fd = os.open(path, os.O_RDONLY)
            commit.fcntl.flock(fd, commit.fcntl.LOCK_EX)
            threading.Timer(0.2, os.close, (fd,)).start()  # let go after a while

    monkeypatch.setattr(os, "mkdir", mkdir_and_hold)
    pending = commit.begin(final)
    monkeypatch.undo()
    try:
        assert pending.lock is not None and pending.lock.held
    finally:
        commit.abort(pending)
    assert os.listdir(tmp_path) == []


def test_begin_removes_its_directory_when_the_lock_fails(tmp_path, monkeypatch):
    """Where taking the lock of the new temporary directory fails, the directory is removed
    before the error goes on (an unlocked one could be taken for a leftover). Kills `begin`
    72 (``remove_path(None)``: TypeError, directory kept); id at 88f069a."""

    take = commit._Lock.take
    tried = []

    def fail(cls, path, **kwargs):
        if path == str(tmp_path):  # the parent's lock
            return take(path, **kwargs)
        tried.append(os.listdir(tmp_path))
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    monkeypatch.setattr(commit._Lock, "take", classmethod(fail))
    with pytest.raises(OSError) as caught:
        commit.begin(tmp_path / "c", token=1)
    assert caught.value.errno == errno.EIO
    assert tried == [[os.path.basename(commit.temporary_name(str(tmp_path / "c"), 1))]]
    assert os.listdir(tmp_path) == []


def test_the_restore_warning_points_at_the_caller_of_begin(tmp_path):
    """The DIR-007 warning of a checkpoint restored from ``-replaced`` names both paths and
    is attributed to the code that called `begin` (stacklevel 2), not to `begin`. Kills
    `begin` 38, 40 (stacklevel 1, 3; ids at 88f069a) in the plain tree only: in mutmut's
    copy a trampoline stands between the caller and `begin`, so the frame is not checked
    there."""
    final = str(tmp_path / "c")
    os.mkdir(final + REPLACED_SUFFIX)
    with pytest.warns(ockpt.OckptWarning) as caught:
        pending = commit.begin(final, overwrite=True)
    commit.abort(pending)
    assert len(caught) == 1
    assert str(caught[0].message) == (
        f"{final}: restored the checkpoint an interrupted overwrite had left at "
        f"{final}{REPLACED_SUFFIX} [DIR-007]"
    )
    if not hasattr(commit, "x_begin__mutmut_orig"):  # mutmut's trampoline adds a frame
        assert caught[0].filename == __file__
    assert os.listdir(tmp_path) == ["c"]


# ---------------------------------------------------------------------------------------------
# finish


def test_finish_lets_go_of_the_lock_and_needs_none(tmp_path):
    """`finish` commits and releases this save's lock; the Pending of a save begun in another
    process (no lock here) commits too, its marker naming the final path."""
    pending = commit.begin(tmp_path / "c")
    commit.finish(pending)
    assert pending.lock is not None and not pending.lock.held
    other = commit.Pending(
        str(tmp_path / "d"), commit.temporary_name(str(tmp_path / "d"), 1), False
    )
    os.mkdir(other.tmp)
    commit.finish(other)
    assert sorted(os.listdir(tmp_path)) == ["c", "d"]
    assert os.listdir(tmp_path / "d") == [COMMIT_FILE]
    marker = (tmp_path / "d" / COMMIT_FILE).read_text()
    assert marker == f"Checkpoint commit was successful to {tmp_path / 'd'}"  # DIR-004


def test_a_save_fsyncs_each_file_once(tmp_path, monkeypatch):
    """Every file of a save is flushed once, at commit: data files closed by the background
    writer only start their write-back, and the marker is written without an fsync of its
    own (a second fsync per file would double the cost of a commit of many small files)."""
    synced: list[tuple[int, int]] = []
    real = os.fsync

    def fsync(fd):  # type: ignore[no-untyped-def]
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            synced.append((st.st_dev, st.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ockpt.save_pytree(tmp_path / "c", {"a": TREE["a"], "b": np.ones(1000), "s": "x"})
    files = [os.path.join(d, n) for d, _, names in os.walk(tmp_path / "c") for n in names]
    assert len(files) > 5 and os.path.join(tmp_path, "c", COMMIT_FILE) in files
    assert sorted(synced) == sorted((os.stat(f).st_dev, os.stat(f).st_ino) for f in files)


# ---------------------------------------------------------------------------------------------
# _fsync_path, _fsync_tree


def test_the_flush_never_follows_a_link(tmp_path, monkeypatch):
    """A link inside a save's directory is not followed: its target, outside, is not
    fsynced (nor opened)."""
    (tmp_path / "outside").write_bytes(b"x")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "tree" / "f").write_bytes(b"y")
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real(fd)))
    commit._fsync_tree(str(tmp_path / "tree"))
    assert (tmp_path / "outside").stat().st_ino not in synced
    assert sorted(synced) == sorted((tmp_path / name).stat().st_ino for name in ("tree", "tree/f"))


# ---------------------------------------------------------------------------------------------
# write_file, replace_file


def test_write_file_takes_a_sequence_of_buffers(tmp_path):
    """`write_file` writes a sequence of buffers one after the other, without joining them."""
    commit.write_file(str(tmp_path / "d" / "f"), [b"ab", memoryview(b"cd"), b"", b"e"])
    assert (tmp_path / "d" / "f").read_bytes() == b"abcde"


def test_replace_file_writes_whole_and_flushed(tmp_path, monkeypatch):
    """`replace_file` creates the parent, writes the new content under a temporary name of
    its own, fsyncs it and renames it over the path (replacing an older file), then flushes the
    parent; nothing temporary is left."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: (events.append(("fsync", os.fstat(fd).st_ino)), real_fsync(fd))
    )
    monkeypatch.setattr(
        os,
        "replace",
        lambda a, b: (events.append(("replace", os.stat(a).st_ino, str(b))), real_replace(a, b)),
    )
    path = tmp_path / "root" / "meta"
    commit.replace_file(str(path), b"old")
    commit.replace_file(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path / "root") == ["meta"]
    parent = (tmp_path / "root").stat().st_ino
    first, second = events[:3], events[3:]
    for part in (first, second):
        (_, ino), (kind, replaced, dst), last = part
        assert (kind, replaced, dst) == ("replace", ino, str(path)), part
        assert last == ("fsync", parent), part
    assert second[1][1] == path.stat().st_ino


def test_an_append_that_writes_nothing_is_an_io_error_naming_the_file(tmp_path, monkeypatch):
    """A writev that moves no byte ends the append with EIO, "writev wrote nothing" and the
    file's path, not a silently short file. Kills `NewFile.append` 18-25 (errno, message,
    file); ids at 88f069a."""
    path = str(tmp_path / "f")
    new = commit.NewFile(path)
    monkeypatch.setattr(os, "writev", lambda fd, buffers: 0)
    try:
        with pytest.raises(OSError) as caught:
            new.append([b"abc"])
    finally:
        monkeypatch.undo()
        new.close()
    err = caught.value
    assert (err.errno, err.strerror, err.filename) == (errno.EIO, "writev wrote nothing", path)
    assert str(err) == f"[Errno {errno.EIO}] writev wrote nothing: {path!r}"


# ---------------------------------------------------------------------------------------------
# _forked: a forked child closes its copies of the locks


_FORK_CHILD = """
import os, sys
from ockpt.store import commit
os.close(0)  # a process without stdin (a daemon): the lock's descriptor can be 0
lock = commit._Lock.take(sys.argv[1], wait=True)
assert lock.fd == 0, lock.fd
pid = os.fork()
if pid == 0:
    os._exit(0 if not lock.held and lock.fd < 0 else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child kept the lock"
lock.release()
again = commit._Lock.take(sys.argv[1], wait=False)
assert again is not None and again.held
print("ok")
"""


def test_a_forked_child_lets_go_of_every_lock(tmp_path):
    """In a child forked while a lock is held, the lock reads as not held and its descriptor
    is closed, also when it is descriptor 0; the parent keeps and releases its own."""
    lock = commit._Lock.take(str(tmp_path), wait=True)
    ready, tell = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(tell, b"0" if not lock.held and lock.fd == -1 else b"1")
        finally:
            os._exit(0)
    os.close(tell)
    os.waitpid(pid, 0)
    assert os.read(ready, 1) == b"0"  # b"" if the child failed before it wrote
    os.close(ready)
    assert lock.held
    lock.release()
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FORK_CHILD), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# BackgroundWriter


def _submit(writer: BackgroundWriter, nbytes: int) -> threading.Thread:
    """`writer.submit` of a no-op job of `nbytes`, called on a thread of its own."""
    thread = threading.Thread(target=writer.submit, args=(lambda: None, nbytes), daemon=True)
    thread.start()
    return thread


def test_background_writer_holds_at_most_max_bytes(tmp_path):
    """Buffers wait for the disk up to `max_bytes` in all (a close counts none): a submit that
    fits returns at once while the writes before it are stuck; one byte more waits for them;
    once they are written, the count is back to nothing held."""
    writer = BackgroundWriter(max_bytes=10)
    gate, done = threading.Event(), threading.Event()
    try:
        writer.submit(gate.wait, 4)
        writer.queue(commit.NewFile(str(tmp_path / "f"), sync_on_close=False)).close()
        fits = _submit(writer, 6)  # 10 bytes held
        fits.join(10)
        assert not fits.is_alive()
        over = _submit(writer, 1)  # 11 bytes
        over.join(0.3)
        assert over.is_alive()
        gate.set()
        over.join(10)
        assert not over.is_alive()
        writer.submit(done.set, 3)
        assert done.wait(10)
        gate.clear()
        writer.submit(gate.wait, 4)
        fits = _submit(writer, 6)
        fits.join(10)
        assert not fits.is_alive()
    finally:
        gate.set()
        writer.finish()


def test_background_writes_run_on_their_own_thread_which_finish_stops(tmp_path, monkeypatch):
    """Appends and closes run on a thread named ``ockpt-write``; `finish` returns once that
    thread has ended."""
    threads = []
    real = commit.NewFile.append
    monkeypatch.setattr(
        commit.NewFile,
        "append",
        lambda self, parts: (threads.append(threading.current_thread()), real(self, parts)),
    )
    writer = BackgroundWriter()
    file = writer.queue(commit.NewFile(str(tmp_path / "f"), sync_on_close=False))
    file.append([b"abc"])
    file.close()
    writer.finish()
    assert (tmp_path / "f").read_bytes() == b"abc"
    [thread] = threads
    assert thread.name.startswith("ockpt-write") and not thread.is_alive()


def test_a_lock_held_past_the_wait_is_a_write_conflict(tmp_path, monkeypatch):
    """`_Lock.take(wait=True)` retries a held lock until `LOCK_WAIT_SECONDS` have passed, a
    clock reading at the deadline included, then raises WriteConflictError DIR-008 naming the
    directory and the wait (a fake clock: no real wait). Kills `_Lock.take` 34 (``>=``: gives
    up at the deadline), 36-43 (the error's message, rule and file; ids at 88f069a)."""
    held = commit._Lock.take(str(tmp_path), wait=False)  # another open file: flock conflicts
    assert held is not None and held.held
    readings = iter([0.0, commit.LOCK_WAIT_SECONDS, commit.LOCK_WAIT_SECONDS + 1])
    sleeps: list[float] = []
    clock = types.SimpleNamespace(monotonic=lambda: next(readings), sleep=sleeps.append)
    monkeypatch.setattr(commit, "time", clock)
    try:
        with pytest.raises(ockpt.WriteConflictError) as info:
            commit._Lock.take(str(tmp_path), wait=True)
    finally:
        held.release()
    e = info.value
    assert (e.message, e.rule, e.file) == (
        "another save has held this directory's lock for more than 120 s",
        "DIR-008",
        str(tmp_path),
    )
    assert sleeps == [0.005]  # one retry: the reading at the deadline is not past it


@pytest.mark.skipif(commit.fcntl is None, reason="no locks on this system")
def test_a_file_system_without_locks_is_unlocked_and_other_failures_raise(tmp_path, monkeypatch):
    """A `flock` failing with an errno of a file system without locks (ENOLCK, EOPNOTSUPP,
    ...) gives `UNLOCKED`, its descriptor closed; any other failure is raised, not taken for
    an absent lock. Kills `_Lock.take` 46 (``os.close(None)``), 47 (``not in _NO_LOCKS``; ids
    at 88f069a)."""
    closed: list[int] = []
    real_close = os.close

    def close(fd):
        closed.append(fd)
        real_close(fd)

    def flock_failing(code):
        def flock(fd, op):
            raise OSError(code, os.strerror(code))

        return types.SimpleNamespace(flock=flock, LOCK_EX=2, LOCK_NB=4)

    monkeypatch.setattr(commit.os, "close", close)
    for code in (errno.ENOLCK, errno.EOPNOTSUPP):
        monkeypatch.setattr(commit, "fcntl", flock_failing(code))
        assert commit._Lock.take(str(tmp_path), wait=True) is commit.UNLOCKED
        assert len(closed) == 1
        closed.clear()
    monkeypatch.setattr(commit, "fcntl", flock_failing(errno.EIO))
    with pytest.raises(OSError) as info:
        commit._Lock.take(str(tmp_path), wait=True)
    assert info.value.errno == errno.EIO and len(closed) == 1


def test_a_new_file_is_flushed_when_closed_unless_told_otherwise(tmp_path, monkeypatch):
    """`NewFile` fsyncs when it is closed (the default), or only starts the write-back when
    made with ``sync_on_close=False``, which ``close(sync=True)`` overrides; it is opened
    unbuffered, with no warning, and keeps what was appended. Kills `NewFile.__init__` 1
    (default False), 17 (``buffering=1``: a RuntimeWarning in binary mode), 18
    (``_sync_on_close = None``) and `NewFile.close` 1 (the default not read; ids at 88f069a)."""
    synced: list[int] = []
    started: list[int] = []
    monkeypatch.setattr(commit.os, "fsync", synced.append)
    monkeypatch.setattr(commit, "_start_writeback", started.append)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = commit.NewFile(str(tmp_path / "d" / "a"))
    first.append([b"abc", memoryview(b"de")])
    first.close()
    assert (len(synced), len(started)) == (1, 0)
    assert (tmp_path / "d" / "a").read_bytes() == b"abcde"
    second = commit.NewFile(str(tmp_path / "d" / "b"), sync_on_close=False)
    second.close()
    assert (len(synced), len(started)) == (1, 1)
    third = commit.NewFile(str(tmp_path / "d" / "c"), sync_on_close=False)
    third.close(sync=True)
    assert (len(synced), len(started)) == (2, 1)
