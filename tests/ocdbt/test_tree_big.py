"""Big OCDBT databases (issue 18, item 1): the fixtures `tensorstore-0.1.86/*`, written by
tensorstore's ocdbt driver with B+tree interior nodes (height 2 to 5), version tree nodes (301
generations with arity 16, 41 with arity 2) and uncompressed nodes (fixtures/generate_ocdbt.py).

Every key and value of every generation is decoded bit-exactly by ockpt's OCDBT decoder and
compared with the record (written from the writes, not read back) and with tensorstore; the
manifest and every node equal ``tensorstore.ocdbt.dump()``; the zarr arrays of `deep_btree`
read the same through both engines; the prefix rule of spec/ocdbt.md §8.1 (`OCDBT-041`), the
version tree rules `OCDBT-032` and `OCDBT-034` and the worked example of §8.6 are checked on
these bytes; `ockpt validate --deep` walks them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import sys
from pathlib import Path

import pytest

from ockpt.errors import OcdbtError
from ockpt.ocdbt import Database
from ockpt.ocdbt import format as fmt
from tests.support import FIXTURES, ROOT, database_cases
from tests.support.ocdbt import assert_nodes_equal_dump, ocdbt_kvstore, short, walk_locations

sys.path.insert(0, str(FIXTURES))
import _record_ocdbt as rec  # noqa: E402

CASES = database_cases()
BY_NAME = {c.name: c for c in CASES}
SET = FIXTURES / "tensorstore-0.1.86"


def _db(case: Path) -> Path:
    return case / rec.DATABASE_DIR


def test_the_database_fixtures_are_present_and_small():
    assert set(BY_NAME) >= {
        "btree_example",
        "deep_btree",
        "many_generations",
        "version_tree_arity2",
    }
    for case in CASES:
        size = sum(p.stat().st_size for p in case.rglob("*") if p.is_file())
        assert size < 1 << 20, (case.name, size)  # database and record, well under 1 MiB
    listing = (FIXTURES / f"LISTING-{SET.name}.txt").read_text()
    for case in CASES:
        files = sorted(p for p in _db(case).rglob("*") if p.is_file())
        assert f"== {case.name}: {len(files)} files" in listing
        for p in files:
            assert f"{p.stat().st_size:>8}  {p.relative_to(case).as_posix()}" in listing


# ---------------------------------------------------------------------------------------------
# structure: what each case was generated to have


@pytest.mark.parametrize("case", CASES, ids=short)
def test_structure_is_what_the_record_claims(case):
    record = rec.load(case)
    want = record["structure"]
    db = Database(_db(case))
    versions = db.versions()
    assert [v.generation_number for v in versions] == list(range(1, want["generations"] + 1))
    assert versions[0].root.location is None  # the empty generation 1 (OCDBT-033)
    assert versions[-1].root_height >= want["min_root_height"]
    assert [r.height for r in db.manifest.version_tree_nodes] == want["version_tree_node_heights"]
    assert (db.config.compression is not None) == (want["compression"] == "zstd")
    config = record["config"]
    assert db.config.max_decoded_node_bytes == config["max_decoded_node_bytes"]
    assert db.config.max_inline_value_bytes == config["max_inline_value_bytes"]
    assert db.config.version_tree_arity_log2 == config.get("version_tree_arity_log2", 4)


def test_the_cases_reach_what_orbax_never_writes():
    """Interior nodes at several heights, version tree nodes of height >= 2 (more than 256
    generations with arity 16), a version tree over 2 levels deeper with arity 2."""
    heights = {c.name: {v.root_height for v in Database(_db(c)).versions()} for c in CASES}
    assert max(heights["deep_btree"]) >= 3 and max(heights["version_tree_arity2"]) >= 5
    many = Database(_db(BY_NAME["many_generations"]))
    assert len(many.versions()) > 256 and many.manifest.version_tree_nodes[0].height == 2
    arity2 = Database(_db(BY_NAME["version_tree_arity2"]))
    assert arity2.manifest.version_tree_nodes[0].height == 4


# ---------------------------------------------------------------------------------------------
# bytes: ockpt's decoder against tensorstore's dump


@pytest.mark.parametrize("case", CASES, ids=short)
def test_manifest_and_every_node_equal_tensorstore_dump(case):
    """Manifest, every version tree node and every B+tree node of every generation: interior
    entries (relative keys, subtree common prefixes, references, statistics) and leaves."""
    path = _db(case)
    db = Database(path)
    kinds = assert_nodes_equal_dump(path)
    assert kinds["btreenode"] > 2
    assert (kinds["versionnode"] > 0) == bool(db.manifest.version_tree_nodes)


# ---------------------------------------------------------------------------------------------
# keys and values: every generation, against the record and tensorstore


@pytest.mark.parametrize("case", CASES, ids=short)
def test_every_generation_is_decoded_bit_exactly(case):
    """Range reads of every generation give the record's contents (digest of every key and
    value), the keys tensorstore lists for that generation, and the values of point reads."""
    record = rec.load(case)
    path = _db(case)
    with Database(path) as db:  # closed also when tensorstore is refused and the test skips
        _every_generation(record, path, db)


def _every_generation(record: dict, path, db: Database) -> None:  # type: ignore[no-untyped-def]
    assert len(record["generations"]) == len(db.versions())
    for gen in record["generations"]:
        g = gen["generation"]
        items = list(db.items(generation=g))
        assert len(items) == gen["num_keys"], g
        assert rec.kv_digest(items) == gen["sha256"], g
        keys = [k for k, _ in items]
        assert keys == sorted(ocdbt_kvstore(path, version=g).list().result()), g
        assert db.list(generation=g) == keys
    for commit in record["commits"]:  # what each commit changed, read at it and before it
        g = commit["generation"]
        for key in commit["set"][:5]:
            assert db.get(key, generation=g) is not None
        for key in commit["deleted"]:
            assert db.get(key, generation=g) is None
            assert db.get(key, generation=g - 1) is not None


@pytest.mark.parametrize("case", CASES, ids=short)
def test_latest_generation_values_by_point_reads(case):
    record = rec.load(case)
    path = _db(case)
    db = Database(path)
    kv = ocdbt_kvstore(path)
    got = {}
    for key in record["keys"]:
        value = db.get(key)
        assert value is not None, key
        assert value == kv.read(key).result().value, key  # tensorstore
        got[key] = rec.value_digest(value)
    assert got == record["keys"]
    assert db.list() == sorted(k.encode() for k in record["keys"])
    for lit in record["values"]:
        assert db.get(lit["key"], generation=lit["generation"]) == rec.decode_value(lit["value"])
    # keys between, before and after the stored ones are absent (point reads through every level)
    for key in list(record["keys"])[::7]:
        assert db.get(key + "\x00") is None
        if key[:-1] not in got:
            assert db.get(key[:-1]) is None
    assert db.get(b"") is None and db.get(b"\xff" * 8) is None


@pytest.mark.parametrize("case", CASES, ids=short)
def test_range_and_prefix_reads_cross_node_boundaries(case):
    db = Database(_db(case))
    keys = db.list()
    for lo, hi in [(0, len(keys)), (1, len(keys) // 2), (len(keys) // 3, len(keys) - 1)]:
        got = [k for k, _ in db.items(keys[lo], keys[hi] if hi < len(keys) else None)]
        assert got == keys[lo:hi]
    for prefix in {k[:n] for k in keys[::5] for n in (1, 5, 12, 16)}:
        assert db.list(prefix) == [k for k in keys if k.startswith(prefix)]


def test_deep_btree_arrays_read_the_same_with_both_engines():
    """The zarr arrays of `deep_btree` (laid out as Orbax lays them out) through the python
    engine (ockpt's OCDBT and zarr decoders) and the tensorstore engine: bit-equal."""
    from ockpt.engines import open_store
    from ockpt.layout import ItemFormat, Storage
    from ockpt.store import as_store

    path = _db(BY_NAME["deep_btree"])
    names = sorted(
        {
            k.decode().rsplit("/", 1)[0]
            for k in Database(path).list()
            if k.endswith((b"/.zarray", b"/zarr.json"))
        }
    )
    assert len(names) == 3 * 60 + 24  # layers 0-63 less the deleted 8-11, and 24 zarr3 arrays
    fmt_ = ItemFormat(Storage.OCDBT, None, False, False, has_root_manifest=True)
    python = open_store(as_store(path), fmt_, backend="python")
    tensorstore = open_store(as_store(path), fmt_, backend="tensorstore")
    try:
        for name in names:
            a, b = python.open(name), tensorstore.open(name)
            box = [(0, n) for n in a.shape]
            x, y = a.read(box).result(), b.read(box).result()
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    finally:
        python.close()
        tensorstore.close()


# ---------------------------------------------------------------------------------------------
# §8.1 (OCDBT-041): a child's prefix extends the parent's by bytes of the RELATIVE key


def _leaf_keys(db: Database, ref, height: int, prefix: bytes, *, full_key_reading: bool):
    """The full keys under a node, deriving each child's prefix by one reading of §8.1."""
    node = db.read_btree_node(ref.location)
    if height == 0:
        return [prefix + e.key for e in node.entries]
    out = []
    for e in node.entries:
        n = e.subtree_common_prefix_length
        child = (prefix + e.key)[:n] if full_key_reading else prefix + e.key[:n]
        out += _leaf_keys(db, e.node, height - 1, child, full_key_reading=full_key_reading)
    return out


def _interior_entries(db: Database):
    """(node prefix, node height, entry) for every distinct interior entry of every
    generation."""
    seen: set = set()

    def walk(ref, height, prefix):
        key = (ref.location.file_id.path, ref.location.offset)
        if key in seen or height == 0:
            return
        seen.add(key)
        for e in db.read_btree_node(ref.location).entries:
            yield prefix, height, e
            yield from walk(e.node, height - 1, prefix + e.subtree_common_prefix)

    for v in db.versions():
        if v.root.location is not None:
            yield from walk(v.root, v.root_height, b"")


def test_child_prefix_is_parent_prefix_plus_bytes_of_the_relative_key():
    """The relative reading finds exactly tensorstore's keys in every generation of every case.
    Where an entry below a non-empty prefix has a non-zero subtree_common_prefix_length (53
    entries over the four cases, spec §8.1 note), the full-key reading gives its child a prefix
    that does not extend the parent's, and finds none of the child's keys."""
    deciding = 0
    interior = 0
    for case in CASES:
        path = _db(case)
        db = Database(path)
        every_key: set[bytes] = set()
        for v in db.versions():
            if v.root.location is None:
                continue
            want = sorted(ocdbt_kvstore(path, version=v.generation_number).list().result())
            args = (db, v.root, v.root_height, b"")
            assert _leaf_keys(*args, full_key_reading=False) == want
            every_key.update(want)
        for prefix, height, e in _interior_entries(db):
            interior += 1
            n = e.subtree_common_prefix_length
            if not (prefix and n):
                continue
            deciding += 1
            relative, full = prefix + e.key[:n], (prefix + e.key)[:n]
            assert not full.startswith(prefix)
            right = _leaf_keys(db, e.node, height - 1, relative, full_key_reading=False)
            wrong = _leaf_keys(db, e.node, height - 1, full, full_key_reading=False)
            assert set(right) <= every_key and not set(wrong) & every_key
    assert (interior, deciding) == (3303, 53)


def test_interior_entry_key_is_the_first_key_of_its_subtree():
    """OCDBT-044 asks at least; tensorstore writes the subtree's first full key, after deletions
    too (spec §8.1 note)."""
    for case in CASES:
        db = Database(_db(case))
        for prefix, _, e in _interior_entries(db):
            child = db.read_btree_node(e.node.location)
            assert prefix + e.subtree_common_prefix + child.entries[0].key == prefix + e.key


# ---------------------------------------------------------------------------------------------
# version tree rules on real bytes: OCDBT-031, OCDBT-032, OCDBT-034


def _version_subtree(db: Database, ref: fmt.VersionNodeReference, depth: int = 0):
    node = db.read_version_node(ref.location)
    assert node.height == ref.height  # OCDBT-032
    if node.height == 0:
        return list(node.entries), 1
    leaves, count = [], 1
    for child in node.entries:
        assert child.height == node.height - 1  # OCDBT-032
        got, n = _version_subtree(db, child, depth + 1)
        leaves += got
        count += n
    return leaves, count


@pytest.mark.parametrize("name", ["many_generations", "version_tree_arity2"])
def test_version_tree_rules_hold_on_the_bytes(name):
    """OCDBT-032 (heights), OCDBT-034 (last generation, num_generations) and the earliest
    commit time, checked node by node; spec §7.5 states the shapes."""
    db = Database(_db(BY_NAME[name]))
    m = db.manifest
    heights = [r.height for r in m.version_tree_nodes]
    assert all(h >= 1 for h in heights) and heights == sorted(heights, reverse=True)
    assert len(set(heights)) == len(heights)
    gens: list[int] = []
    nodes = 0
    for ref in m.version_tree_nodes:
        leaves, n = _version_subtree(db, ref)
        nodes += n
        assert leaves[-1].generation_number == ref.generation_number  # OCDBT-034
        assert len(leaves) == ref.num_generations  # OCDBT-034
        assert ref.commit_time == min(v.commit_time for v in leaves)
        gens += [v.generation_number for v in leaves]
    assert max(gens) < m.versions[0].generation_number  # OCDBT-032
    every = gens + [v.generation_number for v in m.versions]
    assert every == list(range(1, len(every) + 1))
    shape = [(r.generation_number, r.height, r.num_generations) for r in m.version_tree_nodes]
    if name == "many_generations":
        assert shape == [(256, 2, 256), (288, 1, 32)]
        assert [v.generation_number for v in m.versions] == list(range(289, 302))
        assert len(db.read_version_node(m.version_tree_nodes[0].location).entries) == 1
    else:
        assert shape == [(16, 4, 16), (32, 3, 16), (36, 2, 4), (40, 1, 4)]
        assert [v.generation_number for v in m.versions] == [41]
    assert nodes == {"many_generations": 21, "version_tree_arity2": 38}[name]


def test_generation_17_is_found_as_spec_section_7_5_walks_it():
    db = Database(_db(BY_NAME["many_generations"]))
    m = db.manifest
    ref = next(r for r in m.version_tree_nodes if r.generation_number >= 17)
    assert (ref.generation_number, ref.height) == (256, 2)
    node = db.read_version_node(ref.location)
    assert [(e.generation_number, e.num_generations) for e in node.entries] == [(256, 256)]
    node = db.read_version_node(node.entries[0].location)
    assert [e.generation_number for e in node.entries] == list(range(16, 257, 16))
    leaf = db.read_version_node(next(e for e in node.entries if e.generation_number >= 17).location)
    assert [v.generation_number for v in leaf.entries] == list(range(17, 33))
    assert db.version(17) == leaf.entries[0]


def _copy(case: str, tmp_path: Path) -> Path:
    dest = tmp_path / case
    shutil.copytree(_db(BY_NAME[case]), dest)
    return dest


def _rewrite_manifest(path: Path, change) -> None:
    m = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    nodes = list(m.version_tree_nodes)
    change(nodes)
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, m.versions, tuple(nodes)))
    )


