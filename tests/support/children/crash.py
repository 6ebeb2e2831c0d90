"""Child process of tests/durability/test_crash.py: one save, killed (SIGKILL) at a chosen file-system event.

    python _crash_child.py manager ROOT STEP [MAX_TO_KEEP] [USE_OCDBT]
    python _crash_child.py pytree PATH STEP
    python _crash_child.py overwrite PATH STEP      (save_pytree with overwrite=True)

Every file-system call the save makes from Python (open for writing, mkdir, rename, replace,
unlink, rmtree, fsync, renameat2 through ctypes) and each item write that tensorstore performs
counts as one event.
``OCKPT_KILL_AT=N`` kills the process with SIGKILL just before event N (1-based);
``OCKPT_NO_EXCHANGE=1`` makes renameat2 unavailable (the rename fallback of an overwrite);
``OCKPT_TRACE=1`` adds the list of events (``"<call> <file name>"``; for fsync, the absolute
path of the file or directory flushed) to the JSON line;
``OCKPT_ENOSPC_AT=N`` makes event N (and every later write) fail with ENOSPC instead;
``OCKPT_WAIT_FOR=FILE`` waits until FILE exists before saving (to start two writers together).
The last line printed is a JSON object: ``{"result": ..., "events": N}``.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "reference"))

import numpy as np  # noqa: E402

KILL_AT = int(os.environ.get("OCKPT_KILL_AT", "0"))
ENOSPC_AT = int(os.environ.get("OCKPT_ENOSPC_AT", "0"))
TRACE = bool(os.environ.get("OCKPT_TRACE"))
events = 0
trace: list[str] = []


def _event(what: str, writes: bool = True) -> None:
    global events
    events += 1
    if TRACE:
        trace.append(what)
    if KILL_AT and events == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    if ENOSPC_AT and events >= ENOSPC_AT and writes:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), what)


def _wrap(module, name: str, *, writes=lambda *a, **k: True) -> None:  # type: ignore[no-untyped-def]
    original = getattr(module, name)

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        if writes(*args, **kwargs):
            _event(f"{name} {_subject(args)}" if TRACE else name)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)


def _subject(args: tuple) -> str:  # type: ignore[type-arg]
    """What a call acts on, for the trace: the base name of a path argument; for a file
    descriptor (fsync), the whole path it refers to (Linux /proc), or "?" elsewhere."""
    first = args[0] if args else ""
    if isinstance(first, int):
        try:
            return os.readlink(f"/proc/self/fd/{first}")
        except OSError:
            return "?"
    return os.path.basename(os.fspath(first)) if isinstance(first, (str, os.PathLike)) else ""


def _writing_open(file, mode="r", *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
    return any(c in mode for c in "wax+")


def _writing_os_open(path, flags, *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
    return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))


def install() -> None:
    _wrap(builtins, "open", writes=_writing_open)
    _wrap(os, "open", writes=_writing_os_open)
    for name in ("mkdir", "rename", "replace", "unlink", "remove", "rmdir", "fsync"):
        _wrap(os, name)
    _wrap(shutil, "rmtree")
    from ockpt import writer
    from ockpt.store import commit

    if os.environ.get("OCKPT_NO_EXCHANGE"):
        commit._renameat2 = lambda src, dst, flags: False  # as without renameat2
    _wrap(commit, "_renameat2")

    for name in ("_write_item", "_finish_item"):  # array data written by tensorstore
        _wrap(writer, name)


def tree(step: int) -> dict:
    """The tree saved at `step` (every value depends on the step)."""
    return {
        "params": {
            "w": np.arange(3000, dtype=np.float32).reshape(30, 100) * (step + 1),
            "b": np.full((7,), step, dtype=np.int64),
        },
        "opt": [np.array(step, dtype=np.int32), {"count": np.uint8(step % 256)}],
        "name": f"step-{step}",
    }


def main() -> None:
    mode, path, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import ockpt

    wait = os.environ.get("OCKPT_WAIT_FOR")
    if wait:
        deadline = time.monotonic() + 30
        while not os.path.exists(wait) and time.monotonic() < deadline:
            time.sleep(0.001)
    install()
    try:
        if mode == "manager":
            keep = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] != "none" else None
            ocdbt = len(sys.argv) <= 5 or sys.argv[5] == "1"
            opts = ockpt.SaveOptions(use_ocdbt=ocdbt)
            mgr = ockpt.CheckpointManager(path, max_to_keep=keep, options=opts)
            result = "saved" if mgr.save(step, tree(step)) else "skipped"
        else:
            ockpt.save_pytree(path, tree(step), overwrite=mode == "overwrite")
            result = "saved"
    except ockpt.WriteConflictError as e:
        result = f"conflict: {e}"
    except ockpt.OckptError as e:
        result = f"{type(e).__name__}: {e}"
    except OSError as e:
        result = f"OSError: {e}"
    out: dict = {"result": result, "events": events}
    if TRACE:
        out["trace"] = trace
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
