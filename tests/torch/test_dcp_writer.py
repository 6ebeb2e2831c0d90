"""`ockpt.torch.OrbaxWriter`: ``dcp.save`` from 2 and 4 torchrun ranks (gloo, CPU) writes one
Orbax checkpoint in the multi-process layout, which real Orbax 0.12.8 and `ockpt.load_pytree`
restore exactly in this (single) process. Each launch is bounded by a timeout, so a hang fails
the test instead of CI. Below them, the same protocol in this process: DCP's steps driven by
hand with each rank a thread (its all-gather a barrier between threads), dcp.save with
``no_dist``, and the coordinator's layout of shards.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
import threading
import warnings
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
    with pytest.raises(ValueError) as e:
        dcp_writer._nest({"a": 1, "a.b": 2})
    assert str(e.value) == "keys 'a' and 'a.b' collide: one would hold the other"
    with pytest.raises(ValueError) as e:
        dcp_writer._nest({"a..b": 1})
    assert str(e.value) == "key 'a..b' has an empty '.'-separated part"


# ---------------------------------------------------------------------------------------------
# In this process (mutmut sees these calls; the torchrun tests above run in children): DCP's
# save protocol driven by hand, each rank a thread of one simulated job whose all-gather is a
# barrier between threads, and dcp.save with no_dist.

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.metadata import (  # noqa: E402
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
)
from torch.distributed.checkpoint.planner import (  # noqa: E402
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)

from ockpt.torch import OrbaxReader, OrbaxWriter, dcp_writer  # noqa: E402
from ockpt.writer import Job  # noqa: E402


class _Gather:
    """The all-gather of `count` threads, each one rank of a simulated job."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.barrier = threading.Barrier(count)
        self.slots: list = [None] * count
        self.calls = [0] * count

    def job(self, rank: int) -> Job:
        def all_gather(values: np.ndarray) -> np.ndarray:
            self.calls[rank] += 1
            self.slots[rank] = np.array(values)
            self.barrier.wait(timeout=30)
            got = np.stack(self.slots)
            self.barrier.wait(timeout=30)
            return got

        return Job(rank, self.count, all_gather)


def _shard(fqn: str, full: torch.Tensor, offsets, sizes) -> WriteItem:  # type: ignore[no-untyped-def]
    """DCP's write item of the region (`offsets`, `sizes`) of `full`."""
    chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes))
    data = TensorWriteData(chunk, TensorProperties(dtype=full.dtype), full.size())
    return WriteItem(MetadataIndex(fqn, torch.Size(offsets)), WriteItemType.SHARD, tensor_data=data)


def _whole(fqn: str, full: torch.Tensor) -> WriteItem:
    return _shard(fqn, full, [0] * full.ndim, list(full.shape))


def _value(fqn: str) -> WriteItem:
    return WriteItem(MetadataIndex(fqn), WriteItemType.BYTE_IO)


class _Planner:
    """What the writer asks of DCP's planner: the region of each tensor item, the value of
    each non-tensor item (`lookup_object`, as DefaultSavePlanner)."""

    def __init__(self, tensors: dict, values: dict) -> None:
        self.tensors, self.values = tensors, values

    def resolve_data(self, item: WriteItem):  # type: ignore[no-untyped-def]
        chunk = item.tensor_data.chunk
        full = self.tensors[item.index.fqn]
        return full[tuple(slice(o, o + n) for o, n in zip(chunk.offsets, chunk.sizes, strict=True))]

    def lookup_object(self, index: MetadataIndex):  # type: ignore[no-untyped-def]
        return self.values[index.fqn]


class _NoLookup:
    """A planner without `lookup_object`."""

    def __init__(self, tensors: dict) -> None:
        self.resolve_data = _Planner(tensors, {}).resolve_data


