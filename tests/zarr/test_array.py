"""`ockpt.zarr.array`: opening array metadata, the chunks a region needs, missing chunks and reads
of regions from plain chunks and shards, built from numpy bytes. None needs tensorstore (the
mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ockpt.bytecodecs import crc32c
from ockpt.errors import MissingDataError, ZarrFormatError
from ockpt.limits import LIMITS, Limits, applied
from ockpt.zarr import array
from ockpt.zarr.array import (
    chunks_for_region,
    missing_chunk,
    open_metadata,
    overlap,
    read_region,
)
from ockpt.zarr.codecs import BytesCodec
from ockpt.zarr.v2 import ArrayV2Metadata
from ockpt.zarr.v3 import ArrayV3Metadata
from tests.support.errors import assert_error, error_fields, raised
from tests.support.zarr import array_v2, array_v3, sharding_codec

EMPTY = 2**64 - 1


# --------------------------------------------------------------------------------------------
# array: open_metadata


def _json(d: dict) -> bytes:
    return json.dumps(d).encode()


def test_open_metadata_reads_zarray_first_then_zarr_json():
    """Without a version, .zarray is read first, zarr.json only when it is absent; with 2 or
    3 only that file is asked for; none: None. Keys take the prefix; errors name
    "<file>/<key>", or the key without a file. Kills open_metadata 1-39 (lookups, order,
    names)."""
    array._PARSED.clear()
    v2, v3 = _json(array_v2()), _json(array_v3())
    asked = []

    def getter(store):
        def get(key):
            asked.append(key)
            return store.get(key)

        return get

    both = getter({"p/.zarray": v2, "p/zarr.json": v3})
    assert type(open_metadata(both, prefix="p/")) is ArrayV2Metadata
    assert asked == ["p/.zarray"]
    asked.clear()
    assert type(open_metadata(both, prefix="p/", zarr_version=3)) is ArrayV3Metadata
    assert asked == ["p/zarr.json"]
    asked.clear()
    assert type(open_metadata(both, prefix="p/", zarr_version=2)) is ArrayV2Metadata
    assert asked == ["p/.zarray"]
    asked.clear()
    only3 = getter({"zarr.json": v3})
    assert type(open_metadata(only3)) is ArrayV3Metadata
    assert asked == [".zarray", "zarr.json"]
    asked.clear()
    assert open_metadata(only3, zarr_version=2) is None
    assert open_metadata(getter({}), prefix="p/") is None
    assert asked == [".zarray", "p/.zarray", "p/zarr.json"]
    bad2, bad3 = _json(array_v2(order="X")), _json(array_v3(node_type="group"))
    err = raised(
        ZarrFormatError, lambda: open_metadata({"p/.zarray": bad2}.get, prefix="p/", file="ck")
    )
    assert (err.file, err.pointer, err.rule) == ("ck/p/.zarray", "/order", "ZARR-004")
    err = raised(ZarrFormatError, lambda: open_metadata({"p/zarr.json": bad3}.get, prefix="p/"))
    assert (err.file, err.pointer, err.rule) == ("p/zarr.json", "/node_type", "ZARR-010")
    err = raised(ZarrFormatError, lambda: open_metadata({"zarr.json": bad3}.get, file=Path("d")))
    assert err.file == "d/zarr.json"
    # bytes-like values are parsed too
    m = open_metadata({"zarr.json": bytearray(_json(array_v3(fill_value=5)))}.get)
    assert m.fill.item() == 5


def test_open_metadata_parses_each_document_once_per_class():
    """Equal bytes give the same (immutable) metadata object, per class and per limits in
    force; the memo is emptied when it holds 4096 documents. Kills open_metadata memo
    mutants."""
    array._PARSED.clear()
    v2 = _json(array_v2(fill_value=11))
    a = open_metadata({".zarray": v2}.get)
    b = open_metadata({"x/.zarray": bytearray(v2)}.get, prefix="x/")
    assert a is b and a.fill.item() == 11
    assert array._PARSED == {(ArrayV2Metadata, v2, LIMITS): a}
    with applied(Limits(max_array_bytes=1)):  # other limits: parsed (and refused) again
        assert (
            raised(ZarrFormatError, lambda: open_metadata({".zarray": v2}.get)).rule == "ZARR-005"
        )
    # the same bytes as a zarr.json are parsed as v3 (and refused), not served from the memo
    err = raised(ZarrFormatError, lambda: open_metadata({"zarr.json": v2}.get))
    assert err.rule == "ZARR-010"
    array._PARSED.clear()
    for i in range(array._PARSED_KEEP - 1):
        array._PARSED[(ArrayV2Metadata, b"%d" % i, LIMITS)] = a
    open_metadata({".zarray": v2}.get)
    assert len(array._PARSED) == array._PARSED_KEEP == 4096
    open_metadata({"zarr.json": _json(array_v3())}.get)
    assert len(array._PARSED) == 1
    assert list(array._PARSED) == [(ArrayV3Metadata, _json(array_v3()), LIMITS)]
    array._PARSED.clear()


# --------------------------------------------------------------------------------------------
# array: check_box, chunks_for_region, overlap, missing_chunk


def test_regions_must_lie_within_the_shape():
    """A region has one (start, stop) per dimension with 0 <= start <= stop <= size; None is
    the whole array. Kills check_box 1-21 (15, 18, 19 are equivalent)."""
    m = ArrayV2Metadata.from_dict(array_v2())  # shape (5, 7)
    assert array.check_box(m, None, "f") == [(0, 5), (0, 7)]
    assert array.check_box(m, [[0, 5], (7, 7)], "f") == [(0, 5), (7, 7)]
    assert array.check_box(m, [(5, 5), (0, 0)], "f") == [(5, 5), (0, 0)]
    for box in (
        [(0, 5)],
        [(0, 5), (0, 7), (0, 1)],
        [(-1, 5), (0, 7)],
        [(0, 6), (0, 7)],
        [(3, 2), (0, 7)],
        [(0, 5), (0, 8)],
        [(0, 5), (8, 8)],
    ):
        err = raised(ValueError, lambda box=box: array.check_box(m, box, "f"))
        assert str(err) == f"f: region {[tuple(b) for b in box]} is not within shape [5, 7]"


def test_chunks_for_region_are_the_overlapped_chunks_in_c_order():
    """The grid indices a region overlaps (ceil at the stop), C order; an empty region has
    none. Kills chunks_for_region 1-25 (20, 23, 24 are
    equivalent)."""
    m = ArrayV2Metadata.from_dict(array_v2())  # shape (5, 7), chunks (2, 3)
    assert list(chunks_for_region(m)) == [(i, j) for i in range(3) for j in range(3)]
    assert list(chunks_for_region(m, [(1, 4), (3, 4)])) == [(0, 1), (1, 1)]
    assert list(chunks_for_region(m, [(2, 3), (5, 7)])) == [(1, 1), (1, 2)]
    assert list(chunks_for_region(m, [(4, 5), (6, 7)])) == [(2, 2)]
    assert list(chunks_for_region(m, [(1, 1), (0, 7)])) == []
    assert list(chunks_for_region(m, [(0, 5), (3, 3)])) == []
    m0 = ArrayV2Metadata.from_dict(array_v2(shape=[], chunks=[]))
    assert list(chunks_for_region(m0)) == [()]
    err = raised(ValueError, lambda: chunks_for_region(m, [(0, 9), (0, 7)]))
    assert str(err) == "None: region [(0, 9), (0, 7)] is not within shape [5, 7]"


def test_overlap_gives_target_and_source_slices():
    """Per dimension, the part of a chunk at `lo` of `size` inside the region, as a slice of
    the output and of the chunk. Kills overlap 1-36 (5, 9, 10 are equivalent)."""
    assert overlap([(1, 6), (0, 4)], (4, 0), (3, 2)) == (
        (slice(3, 5), slice(0, 2)),
        (slice(0, 2), slice(0, 2)),
    )
    assert overlap([(5, 9)], (3,), (4,)) == ((slice(0, 2),), (slice(2, 4),))
    assert overlap([(2, 3)], (0,), (8,)) == ((slice(0, 1),), (slice(2, 3),))
    assert overlap([], (), ()) == ((), ())


def test_missing_chunk_error():
    """The error of a chunk absent where every chunk is stored: LOAD-041, naming ZARR-008.
    Kills missing_chunk 1-9."""
    err = missing_chunk("x/c/0", "chunk [0]")
    assert type(err) is MissingDataError and isinstance(err, KeyError)
    assert error_fields(err) == {
        "rule": "LOAD-041",
        "file": "x/c/0",
        "message": "chunk [0] is missing and the checkpoint stores every chunk "
        "(store_array_data_equal_to_fill_value; ZARR-008)",
        "pointer": None,
    }


# --------------------------------------------------------------------------------------------
# array: read_region (plain chunks)

VALUES = np.arange(35, dtype="<i4").reshape(5, 7) * 3 - 40


def _chunks(meta, values, *, order="C", skip=()) -> dict[str, bytes]:
    """Every chunk of `meta`'s grid, edge chunks padded with 99, as raw bytes."""
    store = {}
    for index in chunks_for_region(meta):
        if index in skip:
            continue
        chunk = np.full(meta.chunk_shape, 99, values.dtype)
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, meta.chunk_shape, strict=True))
        part = values[sl]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        store[meta.chunk_key(index)] = chunk.tobytes(order=order)
    return store


