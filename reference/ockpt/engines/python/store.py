"""The pure-Python storage backend (``backend="python"``): OCDBT and zarr decoded from the spec.

It needs numpy, zstandard and google-crc32c only (no tensorstore, no jax). It mirrors the
tensorstore backend of `ockpt.storage`: `ArrayStore(location, storage=..., zarr_version=...,
processes=..., missing_chunks_are_errors=...)` opens the arrays of one item and
`StoredArray.read(box, dtype)` returns a future-like object whose ``result()`` is the region.
A read touches only the chunks (and inner chunks of shards) that the region overlaps.

Storage kinds (as in `ockpt.storage`):

* ``"ocdbt"``: the item's root database (``<item>/manifest.ocdbt``), whose values may lie in
  ``ocdbt.process_<N>/d/`` through base paths;
* ``"ocdbt_processes"``: the per-process databases only (no root manifest): a key is looked up in
  each ``ocdbt.process_<N>/`` in turn;
* ``"per_leaf"``: one plain zarr directory per param (``<item>/<param name>/``).

`item_keys(...)` / `key_listing(...)` list an item's storage keys (the second grouped per param,
in the form of ``schemas/ocdbt-keys.schema.json``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from . import dtypes
from ._filerange import ByteRange
from .errors import FormatError, MissingDataError, UnsupportedError, ZarrFormatError
from .limits import LIMITS
from .ocdbt.tree import Database
from .paths import array_prefix
from .zarr import ArrayMetadata, open_metadata, read_region
from .zarr.v3 import ArrayV3Metadata

__all__ = [
    "ArrayStore",
    "StoredArray",
    "KeyValueStore",
    "OcdbtStore",
    "MultiOcdbtStore",
    "DirectoryStore",
    "open_item_store",
    "item_keys",
    "key_listing",
]

_PROCESS_DIR = re.compile(r"ocdbt\.process_(\d+)")
_MAX_FILE_BYTES = LIMITS.max_chunk_bytes


def _local_path(location: Any) -> str:
    local = getattr(location, "local", None)
    if local is not None:
        return os.fspath(local)
    if hasattr(location, "spec"):  # a storage.Location for a URL
        raise UnsupportedError(
            f"{getattr(location, 'display', location)}: the python backend reads local "
            "directories only"
        )
    return os.fspath(location)


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

    def close(self) -> None:
        pass


class OcdbtStore(KeyValueStore):
    """One OCDBT database (latest generation unless `generation` is given)."""

    def __init__(self, path: str, *, root: str | None = None, generation: int | None = None):
        self.display = path
        self.db = Database(path, root=root)
        self.generation = generation

    def get(self, key: str) -> bytes | None:
        return self.db.get(key, generation=self.generation)

    def value_range(self, key: str) -> ByteRange | None:
        return self.db.value_range(key, generation=self.generation)

    def list(self, prefix: str = "") -> list[str]:
        return [
            k.decode("utf-8", "surrogateescape")
            for k in self.db.list(prefix, generation=self.generation)
        ]

    def close(self) -> None:
        self.db.close()


class MultiOcdbtStore(KeyValueStore):
    """Several databases read as one: a key is taken from the first database that holds it."""

    def __init__(self, stores: Sequence[KeyValueStore], display: str) -> None:
        self.stores = list(stores)
        self.display = display

    def get(self, key: str) -> bytes | None:
        for s in self.stores:
            value = s.get(key)
            if value is not None:
                return value
        return None

    def value_range(self, key: str) -> ByteRange | None:
        for s in self.stores:  # a large value is never inline: None means absent here
            found = s.value_range(key)
            if found is not None:
                return found
        return None

    def list(self, prefix: str = "") -> list[str]:
        keys: set[str] = set()
        for s in self.stores:
            keys.update(s.list(prefix))
        return sorted(keys, key=lambda k: k.encode("utf-8", "surrogateescape"))

    def close(self) -> None:
        for s in self.stores:
            s.close()


class DirectoryStore(KeyValueStore):
    """Files under a directory, keyed by their relative POSIX path (no key may leave it)."""

    def __init__(self, path: str, *, skip: Callable[[str], bool] | None = None) -> None:
        self.display = path
        self.root = os.path.realpath(path)
        self.skip = skip

    def _path(self, key: str) -> str | None:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or "\\" in key or "\0" in key:
            return None
        full = os.path.realpath(os.path.join(self.root, *parts))
        if os.path.commonpath([full, self.root]) != self.root:
            raise FormatError(  # not "absent": that would read as the fill value
                f"{key!r} resolves to {full!r}, outside {self.root!r} (a symbolic link leads out)",
                rule="PATH-004",
                file=os.path.join(self.display, key),
            )
        return full

    def get(self, key: str) -> bytes | None:
        full = self._path(key)
        if full is None:
            return None
        try:
            with open(full, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > _MAX_FILE_BYTES:
                    raise ZarrFormatError("file too large", rule="ZARR-003", file=full, got=size)
                return f.read(size + 1)
        except (FileNotFoundError, IsADirectoryError):
            return None  # absent (or removed meanwhile): a missing chunk or document

    def value_range(self, key: str) -> ByteRange | None:
        """The file of `key` as a `ByteRange` (for streaming a large chunk); None if absent."""
        full = self._path(key)
        if full is None or not os.path.isfile(full):
            return None
        try:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            return None  # removed meanwhile
        return ByteRange(fd, 0, os.fstat(fd).st_size, full)

    def list(self, prefix: str = "") -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            if self.skip is not None:
                dirnames[:] = [d for d in dirnames if not self.skip(rel_dir + d + "/")]
            for name in filenames:
                key = rel_dir + name
                if key.startswith(prefix) and (self.skip is None or not self.skip(key)):
                    out.append(key)
        return sorted(out)


#: The legacy strings document, kept by releases up to 0.3.x in a param's directory.
_STRINGS_DOCUMENT = "_strings.json"


def _per_leaf_skip(key: str) -> bool:
    # top-level files are the item's documents; these directories are not arrays; a file
    # `<param>/_strings.json` is the legacy strings document, never a zarr key (directories §2.1)
    return (
        "/" not in key
        or key.startswith(("array_metadatas/", "ocdbt.process_", "d/"))
        or key.endswith("/" + _STRINGS_DOCUMENT)
    )


def open_item_store(
    item_dir: str | os.PathLike, *, storage: str | None = None, processes: Sequence[int] = ()
) -> KeyValueStore:
    """The key-value view of an item's array storage (kind detected when `storage` is None)."""
    path = os.fspath(item_dir)
    if storage is None:
        if os.path.exists(os.path.join(path, "manifest.ocdbt")):
            storage = "ocdbt"
        elif any(_PROCESS_DIR.fullmatch(n) for n in os.listdir(path)):
            storage = "ocdbt_processes"
        else:
            storage = "per_leaf"
    if storage == "ocdbt":
        return OcdbtStore(path, root=path)
    if storage == "ocdbt_processes":
        if not processes:
            processes = sorted(
                int(m.group(1)) for n in os.listdir(path) if (m := _PROCESS_DIR.fullmatch(n))
            )
        return MultiOcdbtStore(
            [OcdbtStore(os.path.join(path, f"ocdbt.process_{p}"), root=path) for p in processes],
            path,
        )
    if storage == "per_leaf":
        return DirectoryStore(path, skip=_per_leaf_skip)
    raise ValueError(f"unknown storage kind {storage!r}")


