"""The pure-Python zarr decoder: bit-equal with tensorstore on every fixture and every dtype of
the spec's table, region reads that touch only the chunks needed, and one test per corruption."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ockpt import dtypes
from ockpt.bytecodecs import crc32c
from ockpt.errors import MissingDataError, ZarrFormatError
from ockpt.ocdbt import Database
from ockpt.zarr import (
    ArrayV2Metadata,
    ArrayV3Metadata,
    chunks_for_region,
    open_metadata,
    read_region,
)
from tests.support.errors import assert_error
from tests.support.ocdbt import fixture_databases, short

ROOTS = [p for p in fixture_databases() if not p.name.startswith("ocdbt.process_")]

#: every element type tensorstore 0.1.86 writes to zarr, by its spec name
TS_DTYPES = [
    n
    for n in dtypes.SUPPORTED
    if n not in ("float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "uint2", "uint4")
]


def _params(db: Database) -> list[str]:
    names = set()
    for k in db.list():
        text = k.decode()
        for m in ("/.zarray", "/zarr.json"):
            if text.endswith(m):
                names.add(text[: -len(m)])
    return sorted(names)


def _ts_read(kvstore: dict, version: int) -> np.ndarray:
    import tensorstore as ts  # here, so the tests that need no tensorstore run without it

    driver = "zarr" if version == 2 else "zarr3"
    return ts.open({"driver": driver, "kvstore": kvstore}).result().read().result()


def _bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("path", ROOTS, ids=short)
def test_fixture_arrays_bit_equal_with_tensorstore(path):
    with Database(path) as db:  # closed also when tensorstore is refused and the test skips
        _bit_equal_with_tensorstore(db, path)


def _bit_equal_with_tensorstore(db: Database, path) -> None:  # type: ignore[no-untyped-def]
    for name in _params(db):
        meta = open_metadata(db.get, prefix=name + "/", file=str(path))
        out = np.empty(meta.shape, meta.numpy_dtype)
        read_region(meta, db.get, out, prefix=name + "/", missing="error")
        kv = {
            "driver": "ocdbt",
            "base": {"driver": "file", "path": str(path) + "/"},
            "path": name + "/",
        }
        assert _bit_equal(out, _ts_read(kv, meta.zarr_format)), name
        assert meta.to_dict() == json.loads(
            db.get(name + "/" + (".zarray" if meta.zarr_format == 2 else "zarr.json"))
        )


# ---------------------------------------------------------------------------------------------
# every dtype, zarr v2 and v3 (sharded as Orbax writes it, and with several inner chunks)


def _values(name: str, shape) -> np.ndarray:
    dt = dtypes.SUPPORTED[name]
    rng = np.random.default_rng(len(name))
    n = int(np.prod(shape))
    if name == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dt.kind in "iu" or name in ("int2", "int4"):
        info = np.iinfo(dt) if dt.kind in "iu" else __import__("ml_dtypes").iinfo(dt)
        raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
        if dt.kind in "iu":
            return raw.view(dt).reshape(shape)
        return rng.integers(int(info.min), int(info.max) + 1, n).astype(dt).reshape(shape)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt).reshape(shape)
    with np.errstate(all="ignore"):
        return (rng.standard_normal(n) * 4).astype(dt).reshape(shape)


def _orbax_like_v3(shape, chunks, inner, name) -> dict:
    one = dtypes.SUPPORTED[name].itemsize == 1
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": False
        if name == "bool"
        else ([0.0, 0.0] if name.startswith("complex") else 0),
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(inner),
                    "codecs": [
                        {"name": "bytes"}
                        if one
                        else {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
                    ],
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                },
            }
        ],
    }


@pytest.mark.parametrize("name", TS_DTYPES)
def test_every_dtype_v2_and_v3(tmp_path, name):
    import tensorstore as ts

    shape, chunks = (5, 6), (2, 4)
    values = _values(name, shape)
    v2 = {
        "zarr_format": 2,
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": dtypes.to_zarr_v2(values.dtype),
        "compressor": {"id": "zstd", "level": 1},
        "fill_value": None,
        "filters": None,
        "order": "C",
        "dimension_separator": ".",
    }
    specs = [
        ("zarr", v2, 2),
        ("zarr3", _orbax_like_v3(shape, chunks, chunks, name), 3),  # one inner chunk per shard
        ("zarr3", _orbax_like_v3(shape, (4, 6), (2, 3), name), 3),  # several inner chunks
    ]
    for i, (driver, metadata, version) in enumerate(specs):
        root = tmp_path / f"a{i}"
        kv = {"driver": "file", "path": str(root) + "/"}
        store = ts.open(
            {"driver": driver, "kvstore": kv, "metadata": metadata}, create=True
        ).result()
        store[:3].write(values[:3]).result()  # rows 3.. stay unwritten: missing chunks
        expected = _ts_read(kv, version)

        def get(key, root=root):
            p = root / key
            return p.read_bytes() if p.is_file() else None

        meta = open_metadata(get, file=str(root))
        assert meta.zarr_format == version
        out = np.empty(shape, meta.numpy_dtype)
        read_region(meta, get, out)
        assert _bit_equal(out, expected), (name, i)
        box = [(1, 4), (3, 6)]
        part = np.empty((3, 3), meta.numpy_dtype)
        read_region(meta, get, part, box)
        assert _bit_equal(part, expected[1:4, 3:6])


def test_zero_d_chunk_keys():
    assert ArrayV2Metadata.from_dict(_v2(shape=[], chunks=[])).chunk_key(()) == "0"
    assert ArrayV3Metadata.from_dict(_v3(shape=[], chunk=[])).chunk_key(()) == "c"
    assert ArrayV3Metadata.from_dict(_v3(shape=[4, 4], chunk=[2, 2])).chunk_key((1, 0)) == "c/1/0"
    assert ArrayV2Metadata.from_dict(_v2(shape=[4, 4], chunks=[2, 2])).chunk_key((1, 0)) == "1.0"


# ---------------------------------------------------------------------------------------------
# regions touch only the chunks they need


def _v2(**kw) -> dict:
    d = {
        "zarr_format": 2,
        "shape": [8, 8],
        "chunks": [2, 4],
        "dtype": "<i4",
        "compressor": None,
        "fill_value": None,
        "filters": None,
        "order": "C",
        "dimension_separator": ".",
    }
    d.update(kw)
    return d


def _v3(shape=(8, 8), chunk=(4, 4), inner=None, fill=0, dtype="int32") -> dict:
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if inner is not None:
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(inner),
                    "codecs": codecs,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                },
            }
        ]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": fill,
        "codecs": codecs,
    }


def _store_v2(meta: dict, values: np.ndarray) -> dict[str, bytes]:
    m = ArrayV2Metadata.from_dict(meta)
    store = {}
    for idx in chunks_for_region(m):
        chunk = np.zeros(m.chunks, values.dtype)
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, m.chunks, strict=False))
        part = values[sl]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        store[m.chunk_key(idx)] = chunk.tobytes()
    return store


def test_region_reads_touch_only_needed_chunks():
    values = np.arange(64, dtype="<i4").reshape(8, 8)
    meta = _v2()
    store = _store_v2(meta, values)
    seen = []

    def get(key):
        seen.append(key)
        return store.get(key)

    m = ArrayV2Metadata.from_dict(meta)
    out = np.empty((3, 2), "<i4")
    read_region(m, get, out, [(1, 4), (3, 5)])
    assert np.array_equal(out, values[1:4, 3:5])
    assert sorted(seen) == ["0.0", "0.1", "1.0", "1.1"]


def test_shard_reads_touch_only_needed_inner_chunks(monkeypatch):
    from ockpt.zarr import codecs

    meta = ArrayV3Metadata.from_dict(_v3(chunk=(8, 8), inner=(2, 2)))
    values = np.arange(64, dtype="<i4").reshape(8, 8)
    shard = _build_shard(values, (2, 2))
    decoded = []
    real = codecs.BytesCodec.decode

    def spy(self, data, shape, dtype, **kw):
        decoded.append(len(data))
        return real(self, data, shape, dtype, **kw)

    monkeypatch.setattr(codecs.BytesCodec, "decode", spy)
    out = np.empty((2, 3), "<i4")
    read_region(meta, {"c/0/0": shard}.get, out, [(2, 4), (1, 4)])
    assert np.array_equal(out, values[2:4, 1:4])
    assert len(decoded) == 2  # inner chunks (1, 0) and (1, 1) only


def _build_shard(values: np.ndarray, inner, *, skip=(), crc=True) -> bytes:
    grid = tuple(s // c for s, c in zip(values.shape, inner, strict=False))
    data = bytearray()
    index = []
    for idx in np.ndindex(*grid):
        if idx in skip:
            index += [2**64 - 1, 2**64 - 1]
            continue
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, inner, strict=False))
        raw = np.ascontiguousarray(values[sl]).astype("<i4").tobytes()
        index += [len(data), len(raw)]
        data += raw
    idx_bytes = np.array(index, "<u8").tobytes()
    return bytes(data) + idx_bytes + (crc32c(idx_bytes).to_bytes(4, "little") if crc else b"")


# ---------------------------------------------------------------------------------------------
# missing chunks and fill values


def test_missing_chunk_reads_as_fill_or_is_an_error():
    meta = ArrayV3Metadata.from_dict(_v3(chunk=(4, 4), fill=7))
    out = np.empty((8, 8), "<i4")
    read_region(meta, {}.get, out)
    assert (out == 7).all()
    with pytest.raises(MissingDataError) as info:
        read_region(meta, {}.get, out, missing="error")
    assert_error(info, rule="LOAD-041")


def test_missing_inner_chunk():
    values = np.arange(64, dtype="<i4").reshape(8, 8)
    meta = ArrayV3Metadata.from_dict(_v3(chunk=(8, 8), inner=(4, 4), fill=-1))
    shard = _build_shard(values, (4, 4), skip={(0, 1)})
    out = np.empty((8, 8), "<i4")
    read_region(meta, {"c/0/0": shard}.get, out)
    assert (out[:4, 4:] == -1).all() and np.array_equal(out[4:], values[4:])
    with pytest.raises(MissingDataError) as info:
        read_region(meta, {"c/0/0": shard}.get, out, missing="error")
    assert_error(info, rule="LOAD-041")


@pytest.mark.parametrize(
    ("fill", "dtype", "check"),
    [
        ("NaN", "float32", np.isnan),
        ("Infinity", "float64", np.isposinf),
        ("0x7fc00000", "float32", np.isnan),
        ("0x3f80", "bfloat16", lambda v: v.astype(np.float32) == 1.0),
        ([1.0, 2.0], "complex64", lambda v: v == 1 + 2j),
        (True, "bool", lambda v: v),
    ],
)
def test_fill_values(fill, dtype, check):
    meta = ArrayV3Metadata.from_dict(_v3(shape=(2,), chunk=(2,), fill=fill, dtype=dtype))
    assert bool(check(meta.fill))


# ---------------------------------------------------------------------------------------------
# corruption: one test each, asserting the rule


def _err(rule, fn):
    with pytest.raises(ZarrFormatError) as info:
        fn()
    assert info.value.rule == rule, str(info.value)
    return info.value


def test_shard_index_crc_mismatch():
    values = np.arange(64, dtype="<i4").reshape(8, 8)
    meta = ArrayV3Metadata.from_dict(_v3(chunk=(8, 8), inner=(4, 4)))
    shard = bytearray(_build_shard(values, (4, 4)))
    shard[-5] ^= 1
    e = _err(
        "ZARR-016",
        lambda: read_region(meta, {"c/0/0": bytes(shard)}.get, np.empty((8, 8), "<i4"), file="arr"),
    )
    assert e.file == "arr/c/0/0"


def test_shard_index_entry_out_of_range():
    values = np.arange(64, dtype="<i4").reshape(8, 8)
    meta = ArrayV3Metadata.from_dict(_v3(chunk=(8, 8), inner=(4, 4)))
    good = _build_shard(values, (4, 4), crc=False)
    index = np.frombuffer(good[-64:], "<u8").copy()
    index[0] = 10_000
    idx = index.tobytes()
    shard = good[:-64] + idx + crc32c(idx).to_bytes(4, "little")
    _err("ZARR-015", lambda: read_region(meta, {"c/0/0": shard}.get, np.empty((8, 8), "<i4")))


@pytest.mark.parametrize("entry", [(10_000, 4), (0, 10_000), (2**64 - 1, 4), (0, 2**64 - 1)])
def test_one_chunk_shard_index_entry_refused(entry):
    """A shard of one inner chunk (most shards, decoded without numpy): an entry outside the
    chunk data, or empty in one of its two numbers only, is ZARR-015."""
    values = np.arange(16, dtype="<i4").reshape(4, 4)
    meta = ArrayV3Metadata.from_dict(_v3(shape=(4, 4), chunk=(4, 4), inner=(4, 4)))
    good = _build_shard(values, (4, 4), crc=False)
    read_region(meta, {"c/0/0": good[:-16] + _index(0, 64)}.get, np.empty((4, 4), "<i4"))
    shard = good[:-16] + _index(*entry)
    _err("ZARR-015", lambda: read_region(meta, {"c/0/0": shard}.get, np.empty((4, 4), "<i4")))


def _index(offset: int, nbytes: int) -> bytes:
    idx = np.array([offset, nbytes], "<u8").tobytes()
    return idx + crc32c(idx).to_bytes(4, "little")


def test_shard_shorter_than_index():
    meta = ArrayV3Metadata.from_dict(_v3(chunk=(8, 8), inner=(4, 4)))
    _err("ZARR-015", lambda: read_region(meta, {"c/0/0": b"\0" * 10}.get, np.empty((8, 8), "<i4")))


def test_chunk_of_wrong_size():
    meta = ArrayV2Metadata.from_dict(_v2())
    _err(
        "ZARR-003",
        lambda: read_region(
            meta, {"0.0": b"\0" * 31}.get, np.empty((2, 4), "<i4"), [(0, 2), (0, 4)]
        ),
    )


def test_truncated_zstd_chunk():
    import zstandard

    meta = ArrayV2Metadata.from_dict(_v2(compressor={"id": "zstd", "level": 1}))
    frame = zstandard.ZstdCompressor().compress(b"\1" * 32)
    _err(
        "ZARR-003",
        lambda: read_region(
            meta, {"0.0": frame[:-2]}.get, np.empty((2, 4), "<i4"), [(0, 2), (0, 4)]
        ),
    )


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"zarr_format": 3}, "ZARR-002"),
        ({"chunks": [2]}, "ZARR-005"),
        ({"chunks": [0, 4]}, "ZARR-005"),
        ({"shape": [-1, 4]}, "ZARR-005"),
        ({"dtype": "|O"}, "ZARR-001"),
        ({"compressor": {"id": "blosc"}}, "ZARR-004"),
        ({"filters": [{"id": "delta"}]}, "ZARR-004"),
        ({"order": "X"}, "ZARR-004"),
        ({"dimension_separator": "-"}, "ZARR-006"),
        ({"fill_value": "x"}, "ZARR-007"),
    ],
)
def test_bad_zarray(change, rule):
    _err(rule, lambda: ArrayV2Metadata.from_dict(_v2(**change), file="x/.zarray"))


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"node_type": "group"}, "ZARR-010"),
        ({"surprise": 1}, "ZARR-010"),
        ({"chunk_grid": {"name": "rectangular", "configuration": {}}}, "ZARR-011"),
        ({"chunk_key_encoding": {"name": "fancy"}}, "ZARR-012"),
        ({"codecs": [{"name": "blosc"}]}, "ZARR-013"),
        ({"codecs": [{"name": "zstd"}]}, "ZARR-013"),
        ({"codecs": [{"name": "bytes"}]}, "ZARR-013"),  # int32 needs an endian
        ({"fill_value": 1.5}, "ZARR-007"),
    ],
)
def test_bad_zarr_json(change, rule):
    d = _v3()
    d.update(change)
    _err(rule, lambda: ArrayV3Metadata.from_dict(d, file="x/zarr.json"))


def test_unknown_field_with_must_understand_false_is_kept():
    d = _v3()
    d["ext"] = {"must_understand": False, "x": 1}
    m = ArrayV3Metadata.from_dict(d)
    assert m.to_dict()["ext"] == d["ext"]


def test_bad_sharding_config():
    d = _v3(chunk=(8, 8), inner=(3, 3))
    _err("ZARR-014", lambda: ArrayV3Metadata.from_dict(d))
    d = _v3(chunk=(8, 8), inner=(4, 4))
    d["codecs"][0]["configuration"]["index_codecs"] = [
        {"name": "bytes", "configuration": {"endian": "big"}}
    ]
    _err("ZARR-014", lambda: ArrayV3Metadata.from_dict(d))


def test_malformed_json():
    _err("JSON-001", lambda: ArrayV2Metadata.from_bytes(b"{", file="x/.zarray"))
    _err("JSON-002", lambda: ArrayV2Metadata.from_bytes(b'{"a": 1, "a": 2}', file="x/.zarray"))


# ---------------------------------------------------------------------------------------------
# the JSON Schemas accept every fixture's metadata and refuse what the rules refuse


def _schema(name):
    from importlib import resources

    from jsonschema import Draft202012Validator

    text = resources.files("ockpt").joinpath(f"schemas/{name}").read_text()
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_schemas_accept_fixture_metadata():
    v2, v3 = _schema("zarray.schema.json"), _schema("zarr-json.schema.json")
    seen = {2: 0, 3: 0}
    for path in ROOTS:
        db = Database(path)
        for key in db.list():
            if key.endswith(b".zarray"):
                v2.validate(json.loads(db.get(key)))
                seen[2] += 1
            elif key.endswith(b"zarr.json"):
                v3.validate(json.loads(db.get(key)))
                seen[3] += 1
    assert seen[2] and seen[3]


def test_schemas_refuse():
    v2, v3 = _schema("zarray.schema.json"), _schema("zarr-json.schema.json")
    assert not v2.is_valid(_v2(compressor={"id": "blosc"}))
    assert not v2.is_valid(_v2(zarr_format=3))
    assert not v3.is_valid({**_v3(), "node_type": "group"})
    bad = _v3(chunk=(8, 8), inner=(4, 4))
    bad["codecs"][0]["configuration"]["index_codecs"][0]["configuration"]["endian"] = "big"
    assert not v3.is_valid(bad)
    assert v3.is_valid(_v3(chunk=(8, 8), inner=(4, 4)))


# ---------------------------------------------------------------------------------------------
# fuzz: a mutated shard or chunk raises ZarrFormatError (or decodes); nothing else

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_FUZZ_VALUES = np.arange(64, dtype="<i4").reshape(8, 8)
_FUZZ_META = ArrayV3Metadata.from_dict(
    {
        **_v3(chunk=(8, 8), inner=(4, 4)),
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [4, 4],
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "zstd", "configuration": {"level": 1}},
                    ],
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                },
            }
        ],
    }
)


def _fuzz_shard(fix_crc: bool, edits, cut) -> bytes:
    import zstandard

    data = bytearray()
    index = []
    for idx in np.ndindex(2, 2):
        sl = tuple(slice(i * 4, (i + 1) * 4) for i in idx)
        raw = zstandard.ZstdCompressor().compress(_FUZZ_VALUES[sl].tobytes())
        index += [len(data), len(raw)]
        data += raw
    idx_bytes = bytearray(np.array(index, "<u8").tobytes())
    body = bytearray(data) + idx_bytes
    for pos, value in edits:
        body[pos % len(body)] = value
    if cut is not None:
        body = body[: cut % (len(body) + 1)]
    tail = body[-64:] if len(body) >= 64 else body
    crc = crc32c(bytes(tail)) if fix_crc else crc32c(bytes(idx_bytes))
    return bytes(body) + crc.to_bytes(4, "little")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fix_crc=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 4000)),
)
def test_fuzz_shards_raise_only_format_errors(fix_crc, edits, cut):
    shard = _fuzz_shard(fix_crc, edits, cut)
    out = np.empty((8, 8), "<i4")
    try:
        read_region(_FUZZ_META, {"c/0/0": shard}.get, out)
    except ZarrFormatError as e:
        assert e.rule and e.rule.startswith("ZARR-")


# ---------------------------------------------------------------------------------------------
# Codecs are looked up by the name their JSON gives.

_LE = {"name": "bytes", "configuration": {"endian": "little"}}
_MINIMAL = {
    "bytes": _LE,
    "transpose": {"name": "transpose", "configuration": {"order": [0]}},
    "zstd": {"name": "zstd", "configuration": {"level": 3}},
    "gzip": {"name": "gzip"},
    "crc32c": {"name": "crc32c"},
    "sharding_indexed": {
        "name": "sharding_indexed",
        "configuration": {"chunk_shape": [1], "codecs": [_LE], "index_codecs": [_LE]},
    },
}


def test_codecs_are_looked_up_by_their_json_name():
    from ockpt.zarr import codecs

    assert list(codecs.CODECS) == list(_MINIMAL)  # sharding_indexed: registered by shard_index
    for name, entry in _MINIMAL.items():
        codec = codecs.parse_codec(entry, rank=1, dtype=np.dtype("<f4"), file="f", pointer="/0")
        assert codec.name == name
        assert codec.kind in ("array_to_array", "array_to_bytes", "bytes_to_bytes")
    with pytest.raises(ZarrFormatError) as info:
        codecs.parse_codec({"name": "blosc"}, rank=1, dtype=np.dtype("<f4"), file="f", pointer="")
    assert_error(
        info, rule="ZARR-013", expected="bytes, transpose, zstd, gzip, crc32c or sharding_indexed"
    )
    assert list(codecs.V2_COMPRESSORS) == ["zstd", "gzip", "zlib"]
    pipeline = codecs.from_v2_compressor({"id": "zlib", "level": 1}, np.dtype("<f4"))
    assert [c.name for c in pipeline.bytes_to_bytes] == ["gzip"]
    assert pipeline.bytes_to_bytes[0].wbits == 15
    with pytest.raises(ZarrFormatError) as info:
        codecs.from_v2_compressor({"id": "blosc"}, np.dtype("<f4"))
    assert_error(info, rule="ZARR-004", expected="null, zstd, gzip or zlib")