def _raises(rule: str, fn) -> None:
    with pytest.raises(OcdbtError) as info:
        fn()
    assert info.value.rule == rule, str(info.value)


@pytest.mark.parametrize(
    "case, index, field, value, rule",
    [
        # OCDBT-032: a manifest entry's height is not its node's
        ("many_generations", 0, "height", 3, "OCDBT-032"),
        ("version_tree_arity2", 3, "height", 2, "OCDBT-032"),  # also: heights must decrease
        # OCDBT-032: a node of the version tree holds a generation of the inline versions
        ("many_generations", 1, "generation_number", 289, "OCDBT-032"),
        # OCDBT-034: the subtree's last generation, or its count, differs from the entry's
        ("many_generations", 1, "generation_number", 287, "OCDBT-034"),
        ("many_generations", 0, "num_generations", 255, "OCDBT-034"),
        ("version_tree_arity2", 0, "num_generations", 17, "OCDBT-034"),
    ],
)
def test_ocdbt_032_034_refused_on_edited_real_manifests(tmp_path, case, index, field, value, rule):
    path = _copy(case, tmp_path)
    original = Database(_db(BY_NAME[case])).manifest.version_tree_nodes
    first = 1 if index == 0 else original[index - 1].generation_number + 1

    def change(nodes):
        nodes[index] = dataclasses.replace(nodes[index], **{field: value})

    _rewrite_manifest(path, change)
    _raises(rule, Database(path).versions)
    _raises(rule, lambda: Database(path).list(generation=first))  # through that subtree
    try:
        assert Database(path).manifest.version_tree_nodes
    except OcdbtError as e:  # refused as the manifest is decoded: nothing can be read
        assert e.rule == rule
        _raises(rule, Database(path).list)
    else:  # refused where the subtree is read: the latest generation (inline) still reads
        assert Database(path).list() == Database(_db(BY_NAME[case])).list()


