"""Zero-copy loads (spec loading §6.1, LOAD-034) and the aligned writer (WRITE-017, OCDBT-025).

ockpt's writer starts every out-of-line value at a 64-byte-aligned offset of its data file;
real Orbax 0.12.8 and tensorstore read the padded files unchanged. ``mmap=True`` gives each
raw leaf stored as one value as a read-only array over the file's pages: the tests prove the
arrays *are* the file (a byte rewritten in the file shows in the array), that the leaves that
cannot be mapped are read or, with ``"require"``, refused naming the leaf and the reason, and
that mapping keeps the hostile-input rules (OCDBT-022, OCDBT-024)."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.engines import python as pb
from ockpt.engines.python import mapped
from ockpt.errors import FormatError, TargetError
from ockpt.ocdbt import Database
from ockpt.ocdbt.format import DataFileId, IndirectDataReference
from ockpt.ocdbt.write import VALUE_ALIGNMENT, DatabaseWriter
from ockpt.store import as_store
from ockpt.store.mapping import FileMaps, MapRefused
from ockpt.zarr.codecs import Crc32cCodec
from ockpt.zarr.v3 import ArrayV3Metadata
from tests.support import backing_map
from tests.support.errors import assert_error, raised


def _tree() -> dict[str, np.ndarray]:
    """Leaves whose sizes would leave the next value misaligned without padding."""
    rng = np.random.default_rng(3)
    return {
        "f32": rng.standard_normal(1001).astype(np.float32),  # 4004 bytes
        "i8": rng.integers(-100, 100, 2049).astype(np.int8),  # 2049 bytes
        "f64": rng.standard_normal((37, 29)).astype(np.float64),
        "i32": rng.integers(0, 1 << 30, (3, 5, 71)).astype(np.int32),
        "bool": (rng.standard_normal(1777) > 0),  # 1777 bytes
        "small": np.arange(5, dtype=np.int16),  # inline in a node
    }


def _references(item: Path) -> list[tuple[bytes, IndirectDataReference]]:
    with Database(item) as db:
        return [(k, e.value) for k, e in db.entries() if isinstance(e.value, IndirectDataReference)]


def _file_of(item: Path, ref: IndirectDataReference) -> Path:
    return item / (ref.file_id.base_path + ref.file_id.relative_path).decode()


def _save(path: Path, tree: dict, **kw) -> Path:
    ockpt.save_pytree(path, tree, layout="item", compression=None, **kw)
    return path


# ------------------------------------------------------------------------------ the writer


@pytest.mark.parametrize("zarr_version", [2, 3])
def test_write_017_every_value_starts_at_a_64_byte_offset_and_the_gaps_are_zero(
    tmp_path, zarr_version
):
    item = _save(tmp_path / "ckpt", _tree(), zarr_version=zarr_version)
    refs = _references(item)
    assert len(refs) == 5  # every leaf but "small" is out of line
    by_file: dict[Path, list[IndirectDataReference]] = {}
    for _, ref in refs:
        assert ref.offset % VALUE_ALIGNMENT == 0, ref
        by_file.setdefault(_file_of(item, ref), []).append(ref)
    assert len(by_file) == 1  # small values share one data file: the padding is between them
    for file, file_refs in by_file.items():
        data = file.read_bytes()
        covered = np.zeros(len(data), bool)
        for ref in file_refs:
            covered[ref.offset : ref.offset + ref.length] = True
        gaps = np.frombuffer(data, np.uint8)[~covered]
        assert gaps.size > 0 and not gaps.any()  # padding there is, and it is zeros


@pytest.mark.parametrize("zarr_version", [2, 3])
def test_ocdbt_025_orbax_and_tensorstore_read_the_padded_data_files(tmp_path, zarr_version):
    """Real Orbax 0.12.8 restores the aligned output exactly; tensorstore's OCDBT and zarr
    drivers (the tensorstore engine) and the validator accept the padding."""
    ocp = pytest.importorskip("orbax.checkpoint")
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, zarr_version=zarr_version)
    restored = ocp.PyTreeCheckpointer().restore(
        item,
        args=ocp.args.PyTreeRestore(
            item=tree, restore_args={k: ocp.RestoreArgs(restore_type=np.ndarray) for k in tree}
        ),
    )
    pytest.importorskip("tensorstore")
    through_tensorstore = ockpt.load_pytree(item, backend="tensorstore")
    for name, want in tree.items():
        for got in (restored[name], through_tensorstore[name]):
            assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert ockpt.validate(item, deep=True).ok


# ------------------------------------------------------------------------------ mapping


@pytest.mark.parametrize(
    "options",
    [
        dict(zarr_version=3),
        dict(zarr_version=2),
        dict(zarr_version=3, use_ocdbt=False),
        dict(zarr_version=2, use_ocdbt=False),
    ],
    ids=["ocdbt-zarr3", "ocdbt-zarr2", "per-leaf-zarr3", "per-leaf-zarr2"],
)
def test_load_034_raw_leaves_are_read_only_views_of_the_file(tmp_path, options):
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, **options)
    got = ockpt.load_pytree(item, mmap="require")
    for name, want in tree.items():
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name
        assert not got[name].flags.writeable, name
        if name != "small":
            assert backing_map(got[name]) is not None, name
            assert got[name].ctypes.data % VALUE_ALIGNMENT == 0, name
    with pytest.raises(ValueError, match="read-only"):
        got["f32"][0] = 1


def test_load_034_a_mapped_leaf_is_the_file_not_a_copy(tmp_path):
    """A byte rewritten in the data file after the load shows in the loaded array."""
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    got = ockpt.load_pytree(item, mmap=True)
    (key, ref) = next((k, r) for k, r in _references(item) if k.startswith(b"f32/"))
    fd = os.open(_file_of(item, ref), os.O_WRONLY)
    try:
        os.pwrite(fd, np.float32(12345.5).tobytes(), ref.offset + 4 * 10)
    finally:
        os.close(fd)
    assert got["f32"][10] == np.float32(12345.5)
    assert np.array_equal(np.delete(got["f32"], 10), np.delete(tree["f32"], 10))


def test_load_034_the_values_of_a_data_file_share_one_mapping(tmp_path):
    """2,000 leaves of one data file cost one mapping, not 2,000 (the process's map count
    is bounded, 65,530 by default on Linux)."""
    tree = {f"w{i:04d}": np.full(300, i, np.float32) for i in range(2000)}
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    files = {_file_of(item, ref) for _, ref in _references(item)}
    got = ockpt.load_pytree(item, mmap="require")
    maps = {id(backing_map(v)) for v in got.values()}
    assert len(maps) == len(files) == 1
    assert all(np.array_equal(got[k], v) for k, v in tree.items())


def test_load_034_what_cannot_be_mapped_is_read_or_refused(tmp_path):
    """mmap=True maps the raw one-value leaves and reads the rest (compressed, chunked, cast,
    padded, device targets); "require" refuses each, naming the leaf and the reason."""
    rng = np.random.default_rng(0)
    tree = {
        "raw": rng.standard_normal(1000).astype(np.float32),
        "zstd": np.zeros(1000, np.float32),
        "chunked": rng.standard_normal((16, 1024)).astype(np.float32),
    }
    item = tmp_path / "ckpt"
    ockpt.save_pytree(
        item,
        tree,
        layout="item",
        zarr_version=2,
        compression="auto",  # zeros compress: zstd; random floats stay raw
        chunk_byte_size=4096,  # "chunked" (64 KiB) in chunks of (16, 64), the others in one
    )
    got = ockpt.load_pytree(item, mmap=True)
    assert backing_map(got["raw"]) is not None
    assert backing_map(got["zstd"]) is None and got["zstd"].flags.writeable
    assert backing_map(got["chunked"]) is None and got["chunked"].flags.writeable
    for name, want in tree.items():
        assert np.array_equal(got[name], want), name

    def refusal(**kw):
        with pytest.raises(TargetError) as e:
            ockpt.load_pytree(item, mmap="require", **kw)
        assert e.value.rule == "LOAD-034"
        return e.value

    err = refusal(target={"raw": tree["raw"], "zstd": tree["zstd"]}, partial=True)
    assert err.leaf == "zstd" and "stored encoded (zstd)" in str(err)
    err = refusal(target={"raw": tree["raw"], "chunked": tree["chunked"]}, partial=True)
    assert err.leaf == "chunked" and "chunks of [16, 64], which split more than rows" in str(err)
    err = refusal(target={"raw": tree["raw"].astype(np.float64)}, partial=True)
    assert err.leaf == "raw" and "float64" in str(err)
    err = refusal(target={"raw": np.zeros(1200, np.float32)}, partial=True, pad_or_truncate=True)
    assert err.leaf == "raw" and "shape" in str(err)
    # a cast target with mmap=True is read and cast, as without mmap
    cast = ockpt.load_pytree(item, {"raw": tree["raw"].astype(np.float64)}, partial=True, mmap=True)
    assert cast["raw"].dtype == np.float64 and np.array_equal(cast["raw"], tree["raw"])
    with pytest.raises(ValueError, match="mmap must be"):
        ockpt.load_pytree(item, mmap="yes")


@pytest.mark.parametrize(
    "options",
    [dict(zarr_version=2), dict(zarr_version=3), dict(zarr_version=3, use_ocdbt=False)],
    ids=["ocdbt-zarr2", "ocdbt-zarr3", "per-leaf-zarr3"],
)
def test_load_034_chunks_of_whole_rows_are_mapped_side_by_side(tmp_path, options):
    """A raw leaf in chunks of whole rows, each starting on a page of its file (WRITE-017:
    ockpt places values of 1 MiB or more on pages), is one view of its chunks' pages: a byte
    rewritten in a chunk's file shows in it, a write through it (made writable) reaches no
    file, and its mappings go when the last array over it goes."""
    rng = np.random.default_rng(5)
    tree = {"rows": rng.standard_normal((4096, 256)).astype(np.float32)}  # 4 MiB: 4 chunks
    item = tmp_path / "ckpt"
    ockpt.save_pytree(
        item, tree, layout="item", compression=None, chunk_byte_size=1 << 20, **options
    )
    assert ockpt.pytree_metadata(item)["rows"].chunk_shape == (1024, 256)
    got = ockpt.load_pytree(item, mmap="require")["rows"]
    assert np.array_equal(got, tree["rows"]) and not got.flags.writeable
    assert got.ctypes.data % 4096 == 0
    files = sorted(p for p in item.rglob("*") if p.is_file() and p.stat().st_size >= 1 << 20)
    if options.get("use_ocdbt", True):  # the third chunk's bytes, through its reference
        ref = dict(_references(item))[
            b"rows/2.0" if options["zarr_version"] == 2 else b"rows/c/2/0"
        ]
        file, at = _file_of(item, ref), ref.offset
    else:
        file, at = item / "rows" / "c" / "2" / "0", 0
    fd = os.open(file, os.O_WRONLY)
    try:
        os.pwrite(fd, np.float32(-7.25).tobytes(), at)
    finally:
        os.close(fd)
    assert got[2048, 0] == np.float32(-7.25)
    snapshot = {p: p.read_bytes() for p in files}
    got.flags.writeable = True
    got[:] = 0  # private pages: copied on write, never written back
    assert all(p.read_bytes() == b for p, b in snapshot.items())
    assert _mapped_files(item)  # the chunk files are mapped while the array lives
    del got
    import gc

    gc.collect()
    assert not _mapped_files(item)  # and no longer once it is gone


def _mapped_files(item: Path) -> set[str]:
    """The files under `item` this process maps (from /proc/self/maps)."""
    root = str(item.resolve()) + "/"
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if root in line}


def test_write_017_values_of_a_mib_start_on_a_page(tmp_path):
    tree = {"big": np.ones((700, 1024), np.float32), "odd": np.ones(333, np.float32)}
    item = _save(tmp_path / "ckpt", {**tree, "more": np.ones((300, 1024), np.float32)})
    for key, ref in _references(item):
        assert ref.offset % (4096 if ref.length >= 1 << 20 else VALUE_ALIGNMENT) == 0, key


def test_load_034_chunks_that_cannot_lie_side_by_side_are_read(tmp_path, monkeypatch):
    """Chunks that are not whole pages, or more chunks than the mapping bound, are read."""
    from ockpt.engines.python import mapped

    rng = np.random.default_rng(6)
    tree = {"x": rng.standard_normal((2000, 250)).astype(np.float32)}  # chunks of 1,000,000 B
    item = tmp_path / "ckpt"
    ockpt.save_pytree(item, tree, layout="item", compression=None, chunk_byte_size=1 << 20)
    assert ockpt.pytree_metadata(item)["x"].chunk_shape == (1000, 250)
    got = ockpt.load_pytree(item, mmap=True)["x"]
    assert np.array_equal(got, tree["x"]) and got.flags.writeable
    with pytest.raises(TargetError, match="not whole pages"):
        ockpt.load_pytree(item, mmap="require")
    rows = tmp_path / "rows"
    ockpt.save_pytree(
        rows,
        {"x": np.ones((4096, 256), np.float32)},
        layout="item",
        compression=None,
        chunk_byte_size=1 << 20,
    )
    monkeypatch.setattr(mapped, "MAX_CHUNKS", 3)
    with pytest.raises(TargetError, match=r"4 chunks \(at most 3"):
        ockpt.load_pytree(rows, mmap="require")


def test_load_034_open_reads_one_leaf_mapped(tmp_path):
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, zarr_version=3)
    with ockpt.open(item) as ckpt:
        for name, want in tree.items():
            got = ckpt[name].read(mmap="require")
            assert np.array_equal(got, want) and not got.flags.writeable
        shared = {id(backing_map(ckpt[n].read(mmap=True))) for n in ("f32", "i8", "f64")}
        assert len(shared) == 1  # the checkpoint's leaves share the file's one mapping
    zstd = tmp_path / "zstd"
    ockpt.save_pytree(zstd, tree, layout="item")
    with ockpt.open(zstd) as ckpt:
        assert np.array_equal(ckpt["f32"].read(mmap=True), tree["f32"])  # read instead
        with pytest.raises(TargetError, match="stored encoded") as e:
            ckpt["f32"].read(mmap="require")
        assert e.value.rule == "LOAD-034" and e.value.leaf == "f32"


def test_load_034_the_tensorstore_engine_reads_instead_of_mapping(tmp_path):
    pytest.importorskip("tensorstore")
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    got = ockpt.load_pytree(item, mmap=True, backend="tensorstore")
    assert all(np.array_equal(got[k], v) for k, v in tree.items())
    with pytest.raises(TargetError, match="backend='python'"):
        ockpt.load_pytree(item, mmap="require", backend="tensorstore")


def test_load_034_orbax_raw_checkpoints_map_where_their_offsets_allow(tmp_path):
    """Orbax 0.12.8 without compression writes values back to back: a value whose offset is a
    multiple of its element size is mapped, any other is read (and named by "require")."""
    ocp = pytest.importorskip("orbax.checkpoint")
    tree = {
        "a_odd": np.arange(7, dtype=np.int8) + np.zeros((300, 7), np.int8),  # 2100 bytes
        "b_f64": np.linspace(0, 1, 1000),
        "c_f32": np.linspace(0, 1, 2000, dtype=np.float32),
    }
    item = tmp_path / "orbax"
    handler = ocp.PyTreeCheckpointHandler(use_compression=False)
    ocp.Checkpointer(handler).save(item, args=ocp.args.PyTreeSave(tree))
    offsets = {k.split(b"/")[0].decode(): r.offset for k, r in _references(item)}
    assert offsets  # Orbax stored the values out of line
    got = ockpt.load_pytree(item, mmap=True)
    for name, want in tree.items():
        assert np.array_equal(got[name], want), name
        itemsize = want.dtype.itemsize
        assert (backing_map(got[name]) is not None) == (offsets[name] % itemsize == 0), name
    misaligned = [n for n in tree if offsets[n] % tree[n].dtype.itemsize]
    if misaligned:
        with pytest.raises(TargetError, match="not a multiple of"):
            ockpt.load_pytree(item, mmap="require")
    else:
        ockpt.load_pytree(item, mmap="require")


# ------------------------------------------------------------------------------ hostile files


def test_ocdbt_022_a_truncated_data_file_is_refused_not_mapped(tmp_path):
    """A reference past the end of its data file is never mapped (an access of the missing
    pages would kill the process with SIGBUS): the load names the fault."""
    tree = _tree()
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    _, ref = max(_references(item), key=lambda kr: kr[1].offset)
    os.truncate(_file_of(item, ref), ref.offset + ref.length - 1)
    for mode in (True, "require"):
        with pytest.raises(FormatError) as e:
            ockpt.load_pytree(item, mmap=mode)
        assert e.value.rule == "OCDBT-022"


def _rewrite_root(item: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Write the root database of `item` anew, each entry's value passed through
    ``change(key, value)`` (the per-process databases and their data files stay)."""
    with Database(item) as db:
        entries = [(k, e.value) for k, e in db.entries()]
    for name in ("manifest.ocdbt", "d"):
        path = item / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    writer = DatabaseWriter("", open_file=as_store(item).writer)
    for key, value in entries:
        writer.put_entry(key, change(key, value))
    writer.commit()


