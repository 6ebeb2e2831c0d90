"""Writes that run while the caller goes on, bounded in the bytes they hold.

* `BackgroundWriter`: appends to and closes a store's new files on a thread of its own, so
  that the thread encoding chunks never waits for the kernel or the disk;
* `InFlight`: writes started and not yet waited for (an object store's uploads).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["BackgroundWriter", "InFlight"]


class BackgroundWriter:
    """Appends to and closes new files of a store (`NewFile`) on a thread of its own, in the
    order asked, so that the thread handing out encoded chunks does not wait for the kernel's
    copy into the page cache or for the disk. At most `max_bytes` of buffers wait at once
    (`append` waits beyond that); `finish` waits for everything and raises the first failure.
    """

    def __init__(self, *, max_bytes: int = 128 << 20) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ockpt-write")
        self._pending: deque[tuple[Future[None], int]] = deque()
        self._held = 0
        self._max_bytes = max_bytes

    def queue(self, file: Any) -> _QueuedFile:
        """`file` (a new file of a store: `base.NewFile`) with its appends and close queued."""
        return _QueuedFile(self, file)

    def submit(self, job: Callable[[], None], nbytes: int) -> None:
        while self._pending and (
            self._held + nbytes > self._max_bytes or self._pending[0][0].done()
        ):
            self._settle()
        self._pending.append((self._pool.submit(job), nbytes))
        self._held += nbytes

    def _settle(self) -> None:
        future, nbytes = self._pending.popleft()
        self._held -= nbytes
        future.result()

    def finish(self) -> None:
        """Wait for every queued write and close (raising the first failure), and stop."""
        try:
            while self._pending:
                self._settle()
        finally:
            for future, _ in self._pending:
                future.cancel()
            self._pool.shutdown(wait=True)


class _QueuedFile:
    """A `NewFile` whose appends and close run on a `BackgroundWriter`'s thread."""

    def __init__(self, writer: BackgroundWriter, file: Any) -> None:
        self._writer = writer
        self._file = file

    def append(self, parts: Sequence[bytes | memoryview]) -> None:
        parts = list(parts)  # the caller's list may change; the buffers are held until written
        nbytes = sum(memoryview(p).nbytes for p in parts)
        self._writer.submit(lambda: self._file.append(parts), nbytes)

    def close(self) -> None:
        self._writer.submit(self._file.close, 0)


class InFlight:
    """Writes started and not yet waited for, bounded in bytes: `add` waits for the oldest
    while more than `max_bytes` are held; `wait` for all (the first failure raised). Each is
    waited for by ``result(future, what, nbytes)``."""

    def __init__(self, *, max_bytes: int = 128 << 20, max_count: int = 16) -> None:
        self._lock = threading.Lock()
        self._futures: list[tuple[Any, int, str]] = []
        self._held = 0
        self._max_bytes = max_bytes
        self._max_count = max_count

    def add(self, future: Any, nbytes: int, what: str, result: Any) -> None:
        with self._lock:
            self._futures.append((future, nbytes, what))
            self._held += nbytes
        while True:
            with self._lock:
                if not self._futures or (
                    self._held <= self._max_bytes and len(self._futures) <= self._max_count
                ):
                    return
                oldest = self._futures.pop(0)
                self._held -= oldest[1]
            result(oldest[0], oldest[2], oldest[1])

    def wait(self, result: Any) -> None:
        while True:
            with self._lock:
                if not self._futures:
                    return
                oldest = self._futures.pop(0)
                self._held -= oldest[1]
            result(oldest[0], oldest[2], oldest[1])
