"""The reference reader on every real fixture, as numpy, plus partial loads, placeholders,
casts, pad/truncate, slice reads, layouts of every era and error messages."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ockpt
from ockpt import engines
from ockpt.engines import tensorstore as ts_engine
from ockpt.errors import MissingDataError, NotACheckpointError, TargetError
from tests.support import HAVE_TENSORSTORE, ROOT, record_key_impl
from tests.support.errors import assert_error
from tests.support.expected import (
    CASES,
    ITEMS,
    assert_same,
    count_reads,
    expected_items,
    fixture_case,
    load_kwargs,
)

# ---------------------------------------------------------------------------------------------
# Comparing with a record.


# ---------------------------------------------------------------------------------------------
# Every fixture.


def test_fixtures_present():
    assert {c.parent.name for c in CASES} >= {"orbax-0.12.8"}
    assert len(ITEMS) >= 9


BACKENDS = ["tensorstore", "python"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case,rel", ITEMS)
def test_fixture_loads_as_saved(case, rel, backend):
    """LOAD-023: without a target every leaf comes back in its stored type, bit for bit."""
    got = ockpt.load_pytree(case / "checkpoint", backend=backend, **load_kwargs(case, rel))
    assert_same(got, expected_items(case)[rel])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case,rel", ITEMS)
def test_fixture_loads_into_record_structure(case, rel, backend):
    """With the record itself as target the result has its exact types and structure."""
    expected = expected_items(case, target=True)[rel]
    got = ockpt.load_pytree(
        case / "checkpoint", expected, backend=backend, **load_kwargs(case, rel)
    )
    assert_same(got, expected, strict=True)


def test_every_fixture_loads_with_jax_blocked():
    """The numpy path works with jax absent and never imports it."""
    code = textwrap.dedent(
        """
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jax", "jaxlib", "orbax", "flax"):
                    raise ImportError(name + " is blocked")
        sys.meta_path.insert(0, Block())
        sys.path[:0] = ["reference", ".", "fixtures"]
        from pathlib import Path
        import ockpt
        from tests.support.expected import ITEMS, assert_same, expected_items, load_kwargs
        n = 0
        for param in ITEMS:
            case, rel = param.values
            got = ockpt.load_pytree(case / "checkpoint", **load_kwargs(case, rel))
            assert_same(got, expected_items(case)[rel])
            ockpt.pytree_metadata(case / "checkpoint", **load_kwargs(case, rel))
            n += 1
        assert not [m for m in sys.modules if m.split(".")[0] in ("jax", "orbax")]
        print("ok", n)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


# ---------------------------------------------------------------------------------------------
# Metadata.


def test_metadata_reads_no_chunks():
    case = fixture_case("0.12.8", "sharded")
    before = ts_engine.chunk_reads()
    meta = ockpt.pytree_metadata(case / "checkpoint")
    assert ts_engine.chunk_reads() == before
    xy = meta["xy"]
    assert isinstance(xy, ockpt.LeafMetadata)
    assert xy.param_name == "xy" and xy.value_type == "jax.Array"
    assert xy.shape == (8, 4) and xy.dtype == np.float32 and xy.storage_dtype == np.float32
    assert xy.chunk_shape == (2, 2) and xy.nbytes == 8 * 4 * 4
    assert xy.sharding.partition_spec == ("x", "y") and xy.sharding.mesh_shape == (4, 2)
    assert meta["single_device"].sharding.device_str.endswith("3")
    assert meta["bf16_x"].dtype.name == "bfloat16"


def test_metadata_of_scalars_strings_and_empty_nodes():
    meta = ockpt.pytree_metadata(fixture_case("0.12.8", "scalars_strings") / "checkpoint")
    assert meta["int"].value_type == "scalar" and meta["int"].shape == ()
    assert meta["int"].dtype == np.int64 and meta["np_float32"].dtype == np.float32
    assert meta["str"].value_type == "string" and meta["str"].dtype is None
    assert meta["nested"]["names"][1].param_name == "nested.names.1"
    nested = ockpt.pytree_metadata(fixture_case("0.12.8", "nested") / "checkpoint")
    assert nested["empty_dict"] == {} and nested["empty_list"] == [] and nested["none"] is None


# ---------------------------------------------------------------------------------------------
# Layouts of every era.


def _copy(case: Path, tmp_path: Path) -> Path:
    dst = tmp_path / case.name
    shutil.copytree(case / "checkpoint", dst)
    return dst


@pytest.mark.parametrize("name", ["sharded", "numpy_dtypes", "scalars_strings"])
def test_per_process_databases_only(name, tmp_path):
    """No merged root manifest: arrays are read from ocdbt.process_<N>/ directly."""
    case = fixture_case("0.12.8", name)
    path = _copy(case, tmp_path)
    (path / "manifest.ocdbt").unlink()
    shutil.rmtree(path / "d")
    assert_same(ockpt.load_pytree(path), expected_items(case)[""])
    lazy = ockpt.open(path)
    key = next(k for k in lazy.keys() if isinstance(lazy[k], ockpt.LazyArray))
    assert lazy[key][...].shape == lazy[key].shape


def test_per_process_databases_split_chunks(tmp_path):
    """Chunks of one array spread over two process databases are gathered from both."""
    case = fixture_case("0.12.8", "no_ocdbt")
    path = tmp_path / "item"
    path.mkdir()
    for name in ("_METADATA", "_sharding", "_strings.json"):
        shutil.copy(case / "checkpoint" / name, path / name)
    import tensorstore as ts  # here: the suite also runs without it (OCKPT_BLOCK_TENSORSTORE)

    ctx = ts.Context()
    src = ts.KvStore.open({"driver": "file", "path": str(case / "checkpoint") + "/"}).result()
    dbs = [
        ts.KvStore.open(
            {
                "driver": "ocdbt",
                "base": {"driver": "file", "path": str(path / f"ocdbt.process_{p}") + "/"},
            },
            context=ctx,
        ).result()
        for p in (0, 1)
    ]
    for key in src.list().result():
        text = key.decode()
        if "/" not in text or text.startswith(("array_metadatas", "_")):
            continue
        leaf, chunk = text.rsplit("/", 1)
        owner = 0 if chunk.startswith((".", "0")) else 1
        dbs[owner].write(key, src.read(key).result().value).result()
        if chunk == ".zarray":
            continue
    got = ockpt.load_pytree(path)
    assert_same(got, expected_items(case)[""])


def test_root_database_alone_when_values_are_inline(tmp_path):
    """Small values sit inline in the merged root's nodes: the root reads without process dbs."""
    case = fixture_case("0.12.8", "numpy_dtypes")
    path = _copy(case, tmp_path)
    shutil.rmtree(path / "ocdbt.process_0")
    assert_same(ockpt.load_pytree(path), expected_items(case)[""])


def test_single_root_database_with_generations(tmp_path):
    """Before per-process databases: one root database, many generations; the latest is read."""
    path = tmp_path / "item"
    spec = {
        "driver": "zarr",
        "kvstore": {
            "driver": "ocdbt",
            "base": {"driver": "file", "path": f"{path}/"},
            "path": "w/",
        },
        "metadata": {
            "shape": [4, 2],
            "chunks": [2, 2],
            "dtype": "<f4",
            "compressor": {"id": "zstd", "level": 1},
        },
    }
    import tensorstore as ts  # here: the suite also runs without it (OCKPT_BLOCK_TENSORSTORE)

    ctx = ts.Context()
    for generation in range(3):
        store = ts.open(spec, create=True, open=True, context=ctx).result()
        store[generation:].write(np.full((4 - generation, 2), generation, np.float32)).result()
    base = ts.KvStore.open({"driver": "file", "path": f"{path}/"}).result()
    assert len(ts.ocdbt.dump(base).result()["versions"]) > 3
    entry = {
        "key_metadata": [{"key": "w", "key_type": 2}],
        "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False},
    }
    (path / "_METADATA").write_text(json.dumps({"tree_metadata": {"('w',)": entry}}))
    for backend in ("python", "tensorstore"):
        got = ockpt.load_pytree(path, backend=backend)["w"]
        assert got.tolist() == [[0, 0], [1, 1], [2, 2], [2, 2]], backend


def test_memory_and_file_urls(tmp_path):
    case = fixture_case("0.12.8", "zarr3")
    import tensorstore as ts  # here: the suite also runs without it (OCKPT_BLOCK_TENSORSTORE)

    ctx = ts.Context()
    src = ts.KvStore.open({"driver": "file", "path": str(case / "checkpoint") + "/"}).result()
    dst = ts.KvStore.open("memory://ckpt/", context=ctx).result()
    for key in src.list().result():
        dst.write(key, src.read(key).result().value).result()
    expected = expected_items(case)[""]
    assert_same(ockpt.load_pytree("memory://ckpt/", context=ctx), expected)
    assert_same(ockpt.load_pytree(f"file://{case / 'checkpoint'}"), expected)
    meta = ockpt.pytree_metadata("memory://ckpt", context=ctx)
    assert meta["sharded"].shape == (8, 2)
    assert ockpt.open("memory://ckpt/", context=ctx)["sharded"][1:3, 1].tolist() == [3.0, 5.0]


