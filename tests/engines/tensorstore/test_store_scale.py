"""Loading many arrays with the tensorstore backend scales linearly (no timings here: counts).

tensorstore checks every entry of an OCDBT B+tree node on each key it looks up, and Orbax
writes the keys of a tree of small arrays into one leaf node, so a key lookup per array makes a
load quadratic. Many small arrays of a local OCDBT database are therefore read through a stage
(`ockpt.engines.tensorstore.stage.Stage`): ockpt lists the keys once, tensorstore decodes each
array from a copy of its stored values. These tests pin that down (no OCDBT lookup per array,
opens in flight bounded, the stage empty after a load) and that the stage changes neither
values nor errors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

import ockpt
from ockpt.engines import ImmediateFuture, ReadRequest, read_regions
from ockpt.engines.tensorstore import stage as _ts_stage
from ockpt.engines.tensorstore import store as ts_store
from ockpt.errors import OckptError
from ockpt.ocdbt import Database
from ockpt.store import new_context
from ockpt.store import url as kv
from tests.support.expected import ITEMS, assert_same, expected_items, load_kwargs


def _count(name: str) -> int:
    for metric in ts.experimental_collect_matching_metrics(name):
        return int(sum(v.get("value", 0) for v in metric["values"]))
    return 0


def _ocdbt_lookups() -> int:
    """tensorstore's process-wide count of keys read from OCDBT databases."""
    return _count("/tensorstore/kvstore/ocdbt/read")


