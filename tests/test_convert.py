"""`ockpt.convert` on real-Orbax fixtures: what each output format's own library reads back is
bit-equal to what the fixture recorded; unsupported dtypes and names fail clearly; memory stays
near one leaf; a safetensors-built checkpoint restores in real Orbax."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import _record
import ml_dtypes
import numpy as np
import pytest

import ockpt
from ockpt.convert import convert, parse_size
from ockpt.errors import UnsupportedError
from ockpt.limits import Limits, applied
from ockpt.sources import open_source
from tests.support import FIXTURES

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

CASES = FIXTURES / "orbax-0.12.8"


def _arrays(case: str, item: str = "") -> dict[str, np.ndarray]:
    """Every array leaf of a fixture's record, by '.'-joined key path."""
    record = _record.load_expected(CASES / case)
    out = {}
    for path, node in _record.iter_nodes(record["items"][item]):
        if node["type"] in ("ndarray", "jax.Array"):
            out[".".join(str(p) for p in path)] = _record.load_array(node, CASES / case)
    return out


def _bits(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8).tobytes() if a.size else b""


def _st_tensors(path) -> dict[str, np.ndarray]:
    """Read with the safetensors library: numpy API, through torch for float8 when present."""
    out = {}
    with safe_open(str(path), framework="numpy") as f:
        for k in f.keys():
            try:
                out[k] = f.get_tensor(k)
            except (AttributeError, TypeError):  # float8: numpy has no such attribute
                torch = pytest.importorskip("torch")
                with safe_open(str(path), framework="pt") as g:
                    t = g.get_tensor(k)
                    width = {1: torch.uint8, 2: torch.int16}[t.element_size()]
                    raw = t.view(width).numpy()
                    out[k] = raw.view(getattr(ml_dtypes, str(t.dtype).split(".")[1]))
    return out


def test_safetensors_bit_equal_every_dtype(tmp_path):
    dst = tmp_path / "model.safetensors"
    result = convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst), skip_unsupported=True)
    assert dict(result.skipped).keys() == {"complex128", "int4"}
    got = _st_tensors(dst)
    want = _arrays("numpy_dtypes")
    assert set(got) == set(want) - {"complex128", "int4"}
    for name, tensor in got.items():
        assert tensor.dtype == want[name].dtype and tensor.shape == want[name].shape, name
        assert _bits(tensor) == _bits(want[name]), name


def test_safetensors_refuses_unsupported_with_clear_error(tmp_path):
    dst = tmp_path / "model.safetensors"
    with pytest.raises(UnsupportedError, match="complex128.*safetensors has no dtype"):
        convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst))
    with pytest.raises(UnsupportedError, match="complex128.*safetensors has no dtype"):
        convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst), widen=True)  # no wider
    assert not os.listdir(tmp_path)


def test_sharded_safetensors_follow_hf_index(tmp_path):
    dst = tmp_path / "model.safetensors"
    src = str(CASES / "sharded" / "checkpoint")
    result = convert(src, str(dst), max_shard_size="200B", sep="/")
    index_path = tmp_path / "model.safetensors.index.json"
    assert str(index_path) in result.files and not dst.exists()
    index = json.loads(index_path.read_text())
    want = _arrays("sharded")
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in want.values())
    assert set(index["weight_map"]) == set(want)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all(s.endswith(f"-of-{len(shards):05d}.safetensors") for s in shards)
    for shard in shards:
        got = _st_tensors(tmp_path / shard)
        assert sum(t.nbytes for t in got.values()) <= 200 or len(got) == 1
        for name, tensor in got.items():
            assert index["weight_map"][name] == shard
            assert _bits(tensor) == _bits(want[name])
    # and back: the index is a source too
    with open_source(str(index_path), sep="/") as source:
        assert {leaf.name("/") for leaf in source.leaves} == set(want)


def test_npz_loads_with_numpy_and_refuses_ml_dtypes(tmp_path):
    dst = tmp_path / "out.npz"
    with pytest.raises(UnsupportedError, match="bfloat16.*use safetensors or .pt"):
        convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst))
    result = convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst), skip_unsupported=True)
    assert {n for n, _ in result.skipped} == {"bfloat16", "float8_e4m3fn", "float8_e5m2", "int4"}
    want = _arrays("numpy_dtypes")
    with np.load(dst, allow_pickle=False) as data:
        assert set(data.files) == set(want) - {n for n, _ in result.skipped}
        for name in data.files:
            assert data[name].dtype == want[name].dtype and _bits(data[name]) == _bits(want[name])