def test_ocdbt_034_refused_inside_a_real_version_node(tmp_path):
    """The height-2 node of `many_generations` rewritten with its single entry claiming 255
    generations (of 256): refused when the node is read, the manifest itself being intact."""
    path = _copy("many_generations", tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[0]
    node = db.read_version_node(ref.location)
    bad = dataclasses.replace(
        node, entries=(dataclasses.replace(node.entries[0], num_generations=255),)
    )
    data_file = path / ref.location.file_id.path.decode()
    data = data_file.read_bytes()
    enc = fmt.encode_version_tree_node(bad)
    data_file.write_bytes(data + enc)
    moved = dataclasses.replace(
        ref, location=fmt.IndirectDataReference(ref.location.file_id, len(data), len(enc))
    )
    _rewrite_manifest(path, lambda nodes: nodes.__setitem__(0, moved))
    _raises("OCDBT-034", Database(path).versions)
    _raises("OCDBT-034", lambda: Database(path).get(b"step", generation=17))
    assert Database(path).get(b"step", generation=257) == b"256"  # the other subtree is intact


# ---------------------------------------------------------------------------------------------
# the validator walks them


@pytest.mark.parametrize("case", CASES, ids=short)
def test_validate_deep_walks_every_node(case):
    """`ockpt validate --deep` on a bare database: no OCDBT finding, every B+tree node of every
    generation decoded; the only finding is that a bare database is no pytree item (LOAD-050)."""
    from ockpt.validate import validate

    report = validate(_db(case), deep=True)
    assert {f.rule for f in report.findings} == {"LOAD-050"}, report.format_text()
    nodes = sum(1 for loc, _ in walk_locations(_db(case)) if loc.startswith("btreenode:"))
    assert report.checked["ocdbt_nodes"] == nodes


def test_validate_reports_ocdbt_034_of_an_edited_real_manifest(tmp_path):
    from ockpt.validate import validate

    path = _copy("many_generations", tmp_path)
    _rewrite_manifest(
        path, lambda nodes: nodes.__setitem__(0, dataclasses.replace(nodes[0], num_generations=9))
    )
    # shallow: the latest generation only (inline versions), deep: the whole version tree
    assert {f.rule for f in validate(path).findings} == {"LOAD-050"}
    assert "OCDBT-034" in {f.rule for f in validate(path, deep=True).findings}


def _old_generation_with_a_bad_interior_key(tmp_path: Path) -> Path:
    """`deep_btree` with generation 2's root rewritten: entry 1's key raised from
    `params.encoder.layer_010.attention.bias/.zarray` to `params.encoder.layer_015`, above the
    first key of its subtree (OCDBT-044); the keys still increase and generations 3-5 are
    untouched."""
    path = _copy("deep_btree", tmp_path)
    db = Database(path)
    m = db.manifest
    version = db.version(2)
    root = db.read_btree_node(version.root.location)
    entries = list(root.entries)
    assert entries[1].key == b"params.encoder.layer_010.attention.bias/.zarray"
    entries[1] = dataclasses.replace(entries[1], key=b"params.encoder.layer_015")
    enc = fmt.encode_btree_node(dataclasses.replace(root, entries=tuple(entries)))
    data_file = path / version.root.location.file_id.path.decode()
    data = data_file.read_bytes()
    data_file.write_bytes(data + enc)
    loc = fmt.IndirectDataReference(version.root.location.file_id, len(data), len(enc))
    moved = dataclasses.replace(version, root=dataclasses.replace(version.root, location=loc))
    versions = tuple(moved if v.generation_number == 2 else v for v in m.versions)
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, versions, m.version_tree_nodes))
    )
    return path


