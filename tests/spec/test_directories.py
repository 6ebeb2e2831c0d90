"""spec/directories.md rules on small hand-made trees and on the fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ockpt.layout import Kind, detect, is_temporary_name, parse_step_name
from tests.support import fixture_cases


def _item(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "_METADATA").write_text('{"tree_metadata": {}}')
    return path


def _step(path: Path, items: dict[str, str], *, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "_CHECKPOINT_METADATA").write_text(json.dumps({"item_handlers": items}))
    if commit:
        (path / "commit_success.txt").write_text("Checkpoint commit was successful")
    return path


@pytest.mark.parametrize(
    "name, temporary",
    [
        ("state.orbax-checkpoint-tmp", True),  # 0.11.19+
        ("12.orbax-checkpoint-tmp-0", True),  # 0.5.15
        ("item.orbax-checkpoint-tmp-1731000000", True),
        ("orbax-checkpoint-tmp", False),
        ("state", False),
    ],
)
def test_temporary_names(name, temporary):
    """LAYOUT-001: any name containing '.orbax-checkpoint-tmp' is an unfinished save."""
    assert is_temporary_name(name) is temporary


def test_temporary_directory_is_not_a_checkpoint(tmp_path):
    """LAYOUT-001: a temporary directory is never read as committed, whatever it holds."""
    tmp = _item(tmp_path / "item.orbax-checkpoint-tmp")
    layout = detect(tmp)
    assert layout.kind is Kind.TEMPORARY and not layout.committed


def test_validate_reports_a_temporary_directory_and_a_temporary_item(tmp_path):
    """LAYOUT-001: the validator reports an unfinished save (a temporary directory, or an item
    of a committed step under a temporary name) and validates nothing inside it."""
    import ockpt

    tmp = _item(tmp_path / "item.orbax-checkpoint-tmp")
    found = [(f.rule, f.file) for f in ockpt.validate(tmp).findings]
    assert found == [("LAYOUT-001", str(tmp))]
    step = _step(tmp_path / "root" / "1", {"default": "h"})
    _item(step / "default")
    _item(step / "extra.orbax-checkpoint-tmp-1731000000")
    found = [(f.rule, f.file) for f in ockpt.validate(step).findings if f.rule == "LAYOUT-001"]
    assert found == [("LAYOUT-001", str(step / "extra.orbax-checkpoint-tmp-1731000000"))]


def test_temporary_step_is_not_listed_as_committed(tmp_path):
    """LAYOUT-001: a manager root lists a temporary step as uncommitted."""
    root = tmp_path / "root"
    _item(_step(root / "1", {"default": "h"}) / "default")
    _step(root / "2.orbax-checkpoint-tmp", {"default": "h"}, commit=False)
    layout = detect(root)
    assert layout.kind is Kind.MANAGER_ROOT
    assert [(s.step, s.committed) for s in layout.steps] == [(1, True), (2, False)]
    assert layout.latest_step.step == 1


def test_step_without_commit_file(tmp_path):
    """LAYOUT-002 (warning): the step is still read, and the missing marker is reported."""
    root = tmp_path / "root"
    _item(_step(root / "3", {"default": "h"}, commit=False) / "default")
    layout = detect(root)
    (step,) = layout.steps
    assert step.committed and not step.has_commit_file


def test_item_named_by_handlers_must_exist(tmp_path):
    """LAYOUT-003: every item of item_handlers is a directory of the step."""
    step = _step(tmp_path / "5", {"params": "h", "meta": "h"})
    _item(step / "params")
    layout = detect(step)
    assert layout.kind is Kind.STEP
    assert any(p.rule == "LAYOUT-003" and "meta" in p.message for p in layout.problems), (
        layout.problems
    )


def test_mixed_step_name_formats(tmp_path):
    """LAYOUT-004 (warning): steps of one root should share one prefix."""
    root = tmp_path / "root"
    _item(_step(root / "run_1", {"default": "h"}) / "default")
    _item(_step(root / "eval_2", {"default": "h"}) / "default")
    layout = detect(root)
    assert [s.step for s in layout.steps] == [1, 2]
    assert any(p.rule == "LAYOUT-004" for p in layout.problems), layout.problems


@pytest.mark.parametrize(
    "name, parsed",
    [("7", (None, 7)), ("000012", (None, 12)), ("run_000007", ("run", 7)), ("a_b_3", ("a_b", 3))],
)
def test_step_names(name, parsed):
    assert parse_step_name(name) == parsed


def test_metadata_directory_is_not_a_step():
    assert parse_step_name("metadata") is None


@pytest.mark.parametrize("case", fixture_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixtures_have_no_temporary_names_and_no_layout_problems(case):
    """LAYOUT-001/003/004 hold on everything real Orbax committed."""
    for path in (case / "checkpoint").rglob("*"):
        assert not is_temporary_name(path.name), path
    layout = detect(case / "checkpoint")
    assert layout.kind is not Kind.NOT_A_CHECKPOINT
    assert not [p for p in layout.problems if p.rule.startswith("LAYOUT-")]
