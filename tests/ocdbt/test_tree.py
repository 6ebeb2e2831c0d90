"""`ockpt.ocdbt.tree`: versions, manifests, the B+tree and data files of a database, grouped by the
function they guard. They read the real databases of `fixtures/tensorstore-0.1.86` (version
tree nodes of heights 1 to 4, B+trees up to height 5, zstd and uncompressed nodes) and compare
with their records (written from the writes, not read back), or hand-built / damaged copies of
them, and assert what a reader sees: keys, values, generations, or the error's rule, file and
offset. None needs tensorstore (the mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import _record_ocdbt as rec  # noqa: E402
import pytest

from ockpt.errors import FormatError, MissingDataError
from ockpt.limits import LIMITS
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt import tree
from ockpt.ocdbt.tree import Database, key_successor
from ockpt.ocdbt.verify import verify_database
from ockpt.store import MemoryStore
from tests.support.errors import assert_error, error_fields, raised
from tests.support.ocdbt import (
    TENSORSTORE_SET,
    build_database,
    copy_database,
    database_case,
    rewrite_root,
)

_error = functools.partial(raised, FormatError)  # the FormatError a call raises


class Bytes:
    """A data file held in memory, as a `kv.datafile.DataFile`: `size` None reads like an
    object store's (no size without a read); `short` caps what one read returns; `shrink_to`
    makes reads past that byte come back empty (the file shrank after it was opened)."""

    def __init__(self, data: bytes, *, size="real", short=None, shrink_to=None, display="mem"):
        self.data = data
        self.size = len(data) if size == "real" else size
        self.short = short
        self.shrink_to = len(data) if shrink_to is None else shrink_to
        self.display = display
        self.identity = None  # each one a file of its own
        self.reads: list[tuple[int, int]] = []
        self.closed = False

    def pread(self, length: int, offset: int) -> bytes:
        self.reads.append((length, offset))
        n = length if self.short is None else min(length, self.short)
        return self.data[offset : min(offset + n, self.shrink_to)]

    def preadv(self, view: memoryview, offset: int) -> int:
        data = self.pread(len(view), offset)
        view[: len(data)] = data
        return len(data)

    def byte_range(self, offset: int, length: int):
        return ("range", offset, length)

    def close(self) -> None:
        self.closed = True


def _value_ref(db: Database, key: bytes):
    """The out-of-line reference of `key` in the latest generation."""
    entry = dict(db.entries())[key]
    assert isinstance(entry.value, fmt.IndirectDataReference)
    return entry.value


# --------------------------------------------------------------------------------------------
# key_successor, _as_key


def test_key_successor_is_the_smallest_key_above_the_prefix():
    """`key_successor`: increment the last byte that is not 0xFF, dropping the 0xFF ones after
    it; None when every byte is 0xFF or the prefix is empty (no upper bound). Kills mutants of
    its loop condition, its pop, its None return and its increment."""
    assert key_successor(b"ab") == b"ac"
    assert key_successor(b"a\xff") == b"b"
    assert key_successor(b"a\xff\xff") == b"b"
    assert key_successor(b"\x00") == b"\x01"
    assert key_successor(b"\xfe") == b"\xff"
    assert key_successor(b"\xff") is None
    assert key_successor(b"\xff\xff") is None
    assert key_successor(b"") is None


def test_str_and_bytes_keys_read_the_same():
    """`_as_key`: a str key is its UTF-8 bytes (`get`, `list`, `items`, `entries`)."""
    db = Database(database_case("btree_example"))
    keys = db.list()
    assert db.list("params.layer_01") == db.list(b"params.layer_01") != []
    key = keys[3]
    assert db.get(key.decode()) == db.get(key) is not None
    assert list(db.items(key.decode(), keys[6].decode())) == list(db.items(key, keys[6]))


# --------------------------------------------------------------------------------------------
# versions, version, _version_leaves, _check_version_node (real version trees)


@pytest.mark.parametrize("name", ["many_generations", "version_tree_arity2", "deep_btree"])
def test_every_generation_reads_as_recorded(name):
    """`versions` lists every generation oldest first, through version tree nodes of height 1
    to 4 and the manifest's inline versions; `version(g)` finds each one by walking the version
    tree (`_version_leaves`, `_check_version_node`, `read_version_node`), and a range read of
    it gives the record's keys and values. Kills the mutants of `versions`, `version`,
    `_version_leaves`, `_check_version_node` that lose, reorder or refuse generations."""
    record = rec.load(TENSORSTORE_SET / name)
    db = Database(database_case(name))
    versions = db.versions()
    want = [g["generation"] for g in record["generations"]]
    assert [v.generation_number for v in versions] == want == list(range(1, len(want) + 1))
    for v in versions:
        assert db.version(v.generation_number) == v
    assert db.version() == versions[-1] == db.manifest.versions[-1]
    step = 1 if len(want) < 60 else 7
    for gen in record["generations"][::step]:
        g = gen["generation"]
        items = list(db.items(generation=g))
        assert len(items) == gen["num_keys"], g
        assert rec.kv_digest(items) == gen["sha256"], g


def test_version_finds_the_first_subtree_reaching_the_generation():
    """`version(g)` descends into the first child whose latest generation is >= g, at every
    level of a height-4 version tree (arity 2): generation 1, the last of each subtree, and the
    first after it. Kills `>=` mutated to `>`/`<=`, the `None` default, and mutants of the
    descent (`refs, parent = node.entries, child`)."""
    db = Database(database_case("version_tree_arity2"))
    nodes = db.manifest.version_tree_nodes
    assert [(r.height, r.generation_number) for r in nodes] == [(4, 16), (3, 32), (2, 36), (1, 40)]
    for g in (1, 2, 3, 8, 9, 15, 16, 17, 31, 32, 33, 35, 36, 37, 39, 40, 41):
        assert db.version(g).generation_number == g


@pytest.mark.parametrize("g", [0, 42, 10**6])
def test_version_of_an_absent_generation(g):
    """`version(g)` for a generation the database does not have: OCDBT-030 naming the
    manifest and the generation. Kills mutants of the error text, rule, file and `got`, and of
    the loop that gives up (`break`)."""
    db = Database(database_case("version_tree_arity2"))
    err = _error(lambda: db.version(g))
    manifest = os.path.join(str(database_case("version_tree_arity2")), "manifest.ocdbt")
    assert error_fields(err) == {
        "rule": "OCDBT-030",
        "file": manifest,
        "message": "no such generation in the database",
        "pointer": None,
        "got": g,
    }


def test_version_of_a_generation_missing_inside_a_version_leaf(tmp_path):
    """A version tree leaf that skips the generation asked for: `version(g)` stops at that
    leaf (`break`) and says OCDBT-030, not a wrong version."""
    path = copy_database("version_tree_arity2", tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[-1]  # height 1: generations 37-40
    node = db.read_version_node(ref.location)
    leaf_ref = node.entries[0]
    leaf = db.read_version_node(leaf_ref.location)
    assert [e.generation_number for e in leaf.entries] == [37, 38]
    bad = fmt.VersionTreeNode(0, 1, (leaf.entries[1],))
    loc = _append_version_node(path, leaf_ref.location, bad)
    new_leaf_ref = fmt.VersionNodeReference(loc, 38, 0, 1, leaf_ref.commit_time)
    inner = fmt.VersionTreeNode(1, 1, (new_leaf_ref, *node.entries[1:]))
    inner_loc = _append_version_node(path, ref.location, inner)
    _set_manifest_node(path, -1, inner_loc, num_generations=3)
    db = Database(path)
    assert db.version(38).generation_number == 38
    err = _error(lambda: db.version(37))
    assert_error(err, rule="OCDBT-030")
    assert "no such generation" in err.message


def _append_version_node(
    path: Path, like: fmt.IndirectDataReference, node
) -> fmt.IndirectDataReference:
    f = path / like.file_id.path.decode()
    data = f.read_bytes()
    enc = fmt.encode_version_tree_node(node, transitive_path=like.file_id.base_path, compression=0)
    f.write_bytes(data + enc)
    return fmt.IndirectDataReference(like.file_id, len(data), len(enc))


def _set_manifest_node(path: Path, index: int, loc, **changes) -> None:
    m = fmt.decode_manifest((path / "manifest.ocdbt").read_bytes())
    nodes = list(m.version_tree_nodes)
    r = nodes[index]
    fields = dict(
        location=loc,
        generation_number=r.generation_number,
        height=r.height,
        num_generations=r.num_generations,
        commit_time=r.commit_time,
    )
    fields.update(changes)
    nodes[index] = fmt.VersionNodeReference(**fields)
    (path / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(m.config, m.versions, tuple(nodes)))
    )


@pytest.mark.parametrize(
    "field, value, want",
    [
        (
            "arity",
            3,
            {
                "rule": "OCDBT-011",
                "message": "version node arity differs from the manifest's",
                "expected": 1,
                "got": 3,
            },
        ),
        (
            "height",
            2,
            {
                "rule": "OCDBT-032",
                "message": "version node height differs from its reference",
                "expected": 1,
                "got": 2,
            },
        ),
        (
            "generation",
            39,
            {
                "rule": "OCDBT-034",
                "message": "latest generation of a version subtree differs from its reference",
                "expected": 39,
                "got": 40,
            },
        ),
        (
            "count",
            5,
            {
                "rule": "OCDBT-034",
                "message": "num_generations differs from the generations in the subtree",
                "expected": 5,
                "got": 4,
            },
        ),
    ],
)
def test_check_version_node_names_node_field_and_values(tmp_path, field, value, want):
    """`_check_version_node` on the manifest's height-1 node of `version_tree_arity2`, edited:
    its arity (OCDBT-011), its height (OCDBT-032), the reference's latest generation or
    num_generations (OCDBT-034); each error names the node's data file and offset, expected
    and got, both through `versions()` and `version(g)`. Kills the mutants of each check's
    comparison, text, rule, file, pointer, expected and got."""
    path = copy_database("version_tree_arity2", tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[-1]
    node = db.read_version_node(ref.location)
    assert (node.height, node.version_tree_arity_log2, ref.generation_number) == (1, 1, 40)
    changes = {}
    if field == "arity":
        loc = _append_version_node(path, ref.location, fmt.VersionTreeNode(1, 3, node.entries))
    elif field == "height":
        # a height-2 node holding the same children claims a height its reference denies
        loc = _append_version_node(path, ref.location, fmt.VersionTreeNode(2, 1, node.entries))
    elif field == "generation":
        loc = ref.location
        changes = {"generation_number": value, "num_generations": 4}
        # the inline versions must stay newer: 41 > 39
    else:
        loc = ref.location
        changes = {"num_generations": value}
    _set_manifest_node(path, -1, loc, **changes)
    where = os.path.join(str(path), loc.file_id.path.decode())
    for read in (lambda d: d.versions(), lambda d: d.version(38)):
        err = _error(lambda read=read: read(Database(path)))
        assert error_fields(err) == {"file": where, "pointer": f"@{loc.offset}", **want}


def test_count_of_an_interior_version_node_sums_its_children(tmp_path):
    """`_check_version_node` counts an interior node's generations as the sum of its
    children's num_generations (a leaf: its entries): the height-1 node of
    `version_tree_arity2` holds 4 generations in 2 leaves of 2. A child claiming 3 makes the
    sum 5, refused against the reference's 4. Kills `sum` mutated to count entries, and
    `height == 0` mutated."""
    path = copy_database("version_tree_arity2", tmp_path)
    db = Database(path)
    ref = db.manifest.version_tree_nodes[-1]
    node = db.read_version_node(ref.location)
    assert node.height == 1 and [c.num_generations for c in node.entries] == [2, 2]
    db.versions()  # the real node passes: 2 + 2 = 4
    first = node.entries[0]
    bad_child = fmt.VersionNodeReference(
        first.location, first.generation_number, first.height, 3, first.commit_time
    )
    loc = _append_version_node(
        path, ref.location, fmt.VersionTreeNode(1, 1, (bad_child, node.entries[1]))
    )
    _set_manifest_node(path, -1, loc)
    where = os.path.join(str(path), loc.file_id.path.decode())
    err = _error(lambda: Database(path).versions())
    assert error_fields(err) == {
        "rule": "OCDBT-034",
        "file": where,
        "message": "num_generations differs from the generations in the subtree",
        "pointer": f"@{loc.offset}",
        "expected": 4,
        "got": 5,
    }


def test_versions_must_increase_across_version_tree_nodes(tmp_path):
    """`versions` refuses generations that do not strictly increase from one version tree
    node into the next (OCDBT-030, naming the manifest): the height-1 node of
    `version_tree_arity2` (37-40) is replaced by one whose first leaf holds generation 36 only,
    which the height-2 node (33-36) already ends with: equal, not greater. Kills the mutants of
    the `b <= a` test (`<` lets equal pass) and of its error."""
    path = copy_database("version_tree_arity2", tmp_path)
    db = Database(path)
    h2, h1 = db.manifest.version_tree_nodes[2:]
    below = db.read_version_node(db.read_version_node(h2.location).entries[0].location)
    leaf36 = db.read_version_node(below.entries[-1].location)
    assert [e.generation_number for e in leaf36.entries] == [35, 36]
    node = db.read_version_node(h1.location)
    only36 = fmt.VersionTreeNode(0, 1, (leaf36.entries[-1],))
    loc36 = _append_version_node(path, h1.location, only36)
    child = fmt.VersionNodeReference(loc36, 36, 0, 1, leaf36.entries[-1].commit_time)
    loc = _append_version_node(
        path, h1.location, fmt.VersionTreeNode(1, 1, (child, node.entries[1]))
    )
    _set_manifest_node(path, -1, loc, num_generations=3)
    db = Database(path)
    assert db.version(39).generation_number == 39
    err = _error(db.versions)
    assert error_fields(err) == {
        "rule": "OCDBT-030",
        "file": str(path / "manifest.ocdbt"),
        "message": "generations of the version tree are not strictly increasing",
        "pointer": None,
    }


def test_version_tree_depth_is_bounded(tmp_path, in_force):
    """`_version_leaves` refuses a version tree deeper than the limits' `max_depth` (OCDBT-032,
    naming the manifest), and `version(g)` gives up after `max_depth` levels. With the bound
    set to 3, the height-4 node of `version_tree_arity2` (5 levels) is refused, a bound of 4
    reads it.
    Kills mutants of `depth > max_depth`, of `depth + 1` and of the error."""
    path = database_case("version_tree_arity2")
    in_force(max_depth=4)
    assert len(Database(path).versions()) == 41
    in_force(max_depth=3)
    err = _error(lambda: Database(path).versions())
    assert error_fields(err) == {
        "rule": "OCDBT-032",
        "file": str(path / "manifest.ocdbt"),
        "message": "version tree too deep",
        "pointer": None,
    }
    in_force(max_depth=5)
    assert Database(path).version(1).generation_number == 1
    in_force(max_depth=4)
    assert _error(lambda: Database(path).version(1)).rule == "OCDBT-030"


def test_a_missing_btree_node_file_names_the_btree_node(tmp_path):
    """A B+tree node whose data file is missing: MissingDataError naming the file and
    "referenced from btreenode" (the kind `read_btree_node` gives `_cached`)."""
    path = copy_database("btree_example", tmp_path)
    name = Database(path).version().root.location.file_id.path.decode()
    (path / name).unlink()
    for read in (lambda d: d.list(), lambda d: d.get(b"x")):
        with pytest.raises(MissingDataError) as info:
            read(Database(path, display="DB"))
        assert error_fields(info) == {
            "rule": "OCDBT-022",
            "file": f"DB/{name}",
            "message": "referenced data file is missing",
            "pointer": "referenced from btreenode",
        }


def test_a_node_in_a_subdirectory_names_its_files_from_there(tmp_path):
    """A B+tree node stored in a data file under `sub/` lists its data files relative to
    `sub/` (its transitive path, spec ocdbt §3): `_cached` decodes it with the base path of its
    own file, so its values are found under `sub/`. Kills the mutants that drop
    `transitive_path`."""
    db_dir = tmp_path / "db"
    (db_dir / "d").mkdir(parents=True)
    (db_dir / "sub" / "d").mkdir(parents=True)
    values = fmt.DataFileId(b"sub/", b"d/values")
    (db_dir / "sub" / "d" / "values").write_bytes(b"v" * 20 + b"w" * 20)
    leaf = fmt.BtreeNode(
        0,
        (
            fmt.LeafNodeEntry(b"a", fmt.IndirectDataReference(values, 0, 20)),
            fmt.LeafNodeEntry(b"b", fmt.IndirectDataReference(values, 20, 20)),
        ),
    )
    enc = fmt.encode_btree_node(leaf, transitive_path=b"sub/", compression=0)
    (db_dir / "sub" / "d" / "leaf").write_bytes(enc)
    stats = fmt.BtreeNodeStatistics(40, len(enc), 2)
    leaf_ref = fmt.BtreeNodeReference(
        fmt.IndirectDataReference(fmt.DataFileId(b"sub/", b"d/leaf"), 0, len(enc)), stats
    )
    root = _write_node(
        db_dir, "root", fmt.BtreeNode(1, (fmt.InteriorNodeEntry(b"a", 0, leaf_ref),))
    )
    version = fmt.BtreeGenerationReference(root, 1, 1, 0)
    config = fmt.Config(b"\x01" * 16, 0, 8, 1 << 20, 4, None)
    (db_dir / "manifest.ocdbt").write_bytes(
        fmt.encode_manifest(fmt.Manifest(config, (version,), ()))
    )
    db = Database(db_dir)
    assert list(db.items()) == [(b"a", b"v" * 20), (b"b", b"w" * 20)]
    assert db.get(b"b") == b"w" * 20
    assert list(verify_database(Database(db_dir))) == []


def test_a_missing_version_node_file_names_the_version_node(tmp_path):
    """A version tree node whose data file is missing: MissingDataError naming the file and
    "referenced from versionnode" (the kind `read_version_node` gives `_cached`). Kills the
    mutants of that kind string."""
    path = copy_database("version_tree_arity2", tmp_path)
    ref = Database(path).manifest.version_tree_nodes[0]
    name = ref.location.file_id.path.decode()
    (path / name).unlink()
    with pytest.raises(MissingDataError) as info:
        Database(path, display="DB").versions()
    assert error_fields(info) == {
        "rule": "OCDBT-022",
        "file": f"DB/{name}",
        "message": "referenced data file is missing",
        "pointer": "referenced from versionnode",
    }


def test_read_version_node_decodes_and_caches_by_kind(tmp_path):
    """`read_version_node` decodes a version tree node (not a B+tree node) at its reference,
    and `_cached` keeps it under its kind: the same range read as a B+tree node is a magic
    error, not the cached version node. Kills mutants of the kind string and of the decoder
    passed."""
    db = Database(database_case("version_tree_arity2"))
    ref = db.manifest.version_tree_nodes[0]
    node = db.read_version_node(ref.location)
    assert isinstance(node, fmt.VersionTreeNode) and node.height == 4
    assert db.read_version_node(ref.location) is node  # cached
    err = _error(lambda: db.read_btree_node(ref.location))
    assert err.rule == "OCDBT-001"


# --------------------------------------------------------------------------------------------
# manifest: numbered kind, size bound, links out


def _numbered(path: Path, *, name_number=None, kind=0, uuid=None) -> str:
    """Turn the database at `path` into a numbered-kind one: `manifest.ocdbt` holds only the
    configuration, `manifest.<016x>` the version tree. Returns the numbered file's name."""
    data = (path / "manifest.ocdbt").read_bytes()
    m = fmt.decode_manifest(data)
    latest = m.versions[-1].generation_number
    name = f"manifest.{latest if name_number is None else name_number:016x}"
    inner = m.config if uuid is None else fmt.Config(uuid, *list(vars(m.config).values())[1:])
    if kind != 0:
        inner = fmt.Config(inner.uuid, kind, *list(vars(inner).values())[2:])
        (path / name).write_bytes(fmt.encode_manifest(fmt.Manifest(inner, (), ())))
    else:
        (path / name).write_bytes(
            fmt.encode_manifest(fmt.Manifest(inner, m.versions, m.version_tree_nodes))
        )
    top = fmt.Config(m.config.uuid, fmt.MANIFEST_KIND_NUMBERED, *list(vars(m.config).values())[2:])
    (path / "manifest.ocdbt").write_bytes(fmt.encode_manifest(fmt.Manifest(top, (), ())))
    return name


