"""Say what a directory is, from the names present and a few small documents.

`detect` never raises on a path it is given: whatever it finds (or fails to read) becomes a
`Layout` whose `kind` and `reason` say what it is and why. It reads no array data.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

from .documents.checkpoint_metadata import CHECKPOINT_METADATA_FILE, CheckpointMetadata
from .documents.metadata import FILE_NAME as METADATA_FILE
from .documents.metadata import MetadataDocument
from .errors import OckptError
from .paths import resolve_inside

__all__ = [
    "Kind",
    "Storage",
    "ItemFormat",
    "Step",
    "Layout",
    "detect",
    "is_temporary_name",
    "parse_step_name",
    "TMP_MARKER",
    "REPLACED_SUFFIX",
    "COMMIT_FILE",
    "V1_MARKER",
]

TMP_MARKER = ".orbax-checkpoint-tmp"
#: `<name>` + this: where an overwrite without atomic exchange parks the old checkpoint (DIR-006).
REPLACED_SUFFIX = TMP_MARKER + "-replaced"
COMMIT_FILE = "commit_success.txt"
V1_MARKER = "orbax.checkpoint"
MSGPACK_FILE = "checkpoint"
MANIFEST_FILE = "manifest.ocdbt"
ROOT_METADATA_DIR = "metadata"
_OCDBT_PROCESS_DIR = re.compile(r"ocdbt\.process_(0|[1-9][0-9]*)")
_STEP_NAME = re.compile(r"(?:(?P<prefix>.+)_)?(?P<step>[0-9]+)")
#: v1 names of the pytree checkpointable, newest first.
PYTREE_CHECKPOINTABLES = ("state", "pytree")
#: Files that mark a directory as an item, step or v1 checkpoint (never a leaf's array).
_ITEM_OR_STEP_FILES = frozenset(
    {
        "_METADATA",
        "checkpoint",
        "manifest.ocdbt",
        "_CHECKPOINT_METADATA",
        "orbax.checkpoint",
        "commit_success.txt",
    }
)
#: The largest `_METADATA` / `_CHECKPOINT_METADATA` that detection reads.
_MAX_PEEK_BYTES = 64 << 20


class Kind(str, enum.Enum):
    """What a directory is."""

    PYTREE_ITEM = "pytree_item"  # one pytree: _METADATA, OCDBT or per-leaf zarr, or msgpack
    JSON_ITEM = "json_item"  # a JSON checkpointable / item (a `metadata` or `metrics` file)
    V1_CHECKPOINT = "v1_checkpoint"  # v1 root: `orbax.checkpoint` marker + checkpointables
    STEP = "step"  # one step of a checkpoint manager: named items
    MANAGER_ROOT = "manager_root"  # step directories (+ metadata/_ROOT_METADATA)
    TEMPORARY = "temporary"  # an uncommitted `*.orbax-checkpoint-tmp*` directory
    UNKNOWN_ITEM = "unknown_item"  # a named item of a step or v1 checkpoint we cannot type
    NOT_A_CHECKPOINT = "not_a_checkpoint"


class Storage(str, enum.Enum):
    """Where a pytree item keeps its arrays."""

    OCDBT = "ocdbt"  # manifest.ocdbt (+ ocdbt.process_N/)
    PER_LEAF_ZARR = "per_leaf_zarr"  # one zarr directory per leaf
    INLINE = "inline"  # all values inline in the msgpack `checkpoint` file
    NONE = "none"  # no array data at all (e.g. only strings or empty nodes)


@dataclass(frozen=True)
class ItemFormat:
    """How a pytree item is stored."""

    storage: Storage
    zarr_version: int | None  # 2 or 3; None when unknown without opening the database
    has_metadata: bool  # `_METADATA` present
    has_msgpack: bool  # legacy msgpack `checkpoint` file present (written up to 0.5.15)
    ocdbt_processes: tuple[int, ...] = ()  # N of each `ocdbt.process_N/`
    has_root_manifest: bool = False  # `manifest.ocdbt` at the item root


@dataclass(frozen=True)
class Step:
    """A step directory of a checkpoint manager root."""

    step: int
    name: str
    committed: bool  # not under a temporary name
    has_commit_file: bool


@dataclass(frozen=True)
class Layout:
    """The answer of `detect`."""

    path: str
    kind: Kind
    reason: str
    item: ItemFormat | None = None
    checkpointables: Mapping[str, Layout] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    step_prefix: str | None = None
    temporaries: tuple[str, ...] = ()  # uncommitted entries found inside
    has_commit_file: bool = False
    problems: tuple[str, ...] = ()  # small documents that failed to parse, and similar

    @property
    def committed(self) -> bool:
        return self.kind not in (Kind.TEMPORARY, Kind.NOT_A_CHECKPOINT)

    @property
    def pytree(self) -> Layout | None:
        """The pytree item itself, or the pytree checkpointable of a v1 checkpoint."""
        if self.kind is Kind.PYTREE_ITEM:
            return self
        if self.kind is Kind.V1_CHECKPOINT:
            for name in PYTREE_CHECKPOINTABLES:
                found = self.checkpointables.get(name)
                if found is not None and found.kind is Kind.PYTREE_ITEM:
                    return found
        return None

    @property
    def latest_step(self) -> Step | None:
        committed = [s for s in self.steps if s.committed]
        return max(committed, key=lambda s: s.step) if committed else None


def is_temporary_name(name: str) -> bool:
    """True for names of uncommitted saves (`<name>.orbax-checkpoint-tmp[-<N>]`)."""
    return TMP_MARKER in name


def parse_step_name(name: str) -> tuple[str | None, int] | None:
    """(prefix, step) for a step directory name like `12`, `000012` or `run_12`."""
    m = _STEP_NAME.fullmatch(name)
    if m is None:
        return None
    return m.group("prefix"), int(m.group("step"))


@dataclass
class _Listing:
    files: set[str]
    dirs: set[str]


def _list(path: str) -> _Listing:
    files: set[str] = set()
    dirs: set[str] = set()
    with os.scandir(path) as it:
        for entry in it:
            try:
                if entry.is_dir():
                    dirs.add(entry.name)
                elif entry.is_file():
                    files.add(entry.name)
            except OSError:
                continue
    return _Listing(files, dirs)


def detect(path: str | os.PathLike[str]) -> Layout:
    """Describe what `path` is. Never raises: failures become NOT_A_CHECKPOINT with a reason."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as e:
        reason = f"cannot stat: {e.strerror or e}"
        if isinstance(e, FileNotFoundError):
            reason += interrupted_overwrite_note(p)
        return Layout(p, Kind.NOT_A_CHECKPOINT, reason)
    if not stat.S_ISDIR(st.st_mode):
        return Layout(p, Kind.NOT_A_CHECKPOINT, "not a directory")
    try:
        return _detect_dir(p, depth=0)
    except (OSError, RecursionError) as e:
        return Layout(p, Kind.NOT_A_CHECKPOINT, f"cannot read directory: {e}")