def item_keys(item_dir: str | os.PathLike, **kw: Any) -> list[str]:
    """Every key of an item's array storage, sorted."""
    store = open_item_store(item_dir, **kw)
    try:
        return store.list()
    finally:
        store.close()


_METADATA_NAMES = (".zarray", "zarr.json")


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
        for m in _METADATA_NAMES:
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


class _Done:
    """A future-like object: `result()` runs the read (errors surface there)."""

    def __init__(self, fn: Callable[[], np.ndarray]) -> None:
        self._fn = fn

    def result(self) -> np.ndarray:
        return self._fn()


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

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

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
            file=self.file,
        )

    def view(self, index: Any) -> _View:
        """A lazy view of numpy basic indexing (ints, slices, Ellipsis); no bytes read."""
        return _View(self, index)

    def read(
        self,
        box: Sequence[tuple[int, int]] | None = None,
        dtype: np.dtype | None = None,
        *,
        batch: Any = None,
    ) -> _Done:
        """Read region `box` ((start, stop) per dimension; None: all) as `dtype`."""
        del batch  # the python backend reads synchronously

        def run() -> np.ndarray:
            b = [(0, n) for n in self.shape] if box is None else [tuple(x) for x in box]
            out = np.empty(tuple(e - s for s, e in b), dtype=self.dtype)
            self.read_into(out, b)
            if dtype is not None and np.dtype(dtype) != self.dtype:
                return dtypes.astype(out, np.dtype(dtype))
            return out

        return _Done(run)


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

    def read(self) -> _Done:
        def run() -> np.ndarray:
            return self.array.read(self.box).result()[self.post]

        return _Done(run)


class ArrayStore:
    """The arrays of one pytree item, read with the python backend.

    Arguments match `ockpt.storage.ArrayStore`; `context` is accepted and ignored.
    """

    #: Opening arrays one at a time costs what opening them together does, so a load opens
    #: each array when it reaches it and keeps none (memory stays flat in the leaf count).
    BULK_OPEN: ClassVar[bool] = False

    def __init__(
        self,
        location: Any,
        *,
        storage: str,
        zarr_version: int | None,
        context: Any = None,
        processes: Sequence[int] = (),
        missing_chunks_are_errors: bool = False,
    ) -> None:
        del context
        self.location = location
        self.path = _local_path(location)
        self.storage = storage
        self.zarr_version = zarr_version
        self.processes = tuple(processes)
        self.missing_chunks_are_errors = missing_chunks_are_errors
        self.kv = open_item_store(self.path, storage=storage, processes=self.processes)

    def file(self, param_name: str) -> str:
        if self.storage == "per_leaf":
            return os.path.join(self.path, param_name)
        return f"{self.path.rstrip('/')}/<ocdbt>/{param_name}"

    def list_keys(self) -> list[str]:
        return self.kv.list()

    def open(self, param_name: str) -> StoredArray:
        file = self.file(param_name)
        prefix = array_prefix(param_name, per_leaf=self.storage == "per_leaf")
        meta = open_metadata(
            self.kv.get, prefix=prefix, file=self.kv.display, zarr_version=self.zarr_version
        )
        if meta is None:
            raise MissingDataError(
                f"{file}: no zarr array for param {param_name!r} (neither .zarray nor zarr.json) "
                "[LOAD-040]"
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
        )

    def open_many(self, names: Iterable[str]) -> dict[str, StoredArray]:
        return {n: self.open(n) for n in dict.fromkeys(names)}

    def close(self) -> None:
        self.kv.close()
