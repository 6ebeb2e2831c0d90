"""Progress bars as a user sees them: the command in a subprocess, stderr on a pseudo-terminal.

Each long command (diff, cp, validate --deep) draws one bar whose total is known before it
starts: every redraw shows the same `/total`, a percentage and a bar, also on a terminal that
reports 0 columns. On a pipe, or with --no-progress, nothing is drawn.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from tests.support import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"
#: one redraw of a tqdm bar: "desc:  42%|####  | 1.00k/2.00k [...]"
REDRAW = re.compile(r"(\w+): +(\d+)%\|([^|]*)\| *([\d.]+\w?)/([\d.]+\w?) \[")


def on_terminal(args: list[str], columns: int) -> tuple[int, str, str]:
    """Run `ockpt ARGS` with stderr on a pseudo-terminal of `columns` columns (stdout a
    pipe); returns the exit status, stdout and everything the terminal received."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = dict(os.environ, TQDM_MININTERVAL="0")  # every update redrawn (tqdm >= 4.66)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ockpt.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=side,
        env=env,
    )
    os.close(side)
    seen = bytearray()
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        seen += data
    out = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait(timeout=120)
    os.close(main)
    return proc.returncode, out, seen.decode("utf-8", "replace")


def redraws(text: str, desc: str) -> list[re.Match]:
    return [m for part in text.split("\r") if (m := REDRAW.search(part)) and m[1] == desc]


def commands(tmp_path) -> list[tuple[str, list[str]]]:
    return [
        (
            "comparing",
            ["diff", str(CASES / "no_ocdbt" / "checkpoint"), str(CASES / "zarr3" / "checkpoint")],
        ),
        ("copying", ["cp", str(CASES / "manager" / "checkpoint"), str(tmp_path / "copy")]),
        ("validating", ["validate", "--deep", str(CASES / "sharded" / "checkpoint")]),
    ]


@pytest.mark.parametrize("columns", [0, 80])
def test_one_bar_with_a_known_total(tmp_path, columns):
    for desc, args in commands(tmp_path / str(columns)):
        code, out, err = on_terminal(args, columns)
        assert code in (0, 1), err
        assert "Traceback" not in err
        seen = redraws(err, desc)
        assert seen, f"{args[0]}: no bar on a {columns}-column terminal: {err!r}"
        assert len({m[5] for m in seen}) == 1, f"{args[0]}: the total changed: {err!r}"
        assert seen[0][2] == "0" and all(m[3] for m in seen)  # starts at 0%, draws a bar
        percents = [int(m[2]) for m in seen]
        assert percents == sorted(percents)
        drawn = [part for part in err.split("\r") if REDRAW.search(part)]
        # 0 columns: the whole bar at the fallback width, not squeezed to a cell and cut off
        fits = (lambda n: n == 80) if columns == 0 else (lambda n: n <= columns)
        assert all(fits(len(part)) and part.endswith("]") for part in drawn), err
        assert out  # the result still goes to stdout


def test_validate_total_is_the_bytes_of_the_files():
    path = CASES / "sharded" / "checkpoint"
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    _, _, err = on_terminal(["validate", "--deep", str(path)], 80)
    from tqdm import tqdm

    (shown,) = {m[5] for m in redraws(err, "validating")}
    assert shown == tqdm.format_sizeof(total, divisor=1024)


def test_no_bar_without_deep_or_with_no_progress(tmp_path):
    path = str(CASES / "sharded" / "checkpoint")
    for args in (
        ["validate", path],
        ["validate", "--deep", "--no-progress", path],
        ["diff", "--no-progress", path, path],
        ["cp", "--no-progress", path, str(tmp_path / "copy")],
    ):
        code, _, err = on_terminal(args, 80)
        assert code == 0 and "%|" not in err and "\r" not in err, (args, err)


def test_no_bar_on_a_pipe(tmp_path):
    path = str(CASES / "sharded" / "checkpoint")
    for args in (
        ["validate", "--deep", path],
        ["diff", path, path],
        ["cp", path, str(tmp_path / "c")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0 and result.stderr == "", (args, result.stderr)