class _Opens:
    """Wraps `ts.open` as the tensorstore engine calls it: counts opens per kvstore driver and
    the most futures started and not yet waited on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by_driver: dict[str, int] = {}
        self.outstanding = 0
        self.most = 0
        real = kv.import_tensorstore()
        opens = self

        class Proxy:
            def __getattr__(self, name: str):
                return getattr(real, name)

            def open(self, spec, *args, **kwargs):
                driver = spec["kvstore"]["driver"]
                opens.by_driver[driver] = opens.by_driver.get(driver, 0) + 1
                opens.outstanding += 1
                opens.most = max(opens.most, opens.outstanding)
                return _Counted(real.open(spec, *args, **kwargs), opens)

        monkeypatch.setattr(kv, "import_tensorstore", lambda: Proxy())


class _Counted:
    def __init__(self, future, opens: _Opens) -> None:
        self._future = future
        self._opens = opens
        self._waited = False

    def result(self, timeout=None):
        if not self._waited:
            self._waited = True
            self._opens.outstanding -= 1
        return self._future.result(timeout=timeout)


def _tree(n: int, *, big: int = 0) -> dict:
    """`n` small leaves in nested dicts (as benchmarks/scale.py) of varied shapes and types, and
    `big` leaves of 64 KiB of random (incompressible) values."""
    rng = np.random.default_rng(0)
    out: dict = {}
    for i in range(n):
        group = out.setdefault(f"block_{i // 100}", {})
        kind = i % 4
        if kind == 0:
            value = np.full((4,), i, dtype=np.float32)
        elif kind == 1:
            value = np.arange(i % 7 + 1, dtype=np.int64).reshape(-1, 1) * i
        elif kind == 2:
            value = np.asarray(i, dtype=np.float64)  # 0-d
        else:
            value = rng.standard_normal((3, 5)).astype(np.float16)
        group[f"p{i % 100:02d}"] = value
    for i in range(big):
        out[f"big_{i}"] = rng.standard_normal((128, 128)).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("many") / "ckpt"
    tree = _tree(240, big=3)
    ockpt.save_pytree(path, tree)
    return path, tree


def _same(got, want) -> None:
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        for k in want:
            _same(got[k], want[k])
        return
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_node_cache_holds_a_leaf_node_of_the_size_orbax_writes():
    """A 100,000-leaf tree is one B+tree leaf node of ~100 MB decoded; a node cache smaller than
    that reads and decodes the whole node again for every key (the load did not finish)."""
    spec = new_context().spec.to_json()
    assert spec["cache_pool"]["total_bytes_limit"] >= 2 * 100_000_000
    assert spec.get("cache_pool#chunks", {}).get("total_bytes_limit", 0) == 0


def test_many_small_arrays_do_not_look_up_a_key_each(many, monkeypatch):
    path, tree = many
    monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", 16)
    monkeypatch.setattr(ts_store, "_STAGE_ARRAY_BYTES", 8 << 10)  # the big leaves: not staged
    stages: list[_ts_stage.Stage] = []
    real_init = _ts_stage.Stage.__init__

    def init(self, local, **kwargs):
        real_init(self, local, **kwargs)
        stages.append(self)

    monkeypatch.setattr(_ts_stage.Stage, "__init__", init)
    opens = _Opens(monkeypatch)
    before = _ocdbt_lookups()
    got = ockpt.load_pytree(path, backend="tensorstore")
    lookups = _ocdbt_lookups() - before
    _same(got, tree)
    # the 3 big leaves are opened and read in the database; the 240 small ones from the stage:
    # one open per distinct zarr metadata to learn shapes, then one per array read
    small = [v for k, g in tree.items() if k.startswith("block_") for v in g.values()]
    distinct = len({(v.shape, v.dtype.str) for v in small})
    assert opens.by_driver == {"ocdbt": 3, "memory": 240 + distinct}
    assert lookups <= 3 * 3  # those of the big leaves (metadata, shard): none per small leaf
    assert len(stages) == 1
    assert stages[0].kv.list().result() == []  # values dropped once read


def test_staged_and_direct_loads_are_equal(many, monkeypatch):
    path, tree = many
    direct = ockpt.load_pytree(path, backend="tensorstore")
    monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", 1)
    _same(ockpt.load_pytree(path, backend="tensorstore"), direct)
    _same(direct, tree)
    target = {k: v for k, v in tree.items() if k.startswith("block_0")}
    target = {"block_0": {k: v.astype(np.float64) for k, v in target["block_0"].items()}}
    got = ockpt.load_pytree(path, target, partial=True, cast="checked")
    monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", 10**9)
    _same(got, ockpt.load_pytree(path, target, partial=True, cast="checked"))


def test_views_of_staged_arrays_read_the_database(many, monkeypatch):
    from ockpt.reader.item import OpenedItem

    path, tree = many
    _stage_everything(monkeypatch)
    item = OpenedItem(path, step=None, item=None, context=None, backend="tensorstore")
    arrays = item.arrays([n for n, leaf in item.leaves.items() if leaf.source == "array"])
    array = arrays["block_1.p04"]
    assert array._staged is not None
    want = tree["block_1"]["p04"]
    assert np.array_equal(np.asarray(array.view(slice(1, 3)).read().result()), want[1:3])
    assert array._staged._direct is not None  # the view is of the array in the database


def test_opens_in_flight_are_bounded(many, monkeypatch):
    path, tree = many
    monkeypatch.setattr(ts_store, "_OPEN_IN_FLIGHT", 4)
    opens = _Opens(monkeypatch)
    _same(ockpt.load_pytree(path, backend="tensorstore"), tree)  # below _STAGE_MIN_ARRAYS
    assert opens.by_driver == {"ocdbt": 243}
    assert opens.most <= 4


def test_stage_failures_fall_back_to_the_database(many, monkeypatch):
    """A read the stage gets wrong (here: garbage staged for every chunk) is made again from the
    database."""
    path, tree = many
    monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", 1)
    real_put = _ts_stage.Stage.put

    def put(self, entries):
        real_put(self, entries)
        for key, _ in entries:
            if not key.endswith((b"zarr.json", b".zarray")):
                self.kv.write(key, b"\xff" * 7).result()

    monkeypatch.setattr(_ts_stage.Stage, "put", put)
    _same(ockpt.load_pytree(path, backend="tensorstore"), tree)

    def broken(self, entries):
        raise OSError("cannot read")

    monkeypatch.setattr(_ts_stage.Stage, "put", broken)
    _same(ockpt.load_pytree(path, backend="tensorstore"), tree)


def _chunk_value(path: Path, param: str):
    [item] = [
        m.parent for m in path.rglob("manifest.ocdbt") if not m.parent.name.startswith("ocdbt.")
    ]
    db = Database(item)
    try:
        for key, entry in db.entries():
            if key == f"{param}/c/0".encode() or key == f"{param}/0".encode():
                ref = entry.value
                assert not isinstance(ref, bytes), "the value must lie in a data file"
                file_id = ref.file_id
                rel = os.path.join(file_id.base_path.decode(), file_id.relative_path.decode())
                return item / rel, ref.offset, ref.length
    finally:
        db.close()
    raise AssertionError(f"no chunk of {param}")


def _error(path: Path, stage_min: int) -> tuple[BaseException, dict[str, int]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", stage_min)
        opens = _Opens(monkeypatch)
        with pytest.raises(OckptError) as info:
            ockpt.load_pytree(path, backend="tensorstore")
    return info.value, opens.by_driver


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_staged_errors_are_the_direct_errors(tmp_path, monkeypatch, damage):
    path = tmp_path / "ckpt"
    rng = np.random.default_rng(1)
    tree = {f"w{i:02d}": rng.standard_normal((600,)).astype(np.float32) for i in range(12)}
    ockpt.save_pytree(path, tree)
    monkeypatch.setattr(ts_store, "_STAGE_ARRAY_BYTES", 1 << 20)
    file, offset, length = _chunk_value(path, "w05")
    with open(file, "r+b") as f:
        if damage == "garbage":
            f.seek(offset)
            f.write(b"\x17" * length)
        else:
            f.truncate(offset + length // 2)
    direct, _ = _error(path, 10**9)
    staged, drivers = _error(path, 1)
    assert drivers.get("memory", 0) > 0  # read through the stage, the damaged one again without
    assert type(staged) is type(direct)
    assert str(staged) == str(direct)
    assert "w05" in str(direct)


def _stage_everything(monkeypatch) -> None:
    monkeypatch.setattr(ts_store, "_STAGE_MIN_ARRAYS", 1)
    monkeypatch.setattr(ts_store, "_STAGE_KEYS_PER_ARRAY", 10**9)


@pytest.mark.parametrize("case,rel", ITEMS)
def test_every_fixture_loads_through_the_stage(case, rel, monkeypatch):
    _stage_everything(monkeypatch)
    got = ockpt.load_pytree(case / "checkpoint", backend="tensorstore", **load_kwargs(case, rel))
    assert_same(got, expected_items(case)[rel])
    expected = expected_items(case, target=True)[rel]
    got = ockpt.load_pytree(
        case / "checkpoint", expected, backend="tensorstore", **load_kwargs(case, rel)
    )
    assert_same(got, expected, strict=True)


@pytest.mark.parametrize("case,rel", ITEMS)
def test_every_fixture_loads_through_the_stage_as_jax_arrays(case, rel, monkeypatch):
    """Several shards of one array are read from the stage at once (its values stay staged
    until the last is read)."""
    import jax

    from tests.support.jax_targets import check_jax, jax_target, mesh

    _stage_everything(monkeypatch)
    expected = expected_items(case, target=True)[rel]
    m = mesh((2, 2), ("a", "b"))
    target = jax_target(expected, m, [4])
    with jax.enable_x64(True):
        got = ockpt.load_pytree(
            case / "checkpoint", target, max_in_flight=3, **load_kwargs(case, rel)
        )
        check_jax(got, target, expected)


# ---------------------------------------------------------------------------------------------
# A request read in one tile: the tile is the output.


class _Fake:
    """A stand-in for a tensorstore `StoredArray` whose one read returns `data` itself."""

    param_name = "x"
    file = "x"

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.chunk_shape = data.shape

    def read(self, box, dtype=None, *, batch=None):
        return ImmediateFuture(lambda: self.data)

    def read_regions(self, requests, *, max_in_flight, tile_bytes):
        """The tensorstore engine's reader of many requests."""
        return ts_store.read_tiled(requests, max_in_flight=max_in_flight, tile_bytes=tile_bytes)


