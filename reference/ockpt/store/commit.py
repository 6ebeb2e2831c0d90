"""Atomic commit of a checkpoint directory: a temporary name of its own, fsync, marker, rename.

A save writes everything under ``<name>.orbax-checkpoint-tmp-ockpt-<12 hex digits>``, a sibling
of the final path that no other save uses (DIR-003), then writes ``commit_success.txt``,
flushes files and directories to disk, and renames the temporary directory to its final name.
Readers never take a name containing ``.orbax-checkpoint-tmp`` for a checkpoint (LAYOUT-001),
so a save that fails at any point leaves no directory a reader would take as committed.

Overwriting swaps the new directory and the old one in one atomic step where the file system
can (Linux ``renameat2(RENAME_EXCHANGE)``), so the final path holds a whole checkpoint, old or
new, at every instant; elsewhere the old checkpoint is first renamed to
``<name>.orbax-checkpoint-tmp-replaced``, and a save or `recover` that finds the final path
missing renames it back (DIR-006, DIR-007).

Saves to one path may run at once, in any processes of one machine (DIR-008). Each holds an
exclusive advisory lock (``flock``) on its own temporary directory from its creation to its
commit or failure, so that a leftover whose lock is free belongs to a save that has ended and
may be removed; creating a temporary directory, removing leftovers and every rename of the
commit happen under a lock on the parent directory, so each save commits one whole tree or
raises `WriteConflictError`.

The pure helpers (`temporary_name`, `replaced_name`, `commit_text`) do no I/O; `begin`,
`finish`, `abort`, `recover` and `remove_committed` are the calls that touch the file system.
Only local paths are supported: object stores have no rename (see spec/writing.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import sys
import time
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError, OckptWarning, WriteConflictError
from ..names import (
    COMMIT_FILE,
    DELETED_SUFFIX,
    OWN_TMP_NAME,
    OWN_TMP_SUFFIX,
    REPLACED_SUFFIX,
    TMP_MARKER,
)
from .base import commit_text
from .byterange import vectored
from .files import list_dir

try:
    import fcntl
except ImportError:  # not a POSIX system: no locks, and so no leftover is ever removed
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Pending",
    "new_token",
    "temporary_name",
    "replaced_name",
    "check_target",
    "final_path",
    "begin",
    "finish",
    "abort",
    "recover",
    "remove_committed",
    "remove_leftovers",
    "write_file",
    "NewFile",
    "replace_file",
    "fsync_dir",
    "remove_path",
]


def new_token() -> int:
    """A random 48-bit number naming one save's temporary directory."""
    return secrets.randbits(48)


def temporary_name(final: str, token: int) -> str:
    """The temporary path the save `token` writes before it commits to `final` (DIR-003)."""
    return f"{final.rstrip(os.sep)}{OWN_TMP_SUFFIX}{token:012x}"


def replaced_name(final: str) -> str:
    """Where an overwrite without atomic exchange keeps the old checkpoint until the new one
    is in place: ``<final>.orbax-checkpoint-tmp-replaced`` (DIR-006)."""
    return final.rstrip(os.sep) + REPLACED_SUFFIX


#: errno values of `flock` that mean "this file system has no locks": proceed unlocked.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF, errno.EINVAL})
#: How long a save waits for the lock of a parent directory (held only for renames, a
#: listing and an fsync) before it gives up with a write conflict.
LOCK_WAIT_SECONDS = 120.0
#: The locks this process holds: a child forked meanwhile closes its copies (`_forked`), or
#: it would hold them for its whole life (a flock belongs to the open file, which fork shares).
_HELD: weakref.WeakSet[_Lock] = weakref.WeakSet()


