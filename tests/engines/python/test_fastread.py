"""The python engine's parallel region reads (`ockpt.engines.python.fastread`): each chunk decoded
once into
every region it overlaps. Results must equal the tensorstore backend's for every target kind:
numpy (whole arrays, casts, padding), jax.Arrays on the saved sharding and resharded, partial
loads, zarr v2 and v3, edge chunks, raw (uncompressed) chunks; errors keep their rules."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.support import assert_case_backends_agree

jax = pytest.importorskip("jax")

import ockpt  # noqa: E402
from ockpt import _zarr_write  # noqa: E402
from ockpt.engines.python import fastread as _fastread  # noqa: E402
from ockpt.writer import save_pytree  # noqa: E402

P = jax.sharding.PartitionSpec


def _whole_slice_shards(write_shape, chunk_shape, chunk_byte_size):
    """zarr v3 shards of a whole slice, several inner chunks each: valid zarr that tensorstore
    and ockpt 0.1.0 write (fixtures/ockpt-0.1.0/chunk_byte_size), though Orbax and today's
    writer make each shard one chunk (WRITE-010); readers must still take them."""
    return tuple(write_shape)


def _mesh(shape, names):
    n = int(np.prod(shape))
    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(shape), names)


def _tree():
    rng = np.random.default_rng(3)
    mesh = _mesh((4, 2), ("x", "y"))
    return {
        "w": jax.device_put(
            rng.standard_normal((64, 48)).astype(np.float32),
            jax.sharding.NamedSharding(mesh, P("x", "y")),
        ),
        "odd": rng.integers(0, 1000, (37, 11)).astype(np.int32),  # one chunk, odd shape
        "v": rng.standard_normal(130),
        "s": np.float32(2.5),
    }


@pytest.fixture(params=[(2, "zstd"), (3, "zstd"), (2, None), (2, "auto")])
def saved(request, tmp_path, monkeypatch):
    zarr_version, compression = request.param
    monkeypatch.setattr(_zarr_write, "shard_shape_for", _whole_slice_shards)
    path = tmp_path / "c"
    save_pytree(
        path,
        _tree(),
        layout="item",
        zarr_version=zarr_version,
        compression=compression,
        chunk_byte_size=512,  # many chunks, some at the edges
    )
    return path


def _equal(a, b):
    assert type(a) is type(b) or (isinstance(a, np.generic) and isinstance(b, np.generic))
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture(params=["inline", "workers"])
def read_in(request, monkeypatch):
    """Small arrays are read in the calling thread; "workers" sends every chunk to the pool."""
    if request.param == "workers":
        monkeypatch.setattr(_fastread, "INLINE_BYTES", 0)
    return request.param


def test_numpy_and_casts_match_tensorstore(saved, read_in):
    for target in (
        None,
        {"w": np.zeros((64, 48), np.float64), "odd": np.zeros((37, 11), np.int64),
         "v": np.zeros(130), "s": np.float32(0)},
        {"w": np.zeros((70, 40), np.float32), "odd": ..., "v": ..., "s": ...},
    ):  # fmt: skip
        opts = {"pad_or_truncate": True} if target and target["odd"] is ... else {}
        py = ockpt.load_pytree(saved, target, backend="python", **opts)
        ts = ockpt.load_pytree(saved, target, backend="tensorstore", **opts)
        assert set(py) == set(ts)
        for k in py:
            if py[k] is not ...:
                _equal(py[k], ts[k])


@pytest.mark.parametrize(
    "mesh_shape, spec",
    [((4, 2), P("x", "y")), ((8,), P("x", None)), ((2,), P(None, "x")), ((1,), P())],
)
def test_jax_targets_any_sharding(saved, mesh_shape, spec, read_in):
    names = ("x", "y")[: len(mesh_shape)]
    sharding = jax.sharding.NamedSharding(_mesh(mesh_shape, names), spec)
    target = {"w": jax.ShapeDtypeStruct((64, 48), np.float32, sharding=sharding)}
    got = ockpt.load_pytree(saved, target, backend="python", partial=True)["w"]
    want = ockpt.load_pytree(saved, target, backend="tensorstore", partial=True)["w"]
    assert got.sharding == sharding
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want)[shard.index])


def test_outputs_are_aligned_and_writable(saved, tmp_path):
    out = ockpt.load_pytree(saved, backend="python")
    assert out["w"].flags.writeable and out["w"].flags.c_contiguous
    out["w"][0, 0] = 1.0
    # from 64 KiB on, outputs start on a 64-byte boundary (jax adopts them without a copy)
    big = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    save_pytree(tmp_path / "big", {"w": big}, layout="item", chunk_byte_size=32 << 10)
    got = ockpt.load_pytree(tmp_path / "big", backend="python")["w"]
    assert got.nbytes >= _fastread._ALIGN_FROM
    assert got.ctypes.data % 64 == 0 and got.flags.writeable and np.array_equal(got, big)


def test_small_arrays_are_read_without_the_pool(saved, monkeypatch):
    """Arrays under INLINE_BYTES never reach a worker; larger ones do."""
    submitted = []
    real = _fastread._executor()

    class Counting:
        def submit(self, fn, *args):  # fn: a context's run; args: _read_chunk, group, ...
            submitted.append(args[1].array.param_name)
            return real.submit(fn, *args)

    monkeypatch.setattr(_fastread, "_executor", lambda: Counting())
    want = ockpt.load_pytree(saved, backend="tensorstore")
    got = ockpt.load_pytree(saved, backend="python")
    assert submitted == []
    monkeypatch.setattr(_fastread, "INLINE_BYTES", 64 * 48 * 4)  # "w" is exactly this size
    again = ockpt.load_pytree(saved, backend="python")
    assert set(submitted) == {"w"}
    for k in want:
        _equal(got[k], want[k])
        _equal(again[k], want[k])


def test_missing_chunk_names_its_rule(tmp_path):
    path = tmp_path / "c"
    save_pytree(path, {"a": np.arange(64, dtype=np.float32)}, layout="item", use_ocdbt=False,
                chunk_byte_size=64)  # fmt: skip
    os.remove(path / "a" / "3")
    with pytest.raises(ockpt.MissingDataError, match="LOAD-041"):
        ockpt.load_pytree(path, backend="python")


def test_one_worker_per_core():
    assert _fastread.workers() >= 1


# ---------------------------------------------------------------------------------------------
# large chunks streamed from their file (STREAM_BYTES lowered so small chunks take that path)


@pytest.fixture
def streamed(monkeypatch):
    """Every chunk is 'large': decoded from its file, straight or in slabs of at most 64 bytes."""
    monkeypatch.setattr(_fastread, "STREAM_BYTES", 0)
    monkeypatch.setattr(_fastread, "SLAB_BYTES", 64)
    calls = []
    real = _fastread._stream
    monkeypatch.setattr(_fastread, "_stream", lambda *a: calls.append(a[1]) or real(*a))
    return calls


def _golden():
    from tests.support import fixture_cases

    return fixture_cases()


@pytest.mark.parametrize("case", _golden(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_streamed_golden_checkpoints_equal_tensorstore(case, streamed):
    """Real Orbax (and ockpt) bytes read through the streaming path equal tensorstore's."""
    assert_case_backends_agree(case)