def test_load_034_a_value_at_an_offset_its_elements_cannot_start_at_is_read(tmp_path):
    """A raw float32 value one byte into its data file (OCDBT-025 allows any offset) is read,
    not mapped as an unaligned array; "require" names the offset."""
    tree = {"x": np.arange(1024, dtype=np.float32)}
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    (_, ref) = _references(item)[0]
    moved = ref.file_id.base_path + b"d/" + b"f" * 32
    (item / moved.decode()).write_bytes(b"\x07" + tree["x"].tobytes() + b"\x07")
    new = IndirectDataReference(DataFileId(ref.file_id.base_path, b"d/" + b"f" * 32), 1, 4096)
    _rewrite_root(item, lambda key, value: new if key == b"x/0" else value)
    got = ockpt.load_pytree(item, mmap=True)
    assert np.array_equal(got["x"], tree["x"]) and backing_map(got["x"]) is None
    with pytest.raises(TargetError, match="starts at offset 1, not a multiple of 4"):
        ockpt.load_pytree(item, mmap="require")


def test_ocdbt_024_two_leaves_mapped_from_the_same_bytes_are_refused(tmp_path):
    """A database whose two keys name one byte range is refused by the mapping as by a read."""
    tree = {"x": np.arange(1024, dtype=np.float32), "y": np.ones(1024, np.float32)}
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    x_ref = dict(_references(item))[b"x/0"]
    _rewrite_root(item, lambda key, value: x_ref if key == b"y/0" else value)
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, mmap="require")
    assert e.value.rule == "OCDBT-024"


