"""The structure of the package, checked from its source: one open, no private imports.

* Every file of a checkpoint is opened through `ockpt.store` (the one hardened open: regular
  files only, nothing outside the checkpoint, bounded reads; the save protocol for writes).
  Outside `ockpt/store/` only the places listed in `OPENS_ALLOWED` open or list files, each
  for a file that is not a checkpoint's (the user's output file, the package's schemas).
* No module imports a private name (``_name``) of another module of ockpt, nor reaches one
  as ``module._name``.
* ockpt never imports orbax.
* The file and directory names of the format are spelled in `ockpt.names` only (docstrings and
  prose in messages aside).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "reference" / "ockpt"

#: Calls that open or list files.
_IO_CALLS = {
    ("os", "open"),
    ("io", "open"),
    ("np", "memmap"),
    ("np", "fromfile"),
    ("os", "scandir"),
    ("os", "listdir"),
    ("os", "walk"),
}

#: (module, function) -> why it may open or list files without `ockpt.store`.
OPENS_ALLOWED = {
    ("convert.py", "_write_pt"): "the temporary files backing the tensors torch.save streams",
    ("sources.py", "NpzSource._file"): "a temporary file the source made (a deflated member)",
    ("sources.py", "guess_format"): "lists the user's path to tell its format (no open)",
    ("sources.py", "open_source"): "lists the user's path to tell its format (no open)",
    ("schema.py", "_load"): "the package's own JSON Schemas",
    ("limits.py", "_system_file"): "the system's /proc and cgroup memory figures",
    ("conformance/runner.py", "_Runner._spawn"): "the suite's own pipes to its worker",
    ("conformance/fixture_cases.py", "bad_cases"): "the fixtures' bad/expected.json",
    ("conformance/command.py", "output_schema"): "the package's own JSON Schema",
    ("conformance/command.py", "CommandAdapter.from_spec"): "the user's capabilities file",
    ("conformance/command.py", "CommandAdapter._json"): "what a command reader wrote into {out}",
    ("conformance/export.py", "_schema_text"): "the package's own JSON Schemas",
    ("conformance/export.py", "spec_version"): "the spec's README, for its version",
    ("sources.py", "_memmap"): "maps a file opened through store.files (`_open`)",
    ("_commands.py", "_cmd_fingerprint"): "the user's output file (--out)",
    ("testing/formats.py", "assert_same_format"): "the user's fingerprint file, rewritten",
    ("testing/orbax_venvs.py", "release_python"): "the lock file of a venv being built",
}


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (p.relative_to(PACKAGE).as_posix(), ast.parse(p.read_text(encoding="utf-8")))
        for p in sorted(PACKAGE.rglob("*.py"))
    ]


def _io_calls(tree: ast.Module) -> list[tuple[str, int, str]]:
    """(enclosing function, line, call) for each call that opens or lists files."""
    found: list[tuple[str, int, str]] = []
    scope: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_scope(self, node: ast.AST) -> None:
            scope.append(node.name)  # type: ignore[attr-defined]
            self.generic_visit(node)
            scope.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_scope

        def visit_Call(self, node: ast.Call) -> None:
            fn = node.func
            name = None
            if isinstance(fn, ast.Name) and fn.id == "open":
                name = "open"
            elif isinstance(fn, ast.Attribute):
                if isinstance(fn.value, ast.Name) and (fn.value.id, fn.attr) in _IO_CALLS:
                    name = f"{fn.value.id}.{fn.attr}"
                elif fn.attr in ("read_bytes", "read_text"):
                    name = f".{fn.attr}"
            if name is not None:
                found.append((".".join(scope) or "<module>", node.lineno, name))
            self.generic_visit(node)

    Visitor().visit(tree)
    return found


def test_checkpoint_files_are_opened_through_the_store_only():
    stray = []
    used = set()
    for module, tree in _modules():
        if module.startswith("store/"):
            continue
        for function, line, call in _io_calls(tree):
            key = (module, function)
            if key in OPENS_ALLOWED:
                used.add(key)
            else:
                stray.append(f"{module}:{line} {function}: {call}")
    assert not stray, "files opened or listed outside ockpt.store:\n" + "\n".join(stray)
    assert used == set(OPENS_ALLOWED), f"allowances no longer needed: {set(OPENS_ALLOWED) - used}"


def _ockpt_module(level: int, name: str | None) -> bool:
    return level > 0 or (name or "").split(".")[0] == "ockpt"


def _is_module(module: str, node: ast.ImportFrom, name: str) -> bool:
    """Whether ``from <node.module> import <name>`` names a module of the package (a module
    whose name starts with ``_`` is private to the package, not to another module)."""
    if node.level:
        base = (PACKAGE / module).parent
        for _ in range(node.level - 1):
            base = base.parent
    else:
        base = PACKAGE.parent
    for part in (node.module or "").split("."):
        if part:
            base = base / part
    return (base / f"{name}.py").exists() or (base / name / "__init__.py").exists()


def test_no_private_names_cross_modules():
    crossing = []
    for module, tree in _modules():
        aliases: set[str] = set()  # names bound to ockpt modules in this module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _ockpt_module(node.level, node.module):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and not _is_module(module, node, alias.name):
                        crossing.append(f"{module}:{node.lineno} imports {alias.name}")
                    aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "ockpt":
                        aliases.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                crossing.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not crossing, "private names used across modules:\n" + "\n".join(crossing)


def test_ockpt_never_imports_orbax():
    found = []
    for module, tree in _modules():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            found += [f"{module}:{node.lineno} {n}" for n in names if n.split(".")[0] == "orbax"]
    assert not found, found


#: Names of `ockpt.names` too common as words or keys to scan the package's strings for.
_COMMON_NAMES = {"metadata", "checkpoint", "d", "default", "state", "pytree", "metrics"}

#: (module, name) -> why the module may spell a file name of the format as a literal.
NAME_LITERALS_ALLOWED = {
    ("documents/array_metadatas.py", "array_metadatas"): (
        "the JSON field of the document, which shares its directory's name"
    ),
}


def _file_names() -> set[str]:
    from ockpt import names

    found = set()
    for name in names.__all__:
        value = getattr(names, name)
        if isinstance(value, str):
            found |= {value, *value.split("/")}  # a path's basenames too (_ROOT_METADATA)
    return found - _COMMON_NAMES


def _spelled_names(text: str, known: set[str]) -> set[str]:
    """The file names `text` spells: the whole string, or a segment of a path in it (a string
    without spaces). Prose that mentions a name (an error message) does not count."""
    if text in known:
        return {text}
    if "/" in text and not any(c.isspace() for c in text):
        return set(text.split("/")) & known
    return set()


def test_file_names_are_defined_once():
    """Every file and directory name of the format is spelled in `ockpt.names` only; other
    modules import it from there. Docstrings and prose in messages are not checked."""
    known = _file_names()
    stray = []
    used = set()
    for module, tree in _modules():
        if module == "names.py":
            continue
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in docstrings:
                continue
            value = node.value
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if not isinstance(value, str):
                continue
            for name in sorted(_spelled_names(value, known)):
                if (module, name) in NAME_LITERALS_ALLOWED:
                    used.add((module, name))
                else:
                    stray.append(f"{module}:{node.lineno} {value!r}")
    assert not stray, "file names spelled outside ockpt.names:\n" + "\n".join(stray)
    assert used == set(NAME_LITERALS_ALLOWED), (
        f"allowances no longer needed: {set(NAME_LITERALS_ALLOWED) - used}"
    )


#: Names that tell one kind of store from another: only the store package may use them.
_STORE_KINDS = {"LocalStore", "UrlStore", "MemoryStore", "is_url"}


def test_nothing_outside_the_store_package_branches_on_where_a_store_is():
    """A caller takes a `Store` and asks it (its capabilities, `os_path` for a file to map);
    no module outside ``ockpt/store/`` names a kind of store, tests a path for ``://`` or
    reads a local path off a store."""
    found = []
    for module, tree in _modules():
        if module.startswith("store/"):
            continue
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name) and node.id in _STORE_KINDS:
                name = node.id
            elif isinstance(node, ast.Attribute) and node.attr in _STORE_KINDS | {"local"}:
                if not (isinstance(node.value, ast.Name) and node.value.id == "threading"):
                    name = f".{node.attr}"
            elif isinstance(node, ast.alias) and node.name in _STORE_KINDS:
                name = f"import {node.name}"
            elif isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and "://" in c.value
                for c in (node.left, *node.comparators)
            ):
                name = "'://' test"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith")
                and any(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and "://" in a.value
                    for a in node.args
                )
            ):
                name = "'://' test"
            if name is not None:
                found.append(f"{module}:{node.lineno}: {name}")
    assert not found, "local-vs-URL branches outside ockpt.store:\n" + "\n".join(found)


def test_the_branch_check_sees_a_branch(tmp_path):
    """The check above finds each form it looks for (so a pass means none is there)."""
    code = (
        "from .store import LocalStore, is_url\n"
        "def f(p, s):\n"
        "    if '://' in p or p.startswith('gs://') or is_url(p) or s.local:\n"
        "        return isinstance(s, LocalStore)\n"
    )
    tree = ast.parse(code)
    kinds = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.name in _STORE_KINDS:
            kinds.add("import")
        elif isinstance(node, ast.Compare):
            kinds.add("compare")
        elif isinstance(node, ast.Attribute) and node.attr == "local":
            kinds.add("local")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "startswith":
            kinds.add("startswith")
    assert kinds == {"import", "compare", "local", "startswith"}
