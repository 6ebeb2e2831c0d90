"""The tensorstore engine: the arrays of a pytree item read through tensorstore's drivers.

A pytree item keeps each array as a zarr array (v2 or v3) named by its param name, either

* inside an OCDBT database at the item root (`manifest.ocdbt`; since 0.4.4 a merge of the
  per-process databases `ocdbt.process_<N>/`, before that one database with many
  generations: tensorstore reads the latest), or
* inside the per-process databases only (`ocdbt.process_<N>/` with no root manifest): the
  zarr metadata is in one of them and each chunk in the database of the process that wrote it,
* or in a plain zarr directory per leaf (`<param name>/.zarray` or `zarr.json`).

The item is a `store.Store` that tensorstore can reach: a local directory or any kvstore
URL (``gs://``, ``s3://``, ``memory://``); an in-process `MemoryStore` is the python engine's.
`ArrayStore` opens the arrays of one item; `StoredArray` reads
regions of one array, touching only the chunks a region overlaps; `read_tiled` runs many
reads concurrently, batched, with a bound on reads in flight (both as `engines.contract`
says). Many small arrays of an OCDBT database are read through a `stage.Stage`
(tensorstore's key lookups in a large B+tree node cost time in proportion to the node: one
per array made loading a tree of many small arrays quadratic).

tensorstore follows links and opens whatever a key names, so a local item is checked before
it is handed over (`Store.check_tree`: no link leading out, PATH-004; nothing but regular
files and directories, PATH-005). Nothing here imports jax; tensorstore is imported on first
use (`store.import_tensorstore`, looked up when called).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ... import dtypes
from ...errors import (
    MissingDataError,
    OckptError,
    UnsupportedError,
    ZarrFormatError,
)
from ...layout import ItemFormat, Storage
from ...limits import check_allocation
from ...names import ZARR2_METADATA, ZARR3_METADATA
from ...ocdbt.tree import Database
from ...paths import array_prefix
from ...store import Store, deadline
from ...store import url as store_url
from ...store.claims import ChunkFiles
from ...zarr._common import check_extent
from ...zarr.array import missing_chunk
from ..contract import (
    DEFAULT_MAX_IN_FLIGHT,
    TILE_BYTES,
    ImmediateFuture,
    ReadRequest,
    array_file,
    tiles,
)
from .stage import Stage, StagedArray

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = ["ArrayStore", "StoredArray", "read_tiled", "chunk_reads"]

#: `ArrayStore.open_many` keeps at most this many tensorstore opens in flight.
_OPEN_IN_FLIGHT = 256
#: An array whose grid has more cells than this, and fewer stored, is read by stored cell.
_SPARSE_GRID = 1 << 16
#: Opening at least this many arrays of a local OCDBT database at once reads those of at most
#: `_STAGE_ARRAY_BYTES` stored through a `Stage` (`stage`), unless the database holds more
#: than `_STAGE_KEYS_PER_ARRAY` keys per array opened (arrays of many chunks: its keys are not
#: listed to find the few small arrays).
_STAGE_MIN_ARRAYS = 512
_STAGE_ARRAY_BYTES = 1 << 20
_STAGE_KEYS_PER_ARRAY = 8


def chunk_reads() -> int:
    """tensorstore's process-wide count of array chunks read (for tests and diagnostics); 0
    while tensorstore is not imported (it has read nothing), so counting needs no tensorstore."""
    ts = sys.modules.get("tensorstore")
    if ts is None:
        return 0
    for metric in ts.experimental_collect_matching_metrics("/tensorstore/cache/chunk_cache/reads"):
        return int(sum(v.get("value", 0) for v in metric["values"]))
    return 0


# ---------------------------------------------------------------------------------------------
# Arrays.


_DRIVERS = {2: "zarr", 3: "zarr3"}


def _tail(e: BaseException) -> str:
    text = str(e)
    return text if len(text) < 400 else text[:400] + "..."


def _not_found(e: BaseException) -> bool:
    text = str(e)
    return "NOT_FOUND" in text or "does not exist" in text


@dataclass
class StoredArray:
    """One zarr array of an item, opened (its metadata read; no chunk read yet)."""

    param_name: str
    file: str  # display path of the array, for errors
    zarr_version: int
    shape: tuple[int, ...]
    dtype: np.dtype  # the stored element type
    chunk_shape: tuple[int, ...]
    _store: ts.TensorStore
    #: For arrays split over per-process databases: (chunk grid index -> store that holds it),
    #: the grid being that of the chunk keys (zarr v3: shards, not inner chunks).
    _chunk_stores: dict[tuple[int, ...], ts.TensorStore] | None = field(default=None, repr=False)
    _key_grid: tuple[int, ...] | None = field(default=None, repr=False)
    #: A sparse grid (`_sparse`): the cells not stored are the fill value, or an error (LOAD-041)
    #: where every chunk must be stored.
    _fill: Any = field(default=None, repr=False)
    _strict: bool = field(default=False, repr=False)
    #: For an array read through a `Stage` (`stage`) (`_store` then reads the stage's copy).
    _staged: StagedArray | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def _check_chunk_memory(self) -> None:
        """Refuse (LIMIT-006) to read an array whose chunks, which tensorstore decodes whole,
        are larger than the memory left, as many at once as reads are in flight: tensorstore
        would abort the process."""
        chunk = math.prod(self.chunk_shape) * self.dtype.itemsize
        cells = zip(self.shape, self.chunk_shape, strict=True)
        grid = math.prod(-(-n // max(c, 1)) for n, c in cells)
        check_allocation(
            chunk * min(DEFAULT_MAX_IN_FLIGHT, grid),
            what=f"the chunks of param {self.param_name!r} read at once",
            file=self.file,
        )

    def view(self, index: Any) -> ts.TensorStore:
        """A lazy tensorstore view of `index` (numpy basic indexing), no bytes read."""
        self._check_chunk_memory()
        store = self._staged.direct(self) if self._staged is not None else self._store
        return store[index]

    def read_regions(
        self, requests: Iterable[ReadRequest], *, max_in_flight: int, tile_bytes: int
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        """`read_tiled` (the engine's reader of many requests)."""
        return read_tiled(requests, max_in_flight=max_in_flight, tile_bytes=tile_bytes)

    def read(
        self,
        box: Sequence[tuple[int, int]],
        dtype: np.dtype | None = None,
        *,
        batch: ts.Batch | None = None,
    ) -> Any:
        """Start reading the region `box` ((start, stop) per dimension) as `dtype`; returns a
        future whose ``result()`` is the numpy array, or raises an error that names its rule
        (a missing chunk: LOAD-041)."""
        self._check_chunk_memory()
        if self._chunk_stores is not None:
            future: Any = ImmediateFuture(lambda: self._read_split(box, dtype))
        elif self._staged is not None:
            future = self._staged.read(self, box, dtype, batch)
        else:
            future = self._read_from(self._store, box, dtype, batch)
        return _Checked(future, self, box)

    def _read_from(
        self,
        store: ts.TensorStore,
        box: Sequence[tuple[int, int]],
        dtype: np.dtype | None,
        batch: ts.Batch | None,
    ) -> Any:
        view = store[tuple(slice(a, b) for a, b in box)] if box else store
        if dtype is not None and np.dtype(dtype) != self.dtype:
            cast = _ts_cast(view, self.dtype, np.dtype(dtype))
            if cast is None:  # numpy / ml_dtypes convert it exactly as the spec says
                future = view.read(batch=batch)
                return ImmediateFuture(
                    lambda: dtypes.astype(np.asarray(_wait(future, self, box)), np.dtype(dtype))
                )
            view = cast
        return view.read(batch=batch)

    def _read_split(self, box: Sequence[tuple[int, int]], dtype: np.dtype | None) -> np.ndarray:
        """Read `box` cell by stored cell (`_chunk_stores`); the rest is the fill value."""
        out = np.empty(tuple(b - a for a, b in box), dtype=dtype or self.dtype)
        fill = 0 if self._fill is None else self._fill
        out[...] = dtypes.astype(np.asarray(fill, dtype=self.dtype), out.dtype)
        assert self._chunk_stores is not None
        cell = self._key_grid or self.chunk_shape
        if self._strict:
            touched = sum(
                all(
                    g * c < b and a < (g + 1) * c
                    for g, c, (a, b) in zip(grid, cell, box, strict=True)
                )
                for grid in self._chunk_stores
            )
            cells = math.prod(-(-b // c) - a // c for (a, b), c in zip(box, cell, strict=True))
            if touched < cells and all(a < b for a, b in box):
                raise missing_chunk(self.file, f"a chunk of region {[list(b) for b in box]}")
        for grid, store in self._chunk_stores.items():
            lo = [g * c for g, c in zip(grid, cell, strict=True)]
            parts = []
            for (a, b), low, c, n in zip(box, lo, cell, self.shape, strict=True):
                s, e = max(a, low), min(b, low + c, n)
                if s >= e:
                    break
                parts.append((s, e))
            else:
                view = store[tuple(slice(s, e) for s, e in parts)] if parts else store
                target = tuple(
                    slice(s - a, e - a) for (s, e), (a, _) in zip(parts, box, strict=True)
                )
                part = _wait(view.read(), self, parts)
                out[target] = dtypes.astype(np.asarray(part), out.dtype)
        return out


class _Checked:
    """A read of a `StoredArray` whose ``result()`` raises tensorstore's errors as ockpt's
    (`_read_error`)."""

    __slots__ = ("_future", "_array", "_box")

    def __init__(self, future: Any, array: StoredArray, box: Sequence[tuple[int, int]]) -> None:
        self._future = future
        self._array = array
        self._box = box

    def result(self) -> Any:
        try:
            return _wait(self._future, self._array, self._box)
        except OckptError:
            raise
        except ValueError as e:
            raise _read_error(self._array, self._box, e) from None


def _wait(future: Any, array: Any, box: Sequence[tuple[int, int]]) -> Any:
    """The result of a read of region `box` of `array`: a tensorstore read waited for within
    the request deadline (`store.deadline`, allowing for the region's bytes); ockpt's own
    futures (a split or staged read) compute when asked."""
    ts = sys.modules.get("tensorstore")
    if ts is None or not isinstance(future, ts.Future):
        return future.result()
    shape = [b - a for a, b in box] if box else list(array.shape)
    return deadline.wait(future, array.file, nbytes=math.prod(shape) * array.dtype.itemsize)


def _read_error(array: Any, part: Any, e: BaseException) -> OckptError:
    """tensorstore's error reading region `part` of `array`: a missing chunk (LOAD-041), or
    anything else it cannot decode (ZARR-003)."""
    if _not_found(e) or "Missing" in str(e) or "missing" in str(e):
        return MissingDataError(
            f"a chunk of param {array.param_name!r} in region {list(part)} is missing ({_tail(e)})",
            rule="LOAD-041",
            file=array.file,
        )
    return ZarrFormatError(
        f"cannot read param {array.param_name!r} region {list(part)}: {_tail(e)}",
        rule="ZARR-003",
        file=array.file,
    )


def _ts_cast(view: Any, src: np.dtype, dst: np.dtype) -> Any:
    """A tensorstore cast of `view`, or None where numpy must convert: tensorstore does not
    convert every pair, and flushes subnormals of the ml_dtypes types (float8_e8m0fnu's
    2**-127 becomes 0), so casts from or to those types go through ml_dtypes."""
    if src.isbuiltin == 2 or dst.isbuiltin == 2:  # an ml_dtypes (user-defined) type
        return None
    try:
        return store_url.import_tensorstore().cast(view, dst)
    except ValueError:
        return None


#: `ArrayStore.metadata_store` hands the metadata of at least this many arrays of a local
#: OCDBT item to the python engine (one pass over the B+tree instead of an open per array).
_QUICK_METADATA_ARRAYS = 64


class ArrayStore:
    """The arrays of one pytree item (`engines.contract.ArrayStore`).

    `fmt` says where they are: `Storage.OCDBT` with `fmt.has_root_manifest` (the item's root
    database) or without (the per-process databases `fmt.ocdbt_processes` only); anything
    else is a zarr directory per leaf. `zarr_version` is 2 or 3, or None to find out per
    array. With `missing_chunks_are_errors` (`_METADATA`'s
    ``store_array_data_equal_to_fill_value``), a chunk absent from storage is an error.
    `context` is the tensorstore context (the store's when None). A local item is checked
    first (`Store.check_tree`: PATH-004, PATH-005).
    """

    #: `open_many` is much cheaper per array than `open` (staged, concurrent opens).
    BULK_OPEN: ClassVar[bool] = True

    def __init__(
        self,
        location: Store,
        fmt: ItemFormat,
        *,
        zarr_version: int | None = None,
        context: ts.Context | None = None,
        missing_chunks_are_errors: bool = False,
    ) -> None:
        self.spec_base = location.tensorstore_spec()
        if self.spec_base is None:
            raise UnsupportedError(
                "tensorstore cannot reach an in-process store: read it with backend='python'",
                file=location.display,
            )
        location.check_tree()  # tensorstore follows links and opens FIFOs
        self.location = location
        self.fmt = fmt
        self.zarr_version = zarr_version
        self.context = context or location.tensorstore_context() or store_url.new_context()
        self.processes = tuple(fmt.ocdbt_processes)
        self.missing_chunks_are_errors = missing_chunks_are_errors
        self._per_leaf = fmt.storage is not Storage.OCDBT
        self._root_database = fmt.storage is Storage.OCDBT and fmt.has_root_manifest
        self._stage: Stage | None = None
        self._databases: dict[str, Database] = {}  # ockpt's decoder of each, by directory
        self._chunk_files = ChunkFiles()  # per leaf: the chunk files of the arrays opened

    def metadata_store(self, count: int) -> Any:
        """The python engine's store for the zarr metadata of `count` arrays of an item's root
        OCDBT database, from `_QUICK_METADATA_ARRAYS` on (one pass over the B+tree instead of
        a tensorstore open per array); None otherwise, or when it cannot open."""
        if not self._root_database:
            return None
        if count < _QUICK_METADATA_ARRAYS:
            return None
        from ..python import ArrayStore as PythonStore

        try:
            return PythonStore(self.location, self.fmt, zarr_version=self.zarr_version)
        except (OckptError, OSError, ValueError):
            return None

    def close(self) -> None:
        self._stage = None  # tensorstore closes its files when the stores are dropped
        for db in self._databases.values():
            db.close()
        self._databases.clear()

    def _database(self, base: Store) -> Database:
        """ockpt's own decoder of the OCDBT database at `base` (one per directory)."""
        db = self._databases.get(base.display)
        if db is None:
            db = self._databases[base.display] = Database(base)
        return db

    def _claim(self, base: Store, param_name: str) -> list[str]:
        """Claim the stored bytes of the values tensorstore will read for `param_name` from
        the database at `base` (`Database.claim`: OCDBT-024 where two keys share bytes), so
        no stored value is decoded for two keys; the array's keys, below its prefix."""
        prefix = array_prefix(param_name).encode("utf-8", "surrogateescape")
        keys = self._database(base).claim_values(prefix)
        return [k[len(prefix) :].decode("utf-8", "replace") for k in keys]

    def _claim_files(self, param_name: str) -> list[str]:
        """Per leaf: claim the chunk files of `param_name` before tensorstore reads them
        (`ChunkFiles`: PATH-008); the files of its directory, below it."""
        prefix = param_name + "/"
        keys = self.location.list(prefix)
        for key in keys:
            self._chunk_files.claim(self.location, key)
        return [k[len(prefix) :] for k in keys]

    def _kvstore_spec(self, param_name: str, base: Store | None = None) -> dict[str, Any]:
        if self._per_leaf:
            return self.location.child(param_name).tensorstore_spec()
        spec = self.spec_base if base is None else base.tensorstore_spec()
        return {"driver": "ocdbt", "base": spec, "path": array_prefix(param_name)}

    def spec(self, param_name: str, zarr_version: int, base: Store | None = None) -> dict:
        """The tensorstore spec of one array."""
        spec: dict[str, Any] = {
            "driver": _DRIVERS[zarr_version],
            "kvstore": self._kvstore_spec(param_name, base),
            "recheck_cached_data": False,
            "recheck_cached_metadata": False,
            "cache_pool": "cache_pool#chunks",
        }
        if self.missing_chunks_are_errors:
            spec["fill_missing_data_reads"] = False
        return spec

    def file(self, param_name: str) -> str:
        """Where errors say the array lives (`contract.array_file`)."""
        return array_file(self.location, self.fmt, param_name)

    def open(self, param_name: str) -> StoredArray:
        """Open one array (reads its zarr metadata only)."""
        return self.open_many([param_name])[param_name]

    def open_many(self, names: Iterable[str]) -> dict[str, StoredArray]:
        """Open several arrays concurrently (metadata only), at most `_OPEN_IN_FLIGHT` opens
        in flight at once."""
        names = list(dict.fromkeys(names))
        if not self._per_leaf and not self._root_database:  # per-process databases only
            return {n: self._open_split(n) for n in names}
        out = self._open_staged(names)
        if len(out) < len(names):
            out.update(self._open_direct([n for n in names if n not in out]))
        return {n: out[n] for n in names}

    def _open_direct(self, names: list[str]) -> dict[str, StoredArray]:
        versions = [self.zarr_version] if self.zarr_version else [2, 3]
        out: dict[str, StoredArray] = {}
        pending = names
        errors: dict[str, BaseException] = {}
        ts = store_url.import_tensorstore()
        for version in versions:

            def start(n: str, version: int = version) -> Any:
                return ts.open(self.spec(n, version), read=True, open=True, context=self.context)

            still = []
            for n, fut in _bounded(pending, start, _OPEN_IN_FLIGHT):
                try:
                    store = deadline.wait(fut, self.file(n))
                except ValueError as e:  # not this zarr version, or no array: try the next
                    errors[n] = e
                    still.append(n)
                    continue
                out[n] = self._wrap(n, version, store)  # refuses what breaks the limits
                if self._root_database:
                    keys = self._claim(self.location, n)
                else:  # per leaf (per-process databases are opened by `_open_split`)
                    keys = self._claim_files(n)
                self._follow_stored_chunks(out[n], version, store, keys)
            pending = still
        for n in pending:
            self._raise_open(n, errors[n])
        return out

    def _open_staged(self, names: list[str]) -> dict[str, StoredArray]:
        """Those of `names` read through a `Stage`: none unless at least `_STAGE_MIN_ARRAYS`
        arrays of a local OCDBT database are opened. tensorstore opens one array of each
        distinct zarr metadata (its shape, element type and chunk shape are those of every
        array with the same metadata) and each array again, from the stage, when it is read:
        the open arrays held are those of the reads in flight. An array the stage cannot open
        is left to `_open_direct`, which names what is wrong with it."""
        if not self._root_database:
            return {}
        if len(names) < _STAGE_MIN_ARRAYS:
            return {}
        prefixes: dict[bytes, str] = {}
        for n in names:
            try:
                prefix = array_prefix(n).encode("utf-8")
            except UnicodeError:
                continue
            if prefix:
                prefixes[prefix] = n
        try:
            stage = self._stage or Stage(
                self._database(self.location), max_array_bytes=_STAGE_ARRAY_BYTES
            )
            if stage.num_keys() > _STAGE_KEYS_PER_ARRAY * len(prefixes):
                return {}
            found = stage.find(prefixes)
        except (OckptError, OSError, ValueError):
            return {}  # tensorstore reads the database and names what is wrong
        self._stage = stage
        meta_names = {2: ZARR2_METADATA.encode(), 3: ZARR3_METADATA.encode()}
        groups: dict[tuple[int, bytes], list[tuple[str, bytes, list[tuple[bytes, Any]]]]] = {}
        for prefix, entries in found.items():
            suffixes = {k[len(prefix) :]: e for k, e in entries}
            version = self.zarr_version or (2 if meta_names[2] in suffixes else 3)
            key = prefix + meta_names[version]
            entry = suffixes.get(meta_names[version])
            if entry is None:
                continue  # no array here: `_open_direct` says so
            try:
                meta = stage.db.read_value(entry, key=key)
            except (OckptError, OSError, ValueError):
                continue
            groups.setdefault((version, meta), []).append((prefixes[prefix], key, entries))
        ts = store_url.import_tensorstore()

        def start(group: tuple[tuple[int, bytes], list]) -> Any:
            (version, meta), [(name, key, _), *_] = group
            try:
                stage.kv.write(key, meta).result()
                spec = self._staged_spec(name, version)
                return ts.open(spec, read=True, context=stage.context)
            except ValueError:
                return None

        out: dict[str, StoredArray] = {}
        for ((version, _), members), fut in _bounded(groups.items(), start, _OPEN_IN_FLIGHT):
            first, key, _ = members[0]
            try:
                if fut is None:
                    continue
                shown = self._wrap(first, version, deadline.wait(fut, self.file(first)))
            except ValueError:
                continue
            finally:
                stage.drop([key])
            for name, _, entries in members:
                out[name] = StoredArray(
                    name,
                    self.file(name),
                    version,
                    shown.shape,
                    shown.dtype,
                    shown.chunk_shape,
                    None,
                    _staged=StagedArray(self, stage, version, entries),
                )
        return out

    def _staged_spec(self, param_name: str, version: int) -> dict[str, Any]:
        spec = self.spec(param_name, version)
        spec["kvstore"] = {"driver": "memory", "path": array_prefix(param_name)}
        return spec

    def _raise_open(self, param_name: str, e: BaseException) -> None:
        if _not_found(e):
            raise MissingDataError(  # tensorstore's text repeats the spec: nothing to add
                f"no zarr array for param {param_name!r} "
                f"(neither {ZARR2_METADATA} nor {ZARR3_METADATA})",
                rule="LOAD-040",
                file=self.file(param_name),
            ) from None
        raise ZarrFormatError(
            f"cannot open the zarr array of param {param_name!r}: {_tail(e)}",
            rule="ZARR-002",
            file=self.file(param_name),
        ) from None

    def _wrap(self, param_name: str, version: int, store: ts.TensorStore) -> StoredArray:
        file = self.file(param_name)
        try:
            dtype = np.dtype(store.dtype.numpy_dtype)
        except (TypeError, ValueError) as e:
            raise ZarrFormatError(
                f"unsupported element type {store.dtype}: {e}", rule="ZARR-001", file=file
            ) from None
        chunk = store.chunk_layout.read_chunk.shape
        shape = tuple(int(n) for n in store.shape)
        chunk_shape = tuple(int(c) for c in chunk) if chunk is not None else shape
        # the limits ockpt's own decoder applies (ZARR-005), before tensorstore reads a chunk
        check_extent(shape, chunk_shape, dtype, file=file, pointer="")
        return StoredArray(param_name, file, version, shape, dtype, chunk_shape, store)

    def _follow_stored_chunks(
        self, array: StoredArray, version: int, store: Any, keys: list[str]
    ) -> None:
        """Read an array whose grid has more than `_SPARSE_GRID` cells, and fewer stored, cell
        by stored cell (`StoredArray._read_split`): tensorstore itself visits every cell of
        the grid (2^24 cells declared in a few KiB took it minutes and 16 GB). `keys`: the
        array's keys (below its prefix), as claimed."""
        write = store.chunk_layout.write_chunk.shape
        cell = tuple(int(c) for c in write) if write is not None else array.chunk_shape
        if not array.shape or 0 in cell:
            return
        cells = math.prod(-(-n // c) for n, c in zip(array.shape, cell, strict=True))
        if cells <= _SPARSE_GRID:
            return
        metadata = store.spec().to_json()["metadata"]
        stored = {g for k in keys if (g := _chunk_grid_index(k, version, metadata))}
        if len(stored) >= cells:
            return
        array._chunk_stores = dict.fromkeys(stored, store)
        array._key_grid = cell
        array._fill = store.fill_value
        array._strict = self.missing_chunks_are_errors

    def _open_split(self, param_name: str) -> StoredArray:
        """An array whose chunks are spread over `ocdbt.process_<N>/` databases."""
        ts = store_url.import_tensorstore()
        bases = [self.location.child(f"ocdbt.process_{p}") for p in self.processes]
        versions = [self.zarr_version] if self.zarr_version else [2, 3]
        meta_store = None
        last: BaseException | None = None
        for base in bases:
            for version in versions:
                try:
                    opening = ts.open(
                        self.spec(param_name, version, base), read=True, context=self.context
                    )
                    meta_store = deadline.wait(opening, base.display)
                    break
                except ValueError as e:
                    last = e
            if meta_store is not None:
                break
        if meta_store is None:
            assert last is not None
            self._raise_open(param_name, last)
        array = self._wrap(param_name, version, meta_store)
        metadata = meta_store.spec().to_json()["metadata"]
        chunk_stores: dict[tuple[int, ...], ts.TensorStore] = {}
        for base in bases:
            opening = ts.KvStore.open(
                {
                    "driver": "ocdbt",
                    "base": base.tensorstore_spec(),
                    "path": array_prefix(param_name),
                },
                context=self.context,
            )
            database = deadline.wait(opening, base.display)
            listed = deadline.wait(database.list(), base.display)
            keys = [k.decode("utf-8", "replace") for k in listed]
            if array.shape == ():
                grids = [()] if any(_is_chunk_key(k) for k in keys) else []
            else:
                grids = [g for k in keys if (g := _chunk_grid_index(k, version, metadata))]
            if not grids:
                continue
            self._claim(base, param_name)
            spec = {**self.spec(param_name, version, base), "metadata": metadata}
            opening = ts.open(spec, read=True, context=self.context, assume_metadata=True)
            store = deadline.wait(opening, base.display)
            for g in grids:
                chunk_stores[g] = store
        array._chunk_stores = chunk_stores
        write_chunk = meta_store.chunk_layout.write_chunk.shape
        array._key_grid = tuple(int(c) for c in write_chunk) if write_chunk is not None else None
        return array


def _bounded(
    items: Iterable[Any], start: Callable[[Any], Any], limit: int
) -> Iterator[tuple[Any, Any]]:
    """(item, start(item)) for each item, in order, with at most `limit` started and not yet
    handed out: the caller waits on each future before the next is started."""
    window: deque[tuple[Any, Any]] = deque()
    for item in items:
        window.append((item, start(item)))
        if len(window) >= limit:
            yield window.popleft()
    while window:
        yield window.popleft()


def _is_chunk_key(key: str) -> bool:
    return key not in (ZARR2_METADATA, ".zattrs", ZARR3_METADATA)


def _chunk_grid_index(key: str, version: int, metadata: dict) -> tuple[int, ...] | None:
    if not _is_chunk_key(key):
        return None
    if version == 2:
        sep = metadata.get("dimension_separator", ".")
        parts = key.split(sep)
    else:
        encoding = metadata.get("chunk_key_encoding", {})
        sep = encoding.get("configuration", {}).get("separator", "/")
        if encoding.get("name", "default") == "default":
            if not key.startswith("c"):
                return None
            key = key[2:] if key.startswith("c" + sep) else key[1:]
        parts = key.split(sep) if key else []
    try:
        grid = tuple(int(p) for p in parts)
    except ValueError:
        return None
    return grid or None


# ---------------------------------------------------------------------------------------------
# Reading many regions.


@dataclass
class _Pending:
    request: ReadRequest
    dtype: np.dtype
    shape: tuple[int, ...]
    out: np.ndarray | None  # None: one tile is the whole request, and its array the output
    remaining: int


def read_tiled(
    requests: Iterable[ReadRequest],
    *,
    max_in_flight: int,
    tile_bytes: int = TILE_BYTES,
) -> Iterator[tuple[ReadRequest, np.ndarray]]:
    """Read each request (of arrays that read as this engine's do: ``array.read(box, dtype,
    batch=)``), yielding (request, array) as each completes (`contract.read_regions`).

    A request is read in chunk-aligned tiles of about `tile_bytes` (`tiles`), each decoded
    and copied into the request's output array. At most `max_in_flight` tiles are read at once;
    tiles issued together are submitted as one tensorstore batch, so reads of the same OCDBT
    node or data file are coalesced. Memory held: the outputs, plus per tile in flight the
    tile and the chunks it is decoded from. A request read in one tile gets the tile's own
    array as its output (writeable, C-contiguous), not a copy of it.
    """
    requests = list(requests)

    def pieces() -> Iterator[tuple[_Pending, tuple[tuple[int, int], ...]]]:
        for request in requests:
            array = request.array
            dtype = np.dtype(request.dtype) if request.dtype is not None else array.dtype
            shape = tuple(b - a for a, b in request.box)
            parts = tiles(request.box, array.chunk_shape, dtype.itemsize, tile_bytes)
            whole = len(parts) == 1 and parts[0] == tuple(request.box)
            out = None if whole else np.empty(shape, dtype=dtype)
            state = _Pending(request, dtype, shape, out, len(parts))
            if not parts:
                yield state, None  # type: ignore[misc]
            for part in parts:
                yield state, part

    it = pieces()
    window: deque[tuple[_Pending, Any, Any]] = deque()
    exhausted = False
    while True:
        if not exhausted and len(window) < max_in_flight:
            with _batch() as batch:
                while len(window) < max_in_flight:
                    try:
                        state, part = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    if part is None:
                        window.append((state, None, None))
                        continue
                    future = state.request.array.read(part, state.request.dtype, batch=batch)
                    window.append((state, part, future))
        if not window:
            return
        state, part, future = window.popleft()
        if part is not None:
            data = _finish(state.request, part, future)
            if state.out is None:
                state.out = _own(data, state.dtype, state.shape)
            else:
                origin = [a for a, _ in state.request.box]
                target = tuple(slice(a - o, b - o) for (a, b), o in zip(part, origin, strict=True))
                state.out[target] = data
            del data
            state.remaining -= 1
        if state.remaining <= 0:
            assert state.out is not None
            yield state.request, state.out


def _own(data: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """`data` (a tile read on its own) as a request's output: itself when it is writeable,
    C-contiguous, of `dtype` and `shape`; otherwise copied into a new array as a tile is."""
    flags = data.flags
    if data.dtype == dtype and data.shape == shape and flags.c_contiguous and flags.writeable:
        return data
    out = np.empty(shape, dtype=dtype)
    out[...] = data
    return out


def _batch() -> Any:
    """A tensorstore batch when tensorstore is in use (its arrays exist only once it is
    imported); otherwise nothing to batch."""
    ts = sys.modules.get("tensorstore")
    return ts.Batch() if ts is not None else contextlib.nullcontext(None)


def _finish(request: ReadRequest, part: Any, future: Any) -> np.ndarray:
    try:
        return np.asarray(future.result())
    except OckptError:
        raise  # already names its rule, file and offset
    except ValueError as e:
        raise _read_error(request.array, part, e) from None
