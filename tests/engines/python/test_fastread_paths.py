"""`fastread.read_regions` against the python engine's own chunk-by-chunk decoder
(`StoredArray.read_into`, through `zarr.read_region`), on real items: every path of the fast
reader (small arrays in the calling thread, the pool, one whole zstd chunk, raw chunks read
straight into their outputs, large chunks streamed whole or in slabs, large shards read by inner
chunk, sparse grids followed by their stored chunks, absent chunks as the fill value or
LOAD-041) gives the decoder's bytes, whatever the requests' boxes, dtypes and grouping.
Needs neither tensorstore nor jax: the tensorstore comparisons are in test_fastread.py."""

from __future__ import annotations

import math
import os
import shutil
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import zstandard

import ockpt
from ockpt import dtypes
from ockpt.engines import python as pb
from ockpt.engines.contract import ReadRequest
from ockpt.engines.python import fastread
from ockpt.errors import FormatError, MissingDataError
from tests.support import FIXTURES, random_boxes
from tests.support.errors import assert_error, error_fields, raised


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


def _save_x(item, x, **options) -> None:
    """Save `x` as the one leaf ``x`` of a per-leaf zarr item (no OCDBT: each chunk a file)."""
    ockpt.save_pytree(item, {"x": x}, layout="item", use_ocdbt=False, **options)


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


def _check(store: pb.ArrayStore, names, *, dtype=None, max_in_flight: int = 3) -> int:
    """Read several boxes of each array (together, in one call) and compare each with the
    decoder's; the number of requests."""
    requests = []
    for i, name in enumerate(names):
        array = store.open(name)
        for box in random_boxes(array.shape, i, 3):
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
    )
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
        )
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
    chunks = _spy(monkeypatch, "_read_chunk", lambda group, index, dests: index)
    ((_, data),) = fastread.read_regions([ReadRequest(array, ((0, 40), (0, 100)))], max_in_flight=2)
    assert sorted(chunks) == [(0, 0), (0, 2), (0, 3)]  # the 3 stored of the 8
    assert np.array_equal(data, _want(array, ((0, 40), (0, 100))))
    _check(store, [name])
    _check(store, [name], dtype=np.float64)
    strict = pb.ArrayStore(item, missing_chunks_are_errors=True).open(name)
    err = raised(
        MissingDataError,
        list,
        fastread.read_regions([ReadRequest(strict, ((0, 40), (0, 100)))], max_in_flight=2),
    )
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
            ]
            _check(store, names)
        finally:
            store.close()


# ---------------------------------------------------------------------------------------------
# the grid arithmetic the plans are made of


def test_count_of_units_a_box_touches():
    assert fastread._count(((0, 10), (3, 7)), (4, 4)) == 3 * 2
    assert fastread._count(((5, 6),), (4,)) == 1
    assert fastread._count(((4, 8),), (4,)) == 1
    assert fastread._count(((3, 9),), (4,)) == 3  # units 0, 1 and 2
    assert fastread._count(((3, 3),), (4,)) == 0
    assert fastread._count(((2, 9), (5, 5)), (4, 4)) == 0
    assert fastread._count(((6, 2),), (4,)) == 0


def test_follows_stored_chunks_above_the_plan_bound(monkeypatch):
    class Meta:
        chunk_shape = (2, 3)

    monkeypatch.setattr(fastread, "_PLAN_UNITS", 6)
    assert not fastread.follows_stored_chunks(Meta, [(0, 6), (0, 6)])  # 3 * 2 = 6 units
    assert fastread.follows_stored_chunks(Meta, [(0, 6), (0, 7)])  # 3 * 3
    assert not fastread.follows_stored_chunks(Meta, [(0, 0), (0, 100)])


def test_dest_and_units_of_a_box():
    box = ((3, 9), (1, 2))
    assert fastread._dest(0, box, (0, 0), (4, 4)) == (
        0,
        ((3, 4), (1, 2)),
        (slice(0, 1), slice(0, 1)),
    )
    assert fastread._dest(2, box, (1, 0), (4, 4)) == (
        2,
        ((4, 8), (1, 2)),
        (slice(1, 5), slice(0, 1)),
    )
    assert fastread._dest(0, ((0, 4),), (1,), (4,)) is None  # touches the unit's edge only
    assert fastread._dest(0, box, (0, 1), (4, 4)) is None
    assert [i for i, _ in fastread._units(1, box, (4, 4))] == [(0, 0), (1, 0), (2, 0)]
    assert [d for _, d in fastread._units(1, box, (4, 4))][2] == (
        1,
        ((8, 9), (1, 2)),
        (slice(5, 6), slice(0, 1)),
    )
    assert list(fastread._units(0, ((3, 3),), (4,))) == []
    assert list(fastread._units(0, ((5, 2), (0, 4)), (4, 4))) == []
    assert fastread._chunk_of((5, 3), (2, 4), (4, 8)) == (2, 1)


# ---------------------------------------------------------------------------------------------
# a large shard of several inner chunks, read by inner chunk from its file


def _shard_of_inner_chunks(tmp_path: Path, monkeypatch) -> tuple[Path, np.ndarray, int]:
    """A per-leaf zarr v3 leaf of (64, 32) float32 stored as one shard of inner chunks of
    (16, 16), zstd (ockpt's writer makes a shard one chunk; told otherwise as in
    test_fastread.py), and the number of inner chunks; the fast reader's thresholds made so
    that the shard is read by inner chunk."""
    from ockpt import _zarr_write

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) + 1
    with monkeypatch.context() as m:
        m.setattr(_zarr_write, "shard_shape_for", lambda write_shape, *_: tuple(write_shape))
        _save_x(tmp_path / "item", x, zarr_version=3, chunk_byte_size=1024)
    array = pb.ArrayStore(tmp_path / "item").open("x")
    assert array.metadata.chunk_shape == (64, 32) and array.chunk_shape == (16, 16)
    for name, value in SMALL["stream"].items():
        monkeypatch.setattr(fastread, name, value)
    return tmp_path / "item", x, 8


def _read(item: Path, *, strict: bool = False, dtype=None) -> np.ndarray:
    array = pb.ArrayStore(item, missing_chunks_are_errors=strict).open("x")
    full = tuple((0, n) for n in array.shape)
    ((_, data),) = fastread.read_regions([ReadRequest(array, full, dtype)], max_in_flight=2)
    return data


