"""What the tests share: the fixture paths and cases, tree comparison across engines, a
deadline, and where the child-process scripts are (`children/`). Tests import from here
(``from tests.support import FIXTURES``), never from one another
(tests/package/test_suite_layout.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import mmap
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
sys.path.insert(0, str(FIXTURES))  # fixtures/_record.py: the expected-content records


def _has_tensorstore() -> bool:
    try:
        return importlib.util.find_spec("tensorstore") is not None
    except ImportError:  # refused: the suite runs with OCKPT_BLOCK_TENSORSTORE (conftest.py)
        return False


#: Whether tensorstore can be imported: False without the `tensorstore` extra, and in the suite
#: run with OCKPT_BLOCK_TENSORSTORE set, where what needs it skips.
HAVE_TENSORSTORE = _has_tensorstore()

#: Golden fixture sets: written by Orbax releases and by ockpt's own writer.
FIXTURE_SETS = ("orbax-*", "ockpt-*")


def fixture_cases(release: str | None = None) -> list[Path]:
    """Every golden case directory (`fixtures/orbax-<version>/<case>/`, written by Orbax, and
    `fixtures/ockpt-<version>/<case>/`, written by ockpt); with `release`, `orbax-<release>`."""
    sets = [f"orbax-{release}"] if release else FIXTURE_SETS
    return sorted(p.parent for s in sets for p in FIXTURES.glob(f"{s}/*/expected.json"))


#: Bare OCDBT database fixture sets, written by tensorstore's ocdbt driver (no checkpoint around
#: them, so not in FIXTURE_SETS): `<set>/<case>/database/` and `expected-ocdbt.json`
#: (fixtures/_record_ocdbt.py, fixtures/generate_ocdbt.py).
DATABASE_SETS = ("tensorstore-*",)


def database_cases() -> list[Path]:
    """Every bare OCDBT database case directory (`fixtures/tensorstore-<version>/<case>/`)."""
    return sorted(
        p.parent for s in DATABASE_SETS for p in FIXTURES.glob(f"{s}/*/expected-ocdbt.json")
    )


def flat_leaves(tree, path=()):  # type: ignore[no-untyped-def]
    """(key path, leaf) for every leaf of nested dicts, lists and tuples."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from flat_leaves(v, (*path, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from flat_leaves(v, (*path, i))
    else:
        yield path, tree


def _host(value):  # type: ignore[no-untyped-def]
    """A loaded leaf as a numpy array; a typed jax key as its key data."""
    import numpy as np

    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


def assert_backends_agree(checkpoint: Path, **kw) -> None:  # type: ignore[no-untyped-def]
    """`load_pytree` with backend="python" returns what backend="tensorstore" does: the same
    leaves, types, dtypes, shapes and bytes. `kw`: more arguments of both loads (`item=`)."""

    import ockpt

    a = dict(flat_leaves(ockpt.load_pytree(checkpoint, backend="tensorstore", **kw)))
    b = dict(flat_leaves(ockpt.load_pytree(checkpoint, backend="python", **kw)))
    assert a.keys() == b.keys()
    for k in a:
        x, y = _host(a[k]), _host(b[k])
        assert type(a[k]) is type(b[k]) and x.dtype == y.dtype and x.shape == y.shape, k
        if x.dtype.kind not in "OUS":
            assert x.tobytes() == y.tobytes(), k
        else:
            assert a[k] == b[k], k


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail with TimeoutError (instead of hanging the suite) when the block runs longer."""

    def expired(signum, frame):  # type: ignore[no-untyped-def]
        raise TimeoutError(f"ran longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def random_boxes(shape: tuple[int, ...], seed: int, n: int) -> list[tuple[tuple[int, int], ...]]:
    """The whole array of `shape` (as (start, stop) per dimension), then `n` random non-empty
    boxes within it (none when an extent is 0)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = [tuple((0, d) for d in shape)]
    if all(d > 0 for d in shape):
        for _ in range(n):
            box = []
            for d in shape:
                a = int(rng.integers(0, d))
                box.append((a, int(rng.integers(a + 1, d + 1))))
            out.append(tuple(box))
    return out


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def assert_case_backends_agree(case: Path) -> None:
    """`assert_backends_agree` on a golden case: on each pytree item of a v1 checkpoint that
    has no state/ or pytree/ to choose without a name (LOAD-051), else on the checkpoint."""
    from _record import load_expected

    record = load_expected(case)
    items = set(record["items"])
    if record["layout"]["kind"] == "v1" and not items & {"state", "pytree"} and len(items) > 1:
        for name in sorted(items):
            assert_backends_agree(case / "checkpoint", item=name)
    else:
        assert_backends_agree(case / "checkpoint")


#: The scripts tests run as child processes (a crash, a concurrent writer, a hostile entry point,
#: torchrun ranks).
CHILDREN = Path(__file__).resolve().parent / "children"


def record_key_impl(item: Path, param: str, impl: str) -> None:
    """Rewrite process 0's array_metadatas of the item `item` so that its typed PRNG key
    `param` is recorded as the implementation `impl` (with another key data shape than the
    array stored: ARRM-002)."""
    file = item / "array_metadatas" / "process_0"
    doc = json.loads(file.read_text(encoding="utf-8"))
    (entry,) = [
        e["array_metadata"]
        for e in doc["array_metadatas"]
        if e["array_metadata"]["param_name"] == param
    ]
    assert entry["ext_metadata"]["random_key_impl"] not in (None, impl)
    entry["ext_metadata"]["random_key_impl"] = impl
    file.write_text(json.dumps(doc), encoding="utf-8")


def backing_map(array: Any) -> mmap.mmap | None:
    """The memory map a numpy array's memory belongs to, if any (its chain of bases)."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return None
