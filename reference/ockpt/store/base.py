"""The store contract: what every place a checkpoint's bytes live must do, and say it can do.

A `Store` is a directory of keys (relative ``/``-separated names) with bounded reads (whole,
by byte range, many at once), listings, writes (whole values and appended files), deletion,
and a save protocol (`begin` ... `Pending.commit`) that commits the way the store allows:
by an atomic rename where it has one, by ``commit_success.txt`` written last where it does
not (spec/writing.md §6). `child` narrows a store to a subdirectory; children share their
parent's resources (descriptors, tensorstore context) and are closed with it.

Every implementation passes the shared contract tests (tests/store/test_store_contract.py) on
every capability it declares in `Capabilities`.
"""

from __future__ import annotations

import abc
import copy
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import FormatError, UnsupportedError, WriteConflictError
from ..names import COMMIT_FILE, TMP_MARKER
from ..paths import check_relative

if TYPE_CHECKING:
    from .inflight import BackgroundWriter

__all__ = [
    "Capabilities",
    "Listing",
    "NewFile",
    "Pending",
    "Store",
    "check_key",
    "is_url",
]


@dataclass(frozen=True)
class Capabilities:
    """What a store can do beyond the contract every store meets.

    Attributes:
        atomic_rename: a directory can take its final name in one atomic step, so a save
            commits by a rename and a name without the temporary marker is complete; without
            it a directory is complete once its ``commit_success.txt`` exists (directories §7).
        conditional_create: `create` writes a key only where none exists, atomically.
        consistent_listing: a listing made after a write returns shows it.
        sizes_known: `size` answers from the store's metadata, without reading the value.
        random_access: reading a byte range costs a system call or a copy, not a request:
            a reader may read many small ranges one after another (ockpt's own decoders do);
            behind a network, tensorstore's engine batches them.
        links: the store can hold symbolic links and special files (local file systems),
            which `check_tree` refuses before a reader that follows them is given the tree.
    """

    atomic_rename: bool
    conditional_create: bool
    consistent_listing: bool
    sizes_known: bool
    random_access: bool
    links: bool = False


@dataclass(frozen=True)
class Listing:
    """The names directly in a directory: regular files, subdirectories, and anything else
    (FIFOs, sockets, devices, broken or looping links), which is never read."""

    files: frozenset[str]
    dirs: frozenset[str]
    other: frozenset[str] = frozenset()

    @property
    def names(self) -> frozenset[str]:
        """Every name, whatever it is."""
        return self.files | self.dirs | self.other


class NewFile(Protocol):
    """A file being written: buffers appended in order, then closed (its value visible to
    readers of the store once closed, or once the save commits)."""

    def append(self, parts: Sequence[bytes | memoryview]) -> None: ...

    def close(self) -> None: ...


