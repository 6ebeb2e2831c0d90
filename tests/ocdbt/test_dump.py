"""`ockpt.ocdbt.dump` against tensorstore's own dump, recorded once (issue 21).

`expected-dump.json` (fixtures/_record_ocdbt.py, written by ``fixtures/generate_ocdbt.py
--dump``) holds what ``tensorstore.ocdbt.dump()`` returned for the manifest and every reachable
node of the four `tensorstore-0.1.86` databases and of the two databases of
`orbax-0.12.8/ocdbt_values`, its bytes encoded by the recorder's own encoder (never by ockpt's
`to_json`). Without tensorstore, ockpt's `dump_manifest`, `dump_btree_node`,
`dump_version_tree_node`, `location`, `parse_location` and `to_json` are compared with the
recording location by location, so the mutation run (which blocks tensorstore) sees them; the
tests marked "live" re-check the recording and the quoting constants against tensorstore, so
the golden cannot rot.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from ockpt.ocdbt import Database
from ockpt.ocdbt import dump as dump_mod
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.dump import (
    dump_btree_node,
    dump_manifest,
    dump_version_tree_node,
    location,
    parse_location,
    to_json,
)
from tests.support import FIXTURES, HAVE_TENSORSTORE

sys.path.insert(0, str(FIXTURES))
import _record_ocdbt as rec  # noqa: E402

CASES = rec.dump_cases(FIXTURES)
#: (case directory, database relative to it, its recording)
DATABASES = [
    (case, name, recorded)
    for case in CASES
    for name, recorded in rec.load_dump(case)["databases"].items()
]
IDS = [f"{c.parent.name}/{c.name}/{n}" for c, n, _ in DATABASES]

live = pytest.mark.skipif(
    not HAVE_TENSORSTORE, reason="needs tensorstore: not installed or OCKPT_BLOCK_TENSORSTORE set"
)


def _case(set_name: str, case: str) -> Path:
    return FIXTURES / set_name / case


def _recorded(set_name: str, case: str, name: str = rec.DATABASE_DIR) -> dict:
    return rec.load_dump(_case(set_name, case))["databases"][name]


def _mine(db: Database, loc: str) -> dict:
    kind, ref = parse_location(loc)
    if kind == "btreenode":
        return dump_btree_node(db.read_btree_node(ref))
    assert kind == "versionnode", loc
    return dump_version_tree_node(db.read_version_node(ref))


def _ockpt_walk(db: Database) -> dict[str, dict]:
    """location -> ockpt's dump, for every node reachable from the manifest, found by following
    the locations in ockpt's own dumps (not the recording's)."""
    return rec.reachable_nodes(dump_manifest(db.manifest), lambda loc: _mine(db, loc))


def _text_form(recorded):
    """The recording as `to_json(text=True)` should render it: a byte string that is printable
    ASCII as its text (the rule of fixtures/_record_ocdbt.py `encode_value`)."""
    if isinstance(recorded, dict):
        if set(recorded) == {"base64"}:
            return rec.encode_value(base64.b64decode(recorded["base64"]))
        return {k: _text_form(v) for k, v in recorded.items()}
    if isinstance(recorded, list):
        return [_text_form(v) for v in recorded]
    return recorded


# ---------------------------------------------------------------------------------------------
# the recordings


def test_recordings_are_present_and_reach_every_branch_of_dump():
    """The golden exists for the four bare databases and an Orbax checkpoint (root and
    per-process database), and its full dumps hold every shape `dump.py` renders: B+tree
    leaves and interior nodes, version tree leaves and interior nodes, inline and indirect
    values, an empty root without location, zstd and uncompressed configs, a base path in a
    location. Guards the other tests against a golden emptied or shrunk to nothing."""
    names = {f"{c.parent.name}/{c.name}/{n}" for c, n, _ in DATABASES}
    assert names >= {
        "tensorstore-0.1.86/btree_example/database",
        "tensorstore-0.1.86/deep_btree/database",
        "tensorstore-0.1.86/many_generations/database",
        "tensorstore-0.1.86/version_tree_arity2/database",
        "orbax-0.12.8/ocdbt_values/checkpoint",
        "orbax-0.12.8/ocdbt_values/checkpoint/ocdbt.process_0",
    }
    shapes = set()
    for _, _, recorded in DATABASES:
        m = recorded["manifest"]
        shapes.add(("compression", json.dumps(m["config"]["compression"])))
        shapes.update(("root", "location" in v["root"]) for v in m["versions"])
        for loc, node in recorded["nodes"].items():
            shapes.add((loc.split(":")[0], node["height"] > 0))
            for e in node["entries"]:
                shapes.update(("entry", k) for k in e)
                if "indirect_value" in e and not e["indirect_value"].startswith("value::"):
                    shapes.add(("base path", True))
    assert shapes >= {
        ("compression", '{"id": "zstd"}'),
        ("compression", "null"),
        ("root", True),
        ("root", False),
        ("btreenode", False),
        ("btreenode", True),
        ("versionnode", False),
        ("versionnode", True),
        ("entry", "inline_value"),
        ("entry", "indirect_value"),
        ("entry", "subtree_common_prefix"),
        ("entry", "root"),
        ("base path", True),
    }
    many = _recorded("tensorstore-0.1.86", "many_generations")
    assert many["sampled"] and many["counts"] == {"btreenode": 899, "versionnode": 21}
    assert len(many["nodes"]) + len(many["digests"]) == 920
    assert not _recorded("tensorstore-0.1.86", "deep_btree")["sampled"]


# ---------------------------------------------------------------------------------------------
# dump_manifest / dump_btree_node / dump_version_tree_node against the recording


@pytest.mark.parametrize(("case", "name", "recorded"), DATABASES, ids=IDS)
def test_every_dump_equals_the_recorded_tensorstore_dump(case, name, recorded):
    """`dump_manifest` and, location by location, `dump_btree_node` /
    `dump_version_tree_node` (through `parse_location`) equal tensorstore's recorded dump: in
    full where recorded in full, by sha256 of the canonical JSON elsewhere; the nodes reachable
    through ockpt's own dumps are exactly the recorded locations. Pins every field and
    branch of `dump.py`'s rendering (config, versions, statistics, entries, locations).
    Kills mutants of every field name and value of `_stats`, `_node_ref`, `_config`,
    `_version`, `_version_node_ref`, `_leaf`, `_interior`, of the height tests of
    `dump_btree_node` / `dump_version_tree_node` and of the location kinds."""
    db = Database(case / name)
    assert dump_manifest(db.manifest) == rec.decode_dump(recorded["manifest"])
    for loc, theirs in recorded["nodes"].items():
        assert _mine(db, loc) == rec.decode_dump(theirs), loc
    for loc, digest in recorded["digests"].items():
        assert rec.dump_digest(_mine(db, loc)) == digest, loc
    reached = _ockpt_walk(db)
    assert set(reached) == set(recorded["nodes"]) | set(recorded["digests"])
    kinds: dict[str, int] = {}
    for loc in reached:
        kinds[loc.split(":")[0]] = kinds.get(loc.split(":")[0], 0) + 1
    assert kinds == recorded["counts"]


def test_btree_example_literally():
    """The worked example (spec ocdbt §8.6) in plain Python values: the uncompressed config
    (`compression` None), generation 1's empty root rendered without a `location`, an interior
    entry (key, location, statistics, subtree common prefix) and a leaf with an indirect value
    (`value::` location) next to inline ones. Pins the field names and the byte/str types."""
    db = Database(_case("tensorstore-0.1.86", "btree_example") / rec.DATABASE_DIR)
    m = dump_manifest(db.manifest)
    assert m["config"]["compression"] is None
    assert m["config"]["max_decoded_node_bytes"] == 256
    assert m["config"]["max_inline_value_bytes"] == 16
    assert m["config"]["version_tree_arity_log2"] == 4
    assert m["config"]["uuid"] == "e4a2fe01e1fc63c1b156910a222a7c33"
    assert m["version_tree_nodes"] == []
    empty, latest = m["versions"]
    assert empty["root"] == {
        "statistics": {"num_indirect_value_bytes": 0, "num_keys": 0, "num_tree_bytes": 0}
    }
    assert (empty["generation_number"], empty["root_height"]) == (1, 0)
    d = "d/b33b9f38722cf0c9b3b6c900c8a3f4fd"
    assert latest["root"]["location"] == f"btreenode::{d}:707:108"
    assert latest["root"]["statistics"] == {
        "num_indirect_value_bytes": 40,
        "num_keys": 24,
        "num_tree_bytes": 775,
    }
    root = _mine(db, f"btreenode::{d}:707:108")
    assert root["height"] == 2
    assert root["entries"][0] == {
        "key": b"params.layer_00.bias/0",
        "location": f"btreenode::{d}:519:95",
        "statistics": {"num_indirect_value_bytes": 40, "num_keys": 12, "num_tree_bytes": 352},
        "subtree_common_prefix": b"params.layer_0",
    }
    leaf = _mine(db, f"btreenode::{d}:165:132")
    assert leaf["height"] == 0
    assert leaf["entries"][:2] == [
        {"indirect_value": f"value::{d}:0:40", "key": b"3.kernel/0"},
        {"inline_value": b"b04", "key": b"4.bias/0"},
    ]


def test_version_tree_nodes_literally():
    """`dump_version_tree_node` of a height-0 node lists generations (commit time, generation,
    root reference, root height) and of a higher node lists version node references (commit
    time, generation, height, `versionnode:` location, number of generations); both carry
    `height` and `version_tree_arity_log2`."""
    path = _case("tensorstore-0.1.86", "version_tree_arity2") / rec.DATABASE_DIR
    db = Database(path)
    m = dump_manifest(db.manifest)
    top = m["version_tree_nodes"][0]
    assert set(top) == {"commit_time", "generation_number", "height", "location",
                        "num_generations"}  # fmt: skip
    assert (top["height"], top["num_generations"]) == (4, 16)
    assert top["location"].startswith("versionnode::d/")
    node = _mine(db, top["location"])
    assert (node["height"], node["version_tree_arity_log2"]) == (4, 1)
    child = node["entries"][0]
    assert set(child) == set(top) and child["location"].startswith("versionnode::d/")
    while node["height"] > 0:
        node = _mine(db, node["entries"][0]["location"])
    assert node["version_tree_arity_log2"] == 1
    assert [set(e) for e in node["entries"]] == [
        {"commit_time", "generation_number", "root", "root_height"}
    ] * len(node["entries"])
    assert node["entries"][0]["generation_number"] == 1
    assert "location" not in node["entries"][0]["root"]  # generation 1: the empty tree


# ---------------------------------------------------------------------------------------------
# to_json


@pytest.mark.parametrize(("case", "name", "recorded"), DATABASES, ids=IDS)
def test_to_json_renders_real_dumps(case, name, recorded):
    """`to_json(text=False)` of ockpt's dumps is the recording itself (every byte string as
    ``{"base64": ...}``); `to_json()` (text=True) renders printable ASCII byte strings as text
    and the others as base64. Pins both modes of `to_json` on every recorded node; kills
    mutants of `text=text` passed down through dicts and lists and of the printable test."""
    db = Database(case / name)
    pairs = [(dump_manifest(db.manifest), recorded["manifest"])]
    pairs += [(_mine(db, loc), theirs) for loc, theirs in recorded["nodes"].items()]
    for mine, theirs in pairs:
        assert to_json(mine, text=False) == theirs
        assert to_json(mine) == _text_form(theirs)


def test_to_json_text_rule_on_real_and_boundary_bytes():
    """The printable rule is 0x20 to 0x7e inclusive: a real key and inline value become text,
    a real empty subtree common prefix becomes "" (text) or empty base64, a real zstd chunk
    stays base64; boundary bytes 0x20 and 0x7e are text, 0x1f and 0x7f are not; tuples become
    lists, other values pass unchanged. Kills mutants of the bounds ``0x20 <=`` and
    ``< 0x7F``, of ``text and``, and of the tuple case."""
    db = Database(_case("tensorstore-0.1.86", "btree_example") / rec.DATABASE_DIR)
    d = "d/b33b9f38722cf0c9b3b6c900c8a3f4fd"
    interior = _mine(db, f"btreenode::{d}:519:95")
    assert to_json(interior) == {
        "entries": [
            {
                "key": "0.bias/0",
                "location": f"btreenode::{d}:40:125",
                "statistics": {"num_indirect_value_bytes": 0, "num_keys": 7, "num_tree_bytes": 125},
                "subtree_common_prefix": "",
            },
            {
                "key": "3.kernel/0",
                "location": f"btreenode::{d}:165:132",
                "statistics": {
                    "num_indirect_value_bytes": 40,
                    "num_keys": 5,
                    "num_tree_bytes": 132,
                },
                "subtree_common_prefix": "",
            },
        ],
        "height": 1,
    }
    assert to_json(interior, text=False)["entries"][0]["key"] == {"base64": "MC5iaWFzLzA="}
    assert to_json(interior, text=False)["entries"][0]["subtree_common_prefix"] == {"base64": ""}
    orbax = Database(_case("orbax-0.12.8", "ocdbt_values") / "checkpoint")
    root = _mine(orbax, "btreenode::d/fdc957554de9eaed04a31790bae2e102:0:864")
    small = to_json(root)["entries"][-1]
    assert small == {"inline_value": {"base64": "KLUv/SAQgQAAAAAAAAAAgD8AAABAAABAQA=="},
                     "key": "small/0"}  # fmt: skip
    assert to_json(b" ~") == " ~"
    assert to_json(b"a\x1f") == {"base64": "YR8="}
    assert to_json(b"a\x7f") == {"base64": "YX8="}
    assert to_json(b"a\x80") == {"base64": "YYA="}
    assert to_json(b" ~", text=False) == {"base64": "IH4="}
    assert to_json((b"k", 1, None, "s", [b"\x00"])) == ["k", 1, None, "s", [{"base64": "AA=="}]]
    assert to_json({"a": (b"x",)}, text=False) == {"a": [{"base64": "eA=="}]}
    assert to_json(7) == 7 and to_json(None) is None and to_json("x:y") == "x:y"


# ---------------------------------------------------------------------------------------------
# location / parse_location


@pytest.mark.parametrize(("case", "name", "recorded"), DATABASES, ids=IDS)
def test_parse_location_and_location_round_trip_every_recorded_location(case, name, recorded):
    """Every location tensorstore wrote in the recording (node keys, interior and version
    references, `value:` locations of indirect values) parses to a kind and a reference that
    `location` renders back to the same string."""
    locs = set(recorded["nodes"]) | set(recorded["digests"])
    for node in recorded["nodes"].values():
        for e in node["entries"]:
            locs.update(e[k] for k in ("location", "indirect_value") if k in e)
    assert locs
    for loc in locs:
        kind, ref = parse_location(loc)
        assert kind in ("btreenode", "versionnode", "value"), loc
        assert location(kind, ref) == loc


def test_parse_location_fields_of_a_real_location():
    """`parse_location` splits kind, base path, relative path (bytes), offset and length (ints):
    the Orbax root's indirect value lives under the base path ``ocdbt.process_0/``."""
    loc = "value:ocdbt.process_0/:d/14b86f76cfe1ed640bd49dd24582e0dc:0:15154"
    kind, ref = parse_location(loc)
    assert kind == "value"
    assert ref == fmt.IndirectDataReference(
        fmt.DataFileId(b"ocdbt.process_0/", b"d/14b86f76cfe1ed640bd49dd24582e0dc"), 0, 15154
    )
    assert parse_location("btreenode::d/x:7:9")[1].offset == 7
    assert parse_location("btreenode::d/x:7:9")[1].length == 9


