"""Which rules of the spec a test module asserts as data, read from its source (`ast`), for the
spec's meta-tests (tests/spec/test_spec.py): a rule id counts when a test

* compares it with a rule: ``err.rule == "X-001"``, ``rule(e) == ...``, ``{f.rule for f in
  found} == {...}``, ``(e.rule, e.file) == ("X-001", "f")``, or with a name that was bound to
  such an expression (``found = [(f.rule, f.file) for f in report]``);
* passes it as ``rule=`` or ``rules=`` (`tests.support.errors.assert_error`, ``Finding.of``), or
  writes it as the ``"rule"`` entry of a dict (``error_fields(e) == {"rule": "X-001", ...}``);
* gives it in a ``parametrize`` table (or a module constant) whose values reach a comparison
  with a rule: through a parameter, an assignment (``tree, rule, name = TABLE[case]``) or a
  helper function of the module that compares its parameter with a rule.

A rule id that a test only mentions (a docstring, a comment, a ``match=`` on the message, an
id of a test) does not count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

RULE_ID = re.compile(r"[A-Z]+(?:-[A-Z]+)*-[0-9]{3}")
_RULE_NAMES = ("rule", "rules")


def _ids(node: ast.AST) -> set[str]:
    """The rule ids written as whole string constants inside `node`."""
    return {
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and RULE_ID.fullmatch(n.value)
    }


def _is_rule(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` evaluates to a rule (or rules) of an error or finding."""
    if isinstance(node, ast.Attribute):
        return node.attr in _RULE_NAMES
    if isinstance(node, ast.Name):
        return node.id in _RULE_NAMES or node.id in names
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "rule" or _is_rule(node.value, names)
    if isinstance(node, (ast.SetComp, ast.ListComp, ast.GeneratorExp)):
        return _is_rule(node.elt, names)
    if isinstance(node, ast.DictComp):
        return _is_rule(node.key, names) or _is_rule(node.value, names)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_rule(e, names) for e in node.elts)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name.endswith(_RULE_NAMES):
            return True
        return name in ("sorted", "set", "list", "tuple", "Counter", "frozenset") and any(
            _is_rule(a, names) for a in node.args
        )
    return False


def _rule_names(scope: ast.AST) -> set[str]:
    """Names bound in `scope` to a value holding rules (``found = [(f.rule, ...) for ...]``)."""
    names: set[str] = set()
    for _ in range(2):  # a name bound from another such name
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _is_rule(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _compared(scope: ast.AST, names: set[str]) -> tuple[set[str], set[str]]:
    """(rule ids compared with a rule in `scope`, names compared with a rule there)."""
    ids: set[str] = set()
    params: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_rule(s, names) for s in sides):
                for side in sides:
                    ids |= _ids(side)
                    params |= {n.id for n in ast.walk(side) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.keyword) and node.arg in _RULE_NAMES:
            ids |= _ids(node.value)
            params |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "rule":
                    ids |= _ids(value)
                    params |= {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    return ids, params


def _bound(node: ast.Assign) -> set[str]:
    """The names an assignment binds (``a, (b, c) = ...``)."""
    return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def asserted_rules(source: str) -> set[str]:
    """The rule ids a test module (its source) asserts as data (the module docstring)."""
    tree = ast.parse(source)
    constants = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name) and node.value is not None
    }
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    # per function, the names it compares with a rule (computed once: the walks are the cost)
    compared_in = [_compared(fn, _rule_names(fn))[1] for fn in functions]
    # helpers that compare one of their parameters with a rule: name -> positions, names
    helpers: dict[str, tuple[list[int], set[str]]] = {}
    for fn, compared in zip(functions, compared_in, strict=True):
        args = [a.arg for a in fn.args.args]
        positions = [i for i, a in enumerate(args) if a in compared]
        if positions:
            helpers[fn.name] = (positions, {args[i] for i in positions})
    found, _ = _compared(tree, _rule_names(tree))
    for fn, names in zip(functions, compared_in, strict=True):
        compared = set(names)  # grown below with what reaches the rule
        for _ in range(2):  # `tree, rule, name = TABLE[case]`: case and TABLE reach the rule
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and _bound(node) & compared:
                    compared |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        for name in compared & set(constants):
            found |= _ids(constants[name])
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in helpers:
                positions, keywords = helpers[call.func.id]
                given = [call.args[i] for i in positions if i < len(call.args)]
                given += [k.value for k in call.keywords if k.arg in keywords]
                for value in given:
                    found |= _ids(value)
                    compared |= {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        for deco in fn.decorator_list:
            if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"):
                continue
            if len(deco.args) < 2 or not isinstance(deco.args[0], ast.Constant):
                continue
            if {p.strip() for p in str(deco.args[0].value).split(",")} & compared:
                table = deco.args[1]
                found |= _ids(table)
                for name in {n.id for n in ast.walk(table) if isinstance(n, ast.Name)}:
                    if name in constants:
                        found |= _ids(constants[name])
    return found


def asserted_in(paths: list[Path]) -> set[str]:
    """The rule ids the test modules at `paths` assert."""
    found: set[str] = set()
    for path in paths:
        found |= asserted_rules(path.read_text(encoding="utf-8"))
    return found
