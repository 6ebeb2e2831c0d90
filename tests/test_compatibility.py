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
    tree = {"w": np.ones((2, 3), np.float32), "cfg": {"s": "text"}}  # a nested string leaf
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
        assert report.oldest_orbax == "0.5.21" and report.newest_orbax is None
        assert report.readable_by("0.10.3") and not report.readable_by("0.5.20")


def test_element_types_need_a_tensorstore_not_a_release(tmp_path: Path) -> None:
    ockpt.save_pytree(tmp_path / "i2", {"x": np.zeros(4, ml_dtypes.int2)}, layout="item")
    ockpt.save_pytree(tmp_path / "f4", {"x": np.zeros(4, ml_dtypes.float4_e2m1fn)}, layout="item")
    assert compat(tmp_path / "i2").oldest_tensorstore == "0.1.78"
    report = compat(tmp_path / "f4")
    assert (report.oldest_orbax, report.oldest_tensorstore) == ("0.5.21", "0.1.86")
    assert report.readable_by("0.10.3") and report.readable_by("0.10.3", "0.1.86")
    assert not report.readable_by("0.12.8", "0.1.78")
    (feature,) = [f for f in report.features if f.name == "dtype_float4_e2m1fn"]
    assert "tensorstore 0.1.78 cannot open them" in feature.source
    run = _cli(
        "compat", str(tmp_path / "f4"), "--require-orbax", "0.12.8", "--tensorstore", "0.1.78"
    )
    assert run.returncode == 1 and "with tensorstore 0.1.78 cannot restore" in run.stderr


def test_typed_keys_are_informative(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    ockpt.save_pytree(tmp_path / "k", {"k": jax.random.key(0)}, layout="item")
    report = compat(tmp_path / "k")
    assert "typed_prng_keys" in _names(report, required=False)
    assert report.spec_version == "1.1.0" and report.oldest_orbax == "0.5.21"


def test_the_flat_strings_form_has_a_newest_release() -> None:
    report = compat(FIXTURES / "orbax-0.3.5" / "scalars_strings" / "checkpoint")
    assert (report.oldest_orbax, report.newest_orbax) == ("0.3.0", "0.3.5")
    assert report.readable_by("0.3.5") and not report.readable_by("0.4.0")
    assert not report.readable_by("0.2.7")


def test_cli_json_and_require_orbax() -> None:
    path = str(FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint")
    run = _cli("compat", path, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert {"features", "oldest_orbax", "oldest_tensorstore", "spec_version"} <= set(report)
    assert report["oldest_orbax"] == "0.5.21" and isinstance(report["spec_version"], str)
    assert all({"name", "orbax", "source", "required"} <= set(f) for f in report["features"])
    assert _cli("compat", path, "--require-orbax", "0.10.3").returncode == 0
    older = _cli("compat", path, "--require-orbax", "0.5.20")
    assert older.returncode == 1 and "Orbax 0.5.20 cannot restore" in older.stderr
    bad = _cli("compat", path, "--require-orbax", "latest")
    assert bad.returncode == 2 and "not a release number" in bad.stderr
    text = _cli("compat", path)
    assert text.stdout.splitlines()[0].endswith("restorable by Orbax >= 0.5.21")


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


#: Extra installs: (Orbax release, its pins): Orbax 0.10.3 with tensorstore 0.1.86, which opens
#: the element types the tensorstore pinned with 0.10.3 cannot.
NEWER_TENSORSTORE = (
    "0.10.3",
    ("jax==0.4.38", "jaxlib==0.4.38", "tensorstore==0.1.86", "numpy==2.4.6", "ml_dtypes==0.6.0"),
)


def _tensorstore(pins: tuple[str, ...]) -> str:
    (version,) = [p.split("==")[1] for p in pins if p.startswith("tensorstore==")]
    return version


@pytest.fixture(scope="module")
def restored(cases: dict[str, Path]) -> dict[tuple[str, str], dict[str, bool]]:
    """Whether each install restores each case: (Orbax release, tensorstore) -> case -> bool."""
    import os
    from importlib.metadata import version

    from ockpt.testing import orbax_venvs
    from ockpt.testing.releases import restore

    ocp = pytest.importorskip("orbax.checkpoint")
    assert ocp.__version__ == SUITE_RELEASE
    items = {name: resolve(path).pytree.location.os_path() for name, path in cases.items()}
    installs = [(r, orbax_venvs.PINS[r], None) for r in orbax_venvs.COMPAT]
    installs.append((*NEWER_TENSORSTORE, None))
    suite_pins = (f"tensorstore=={version('tensorstore')}",)
    installs.append((SUITE_RELEASE, suite_pins, sys.executable))
    out = {}
    for release, pins, python in installs:
        if python is None:
            try:
                orbax_venvs.release_python(release, pins)
            except RuntimeError as e:
                if os.environ.get("CI"):
                    raise
                pytest.skip(str(e))
        results = restore(
            list(cases.values()), orbax=release, pins=pins, python=python, timeout=1800
        )
        key = (release, _tensorstore(pins))
        out[key] = {name: "digests" in results[item] for name, item in items.items()}
    return out


@pytest.mark.slow  # the slow matrix: every fixture restored by a dozen installs of Orbax
def test_compat_dates_match_real_restores(
    cases: dict[str, Path], restored: dict[tuple[str, str], dict[str, bool]]
) -> None:
    """For every case, at each end of what `compat` predicts: the oldest install of the matrix
    it admits restores the case, and the newest release before its oldest (installed with a
    tensorstore new enough) does not; past a predicted newest release, the next one does not;
    and an install whose tensorstore is older than it needs does not. The predictions span
    the matrix (no vacuous pass)."""
    installs = sorted(restored, key=lambda k: (version_key(k[0]), version_key(k[1])))
    wrong, seen = [], set()
    for name, path in cases.items():
        report = compat(path)
        seen.add((report.oldest_orbax, report.oldest_tensorstore))

        def check(install: tuple[str, str], restores: bool, why: str, case: str = name) -> None:
            if restored[install][case] != restores:
                did = "restores" if restored[install][case] else "does not restore"
                release, store = install
                wrong.append(f"{case}: Orbax {release} (tensorstore {store}) {did} it ({why})")

        admitted = [k for k in installs if report.readable_by(*k)]
        if admitted:
            check(admitted[0], True, f"predicted >= {report.oldest_orbax}")
        low, high = version_key(report.oldest_orbax), report.newest_orbax
        new_enough = [k for k in installs if report.readable_by(report.oldest_orbax, k[1])]
        before = [k for k in new_enough if version_key(k[0]) < low]
        if before:
            check(before[-1], False, f"predicted >= {report.oldest_orbax}")
        after = [k for k in installs if high is not None and version_key(k[0]) > version_key(high)]
        if after:
            check(after[0], False, f"predicted <= {high}")
        needs = report.oldest_tensorstore
        for k in installs:
            if (
                needs is not None
                and version_key(k[1]) < version_key(needs)
                and version_key(k[0]) >= low
            ):
                check(k, False, f"needs tensorstore >= {needs}")
    assert not wrong, "\n".join(wrong)
    assert {o for o, _ in seen} >= {BASELINE, "0.3.0", "0.4.0", "0.4.2", "0.5.21", "0.7.0"}
    assert {t for _, t in seen} >= {None, "0.1.78", "0.1.86"}
