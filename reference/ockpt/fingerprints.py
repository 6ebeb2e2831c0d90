"""``ockpt fingerprint``: a canonical, value-free description of a checkpoint's on-disk format.

The fingerprint says how a checkpoint is stored, never what it holds: its layout (what each
directory is, and which files and directories it has), the keys and JSON types of each
document, the zarr metadata of its arrays, its OCDBT configuration and key layout, its codec
chains and its dtypes. Values, timestamps, step numbers, process numbers, leaf names, data file
names and, unless asked, shapes are left out, so the same code saving different values on any
machine gives the same fingerprint, and two fingerprints differ exactly where the format does.
It is JSON with sorted keys (`dumps`), so a CI job can commit one and compare (`compare`,
``ockpt diff --format``).

Its members, for each directory (a node, nested as the layout nests them): ``kind`` (as
`layout.detect` says), ``handler``, ``files`` (normalized relative paths, directories ending in
``/``), ``documents`` (each JSON document's form, `_skeleton`); a pytree item adds ``storage``,
``arrays`` (the distinct zarr documents, or with shapes each leaf's), ``dtypes``, ``codecs`` and
``ocdbt`` (the root and per-process configurations and the key layout); a step or v1 checkpoint
adds ``items``, a manager root ``step_name`` and ``steps`` (the distinct forms of its committed
steps). The top level adds ``fingerprint``, the version of this structure.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .documents._json import parse_json, read_json
from .errors import FormatError, NotACheckpointError, PathNotFoundError
from .layout import ContainerLayout, Kind, Layout, ManagerRootLayout, detect, detect_step
from .limits import current as limits_in_force
from .names import (
    ARRAY_METADATAS_DIR,
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    JSON_ITEM_FILES,
    LEGACY_ROOT_METADATA_NAME,
    MANIFEST_FILE,
    METADATA_FILE,
    MSGPACK_FILE,
    OCDBT_DATA_DIR,
    OCDBT_PROCESS_DIR,
    ROOT_METADATA_NAME,
    SHARDING_FILE,
    STRINGS_FILE,
    ZARR2_METADATA,
    ZARR3_METADATA,
    ZARR_DOCUMENTS,
)
from .ocdbt.tree import Database
from .store import Store

__all__ = ["VERSION", "fingerprint", "dumps", "compare", "Change", "load"]

#: The version of the fingerprint's own structure (its top-level ``fingerprint`` member).
VERSION = 1

#: Members whose string values are format vocabulary, kept as ``string=<value>``; every other
#: string is only ``string``.
_VOCABULARY = frozenset(
    {
        "value_type",
        "sharding_type",
        "axis_types",
        "key_type",
        "random_key_impl",
        "dtype",
        "data_type",
        "name",
        "id",
        "order",
        "dimension_separator",
        "node_type",
        "zarr_format",
        "index_location",
        "endian",
        "cname",
        "shuffle",
    }
)
#: The member of `_CHECKPOINT_METADATA` that names each item's handler (or the only one's).
_HANDLERS = "item_handlers"
#: Members whose keys are names from the tree or the user (param names, key paths): their
#: values are described as one union under ``*``.
_NAMED_MEMBERS = frozenset({"tree_metadata"})
#: Members that hold the user's own values (metadata, metrics): only their JSON type is kept.
_OPAQUE_MEMBERS = frozenset(
    {"custom", "custom_metadata", "metrics", "performance_metrics", "attributes", "user_metadata"}
)
#: zarr metadata members that hold an array's size, left out unless shapes are asked for.
_SHAPE_MEMBERS = frozenset({"shape", "chunks", "chunk_shape", "write_shape"})
#: A process number in a name (``ocdbt.process_3``, ``array_metadatas/process_3``).
_PROCESS = re.compile(r"process_(0|[1-9][0-9]*)")


def fingerprint(path: Any, *, shapes: bool = False) -> dict[str, Any]:
    """The fingerprint of the checkpoint at `path` (any layout, local or URL): a JSON-ready
    dict. With `shapes`, zarr metadata keep their ``shape`` and chunk shapes, by leaf."""
    layout = detect(path)
    if not layout.exists:
        raise PathNotFoundError(layout.reason, file=layout.path)
    if not layout.committed or layout.location is None:
        raise NotACheckpointError(layout.reason, file=layout.path)
    return {"fingerprint": VERSION, **_node(layout, shapes=shapes)}


def dumps(value: dict[str, Any]) -> str:
    """The canonical text of a fingerprint: sorted keys, two-space indent, a final newline;
    byte-identical for equal fingerprints."""
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def load(path: Any) -> dict[str, Any]:
    """The fingerprint of `path`: read from it when it is a fingerprint file (JSON with a
    ``fingerprint`` member, as `dumps` writes), else taken of the checkpoint there."""
    if isinstance(path, (str, os.PathLike)) and os.path.isfile(path):
        value = read_json(path)
        if not isinstance(value, dict) or value.get("fingerprint") != VERSION:
            raise FormatError(
                f"not a fingerprint of version {VERSION}",
                file=os.fspath(path),
                pointer="/fingerprint",
            )
        return value
    return fingerprint(path)


# ---------------------------------------------------------------------------------------------
# The layout, directory by directory.


def _node(layout: Layout, *, shapes: bool) -> dict[str, Any]:
    loc = layout.location
    assert loc is not None
    out: dict[str, Any] = {"kind": layout.kind.value}
    if layout.handler is not None:
        out["handler"] = layout.handler.rsplit(".", 1)[-1]
    if isinstance(layout, ManagerRootLayout):
        steps = [s for s in layout.steps if s.committed]
        out["step_name"] = (
            "<step>" if layout.step_prefix is None else f"{layout.step_prefix}_<step>"
        )
        entries = _entries(loc, skip={s.name for s in layout.steps} | set(layout.temporaries))
        out["files"] = _files(entries)
        out["documents"] = _documents(loc, entries)
        nodes = {dumps(_node(detect_step(layout, s), shapes=shapes)) for s in steps}
        out["steps"] = [json.loads(n) for n in sorted(nodes)]
        return out
    if isinstance(layout, ContainerLayout):
        entries = _entries(loc, skip=set(layout.checkpointables) | set(layout.temporaries))
        out["files"] = _files(entries)
        out["documents"] = _documents(loc, entries)
        out["items"] = {
            name: _node(child, shapes=shapes) if child.location is not None else {}
            for name, child in sorted(layout.checkpointables.items())
        }
        return out
    if layout.kind is Kind.PYTREE_ITEM:
        out.update(_pytree_item(layout, loc, shapes=shapes))
        return out
    entries = _entries(loc, skip=layout.temporaries)
    out["files"] = _files(entries)
    out["documents"] = _documents(loc, entries, opaque=layout.kind is Kind.JSON_ITEM)
    return out


def _entries(loc: Store, *, skip: Iterable[str] = ()) -> list[tuple[str, bool]]:
    """(relative path, is a directory) of everything under `loc`, recursively, leaving out the
    top-level names in `skip` (the steps and items described on their own)."""
    return list(_walk(loc, "", depth=0, skip=set(skip)))


def _walk(loc: Store, prefix: str, *, depth: int, skip: set[str]) -> Iterator[tuple[str, bool]]:
    if depth > limits_in_force().max_depth:
        raise FormatError("directories nested too deep", file=loc.file(prefix), rule="LIMIT-005")
    listing = loc.list_dir(prefix)
    for name in sorted(listing.files | listing.other):
        if depth or name not in skip:
            yield f"{prefix}{name}", False
    for name in sorted(listing.dirs):
        if depth or name not in skip:
            yield f"{prefix}{name}/", True
            yield from _walk(loc, f"{prefix}{name}/", depth=depth + 1, skip=skip)


def _files(entries: list[tuple[str, bool]], *, leaves: bool = False) -> list[str]:
    """`entries` as normalized paths (directories end in ``/``): process numbers and OCDBT data
    file names replaced; with `leaves` (a pytree item), each directory that is no name of an
    item itself (a leaf's array, or a string leaf's empty directory) is ``<leaf>/``, and what
    is in it ``<leaf>/<chunk>`` or its zarr documents."""
    return sorted({_normalize(rel, is_dir, leaves=leaves) for rel, is_dir in entries})


_ITEM_NAMES = frozenset(
    {
        METADATA_FILE,
        SHARDING_FILE,
        STRINGS_FILE,
        CHECKPOINT_METADATA_FILE,
        MSGPACK_FILE,
        COMMIT_FILE,
        MANIFEST_FILE,
        OCDBT_DATA_DIR,
        ARRAY_METADATAS_DIR,
    }
)
#: The JSON documents of a checkpoint outside its arrays, by file name.
_DOCUMENTS = frozenset(
    {METADATA_FILE, CHECKPOINT_METADATA_FILE, SHARDING_FILE, ROOT_METADATA_NAME}
    | JSON_ITEM_FILES
    | {LEGACY_ROOT_METADATA_NAME}
)


#: Names kept in a leaf's directory: its zarr documents, and the `_strings.json` that releases
#: up to 0.3.5 put in the first string leaf's directory (spec/json-documents.md §7.1).
_LEAF_DOCUMENTS = ZARR_DOCUMENTS | {STRINGS_FILE}


def _item_own(rel: str) -> bool:
    """Whether `rel` is one of a pytree item's own names (not under a leaf's directory)."""
    top = rel.split("/", 1)[0]
    return top in _ITEM_NAMES or OCDBT_PROCESS_DIR.fullmatch(top) is not None


def _normalize(rel: str, is_dir: bool, *, leaves: bool) -> str:
    parts = rel.rstrip("/").split("/")
    parts = [_PROCESS.sub("process_<N>", p) for p in parts]
    if len(parts) >= 2 and parts[-2] == OCDBT_DATA_DIR and not is_dir:
        parts[-1] = "<file>"  # an OCDBT data file: its name is random
    if parts[0].startswith("manifest.") and parts[0] != MANIFEST_FILE:
        parts[0] = "manifest.<number>"
    if leaves and not _item_own(rel):
        if len(parts) == 1:
            parts = ["<leaf>"]
        else:
            last = parts[-1] if parts[-1] in _LEAF_DOCUMENTS else "<chunk>"
            parts = ["<leaf>", last] if not is_dir else ["<leaf>", "<dir>"]
    return "/".join(parts) + ("/" if is_dir else "")


# ---------------------------------------------------------------------------------------------
# A pytree item: its files, documents, arrays and databases.


def _pytree_item(layout: Layout, loc: Store, *, shapes: bool) -> dict[str, Any]:
    assert layout.item is not None
    out: dict[str, Any] = {"storage": layout.item.storage.value}
    entries = _entries(loc, skip=layout.temporaries)
    out["files"] = _files(entries, leaves=True)
    out["documents"] = _documents(loc, [e for e in entries if _item_own(e[0])])
    arrays: dict[str, dict[str, Any]] = {}  # leaf -> its zarr documents
    if loc.size(MANIFEST_FILE) is not None:
        with Database(loc) as root:
            keys = []
            for raw, entry in root.entries():  # one walk: keys, and the zarr documents' values
                key = raw.decode("utf-8", "replace")
                keys.append(key)
                leaf, _, doc = key.rpartition("/")
                if leaf and doc in ZARR_DOCUMENTS:
                    value = root.read_value(entry, key=raw)
                    arrays.setdefault(leaf, {})[doc] = _json(value, root.where(key))
            out["ocdbt"] = _ocdbt(loc, root, keys)
    else:
        for rel, is_dir in entries:
            doc = rel.rsplit("/", 1)[-1]
            if not is_dir and doc in ZARR_DOCUMENTS and "/" in rel:
                data = loc.get(rel, limit=limits_in_force().max_json_bytes)
                if data is not None:
                    arrays.setdefault(rel.rsplit("/", 1)[0], {})[doc] = _json(data, loc.file(rel))
    forms = [_array(docs, shapes=False) for docs in arrays.values()]
    if shapes:
        out["arrays"] = {leaf: _array(arrays[leaf], shapes=True) for leaf in sorted(arrays)}
    else:
        out["arrays"] = _distinct(forms)
    out["dtypes"] = sorted({d for a in forms for d in _dtypes(a)})
    out["codecs"] = _distinct(_codecs(a) for a in forms)
    return out


def _ocdbt(loc: Store, root: Database, keys: list[str]) -> dict[str, Any]:
    """The item's OCDBT configuration: its root database's, the per-process databases' (as
    one union), and its keys with leaf names and chunk keys replaced."""
    processes = []
    for name in sorted(loc.list_dir("").dirs):
        if OCDBT_PROCESS_DIR.fullmatch(name):
            with Database(loc.child(name)) as db:
                processes.append(_config(db))
    arrays = {k.rsplit("/", 1)[0] for k in keys if k.rsplit("/", 1)[-1] in ZARR_DOCUMENTS}
    layout = set()
    for key in keys:
        leaf, _, last = key.rpartition("/")
        owner = next((a for a in _prefixes(key) if a in arrays), None)
        if owner is None:
            layout.add(key)
        elif last in ZARR_DOCUMENTS and leaf == owner:
            layout.add(f"<leaf>/{last}")
        else:
            layout.add("<leaf>/<chunk>")
    config: dict[str, Any] = {"root": _config(root), "keys": sorted(layout)}
    if processes:
        config["process_databases"] = _distinct(processes)
    return config


def _prefixes(key: str) -> Iterator[str]:
    """The directory-like prefixes of `key`, longest first (``a/b/c`` -> ``a/b``, ``a``)."""
    while "/" in key:
        key = key.rsplit("/", 1)[0]
        yield key


def _config(db: Database) -> dict[str, Any]:
    c = db.config
    return {
        "manifest_kind": c.manifest_kind,
        "max_inline_value_bytes": c.max_inline_value_bytes,
        "max_decoded_node_bytes": c.max_decoded_node_bytes,
        "version_tree_arity_log2": c.version_tree_arity_log2,
        "compression": None if c.compression is None else {"zstd": c.compression.level},
    }


def _array(docs: dict[str, Any], *, shapes: bool) -> dict[str, Any]:
    """An array's zarr documents, sizes dropped unless `shapes`, user attributes typed only."""
    return {name: _strip(doc, shapes=shapes) for name, doc in sorted(docs.items())}


