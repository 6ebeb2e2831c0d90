"""A deep `ockpt.validate` on worker threads (`deep_checks.PARALLEL`): the report of one
thread, finding for finding and in order, on real Orbax checkpoints with corrupt, missing and
linked chunks; chunks really decoded on several threads at once; at most `_PER_WORKER` chunk
checks per worker out at once; and on an object store a progress total from the B+trees. Each
test is bounded in time (SIGALRM), so a worker that never returns fails instead of hanging the
suite."""

from __future__ import annotations

import importlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import zstandard

import ockpt
from tests.support import deadline

V = importlib.import_module("ockpt.validate")  # the module: `ockpt.validate` is the function
D = importlib.import_module("ockpt.deep_checks")
WORKERS = 4  # the pool the threading tests use, whatever the cores of the machine


@pytest.fixture(autouse=True)
def _time_limit():
    with deadline(120):
        yield


def _orbax_save(path: Path, *, use_ocdbt: bool) -> None:
    """Four 64 x 64 float32 arrays of 8 chunks each and one 128 x 64 of 16, as Orbax writes
    them with a chunk_byte_size of 2 KiB (zarr v2, zstd)."""
    ocp = pytest.importorskip("orbax.checkpoint")
    tree = {f"a{i}": np.arange(64 * 64, dtype=np.float32).reshape(64, 64) + i for i in range(4)}
    tree["big"] = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    save_args = {k: ocp.SaveArgs(chunk_byte_size=2048) for k in tree}
    ocp.PyTreeCheckpointer(use_ocdbt=use_ocdbt).save(
        path, args=ocp.args.PyTreeSave(tree, save_args=save_args)
    )


def _findings(path: Path, **kw) -> tuple[list[dict], dict]:
    report = ockpt.validate(path, deep=True, **kw)
    return [f.to_json() for f in report.findings], report.checked


def _assert_parallel_equals_sequential(path: Path, monkeypatch) -> list[dict]:
    """The report of one thread, then that of the pool: in tasks of one check each (the most
    interleaving), and of the default size; the one-thread findings."""
    monkeypatch.setattr(D, "PARALLEL", False)
    want = _findings(path)
    monkeypatch.setattr(D, "PARALLEL", True)
    for checks in (1, D._TASK_CHECKS):
        monkeypatch.setattr(D, "_TASK_CHECKS", checks)
        for _ in range(3):
            assert _findings(path) == want
    return want[0]


def _frame(nbytes: int) -> bytes:
    return zstandard.ZstdCompressor().compress(bytes(nbytes))


