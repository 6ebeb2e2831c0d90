"""One test per kind of OCDBT corruption, each asserting the rule id and the file and offset in
the message; and a bounded fuzz test: mutated envelopes and nodes only ever raise FormatError."""

from __future__ import annotations

import shutil
import struct
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ockpt
from ockpt import bytecodecs
from ockpt.errors import FormatError, MissingDataError, OcdbtError
from ockpt.ocdbt import Database
from ockpt.ocdbt import format as fmt
from tests.support import FIXTURES
from tests.support.ocdbt import build_database

ENTRIES = {b"a/.zarray": b"{}", b"a/0": b"x" * 40, b"b/0": b"yy", b"c/0": b"z" * 100}


@pytest.fixture
def db_dir(tmp_path):
    build_database(tmp_path / "db", ENTRIES)
    return tmp_path / "db"


def reseal(data: bytes) -> bytes:
    """Fix length and CRC-32C after an edit, so the decoder looks past the envelope."""
    data = data[:4] + struct.pack("<Q", len(data)) + data[12:]
    return data[:-4] + struct.pack("<I", bytecodecs.crc32c(data[:-4]))


def envelope(magic: int, body: bytes, *, version: int = 0, compression: int = 0) -> bytes:
    head = (
        struct.pack(">I", magic)
        + b"\0" * 8
        + fmt.encode_varint(version)
        + fmt.encode_varint(compression)
    )
    return reseal(head + body + b"\0\0\0\0")


def raises(rule: str, fn, *, file: str | None = None, at: str | None = None) -> OcdbtError:
    """The OcdbtError `fn()` raises, checked: its rule, the end of its file's path (`file`)
    and its pointer (`at`)."""
    with pytest.raises(OcdbtError) as info:
        fn()
    err = info.value
    assert err.rule == rule, str(err)
    if file is not None:
        assert err.file == file or err.file.endswith("/" + file), str(err)
    if at is not None:
        assert err.pointer == at, str(err)
    return err


def read_all(path):
    db = Database(path)
    return {k: db.get(k) for k in db.list()}


def test_hand_built_database_reads(db_dir):
    assert read_all(db_dir) == ENTRIES


def _edit(path, fn):
    path.write_bytes(fn(path.read_bytes()))


def test_bad_magic(db_dir):
    _edit(db_dir / "manifest.ocdbt", lambda b: b"\x0c\xdb\x3a\x2b" + b[4:])
    raises("OCDBT-001", lambda: read_all(db_dir), file="manifest.ocdbt", at="@0")


def test_bad_magic_of_node(db_dir):
    # a manifest magic where a B+tree node must be
    _edit(db_dir / "d" / "node", lambda b: struct.pack(">I", fmt.MANIFEST_MAGIC) + b[4:])
    raises("OCDBT-001", lambda: read_all(db_dir), file="d/node", at="@0")


def test_bad_length(db_dir):
    _edit(db_dir / "manifest.ocdbt", lambda b: b[:4] + struct.pack("<Q", len(b) + 1) + b[12:])
    raises("OCDBT-002", lambda: read_all(db_dir), file="manifest.ocdbt", at="@4")


def test_bad_version(db_dir):
    _edit(db_dir / "manifest.ocdbt", lambda b: reseal(b[:12] + b"\x01" + b[13:]))
    raises("OCDBT-003", lambda: read_all(db_dir), file="manifest.ocdbt", at="@12")


def test_bad_compression_format(db_dir):
    _edit(db_dir / "d" / "node", lambda b: reseal(b[:13] + b"\x02" + b[14:]))
    raises("OCDBT-004", lambda: read_all(db_dir), file="d/node", at="@13")


def test_crc_mismatch(db_dir):
    _edit(db_dir / "d" / "node", lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:])
    at = f"@{(db_dir / 'd' / 'node').stat().st_size - 4}"
    raises("OCDBT-005", lambda: read_all(db_dir), file="d/node", at=at)


