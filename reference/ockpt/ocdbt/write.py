"""Writing new OCDBT databases (spec/ocdbt.md), without tensorstore.

`DatabaseWriter` takes key/value pairs and commits them as one new database with a single
generation: values up to `Config.max_inline_value_bytes` inline in the B+tree leaves, larger
ones appended as they come, each at a 64-byte-aligned offset (a page, 4096, from 1 MiB), to
data files ``d/<32 hex>`` of about `data_file_bytes` each (a larger value gets a file of its
own), each closed when full; then the B+tree nodes in one more data file, then
``manifest.ocdbt`` last, so a database is readable only once everything it refers to is
written. `merge` writes a database whose B+tree
refers to values of other databases under the same directory (Orbax's root database over
``ocdbt.process_<N>/``), copying references, not values.

`build_btree` is pure: it lays entries out in leaves and interior nodes of at most
`max_decoded_node_bytes` (estimated), key prefixes as §8.1 says, and returns the encoded nodes
of one data file. Files are created through the ``open_file(path)`` the caller passes, so this
module does no I/O of its own.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..limits import LIMITS
from ..names import MANIFEST_FILE, OCDBT_DATA_DIR
from ..store.base import NewFile
from . import format as fmt
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
    ZstdCompression,
)

__all__ = [
    "ORBAX_CONFIG",
    "DatabaseWriter",
    "Entry",
    "NewFile",
    "OpenFile",
    "build_btree",
    "merge",
    "new_config",
]

#: A database entry: full key, and the inline value or the reference of an out-of-line one.
Entry = tuple[bytes, bytes | IndirectDataReference]


#: ``open_file(name)``: create the new file `name` (a store's `Store.writer`).
OpenFile = Callable[[str], NewFile]


#: Orbax's configuration of every database it writes (WRITE-014): 1024 bytes inline, nodes of up
#: to 100,000,000 decoded bytes, version tree arity 16, zstd nodes at the default level.
ORBAX_CONFIG = dict(
    max_inline_value_bytes=1024,
    max_decoded_node_bytes=100_000_000,
    version_tree_arity_log2=4,
    compression=ZstdCompression(0),
)

#: Data files of out-of-line values are cut at about this size.
DATA_FILE_BYTES = 64 << 20

#: Every out-of-line value starts at a multiple of this offset in its data file (zero bytes,
#: referenced by no key, fill the gap): a raw value mapped from the file is then a numpy array
#: aligned for any element type and for SIMD loads (spec/writing.md §3.3, WRITE-017).
VALUE_ALIGNMENT = 64
#: A value of `PAGE_VALUE_BYTES` or more starts on a page (`PAGE_ALIGNMENT`), so that the
#: chunks of one array can be mapped side by side into one view (at most 0.4% of padding).
PAGE_ALIGNMENT = 4096
PAGE_VALUE_BYTES = 1 << 20

#: The fixed bytes an entry adds to a node besides its key and inline value (varints of its
#: lengths, kind, file id, offset; an interior entry's statistics), for the size estimate.
_LEAF_ENTRY_BYTES = 24
_INTERIOR_ENTRY_BYTES = 64


def new_config(**overrides: object) -> Config:
    """A configuration with a fresh random UUID, Orbax's settings unless overridden."""
    settings = {**ORBAX_CONFIG, **overrides}
    return Config(uuid=secrets.token_bytes(16), manifest_kind=fmt.MANIFEST_KIND_SINGLE, **settings)  # type: ignore[arg-type]


def data_file_name() -> bytes:
    """A new data file path relative to the database: ``d/`` and 32 random hex digits."""
    return f"{OCDBT_DATA_DIR}/{secrets.token_hex(16)}".encode()


@dataclass(frozen=True)
class _Subtree:
    """An encoded node as its parent sees it: its first full key, the common prefix of all its
    full keys, its reference and its statistics."""

    first: bytes
    prefix: bytes
    node: BtreeNodeReference


def _common_prefix(keys: Sequence[bytes]) -> bytes:
    """The common prefix of a set of keys: that of its smallest and largest."""
    return os.path.commonprefix([min(keys), max(keys)])


