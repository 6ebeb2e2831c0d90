"""`ockpt inspect`, `ockpt ls` and `ockpt cat` as a user runs them (subprocess), on real-Orbax
golden fixtures, checked against each fixture's record (expected.json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import _record
import numpy as np
import pytest

from tests.support import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"


def ockpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
    )


def ok(*args: str) -> str:
    result = ockpt(*args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _expected_arrays(case: str, item: str = "") -> dict[str, dict]:
    record = _record.load_expected(CASES / case)
    out = {}
    for path, node in _record.iter_nodes(record["items"][item]):
        if node["type"] in ("ndarray", "jax.Array"):
            out["/".join(str(p) for p in path)] = node
    return out


def test_inspect_item_matches_record():
    report = json.loads(ok("inspect", "--json", str(CASES / "numpy_dtypes" / "checkpoint")))
    assert report["kind"] == "pytree_item"
    rows = {r["name"]: r for r in report["leaves"]}
    expected = _expected_arrays("numpy_dtypes")
    assert set(rows) == set(expected)
    for name, node in expected.items():
        row = rows[name]
        assert row["dtype"] == node["dtype"] == row["storage_dtype"]
        assert row["shape"] == node["shape"]
        itemsize = np.dtype(_record.numpy_dtype(node["dtype"])).itemsize
        assert row["nbytes"] == int(np.prod(node["shape"])) * itemsize
        assert row["chunk_shape"] is not None
    assert report["totals"]["bytes"] == sum(r["nbytes"] for r in rows.values())
    assert report["totals"]["bytes_by_dtype"]["bfloat16"] == rows["bfloat16"]["nbytes"]


def test_inspect_sharded_shows_saved_sharding():
    out = ok("inspect", str(CASES / "sharded" / "checkpoint"))
    assert "mesh(" in out and "P('x', 'y')" in out and "device " in out
    report = json.loads(ok("inspect", "--json", str(CASES / "sharded" / "checkpoint")))
    rows = {r["name"]: r for r in report["leaves"]}
    assert rows["xy"]["sharding"]["sharding_type"] == "NamedSharding"
    assert rows["xy"]["chunk_shape"] == rows["xy"]["write_shape"]


def test_inspect_manager_root_lists_steps_and_shows_latest():
    path = str(CASES / "manager" / "checkpoint")
    out = ok("inspect", path)
    assert "step 0: committed" in out and "step 2: committed" in out and "<- shown" in out
    report = json.loads(ok("inspect", "--json", path))
    assert report["kind"] == "manager_root" and report["step"] == 2
    assert [s["step"] for s in report["steps"]] == [0, 1, 2]
    assert report["item_path"].endswith("2/params")
    assert json.loads(ok("inspect", "--json", "--step", "0", path))["step"] == 0


def test_inspect_v1_checkpoint_and_items():
    path = str(CASES / "v1_checkpointables" / "checkpoint")
    report = json.loads(ok("inspect", "--json", path))
    assert report["kind"] == "v1_checkpoint"
    assert {"state", "extra"} <= {i["name"] for i in report["items"]}
    names = {r["name"]: r for r in report["leaves"]}
    assert names["tag"]["dtype"] is None and names["empty"]["value_type"] == "{}"


def test_inspect_legacy_msgpack():
    path = str(FIXTURES / "orbax-0.5.15" / "msgpack_aggregated" / "checkpoint")
    report = json.loads(ok("inspect", "--json", path))
    rows = {r["name"]: r for r in report["leaves"]}
    assert rows["bfloat16"]["dtype"] == "bfloat16" and rows["bfloat16"]["storage_dtype"] is None


def test_inspect_errors_are_clean(tmp_path):
    result = ockpt("inspect", str(tmp_path))
    assert result.returncode == 1 and "not a checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    result = ockpt("inspect", str(CASES / "nested" / "checkpoint"), "--step", "3")
    assert result.returncode == 1 and "--step" in result.stderr


def test_ls_manager_root_text_and_json():
    path = str(CASES / "manager" / "checkpoint")
    out = ok("ls", path)
    assert "manager_root, 3 step(s)" in out
    assert (
        "params: pytree_item (StandardCheckpointHandler, ocdbt), committed, commit_success.txt"
        in out
    )
    assert "meta: json_item (JsonCheckpointHandler), committed, commit_success.txt" in out
    data = json.loads(ok("ls", "--json", path))
    steps = data["children"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(s["committed"] and s["commit_time_ns"] > s["init_time_ns"] for s in steps)
    assert {c["name"]: c["kind"] for c in steps[0]["children"]} == {
        "meta": "json_item",
        "params": "pytree_item",
    }


def test_ls_shows_unfinished_step(tmp_copy):
    root = tmp_copy(CASES / "manager")
    (root / "2").rename(root / "2.orbax-checkpoint-tmp-1234")
    data = json.loads(ok("ls", "--json", str(root)))
    states = {c["name"]: (c["kind"], c["committed"]) for c in data["children"]}
    assert states["2.orbax-checkpoint-tmp-1234"] == ("temporary", False)
    report = json.loads(ok("inspect", "--json", str(root)))
    assert report["step"] == 1


def test_ls_v1_checkpoint_and_not_a_checkpoint(tmp_path):
    data = json.loads(ok("ls", "--json", str(CASES / "v1_pytree" / "checkpoint")))
    assert data["kind"] == "v1_checkpoint" and data["children"][0]["name"] == "state"
    result = ockpt("ls", str(tmp_path))
    assert (
        result.returncode == 1
        and "not a checkpoint" in result.stderr
        and "LOAD-050" in result.stderr
    )


@pytest.mark.parametrize(
    ("case", "leaf"),
    [("numpy_dtypes", "float32"), ("nested", "layers/1/w"), ("sharded", "xy"), ("zarr3", "b.c")],
)
def test_cat_whole_leaf_equals_record(case, leaf):
    nodes = _expected_arrays(case)
    node = nodes[leaf.replace(".", "/")] if leaf.replace(".", "/") in nodes else nodes[leaf]
    want = _record.load_array(node, CASES / case)
    data = json.loads(ok("cat", "--json", str(CASES / case / "checkpoint"), leaf))
    assert data["shape"] == list(want.shape) and data["dtype"] == str(want.dtype)
    got = np.array(data["values"], dtype=np.float64)
    np.testing.assert_array_equal(got, want.astype(np.float64))


def test_cat_slice_and_text_output():
    path = str(CASES / "numpy_dtypes" / "checkpoint")
    want = _record.load_array(_expected_arrays("numpy_dtypes")["float32"], CASES / "numpy_dtypes")
    data = json.loads(ok("cat", "--json", path, "float32", "--slice", "1,0:2,::-2"))
    np.testing.assert_array_equal(np.array(data["values"], np.float32), want[1, 0:2, ::-2])
    text = ok("cat", path, "float32", "--slice", "0,0")
    assert text.strip() == str(want[0, 0])
    assert ok("cat", str(CASES / "scalars_strings" / "checkpoint"), "str_unicode").strip()


def test_cat_errors():
    path = str(CASES / "numpy_dtypes" / "checkpoint")
    result = ockpt("cat", path, "float33")
    assert result.returncode == 1 and "did you mean 'float32'" in result.stderr
    result = ockpt("cat", path, "float32", "--slice", "0:a")
    assert result.returncode == 2 and "not a slice" in result.stderr
    result = ockpt("cat", path, "float32", "--slice", "9")
    assert result.returncode == 2 and "out of bounds" in result.stderr
    assert "Traceback" not in result.stderr


def test_leaf_names_cannot_forge_listing_lines(tmp_path):
    """Issue 36 item 6: a leaf name with control characters (a colour escape, a newline that
    would start a forged line) prints escaped wherever a command prints names (`inspect`,
    `tree`, `diff`, `validate`, `convert`, `detect`, `ls`, errors): one line per entry, no escape
    sequence reaches the terminal."""
    import ockpt

    name = "w\x1b[31m\nfake: jax.Array\u2028"
    ockpt.save_pytree(tmp_path / "c", {name: np.arange(3)})
    ockpt.save_pytree(tmp_path / "d", {name: np.arange(4)})
    step = tmp_path / "root" / "5"
    ockpt.save_pytree(step, {"x": np.arange(2)})
    os.rename(step / "state", step / "st\x1bate\nfake")  # a checkpointable named by its directory
    shutil.copytree(tmp_path / "c", tmp_path / "v")
    metadata = tmp_path / "v" / "state" / "_METADATA"
    doc = json.loads(metadata.read_text())
    for entry in doc["tree_metadata"].values():
        entry["value_metadata"]["write_shape"] = [7]  # a finding that names the leaf
    metadata.write_text(json.dumps(doc))
    commands = [
        ["inspect", "c"],
        ["tree", "c"],
        ["diff", "c", "d"],
        ["validate", "v", "--deep"],
        ["convert", "c", "c.npz", "--dry-run"],
        ["detect", "root/5"],
        ["ls", "root"],
        ["cat", "c", "nothing\x1b[31m"],
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "ockpt.cli", *command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        out = done.stdout + done.stderr
        assert "Traceback" not in out and done.returncode in (0, 1, 2), (command, out)
        assert "\x1b" not in out and "\u2028" not in out, (command, out)
        assert not any(line.startswith("fake") for line in out.splitlines()), (command, out)
        assert "\\x1b" in out, (command, out)