def test_truncated_zstd(tmp_path):
    body = fmt.decode_envelope(
        fmt.encode_envelope(fmt.BTREE_NODE_MAGIC, b"\0" * 100, compression=1),
        magic=fmt.BTREE_NODE_MAGIC,
    )
    assert body.compression == 1
    frame = fmt.encode_envelope(fmt.BTREE_NODE_MAGIC, b"\x00\x00\x01" * 50, compression=1)[14:-4]
    bad = envelope(fmt.BTREE_NODE_MAGIC, frame[:-3], compression=1)
    raises(
        "OCDBT-006",
        lambda: fmt.decode_btree_node(bad, file="d/x", offset=100),
        file="d/x",
        at="@114",
    )  # 100 + 14 header bytes


def test_zstd_without_content_size_and_output_bound():
    import zstandard

    body = b"\x00" + b"\x00" + b"\x00"  # height 0, empty table, 0 entries (invalid, but decodes)
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 5000)
    env = envelope(fmt.BTREE_NODE_MAGIC, frame, compression=1)
    assert fmt.decode_envelope(env, magic=fmt.BTREE_NODE_MAGIC).body == b"\0" * 5000
    raises(
        "OCDBT-006",
        lambda: fmt.decode_envelope(env, magic=fmt.BTREE_NODE_MAGIC, max_decoded_bytes=4999),
    )
    del body


def test_out_of_range_data_file_id(db_dir):
    config = fmt._config_bytes(fmt.Config(b"\x01" * 16, 0, 8, 1 << 20, 4, None))
    table = fmt._encode_table((fmt.DataFileId(b"", b"d/node"),), b"")
    versions = (
        b"\x01"  # num_versions
        + b"\x01"  # generation 1
        + b"\x00"  # root_height
        + b"\x05"  # data_file_id 5: out of range
        + b"\x00\x10"  # offset, length
        + b"\x00\x00\x00"  # statistics
        + struct.pack("<Q", 0)
        + b"\x00"  # no version nodes
    )
    (db_dir / "manifest.ocdbt").write_bytes(envelope(fmt.MANIFEST_MAGIC, config + table + versions))
    err = raises("OCDBT-021", lambda: read_all(db_dir), file="manifest.ocdbt")
    assert err.got == 5


def test_varint_overflow(db_dir):
    # num_entries of the B+tree node as an 11-byte varint
    body = b"\x00" + b"\x00" + b"\x80" * 10 + b"\x01"
    (db_dir / "d" / "node").write_bytes(envelope(fmt.BTREE_NODE_MAGIC, body))
    # the manifest's reference length must follow the node's new size
    db = Database(db_dir)
    ref = db.version().root.location
    assert ref is not None
    data = (db_dir / "d" / "node").read_bytes()
    raises("OCDBT-008", lambda: fmt.decode_btree_node(data, file="d/node"), file="d/node", at="@16")


def test_keys_out_of_order():
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"b", b"1"), fmt.LeafNodeEntry(b"a", b"2")))
    data = fmt.encode_btree_node(node, compression=0)
    raises(
        "OCDBT-041", lambda: fmt.decode_btree_node(data, file="d/n", offset=7), file="d/n", at="@24"
    )


def test_key_too_long():
    """OCDBT-008: a key of more than 65,535 bytes (limits §2) is refused as it is decoded;
    one of exactly that length is read."""
    ok = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"k" * 65_535, b"1"),))
    assert fmt.decode_btree_node(fmt.encode_btree_node(ok)).entries[0].key == b"k" * 65_535
    long = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"a", b"1"), fmt.LeafNodeEntry(b"k" * 65_536, b"2")))
    err = raises("OCDBT-008", lambda: fmt.decode_btree_node(fmt.encode_btree_node(long)))
    assert "entry 1: key too long" in err.message


def test_duplicate_keys():
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"a", b"1"), fmt.LeafNodeEntry(b"a", b"2")))
    raises("OCDBT-041", lambda: fmt.decode_btree_node(fmt.encode_btree_node(node)))


def test_truncated_manifest(db_dir):
    _edit(db_dir / "manifest.ocdbt", lambda b: b[:-7])
    raises("OCDBT-002", lambda: read_all(db_dir), file="manifest.ocdbt")


