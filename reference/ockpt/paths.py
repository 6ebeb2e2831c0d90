"""Key paths: the one place that maps tree positions to the names the format stores.

A leaf's position is a *key path*: a tuple of `KeyEntry` (key text + key type). The format
derives three names from it:

* the **tree key** of `_METADATA` (`tree_key`): Python's repr of the tuple of key texts;
* the **param name** (`param_name`): key texts joined with ``.``, no escaping, which names the
  array in OCDBT / zarr (`<param name>/.zarray`) and in `array_metadatas`;
* the **sharding key** (`sharding_key`): URL-safe base64 of the param name, in `_sharding`;
* the **string pointer** (`strings_pointer`): ``"/" + param name``, no escaping, in
  `_strings.json`, so a ``/`` inside a key nests objects there.

Users and the tools name a leaf or subtree by its **leaf name** (`leaf_name`,
`parse_leaf_name`): key texts joined with ``/``, escaped so that every key path has exactly
one; `resolve_name` finds what a name (or a param name, or a tuple of key texts) denotes and
`LeafPattern` selects leaves by glob.

Because no escaping is applied, different key paths can produce the same or overlapping names;
`find_collisions` finds them and writers refuse such trees.
"""

from __future__ import annotations

import base64
import difflib
import enum
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from .errors import DocumentError, FormatError, LeafNameError
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
    "nest",
    "unflatten",
    "unsafe_path",
    "check_relative",
    "leaf_name",
    "printable",
    "parse_leaf_name",
    "key_texts",
    "resolve_name",
    "name_not_found",
    "LeafPattern",
    "select_paths",
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
    return tuple([e.key if isinstance(e, KeyEntry) else e for e in path])  # a list: faster


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
    raw = base64.urlsafe_b64decode(key.encode("ascii"))  # every key the pattern passes decodes
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError as e:
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
    listed = names if isinstance(names, (Mapping, Set)) else list(names)
    seen = listed if isinstance(listed, (Mapping, Set)) else set(listed)
    out: list[tuple[str, str]] = []
    if len(seen) < len(listed):  # a name twice: a pair per repeat, in name order
        counts = Counter(listed)
        out = [(n, n) for n in sorted(counts) for _ in range(counts[n] - 1)]
    # only a name holding "/" has prefixes to look up: most names are not sorted at all
    for name in sorted(n for n in listed if "/" in n):
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in seen:
                out.append((prefix, name))
    return out