def test_numbered_manifest_is_the_latest_numbered_file(tmp_path):
    """A numbered-kind database reads its version tree from the numbered manifest with the
    highest number (hex, 16 digits); other names (`manifest.ocdbt`, a wrong digit count,
    upper case) are not numbered manifests. Errors name that file. Kills the mutants of the
    numbered branch (`_NUMBERED`, `sorted`, `numbered[-1]`, `self._manifest_file`) and `_names`."""
    path = copy_database("version_tree_arity2", tmp_path)
    want = Database(path).versions()
    name = _numbered(path)
    assert name == "manifest.0000000000000029"
    (path / "manifest.0000000000000003").write_bytes(b"older, never read")
    (path / "manifest.00000000000000FF").write_bytes(b"not lower-case hex")
    (path / "manifest.00000000000000fff").write_bytes(b"17 digits")
    (path / "manifest.000000000000002a.tmp").write_bytes(b"suffix")
    db = Database(path)
    assert db.manifest.config.manifest_kind == fmt.MANIFEST_KIND_SINGLE
    assert db.versions() == want
    assert db.config == db.manifest.config
    err = _error(lambda: db.version(99))
    assert err.file == str(path / name)


@pytest.mark.parametrize(
    "problem, where, message, details",
    [
        ("none", "top", "numbered-kind database has no manifest.<016x> file", {}),
        (
            "kind",
            "inner",
            "a numbered manifest must hold a version tree (manifest_kind 0)",
            {"got": 1},
        ),
        (
            "uuid",
            "inner",
            "numbered manifest belongs to another database (uuid differs)",
            {"expected": "{uuid}", "got": "{other}"},
        ),
        (
            "number",
            "inner",
            "numbered manifest name must be its latest generation number",
            {"expected": 64, "got": 41},
        ),
    ],
)
def test_numbered_manifest_problems_name_the_file(tmp_path, problem, where, message, details):
    """Each numbered-manifest fault, with all its fields (OCDBT-050): none present, a
    numbered manifest of the numbered kind, another database's uuid, a name that is not its
    latest generation. Kills the mutants of each check and of its file, expected, got."""
    path = copy_database("version_tree_arity2", tmp_path)
    uuid = Database(path).config.uuid
    other = bytes(16)
    if problem == "none":
        name = _numbered(path)
        (path / name).unlink()
    elif problem == "kind":
        name = _numbered(path, kind=1)
    elif problem == "uuid":
        name = _numbered(path, uuid=other)
    else:
        name = _numbered(path, name_number=64)
    err = _error(lambda: Database(path).manifest)
    files = {"top": str(path / "manifest.ocdbt"), "inner": str(path / name)}
    hexes = {"{uuid}": uuid.hex(), "{other}": other.hex()}
    assert error_fields(err) == {
        "rule": "OCDBT-050",
        "file": files[where],
        "message": message,
        "pointer": None,
        **{k: hexes.get(v, v) for k, v in details.items()},
    }


