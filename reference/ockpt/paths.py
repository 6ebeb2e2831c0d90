"""Key paths: the one place that maps tree positions to the names the format stores.

A leaf's position is a *key path*: a tuple of `KeyEntry` (key text + key type). The format
derives three names from it:

* the **tree key** of `_METADATA` (`tree_key`): Python's repr of the tuple of key texts;
* the **param name** (`param_name`): key texts joined with ``.``, no escaping, which names the
  array in OCDBT / zarr (`<param name>/.zarray`) and in `array_metadatas`;
* the **sharding key** (`sharding_key`): URL-safe base64 of the param name, in `_sharding`;
* the **string pointer** (`strings_pointer`): ``"/" + param name``, no escaping, in
  `_strings.json`, so a ``/`` inside a key nests objects there.

Because no escaping is applied, different key paths can produce the same or overlapping names;
`find_collisions` finds them and writers refuse such trees.
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import DocumentError, FormatError
from .names import METADATA_FILE, SHARDING_FILE

__all__ = [
    "KeyType",
    "KeyEntry",
    "KeyPath",
    "SEQUENCE_INDEX",
    "EmptyNode",
    "param_name",
    "tree_key",
    "sharding_key",
    "decode_sharding_key",
    "strings_pointer",
    "array_prefix",
    "find_collisions",
    "check_param_names",
    "flatten",
    "unflatten",
    "unsafe_path",
    "check_relative",
]


class KeyType(enum.IntEnum):
    """`key_type` of `_METADATA`'s `key_metadata`."""

    SEQUENCE = 1  # index into a list, tuple or keyless custom node
    DICT = 2  # dict key or named field


@dataclass(frozen=True)
class KeyEntry:
    """One step of a key path: its text as stored and its kind."""

    key: str
    key_type: KeyType

    def __post_init__(self) -> None:
        if self.key_type is KeyType.SEQUENCE and not SEQUENCE_INDEX.fullmatch(self.key):
            raise ValueError(f"sequence index must be a decimal integer, got {self.key!r}")


KeyPath = tuple[KeyEntry, ...]

#: The text of a sequence index key: a decimal integer without leading zeros.
SEQUENCE_INDEX = re.compile(r"0|[1-9][0-9]*")


class EmptyNode(enum.Enum):
    """Value types of leaves that stand for an empty container or None."""

    DICT = "Dict"
    LIST = "List"
    TUPLE = "Tuple"
    NONE = "None"
    NAMED_TUPLE = "NamedTuple"


def _texts(path: KeyPath | Sequence[str]) -> tuple[str, ...]:
    return tuple(e.key if isinstance(e, KeyEntry) else e for e in path)


def param_name(path: KeyPath | Sequence[str]) -> str:
    """The param name: key texts joined with ``.`` (the empty path gives ``""``)."""
    return ".".join(_texts(path))


def tree_key(path: KeyPath | Sequence[str]) -> str:
    """The `_METADATA` tree key: Python's ``repr`` of the tuple of key texts."""
    return repr(_texts(path))


def sharding_key(name: str) -> str:
    """The `_sharding` key of a param name: URL-safe base64 with ``=`` padding."""
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii")


_B64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def decode_sharding_key(key: str, *, file: str = SHARDING_FILE) -> str:
    """Invert `sharding_key`, strictly: canonical padded URL-safe base64 of UTF-8."""
    if not _B64URL.fullmatch(key) or len(key) % 4:
        raise DocumentError(
            "not padded URL-safe base64", rule="SHARD-001", file=file, pointer="/" + key
        )
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
        name = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as e:
        raise DocumentError(
            f"undecodable key: {e}", rule="SHARD-001", file=file, pointer="/" + key
        ) from None
    if sharding_key(name) != key:
        raise DocumentError(
            "non-canonical base64",
            rule="SHARD-001",
            file=file,
            pointer="/" + key,
            expected=sharding_key(name),
            got=key,
        )
    return name


def strings_pointer(name: str) -> str:
    """The JSON pointer of a string leaf in `_strings.json`: ``"/" + name``, unescaped.

    A ``~`` in the name does not form a valid pointer; writers refuse it (PATH-002).
    """
    return "/" + name


