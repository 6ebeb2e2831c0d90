"""`open`: a checkpoint read lazily; a slice of a leaf reads only the chunks it touches."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engines
from ..errors import MissingDataError, OckptError
from ..layout import Resolved
from ..limits import check_allocation

if TYPE_CHECKING:
    import tensorstore as ts
from ..saved_tree import SavedLeaf
from .item import OpenedItem
from .load import CastPolicy, load_item
from .metadata import metadata_tree

__all__ = ["Checkpoint", "LazyArray", "open"]

# ---------------------------------------------------------------------------------------------
# Lazy access.


def _index_text(index: Any) -> str:
    """A numpy index as it is written: ``[0:2, ...]``, not ``(slice(0, 2, None), Ellipsis)``."""

    def one(e: Any) -> str:
        if e is Ellipsis:
            return "..."
        if isinstance(e, slice):
            text = ":".join("" if v is None else str(v) for v in (e.start, e.stop))
            return text + (f":{e.step}" if e.step is not None else "")
        return "None" if e is None else str(e)

    parts = index if isinstance(index, tuple) else (index,)
    return "[" + ", ".join(one(e) for e in parts) + "]"


def _normalize_index(index: Any, shape: tuple[int, ...]) -> tuple[tuple[Any, ...], tuple]:
    """Split a numpy basic index into a tensorstore index (ints and positive-step slices)
    and a numpy index applied afterwards (reversals and new axes)."""
    if not isinstance(index, tuple):
        index = (index,)
    for entry in index:
        ok = (
            entry is None
            or entry is Ellipsis
            or isinstance(entry, slice)
            or (isinstance(entry, (int, np.integer)) and not isinstance(entry, (bool, np.bool_)))
        )
        if not ok:
            raise TypeError(
                f"only basic indexing (ints, slices, ..., None) is supported, got {entry!r}"
            )
    if sum(e is Ellipsis for e in index) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(e is not None and e is not Ellipsis for e in index)
    if used > len(shape):
        raise IndexError(
            f"too many indices for array: array is {len(shape)}-dimensional, "
            f"but {used} were indexed"
        )
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - used) + index[at + 1 :]
    else:
        index = index + (slice(None),) * (len(shape) - used)
    ts_index: list[Any] = []
    post: list[Any] = []
    dim = 0
    for entry in index:
        if entry is None:
            post.append(None)
            continue
        n = shape[dim]
        dim += 1
        if isinstance(entry, slice):
            start, stop, step = entry.indices(n)
            r = range(start, stop, step)
            if len(r) == 0:
                ts_index.append(slice(0, 0))
                post.append(slice(None))
            elif step > 0:
                ts_index.append(slice(r[0], r[-1] + 1, step))
                post.append(slice(None))
            else:
                ts_index.append(slice(r[-1], r[0] + 1, -step))
                post.append(slice(None, None, -1))
            continue
        i = int(entry)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {dim - 1} with size {n}")
        ts_index.append(i + n if i < 0 else i)
    return tuple(ts_index), tuple(post)


class LazyArray:
    """One stored leaf, read on demand: ``lazy[10:20, :]`` reads only the chunks it touches."""

    def __init__(self, leaf: SavedLeaf, array: engines.StoredArray | None, inline: Any = None):
        self._leaf = leaf
        self._array = array
        self._inline = None if array is not None else np.asarray(inline)

    param_name = property(lambda self: self._leaf.param_name)
    value_type = property(lambda self: self._leaf.value_type)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape if self._array is not None else tuple(self._inline.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype if self._array is not None else self._inline.dtype

    @property
    def chunk_shape(self) -> tuple[int, ...] | None:
        return self._array.chunk_shape if self._array is not None else None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"LazyArray({self.param_name!r}, shape={self.shape}, dtype={self.dtype})"

    def __getitem__(self, index: Any) -> Any:
        ts_index, post = _normalize_index(index, self.shape)
        if self._array is None:
            data = self._inline[ts_index]
        elif any(isinstance(s, slice) and s.start == s.stop for s in ts_index):
            shape = tuple(
                len(range(*s.indices(n)))
                for s, n in zip(ts_index, self.shape, strict=True)
                if isinstance(s, slice)
            )
            data = np.empty(shape, dtype=self.dtype)
        else:
            size = math.prod(
                len(range(*s.indices(n)))
                for s, n in zip(ts_index, self.shape, strict=True)
                if isinstance(s, slice)
            )
            check_allocation(
                size * self.dtype.itemsize,
                what=f"param {self.param_name!r} at {_index_text(index)}",
                file=self._array.file,
            )
            try:
                data = np.asarray(self._array.view(ts_index).read().result())
            except OckptError:
                raise  # names its own rule (PATH-005, ZARR-003, ...)
            except ValueError as e:
                raise MissingDataError(
                    f"cannot read param {self.param_name!r} at {_index_text(index)}: {e}",
                    rule="LOAD-041",
                    file=self._array.file,
                ) from None
        data = np.asarray(data)
        if post:
            data = data[post]
        return data[()] if data.ndim == 0 else data

    def read(self) -> Any:
        """The whole leaf (a numpy scalar for a saved scalar)."""
        value = self[...]
        return value if self.value_type != "scalar" else np.asarray(value)[()]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        data = np.asarray(self[...])
        return data if dtype is None else data.astype(dtype)


class Checkpoint:
    """A lazily read pytree item, from `ockpt.open`.

    `keys()` gives the param names of the leaves; ``ckpt[name]`` a `LazyArray` (a str for a
    string leaf); `metadata` the `pytree_metadata` tree; `load(...)` is `load_pytree`.
    """

    def __init__(self, item: OpenedItem) -> None:
        self._item = item
        self._metadata: Any = None

    @property
    def path(self) -> str:
        return self._item.location.display

    @property
    def resolved(self) -> Resolved:
        """How the path given was resolved: its layout, the step and item chosen."""
        return self._item.resolved

    @property
    def metadata(self) -> Any:
        if self._metadata is None:
            self._metadata = metadata_tree(self._item)
        return self._metadata

    def keys(self) -> list[str]:
        return list(self._item.leaves)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._item.leaves)

    def __contains__(self, name: object) -> bool:
        return name in self._item.leaves

    def __getitem__(self, name: str) -> Any:
        leaf = self._item.leaves.get(name)
        if leaf is None:
            raise MissingDataError(
                f"no leaf with param name {name!r}", rule="LOAD-001", file=self._item.metadata_file
            )
        if leaf.source == "string":
            return self._item.strings(leaf)
        if leaf.source == "inline":
            if isinstance(leaf.inline, (str, bytes)):
                return leaf.inline
            return LazyArray(leaf, None, leaf.inline)
        return LazyArray(leaf, self._item.arrays([name])[name])

    def load(
        self,
        target: Any = None,
        *,
        partial: bool = False,
        cast: CastPolicy = "exact",
        pad_or_truncate: bool = False,
        max_in_flight: int = engines.DEFAULT_MAX_IN_FLIGHT,
    ) -> Any:
        """`load_pytree` of this checkpoint (same options)."""
        return load_item(
            self._item,
            target,
            partial=partial,
            cast=cast,
            pad_or_truncate=pad_or_truncate,
            max_in_flight=max_in_flight,
        )

    def close(self) -> None:
        self._item._arrays.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(  # noqa: A001 - the public name the issue gives
    path: Any,
    *,
    step: int | None = None,
    item: str | None = None,
    context: ts.Context | None = None,
    backend: str = "auto",
) -> Checkpoint:
    """Open a pytree checkpoint for lazy reads (reads its tree documents, no array bytes)."""
    return Checkpoint(OpenedItem(path, step=step, item=item, context=context, backend=backend))
