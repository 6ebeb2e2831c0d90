"""ockpt/store/inflight.py with stand-in files and futures: `BackgroundWriter` (appends and
closes in order on its one thread, the bytes it holds and its bound, settling writes already
done, `finish` raising the first failure after the write still running) and `InFlight` (its
bounds in bytes and count, `wait` in order)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ockpt.store.inflight import BackgroundWriter, InFlight

# --- store/inflight.py: BackgroundWriter (queue, submit's bound, _settle, finish), _QueuedFile,
# InFlight (add's bounds, wait) ---


class _File:
    """A new file of a store that records its appends and close, and the thread of each."""

    def __init__(self):
        self.calls = []

    def append(self, parts):
        self.calls.append(("append", [bytes(p) for p in parts], threading.current_thread().name))

    def close(self):
        self.calls.append(("close", None, threading.current_thread().name))


def _returns_within(call, seconds: float) -> tuple[bool, threading.Event]:
    """Whether `call()`, run on a thread, returns within `seconds`, and the event set once it
    has (it is left to finish)."""
    done = threading.Event()
    thread = threading.Thread(target=lambda: (call(), done.set()), daemon=True)
    thread.start()
    return done.wait(seconds), done


def test_queued_appends_and_close_run_in_order_on_the_writers_thread() -> None:
    writer = BackgroundWriter()
    f = _File()
    q = writer.queue(f)
    parts = [b"ab", memoryview(b"cd")]
    q.append(parts)
    parts.append(b"late")  # the caller's list may change: what was asked is written
    q.append([np.arange(3, dtype=np.uint16)])
    q.close()
    writer.finish()
    assert [(c[0], c[1]) for c in f.calls] == [
        ("append", [b"ab", b"cd"]),
        ("append", [np.arange(3, dtype=np.uint16).tobytes()]),
        ("close", None),
    ]
    assert all(c[2].startswith("ockpt-write") for c in f.calls)
    with pytest.raises(RuntimeError):  # finished: its thread is stopped
        writer.submit(lambda: None, 0)


def test_queued_appends_hold_their_bytes_until_written() -> None:
    writer = BackgroundWriter(max_bytes=1 << 20)
    gate = threading.Event()
    writer.submit(gate.wait, 0)  # the thread is busy until the gate opens
    q = writer.queue(_File())
    q.append([b"abc", memoryview(np.zeros(4, np.uint32))])  # bytes, not elements: 3 + 16
    assert writer._held == 19
    q.close()
    assert writer._held == 19  # a close holds nothing
    gate.set()
    writer.finish()
    assert writer._held == 0 and not writer._pending


def test_submit_waits_only_beyond_max_bytes() -> None:
    writer = BackgroundWriter(max_bytes=10)
    gate = threading.Event()
    writer.submit(gate.wait, 4)
    assert _returns_within(lambda: writer.submit(lambda: None, 6), 5)[0]  # 10: at the bound
    assert writer._held == 10
    returned, done = _returns_within(lambda: writer.submit(lambda: None, 1), 0.3)
    assert not returned  # 11: waits
    gate.set()
    assert done.wait(5)
    writer.finish()


def test_submit_settles_the_writes_already_done() -> None:
    writer = BackgroundWriter(max_bytes=100)
    writer.submit(lambda: None, 5)
    first = writer._pending[0][0]
    first.result(timeout=5)
    writer.submit(lambda: None, 3)  # the done one is settled first, though under the bound
    assert writer._held == 3 and len(writer._pending) == 1
    writer.finish()


def test_finish_raises_the_first_failure_and_cancels_the_rest() -> None:
    writer = BackgroundWriter()
    gate = threading.Event()
    ran = []

    def fail():
        gate.wait()
        raise OSError("disk full")

    writer.submit(fail, 1)
    writer.submit(lambda: ran.append(1), 1)
    writer.submit(lambda: ran.append(2), 1)
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        writer.finish()
    with pytest.raises(RuntimeError):
        writer.submit(lambda: None, 0)


def test_a_failure_is_raised_by_the_submit_that_settles_it() -> None:
    writer = BackgroundWriter(max_bytes=1)

    def fail():
        raise ValueError("bad write")

    writer.submit(fail, 1)
    with pytest.raises(ValueError, match="bad write"):
        writer.submit(lambda: None, 1)  # over the bound: waits for, and raises, the first
    writer.finish()


class _Results:
    def __init__(self):
        self.waited = []

    def __call__(self, future, what, nbytes):
        self.waited.append((future, what, nbytes))


def test_in_flight_waits_for_the_oldest_beyond_max_bytes() -> None:
    results = _Results()
    flight = InFlight(max_bytes=10, max_count=100)
    flight.add("f1", 4, "a", results)
    flight.add("f2", 6, "b", results)  # 10: at the bound
    assert results.waited == [] and flight._held == 10
    flight.add("f3", 1, "c", results)  # 11: the oldest is waited for
    assert results.waited == [("f1", "a", 4)] and flight._held == 7
    flight.add("f4", 20, "d", results)  # alone over the bound: all are waited for, itself too
    assert [w[0] for w in results.waited] == ["f1", "f2", "f3", "f4"] and flight._held == 0
    assert flight._futures == []


def test_in_flight_waits_for_the_oldest_beyond_max_count() -> None:
    results = _Results()
    flight = InFlight(max_bytes=1 << 30, max_count=2)
    flight.add("f1", 0, "a", results)
    flight.add("f2", 0, "b", results)
    assert results.waited == []
    flight.add("f3", 0, "c", results)
    assert results.waited == [("f1", "a", 0)]
    assert [f[0] for f in flight._futures] == ["f2", "f3"]


def test_in_flight_wait_takes_every_write_in_order() -> None:
    results = _Results()
    flight = InFlight()
    assert (flight._max_bytes, flight._max_count) == (128 << 20, 16)
    for i in range(16):
        flight.add(f"f{i}", 1 << 20, f"k{i}", results)
    assert results.waited == [] and flight._held == 16 << 20
    flight.add("f16", 0, "k16", results)  # 17 in flight: one too many
    assert results.waited == [("f0", "k0", 1 << 20)]
    flight.wait(results)
    want = [(f"f{i}", f"k{i}", 1 << 20) for i in range(16)] + [("f16", "k16", 0)]
    assert results.waited == want
    assert flight._held == 0 and flight._futures == []
    flight.wait(results)  # nothing left: nothing waited for
    assert len(results.waited) == 17


def test_in_flight_default_bytes_bound() -> None:
    results = _Results()
    flight = InFlight()
    flight.add("big", 128 << 20, "k", results)
    assert results.waited == []
    flight.add("one", 1, "k", results)
    assert results.waited == [("big", "k", 128 << 20)]


def test_background_writer_default_bound() -> None:
    writer = BackgroundWriter()
    assert writer._max_bytes == 128 << 20
    gate = threading.Event()
    writer.submit(gate.wait, 128 << 20)
    returned, done = _returns_within(lambda: writer.submit(lambda: None, 1), 0.3)
    assert not returned
    gate.set()
    assert done.wait(5)
    writer.finish()


def test_in_flight_wait_releases_every_byte() -> None:
    results = _Results()
    flight = InFlight()
    flight.add("a", 3, "ka", results)
    flight.add("b", 4, "kb", results)
    flight.wait(results)
    assert results.waited == [("a", "ka", 3), ("b", "kb", 4)]
    assert flight._held == 0


def test_background_writer_runs_one_write_at_a_time() -> None:
    writer = BackgroundWriter()
    other_ran = threading.Event()
    seen = []
    writer.submit(lambda: seen.append(other_ran.wait(1)), 0)
    writer.submit(other_ran.set, 0)  # one thread: it cannot run while the first waits
    writer.finish()
    assert seen == [False] and other_ran.is_set()


def test_finish_after_a_failure_waits_for_the_write_still_running() -> None:
    writer = BackgroundWriter()
    gate, started = threading.Event(), threading.Event()
    finished = []

    def fail():
        gate.wait()
        raise OSError("first")

    def slow():
        started.set()
        time.sleep(0.3)
        finished.append(True)

    writer.submit(fail, 1)
    writer.submit(slow, 1)
    gate.set()
    assert started.wait(5)  # the failure is in, and the next write runs
    with pytest.raises(OSError, match="first"):
        writer.finish()
    assert finished == [True]
