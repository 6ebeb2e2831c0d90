"""`ockpt.validate` and `ockpt validate` on real fixtures (clean) and the bad-data corpus.

Every golden fixture validates with no error, also with ``deep=True``. Every variant of
`fixtures/bad/` is reported with the rule id `fixtures/bad/expected.json` states. The command's
exit codes (0 valid, 1 invalid, 2 usage or I/O error) and its ``--json`` output are checked as a
user runs it. Each test is bounded in time (SIGALRM), so a decoder that loops fails instead of
hanging the suite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.rules import RULES
from ockpt.validate import Report, validate
from tests.support import FIXTURES, case_id, deadline, fixture_cases, record_key_impl

BAD = FIXTURES / "bad"
LARGE_VALUES = BAD / "_base" / "large_values" / "checkpoint"  # values out of the B+tree nodes
EXPECTED = json.loads((BAD / "expected.json").read_text(encoding="utf-8"))["variants"]
SECONDS = 60


@pytest.fixture(autouse=True)
def _time_limit():
    with deadline(SECONDS):
        yield


def _checkpoints() -> list[Path]:
    cases = [c / "checkpoint" for c in fixture_cases()]
    cases += sorted(
        p / "checkpoint" for p in (BAD / "_base").iterdir() if (p / "checkpoint").is_dir()
    )
    return cases


def _id(path: Path) -> str:
    return case_id(path.parent)


# ---------------------------------------------------------------------------------------------
# real checkpoints validate clean


def _release(path: Path) -> tuple[int, ...]:
    """The Orbax release whose format a fixture holds (its record says; ockpt: 0.12.8)."""
    from _record import load_expected, release_of

    if not (path.parent / "expected.json").exists():
        return (0, 12, 8)  # fixtures/bad/_base: written with 0.12.8
    return release_of(load_expected(path.parent))


@pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
@pytest.mark.parametrize("path", _checkpoints(), ids=_id)
def test_real_checkpoints_validate_clean(path, deep):
    report = validate(path, deep=deep)
    assert report.ok, report.format_text()
    # no warning either: releases before 0.12.3 write no commit_success.txt anywhere, so its
    # absence is no finding there (LAYOUT-002 only where the writer evidently writes it)
    assert not report.rules, report.format_text()
    assert report.checked["items"] >= 1
    if deep and report.checked["arrays"]:
        assert report.checked["chunks"] >= 1


def test_public_api_and_report_json():
    assert ockpt.validate is validate and ockpt.Report is Report
    report = ockpt.validate(FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint", deep=True)
    out = json.loads(json.dumps(report.to_json()))
    assert out["valid"] is True and out["kind"] == "manager_root" and out["deep"] is True
    assert out["checked"]["steps"] == 3 and out["errors"] == 0 and out["findings"] == []


def test_progress_is_reported():
    seen = []
    validate(
        FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint",
        deep=True,
        progress=lambda done, total, what: seen.append((done, total, what)),
    )
    total = seen[0][1]  # bytes, known before the first call and fixed (one bar)
    assert total > 0 and all(0 <= d <= t == total for d, t, _ in seen)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen) and seen[-1][0] == total
    assert {"arrays", "chunks", "ocdbt nodes"} <= {w for _, _, w in seen}


def test_missing_path_raises_not_a_checkpoint(tmp_path):
    with pytest.raises(ockpt.NotACheckpointError):
        validate(tmp_path / "nothing")


def test_empty_directory_is_not_a_checkpoint(tmp_path):
    report = validate(tmp_path)
    assert not report.ok and report.rules == {"VAL-001"}


# ---------------------------------------------------------------------------------------------
# the bad-data corpus


def test_corpus_is_complete():
    assert len(EXPECTED) >= 40
    for name, entry in EXPECTED.items():
        assert (BAD / name / entry["path"]).exists(), name
        assert entry["reader"]["outcome"] in ("raises", "may_load")
        assert entry["validator"]["rule"] in RULES or entry["validator"]["rule"].startswith(
            ("OCDBT-", "ZARR-")  # registered with spec/ocdbt.md and spec/arrays.md
        ), name
    readme = (BAD / "README.md").read_text(encoding="utf-8")
    for name in EXPECTED:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_variant_is_reported(name):
    entry = EXPECTED[name]
    path = BAD / name / entry["path"]
    want = entry["validator"]
    report = validate(path, deep=want["deep"])
    assert want["rule"] in report.rules, report.format_text()
    for rule in want["also"]:
        assert rule in report.rules, report.format_text()
    severity = RULES[want["rule"]].severity if want["rule"] in RULES else "error"
    assert report.ok is (severity != "error"), report.format_text()
    for finding in report.findings:
        assert finding.rule and finding.severity in ("error", "warning") and finding.message
        assert finding.file, finding
    if want["deep"]:  # found only by decoding every node and chunk
        assert want["rule"] not in validate(path).rules


# ---------------------------------------------------------------------------------------------
# the command


def ockpt_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(FIXTURES.parent / "reference") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        env=env,
    )


def test_cli_valid_checkpoint_exits_0():
    result = ockpt_cli(
        "validate", "--deep", str(FIXTURES / "orbax-0.12.8" / "zarr3" / "checkpoint")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": valid (pytree_item, deep): 0 error(s), 0 warning(s)" in result.stdout


def test_cli_invalid_checkpoint_exits_1_with_rule_ids():
    result = ockpt_cli("validate", str(BAD / "ocdbt_node_crc" / "checkpoint"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[OCDBT-005]" in result.stdout and "INVALID" in result.stdout


def test_cli_json_output():
    result = ockpt_cli("validate", "--json", str(BAD / "leaf_without_array" / "checkpoint"))
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert out["valid"] is False and out["errors"] >= 1
    (finding,) = [f for f in out["findings"] if f["rule"] == "VAL-004"]
    assert set(finding) == {"rule", "severity", "file", "pointer", "message"}
    assert finding["severity"] == "error" and finding["pointer"] == "ghost"
    assert finding["file"].endswith("_METADATA")


def test_cli_warnings_only_exit_0():
    result = ockpt_cli("validate", "--json", str(BAD / "manager_tmp_step" / "checkpoint"))
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert out["valid"] is True and out["warnings"] == 1
    assert out["findings"][0]["rule"] == "VAL-002"


def test_cli_usage_and_io_errors_exit_2(tmp_path):
    assert ockpt_cli("validate").returncode == 2  # no path: usage
    result = ockpt_cli("validate", str(tmp_path / "missing"))
    assert result.returncode == 2 and "no such file" in result.stderr


def test_cli_step_and_item():
    root = str(FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint")
    result = ockpt_cli("validate", "--json", "--step", "1", "--item", "params", root)
    assert result.returncode == 0 and json.loads(result.stdout)["kind"] == "pytree_item"
    result = ockpt_cli("validate", "--step", "7", root)
    assert result.returncode == 1 and "[LOAD-053]" in result.stdout, result.stdout


def test_unknown_directory_in_a_v1_checkpoint_is_a_warning(tmp_copy):
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "v1_pytree")
    (root / "junk").mkdir()
    report = validate(root)
    assert report.ok and report.rules == {"VAL-008"}, report.format_text()


def test_untagged_missing_data_becomes_val_009():
    from ockpt.validate import _from_error

    finding = _from_error(ockpt.MissingDataError("something is gone"), file="x")
    assert finding.rule == "VAL-009" and finding.severity == "error" and finding.file == "x"
    finding = _from_error(ockpt.MissingDataError("chunk gone", rule="ZARR-008"), file="x")
    assert finding.rule == "ZARR-008" and finding.message == "chunk gone"
    # the rule is data: text that looks like a rule id in a message is never parsed
    finding = _from_error(ockpt.MissingDataError("chunk gone [ZARR-008]"), file="x")
    assert finding.rule == "VAL-009"


#: Each cross-file rule of spec/validation.md and a corpus variant that breaks it.
VALIDATION_RULE_CASES = {
    "VAL-002": "manager_tmp_step",
    "VAL-003": "unexpected_array",
    "VAL-004": "leaf_without_array",
    "VAL-005": "zarr_format_disagrees",
    "VAL-006": "zarr_shape_disagrees_scalar",
    "VAL-007": "sharding_for_missing_param",
}


@pytest.mark.parametrize("rule, name", sorted(VALIDATION_RULE_CASES.items()))
def test_each_validation_rule_has_a_bad_variant(rule, name):
    assert EXPECTED[name]["validator"]["rule"] == rule
    assert rule in validate(BAD / name / EXPECTED[name]["path"]).rules


#: Each check of VAL-006 and the corpus variant that breaks it: the file its finding names and
#: what the message says (the other VAL-006 checks would report the variant with other words).
VAL_006_CASES = {
    "zarr_shape_disagrees_scalar": ("scalar/.zarray", "is a scalar in _METADATA"),
    "zarr_write_shape_disagrees": ("_METADATA", "write_shape [1, 3, 1] of leaf 'x' in _METADATA"),
    "array_metadatas_write_shape_too_large": (
        "array_metadatas/process_0",
        "write_shape [9, 3] of 'x' does not fit the array's shape [8, 3]",
    ),
    "array_metadatas_disagree": ("array_metadatas/process_0", "is [2, 3] here but [1, 3]"),
    "array_metadatas_chunk_shape_disagrees": (
        "array_metadatas/process_0",
        "chunk_shape [1, 1] of 'x' differs from the zarr chunk shape [1, 3]",
    ),
}


@pytest.mark.parametrize("name", sorted(VAL_006_CASES))
def test_each_val_006_check_has_a_bad_variant(name):
    """Every check of VAL-006 (scalar rank, the two write_shapes fitting the array and agreeing,
    the chunk_shape of array_metadatas) reports its own variant, naming the file at fault."""
    file, words = VAL_006_CASES[name]
    path = BAD / name / EXPECTED[name]["path"]
    found = [f for f in validate(path).findings if f.rule == "VAL-006"]
    assert any(f.file == str(path / file) and words in f.message for f in found), found


def test_layout_002_only_where_the_writer_writes_the_marker(tmp_copy):
    """LAYOUT-002: a step of 0.12.8 (whose other steps and items hold commit_success.txt)
    that lost its marker is reported; steps of 0.3.5 / 0.4.8, which never had one, are not."""
    for release in ("0.3.5", "0.4.8"):
        report = validate(FIXTURES / f"orbax-{release}" / "manager" / "checkpoint")
        assert report.ok and "LAYOUT-002" not in report.rules, report.format_text()
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "manager")
    (root / "1" / "commit_success.txt").unlink()
    report = validate(root)
    found = [f for f in report.findings if f.rule == "LAYOUT-002"]
    assert report.ok and len(found) == 1 and found[0].file.endswith("/1"), report.format_text()
    assert validate(root, step=1).rules == {"LAYOUT-002"}  # its items still hold the marker


@pytest.mark.parametrize(
    ("case", "name"),
    [("orbax-0.12.8/nested", "_METADATA"), ("orbax-0.3.5/scalars_strings", "checkpoint")],
)
def test_documents_linked_out_are_refused(tmp_path, tmp_copy, case, name):
    """PATH-004: validate reads nothing through a link leading out (it used to parse the
    outside file and could call the checkpoint valid) and never shows its bytes."""
    root = tmp_copy(FIXTURES / case)
    outside = tmp_path / "outside"
    outside.write_bytes((root / name).read_bytes())
    (root / name).unlink()
    (root / name).symlink_to(outside)
    report = validate(root)
    assert not report.ok and "PATH-004" in report.rules, report.format_text()
    with pytest.raises(ockpt.FormatError) as e:
        ockpt.load_pytree(root)
    assert e.value.rule == "PATH-004"


def test_validate_step_and_item(tmp_copy):
    """validate takes step= / item= (--step / --item) as the readers do, with their rules."""
    root = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint"
    assert validate(root, step=1).kind == "step"
    assert validate(root, step=1, item="params").kind == "pytree_item"
    assert validate(root, item="params").checked["items"] == 1
    assert validate(root, step=7).rules == {"LOAD-053"}
    assert validate(root, step=1, item="nope").rules == {"LOAD-052"}


def test_declared_chunk_count_does_not_drive_the_work(tmp_copy):
    """A .zarray edited to a huge grid: the check follows the keys present (issue 17), and a
    grid over the chunk-count limit is refused at the metadata (ZARR-005)."""
    import time

    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    meta_file = root / "a" / ".zarray"
    meta = json.loads(meta_file.read_text())
    rank = len(meta["shape"])
    meta["shape"] = [1 << 22] + [1] * (rank - 1)  # 4M chunks of one element: within the limit
    meta["chunks"] = [1] * rank
    meta_file.write_text(json.dumps(meta))
    start = time.monotonic()
    report = validate(root)
    assert time.monotonic() - start < 10
    assert not report.ok and report.rules == {"ZARR-008"}, report.format_text()
    meta["shape"] = [1 << 25] + [1] * (rank - 1)  # over max_chunks
    meta_file.write_text(json.dumps(meta))
    report = validate(root)
    assert "ZARR-005" in report.rules, report.format_text()
    with pytest.raises(ockpt.FormatError) as e:
        ockpt.pytree_metadata(root)
    assert e.value.rule == "ZARR-005"
    meta["shape"] = [1 << 61] + [1] * (rank - 1)  # no numpy array has this shape
    meta["chunks"] = [1 << 40] + [1] * (rank - 1)
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ockpt.FormatError) as e:
        ockpt.load_pytree(root)
    assert e.value.rule == "ZARR-005"


def test_item_without_array_leaves_has_no_database(tmp_path):
    """An item whose leaves are all strings and empty nodes has no OCDBT database, though its
    `_METADATA` says use_ocdbt (writing §3.3): Orbax's and ockpt's validate clean; with an
    array leaf, the same missing database is OCDBT-050."""
    import orbax.checkpoint as ocp

    tree = {"s": "text", "n": None, "e": {}}
    ocp.PyTreeCheckpointer().save(tmp_path / "orbax", tree)
    ockpt.save_pytree(tmp_path / "ockpt", tree)
    for path in (tmp_path / "orbax", tmp_path / "ockpt"):
        report = validate(path, deep=True)
        assert report.ok and report.findings == [], report.format_text()
    ockpt.save_pytree(tmp_path / "arrays", {**tree, "a": np.arange(3)})
    (tmp_path / "arrays" / "state" / "manifest.ocdbt").unlink()
    assert "OCDBT-050" in validate(tmp_path / "arrays").rules


def test_validate_parses_metadata_once(monkeypatch):
    """Detecting the layout, the document checks and the item checks share one parse of
    `_METADATA` (`MetadataDocument.from_bytes` keeps it; the model check reads it so)."""
    from ockpt.documents import metadata

    path = next(p for p in _checkpoints() if (p / "_METADATA").is_file())
    calls = []
    real = metadata._plain_document  # the quick parse of a whole document
    monkeypatch.setattr(metadata, "_plain_document", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(metadata, "_PARSED", {})
    assert validate(path).ok
    assert len(calls) == 1


def test_chunk_keys_of_shared_zarr_metadata_are_matched_once(tmp_path, monkeypatch):
    """Arrays with one zarr document (one parsed object) match their chunk keys against its
    grid once, not once per array."""
    import ockpt.zarr as zarr_module

    ockpt.save_pytree(tmp_path / "c", {f"p{i}": np.zeros(4, np.float32) for i in range(30)})
    calls = []
    real = zarr_module.grid_index
    monkeypatch.setattr(zarr_module, "grid_index", lambda *a: calls.append(a[1]) or real(*a))
    report = validate(tmp_path / "c")
    assert report.ok and report.checked["arrays"] == 30
    assert 1 <= len(calls) <= 2, calls


# ---------------------------------------------------------------------------------------------
# whole reports, kept in a file (a change to any finding or count shows as a diff of it)

REPORTS = Path(__file__).with_name("validate_reports.json")


def _report_record(report: Report, root: Path) -> dict:
    """`report` as data, with the checkpoint's own path written as ``.``."""
    prefix = str(root)

    def local(text: str | None) -> str | None:
        return None if text is None else text.replace(prefix, ".")

    return {
        "kind": report.kind,
        "ok": report.ok,
        "checked": report.checked,
        "findings": [
            [f.rule, f.severity, local(f.file), local(f.pointer), local(f.message)]
            for f in report.findings
        ],
    }


