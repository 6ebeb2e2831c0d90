"""A JSON view of OCDBT structures, shaped like ``tensorstore.ocdbt.dump()`` output.

`dump_manifest`, `dump_version_tree_node` and `dump_btree_node` return plain dicts with byte
strings for keys and inline values (as tensorstore does); `to_json` turns such a dict into
JSON-safe data (byte strings become ``{"base64": ...}``, or the text itself when it is printable
ASCII and `text=True`). A location is rendered
``<kind>:<base_path>:<relative_path>:<offset>:<length>``, where kind is ``btreenode``,
``versionnode`` or ``value``.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote_to_bytes

from .format import (
    BtreeGenerationReference,
    BtreeNode,
    BtreeNodeReference,
    BtreeNodeStatistics,
    Config,
    DataFileId,
    IndirectDataReference,
    InteriorNodeEntry,
    LeafNodeEntry,
    Manifest,
    VersionNodeReference,
    VersionTreeNode,
)

__all__ = [
    "location",
    "parse_location",
    "dump_manifest",
    "dump_version_tree_node",
    "dump_btree_node",
    "to_json",
]

#: The bytes a location keeps as they are; tensorstore percent-encodes every other byte
#: (``~`` too, which `urllib.parse.quote` never encodes).
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._/")


def _path(p: bytes) -> str:
    return "".join(chr(b) if b in _KEEP else f"%{b:02X}" for b in p)


def location(kind: str, ref: IndirectDataReference) -> str:
    """``<kind>:<base_path>:<relative_path>:<offset>:<length>`` (paths percent-encoded)."""
    f = ref.file_id
    return f"{kind}:{_path(f.base_path)}:{_path(f.relative_path)}:{ref.offset}:{ref.length}"


def parse_location(text: str) -> tuple[str, IndirectDataReference]:
    """Inverse of `location`."""
    kind, base, rel, offset, length = text.split(":")
    return kind, IndirectDataReference(
        DataFileId(unquote_to_bytes(base), unquote_to_bytes(rel)), int(offset), int(length)
    )


def _stats(s: BtreeNodeStatistics) -> dict:
    return {
        "num_indirect_value_bytes": s.num_indirect_value_bytes,
        "num_keys": s.num_keys,
        "num_tree_bytes": s.num_tree_bytes,
    }


def _node_ref(ref: BtreeNodeReference) -> dict:
    out: dict = {}
    if ref.location is not None:
        out["location"] = location("btreenode", ref.location)
    out["statistics"] = _stats(ref.statistics)
    return out


def _config(c: Config) -> dict:
    if c.compression is None:
        compression = None
    elif c.compression.level == 0:
        compression = {"id": "zstd"}
    else:
        compression = {"id": "zstd", "level": c.compression.level}
    return {
        "compression": compression,
        "max_decoded_node_bytes": c.max_decoded_node_bytes,
        "max_inline_value_bytes": c.max_inline_value_bytes,
        "uuid": c.uuid.hex(),
        "version_tree_arity_log2": c.version_tree_arity_log2,
    }


def _version(v: BtreeGenerationReference) -> dict:
    return {
        "commit_time": v.commit_time,
        "generation_number": v.generation_number,
        "root": _node_ref(v.root),
        "root_height": v.root_height,
    }


def _version_node_ref(v: VersionNodeReference) -> dict:
    return {
        "commit_time": v.commit_time,
        "generation_number": v.generation_number,
        "height": v.height,
        "location": location("versionnode", v.location),
        "num_generations": v.num_generations,
    }


def dump_manifest(m: Manifest) -> dict:
    return {
        "config": _config(m.config),
        "version_tree_nodes": [_version_node_ref(v) for v in m.version_tree_nodes],
        "versions": [_version(v) for v in m.versions],
    }


def dump_version_tree_node(n: VersionTreeNode) -> dict:
    if n.height == 0:
        entries = [_version(v) for v in n.entries]  # type: ignore[arg-type]
    else:
        entries = [_version_node_ref(v) for v in n.entries]  # type: ignore[arg-type]
    return {
        "entries": entries,
        "height": n.height,
        "version_tree_arity_log2": n.version_tree_arity_log2,
    }


def _leaf(e: LeafNodeEntry) -> dict:
    if isinstance(e.value, IndirectDataReference):
        return {"indirect_value": location("value", e.value), "key": e.key}
    return {"inline_value": e.value, "key": e.key}


def _interior(e: InteriorNodeEntry) -> dict:
    out = {"key": e.key}
    out.update(_node_ref(e.node))
    out["subtree_common_prefix"] = e.subtree_common_prefix
    return out


def dump_btree_node(n: BtreeNode) -> dict:
    if n.height == 0:
        entries = [_leaf(e) for e in n.entries]  # type: ignore[arg-type]
    else:
        entries = [_interior(e) for e in n.entries]  # type: ignore[arg-type]
    return {"entries": entries, "height": n.height}


def to_json(value: object, *, text: bool = True) -> object:
    """Make a dump JSON-safe: bytes become text (printable ASCII) or ``{"base64": ...}``."""
    if isinstance(value, bytes):
        if text and all(0x20 <= b < 0x7F for b in value):
            return value.decode("ascii")
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {k: to_json(v, text=text) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, text=text) for v in value]
    return value