def test_a_large_shard_read_by_inner_chunk(tmp_path, monkeypatch):
    item, x, count = _shard_of_inner_chunks(tmp_path, monkeypatch)
    inner = _spy(monkeypatch, "_read_inner_chunk", lambda group, index, src, dests, _: dests)
    fetched = _spy(monkeypatch, "_fetch", lambda array, key: key)
    assert np.array_equal(_read(item), x)
    assert len(inner) == count and fetched == []  # the shard is never read whole
    store = pb.ArrayStore(item)
    _check(store, ["x"])
    _check(store, ["x"], dtype=np.float64)


def test_a_large_shard_whose_index_is_damaged(tmp_path, monkeypatch):
    item, _, _ = _shard_of_inner_chunks(tmp_path, monkeypatch)
    shard = item / "x" / "c" / "0" / "0"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    err = raised(FormatError, _read, item)
    assert_error(err, rule="ZARR-016", file=f"{item}/x/c/0/0", pointer="shard index")


def test_a_large_shard_with_an_inner_chunk_absent_or_damaged(tmp_path, monkeypatch):
    import struct

    from ockpt.zarr.codecs import Crc32cCodec

    item, x, count = _shard_of_inner_chunks(tmp_path, monkeypatch)
    shard = item / "x" / "c" / "0" / "0"
    data = shard.read_bytes()
    size = 16 * count + 4
    pairs = list(struct.unpack(f"<{2 * count}Q", data[-size:-4]))
    absent = list(pairs)
    # inner chunk [1, 0] of the 4 x 2 grid (rows 16-31, columns 0-15) absent
    absent[4:6] = [(1 << 64) - 1] * 2
    shard.write_bytes(data[:-size] + Crc32cCodec().encode(struct.pack(f"<{2 * count}Q", *absent)))
    got = _read(item)
    assert not got[16:32, :16].any()
    got[16:32, :16] = x[16:32, :16]
    assert np.array_equal(got, x)
    err = raised(MissingDataError, _read, item, strict=True)
    assert error_fields(err) == {
        "rule": "LOAD-041",
        "file": f"{item}/x/c/0/0",
        "message": "inner chunk [1, 0] of the shard is missing and the checkpoint stores every "
        "chunk (store_array_data_equal_to_fill_value; ZARR-008)",
        "pointer": None,
    }
    offset, nbytes = pairs[4], pairs[5]
    damaged = bytearray(data)
    damaged[offset : offset + nbytes] = b"\0" * nbytes  # no zstd frame
    shard.write_bytes(bytes(damaged))
    err = raised(FormatError, _read, item)
    assert err.file == f"{item}/x/c/0/0" and err.pointer == "inner chunk [1, 0]"


@pytest.mark.parametrize("compression", ["zstd", None])
@pytest.mark.parametrize("damage", ["trailing", "truncated", "flipped", "magic", "resized"])
def test_a_streamed_chunk_that_is_damaged_is_refused_naming_it(
    tmp_path, monkeypatch, compression, damage
):
    """A chunk above `STREAM_BYTES` that is not exactly one frame (or raw bytes) of its size is
    read again by the checked path, which names the fault, whether a region takes the chunk
    whole (streamed straight into it) or in part (in slabs)."""
    x = np.arange(40 * 100, dtype=np.float32).reshape(40, 100)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=2000, zarr_version=2, compression=compression)
    for name, value in SMALL["stream"].items():
        monkeypatch.setattr(fastread, name, value)
    chunk = item / "x" / "1.1"  # rows 20-39, columns 25-49
    data = chunk.read_bytes()
    if damage in ("flipped", "magic", "resized") and compression is None:
        pytest.skip("raw bytes have no check: a flipped byte is a value")
    changed = {
        "trailing": data + b"\0",
        "truncated": data[:-3],
        "flipped": data[:20] + bytes([data[20] ^ 0xFF]) + data[21:],
        "magic": bytes([data[0] ^ 0xFF]) + data[1:],  # no zstd frame header
        "resized": zstandard.compress(b"\0" * 1000),  # a frame of 1000 bytes
    }[damage]
    chunk.write_bytes(changed)
    array = pb.ArrayStore(item).open("x")
    for box in (((20, 40), (25, 50)), ((22, 30), (30, 40)), ((0, 40), (0, 100))):
        with pytest.raises(FormatError) as info:
            list(fastread.read_regions([ReadRequest(array, box)], max_in_flight=2))
        assert info.value.file == f"{item}/x/1.1", (box, info.value)


# ---------------------------------------------------------------------------------------------
# small shards, read whole from their bytes


def _small_shard(tmp_path: Path, monkeypatch, several: bool, small: str | None):
    from ockpt import _zarr_write

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) + 1
    with monkeypatch.context() as m:
        if several:  # inner chunks of (16, 16); else one inner chunk, as ockpt writes
            m.setattr(_zarr_write, "shard_shape_for", lambda write_shape, *_: tuple(write_shape))
        _save_x(tmp_path / "item", x, zarr_version=3, chunk_byte_size=1024 if several else 1 << 20)
    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    shard = tmp_path / "item" / "x" / "c" / "0" / "0"
    return tmp_path / "item", x, shard, 8 if several else 1