BOXES = [None, [(0, 5), (0, 7)], [(1, 4), (2, 6)], [(3, 5), (6, 7)], [(0, 1), (0, 1)]]


@pytest.mark.parametrize("version", [2, 3])
def test_read_region_reads_each_overlapped_chunk(version):
    """A region is filled from the chunks it overlaps, each asked for once under the prefix,
    edge chunks cut to the array. Kills read_region 1-91 on the chunk path."""
    meta = (
        ArrayV2Metadata.from_dict(array_v2())
        if version == 2
        else ArrayV3Metadata.from_dict(array_v3(chunk_key_encoding={"name": "v2"}))
    )
    store = {"p/" + k: v for k, v in _chunks(meta, VALUES).items()}
    for box in BOXES:
        asked: list[str] = []

        def get(key, asked=asked):
            asked.append(key)
            return store.get(key)

        full = [(0, 5), (0, 7)] if box is None else box
        out = np.full([b - a for a, b in full], -1, "<i4")
        got = read_region(meta, get, out, box, prefix="p/", missing="error", file="ck")
        assert got is out
        assert np.array_equal(out, VALUES[tuple(slice(a, b) for a, b in full)])
        want = ["p/" + meta.chunk_key(i) for i in chunks_for_region(meta, box)]
        assert asked == want
    assert asked == ["p/0.0"]


