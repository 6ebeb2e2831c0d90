"""ockpt against itself: the same saves and loads by two commits, in one run.

    python benchmarks/commits.py --old REF [--new REF] [--gib 1.0] [--leaves 16] [--rounds 5]
                                 [--out benchmarks/RESULTS-commits.md]

Each commit is checked out into a temporary git worktree (``--new`` defaults to the working
tree itself) and every operation runs in a fresh process with that checkout first on
``PYTHONPATH``, the two commits back to back and in the opposite order every other round.
Reported per operation: each commit's median time over the rounds and its range, and the
median of the per-round ratios new / old with their range (a ratio above 1 is slower). The
machine's own ceiling for the data size is measured in the same run: reading the checkpoint's
bytes from the page cache into fresh memory (``cat > /dev/null`` would not touch new pages).

Operations: save of ``--gib`` GiB of random float32 in ``--leaves`` numpy leaves (zstd level
1, the default; and uncompressed), load -> numpy of that checkpoint (the python engine, what a
local load uses), `pytree_metadata` and `validate --deep` of it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Shared setup of every operation: the tree (deterministic) and a clock around the call.
_TREE = """
import numpy as np
rng = np.random.default_rng(19)
n = int({gib} * (1 << 30)) // 4 // {leaves}
tree = {{f"w{{i}}": rng.standard_normal(n, dtype=np.float32) for i in range({leaves})}}
"""

OPS = {
    "save (zstd)": _TREE
    + """
import time, ockpt
t = time.perf_counter()
ockpt.save_pytree({out!r}, tree)
print(time.perf_counter() - t)
""",
    "save (uncompressed)": _TREE
    + """
import time, ockpt
t = time.perf_counter()
ockpt.save_pytree({out!r}, tree, compression=None)
print(time.perf_counter() - t)
""",
    "load -> numpy": """
import time
t = time.perf_counter()
import ockpt
tree = ockpt.load_pytree({ckpt!r})
print(time.perf_counter() - t)
""",
    "pytree_metadata": """
import time
t = time.perf_counter()
import ockpt
ockpt.pytree_metadata({ckpt!r})
print(time.perf_counter() - t)
""",
    "validate --deep": """
import time
t = time.perf_counter()
import ockpt
assert ockpt.validate({ckpt!r}, deep=True).ok
print(time.perf_counter() - t)
""",
}

CEILING = """
import os, time
t = time.perf_counter()
for root, _, files in os.walk({ckpt!r}):
    for name in files:
        with open(os.path.join(root, name), "rb", buffering=0) as f:
            f.read()
print(time.perf_counter() - t)
"""


def _checkout(ref: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref],
        check=True,
        capture_output=True,
    )
    return where


def _run(reference: Path, code: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(reference), JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"failed ({reference}):\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def _range(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the commit to compare against")
    parser.add_argument("--new", default=None, help="default: the working tree")
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--leaves", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ockpt-commits-"))
    try:
        old = _checkout(args.old, work / "old") / "reference"
        new = (_checkout(args.new, work / "new") if args.new else ROOT) / "reference"
        sides = {"old": old, "new": new}
        ckpt = work / "ckpt"
        _run(new, OPS["save (zstd)"].format(gib=args.gib, leaves=args.leaves, out=str(ckpt)))
        times: dict[str, dict[str, list[float]]] = {op: {"old": [], "new": []} for op in OPS}
        ceiling: list[float] = []
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            ceiling.append(_run(new, CEILING.format(ckpt=str(ckpt))))
            for op, code in OPS.items():
                for side in order:
                    out = work / f"out-{side}"
                    shutil.rmtree(out, ignore_errors=True)
                    text = code.format(
                        gib=args.gib, leaves=args.leaves, out=str(out), ckpt=str(ckpt)
                    )
                    times[op][side].append(_run(sides[side], text))
        lines = [
            f"# ockpt {args.old} (old) against {args.new or 'the working tree'} (new)",
            "",
            f"Command: `python benchmarks/commits.py --old {args.old}"
            + (f" --new {args.new}" if args.new else "")
            + f" --gib {args.gib} --leaves {args.leaves} --rounds {args.rounds}`",
            "",
            f"{args.gib} GiB of random float32 in {args.leaves} numpy leaves; "
            f"{args.rounds} rounds, each operation in a fresh process, the two commits back to "
            f"back, in turn first. Ceiling: reading the checkpoint's files from the page cache "
            f"into fresh memory: median {statistics.median(ceiling):.3f} s "
            f"({_range(ceiling)}).",
            "",
            "| operation | old median s (range) | new median s (range) | new / old (range) |",
            "|---|---|---|---|",
        ]
        for op, by in times.items():
            ratios = [n / o for n, o in zip(by["new"], by["old"], strict=True)]
            lines.append(
                f"| {op} | {statistics.median(by['old']):.3f} ({_range(by['old'])}) | "
                f"{statistics.median(by['new']):.3f} ({_range(by['new'])}) | "
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
            )
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            args.out.write_text(text)
    finally:
        for side in ("old", "new"):
            if (work / side).exists():
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / side)],
                    capture_output=True,
                )
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
