"""`ockpt compat` (issue 35): the format features a checkpoint uses and the oldest (and newest)
Orbax release that restores it, checked against real restores of every fixture by every release
the matrix holds, not against hand-written expectations."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ockpt
from ockpt.compatibility import BASELINE, compat, version_key
from ockpt.layout import resolve

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
#: The Orbax this suite runs in its own environment; with the venvs of `orbax_venvs.COMPAT`
#: (built on first use), the releases whose restores check compat's dates.
SUITE_RELEASE = "0.12.8"


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *argv], capture_output=True, text=True, timeout=120
    )


def _names(report: ockpt.CompatReport, *, required: bool | None = None) -> set[str]:
    return {f.name for f in report.features if required is None or f.required == required}


# ---------------------------------------------------------------------------------------------
# What compat finds


def test_features_of_each_save_option(tmp_path: Path) -> None:
    tree = {"w": np.ones((2, 3), np.float32), "s": "text"}
    saves = {
        "ocdbt": dict(layout="item"),
        "per_leaf": dict(layout="item", use_ocdbt=False),
        "zarr3": dict(layout="item", zarr_version=3),
        "v1": dict(layout="v1"),
    }
    reports = {}
    for name, options in saves.items():
        ockpt.save_pytree(tmp_path / name, tree, **options)
        reports[name] = compat(tmp_path / name)
    assert {"ocdbt", "ocdbt_per_process", "no_msgpack", "strings_at_root"} <= _names(
        reports["ocdbt"], required=True
    )
    assert "ocdbt" not in _names(reports["per_leaf"]) and "zarr3" not in _names(reports["ocdbt"])
    assert "zarr3" in _names(reports["zarr3"], required=True)
    assert {"v1_checkpoint", "v1_state"} <= _names(reports["v1"], required=False)
    for report in reports.values():
        assert report.oldest_orbax == "0.5.16" and report.newest_orbax is None
        assert report.readable_by("0.10.3") and not report.readable_by("0.5.15")


def test_element_types_date_by_the_tensorstore_that_opens_them(tmp_path: Path) -> None:
    ockpt.save_pytree(tmp_path / "i2", {"x": np.zeros(4, ml_dtypes.int2)}, layout="item")
    ockpt.save_pytree(tmp_path / "f4", {"x": np.zeros(4, ml_dtypes.float4_e2m1fn)}, layout="item")
    assert compat(tmp_path / "i2").oldest_orbax == "0.11.28"
    report = compat(tmp_path / "f4")
    assert report.oldest_orbax == "0.12.8"
    (feature,) = [f for f in report.features if f.name == "dtype_float4_e2m1fn"]
    assert "0.11.28 (tensorstore 0.1.78) cannot open it" in feature.source


def test_typed_keys_are_informative(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    ockpt.save_pytree(tmp_path / "k", {"k": jax.random.key(0)}, layout="item")
    report = compat(tmp_path / "k")
    assert "typed_prng_keys" in _names(report, required=False)
    assert report.spec_version == "1.1.0" and report.oldest_orbax == "0.5.16"


def test_the_flat_strings_form_has_a_newest_release() -> None:
    report = compat(FIXTURES / "orbax-0.3.5" / "scalars_strings" / "checkpoint")
    assert (report.oldest_orbax, report.newest_orbax) == (BASELINE, "0.3.5")
    assert report.readable_by("0.3.5") and not report.readable_by("0.4.8")


def test_cli_json_and_require_orbax() -> None:
    path = str(FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint")
    run = _cli("compat", path, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert {"features", "oldest_orbax", "spec_version"} <= set(report)
    assert report["oldest_orbax"] == "0.5.16" and isinstance(report["spec_version"], str)
    assert all({"name", "orbax", "source", "required"} <= set(f) for f in report["features"])
    assert _cli("compat", path, "--require-orbax", "0.10.3").returncode == 0
    older = _cli("compat", path, "--require-orbax", "0.5.15")
    assert older.returncode == 1 and "Orbax 0.5.15 cannot restore" in older.stderr
    bad = _cli("compat", path, "--require-orbax", "latest")
    assert bad.returncode == 2 and "not a release number" in bad.stderr
    text = _cli("compat", path)
    assert text.stdout.splitlines()[0].endswith("restorable by Orbax >= 0.5.16")


# ---------------------------------------------------------------------------------------------
# Checked against real restores


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of every fixture ockpt resolves to one pytree item (with the empty directories git
    cannot hold, as their records list them), and ockpt's saves of the element types the
    matrix dates."""
    root = tmp_path_factory.mktemp("compat")
    found = {}
    for expected in sorted(FIXTURES.glob("*/*/expected.json")):
        case = expected.parent
        name = f"{case.parent.name}/{case.name}"
        try:
            resolve(case / "checkpoint").pytree  # noqa: B018 - resolving is the check
        except ockpt.OckptError:
            continue  # several pytrees (v1_no_state): no single item to restore
        copy = root / name
        shutil.copytree(case / "checkpoint", copy)
        for empty in json.loads(expected.read_text(encoding="utf-8")).get("empty_dirs", []):
            (copy / empty).mkdir(parents=True, exist_ok=True)
        found[name] = copy
    for dtype in ("int2", "float8_e3m4", "float4_e2m1fn", "float8_e8m0fnu", "int4", "bfloat16"):
        path = root / "ockpt-dtypes" / dtype
        ockpt.save_pytree(path, {"x": np.zeros(4, getattr(ml_dtypes, dtype))}, layout="item")
        found[f"ockpt-dtypes/{dtype}"] = path
    return found


