"""`LocalStore`: a directory of the local file system.

Reads go through `files`, the one hardened open (regular files only, nothing outside the
directory, bounded reads); saves through `commit` (a temporary directory of the save's own,
locked with ``flock``, flushed, and renamed into place with ``renameat2`` where the file
system has it).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import FormatError
from ..limits import current as limits_in_force
from . import files
from .base import Capabilities, Listing, NewFile, Pending, Store, check_key, write_markers
from .byterange import ByteRange

if TYPE_CHECKING:
    from .inflight import BackgroundWriter

__all__ = ["LocalStore"]


def _commit() -> Any:
    """The local save protocol (`commit`), imported at the first write: reads never load it."""
    from . import commit

    return commit


class LocalStore(Store):
    """The local directory `path` (it need not exist yet); `display` is how errors name it
    (default: `path` as given). `sync`: whether a file written is flushed to disk when
    closed (False in a save's temporary directory, flushed whole at commit)."""

    capabilities = Capabilities(
        atomic_rename=True,
        conditional_create=True,
        consistent_listing=True,
        sizes_known=True,
        random_access=True,
        links=True,
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        display: str | None = None,
        sync: bool = True,
        context: Any = None,
    ) -> None:
        text = os.fspath(path)
        self.path = os.path.abspath(text)
        self.display = text if display is None else display
        self._sync = sync
        self._context = context  # a tensorstore context given by the caller, for its engine

    # -- naming -------------------------------------------------------------------------------

    def place(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        try:
            real = os.path.realpath(self.path)  # a link to a directory is that directory
        except (OSError, ValueError):
            real = self.path
        return ("file",), tuple(p for p in real.split(os.sep) if p)

    def child(self, name: str) -> LocalStore:
        return LocalStore(
            os.path.join(self.path, name),
            display=self.file(name),
            sync=self._sync,
            context=self._context,
        )

    def parent(self) -> LocalStore | None:
        up = os.path.dirname(self.path)
        if up == self.path:
            return None
        shown = os.path.dirname(self.display.rstrip(os.sep))
        return LocalStore(up, display=shown, sync=self._sync, context=self._context)

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None, rule: str = "JSON-003") -> bytes | None:
        if limit is None:
            limit = limits_in_force().max_json_bytes
        return files.read_inside(self.path, key, limit=limit, rule=rule, file=self.file(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        try:
            f = self.open_file(key)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return f.pread(length, offset)
        finally:
            f.close()

    def exists(self, key: str) -> bool:
        try:
            return files.size_inside(self.path, key, file=self.file(key)) is not None
        except FormatError:
            return True

    def size(self, key: str) -> int | None:
        return files.size_inside(self.path, key, file=self.file(key))

    def list(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        head = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        # the walk starts at the prefix's directory, which must be one of this one's
        check_key(head, file=self.file(prefix))
        start = self.child(head.rstrip("/")) if head else self
        for key in _walk(start, head, head.count("/")):
            if key.startswith(prefix):
                found.append(key)
                if len(found) > limits_in_force().max_directory_entries:
                    raise FormatError(
                        "too many files under the directory",
                        rule="LIMIT-005",
                        file=self.display,
                        expected=f"<= {limits_in_force().max_directory_entries}",
                    )
        return sorted(found)

    def list_dir(self, name: str = "") -> Listing:
        try:
            return files.list_dir(os.path.join(self.path, name) if name else self.path)
        except (FileNotFoundError, NotADirectoryError):
            return Listing(frozenset(), frozenset())

    def is_directory(self) -> bool | None:
        if not os.path.lexists(self.path):
            return False
        return True if os.path.isdir(self.path) else None

    def open_file(self, key: str) -> Any:
        from .datafile import LocalFile

        return LocalFile(files.open_inside(self.path, key, file=self.file(key)), self.file(key))

    def open_range(self, key: str) -> ByteRange | None:
        try:
            fd = files.open_inside(self.path, key, file=self.file(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ByteRange(fd, 0, os.fstat(fd).st_size, self.file(key))

    def identity(self, key: str) -> Hashable | None:
        try:
            fd = files.open_inside(self.path, key, file=self.file(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return (st.st_dev, st.st_ino)

    def os_path(self) -> str:
        return self.path

    def check_tree(self) -> None:
        files.check_tree(self.path, file=self.display)

    def tensorstore_spec(self) -> dict[str, Any]:
        """This directory as a tensorstore kvstore spec (``file`` driver)."""
        return {"driver": "file", "path": self.path.rstrip("/") + "/"}

    def tensorstore_context(self) -> Any:
        from .url import new_context

        return new_context(self._context)

    # -- writes -------------------------------------------------------------------------------

    def _target(self, key: str) -> str:
        check_key(key, file=self.file(key))
        return os.path.join(self.path, *key.split("/"))

    def set(self, key: str, value: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        _commit().write_file(self._target(key), value, sync=self._sync)

    def writer(self, key: str, *, background: BackgroundWriter | None = None) -> NewFile:
        file = _commit().NewFile(self._target(key), sync_on_close=self._sync)
        return file if background is None else background.queue(file)

    def rename(self, src: str, dst: str) -> None:
        os.replace(self._target(src), self._target(dst))

    def create(self, key: str, value: bytes) -> bool:
        try:
            file = _commit().NewFile(self._target(key), sync_on_close=self._sync, exclusive=True)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno == errno.ELOOP:  # a link stands there: something does
                return False
            raise
        try:
            file.append([value])
        finally:
            file.close()
        return True

    def delete(self, key: str) -> None:
        _commit().remove_path(self._target(key))

    def delete_prefix(self, prefix: str = "") -> None:
        if not prefix:
            _commit().remove_path(self.path)
            return
        if prefix.endswith("/"):
            _commit().remove_path(self._target(prefix.rstrip("/")))
            return
        for key in self.list(prefix):
            self.delete(key)

    def replace(self, key: str, value: bytes) -> None:
        _commit().replace_file(self._target(key), value)

    # -- the save protocol --------------------------------------------------------------------

    def check_target(self, *, overwrite: bool) -> None:
        _commit().check_target(self.path, overwrite=overwrite, shown=self.display)

    def write_path(self) -> str:
        commit = _commit()
        return commit.temporary_name(commit.final_path(self.path), 0)  # 12-digit tokens

    def begin(self, *, overwrite: bool, token: int | None = None) -> LocalPending:
        pending = _commit().begin(self.path, overwrite=overwrite, token=token, shown=self.display)
        return LocalPending(self, pending)

    def join(self, token: int, *, overwrite: bool) -> LocalPending:
        commit = _commit()
        final = commit.final_path(self.path)
        return LocalPending(
            self, commit.Pending(final, commit.temporary_name(final, token), overwrite)
        )

    def remove_temporaries(self, names: Sequence[str]) -> list[str]:
        """As the base says, with what a local save needs: a ``-replaced`` directory whose
        checkpoint is missing is renamed back (DIR-007), the temporary directory of a save
        still running is left alone (DIR-003; `commit.remove_leftovers`)."""
        found = _commit().remove_leftovers([os.path.join(self.path, n) for n in names])
        if found:
            _commit().fsync_dir(self.path)
        return sorted(self.file(os.path.basename(p)) for p in found)

    def remove_committed(self) -> bool:
        return _commit().remove_committed(self.path)


class LocalPending(Pending):
    """A save into a temporary directory of its own next to the final one (`commit`);
    `pending` is its `commit.Pending`."""

    def __init__(self, final: LocalStore, pending: Any) -> None:
        self.pending = pending
        self._final_store = LocalStore(pending.final)  # markers name the absolute path
        self.final = final.display
        self.overwrite = pending.overwrite
        self.store = LocalStore(pending.tmp, sync=False, context=final._context)

    def commit(
        self, markers: Iterable[str] = ("",), *, texts: Mapping[str, bytes] | None = None
    ) -> None:
        write_markers(self.store, self._final_store, markers, texts)
        _commit().finish(self.pending, marker=False)

    def abort(self) -> None:
        _commit().abort(self.pending)


def _walk(store: LocalStore, prefix: str, depth: int) -> Iterator[str]:
    """The relative names of everything but directories under `store` (what is no regular
    file is listed too, and refused when read: PATH-005; links to directories are not
    followed), `prefix` before each."""
    if depth > limits_in_force().max_depth:
        raise FormatError(
            "directories nested deeper than the limit",
            rule="LIMIT-001",
            file=store.display,
            expected=f"<= {limits_in_force().max_depth} levels",
        )
    listing = store.list_dir()
    yield from (prefix + name for name in listing.files | listing.other)
    for name in listing.dirs:
        if not os.path.islink(os.path.join(store.path, name)):  # a link: not followed
            yield from _walk(store.child(name), f"{prefix}{name}/", depth + 1)
