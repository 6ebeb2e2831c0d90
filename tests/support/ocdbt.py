"""Helpers for the OCDBT / zarr / python-backend tests: fixture databases, tensorstore oracles,
and databases written directly with tensorstore under extreme settings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import FIXTURE_SETS, FIXTURES

if TYPE_CHECKING:  # imported where used: tests that need no oracle run without it
    import tensorstore as ts


def _glob(pattern: str) -> list[Path]:
    return [p for s in FIXTURE_SETS for p in FIXTURES.glob(f"{s}/{pattern}")]


def fixture_databases() -> list[Path]:
    """Every OCDBT database directory of the golden fixtures (root and per-process)."""
    return sorted(p.parent for p in _glob("*/checkpoint/**/manifest.ocdbt"))


def fixture_items() -> list[Path]:
    """Every item directory of the golden fixtures that holds arrays."""
    out = set()
    for meta in _glob("*/checkpoint/**/_METADATA"):
        item = meta.parent
        names = set(os.listdir(item))
        if "manifest.ocdbt" in names or any(n.startswith("ocdbt.process_") for n in names):
            out.add(item)
        elif any((item / n).is_dir() and n != "array_metadatas" for n in names):
            out.add(item)
    return sorted(out)


def short(path: Path) -> str:
    try:
        return str(path.relative_to(FIXTURES))
    except ValueError:
        return str(path)


def file_kvstore(path: Path) -> ts.KvStore:
    import tensorstore as ts

    return ts.KvStore.open({"driver": "file", "path": str(path) + "/"}).result()


def ocdbt_kvstore(path: Path, **kw) -> ts.KvStore:
    import tensorstore as ts

    spec = {"driver": "ocdbt", "base": {"driver": "file", "path": str(path) + "/"}, **kw}
    return ts.KvStore.open(spec).result()


def ts_dump(path: Path, location: str | None = None):
    import tensorstore as ts

    return ts.ocdbt.dump(file_kvstore(path), location).result()


def write_database(
    dest: Path,
    commits: list[dict[str, bytes]],
    *,
    config: dict | None = None,
) -> Path:
    """Write an OCDBT database with tensorstore (in memory, fast), one commit per dict, then
    copy its files to `dest`."""
    import tensorstore as ts

    ctx = ts.Context()
    spec = {"driver": "ocdbt", "base": "memory://db/", "config": config or {}}
    kv = ts.KvStore.open(spec, context=ctx).result()
    for commit in commits:
        with ts.Transaction() as txn:
            for key, value in commit.items():
                kv.with_transaction(txn)[key] = value
    base = ts.KvStore.open("memory://db/", context=ctx).result()
    for key in base.list().result():
        target = dest / key.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base.read(key).result().value)
    return dest


def walk_locations(path: Path):
    """(location, tensorstore dump) of the manifest's and every reachable node."""
    manifest = ts_dump(path)
    todo = [v["location"] for v in manifest["version_tree_nodes"]]
    todo += [v["root"]["location"] for v in manifest["versions"] if "location" in v["root"]]
    seen: set[str] = set()
    while todo:
        loc = todo.pop()
        if loc in seen:
            continue
        seen.add(loc)
        dumped = ts_dump(path, loc)
        for e in dumped["entries"]:
            if "location" in e:
                todo.append(e["location"])
            elif "location" in e.get("root", {}):
                todo.append(e["root"]["location"])
        yield loc, dumped


# ---------------------------------------------------------------------------------------------
# hand-built databases (pure ockpt encoders, no tensorstore): for corruption tests


def build_database(
    dest: Path, entries: dict[bytes, bytes], *, inline_max: int = 8, compression: int = 0
):
    """A one-leaf database: values longer than `inline_max` go to `d/values`, the leaf node to
    `d/node`. Returns (manifest path, leaf node reference)."""
    from ockpt.ocdbt import format as fmt

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "d").mkdir(exist_ok=True)
    values_id = fmt.DataFileId(b"", b"d/values")
    node_id = fmt.DataFileId(b"", b"d/node")
    blob = bytearray()
    leaf = []
    for key in sorted(entries):
        value = entries[key]
        if len(value) > inline_max:
            leaf.append(
                fmt.LeafNodeEntry(key, fmt.IndirectDataReference(values_id, len(blob), len(value)))
            )
            blob += value
        else:
            leaf.append(fmt.LeafNodeEntry(key, value))
    (dest / "d" / "values").write_bytes(bytes(blob))
    node = fmt.encode_btree_node(fmt.BtreeNode(0, tuple(leaf)), compression=compression)
    (dest / "d" / "node").write_bytes(node)
    ref = fmt.IndirectDataReference(node_id, 0, len(node))
    stats = fmt.BtreeNodeStatistics(len(blob), len(node), len(entries))
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(ref, stats), 1, 0, 1_700_000_000 * 10**9
    )
    config = fmt.Config(
        b"\x01" * 16, 0, inline_max, 1 << 20, 4, fmt.ZstdCompression(0) if compression else None
    )
    manifest = fmt.encode_manifest(fmt.Manifest(config, (version,), ()))
    (dest / "manifest.ocdbt").write_bytes(manifest)
    return dest / "manifest.ocdbt", ref