def test_memory_url_manager_and_v1(tmp_path):
    import tensorstore as ts  # here: the suite also runs without it (OCKPT_BLOCK_TENSORSTORE)

    ctx = ts.Context()
    for name, prefix in (("manager", "m"), ("v1_pytree", "v")):
        case = fixture_case("0.12.8", name)
        src = ts.KvStore.open({"driver": "file", "path": str(case / "checkpoint") + "/"}).result()
        dst = ts.KvStore.open(f"memory://{prefix}/", context=ctx).result()
        for key in src.list().result():
            dst.write(key, src.read(key).result().value).result()
    items = expected_items(fixture_case("0.12.8", "manager"))
    assert_same(ockpt.load_pytree("memory://m/", context=ctx), items["2/params"])
    assert_same(ockpt.load_pytree("memory://m/", step=1, context=ctx), items["1/params"])
    v1 = expected_items(fixture_case("0.12.8", "v1_pytree"))["state"]
    assert_same(ockpt.load_pytree("memory://v/", context=ctx), v1)


def test_manager_steps_and_temporaries(tmp_path):
    case = fixture_case("0.12.8", "manager")
    root = _copy(case, tmp_path)
    items = expected_items(case)
    assert_same(ockpt.load_pytree(root), items["2/params"])  # latest by default
    assert_same(ockpt.load_pytree(root, step=0), items["0/params"])
    assert_same(ockpt.load_pytree(root / "1"), items["1/params"])  # a step directory
    assert_same(ockpt.load_pytree(root / "1" / "params"), items["1/params"])  # the item
    tmp = root / "7.orbax-checkpoint-tmp-1234"
    shutil.copytree(root / "0", tmp)
    assert_same(ockpt.load_pytree(root), items["2/params"])  # tmp never read
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(tmp)
    assert info.value.rule == "LOAD-054"
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(root, step=7)
    assert info.value.rule == "LOAD-053" and "no committed step 7" in info.value.message
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(root / "1", step=1)
    assert info.value.rule == "LOAD-053"
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(root, item="meta")  # a JSON item, not a pytree
    assert info.value.rule == "LOAD-050"
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(root, item="nope")
    assert info.value.rule == "LOAD-052" and "no item 'nope'" in info.value.message


def test_v1_older_pytree_name(tmp_path):
    """LOAD-051: state/ first, then the older pytree/."""
    case = fixture_case("0.12.8", "v1_pytree")
    root = _copy(case, tmp_path)
    (root / "state").rename(root / "pytree")
    assert_same(ockpt.load_pytree(root), expected_items(case)["state"])


def test_v1_without_state_names_its_checkpointables():
    """LOAD-051: no state/ nor pytree/ and two pytree checkpointables: refused, naming every
    checkpointable (Orbax 0.12.8 takes `opt_state`, the first by name); each loads by name, all
    through load_checkpointables."""
    case = fixture_case("0.12.8", "v1_no_state")
    ckpt = case / "checkpoint"
    items = expected_items(case)
    held = r"\['opt_state', 'params'\]; it holds \['meta', 'opt_state', 'params'\]"
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(ckpt)
    assert info.value.rule == "LOAD-051"
    assert re.search(held + r".*load_checkpointables", info.value.message)
    for name in ("params", "opt_state"):
        assert_same(ockpt.load_pytree(ckpt, item=name), items[name])
    got = ockpt.load_checkpointables(ckpt)
    assert sorted(got) == ["meta", "opt_state", "params"]
    assert_same(got["params"], items["params"])
    assert_same(got["opt_state"], items["opt_state"])
    from _record import load_expected

    assert got["meta"] == load_expected(case)["json_items"]["meta"]


def test_v1_only_pytree_checkpointable():
    """LOAD-051: one pytree checkpointable (beside a JSON one) is the pytree, as for a step."""
    case = fixture_case("0.12.8", "v1_one_pytree")
    assert_same(ockpt.load_pytree(case / "checkpoint"), expected_items(case)["params"])


def test_v1_checkpointables_choose_item(tmp_path):
    case = fixture_case("0.12.8", "v1_checkpointables")
    items = expected_items(case)
    assert_same(ockpt.load_pytree(case / "checkpoint"), items["state"])
    assert_same(ockpt.load_pytree(case / "checkpoint", item="aux"), items["aux"])
    step = _copy(case, tmp_path)  # a step (no v1 marker) with two pytree items, none default
    (step / "orbax.checkpoint").unlink()
    (step / "state").rename(step / "other")
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(step)
    assert info.value.rule == "LOAD-052" and "pick one with item=NAME" in info.value.message
    assert_same(ockpt.load_pytree(step, item="other"), items["state"])


def test_msgpack_placeholders_resolve_by_param_name():
    """LOAD-043: placeholders name arrays (and strings) by param name."""
    case = fixture_case("0.5.15", "msgpack_placeholders")
    ck = ockpt.open(case / "checkpoint")
    assert "params.w" in ck.keys() or any(k.startswith("params") for k in ck.keys())
    assert_same(ockpt.load_pytree(case / "checkpoint"), expected_items(case)[""])


def test_flat_strings_document_in_tree_order(tmp_path):
    """STR-003, LOAD-043: 0.3.5 writes the flat strings document into the directory of the
    first string leaf in tree order (a.z; by code point of the whole param names a-b comes
    first), members in that order; placeholders resolve to strings through it. A reader tries
    the string leaves in tree order: a second document in a-b/ is never read."""
    case = fixture_case("0.3.5", "strings_order")
    ckpt = case / "checkpoint"
    found = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("_strings.json"))
    assert found == ["a.z/_strings.json"]
    members = list(json.loads((ckpt / "a.z" / "_strings.json").read_text(encoding="utf-8")))
    assert members == ["a.z", "a-b", "x.0", "x.1", "x.", "\uff5e", "\U0001f600"]
    assert sorted(members)[0] == "a-b" != members[0]
    want = expected_items(case)[""]
    assert_same(ockpt.load_pytree(ckpt), want)
    root = _copy(case, tmp_path)
    (root / "a-b").mkdir(exist_ok=True)  # an empty directory: a clone of the fixtures lacks it
    (root / "a-b" / "_strings.json").write_text(json.dumps(dict.fromkeys(members, "decoy")))
    got = ockpt.load_pytree(root)
    assert got["a-b"] == want["a-b"] and got["a"]["z"] == want["a"]["z"]


def test_msgpack_without_metadata(tmp_path):
    """The msgpack file alone gives the tree (releases before _METADATA was written)."""
    case = fixture_case("0.5.15", "msgpack_aggregated")
    path = _copy(case, tmp_path)
    (path / "_METADATA").unlink()
    assert_same(ockpt.load_pytree(path), expected_items(case)[""])
    case = fixture_case("0.5.15", "msgpack_placeholders")
    path = _copy(case, tmp_path)
    (path / "_METADATA").unlink()
    expected = expected_items(case)[""]
    # 0.5.15 wrote placeholders for empty nodes too; without _METADATA they name no array
    with pytest.raises(MissingDataError) as info:
        ockpt.load_pytree(path)
    assert info.value.rule == "LOAD-040" and "'empty_dict'" in info.value.message
    target = {k: v for k, v in expected.items() if k in ("params", "name", "lr")}
    assert_same(ockpt.load_pytree(path, target, partial=True), target, strict=True)


def test_strings_in_older_locations(tmp_path):
    """LOAD-042: `_strings.json` at the item root, else under the first string leaf, else a
    file named by the param name; none of them is an error naming the leaf."""
    case = fixture_case("0.12.8", "no_ocdbt")
    path = _copy(case, tmp_path)
    (path / "name").mkdir()
    (path / "_strings.json").rename(path / "name" / "_strings.json")
    assert ockpt.load_pytree(path)["name"] == "no-ocdbt"
    shutil.rmtree(path / "name")
    (path / "name").write_text(json.dumps({"name": "in a file"}))
    assert ockpt.load_pytree(path)["name"] == "in a file"
    (path / "name").unlink()
    with pytest.raises(MissingDataError) as info:
        ockpt.load_pytree(path)
    assert_error(info, rule="LOAD-042", file=str(path / "_strings.json"))
    assert "'name'" in info.value.message


# ---------------------------------------------------------------------------------------------
# Partial loads and placeholders.


