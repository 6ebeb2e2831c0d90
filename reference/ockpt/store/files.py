"""The one hardened way ockpt opens, reads and lists the files of a local checkpoint.

A checkpoint is untrusted input (spec/limits.md, spec/directories.md §2.2). Every file of one
is opened here, and only here:

* only regular files are read: a FIFO, socket, device or directory in place of a file, or a
  symbolic link loop, is a `FormatError` (PATH-005) at once, never a hang (FIFOs are opened
  without blocking and refused before any read);
* a name is resolved inside its checkpoint directory: ``..``, absolute names and NUL are
  refused (PATH-003), and so is a symbolic link whose target lies outside (PATH-004), before
  anything is opened, so no byte of an outside file is read or echoed; the file is then opened
  one component at a time without following links (`open_inside`), so a link planted after the
  check is refused too;
* reads are bounded by the caller's limit (from the limits table) before anything is
  allocated for them;
* listings are bounded in entries.

Writers create their own files and do not come here.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NoReturn

from ..errors import FormatError
from ..limits import current as limits_in_force
from ..paths import check_relative
from .base import Listing

__all__ = [
    "resolve_inside",
    "check_tree",
    "open_regular",
    "open_inside",
    "read_file",
    "read_inside",
    "size_inside",
    "list_dir",
]

_OPEN_FLAGS = (
    os.O_RDONLY
    | os.O_NONBLOCK  # a FIFO opens at once instead of waiting for a writer
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_BINARY", 0)
)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
#: whether files can be opened relative to a directory descriptor without following links
_OPENS_RELATIVE = bool(_NOFOLLOW and hasattr(os, "O_DIRECTORY")) and {os.open, os.stat} <= set(
    os.supports_dir_fd
)
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _what(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(why: str, shown: str) -> FormatError:
    return FormatError(f"{why} stands where a regular file must be", rule="PATH-005", file=shown)


def _realpath(path: str, shown: str | None) -> str:
    """`os.path.realpath`, whose `OSError` (a link swapped while it is followed) becomes
    PATH-004: the path changed under the reader."""
    try:
        return os.path.realpath(path)
    except OSError as e:
        raise FormatError(
            f"{path!r} changed while its links were followed ({e.strerror})",
            rule="PATH-004",
            file=shown,
        ) from None


def _inside(full: str, real_root: str) -> bool:
    return full == real_root or full.startswith(real_root.rstrip(os.sep) + os.sep)


def _resolve(root: str, name: str, shown: str | None) -> tuple[str, str]:
    """The real paths of `root` and of `name` inside it (`resolve_inside`)."""
    check_relative(name, file=shown)
    real_root = _realpath(root, shown)
    full = _realpath(os.path.join(real_root, name), shown)
    if not _inside(full, real_root):
        raise FormatError(
            f"{name!r} resolves to {full!r}, outside the checkpoint {real_root!r} "
            "(a symbolic link leads out)",
            rule="PATH-004",
            file=shown,
        )
    return real_root, full


def resolve_inside(root: str, name: str, *, file: str | None = None) -> str:
    """The real path of `name` under the directory `root`, refusing a name that
    `paths.unsafe_path` rejects (PATH-003) and one that resolves, through symbolic links, to a
    place outside the real path of `root` (PATH-004). The file need not exist."""
    return _resolve(root, name, file)[1]


def check_tree(root: str, *, file: str | None = None, limit: int | None = None) -> None:
    """Refuse a directory tree that a reader which follows links and opens what it finds
    (tensorstore) must not be given: a symbolic link whose target lies outside the real path
    of `root` (PATH-004), and anything that is neither a regular file nor a directory, through
    links (a FIFO, socket, device, or a link loop: PATH-005), so nothing blocks or is read
    from outside. A dangling link is left alone (it reads as absent). Directories are not
    followed through links; at most `limit` entries are visited (a larger tree is checked up
    to there; default: the limits' `max_directory_entries`). `file` is how errors show
    `root`."""
    if limit is None:
        limit = limits_in_force().max_directory_entries
    shown = file or root
    real_root = _realpath(root, shown)
    stack = [root]
    seen = 0
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                if seen > limit:
                    raise FormatError(
                        "the checkpoint holds more entries than the limit",
                        rule="LIMIT-005",
                        file=shown,
                        expected=f"<= {limit}",
                    )
                where = os.path.join(shown, os.path.relpath(entry.path, root))
                try:
                    if entry.is_symlink():
                        target = _realpath(entry.path, where)
                        if not _inside(target, real_root):
                            raise FormatError(
                                f"symbolic link {entry.path!r} leads out of the checkpoint to "
                                f"{target!r}",
                                rule="PATH-004",
                                file=shown,
                            )
                        mode = os.stat(entry.path).st_mode  # through the link
                        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                            raise _not_regular(_what(mode), where)
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif not entry.is_file(follow_symlinks=False):
                        mode = entry.stat(follow_symlinks=False).st_mode
                        raise _not_regular(_what(mode), where)
                except FileNotFoundError:
                    continue  # a dangling link, or removed meanwhile
                except OSError as e:
                    if e.errno == errno.ELOOP:
                        raise _not_regular("a symbolic link loop", where) from None
                    continue


def _stat_regular(path: str, shown: str) -> os.stat_result:
    """The status of the regular file at `path` (through links, without opening it): PATH-005
    for anything else; FileNotFoundError / NotADirectoryError when nothing is there."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _not_regular("a symbolic link loop", shown) from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(_what(st.st_mode), shown)
    return st


def open_regular(path: str, *, file: str | None = None) -> int:
    """A read-only descriptor of the regular file at `path` (the caller closes it).

    Raises FileNotFoundError when nothing is there (callers decide whether that means
    "absent"), `FormatError` PATH-005 for anything but a regular file, and OSError for other
    I/O failures (permissions)."""
    shown = file or path
    _stat_regular(path, shown)  # no open of a device or socket at all
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _not_regular("not a regular file", shown) from None
        raise
    return _opened_regular(fd, shown)


def _opened_regular(fd: int, shown: str) -> int:
    """`fd`, made blocking, once `fstat` shows a regular file: the name may have been replaced
    between the check and the open (closed and PATH-005 otherwise)."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(_what(st.st_mode), shown)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _link_planted(name: str, shown: str) -> FormatError:
    return FormatError(
        f"a symbolic link was planted at {name!r} after the path was checked (the checkpoint "
        "is being changed while it is read)",
        rule="PATH-004",
        file=shown,
    )


def _refuse_link(dir_fd: int, name: str, shown: str) -> NoReturn:
    """Refuse the link `name` where the resolved path has none: a loop (which resolution left
    unresolved) is PATH-005, any other link was planted since (PATH-004)."""
    try:
        os.stat(name, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _not_regular("a symbolic link loop", shown) from None
    raise _link_planted(name, shown)


def _os_error(e: OSError, shown: str) -> OSError:
    """`e` naming the whole path `shown`, not the component a relative call was given (the
    same subclass: FileNotFoundError, PermissionError, ...)."""
    return OSError(e.errno, e.strerror, shown)


def _child_fd(dir_fd: int, name: str, shown: str, *, directory: bool) -> int:
    """`name` opened relative to the directory `dir_fd`, following no link: a link there now
    (it was none when the path was resolved) is PATH-004; a file (`directory` False) that is
    not a regular one is PATH-005 and never opened, so no device is touched."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        raise _os_error(e, shown) from None
    if stat.S_ISLNK(st.st_mode):
        _refuse_link(dir_fd, name, shown)
    if not directory and not stat.S_ISREG(st.st_mode):
        raise _not_regular(_what(st.st_mode), shown)
    try:
        return os.open(name, (_DIR_FLAGS if directory else _OPEN_FLAGS) | _NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            _refuse_link(dir_fd, name, shown)
        if e.errno in (errno.ENXIO, errno.EISDIR):
            raise _not_regular("not a regular file", shown) from None
        raise _os_error(e, shown) from None


def open_inside(root: str, name: str, *, file: str | None = None) -> int:
    """A read-only descriptor of the regular file `name` inside the directory `root`.

    The name is resolved as `resolve_inside` resolves it, and the file is then opened one path
    component at a time, each relative to its directory and following no link, so the file
    opened is the file checked: a link planted between the check and the open (a concurrent
    writer) is PATH-004, not followed. FileNotFoundError / NotADirectoryError: nothing there."""
    shown = file or os.path.join(root, name)
    real_root, full = _resolve(root, name, shown)
    if not _OPENS_RELATIVE:  # no openat here: the last component alone is not followed
        return open_regular(full, file=shown)
    parts = [p for p in os.path.relpath(full, real_root).split(os.sep) if p not in ("", ".")]
    if not parts:
        raise _not_regular("a directory", shown)
    try:
        dir_fd = os.open(real_root, _DIR_FLAGS)
    except OSError as e:
        raise _os_error(e, shown) from None
    try:
        for part in parts[:-1]:
            child = _child_fd(dir_fd, part, shown, directory=True)
            os.close(dir_fd)
            dir_fd = child
        fd = _child_fd(dir_fd, parts[-1], shown, directory=False)
    finally:
        os.close(dir_fd)
    return _opened_regular(fd, shown)


def _read_fd(fd: int, size: int) -> bytes:
    """Up to `size` bytes from the start of `fd`, in few reads, allocated once: one ``pread``
    into the bytes returned where it gives them all (a regular file under 2 GiB), else reads
    into one buffer (copied once into the bytes returned)."""
    if size < 1 << 31:
        first = os.pread(fd, size, 0)
        if len(first) == size or not first or not os.pread(fd, 1, len(first)):
            return first  # all of it, or all there is
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = os.preadv(fd, [view[got:]], got)
        if not n:
            break
        got += n
    del view
    if got < size:
        del buf[got:]
    return bytes(buf)


def read_file(
    path: str,
    *,
    limit: int,
    rule: str,
    file: str | None = None,
    error: type[FormatError] = FormatError,
) -> bytes:
    """The bytes of the regular file at `path`; a file larger than `limit` is refused with
    `rule` (as `error`, the caller's layer's class) before any byte is read (a file that grows
    while read is cut at ``limit + 1`` and refused too)."""
    shown = file or path
    return _read_bounded(open_regular(path, file=shown), limit, rule, shown, error)


def _read_bounded(fd: int, limit: int, rule: str, shown: str, error: type[FormatError]) -> bytes:
    """`read_file` on the descriptor `fd`, which it closes."""
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(
                "file larger than its size limit",
                rule=rule,
                file=shown,
                expected=f"<= {limit} bytes",
                got=size,
            )
        data = _read_fd(fd, min(size, limit) + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(
            "file grew past its size limit while read", rule=rule, file=shown, expected=limit
        )
    return data


def read_inside(
    root: str, name: str, *, limit: int, rule: str, file: str | None = None
) -> bytes | None:
    """`read_file` of `name` opened inside the directory `root` (`open_inside`); None when
    there is no such file (or it was removed meanwhile)."""
    shown = file or os.path.join(root, name)
    try:
        fd = open_inside(root, name, file=shown)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _read_bounded(fd, limit, rule, shown, FormatError)


def size_inside(root: str, name: str, *, file: str | None = None) -> int | None:
    """The size of the regular file `name` inside the directory `root`; None when there is
    none. Refused as `open_inside` refuses."""
    shown = file or os.path.join(root, name)
    try:
        fd = open_inside(root, name, file=shown)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def list_dir(path: str, *, limit: int | None = None) -> Listing:
    """The entries of the directory `path`, classified through links (a link to a directory
    is a directory; whether its target lies inside is checked when a file is opened).

    Raises FileNotFoundError / NotADirectoryError when `path` is gone or no directory,
    `FormatError` PATH-005 for a link loop in its place and LIMIT-005 for a directory of more
    than `limit` entries (default: the limits' `max_directory_entries`)."""
    if limit is None:
        limit = limits_in_force().max_directory_entries
    files: set[str] = set()
    dirs: set[str] = set()
    other: set[str] = set()
    count = 0
    try:
        it = os.scandir(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FormatError(
                "a symbolic link loop stands where a directory must be", rule="PATH-005", file=path
            ) from None
        raise
    with it:
        for entry in it:
            count += 1
            if count > limit:
                raise FormatError(
                    "directory holds more entries than the limit",
                    rule="LIMIT-005",
                    file=path,
                    expected=f"<= {limit}",
                )
            try:
                if entry.is_dir():
                    dirs.add(entry.name)
                elif entry.is_file():
                    files.add(entry.name)
                else:
                    other.add(entry.name)
            except OSError:  # a link loop, or removed meanwhile
                other.add(entry.name)
    return Listing(frozenset(files), frozenset(dirs), frozenset(other))
