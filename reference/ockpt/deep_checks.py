"""Deep checks on worker threads, reported in order, and the quick check of Orbax's chunks.

`OrderedChecks` runs checks (chunk decodes, OCDBT database walks) on one thread per core and
takes their results back on the calling thread in the order they were handed out, with the
findings made meanwhile kept behind them, so a deep validation's report is the same finding
for finding, in the same order, as one thread's (`PARALLEL = False`). `decodes_quickly` checks
a chunk stored as Orbax stores it (one zstd frame, or raw bytes) through a window of decoded
bytes, holding no chunk in memory; anything it does not vouch for goes to the zarr decoder,
which names the fault.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import Any

import zstandard

from ._threads import pool, workers
from .bytecodecs import zstd_frame_size
from .errors import OckptError
from .findings import Finding
from .store import ByteRange
from .zarr.codecs import BytesCodec, ZstdCodec

__all__ = ["PARALLEL", "OrderedChecks", "Outcome", "decodes_quickly", "plain_kind"]

#: A deep check decodes chunks and walks databases on worker threads (`_executor`), one per
#: core; False: all on the calling thread, one after another. Either way the report is the same,
#: finding for finding and in the same order (`OrderedChecks`).
PARALLEL = True
#: tasks handed to the worker threads at once, per worker (running or queued)
_PER_WORKER = 2
#: the decoded bytes of the chunks handed out at once (a larger chunk goes out alone)
_IN_FLIGHT_BYTES = 1 << 30
#: consecutive chunk checks go out as one task until it holds this many decoded bytes or
#: `_TASK_CHECKS` checks: a tiny chunk's trip to a worker thread costs more than decoding it
_TASK_BYTES = 1 << 20
_TASK_CHECKS = 64
#: decoded bytes a quick chunk check (`decodes_quickly`) takes from the zstd decoder at a time,
#: into a buffer each worker keeps; they are counted and dropped
_WINDOW = 4 << 20

_local = threading.local()


def _executor() -> ThreadPoolExecutor:
    """The worker threads of deep checks (`_threads.pool`)."""
    return pool("ockpt-validate")


@dataclass
class _Task:
    """Checks out on a worker thread, and what the calling thread does with each result."""

    future: Future
    takes: list[Callable[[Any], None]]
    nbytes: int


def _run_all(works: list[Callable[[], Any]]) -> list[Any]:
    return [work() for work in works]


class OrderedChecks:
    """Checks run on the worker threads whose results are taken on the calling thread in the
    order the checks were handed out, and the findings made meanwhile kept behind them: the
    report does not depend on which thread finishes first. At most `_PER_WORKER` tasks per
    worker, and `_IN_FLIGHT_BYTES` of decoded chunks, are out at once; consecutive checks go
    out as one task (`_TASK_BYTES`, `_TASK_CHECKS`). Without `PARALLEL` each check runs when
    handed out."""

    def __init__(self, emit: Callable[[Finding], None]) -> None:
        self._emit = emit
        self._pool = _executor() if PARALLEL else None
        self._limit = _PER_WORKER * workers()
        self._queue: deque[_Task | Finding] = deque()
        self._out = 0  # tasks in the queue, and their decoded bytes
        self._out_bytes = 0
        self._batch: list[tuple[Callable[[], Any], Callable[[Any], None]]] = []
        self._batch_bytes = 0
        self._taking = False  # a task's results are being taken: its findings go out at once

    def finding(self, finding: Finding) -> None:
        """Report `finding` after the results of every check handed out before it."""
        if self._taking:
            self._emit(finding)
            return
        self._send()
        if self._queue:
            self._queue.append(finding)
        else:
            self._emit(finding)

    def submit(
        self,
        work: Callable[[], Any],
        take: Callable[[Any], None],
        nbytes: int,
        *,
        alone: bool = False,
    ) -> None:
        """Run `work()` on a worker thread (in a copy of this thread's context: the limits in
        force) and, on this thread, `take` its result once the checks before it are taken;
        `nbytes`: the decoded bytes it holds at most; `alone`: a long check, a task of its own."""
        if self._pool is None:
            take(work())
            return
        if alone:
            self._send()
        self._batch.append((work, take))
        self._batch_bytes += nbytes
        if alone or self._batch_bytes >= _TASK_BYTES or len(self._batch) >= _TASK_CHECKS:
            self._send()
        self._take_ready()

    def _send(self) -> None:
        """Hand the checks gathered so far out as one task, once the tasks out leave room."""
        if not self._batch or self._pool is None:
            return
        batch, nbytes = self._batch, self._batch_bytes
        self._batch, self._batch_bytes = [], 0
        while self._out and (
            self._out >= self._limit or self._out_bytes + nbytes > _IN_FLIGHT_BYTES
        ):
            self._take_first()
        run = contextvars.copy_context().run
        future = self._pool.submit(run, _run_all, [work for work, _ in batch])
        self._queue.append(_Task(future, [take for _, take in batch], nbytes))
        self._out += 1
        self._out_bytes += nbytes

    def _take_first(self) -> None:
        """Take the findings queued first and the results of the first task (waiting for it)."""
        while self._queue:
            head = self._queue.popleft()
            if isinstance(head, Finding):
                self._emit(head)
                continue
            self._out -= 1
            self._out_bytes -= head.nbytes
            results = head.future.result()
            self._taking = True
            try:
                for take, result in zip(head.takes, results, strict=True):
                    take(result)
            finally:
                self._taking = False
            return

    def _take_ready(self) -> None:
        """Take what is at the front of the queue and done, without waiting."""
        while self._queue and (isinstance(self._queue[0], Finding) or self._queue[0].future.done()):
            self._take_first()

    def drain(self) -> None:
        """Wait for every check handed out and take the results and findings, in order."""
        self._send()
        while self._queue:
            self._take_first()

    def abandon(self) -> None:
        """After an error: cancel the tasks not started, wait for the running ones (they read
        files about to be closed), drop what is left."""
        tasks = [t.future for t in self._queue if isinstance(t, _Task)]
        for f in tasks:
            f.cancel()
        wait_for(tasks)
        self._queue.clear()
        self._batch, self._batch_bytes, self._out, self._out_bytes = [], 0, 0, 0


# ---------------------------------------------------------------------------------------------
# quick chunk checks


@dataclass
class Outcome:
    """What checking one chunk found: the stored bytes it read, its error, or why it was not
    decoded."""

    read: int = 0
    error: OckptError | None = None
    unchecked: str | None = None


def plain_kind(pipeline: Any) -> str | None:
    """How a chunk is stored: "zstd" for little-endian C-order bytes under one zstd frame
    (Orbax's), "raw" for those bytes alone; None for any other codecs."""
    if (
        sys.byteorder != "little"
        or pipeline.array_to_array
        or not isinstance(pipeline.array_to_bytes, BytesCodec)
        or pipeline.array_to_bytes.endian not in ("little", None)
    ):
        return None
    codecs = pipeline.bytes_to_bytes
    if not codecs:
        return "raw"
    return "zstd" if len(codecs) == 1 and isinstance(codecs[0], ZstdCodec) else None


def _window() -> memoryview:
    """This thread's buffer of `_WINDOW` bytes."""
    buf = getattr(_local, "window", None)
    if buf is None:
        buf = _local.window = memoryview(bytearray(_WINDOW))
    return buf


def decodes_quickly(kind: str, data: bytes | ByteRange, nbytes: int) -> bool:
    """Whether the stored chunk `data` (bytes, or a range of its file read in pieces) is
    exactly one zstd frame declaring and giving `nbytes` bytes (`kind` "zstd"), or `nbytes`
    raw bytes ("raw"). Decoded bytes pass through `_window` and are dropped, so the check
    holds no chunk in memory; False, whatever the fault, sends the chunk to the checked
    decoder, which names it."""
    if kind == "raw":
        if len(data) != nbytes:
            return False
        if isinstance(data, ByteRange):  # its bytes are read: a deep check reads them all
            while data.readinto(_window()):
                pass
            return data.position == nbytes
        return True
    try:
        if zstandard.get_frame_parameters(data[:18]).content_size != nbytes:
            return False
        if zstd_frame_size(data) != len(data):
            return False
        reader = zstandard.ZstdDecompressor().stream_reader(
            data, read_size=1 << 20, read_across_frames=False
        )
        got, window = 0, _window()
        while got <= nbytes and (n := reader.readinto(window)):
            got += n
    except zstandard.ZstdError:
        return False
    return got == nbytes
