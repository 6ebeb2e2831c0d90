"""ockpt reads local checkpoints with backend="python" when tensorstore is not installed.

`import ockpt`, `load_pytree`, `pytree_metadata` and `open` with ``backend="python"`` need only
numpy, ml_dtypes, zstandard and google-crc32c: tensorstore is imported on first use, by the
tensorstore backend and for URLs. A subprocess with tensorstore, jax and orbax blocked loads
fixtures of every era; the parent compares what it got with the records.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ockpt
from tests.support import FIXTURES, ROOT
from tests.support.expected import assert_same, expected_items, load_kwargs

BLOCKED = ("tensorstore", "jax", "jaxlib", "orbax", "flax")

BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ImportError(f"{{name}} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    sys.path[:0] = ["reference"]
    """
)

#: Item directories of every storage kind and era: OCDBT with zarr v2 and v3 (sharded), per-leaf
#: zarr, v1, manager steps, msgpack placeholders and inline values, pre-_METADATA items.
CASES = [
    "orbax-0.12.8/sharded",
    "orbax-0.12.8/zarr3",
    "orbax-0.12.8/no_ocdbt",
    "orbax-0.12.8/v1_pytree",
    "orbax-0.12.8/manager",
    "orbax-0.5.15/msgpack_placeholders",
    "orbax-0.5.15/msgpack_aggregated",
    "orbax-0.4.8/manager",
    "orbax-0.4.8/no_ocdbt",
    "orbax-0.3.5/scalars_strings",
    "orbax-0.3.5/ocdbt",
]


def _run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def _jobs() -> list[tuple[str, str, dict]]:
    from _record import load_expected

    jobs = []
    for name in CASES:
        case = FIXTURES / name
        for rel in load_expected(case)["items"]:
            jobs.append((name, rel, load_kwargs(case, rel)))
    return jobs


def test_blocker_blocks_tensorstore():
    result = _run("import tensorstore")
    assert result.returncode != 0 and "blocked" in result.stderr


def test_python_backend_loads_fixtures_without_tensorstore(tmp_path):
    out = tmp_path / "loaded.pickle"
    result = _run(
        f"""
        import pickle
        import numpy as np
        import ockpt

        loaded = {{}}
        for name, rel, kw in {_jobs()!r}:
            path = f"fixtures/{{name}}/checkpoint"
            tree = ockpt.load_pytree(path, backend="python", **kw)
            meta = ockpt.pytree_metadata(path, backend="python", **kw)
            with ockpt.open(path, backend="python", **kw) as ckpt:
                reads = {{}}
                for key in ckpt.keys():
                    value = ckpt[key]
                    reads[key] = value if isinstance(value, str) else np.asarray(value[...])
            loaded[(name, rel)] = (tree, reads, meta)
        assert not [m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}], "imported"
        with open({str(out)!r}, "wb") as f:
            pickle.dump(loaded, f)
        print("ok", len(loaded))
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    with open(out, "rb") as f:
        loaded = pickle.load(f)
    assert len(loaded) == len(_jobs())
    for (name, rel), (tree, reads, meta) in loaded.items():
        case = FIXTURES / name
        assert_same(tree, expected_items(case)[rel], f"{name}:{rel}")
        assert meta == ockpt.pytree_metadata(
            case / "checkpoint", backend="tensorstore", **load_kwargs(case, rel)
        )
        for leaf in _leaf_metadata(meta):  # open()[name] reads the same values as load_pytree
            got = reads[ockpt.leaf_name(leaf.path)]
            want = _at(tree, leaf.path)
            if isinstance(want, str):
                assert got == want, leaf.param_name
            else:
                want = np.asarray(want)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), leaf.path


def _leaf_metadata(tree):
    if isinstance(tree, ockpt.LeafMetadata):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _leaf_metadata(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _leaf_metadata(v)


def _at(tree, path):
    for key in path:
        tree = tree[int(key)] if isinstance(tree, list) else tree[key]
    return tree


@pytest.mark.parametrize(
    "call",
    [
        'ockpt.load_pytree("fixtures/orbax-0.12.8/sharded/checkpoint", backend="tensorstore")',
        'ockpt.open("memory://ckpt/", backend="python")',
    ],
)
def test_what_needs_tensorstore_says_so(call):
    """The tensorstore backend and URLs raise UnsupportedError naming the extra to install."""
    result = _run(
        f"""
        import ockpt
        try:
            {call}
        except ockpt.UnsupportedError as e:
            assert 'pip install "ockpt[tensorstore]"' in str(e), e
            print("refused")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "refused"


def test_import_ockpt_does_not_import_tensorstore():
    """Even where tensorstore is installed, `import ockpt` and python-backend reads leave it out."""
    code = textwrap.dedent(
        """
        import sys
        sys.path[:0] = ["reference"]
        import ockpt
        ockpt.load_pytree("fixtures/orbax-0.12.8/sharded/checkpoint", backend="python")
        print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorstore"))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


def test_local_work_needs_no_tensorstore(tmp_path):
    """Saving, copying, validating, converting, listing and comparing local checkpoints need
    only ockpt's own decoders and encoders (issue 19): tensorstore is an extra."""
    result = _run(
        f"""
        import numpy as np
        import ockpt
        from ockpt import cli, transfer

        root = {str(tmp_path)!r}
        tree = {{"w": np.arange(6.0).reshape(2, 3), "s": "text", "n": {{"i": np.int32(7)}}}}
        ockpt.save_pytree(root + "/a", tree)
        ockpt.save_pytree(root + "/z", tree, use_ocdbt=False, zarr_version=3)
        assert transfer.copy(root + "/a", root + "/b", progress=False) > 0
        for name in ("a", "b", "z"):
            assert ockpt.validate(f"{{root}}/{{name}}", deep=True).ok, name
            got = ockpt.load_pytree(f"{{root}}/{{name}}")
            assert np.array_equal(got["w"], tree["w"]) and got["s"] == "text", name
        for argv in (
            ["ls", root + "/b"],
            ["inspect", root + "/b"],
            ["convert", root + "/b", root + "/b.npz", "--skip-unsupported"],
            ["diff", root + "/a", root + "/b"],
            ["cp", root + "/z", root + "/z2", "--no-progress"],
        ):
            assert cli.main(argv) == 0, argv
        assert not [m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}], "imported"
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "ok"


def test_tensorstore_is_an_extra():
    """`pip install ockpt` does not install tensorstore; `pip install "ockpt[tensorstore]"`
    does, and so does the test extra (Orbax needs it)."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [r for r in project["dependencies"] if r.startswith("tensorstore")]
    extras = project["optional-dependencies"]
    assert [r for r in extras["tensorstore"] if r.startswith("tensorstore")]
    assert [r for r in extras["test"] if r.startswith("tensorstore")]
