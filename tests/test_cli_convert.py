"""`ockpt convert` as a user runs it (subprocess) on real-Orbax fixtures: the outputs load in
their own libraries to bit-equal values, and converting back gives the same checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys

import _record
import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy (safetensors.numpy needs it)
import numpy as np
import pytest

from tests.support import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"
safetensors_numpy = pytest.importorskip("safetensors.numpy")


def ockpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
    )


def ok(*args: str) -> str:
    result = ockpt(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _record_arrays(case: str, item: str = "") -> dict[str, np.ndarray]:
    record = _record.load_expected(CASES / case)
    return {
        ".".join(map(str, path)): _record.load_array(node, CASES / case)
        for path, node in _record.iter_nodes(record["items"][item])
        if node["type"] in ("ndarray", "jax.Array")
    }


def test_orbax_to_safetensors_loads_bit_equal(tmp_path):
    dst = tmp_path / "model.safetensors"
    out = ok("convert", str(CASES / "sharded" / "checkpoint"), str(dst))
    assert "wrote 8 leaves" in out
    got = safetensors_numpy.load_file(str(dst))
    want = _record_arrays("sharded")
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype
        assert got[name].tobytes() == value.tobytes(), name


def test_manager_step_to_sharded_safetensors_and_back(tmp_path):
    src = str(CASES / "manager" / "checkpoint")
    index = tmp_path / "hf" / "model.safetensors.index.json"
    data = json.loads(
        ok("convert", src, str(index), "--step", "1", "--max-shard-size", "40B", "--json")
    )
    assert data["format"] == "safetensors" and len(data["files"]) >= 3
    weight_map = json.loads(index.read_text())["weight_map"]
    assert set(weight_map) == {"b", "step", "w"}
    ok("convert", str(index.parent), str(tmp_path / "back"))  # a directory with an index
    ok("diff", str(tmp_path / "back"), src, "--step-b", "1")


def test_convert_refusals_are_clear(tmp_path):
    src = str(CASES / "numpy_dtypes" / "checkpoint")
    result = ockpt("convert", src, str(tmp_path / "a.safetensors"))
    assert result.returncode == 1
    assert "complex128" in result.stderr and "--skip-unsupported" in result.stderr
    result = ockpt("convert", src, str(tmp_path / "a.npz"))
    assert result.returncode == 1 and "bfloat16" in result.stderr
    result = ockpt("convert", src, str(tmp_path / "a.safetensors"), "--max-shard-size", "big")
    assert result.returncode == 2 and "not a size" in result.stderr
    result = ockpt("convert", src, str(tmp_path / "copy"))
    assert result.returncode == 1 and "ockpt cp" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_npz_and_back(tmp_path):
    src = str(CASES / "nested" / "checkpoint")
    out = ok("convert", src, str(tmp_path / "n.npz"), "--sep", "/", "--skip-unsupported")
    assert "wrote" in out
    want = _record_arrays("nested")
    with np.load(tmp_path / "n.npz") as data:
        for name, value in want.items():
            if value.dtype.name == "bfloat16":
                assert name.replace(".", "/") not in data.files
                continue
            assert data[name.replace(".", "/")].tobytes() == value.tobytes()
    result = ockpt("convert", src, str(tmp_path / "m.npz"))
    assert result.returncode == 1 and "bfloat16" in result.stderr  # layers.1.w


def test_pt_output(tmp_path):
    torch = pytest.importorskip("torch")
    ok("convert", str(CASES / "v1_pytree" / "checkpoint"), str(tmp_path / "m.pt"))
    state = torch.load(tmp_path / "m.pt", weights_only=True)
    want = _record_arrays("v1_pytree", "state")
    assert state["params.emb"].dtype == torch.bfloat16
    raw = state["params.emb"].view(torch.int16).numpy()
    assert raw.tobytes() == want["params.emb"].tobytes()
    record = _record.load_expected(CASES / "v1_pytree")
    assert state["tag"] == record["items"]["state"]["items"]["tag"]["value"]


def test_unknown_output_suffix_is_named(tmp_path):
    """A mistyped suffix is a usage error listing the known outputs, not 'both sides are Orbax'."""
    result = ockpt("convert", str(CASES / "sharded" / "checkpoint"), str(tmp_path / "m.safetensor"))
    assert result.returncode == 2, result.stderr
    assert "unknown output format '.safetensor'" in result.stderr
    assert "known: .safetensors, .safetensors.index.json, .npz, .pt" in result.stderr
    assert "both sides" not in result.stderr and list(tmp_path.iterdir()) == []


def test_refusals_name_the_command_line_flags(tmp_path):
    """An existing output (file, Hugging Face folder, Orbax directory) is kept unless
    --overwrite; the messages name --overwrite and --skip-unsupported, never the Python
    keywords."""
    src = str(CASES / "v1_pytree" / "checkpoint")
    for dst, extra in [("m.safetensors", ()), ("hf", ("--to", "hf")), ("m.pt", ())]:
        ok("convert", src, str(tmp_path / dst), *extra, "--no-progress")
        again = ockpt("convert", src, str(tmp_path / dst), *extra, "--no-progress")
        assert again.returncode == 1 and "pass --overwrite to replace it" in again.stderr
        assert "overwrite=True" not in again.stderr and "Traceback" not in again.stderr
        ok("convert", src, str(tmp_path / dst), *extra, "--overwrite", "--no-progress")
    ok("convert", str(tmp_path / "m.safetensors"), str(tmp_path / "back"), "--no-progress")
    again = ockpt("convert", str(tmp_path / "m.safetensors"), str(tmp_path / "back"))
    assert again.returncode == 1 and "pass --overwrite" in again.stderr
    assert "overwrite=True" not in again.stderr
    refused = ockpt("convert", src, str(tmp_path / "x.npz"))
    assert refused.returncode == 1 and "pass --skip-unsupported" in refused.stderr
    assert "--widen" in refused.stderr and "skip_unsupported" not in refused.stderr


def test_widen_and_metadata_strings_are_named_in_the_summary(tmp_path):
    src = str(CASES / "v1_pytree" / "checkpoint")
    result = ok("convert", src, str(tmp_path / "m.npz"), "--widen", "--no-progress")
    assert "wrote 7 leaves" in result
    run = ockpt("convert", src, str(tmp_path / "n.npz"), "--widen", "--no-progress")
    assert "widened params.emb: bfloat16 stored as float32 (exact)" in run.stderr
    with np.load(tmp_path / "m.npz") as data:
        want = _record_arrays("v1_pytree", "state")["params.emb"]
        assert data["params.emb"].dtype == np.float32
        assert np.array_equal(data["params.emb"], want.astype(np.float32))
    run = ockpt("convert", src, str(tmp_path / "m.safetensors"), "--json", "--no-progress")
    assert json.loads(run.stdout)["metadata_strings"] == ["tag"]
    got = safetensors_numpy.load_file(str(tmp_path / "m.safetensors"))
    assert got["step"].shape == () and "tag" not in got


def test_bad_max_shard_size_is_a_usage_error_naming_the_option(tmp_path):
    src = str(CASES / "v1_pytree" / "checkpoint")
    run = ockpt("convert", src, str(tmp_path / "m.safetensors"), "--max-shard-size", "5IB")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--max-shard-size" in run.stderr and "not a size: '5IB'" in run.stderr
    assert not (tmp_path / "m.safetensors").exists()
