"""Format variants of old Orbax releases (0.3.5, 0.4.8, 0.5.15), on their real bytes.

Each test names the rule of the spec that covers the variant: steps without
`_CHECKPOINT_METADATA` (LAYOUT-005), the flat strings document in a string leaf's directory
(STR-003, STR-004), scalars without `_METADATA` (LOAD-044), empty tuples written as None
(LOAD-006), and the zarr version of a root-only database without `_METADATA`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.documents import StringsDocument
from ockpt.engines import python as pb
from ockpt.errors import MissingDataError
from ockpt.layout import Kind
from tests.support import FIXTURES
from tests.support.errors import assert_error
from tests.support.expected import assert_same, expected_items

BACKENDS = ["tensorstore", "python"]


def _case(name: str) -> Path:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {name} not present")
    return path


def _copy(case: Path, tmp_path: Path) -> Path:
    dst = tmp_path / case.name
    shutil.copytree(case / "checkpoint", dst)
    return dst


# ---------------------------------------------------------------------------------------------
# LAYOUT-005: steps that hold only item directories


@pytest.mark.parametrize("release", ["0.3.5", "0.4.8"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_bare_steps_are_steps(release, backend):
    """LAYOUT-005: no _CHECKPOINT_METADATA, no commit_success.txt: still steps, and loadable."""
    case = _case(f"orbax-{release}/manager")
    root = case / "checkpoint"
    items = expected_items(case)
    layout = ockpt.detect(root)
    assert layout.kind is Kind.MANAGER_ROOT and [s.step for s in layout.steps] == [0, 1, 2]
    step = ockpt.detect(root / "1")
    assert step.kind is Kind.STEP, step.reason
    assert {k: c.kind for k, c in step.checkpointables.items()} == {
        "meta": Kind.JSON_ITEM,
        "params": Kind.PYTREE_ITEM,
    }
    assert_same(ockpt.load_pytree(root, backend=backend), items["2/params"])
    assert_same(ockpt.load_pytree(root, step=0, backend=backend), items["0/params"])
    assert_same(ockpt.load_pytree(root / "1", backend=backend), items["1/params"])
    assert_same(ockpt.load_pytree(root / "1", item="params", backend=backend), items["1/params"])


def test_bare_step_through_a_url():
    """LAYOUT-005 holds for kvstore URLs too (a memory:// copy of the 0.3.5 manager, each step
    marked by commit_success.txt as in any store without rename: directories §7)."""
    case = _case("orbax-0.3.5/manager")
    import tensorstore as ts  # here: the suite also runs without it (OCKPT_BLOCK_TENSORSTORE)

    ctx = ts.Context()
    src = ts.KvStore.open({"driver": "file", "path": str(case / "checkpoint") + "/"}).result()
    dst = ts.KvStore.open("memory://m/", context=ctx).result()
    for key in src.list().result():
        dst.write(key, src.read(key).result().value).result()
    for step in ("0", "1", "2"):
        dst.write(f"{step}/commit_success.txt", b"").result()
    items = expected_items(case)
    assert_same(ockpt.load_pytree("memory://m/", context=ctx), items["2/params"])
    assert_same(ockpt.load_pytree("memory://m/", step=1, context=ctx), items["1/params"])
    assert_same(ockpt.load_pytree("memory://m/0", context=ctx), items["0/params"])


def test_only_directories_of_items_are_bare_steps(tmp_path):
    """LAYOUT-005: a step name and items only; a stray file or a non-item directory refuses."""
    case = _case("orbax-0.3.5/manager")
    step = tmp_path / "5"
    shutil.copytree(case / "checkpoint" / "0", step)
    assert ockpt.detect(step).kind is Kind.STEP
    (step / "notes.txt").write_text("x")
    assert ockpt.detect(step).kind is Kind.NOT_A_CHECKPOINT
    (step / "notes.txt").unlink()
    (step / "photos").mkdir()
    (step / "photos" / "a.jpg").write_text("x")
    assert ockpt.detect(step).kind is Kind.NOT_A_CHECKPOINT
    shutil.rmtree(step / "photos")
    named = tmp_path / "run"  # not a step name
    shutil.copytree(step, named)
    assert ockpt.detect(named).kind is Kind.NOT_A_CHECKPOINT
    assert ockpt.detect(tmp_path).kind is Kind.MANAGER_ROOT  # holds the step 5


# ---------------------------------------------------------------------------------------------
# STR-003, STR-004: the flat strings document in a string leaf's directory


def test_legacy_strings_document_is_found_and_flat():
    """STR-003: 0.3.5 keeps the strings in `<first string param>/_strings.json`; STR-004: it is
    flat (a `/` in a param name is part of the member name)."""
    case = _case("orbax-0.3.5/scalars_strings")
    path = case / "checkpoint"
    assert not (path / "_strings.json").exists()
    doc = StringsDocument.read(path / "keys.str" / "slash" / "_strings.json")
    assert "keys.str/slash" in doc.values and "keys.str" not in doc.values
    assert doc.get("keys.str/slash") == "key with a slash"
    assert doc.get("keys.str~tilde") == "key with a tilde"
    got = ockpt.load_pytree(path)
    assert got["keys"] == {"str/slash": "key with a slash", "str~tilde": "key with a tilde"}
    assert got["nested"]["names"] == ["alpha", "beta"]
    with ockpt.open(path, backend="python") as ckpt:
        assert ckpt["str"] == "hello"


def test_pointer_form_is_preferred_to_the_flat_form():
    """STR-004 applies only when the pointer finds nothing."""
    doc = StringsDocument.from_json({"a": {"b": "nested"}, "a/b": "flat", "c/d": "only flat"})
    assert doc.get("a/b") == "nested"
    assert doc.get("c/d") == "only flat"
    with pytest.raises(MissingDataError) as e:
        doc.get("e/f")
    assert_error(e, rule="STR-002", file="_strings.json", pointer=None)
    assert "'/e/f'" in e.value.message


@pytest.mark.parametrize("name", ["orbax-0.3.5/scalars_strings", "orbax-0.4.8/no_ocdbt"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_string_directories_are_not_needed(name, backend, tmp_path):
    """directories §2.1: the empty per-string directories (which git drops) are not read; with
    them present the result is the same."""
    case = _case(name)
    path = _copy(case, tmp_path)
    empty = [path / d for d in _record(case).get("empty_dirs", [])]
    assert empty
    for d in empty:
        if d.exists():
            assert not any(d.iterdir()), d
            d.rmdir()
    assert_same(ockpt.load_pytree(path, backend=backend), expected_items(case)[""])
    for d in empty:
        d.mkdir(parents=True, exist_ok=True)
    assert_same(ockpt.load_pytree(path, backend=backend), expected_items(case)[""])


def test_legacy_strings_document_is_not_an_array_key():
    """ZARR-021: `<param>/_strings.json` of a per-leaf item is no key of its array store."""
    item = _case("orbax-0.3.5/tree_metadata") / "checkpoint"
    keys = pb.item_keys(item)
    assert "name/_strings.json" not in keys
    assert "unclaimed" not in pb.key_listing(keys)


def test_missing_legacy_strings_document_is_missing_data(tmp_path):
    """LOAD-042: a string leaf found nowhere is missing data, naming the leaf."""
    path = _copy(_case("orbax-0.3.5/tree_metadata"), tmp_path)
    (path / "name" / "_strings.json").unlink()
    with pytest.raises(MissingDataError) as e:
        ockpt.load_pytree(path)
    assert_error(e, rule="LOAD-042")
    assert "'name'" in e.value.message


# ---------------------------------------------------------------------------------------------
# LOAD-044: scalars without _METADATA; LOAD-006: empty tuples written as None


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_without_metadata_load_as_zero_d_arrays(backend):
    """LOAD-044: nothing says "scalar": a 0-d array of the stored type; a scalar target gives
    the scalar."""
    path = _case("orbax-0.3.5/scalars_strings") / "checkpoint"
    got = ockpt.load_pytree(path, backend=backend)
    assert (
        type(got["int"]) is np.ndarray and got["int"].shape == () and got["int"].dtype == np.int64
    )
    assert got["np_float32"].dtype == np.float32 and got["np_float32"].shape == ()
    assert got["bool_true"].dtype == np.bool_ and bool(got["bool_true"])
    target = {"int": 0, "np_float32": np.float32(0), "bool_true": False}
    some = ockpt.load_pytree(path, target, partial=True, backend=backend)
    assert type(some["int"]) is int and some["int"] == 42
    assert type(some["np_float32"]) is np.float32 and type(some["bool_true"]) is bool
    meta = ockpt.pytree_metadata(path, backend=backend)
    assert meta["int"].value_type == "array" and meta["int"].shape == ()


@pytest.mark.parametrize("name", ["orbax-0.3.5/nested", "orbax-0.4.8/nested"])
def test_empty_tuple_written_as_none(name):
    """LOAD-006: the release wrote () as None: null without a target, () with one."""
    case = _case(name)
    path = case / "checkpoint"
    got = ockpt.load_pytree(path)
    assert got["empty_tuple"] is None and got["opt"][2] is None
    target = expected_items(case, target=True)[""]
    assert target["empty_tuple"] == () and target["opt"][2] == ()
    again = ockpt.load_pytree(path, target)
    assert again["empty_tuple"] == () and again["opt"][2] == ()
    assert type(again["opt"]) is tuple


# ---------------------------------------------------------------------------------------------
# The zarr version of a root-only database without _METADATA


@pytest.mark.parametrize("backend", BACKENDS)
def test_zarr_version_from_the_keys(backend):
    """Nothing outside the database says v2 or v3: detect leaves it open, the reader finds it."""
    case = _case("orbax-0.3.5/ocdbt")
    path = case / "checkpoint"
    fmt = ockpt.detect(path).item
    assert fmt.zarr_version is None and not fmt.has_metadata
    with ockpt.open(path, backend=backend) as ckpt:
        arrays = [ckpt[k] for k in ckpt.keys() if isinstance(ckpt[k], ockpt.LazyArray)]
        assert arrays
        opened = ckpt._item.arrays([a.param_name for a in arrays])
        assert {a.zarr_version for a in opened.values()} == {2}
    assert_same(ockpt.load_pytree(path, backend=backend), expected_items(case)[""])


def _record(case: Path) -> dict:
    from _record import load_expected

    return load_expected(case)
