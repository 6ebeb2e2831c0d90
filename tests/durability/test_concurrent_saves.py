"""Concurrent saves to one path (DIR-003, DIR-008): several processes save to the same path at
the same instant, over many trials, with and without overwrite, with the rename fallback of an
overwrite, and through `CheckpointManager` with retention.

Every save must either commit one whole tree or raise `WriteConflictError`; what the path
holds afterwards loads as exactly one writer's tree, bit for bit; nothing temporary is left
behind (each save removes its own temporary directory and the checkpoint it replaced).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.layout import is_temporary_name
from tests.support import CHILDREN
from tests.support.children.concurrent_save import tree

CHILD = CHILDREN / "concurrent_save.py"

WRITERS = 3
TRIALS = 25


def _run(mode: str, base: Path, trials: int = TRIALS) -> list[list[str]]:
    """Start the writers, release them together for each trial; each writer's outcomes."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), mode, str(base), str(w), str(trials)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    try:
        for trial in range(trials):
            deadline = time.monotonic() + 120
            while not all((base / f"ready-{trial}-{w}").exists() for w in range(WRITERS)):
                assert time.monotonic() < deadline, f"writers never got ready for trial {trial}"
                assert all(p.poll() is None for p in procs), "a writer died"
                time.sleep(0.001)
            (base / f"go-{trial}").touch()
        outcomes = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode == 0, stderr[-3000:]
            outcomes.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outcomes


def _assert_whole(got, want) -> None:  # type: ignore[no-untyped-def]
    assert got["name"] == want["name"]
    for key in ("w", "b"):
        assert np.asarray(got[key]).tobytes() == want[key].tobytes(), (key, want["name"])
    for g, w in zip(got["layers"], want["layers"], strict=True):
        assert np.asarray(g["k"]).tobytes() == w["k"].tobytes(), want["name"]


def _which_writer(path: Path, trial: int) -> int:
    """The writer whose tree `path` holds, checked whole."""
    got = ockpt.load_pytree(path, backend="python")
    writer = int(got["name"].split("-")[1])
    _assert_whole(got, tree(writer, trial))
    assert ockpt.validate(path, deep=True).ok
    return writer


@pytest.mark.parametrize("mode", ["plain", "overwrite", "overwrite-fallback"])
def test_concurrent_saves_to_one_path(tmp_path, mode):
    """Without overwrite exactly one writer commits and the others get WriteConflictError
    (DIR-002); with overwrite every save commits, one after the other, and the path holds the
    last one's tree whole."""
    outcomes = _run(mode, tmp_path)
    for trial in range(TRIALS):
        got = [outcomes[w][trial] for w in range(WRITERS)]
        assert not [o for o in got if o.startswith("error")], got
        if mode == "plain":
            assert sorted(got) == ["conflict"] * (WRITERS - 1) + ["saved"], (trial, got)
        else:
            assert got == ["saved"] * WRITERS, (trial, got)
        writer = _which_writer(tmp_path / str(trial) / "ckpt", trial)
        if mode == "plain":
            assert got[writer] == "saved", (trial, got)
        assert os.listdir(tmp_path / str(trial)) == ["ckpt"], (trial, got)


def test_concurrent_managers_of_one_root(tmp_path):
    """Several managers of one root save each step at once and keep two: one writer commits
    each step, the others get WriteConflictError; retention by several managers at once
    leaves the two newest steps, each one writer's whole tree, and no temporary directory."""
    outcomes = _run("manager", tmp_path)
    for trial in range(TRIALS):
        got = [outcomes[w][trial] for w in range(WRITERS)]
        assert sorted(got) == ["conflict"] * (WRITERS - 1) + ["saved"], (trial, got)
    root = tmp_path / "root"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ockpt.OckptWarning)  # no temporaries left behind
        mgr = ockpt.CheckpointManager(root)
    assert mgr.all_steps() == [TRIALS - 2, TRIALS - 1]
    assert mgr.temporaries() == []
    for step in mgr.all_steps():
        got = mgr.restore(step, backend="python")
        writer = int(got["name"].split("-")[1])
        assert outcomes[writer][step] == "saved"
        _assert_whole(got, tree(writer, step))
    assert not [n for n in os.listdir(root) if is_temporary_name(n)]
