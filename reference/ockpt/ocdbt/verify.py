"""Deep verification of one OCDBT database: every manifest, version node and B+tree node of every
generation decoded (each envelope's CRC-32C checked on the way), every out-of-line value's byte
range checked against its data file (spec/ocdbt.md; used by `ockpt.validate --deep`).

`verify_database(db)` yields one `OcdbtError` per problem and keeps going where it can: a broken
generation does not stop the others from being checked. Nodes shared by several generations are
decoded once (the database's node cache, plus the set of ranges already checked here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import FormatError
from ..limits import LIMITS
from .format import BtreeNodeReference, IndirectDataReference
from .tree import Database

__all__ = ["verify_database", "DatabaseStats"]

_MAX_DEPTH = LIMITS.max_depth


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
        yield from _walk(db, root, version.root_height, seen_nodes, seen_values, stats, tick, 0)


def _walk(
    db: Database,
    ref: BtreeNodeReference,
    height: int,
    seen_nodes: set,
    seen_values: set,
    stats: DatabaseStats,
    tick: Callable[[], None] | None,
    depth: int,
) -> Iterator[FormatError]:
    assert ref.location is not None
    key = _ref_key(ref.location)
    if key in seen_nodes:
        return
    seen_nodes.add(key)
    if depth > _MAX_DEPTH:
        from ..errors import OcdbtError

        yield OcdbtError("B+tree too deep", rule="OCDBT-040", file=str(db.path))
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
            file=str(db.path / ref.location.file_id.path.decode("utf-8", "replace")),
            pointer=f"@{ref.location.offset}",
            expected=height,
            got=node.height,
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
                data = db.read_range(value, origin="value", pointer=repr(entry.key))
            except FormatError as e:
                yield e
                continue
            stats.values += 1
            stats.value_bytes += len(data)
        return
    for entry in node.entries:
        yield from _walk(
            db,
            entry.node,  # type: ignore[union-attr]
            height - 1,
            seen_nodes,
            seen_values,
            stats,
            tick,
            depth + 1,
        )
