"""`Location`: a directory of a checkpoint, local or in any tensorstore kvstore (a URL).

Local directories are read through `kv.files` (regular files only, nothing outside the
directory, bounded reads); URLs (``gs://``, ``s3://``, ``memory://``) through tensorstore's
kvstore drivers, imported on first use. Callers never branch on which: they list, test and
read names of a `Location`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, NotACheckpointError, UnsupportedError
from ..limits import LIMITS
from ..paths import check_relative
from . import files
from .byterange import ByteRange

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = ["Location", "new_context", "import_tensorstore", "is_url"]

#: Cache for OCDBT tree nodes (shared by the arrays of one item); array chunks are not cached.
#: Orbax writes B+tree nodes of up to 100 MB decoded (``max_decoded_node_bytes``): the keys of a
#: tree of 100,000 small arrays are one leaf node of about that size. A node larger than the
#: cache is dropped after each key looked up in it, and read and decoded again for the next
#: (tens of milliseconds a key): the cache holds two nodes of that bound.
_NODE_CACHE_BYTES = 256 << 20

#: Retries of a failed object-store request (exponential backoff: about 40 s in all before an
#: unreachable or failing store is an error), and the tensorstore resources that set them.
_RETRIES = {"max_retries": 8, "initial_delay": "0.5s", "max_delay": "8s"}
_RETRY_RESOURCES = ("s3_request_retries", "gcs_request_retries")

#: What `Location._request` returns for a byte range that reaches past the end of an object.
_PAST_END = object()


def import_tensorstore() -> Any:
    """The tensorstore module, imported on first use (URLs and the tensorstore backend): an
    optional dependency, the ``tensorstore`` extra."""
    try:
        import tensorstore
    except ImportError as e:
        raise UnsupportedError(
            f'this needs tensorstore ({e}): pip install "ockpt[tensorstore]"; local '
            "directories are read and written without it (backend='python')"
        ) from None
    return tensorstore


def is_url(path: str) -> bool:
    """True for ``scheme://...`` (``file://`` included)."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def new_context(parent: ts.Context | None = None) -> ts.Context:
    """A tensorstore context for one reader: OCDBT nodes cached, array chunks not. Without a
    `parent`, requests to object stores are retried `_RETRIES` times (tensorstore's default
    backs off for about a quarter of an hour before an unreachable store is an error); a
    caller's `parent` keeps its own retry policy."""
    ts = import_tensorstore()
    spec = {
        "cache_pool": {"total_bytes_limit": _NODE_CACHE_BYTES},
        "cache_pool#chunks": {"total_bytes_limit": 0},
    }
    if parent is not None:
        return ts.Context(ts.Context.Spec(spec), parent)
    return ts.Context({**spec, **{name: dict(_RETRIES) for name in _RETRY_RESOURCES}})