def interrupted_overwrite_note(p: str) -> str:
    """For a missing path: a note naming its ``-replaced`` sibling when there is one, the
    checkpoint an interrupted overwrite left there (LAYOUT-006); "" otherwise."""
    sibling = os.path.normpath(p) + REPLACED_SUFFIX
    if not os.path.isdir(sibling):
        return ""
    return (
        f"; an interrupted overwrite left the checkpoint at {sibling}: the next save to this "
        "path renames it back, or rename it back yourself"
    )


def _detect_dir(p: str, *, depth: int) -> Layout:
    name = os.path.basename(os.path.normpath(p))
    if is_temporary_name(name):
        return Layout(p, Kind.TEMPORARY, f"name contains {TMP_MARKER!r}: an unfinished save")
    listing = _list(p)
    commit = COMMIT_FILE in listing.files
    if V1_MARKER in listing.files:
        return _detect_composite(p, listing, depth=depth)
    item = _item_format(p, listing)
    if item is not None:
        reason, fmt, problems = item
        return Layout(
            p, Kind.PYTREE_ITEM, reason, item=fmt, has_commit_file=commit, problems=problems
        )
    if CHECKPOINT_METADATA_FILE in listing.files or _is_bare_step(name, p, listing):
        return _detect_composite(p, listing, depth=depth)
    json_file = _json_item_file(listing) if depth > 0 else None
    if json_file is not None:
        return Layout(
            p, Kind.JSON_ITEM, f"holds the JSON file {json_file!r}", has_commit_file=commit
        )
    if depth == 0:
        root = _detect_manager_root(p, listing)
        if root is not None:
            return root
    return Layout(
        p,
        Kind.NOT_A_CHECKPOINT,
        "no _METADATA, checkpoint file, manifest.ocdbt, per-leaf zarr arrays, "
        "_CHECKPOINT_METADATA, orbax.checkpoint marker or step directories",
    )