# ------------------------------------------------------------------------------ map_array itself
# `mapped.map_array` and `_raw_pipeline` called directly on real files: what is mapped, and
# each refusal's reason (the `MapRefused` the reader reports under LOAD-034), whole.


def _v3_metadata(shape, chunks, codecs, dtype="float32") -> ArrayV3Metadata:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": codecs,
    }
    return ArrayV3Metadata.from_bytes(json.dumps(doc).encode(), file="zarr.json")


def _bytes_codec(endian: str | None = "little") -> dict:
    return (
        {"name": "bytes"}
        if endian is None
        else {"name": "bytes", "configuration": {"endian": endian}}
    )


def _reason(fn, *args) -> tuple:
    return raised(MapRefused, fn, *args).args


def test_raw_pipeline_refusals_name_the_reason():
    index_codecs = [_bytes_codec(), {"name": "crc32c"}]
    inner = {"chunk_shape": [4, 4], "codecs": [_bytes_codec()], "index_codecs": index_codecs}
    sharded = _v3_metadata((8, 4), (8, 4), [{"name": "sharding_indexed", "configuration": inner}])
    assert _reason(mapped._raw_pipeline, sharded, (8, 4)) == (
        "its shards hold inner chunks of [4, 4]",
    )
    transposed = _v3_metadata(
        (4, 4), (4, 4), [{"name": "transpose", "configuration": {"order": [1, 0]}}, _bytes_codec()]
    )
    assert _reason(mapped._raw_pipeline, transposed, (4, 4)) == ("its chunk is stored transposed",)
    encoded = _v3_metadata(
        (4, 4),
        (4, 4),
        [_bytes_codec(), {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}],
    )
    assert _reason(mapped._raw_pipeline, encoded, (4, 4)) == (
        "it is stored encoded (gzip, crc32c)",
    )