@pytest.mark.parametrize("small", [None, "pool"])
@pytest.mark.parametrize("several", [False, True], ids=["one", "several"])
def test_a_small_shard_damaged_or_with_an_inner_chunk_absent(tmp_path, monkeypatch, several, small):
    import struct

    from ockpt.zarr.codecs import Crc32cCodec

    item, x, shard, count = _small_shard(tmp_path, monkeypatch, several, small)
    assert np.array_equal(_read(item), x)
    _check(pb.ArrayStore(item), ["x"], dtype=np.float64)
    data = shard.read_bytes()
    where = f"{item}/x/c/0/0"
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert_error(
        raised(FormatError, _read, item), rule="ZARR-016", file=where, pointer="shard index"
    )
    size = 16 * count + 4
    pairs = list(struct.unpack(f"<{2 * count}Q", data[-size:-4]))
    absent = [(1 << 64) - 1] * 2 + pairs[2:]  # inner chunk [0, 0]
    shard.write_bytes(data[:-size] + Crc32cCodec().encode(struct.pack(f"<{2 * count}Q", *absent)))
    got = _read(item)
    rows, cols = (16, 16) if several else (64, 32)
    assert not got[:rows, :cols].any()
    got[:rows, :cols] = x[:rows, :cols]
    assert np.array_equal(got, x)
    for dtype in (None, np.float64):  # read into the output, or cast through a buffer
        err = raised(MissingDataError, _read, item, strict=True, dtype=dtype)
        assert err.rule == "LOAD-041" and err.file == where
        assert err.message.startswith("inner chunk [0, 0] of the shard is missing")
    assert not _read(item, dtype=np.float64)[:rows, :cols].any()
    offset, nbytes = pairs[0], pairs[1]
    damaged = bytearray(data)
    damaged[offset : offset + nbytes] = b"\xff" * nbytes  # no zstd frame
    shard.write_bytes(bytes(damaged))
    for dtype in (None, np.float64):
        err = raised(FormatError, _read, item, dtype=dtype)
        assert err.file == where and err.pointer == "inner chunk [0, 0]", err


def test_a_large_shard_of_small_inner_chunks(tmp_path, monkeypatch):
    """A shard above `STREAM_BYTES` whose inner chunks are not: each inner chunk's bytes are
    read into memory and decoded."""
    item, x, count = _shard_of_inner_chunks(tmp_path, monkeypatch)
    monkeypatch.setattr(fastread, "STREAM_BYTES", 2048)  # shard 8 KiB, inner chunks 1 KiB
    inner = _spy(monkeypatch, "_read_inner_chunk", lambda group, index, src, dests, _: dests)
    fetched = _spy(monkeypatch, "_fetch", lambda array, key: key)
    assert np.array_equal(_read(item), x)
    assert len(inner) == count and fetched == []
    _check(pb.ArrayStore(item), ["x"])
    inner.clear()
    monkeypatch.setattr(fastread, "STREAM_BYTES", 8192)  # the shard's size: read whole
    assert np.array_equal(_read(item), x)
    assert inner == [] and fetched == ["x/c/0/0"]


def test_raw_chunks_read_straight_into_rows_of_a_wider_output(tmp_path, monkeypatch):
    """Raw chunks of (16, 16) of a (64, 64) leaf: each chunk's rows are runs of 64 bytes of
    a request's output, which is wider than the chunk (`_runs`, `_raw_plan`)."""
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2, compression=None)
    store = pb.ArrayStore(item)
    assert store.open("x").chunk_shape == (16, 16)
    monkeypatch.setattr(fastread, "DIRECT_BYTES", 64)
    monkeypatch.setattr(fastread, "RUN_BYTES", 64)
    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    assert np.array_equal(_read(item), x)
    _check(store, ["x"])
    monkeypatch.setattr(fastread, "RUN_BYTES", 65)  # rows narrower than a run: through a buffer
    assert np.array_equal(_read(item), x)


def test_a_small_shard_of_large_integers_read_cast(tmp_path, monkeypatch):
    """int64 values above 2^53 in a shard of several inner chunks, read as uint64 (through a
    buffer of the stored type): every value exact."""
    from ockpt import _zarr_write

    x = (np.arange(64 * 32, dtype=np.int64).reshape(64, 32) * 7919) + (1 << 60)
    with monkeypatch.context() as m:
        m.setattr(_zarr_write, "shard_shape_for", lambda write_shape, *_: tuple(write_shape))
        _save_x(tmp_path / "item", x, zarr_version=3, chunk_byte_size=2048)
    got = _read(tmp_path / "item", dtype=np.uint64)
    assert got.dtype == np.uint64 and np.array_equal(got, x.astype(np.uint64))
    _check(pb.ArrayStore(tmp_path / "item"), ["x"], dtype=np.uint64)


def test_raw_chunks_of_a_3d_leaf_read_into_blocks_that_do_not_merge(tmp_path, monkeypatch):
    """Raw chunks of (2, 4, 4) of an (8, 8, 8) leaf: a chunk's part of the output is 2 x 4 runs
    of 16 bytes whose leading dimensions do not merge into one (the output is wider), so they
    are read through a buffer, or run by run; never into a copy of the output."""
    x = np.arange(8 * 8 * 8, dtype=np.float32).reshape(8, 8, 8)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=128, zarr_version=2, compression=None)
    store = pb.ArrayStore(item)
    assert store.open("x").chunk_shape == (2, 4, 4)
    monkeypatch.setattr(fastread, "DIRECT_BYTES", 16)
    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    for run in (16, 8, 64):
        monkeypatch.setattr(fastread, "RUN_BYTES", run)
        assert np.array_equal(_read(item), x), run
        _check(store, ["x"])


# ---------------------------------------------------------------------------------------------
# a chunk file that shrinks while it is read; sources that give their bytes in pieces


def _shrink_on_first_read(monkeypatch, path: Path) -> None:
    """The file `path` loses all but its first quarter when a `ByteRange` first reads a value
    (raw or compressed) from it, after the range was opened and its length taken: a file cut
    short while it is read."""
    from ockpt.store.byterange import ByteRange

    def cutting(name):
        original = getattr(ByteRange, name)

        def read(self, *args):
            if path.stat().st_size == size:
                os.truncate(path, size // 4)
            return original(self, *args)

        monkeypatch.setattr(ByteRange, name, read)

    size = path.stat().st_size
    for name in ("read", "readinto", "read_scattered"):
        cutting(name)


@pytest.mark.parametrize(
    ("path", "compression"),
    [("raw", None), ("whole", None), ("whole", "zstd"), ("slabs", None), ("slabs", "zstd")],
)
def test_a_chunk_whose_file_shrinks_while_read_is_refused_naming_it(
    tmp_path, monkeypatch, compression, path
):
    """A chunk read from its file, straight into the rows of its output (`_read_raw`) or
    streamed whole or in slabs (`_stream`), whose file is cut short after its length was
    taken: the short read is noticed (`_fill`, `_read_raw`), and the checked path refuses the
    chunk naming its file; no output holds bytes never read."""
    x = np.arange(40 * 100, dtype=np.float32).reshape(40, 100)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=2000, zarr_version=2, compression=compression)
    array = pb.ArrayStore(item).open("x")
    assert array.chunk_shape == (20, 25)
    if path == "raw":  # rows 22-29 of chunk 1.1, every column of it: one run of the output
        monkeypatch.setattr(fastread, "DIRECT_BYTES", 64)
        monkeypatch.setattr(fastread, "RUN_BYTES", 8)
        box = ((22, 30), (25, 50))
    else:  # streamed: whole, or in slabs of 4 rows (the region ends before the chunk)
        monkeypatch.setattr(fastread, "STREAM_BYTES", 256)
        monkeypatch.setattr(fastread, "SLAB_BYTES", 400)
        monkeypatch.setattr(fastread, "_READ_SIZE", 100)
        box = ((20, 40), (25, 50)) if path == "whole" else ((22, 32), (30, 40))
    ((_, data),) = fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
    assert np.array_equal(data, x[tuple(slice(a, b) for a, b in box)])
    _shrink_on_first_read(monkeypatch, item / "x" / "1.1")
    err = raised(
        FormatError, list, fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
    )
    assert err.file == f"{item}/x/1.1", err