#: File names of JSON items (spec/directories.md §6).
_JSON_ITEM_FILES = frozenset({"metadata", "metrics", "data.json"})


def _is_bare_step(name: str, p: str, listing: _Listing) -> bool:
    """A step without `_CHECKPOINT_METADATA` (LAYOUT-005: releases up to 0.4.8 write them).

    Its name is a step name, it holds no file but `commit_success.txt`, and every subdirectory
    that is not temporary is an item: a pytree item, or a JSON item holding one of the JSON item
    file names; there is at least one. A directory that merely contains a checkpoint among other
    things is not a step.
    """
    if parse_step_name(name) is None or listing.files - {COMMIT_FILE}:
        return False
    items = 0
    for sub in listing.dirs:
        if is_temporary_name(sub):
            continue
        sub_path = os.path.join(p, sub)
        sub_listing = _list(sub_path)
        if _item_format(sub_path, sub_listing) is None:
            if _json_item_file(sub_listing) not in _JSON_ITEM_FILES:
                return False
        items += 1
    return items > 0


def _json_item_file(listing: _Listing) -> str | None:
    data = listing.files - {COMMIT_FILE}
    if len(data) == 1 and not listing.dirs:
        return next(iter(data))
    return None


def _has_zarr_metadata(p: str, listing: _Listing, *, depth: int = 0) -> int | None:
    """Zarr version of the first per-leaf array found under `p` (keys with '/' nest dirs)."""
    if depth > 0:
        if ".zarray" in listing.files:
            return 2
        if "zarr.json" in listing.files:
            return 3
    if depth >= 8:
        return None
    for sub in sorted(listing.dirs):
        if _OCDBT_PROCESS_DIR.fullmatch(sub) or sub in ("d", "array_metadatas"):
            continue
        if is_temporary_name(sub):  # an unfinished save is no leaf's array (LOAD-054)
            continue
        sub_listing = _list(os.path.join(p, sub))
        if sub_listing.files & _ITEM_OR_STEP_FILES:
            continue  # an item (or step) of its own, not one leaf's array directory
        found = _has_zarr_metadata(os.path.join(p, sub), sub_listing, depth=depth + 1)
        if found:
            return found
    return None


def _item_format(p: str, listing: _Listing) -> tuple[str, ItemFormat, tuple[str, ...]] | None:
    """(reason, format, problems) if `p` holds a pytree item, else None."""
    has_metadata = METADATA_FILE in listing.files
    has_msgpack = MSGPACK_FILE in listing.files
    root_manifest = MANIFEST_FILE in listing.files
    processes = tuple(
        sorted(int(m.group(1)) for d in listing.dirs if (m := _OCDBT_PROCESS_DIR.fullmatch(d)))
    )
    per_leaf = None if (root_manifest or processes) else _has_zarr_metadata(p, listing)
    if not (has_metadata or has_msgpack or root_manifest or processes or per_leaf):
        return None
    problems: list[str] = []
    zarr_version = per_leaf
    if has_metadata:
        try:
            doc = _peek(os.path.join(p, METADATA_FILE), MetadataDocument.read)
            if doc is not None and isinstance(doc.use_zarr3, bool):
                zarr_version = 3 if doc.use_zarr3 else 2
        except OckptError as e:
            problems.append(str(e))
    if root_manifest or processes:
        storage = Storage.OCDBT
        reason = "OCDBT database"
        if not root_manifest:
            reason += " (per-process databases only, no merged root manifest)"
    elif per_leaf:
        storage, reason = Storage.PER_LEAF_ZARR, "per-leaf zarr directories"
    elif has_msgpack:
        storage, reason = Storage.INLINE, "values inline in the msgpack checkpoint file"
    else:
        storage, reason = Storage.NONE, "no array storage"
    era = "_METADATA" if has_metadata else "no _METADATA"
    if has_msgpack:
        era += ", legacy msgpack checkpoint file"
    fmt = ItemFormat(storage, zarr_version, has_metadata, has_msgpack, processes, root_manifest)
    return f"pytree item: {reason}; {era}", fmt, tuple(problems)


