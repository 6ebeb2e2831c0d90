"""The one resolver: what a path is, and which directory a read of it means.

`detect` says what a directory is (item, v1 checkpoint, step, checkpoint-manager root of any
era, local or URL) from the names it lists and a few small documents; it never raises, and
reads no array data. `resolve` turns a path plus the caller's ``step=`` / ``item=`` into the
pytree item to read (LOAD-050..055); `select` applies only what was asked, for the validator.
Every reader, lister, converter and the validator goes through here, so a path one of them
reads, all of them read, with the same steps and commit state (spec/directories.md §2-§7).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .documents.checkpoint_metadata import CheckpointMetadata
from .documents.metadata import MetadataDocument
from .errors import FormatError, NotACheckpointError, OckptError, PathNotFoundError
from .names import (
    ARRAY_METADATAS_DIR,
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    DEFAULT_ITEM,
    JAX_RANDOM_KEY_DIR,
    JAX_RANDOM_KEY_METADATA_DIR,
    JSON_ITEM_FILES,
    MANIFEST_FILE,
    METADATA_FILE,
    MSGPACK_FILE,
    NP_RANDOM_KEY_DIR,
    NP_RANDOM_KEY_METADATA_DIR,
    OCDBT_DATA_DIR,
    OCDBT_PROCESS_DIR,
    PROTO_FILE,
    PYTREE_CHECKPOINTABLES,
    REPLACED_SUFFIX,
    ROOT_METADATA_DIR,
    TMP_MARKER,
    V1_MARKER,
    ZARR2_METADATA,
    ZARR3_METADATA,
)
from .store import Listing, Store, as_store

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = [
    "Kind",
    "Storage",
    "ItemFormat",
    "Problem",
    "Step",
    "Layout",
    "Resolved",
    "PYTREE_HANDLERS",
    "ARRAY_HANDLER",
    "JSON_HANDLERS",
    "RANDOM_KEY_HANDLERS",
    "PROTO_HANDLERS",
    "UNREAD_HANDLERS",
    "handler_class",
    "detect",
    "resolve",
    "select",
    "scan_steps",
    "detect_step",
    "is_temporary_name",
    "parse_step_name",
    "interrupted_overwrite_note",
]

_STEP_NAME = re.compile(r"(?:(?P<prefix>.+)_)?(?P<step>[0-9]+)")
#: Files that mark a directory as an item, step or v1 checkpoint (never a leaf's array).
_ITEM_OR_STEP_FILES = frozenset(
    {METADATA_FILE, MSGPACK_FILE, MANIFEST_FILE, CHECKPOINT_METADATA_FILE, V1_MARKER, COMMIT_FILE}
)
#: The largest `_METADATA` / `_CHECKPOINT_METADATA` that detection parses.
_MAX_PEEK_BYTES = 64 << 20
#: Subdirectories looked into, per level, when searching an item for per-leaf zarr arrays.
_MAX_ARRAY_PROBES = 64
#: Levels of nested directories searched for per-leaf zarr arrays (a `/` in a key nests).
_MAX_ARRAY_DEPTH = 8

# The handlers whose items a reader finds in a step or v1 checkpoint, by the class name that
# ends their `item_handlers` entry (spec/checkpointables.md §2). Names are data: never imported.
#: Handlers whose item is a pytree item (directories §2).
PYTREE_HANDLERS = frozenset(
    {
        "PyTreeCheckpointHandler",
        "StandardCheckpointHandler",
        "PyTreeHandler",
        "ArrayCheckpointHandler",
    }
)
#: The handler of one array saved alone: a pytree item of exactly one leaf (HANDLER-002).
ARRAY_HANDLER = "ArrayCheckpointHandler"
#: Handlers whose item is a JSON item: one JSON file (HANDLER-001).
JSON_HANDLERS = frozenset({"JsonCheckpointHandler", "JsonHandler", "MetricsHandler"})
#: Handlers of random keys -> the item's two parts: data (pytree item), metadata (JSON item).
RANDOM_KEY_HANDLERS: Mapping[str, tuple[str, str]] = {
    "JaxRandomKeyCheckpointHandler": (JAX_RANDOM_KEY_DIR, JAX_RANDOM_KEY_METADATA_DIR),
    "NumpyRandomKeyCheckpointHandler": (NP_RANDOM_KEY_DIR, NP_RANDOM_KEY_METADATA_DIR),
}
#: Handlers of one protobuf message in text format (HANDLER-004: not read).
PROTO_HANDLERS = frozenset({"ProtoCheckpointHandler", "ProtoHandler"})
#: Handlers whose files only their own code knows (HANDLER-004: not read).
UNREAD_HANDLERS = frozenset({"StatefulCheckpointableHandler", "ProcessMetadataCheckpointHandler"})


def handler_class(handler: str | None) -> str | None:
    """The class name that ends an `item_handlers` entry (``…json_handler.JsonHandler`` ->
    ``JsonHandler``); None for None."""
    return None if handler is None else handler.rsplit(".", 1)[-1]


class Kind(str, enum.Enum):
    """What a directory is."""

    PYTREE_ITEM = "pytree_item"  # one pytree: _METADATA, OCDBT or per-leaf zarr, or msgpack
    JSON_ITEM = "json_item"  # a JSON checkpointable / item (a `metadata` or `metrics` file)
    RANDOM_KEY_ITEM = "random_key_item"  # a JAX key or numpy random state: two parts inside
    PROTO_ITEM = "proto_item"  # a protobuf message in text format (not read by ockpt)
    V1_CHECKPOINT = "v1_checkpoint"  # v1 root: `orbax.checkpoint` marker + checkpointables
    STEP = "step"  # one step of a checkpoint manager: named items
    MANAGER_ROOT = "manager_root"  # step directories (+ metadata/_ROOT_METADATA)
    TEMPORARY = "temporary"  # an uncommitted `*.orbax-checkpoint-tmp*` directory
    UNKNOWN_ITEM = "unknown_item"  # an item of a step or v1 checkpoint ockpt cannot type or read
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
    zarr_version: int | None  # 2 or 3; None when unknown without opening an array
    has_metadata: bool  # `_METADATA` present
    has_msgpack: bool  # legacy msgpack `checkpoint` file present (written up to 0.5.15)
    ocdbt_processes: tuple[int, ...] = ()  # N of each `ocdbt.process_N/`
    has_root_manifest: bool = False  # `manifest.ocdbt` at the item root


@dataclass(frozen=True)
class Problem:
    """Something detection found wrong, with the rule it breaks."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.message} [{self.rule}]"


