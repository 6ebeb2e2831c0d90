"""`ockpt.testing` (issue 35): the assertions users put in their own suites, each shown to pass
on the right input and to fail, naming what differs, on the wrong one; the pytest plugin's
option; the Hypothesis strategies round-trip through the writer and the reader."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ockpt
from ockpt.testing import (
    assert_restorable,
    assert_same_format,
    assert_trees_equal,
    orbax_venvs,
    strategies,
)
from ockpt.testing.formats import UPDATE_ENV

TREE = {
    "params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.int8)},
    "opt": [np.array([1.5, -2.0], ml_dtypes.bfloat16), {"count": np.int64(7)}],
    "name": "run",
    "empty": {},
    "none": None,
}


def _deep(node):
    if isinstance(node, dict):
        return {k: _deep(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_deep(v) for v in node]
    return node.copy() if isinstance(node, np.ndarray) else node


# ---------------------------------------------------------------------------------------------
# assert_trees_equal


def test_trees_equal_passes_on_equal_trees_and_a_loaded_checkpoint(tmp_path: Path) -> None:
    assert_trees_equal(TREE, _deep(TREE))
    nan = {"x": np.array([np.nan, -0.0, 1.0], np.float32)}
    assert_trees_equal(nan, {"x": np.array([np.nan, 0.0, 1.0], np.float32)})
    ockpt.save_pytree(tmp_path / "c", TREE)
    loaded = ockpt.load_pytree(tmp_path / "c")
    assert_trees_equal({k: v for k, v in loaded.items()}, TREE)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda t: t["params"].__setitem__("w", t["params"]["w"] + 1), "values differ: params/w"),
        (lambda t: t["params"].__setitem__("b", np.zeros(3, np.int16)), "dtype differs: params/b"),
        (lambda t: t["params"].__setitem__("w", np.zeros((3, 2), np.float32)), "shape differs"),
        (lambda t: t["params"].pop("b"), "only in A: params/b"),
        (lambda t: t.__setitem__("extra", np.ones(1)), "only in B: extra"),
        (lambda t: t.__setitem__("name", "other"), "values differ: name"),
        (lambda t: t.__setitem__("empty", []), "structure differs: empty"),
        (lambda t: t["opt"][1].__setitem__("count", np.int64(8)), "values differ: opt/1/count"),
    ],
)
def test_trees_equal_names_the_leaf_that_differs(change, expected: str) -> None:
    other = _deep(TREE)
    change(other)
    with pytest.raises(AssertionError) as e:
        assert_trees_equal(TREE, other)
    assert expected in str(e.value)


def test_trees_equal_tolerances() -> None:
    a = {"x": np.array([1.0, 2.0], np.float32)}
    b = {"x": np.array([1.0, 2.001], np.float32)}
    with pytest.raises(AssertionError, match=r"values differ: x: 1 of 2 elements"):
        assert_trees_equal(a, b)
    assert_trees_equal(a, b, atol=0.01)
    assert_trees_equal(a, b, rtol=0.001)
    with pytest.raises(ValueError):
        assert_trees_equal(a, b, rtol=-1)


def test_trees_equal_lists_at_most_twenty_differences() -> None:
    a = {f"k{i:02d}": np.zeros(1) for i in range(25)}
    b = {k: v + 1 for k, v in a.items()}
    with pytest.raises(AssertionError) as e:
        assert_trees_equal(a, b)
    assert "25 difference(s)" in str(e.value) and "... and 5 more" in str(e.value)


# ---------------------------------------------------------------------------------------------
# assert_same_format and the plugin


def test_same_format_passes_fails_and_updates(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    zstd, raw = tmp_path / "zstd", tmp_path / "raw"
    ockpt.save_pytree(zstd, TREE, layout="item")
    ockpt.save_pytree(raw, TREE, layout="item", compression=None)
    file = tmp_path / "format.json"
    with pytest.raises(AssertionError, match="no fingerprint file"):
        assert_same_format(zstd, file)
    assert not file.exists()
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert_same_format(zstd, file)  # records it
    monkeypatch.delenv(UPDATE_ENV)
    assert file.read_text() == ockpt.fingerprints.dumps(ockpt.fingerprint(zstd))
    assert_same_format(zstd, file)
    with pytest.raises(AssertionError) as e:
        assert_same_format(raw, file)
    assert "/codecs/-" in str(e.value) and UPDATE_ENV in str(e.value)


def test_plugin_option_updates_fingerprints(tmp_path: Path) -> None:
    """The entry point registers the plugin in a fresh pytest: the option exists, and under it
    the assertion writes the file."""
    ckpt = tmp_path / "ckpt"
    ockpt.save_pytree(ckpt, {"w": np.ones(2, np.float32)})
    test = tmp_path / "test_user.py"
    test.write_text(
        "from ockpt.testing import assert_same_format\n"
        f"def test_format():\n    assert_same_format({str(ckpt)!r}, {str(tmp_path / 'f.json')!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k != UPDATE_ENV}

    def pytest_run(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(test)]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)

    first = pytest_run()
    assert first.returncode == 1 and "no fingerprint file" in first.stdout
    update = pytest_run("--ockpt-update-fingerprints")
    assert update.returncode == 0, update.stdout
    assert json.loads((tmp_path / "f.json").read_text())["fingerprint"] == 1
    assert pytest_run().returncode == 0


# ---------------------------------------------------------------------------------------------
# assert_restorable: real Orbax releases in their venvs


def _release(release: str) -> None:
    try:
        orbax_venvs.release_python(release)
    except RuntimeError as e:
        if os.environ.get("CI"):  # CI installs from the registries: a failed build fails
            raise
        pytest.skip(str(e))


@pytest.mark.slow  # the slow matrix: real Orbax releases in their venvs
@pytest.mark.parametrize("release", orbax_venvs.MATRIX)
def test_restorable_by_each_release(tmp_path: Path, release: str) -> None:
    pytest.importorskip("jax")
    _release(release)
    tree = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "s": "text", "n": np.int32(3)}
    ockpt.save_pytree(tmp_path / "item", tree, layout="item")
    assert_restorable(tmp_path / "item", orbax=release)
    assert_restorable(tmp_path / "item", orbax=release, expected=tree)
    with ockpt.CheckpointManager(tmp_path / "mgr") as manager:
        manager.save(4, tree)
    assert_restorable(tmp_path / "mgr", orbax=release, expected=tree)
    wrong = {**tree, "w": tree["w"] + 1}
    with pytest.raises(
        AssertionError, match=rf"(?s)Orbax {release} restores .* differently.*\n  w: restored"
    ):
        assert_restorable(tmp_path / "item", orbax=release, expected=wrong)


@pytest.mark.slow  # the slow matrix: real Orbax releases in their venvs
def test_not_restorable_names_the_release_and_orbax_error(tmp_path: Path) -> None:
    """A dtype the tensorstore of Orbax 0.10.3 cannot open (float4_e2m1fn, which ockpt and
    Orbax 0.12.8 write): the assertion fails with the release and Orbax's own error."""
    pytest.importorskip("jax")
    _release("0.10.3")
    tree = {"w": np.array([0.5, -1.0, 2.0, 6.0], ml_dtypes.float4_e2m1fn)}
    ockpt.save_pytree(tmp_path / "item", tree, layout="item")
    with pytest.raises(AssertionError, match=r"(?s)Orbax 0\.10\.3 cannot restore .*float4_e2m1fn"):
        assert_restorable(tmp_path / "item", orbax="0.10.3")