def test_npz_keeps_strings_and_scalars(tmp_path):
    dst = tmp_path / "s.npz"
    src = str(CASES / "scalars_strings" / "checkpoint")
    with pytest.raises(UnsupportedError, match="NUL"):
        convert(src, str(dst))
    assert not dst.exists() and not list(tmp_path.iterdir())
    record = _record.load_expected(CASES / "scalars_strings")
    nodes = {".".join(map(str, p)): n for p, n in _record.iter_nodes(record["items"][""])}
    result = convert(src, str(dst), skip_unsupported=True)  # all but the NUL-ended string
    assert [n for n, _ in result.skipped] == ["str_json_special"]
    with np.load(dst) as data:
        assert str(data["str_unicode"]) == nodes["str_unicode"]["value"]
        assert data["int_min"].dtype == np.int64 and int(data["int_min"]) == -(2**63)


def _scalar_record() -> dict[str, dict]:
    """The scalars_strings fixture's leaves (scalars and strings) by '.'-joined key path."""
    record = _record.load_expected(CASES / "scalars_strings")
    nodes = _record.iter_nodes(record["items"][""])
    return {".".join(map(str, p)): n for p, n in nodes if n["type"] in ("scalar", "string")}


def _zero_d(node: dict) -> np.ndarray:
    """A recorded scalar as the 0-d array of the dtype it is stored as."""
    return _record.decode_tree({**node, "zero_d": True}, CASES / "scalars_strings")


def test_string_leaves_go_into_safetensors_metadata(tmp_path):
    """Item 3: a string leaf is a __metadata__ entry (leaf name -> text, the NUL-ended one
    too), in a single file, in every shard, and in a Hugging Face folder beside "format"."""
    src = str(CASES / "scalars_strings" / "checkpoint")
    strings = {k: n["value"] for k, n in _scalar_record().items() if n["type"] == "string"}
    assert "str_json_special" in strings and strings["str_json_special"].endswith("\0")
    result = convert(src, str(tmp_path / "s.safetensors"), skip_unsupported=True)
    assert set(result.metadata_strings) == set(strings)
    with safe_open(str(tmp_path / "s.safetensors"), framework="numpy") as f:
        assert f.metadata() == strings
    result = convert(
        src, str(tmp_path / "hf"), dst_format="hf", max_shard_size="32B", skip_unsupported=True
    )
    shards = [f for f in result.files if f.endswith(".safetensors")]
    assert len(shards) > 1
    for shard in shards:
        with safe_open(shard, framework="numpy") as f:
            assert f.metadata() == {"format": "pt", **strings}
    with open_source(str(tmp_path / "hf")) as source:  # and the folder reads back
        assert {leaf.name(".") for leaf in source.leaves} == {
            k for k, n in _scalar_record().items() if n["type"] == "scalar"
        }


def test_zero_d_scalars_stay_zero_d_in_every_format(tmp_path):
    """Item 3: every 0-d leaf of the real fixture is 0-d, with its exact bits, in each output
    as that format's own library reads it back."""
    torch = pytest.importorskip("torch")
    src = str(CASES / "scalars_strings" / "checkpoint")
    want = {k: _zero_d(n) for k, n in _scalar_record().items() if n["type"] == "scalar"}
    assert len(want) == 27
    for name in ("s.safetensors", "s.npz", "s.pt", "hf"):
        fmt = "hf" if name == "hf" else None
        convert(src, str(tmp_path / name), dst_format=fmt, skip_unsupported=True, progress=False)
    got = {
        "safetensors": _st_tensors(tmp_path / "s.safetensors"),
        "hf": _st_tensors(tmp_path / "hf" / "model.safetensors"),
        "pt": {
            k: v.numpy()
            for k, v in torch.load(tmp_path / "s.pt", weights_only=True).items()
            if not isinstance(v, str)
        },  # fmt: skip
    }
    with np.load(tmp_path / "s.npz") as data:
        got["npz"] = {k: data[k] for k in data.files if data[k].dtype.kind != "U"}
    for fmt, tensors in got.items():
        assert set(tensors) == set(want), fmt
        for key, value in tensors.items():
            assert value.shape == () and value.dtype == want[key].dtype, (fmt, key)
            assert _bits(value) == _bits(want[key]), (fmt, key)