def test_subset_target_is_an_error_listing_keys():
    case = fixture_case("0.12.8", "sharded")
    target = {"xy": np.zeros((8, 4), np.float32), "nope": np.zeros(1)}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", target)
    err = info.value
    assert err.rule == "LOAD-001" and err.missing == ("nope",)
    assert "bf16_x" in err.extra and err.file == str(case / "checkpoint" / "_METADATA")
    assert "nope" in err.message
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"xy": np.zeros((8, 4), np.float32)})
    assert info.value.rule == "LOAD-002" and "single_device" in info.value.extra
    assert "partial=True" in info.value.message


def test_partial_load_reads_only_its_leaves(monkeypatch):
    case = fixture_case("0.12.8", "sharded")
    expected = expected_items(case)[""]
    reads = count_reads(monkeypatch)
    before = ts_engine.chunk_reads()
    got = ockpt.load_pytree(
        case / "checkpoint", {"x": np.zeros((8, 3), np.int32)}, partial=True, backend="tensorstore"
    )
    assert list(got) == ["x"]
    assert_same(got["x"], expected["x"])
    assert {name for name, _ in reads} == {"x"}
    meta = ockpt.pytree_metadata(case / "checkpoint")["x"]
    n_chunks = math.prod(-(-s // c) for s, c in zip(meta.shape, meta.chunk_shape, strict=True))
    assert ts_engine.chunk_reads() - before == n_chunks


def test_python_backend_reads_only_the_chunks_asked_for(monkeypatch):
    """The same with ockpt's own decoders: a partial load and placeholders decode only the
    chunks of the leaves asked for (LOAD-033)."""
    from ockpt.engines.python import fastread as _fastread

    case = fixture_case("0.12.8", "sharded")
    expected = expected_items(case)[""]
    chunks: list[str] = []
    original = _fastread._read_chunk
    monkeypatch.setattr(
        _fastread,
        "_read_chunk",
        lambda group, index, dests: (
            chunks.append(group.array.param_name) or original(group, index, dests)
        ),
    )
    got = ockpt.load_pytree(case / "checkpoint", {"x": np.zeros((8, 3), np.int32)}, partial=True)
    assert_same(got["x"], expected["x"])
    meta = ockpt.pytree_metadata(case / "checkpoint")
    n = {k: math.prod(-(-s // c) for s, c in zip(m.shape, m.chunk_shape, strict=True))
         for k, m in meta.items() if k in ("x", "yx")}  # fmt: skip
    assert chunks == ["x"] * n["x"]
    chunks.clear()
    target = {k: ... for k in expected}
    target["yx"] = np.zeros((2, 8), np.float32)
    got = ockpt.load_pytree(case / "checkpoint", target)
    assert chunks == ["yx"] * n["yx"] and all(got[k] is ... for k in expected if k != "yx")


def test_placeholders_skip_leaves(monkeypatch):
    """LOAD-033: a placeholder leaf reads no array bytes (counted two ways)."""
    case = fixture_case("0.12.8", "sharded")
    expected = expected_items(case)[""]
    target = {k: ... for k in expected}
    target["yx"] = np.zeros((2, 8), np.float32)
    reads = count_reads(monkeypatch)
    before = ts_engine.chunk_reads()
    got = ockpt.load_pytree(case / "checkpoint", target, backend="tensorstore")
    after = ts_engine.chunk_reads()
    assert {name for name, _ in reads} == {"yx"}
    meta = ockpt.pytree_metadata(case / "checkpoint")["yx"]
    n_chunks = math.prod(-(-s // c) for s, c in zip(meta.shape, meta.chunk_shape, strict=True))
    assert after - before == n_chunks == 8  # (2, 8) in chunks of (1, 2)
    assert all(got[k] is ... for k in expected if k != "yx")
    assert_same(got["yx"], expected["yx"])
    before = ts_engine.chunk_reads()
    everything_skipped = ockpt.load_pytree(
        case / "checkpoint", {k: ... for k in expected}, backend="tensorstore"
    )
    assert ts_engine.chunk_reads() == before
    assert set(everything_skipped) == set(expected)


def test_placeholder_for_string_and_scalar_leaves():
    case = fixture_case("0.12.8", "scalars_strings")
    expected = expected_items(case)[""]
    target = {k: ... for k in expected}
    target["str"] = ""
    target["int"] = 0
    got = ockpt.load_pytree(case / "checkpoint", target)
    assert got["str"] == "hello" and got["int"] == 42 and type(got["int"]) is int
    assert got["float"] is ...


def test_target_structure_is_kept():
    case = fixture_case("0.12.8", "nested")
    expected = expected_items(case)[""]
    target = dict(expected)
    target["deep"] = ...
    target["int_keys"] = {0: ..., 1: np.zeros(2), 10: ...}
    got = ockpt.load_pytree(case / "checkpoint", target)
    assert list(got["int_keys"]) == [0, 1, 10]
    assert type(got["point"]).__name__ == "Point"
    assert isinstance(got["opt"], tuple) and got["opt"][2] == ()


# ---------------------------------------------------------------------------------------------
# Casts and shapes.


def test_exact_casts_are_allowed():
    case = fixture_case("0.12.8", "numpy_dtypes")
    exp = expected_items(case)[""]
    target = {
        "int16": np.zeros((2, 3), np.int32),
        "float32": np.zeros((2, 3, 4), np.float64),
        "bfloat16": np.zeros((2, 3), np.float32),
        "uint8": np.zeros(4, np.float16),
        "int4": np.zeros((2, 4), np.int8),
        "bool": np.zeros((2, 3), np.uint8),
        "float16": np.zeros((2, 4), np.complex64),
    }
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True)
    for key, value in target.items():
        assert got[key].dtype == value.dtype, key
        want = exp[key].astype(value.dtype)
        assert np.array_equal(got[key], want, equal_nan=value.dtype.kind in "fc"), key


@pytest.mark.parametrize(
    "key,shape,dtype",
    [
        ("float32", (2, 3, 4), np.int32),  # float -> int
        ("float64", (), np.float32),  # narrower
        ("int64", (2, 2, 3), np.float32),  # int64 -> float32
        ("int64", (2, 2, 3), np.float64),  # int64 -> float64 (above 2**53)
        ("uint16", (3, 1), np.int16),  # range
        ("complex64", (3,), np.float64),  # complex -> real
        ("int8", (7,), np.bool_),  # -> bool
        ("float32", (2, 3, 4), "bfloat16"),  # precision
    ],
)
def test_lossy_casts_are_refused(key, shape, dtype):
    import ml_dtypes

    dtype = np.dtype(getattr(ml_dtypes, dtype) if isinstance(dtype, str) else dtype)
    case = fixture_case("0.12.8", "numpy_dtypes")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {key: np.zeros(shape, dtype)}, partial=True)
    err = info.value
    assert err.rule == "LOAD-020" and err.leaf == key
    assert err.file == str(case / "checkpoint" / "_METADATA")
    got = ockpt.load_pytree(
        case / "checkpoint", {key: np.zeros(shape, dtype)}, partial=True, cast="lossy"
    )
    assert got[key].dtype == dtype


def test_checked_cast_depends_on_values():
    nested = fixture_case("0.12.8", "nested")
    key = "unicode \u043a\u043b\u044e\u0447"  # int32 [0, 1, 2]
    got = ockpt.load_pytree(
        nested / "checkpoint", {key: np.zeros(3, np.float32)}, partial=True, cast="checked"
    )
    assert got[key].tolist() == [0.0, 1.0, 2.0] and got[key].dtype == np.float32
    case = fixture_case("0.12.8", "numpy_dtypes")  # int32 -123456789 is not a float32
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(
            case / "checkpoint", {"int32": np.zeros((), np.float32)}, partial=True, cast="checked"
        )
    assert info.value.rule == "LOAD-021" and info.value.leaf == "int32"
    assert "would change 1 value" in info.value.message
    got = ockpt.load_pytree(
        case / "checkpoint", {"int32": np.zeros((), np.float32)}, partial=True, cast="lossy"
    )
    assert got["int32"] == np.float32(-123456789)


def test_scalar_targets_follow_the_cast_rule():
    case = fixture_case("0.12.8", "scalars_strings")
    got = ockpt.load_pytree(
        case / "checkpoint",
        {"np_float32": 0.0, "np_int8": np.int32(0), "int": np.float64(0), "bool_true": 0},
        partial=True,
        cast="checked",
    )
    assert type(got["np_float32"]) is float and got["np_float32"] == float(np.float32(0.1))
    assert got["np_int8"].dtype == np.int32 and got["np_int8"] == -128
    assert got["int"] == 42.0 and got["bool_true"] == 1 and type(got["bool_true"]) is int
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"float": 0}, partial=True)
    assert info.value.rule == "LOAD-020"


def test_shape_mismatch_names_leaf_unless_pad_or_truncate():
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]["x"]  # int32 (8, 3)
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"x": np.zeros((10, 2), np.int32)}, partial=True)
    assert info.value.rule == "LOAD-030" and info.value.leaf == "x"  # LOAD-031 below
    assert "[8, 3]" in info.value.message
    assert info.value.file == str(case / "checkpoint" / "_METADATA")
    got = ockpt.load_pytree(
        case / "checkpoint",
        {"x": np.zeros((10, 2), np.int32)},
        partial=True,
        pad_or_truncate=True,
    )["x"]
    want = np.zeros((10, 2), np.int32)
    want[:8] = exp[:, :2]
    assert np.array_equal(got, want)
    with pytest.raises(TargetError) as info:  # rank must match
        ockpt.load_pytree(
            case / "checkpoint", {"x": np.zeros(24, np.int32)}, partial=True, pad_or_truncate=True
        )
    assert info.value.rule == "LOAD-030"