def is_url(path: str) -> bool:
    """True for ``scheme://...`` (``file://`` included)."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def check_key(key: str, *, file: str | None = None) -> str:
    """`key` itself when it cannot leave the store (PATH-003, `paths.unsafe_path`): no absolute
    path, no ``..`` segment, no NUL (empty and ``.`` segments add nothing, as in Orbax's
    names)."""
    check_relative(key, file=file)
    return key


class Store(abc.ABC):
    """A directory of keys: local, behind a URL, or in memory.

    Reads are bounded: `get` refuses a value larger than its `limit` before it is fetched
    whole; listings are bounded in entries (LIMIT-005). A key that would leave the store
    (``..``, absolute, NUL: PATH-003; a link leading out: PATH-004) and a special file in the
    place of a value (PATH-005) are refused. A store's failure to answer (unreachable, refused,
    past its deadline) is an `OSError` naming the key.
    """

    #: How errors and listings name this directory (as the user gave it).
    display: str
    capabilities: Capabilities

    # -- naming -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The last component of the directory's path."""
        return self.display.rstrip("/").rsplit("/", 1)[-1]

    def file(self, key: str) -> str:
        """How errors name the key `key` of this directory."""
        if not key or not self.display:
            return key or self.display
        return self.display + key if self.display.endswith("/") else f"{self.display}/{key}"

    def with_display(self, display: str) -> Store:
        """This store, named `display` in errors (the same directory and resources)."""
        named = copy.copy(self)
        named.display = display
        return named

    @abc.abstractmethod
    def child(self, name: str) -> Store:
        """The subdirectory `name` (which may contain ``/``) as a store of its own, sharing
        this store's resources."""

    @abc.abstractmethod
    def parent(self) -> Store | None:
        """The directory holding this one (None at the top of the store's namespace)."""

    # -- reads --------------------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, key: str, *, limit: int | None = None, rule: str = "JSON-003") -> bytes | None:
        """The value of `key`, or None when there is none; a value larger than `limit` (default:
        the limits' `max_json_bytes`) is refused with `rule` before it is read whole."""

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        """Bytes [offset, offset + length) of `key` (short, or empty, where the value ends
        earlier, like ``pread``); None when there is no such key."""

    def get_many(self, requests: Sequence[tuple[str, int, int]]) -> list[bytes | None]:
        """`get_range` of each (key, offset, length), in order; stores that can, ask for them
        all at once."""
        return [self.get_range(key, offset, length) for key, offset, length in requests]

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether `key` names something (a directory or special file in its place counts:
        reading it reports why)."""

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """The size of the value of `key`, None when there is none; where the capability
        `sizes_known` is False an `UnsupportedError` (only a read would tell)."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Every key (relative to this directory) that starts with `prefix`, sorted; at most
        `limits_in_force().max_directory_entries` (LIMIT-005). Keys of special files are listed too
        (reading them is refused, PATH-005)."""

    @abc.abstractmethod
    def list_dir(self, name: str = "") -> Listing:
        """The names directly in the subdirectory `name` (this directory when empty); an
        empty listing where there is none."""

    @abc.abstractmethod
    def is_directory(self) -> bool | None:
        """True when this directory exists (holds anything), False when nothing is there,
        None when something that is no directory stands in its place (a file)."""

    def open_file(self, key: str) -> Any:
        """`key` as a `datafile.DataFile`, read a byte range at a time; FileNotFoundError
        when there is none."""
        return RangedFile(self, key)

    def open_range(self, key: str) -> Any:
        """`key` as a `ByteRange` on a descriptor of its own (streamed reads), None where
        the store has no descriptors or there is no such key."""
        return None

    def identity(self, key: str) -> Hashable | None:
        """What the value `key` is, the same for every name of it (a local file's device and
        inode, whether reached through a hard link or a link inside the directory); None when
        there is no such key or every key is a value of its own (objects)."""
        return None

    def tensorstore_spec(self) -> dict[str, Any] | None:
        """This directory as a tensorstore kvstore spec; None where tensorstore cannot reach
        it (a store in this process's memory)."""
        return None

    def tensorstore_context(self) -> Any:
        """The tensorstore context for this store's reads; None: a new one of the engine's."""
        return None

    @abc.abstractmethod
    def place(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """Where this directory is, as (the namespace it lives in, its path components there):
        two stores name the same directory when both are equal, and one lies inside the
        other when its namespace is the same and its components start with the other's
        (`overlaps`)."""

    def overlaps(self, other: Store) -> bool:
        """Whether this directory and `other` are the same or one lies inside the other (a
        copy from one into the other would read what it writes, or clear what it reads)."""
        (mine, a), (theirs, b) = self.place(), other.place()
        return mine == theirs and (a[: len(b)] == b or b[: len(a)] == a)

    def os_path(self) -> str | None:
        """This directory's path in the operating system's file system, for libraries that
        open files by name (memory maps); None where it is no local directory."""
        return None

    def check_tree(self) -> None:
        """Refuse a tree that a reader which follows links and opens what it finds
        (tensorstore) must not be given (PATH-004, PATH-005); nothing to do where the store
        holds no links (`Capabilities.links` False)."""
        return None

    # -- writes -------------------------------------------------------------------------------

    @abc.abstractmethod
    def set(self, key: str, value: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        """Write the value of `key` whole (replacing one there; parents created)."""

    @abc.abstractmethod
    def writer(self, key: str, *, background: BackgroundWriter | None = None) -> NewFile:
        """A new file at `key`, appended to and then closed. With `background`, the appends
        and the close run on its thread where they would make the caller wait (a local
        file's system calls); a store whose writes are asynchronous already ignores it."""

    def rename(self, src: str, dst: str) -> None:
        """Give the value `src` the name `dst` in one step, replacing a value there. Needs the
        capability `atomic_rename`."""
        raise UnsupportedError(f"{self.file(src)}: this store cannot rename")

    def create(self, key: str, value: bytes) -> bool:
        """Write `key` only where it does not exist, atomically; False when it did. Needs the
        capability `conditional_create`."""
        raise UnsupportedError(f"{self.file(key)}: this store cannot create conditionally")

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the value of `key` (no error when there is none)."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str = "") -> None:
        """Remove every key starting with `prefix` (all of this directory when empty)."""

    def flush(self) -> None:
        """Wait for every write this store has in flight (raising the first failure)."""
        return None

    def replace(self, key: str, value: bytes) -> None:
        """Write a small value whole or not at all, readers seeing the old or the new one."""
        self.set(key, value)

    # -- the save protocol --------------------------------------------------------------------

    def check_target(self, *, overwrite: bool) -> None:
        """Refuse a save to this directory before anything is written: a name carrying the
        temporary marker or a file in its place (DIR-001), a checkpoint there without
        `overwrite` (DIR-002)."""
        if TMP_MARKER in self.name:
            raise FormatError(
                f"a checkpoint name must not contain {TMP_MARKER!r}",
                rule="DIR-001",
                file=self.display,
            )
        refuse_existing(self, overwrite=overwrite)

    def write_path(self) -> str:
        """The directory a save here writes into, as the store's own namespace names it (the
        longest name a save uses): path-length limits are checked against it."""
        return self.display

    @abc.abstractmethod
    def begin(self, *, overwrite: bool, token: int | None = None) -> Pending:
        """Start a save of a checkpoint to this directory: refuse what must not be replaced
        (DIR-001, DIR-002 without `overwrite`), and return where to write. `token` names the
        save for the other processes of a multi-process save (`join`)."""

    @abc.abstractmethod
    def join(self, token: int, *, overwrite: bool) -> Pending:
        """The save `token` that another process began here: where this process writes its
        part (nothing is created, checked or committed by a joining process)."""

    def remove_temporaries(self, names: Sequence[str]) -> list[str]:
        """Remove what unfinished saves and removals left in this directory under `names`
        (names carrying the temporary marker); returns those handled, as `file` names them."""
        for name in names:
            self.delete_prefix(name.strip("/") + "/")
            self.delete(name)
        return sorted(self.file(n) for n in names)

    def remove_committed(self) -> bool:
        """Remove this committed directory (a step) so that no reader sees it half removed
        (DIR-005); False when it was gone already."""
        if not self.is_directory():
            return False
        self.delete(COMMIT_FILE)  # from here on no reader takes it as committed
        self.delete_prefix("")
        return True

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release what this store holds (descriptors, databases); reads after it reopen."""
        return None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display!r})"


class Pending(abc.ABC):
    """A save in progress: `store` is where its files go; `commit` makes it a checkpoint at
    its final place, `abort` removes what it wrote."""

    #: Where the save writes (a temporary directory, or the final one where there is no
    #: rename), and how errors name the checkpoint once committed.
    store: Store
    final: str
    overwrite: bool

    @abc.abstractmethod
    def commit(
        self, markers: Iterable[str] = ("",), *, texts: Mapping[str, bytes] | None = None
    ) -> None:
        """Commit once every file is written: a ``commit_success.txt`` in each directory of
        `markers` (relative to the checkpoint; ``""`` is the checkpoint itself), deepest first,
        after every other file; then, where the store renames, the rename. A marker holds
        `texts[directory]` where given (a copy keeps its source's), else `marker_text`."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove what this save wrote (never a committed checkpoint)."""


def write_markers(
    store: Store,
    final: Store,
    markers: Iterable[str],
    texts: Mapping[str, bytes] | None,
) -> None:
    """Write the ``commit_success.txt`` of each directory of `markers` into `store`, deepest
    first, each holding `texts[directory]` or the sentence naming its place in `final`."""
    dirs = {m.strip("/") for m in markers}
    for d in sorted(dirs, key=lambda d: (-d.count("/") - bool(d), d)):
        text = (texts or {}).get(d)
        if text is None:
            text = commit_text(final.file(d)).encode()
        store.set(f"{d}/{COMMIT_FILE}" if d else COMMIT_FILE, text)


def commit_text(final: str) -> str:
    """The informational content of ``commit_success.txt`` (DIR-004)."""
    return f"Checkpoint commit was successful to {final}"


def refuse_existing(store: Store, *, overwrite: bool) -> None:
    """DIR-002 / DIR-001 for a save to a directory of a store without rename: objects there
    are refused without `overwrite`; a file in the place of the directory always."""
    state = store.is_directory()
    if state is None:
        raise FormatError(
            "the checkpoint path exists and is not a directory", rule="DIR-001", file=store.display
        )
    if state and not overwrite:
        raise WriteConflictError(
            "a checkpoint already exists there; pass overwrite=True to replace it",
            rule="DIR-002",
            file=store.display,
        )


class RangedFile:
    """The value `key` of a store with no descriptors, each range read by a request (a
    `datafile.DataFile`)."""

    def __init__(self, store: Store, key: str) -> None:
        self.store = store
        self.key = key
        self.display = store.file(key)
        self.identity = None  # an object has one name
        self.size: int | None = store.size(key) if store.capabilities.sizes_known else None
        if self.size is None and not store.exists(key):
            raise FileNotFoundError(self.display)

    def pread(self, length: int, offset: int) -> bytes:
        data = self.store.get_range(self.key, offset, length)
        return b"" if data is None else data  # None: deleted since it was opened

    def preadv(self, view: memoryview, offset: int) -> int:
        data = self.pread(len(view), offset)
        view[: len(data)] = data
        return len(data)

    def byte_range(self, offset: int, length: int) -> None:
        return None

    def close(self) -> None:
        return None