@pytest.mark.parametrize("dtype", ["int16", "float32", "float64"])
def test_raw_pipeline_maps_the_machines_byte_order_only(monkeypatch, dtype):
    """Elements of two bytes or more are mapped in the machine's byte order only (a host of
    the other order is played by `np.little_endian`); one-byte elements have no order."""
    little = _v3_metadata((4,), (4,), [_bytes_codec("little")], dtype)
    big = _v3_metadata((4,), (4,), [_bytes_codec("big")], dtype)
    assert np.little_endian
    assert mapped._raw_pipeline(little, (4,))[1] is None
    assert _reason(mapped._raw_pipeline, big, (4,)) == ("it is stored big-endian",)
    monkeypatch.setattr(mapped.np, "little_endian", False)
    assert mapped._raw_pipeline(big, (4,))[1] is None
    assert _reason(mapped._raw_pipeline, little, (4,)) == ("it is stored little-endian",)
    for endian in (None, "big", "little"):
        one_byte = _v3_metadata((4,), (4,), [_bytes_codec(endian)], "uint8")
        assert mapped._raw_pipeline(one_byte, (4,))[1] is None


def _arrays(item: Path) -> pb.ArrayStore:
    return pb.ArrayStore(as_store(item))


def _map(item: Path, name: str) -> np.ndarray:
    store = _arrays(item)
    try:
        return mapped.map_array(store.open(name), FileMaps())
    finally:
        store.close()


