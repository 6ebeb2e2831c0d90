"""`ockpt.ocdbt.verify`: a whole database checked against its records and against damaged copies
(the real databases of `fixtures/tensorstore-0.1.86`); statistics and each fault's rule, file
and offset. None needs tensorstore.
"""

from __future__ import annotations

import pytest

from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.tree import Database
from ockpt.ocdbt.verify import DatabaseStats, verify_database
from tests.support.errors import error_fields
from tests.support.ocdbt import (
    build_database,
    copy_database,
    database_case,
    rewrite_root,
)

# --------------------------------------------------------------------------------------------
# verify_database


def _stats(path) -> tuple[list[dict], DatabaseStats, int]:
    """The fields of each error `verify_database` yields, its stats and its count of ticks."""
    stats = DatabaseStats()
    ticks = []
    errors = [
        error_fields(e)
        for e in verify_database(Database(path), stats=stats, tick=lambda: ticks.append(1))
    ]
    return errors, stats, len(ticks)


def _count(path):
    """Distinct B+tree nodes and out-of-line values over every generation, and their bytes:
    counted here by a plain walk."""
    db = Database(path)
    nodes, values, nbytes = set(), set(), 0
    todo = [(v.root, v.root_height) for v in db.versions() if v.root.location is not None]
    while todo:
        ref, h = todo.pop()
        key = (ref.location.file_id.path, ref.location.offset, ref.location.length)
        if key in nodes:
            continue
        nodes.add(key)
        node = db.read_btree_node(ref.location)
        for e in node.entries:
            if h:
                todo.append((e.node, h - 1))
            elif not isinstance(e.value, bytes):
                vk = (e.value.file_id.path, e.value.offset, e.value.length)
                if vk not in values:
                    values.add(vk)
                    nbytes += e.value.length
    return len(nodes), len(values), nbytes


@pytest.mark.parametrize(
    "name", ["btree_example", "deep_btree", "many_generations", "version_tree_arity2"]
)
def test_verify_counts_every_generation_node_and_value_once(name):
    """`verify_database` on a sound real database: no error; `stats` counts every generation,
    every distinct B+tree node (shared nodes once) and every distinct out-of-line value and its
    bytes; `tick` is called once per node. Kills the mutants of the counters, of the seen
    sets, of the `root.location is None` skip and of `tick`."""
    path = database_case(name)
    errors, stats, ticks = _stats(path)
    nodes, values, nbytes = _count(path)
    assert errors == []
    assert stats.generations == len(Database(path).versions())
    assert (stats.nodes, stats.values, stats.value_bytes) == (nodes, values, nbytes)
    assert ticks == nodes and nodes > 3
    assert list(verify_database(Database(path))) == []  # stats and tick are optional


def test_verify_reports_a_broken_manifest_once(tmp_path):
    """A manifest that does not decode: `verify_database` yields its error and stops."""
    path = copy_database("btree_example", tmp_path)
    (path / "manifest.ocdbt").write_bytes(b"garbage")
    stats = DatabaseStats()
    errors = list(verify_database(Database(path), stats=stats))
    assert [error_fields(e) for e in errors] == [
        {
            "rule": "OCDBT-002",
            "file": str(path / "manifest.ocdbt"),
            "message": "manifest too short for its envelope",
            "pointer": "@0",
            "expected": ">= 18 bytes",
            "got": 7,
        }
    ]
    assert stats.generations == 0


def test_verify_goes_on_after_each_fault(tmp_path):
    """Damaged nodes and values: one error each, and the walk goes on through the rest (other
    children, other generations): a leaf whose CRC-32C is wrong, a missing value file, a value
    past the end of its file. Kills the mutants that stop the walk (`return` for `continue`),
    drop the errors, or lose `origin`/`pointer`."""
    build_database(tmp_path / "db", {b"a": b"v" * 20, b"b": bytes(range(30)), b"c": b"in"})
    path = tmp_path / "db"
    (path / "d" / "values").write_bytes(b"v" * 20 + bytes(range(29)))
    errors, stats, ticks = _stats(path)
    assert errors == [
        {
            "rule": "OCDBT-022",
            "file": str(path / "d" / "values"),
            "message": "reference reaches past the end of the data file",
            "pointer": "@20",
            "expected": "offset + length <= 49",
            "got": "20 + 30",
        }
    ]
    assert (stats.generations, stats.nodes, stats.values, stats.value_bytes) == (1, 1, 1, 20)
    (path / "d" / "values").unlink()
    errors, stats, _ = _stats(path)
    assert errors == [
        {
            "rule": "OCDBT-022",
            "file": str(path / "d" / "values"),
            "message": "referenced data file is missing",
            "pointer": f"referenced from value {key!r}",
        }
        for key in (b"a", b"b")
    ]
    assert stats.values == 0
    # a damaged leaf of btree_example: its error, and every other leaf still walked
    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    root = db.read_btree_node(db.version().root.location)
    child = db.read_btree_node(root.entries[0].node.location)
    leaf = child.entries[0].node.location
    f = path / leaf.file_id.path.decode()
    data = bytearray(f.read_bytes())
    data[leaf.offset + leaf.length - 1] ^= 0xFF
    f.write_bytes(bytes(data))
    errors, stats, ticks = _stats(path)
    nodes, _, _ = _count(database_case("btree_example"))
    assert len(errors) == 1 and errors[0]["rule"] == "OCDBT-005"
    assert errors[0]["file"] == str(f) and errors[0]["pointer"].startswith("@")
    assert stats.nodes == ticks == nodes - 1


def test_verify_checks_the_height_and_depth(tmp_path, in_force):
    """`verify_database` refuses a node whose height differs from its parent's implied one
    (OCDBT-040 with file, offset, expected, got) and a tree deeper than the limits' `max_depth`
    (OCDBT-040 naming the database). Kills the mutants of both checks."""

    path = copy_database("btree_example", tmp_path)
    db = Database(path)
    v = db.version()
    root = db.read_btree_node(v.root.location)
    rewrite_root(path, fmt.BtreeNode(3, root.entries), 3)
    errors, stats, _ = _stats(path)
    child = root.entries[0].node.location
    child2 = root.entries[1].node.location
    assert errors == [
        {
            "rule": "OCDBT-040",
            "file": str(path / loc.file_id.path.decode()),
            "message": "B+tree node height differs from the height its parent implies",
            "pointer": f"@{loc.offset}",
            "expected": 2,
            "got": 1,
        }
        for loc in (child, child2)
    ]
    assert stats.nodes == 3
    in_force(max_depth=1)
    errors, stats, _ = _stats(database_case("btree_example"))
    too_deep = {
        "rule": "OCDBT-040",
        "file": str(database_case("btree_example")),
        "message": "B+tree too deep",
        "pointer": None,
    }
    assert errors == [too_deep] * 4
    in_force(max_depth=2)
    assert _stats(database_case("btree_example"))[0] == []


def test_verify_builds_child_key_ranges_with_prefixes(tmp_path):
    """`verify_database` gives each child the range [its key, the next key) under the
    parent's prefix plus the entry's subtree common prefix (spec ocdbt §8.1) on `deep_btree`
    (prefixes at every level: any other prefix fails there), and the last child the parent's
    upper bound. Kills the mutants of the child range."""
    assert _stats(database_case("deep_btree"))[0] == []
    assert _stats(database_case("version_tree_arity2"))[0] == []
