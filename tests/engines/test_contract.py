"""The contract of an array engine (`ockpt.engines.contract`), run against both engines.

As zarr-python runs one suite against each of its stores, every test here runs against the
python engine and the tensorstore engine (or compares the two): on real Orbax-written items
of every release and storage kind (OCDBT root database, per-process databases only, per-leaf
zarr, zarr v3 shards, chunk_byte_size, releases 0.3.5 to 0.12.8), each array opens with the
same shape, dtype and chunks and reads the same bytes (whole, in random boxes, cast, through
views and `read_regions`), equal to the values the fixture records; and both refuse the same
hostile items with the same rules (LOAD-040, LOAD-041, PATH-004, PATH-005), never hanging.
"""

from __future__ import annotations

import os
import shutil
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from ockpt import engines
from ockpt.engines import python as pb
from ockpt.errors import FormatError, MissingDataError
from ockpt.layout import ItemFormat, Storage, detect, resolve
from ockpt.paths import param_name
from ockpt.store import LocalStore, Store, as_store
from tests.support import (
    FIXTURES,
    HAVE_TENSORSTORE,
    case_id,
    fixture_cases,
    flat_leaves,
    random_boxes,
)
from tests.support.expected import expected_items, load_kwargs


def _items() -> list[tuple[Path, str]]:
    """(case, item) for every recorded item of the golden fixtures that keeps arrays in an
    OCDBT database or per-leaf zarr directories."""
    from _record import load_expected

    out = []
    for case in fixture_cases():
        for rel in load_expected(case)["items"]:
            fmt = resolve(case / "checkpoint", **load_kwargs(case, rel)).target.item
            if fmt is not None and fmt.storage in (Storage.OCDBT, Storage.PER_LEAF_ZARR):
                out.append((case, rel))
    return out


ITEMS = _items()
ITEM_IDS = [f"{case_id(c)}:{r or '.'}" for c, r in ITEMS]


def _item(case: Path, rel: str) -> tuple[Store, ItemFormat]:
    found = resolve(case / "checkpoint", **load_kwargs(case, rel))
    assert found.target.item is not None
    return found.location, found.target.item


def _format(path: Path) -> ItemFormat:
    fmt = detect(path).item
    assert fmt is not None, path
    return fmt


def _open(engine: str, path: Path | Store, fmt: ItemFormat | None = None, **kw):
    loc = as_store(path)
    assert isinstance(loc, LocalStore)
    return engines.open_store(loc, fmt or _format(Path(loc.path)), backend=engine, **kw)


def _params(path: str | Path, fmt: ItemFormat) -> list[str]:
    return sorted(pb.key_listing(pb.item_keys(path, fmt))["params"])


def _casts(dtype: np.dtype) -> list[np.dtype]:
    if dtype.kind in "iu":
        return [np.dtype("float64"), np.dtype("int64")]
    if dtype.kind == "f" or dtype.isbuiltin == 2:  # numpy floats and ml_dtypes
        return [np.dtype("float64"), np.dtype("float32")]
    return []


def _same_bytes(x, y, what) -> None:
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape, what
    assert x.tobytes() == y.tobytes(), what


def _compare(path: str | Path | Store, fmt: ItemFormat) -> list[str]:
    """Open every array of the item with both engines: the same metadata, and the same bytes
    for whole arrays, random boxes, casts, views and `read_regions`. Returns the params."""
    loc = as_store(path)
    keys = pb.item_keys(loc, fmt)
    params = sorted(pb.key_listing(keys)["params"])
    mine = engines.open_store(loc, fmt, backend="python")
    theirs = engines.open_store(loc, fmt, backend="tensorstore")
    assert isinstance(mine, engines.ArrayStore) and isinstance(theirs, engines.ArrayStore)
    assert sorted(mine.list_keys()) == sorted(keys)
    try:
        for name in params:
            a, b = mine.open(name), theirs.open(name)
            assert isinstance(a, engines.StoredArray) and isinstance(b, engines.StoredArray)
            assert (a.shape, a.dtype, a.chunk_shape, a.zarr_version, a.nbytes) == (
                b.shape,
                b.dtype,
                b.chunk_shape,
                b.zarr_version,
                b.nbytes,
            ), name
            for box in random_boxes(a.shape, zlib.crc32(name.encode()), 4):
                _same_bytes(a.read(box).result(), b.read(box).result(), (name, box))
                for cast in _casts(a.dtype):
                    x, y = a.read(box, cast).result(), b.read(box, cast).result()
                    _same_bytes(x, y, (name, box, cast))
            if a.shape:
                index = (slice(None, None, 2),) + (Ellipsis,)
                _same_bytes(a.view(index).read().result(), b.view(index).read().result(), name)
            boxes = random_boxes(a.shape, 1, 4)
            requests = [engines.ReadRequest(a, box, None, i) for i, box in enumerate(boxes)]
            for request, data in engines.read_regions(requests, max_in_flight=2):
                _same_bytes(data, b.read(request.box).result(), (name, request.box))
    finally:
        mine.close()
        theirs.close()
    return params