def test_manifest_larger_than_the_bound(tmp_path, in_force):
    """A manifest file one byte over the limits' `max_manifest_bytes` is refused (OCDBT-002,
    expected `<= N`); exactly N bytes is decoded.
    Kills mutants of the bound, of `read_capped`'s limit and of the error."""
    path = copy_database("btree_example", tmp_path)
    data = (path / "manifest.ocdbt").read_bytes()
    in_force(max_manifest_bytes=len(data))
    assert Database(path).versions()
    in_force(max_manifest_bytes=len(data) - 1)
    err = _error(lambda: Database(path).manifest)
    assert error_fields(err) == {
        "rule": "OCDBT-002",
        "file": str(path / "manifest.ocdbt"),
        "message": "manifest larger than the manifest size limit",
        "pointer": None,
        "expected": f"<= {len(data) - 1}",
    }


def test_manifest_missing_or_linked_out(tmp_path):
    """A missing manifest: OCDBT-050 naming it. A manifest that is a symlink out of the
    checkpoint root: PATH-004 naming the link and where it leads; a link inside the root
    reads. Kills mutants of `commonpath`, the realpath join and the texts."""
    path = copy_database("btree_example", tmp_path)
    (path / "manifest.ocdbt").rename(tmp_path / "elsewhere")
    err = _error(lambda: Database(path).manifest)
    assert error_fields(err) == {
        "rule": "OCDBT-050",
        "file": str(path / "manifest.ocdbt"),
        "message": "OCDBT manifest is missing",
        "pointer": None,
    }
    os.symlink(tmp_path / "elsewhere", path / "manifest.ocdbt")
    err = _error(lambda: Database(path).manifest)
    real = os.path.realpath(path)
    assert error_fields(err) == {
        "rule": "PATH-004",
        "file": str(path / "manifest.ocdbt"),
        "message": (
            f"'manifest.ocdbt' resolves to {os.path.realpath(tmp_path / 'elsewhere')!r}, "
            f"outside the checkpoint {real!r} (a symbolic link leads out)"
        ),
        "pointer": None,
    }
    # a link to a file inside the database reads
    os.unlink(path / "manifest.ocdbt")
    (tmp_path / "elsewhere").rename(path / "inside")
    os.symlink("inside", path / "manifest.ocdbt")
    assert Database(path).versions()


def test_a_manifest_that_is_no_regular_file(tmp_path):
    """`manifest.ocdbt` that is a directory: PATH-005, naming it under `display` (the name
    `_read_manifest_file` passes to `files.open_regular`). Kills the mutants that drop it."""
    path = copy_database("btree_example", tmp_path)
    (path / "manifest.ocdbt").unlink()
    (path / "manifest.ocdbt").mkdir()
    err = _error(lambda: Database(path, display="DB").manifest)
    assert err.rule == "PATH-005" and err.file == "DB/manifest.ocdbt", str(err)


def test_display_names_files_in_errors(tmp_path):
    """`display` replaces the path in every error (`where`), kept relative; `where()` with no
    name is the display itself. Kills mutants of `_shown` and `where`."""
    path = copy_database("btree_example", tmp_path)
    db = Database(path, display="ckpt/db")
    assert db.where() == "ckpt/db" and db.where("d/x") == "ckpt/db/d/x"
    assert Database(path).where() == str(path)
    err = _error(lambda: db.version(7))
    assert err.file == "ckpt/db/manifest.ocdbt"


