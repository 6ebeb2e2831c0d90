"""Crashes and concurrency: a writer killed (SIGKILL) at every file-system event of a save or
of an overwrite, two writers racing for one step, a reader listing while a writer saves, and a
full disk.

The writer runs in a child process (tests/support/children/crash.py) that counts the file-system calls
the save makes from Python (and each item that tensorstore writes) and kills itself just before
event N. After each kill: every checkpoint committed before still loads bit-equal; nothing
partial is listed or detected as committed; the manager reports the temporary directories left
behind and removes them on request without touching committed steps (DIR-004, DIR-005,
LOAD-054). An overwrite killed anywhere leaves the old checkpoint or the new one at the path,
never neither once recovered (DIR-006, DIR-007), and a reader names the parked one (LAYOUT-006).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

import ockpt
from ockpt.layout import Kind, is_temporary_name
from ockpt.names import TMP_MARKER
from ockpt.store import commit
from tests.support import CHILDREN, ROOT
from tests.support.children.crash import tree
from tests.support.errors import assert_error

CHILD = CHILDREN / "crash.py"

T = TypeVar("T")


def child(*args: object, env: dict | None = None, timeout: float = 60) -> tuple[int, dict]:
    """Run the child; (return code, its last JSON line or {})."""
    proc = subprocess.run(
        [sys.executable, str(CHILD), *map(str, args)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode, out


def assert_tree_equal(got, want) -> None:  # type: ignore[no-untyped-def]
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for k in want:
            assert_tree_equal(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_tree_equal(g, w)
    elif isinstance(want, str):
        assert got == want
    else:
        g, w = np.asarray(got), np.asarray(want)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def check_root(root: Path, *, must_have: set[int], may_have: set[int]) -> list[int]:
    """Every listed step is committed, loads bit-equal and is one of those expected; nothing
    temporary is listed or detected as a step."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ockpt.OckptWarning)  # temporaries left: expected here
        mgr = ockpt.CheckpointManager(root)
    steps = mgr.all_steps()
    assert must_have <= set(steps) <= must_have | may_have, steps
    layout = ockpt.detect(root)
    assert layout.kind is Kind.MANAGER_ROOT
    assert sorted(s.step for s in layout.steps if s.committed) == steps
    for s in layout.steps:
        assert s.committed != is_temporary_name(s.name)
        assert s.has_commit_file or not s.committed
    for step in steps:
        assert_tree_equal(mgr.restore(step, backend="python"), tree(step))
    for tmp in mgr.temporaries():
        assert is_temporary_name(os.path.basename(tmp))
        assert ockpt.detect(tmp).kind is Kind.TEMPORARY
        with pytest.raises(ockpt.NotACheckpointError):
            ockpt.load_pytree(tmp, backend="python")
    return steps


def _events(root: Path, *args: object) -> int:
    code, out = child("manager", root, *args)
    assert code == 0 and out["result"] == "saved", out
    return out["events"]


def prepare_save(tmp_path: Path, name: str, ocdbt: str) -> tuple[Path, int]:
    """A root holding committed steps 0 and 1, and the number of events of saving step 2."""
    base = tmp_path / f"{name}-base"
    for step in (0, 1):
        _events(base, step, 2, ocdbt)
    probe = tmp_path / f"{name}-probe"
    shutil.copytree(base, probe)
    n = _events(probe, 2, 2, ocdbt)
    assert ockpt.CheckpointManager(probe).all_steps() == [1, 2]  # step 0 deleted (retention)
    return base, n


def killed_at_each(points: Iterable[int], run: Callable[[int], T]) -> Iterator[T]:
    """``run(kill_at)`` for each kill point, two children at a time (the checks of one kill
    overlap the next children), the results in order."""
    with ThreadPoolExecutor(2) as pool:
        yield from pool.map(run, points)