def test_widen_stores_ml_dtypes_exactly_in_npz(tmp_path):
    """Item 3: --widen puts bfloat16 and every float8 / float4 type into float32 (int4 and
    int2 into int8), value for value: bfloat16 by its bits (NaN payloads kept), the others
    as ml_dtypes converts them (NaN stays NaN); the result names each widened leaf."""
    src = str(CASES / "dtype_bit_patterns" / "checkpoint")
    want = _arrays("dtype_bit_patterns")
    result = convert(src, str(tmp_path / "w.npz"), widen=True, progress=False)
    widened = {name: (a, b) for name, a, b in result.widened}
    assert widened == {
        name: (name, "int8" if name.startswith("int") else "float32") for name in want
    }
    with np.load(tmp_path / "w.npz") as data:
        for name, value in want.items():
            stored = data[name]
            assert stored.dtype == np.dtype(widened[name][1]) and stored.shape == value.shape
            if name == "bfloat16":
                assert np.array_equal(stored.view(np.uint32) >> 16, value.view(np.uint16))
                continue
            back = value.astype(stored.dtype)
            same = (stored == back) | (np.isnan(stored) & np.isnan(back))
            assert same.all() and np.array_equal(np.signbit(stored), np.signbit(back)), name
            if name.startswith("int"):
                assert np.array_equal(
                    stored.astype(value.dtype).view(np.uint8), value.view(np.uint8)
                )
    # without --widen the same conversion is refused, naming the flag
    with pytest.raises(UnsupportedError, match="widen=True"):
        convert(src, str(tmp_path / "x.npz"))


def test_existing_outputs_are_kept_unless_overwrite(tmp_path):
    """Item 3: like `ockpt cp`, every output format refuses an existing output, naming the
    option (overwrite=True; the command line names --overwrite); with it, it is replaced."""
    src = str(CASES / "v1_pytree" / "checkpoint")
    outputs = {
        "m.safetensors": {},
        "m.npz": {"widen": True},
        "hf": {"dst_format": "hf"},
        "sharded/model.safetensors": {"max_shard_size": "40B"},
    }
    for name, kw in outputs.items():
        convert(src, str(tmp_path / name), progress=False, **kw)
        before = sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file())
        with pytest.raises(ockpt.WriteConflictError, match="pass overwrite=True") as e:
            convert(src, str(tmp_path / name), progress=False, **kw)
        assert "--overwrite" not in str(e.value)  # the library names its option, not a flag
        assert sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()) == before
        convert(src, str(tmp_path / name), overwrite=True, progress=False, **kw)
    convert(str(tmp_path / "m.safetensors"), str(tmp_path / "back"), progress=False)
    with pytest.raises(ockpt.WriteConflictError, match="pass overwrite=True"):
        convert(str(tmp_path / "m.safetensors"), str(tmp_path / "back"), progress=False)
    convert(str(tmp_path / "m.safetensors"), str(tmp_path / "back"), overwrite=True, progress=False)


def test_pt_state_dict_bit_equal(tmp_path):
    torch = pytest.importorskip("torch")
    dst = tmp_path / "model.pt"
    result = convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(dst), skip_unsupported=True)
    assert dict(result.skipped).keys() == {"int4"}
    state = torch.load(dst, weights_only=True)
    want = _arrays("numpy_dtypes")
    for name, tensor in state.items():
        assert tuple(tensor.shape) == want[name].shape
        assert str(tensor.dtype) == f"torch.{want[name].dtype.name}"
        raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        assert raw == _bits(want[name]), name
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary files left


def test_pt_without_torch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UnsupportedError, match="pip install torch"):
        convert(str(CASES / "nested" / "checkpoint"), str(tmp_path / "x.pt"), skip_unsupported=True)


def test_key_collisions_and_sep(tmp_path):
    src = str(CASES / "odd_keys_no_ocdbt" / "checkpoint")
    with pytest.raises(ValueError, match="both become.*try sep="):
        convert(src, str(tmp_path / "a.safetensors"), sep="/", skip_unsupported=True)
    result = convert(src, str(tmp_path / "b.safetensors"), sep=".", skip_unsupported=True)
    with safe_open(str(tmp_path / "b.safetensors"), framework="numpy") as f:
        assert "dot.a.b" in f.keys() and "slash.a/b" in f.keys()
        assert result.leaves == len(f.keys()) + len(result.metadata_strings)
        assert "string_unicode.über 😀" in f.metadata()


