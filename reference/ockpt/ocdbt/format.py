"""OCDBT bytes <-> structures, with no I/O (spec/ocdbt.md).

Every decoder takes bytes and returns a frozen structure, or raises `OcdbtError` naming the rule,
the file and the byte offset. Every count, length, offset and varint is checked against the
bytes that remain before anything is allocated from it, and decompression is bounded.

Structures use the field names of the published OCDBT format document. Paths in data file
tables are resolved against the *transitive path* of the node that holds them at decode time:
`DataFileId.base_path` always holds the full base path (transitive path + the table's
base path), so a `DataFileId` names one file relative to the database directory on its own.
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from ..bytecodecs import crc32c, zstd_compress, zstd_decompress
from ..errors import OcdbtError
from ..limits import current as limits_in_force

__all__ = [
    "MANIFEST_MAGIC",
    "VERSION_NODE_MAGIC",
    "BTREE_NODE_MAGIC",
    "MANIFEST_KIND_SINGLE",
    "MANIFEST_KIND_NUMBERED",
    "NO_ROOT",
    "node_bound",
    "decode_varint",
    "encode_varint",
    "DataFileId",
    "IndirectDataReference",
    "BtreeNodeStatistics",
    "BtreeNodeReference",
    "BtreeGenerationReference",
    "VersionNodeReference",
    "ZstdCompression",
    "Config",
    "Manifest",
    "VersionTreeNode",
    "LeafNodeEntry",
    "InteriorNodeEntry",
    "BtreeNode",
    "Envelope",
    "decode_envelope",
    "encode_envelope",
    "decode_manifest",
    "decode_version_tree_node",
    "decode_btree_node",
    "encode_manifest",
    "encode_version_tree_node",
    "encode_btree_node",
]

MANIFEST_MAGIC = 0x0CDB3A2A
VERSION_NODE_MAGIC = 0x0CDB1234
BTREE_NODE_MAGIC = 0x0CDB20DE

MANIFEST_KIND_SINGLE = 0
MANIFEST_KIND_NUMBERED = 1

_U64_MAX = (1 << 64) - 1
#: offset and length of a reference to "no node" (the root of an empty B+tree)
NO_ROOT = _U64_MAX

_MAX_VARINT_BYTES = 10  # a 64-bit value takes at most ceil(64 / 7) bytes
_MAX_ARITY_LOG2 = 16
# fixed sizes: magic (4) + length (8) + version (>= 1) + compression (>= 1) + crc (4)
_MIN_ENVELOPE = 18
_HEADER_FIXED = 12


# --------------------------------------------------------------------------------------------
# primitives
# --------------------------------------------------------------------------------------------


#: The one-byte varints, 0 to 127 (most lengths, prefixes and ids of a node).
_SMALL_VARINTS = tuple(bytes((i,)) for i in range(0x80))


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 encoding of 0 <= value < 2**64 (the shortest form)."""
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]
    if not 0 <= value <= _U64_MAX:
        raise ValueError(f"varint out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(
    data: bytes, pos: int = 0, *, end: int | None = None, file: object = None
) -> tuple[int, int]:
    """Decode one unsigned LEB128 varint (at most 10 bytes, value < 2**64) at `pos`.

    Returns (value, position after it).
    """
    cur = _Cursor(data, file=file, start=pos, end=len(data) if end is None else end)
    value = cur.varint("value")
    return value, cur.pos


