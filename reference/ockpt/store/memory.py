"""`MemoryStore`: keys and values held in this process, for tests and for checkpoints that
never touch a disk (save, inspect, load back).

Every operation takes one lock, so a listing is consistent and a save's commit (its keys
moved from the temporary prefix to the final one) is atomic for every reader.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, WriteConflictError
from ..limits import current as limits_in_force
from .base import (
    Capabilities,
    Listing,
    Pending,
    Store,
    check_key,
    refuse_existing,
    write_markers,
)

if TYPE_CHECKING:
    from .inflight import BackgroundWriter

__all__ = ["MemoryStore"]


class _Values:
    """The values of a memory store and its children, and the lock every operation takes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, bytes] = {}


class MemoryStore(Store):
    """A directory of keys in memory; `MemoryStore()` is a new, empty one."""

    capabilities = Capabilities(
        atomic_rename=True,
        conditional_create=True,
        consistent_listing=True,
        sizes_known=True,
        random_access=True,
    )

    def __init__(
        self, prefix: str = "", *, display: str = "memory:", values: _Values | None = None
    ) -> None:
        self.prefix = prefix  # "" or ending with "/"
        self.display = display
        self._values = values if values is not None else _Values()

    def place(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        return ("memory", id(self._values)), tuple(p for p in self.prefix.split("/") if p)

    def child(self, name: str) -> MemoryStore:
        return MemoryStore(
            self.prefix + name.strip("/") + "/", display=self.file(name), values=self._values
        )

    def parent(self) -> MemoryStore | None:
        if not self.prefix:
            return None
        up = self.prefix.rstrip("/").rsplit("/", 1)
        shown = self.display.rstrip("/").rsplit("/", 1)[0]
        return MemoryStore(up[0] + "/" if len(up) == 2 else "", display=shown, values=self._values)

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key, file=self.file(key))

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None, rule: str = "JSON-003") -> bytes | None:
        if limit is None:
            limit = limits_in_force().max_json_bytes
        full = self._key(key)
        with self._values.lock:
            value = self._values.data.get(full)
        if value is not None and len(value) > limit:
            raise FormatError(
                "file larger than its size limit",
                rule=rule,
                file=self.file(key),
                expected=f"<= {limit} bytes",
                got=len(value),
            )
        return value

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        full = self._key(key)
        with self._values.lock:
            value = self._values.data.get(full)
        return None if value is None else value[offset : offset + length]

    def exists(self, key: str) -> bool:
        full = self._key(key)
        with self._values.lock:
            data = self._values.data
            return full in data or any(k.startswith(full + "/") for k in data)

    def size(self, key: str) -> int | None:
        full = self._key(key)
        with self._values.lock:
            value = self._values.data.get(full)
        return None if value is None else len(value)

    def list(self, prefix: str = "") -> list[str]:
        start = self.prefix + prefix
        with self._values.lock:
            found = [k[len(self.prefix) :] for k in self._values.data if k.startswith(start)]
        if len(found) > limits_in_force().max_directory_entries:
            raise FormatError(
                "too many keys under the directory",
                rule="LIMIT-005",
                file=self.display,
                expected=f"<= {limits_in_force().max_directory_entries}",
                got=len(found),
            )
        return sorted(found)

    def list_dir(self, name: str = "") -> Listing:
        prefix = name.strip("/") + "/" if name.strip("/") else ""
        files: set[str] = set()
        dirs: set[str] = set()
        for key in self.list(prefix):
            head, sep, _ = key[len(prefix) :].partition("/")
            (dirs if sep else files).add(head)
        return Listing(frozenset(files), frozenset(dirs))

    def is_directory(self) -> bool | None:
        with self._values.lock:
            data = self._values.data
            if self.prefix and self.prefix.rstrip("/") in data:
                return None
            return any(k.startswith(self.prefix) for k in data)

    # -- writes -------------------------------------------------------------------------------

    def set(self, key: str, value: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
        else:
            data = b"".join(bytes(p) for p in value)
        full = self._key(key)
        with self._values.lock:
            self._values.data[full] = data

    def writer(self, key: str, *, background: BackgroundWriter | None = None) -> _MemoryFile:
        del background  # appends copy into memory: nothing to wait for
        return _MemoryFile(self, self._key(key))

    def rename(self, src: str, dst: str) -> None:
        old, new = self._key(src), self._key(dst)
        with self._values.lock:
            data = self._values.data
            if old not in data:
                raise FileNotFoundError(self.file(src))
            data[new] = data.pop(old)

    def create(self, key: str, value: bytes) -> bool:
        full = self._key(key)
        with self._values.lock:
            if full in self._values.data:
                return False
            self._values.data[full] = bytes(value)
            return True

    def delete(self, key: str) -> None:
        full = self._key(key)
        with self._values.lock:
            self._values.data.pop(full, None)

    def delete_prefix(self, prefix: str = "") -> None:
        start = self.prefix + prefix
        with self._values.lock:
            for k in [k for k in self._values.data if k.startswith(start)]:
                del self._values.data[k]

    # -- the save protocol --------------------------------------------------------------------

    def _sibling(self, token: int) -> MemoryStore:
        if not self.prefix:
            raise FormatError("a save needs a directory below the top", rule="DIR-001")
        name = self.prefix.rstrip("/").rsplit("/", 1)[-1]
        parent = self.parent()
        assert parent is not None
        from .commit import temporary_name

        return parent.child(temporary_name(name, token))

    def begin(self, *, overwrite: bool, token: int | None = None) -> MemoryPending:
        refuse_existing(self, overwrite=overwrite)
        from .commit import new_token

        tmp = self._sibling(new_token() if token is None else token)
        if tmp.is_directory():
            raise WriteConflictError(
                "another save uses this temporary directory", rule="DIR-003", file=tmp.display
            )
        return MemoryPending(self, tmp, overwrite)

    def join(self, token: int, *, overwrite: bool) -> MemoryPending:
        return MemoryPending(self, self._sibling(token), overwrite)

    def remove_committed(self) -> bool:
        with self._values.lock:
            data = self._values.data
            doomed = [k for k in data if k.startswith(self.prefix)]
            for k in doomed:
                del data[k]
        return bool(doomed)


class _MemoryFile:
    """A new value, visible once closed."""

    def __init__(self, store: MemoryStore, full: str) -> None:
        self._store = store
        self._full = full
        self._parts: list[bytes] | None = []

    def append(self, parts: Sequence[bytes | memoryview]) -> None:
        assert self._parts is not None, "append after close"
        self._parts.extend(bytes(p) for p in parts)

    def close(self) -> None:
        if self._parts is None:
            return
        value, self._parts = b"".join(self._parts), None
        with self._store._values.lock:
            self._store._values.data[self._full] = value


class MemoryPending(Pending):
    """A save under a temporary prefix, moved to the final one in one step."""

    def __init__(self, final: MemoryStore, tmp: MemoryStore, overwrite: bool) -> None:
        self._final = final
        self.store = tmp
        self.final = final.display
        self.overwrite = overwrite

    def commit(
        self, markers: Iterable[str] = ("",), *, texts: Mapping[str, bytes] | None = None
    ) -> None:
        write_markers(self.store, self._final, markers, texts)
        src, dst = self.store.prefix, self._final.prefix
        values = self._final._values
        with values.lock:
            data = values.data
            old = [k for k in data if k.startswith(dst)]
            if old and not self.overwrite:
                raise WriteConflictError(
                    "another save committed here while this one was writing",
                    rule="DIR-002",
                    file=self.final,
                )
            for k in old:
                del data[k]
            for k in [k for k in data if k.startswith(src)]:
                data[dst + k[len(src) :]] = data.pop(k)

    def abort(self) -> None:
        self.store.delete_prefix("")
