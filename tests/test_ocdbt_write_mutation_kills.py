"""Tests written to kill the mutants of `ockpt.ocdbt.write` that survived the mutation run
(tests/mutation/RESULTS.md, section ocdbt/write.py), grouped by the function they guard.

Each writes a B+tree or a whole database with ockpt's writer and decodes what it wrote with
ockpt's own decoders (`ockpt.ocdbt.format`): node layout, keys and prefixes, compression, the
manifest's version and the data files' names and references.
"""

from __future__ import annotations

import re
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.write import (
    DatabaseWriter,
    _common_prefix,
    _groups,
    build_btree,
    data_file_name,
    new_config,
)
from ockpt.store import commit

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