def test_string_and_array_mismatch():
    case = fixture_case("0.12.8", "no_ocdbt")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"name": np.zeros(3)}, partial=True)
    assert info.value.rule == "LOAD-005"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"a": "text"}, partial=True)
    assert info.value.rule == "LOAD-005"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"a": object()}, partial=True)
    assert info.value.rule == "LOAD-004"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"b": np.zeros(4)}, partial=True)
    assert info.value.rule == "LOAD-003"


def test_unknown_cast_policy():
    with pytest.raises(ValueError, match="cast must be"):
        ockpt.load_pytree(fixture_case("0.12.8", "no_ocdbt") / "checkpoint", cast="maybe")


# ---------------------------------------------------------------------------------------------
# Lazy slice reads.


def test_slice_reads_touch_only_their_chunks():
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]["xy"]  # (8, 4) in chunks of (2, 2)
    ck = ockpt.open(case / "checkpoint", backend="tensorstore")
    assert "xy" in ck and len(ck) == len(ck.keys())
    xy = ck["xy"]
    assert xy.shape == (8, 4) and xy.dtype == np.float32 and xy.chunk_shape == (2, 2)
    before = ts_engine.chunk_reads()
    part = xy[2:4, 1:3]
    assert ts_engine.chunk_reads() - before == 2
    assert np.array_equal(part, exp[2:4, 1:3])
    before = ts_engine.chunk_reads()
    assert xy[5, 3] == exp[5, 3]
    assert ts_engine.chunk_reads() - before == 1


@pytest.mark.parametrize(
    "index",
    [
        np.s_[...],
        np.s_[::-1],
        np.s_[-1],
        np.s_[1:7:3, ::-2],
        np.s_[None, 2, ..., None],
        np.s_[3:3],
        np.s_[-3:, 1],
        np.s_[..., -1],
        np.s_[6:1:-2, 0:4:5],
    ],
)
def test_slice_reads_match_numpy(index):
    case = fixture_case("0.12.8", "sharded")
    exp = expected_items(case)[""]["xy"]
    got = ockpt.open(case / "checkpoint")["xy"][index]
    want = exp[index]
    assert np.shape(got) == np.shape(want) and np.array_equal(got, want)


def test_slice_read_errors():
    xy = ockpt.open(fixture_case("0.12.8", "sharded") / "checkpoint")["xy"]
    with pytest.raises(IndexError):
        xy[8]
    with pytest.raises(IndexError):
        xy[0, 0, 0]
    with pytest.raises(TypeError, match="basic indexing"):
        xy[np.array([0, 1])]
    with pytest.raises(ockpt.LeafNameError) as info:
        ockpt.open(fixture_case("0.12.8", "sharded") / "checkpoint")["nope"]
    assert info.value.rule == "PATH-007" and isinstance(info.value, KeyError)
    assert "no leaf" in info.value.message


def test_lazy_scalars_strings_and_inline_values():
    ck = ockpt.open(fixture_case("0.12.8", "scalars_strings") / "checkpoint")
    assert ck["str"] == "hello"
    assert ck["np_float32"].read() == np.float32(0.1) and ck["np_float32"].read().dtype == "f4"
    assert np.asarray(ck["int"]) == 42
    agg = fixture_case("0.5.15", "msgpack_aggregated")
    exp = expected_items(agg)[""]
    ck = ockpt.open(agg / "checkpoint")
    key = next(k for k, v in exp.items() if isinstance(v, np.ndarray) and v.ndim == 2)
    assert np.array_equal(ck[key][1:, :1], exp[key][1:, :1])


# ---------------------------------------------------------------------------------------------
# Errors name the file and the leaf.


def test_missing_chunk_names_file_and_leaf(tmp_path):
    case = fixture_case("0.12.8", "no_ocdbt")
    path = _copy(case, tmp_path)
    (path / "sharded" / "1.1").unlink()
    with pytest.raises(MissingDataError) as info:
        ockpt.load_pytree(path)
    assert_error(info, rule="LOAD-041", file=str(path / "sharded" / "1.1"))
    assert info.value.message.startswith("chunk [1, 1] is missing")
    assert ockpt.load_pytree(path, {"a": ..., "sharded": ...}, partial=True)["a"] is ...


def test_missing_array_names_file_and_leaf(tmp_path):
    case = fixture_case("0.12.8", "no_ocdbt")
    path = _copy(case, tmp_path)
    shutil.rmtree(path / "bf16")
    with pytest.raises(MissingDataError) as info:
        ockpt.load_pytree(path)
    assert_error(info, rule="LOAD-040", file=str(path / "bf16"))
    assert "'bf16'" in info.value.message
    got = ockpt.load_pytree(path, {"a": np.zeros((2, 3), np.float32)}, partial=True)
    assert got["a"].shape == (2, 3)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(NotACheckpointError) as info:
        ockpt.load_pytree(tmp_path)
    assert info.value.rule == "LOAD-050"
    with pytest.raises(NotACheckpointError):
        ockpt.load_pytree(tmp_path / "absent")


def test_bad_metadata_is_a_format_error(tmp_path):
    case = fixture_case("0.12.8", "no_ocdbt")
    path = _copy(case, tmp_path)
    doc = json.loads((path / "_METADATA").read_text())
    doc["tree_metadata"]["('a',)"]["key_metadata"][0]["key_type"] = 9
    (path / "_METADATA").write_text(json.dumps(doc))
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.load_pytree(path)
    assert_error(info, rule="META-004", file=str(path / "_METADATA"))


def test_bounded_concurrency_reads_everything():
    case = fixture_case("0.12.8", "sharded")
    got = ockpt.load_pytree(case / "checkpoint", max_in_flight=1)
    assert_same(got, expected_items(case)[""])
    with pytest.raises(ValueError):
        ockpt.load_pytree(case / "checkpoint", max_in_flight=0)


def test_float_bits_survive():
    """-0.0 and NaN payload-free values come back bit-identical (no float arithmetic)."""
    got = ockpt.load_pytree(fixture_case("0.12.8", "scalars_strings") / "checkpoint")
    assert struct.pack("<d", got["float_neg_zero"]) == struct.pack("<d", -0.0)
    assert got["float_subnormal"] == 5e-324