def _strip(value: Any, *, shapes: bool) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _SHAPE_MEMBERS and not shapes:
                continue
            out[k] = _skeleton(v) if k in _OPAQUE_MEMBERS else _strip(v, shapes=shapes)
        return out
    if isinstance(value, list):
        return [_strip(v, shapes=shapes) for v in value]
    return value


def _dtypes(array: dict[str, Any]) -> Iterator[str]:
    for doc in array.values():
        for key in ("dtype", "data_type"):
            if isinstance(doc.get(key), str):
                yield doc[key]


def _codecs(array: dict[str, Any]) -> Any:
    """The codec chain of an array: zarr v2's compressor and filters, zarr v3's codecs."""
    if ZARR3_METADATA in array:
        return {"codecs": array[ZARR3_METADATA].get("codecs")}
    v2 = array.get(ZARR2_METADATA, {})
    return {"compressor": v2.get("compressor"), "filters": v2.get("filters")}


# ---------------------------------------------------------------------------------------------
# JSON documents, described by their keys and types.


def _documents(
    loc: Store, entries: list[tuple[str, bool]], *, opaque: bool = False
) -> dict[str, Any]:
    """Each JSON document among `entries`, by normalized name: its skeleton (`_skeleton`);
    with `opaque` (a JSON item's user document) its JSON type."""
    out: dict[str, Any] = {}
    limit = limits_in_force().max_json_bytes
    for rel, is_dir in entries:
        if is_dir or not _is_document(rel):
            continue
        name = _normalize(rel, is_dir, leaves=False)
        data = loc.get(rel, limit=limit)
        if data is None:
            continue
        value = _json(data, loc.file(rel))
        if rel == STRINGS_FILE and isinstance(value, dict):  # param name -> string
            out[name] = {"*": _union(_skeleton(v) for v in value.values())} if value else {}
            continue
        if rel == SHARDING_FILE and isinstance(value, dict):  # JSON in JSON strings
            value = {
                k: _json(v, loc.file(rel), f"/{k}") if isinstance(v, str) else v
                for k, v in value.items()
            }
            value = {"*": _union(_skeleton(v) for v in value.values())} if value else {}
            out[name] = value
            continue
        described = _skeleton(value, opaque=opaque)
        out[name] = described if name not in out else _merge(out[name], described)
    return out