class _Lock:
    """An exclusive ``flock`` on a directory, held until `release`, until the object is
    collected, or until the process ends."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        _HELD.add(self)

    @classmethod
    def take(cls, path: str, *, wait: bool, follow: bool = False) -> _Lock | None:
        """The lock of the directory `path` (its last component a link only if `follow`).
        None when another holder has it (and not `wait`); `UNLOCKED` where this system or
        file system has no locks. Any other failure raises OSError: a save must not run
        unlocked where others lock."""
        if fcntl is None:
            return UNLOCKED
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_DIRECTORY", 0)
        fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(fd)
            except BlockingIOError:
                if not wait or time.monotonic() > deadline:
                    os.close(fd)
                    if wait:
                        raise WriteConflictError(
                            f"another save has held this directory's lock for more than "
                            f"{LOCK_WAIT_SECONDS:.0f} s",
                            rule="DIR-008",
                            file=path,
                        ) from None
                    return None
                time.sleep(0.005)
            except OSError as e:
                os.close(fd)
                if e.errno in _NO_LOCKS:
                    return UNLOCKED
                raise

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.release()


#: No lock, where the file system has none: a save proceeds, and claims no one else's directory.
UNLOCKED = _Lock(-1)


def _forked() -> None:
    """In a forked child: close the copies of the parent's locks, leaving them to the parent."""
    for lock in list(_HELD):
        if lock.fd >= 0:
            try:
                os.close(lock.fd)
            except OSError:
                pass
            lock.fd = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    """Hold the lock of `directory` (the parent of a checkpoint, a link followed) for a short
    critical section; without lock support, proceed unlocked."""
    try:
        lock = _Lock.take(directory, wait=True, follow=True)
    except FileNotFoundError:
        lock = UNLOCKED  # no parent yet: nothing next to the path to protect
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


@dataclass(frozen=True)
class Pending:
    """A save in progress: where it writes, where it will commit, and (in the process that
    created it) the lock on its temporary directory."""

    final: str
    tmp: str
    overwrite: bool
    lock: _Lock | None = None


def final_path(path: str | os.PathLike[str]) -> str:
    """The absolute local path a save to `path` commits to (DIR-001 for a URL or '')."""
    text = os.fspath(path)
    if "://" in text and not text.startswith("file://"):
        raise FormatError(
            "the reference writer saves to local directories only",
            rule="DIR-001",
            file=text,
        )
    if text.startswith("file://"):
        text = text[len("file://") :]
    if not text:
        raise FormatError("empty checkpoint path", rule="DIR-001", file=text)
    return os.path.abspath(text)


def check_target(path: str | os.PathLike[str], *, overwrite: bool, shown: str | None = None) -> str:
    """Refuse a target path before anything is written; return it absolute.

    A path that is a file, or one whose last component carries the temporary marker, is
    refused (DIR-001); an existing directory is refused unless `overwrite` (DIR-002). Errors
    name the path `shown` (default: absolute).
    """
    final = final_path(path)
    where = final if shown is None else shown
    name = os.path.basename(final)
    if TMP_MARKER in name:
        raise FormatError(
            f"a checkpoint name must not contain {TMP_MARKER!r}",
            rule="DIR-001",
            file=where,
        )
    if os.path.lexists(final):
        if not os.path.isdir(final) or os.path.islink(final):
            raise FormatError(
                "the checkpoint path exists and is not a directory", rule="DIR-001", file=where
            )
        if not overwrite:
            raise WriteConflictError(
                "a checkpoint already exists there; pass overwrite=True to replace it",
                rule="DIR-002",
                file=where,
            )
    return final


def begin(
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    token: int | None = None,
    shown: str | None = None,
) -> Pending:
    """Check the target, then create and lock this save's own temporary directory.

    A checkpoint that an interrupted overwrite left under the ``-replaced`` name while the
    final path is missing is renamed back first (DIR-007); the target is then checked again,
    so without `overwrite` that checkpoint is refused as any existing one (DIR-002).
    Temporary directories of earlier ockpt saves to this path that have ended (killed, or
    failed without removing theirs) are removed; those of saves still running, and those of
    other writers, are left alone (DIR-003).
    """
    final = check_target(path, overwrite=overwrite, shown=shown)
    tmp = temporary_name(final, new_token() if token is None else token)
    parent = os.path.dirname(final)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise FormatError(
            f"cannot create the parent directory: {e.strerror or e}", rule="DIR-001", file=final
        ) from e
    with _locked(parent):
        if _recover(final):
            warnings.warn(
                f"{final}: restored the checkpoint an interrupted overwrite had left at "
                f"{replaced_name(final)} [DIR-007]",
                OckptWarning,
                stacklevel=2,
            )
            final = check_target(final, overwrite=overwrite, shown=shown)
        try:
            os.mkdir(tmp)
        except FileExistsError as e:
            raise WriteConflictError(
                "another save uses this temporary directory", rule="DIR-003", file=tmp
            ) from e
        except OSError as e:
            raise FormatError(
                f"cannot create the checkpoint directory: {e.strerror or e}",
                rule="DIR-001",
                file=final,
            ) from e
        try:
            lock = _Lock.take(tmp, wait=True)
        except OSError:  # unlocked where others lock, they could take it for a leftover
            remove_path(tmp)
            raise
        ended = _claim_ended(parent, os.path.basename(final))  # this save's own lock is held
    _remove_claimed(ended)
    return Pending(final=final, tmp=tmp, overwrite=overwrite, lock=lock)