# ---------------------------------------------------------------------------------------------
# Memory and tiling.


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_tiles_partition_the_box_along_the_chunk_grid(data):
    ndim = data.draw(st.integers(0, 3))
    shape = data.draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim))
    chunks = [data.draw(st.integers(1, n + 2)) for n in shape]
    box = []
    for n in shape:
        a = data.draw(st.integers(0, n))
        box.append((a, data.draw(st.integers(a, n))))
    budget = data.draw(st.integers(1, 400))
    parts = engines.tiles(box, chunks, 4, budget)
    covered = np.zeros(shape, np.int32)
    for part in parts:
        covered[tuple(slice(a, b) for a, b in part)] += 1
        chunk_ids = [{i // c for i in range(a, b)} for (a, b), c in zip(part, chunks, strict=True)]
        n_chunks = math.prod(len(ids) for ids in chunk_ids)
        assert n_chunks == 1 or 4 * math.prod(b - a for a, b in part) <= budget
    want = np.zeros(shape, np.int32)
    want[tuple(slice(a, b) for a, b in box)] = 1
    assert np.array_equal(covered, want)  # every element once
    owner: dict = {}
    for i, part in enumerate(parts):  # no chunk is split over two tiles
        ranges = [range(a // c, (b - 1) // c + 1) for (a, b), c in zip(part, chunks, strict=True)]
        for chunk in itertools.product(*ranges):
            assert owner.setdefault(chunk, i) == i


def test_numpy_load_memory_is_output_plus_tiles(tmp_path):
    """Peak memory of a load into numpy: the output plus, per read in flight, one tile (4 MiB
    here: two 2 MiB chunks) and its compressed bytes; never a second copy of the output."""
    if not HAVE_TENSORSTORE:  # it writes the array with tensorstore
        pytest.skip("needs tensorstore: OCKPT_BLOCK_TENSORSTORE is set")
    code = textwrap.dedent(
        f"""
        import json, resource, sys
        sys.path.insert(0, "reference")
        import numpy as np, tensorstore as ts
        import ockpt
        path = {str(tmp_path / "item")!r}
        spec = {{"driver": "zarr", "kvstore": {{"driver": "file", "path": path + "/w/"}},
                "metadata": {{"shape": [64, 1 << 17], "chunks": [4, 1 << 17], "dtype": "<f4",
                             "compressor": {{"id": "zstd", "level": 1}}}}}}
        store = ts.open(spec, create=True).result()
        rng = np.random.default_rng(0)
        for i in range(0, 64, 8):
            store[i:i + 8].write(rng.standard_normal((8, 1 << 17), np.float32)).result()
        del store, rng
        entry = {{"key_metadata": [{{"key": "w", "key_type": 2}}],
                 "value_metadata": {{"value_type": "np.ndarray", "skip_deserialize": False}}}}
        open(path + "/_METADATA", "w").write(json.dumps({{"tree_metadata": {{"('w',)": entry}}}}))
        ockpt.pytree_metadata(path)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = ockpt.load_pytree(path, max_in_flight=2)["w"]
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((after - before) // 1024, out.nbytes >> 20)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    grown, output = map(int, result.stdout.split())
    assert output == 32, result.stdout
    assert grown <= output + 2 * 2 * 4 + 8, f"peak grew {grown} MiB for a {output} MiB output"


def test_load_as_saved_takes_sequence_items_by_index(tmp_path):
    """A `_METADATA` whose sequence entries come in text order ('10' before '2') loads each
    item at its index: the jobs of a load as saved are made in the order its tree is rebuilt
    (`load._rebuild`), sequences by index."""
    tree = {"l": [np.full(2, i, np.int32) for i in range(12)], "m": {"b": [np.int32(7)], "a": []}}
    ockpt.save_pytree(tmp_path / "c", tree, layout="item")
    path = tmp_path / "c" / "_METADATA"
    doc = json.loads(path.read_bytes())
    doc["tree_metadata"] = dict(sorted(doc["tree_metadata"].items()))
    assert (
        list(doc["tree_metadata"])[1] == "('l', '1')"
        and "('l', '10')" in list(doc["tree_metadata"])[:4]
    )
    path.write_text(json.dumps(doc))
    got = ockpt.load_pytree(tmp_path / "c")
    assert [int(v[0]) for v in got["l"]] == list(range(12))
    assert got["m"] == {"b": [np.int32(7)], "a": []} and list(got) == ["l", "m"]


# ---------------------------------------------------------------------------------------------
# Matching a target: what each mismatch says (issue 34 item 4: reader/load.py mutants).


def _nested() -> Path:
    return fixture_case("0.12.8", "nested") / "checkpoint"


@pytest.mark.parametrize(
    "key,what",
    [
        ("deep", "a subtree"),
        ("empty_dict", "a Dict node"),
        ("empty_list", "a List node"),
        ("none", "a None node"),
    ],
)
def test_a_target_leaf_where_the_checkpoint_has_no_leaf(key, what):
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {key: np.zeros(3)}, partial=True)
    assert_error(
        info,
        rule="LOAD-003",
        leaf=key,
        file=str(_nested() / "_METADATA"),
        message=f"the target has a leaf (ndarray) where the checkpoint has {what}",
    )


@pytest.mark.parametrize(
    "target,what",
    [
        ({"a": 1}, "a dict node"),
        ([1], "a list node"),
        ({}, "an empty container"),
        ((), "an empty container"),
    ],
)
def test_a_target_node_where_the_checkpoint_has_a_leaf(target, what):
    key = "unicode \u043a\u043b\u044e\u0447"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {key: target}, partial=True)
    assert_error(
        info,
        rule="LOAD-003",
        leaf=key,
        file=str(_nested() / "_METADATA"),
        message=f"the target has {what} where the checkpoint has a leaf",
    )


def test_missing_and_extra_leaves_are_listed(tmp_path):
    """LOAD-001 lists what the target asks for that is not saved (a skipped leaf too) and
    what is saved but not asked for; LOAD-002 only the latter, with the hint."""
    tree = {"n": {"e": {}, "f": None}, "x": np.arange(3), "s": {"y": np.ones(2), "z": np.ones(1)}}
    ockpt.save_pytree(tmp_path / "c", tree, layout="item")
    path = tmp_path / "c"
    meta = str(path / "_METADATA")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, {"x": ..., "q": ..., "s": {"y": np.zeros(2), "w": None}})
    assert_error(
        info,
        rule="LOAD-001",
        file=meta,
        missing=("q", "s.w"),
        extra=("s.z", "n"),
        message="target tree does not match the saved tree; missing from the checkpoint: "
        "['q', 's.w']; in the checkpoint but not in the target: ['s.z', 'n']",
    )
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, {"x": ..., "q": ..., "s": ..., "n": ...}, partial=True)
    assert_error(
        info,
        rule="LOAD-001",
        missing=("q",),
        extra=(),
        message="target tree does not match the saved tree; missing from the checkpoint: ['q']",
    )
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, {"x": ..., "s": None, "n": {}})
    assert_error(
        info,
        rule="LOAD-002",
        missing=(),
        extra=("s.y", "s.z", "n"),  # a node of empty nodes only: by its own name
        message="target tree does not match the saved tree; in the checkpoint but not in the "
        "target: ['s.y', 's.z', 'n'] (pass partial=True to load a subset)",
    )
    got = ockpt.load_pytree(path, {"x": ..., "s": None, "n": {}}, partial=True)
    assert got == {"x": ..., "s": None, "n": {}}
    none = {"x": None, "s": {"y": ..., "z": None}, "n": None}  # None: not asked for
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, none)
    assert_error(info, rule="LOAD-002", missing=(), extra=("x", "s.z", "n"))
    assert ockpt.load_pytree(path, none, partial=True) == none
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, {"x": ..., "s": ..., "n": {"e": None, "f": None, "g": 1}})
    assert_error(info, rule="LOAD-001", missing=("n.g",), extra=())


def test_empty_nodes_and_none_match_empty_targets():
    got = ockpt.load_pytree(
        _nested(),
        {"empty_dict": {}, "empty_list": [], "empty_tuple": (), "none": None, "deep": {"a": ...}},
        partial=True,
    )
    assert got == {
        "empty_dict": {},
        "empty_list": [],
        "empty_tuple": (),
        "none": None,
        "deep": {"a": ...},
    }
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {"empty_dict": {"k": ...}}, partial=True)
    assert_error(info, rule="LOAD-001", missing=("empty_dict.k",))
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {"layers": [..., {"w": ..., "b": np.zeros(1)}]}, partial=True)
    assert_error(info, rule="LOAD-003", leaf="layers.1.b")


def test_two_target_keys_of_one_text():
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {"int_keys": {1: ..., "1": ...}}, partial=True)
    assert_error(info, rule="LOAD-004", message="two target dict keys have the same text")


def test_mapping_targets_keep_their_class():
    import collections
    import types

    class Frozen(dict):
        def __init__(self, *args):  # type: ignore[no-untyped-def]
            if args:
                raise TypeError("frozen")
            super().__init__()

    deep = {"a": {"b": {"c": {"d": np.zeros((2, 3), np.float32)}}}}
    want = expected_items(fixture_case("0.12.8", "nested"))[""]["deep"]["a"]["b"]["c"]["d"]
    ordered = collections.OrderedDict(deep)
    got = ockpt.load_pytree(_nested(), {"deep": ordered}, partial=True)["deep"]
    assert type(got) is collections.OrderedDict and np.array_equal(got["a"]["b"]["c"]["d"], want)
    proxy = types.MappingProxyType(deep)
    got = ockpt.load_pytree(_nested(), {"deep": proxy}, partial=True)["deep"]
    assert type(got) is types.MappingProxyType and np.array_equal(got["a"]["b"]["c"]["d"], want)
    frozen = Frozen()
    dict.__setitem__(frozen, "a", deep["a"])
    got = ockpt.load_pytree(_nested(), {"deep": frozen}, partial=True)["deep"]
    assert type(got) is dict and list(got) == ["a"]


def test_unsupported_target_leaf():
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {"unicode \u043a\u043b\u044e\u0447": object()}, partial=True)
    assert_error(info, rule="LOAD-004", leaf="unicode \u043a\u043b\u044e\u0447")
    assert info.value.message.startswith("unsupported target leaf type object (use numpy.ndarray")


# ---------------------------------------------------------------------------------------------
# Loading: casts, padding, inline values, mapping and the memory check, as each says.


def test_a_checked_cast_names_the_first_value_it_would_change(tmp_path):
    values = np.array([[1, 2], [2**40 + 1, 5], [7, 2**41 + 1]], np.int64)
    ockpt.save_pytree(tmp_path / "c", {"v": values}, layout="item")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(tmp_path / "c", {"v": np.zeros((3, 2), np.float32)}, cast="checked")
    assert_error(
        info,
        rule="LOAD-021",
        leaf="v",
        file=str(tmp_path / "c" / "_METADATA"),
        message="cast from int64 to float32 would change 2 value(s), first at [1, 0] "
        "(np.int64(1099511627777))",
    )
    got = ockpt.load_pytree(tmp_path / "c", {"v": np.zeros((3, 2), np.float32)}, cast="lossy")
    assert got["v"].dtype == np.float32 and got["v"][1, 0] == np.float32(2**40)
    small = ockpt.load_pytree(
        tmp_path / "c", {"v": np.zeros((1, 2), np.float32)}, cast="checked", pad_or_truncate=True
    )
    assert small["v"].tolist() == [[1.0, 2.0]]


def test_a_lossy_cast_says_how_to_allow_it():
    case = fixture_case("0.12.8", "numpy_dtypes")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"float64": np.zeros((), np.float32)}, partial=True)
    assert_error(
        info,
        rule="LOAD-020",
        message="cast from float64 to float32 is lossy; pass cast='checked' (refuse if a value "
        "changes) or cast='lossy' to allow it",
    )


def test_a_shape_mismatch_says_how_to_pad_or_cut():
    case = fixture_case("0.12.8", "sharded")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"x": np.zeros((8, 2), np.int32)}, partial=True)
    assert info.value.message == (
        "shape mismatch: the checkpoint holds [8, 3], the target asks for [8, 2] "
        "(pass pad_or_truncate=True to pad or cut)"
    )
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(
            case / "checkpoint", {"x": np.zeros((8,), np.int32)}, partial=True, pad_or_truncate=True
        )
    assert info.value.message == (
        "shape mismatch: the checkpoint holds [8, 3], the target asks for [8]"
    )
    with pytest.raises(TargetError) as info:  # a 0-d target is no shape to pad to
        ockpt.load_pytree(
            fixture_case("0.12.8", "scalars_strings") / "checkpoint",
            {"np_int8": np.zeros(2, np.int8)},
            partial=True,
            pad_or_truncate=True,
        )
    assert_error(info, rule="LOAD-030", leaf="np_int8")


def test_strings_and_arrays_are_not_each_other():
    case = fixture_case("0.12.8", "no_ocdbt")
    meta = str(case / "checkpoint" / "_METADATA")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"name": np.zeros(3)}, partial=True)
    assert_error(
        info,
        rule="LOAD-005",
        leaf="name",
        file=meta,
        message="the checkpoint holds a string; the target asks for an array",
    )
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case / "checkpoint", {"a": "text"}, partial=True)
    assert_error(
        info,
        rule="LOAD-005",
        leaf="a",
        file=meta,
        message="the checkpoint holds an array; the target asks for a string",
    )
    agg = fixture_case("0.5.15", "msgpack_aggregated") / "checkpoint"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(agg, {"str": np.zeros(2)}, partial=True)
    assert_error(
        info,
        rule="LOAD-005",
        leaf="str",
        message="the checkpoint holds a string; the target asks for an array",
    )
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(agg, {"int32_2d": ""}, partial=True)
    assert_error(
        info,
        rule="LOAD-005",
        leaf="int32_2d",
        message="the checkpoint holds an array; the target asks for a string",
    )
    got = ockpt.load_pytree(agg, {"str": "", "nested": {"list": [..., ..., "", ...]}}, partial=True)
    assert got == {"str": "hello", "nested": {"list": [..., ..., "x", ...]}}


def test_inline_values_into_targets():
    agg = fixture_case("0.5.15", "msgpack_aggregated")
    want = expected_items(agg)[""]
    target = {
        "int32_2d": np.zeros((3, 4), np.int64),
        "float32": np.zeros(2, np.float32),
        "int": 0,
        "np_int8": np.int16(0),
        "float": np.float64(0),
        "bool_true": False,
        "uint8": np.zeros(3, np.uint8),
    }
    got = ockpt.load_pytree(agg / "checkpoint", target, partial=True, pad_or_truncate=True)
    padded = np.zeros((3, 4), np.int64)
    padded[:2, :3] = want["int32_2d"]
    assert got["int32_2d"].dtype == np.int64 and np.array_equal(got["int32_2d"], padded)
    assert np.array_equal(got["float32"], want["float32"][:2])
    assert type(got["int"]) is int and got["int"] == want["int"]
    assert type(got["np_int8"]) is np.int16 and got["np_int8"] == want["np_int8"]
    assert type(got["float"]) is np.float64 and got["float"] == want["float"]
    assert type(got["bool_true"]) is bool and got["bool_true"] is True
    assert got["uint8"].dtype == np.uint8 and np.array_equal(got["uint8"], want["uint8"])
    assert got["uint8"].flags.writeable
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(agg / "checkpoint", {"int32_2d": np.zeros((2, 3), np.int8)}, partial=True)
    assert_error(info, rule="LOAD-020", leaf="int32_2d", file=str(agg / "checkpoint" / "_METADATA"))
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(
            agg / "checkpoint",
            {"int64": np.zeros(2, np.int8)},
            partial=True,
            cast="checked",
        )
    assert_error(info, rule="LOAD-021", leaf="int64")
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(
            agg / "checkpoint", {"int32_2d": np.zeros((3, 4), np.int32)}, partial=True
        )
    assert_error(info, rule="LOAD-030", leaf="int32_2d")


def _raw(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    tree = {"a": np.arange(4096, dtype=np.float32), "b": np.arange(3000, dtype=np.int64)}
    ockpt.save_pytree(tmp_path / "raw", tree, layout="item", compression=None)
    return tmp_path / "raw", tree


@pytest.mark.parametrize(
    "target,why",
    [
        (np.zeros(4096, np.float64), "the target asks for float64, the checkpoint holds float32"),
        (np.zeros(4000, np.float32), "the target's shape [4000] is not the stored one"),
    ],
)
def test_a_leaf_the_target_changes_is_read_not_mapped(tmp_path, target, why):
    path, tree = _raw(tmp_path)
    got = ockpt.load_pytree(
        path, {"a": target, "b": ...}, mmap=True, cast="lossy", pad_or_truncate=True
    )
    assert got["a"].flags.writeable and got["a"].dtype == target.dtype
    assert np.array_equal(got["a"], tree["a"][: target.size].astype(target.dtype))
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(
            path, {"a": target, "b": ...}, mmap="require", cast="lossy", pad_or_truncate=True
        )
    assert_error(info, rule="LOAD-034", leaf="a", message=f"cannot map the leaf into memory: {why}")
    got = ockpt.load_pytree(path, {"a": np.zeros(4096, np.float32), "b": ...}, mmap="require")
    assert not got["a"].flags.writeable and np.array_equal(got["a"], tree["a"])


def test_a_mapped_scalar_loads_as_a_scalar(tmp_path):
    tree = {"s": np.float64(1.5), "a": np.arange(3.0), "i": np.int32(7)}
    ockpt.save_pytree(tmp_path / "c", tree, layout="item", compression=None, use_ocdbt=False)
    got = ockpt.load_pytree(tmp_path / "c", mmap="require")
    assert type(got["s"]) is np.float64 and got["s"] == 1.5
    assert type(got["i"]) is np.int32 and got["i"] == 7
    assert isinstance(got["a"], np.ndarray) and not got["a"].flags.writeable
    got = ockpt.load_pytree(
        tmp_path / "c", {"s": np.zeros((), np.float64)}, partial=True, mmap=True
    )
    assert isinstance(got["s"], np.ndarray) and got["s"].shape == () and got["s"] == 1.5


def test_a_device_array_target_is_not_mapped(tmp_path):
    jax = pytest.importorskip("jax")
    path, tree = _raw(tmp_path)
    target = {"a": jax.ShapeDtypeStruct((4096,), np.float32), "b": ...}
    got = ockpt.load_pytree(path, target, mmap=True)
    assert isinstance(got["a"], jax.Array) and np.array_equal(np.asarray(got["a"]), tree["a"])
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(path, target, mmap="require")
    assert_error(
        info,
        rule="LOAD-034",
        leaf="a",
        message="cannot map the leaf into memory: the target is a device array",
    )


def test_an_engine_that_maps_nothing():
    from ockpt.reader.load import mapped_leaf
    from ockpt.store.mapping import FileMaps

    class NoMap:
        file = "somewhere"

    assert mapped_leaf(NoMap(), FileMaps(), True, leaf="k") is None
    with pytest.raises(TargetError) as info:
        mapped_leaf(NoMap(), FileMaps(), "require", leaf="k")
    assert_error(
        info,
        rule="LOAD-034",
        leaf="k",
        file="somewhere",
        message="cannot map the leaf into memory: the tensorstore engine reads through "
        "tensorstore (use backend='python')",
    )
    assert mapped_leaf(NoMap(), FileMaps(), False, leaf="k", why="any") is None


def test_options_out_of_range():
    path = fixture_case("0.12.8", "no_ocdbt") / "checkpoint"
    with pytest.raises(ValueError) as info:
        ockpt.load_pytree(path, cast="maybe")
    assert str(info.value) == "cast must be one of ('exact', 'checked', 'lossy'), got 'maybe'"
    with pytest.raises(ValueError) as info:
        ockpt.load_pytree(path, mmap="yes")
    assert str(info.value) == "mmap must be False, True or 'require', got 'yes'"
    for mmap in (False, True):
        assert ockpt.load_pytree(path, {"a": ...}, partial=True, mmap=mmap) == {"a": ...}


def _memory(monkeypatch, available: int) -> None:
    """Every allocation checked, against `available` bytes."""
    import ockpt.limits

    monkeypatch.setattr(ockpt.limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(ockpt.limits, "memory_available", lambda: available)


@pytest.mark.parametrize(
    "dtype,cast,nbytes",
    [
        (np.float32, "exact", 128),  # read as stored
        (np.float64, "exact", 256),  # read straight into the wider type
        (np.float64, "checked", 384),  # read as stored, then cast: both held at once
        (np.float16, "lossy", 192),
    ],
)
def test_a_load_checks_what_it_allocates(monkeypatch, dtype, cast, nbytes):
    """LIMIT-006: the output of each leaf (and, for a checked or lossy cast, its copy as
    stored) is checked before it is read, naming the param and its array's file."""
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    target = {"xy": np.zeros((8, 4), dtype)}
    _memory(monkeypatch, nbytes)
    got = ockpt.load_pytree(case, target, partial=True, cast=cast, backend="python")
    assert got["xy"].dtype == dtype
    _memory(monkeypatch, nbytes - 1)
    with pytest.raises(ockpt.errors.MemoryLimitError) as info:
        ockpt.load_pytree(case, target, partial=True, cast=cast, backend="python")
    assert_error(info, rule="LIMIT-006", file=str(case / "manifest.ocdbt"))
    assert info.value.message.startswith(f"param 'xy' needs {nbytes} bytes,")


# ---------------------------------------------------------------------------------------------
# More of what a load does: targets, limits, what it asks of the item (issue 34 item 4).


def test_an_object_with_fields_that_is_no_tuple_is_no_namedtuple():
    class Fielded:
        _fields = ("x",)
        x = np.zeros(3, np.int32)

    key = "unicode \u043a\u043b\u044e\u0447"
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {key: Fielded()}, partial=True)
    assert_error(info, rule="LOAD-004", leaf=key)


def test_a_list_subclass_target_comes_back_a_list():
    class Layers(list):
        pass

    got = ockpt.load_pytree(_nested(), {"layers": Layers([..., ...])}, partial=True)
    assert type(got["layers"]) is list and got["layers"] == [..., ...]


def test_empty_nodes_left_out_of_a_full_target_are_not_extra(tmp_path):
    tree = {"x": np.arange(3), "e": {}, "l": [], "n": None}
    ockpt.save_pytree(tmp_path / "c", tree, layout="item")
    got = ockpt.load_pytree(tmp_path / "c", {"x": np.zeros(3, np.int64)})
    assert list(got) == ["x"] and got["x"].tolist() == [0, 1, 2]
    got = ockpt.load_pytree(tmp_path / "c", {"x": ..., "e": None, "l": None, "n": None})
    assert got == {"x": ..., "e": None, "l": None, "n": None}
    with pytest.raises(TargetError) as info:  # an empty container where a leaf is saved
        ockpt.load_pytree(tmp_path / "c", {"x": {}, "e": {}, "l": [], "n": None})
    assert_error(info, rule="LOAD-003", leaf="x")


def test_a_missing_leaf_alone_lists_no_extra():
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {"empty_dict": {"k": ...}}, partial=True)
    assert info.value.message == (
        "target tree does not match the saved tree; missing from the checkpoint: ['empty_dict.k']"
    )
    exp = expected_items(fixture_case("0.12.8", "nested"))[""]
    target = {k: ... for k in exp}
    target["zz"] = ...
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), target)
    assert_error(
        info,
        rule="LOAD-001",
        missing=("zz",),
        extra=(),
        message="target tree does not match the saved tree; missing from the checkpoint: ['zz']",
    )


@pytest.mark.parametrize("dtype", ["U4", "datetime64[s]", "O"])
def test_a_target_type_no_checkpoint_holds_is_a_lossy_cast(dtype):
    key = "unicode \u043a\u043b\u044e\u0447"  # int32 [0, 1, 2]
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(_nested(), {key: np.zeros(3, dtype)}, partial=True)
    assert_error(info, rule="LOAD-020", leaf=key)
    got = ockpt.load_pytree(_nested(), {key: np.zeros(3, dtype)}, partial=True, cast="lossy")
    assert got[key].dtype == np.dtype(dtype)


def test_a_checked_cast_to_the_stored_type_reads_it_as_stored(monkeypatch):
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    target = {"xy": np.zeros((8, 4), np.float32)}
    _memory(monkeypatch, 128)
    for cast in ("checked", "lossy"):
        got = ockpt.load_pytree(case, target, partial=True, cast=cast, backend="python")
        assert got["xy"].dtype == np.float32
    _memory(monkeypatch, 127)
    with pytest.raises(ockpt.errors.MemoryLimitError):
        ockpt.load_pytree(case, target, partial=True, cast="checked", backend="python")


def test_a_load_reads_under_the_limits_given(monkeypatch):
    """Every read of a load is made under the limits the item was opened with, whatever
    limits are in force around the call (`load_pytree` and a lazy checkpoint's `load`)."""
    import ockpt.limits
    from ockpt.engines.python.store import StoredArray as PythonArray

    in_force = []
    original = PythonArray.read_regions

    def record(self, requests, **kw):  # type: ignore[no-untyped-def]
        in_force.append(ockpt.limits.current())
        return original(self, requests, **kw)

    monkeypatch.setattr(PythonArray, "read_regions", record)
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    mine = ockpt.limits.Limits(max_depth=33)
    other = ockpt.limits.Limits(max_depth=34)
    with ockpt.limits.applied(other):
        ockpt.load_pytree(case, {"xy": ...}, partial=True, limits=mine, backend="python")
        ockpt.load_pytree(case, {"x": np.zeros((8, 3), np.int32)}, partial=True, limits=mine)
    assert in_force and set(in_force) == {mine}
    in_force.clear()
    with ockpt.open(case, limits=mine, backend="python") as ckpt:
        with ockpt.limits.applied(other):
            ckpt.load({"x": np.zeros((8, 3), np.int32)}, partial=True)
    assert in_force and set(in_force) == {mine}


def test_what_load_pytree_is_asked_reaches_the_item(monkeypatch):
    from ockpt.reader import load as load_module
    from ockpt.reader.item import OpenedItem

    seen = []

    class Recording(OpenedItem):
        def __init__(self, path, **kw):  # type: ignore[no-untyped-def]
            seen.append((path, kw))
            super().__init__(path, **{**kw, "context": None})

    monkeypatch.setattr(load_module, "OpenedItem", Recording)
    root = fixture_case("0.12.8", "manager") / "checkpoint"
    context, limits = object(), ockpt.limits.Limits()
    got = ockpt.load_pytree(
        root, step=0, item="params", context=context, backend="python", limits=limits
    )
    assert_same(got, expected_items(fixture_case("0.12.8", "manager"))["0/params"])
    ockpt.load_pytree(root)
    assert seen == [
        (
            root,
            {
                "step": 0,
                "item": "params",
                "context": context,
                "backend": "python",
                "limits": limits,
            },
        ),
        (root, {"step": None, "item": None, "context": None, "backend": "auto", "limits": None}),
    ]


def test_a_load_reads_unless_told_to_map(tmp_path):
    path, tree = _raw(tmp_path)
    got = ockpt.load_pytree(path)
    assert got["a"].flags.writeable and np.array_equal(got["a"], tree["a"])
    got = ockpt.load_pytree(path, {"a": np.zeros(4096, np.float32), "b": ...})
    assert got["a"].flags.writeable


def test_an_engine_that_opens_arrays_together(monkeypatch):
    """A backend whose `BULK_OPEN` is true has every array leaf of the load opened in one
    call (not its strings nor its inline values), then reads from those."""
    from ockpt.engines.python.store import ArrayStore as PythonStore

    batches = []
    original = PythonStore.open_many

    def record(self, names):  # type: ignore[no-untyped-def]
        batches.append(list(names))
        return original(self, names)

    monkeypatch.setattr(PythonStore, "BULK_OPEN", True)
    monkeypatch.setattr(PythonStore, "open_many", record)
    case = fixture_case("0.12.8", "scalars_strings")
    want = expected_items(case)[""]
    target = {"int": 0, "str": "", "np_float32": np.float32(0), "bool_true": True}
    got = ockpt.load_pytree(case / "checkpoint", target, partial=True, backend="python")
    assert got == {"int": 42, "str": "hello", "np_float32": want["np_float32"], "bool_true": True}
    assert batches == [["int", "np_float32", "bool_true"]]
    batches.clear()
    assert_same(ockpt.load_pytree(case / "checkpoint", backend="python"), want)
    assert len(batches) == 1 and "str" not in batches[0] and "int" in batches[0]


def test_an_inline_value_loaded_as_a_key(tmp_path, monkeypatch):
    """A `RandomKey` target over key data kept in the msgpack file: the key (a `RandomKey`
    even where jax is loaded); data that is not the implementation's is ARRM-002, named in
    the msgpack file."""
    import msgpack

    from ockpt import _jax

    monkeypatch.setattr(_jax, "jax_loaded", lambda: True)

    def ndarray(a: np.ndarray) -> msgpack.ExtType:
        return msgpack.ExtType(1, msgpack.packb([list(a.shape), a.dtype.name, a.tobytes()]))

    item = tmp_path / "item"
    item.mkdir()
    good, bad = np.array([0, 42], np.uint32), np.arange(3, dtype=np.uint32)
    (item / "checkpoint").write_bytes(msgpack.packb({"k": ndarray(good), "b": ndarray(bad)}))
    target = {"k": ockpt.RandomKey("threefry2x32", np.zeros(2, np.uint32))}
    got = ockpt.load_pytree(item, target, partial=True)["k"]
    assert isinstance(got, ockpt.RandomKey) and got.impl == "threefry2x32"
    assert got.data.tolist() == [0, 42]
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.load_pytree(
            item, {"b": ockpt.RandomKey("threefry2x32", np.zeros(3, np.uint32))}, partial=True
        )
    assert_error(info, rule="ARRM-002", file=str(item / "checkpoint"), pointer="b")


def test_a_stored_key_that_is_not_its_implementations_names_the_array(tmp_path):
    """ARRM-002 on load: a key recorded as `rbg` (4 words) whose array ends in 2 words."""
    item = tmp_path / "item"
    shutil.copytree(fixture_case("0.12.8", "random_keys") / "checkpoint", item)
    record_key_impl(item, "rngs.grid", "rbg")
    with pytest.raises(ockpt.FormatError) as info:
        ockpt.load_pytree(item, backend="python")
    assert_error(info, rule="ARRM-002", file=f"{item}/manifest.ocdbt", pointer="rngs.grid")


def test_a_key_target_over_data_that_is_no_key_data():
    """LOAD-025: a key target where the checkpoint holds float32 names the leaf, the file and
    what the checkpoint holds."""
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    target = {"replicated": ockpt.RandomKey("rbg", np.zeros(4, np.uint32))}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case, target, partial=True)
    assert_error(
        info,
        rule="LOAD-025",
        leaf="replicated",
        file=str(case / "_METADATA"),
        message="a rbg key target needs uint32 key data; the checkpoint holds float32 [6]",
    )


