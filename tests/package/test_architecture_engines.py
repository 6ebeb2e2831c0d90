"""The shape of the package: no import circles, and no module outside `ockpt.engines` that
checks whether an object is of one of the engines' classes (the reader goes through the
contract, `ockpt.engines.contract`, and `engines.open_store`)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

PACKAGE = ROOT / "reference" / "ockpt"
ENGINES = PACKAGE / "engines"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _from_target(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement of `module` imports from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The ockpt modules an import statement of `module` names (a package's `__init__` when a
    name imported from it is not a submodule)."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
        return out
    target = _from_target(module, path, node)
    if target not in MODULES:
        return out
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.add(sub if sub in MODULES else target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the ockpt modules it imports.

    Every import statement counts: at module level, inside functions (lazy imports) and under
    ``if TYPE_CHECKING:``: a lazy or type-only import still ties the two modules together,
    and a circle through one is a circle of the design. Not counted is the import of a
    module's parent packages, which Python makes before the module itself: a package's
    `__init__` importing its own submodules is not a circle."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(module, path, node)
        edges.discard(module)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a path back to its start) per strongly connected component of more than
    one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    components.append(component)
    out = []
    for component in components:
        start = min(component)
        paths = {start: [start]}
        queue = [start]
        found = None
        while queue and found is None:  # the shortest way round from `start`
            v = queue.pop(0)
            for w in sorted(graph[v] & component):
                if w == start:
                    found = paths[v] + [start]
                    break
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
        assert found is not None
        out.append(found)
    return out


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert "ockpt.engines.contract" in graph["ockpt.engines"]
    assert "ockpt.engines.tensorstore.stage" in graph["ockpt.engines.tensorstore.store"]
    assert "ockpt.engines.python" in graph["ockpt.engines"]  # lazily, in open_store
    assert "ockpt.store" in graph["ockpt.reader.item"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_circles():
    cycles = _cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# ---------------------------------------------------------------------------------------------
# No checks of the engines' concrete classes outside the engines.


def _engine_classes() -> set[str]:
    names = set()
    for path in ENGINES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names.add(node.name)
    return names


def _engine_aliases(module: str, path: Path, tree: ast.AST, classes: set[str]):
    """(names bound to modules of the engines, names bound to classes of the engines) in the
    module `module`, wherever it imports them."""
    modules: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ockpt.engines"):
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(module, path, node)
            for alias in node.names:
                local = alias.asname or alias.name
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    if sub.startswith("ockpt.engines"):
                        modules.add(local)
                elif target.startswith("ockpt.engines") and alias.name in classes:
                    bound.add(local)
    return modules, bound


def _is_engine_class(expr: ast.expr, modules: set[str], bound: set[str], classes: set[str]):
    if isinstance(expr, ast.Tuple):
        return any(_is_engine_class(e, modules, bound, classes) for e in expr.elts)
    if isinstance(expr, ast.Name):
        return expr.id in bound
    if isinstance(expr, ast.Attribute) and expr.attr in classes:
        root = expr.value
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in modules
    return False


def class_checks_outside_engines() -> list[str]:
    """``module:line`` of each ``isinstance(x, C)``, ``issubclass(x, C)`` and
    ``type(x) is C`` (``is not``, ``==``, ``!=``) outside ockpt/engines where C is a class
    defined in ockpt/engines."""
    classes = _engine_classes()
    found = []
    for module, path in MODULES.items():
        if module == "ockpt.engines" or module.startswith("ockpt.engines."):
            continue
        tree = ast.parse(path.read_text())
        modules, bound = _engine_aliases(module, path, tree, classes)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
                and _is_engine_class(node.args[1], modules, bound, classes)
            ):
                found.append(f"{module}:{node.lineno}")
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                typed = any(
                    isinstance(o, ast.Call) and isinstance(o.func, ast.Name) and o.func.id == "type"
                    for o in operands
                )
                if typed and any(_is_engine_class(o, modules, bound, classes) for o in operands):
                    found.append(f"{module}:{node.lineno}")
    return found


def test_the_check_finds_class_checks(tmp_path, monkeypatch):
    source = (
        "from .engines.tensorstore import store\n"
        "from .engines.python.store import ArrayStore as PythonStore\n"
        "from . import engines\n"
        "def f(x):\n"
        "    return (type(x) is store.ArrayStore, isinstance(x, (int, PythonStore)),\n"
        "            isinstance(x, engines.ReadRequest), isinstance(x, int))\n"
    )
    path = PACKAGE / "_probe.py"
    monkeypatch.setitem(MODULES, "ockpt._probe", path)
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: source if p == path else real(p))
    want = ["ockpt._probe:5", "ockpt._probe:5", "ockpt._probe:6"]  # type(x) is; isinstance
    assert sorted(class_checks_outside_engines()) == want


def test_no_class_checks_of_engine_classes_outside_engines():
    found = class_checks_outside_engines()
    assert not found, f"checks of the engines' concrete classes: {found}"