@dataclass(frozen=True)
class Location:
    """A directory: its kvstore JSON spec (path ends with ``/``), the text errors show for it,
    and for local directories the OS path."""

    spec: dict[str, Any]
    display: str
    local: str | None = None

    @property
    def has_rename(self) -> bool:
        """True where saves commit by an atomic rename (file systems, memory); on object
        stores (`s3://`, `gs://`) `commit_success.txt` marks a complete step or item instead."""
        return self.local is not None or self.spec.get("driver") in ("file", "memory")

    @property
    def name(self) -> str:
        """The last component of the directory's path."""
        return self.display.rstrip("/").rsplit("/", 1)[-1]

    @classmethod
    def of(cls, path: str | os.PathLike[str] | Location) -> Location:
        """The location of a local path, a ``file://`` URL or a kvstore URL."""
        if isinstance(path, Location):
            return path
        text = os.fspath(path)
        if is_url(text) and not text.startswith("file://"):
            ts = import_tensorstore()
            try:
                spec = ts.KvStore.Spec(text).to_json()
            except ValueError as e:
                raise NotACheckpointError(
                    f"{text}: not a kvstore URL tensorstore knows ({e})", rule="LOAD-050"
                ) from None
            spec = dict(spec)
            if spec.get("driver") == "s3" and "endpoint" not in spec:
                # An S3-compatible server (MinIO, moto, ...): the AWS SDKs' variables.
                endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
                    "AWS_ENDPOINT_URL"
                )
                if endpoint:
                    spec["endpoint"] = endpoint
            p = spec.get("path", "")
            if p and not p.endswith("/"):
                spec["path"] = p + "/"
            return cls(spec, text.rstrip("/"))
        if text.startswith("file://"):
            text = text[len("file://") :]
        local = os.path.abspath(text)
        return cls({"driver": "file", "path": local.rstrip("/") + "/"}, text, local)

    def join(self, name: str) -> Location:
        """The subdirectory `name` (which may contain ``/``)."""
        spec = dict(self.spec)
        spec["path"] = spec.get("path", "") + name.strip("/") + "/"
        local = None if self.local is None else os.path.join(self.local, name)
        return Location(spec, f"{self.display.rstrip('/')}/{name}", local)

    def file(self, name: str) -> str:
        """The display path of a file in this directory."""
        return f"{self.display.rstrip('/')}/{name}"

    def kvstore(self, context: ts.Context | None = None) -> ts.KvStore:
        """This directory as an open tensorstore kvstore."""
        ctx = context if context is not None else new_context()
        return import_tensorstore().KvStore.open(self.spec, context=ctx).result()

    def read(
        self,
        name: str,
        *,
        context: ts.Context | None = None,
        limit: int = LIMITS.max_json_bytes,
        rule: str = "JSON-003",
    ) -> bytes | None:
        """The bytes of file `name`, or None when it does not exist. A name that would leave
        this directory (``..``, absolute, NUL, a symbolic link leading out) is refused
        (PATH-003/004), so is a file that is no regular file (PATH-005), and one larger than
        `limit` (`rule`)."""
        if self.local is not None:
            return files.read_inside(self.local, name, limit=limit, rule=rule, file=self.file(name))
        check_relative(name, file=self.file(name))
        store = self.kvstore(context)
        # one byte past the limit first: an object larger than the limit is never fetched
        past = self._request(store, name, slice(limit, limit + 1))
        if past is not None and past is not _PAST_END:
            raise FormatError(
                "file larger than its size limit",
                rule=rule,
                file=self.file(name),
                expected=f"<= {limit} bytes",
            )
        if past is None:
            return None
        data = self._request(store, name, None)
        if data is None or data is _PAST_END:
            return None  # removed meanwhile
        if len(data) > limit:  # grew meanwhile
            raise FormatError(
                "file larger than its size limit",
                rule=rule,
                file=self.file(name),
                expected=f"<= {limit} bytes",
                got=len(data),
            )
        return data

    def _request(self, store: ts.KvStore, name: str, byte_range: slice | None) -> Any:
        """One read of a URL's object: its bytes (of `byte_range`), None when it is absent,
        `_PAST_END` when the range reaches past its end. A store's failure is an OSError
        naming the file."""
        try:
            result = store.read(name, byte_range=byte_range).result()
        except ValueError as e:
            if "OUT_OF_RANGE" in str(e):
                return _PAST_END
            text = str(e)
            raise OSError(f"{self.file(name)}: {text[:400]}") from None
        return bytes(result.value) if result.state == "value" else None

    def read_range(
        self, name: str, offset: int, length: int, *, store: ts.KvStore | None = None
    ) -> bytes | None:
        """Bytes [offset, offset + length) of the object `name` of a URL's directory (through
        `store`, this directory's open kvstore, when given); None when it is absent, ``b""``
        when the range reaches past its end (as a short ``pread``)."""
        check_relative(name, file=self.file(name))
        kv = store if store is not None else self.kvstore()
        data = self._request(kv, name, slice(offset, offset + length))
        return b"" if data is _PAST_END else data

    def exists(self, name: str, *, store: ts.KvStore | None = None) -> bool:
        """Whether file `name` exists (a directory or special file in its place counts: reading
        it reports why)."""
        if self.local is not None:
            try:
                return files.size_inside(self.local, name, file=self.file(name)) is not None
            except FormatError:
                return True
        check_relative(name, file=self.file(name))
        kv = store if store is not None else self.kvstore()
        return self._request(kv, name, slice(0, 0)) is not None

    def keys(self, *, context: ts.Context | None = None) -> list[str]:
        """Every key (relative path) under a URL's directory, sorted (bounded in number)."""
        if self.local is not None:
            raise UnsupportedError(f"{self.display}: keys() lists URL directories only")
        found = self._list(context)
        if len(found) > LIMITS.max_directory_entries:
            raise FormatError(
                "too many objects under the directory",
                rule="LIMIT-005",
                file=self.display,
                expected=f"<= {LIMITS.max_directory_entries}",
                got=len(found),
            )
        return sorted(k.decode("utf-8", "surrogateescape") for k in found)

    def _list(self, context: ts.Context | None) -> list[bytes]:
        """Every key under a URL's directory, as the store lists them; a store's failure
        (unreachable, refused) is an OSError naming the directory."""
        try:
            return self.kvstore(context).list().result()
        except ValueError as e:
            raise OSError(f"{self.display}: {str(e)[:400]}") from None

    def open_range(self, name: str) -> ByteRange | None:
        """A local file as a `ByteRange` for streamed reads; None when absent."""
        if self.local is None:
            raise UnsupportedError(f"{self.file(name)}: streamed reads need a local directory")
        full = files.resolve_inside(self.local, name, file=self.file(name))
        try:
            return files.open_range(full, file=self.file(name))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, *, context: ts.Context | None = None) -> files.Listing:
        """The names directly in this directory (an empty listing when it does not exist)."""
        if self.local is not None:
            try:
                return files.list_dir(self.local)
            except (FileNotFoundError, NotADirectoryError):
                return files.Listing(frozenset(), frozenset())
        found: set[str] = set()
        dirs: set[str] = set()
        for key in self._list(context):
            text = key.decode("utf-8", "replace")
            head, sep, _ = text.partition("/")
            (dirs if sep else found).add(head)
        return files.Listing(frozenset(found), frozenset(dirs))
