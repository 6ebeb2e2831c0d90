"""The saved tree of a pytree item: what `_METADATA` and the legacy msgpack file say was saved.

One model for the reader and the validator (spec/directories.md §3, spec/loading.md §3): nodes
(`Node`), empty containers and None (`Empty`), and leaves (`SavedLeaf`) that say where each
value lives: an array named by its param name, a string of the strings document, or a value
inline in the msgpack file. Pure functions of the parsed documents; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .documents.metadata import MetadataDocument
from .errors import FormatError
from .msgpack_legacy import Placeholder
from .paths import EmptyNode, KeyPath, KeyType, find_collisions, param_name

__all__ = [
    "Node",
    "Empty",
    "SavedLeaf",
    "Source",
    "EMPTY_VALUES",
    "from_metadata",
    "from_msgpack",
    "leaves",
    "by_param_name",
    "ordered",
    "node_at",
    "entries",
    "lookup",
    "placeholder_names",
]

#: Where a leaf's value lives.
Source = Literal["array", "string", "inline"]


@dataclass(slots=True)
class Node:
    """A dict-like (`KeyType.DICT`) or sequence (`KeyType.SEQUENCE`) node."""

    kind: KeyType
    children: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Empty:
    """An empty container or None, as saved."""

    node: EmptyNode


@dataclass(frozen=True, slots=True)
class SavedLeaf:
    """One leaf: its key texts, the param name its value is stored under, its value type,
    where the value lives, the inline value, and `_METADATA`'s write shape."""

    path: tuple[str, ...]
    param_name: str
    value_type: str
    source: Source
    inline: Any = None
    write_shape: tuple[int, ...] | None = None


EMPTY_VALUES: Mapping[EmptyNode, Callable[[], Any]] = {
    EmptyNode.DICT: dict,
    EmptyNode.LIST: list,
    EmptyNode.TUPLE: tuple,
    EmptyNode.NAMED_TUPLE: tuple,
    EmptyNode.NONE: lambda: None,
}


def _insert(root: Node, path: KeyPath, value: Any) -> Any:
    if not path:
        return value
    node = root
    for entry in path[:-1]:
        if not node.children:
            node.kind = entry.key_type
        child = node.children.get(entry.key)
        if not isinstance(child, Node):
            child = node.children[entry.key] = Node(KeyType.DICT)
        node = child
    last = path[-1]
    if not node.children:
        node.kind = last.key_type
    node.children[last.key] = value
    return root


def from_metadata(
    doc: MetadataDocument, msgpack: Any = None, *, msgpack_unreadable: bool = False
) -> Any:
    """The saved tree of `_METADATA`, with the msgpack file (releases up to 0.5.15) saying
    which leaves are placeholders (their param name) and which are inline (directories §3).
    `msgpack_unreadable`: the item has a msgpack file that could not be decoded; a leaf that
    `skip_deserialize` marks as inline is then inline (its value unknown)."""
    root = Node(KeyType.DICT)
    result: Any = root
    parent: tuple[KeyPath, Node] | None = None  # the last entry's parent path and node
    for entry in doc.entries:
        texts = tuple([e.key for e in entry.path])  # a list: faster
        empty = entry.value.empty_node
        value: Any
        if empty is not None:
            value = Empty(empty)
        else:
            value = _leaf_of_entry(
                texts,
                entry.value.value_type,
                entry.value.write_shape,
                msgpack,
                inline=msgpack_unreadable and entry.value.skip_deserialize is True,
            )
        path = entry.path
        if len(path) > 1 and parent is not None and parent[0] == path[:-1]:
            node, last = parent[1], path[-1]  # a sibling of the last entry: no walk from the root
            if not node.children:
                node.kind = last.key_type
            node.children[last.key] = value
            continue
        result = _insert(root, path, value)
        if len(path) > 1:
            parent = (path[:-1], _node_at(root, path[:-1]))
    return result


def _node_at(root: Node, path: KeyPath) -> Node:
    """The node `_insert` has made at `path` (every step a node)."""
    node = root
    for entry in path:
        node = node.children[entry.key]
    return node


def _leaf_of_entry(
    texts: tuple[str, ...],
    value_type: str,
    write_shape: tuple[int, ...] | None,
    msgpack: Any,
    *,
    inline: bool,
) -> SavedLeaf:
    name = ".".join(texts)  # `param_name`
    shape = None if write_shape is None else tuple(write_shape)
    if msgpack is not None:
        found, value = lookup(msgpack, texts)
        if found and isinstance(value, Placeholder):
            source: Source = "string" if value_type == "string" else "array"
            return SavedLeaf(texts, value.param_name, value_type, source, None, shape)
        if found and not isinstance(value, (dict, list)):
            return SavedLeaf(texts, name, value_type, "inline", value, shape)
    if inline:
        return SavedLeaf(texts, name, value_type, "inline", None, shape)
    source = "string" if value_type == "string" else "array"
    return SavedLeaf(texts, name, value_type, source, None, shape)