def _read_one(data: np.ndarray, dtype=None) -> np.ndarray:
    array = _Fake(data)
    box = tuple((0, n) for n in data.shape)
    [(_, out)] = list(read_regions([ReadRequest(array, box, dtype)]))  # type: ignore[arg-type]
    return out


def test_single_tile_request_returns_the_tile_itself():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert _read_one(data) is data
    scalar = np.asarray(5, dtype=np.int16)
    assert _read_one(scalar) is scalar


@pytest.mark.parametrize(
    "make", [lambda a: a[:, ::2], np.asfortranarray], ids=["strided", "fortran"]
)
def test_single_tile_output_is_contiguous(make):
    data = make(np.arange(24, dtype=np.float32).reshape(4, 6))
    out = _read_one(data)
    assert out.flags.c_contiguous and out.flags.writeable and out.dtype == data.dtype
    assert np.array_equal(out, data)


def test_single_tile_output_is_writeable_and_of_the_dtype():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = base.copy()
    frozen.setflags(write=False)
    out = _read_one(frozen)
    assert out is not frozen and out.flags.writeable and np.array_equal(out, frozen)
    out = _read_one(base, np.dtype(np.float64))  # a read of another type than it gave
    assert out.dtype == np.float64 and out.flags.c_contiguous and np.array_equal(out, base)


def test_metadata_of_many_arrays_reads_zarr_metadata_once_and_falls_back(tmp_path, monkeypatch):
    """`pytree_metadata` with the tensorstore backend reads the zarr metadata of many arrays of
    a local OCDBT item with ockpt's decoder, one array at a time; when that decoder fails, the
    arrays are opened with tensorstore and the result is the same."""
    from ockpt.engines.python import store as python_store

    tree = {f"p{i:03d}": np.full((i % 5 + 1,), i, np.float32) for i in range(100)}
    ockpt.save_pytree(tmp_path / "c", tree)
    want = ockpt.pytree_metadata(tmp_path / "c", backend="python")
    opened = []
    real = python_store.ArrayStore.open

    def counting(self, name):
        opened.append(name)
        return real(self, name)

    monkeypatch.setattr(python_store.ArrayStore, "open", counting)
    assert ockpt.pytree_metadata(tmp_path / "c", backend="tensorstore") == want
    assert sorted(opened) == sorted(tree)

    def failing(self, name):
        raise OckptError("decoder refused")

    monkeypatch.setattr(python_store.ArrayStore, "open", failing)
    assert ockpt.pytree_metadata(tmp_path / "c", backend="tensorstore") == want
    assert want["p007"].shape == (3,) and want["p007"].dtype == np.float32
