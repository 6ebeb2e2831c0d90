"""`ockpt.torch.load_state_dict` on real Orbax fixtures (spec/loading.md §9.1): names, dtypes
(bfloat16 and float8 kept, zero copy), scalars, strings, widening, refusals."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest

import ockpt
from ockpt import dtypes
from ockpt.sources import OrbaxSource
from ockpt.torch import state_dict
from ockpt.torch.runtime import import_torch
from ockpt.torch.state_dict import WIDE_NAMES, to_tensor

torch = pytest.importorskip("torch", reason="ockpt.torch needs PyTorch (the torch extra)")

from tests.support import FIXTURES, flat_leaves  # noqa: E402

#: Fixtures of several releases with arrays (sharded, multi-process, chunked, bfloat16), scalars,
#: strings, lists and odd keys, typed PRNG keys.
CASES = [
    "orbax-0.12.8/sharded",
    "orbax-0.12.8/multiprocess",
    "orbax-0.12.8/scalars_strings",
    "orbax-0.12.8/chunk_subdivision",
    "orbax-0.12.8/nested",
    "orbax-0.12.8/zero_d_and_edge",
    "orbax-0.12.8/odd_keys",
    "orbax-0.12.8/random_keys",
    "orbax-0.10.3/sharded",
    "orbax-0.4.8/scalars_strings",
    "orbax-0.5.15/msgpack_lossy",
    "orbax-0.3.5/nested",
]


def _bits(value: object) -> bytes:
    """The bytes of a tensor or array (NaN payloads and -0.0 compare)."""
    if isinstance(value, torch.Tensor):
        return value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(value).tobytes()


def _host(value: object) -> object:
    """A leaf of `load_pytree` as a numpy array (a typed key as its key data) or a str."""
    if isinstance(value, str):
        return value
    if isinstance(value, ockpt.RandomKey):
        return np.asarray(value.data)
    jax = sys.modules.get("jax")  # imported by another test: keys load as typed jax keys
    if jax is not None and jax.dtypes.issubdtype(
        getattr(value, "dtype", None), jax.dtypes.prng_key
    ):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


@pytest.mark.parametrize("case", CASES)
def test_load_060_to_062_state_dict_matches_load_pytree(case):
    """Names are key texts joined with '.' (LOAD-060); every array is a tensor of the dtype of
    the same name with the same bits, 0-d leaves 0-d tensors (LOAD-061, LOAD-062); strings
    are str; None and empty containers are left out."""
    path = FIXTURES / case / "checkpoint"
    if not path.exists():
        pytest.skip(f"{case} is not in this checkout")
    want = {
        ".".join(map(str, key)): _host(v)
        for key, v in flat_leaves(ockpt.load_pytree(path))
        if v is not None
    }
    got = ockpt.torch.load_state_dict(path)
    assert list(got) == [k for k in want if k in got] and set(got) == set(want)
    for name, value in got.items():
        expected = want[name]
        if isinstance(expected, str):
            assert value == expected, name
            continue
        assert isinstance(value, torch.Tensor), name
        assert str(value.dtype) == f"torch.{expected.dtype.name}", name
        assert tuple(value.shape) == expected.shape, name
        assert _bits(value) == _bits(expected), name


def test_load_062_scalars_are_0d_tensors_and_strings_str():
    sd = ockpt.torch.load_state_dict(FIXTURES / "orbax-0.12.8/scalars_strings/checkpoint")
    assert sd["int"].shape == () and sd["int"].dtype == torch.int64 and sd["int"].item() == 42
    assert sd["float_neg_zero"].shape == () and str(sd["float_neg_zero"].item()) == "-0.0"
    assert sd["np_uint64"].item() == 2**64 - 1
    assert sd["str"] == "hello" and sd["nested.names.1"] == "beta"


def test_load_062_strings_skip_or_refuse():
    path = FIXTURES / "orbax-0.12.8/multiprocess/checkpoint"
    assert ockpt.torch.load_state_dict(path)["name"] == "two processes"
    kept = ockpt.torch.load_state_dict(path, strings="skip")
    assert "name" not in kept and "step" in kept
    with pytest.raises(ockpt.UnsupportedError, match="'name' is a string") as e:
        ockpt.torch.load_state_dict(path, strings="error")
    assert e.value.rule == "LOAD-062"
    with pytest.raises(ValueError, match="strings must be"):
        ockpt.torch.load_state_dict(path, strings="drop")  # type: ignore[arg-type]


def test_arrays_are_not_copied(monkeypatch):
    """Each tensor's data is the buffer of the array ockpt read, bfloat16 included."""
    read: dict[tuple[str, ...], np.ndarray] = {}
    original = OrbaxSource.read

    def recording(self, leaf, index=...):  # type: ignore[no-untyped-def]
        value = original(self, leaf, index)
        read[leaf.key] = value
        return value

    monkeypatch.setattr(OrbaxSource, "read", recording)
    sd = ockpt.torch.load_state_dict(FIXTURES / "orbax-0.12.8/sharded/checkpoint")
    assert sd["bf16_x"].dtype == torch.bfloat16
    for name, tensor in sd.items():
        array = read[tuple(name.split("."))]
        assert tensor.data_ptr() == array.ctypes.data, name