def test_truncated_data_file(db_dir):
    _edit(db_dir / "d" / "values", lambda b: b[:-10])
    # the value of c/0 starts after the 40 bytes of a/0
    raises("OCDBT-022", lambda: read_all(db_dir), file="d/values", at="@40")


def test_missing_data_file(db_dir):
    """Absent data is a `MissingDataError` (still a `FormatError`) carrying the OCDBT rule."""
    (db_dir / "d" / "values").unlink()
    with pytest.raises(MissingDataError) as info:
        read_all(db_dir)
    assert info.value.rule == "OCDBT-022" and info.value.file.endswith("/d/values")
    assert isinstance(info.value, FormatError)


def test_truncated_body_field(db_dir):
    # a structure whose body ends inside a field
    body = b"\x00" + b"\x01\x05"  # height 0, one data file whose suffix length runs past the end
    raises(
        "OCDBT-007", lambda: fmt.decode_btree_node(envelope(fmt.BTREE_NODE_MAGIC, body), file="n")
    )


def test_trailing_bytes(db_dir):
    _edit(db_dir / "d" / "node", lambda b: reseal(b[:-4] + b"\x00" + b[-4:]))
    raises(
        "OCDBT-007",
        lambda: fmt.decode_btree_node((db_dir / "d" / "node").read_bytes(), file="d/node"),
    )


# ---------------------------------------------------------------------------------------------
# bytes after the zstd frame of a compressed manifest or node (OCDBT-006)

#: what a damaged structure holds after its zstd frame, inside its envelope
AFTER_FRAME = {
    "zero": b"\0",
    "text": b"junk!",
    "frame": zstandard.ZstdCompressor().compress(b"x" * 10),  # a second whole frame
    "skippable": struct.pack("<II", 0x184D2A50, 0),  # an empty skippable frame
}


def after_frame(envelope: bytes, extra: bytes) -> bytes:
    """The zstd-compressed `envelope` with `extra` between its frame and its CRC (length and
    CRC fixed, so only the frame check can refuse it)."""
    assert envelope[13] == 1  # compression_format 1: the body is one zstd frame
    return reseal(envelope[:-4] + extra + b"\0" * 4)


@pytest.mark.parametrize(
    "magic", [fmt.MANIFEST_MAGIC, fmt.VERSION_NODE_MAGIC, fmt.BTREE_NODE_MAGIC]
)
def test_bytes_after_the_zstd_frame_of_each_structure(magic):
    decode = {
        fmt.MANIFEST_MAGIC: fmt.decode_manifest,
        fmt.VERSION_NODE_MAGIC: fmt.decode_version_tree_node,
        fmt.BTREE_NODE_MAGIC: fmt.decode_btree_node,
    }[magic]
    good = fmt.encode_envelope(magic, b"\0" * 64, compression=1)
    for name, extra in AFTER_FRAME.items():
        err = raises("OCDBT-006", lambda e=extra: decode(after_frame(good, e), file="d/x"))
        assert "bytes after the zstd frame" in err.message and err.file == "d/x", name
    try:  # without them the frame passes: whatever fails then is the body
        decode(good, file="d/x")
    except OcdbtError as e:
        assert e.rule != "OCDBT-006", str(e)


def damage_after_frame(ckpt: Path, where: str, extra: bytes) -> Path:
    """Put `extra` after the zstd frame of the root `manifest.ocdbt`, of the root database's B+tree
    node, or of the first generation's node of the per-process database (read by --deep only),
    the manifest pointing at the new length; return the damaged file."""
    if where == "manifest":
        path = ckpt / "manifest.ocdbt"
        path.write_bytes(after_frame(path.read_bytes(), extra))
        return path
    db_dir = ckpt if where == "root node" else ckpt / "ocdbt.process_0"
    db = Database(db_dir)
    m = db.manifest
    db.close()
    n = len(m.versions) - 1 if where == "root node" else 0
    version = m.versions[n]
    loc = version.root.location
    path = db_dir / loc.file_id.path.decode()
    data = path.read_bytes()
    assert (loc.offset, loc.length) == (0, len(data))  # the node is the whole file
    path.write_bytes(after_frame(data, extra))
    root = replace(version.root, location=replace(loc, length=len(data) + len(extra)))
    versions = (*m.versions[:n], replace(version, root=root), *m.versions[n + 1 :])
    (db_dir / "manifest.ocdbt").write_bytes(fmt.encode_manifest(replace(m, versions=versions)))
    return path