def _threads(count: int, run) -> list:  # type: ignore[no-untyped-def]
    """`run(rank)` in a thread per rank: each rank's result or the exception it raised."""
    out: list = [None] * count

    def call(rank: int) -> None:
        try:
            out[rank] = run(rank)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[rank] = e

    threads = [threading.Thread(target=call, args=(r,)) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


def _writers(monkeypatch, path, count: int, **kwargs) -> tuple[list[OrbaxWriter], _Gather]:  # type: ignore[no-untyped-def]
    """`count` writers set up as the ranks of one job (``process_group`` is the rank here)."""
    gather = _Gather(count)
    monkeypatch.setattr(dcp_writer, "_torch_job", gather.job)
    writers = [OrbaxWriter(path, process_group=r, **kwargs) for r in range(count)]
    for rank, w in enumerate(writers):
        w.set_up_storage_writer(rank == 0)
    return writers, gather


def _save(writers, items, planners) -> list:  # type: ignore[no-untyped-def]
    """DCP's save steps over the ranks: local plans, the coordinator's global plan, every
    rank's write_data (in threads), the coordinator's finish. Each rank's write results."""
    local = [w.prepare_local_plan(SavePlan(i)) for w, i in zip(writers, items, strict=True)]
    plans = writers[0].prepare_global_plan(local)
    written = _threads(len(writers), lambda r: writers[r].write_data(plans[r], planners[r]).wait())
    for result in written:
        if isinstance(result, BaseException):
            raise result
    writers[0].finish(None, written)
    return written


def _leftovers(path: Path) -> list[str]:
    return [n for n in os.listdir(path.parent) if ".orbax-checkpoint-tmp" in n]


def _tree_metadata(item: Path) -> dict:
    return json.loads((item / "_METADATA").read_text())["tree_metadata"]


def _full(seed: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "m.rows": torch.randn(5, 3, generator=g),  # rows 3 + 2 (an uneven split)
        "m.cols": torch.randint(-99, 99, (4, 6), generator=g, dtype=torch.int32),  # 4 + 2
        "m.rep": torch.randn(3, generator=g).to(torch.bfloat16),  # replicated: rank 0 writes it
        "m.grid": torch.arange(24, dtype=torch.int16).reshape(4, 6),  # (2, 2) grid of 4 ranks
        "m.odd": torch.arange(8, dtype=torch.float64),  # 0:4 on rank 1, 4:6 and 6:8 on rank 0
    }


def _two_rank_items(full: dict[str, torch.Tensor]) -> list[list[WriteItem]]:
    return [
        [
            _shard("m.rows", full["m.rows"], [0, 0], [3, 3]),
            _shard("m.cols", full["m.cols"], [0, 0], [4, 4]),
            _whole("m.rep", full["m.rep"]),
            _shard("m.odd", full["m.odd"], [4], [2]),
            _shard("m.odd", full["m.odd"], [6], [2]),
            _value("t.step"),
            _value("t.name"),
        ],
        [
            _shard("m.rows", full["m.rows"], [3, 0], [2, 3]),
            _shard("m.cols", full["m.cols"], [0, 4], [4, 2]),
            _shard("m.odd", full["m.odd"], [0], [4]),
            _shard("m.rows", full["m.rows"], [5, 0], [0, 3]),  # an empty last shard
        ],
    ]


@pytest.mark.parametrize("layout", ["v1", "item"])
def test_two_ranks_in_threads_write_one_checkpoint(monkeypatch, tmp_path, layout):
    """Two ranks (threads) save shards, a replica written once and rank 0's Python values:
    ockpt reads back every tensor bit for bit; the write shapes are the shards' block; the
    saved grid names the writing ranks; each rank's results size its items."""
    full = _full()
    path = tmp_path / "ck"
    writers, gather = _writers(monkeypatch, path, 2, layout=layout)
    values = {"t.step": 7, "t.name": "run"}
    items = _two_rank_items(full)
    written = _save(writers, items, [_Planner(full, values), _Planner(full, {})])
    assert min(gather.calls) > 0  # the ranks met in barriers
    assert not _leftovers(path) and (path / "commit_success.txt").is_file()
    tree = ockpt.load_pytree(path)
    assert (path / "state").is_dir() == (layout == "v1")
    assert tree["t"] == {"step": 7, "name": "run"}
    for name, want in full.items():
        if name == "m.grid":
            continue
        value = tree["m"][name[2:]]
        assert np.asarray(value).tobytes() == _bits_of(want), name
        assert value.shape == tuple(want.shape), name
    item = path if layout == "item" else path / "state"
    ws = {k: v["value_metadata"].get("write_shape") for k, v in _tree_metadata(item).items()}
    assert ws["('m', 'rows')"] == [3, 3]  # 3 + 2 rows: the array's end aside
    assert ws["('m', 'cols')"] == [4, 4]
    assert ws["('m', 'rep')"] == [3]
    assert ws["('m', 'odd')"] == [2]  # gcd of 4 and 6
    sharding = _sharding(item)
    assert sharding["m.rows"]["partition_spec"] == ["dim_0", None]
    assert sharding["m.rows"]["device_mesh"]["mesh"] == [{"id": 0}, {"id": 1}]
    assert sharding["m.cols"]["partition_spec"] == [None, "dim_1"]
    assert sharding["m.odd"]["device_mesh"]["mesh"] == [{"id": 1}, {"id": 0}, {"id": 0}]  # by start
    assert sharding["m.rep"]["shape"] == [1] and sharding["m.rep"]["axis_names"] == ["replica"]
    assert sorted(os.listdir(item / "array_metadatas")) == ["process_0", "process_1"]
    sizes = [[r.size_in_bytes for r in ranks] for ranks in written]
    assert sizes[1] == [60, 96, 64, 60]  # DCP sizes an item by its whole tensor
    assert sizes[0] == [60, 96, 6, 64, 64, 0, 0]  # the Python values: 0
    indexes = [[r.index for r in ranks] for ranks in written]
    assert indexes == [[i.index for i in rank] for rank in items]


def _bits_of(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_four_ranks_write_a_grid(monkeypatch, tmp_path):
    """A (2, 2) grid of shards: one mesh axis per split dimension, devices by shard."""
    full = {"m.grid": _full()["m.grid"]}
    boxes = {0: ([2, 0], [2, 3]), 1: ([0, 3], [2, 3]), 2: ([2, 3], [2, 3]), 3: ([0, 0], [2, 3])}
    items = [[_shard("m.grid", full["m.grid"], *boxes[r])] for r in range(4)]
    writers, _ = _writers(monkeypatch, tmp_path / "ck", 4, layout="item")
    _save(writers, items, [_Planner(full, {}) for _ in range(4)])
    got = ockpt.load_pytree(tmp_path / "ck")["m"]["grid"]
    assert got.tobytes() == _bits_of(full["m.grid"])
    grid = _sharding(tmp_path / "ck")["m.grid"]
    assert grid["shape"] == [2, 2] and grid["axis_names"] == ["dim_0", "dim_1"]
    assert grid["partition_spec"] == ["dim_0", "dim_1"]
    assert [d["id"] for row in grid["device_mesh"]["mesh"] for d in row] == [3, 1, 0, 2]
    ws = _tree_metadata(tmp_path / "ck")["('m', 'grid')"]["value_metadata"]["write_shape"]
    assert ws == [2, 3]


def _no_dist_save(state: dict, writer: OrbaxWriter, **kwargs) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, storage_writer=writer, no_dist=True, **kwargs)


def test_no_dist_save_of_views_and_python_values(tmp_path):
    """dcp.save in one process: a transposed tensor, conjugate and negative views (resolved
    before their bytes are read), a 0-d tensor, bfloat16 and Python values;
    the path given as checkpoint_id. ockpt and OrbaxReader read back every bit."""
    z = torch.tensor([1 + 2j, 3 - 1j, -0.5j], dtype=torch.complex64)
    tensors = {
        "a.t": torch.arange(6, dtype=torch.float32).reshape(2, 3).T,
        "a.conj": z.conj(),
        "a.neg": z.conj().imag,  # a negative view
        "a.one": torch.tensor([5], dtype=torch.int64),
        "b.zero_d": torch.tensor(2.5, dtype=torch.bfloat16),
        "b.mask": torch.tensor([True, False, True]),
    }
    assert tensors["a.conj"].is_conj() and tensors["a.neg"].is_neg()
    values = {"step": 3, "lr": 0.25, "name": "x", "done": False}
    state = {"a": {k[2:]: v for k, v in tensors.items() if k[0] == "a"}}
    state["b"] = {k[2:]: v for k, v in tensors.items() if k[0] == "b"}
    state["train"] = dict(values)
    writer = OrbaxWriter()
    _no_dist_save(state, writer, checkpoint_id=tmp_path / "ck")
    assert writer.path == os.fspath(tmp_path / "ck")
    got = ockpt.load_pytree(tmp_path / "ck")
    assert (tmp_path / "ck" / "state").is_dir()  # layout "v1" by default
    for name, want in tensors.items():
        value = np.asarray(got[name[0]][name[2:]])
        plain = want.resolve_conj().resolve_neg()
        assert value.shape == tuple(want.shape), name
        assert value.tobytes() == _bits_of(plain), name
    for name, want in values.items():
        value = got["train"][name]
        assert value == want and type(value if name == "name" else value.item()) is type(want)
    back = {k: torch.zeros_like(v) for k, v in tensors.items()} | dict.fromkeys(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = {k: v for k, v in back.items() if k[0] in "ab"}
        flat |= {f"train.{k}": None for k in values}
        dcp.load(flat, storage_reader=OrbaxReader(tmp_path / "ck"), no_dist=True)
    for name, want in tensors.items():
        assert _bits_of(flat[name]) == _bits_of(want.resolve_conj().resolve_neg()), name
    assert {k: flat[f"train.{k}"] for k in values} == values


def test_overwrite_and_a_save_over_a_checkpoint(tmp_path):
    """Without overwrite a save over a checkpoint is refused (nothing changed); with it the
    checkpoint is replaced."""
    path = tmp_path / "ck"
    _no_dist_save({"w": torch.ones(2)}, OrbaxWriter(path, layout="item"))
    assert (path / "_METADATA").is_file()
    with pytest.raises(BaseException) as e:  # noqa: PT011 - DCP wraps the error
        _no_dist_save({"w": torch.zeros(2)}, OrbaxWriter(path, layout="item"))
    failure = e.value.failures[0][0] if hasattr(e.value, "failures") else e.value
    assert isinstance(failure, ockpt.OckptError) and failure.rule.startswith("DIR-"), failure
    assert ockpt.load_pytree(path)["w"].tolist() == [1, 1]
    _no_dist_save({"w": torch.zeros(2)}, OrbaxWriter(path, layout="item", overwrite=True))
    assert ockpt.load_pytree(path)["w"].tolist() == [0, 0]
    assert not _leftovers(path)


def test_save_options_are_the_writers(tmp_path):
    """`options` reach the save: a chunk size limit splits the stored array."""
    path = tmp_path / "ck"
    options = ockpt.SaveOptions(chunk_byte_size=64)
    state = {"w": torch.arange(64, dtype=torch.float32)}
    _no_dist_save(state, OrbaxWriter(path, layout="item", options=options))
    ws = _tree_metadata(path)["('w',)"]["value_metadata"]["write_shape"]
    assert ws == [64]
    chunks = ockpt.open(path)["w"].chunk_shape
    assert chunks == (16,)
    assert ockpt.load_pytree(path)["w"].tolist() == list(range(64))


def test_validate_checkpoint_id_and_paths_refused():
    assert OrbaxWriter.validate_checkpoint_id("/tmp/somewhere")
    assert OrbaxWriter.validate_checkpoint_id("file:///tmp/somewhere")
    assert not OrbaxWriter.validate_checkpoint_id("memory://x/")  # a store with no os path
    assert not OrbaxWriter.validate_checkpoint_id("gs://b/x")  # a URL that cannot open here
    with pytest.raises(ockpt.UnsupportedError, match="memory://x/: OrbaxWriter saves to local"):
        OrbaxWriter("memory://x/")
    writer = OrbaxWriter("/tmp/a")
    with pytest.raises(ockpt.UnsupportedError, match="local paths only"):
        writer.reset("memory://y/")
    assert writer.path == "/tmp/a"
    writer.reset(Path("/tmp/b"))
    assert writer.path == "/tmp/b"
    writer.reset()
    assert writer.path == "/tmp/b"
    assert OrbaxWriter().path is None
    defaults = OrbaxWriter()
    assert defaults.layout == "v1" and defaults.overwrite is False
    assert defaults.options == ockpt.SaveOptions()


def test_a_save_without_a_path_and_plan_caching_are_refused():
    writer = OrbaxWriter()
    plan = writer.prepare_local_plan(SavePlan([_value("x"), _whole("w", torch.ones(1))]))
    assert plan.storage_data.objects == frozenset({"x"})
    with pytest.raises(
        ValueError,
        match="^OrbaxWriter has no path: pass one, or checkpoint_id to dcp.save$",
    ):
        writer.prepare_global_plan([plan])
    with pytest.raises(
        ockpt.UnsupportedError, match="^OrbaxWriter does not support DCP's plan caching$"
    ):
        writer.prepare_local_plan(SavePlan([], usable=False))


def test_set_up_refuses_a_coordinator_other_than_rank_0_and_no_collectives(monkeypatch):
    gather = _Gather(2)
    monkeypatch.setattr(dcp_writer, "_torch_job", gather.job)
    with pytest.raises(ockpt.UnsupportedError, match="rank 0 as DCP's coordinator"):
        OrbaxWriter("/tmp/x", process_group=1).set_up_storage_writer(True)
    with pytest.raises(ockpt.UnsupportedError, match="rank 0 as DCP's coordinator"):
        OrbaxWriter("/tmp/x", process_group=0).set_up_storage_writer(False)
    with pytest.raises(
        ockpt.UnsupportedError,
        match=r"^OrbaxWriter needs DCP's collectives \(use_collectives=True\)$",
    ):
        OrbaxWriter("/tmp/x", process_group=1).set_up_storage_writer(False, use_collectives=False)
    writer = OrbaxWriter("/tmp/x", process_group=1)
    writer.set_up_storage_writer(False, use_collectives=True)
    writer.set_up_storage_writer(False, rank=1)
    assert writer._job.index == 1 and writer._job.count == 2
    monkeypatch.setattr(dcp_writer, "_torch_job", lambda group: Job(0, 1))
    OrbaxWriter("/tmp/x").set_up_storage_writer(True, use_collectives=False)  # one process


def test_torch_job_over_a_gloo_group_of_one():
    """Without torch.distributed the job is one process; with a (one-rank) gloo group, its
    rank and size, and an all-gather of int32 vectors over it."""
    assert not torch.distributed.is_initialized()
    assert dcp_writer._torch_job(None) == Job(0, 1)
    store = torch.distributed.HashStore()
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        job = dcp_writer._torch_job(None)
        assert (job.index, job.count) == (0, 1)
        got = job.all_gather(np.array([5, -7, 1 << 30], dtype=np.int64))
        assert got.dtype == np.int32 and got.tolist() == [[5, -7, 1 << 30]]
    finally:
        torch.distributed.destroy_process_group()


def test_python_values_held_only_by_other_ranks_are_refused(monkeypatch, tmp_path):
    """Python values come from the coordinator's state dict: one that only rank 1 holds is
    refused before anything is created (the first five named, sorted)."""
    full = {"w": torch.ones(4)}
    writers, _ = _writers(monkeypatch, tmp_path / "ck", 2)
    names = [f"v{i}" for i in range(7)]
    plans = [
        writers[0].prepare_local_plan(SavePlan([_shard("w", full["w"], [0], [2]), _value("v6")])),
        writers[1].prepare_local_plan(
            SavePlan([_shard("w", full["w"], [2], [2]), *map(_value, names)])
        ),
    ]
    with pytest.raises(ockpt.UnsupportedError) as e:
        writers[0].prepare_global_plan(plans)
    assert str(e.value) == (
        "non-tensor values ['v0', 'v1', 'v2', 'v3', 'v4'] are not in rank 0's state dict: "
        "OrbaxWriter writes non-tensor values from the coordinator's"
    )
    assert not os.listdir(tmp_path) and writers[0]._pending is None


def test_a_key_collision_is_refused_before_the_save_begins(monkeypatch, tmp_path):
    full = {"a": torch.ones(2)}
    writer = OrbaxWriter(tmp_path / "ck")
    plan = writer.prepare_local_plan(SavePlan([_whole("a", full["a"]), _value("a.b")]))
    with pytest.raises(ValueError, match="'a' and 'a.b' collide"):
        writer.prepare_global_plan([plan])
    assert not os.listdir(tmp_path)


def test_the_global_plan_gives_the_python_values_to_rank_0(monkeypatch, tmp_path):
    """Every rank's plan carries the layout and the save's token; only rank 0's the values;
    reset() before writing removes the temporary directory the coordinator created."""
    full = _full()
    writers, _ = _writers(monkeypatch, tmp_path / "ck", 2)
    items = _two_rank_items(full)
    items[1].append(_value("t.step"))  # rank 1 holds it too (a replica): rank 0 writes it
    local = [w.prepare_local_plan(SavePlan(i)) for w, i in zip(writers, items, strict=True)]
    plans = writers[0].prepare_global_plan(local)
    assert plans[0].storage_data is plans[1].storage_data
    info = plans[0].storage_data
    assert info.path == os.fspath(tmp_path / "ck") and info.objects == ("t.name", "t.step")
    assert [a.fqn for a in info.arrays] == ["m.cols", "m.odd", "m.rep", "m.rows"]
    kinds = [[i.type == WriteItemType.BYTE_IO for i in p.items] for p in plans]
    assert kinds[0] == [False] * 5 + [True, True] and kinds[1] == [False] * 4
    assert _leftovers(tmp_path / "ck")
    writers[0].reset()
    assert not _leftovers(tmp_path / "ck") and writers[0]._pending is None
    assert not os.path.exists(tmp_path / "ck")


def test_a_failure_while_planning_on_rank_0_fails_every_rank(monkeypatch, tmp_path):
    """Rank 0's planner cannot look up its Python values: it raises, the other rank learns it
    at the planning barrier, and the temporary directory is removed."""
    full = _full()
    writers, _ = _writers(monkeypatch, tmp_path / "ck", 2)
    items = _two_rank_items(full)
    local = [w.prepare_local_plan(SavePlan(i)) for w, i in zip(writers, items, strict=True)]
    plans = writers[0].prepare_global_plan(local)
    planners = [_NoLookup(full), _Planner(full, {})]
    out = _threads(2, lambda r: writers[r].write_data(plans[r], planners[r]))
    assert isinstance(out[0], ockpt.UnsupportedError), out
    assert "['t.name', 't.step']" in str(out[0]) and "lookup_object" in str(out[0])
    assert isinstance(out[1], ockpt.OckptError) and "process(es) [0]" in str(out[1]), out
    assert "while planning" in str(out[1])
    assert not _leftovers(tmp_path / "ck") and not os.path.exists(tmp_path / "ck")
    assert writers[0]._pending is None and writers[1]._pending is None


def test_a_value_the_format_cannot_hold_fails_every_rank(monkeypatch, tmp_path):
    full = _full()
    writers, _ = _writers(monkeypatch, tmp_path / "ck", 2)
    items = _two_rank_items(full)
    local = [w.prepare_local_plan(SavePlan(i)) for w, i in zip(writers, items, strict=True)]
    plans = writers[0].prepare_global_plan(local)
    planners = [_Planner(full, {"t.step": object(), "t.name": "x"}), _Planner(full, {})]
    out = _threads(2, lambda r: writers[r].write_data(plans[r], planners[r]))
    assert isinstance(out[0], ockpt.OckptError) and out[0].rule == "WRITE-001", out
    assert isinstance(out[1], ockpt.OckptError), out
    assert not _leftovers(tmp_path / "ck") and not os.path.exists(tmp_path / "ck")
    assert writers[0]._pending is None


def test_a_failure_while_writing_keeps_the_old_checkpoint(monkeypatch, tmp_path):
    """WRITE-032: rank 1 fails writing its chunks in an overwrite: both ranks raise, the
    committed checkpoint is untouched, no temporary directory is left."""
    import ockpt._zarr_write as zarr_write

    full = _full()
    path = tmp_path / "ck"
    _no_dist_save({"m": {"rows": torch.zeros(5, 3)}}, OrbaxWriter(path))
    writers, _ = _writers(monkeypatch, path, 2, overwrite=True)
    real = zarr_write.write_arrays

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "rank-1":
            raise OSError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(zarr_write, "write_arrays", flaky)
    items = _two_rank_items(full)
    local = [w.prepare_local_plan(SavePlan(i)) for w, i in zip(writers, items, strict=True)]
    plans = writers[0].prepare_global_plan(local)
    planners = [_Planner(full, {"t.step": 1, "t.name": "x"}), _Planner(full, {})]

    def write(rank: int):  # type: ignore[no-untyped-def]
        threading.current_thread().name = f"rank-{rank}"
        return writers[rank].write_data(plans[rank], planners[rank])

    out = _threads(2, write)
    assert isinstance(out[1], OSError) and "injected" in str(out[1]), out
    assert isinstance(out[0], BaseException), out
    assert writers[0]._pending is None and writers[1]._pending is None
    assert not _leftovers(path)
    assert ockpt.load_pytree(path)["m"]["rows"].tolist() == [[0.0] * 3] * 5


def test_layouts_write_shapes_and_grids():
    """The coordinator's layout of each tensor from every rank's items (pure)."""
    t = torch.zeros(6, 4)
    layouts = dcp_writer._layouts(
        [
            [_shard("b", t, [0, 0], [3, 4]), _shard("a", t, [0, 0], [6, 2])],
            [_shard("b", t, [3, 0], [3, 4]), _shard("a", t, [0, 2], [6, 2])],
            [_shard("b", t, [6, 0], [0, 4])],  # empty: no box
        ]
    )
    assert [(a.fqn, a.shape, a.dtype, a.write_shape) for a in layouts] == [
        ("a", (6, 4), "float32", (6, 2)),
        ("b", (6, 4), "float32", (3, 4)),
    ]
    assert layouts[0].sharding.device_ids == (0, 1)
    assert layouts[1].sharding.partition_spec == ("dim_0", None)
    assert dcp_writer._write_shape((8,), [((0,), (4,), 0), ((4,), (2,), 0), ((6,), (2,), 1)]) == (
        2,
    )
    assert dcp_writer._write_shape((5, 3), []) == (5, 3)  # nothing written: the whole array
    assert dcp_writer._write_shape((0,), []) == (0,)
    assert dcp_writer._grid_sharding((4,), []) is None
    # shards that overlap (the same start twice) or leave a cell empty form no grid
    assert dcp_writer._grid_sharding((4,), [((0,), (2,), 0), ((0,), (4,), 1)]) is None
    two_d = [((0, 0), (2, 2), 0), ((2, 2), (2, 2), 1), ((0, 2), (2, 2), 2)]
    assert dcp_writer._grid_sharding((4, 4), two_d) is None
    whole = dcp_writer._grid_sharding((3, 2), [((0, 0), (3, 2), 4)])
    assert whole == ockpt.documents.NamedShardingSpec(
        mesh_shape=(1,),
        axis_names=("replica",),
        axis_types=None,
        partition_spec=(None, None),
        device_ids=(4,),
    )
    grid = dcp_writer._grid_sharding(
        (4, 6, 2), [((i, j, 0), (2, 3, 2), 10 + 2 * i + j // 3) for i in (0, 2) for j in (0, 3)]
    )
    assert grid.mesh_shape == (2, 2) and grid.axis_names == ("dim_0", "dim_1")
    assert grid.partition_spec == ("dim_0", "dim_1", None)
    assert grid.device_ids == (10, 11, 14, 15)


@pytest.mark.filterwarnings("ignore::UserWarning")  # complex32, quint8: experimental, deprecated
def test_dtypes_torch_has_that_the_format_lacks_are_refused():
    for dtype in (torch.complex32, torch.uint4, torch.quint8):
        meta = torch.empty(2, dtype=dtype, device="meta")  # only its dtype and size are read
        with pytest.raises(ockpt.UnsupportedError, match=r"^w: tensors of torch\.\w+ cannot"):
            dcp_writer._layouts([[_whole("w", meta)]])
    assert dcp_writer._dtype_name("w", torch.float8_e4m3fn) == "float8_e4m3fn"


def test_host_and_item_sizes():
    with pytest.raises(TypeError, match="resolved a tensor item to list"):
        dcp_writer._host([1], np.dtype("float32"))
    one = dcp_writer._host(torch.tensor([3], dtype=torch.int8), np.dtype("int8"))
    assert one.tolist() == [3] and one.dtype == np.int8
    empty = dcp_writer._host(torch.empty(2, 0), np.dtype("float32"))
    assert empty.shape == (2, 0) and empty.dtype == np.float32
    assert dcp_writer._nbytes(_value("x")) == 0
    assert dcp_writer._nbytes(_whole("w", torch.zeros(3, 2, dtype=torch.float16))) == 12


def test_torch_job_of_a_group_gathers_int32_over_it_on_the_gpu_with_nccl(monkeypatch):
    """The job of a (faked) 3-rank group: its rank and size in that group, and an all-gather
    of int32 tensors over it, on the CPU with gloo and on the GPU with NCCL (a torch without
    CUDA refuses that)."""
    dist = torch.distributed
    seen: list = []
    backend = {"name": "gloo"}

    def all_gather(every, mine, group=None):  # type: ignore[no-untyped-def]
        seen.append((mine.device.type, mine.dtype, group, len(every)))
        for i, t in enumerate(every):
            t.copy_(mine + 10 * i)

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group: {"g": 3}[group])
    monkeypatch.setattr(dist, "get_rank", lambda group: {"g": 2}[group])
    monkeypatch.setattr(dist, "get_backend", lambda group: {"g": backend["name"]}[group])
    monkeypatch.setattr(dist, "all_gather", all_gather)
    job = dcp_writer._torch_job("g")
    assert (job.index, job.count, job.primary) == (2, 3, False)
    assert job.gather(np.array([1, 2])).tolist() == [[1, 2], [11, 12], [21, 22]]
    assert seen == [("cpu", torch.int32, "g", 3)]
    backend["name"] = "nccl"
    job = dcp_writer._torch_job("g")
    if torch.cuda.is_available():
        assert job.gather(np.array([1])).tolist() == [[1], [11], [21]]
        assert seen[-1][0] == "cuda"
    else:
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            job.gather(np.array([1]))


def test_python_values_need_the_planners_lookup_object():
    """The coordinator reads its Python values through the planner's lookup_object: without
    it the save is refused, naming the first five."""
    names = tuple(f"v{i}" for i in range(7))
    info = dcp_writer._GlobalInfo("/tmp/x", 1, (), names)
    items = [_value(n) for n in names]
    with pytest.raises(ockpt.UnsupportedError) as e:
        dcp_writer._tree(info, items, _NoLookup({}), primary=True)
    assert str(e.value) == (
        "non-tensor values ['v0', 'v1', 'v2', 'v3', 'v4']: OrbaxWriter reads them through the "
        "planner's lookup_object (DefaultSavePlanner has it)"
    )
    assert dcp_writer._tree(info, items, _NoLookup({}), primary=False) == {}


def test_write_data_takes_the_items_in_any_order(monkeypatch, tmp_path):
    """A plan whose Python values come before its tensors is written whole."""
    full = {"w": torch.arange(4, dtype=torch.int32)}
    (writer,), _ = _writers(monkeypatch, tmp_path / "ck", 1, layout="item")
    local = writer.prepare_local_plan(SavePlan([_whole("w", full["w"]), _value("n")]))
    (plan,) = writer.prepare_global_plan([local])
    plan = dataclasses.replace(plan, items=plan.items[::-1])
    writer.write_data(plan, _Planner(full, {"n": 3}))
    writer.finish(None, [])
    got = ockpt.load_pytree(tmp_path / "ck")
    assert got["w"].tolist() == [0, 1, 2, 3] and got["n"] == 3


def test_finish_before_write_data_is_refused(monkeypatch, tmp_path):
    (writer,), _ = _writers(monkeypatch, tmp_path / "ck", 1)
    writer.prepare_global_plan([writer.prepare_local_plan(SavePlan([_value("n")]))])
    with pytest.raises(AssertionError):
        writer.finish(None, [])
    writer.reset()
    assert not _leftovers(tmp_path / "ck")


def test_tensor_items_without_a_chunk_are_refused():
    data = TensorWriteData(None, TensorProperties(dtype=torch.float32), torch.Size([2]))  # type: ignore[arg-type]
    item = WriteItem(MetadataIndex("w"), WriteItemType.TENSOR, tensor_data=data)
    with pytest.raises(AssertionError):
        dcp_writer._layouts([[item]])
    info = dcp_writer._GlobalInfo("/tmp/x", 1, (), ())
    with pytest.raises(AssertionError):
        dcp_writer._tree(info, [item], _Planner({}, {}), primary=True)


def test_one_element_shards_are_stored_shards():
    t = torch.zeros(2)
    (layout,) = dcp_writer._layouts([[_shard("w", t, [0], [1])], [_shard("w", t, [1], [1])]])
    assert layout.write_shape == (1,)
    assert layout.sharding.mesh_shape == (2,) and layout.sharding.device_ids == (0, 1)


def test_a_barrier_that_fails_while_a_planning_error_is_reported_keeps_that_error(
    monkeypatch, tmp_path
):
    """Rank 0 fails in its planning and the barrier that tells the others fails too: the
    planning error is the one raised, and the temporary directory is removed."""

    def broken(values: np.ndarray) -> np.ndarray:
        raise RuntimeError("the barrier broke")

    monkeypatch.setattr(dcp_writer, "_torch_job", lambda group: Job(0, 2, broken))
    writer = OrbaxWriter(tmp_path / "ck")
    writer.set_up_storage_writer(True)
    full = {"w": torch.ones(2)}
    plans = [
        writer.prepare_local_plan(SavePlan([_shard("w", full["w"], [0], [1]), _value("n")])),
        writer.prepare_local_plan(SavePlan([_shard("w", full["w"], [1], [1])])),
    ]
    plans = writer.prepare_global_plan(plans)
    with pytest.raises(ockpt.UnsupportedError, match="lookup_object"):
        writer.write_data(plans[0], _NoLookup(full))
    assert not _leftovers(tmp_path / "ck") and writer._pending is None


def test_an_empty_tensor_is_refused_by_the_writer_and_laid_out_whole(tmp_path):
    """A tensor with no elements has no box: its layout is the whole array, no grid; the save
    refuses it (WRITE-003, the format stores no zero-size array) and leaves nothing."""
    t = torch.empty(0, 3)
    (layout,) = dcp_writer._layouts([[_whole("e", t)], [_shard("e", t, [0, 0], [0, 3])]])
    assert layout.write_shape == (0, 3) and layout.sharding is None
    with pytest.raises(BaseException) as e:  # noqa: PT011 - DCP wraps the error
        _no_dist_save({"e": t}, OrbaxWriter(tmp_path / "ck"))
    failure = e.value.failures[0][0]
    assert isinstance(failure, ockpt.FormatError) and failure.rule == "WRITE-003", failure
    assert not os.listdir(tmp_path)
