"""`_METADATA`: the tree of an item, one entry per leaf, plus item-wide storage flags.

Written by Orbax since 0.3.x (default from 0.4.3). No version field: features are told apart by
the keys present (`use_ocdbt` since 0.11.31, `store_array_data_equal_to_fill_value` since 0.10,
`write_shape` since 0.11).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from .. import _gc
from ..errors import DocumentError
from ..limits import Limits
from ..limits import current as limits_in_force
from ..names import METADATA_FILE
from ..paths import (
    SEQUENCE_INDEX,
    EmptyNode,
    KeyEntry,
    KeyPath,
    KeyType,
    param_name,
    tree_key,
    unflatten,
)
from ..store.files import read_file
from ._base import Document
from ._json import (
    ABSENT,
    check_values,
    child,
    expect,
    expect_int_list,
    expect_object,
    parse_json,
    require,
)

__all__ = [
    "VALUE_TYPES",
    "ValueMetadata",
    "TreeEntry",
    "MetadataDocument",
]


#: value_type strings the spec lists. Leaf kinds first, then empty nodes.
VALUE_TYPES = frozenset(
    {"jax.Array", "np.ndarray", "scalar", "string", *(e.value for e in EmptyNode)}
)


_EMPTY_NODES = {e.value: e for e in EmptyNode}

#: The `extra` of every entry without unknown fields: one read-only empty mapping.
_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class ValueMetadata:
    """`value_metadata` of one tree entry."""

    value_type: str
    skip_deserialize: bool | None = None
    write_shape: tuple[int, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def empty_node(self) -> EmptyNode | None:
        """The empty container (or None) this entry stands for, if it is one."""
        return _EMPTY_NODES.get(self.value_type)

    @classmethod
    def from_json(cls, obj: Any, *, file: str, pointer: str) -> ValueMetadata:
        obj = expect_object(obj, file=file, pointer=pointer, rule="META-002")
        rest = dict(obj)
        value_type = expect(
            require(rest, "value_type", file=file, pointer=pointer, rule="META-002"),
            str,
            file=file,
            pointer=child(pointer, "value_type"),
        )
        rest.pop("value_type")
        skip = None
        if "skip_deserialize" in rest:
            skip = expect(
                rest.pop("skip_deserialize"),
                bool,
                file=file,
                pointer=child(pointer, "skip_deserialize"),
            )
        write_shape = None
        if "write_shape" in rest:
            raw = rest.pop("write_shape")
            if raw is not None:
                write_shape = expect_int_list(raw, file=file, pointer=child(pointer, "write_shape"))
        return cls(
            value_type=value_type, skip_deserialize=skip, write_shape=write_shape, extra=rest
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value_type": self.value_type}
        if self.skip_deserialize is not None:
            out["skip_deserialize"] = self.skip_deserialize
        if self.write_shape is not None:
            out["write_shape"] = list(self.write_shape)
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class TreeEntry:
    """One leaf of the item's tree: its key path and value metadata (slots: a tree of
    100,000 leaves keeps 100,000 of them)."""

    path: KeyPath
    value: ValueMetadata
    extra: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRA)  # one, not a dict each

    @property
    def tree_key(self) -> str:
        return tree_key(self.path)

    @property
    def param_name(self) -> str:
        return param_name(self.path)

    @classmethod
    def from_json(
        cls, key: str, obj: Any, *, file: str, shared: dict[Any, Any] | None = None
    ) -> TreeEntry:
        """Parse one entry. `shared` (one dict per document) lets equal key entries and value
        metadata of many leaves be one object each: a tree of 100,000 leaves then keeps its
        distinct keys, not 300,000 copies of them."""
        fast = _plain_entry(cls, key, obj, {} if shared is None else shared)
        if fast is not None:
            return fast
        pointer = child("/tree_metadata", key)
        obj = expect_object(obj, file=file, pointer=pointer, rule="META-002")
        rest = dict(obj)
        raw_keys = expect(
            require(rest, "key_metadata", file=file, pointer=pointer, rule="META-002"),
            list,
            file=file,
            pointer=child(pointer, "key_metadata"),
        )
        rest.pop("key_metadata")
        if len(raw_keys) > (max_depth := limits_in_force().max_depth):
            raise DocumentError(
                "key path too long",
                rule="LIMIT-004",
                file=file,
                pointer=child(pointer, "key_metadata"),
                expected=f"<= {max_depth} keys",
                got=len(raw_keys),
            )
        path = tuple(
            _key_entry(k, file=file, pointer=child(child(pointer, "key_metadata"), i))
            for i, k in enumerate(raw_keys)
        )
        value = ValueMetadata.from_json(
            require(rest, "value_metadata", file=file, pointer=pointer, rule="META-002"),
            file=file,
            pointer=child(pointer, "value_metadata"),
        )
        rest.pop("value_metadata")
        if tree_key(path) != key:
            raise DocumentError(
                "tree key disagrees with its key_metadata",
                rule="META-003",
                file=file,
                pointer=pointer,
                expected=tree_key(path),
                got=key,
            )
        return cls(path=path, value=value, extra=rest)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key_metadata": [{"key": e.key, "key_type": int(e.key_type)} for e in self.path],
            "value_metadata": self.value.to_json(),
        }
        out.update(self.extra)
        return out


_VALUE_FIELDS = frozenset({"value_type", "skip_deserialize", "write_shape"})


def _plain_entry(
    cls: type[TreeEntry], key: str, obj: Any, shared: dict[Any, Any]
) -> TreeEntry | None:
    """An entry of the usual form, built without the error bookkeeping of the full parser (a
    JSON pointer per field): a `_METADATA` of 10,000 leaves parses about twice as fast. None
    for anything else (an unknown field, a limit approached, a wrong type): the full parser
    then decides and names the fault."""
    if type(obj) is not dict or len(obj) != 2:
        return None
    raw_keys, raw_value = obj.get("key_metadata"), obj.get("value_metadata")
    if type(raw_keys) is not list or type(raw_value) is not dict:
        return None
    if not raw_value.keys() <= _VALUE_FIELDS:
        return None
    pairs = []
    for k in raw_keys:
        if type(k) is not dict or len(k) != 2:
            return None
        pairs.append((k.get("key"), k.get("key_type")))
    return _built_entry(
        cls,
        key,
        pairs,
        raw_value.get("value_type"),
        raw_value.get("skip_deserialize", ABSENT),
        raw_value.get("write_shape"),
        shared,
    )


def _built_entry(
    cls: type[TreeEntry],
    key: str,
    pairs: list[tuple[Any, Any]],
    value_type: Any,
    skip: Any,
    shape: Any,
    shared: dict[Any, Any],
) -> TreeEntry | None:
    """The entry of tree key `key` with the (key, key_type) `pairs`, the value type, the
    `skip_deserialize` (`ABSENT` when missing) and the write shape (None when missing), if
    they are plain (see `_plain_entry`); else None. Shared by both quick parsers, so that they
    build the same entries."""
    limits = limits_in_force()
    found = _plain_path(pairs, shared, limits)
    if found is None:
        return None
    return _plain_tree_entry(cls, key, *found, value_type, skip, shape, shared, limits)


def _plain_path(
    pairs: list[tuple[Any, Any]], shared: dict[Any, Any], limits: Limits
) -> tuple[KeyPath, list[str]] | None:
    """The key path and key texts of the (key, key_type) `pairs` if they are plain (see
    `_plain_entry`), else None; equal key entries are one object (`shared`)."""
    if not 0 < len(pairs) <= limits.max_depth:
        return None
    path = []
    texts = []
    for text, kind in pairs:
        if type(text) is not str or type(kind) is not int or len(text) * 4 > limits.max_key_bytes:
            return None
        entry = shared.get((text, kind))  # key entries by (text, int); values by 3-tuples
        if entry is None:
            if kind == 2:
                entry = KeyEntry(text, KeyType.DICT)
            elif kind == 1 and SEQUENCE_INDEX.fullmatch(text):
                entry = KeyEntry(text, KeyType.SEQUENCE)
            else:
                return None
            shared[(text, kind)] = entry
        path.append(entry)
        texts.append(text)
    return tuple(path), texts


def _plain_tree_entry(
    cls: type[TreeEntry],
    key: str,
    path: KeyPath,
    texts: list[str],
    value_type: Any,
    skip: Any,
    shape: Any,
    shared: dict[Any, Any],
    limits: Limits,
) -> TreeEntry | None:
    """The entry of tree key `key` with the plain key `path` (`_plain_path`) of the key
    `texts`, if its value metadata is plain and `key` is the path's tree key; else None."""
    if not 0 < len(path) <= limits.max_depth:
        return None
    if type(value_type) is not str:
        return None
    if skip is ABSENT:
        skip = None
    elif type(skip) is not bool:  # a null too
        return None
    if shape is not None:
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            return None
        shape = tuple(shape)
    if repr(tuple(texts)) != key:  # `tree_key` of the path
        return None
    value = shared.get((value_type, skip, shape))
    if value is None:
        value = ValueMetadata(value_type=value_type, skip_deserialize=skip, write_shape=shape)
        shared[(value_type, skip, shape)] = value
    return cls(path=path, value=value, extra=_NO_EXTRA)