WHERE = ["manifest", "root node", "old process node"]


@pytest.fixture
def sharded(tmp_path) -> Path:
    """A copy of a real Orbax 0.12.8 checkpoint whose manifests and nodes are zstd-compressed."""
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint", ckpt)
    return ckpt


@pytest.mark.parametrize("where", WHERE)
def test_real_database_rewritten_without_extra_bytes_reads(sharded, where):
    """The control of the test below: the rewrite alone breaks nothing."""
    damage_after_frame(sharded, where, b"")
    assert ockpt.validate(sharded, deep=True).ok
    ockpt.load_pytree(sharded, backend="python")


@pytest.mark.parametrize("extra", sorted(AFTER_FRAME))
@pytest.mark.parametrize("where", WHERE)
def test_bytes_after_the_zstd_frame_of_a_real_node(sharded, where, extra):
    """Every reader of a compressed manifest or node refuses bytes after its frame, naming the
    file: the python backend's load and the validator (OCDBT-006). The per-process node of an
    older generation is read only by a deep validation."""
    path = damage_after_frame(sharded, where, AFTER_FRAME[extra])

    def named(findings) -> bool:  # type: ignore[no-untyped-def]
        return any(
            f.rule == "OCDBT-006"
            and f.file == str(path)
            and "bytes after the zstd frame" in f.message
            for f in findings
        )

    report = ockpt.validate(sharded, deep=True)
    assert not report.ok and named(report.findings), report.format_text()
    shallow = named(ockpt.validate(sharded).findings)
    if where == "old process node":
        assert not shallow  # a generation the checkpoint no longer refers to
    else:
        assert shallow
        load = lambda: ockpt.load_pytree(sharded, backend="python")  # noqa: E731
        err = raises("OCDBT-006", load, file=str(path))
        assert "bytes after the zstd frame" in err.message


@pytest.mark.parametrize("path", [b"../outside", b"/abs/path", b"d/../../x", b"d//x", b"d\\x"])
def test_data_file_path_escaping_the_root(tmp_path, path):
    entries = {b"k": b"v" * 50}
    build_database(tmp_path / "db", entries)
    db = Database(tmp_path / "db")
    leaf = db.read_btree_node(db.version().root.location)
    evil = fmt.IndirectDataReference(fmt.DataFileId(b"", path), 0, 50)
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"k", evil),))
    (tmp_path / "db" / "d" / "node").write_bytes(fmt.encode_btree_node(node, compression=0))
    del leaf
    # rebuild the manifest so its reference length matches the new node
    m = Database(tmp_path / "db").manifest
    v = m.versions[0]
    size = (tmp_path / "db" / "d" / "node").stat().st_size
    ref = fmt.IndirectDataReference(v.root.location.file_id, 0, size)
    v2 = fmt.BtreeGenerationReference(fmt.BtreeNodeReference(ref, v.root.statistics), 1, 0, 0)
    (tmp_path / "db" / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, (v2,), ()))
    )
    raises("OCDBT-023", lambda: Database(tmp_path / "db").get(b"k"))


def test_symlink_escaping_the_root(tmp_path):
    build_database(tmp_path / "db", {b"k": b"v" * 50})
    outside = tmp_path / "outside"
    (tmp_path / "db" / "d" / "values").rename(outside)
    (tmp_path / "db" / "d" / "values").symlink_to(outside)
    raises("PATH-004", lambda: Database(tmp_path / "db").get(b"k"))


