"""`ockpt._threads`: the worker pools, in this process and in a child forked from it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from ockpt import _threads


def _in_forked_child(body) -> int:
    """Fork, run `body()` in the child (exit 0 when it returns True), and give back the child's
    exit status; a child still running after 60 s is killed (exit status -9)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os._exit(0 if body() else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_pool_is_made_once_per_kind_of_work():
    first = _threads.pool("test-once")
    assert _threads.pool("test-once") is first
    assert _threads.pool("test-other") is not first
    assert first._max_workers == _threads.workers() >= 1
    assert first.submit(lambda: 6 * 7).result(timeout=30) == 42


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # jax warns of any fork
def test_a_forked_child_runs_work_on_pools_of_its_own():
    parent = _threads.pool("test-fork")
    assert parent.submit(lambda: 1).result(timeout=30) == 1  # its threads started here

    def child() -> bool:
        mine = _threads.pool("test-fork")
        return mine is not parent and mine.submit(lambda: 2).result(timeout=20) == 2

    assert _in_forked_child(child) == 0
    assert _threads.pool("test-fork") is parent  # the parent keeps its own


def test_a_load_in_a_child_forked_after_a_load(tmp_path):
    """The python engine reads chunks on the pool: a child forked after a read (a forking data
    loader) reads too, where it once waited forever for threads it did not have."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        import numpy as np
        import ockpt

        path = sys.argv[1]
        value = np.arange(2048 * 512, dtype=np.float32).reshape(2048, 512)
        ockpt.save_pytree(path, {"w": value}, layout="item", chunk_byte_size=256 << 10)
        got = ockpt.load_pytree(path, backend="python")["w"]
        assert np.array_equal(got, value)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a child that waits for a thread it lacks dies of SIGALRM
            again = ockpt.load_pytree(path, backend="python")["w"]
            os._exit(0 if np.array_equal(again, value) else 1)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ck")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