def _report_cases() -> dict[str, Path]:
    cases = {f"bad/{name}": BAD / name / EXPECTED[name]["path"] for name in sorted(EXPECTED)}
    cases.update({_id(path): path for path in _checkpoints()})
    return cases


def test_reports_match_their_record():
    """Every variant of the bad corpus and every golden checkpoint, shallow and deep: the whole
    report (each finding's rule, severity, file, pointer and message, in order, and the counts
    of what was checked) is the one recorded in tests/validate_reports.json. After a deliberate
    change, ``OCKPT_UPDATE_REPORTS=1 python -m pytest tests/test_validate.py -k record``
    rewrites the file; review its diff."""
    updating = bool(os.environ.get("OCKPT_UPDATE_REPORTS"))
    want = {} if updating else json.loads(REPORTS.read_text(encoding="utf-8"))
    got = {}
    for name, path in _report_cases().items():
        for mode in ("shallow", "deep"):
            key = f"{name} {mode}"
            got[key] = _report_record(validate(path, deep=mode == "deep"), path)
            assert updating or got[key] == want.get(key), key  # the first that differs
    if updating:
        REPORTS.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert sorted(got) == sorted(want or got)


def test_streamed_reports_match_the_record(monkeypatch):
    """Every chunk too large for the memory left (LIMIT-006) is checked as a stream
    (`zarr.stream`): each deep report is still the recorded one, finding for finding."""
    from ockpt import limits

    monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(limits, "memory_available", lambda: 0)
    want = json.loads(REPORTS.read_text(encoding="utf-8"))
    for name, path in _report_cases().items():
        got = _report_record(validate(path, deep=True), path)
        assert got == want[f"{name} deep"], name


