"""`ockpt.torch.OrbaxWriter`: ``dcp.save`` from 2 and 4 torchrun ranks (gloo, CPU) writes one
Orbax checkpoint in the multi-process layout, which real Orbax 0.12.8 and `ockpt.load_pytree`
restore exactly in this (single) process. Each launch is bounded by a timeout, so a hang fails
the test instead of CI.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="ockpt.torch needs torch (the torch extra)")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

import ockpt  # noqa: E402
from tests.support import CHILDREN, ROOT  # noqa: E402
from tests.support.children.torch_dcp_writer import OBJECTS, full_values  # noqa: E402

CHILD = CHILDREN / "torch_dcp_writer.py"
TIMEOUT_S = 300


def _launch(nproc: int, mode: str, out: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "reference"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", str(CHILD), mode, str(out)]
    try:
        done = subprocess.run(
            cmd, env=env, cwd=CHILDREN, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"torchrun --nproc-per-node {nproc} {mode} did not finish in {TIMEOUT_S}s")
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-6000:]
    for rank in range(nproc):
        assert f"done {rank}" in text, text[-6000:]
    return text


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def saved(request, tmp_path_factory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp(f"dcp{request.param}")
    text = _launch(request.param, "save", out)
    for rank in range(request.param):  # dcp.load through OrbaxReader gave back what was saved
        assert f"round trip {rank}: True" in text, text[-6000:]
    return request.param, out


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check(got: dict) -> None:
    """The restored tree holds every full tensor, bit for bit, and every Python value."""
    flat = _flat(got)
    assert set(flat) == set(full_values()) | set(OBJECTS)
    for name, want in full_values().items():
        value = np.asarray(flat[name])
        assert value.dtype == want.dtype and value.shape == want.shape, name
        assert value.tobytes() == want.tobytes(), name
    for name, want in OBJECTS.items():
        assert flat[name] == want, name


@pytest.mark.slow  # the slow matrix: torchrun
@pytest.mark.parametrize("layout", ["v1", "item", "auto"])
def test_ockpt_reads_the_dcp_save(saved, layout):
    _, out = saved
    assert ockpt.validate(out / layout).ok
    _check(ockpt.load_pytree(out / layout))


def _orbax():
    pytest.importorskip("orbax.checkpoint", reason="Orbax 0.12.8 is not installed")
    jax = pytest.importorskip("jax")
    import orbax.checkpoint as ocp

    return ocp, jax


@pytest.mark.slow  # the slow matrix: torchrun
def test_orbax_restores_item_as_numpy(saved):
    ocp, jax = _orbax()
    _, out = saved
    target = ockpt.load_pytree(out / "item")

    def args(x):
        if isinstance(x, np.ndarray):
            return ocp.RestoreArgs(restore_type=np.ndarray)
        return ocp.RestoreArgs()

    got = ocp.PyTreeCheckpointer().restore(
        out / "item",
        args=ocp.args.PyTreeRestore(item=target, restore_args=jax.tree.map(args, target)),
    )
    _check(got)


@pytest.mark.slow  # the slow matrix: torchrun
def test_orbax_restores_v1_with_target_sharding(saved):
    """Restored onto this process's one device: the saved grid (devices = ranks) is only
    informative; a target sharding is what Orbax places the arrays by."""
    ocp, jax = _orbax()
    _, out = saved
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(
        lambda x: (
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device)
            if isinstance(x, np.ndarray)
            else x
        ),
        ockpt.load_pytree(out / "v1"),
    )
    got = ocp.v1.load_pytree(out / "v1", target)
    assert isinstance(got["model"]["grid"], jax.Array)
    _check(got)


def _sharding(item: Path) -> dict[str, dict]:
    doc = json.loads((item / "_sharding").read_text())
    return {base64.urlsafe_b64decode(k).decode(): json.loads(v) for k, v in doc.items()}


@pytest.mark.slow  # the slow matrix: torchrun
def test_multiprocess_layout(saved):
    """WRITE-030 (replicas written once), WRITE-031 (zarr metadata by rank 0), WRITE-022 (one
    array_metadatas file per rank), and the saved grid of each tensor's shards."""
    nproc, out = saved
    item = out / "item"
    assert sorted(os.listdir(item / "array_metadatas")) == [f"process_{r}" for r in range(nproc)]
    assert (item / "ocdbt.process_0").is_dir() and (item / "commit_success.txt").is_file()
    assert not [n for n in os.listdir(out) if ".orbax-checkpoint-tmp" in n]
    meta = json.loads((item / "_METADATA").read_text())["tree_metadata"]
    ws = {k: v["value_metadata"].get("write_shape") for k, v in meta.items()}
    grid = _sharding(item)["model.grid"]
    scale = _sharding(item)["model.norm.scale"]
    assert scale["shape"] == [1] and scale["partition_spec"] == []
    if nproc == 2:
        assert ws["('model', 'embed', 'weight')"] == [5, 6]
        assert ws["('model', 'layers', '0', 'proj', 'weight')"] == [6, 4]  # 7 columns: 4 + 3
        assert grid["shape"] == [2] and grid["partition_spec"] == [None, "dim_1"]
    else:
        assert ws["('model', 'grid')"] == [4, 3]
        assert ws["('model', 'uneven')"] == [1, 3]  # shards of 2, 1, 1, 1 rows
        assert grid["shape"] == [2, 2] and grid["partition_spec"] == ["dim_0", "dim_1"]
        ids = [d["id"] for row in grid["device_mesh"]["mesh"] for d in row]
        assert ids == [0, 1, 2, 3]  # the shard at (i, j) is rank 2i + j's
    tensorstore = pytest.importorskip("tensorstore")
    kv = tensorstore.KvStore.open({"driver": "ocdbt", "base": f"file://{item}/"}).result()
    keys = [k.decode() for k in kv.list().result()]
    assert sorted(k for k in keys if k.startswith("model.layers.0.proj.bias/")) == [
        "model.layers.0.proj.bias/.zarray",
        "model.layers.0.proj.bias/0",
    ]  # replicated on every rank, stored once
    for rank in range(1, nproc):
        sub = tensorstore.KvStore.open(
            {"driver": "ocdbt", "base": f"file://{item}/ocdbt.process_{rank}/"}
        ).result()
        assert not [k for k in sub.list().result() if k.endswith(b".zarray")]