def test_roundtrip_safetensors_to_orbax_every_layout(tmp_path):
    st = tmp_path / "m.safetensors"
    convert(str(CASES / "numpy_dtypes" / "checkpoint"), str(st), skip_unsupported=True)
    for layout in ("v1", "item"):
        out = tmp_path / f"ckpt-{layout}"
        convert(str(st), str(out), layout=layout)
        tree = ockpt.load_pytree(out)
        got = _st_tensors(st)
        assert set(tree) == set(got)
        for name, value in tree.items():
            assert value.dtype == got[name].dtype and _bits(value) == _bits(got[name])


def test_nested_keys_become_nested_dicts(tmp_path):
    from safetensors.numpy import save_file

    st = tmp_path / "hf.safetensors"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_file({"model.layers.0.w": w, "model.layers.1.w": w + 1, "lm_head": w[0]}, str(st))
    convert(str(st), str(tmp_path / "ck"))
    tree = ockpt.load_pytree(tmp_path / "ck")
    assert tree["model"]["layers"]["1"]["w"].tolist() == (w + 1).tolist()
    save_file({"a": w, "a.b": w}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match="keys .a. and .a/b. collide"):
        convert(str(tmp_path / "bad.safetensors"), str(tmp_path / "ck2"))


def test_npz_source_stored_and_deflated(tmp_path):
    a = np.arange(12, dtype=">i4").reshape(3, 4)  # big-endian too
    b = np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))
    np.savez(tmp_path / "s.npz", a=a, b=b, s=np.array("hello"))
    np.savez_compressed(tmp_path / "c.npz", a=a, b=b)
    for name in ("s.npz", "c.npz"):
        out = tmp_path / f"{name}.ckpt"
        convert(str(tmp_path / name), str(out))
        tree = ockpt.load_pytree(out)
        assert tree["a"].dtype == np.int32 and tree["a"].tolist() == a.tolist()
        assert tree["b"].tolist() == b.tolist()
    assert ockpt.load_pytree(tmp_path / "s.npz.ckpt")["s"] == "hello"
    with zipfile.ZipFile(tmp_path / "p.npz", "w") as zf, zf.open("o.npy", "w") as f:
        np.lib.format.write_array(f, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsupportedError, match="pickled"):
        open_source(str(tmp_path / "p.npz"))


