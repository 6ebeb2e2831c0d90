"""`ockpt.open`: the lazy `Checkpoint`, its `Subtree`s and `LazyArray`s, on golden fixtures and
items written by ockpt: basic indexing as numpy does it (values, shapes, errors and their
texts), only the chunks a slice touches read, the allocation check and read errors naming the
slice, typed keys, mapped reads, subtree navigation, and what `open` hands to the item."""

from __future__ import annotations

import json
import shutil

import msgpack
import numpy as np
import pytest

import ockpt
import ockpt.limits
from ockpt import _jax
from ockpt.engines.python.store import StoredArray as PythonArray
from ockpt.errors import FormatError, LeafNameError, MemoryLimitError, MissingDataError, TargetError
from ockpt.random_keys import RandomKey
from ockpt.reader import lazy
from ockpt.reader.item import OpenedItem
from tests.support import FIXTURES, backing_map, record_key_impl
from tests.support.errors import assert_error
from tests.support.expected import assert_same, expected_items

SHARDED = FIXTURES / "orbax-0.12.8" / "sharded"  # xy: float32 (8, 4) in chunks of (2, 2)
NESTED = FIXTURES / "orbax-0.12.8" / "nested"
KEYS = FIXTURES / "orbax-0.11.9" / "random_keys"
AGGREGATED = FIXTURES / "orbax-0.5.15" / "msgpack_aggregated"  # values inline in msgpack
SCALARS = FIXTURES / "orbax-0.12.8" / "scalars_strings"
MANAGER = FIXTURES / "orbax-0.12.8" / "manager"


def _xy() -> np.ndarray:
    return expected_items(SHARDED)[""]["xy"]


def _boxes_read(monkeypatch) -> list[tuple[str, list[tuple[int, int]]]]:
    """(param name, box) of every region the python engine reads from now on."""
    seen: list[tuple[str, list[tuple[int, int]]]] = []
    original = PythonArray.read

    def record(self, box=None, dtype=None, *, batch=None):  # type: ignore[no-untyped-def]
        seen.append((self.param_name, [tuple(b) for b in box]))
        return original(self, box, dtype, batch=batch)

    monkeypatch.setattr(PythonArray, "read", record)
    return seen


def _numpy_error(kind: type[Exception], shape: tuple[int, ...], index) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(kind) as info:
        np.zeros(shape)[index]
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Basic indexing, as numpy.

