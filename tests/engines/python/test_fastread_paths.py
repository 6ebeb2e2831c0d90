"""`fastread.read_regions` against the python engine's own chunk-by-chunk decoder
(`StoredArray.read_into`, through `zarr.read_region`), on real items: every path of the fast
reader (small arrays in the calling thread, the pool, one whole zstd chunk, raw chunks read
straight into their outputs, large chunks streamed whole or in slabs, large shards read by inner
chunk, sparse grids followed by their stored chunks, absent chunks as the fill value or
LOAD-041) gives the decoder's bytes, whatever the requests' boxes, dtypes and grouping.
Needs neither tensorstore nor jax: the tensorstore comparisons are in test_fastread.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt import dtypes
from ockpt.engines import python as pb
from ockpt.engines.contract import ReadRequest
from ockpt.engines.python import fastread
from ockpt.errors import MissingDataError
from tests.support import FIXTURES
from tests.support.errors import assert_error, raised


def _tree() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "big": rng.standard_normal((96, 80)).astype(np.float32),  # 30 KiB
        "ints": rng.integers(-1000, 1000, (40, 6, 5)).astype(np.int32),
        "vec": rng.standard_normal(3000),  # float64
        "small": np.arange(7, dtype=np.int16),
        "zeros": np.zeros((64, 64), np.float32),  # compresses
    }


OPTIONS = {
    "ocdbt-zarr2-zstd": dict(zarr_version=2),
    "ocdbt-zarr3-zstd": dict(zarr_version=3),
    "ocdbt-zarr2-raw": dict(zarr_version=2, compression=None),
    "files-zarr2-raw": dict(zarr_version=2, compression=None, use_ocdbt=False),
    "files-zarr3-zstd": dict(zarr_version=3, use_ocdbt=False),
}


@pytest.fixture(scope="module", params=sorted(OPTIONS))
def saved(request, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fast") / "item"
    ockpt.save_pytree(path, _tree(), layout="item", chunk_byte_size=2048, **OPTIONS[request.param])
    return path


#: The fast reader's thresholds made small, so the tree's arrays take each path.
SMALL = {
    "pool": dict(INLINE_BYTES=0),
    "stream": dict(INLINE_BYTES=0, STREAM_BYTES=256, SLAB_BYTES=64, _READ_SIZE=100),
    "direct": dict(DIRECT_BYTES=64, RUN_BYTES=8, ONE_SHOT_BYTES=0),
    "plan": dict(_PLAN_UNITS=2),
}


def _want(array, box, dtype=None) -> np.ndarray:
    out = np.empty(tuple(b - a for a, b in box), array.dtype)
    array.read_into(out, box)
    return out if dtype is None else dtypes.astype(out, np.dtype(dtype))


def _boxes(shape, seed: int, n: int = 3) -> list[tuple[tuple[int, int], ...]]:
    rng = np.random.default_rng(seed)
    out = [tuple((0, d) for d in shape)]
    for _ in range(n):
        box = []
        for d in shape:
            a = int(rng.integers(0, d))
            box.append((a, int(rng.integers(a + 1, d + 1))))
        out.append(tuple(box))
    return out


def _check(store: pb.ArrayStore, names, *, dtype=None, max_in_flight: int = 3) -> int:
    """Read several boxes of each array (together, in one call) and compare each with the
    decoder's; the number of requests."""
    requests = []
    for i, name in enumerate(names):
        array = store.open(name)
        for box in _boxes(array.shape, i):
            requests.append(ReadRequest(array, box, dtype, (name, box)))
    got = list(fastread.read_regions(requests, max_in_flight=max_in_flight))
    assert [r.tag for r, _ in got] == [r.tag for r in requests]
    for request, data in got:
        want = _want(request.array, request.box, dtype)
        assert data.dtype == want.dtype and data.shape == want.shape, request.tag
        assert data.tobytes() == want.tobytes(), request.tag
        assert data.flags.writeable and data.flags.c_contiguous
    return len(got)


@pytest.mark.parametrize("small", [None, *sorted(SMALL)])
def test_fast_reads_are_the_decoders(saved, monkeypatch, small):
    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    store = pb.ArrayStore(saved)
    names = sorted(_tree())
    try:
        assert _check(store, names) == 4 * len(names)
        _check(store, ["big", "vec"], dtype=np.float64, max_in_flight=1)
        _check(store, ["ints"], dtype=np.float32)
        for name in names:  # each array alone, read whole: one request
            _check(store, [name], max_in_flight=1)
    finally:
        store.close()