def _peek(path: str, reader):  # type: ignore[no-untyped-def]
    """Parse a small document with `reader`, or None when it is too large to peek at; a link
    leading out of its directory is refused (PATH-004) before anything is opened."""
    resolve_inside(os.path.dirname(path), os.path.basename(path), file=path)
    if os.stat(path).st_size > _MAX_PEEK_BYTES:
        return None
    return reader(path)


def _detect_composite(p: str, listing: _Listing, *, depth: int) -> Layout:
    is_v1 = V1_MARKER in listing.files
    problems: list[str] = []
    names: tuple[str, ...] | None = None
    if CHECKPOINT_METADATA_FILE in listing.files:
        try:
            meta = _peek(os.path.join(p, CHECKPOINT_METADATA_FILE), CheckpointMetadata.read)
            names = meta.item_names if meta is not None else None
        except OckptError as e:
            problems.append(str(e))
    temporaries = tuple(sorted(d for d in listing.dirs if is_temporary_name(d)))
    subdirs = sorted(d for d in listing.dirs if not is_temporary_name(d))
    children = {}
    for sub in subdirs:
        child = _detect_dir(os.path.join(p, sub), depth=depth + 1)
        if child.kind is Kind.NOT_A_CHECKPOINT:
            child = Layout(child.path, Kind.UNKNOWN_ITEM, child.reason)
        children[sub] = child
    if names is not None:
        missing = sorted(set(names) - set(children))
        if missing:
            problems.append(
                f"{CHECKPOINT_METADATA_FILE} names items with no directory: {missing} [LAYOUT-003]"
            )
    kind = Kind.V1_CHECKPOINT if is_v1 else Kind.STEP
    what = "v1 checkpoint" if is_v1 else "checkpoint-manager step"
    reason = f"{what} with {len(children)} item(s): {', '.join(children) or 'none'}"
    return Layout(
        p,
        kind,
        reason,
        checkpointables=children,
        temporaries=temporaries,
        has_commit_file=COMMIT_FILE in listing.files,
        problems=tuple(problems),
    )


def _looks_like_step(p: str, listing: _Listing) -> bool:
    """A step holds step metadata, is itself an item, or holds at least one item directory."""
    if CHECKPOINT_METADATA_FILE in listing.files or V1_MARKER in listing.files:
        return True
    if _item_format(p, listing) is not None:
        return True
    for sub in listing.dirs:
        if is_temporary_name(sub):
            continue
        sub_path = os.path.join(p, sub)
        sub_listing = _list(sub_path)
        if _item_format(sub_path, sub_listing) is not None or _json_item_file(sub_listing):
            return True
    return False


def _detect_manager_root(p: str, listing: _Listing) -> Layout | None:
    steps: list[Step] = []
    prefixes: set[str | None] = set()
    temporaries = []
    for sub in sorted(listing.dirs):
        base = sub.split(TMP_MARKER)[0] if is_temporary_name(sub) else sub
        parsed = parse_step_name(base)
        if parsed is None:
            continue
        prefix, number = parsed
        if is_temporary_name(sub):
            temporaries.append(sub)
            steps.append(Step(number, sub, committed=False, has_commit_file=False))
            continue
        child_path = os.path.join(p, sub)
        child_listing = _list(child_path)
        if not _looks_like_step(child_path, child_listing):
            continue
        prefixes.add(prefix)
        steps.append(
            Step(number, sub, committed=True, has_commit_file=COMMIT_FILE in child_listing.files)
        )
    has_root_metadata = ROOT_METADATA_DIR in listing.dirs
    if not steps and not has_root_metadata:
        return None
    committed = [s for s in steps if s.committed]
    problems = []
    if len(prefixes) > 1:
        problems.append(
            f"step directories use several prefixes: {sorted(map(str, prefixes))} [LAYOUT-004]"
        )
    prefix = next(iter(prefixes)) if len(prefixes) == 1 else None
    reason = f"checkpoint-manager root with {len(committed)} committed step(s)" + (
        f" and {len(temporaries)} unfinished" if temporaries else ""
    )
    return Layout(
        p,
        Kind.MANAGER_ROOT,
        reason,
        steps=tuple(sorted(steps, key=lambda s: s.step)),
        step_prefix=prefix,
        temporaries=tuple(temporaries),
        problems=tuple(problems),
    )