@dataclass(frozen=True)
class Step:
    """A step directory of a checkpoint-manager root."""

    step: int
    name: str
    committed: bool  # not under a temporary name, and on object stores marked committed
    has_commit_file: bool


@dataclass(frozen=True)
class Layout:
    """The answer of `detect`: what `path` is, and why."""

    path: str
    kind: Kind
    reason: str
    item: ItemFormat | None = None
    checkpointables: Mapping[str, Layout] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    step_prefix: str | None = None
    temporaries: tuple[str, ...] = ()  # uncommitted entries found inside
    has_commit_file: bool = False
    problems: tuple[Problem, ...] = ()  # small documents that failed to parse, and similar
    init_time_ns: int | None = None  # from `_CHECKPOINT_METADATA`, when it has them
    commit_time_ns: int | None = None
    handler: str | None = None  # the `item_handlers` entry naming what wrote this item
    exists: bool = True  # False: nothing at `path` (an I/O error for the commands)
    location: Store | None = field(default=None, compare=False, repr=False)

    @property
    def committed(self) -> bool:
        return self.kind not in (Kind.TEMPORARY, Kind.NOT_A_CHECKPOINT)

    @property
    def pytree(self) -> Layout | None:
        """The pytree item itself, or the pytree checkpointable of a v1 checkpoint: `state`,
        `pytree`, else the only one; None when it has several (or none) of other names
        (LOAD-051)."""
        if self.kind is Kind.PYTREE_ITEM:
            return self
        if self.kind is Kind.V1_CHECKPOINT:
            pytrees = [c for c in self.checkpointables.values() if c.kind is Kind.PYTREE_ITEM]
            for name in PYTREE_CHECKPOINTABLES:
                found = self.checkpointables.get(name)
                if found is not None and found.kind is Kind.PYTREE_ITEM:
                    return found
            if len(pytrees) == 1:
                return pytrees[0]
        return None

    @property
    def latest_step(self) -> Step | None:
        committed = [s for s in self.steps if s.committed]
        return max(committed, key=lambda s: s.step) if committed else None

    def committed_steps(self) -> list[Step]:
        return [s for s in self.steps if s.committed]


# One type per kind that carries more than the common fields: what a reader of that kind needs
# is always there (no None to check), and a function that needs it says so in its signature.


