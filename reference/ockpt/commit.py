"""Atomic commit of a checkpoint directory: temporary name, fsync, marker, rename.

A save writes everything under ``<name>.orbax-checkpoint-tmp`` (a sibling of the final path),
then writes ``commit_success.txt``, flushes files and directories to disk, and renames the
temporary directory to its final name. Readers never take a name containing
``.orbax-checkpoint-tmp`` for a checkpoint (LAYOUT-001), so a save that fails at any point
leaves no directory a reader would take as committed.

The pure helpers (`temporary_name`, `commit_text`) do no I/O; `begin`, `finish` and `abort`
are the few calls that touch the file system. Only local paths are supported: object stores
have no rename (see spec/writing.md).
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass

from .errors import FormatError, WriteConflictError
from .layout import COMMIT_FILE, TMP_MARKER

__all__ = [
    "TMP_SUFFIX",
    "COMMIT_FILE",
    "Pending",
    "temporary_name",
    "commit_text",
    "check_target",
    "begin",
    "finish",
    "abort",
    "write_file",
    "fsync_dir",
]

TMP_SUFFIX = TMP_MARKER
_OLD_SUFFIX = TMP_MARKER + "-replaced"


def temporary_name(final: str) -> str:
    """The temporary path a save writes before it commits to `final`."""
    return final.rstrip(os.sep) + TMP_SUFFIX


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
                f"{final}: a checkpoint already exists there; pass overwrite=True to replace "
                "it [DIR-002]"
            )
    return final


def begin(path: str | os.PathLike[str], *, overwrite: bool = False) -> Pending:
    """Check the target and create its (empty) temporary directory.

    A leftover temporary directory of an earlier failed save is refused unless `overwrite`
    (then it is removed first): it may also belong to a save still running (DIR-003).
    """
    final = check_target(path, overwrite=overwrite)
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
                f"{tmp}: a temporary directory of another save exists (a save in progress, "
                "or one that failed); remove it or pass overwrite=True [DIR-003]"
            )
        _remove(tmp)
    try:
        os.mkdir(tmp)
    except FileExistsError as e:
        raise WriteConflictError(
            f"{tmp}: another save created this temporary directory at the same time [DIR-003]"
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

    With `overwrite`, an existing checkpoint at the final path is first moved aside under a
    temporary name, and removed once the new one is in place.
    """
    if marker:
        write_file(os.path.join(pending.tmp, COMMIT_FILE), commit_text(pending.final).encode())
    _fsync_tree(pending.tmp)
    parent = os.path.dirname(pending.final)
    old = None
    if os.path.lexists(pending.final):
        if not pending.overwrite:  # appeared while we were writing
            raise WriteConflictError(
                f"{pending.final}: another save committed here while this one was writing [DIR-002]"
            )
        old = pending.final + _OLD_SUFFIX
        if os.path.lexists(old):
            _remove(old)
        os.rename(pending.final, old)
    try:
        os.rename(pending.tmp, pending.final)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and not pending.overwrite:
            raise WriteConflictError(  # another save committed between the check and here
                f"{pending.final}: another save committed here while this one was writing [DIR-002]"
            ) from None
        raise
    fsync_dir(parent)
    if old is not None:
        _remove(old)
        fsync_dir(parent)


def abort(pending: Pending) -> None:
    """Remove what a failed save wrote (its temporary directory only)."""
    _remove(pending.tmp)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)