def _claim_ended(parent: str, name: str) -> list[tuple[str, _Lock | None]]:
    """ockpt's own temporary directories of the checkpoint `name` in `parent` whose save has
    ended: their lock is free. Each is returned with its lock taken, so that no other process
    claims it; call with the parent's lock held (a save creates and locks its directory under
    that lock, so none is caught between the two)."""
    claimed: list[tuple[str, _Lock | None]] = []
    for entry in sorted(list_dir(parent).dirs):
        match = OWN_TMP_NAME.fullmatch(entry)
        if match is None or match["name"] != name:
            continue
        path = os.path.join(parent, entry)
        lock = _claim(path)
        if lock is not None:
            claimed.append((path, lock))
    return claimed


def _claim(path: str) -> _Lock | None:
    """The lock of a directory of ockpt's own form, when it can be taken now (its save has
    ended, or it is this save's to remove); None when another process holds it, when there are
    no locks here (no one can tell then), or when it is gone or no directory."""
    try:
        lock = _Lock.take(path, wait=False)
    except OSError:
        return None
    return lock if lock is not None and lock.held else None


def _remove_claimed(claimed: list[tuple[str, _Lock | None]]) -> None:
    """Remove each path, then release its lock (outside the parent's lock: removal may take
    long, and nobody else claims a path whose lock is held)."""
    for path, lock in claimed:
        try:
            remove_path(path)
        finally:
            if lock is not None:
                lock.release()


def write_file(
    path: str, data: bytes | memoryview | Sequence[bytes | memoryview], *, sync: bool = True
) -> None:
    """Write a new file whole (creating its parent directory) and flush it to disk.

    `data` is bytes or a sequence of buffers, written with ``writev``, not joined into a copy."""
    file = NewFile(path)
    try:
        file.append([data] if isinstance(data, bytes | bytearray | memoryview) else data)
    finally:
        file.close(sync=sync)


_NEW_FILE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


class NewFile:
    """A new file of the writer's (its parent directory created), written by appending
    buffers as they come (an OCDBT data file's values, which may be views of the arrays being
    saved) and flushed to disk once, when closed."""

    def __init__(self, path: str, *, sync_on_close: bool = True, exclusive: bool = False) -> None:
        """`sync_on_close` False: `close` only starts the write-back to disk, for a file of a
        save's temporary directory, which `finish` flushes with the rest (one fsync per file,
        at commit, while the disk has been busy writing since the file was closed). With
        `exclusive`, a file already at `path` is a FileExistsError (a conditional create)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # never through a link standing at the name (planted next to a user's output, it
        # would have the write land outside): ELOOP, an OSError naming the path
        flags = _NEW_FILE_FLAGS | os.O_EXCL if exclusive else _NEW_FILE_FLAGS | os.O_TRUNC
        fd = os.open(path, flags, 0o666)
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._path = path
        self._sync_on_close = sync_on_close

    def append(self, parts: Sequence[bytes | memoryview]) -> None:
        """Write the buffers at the end of the file, with as few ``writev`` calls as allowed."""
        views = [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]
        fd = self._file.fileno()
        if vectored(views, lambda batch, _: os.writev(fd, batch)) != sum(len(v) for v in views):
            raise OSError(errno.EIO, "writev wrote nothing", self._path)

    def close(self, *, sync: bool | None = None) -> None:
        """fsync (`sync`, default: as constructed) or start the write-back, and close; a no-op
        on a closed file."""
        if self._file.closed:
            return
        try:
            if self._sync_on_close if sync is None else sync:
                os.fsync(self._file.fileno())
            else:
                _start_writeback(self._file.fileno())
        finally:
            self._file.close()


def _start_writeback(fd: int) -> None:
    """Ask the kernel to start writing a file's dirty pages to disk, without waiting (Linux
    ``sync_file_range(SYNC_FILE_RANGE_WRITE)``); nothing elsewhere. Durability still comes from
    the fsync at commit."""
    global _libc_sync_file_range
    if _libc_sync_file_range is None:
        args = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        _libc_sync_file_range = _libc_function("sync_file_range", args) or False
    if _libc_sync_file_range:
        _libc_sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


_SYNC_FILE_RANGE_WRITE = 2
_libc_sync_file_range: object = None  # None: not looked up yet; False: not available


def replace_file(path: str, data: bytes) -> None:
    """Write a small file whole or not at all: under a temporary name of its own, renamed over
    `path`, with the parent's lock held (so `remove_leftovers` never takes it mid-write)."""
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = temporary_name(path, new_token())
    with _locked(parent):
        write_file(tmp, data)
        os.replace(tmp, path)
        fsync_dir(parent)


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (new names, renames) to disk; a no-op where unsupported."""
    _fsync_path(path)


def _fsync_path(path: str) -> None:
    """fsync a file or directory of the writer's own (no link followed); a no-op where the
    system does not support it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    """fsync every file, then every directory, under root, deepest first: the data files a
    save closed without a flush of their own (`NewFile` with ``sync_on_close=False``) included."""
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            _fsync_path(os.path.join(dirpath, name))
        fsync_dir(dirpath)