def from_msgpack(node: Any, string_names: Iterable[str], texts: tuple[str, ...] = ()) -> Any:
    """The saved tree of a msgpack file alone (no `_METADATA`): placeholders are arrays, or
    strings when `string_names` (the strings document's names) holds their param name."""
    names = string_names if isinstance(string_names, (set, frozenset)) else set(string_names)
    if isinstance(node, dict):
        if not node:
            return Empty(EmptyNode.DICT)
        return Node(
            KeyType.DICT,
            {str(k): from_msgpack(v, names, texts + (str(k),)) for k, v in node.items()},
        )
    if isinstance(node, (list, tuple)):
        if not node:
            return Empty(EmptyNode.LIST if isinstance(node, list) else EmptyNode.TUPLE)
        return Node(
            KeyType.SEQUENCE,
            {str(i): from_msgpack(v, names, texts + (str(i),)) for i, v in enumerate(node)},
        )
    if node is None:
        return Empty(EmptyNode.NONE)
    if isinstance(node, Placeholder):
        if node.param_name in names:
            return SavedLeaf(texts, node.param_name, "string", "string")
        return SavedLeaf(texts, node.param_name, "array", "array")
    return SavedLeaf(texts, param_name(texts), "inline", "inline", node)


def leaves(node: Any) -> Iterator[SavedLeaf]:
    """Every leaf of a saved tree, in the tree's order: one generator, with a stack of the
    nodes entered (not a generator per node that each leaf passes through)."""
    if isinstance(node, SavedLeaf):
        yield node
        return
    if not isinstance(node, Node):
        return
    stack = [iter(node.children.values())]
    while stack:
        for child in stack[-1]:
            if isinstance(child, Node):
                stack.append(iter(child.children.values()))
                break
            if isinstance(child, SavedLeaf):
                yield child
        else:
            stack.pop()


def by_param_name(found: Iterable[SavedLeaf], *, file: str) -> dict[str, SavedLeaf]:
    """Leaves keyed by param name; colliding names are refused (PATH-001): each would read
    the other's data."""
    out: dict[str, SavedLeaf] = {}
    for leaf in found:
        if leaf.param_name in out:
            raise FormatError(
                f"two leaves share the param name {leaf.param_name!r}",
                rule="PATH-001",
                file=file,
                pointer=leaf.param_name,
            )
        out[leaf.param_name] = leaf
    for outer, inner in find_collisions(out):
        raise FormatError(
            f"param name {inner!r} nests inside param name {outer!r}",
            rule="PATH-001",
            file=file,
            pointer=inner,
        )
    return out


def ordered(node: Node) -> list[tuple[str, Any]]:
    """A node's children in their saved order (sequence indices numerically)."""
    if node.kind is KeyType.SEQUENCE:
        return sorted(node.children.items(), key=lambda kv: int(kv[0]))
    return list(node.children.items())


def node_at(tree: Any, texts: tuple[str, ...]) -> Any:
    """The node, `Empty` or leaf of a saved tree at the key texts `texts`, or None."""
    node = tree
    for t in texts:
        if not isinstance(node, Node) or t not in node.children:
            return None
        node = node.children[t]
    return node


def entries(node: Any, texts: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(key texts, leaf or `Empty`) of every entry of a saved tree, in its saved order; the
    key texts are relative to `node`, prefixed by `texts`."""
    if isinstance(node, Node):
        for key, child in ordered(node):
            yield from entries(child, texts + (key,))
    else:
        yield texts, node


def lookup(tree: Any, texts: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) at the key texts `texts` of a decoded msgpack tree."""
    node = tree
    for t in texts:
        if isinstance(node, dict) and t in node:
            node = node[t]
        elif isinstance(node, (list, tuple)) and t.isdigit() and int(t) < len(node):
            node = node[int(t)]
        else:
            return False, None
    return True, node


def placeholder_names(node: Any) -> Iterator[str]:
    """The param names of every placeholder in a decoded msgpack tree, in the tree's order
    (the file's: map entries as written, which is JAX's sorted-key order; items by index)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, Placeholder):
            yield node.param_name
        elif isinstance(node, dict):
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