# ---------------------------------------------------------------------------------------------
# the parts of a report


def test_errors_become_findings_with_their_rule_file_and_message():
    """`_from_error`: an error's own rule, file and message; the rule of an untagged one by its
    kind (MissingDataError VAL-009, other FormatErrors JSON-001, the rest VAL-009); expected
    and got appended; the file of the error first, else the one the caller names."""
    from ockpt.validate import _finding, _from_error

    def seen(error: Exception) -> tuple:
        f = _from_error(error, file="where")
        return (f.rule, f.severity, f.file, f.pointer, f.message)

    assert seen(ockpt.OckptError("plain")) == ("VAL-009", "error", "where", None, "plain")
    assert seen(ockpt.MemoryLimitError("too big", file="big")) == (
        "LIMIT-006",
        "error",
        "big",
        None,
        "too big",
    )
    assert seen(ockpt.UnsupportedError("no handler")) == (
        "VAL-009",
        "error",
        "where",
        None,
        "no handler",
    )
    assert seen(ockpt.UnsupportedError("a warning", rule="VAL-008", file="x")) == (
        "VAL-008",
        "warning",
        "x",
        None,
        "a warning",
    )
    assert seen(ockpt.FormatError("bad", expected="a", got=2, pointer="/p")) == (
        "JSON-001",
        "error",
        "where",
        "/p",
        "bad (expected 'a', got 2)",
    )
    assert seen(ockpt.MissingDataError("gone", file="f")) == ("VAL-009", "error", "f", None, "gone")
    # a rule no chapter registers is still an error; a registered one has its own severity
    assert _finding("ZARR-999", "m", file=None).severity == "error"
    assert _finding("VAL-002", "m", file="f", pointer="p").severity == "warning"


def test_report_text_and_json():
    """`Report.format_text` (what ``ockpt validate`` prints: one line per finding, then the
    verdict with the counts that are not zero) and `to_json`, whole."""
    from ockpt.findings import Finding

    findings = [
        Finding.of("VAL-004", "leaf 'a' has no array", file="c/_METADATA", pointer="a"),
        Finding.of("VAL-002", "step 3: unfinished\x1b[2J", file="c/3.orbax-checkpoint-tmp"),
    ]
    report = Report("c", "manager_root", True, findings, {"steps": 2, "items": 0, "arrays": 5})
    assert (
        report.format_text()
        == str(report)
        == "\n".join(
            [
                "c/_METADATA at a: error: leaf 'a' has no array [VAL-004]",
                "c/3.orbax-checkpoint-tmp: warning: step 3: unfinished\\x1b[2J [VAL-002]",
                "c: INVALID (manager_root, deep): 1 error(s), 1 warning(s); "
                "checked 2 steps, 5 arrays",
            ]
        )
    )
    assert report.to_json() == {
        "path": "c",
        "kind": "manager_root",
        "deep": True,
        "valid": False,
        "errors": 1,
        "warnings": 1,
        "checked": {"steps": 2, "items": 0, "arrays": 5},
        "findings": [f.to_json() for f in findings],
    }
    clean = Report("d", "pytree_item", False, [], {"items": 0})
    assert clean.format_text() == "d: valid (pytree_item): 0 error(s), 0 warning(s)"
    assert clean.ok and clean.rules == set() and clean.errors == clean.warnings == []


def test_a_finding_is_reported_once():
    """The same rule, file, pointer and message found twice (two paths to one fault) is one
    finding; any difference makes another."""
    from ockpt.validate import _Validator

    v = _Validator(False, None)
    for _ in range(2):
        v.report("VAL-003", "key 'k' belongs to no array", file="c", pointer="k")
    v.report("VAL-003", "key 'k' belongs to no array", file="c", pointer="j")
    v.ordered.drain()
    assert [f.pointer for f in v.findings] == ["k", "j"]