class _Trickle:
    """A source whose ``readinto`` gives at most 3 bytes a call, as a pipe or a socket may."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def readinto(self, view) -> int:
        view = memoryview(view).cast("B")
        n = min(3, len(view), len(self.data) - self.at)
        view[:n] = self.data[self.at : self.at + n]
        self.at += n
        return n


def test_fill_takes_a_source_that_gives_its_bytes_in_pieces():
    """`_fill` reads until its destination (of several dimensions) is full, wherever each
    ``readinto`` stops, and says False when the source ends first."""
    data = bytes(range(40))
    dst = np.zeros((4, 5), np.uint16)
    assert fastread._fill(_Trickle(data), dst) is True
    assert dst.tobytes() == data
    dst = np.zeros((4, 5), np.uint16)
    assert fastread._fill(_Trickle(data[:31]), dst) is False


def _early_block(data, *, level: int, threads: int = 0) -> bytes:
    """One zstd frame of `data`, its content size recorded, whose first block holds only the
    first 8 bytes (a streaming encoder that flushed early): still one valid frame."""
    raw = bytes(data)
    co = zstandard.ZstdCompressor(level=level).compressobj(size=len(raw))
    first = co.compress(raw[:8]) + co.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    return first + co.compress(raw[8:]) + co.flush()


def test_zstd_chunks_of_an_ocdbt_item_fetched_and_decoded_in_one_thread(tmp_path, monkeypatch):
    """Chunks of 256 KiB of one OCDBT database, each one zstd frame whose first block is 8
    bytes, read in part in the calling thread: each chunk's frame is fetched into this
    thread's raw buffer and decoded into its decode buffer, which must be other memory (zstd
    decodes a frame in place while its output stays behind the input it reads: the small
    first block would overwrite the frame's header, and the next block be refused)."""
    from ockpt.zarr import codecs

    rng = np.random.default_rng(5)
    x = rng.integers(0, 16, (512, 512)).astype(np.float32)
    item = tmp_path / "item"
    with monkeypatch.context() as m:
        m.setattr(codecs, "zstd_compress", _early_block)
        ockpt.save_pytree(item, {"x": x}, layout="item", zarr_version=2, chunk_byte_size=1 << 18)
    store = pb.ArrayStore(item)
    array = store.open("x")
    assert math.prod(array.chunk_shape) * 4 == 1 << 18 and array.chunk_shape[0] < 512
    monkeypatch.setattr(fastread, "INLINE_BYTES", 1 << 30)  # every chunk in this thread
    raw = _spy(monkeypatch, "_raw", lambda nbytes: nbytes)
    box = ((1, 512), (1, 511))  # no chunk taken whole
    for _ in range(2):
        ((_, data),) = fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
        assert np.array_equal(data, x[1:512, 1:511])
    assert len(raw) == 2 * 4  # each frame fetched into the raw buffer
    _check(store, ["x"])


def test_a_shard_of_int4_read_as_uint4(tmp_path, monkeypatch):
    """int4 values in a shard of several inner chunks, read as uint4: ml_dtypes has no direct
    cast between them (numpy refuses it on assignment), so each region is read into a buffer
    of the stored type and cast (through float64, `dtypes.astype`)."""
    import ml_dtypes

    from ockpt import _zarr_write

    x = (np.arange(64 * 32).reshape(64, 32) % 8).astype(ml_dtypes.int4)
    with monkeypatch.context() as m:
        m.setattr(_zarr_write, "shard_shape_for", lambda write_shape, *_: tuple(write_shape))
        _save_x(tmp_path / "item", x, zarr_version=3, chunk_byte_size=256)
    store = pb.ArrayStore(tmp_path / "item")
    assert store.open("x").chunk_shape == (16, 16)
    got = _read(tmp_path / "item", dtype=ml_dtypes.uint4)
    assert got.dtype == ml_dtypes.uint4
    assert np.array_equal(got.astype(np.int64), x.astype(np.int64))
    _check(store, ["x"], dtype=ml_dtypes.uint4)


# ---------------------------------------------------------------------------------------------
# small leaves of one zstd chunk, read whole straight into their outputs (`_read_whole`)


def _poison_outputs(monkeypatch) -> None:
    """Every output the fast reader makes starts as bytes 0xA5: a part of it never written
    shows (fresh memory may hold an earlier read's values)."""
    aligned = fastread._aligned

    def poisoned(shape, dtype):
        out = aligned(shape, dtype)
        out.reshape(-1).view(np.uint8)[...] = 0xA5
        return out

    monkeypatch.setattr(fastread, "_aligned", poisoned)


def _spy(monkeypatch, name: str, key) -> list:
    """The calls of the module's function `name`, each recorded as ``key(*args)``."""
    calls: list = []
    original = getattr(fastread, name)

    def spy(*args):
        calls.append(key(*args))
        return original(*args)

    monkeypatch.setattr(fastread, name, spy)
    return calls