@pytest.mark.slow  # the slow matrix: torchrun
def test_failed_rank_commits_nothing(tmp_path):
    """WRITE-032: rank 1 fails while writing an overwrite of a committed checkpoint; every
    rank raises, the old checkpoint is untouched and no temporary directory is left. A value
    the format cannot hold (in rank 0's tree only: the Python values are its alone) is refused
    (WRITE-001) on every rank, nothing written, with compression="auto", whose vote across
    ranks comes after the planning barrier (no rank is left waiting in it)."""
    _launch(2, "save", tmp_path)
    before = ockpt.load_pytree(tmp_path / "v1")
    listing = sorted(os.listdir(tmp_path / "v1"))
    text = _launch(2, "fail", tmp_path)
    assert "write failed on 0" in text and "write failed on 1" in text, text[-4000:]
    assert "plan failed on 0: True" in text and "plan failed on 1" in text, text[-4000:]
    assert sorted(os.listdir(tmp_path)) == ["auto", "item", "v1"]
    assert sorted(os.listdir(tmp_path / "v1")) == listing
    _check(ockpt.load_pytree(tmp_path / "v1"))
    assert _flat(before).keys() == _flat(ockpt.load_pytree(tmp_path / "v1")).keys()


def test_state_dict_keys_nest_and_collisions_are_refused():
    from ockpt.torch import dcp_writer

    assert dcp_writer._nest({"a.b.c": 1, "a.d": 2}) == {"a": {"b": {"c": 1}, "d": 2}}
    with pytest.raises(ValueError, match="'a' and 'a.b' collide"):
        dcp_writer._nest({"a": 1, "a.b": 2})
    with pytest.raises(ValueError, match="empty"):
        dcp_writer._nest({"a..b": 1})