def test_streaming_memory_stays_near_one_block(tmp_path, monkeypatch):
    """8 leaves of 4 MiB, blocks of 1 MiB: numpy allocations (tracemalloc sees numpy's
    buffers) stay near one block plus what each decoding thread keeps (one chunk's encoded and
    decoded bytes), not the whole 32 MiB."""
    import ockpt.convert as conv
    from ockpt.engines.python import fastread as _fastread

    monkeypatch.setattr(conv, "BLOCK_BYTES", 1 << 20)
    rng = np.random.default_rng(0)
    tree = {f"w{i}": rng.standard_normal((1024, 1024)).astype(np.float32) for i in range(8)}
    ockpt.save_pytree(tmp_path / "big", tree, layout="item")
    del tree
    for dst in ("big.safetensors", "big.npz"):
        tracemalloc.start()
        convert(str(tmp_path / "big"), str(tmp_path / dst), progress=False)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < min(_fastread.workers(), 3) * (8 << 20) + (2 << 20), f"{dst}: {peak}"
    from ockpt import _chunkwrite
    from ockpt.store.inflight import BackgroundWriter

    # the background writer's queue, capped at one chunk, so that the bound does not depend on
    # how fast the disk drains it (on a loaded machine it lags and holds more leaves)
    kwdefaults = BackgroundWriter.__init__.__kwdefaults__
    monkeypatch.setitem(kwdefaults, "max_bytes", 4 << 20)
    tracemalloc.start()
    convert(str(tmp_path / "big.safetensors"), str(tmp_path / "again"), progress=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the source is memory-mapped; the writer holds its encoding window of leaves (one 4 MiB
    # chunk each), the one being written and at most one queued, not the 32 MiB checkpoint
    bound = min(_chunkwrite.encode_window() + 2, 9) * (4 << 20) + (2 << 20)
    assert peak < bound, f"safetensors -> orbax: peak {peak} bytes"


def test_parse_size():
    assert parse_size("5GB") == 5 * 10**9 and parse_size("2GiB") == 2 << 30
    assert parse_size("100") == 100 and parse_size("1.5MB") == 1_500_000
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    assert parse_size("5KIB") == parse_size("5kib") == 5 << 10 and parse_size("5B") == 5
    for bad in ("5IB", "5I", "5iB", "IB"):  # an I only after a unit letter (was a KeyError)
        with pytest.raises(ValueError, match="not a size"):
            parse_size(bad)


def test_safetensors_built_checkpoint_restores_in_real_orbax(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    tensors = {
        "model.embed.weight": rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16),
        "model.layers.0.w": rng.standard_normal((3, 3)).astype(np.float32),
        "model.layers.1.w": rng.standard_normal((3, 3)).astype(np.float16),
        "step": np.array(5, np.int64),
    }
    save_file(tensors, str(tmp_path / "m.safetensors"))
    convert(str(tmp_path / "m.safetensors"), str(tmp_path / "ckpt"), progress=False)
    np.savez(tmp_path / "want.npz", **{k: v.view(f"u{v.itemsize}") for k, v in tensors.items()})
    script = f"""
import numpy as np
from orbax.checkpoint import v1 as ocp
tree = ocp.load_pytree({str(tmp_path / "ckpt")!r})
want = np.load({str(tmp_path / "want.npz")!r})
flat = {{
    "model.embed.weight": tree["model"]["embed"]["weight"],
    "model.layers.0.w": tree["model"]["layers"]["0"]["w"],
    "model.layers.1.w": tree["model"]["layers"]["1"]["w"],
    "step": tree["step"],
}}
for k, v in flat.items():
    v = np.asarray(v)
    assert v.view(want[k].dtype).tobytes() == want[k].tobytes(), k
print("restored", sorted(flat), str(np.asarray(flat["model.embed.weight"]).dtype))
"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restored" in result.stdout and "bfloat16" in result.stdout


def _loader_view(folder) -> dict[str, list] | None:
    """What a loader finds in a Hugging Face folder: through the index when there is one
    (every file it names must be a complete safetensors file holding exactly its tensors),
    else model.safetensors, else None."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        out = {}
        for name in sorted(set(weight_map.values())):
            with safe_open(str(folder / name), framework="numpy") as f:
                assert set(f.keys()) == {k for k, v in weight_map.items() if v == name}
                out.update({k: f.get_tensor(k).tolist() for k in f.keys()})
        return out
    if (folder / "model.safetensors").exists():
        return {k: v.tolist() for k, v in _st_tensors(folder / "model.safetensors").items()}
    return None


@pytest.mark.parametrize(
    ("old_shard", "new_shard"),
    [("600B", "600B"), ("600B", "300B"), ("600B", None), (None, "600B")],
    ids=["same-shards", "more-shards", "to-one-file", "from-one-file"],
)
def test_interrupted_hf_overwrite_never_leaves_a_mixed_model(tmp_path, monkeypatch, old_shard,
                                                             new_shard):  # fmt: skip
    """An --overwrite of a Hugging Face folder that fails at any write, rename or removal
    (injected, one call at a time) leaves the old model, the new one, or no index, never an
    index naming shards of two conversions; and no temporary files."""
    import ockpt.convert as conv

    old, new = tmp_path / "old.npz", tmp_path / "new.npz"
    np.savez(old, **{f"w{i}": np.full(64, i, np.float32) for i in range(4)})  # 256 B each
    np.savez(new, **{f"w{i}": np.full(64, 100 + i, np.float32) for i in range(4)})
    want_old = {f"w{i}": [float(i)] * 64 for i in range(4)}
    want_new = {f"w{i}": [float(100 + i)] * 64 for i in range(4)}
    out = tmp_path / "hf"
    kw = {"dst_format": "hf", "overwrite": True, "progress": False}
    for module, name in ((conv, "_bytes_of"), (os, "replace"), (os, "remove")):
        real = getattr(module, name)
        for fail_at in range(1, 50):
            convert(str(old), str(out), max_shard_size=old_shard, **kw)
            assert _loader_view(out) == want_old
            calls = []

            def failing(*args, real=real, fail_at=fail_at, calls=calls):
                calls.append(1)
                if len(calls) == fail_at:
                    raise OSError("injected failure")
                return real(*args)

            monkeypatch.setattr(module, name, failing)
            try:
                convert(str(new), str(out), max_shard_size=new_shard, **kw)
                failed = False
            except OSError:
                failed = True
            finally:
                monkeypatch.setattr(module, name, real)
            assert _loader_view(out) in (None, want_old, want_new), (name, fail_at)
            assert not list(out.glob("*.ockpt-tmp")), (name, fail_at)
            if not failed:
                assert _loader_view(out) == want_new
                break
        else:
            raise AssertionError(f"{name}: still failing after 50 calls")


def test_config_is_checked_first_and_needs_overwrite(tmp_path):
    """--config: a bad file is refused before any weight is written; an existing
    config.json is replaced only with --overwrite."""
    src = str(CASES / "v1_pytree" / "checkpoint")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text('{"model_type": "llama"}')  # a folder with a config only
    (tmp_path / "new.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ockpt.WriteConflictError, match="config.json: exists; pass overwrite=True"):
        convert(src, str(out), dst_format="hf", config=str(tmp_path / "new.json"), progress=False)
    assert os.listdir(out) == ["config.json"]
    assert (out / "config.json").read_text() == '{"model_type": "llama"}'
    convert(src, str(out), dst_format="hf", overwrite=True, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "dir.json").mkdir()
    bad = {"list.json": "not a JSON object", "none.json": "no such file", "dir.json": "regular"}
    for name, message in bad.items():
        with pytest.raises(ValueError, match=message):
            convert(src, str(out), dst_format="hf", config=str(tmp_path / name), overwrite=True,
                    progress=False)  # fmt: skip
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    convert(src, str(out), dst_format="hf", config=str(tmp_path / "new.json"), overwrite=True,
            progress=False)  # fmt: skip
    assert (out / "config.json").read_text() == '{"model_type": "gpt2"}'


def test_existing_hf_folder_as_output_needs_to_hf(tmp_path):
    """A folder of safetensors files given as the output without --to is a usage error
    naming --to hf (it was planned as one .safetensors file named like the folder)."""
    np.savez(tmp_path / "a.npz", w=np.arange(4, dtype=np.float32))
    out = tmp_path / "hf"
    convert(str(tmp_path / "a.npz"), str(out), dst_format="hf", progress=False)
    before = sorted(os.listdir(out))
    for src in (str(tmp_path / "a.npz"), str(CASES / "v1_pytree" / "checkpoint")):
        for overwrite in (False, True):
            with pytest.raises(ValueError, match='pass dst_format="hf"'):
                convert(src, str(out), overwrite=overwrite, progress=False)
    assert sorted(os.listdir(out)) == before
    convert(str(tmp_path / "a.npz"), str(out), dst_format="hf", overwrite=True, progress=False)


def test_index_names_outside_its_folder_are_refused(tmp_path):
    """A crafted *.safetensors.index.json cannot pull in safetensors files from elsewhere:
    a weight_map file name with a path in it is a FormatError naming the index and the
    name."""
    from safetensors.numpy import save_file

    (tmp_path / "elsewhere").mkdir()
    secret = tmp_path / "elsewhere" / "secret.safetensors"
    save_file({"secret": np.arange(3, dtype=np.int32)}, str(secret))
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.ones(2, np.float32)}, str(model / "model-00001-of-00001.safetensors"))
    index = model / "model.safetensors.index.json"
    for name in ("../elsewhere/secret.safetensors", str(secret), "sub/x.safetensors", "..",
                 "a\\b.safetensors", 3):  # fmt: skip
        index.write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors",
                                                    "secret": name}}))  # fmt: skip
        for path in (index, model):
            with pytest.raises(ockpt.FormatError, match="not a file name") as e:
                open_source(str(path))
            assert e.value.file == str(index) and repr(name) in str(e.value)
    for doc in ({"weight_map": ["x"]}, {}, [1], "text"):
        index.write_text(json.dumps(doc))
        with pytest.raises(ockpt.FormatError, match="weight_map") as e:
            open_source(str(index))
        assert e.value.file == str(index)
    index.write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    with open_source(str(model)) as source:
        assert [leaf.key for leaf in source.leaves] == [("w",)]


