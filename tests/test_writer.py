"""The reference writer: every option restored exactly by real Orbax 0.12.8 and by ockpt's
reader; atomic commit and overwrite; bad input refused with nothing left behind; async saves.

Orbax is imported here only, never by ockpt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")
jax = pytest.importorskip("jax")

import orbax.checkpoint as ocp  # noqa: E402
import tensorstore as ts  # noqa: E402

import ockpt  # noqa: E402
from ockpt import _zarr_write  # noqa: E402
from ockpt.names import TMP_MARKER  # noqa: E402
from ockpt.store import commit  # noqa: E402
from ockpt.writer import save_pytree, save_pytree_async  # noqa: E402
from tests.support.errors import assert_error  # noqa: E402

P = jax.sharding.PartitionSpec


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))


def _sharded(value, *spec):
    return jax.device_put(value, jax.sharding.NamedSharding(_mesh(), P(*spec)))


class Point(NamedTuple):
    x: np.ndarray
    y: float


def _tree():
    """Every leaf kind, tiny."""
    rng = np.random.default_rng(5)
    return {
        "f32": rng.standard_normal((4, 6)).astype(np.float32),
        "fortran": np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
        "bf16": np.array([1.5, -0.0, np.inf], dtype=ml_dtypes.bfloat16),
        "f8": np.array([0.5, -2.0], dtype=ml_dtypes.float8_e5m2),
        "i4": np.array([[-8, 7], [0, 1]], dtype=ml_dtypes.int4),
        "u8": np.arange(5, dtype=np.uint8),
        "c64": np.array([1 + 2j], dtype=np.complex64),
        "zero_d": np.array(3.25),
        "jax": {
            "xy": _sharded(np.arange(32, dtype=np.float32).reshape(8, 4), "x", "y"),
            "rep": _sharded(np.arange(8, dtype=np.int32), None),
            "one": jax.device_put(np.arange(5, dtype=np.float32), jax.devices()[3]),
        },
        "scalars": [
            7,
            -2.5,
            True,
            np.int16(-3),
            np.float32(0.75),
            np.bool_(True),
            ml_dtypes.bfloat16(1.5),
        ],
        "text": {"s": "héllo", "empty": ""},
        "point": Point(np.ones(2, np.float32), 4.0),
        "nothing": None,
        "empty": ({}, [], ()),
    }


def _to_abstract(tree):
    return jax.tree_util.tree_map(
        lambda x: (
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if isinstance(x, jax.Array)
            else x
        ),
        tree,
    )


def _restore_args(x):
    if isinstance(x, jax.Array):
        return ocp.ArrayRestoreArgs(sharding=x.sharding)
    if isinstance(x, np.ndarray):
        return ocp.RestoreArgs(restore_type=np.ndarray)
    return ocp.RestoreArgs()


def _orbax_restore_item(path, target):
    return ocp.PyTreeCheckpointer().restore(
        path,
        args=ocp.args.PyTreeRestore(
            item=target, restore_args=jax.tree_util.tree_map(_restore_args, target)
        ),
    )


def _assert_same(expected, got, path="", *, cast=None):
    """Values, dtypes and structure equal (bit for bit; numpy scalars may come back as Python
    scalars of the same value)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), path
        assert set(got) == set(expected), path
        for k in expected:
            _assert_same(expected[k], got[k], f"{path}/{k}", cast=cast)
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected), (path, type(got))
        assert len(got) == len(expected), path
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            _assert_same(e, g, f"{path}/{i}", cast=cast)
    elif expected is None:
        assert got is None, path
    elif isinstance(expected, str):
        assert got == expected and type(got) is str, path
    elif isinstance(expected, (jax.Array, np.ndarray)):
        want = np.asarray(expected)
        if cast is not None and path in cast:
            want = want.astype(cast[path])
        host = np.asarray(got)
        assert host.dtype == want.dtype and host.shape == want.shape, (path, host.dtype)
        assert host.tobytes() == want.tobytes(), path
        if isinstance(expected, jax.Array):
            assert isinstance(got, jax.Array), path
            assert got.sharding.is_equivalent_to(expected.sharding, expected.ndim), path
    else:
        assert np.asarray(got).item() == np.asarray(expected).item(), path
        if isinstance(expected, (bool, int, float)):
            assert type(np.asarray(got).item()) is type(expected), path


# ---------------------------------------------------------------------------------------------
# The option matrix: each option restored by Orbax (with a target) and by ockpt's reader.

