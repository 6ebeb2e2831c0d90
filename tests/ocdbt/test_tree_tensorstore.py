"""The pure-Python OCDBT decoder against tensorstore: real Orbax fixtures and extreme databases."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ockpt.ocdbt import Database
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.tree import key_successor
from tests.support.ocdbt import (
    assert_nodes_equal_dump,
    fixture_databases,
    ocdbt_kvstore,
    short,
    write_database,
)

DATABASES = fixture_databases()


def check_against_tensorstore(path, *, generations: bool = False) -> Database:
    """Manifest and every node equal tensorstore's dump; list and values equal its reads."""
    db = Database(path)
    assert_nodes_equal_dump(path)
    kv = ocdbt_kvstore(path)
    keys = sorted(kv.list().result())
    assert db.list() == keys
    for key in keys:
        assert db.get(key) == kv.read(key).result().value, key
    if generations:
        for v in db.versions():
            g = v.generation_number
            old = ocdbt_kvstore(path, version=g)
            assert db.list(generation=g) == sorted(old.list().result()), g
            assert db.version(g) == v
    return db


def test_fixtures_present():
    assert DATABASES, "no OCDBT database under fixtures/"


@pytest.mark.parametrize("path", DATABASES, ids=short)
def test_fixture_database_matches_tensorstore(path):
    db = check_against_tensorstore(path)
    config = db.config
    assert config.manifest_kind == fmt.MANIFEST_KIND_SINGLE
    assert config.compression is not None  # Orbax writes zstd nodes


#: Releases whose merged root database carries tensorstore's defaults (ocdbt §9 note 7).
DEFAULT_CONFIG_ROOTS = ("orbax-0.4.8", "orbax-0.5.15")


@pytest.mark.parametrize(
    "path", [p for p in DATABASES if (p / "ocdbt.process_0").is_dir()], ids=short
)
def test_merged_root_points_into_process_databases(path):
    """ocdbt §9 note 7, §10: the root database of an item is a merge. Its out-of-line values
    larger than the process's max_inline_value_bytes (1024) resolve through base paths into
    ocdbt.process_N/ in every release; roots of 0.4.8 and 0.5.15 carry tensorstore's defaults
    (100 inline bytes, 8388608-byte nodes) and write the values of 101 to 1024 bytes, inline in
    the process, into their own d/; from 0.10.3 (and ockpt) roots carry 1024 and 100000000."""
    db = Database(path)
    process = Database(path / "ocdbt.process_0")
    assert (process.config.max_inline_value_bytes, process.config.max_decoded_node_bytes) == (
        1024,
        100_000_000,
    )
    old = any(release in str(path) for release in DEFAULT_CONFIG_ROOTS)
    want = (100, 8_388_608) if old else (1024, 100_000_000)
    assert (db.config.max_inline_value_bytes, db.config.max_decoded_node_bytes) == want
    for _, entry in db.entries():
        if isinstance(entry.value, fmt.IndirectDataReference):
            base = entry.value.file_id.base_path
            assert entry.value_length > db.config.max_inline_value_bytes
            if entry.value_length > process.config.max_inline_value_bytes:
                assert base.startswith(b"ocdbt.process_") and base.endswith(b"/")
            else:  # inline in the process, too long for the root: copied into the root's d/
                assert old and base == b""
        else:
            assert len(entry.value) <= db.config.max_inline_value_bytes


@pytest.mark.parametrize("release", ["0.4.8", "0.5.15", "0.10.3", "0.12.8"])
def test_root_value_placement_by_release(release):
    """Fixture ocdbt_values (about 25, 520 and 15 000-byte chunks) of four releases: where the
    root keeps each value (ocdbt §10)."""
    from tests.support import FIXTURES

    path = FIXTURES / f"orbax-{release}" / "ocdbt_values" / "checkpoint"
    db = Database(path)
    where = {}
    for key, entry in db.entries():
        name = key.split(b"/")[0].decode()
        if key.endswith(b".zarray"):
            continue
        if isinstance(entry.value, fmt.IndirectDataReference):
            base = entry.value.file_id.base_path.decode()
            where[name] = base or "d/"
        else:
            where[name] = "inline"
    old = release in ("0.4.8", "0.5.15")
    assert where == {
        "small": "inline",
        "mid": "d/" if old else "inline",
        "big": "ocdbt.process_0/",
    }