class _Cursor:
    """A bounds-checked reader over `data[start:end]` that reports errors with offsets.

    `label(pos)` renders where a position lies: `@<file offset>` for bytes read straight from a
    file, `@<node offset>+body[<pos>]` for bytes of a decompressed body.
    """

    __slots__ = ("data", "pos", "end", "file", "base", "body_of")

    def __init__(
        self,
        data: bytes,
        *,
        file: object,
        start: int = 0,
        end: int | None = None,
        base: int = 0,
        body_of: int | None = None,
    ) -> None:
        self.data = data
        self.pos = start
        self.end = len(data) if end is None else end
        self.file = file
        self.base = base  # file offset of data[0] (raw bytes)
        self.body_of = body_of  # file offset of the node whose decoded body this is, if any

    def label(self, pos: int | None = None) -> str:
        pos = self.pos if pos is None else pos
        if self.body_of is not None:
            return f"@{self.body_of}+body[{pos}]"
        return f"@{self.base + pos}"

    def fail(self, message: str, rule: str, *, pos: int | None = None, **kw) -> OcdbtError:
        return OcdbtError(message, rule=rule, file=self.file, pointer=self.label(pos), **kw)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int, field: str) -> None:
        if n > self.end - self.pos:
            raise self.fail(
                f"truncated: {field} needs {n} bytes",
                "OCDBT-007",
                expected=n,
                got=self.end - self.pos,
            )

    def u8(self, field: str) -> int:
        self.need(1, field)
        value = self.data[self.pos]
        self.pos += 1
        return value

    def i32le(self, field: str) -> int:
        self.need(4, field)
        (value,) = struct.unpack_from("<i", self.data, self.pos)
        self.pos += 4
        return value

    def u64le(self, field: str) -> int:
        self.need(8, field)
        (value,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        return value

    def take(self, n: int, field: str) -> bytes:
        self.need(n, field)
        value = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return value

    def varint(self, field: str, maximum: int = _U64_MAX) -> int:
        data, pos, end = self.data, self.pos, self.end
        start = pos
        value = 0
        shift = 0
        while True:
            if pos >= end:
                raise self.fail(f"truncated varint {field}", "OCDBT-007", pos=start)
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift >= 7 * _MAX_VARINT_BYTES:
                raise self.fail(
                    f"varint {field} longer than {_MAX_VARINT_BYTES} bytes",
                    "OCDBT-008",
                    pos=start,
                )
        if value > _U64_MAX:
            raise self.fail(f"varint {field} exceeds 2**64-1", "OCDBT-008", pos=start, got=value)
        if value > maximum:
            raise self.fail(
                f"{field} out of range", "OCDBT-008", pos=start, expected=f"<= {maximum}", got=value
            )
        self.pos = pos
        return value

    def count(self, field: str, min_item_bytes: int, maximum: int = _U64_MAX) -> int:
        """A varint count of items, each taking at least `min_item_bytes` of what remains."""
        start = self.pos
        n = self.varint(field, maximum)
        if n * min_item_bytes > self.remaining:
            raise self.fail(
                f"{field} = {n} does not fit in the {self.remaining} bytes that remain",
                "OCDBT-007",
                pos=start,
                got=n,
            )
        return n

    def varints(self, n: int, field: str, maximum: int = _U64_MAX) -> list[int]:
        self.need(n, field)  # every varint takes at least one byte
        head = self.data[self.pos : self.pos + n]
        if n and max(head) < 0x80 and max(head) <= maximum:  # n one-byte varints: C speed
            self.pos += n
            return list(head)
        if n >= _VECTOR_VARINTS:
            found = self._short_varints(n, maximum)
            if found is not None:
                return found
        data, pos, end = self.data, self.pos, self.end
        out = []
        for _ in range(n):  # inline: a method call per varint made this the node decode's cost
            start, value, shift = pos, 0, 0
            while pos < end and shift < 7 * _MAX_VARINT_BYTES:
                byte = data[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
            else:  # truncated or too long: `varint` names the fault
                self.pos = start
                self.varint(field, maximum)
            if value > maximum:
                self.pos = start
                self.varint(field, maximum)  # raises
            out.append(value)
        self.pos = pos
        return out

    def _short_varints(self, n: int, maximum: int) -> list[int] | None:
        """`varints` by numpy where each of the `n` is at most 9 bytes (under 2**63) and
        within `maximum`; None otherwise (the loop of `varints` then reads or refuses them)."""
        window = np.frombuffer(
            self.data, np.uint8, count=min(self.end - self.pos, 9 * n), offset=self.pos
        )
        stops = np.flatnonzero(window < 0x80)[:n]
        if len(stops) < n:
            return None
        starts = np.empty_like(stops)
        starts[0] = 0
        starts[1:] = stops[:-1] + 1
        lengths = stops - starts + 1
        if lengths.max() > 9:
            return None
        values = np.zeros(n, np.uint64)
        for k in range(int(lengths.max())):
            part = (window[np.minimum(starts + k, stops)] & 0x7F).astype(np.uint64)
            values |= np.where(k < lengths, part << np.uint64(7 * k), np.uint64(0))
        if int(values.max()) > maximum:
            return None
        self.pos += int(stops[-1]) + 1
        return values.tolist()  # type: ignore[no-any-return]

    def u8s(self, n: int, field: str) -> bytes:
        return self.take(n, field)

    def u64les(self, n: int, field: str) -> tuple[int, ...]:
        self.need(8 * n, field)
        values = struct.unpack_from(f"<{n}Q", self.data, self.pos)
        self.pos += 8 * n
        return values

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise self.fail(
                f"{self.end - self.pos} unexpected bytes after the {what}",
                "OCDBT-007",
                expected=0,
                got=self.end - self.pos,
            )


#: `_Cursor.varints` of this many or more are read by numpy (`_short_varints`) when they are
#: not all one byte: a B+tree leaf node of 200,000 values has a multi-byte length each.
_VECTOR_VARINTS = 64


# --------------------------------------------------------------------------------------------
# structures
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFileId:
    """One data file: `base_path + relative_path`, relative to the database directory.

    `base_path` already includes the transitive path of the node whose table listed the file.
    """

    base_path: bytes
    relative_path: bytes

    @property
    def path(self) -> bytes:
        return self.base_path + self.relative_path


@dataclass(frozen=True, slots=True)
class IndirectDataReference:
    """A byte range of a data file."""

    file_id: DataFileId
    offset: int
    length: int


@dataclass(frozen=True)
class BtreeNodeStatistics:
    num_indirect_value_bytes: int
    num_tree_bytes: int
    num_keys: int


@dataclass(frozen=True)
class BtreeNodeReference:
    """Where a B+tree node lies (None: no node, the root of an empty tree) and its statistics."""

    location: IndirectDataReference | None
    statistics: BtreeNodeStatistics


@dataclass(frozen=True)
class BtreeGenerationReference:
    """One version: a version-tree leaf entry (also the manifest's inline versions)."""

    root: BtreeNodeReference
    generation_number: int
    root_height: int
    commit_time: int  # nanoseconds since the Unix epoch, as written


@dataclass(frozen=True)
class VersionNodeReference:
    """A version-tree interior entry (also the manifest's `version_tree_nodes`)."""

    location: IndirectDataReference
    generation_number: int  # latest generation in the subtree
    height: int  # height of the referenced node
    num_generations: int
    commit_time: int  # earliest commit time in the subtree, nanoseconds as written


@dataclass(frozen=True)
class ZstdCompression:
    level: int


@dataclass(frozen=True)
class Config:
    uuid: bytes
    manifest_kind: int
    max_inline_value_bytes: int
    max_decoded_node_bytes: int
    version_tree_arity_log2: int
    compression: ZstdCompression | None


def node_bound(config: Config, *, limit: int | None = None) -> int:
    """The most bytes one B+tree or version tree node of a database with `config` may decode to
    (spec/ocdbt.md section 5.1, `OCDBT-006`): at most `limit`, and for a database whose
    `max_decoded_node_bytes` is not 0 (no target) at most

        2 x max_decoded_node_bytes + 4 x max_inline_value_bytes + 2^arity_log2 KiB + 1 MiB

    The writer's target counts about half of a node's encoded bytes or more (its estimate
    gives each entry 16 to 56 bytes of fixed fields, which encode as varints, and a data file
    path per entry), and a node exceeds it only by the entries it must hold (one leaf entry,
    two interior entries: keys of up to 64 KiB and inline values); a version tree node holds
    up to 2^arity_log2 entries of well under 1 KiB. `limit` defaults to the limits in force."""
    if limit is None:
        limit = limits_in_force().max_node_bytes
    if config.max_decoded_node_bytes == 0:
        return limit
    bound = (
        2 * config.max_decoded_node_bytes
        + 4 * config.max_inline_value_bytes
        + (1 << 10 << config.version_tree_arity_log2)
        + (1 << 20)
    )
    return min(limit, bound)


@dataclass(frozen=True)
class Manifest:
    """A decoded manifest. A numbered-kind `manifest.ocdbt` has no version tree (both empty)."""

    config: Config
    versions: tuple[BtreeGenerationReference, ...]
    version_tree_nodes: tuple[VersionNodeReference, ...]
    data_file_table: tuple[DataFileId, ...] = field(default=(), compare=False, repr=False)

    @property
    def has_version_tree(self) -> bool:
        return self.config.manifest_kind == MANIFEST_KIND_SINGLE


@dataclass(frozen=True)
class VersionTreeNode:
    height: int
    version_tree_arity_log2: int
    entries: tuple[BtreeGenerationReference, ...] | tuple[VersionNodeReference, ...]
    data_file_table: tuple[DataFileId, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True, slots=True)  # a leaf node of Orbax's holds 100,000s of them
class LeafNodeEntry:
    """A key/value entry of a leaf; `key` is relative to the node's key prefix."""

    key: bytes
    value: Union[bytes, IndirectDataReference]  # noqa: UP007 (readable in docs)

    @property
    def value_length(self) -> int:
        v = self.value
        return v.length if isinstance(v, IndirectDataReference) else len(v)


@dataclass(frozen=True)
class InteriorNodeEntry:
    """A child of an interior node; `key` is relative to the node's key prefix."""

    key: bytes
    subtree_common_prefix_length: int
    node: BtreeNodeReference

    @property
    def subtree_common_prefix(self) -> bytes:
        return self.key[: self.subtree_common_prefix_length]


@dataclass(frozen=True)
class BtreeNode:
    height: int
    entries: tuple[LeafNodeEntry, ...] | tuple[InteriorNodeEntry, ...]
    data_file_table: tuple[DataFileId, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Envelope:
    magic: int
    length: int
    version: int
    compression: int
    body: bytes
    crc32c: int


# --------------------------------------------------------------------------------------------
# envelope
# --------------------------------------------------------------------------------------------

_MAGIC_NAMES = {
    MANIFEST_MAGIC: "manifest",
    VERSION_NODE_MAGIC: "version tree node",
    BTREE_NODE_MAGIC: "B+tree node",
}


def decode_envelope(
    data: bytes | memoryview,
    *,
    magic: int,
    file: object = None,
    offset: int = 0,
    max_decoded_bytes: int | None = None,
) -> Envelope:
    """Check magic, length, CRC-32C, version and compression; return the decoded body.

    `data` is exactly the encoded structure (a whole manifest file, or the referenced byte range
    of a data file, whose position in the file is `offset`); `max_decoded_bytes` defaults to
    the limits in force.
    """
    if max_decoded_bytes is None:
        max_decoded_bytes = limits_in_force().max_node_bytes
    data = bytes(data)
    what = _MAGIC_NAMES.get(magic, "structure")
    cur = _Cursor(data, file=file, base=offset)
    if len(data) < _MIN_ENVELOPE:
        raise cur.fail(
            f"{what} too short for its envelope",
            "OCDBT-002",
            pos=0,
            expected=f">= {_MIN_ENVELOPE} bytes",
            got=len(data),
        )
    got_magic = cur.data[0] << 24 | cur.data[1] << 16 | cur.data[2] << 8 | cur.data[3]
    if got_magic != magic:
        raise cur.fail(
            f"bad {what} magic",
            "OCDBT-001",
            pos=0,
            expected=f"0x{magic:08x}",
            got=f"0x{got_magic:08x}",
        )
    cur.pos = 4
    length = cur.u64le("length")
    if length != len(data):
        raise cur.fail(
            f"{what} length field does not match its size",
            "OCDBT-002",
            pos=4,
            expected=len(data),
            got=length,
        )
    stored_crc = struct.unpack_from("<I", data, len(data) - 4)[0]
    actual_crc = crc32c(data[:-4])
    if stored_crc != actual_crc:
        raise cur.fail(
            f"{what} CRC-32C mismatch",
            "OCDBT-005",
            pos=len(data) - 4,
            expected=f"0x{actual_crc:08x}",
            got=f"0x{stored_crc:08x}",
        )
    cur.end = len(data) - 4
    at = cur.pos
    version = cur.varint("version")
    if version != 0:
        raise cur.fail(
            f"unsupported {what} format version", "OCDBT-003", pos=at, expected=0, got=version
        )
    at = cur.pos
    compression = cur.varint("compression_format")
    if compression not in (0, 1):
        raise cur.fail(
            f"unknown {what} compression_format",
            "OCDBT-004",
            pos=at,
            expected="0 or 1",
            got=compression,
        )
    raw = data[cur.pos : cur.end]
    if compression == 0:
        if len(raw) > max_decoded_bytes:
            raise cur.fail(
                f"{what} body exceeds the decoded size limit",
                "OCDBT-006",
                expected=f"<= {max_decoded_bytes}",
                got=len(raw),
            )
        body = raw
    else:
        body = zstd_decompress(
            raw, max_output_size=max_decoded_bytes, file=file, pointer=cur.label()
        )
    return Envelope(magic, length, version, compression, body, stored_crc)


def encode_envelope(magic: int, body: bytes, *, compression: int = 0, level: int = 0) -> bytes:
    """Encode a structure (used by tests and the corruptors): header, body, CRC-32C."""
    if compression == 1:
        body = zstd_compress(body, level=level)
    elif compression != 0:
        raise ValueError("compression must be 0 or 1")
    tail = encode_varint(0) + encode_varint(compression) + body
    total = _HEADER_FIXED + len(tail) + 4
    head = struct.pack(">I", magic) + struct.pack("<Q", total)
    encoded = head + tail
    return encoded + struct.pack("<I", crc32c(encoded))


def _body_cursor(env: Envelope, *, file: object, offset: int) -> _Cursor:
    if env.compression == 0:
        # the body sits in the file right after the header, before the 4-byte checksum
        return _Cursor(env.body, file=file, base=offset + env.length - 4 - len(env.body))
    return _Cursor(env.body, file=file, body_of=offset)


# --------------------------------------------------------------------------------------------
# shared sub-structures
# --------------------------------------------------------------------------------------------


def _data_file_table(cur: _Cursor, transitive_path: bytes) -> tuple[DataFileId, ...]:
    n = cur.count("num_files", 2)
    max_path = limits_in_force().max_key_bytes
    prefix_lengths = cur.varints(max(n - 1, 0), "path_prefix_length", max_path)
    suffix_at = cur.pos
    suffix_lengths = cur.varints(n, "path_suffix_length", max_path)
    base_lengths = cur.varints(n, "base_path_length", max_path)
    cur.need(sum(suffix_lengths), "path_suffix")
    files: list[DataFileId] = []
    prev = b""
    prev_base_len = 0
    for i in range(n):
        start = cur.pos
        suffix = cur.take(suffix_lengths[i], "path_suffix")
        prefix_len = prefix_lengths[i - 1] if i else 0
        if prefix_len > len(prev):
            raise cur.fail(
                f"data file {i}: path_prefix_length exceeds the previous path",
                "OCDBT-020",
                pos=suffix_at,
                expected=f"<= {len(prev)}",
                got=prefix_len,
            )
        path = prev[:prefix_len] + suffix
        base_len = base_lengths[i]
        if base_len > len(path):
            raise cur.fail(
                f"data file {i}: base_path_length exceeds the path",
                "OCDBT-020",
                pos=start,
                expected=f"<= {len(path)}",
                got=base_len,
            )
        if (
            i
            and prefix_len > min(base_len, prev_base_len)
            and (base_len != prev_base_len or path[:base_len] != prev[:prev_base_len])
        ):
            raise cur.fail(
                f"data file {i}: shared prefix extends past a base path that differs from the "
                "previous one",
                "OCDBT-020",
                pos=start,
            )
        full = transitive_path + path
        if len(full) > max_path:
            raise cur.fail(
                f"data file {i}: path longer than {max_path} bytes",
                "OCDBT-020",
                pos=start,
                got=len(full),
            )
        files.append(DataFileId(transitive_path + path[:base_len], path[base_len:]))
        prev, prev_base_len = path, base_len
    return tuple(files)


def _file_ids(cur: _Cursor, n: int, table: tuple[DataFileId, ...]) -> list[int]:
    at = cur.pos
    ids = cur.varints(n, "data_file_id")
    for i in ids:
        if i >= len(table):
            raise cur.fail(
                "data_file_id out of range of the data file table",
                "OCDBT-021",
                pos=at,
                expected=f"< {len(table)}",
                got=i,
            )
    return ids


def _check_ranges(cur: _Cursor, offsets, lengths, at: int, *, allow_none: bool) -> None:
    for off, length in zip(offsets, lengths, strict=False):
        if allow_none and off == NO_ROOT and length == NO_ROOT:
            continue
        if off + length > _U64_MAX:
            raise cur.fail(
                "data_file_offset + data_file_length overflows 64 bits",
                "OCDBT-022",
                pos=at,
                got=(off, length),
            )


def _generations(cur: _Cursor, n: int, field: str) -> list[int]:
    at = cur.pos
    gens = cur.varints(n, field)
    prev = 0
    for g in gens:
        if g <= prev:
            raise cur.fail(
                "generation numbers must be non-zero and strictly increasing",
                "OCDBT-030",
                pos=at,
                got=gens,
            )
        prev = g
    return gens


def _leaf_versions(
    cur: _Cursor, arity_log2: int, table: tuple[DataFileId, ...], where: str
) -> tuple[BtreeGenerationReference, ...]:
    at = cur.pos
    # per entry at least: generation, height, id, offset, length, 3 statistics (1 byte each) + 8
    n = cur.count("num_versions", 16, 1 << arity_log2)
    if n == 0:
        raise cur.fail(f"{where} must reference at least one version", "OCDBT-031", pos=at, got=0)
    gens = _generations(cur, n, "generation_number")
    heights = cur.u8s(n, "root_height")
    ids = _file_ids(cur, n, table)
    at_ref = cur.pos
    offsets = cur.varints(n, "data_file_offset")
    lengths = cur.varints(n, "data_file_length")
    _check_ranges(cur, offsets, lengths, at_ref, allow_none=True)
    num_keys = cur.varints(n, "num_keys")
    num_tree_bytes = cur.varints(n, "num_tree_bytes")
    num_indirect = cur.varints(n, "num_indirect_value_bytes")
    times = cur.u64les(n, "commit_time")
    limit = ((gens[-1] - 1) % (1 << arity_log2)) + 1
    if n > limit:
        raise cur.fail(
            f"{where} holds more versions than the version tree arity allows",
            "OCDBT-031",
            pos=at,
            expected=f"<= {limit}",
            got=n,
        )
    out = []
    for i in range(n):
        if offsets[i] == NO_ROOT and lengths[i] == NO_ROOT:
            location = None
            if heights[i] != 0:
                raise cur.fail(
                    "root_height must be 0 when a version has no root node",
                    "OCDBT-033",
                    pos=at,
                    got=heights[i],
                )
        else:
            location = IndirectDataReference(table[ids[i]], offsets[i], lengths[i])
        stats = BtreeNodeStatistics(num_indirect[i], num_tree_bytes[i], num_keys[i])
        out.append(
            BtreeGenerationReference(
                BtreeNodeReference(location, stats), gens[i], heights[i], times[i]
            )
        )
    return tuple(out)


def _interior_versions(
    cur: _Cursor,
    arity_log2: int,
    table: tuple[DataFileId, ...],
    *,
    node_height: int | None,
) -> tuple[VersionNodeReference, ...]:
    """Interior version entries; node_height None means the manifest's `version_tree_nodes`."""
    at = cur.pos
    in_manifest = node_height is None
    maximum = (64 // arity_log2 + 1) if in_manifest else (1 << arity_log2)
    n = cur.count("num_children", 13, maximum)
    if n == 0 and not in_manifest:
        raise cur.fail("an interior version node must have children", "OCDBT-031", pos=at, got=0)
    gens = _generations(cur, n, "generation_number")
    ids = _file_ids(cur, n, table)
    at_ref = cur.pos
    offsets = cur.varints(n, "data_file_offset")
    lengths = cur.varints(n, "data_file_length")
    _check_ranges(cur, offsets, lengths, at_ref, allow_none=False)
    num_generations = cur.varints(n, "num_generations")
    times = cur.u64les(n, "commit_time")
    if in_manifest:
        at_h = cur.pos
        heights = list(cur.u8s(n, "entry_height"))
        for i, h in enumerate(heights):
            if h == 0 or (i and h >= heights[i - 1]) or (h + 1) * arity_log2 >= 64:
                raise cur.fail(
                    "version_tree_nodes heights must be >= 1 and strictly decreasing",
                    "OCDBT-032",
                    pos=at_h,
                    got=heights,
                )
    else:
        heights = [node_height - 1] * n
        shift = arity_log2 * node_height
        limit = (((gens[-1] >> shift) - 1) % (1 << arity_log2)) + 1 if n else 0
        if n > limit:
            raise cur.fail(
                "interior version node holds more children than the arity allows",
                "OCDBT-031",
                pos=at,
                expected=f"<= {limit}",
                got=n,
            )
    if 0 in num_generations:
        raise cur.fail("num_generations must not be 0", "OCDBT-031", pos=at, got=num_generations)
    return tuple(
        VersionNodeReference(
            IndirectDataReference(table[ids[i]], offsets[i], lengths[i]),
            gens[i],
            heights[i],
            num_generations[i],
            times[i],
        )
        for i in range(n)
    )


# --------------------------------------------------------------------------------------------
# manifest
# --------------------------------------------------------------------------------------------


def decode_manifest(
    data: bytes | memoryview,
    *,
    file: object = None,
    max_decoded_bytes: int | None = None,
) -> Manifest:
    """Decode a whole manifest file (`manifest.ocdbt` or a numbered `manifest.<016x>`)."""
    env = decode_envelope(
        data, magic=MANIFEST_MAGIC, file=file, max_decoded_bytes=max_decoded_bytes
    )
    cur = _body_cursor(env, file=file, offset=0)
    uuid = cur.take(16, "uuid")
    at = cur.pos
    kind = cur.u8("manifest_kind")
    if kind not in (MANIFEST_KIND_SINGLE, MANIFEST_KIND_NUMBERED):
        raise cur.fail("unknown manifest_kind", "OCDBT-010", pos=at, expected="0 or 1", got=kind)
    max_inline = cur.varint("max_inline_value_bytes")
    max_node = cur.varint("max_decoded_node_bytes")
    at = cur.pos
    arity = cur.u8("version_tree_arity_log2")
    if not 1 <= arity <= _MAX_ARITY_LOG2:
        raise cur.fail(
            "version_tree_arity_log2 out of range",
            "OCDBT-011",
            pos=at,
            expected=f"1..{_MAX_ARITY_LOG2}",
            got=arity,
        )
    at = cur.pos
    method = cur.varint("compression_method")
    if method == 0:
        compression = None
    elif method == 1:
        compression = ZstdCompression(cur.i32le("zstd level"))
    else:
        raise cur.fail(
            "unknown compression_method", "OCDBT-012", pos=at, expected="0 or 1", got=method
        )
    config = Config(uuid, kind, max_inline, max_node, arity, compression)
    if kind == MANIFEST_KIND_NUMBERED:
        cur.done("configuration of a numbered-kind manifest")
        return Manifest(config, (), ())
    table = _data_file_table(cur, b"")
    versions = _leaf_versions(cur, arity, table, "the manifest")
    nodes = _interior_versions(cur, arity, table, node_height=None)
    cur.done("manifest")
    if nodes and nodes[-1].generation_number >= versions[0].generation_number:
        raise cur.fail(
            "version_tree_nodes must hold only generations older than the inline versions",
            "OCDBT-032",
            got=(nodes[-1].generation_number, versions[0].generation_number),
        )
    return Manifest(config, versions, nodes, table)


# --------------------------------------------------------------------------------------------
# version tree node
# --------------------------------------------------------------------------------------------


def decode_version_tree_node(
    data: bytes | memoryview,
    *,
    file: object = None,
    offset: int = 0,
    transitive_path: bytes = b"",
    max_decoded_bytes: int | None = None,
) -> VersionTreeNode:
    """Decode a version tree node (the byte range a `VersionNodeReference` points at)."""
    env = decode_envelope(
        data,
        magic=VERSION_NODE_MAGIC,
        file=file,
        offset=offset,
        max_decoded_bytes=max_decoded_bytes,
    )
    cur = _body_cursor(env, file=file, offset=offset)
    at = cur.pos
    arity = cur.u8("version_tree_arity_log2")
    if not 1 <= arity <= _MAX_ARITY_LOG2:
        raise cur.fail(
            "version_tree_arity_log2 out of range", "OCDBT-011", pos=at, expected="1..16", got=arity
        )
    at = cur.pos
    height = cur.u8("height")
    if (height + 1) * arity >= 64:
        raise cur.fail(
            "version tree node height too large for its arity", "OCDBT-032", pos=at, got=height
        )
    table = _data_file_table(cur, transitive_path)
    if height == 0:
        entries: tuple = _leaf_versions(cur, arity, table, "a version tree leaf node")
    else:
        entries = _interior_versions(cur, arity, table, node_height=height)
    cur.done("version tree node")
    return VersionTreeNode(height, arity, entries, table)


# --------------------------------------------------------------------------------------------
# B+tree node
# --------------------------------------------------------------------------------------------


def _joined_keys(
    prefix_lengths: list[int], suffix_lengths: list[int], suffixes: bytes
) -> list[bytes]:
    """Each key: the first `prefix_lengths[i - 1]` bytes of the key before it, then its
    suffix (unchecked: a prefix longer than the key before is cut short; `_keys` checks)."""
    keys: list[bytes] = []
    append = keys.append
    prev = b""
    end = 0
    for p, size in zip(itertools.chain((0,), prefix_lengths), suffix_lengths, strict=True):
        start = end
        end += size
        prev = prev[:p] + suffixes[start:end]
        append(prev)
    return keys


def _keys(cur: _Cursor, n: int, *, with_common_prefix: bool) -> tuple[list[bytes], list[int]]:
    at = cur.pos
    prefix_lengths = cur.varints(n - 1, "key_prefix_length")
    suffix_lengths = cur.varints(n, "key_suffix_length")
    common = cur.varints(n, "subtree_common_prefix_length") if with_common_prefix else []
    suffixes = cur.take(sum(suffix_lengths), "key_suffix")  # sliced below: one copy in all
    max_key = limits_in_force().max_key_bytes
    keys = _joined_keys(prefix_lengths, suffix_lengths, suffixes)
    lengths = list(map(len, keys))
    if (
        all(map(operator.le, prefix_lengths, lengths))
        and max(lengths) <= max_key
        and all(map(operator.lt, keys, itertools.islice(keys, 1, None)))
        and (not with_common_prefix or all(map(operator.le, common, lengths)))
    ):
        return keys, common
    # a fault: the checks one key at a time name the first
    keys = []
    prev = b""
    end = 0
    for i in range(n):
        start, end = end, end + suffix_lengths[i]
        suffix = suffixes[start:end]
        p = prefix_lengths[i - 1] if i else 0
        if p > len(prev):
            raise cur.fail(
                f"entry {i}: key_prefix_length exceeds the previous key",
                "OCDBT-041",
                pos=at,
                expected=f"<= {len(prev)}",
                got=p,
            )
        key = prev[:p] + suffix
        if len(key) > max_key:
            raise cur.fail(
                f"entry {i}: key too long",
                "OCDBT-008",
                pos=at,
                expected=f"<= {max_key} bytes",
                got=len(key),
            )
        if i and key <= prev:
            raise cur.fail(
                f"entry {i}: keys must be strictly increasing",
                "OCDBT-041",
                pos=at,
                expected=f"> {prev!r}",
                got=key,
            )
        if with_common_prefix and common[i] > len(key):
            raise cur.fail(
                f"entry {i}: subtree_common_prefix_length exceeds the key",
                "OCDBT-042",
                pos=at,
                expected=f"<= {len(key)}",
                got=common[i],
            )
        keys.append(key)
        prev = key
    return keys, common


def decode_btree_node(
    data: bytes | memoryview,
    *,
    file: object = None,
    offset: int = 0,
    transitive_path: bytes = b"",
    max_decoded_bytes: int | None = None,
) -> BtreeNode:
    """Decode a B+tree node (the byte range a `BtreeNodeReference` points at)."""
    env = decode_envelope(
        data, magic=BTREE_NODE_MAGIC, file=file, offset=offset, max_decoded_bytes=max_decoded_bytes
    )
    cur = _body_cursor(env, file=file, offset=offset)
    height = cur.u8("height")
    table = _data_file_table(cur, transitive_path)
    at = cur.pos
    n = cur.count("num_entries", 3)
    if n == 0:
        raise cur.fail("a B+tree node must hold at least one entry", "OCDBT-040", pos=at, got=0)
    if height == 0:
        keys, _ = _keys(cur, n, with_common_prefix=False)
        lengths = cur.varints(n, "value_length")
        at = cur.pos
        kinds = cur.u8s(n, "value_kind")
        if max(kinds) > 1:
            got = next(k for k in kinds if k > 1)
            raise cur.fail("value_kind must be 0 or 1", "OCDBT-043", pos=at, got=got)
        indirect = [i for i, k in enumerate(kinds) if k] if 1 in kinds else []
        ids = _file_ids(cur, len(indirect), table)
        at = cur.pos
        offsets = cur.varints(len(indirect), "data_file_offset")
        _check_ranges(cur, offsets, [lengths[i] for i in indirect], at, allow_none=False)
        direct_total = (
            sum(lengths[i] for i in range(n) if kinds[i] == 0) if indirect else sum(lengths)
        )
        values = cur.take(direct_total, "inline values")  # sliced below: one copy in all
        found: list = [None] * n  # each entry's value, then one LeafNodeEntry per key
        for k, i in enumerate(indirect):
            found[i] = IndirectDataReference(table[ids[k]], offsets[k], lengths[i])
        inline: dict[bytes, bytes] = {}  # equal inline values (the zarr metadata of arrays
        end = 0  # of one shape and dtype) are kept once
        if not indirect:  # every value inline: sliced and shared without a step per value
            bounds = map(
                slice, itertools.accumulate(lengths, initial=0), itertools.accumulate(lengths)
            )
            found = [inline.setdefault(v, v) for v in map(values.__getitem__, bounds)]
        for i in range(n) if 0 < len(indirect) < n else ():
            if not kinds[i]:
                start, end = end, end + lengths[i]
                value = values[start:end]
                found[i] = inline.setdefault(value, value)
        entries: list = list(map(LeafNodeEntry, keys, found))
    else:
        keys, common = _keys(cur, n, with_common_prefix=True)
        ids = _file_ids(cur, n, table)
        at = cur.pos
        offsets = cur.varints(n, "data_file_offset")
        lengths = cur.varints(n, "data_file_length")
        _check_ranges(cur, offsets, lengths, at, allow_none=False)
        num_keys = cur.varints(n, "num_keys")
        num_tree_bytes = cur.varints(n, "num_tree_bytes")
        num_indirect = cur.varints(n, "num_indirect_value_bytes")
        entries = [
            InteriorNodeEntry(
                keys[i],
                common[i],
                BtreeNodeReference(
                    IndirectDataReference(table[ids[i]], offsets[i], lengths[i]),
                    BtreeNodeStatistics(num_indirect[i], num_tree_bytes[i], num_keys[i]),
                ),
            )
            for i in range(n)
        ]
    cur.done("B+tree node")
    return BtreeNode(height, tuple(entries), table)


# --------------------------------------------------------------------------------------------
# encoders (the inverse of the decoders; used by tests, corruptors and fixture builders)
# --------------------------------------------------------------------------------------------


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of two keys (slices compared in C, bisected)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo], a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _prefix_lengths(keys: list[bytes]) -> list[int]:
    """0, then the common prefix length of each key with the one before it; for many keys
    compared as rows of a byte matrix (numpy), when that matrix stays under 64 MiB."""
    width = max(map(len, keys), default=0)
    if len(keys) < 64 or width == 0 or width * len(keys) > 64 << 20:
        return [0] + [_common_prefix(keys[i - 1], keys[i]) for i in range(1, len(keys))]
    import numpy as np

    rows = np.array(keys, dtype=f"S{width}").view(np.uint8).reshape(len(keys), width)
    differ = rows[1:] != rows[:-1]
    first = np.where(differ.any(axis=1), differ.argmax(axis=1), width)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    # zero padding past a key's end compares equal to nothing real: cap at the shorter key
    return [0, *np.minimum(first, np.minimum(lengths[1:], lengths[:-1])).tolist()]


def _encode_table(files: tuple[DataFileId, ...], transitive_path: bytes) -> bytes:
    paths, bases = [], []
    for f in files:
        if not f.base_path.startswith(transitive_path):
            raise ValueError("a data file's base path must start with the transitive path")
        base = f.base_path[len(transitive_path) :]
        bases.append(len(base))
        paths.append(base + f.relative_path)
    out = bytearray(encode_varint(len(files)))
    prefixes = []
    for i in range(1, len(files)):
        p = _common_prefix(paths[i - 1], paths[i])
        if paths[i - 1][: bases[i - 1]] != paths[i][: bases[i]]:
            p = min(p, bases[i], bases[i - 1])
        prefixes.append(p)
    for p in prefixes:
        out += encode_varint(p)
    for i, path in enumerate(paths):
        out += encode_varint(len(path) - (prefixes[i - 1] if i else 0))
    for b in bases:
        out += encode_varint(b)
    for i, path in enumerate(paths):
        out += path[prefixes[i - 1] if i else 0 :]
    return bytes(out)


class _Table:
    """The data file table of one structure: its files sorted by path, as tensorstore writes
    them (the manifests of Orbax 0.12.8), the id of each being its index."""

    def __init__(self, refs: Iterable[IndirectDataReference | None]) -> None:
        files = {_EMPTY_FILE if r is None else r.file_id for r in refs}
        self.files = sorted(files, key=lambda f: (f.path, f.base_path))
        self.ids = {f: i for i, f in enumerate(self.files)}

    def id(self, f: DataFileId) -> int:
        return self.ids[f]


#: The table entry of a generation with an empty tree (spec/ocdbt.md section 9, note 3).
_EMPTY_FILE = DataFileId(b"", b"")


def _ref(table: _Table, ref: IndirectDataReference | None) -> tuple[int, int, int]:
    if ref is None:
        return table.id(_EMPTY_FILE), NO_ROOT, NO_ROOT
    return table.id(ref.file_id), ref.offset, ref.length


def _encode_leaf_versions(table: _Table, versions) -> bytes:
    refs = [_ref(table, v.root.location) for v in versions]
    out = bytearray(encode_varint(len(versions)))
    for v in versions:
        out += encode_varint(v.generation_number)
    out += bytes(v.root_height for v in versions)
    for col in range(3):
        for r in refs:
            out += encode_varint(r[col])
    for name in ("num_keys", "num_tree_bytes", "num_indirect_value_bytes"):
        for v in versions:
            out += encode_varint(getattr(v.root.statistics, name))
    for v in versions:
        out += struct.pack("<Q", v.commit_time)
    return bytes(out)


def _encode_interior_versions(table: _Table, refs_, *, in_manifest: bool) -> bytes:
    refs = [_ref(table, v.location) for v in refs_]
    out = bytearray(encode_varint(len(refs_)))
    for v in refs_:
        out += encode_varint(v.generation_number)
    for col in range(3):
        for r in refs:
            out += encode_varint(r[col])
    for v in refs_:
        out += encode_varint(v.num_generations)
    for v in refs_:
        out += struct.pack("<Q", v.commit_time)
    if in_manifest:
        out += bytes(v.height for v in refs_)
    return bytes(out)


def _config_bytes(c: Config) -> bytes:
    out = bytearray(c.uuid)
    out.append(c.manifest_kind)
    out += encode_varint(c.max_inline_value_bytes) + encode_varint(c.max_decoded_node_bytes)
    out.append(c.version_tree_arity_log2)
    if c.compression is None:
        out += encode_varint(0)
    else:
        out += encode_varint(1) + struct.pack("<i", c.compression.level)
    return bytes(out)


def _compression_of(c: Config | None, compression: int | None) -> int:
    if compression is not None:
        return compression
    return 0 if c is None or c.compression is None else 1


def encode_manifest(m: Manifest, *, compression: int | None = None) -> bytes:
    """Encode a manifest (the data file table is rebuilt from the references)."""
    body = _config_bytes(m.config)
    if m.config.manifest_kind == MANIFEST_KIND_SINGLE:
        locations = [v.root.location for v in m.versions]
        table = _Table(locations + [v.location for v in m.version_tree_nodes])
        versions = _encode_leaf_versions(table, m.versions)
        nodes = _encode_interior_versions(table, m.version_tree_nodes, in_manifest=True)
        body += _encode_table(tuple(table.files), b"") + versions + nodes
    return encode_envelope(MANIFEST_MAGIC, body, compression=_compression_of(m.config, compression))


def encode_version_tree_node(
    n: VersionTreeNode, *, transitive_path: bytes = b"", compression: int = 1
) -> bytes:
    if n.height == 0:
        table = _Table(e.root.location for e in n.entries)  # type: ignore[union-attr]
        entries = _encode_leaf_versions(table, n.entries)
    else:
        table = _Table(e.location for e in n.entries)  # type: ignore[union-attr]
        entries = _encode_interior_versions(table, n.entries, in_manifest=False)
    body = (
        bytes([n.version_tree_arity_log2, n.height])
        + _encode_table(tuple(table.files), transitive_path)
        + entries
    )
    return encode_envelope(VERSION_NODE_MAGIC, body, compression=compression)


def _varints(values: Iterable[int]) -> bytes:
    """The varints of `values`, concatenated (one-byte ones looked up, not computed)."""
    small = _SMALL_VARINTS
    return b"".join([small[v] if 0 <= v < 0x80 else encode_varint(v) for v in values])


def encode_btree_node(
    n: BtreeNode, *, transitive_path: bytes = b"", compression: int = 1, level: int = 0
) -> bytes:
    entries = n.entries
    keys = [e.key for e in entries]
    prefixes = _prefix_lengths(keys)
    head = [
        _varints(prefixes[1:]),
        _varints([len(k) - p for k, p in zip(keys, prefixes, strict=True)]),
    ]
    suffixes = b"".join([k[p:] for k, p in zip(keys, prefixes, strict=True)])
    if n.height == 0:
        values = [e.value for e in entries]  # type: ignore[union-attr]
        inline = [type(v) is bytes for v in values]
        indirect = [v for v, i in zip(values, inline, strict=True) if not i]
        table = _Table(indirect)
        rest = [
            suffixes,
            _varints([len(v) if i else v.length for v, i in zip(values, inline, strict=True)]),
            bytes([0 if i else 1 for i in inline]),
            _varints([table.id(r.file_id) for r in indirect]),
            _varints([r.offset for r in indirect]),
            b"".join([v for v, i in zip(values, inline, strict=True) if i]),
        ]
    else:
        table = _Table(e.node.location for e in entries)  # type: ignore[union-attr]
        head.append(_varints([e.subtree_common_prefix_length for e in entries]))  # type: ignore[union-attr]
        refs = [_ref(table, e.node.location) for e in entries]  # type: ignore[union-attr]
        rest = [suffixes, *(_varints([r[col] for r in refs]) for col in range(3))]
        for name in ("num_keys", "num_tree_bytes", "num_indirect_value_bytes"):
            rest.append(_varints([getattr(e.node.statistics, name) for e in entries]))  # type: ignore[union-attr]
    body = b"".join(
        [
            bytes([n.height]),
            _encode_table(tuple(table.files), transitive_path),
            encode_varint(len(entries)),
            *head,
            *rest,
        ]
    )
    return encode_envelope(BTREE_NODE_MAGIC, body, compression=compression, level=level)