SMALL_LEAVES = {
    "a": np.arange(30, dtype=np.float32).reshape(6, 5) - 7.5,
    "b": np.arange(40, dtype=np.int32) * 3,
    "c": np.arange(7, dtype=np.int16),
    "many": np.arange(64 * 16, dtype=np.float32).reshape(64, 16),  # chunks of (16, 16)
}


@pytest.mark.parametrize(
    "options",
    [
        dict(zarr_version=2),
        dict(zarr_version=2, use_ocdbt=False),
        dict(zarr_version=2, use_ocdbt=False, compression=None),
        dict(zarr_version=3, use_ocdbt=False),  # shards
    ],
    ids=["ocdbt", "files", "raw", "zarr3"],
)
def test_small_leaves_of_one_chunk_are_read_whole_in_one_fetch(tmp_path, monkeypatch, options):
    """Each small leaf of one unsharded zstd chunk, requested whole, is fetched once and
    decoded straight into its output, without a task (`_read_whole`); every other leaf (raw,
    sharded, of several chunks) is read by `_read_chunk`, each chunk fetched once."""
    item = tmp_path / "item"
    ockpt.save_pytree(item, SMALL_LEAVES, layout="item", chunk_byte_size=1024, **options)
    store = pb.ArrayStore(item)
    arrays = {name: store.open(name) for name in SMALL_LEAVES}
    assert arrays["many"].chunk_shape == (16, 16) and arrays["a"].chunk_shape == (6, 5)
    _poison_outputs(monkeypatch)
    tasks = _spy(monkeypatch, "_read_chunk", lambda group, *_: group.array.metadata)
    fetched = _spy(monkeypatch, "_fetch", lambda array, key: key)
    plans = _spy(monkeypatch, "_whole_plan", lambda meta, _: meta)
    requests = [ReadRequest(a, tuple((0, n) for n in a.shape), None, k) for k, a in arrays.items()]
    got = dict((r.tag, data) for r, data in fastread.read_regions(requests, max_in_flight=2))
    for name, x in SMALL_LEAVES.items():
        assert got[name].dtype == x.dtype and np.array_equal(got[name], x), name
    # each leaf's plan made once per read: "a" again after "b" takes the plan made for it
    assert len(plans) == len(SMALL_LEAVES)
    tasks.clear()
    fetched.clear()
    a, b = requests[:2]
    again = [a, b, ReadRequest(a.array, a.box, None, "a again")]
    got = list(fastread.read_regions(again, max_in_flight=2))
    assert [r.tag for r, _ in got] == ["a", "b", "a again"]
    assert np.array_equal(got[2][1], SMALL_LEAVES["a"])
    assert plans[len(SMALL_LEAVES) :] == [a.array.metadata, b.array.metadata]
    assert len(fetched) == 3
    tasks.clear()
    fetched.clear()
    list(fastread.read_regions(requests, max_in_flight=2))
    fast = options.get("compression", "zstd") == "zstd" and options["zarr_version"] == 2
    read = [name for name, a in arrays.items() if a.metadata in tasks]
    assert read == (["many"] if fast else list(SMALL_LEAVES))
    assert len(tasks) == len(read) - 1 + 4  # "many" has 4 chunks
    assert len(fetched) == len(set(fetched)) == len(SMALL_LEAVES) - 1 + 4


def test_a_small_leaf_of_one_chunk_read_in_part_cast_or_twice(tmp_path, monkeypatch):
    """Requests of a one-chunk zstd leaf that are not one request for all of it in its stored
    type (a part, another type of the same size, the whole and a part together) are read by
    the other paths: each output whole."""
    x = np.arange(30, dtype=np.int32).reshape(6, 5) - 9
    _save_x(tmp_path / "item", x, zarr_version=2)
    array = pb.ArrayStore(tmp_path / "item").open("x")
    assert array.chunk_shape == (6, 5)
    _poison_outputs(monkeypatch)
    whole, part = ((0, 6), (0, 5)), ((1, 6), (0, 5))
    for requests in (
        [ReadRequest(array, part)],
        [ReadRequest(array, ((0, 6), (2, 5)))],
        [ReadRequest(array, whole, np.float32)],
        [ReadRequest(array, whole, np.int64)],
        [ReadRequest(array, whole), ReadRequest(array, part)],
        [ReadRequest(array, part), ReadRequest(array, whole)],
    ):
        got = list(fastread.read_regions(requests, max_in_flight=2))
        assert len(got) == len(requests)
        for request, data in got:
            want = _want(array, request.box, request.dtype)
            assert data.dtype == want.dtype and np.array_equal(data, want), request


def test_a_small_leaf_of_one_chunk_absent_or_resized(tmp_path, monkeypatch):
    """The one chunk of a small zstd leaf absent (the fill value, or LOAD-041), or a valid
    frame of the size of a part of the leaf (refused naming it, whatever the request)."""
    x = np.arange(30, dtype=np.float32).reshape(6, 5) + 1
    item = tmp_path / "item"
    _save_x(item, x, zarr_version=2)
    chunk = item / "x" / "0.0"
    _poison_outputs(monkeypatch)
    data = chunk.read_bytes()
    os.unlink(chunk)
    got = _read(item)
    assert got.dtype == np.float32 and not got.any()
    assert_error(raised(MissingDataError, _read, item, strict=True), rule="LOAD-041")
    chunk.write_bytes(zstandard.compress(x[:3].tobytes()))  # rows 0-2 only
    array = pb.ArrayStore(item).open("x")
    for box in (((3, 6), (0, 5)), ((0, 6), (0, 5))):
        err = raised(
            FormatError, list, fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
        )
        assert err.file == f"{item}/x/0.0", (box, err)
    chunk.write_bytes(data)
    assert np.array_equal(_read(item), x)


def test_a_small_leaf_whose_chunk_holds_only_the_part_requested(tmp_path):
    """The one chunk of a small zstd leaf replaced by a valid frame of just the bytes of a
    request for its first rows: refused naming the chunk (ZARR-003), as for any other
    request; not decoded into the request's output as if it were the chunk."""
    x = np.arange(30, dtype=np.float32).reshape(6, 5) + 1
    item = tmp_path / "item"
    _save_x(item, x, zarr_version=2)
    (item / "x" / "0.0").write_bytes(zstandard.compress(x[:3].tobytes()))  # rows 0-2 only
    array = pb.ArrayStore(item).open("x")
    request = ReadRequest(array, ((0, 3), (0, 5)))
    err = raised(FormatError, list, fastread.read_regions([request], max_in_flight=2))
    assert_error(err, rule="ZARR-003", file=f"{item}/x/0.0")