def test_ocdbt_044_in_an_old_generation_is_found_by_deep_verification(tmp_path):
    """Reading generation 2 refuses it; the latest generation reads; `verify_database` (and so
    `validate --deep`) walks every generation with the key ranges of §8.1 and reports it."""
    from ockpt.ocdbt.verify import verify_database
    from ockpt.validate import validate

    path = _old_generation_with_a_bad_interior_key(tmp_path)
    _raises("OCDBT-044", lambda: list(Database(path).items(generation=2)))
    assert Database(path).list() == Database(_db(BY_NAME["deep_btree"])).list()
    errors = list(verify_database(Database(path)))
    assert [e.rule for e in errors] == ["OCDBT-044"]
    assert "params.encoder.layer_015" in errors[0].expected  # the range its parent gives
    assert {f.rule for f in validate(path).findings} == {"LOAD-050"}  # the latest only
    assert {f.rule for f in validate(path, deep=True).findings} == {"LOAD-050", "OCDBT-044"}


# ---------------------------------------------------------------------------------------------
# spec/ocdbt.md §8.6: the worked example is these bytes

_HEX_LINE = re.compile(r"^([0-9a-f]{8}): ((?:[0-9a-f]{2} )*[0-9a-f]{2})")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start)
    return text[start:end]


def test_worked_example_hex_dumps_are_the_fixture_bytes():
    section = _section((ROOT / "spec" / "ocdbt.md").read_text(), "### 8.6 Worked example")
    db_path = _db(BY_NAME["btree_example"])
    current, lines = None, 0
    for line in section.splitlines():
        if line.startswith("file "):
            current = (db_path / line[5:].strip()).read_bytes()
            continue
        m = _HEX_LINE.match(line)
        if m:
            assert current is not None, line
            offset = int(m.group(1), 16)
            want = bytes.fromhex(m.group(2))
            assert current[offset : offset + len(want)] == want, line
            lines += 1
    assert lines == 9 + 7 + 6 + 7