def finish(pending: Pending, *, marker: bool = True) -> None:
    """Commit: write ``commit_success.txt``, flush, and rename the temporary directory.

    With `overwrite`, an existing checkpoint at the final path is exchanged with the new one
    atomically where the file system allows it, and otherwise renamed aside to
    ``-replaced`` first (DIR-006); either way it is removed once the new one is in place.
    The renames happen under the parent's lock (DIR-008); the removal after it.
    """
    if marker:
        marker_file = os.path.join(pending.tmp, COMMIT_FILE)
        write_file(marker_file, commit_text(pending.final).encode(), sync=False)  # flushed below
    _fsync_tree(pending.tmp)
    with _locked(os.path.dirname(pending.final)):
        doomed = _commit(pending)
        claimed = [(path, _claim(path)) for path in doomed]
    if pending.lock is not None:
        pending.lock.release()
    _remove_claimed(claimed)


def _commit(pending: Pending) -> list[str]:
    """The renames of a commit (the caller holds the parent's lock); returns what is left to
    remove, each under a temporary name of this save's: the old checkpoint of an overwrite,
    and what interrupted overwrites and removals left next to the path."""
    final, tmp = pending.final, pending.tmp
    parent = os.path.dirname(final)
    if not os.path.lexists(final):
        try:
            if not _renameat2(tmp, final, _RENAME_NOREPLACE):
                os.rename(tmp, final)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise _conflict(final) from None  # another writer committed meanwhile
            raise
        fsync_dir(parent)
        return []
    if not pending.overwrite:  # appeared while we were writing
        raise _conflict(final)
    doomed = _set_aside_stale(final)
    if _renameat2(tmp, final, _RENAME_EXCHANGE):
        fsync_dir(parent)  # the new checkpoint is committed; the old one is at `tmp` now
        return [tmp, *doomed]
    old = replaced_name(final)
    os.rename(final, old)
    try:
        os.rename(tmp, final)
    except OSError as e:
        try:  # put the old checkpoint back where it was
            os.rename(old, final)
        except OSError:
            pass
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise _conflict(final) from None
        raise
    fsync_dir(parent)
    try:  # the old checkpoint takes this save's own name before it is removed (DIR-006)
        os.rename(old, tmp)
    except OSError:
        return doomed  # committed; the next overwrite removes the stale -replaced
    return [tmp, *doomed]


def _conflict(final: str) -> WriteConflictError:
    return WriteConflictError(
        "another save committed here while this one was writing", rule="DIR-002", file=final
    )


def _set_aside_stale(final: str) -> list[str]:
    """Rename what interrupted overwrites and removals left next to the existing `final` (a
    ``-replaced`` checkpoint older than it, a partly removed ``-deleted`` directory) to new
    temporary names of ockpt's own, to be removed: a ``-replaced`` name is never removed in
    place, so it always holds a whole checkpoint (DIR-006)."""
    doomed = []
    for stale in (replaced_name(final), final.rstrip(os.sep) + DELETED_SUFFIX):
        if os.path.lexists(stale):
            target = temporary_name(final, new_token())
            try:
                os.rename(stale, target)
            except OSError:
                continue  # left for a later save; the commit does not depend on it
            doomed.append(target)
    return doomed


