"""Typed PRNG keys (spec JSON documents §6.1, loading §4.3, writing §2): ARRM-002, LOAD-025,
WRITE-006, on keys Orbax 0.12.8 writes and on ockpt's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ockpt
from ockpt.random_keys import RandomKey
from tests.support.errors import assert_error

ROOT = Path(__file__).resolve().parents[1]
IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Mesh:
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


def _keys() -> dict:
    m = _mesh((4, 2), ("a", "b"))
    return {
        "fry": jax.random.key(0),
        "rbg": jax.random.key(1, impl="rbg"),
        "urbg": jax.random.key(2, impl="unsafe_rbg"),
        "split": jax.random.split(jax.random.key(3), 4),
        "sharded": jax.device_put(jax.random.split(jax.random.key(4), 8), NamedSharding(m, P("a"))),
        "raw": jax.random.PRNGKey(5),
        "w": np.arange(6, dtype=np.float32),
    }


@pytest.fixture(scope="module")
def orbax_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("keys") / "item"
    tree = _keys()
    ck = ocp.StandardCheckpointer()
    ck.save(path, tree)
    ck.wait_until_finished()
    return path, tree


def _same_key(got, want) -> None:  # type: ignore[no-untyped-def]
    assert jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key)
    assert str(jax.random.key_impl(got)) == str(jax.random.key_impl(want))
    assert np.array_equal(jax.random.key_data(got), jax.random.key_data(want))


def test_metadata_reports_keys(orbax_keys) -> None:  # type: ignore[no-untyped-def]
    path, _ = orbax_keys
    meta = ockpt.pytree_metadata(path)
    assert (meta["fry"].random_key_impl, meta["fry"].key_shape, meta["fry"].shape) == (
        "threefry2x32",
        (),
        (2,),
    )
    assert (meta["rbg"].random_key_impl, meta["rbg"].key_shape) == ("rbg", ())
    assert (meta["urbg"].random_key_impl, meta["urbg"].shape) == ("unsafe_rbg", (4,))
    assert meta["split"].key_shape == (4,) and meta["sharded"].key_shape == (8,)
    assert meta["raw"].random_key_impl is None and meta["raw"].key_shape is None
    assert meta["w"].random_key_impl is None


def test_load_without_target_gives_typed_keys(orbax_keys) -> None:  # type: ignore[no-untyped-def]
    """LOAD-025: jax is loaded here, so a key leaf comes back a typed key, as Orbax restores it."""
    path, tree = orbax_keys
    got = ockpt.load_pytree(path)
    for name in ("fry", "rbg", "urbg", "split", "sharded"):
        _same_key(got[name], tree[name])
    assert isinstance(got["raw"], np.ndarray) and got["raw"].dtype == np.uint32
    assert_same_as_orbax = ocp.StandardCheckpointer().restore(path)
    for name in ("fry", "rbg", "urbg", "split", "sharded"):
        _same_key(got[name], assert_same_as_orbax[name])
    # a plain uint32 target gets the raw key data
    raw = ockpt.load_pytree(path, {"fry": np.zeros(2, np.uint32)}, partial=True)["fry"]
    assert np.array_equal(raw, jax.random.key_data(tree["fry"]))


def test_load_without_jax_names_the_implementation(orbax_keys) -> None:  # type: ignore[no-untyped-def]
    """LOAD-025 where jax is not loaded: RandomKey(impl, data), never bare uint32."""
    path, tree = orbax_keys
    code = (
        "import sys, ockpt, json\n"
        f"t = ockpt.load_pytree({str(path)!r})\n"
        "assert 'jax' not in sys.modules\n"
        "print(json.dumps({k: [type(v).__name__, getattr(v, 'impl', None), "
        "list(getattr(v, 'shape', ())), v.data.tolist() if hasattr(v, 'impl') else None] "
        "for k, v in t.items()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "reference"), "PATH": "/usr/bin:/bin"},
    )
    got = json.loads(out.stdout)
    assert got["fry"][:3] == ["RandomKey", "threefry2x32", []]
    assert got["split"][:3] == ["RandomKey", "threefry2x32", [4]]
    assert got["rbg"][:2] == ["RandomKey", "rbg"] and got["urbg"][1] == "unsafe_rbg"
    assert got["split"][3] == np.asarray(jax.random.key_data(tree["split"])).tolist()
    assert got["raw"][0] == "ndarray" and got["w"][0] == "ndarray"


@pytest.mark.parametrize(("shape", "names"), [((8,), ("x",)), ((2, 4), ("p", "q"))])
def test_typed_key_targets_load_on_any_mesh(orbax_keys, shape, names) -> None:  # type: ignore[no-untyped-def]
    path, tree = orbax_keys
    m = _mesh(shape, names)
    target = {
        k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(m, P(names[-1])))
        if k in ("sharded",)
        else jax.eval_shape(lambda v=v: v)
        for k, v in tree.items()
        if k != "w"
    }
    got = ockpt.load_pytree(path, target, partial=True)
    for name in ("fry", "rbg", "urbg", "split", "sharded"):
        _same_key(got[name], tree[name])
    assert got["sharded"].sharding.is_equivalent_to(target["sharded"].sharding, 1)
    # a raw key saved as uint32 loads into a typed-key target of the implementation it fits
    raw = ockpt.load_pytree(path, {"raw": jax.eval_shape(lambda: jax.random.key(0))}, partial=True)
    assert np.array_equal(jax.random.key_data(raw["raw"]), tree["raw"])


def test_saving_a_random_key_without_jax_is_refused_naming_the_leaf(tmp_path, monkeypatch):
    """WRITE-006: a RandomKey goes back as the typed key it was, which needs jax; without jax
    the save is refused before anything is written, naming the leaf and the way out (save
    RandomKey.data as plain uint32)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a)
    )
    key = RandomKey(impl="threefry2x32", data=np.zeros(2, np.uint32))
    with pytest.raises(ockpt.UnsupportedError) as e:
        ockpt.save_pytree(tmp_path / "k", {"step": np.ones(1), "rng": key})
    assert_error(e, rule="WRITE-006", file=None)
    assert "'rng'" in e.value.message and "RandomKey.data" in e.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_target_of_another_implementation_is_refused(orbax_keys) -> None:  # type: ignore[no-untyped-def]
    path, _ = orbax_keys
    target = {"fry": jax.eval_shape(lambda: jax.random.key(0, impl="rbg"))}
    with pytest.raises(ockpt.TargetError) as e:
        ockpt.load_pytree(path, target, partial=True)
    assert e.value.rule == "LOAD-025" and e.value.leaf == "fry"
    assert "threefry2x32" in str(e.value) and "rbg" in str(e.value)