def test_an_array_of_an_ocdbt_database_read_at_an_older_generation():
    """A raw uint8 array over a bare database of many generations (tensorstore's), whose chunk
    1 is the key ``log/0001``: written in generation 2, deleted since. Read through an
    `OcdbtStore` of generation 2 it is that generation's value; of the latest, the fill."""
    from ockpt.zarr.v2 import ArrayV2Metadata
    from tests.support.ocdbt import database_case

    meta = ArrayV2Metadata.from_dict(
        {
            "zarr_format": 2,
            "shape": [64],
            "chunks": [32],
            "dtype": "|u1",
            "compressor": None,
            "fill_value": 0,
            "order": "C",
            "filters": None,
        }  # fmt: skip
    )
    path = str(database_case("version_tree_arity2"))
    for generation in (2, None):
        store = pb.OcdbtStore(path, generation=generation)
        value = store.get("log/0001")
        assert (value is None) == (generation is None)
        array = pb.StoredArray(
            "log", path, 2, (64,), np.dtype(np.uint8), (32,), meta, store, _prefix="log/000"
        )
        ((_, data),) = fastread.read_regions([ReadRequest(array, ((32, 64),))], max_in_flight=2)
        want = np.zeros(32, np.uint8) if value is None else np.frombuffer(value, np.uint8)
        assert want.any() == (value is not None) and np.array_equal(data, want), generation
        assert np.array_equal(data, _want(array, ((32, 64),)))
        store.close()


@pytest.mark.parametrize("compression", ["zstd", None])
@pytest.mark.parametrize("stored", ["big-endian", "fortran"])
def test_chunks_big_endian_or_in_fortran_order_are_read_by_the_pipeline(
    tmp_path, monkeypatch, compression, stored
):
    """Chunks whose bytes are not C-order little-endian (a .zarray made ``>f4`` or order F
    over the same bytes) are decoded by the codec pipeline on every path, as the decoder
    reads them; never as plain bytes."""
    import json

    item = tmp_path / "item"
    x = np.arange(40 * 100, dtype=np.float32).reshape(40, 100)
    _save_x(item, x, chunk_byte_size=2000, zarr_version=2, compression=compression)
    one = tmp_path / "one"  # a leaf of one chunk
    _save_x(one, x[:6, :5], zarr_version=2, compression=compression)
    for zarray in (item / "x" / ".zarray", one / "x" / ".zarray"):
        d = json.loads(zarray.read_text())
        assert d["dtype"] == "<f4" and d["order"] == "C"
        d.update({"dtype": ">f4"} if stored == "big-endian" else {"order": "F"})
        zarray.write_text(json.dumps(d))
    for small in (None, "pool", "stream", "direct"):
        with monkeypatch.context() as m:
            for name, value in SMALL.get(small, {}).items():
                m.setattr(fastread, name, value)
            store = pb.ArrayStore(item)
            _check(store, ["x"])
            got = _read(one)
            assert np.array_equal(got, _want(pb.ArrayStore(one).open("x"), ((0, 6), (0, 5))))
            assert not np.array_equal(got, x[:6, :5])


def test_chunks_decoded_straight_into_their_outputs(tmp_path, monkeypatch):
    """zstd chunks of (16, 16) of a (64, 16) leaf: read whole, each chunk is decoded straight
    into its part of the output (no buffer); read in part, into this thread's buffer and
    copied; never by the codec pipeline (which makes fresh bytes) while the frames are sound."""
    from ockpt.zarr import codecs

    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2)
    array = pb.ArrayStore(item).open("x")
    assert array.chunk_shape == (16, 16)
    buffers = _spy(monkeypatch, "_scratch", lambda nbytes, *_: nbytes)
    pipeline = []
    decode = codecs.CodecPipeline.decode

    def counted(self, *args, **kwargs):
        pipeline.append(args)
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(codecs.CodecPipeline, "decode", counted)
    for box, scratch in ((((0, 64), (0, 16)), []), (((0, 64), (1, 16)), [1024] * 4)):
        buffers.clear()
        ((_, data),) = fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
        assert np.array_equal(data, x[:, box[1][0] :])
        assert buffers == scratch and pipeline == [], box


@pytest.mark.parametrize("small", [None, "pool", "stream"])
def test_gzip_chunks_that_hold_zstd_frames_are_refused(tmp_path, monkeypatch, small):
    """Leaves whose .zarray names gzip over chunks that are zstd frames (of the right size):
    only a pipeline of zstd alone is decoded as one zstd frame, so gzip refuses each chunk,
    naming it, whatever the request (whole leaf of one chunk, whole chunks, parts)."""
    import json

    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    x = np.arange(40 * 100, dtype=np.float32).reshape(40, 100)
    for item, value in ((tmp_path / "many", x), (tmp_path / "one", x[:6, :5])):
        _save_x(item, value, chunk_byte_size=2000, zarr_version=2)
        zarray = item / "x" / ".zarray"
        d = json.loads(zarray.read_text())
        d["compressor"] = {"id": "gzip", "level": 1}
        zarray.write_text(json.dumps(d))
        array = pb.ArrayStore(item).open("x")
        for box in (((0, 6), (0, 5)), ((0, 20), (0, 25)), ((1, 3), (2, 4))):
            err = raised(
                FormatError, list, fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
            )
            assert err.file == f"{item}/x/0.0", (item, box, err)


def test_outputs_from_64_kib_start_on_a_64_byte_boundary(tmp_path):
    """Outputs of 64 KiB and more start on a 64-byte boundary (jax adopts them without a
    copy); each of eight requests of exactly 64 KiB, read together."""
    x = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)  # 128 KiB
    _save_x(tmp_path / "item", x, zarr_version=2)
    array = pb.ArrayStore(tmp_path / "item").open("x")
    boxes = [((i * 8, i * 8 + 64), (0, 256)) for i in range(8)] + [((0, 128), (0, 256))]
    got = list(fastread.read_regions([ReadRequest(array, b) for b in boxes], max_in_flight=2))
    assert [r.box for r, _ in got] == boxes
    for request, data in got:
        assert data.nbytes >= 1 << 16 and data.ctypes.data % 64 == 0, request.box
        assert np.array_equal(data, x[request.box[0][0] : request.box[0][1]])