#: A data file name holding every printable ASCII byte but "/" (and a non-ASCII letter), and
#: how tensorstore 0.1.86 renders it in a location (checked live by
#: `test_quoting_constants_match_live_tensorstore`): every byte but letters, digits and
#: ``-._/`` percent-encoded, upper-case hex.
ODD_NAME = b"d/" + bytes(b for b in range(0x20, 0x7F) if b != 0x2F) + "\u00e9".encode()
TS_ODD = (
    "d/%20%21%22%23%24%25%26%27%28%29%2A%2B%2C-.0123456789%3A%3B%3C%3D%3E%3F%40ABCDEFGHIJKLMNOP"
    "QRSTUVWXYZ%5B%5C%5D%5E_%60abcdefghijklmnopqrstuvwxyz%7B%7C%7D%7E%C3%A9"
)


def test_location_quotes_every_byte_as_tensorstore_does():
    """`location` percent-encodes every byte of a path but letters, digits and ``-._/`` (upper-
    case hex; ``~!$&'()*+,;=@``, ``:`` and non-ASCII UTF-8 too), giving tensorstore's string
    TS_ODD byte for byte; `parse_location` decodes it back to the bytes. A ``:`` left as it is
    would also break `parse_location`'s split."""
    base = b"ocdbt.process_0/"
    ref = fmt.IndirectDataReference(fmt.DataFileId(base, ODD_NAME), 3, 4)
    assert location("value", ref) == f"value:ocdbt.process_0/:{TS_ODD}:3:4"
    assert location("btreenode", ref) == f"btreenode:ocdbt.process_0/:{TS_ODD}:3:4"
    assert parse_location(location("value", ref)) == ("value", ref)
    kind, back = parse_location(f"versionnode:{TS_ODD}:{TS_ODD}:5:6")
    assert kind == "versionnode"
    assert back == fmt.IndirectDataReference(fmt.DataFileId(ODD_NAME, ODD_NAME), 5, 6)