@pytest.mark.parametrize("path", DATABASES[:4], ids=short)
def test_range_reads(path):
    db = Database(path)
    keys = db.list()
    lo, hi = keys[len(keys) // 4], keys[(3 * len(keys)) // 4]
    got = [k for k, _ in db.items(lo, hi)]
    assert got == [k for k in keys if lo <= k < hi]
    prefix = keys[0].split(b"/")[0] + b"/"
    assert db.list(prefix) == [k for k in keys if k.startswith(prefix)]
    assert db.get(keys[0] + b"\x00") is None
    assert db.get(b"") is None


def test_every_fixture_value_via_full_scan_and_point_reads_agree():
    for path in DATABASES:
        db = Database(path)
        scanned = dict(db.items())
        for k, v in scanned.items():
            assert db.get(k) == v


# ---------------------------------------------------------------------------------------------
# databases written with tensorstore under extreme settings


def _commits(n_commits: int, keys_per_commit: int) -> list[dict[str, bytes]]:
    return [
        {f"p{g % 3}/k{g:03d}/{i:02d}": bytes([i]) * (i * 3 + g % 5) for i in range(keys_per_commit)}
        for g in range(n_commits)
    ]


@pytest.mark.parametrize("arity_log2", [1, 4])
def test_extreme_settings_deep_trees_many_versions(tmp_path, arity_log2):
    n_commits = 40 if arity_log2 == 1 else 300
    config = {
        "max_inline_value_bytes": 4,
        "max_decoded_node_bytes": 48,
        "version_tree_arity_log2": arity_log2,
    }
    path = write_database(
        tmp_path / "db", _commits(n_commits, 4 if arity_log2 == 1 else 1), config=config
    )
    db = check_against_tensorstore(path, generations=arity_log2 == 1)
    versions = db.versions()
    # the empty generation 1, then at least one per commit, numbered consecutively
    assert len(versions) >= n_commits + 1
    assert [v.generation_number for v in versions] == list(range(1, len(versions) + 1))
    assert db.manifest.version_tree_nodes  # older versions sit in version tree nodes
    assert max(v.height for v in db.manifest.version_tree_nodes) >= (3 if arity_log2 == 1 else 2)
    assert versions[-1].root_height >= 3  # a deep B+tree
    assert versions[0].root.location is None  # generation 1 is the empty tree
    if arity_log2 == 4:  # spot-check generations through the version tree
        for g in (1, 2, 16, 17, 200, 256, 257, 300):
            old = ocdbt_kvstore(path, version=g)
            assert db.list(generation=g) == sorted(old.list().result()), g


def test_numbered_manifest_kind(tmp_path):
    path = write_database(tmp_path / "db", _commits(6, 3), config={"manifest_kind": "numbered"})
    top = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    assert top.config.manifest_kind == fmt.MANIFEST_KIND_NUMBERED
    assert not top.has_version_tree and top.versions == ()
    numbered = sorted(n for n in os.listdir(path) if n.startswith("manifest.0"))
    db = check_against_tensorstore(path)
    latest = db.version().generation_number
    assert latest >= 7  # the empty generation 1, then at least one per commit
    assert numbered[-1] == f"manifest.{latest:016x}"


def test_uncompressed_nodes_and_binary_keys(tmp_path):
    commits = [{b"\xff\xfe".decode("latin-1") + "x": b"v" * 3000, "a": b"1"}]
    path = write_database(tmp_path / "db", commits, config={"compression": None})
    db = check_against_tensorstore(path)
    assert db.config.compression is None


def test_commit_times_are_nanoseconds(tmp_path):
    import time

    before = time.time_ns()
    path = write_database(tmp_path / "db", _commits(20, 1), config={"version_tree_arity_log2": 1})
    after = time.time_ns()
    db = Database(path)
    for v in db.versions():
        assert before - 10**9 <= v.commit_time <= after + 10**9
    for ref in db.manifest.version_tree_nodes:  # interior entries too (the doc says ms)
        assert before - 10**9 <= ref.commit_time <= after + 10**9


# ---------------------------------------------------------------------------------------------
# encoders invert decoders; varints


@pytest.mark.parametrize("path", DATABASES[:6], ids=short)
def test_encode_inverts_decode(path):
    db = Database(path)
    assert fmt.decode_manifest(fmt.encode_manifest(db.manifest)) == db.manifest
    for v in db.versions():
        ref = v.root.location
        if ref is None:  # the empty tree (generation 1 of the databases ockpt writes)
            continue
        node = db.read_btree_node(ref)
        enc = fmt.encode_btree_node(node, transitive_path=ref.file_id.base_path)
        assert fmt.decode_btree_node(enc, transitive_path=ref.file_id.base_path) == node


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value):
    data = fmt.encode_varint(value)
    assert len(data) <= 10
    assert fmt.decode_varint(data) == (value, len(data))