@pytest.mark.parametrize(
    ("small", "cores", "max_in_flight", "chunks", "taken"),
    [
        (None, 1, 2, 1, 2),
        ("pool", 1, 2, 1, 4),  # 2 in flight: leaf 0 yielded when leaf 2's chunk is sent
        ("pool", 3, 1, 1, 8),  # 6 in flight
        ("pool", 1, 5, 1, 7),  # 5 in flight
        ("pool", 1, 2, 2, 3),  # leaf 0 yielded when leaf 1's second chunk is sent
    ],
)
def test_each_leaf_is_yielded_once_read_while_requests_are_still_to_come(
    tmp_path, monkeypatch, small, cores, max_in_flight, chunks, taken
):
    """The requests are consumed as reading goes: the first leaf's output is yielded before
    the last request is taken (memory holds the leaves in flight, not all of them). Small
    leaves are read in the calling thread, the first yielded once the second is taken; in the
    pool at most `max_in_flight` chunks (at least two per core) are in flight, and a leaf is
    yielded once its chunks are in, when the next chunk is to be sent."""
    for name, value in SMALL.get(small, {}).items():
        monkeypatch.setattr(fastread, name, value)
    monkeypatch.setattr(fastread, "workers", lambda: cores)
    leaves = {f"x{i:02d}": np.arange(20, dtype=np.float32) + i for i in range(12)}
    ockpt.save_pytree(
        tmp_path / "item", leaves, layout="item", use_ocdbt=False, chunk_byte_size=80 // chunks
    )
    store = pb.ArrayStore(tmp_path / "item")
    assert store.open("x00").chunk_shape == (20 // chunks,)
    names = []

    def requests():
        for name in leaves:
            names.append(name)
            yield ReadRequest(store.open(name), ((0, 20),), None, name)

    got = fastread.read_regions(requests(), max_in_flight=max_in_flight)
    request, data = next(got)
    assert request.tag == "x00" and np.array_equal(data, leaves["x00"])
    assert len(names) == taken, names
    rest = list(got)
    assert [r.tag for r, _ in rest] == list(leaves)[1:]
    assert all(np.array_equal(d, leaves[r.tag]) for r, d in rest)


@pytest.mark.parametrize("units", [4, 5])
def test_a_read_of_no_more_units_than_a_plan_holds_lists_no_keys(tmp_path, monkeypatch, units):
    """A whole read of an array of 4 chunks (one absent) with `_PLAN_UNITS` at 4 or more
    follows the grid: the array's keys are not listed (that is for grids of more units)."""
    monkeypatch.setattr(fastread, "_PLAN_UNITS", units)
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) + 1
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2)
    os.unlink(item / "x" / "1.0")
    listed = []
    stored_chunks = fastread._Group._stored_chunks

    def spied(self):
        listed.append(self.array.param_name)
        return stored_chunks(self)

    monkeypatch.setattr(fastread._Group, "_stored_chunks", spied)
    got = _read(item)
    assert not got[16:32].any() and np.array_equal(got[32:], x[32:])
    assert listed == []
    monkeypatch.setattr(fastread, "_PLAN_UNITS", 3)
    assert np.array_equal(_read(item), got)
    assert listed == ["x"]


class _LazyFuture(Future):
    """A task run only when its result is asked for (a pool may run a task at any time
    before that)."""

    def __init__(self, call) -> None:
        super().__init__()
        self.call = call

    def result(self, timeout=None):
        if not self.done() and self.set_running_or_notify_cancel():
            try:
                self.set_result(self.call())
            except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
                self.set_exception(e)
        return super().result(timeout)


class _LazyPool:
    def submit(self, fn, *args):
        return _LazyFuture(lambda: fn(*args))


def test_a_leaf_of_several_chunks_is_yielded_once_all_are_in(tmp_path, monkeypatch):
    """Leaves of 4 chunks read in a pool that runs each chunk only when its result is awaited:
    a leaf is yielded only after every one of its chunks was read (each output is whole when
    it is yielded)."""
    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    monkeypatch.setattr(fastread, "_executor", _LazyPool)
    monkeypatch.setattr(fastread, "workers", lambda: 1)
    _poison_outputs(monkeypatch)
    leaves = {f"x{i}": np.arange(64, dtype=np.float32) + 100 * i for i in range(4)}
    ockpt.save_pytree(tmp_path / "item", leaves, layout="item", chunk_byte_size=64)
    store = pb.ArrayStore(tmp_path / "item")
    assert store.open("x0").chunk_shape == (16,)
    requests = [ReadRequest(store.open(n), ((0, 64),), None, n) for n in leaves]
    for max_in_flight in (2, 3, 8):
        got = [
            (r.tag, d.copy())
            for r, d in fastread.read_regions(requests, max_in_flight=max_in_flight)
        ]
        assert [t for t, _ in got] == list(leaves)
        for tag, data in got:
            assert np.array_equal(data, leaves[tag]), (max_in_flight, tag)


def test_the_workers_read_under_the_callers_limits(tmp_path, monkeypatch):
    """Chunks read in the pool are read under the limits in force where `read_regions` is
    called: a chunk file above `max_chunk_bytes` is refused (ZARR-003) there too."""
    import dataclasses

    from ockpt.limits import LIMITS, applied

    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2, compression=None)
    array = pb.ArrayStore(item).open("x")
    request = ReadRequest(array, ((0, 64), (0, 16)))
    with applied(dataclasses.replace(LIMITS, max_chunk_bytes=1024)):
        ((_, data),) = fastread.read_regions([request], max_in_flight=2)
        assert np.array_equal(data, x)
    with applied(dataclasses.replace(LIMITS, max_chunk_bytes=1023)):
        err = raised(FormatError, list, fastread.read_regions([request], max_in_flight=2))
    assert err.rule == "ZARR-003" and err.file.startswith(f"{item}/x/"), err