class ObjectStore(MemoryStore):
    """An object store held in memory, read as ockpt reads a URL directory: no sizes known
    and no cheap ranges (as `UrlStore` declares), without tensorstore; each `get` recorded."""

    capabilities = dataclasses.replace(
        MemoryStore.capabilities, sizes_known=False, random_access=False
    )

    def get(self, key, *, limit=0, rule=""):
        self.requests.append(("read", key, limit, rule))
        return super().get(key, limit=limit, rule=rule)

    def size(self, key):
        raise AssertionError("an object store tells no sizes")


def _store(path: Path) -> ObjectStore:
    loc = ObjectStore("db/", display="mem://db")
    for p in path.rglob("*"):
        if p.is_file():
            loc.set(p.relative_to(path).as_posix(), p.read_bytes())
    loc.requests = []
    return loc


def test_a_database_on_an_object_store_reads_as_on_disk(in_force):
    """`Database` on an object store (no sizes, no descriptors): the manifest is read with the
    manifest size limit and rule OCDBT-002 (`Store.get`), every generation reads as on disk,
    data files are read by ranges (no size known: `value_range` is None), errors name the
    store. Kills the mutants of `_read_manifest_file`, of `_resolve` and of `_names` for a
    store without files."""
    path = database_case("version_tree_arity2")
    record = rec.load(TENSORSTORE_SET / "version_tree_arity2")
    loc = _store(path)
    db = Database(loc)
    assert loc.requests == []
    assert [v.generation_number for v in db.versions()] == list(range(1, 42))
    assert loc.requests == [("read", "manifest.ocdbt", LIMITS.max_manifest_bytes, "OCDBT-002")]
    for gen in record["generations"][::5]:
        items = list(db.items(generation=gen["generation"]))
        assert rec.kv_digest(items) == gen["sha256"]
    key = next(k for k, (n, _) in record["keys"].items() if n > db.config.max_inline_value_bytes)
    assert rec.value_digest(db.get(key)) == record["keys"][key]
    assert db.value_range(key) is None
    assert db.reference_fault(_value_ref(db, key.encode())) is None
    assert db.where("d/x") == "mem://db/d/x"
    # the manifest bound and errors, by the location's name
    data = MemoryStore.get(loc, "manifest.ocdbt", limit=1 << 30)
    in_force(max_manifest_bytes=len(data) - 1)
    err = _error(lambda: Database(loc).manifest)
    assert error_fields(err) == {
        "rule": "OCDBT-002",
        "file": "mem://db/manifest.ocdbt",
        "message": "manifest larger than the manifest size limit",
        "pointer": None,
        "expected": f"<= {len(data) - 1}",
    }
    in_force(max_manifest_bytes=len(data))
    loc.set("manifest.ocdbt", data[:-1] + bytes([data[-1] ^ 1]))
    assert _error(lambda: Database(loc).manifest).file == "mem://db/manifest.ocdbt"
    loc.delete("manifest.ocdbt")
    err = _error(lambda: Database(loc).manifest)
    assert error_fields(err) == {
        "rule": "OCDBT-050",
        "file": "mem://db/manifest.ocdbt",
        "message": "OCDBT manifest is missing",
        "pointer": None,
    }


def test_a_numbered_database_on_an_object_store(tmp_path):
    """A numbered-kind database on an object store finds its latest numbered manifest in the
    store's listing (`_names`), and a manifest bigger than the decode bound is refused
    (`max_decoded_bytes` passed on: OCDBT-006)."""
    path = copy_database("version_tree_arity2", tmp_path)
    want = Database(path).versions()
    name = _numbered(path)
    loc = _store(path)
    db = Database(loc)
    assert db.versions() == want
    assert ("read", name, LIMITS.max_manifest_bytes, "OCDBT-002") in loc.requests
    err = _error(lambda: Database(loc, max_decoded_bytes=20).manifest)
    assert err.rule == "OCDBT-006" and err.file == "mem://db/manifest.ocdbt"


def test_a_local_manifest_is_decoded_within_max_decoded_bytes(tmp_path):
    """`max_decoded_bytes` bounds the manifest's decoded body too (OCDBT-006 naming it)."""
    path = database_case("btree_example")
    err = _error(lambda: Database(path, max_decoded_bytes=20).manifest)
    assert err.rule == "OCDBT-006" and err.file == str(path / "manifest.ocdbt")
    assert Database(path, max_decoded_bytes=1000).versions()


# --------------------------------------------------------------------------------------------
# B+tree: entries, _walk, list, _find, _index, get, items


def test_range_reads_at_every_boundary_of_a_deep_tree():
    """`entries(start, end)` / `items` / `list(prefix)` on `deep_btree` (height 3, subtree
    prefixes at every level): every start and end at, just below and just above a stored key
    gives exactly the keys in [start, end). Kills the mutants of `_walk`'s skipping and
    stopping (`child_upper <= start`, `child_lower >= end`, `key < start`, `key >= end`), of
    the child bounds and prefixes passed down, and of `list`'s successor bound."""
    db = Database(database_case("deep_btree"))
    keys = db.list()
    assert len(keys) == 636 and keys == sorted(keys)
    probes = keys[::23] + [keys[-1]]
    for s in probes:
        for lo in (s, s[:-1], s + b"\0"):
            got = [k for k, _ in db.entries(lo)]
            assert got == [k for k in keys if k >= lo], lo
            got = [k for k, _ in db.entries(b"", lo)]
            assert got == [k for k in keys if k < lo], lo
    for a, b in zip(probes, probes[3:], strict=False):
        assert [k for k, _ in db.items(a, b)] == [k for k in keys if a <= k < b]
    for prefix in {k[:n] for k in probes for n in (1, 3, 9, 14, 20)} | {b"\xff", b"zz"}:
        assert db.list(prefix) == [k for k in keys if k.startswith(prefix)]
    assert [k for k, _ in db.entries(b"", b"")] == []
    assert [k for k, _ in db.entries(keys[-1] + b"\0")] == []


def test_leaf_nodes_give_every_key_once_in_order():
    """`leaf_nodes` (the one walk `pytree_metadata` reads every array's metadata key from) on
    `deep_btree`: each leaf node once, in key order, with the prefix that makes its entries'
    keys the full keys `entries` gives; the same entry objects."""
    db = Database(database_case("deep_btree"))
    nodes = list(db.leaf_nodes())
    assert len(nodes) > 1 and all(node.height == 0 for _, node in nodes)
    walked = [(prefix + e.key, e) for prefix, node in nodes for e in node.entries]
    assert [k for k, _ in walked] == db.list()
    assert all(a is b for (_, a), (_, b) in zip(walked, db.entries(), strict=True))


def test_reads_from_the_lowest_key(tmp_path):
    """With no `start`, `entries`, `items` and `list` begin at the empty key: keys below any
    letter (`\\x00`, digits, upper case) are listed, and the root's lower bound is the empty
    key (no OCDBT-044). Kills the mutants of the `start` default and of the root's bounds."""
    keys = [b"\x00", b"0", b"A", b"XXXX", b"a"]
    build_database(tmp_path / "db", {k: k * 20 for k in keys})
    db = Database(tmp_path / "db")
    assert [k for k, _ in db.entries()] == keys
    assert [k for k, _ in db.items()] == keys and db.list() == keys
    assert [v for _, v in db.items(end=b"A")] == [b"\x00" * 20, b"0" * 20]


def test_point_reads_through_every_level():
    """`get` on `deep_btree` and `btree_example`: every stored key gives its recorded value
    (length and sha256); keys just below, just above, between, before the first and after the
    last are absent. Kills the mutants of `_find` (bisect left/right, `- 1`, `i < 0`, prefix
    tests, `height -= 1`), `_keys_of` and `read_value`."""
    for name in ("deep_btree", "btree_example", "version_tree_arity2"):
        record = rec.load(TENSORSTORE_SET / name)
        db = Database(database_case(name), node_cache_size=8)
        keys = db.list()
        for key, digest in record["keys"].items():
            assert rec.value_digest(db.get(key)) == digest, key
        for key in keys:
            assert db.get(key + b"\0") is None
            assert db.get(key[:-1]) is None or key[:-1] in keys
        assert db.get(b"") is None and db.get(b"\x00") is None
        assert db.get(b"\xff" * 8) is None and db.get(keys[0][:1]) is None
        for lit in record["values"]:
            assert db.get(lit["key"], generation=lit["generation"]) == rec.decode_value(
                lit["value"]
            )