def assert_nodes_equal_dump(path: Path) -> dict[str, int]:
    """ockpt's decode of the manifest and of every node of the database at `path` equals
    tensorstore's dump; returns how many B+tree and version tree nodes were compared."""
    from ockpt.ocdbt import Database
    from ockpt.ocdbt.dump import (
        dump_btree_node,
        dump_manifest,
        dump_version_tree_node,
        parse_location,
    )

    db = Database(path)
    assert dump_manifest(db.manifest) == ts_dump(path)
    kinds = {"btreenode": 0, "versionnode": 0}
    for loc, theirs in walk_locations(path):
        kind, ref = parse_location(loc)
        if kind == "btreenode":
            mine = dump_btree_node(db.read_btree_node(ref))
        else:
            mine = dump_version_tree_node(db.read_version_node(ref))
        assert mine == theirs, loc
        kinds[kind] += 1
    return kinds


def rewrite_array(item: Path, prefix: bytes, zarray: dict, values: dict[bytes, object]) -> None:
    """Replace the array under `prefix` (``b"mixed.0/"``) of the real Orbax item `item` (one
    root OCDBT database and its per-process ones) by `zarray` and `values` (chunk key ->
    bytes, or an `IndirectDataReference` into a data file the caller writes), in one new root
    database written by ockpt's writer; the old data files, `array_metadatas` and `_sharding`
    (which would disagree) are removed."""
    import json
    import shutil

    from ockpt.ocdbt import Database
    from ockpt.ocdbt.write import DatabaseWriter
    from ockpt.store import as_store

    with Database(item) as db:
        kept = [(k, db.read_value(e, key=k)) for k, e in db.entries() if not k.startswith(prefix)]
    for name in ("manifest.ocdbt", "d", "ocdbt.process_0", "array_metadatas", "_sharding"):
        path = item / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    store = as_store(item)
    writer = DatabaseWriter("", open_file=store.writer)
    for key, value in kept:
        writer.put_entry(key, value)
    writer.put_entry(prefix + b".zarray", json.dumps(zarray).encode())
    for key, value in values.items():
        if isinstance(value, bytes):
            writer.put(prefix + key, [value])
        else:
            writer.put_entry(prefix + key, value)
    writer.commit()


#: The bare databases tensorstore 0.1.86 wrote (fixtures/generate_ocdbt.py), with records.
TENSORSTORE_SET = FIXTURES / "tensorstore-0.1.86"


def database_case(name: str) -> Path:
    """The database directory of the case `name` of `TENSORSTORE_SET`."""
    import _record_ocdbt as rec  # fixtures/ is on sys.path (tests.support)

    return TENSORSTORE_SET / name / rec.DATABASE_DIR


def copy_database(name: str, tmp_path: Path) -> Path:
    """A copy of `database_case(name)` under `tmp_path`, for a test to damage."""
    import shutil

    dest = tmp_path / name
    shutil.copytree(database_case(name), dest)
    return dest


def rewrite_root(path: Path, root, height: int):  # type: ignore[no-untyped-def]
    """Replace the B+tree root of the database at `path`'s last version by `root` (a
    `format.BtreeNode` of `height`), written uncompressed to ``d/root``; its reference."""
    from ockpt.ocdbt import Database
    from ockpt.ocdbt import format as fmt

    db = Database(path)
    m = db.manifest
    v = m.versions[-1]
    enc = fmt.encode_btree_node(root, compression=0)
    (path / "d" / "root").write_bytes(enc)
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/root"), 0, len(enc))
    v2 = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(ref, v.root.statistics), v.generation_number, height, v.commit_time
    )
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, m.versions[:-1] + (v2,), m.version_tree_nodes))
    )
    return ref
