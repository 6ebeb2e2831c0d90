"""Sixteen JAX processes (jax.distributed on localhost, one CPU device each) save with real
Orbax 0.12.8 (`benchmarks/orbax_multiprocess.py --both`), zstd-compressed and raw; ockpt reads,
validates and describes the bytes they wrote: 16 per-process OCDBT databases merged by a root
database, each leaf sharded 16 ways, so stored as 16 chunks, chunk i written by process i.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")
pytest.importorskip("jax")

import ockpt  # noqa: E402
from ockpt.ocdbt.format import IndirectDataReference  # noqa: E402
from ockpt.ocdbt.tree import Database  # noqa: E402
from tests.support.errors import assert_error  # noqa: E402

pytestmark = pytest.mark.slow  # the slow matrix: 16 JAX processes

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 16
LEAVES = 3
GIB = 4 / 1024  # 4 MiB in all: leaves of (336, 1024) float32, a (21, 1024) chunk per process
TIMEOUT_S = 300
VARIANTS = ("zstd", "raw")


def _writer() -> ModuleType:
    """benchmarks/orbax_multiprocess.py, imported from its file (benchmarks is no package)."""
    spec = importlib.util.spec_from_file_location(
        "orbax_multiprocess", ROOT / "benchmarks" / "orbax_multiprocess.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mp = _writer()
SHAPE = mp.leaf_shape(GIB, LEAVES, PROCESSES)
ROWS = SHAPE[0] // PROCESSES  # rows of one process's shard, and of one chunk
NAMES = [mp.leaf_name(leaf) for leaf in range(LEAVES)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both variants, saved one after the other by the same 16 processes (one start-up); the
    writer's report is checked."""
    out = tmp_path_factory.mktemp("mp16") / "both"
    report = mp.write(
        out, processes=PROCESSES, gib=GIB, leaves=LEAVES, compression="both", timeout=TIMEOUT_S
    )
    assert [r["process"] for r in report["per_process"]] == list(range(PROCESSES))
    assert report["leaves"] == {name: list(SHAPE) for name in NAMES}
    for r in report["per_process"]:
        assert r["peak_rss"] > 0 and r["seconds"]["save_zstd"] > 0 and r["seconds"]["save_raw"] > 0
    assert report["checkpoints"] == {v: str(out / v) for v in VARIANTS}
    return {v: out / v for v in VARIANTS}


def test_expected_values_follow_the_global_index() -> None:
    """`expected` of a region is the region of the whole leaf, and leaves differ."""
    whole = mp.expected(1, SHAPE)
    assert whole.dtype == np.float32 and whole.shape == SHAPE
    assert np.array_equal(mp.expected(1, SHAPE, (slice(5, 40), slice(7, 9))), whole[5:40, 7:9])
    assert not np.array_equal(mp.expected(0, SHAPE), whole)
    assert float(whole.max()) < 2**24 and len(np.unique(whole[:2])) > 2000