def test_point_reads_of_old_generations_and_the_empty_one():
    """`get(key, generation=g)` reads the tree of generation g (a key deleted at g is present
    at g - 1); generation 1 is the empty tree: every read gives None / nothing. Kills the
    mutants that drop `generation` on its way to `_root`/`_find`/`entries`."""
    record = rec.load(TENSORSTORE_SET / "many_generations")
    db = Database(database_case("many_generations"))
    for commit in record["commits"][::9]:
        g = commit["generation"]
        for key in commit["set"][:3]:
            assert db.get(key, generation=g) is not None
            assert db.get_into(key, bytearray_buffer(), generation=g) is not None
        for key in commit["deleted"][:3]:
            assert db.get(key, generation=g) is None
            assert db.get(key, generation=g - 1) is not None
            assert db.value_range(key, generation=g) is None
    assert db.get(b"step", generation=1) is None
    assert db.list(generation=1) == [] and list(db.items(generation=1)) == []


def bytearray_buffer():
    return lambda n: memoryview(bytearray(n))


def test_index_after_many_lookups_gives_the_same_answers(monkeypatch):
    """After `INDEX_AFTER_LOOKUPS` point lookups in one generation, lookups go through a
    whole-tree index (`_index`): exactly then it is built, once, per generation, and gives
    the same answers as the walk (present, absent, other generations). With the index capped
    below the key count it is not kept. Kills the mutants of the count (`< INDEX_AFTER`,
    `+ 1`), of the cap (`> INDEX_MAX_KEYS`), of the empty-tree test, of the stored index and of
    `index.get`."""
    monkeypatch.setattr(tree, "INDEX_AFTER_LOOKUPS", 3)
    db = Database(database_case("deep_btree"))
    keys = db.list()
    g = db.version().generation_number
    for i in range(2):
        assert db.get(keys[i]) is not None
        assert g not in db._indexes
    assert db.get(keys[2]) is not None  # the third lookup builds the index
    index = db._indexes[g]
    assert index is not None and list(index) == keys
    assert db._lookups[g] == 3
    for key in keys[::11]:
        assert db.get(key) == Database(database_case("deep_btree")).get(key)
        assert db.get(key + b"\0") is None
    assert db._indexes[g] is index and db._lookups[g] == 3
    # an older generation counts its own lookups
    assert db.get(keys[0], generation=g - 1) == Database(database_case("deep_btree")).get(
        keys[0], generation=g - 1
    )
    assert db._lookups[g - 1] == 1
    # capped at exactly the key count: kept; one below: not kept (None), lookups still answer
    monkeypatch.setattr(tree, "INDEX_MAX_KEYS", len(keys))
    db = Database(database_case("deep_btree"))
    for key in keys[:3]:
        db.get(key)
    assert len(db._indexes[g]) == len(keys)
    monkeypatch.setattr(tree, "INDEX_MAX_KEYS", len(keys) - 1)
    db = Database(database_case("deep_btree"))
    for key in keys[:5]:
        assert db.get(key) is not None
    assert db._indexes[g] is None and db.get(b"nope") is None
    # the index of an older generation holds that generation's keys: layers 8-11, deleted by
    # the last commit, are found at g - 1 before and after its index is built
    monkeypatch.setattr(tree, "INDEX_MAX_KEYS", 2_000_000)
    deleted = rec.load(TENSORSTORE_SET / "deep_btree")["commits"][-1]["deleted"]
    db = Database(database_case("deep_btree"))
    for key in deleted[:6]:
        assert db.get(key, generation=g - 1) is not None, key
        assert db.get(key) is None
    assert db._indexes[g - 1] is not None and db._indexes[g] is not None


def test_index_is_not_built_for_an_empty_tree_nor_a_faulty_one(tmp_path, monkeypatch):
    """`_index` builds nothing for generation 1 (no root); a tree with a fault elsewhere gives
    no index (None), and each lookup meets its own faults: a key in an intact leaf reads, the
    key in the damaged leaf raises. Kills the mutants of `root.location is None` and of the
    `except FormatError` branch."""
    monkeypatch.setattr(tree, "INDEX_AFTER_LOOKUPS", 1)
    db = Database(database_case("many_generations"))
    assert db.get(b"step", generation=1) is None
    assert db._indexes.get(1) is None and 1 not in db._indexes
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    child = db.read_btree_node(root.entries[-1].node.location)
    leaf_ref = child.entries[-1].node.location
    f = path / leaf_ref.file_id.path.decode()
    data = bytearray(f.read_bytes())
    data[leaf_ref.offset + leaf_ref.length - 1] ^= 0xFF  # the CRC-32C of the last leaf
    f.write_bytes(bytes(data))
    db = Database(path)
    assert db.get(b"params.layer_00.bias/0") is not None
    assert db._indexes[v.generation_number] is None
    assert _error(lambda: db.get(b"params.layer_11.kernel/0")).rule == "OCDBT-005"


def test_find_and_walk_refuse_a_too_deep_tree(in_force):
    """A B+tree deeper than the limits' `max_depth` levels: `get` and `list` say OCDBT-040
    naming the manifest. `btree_example` has height 2 (3 levels): bound 2 reads it, bound 1 refuses.
    Kills mutants of `max_depth + 1`, `depth > max_depth`, `depth + 1` and the errors."""
    path = database_case("btree_example")
    in_force(max_depth=2)
    db = Database(path)
    assert len(db.list()) == 24 and db.get(db.list()[-1]) is not None
    in_force(max_depth=1)
    want = {
        "rule": "OCDBT-040",
        "file": str(path / "manifest.ocdbt"),
        "message": "B+tree too deep",
        "pointer": None,
    }
    assert error_fields(_error(lambda: Database(path).list())) == want
    assert error_fields(_error(lambda: Database(path).get(b"params.layer_11.kernel/0"))) == want


def test_btree_height_differs_from_the_parent(tmp_path):
    """`_load_checked`: a node whose height differs from the one its parent implies is
    refused (OCDBT-040) with the node's file, offset, expected and got, by `get` and `list`;
    verification says the same and goes on. Kills the mutants of the comparison and the
    error fields, in tree.py and verify.py."""
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    assert v.root_height == 2 and root.height == 2
    rewrite_root(path, fmt.BtreeNode(3, root.entries), 3)
    # a generation claiming height 3 for a node of height 3: its children (height 1) differ
    child = root.entries[0].node.location
    child_error = {
        "rule": "OCDBT-040",
        "file": str(path / child.file_id.path.decode()),
        "message": "B+tree node height differs from the height its parent implies",
        "pointer": f"@{child.offset}",
        "expected": 2,
        "got": 1,
    }
    assert error_fields(_error(lambda: Database(path).get(b"params.layer_00.bias/0"))) == (
        child_error
    )
    assert error_fields(_error(lambda: Database(path).list())) == child_error
    errors = [error_fields(e) for e in verify_database(Database(path))]
    assert child_error in errors


def _outside(path: Path, loc: fmt.IndirectDataReference, expected: str, got: str) -> dict:
    """All the fields of the OCDBT-044 error for the node at `loc` of the database at `path`."""
    return {
        "rule": "OCDBT-044",
        "file": str(path / loc.file_id.path.decode()),
        "message": "B+tree node keys lie outside the key range given by its parent",
        "pointer": f"@{loc.offset}",
        "expected": expected,
        "got": got,
    }


def test_keys_outside_the_parent_range(tmp_path):
    """`_walk` refuses a child whose keys leave [its key, the next key) (OCDBT-044, with the
    node's file, offset, expected range and got range); the first key is checked against the
    lower bound, the last against the upper bound, which it may not even equal. Kills mutants
    of `first < lower`, `last >= upper` and of the error fields, in tree.py and verify.py."""
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    e0, e1 = root.entries
    assert (e0.key, e1.key) == (b"params.layer_00.bias/0", b"params.layer_06.bias/0")
    # the second child claims to start after its first key: its first key is below
    late = fmt.InteriorNodeEntry(b"params.layer_07", 13, e1.node)
    rewrite_root(path, fmt.BtreeNode(2, (e0, late)), 2)
    want = _outside(
        path,
        e1.node.location,
        "[b'params.layer_07', None)",
        "[b'params.layer_06.bias/0', b'params.layer_09.bias/0']",
    )
    assert error_fields(_error(lambda: Database(path).list())) == want
    assert [error_fields(e) for e in verify_database(Database(path))] == [want]
    # the first child's upper bound is its own last key: equal is outside
    early = fmt.InteriorNodeEntry(b"params.layer_03.kernel/0", 13, e1.node)
    rewrite_root(path, fmt.BtreeNode(2, (e0, early)), 2)
    want0 = _outside(
        path,
        e0.node.location,
        "[b'params.layer_00.bias/0', b'params.layer_03.kernel/0')",
        "[b'params.layer_00.bias/0', b'params.layer_03.kernel/0']",
    )
    assert error_fields(_error(lambda: Database(path).list())) == want0
    assert [error_fields(e) for e in verify_database(Database(path))] == [want0]
    assert Database(path).get(b"params.layer_09.bias/0") is not None  # lookups do not check


def _write_node(path: Path, name: str, node: fmt.BtreeNode) -> fmt.BtreeNodeReference:
    enc = fmt.encode_btree_node(node, compression=0)
    (path / "d" / name).write_bytes(enc)
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"", f"d/{name}".encode()), 0, len(enc))
    return fmt.BtreeNodeReference(ref, fmt.BtreeNodeStatistics(0, 0, 0))