def _npy(shape: tuple[int, ...], data: bytes, descr: str = "<f8") -> bytes:
    """An .npy file whose header says `shape` and `descr`, followed by `data` as given."""
    import io

    head = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(head, header)
    return head.getvalue() + data


def _set_central_sizes(path, *, compressed: int | None = None, size: int | None = None) -> None:
    """Patch the sizes the (last) member's central directory entry declares."""
    import struct

    data = bytearray(path.read_bytes())
    at = data.rindex(b"PK\x01\x02")
    if compressed is not None:
        struct.pack_into("<I", data, at + 20, compressed)
    if size is not None:
        struct.pack_into("<I", data, at + 24, size)
    path.write_bytes(bytes(data))


def test_npz_members_are_bounded_by_their_own_bytes(tmp_path, monkeypatch):
    """Hostile .npz: a member whose .npy header declares more data than the member holds (a
    stored one would be mapped into the next member's bytes), sizes the file cannot back, a
    deflated size past what DEFLATE can expand to, and an array past the size limit are
    FormatErrors naming the member, before anything is extracted."""

    good = _npy((2,), np.arange(2, dtype="<f8").tobytes())
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"short{method}.npz"
        with zipfile.ZipFile(path, "w", method) as zf:
            zf.writestr("a.npy", _npy((4,), np.float64(1).tobytes()))  # 4 declared, 1 held
            zf.writestr("b.npy", good)
        with pytest.raises(ockpt.FormatError, match="do not match the member's size") as e:
            open_source(str(path))
        assert e.value.file == f"{path}:a.npy"
    path = tmp_path / "sizes.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.npy", _npy((1 << 20,), bytes(1 << 20), "|u1"))  # 1 MiB of zeros
    with open_source(str(path)) as source:  # well formed: converts
        assert source.read(source.leaves[0]).sum() == 0
    with applied(Limits(max_array_bytes=1000)), pytest.raises(ockpt.FormatError) as e:
        open_source(str(path))
    assert "size limit" in e.value.message and e.value.file == f"{path}:a.npy"
    compressed = zipfile.ZipFile(path).getinfo("a.npy").compress_size
    cases = {
        "more bytes than the file holds": {"compressed": path.stat().st_size + 1},
        "more bytes than its stored bytes can hold": {"size": 1033 * compressed + 1024},
    }
    for message, sizes in cases.items():
        bad = tmp_path / "bad.npz"
        bad.write_bytes(path.read_bytes())
        _set_central_sizes(bad, **sizes)
        with pytest.raises(ockpt.FormatError, match=message) as e:
            open_source(str(bad))
        assert e.value.file == f"{bad}:a.npy"


