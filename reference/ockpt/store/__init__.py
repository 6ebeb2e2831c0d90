"""Where a checkpoint's bytes live: one `Store` contract and its three implementations.

* `base`: the contract: `Store` (bounded reads whole, by range and many at once; listings;
  writes; the save protocol `begin` ... `Pending.commit`) and the `Capabilities` each store
  declares;
* `local`: `LocalStore`, a local directory: reads through `files`, **the one hardened open**
  of a checkpoint file (regular files only, never through a link leading out, reads and
  listings bounded by the limits), saves through `commit` (a temporary directory, ``flock``,
  ``renameat2``);
* `url`: `UrlStore`, a directory behind a kvstore URL (``gs://``, ``s3://``, ``memory://``)
  through tensorstore, saves committed by ``commit_success.txt`` written last;
* `memory`: `MemoryStore`, keys held in this process;
* `datafile`, `byterange`: a value read a byte range at a time, and streamed.

Nothing else in ockpt opens a file of a checkpoint or branches on where a store is
(tests/test_architecture.py checks both): callers take a `Store` (`Store.of(path)`) and ask it.
"""

from .base import Capabilities, Listing, NewFile, Pending, Store
from .byterange import ByteRange
from .datafile import DataFile
from .local import LocalStore
from .memory import MemoryStore
from .url import UrlStore, import_tensorstore, is_url, new_context

__all__ = [
    "ByteRange",
    "Capabilities",
    "DataFile",
    "Listing",
    "LocalStore",
    "MemoryStore",
    "NewFile",
    "Pending",
    "Store",
    "UrlStore",
    "import_tensorstore",
    "is_url",
    "new_context",
]