def _cached_path(
    key_texts: str, pieces: dict[str, Any], shared: dict[Any, Any], limits: Limits
) -> tuple[KeyPath, list[str]] | None:
    """The key path and texts of the `key_metadata` JSON `key_texts` as `_PLAIN_MEMBER`
    matched it (its key entries without the outer brackets), each key entry's JSON parsed once
    per document (`pieces`: a tree of 100,000 leaves repeats a few hundred); None where one
    is not plain, or where a key text holds the separator the JSON is split at."""
    path = []
    texts = []
    for piece in key_texts[1:-1].split("}, {"):
        found = pieces.get(piece)
        if found is None:
            m = _PLAIN_PIECE.fullmatch(piece)
            if m is None:
                return None
            got = _plain_path([(m.group(1), int(m.group(2)))], shared, limits)
            if got is None:
                return None
            found = pieces[piece] = (got[0][0], got[1][0])
        path.append(found[0])
        texts.append(found[1])
    return tuple(path), texts


#: A string of a plain entry: no escape and no control character, so its text is its value.
_TEXT = r'"([^"\\\x00-\x1f]*)"'
_KEY_ENTRY = r'\{"key": "[^"\\\x00-\x1f]*", "key_type": [12]\}'
_DIM = r"(?:0|[1-9][0-9]{0,17})"
#: One member of `tree_metadata` as Orbax and ockpt write it (`json.dumps`' separators, the
#: fields in their usual order), then ", " or the "}" that closes `tree_metadata`.
_PLAIN_MEMBER = re.compile(
    _TEXT
    + rf': \{{"key_metadata": \[((?:{_KEY_ENTRY}, )*{_KEY_ENTRY})\], "value_metadata": '
    + r'(\{"value_type": '  # the value metadata's text, then its parts
    + _TEXT
    + r'(?:, "skip_deserialize": (true|false))?'
    + rf'(?:, "write_shape": (\[(?:{_DIM}(?:, {_DIM})*)?\]))?\}})\}}(, |\}})'
)
_PLAIN_KEY = re.compile(r'\{"key": ' + _TEXT + r', "key_type": ([12])\}')
#: One key entry of `_PLAIN_MEMBER`'s key metadata without its braces.
_PLAIN_PIECE = re.compile(r'"key": ' + _TEXT + r', "key_type": ([12])')
_PLAIN_HEAD = '{"tree_metadata": {'


