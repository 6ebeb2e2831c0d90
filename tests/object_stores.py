"""What the object-store tests share (tests/test_s3.py, tests/test_gcs.py): an emulator server
on loopback for a module, and the `ockpt` command or a Python script run against it in a child
process with the emulator's environment."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1] / "reference"


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(command: list[str], ready_url: str, log: Path, what: str) -> Iterator[None]:
    """Run the server `command` (output to `log`) until the block ends; the test skips when
    `ready_url` does not answer within 30 s."""
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(f"{what} did not start: {log.read_text()[-500:]}")
                time.sleep(0.1)
        yield
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def child_env(env: dict) -> dict:
    """This process's environment plus `env`, with the checkout's package first on the path."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REFERENCE), full.get("PYTHONPATH")]))
    return full


def ockpt(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ockpt ARGS...` in a child with `env`; with `check`, it must exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(env),
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def python(env: dict, script: str, *args: str, timeout: int = 180) -> str:
    """Run `script` in a child Python with `env`; it must exit 0; its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(env),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def upload(put: Callable[[str, bytes], None], local: Path, prefix: str, *, skip: str | None = None):
    """`put(key, bytes)` every file of a local directory under `prefix` (but `skip`, a path
    relative to `local`), through the store's own client, not ockpt."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            rel = path.relative_to(local).as_posix()
            if skip is None or rel != skip:
                put(f"{prefix}/{rel}", path.read_bytes())