@pytest.mark.slow  # the slow matrix: a save killed at each of its events
@pytest.mark.parametrize("ocdbt", ["1", "0"], ids=["ocdbt", "per_leaf"])
def test_manager_save_killed_at_every_event(tmp_path, ocdbt):
    """SIGKILL before each event of a manager save that also deletes the oldest step (every
    one of its ~60 events with OCDBT, ~75 per leaf)."""
    base, n = prepare_save(tmp_path, "root", ocdbt)

    def run(kill_at: int) -> tuple[Path, int, dict]:
        root = tmp_path / f"kill-{kill_at}"
        shutil.copytree(base, root)
        code, out = child("manager", root, 2, 2, ocdbt, env={"OCKPT_KILL_AT": str(kill_at)})
        return root, code, out

    seen_temporaries = 0
    for root, code, out in killed_at_each(range(1, n + 1), run):
        assert code == -signal.SIGKILL, (root.name, out)
        # step 1 always survives; step 0 only until step 2 is committed; step 2 whole or absent
        steps = check_root(root, must_have={1}, may_have={0, 2})
        assert 0 in steps or 2 in steps, steps
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mgr = ockpt.CheckpointManager(  # the next start reports what was left
                root, max_to_keep=2, options=ockpt.SaveOptions(use_ocdbt=ocdbt == "1")
            )
        temporaries = mgr.temporaries()
        assert bool(temporaries) == any(
            issubclass(w.category, ockpt.OckptWarning) for w in caught
        ), (temporaries, caught)
        seen_temporaries += bool(temporaries)
        assert mgr.remove_temporaries() == temporaries
        assert mgr.temporaries() == []
        assert check_root(root, must_have={1}, may_have={0, 2}) == steps
        if 2 not in steps:  # the next start saves the step again
            assert mgr.save(2, tree(2))
            assert check_root(root, must_have={1, 2}, may_have=set()) == [1, 2]
        shutil.rmtree(root)
    assert seen_temporaries > 0  # some kills did leave a temporary directory behind


def test_pytree_save_killed_leaves_nothing_detected(tmp_path):
    """A plain save killed at each event: the path is absent or a whole checkpoint."""
    code, out = child("pytree", tmp_path / "probe", 5)

    def run(kill_at: int) -> tuple[Path, int]:
        path = tmp_path / f"kill-{kill_at}" / "ckpt"  # a directory each: children run at once
        code, _ = child("pytree", path, 5, env={"OCKPT_KILL_AT": str(kill_at)})
        return path, code

    for path, code in killed_at_each(range(1, out["events"] + 1), run):
        assert code == -signal.SIGKILL
        if path.exists():
            assert_tree_equal(ockpt.load_pytree(path, backend="python"), tree(5))
        else:
            with pytest.raises(ockpt.NotACheckpointError):
                ockpt.load_pytree(path, backend="python")
        for p in path.parent.iterdir() if path.parent.exists() else ():
            if is_temporary_name(p.name):
                assert ockpt.detect(p).kind is Kind.TEMPORARY


#: the trace's events that write (create a file or directory, or data through tensorstore)
_WRITES = ("open ", "mkdir ", "_write_item ", "_finish_item ")


def assert_flushed_in_order(trace: list[str], final: Path) -> None:
    """DIR-004 steps 4 to 6 in a save's trace (``OCKPT_TRACE``): every file and directory of
    the checkpoint now at `final` was fsynced under its temporary name after the last write
    and before the commit rename, each directory after everything in it; then the parent
    directory was fsynced, before anything else happened."""
    tmp_name = next(t.split()[1] for t in trace if t.startswith(f"mkdir {final.name}{TMP_MARKER}"))
    tmp = final.parent / tmp_name
    # the commit: the last rename with the temporary directory as its source (with the
    # rename fallback, renameat2 is tried first and does nothing)
    commit_at = max(
        i for i, t in enumerate(trace) if t in (f"_renameat2 {tmp_name}", f"rename {tmp_name}")
    )
    flushed = {t.split(" ", 1)[1]: i for i, t in enumerate(trace) if t.startswith("fsync ")}
    at: dict[Path, int] = {}
    for dirpath, dirs, names in os.walk(final):
        for entry in [Path(dirpath), *(Path(dirpath) / n for n in (*dirs, *names))]:
            under_tmp = tmp / entry.relative_to(final)
            assert str(under_tmp) in flushed, f"{under_tmp} never fsynced"
            at[entry] = flushed[str(under_tmp)]
    assert max(at.values()) < commit_at, "an fsync after the commit rename"
    for entry, i in at.items():
        if entry != final:
            assert i < at[entry.parent], f"{entry.parent} fsynced before {entry.name}"
    first_flush = min(at.values())
    late = [t for t in trace[first_flush:commit_at] if t.startswith(_WRITES)]
    assert not late, f"written after the flush began: {late}"
    # the parent's fsync comes next: before the old checkpoint or an old step is renamed
    # aside or removed (a later fsync of the parent, by the removal, does not count)
    assert trace[commit_at + 1 : commit_at + 2] == [f"fsync {final.parent}"], trace[commit_at:]