def test_a_key_target_of_an_implementation_the_format_does_not_record(monkeypatch):
    from ockpt import _jax

    marker = object()
    monkeypatch.setattr(
        _jax, "key_target", lambda t: ((2,), "philox4x32", None) if t is marker else None
    )
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    with pytest.raises(ockpt.errors.UnsupportedError) as info:
        ockpt.load_pytree(case, {"xy": marker}, partial=True)
    assert_error(info, rule="ARRM-002", file=str(case / "_METADATA"))
    assert info.value.message.startswith("leaf 'xy': typed PRNG key implementation 'philox4x32'")


def test_a_key_target_placed_so_that_its_data_cannot_follow(monkeypatch):
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from ockpt import _jax

    monkeypatch.setattr(_jax, "key_data_sharding", lambda *args: None)
    case = fixture_case("0.11.9", "random_keys") / "checkpoint"
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("a",))
    key = jax.eval_shape(lambda: jax.random.key(0))
    target = jax.ShapeDtypeStruct((), key.dtype, sharding=NamedSharding(mesh, P()))
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case, {"rngs": {"threefry": target}}, partial=True)
    assert_error(
        info,
        rule="LOAD-025",
        leaf="rngs.threefry",
        file=str(case / "_METADATA"),
        message="a typed-key target placed with NamedSharding (use a NamedSharding or a single "
        "device)",
    )