@pytest.mark.parametrize(
    "options",
    [{}, {"compression": None}, {"compression": "auto"}, {"use_ocdbt": False}],
    ids=["zstd", "raw", "auto", "files"],
)
def test_streamed_whole_and_slabs_and_casts(tmp_path, streamed, options):
    """Chunks of 4 KiB (stored out of line in OCDBT, or as files): every whole-chunk, slab,
    cast and resharded path of the streaming decoder equals tensorstore."""
    path = tmp_path / "c"
    save_pytree(path, _tree(), layout="item", chunk_byte_size=4096, **options)
    test_numpy_and_casts_match_tensorstore(path, None)
    for mesh_shape, spec in [((8,), P("x", None)), ((2,), P(None, "x")), ((1,), P())]:
        test_jax_targets_any_sharding(path, mesh_shape, spec, None)  # regions cut across slabs
    kinds = {"zstd"} if options.get("compression", "zstd") == "zstd" else {"raw"}
    assert set(streamed) == kinds, streamed


@pytest.mark.parametrize(
    "options",
    [
        {"compression": "zstd"},
        {"compression": None},
        {"zarr_version": 3},  # one shard holding one inner chunk, as Orbax writes
        {"zarr_version": 3, "compression": None},
        {"zarr_version": 3, "chunk_byte_size": 1 << 20},  # one shard of four inner chunks
    ],
    ids=["v2-zstd", "v2-raw", "v3-zstd", "v3-raw", "v3-inner"],
)
def test_large_chunk_costs_its_output_only(tmp_path, monkeypatch, options):
    """An array stored in one value larger than STREAM_BYTES is decoded without a buffer of
    that value's size: the memory numpy allocates while loading stays near the output's."""
    import tracemalloc

    monkeypatch.setattr(_zarr_write, "shard_shape_for", _whole_slice_shards)
    a = np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)  # 4 MiB
    path = tmp_path / "c"
    save_pytree(path, {"w": a}, layout="item", **options)
    monkeypatch.setattr(_fastread, "STREAM_BYTES", 64 << 10)
    monkeypatch.setattr(_fastread, "SLAB_BYTES", 64 << 10)
    monkeypatch.setattr(_fastread, "_READ_SIZE", 16 << 10)
    ockpt.load_pytree(path, backend="python")  # warm: metadata caches, thread pool
    for target in (None, {"w": np.zeros((a.shape[0] - 7, 256), np.float32)}):  # whole, slabs
        tracemalloc.start()
        got = ockpt.load_pytree(path, target, backend="python", pad_or_truncate=True)["w"]
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        np.testing.assert_array_equal(got, a[: got.shape[0]])
        assert peak < got.nbytes + (512 << 10), (peak, got.nbytes)


