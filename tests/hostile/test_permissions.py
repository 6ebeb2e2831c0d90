"""Permissions the kernel enforces: a save into a directory the user may not write, a checkpoint
file the user may not read. Root ignores permissions, so when the suite runs as root (CI
containers) each check runs in a child process that drops to the unprivileged user ``nobody``;
run as any other user it runs as that user. Either way one run of the suite covers it (issue 21).

The child starts as root because the interpreter may live where only root can read (a pyenv
under /root): it first does the same operation on a scratch copy, so every module it needs is
imported, then drops its user and groups for good and does the operation under test.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ockpt

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import ockpt

    what, where, scratch, uid, gid = sys.argv[1:3] + [sys.argv[3]] + [int(a) for a in sys.argv[4:]]

    def run(where):
        if what == "save":
            ockpt.save_pytree(os.path.join(where, "c"), {"a": np.arange(3)})
        elif what == "load":
            return ockpt.load_pytree(where)
        else:
            return ockpt.validate(where).ok

    if uid >= 0:
        run(scratch)  # imports what the operation needs while the interpreter is readable
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    out = {"uid": os.geteuid()}
    try:
        value = run(where)
        if what == "validate":
            out["ok"] = value
        out["result"] = "done"
    except ockpt.OckptError as e:
        out["result"], out["rule"], out["message"] = type(e).__name__, e.rule, str(e)
    except OSError as e:
        out["result"], out["rule"], out["message"] = type(e).__name__, None, str(e)
    out["left"] = sorted(os.listdir(where))
    print(json.dumps(out))
    """
)


def _unprivileged() -> tuple[int, int] | None:
    """(uid, gid) to run the child as: ours unless we are root, then `nobody`'s."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no user 'nobody' to drop to")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged user owns (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="ockpt-perm-"))
    ids = _unprivileged()
    if ids is not None:
        os.chown(path, *ids)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(stat.S_IRWXU)
        shutil.rmtree(path)


def _run(what: str, where: Path, scratch: Path) -> dict:
    """Run `what` on `where` in a child without privileges; `scratch` is a readable, writable
    twin of `where` for the child's warm-up as root."""
    uid, gid = _unprivileged() or (-1, -1)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, what, str(where), str(scratch), str(uid), str(gid)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["uid"] != 0  # the check ran where permissions are enforced
    return out


def _chown_tree(path: Path) -> None:
    ids = _unprivileged()
    if ids is not None:
        for p in [path, *path.rglob("*")]:
            os.chown(p, *ids, follow_symlinks=False)


def test_no_write_permission(shared_dir):
    """DIR-001: the parent is not writable; the save fails naming the rule, leaves nothing."""
    parent = shared_dir / "ro"
    parent.mkdir()
    _chown_tree(parent)
    parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    scratch = shared_dir / "scratch"
    scratch.mkdir()
    out = _run("save", parent, scratch)
    assert out["result"] == "FormatError" and out["rule"] == "DIR-001", out
    assert "Permission denied" in out["message"]
    assert out["left"] == []


@pytest.mark.parametrize("what", ["load", "validate"])
def test_unreadable_metadata(shared_dir, what):
    """A `_METADATA` the user may not read: an OSError naming the file, not a traceback from
    inside a library and not a pass: the validator cannot check what it cannot read (the CLI
    exits 2, an I/O error, as for a missing path)."""
    item = shared_dir / "item"
    ockpt.save_pytree(item, {"a": np.arange(3)}, layout="item")
    _chown_tree(item)
    scratch = shared_dir / "scratch"
    shutil.copytree(item, scratch)
    (item / "_METADATA").chmod(0)
    out = _run(what, item, scratch)
    assert out["result"] == "PermissionError", out
    assert out["message"].endswith(f"{item / '_METADATA'}'"), out