def test_pt_temporary_file_is_removed_when_torch_save_fails(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")

    def failing_save(obj, f):
        f.write(b"partial")  # a stream of the output's store
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(RuntimeError, match="disk full"):
        convert(str(CASES / "nested" / "checkpoint"), str(tmp_path / "m.pt"),
                skip_unsupported=True, progress=False)  # fmt: skip
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("dst", "planted", "kw"),
    [
        ("m.safetensors", "m.safetensors", {}),
        ("m.npz", "m.npz", {"skip_unsupported": True}),
        ("m.pt", "m.pt", {"skip_unsupported": True}),
        ("hf", "hf/model.safetensors", {"dst_format": "hf"}),
        ("hf", "hf/config.json", {"dst_format": "hf", "config": "CONFIG"}),
    ],
    ids=["safetensors", "npz", "pt", "hf", "hf-config"],
)
def test_a_link_planted_at_a_temporary_name_is_not_followed(tmp_path, dst, planted, kw):
    """Issue 36 item 1: a symbolic link planted where an output's temporary file goes
    (``<file>.ockpt-tmp``), for every output format and the config a `hf` folder copies in, is
    refused (ELOOP), not written through: the file it points to is left as it was, no output
    appears and no temporary file is left behind."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep me")
    out = tmp_path / "out"
    (out / planted).parent.mkdir(parents=True, exist_ok=True)
    (out / f"{planted}.ockpt-tmp").symlink_to(outside)
    if kw.get("config"):
        (tmp_path / "config.json").write_text('{"model_type": "x"}')
        kw = {**kw, "config": str(tmp_path / "config.json")}
    with pytest.raises(OSError):
        convert(str(CASES / "nested" / "checkpoint"), str(out / dst), progress=False, **kw)
    assert outside.read_bytes() == b"keep me"
    assert not (out / planted).exists()
    left = [p.name for p in out.rglob("*") if not p.is_dir() and not p.is_symlink()]
    assert left == [], left  # nothing written, at most the planted link itself


def test_a_tensor_named_as_the_safetensors_metadata_is_refused_before_writing(tmp_path):
    """Issue 32 item 3: safetensors reserves the header key ``__metadata__``; a leaf that
    would take it is refused with ockpt's error naming the leaf, before anything is
    written (the file written otherwise was no safetensors file the library could open)."""
    ockpt.save_pytree(tmp_path / "c", {"__metadata__": np.arange(3), "b": np.ones(2)})
    for out, kw in (("m.safetensors", {}), ("hf", {"dst_format": "hf"})):
        with pytest.raises(ValueError, match="reserves for its metadata") as e:
            convert(str(tmp_path / "c"), str(tmp_path / out), progress=False, **kw)
        assert "'__metadata__'" in str(e.value)
        assert not (tmp_path / out).exists()


def test_a_safetensors_header_is_parsed_within_the_json_bounds(tmp_path):
    """A crafted `.safetensors` input whose header nests 100,000 levels (Python's `json` raised
    RecursionError) or holds more values than the limit: refused with JSON-003 naming the
    file, by `open_source` and by `ockpt convert` (exit 1, no traceback)."""
    deep = tmp_path / "deep.safetensors"
    header = b"[" * 100_000 + b"]" * 100_000
    deep.write_bytes(struct.pack("<Q", len(header)) + header)
    wide = tmp_path / "wide.safetensors"
    header = b'{"x": [' + b"0," * 5_000 + b"0]}"
    wide.write_bytes(struct.pack("<Q", len(header)) + header)
    for path, limits in ((deep, None), (wide, Limits(max_json_values=1_000))):
        with applied(limits), pytest.raises(ockpt.FormatError) as e:
            open_source(str(path))
        assert e.value.rule == "JSON-003" and e.value.file == str(path)
    from ockpt.cli import main

    assert main(["convert", str(deep), str(tmp_path / "out"), "--no-progress"]) == 1


def test_a_leaf_name_longer_than_a_zip_member_name_is_refused_for_npz(tmp_path):
    """A key path of two 40,000-character keys (each within LIMIT-003) names an 80,001-byte
    leaf: more than a zip header holds, where `zipfile` raised `struct.error` half way through
    the archive (issue 36 item 6). Refused before anything is written; safetensors and .pt,
    which hold such names, convert it."""
    src = tmp_path / "c"
    ockpt.save_pytree(src, {"a" * 40_000: {"b" * 40_000: "s"}, "w": np.ones(2)})
    out = tmp_path / "out.npz"
    with pytest.raises(ValueError, match="longer than a zip archive holds"):
        convert(str(src), str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # nothing half-written
    convert(str(src), str(tmp_path / "out.safetensors"))
    from ockpt.cli import main

    assert main(["convert", str(src), str(out), "--no-progress"]) == 2
    assert not out.exists()


def test_a_safetensors_header_the_library_cannot_read_is_refused(tmp_path, monkeypatch):
    """String leaves go into every safetensors header's __metadata__; a header longer than the
    safetensors library reads (100,000,000 bytes) was written whole, and the file could not be
    opened (issue 36 item 6). Refused before anything is written (the bound lowered here, so
    that a small string shows it); .npz and .pt, which hold any string, convert it."""
    from ockpt import convert as convert_module

    src = tmp_path / "c"
    ockpt.save_pytree(src, {"s": "x" * 5_000, "w": np.ones(2)})
    monkeypatch.setattr(convert_module, "_SAFETENSORS_HEADER_MAX", 4_000)
    for out in ("out.safetensors", "hf"):
        with pytest.raises(ValueError, match="more than the 4000 the safetensors library"):
            convert(str(src), str(tmp_path / out), dst_format="hf" if out == "hf" else None)
        assert not (tmp_path / out).exists()
    convert(str(src), str(tmp_path / "out.npz"))
    monkeypatch.undo()
    convert(str(src), str(tmp_path / "out.safetensors"))
    with safetensors.safe_open(str(tmp_path / "out.safetensors"), "np") as f:
        assert f.metadata()["s"] == "x" * 5_000