def recover(path: str | os.PathLike[str]) -> bool:
    """Undo an interrupted overwrite: when `path` is missing and its ``-replaced`` sibling is
    a directory, rename the sibling back to `path` (DIR-007). True when it did.

    The old checkpoint comes back, not the new one: an overwrite takes effect only when the new
    checkpoint takes the final name, so a committed temporary directory of that save stays a
    temporary directory (removed as DIR-003 says).
    """
    final = final_path(path)
    with _locked(os.path.dirname(final)):
        return _recover(final)


def _recover(final: str) -> bool:
    """`recover`, with the parent's lock held."""
    old = replaced_name(final)
    if os.path.lexists(final) or os.path.islink(old) or not os.path.isdir(old):
        return False
    try:
        if not _renameat2(old, final, _RENAME_NOREPLACE):
            os.rename(old, final)
    except OSError as e:
        # another writer recovered it, or committed at `final`, in the meantime
        if e.errno in (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    fsync_dir(os.path.dirname(final))
    return True


def remove_committed(path: str) -> bool:
    """Remove a committed directory (a step) so that no reader sees it half removed: under the
    parent's lock it takes a temporary name of ockpt's own, then it is removed (DIR-005).
    False when it was gone already (another process removed it)."""
    doomed = temporary_name(path, new_token())
    parent = os.path.dirname(path)
    with _locked(parent):
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return False
        # a stale -replaced copy would come back as the step by DIR-007: it goes too
        stale = _set_aside_stale(path)
        fsync_dir(parent)
        claimed = [(p, _claim(p)) for p in (doomed, *stale)]
    _remove_claimed(claimed)
    return True


def remove_leftovers(paths: list[str]) -> list[str]:
    """Remove what unfinished saves and removals left (`paths`: names carrying the temporary
    marker), and return what was handled. A ``-replaced`` directory whose checkpoint is
    missing is renamed back instead (DIR-007), and kept if that fails; a temporary directory
    of an ockpt save still running (its lock held) is left alone (DIR-003)."""
    handled = []
    by_parent: dict[str, list[str]] = {}
    for path in paths:
        by_parent.setdefault(os.path.dirname(path), []).append(path)
    for parent, group in by_parent.items():
        claimed: list[tuple[str, _Lock | None]] = []
        with _locked(parent):
            for path in sorted(group, key=lambda p: not p.endswith(REPLACED_SUFFIX)):
                if path.endswith(REPLACED_SUFFIX):
                    final = path[: -len(REPLACED_SUFFIX)]
                    if _recover(final):
                        handled.append(path)
                        continue
                    if not os.path.lexists(final):
                        continue  # could not be renamed back: never remove the only copy
                    for aside in _set_aside_stale(final):  # never removed in place (DIR-006)
                        claimed.append((aside, _claim(aside)))
                    handled.append(path)
                    continue
                lock = None
                if OWN_TMP_NAME.fullmatch(os.path.basename(path)) and os.path.isdir(path):
                    lock = _claim(path)
                    if lock is None:
                        continue  # a save still running (or no locks here: cannot tell)
                claimed.append((path, lock))
                handled.append(path)
        _remove_claimed(claimed)
    return sorted(handled)


# ---------------------------------------------------------------------------------------------
# renameat2(2): atomic exchange of two names, and rename that never replaces.

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
#: errno values that mean "this kernel or file system cannot do it": fall back to rename(2).
_UNSUPPORTED = frozenset(
    {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
)
_libc_renameat2: object = None  # None: not looked up yet; False: not available


def _libc_function(name: str, argtypes: list[Any]) -> Any:
    """The C library's function `name` returning an int (Linux only), or None where there is
    none (``renameat2`` needs glibc 2.28 or later)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    func.argtypes = argtypes
    func.restype = ctypes.c_int
    return func


def _load_renameat2():  # type: ignore[no-untyped-def]
    global _libc_renameat2
    if _libc_renameat2 is None:
        args = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        _libc_renameat2 = _libc_function("renameat2", args) or False
    return _libc_renameat2 or None


def _renameat2(src: str, dst: str, flags: int) -> bool:
    """``renameat2(src, dst, flags)``: True when done; False when this system or file system
    does not support it (the caller falls back); OSError for any other failure."""
    func = _load_renameat2()
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), src, None, dst)


def abort(pending: Pending) -> None:
    """Remove what a failed save wrote (its temporary directory only), then let go of it."""
    remove_path(pending.tmp)
    if pending.lock is not None:
        pending.lock.release()


def remove_path(path: str) -> None:
    """Remove a directory tree or a file (a link itself, never its target); no error if gone."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)
