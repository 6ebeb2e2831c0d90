"""`pytest conformance`: run the whole suite once (ockpt with both backends and, when installed,
real Orbax), write the matrix report to a temporary directory, and assert what the issue asks:

- every producer x consumer pair round-trips;
- every reader adapter passes every golden fixture it declares it can read;
- ockpt conforms in every group;
- every failure of a third-party adapter (Orbax) is one it documents in its capabilities
  (`deviations`): its deviations are data in the report, not test failures.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from ockpt.conformance import report, run

from .conftest import FIXTURES, ROOT


def _installed(name: str) -> bool:
    """Whether `name` can be imported (not where OCKPT_BLOCK_TENSORSTORE refuses it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


if not _installed("tensorstore"):  # the ockpt-tensorstore adapter writes every round trip
    pytest.skip(
        "needs tensorstore: the suite's writer is ockpt-tensorstore", allow_module_level=True
    )

ADAPTERS = ["ockpt-tensorstore", "ockpt-python"]
if _installed("orbax") and _installed("jax"):
    ADAPTERS.append("orbax")
OCKPT = ["ockpt-tensorstore", "ockpt-python"]


@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance")
    result = run(ADAPTERS, fixtures=FIXTURES, workdir=out / "work")
    report.write(result, out / "REPORT.md")
    return result, out


def _failures(result, group: str, consumer: str | None = None, *, producer: str | None = None):
    return [
        r
        for r in result.results
        if r.group == group
        and r.status == "fail"
        and (consumer is None or r.consumer == consumer)
        and (producer is None or r.producer == producer)
    ]


def _show(fails) -> str:
    return "\n".join(
        f"[{r.rule}] {r.case} ({r.producer} -> {r.consumer}): {r.reason}" for r in fails
    )


def test_report_is_written(suite):
    result, out = suite
    md = (out / "REPORT.md").read_text(encoding="utf-8")
    data = json.loads((out / "REPORT.json").read_text(encoding="utf-8"))
    assert data["format"] == "ockpt-conformance/1"
    assert set(data["adapters"]) == set(ADAPTERS)
    groups = {r["group"] for r in data["results"]}
    assert {"round_trip", "fixtures", "reads", "casts", "topology", "bad_corpus"} <= groups
    for name in ADAPTERS:
        assert f"`{name}`" in md
    assert "## Summary" in md and "## round_trip" in md


@pytest.mark.parametrize("consumer", ADAPTERS)
def test_every_pair_round_trips(suite, consumer):
    result, _ = suite
    cells = [r for r in result.results if r.group == "round_trip" and r.consumer == consumer]
    assert any(r.status == "pass" for r in cells)
    assert not _failures(result, "round_trip", consumer), _show(
        _failures(result, "round_trip", consumer)
    )


@pytest.mark.parametrize("consumer", ADAPTERS)
def test_every_declared_fixture_is_read(suite, consumer):
    result, _ = suite
    fails = [r for r in _failures(result, "fixtures", consumer) if not r.documented]
    assert not fails, _show(fails)
    read = {r.case for r in result.results if r.group == "fixtures" and r.consumer == consumer}
    assert len(read) >= len(
        [p for s in ("orbax-*", "ockpt-*") for p in FIXTURES.glob(f"{s}/*/expected.json")]
    )


@pytest.mark.parametrize("group", ["reads", "casts", "topology", "bad_corpus"])
@pytest.mark.parametrize("consumer", OCKPT)
def test_ockpt_conforms(suite, group, consumer):
    result, _ = suite
    cells = [r for r in result.results if r.group == group and r.consumer == consumer]
    assert cells and all(r.status != "n/a" for r in cells), "ockpt declares every capability"
    fails = list(_failures(result, group, consumer))
    assert not fails, _show(fails)


def test_topology_covers_every_device_count(suite):
    result, _ = suite
    cases = {r.case for r in result.results if r.group == "topology"}
    for n in (1, 2, 4, 8):
        assert any(c.endswith(f"@ {n} devices") for c in cases), n
    assert any(c.startswith("fixture multiprocess") for c in cases)
    assert any(c.startswith("2-process save") for c in cases)


@pytest.mark.skipif("orbax" not in ADAPTERS, reason="orbax-checkpoint is not installed")
def test_orbax_deviations_are_documented(suite):
    """Orbax may break the spec (that is what the report shows), but only where its adapter
    says so: a new deviation after an Orbax upgrade fails here until it is documented."""
    result, _ = suite
    fails = [r for r in result.failures() if r.consumer == "orbax" and not r.documented]
    assert not fails, _show(fails)


def test_external_adapter_from_a_path(tmp_path):
    """A user's adapter, loaded from a file outside the package, runs like a shipped one."""
    module = tmp_path / "my_adapter.py"
    module.write_text(
        (ROOT / "conformance" / "README.md")
        .read_text(encoding="utf-8")
        .split("```python\n# my_adapter.py\n", 1)[1]
        .split("```", 1)[0],
        encoding="utf-8",
    )
    result = run(
        [f"{module}:make_adapter", "ockpt-tensorstore"],
        fixtures=FIXTURES,
        groups=["round_trip", "reads"],
    )
    mine = [r for r in result.results if "my-numpy-reader" in (r.consumer, r.producer)]
    assert mine and not [r for r in mine if r.status == "fail"], _show(
        [r for r in mine if r.status == "fail"]
    )
