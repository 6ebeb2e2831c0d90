"""ockpt's own OCDBT writer (`ockpt.ocdbt.write`): databases tensorstore reads key for key and
dumps node for node as ockpt decodes them, B+trees of several levels, each file created and
flushed once, and the merge of per-process databases by reference (WRITE-014)."""

from __future__ import annotations

import re
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from ockpt.ocdbt import Database
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.verify import verify_database
from ockpt.ocdbt.write import (
    DatabaseWriter,
    _common_prefix,
    _groups,
    build_btree,
    data_file_name,
    merge,
    new_config,
)
from ockpt.store import commit
from tests.support.ocdbt import assert_nodes_equal_dump, ocdbt_kvstore


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




_NODE_FILE = fmt.DataFileId(b"", b"d/nodes")


@contextmanager
def _deadline(seconds: float):
    """Fail (instead of hanging) when the code under test loops for more than `seconds`."""

    def expired(*_):
        raise TimeoutError("build_btree did not finish")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _layout(blobs: list[bytes], ref: fmt.BtreeNodeReference):
    """The tree under `ref` as decoded from the node file `blobs`: a leaf as its list of
    (relative) keys, an interior node as (height, [(key, prefix length, child layout)])."""
    data = b"".join(blobs)
    loc = ref.location
    assert loc.file_id == _NODE_FILE
    node = fmt.decode_btree_node(data[loc.offset : loc.offset + loc.length])
    if node.height == 0:
        return [e.key for e in node.entries]
    return (
        node.height,
        [(e.key, e.subtree_common_prefix_length, _layout(blobs, e.node)) for e in node.entries],
    )


def _ref(n: int) -> fmt.IndirectDataReference:
    return fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/values"), 0, n)


# --------------------------------------------------------------------------------------------
# _groups and _common_prefix


def test_groups_cut_exactly_where_the_sum_passes_the_limit():
    """A range holds items while their summed sizes stay within the limit (a sum equal to the
    limit still fits), the sum restarts at 0 after each cut, and an oversized first item gets
    a range of its own, with no empty range before it. Kills _groups 3 (sum starts at 1),
    15 (restarts at 1), 6 (cut before item 0), 7 (total - size), 8 (>= limit)."""
    assert _groups([5, 5], 10) == [range(0, 2)]
    assert _groups([5, 5, 5], 10) == [range(0, 2), range(2, 3)]
    assert _groups([6, 5, 5], 10) == [range(0, 1), range(1, 3)]
    assert _groups([20], 10) == [range(0, 1)]
    assert _groups([20, 3], 10) == [range(0, 1), range(1, 2)]


def test_common_prefix_of_keys():
    """The common prefix of a set of keys, as bytes. Kills _common_prefix 1 (prefix of None:
    always '')."""
    assert _common_prefix([b"abd", b"abc", b"ab"]) == b"ab"
    assert _common_prefix([b"prefix/k05", b"prefix/k07"]) == b"prefix/k0"
    assert _common_prefix([b"x"]) == b"x"


# --------------------------------------------------------------------------------------------
# build_btree


def test_build_btree_of_nothing_is_an_error():
    """An empty entry list has no root: ValueError with its exact message. Kills build_btree
    4, 5, 6, 7 (message replaced or recased)."""
    with pytest.raises(ValueError) as info:
        build_btree([], node_file=_NODE_FILE, max_node_bytes=100)
    assert str(info.value) == "a B+tree needs at least one entry (an empty database has no root)"


def test_leaves_are_sized_with_keys_inline_values_and_entry_overhead():
    """Four entries of 10-byte keys and 30-byte inline values estimate 64 bytes each (key, value,
    24 fixed): 256 bytes overflow a 200-byte node, so the leaves hold 3 and 1 entries, with the
    key prefix of their keys cut, under a root of empty prefix whose entries are full first
    keys. Kills build_btree 42, 45 (inline bytes not counted or subtracted in the one-leaf
    test), 56, 58, 60 (inline bytes subtracted or not counted per entry), 72 (leaves without
    key prefix) and _common_prefix 1."""
    entries = [(b"prefix/k%02d" % i, bytes([65 + i]) * 30) for i in range(4)]
    blobs, root, height = build_btree(entries, node_file=_NODE_FILE, max_node_bytes=200)
    assert height == 1
    assert _layout(blobs, root) == (
        1,
        [
            (b"prefix/k00", 9, [b"0", b"1", b"2"]),
            (b"prefix/k03", 10, [b""]),
        ],
    )
    assert root.statistics.num_keys == 4
    assert root.statistics.num_tree_bytes == sum(map(len, blobs))