def test_read_region_of_f_order_v2_chunks():
    """A v2 array in F order stores each chunk transposed. Kills the order argument mutants
    of ArrayV2Metadata.from_dict."""
    meta = ArrayV2Metadata.from_dict(array_v2(order="F"))
    out = np.empty((5, 7), "<i4")
    read_region(meta, _chunks(meta, VALUES, order="F").get, out)
    assert np.array_equal(out, VALUES)
    big = ArrayV2Metadata.from_dict(array_v2(dtype=">i4", dimension_separator="/"))
    stored = {
        k: np.frombuffer(v, "<i4").astype(">i4").tobytes() for k, v in _chunks(big, VALUES).items()
    }
    out = np.empty((5, 7), ">i4")
    read_region(big, stored.get, out)
    assert np.array_equal(out, VALUES) and "1/2" in stored


def test_read_region_missing_chunks_fill_or_fail():
    """An absent chunk reads as the fill value, or with missing="error" is LOAD-041 naming
    "<file>/<prefix><key>: chunk [i, j]" (the key alone without a file).
    Kills read_region missing-chunk mutants."""
    meta = ArrayV3Metadata.from_dict(array_v3(fill_value=-5))
    store = _chunks(meta, VALUES, skip={(1, 1)})
    out = np.zeros((5, 7), "<i4")
    read_region(meta, {"p/" + k: v for k, v in store.items()}.get, out, prefix="p/")
    want = VALUES.copy()
    want[2:4, 3:6] = -5
    assert np.array_equal(out, want)
    out = np.zeros((2, 2), "<i4")
    read_region(meta, store.get, out, [(3, 5), (4, 6)])
    assert out.tolist() == [[-5, -5], [VALUES[4, 4], VALUES[4, 5]]]
    err = raised(
        MissingDataError,
        lambda: read_region(meta, store.get, np.zeros((5, 7), "<i4"), missing="error", file="ck"),
    )
    assert error_fields(err) == {
        "rule": "LOAD-041",
        "file": "ck/c/1/1",
        "message": "chunk [1, 1] is missing and the checkpoint stores every chunk "
        "(store_array_data_equal_to_fill_value; ZARR-008)",
        "pointer": None,
    }
    err = raised(
        MissingDataError,
        lambda: read_region(
            meta, {}.get, np.zeros((1, 1), "<i4"), [(4, 5), (6, 7)], missing="error"
        ),
    )
    assert_error(err, rule="LOAD-041", file="c/2/2")
    assert err.message.startswith("chunk [2, 2] is missing")


