"""ockpt's own OCDBT writer (`ockpt.ocdbt.write`): databases tensorstore reads key for key and
dumps node for node as ockpt decodes them, B+trees of several levels, each file created and
flushed once, and the merge of per-process databases by reference (WRITE-014)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocdbt_support import assert_nodes_equal_dump, ocdbt_kvstore
from ockpt.ocdbt import Database
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.verify import verify_database
from ockpt.ocdbt.write import DatabaseWriter, build_btree, merge, new_config
from ockpt.store import commit


def _orbax_like_keys(n: int) -> list[bytes]:
    """Keys shaped like an Orbax item's: long shared prefixes, zarr metadata and chunks."""
    keys = []
    for i in range(n):
        name = f"params.block_{i // 40}.layer_{i % 40 // 4}.kernel_{i % 4}".encode()
        keys += [name + b"/.zarray", name + b"/0.0", name + b"/0.1"]
    return keys


def _values(keys: list[bytes]) -> dict[bytes, bytes]:
    rng = np.random.default_rng(0)
    sizes = rng.choice([5, 300, 1024, 1025, 5000], len(keys))  # inline and out of line
    return {
        k: rng.integers(0, 256, int(s), dtype=np.uint8).tobytes()
        for k, s in zip(keys, sizes, strict=True)
    }


class _Recorder:
    """An `OpenFile` that records, per file, how often it was opened, appended to and
    closed: each file is created once and closed (flushed) once."""

    def __init__(self) -> None:
        self.events: dict[str, list[str]] = {}

    def __call__(self, path: str) -> commit.NewFile:
        events = self.events.setdefault(path, [])
        events.append("open")
        file = commit.NewFile(path)

        class Recorded:
            def append(self, parts) -> None:
                events.append("append")
                file.append(parts)

            def close(self) -> None:
                events.append("close")
                file.close()

        return Recorded()


def _write(path: Path, values: dict[bytes, bytes], **config) -> _Recorder:
    recorder = _Recorder()
    db = DatabaseWriter(
        str(path), open_file=recorder, config=new_config(**config), data_file_bytes=20_000
    )
    for key, value in reversed(values.items()):  # any order: the tree is sorted at commit
        db.put(key, [value[:7], memoryview(value)[7:]])
    db.commit()
    return recorder


@pytest.mark.parametrize("node_bytes", [100_000_000, 4000, 600])
def test_tensorstore_reads_every_key_and_dumps_every_node_as_ockpt(tmp_path, node_bytes):
    """A database of 1,200 keys with Orbax's settings (one leaf) and with small nodes (B+trees
    of height 2 and 3): tensorstore reads every value, lists exactly the keys, and its dump of
    the manifest and of every node equals ockpt's decode; ockpt's deep check finds nothing."""
    values = _values(_orbax_like_keys(400))
    recorder = _write(tmp_path / "db", values, max_decoded_node_bytes=node_bytes)
    for events in recorder.events.values():  # each file created once, flushed once, last
        assert events[0] == "open" and events[-1] == "close"
        assert events.count("open") == events.count("close") == 1
    kv = ocdbt_kvstore(tmp_path / "db")
    assert sorted(bytes(k) for k in kv.list().result()) == sorted(values)
    assert all(kv.read(k).result().value == v for k, v in values.items())
    nodes = assert_nodes_equal_dump(tmp_path / "db")
    db = Database(tmp_path / "db")
    height = db.version().root_height
    assert (height == 0) if node_bytes == 100_000_000 else height >= {4000: 2, 600: 3}[node_bytes]
    assert nodes["btreenode"] >= (1 if height == 0 else 20)
    assert list(verify_database(db)) == []
    assert dict(db.items()) == values


def test_large_values_get_files_of_their_own(tmp_path):
    """A value of at least `data_file_bytes` is one data file; smaller out-of-line values share
    files of about that size; inline values (up to 1024 bytes) are in the leaf."""
    values = {b"a": b"x" * 1024, b"b": b"y" * 1025, b"c": b"z" * 30_000, b"d": b"w" * 1500}
    _write(tmp_path / "db", values)
    db = Database(tmp_path / "db")
    refs = {k: e.value for k, e in db.entries()}
    assert refs[b"a"] == b"x" * 1024
    assert refs[b"c"].offset == 0 and refs[b"c"].length == 30_000
    assert refs[b"b"].file_id == refs[b"d"].file_id != refs[b"c"].file_id
    assert (tmp_path / "db" / refs[b"c"].file_id.path.decode()).stat().st_size == 30_000


