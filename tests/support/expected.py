"""A loaded tree compared with its fixture's record (`fixtures/_record.py`): every item of every
golden case, and how a test loads each (the tests of the reader, of the engines and of old
releases share them)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.engines import tensorstore as ts_engine
from ockpt.layout import parse_step_name
from tests.support import ROOT, case_id, fixture_cases

CASES = fixture_cases()

_PY_DTYPES = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}


def _bits(x) -> bytes:
    return np.asarray(x).tobytes()


def _key_parts(got) -> tuple[str | None, np.ndarray]:
    """(implementation, key data) of a loaded typed key: a jax key array or an ockpt.RandomKey
    (no jax); (None, the array) for anything else."""
    if isinstance(got, ockpt.RandomKey):
        return got.impl, got.data
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(got, jax.Array):
        if jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key):
            return str(jax.random.key_impl(got)), np.asarray(jax.random.key_data(got))
    return None, np.asarray(got)


def assert_same(got, exp, where: str = "", *, strict: bool = False) -> None:
    """`got` equals the record value `exp` bit for bit and dtype for dtype.

    Not strict (a load without target): dict keys are compared as text, tuples and
    NamedTuples may come back as lists and dicts, Python scalars as numpy scalars of the
    stored dtype. Strict: types must be the record's exactly.
    """
    if type(exp).__name__ in ("PrngKey", "RandomKey"):  # a typed key (LOAD-025)
        impl, data = _key_parts(got)
        assert impl == exp.impl, f"{where}: a {impl} key, not {exp.impl}"
        assert data.dtype == exp.data.dtype and data.shape == exp.data.shape, where
        assert _bits(data) == _bits(exp.data), f"{where}: key data differ"
        return
    if isinstance(exp, tuple) and hasattr(type(exp), "_fields"):
        if strict or not isinstance(got, dict):
            assert type(got) is type(exp) or type(got).__name__ == type(exp).__name__, where
            got = got._asdict()
        exp = exp._asdict()
    if isinstance(exp, dict):
        assert isinstance(got, dict), f"{where}: {type(got).__name__} is not a dict"
        if strict:
            assert list(got) == list(exp), where
        g = {str(k): v for k, v in got.items()}
        e = {str(k): v for k, v in exp.items()}
        assert sorted(g) == sorted(e), f"{where}: keys {sorted(g)} != {sorted(e)}"
        for k in e:
            assert_same(g[k], e[k], f"{where}.{k}".lstrip("."), strict=strict)
        return
    if isinstance(exp, (list, tuple)):
        if strict or not exp:
            assert type(got) is type(exp), f"{where}: {type(got).__name__} != {type(exp)}"
        assert isinstance(got, (list, tuple)), where
        assert len(got) == len(exp), where
        for i, (g, e) in enumerate(zip(got, exp, strict=True)):
            assert_same(g, e, f"{where}.{i}".lstrip("."), strict=strict)
        return
    if exp is None or isinstance(exp, str):
        assert got == exp and type(got) is type(exp), f"{where}: {got!r} != {exp!r}"
        return
    if isinstance(exp, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got).__name__}"
        assert got.dtype == exp.dtype and got.shape == exp.shape, (
            f"{where}: {got.dtype}{got.shape} != {exp.dtype}{exp.shape}"
        )
        assert _bits(got) == _bits(exp), f"{where}: values differ"
        return
    if isinstance(exp, np.generic):
        assert isinstance(got, np.generic), f"{where}: {type(got).__name__}"
        assert got.dtype == exp.dtype and _bits(got) == _bits(exp), f"{where}: {got!r} {exp!r}"
        return
    # a Python scalar
    if strict or not isinstance(got, np.generic):
        assert type(got) is type(exp), f"{where}: {type(got).__name__} != {type(exp).__name__}"
        assert _bits(got) == _bits(exp) or (got != got and exp != exp), f"{where}: {got!r}"
        return
    want = np.dtype(_PY_DTYPES[type(exp)])
    assert got.dtype == want, f"{where}: {got.dtype} != {want}"
    assert _bits(got) == _bits(np.array(exp, dtype=want)), f"{where}: {got!r} != {exp!r}"


def expected_items(case: Path, *, target: bool = False) -> dict[str, object]:
    """Item path -> the recorded tree as the checkpoint can give it back (`_record.as_restored`:
    less what the release loses), without a target or, with `target`, into the record's tree.
    With `target` a typed key is an `ockpt.RandomKey`, so that the tree is a load target too
    (assert_same compares it with the record's `_record.PrngKey` all the same)."""
    from _record import PrngKey, as_restored, decode_tree, load_expected

    def keys_as_targets(tree):  # type: ignore[no-untyped-def]
        if isinstance(tree, PrngKey):
            return ockpt.RandomKey(tree.impl, tree.data)
        if isinstance(tree, dict):
            return type(tree)({k: keys_as_targets(v) for k, v in tree.items()})
        return tree

    record = load_expected(case)
    out = {
        rel: decode_tree(as_restored(record, rel, case, target=target), case)
        for rel in record["items"]
    }
    return {rel: keys_as_targets(tree) for rel, tree in out.items()} if target else out


def load_kwargs(case: Path, rel: str) -> dict:
    """How to reach item `rel` of a case through the public API."""
    if "/" in rel:
        step_dir, item = rel.split("/")
        _, step = parse_step_name(step_dir)
        return {"step": step, "item": item}
    return {"item": rel} if rel else {}


def _all_items():
    for case in CASES:
        for rel in expected_items(case):
            yield pytest.param(case, rel, id=f"{case_id(case)}:{rel or '.'}")


ITEMS = list(_all_items())


def fixture_case(release: str, name: str) -> Path:
    """A golden case of one release; the test skips when that fixture is not present."""
    path = ROOT / "fixtures" / f"orbax-{release}" / name
    if not path.exists():
        pytest.skip(f"fixture {release}/{name} not present")
    return path


def count_reads(monkeypatch) -> list[tuple[str, tuple]]:
    """Record (param name, box) of every read the tensorstore engine makes from now on."""
    reads: list[tuple[str, tuple]] = []
    original = ts_engine.StoredArray.read

    def read(self, box, dtype=None, *, batch=None):
        reads.append((self.param_name, tuple(box)))
        return original(self, box, dtype, batch=batch)

    monkeypatch.setattr(ts_engine.StoredArray, "read", read)
    return reads