def test_leaves_count_entry_overhead_but_not_referenced_values():
    """Four entries of 10-byte keys and out-of-line values estimate 34 bytes each (136 in
    all): a 68-byte node holds two of them, so two leaves of two. Kills build_btree 44, 51
    (24 per entry subtracted or divided in the one-leaf test) and 62 (a reference counted as
    one byte: 35 + 35 > 68)."""
    entries = [(b"prefix/k%02d" % i, _ref(7)) for i in range(4)]
    blobs, root, height = build_btree(entries, node_file=_NODE_FILE, max_node_bytes=68)
    assert height == 1
    assert _layout(blobs, root) == (
        1,
        [
            (b"prefix/k00", 9, [b"0", b"1"]),
            (b"prefix/k02", 9, [b"2", b"3"]),
        ],
    )
    assert root.statistics.num_indirect_value_bytes == 28


def test_interior_nodes_hold_two_children_and_cut_their_prefix():
    """Eight referenced entries under 68-byte nodes: four leaves of two, interior entries of
    74 estimated bytes, so each interior node takes two children (the limit is raised to twice
    the largest entry, not three times) and the tree shrinks each level (no endless loop).
    The two height-1 nodes cut their common prefix ``prefix/k0`` from their entries' keys; the
    root's prefix is empty, its keys full. Kills build_btree 128 (2 / max: never shrinks),
    129 (3 * max: three children), 135 (interior nodes without prefix) and 137 (prefix only
    at the root)."""
    entries = [(b"prefix/k%02d" % i, _ref(1)) for i in range(8)]
    with _deadline(5):
        blobs, root, height = build_btree(entries, node_file=_NODE_FILE, max_node_bytes=68)
    assert height == 2
    assert _layout(blobs, root) == (
        2,
        [
            (
                b"prefix/k00",
                9,
                (1, [(b"0", 0, [b"0", b"1"]), (b"2", 0, [b"2", b"3"])]),
            ),
            (
                b"prefix/k04",
                9,
                (1, [(b"4", 0, [b"4", b"5"]), (b"6", 0, [b"6", b"7"])]),
            ),
        ],
    )
    assert root.statistics.num_keys == 8


def _compressible_entries() -> list[tuple[bytes, bytes]]:
    return [(b"key%04d" % i, (b"value %d " % (i % 7)) * 20) for i in range(300)]


def test_build_btree_compression_and_level_reach_the_encoder():
    """Nodes are stored uncompressed with compression=0, and zstd-compressed at the level
    given (the default level 0, zstd's default), byte for byte as the encoder writes the
    decoded node at that level. Kills build_btree 16 (compression dropped), 17 (level
    dropped) and 2 (default level 1)."""
    entries = _compressible_entries()
    blobs, root, _ = build_btree(
        entries, node_file=_NODE_FILE, max_node_bytes=1 << 20, compression=0
    )
    assert fmt.decode_envelope(blobs[0], magic=fmt.BTREE_NODE_MAGIC).compression == 0
    node = fmt.decode_btree_node(blobs[0])
    at = {lvl: fmt.encode_btree_node(node, compression=1, level=lvl) for lvl in (0, 1, 19)}
    assert len({at[0], at[1], at[19]}) == 3  # the levels give different bytes for this node
    for lvl in (1, 19):
        blobs, _, _ = build_btree(
            entries, node_file=_NODE_FILE, max_node_bytes=1 << 20, compression=1, level=lvl
        )
        assert blobs == [at[lvl]]
    blobs, _, _ = build_btree(entries, node_file=_NODE_FILE, max_node_bytes=1 << 20)
    assert blobs == [at[0]]


# --------------------------------------------------------------------------------------------
# DatabaseWriter


def _writer(tmp_path: Path, **kw) -> DatabaseWriter:
    return DatabaseWriter(str(tmp_path), open_file=commit.NewFile, **kw)


def _manifest(tmp_path: Path) -> fmt.Manifest:
    return fmt.decode_manifest((tmp_path / "manifest.ocdbt").read_bytes())


def _root_node(tmp_path: Path, manifest: fmt.Manifest) -> bytes:
    loc = manifest.versions[0].root.location
    data = (tmp_path / loc.file_id.path.decode()).read_bytes()
    return data[loc.offset : loc.offset + loc.length]


def test_data_file_names_are_d_and_32_hex_digits():
    """A data file name is ``d/`` and 32 lowercase hex digits (16 random bytes). Kills
    data_file_name 1 (64 digits) and 2 (34 digits)."""
    for _ in range(3):
        assert re.fullmatch(rb"d/[0-9a-f]{32}", data_file_name())


def test_writer_keeps_the_config_given(tmp_path):
    """The writer's manifest carries the configuration passed, not a fresh one. Kills
    DatabaseWriter.__init__ 3 (config ignored)."""
    config = new_config(max_inline_value_bytes=7)
    writer = _writer(tmp_path, config=config)
    assert writer.config is config
    writer.put(b"a", [b"x"])
    writer.commit(commit_time=1)
    assert _manifest(tmp_path).config == config


def test_duplicate_keys_name_the_key(tmp_path):
    """Writing a key twice, by `put` or `put_entry`, raises ValueError naming the key. Kills
    DatabaseWriter.put 2 and put_entry 2 (message None)."""
    writer = _writer(tmp_path)
    writer.put(b"k", [b"v"])
    with pytest.raises(ValueError, match=r"^key b'k' written twice$"):
        writer.put(b"k", [b"w"])
    with pytest.raises(ValueError, match=r"^key b'k' written twice$"):
        writer.put_entry(b"k", b"w")