def test_btree_height_mismatch(db_dir):
    db = Database(db_dir)
    m = db.manifest
    v = m.versions[0]
    v2 = fmt.BtreeGenerationReference(v.root, 1, 2, 0)  # claims height 2, the node is a leaf
    (db_dir / "manifest.ocdbt").write_bytes(fmt.encode_manifest(fmt.Manifest(m.config, (v2,), ())))
    raises("OCDBT-040", lambda: read_all(db_dir), file="d/node", at="@0")


def test_generations_must_increase():
    config = fmt._config_bytes(fmt.Config(b"\x01" * 16, 0, 8, 1 << 20, 4, None))
    table = fmt._encode_table((fmt.DataFileId(b"", b"d/node"),), b"")
    versions = (
        b"\x02"
        + b"\x02\x02"
        + b"\x00\x00"
        + b"\x00\x00"
        + b"\x00\x00"
        + b"\x01\x01"
        + b"\x00" * 6
        + b"\x00" * 16
        + b"\x00"
    )
    data = envelope(fmt.MANIFEST_MAGIC, config + table + versions)
    raises(
        "OCDBT-030", lambda: fmt.decode_manifest(data, file="manifest.ocdbt"), file="manifest.ocdbt"
    )


def test_count_larger_than_the_bytes_left_allocates_nothing():
    body = b"\x00" + b"\x00" + fmt.encode_varint(2**40)  # 2**40 entries in a 3-byte body
    raises("OCDBT-007", lambda: fmt.decode_btree_node(envelope(fmt.BTREE_NODE_MAGIC, body)))


# ---------------------------------------------------------------------------------------------
# fuzz: mutated bytes raise FormatError or decode; nothing else


def _seeds() -> list[tuple[str, bytes]]:
    leaf = fmt.BtreeNode(
        0,
        (
            fmt.LeafNodeEntry(b"a/.zarray", b"{}"),
            fmt.LeafNodeEntry(
                b"a/0", fmt.IndirectDataReference(fmt.DataFileId(b"p/", b"d/x"), 5, 9)
            ),
            fmt.LeafNodeEntry(b"ab", b"zz"),
        ),
    )
    stats = fmt.BtreeNodeStatistics(1, 2, 3)
    interior = fmt.BtreeNode(
        1,
        (
            fmt.InteriorNodeEntry(
                b"a/0",
                2,
                fmt.BtreeNodeReference(
                    fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/y"), 0, 40), stats
                ),
            ),
            fmt.InteriorNodeEntry(
                b"b",
                0,
                fmt.BtreeNodeReference(
                    fmt.IndirectDataReference(fmt.DataFileId(b"q/", b"d/y"), 40, 40), stats
                ),
            ),
        ),
    )
    ver = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(
            fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/z"), 0, 10), stats
        ),
        18,
        1,
        5,
    )
    vnode = fmt.VersionNodeReference(
        fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/v"), 3, 30), 16, 1, 16, 4
    )
    manifest = fmt.Manifest(fmt.Config(b"\x02" * 16, 0, 8, 100, 4, None), (ver,), (vnode,))
    vleaf = fmt.VersionTreeNode(0, 4, (ver,))
    return [
        ("btree", fmt.encode_btree_node(leaf, compression=0)),
        ("btree", fmt.encode_btree_node(interior, compression=0)),
        ("btree", fmt.encode_btree_node(leaf, compression=1)),
        ("manifest", fmt.encode_manifest(manifest, compression=0)),
        ("version", fmt.encode_version_tree_node(vleaf, compression=0)),
    ]


SEEDS = _seeds()
DECODERS = {
    "btree": fmt.decode_btree_node,
    "manifest": fmt.decode_manifest,
    "version": fmt.decode_version_tree_node,
}


def test_fuzz_seeds_decode():
    for kind, data in SEEDS:
        DECODERS[kind](data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(range(len(SEEDS))),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
    fix_envelope=st.booleans(),
)
def test_fuzz_mutations_raise_only_format_errors(seed, edits, cut, fix_envelope):
    kind, data = SEEDS[seed]
    b = bytearray(data)
    for pos, value in edits:
        b[pos % len(b)] = value
    if cut is not None:
        b = b[: max(cut % (len(b) + 1), 0)]
    if fix_envelope and len(b) >= 18:
        b = bytearray(reseal(bytes(b)))
    try:
        DECODERS[kind](bytes(b), max_decoded_bytes=1 << 20)
    except FormatError as e:
        assert e.rule and e.rule.startswith("OCDBT-")