# ---------------------------------------------------------------------------------------------
# Real items: both engines read alike, and what the fixture records.


def test_items_of_every_kind_and_era():
    kinds = {(_item(c, r)[1].storage, _item(c, r)[1].has_root_manifest) for c, r in ITEMS}
    assert kinds >= {(Storage.OCDBT, True), (Storage.PER_LEAF_ZARR, False)}
    releases = {c.parent.name for c, _ in ITEMS}
    assert {"orbax-0.3.5", "orbax-0.4.8", "orbax-0.12.8"} <= releases
    names = {case_id(c) for c, _ in ITEMS}
    assert {"orbax-0.12.8/zarr3", "orbax-0.12.8/chunk_byte_size", "orbax-0.12.8/no_ocdbt"} <= names


@pytest.mark.parametrize("case,rel", ITEMS, ids=ITEM_IDS)
def test_engines_open_and_read_alike(case, rel):
    loc, fmt = _item(case, rel)
    assert _compare(loc, fmt) or fmt.storage is Storage.PER_LEAF_ZARR


PROCESS_ITEMS = sorted(
    {p.parent for p in FIXTURES.glob("orbax-*/*/checkpoint/**/ocdbt.process_0")}
)[:3]


@pytest.mark.parametrize("item", PROCESS_ITEMS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_per_process_databases_without_root(tmp_path, item):
    """The arrays of an item whose chunks lie in the per-process databases only."""
    copy = tmp_path / "item"
    shutil.copytree(item, copy)
    (copy / "manifest.ocdbt").unlink()
    shutil.rmtree(copy / "d")
    fmt = _format(copy)
    assert fmt.storage is Storage.OCDBT and not fmt.has_root_manifest and fmt.ocdbt_processes
    assert _compare(copy, fmt)


# ---------------------------------------------------------------------------------------------
# Absent arrays and chunks.

OCDBT_ITEM = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"
PER_LEAF_ITEM = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"


def _per_process_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "per_process"
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "multiprocess" / "checkpoint", copy)
    (copy / "manifest.ocdbt").unlink()
    return copy


# ---------------------------------------------------------------------------------------------
# Hostile items: FIFOs and links leading out.


def _read_everything(engine: str, item: Path) -> None:
    store = _open(engine, item)
    try:
        for name in _params(item, _format(item)):
            array = store.open(name)
            array.read(tuple((0, n) for n in array.shape)).result()
    finally:
        store.close()