def _map_refusal(item: Path, name: str) -> tuple:
    store = _arrays(item)
    try:
        return _reason(mapped.map_array, store.open(name), FileMaps())
    finally:
        store.close()


def test_map_array_of_no_element_and_of_one(tmp_path):
    """A one-byte leaf is mapped; a leaf of no element (ockpt writes none: its `.zarray` made
    so by hand) is refused."""
    item = _save(
        tmp_path / "ckpt", {"one": np.array([-3], np.int8)}, zarr_version=2, use_ocdbt=False
    )
    one = _map(item, "one")
    assert one.tolist() == [-3] and one.dtype == np.int8 and not one.flags.writeable
    zarray = item / "one" / ".zarray"
    doc = json.loads(zarray.read_text())
    zarray.write_text(json.dumps(dict(doc, shape=[0])))
    assert _map_refusal(item, "one") == ("it holds no element",)


def _per_leaf(tmp_path: Path, tree: dict, **kw) -> Path:
    return _save(tmp_path / "per_leaf", tree, use_ocdbt=False, **kw)


def test_map_array_refuses_an_absent_chunk_and_one_of_another_length(tmp_path):
    tree = {"x": np.arange(300, dtype=np.float32)}
    item = _per_leaf(tmp_path, tree, zarr_version=2)
    chunk = item / "x" / "0"
    assert _map(item, "x").tolist() == tree["x"].tolist()
    chunk.write_bytes(chunk.read_bytes() + b"\0")
    assert _map_refusal(item, "x") == ("its value holds 1201 bytes, not 1200",)
    chunk.unlink()
    assert _map_refusal(item, "x") == (
        "its value is not a byte range of a local file (remote or absent)",
    )