# ---------------------------------------------------------------------------------------------
# one targeted case per remaining rule of the OCDBT chapter


def _manifest_body(config: bytes, rest: bytes = b"") -> bytes:
    return envelope(fmt.MANIFEST_MAGIC, config + rest)


def _config(**kw) -> fmt.Config:
    args = dict(
        uuid=b"\x01" * 16,
        manifest_kind=0,
        max_inline_value_bytes=8,
        max_decoded_node_bytes=1 << 20,
        version_tree_arity_log2=4,
        compression=None,
    )
    args.update(kw)
    return fmt.Config(**args)


def test_ocdbt_010_unknown_manifest_kind():
    raw = bytearray(fmt._config_bytes(_config()))
    raw[16] = 2
    raises(
        "OCDBT-010",
        lambda: fmt.decode_manifest(_manifest_body(bytes(raw)), file="m"),
        file="m",
        at="@30",
    )


@pytest.mark.parametrize("arity", [0, 17])
def test_ocdbt_011_arity_out_of_range(arity):
    raw = fmt._config_bytes(_config(version_tree_arity_log2=arity, manifest_kind=1))
    raises("OCDBT-011", lambda: fmt.decode_manifest(_manifest_body(raw)))


def test_ocdbt_011_version_node_arity_differs_from_manifest(tmp_path):
    path = _versioned_database(tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[0]
    node = db.read_version_node(ref.location)
    bad = fmt.VersionTreeNode(node.height, 3, node.entries)
    _replace_version_node(path, ref, bad)
    raises("OCDBT-011", lambda: Database(path).versions())


def test_ocdbt_012_unknown_compression_method():
    raw = bytearray(fmt._config_bytes(_config(manifest_kind=1)))
    raw[-1] = 7
    raises("OCDBT-012", lambda: fmt.decode_manifest(_manifest_body(bytes(raw))))


def test_ocdbt_020_prefix_longer_than_previous_path():
    config = fmt._config_bytes(_config())
    # two files: prefix length 9 > len("d/a") = 3
    table = b"\x02" + b"\x09" + b"\x03\x01" + b"\x00\x00" + b"d/a" + b"b"
    raises("OCDBT-020", lambda: fmt.decode_manifest(_manifest_body(config, table + b"\x00")))


def test_ocdbt_020_base_path_longer_than_path():
    config = fmt._config_bytes(_config())
    table = b"\x01" + b"\x03" + b"\x05" + b"d/a"
    raises("OCDBT-020", lambda: fmt.decode_manifest(_manifest_body(config, table)))


def _one_version(gen: int, *, offset=0, length=16, height=0, n=1) -> bytes:
    gens = b"".join(fmt.encode_varint(gen - n + 1 + i) for i in range(n))
    return (
        fmt.encode_varint(n)
        + gens
        + bytes([height]) * n
        + b"\x00" * n
        + fmt.encode_varint(offset) * n
        + fmt.encode_varint(length) * n
        + b"\x00" * (3 * n)
        + b"\x00" * (8 * n)
        + b"\x00"
    )


def test_ocdbt_031_too_many_inline_versions():
    config = fmt._config_bytes(_config(version_tree_arity_log2=1))
    table = fmt._encode_table((fmt.DataFileId(b"", b"d/x"),), b"")
    # generation 3 with arity 2 allows ((3 - 1) mod 2) + 1 = 1 inline version, not 2
    raises(
        "OCDBT-031",
        lambda: fmt.decode_manifest(_manifest_body(config, table + _one_version(3, n=2))),
    )


def test_ocdbt_033_no_root_with_height():
    config = fmt._config_bytes(_config())
    table = fmt._encode_table((fmt.DataFileId(b"", b""),), b"")
    body = _one_version(1, offset=2**64 - 1, length=2**64 - 1, height=1)
    raises("OCDBT-033", lambda: fmt.decode_manifest(_manifest_body(config, table + body)))


def test_ocdbt_033_no_root_reads_as_empty(tmp_path):
    config = fmt._config_bytes(_config())
    table = fmt._encode_table((fmt.DataFileId(b"", b""),), b"")
    body = _one_version(1, offset=2**64 - 1, length=2**64 - 1)
    (tmp_path / "manifest.ocdbt").write_bytes(_manifest_body(config, table + body))
    db = Database(tmp_path)
    assert db.version().root.location is None
    assert db.list() == [] and db.get(b"k") is None


@pytest.mark.parametrize("path", [b"", b"../outside", b"/abs"])
def test_ocdbt_023_not_checked_for_an_entry_only_an_empty_tree_names(tmp_path, path):
    """OCDBT-023 applies to the files a reader opens: the table entry of a generation with an
    empty tree (OCDBT-033) names none, whatever its path (tensorstore writes it empty)."""
    config = fmt._config_bytes(_config())
    table = fmt._encode_table((fmt.DataFileId(b"", path),), b"")
    body = _one_version(1, offset=2**64 - 1, length=2**64 - 1)
    (tmp_path / "manifest.ocdbt").write_bytes(_manifest_body(config, table + body))
    db = Database(tmp_path)
    assert db.manifest.data_file_table[0].path == path
    assert db.list() == [] and db.get(b"k") is None


@pytest.mark.parametrize(
    "case",
    [
        "orbax-0.3.5/ocdbt/checkpoint",
        "orbax-0.4.8/aggregated/checkpoint",
        "orbax-0.4.8/aggregated/checkpoint/ocdbt.process_0",
        "orbax-0.5.15/msgpack_placeholders/checkpoint/ocdbt.process_0",
        "ockpt-0.1.0/compression_none/checkpoint/ocdbt.process_0",
    ],
)
def test_ocdbt_023_real_empty_generation_entries(case):
    """Real databases whose empty generation 1 names a table entry with an empty path, beside
    `d/...` entries: every key reads (a reader checking every entry as it parses the table
    would refuse these checkpoints)."""
    from tests.support import FIXTURES

    path = FIXTURES / case
    m = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    assert m.data_file_table[0].path == b""
    assert all(f.path.startswith(b"d/") for f in m.data_file_table[1:])
    first = m.versions[0]
    assert first.generation_number == 1 and first.root.location is None
    assert len(m.versions) >= 2 and m.versions[-1].root.location is not None
    db = Database(path)
    keys = db.list()
    assert keys and all(db.get(k) is not None for k in keys)


def _versioned_database(tmp_path):
    from tests.support.ocdbt import write_database

    commits = [{f"k{g:02d}": b"v"} for g in range(20)]
    return write_database(
        tmp_path / "db", commits, config={"version_tree_arity_log2": 1, "compression": None}
    )


def _replace_version_node(path, ref: fmt.VersionNodeReference, node: fmt.VersionTreeNode):
    """Append a re-encoded node to its data file and point the manifest at it."""
    f = path / ref.location.file_id.path.decode()
    data = f.read_bytes()
    enc = fmt.encode_version_tree_node(
        node, transitive_path=ref.location.file_id.base_path, compression=0
    )
    f.write_bytes(data + enc)
    m = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    loc = fmt.IndirectDataReference(ref.location.file_id, len(data), len(enc))
    nodes = tuple(
        fmt.VersionNodeReference(
            loc, r.generation_number, r.height, r.num_generations, r.commit_time
        )
        if r == ref
        else r
        for r in m.version_tree_nodes
    )
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, m.versions, nodes))
    )