def _within(seconds: float, fn, fifo: Path) -> BaseException | None:
    """The error `fn` raises (None if none), failing the test if it takes longer than
    `seconds` (a reader blocked on the FIFO is then released by opening it for writing)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        thread.join(5)
        pytest.fail(f"reading blocked on the FIFO {fifo}")
    return out[0]


def _chunk(item: Path) -> tuple[str, Path]:
    """A param of a per-leaf item and the file of one of its chunks."""
    listing = pb.key_listing(pb.item_keys(item, _format(item)))
    name, entry = next((n, e) for n, e in sorted(listing["params"].items()) if e["chunk_keys"])
    return name, item / name / entry["chunk_keys"][0]


def _chunk_file(item: Path) -> Path:
    return _chunk(item)[1]


def _metadata_file(item: Path) -> Path:
    listing = pb.key_listing(pb.item_keys(item, _format(item)))
    return item / next(e["metadata_key"] for n, e in sorted(listing["params"].items()))


def _data_file(item: Path) -> Path:
    return sorted((item / "d").iterdir())[0]


HOSTILE = {
    "chunk": (PER_LEAF_ITEM, _chunk_file),
    "zarr_metadata": (PER_LEAF_ITEM, _metadata_file),
    "manifest": (OCDBT_ITEM, lambda item: item / "manifest.ocdbt"),
    "data_file": (OCDBT_ITEM, _data_file),
}


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        _open("nope", OCDBT_ITEM)


def _sparse_grid(tmp_path: Path, storage: str) -> tuple[Path, str]:
    """A real Orbax item whose float32 leaf declares a grid of 2^18 one-element chunks, of
    which three are stored (0, 5 and 200,000: 7, 8 and 9), fill value 1.5."""
    import json

    import zstandard

    from tests.support.ocdbt import rewrite_array

    cells = 1 << 18
    frames = {i: zstandard.ZstdCompressor().compress(np.float32(v).tobytes()) for i, v in
              ((0, 7), (5, 8), (200_000, 9))}  # fmt: skip
    meta = {"chunks": [1], "compressor": {"id": "zstd", "level": 1}, "dimension_separator": ".",
            "dtype": "<f4", "fill_value": 1.5, "filters": None, "order": "C",
            "shape": [cells], "zarr_format": 2}  # fmt: skip
    item = tmp_path / storage
    if storage == "ocdbt":
        shutil.copytree(FIXTURES / "orbax-0.12.8" / "nested" / "checkpoint", item)
        rewrite_array(item, b"mixed.0/", meta, {b"%d" % i: f for i, f in frames.items()})
        return item, "mixed.0"
    shutil.copytree(PER_LEAF_ITEM, item)
    meta.update(shape=[cells, 1], chunks=[1, 1])
    (item / "a" / ".zarray").write_text(json.dumps(meta))
    os.unlink(item / "a" / "0.0")
    for i, frame in frames.items():
        (item / "a" / f"{i}.0").write_bytes(frame)
    return item, "a"


@pytest.fixture
def engine(request) -> str:
    """The backend name of the engine a contract class runs on (its `ENGINE`)."""
    return request.cls.ENGINE


class EngineTests:
    """The contract every engine passes: subclass it with ``ENGINE = "<backend name>"`` (a name
    `ockpt.engines.open_store` takes) to run it on another engine."""

    ENGINE: str

    @pytest.mark.parametrize("case,rel", ITEMS, ids=ITEM_IDS)
    def test_engine_reads_the_recorded_values(self, case, rel, engine):
        """Each array leaf the fixture records, read whole, is the recorded array bit for bit."""
        loc, fmt = _item(case, rel)
        store = engines.open_store(loc, fmt, backend=engine)
        params = set(_params(loc.path, fmt))
        checked = 0
        try:
            for path, want in flat_leaves(expected_items(case)[rel]):
                name = param_name(tuple(str(k) for k in path))
                if name not in params or not hasattr(want, "dtype"):
                    continue
                want = np.asarray(want)
                array = store.open(name)
                got = array.read(tuple((0, n) for n in array.shape)).result()
                _same_bytes(got, want, name)
                checked += 1
        finally:
            store.close()
        assert checked or not params

    @pytest.mark.parametrize("kind", ["ocdbt", "per_process", "per_leaf"])
    def test_missing_array_is_load_040(self, tmp_path, engine, kind):
        item = {"ocdbt": OCDBT_ITEM, "per_leaf": PER_LEAF_ITEM}.get(kind) or _per_process_copy(
            tmp_path
        )
        store = _open(engine, item)
        with pytest.raises(MissingDataError) as info:
            store.open("no_such_param")
        assert info.value.rule == "LOAD-040"
        # the error names a real file (the array's directory or the database's manifest) and
        # the param once
        want = {
            "ocdbt": "manifest.ocdbt",
            "per_process": "ocdbt.process_*/manifest.ocdbt",
            "per_leaf": "no_such_param",
        }[kind]
        assert info.value.file.endswith("/" + want), info.value.file
        assert str(info.value).count("no_such_param") == 1 + (kind == "per_leaf"), info.value
        assert "tensorstore_spec" not in str(info.value)
        with pytest.raises(MissingDataError) as info:
            store.open_many(["no_such_param"])
        assert info.value.rule == "LOAD-040"
        store.close()

    @pytest.mark.parametrize(
        "case, name, chunk",
        [
            ("zarr_missing_chunk_ocdbt", "x", (3, 0)),
            ("zarr_missing_chunk_per_leaf", "sharded", (1, 1)),
        ],
    )
    def test_missing_chunk_reads_as_fill_or_is_load_041(self, engine, case, name, chunk):
        """ZARR-008: a chunk absent from storage reads as the fill value, or, where every chunk
        must be stored (``missing_chunks_are_errors``), fails with LOAD-041."""
        item = FIXTURES / "bad" / case / "checkpoint"
        loose = _open(engine, item).open(name)
        full = tuple((0, n) for n in loose.shape)
        data = np.asarray(loose.read(full).result())
        region = tuple(
            slice(i * c, (i + 1) * c) for i, c in zip(chunk, loose.chunk_shape, strict=True)
        )
        assert not data[region].any()  # the fill value (0)
        _same_bytes(data, _open("python", item).open(name).read(full).result(), name)
        strict = _open(engine, item, missing_chunks_are_errors=True).open(name)
        with pytest.raises(MissingDataError) as info:
            strict.read(full).result()
        assert info.value.rule == "LOAD-041"
        with pytest.raises(MissingDataError) as info:
            list(engines.read_regions([engines.ReadRequest(strict, full)]))
        assert info.value.rule == "LOAD-041"

    @pytest.mark.parametrize("where", sorted(HOSTILE))
    def test_fifo_is_path_005_not_a_hang(self, tmp_path, engine, where):
        source, pick = HOSTILE[where]
        item = tmp_path / "item"
        shutil.copytree(source, item)
        target = pick(item)
        target.unlink()
        os.mkfifo(target)
        error = _within(20, lambda: _read_everything(engine, item), target)
        assert isinstance(error, FormatError), repr(error)
        assert error.rule == "PATH-005", str(error)

    @pytest.mark.parametrize("where", ["chunk", "zarr_metadata", "manifest", "data_file"])
    def test_link_leading_out_is_refused(self, tmp_path, engine, where):
        """A symbolic link to a file outside the item (a copy of the very file it replaces): no
        byte of it is read (PATH-004), in both engines, an OCDBT data file's included."""
        source, pick = HOSTILE[where]
        item = tmp_path / "item"
        shutil.copytree(source, item)
        target = pick(item)
        outside = tmp_path / "outside" / target.name
        outside.parent.mkdir()
        shutil.copyfile(target, outside)
        target.unlink()
        target.symlink_to(outside)
        with pytest.raises(FormatError) as info:
            _read_everything(engine, item)
        assert info.value.rule == "PATH-004", str(info.value)

    def test_link_inside_the_item_is_followed(self, tmp_path, engine):
        """A symbolic link to a file inside the item reads as that file."""
        item = tmp_path / "item"
        shutil.copytree(PER_LEAF_ITEM, item)
        target = _chunk_file(item)
        moved = item / "moved"
        target.rename(moved)
        target.symlink_to(moved)
        _read_everything(engine, item)

    def test_directory_in_place_of_a_chunk_is_an_absent_chunk(self, tmp_path, engine):
        """A directory holds no value: the chunk is absent (the fill value, or LOAD-041)."""
        item = tmp_path / "item"
        shutil.copytree(PER_LEAF_ITEM, item)
        name, target = _chunk(item)
        target.unlink()
        target.mkdir()
        loose = _open(engine, item).open(name)
        full = tuple((0, n) for n in loose.shape)
        _same_bytes(
            loose.read(full).result(),
            _open("tensorstore", item).open(name).read(full).result(),
            name,
        )
        strict = _open(engine, item, missing_chunks_are_errors=True).open(name)
        with pytest.raises(MissingDataError) as info:
            strict.read(full).result()
        assert info.value.rule == "LOAD-041"

    @pytest.mark.parametrize("storage", ["ocdbt", "per_leaf"])
    def test_a_sparse_grid_is_read_by_its_stored_chunks(self, tmp_path, engine, storage):
        """Issue 36 item 5: a grid of 2^18 chunks with three stored reads as the fill value and
        those three, by the chunks stored (a grid of 2^24 declared in a few KiB took minutes and
        gigabytes); where every chunk must be stored, the first missing one is refused."""
        item, name = _sparse_grid(tmp_path, storage)
        array = _open(engine, item, missing_chunks_are_errors=False).open(name)
        want = np.full(array.shape, 1.5, np.float32)
        want.reshape(-1)[[0, 5, 200_000]] = [7, 8, 9]
        full = tuple((0, n) for n in array.shape)
        np.testing.assert_array_equal(array.read(full).result(), want)
        part = ((4, 200_001),) + full[1:]
        np.testing.assert_array_equal(array.read(part).result(), want[4:200_001])
        strict = _open(engine, item, missing_chunks_are_errors=True).open(name)
        with pytest.raises(MissingDataError) as info:
            strict.read(part).result()
        assert info.value.rule == "LOAD-041"


class TestPythonEngine(EngineTests):
    ENGINE = "python"


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore (the tensorstore extra)")
class TestTensorstoreEngine(EngineTests):
    ENGINE = "tensorstore"


def test_both_engines_run_the_contract():
    """Every backend ockpt has runs the contract (a new engine adds its class here)."""
    assert {c.ENGINE for c in EngineTests.__subclasses__()} == set(engines.BACKENDS)