def test_per_leaf_zarr_corrupt_chunks_reported_as_one_thread_does(tmp_path, monkeypatch):
    """Orbax per-leaf zarr (use_ocdbt=False): a chunk file of garbage, a zstd frame of the
    wrong size, a truncated frame, a deleted chunk (ZARR-008: Orbax stores every chunk), a
    chunk file hard-linked to another (PATH-008: which of the two is refused follows the key
    order), and ten bad chunks of one array (eight reported)."""
    item = tmp_path / "perleaf"
    _orbax_save(item, use_ocdbt=False)
    (item / "a0" / "0.1").write_bytes(b"no zstd frame here")
    (item / "a0" / "1.0").write_bytes(_frame(100))
    frame = (item / "a1" / "2.1").read_bytes()
    (item / "a1" / "2.1").write_bytes(frame[: len(frame) // 2])
    (item / "a1" / "3.0").unlink()
    (item / "a3" / "0.1").unlink()
    os.link(item / "a3" / "0.0", item / "a3" / "0.1")
    for i in range(10):
        (item / "big" / f"{i // 2}.{i % 2}").write_bytes(b"\0" * (i + 1))
    found = _assert_parallel_equals_sequential(item, monkeypatch)
    files = [f["file"].removeprefix(str(item) + "/") for f in found]
    assert {"a0/0.1", "a0/1.0", "a1/2.1", "a3/0.1"} <= set(files), found
    assert {f["rule"] for f in found} >= {"ZARR-008", "PATH-008"}, found
    assert "a3/0.0" not in files
    assert sum(f.startswith("big/") for f in files) == V._MAX_PER_ARRAY


def _value_ref(item: Path, key: bytes):
    from ockpt.ocdbt import Database

    with Database(item) as db:
        return next(e.value for k, e in db.entries() if k == key)


def _overwrite(item: Path, key: bytes, data: bytes) -> None:
    """Write `data` over the start of the stored bytes of `key` in its data file."""
    ref = _value_ref(item, key)
    assert len(data) <= ref.length
    path = item / (ref.file_id.base_path + ref.file_id.relative_path).decode()
    with open(path, "r+b") as f:
        f.seek(ref.offset)
        f.write(data)


def _raw_frame(length: int) -> bytes:
    """A zstd frame of `length` bytes: one raw block of ``length - 12`` bytes, declared so."""
    n = length - 12
    header = b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + n.to_bytes(4, "little")
    return header + ((n << 3) | 1).to_bytes(3, "little") + bytes(n)


def test_ocdbt_corrupt_chunks_reported_as_one_thread_does(tmp_path, monkeypatch):
    """Orbax OCDBT, values out of line: in the data files a chunk whose frame lost its magic, a
    sound frame of the wrong size, a frame followed by bytes, ten bad chunks of one array
    (eight reported). Then array a1 rewritten inline without one chunk (ZARR-008: Orbax
    stores every chunk)."""
    from ockpt.ocdbt import Database
    from tests.support.ocdbt import rewrite_array

    item = tmp_path / "ocdbt"
    _orbax_save(item, use_ocdbt=True)
    _overwrite(item, b"a0/0.1", b"XXXX")
    _overwrite(item, b"a0/2.0", _raw_frame(_value_ref(item, b"a0/2.0").length))
    _overwrite(item, b"a2/3.1", _frame(16 * 32 * 4))  # a whole frame, then the old bytes
    for i in range(10):
        _overwrite(item, f"big/{i // 2}.{i % 2}".encode(), b"\0\0\0\0")
    found = _assert_parallel_equals_sequential(item, monkeypatch)
    where = [tuple((f["file"] or "").rsplit("/", 2)[-2:]) for f in found]
    assert {("a0", "0.1"), ("a0", "2.0"), ("a2", "3.1")} <= set(where), found
    assert sum(w[0] == "big" for w in where) == V._MAX_PER_ARRAY

    with Database(item) as db:
        values = {k[3:]: db.get(k) for k, _ in db.entries() if k.startswith(b"a1/")}
    zarray = json.loads(values.pop(b".zarray"))
    del values[b"1.0"]
    rewrite_array(item, b"a1/", zarray, values)
    found = _assert_parallel_equals_sequential(item, monkeypatch)
    assert "ZARR-008" in {f["rule"] for f in found}, found
    assert sum(w[0] == "big" for w in where) == V._MAX_PER_ARRAY


def _many_chunks(path: Path) -> int:
    """An item ockpt writes (Orbax's format) of 8 arrays of 16 chunks of 64 KiB; its chunks."""
    tree = {f"w{i}": np.full((256, 1024), i, dtype=np.float32) for i in range(8)}
    ockpt.save_pytree(path, tree, layout="item", zarr_version=2, chunk_byte_size=64 << 10)
    return 8 * 16


@pytest.fixture
def pool(monkeypatch):
    """A pool of `WORKERS` threads for the deep checks, whatever the machine's cores."""
    executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="ockpt-validate")
    monkeypatch.setattr(D, "_executor", lambda: executor)
    monkeypatch.setattr(D, "workers", lambda: WORKERS)
    monkeypatch.setattr(D, "PARALLEL", True)
    yield executor
    executor.shutdown()


def test_chunks_are_decoded_on_several_threads_at_once(tmp_path, monkeypatch, pool):
    """The first decodes wait for one another at a barrier: it lets them through only when
    two worker threads are decoding at the same time (a lone thread would break it)."""
    chunks = _many_chunks(tmp_path / "c")
    barrier = threading.Barrier(2, timeout=30)
    names: list[str] = []
    real = V.decodes_quickly

    def decode(*args):
        names.append(threading.current_thread().name)
        if len(names) <= 2:
            barrier.wait()
        return real(*args)

    monkeypatch.setattr(V, "decodes_quickly", decode)
    monkeypatch.setattr(D, "_TASK_CHECKS", 1)
    report = ockpt.validate(tmp_path / "c", deep=True)
    assert report.ok and report.checked["chunks"] == chunks, report.format_text()
    assert len(names) == chunks
    assert len(set(names)) >= 2 and all(n.startswith("ockpt-validate") for n in names), names


def test_chunk_checks_out_at_once_are_bounded(tmp_path, monkeypatch, pool):
    """A chunk's decoded bytes live from the start of its check until its result is taken:
    counted so, the checks alive at once never pass `_PER_WORKER` per worker, even while the
    first check is held back (the calling thread must wait rather than hand out more)."""
    chunks = _many_chunks(tmp_path / "c")
    monkeypatch.setattr(D, "_TASK_CHECKS", 1)
    lock = threading.Lock()
    alive = [0, 0]  # now, most
    release = threading.Event()
    check, take = V._ItemCheck.check_chunk, V._ItemCheck.take_chunk

    def counted_check(self, *args):
        with lock:
            alive[0] += 1
            alive[1] = max(alive)
            first = alive[1] == 1
        if first:
            release.wait(timeout=2)  # the others pile up behind it, if they may
        return check(self, *args)

    def counted_take(self, *args):
        with lock:
            alive[0] -= 1
        return take(self, *args)

    monkeypatch.setattr(V._ItemCheck, "check_chunk", counted_check)
    monkeypatch.setattr(V._ItemCheck, "take_chunk", counted_take)
    threading.Timer(0.5, release.set).start()
    report = ockpt.validate(tmp_path / "c", deep=True)
    release.set()
    assert report.ok and report.checked["chunks"] == chunks, report.format_text()
    assert alive[0] == 0
    assert 2 <= alive[1] <= D._PER_WORKER * WORKERS, alive


def test_an_object_store_progress_total_comes_from_the_btree(tmp_path):
    """On a store whose listing has no sizes (a tensorstore memory kvstore), the total is the
    bytes of the database's values, known before the first call, and reached at the end."""
    from ockpt.ocdbt import Database
    from ockpt.store.url import UrlStore

    store = UrlStore.from_url("memory://bucket/item")
    tree = {"a": np.arange(50_000, dtype=np.float32), "b": np.ones((99, 7))}
    ockpt.save_pytree(store, tree, layout="item")
    with Database(store) as db:
        stored = sum(len(value) for _, value in db.items())  # every value read
    seen: list[tuple[int, int, str]] = []
    report = ockpt.validate(store, deep=True, progress=lambda *a: seen.append(a))
    assert report.ok, report.format_text()
    assert seen and {t for _, t, _ in seen} == {stored}
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
    assert seen[-1] == (stored, stored, "done")
    assert any(w == "chunks" and 0 < d < stored for d, _, w in seen)