def test_ocdbt_032_version_node_height_differs(tmp_path):
    path = _versioned_database(tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[0]
    node = db.read_version_node(ref.location)
    inner = db.read_version_node(node.entries[0].location)  # one level down: wrong height
    _replace_version_node(path, ref, inner)
    raises("OCDBT-032", lambda: Database(path).versions())


def test_ocdbt_032_manifest_heights_must_decrease():
    config = fmt._config_bytes(_config(version_tree_arity_log2=1))
    table = fmt._encode_table((fmt.DataFileId(b"", b"d/x"),), b"")
    leaf = _one_version(9)[:-1]
    nodes = (
        b"\x02"
        + b"\x04\x08"
        + b"\x00\x00"
        + b"\x00\x00"
        + b"\x10\x10"
        + b"\x04\x04"
        + b"\x00" * 16
        + b"\x01\x02"
    )
    raises("OCDBT-032", lambda: fmt.decode_manifest(_manifest_body(config, table + leaf + nodes)))


def test_ocdbt_034_num_generations_differs(tmp_path):
    path = _versioned_database(tmp_path)
    m = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    r = m.version_tree_nodes[0]
    bad = fmt.VersionNodeReference(
        r.location, r.generation_number, r.height, r.num_generations + 1, r.commit_time
    )
    nodes = (bad,) + m.version_tree_nodes[1:]
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, m.versions, nodes))
    )
    raises("OCDBT-034", lambda: Database(path).versions())
    raises("OCDBT-034", lambda: Database(path).list(generation=1))


