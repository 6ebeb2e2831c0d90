"""Child process of tests/hostile/test_hostile_suite.py: every entry point on one hostile checkpoint,
each in its own forked process under a hard address-space limit and a time limit.

    python _hostile_child.py PATH ENTRY [ENTRY ...]

ENTRY is an API (``load_pytree``, ``load_pytree:tensorstore``, ``pytree_metadata``, ``open``,
``validate``, ``validate:deep``) or a command (``cli:inspect``, ``cli:cat``, ...: the command
on PATH, with what it needs besides). The last line printed is a JSON object mapping each
ENTRY to its outcome: ``{"outcome": "ok" | "refused" | "invalid" | "escaped" | "killed",
"type", "rule", "message", "exit", "seconds", "peak_mb"}``.

The address-space limit (``OCKPT_HOSTILE_AS_BYTES``, default 4 GiB) is set before ockpt is
imported; nothing that starts threads (jax, tensorstore) is imported before the forks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "reference"))

AS_BYTES = int(os.environ.get("OCKPT_HOSTILE_AS_BYTES", str(4 << 30)))
SECONDS = int(os.environ.get("OCKPT_HOSTILE_SECONDS", "30"))
resource.setrlimit(resource.RLIMIT_AS, (AS_BYTES, AS_BYTES))

import ockpt  # noqa: E402
from ockpt import cli  # noqa: E402


def _read_all(path: str) -> None:
    with ockpt.open(path) as ckpt:
        for name in ckpt.keys():
            value = ckpt[name]
            if hasattr(value, "read"):
                value.read()


def _api(entry: str, path: str) -> dict:
    name, _, option = entry.partition(":")
    if name == "load_pytree":
        ockpt.load_pytree(path, backend=option or "auto")
    elif name == "pytree_metadata":
        ockpt.pytree_metadata(path)
    elif name == "open":
        _read_all(path)
    elif name == "validate":
        report = ockpt.validate(path, deep=option == "deep")
        if not report.ok:
            first = report.errors[0]
            return {"outcome": "invalid", "rule": first.rule, "rules": sorted(report.rules)}
    else:
        raise SystemExit(f"unknown entry {entry!r}")
    return {"outcome": "ok"}


def _a_leaf(path: str) -> str:
    """The first leaf's name, for `cat` to read (``x`` where the tree cannot be read)."""
    try:
        with ockpt.open(path) as ckpt:
            return next(iter(ckpt.keys()), "x")
    except ockpt.OckptError:
        return "x"


def _command(entry: str, path: str, scratch: str) -> dict:
    command = entry.split(":", 1)[1]
    argv = {
        "inspect": ["inspect", path],
        "cat": ["cat", path, _a_leaf(path) if command == "cat" else "x"],
        "tree": ["tree", path],
        "ls": ["ls", path],
        "detect": ["detect", path],
        "convert": ["convert", path, f"{scratch}/out.pt", "--skip-unsupported", "--no-progress"],
        "diff": ["diff", path, path, "--no-progress"],
        "validate": ["validate", path, "--no-progress"],
        "cp": ["cp", path, f"{scratch}/copy", "--no-progress"],
    }[command]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    output = out.getvalue()[-4000:] + err.getvalue()[-4000:]
    return {"outcome": "ok" if code == 0 else "invalid", "exit": code, "output": output}


def _run(entry: str, path: str, scratch: str) -> dict:
    start = time.monotonic()
    try:
        if entry.startswith("cli:"):
            result = _command(entry, path, scratch)
        else:
            result = _api(entry, path)
    except ockpt.OckptError as e:
        result = {"outcome": "refused", "type": type(e).__name__, "rule": e.rule}
        result["message"] = str(e)[:500]
    except BaseException as e:  # noqa: BLE001 - what escaped is the finding
        result = {"outcome": "escaped", "type": type(e).__name__}
        result["message"] = traceback.format_exc()[-2000:]
    result["seconds"] = round(time.monotonic() - start, 3)
    result["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def _forked(entry: str, path: str) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the entry point, alone in its process
        os.close(read)
        signal.alarm(SECONDS)
        with tempfile.TemporaryDirectory() as scratch:
            result = _run(entry, path, scratch)
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return {"outcome": "killed", "signal": killed_by}
    return json.loads(b"".join(chunks))


def main() -> None:
    path, entries = sys.argv[1], sys.argv[2:]
    print(json.dumps({entry: _forked(entry, path) for entry in entries}))


if __name__ == "__main__":
    main()