@pytest.mark.parametrize("name", dtypes.TORCH_NAMES)
def test_load_061_every_torch_dtype_zero_copy(name):
    """Every dtype torch has keeps its name and bits, sharing the array's memory (the
    ml_dtypes ones through the unsigned integer of the same width); 0-d stays 0-d."""
    dtype = dtypes.SUPPORTED[name]
    array = np.arange(96, dtype=np.uint8).view(dtype).reshape(2, -1)
    tensor = to_tensor(array, name=name)
    assert tensor.dtype == getattr(torch, name)
    assert tensor.data_ptr() == array.ctypes.data
    assert _bits(tensor) == array.tobytes()
    scalar = to_tensor(array[0, 0], name=name)
    assert scalar.shape == () and _bits(scalar) == array[0, 0].tobytes()


def test_read_only_and_swapped_buffers_are_copied_once():
    frozen = np.arange(4, dtype=np.float32)
    frozen.flags.writeable = False
    assert to_tensor(frozen, name="x").tolist() == [0, 1, 2, 3]
    swapped = np.arange(3, dtype=">i4")
    assert to_tensor(swapped, name="x").tolist() == [0, 1, 2]


def test_load_061_dtypes_torch_lacks_are_refused_naming_the_leaf():
    path = FIXTURES / "orbax-0.12.8/dtype_bit_patterns/checkpoint"
    with pytest.raises(ockpt.UnsupportedError, match="leaf 'float4_e2m1fn'.*float4_e2m1fn") as e:
        ockpt.torch.load_state_dict(path)
    assert e.value.rule == "LOAD-061" and "dtype_bit_patterns" in str(e.value.file)
    with pytest.raises(ockpt.UnsupportedError, match="leaf 'int4'"):
        ockpt.torch.load_state_dict(path, select=["int4"])
    kept = ockpt.torch.load_state_dict(path, select=["bfloat16", "float8_e4m3fn"])
    assert [t.dtype for t in kept.values()] == [torch.bfloat16, torch.float8_e4m3fn]


def test_load_061_widen_is_exact():
    """widen=True: the first of WIDE_NAMES whose cast is exact; every value kept (§4.2)."""
    path = FIXTURES / "orbax-0.12.8/dtype_bit_patterns/checkpoint"
    want = ockpt.load_pytree(path)
    got = ockpt.torch.load_state_dict(path, widen=True)
    lacking = [n for n in want if want[n].dtype.name not in dtypes.TORCH_NAMES]
    assert {"int4", "int2", "float4_e2m1fn", "float8_e3m4"} <= set(lacking)
    for name in lacking:
        stored = want[name]
        wide = next(w for w in WIDE_NAMES if dtypes.cast_kind(stored.dtype, w) == "exact")
        assert got[name].dtype == getattr(torch, wide), name
        back = got[name].numpy().astype(np.float64)
        np.testing.assert_array_equal(back, stored.astype(np.float64), err_msg=name)
    assert got["int4"].dtype == torch.int8
    assert got["float8_e3m4"].dtype == torch.float16


def test_load_060_sep_select_and_names_that_collide(tmp_path):
    path = FIXTURES / "orbax-0.12.8/nested/checkpoint"
    slashed = ockpt.torch.load_state_dict(path, sep="/", select=["layers/**"])
    assert slashed and all(k.startswith("layers/") for k in slashed)
    with pytest.raises(ockpt.LeafNameError) as e:
        ockpt.torch.load_state_dict(path, select=["no/such/leaf"])
    assert e.value.rule == "PATH-007"
    # Orbax refuses two key paths with one param name (PATH-001), so '.' cannot collide in a
    # checkpoint it wrote; '/' can.
    tree = {"a/b": np.zeros(2, np.float32), "a": {"b": np.ones(2, np.float32)}}
    ockpt.save_pytree(tmp_path / "ckpt", tree)
    with pytest.raises(ValueError, match="both join to 'a/b'") as e:
        ockpt.torch.load_state_dict(tmp_path / "ckpt", sep="/")
    assert e.value.rule == "LOAD-060"
    sd = ockpt.torch.load_state_dict(tmp_path / "ckpt")
    assert sd["a/b"].tolist() == [0, 0] and sd["a.b"].tolist() == [1, 1]


def test_bfloat16_values_are_the_saved_ones():
    path = FIXTURES / "orbax-0.12.8/chunk_subdivision/checkpoint"
    got = ockpt.torch.load_state_dict(path, select=["np_bf16"])["np_bf16"]
    want = ockpt.load_pytree(path)["np_bf16"]
    assert want.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), want.astype(np.float32))


def test_without_torch_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ockpt.UnsupportedError, match="pip install torch"):
        import_torch("ockpt.torch.load_state_dict")


