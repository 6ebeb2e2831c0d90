"""What a checkpoint path holds, by the names present: for ``ockpt ls`` and for choosing the
step of a checkpoint-manager root.

Unlike `ockpt.detect` (local directories), this walks any tensorstore kvstore location: a local
path or a URL (``s3://``, ``gs://``, ``file://``). Object stores have no atomic rename, so
Orbax writes a step there under its final name and marks it complete with
``commit_success.txt`` last: there a step counts as committed only when that file is
present. Where saves rename (local paths, ``file://``, ``memory://``) a step is committed when
its name is not a temporary one (LAYOUT-001).
Reads only directory listings and the small ``_CHECKPOINT_METADATA`` documents.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import tensorstore as ts

from . import storage
from .documents.checkpoint_metadata import CHECKPOINT_METADATA_FILE, CheckpointMetadata
from .errors import NotACheckpointError, OckptError
from .layout import (
    COMMIT_FILE,
    MANIFEST_FILE,
    MSGPACK_FILE,
    V1_MARKER,
    is_temporary_name,
    parse_step_name,
)

__all__ = ["Entry", "describe", "resolve_step"]

_ITEM_FILES = frozenset({"_METADATA", MSGPACK_FILE, MANIFEST_FILE})
_JSON_ITEM_FILES = frozenset({"metadata", "data.json"})


@dataclass(frozen=True)
class Entry:
    """One directory of a checkpoint: what it is, whether it is committed, and its parts.

    `kind` is one of ``manager_root``, ``step``, ``v1_checkpoint``, ``pytree_item``,
    ``json_item``, ``temporary`` or ``unknown``. `children` are the steps of a manager root or
    the items of a step / v1 checkpoint. Times are ``_CHECKPOINT_METADATA``'s, in ns.
    """

    name: str
    path: str
    kind: str
    committed: bool
    has_commit_file: bool
    step: int | None = None
    storage: str | None = None
    init_time_ns: int | None = None
    commit_time_ns: int | None = None
    children: tuple[Entry, ...] = field(default_factory=tuple)

    @property
    def latest_step(self) -> Entry | None:
        steps = [c for c in self.children if c.kind == "step" and c.committed]
        return max(steps, key=lambda c: c.step or 0) if steps else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "committed": self.committed,
            "has_commit_file": self.has_commit_file,
        }
        for key in ("step", "storage", "init_time_ns", "commit_time_ns"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.commit_time_ns is not None:
            out["commit_time"] = format_time(self.commit_time_ns)
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        return out


def format_time(ns: int | None) -> str:
    if ns is None:
        return "-"
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _times(loc: storage.Location, files: set[str], context: ts.Context) -> tuple[Any, Any]:
    if CHECKPOINT_METADATA_FILE not in files:
        return None, None
    try:
        data = loc.read(CHECKPOINT_METADATA_FILE, context=context, max_bytes=1 << 20)
        if data is None:
            return None, None
        doc = CheckpointMetadata.from_bytes(data, file=loc.file(CHECKPOINT_METADATA_FILE))
    except (OckptError, OSError, ValueError):
        return None, None
    init = doc.init_timestamp_nsecs if isinstance(doc.init_timestamp_nsecs, int) else None
    done = doc.commit_timestamp_nsecs if isinstance(doc.commit_timestamp_nsecs, int) else None
    return init, done


def _storage_kind(files: set[str], dirs: set[str]) -> str:
    if MANIFEST_FILE in files or any(d.startswith("ocdbt.process_") for d in dirs):
        return "ocdbt"
    if dirs - {"array_metadatas", "d"}:
        return "per_leaf_zarr"
    return "msgpack" if MSGPACK_FILE in files else "none"


def _describe(
    loc: storage.Location, name: str, *, context: ts.Context, depth: int, in_manager: bool
) -> Entry:
    files, dirs = loc.listdir(context=context)
    commit = COMMIT_FILE in files
    init, done = _times(loc, files, context)
    parsed = parse_step_name(name) if in_manager else None
    step = parsed[1] if parsed is not None else None
    # On an object store a step is complete only once commit_success.txt is written.
    committed = not is_temporary_name(name) and (loc.has_rename or commit or not in_manager)
    common = dict(name=name, path=loc.display, has_commit_file=commit, step=step)
    common.update(init_time_ns=init, commit_time_ns=done)
    if is_temporary_name(name):
        return Entry(kind="temporary", committed=False, **common)
    if _ITEM_FILES & files or any(d.startswith("ocdbt.process_") for d in dirs):
        return Entry(
            kind="pytree_item", committed=committed, storage=_storage_kind(files, dirs), **common
        )
    children: tuple[Entry, ...] = ()
    if V1_MARKER in files or CHECKPOINT_METADATA_FILE in files:
        if depth < 2:
            children = tuple(
                _describe(loc.join(d), d, context=context, depth=depth + 1, in_manager=False)
                for d in sorted(dirs)
            )
        kind = "v1_checkpoint" if V1_MARKER in files else "step"
        return Entry(kind=kind, committed=committed, children=children, **common)
    if files & _JSON_ITEM_FILES and not dirs:
        return Entry(kind="json_item", committed=committed, **common)
    steps = [d for d in dirs if parse_step_name(d.split(".orbax-checkpoint-tmp")[0]) is not None]
    if steps and depth == 0:
        children = tuple(
            _describe(loc.join(d), d, context=context, depth=depth + 1, in_manager=True)
            for d in steps
        )
        children = tuple(sorted(children, key=lambda c: (c.step is None, c.step or 0, c.name)))
        return Entry(kind="manager_root", committed=True, children=children, **common)
    return Entry(kind="unknown", committed=False, **common)


def describe(path: Any, *, context: ts.Context | None = None) -> Entry:
    """Describe a checkpoint path (local or URL): its kind, steps or items, commit state."""
    loc = storage.Location.of(path)
    ctx = storage.new_context(context)
    name = loc.display.rstrip("/").rsplit("/", 1)[-1]
    return _describe(loc, name, context=ctx, depth=0, in_manager=False)


def resolve_step(
    path: Any, *, step: int | None = None, context: ts.Context | None = None
) -> tuple[str, Entry, Entry | None]:
    """The path to read for `path`: for a manager root, its committed step `step` (latest by
    default); anything else as is. Returns (path, the root's Entry, the chosen step or None).
    """
    root = describe(path, context=context)
    if root.kind == "unknown":
        raise NotACheckpointError(f"{root.path}: not a checkpoint (no item, step or manager root)")
    if root.kind != "manager_root":
        if step is not None:
            raise NotACheckpointError(f"{root.path}: --step given, but this is a {root.kind}")
        return root.path, root, None
    committed = [c for c in root.children if c.kind == "step" and c.committed]
    if step is None:
        chosen = root.latest_step
        if chosen is None:
            raise NotACheckpointError(
                f"{root.path}: checkpoint-manager root without a committed step"
            )
    else:
        found = [c for c in committed if c.step == step]
        if not found:
            raise NotACheckpointError(
                f"{root.path}: no committed step {step}; committed steps: "
                f"{[c.step for c in committed]}"
            )
        chosen = found[0]
    return chosen.path, root, chosen