def test_varint_boundaries():
    assert fmt.decode_varint(b"\xff" * 9 + b"\x01")[0] == 2**64 - 1
    with pytest.raises(fmt.OcdbtError) as e:
        fmt.decode_varint(b"\xff" * 9 + b"\x02")  # 2**64
    assert e.value.rule == "OCDBT-008"
    with pytest.raises(fmt.OcdbtError) as e:
        fmt.decode_varint(b"\x80" * 10 + b"\x00")  # 11 bytes
    assert e.value.rule == "OCDBT-008"
    with pytest.raises(fmt.OcdbtError) as e:
        fmt.decode_varint(b"\x80\x80")
    assert e.value.rule == "OCDBT-007"


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=40))
def test_varint_run_decodes_as_one_at_a_time(values):
    """A node's runs of varints (offsets, lengths) are decoded in one loop: the same values,
    and the cursor left where decoding them one by one leaves it."""
    data = b"".join(fmt.encode_varint(v) for v in values) + b"\x07"
    cur = fmt._Cursor(data, file="f")
    assert cur.varints(len(values), "x") == values
    assert cur.pos == len(data) - 1


def test_varint_run_faults_as_one_at_a_time():
    """A fault inside a run names the varint at fault as `varint` does (truncated: OCDBT-007;
    too long, above 2**64-1 or above the field's maximum: OCDBT-008)."""
    cases = [
        (b"\x81\x01\x80", 2, None, "OCDBT-007", "@2"),  # the second varint is truncated
        (b"\x01" + b"\x80" * 10 + b"\x00", 2, None, "OCDBT-008", "@1"),  # 11 bytes
        (b"\x01" + b"\xff" * 9 + b"\x02", 2, None, "OCDBT-008", "@1"),  # 2**64
        (b"\x81\x01\x90\x03", 2, 300, "OCDBT-008", "@2"),  # 400 > 300
    ]
    for data, n, maximum, rule, pointer in cases:
        cur = fmt._Cursor(data, file="f")
        with pytest.raises(fmt.OcdbtError) as e:
            cur.varints(n, "x", *(() if maximum is None else (maximum,)))
        assert (e.value.rule, e.value.pointer) == (rule, pointer)


def test_key_successor():
    assert key_successor(b"ab") == b"ac"
    assert key_successor(b"a\xff") == b"b"
    assert key_successor(b"\xff\xff") is None
    assert key_successor(b"") is None


def test_equal_inline_values_of_a_leaf_node_are_one_object(tmp_path):
    """The zarr metadata of many arrays of one shape is the same inline value: a decoded leaf
    node keeps it once (a 100,000-leaf tree's node would otherwise hold 100,000 copies)."""
    meta = b'{"zarr_format":3,"shape":[4]}'
    commit = {f"p{i:03d}/zarr.json": meta for i in range(50)}
    commit.update({f"p{i:03d}/c/0": bytes([i]) * 16 for i in range(50)})
    db = Database(write_database(tmp_path / "db", [commit]))
    node = db.read_btree_node(db.versions()[-1].root.location)
    values = [e.value for e in node.entries if e.key.endswith(b"zarr.json")]
    assert len(values) == 50 and len({id(v) for v in values}) == 1 and values[0] == meta
    chunks = {e.key: e.value for e in node.entries if b"/c/" in e.key}
    assert chunks[b"p007/c/0"] == bytes([7]) * 16 and len(set(chunks.values())) == 50
    enc = fmt.encode_btree_node(node)
    assert fmt.decode_btree_node(enc) == node