def test_read_region_checks_out_and_skips_empty_regions():
    """`out` must have the region's shape (ValueError naming the file); an empty region or a
    zero-size array reads nothing, even with missing="error".
    Kills read_region shape-check and empty-region mutants."""
    meta = ArrayV2Metadata.from_dict(array_v2())
    err = raised(ValueError, lambda: read_region(meta, {}.get, np.zeros((5, 6), "<i4"), file="ck"))
    assert str(err) == "ck: out has shape (5, 6), region has shape (5, 7)"
    err = raised(
        ValueError, lambda: read_region(meta, {}.get, np.zeros((2, 2), "<i4"), [(0, 2), (0, 3)])
    )
    assert str(err) == "None: out has shape (2, 2), region has shape (2, 3)"
    err = raised(ValueError, lambda: read_region(meta, {}.get, np.zeros((5, 7), "<i4"), [(0, 5)]))
    assert str(err) == "None: region [(0, 5)] is not within shape [5, 7]"
    err = raised(
        ValueError,
        lambda: read_region(meta, {}.get, np.zeros((1, 1), "<i4"), [(0, 1), (7, 8)], file="ck"),
    )
    assert str(err) == "ck: region [(0, 1), (7, 8)] is not within shape [5, 7]"

    def never(key):
        raise AssertionError(key)

    out = np.full((0, 7), 1, "<i4")
    assert read_region(meta, never, out, [(2, 2), (0, 7)], missing="error") is out
    out = np.full((3, 0), 1, "<i4")
    assert read_region(meta, never, out, [(2, 5), (4, 4)], missing="error") is out
    zero = ArrayV3Metadata.from_dict(array_v3(shape=(0, 4), chunk=(2, 2)))
    out = np.zeros((0, 4), "<i4")
    assert read_region(zero, never, out, missing="error") is out


def test_read_region_chunk_errors_name_the_chunk_file():
    """A chunk that does not decode is an error naming "<file>/<prefix><key>", or the key.
    Kills read_region where/decode-argument mutants."""
    meta = ArrayV2Metadata.from_dict(array_v2())
    err = raised(
        ZarrFormatError,
        lambda: read_region(
            meta,
            {"p/0.0": b"\0" * 23}.get,
            np.zeros((1, 1), "<i4"),
            [(0, 1), (0, 1)],
            prefix="p/",
            file="ck",
        ),
    )
    assert error_fields(err) == {
        "rule": "ZARR-003",
        "file": "ck/p/0.0",
        "message": "chunk bytes do not match the chunk shape and element size",
        "pointer": None,
        "expected": 24,
        "got": 23,
    }
    assert err.pointer is None
    err = raised(
        ZarrFormatError,
        lambda: read_region(
            meta, {"1.2": b"\0" * 25}.get, np.zeros((1, 1), "<i4"), [(2, 3), (6, 7)]
        ),
    )
    assert err.file == "1.2" and err.got == 25