def _plain_document(data: bytes, shared: dict[Any, Any]) -> dict[str, Any] | None:
    """The JSON of a `_METADATA` whose entries are all plain and written as Orbax and ockpt
    write them, with `TreeEntry` values in `tree_metadata`; None for any other document, which
    the full parser then reads (and refuses, naming the fault).

    Each entry is read by one regular expression instead of the JSON parser and `_plain_entry`
    (about twice as fast for 100,000 leaves); the rest of the document by `parse_json`. What
    it accepts, the full parser reads to the same document: no escapes, fixed separators and
    field order, distinct tree keys, the same limits and `_built_entry`."""
    limits = limits_in_force()
    if type(data) is not bytes or len(data) > limits.max_json_bytes or limits.max_depth < 8:
        return None
    if not data.startswith(_PLAIN_HEAD.encode()):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    tree: dict[str, Any] = {}
    match = _PLAIN_MEMBER.match
    pieces: dict[str, Any] = {}
    # the value metadata built, by its JSON text: it depends on that alone
    values: dict[str, ValueMetadata] = {}
    # the key path of the key entries before the last, by their JSON text: (path, texts, the
    # tree key's text up to the last key's): siblings repeat it
    parents: dict[str, tuple[KeyPath, list[str], str] | None] = {}
    most, depth = limits.max_tree_entries, limits.max_depth
    pos, close = len(_PLAIN_HEAD), ""
    while close != "}":
        m = match(text, pos)
        if m is None or len(tree) >= most:
            return None
        name, key_texts, value_text, value_type, skip, shape, close = m.groups()
        entry: TreeEntry | None = None
        head, sep, last = key_texts.rpartition("}, {")
        value = values.get(value_text)
        if sep and value is not None:  # two keys or more: the parent's path, then the last key
            parent = parents.get(head, _UNSEEN)
            if parent is _UNSEEN:
                parent = parents[head] = _parent_path(head + "}", pieces, shared, limits)
            piece = pieces.get(last[:-1])
            if parent is not None and piece is not None and len(parent[0]) < depth:
                if name == parent[2] + repr(piece[1]) + ")":  # `tree_key` of the path
                    entry = TreeEntry(path=parent[0] + (piece[0],), value=value, extra=_NO_EXTRA)
        if entry is None:
            entry = _plain_member(name, key_texts, value_type, skip, shape, pieces, shared, limits)
            if entry is None:
                return None
            values[value_text] = entry.value
        if tree.setdefault(name, entry) is not entry:  # a tree key twice
            return None
        pos = m.end()
    try:
        obj = parse_json('{"tree_metadata": {}' + text[pos:], file=METADATA_FILE)
    except DocumentError:
        return None
    obj["tree_metadata"] = tree
    return obj


