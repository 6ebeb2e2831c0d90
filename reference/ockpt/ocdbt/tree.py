"""Reading an OCDBT database directory: manifest, version tree, B+tree, values (spec/ocdbt.md).

`Database(path)` opens the directory holding `manifest.ocdbt`, a path or any `store.Store`.
Reads resolve data file paths against that directory and refuse any path that leaves it,
whether by its text (`..`, absolute paths: OCDBT-023) or through a symlink (PATH-004).
"""

from __future__ import annotations

import bisect
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from ..errors import FormatError, MissingDataError, OcdbtError
from ..limits import current as limits_in_force
from ..names import MANIFEST_FILE
from ..store import Store, as_store
from ..store.byterange import ByteRange
from ..store.claims import ValueClaims
from ..store.datafile import DataFile
from . import format as fmt
from .format import (
    BtreeGenerationReference,
    BtreeNode,
    BtreeNodeReference,
    DataFileId,
    IndirectDataReference,
    LeafNodeEntry,
    Manifest,
    VersionNodeReference,
    VersionTreeNode,
)

__all__ = ["Database", "key_successor"]

_NUMBERED = re.compile(r"manifest\.([0-9a-f]{16})")
#: bound on the size of a manifest file


def key_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def _as_key(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


#: Point lookups in one version after which its whole tree is indexed by key (`Database._index`).
INDEX_AFTER_LOOKUPS = 256
#: No index is built for a version with more keys than this (a dict entry is about 100 bytes).
INDEX_MAX_KEYS = 2_000_000


def _referenced(origin: str | None, pointer: str | None) -> str:
    """Where a data file's reference was found: its origin ("value", "btree node" ...) and the
    pointer within it (a key, ``@offset``), for errors that name the file it resolves to."""
    return f"referenced from {origin}{' ' + pointer if pointer else ''}"


def _past_end(ref: IndirectDataReference, f: DataFile, at: int | None = None) -> OcdbtError:
    """OCDBT-022 for a reference whose bytes the data file `f` does not hold: it is shorter,
    or it shrank under the read (at byte `at`)."""
    if at is not None and f.size is not None and ref.offset + ref.length <= f.size:
        return OcdbtError(
            "data file ended early", rule="OCDBT-022", file=f.display, pointer=f"@{at}"
        )
    size = {} if f.size is None else {"expected": f"offset + length <= {f.size}"}
    return OcdbtError(
        "reference reaches past the end of the data file",
        rule="OCDBT-022",
        file=f.display,
        pointer=f"@{ref.offset}",
        got=f"{ref.offset} + {ref.length}",
        **size,
    )


class Database:
    """A read-only view of one OCDBT database.

    Args:
        path: the database directory (holding ``manifest.ocdbt``): a local path or URL, or a
            `store.Store` (an object store's values are read by ranged requests).
        display: how errors name `path` (default: as its store names it), for example as the
            user gave it.
        max_decoded_bytes: bound on a decoded manifest or node body (default: the limits in
            force when the database is opened, which also bound its manifest file's size and
            its trees' depth); a node is held to the smaller bound its manifest's
            configuration gives (`format.node_bound`).
        node_cache_size: how many decoded nodes to keep.
    """

    def __init__(
        self,
        path: str | os.PathLike | Store,
        *,
        display: str | os.PathLike | None = None,
        max_decoded_bytes: int | None = None,
        node_cache_size: int = 4096,
    ) -> None:
        self.store = as_store(path)
        if display is not None:
            self.store = self.store.with_display(os.fspath(display))
        self._shown = self.store.display
        self.limits = limits_in_force()
        self.max_decoded_bytes = (
            self.limits.max_node_bytes if max_decoded_bytes is None else max_decoded_bytes
        )
        self._node_bound: int | None = None
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = node_cache_size
        self._lock = threading.Lock()
        self._files: dict[bytes, DataFile] = {}
        self._fits: dict[bytes, int] = {}  # data file -> a length it is known to reach
        self._key_lists: dict[int, tuple[BtreeNode, list[bytes]]] = {}
        self._manifest: Manifest | None = None
        self._manifest_file: str | None = None
        self._lookups: dict[int, int] = {}  # generation -> point lookups made
        self._indexes: dict[int, dict[bytes, LeafNodeEntry] | None] = {}  # see `_index`
        self._claims = ValueClaims()  # the stored ranges of the values read, by key

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
            self._cache.clear()
            self._key_lists.clear()
            self._indexes.clear()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # ---------------------------------------------------------------- files

    def where(self, name: str = "") -> str:
        """How errors name the file `name` of the database (the database itself when empty):
        under `display`, kept as given (a relative path stays relative)."""
        return os.path.join(self._shown, name) if name else self._shown

    def _resolve(self, file_id: DataFileId, *, pointer: str | None, origin: str | None) -> str:
        """The data file's name relative to the database, after checking it (OCDBT-023)."""
        raw = file_id.path
        try:
            rel = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise OcdbtError(
                "data file path is not UTF-8",
                rule="OCDBT-023",
                file=self.where(),
                pointer=_referenced(origin, pointer),
                got=raw,
            ) from None
        parts = rel.split("/")
        if (
            not rel
            or rel.startswith("/")
            or "\\" in rel
            or "\0" in rel
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise OcdbtError(
                "data file path must be a relative path of plain components",
                rule="OCDBT-023",
                file=self.where(),
                pointer=_referenced(origin, pointer),
                got=rel,
            )
        return rel

    def _open(self, file_id: DataFileId, *, pointer, origin) -> DataFile:
        key = file_id.path
        with self._lock:
            hit = self._files.get(key)
            if hit is not None:
                return hit
        rel = self._resolve(file_id, pointer=pointer, origin=origin)
        display = self.where(rel)
        try:  # a FIFO or directory: PATH-005
            opened = self.store.open_file(rel)
        except FormatError as e:
            if e.rule != "PATH-004":
                raise
            # a path of plain components leaves only through a link (directories §2.2)
            raise OcdbtError(
                "data file resolves outside the checkpoint (a symbolic link leads out)",
                rule="PATH-004",
                file=display,
                pointer=_referenced(origin, pointer),
                got=rel,
            ) from None
        except (FileNotFoundError, NotADirectoryError):
            raise MissingDataError(
                "referenced data file is missing",
                rule="OCDBT-022",
                file=display,
                pointer=_referenced(origin, pointer),
            ) from None
        with self._lock:
            if key in self._files:
                opened.close()
                return self._files[key]
            if len(self._files) >= 256:
                self._files.pop(next(iter(self._files))).close()
            self._files[key] = opened
        return opened

    def _holding(
        self, ref: IndirectDataReference, *, origin: str | None, pointer: str | None
    ) -> DataFile:
        """The data file of `ref`, open; OCDBT-022 where its known size does not hold the
        reference's bytes (a file of unknown size is checked by the read)."""
        f = self._open(ref.file_id, pointer=pointer, origin=origin)
        if f.size is not None and ref.offset + ref.length > f.size:
            raise _past_end(ref, f)
        return f

    def read_range(
        self, ref: IndirectDataReference, *, origin: str | None = None, pointer: str | None = None
    ) -> bytes:
        """The bytes of a reference, after checking that they lie within the data file."""
        f = self._holding(ref, origin=origin, pointer=pointer)
        chunks = []
        offset, left = ref.offset, ref.length
        while left:
            chunk = f.pread(min(left, 1 << 30), offset)
            if not chunk:  # the file shrank under us, or (object store) it is shorter
                raise _past_end(ref, f, offset)
            chunks.append(chunk)
            offset += len(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def check_range(
        self, ref: IndirectDataReference, *, origin: str | None = None, pointer: str | None = None
    ) -> None:
        """`read_range`'s checks without its read where the data file's size is known (a local
        file): the bytes of `ref` lie within it (OCDBT-022). Elsewhere the range is read."""
        if self._holding(ref, origin=origin, pointer=pointer).size is None:
            self.read_range(ref, origin=origin, pointer=pointer)

    def read_range_into(
        self,
        ref: IndirectDataReference,
        buffer: Callable[[int], memoryview],
        *,
        origin: str | None = None,
        pointer: str | None = None,
    ) -> memoryview:
        """`read_range` into ``buffer(ref.length)``, a writable buffer of exactly that many bytes
        the caller may reuse (no fresh memory per read); the same checks."""
        f = self._holding(ref, origin=origin, pointer=pointer)
        if f.size is None:
            return memoryview(self.read_range(ref, origin=origin, pointer=pointer))
        view = buffer(ref.length)
        got = 0
        while got < ref.length:
            n = f.preadv(view[got:], ref.offset + got)
            if not n:  # the file shrank under us
                raise _past_end(ref, f, ref.offset + got)
            got += n
        return view

    def reference_fault(self, ref: IndirectDataReference) -> str | None:
        """Why the bytes of `ref` are not in its data file ("is missing", "ends at byte N"), or
        None when they are: a file's size, or on an object store a read of the reference's
        last byte (one per data file while its references stay within a length seen)."""
        try:
            f = self._open(ref.file_id, pointer=None, origin="value")
        except MissingDataError:
            return "is missing"
        end = ref.offset + ref.length
        if f.size is not None:
            return None if end <= f.size else f"ends at byte {f.size}"
        if end <= self._fits.get(ref.file_id.path, 0):
            return None
        if f.pread(1, end - 1) == b"":
            return f"ends before byte {end}"
        self._fits[ref.file_id.path] = end
        return None

    def _file_display(self, ref: IndirectDataReference) -> str:
        try:
            return self.where(ref.file_id.path.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(ref.file_id.path)

    def _cached(self, kind: str, ref: IndirectDataReference, decode):
        key = (kind, ref.file_id.path, ref.offset, ref.length)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        data = self.read_range(ref, origin=kind)
        node = decode(
            data,
            file=self._file_display(ref),
            offset=ref.offset,
            transitive_path=ref.file_id.base_path,
            max_decoded_bytes=self.node_bound,
        )
        with self._lock:
            self._cache[key] = node
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return node

    @property
    def node_bound(self) -> int:
        """The most bytes one node may decode to: the bound the manifest's configuration
        gives (`format.node_bound`: twice its `max_decoded_node_bytes` and some), within
        `max_decoded_bytes` (OCDBT-006)."""
        bound = self._node_bound
        if bound is None:
            bound = fmt.node_bound(self.manifest.config, limit=self.max_decoded_bytes)
            self._node_bound = bound
        return bound

    def read_btree_node(self, ref: IndirectDataReference) -> BtreeNode:
        return self._cached("btreenode", ref, fmt.decode_btree_node)

    def read_version_node(self, ref: IndirectDataReference) -> VersionTreeNode:
        return self._cached("versionnode", ref, fmt.decode_version_tree_node)

    # ---------------------------------------------------------------- manifest

    def _read_manifest_file(self, name: str) -> Manifest:
        shown = self.where(name)
        try:
            data = self.store.get(name, limit=self.limits.max_manifest_bytes, rule="OCDBT-002")
        except FormatError as e:
            if e.rule != "OCDBT-002":
                raise  # PATH-004, PATH-005
            raise OcdbtError(
                "manifest larger than the manifest size limit",
                rule="OCDBT-002",
                file=shown,
                expected=f"<= {self.limits.max_manifest_bytes}",
            ) from None
        if data is None:
            raise OcdbtError("OCDBT manifest is missing", rule="OCDBT-050", file=shown)
        return fmt.decode_manifest(data, file=shown, max_decoded_bytes=self.max_decoded_bytes)

    def _names(self) -> frozenset[str]:
        """The names in the database directory that are not directories (a bounded listing;
        a FIFO among them is refused when opened)."""
        listing = self.store.list_dir()
        return listing.files | listing.other

    @property
    def manifest(self) -> Manifest:
        """The manifest holding the version tree (for the numbered kind: the latest numbered)."""
        if self._manifest is None:
            top = self._read_manifest_file(MANIFEST_FILE)
            name = MANIFEST_FILE
            if top.config.manifest_kind == fmt.MANIFEST_KIND_NUMBERED:
                numbered = sorted(
                    (int(m.group(1), 16), m.group(0))
                    for n in self._names()
                    if (m := _NUMBERED.fullmatch(n))
                )
                if not numbered:
                    raise OcdbtError(
                        "numbered-kind database has no manifest.<016x> file",
                        rule="OCDBT-050",
                        file=self.where(MANIFEST_FILE),
                    )
                number, name = numbered[-1]
                inner = self._read_manifest_file(name)
                where = self.where(name)
                if inner.config.manifest_kind != fmt.MANIFEST_KIND_SINGLE:
                    raise OcdbtError(
                        "a numbered manifest must hold a version tree (manifest_kind 0)",
                        rule="OCDBT-050",
                        file=where,
                        got=inner.config.manifest_kind,
                    )
                if inner.config.uuid != top.config.uuid:
                    raise OcdbtError(
                        "numbered manifest belongs to another database (uuid differs)",
                        rule="OCDBT-050",
                        file=where,
                        expected=top.config.uuid.hex(),
                        got=inner.config.uuid.hex(),
                    )
                if inner.versions[-1].generation_number != number:
                    raise OcdbtError(
                        "numbered manifest name must be its latest generation number",
                        rule="OCDBT-050",
                        file=where,
                        expected=number,
                        got=inner.versions[-1].generation_number,
                    )
                top = inner
            self._manifest, self._manifest_file = top, self.where(name)
        return self._manifest

    @property
    def config(self) -> fmt.Config:
        return self.manifest.config

    # ---------------------------------------------------------------- version tree

    def _check_version_node(self, node: VersionTreeNode, ref: VersionNodeReference) -> None:
        where = self._file_display(ref.location)
        pointer = f"@{ref.location.offset}"
        arity = self.manifest.config.version_tree_arity_log2
        if node.version_tree_arity_log2 != arity:
            raise OcdbtError(
                "version node arity differs from the manifest's",
                rule="OCDBT-011",
                file=where,
                pointer=pointer,
                expected=arity,
                got=node.version_tree_arity_log2,
            )
        if node.height != ref.height:
            raise OcdbtError(
                "version node height differs from its reference",
                rule="OCDBT-032",
                file=where,
                pointer=pointer,
                expected=ref.height,
                got=node.height,
            )
        last = node.entries[-1].generation_number
        if last != ref.generation_number:
            raise OcdbtError(
                "latest generation of a version subtree differs from its reference",
                rule="OCDBT-034",
                file=where,
                pointer=pointer,
                expected=ref.generation_number,
                got=last,
            )
        count = (
            len(node.entries) if node.height == 0 else sum(e.num_generations for e in node.entries)  # type: ignore[union-attr]
        )
        if count != ref.num_generations:
            raise OcdbtError(
                "num_generations differs from the generations in the subtree",
                rule="OCDBT-034",
                file=where,
                pointer=pointer,
                expected=ref.num_generations,
                got=count,
            )

    def _version_leaves(self, ref: VersionNodeReference, depth: int = 0):
        if depth > self.limits.max_depth:
            raise OcdbtError("version tree too deep", rule="OCDBT-032", file=self._manifest_file)
        node = self.read_version_node(ref.location)
        self._check_version_node(node, ref)
        if node.height == 0:
            yield from node.entries
        else:
            for child in node.entries:
                yield from self._version_leaves(child, depth + 1)

    def versions(self) -> list[BtreeGenerationReference]:
        """Every version in the database, oldest first (reads the whole version tree)."""
        m = self.manifest
        out: list[BtreeGenerationReference] = []
        for ref in m.version_tree_nodes:
            out.extend(self._version_leaves(ref))
        out.extend(m.versions)
        gens = [v.generation_number for v in out]
        if any(b <= a for a, b in zip(gens, gens[1:], strict=False)):
            raise OcdbtError(
                "generations of the version tree are not strictly increasing",
                rule="OCDBT-030",
                file=self._manifest_file,
            )
        return out

    def version(self, generation: int | None = None) -> BtreeGenerationReference:
        """The latest version, or the one with this generation number (KeyError-like if absent)."""
        m = self.manifest
        if generation is None:
            return m.versions[-1]
        for v in m.versions:
            if v.generation_number == generation:
                return v
        refs: tuple = m.version_tree_nodes
        for _ in range(self.limits.max_depth):
            child = next((r for r in refs if r.generation_number >= generation), None)
            if child is None:
                break
            node = self.read_version_node(child.location)
            self._check_version_node(node, child)
            if node.height == 0:
                for v in node.entries:
                    if v.generation_number == generation:
                        return v  # type: ignore[return-value]
                break
            refs = node.entries
        raise OcdbtError(
            "no such generation in the database",
            rule="OCDBT-030",
            file=self._manifest_file,
            got=generation,
        )

    # ---------------------------------------------------------------- B+tree

    def _root(self, generation: int | None) -> BtreeGenerationReference:
        return self.version(generation)

    def _load_checked(self, ref: BtreeNodeReference, height: int) -> BtreeNode:
        assert ref.location is not None
        node = self.read_btree_node(ref.location)
        if node.height != height:
            raise OcdbtError(
                "B+tree node height differs from the height its parent implies",
                rule="OCDBT-040",
                file=self._file_display(ref.location),
                pointer=f"@{ref.location.offset}",
                expected=height,
                got=node.height,
            )
        return node

    def _walk(
        self,
        ref: BtreeNodeReference,
        height: int,
        prefix: bytes,
        lower: bytes,
        upper: bytes | None,
        start: bytes,
        end: bytes | None,
        depth: int,
    ) -> Iterator[tuple[bytes, BtreeNode]]:
        """(key prefix, node) of every leaf node below `ref` that may hold keys in
        [start, end), in key order, each checked against its parent's key range."""
        if depth > self.limits.max_depth:
            raise OcdbtError("B+tree too deep", rule="OCDBT-040", file=self._manifest_file)
        node = self._load_checked(ref, height)
        assert ref.location is not None
        where = self._file_display(ref.location)
        pointer = f"@{ref.location.offset}"
        entries = node.entries
        first = prefix + entries[0].key
        last = prefix + entries[-1].key
        if first < lower or (upper is not None and last >= upper):
            raise OcdbtError(
                "B+tree node keys lie outside the key range given by its parent",
                rule="OCDBT-044",
                file=where,
                pointer=pointer,
                expected=f"[{lower!r}, {upper!r})",
                got=f"[{first!r}, {last!r}]",
            )
        if height == 0:
            yield prefix, node
            return
        n = len(entries)
        for i, e in enumerate(entries):
            child_lower = prefix + e.key
            child_upper = prefix + entries[i + 1].key if i + 1 < n else upper
            if child_upper is not None and child_upper <= start:
                continue
            if end is not None and child_lower >= end:
                return
            yield from self._walk(
                e.node,  # type: ignore[union-attr]
                height - 1,
                prefix + e.subtree_common_prefix,  # type: ignore[union-attr]
                child_lower,
                child_upper,
                start,
                end,
                depth + 1,
            )

    def entries(
        self,
        start: str | bytes = b"",
        end: str | bytes | None = None,
        *,
        generation: int | None = None,
    ) -> Iterator[tuple[bytes, LeafNodeEntry]]:
        """(full key, leaf entry) for every key in [start, end), in key order."""
        first, stop = _as_key(start), None if end is None else _as_key(end)
        return _keys_in(self._leaf_nodes(first, stop, generation), first, stop)

    def leaf_nodes(self, *, generation: int | None = None) -> Iterator[tuple[bytes, BtreeNode]]:
        """(key prefix, node) of every leaf node, in key order: a full key is the prefix and
        an entry's key. For a reader of every key that takes its own (`entries` gives them
        one at a time)."""
        return self._leaf_nodes(b"", None, generation)

    def _leaf_nodes(
        self, start: bytes, end: bytes | None, generation: int | None
    ) -> Iterator[tuple[bytes, BtreeNode]]:
        version = self._root(generation)
        if version.root.location is None:
            return iter(())
        return self._walk(version.root, version.root_height, b"", b"", None, start, end, 0)

    def list(self, prefix: str | bytes = b"", *, generation: int | None = None) -> list[bytes]:
        """Every key starting with `prefix`, sorted."""
        p = _as_key(prefix)
        return [k for k, _ in self.entries(p, key_successor(p), generation=generation)]

    def _keys_of(self, node: BtreeNode) -> list[bytes]:
        """The keys of a node's entries, kept per node (a lookup bisects them; building the
        list on every lookup made reading many keys quadratic)."""
        hit = self._key_lists.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        keys = [e.key for e in node.entries]
        with self._lock:
            if len(self._key_lists) >= self._cache_size:
                self._key_lists.clear()
            self._key_lists[id(node)] = (node, keys)
        return keys

    def _find(self, key: bytes, generation: int | None) -> LeafNodeEntry | None:
        version = self._root(generation)
        index = self._index(version)
        if index is not None:
            return index.get(key)
        ref = version.root
        if ref.location is None:
            return None
        height = version.root_height
        prefix = b""
        for _ in range(self.limits.max_depth + 1):
            node = self._load_checked(ref, height)
            if not key.startswith(prefix):
                return None
            rel = key[len(prefix) :]
            keys = self._keys_of(node)
            if height == 0:
                i = bisect.bisect_left(keys, rel)
                if i < len(keys) and keys[i] == rel:
                    return node.entries[i]  # type: ignore[return-value]
                return None
            i = bisect.bisect_right(keys, rel) - 1
            if i < 0:
                return None
            child = node.entries[i]
            prefix = prefix + child.subtree_common_prefix  # type: ignore[union-attr]
            ref = child.node  # type: ignore[union-attr]
            height -= 1
        raise OcdbtError("B+tree too deep", rule="OCDBT-040", file=self._manifest_file)

    def _index(self, version: BtreeGenerationReference) -> dict[bytes, LeafNodeEntry] | None:
        """Every entry of a version by full key, built by one walk of its tree once
        `INDEX_AFTER_LOOKUPS` point lookups have been made in it (a load of many arrays looks
        up two keys per array; bisecting from the root each time cost more than the reads),
        unless the tree holds more than `INDEX_MAX_KEYS` keys."""
        generation = version.generation_number
        if generation in self._indexes:
            return self._indexes[generation]
        with self._lock:
            count = self._lookups[generation] = self._lookups.get(generation, 0) + 1
        if count < INDEX_AFTER_LOOKUPS or version.root.location is None:
            return None
        index: dict[bytes, LeafNodeEntry] | None = {}
        try:
            for key, entry in self.entries(generation=generation):
                index[key] = entry  # type: ignore[index]
                if len(index) > INDEX_MAX_KEYS:  # type: ignore[arg-type]
                    index = None
                    break
        except FormatError:  # a fault elsewhere in the tree: each lookup meets its own faults
            index = None
        self._indexes[generation] = index
        if index is not None:  # its lookups use the index now, not the nodes' key lists
            with self._lock:
                self._key_lists.clear()
        return index

    def claim(self, key: bytes, ref: IndirectDataReference) -> None:
        """Record that `key`'s value, about to be read (here or by another reader of these
        files), is the stored range `ref`; OCDBT-024 where another key's value holds bytes of
        it, so no stored value is decoded for two keys (`claims`)."""
        if not ref.length:
            return  # an empty value shares no byte
        opened = self._open(ref.file_id, pointer=repr(key), origin="value")
        file = opened.identity if opened.identity is not None else ref.file_id.path
        holder = self._claims.claim(key, file, ref.offset, ref.offset + ref.length)
        if holder is not None:
            other, start, end = holder
            raise OcdbtError(
                f"the value of key {key!r} shares stored bytes with the value of key "
                f"{other!r} ([{start}, {end}) of the data file, or of a file linked to it): no "
                "two keys may point at the same bytes",
                rule="OCDBT-024",
                file=self._file_display(ref),
                pointer=f"@{ref.offset}",
            )

    def claim_values(self, prefix: bytes, *, generation: int | None = None) -> list[bytes]:
        """`claim` the out-of-line value of every key starting with `prefix`, for a reader
        that reads them without this class (tensorstore); the keys, sorted."""
        keys = []
        for key, entry in self.entries(prefix, key_successor(prefix), generation=generation):
            if not isinstance(entry.value, bytes):
                self.claim(key, entry.value)
            keys.append(key)
        return keys

    def read_value(self, entry: LeafNodeEntry, *, key: bytes | None = None) -> bytes:
        """The value of a leaf entry (of `key`: claimed first, `claim`)."""
        value = entry.value
        if isinstance(value, bytes):
            return value
        if key is not None:
            self.claim(key, value)
        return self.read_range(value, origin="value", pointer=None if key is None else repr(key))

    def get_into(
        self,
        key: str | bytes,
        buffer: Callable[[int], memoryview],
        *,
        generation: int | None = None,
    ) -> bytes | memoryview | None:
        """`get`, reading an out-of-line value into ``buffer(n)`` (`read_range_into`)."""
        k = _as_key(key)
        entry = self._find(k, generation)
        if entry is None:
            return None
        if isinstance(entry.value, bytes):
            return entry.value
        self.claim(k, entry.value)
        return self.read_range_into(entry.value, buffer, origin="value", pointer=repr(k))

    def value_range(self, key: str | bytes, *, generation: int | None = None) -> ByteRange | None:
        """The out-of-line value of `key` as a `ByteRange` of its data file (on a file
        descriptor of its own), for streaming a large value or mapping it; None when the key
        is absent, its value is inline or its file is no local file. A reference that does
        not lie within its file is refused (OCDBT-022)."""
        k = _as_key(key)
        entry = self._find(k, generation)
        if entry is None or isinstance(entry.value, bytes):
            return None
        ref = entry.value
        self.claim(k, ref)
        f = self._holding(ref, pointer=repr(k), origin="value")
        return None if f.size is None else f.byte_range(ref.offset, ref.length)

    def inline_value(self, key: str | bytes, *, generation: int | None = None) -> bytes | None:
        """The value of `key` when its node holds it inline; None when the key is absent or
        its value is out of line."""
        entry = self._find(_as_key(key), generation)
        return entry.value if entry is not None and isinstance(entry.value, bytes) else None

    def contains(self, key: str | bytes, *, generation: int | None = None) -> bool:
        """Whether the database holds `key` (its value is not read)."""
        return self._find(_as_key(key), generation) is not None

    def get(self, key: str | bytes, *, generation: int | None = None) -> bytes | None:
        """The value of `key`, or None when the key is absent."""
        k = _as_key(key)
        entry = self._find(k, generation)
        return None if entry is None else self.read_value(entry, key=k)

    def items(
        self,
        start: str | bytes = b"",
        end: str | bytes | None = None,
        *,
        generation: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) for every key in [start, end): a range read."""
        for key, entry in self.entries(start, end, generation=generation):
            yield key, self.read_value(entry, key=key)


def _keys_in(
    nodes: Iterator[tuple[bytes, BtreeNode]], start: bytes, end: bytes | None
) -> Iterator[tuple[bytes, LeafNodeEntry]]:
    """(full key, entry) of the leaf `nodes`' entries in [start, end) (`Database.entries`)."""
    for prefix, node in nodes:
        for e in node.entries:
            key = prefix + e.key
            if key < start:
                continue
            if end is not None and key >= end:
                return
            yield key, e  # type: ignore[misc]