def _is_document(rel: str) -> bool:
    last = rel.rsplit("/", 1)[-1]
    if last in ZARR_DOCUMENTS or rel.split("/", 1)[0] == OCDBT_DATA_DIR:
        return False
    return last in _DOCUMENTS or rel.startswith(f"{ARRAY_METADATAS_DIR}/") or last.endswith(".json")


def _json(data: bytes | str, file: str, pointer: str = "") -> Any:
    return parse_json(data, file=file, pointer=pointer, constants=True)


def _skeleton(value: Any, *, member: str = "", opaque: bool = False) -> Any:
    """Keys and JSON types of `value`: objects keep their keys (those of `_NAMED_MEMBERS`
    become ``*``), arrays the union of their items' skeletons, strings ``string`` (or
    ``string=<value>`` for `_VOCABULARY` members), other scalars their type name."""
    if isinstance(value, dict):
        if opaque or member in _OPAQUE_MEMBERS:
            return "object"
        if member in _NAMED_MEMBERS:
            return {"*": _union(_skeleton(v) for v in value.values())} if value else {}
        if member == _HANDLERS:  # item name -> handler: both are the layout's vocabulary
            return {k: _skeleton(v, member=_HANDLERS) for k, v in sorted(value.items())}
        return {k: _skeleton(v, member=k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        if opaque or member in _OPAQUE_MEMBERS:
            return "array"
        return _union(_skeleton(v, member=member) for v in value)
    if isinstance(value, str):
        vocabulary = member in _VOCABULARY or member == _HANDLERS
        return f"string={value}" if vocabulary and not opaque else "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "null"


def _distinct(items: Iterable[Any]) -> list[Any]:
    """The distinct values of `items`, in the order of their canonical JSON."""
    seen = {json.dumps(item, sort_keys=True): item for item in items}
    return [seen[k] for k in sorted(seen)]


def _union(items: Iterable[Any]) -> list[Any]:
    """The distinct forms of `items`, merged where they can be: objects with the same keys
    become one (member by member), list forms one (their items' union); in the order of their
    canonical JSON. So a document's form does not depend on how many values it holds."""
    objects: dict[tuple[str, ...], dict[str, Any]] = {}
    lists: list[Any] | None = None
    scalars: dict[str, Any] = {}
    for item in items:
        if isinstance(item, dict):
            shape = tuple(sorted(item))
            held = objects.get(shape)
            objects[shape] = item if held is None else {k: _merge(held[k], item[k]) for k in shape}
        elif isinstance(item, list):
            lists = item if lists is None else _union(lists + item)
        else:
            scalars[json.dumps(item)] = item
    forms = [*objects.values(), *([lists] if lists is not None else []), *scalars.values()]
    return sorted(forms, key=lambda f: json.dumps(f, sort_keys=True))


def _merge(a: Any, b: Any) -> Any:
    """One form for two: equal forms are one; objects of the same keys and lists merge;
    anything else is both, as ``{"any_of": [...]}``."""
    if a == b:
        return a
    forms = _union([*_alternatives(a), *_alternatives(b)])
    return forms[0] if len(forms) == 1 else {"any_of": forms}


def _alternatives(form: Any) -> list[Any]:
    if isinstance(form, dict) and list(form) == ["any_of"]:
        return list(form["any_of"])
    return [form]


# ---------------------------------------------------------------------------------------------
# Comparing two fingerprints.


class Change:
    """One difference between two fingerprints: the JSON pointer where they differ, and the
    value on each side (None where a side has nothing there)."""

    __slots__ = ("pointer", "old", "new")

    def __init__(self, pointer: str, old: Any, new: Any) -> None:
        self.pointer, self.old, self.new = pointer, old, new

    def __repr__(self) -> str:
        return f"Change({self.pointer!r}, {self.old!r}, {self.new!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Change) and (self.pointer, self.old, self.new) == (
            other.pointer,
            other.old,
            other.new,
        )

    def text(self) -> str:
        if self.old is None:
            return f"added {self.pointer}: {json.dumps(self.new, sort_keys=True)}"
        if self.new is None:
            return f"removed {self.pointer}: {json.dumps(self.old, sort_keys=True)}"
        old, new = (json.dumps(v, sort_keys=True) for v in (self.old, self.new))
        return f"changed {self.pointer}: {old} -> {new}"

    def to_json(self) -> dict[str, Any]:
        return {"pointer": self.pointer, "old": self.old, "new": self.new}


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Where two fingerprints differ: objects member by member, sets of forms (a node's
    `_NODE_SETS`, the lists of ``ocdbt`` and every list in ``documents``) as added and removed
    forms, other lists (a zarr document's values) and scalars by value."""
    return list(_compare(old, new, "", "node"))


#: A node's members that are sets of forms, and how the members of each other member compare.
_NODE_SETS = frozenset({"files", "dtypes", "arrays", "codecs", "steps"})
_NODE_MEMBERS = {"items": "nodes", "documents": "sets", "ocdbt": "ocdbt"}


def _compare(old: Any, new: Any, pointer: str, mode: str) -> Iterator[Change]:
    """`mode`: ``node`` (a layout), ``nodes`` (items by name), ``sets`` (every list a set of
    forms), ``ocdbt`` (its lists are sets), ``value`` (lists in order), ``set`` (this list)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            at = f"{pointer}/{_escape(key)}"
            if key not in old:
                yield Change(at, None, new[key])
            elif key not in new:
                yield Change(at, old[key], None)
            else:
                yield from _compare(old[key], new[key], at, _member_mode(mode, key))
    elif isinstance(old, list) and isinstance(new, list) and mode in ("set", "sets", "ocdbt"):
        a = {json.dumps(v, sort_keys=True): v for v in old}
        b = {json.dumps(v, sort_keys=True): v for v in new}
        for key in sorted(set(a) - set(b)):
            yield Change(f"{pointer}/-", a[key], None)
        for key in sorted(set(b) - set(a)):
            yield Change(f"{pointer}/-", None, b[key])
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a_item, b_item) in enumerate(zip(old, new, strict=True)):
            yield from _compare(a_item, b_item, f"{pointer}/{i}", "value")
    elif old != new or type(old) is not type(new):
        yield Change(pointer, old, new)


def _member_mode(mode: str, key: str) -> str:
    if mode == "node":
        return "set" if key in _NODE_SETS else _NODE_MEMBERS.get(key, "value")
    if mode == "nodes":
        return "node"
    if mode == "sets":
        return "sets"
    if mode == "ocdbt":
        return "set" if key in ("keys", "process_databases") else "value"
    return "value"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