# --------------------------------------------------------------------------------------------
# array: _read_shard


def _shard(values, inner, *, skip=(), end=True, reverse=True) -> bytes:
    """A shard of raw little-endian inner chunks, stored in reverse C order (so offsets are
    not the C-order positions), with a CRC-32C'd index at the end (or start)."""
    grid = tuple(s // c for s, c in zip(values.shape, inner, strict=True))
    cells = list(np.ndindex(*grid))
    pieces, index = {}, {}
    for idx in cells:
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, inner, strict=True))
        pieces[idx] = np.ascontiguousarray(values[sl]).astype("<i4").tobytes()
    nidx = 16 * len(cells) + 4
    data = bytearray()
    base = 0 if end else nidx
    for idx in reversed(cells) if reverse else cells:
        if idx in skip:
            index[idx] = (EMPTY, EMPTY)
            continue
        index[idx] = (base + len(data), len(pieces[idx]))
        data += pieces[idx]
    raw = np.array([index[i] for i in cells], "<u8").tobytes()
    raw += crc32c(raw).to_bytes(4, "little")
    return bytes(data) + raw if end else raw + bytes(data)


SHARDED = np.arange(96, dtype="<i4").reshape(8, 12) * 7 - 300


def _sharded_meta(inner=(2, 3), **kw) -> ArrayV3Metadata:
    return ArrayV3Metadata.from_dict(
        array_v3(shape=(8, 12), chunk=(4, 6), codecs=[sharding_codec(inner, **kw)], fill_value=-1)
    )


def _shard_store(meta, values, **kw) -> dict[str, bytes]:
    store = {}
    for index in chunks_for_region(meta):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, meta.chunk_shape, strict=True))
        store[meta.chunk_key(index)] = _shard(values[sl], meta.sharding.chunk_shape, **kw)
    return store


SHARD_BOXES = [None, [(1, 7), (2, 11)], [(4, 8), (6, 12)], [(3, 5), (5, 7)], [(5, 6), (7, 8)]]


@pytest.mark.parametrize(
    ("location", "inner"), [("end", (2, 3)), ("start", (2, 3)), ("end", (1, 6))]
)
def test_read_region_of_sharded_arrays(location, inner):
    """Regions across shards read the inner chunks they overlap, wherever the index puts
    them; the shard's position, the region clipped to each shard (from 0: inner chunks of
    one row) and the inner-chunk offsets all count. Kills _read_shard 1-106 on the read
    path."""
    meta = _sharded_meta(index_location=location, inner=inner)
    store = _shard_store(meta, SHARDED, end=location == "end")
    for box in SHARD_BOXES:
        full = [(0, 8), (0, 12)] if box is None else box
        out = np.full([b - a for a, b in full], 12345, "<i4")
        read_region(meta, store.get, out, box, missing="error")
        assert np.array_equal(out, SHARDED[tuple(slice(a, b) for a, b in full)]), box