def test_worked_example_lookup():
    """The walk of §8.6: root 707 (entry 1, prefix params.layer_), node 614 (entry 0, prefix
    params.layer_0), leaf 297 (entry 3, inline k07); the out-of-line value of the leaf at 165."""
    path = _db(BY_NAME["btree_example"])
    db = Database(path)
    version = db.version()
    assert (version.generation_number, version.root_height) == (2, 2)
    loc = version.root.location
    assert (loc.file_id.path, loc.offset, loc.length) == (
        b"d/b33b9f38722cf0c9b3b6c900c8a3f4fd",
        707,
        108,
    )
    root = db.read_btree_node(loc)
    assert [(e.key, e.subtree_common_prefix) for e in root.entries] == [
        (b"params.layer_00.bias/0", b"params.layer_0"),
        (b"params.layer_06.bias/0", b"params.layer_"),
    ]
    mid_ref = root.entries[1].node.location
    assert (mid_ref.offset, mid_ref.length) == (614, 93)
    mid = db.read_btree_node(mid_ref)
    assert [(e.key, e.subtree_common_prefix) for e in mid.entries] == [
        (b"06.bias/0", b"0"),
        (b"09.bias/0", b""),
    ]
    leaf_ref = mid.entries[0].node.location
    assert (leaf_ref.offset, leaf_ref.length) == (297, 110)
    leaf = db.read_btree_node(leaf_ref)
    assert leaf.data_file_table == () and leaf.entries[3] == fmt.LeafNodeEntry(
        b"7.kernel/0", b"k07"
    )
    assert db.get("params.layer_07.kernel/0") == b"k07"
    first_mid = db.read_btree_node(root.entries[0].node.location)
    other = db.read_btree_node(first_mid.entries[1].node.location)
    assert first_mid.entries[1].node.location.offset == 165
    assert other.entries[0].value.file_id.path == loc.file_id.path
    value = other.entries[0].value
    assert other.entries[0].key == b"3.kernel/0" and (value.offset, value.length) == (0, 40)
    assert db.get("params.layer_03.kernel/0") == bytes(range(40))
    assert (
        hashlib.sha256(db.get("params.layer_03.kernel/0")).hexdigest()
        == rec.load(BY_NAME["btree_example"])["keys"]["params.layer_03.kernel/0"][1]
    )
