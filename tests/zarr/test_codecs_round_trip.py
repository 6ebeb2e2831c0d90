"""`zarr/` both ways: every codec decodes what it encodes, the shard index encodes where it
decodes, and every metadata model round-trips (the writer's, and every zarr metadata document
real Orbax wrote in the golden fixtures, byte for byte)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ockpt import _zarr_write, dtypes
from ockpt.zarr.codecs import (
    BytesCodec,
    CodecPipeline,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)
from ockpt.zarr.shard_index import EMPTY, encode_index
from ockpt.zarr.v2 import ArrayV2Metadata
from ockpt.zarr.v3 import ArrayV3Metadata
from tests.support import FIXTURES

BYTES_CODECS = [ZstdCodec(level=1), ZstdCodec(level=9), GzipCodec(level=5), Crc32cCodec()]


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=5000))
def test_bytes_codecs_decode_what_they_encode(data):
    for codec in BYTES_CODECS:
        encoded = codec.encode(data)
        assert codec.decode(encoded, max_size=len(data), file="f", pointer=None) == data


def test_zstd_encodes_one_frame_on_threads_too():
    data = np.arange(3 << 20, dtype=np.uint8).tobytes()
    single, threaded = ZstdCodec(level=1).encode(data), ZstdCodec(level=1).encode(data, threads=2)
    for frame in (single, threaded):
        assert ZstdCodec().decode(frame, max_size=len(data), file="f", pointer=None) == data


def test_crc32c_appends_the_little_endian_checksum():
    assert Crc32cCodec().encode(b"123456789")[-4:] == (0xE3069283).to_bytes(4, "little")


@pytest.mark.parametrize("name", sorted(dtypes.SUPPORTED))
@pytest.mark.parametrize("endian", ["little", "big"])
def test_bytes_codec_round_trips_every_dtype(name, endian):
    dtype = dtypes.SUPPORTED[name]
    array = np.arange(24).reshape(2, 3, 4).astype(dtype)
    codec = BytesCodec(endian=endian if dtype.itemsize > 1 else None)
    raw = bytes(codec.encode(array))
    back = codec.decode(raw, array.shape, dtype, file="f", pointer=None)
    assert back.tobytes() == array.astype(back.dtype).tobytes() or np.array_equal(back, array)
    assert np.array_equal(back.astype(dtype).view(np.uint8), array.view(np.uint8))


def test_a_native_contiguous_array_is_encoded_without_a_copy():
    array = np.arange(10, dtype="<f4")
    view = BytesCodec().encode(array)
    assert np.shares_memory(np.frombuffer(view, np.uint8), array)


def test_transpose_and_a_whole_pipeline_round_trip():
    array = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    pipeline = CodecPipeline(
        (TransposeCodec((2, 0, 1)),), BytesCodec(), (ZstdCodec(level=3), Crc32cCodec())
    )
    encoded = pipeline.encode(array)
    back = pipeline.decode(bytes(encoded), array.shape, array.dtype, file="f", pointer=None)
    assert np.array_equal(back, array)


def test_a_shard_index_decodes_as_encoded():
    meta = ArrayV3Metadata.from_dict(
        _zarr_write.zarr_metadata(
            zarr_version=3,
            shape=(4, 4),
            dtype=np.dtype("float32"),
            chunk_shape=(2, 2),
            write_shape=(4, 4),
            compression_level=None,
        ).to_dict()
    )
    sharding = meta.sharding
    assert sharding is not None
    pairs = (0, 16, 16, 16, EMPTY, EMPTY, 32, 16)
    shard = b"\0" * 48 + sharding.encode_index(pairs)
    index = sharding.decode_index(shard, (4, 4), file="f", pointer=None)
    assert [index.get(i) for i in [(0, 0), (0, 1), (1, 0), (1, 1)]] == [
        (0, 16),
        (16, 16),
        None,
        (32, 16),
    ]
    assert encode_index(pairs, crc=False) == sharding.encode_index(pairs)[:-4]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("name", sorted(dtypes.SUPPORTED))
@pytest.mark.parametrize("level", [None, 1])
def test_the_writers_metadata_models_round_trip(version, name, level):
    meta = _zarr_write.zarr_metadata(
        zarr_version=version,
        shape=(6, 4),
        dtype=dtypes.SUPPORTED[name],
        chunk_shape=(3, 4),
        write_shape=(6, 4),
        compression_level=level,
    )
    model = ArrayV2Metadata if version == 2 else ArrayV3Metadata
    assert isinstance(meta, model)
    again = model.from_dict(json.loads(_zarr_write.stored_metadata(meta)))
    assert again == meta and again.to_dict() == meta.to_dict()


def _fixture_documents() -> list:
    found = []
    for name, model in ((".zarray", ArrayV2Metadata), ("zarr.json", ArrayV3Metadata)):
        for path in sorted(FIXTURES.glob(f"orbax-*/*/checkpoint/**/{name}")):
            found.append(pytest.param(path, model, id=str(path.relative_to(FIXTURES))))
    return found


@pytest.mark.parametrize("path,model", _fixture_documents())
def test_every_fixture_metadata_document_round_trips(path, model):
    """What Orbax wrote (every release) parses into the model and comes back the same."""
    doc = json.loads(path.read_bytes())
    assert model.from_dict(doc, file=str(path)).to_dict() == doc