INDICES = [
    np.s_[...],
    np.s_[:],
    np.s_[::-1],
    np.s_[-1],
    np.s_[-8],
    np.s_[7],
    np.s_[np.int64(3)],
    np.s_[np.int32(-2), np.uint8(3)],
    np.s_[1:7:3, ::-2],
    np.s_[1::2],  # ends at the last row: a stop one past it would be out of bounds
    np.s_[::2, 1::2],
    np.s_[7::-2],  # reversed from the last row
    np.s_[6::-3, 3::-1],
    np.s_[-1:-9:-1],
    np.s_[None, 2, ..., None],
    np.s_[None],
    np.s_[..., None],
    np.s_[0, None, 1],
    np.s_[3:3],
    np.s_[3:3, 1:2],
    np.s_[5:2],
    np.s_[-3:, 1],
    np.s_[..., -1],
    np.s_[1, ...],
    np.s_[1, ..., 2],
    np.s_[..., 1, 2],
    np.s_[6:1:-2, 0:4:5],
    np.s_[2:4, 1:3],
    np.s_[100:],
    np.s_[-100:2],
    np.s_[:, -4],
    np.s_[:, 3],
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_a_stored_leaf_indexes_as_numpy(index):
    want = _xy()[index]
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        got = ckpt["xy"][index]
    # a 0-d result is a numpy scalar (numpy gives a 0-d array where the index has an ellipsis)
    assert isinstance(got, np.ndarray) == (np.ndim(want) > 0)
    assert np.shape(got) == np.shape(want) and got.dtype == want.dtype
    assert np.array_equal(got, want)


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_an_inline_leaf_indexes_as_numpy(index):
    """A value kept in the msgpack file: the same basic indexing on the stored array."""
    stored = np.arange(32, dtype=np.int16).reshape(8, 4)
    leaf = lazy.LazyArray(
        ockpt.reader.lazy.SavedLeaf(("v",), "v", "inline", "inline", stored), None, stored
    )
    want = stored[index]
    got = leaf[index]
    assert isinstance(got, np.ndarray) == (np.ndim(want) > 0) and np.shape(got) == np.shape(want)
    assert np.array_equal(got, want) and got.dtype == np.int16


def test_slices_read_only_the_region_they_touch(monkeypatch):
    seen = _boxes_read(monkeypatch)
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy = ckpt["xy"]
        assert np.array_equal(xy[2:4, 1:3], _xy()[2:4, 1:3])
        assert seen == [("xy", [(2, 4), (1, 3)])]
        seen.clear()
        assert xy[5, 3] == _xy()[5, 3]
        assert seen == [("xy", [(5, 6), (3, 4)])]
        seen.clear()
        assert np.array_equal(xy[7::-4, 3], _xy()[7::-4, 3])  # rows 7 and 3
        assert seen == [("xy", [(3, 8), (3, 4)])]
        seen.clear()
        empty = xy[3:3, 1:2]  # nothing asked for: nothing read
        assert empty.shape == (0, 1) and empty.dtype == np.float32 and seen == []
        empty = xy[5:2, 1]
        assert empty.shape == (0,) and empty.dtype == np.float32 and seen == []


def test_an_empty_slice_of_a_stored_leaf_opens_no_view(monkeypatch):
    """An empty slice is made without asking the engine for anything."""

    def refuse(self, index):  # type: ignore[no-untyped-def]
        raise AssertionError(f"view {index}")

    monkeypatch.setattr(PythonArray, "view", refuse)
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        got = ckpt["xy"][2:2, ::-1]
        assert got.shape == (0, 4) and got.dtype == np.float32
        got = ckpt["bf16_x"][..., 1:1]
        assert got.shape == (4, 0) and got.dtype == ckpt["bf16_x"].dtype


def test_the_engine_is_asked_for_forward_slices_and_ints(monkeypatch):
    """The view asked of the engine: positive steps, stops one past the last element taken,
    ints made non-negative; reversals and new axes are applied to what it gives."""
    asked = []
    original = PythonArray.view

    def record(self, index):  # type: ignore[no-untyped-def]
        asked.append(index)
        return original(self, index)

    monkeypatch.setattr(PythonArray, "view", record)
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy = ckpt["xy"]
        xy[1::2, -1]
        xy[7::-2, None]
        xy[::-3, 0:4:5]
        xy[..., np.int64(-4)]
    assert asked == [
        (slice(1, 8, 2), 3),
        (slice(1, 8, 2), slice(0, 4, 1)),
        (slice(1, 8, 3), slice(0, 1, 5)),
        (slice(0, 8, 1), 0),
    ]


@pytest.mark.parametrize(
    "index", [np.s_[8], np.s_[-9], np.s_[0, 4], np.s_[1, -5], np.s_[..., 4], np.s_[None, 0, 9]]
)
def test_an_int_out_of_bounds_is_numpys_index_error(index):
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        with pytest.raises(IndexError) as info:
            ckpt["xy"][index]
    assert str(info.value) == _numpy_error(IndexError, (8, 4), index)


@pytest.mark.parametrize("index", [np.s_[0, 0, 0], np.s_[..., 0, 0, 0], np.s_[:, :, None, 1]])
def test_too_many_indices_is_numpys_index_error(index):
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        with pytest.raises(IndexError) as info:
            ckpt["xy"][index]
    assert str(info.value) == _numpy_error(IndexError, (8, 4), index)


def test_two_ellipses_are_numpys_index_error():
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        with pytest.raises(IndexError) as info:
            ckpt["xy"][..., 0, ...]
    assert str(info.value) == _numpy_error(IndexError, (8, 4), np.s_[..., 0, ...])


@pytest.mark.parametrize(
    "index", [True, np.bool_(False), 1.0, "a", [0, 1], np.array([0, 1]), (0, slice(0, 1), 0.5)]
)
def test_only_basic_indexing(index):
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        with pytest.raises(TypeError) as info:
            ckpt["xy"][index]
    bad = index[-1] if isinstance(index, tuple) else index
    assert str(info.value) == (
        f"only basic indexing (ints, slices, ..., None) is supported, got {bad!r}"
    )


def test_index_text():
    assert lazy._index_text(np.s_[0:2, ...]) == "[0:2, ...]"
    assert lazy._index_text(np.s_[::-2, None, 3]) == "[::-2, None, 3]"
    assert lazy._index_text(np.s_[1:]) == "[1:]"
    assert lazy._index_text(np.s_[:5:1]) == "[:5:1]"
    assert lazy._index_text(4) == "[4]"
    assert lazy._index_text(np.s_[...]) == "[...]"


# ---------------------------------------------------------------------------------------------
# What a read allocates, and what its failures say.


def _memory(monkeypatch, available: int) -> None:
    """Every allocation checked, against `available` bytes."""
    monkeypatch.setattr(ockpt.limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(ockpt.limits, "memory_available", lambda: available)


@pytest.mark.parametrize(
    "index,text,nbytes",
    [
        (np.s_[2:4, 1:3], "[2:4, 1:3]", 16),
        (np.s_[0:4, 1], "[0:4, 1]", 16),
        (np.s_[2:6, ::-3], "[2:6, ::-3]", 32),
        (np.s_[None, 7], "[None, 7]", 16),
        (np.s_[..., 3], "[..., 3]", 32),
    ],
)
def test_a_slice_is_checked_against_the_memory_available(monkeypatch, index, text, nbytes):
    """LIMIT-006: the bytes of the slice read (not of the leaf) are checked before reading;
    the refusal names the param, the slice as written and the array's file. (Each slice here
    needs at least a chunk's 16 bytes: the engine checks each chunk it decodes too.)"""
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy = ckpt["xy"]
        file = xy._array.file
        _memory(monkeypatch, nbytes)
        assert np.array_equal(xy[index], _xy()[index])
        _memory(monkeypatch, nbytes - 1)
        with pytest.raises(MemoryLimitError) as info:
            xy[index]
    assert_error(info, rule="LIMIT-006", file=file)
    assert info.value.message.startswith(f"param 'xy' at {text} needs {nbytes} bytes,")


def _failing_view(monkeypatch, error: Exception) -> None:
    class Failing:
        def read(self):  # type: ignore[no-untyped-def]
            return self

        def result(self):  # type: ignore[no-untyped-def]
            raise error

    monkeypatch.setattr(PythonArray, "view", lambda self, index: Failing())


def test_a_read_that_fails_names_the_param_and_the_slice(monkeypatch):
    """LOAD-041: an engine's own ValueError (tensorstore's, for one) becomes a
    `MissingDataError` naming the param, the slice as written and the array's file."""
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy = ckpt["xy"]
        _failing_view(monkeypatch, ValueError("boom"))
        with pytest.raises(MissingDataError) as info:
            xy[1:3, ::2]
    assert_error(
        info,
        rule="LOAD-041",
        file=xy._array.file,
        message="cannot read param 'xy' at [1:3, ::2]: boom",
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_read_error_of_ockpt_passes_unchanged(monkeypatch):
    """An `OckptError` (itself a ValueError) names its own rule: it is not wrapped."""
    error = FormatError("bad chunk", rule="ZARR-003", file="somewhere")
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy = ckpt["xy"]
        _failing_view(monkeypatch, error)
        with pytest.raises(FormatError) as info:
            xy[0]
    assert info.value is error


def test_a_lazy_read_is_held_to_the_limits_it_was_opened_with(monkeypatch):
    """The limits given to `open` are in force while a slice is read later, outside any
    `applied` block; inside another block, still the checkpoint's."""
    in_force = []
    original = PythonArray.view

    def record(self, index):  # type: ignore[no-untyped-def]
        in_force.append(ockpt.limits.current())
        return original(self, index)

    monkeypatch.setattr(PythonArray, "view", record)
    mine = ockpt.limits.Limits(max_depth=33)
    with ockpt.open(SHARDED / "checkpoint", backend="python", limits=mine) as ckpt:
        xy = ckpt["xy"]
        assert xy.limits is mine
        assert xy[0, 0] == _xy()[0, 0]
        with ockpt.limits.applied(ockpt.limits.Limits(max_depth=34)):
            xy[1]
        assert in_force == [mine, mine]
        with ockpt.limits.applied(mine):
            xy[2]
        assert in_force == [mine, mine, mine]


# ---------------------------------------------------------------------------------------------
# The lazy array's attributes.


def test_attributes_of_a_stored_leaf():
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        xy, bf = ckpt["xy"], ckpt["bf16_x"]
        assert (xy.shape, xy.dtype, xy.chunk_shape) == ((8, 4), np.dtype(np.float32), (2, 2))
        assert (xy.ndim, xy.size, xy.nbytes, len(xy)) == (2, 32, 128, 8)
        assert (bf.ndim, bf.size, bf.nbytes, len(bf)) == (2, 8, 16, 4)
        assert bf.dtype.name == "bfloat16"
        assert xy.param_name == "xy" and xy.value_type == "jax.Array"
        assert xy.random_key_impl is None
        assert repr(xy) == "LazyArray('xy', shape=(8, 4), dtype=float32)"
        assert xy.limits is ockpt.limits.LIMITS


def test_attributes_of_scalars_and_inline_leaves():
    with ockpt.open(SCALARS / "checkpoint", backend="python") as ckpt:
        n = ckpt["int"]
        assert (n.shape, n.ndim, n.size, n.nbytes, n.value_type) == ((), 0, 1, 8, "scalar")
        with pytest.raises(TypeError, match=r"^len\(\) of a 0-d array$"):
            len(n)
    with ockpt.open(AGGREGATED / "checkpoint", backend="python") as ckpt:
        v = ckpt["int32_2d"]
        assert isinstance(v, ockpt.LazyArray) and v.chunk_shape is None
        assert (v.shape, v.dtype, v.ndim, v.size, v.nbytes, len(v)) == (
            (2, 3),
            np.dtype(np.int32),
            2,
            6,
            24,
            2,
        )
        assert v.value_type == "np.ndarray" and v.random_key_impl is None
        assert repr(v) == "LazyArray('int32_2d', shape=(2, 3), dtype=int32)"
        empty = ckpt["empty"]
        assert (empty.shape, empty.size, empty.nbytes, len(empty)) == ((0, 3), 0, 0, 0)


def test_read_and_asarray():
    exp = expected_items(SCALARS)[""]
    with ockpt.open(SCALARS / "checkpoint", backend="python") as ckpt:
        got = ckpt["np_float32"].read()
        assert type(got) is np.float32 and got == exp["np_float32"]
        got = ckpt["int"].read()
        assert type(got) is np.int64 and got == 42
        assert np.asarray(ckpt["int"]).dtype == np.int64
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        whole = ckpt["xy"].read()
        assert isinstance(whole, np.ndarray) and np.array_equal(whole, _xy())
        arr = np.asarray(ckpt["xy"])
        assert arr.dtype == np.float32 and np.array_equal(arr, _xy())
        wide = np.asarray(ckpt["xy"], dtype=np.float64)
        assert wide.dtype == np.float64 and np.array_equal(wide, _xy())
        assert np.array_equal(ckpt["xy"].__array__(np.int64), _xy().astype(np.int64))
    with ockpt.open(AGGREGATED / "checkpoint", backend="python") as ckpt:
        want = expected_items(AGGREGATED)[""]
        assert_same(ckpt["int32_2d"].read(), want["int32_2d"])
        assert type(ckpt["float"].read()) is np.float64 and ckpt["float"].read() == want["float"]


def test_a_0d_leaf_saved_as_an_array_reads_as_its_scalar():
    """A 0-d array leaf (not a scalar) comes back as a numpy scalar from a slice, and as a 0-d
    array from `read` only where its value type says scalar; both hold the stored value."""
    zero = FIXTURES / "orbax-0.12.8" / "zero_d_and_edge"
    want = expected_items(zero)[""]
    with ockpt.open(zero / "checkpoint", backend="python") as ckpt:
        leaf = ckpt["zd_i64_min"]
        assert leaf[...] == want["zd_i64_min"] and np.ndim(leaf[...]) == 0
        assert leaf[None].shape == (1,)


# ---------------------------------------------------------------------------------------------
# Typed keys.


def test_a_key_leaf_reads_as_a_random_key_without_jax(monkeypatch):
    """LOAD-025: `read` gives the key (its implementation and data) where jax is not loaded;
    slices give its uint32 key data."""
    monkeypatch.setattr(_jax, "jax_loaded", lambda: False)
    want = expected_items(KEYS)[""]
    with ockpt.open(KEYS / "checkpoint", backend="python") as ckpt:
        rbg = ckpt["rngs/rbg"]
        assert rbg.random_key_impl == "rbg" and rbg.dtype == np.uint32 and rbg.shape == (4,)
        key = rbg.read()
        assert isinstance(key, RandomKey) and key.impl == "rbg"
        assert_same(key, want["rngs"]["rbg"])
        grid = ckpt["rngs"]["grid"]
        assert grid.random_key_impl == "threefry2x32"
        assert_same(grid.read(), want["rngs"]["grid"])
        assert grid[1:3, 0].shape == (2, 2) and grid[1:3, 0].dtype == np.uint32
        assert ckpt["legacy/prng_key"].random_key_impl is None
        assert isinstance(ckpt["legacy/prng_key"].read(), np.ndarray)


def test_a_key_leaf_reads_as_a_jax_key_where_jax_is_loaded():
    jax = pytest.importorskip("jax")
    want = expected_items(KEYS)[""]["rngs"]
    with ockpt.open(KEYS / "checkpoint", backend="python") as ckpt:
        key = ckpt["rngs/split"].read()
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    assert_same(key, want["split"])


def test_a_key_whose_data_is_not_its_implementations_names_the_array(tmp_path):
    """ARRM-002: a key recorded as `rbg` (4 words) whose stored array ends in 2 words."""
    item = tmp_path / "item"
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "random_keys" / "checkpoint", item)
    record_key_impl(item, "rngs.grid", "rbg")
    with ockpt.open(item, backend="python") as ckpt:
        grid = ckpt["rngs/grid"]
        assert grid.random_key_impl == "rbg" and grid[0].shape == (2, 2)
        with pytest.raises(FormatError) as info:
            grid.read()
    assert_error(info, rule="ARRM-002", file=f"{item}/manifest.ocdbt", pointer="rngs.grid")


# ---------------------------------------------------------------------------------------------
# Mapped reads.


def test_mapped_reads_share_the_checkpoints_maps(tmp_path):
    tree = {"a": np.arange(4096, dtype=np.float32), "b": np.arange(3000, dtype=np.int64)}
    item = tmp_path / "item"
    ockpt.save_pytree(item, tree, layout="item", compression=None)
    with ockpt.open(item, backend="python") as ckpt:
        a = ckpt["a"].read(mmap="require")
        b = ckpt["b"].read(mmap=True)
        assert np.array_equal(a, tree["a"]) and np.array_equal(b, tree["b"])
        assert not a.flags.writeable and not b.flags.writeable
        assert backing_map(a) is not None and backing_map(a) is backing_map(b)
        read = ckpt["a"].read()
        assert read.flags.writeable and backing_map(read) is None


def test_a_mapped_scalar_is_a_scalar(tmp_path):
    """A scalar stored raw in its own chunk file (a per-leaf item) maps; `read` gives it as
    the numpy scalar it was saved as, like an unmapped read."""
    item = tmp_path / "item"
    tree = {"s": np.float64(1.5), "a": np.arange(3.0)}
    ockpt.save_pytree(item, tree, layout="item", compression=None, use_ocdbt=False)
    with ockpt.open(item, backend="python") as ckpt:
        s = ckpt["s"].read(mmap="require")
        assert type(s) is np.float64 and s == 1.5
        a = ckpt["a"].read(mmap="require")
        assert isinstance(a, np.ndarray) and a.shape == (3,) and not a.flags.writeable


def test_a_mapped_0d_array_stays_an_array(tmp_path):
    """A 0-d leaf saved as an array (not a scalar) maps as a 0-d array; a slice of it, read,
    gives the numpy scalar."""
    item = tmp_path / "item"
    ockpt.save_pytree(item, {"z": np.array(2.5)}, layout="item", compression=None, use_ocdbt=False)
    with ockpt.open(item, backend="python") as ckpt:
        z = ckpt["z"]
        assert z.value_type == "np.ndarray" and z.shape == ()
        got = z.read(mmap="require")
        assert isinstance(got, np.ndarray) and got.shape == () and got == 2.5
        assert not got.flags.writeable
        assert type(z.read()) is np.float64


def test_a_lazy_array_made_without_the_checkpoints_maps_has_its_own(tmp_path):
    item = tmp_path / "item"
    tree = {"a": np.arange(4096, dtype=np.float32)}
    ockpt.save_pytree(item, tree, layout="item", compression=None)
    with ockpt.open(item, backend="python") as ckpt:
        leaf = ckpt._item.leaves["a"]
        array = ckpt._item.arrays(["a"])["a"]
        lone = ockpt.LazyArray(leaf, array)
        got = lone.read(mmap="require")
        assert np.array_equal(got, tree["a"]) and not got.flags.writeable
        assert backing_map(got) is not backing_map(ckpt["a"].read(mmap=True))


def test_a_value_of_the_msgpack_file_cannot_be_mapped():
    with ockpt.open(AGGREGATED / "checkpoint", backend="python") as ckpt:
        leaf = ckpt["int32_2d"]
        assert_same(leaf.read(mmap=True), expected_items(AGGREGATED)[""]["int32_2d"])
        with pytest.raises(TargetError) as info:
            leaf.read(mmap="require")
    assert_error(
        info,
        rule="LOAD-034",
        leaf="int32_2d",
        message="cannot map the leaf into memory: it is kept in the checkpoint's msgpack file",
    )


# ---------------------------------------------------------------------------------------------
# Subtrees.


def test_a_subtree_is_a_mapping_of_its_leaves():
    want = expected_items(KEYS)[""]
    with ockpt.open(KEYS / "checkpoint", backend="python") as ckpt:
        params = ckpt["params"]
        assert isinstance(params, ockpt.Subtree) and not isinstance(params, ockpt.Checkpoint)
        assert params.name == "params" and params.key_path == ("params",)
        assert params.keys() == ["b", "w"] and list(params) == ["b", "w"] and len(params) == 2
        assert repr(params) == "Subtree('params', 2 leaves)"
        assert "w" in params and ("w",) in params and "b" in params
        assert "params/w" not in params and "x" not in params and object() not in params
        assert [k for k, _ in params.items()] == ["b", "w"]
        assert_same(params["w"][...], want["params"]["w"])
        assert_same(params.values()[1][...], want["params"]["w"])
        assert_same(params.items()[0][1][...], want["params"]["b"])
        assert params.get("w").shape == (8, 2)
        assert params.get("nope") is None and params.get("nope", 7) == 7
        dropout = ckpt["rngs"]["nested"]
        assert dropout.name == "rngs/nested" and dropout.key_path == ("rngs", "nested")
        assert dropout.keys() == ["dropout/key"] and "dropout.key" in dropout
        assert dropout["dropout.key"].param_name == "rngs.nested.dropout.key"
        assert dropout.metadata == ckpt.metadata["rngs"]["nested"]


def test_sequences_and_empty_nodes_of_a_subtree():
    with ockpt.open(NESTED / "checkpoint", backend="python") as ckpt:
        layers = ckpt["layers"]
        assert layers[1]["w"].param_name == "layers.1.w" and layers[1]["b"] is None
        assert layers[0].key_path == ("layers", "0") and layers[0].name == "layers/0"
        assert layers[0].metadata == ckpt.metadata["layers"][0]
        assert ckpt["layers", "0"].metadata["w"].shape == (2, 3)
        opt = ckpt["opt"]
        assert opt.metadata == ckpt.metadata["opt"] and opt[2] == () and opt["1/mu"].keys() == ["w"]
        assert ckpt["empty_dict"] == {} and ckpt["empty_list"] == [] and ckpt["none"] is None
        assert ckpt.get("empty_list") == [] and "empty_dict" in ckpt
        assert ckpt["layers/1"].keys() == ["w"] and len(ckpt["layers/1"]) == 1


def test_an_unknown_name_in_a_subtree_says_so():
    path = KEYS / "checkpoint"
    with ockpt.open(path, backend="python") as ckpt:
        with pytest.raises(LeafNameError) as info:
            ckpt["params"]["wx"]
        assert_error(
            info,
            rule="PATH-007",
            file=str(path),
            name="wx",
            close=("w",),
            message="no leaf or subtree named 'wx'; did you mean 'w'? (in the subtree 'params')",
        )
        with pytest.raises(LeafNameError) as info:
            ckpt["paramz"]
        assert_error(info, rule="PATH-007", file=str(path), name="paramz")
        assert "(in the subtree" not in info.value.message
        with pytest.raises(LeafNameError) as info:
            ckpt["rngs"]["a//b"]
        assert_error(info, rule="PATH-006", file=str(path))
        assert info.value.message.endswith(" (in the subtree 'rngs')")


def test_a_subtree_loads_with_the_options_of_load_pytree(tmp_path):
    want = expected_items(KEYS)[""]["params"]
    with ockpt.open(KEYS / "checkpoint", backend="python") as ckpt:
        params = ckpt["params"]
        assert_same(params.load(), want)
        got = params.load({"w": np.zeros((8, 2), np.float32)}, partial=True)
        assert list(got) == ["w"] and np.array_equal(got["w"], want["w"])
        with pytest.raises(TargetError) as info:
            params.load({"w": np.zeros((8, 2), np.float32)})
        assert info.value.rule == "LOAD-002"
        with pytest.raises(TargetError) as info:
            params.load({"b": np.zeros(2, np.int32), "w": ...})
        assert info.value.rule == "LOAD-020"
        got = params.load({"b": np.zeros(2, np.int32), "w": ...}, cast="lossy")
        assert np.array_equal(got["b"], want["b"].astype(np.int32))
        with pytest.raises(TargetError) as info:
            params.load({"b": np.zeros(3, np.float32), "w": ...})
        assert info.value.rule == "LOAD-030"
        got = params.load({"b": np.zeros(3, np.float32), "w": ...}, pad_or_truncate=True)
        assert got["b"].tolist() == [*want["b"].tolist(), 0.0]
        got = params.load(max_in_flight=1)
        assert_same(got, want)
        with pytest.raises(ValueError):
            params.load(max_in_flight=0)
    tree = {"p": {"a": np.arange(4096, dtype=np.float32)}}
    ockpt.save_pytree(tmp_path / "raw", tree, layout="item", compression=None)
    with ockpt.open(tmp_path / "raw", backend="python") as ckpt:
        got = ckpt["p"].load(mmap="require")
        assert not got["a"].flags.writeable and np.array_equal(got["a"], tree["p"]["a"])
        assert ckpt["p"].load()["a"].flags.writeable


def test_the_stored_param_names_resolve_at_the_root_only(tmp_path):
    """A msgpack placeholder names its array by the param name it was stored under, which need
    not be its path's: the checkpoint finds a leaf by it too; a subtree only by its own."""
    item = tmp_path / "item"
    item.mkdir()
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint" / "a", item / "stored")
    (item / "checkpoint").write_bytes(msgpack.packb({"s": {"w": "PLACEHOLDER://stored"}}))
    want = expected_items(FIXTURES / "orbax-0.12.8" / "no_ocdbt")[""]["a"]
    with ockpt.open(item, backend="python") as ckpt:
        assert ckpt.keys() == ["s/w"]
        assert "stored" in ckpt and np.array_equal(ckpt["stored"][...], want)
        assert ckpt["s.w"].param_name == "stored"
        sub = ckpt["s"]
        assert "w" in sub and "stored" not in sub and "s.w" not in sub
        assert np.array_equal(sub["w"][...], want)


# ---------------------------------------------------------------------------------------------
# The checkpoint.


def test_the_checkpoint_says_what_it_opened():
    path = SHARDED / "checkpoint"
    with ockpt.open(path, backend="python") as ckpt:
        assert isinstance(ckpt, ockpt.Checkpoint)
        assert ckpt.path == str(path) and ckpt.name == "" and ckpt.key_path == ()
        assert ckpt.resolved.location.display == str(path) and ckpt.resolved.step is None
        assert repr(ckpt) == f"Checkpoint({str(path)!r}, 8 leaves)"
        meta = ckpt.metadata
        assert meta is ckpt.metadata and meta == ockpt.pytree_metadata(path)
        assert ckpt["xy"].limits is ockpt.limits.LIMITS


def test_strings_and_inline_values():
    want = expected_items(AGGREGATED)[""]
    with ockpt.open(AGGREGATED / "checkpoint", backend="python") as ckpt:
        assert ckpt["str"] == "hello" and ckpt["nested/list/2"] == "x"
        assert ckpt["point"]["y"] == "y"
        assert_same(ckpt["nested/list/3/0"][...], want["nested"]["list"][3][0])
    with ockpt.open(SCALARS / "checkpoint", backend="python") as ckpt:
        assert ckpt["nested"]["names"][1] == "beta" and ckpt["str_empty"] == ""


def test_inline_bytes_and_text(tmp_path):
    item = tmp_path / "item"
    item.mkdir()
    (item / "checkpoint").write_bytes(msgpack.packb({"raw": b"xyz", "text": "h\u00e9", "n": 3}))
    with ockpt.open(item, backend="python") as ckpt:
        assert ckpt["raw"] == b"xyz" and ckpt["text"] == "h\u00e9"
        n = ckpt["n"]
        assert isinstance(n, ockpt.LazyArray) and n[...] == 3 and n.shape == ()


def test_close_and_the_with_block(monkeypatch):
    closed = []
    original = OpenedItem.close

    def close(self):  # type: ignore[no-untyped-def]
        closed.append(self)
        original(self)

    monkeypatch.setattr(OpenedItem, "close", close)
    with ockpt.open(SHARDED / "checkpoint", backend="python") as ckpt:
        assert isinstance(ckpt, ockpt.Checkpoint) and closed == []
        first = ckpt["xy"][0]
    assert closed == [ckpt._item]
    assert np.array_equal(ckpt["xy"][0], first)  # a later read opens what it needs again
    ckpt.close()
    assert len(closed) == 2


def test_what_open_is_asked_reaches_the_item(monkeypatch):
    seen = []

    class Recording(OpenedItem):
        def __init__(self, path, **kw):  # type: ignore[no-untyped-def]
            seen.append(kw)
            super().__init__(path, **{**kw, "context": None})

    monkeypatch.setattr(lazy, "OpenedItem", Recording)
    root = MANAGER / "checkpoint"
    context, limits = object(), ockpt.limits.Limits()
    ckpt = ockpt.open(root, step=0, item="params", context=context, backend="python", limits=limits)
    assert ckpt.resolved.step.step == 0
    ockpt.open(root)
    assert seen == [
        {"step": 0, "item": "params", "context": context, "backend": "python", "limits": limits},
        {"step": None, "item": None, "context": None, "backend": "auto", "limits": None},
    ]


def test_open_takes_a_step_and_an_item():
    items = expected_items(MANAGER)
    with ockpt.open(MANAGER / "checkpoint", step=1, item="params") as ckpt:
        got = ckpt.load()
    assert_same(got, items["1/params"])
    with ockpt.open(MANAGER / "checkpoint") as ckpt:
        assert_same(ckpt.load(), items["2/params"])
    with pytest.raises(ValueError, match="backend must be"):
        ockpt.open(MANAGER / "checkpoint", backend="nope")


def test_a_metadata_document_changed_later_is_not_reread(tmp_path):
    """`metadata` is computed once per checkpoint."""
    item = tmp_path / "item"
    ockpt.save_pytree(item, {"a": np.zeros(3, np.float32)}, layout="item")
    with ockpt.open(item, backend="python") as ckpt:
        first = ckpt.metadata
        doc = json.loads((item / "_METADATA").read_text())
        (item / "_METADATA").write_text(json.dumps(doc) + " ")
        assert ckpt.metadata is first and ckpt["a"].shape == (3,)
