"""Meta-tests of the specification text: rule anchors, rule coverage by tests, links, examples."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from ockpt.rules import RULES
from tests.support import HAVE_TENSORSTORE
from tests.support.asserted_rules import asserted_in, asserted_rules

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
TESTS = ROOT / "tests"
SPEC_VERSION = "1.1.0"

#: Chapters spec/README.md must link, in reading order.
CHAPTERS = (
    "overview.md",
    "directories.md",
    "checkpointables.md",
    "json-documents.md",
    "key-paths.md",
    "msgpack.md",
    "arrays.md",
    "ocdbt.md",
    "loading.md",
    "writing.md",
    "validation.md",
    "limits.md",
    "history.md",
    "CHANGELOG.md",
    "schemas/README.md",
)


ANCHOR = re.compile(r"\{#([A-Z]+(?:-[A-Z]+)*-[0-9]{3})\}")
RULE_ID = re.compile(r"\b[A-Z]+(?:-[A-Z]+)*-[0-9]{3}\b")
CODE_SPAN = re.compile(r"`[^`\n]*`")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _spec_files() -> list[Path]:
    return sorted(SPEC.rglob("*.md"))


def _prose(text: str) -> str:
    """Text with fenced blocks and code spans removed (anchors inside code do not count)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchors() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _spec_files():
        for rule_id in ANCHOR.findall(_prose(path.read_text(encoding="utf-8"))):
            found.setdefault(rule_id, []).append(str(path.relative_to(SPEC)))
    return found


def test_every_spec_anchor_is_a_registered_rule():
    unknown = {rid: files for rid, files in _anchors().items() if rid not in RULES}
    assert not unknown, f"anchors with no entry in ockpt.rules.RULES: {unknown}"


def test_every_anchor_is_defined_once_in_the_chapter_the_registry_names():
    anchors = _anchors()
    twice = {rid: files for rid, files in anchors.items() if len(files) > 1}
    assert not twice, f"rule ids anchored more than once: {twice}"
    misplaced = {
        rid: (files[0], RULES[rid].spec)
        for rid, files in anchors.items()
        if rid in RULES and files[0] != RULES[rid].spec
    }
    assert not misplaced, f"anchor in a chapter other than rules.py says: {misplaced}"


def test_every_registered_rule_has_spec_text():
    anchors = _anchors()
    missing: dict[str, list[str]] = {}
    for rid, rule in RULES.items():
        if rid not in anchors:
            missing.setdefault(rule.spec, []).append(rid)
    assert not missing, "rules with no {#ID} anchor in the spec, by chapter: " + "; ".join(
        f"{spec}: {', '.join(ids)}" for spec, ids in sorted(missing.items())
    )