def test_map_array_refuses_an_inline_value_of_another_length(tmp_path):
    tree = {"small": np.arange(5, dtype=np.int16), "big": np.arange(4000, dtype=np.float32)}
    item = _save(tmp_path / "ckpt", tree, zarr_version=2)
    assert _map(item, "small").tolist() == [0, 1, 2, 3, 4]
    _rewrite_root(item, lambda key, value: value + b"\0" if key == b"small/0" else value)
    assert _map_refusal(item, "small") == ("its value holds 11 bytes, not 10",)


def _index(pairs: list[int]) -> bytes:
    """A shard index of (offset, nbytes) pairs with its CRC-32C."""
    return Crc32cCodec().encode(struct.pack(f"<{len(pairs)}Q", *pairs))


def test_map_array_of_a_shard_whose_index_is_damaged_or_empty(tmp_path):
    """The shard index's fault names the array's file and the shard's key; a shard that
    stores no chunk is refused."""
    tree = {"x": np.arange(300, dtype=np.float32)}
    item = _per_leaf(tmp_path, tree, zarr_version=3)
    shard = item / "x" / "c" / "0"
    data = shard.read_bytes()
    assert _map(item, "x").tolist() == tree["x"].tolist()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    store = _arrays(item)
    array = store.open("x")
    err = raised(FormatError, mapped.map_array, array, FileMaps())
    store.close()
    assert_error(err, rule="ZARR-016", file=array.file, pointer="x/c/0")
    shard.write_bytes(_index([(1 << 64) - 1, (1 << 64) - 1]))
    assert _map_refusal(item, "x") == ("the shard 'x/c/0' stores no chunk",)