def array_prefix(name: str, *, per_leaf: bool = False) -> str:
    """Where a param's array keys start: ``<name>/`` in OCDBT (``<name>`` when it already ends
    with ``/``, as tensorstore joins paths; ``""`` for the empty name). A per-leaf directory
    name loses its leading and trailing ``/`` first.
    """
    if per_leaf:
        name = name.strip("/")
    if not name:
        return ""
    return name if name.endswith("/") else name + "/"


def unsafe_path(name: str, *, absolute_ok: bool = False) -> str | None:
    """Why `name` (a param name used as a directory, a file name) may not name a path inside a
    checkpoint, or None when it may (PATH-003): it must hold no NUL and no ``..`` segment
    between its ``/``, and must not begin with ``/`` unless `absolute_ok` (a per-leaf param
    name, which is joined to the item with leading and trailing ``/`` dropped, as Orbax does).
    Empty and ``.`` segments add nothing and are allowed (Orbax writes ``a/`` for the key
    ``a/``)."""
    if "\0" in name:
        return "NUL byte in path"
    if name.startswith("/") and not absolute_ok:
        return "absolute path"
    if ".." in name and ".." in name.split("/"):
        return "'..' path segment"
    return None


def check_relative(name: str, *, file: str | None = None, absolute_ok: bool = False) -> None:
    """Raise PATH-003 when `unsafe_path` rejects `name`."""
    why = unsafe_path(name, absolute_ok=absolute_ok)
    if why is not None:
        raise FormatError(
            f"{why}: {name!r} would leave the checkpoint", rule="PATH-003", file=file, got=name
        )