def _groups(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive index ranges whose summed sizes stay within `limit` (each holds at least
    one item, so an item above the limit has a range of its own)."""
    out, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > limit:
            out.append(range(start, i))
            start, total = i, 0
        total += size
    out.append(range(start, len(sizes)))
    return out


def build_btree(
    entries: Sequence[Entry],
    *,
    node_file: DataFileId,
    max_node_bytes: int,
    compression: int = 1,
    level: int = 0,
) -> tuple[list[bytes], BtreeNodeReference, int]:
    """Encode a B+tree over `entries` (full key, inline value or reference), sorted by key with
    no duplicates, into consecutive nodes of the data file `node_file`.

    Returns the encoded nodes in file order, the root's reference and the root's height. Leaves
    hold as many entries as fit `max_node_bytes` (estimated decoded size), interior nodes as
    many children; the root's key prefix is empty, every other node's is the common prefix of
    its subtree's keys, and an interior entry's key is the first full key of its child
    (OCDBT-044)."""
    if not entries:
        raise ValueError("a B+tree needs at least one entry (an empty database has no root)")
    blobs: list[bytes] = []
    offset = 0

    def emit(node: BtreeNode, num_keys: int, indirect: int, below: int) -> BtreeNodeReference:
        """Append an encoded node; `below` is the encoded size of its descendants."""
        nonlocal offset
        data = fmt.encode_btree_node(node, compression=compression, level=level)
        blobs.append(data)
        ref = IndirectDataReference(node_file, offset, len(data))
        offset += len(data)
        return BtreeNodeReference(ref, BtreeNodeStatistics(indirect, below + len(data), num_keys))

    keys = [k for k, _ in entries]
    inline = sum([len(v) for _, v in entries if type(v) is bytes])
    if sum(map(len, keys)) + inline + _LEAF_ENTRY_BYTES * len(keys) <= max_node_bytes:
        groups = [range(len(entries))]  # one leaf: no per-entry sizes needed
    else:
        sizes = [
            len(k) + _LEAF_ENTRY_BYTES + (len(v) if type(v) is bytes else 0) for k, v in entries
        ]
        groups = _groups(sizes, max_node_bytes)
    nodes: list[_Subtree] = []
    for group in groups:
        part = entries[group.start : group.stop]
        prefix = b"" if len(groups) == 1 else _common_prefix([k for k, _ in part])
        cut = len(prefix)
        leaf = BtreeNode(0, tuple(LeafNodeEntry(k[cut:], v) for k, v in part))
        indirect = sum(v.length for _, v in part if not isinstance(v, bytes))
        nodes.append(_Subtree(part[0][0], prefix, emit(leaf, len(part), indirect, 0)))
    height = 0
    while len(nodes) > 1:
        height += 1
        sizes = [len(s.first) + _INTERIOR_ENTRY_BYTES for s in nodes]
        # at least two children per node (but the last), so that every level is shorter
        groups = _groups(sizes, max(max_node_bytes, 2 * max(sizes)))
        parents = []
        for group in groups:
            children = nodes[group.start : group.stop]
            prefix = b"" if len(groups) == 1 else _common_prefix([c.prefix for c in children])
            cut = len(prefix)
            node = BtreeNode(
                height,
                tuple(
                    InteriorNodeEntry(c.first[cut:], len(c.prefix) - cut, c.node) for c in children
                ),
            )
            stats = [c.node.statistics for c in children]
            ref = emit(
                node,
                sum(s.num_keys for s in stats),
                sum(s.num_indirect_value_bytes for s in stats),
                sum(s.num_tree_bytes for s in stats),
            )
            parents.append(_Subtree(children[0].first, prefix, ref))
        nodes = parents
    return blobs, nodes[0].node, height


class DatabaseWriter:
    """One new OCDBT database in `directory`, written by `put` and `commit`.

    Args:
        directory: the database directory, the prefix of every file name given to `open_file`
            (``""``: the names themselves; the directory need not exist).
        open_file: creates a new file (`OpenFile`); each file is opened once, its values
            appended as they come, and closed when full (flushing it is the opener's choice).
        config: the manifest's configuration (default: Orbax's, `new_config`).
        data_file_bytes: out-of-line values are gathered into data files of about this size.
    """

    def __init__(
        self,
        directory: str,
        *,
        open_file: OpenFile,
        config: Config | None = None,
        data_file_bytes: int = DATA_FILE_BYTES,
    ) -> None:
        self.directory = directory
        self.config = config if config is not None else new_config()
        self._open_file = open_file
        self._data_file_bytes = data_file_bytes
        self._entries: dict[bytes, bytes | IndirectDataReference] = {}
        self._file: tuple[DataFileId, NewFile] | None = None  # the data file being filled
        self._size = 0

    def put(self, key: bytes, parts: Sequence[bytes | memoryview]) -> None:
        """Store the value made of the concatenated buffers `parts` under `key` (a new key):
        inline, or appended to the data file being filled (a value of `data_file_bytes` or
        more: written to a file of its own)."""
        if key in self._entries:
            raise ValueError(f"key {key!r} written twice")
        length = sum(memoryview(p).nbytes for p in parts)
        if length <= self.config.max_inline_value_bytes:
            self._entries[key] = b"".join(parts)
            return
        if length >= self._data_file_bytes:
            file_id = DataFileId(b"", data_file_name())
            self._write(file_id.path, parts)
            self._entries[key] = IndirectDataReference(file_id, 0, length)
            return
        if self._file is None:
            file_id = DataFileId(b"", data_file_name())
            self._file = (file_id, self._open(file_id))
        file_id, file = self._file
        pad = -self._size % (PAGE_ALIGNMENT if length >= PAGE_VALUE_BYTES else VALUE_ALIGNMENT)
        if pad:
            file.append([bytes(pad)])
            self._size += pad
        file.append(parts)
        self._entries[key] = IndirectDataReference(file_id, self._size, length)
        self._size += length
        if self._size >= self._data_file_bytes:
            self.close()

    def put_entry(self, key: bytes, value: bytes | IndirectDataReference) -> None:
        """Store an inline value or a reference to bytes already written (for `merge`)."""
        if key in self._entries:
            raise ValueError(f"key {key!r} written twice")
        self._entries[key] = value

    def _open(self, file_id: DataFileId) -> NewFile:
        return self._open_file(self._name(file_id.path))

    def _name(self, name: bytes) -> str:
        """The name of the database's file `name` as `open_file` takes it."""
        return f"{self.directory.rstrip('/')}/{name.decode()}" if self.directory else name.decode()

    def _write(self, name: bytes, parts: Sequence[bytes | memoryview]) -> None:
        """A new file `name` (relative to the database) holding `parts`, written and closed."""
        file = self._open_file(self._name(name))
        try:
            file.append(parts)
        finally:
            file.close()

    def close(self) -> None:
        """Close the data file being filled; on failure too, before the caller discards the
        database."""
        if self._file is not None:
            file, self._file, self._size = self._file[1], None, 0
            file.close()

    def commit(self, *, commit_time: int | None = None) -> list[Entry]:
        """Close the last data file, write the B+tree and then the manifest (generation 1);
        return the entries written, in key order (what `merge` takes, without reading them
        back)."""
        self.close()
        config = self.config
        entries = sorted(self._entries.items())
        if entries:
            node_file = DataFileId(b"", data_file_name())
            blobs, root, height = build_btree(
                entries,
                node_file=node_file,
                max_node_bytes=config.max_decoded_node_bytes or LIMITS.max_node_bytes,
                compression=0 if config.compression is None else 1,
                level=0 if config.compression is None else config.compression.level,
            )
            self._write(node_file.path, blobs)
        else:
            empty = BtreeNodeStatistics(0, 0, 0)
            root, height = BtreeNodeReference(None, empty), 0
        version = BtreeGenerationReference(
            root=root,
            generation_number=1,
            root_height=height,
            commit_time=time.time_ns() if commit_time is None else commit_time,
        )
        manifest = fmt.encode_manifest(Manifest(config, (version,), ()))
        self._write(MANIFEST_FILE.encode(), [manifest])
        self._entries.clear()
        return entries


def merge(
    writer: DatabaseWriter,
    sources: Iterable[tuple[bytes, Iterable[Entry | tuple[bytes, LeafNodeEntry]]]],
) -> None:
    """Put every entry of each source database into `writer`, references rebased.

    `sources` gives, per database, its directory relative to the writer's (``b"ocdbt.process_0/"``)
    and its entries: (full key, leaf entry) pairs as `Database.entries` reads them, or (full key,
    value) pairs as `DatabaseWriter.commit` returns them. Out-of-line values stay where they are,
    referred to through that base path. A key present in two sources is an error."""
    for base, entries in sources:
        for key, entry in entries:
            value = entry.value if isinstance(entry, LeafNodeEntry) else entry
            if not isinstance(value, bytes):
                file = DataFileId(base + value.file_id.base_path, value.file_id.relative_path)
                value = IndirectDataReference(file, value.offset, value.length)
            writer.put_entry(key, value)
