"""The tensorstore engine (``backend="tensorstore"``): tensorstore's zarr and OCDBT drivers.

* `store`: `ArrayStore`, `StoredArray`, `read_tiled`, `chunk_reads`;
* `stage`: many small arrays of a local OCDBT database read from a memory stage.

tensorstore itself is imported on first use (`store.import_tensorstore`).
"""

from .store import ArrayStore, StoredArray, chunk_reads, read_tiled

__all__ = ["ArrayStore", "StoredArray", "chunk_reads", "read_tiled"]