def test_merge_refers_to_the_process_files(tmp_path):
    """The merged root refers to the values where each process wrote them (base path
    ``ocdbt.process_<N>/``) and holds only its B+tree in its own ``d/``; tensorstore reads it."""
    keys = _orbax_like_keys(60)
    values = _values(keys)
    halves = [dict(list(values.items())[i::2]) for i in range(2)]
    for p, half in enumerate(halves):
        _write(tmp_path / f"ocdbt.process_{p}", half)
    root = DatabaseWriter(str(tmp_path), open_file=commit.NewFile)
    for p in range(2):
        with Database(tmp_path / f"ocdbt.process_{p}") as db:
            merge(root, [(f"ocdbt.process_{p}/".encode(), db.entries())])
    root.commit()
    kv = ocdbt_kvstore(tmp_path)
    assert all(kv.read(k).result().value == v for k, v in values.items())
    db = Database(tmp_path)
    bases = {e.value.file_id.base_path for _, e in db.entries() if not isinstance(e.value, bytes)}
    assert bases == {b"ocdbt.process_0/", b"ocdbt.process_1/"}
    own = sum(f.stat().st_size for f in (tmp_path / "d").iterdir())
    inline = sum(len(v) for v in values.values() if len(v) <= 1024)
    assert own < inline + 20_000  # the nodes with their inline values; no out-of-line value
    assert_nodes_equal_dump(tmp_path)
    again = DatabaseWriter(str(tmp_path / "again"), open_file=commit.NewFile)
    with Database(tmp_path / "ocdbt.process_0") as db:
        source = (b"ocdbt.process_0/", list(db.entries()))
    with pytest.raises(ValueError, match="written twice"):
        merge(again, [source, source])


def test_btree_prefixes_follow_the_relative_key_rule():
    """Below the root, a node's key prefix is its parent's plus the entry's
    `subtree_common_prefix_length` bytes of the entry's relative key (spec/ocdbt.md section
    8.1); here every leaf shares ``params.block_`` and more."""
    keys = sorted(_orbax_like_keys(200))
    entries = [(k, b"v") for k in keys]
    file = fmt.DataFileId(b"", b"d/nodes")
    blobs, root, height = build_btree(entries, node_file=file, max_node_bytes=1500)
    data = b"".join(blobs)
    assert height >= 2 and root.statistics.num_keys == len(keys)
    assert root.statistics.num_tree_bytes == len(data)

    def walk(ref, prefix, level):
        loc = ref.location
        node = fmt.decode_btree_node(data[loc.offset : loc.offset + loc.length])
        assert node.height == level
        if level == 0:
            return [prefix + e.key for e in node.entries]
        out = []
        for e in node.entries:
            assert e.subtree_common_prefix_length <= len(e.key)
            child = walk(e.node, prefix + e.subtree_common_prefix, level - 1)
            assert child[0] == prefix + e.key  # an entry's key is its child's first key
            out += child
        return out

    assert walk(root, b"", height) == keys


@pytest.mark.parametrize("options", [{"layout": "item"}, {"layout": "v1"}, {"compression": None}])
def test_tensorstore_dumps_every_database_of_a_save(tmp_path, options):
    """Every database `save_pytree` writes (the per-process one and the merged root) is one
    tensorstore reads: its dump of every node equals ockpt's decode, and every key's value
    read through tensorstore equals ockpt's."""
    import ockpt

    rng = np.random.default_rng(3)
    tree = {
        "params": {
            f"layer_{i}": rng.standard_normal((64, 32)).astype(np.float32) for i in range(6)
        },
        "step": np.int64(7),
        "big": rng.standard_normal((300, 1000)).astype(np.float32),
    }
    ockpt.save_pytree(tmp_path / "c", tree, **options)
    databases = [p.parent for p in (tmp_path / "c").rglob("manifest.ocdbt")]
    assert len(databases) == 2
    for path in databases:
        assert assert_nodes_equal_dump(path)["btreenode"] >= 1
        kv = ocdbt_kvstore(path)
        with Database(path) as db:
            keys = db.list()
            assert sorted(bytes(k) for k in kv.list().result()) == keys
            assert all(kv.read(k).result().value == db.get(k) for k in keys)


def test_many_point_lookups_index_the_tree_once(tmp_path, monkeypatch):
    """After `INDEX_AFTER_LOOKUPS` point lookups a version's entries are indexed by key in one
    walk (a load of many arrays looks up two keys each); answers are unchanged, absent keys
    stay absent, and no index is built past `INDEX_MAX_KEYS`."""
    from ockpt.ocdbt import tree

    values = _values(_orbax_like_keys(200))
    _write(tmp_path / "db", values, max_decoded_node_bytes=3000)  # a tree of several levels
    monkeypatch.setattr(tree, "INDEX_AFTER_LOOKUPS", 10)
    db = Database(tmp_path / "db")
    keys = sorted(values)
    assert [db.get(k) for k in keys] == [values[k] for k in keys]
    assert db.get(b"params.block_0.layer_0.kernel_0/9.9") is None
    (index,) = db._indexes.values()
    assert sorted(index) == keys
    monkeypatch.setattr(tree, "INDEX_MAX_KEYS", 100)
    db = Database(tmp_path / "db")
    assert [db.get(k) for k in keys] == [values[k] for k in keys]
    assert list(db._indexes.values()) == [None]