def test_map_array_of_an_inline_shard_whose_index_is_damaged(tmp_path):
    tree = {"small": np.arange(5, dtype=np.int16), "big": np.arange(4000, dtype=np.float32)}
    item = _save(tmp_path / "ckpt", tree, zarr_version=3)
    assert _map(item, "small").tolist() == [0, 1, 2, 3, 4]
    _rewrite_root(item, lambda key, value: value[:-1] + b"\0" if key == b"small/c/0" else value)
    store = _arrays(item)
    array = store.open("small")
    err = raised(FormatError, mapped.map_array, array, FileMaps())
    store.close()
    assert_error(err, rule="ZARR-016", file=array.file, pointer="small/c/0")


def _rows(tmp_path: Path, rows: int, **options) -> tuple[Path, np.ndarray]:
    """A raw float32 leaf of `rows` rows of 256 in chunks of 1024 rows (1 MiB, each on a
    page of its file)."""
    x = np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)
    item = tmp_path / f"rows{rows}"
    ockpt.save_pytree(
        item, {"rows": x}, layout="item", compression=None, chunk_byte_size=1 << 20, **options
    )
    return item, x


def test_assembled_chunks_whose_last_is_partly_outside_the_array(tmp_path):
    """3000 rows in chunks of 1024 (ockpt's writer picks chunks that divide the rows, so the
    metadata of a 4096-row leaf is cut to 3000 rows by hand and its fourth chunk dropped): the
    last chunk's stored bytes hold 952 rows of the array and the rest of the chunk; the view
    takes its rows only."""
    for version, document, last in ((2, ".zarray", "3.0"), (3, "zarr.json", "c/3/0")):
        item, x = _rows(tmp_path / f"v{version}", 4096, zarr_version=version, use_ocdbt=False)
        meta = item / "rows" / document
        meta.write_text(json.dumps(dict(json.loads(meta.read_text()), shape=[3000, 256])))
        (item / "rows" / last).unlink()
        got = _map(item, "rows")
        assert got.shape == (3000, 256) and np.array_equal(got, x[:3000]), version
        assert not got.flags.writeable


def test_assembled_chunks_up_to_the_bound_are_mapped(tmp_path, monkeypatch):
    item, x = _rows(tmp_path, 4096, zarr_version=2)
    monkeypatch.setattr(mapped, "MAX_CHUNKS", 4)
    assert np.array_equal(_map(item, "rows"), x)
    monkeypatch.setattr(mapped, "MAX_CHUNKS", 3)
    assert _map_refusal(item, "rows") == ("it is stored in 4 chunks (at most 3 are mapped)",)


def test_assembled_chunks_refusals_name_the_chunk(tmp_path):
    item, _ = _rows(tmp_path, 4096, zarr_version=3, use_ocdbt=False)
    chunk = item / "rows" / "c" / "2" / "0"
    data = chunk.read_bytes()
    # a damaged shard index: the fault names the array's file and the chunk's key
    chunk.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    store = _arrays(item)
    array = store.open("rows")
    err = raised(FormatError, mapped.map_array, array, FileMaps())
    store.close()
    assert_error(err, rule="ZARR-016", file=array.file, pointer="rows/c/2/0")
    # an inner chunk of 4 bytes less than a chunk's
    chunk.write_bytes(data[:-20] + _index([0, (1 << 20) - 4]))
    assert _map_refusal(item, "rows") == (
        f"chunk 'rows/c/2/0' holds {(1 << 20) - 4} bytes, not {1 << 20}",
    )
    item, _ = _rows(tmp_path / "v2", 4096, zarr_version=2, use_ocdbt=False)
    chunk = item / "rows" / "2.0"
    chunk.write_bytes(chunk.read_bytes() + b"\0")
    assert _map_refusal(item, "rows") == (
        f"chunk 'rows/2.0' holds {(1 << 20) + 1} bytes, not {1 << 20}",
    )
    chunk.unlink()
    assert _map_refusal(item, "rows") == ("chunk 'rows/2.0' is no byte range of a local file",)
