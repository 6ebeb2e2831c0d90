"""`validate(path)`: check a whole checkpoint and report every broken rule (spec/validation.md).

The path may be a pytree item, a v1 checkpoint, a checkpoint-manager step or a manager root
(every committed step is validated; temporary directories are reported, not validated). Each
JSON document is checked against its schema and the rules its model enforces, the legacy msgpack
file through its JSON view, and the files are checked against each other: every leaf of
`_METADATA` has its array, zarr metadata agrees with `_METADATA` and `array_metadatas`, the
chunk grid is complete where missing chunks are errors, `_sharding` and `_strings.json` agree
with the tree, the database holds no unexpected keys, and param names do not collide.

With ``deep=True`` every OCDBT manifest and node of every generation is decoded (CRC-32C
checked), every out-of-line value range is checked against its data file, and every chunk is
decoded (decompressed, its size checked; zarr v3 shard indexes with their crc32c).

Reading goes through the pure-Python decoders (`ockpt.ocdbt`, `ockpt.zarr`): no tensorstore.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import random_keys, saved_tree
from .checkpointables import load_item, read_json_item
from .deep_checks import OrderedChecks, Outcome, decodes_quickly, plain_kind
from .documents.array_metadatas import ArrayMetadatas
from .documents.metadata import MetadataDocument
from .documents.sharding import ShardingDocument
from .documents.strings import StringsDocument
from .errors import (
    FormatError,
    MemoryLimitError,
    MissingDataError,
    NotACheckpointError,
    OcdbtError,
    OckptError,
    PathNotFoundError,
    UnsupportedError,
    ZarrFormatError,
)
from .findings import Finding
from .item_files import ItemFiles, WrittenArray, take_array_metadatas
from .layout import (
    ContainerLayout,
    Kind,
    Layout,
    ManagerRootLayout,
    PytreeItemLayout,
    Storage,
    detect_step,
    select,
)
from .limits import Limits, applied, check_allocation
from .limits import current as limits_in_force
from .msgpack_legacy import decode_checkpoint
from .names import (
    ARRAY_METADATAS_DIR,
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    LEGACY_ROOT_METADATA_NAME,
    MANIFEST_FILE,
    METADATA_FILE,
    MSGPACK_FILE,
    OCDBT_DATA_DIR,
    ROOT_METADATA_DIR,
    ROOT_METADATA_NAME,
    SHARDING_FILE,
    STRINGS_FILE,
    ZARR2_METADATA,
    ZARR3_METADATA,
)
from .paths import array_prefix, find_collisions, printable
from .rules import RULES
from .saved_tree import SavedLeaf
from .schema import check_document
from .store import Store, as_store

__all__ = ["validate", "Report", "Progress"]

#: progress(done, total, what): bytes of the checkpoint's files checked so far, and the bytes
#: of all its files (known before the first call, never changing; on an object store, which
#: lists no sizes, the bytes of the values of its OCDBT databases); `what` names the work at
#: hand ("arrays", "chunks", "ocdbt nodes"; "done" last). A deep check's chunk values count as
#: their checks are taken, in order; the last call gives `done == total`.
Progress = Callable[[int, int, str], None]

#: findings reported per array for one kind of chunk problem before they are summarized
_MAX_PER_ARRAY = 8
_ARRAY_TYPES = frozenset({"jax.Array", "np.ndarray", "scalar"})

# ---------------------------------------------------------------------------------------------
# the report


@dataclass
class Report:
    """What `validate` found. `ok` is True when no finding has error severity."""

    path: str
    kind: str
    deep: bool
    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def rules(self) -> set[str]:
        """The rule ids of every finding."""
        return {f.rule for f in self.findings}

    def to_json(self) -> dict[str, Any]:
        """The JSON output of ``ockpt validate --json`` (spec/validation.md §3)."""
        return {
            "path": self.path,
            "kind": self.kind,
            "deep": self.deep,
            "valid": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "checked": dict(self.checked),
            "findings": [f.to_json() for f in self.findings],
        }

    def format_text(self) -> str:
        """The human-readable output of ``ockpt validate``."""
        lines = [printable(str(f)) for f in self.findings]  # one line each, whatever names hold
        state = "valid" if self.ok else "INVALID"
        what = ", ".join(f"{v} {k}" for k, v in self.checked.items() if v)
        lines.append(
            f"{printable(str(self.path))}: {state} ({self.kind}{', deep' if self.deep else ''}): "
            f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)"
            + (f"; checked {what}" if what else "")
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_text()


# ---------------------------------------------------------------------------------------------
# helpers


def _finding(rule: str, message: str, *, file: str | None, pointer: str | None = None) -> Finding:
    # rules the decoders raise before the spec chapter that defines them is registered are
    # still reported, as errors
    severity = RULES[rule].severity if rule in RULES else "error"
    return Finding(rule=rule, severity=severity, file=file, pointer=pointer, message=message)


def _from_error(error: OckptError, *, file: str | None) -> Finding:
    if isinstance(error, FormatError):
        default = "VAL-009" if isinstance(error, MissingDataError) else "JSON-001"
        return Finding.from_error(error, file=file, default_rule=default)
    message = getattr(error, "message", str(error))
    return _finding(error.rule or "VAL-009", message, file=getattr(error, "file", None) or file)


def _join(*parts: str) -> str:
    return os.path.join(*parts)


def _names(loc: Store) -> set[str]:
    """Every name in the directory `loc`, whatever it is (a FIFO or a directory in place of a
    document is still that document, refused when read: PATH-005)."""
    listing = loc.list_dir()
    return set(listing.files | listing.dirs | listing.other)


def _tree_bytes(loc: Store | None, depth: int = 0) -> int:
    """The bytes of the regular files under the directory `loc` (of a store that knows sizes):
    the total a progress bar counts towards. Only sizes are read (no file is opened); what
    cannot be listed or is deeper than the limits' `max_depth` counts as nothing (the checks report
    it)."""
    if loc is None or depth > limits_in_force().max_depth:
        return 0
    try:
        listing = loc.list_dir()
        total = sum(loc.size(name) or 0 for name in listing.files)
    except (OckptError, OSError):
        return 0
    return total + sum(_tree_bytes(loc.child(name), depth + 1) for name in listing.dirs)


def _value_bytes(layout: Layout) -> int:
    """The bytes of the values of the OCDBT databases the items under `layout` read their
    chunks from (latest generation), from the B+trees alone, no value read: the total a
    progress bar counts towards on a store whose listing has no sizes. A database that cannot
    be read counts as nothing (the checks report it)."""
    from .engines.python.store import OcdbtStore

    if layout.kind is Kind.TEMPORARY:
        return 0
    if isinstance(layout, PytreeItemLayout):
        fmt, loc = layout.item, layout.location
        if fmt.has_root_manifest:
            databases = [loc]
        else:
            databases = [loc.child(f"ocdbt.process_{n}") for n in fmt.ocdbt_processes]
        total = 0
        for where in databases:
            store = OcdbtStore(where)
            try:
                for _, entry in store.db.entries():
                    value = entry.value
                    total += len(value) if isinstance(value, bytes) else value.length
            except OckptError:
                pass
            finally:
                store.close()
        return total
    if isinstance(layout, ContainerLayout):
        return sum(_value_bytes(child) for child in layout.checkpointables.values())
    if isinstance(layout, ManagerRootLayout):
        return sum(_value_bytes(detect_step(layout, s)) for s in layout.committed_steps())
    return 0


def _verified(db: Any) -> tuple[list[FormatError], int]:
    """Every problem of the OCDBT database `db` (`ocdbt.verify`), and the nodes it decoded."""
    from .ocdbt.verify import DatabaseStats, verify_database

    stats = DatabaseStats()
    return list(verify_database(db, stats=stats)), stats.nodes


# ---------------------------------------------------------------------------------------------
# the validator


class _Validator:
    def __init__(self, deep: bool, progress: Progress | None) -> None:
        self.deep = deep
        self.progress = progress
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, str | None, str | None, str]] = set()
        self.checked = {
            "steps": 0,
            "items": 0,
            "documents": 0,
            "arrays": 0,
            "chunks": 0,
            "ocdbt_nodes": 0,
        }
        self._done = 0
        self._total = 0
        self.ordered = OrderedChecks(self._emit)

    # -- findings ---------------------------------------------------------------------------

    def add(self, finding: Finding) -> None:
        """Report `finding` (after the checks still out on worker threads, `OrderedChecks`)."""
        self.ordered.finding(finding)

    def _emit(self, finding: Finding) -> None:
        key = (finding.rule, finding.file, finding.pointer, finding.message)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(finding)

    def report(
        self, rule: str, message: str, *, file: str | None, pointer: str | None = None
    ) -> None:
        self.add(_finding(rule, message, file=file, pointer=pointer))

    def error(self, error: OckptError, *, file: str | None) -> None:
        self.add(_from_error(error, file=file))

    def tick(self, what: str, nbytes: int = 0) -> None:
        """Count `nbytes` more of the checkpoint's files as checked, and tell `progress`."""
        self._done += nbytes
        if self.progress is not None:
            self.progress(min(self._done, self._total), self._total, what)

    # -- dispatch ---------------------------------------------------------------------------

    def run(self, loc: Store, *, step: int | None, item: str | None) -> str:
        path = loc.display
        if loc.is_directory() is None:
            raise NotACheckpointError("not a directory", file=path)
        try:
            chosen = select(loc, step=step, item=item)
        except PathNotFoundError:
            raise
        except NotACheckpointError as e:
            # what the path is not: the readers' refusal (LOAD-05x), VAL-001 for no checkpoint
            rule = "VAL-001" if e.rule == "LOAD-050" else e.rule or "VAL-001"
            self.report(rule, e.message, file=e.file or path)
            return Kind.NOT_A_CHECKPOINT.value
        if self.progress is not None and loc.capabilities.sizes_known:
            self._total = _tree_bytes(chosen.location)
        elif self.progress is not None:  # an object store's listing has no sizes
            self._total = _value_bytes(chosen.target)
            if not self._total:
                self.progress = None  # no database to count (per-leaf zarr): no total to show
        self.layout(chosen.target, top=True)
        if self.progress is not None:  # the documents and nodes, checked but not counted
            self.progress(self._total, self._total, "done")
        return chosen.target.kind.value

    def layout(self, layout: Layout, *, top: bool = False) -> None:
        kind = layout.kind
        if kind is Kind.TEMPORARY:
            self.report(
                "LAYOUT-001",
                "an unfinished save (temporary name): its contents are not a committed "
                "checkpoint and are not validated",
                file=layout.path,
            )
        elif isinstance(layout, PytreeItemLayout):
            self.item(layout)
        elif isinstance(layout, ContainerLayout) and kind is Kind.RANDOM_KEY_ITEM:
            for child in layout.checkpointables.values():  # a pytree and a JSON item (§4)
                self.layout(child)
        elif isinstance(layout, ContainerLayout):  # a step or v1 checkpoint
            self.composite(layout)
        elif isinstance(layout, ManagerRootLayout):
            self.manager_root(layout)
        elif kind is Kind.JSON_ITEM:
            self.json_item(layout)
        elif kind is Kind.UNKNOWN_ITEM and layout.handler is None:  # no handler vouches for it
            self.report(
                "VAL-008",
                f"a directory of a step or v1 checkpoint that is no known item: {layout.reason}",
                file=layout.path,
            )
        elif kind is Kind.UNKNOWN_ITEM:  # not what its handler writes, or not read (HANDLER-004)
            try:
                load_item(layout, name=layout.path.rstrip("/").rsplit("/", 1)[-1])
            except UnsupportedError:
                pass  # a handler ockpt does not read: nothing to check
            except OckptError as e:
                self.error(e, file=layout.path)

    def _problems(self, layout: Layout) -> None:
        for problem in layout.problems:
            if problem.rule.startswith("LAYOUT-"):
                self.report(problem.rule, problem.message, file=layout.path)
            # other problems are document failures, reported by the document checks

    def manager_root(self, layout: ManagerRootLayout) -> None:
        self._problems(layout)
        meta = layout.location.child(ROOT_METADATA_DIR)
        names = _names(meta)
        if ROOT_METADATA_NAME in names:
            self.document("root-metadata", meta, ROOT_METADATA_NAME)
        elif LEGACY_ROOT_METADATA_NAME in names:
            self.plain_json(meta, LEGACY_ROOT_METADATA_NAME)
        # releases that write commit_success.txt write it in every step (LAYOUT-002)
        marked = any(s.has_commit_file for s in layout.committed_steps())
        for step in layout.steps:
            step_path = _join(layout.path, step.name)
            if not step.committed:
                self.report(
                    "VAL-002",
                    f"step {step.step}: an unfinished save (temporary directory {step.name!r}); "
                    "not validated, not a step of this root",
                    file=step_path,
                )
                continue
            self.checked["steps"] += 1
            child = detect_step(layout, step)
            if isinstance(child, ContainerLayout) and child.kind is not Kind.RANDOM_KEY_ITEM:
                self.composite(child, marked=marked)
            elif isinstance(child, PytreeItemLayout):
                self.layout(child)
            else:
                self.report("VAL-001", f"step {step.step}: {child.reason}", file=step_path)

    def composite(self, layout: ContainerLayout, *, marked: bool = False) -> None:
        """A step or v1 checkpoint. `marked`: the other steps of its root hold
        `commit_success.txt`, so this one should too (LAYOUT-002)."""
        self._problems(layout)
        items_marked = any(c.has_commit_file for c in layout.checkpointables.values())
        if layout.kind is Kind.STEP and not layout.has_commit_file and (marked or items_marked):
            self.report(
                "LAYOUT-002",
                f"step holds no {COMMIT_FILE}, though "
                + ("its items hold one" if items_marked else "the other steps of its root do"),
                file=layout.path,
            )
        if CHECKPOINT_METADATA_FILE in _names(layout.location):
            self.document("checkpoint-metadata", layout.location, CHECKPOINT_METADATA_FILE)
        for name in layout.temporaries:
            self.report(
                "LAYOUT-001",
                f"item {name!r} of a committed checkpoint carries a temporary name "
                "(an unfinished save); not validated",
                file=_join(layout.path, name),
            )
        for child in layout.checkpointables.values():
            self.layout(child)

    def json_item(self, layout: Layout) -> None:
        """A JSON item: one file of user JSON, NaN and Infinity allowed (HANDLER-001)."""
        self.checked["documents"] += 1
        try:
            read_json_item(layout)
        except OckptError as e:
            self.error(e, file=layout.path)  # where the error names no file of its own

    # -- documents --------------------------------------------------------------------------

    def read(self, loc: Store, name: str, *, limit: int, rule: str) -> bytes | None:
        """The bytes of file `name` of `loc` through the one hardened open; None (reported)
        when it is refused (PATH-003..005, too large) or gone."""
        try:
            data = loc.get(name, limit=limit, rule=rule)
        except OckptError as e:
            self.error(e, file=loc.file(name))
            return None
        if data is None:
            self.report("VAL-009", "removed while validated", file=loc.file(name))
        return data

    def document(self, kind: str, loc: Store, name: str) -> bytes | None:
        """Check one document; its bytes when it has no error finding, else None."""
        self.checked["documents"] += 1
        if kind == "msgpack-view":
            data = self.read(
                loc, name, limit=limits_in_force().max_msgpack_bytes, rule="MSGPACK-001"
            )
        else:
            data = self.read(loc, name, limit=limits_in_force().max_json_bytes, rule="JSON-003")
        if data is None:
            return None
        found = check_document(kind, data, file=loc.file(name))
        for f in found:
            self.add(f)
        return None if any(f.severity == "error" for f in found) else data

    def plain_json(self, loc: Store, name: str) -> None:
        from .documents._json import parse_json

        self.checked["documents"] += 1
        data = self.read(loc, name, limit=limits_in_force().max_json_bytes, rule="JSON-003")
        if data is None:
            return
        try:
            parse_json(data, file=loc.file(name))
        except FormatError as e:
            self.error(e, file=loc.file(name))

    # -- items ------------------------------------------------------------------------------

    def item(self, layout: PytreeItemLayout) -> None:
        _ItemCheck(self, layout).run()


