"""The contract of an array engine: what the reader asks of the arrays of one pytree item.

An engine opens the zarr arrays of one item (`ArrayStore`) and reads regions of them
(`StoredArray`). ockpt has two, behind this one contract and tested by one suite
(tests/engines/test_contract.py):

* `engines.python`: OCDBT and zarr decoded by ockpt itself (local directories);
* `engines.tensorstore`: tensorstore's drivers (local directories and kvstore URLs).

`engines.open_store` picks one; nothing outside `engines` names an engine's classes. This
module also holds what both share: `ReadRequest`, `tiles`, `ImmediateFuture` and
`read_regions`, which hands a stream of requests to the engine of their arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ..layout import Storage
from ..names import MANIFEST_FILE

if TYPE_CHECKING:
    from ..layout import ItemFormat
    from ..store import Store

__all__ = [
    "ArrayStore",
    "StoredArray",
    "Future",
    "ImmediateFuture",
    "ReadRequest",
    "read_regions",
    "tiles",
    "array_file",
    "DEFAULT_MAX_IN_FLIGHT",
    "TILE_BYTES",
]

#: Tile reads in flight at once by default.
DEFAULT_MAX_IN_FLIGHT = 8
#: Largest tile (bytes) one read decodes before copying it into its output.
TILE_BYTES = 4 << 20

Box = Sequence[tuple[int, int]]


class Future(Protocol):
    """A read started: ``result()`` waits for it and gives the array (errors surface there)."""

    def result(self) -> Any: ...


class ImmediateFuture:
    """A future whose ``result()`` runs `fn` (a read made synchronously, when asked for)."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], np.ndarray]) -> None:
        self._fn = fn

    def result(self) -> np.ndarray:
        return self._fn()


class View(Protocol):
    """A lazy view of numpy basic indexing of a stored array: nothing read until `read`."""

    def read(self) -> Future: ...