OPTIONS = {
    "default-item": dict(layout="item"),
    "no-ocdbt": dict(layout="item", use_ocdbt=False),
    "zarr3": dict(layout="item", zarr_version=3),
    "no-compression-v2": dict(layout="item", compression=None),
    "no-compression-v3": dict(layout="item", zarr_version=3, compression=None),
    "zstd-level": dict(layout="item", compression_level=9),
    "chunks-v2": dict(layout="item", chunk_byte_size=16),
    "chunks-v3": dict(layout="item", zarr_version=3, chunk_byte_size=16),
    "chunks-no-ocdbt": dict(layout="item", use_ocdbt=False, chunk_byte_size=16),
    "v1": dict(),
    "v1-zarr2": dict(zarr_version=2),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_option_matrix(name, tmp_path):
    opts = OPTIONS[name]
    tree = _tree()
    path = tmp_path / "ckpt"
    save_pytree(path, tree, **opts)
    item = path if opts.get("layout") == "item" else path / "state"
    if opts.get("layout") == "item":
        got = _orbax_restore_item(path, tree)
    else:
        got = ocp.v1.load_pytree(path, _to_abstract(tree))
    _assert_same(tree, got)
    _assert_same(tree, ockpt.load_pytree(path, tree))
    meta = json.loads((item / "_METADATA").read_text())
    assert meta["use_ocdbt"] is opts.get("use_ocdbt", True)
    assert meta["use_zarr3"] is (opts.get("zarr_version", 3 if "layout" not in opts else 2) == 3)
    assert os.listdir(tmp_path) == ["ckpt"]


def _zarr_meta(item: Path, name: str, *, ocdbt: bool = True) -> dict:
    if ocdbt:
        kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{item}/"}).result()
        for key in (f"{name}/.zarray", f"{name}/zarr.json"):
            r = kv.read(key).result()
            if r.state == "value":
                return json.loads(bytes(r.value))
        raise KeyError(name)
    for key in (".zarray", "zarr.json"):
        if (item / name / key).exists():
            return json.loads((item / name / key).read_text())
    raise KeyError(name)


def test_zarr_metadata_as_orbax_writes(tmp_path):
    """WRITE-011 (.zarray), WRITE-012 (zarr.json), WRITE-013 (all-zero chunks are stored)."""
    tree = {"a": np.zeros((2, 3), np.float32), "j": _sharded(np.zeros((8, 4), np.float32), "x")}
    save_pytree(tmp_path / "v2", tree, layout="item")
    assert _zarr_meta(tmp_path / "v2", "a") == {
        "chunks": [2, 3],
        "compressor": {"id": "zstd", "level": 1},
        "dimension_separator": ".",
        "dtype": "<f4",
        "fill_value": None,
        "filters": None,
        "order": "C",
        "shape": [2, 3],
        "zarr_format": 2,
    }
    assert _zarr_meta(tmp_path / "v2", "j")["chunks"] == [2, 4]
    kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{tmp_path / 'v2'}/"}).result()
    keys = {k.decode() for k in kv.list().result()}
    assert {"a/0.0", "j/0.0", "j/3.0"} <= keys  # zeros, yet stored
    meta = json.loads((tmp_path / "v2" / "_METADATA").read_text())
    assert meta["store_array_data_equal_to_fill_value"] is True
    save_pytree(tmp_path / "v3", tree, layout="item", zarr_version=3)
    meta = _zarr_meta(tmp_path / "v3", "j")
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [2, 4]
    (codec,) = meta["codecs"]
    assert codec["name"] == "sharding_indexed"
    assert codec["configuration"]["chunk_shape"] == [2, 4]
    assert codec["configuration"]["codecs"][1] == {
        "name": "zstd",
        "configuration": {"level": 3, "checksum": False},
    }


def test_chunk_byte_size_splits_chunks(tmp_path):
    """WRITE-010: chunks of at most chunk_byte_size, on slice edges."""
    tree = {"a": np.arange(64, dtype=np.float32).reshape(8, 8)}
    save_pytree(tmp_path / "c", tree, layout="item", chunk_byte_size=64)
    meta = _zarr_meta(tmp_path / "c", "a")
    assert np.prod(meta["chunks"]) * 4 <= 64
    assert all(8 % c == 0 for c in meta["chunks"])
    _assert_same(tree, _orbax_restore_item(tmp_path / "c", tree))


def test_chunk_shape_for():
    """WRITE-010: the largest dimension first (the sharded ones before the others), to the
    next smaller divisor of the slice (tests/test_chunkwrite.py: against Orbax)."""
    assert _zarr_write.chunk_shape_for((8, 4), 4, None) == (8, 4)
    assert _zarr_write.chunk_shape_for((8, 4), 4, 1 << 20) == (8, 4)
    assert _zarr_write.chunk_shape_for((8, 4), 4, 32) == (2, 4)
    assert _zarr_write.chunk_shape_for((9, 4), 4, 16) == (1, 2)
    assert _zarr_write.chunk_shape_for((12,), 4, 16) == (4,)
    assert _zarr_write.chunk_shape_for((4, 6), 4, 32, array_shape=(16, 6)) == (1, 6)
    assert _zarr_write.chunk_shape_for((7,), 8, 8) == (1,)
    assert _zarr_write.chunk_shape_for((), 8, 8) == ()
    with pytest.raises(ValueError, match="WRITE-010"):
        _zarr_write.chunk_shape_for((7,), 8, 1)  # below one element: Orbax refuses it too


def test_default_chunk_limit():
    """WRITE-016: without a limit, slices over 64 MiB are divided to 64 MiB, unless the
    factors would leave chunks under 1 MiB."""
    assert _zarr_write.chunk_shape_for((4096, 4096), 4, None) == (4096, 4096)  # exactly 64 MiB
    assert _zarr_write.chunk_shape_for((262144, 4096), 4, None) == (4096, 4096)
    assert _zarr_write.chunk_shape_for((3, 4096, 4096), 2, None) == (3, 2048, 4096)
    assert _zarr_write.chunk_shape_for((1000003, 64), 4, None) == (1000003, 64)  # prime: whole
    huge = 1 << 40  # a caller's limit above the slice keeps one chunk per slice, as Orbax
    assert _zarr_write.chunk_shape_for((262144, 4096), 4, huge) == (262144, 4096)


def _ocdbt_values(path: Path) -> dict:
    from ockpt.ocdbt import Database

    out = {}
    for manifest in path.rglob("manifest.ocdbt"):
        if "ocdbt.process_" not in str(manifest.parent):
            db = Database(manifest.parent)
            out.update({k: db.get(k) for k in db.list("")})
    return out


def _files(path: Path) -> dict:
    """relative path -> bytes of every file of a zarr directory tree (no OCDBT)."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): p.read_bytes() for p in files}


def _one_shard_per_slice(write_shape, chunk_shape, chunk_byte_size):
    """zarr v3 shards of a whole slice, several inner chunks each (edge shards then have inner
    chunks wholly outside the array): valid zarr that ockpt 0.1.0 wrote."""
    return tuple(write_shape)


@pytest.mark.parametrize(
    "options",
    [{}, {"chunk_byte_size": 64}, {"compression": None}, {"zarr_version": 2},
     {"zarr_version": 2, "chunk_byte_size": 100}, {"chunk_byte_size": 64, "shards": "slice"},
     {"use_ocdbt": False}, {"use_ocdbt": False, "zarr_version": 2, "chunk_byte_size": 64}],
)  # fmt: skip
def test_own_encoders_equal_tensorstore_drivers(tmp_path, monkeypatch, options):
    """Every value ockpt stores (zarr metadata, chunks, zarr v3 shards, in OCDBT or as files)
    is byte for byte what tensorstore's zarr drivers store for the same arrays (WRITE-011,
    WRITE-012, WRITE-013): edge chunks, 0-d arrays, bfloat16 and int4, shards with inner chunks
    outside the array; and ockpt's merge reads tensorstore's per-process databases."""
    from tests.support import ts_writer

    options = dict(options)
    if options.pop("shards", None) == "slice":
        monkeypatch.setattr(_zarr_write, "shard_shape_for", _one_shard_per_slice)
    rng = np.random.default_rng(0)
    tree = {
        "w": jax.device_put(
            rng.standard_normal((64, 48)).astype(np.float32),
            jax.sharding.NamedSharding(_mesh(), P("x", "y")),
        ),
        "odd": rng.integers(0, 1000, (37, 11)).astype(np.int32),
        "v": rng.standard_normal(130),
        "b": np.array([True, False] * 8),
        "c": (rng.standard_normal(9) + 1j).astype(np.complex64),
        "u": np.arange(100, dtype=np.uint16).reshape(10, 10),
        "bf16": rng.standard_normal((5, 7)).astype(ml_dtypes.bfloat16),
        "i4": np.arange(-8, 8, dtype=ml_dtypes.int4).reshape(4, 4),
        "scalar": np.float32(2.5),
        "zero_d": np.array(7, dtype=np.int64),
        "big": rng.standard_normal(3000).astype(np.float32),  # out of line: over 1024 bytes
    }
    save_pytree(tmp_path / "native", tree, **options)
    monkeypatch.setattr(_zarr_write, "write_arrays", ts_writer.write_arrays)
    save_pytree(tmp_path / "tensorstore", tree, **options)
    if options.get("use_ocdbt", True):
        native = _ocdbt_values(tmp_path / "native")
        assert len(native) >= 20 and native == _ocdbt_values(tmp_path / "tensorstore")
    else:
        native = {k: v for k, v in _files(tmp_path / "native").items() if "/" in k}
        theirs = {k: v for k, v in _files(tmp_path / "tensorstore").items() if "/" in k}
        assert len(native) >= 20 and native == theirs


@pytest.mark.parametrize("zarr_version", [2, 3])
def test_large_array_is_chunked_and_orbax_restores_it(tmp_path, monkeypatch, zarr_version):
    """A slice over the default limit is written in several chunks (here with the limit
    lowered to 1 MiB so the test stays small) that real Orbax restores bit-equal."""
    monkeypatch.setattr(_zarr_write, "DEFAULT_MAX_CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(_zarr_write, "MIN_DEFAULT_CHUNK_BYTES", 1 << 16)
    tree = {"w": np.random.default_rng(1).standard_normal((1024, 1000)).astype(np.float32)}
    save_pytree(tmp_path / "c", tree, layout="item", zarr_version=zarr_version)
    meta = _zarr_meta(tmp_path / "c", "w")
    if zarr_version == 2:
        assert meta["chunks"] == [512, 500]
    else:  # the divided shape is the shard and its one inner chunk
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [512, 500]
        assert meta["codecs"][0]["configuration"]["chunk_shape"] == [512, 500]
    _assert_same(tree, _orbax_restore_item(tmp_path / "c", tree))
    got = ockpt.load_pytree(tmp_path / "c", backend="python")
    np.testing.assert_array_equal(got["w"], tree["w"])


def test_compression_none_and_level(tmp_path):
    tree = {"a": np.zeros((16,), np.int64)}
    save_pytree(tmp_path / "none", tree, layout="item", compression=None)
    assert _zarr_meta(tmp_path / "none", "a")["compressor"] is None
    save_pytree(tmp_path / "lvl", tree, layout="item", compression_level=7)
    assert _zarr_meta(tmp_path / "lvl", "a")["compressor"] == {"id": "zstd", "level": 7}
    save_pytree(tmp_path / "v3", tree, layout="item", zarr_version=3, compression=None)
    (codec,) = _zarr_meta(tmp_path / "v3", "a")["codecs"]
    assert [c["name"] for c in codec["configuration"]["codecs"]] == ["bytes"]


def test_storage_dtypes(tmp_path):
    tree = {
        "w": np.array([1.0, 2.5, -3.0], np.float32),
        "j": _sharded(np.arange(8, dtype=np.float32), "x"),
        "keep": np.array([1.0], np.float32),
    }
    cast = {"w": ml_dtypes.bfloat16, "j": np.float16}
    save_pytree(tmp_path / "c", tree, layout="item", storage_dtypes=cast)
    assert _zarr_meta(tmp_path / "c", "w")["dtype"] == "bfloat16"
    assert _zarr_meta(tmp_path / "c", "j")["dtype"] == "<f2"
    got = ocp.PyTreeCheckpointer().restore(tmp_path / "c")
    assert got["w"].dtype == ml_dtypes.bfloat16 and got["j"].dtype == np.float16
    _assert_same(tree, got, cast={"/w": ml_dtypes.bfloat16, "/j": np.float16})
    # a callable picks per leaf
    save_pytree(
        tmp_path / "f",
        tree,
        layout="item",
        storage_dtypes=lambda name, dt: np.float16 if name == "keep" else None,
    )
    assert _zarr_meta(tmp_path / "f", "keep")["dtype"] == "<f2"
    with pytest.raises(ValueError, match="nope"):
        save_pytree(tmp_path / "bad", tree, storage_dtypes={"nope": np.float16})
    assert not (tmp_path / "bad").exists()


def test_custom_metadata(tmp_path):
    custom = {"note": "ockpt", "n": [1, 2]}
    save_pytree(tmp_path / "item", {"a": np.ones(2)}, layout="item", custom_metadata=custom)
    doc = ockpt.CheckpointMetadata.read(tmp_path / "item" / "_CHECKPOINT_METADATA")
    assert doc.custom_metadata == custom
    save_pytree(tmp_path / "v1", {"a": np.ones(2)}, custom_metadata=custom)
    assert ocp.v1.checkpointables_metadata(tmp_path / "v1").custom_metadata == custom
    with pytest.raises(ValueError):
        save_pytree(tmp_path / "nan", {"a": 1}, custom_metadata={"x": float("nan")})
    assert not (tmp_path / "nan").exists()


def test_custom_pytree_node(tmp_path):
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    jax.tree_util.register_pytree_with_keys(
        Pair,
        lambda p: (
            ((jax.tree_util.GetAttrKey("a"), p.a), (jax.tree_util.GetAttrKey("b"), p.b)),
            None,
        ),
        lambda _, c: Pair(*c),
    )

    class Keyless:
        def __init__(self, items):
            self.items = items

    jax.tree_util.register_pytree_node(
        Keyless, lambda k: (tuple(k.items), None), lambda _, c: Keyless(list(c))
    )
    tree = {"p": Pair(np.arange(3.0), {"c": 2}), "k": Keyless([np.ones(2, np.int32), "s"])}
    save_pytree(tmp_path / "c", tree, layout="item")
    meta = ockpt.MetadataDocument.read(tmp_path / "c" / "_METADATA")
    keys = {e.tree_key: [int(k.key_type) for k in e.path] for e in meta.entries}
    assert keys == {
        "('k', '0')": [2, 1],
        "('k', '1')": [2, 1],
        "('p', 'a')": [2, 2],
        "('p', 'b', 'c')": [2, 2, 2],
    }
    got = _orbax_restore_item(tmp_path / "c", tree)
    assert isinstance(got["p"], Pair) and isinstance(got["k"], Keyless)
    np.testing.assert_array_equal(got["p"].a, tree["p"].a)
    assert got["p"].b == {"c": 2} and got["k"].items[1] == "s"
    np.testing.assert_array_equal(got["k"].items[0], tree["k"].items[0])
    got = ockpt.load_pytree(tmp_path / "c", tree)
    assert isinstance(got["p"], Pair) and got["k"].items[1] == "s"


def test_bare_leaf(tmp_path):
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    save_pytree(tmp_path / "c", value)
    got = ocp.v1.load_pytree(tmp_path / "c")
    np.testing.assert_array_equal(got, value)
    np.testing.assert_array_equal(ockpt.load_pytree(tmp_path / "c"), value)


def test_only_strings_and_empty(tmp_path):
    tree = {"s": "x", "n": None, "e": {}}
    save_pytree(tmp_path / "c", tree, layout="item")
    assert not (tmp_path / "c" / "manifest.ocdbt").exists()
    assert ocp.PyTreeCheckpointer().restore(tmp_path / "c") == tree
    assert ockpt.load_pytree(tmp_path / "c") == tree


def test_written_documents(tmp_path):
    """WRITE-020 (_METADATA), WRITE-021 (_sharding), WRITE-022 (array_metadatas),
    WRITE-023 (_CHECKPOINT_METADATA), and the commit marker's text (DIR-004)."""
    save_pytree(tmp_path / "c", _tree(), layout="item")
    item = tmp_path / "c"
    sharding = ockpt.ShardingDocument.read(item / "_sharding").shardings
    assert set(sharding) == {"jax.xy", "jax.rep", "jax.one"}
    assert sharding["jax.xy"].partition_spec == ("x", "y")
    assert sharding["jax.one"].device_str == str(jax.devices()[3])
    arrays = ockpt.ArrayMetadatas.read(item / "array_metadatas" / "process_0").by_param_name()
    assert arrays["jax.xy"].write_shape == (2, 2)
    strings = ockpt.StringsDocument.read(item / "_strings.json")
    assert strings.get("text.s") == "héllo"
    doc = ockpt.CheckpointMetadata.read(item / "_CHECKPOINT_METADATA")
    assert doc.commit_timestamp_nsecs >= doc.init_timestamp_nsecs
    assert (item / "commit_success.txt").read_text() == commit.commit_text(str(item))
    layout = ockpt.detect(item)
    assert layout.kind == ockpt.Kind.PYTREE_ITEM
    meta = ockpt.MetadataDocument.read(item / "_METADATA")
    by_key = {e.tree_key: e.value for e in meta.entries}
    assert by_key["('jax', 'xy')"].write_shape == (2, 2)
    assert by_key["('nothing',)"].value_type == "None" and by_key["('nothing',)"].skip_deserialize
    assert by_key["('empty', '2')"].value_type == "Tuple"
    assert by_key["('scalars', '0')"].value_type == "scalar"
    assert by_key["('f32',)"].value_type == "np.ndarray"
    assert doc.item_handlers == ockpt.writer.PYTREE_HANDLER
    assert doc.metrics == {} and doc.custom_metadata == {}


