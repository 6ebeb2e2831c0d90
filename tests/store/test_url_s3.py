"""Checkpoints in an S3 bucket, for real: a local S3-compatible server (moto's server mode) on
loopback, reached through tensorstore's s3 kvstore driver by the `ockpt` command.

Object stores have no atomic rename: a step of a manager root in a bucket is complete only once
its ``commit_success.txt`` exists. These tests copy golden fixtures into the bucket, add an
unfinished step, and read, compare, convert and write through ``s3://`` URLs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support import FIXTURES, HAVE_TENSORSTORE
from tests.support.object_stores import free_port, ockpt, python, upload

#: s3:// URLs are opened by tensorstore: without it (the suite run with OCKPT_BLOCK_TENSORSTORE,
#: or ockpt installed without its `tensorstore` extra) they are refused, which
#: tests/package/test_without_tensorstore.py checks.
pytestmark = [
    pytest.mark.slow,  # the slow matrix: an S3 emulator (moto) per module
    pytest.mark.skipif(
        not HAVE_TENSORSTORE, reason="needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set"
    ),
]

CASES = FIXTURES / "orbax-0.12.8"


@pytest.fixture
def bucket(s3_bucket):
    """A fresh bucket; returns (name, boto3 client)."""
    return s3_bucket


def _upload(client, bucket: str, local: Path, prefix: str, *, skip: str | None = None) -> None:
    """Put every file of a local directory into the bucket (boto3, not ockpt)."""
    upload(
        lambda key, data: client.put_object(Bucket=bucket, Key=key, Body=data),
        local,
        prefix,
        skip=skip,
    )


def _keys(client, bucket: str, prefix: str) -> list[str]:
    out = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in out.get("Contents", []))


def test_manager_root_in_a_bucket(s3, bucket):
    """Step 3 has every file except commit_success.txt: ls shows it uncommitted; inspect, cat,
    diff and convert read the latest committed step (2), exactly as the local fixture."""
    name, client = bucket
    local = CASES / "manager" / "checkpoint"
    _upload(client, name, local, "run")
    _upload(client, name, local / "2", "run/3", skip="commit_success.txt")
    url = f"s3://{name}/run"

    listing = json.loads(ockpt(s3, "ls", "--json", url).stdout)
    assert listing["kind"] == "manager_root"
    steps = {c["step"]: c for c in listing["children"]}
    assert sorted(steps) == [0, 1, 2, 3]
    assert steps[2]["committed"] and steps[2]["has_commit_file"]
    assert not steps[3]["committed"] and not steps[3]["has_commit_file"]
    text = ockpt(s3, "ls", url).stdout
    assert "step 3: step, UNCOMMITTED" in text

    report = json.loads(ockpt(s3, "inspect", "--json", url).stdout)
    assert report["step"] == 2
    assert {r["name"] for r in report["leaves"]} == {"b", "step", "w"}
    local_report = json.loads(ockpt(s3, "inspect", "--json", str(local)).stdout)
    assert [r["nbytes"] for r in report["leaves"]] == [r["nbytes"] for r in local_report["leaves"]]

    remote = ockpt(s3, "cat", url, "w", "--json").stdout
    assert remote == ockpt(s3, "cat", str(local), "w", "--json").stdout
    ockpt(s3, "diff", url, str(local), "--no-progress")
    ockpt(s3, "diff", url, str(local), "--step-a", "1", "--step-b", "1", "--no-progress")
    result = ockpt(s3, "diff", url, str(local), "--step-a", "0", "--no-progress", check=False)
    assert result.returncode == 1 and "values differ" in result.stdout

    result = ockpt(s3, "inspect", url, "--step", "3", check=False)
    assert result.returncode == 1 and "no committed step 3" in result.stderr


#: Bad-corpus variants (fixtures/bad) whose damage lies in bytes read by ranged requests: a
#: data file cut short, a CRC-32C that does not match, a zarr3 shard cut short (deep).
S3_BAD = ["ocdbt_truncated_value_file", "ocdbt_node_crc", "zarr3_truncated_shard"]


def test_validate_in_a_bucket(s3, bucket):
    """validate of an s3:// manager root counts what a local validate counts and reports the
    unfinished step 3 only; damaged variants get the rules a local validate gives."""
    name, client = bucket
    local = CASES / "manager" / "checkpoint"
    _upload(client, name, local, "run")
    _upload(client, name, local / "2", "run/3", skip="commit_success.txt")
    url = f"s3://{name}/run"
    report = json.loads(ockpt(s3, "validate", "--json", "--deep", url).stdout)
    there = json.loads(ockpt(s3, "validate", "--json", "--deep", str(local)).stdout)
    assert report["checked"] == there["checked"] and report["valid"]
    assert [(f["rule"], f["file"]) for f in report["findings"]] == [("VAL-002", f"{url}/3")]

    corpus = json.loads((FIXTURES / "bad" / "expected.json").read_text())["variants"]
    for variant in S3_BAD:
        src = FIXTURES / "bad" / variant / corpus[variant]["path"]
        _upload(client, name, src, f"bad/{variant}")
        result = ockpt(
            s3, "validate", "--json", "--deep", f"s3://{name}/bad/{variant}", check=False
        )
        found = json.loads(result.stdout)
        here = json.loads(ockpt(s3, "validate", "--json", "--deep", str(src), check=False).stdout)
        rules = sorted(f["rule"] for f in found["findings"])
        assert rules == sorted(f["rule"] for f in here["findings"]), found["findings"]
        assert corpus[variant]["validator"]["rule"] in rules and result.returncode == 1
        assert all(f["file"].startswith(f"s3://{name}/bad/{variant}") for f in found["findings"])


def test_cp_to_bucket_writes_commit_file_last_and_back(s3, bucket, tmp_path):
    name, client = bucket
    src = CASES / "manager" / "checkpoint"
    url = f"s3://{name}/copied"
    ockpt(s3, "cp", src.as_posix(), url, "--no-progress")
    keys = _keys(client, name, "copied/")
    assert "copied/2/commit_success.txt" in keys and "copied/metadata/_ROOT_METADATA" in keys
    assert len(keys) == sum(1 for p in src.rglob("*") if p.is_file())
    result = ockpt(s3, "cp", src.as_posix(), url, check=False)
    assert result.returncode == 1 and "already exist" in result.stderr

    back = tmp_path / "back"
    ockpt(s3, "cp", url, str(back), "--no-progress")
    ockpt(s3, "diff", str(back), str(src), "--no-progress")
    for step in ("0", "1", "2"):
        ockpt(s3, "diff", str(back / step / "params"), str(src / step / "params"))


def test_item_without_commit_file_gets_one(s3, bucket):
    """A 0.5.15 item has no commit_success.txt; in a bucket `cp` adds one, written last."""
    name, client = bucket
    src = FIXTURES / "orbax-0.5.15" / "msgpack_placeholders" / "checkpoint"
    url = f"s3://{name}/old"
    ockpt(s3, "cp", str(src), url)
    body = client.get_object(Bucket=name, Key="old/commit_success.txt")["Body"].read()
    assert body.decode().startswith("Checkpoint commit was successful to s3://")
    ockpt(s3, "diff", url, str(src))


def test_convert_through_bucket(s3, bucket, tmp_path):
    """Orbax in a bucket -> safetensors in the bucket -> Orbax in the bucket: bit-equal."""
    pytest.importorskip("safetensors")
    name, client = bucket
    src = CASES / "v1_pytree" / "checkpoint"
    ockpt(s3, "cp", str(src), f"s3://{name}/v1")
    st_url = f"s3://{name}/export/model.safetensors"
    ockpt(s3, "convert", f"s3://{name}/v1", st_url, "--skip-unsupported", "--no-progress")
    assert "export/model.safetensors" in _keys(client, name, "export/")
    local_st = tmp_path / "model.safetensors"
    local_st.write_bytes(
        client.get_object(Bucket=name, Key="export/model.safetensors")["Body"].read()
    )
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy for safetensors.numpy
    from safetensors.numpy import load_file

    tensors = load_file(str(local_st))
    assert tensors["params.w"].dtype == np.float32 and tensors["params.w"].shape == (8, 4)

    ockpt(s3, "convert", str(local_st), f"s3://{name}/rebuilt", "--no-progress")
    keys = _keys(client, name, "rebuilt/")
    assert "rebuilt/commit_success.txt" in keys and "rebuilt/orbax.checkpoint" in keys
    ockpt(s3, "diff", f"s3://{name}/rebuilt", str(local_st))
    listing = json.loads(ockpt(s3, "ls", "--json", f"s3://{name}/rebuilt").stdout)
    assert listing["kind"] == "v1_checkpoint" and listing["has_commit_file"]


LOAD_FROM_BUCKET = """
import json, sys
import numpy as np
import ockpt