_UNSEEN: Any = object()


def _parent_path(
    key_texts: str, pieces: dict[str, Any], shared: dict[Any, Any], limits: Limits
) -> tuple[KeyPath, list[str], str] | None:
    """`_cached_path` of `key_texts` with the text a tree key of a child path begins with
    (its `repr` without the last key's and the closing parenthesis); None where it gives
    None."""
    found = _cached_path(key_texts, pieces, shared, limits)
    if found is None:
        return None
    return found[0], found[1], "(" + "".join(repr(t) + ", " for t in found[1])


def _plain_member(
    name: str,
    key_texts: str,
    value_type: str,
    skip: str | None,
    shape: str | None,
    pieces: dict[str, Any],
    shared: dict[Any, Any],
    limits: Limits,
) -> TreeEntry | None:
    """The entry of one `_PLAIN_MEMBER` match (its groups), or None where it is not plain."""
    found = _cached_path(key_texts, pieces, shared, limits)
    if found is None:  # `_plain_path` of every key entry, found by `_PLAIN_KEY`
        pairs = [(t, 2 if k == "2" else 1) for t, k in _PLAIN_KEY.findall(key_texts)]
        found = _plain_path(pairs, shared, limits)
    if found is None:
        return None
    return _plain_tree_entry(
        TreeEntry,
        name,
        *found,
        value_type,
        ABSENT if skip is None else skip == "true",
        None if shape is None else [int(n) for n in shape[1:-1].split(", ") if n],
        shared,
        limits,
    )


def _key_entry(obj: Any, *, file: str, pointer: str) -> KeyEntry:
    obj = expect_object(obj, file=file, pointer=pointer, rule="META-002")
    key = expect(
        require(obj, "key", file=file, pointer=pointer, rule="META-002"),
        str,
        file=file,
        pointer=child(pointer, "key"),
    )
    raw_type = expect(
        require(obj, "key_type", file=file, pointer=pointer, rule="META-002"),
        int,
        file=file,
        pointer=child(pointer, "key_type"),
    )
    try:
        key_type = KeyType(raw_type)
    except ValueError:
        raise DocumentError(
            "unknown key_type",
            rule="META-004",
            file=file,
            pointer=child(pointer, "key_type"),
            expected=[1, 2],
            got=raw_type,
        ) from None
    if len(key) * 4 > (max_key := limits_in_force().max_key_bytes):
        size = len(key.encode("utf-8", "surrogatepass"))  # a lone surrogate ("\ud800"): 3
        if size > max_key:
            raise DocumentError(
                "key too long",
                rule="LIMIT-003",
                file=file,
                pointer=child(pointer, "key"),
                expected=f"<= {max_key} UTF-8 bytes",
                got=size,
            )
    if key_type is KeyType.SEQUENCE and not SEQUENCE_INDEX.fullmatch(key):
        raise DocumentError(
            "sequence index is not a decimal integer",
            rule="META-005",
            file=file,
            pointer=child(pointer, "key"),
            got=key,
        )
    if set(obj) - {"key", "key_type"}:
        raise DocumentError(
            f"unknown fields {sorted(set(obj) - {'key', 'key_type'})}",
            rule="META-002",
            file=file,
            pointer=pointer,
        )
    return KeyEntry(key, key_type)