def test_ocdbt_configuration(tmp_path):
    """WRITE-014: per-process database with Orbax's config, merged into a one-version root whose
    entries point into ocdbt.process_0/d/."""
    save_pytree(tmp_path / "c", {"big": np.arange(4096, dtype=np.float32)}, layout="item")
    item = tmp_path / "c"
    for base in (item, item / "ocdbt.process_0"):
        dump = ts.ocdbt.dump(ts.KvStore.open(f"file://{base}/").result()).result()
        config = dump["config"]
        assert config["max_inline_value_bytes"] == 1024
        assert config["max_decoded_node_bytes"] == 100_000_000
        assert config["compression"] == {"id": "zstd"}
    root = ts.ocdbt.dump(ts.KvStore.open(f"file://{item}/").result()).result()
    assert len(root["versions"]) == 1
    node = ts.ocdbt.dump(
        ts.KvStore.open(f"file://{item}/").result(), root["versions"][0]["root"]["location"]
    ).result()
    refs = [e["indirect_value"] for e in node["entries"] if "indirect_value" in e]
    assert refs and all("ocdbt.process_0/" in r for r in refs)
    assert len(os.listdir(item / "d")) == 1  # only the root's B+tree node


def test_replicas_written_once(tmp_path):
    """A replicated array: one chunk, written once (WRITE-030)."""
    tree = {"rep": _sharded(np.arange(8, dtype=np.float32), None)}
    save_pytree(tmp_path / "c", tree, layout="item", use_ocdbt=False)
    chunks = sorted(p.name for p in (tmp_path / "c" / "rep").iterdir())
    assert chunks == [".zarray", "0"]


