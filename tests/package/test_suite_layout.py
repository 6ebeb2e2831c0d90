"""The shape of the test suite itself (issue 34): tests/ mirrors the package, so the tests of
``ockpt/ocdbt/tree.py`` are in ``tests/ocdbt/test_tree.py`` (and ``test_tree_<aspect>.py``);
what concerns the package as a whole is in a few named suites; and no test module imports
another: what tests share is in ``tests/support`` (or shipped to users as `ockpt.testing`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

TESTS = ROOT / "tests"
PACKAGE = ROOT / "reference" / "ockpt"

#: Folders of tests/ that hold suites of the whole package, not of one module.
WHOLE_PACKAGE = {
    "spec": "the spec's text, its JSON Schemas and the format history, checked on the fixtures",
    "hostile": "hostile checkpoints through every entry point: limits, bombs, fuzzing, permissions",
    "durability": "saves killed at every file-system event, and concurrent saves",
    "interop": "real Orbax releases, JAX processes and training runs on both sides",
    "package": "the package's structure, imports, test tiers and this layout",
}
#: Folders of tests/ that hold no tests.
NOT_TESTS = {"support", "mutation", "site_no_tensorstore", "__pycache__"}

TEST_FILES = sorted(TESTS.rglob("test_*.py"))


def _modules(package: Path) -> set[str]:
    """The names a test file in the folder mirroring `package` may be named for: each module
    (a private one without its underscore), each subpackage, and the package itself."""
    names = {package.name if package != PACKAGE else "ockpt"}
    for p in package.iterdir():
        if p.suffix == ".py" and p.stem != "__init__":
            names.add(p.stem.lstrip("_"))
        elif (p / "__init__.py").is_file():
            names.add(p.name)
    return names


def _named_for(stem: str, names: set[str]) -> bool:
    return any(stem == f"test_{n}" or stem.startswith(f"test_{n}_") for n in names)


def test_every_folder_mirrors_the_package_or_is_a_named_suite():
    folders = {
        p.relative_to(TESTS)
        for p in TESTS.rglob("*")
        if p.is_dir() and not NOT_TESTS & set(p.relative_to(TESTS).parts)
    }
    stray = []
    for folder in sorted(folders):
        top = folder.parts[0]
        if top in WHOLE_PACKAGE or top == "documents" and len(folder.parts) > 1:
            continue  # tests/documents/invalid/ and schema-invalid/ hold documents
        if not (PACKAGE / folder / "__init__.py").is_file():
            stray.append(str(folder))
    assert not stray, f"folders of tests/ that mirror no package of ockpt: {stray}"


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_a_test_file_is_named_for_what_it_tests(path):
    folder = path.parent.relative_to(TESTS)
    if folder.parts and folder.parts[0] in WHOLE_PACKAGE:
        return
    names = _modules(PACKAGE / folder)
    assert _named_for(path.stem, names), (
        f"{path.relative_to(ROOT)} is named for no module of ockpt/{folder}: name it "
        f"test_<module>[_<aspect>].py for one of {sorted(names)}, or move it to one of the "
        f"whole-package suites {sorted(WHOLE_PACKAGE)}"
    )


def _imported(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "tests":
                found += [(node.lineno, f"tests.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def _is_test_module(name: str) -> bool:
    """True for an import of another test module (or conftest) rather than of tests.support."""
    if name.startswith("."):
        return True  # relative imports are only ever between test modules here
    parts = name.split(".")
    if parts[0] == "tests":
        return len(parts) > 1 and parts[1] != "support"
    return parts[0] == "conftest" or parts[0].startswith("test_")


@pytest.mark.parametrize(
    "path",
    sorted(p for p in TESTS.rglob("*.py") if not NOT_TESTS & set(p.relative_to(TESTS).parts[:-1])),
    ids=lambda p: str(p.relative_to(TESTS)),
)
def test_no_test_module_imports_another(path):
    bad = [
        f"line {line}: {name}"
        for line, name in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if _is_test_module(name)
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports test modules (use tests.support): {bad}"


def test_the_layout_checks_catch_what_they_guard():
    """The checks above refuse a test module's import and a file named for nothing."""
    assert _is_test_module("tests.ocdbt.test_tree") and _is_test_module("conftest")
    assert _is_test_module("test_reader") and _is_test_module(".test_tree")
    assert not _is_test_module("tests.support.ocdbt") and not _is_test_module("ockpt.testing")
    names = _modules(PACKAGE / "ocdbt")
    assert {"ocdbt", "tree", "format", "verify", "write", "dump"} <= names
    assert _named_for("test_tree_big", names) and not _named_for("test_trees", names)
    tree = ast.parse("from tests import support\nfrom tests import ocdbt\n")
    assert [n for _, n in _imported(tree) if _is_test_module(n)] == ["tests.ocdbt"]