url, local = sys.argv[1], sys.argv[2]
remote = ockpt.load_pytree(url)  # the latest COMMITTED step: 2, not the unfinished 3
want = ockpt.load_pytree(local, step=2)
assert remote.keys() == want.keys() and all(np.array_equal(remote[k], want[k]) for k in want)
try:
    ockpt.load_pytree(url, step=3)
except ockpt.NotACheckpointError as e:
    print("refused:", e)
"""


def test_load_pytree_from_a_bucket_skips_uncommitted_steps(s3, bucket):
    """The Python API, not only the commands, treats a step in a bucket without
    commit_success.txt as unfinished (directories §7)."""
    name, client = bucket
    local = CASES / "manager" / "checkpoint"
    _upload(client, name, local, "run")
    _upload(client, name, local / "2", "run/3", skip="commit_success.txt")
    out = python(s3, LOAD_FROM_BUCKET, f"s3://{name}/run", str(local), timeout=120)
    assert "refused:" in out and "no committed step 3" in out


SAVE_TO_BUCKET = """
import sys
import numpy as np
import ockpt

url = sys.argv[1]
tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "name": "run", "n": 3}
ockpt.save_pytree(url + "/v1", tree)
ockpt.save_pytree(url + "/item", tree, layout="item")
for sub in ("v1", "item"):
    back = ockpt.load_pytree(url + "/" + sub)
    assert np.array_equal(back["w"], tree["w"]) and back["name"] == "run" and back["n"] == 3
