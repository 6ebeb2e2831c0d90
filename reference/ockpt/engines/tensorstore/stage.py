"""Many small arrays of an OCDBT database, read by tensorstore through a memory stage.

tensorstore's OCDBT reader checks every entry of a B+tree node on each key it looks up, and
Orbax writes the keys of a tree of small arrays into one leaf node, so reading N arrays one
lookup at a time is quadratic in N. `store.ArrayStore` hands such arrays to a `Stage`: ockpt's
own OCDBT decoder lists the keys once, and each array's stored values are copied into a
tensorstore memory kvstore just before it is read (and dropped after), where tensorstore opens
and decodes it as it would in the database. Part of the tensorstore engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import OckptError
from ...ocdbt.tree import Database
from ...store import url as store_url

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = ["Stage", "StagedArray", "StagedRead"]


class Stage:
    """Small arrays of an OCDBT database, read by tensorstore from a copy of their stored
    values in a memory kvstore.

    tensorstore checks every entry of a B+tree node on each key it looks up in the node, and
    Orbax writes the keys of a tree of small arrays into one leaf node: reading N arrays costs
    about 3 N lookups of O(N) each (a second a key at a million keys). ockpt's own OCDBT decoder
    lists the keys once; the stored values of an array are copied into the stage before it is
    read and dropped when no read of it is in flight, so the stage holds the values of the
    reads in flight only. tensorstore still decodes the zarr arrays (codecs, shards, fill
    values) as it does from the database."""

    def __init__(self, db: Database, *, max_array_bytes: int) -> None:
        ts = store_url.import_tensorstore()
        self.db = db  # its value reads claim their stored bytes (`Database.claim`)
        self.max_array_bytes = max_array_bytes
        self.context = ts.Context(
            {
                "cache_pool": {"total_bytes_limit": 0},
                "cache_pool#chunks": {"total_bytes_limit": 0},
            }
        )
        self.kv = ts.KvStore.open({"driver": "memory"}, context=self.context).result()
        self.lock = threading.Lock()  # over the counts of reads in flight of its arrays

    def num_keys(self) -> int:
        """The number of keys in the database (its latest version), as its manifest says."""
        return self.db.version().root.statistics.num_keys

    def find(self, prefixes: dict[bytes, str]) -> dict[bytes, list[tuple[bytes, Any]]]:
        """The keys and leaf entries under each of `prefixes` (array prefixes), for those whose
        stored values come to at most `max_array_bytes` and that share no key with another
        (nested param names)."""
        found: dict[bytes, list[tuple[bytes, Any]]] = {}
        size: dict[bytes, int] = {}
        shared: set[bytes] = set()
        large: set[bytes] = set()
        for key, entry in self.db.entries():
            owner = None
            i = key.find(b"/")
            while i >= 0:
                if key[: i + 1] in prefixes:
                    if owner is not None:
                        shared.update((owner, key[: i + 1]))
                    owner = key[: i + 1]
                i = key.find(b"/", i + 1)
            if owner is None or owner in large:
                continue
            size[owner] = size.get(owner, 0) + entry.value_length
            if size[owner] > self.max_array_bytes:
                large.add(owner)
                found.pop(owner, None)
                continue
            found.setdefault(owner, []).append((key, entry))
        return {p: e for p, e in found.items() if p not in shared}

    def put(self, entries: Sequence[tuple[bytes, Any]]) -> None:
        futures = [self.kv.write(key, self.db.read_value(e, key=key)) for key, e in entries]
        for f in futures:
            f.result()

    def drop(self, keys: Iterable[bytes]) -> None:
        futures = [self.kv.write(key, None) for key in keys]
        for f in futures:
            f.result()


class StagedArray:
    """The reads of an array through a `Stage`: before a read its stored values are copied in
    and tensorstore opens it there; both are dropped when no read of it is in flight. A read
    the stage cannot give (a value ockpt cannot read, a chunk tensorstore cannot decode) is made
    again from the database, so that its error is the one tensorstore gives without the
    stage."""

    def __init__(
        self,
        owner: Any,  # the `store.ArrayStore` that opened the arrays
        stage: Stage,
        version: int,
        entries: list[tuple[bytes, Any]],
    ) -> None:
        self.owner = owner
        self.stage = stage
        self.version = version
        self.entries = entries
        self._direct: ts.TensorStore | None = None
        self.store: ts.TensorStore | None = None
        self.readers = 0
        self.failed = False

    def direct(self, array: Any) -> ts.TensorStore:
        """The array opened in the database itself."""
        if self._direct is None:
            name = array.param_name
            self._direct = self.owner._open_direct([name])[name]._store
        return self._direct

    def _open(self, array: Any) -> ts.TensorStore:
        self.stage.put(self.entries)
        spec = self.owner._staged_spec(array.param_name, self.version)
        ts = store_url.import_tensorstore()
        store = ts.open(spec, read=True, context=self.stage.context).result()
        if tuple(store.shape) != array.shape or np.dtype(store.dtype.numpy_dtype) != array.dtype:
            raise ValueError("not the array opened before")
        return store

    def read(
        self,
        array: Any,
        box: Sequence[tuple[int, int]],
        dtype: np.dtype | None,
        batch: ts.Batch | None,
    ) -> Any:
        with self.stage.lock:
            if not self.failed and self.readers == 0:
                try:
                    self.store = self._open(array)
                except (OckptError, OSError, ValueError, TypeError):
                    self.failed = True
                    self.stage.drop(key for key, _ in self.entries)
            store = None if self.failed else self.store
            if store is not None:
                self.readers += 1
        if store is None:
            return array._read_from(self.direct(array), box, dtype, batch)
        try:
            future = array._read_from(store, box, dtype, batch)
        except ValueError:
            self._release()
            return array._read_from(self.direct(array), box, dtype, batch)
        return StagedRead(
            future, self._release, lambda: array._read_from(self.direct(array), box, dtype, None)
        )

    def _release(self) -> None:
        with self.stage.lock:
            self.readers -= 1
            if self.readers == 0:
                self.store = None
                self.stage.drop(key for key, _ in self.entries)


class StagedRead:
    """A read from a `Stage`, made again by `retry` when it fails."""

    def __init__(self, future: Any, release: Callable[[], None], retry: Callable[[], Any]):
        self._future = future
        self._release: Callable[[], None] | None = release
        self._retry = retry

    def result(self) -> Any:
        try:
            return self._future.result()
        except ValueError:
            return self._retry().result()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()
