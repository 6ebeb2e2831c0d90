"""Copy a checkpoint between stores (``ockpt cp``): local directories, object stores, memory.

Both sides are `store.Store`s: the source is listed and read through its store (the one
hardened open for a local directory), the destination written through the save protocol
(`Store.begin` ... `Pending.commit`), which commits the way the destination allows: a local
copy is written under a temporary name and renamed when complete; in an object store every
file is written under its final name and ``commit_success.txt`` last, deepest directory first
(a committed step, or a checkpoint given directly, that lacks the file gets one), so readers of
the bucket see a step only once everything in it is there. Unfinished saves (temporary names,
and in a bucket the steps without ``commit_success.txt``) are not copied.
"""

from __future__ import annotations

from typing import Any

from .layout import Kind, Layout, is_temporary_name, select
from .limits import current as limits_in_force
from .names import COMMIT_FILE
from .store import as_store

__all__ = ["copy"]

#: commit_success.txt holds one sentence; a larger one is refused, not copied.
_MAX_MARKER_BYTES = 1 << 16


def _markers(layout: Layout) -> set[str]:
    """Directories (relative) that must end with a commit_success.txt in a store without
    rename: each committed step of a manager root, or the checkpoint itself."""
    if layout.kind is Kind.MANAGER_ROOT:
        return {s.name for s in layout.committed_steps()}
    return {""}


def copy(src: Any, dst: Any, *, overwrite: bool = False, progress: bool = True) -> int:
    """Copy the checkpoint at `src` to `dst` (paths, URLs or stores); returns the number of
    files written."""
    from . import _progress

    s, d = as_store(src), as_store(dst)
    if s.overlaps(d):  # it would read what it writes, or an overwrite would clear the source
        raise ValueError(
            f"cannot copy {s.display} to {d.display}: one is the other or lies inside it"
        )
    layout = select(s).target  # refuses what is no checkpoint (LOAD-050)
    # a step a reader must not read (in a bucket, one without commit_success.txt: directories
    # §7) is not copied: at a destination with rename it would look committed
    unfinished = tuple(f"{step.name}/" for step in layout.steps if not step.committed)
    keys = [
        k
        for k in s.list()
        if not k.startswith(unfinished) and not any(is_temporary_name(p) for p in k.split("/"))
    ]
    markers = {_directory(k) for k in keys if _is_marker(k)}
    if not d.capabilities.atomic_rename:
        markers |= _markers(layout)
    data_keys = [k for k in keys if not _is_marker(k)]
    total = len(data_keys) + len(markers)  # files, known before the first is copied
    pending = d.begin(overwrite=overwrite)
    try:
        with _progress.bar(total, "copying", enabled=progress, unit="file") as bar:
            for key in data_keys:  # read through the hardened open (PATH-003..005)
                value = s.get(key, limit=limits_in_force().max_chunk_bytes, rule="LIMIT-001")
                bar.update(1)
                if value is None:
                    continue  # removed meanwhile
                file = pending.store.writer(key)
                file.append([value])
                file.close()
            texts = {}  # the source's markers are copied as they are
            for key in keys:
                if _is_marker(key):
                    text = s.get(key, limit=_MAX_MARKER_BYTES, rule="LIMIT-001")
                    if text is not None:
                        texts[_directory(key)] = text
            pending.commit(markers, texts=texts)  # last, deepest first: seen when complete
            bar.update(len(markers))
    except BaseException:
        pending.abort()
        raise
    return total


def _is_marker(key: str) -> bool:
    return key.rsplit("/", 1)[-1] == COMMIT_FILE


def _directory(key: str) -> str:
    """The directory (relative) holding the file `key`."""
    return key.rsplit("/", 1)[0] if "/" in key else ""
