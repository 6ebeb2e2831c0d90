"""`ockpt.torch.OrbaxReader`, a torch.distributed.checkpoint storage reader (spec/loading.md
§9.2): in one process (``no_dist=True``) and under ``torchrun`` with 2 and 4 ranks on gloo,
where each rank fills DTensors of a real Orbax checkpoint and reads only the chunks its shards
touch (bytes counted in `_torch_dcp_reader_child.py`); and in this process, `read_data` given
read items of parts of leaves, as DCP's planner makes for shards."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ockpt

torch = pytest.importorskip("torch", reason="ockpt.torch needs PyTorch (the torch extra)")
dcp = pytest.importorskip("torch.distributed.checkpoint", reason="torch without distributed")

from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.metadata import (  # noqa: E402
    BytesStorageMetadata,
    TensorStorageMetadata,
)

from ockpt.torch import OrbaxReader  # noqa: E402
from tests.support import CHILDREN, FIXTURES, ROOT  # noqa: E402

#: 12 leaves saved by Orbax 0.12.8 in OCDBT, each chunk a separate value of ~2-4 KB: kernels
#: (64, 64) in (16, 32) chunks, embeddings (32, 64) in (32, 32) chunks, biases (32,).
COUNTED = FIXTURES / "orbax-0.12.8/ocdbt_target_data_file_size/checkpoint"
#: Loaded whole on every mesh: saved by 2 processes (strings, bfloat16, a 0-d step), and an
#: older release's (4, 2)-mesh arrays.
OTHERS = [
    FIXTURES / "orbax-0.12.8/multiprocess/checkpoint",
    FIXTURES / "orbax-0.10.3/sharded/checkpoint",
]


def _load(state: dict, reader: OrbaxReader) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process"
        dcp.load(state, storage_reader=reader, no_dist=True)


def _flat_metadata(node):  # type: ignore[no-untyped-def]
    """Every leaf of a `pytree_metadata` tree."""
    if isinstance(node, dict):
        node = list(node.values())
    if isinstance(node, (list, tuple)):
        for child in node:
            yield from _flat_metadata(child)
    elif node is not None:
        yield node


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_metadata_from_the_tree_alone(monkeypatch):
    """read_metadata reads no chunk (per-leaf zarr here: every chunk its own file), and gives a
    tensor entry per array (global shape, torch dtype, one chunk), a bytes entry per string."""
    files: list[str] = []
    pread, preadv = os.pread, os.preadv

    def seen(fd: int) -> None:
        files.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "pread", lambda fd, *a: seen(fd) or pread(fd, *a))
    monkeypatch.setattr(os, "preadv", lambda fd, *a: seen(fd) or preadv(fd, *a))
    reader = OrbaxReader(FIXTURES / "orbax-0.12.8/no_ocdbt/checkpoint")
    meta = reader.read_metadata().state_dict_metadata
    monkeypatch.undo()
    assert files and not [f for f in files if re.fullmatch(r"[0-9.]+", os.path.basename(f))]
    assert isinstance(meta["b.c"], TensorStorageMetadata)
    sharded = meta["sharded"]
    assert isinstance(sharded, TensorStorageMetadata)
    assert sharded.size == torch.Size([8, 2]) and sharded.properties.dtype == torch.float32
    assert [(c.offsets, c.sizes) for c in sharded.chunks] == [(torch.Size([0, 0]), sharded.size)]
    assert meta["bf16"].properties.dtype == torch.bfloat16
    assert meta["zero_d"].size == torch.Size([])
    values = {k for k, v in meta.items() if isinstance(v, BytesStorageMetadata)}
    leaves = {m.param_name: m for m in _flat_metadata(ockpt.pytree_metadata(reader.path))}
    assert values == {k for k, m in leaves.items() if m.dtype is None or m.value_type == "scalar"}
    assert any(leaves[k].dtype is None for k in values)  # strings
    assert any(leaves[k].value_type == "scalar" for k in values)  # Python scalars (§9.2)


def test_no_dist_load_of_plain_tensors_nested_dicts_and_strings():
    """DCP flattens nested dicts and lists to dotted names, the reader's names (LOAD-060);
    0-d leaves fill 0-d tensors and strings come back as str (LOAD-062)."""
    path = FIXTURES / "orbax-0.12.8/nested/checkpoint"
    want = ockpt.torch.load_state_dict(path)
    assert "layers.0.w" in want and "deep.a.b.c.d" in want
    state = {
        "layers": [{"w": torch.empty_like(want["layers.0.w"])}],
        "deep": {"a": {"b": {"c": {"d": torch.empty_like(want["deep.a.b.c.d"])}}}},
    }
    _load(state, OrbaxReader(path))
    assert torch.equal(state["layers"][0]["w"], want["layers.0.w"])
    assert torch.equal(state["deep"]["a"]["b"]["c"]["d"], want["deep.a.b.c.d"])

    path = FIXTURES / "orbax-0.12.8/scalars_strings/checkpoint"
    state = {"int": 0, "float": 0.0, "str": None, "nested": {"inner": {"s": 0}}}
    _load(state, OrbaxReader(path))
    assert type(state["int"]) is int and state["int"] == 42  # a Python value (loading §9.2)
    assert type(state["float"]) is float and state["float"] == ockpt.load_pytree(path)["float"]
    assert state["str"] == "hello" and state["nested"]["inner"]["s"] == "deep"


@pytest.mark.parametrize("case", ["orbax-0.12.8/multiprocess", "orbax-0.4.8/scalars_strings"])
def test_no_dist_load_of_every_leaf_equals_load_state_dict(case):
    path = FIXTURES / case / "checkpoint"
    want = ockpt.torch.load_state_dict(path)
    described = OrbaxReader(path).read_metadata().state_dict_metadata
    values = {k for k, v in described.items() if isinstance(v, BytesStorageMetadata)}
    state = {k: None if k in values else torch.empty_like(v) for k, v in want.items()}
    _load(state, OrbaxReader(path))
    for name, value in want.items():
        got = state[name]
        if isinstance(value, str):
            assert got == value, name
        elif name in values:  # a Python scalar: its value, the tensor load_state_dict gives
            assert not isinstance(got, torch.Tensor), name
            assert np.asarray(got).tobytes() == np.asarray(value.item()).tobytes(), name
        else:
            assert _bits(got) == _bits(value), name


def test_a_target_of_another_dtype_is_cast_by_torch_and_checkpoint_id_replaces_the_path():
    path = FIXTURES / "orbax-0.12.8/sharded/checkpoint"
    state = {"xy": torch.empty(8, 4, dtype=torch.float64)}
    reader = OrbaxReader(FIXTURES / "orbax-0.12.8/nested/checkpoint")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=str(path), storage_reader=reader, no_dist=True)
    want = ockpt.load_pytree(path)["xy"]
    np.testing.assert_array_equal(state["xy"].numpy(), want.astype(np.float64))
    assert reader.checkpoint_id == str(path)


def _failure(e: pytest.ExceptionInfo) -> BaseException:
    """The exception rank 0 raised inside dcp.load (DCP wraps it)."""
    return e.value.failures[0][0]


def test_a_shape_mismatch_and_a_missing_name_are_refused():
    path = FIXTURES / "orbax-0.12.8/sharded/checkpoint"
    with pytest.raises(CheckpointException) as e:
        _load({"xy": torch.empty(4, 4)}, OrbaxReader(path))
    assert "Size mismatch" in str(_failure(e))
    with pytest.raises(CheckpointException) as e:
        _load({"params.xy": torch.empty(8, 4)}, OrbaxReader(path))
    assert "Missing key" in str(_failure(e))


def test_load_061_a_dtype_torch_lacks_is_refused_unless_widened():
    path = FIXTURES / "orbax-0.12.8/dtype_bit_patterns/checkpoint"
    meta = OrbaxReader(path).read_metadata().state_dict_metadata
    assert meta["int4"].properties.dtype == torch.int8  # described widened, read only if asked
    state = {"int4": torch.empty(16, dtype=torch.int8)}
    with pytest.raises(CheckpointException) as e:
        _load(state, OrbaxReader(path))
    error = _failure(e)
    assert isinstance(error, ockpt.UnsupportedError) and error.rule == "LOAD-061"
    assert error.file == os.fspath(path)
    assert "leaf 'int4': PyTorch has no tensor dtype int4" in str(error)
    _load(state, OrbaxReader(path, widen=True))
    want = ockpt.load_pytree(path)["int4"]
    assert state["int4"].tolist() == want.astype(np.int8).tolist()


def test_validate_checkpoint_id():
    assert OrbaxReader.validate_checkpoint_id(COUNTED)
    assert OrbaxReader.validate_checkpoint_id(FIXTURES / "orbax-0.12.8/manager/checkpoint")
    assert not OrbaxReader.validate_checkpoint_id(FIXTURES / "no-such-checkpoint")
    assert not OrbaxReader.validate_checkpoint_id(FIXTURES / "orbax-0.12.8")
    assert not OrbaxReader.validate_checkpoint_id(None)  # type: ignore[arg-type]  # TypeError
    assert not OrbaxReader.validate_checkpoint_id(b"/tmp")  # type: ignore[arg-type]


def _torchrun(nproc: int, out: Path) -> list[dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "reference"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(CHILDREN / "torch_dcp_reader.py"),
        str(out),
        str(COUNTED),
        *map(str, OTHERS),
    ]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun with {nproc} ranks hung (killed after 300 s): {e.stderr}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.parametrize(
    "nproc",
    [2, pytest.param(4, marks=pytest.mark.slow)],  # 2 ranks keep LOAD-063 in the default
)
def test_load_063_each_rank_reads_only_its_chunks(nproc, tmp_path):
    """Under torchrun (gloo, CPU) each rank fills DTensors (Shard(0), Shard(1), replicated; a
    (2, 2) mesh for 4 ranks) and a plain tensor; its local shards equal the matching slices of
    load_pytree. The data-file bytes it reads through dcp.load equal those of reading the same
    regions with ockpt.open directly, are less than the whole of the leaves, and are its chunk
    share of them (LOAD-063)."""
    ranks = _torchrun(nproc, tmp_path)
    for r in ranks:
        assert r["differences"] == [], r
        assert r["others"] == {str(p): [] for p in OTHERS}, r
        assert r["bytes"] == r["direct_bytes"], r
        assert r["bytes"] < r["whole_bytes"], r
        # the share counts tree nodes once per leaf, a rank reads them once: allow a node or two
        assert abs(r["bytes"] - r["share_bytes"]) <= 0.1 * r["share_bytes"] + 2500, r
    if nproc == 2:
        assert ranks[0]["shards"]["layer_0.kernel"] == [32, 64]
        assert all(r["bytes"] < 0.6 * r["whole_bytes"] for r in ranks)
    else:
        assert sorted(tuple(r["coordinate"]) for r in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert ranks[0]["shards"]["layer_0.kernel"] == [32, 32]
        assert all(r["bytes"] < 0.45 * r["whole_bytes"] for r in ranks)


def test_conformance_row_reads_every_fixture_through_dcp():
    """`ockpt conformance --impl ockpt-torch-dcp`: every golden fixture of every release loads
    through dcp.load; the only failures are the documented NaN payloads of a widened dtype."""
    from ockpt.conformance import run

    result = run(["ockpt-torch-dcp"], fixtures=FIXTURES, groups=["fixtures"])
    passed = [r for r in result.results if r.status == "pass"]
    assert len(passed) >= 100
    assert not result.failures(documented=False), result.failures(documented=False)
    assert {r.case for r in result.failures()} <= {
        "0.12.8/dtype_bit_patterns",
        "0.12.8/dtype_bit_patterns_zarr3",
    }


@pytest.mark.slow  # the slow matrix: torchrun
def test_readme_torchrun_example():
    """The README's torchrun example runs as written: each of its 2 ranks holds its half of the
    rows of ``layer_0.kernel``, whose values Orbax saved."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## PyTorch\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    done = subprocess.run(
        ["bash", "-e", "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kernel = np.asarray(ockpt.load_pytree(COUNTED)["layer_0"]["kernel"])
    found = re.findall(r"rank (\d): rows \((\d+), (\d+)\), sum (-?\d+\.\d)", done.stdout)
    assert sorted(r for r, *_ in found) == ["0", "1"], done.stdout
    for rank, rows, cols, total in found:
        half = kernel[32 * int(rank) : 32 * (int(rank) + 1)]
        assert (int(rows), int(cols)) == half.shape
        assert abs(float(total) - float(half.sum(dtype=np.float64))) <= 0.06  # printed .1f


# ---------------------------------------------------------------------------------------------
# The reader's steps driven by hand in this process (mutmut sees these calls; the torchrun
# test above reads shards in children): read items of a part of a leaf, as DCP's planner makes
# for a shard, and a planner that records what it is handed.

from torch.distributed.checkpoint.metadata import MetadataIndex  # noqa: E402
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem  # noqa: E402

SHARDED = FIXTURES / "orbax-0.12.8/sharded/checkpoint"


def _item(fqn: str, offsets, lengths, base=(0, 0), kind=LoadItemType.TENSOR) -> ReadItem:  # type: ignore[no-untyped-def]
    """The read item of the region at `offsets` (within the declared chunk at `base`)."""
    return ReadItem(
        type=kind,
        dest_index=MetadataIndex(fqn),
        dest_offsets=torch.Size([0] * len(lengths)),
        storage_index=MetadataIndex(fqn, None if base is None else torch.Size(base)),
        storage_offsets=torch.Size(offsets),
        lengths=torch.Size(lengths),
    )


class _Planner:
    """Resolves each tensor item to a new tensor (`shape` unless given, of `dtype`); records
    the commits and the bytes it is handed."""

    def __init__(self, dtype=torch.float32, shape=None, requires_grad=False) -> None:  # type: ignore[no-untyped-def]
        self.dtype, self.shape, self.requires_grad = dtype, shape, requires_grad
        self.targets: list[torch.Tensor] = []
        self.committed: list[tuple[ReadItem, torch.Tensor]] = []
        self.loaded: dict[str, object] = {}

    def resolve_tensor(self, item: ReadItem) -> torch.Tensor:
        shape = item.lengths if self.shape is None else self.shape
        target = torch.full(shape, -1, dtype=self.dtype, requires_grad=self.requires_grad)
        self.targets.append(target)
        return target

    def commit_tensor(self, item: ReadItem, tensor: torch.Tensor) -> None:
        self.committed.append((item, tensor))

    def load_bytes(self, item: ReadItem, data) -> None:  # type: ignore[no-untyped-def]
        self.loaded[item.dest_index.fqn] = torch.load(data, weights_only=True)


def test_read_data_reads_the_region_each_item_asks_for():
    """Each item's region, in the leaf's coordinates (the declared chunk's offsets plus the
    item's), is copied into the tensor the planner resolves, which is committed."""
    whole = torch.from_numpy(ockpt.load_pytree(SHARDED)["xy"])
    reader = OrbaxReader(SHARDED)
    reader.read_metadata()
    items = [
        _item("xy", (2, 1), (3, 2)),
        _item("xy", (1, 0), (2, 4), base=(4, 0)),  # a chunk declared at row 4
        _item("xy", (5, 3), (3, 1), base=None),
        _item("yx", (0, 0), (2, 8)),
    ]
    planner = _Planner()
    assert reader.read_data(LoadPlan(items), planner).wait() is None
    yx = torch.from_numpy(ockpt.load_pytree(SHARDED)["yx"])
    want = [whole[2:5, 1:3], whole[5:7, 0:4], whole[5:8, 3:4], yx]
    assert [c[0] for c in planner.committed] == items
    for (_, got), target, expected in zip(planner.committed, planner.targets, want, strict=True):
        assert got is not None and torch.equal(got, expected)
        assert torch.equal(target, expected)  # filled in place


def test_read_data_casts_into_the_target_and_detaches_it():
    """A target of another dtype is filled by torch's cast; one that requires grad (a
    Parameter's slice) is filled through a detached view."""
    whole = torch.from_numpy(ockpt.load_pytree(SHARDED)["xy"])
    reader = OrbaxReader(SHARDED)
    planner = _Planner(dtype=torch.float64, requires_grad=True)
    reader.read_data(LoadPlan([_item("xy", (0, 0), (8, 4))]), planner)
    (target,) = planner.targets
    assert torch.equal(target.detach(), whole.double())
    state = {"xy": torch.nn.Parameter(torch.zeros(8, 4))}
    _load(state, OrbaxReader(SHARDED))
    assert torch.equal(state["xy"].detach(), whole)


def test_read_data_refuses_a_target_of_another_shape():
    reader = OrbaxReader(SHARDED)
    with pytest.raises(ValueError) as e:
        reader.read_data(LoadPlan([_item("xy", (0, 0), (2, 2))]), _Planner(shape=(2, 3)))
    assert str(e.value) == (
        f"{SHARDED}: leaf 'xy': the region read has shape (2, 2), the state dict's (2, 3)"
    )


def test_read_data_hands_strings_and_python_scalars_to_the_planner_as_torch_save_bytes():
    path = FIXTURES / "orbax-0.12.8/scalars_strings/checkpoint"
    reader = OrbaxReader(path)
    names = ["str", "int", "float_neg_zero", "bool_true", "nested.inner.s"]
    items = [_item(n, (), (), base=(), kind=LoadItemType.BYTE_IO) for n in names]
    planner = _Planner()
    reader.read_data(LoadPlan(items), planner)
    assert planner.loaded == {
        "str": "hello",
        "int": 42,
        "float_neg_zero": -0.0,
        "bool_true": True,
        "nested.inner.s": "deep",
    }
    assert [type(planner.loaded[n]) for n in names] == [str, int, float, bool, str]
    assert str(planner.loaded["float_neg_zero"]) == "-0.0" and not planner.committed


def test_metadata_names_the_checkpoint_and_this_load_and_sep_joins_names():
    path = FIXTURES / "orbax-0.12.8/nested/checkpoint"
    reader = OrbaxReader(path, sep="/")
    meta = reader.read_metadata()
    assert meta.storage_meta.checkpoint_id == os.fspath(path)
    assert meta.storage_meta.load_id == reader.load_id and len(reader.load_id) == 32
    assert meta.storage_data == {}
    assert "layers/0/w" in meta.state_dict_metadata and "layers.0.w" not in meta.state_dict_metadata
    plan = LoadPlan([])
    assert reader.prepare_local_plan(plan) is plan
    assert reader.prepare_global_plan([plan]) == [plan]


def test_close_reset_and_reopening():
    """close() lets the checkpoint go (it is reopened on the next read); reset() starts a new
    load (a new load id), on another checkpoint when given one."""
    reader = OrbaxReader(SHARDED)
    first = reader.load_id
    names = set(reader.read_metadata().state_dict_metadata)
    source = reader._source
    reader.close()
    assert reader._source is None and reader._leaves == {}
    assert set(reader.read_metadata().state_dict_metadata) == names
    assert reader._source is not source
    reader.reset()
    assert reader.path == SHARDED and reader.load_id != first and reader._source is None
    assert re.fullmatch("[0-9a-f]{32}", reader.load_id)  # a new load's id
    assert reader.read_metadata().storage_meta.load_id == reader.load_id
    nested = FIXTURES / "orbax-0.12.8/nested/checkpoint"
    reader.reset(nested)
    assert reader.checkpoint_id == nested
    reader.set_up_storage_reader(None, True)
    assert reader._source is not None and "layers.0.w" in reader._leaves
    assert "layers.0.w" in reader.read_metadata().state_dict_metadata
    reader.close()
    reader.close()  # closing twice is harmless


def test_step_and_item_choose_what_is_read():
    manager = FIXTURES / "orbax-0.12.8/manager/checkpoint"
    for step, first in ((0, 0), (None, 200)):  # the latest step without one
        state = {"w": torch.zeros(2, 3)}
        _load(state, OrbaxReader(manager, step=step, item="params"))
        want = ockpt.load_pytree(manager, step=step, item="params")["w"]
        assert state["w"].tolist() == want.tolist() and state["w"][0, 0] == first
    v1 = FIXTURES / "orbax-0.12.8/v1_checkpointables/checkpoint"
    state = {"counts": torch.zeros(3, dtype=torch.int64), "flag": None}
    _load(state, OrbaxReader(v1, item="aux"))
    assert state["counts"].tolist() == [0, 1, 2] and state["flag"] is True


def test_a_read_item_whose_index_has_fewer_dimensions_than_its_region_is_refused():
    reader = OrbaxReader(SHARDED)
    with pytest.raises(ValueError, match=r"zip\(\) argument 2 is longer than argument 1"):
        reader.read_data(LoadPlan([_item("xy", (0, 0), (2, 2), base=(1,))]), _Planner())