@pytest.mark.parametrize("variant", VARIANTS)
def test_layout(saved: dict[str, Path], variant: str) -> None:
    """One OCDBT database and one `array_metadatas` file per process, plus the root database
    (manifest and its own `d/`, which holds the merged B+tree nodes)."""
    item = saved[variant]
    per_process = [f"process_{p}" for p in range(PROCESSES)]
    assert sorted(os.listdir(item)) == sorted(
        [
            "_CHECKPOINT_METADATA",
            "_METADATA",
            "_sharding",
            "array_metadatas",
            "commit_success.txt",
            "d",
            "manifest.ocdbt",
            *[f"ocdbt.{p}" for p in per_process],
        ]
    )
    assert sorted(os.listdir(item / "array_metadatas")) == sorted(per_process)
    for p in per_process:
        assert sorted(os.listdir(item / f"ocdbt.{p}")) == ["d", "manifest.ocdbt"]
        assert os.listdir(item / f"ocdbt.{p}" / "d")
        written = json.loads((item / "array_metadatas" / p).read_text())["array_metadatas"]
        assert [a["array_metadata"]["param_name"] for a in written] == NAMES
        assert all(a["array_metadata"]["write_shape"] == [ROWS, SHAPE[1]] for a in written)
    assert os.listdir(item / "d")  # the root database's own nodes


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunk_i_is_written_by_process_i(saved: dict[str, Path], variant: str) -> None:
    """The root database lists 16 chunks per leaf; chunk i lies in a data file of
    `ocdbt.process_i/d/`, and process i's own database holds exactly those chunks (and, for
    process 0 only, the zarr metadata)."""
    item = saved[variant]
    with Database(item) as root:
        entries = dict(root.entries())
        for name in NAMES:
            assert sorted(k for k in entries if k.startswith(f"{name}/".encode())) == sorted(
                [f"{name}/.zarray".encode()] + [f"{name}/{i}.0".encode() for i in range(16)]
            )
            for i in range(PROCESSES):
                ref = entries[f"{name}/{i}.0".encode()].value
                assert isinstance(ref, IndirectDataReference)
                assert ref.file_id.path.startswith(f"ocdbt.process_{i}/d/".encode()), ref
            zarray = json.loads(root.read_value(entries[f"{name}/.zarray".encode()]))
            assert zarray["chunks"] == [ROWS, SHAPE[1]] and zarray["dtype"] == "<f4"
            compressor = None if variant == "raw" else {"id": "zstd", "level": 1}
            assert zarray["compressor"] == compressor
    for i in range(PROCESSES):
        with Database(item / f"ocdbt.process_{i}") as own:
            keys = sorted(k.decode() for k in own.list())
        chunks = [f"{name}/{i}.0" for name in NAMES]
        assert keys == sorted(chunks + ([f"{name}/.zarray" for name in NAMES] if i == 0 else []))


@pytest.mark.parametrize("variant", VARIANTS)
def test_validate_deep(saved: dict[str, Path], variant: str) -> None:
    """Every document, node and chunk of the 17 databases checks out."""
    report = ockpt.validate(saved[variant], deep=True)
    assert report.ok and not report.findings, report.format_text()
    assert report.checked["arrays"] == LEAVES
    assert report.checked["chunks"] == LEAVES * PROCESSES


