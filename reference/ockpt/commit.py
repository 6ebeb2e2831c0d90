"""Atomic commit of a checkpoint directory: temporary name, fsync, marker, rename.

A save writes everything under ``<name>.orbax-checkpoint-tmp`` (a sibling of the final path),
then writes ``commit_success.txt``, flushes files and directories to disk, and renames the
temporary directory to its final name. Readers never take a name containing
``.orbax-checkpoint-tmp`` for a checkpoint (LAYOUT-001), so a save that fails at any point
leaves no directory a reader would take as committed.

Overwriting swaps the new directory and the old one in one atomic step where the file system
can (Linux ``renameat2(RENAME_EXCHANGE)``), so the final path holds a whole checkpoint, old or
new, at every instant; elsewhere the old checkpoint is first renamed to
``<name>.orbax-checkpoint-tmp-replaced``, and a save or `recover` that finds the final path
missing renames it back (DIR-006, DIR-007).

The pure helpers (`temporary_name`, `replaced_name`, `commit_text`) do no I/O; `begin`,
`finish`, `abort` and `recover` are the few calls that touch the file system. Only local paths
are supported: object stores have no rename (see spec/writing.md).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import warnings
from dataclasses import dataclass

from .errors import FormatError, OckptWarning, WriteConflictError
from .names import COMMIT_FILE, DELETED_SUFFIX, REPLACED_SUFFIX, TMP_MARKER

__all__ = [
    "Pending",
    "temporary_name",
    "replaced_name",
    "commit_text",
    "check_target",
    "begin",
    "finish",
    "abort",
    "recover",
    "write_file",
    "fsync_dir",
]


def temporary_name(final: str) -> str:
    """The temporary path a save writes before it commits to `final`."""
    return final.rstrip(os.sep) + TMP_MARKER


def replaced_name(final: str) -> str:
    """Where an overwrite without atomic exchange keeps the old checkpoint until the new one
    is in place: ``<final>.orbax-checkpoint-tmp-replaced`` (DIR-006)."""
    return final.rstrip(os.sep) + REPLACED_SUFFIX


def commit_text(final: str) -> str:
    """The informational content of ``commit_success.txt`` (DIR-004)."""
    return f"Checkpoint commit was successful to {final}"


@dataclass(frozen=True)
class Pending:
    """A save in progress: where it writes, and where it will commit."""

    final: str
    tmp: str
    overwrite: bool


def _local(path: str | os.PathLike[str]) -> str:
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


def check_target(path: str | os.PathLike[str], *, overwrite: bool) -> str:
    """Refuse a target path before anything is written; return it absolute.

    A path that is a file, or one whose last component carries the temporary marker, is
    refused (DIR-001); an existing directory is refused unless `overwrite` (DIR-002).
    """
    final = _local(path)
    name = os.path.basename(final)
    if TMP_MARKER in name:
        raise FormatError(
            f"a checkpoint name must not contain {TMP_MARKER!r}",
            rule="DIR-001",
            file=final,
        )
    if os.path.lexists(final):
        if not os.path.isdir(final) or os.path.islink(final):
            raise FormatError(
                "the checkpoint path exists and is not a directory", rule="DIR-001", file=final
            )
        if not overwrite:
            raise WriteConflictError(
                "a checkpoint already exists there; pass overwrite=True to replace it",
                rule="DIR-002",
                file=final,
            )
    return final


def begin(path: str | os.PathLike[str], *, overwrite: bool = False) -> Pending:
    """Check the target and create its (empty) temporary directory.

    A checkpoint that an interrupted overwrite left under the ``-replaced`` name while the
    final path is missing is renamed back first (DIR-007); the target is then checked again,
    so without `overwrite` that checkpoint is refused as any existing one (DIR-002).
    A leftover temporary directory of an earlier failed save is refused unless `overwrite`
    (then it is removed first): it may also belong to a save still running (DIR-003).
    """
    final = check_target(path, overwrite=overwrite)
    if recover(final):
        warnings.warn(
            f"{final}: restored the checkpoint an interrupted overwrite had left at "
            f"{replaced_name(final)} [DIR-007]",
            OckptWarning,
            stacklevel=2,
        )
        final = check_target(final, overwrite=overwrite)
    tmp = temporary_name(final)
    parent = os.path.dirname(final)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise FormatError(
            f"cannot create the parent directory: {e.strerror or e}", rule="DIR-001", file=final
        ) from e
    if os.path.lexists(tmp):
        if not overwrite:
            raise WriteConflictError(
                "a temporary directory of another save exists (a save in progress, or one that "
                "failed); remove it or pass overwrite=True",
                rule="DIR-003",
                file=tmp,
            )
        remove_path(tmp)
    try:
        os.mkdir(tmp)
    except FileExistsError as e:
        raise WriteConflictError(
            "another save created this temporary directory at the same time",
            rule="DIR-003",
            file=tmp,
        ) from e
    except OSError as e:
        raise FormatError(
            f"cannot create the checkpoint directory: {e.strerror or e}", rule="DIR-001", file=final
        ) from e
    return Pending(final=final, tmp=tmp, overwrite=overwrite)


def write_file(path: str, data: bytes, *, sync: bool = True) -> None:
    """Write a small file (creating its parent directory) and flush it to disk."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (new names, renames) to disk; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    """fsync every directory under root (files are flushed when written)."""
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        fsync_dir(dirpath)


def finish(pending: Pending, *, marker: bool = True) -> None:
    """Commit: write ``commit_success.txt``, flush, and rename the temporary directory.

    With `overwrite`, an existing checkpoint at the final path is exchanged with the new one
    atomically where the file system allows it, and otherwise renamed aside to
    ``-replaced`` first (DIR-006); either way it is removed once the new one is in place.
    """
    if marker:
        write_file(os.path.join(pending.tmp, COMMIT_FILE), commit_text(pending.final).encode())
    _fsync_tree(pending.tmp)
    parent = os.path.dirname(pending.final)
    if os.path.lexists(pending.final):
        if not pending.overwrite:  # appeared while we were writing
            raise _conflict(pending.final)
        _replace(pending.tmp, pending.final)
        return
    try:
        if not _renameat2(pending.tmp, pending.final, _RENAME_NOREPLACE):
            os.rename(pending.tmp, pending.final)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise _conflict(pending.final) from None  # another save committed meanwhile
        raise
    fsync_dir(parent)


def _conflict(final: str) -> WriteConflictError:
    return WriteConflictError(
        "another save committed here while this one was writing", rule="DIR-002", file=final
    )


def _replace(tmp: str, final: str) -> None:
    """Put the committed `tmp` in place of the checkpoint at `final`, then remove the old one.

    At every instant `final` holds one whole checkpoint, the old or the new, where exchange is
    available; without it, the old one is whole under `replaced_name(final)` during the one
    window when `final` is missing, and `recover` renames it back (DIR-006, DIR-007).
    """
    parent = os.path.dirname(final)
    old = replaced_name(final)
    if _renameat2(tmp, final, _RENAME_EXCHANGE):
        fsync_dir(parent)  # the new checkpoint is committed; the old one is at `tmp` now
        remove_path(tmp)
        _tidy(final)
        return
    if os.path.lexists(old):  # left by an interrupted overwrite that got past its commit
        _discard(old, final)
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
    _tidy(final)


def _tidy(final: str) -> None:
    """After an overwrite committed: remove what interrupted overwrites and removals left next
    to `final` (it holds the newest checkpoint, so a ``-replaced`` one is older). A failure
    here leaves only temporary names behind, and the save stays committed."""
    try:
        if os.path.lexists(replaced_name(final)):
            _discard(replaced_name(final), final)
        elif os.path.lexists(final + DELETED_SUFFIX):
            remove_path(final + DELETED_SUFFIX)
    except OSError:
        pass
    fsync_dir(os.path.dirname(final))


def _discard(path: str, final: str) -> None:
    """Remove `path` under another temporary name first, so that no partly removed directory
    is ever left under the ``-replaced`` name: such a name always holds a whole checkpoint."""
    doomed = final.rstrip(os.sep) + DELETED_SUFFIX
    if os.path.lexists(doomed):
        remove_path(doomed)
    os.rename(path, doomed)
    remove_path(doomed)


def recover(path: str | os.PathLike[str]) -> bool:
    """Undo an interrupted overwrite: when `path` is missing and its ``-replaced`` sibling is
    a directory, rename the sibling back to `path` (DIR-007). True when it did.

    The old checkpoint comes back, not the new one: an overwrite takes effect only when the new
    checkpoint takes the final name, so a committed temporary directory of that save stays a
    temporary directory (removed by the next save with ``overwrite``, DIR-003).
    """
    final = _local(path)
    old = replaced_name(final)
    if os.path.lexists(final) or os.path.islink(old) or not os.path.isdir(old):
        return False
    try:
        if not _renameat2(old, final, _RENAME_NOREPLACE):
            os.rename(old, final)
    except OSError as e:
        # another process recovered it, or committed at `final`, in the meantime
        if e.errno in (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    fsync_dir(os.path.dirname(final))
    return True


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


def _load_renameat2():  # type: ignore[no-untyped-def]
    global _libc_renameat2
    if _libc_renameat2 is None:
        func = None
        if sys.platform.startswith("linux"):
            try:
                func = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28 and later
                func.argtypes = [
                    ctypes.c_int,
                    ctypes.c_char_p,
                    ctypes.c_int,
                    ctypes.c_char_p,
                    ctypes.c_uint,
                ]
                func.restype = ctypes.c_int
            except (OSError, AttributeError):
                func = None
        _libc_renameat2 = func or False
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
    """Remove what a failed save wrote (its temporary directory only)."""
    remove_path(pending.tmp)


def remove_path(path: str) -> None:
    """Remove a directory tree or a file (a link itself, never its target); no error if gone."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)
