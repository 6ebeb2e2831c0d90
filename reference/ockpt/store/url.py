"""`UrlStore`: a directory behind a kvstore URL (``gs://``, ``s3://``, ``memory://``), reached
through tensorstore's kvstore drivers, imported on first use.

Reads are bounded before a value is fetched (one byte past the limit is asked for first) and
may be ranged; writes are whole values (tensorstore's kvstores take a value whole), started
without waiting and bounded in the bytes they hold (`flush` waits for them). Object stores
have no rename: a save writes under the final names and commits by writing
``commit_success.txt`` last (spec/writing.md §6).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, NotACheckpointError, UnsupportedError
from ..limits import current as limits_in_force
from ..names import COMMIT_FILE
from . import deadline
from .base import (
    Capabilities,
    Listing,
    Pending,
    Store,
    check_key,
    refuse_existing,
    write_markers,
)
from .inflight import InFlight

if TYPE_CHECKING:
    import tensorstore as ts

    from .inflight import BackgroundWriter

__all__ = ["UrlStore", "import_tensorstore", "new_context"]

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

#: What `UrlStore._request` returns for a byte range that reaches past the end of an object.
_PAST_END = object()
#: Bytes of writes started and not yet done (each held twice meanwhile: ours until the write
#: starts, tensorstore's copy in its request until it ends).
_IN_FLIGHT_BYTES = 64 << 20
#: tensorstore's storage generation of a key with no value (a conditional create's condition).
_NO_VALUE = b"\x02"


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


def url_spec(url: str) -> dict[str, Any]:
    """The kvstore JSON spec of a URL, its path ending with ``/`` (a directory); an S3
    endpoint from the AWS SDKs' variables (an S3-compatible server: MinIO, moto, ...)."""
    ts = import_tensorstore()
    try:
        spec = dict(ts.KvStore.Spec(url).to_json())
    except ValueError as e:
        raise NotACheckpointError(
            f"{url}: not a kvstore URL tensorstore knows ({e})", rule="LOAD-050"
        ) from None
    if spec.get("driver") == "s3" and "endpoint" not in spec:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            spec["endpoint"] = endpoint
    p = spec.get("path", "")
    if p and not p.endswith("/"):
        spec["path"] = p + "/"
    return spec


class _Shared:
    """What a `UrlStore` and its children share: the tensorstore context and the writes in
    flight."""

    def __init__(self, context: ts.Context | None) -> None:
        self.given = context
        self.context: ts.Context | None = None
        self.inflight = InFlight(max_bytes=_IN_FLIGHT_BYTES)

    def tensorstore_context(self) -> ts.Context:
        if self.context is None:
            self.context = new_context(self.given)
        return self.context


