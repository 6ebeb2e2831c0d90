"""Copy a checkpoint between local directories and object stores (``ockpt cp``).

A source or destination may be a local path or a URL (``s3://``, ``gs://``, ``file://``; an
S3-compatible server's endpoint comes from ``AWS_ENDPOINT_URL``). Local directories are listed
and read through `kv` and written through `commit`; URLs through tensorstore's kvstores, so
only a copy from or to a URL needs the ``tensorstore`` extra. Unfinished saves (temporary
names, and in a bucket the steps without ``commit_success.txt``) are not copied.

Object stores have no atomic rename: as Orbax does there, every file is written under its final
name and ``commit_success.txt`` is written last: after all other files, deepest directory
first. A committed step (or a checkpoint given directly) that lacks the file gets one, so
readers of the bucket see it as complete only once everything is there. A local destination
is written under a temporary name and renamed when complete (`commit`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import commit
from .errors import FormatError, WriteConflictError
from .kv import Location, import_tensorstore, new_context
from .layout import Kind, Layout, is_temporary_name, select
from .limits import LIMITS
from .names import COMMIT_FILE

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = ["copy", "put_file"]

_IN_FLIGHT = 8
_MAX_FILE_BYTES = LIMITS.max_chunk_bytes


def _keys(loc: Location, context: ts.Context | None) -> list[str]:
    """The files of the checkpoint at `loc`, relative, sorted; unfinished saves left out."""
    if loc.local is not None:
        keys: Iterator[str] = _walk(loc)
    else:
        keys = (k.decode("utf-8") for k in loc.kvstore(context).list().result())
    return sorted(k for k in keys if not any(is_temporary_name(p) for p in k.split("/")))


def _walk(loc: Location, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """The relative names of everything but directories under the local directory `loc`
    (what is no regular file is listed too, and refused when read: PATH-005)."""
    if depth > LIMITS.max_depth:
        raise FormatError(
            "directories nested deeper than the limit",
            rule="LIMIT-001",
            file=loc.display,
            expected=f"<= {LIMITS.max_depth} levels",
        )
    listing = loc.listdir()
    yield from (prefix + name for name in listing.files | listing.other)
    for name in listing.dirs:
        yield from _walk(loc.join(name), f"{prefix}{name}/", depth + 1)


class _LocalTarget:
    """A local destination: the files of the copy's temporary directory, each written whole
    and flushed with the rest when the copy commits (`commit.finish`)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def write(self, key: str, value: bytes) -> None:
        commit.write_file(os.path.join(self.root, key), value, sync=False)

    def wait(self) -> None:
        """Nothing is left in flight: each `write` returns once written."""


class _StoreTarget:
    """A kvstore destination (a URL): up to `_IN_FLIGHT` writes at once."""

    def __init__(self, kvstore: ts.KvStore) -> None:
        self.kvstore = kvstore
        self._pending: list[Any] = []

    def write(self, key: str, value: bytes) -> None:
        self._pending.append(self.kvstore.write(key, value))
        if len(self._pending) >= _IN_FLIGHT:
            self._pending.pop(0).result()

    def wait(self) -> None:
        """Return once every write is done."""
        for future in self._pending:
            future.result()
        self._pending.clear()

    def clear(self, display: str, *, overwrite: bool) -> None:
        """Remove what the destination holds, refused (WriteConflictError) without
        `overwrite`. A replaced checkpoint must not keep stale files. Its commit markers go
        first, so that from the first deletion on no reader takes what is left as committed."""
        existing = self.kvstore.list().result()
        if existing and not overwrite:
            raise WriteConflictError(
                f"{display}: objects already exist there; pass --overwrite to replace them"
            )
        stale = [k for k in existing if k.decode("utf-8", "replace").endswith(COMMIT_FILE)]
        for key in sorted(stale, key=lambda k: k.count(b"/")):
            self.kvstore.write(key, None).result()
        self.kvstore.delete_range(import_tensorstore().KvStore.KeyRange()).result()