try:
    ockpt.save_pytree(url + "/item", tree, layout="item")
except ockpt.WriteConflictError as e:
    print("refused:", e)
ockpt.save_pytree(url + "/item", {"w": np.zeros(2)}, layout="item", overwrite=True)
assert list(ockpt.load_pytree(url + "/item")) == ["w"]
"""


def test_save_pytree_to_a_bucket(s3, bucket):
    """save_pytree to an s3:// URL: staged locally, uploaded with commit_success.txt last;
    an existing checkpoint is refused unless overwrite=True (and then replaced whole)."""
    name, client = bucket
    assert "refused:" in python(s3, SAVE_TO_BUCKET, f"s3://{name}/ckpt")
    keys = _keys(client, name, "ckpt/v1/")
    assert "ckpt/v1/commit_success.txt" in keys and "ckpt/v1/orbax.checkpoint" in keys
    assert "ckpt/item/commit_success.txt" in _keys(client, name, "ckpt/item/")


def test_an_unreachable_store_is_an_io_error_in_bounded_time(s3):
    """A store that refuses every connection: each command gives up after ockpt's retries
    (about 40 s, not tensorstore's quarter of an hour) with one line naming the URL, exit 2."""
    closed = dict(s3, AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    start = time.monotonic()
    result = ockpt(closed, "validate", "s3://ockpt-nowhere/run", check=False)
    assert time.monotonic() - start < 100
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ockpt: s3://ockpt-nowhere/run: ") and "retry" in last, last
    assert "Traceback" not in result.stderr