def _test_sources() -> str:
    texts = []
    for path in sorted(TESTS.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json") and path.name != "test_spec.py":
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    conformance = ROOT / "conformance"
    if conformance.is_dir():  # conformance/<ID>/ case directories count as tests of <ID>
        texts.extend(p.name for p in conformance.iterdir() if p.is_dir())
    return "\n".join(texts)


def test_every_registered_rule_is_referenced_by_a_test():
    used = set(RULE_ID.findall(_test_sources()))
    missing: dict[str, list[str]] = {}
    for rid, rule in RULES.items():
        if rid not in used:
            missing.setdefault(rule.spec, []).append(rid)
    assert not missing, "rules no test under tests/ mentions, by chapter: " + "; ".join(
        f"{spec}: {', '.join(ids)}" for spec, ids in sorted(missing.items())
    )


def _cited_by_the_code() -> dict[str, set[str]]:
    """Rule id -> the modules of ockpt whose code (not a docstring or comment) cites it: the
    errors it raises and the findings it reports. The registry (rules.py) and the conformance
    suite, whose ids name its cases, are left out."""
    package = ROOT / "reference" / "ockpt"
    cited: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        module = path.relative_to(package).as_posix()
        if module == "rules.py" or module.startswith("conformance/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if RULE_ID.fullmatch(node.value):
                    cited.setdefault(node.value, set()).add(module)
    return cited


def test_every_rule_the_code_cites_is_asserted_by_a_test():
    """Each rule an error or finding of ockpt can carry is asserted as data by some test: as
    the error's or finding's rule, not only named in a docstring or matched in a message
    (tests/support/asserted_rules.py says which forms count)."""
    paths = [p for p in TESTS.rglob("*.py") if "mutation" not in p.parts]
    asserted = asserted_in([*paths, *(ROOT / "conformance").glob("*.py")])
    cited = _cited_by_the_code()
    missing = {rid: sorted(cited[rid]) for rid in sorted(set(cited) - asserted) if rid in RULES}
    assert not missing, "rules the code cites that no test asserts as err.rule or a finding's " \
        "rule: " + "; ".join(f"{rid} ({', '.join(mods)})" for rid, mods in missing.items())


def test_asserted_rules_counts_assertions_and_not_mentions():
    source = '''
"""Mentions DOC-001 and [MSG-001] in text."""
import pytest
TABLE = {"a": ({}, "TAB-001")}

def _check(err, rule):
    assert err.rule == rule

def test_direct(e):
    assert e.rule == "DIR-001" and {f.rule for f in e.found} == {"SET-001"}
    assert (e.rule, e.file) == ("TUP-001", "f")
    found = [(f.rule, f.pointer) for f in e.findings]
    assert found == [("BND-001", "/a")]
    assert_error(e, rule="KW-001")
    assert error_fields(e) == {"rule": "DICT-001", "file": None}
    with pytest.raises(ValueError, match="MATCH-001"):
        pass
    assert "[STR-001]" in str(e)
    _check(e, "HLP-001")

@pytest.mark.parametrize("value, rule", [(1, "PAR-001")])
def test_param(value, rule, e):
    assert e.rule == rule

@pytest.mark.parametrize("case", sorted(TABLE))
def test_table(case, e):
    tree, rule = TABLE[case]
    assert e.rule == rule
'''
    assert asserted_rules(source) == {
        "DIR-001", "SET-001", "TUP-001", "BND-001", "KW-001", "DICT-001", "HLP-001", "PAR-001",
        "TAB-001",
    }


def test_registry_entries_are_well_formed():
    for rid, rule in RULES.items():
        assert rule.id == rid and RULE_ID.fullmatch(rid)
        assert rule.severity in ("error", "warning")
        assert rule.summary and rule.spec.endswith(".md")


def test_rule_ids_raised_by_the_code_are_registered():
    """Every id the reference implementation raises or reports is in the registry."""
    package = ROOT / "reference" / "ockpt"
    used = set()
    for path in package.rglob("*.py"):
        used |= set(RULE_ID.findall(path.read_text(encoding="utf-8")))
    for path in package.rglob("*.json"):
        used |= set(RULE_ID.findall(path.read_text(encoding="utf-8")))
    unknown = sorted(rid for rid in used if rid not in RULES and not rid.startswith("RULE-"))
    assert not unknown, f"ids used in reference/ockpt but missing from RULES: {unknown}"
    msgpack_ids = {rid for rid in used if rid.startswith("MSGPACK-")}
    assert msgpack_ids == {rid for rid in RULES if rid.startswith("MSGPACK-")}


# ---------------------------------------------------------------------------------------------
# README: version, chapters, links, runnable examples


def test_readme_states_version_editors_and_links_every_chapter():
    readme = (SPEC / "README.md").read_text(encoding="utf-8")
    assert f"**Specification version {SPEC_VERSION}**" in readme
    assert "Editors: the ockpt authors" in readme
    assert "RFC 2119" in readme
    links = set(LINK.findall(readme))
    for chapter in CHAPTERS:
        assert chapter in links, chapter
    assert f"## {SPEC_VERSION}" in (SPEC / "CHANGELOG.md").read_text(encoding="utf-8")


def test_every_chapter_names_the_spec_version():
    for path in _spec_files():
        if path.name in ("README.md", "CHANGELOG.md") or path.parent != SPEC:
            continue
        text = path.read_text(encoding="utf-8")
        if "version" in text[:400]:
            assert SPEC_VERSION in text[:400], path.name


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def _headings(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("path", _spec_files(), ids=lambda p: str(p.relative_to(SPEC)))
def test_relative_links_resolve(path):
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
            continue
        if fragment and dest.suffix == ".md" and fragment not in _headings(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, broken


def _python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for path in [*_spec_files(), ROOT / "README.md"]:
        for i, m in enumerate(FENCE.finditer(path.read_text(encoding="utf-8"))):
            if m.group(1) == "python":
                blocks.append((str(path.relative_to(ROOT)), i, m.group(2)))
    return blocks


@pytest.mark.parametrize("where, index, code", _python_blocks(), ids=lambda v: str(v)[:40])
def test_python_examples_run(where, index, code):
    needs_tensorstore = 'backend="tensorstore"' in code or "import orbax" in code  # Orbax: too
    if not HAVE_TENSORSTORE and needs_tensorstore:
        pytest.skip("needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set")
    for package in ("torch", "transformers"):  # the Hugging Face example (ockpt[test] has them)
        if f"import {package}\n" in code and importlib.util.find_spec(package) is None:
            pytest.skip(f"needs {package}: pip install {package}")
    path = os.pathsep.join(filter(None, [str(ROOT / "reference"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)  # (OCKPT_BLOCK_TENSORSTORE's blocker on it kept)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, f"{where} block {index}:\n{result.stderr}"


# ---------------------------------------------------------------------------------------------
# key-paths.md §3: the tree key algorithm, as written, equals Python's repr (META-003)


def _printable(c: str) -> bool:
    return c == " " or unicodedata.category(c) not in (
        "Cc",
        "Cf",
        "Cs",
        "Co",
        "Cn",
        "Zl",
        "Zp",
        "Zs",
    )


def _quoted(text: str) -> str:
    quote = '"' if "'" in text and '"' not in text else "'"
    out = [quote]
    for c in text:
        if c in (quote, "\\"):
            out.append("\\" + c)
        elif c in "\t\n\r":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}[c])
        elif not _printable(c):
            n = ord(c)
            out.append(
                f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
            )
        else:
            out.append(c)
    return "".join(out) + quote


def _spec_tree_key(texts: tuple[str, ...]) -> str:
    if not texts:
        return "()"
    if len(texts) == 1:
        return f"({_quoted(texts[0])},)"
    return "(" + ", ".join(_quoted(t) for t in texts) + ")"


SAMPLES = [
    (),
    ("params", "w"),
    ("it's",),
    ('say "hi"',),
    ("both ' and \"",),
    ("",),
    ("\n\t\r\\",),
    ("\x00\x7f\x85\xa0\xad",),
    ("ключ", "日本語", "🎉"),
    ("\u2028\u200b\ue000\U000e0001",),
    ("a.b", "a/b", "t~x"),
]


@pytest.mark.parametrize("texts", SAMPLES, ids=repr)
def test_tree_key_algorithm_matches_python_repr(texts):
    assert _spec_tree_key(texts) == repr(texts)


def test_tree_key_algorithm_on_random_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.text(max_size=6), max_size=3).map(tuple))
    def check(texts):
        assert _spec_tree_key(texts) == repr(texts)

    check()


def test_each_rule_is_registered_once():
    """`rules.py` merges per-chapter blocks into one dict, which would hide a repeated id."""
    source = (ROOT / "reference" / "ockpt" / "rules.py").read_text(encoding="utf-8")
    ids = re.findall(r'\("([A-Z]+(?:-[A-Z]+)*-[0-9]{3})",', source)
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    assert not repeated, repeated