class _ItemCheck:
    """The checks of one pytree item."""

    def __init__(self, v: _Validator, layout: PytreeItemLayout) -> None:
        self.v = v
        self.layout = layout
        self.path = layout.path
        self.loc = layout.location
        self.files = ItemFiles(self.loc)
        self.names_here = _names(self.loc)
        self.fmt = layout.item
        self.doc: MetadataDocument | None = None
        self.msgpack: Any = None
        self.msgpack_ok = True
        self.leaves: dict[str, SavedLeaf] = {}
        self.store: Any = None
        self.keys: list[str] | None = None
        self.opened: list[Any] = []  # every store opened, closed when the item is done
        self._grid_memo: dict[tuple[int, str], tuple[Any, tuple[int, ...] | None]] = {}

    def f(self, *parts: str) -> str:
        return _join(self.path, *parts)

    def run(self) -> None:
        v = self.v
        v.checked["items"] += 1
        v._problems(self.layout)
        if not (self.fmt.has_metadata or self.fmt.has_msgpack):
            v.report(
                "LOAD-050",
                f"a pytree item without {METADATA_FILE} or the msgpack {MSGPACK_FILE} file: no "
                "reader can tell its tree",
                file=self.path,
            )
        self.documents()
        self.collect_leaves()
        self.names()
        try:
            self.open_storage()
            self.arrays()
            self.strings()
            v.ordered.drain()
        finally:
            v.ordered.abandon()  # after an error: no check is left reading the stores
            for store in self.opened:
                store.close()

    # -- documents --------------------------------------------------------------------------

    def documents(self) -> None:
        v, loc, here = self.v, self.loc, self.names_here
        if CHECKPOINT_METADATA_FILE in here:
            v.document("checkpoint-metadata", loc, CHECKPOINT_METADATA_FILE)
        if self.fmt.has_metadata:
            data = v.document("metadata", loc, METADATA_FILE)
            if data is not None:
                self.doc = MetadataDocument.from_bytes(data, file=loc.file(METADATA_FILE))
        if self.fmt.has_msgpack:
            data = v.document("msgpack-view", loc, MSGPACK_FILE)
            if data is not None:
                self.msgpack = decode_checkpoint(data, file=loc.file(MSGPACK_FILE))
            else:
                self.msgpack_ok = False
        self.sharding = None
        if SHARDING_FILE in here:
            data = v.document("sharding", loc, SHARDING_FILE)
            if data is not None:
                self.sharding = ShardingDocument.from_bytes(data, file=loc.file(SHARDING_FILE))
        self.strings_doc: StringsDocument | None = None
        self.strings_ok = True
        if STRINGS_FILE in here:
            self.read_strings(STRINGS_FILE)
        # the files the reader takes, in its order (`ItemFiles`: ARRM-003)
        self.array_metas: dict[str, WrittenArray] = {}
        if ARRAY_METADATAS_DIR in here:
            sub = loc.child(ARRAY_METADATAS_DIR)
            docs = []
            for name in self.files.array_metadata_files():
                data = v.document("array-metadatas", sub, name)
                if data is not None:
                    file = sub.file(name)
                    docs.append((file, ArrayMetadatas.from_bytes(data, file=file)))
            self.array_metas = take_array_metadatas(docs)

    def read_strings(self, name: str) -> None:
        """Check and parse the strings document `name` (a path relative to the item)."""
        data = self.v.document("strings", self.loc, name)
        if data is None:
            self.strings_ok = False
        else:
            self.strings_doc = StringsDocument.from_bytes(data, file=self.loc.file(name))

    def exists(self, name: str) -> bool:
        """Whether the item holds a file `name` (a relative path); a name that leads out or is
        no regular file counts as present: reading it reports why."""
        try:
            return self.loc.exists(name)
        except OckptError:
            return True

    def collect_leaves(self) -> None:
        """Param name -> leaf, from the saved tree as the reader builds it (`saved_tree`)."""
        tree = None
        if self.doc is not None:
            tree = saved_tree.from_metadata(
                self.doc, self.msgpack, msgpack_unreadable=not self.msgpack_ok
            )
        elif self.msgpack is not None:
            if self.strings_doc is None and self.strings_ok:
                self.legacy_strings(list(saved_tree.placeholder_names(self.msgpack)))
            names = set(self.strings_doc.names()) if self.strings_doc else set()
            tree = saved_tree.from_msgpack(self.msgpack, names)
        for leaf in saved_tree.leaves(tree):
            self.leaves.setdefault(leaf.param_name, leaf)

    def legacy_strings(self, names: list[str]) -> None:
        """Older releases: `_strings.json` inside the directory of the first string param
        that has one, in the tree's order, as the reader looks (`ItemFiles`)."""
        found = self.files.strings_location(names)
        if found is not None and found != STRINGS_FILE and "/" in found:
            self.read_strings(found)

    def names(self) -> None:
        """PATH-001: the param names of stored leaves must not collide."""
        if self.doc is None:
            return
        seen: dict[str, str] = {}
        for entry in self.doc.entries:
            if entry.value.empty_node is not None:
                continue
            name = entry.param_name
            if name in seen:
                self.v.report(
                    "PATH-001",
                    f"key paths {seen[name]} and {entry.tree_key} share the param name {name!r}",
                    file=self.f(METADATA_FILE),
                    pointer="/tree_metadata/"
                    + entry.tree_key.replace("~", "~0").replace("/", "~1"),
                )
            seen.setdefault(name, entry.tree_key)
        for a, b in find_collisions(seen):
            if a != b:
                self.v.report(
                    "PATH-001",
                    f"param name {b!r} nests inside param name {a!r}",
                    file=self.f(METADATA_FILE),
                    pointer=b,
                )

    # -- storage ----------------------------------------------------------------------------

    def open_storage(self) -> None:
        from .engines.python.store import DirectoryStore, MultiOcdbtStore, OcdbtStore
        from .engines.python.store import per_leaf_skip as _per_leaf_skip  # the engine's rule

        v, fmt = self.v, self.fmt
        root_manifest = self.f(MANIFEST_FILE)
        processes = list(fmt.ocdbt_processes)
        use_ocdbt = getattr(self.doc, "use_ocdbt", None) if self.doc is not None else None
        # an item without array leaves has no database, with or without use_ocdbt (writing §3.3)
        has_arrays = not self.tree_known or any(
            leaf.source == "array" for leaf in self.leaves.values()
        )
        wants_ocdbt = (
            (use_ocdbt is True and has_arrays) or OCDBT_DATA_DIR in self.names_here or processes
        )
        if not fmt.has_root_manifest and wants_ocdbt:
            v.report(
                "OCDBT-050",
                "the item's (merged) OCDBT manifest is missing"
                + (" (use_ocdbt is true)" if use_ocdbt is True else ""),
                file=root_manifest,
            )
        # every per-process database is checked on its own
        process_stores = []
        for n in processes:
            db_path = self.f(f"ocdbt.process_{n}")
            store = OcdbtStore(self.loc.child(f"ocdbt.process_{n}"), display=db_path)
            self.opened.append(store)
            if MANIFEST_FILE not in _names(self.loc.child(f"ocdbt.process_{n}")):
                v.report(
                    "OCDBT-050",
                    f"per-process database ocdbt.process_{n}/ has no manifest",
                    file=_join(db_path, MANIFEST_FILE),
                )
                continue
            # read through the merged manifest where there is one: this one's verdict is not needed
            if self.check_database(store, db_path, wait=not fmt.has_root_manifest):
                process_stores.append(store)
        if fmt.has_root_manifest:
            root = OcdbtStore(self.loc, display=self.path)
            self.opened.append(root)
            self.check_database(root, self.path, wait=False)
            self.store = root
        elif process_stores:
            self.store = MultiOcdbtStore(process_stores, self.path)
        elif fmt.storage is Storage.PER_LEAF_ZARR:
            self.store = DirectoryStore(self.loc, skip=_per_leaf_skip, display=self.path)
            self.opened.append(self.store)
        elif fmt.storage is Storage.OCDBT:
            self.store = None  # nothing readable: every array leaf is reported missing
        else:
            self.store = None
        if self.store is not None and self.keys is None:
            try:
                self.keys = self.store.list()
            except OckptError as e:
                v.error(e, file=self.path)
                self.keys = None
        elif self.store is None:
            self.keys = []

    def check_database(self, store: Any, db_path: str, *, wait: bool) -> bool:
        """List the latest generation (checks the nodes on the way); deep: verify everything,
        on a worker thread. Whether no problem was found; `wait`: also none by the deep
        verification (waited for), else its findings come when it is done."""
        v = self.v
        ok = True
        keys: list[str] | None = []
        shared = 0  # keys whose values share stored bytes with another key's
        try:
            for key, entry in store.db.entries():
                keys.append(key.decode("utf-8", "surrogateescape"))  # type: ignore[union-attr]
                ref = entry.value
                if isinstance(ref, bytes):
                    continue
                what = store.db.reference_fault(ref)
                if what is not None:
                    v.report(
                        "OCDBT-022",
                        f"the value of key {key!r} lies in bytes [{ref.offset}, "
                        f"{ref.offset + ref.length}) of a data file that {what}",
                        file=_join(db_path, ref.file_id.path.decode("utf-8", "replace")),
                        pointer=f"@{ref.offset}",
                    )
                    ok = False
                    continue
                try:
                    store.db.claim(key, ref)  # OCDBT-024: no two keys' values share bytes
                except OcdbtError as e:
                    shared += 1
                    if shared <= _MAX_PER_ARRAY:
                        v.error(e, file=_join(db_path, ref.file_id.path.decode("utf-8", "replace")))
                    ok = False
        except OckptError as e:
            v.error(e, file=_join(db_path, MANIFEST_FILE))
            ok = False
            keys = None
        if shared > _MAX_PER_ARRAY:
            v.report(
                "OCDBT-024",
                f"and {shared - _MAX_PER_ARRAY} more keys share stored bytes with another key",
                file=_join(db_path, MANIFEST_FILE),
            )
        if keys is not None and os.path.normpath(db_path) == os.path.normpath(self.path):
            self.keys = keys
        if v.deep:
            found: list[FormatError] = []

            def take(result: tuple[list[FormatError], int]) -> None:
                errors, nodes = result
                v.checked["ocdbt_nodes"] += nodes
                v.tick("ocdbt nodes")
                for err in errors:
                    v.error(err, file=_join(db_path, MANIFEST_FILE))
                found.extend(errors)

            v.ordered.submit(functools.partial(_verified, store.db), take, 0, alone=True)
            if wait:
                v.ordered.drain()
                ok = ok and not found
        return ok

    # -- arrays -----------------------------------------------------------------------------

    def arrays(self) -> None:
        from .engines.python.store import key_listing
        from .zarr import open_metadata

        v = self.v
        array_leaves = {n: lf for n, lf in self.leaves.items() if lf.source == "array"}
        string_leaves = {n for n, lf in self.leaves.items() if lf.source == "string"}
        metadata_file = self.f(METADATA_FILE) if self.doc is not None else self.f(MSGPACK_FILE)
        self.check_sharding(array_leaves)
        self.check_array_metadatas(array_leaves)
        if self.keys is None:
            return  # the storage could not be listed: already reported
        listing = key_listing(self.keys)
        params = listing["params"]
        # older releases: a file named <param name> (their `<param>/_strings.json` is no key:
        # the per-leaf store skips it, `per_leaf_skip`)
        unclaimed = [k for k in listing.get("unclaimed", []) if k not in string_leaves]
        where = self.store_display()
        per_leaf = self.fmt.storage is Storage.PER_LEAF_ZARR and not self.fmt.has_root_manifest
        by_key = {_key_prefix(n, per_leaf=per_leaf).rstrip("/"): n for n in array_leaves}
        unexpected = [(f"key {k!r} belongs to no array of the item", k) for k in unclaimed] + [
            (
                f"array {n!r} in the storage is no array leaf of the item's tree",
                params[n]["metadata_key"],
            )
            for n in sorted(set(params) - set(by_key))
        ]
        if not self.tree_known:
            unexpected = []  # no tree to compare with (per-leaf zarr without metadata)
        for message, key in unexpected[: 4 * _MAX_PER_ARRAY]:
            v.report("VAL-003", message, file=where, pointer=key)
        if len(unexpected) > 4 * _MAX_PER_ARRAY:
            v.report(
                "VAL-003",
                f"{len(unexpected) - 4 * _MAX_PER_ARRAY} more keys belong to no array leaf",
                file=where,
            )
        strict = self.doc is not None and self.doc.store_array_data_equal_to_fill_value is True
        use_zarr3 = getattr(self.doc, "use_zarr3", None) if self.doc is not None else None
        for name, leaf in sorted(array_leaves.items()):
            v.tick("arrays")
            v.checked["arrays"] += 1
            key_name = _key_prefix(name, per_leaf=per_leaf).rstrip("/")
            if key_name not in params:
                v.report(
                    "VAL-004",
                    f"leaf {name!r} ({leaf.value_type}) has no array in the storage "
                    f"(neither {ZARR2_METADATA} nor {ZARR3_METADATA} under its param name)",
                    file=metadata_file,
                    pointer=name,
                )
                continue
            prefix = _key_prefix(name, per_leaf=per_leaf)
            try:
                meta = open_metadata(self.store.get, prefix=prefix, file=where)
            except OckptError as e:
                v.error(e, file=where)
                continue
            if meta is None:  # pragma: no cover - listed above
                continue
            if isinstance(use_zarr3, bool) and meta.zarr_format != (3 if use_zarr3 else 2):
                v.report(
                    "VAL-005",
                    f"array {name!r} is zarr v{meta.zarr_format}, but use_zarr3 is "
                    f"{str(use_zarr3).lower()}",
                    file=f"{where}/{params[key_name]['metadata_key']}",
                )
            self.check_shapes(name, leaf, meta, where, params[key_name]["metadata_key"])
            self.check_chunks(name, meta, params[key_name]["chunk_keys"], prefix, where, strict)

    def store_display(self) -> str:
        if self.fmt.storage is Storage.PER_LEAF_ZARR and not self.fmt.has_root_manifest:
            return self.path
        return self.f(MANIFEST_FILE) if self.fmt.has_root_manifest else self.path

    def check_shapes(
        self, name: str, leaf: SavedLeaf, meta: Any, where: str, meta_key: str
    ) -> None:
        v = self.v
        file = f"{where}/{meta_key}"
        shape = tuple(meta.shape)
        outer = tuple(meta.chunk_shape)
        sharding = getattr(meta, "sharding", None)
        inner = tuple(sharding.chunk_shape) if sharding is not None else outer
        if leaf.value_type == "scalar" and shape != ():
            v.report(
                "VAL-006",
                f"leaf {name!r} is a scalar in {METADATA_FILE} but its array has shape "
                f"{list(shape)}",
                file=file,
                pointer="/shape",
            )
        ws = leaf.write_shape
        if ws is not None and (
            len(ws) != len(shape) or any(w > s for w, s in zip(ws, shape, strict=False))
        ):
            v.report(
                "VAL-006",
                f"write_shape {list(ws)} of leaf {name!r} in {METADATA_FILE} does not fit the "
                f"array's shape {list(shape)}",
                file=self.f(METADATA_FILE),
                pointer=name,
            )
        found = self.array_metas.get(name)
        if found is None:
            return
        am_file, am = found.file, found.metadata
        self.check_random_key(name, am, meta, am_file)
        am_ws = getattr(am, "write_shape", None)
        am_cs = getattr(am, "chunk_shape", None)
        if am_ws is not None:
            am_ws = tuple(am_ws)
            if len(am_ws) != len(shape) or any(w > s for w, s in zip(am_ws, shape, strict=False)):
                v.report(
                    "VAL-006",
                    f"write_shape {list(am_ws)} of {name!r} does not fit the array's shape "
                    f"{list(shape)}",
                    file=am_file,
                    pointer=name,
                )
            elif ws is not None and tuple(ws) != am_ws:
                v.report(
                    "VAL-006",
                    f"write_shape of {name!r} is {list(am_ws)} here but {list(ws)} in "
                    f"{METADATA_FILE}",
                    file=am_file,
                    pointer=name,
                )
        if am_cs is not None and tuple(am_cs) not in (outer, inner):
            v.report(
                "VAL-006",
                f"chunk_shape {list(am_cs)} of {name!r} differs from the zarr chunk shape "
                f"{list(outer)}",
                file=am_file,
                pointer=name,
            )

    def check_random_key(self, name: str, am: Any, meta: Any, file: str) -> None:
        """A recorded typed PRNG key: the array is that implementation's uint32 key data
        (ARRM-002; the schema checks that the name is a string). An unknown implementation is
        not checked: the spec lets a reader read it as plain data."""
        impl = am.random_key_impl
        if impl in random_keys.KEY_DATA_SHAPES:
            try:
                random_keys.key_shape(impl, tuple(meta.shape), meta.numpy_dtype, leaf=name)
            except FormatError as e:
                self.v.report("ARRM-002", f"leaf {name!r}: {e.message}", file=file, pointer=name)

    def grid_index(self, meta: Any, key: str, grid: tuple[int, ...]) -> tuple[int, ...] | None:
        """`zarr.grid_index`, kept per zarr metadata object and key: the arrays of a model share a
        few zarr documents (one object each, `zarr.open_metadata`) and their chunk keys."""
        hit = self._grid_memo.get((id(meta), key))
        if hit is not None and hit[0] is meta:
            return hit[1]
        from .zarr import grid_index

        index = grid_index(meta, key, grid)
        self._grid_memo[(id(meta), key)] = (meta, index)
        return index

    def check_chunks(
        self, name: str, meta: Any, present: list[str], prefix: str, where: str, strict: bool
    ) -> None:
        """The stored chunk keys against the grid: keys of no chunk (VAL-003), missing chunks
        where every chunk is stored (ZARR-008), and with `deep` every chunk decoded. Work
        follows the keys present, never the number of chunks the metadata declares."""
        v = self.v
        shape, chunk = tuple(meta.shape), tuple(meta.chunk_shape)
        # A zero-size array's grid has no chunk (ZARR-009): nothing can be missing, and every
        # key stored for it is outside the grid (VAL-003).
        grid = tuple(-(-s // c) if c else 0 for s, c in zip(shape, chunk, strict=False))
        found: dict[str, tuple[int, ...]] = {}
        extra: list[str] = []
        for key in present:
            index = self.grid_index(meta, key, grid)
            if index is None:
                extra.append(key)
            else:
                found[key] = index
        for k in sorted(extra)[:_MAX_PER_ARRAY]:
            v.report(
                "VAL-003",
                f"key {prefix + k!r} is no chunk of the grid of array {name!r} "
                f"(shape {list(shape)}, chunks {list(chunk)})",
                file=where,
                pointer=prefix + k,
            )
        missing = math.prod(grid) - len(found)
        if strict and missing:
            first = []  # the first few missing keys, in grid order (stops after a few)
            for index in itertools.product(*(range(g) for g in grid)):
                key = meta.chunk_key(index)
                if key not in found:
                    first.append(key)
                    if len(first) == _MAX_PER_ARRAY:
                        break
            shown = ", ".join(repr(prefix + k) for k in first)
            more = f" and {missing - len(first)} more" if missing > len(first) else ""
            v.report(
                "ZARR-008",
                f"array {name!r}: {missing} chunk(s) missing, and the checkpoint stores every "
                f"chunk (store_array_data_equal_to_fill_value): {shown}{more}",
                file=where,
                pointer=prefix + first[0],
            )
        if v.deep:
            self.decode_chunks(name, meta, [found[k] for k in sorted(found)], prefix, where)

    def decode_chunks(self, name: str, meta: Any, indices: list, prefix: str, where: str) -> None:
        """Hand every chunk at `indices` to the worker threads (`check_chunk`); what they find
        comes in the order of `indices`, at most `_MAX_PER_ARRAY` errors for the array."""
        v = self.v
        shape, chunk = tuple(meta.shape), tuple(meta.chunk_shape)
        nbytes = math.prod(chunk) * meta.numpy_dtype.itemsize  # decoded whole
        errors = itertools.count(1)
        for index in indices:
            v.checked["chunks"] += 1
            box = [
                (i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunk, shape, strict=True)
            ]
            key = prefix + meta.chunk_key(index)
            file = f"{where}/{key}"
            take = functools.partial(self.take_chunk, file, errors)
            try:
                self.claim(key)
            except OckptError as e:
                v.ordered.submit(functools.partial(Outcome, 0, e), take, 0)
                continue
            work = functools.partial(self.check_chunk, meta, key, box, nbytes, prefix, where)
            v.ordered.submit(work, take, nbytes)

    def take_chunk(self, file: str, errors: Iterator[int], outcome: Outcome) -> None:
        """On the calling thread, in order: count a checked chunk's bytes, report what it found."""
        self.v.tick("chunks", outcome.read)
        if outcome.error is not None:
            if next(errors) <= _MAX_PER_ARRAY:
                self.v.error(outcome.error, file=file)
        elif outcome.unchecked is not None:
            self.v.report("VAL-010", f"not decoded: {outcome.unchecked}", file=file)

    def claim(self, key: str) -> None:
        """A per-leaf zarr chunk file is claimed (PATH-008) when it is read; here, on the calling
        thread and in order, so that which of two linked files is refused does not depend on
        which thread reads first (OCDBT values are claimed as the database is listed)."""
        self.store.claim(key)

    def check_chunk(
        self, meta: Any, key: str, box: list, nbytes: int, prefix: str, where: str
    ) -> Outcome:
        """Decode one chunk (on a worker thread): quickly where it is Orbax's plain zstd or raw
        bytes and sound (`quick_check`), else through the zarr decoder, which names the fault;
        one too large for the memory left (LIMIT-006) is checked as a stream (`zarr.stream`)."""
        from .zarr import read_region

        outcome = Outcome()
        file = f"{where}/{key}"
        try:
            try:
                check_allocation(nbytes, what="the chunk", file=file)
            except MemoryLimitError as e:
                if not self.check_streamed(meta, key, nbytes, file, outcome):
                    outcome.unchecked = e.message
                return outcome
            quick = self.quick_check(meta, key, nbytes)
            if quick is not None:
                outcome.read = quick
                return outcome
            # the region is this one chunk (or shard): one value, read before its output is made
            value = self.store.get(key)
            outcome.read = 0 if value is None else len(value)
            out = np.empty(tuple(b - a for a, b in box), dtype=meta.numpy_dtype)
            read_region(
                meta, {key: value}.get, out, box, prefix=prefix, missing="error", file=where
            )
        except OckptError as e:
            outcome.error = e.with_traceback(None)  # its frames would hold the chunk's memory
        return outcome

    def quick_check(self, meta: Any, key: str, nbytes: int) -> int | None:
        """The stored bytes of the chunk or shard `key` where it is sound and Orbax's: plain
        zstd or raw bytes (`plain_kind`), a shard of one such inner chunk; decoded a window at a
        time (`decodes_quickly`), holding no chunk in memory. None, whatever the fault, to take the
        checked decoder, which names it."""
        sharding = getattr(meta, "sharding", None)
        pipeline = meta.pipeline if sharding is None else sharding.codecs
        kind = plain_kind(pipeline)
        if (
            nbytes == 0
            or kind is None
            or (sharding is not None and tuple(sharding.chunk_shape) != tuple(meta.chunk_shape))
        ):
            return None
        try:
            src = self.store.value_range(key)
            with src if src is not None else contextlib.nullcontext():
                value = src if src is not None else self.store.get(key)
                if value is None or len(value) > limits_in_force().max_chunk_bytes:
                    return None
                chunk: Any = value
                if sharding is not None:
                    shape = tuple(meta.chunk_shape)
                    index = sharding.decode_index(value, shape, file=key, pointer="shard index")
                    entry = index.get((0,) * len(shape))
                    if entry is None:
                        return None
                    at, n = entry
                    chunk = value.part(at, n) if src is not None else memoryview(value)[at : at + n]
                return len(value) if decodes_quickly(kind, chunk, nbytes) else None
        except OckptError:
            return None

    def check_streamed(self, meta: Any, key: str, nbytes: int, file: str, outcome: Outcome) -> bool:
        """Check a chunk or shard of `nbytes` decoded, read in pieces from its file (or from
        memory: a value stored inline in an OCDBT node is small), holding none of it decoded;
        False where a codec cannot be streamed. The stored bytes read count in `outcome`."""
        from .zarr import stream
        from .zarr.array import missing_chunk

        src = self.store.value_range(key)
        value = src if src is not None else self.store.get(key)
        if value is None:
            raise missing_chunk(file, "chunk")  # removed since it was listed
        outcome.read += len(value)
        with src if src is not None else contextlib.nullcontext():
            if len(value) > (
                max_chunk := limits_in_force().max_chunk_bytes
            ):  # the bound a read of it has (ZARR-003)
                raise ZarrFormatError(
                    "stored value larger than the limit",
                    rule="ZARR-003",
                    file=file,
                    expected=f"<= {max_chunk} bytes",
                    got=len(value),
                )
            if getattr(meta, "sharding", None) is not None:
                return stream.check_shard(meta, value, file=file, missing="error")
            if not stream.streamable(meta.pipeline):
                return False
            source = src if src is not None else io.BytesIO(value)
            return stream.check_chunk(meta.pipeline, source, nbytes, file=file, pointer=None)

    @property
    def tree_known(self) -> bool:
        """Whether the item's tree could be read (else the cross-file checks are skipped)."""
        return self.doc is not None or self.msgpack is not None

    def check_sharding(self, array_leaves: dict[str, SavedLeaf]) -> None:
        if self.sharding is None or not self.tree_known:
            return
        for name, _spec in self.sharding.shardings.items():
            if name not in array_leaves:
                self.v.report(
                    "VAL-007",
                    f"{SHARDING_FILE} holds a sharding for {name!r}, which is no array leaf of "
                    "the tree",
                    file=self.f(SHARDING_FILE),
                    pointer="/" + _b64(name),
                )

    def check_array_metadatas(self, array_leaves: dict[str, SavedLeaf]) -> None:
        for name, written in sorted(self.array_metas.items()):
            for other in written.differing:  # ARRM-003: the reader takes `written.file`'s
                self.v.report(
                    "ARRM-003",
                    f"{ARRAY_METADATAS_DIR} describes {name!r} otherwise than "
                    f"{written.file.rsplit('/', 1)[-1]}, the entry readers take",
                    file=other,
                    pointer=name,
                )
            if self.tree_known and name not in array_leaves:
                self.v.report(
                    "VAL-007",
                    f"{ARRAY_METADATAS_DIR} describes {name!r}, which is no array leaf of the tree",
                    file=written.file,
                    pointer=name,
                )

    # -- strings ----------------------------------------------------------------------------

    def strings(self) -> None:
        in_order = [n for n, lf in self.leaves.items() if lf.source == "string"]  # the tree's
        names = sorted(in_order)
        if not names or not self.strings_ok:
            return
        if self.strings_doc is None:  # older releases: <first string param name>/_strings.json
            self.legacy_strings(in_order)
            if not self.strings_ok:
                return
        doc = self.strings_doc
        for name in names:
            if doc is None:
                if self.exists(name):  # older releases: a file per string leaf
                    continue
                self.v.report(
                    "STR-002",
                    f"string leaf {name!r}: the item has no {STRINGS_FILE}",
                    file=self.f(STRINGS_FILE),
                    pointer="/" + name,
                )
                continue
            legacy = doc.file != self.loc.file(STRINGS_FILE)
            if legacy and isinstance(doc.values.get(name), str):
                continue  # older releases keyed the file by param name, not by JSON pointer
            try:
                doc.get(name)
            except OckptError as e:
                message = getattr(e, "message", str(e))
                self.v.add(_finding("STR-002", message, file=doc.file, pointer="/" + name))


def _key_prefix(param_name: str, *, per_leaf: bool) -> str:
    """Where a param's keys start in the storage (`ockpt.paths.array_prefix`)."""
    return array_prefix(param_name, per_leaf=per_leaf)


def _b64(name: str) -> str:
    from .paths import sharding_key

    return sharding_key(name)


# ---------------------------------------------------------------------------------------------
# the entry point


def validate(
    path: str | os.PathLike[str] | Store,
    *,
    step: int | None = None,
    item: str | None = None,
    deep: bool = False,
    progress: Progress | None = None,
    limits: Limits | None = None,
) -> Report:
    """Validate the checkpoint at `path` (item, v1 checkpoint, step or manager root; `step`
    and `item` narrow it as they do for `load_pytree`, through `layout.select`). `path` is a
    local directory or a kvstore URL (``gs://``, ``s3://``), whose objects are read by ranged
    requests and checked by the same decoders. An object store lists no sizes: there
    `progress` counts towards the bytes of the values the OCDBT databases hold (each value's
    length is in its B+tree entry; no value is read for it), and is not called for an item
    without a database.

    With `deep`, chunks are decoded and databases walked on one worker thread per core, a
    bounded number of chunks out at once; the report is the same as one thread's, finding for
    finding and in the same order (`deep_checks.PARALLEL`).

    `limits` replaces the default `ockpt.limits.LIMITS` for this call (a file over one of them
    is a finding of the rule that bounds it).

    Returns a `Report` whose findings cite the spec's rule ids; `report.ok` is False when any
    finding is an error. Raises `PathNotFoundError` when `path` does not exist,
    `NotACheckpointError` when it is not a directory, and `OSError` when a file cannot be read.
    """
    store = as_store(path)
    v = _Validator(deep, progress)
    with applied(limits):
        kind = v.run(store, step=step, item=item)
    return Report(store.display, kind, deep, v.findings, {k: n for k, n in v.checked.items()})