class UrlStore(Store):
    """The kvstore directory `spec` (its ``path`` ends with ``/``), named `display`."""

    def __init__(
        self, spec: dict[str, Any], display: str, *, shared: _Shared | None = None
    ) -> None:
        self.spec = spec
        self.display = display
        self._shared = shared if shared is not None else _Shared(None)
        self._store: ts.KvStore | None = None
        self.capabilities = Capabilities(
            atomic_rename=False,
            # gcs: x-goog-if-generation-match; memory: in process; s3: If-None-Match
            conditional_create=spec.get("driver") in ("gcs", "memory", "s3"),
            consistent_listing=True,  # GCS and S3 list what was written (strong consistency)
            sizes_known=False,  # tensorstore's listings carry no sizes
            random_access=False,
        )

    @classmethod
    def from_url(cls, url: str, *, context: ts.Context | None = None) -> UrlStore:
        return cls(url_spec(url), url.rstrip("/"), shared=_Shared(context))

    # -- naming -------------------------------------------------------------------------------

    def place(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        where = tuple(sorted((k, str(v)) for k, v in self.spec.items() if k != "path"))
        return ("kvstore", *where), tuple(p for p in self.spec.get("path", "").split("/") if p)

    def child(self, name: str) -> UrlStore:
        spec = dict(self.spec)
        spec["path"] = spec.get("path", "") + name.strip("/") + "/"
        return UrlStore(spec, self.file(name), shared=self._shared)

    def parent(self) -> UrlStore | None:
        path = self.spec.get("path", "").rstrip("/")
        if not path:
            return None
        spec = dict(self.spec)
        spec["path"] = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        return UrlStore(spec, self.display.rstrip("/").rsplit("/", 1)[0], shared=self._shared)

    def tensorstore_spec(self) -> dict[str, Any]:
        return self.spec

    def tensorstore_context(self) -> ts.Context:
        return self._shared.tensorstore_context()

    def kvstore(self) -> ts.KvStore:
        """This directory as an open tensorstore kvstore (opened once)."""
        if self._store is None:
            ts = import_tensorstore()
            try:
                opening = ts.KvStore.open(self.spec, context=self.tensorstore_context())
                self._store = deadline.wait(opening, self.display)
            except ValueError as e:
                raise OSError(f"{self.display}: {str(e)[:400]}") from None
        return self._store

    # -- reads --------------------------------------------------------------------------------

    def _request(self, key: str, byte_range: slice | None) -> Any:
        """One read of an object: its bytes (of `byte_range`), None when it is absent,
        `_PAST_END` when the range reaches past its end. A store's failure is an OSError
        naming the key."""
        # the bytes asked for, when the range says (a range to the end: none known)
        nbytes = 0
        if byte_range is not None and byte_range.stop is not None:
            nbytes = byte_range.stop - (byte_range.start or 0)
        try:
            reading = self.kvstore().read(key, byte_range=byte_range)
            result = deadline.wait(reading, self.file(key), nbytes=nbytes)
        except ValueError as e:
            if "OUT_OF_RANGE" in str(e):
                return _PAST_END
            raise OSError(f"{self.file(key)}: {str(e)[:400]}") from None
        return bytes(result.value) if result.state == "value" else None

    def get(self, key: str, *, limit: int | None = None, rule: str = "JSON-003") -> bytes | None:
        check_key(key, file=self.file(key))
        if limit is None:
            limit = limits_in_force().max_json_bytes
        # one byte past the limit first: an object larger than the limit is never fetched
        past = self._request(key, slice(limit, limit + 1))
        if past is not None and past is not _PAST_END:
            raise FormatError(
                "file larger than its size limit",
                rule=rule,
                file=self.file(key),
                expected=f"<= {limit} bytes",
            )
        if past is None:
            return None
        data = self._request(key, None)
        if data is None or data is _PAST_END:
            return None  # removed meanwhile
        if len(data) > limit:  # grew meanwhile
            raise FormatError(
                "file larger than its size limit",
                rule=rule,
                file=self.file(key),
                expected=f"<= {limit} bytes",
                got=len(data),
            )
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes | None:
        check_key(key, file=self.file(key))
        data = self._request(key, slice(offset, offset + length))
        return self._short(key, offset) if data is _PAST_END else data

    def _short(self, key: str, offset: int) -> bytes | None:
        """What a range reaching past the end of `key` holds: from `offset` to the end (empty
        where `offset` is past it too), as a short ``pread``."""
        data = self._request(key, slice(offset, None))
        return b"" if data is _PAST_END else data

    def get_many(self, requests: Sequence[tuple[str, int, int]]) -> list[bytes | None]:
        store = self.kvstore()
        futures = []
        for key, offset, length in requests:
            check_key(key, file=self.file(key))
            futures.append(store.read(key, byte_range=slice(offset, offset + length)))
        out: list[bytes | None] = []
        for (key, offset, length), future in zip(requests, futures, strict=True):
            try:
                result = deadline.wait(future, self.file(key), nbytes=length)
            except ValueError as e:
                if "OUT_OF_RANGE" in str(e):
                    out.append(self._short(key, offset))
                    continue
                raise OSError(f"{self.file(key)}: {str(e)[:400]}") from None
            out.append(bytes(result.value) if result.state == "value" else None)
        return out

    def exists(self, key: str) -> bool:
        check_key(key, file=self.file(key))
        return self._request(key, slice(0, 0)) is not None

    def size(self, key: str) -> int | None:
        raise UnsupportedError(f"{self.file(key)}: an object store tells no size without a read")

    def _keys(self, prefix: str = "") -> list[bytes]:
        """Every key under this directory starting with `prefix`, as the store lists them."""
        ts = import_tensorstore()
        try:
            if prefix:
                p = prefix.encode("utf-8", "surrogateescape")
                end = _successor(p)
                rng = ts.KvStore.KeyRange(inclusive_min=p, exclusive_max=end)
                return deadline.wait(self.kvstore().list(rng), self.display)
            return deadline.wait(self.kvstore().list(), self.display)
        except ValueError as e:
            raise OSError(f"{self.display}: {str(e)[:400]}") from None

    def list(self, prefix: str = "") -> list[str]:
        found = self._keys(prefix)
        if len(found) > limits_in_force().max_directory_entries:
            raise FormatError(
                "too many objects under the directory",
                rule="LIMIT-005",
                file=self.display,
                expected=f"<= {limits_in_force().max_directory_entries}",
                got=len(found),
            )
        return sorted(k.decode("utf-8", "surrogateescape") for k in found)

    def list_dir(self, name: str = "") -> Listing:
        prefix = name.strip("/") + "/" if name.strip("/") else ""
        found: set[str] = set()
        dirs: set[str] = set()
        for key in self._keys(prefix):
            text = key.decode("utf-8", "replace")[len(prefix) :]
            head, sep, _ = text.partition("/")
            (dirs if sep else found).add(head)
        return Listing(frozenset(found), frozenset(dirs))

    def is_directory(self) -> bool | None:
        return bool(self._keys())

    # -- writes -------------------------------------------------------------------------------

    @staticmethod
    def _settle(future: Any, shown: str, nbytes: int = 0) -> None:
        """Wait for a write of `nbytes`; a store's failure, or no answer in time, is an
        OSError naming what was written."""
        try:
            deadline.wait(future, shown, nbytes=nbytes)
        except ValueError as e:
            raise OSError(f"{shown}: {str(e)[:400]}") from None

    def _write(self, key: str, value: bytes | None) -> None:
        check_key(key, file=self.file(key))
        nbytes = 0 if value is None else len(value)
        self._settle(self.kvstore().write(key, value), self.file(key), nbytes)

    def set(self, key: str, value: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            value = b"".join(value)
        self._write(key, bytes(value))

    def writer(self, key: str, *, background: BackgroundWriter | None = None) -> _ObjectFile:
        del background  # the write starts at close, asynchronous already (`InFlight`)
        check_key(key, file=self.file(key))
        return _ObjectFile(self, key)

    def _start(self, key: str, value: bytes) -> None:
        """Write `key` without waiting; `flush` waits (at most `InFlight`'s bound is held)."""
        future = self.kvstore().write(key, value)
        self._shared.inflight.add(future, len(value), self.file(key), self._settle)

    def flush(self) -> None:
        self._shared.inflight.wait(self._settle)

    def create(self, key: str, value: bytes) -> bool:
        check_key(key, file=self.file(key))
        if not self.capabilities.conditional_create:
            return super().create(key, value)
        try:
            writing = self.kvstore().write(key, value, if_equal=_NO_VALUE)
            stamp = deadline.wait(writing, self.file(key), nbytes=len(value))
        except ValueError as e:
            raise OSError(f"{self.file(key)}: {str(e)[:400]}") from None
        return bool(stamp.generation)

    def delete(self, key: str) -> None:
        self._write(key, None)

    def delete_prefix(self, prefix: str = "") -> None:
        ts = import_tensorstore()
        if prefix:
            p = prefix.encode("utf-8", "surrogateescape")
            rng = ts.KvStore.KeyRange(inclusive_min=p, exclusive_max=_successor(p))
        else:
            rng = ts.KvStore.KeyRange()
        try:
            deadline.wait(self.kvstore().delete_range(rng), self.display)
        except ValueError as e:
            raise OSError(f"{self.display}: {str(e)[:400]}") from None

    # -- the save protocol --------------------------------------------------------------------

    def write_path(self) -> str:
        return self.spec.get("path", "").rstrip("/")

    def begin(self, *, overwrite: bool, token: int | None = None) -> UrlPending:
        refuse_existing(self, overwrite=overwrite)
        if overwrite:
            self.clear()
        return UrlPending(self, overwrite)

    def join(self, token: int, *, overwrite: bool) -> UrlPending:
        return UrlPending(self, overwrite)

    def clear(self) -> None:
        """Remove everything here, commit markers first, deepest first: from the first
        deletion on no reader takes what is left as committed."""
        stale = [k for k in self.list() if k.rsplit("/", 1)[-1] == COMMIT_FILE]
        for key in sorted(stale, key=lambda k: (k.count("/"), k)):
            self.delete(key)
        self.delete_prefix("")

    def remove_committed(self) -> bool:
        if not self.is_directory():
            return False
        self.clear()
        return True

    def close(self) -> None:
        self._store = None


class _ObjectFile:
    """A new object, its parts held until `close` starts its write (a kvstore takes a value
    whole: a file's size bounds the memory a save to a bucket holds). The parts are held as
    given, not copied: a writer hands over buffers it does not change (encoded chunks, views
    of the arrays being saved), as it does to a local file's queued writes."""

    def __init__(self, store: UrlStore, key: str) -> None:
        self._store = store
        self._key = key
        self._parts: list[bytes | memoryview] = []

    def append(self, parts: Sequence[bytes | memoryview]) -> None:
        self._parts.extend(parts)

    def close(self) -> None:
        if self._parts is None:
            return
        value, self._parts = b"".join(self._parts), None  # type: ignore[assignment]
        self._store._start(self._key, value)


class UrlPending(Pending):
    """A save straight into an object store's directory, committed by its markers."""

    def __init__(self, store: UrlStore, overwrite: bool) -> None:
        self.store = store
        self.final = store.display
        self.overwrite = overwrite

    def commit(
        self, markers: Iterable[str] = ("",), *, texts: Mapping[str, bytes] | None = None
    ) -> None:
        self.store.flush()  # every other file is written before the first marker
        write_markers(self.store, self.store, markers, texts)

    def abort(self) -> None:
        try:
            self.store.flush()
        except OSError:
            pass
        self.store.delete_prefix("")


def _successor(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix` (b"" for none)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return b""
    p[-1] += 1
    return bytes(p)