def test_progress_on_a_store_whose_listing_has_no_sizes(monkeypatch, tmp_path):
    """An object store lists no sizes: progress counts towards the bytes of the values of the
    OCDBT databases (each value's length from its B+tree entry), of every committed step of a
    root, and is not called for an item without a database (per-leaf zarr)."""
    import dataclasses

    from ockpt.ocdbt import Database
    from ockpt.store import LocalStore

    def values(path: Path) -> int:
        total = 0
        for db in [path] if (path / "manifest.ocdbt").is_file() else path.glob("ocdbt.process_*"):
            for _, entry in Database(LocalStore(db)).entries():
                v = entry.value
                total += len(v) if isinstance(v, bytes) else v.length
        return total

    def totals(path: Path) -> set[tuple[int, str]]:
        seen = []
        validate(path, progress=lambda d, t, w: seen.append((t, w)))
        return {(t, w) for t, w in seen}

    monkeypatch.setattr(
        LocalStore, "capabilities", dataclasses.replace(LocalStore.capabilities, sizes_known=False)
    )
    for item in (FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint", LARGE_VALUES):
        want = {(values(item), "arrays"), (values(item), "done")}
        assert values(item) > 0 and totals(item) == want, item
    root = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint"
    steps = [root / s / "params" for s in ("0", "1", "2")]
    assert totals(root) >= {(sum(values(p) for p in steps), "done")}
    no_root = tmp_path / "no_root"  # the per-process databases: each counted
    import shutil

    shutil.copytree(LARGE_VALUES, no_root)
    (no_root / "manifest.ocdbt").unlink()
    assert {t for t, w in totals(no_root)} == {values(no_root)} and values(no_root) > 0
    assert totals(FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint") == set()
    assert totals(BAD / "manager_tmp_step" / "checkpoint" / "3.orbax-checkpoint-tmp") == set()


def _seen(report: Report, root: Path) -> list[tuple]:
    return [tuple(f) for f in _report_record(report, root)["findings"]]


def test_damage_to_the_steps_of_a_manager_root(tmp_copy, monkeypatch):
    """A root whose first step is an unfinished save (the steps after it are still checked),
    whose JSON item and root metadata are no JSON, whose step 2 lost its commit markers (the
    other steps hold one), with a step that is itself a pytree item, and one removed while it
    is validated."""
    import importlib
    import shutil

    validate_module = importlib.import_module("ockpt.validate")
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "manager")
    (root / "0").rename(root / "0.orbax-checkpoint-tmp")
    (root / "1" / "meta" / "metadata").write_bytes(b"{")
    for marker in (root / "2").rglob("commit_success.txt"):
        marker.unlink()
    (root / "metadata" / "_ROOT_METADATA").write_bytes(b"[")
    shutil.copytree(root / "1" / "params", root / "7")
    shutil.copytree(root / "1", root / "8")
    real = validate_module.detect_step

    def removed_first(layout, step):
        if step.step == 8:
            shutil.rmtree(root / "8")
        return real(layout, step)

    monkeypatch.setattr(validate_module, "detect_step", removed_first)
    report = validate(root)
    assert report.checked["steps"] == 4 and report.checked["items"] == 3, report.format_text()
    seen = _seen(report, root)
    assert seen[0][:3] == ("JSON-001", "error", "./metadata/_ROOT_METADATA")
    assert seen[1] == (
        "VAL-002",
        "warning",
        "./0.orbax-checkpoint-tmp",
        None,
        "step 0: an unfinished save (temporary directory '0.orbax-checkpoint-tmp'); not "
        "validated, not a step of this root",
    )
    assert seen[2][:3] == ("JSON-001", "error", "./1/meta/metadata")
    assert seen[3] == (
        "LAYOUT-002",
        "warning",
        "./2",
        None,
        "step holds no commit_success.txt, though the other steps of its root do",
    )
    assert seen[4][:4] == ("VAL-001", "error", "./8", None) and seen[4][4].startswith("step 8: ")
    assert len(seen) == 5, seen


def test_damage_to_a_legacy_manager_root(tmp_copy):
    """Releases before 0.5 keep the root's metadata as metadata/metadata, plain JSON: read
    under the JSON limit and reported where it is no JSON."""
    from ockpt.limits import LIMITS

    root = tmp_copy(FIXTURES / "orbax-0.3.5" / "manager")
    clean = validate(root)
    assert clean.ok and clean.checked["documents"] >= 1
    (root / "metadata" / "metadata").write_bytes(b'{"a": ')
    report = validate(root)
    assert _seen(report, root)[0][:3] == ("JSON-001", "error", "./metadata/metadata")
    assert report.checked == clean.checked
    (root / "metadata" / "metadata").write_bytes(b'{"a": 1}' + b" " * 100)
    small = validate(root, limits=dataclasses.replace(LIMITS, max_json_bytes=50))
    assert _seen(small, root)[0][:3] == ("JSON-003", "error", "./metadata/metadata")


@pytest.mark.parametrize("streamed", [False, True], ids=["decoded", "streamed"])
@pytest.mark.parametrize(
    "case",
    [
        "orbax-0.12.8/sharded",
        "orbax-0.12.8/no_ocdbt",
        "orbax-0.12.8/zarr3",
        "bad/zarr_chunk_truncated_zstd",  # a chunk the quick check declines: decoded in full
    ],
)
def test_deep_progress_counts_each_chunk_as_stored(case, streamed, monkeypatch):
    """A deep check counts each chunk's stored bytes as it is checked, decoded or streamed: by
    the last chunk, the bytes of every chunk value (OCDBT) or chunk file (per-leaf zarr),
    metadata excluded."""
    from ockpt import limits
    from ockpt.ocdbt import Database
    from ockpt.store import LocalStore

    if streamed:
        monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
        monkeypatch.setattr(limits, "memory_available", lambda: 0)

    path = FIXTURES / case / "checkpoint"
    metadata = (".zarray", "zarr.json", ".zattrs", ".zgroup")
    if (path / "manifest.ocdbt").is_file():
        want = 0
        for key, entry in Database(LocalStore(path)).entries():
            if not key.decode().endswith(metadata):
                v = entry.value
                want += len(v) if isinstance(v, bytes) else v.length
    else:
        want = sum(
            p.stat().st_size
            for p in path.rglob("*")
            if p.is_file()
            and p.parent not in (path, path / "array_metadatas")
            and not p.name.endswith(metadata)
        )
    seen = []
    validate(path, deep=True, progress=lambda d, t, w: seen.append((d, w)))
    assert max(d for d, w in seen if w == "chunks") == want > 0


def test_progress_total_is_the_bytes_of_the_files(tmp_copy):
    """On a store that lists sizes, the total is the bytes of every regular file under the
    path, to the limits' `max_depth`; deeper directories, and those that cannot be listed,
    count as nothing."""
    from ockpt.limits import LIMITS

    def total(path: Path, **kw) -> int:
        seen = []
        validate(path, progress=lambda d, t, w: seen.append(t), **kw)
        assert len(set(seen)) == 1
        return seen[0]

    def files(path: Path, depth: int) -> int:
        return sum(
            p.stat().st_size
            for p in path.rglob("*")
            if p.is_file() and len(p.relative_to(path).parts) <= depth + 1
        )

    root = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint"
    assert total(root) == files(root, 99) > files(root, 2)
    shallow = dataclasses.replace(LIMITS, max_depth=1)
    assert total(root, limits=shallow) == files(root, 1) > files(root, 0)
    item = tmp_copy(FIXTURES / "orbax-0.12.8" / "sharded")
    (item / "empty").write_bytes(b"")
    (item / "many").mkdir()
    for i in range(40):
        (item / "many" / str(i)).write_bytes(b"x")
    assert total(item) == files(item, 9)
    few = dataclasses.replace(LIMITS, max_directory_entries=30)  # "many" cannot be listed
    assert total(item, limits=few) == files(item, 9) - 40


@pytest.fixture
def no_memory(monkeypatch):
    """Every chunk is too large for the memory left: each is checked as a stream."""
    from ockpt import limits

    monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(limits, "memory_available", lambda: 0)


@pytest.mark.parametrize(
    "path", [FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint", LARGE_VALUES], ids=_id
)
def test_a_streamed_chunk_is_never_read_whole(no_memory, monkeypatch, path):
    """A chunk checked as a stream is read in pieces from its file: no chunk value stored in a
    file (per-leaf zarr, OCDBT values out of the nodes) is read whole into memory."""
    from ockpt.engines.python.store import DirectoryStore, OcdbtStore

    read_whole = []
    for cls in (DirectoryStore, OcdbtStore):

        def get(self, key, _real=cls.get):
            value = _real(self, key)
            src = self.value_range(key)
            if src is not None:
                src.close()
                if value is not None:
                    read_whole.append(key)
            return value

        monkeypatch.setattr(cls, "get", get)
    report = validate(path, deep=True)
    assert report.ok and report.checked["chunks"] > 0, report.format_text()
    metadata = (".zarray", "zarr.json")
    assert [k for k in read_whole if not k.endswith(metadata)] == []


@pytest.mark.parametrize("streamed", [False, True], ids=["decoded", "streamed"])
def test_a_chunk_removed_while_checked_is_named(streamed, monkeypatch, tmp_copy):
    """A chunk file removed after the listing and before its check: LOAD-041 naming that
    chunk's file, the others still checked and counted as read, the gone one as nothing."""
    from ockpt import limits
    from ockpt.engines.python.store import DirectoryStore

    if streamed:
        monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
        monkeypatch.setattr(limits, "memory_available", lambda: 0)
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    real = DirectoryStore.value_range

    def value_range(self, key):
        if key == "replicated/3":
            (root / "replicated" / "3").unlink(missing_ok=True)
        return real(self, key)

    monkeypatch.setattr(DirectoryStore, "value_range", value_range)
    progress = []
    report = validate(root, deep=True, progress=lambda d, t, w: progress.append((d, w)))
    chunks = [
        p
        for p in root.rglob("*")
        if p.is_file() and p.parent.name != "array_metadatas" and p.parent != root
    ]
    read = sum(p.stat().st_size for p in chunks if not p.name.startswith("."))
    assert max(d for d, w in progress if w == "chunks") == read
    seen = _seen(report, root)
    assert [f[:4] for f in seen] == [("LOAD-041", "error", "./replicated/3", None)], seen
    what = "chunk" if streamed else "chunk [3]"
    assert seen[0][4].startswith(f"{what} is missing and the checkpoint stores every chunk")


def test_a_step_validated_alone_is_held_to_its_own_markers():
    """A step of a release that writes no commit_success.txt, validated by itself: no
    LAYOUT-002 (only where its items, or the root's other steps, hold the marker)."""
    for release in ("0.3.5", "0.4.8"):
        root = FIXTURES / f"orbax-{release}" / "manager" / "checkpoint"
        report = validate(root, step=1)
        assert report.kind == "step" and report.ok and not report.rules, report.format_text()
        assert validate(root / "1").rules == set()


def test_the_legacy_root_metadata_is_read_within_the_json_limit(monkeypatch):
    """metadata/metadata is read with the JSON size bound (JSON-003), never whole."""
    from ockpt.limits import LIMITS
    from ockpt.store import LocalStore

    limits = []
    real = LocalStore.get

    def get(self, name, **kw):
        if self.file(name).endswith("/metadata/metadata"):
            limits.append((kw.get("limit"), kw.get("rule")))
        return real(self, name, **kw)

    monkeypatch.setattr(LocalStore, "get", get)
    assert validate(FIXTURES / "orbax-0.3.5" / "manager" / "checkpoint").ok
    assert limits == [(LIMITS.max_json_bytes, "JSON-003")]


def test_a_streamed_value_over_the_chunk_limit_is_zarr_003(no_memory, tmp_path):
    """A stored chunk value one byte over `max_chunk_bytes` (incompressible data: zstd makes it
    larger than decoded) is refused as it is streamed (ZARR-003, naming its file, the bound and
    its size); one at the limit is checked."""
    from ockpt.limits import LIMITS

    ockpt.save_pytree(
        tmp_path / "c",
        {"r": np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)},
        use_ocdbt=False,
    )
    chunk = tmp_path / "c" / "state" / "r" / "c" / "0"
    size = chunk.stat().st_size
    assert size > 4096
    over = dataclasses.replace(LIMITS, max_chunk_bytes=size - 1)
    seen = _seen(validate(tmp_path / "c", deep=True, limits=over), tmp_path / "c")
    assert seen == [
        (
            "ZARR-003",
            "error",
            "./state/r/c/0",
            None,
            f"stored value larger than the limit (expected '<= {size - 1} bytes', got {size})",
        )
    ]
    at = dataclasses.replace(LIMITS, max_chunk_bytes=size)
    assert validate(tmp_path / "c", deep=True, limits=at).findings == []


@pytest.mark.parametrize("streamed", [False, True], ids=["decoded", "streamed"])
def test_a_shard_whose_index_marks_its_chunk_absent(streamed, tmp_path, monkeypatch):
    """A zarr v3 shard whose index (crc32c intact) says its one inner chunk is absent, in a
    checkpoint that stores every chunk: LOAD-041 naming the shard's file, decoded or streamed."""
    import struct

    import google_crc32c

    from ockpt import limits

    if streamed:
        monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
        monkeypatch.setattr(limits, "memory_available", lambda: 0)
    tree = {"r": np.arange(64, dtype=np.float32).reshape(8, 8)}
    ockpt.save_pytree(tmp_path / "c", tree, use_ocdbt=False)
    shard = tmp_path / "c" / "state" / "r" / "c" / "0" / "0"
    index = struct.pack("<QQ", 2**64 - 1, 2**64 - 1)  # (offset, nbytes) of an absent chunk
    data = shard.read_bytes()
    shard.write_bytes(data[:-20] + index + struct.pack("<I", google_crc32c.value(index)))
    seen = _seen(validate(tmp_path / "c", deep=True), tmp_path / "c")
    assert seen == [
        (
            "LOAD-041",
            "error",
            "./state/r/c/0/0",
            None,
            "inner chunk [0, 0] of the shard is missing and the checkpoint stores every chunk "
            "(store_array_data_equal_to_fill_value; ZARR-008)",
        )
    ]


def _rewrite_database(db: Path, more: list) -> None:
    """Write the OCDBT database `db` again as one generation holding its keys and the (key,
    value) pairs `more` (a value: inline bytes or an `IndirectDataReference`)."""
    from ockpt.ocdbt import Database
    from ockpt.ocdbt.write import DatabaseWriter
    from ockpt.store import as_store

    with Database(db) as database:
        entries = [(k, e.value) for k, e in database.entries()]
    (db / "manifest.ocdbt").unlink()
    writer = DatabaseWriter("", open_file=as_store(db).writer)
    for key, value in sorted([*entries, *more]):
        writer.put_entry(key, value)
    writer.commit()


def _share_first_value(db: Path, keys: list[bytes]) -> None:
    """Rewrite the OCDBT database `db` with more `keys`, whose values are the bytes of its
    first out-of-line value (OCDBT-024)."""
    from ockpt.ocdbt import Database
    from ockpt.ocdbt.format import IndirectDataReference

    with Database(db) as database:
        values = [e.value for _, e in database.entries()]
    shared = next(v for v in values if isinstance(v, IndirectDataReference))
    _rewrite_database(db, [(k, shared) for k in keys])


def test_keys_sharing_stored_bytes_are_reported_a_few_at_a_time(tmp_copy):
    """OCDBT-024: every key whose value shares stored bytes with another key's is an error
    naming the data file, the first eight of a database one by one and the rest summed up
    (naming its manifest); the keys are still listed, one of no UTF-8 too (and belong to no
    array, VAL-003)."""
    root = tmp_copy(BAD / "_base" / "large_values")
    _share_first_value(root, [b"zz/%d" % i for i in range(12)] + [b"zz/\xff"])
    report = validate(root)
    shared = [f for f in _seen(report, root) if f[0] == "OCDBT-024"]
    assert len(shared) == 9, shared
    assert all(f[1] == "error" and f[2].startswith("./ocdbt.process_0/d/") for f in shared[:8])
    assert shared[8] == (
        "OCDBT-024",
        "error",
        "./manifest.ocdbt",
        None,
        "and 5 more keys share stored bytes with another key",
    )
    unclaimed = [f[3] for f in _seen(report, root) if f[0] == "VAL-003"]
    assert unclaimed == [*(f"zz/{i}" for i in sorted(range(12), key=str)), "zz/\udcff"]


def test_a_per_process_database_with_shared_bytes_is_not_read(tmp_copy):
    """Without a merged manifest, a per-process database whose keys share stored bytes is not
    read (its arrays are missing, VAL-004) rather than decoded twice."""
    root = tmp_copy(BAD / "_base" / "large_values")
    (root / "manifest.ocdbt").unlink()
    _share_first_value(root / "ocdbt.process_0", [b"zz"])
    report = validate(root)
    rules = [f[0] for f in _seen(report, root)]
    assert rules[:2] == ["OCDBT-050", "OCDBT-024"] and "VAL-004" in rules, rules


def test_a_fault_that_names_no_file_is_reported_at_the_database(monkeypatch):
    """An error raised while a database is listed, or by its deep verification, that names no
    file of its own is reported at that database's manifest."""
    import importlib

    from ockpt.ocdbt import Database

    validate_module = importlib.import_module("ockpt.validate")
    item = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"

    def no_listing(self, *a, **kw):
        raise ockpt.FormatError("the listing failed", rule="OCDBT-005")

    with monkeypatch.context() as m:
        m.setattr(Database, "entries", no_listing)
        seen = _seen(validate(item), item)
    assert seen[:2] == [
        ("OCDBT-005", "error", f"./{name}", None, "the listing failed")
        for name in ("ocdbt.process_0/manifest.ocdbt", "manifest.ocdbt")
    ], seen
    monkeypatch.setattr(
        validate_module,
        "_verified",
        lambda db: ([ockpt.FormatError("a node is damaged", rule="OCDBT-005")], 1),
    )
    found = {f[:3] for f in _seen(validate(item, deep=True), item) if f[0] == "OCDBT-005"}
    assert ("OCDBT-005", "error", "./manifest.ocdbt") in found, found


def test_a_per_process_database_that_cannot_be_listed_is_not_read(tmp_copy):
    """Without a merged manifest, a per-process database whose manifest is damaged is reported
    (OCDBT-005) and not read: its arrays are missing (VAL-004), not listed a second time."""
    root = tmp_copy(BAD / "_base" / "large_values")
    (root / "manifest.ocdbt").unlink()
    manifest = root / "ocdbt.process_0" / "manifest.ocdbt"
    data = bytearray(manifest.read_bytes())
    data[-1] ^= 0xFF  # its CRC-32C no longer matches
    manifest.write_bytes(bytes(data))
    seen = _seen(validate(root), root)
    assert [f[0] for f in seen[:2]] == ["OCDBT-050", "OCDBT-005"], seen
    assert seen[1][2] == "./ocdbt.process_0/manifest.ocdbt"
    assert {f[0] for f in seen[2:]} == {"VAL-004"}, seen


def test_eight_keys_sharing_bytes_are_each_reported_and_no_more(tmp_copy):
    """Exactly eight keys sharing stored bytes: eight findings, no summary."""
    root = tmp_copy(BAD / "_base" / "large_values")
    _share_first_value(root, [b"zz/%d" % i for i in range(8)])
    shared = [f for f in _seen(validate(root), root) if f[0] == "OCDBT-024"]
    assert len(shared) == 8 and all(f[3] == "@0" for f in shared), shared


def test_per_process_databases_without_a_merged_manifest_are_all_read(tmp_copy):
    """A multi-process item whose merged manifest is gone: every per-process database is
    checked and read (their keys together hold every array: only OCDBT-050)."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "multiprocess")
    assert len(list(root.glob("ocdbt.process_*"))) > 1
    (root / "manifest.ocdbt").unlink()
    report = validate(root)
    assert report.rules == {"OCDBT-050"} and report.checked["arrays"] > 0, report.format_text()


def test_the_database_is_listed_once(monkeypatch):
    """The keys the database check lists are the keys the array checks use: the item's
    storage is not listed again."""
    from ockpt.engines.python.store import OcdbtStore

    calls = []
    real = OcdbtStore.list
    monkeypatch.setattr(OcdbtStore, "list", lambda self, *a: calls.append(a) or real(self, *a))
    assert validate(FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint").ok
    assert calls == []


def test_chunk_faults_of_an_array_are_reported_eight_at_most(tmp_copy):
    """A per-leaf array of 16 chunks, ten of them damaged and one a hard link to another
    (PATH-008, refused before it is read): the first eight faults in key order are reported,
    each naming its chunk file, and no more."""
    import os
    import shutil

    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    array = root / "replicated"
    meta = json.loads((array / ".zarray").read_text())
    meta["shape"] = [16]
    (array / ".zarray").write_text(json.dumps(meta))
    for i in range(8, 16):
        shutil.copy(array / "0", array / str(i))
    for i in range(10):
        (array / str(i)).write_bytes(b"\x28")  # not a zstd frame
    (array / "13").unlink()
    os.link(array / "12", array / "13")
    progress = []
    report = validate(root, deep=True, progress=lambda d, t, w: progress.append((d, w)))
    read = sum(  # every chunk file of the item but 13, refused before it is read
        p.stat().st_size
        for p in root.rglob("*")
        if p.parent.parent == root
        and p.parent.name != "array_metadatas"
        and not p.name.startswith(".")
        and p != array / "13"
    )
    assert max(d for d, w in progress if w == "chunks") == read
    seen = [f[:3] for f in _seen(report, root)]
    chunks = [*"01", "13", *"23456"]  # in key order: 0, 1, 10, 11, 12, 13, 14, 15, 2, ...
    rules = {c: "PATH-008" if c == "13" else "ZARR-003" for c in chunks}
    assert seen == [(rules[c], "error", f"./replicated/{c}") for c in chunks]


def test_a_per_process_database_failing_deep_verification_is_not_read(tmp_copy, monkeypatch):
    """Without a merged manifest, a per-process database that lists cleanly but whose deep
    verification finds a fault (a damaged node of an older generation; then any fault, as
    `ocdbt.verify` reports it) is waited for and not read: its arrays are missing (VAL-004)
    rather than decoded."""
    import importlib

    validate_module = importlib.import_module("ockpt.validate")
    root = tmp_copy(BAD / "_base" / "large_values")
    (root / "manifest.ocdbt").unlink()
    assert validate(root, deep=True).rules == {"OCDBT-050"}
    node = root / "ocdbt.process_0" / "d" / "9de895519d4d30997053adcb49f0928a"
    original = node.read_bytes()  # the B+tree root of generation 1 of 4: listing never reads it
    node.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert validate(root).rules == {"OCDBT-050"}
    seen = _seen(validate(root, deep=True), root)
    assert [f[:3] for f in seen[:2]] == [
        ("OCDBT-050", "error", "./manifest.ocdbt"),
        ("OCDBT-005", "error", "./ocdbt.process_0/d/9de895519d4d30997053adcb49f0928a"),
    ], seen
    assert {f[0] for f in seen[2:]} == {"VAL-004"} and len(seen) == 5, seen
    node.write_bytes(original)
    fault = ockpt.FormatError("an old node is damaged", rule="OCDBT-005", file="node")
    monkeypatch.setattr(validate_module, "_verified", lambda db: ([fault], 1))
    seen = _seen(validate(root, deep=True), root)
    assert [f[:3] for f in seen[:2]] == [
        ("OCDBT-050", "error", "./manifest.ocdbt"),
        ("OCDBT-005", "error", "node"),
    ], seen
    assert {f[0] for f in seen[2:]} == {"VAL-004"} and len(seen) == 5, seen


def test_a_chunk_that_can_be_neither_held_nor_streamed_is_named_with_its_size(
    no_memory, monkeypatch
):
    """VAL-010, a warning per chunk: "not decoded", with the bytes the chunk needs and the
    memory available, naming the chunk's file."""
    from ockpt.zarr import stream

    monkeypatch.setattr(stream, "streamable", lambda pipeline: False)
    path = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"
    seen = [f for f in _seen(validate(path, deep=True), path) if f[2] == "./replicated/0"]
    assert seen == [
        (
            "VAL-010",
            "warning",
            "./replicated/0",
            None,
            "not decoded: the chunk needs 4 bytes, more than the 0 bytes of memory available",
        )
    ]


def test_a_missing_data_file_of_a_per_process_database_is_not_read(tmp_copy):
    """Without a merged manifest, a per-process database whose value lies in a data file that
    is gone (OCDBT-022) is not read: its arrays are missing (VAL-004)."""
    root = tmp_copy(BAD / "_base" / "large_values")
    (root / "manifest.ocdbt").unlink()
    # the value of b/0 (and the root node of generation 3, not the latest)
    (root / "ocdbt.process_0" / "d" / "ca1c8415dfd0c76416b16028333b7037").unlink()
    seen = _seen(validate(root), root)
    assert [f[:2] for f in seen[:2]] == [("OCDBT-050", "error"), ("OCDBT-022", "error")], seen
    assert seen[1][2] == "./ocdbt.process_0/d/ca1c8415dfd0c76416b16028333b7037"
    assert {f[0] for f in seen[2:]} == {"VAL-004"}, seen


def test_a_key_named_like_a_legacy_strings_file_belongs_to_no_array(tmp_copy):
    """An OCDBT database holds no strings: a key ``<string leaf>/_strings.json`` in it belongs
    to no array (VAL-003); a key named as a string leaf is an older release's strings file and
    is left alone."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "scalars_strings")
    _rewrite_database(root, [(b"str/_strings.json", b"{}"), (b"str_empty", b"")])
    seen = _seen(validate(root), root)
    assert seen == [
        (
            "VAL-003",
            "error",
            "./manifest.ocdbt",
            "str/_strings.json",
            "key 'str/_strings.json' belongs to no array of the item",
        )
    ]


def test_a_random_key_recorded_as_another_implementation(tmp_copy):
    """ARRM-002: a typed PRNG key recorded in array_metadatas as an implementation whose key
    data has another shape, named by its leaf in its array_metadatas file."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "random_keys")
    record_key_impl(root, "rngs.nested.dropout.key", "rbg")
    assert _seen(validate(root), root) == [
        (
            "ARRM-002",
            "error",
            "./array_metadatas/process_0",
            "rngs.nested.dropout.key",
            "leaf 'rngs.nested.dropout.key': recorded as a typed PRNG key (rbg), but the stored "
            "array is uint32 [2], not uint32 [..., 4]",
        )
    ]


def test_array_metadatas_of_two_processes_that_disagree(tmp_copy):
    """ARRM-003: a second process's array_metadatas describing a leaf otherwise than the first
    (the entry readers take) is named, with the file readers take."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "multiprocess")
    file = root / "array_metadatas" / "process_1"
    text = file.read_text(encoding="utf-8")
    before = '"param_name": "none_y", "write_shape": [3, 2]'
    assert before in text
    file.write_text(text.replace(before, '"param_name": "none_y", "write_shape": [1, 2]'))
    assert _seen(validate(root), root) == [
        (
            "ARRM-003",
            "error",
            "./array_metadatas/process_1",
            "none_y",
            "array_metadatas describes 'none_y' otherwise than process_0, the entry readers take",
        )
    ]


def test_a_leaf_marked_skip_deserialize_is_still_an_array_without_a_msgpack_file(tmp_copy):
    """skip_deserialize makes a leaf inline only where the item's msgpack file could not be
    read; in an item without one, such a leaf is still an array leaf with its array."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    doc = json.loads((root / "_METADATA").read_text(encoding="utf-8"))
    doc["tree_metadata"]["('a',)"]["value_metadata"]["skip_deserialize"] = True
    (root / "_METADATA").write_text(json.dumps(doc), encoding="utf-8")
    report = validate(root)
    assert report.findings == [] and report.checked["arrays"] == 7, report.format_text()


def test_param_names_that_collide_or_nest(tmp_copy):
    """PATH-001: two key paths of one param name (the second's tree key escaped as a JSON
    pointer, after an empty node), and a param name nesting inside another, each reported in
    _METADATA; their leaves have no array (VAL-004)."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    doc = json.loads((root / "_METADATA").read_text(encoding="utf-8"))

    def entry(*keys: str, value_type: str = "np.ndarray") -> dict:
        return {
            "key_metadata": [{"key": k, "key_type": 2} for k in keys],
            "value_metadata": {"value_type": value_type, "skip_deserialize": False},
        }

    doc["tree_metadata"] = {
        "('e',)": entry("e", value_type="None"),
        "('x/~y.z',)": entry("x/~y.z"),
        "('x/~y', 'z')": entry("x/~y", "z"),
        "('a/q',)": entry("a/q"),
        **doc["tree_metadata"],
    }
    (root / "_METADATA").write_text(json.dumps(doc), encoding="utf-8")
    assert _seen(validate(root), root) == [
        (
            "PATH-001",
            "error",
            "./_METADATA",
            "/tree_metadata/('x~1~0y', 'z')",
            "key paths ('x/~y.z',) and ('x/~y', 'z') share the param name 'x/~y.z'",
        ),
        ("PATH-001", "error", "./_METADATA", "a/q", "param name 'a/q' nests inside param name 'a'"),
        (
            "VAL-004",
            "error",
            "./_METADATA",
            "a/q",
            "leaf 'a/q' (np.ndarray) has no array in the storage (neither .zarray nor zarr.json "
            "under its param name)",
        ),
        (
            "VAL-004",
            "error",
            "./_METADATA",
            "x/~y.z",
            "leaf 'x/~y.z' (np.ndarray) has no array in the storage (neither .zarray nor "
            "zarr.json under its param name)",
        ),
    ]


def test_missing_chunks_of_a_strict_array_are_listed_eight_then_counted(tmp_copy):
    """ZARR-008 where every chunk is stored: the first eight missing chunk keys in grid order,
    then how many more; the report and its path are the item's."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    array = root / "replicated"
    meta = json.loads((array / ".zarray").read_text())
    meta["shape"] = [16]
    (array / ".zarray").write_text(json.dumps(meta))
    for i in (0, 1):
        (array / str(i)).unlink()
    report = validate(root)
    assert report.path == str(root)
    keys = ", ".join(f"'replicated/{i}'" for i in (0, 1, *range(8, 14)))
    assert _seen(report, root) == [
        (
            "ZARR-008",
            "error",
            ".",
            "replicated/0",
            "array 'replicated': 10 chunk(s) missing, and the checkpoint stores every chunk "
            f"(store_array_data_equal_to_fill_value): {keys} and 2 more",
        )
    ]


def test_items_of_a_v1_checkpoint_that_no_reader_takes(tmp_copy):
    """A directory no handler vouches for is a warning (VAL-008, with why it is no item); one
    whose handler ockpt does not read is left alone; one whose handler ockpt reads, but which
    does not hold what that handler writes, is that handler's error, naming the item."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "v1_checkpointables")
    meta = json.loads((root / "_CHECKPOINT_METADATA").read_text(encoding="utf-8"))
    meta["item_handlers"]["custom"] = "my.package.CustomHandler"
    meta["item_handlers"]["broken"] = meta["item_handlers"]["extra"]  # JsonHandler
    (root / "_CHECKPOINT_METADATA").write_text(json.dumps(meta), encoding="utf-8")
    for name in ("custom", "broken", "junk"):
        (root / name).mkdir()
        for file in ("a", "b"):  # two files: no JSON item
            (root / name / file).write_text("{}", encoding="utf-8")
    report = validate(root)
    assert report.checked["items"] == 2, report.format_text()
    assert _seen(report, root) == [
        (
            "HANDLER-001",
            "error",
            "./broken",
            None,
            "item 'broken': written by JsonHandler, but holds no single file",
        ),
        (
            "VAL-008",
            "warning",
            "./junk",
            None,
            "a directory of a step or v1 checkpoint that is no known item: no _METADATA, "
            "checkpoint file, manifest.ocdbt, per-leaf zarr arrays, _CHECKPOINT_METADATA, "
            "orbax.checkpoint marker or step directories",
        ),
    ]


@pytest.mark.parametrize("extra", [32, 33])
def test_keys_of_no_array_are_reported_32_at_most(tmp_copy, extra):
    """VAL-003: the first 32 keys that belong to no array one by one, then how many more."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "sharded")
    _rewrite_database(root, [(b"zz/%02d" % i, b"x") for i in range(extra)])
    seen = _seen(validate(root), root)
    assert [f[3] for f in seen[:32]] == [f"zz/{i:02d}" for i in range(32)]
    assert all(f[:3] == ("VAL-003", "error", "./manifest.ocdbt") for f in seen)
    more = [("VAL-003", "error", "./manifest.ocdbt", None, "1 more keys belong to no array leaf")]
    assert seen[32:] == (more if extra == 33 else [])


def test_every_array_is_checked_after_one_whose_metadata_is_broken(tmp_copy):
    """A zarr metadata document that cannot be read is reported and the arrays after it are
    still checked."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "no_ocdbt")
    for name in ("a", "replicated"):
        (root / name / ".zarray").write_bytes(b"{")
    seen = _seen(validate(root), root)
    assert [f[:3] for f in seen] == [
        ("JSON-001", "error", "./a/.zarray"),
        ("JSON-001", "error", "./replicated/.zarray"),
    ], seen


def test_a_param_name_ending_in_x(tmp_path):
    """A param name's keys are found under the name itself, whatever its last character."""
    ockpt.save_pytree(tmp_path / "c", {"aX": np.arange(3), "bX/": {"c": np.arange(2)}})
    report = validate(tmp_path / "c")
    assert report.findings == [] and report.checked["arrays"] == 2, report.format_text()


def test_a_pytree_item_whose_tree_no_reader_can_tell(tmp_copy):
    """LOAD-050: an item with a database but neither _METADATA nor the msgpack file."""
    root = tmp_copy(FIXTURES / "orbax-0.12.8" / "sharded")
    (root / "_METADATA").unlink()
    seen = _seen(validate(root), root)
    assert seen[0] == (
        "LOAD-050",
        "error",
        ".",
        None,
        "a pytree item without _METADATA or the msgpack checkpoint file: no reader can tell "
        "its tree",
    ), seen


def test_a_document_removed_while_validated(monkeypatch):
    """A document listed but gone when read: VAL-009 naming it, and nothing parsed from it."""
    from ockpt.store import LocalStore

    real = LocalStore.get

    def get(self, name, **kw):
        return None if name == "_sharding" else real(self, name, **kw)

    monkeypatch.setattr(LocalStore, "get", get)
    path = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"
    assert _seen(validate(path), path) == [
        ("VAL-009", "error", "./_sharding", None, "removed while validated")
    ]


@pytest.mark.parametrize(
    ("case", "name", "field", "rule"),
    [
        ("orbax-0.12.8/sharded", "array_metadatas/process_0", "max_json_bytes", "JSON-003"),
        ("orbax-0.3.5/scalars_strings", "checkpoint", "max_msgpack_bytes", "MSGPACK-001"),
    ],
)
def test_a_document_over_its_limit(case, name, field, rule):
    """Each document is read within its own limit: JSON documents `max_json_bytes` (JSON-003),
    the msgpack file `max_msgpack_bytes` (MSGPACK-001): a limit one byte under its size refuses
    it, its size does not."""
    from ockpt.limits import LIMITS

    path = FIXTURES / case / "checkpoint"
    size = (path / name).stat().st_size
    for limit, refused in ((size, False), (size - 1, True)):
        limits = dataclasses.replace(LIMITS, **{field: limit})
        found = [f[:3] for f in _seen(validate(path, limits=limits), path)]
        assert ((rule, "error", f"./{name}") in found) is refused, found