# --- torch/state_dict.py: torch_dtype_name, to_tensor, flat_leaves and load_state_dict's
# defaults, options passed on and refusals (rule, file, name, message) ---


def test_torch_dtype_name_refuses_by_default_what_torch_lacks() -> None:
    int4 = np.dtype(ml_dtypes.int4)
    with pytest.raises(ockpt.UnsupportedError) as e:
        state_dict.torch_dtype_name(int4, name="p.w", file="ck")
    assert e.value.rule == "LOAD-061" and e.value.file == "ck"
    assert e.value.message == (
        "leaf 'p.w': PyTorch has no tensor dtype int4; pass widen=True to load it as a wider "
        "dtype that holds its values exactly"
    )
    assert state_dict.torch_dtype_name(int4, name="p.w", widen=True) == "int8"
    assert state_dict.torch_dtype_name(np.dtype(np.float32), name="p.w") == "float32"


def test_to_tensor_refuses_by_default_naming_leaf_and_file() -> None:
    array = np.arange(4, dtype=np.int8).astype(ml_dtypes.int4)
    with pytest.raises(ockpt.UnsupportedError) as e:
        to_tensor(array, name="p.w", file="ck")
    assert e.value.file == "ck" and e.value.message.startswith("leaf 'p.w': ")
    assert to_tensor(array, name="p.w", widen=True).dtype == torch.int8


def test_read_only_and_swapped_buffers_keep_their_dtype() -> None:
    frozen = np.arange(4, dtype=np.float32)
    frozen.flags.writeable = False
    tensor = to_tensor(frozen, name="x")
    assert tensor.dtype == torch.float32 and tensor.tolist() == [0, 1, 2, 3]
    swapped = to_tensor(np.arange(3, dtype=">i4"), name="x")
    assert swapped.dtype == torch.int32 and swapped.tolist() == [0, 1, 2]


def test_flat_leaves_names_selects_and_refuses() -> None:
    path = FIXTURES / "orbax-0.12.8/nested/checkpoint"
    with OrbaxSource(path) as source:
        names = [n for n, _ in state_dict.flat_leaves(source)]
        assert names == [".".join(leaf.key) for leaf in source.leaves]
        assert any("." in n for n in names)
        first = names[0]
        assert [n for n, _ in state_dict.flat_leaves(source, select=first)] == [
            first
        ]  # one pattern
        with pytest.raises(ValueError) as e:
            state_dict.flat_leaves(source, sep="")
        assert str(e.value) == "sep must be a non-empty string"
        with pytest.raises(ockpt.LeafNameError) as e:
            state_dict.flat_leaves(source, select=["no/such/leaf"])
        assert e.value.rule == "PATH-007" and e.value.file == source.path


def test_flat_leaves_collision_names_the_flat_name_and_checkpoint(tmp_path) -> None:
    tree = {"a/b": np.zeros(2, np.float32), "a": {"b": np.ones(2, np.float32)}}
    ockpt.save_pytree(tmp_path / "ckpt", tree)
    with OrbaxSource(tmp_path / "ckpt") as source:
        with pytest.raises(ockpt.LeafNameError) as e:
            state_dict.flat_leaves(source, sep="/")
        assert e.value.rule == "LOAD-060"
        assert e.value.name == "a/b" and e.value.file == source.path


def test_load_state_dict_of_a_step_and_an_item() -> None:
    root = FIXTURES / "orbax-0.12.8/manager/checkpoint"
    assert ockpt.torch.load_state_dict(root)["step"].item() == 2  # the latest
    first = ockpt.torch.load_state_dict(root, step=0)
    assert first["step"].item() == 0 and first["b"].tolist() == list(range(8))
    steps = FIXTURES / "orbax-0.12.8/checkpointables_all/checkpoint"
    tree = ockpt.torch.load_state_dict(steps, item="tree")
    assert tree["s"] == "text" and tree["x"].tolist() == [0, 1, 2, 3, 4]
    assert "s" not in ockpt.torch.load_state_dict(steps)


def test_load_state_dict_refuses_a_string_naming_the_checkpoint() -> None:
    path = FIXTURES / "orbax-0.12.8/multiprocess/checkpoint"
    with pytest.raises(ockpt.UnsupportedError) as e:
        ockpt.torch.load_state_dict(path, strings="error")
    assert e.value.rule == "LOAD-062"
    assert e.value.file is not None and e.value.file.endswith("multiprocess/checkpoint")
    assert e.value.message == "leaf 'name' is a string, not a tensor; pass strings='keep' or 'skip'"


def test_load_state_dict_without_torch_names_itself(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ockpt.UnsupportedError) as e:
        ockpt.torch.load_state_dict(FIXTURES / "orbax-0.12.8/nested/checkpoint")
    assert e.value.message == (
        "ockpt.torch.load_state_dict needs PyTorch: pip install torch (or 'ockpt[torch]')"
    )
