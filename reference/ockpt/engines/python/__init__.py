"""The python engine (``backend="python"``): OCDBT and zarr decoded by ockpt (spec/ocdbt.md,
spec/arrays.md), with numpy, zstandard and google-crc32c only (no tensorstore, no jax).

* `store`: `ArrayStore` and `StoredArray`, over key-value views of an item's storage
  (`OcdbtStore`, `MultiOcdbtStore`, `DirectoryStore`), and the key listings of an item
  (`item_keys`, `key_listing`);
* `fastread`: many regions read in parallel, each chunk decoded once.

Every file it opens goes through its item's `store.Store` (for a local directory the hardened
open of `store.files`: regular files only, contained in the item).
"""

from .store import (
    ArrayStore,
    DirectoryStore,
    KeyValueStore,
    MultiOcdbtStore,
    OcdbtStore,
    StoredArray,
    item_keys,
    key_listing,
    open_item_store,
)

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