@runtime_checkable
class StoredArray(Protocol):
    """One zarr array of an item, opened: its metadata read, no chunk read yet."""

    param_name: str
    file: str  # where errors say the array lives
    zarr_version: int  # 2 or 3
    shape: tuple[int, ...]
    dtype: np.dtype  # the stored element type (native byte order)
    chunk_shape: tuple[int, ...]  # the read grid (zarr v3 sharded: the inner chunks)

    @property
    def nbytes(self) -> int: ...

    def read(self, box: Box, dtype: np.dtype | None = None, *, batch: Any = None) -> Future:
        """Start reading `box` ((start, stop) per dimension) converted to `dtype` (as
        `dtypes.astype` converts); ``result()`` is a numpy array of the box's shape. A chunk
        that is absent reads as the fill value, or fails with `MissingDataError` LOAD-041 when
        the store was opened with ``missing_chunks_are_errors``. `batch` groups reads the
        engine may coalesce (tensorstore); engines that read synchronously ignore it."""
        ...

    def view(self, index: Any) -> View:
        """A lazy view of numpy basic indexing (ints, slices, Ellipsis)."""
        ...

    def read_regions(
        self, requests: Iterable[ReadRequest], *, max_in_flight: int, tile_bytes: int
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        """This engine's reader of many requests (this array's first, then others of the same
        engine): yields (request, array) as each completes. See `read_regions`."""
        ...


@runtime_checkable
class ArrayStore(Protocol):
    """The arrays of one pytree item, as `engines.open_store` opens them.

    `BULK_OPEN` tells the reader whether `open_many` is much cheaper per array than `open`
    (then it opens the arrays of a load together and keeps them); where it is not, the reader
    opens each array when it reaches it and keeps none, so memory stays flat in the leaf
    count.
    """

    BULK_OPEN: ClassVar[bool]
    location: Store
    fmt: ItemFormat  # where the item keeps its arrays
    zarr_version: int | None  # 2 or 3 where the item says; None: found out per array

    def file(self, param_name: str) -> str:
        """Where errors say the array of `param_name` lives."""
        ...

    def open(self, param_name: str) -> StoredArray:
        """Open one array (its zarr metadata only): `MissingDataError` LOAD-040 when there is
        none, `ZarrFormatError` when its metadata is not valid."""
        ...

    def open_many(self, names: Iterable[str]) -> dict[str, StoredArray]:
        """Open several arrays (each name once), as `open` does."""
        ...

    def metadata_store(self, count: int) -> ArrayStore | None:
        """A store that opens the metadata of `count` arrays, one at a time, faster than this
        one, or None where there is none. An array it opens is for its shape, dtype, chunks,
        size and file only: arrays of the same zarr metadata may be one object, whose
        `param_name` is one of theirs. It is closed after use."""
        ...

    def close(self) -> None:
        """Release open files (a store is not used after)."""
        ...


@dataclass
class ReadRequest:
    """Read `box` of `array` as `dtype`; `tag` is the caller's."""

    array: StoredArray
    box: tuple[tuple[int, int], ...]
    dtype: np.dtype | None = None
    tag: Any = None


def array_file(location: Store, fmt: ItemFormat, param_name: str) -> str:
    """The real file an error names for the array `param_name`: its directory (per-leaf
    zarr), else the manifest of the OCDBT database holding it (the item's root database, or
    its per-process databases); the message names the param."""
    if fmt.storage is not Storage.OCDBT:
        return location.file(param_name)
    if fmt.has_root_manifest:
        return location.file(MANIFEST_FILE)
    processes = fmt.ocdbt_processes
    which = str(processes[0]) if len(processes) == 1 else "*"
    return location.file(f"ocdbt.process_{which}/{MANIFEST_FILE}")


def tiles(
    box: Sequence[tuple[int, int]],
    chunk_shape: Sequence[int],
    itemsize: int,
    budget: int = TILE_BYTES,
) -> list[tuple[tuple[int, int], ...]]:
    """Cut `box` into pieces aligned to the chunk grid, each of whole chunks (clipped to the
    box) and of at most `budget` bytes unless one chunk is larger; no chunk is in two pieces."""
    ndim = len(box)
    if ndim == 0:
        return [()]
    extent = [b - a for a, b in box]
    if any(e <= 0 for e in extent):
        return []
    lens = [max(1, int(c)) for c in chunk_shape]
    for d in reversed(range(ndim)):
        span = -(-extent[d] // lens[d]) + 1  # chunks a box can touch along d
        piece = itemsize * math.prod(min(n, e) for n, e in zip(lens, extent, strict=True))
        factor = max(1, min(span, budget // max(piece, 1)))
        lens[d] *= factor
        if factor < span:
            break
    cuts = []
    for (a, b), n in zip(box, lens, strict=True):
        points = [a, *range((a // n + 1) * n, b, n), b]
        cuts.append(list(zip(points[:-1], points[1:], strict=True)))
    return [tuple(t) for t in itertools.product(*cuts)]


def read_regions(
    requests: Iterable[ReadRequest],
    *,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    tile_bytes: int = TILE_BYTES,
) -> Iterator[tuple[ReadRequest, np.ndarray]]:
    """Read each request, yielding (request, array) as each completes.

    All requests are of one engine (the arrays of one item): the first request's array hands
    them all, as they come (`requests` is consumed as reading proceeds), to its engine's
    reader (`StoredArray.read_regions`). At most `max_in_flight` reads are in flight at once;
    a request's output is writeable, C-contiguous, of its dtype and box shape."""
    if max_in_flight < 1:
        raise ValueError("max_in_flight must be at least 1")
    pending = iter(requests)
    first = next(pending, None)
    if first is None:
        return
    yield from first.array.read_regions(
        itertools.chain((first,), pending), max_in_flight=max_in_flight, tile_bytes=tile_bytes
    )