@pytest.fixture(scope="module")
def restored(cases: dict[str, Path]) -> dict[str, dict[str, bool]]:
    """Whether each release restores each case: release -> case -> restored."""
    import os

    from ockpt.testing import orbax_venvs
    from ockpt.testing.releases import restore

    ocp = pytest.importorskip("orbax.checkpoint")
    assert ocp.__version__ == SUITE_RELEASE
    items = {name: resolve(path).pytree.location.os_path() for name, path in cases.items()}
    out = {}
    for release in (*orbax_venvs.COMPAT, SUITE_RELEASE):
        python = sys.executable if release == SUITE_RELEASE else None
        if python is None:
            try:
                orbax_venvs.release_python(release)
            except RuntimeError as e:
                if os.environ.get("CI"):
                    raise
                pytest.skip(str(e))
        results = restore(list(cases.values()), orbax=release, python=python, timeout=1800)
        out[release] = {name: "digests" in results[item] for name, item in items.items()}
    return out


@pytest.mark.slow  # the slow matrix: every fixture restored by six Orbax releases
def test_compat_dates_match_real_restores(
    cases: dict[str, Path], restored: dict[str, dict[str, bool]]
) -> None:
    """For every case: the first release of the matrix at or after the predicted oldest restores
    it and the last one before does not; where a newest release is predicted, the same at that
    end. The predictions span the matrix (no vacuous pass)."""
    releases = sorted(restored, key=version_key)
    wrong, oldest_seen = [], set()
    for name, path in cases.items():
        report = compat(path)
        oldest_seen.add(report.oldest_orbax)
        ok = {r: restored[r][name] for r in releases}
        low = version_key(report.oldest_orbax)
        high = version_key(report.newest_orbax) if report.newest_orbax else None
        inside = [
            r
            for r in releases
            if low <= version_key(r) and (high is None or version_key(r) <= high)
        ]
        before = [r for r in releases if version_key(r) < low]
        after = [r for r in releases if high is not None and version_key(r) > high]
        if inside and not ok[inside[0]]:
            wrong.append(
                f"{name}: {inside[0]} does not restore it (predicted >= {report.oldest_orbax})"
            )
        if inside and not ok[inside[-1]]:
            wrong.append(f"{name}: {inside[-1]} does not restore it")
        if before and ok[before[-1]]:
            wrong.append(f"{name}: {before[-1]} restores it (predicted >= {report.oldest_orbax})")
        if after and ok[after[0]]:
            wrong.append(f"{name}: {after[0]} restores it (predicted <= {report.newest_orbax})")
    assert not wrong, "\n".join(wrong)
    assert {"0.3.5", "0.4.8", "0.5.16", "0.11.28", "0.12.8"} <= oldest_seen