@dataclass(frozen=True)
class PytreeItemLayout(Layout):
    """A pytree item (`Kind.PYTREE_ITEM`): how it stores its arrays, and its store."""

    item: ItemFormat = field(kw_only=True)
    location: Store = field(kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class ContainerLayout(Layout):
    """A directory of named items (`checkpointables`), and its store: a step of a checkpoint
    manager (`Kind.STEP`), a v1 checkpoint (`Kind.V1_CHECKPOINT`) or a random-key item
    (`Kind.RANDOM_KEY_ITEM`: its data and metadata parts)."""

    checkpointables: Mapping[str, Layout] = field(kw_only=True)
    location: Store = field(kw_only=True, compare=False, repr=False)


@dataclass(frozen=True)
class ManagerRootLayout(Layout):
    """A checkpoint-manager root (`Kind.MANAGER_ROOT`): its step directories, and its store."""

    steps: tuple[Step, ...] = field(kw_only=True)
    location: Store = field(kw_only=True, compare=False, repr=False)


def is_temporary_name(name: str) -> bool:
    """True for names of uncommitted saves (`<name>.orbax-checkpoint-tmp[-<N>]`)."""
    return TMP_MARKER in name


def parse_step_name(name: str) -> tuple[str | None, int] | None:
    """(prefix, step) for a step directory name like `12`, `000012` or `run_12`."""
    m = _STEP_NAME.fullmatch(name)
    if m is None:
        return None
    return m.group("prefix"), int(m.group("step"))


def interrupted_overwrite_note(store: Store) -> str:
    """For a missing directory: a note naming its ``-replaced`` sibling when there is one,
    the checkpoint an interrupted overwrite left there (LAYOUT-006); "" otherwise."""
    parent = store.parent()
    if parent is None or not store.name:
        return ""
    sibling = parent.child(store.name + REPLACED_SUFFIX)
    if sibling.is_directory() is not True:
        return ""
    return (
        f"; an interrupted overwrite left the checkpoint at {sibling.display}: the next save to "
        "this path renames it back, or rename it back yourself"
    )


# ---------------------------------------------------------------------------------------------
# Detection.


class _Scan:
    """One directory's listing, with the names of files (anything not a directory counts:
    a FIFO `_METADATA` is still `_METADATA`, refused when it is opened, never overlooked)."""

    def __init__(self, loc: Store) -> None:
        self.loc = loc
        listing: Listing = loc.list_dir()
        self.dirs = set(listing.dirs)
        self.files = set(listing.files | listing.other)
        # a directory standing where a marker file must be still marks the directory
        self.files |= self.dirs & {METADATA_FILE, MANIFEST_FILE, CHECKPOINT_METADATA_FILE}

    def sub(self, name: str) -> _Scan:
        return _Scan(self.loc.child(name))


def detect(path: Any, *, context: ts.Context | None = None) -> Layout:
    """Describe what `path` (local, ``file://`` or a kvstore URL) is. Never raises: failures
    become NOT_A_CHECKPOINT with a reason."""
    try:
        return _detect_top(as_store(path, context=context))
    except PathNotFoundError as e:
        reason = f"cannot stat: {e.message}"
        return Layout(_shown(path), Kind.NOT_A_CHECKPOINT, reason, exists=False)
    except (OSError, RecursionError, OckptError, ValueError) as e:
        return Layout(_shown(path), Kind.NOT_A_CHECKPOINT, f"cannot read directory: {e}")


def _shown(path: Any) -> str:
    """How a path or store given to `detect` is named."""
    return path.display if isinstance(path, Store) else os.fspath(path)


def _detect_top(loc: Store) -> Layout:
    """`detect` that raises `PathNotFoundError` for a missing path (in an object store: a
    prefix with no key under it)."""
    try:
        scan: _Scan | None = _Scan(loc)
    except FormatError as e:
        if e.rule != "PATH-005":  # a link loop in the place of the directory: below
            raise
        scan = None
    if scan is None or not (scan.files or scan.dirs):  # missing, empty, or no directory
        state = loc.is_directory()
        if state is False:
            note = interrupted_overwrite_note(loc)
            raise PathNotFoundError(
                "no such file or directory" + note,
                rule="LAYOUT-006" if note else None,  # it says where the checkpoint is
                file=loc.display,
            )
        if state is None or scan is None:
            return Layout(loc.display, Kind.NOT_A_CHECKPOINT, "not a directory", location=loc)
    return _detect_dir(loc, depth=0, scan=scan)


#: How deep checkpoints nest: a step (0) holds items (1), a random-key item its two parts (2);
#: one level more is allowed, and nothing below it is detected.
_MAX_ITEM_DEPTH = 3


def _detect_dir(
    loc: Store,
    *,
    depth: int,
    scan: _Scan | None = None,
    handler: str | None = None,
) -> Layout:
    """What the directory `loc` is (`scan`: its listing, when the caller made it; `handler`:
    the `item_handlers` entry its step or v1 checkpoint gives it)."""
    if is_temporary_name(loc.name):
        return Layout(
            loc.display,
            Kind.TEMPORARY,
            f"name contains {TMP_MARKER!r}: an unfinished save",
            location=loc,
        )
    if depth > _MAX_ITEM_DEPTH:  # directories linked into themselves must not recurse on
        return Layout(
            loc.display,
            Kind.UNKNOWN_ITEM,
            f"nested more than {_MAX_ITEM_DEPTH} checkpoint levels deep",
            location=loc,
        )
    scan = scan if scan is not None else _Scan(loc)
    if V1_MARKER in scan.files:
        return _detect_composite(scan, depth=depth)
    own = _Own.of(scan)
    if handler is None and isinstance(own.handlers, str):  # a single item names its handler
        handler = own.handlers
    common = {
        "has_commit_file": COMMIT_FILE in scan.files,
        "problems": own.problems,
        "init_time_ns": own.times[0],
        "commit_time_ns": own.times[1],
        "handler": handler,
        "location": loc,
    }
    cls = handler_class(handler)
    if cls is not None and cls not in PYTREE_HANDLERS:
        typed = _by_handler(scan, cls, depth=depth, common=common)
        if typed is not None:
            return typed
    item = _item_format(scan)
    if item is not None:
        reason, fmt, problems = item
        common["problems"] = problems + own.problems
        return PytreeItemLayout(loc.display, Kind.PYTREE_ITEM, reason, item=fmt, **common)
    parts = _random_key_parts(scan)
    if parts is not None:
        return _random_key_item(scan, parts, depth=depth, common=common)
    json_file = _json_item_file(scan)
    single = isinstance(own.handlers, str)
    if not single and (
        isinstance(own.handlers, Mapping)
        or (CHECKPOINT_METADATA_FILE in scan.files and json_file is None)
        or _is_bare_step(scan)
    ):
        return _detect_composite(scan, depth=depth, own=own)
    if json_file == PROTO_FILE:
        return Layout(loc.display, Kind.PROTO_ITEM, _proto_reason(cls, json_file), **common)
    # given directly, only a JSON item file name of directories §6 makes a JSON item
    if json_file is not None and (depth > 0 or single or json_file in JSON_ITEM_FILES):
        return Layout(loc.display, Kind.JSON_ITEM, f"holds the JSON file {json_file!r}", **common)
    if depth == 0 and not single:
        root = _detect_manager_root(scan)
        if root is not None:
            return root
    reason = (
        f"no {METADATA_FILE}, {MSGPACK_FILE} file, {MANIFEST_FILE}, per-leaf zarr arrays, "
        f"{CHECKPOINT_METADATA_FILE}, {V1_MARKER} marker or step directories"
    )
    if cls is not None:
        reason = f"written by {cls}, but {reason}"
    return Layout(loc.display, Kind.NOT_A_CHECKPOINT, reason, **common)


@dataclass(frozen=True)
class _Own:
    """What a directory's own `_CHECKPOINT_METADATA` says: its `item_handlers` (a string for a
    single item, a map for a step), its times, and the problems of parsing it."""

    handlers: Any = None
    times: tuple[int | None, int | None] = (None, None)
    problems: tuple[Problem, ...] = ()

    @classmethod
    def of(cls, scan: _Scan) -> _Own:
        if CHECKPOINT_METADATA_FILE not in scan.files:
            return cls()
        try:
            doc = _peek(scan, CHECKPOINT_METADATA_FILE, CheckpointMetadata.from_bytes)
        except OckptError as e:
            return cls(problems=(_problem(e),))
        if doc is None:
            return cls()
        handlers = doc.item_handlers if isinstance(doc.item_handlers, (str, Mapping)) else None
        return cls(handlers, _doc_times(doc))


def _by_handler(scan: _Scan, cls: str, *, depth: int, common: dict[str, Any]) -> Layout | None:
    """The item a handler other than a pytree handler wrote (checkpointables §2), or None
    when its class is none ockpt knows (the directory is then typed by what it holds)."""
    display = scan.loc.display
    kind_if_not = Kind.UNKNOWN_ITEM if depth > 0 else Kind.NOT_A_CHECKPOINT
    if cls in RANDOM_KEY_HANDLERS:
        parts = _random_key_parts(scan)
        if parts is None:
            want = " and ".join(f"{d}/" for d in RANDOM_KEY_HANDLERS[cls])
            return Layout(display, kind_if_not, f"written by {cls}, but no {want}", **common)
        return _random_key_item(scan, parts, depth=depth, common=common)
    if cls in JSON_HANDLERS or cls in PROTO_HANDLERS:
        found = _json_item_file(scan)
        if found is None:
            reason = f"written by {cls}, but holds no single file"
            return Layout(display, kind_if_not, reason, **common)
        if cls in PROTO_HANDLERS:
            return Layout(display, Kind.PROTO_ITEM, _proto_reason(cls, found), **common)
        reason = f"JSON item ({cls}): holds the JSON file {found!r}"
        return Layout(display, Kind.JSON_ITEM, reason, **common)
    if cls in UNREAD_HANDLERS:
        reason = f"written by {cls}, whose files ockpt does not read"
        return Layout(display, kind_if_not, reason, **common)
    return None


def _proto_reason(cls: str | None, file: str) -> str:
    writer = cls or "a proto handler"
    return f"protobuf text format in {file!r}, written by {writer}; ockpt does not read it"


def _random_key_parts(scan: _Scan) -> tuple[str, str] | None:
    """The (data, metadata) directory names of a random-key item, if `scan` holds exactly the
    two parts of one (and no file but its commit marker and `_CHECKPOINT_METADATA`)."""
    dirs = {d for d in scan.dirs if not is_temporary_name(d)}
    if scan.files - {COMMIT_FILE, CHECKPOINT_METADATA_FILE}:
        return None
    for parts in RANDOM_KEY_HANDLERS.values():
        if dirs == set(parts):
            return parts
    return None


def _random_key_item(
    scan: _Scan, parts: tuple[str, str], *, depth: int, common: dict[str, Any]
) -> Layout:
    """A random-key item: its two parts, each detected as an item (checkpointables §4)."""
    children = {name: _detect_dir(scan.loc.child(name), depth=depth + 1) for name in parts}
    which = "JAX random key" if parts[0] == JAX_RANDOM_KEY_DIR else "numpy random state"
    reason = f"{which}: data in {parts[0]}/, metadata in {parts[1]}/"
    return ContainerLayout(
        scan.loc.display, Kind.RANDOM_KEY_ITEM, reason, checkpointables=children, **common
    )


def _is_bare_step(scan: _Scan) -> bool:
    """A step without `_CHECKPOINT_METADATA` (LAYOUT-005: releases up to 0.4.8 write them).

    Its name is a step name, it holds no file but `commit_success.txt`, and every subdirectory
    that is not temporary is an item: a pytree item, or a JSON item holding one of the JSON item
    file names; there is at least one. A directory that merely contains a checkpoint among other
    things is not a step.
    """
    if parse_step_name(scan.loc.name) is None or scan.files - {COMMIT_FILE}:
        return False
    items = 0
    for name in scan.dirs:
        if is_temporary_name(name):
            continue
        sub = scan.sub(name)
        if _item_format(sub, peek=False) is None and _json_item_file(sub) not in JSON_ITEM_FILES:
            return False
        items += 1
    return items > 0


def _json_item_file(scan: _Scan) -> str | None:
    """The one file of a directory without subdirectories, its commit marker and
    `_CHECKPOINT_METADATA` aside (a JSON or proto item's); None otherwise."""
    data = scan.files - {COMMIT_FILE, CHECKPOINT_METADATA_FILE}
    if len(data) == 1 and not scan.dirs:
        return next(iter(data))
    return None


def _zarr_version_below(scan: _Scan, *, depth: int = 0) -> int | None:
    """Zarr version of the first per-leaf array found under `scan` (keys with '/' nest dirs);
    at most `_MAX_ARRAY_PROBES` subdirectories a level and `_MAX_ARRAY_DEPTH` levels."""
    if depth > 0:
        if ZARR2_METADATA in scan.files:
            return 2
        if ZARR3_METADATA in scan.files:
            return 3
    if depth >= _MAX_ARRAY_DEPTH:
        return None
    probes = 0
    for name in sorted(scan.dirs):
        if OCDBT_PROCESS_DIR.fullmatch(name) or name in (OCDBT_DATA_DIR, ARRAY_METADATAS_DIR):
            continue
        if is_temporary_name(name):  # an unfinished save is no leaf's array (LOAD-054)
            continue
        probes += 1
        if probes > _MAX_ARRAY_PROBES:
            return None
        sub = scan.sub(name)
        if sub.files & _ITEM_OR_STEP_FILES:
            continue  # an item (or step) of its own, not one leaf's array directory
        found = _zarr_version_below(sub, depth=depth + 1)
        if found:
            return found
    return None


def _item_format(
    scan: _Scan, *, peek: bool = True
) -> tuple[str, ItemFormat, tuple[Problem, ...]] | None:
    """(reason, format, problems) if `scan` holds a pytree item, else None. With `peek`,
    `_METADATA` is parsed for the zarr version."""
    has_metadata = METADATA_FILE in scan.files
    has_msgpack = MSGPACK_FILE in scan.files
    root_manifest = MANIFEST_FILE in scan.files
    processes = tuple(
        sorted(int(m.group(1)) for d in scan.dirs if (m := OCDBT_PROCESS_DIR.fullmatch(d)))
    )
    per_leaf = None if (root_manifest or processes) else _zarr_version_below(scan)
    if not (has_metadata or has_msgpack or root_manifest or processes or per_leaf):
        return None
    problems: list[Problem] = []
    zarr_version = per_leaf
    if has_metadata and peek:
        try:
            doc = _peek(scan, METADATA_FILE, MetadataDocument.from_bytes)
            if doc is not None and isinstance(doc.use_zarr3, bool):
                zarr_version = 3 if doc.use_zarr3 else 2
        except OckptError as e:
            problems.append(_problem(e))
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
    era = METADATA_FILE if has_metadata else f"no {METADATA_FILE}"
    if has_msgpack:
        era += ", legacy msgpack checkpoint file"
    fmt = ItemFormat(storage, zarr_version, has_metadata, has_msgpack, processes, root_manifest)
    return f"pytree item: {reason}; {era}", fmt, tuple(problems)


def _problem(e: OckptError) -> Problem:
    return Problem(e.rule or "VAL-009", getattr(e, "message", str(e)))


def _peek(scan: _Scan, name: str, parse: Any) -> Any:
    """Parse the small document `name` with ``parse(data, file=...)``; None when it is too
    large to peek at or gone. Read through the one hardened open (PATH-003/004/005)."""
    try:
        data = scan.loc.get(name, limit=_MAX_PEEK_BYTES, rule="JSON-003")
    except OckptError as e:
        if e.rule == "JSON-003":  # too large to peek at: the reader parses it in full
            return None
        raise
    if data is None:
        return None
    return parse(data, file=scan.loc.file(name))


def _doc_times(doc: CheckpointMetadata | None) -> tuple[int | None, int | None]:
    if doc is None:
        return None, None
    init = doc.init_timestamp_nsecs if isinstance(doc.init_timestamp_nsecs, int) else None
    done = doc.commit_timestamp_nsecs if isinstance(doc.commit_timestamp_nsecs, int) else None
    return init, done


def _detect_composite(scan: _Scan, *, depth: int, own: _Own | None = None) -> ContainerLayout:
    is_v1 = V1_MARKER in scan.files
    own = own if own is not None else _Own.of(scan)
    problems = list(own.problems)
    handlers = own.handlers if isinstance(own.handlers, Mapping) else {}
    names: tuple[str, ...] | None = tuple(handlers) if handlers else None
    times = own.times
    temporaries = tuple(sorted(d for d in scan.dirs if is_temporary_name(d)))
    children = {}
    for sub in sorted(d for d in scan.dirs if not is_temporary_name(d)):
        handler = handlers.get(sub)
        child = _detect_dir(
            scan.loc.child(sub),
            depth=depth + 1,
            handler=handler if isinstance(handler, str) else None,
        )
        if child.kind is Kind.NOT_A_CHECKPOINT:
            child = replace(child, kind=Kind.UNKNOWN_ITEM)
        children[sub] = child
    if names is not None:
        missing = sorted(set(names) - set(children))
        if missing:
            problems.append(
                Problem(
                    "LAYOUT-003",
                    f"{CHECKPOINT_METADATA_FILE} names items with no directory: {missing}",
                )
            )
    kind = Kind.V1_CHECKPOINT if is_v1 else Kind.STEP
    what = "v1 checkpoint" if is_v1 else "checkpoint-manager step"
    reason = f"{what} with {len(children)} item(s): {', '.join(children) or 'none'}"
    return ContainerLayout(
        scan.loc.display,
        kind,
        reason,
        checkpointables=children,
        temporaries=temporaries,
        has_commit_file=COMMIT_FILE in scan.files,
        problems=tuple(problems),
        init_time_ns=times[0],
        commit_time_ns=times[1],
        location=scan.loc,
    )


def _looks_like_step(scan: _Scan) -> bool:
    """A step holds step metadata, is itself an item, or holds at least one item directory."""
    if CHECKPOINT_METADATA_FILE in scan.files or V1_MARKER in scan.files:
        return True
    if _item_format(scan, peek=False) is not None:
        return True
    for name in scan.dirs:
        if is_temporary_name(name):
            continue
        sub = scan.sub(name)
        if _item_format(sub, peek=False) is not None or _json_item_file(sub):
            return True
    return False


def scan_steps(root: Any, *, context: ts.Context | None = None) -> tuple[Step, ...]:
    """The step directories of a checkpoint-manager root, committed or not, by step number.

    A step directory removed while the root is scanned is absent (LOAD-055). On object
    stores (no atomic rename) a step is committed only once it holds `commit_success.txt`."""
    return _scan_steps(_Scan(as_store(root, context=context)))[0]


def _scan_steps(scan: _Scan) -> tuple[tuple[Step, ...], set[str | None]]:
    steps: list[Step] = []
    prefixes: set[str | None] = set()
    for name in sorted(scan.dirs):
        if name == ROOT_METADATA_DIR:
            continue
        base = name.split(TMP_MARKER)[0] if is_temporary_name(name) else name
        parsed = parse_step_name(base)
        if parsed is None:
            continue
        prefix, number = parsed
        if is_temporary_name(name):
            steps.append(Step(number, name, committed=False, has_commit_file=False))
            continue
        child = scan.sub(name)
        if not (child.files or child.dirs):  # removed meanwhile (LOAD-055), or empty
            continue
        if not _looks_like_step(child):
            continue
        prefixes.add(prefix)
        has_commit = COMMIT_FILE in child.files
        committed = scan.loc.capabilities.atomic_rename or has_commit
        steps.append(Step(number, name, committed=committed, has_commit_file=has_commit))
    return tuple(sorted(steps, key=lambda s: (s.step, s.name))), prefixes


def detect_step(root: ManagerRootLayout, step: Step) -> Layout:
    """The layout of one step of the manager root `root` (as `detect` gives it)."""
    return _detect_dir(root.location.child(step.name), depth=0)


def _detect_manager_root(scan: _Scan) -> ManagerRootLayout | None:
    steps, prefixes = _scan_steps(scan)
    has_root_metadata = ROOT_METADATA_DIR in scan.dirs
    if not steps and not has_root_metadata:
        return None
    committed = [s for s in steps if s.committed]
    temporaries = tuple(s.name for s in steps if is_temporary_name(s.name))
    problems = []
    if len(prefixes) > 1:
        problems.append(
            Problem(
                "LAYOUT-004",
                f"step directories use several prefixes: {sorted(map(str, prefixes))}",
            )
        )
    for number, names in _same_step(committed).items():
        problems.append(
            Problem("LAYOUT-007", f"step {number} has several directories: {sorted(names)}")
        )
    prefix = next(iter(prefixes)) if len(prefixes) == 1 else None
    reason = f"checkpoint-manager root with {len(committed)} committed step(s)"
    if len(committed) < len(steps) - len(temporaries):
        reason += f", {len(steps) - len(temporaries) - len(committed)} without {COMMIT_FILE}"
    if temporaries:
        reason += f" and {len(temporaries)} unfinished"
    return ManagerRootLayout(
        scan.loc.display,
        Kind.MANAGER_ROOT,
        reason,
        steps=steps,
        step_prefix=prefix,
        temporaries=temporaries,
        problems=tuple(problems),
        location=scan.loc,
    )


# ---------------------------------------------------------------------------------------------
# Resolution: which directory a read of a path means.


@dataclass(frozen=True)
class Resolved:
    """Where `resolve` / `select` led: the path given, the step chosen of a manager root, the
    step or v1 checkpoint an item was picked from, and the directory reached (`target`)."""

    top: Layout
    target: Layout
    location: Store  # the store of `target`
    step: Step | None = None
    container: ContainerLayout | None = None

    @property
    def pytree(self) -> PytreeItemLayout:
        """The target as a pytree item (`resolve` with ``what="pytree"`` reaches only those);
        `NotACheckpointError` (LOAD-050) for a target of another kind."""
        if not isinstance(self.target, PytreeItemLayout):
            raise _fail(self.target.path, f"not a pytree item: {self.target.reason}", "LOAD-050")
        return self.target


def _fail(path: str, reason: str, rule: str) -> NotACheckpointError:
    return NotACheckpointError(reason, rule=rule, file=path)


def _pick_item(layout: ContainerLayout, item: str | None) -> tuple[str, Layout]:
    """The item `item` of a step or v1 checkpoint, else its pytree item: ``default``, then
    ``state`` / ``pytree``, then the only one (LOAD-051, LOAD-052). A v1 checkpoint with
    several pytree checkpointables (or none) and no name is refused, naming what it holds:
    Orbax 0.12.8 would take the one whose name sorts first (`opt_state` before `params`).
    Returns its name and layout."""
    items = layout.checkpointables
    if item is not None:
        if item not in items:
            raise _fail(layout.path, f"no item {item!r}; items: {sorted(items)}", "LOAD-052")
        return item, items[item]
    pytrees = {n: c for n, c in items.items() if c.kind is Kind.PYTREE_ITEM}
    for name in (DEFAULT_ITEM, *PYTREE_CHECKPOINTABLES):
        if name in pytrees:
            return name, pytrees[name]
    if len(pytrees) == 1:
        return next(iter(pytrees.items()))
    if layout.kind is Kind.V1_CHECKPOINT:
        raise _fail(
            layout.path,
            f"v1 checkpoint without a state/ or pytree/ checkpointable, with "
            f"{len(pytrees)} pytree checkpointables {sorted(pytrees)}; it holds {sorted(items)}: "
            "pick one with item=NAME, or load them all with load_checkpointables",
            "LOAD-051",
        )
    raise _fail(
        layout.path,
        f"holds {len(pytrees)} pytree items ({sorted(pytrees)}) among {sorted(items)}: "
        "pick one with item=NAME",
        "LOAD-052",
    )


def _same_step(steps: list[Step]) -> dict[int, list[str]]:
    """Step number -> the names of its directories, for numbers with more than one."""
    names: dict[int, list[str]] = {}
    for s in steps:
        names.setdefault(s.step, []).append(s.name)
    return {n: found for n, found in names.items() if len(found) > 1}


def _choose_step(top: ManagerRootLayout, step: int | None) -> Step:
    committed = top.committed_steps()
    chosen: Step | None = None
    if step is None:
        chosen = top.latest_step
        if chosen is None:
            raise _fail(top.path, "checkpoint-manager root without a committed step", "LOAD-053")
    else:
        chosen = next((s for s in committed if s.step == step), None)
    if chosen is not None:
        several = _same_step(committed).get(chosen.step)
        if several:
            raise _fail(
                top.path,
                f"step {chosen.step} has several directories {sorted(several)}: which one is "
                "meant is unknown",
                "LAYOUT-007",
            )
        return chosen
    raise _fail(
        top.path, f"no committed step {step}; steps: {[s.step for s in committed]}", "LOAD-053"
    )


def select(
    path: Any,
    *,
    step: int | None = None,
    item: str | None = None,
    context: ts.Context | None = None,
) -> Resolved:
    """`path` with what the caller asked applied: `step` picks a step of a manager root (the
    latest committed one when only `item` is given), `item` an item of a step or v1
    checkpoint. Raises `PathNotFoundError` for a missing path and `NotACheckpointError`
    (LOAD-052..055) for a request the checkpoint cannot satisfy."""
    return _select(as_store(path, context=context), step=step, item=item, down=False)


def resolve(
    path: Any,
    *,
    step: int | None = None,
    item: str | None = None,
    context: ts.Context | None = None,
    what: Literal["pytree", "item", "checkpoint"] = "pytree",
) -> Resolved:
    """The pytree item a read of `path` means (spec/loading.md §6): a manager root's latest
    committed step (or `step`), a step's or v1 checkpoint's pytree item (or `item`).

    `what` widens it: ``"item"`` accepts an item of any kind (a JSON, random-key, proto or
    unknown item, `item` named or given directly); ``"checkpoint"`` stops at the step or v1
    checkpoint (or the item, given directly or named by `item`) whose checkpointables a read of
    all of them means (spec/checkpointables.md §6). Raises `PathNotFoundError` or
    `NotACheckpointError` naming the rule (LOAD-050..055)."""
    return _select(as_store(path, context=context), step=step, item=item, down=True, what=what)


#: The kinds `resolve(..., what="item")` accepts: every item of a step or v1 checkpoint.
_ITEM_KINDS = frozenset(
    {Kind.PYTREE_ITEM, Kind.JSON_ITEM, Kind.RANDOM_KEY_ITEM, Kind.PROTO_ITEM, Kind.UNKNOWN_ITEM}
)


def _select(
    loc: Store,
    *,
    step: int | None,
    item: str | None,
    down: bool,
    what: str = "pytree",
) -> Resolved:
    top = _detect_top(loc)
    target = top
    chosen: Step | None = None
    container: ContainerLayout | None = None
    if isinstance(top, ManagerRootLayout):
        if step is not None or item is not None or down:
            chosen = _choose_step(top, step)
            loc = loc.child(chosen.name)
            target = detect_step(top, chosen)
            if target.kind is Kind.NOT_A_CHECKPOINT:  # removed since the root was listed
                raise _fail(target.path, "step removed meanwhile", "LOAD-055")
    elif step is not None:
        raise _fail(
            top.path,
            f"step={step} asked for, but this is a {top.kind.value}",
            "LOAD-053",
        )
    if target.kind is Kind.TEMPORARY and (down or item is not None):
        raise _fail(target.path, "an unfinished save (temporary name): never read", "LOAD-054")
    pick = item is not None or (down and what != "checkpoint")
    if isinstance(target, ContainerLayout) and target.kind is not Kind.RANDOM_KEY_ITEM and pick:
        container = target
        name, target = _pick_item(container, item)
        loc = loc.child(name)
    elif item is not None:
        raise _fail(
            target.path,
            f"item={item!r} asked for, but this is a {target.kind.value}",
            "LOAD-052",
        )
    if target.kind is Kind.NOT_A_CHECKPOINT:
        raise _fail(target.path, f"not a checkpoint: {target.reason}", "LOAD-050")
    if down and what == "item" and target.kind not in _ITEM_KINDS:
        raise _fail(target.path, f"not an item: {target.reason}", "LOAD-050")
    if down and what == "pytree" and not isinstance(target, PytreeItemLayout):
        raise _fail(target.path, f"not a pytree item: {target.reason}", "LOAD-050")
    return Resolved(top=top, target=target, location=loc, step=chosen, container=container)
