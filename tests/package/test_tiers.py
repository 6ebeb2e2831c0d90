"""The default run and the slow matrix (issue 34): ``python -m pytest -q`` leaves out the tests
marked ``slow`` (``--slow`` runs them, as `.ci/run` does), and what it keeps still asserts every
rule of the specification and reads every fixture release."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ockpt.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
RULE_ID = re.compile(r"\b[A-Z]+(?:-[A-Z]+)*-[0-9]{3}\b")


def _is_slow_mark(node: ast.expr) -> bool:
    """`pytest.mark.slow`, alone or in a list."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow_mark(e) for e in node.elts)
    return isinstance(node, ast.Attribute) and node.attr == "slow"


def _default_text(path: Path) -> str:
    """The source of `path` as the default run runs it: nothing of a module marked slow, and
    the module less its functions marked slow."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            if _is_slow_mark(node.value):
                return ""
    lines = text.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _is_slow_mark(d) for d in node.decorator_list
        ):
            start = min(d.lineno for d in node.decorator_list) - 1
            for i in range(start, node.end_lineno or start):
                lines[i] = ""
    return "\n".join(lines)


def _default_sources() -> str:
    texts = []
    for path in sorted([*TESTS.rglob("*"), *(ROOT / "conformance").glob("*.py")]):
        if not path.is_file() or path.name in ("test_spec.py", "test_tiers.py"):
            continue
        if path.suffix == ".py":
            texts.append(_default_text(path))
        elif path.suffix == ".json":
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(texts)


def test_the_default_run_asserts_every_rule():
    """Each rule is named by a test the default run keeps (the spec's meta-test asks only that
    some test names it)."""
    used = set(RULE_ID.findall(_default_sources()))
    only_slow = sorted(set(RULES) - used)
    assert not only_slow, f"rules only the slow matrix names: {', '.join(only_slow)}"


def test_the_slow_marker_is_declared_and_ci_runs_it():
    """The marker is declared (pytest warns of unknown marks), and `.ci/run` runs the slow
    matrix in both of its runs."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"slow: the slow matrix, run with --slow' in pyproject
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.count("python -m pytest -q --slow") == 2  # as installed, and without tensorstore
