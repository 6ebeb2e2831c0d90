"""ockpt works without jax and never imports orbax."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from tests.support import ROOT, fixture_cases

PACKAGE = ROOT / "reference" / "ockpt"

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("jax", "jaxlib", "orbax", "flax"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def run_without_jax(body: str) -> subprocess.CompletedProcess:
    code = BLOCKER + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_reading_works_with_jax_blocked():
    cases = sorted(str(c / "checkpoint") for c in fixture_cases())
    assert cases
    result = run_without_jax(
        f"""
        import sys, ockpt, ockpt.cli, ockpt.msgpack_legacy
        from ockpt.documents import MetadataDocument
        for path in {cases!r}:
            layout = ockpt.detect(path)
            assert layout.kind is not ockpt.Kind.NOT_A_CHECKPOINT, (path, layout.reason)
            item = layout.pytree
            if item is not None and item.item.has_metadata:
                MetadataDocument.read(item.path + "/_METADATA").tree()
        assert not any(m.split(".")[0] in ("jax", "orbax") for m in sys.modules)
        print("ok", len({cases!r}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


def test_blocker_really_blocks():
    result = run_without_jax("import jax")
    assert result.returncode != 0 and "blocked" in result.stderr


def test_no_module_imports_orbax_or_jax_at_top_level():
    """Source check: `orbax` is never imported; `jax` only inside functions (lazily)."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top != "orbax", f"{path}: imports {name}"
                if top in ("jax", "jaxlib"):
                    assert node.col_offset > 0, f"{path}: imports {name} at module level"