def test_the_last_key_of_a_node_is_checked_against_the_upper_bound(tmp_path):
    """The upper bound is checked against a node's last key (not its second), which may not
    equal the bound: `btree_example`'s first interior node rewritten so that its second child
    starts at `params.layer_03.bias/0`, the last key of the first leaf (7 entries). `list`,
    `items` and verification refuse that leaf (OCDBT-044, all its fields). Kills `entries[-1]`
    mutated to `entries[+1]` and `>=` mutated to `>`, in tree.py and verify.py."""
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    e0, e1 = root.entries
    c0 = db.read_btree_node(e0.node.location)
    l0, l1 = c0.entries
    leaf = db.read_btree_node(l0.node.location)
    assert len(leaf.entries) == 7 and leaf.entries[-1].key == b"3.bias/0"
    child = _write_node(
        path,
        "child",
        fmt.BtreeNode(1, (l0, fmt.InteriorNodeEntry(b"3.bias/0", 0, l1.node))),
    )
    rewrite_root(path, fmt.BtreeNode(2, (fmt.InteriorNodeEntry(e0.key, 14, child), e1)), 2)
    want = _outside(
        path,
        l0.node.location,
        "[b'params.layer_00.bias/0', b'params.layer_03.bias/0')",
        "[b'params.layer_00.bias/0', b'params.layer_03.bias/0']",
    )
    assert error_fields(_error(lambda: Database(path).list())) == want
    assert error_fields(_error(lambda: list(Database(path).items()))) == want
    assert [error_fields(e) for e in verify_database(Database(path))] == [want]


def test_range_reads_do_not_read_subtrees_outside_the_range(tmp_path):
    """A range read skips every subtree that lies wholly below `start` (its upper bound <=
    start) and stops at the first whose lower bound is >= `end`: with the second leaf of
    `btree_example` damaged, reads starting at the next subtree's first key, or ending at the
    damaged leaf's first key, and point reads elsewhere, never touch it. Kills `<= start`
    mutated to `< start` and `>= end` to `> end` in `_walk`, and `break` for `continue`."""
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    keys = db.list()
    root = db.read_btree_node(db.version().root.location)
    l1 = db.read_btree_node(root.entries[0].node.location).entries[1].node.location
    f = path / l1.file_id.path.decode()
    data = bytearray(f.read_bytes())
    data[l1.offset + l1.length - 1] ^= 0xFF  # the CRC-32C of the second leaf
    f.write_bytes(bytes(data))
    db = Database(path)
    err = _error(db.list)
    assert err.rule == "OCDBT-005" and err.file == str(f)  # `_cached` names the data file
    assert err.pointer == f"@{l1.offset + l1.length - 4}"  # and the node's offset in it
    second = b"params.layer_06.bias/0"  # first key of the root's second subtree
    assert [k for k, _ in db.items(second)] == keys[keys.index(second) :]
    damaged_first = b"params.layer_03.kernel/0"
    assert [k for k, _ in db.items(b"", damaged_first)] == keys[: keys.index(damaged_first)]
    assert [k for k, _ in db.entries(b"params.layer_00", damaged_first)] == keys[:7]
    assert db.get(b"params.layer_11.kernel/0") is not None
    assert _error(lambda: db.get(damaged_first)).rule == "OCDBT-005"


# --------------------------------------------------------------------------------------------
# data files: _resolve, _open, read_range, read_range_into, reference_fault, value_range


@pytest.mark.parametrize(
    "raw",
    [b"", b"/abs", b"a\\b", b"a\0b", b"a//b", b"./a", b"a/.", b"..", b"a/../b", b"a/"],
)
def test_data_file_paths_must_be_relative_plain_components(tmp_path, raw):
    """`_resolve` refuses an empty path, an absolute one, a backslash, a NUL, and empty, `.`
    or `..` components (OCDBT-023, naming the database, where the reference was found and the
    path). Kills mutants of each test of the condition and of the error fields."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    db = Database(tmp_path / "db")
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"", raw), 0, 1)
    err = _error(lambda: db.read_range(ref, origin="value", pointer="k"))
    assert error_fields(err) == {
        "rule": "OCDBT-023",
        "file": str(tmp_path / "db"),
        "message": "data file path must be a relative path of plain components",
        "pointer": "referenced from value k",
        "got": raw.decode(),
    }


def test_data_file_path_not_utf8(tmp_path):
    """A data file path that is not UTF-8: OCDBT-023 with the raw bytes; `_file_display`
    names such a file by its repr. Kills mutants of the decode and the error."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    db = Database(tmp_path / "db")
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"d/", b"\xff"), 0, 1)
    err = _error(lambda: db.read_range(ref, origin="btreenode", pointer="@3"))
    assert error_fields(err) == {
        "rule": "OCDBT-023",
        "file": str(tmp_path / "db"),
        "message": "data file path is not UTF-8",
        "pointer": "referenced from btreenode @3",
        "got": b"d/\xff",
    }
    assert db._file_display(ref) == "b'd/\\xff'"
    ok = fmt.IndirectDataReference(fmt.DataFileId(b"d/", b"node"), 0, 1)
    assert db._file_display(ok) == str(tmp_path / "db" / "d" / "node")


def test_data_file_linked_out_of_the_root(tmp_path):
    """A data file that is a symlink out of the database: PATH-004 naming the link, where the
    reference was found and the path; a link to a file inside it reads. Kills mutants of the
    realpath join, of `commonpath` and of the containment root."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    (tmp_path / "db" / "d" / "values").rename(tmp_path / "values")
    os.symlink(tmp_path / "values", tmp_path / "db" / "d" / "values")
    err = _error(lambda: Database(tmp_path / "db").get(b"a"))
    assert error_fields(err) == {
        "rule": "PATH-004",
        "file": str(tmp_path / "db" / "d" / "values"),
        "message": "data file resolves outside the checkpoint (a symbolic link leads out)",
        "pointer": "referenced from value b'a'",
        "got": "d/values",
    }
    os.unlink(tmp_path / "db" / "d" / "values")
    (tmp_path / "values").rename(tmp_path / "db" / "inside")
    os.symlink(tmp_path / "db" / "inside", tmp_path / "db" / "d" / "values")
    assert Database(tmp_path / "db").get(b"a") == b"v" * 20


def test_missing_data_file_names_origin_and_pointer(tmp_path):
    """A missing data file: MissingDataError (OCDBT-022) naming the file under `display`, the
    origin and the pointer (none: the origin alone). Kills mutants of the message and the
    pointer text."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    (tmp_path / "db" / "d" / "values").unlink()
    db = Database(tmp_path / "db", display="DB")
    with pytest.raises(MissingDataError) as info:
        db.get(b"a")
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value b'a'",
    }
    ref = _value_ref(db, b"a")
    with pytest.raises(MissingDataError) as info:
        db.read_range(ref, origin="value")
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value",
    }
    assert db.reference_fault(ref) == "is missing"


def test_open_keeps_at_most_256_data_files(tmp_path):
    """`_open` keeps one open file per data file, reused, and at most 256: the 257th closes
    the oldest. Kills mutants of the cache hit, of `>= 256` and of which one is dropped."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    for i in range(258):
        (tmp_path / "db" / "d" / f"f{i}").write_bytes(b"%03d" % i)
    db = Database(tmp_path / "db")
    refs = [fmt.IndirectDataReference(fmt.DataFileId(b"d/", b"f%d" % i), 0, 3) for i in range(258)]
    first = db._open(refs[0].file_id, pointer=None, origin="x")
    assert db._open(refs[0].file_id, pointer=None, origin="x") is first
    for i, ref in enumerate(refs[:256]):
        assert db.read_range(ref) == b"%03d" % i
    assert len(db._files) == 256 and b"d/f0" in db._files
    assert db.read_range(refs[256]) == b"256"
    assert len(db._files) == 256 and b"d/f0" not in db._files and b"d/f1" in db._files
    assert db.read_range(refs[0]) == b"000"  # reopened
    assert b"d/f1" not in db._files and len(db._files) == 256
    db.close()
    assert db._files == {} and db.read_range(refs[5]) == b"005"


def test_read_range_checks_the_file_size(tmp_path):
    """`read_range` of a reference past the end of its file: OCDBT-022 naming file, offset,
    `offset + length` and the file size; a reference ending exactly at the end reads. Kills
    mutants of `>` and of `_past_end`'s fields."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": b"w" * 30})
    db = Database(tmp_path / "db")
    values = tmp_path / "db" / "d" / "values"
    ref = _value_ref(db, b"b")
    assert (ref.offset, ref.length) == (20, 30)
    assert db.read_range(ref) == b"w" * 30
    assert db.reference_fault(ref) is None
    values.write_bytes(b"v" * 20 + b"w" * 29)
    db = Database(tmp_path / "db")
    err = _error(lambda: db.get(b"b"))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": str(values),
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "expected": "offset + length <= 49",
        "got": "20 + 30",
    }
    assert db.reference_fault(ref) == "ends at byte 49"
    # streamed or mapped: refused
    assert error_fields(_error(lambda: db.value_range(b"b"))) == error_fields(err)
    err2 = _error(lambda: db.get_into(b"b", bytearray_buffer()))
    assert error_fields(err2) == error_fields(err)