def test_sharded_reads_decode_only_the_overlapped_inner_chunks(monkeypatch):
    """Only the inner chunks a region overlaps are decoded, each once, from its own bytes.
    Kills _read_shard range mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED)
    decoded = []
    real = BytesCodec.decode

    def spy(self, data, shape, dtype, **kw):
        decoded.append((bytes(data), kw["pointer"]))
        return real(self, data, shape, dtype, **kw)

    monkeypatch.setattr(BytesCodec, "decode", spy)
    out = np.zeros((2, 2), "<i4")
    read_region(meta, store.get, out, [(3, 5), (5, 7)])
    assert np.array_equal(out, SHARDED[3:5, 5:7])
    pointers = [p for _, p in decoded]
    assert pointers == [
        "inner chunk [1, 1]",
        "inner chunk [1, 0]",
        "inner chunk [0, 1]",
        "inner chunk [0, 0]",
    ]
    assert decoded[0][0] == SHARDED[2:4, 3:6].tobytes()
    assert decoded[3][0] == SHARDED[4:6, 6:9].tobytes()


def test_sharded_missing_inner_chunks_fill_or_fail():
    """An inner chunk the index marks absent reads as the fill value, or with
    missing="error" is LOAD-041 naming the shard and the inner chunk; a missing shard
    likewise. Kills _read_shard missing mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED, skip={(1, 0)})
    out = np.zeros((8, 12), "<i4")
    read_region(meta, store.get, out)
    want = SHARDED.copy()
    for r in (0, 4):
        for c in (0, 6):
            want[r + 2 : r + 4, c : c + 3] = -1
    assert np.array_equal(out, want)
    err = raised(
        MissingDataError,
        lambda: read_region(meta, store.get, np.zeros((8, 12), "<i4"), missing="error", file="ck"),
    )
    assert error_fields(err) == {
        "rule": "LOAD-041",
        "file": "ck/c/0/0",
        "message": "inner chunk [1, 0] of the shard is missing and the checkpoint stores "
        "every chunk (store_array_data_equal_to_fill_value; ZARR-008)",
        "pointer": None,
    }
    out = np.zeros((2, 3), "<i4")
    read_region(meta, store.get, out, [(0, 2), (0, 3)], missing="error")  # (0, 0) is stored
    assert np.array_equal(out, SHARDED[0:2, 0:3])
    del store["c/1/1"]
    out = np.zeros((8, 12), "<i4")
    read_region(meta, store.get, out, missing="fill")
    assert (out[4:, 6:] == -1).all() and np.array_equal(out[:2], SHARDED[:2])
    err = raised(
        MissingDataError,
        lambda: read_region(meta, store.get, np.zeros((8, 12), "<i4"), missing="error"),
    )
    assert_error(err, rule="LOAD-041", file="c/0/0")
    assert err.message.startswith("inner chunk [1, 0] of the shard is missing")


def test_sharded_errors_name_the_shard_and_inner_chunk():
    """A damaged shard index, or inner chunk, is an error naming "<file>/<key>" and the
    pointer "shard index" or "inner chunk [i, j]". Kills _read_shard error-argument
    mutants."""
    meta = _sharded_meta()
    store = _shard_store(meta, SHARDED)
    shard = bytearray(store["c/1/0"])
    shard[-1] ^= 1
    err = raised(
        ZarrFormatError,
        lambda: read_region(
            meta, {"c/1/0": bytes(shard)}.get, np.zeros((1, 1), "<i4"), [(4, 5), (0, 1)], file="ck"
        ),
    )
    assert (err.file, err.pointer, err.rule) == ("ck/c/1/0", "shard index", "ZARR-016")
    # inner chunk (0, 1) of shard (1, 0) is stored first (reverse order): give it 4 bytes less
    cells = list(np.ndindex(2, 2))
    index = np.frombuffer(bytes(store["c/1/0"][-68:-4]), "<u8").reshape(4, 2).copy()
    assert index[cells.index((1, 1))].tolist() == [0, 24]
    index[cells.index((1, 1))] = [0, 20]
    raw = index.tobytes()
    shard = store["c/1/0"][:-68] + raw + crc32c(raw).to_bytes(4, "little")
    err = raised(
        ZarrFormatError,
        lambda: read_region(meta, {"c/1/0": shard}.get, np.zeros((4, 6), "<i4"), [(4, 8), (0, 6)]),
    )
    assert error_fields(err) == {
        "rule": "ZARR-003",
        "file": "c/1/0",
        "message": "chunk bytes do not match the chunk shape and element size",
        "pointer": "inner chunk [1, 1]",
        "expected": 24,
        "got": 20,
    }