# ---------------------------------------------------------------------------------------------
# Atomic commit, overwrite, failures


def test_existing_checkpoint_refused_then_overwritten(tmp_path):
    path = tmp_path / "c"
    save_pytree(path, {"a": np.ones(2)}, layout="item")
    with pytest.raises(ockpt.WriteConflictError) as info:
        save_pytree(path, {"a": np.zeros(2)}, layout="item")
    assert_error(info, rule="DIR-002", file=str(path))
    np.testing.assert_array_equal(ockpt.load_pytree(path)["a"], np.ones(2))
    save_pytree(path, {"b": np.zeros(3)}, layout="item", overwrite=True)
    assert set(ocp.PyTreeCheckpointer().restore(path)) == {"b"}
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_failed_save_leaves_earlier_state(tmp_path, monkeypatch):
    path = tmp_path / "c"
    save_pytree(path, {"a": np.ones(2)}, layout="item")
    before = sorted(str(p.relative_to(path)) for p in path.rglob("*"))

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_zarr_write, "write_arrays", boom)
    with pytest.raises(OSError, match="disk full"):
        save_pytree(path, {"a": np.zeros(2)}, layout="item", overwrite=True)
    with pytest.raises(OSError, match="disk full"):
        save_pytree(tmp_path / "new", {"a": np.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == ["c"]
    assert sorted(str(p.relative_to(path)) for p in path.rglob("*")) == before
    monkeypatch.undo()
    np.testing.assert_array_equal(ockpt.load_pytree(path)["a"], np.ones(2))


def test_failed_commit_leaves_no_committed_directory(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("merge failed")

    monkeypatch.setattr(_zarr_write, "merge_databases", boom)
    with pytest.raises(OSError, match="merge failed"):
        save_pytree(tmp_path / "c", {"a": np.ones(2)})
    assert os.listdir(tmp_path) == []


def test_leftover_temporary_directories(tmp_path):
    """DIR-003: another writer's temporary directory (Orbax's fixed name) is never touched;
    one of an ockpt save that has ended (its lock free) is removed by the next save to that
    path; one of a save still running (its lock held) is not."""
    foreign = tmp_path / ("c" + TMP_MARKER)
    ended = tmp_path / os.path.basename(commit.temporary_name(str(tmp_path / "c"), 1))
    foreign.mkdir()
    ended.mkdir()
    save_pytree(tmp_path / "c", {"a": 1})
    assert sorted(os.listdir(tmp_path)) == sorted(["c", foreign.name])
    save_pytree(tmp_path / "c", {"a": 2}, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == sorted(["c", foreign.name])
    running = commit.begin(tmp_path / "d")
    save_pytree(tmp_path / "d", {"a": 3})
    assert os.path.isdir(running.tmp)  # still there: its save goes on
    with pytest.raises(ockpt.WriteConflictError) as info:
        commit.finish(running)  # d was committed meanwhile
    assert_error(info, rule="DIR-002", file=str(tmp_path / "d"))
    commit.abort(running)
    assert sorted(os.listdir(tmp_path)) == sorted(["c", "d", foreign.name])
    assert ockpt.load_pytree(tmp_path / "d")["a"] == 3


def test_temporary_directory_is_not_a_checkpoint(tmp_path, monkeypatch):
    """DIR-004: everything is written under the temporary name, the marker last; while writing,
    the only directory is the temporary one, which readers refuse."""
    from ockpt.store import LocalStore

    seen = {}
    written: list[str] = []
    real = commit.finish
    real_set, real_writer = LocalStore.set, LocalStore.writer

    def spy(pending, **kw):
        seen["listing"] = sorted(os.listdir(tmp_path))
        seen["kind"] = ockpt.detect(pending.tmp).kind
        seen["files"] = sorted(os.listdir(pending.tmp))
        real(pending, **kw)

    def spy_set(self, key, value):
        written.append(key)
        return real_set(self, key, value)

    def spy_writer(self, key, **kw):
        written.append(key)
        return real_writer(self, key, **kw)

    monkeypatch.setattr(commit, "finish", spy)
    monkeypatch.setattr(LocalStore, "set", spy_set)
    monkeypatch.setattr(LocalStore, "writer", spy_writer)
    save_pytree(tmp_path / "c", {"a": np.ones(2)})
    (listed,) = seen["listing"]
    assert listed.startswith("c" + TMP_MARKER)
    assert seen["kind"] == ockpt.Kind.TEMPORARY
    assert written[-1] == "commit_success.txt" and written.count("commit_success.txt") == 1
    assert {"_CHECKPOINT_METADATA", "orbax.checkpoint", "state"} <= set(seen["files"])
    assert sorted(os.listdir(tmp_path)) == ["c"]


# ---------------------------------------------------------------------------------------------
# Bad input: a clear error naming the leaf, nothing left behind


class Opaque:
    pass


BAD_TREES = {
    "unsupported-leaf": ({"a": {"b": Opaque()}}, "WRITE-001", "a.b"),
    "python-complex": ({"z": 1 + 2j}, "WRITE-001", "z"),
    "huge-int": ({"n": 1 << 70}, "WRITE-002", "n"),
    "zero-size": ({"e": np.zeros((0, 3))}, "WRITE-003", "e"),
    "object-array": ({"o": np.array([object()])}, "WRITE-001", "o"),
    "collision-dot": ({"a.b": np.ones(1), "a": {"b": np.ones(1)}}, "PATH-001", "a.b"),
    "collision-slash": ({"a": np.ones(1), "a/b": "s"}, "PATH-001", "a/b"),
    "tilde-string": ({"x~y": "s"}, "PATH-002", "x~y"),
    "dotdot": ({"..": np.ones(1)}, "WRITE-004", ".."),
    # in the dtype table, but tensorstore cannot write them: refused before anything is written
    "uint4": ({"u": np.zeros(3, ml_dtypes.uint4)}, "WRITE-001", "u"),
    "float6": ({"f": np.zeros(3, ml_dtypes.float6_e2m3fn)}, "WRITE-001", "f"),
}


@pytest.mark.parametrize("case", sorted(BAD_TREES))
@pytest.mark.parametrize("layout", ["item", "v1"])
def test_bad_input_refused(case, layout, tmp_path):
    tree, rule, name = BAD_TREES[case]
    with pytest.raises(ockpt.FormatError) as info:
        save_pytree(tmp_path / "c", tree, layout=layout)
    assert_error(info, rule=rule, pointer=name)
    assert os.listdir(tmp_path) == []


def test_path_is_a_file(tmp_path):
    (tmp_path / "c").write_text("not a checkpoint")
    for overwrite in (False, True):
        with pytest.raises(ockpt.FormatError) as info:
            save_pytree(tmp_path / "c", {"a": 1}, overwrite=overwrite)
        assert info.value.rule == "DIR-001"
    assert os.listdir(tmp_path) == ["c"]
    assert (tmp_path / "c").read_text() == "not a checkpoint"


def test_parent_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises((ockpt.FormatError, OSError)):
        save_pytree(tmp_path / "f" / "c", {"a": 1})
    assert os.listdir(tmp_path) == ["f"]


def test_no_write_permission_simulated(tmp_path, monkeypatch):
    """The mkdir failure, simulated (tests/hostile/test_permissions.py has the kernel's own, run as an
    unprivileged user)."""

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(commit.os, "mkdir", denied)
    with pytest.raises(ockpt.FormatError) as info:
        save_pytree(tmp_path / "c", {"a": 1})
    assert_error(info, rule="DIR-001", file=str(tmp_path / "c"))
    assert "Permission denied" in info.value.message
    assert os.listdir(tmp_path) == []


def test_bad_options(tmp_path):
    for kw in (
        dict(zarr_version=4),
        dict(compression="gzip"),
        dict(compression=None, compression_level=3),
        dict(chunk_byte_size=0),
        dict(layout="v2"),
    ):
        with pytest.raises(ValueError):
            save_pytree(tmp_path / "c", {"a": 1}, **kw)
    with pytest.raises(TypeError):
        save_pytree(tmp_path / "c", {"a": 1}, True)  # options are keyword-only
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Async


def test_async_copies_before_returning(tmp_path):
    """WRITE-040: values are on the host when save_pytree_async returns."""
    w = np.arange(6, dtype=np.float32)
    j = _sharded(np.arange(8, dtype=np.float32), "x")
    expected = {"w": w.copy(), "j": np.asarray(j).copy()}
    handle = save_pytree_async(tmp_path / "c", {"w": w, "j": j}, layout="item")
    w[:] = -1  # training goes on at once
    handle.result(timeout=60)
    assert handle.done()
    got = ocp.PyTreeCheckpointer().restore(tmp_path / "c")
    np.testing.assert_array_equal(got["w"], expected["w"])
    np.testing.assert_array_equal(np.asarray(got["j"]), expected["j"])


def test_async_errors(tmp_path, monkeypatch):
    save_pytree(tmp_path / "c", {"a": 1})
    with pytest.raises(ockpt.WriteConflictError):  # raised at once, before any copy
        save_pytree_async(tmp_path / "c", {"a": 1})
    with pytest.raises(ockpt.FormatError):
        save_pytree_async(tmp_path / "d", {"a": Opaque()})

    def boom(*args, **kwargs):
        raise OSError("late failure")

    monkeypatch.setattr(_zarr_write, "write_arrays", boom)
    handle = save_pytree_async(tmp_path / "e", {"a": np.ones(2)})
    with pytest.raises(OSError, match="late failure"):
        handle.result(timeout=60)
    assert sorted(os.listdir(tmp_path)) == ["c"]
    with pytest.raises(TypeError):
        save_pytree_async(tmp_path / "f", {"a": 1}, bogus=1)


def test_numpy_only_save_does_not_import_jax(tmp_path):
    """A numpy-only save runs without jax (ockpt never imports jax or orbax on its own)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ockpt\n"
        f"ockpt.save_pytree({str(tmp_path / 'c')!r}, {{'a': np.arange(3), 's': 'x', 'n': 1}},"
        " layout='item')\n"
        "assert 'jax' not in sys.modules and 'orbax' not in sys.modules, 'jax imported'\n"
        f"print(ockpt.load_pytree({str(tmp_path / 'c')!r}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "reference"))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = ocp.PyTreeCheckpointer().restore(tmp_path / "c")
    np.testing.assert_array_equal(got["a"], np.arange(3))
    assert got["s"] == "x" and got["n"] == 1


@pytest.mark.parametrize("name", ["default-item", "no-ocdbt", "chunks-v3", "v1"])
def test_output_validates_without_findings(name, tmp_path):
    """A conforming writer's output has no findings at all (overview §3.2), deep included."""
    validate = getattr(ockpt, "validate", None)
    if validate is None:
        pytest.skip("ockpt.validate not available")
    save_pytree(tmp_path / "c", _tree(), **OPTIONS[name])
    report = validate(tmp_path / "c", deep=True)
    assert [(f.rule, f.file, f.message) for f in report.findings] == []