def test_check_range_checks_a_known_size_without_reading(tmp_path):
    """`check_range` (deep validation's check of every value of every generation): a file of
    known size is not read, a reference past its end is read_range's OCDBT-022; a file of
    unknown size (an object store's) is read as read_range reads it."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": b"w" * 30})
    data = (tmp_path / "db" / "d" / "values").read_bytes()
    db = Database(tmp_path / "db")
    ref = _value_ref(db, b"b")
    db._files[b"d/values"] = known = Bytes(data)
    db.check_range(ref)
    assert known.reads == []
    db._files[b"d/values"] = Bytes(data, size=49)
    err = _error(lambda: db.check_range(ref))
    assert err.rule == "OCDBT-022"
    assert error_fields(err) == error_fields(_error(lambda: db.read_range(ref)))
    db._files[b"d/values"] = unknown = Bytes(data, size=None)
    db.check_range(ref)
    assert unknown.reads and sum(n for n, _ in unknown.reads) >= 30
    db._files[b"d/values"] = Bytes(data, size=None, shrink_to=49)
    assert _error(lambda: db.check_range(ref)).rule == "OCDBT-022"


def test_read_range_reads_in_pieces_and_names_a_file_that_shrank(tmp_path):
    """`read_range` reads until it has `length` bytes, whatever each read returns (short
    reads joined in order), at most 1 GiB per read; a file that ends under the read: OCDBT-022
    "data file ended early" at the byte where it ended (the size said it held the range); a
    file of unknown size (object store) ending early: the reference's own fault. Kills the
    loop's mutants (`min(left, 1 << 30)`, offsets, `left -=`, the join) and `_past_end`'s
    branches."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30))})
    db = Database(tmp_path / "db", display="DB")
    ref = _value_ref(db, b"b")
    data = (tmp_path / "db" / "d" / "values").read_bytes()
    fake = Bytes(data, short=7, display="DB/d/values")
    db._files[b"d/values"] = fake
    assert db.read_range(ref) == bytes(range(30))
    assert fake.reads == [(30, 20), (23, 27), (16, 34), (9, 41), (2, 48)]
    two = Bytes(data, short=16, display="DB/d/values")
    db._files[b"d/values"] = two
    assert db.read_range(ref) == bytes(range(30)) and len(two.reads) == 2
    db._files[b"d/values"] = Bytes(data, shrink_to=35, short=10, display="DB/d/values")
    err = _error(lambda: db.read_range(ref))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "data file ended early",
        "pointer": "@35",
    }
    db._files[b"d/values"] = Bytes(data[:35], size=None, display="DB/d/values")
    err = _error(lambda: db.read_range(ref))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "got": "20 + 30",
    }
    # a reference past the end of a file of known size is refused before any read (a bogus
    # length never turns into reads of up to 1 GiB)
    known = Bytes(data[:40], display="DB/d/values")
    db._files[b"d/values"] = known
    err = _error(lambda: db.read_range(ref))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "expected": "offset + length <= 40",
        "got": "20 + 30",
    }
    assert known.reads == []
    # a reference over 1 GiB is read 1 GiB at a time: the first read asks for exactly 1 GiB

    class Stop(Exception):
        pass

    class Huge(Bytes):
        def pread(self, length, offset):
            self.reads.append((length, offset))
            if len(self.reads) > 1:
                raise Stop
            return b"x"

    huge = Huge(b"", size=None)
    db._files[b"d/huge"] = huge
    big = fmt.IndirectDataReference(fmt.DataFileId(b"d/", b"huge"), 5, 3 << 30)
    with pytest.raises(Stop):
        db.read_range(big)
    assert huge.reads == [(1 << 30, 5), (1 << 30, 6)]


def test_read_range_into_fills_the_callers_buffer(tmp_path):
    """`read_range_into` reads into `buffer(length)` (preadv until full, at the right offsets)
    and returns that buffer; a file of unknown size or a range past its end falls back to
    `read_range` (same bytes, same errors); a file that shrank under the read: OCDBT-022 at
    the byte where it ended. Kills the mutants of `read_range_into` and of `get_into`."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30)), b"c": b"in"})
    db = Database(tmp_path / "db", display="DB")
    ref = _value_ref(db, b"b")
    data = (tmp_path / "db" / "d" / "values").read_bytes()
    asked = []

    def buffer(n):
        asked.append(n)
        return memoryview(bytearray(n))

    out = db.get_into(b"b", buffer)
    assert isinstance(out, memoryview) and bytes(out) == bytes(range(30)) and asked == [30]
    assert db.get_into(b"c", buffer) == b"in" and db.get_into(b"zz", buffer) is None
    assert asked == [30]
    fake = Bytes(data, short=8, display="DB/d/values")
    db._files[b"d/values"] = fake
    mine = memoryview(bytearray(30))
    got = db.read_range_into(ref, lambda n: mine)
    assert got is mine and bytes(mine) == bytes(range(30))
    assert [o for _, o in fake.reads] == [20, 28, 36, 44]
    assert [n for n, _ in fake.reads] == [30, 22, 14, 6]
    db._files[b"d/values"] = Bytes(data, shrink_to=41, display="DB/d/values")
    err = _error(lambda: db.read_range_into(ref, buffer))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "data file ended early",
        "pointer": "@41",
    }
    unknown = Bytes(data, size=None, display="DB/d/values")
    db._files[b"d/values"] = unknown
    asked.clear()
    got = db.read_range_into(ref, buffer)
    assert bytes(got) == bytes(range(30)) and asked == []  # read_range, no caller buffer
    db._files[b"d/values"] = Bytes(data[:40], size=None, display="DB/d/values")
    err = _error(lambda: db.get_into(b"b", buffer))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "got": "20 + 30",
    }
    db._files[b"d/values"] = Bytes(data[:40], display="DB/d/values")
    asked.clear()
    err = _error(lambda: db.read_range_into(ref, buffer, origin="value", pointer="k"))
    assert asked == []  # refused before a buffer is asked for
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "expected": "offset + length <= 40",
        "got": "20 + 30",
    }
    (tmp_path / "db" / "d" / "values").unlink()
    db = Database(tmp_path / "db", display="DB")
    with pytest.raises(MissingDataError) as info:
        db.read_range_into(ref, buffer, origin="value", pointer="k")
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value k",
    }
    with pytest.raises(MissingDataError) as info:
        db.get_into(b"b", buffer)
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value b'b'",
    }
    with pytest.raises(MissingDataError) as info:
        db.get(b"b")
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value b'b'",
    }
    entry = dict(db.entries())[b"b"]
    with pytest.raises(MissingDataError) as info:
        db.read_value(entry)  # no key given: the origin alone
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value",
    }
    assert db.read_value(dict(db.entries())[b"c"]) == b"in"


def test_reference_fault_of_an_object_store_file(tmp_path):
    """`reference_fault` on a file of unknown size (object store) reads the reference's last
    byte once, and not again for a reference within a length already seen in that file; a
    reference past the end: "ends before byte N". Kills the mutants of `_fits`, `end - 1`,
    the comparison and the texts."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30))})
    db = Database(tmp_path / "db")
    a, b = _value_ref(db, b"a"), _value_ref(db, b"b")
    data = (tmp_path / "db" / "d" / "values").read_bytes()
    fake = Bytes(data, size=None)
    db._files[b"d/values"] = fake
    assert db.reference_fault(b) is None
    assert fake.reads == [(1, 49)]
    assert db.reference_fault(a) is None and db.reference_fault(b) is None
    assert fake.reads == [(1, 49)]
    past = fmt.IndirectDataReference(b.file_id, 40, 10)
    assert db.reference_fault(past) is None and fake.reads[-1] == (1, 49)
    past = fmt.IndirectDataReference(b.file_id, 40, 11)
    assert db.reference_fault(past) == "ends before byte 51"
    assert fake.reads[-1] == (1, 50)
    db2 = Database(tmp_path / "db")
    fake2 = Bytes(data, size=None)
    db2._files[b"d/values"] = fake2
    assert db2.reference_fault(a) is None and fake2.reads == [(1, 19)]
    assert db2.reference_fault(b) is None and fake2.reads == [(1, 19), (1, 49)]
    assert db2.reference_fault(fmt.IndirectDataReference(b.file_id, 0, 51)) == "ends before byte 51"
    # a one-byte reference at 0 is read; an empty one at 0 needs no read
    db3 = Database(tmp_path / "db")
    fake3 = Bytes(data, size=None)
    db3._files[b"d/values"] = fake3
    assert db3.reference_fault(fmt.IndirectDataReference(b.file_id, 0, 0)) is None
    assert fake3.reads == []
    assert db3.reference_fault(fmt.IndirectDataReference(b.file_id, 0, 1)) is None
    assert fake3.reads == [(1, 0)]
    # a path that may not be opened: the error names the database and the origin "value"
    bad = fmt.IndirectDataReference(fmt.DataFileId(b"", b"../x"), 0, 1)
    err = _error(lambda: db3.reference_fault(bad))
    assert error_fields(err) == {
        "rule": "OCDBT-023",
        "file": str(tmp_path / "db"),
        "message": "data file path must be a relative path of plain components",
        "pointer": "referenced from value",
        "got": "../x",
    }


