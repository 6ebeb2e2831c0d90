"""ockpt/store/byterange.py on real files: `vectored` (batches of `IOV_MAX`, a buffer moved in
part continued, a short stop) and `ByteRange` (reads clamped to the range, indexing through
its 64-byte window, `read`, `readinto`, `read_scattered`, parts that leave the file open,
closing)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ockpt.store import byterange
from ockpt.store.byterange import IOV_MAX, ByteRange, vectored

# --- store/byterange.py: vectored and ByteRange (close, part, pread, indexing with its read
# window, read, read_scattered, readinto) ---

DATA = bytes(range(256)) * 2


@pytest.fixture
def data_fd(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    yield path, fd
    try:
        os.close(fd)
    except OSError:
        pass


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_vectored_moves_buffers_in_batches_of_iov_max_continuing_a_part_moved() -> None:
    source = bytes(range(256)) * 10
    buffers = [memoryview(bytearray(2)) for _ in range(IOV_MAX + 6)]
    calls = []

    def call(batch, done):
        calls.append((len(batch), len(batch[0]), done))
        n = min(sum(len(b) for b in batch), 5)  # at most 5 bytes a call: buffers split
        pos = done
        left = n
        for b in batch:
            k = min(len(b), left)
            b[:k] = source[pos : pos + k]
            pos += k
            left -= k
            if not left:
                break
        return n

    total = 2 * (IOV_MAX + 6)
    assert vectored(buffers, call) == total
    assert b"".join(bytes(b) for b in buffers) == source[:total]
    assert all(n <= IOV_MAX for n, _, _ in calls)
    # the third buffer, moved in part, comes first in the next batch with what is left of it
    assert calls[0] == (IOV_MAX, 2, 0) and calls[1] == (IOV_MAX, 1, 5)
    assert calls[-1][0] < IOV_MAX
    assert [done for _, _, done in calls] == list(range(0, total, 5))
    assert IOV_MAX == 1024


def test_vectored_stops_short_when_a_call_moves_nothing() -> None:
    buffers = [memoryview(bytearray(4)), memoryview(bytearray(4))]
    answers = iter([3, 0, 7])
    assert vectored(buffers, lambda batch, done: next(answers)) == 3
    assert vectored([], lambda batch, done: 1 / 0) == 0
    moved = []
    assert vectored(buffers, lambda batch, done: moved.append(len(batch[0])) or 4) == 8
    assert moved == [4, 4]  # a buffer moved whole is not moved again


def test_vectored_starts_the_next_batch_whole_after_a_batch_moved_whole() -> None:
    buffers = [np.zeros(1, np.uint8) for _ in range(IOV_MAX + 3)]
    firsts = []

    def call(batch, done):
        firsts.append(len(batch[0]))
        for k, b in enumerate(batch):
            b[:] = (done + k) % 251 + 1
        return len(batch)

    assert vectored(buffers, call) == IOV_MAX + 3
    assert firsts == [1, 1]
    assert [int(b[0]) for b in buffers] == [i % 251 + 1 for i in range(IOV_MAX + 3)]


def test_a_range_reads_within_itself(data_fd) -> None:
    _, fd = data_fd
    r = ByteRange(fd, 10, 100, "d")
    assert (r.fd, r.offset, r.length, r.display, r.owner, r.position) == (fd, 10, 100, "d", True, 0)
    assert len(r) == 100
    assert r.pread(0, 3) == DATA[10:13]
    assert r.pread(95, 10) == DATA[105:110]  # short at its end
    assert r.pread(100, 5) == b"" and r.pread(3, 0) == b"" and r.pread(120, 5) == b""
    assert r.pread(99, 1) == DATA[109:110]


def test_indexing_a_range_and_its_slices(data_fd) -> None:
    _, fd = data_fd
    r = ByteRange(fd, 10, 100, "d")
    assert r[0] == DATA[10] and r[99] == DATA[109]
    assert r[-1] == DATA[109] and r[-100] == DATA[10]
    for bad, shown in ((100, 100), (101, 101), (-101, -1)):
        with pytest.raises(IndexError) as e:
            r[bad]
        assert e.value.args == (shown,)
    assert r[2:5] == DATA[12:15]
    assert r[95:200] == DATA[105:110]
    assert r[-3:] == DATA[107:110]
    assert r[:] == DATA[10:110]
    assert r[5:2] == b""
    with pytest.raises(ValueError) as e:
        r[0:10:2]
    assert str(e.value) == "ByteRange slices take step 1"


def test_indexing_reads_a_window_of_64_bytes_per_miss(data_fd, monkeypatch) -> None:
    _, fd = data_fd
    reads = []
    real = os.pread
    monkeypatch.setattr(
        byterange.os, "pread", lambda f, n, at: reads.append((n, at)) or real(f, n, at)
    )
    r = ByteRange(fd, 10, 200, "d")
    assert [r[i] for i in range(64)] == list(DATA[10:74])
    assert reads == [(64, 10)]
    assert r[64] == DATA[74] and reads[-1] == (64, 74)
    assert r[64] == DATA[74] and len(reads) == 2  # the window's first byte: no new read
    assert r[127] == DATA[137] and len(reads) == 2  # within the window at 64
    assert r[63] == DATA[73] and reads[-1] == (64, 73)  # before it: a new window
    assert r[190] == DATA[200] and reads[-1] == (10, 200)  # the window stops at the range's end
    assert r[199] == DATA[209] and len(reads) == 4
    assert r.pread(200, 5) == b"" and r.read(0) == b"" and len(reads) == 4  # no empty reads
    r.position = 200
    assert r.read() == b"" and len(reads) == 4


def test_indexing_a_range_whose_file_shrank(data_fd) -> None:
    path, fd = data_fd
    r = ByteRange(fd, 10, 100, "d")
    os.truncate(path, 50)
    assert r[39] == DATA[49]
    with pytest.raises(IndexError) as e:
        r[40]
    assert e.value.args == (40,)


def test_read_is_sequential(data_fd) -> None:
    _, fd = data_fd
    r = ByteRange(fd, 10, 20, "d")
    assert r.read(3) == DATA[10:13] and r.position == 3
    assert r.read(0) == b"" and r.position == 3
    assert r.read() == DATA[13:30] and r.position == 20
    assert r.read() == b"" and r.read(5) == b""
    r2 = ByteRange(fd, 10, 20, "d")
    assert r2.read(-5) == DATA[10:30]
    r3 = ByteRange(fd, 10, 20, "d")
    assert r3.read(50) == DATA[10:30] and r3.position == 20


def test_readinto_fills_from_the_position(data_fd, monkeypatch) -> None:
    path, fd = data_fd
    r = ByteRange(fd, 10, 20, "d")
    view = memoryview(bytearray(8))
    assert r.readinto(view) == 8 and bytes(view) == DATA[10:18] and r.position == 8
    big = memoryview(bytearray(30))
    assert r.readinto(big) == 12 and bytes(big[:12]) == DATA[18:30] and r.position == 20
    assert r.readinto(big) == 0 and r.position == 20
    # preadv may move fewer bytes than asked: the rest is asked again
    real = os.preadv
    asked = []

    def short(f, buffers, at):
        asked.append((len(buffers[0]), at))
        return real(f, [buffers[0][:3]], at)

    monkeypatch.setattr(byterange.os, "preadv", short)
    r = ByteRange(fd, 10, 20, "d")
    r.read(2)
    view = memoryview(bytearray(7))
    assert r.readinto(view) == 7 and bytes(view) == DATA[12:19]
    assert asked == [(7, 12), (4, 15), (1, 18)]
    monkeypatch.setattr(byterange.os, "preadv", real)
    os.truncate(path, 15)  # the file shrank: short
    r = ByteRange(fd, 10, 20, "d")
    view = memoryview(bytearray(10))
    assert r.readinto(view) == 5 and bytes(view[:5]) == DATA[10:15] and r.position == 5


def test_read_scattered_fills_buffers_in_order(data_fd) -> None:
    path, fd = data_fd
    r = ByteRange(fd, 10, 20, "d")
    a, b = memoryview(bytearray(3)), np.zeros(4, np.uint8)
    assert r.read_scattered([a, b], 2) == 7
    assert bytes(a) == DATA[12:15] and bytes(b) == DATA[15:19]
    assert r.read_scattered([memoryview(bytearray(20))], 0) == 20  # the whole range
    for at, buffers in ((14, [a, b]), (-1, [a]), (0, [memoryview(bytearray(21))])):
        with pytest.raises(ValueError) as e:
            r.read_scattered(buffers, at)
        assert str(e.value) == f"buffers from {at} run past a range of 20"
    os.truncate(path, 20)
    c = memoryview(bytearray(8))
    assert r.read_scattered([c], 5) == 5 and bytes(c[:5]) == DATA[15:20]


def test_a_part_shares_the_file_and_leaves_it_open(data_fd) -> None:
    _, fd = data_fd
    r = ByteRange(fd, 10, 100, "d")
    p = r.part(5, 20)
    assert (p.fd, p.offset, p.length, p.display, p.owner) == (fd, 15, 20, "d", False)
    assert p.read() == DATA[15:35]
    assert r.part(0, 100).length == 100 and r.part(100, 0).length == 0
    for offset, length in ((-1, 5), (0, -1), (90, 11), (101, 0)):
        with pytest.raises(ValueError) as e:
            r.part(offset, length)
        assert str(e.value) == (f"part [{offset}, {offset + length}) outside a range of 100")
    p.close()
    assert p.fd == -1 and _fd_open(fd)
    with r:
        assert r.read(1) == DATA[10:11]
    assert r.fd == -1 and not _fd_open(fd)
    r.close()  # closing again closes nothing
    assert r.fd == -1


def test_a_range_on_descriptor_0_is_closed_too(data_fd) -> None:
    _, fd = data_fd
    saved = os.dup(0)
    try:
        os.dup2(fd, 0)
        r = ByteRange(0, 0, 4, "d")
        assert r.read() == DATA[:4]
        r.close()
        assert r.fd == -1 and not _fd_open(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