@pytest.mark.parametrize("backend", ["python", "tensorstore"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_load_pytree(saved: dict[str, Path], variant: str, backend: str) -> None:
    """The whole tree, on both engines, equals the values the processes computed."""
    tree = ockpt.load_pytree(saved[variant], backend=backend)
    assert sorted(tree) == NAMES
    for leaf, name in enumerate(NAMES):
        assert tree[name].dtype == np.float32
        assert np.array_equal(tree[name], mp.expected(leaf, SHAPE)), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_partial_load_and_slices(saved: dict[str, Path], variant: str) -> None:
    """One leaf alone, and slices across the processes' chunk boundaries, read right."""
    path = saved[variant]
    one = ockpt.load_pytree(path, {NAMES[1]: np.empty(SHAPE, np.float32)}, partial=True)
    assert list(one) == [NAMES[1]] and np.array_equal(one[NAMES[1]], mp.expected(1, SHAPE))
    regions = [
        (slice(ROWS - 1, 5 * ROWS + 3), slice(None)),  # six chunks, cut at both ends
        (slice(7 * ROWS, 8 * ROWS), slice(100, 300)),  # exactly chunk 7, some columns
        (slice(SHAPE[0] - 2, SHAPE[0]), slice(SHAPE[1] - 5, SHAPE[1])),  # the last corner
    ]
    with ockpt.open(path) as ckpt:
        for leaf, name in enumerate(NAMES):
            for region in regions:
                assert np.array_equal(ckpt[name][region], mp.expected(leaf, SHAPE, region))
        assert np.array_equal(ckpt[NAMES[2]][3 * ROWS + 4], mp.expected(2, SHAPE)[3 * ROWS + 4])


def test_mmap_assembles_the_chunks_of_16_processes(saved: dict[str, Path]) -> None:
    """LOAD-034: a raw leaf in 16 chunks of whole rows, each chunk in its writer's own data
    file, is mapped chunk after chunk into one read-only view where every chunk starts on a
    page of its file and holds whole pages (Orbax's offsets decide); otherwise it is read and
    `mmap="require"` names the offset. The zstd variant is always read."""
    path = saved["raw"]
    on_pages: dict[str, bool] = dict.fromkeys(NAMES, (ROWS * SHAPE[1] * 4) % 4096 == 0)
    with Database(path) as root:
        for key, entry in root.entries():
            if isinstance(entry.value, IndirectDataReference):
                name = key.split(b"/")[0].decode()
                on_pages[name] = on_pages[name] and entry.value.offset % 4096 == 0
    tree = ockpt.load_pytree(path, mmap=True)
    for leaf, name in enumerate(NAMES):
        assert np.array_equal(tree[name], mp.expected(leaf, SHAPE)), name
        assert tree[name].flags.writeable is not on_pages[name], name
    if all(not tree[name].flags.writeable for name in NAMES):
        ockpt.load_pytree(path, mmap="require")
    else:
        with pytest.raises(ockpt.TargetError) as refused:
            ockpt.load_pytree(path, mmap="require")
        assert_error(refused, rule="LOAD-034")
        assert "not on a page" in refused.value.message
        assert refused.value.leaf in NAMES
    with pytest.raises(ockpt.TargetError) as refused:
        ockpt.load_pytree(saved["zstd"], mmap="require")
    assert_error(refused, rule="LOAD-034")
    assert "stored encoded (zstd)" in refused.value.message


@pytest.mark.parametrize("variant", VARIANTS)
def test_pytree_metadata(saved: dict[str, Path], variant: str) -> None:
    """Shapes, dtypes, chunking and the 16-device mesh, from the documents alone."""
    meta = ockpt.pytree_metadata(saved[variant])
    assert sorted(meta) == NAMES
    for name in NAMES:
        leaf = meta[name]
        assert (leaf.shape, leaf.dtype, leaf.value_type) == (SHAPE, np.float32, "jax.Array")
        assert leaf.chunk_shape == leaf.write_shape == (ROWS, SHAPE[1])
        assert leaf.sharding.mesh_shape == (PROCESSES,)
        assert leaf.sharding.partition_spec == ("p",)
        assert len(set(leaf.sharding.device_ids)) == PROCESSES


def test_write_source_holds_leaf_0s_values(tmp_path: Path) -> None:
    """The file `--same-values` maps: leaf 0's values, raw float32, written in row blocks."""
    source = tmp_path / "source.f32"
    mp.write_source(str(source), SHAPE, rows=50)  # blocks that do not divide the rows
    assert np.array_equal(
        np.fromfile(source, dtype=np.float32).reshape(SHAPE), mp.expected(0, SHAPE)
    )


def test_same_values_save_from_mapped_shards(tmp_path: Path) -> None:
    """`--same-values` (how scale.py fits 16 GiB from 16 processes in memory): Orbax saves
    shards that are views of one mapped file, and every leaf reads back as leaf 0's values."""
    out = tmp_path / "same"
    report = mp.write(out, processes=2, gib=GIB, leaves=2, timeout=TIMEOUT_S, same_values=True)
    assert report["same_values"] is True
    shape = mp.leaf_shape(GIB, 2, 2)
    assert ockpt.validate(out, deep=True).ok
    tree = ockpt.load_pytree(out)
    assert sorted(tree) == [mp.leaf_name(0), mp.leaf_name(1)]
    for value in tree.values():
        assert np.array_equal(value, mp.expected(0, shape))
