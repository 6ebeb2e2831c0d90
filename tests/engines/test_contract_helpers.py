"""What both engines share in `ockpt.engines.contract`, called directly: `tiles` (the pieces a
box is read in), `read_regions` (a stream of requests handed to its arrays' engine),
`ImmediateFuture` and `array_file` (the file an error names for an array)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ockpt import engines
from ockpt.engines import contract
from ockpt.engines import python as pb
from ockpt.engines.contract import ReadRequest, read_regions, tiles
from ockpt.layout import ItemFormat, Storage, detect
from ockpt.store import LocalStore
from tests.support import FIXTURES
from tests.support.errors import raised

# ---------------------------------------------------------------------------------------------
# tiles


def _nbytes(piece, itemsize: int) -> int:
    return itemsize * math.prod(b - a for a, b in piece)


def _check_tiling(box, chunk_shape, itemsize, budget) -> list:
    """The pieces of `box`: they cover it exactly, none overlaps another, each is aligned to the
    chunk grid (no chunk is in two pieces), and each is within `budget` unless one chunk
    (clipped to the box) is larger, in which case each piece is one chunk."""
    pieces = tiles(box, chunk_shape, itemsize, budget)
    grid = [max(1, c) for c in chunk_shape]
    cells = np.zeros([b - a for a, b in box], np.int64)
    for piece in pieces:
        assert len(piece) == len(box)
        for (a, b), (lo, hi), c in zip(piece, box, grid, strict=True):
            assert lo <= a < b <= hi, (piece, box)
            assert a == lo or a % c == 0, (piece, grid)
            assert b == hi or b % c == 0, (piece, grid)
        cells[tuple(slice(a - lo, b - lo) for (a, b), (lo, _) in zip(piece, box, strict=True))] += 1
    assert (cells == 1).all(), (box, chunk_shape, budget, pieces)
    one_chunk = itemsize * math.prod(min(c, b - a) for c, (a, b) in zip(grid, box, strict=True))
    for piece in pieces:
        if one_chunk > budget:
            # each piece is within one chunk of the grid
            assert all(a // c == (b - 1) // c for (a, b), c in zip(piece, grid, strict=True))
        else:
            assert _nbytes(piece, itemsize) <= budget, (piece, budget)
    return pieces


def test_tiles_of_a_box_of_no_dimension_and_of_empty_boxes():
    assert tiles((), (), 4) == [()]
    assert tiles((), (), 4, 1) == [()]
    assert tiles(((0, 0),), (4,), 1) == []
    assert tiles(((3, 3), (0, 8)), (2, 2), 1) == []
    assert tiles(((0, 8), (5, 4)), (2, 2), 1) == []  # stop before start: nothing to read


@pytest.mark.parametrize(
    "box, chunks, itemsize, budget, want",
    [
        # one chunk per piece: a budget of one chunk
        (((0, 10),), (4,), 1, 4, [((0, 4),), ((4, 8),), ((8, 10),)]),
        # a box that starts and stops off the grid: cut at the grid's lines
        (((3, 10),), (4,), 1, 4, [((3, 4),), ((4, 8),), ((8, 10),)]),
        # two chunks a piece: cut at multiples of two chunks (8 elements), not at the box's start
        (((3, 21),), (4,), 1, 8, [((3, 8),), ((8, 16),), ((16, 21),)]),
        # the budget holds the box whole
        (((3, 10),), (4,), 1, 100, [((3, 10),)]),
        (((3, 10),), (4,), 1, 12, [((3, 10),)]),
        # the budget one byte short of three chunks: two chunks a piece
        (((0, 12),), (4,), 1, 11, [((0, 8),), ((8, 12),)]),
        # itemsize counts: 4-byte items, 16 bytes is one chunk of 4
        (((0, 10),), (4,), 4, 16, [((0, 4),), ((4, 8),), ((8, 10),)]),
        (((0, 10),), (4,), 4, 31, [((0, 4),), ((4, 8),), ((8, 10),)]),
        (((0, 10),), (4,), 4, 32, [((0, 8),), ((8, 10),)]),
        # a chunk larger than the budget: one chunk a piece
        (((0, 20),), (8,), 8, 16, [((0, 8),), ((8, 16),), ((16, 20),)]),
        # one-element chunks of one byte: two a piece
        (((0, 4),), (1,), 1, 2, [((0, 2),), ((2, 4),)]),
        (((0, 4),), (1,), 1, 3, [((0, 3),), ((3, 4),)]),
        # items of no bytes (a piece of 0 bytes divides nothing): as many chunks as the budget
        # has bytes
        (((0, 10),), (2,), 0, 4, [((0, 8),), ((8, 10),)]),
        # a chunk shape of 0 is read as 1
        (((0, 3),), (0,), 1, 1, [((0, 1),), ((1, 2),), ((2, 3),)]),
        # 2-D: the last dimension grows first; a whole row of chunks fits 3 chunks, not 4
        (
            ((0, 6), (0, 6)),
            (2, 2),
            4,
            48,
            [((0, 2), (0, 6)), ((2, 4), (0, 6)), ((4, 6), (0, 6))],
        ),
        # the last dimension whole, then two chunks along the first
        (((0, 6), (0, 6)), (2, 2), 4, 100, [((0, 4), (0, 6)), ((4, 6), (0, 6))]),
        # everything in one piece
        (((0, 6), (0, 6)), (2, 2), 4, 1000, [((0, 6), (0, 6))]),
        # an unaligned 2-D box, one chunk a piece
        (
            ((1, 4), (3, 6)),
            (2, 2),
            1,
            4,
            [
                ((1, 2), (3, 4)),
                ((1, 2), (4, 6)),
                ((2, 4), (3, 4)),
                ((2, 4), (4, 6)),
            ],
        ),
        # an unaligned 2-D box: the last dimension whole once the span of chunks it can
        # touch fits (a 3-wide box can touch 3 chunks of 2)
        (((1, 4), (3, 6)), (2, 2), 1, 12, [((1, 4), (3, 6))]),
        # two chunks along the last dimension: pieces cut at its multiples of 4
        (
            ((1, 4), (3, 6)),
            (2, 2),
            1,
            11,
            [((1, 2), (3, 4)), ((1, 2), (4, 6)), ((2, 4), (3, 4)), ((2, 4), (4, 6))],
        ),  # fmt: skip
        # 3-D: the last two dimensions whole, the first one chunk a piece
        (
            ((0, 4), (0, 2), (0, 3)),
            (1, 1, 3),
            2,
            12,
            [
                ((0, 1), (0, 2), (0, 3)),
                ((1, 2), (0, 2), (0, 3)),
                ((2, 3), (0, 2), (0, 3)),
                ((3, 4), (0, 2), (0, 3)),
            ],  # fmt: skip
        ),
        # a chunk larger than the box along a dimension: that dimension is whole
        (((0, 2), (0, 10)), (1, 100), 1, 10, [((0, 1), (0, 10)), ((1, 2), (0, 10))]),
        (((0, 2), (0, 10)), (1, 100), 1, 20, [((0, 2), (0, 10))]),
    ],
)
def test_tiles_of_small_boxes(box, chunks, itemsize, budget, want):
    assert _check_tiling(box, chunks, itemsize, budget) == want


def test_tiles_default_budget_is_tile_bytes():
    assert contract.TILE_BYTES == 4 << 20
    # 1-byte items in chunks of 1 MiB: four chunks a piece at the default budget
    box = ((0, 10 << 20),)
    want = [((0, 4 << 20),), ((4 << 20, 8 << 20),), ((8 << 20, 10 << 20),)]
    assert tiles(box, (1 << 20,), 1) == want
    assert tiles(box, (1 << 20,), 1, contract.TILE_BYTES) == want
    # one byte more per item: two chunks a piece
    assert tiles(box, (1 << 20,), 2)[:2] == [((0, 2 << 20),), ((2 << 20, 4 << 20),)]


def test_tiles_of_random_boxes_cover_them_aligned_and_within_the_budget():
    rng = random.Random(20261129)
    for _ in range(400):
        ndim = rng.randint(1, 3)
        chunks = [rng.randint(0, 5) for _ in range(ndim)]
        box = []
        for _ in range(ndim):
            a = rng.randint(0, 12)
            box.append((a, a + rng.randint(1, 12)))
        itemsize = rng.choice([1, 2, 4, 8])
        budget = rng.randint(1, 400)
        _check_tiling(tuple(box), chunks, itemsize, budget)


# ---------------------------------------------------------------------------------------------
# read_regions


class _Array:
    """A stored array of values held in memory, whose engine's `read_regions` records what it
    is handed and reads each request from the values (as it is consumed)."""

    def __init__(self, values: np.ndarray, calls: list) -> None:
        self.values = values
        self.calls = calls

    def read_regions(self, requests, *, max_in_flight, tile_bytes):
        self.calls.append((self, max_in_flight, tile_bytes))
        for request in requests:
            self.calls.append(request.tag)
            region = request.array.values[tuple(slice(a, b) for a, b in request.box)]
            yield request, np.array(region, dtype=request.dtype or region.dtype)


def test_read_regions_hands_every_request_to_the_first_arrays_engine():
    calls: list = []
    a = _Array(np.arange(12, dtype=np.int32).reshape(3, 4), calls)
    b = _Array(np.arange(5, dtype=np.float32), calls)  # another array of the same engine
    requests = [
        ReadRequest(a, ((0, 2), (1, 3)), None, "a0"),
        ReadRequest(b, ((1, 4),), np.dtype("float64"), "b0"),
        ReadRequest(a, ((2, 3), (0, 4)), None, "a1"),
    ]
    got = list(read_regions(requests, max_in_flight=3, tile_bytes=1234))
    assert calls == [(a, 3, 1234), "a0", "b0", "a1"]
    assert [r.tag for r, _ in got] == ["a0", "b0", "a1"]
    np.testing.assert_array_equal(got[0][1], [[1, 2], [5, 6]])
    assert got[1][1].dtype == np.float64
    np.testing.assert_array_equal(got[1][1], [1, 2, 3])
    np.testing.assert_array_equal(got[2][1], [[8, 9, 10, 11]])


def test_read_regions_defaults():
    calls: list = []
    a = _Array(np.arange(4, dtype=np.uint8), calls)
    list(read_regions([ReadRequest(a, ((0, 4),))]))
    assert calls[0] == (a, contract.DEFAULT_MAX_IN_FLIGHT, contract.TILE_BYTES)
    assert contract.DEFAULT_MAX_IN_FLIGHT == 8


def test_read_regions_consumes_the_requests_as_reading_proceeds():
    calls: list = []
    a = _Array(np.arange(4, dtype=np.uint8), calls)
    made: list = []

    def requests():
        for i in range(3):
            made.append(i)
            yield ReadRequest(a, ((i, i + 1),), None, i)

    stream = read_regions(requests(), max_in_flight=1)
    assert made == []  # nothing asked for before the first result
    request, data = next(stream)
    assert (request.tag, data.tolist(), made) == (0, [0], [0])
    assert [(r.tag, d.tolist()) for r, d in stream] == [(1, [1]), (2, [2])]
    assert made == [0, 1, 2]


def test_read_regions_of_no_request_yields_nothing():
    assert list(read_regions([])) == []
    assert list(read_regions(iter(()), max_in_flight=1)) == []


@pytest.mark.parametrize("max_in_flight", [0, -1])
def test_read_regions_refuses_fewer_than_one_read_in_flight(max_in_flight):
    calls: list = []
    a = _Array(np.arange(4, dtype=np.uint8), calls)
    error = raised(
        ValueError, list, read_regions([ReadRequest(a, ((0, 4),))], max_in_flight=max_in_flight)
    )
    assert error.args == ("max_in_flight must be at least 1",)
    assert calls == []


def test_read_regions_of_a_real_array_one_read_in_flight():
    """The python engine's arrays of a real item, one read in flight at a time: each request
    reads what the array's own `read` reads."""
    item = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"
    store = engines.open_store(LocalStore(str(item)), detect(item).item, backend="python")
    try:
        names = sorted(pb.key_listing(pb.item_keys(item, detect(item).item))["params"])
        arrays = [store.open(n) for n in names]
        requests = [
            ReadRequest(array, tuple((0, n) for n in array.shape), None, i)
            for i, array in enumerate(arrays)
        ]
        got = list(read_regions(requests, max_in_flight=1))
        assert [r.tag for r, _ in got] == sorted(r.tag for r, _ in got) == list(range(len(arrays)))
        for request, data in got:
            want = request.array.read(request.box).result()
            assert data.dtype == want.dtype and data.tobytes() == want.tobytes()
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# ImmediateFuture and array_file


def test_immediate_future_reads_when_asked():
    made = []
    future = contract.ImmediateFuture(lambda: made.append(1) or np.arange(3))
    assert made == []
    assert future.result().tolist() == [0, 1, 2]
    assert made == [1]


def _fmt(storage: Storage, processes=(), root=False) -> ItemFormat:
    return ItemFormat(storage, 2, True, False, ocdbt_processes=processes, has_root_manifest=root)


@pytest.mark.parametrize(
    "fmt, want",
    [
        (_fmt(Storage.PER_LEAF_ZARR), "params.w"),
        (_fmt(Storage.OCDBT, (0, 1), root=True), "manifest.ocdbt"),
        (_fmt(Storage.OCDBT, root=True), "manifest.ocdbt"),
        (_fmt(Storage.OCDBT, (3,)), "ocdbt.process_3/manifest.ocdbt"),
        (_fmt(Storage.OCDBT, (0, 1)), "ocdbt.process_*/manifest.ocdbt"),
    ],
)
def test_array_file(tmp_path, fmt, want):
    location = LocalStore(str(tmp_path))
    assert contract.array_file(location, fmt, "params.w") == f"{tmp_path}/{want}"
