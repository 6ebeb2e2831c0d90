"""The functions of ockpt/random_keys.py called directly: the key-data table, `key_data_shape`,
`key_shape` and `RandomKey` (shape, dtype, `__array__`, repr, `to_jax`), with their refusals
(ARRM-002). tests/test_random_keys.py saves and loads keys through Orbax, which the mutation runs
block; these need neither Orbax nor tensorstore."""

from __future__ import annotations

import numpy as np
import pytest

from ockpt.errors import FormatError, UnsupportedError
from ockpt.random_keys import KEY_DATA_SHAPES, RandomKey, key_data_shape, key_shape

# --- random_keys: key_data_shape, key_shape, RandomKey (shape, dtype, __array__, __repr__) ---


def test_key_data_shape_of_each_recorded_implementation() -> None:
    assert key_data_shape("threefry2x32") == (2,)
    assert key_data_shape("rbg") == (4,)
    assert key_data_shape("unsafe_rbg") == (4,)
    assert dict(KEY_DATA_SHAPES) == {"threefry2x32": (2,), "rbg": (4,), "unsafe_rbg": (4,)}


def test_key_data_shape_refuses_an_unknown_implementation_naming_leaf_file_and_known_ones() -> None:
    with pytest.raises(UnsupportedError) as e:
        key_data_shape("philox", file="array_metadatas/process_0", leaf="params.key")
    assert e.value.rule == "ARRM-002"
    assert e.value.file == "array_metadatas/process_0"
    text = str(e.value)
    assert text.startswith("array_metadatas/process_0: leaf 'params.key': typed PRNG key")
    assert "'philox'" in text and "known: threefry2x32, rbg, unsafe_rbg)" in text
    with pytest.raises(UnsupportedError) as e:
        key_data_shape("philox")
    assert e.value.rule == "ARRM-002" and e.value.file is None
    assert str(e.value).startswith("typed PRNG key implementation 'philox'")


def test_key_shape_drops_the_trailing_key_data_dimensions() -> None:
    u32 = np.dtype(np.uint32)
    assert key_shape("threefry2x32", (2,), u32) == ()
    assert key_shape("threefry2x32", (5, 2), u32) == (5,)
    assert key_shape("rbg", (3, 7, 4), u32) == (3, 7)
    assert key_shape("unsafe_rbg", [4], u32) == ()


@pytest.mark.parametrize(
    ("impl", "shape", "dtype"),
    [
        ("threefry2x32", (5, 2), np.int32),  # not uint32
        ("threefry2x32", (5, 2), np.uint64),
        ("threefry2x32", (2, 5), np.uint32),  # key data not last
        ("threefry2x32", (), np.uint32),  # too few dimensions
        ("rbg", (4, 2), np.uint32),
        ("rbg", (2,), np.uint32),
    ],
)
def test_key_shape_refuses_stored_data_that_is_not_uint32_key_data(impl, shape, dtype) -> None:
    with pytest.raises(FormatError) as e:
        key_shape(impl, shape, np.dtype(dtype), file="d/zarray", leaf="k")
    assert e.value.rule == "ARRM-002"
    assert e.value.file == "d/zarray"
    assert e.value.pointer == "k"
    data = KEY_DATA_SHAPES[impl]
    assert f"not uint32 [..., {', '.join(map(str, data))}]" in str(e.value)
    assert f"{np.dtype(dtype)} {list(shape)}" in str(e.value)


def test_key_shape_refuses_an_unknown_implementation_first() -> None:
    with pytest.raises(UnsupportedError) as e:
        key_shape("philox", (2,), np.dtype(np.uint32), file="f", leaf="k")
    assert e.value.rule == "ARRM-002" and e.value.file == "f"
    assert "leaf 'k'" in str(e.value)


def test_random_key_shape_dtype_array_and_repr() -> None:
    data = np.arange(12, dtype=np.uint32).reshape(3, 4)
    key = RandomKey("rbg", data)
    assert key.shape == (3,)
    assert key.dtype == "key<rbg>"
    assert np.asarray(key) is data
    as_i64 = np.asarray(key, dtype=np.int64)
    assert as_i64.dtype == np.int64 and np.array_equal(as_i64, data)
    direct = key.__array__(np.int64)  # the protocol itself: numpy casts its result again
    assert direct.dtype == np.int64 and np.array_equal(direct, data)
    assert key.__array__() is data
    assert repr(key) == "RandomKey(impl='rbg', shape=(3,))"
    one = RandomKey("threefry2x32", np.array([0, 42], dtype=np.uint32))
    assert one.shape == () and repr(one) == "RandomKey(impl='threefry2x32', shape=())"


def test_random_key_shape_refuses_data_that_is_not_key_data() -> None:
    with pytest.raises(FormatError) as e:
        _ = RandomKey("threefry2x32", np.zeros((3,), dtype=np.uint32)).shape
    assert e.value.rule == "ARRM-002"


def test_random_key_to_jax_wraps_the_key_data() -> None:
    jax = pytest.importorskip("jax")
    key = RandomKey("threefry2x32", np.array([[0, 42], [1, 2]], dtype=np.uint32)).to_jax()
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    assert str(jax.random.key_impl(key)) == "threefry2x32"
    assert np.array_equal(jax.random.key_data(key), [[0, 42], [1, 2]])
    rbg = RandomKey("rbg", np.arange(4, dtype=np.uint32)).to_jax()
    assert str(jax.random.key_impl(rbg)) == "rbg"
