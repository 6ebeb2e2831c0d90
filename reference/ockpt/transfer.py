"""Copy a checkpoint between local directories and object stores (``ockpt cp``).

Everything goes through tensorstore kvstores, so a source or destination may be a local path or
a URL (``s3://``, ``gs://``, ``file://``; an S3-compatible server's endpoint comes from
``AWS_ENDPOINT_URL``). Unfinished saves (temporary names) are not copied.

Object stores have no atomic rename: as Orbax does there, every file is written under its final
name and ``commit_success.txt`` is written last: after all other files, deepest directory
first. A committed step (or a checkpoint given directly) that lacks the file gets one, so
readers of the bucket see it as complete only once everything is there. A local destination
is written under a temporary name and renamed when complete (`commit`).
"""

from __future__ import annotations

from typing import Any

import tensorstore as ts

from . import commit
from .errors import WriteConflictError
from .kv import Location, new_context
from .layout import Kind, Layout, is_temporary_name, select
from .limits import LIMITS
from .names import COMMIT_FILE

__all__ = ["copy", "put_file"]

_IN_FLIGHT = 8
_MAX_FILE_BYTES = LIMITS.max_chunk_bytes


def _kvstore(loc: Location, context: ts.Context) -> ts.KvStore:
    return ts.KvStore.open(loc.spec, context=context).result()


def _keys(kv: ts.KvStore) -> list[str]:
    keys = [k.decode("utf-8") for k in kv.list().result()]
    return sorted(k for k in keys if not any(is_temporary_name(p) for p in k.split("/")))


def _markers(layout: Layout) -> list[str]:
    """Directories (relative) that must end with a commit_success.txt in an object store: each
    committed step of a manager root, or the checkpoint itself."""
    if layout.kind is Kind.MANAGER_ROOT:
        return [s.name for s in layout.committed_steps()]
    return [""]


def copy(src: Any, dst: Any, *, overwrite: bool = False, progress: bool = True) -> int:
    """Copy the checkpoint at `src` to `dst`; returns the number of files written."""
    from . import _progress

    context = new_context()
    s, d = Location.of(src), Location.of(dst)
    layout = select(s, context=context).target  # refuses what is no checkpoint (LOAD-050)
    source = _kvstore(s, context)
    keys = _keys(source)
    pending = None
    if d.local is not None:
        pending = commit.begin(d.local, overwrite=overwrite)
        try:
            target = _kvstore(Location.of(pending.tmp), context)
        except BaseException:
            commit.abort(pending)
            raise
    else:
        target = _kvstore(d, context)
        existing = target.list().result()
        if existing and not overwrite:
            raise WriteConflictError(
                f"{d.display}: objects already exist there; pass --overwrite to replace them"
            )
        # A replaced checkpoint must not keep stale files. Its commit markers go first, so
        # that from the first deletion on no reader takes what is left as committed.
        stale = [k for k in existing if k.decode("utf-8", "replace").endswith(COMMIT_FILE)]
        for key in sorted(stale, key=lambda k: k.count(b"/")):
            target.write(key, None).result()
        target.delete_range(ts.KvStore.KeyRange()).result()
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
    total = sum(1 for _ in data_keys) + len(commits)
    try:
        with _progress.bar(total, "copying", enabled=progress, unit="file") as bar:
            futures: list[Any] = []
            for key in data_keys:  # read through the hardened open (PATH-003..005)
                value = s.read(key, context=context, limit=_MAX_FILE_BYTES, rule="LIMIT-001")
                if value is None:
                    continue  # removed meanwhile
                futures.append(target.write(key, value))
                if len(futures) >= _IN_FLIGHT:
                    futures.pop(0).result()
                bar.update(1)
            for f in futures:
                f.result()
            for key in commits:  # last, deepest first: a reader sees a step only when complete
                data = s.read(key, context=context, limit=_MAX_FILE_BYTES, rule="LIMIT-001")
                if data is None:
                    final = f"{d.display}/{key.rsplit('/', 1)[0]}" if "/" in key else d.display
                    data = commit.commit_text(final).encode()
                target.write(key, data).result()
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
    kv = _kvstore(loc, new_context())
    if not overwrite and kv.read(name).result().state == "value":
        raise WriteConflictError(f"{url}: exists; pass --overwrite to replace it")
    with open(local, "rb") as f:
        kv.write(name, f.read()).result()