def test_ockpt_writes_keys_as_orbax_does(tmp_path: Path) -> None:
    """WRITE-006: key data as uint32, the implementation in every array_metadatas file; Orbax
    restores typed keys; a RandomKey (loaded without jax) goes back as the key it was."""
    tree = _keys()
    ockpt.save_pytree(tmp_path / "k", tree, storage_dtypes=lambda name, dtype: np.float32)
    item = tmp_path / "k" / "state"
    doc = json.loads((item / "array_metadatas" / "process_0").read_text())
    impls = {
        a["array_metadata"]["param_name"]: (a["array_metadata"]["ext_metadata"] or {}).get(
            "random_key_impl"
        )
        for a in doc["array_metadatas"]
    }
    assert impls == {
        "fry": "threefry2x32",
        "rbg": "rbg",
        "urbg": "unsafe_rbg",
        "split": "threefry2x32",
        "sharded": "threefry2x32",
        "raw": None,
    }
    restored = ocp.StandardCheckpointer().restore(item)
    for name in ("fry", "rbg", "urbg", "split", "sharded"):
        _same_key(restored[name], tree[name])
    assert restored["sharded"].sharding.spec == P("a")
    # the uint32 storage type held although every other leaf was asked to be float32
    assert ockpt.pytree_metadata(tmp_path / "k")["fry"].storage_dtype == np.uint32
    # a RandomKey goes back as a key
    again = {"k": RandomKey("rbg", np.asarray(jax.random.key_data(tree["rbg"])))}
    ockpt.save_pytree(tmp_path / "again", again)
    _same_key(ocp.StandardCheckpointer().restore(tmp_path / "again" / "state")["k"], tree["rbg"])


def _edited(src: Path, dst: Path, name: str, ext: object) -> Path:
    """A copy of the item at `src` whose array_metadatas entry of `name` has `ext`."""
    import shutil

    shutil.copytree(src, dst)
    doc_path = dst / "array_metadatas" / "process_0"
    doc = json.loads(doc_path.read_text())
    for a in doc["array_metadatas"]:
        if a["array_metadata"]["param_name"] == name:
            a["array_metadata"]["ext_metadata"] = ext
    doc_path.write_text(json.dumps(doc))
    return dst