def test_release_numbers_are_checked() -> None:
    with pytest.raises(ValueError, match="not a release number"):
        orbax_venvs.release_python("0.10.3; rm -rf /")


# ---------------------------------------------------------------------------------------------
# strategies


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=strategies.pytrees(), options=strategies.save_options())
def test_strategies_round_trip_through_the_writer(tmp_path_factory, tree, options) -> None:
    path = tmp_path_factory.mktemp("st") / "c"
    ockpt.save_pytree(path, tree, **options)
    loaded = ockpt.load_pytree(path)
    assert_trees_equal(_plain(loaded), _plain(tree))


def _plain(node):
    """Python scalars as the format stores them (int64, float64, bool arrays); tuples as
    lists (the format does not record which), for comparing a tree with its loaded copy."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node] if node else []
    if isinstance(node, (bool, int, float)) and not isinstance(node, np.generic):
        return np.asarray(node)
    if isinstance(node, np.generic):
        return np.asarray(node)
    return node


@settings(max_examples=60, deadline=None)
@given(array=strategies.arrays())
def test_arrays_cover_their_dtype(array: np.ndarray) -> None:
    assert array.dtype in strategies.WRITABLE.values()
    assert array.ndim <= 3 and all(side <= 5 for side in array.shape)


# ---------------------------------------------------------------------------------------------
# The README's worked example, run as printed


def _readme_example() -> tuple[str, str]:
    """The YAML job and the pytest file of README.md's "Format checks in your CI"."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Format checks in your CI", 1)[1].split("\n## ", 1)[0]
    (yaml,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return yaml, python


@pytest.mark.slow  # the slow matrix: real Orbax releases in their venvs
def test_readme_ci_example_runs_verbatim(tmp_path: Path) -> None:
    """The job's pytest file, in a project of its own: the first run records the format, the
    next passes, and a format that differs from the committed one fails naming the change."""
    pytest.importorskip("orbax.checkpoint")
    _release("0.10.3")
    yaml, python = _readme_example()
    assert yaml.count("\n") <= 12 and "run: pytest tests/test_checkpoint_format.py" in yaml
    name = python.splitlines()[0].removeprefix("# ")
    assert name == "tests/test_checkpoint_format.py"
    (tmp_path / "tests").mkdir()
    (tmp_path / name).write_text(python)
    env = {k: v for k, v in os.environ.items() if k != UPDATE_ENV}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name, *extra]
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )

    first = run()
    assert first.returncode == 1 and "no fingerprint file" in first.stdout, first.stdout
    recorded = run("--ockpt-update-fingerprints")
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    assert run().returncode == 0
    committed = tmp_path / "tests" / "checkpoint.fingerprint.json"
    print_ = json.loads(committed.read_text())
    print_["codecs"] = [{"compressor": None, "filters": None}]  # as if saved uncompressed
    committed.write_text(ockpt.fingerprints.dumps(print_))
    changed = run()
    assert changed.returncode == 1 and "removed /codecs/-" in changed.stdout, changed.stdout