def check_param_names(
    paths: Sequence[KeyPath],
    *,
    string_leaves: Iterable[KeyPath] = (),
    names: Sequence[str] | None = None,
) -> None:
    """Refuse key paths whose names collide or whose string pointers are invalid. `names`:
    the param names of `paths`, where the caller has made them already."""
    if names is None:
        names = [param_name(path) for path in paths]
    by_name = dict(zip(names, paths, strict=True))
    if len(by_name) < len(paths):
        groups: dict[str, list[KeyPath]] = {}
        for name, path in zip(names, paths, strict=True):
            groups.setdefault(name, []).append(path)
        for name, group in groups.items():
            if len(group) > 1:
                shown = " and ".join(repr(_texts(p)) for p in group[:2])
                raise FormatError(
                    f"key paths {shown} share the param name {name!r}",
                    rule="PATH-001",
                    pointer=name,
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
# Leaf names (spec/key-paths.md §7).

#: The leaf name of the empty key text (a whole key).
EMPTY_KEY = "\\e"


class _Wild(enum.Enum):
    """What a pattern segment holds besides literal characters."""

    STAR = "*"  # any run of characters within one key
    ONE = "?"  # one character
    DEEP = "**"  # a whole segment: any number of keys
    EMPTY = EMPTY_KEY  # a whole segment: the empty key text


def _escape_key(text: str) -> str:
    if not text:
        return EMPTY_KEY
    return text.replace("\\", "\\\\").replace("/", "\\/")


def printable(text: str) -> str:
    """`text` for one line of a terminal: every character that is not printable (controls,
    line and paragraph separators, bidirectional and other format characters) written as its
    Python escape (``\\x1b``, ``\\u2028``), so a name from a checkpoint cannot move the
    cursor, colour the output or forge a line. A leaf name's own backslashes are escaped
    already (`leaf_name`), so the escapes cannot be mistaken for its text."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def leaf_name(path: KeyPath | Sequence[str]) -> str:
    """The leaf name of a key path: its key texts joined with ``/``, each ``\\`` and ``/`` in a
    key text escaped with ``\\``, the empty key text written ``\\e``; the empty path (a tree
    that is a single leaf) is ``""``."""
    return "/".join(_escape_key(t) for t in _texts(path))


def _malformed(text: str, why: str, *, pattern: bool) -> LeafNameError:
    what = "selection pattern" if pattern else "leaf name"
    return LeafNameError(f"malformed {what} {text!r}: {why}", rule="PATH-006", name=text)


def _segments(text: str, *, pattern: bool) -> list[list[Any]]:
    """The segments of a leaf name (or pattern): lists of literal characters and `_Wild`s."""
    if not text:
        return []
    escapes = "\\/*?" if pattern else "\\/"
    segments: list[list[Any]] = [[]]
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt and nxt in escapes:
                segments[-1].append(nxt)
            elif nxt == "e":
                segments[-1].append(_Wild.EMPTY)
            else:
                allowed = ", ".join("\\" + e for e in escapes + "e")
                bad = repr("\\" + nxt)
                raise _malformed(
                    text, f"{bad} at {i} is not an escape ({allowed})", pattern=pattern
                )
            i += 2
            continue
        if c == "/":
            segments.append([])
        elif pattern and c in "*?":
            segments[-1].append(_Wild.STAR if c == "*" else _Wild.ONE)
        else:
            segments[-1].append(c)
        i += 1
    for seg in segments:
        if not seg:
            raise _malformed(text, "an empty key (write an empty key text as \\e)", pattern=pattern)
        if _Wild.EMPTY in seg and len(seg) > 1:
            raise _malformed(text, "\\e stands for a whole key", pattern=pattern)
    return segments


def parse_leaf_name(name: str) -> tuple[str, ...]:
    """The key texts of a leaf name (the inverse of `leaf_name`). Raises `LeafNameError`
    (PATH-006) for a ``\\`` other than ``\\\\``, ``\\/`` and a whole key ``\\e``, and for an
    empty segment (``a//b``, ``a/``)."""
    return tuple(
        "" if seg == [_Wild.EMPTY] else "".join(seg) for seg in _segments(name, pattern=False)
    )


def key_texts(keys: Sequence[Any]) -> tuple[str, ...]:
    """A key path given as a sequence of keys (str, int or `KeyEntry`) as key texts."""
    out = []
    for k in keys:
        if isinstance(k, KeyEntry):
            out.append(k.key)
        elif isinstance(k, str):
            out.append(k)
        elif isinstance(k, int) and not isinstance(k, bool):
            out.append(str(k))
        else:
            raise TypeError(f"a key path holds str and int keys, not {type(k).__name__}: {k!r}")
    return tuple(out)


#: Above this many names, an unknown name gets no close-match search (it would be slow).
_MAX_CLOSE_CANDIDATES = 20_000


def name_not_found(
    name: str,
    names: Iterable[str],
    *,
    file: object = None,
    exists: Callable[[tuple[str, ...]], bool] | None = None,
    what: str = "no leaf or subtree named",
) -> LeafNameError:
    """The error (PATH-007) for a name that denotes nothing, suggesting close names: the leaf
    name a param name's ``.`` -> ``/`` gives where `exists`, and near spellings."""
    close: list[str] = []
    if exists is not None and "." in name:
        try:
            guess = parse_leaf_name(name.replace(".", "/"))
        except LeafNameError:
            guess = None
        if guess is not None and exists(guess):
            close.append(leaf_name(guess))
    candidates = list(names)
    if len(candidates) <= _MAX_CLOSE_CANDIDATES:
        for c in difflib.get_close_matches(name, candidates, n=3):
            if c not in close:
                close.append(c)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return LeafNameError(
        f"{what} {name!r}{hint}", rule="PATH-007", name=name, file=file, close=tuple(close)
    )


def resolve_name(
    name: str | int | Sequence[Any],
    *,
    exists: Callable[[tuple[str, ...]], bool],
    param_names: Callable[[], Mapping[str, tuple[str, ...]]],
    names: Callable[[], Iterable[str]],
    file: object = None,
) -> tuple[str, ...]:
    """The key path a name denotes (§7.3): a tuple of keys (or one int key) as given; a
    string as a leaf name when it is one and `exists`, else as a param name (a key of
    `param_names()`). Raises `LeafNameError`: PATH-006 when it is neither a leaf name nor a
    param name, PATH-007 when it names nothing (with close matches from `names()`)."""
    if not isinstance(name, str):
        if isinstance(name, (int, KeyEntry)):
            keys: Sequence[Any] = (name,)
        elif isinstance(name, (tuple, list)):
            keys = name
        else:
            raise TypeError(f"a name is a str, an int or a tuple of keys, not {name!r}")
        texts = key_texts(keys)
        if exists(texts):
            return texts
        raise name_not_found(leaf_name(texts), names(), file=file)
    malformed: LeafNameError | None = None
    try:
        texts = parse_leaf_name(name)
    except LeafNameError as e:
        malformed = e
    else:
        if exists(texts):
            return texts
    by_param = param_names()
    if name in by_param:
        return by_param[name]
    if malformed is not None:
        raise LeafNameError(malformed.message, rule="PATH-006", name=name, file=file)
    raise name_not_found(name, names(), file=file, exists=exists)


@dataclass(frozen=True)
class _Glob:
    """One key of a pattern with ``*`` and ``?`` (characters and `_Wild` tokens). Matching
    backtracks only to the last ``*`` seen, so it takes at most len(text) x len(tokens) steps
    (a regular expression backtracks without bound on a hostile 64 KiB key)."""

    tokens: tuple[Any, ...]

    def fullmatch(self, text: str) -> bool:
        t = p = 0
        star = -1  # the token index after the last `*`, and where in `text` it began
        mark = 0
        n = len(self.tokens)
        while t < len(text):
            tok = self.tokens[p] if p < n else None
            if tok is _Wild.STAR:
                star, mark, p = p + 1, t, p + 1
            elif tok is _Wild.ONE or (tok is not None and tok == text[t]):
                t, p = t + 1, p + 1
            elif star >= 0:  # let the last `*` take one more character
                mark += 1
                t, p = mark, star
            else:
                return False
        return all(tok is _Wild.STAR for tok in self.tokens[p:])


@dataclass(frozen=True)
class LeafPattern:
    """A selection pattern (§7.4): a leaf name whose keys may hold ``*`` (any characters
    within one key) and ``?`` (one character), and whose segment ``**`` stands for any number
    of keys. It selects a leaf when it matches the leaf's key path or a prefix of it (a
    subtree selects its leaves)."""

    text: str
    segments: tuple[Any, ...]  # per key: its text, a `_Glob`, or _Wild.DEEP

    @classmethod
    def parse(cls, text: str) -> LeafPattern:
        """Compile a pattern; `LeafNameError` (PATH-006) when malformed."""
        out: list[Any] = []
        for seg in _segments(text, pattern=True):
            if seg == [_Wild.STAR, _Wild.STAR]:
                out.append(_Wild.DEEP)
            elif seg == [_Wild.EMPTY]:
                out.append("")
            elif any(isinstance(c, _Wild) for c in seg):
                out.append(_Glob(tuple(seg)))
            else:
                out.append("".join(seg))
        return cls(text, tuple(out))

    @property
    def literal(self) -> tuple[str, ...] | None:
        """The key path the pattern names when it has no wildcard, else None."""
        if all(isinstance(s, str) for s in self.segments):
            return tuple(self.segments)
        return None

    def matches(self, path: KeyPath | Sequence[str]) -> bool:
        """Whether the pattern matches the key path `path` or a prefix of it."""
        end = len(self.segments)
        states = self._closure({0})
        for text in _texts(path):
            if end in states:
                return True
            step = set()
            for i in states:  # end is not among them: it returned above
                seg = self.segments[i]
                if seg is _Wild.DEEP:
                    step.add(i)
                elif (seg == text) if isinstance(seg, str) else seg.fullmatch(text):
                    step.add(i + 1)
            if not step:
                return False
            states = self._closure(step)
        return end in states

    def _closure(self, states: set[int]) -> set[int]:
        """`states` plus the states a ``**`` matching no key reaches."""
        out = set(states)
        todo = list(states)
        while todo:
            i = todo.pop()
            if i < len(self.segments) and self.segments[i] is _Wild.DEEP and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return out


def select_paths(
    patterns: Sequence[str], paths: Sequence[Sequence[str]], *, file: object = None
) -> list[int]:
    """The indices of the key paths (of leaves) that any of `patterns` selects (§7.4), in
    order. A pattern that selects nothing but is the param name of a path selects that path.
    Raises `LeafNameError`: PATH-006 for a malformed pattern, PATH-007 for one that selects
    nothing (with close matches)."""
    keys = [tuple(p) for p in paths]
    chosen: set[int] = set()
    for text in patterns:
        malformed: LeafNameError | None = None
        try:
            pattern = LeafPattern.parse(text)
        except LeafNameError as e:
            malformed, hits = e, []
        else:
            hits = [i for i, key in enumerate(keys) if pattern.matches(key)]
        if not hits:
            hits = [i for i, key in enumerate(keys) if param_name(key) == text]
        if not hits and malformed is not None:
            raise LeafNameError(malformed.message, rule="PATH-006", name=text, file=file)
        if not hits:
            nodes = {key[:n] for key in keys for n in range(len(key) + 1)}
            raise name_not_found(
                text,
                (leaf_name(key) for key in keys),
                file=file,
                exists=nodes.__contains__,
                what="no leaf matches the pattern",
            )
        chosen.update(hits)
    return sorted(chosen)


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


def nest(items: Iterable[tuple[Sequence[str], Any]], *, sep: str = "/") -> dict[str, Any]:
    """The dict tree of (key path, value) pairs: ``(("a", "b"), v)`` -> ``{"a": {"b": v}}``,
    for flat sources (a safetensors file, a torch state dict). A key path with an empty part, a
    repeated one, or two where one would hold the other (``a`` and ``a<sep>b``) is a
    ValueError naming them, joined with `sep`."""
    tree: dict[str, Any] = {}
    for key, value in items:
        joined = sep.join(key)
        if not key or "" in key:
            raise ValueError(f"key {joined!r} has an empty {sep!r}-separated part")
        node = tree
        for depth, part in enumerate(key[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                other = sep.join(key[: depth + 1])
                raise ValueError(f"keys {other!r} and {joined!r} collide: one would hold the other")
            node = child
        if key[-1] in node:
            what = "a leaf and a subtree" if isinstance(node[key[-1]], dict) else "repeated"
            raise ValueError(f"key {joined!r} is {what}: one would hold the other")
        node[key[-1]] = value
    return tree


def flatten(tree: Any) -> Iterator[tuple[KeyPath, Any]]:
    """Walk a tree of dicts, lists, tuples and NamedTuples in the format's key order.

    Yields (key path, leaf). Empty containers and None are leaves, given as `EmptyNode`
    members; dict keys are turned into text with `str` and visited in sorted key order, as
    JAX's tree utilities visit them.
    """
    stack: list[tuple[KeyPath, Any]] = [((), tree)]
    made: dict[tuple[str, KeyType], KeyEntry] = {}  # one entry per key (immutable): shared

    def key_entry(text: str, kind: KeyType) -> KeyEntry:
        found = made.get((text, kind))
        if found is None:
            found = made[(text, kind)] = KeyEntry(text, kind)
        return found

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
            children = [(key_entry(t, KeyType.DICT), keyed[t]) for t in _sorted_keys(node)]
        elif _is_namedtuple(node):
            if not node:
                yield path, EmptyNode.NAMED_TUPLE
                continue
            children = [(key_entry(f, KeyType.DICT), getattr(node, f)) for f in node._fields]
        elif isinstance(node, (list, tuple)):
            if not node:
                yield path, EmptyNode.LIST if isinstance(node, list) else EmptyNode.TUPLE
                continue
            children = [(key_entry(str(i), KeyType.SEQUENCE), v) for i, v in enumerate(node)]
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
    # the key type of each node, by the id of its dict (every node dict stays alive in the
    # tree): no tuple of key texts is built or hashed per level of each path
    kinds: dict[int, KeyType] = {}
    root_leaf = have_any = False
    # the parent node of the last entry and its path: a sibling of it (most entries) starts
    # there, where walking from the root would pass the same checks on the same nodes
    parent: tuple[KeyPath, dict[str, Any]] | None = None
    for path, value in entries:
        if not path:
            if have_any:
                raise DocumentError("a root leaf beside other entries", rule="META-006", file=file)
            have_any = root_leaf = True
            root = {"": _leaf(value)}
            continue
        if root_leaf:
            raise DocumentError("a root leaf beside other entries", rule="META-006", file=file)
        have_any = True
        node = root
        last = len(path) - 1
        start = 0
        if last and parent is not None and parent[0] == path[:last]:
            node, start = parent[1], last
        for depth in range(start, last + 1):
            entry = path[depth]
            key_type = entry.key_type
            if kinds.setdefault(id(node), key_type) is not key_type:
                texts = _texts(path)
                raise DocumentError(
                    f"node {tree_key(texts[:depth])} has keys of both key types",
                    rule="META-006",
                    file=file,
                    pointer=tree_key(texts),
                )
            child = node.get(entry.key, _NO_CHILD)
            if depth == last:
                if child is not _NO_CHILD:  # a leaf, or a node of other paths
                    texts = _texts(path)
                    raise DocumentError(
                        f"key path {tree_key(texts)} appears twice or holds children",
                        rule="META-006",
                        file=file,
                        pointer=tree_key(texts),
                    )
                node[entry.key] = _leaf(value)
                if last:
                    parent = (path[:last], node)
            elif child is _NO_CHILD:
                child = node[entry.key] = {}
                node = child
            elif id(child) in kinds:  # a node (a leaf is never one of the node dicts)
                node = child
            else:
                texts = _texts(path)
                raise DocumentError(
                    f"{param_name(texts[: depth + 1])!r} is both a leaf and a node",
                    rule="META-006",
                    file=file,
                    pointer=tree_key(texts[: depth + 1]),
                )
    if root_leaf:
        return _materialize(root[""], (), kinds, file)
    return _materialize(root, (), kinds, file)


_NO_CHILD: Any = object()


def _leaf(value: Any) -> Any:
    if isinstance(value, EmptyNode):
        return _EmptyMarker(value)
    return value


@dataclass(frozen=True)
class _EmptyMarker:
    node: EmptyNode


def _materialize(
    node: Any, prefix: tuple[str, ...], kinds: Mapping[int, KeyType], file: str
) -> Any:
    if isinstance(node, _EmptyMarker):
        return _EMPTY_VALUES[node.node]()
    kind = kinds.get(id(node)) if type(node) is dict else None
    if kind is None:  # a leaf
        return node
    # a leaf is taken as it is, without a call (`_materialize` returns it unchanged)
    if kind is KeyType.DICT:
        return {
            k: (
                _materialize(v, prefix + (k,), kinds, file)
                if type(v) is dict or isinstance(v, _EmptyMarker)
                else v
            )
            for k, v in node.items()
        }
    indices = sorted(int(k) for k in node)
    if indices != list(range(len(indices))):
        raise DocumentError(
            f"sequence {tree_key(prefix)} has indices {indices}, not 0..n-1",
            rule="META-006",
            file=file,
            pointer=tree_key(prefix),
        )
    values = [node[str(i)] for i in indices]
    return [
        (
            _materialize(v, prefix + (str(i),), kinds, file)
            if type(v) is dict or isinstance(v, _EmptyMarker)
            else v
        )
        for i, v in enumerate(values)
    ]