# ---------------------------------------------------------------------------------------------
# config


def test_config_compression_forms():
    """`compression` is None without compression, ``{"id": "zstd"}`` for zstd level 0 (as
    every fixture writes) and ``{"id": "zstd", "level": n}`` for another level (tensorstore's
    form, checked live by `test_quoting_constants_match_live_tensorstore`); the other config
    fields and the uuid as lower-case hex. Kills mutants of ``level == 0`` and of the
    ``{"id", "level"}`` literals."""

    def config(compression):
        c = fmt.Config(bytes(range(16)), 0, 17, 4096, 3, compression)
        return dump_manifest(fmt.Manifest(c, (), ()))["config"]

    rest = {
        "max_decoded_node_bytes": 4096,
        "max_inline_value_bytes": 17,
        "uuid": "000102030405060708090a0b0c0d0e0f",
        "version_tree_arity_log2": 3,
    }
    assert config(None) == {"compression": None, **rest}
    assert config(fmt.ZstdCompression(0)) == {"compression": {"id": "zstd"}, **rest}
    assert config(fmt.ZstdCompression(3)) == {"compression": {"id": "zstd", "level": 3}, **rest}


def test_public_names():
    """`dump.py` exports exactly the functions these tests pin."""
    assert sorted(dump_mod.__all__) == sorted(
        [
            "location",
            "parse_location",
            "dump_manifest",
            "dump_version_tree_node",
            "dump_btree_node",
            "to_json",
        ]
    )