def test_a_64_bit_jax_target_without_x64_says_why():
    jax = pytest.importorskip("jax")
    case = fixture_case("0.12.8", "numpy_dtypes") / "checkpoint"
    with jax.enable_x64(False):
        wide = {"int64": jax.ShapeDtypeStruct((2, 2, 3), np.int64)}
        with pytest.raises(TargetError) as info:
            ockpt.load_pytree(case, wide, partial=True)
    assert_error(
        info,
        rule="LOAD-024",
        leaf="int64",
        file=str(case / "_METADATA"),
        message="jax would store int64 as int32 (64-bit types need jax_enable_x64); ask for "
        "the narrower dtype explicitly",
    )


def test_a_mismatch_is_refused_before_anything_is_read(monkeypatch):
    """Every leaf a target asks for is checked against its stored array before the first
    read: a bad leaf after a good one reads nothing."""
    from ockpt.engines.python import fastread

    chunks: list[str] = []
    original = fastread._read_chunk
    monkeypatch.setattr(
        fastread,
        "_read_chunk",
        lambda group, index, dests: (
            chunks.append(group.array.param_name) or original(group, index, dests)
        ),
    )
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    target = {"x": np.zeros((8, 3), np.int32), "yx": np.zeros((2, 8), np.int8)}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case, target, partial=True, backend="python")
    assert_error(info, rule="LOAD-020", leaf="yx")
    assert chunks == []
    target = {"x": np.zeros((8, 3), np.int32), "yx": np.zeros((3, 8), np.float32)}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case, target, partial=True, backend="python", max_in_flight=1)
    assert_error(info, rule="LOAD-030", leaf="yx")
    assert chunks == []


