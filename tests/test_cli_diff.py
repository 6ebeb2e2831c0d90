"""`ockpt diff` as a user runs it (subprocess) on real-Orbax fixtures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import ockpt as ockpt_api
from tests.support import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"


def ockpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_same_values_in_different_storage_are_equal():
    # zarr v2 per-leaf directories vs zarr v3 in OCDBT: the same tree, dtypes and shapes
    result = ockpt(
        "diff", str(CASES / "no_ocdbt" / "checkpoint"), str(CASES / "zarr3" / "checkpoint")
    )
    assert result.returncode == 1  # the cases hold different values
    data = json.loads(
        ockpt(
            "diff",
            "--json",
            str(CASES / "no_ocdbt" / "checkpoint"),
            str(CASES / "zarr3" / "checkpoint"),
        ).stdout
    )
    assert data["compared"] == 8
    assert {d["kind"] for d in data["differences"]} == {"values"}


def test_checkpoint_equals_its_safetensors_export(tmp_path):
    src = str(CASES / "sharded" / "checkpoint")
    st = tmp_path / "m.safetensors"
    assert ockpt("convert", src, str(st)).returncode == 0
    result = ockpt("diff", src, str(st))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no differences (8 leaves compared)" in result.stdout


def test_steps_differ_in_values():
    root = str(CASES / "manager" / "checkpoint")
    result = ockpt("diff", root, root, "--step-a", "0", "--step-b", "2", "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    by_name = {d["name"]: d for d in data["differences"]}
    assert by_name["step"]["count"] == 1 and by_name["step"]["max_abs"] == 2


def test_structure_dtype_shape_and_tolerance(tmp_path):
    base = {"w": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4), "b": np.zeros(3), "x": 1}
    ockpt_api.save_pytree(tmp_path / "a", base)
    other = dict(base, w=base["w"] + np.float32(1e-4), b=np.zeros(4), extra=np.ones(2), x=None)
    ockpt_api.save_pytree(tmp_path / "b", other)
    result = ockpt("diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.returncode == 1
    out = result.stdout
    assert "only in B: extra" in out and "shape differs: b: [3] vs [4]" in out
    assert "values differ: w: 12 of 12 elements" in out
    assert "only in A: x" in out
    close = ockpt("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--atol", "1e-3", "--json")
    names = {d["name"] for d in json.loads(close.stdout)["differences"]}
    assert "w" not in names
    ockpt_api.save_pytree(tmp_path / "c", dict(base, w=base["w"].astype(np.float64)))
    result = ockpt("diff", str(tmp_path / "a"), str(tmp_path / "c"))
    assert result.returncode == 1 and "dtype differs: w: float32 vs float64" in result.stdout
    assert "values differ" not in result.stdout  # float32 values are exact in float64


def test_nan_equals_nan_and_errors(tmp_path):
    edge = str(CASES / "zero_d_and_edge" / "checkpoint")
    result = ockpt("diff", edge, edge)
    assert result.returncode == 0 and "no differences" in result.stdout
    result = ockpt("diff", edge, str(tmp_path / "missing"))
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr
    result = ockpt("diff", edge, edge, "--rtol", "-1")
    assert result.returncode == 2
