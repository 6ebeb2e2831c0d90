"""Deep verification of one OCDBT database: every manifest, version node and B+tree node of every
generation decoded (each envelope's CRC-32C checked on the way), the keys of every B+tree node
checked against the key range its parent gives it (`OCDBT-044`, each node's key prefix built as
spec/ocdbt.md section 8.1 says), every out-of-line value's byte range checked against its data
file, by its size where the store knows it, else by reading it (spec/ocdbt.md; used by
`ockpt.validate --deep`, whose chunk checks read the values of the latest generation).

`verify_database(db)` yields one `OcdbtError` per problem and keeps going where it can: a broken
generation does not stop the others from being checked. Nodes shared by several generations are
decoded once (the database's node cache, plus the set of ranges already checked here); such a
node's key range is checked on the first path that reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import FormatError
from .format import BtreeNodeReference, IndirectDataReference
from .tree import Database

__all__ = ["verify_database", "DatabaseStats"]


class DatabaseStats:
    """What a verification walked: generations, nodes and out-of-line values."""

    def __init__(self) -> None:
        self.generations = 0
        self.nodes = 0
        self.values = 0
        self.value_bytes = 0


def _ref_key(ref: IndirectDataReference) -> tuple[bytes, int, int]:
    return (ref.file_id.path, ref.offset, ref.length)


def verify_database(
    db: Database,
    *,
    stats: DatabaseStats | None = None,
    tick: Callable[[], None] | None = None,
) -> Iterator[FormatError]:
    """Every problem of `db`, one error each (the walk goes on after each where it can)."""
    stats = stats if stats is not None else DatabaseStats()
    try:
        versions = db.versions()  # the manifest and the whole version tree
    except FormatError as e:
        yield e
        return
    seen_nodes: set[tuple[bytes, int, int]] = set()
    seen_values: set[tuple[bytes, int, int]] = set()
    for version in versions:
        stats.generations += 1
        root = version.root
        if root.location is None:
            continue
        yield from _walk(
            db, root, version.root_height, seen_nodes, seen_values, stats, tick, 0, _ROOT_RANGE
        )


#: (key prefix, lowest full key, bound above every full key or None) of a root node
_ROOT_RANGE: tuple[bytes, bytes, bytes | None] = (b"", b"", None)


def _walk(
    db: Database,
    ref: BtreeNodeReference,
    height: int,
    seen_nodes: set,
    seen_values: set,
    stats: DatabaseStats,
    tick: Callable[[], None] | None,
    depth: int,
    key_range: tuple[bytes, bytes, bytes | None],
) -> Iterator[FormatError]:
    assert ref.location is not None
    key = _ref_key(ref.location)
    if key in seen_nodes:
        return
    seen_nodes.add(key)
    if depth > db.limits.max_depth:
        from ..errors import OcdbtError

        yield OcdbtError("B+tree too deep", rule="OCDBT-040", file=db.where())
        return
    try:
        node = db.read_btree_node(ref.location)
    except FormatError as e:
        yield e
        return
    stats.nodes += 1
    if tick is not None:
        tick()
    if node.height != height:
        from ..errors import OcdbtError

        yield OcdbtError(
            "B+tree node height differs from the height its parent implies",
            rule="OCDBT-040",
            file=db.where(ref.location.file_id.path.decode("utf-8", "replace")),
            pointer=f"@{ref.location.offset}",
            expected=height,
            got=node.height,
        )
        return
    prefix, lower, upper = key_range
    first, last = prefix + node.entries[0].key, prefix + node.entries[-1].key
    if first < lower or (upper is not None and last >= upper):
        from ..errors import OcdbtError

        yield OcdbtError(
            "B+tree node keys lie outside the key range given by its parent",
            rule="OCDBT-044",
            file=db.where(ref.location.file_id.path.decode("utf-8", "replace")),
            pointer=f"@{ref.location.offset}",
            expected=f"[{lower!r}, {upper!r})",
            got=f"[{first!r}, {last!r}]",
        )
        return
    if node.height == 0:
        for entry in node.entries:
            value = entry.value  # type: ignore[union-attr]
            if isinstance(value, bytes):
                continue
            vkey = _ref_key(value)
            if vkey in seen_values:
                continue
            seen_values.add(vkey)
            try:
                db.check_range(value, origin="value", pointer=repr(entry.key))
            except FormatError as e:
                yield e
                continue
            stats.values += 1
            stats.value_bytes += value.length
        return
    entries = node.entries
    for i, entry in enumerate(entries):
        # the child's prefix: this node's, then bytes of the entry's relative key (section 8.1)
        child_range = (
            prefix + entry.subtree_common_prefix,  # type: ignore[union-attr]
            prefix + entry.key,
            prefix + entries[i + 1].key if i + 1 < len(entries) else upper,
        )
        yield from _walk(
            db,
            entry.node,  # type: ignore[union-attr]
            height - 1,
            seen_nodes,
            seen_values,
            stats,
            tick,
            depth + 1,
            child_range,
        )