def test_values_go_to_data_files_cut_at_data_file_bytes(tmp_path):
    """With 256-byte data files: a 64-byte value starts a file; a value of exactly 256 bytes
    gets a file of its own (the open one stays open); 100 bytes follow at offset 64, then 64
    bytes at the next 64-byte boundary, 192 (WRITE-017: 28 zero bytes between), which fills
    the first file to exactly 256 bytes and closes it, so the next value starts a new file at
    offset 0. Every reference has an empty base path and a ``d/<hex>`` name, and the bytes are
    where the references say. Kills DatabaseWriter.put 10 (a value of exactly
    data_file_bytes appended to the open file), 49 (a file reaching exactly data_file_bytes
    left open) and 16, 35 (base path b"XXXX")."""
    config = new_config(max_inline_value_bytes=4, compression=None)
    writer = _writer(tmp_path, config=config, data_file_bytes=256)
    values = {b"a": b"A" * 64, b"b": b"B" * 256, b"c": b"C" * 100, b"d": b"D" * 64, b"e": b"E" * 5}
    for key, value in values.items():
        writer.put(key, [value])
    refs = dict(writer.commit(commit_time=1))
    for key, ref in refs.items():
        assert ref.file_id.base_path == b""
        assert re.fullmatch(rb"d/[0-9a-f]{32}", ref.file_id.relative_path)
        data = (tmp_path / ref.file_id.path.decode()).read_bytes()
        assert data[ref.offset : ref.offset + ref.length] == values[key]
    a, b, c, d, e = (refs[k] for k in (b"a", b"b", b"c", b"d", b"e"))
    assert (b.offset, b.length) == (0, 256)
    assert len({a.file_id, b.file_id, e.file_id}) == 3
    assert a.file_id == c.file_id == d.file_id
    assert [(x.offset, x.length) for x in (a, c, d, e)] == [(0, 64), (64, 100), (192, 64), (0, 5)]
    first = (tmp_path / a.file_id.path.decode()).read_bytes()
    assert len(first) == 256 and first[164:192] == bytes(28)


@pytest.mark.parametrize("level", [None, 1, 19])
def test_commit_compresses_nodes_as_configured(tmp_path, level):
    """A database configured without compression stores its B+tree nodes uncompressed; one
    with zstd compresses them at the configured level, byte for byte as the encoder does.
    Kills DatabaseWriter.commit 19, 22, 23, 24, 25 (compression flag) and 20, 27, 28, 30
    (level)."""
    compression = None if level is None else fmt.ZstdCompression(level)
    writer = _writer(tmp_path, config=new_config(compression=compression))
    entries = _compressible_entries()
    for key, value in entries:
        writer.put(key, [value])
    writer.commit(commit_time=1)
    blob = _root_node(tmp_path, _manifest(tmp_path))
    env = fmt.decode_envelope(blob, magic=fmt.BTREE_NODE_MAGIC)
    assert env.compression == (0 if level is None else 1)
    node = fmt.decode_btree_node(blob)
    assert [(e.key, e.value) for e in node.entries] == entries
    if level is not None:
        assert blob == fmt.encode_btree_node(node, compression=1, level=level)
        assert blob != fmt.encode_btree_node(node, compression=1, level=0)


@pytest.mark.parametrize("max_node_bytes", [0, 200])
def test_commit_sizes_nodes_by_the_configured_limit(tmp_path, max_node_bytes):
    """The configured max_decoded_node_bytes bounds the leaves (200 bytes: several leaves);
    0 means the default limit (one leaf). Kills DatabaseWriter.commit 21 (``and``: the
    default instead of the configured limit, 0 instead of the default)."""
    writer = _writer(tmp_path, config=new_config(max_decoded_node_bytes=max_node_bytes))
    for i in range(10):
        writer.put(b"key%02d" % i, [b"v" * 20])
    writer.commit(commit_time=1)
    version = _manifest(tmp_path).versions[0]
    assert version.root.statistics.num_keys == 10
    assert (version.root_height > 0) == (max_node_bytes > 0)


def test_commit_of_nothing_writes_an_empty_generation_1(tmp_path):
    """A database with no entries has one version: generation 1 at the commit time given,
    height 0, a root with no location and all-zero statistics. Kills DatabaseWriter.commit
    35-49 (empty root and height), 59 (generation 2) and 61 (commit time ignored)."""
    assert _writer(tmp_path).commit(commit_time=123456789) == []
    manifest = _manifest(tmp_path)
    assert manifest.versions == (
        fmt.BtreeGenerationReference(
            root=fmt.BtreeNodeReference(None, fmt.BtreeNodeStatistics(0, 0, 0)),
            generation_number=1,
            root_height=0,
            commit_time=123456789,
        ),
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.ocdbt"]
