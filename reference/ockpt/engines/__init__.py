"""Array engines: the zarr arrays of a pytree item, opened and read behind one contract.

* `contract`: the `ArrayStore` / `StoredArray` protocols and what every engine shares
  (`ReadRequest`, `tiles`, `ImmediateFuture`, `read_regions`);
* `python`: ockpt's own OCDBT and zarr decoders (``backend="python"``, any store; numpy,
  zstandard and google-crc32c only);
* `tensorstore`: tensorstore's drivers (``backend="tensorstore"``, any store tensorstore
  reaches: local directories and kvstore URLs); tensorstore is imported on first use.

`open_store` is the one place an engine is chosen. Where an item keeps its arrays is said in
the words of `layout`: `Storage.OCDBT` (with `ItemFormat.has_root_manifest` telling the
item's root database from per-process databases only) or per-leaf zarr directories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .contract import (
    DEFAULT_MAX_IN_FLIGHT,
    TILE_BYTES,
    ArrayStore,
    ImmediateFuture,
    ReadRequest,
    StoredArray,
    read_regions,
    tiles,
)

if TYPE_CHECKING:
    from ..layout import ItemFormat
    from ..store import Store

__all__ = [
    "ArrayStore",
    "StoredArray",
    "ImmediateFuture",
    "ReadRequest",
    "read_regions",
    "tiles",
    "open_store",
    "BACKENDS",
    "DEFAULT_MAX_IN_FLIGHT",
    "TILE_BYTES",
]

#: The engines `open_store` knows, by the name a caller passes as `backend`.
BACKENDS = ("python", "tensorstore")


def open_store(
    location: Store,
    fmt: ItemFormat,
    *,
    backend: str,
    context: Any = None,
    zarr_version: int | None = None,
    missing_chunks_are_errors: bool = False,
) -> ArrayStore:
    """The arrays of the pytree item at `location`, stored as `fmt` says, read by `backend`.

    `zarr_version` is 2 or 3 where the item says which (``_METADATA``'s ``use_zarr3``), else
    None (found out per array). With `missing_chunks_are_errors` (``_METADATA``'s
    ``store_array_data_equal_to_fill_value``), an absent chunk is an error (LOAD-041), not
    the fill value. `context` is the tensorstore context of the tensorstore engine.

    The tensorstore engine checks a local item before handing it to tensorstore, which
    follows links and opens whatever it finds: a symbolic link leading out of the item is
    refused (PATH-004), so is anything that is neither a regular file nor a directory
    (PATH-005). The python engine makes the same checks on each file it opens."""
    if backend == "python":
        from .python import ArrayStore as PythonStore

        return PythonStore(
            location,
            fmt,
            zarr_version=zarr_version,
            missing_chunks_are_errors=missing_chunks_are_errors,
        )
    if backend == "tensorstore":
        from .tensorstore import ArrayStore as TensorstoreStore

        return TensorstoreStore(
            location,
            fmt,
            zarr_version=zarr_version,
            context=context,
            missing_chunks_are_errors=missing_chunks_are_errors,
        )
    raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
