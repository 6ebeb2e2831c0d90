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
(tests/package/test_architecture.py checks both): callers take a `Store` (`as_store(path)`) and ask it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .base import Capabilities, Listing, NewFile, Pending, Store, is_url
from .byterange import ByteRange
from .datafile import DataFile
from .local import LocalStore

if TYPE_CHECKING:
    from .memory import MemoryStore
    from .url import UrlStore, import_tensorstore, new_context

#: The names imported when first asked for (`__getattr__`): a program that reads local
#: checkpoints never loads the object-store or memory stores.
_URL_NAMES = frozenset({"UrlStore", "import_tensorstore", "new_context"})

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
    "as_store",
    "import_tensorstore",
    "is_url",
    "new_context",
]


def as_store(path: str | os.PathLike[str] | Store, *, context: Any = None) -> Store:
    """The store of a local path, a ``file://`` URL or a kvstore URL (``gs://``, ``s3://``,
    ``memory://``: a `UrlStore`); a store is returned as it is. `context`: a tensorstore
    context for the URL's requests and the tensorstore engine."""
    if isinstance(path, Store):
        return path
    text = os.fspath(path)
    if is_url(text) and not text.startswith("file://"):
        from .url import UrlStore

        return UrlStore.from_url(text, context=context)
    if text.startswith("file://"):
        text = text[len("file://") :]
    return LocalStore(text, context=context)


def __getattr__(name: str) -> Any:
    if name == "MemoryStore":
        from .memory import MemoryStore

        return MemoryStore
    if name in _URL_NAMES:
        from . import url

        return getattr(url, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