def test_no_chunk_is_still_read_once_a_read_has_failed(tmp_path, monkeypatch):
    """A chunk that fails (absent, where every chunk must be stored) while another is being
    read in the pool: the error reaches the caller only once that other read has ended."""
    import threading
    import time

    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2)
    os.unlink(item / "x" / "0.0")
    array = pb.ArrayStore(item, missing_chunks_are_errors=True).open("x")
    started, ended = [], []
    second = threading.Event()
    read_chunk = fastread._read_chunk

    def slow(group, index, dests):
        started.append(index)
        if index == (0, 0):
            second.wait(2)  # the next chunk is being read (where the pool has a 2nd thread)
        else:
            second.set()
            time.sleep(0.2)
        try:
            return read_chunk(group, index, dests)
        finally:
            ended.append(index)

    monkeypatch.setattr(fastread, "_read_chunk", slow)
    request = ReadRequest(array, ((0, 64), (0, 16)))
    err = raised(MissingDataError, list, fastread.read_regions([request], max_in_flight=2))
    assert_error(err, rule="LOAD-041", file=f"{item}/x/0.0")
    assert sorted(started) == sorted(ended)


def test_small_reads_in_the_calling_thread_and_the_rest_in_the_pool(tmp_path, monkeypatch):
    """A leaf is read in the calling thread when its stored chunks and its outputs are all
    under `INLINE_BYTES` (here 1 KiB), else by the reader pool's threads (``ockpt-read-N``)."""
    import threading

    monkeypatch.setattr(fastread, "INLINE_BYTES", 1024)
    leaves = {
        "a": np.arange(256, dtype=np.float32),  # one chunk of 1 KiB
        "b": np.arange(256, dtype=np.float32) + 1,  # chunks of 512 bytes, 1 KiB in all
        "c": np.arange(512, dtype=np.float32) + 2,  # chunks of 512 bytes, 2 KiB in all
        "d": np.arange(128, dtype=np.float32) + 3,  # one chunk of 512 bytes
    }
    item = tmp_path / "item"
    for name, x in leaves.items():
        chunk = 1024 if name == "a" else 512
        ockpt.save_pytree(item / name, {"x": x}, layout="item", chunk_byte_size=chunk)
    threads = _spy(monkeypatch, "_read_chunk", lambda *_: threading.current_thread())
    here = threading.current_thread()
    for name, box, inline in (
        ("a", ((0, 100),), False),  # the output is small, the chunk is not
        ("b", ((0, 256),), False),  # the chunks are small, the output (of two) is not
        ("b", ((0, 255),), True),
        ("c", ((0, 512),), False),
        ("c", ((0, 128),), True),
        ("d", ((0, 100),), True),
    ):
        threads.clear()
        array = pb.ArrayStore(item / name).open("x")
        ((_, data),) = fastread.read_regions([ReadRequest(array, box)], max_in_flight=2)
        assert np.array_equal(data, leaves[name][box[0][0] : box[0][1]])
        assert threads, (name, box)
        for thread in threads:
            assert (thread is here) == inline, (name, box, thread.name)
            assert inline or thread.name.startswith("ockpt-read"), thread.name


@pytest.mark.parametrize(("units", "reads"), [(3, 4), (4, 3)])
def test_a_chunk_two_requests_share_is_read_once_when_planned(tmp_path, monkeypatch, units, reads):
    """Two requests of one leaf of 4 chunks that share chunk 1 (4 units in all): with
    `_PLAN_UNITS` at 4 they are planned together and chunk 1 is read once; at 3 each request
    follows the grid and chunk 1 is read for each."""
    monkeypatch.setattr(fastread, "_PLAN_UNITS", units)
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    _save_x(tmp_path / "item", x, chunk_byte_size=1024, zarr_version=2)
    array = pb.ArrayStore(tmp_path / "item").open("x")
    chunks = _spy(monkeypatch, "_read_chunk", lambda group, index, dests: index)
    boxes = [((0, 32), (0, 16)), ((16, 48), (2, 9))]
    got = list(fastread.read_regions([ReadRequest(array, b) for b in boxes], max_in_flight=2))
    for (_, data), ((a, b), (c, d)) in zip(got, boxes, strict=True):
        assert np.array_equal(data, x[a:b, c:d])
    assert len(chunks) == reads and set(chunks) == {(0, 0), (1, 0), (2, 0)}


@pytest.mark.parametrize("direct", [1024, 1025])
def test_raw_chunks_from_direct_bytes_are_read_straight_into_their_outputs(
    tmp_path, monkeypatch, direct
):
    """Raw chunks of 1 KiB with `DIRECT_BYTES` at 1 KiB are read from their files straight
    into the output (`_read_raw`), above it through the store; a chunk that is absent is the
    fill value (or LOAD-041) either way; and no file stays open after a read, also where a
    chunk could not be read straight (a cast output)."""
    monkeypatch.setattr(fastread, "DIRECT_BYTES", direct)
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) + 1
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2, compression=None)
    straight = _spy(monkeypatch, "_read_raw", lambda src, nbytes, plan: nbytes)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    assert np.array_equal(_read(item), x)
    assert straight == ([1024] * 4 if direct == 1024 else [])
    assert np.array_equal(_read(item, dtype=np.float64), x)
    os.unlink(item / "x" / "1.0")
    got = _read(item)
    assert not got[16:32].any() and np.array_equal(got[32:], x[32:])
    err = raised(MissingDataError, _read, item, strict=True)
    assert_error(err, rule="LOAD-041", file=f"{item}/x/1.0")
    assert err.message.startswith("chunk [1, 0] is missing"), err
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.parametrize("compression", ["zstd", None])
def test_chunks_above_stream_bytes_are_streamed(tmp_path, monkeypatch, compression):
    """Chunks of 1 KiB are streamed from their files with `STREAM_BYTES` under 1 KiB, and
    read whole at 1 KiB."""
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    item = tmp_path / "item"
    _save_x(item, x, chunk_byte_size=1024, zarr_version=2, compression=compression)
    streamed = _spy(monkeypatch, "_stream", lambda src, kind, chunk, *_: chunk)
    for stream, count in ((1024, 0), (1023, 4)):
        streamed.clear()
        monkeypatch.setattr(fastread, "STREAM_BYTES", stream)
        assert np.array_equal(_read(item), x)
        assert streamed == [(16, 16)] * count, stream