# ---------------------------------------------------------------------------------------------
# live: the golden against tensorstore now


@live
@pytest.mark.parametrize(("case", "name", "recorded"), DATABASES, ids=IDS)
def test_recording_still_equals_live_tensorstore_dump(case, name, recorded):
    """tensorstore's dump of the manifest and of every reachable node (walked by
    tests/support/ocdbt.py, not by the recorder) equals the recording: in full, or by digest,
    with the same locations and counts."""
    from tests.support.ocdbt import ts_dump, walk_locations

    path = case / name
    assert rec.encode_dump(ts_dump(path)) == recorded["manifest"]
    seen = {}
    for loc, theirs in walk_locations(path):
        seen[loc] = theirs
        if loc in recorded["nodes"]:
            assert rec.encode_dump(theirs) == recorded["nodes"][loc], loc
        else:
            assert rec.dump_digest(theirs) == recorded["digests"][loc], loc
    assert set(seen) == set(recorded["nodes"]) | set(recorded["digests"])


@live
def test_quoting_constants_match_live_tensorstore(tmp_path):
    """The constants the offline tests use as tensorstore's behaviour: a manifest (encoded by
    ockpt) whose root lives in a file named ODD_NAME under zstd level 3 dumps, in tensorstore,
    with location TS_ODD and ``{"id": "zstd", "level": 3}``; ockpt's dump of it equals
    tensorstore's."""
    from tests.support.ocdbt import ts_dump

    ref = fmt.IndirectDataReference(fmt.DataFileId(b"", ODD_NAME), 0, 10)
    stats = fmt.BtreeNodeStatistics(0, 10, 1)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(ref, stats), 1, 0, 1_700_000_000 * 10**9
    )
    config = fmt.Config(b"\x01" * 16, 0, 8, 1 << 20, 4, fmt.ZstdCompression(3))
    manifest = fmt.Manifest(config, (version,), ())
    (tmp_path / "manifest.ocdbt").write_bytes(fmt.encode_manifest(manifest))
    theirs = ts_dump(tmp_path)
    assert theirs["versions"][0]["root"]["location"] == f"btreenode::{TS_ODD}:0:10"
    assert theirs["config"]["compression"] == {"id": "zstd", "level": 3}
    assert parse_location(theirs["versions"][0]["root"]["location"]) == ("btreenode", ref)
    assert dump_manifest(manifest) == theirs