def _markers(layout: Layout) -> list[str]:
    """Directories (relative) that must end with a commit_success.txt in an object store: each
    committed step of a manager root, or the checkpoint itself."""
    if layout.kind is Kind.MANAGER_ROOT:
        return [s.name for s in layout.committed_steps()]
    return [""]


def _begin_local(local: str, display: str, *, overwrite: bool) -> commit.Pending:
    """Start the copy into the local directory `local`; a refusal names it as the user gave
    it (`display`) and the command's flag (DIR-002), as the refusals for URLs do."""
    try:
        return commit.begin(local, overwrite=overwrite)
    except WriteConflictError as e:
        raise WriteConflictError(
            "a checkpoint already exists there; pass --overwrite to replace it",
            rule=e.rule,
            file=display,
        ) from None


def copy(src: Any, dst: Any, *, overwrite: bool = False, progress: bool = True) -> int:
    """Copy the checkpoint at `src` to `dst`; returns the number of files written."""
    from . import _progress

    s, d = Location.of(src), Location.of(dst)
    # a tensorstore context only where a URL is: a local copy needs no tensorstore
    context = new_context() if s.local is None or d.local is None else None
    layout = select(s, context=context).target  # refuses what is no checkpoint (LOAD-050)
    # a step a reader must not read (in a bucket, one without commit_success.txt: directories
    # §7) is not copied: at a local destination it would look committed
    unfinished = tuple(f"{step.name}/" for step in layout.steps if not step.committed)
    keys = [k for k in _keys(s, context) if not k.startswith(unfinished)]
    pending = None
    target: _LocalTarget | _StoreTarget
    if d.local is not None:
        pending = _begin_local(d.local, d.display, overwrite=overwrite)
        target = _LocalTarget(pending.tmp)
    else:
        target = _StoreTarget(d.kvstore(context))
        target.clear(d.display, overwrite=overwrite)
    wanted = (
        set()
        if d.local is not None
        else {(m + "/" if m else "") + COMMIT_FILE for m in _markers(layout)}
    )
    commits = sorted(
        {k for k in keys if k.rsplit("/", 1)[-1] == COMMIT_FILE} | wanted,
        key=lambda k: (-k.count("/"), k),
    )
    data_keys = [k for k in keys if k not in set(commits)]
    total = len(data_keys) + len(commits)  # files, known before the first is copied
    try:
        with _progress.bar(total, "copying", enabled=progress, unit="file") as bar:
            for key in data_keys:  # read through the hardened open (PATH-003..005)
                value = s.read(key, context=context, limit=_MAX_FILE_BYTES, rule="LIMIT-001")
                bar.update(1)
                if value is None:
                    continue  # removed meanwhile
                target.write(key, value)
            target.wait()
            for key in commits:  # last, deepest first: a reader sees a step only when complete
                data = s.read(key, context=context, limit=_MAX_FILE_BYTES, rule="LIMIT-001")
                if data is None:
                    final = f"{d.display}/{key.rsplit('/', 1)[0]}" if "/" in key else d.display
                    data = commit.commit_text(final).encode()
                target.write(key, data)
                target.wait()
                bar.update(1)
        if pending is not None:
            commit.finish(pending, marker=False)
    except BaseException:
        if pending is not None:
            commit.abort(pending)
        raise
    return total


def put_file(local: str, url: str, *, overwrite: bool = False) -> None:
    """Upload one local file to `url` (a kvstore URL or path). The file is read whole."""
    loc = Location.of(url.rsplit("/", 1)[0] + "/")
    name = url.rsplit("/", 1)[1]
    kv = loc.kvstore()
    if not overwrite and kv.read(name).result().state == "value":
        raise WriteConflictError(f"{url}: exists; pass --overwrite to replace it")
    with open(local, "rb") as f:
        kv.write(name, f.read()).result()