@pytest.mark.parametrize(
    "mode", ["pytree", "manager-ocdbt", "manager-per_leaf", "overwrite", "overwrite-rename"]
)
def test_save_flushes_before_the_commit_rename(tmp_path, mode):
    """DIR-004: a crash cannot show a committed name over unflushed bytes, nor lose the commit
    once the save returned. SIGKILL leaves the page cache intact, so the kills above cannot see a
    missing fsync; the order of the fsync calls in the trace can."""
    env = {"OCKPT_TRACE": "1"}
    if mode == "overwrite-rename":
        env["OCKPT_NO_EXCHANGE"] = "1"
    if mode.startswith("manager"):
        ocdbt = "1" if mode == "manager-ocdbt" else "0"
        root = tmp_path / "root"
        for step in (0, 1):
            _events(root, step, 2, ocdbt)
        code, out = child("manager", root, 2, 2, ocdbt, env=env)  # also deletes step 0
        final = root / "2"
        assert not (root / "0").exists()
    else:
        final = tmp_path / "c"
        if mode.startswith("overwrite"):
            ockpt.save_pytree(final, tree(OLD))
        code, out = child("pytree" if mode == "pytree" else "overwrite", final, NEW, env=env)
    assert code == 0 and out["result"] == "saved", out
    assert_flushed_in_order(out["trace"], final)