@pytest.mark.parametrize("damage", ["trailing", "truncated", "flipped"])
def test_damaged_large_chunk_keeps_its_rule(tmp_path, monkeypatch, damage):
    """A large chunk that is not exactly one frame of its size falls back to the checked
    decoder, which names the rule."""
    monkeypatch.setattr(_fastread, "STREAM_BYTES", 0)
    path2 = tmp_path / "p"
    save_pytree(path2, {"w": np.ones((64, 256), np.float32)}, layout="item", use_ocdbt=False)
    chunk = path2 / "w" / "0.0"
    data = chunk.read_bytes()
    if damage == "trailing":
        data += b"\0"
    elif damage == "truncated":
        data = data[:-3]
    else:
        data = data[:-2] + bytes([data[-2] ^ 0xFF]) + data[-1:]
    chunk.write_bytes(data)
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.load_pytree(path2, backend="python")
    assert "ZARR-" in str(info.value)


def test_streamed_hostile_chunks_raise_only_format_errors(tmp_path_factory):
    """Arbitrary bytes as a large chunk (zstd or raw, file or OCDBT value): the streaming
    path either decodes or falls back to the checked decoder; nothing but FormatError."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = tmp_path_factory.mktemp("hostile")
    value = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    paths = {}
    for name, options in {"zstd": {}, "raw": {"compression": None}}.items():
        paths[name] = base / name
        save_pytree(paths[name], {"w": value}, layout="item", use_ocdbt=False, **options)
    frame = (paths["zstd"] / "w" / "0.0").read_bytes()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(["zstd", "raw"]), cut=st.integers(0, len(frame)),
           junk=st.binary(max_size=64), flip=st.integers(0, 8 * len(frame)))  # fmt: skip
    def check(kind, cut, junk, flip):
        data = bytearray(frame if kind == "zstd" else value.tobytes())
        if flip < 8 * len(data):
            data[flip // 8] ^= 1 << (flip % 8)
        (paths[kind] / "w" / "0.0").write_bytes(bytes(data[:cut]) + junk)
        try:
            got = ockpt.load_pytree(paths[kind], backend="python")["w"]
        except ockpt.FormatError:
            return
        assert got.shape == value.shape and got.dtype == value.dtype

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_fastread, "STREAM_BYTES", 0)
        check()


@pytest.mark.parametrize("damage", ["index", "crc", "short"])
def test_damaged_large_shard_names_its_rule(tmp_path, monkeypatch, damage):
    """A large zarr v3 shard read by index from its file: a damaged index or a shard shorter
    than its index is a ZARR error naming the shard, as when it is read whole."""
    monkeypatch.setattr(_fastread, "STREAM_BYTES", 0)
    monkeypatch.setattr(_zarr_write, "shard_shape_for", _whole_slice_shards)
    path = tmp_path / "c"
    value = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    save_pytree(path, {"w": value}, layout="item", use_ocdbt=False, zarr_version=3,
                chunk_byte_size=1024)  # fmt: skip
    shard = path / "w" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    if damage == "index":  # an offset pointing past the chunk data, CRC fixed up
        from ockpt.bytecodecs import crc32c

        n = 16 * 4  # four inner chunks
        data[-4 - n : -4 - n + 8] = (len(data) * 2).to_bytes(8, "little")
        data[-4:] = crc32c(bytes(data[-4 - n : -4])).to_bytes(4, "little")
    elif damage == "crc":
        data[-1] ^= 0xFF
    else:
        data = data[:10]
    shard.write_bytes(bytes(data))
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.load_pytree(path, backend="python")
    assert "ZARR-" in str(info.value) and "w/c/0/0" in str(info.value)


def test_a_target_mismatch_is_refused_before_anything_is_read(tmp_path, monkeypatch):
    """Arrays are opened as reading reaches them, but every leaf a target asks for is checked
    first: a wrong shape on the last leaf reads no chunk of the others."""
    tree = {f"p{i}": np.full((8,), i, np.float32) for i in range(20)}
    save_pytree(tmp_path / "c", tree)
    reads = []
    real = _fastread._read_chunk
    monkeypatch.setattr(_fastread, "_read_chunk", lambda *a: reads.append(a) or real(*a))
    target = {k: np.zeros((8,), np.float32) for k in tree}
    target["p19"] = np.zeros((9,), np.float32)
    with pytest.raises(ockpt.TargetError, match="LOAD-030"):
        ockpt.load_pytree(tmp_path / "c", target, backend="python")
    assert reads == []
    target["p19"] = np.zeros((8,), np.float32)
    got = ockpt.load_pytree(tmp_path / "c", target, backend="python")
    assert len(reads) == 20 and got["p7"].tolist() == [7.0] * 8


# ---------------------------------------------------------------------------------------------
# raw chunks read from their file straight into the rows of their outputs


def _raw_tree():
    """One leaf of 1 MiB in chunks of 128 KiB (>= DIRECT_BYTES) whose rows are 2 KiB."""
    value = np.random.default_rng(5).standard_normal((256, 1024)).astype(np.float32)
    sharding = jax.sharding.NamedSharding(_mesh((4, 2), ("x", "y")), P("x", "y"))
    return value, {"w": jax.device_put(value, sharding)}


@pytest.fixture
def filled(monkeypatch):
    """The buffers each scattered read fills, per call."""
    from ockpt.store.byterange import ByteRange

    calls = []
    real = ByteRange.read_scattered

    def spy(self, buffers, at):
        calls.append(buffers)
        return real(self, buffers, at)

    monkeypatch.setattr(ByteRange, "read_scattered", spy)
    return calls


def _no_buffered_reads(monkeypatch):
    def fail(array, key):
        raise AssertionError(f"{key} was read into a buffer")

    monkeypatch.setattr(_fastread, "_fetch", fail)


@pytest.mark.parametrize("use_ocdbt", [True, False], ids=["ocdbt", "files"])
def test_raw_chunks_land_in_their_output_without_a_copy(tmp_path, monkeypatch, filled, use_ocdbt):
    """A raw chunk is read by ``os.preadv`` into the rows of the numpy output: never into a
    buffer first (`_fetch`), each output byte filled once, every buffer a view of the output."""
    value, tree = _raw_tree()
    save_pytree(tmp_path / "c", tree, layout="item", compression=None, use_ocdbt=use_ocdbt)
    _no_buffered_reads(monkeypatch)
    got = ockpt.load_pytree(tmp_path / "c", backend="python")["w"]
    np.testing.assert_array_equal(got, value)
    assert len(filled) == 8  # one read per chunk
    buffers = [b for call in filled for b in call]
    assert all(np.shares_memory(b, got) for b in buffers)
    assert sum(len(b) for b in buffers) == got.nbytes
    assert {len(b) for b in buffers} == {512 * 4}  # a chunk row each: half an output row


@pytest.mark.parametrize(
    "mesh_shape, spec", [((4, 2), P("x", "y")), ((8,), P("x", None))], ids=["saved", "rows"]
)
def test_raw_chunks_read_straight_into_jax_shards(tmp_path, monkeypatch, filled, mesh_shape, spec):
    """Shards on the saved sharding, or cut across chunk rows, are filled from the file too."""
    value, tree = _raw_tree()
    save_pytree(tmp_path / "c", tree, layout="item", compression=None)
    _no_buffered_reads(monkeypatch)
    sharding = jax.sharding.NamedSharding(_mesh(mesh_shape, ("x", "y")[: len(mesh_shape)]), spec)
    target = {"w": jax.ShapeDtypeStruct(value.shape, np.float32, sharding=sharding)}
    got = ockpt.load_pytree(tmp_path / "c", target, backend="python")["w"]
    np.testing.assert_array_equal(np.asarray(got), value)
    assert sum(len(b) for call in filled for b in call) == value.nbytes


@pytest.mark.parametrize("case", ["cast", "narrow rows", "column shards"])
def test_raw_chunks_that_cannot_be_read_straight_take_a_buffer(tmp_path, monkeypatch, filled, case):
    """Another dtype, rows under RUN_BYTES, or a region that is not one run of the chunk's
    bytes: read through a buffer as before, with the same values."""
    value, tree = _raw_tree()
    save_pytree(tmp_path / "c", tree, layout="item", compression=None)
    target: dict = {"w": np.zeros(value.shape, np.float64)}
    if case == "narrow rows":
        monkeypatch.setattr(_fastread, "RUN_BYTES", 4096)
        target = {"w": np.zeros(value.shape, np.float32)}
    elif case == "column shards":
        sharding = jax.sharding.NamedSharding(_mesh((4,), ("x",)), P(None, "x"))
        target = {"w": jax.ShapeDtypeStruct(value.shape, np.float32, sharding=sharding)}
    got = ockpt.load_pytree(tmp_path / "c", target, backend="python")["w"]
    np.testing.assert_array_equal(np.asarray(got), value.astype(np.asarray(got).dtype))
    assert filled == []


@pytest.mark.parametrize("damage", ["trailing", "truncated"])
def test_raw_chunk_of_the_wrong_size_keeps_its_rule(tmp_path, damage):
    """A raw chunk file that is not exactly its chunk's size is refused (ZARR-003) and
    nothing of it is read straight into the output."""
    value, tree = _raw_tree()
    save_pytree(tmp_path / "c", tree, layout="item", compression=None, use_ocdbt=False)
    chunk = tmp_path / "c" / "w" / "0.0"
    data = chunk.read_bytes()
    chunk.write_bytes(data + b"\0" if damage == "trailing" else data[:-4])
    with pytest.raises(ockpt.FormatError, match="ZARR-003") as info:
        ockpt.load_pytree(tmp_path / "c", backend="python")
    assert "w/0.0" in str(info.value)


def test_scattered_read_fills_buffers_across_short_reads(tmp_path, monkeypatch):
    """`ByteRange.read_scattered` fills its buffers in order when ``os.preadv`` returns less
    than asked (a signal, a page at a time), and refuses buffers that run past the range."""
    from ockpt.store import as_store, byterange

    data = bytes(range(256)) * 4
    (tmp_path / "f").write_bytes(data)
    real = os.preadv

    def short(fd, buffers, offset):  # at most 3 bytes, into the first buffer only
        return real(fd, [memoryview(buffers[0])[:3]], offset)

    monkeypatch.setattr(byterange.os, "preadv", short)
    out = np.zeros(100, np.uint8)
    with as_store(tmp_path).open_range("f") as src:
        assert src.read_scattered([out[:7], out[10:11], out[20:60], out[60:60]], 5) == 48
        with pytest.raises(ValueError, match="run past"):
            src.read_scattered([out], len(data) - 99)
    assert bytes(out[:7]) == data[5:12] and bytes(out[10:11]) == data[12:13]
    assert bytes(out[20:60]) == data[13:53] and not out[7:10].any()


def test_one_chunk_shards_skip_the_generic_region_reader(tmp_path, monkeypatch):
    """A zarr v3 shard of one inner chunk with plain codecs (every small array Orbax and ockpt
    write) is decoded directly: the generic region reader is never called, the values are
    exact, 0-d arrays included, and a damaged inner chunk is still refused."""
    rng = np.random.default_rng(5)
    tree = {f"w{i}": rng.standard_normal((3, 5)).astype(np.float32) for i in range(4)}
    tree["scalar"] = np.float32(1.5)
    tree["ints"] = np.arange(7, dtype=np.int64)
    save_pytree(tmp_path / "c", tree)  # v1: zarr v3 in OCDBT

    def generic(*args, **kwargs):
        raise AssertionError("the generic region reader was called")

    monkeypatch.setattr(_fastread, "read_region", generic)
    got = ockpt.load_pytree(tmp_path / "c", backend="python")
    for name, value in tree.items():
        np.testing.assert_array_equal(got[name], value)
    save_pytree(
        tmp_path / "files", {"w": tree["w0"]}, use_ocdbt=False, layout="item", zarr_version=3
    )
    shard = tmp_path / "files" / "w" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF  # the inner chunk's zstd magic number
    shard.write_bytes(bytes(data))
    with pytest.raises(ockpt.FormatError, match="w/c/0/0"):
        ockpt.load_pytree(tmp_path / "files", backend="python")