def test_a_random_key_target_is_a_random_key_where_jax_is_loaded(monkeypatch):
    from ockpt import _jax

    monkeypatch.setattr(_jax, "jax_loaded", lambda: True)
    case = fixture_case("0.11.9", "random_keys") / "checkpoint"
    target = {"rngs": {"rbg": ockpt.RandomKey("rbg", np.zeros(4, np.uint32))}}
    got = ockpt.load_pytree(case, target, partial=True, backend="python")["rngs"]["rbg"]
    assert isinstance(got, ockpt.RandomKey) and got.impl == "rbg"
    assert_same(got, expected_items(fixture_case("0.11.9", "random_keys"))[""]["rngs"]["rbg"])


def test_a_sharded_load_checks_the_shards_it_reads(monkeypatch):
    """LIMIT-006 for a jax target: the cells of the boxes this process reads (each once),
    not the whole array's nor the boxes' far corners."""
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if len(jax.devices()) < 2:
        pytest.skip("needs two devices")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("a",))
    case = fixture_case("0.12.8", "sharded") / "checkpoint"
    split = {"x": jax.ShapeDtypeStruct((8, 3), np.int32, sharding=NamedSharding(mesh, P("a")))}
    whole = {"x": jax.ShapeDtypeStruct((8, 3), np.int32, sharding=NamedSharding(mesh, P()))}
    want = expected_items(fixture_case("0.12.8", "sharded"))[""]["x"]
    for target in (split, whole):  # two boxes of 12 cells; one box of 24 read once
        _memory(monkeypatch, 96)
        got = ockpt.load_pytree(case, target, partial=True, backend="python")
        assert np.array_equal(np.asarray(got["x"]), want)
        _memory(monkeypatch, 95)
        with pytest.raises(ockpt.errors.MemoryLimitError) as info:
            ockpt.load_pytree(case, target, partial=True, backend="python")
        assert info.value.message.startswith("param 'x' needs 96 bytes,")


def test_a_key_target_of_another_implementation_is_refused():
    """LOAD-025: the checkpoint records threefry2x32 keys; a `RandomKey` target of rbg keys is
    refused naming both, the leaf and the file (no jax needed)."""
    case = fixture_case("0.11.9", "random_keys") / "checkpoint"
    target = {"rngs": {"threefry": ockpt.RandomKey("rbg", np.zeros(4, np.uint32))}}
    with pytest.raises(TargetError) as info:
        ockpt.load_pytree(case, target, partial=True, backend="python")
    assert_error(
        info,
        rule="LOAD-025",
        leaf="rngs.threefry",
        file=str(case / "_METADATA"),
        message="the checkpoint holds threefry2x32 keys; the target asks for rbg keys",
    )