def _too_many(file: str, got: int | str) -> DocumentError:
    return DocumentError(
        "too many tree_metadata entries",
        rule="LIMIT-002",
        file=file,
        pointer="/tree_metadata",
        expected=f"<= {limits_in_force().max_tree_entries}",
        got=got,
    )


#: A string as `json.dumps` writes it (ASCII, escaped): the C encoder the module itself uses.
_JSON_STRING = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]

#: (size, blake2b-256, limits) -> document
_PARSED: dict[tuple[int, bytes, Limits], MetadataDocument] = {}
_PARSED_KEEP = 4


@dataclass(frozen=True, kw_only=True)
class MetadataDocument(Document):
    """The parsed `_METADATA` file of one pytree item.

    Optional fields that the file lacks are `ABSENT` (a JSON null stays None), so `to_json`
    gives back exactly the keys that were read.
    """

    FILE_NAME: ClassVar[str] = METADATA_FILE

    entries: tuple[TreeEntry, ...]
    use_ocdbt: bool | Any = ABSENT
    use_zarr3: bool | Any = ABSENT
    store_array_data_equal_to_fill_value: bool | Any = ABSENT
    custom_metadata: Any = ABSENT
    value_metadata_tree: str | Any = ABSENT
    extra: Mapping[str, Any] = field(default_factory=dict)

    _FLAGS = ("use_ocdbt", "use_zarr3", "store_array_data_equal_to_fill_value")

    @classmethod
    def from_json(cls, obj: Any, *, file: str = METADATA_FILE) -> MetadataDocument:
        obj = expect_object(obj, file=file, pointer="", rule="META-001")
        rest = dict(obj)
        tree = expect_object(
            require(rest, "tree_metadata", file=file, pointer="", rule="META-001"),
            file=file,
            pointer="/tree_metadata",
            rule="META-001",
        )
        rest.pop("tree_metadata")
        if len(tree) > limits_in_force().max_tree_entries:
            raise _too_many(file, len(tree))
        shared: dict[Any, Any] = {}
        entries = tuple(
            v if isinstance(v, TreeEntry) else TreeEntry.from_json(k, v, file=file, shared=shared)
            for k, v in tree.items()
        )  # TreeEntry values: already parsed by `from_bytes`
        del shared
        flags: dict[str, Any] = {}
        for name in cls._FLAGS:
            if name in rest:
                flags[name] = expect(rest.pop(name), bool, file=file, pointer="/" + name)
        custom = rest.pop("custom_metadata", ABSENT)
        if custom is not ABSENT and custom is not None:
            expect_object(custom, file=file, pointer="/custom_metadata")
        vmt = rest.pop("value_metadata_tree", ABSENT)
        if vmt is not ABSENT and vmt is not None:
            expect(vmt, str, file=file, pointer="/value_metadata_tree")
        doc = cls(
            entries=entries, custom_metadata=custom, value_metadata_tree=vmt, extra=rest, **flags
        )
        doc.tree(file=file)  # entries must form one tree (META-006)
        return doc

    @classmethod
    def from_bytes(
        cls, data: bytes, *, file: str = METADATA_FILE, keep: bool = True
    ) -> MetadataDocument:
        """Parse `_METADATA`. `keep` False: its last reader (an item building its saved tree)
        takes the document out of the cache of parsed documents, so it lives no longer."""
        # Detecting a layout and then loading it parse the same _METADATA: the last few
        # documents parsed are kept (they are immutable), keyed by a digest of their bytes
        # (not the bytes: a 100,000-leaf _METADATA is 23 MB).
        # Keyed by the limits too: a document read under looser limits is parsed again.
        # A document that is not kept and whose size no kept one has cannot be a hit: it is
        # not hashed (a 1,000,000-leaf _METADATA, too large to peek at, is 230 MB).
        limits = limits_in_force()
        size = len(data)
        digest = None
        if keep or any(key[0] == size for key in _PARSED):
            digest = (size, hashlib.blake2b(data, digest_size=32).digest(), limits)
            hit = _PARSED.pop(digest, None) if not keep else _PARSED.get(digest)
            if hit is not None and type(hit) is cls:
                return hit
        shared: dict[Any, Any] = {}
        count = itertools.count(1)

        def entry(key: str, value: Any) -> TreeEntry:
            if next(count) > limits.max_tree_entries:
                raise _too_many(file, f"more than {limits.max_tree_entries}")
            return TreeEntry.from_json(key, value, file=file, shared=shared)

        # counted on the bytes before either parser decodes them (JSON-003)
        over = check_values(data, file=file, streamed=("tree_metadata",))
        with _gc.paused():  # an entry per leaf, all kept
            obj = None if over else _plain_document(data, shared)
            if obj is None:
                # each tree entry becomes a TreeEntry as it is parsed: the JSON of 100,000
                # entries (about 8 times the file's size in dicts) is never held at once
                tree = {"tree_metadata": entry}
                obj = parse_json(data, file=file, streamed=tree, over=over)
            doc = cls.from_json(obj, file=file)
        if not keep or digest is None:
            return doc
        while len(_PARSED) >= _PARSED_KEEP:
            _PARSED.pop(next(iter(_PARSED)), None)
        _PARSED[digest] = doc
        return doc

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> MetadataDocument:
        file = os.fspath(path)
        limit = limits_in_force().max_json_bytes
        return cls.from_bytes(read_file(file, limit=limit, rule="JSON-003"), file=file)

    def to_bytes(self) -> bytes:
        """`Document.to_bytes`, each entry's JSON written from fragments kept per key entry
        and value metadata (the same bytes: `json.dumps`' escapes and separators) rather than
        a dict per entry encoded: a tree of 100,000 leaves repeats a few of each."""
        if "tree_metadata" in self.extra:
            return super().to_bytes()
        rest = self.to_json(entries=False)
        del rest["tree_metadata"]
        keys: dict[int, str] = {}  # by the id of the key entry (each alive in `entries`)
        values: dict[int, str] = {}  # by the id of the value metadata
        quote = _JSON_STRING
        names: list[str] = []
        parts: list[str] = []
        for e in self.entries:
            if e.extra:
                names.append(e.tree_key)
                parts.append(f"{quote(e.tree_key)}: {json.dumps(e.to_json(), allow_nan=False)}")
                continue
            path = []
            for k in e.path:
                text = keys.get(id(k))
                if text is None:
                    text = keys[id(k)] = f'{{"key": {quote(k.key)}, "key_type": {int(k.key_type)}}}'
                path.append(text)
            value = values.get(id(e.value))
            if value is None:
                value = values[id(e.value)] = json.dumps(e.value.to_json(), allow_nan=False)
            name = repr(tuple([k.key for k in e.path]))  # `tree_key`, the list faster
            names.append(name)
            parts.append(
                f'{quote(name)}: {{"key_metadata": [{", ".join(path)}], "value_metadata": {value}}}'
            )
        if len(set(names)) < len(names):  # one member per tree key, as in `to_json`
            return super().to_bytes()
        tail = json.dumps(rest, allow_nan=False)[1:] if rest else "}"
        joiner = ", " if rest else ""
        return f'{{"tree_metadata": {{{", ".join(parts)}}}{joiner}{tail}'.encode()

    def to_json(self, *, entries: bool = True) -> dict[str, Any]:
        """The document as JSON; without `entries`, ``tree_metadata`` is left empty."""
        tree = {e.tree_key: e.to_json() for e in self.entries} if entries else {}
        out: dict[str, Any] = {"tree_metadata": tree}
        for name in self._FLAGS:
            value = getattr(self, name)
            if value is not ABSENT:
                out[name] = value
        if self.custom_metadata is not ABSENT:
            out["custom_metadata"] = self.custom_metadata
        if self.value_metadata_tree is not ABSENT:
            out["value_metadata_tree"] = self.value_metadata_tree
        out.update(self.extra)
        return out

    def by_param_name(self) -> dict[str, TreeEntry]:
        """Entries keyed by param name (only those that store a value, not empty nodes)."""
        return {e.param_name: e for e in self.entries if e.value.empty_node is None}

    def tree(self, *, file: str = METADATA_FILE) -> Any:
        """The tree these entries describe: nested dicts/lists with `TreeEntry` leaves and
        empty containers / None where the entry is an empty node."""
        return unflatten(((e.path, e.value.empty_node or e) for e in self.entries), file=file)