def test_two_writers_one_step(tmp_path):
    """Two processes save the same step at once: one wins whole, the other gets
    WriteConflictError (DIR-002, DIR-003); the step holds the winner's tree entirely."""
    root = tmp_path / "root"
    _events(root, 0, "none")
    for step in (1, 2, 3):
        go = tmp_path / f"go-{step}"
        env = {"OCKPT_WAIT_FOR": str(go)}
        procs = [
            subprocess.Popen(
                [sys.executable, str(CHILD), "manager", str(root), str(step), "none"],
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        time.sleep(1.0)  # both imported and waiting
        go.touch()
        results = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=60)
            assert p.returncode == 0, stderr
            results.append(json.loads(stdout.strip().splitlines()[-1])["result"])
        assert sorted(r.split(":")[0] for r in results) == ["conflict", "saved"], results
        check_root(root, must_have=set(range(step + 1)), may_have=set())
        assert ockpt.CheckpointManager(root).temporaries() == []


_READER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
sys.path.insert(0, sys.argv[3])
import numpy as np, ockpt
from tests.support.children.crash import tree
root, until = sys.argv[1], time.monotonic() + float(sys.argv[4])
loads = 0
while time.monotonic() < until:
    mgr = ockpt.CheckpointManager(root)
    for step in mgr.all_steps():
        try:
            got = mgr.restore(step, backend="python")
        except ockpt.OckptError:
            # only a step deleted meanwhile (retention) may fail to load
            assert step not in ockpt.CheckpointManager(root).all_steps(), step
            continue
        want = tree(step)
        assert np.asarray(got["params"]["w"]).tobytes() == want["params"]["w"].tobytes(), step
        assert got["name"] == want["name"]
        loads += 1
print(json.dumps({"loads": loads}))
"""


@pytest.mark.slow  # the slow matrix: a concurrency trial
def test_reader_lists_only_committed_steps_during_writes(tmp_path):
    root = tmp_path / "root"
    _events(root, 0, 3)
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(root), str(ROOT / "reference"), str(ROOT), "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 5
    step = 1
    while time.monotonic() < deadline:
        _events(root, step, 3)
        step += 1
    stdout, stderr = reader.communicate(timeout=60)
    assert reader.returncode == 0, stderr[-3000:]
    assert json.loads(stdout.strip().splitlines()[-1])["loads"] > 0
    check_root(root, must_have={step - 1}, may_have=set(range(step)))


def test_disk_full_simulated(tmp_path):
    """Every write fails with ENOSPC from event N on: a clear error, no step committed, the
    earlier steps intact and no temporary directory left."""
    base, n = prepare_save(tmp_path, "root", "1")
    for at in range(2, n + 1, 5):
        root = tmp_path / f"full-{at}"
        shutil.copytree(base, root)
        code, out = child("manager", root, 2, 2, "1", env={"OCKPT_ENOSPC_AT": str(at)})
        assert code == 0
        result = out["result"]
        steps = check_root(root, must_have={1}, may_have={0, 2})
        if result == "saved":
            assert 2 in steps
        else:
            assert "No space left on device" in result, result
            # the step is whole or absent; when ENOSPC hit only the retention delete after the
            # commit, step 2 is there and step 0 may linger
            assert 0 in steps or 2 in steps


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def test_disk_full_tmpfs(tmp_path):
    """A real full file system (a 1 MiB tmpfs, where mounting one is allowed): the save that
    does not fit fails with a clear error and the earlier steps stay intact."""
    mnt = tmp_path / "mnt"
    if not _tmpfs(mnt, "1m"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        root = mnt / "root"
        _events(root, 0, "none")
        big = mnt / "filler"
        with open(big, "wb") as f:  # leave less room than a step needs
            free = shutil.disk_usage(mnt).free
            f.write(b"\0" * max(0, free - 8192))
        code, out = child("manager", root, 1, "none")
        assert code == 0
        assert out["result"] != "saved", out
        assert "No space left" in out["result"] or "ENOSPC" in out["result"], out["result"]
        check_root(root, must_have={0}, may_have=set())
        big.unlink()
        mgr = ockpt.CheckpointManager(root)
        mgr.remove_temporaries()
        _events(root, 1, "none")  # room again: the same step saves
        check_root(root, must_have={0, 1}, may_have=set())
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=10)


# ---------------------------------------------------------------------------------------------
# Overwrite killed at every event: the path holds the old or the new checkpoint (DIR-006)

OLD, NEW, NEXT = 1, 2, 3


@pytest.mark.slow  # the slow matrix: a save killed at each of its events
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename_fallback"])
def test_overwrite_killed_at_every_event(tmp_path, monkeypatch, exchange):
    """SIGKILL before each event of ``save_pytree(path, new, overwrite=True)`` over an old
    checkpoint. With atomic exchange (DIR-006) the path loads bit-equal as the old checkpoint
    up to the exchange and as the new one after it, at every kill point. With the rename
    fallback (exchange made unavailable), the one kill point between the two renames leaves
    the path missing and the old checkpoint whole under ``-replaced``: a reader's error names
    it (LAYOUT-006), and the next save puts it back before anything else (DIR-007). After
    every kill, an overwrite saves again and leaves nothing but the checkpoint behind."""
    env = {} if exchange else {"OCKPT_NO_EXCHANGE": "1"}
    if not exchange:
        monkeypatch.setattr(commit, "_renameat2", lambda src, dst, flags: False)
    elif commit._load_renameat2() is None:
        pytest.skip("renameat2 is not available here")
    base = tmp_path / "base"
    base.mkdir()
    ockpt.save_pytree(base / "c", tree(OLD))
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    code, out = child("overwrite", probe / "c", NEW, env={**env, "OCKPT_TRACE": "1"})
    assert code == 0 and out["result"] == "saved", out
    trace = out["trace"]
    tmp_name = next(t.split()[1] for t in trace if t.startswith("mkdir c" + TMP_MARKER))
    old_name = os.path.basename(commit.replaced_name("c"))
    if exchange:  # the exchange commits; no -replaced name is ever used
        commit_at = trace.index(f"_renameat2 {tmp_name}") + 1
        aside_at = commit_at
        assert not any(old_name in t for t in trace), trace
    else:  # final -> -replaced, then tmp -> final
        aside_at = trace.index("rename c") + 1
        commit_at = trace.index(f"rename {tmp_name}") + 1
        assert commit_at == aside_at + 1, trace

    def run(kill_at: int) -> tuple[int, int, dict]:
        root = tmp_path / f"kill-{kill_at}"
        shutil.copytree(base, root)
        code, out = child("overwrite", root / "c", NEW, env={**env, "OCKPT_KILL_AT": str(kill_at)})
        return kill_at, code, out

    missing = 0
    for kill_at, code, out in killed_at_each(range(1, len(trace) + 1), run):  # ~60 events
        assert code == -signal.SIGKILL, (kill_at, out)
        root = tmp_path / f"kill-{kill_at}"
        path = root / "c"
        for name in os.listdir(root):  # whatever else is left is temporary, never read
            if name != "c":
                assert is_temporary_name(name), (kill_at, name)
                assert ockpt.detect(root / name).kind is Kind.TEMPORARY
        if aside_at < kill_at <= commit_at:  # only without exchange: between the renames
            assert not exchange and not path.exists(), kill_at
            missing += 1
            parked = root / old_name
            # the error names the -replaced sibling, citing LAYOUT-006
            with pytest.raises(ockpt.NotACheckpointError) as info:
                ockpt.load_pytree(path, backend="python")
            assert_error(info, rule="LAYOUT-006", file=str(path))
            assert old_name in info.value.message
            with pytest.raises(ockpt.NotACheckpointError) as info:
                ockpt.validate(path)
            assert_error(info, rule="LAYOUT-006", file=str(path))
            assert old_name in info.value.message
            assert old_name in ockpt.detect(path).reason
            assert ockpt.detect(parked).kind is Kind.TEMPORARY  # never read under that name
            # recovery: the next save puts the old checkpoint back, then finds it there
            with pytest.warns(ockpt.OckptWarning, match="DIR-007"):
                with pytest.raises(ockpt.WriteConflictError) as info:
                    ockpt.save_pytree(path, tree(NEXT))
                assert_error(info, rule="DIR-002", file=str(path))
            assert not parked.exists()
        want = OLD if kill_at <= commit_at else NEW
        assert_tree_equal(ockpt.load_pytree(path, backend="python"), tree(want))
        # the next overwrite succeeds and tidies up what the killed one left
        ockpt.save_pytree(path, tree(NEXT), overwrite=True)
        assert_tree_equal(ockpt.load_pytree(path, backend="python"), tree(NEXT))
        assert os.listdir(root) == ["c"], (kill_at, os.listdir(root))
        shutil.rmtree(root)
    assert missing == (0 if exchange else 1)