def test_ocdbt_042_common_prefix_longer_than_key():
    stats = fmt.BtreeNodeStatistics(0, 0, 0)
    ref = fmt.BtreeNodeReference(
        fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/y"), 0, 40), stats
    )
    node = fmt.BtreeNode(1, (fmt.InteriorNodeEntry(b"ab", 3, ref),))
    raises("OCDBT-042", lambda: fmt.decode_btree_node(fmt.encode_btree_node(node, compression=0)))


def test_ocdbt_043_bad_value_kind():
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"a", b"1"),))
    data = bytearray(fmt.encode_btree_node(node, compression=0))
    # body: height, empty table, num_entries, suffix length, suffix, value length, value kind
    kind_at = 14 + 1 + 1 + 1 + 1 + 1 + 1
    assert data[kind_at] == 0
    data[kind_at] = 2
    raises(
        "OCDBT-043",
        lambda: fmt.decode_btree_node(reseal(bytes(data)), file="n"),
        file="n",
        at=f"@{kind_at}",
    )


def test_ocdbt_044_child_keys_outside_parent_range(tmp_path):
    build_database(tmp_path / "db", {b"m": b"1", b"n": b"2"})
    db = Database(tmp_path / "db")
    v = db.version()
    leaf_ref = v.root.location
    stats = v.root.statistics
    # an interior root claiming the leaf's keys start at "x" (they start at "m")
    root = fmt.BtreeNode(
        1, (fmt.InteriorNodeEntry(b"x", 0, fmt.BtreeNodeReference(leaf_ref, stats)),)
    )
    enc = fmt.encode_btree_node(root, compression=0)
    (tmp_path / "db" / "d" / "root").write_bytes(enc)
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"", b"d/root"), 0, len(enc))
    v2 = fmt.BtreeGenerationReference(fmt.BtreeNodeReference(ref, stats), 1, 1, 0)
    m = db.manifest
    (tmp_path / "db" / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, (v2,), ()))
    )
    raises("OCDBT-044", lambda: Database(tmp_path / "db").list(), file="d/node")


def test_ocdbt_050_numbered_manifest_problems(tmp_path):
    from tests.support.ocdbt import write_database

    path = write_database(
        tmp_path / "db", [{"a": b"1"}, {"b": b"2"}], config={"manifest_kind": "numbered"}
    )
    latest = sorted(p for p in path.iterdir() if p.name.startswith("manifest.0"))[-1]
    latest.rename(path / "manifest.00000000000000ff")  # name differs from its latest generation
    raises("OCDBT-050", lambda: Database(path).list())
    for p in path.glob("manifest.0*"):
        p.unlink()
    raises("OCDBT-050", lambda: Database(path).list())
    (path / "manifest.ocdbt").unlink()
    raises("OCDBT-050", lambda: Database(path).list(), file="manifest.ocdbt")