def test_validator_checks_recorded_keys(orbax_keys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """ARRM-002: the array of a recorded key must be its implementation's key data."""
    path, _ = orbax_keys
    assert ockpt.validate(path).ok
    # threefry key data is [2], not rbg's [4]
    bad = _edited(path, tmp_path / "bad", "fry", {"random_key_impl": "rbg"})
    findings = ockpt.validate(bad).findings
    assert [(f.rule, f.pointer) for f in findings] == [("ARRM-002", "fry")]
    with pytest.raises(ockpt.FormatError) as e:
        ockpt.load_pytree(bad)
    assert e.value.rule == "ARRM-002"
    # a name that is no string breaks the document's schema
    odd = _edited(path, tmp_path / "odd", "raw", {"random_key_impl": 7})
    findings = ockpt.validate(odd).findings
    assert [f.rule for f in findings] == ["ARRM-001"]
    assert findings[0].pointer.endswith("/ext_metadata/random_key_impl")


def test_unknown_implementation_is_named(orbax_keys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    path, _ = orbax_keys
    odd = tmp_path / "odd"
    shutil.copytree(path, odd)
    doc_path = odd / "array_metadatas" / "process_0"
    text = doc_path.read_text().replace('"random_key_impl": "rbg"', '"random_key_impl": "philox"')
    doc_path.write_text(text)
    assert ockpt.pytree_metadata(odd)["rbg"].random_key_impl == "philox"
    assert ockpt.pytree_metadata(odd)["rbg"].key_shape is None
    with pytest.raises(ockpt.UnsupportedError) as e:
        ockpt.load_pytree(odd)
    assert e.value.rule == "ARRM-002" and "philox" in str(e.value)
    # as plain data it still loads
    got = ockpt.load_pytree(odd, {"rbg": np.zeros(4, np.uint32)}, partial=True)
    assert got["rbg"].dtype == np.uint32


FIXTURE = ROOT / "fixtures" / "orbax-0.12.8" / "random_keys" / "checkpoint"


def test_open_names_a_key_and_reads_it_as_one() -> None:
    """`open`: a key leaf's slices are its key data; read() gives the key (LOAD-025)."""
    ckpt = ockpt.open(FIXTURE)
    lazy = ckpt["rngs/split"]
    assert lazy.random_key_impl == "threefry2x32" and lazy.shape == (4, 2)
    assert lazy[1].dtype == np.uint32 and lazy[1].shape == (2,)
    key = lazy.read()
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == (4,)
    assert np.array_equal(jax.random.key_data(key)[1], lazy[1])
    assert ckpt["legacy/prng_key"].random_key_impl is None


def test_convert_names_the_keys_it_writes_as_data(tmp_path: Path) -> None:
    from ockpt.convert import convert

    result = convert(
        str(FIXTURE), str(tmp_path / "k.npz"), select=["rngs/rbg", "legacy"], progress=False
    )
    assert result.random_keys == (("rngs.rbg", "rbg"),)
    data = np.load(tmp_path / "k.npz")
    assert data["rngs.rbg"].dtype == np.uint32 and data["rngs.rbg"].shape == (4,)
    out = subprocess.run(
        [sys.executable, "-m", "ockpt.cli", "convert", str(FIXTURE), str(tmp_path / "c.npz")]
        + ["--select", "rngs/unsafe_rbg", "--no-progress"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "reference"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "rngs.unsafe_rbg: a typed PRNG key (unsafe_rbg)" in out.stderr


def test_a_key_target_over_other_data_is_a_target_error() -> None:
    """LOAD-025: a typed-key target where the checkpoint holds no key data is the target's
    fault (a float leaf, an inline msgpack-era leaf), never a cast hint or ARRM-002."""
    key = jax.eval_shape(lambda: jax.random.key(0))
    with pytest.raises(ockpt.TargetError) as e:
        ockpt.load_pytree(FIXTURE, {"params": {"b": key}}, partial=True)
    assert e.value.rule == "LOAD-025" and "float32" in str(e.value)
    inline = ROOT / "fixtures" / "orbax-0.5.15" / "msgpack_aggregated" / "checkpoint"
    two = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ockpt.TargetError) as e:
        ockpt.load_pytree(inline, {"bfloat16": two}, partial=True, cast="lossy")
    assert e.value.rule == "LOAD-025"