def test_value_range_of_out_of_line_values_only(tmp_path):
    """`value_range(key)`: the data file's byte range of an out-of-line value; None for an
    absent key, an inline value or a file of unknown size; OCDBT-022 for a reference past the
    end (a mapping of it would fault). Kills the mutants of `value_range`."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30)), b"c": b"in"})
    db = Database(tmp_path / "db")
    with db.value_range(b"b") as r:
        assert len(r) == 30 and r.read() == bytes(range(30))
    with db.value_range("a") as r:
        assert r.read() == b"v" * 20
    assert db.value_range(b"c") is None and db.value_range(b"zz") is None
    data = (tmp_path / "db" / "d" / "values").read_bytes()
    db._files[b"d/values"] = Bytes(data)
    assert db.value_range(b"b") == ("range", 20, 30)
    db._files[b"d/values"] = Bytes(data, size=49)
    assert db.value_range(b"a") == ("range", 0, 20)
    assert _error(lambda: db.value_range(b"b")).rule == "OCDBT-022"
    db._files[b"d/values"] = Bytes(data, size=50)  # ending exactly at the end
    assert db.value_range(b"b") == ("range", 20, 30)
    db._files[b"d/values"] = Bytes(data, size=None)
    assert db.value_range(b"a") is None
    (tmp_path / "db" / "d" / "values").unlink()
    with pytest.raises(MissingDataError) as info:
        Database(tmp_path / "db", display="DB").value_range(b"b")
    assert error_fields(info.value) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "referenced data file is missing",
        "pointer": "referenced from value b'b'",
    }


def test_value_range_of_an_old_generation():
    """`value_range(key, generation=g)` looks the key up in generation g: `deep_btree`'s last
    commit deleted layers 8-11, whose chunks are out-of-line before it. Kills the mutants that
    drop `generation`."""
    record = rec.load(TENSORSTORE_SET / "deep_btree")
    last = record["commits"][-1]
    g = last["generation"]
    db = Database(database_case("deep_btree"))
    found = 0
    for key in last["deleted"]:
        before = db.get(key, generation=g - 1)
        assert db.value_range(key, generation=g) is None and db.get(key, generation=g) is None
        r = db.value_range(key, generation=g - 1)
        if len(before) > db.config.max_inline_value_bytes:
            with r:
                assert r.read() == before
            found += 1
        else:
            assert r is None
    assert found > 0


def test_items_reads_every_value_and_names_the_key(tmp_path):
    """`items(start, end)` gives (key, value) with out-of-line values read; a fault names the
    key. Kills the mutants of `items` and `read_value`."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30)), b"c": b"in"})
    db = Database(tmp_path / "db")
    assert list(db.items()) == [(b"a", b"v" * 20), (b"b", bytes(range(30))), (b"c", b"in")]
    assert list(db.items("b")) == [(b"b", bytes(range(30))), (b"c", b"in")]
    assert list(db.items(b"a", "c")) == [(b"a", b"v" * 20), (b"b", bytes(range(30)))]
    (tmp_path / "db" / "d" / "values").write_bytes(b"v" * 20)
    db = Database(tmp_path / "db", display="DB")
    it = db.items()
    assert next(it) == (b"a", b"v" * 20)
    err = _error(lambda: next(it))
    assert error_fields(err) == {
        "rule": "OCDBT-022",
        "file": "DB/d/values",
        "message": "reference reaches past the end of the data file",
        "pointer": "@20",
        "expected": "offset + length <= 20",
        "got": "20 + 30",
    }
    (tmp_path / "db" / "d" / "values").unlink()
    db = Database(tmp_path / "db", display="DB")
    with pytest.raises(MissingDataError) as info:
        list(db.items())
    assert_error(info, rule="OCDBT-022", pointer="referenced from value b'a'")


# --------------------------------------------------------------------------------------------
# caches, node bound, lifecycle


def test_node_cache_keeps_the_latest_nodes(tmp_path):
    """`_cached` keeps at most `node_cache_size` decoded nodes, dropping the least recently
    used, and returns the cached node on a hit; `_keys_of` keeps per node key lists, cleared
    when full. Kills the mutants of the cache key, `move_to_end`, `> self._cache_size`,
    `popitem(last=False)`, and of `_keys_of`."""
    db = Database(database_case("btree_example"), node_cache_size=2)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    assert db.read_btree_node(v.root.location) is root
    a = root.entries[0].node.location
    b = root.entries[1].node.location
    na = db.read_btree_node(a)
    db.read_btree_node(v.root.location)  # root is the most recent now
    nb = db.read_btree_node(b)  # drops a
    assert db.read_btree_node(v.root.location) is root
    assert db.read_btree_node(b) is nb
    assert db.read_btree_node(a) is not na and db.read_btree_node(a) == na
    assert len(db._cache) == 2
    keys = db._keys_of(root)
    assert keys == [e.key for e in root.entries] and db._keys_of(root) is keys
    db._keys_of(na)
    db._keys_of(nb)  # a third node: the lists were cleared first
    assert len(db._key_lists) == 1


def test_the_node_cache_holds_4096_nodes_by_default(tmp_path):
    """`node_cache_size` defaults to 4096 decoded nodes: a walk over a root and 4097 leaves
    keeps the last 4096. Kills the mutant of the default."""
    db_dir = tmp_path / "db"
    (db_dir / "d").mkdir(parents=True)
    blob, children = bytearray(), []
    leaves = fmt.DataFileId(b"", b"d/leaves")
    stats = fmt.BtreeNodeStatistics(0, 0, 1)
    for i in range(4097):
        key = b"k%05d" % i
        leaf = fmt.BtreeNode(0, (fmt.LeafNodeEntry(key, b"v"),))
        enc = fmt.encode_btree_node(leaf, compression=0)
        ref = fmt.IndirectDataReference(leaves, len(blob), len(enc))
        children.append(fmt.InteriorNodeEntry(key, 0, fmt.BtreeNodeReference(ref, stats)))
        blob += enc
    (db_dir / "d" / "leaves").write_bytes(bytes(blob))
    root = _write_node(db_dir, "root", fmt.BtreeNode(1, tuple(children)))
    config = fmt.Config(b"\x01" * 16, 0, 8, 0, 4, None)
    version = fmt.BtreeGenerationReference(root, 1, 1, 0)
    manifest = fmt.encode_manifest(fmt.Manifest(config, (version,), ()))
    (db_dir / "manifest.ocdbt").write_bytes(manifest)
    db = Database(db_dir)
    assert len(db.list()) == 4097
    assert len(db._cache) == 4096


def test_node_bound_comes_from_the_manifest(tmp_path):
    """`node_bound`: `format.node_bound` of the manifest's configuration within
    `max_decoded_bytes`, computed once; a node decoding to more is refused (OCDBT-006). Kills
    the mutants of `node_bound` and of the bound passed by `_cached`."""
    db = Database(database_case("btree_example"))
    assert db.node_bound == fmt.node_bound(db.config) == 2 * 256 + 4 * 16 + (1 << 14) + (1 << 20)
    db = Database(database_case("btree_example"), max_decoded_bytes=5000)
    assert db.node_bound == 5000
    db.max_decoded_bytes = 10  # computed once: kept
    assert db.node_bound == 5000
    root = db.version().root.location
    db = Database(database_case("btree_example"))
    db.manifest  # noqa: B018  (decoded within the default bound)
    db.max_decoded_bytes = 60  # the root's body is 90 bytes
    err = _error(lambda: db.read_btree_node(root))
    assert_error(err, rule="OCDBT-006", expected="<= 60", got=90)
    db = Database(database_case("btree_example"))
    db.manifest  # noqa: B018
    db.max_decoded_bytes = 90
    assert db.read_btree_node(root).height == 2


def test_close_and_context_manager(tmp_path):
    """`close` closes every open data file and empties the caches; the context manager
    returns the database and closes it at exit. Kills the mutants of `close`, `__enter__`,
    `__exit__`."""
    build_database(tmp_path / "db", {b"a": b"v" * 20})
    with Database(tmp_path / "db") as db:
        assert isinstance(db, Database)
        assert db.get(b"a") == b"v" * 20
        fake = Bytes(b"v" * 20)
        db._files[b"d/other"] = fake
        assert db._cache and db._files
    assert fake.closed and db._files == {} and not db._cache and not db._key_lists
    assert db._indexes == {}
    assert db.get(b"a") == b"v" * 20  # reopens