@pytest.mark.parametrize(
    "case",
    [
        "ockpt-0.1.0/chunk_byte_size/checkpoint/state",
        "orbax-0.12.8/zarr3/checkpoint",
        "orbax-0.12.8/chunk_byte_size/checkpoint",
    ],
)
@pytest.mark.parametrize("small", [None, "pool", "stream"])
def test_fast_reads_of_shards_of_several_inner_chunks(monkeypatch, case, small):
    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    store = pb.ArrayStore(FIXTURES / case)
    try:
        names = [n for n in pb.key_listing(store.list_keys())["params"] if store.open(n).shape]
        assert names
        _check(store, names)
    finally:
        store.close()


def _missing_chunk_copy(tmp_path: Path) -> tuple[Path, str]:
    item = tmp_path / "item"
    tree = {"x": np.arange(4000, dtype=np.float32).reshape(40, 100) + 1}
    ockpt.save_pytree(
        item, tree, layout="item", chunk_byte_size=2000, use_ocdbt=False, zarr_version=2
    )  # noqa: E501
    os.unlink(item / "x" / "0.1")  # chunks of (20, 25): rows 0-19, columns 25-49
    return item, "x"


@pytest.mark.parametrize("small", [None, "pool", "stream", "plan"])
def test_absent_chunks_are_the_fill_value_or_load_041(tmp_path, monkeypatch, small):
    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    item, name = _missing_chunk_copy(tmp_path)
    store = pb.ArrayStore(item)
    array = store.open(name)
    full = tuple((0, n) for n in array.shape)
    _check(store, [name])
    ((_, data),) = fastread.read_regions([ReadRequest(array, full)], max_in_flight=2)
    assert not data[:20, 25:50].any() and data[20:].all() and data[:, :25].all()
    strict = pb.ArrayStore(item, missing_chunks_are_errors=True).open(name)
    for box in (full, ((6, 7), (0, 100))):
        err = raised(
            MissingDataError,
            list,
            fastread.read_regions([ReadRequest(strict, box)], max_in_flight=2),
        )  # noqa: E501
        assert_error(err, rule="LOAD-041", file=f"{item}/x/0.1")


def test_a_sparse_grid_followed_by_its_stored_chunks(tmp_path, monkeypatch):
    """More chunks requested than `_PLAN_UNITS`, fewer stored: the reader follows the chunks
    stored and sets the rest to the fill value, for requests read together and cast."""
    monkeypatch.setattr(fastread, "_PLAN_UNITS", 4)
    item, name = _missing_chunk_copy(tmp_path)
    for chunk in ("1.0", "1.1", "1.2", "1.3"):
        os.unlink(item / name / chunk)
    store = pb.ArrayStore(item)
    array = store.open(name)
    assert fastread.follows_stored_chunks(array.metadata, ((0, 40), (0, 100)))
    assert not fastread.follows_stored_chunks(array.metadata, ((0, 20), (0, 100)))
    _check(store, [name])
    _check(store, [name], dtype=np.float64)
    strict = pb.ArrayStore(item, missing_chunks_are_errors=True).open(name)
    err = raised(
        MissingDataError,
        list,
        fastread.read_regions([ReadRequest(strict, ((0, 40), (0, 100)))], max_in_flight=2),
    )  # noqa: E501
    assert_error(err, rule="LOAD-041", file=f"{item}/x/0.1")


def test_a_copy_of_a_fixture_read_fast_equals_the_decoder(tmp_path):
    """Every array of real Orbax items (OCDBT, per-leaf zarr, zarr v3) read fast."""
    for case in ("orbax-0.12.8/sharded", "orbax-0.12.8/no_ocdbt", "orbax-0.4.8/numpy_dtypes"):
        item = tmp_path / case.replace("/", "_")
        shutil.copytree(FIXTURES / case / "checkpoint", item)
        store = pb.ArrayStore(item)
        try:
            names = [
                n for n in pb.key_listing(store.list_keys())["params"] if all(store.open(n).shape)
            ]  # noqa: E501
            _check(store, names)
        finally:
            store.close()