def find_collisions(names: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of param names that cannot live side by side in one item.

    Two names collide when they are equal, or when one is a ``/``-prefix of the other
    (``a`` and ``a/b``): the second's keys then nest inside the first's, in OCDBT, in per-leaf
    zarr directories and in `_strings.json`.
    """
    seen: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    ordered = sorted(names)
    for name in ordered:
        if name in seen:
            out.append((name, name))
        seen[name] = name
    for name in ordered:
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in seen:
                out.append((prefix, name))
    return out


def check_param_names(paths: Iterable[KeyPath], *, string_leaves: Iterable[KeyPath] = ()) -> None:
    """Refuse key paths whose names collide or whose string pointers are invalid."""
    by_name: dict[str, list[KeyPath]] = {}
    for path in paths:
        by_name.setdefault(param_name(path), []).append(path)
    for name, group in by_name.items():
        if len(group) > 1:
            shown = " and ".join(repr(_texts(p)) for p in group[:2])
            raise FormatError(
                f"key paths {shown} share the param name {name!r}", rule="PATH-001", pointer=name
            )
    for a, b in find_collisions(by_name):
        if a != b:
            raise FormatError(
                f"param name {b!r} nests inside param name {a!r}", rule="PATH-001", pointer=b
            )
    for path in string_leaves:
        name = param_name(path)
        if "~" in name:
            raise FormatError(
                f"string leaf {name!r}: '~' cannot appear in its JSON pointer",
                rule="PATH-002",
                pointer=name,
            )


# ---------------------------------------------------------------------------------------------
# Plain Python trees: dict / list / tuple / NamedTuple / None.


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _sorted_keys(node: Mapping[Any, Any]) -> list[str]:
    """Dict keys as text, in the order of the keys themselves (text order if incomparable)."""
    try:
        keys = sorted(node)
    except TypeError:
        keys = sorted(node, key=str)
    return [str(k) for k in keys]


def flatten(tree: Any) -> Iterator[tuple[KeyPath, Any]]:
    """Walk a tree of dicts, lists, tuples and NamedTuples in the format's key order.

    Yields (key path, leaf). Empty containers and None are leaves, given as `EmptyNode`
    members; dict keys are turned into text with `str` and visited in sorted key order, as
    JAX's tree utilities visit them.
    """
    stack: list[tuple[KeyPath, Any]] = [((), tree)]
    while stack:
        path, node = stack.pop()
        children: list[tuple[KeyEntry, Any]]
        if node is None:
            yield path, EmptyNode.NONE
            continue
        if isinstance(node, Mapping):
            if not node:
                yield path, EmptyNode.DICT
                continue
            keyed = {}
            for k in node:
                text = str(k)
                if text in keyed:
                    raise FormatError(
                        f"two dict keys both read {text!r}",
                        rule="PATH-001",
                        pointer=param_name(_texts(path) + (text,)),
                    )
                keyed[text] = node[k]
            children = [(KeyEntry(t, KeyType.DICT), keyed[t]) for t in _sorted_keys(node)]
        elif _is_namedtuple(node):
            if not node:
                yield path, EmptyNode.NAMED_TUPLE
                continue
            children = [(KeyEntry(f, KeyType.DICT), getattr(node, f)) for f in node._fields]
        elif isinstance(node, (list, tuple)):
            if not node:
                yield path, EmptyNode.LIST if isinstance(node, list) else EmptyNode.TUPLE
                continue
            children = [(KeyEntry(str(i), KeyType.SEQUENCE), v) for i, v in enumerate(node)]
        else:
            yield path, node
            continue
        for entry, value in reversed(children):
            stack.append((path + (entry,), value))


_EMPTY_VALUES = {
    EmptyNode.DICT: dict,
    EmptyNode.LIST: list,
    EmptyNode.TUPLE: tuple,
    EmptyNode.NAMED_TUPLE: tuple,
    EmptyNode.NONE: lambda: None,
}


def unflatten(entries: Iterable[tuple[KeyPath, Any]], *, file: str = METADATA_FILE) -> Any:
    """Build nested dicts and lists from (key path, leaf) pairs.

    DICT keys make dicts, SEQUENCE keys make lists (the format does not record list versus
    tuple). `EmptyNode` leaves become empty containers / None. Raises `DocumentError` (META-006)
    when paths disagree on a node's kind, repeat, or leave holes in a sequence.
    """
    root: dict[str, Any] = {}
    kinds: dict[tuple[str, ...], KeyType] = {}
    leaf_paths: set[tuple[str, ...]] = set()
    have_any = False
    for path, value in entries:
        texts = _texts(path)
        if not path:
            if have_any:
                raise DocumentError("a root leaf beside other entries", rule="META-006", file=file)
            have_any = True
            leaf_paths.add(())
            root = {"": _leaf(value)}
            continue
        if () in leaf_paths:
            raise DocumentError("a root leaf beside other entries", rule="META-006", file=file)
        have_any = True
        node = root
        for depth, entry in enumerate(path):
            prefix = texts[:depth]
            known = kinds.setdefault(prefix, entry.key_type)
            if known is not entry.key_type:
                raise DocumentError(
                    f"node {tree_key(prefix)} has keys of both key types",
                    rule="META-006",
                    file=file,
                    pointer=tree_key(texts),
                )
            if depth == len(path) - 1:
                if entry.key in node or texts in kinds:
                    raise DocumentError(
                        f"key path {tree_key(texts)} appears twice or holds children",
                        rule="META-006",
                        file=file,
                        pointer=tree_key(texts),
                    )
                node[entry.key] = _leaf(value)
                leaf_paths.add(texts)
            else:
                if texts[: depth + 1] in leaf_paths:
                    raise DocumentError(
                        f"{param_name(texts[: depth + 1])!r} is both a leaf and a node",
                        rule="META-006",
                        file=file,
                        pointer=tree_key(texts[: depth + 1]),
                    )
                node = node.setdefault(entry.key, {})
    if () in leaf_paths:
        return _materialize(root[""], (), kinds, file)
    return _materialize(root, (), kinds, file)


def _leaf(value: Any) -> Any:
    if isinstance(value, EmptyNode):
        return _EmptyMarker(value)
    return value


@dataclass(frozen=True)
class _EmptyMarker:
    node: EmptyNode


def _materialize(
    node: Any, prefix: tuple[str, ...], kinds: Mapping[tuple[str, ...], KeyType], file: str
) -> Any:
    if isinstance(node, _EmptyMarker):
        return _EMPTY_VALUES[node.node]()
    if not isinstance(node, dict) or prefix not in kinds:
        return node
    if kinds[prefix] is KeyType.DICT:
        return {k: _materialize(v, prefix + (k,), kinds, file) for k, v in node.items()}
    indices = sorted(int(k) for k in node)
    if indices != list(range(len(indices))):
        raise DocumentError(
            f"sequence {tree_key(prefix)} has indices {indices}, not 0..n-1",
            rule="META-006",
            file=file,
            pointer=tree_key(prefix),
        )
    return [_materialize(node[str(i)], prefix + (str(i),), kinds, file) for i in indices]
