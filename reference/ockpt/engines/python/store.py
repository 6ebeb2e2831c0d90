"""The python engine's arrays: OCDBT and zarr decoded from the spec (``backend="python"``).

It needs numpy, zstandard and google-crc32c only (no tensorstore, no jax). `ArrayStore(location,
fmt, zarr_version=..., missing_chunks_are_errors=...)` opens the arrays of one item and
`StoredArray.read(box, dtype)` returns a future whose ``result()`` is the region, as
`engines.contract` says. A read touches only the chunks (and inner chunks of shards) that the
region overlaps; many regions are read in parallel by `fastread`.

Where the arrays are (`layout.ItemFormat`):

* `Storage.OCDBT` with a root manifest: the item's root database (``<item>/manifest.ocdbt``),
  whose values may lie in ``ocdbt.process_<N>/d/`` through base paths;
* `Storage.OCDBT` without one: the per-process databases only: a key is looked up in each
  ``ocdbt.process_<N>/`` in turn;
* anything else: one plain zarr directory per param (``<item>/<param name>/``).

Every value is read through the item's `store.Store` (locally the hardened open of
`store.files`: regular files only, PATH-005; nothing outside the item, PATH-004).
`item_keys(...)` / `key_listing(...)` list an item's storage keys (the second grouped per
param, in the form of ``schemas/ocdbt-keys.schema.json``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ... import dtypes
from ...errors import FormatError, MissingDataError, NotACheckpointError
from ...layout import ItemFormat, Storage, detect
from ...limits import current as limits_in_force
from ...names import (
    ARRAY_METADATAS_DIR,
    OCDBT_DATA_DIR,
    STRINGS_FILE,
    ZARR2_METADATA,
    ZARR3_METADATA,
)
from ...ocdbt.tree import Database
from ...paths import array_prefix
from ...store import Store, as_store
from ...store.byterange import ByteRange
from ...store.claims import ChunkFiles
from ...store.mapping import FileMaps
from ...zarr import ArrayMetadata, open_metadata, read_region
from ...zarr.array import check_box
from ...zarr.v3 import ArrayV3Metadata
from ..contract import ImmediateFuture, ReadRequest, array_file
from . import fastread, mapped

__all__ = [
    "ArrayStore",
    "StoredArray",
    "KeyValueStore",
    "OcdbtStore",
    "MultiOcdbtStore",
    "DirectoryStore",
    "open_item_store",
    "item_format",
    "per_leaf_skip",
    "item_keys",
    "key_listing",
]


# ---------------------------------------------------------------------------------------------
# key-value stores


class KeyValueStore:
    """What the zarr decoder needs: `get(key)` (None when absent) and `list(prefix)`."""

    display: str

    def get(self, key: str) -> bytes | None:  # pragma: no cover - interface
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:  # pragma: no cover - interface
        raise NotImplementedError

    def value_range(self, key: str) -> ByteRange | None:
        """The value of `key` as a range of a file, for streaming; None where not possible."""
        return None

    def inline_value(self, key: str) -> bytes | None:
        """The value of `key` where an OCDBT node holds it inline (already in memory)."""
        return None

    def claim(self, key: str) -> None:
        """Before `key` is read: refuse it if its stored bytes are another key's (PATH-008).
        Nothing here: an OCDBT database claims each value as it reads it (OCDBT-024)."""

    def close(self) -> None:
        pass


class OcdbtStore(KeyValueStore):
    """One OCDBT database (latest generation unless `generation` is given)."""

    def __init__(
        self,
        path: str | Store,
        *,
        generation: int | None = None,
        display: str | None = None,
    ):
        self.db = Database(path, display=display)
        self.display = self.db.where()  # how errors name it
        self.generation = generation

    def get(self, key: str) -> bytes | None:
        return self.db.get(key, generation=self.generation)

    def holds(self, key: str) -> bool:
        return self.db.contains(key, generation=self.generation)

    def value_range(self, key: str) -> ByteRange | None:
        return self.db.value_range(key, generation=self.generation)

    def inline_value(self, key: str) -> bytes | None:
        return self.db.inline_value(key, generation=self.generation)

    def list(self, prefix: str = "") -> list[str]:
        return [
            k.decode("utf-8", "surrogateescape")
            for k in self.db.list(prefix, generation=self.generation)
        ]

    def close(self) -> None:
        self.db.close()


class MultiOcdbtStore(KeyValueStore):
    """Several databases read as one: a key is taken from the first database that holds it,
    by `get` and `value_range` alike (an inline value in one database is not passed over for
    another's out-of-line one)."""

    def __init__(self, stores: Sequence[OcdbtStore], display: str) -> None:
        self.stores = list(stores)
        self.display = display

    def _owner(self, key: str) -> OcdbtStore | None:
        return next((s for s in self.stores if s.holds(key)), None)

    def get(self, key: str) -> bytes | None:
        owner = self._owner(key)
        return None if owner is None else owner.get(key)

    def value_range(self, key: str) -> ByteRange | None:
        owner = self._owner(key)
        return None if owner is None else owner.value_range(key)

    def inline_value(self, key: str) -> bytes | None:
        owner = self._owner(key)
        return None if owner is None else owner.inline_value(key)

    def list(self, prefix: str = "") -> list[str]:
        keys: set[str] = set()
        for s in self.stores:
            keys.update(s.list(prefix))
        return sorted(keys, key=lambda k: k.encode("utf-8", "surrogateescape"))

    def close(self) -> None:
        for s in self.stores:
            s.close()


class DirectoryStore(KeyValueStore):
    """The values of a store's directory, keyed by their relative path (no key may leave it;
    a directory in the place of a value holds none: the key is absent, as in tensorstore)."""

    def __init__(
        self,
        store: Store,
        *,
        skip: Callable[[str], bool] | None = None,
        display: str | None = None,
    ) -> None:
        self.store = store if display is None else store.with_display(display)
        self.display = self.store.display  # how errors name it
        self.skip = skip
        self.chunk_files = ChunkFiles()  # the chunk files read, by what they are (PATH-008)

    @staticmethod
    def _valid(key: str) -> bool:
        parts = key.split("/")
        return (
            bool(key)
            and not any(p in ("", ".", "..") for p in parts)
            and not ("\\" in key or "\0" in key)
        )

    def claim(self, key: str) -> None:
        """Before the zarr key `key` is read: no other key's chunk file is the same file."""
        if self.skip is None or not self.skip(key):
            self.chunk_files.claim(self.store, key)

    def _directory(self, error: FormatError, key: str) -> bool:
        """Whether `error` refused a directory standing where the value `key` would be."""
        return error.rule == "PATH-005" and self.store.child(key).is_directory() is True

    def get(self, key: str) -> bytes | None:
        if not self._valid(key):
            return None
        try:
            self.claim(key)
            return self.store.get(key, limit=limits_in_force().max_chunk_bytes, rule="ZARR-003")
        except FormatError as e:
            if self._directory(e, key):
                return None
            raise

    def value_range(self, key: str) -> ByteRange | None:
        """The file of `key` as a `ByteRange` (for streaming a large chunk); None if absent
        or where the store has no descriptors."""
        if not self._valid(key):
            return None
        try:
            self.claim(key)
            return self.store.open_range(key)
        except FormatError as e:
            if self._directory(e, key):
                return None
            raise

    def list(self, prefix: str = "") -> list[str]:
        """Every key under the directory (a FIFO or the like too: reading it is refused)."""
        return [k for k in self.store.list(prefix) if self.skip is None or not self.skip(k)]

    def close(self) -> None:
        self.store.close()


def per_leaf_skip(key: str) -> bool:
    """Whether a key of a per-leaf item's directory is no zarr key: top-level files are the
    item's documents; these directories are not arrays; a file `<param>/_strings.json` is the
    legacy strings document (directories §2.1)."""
    return (
        "/" not in key
        or key.startswith((ARRAY_METADATAS_DIR + "/", "ocdbt.process_", OCDBT_DATA_DIR + "/"))
        or key.endswith("/" + STRINGS_FILE)
    )


def item_format(item_dir: str | os.PathLike | Store) -> ItemFormat:
    """How the pytree item in the directory `item_dir` is stored (`layout.detect`)."""
    found = detect(item_dir).item
    if found is None:
        raise NotACheckpointError(
            "not a pytree item", rule="LOAD-050", file=as_store(item_dir).display
        )
    return found


def open_item_store(
    item_dir: str | os.PathLike | Store,
    fmt: ItemFormat | None = None,
    *,
    display: str | None = None,
) -> KeyValueStore:
    """The key-value view of an item's array storage (`fmt` detected when None), in any
    store; errors name the item `display` (default: as its store shows it)."""
    store = as_store(item_dir)
    if display is not None:
        store = store.with_display(display)
    if fmt is None:
        fmt = item_format(store)
    if fmt.storage is not Storage.OCDBT:
        return DirectoryStore(store, skip=per_leaf_skip)
    if fmt.has_root_manifest:
        return OcdbtStore(store)
    return MultiOcdbtStore(
        [OcdbtStore(store.child(f"ocdbt.process_{p}")) for p in fmt.ocdbt_processes],
        store.display,
    )


def item_keys(item_dir: str | os.PathLike | Store, fmt: ItemFormat | None = None) -> list[str]:
    """Every key of an item's array storage, sorted (`fmt` detected when None)."""
    store = open_item_store(item_dir, fmt)
    try:
        return store.list()
    finally:
        store.close()


def _owner(key: str, params: dict[str, Any]) -> str | None:
    """The longest param name `n` with ``key.startswith(n + "/")`` (else ``""`` if that is a
    param): one dict lookup per ``/`` of the key, not one test per param."""
    at = key.rfind("/")
    while at >= 0:
        if key[:at] in params:
            return key[:at]
        at = key.rfind("/", 0, at)
    return "" if "" in params else None


def key_listing(keys: Iterable[str]) -> dict[str, Any]:
    """Group an item database's keys per param (``schemas/ocdbt-keys.schema.json``).

    A param is named by each key ending in ``.zarray`` or ``zarr.json`` (the name is what comes
    before ``/``; the empty name for a bare key). Every other key goes to the param with the
    longest name that prefixes it; keys that belong to none are listed under ``"unclaimed"``.
    """
    keys = sorted(set(keys))
    params: dict[str, dict[str, Any]] = {}
    for k in keys:
        for m in (ZARR2_METADATA, ZARR3_METADATA):
            if k == m or k.endswith("/" + m):
                name = k[: -len(m) - 1] if k != m else ""
                entry = params.setdefault(name, {"metadata_key": k, "chunk_keys": []})
                if entry["metadata_key"] != k:
                    entry.setdefault("extra_metadata_keys", []).append(k)
    metadata_keys = {p["metadata_key"] for p in params.values()}
    metadata_keys.update(k for p in params.values() for k in p.get("extra_metadata_keys", ()))
    unclaimed = []
    for k in keys:
        if k in metadata_keys:
            continue
        owner = _owner(k, params)
        if owner is None:
            unclaimed.append(k)
        else:
            params[owner]["chunk_keys"].append(k[len(owner) + 1 :] if owner else k)
    out: dict[str, Any] = {"params": {n: params[n] for n in sorted(params)}}
    if unclaimed:
        out["unclaimed"] = unclaimed
    return out


# ---------------------------------------------------------------------------------------------
# arrays


@dataclass
class StoredArray:
    """One zarr array of an item, opened (its metadata read; no chunk read yet)."""

    param_name: str
    file: str
    zarr_version: int
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk_shape: tuple[int, ...]
    metadata: ArrayMetadata = field(repr=False)
    _store: KeyValueStore = field(repr=False)
    _prefix: str = field(repr=False, default="")
    _missing: str = field(repr=False, default="fill")
    #: What the chunk keys (`_prefix` + chunk key) are relative to, for the file an error about
    #: one chunk names: the item's directory (per-leaf zarr), the database's manifest (OCDBT).
    _keys_root: str = field(repr=False, default="")

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # a Python int: no numpy call per leaf

    def read_into(
        self, out: np.ndarray, box: Sequence[tuple[int, int]] | None = None
    ) -> np.ndarray:
        """Fill the preallocated `out` (stored dtype, region shape) with region `box`."""
        return read_region(
            self.metadata,
            self._store.get,
            out,
            box,
            prefix=self._prefix,
            missing=self._missing,  # type: ignore[arg-type]
            file=self._keys_root,
        )

    def map(self, maps: FileMaps) -> np.ndarray:
        """The whole array as a read-only view of its file's pages (`mapped.map_array`);
        `MapRefused` where it is not one raw value in a local file."""
        return mapped.map_array(self, maps)

    def view(self, index: Any) -> _View:
        """A lazy view of numpy basic indexing (ints, slices, Ellipsis); no bytes read."""
        return _View(self, index)

    def read_regions(
        self, requests: Iterable[ReadRequest], *, max_in_flight: int, tile_bytes: int
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        """`fastread.read_regions`: each chunk decoded once, in a thread per core (`tile_bytes`
        does not apply: outputs are filled chunk by chunk)."""
        del tile_bytes
        return fastread.read_regions(requests, max_in_flight=max_in_flight)

    def read(
        self,
        box: Sequence[tuple[int, int]] | None = None,
        dtype: np.dtype | None = None,
        *,
        batch: Any = None,
    ) -> ImmediateFuture:
        """Read region `box` ((start, stop) per dimension; None: all) as `dtype`."""
        del batch  # the python engine reads when asked for the result

        def run() -> np.ndarray:
            b = check_box(self.metadata, box, self.file)
            if fastread.follows_stored_chunks(self.metadata, b):  # a grid too large to walk
                request = ReadRequest(self, tuple(b))  # type: ignore[arg-type]
                ((_, out),) = fastread.read_regions([request], max_in_flight=fastread.workers())
            else:  # each chunk decoded whole, in this thread
                out = np.empty(tuple(e - s for s, e in b), dtype=self.dtype)
                self.read_into(out, b)
            if dtype is not None and np.dtype(dtype) != self.dtype:
                return dtypes.astype(out, np.dtype(dtype))
            return out

        return ImmediateFuture(run)


class _View:
    """`StoredArray.view(index)`: reads the bounding box of the index, then applies it."""

    def __init__(self, array: StoredArray, index: Any) -> None:
        self.array = array
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            at = next(k for k, i in enumerate(index) if i is Ellipsis)
            fill = len(array.shape) - (len(index) - 1)
            index = index[:at] + (slice(None),) * fill + index[at + 1 :]
        index = index + (slice(None),) * (len(array.shape) - len(index))
        if len(index) != len(array.shape):
            raise IndexError(f"too many indices for an array of rank {len(array.shape)}")
        box, post = [], []
        for i, n in zip(index, array.shape, strict=True):
            if isinstance(i, slice):
                r = range(*i.indices(n))
                if len(r) == 0:
                    box.append((0, 0))
                    post.append(slice(0, 0))
                    continue
                lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                box.append((lo, hi))
                stop = r[-1] - lo + (1 if r.step > 0 else -1)
                post.append(slice(r[0] - lo, stop if stop >= 0 else None, r.step))
            else:
                k = int(i)
                if not -n <= k < n:
                    raise IndexError(f"index {k} is out of bounds for size {n}")
                k %= n
                box.append((k, k + 1))
                post.append(0)
        self.box, self.post = box, tuple(post)

    def read(self) -> ImmediateFuture:
        def run() -> np.ndarray:
            return self.array.read(self.box).result()[self.post]

        return ImmediateFuture(run)


class ArrayStore:
    """The arrays of one pytree item, read by the python engine (`engines.contract`).

    `location` is a `store.Store` (or a local path; a URL's objects are read by ranged
    requests); `fmt` says where the arrays are
    (module docstring); `fmt` is detected (`layout.detect`) when None. `zarr_version` is 2 or
    3, or None to find out per array. With `missing_chunks_are_errors`, an absent chunk is an
    error (LOAD-041), not the fill value.
    """

    #: Opening arrays one at a time costs what opening them together does, so a load opens
    #: each array when it reaches it and keeps none (memory stays flat in the leaf count).
    BULK_OPEN: ClassVar[bool] = False

    def __init__(
        self,
        location: Store | str | os.PathLike[str],
        fmt: ItemFormat | None = None,
        *,
        zarr_version: int | None = None,
        missing_chunks_are_errors: bool = False,
    ) -> None:
        self.location = as_store(location)
        self.fmt = fmt if fmt is not None else item_format(self.location)
        self.zarr_version = zarr_version
        self.missing_chunks_are_errors = missing_chunks_are_errors
        self._per_leaf = self.fmt.storage is not Storage.OCDBT
        # OCDBT: every array's errors name the one manifest (`array_file`), made once
        self._file = None if self._per_leaf else array_file(self.location, self.fmt, "")
        self.kv = open_item_store(self.location, self.fmt)

    def metadata_store(self, count: int) -> _WalkedMetadata | None:
        """For the metadata of `count` arrays (from `_WALK_FROM` on) of an item's root OCDBT
        database: a store that finds every array's zarr metadata key by one walk of the
        B+tree (`_WalkedMetadata`), not by a lookup per array; None otherwise."""
        if count < _WALK_FROM or not isinstance(self.kv, OcdbtStore):
            return None
        return _WalkedMetadata(self, self.kv)

    def file(self, param_name: str) -> str:
        """Where errors say the array lives (`contract.array_file`)."""
        if self._file is not None:
            return self._file
        return array_file(self.location, self.fmt, param_name)

    def list_keys(self) -> list[str]:
        return self.kv.list()

    def open(self, param_name: str) -> StoredArray:
        return self._open(param_name, self.kv.get)

    def _open(self, param_name: str, get: Callable[[str], bytes | None]) -> StoredArray:
        """`open`, the array's zarr metadata document read by `get`."""
        file = self.file(param_name)
        prefix = array_prefix(param_name, per_leaf=self._per_leaf)
        meta = open_metadata(
            get, prefix=prefix, file=self.kv.display, zarr_version=self.zarr_version
        )
        if meta is None:
            raise MissingDataError(
                f"no zarr array for param {param_name!r} "
                f"(neither {ZARR2_METADATA} nor {ZARR3_METADATA})",
                rule="LOAD-040",
                file=file,
            )
        chunk = meta.chunk_shape
        if isinstance(meta, ArrayV3Metadata) and meta.sharding is not None:
            chunk = meta.sharding.chunk_shape
        return StoredArray(
            param_name,
            file,
            meta.zarr_format,
            meta.shape,
            meta.numpy_dtype if meta.numpy_dtype.isnative else meta.numpy_dtype.newbyteorder("="),
            chunk,
            meta,
            self.kv,
            prefix,
            "error" if self.missing_chunks_are_errors else "fill",
            self.kv.display if self._per_leaf else file,
        )

    def open_many(self, names: Iterable[str]) -> dict[str, StoredArray]:
        return {n: self.open(n) for n in dict.fromkeys(names)}

    def close(self) -> None:
        self.kv.close()


#: `ArrayStore.metadata_store` walks the B+tree once for the metadata of this many arrays or
#: more (fewer: a lookup each, before the database indexes its keys).
_WALK_FROM = 256

#: The keys of zarr metadata documents end so (or are so, for the empty param name).
_METADATA_KEYS = (ZARR2_METADATA.encode(), ZARR3_METADATA.encode())
_METADATA_ENDS = tuple(b"/" + k for k in _METADATA_KEYS)


def _metadata_entries(nodes: Iterable[tuple[bytes, Any]]) -> dict[bytes, Any]:
    """Full key -> leaf entry of every zarr metadata key of the leaf `nodes` ((key prefix,
    node), `Database.leaf_nodes`): one comprehension, not a generator's step per key."""
    ends, bare = _METADATA_ENDS, _METADATA_KEYS
    return {
        k: e
        for prefix, node in nodes
        for e in node.entries
        if (k := prefix + e.key).endswith(ends) or k in bare  # b"" + key: the key itself
    }


class _WalkedMetadata:
    """`ArrayStore.metadata_store`: arrays opened as the store opens them, each zarr metadata
    document taken from one walk of the root database's B+tree (every metadata key with its
    leaf entry; the value read, out-of-line ones claimed, as a lookup would). A walk that
    meets a fault leaves each array to the store's own lookup, which names the fault.

    The arrays of a model repeat a few metadata documents: the first array of each (by its
    key's name and bytes) is opened by the store, and `open` gives that array for every
    other array with the same document (the contract's metadata store: an array it opens is
    for its shape, dtype, chunks and file, all the same; its param name is the first's), so
    an open costs a key lookup, not an array made per param."""

    def __init__(self, store: ArrayStore, kv: OcdbtStore) -> None:
        self.store = store
        self.kv = kv
        self._entries: dict[bytes, Any] | None = None
        # the array opened first for each (metadata key name, document bytes)
        self._opened: dict[tuple[str, bytes], StoredArray] = {}
        self._names = {2: (ZARR2_METADATA,), 3: (ZARR3_METADATA,)}.get(
            store.zarr_version, (ZARR2_METADATA, ZARR3_METADATA)
        )  # `open_metadata`'s order
        try:
            self._entries = _metadata_entries(kv.db.leaf_nodes(generation=kv.generation))
        except FormatError:
            pass

    def _get(self, key: str) -> bytes | None:
        """The value of the metadata key `key` (`KeyValueStore.get`), from the walk."""
        assert self._entries is not None
        k = key.encode("utf-8")  # as `Database.get` makes the key
        entry = self._entries.get(k)
        return None if entry is None else self.kv.db.read_value(entry, key=k)

    def open(self, param_name: str) -> StoredArray:
        if self._entries is None:
            return self.store.open(param_name)
        prefix = array_prefix(param_name)
        for name in self._names:  # the document `open_metadata` finds first
            k = (prefix + name).encode("utf-8")  # as `_get` makes the key
            entry = self._entries.get(k)
            if entry is not None:
                break
        else:
            return self.store._open(param_name, self._get)  # none: the store names the fault
        data = self.kv.db.read_value(entry, key=k)
        first = self._opened.get((name, data))
        if first is None:
            first = self._opened[(name, data)] = self.store._open(param_name, self._get)
        return first

    def close(self) -> None:
        """Drop the walked entries (the store and its database stay open: they are the
        item's)."""
        self._entries = None
        self._opened.clear()
