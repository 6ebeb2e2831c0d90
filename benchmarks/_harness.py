"""What `run.py` and `scale.py` share: running operations in fresh processes, alternating rounds,
medians and spreads, goals, and the generated report (not meant to be run by hand).

Every figure and every sentence of a results file comes from here and from the run it reports:
there is no hand-kept text. A goal that is missed prints the reason registered for it (a
sentence without figures, or with figures of this run interpolated) and, unless profiling is
off, a profile of the operation taken by the same code.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPS = Path(__file__).with_name("_ops.py")
GIB = float(2**30)
MIB = float(2**20)
NOISY = 0.25  # a spread above this fraction of the median marks a row "noisy"

Round = Mapping[str, dict]  # one round's results, by operation key


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# running operations


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The measured processes' environment: bytecode caching on (as in any install), so imports
    are not recompiled in every process, `reference/` importable, and numpy's BLAS on one
    thread (`OPENBLAS_NUM_THREADS=1`, ockpt's and Orbax's processes alike: its idle threads
    spun on the 2 cores the loads decode on, and no measured operation uses BLAS)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "reference"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.update(extra or {})
    return env


def warm_imports() -> None:
    """Compile every module the operations import once, before anything is timed."""
    code = (
        "import ockpt, ockpt.validate, zstandard\n"
        "try:\n    import orbax.checkpoint, jax\nexcept ImportError:\n    pass\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(), check=False)


def run_op(op: str, args: Mapping, *, timeout: float, profile: str | None = None) -> dict:
    """Run `_ops.py OP ARGS` in a fresh process; ``process_wall_seconds`` is the whole
    process's life as its parent sees it (start, imports, the work, exit). A failure or a
    timeout is a result too: ``{"error": reason}``, so that one broken operation leaves the
    rest of the run standing."""
    env = child_env({"OCKPT_BENCH_PROFILE": profile} if profile else None)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(OPS), op, json.dumps(dict(args))],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": tail[-1][:300] if tail else f"exit status {proc.returncode}"}
    result = json.loads(lines[-1][len("RESULT ") :])
    result["process_wall_seconds"] = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class Op:
    """One measured operation: its result key, the `_ops.py` operation and its arguments, a
    path removed before each run (a save's target), its own time limit, and the number of
    rounds it runs in (the first ones; None: all)."""

    key: str
    op: str
    args: Mapping
    fresh: Path | None = None
    timeout: float | None = None
    max_rounds: int | None = None


def run_rounds(groups: Sequence[Sequence[Op]], rounds: int, timeout: float) -> list[dict]:
    """Every operation once per round (up to its `max_rounds`), each in a fresh process. The
    operations of a group (ockpt's and Orbax's versions of the same work) run back to back, in
    the opposite order in every other round, so that a burst of other load hits both alike.
    An operation that timed out is not run again: a timeout is its figure."""
    import shutil

    out: list[dict[str, dict]] = []
    last: dict[str, dict] = {}
    for n in range(rounds):
        results: dict[str, dict] = {}
        for group in groups:
            for o in group if n % 2 == 0 else reversed(group):
                if o.key in last and (
                    (o.max_rounds is not None and n >= o.max_rounds)
                    or last[o.key].get("error", "").startswith("timed out")
                ):
                    continue
                log(f"round {n + 1}/{rounds}: {o.key}")
                if o.fresh is not None:
                    shutil.rmtree(o.fresh, ignore_errors=True)
                r = last[o.key] = run_op(o.op, o.args, timeout=o.timeout or timeout)
                if "error" in r:
                    log(f"    {r['error']}")
                results[o.key] = r
        out.append(results)
    return out


# ---------------------------------------------------------------------------------------------
# statistics


@dataclass(frozen=True)
class Stat:
    """The median of a figure over the rounds and its spread, or the reason there is none."""

    median: float | None
    low: float | None = None
    high: float | None = None
    error: str | None = None
    failed: int = 0  # rounds whose operation failed (not counting rounds it was not run in)

    @property
    def spread(self) -> float | None:
        """(max - min) / median: 0 for one round."""
        if self.median is None or self.low is None or self.high is None or not self.median:
            return None
        return (self.high - self.low) / abs(self.median)

    @property
    def noisy(self) -> bool:
        return self.spread is not None and self.spread > NOISY


def stat(values: Sequence[float | None], errors: Sequence[str] = (), failed: int = 0) -> Stat:
    """Median and range of the rounds that produced a value, and the first error."""
    got = [v for v in values if v is not None]
    error = next(iter(errors), "not measured")
    if not got:
        return Stat(None, error=error, failed=failed)
    return Stat(statistics.median(got), min(got), max(got), error if failed else None, failed)


def per_round(rounds: Sequence[Round], fn: Callable[[Round], float | None]) -> Stat:
    """`fn` of every round's results (a ratio of two operations of the same round), then the
    median: a paired figure is less sensitive to slow minutes than a ratio of two medians."""
    values: list[float | None] = []
    errors: list[str] = []
    failed = 0
    for r in rounds:
        try:
            values.append(fn(r))
        except Missing as e:
            values.append(None)
            errors.append(str(e))
            failed += not isinstance(e, NotRun)
    return stat(values, errors, failed)


class Missing(Exception):
    """A figure a goal needs did not come out of this round (its operation failed)."""


class NotRun(Missing):
    """The operation was not run in this round (it runs in fewer rounds, or timed out)."""


def need(r: Round, key: str, field: str = "seconds") -> float:
    """`r[key][field]`, or `Missing` naming why it is not there."""
    x = r.get(key)
    if x is None:
        raise NotRun(f"{key} not run")
    if "error" in x:
        raise Missing(f"{key} failed: {x['error']}")
    if x.get(field) is None:
        raise Missing(f"{key}: no {field}")
    return float(x[field])


def rate(r: Round, key: str) -> float:
    """GiB/s of uncompressed array bytes."""
    return need(r, key, "bytes") / need(r, key) / GIB


def op_stat(rounds: Sequence[Round], key: str, field: str = "seconds") -> Stat:
    return per_round(rounds, lambda r: need(r, key, field))


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_stat(s: Stat, spec: str = ".3f", scale: float = 1.0) -> str:
    """``median (low-high)``, with "noisy" when the spread is large, or why it is missing
    ("KEY failed: reason")."""
    if s.median is None:
        return s.error or "not measured"
    low, high = (s.low or 0) / scale, (s.high or 0) / scale
    text = f"{s.median / scale:{spec}} ({low:{spec}}-{high:{spec}})"
    if s.noisy:
        text += " **noisy**"
    if s.failed:
        text += f"; failed in {s.failed} round(s): {s.error}"
    return text


# ---------------------------------------------------------------------------------------------
# goals


@dataclass(frozen=True)
class Goal:
    """One goal: `value` computes the figure from a round; it is met when ``value >= target``
    (``higher``) or ``value <= target``. `profile` names the operation profiled when missed."""

    id: str
    text: str
    value: Callable[[Round], float | None]
    target: float
    higher: bool = True
    spec: str = ".2f"
    unit: str = ""
    profile: str | None = None


@dataclass(frozen=True)
class Checked:
    goal: Goal
    stat: Stat

    @property
    def met(self) -> bool:
        m = self.stat.median
        if m is None:
            return False
        return m >= self.goal.target if self.goal.higher else m <= self.goal.target


def check(goals: Sequence[Goal], rounds: Sequence[Round]) -> list[Checked]:
    return [Checked(g, per_round(rounds, g.value)) for g in goals]


def goal_table(checked: Sequence[Checked]) -> str:
    head = "| goal | measured: median (min-max) | goal | met |\n|---|---:|---:|:---:|"
    rows = []
    for c in checked:
        g = c.goal
        target = ("≥ " if g.higher else "≤ ") + format(g.target, g.spec) + g.unit
        shown = fmt_stat(c.stat, g.spec)
        if c.stat.median is not None and g.unit:
            shown = shown.replace(" (", g.unit + " (", 1)
        rows.append(f"| {g.text} | {shown} | {target} | {'yes' if c.met else '**no**'} |")
    return head + "\n" + "\n".join(rows)


def reasons(checked: Sequence[Checked], known: Mapping[str, str], values: Mapping) -> list[str]:
    """A line per missed goal: its registered reason (`known`, keyed by goal id, formatted
    with `values`), why it could not be measured, or that no reason is registered."""
    lines = []
    for c in checked:
        if c.met:
            continue
        if c.stat.median is None:
            why = f"the measurement failed ({c.stat.error})."
        else:
            why = known.get(c.goal.id, "no explanation is registered for this goal yet.")
            why = why.format(**values)
        lines.append(f"- **{c.goal.text}** (`{c.goal.id}`): {why}")
    return lines


def profiles(
    checked: Sequence[Checked], plan: Mapping[str, Op], timeout: float, workdir: Path
) -> str:
    """Run the operation of every missed goal once more under cProfile and return the top of
    each profile (the calling thread only: work on other threads shows as waiting)."""
    parts = []
    done: set[str] = set()
    for c in checked:
        key = c.goal.profile
        if c.met or key is None or key in done or key not in plan:
            continue
        done.add(key)
        o = plan[key]
        if o.fresh is not None:
            import shutil

            shutil.rmtree(o.fresh, ignore_errors=True)
        out = workdir / f"profile-{key}.txt"
        out.unlink(missing_ok=True)
        log(f"profiling {key} ...")
        r = run_op(o.op, o.args, timeout=o.timeout or timeout, profile=str(out))
        if "error" in r or not out.exists():
            text = f"profile failed: {r.get('error', 'no output')}"
        else:
            text = out.read_text().strip()
        goals = ", ".join(f"`{x.goal.id}`" for x in checked if x.goal.profile == key and not x.met)
        parts.append(f"### `{key}` (for {goals})\n\n```\n{text}\n```")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# the report's header


def commit_stamp() -> str:
    """The commit the run measured, '+local changes' when the working tree differs from it
    outside the results files (`run.py` and `scale.py` run one after the other write them)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!benchmarks/RESULTS*.md",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "-"
    return (rev or "-") + (" +local changes" if dirty else "")


def machine() -> dict:
    """CPU, cores, memory, platform, versions, commit and load average (at the start)."""
    from importlib import metadata

    info: dict = {"platform": platform.platform(), "python": platform.python_version()}
    info["cores"] = os.cpu_count()
    try:
        text = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(
            ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln
        )
    except (OSError, StopIteration):
        info["cpu"] = platform.processor() or platform.machine()
    info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1)
    versions = {}
    for pkg in ("numpy", "jax", "jaxlib", "orbax-checkpoint", "tensorstore", "zstandard"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "-"
    info["versions"] = versions
    info["commit"] = commit_stamp()
    info["loadavg"] = os.getloadavg()
    return info


def header(title: str, script: str, command: str, info: Mapping, seconds: float) -> list[str]:
    now = datetime.datetime.now().isoformat(timespec="seconds")
    load = ", ".join(f"{x:.2f}" for x in info["loadavg"])
    after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    v = ", ".join(f"{k} {val}" for k, val in info["versions"].items())
    return [
        f"# {title}",
        "",
        f"Generated by `{script}` on {now} from ockpt commit {info['commit']}; every figure and "
        "sentence below comes from that run (nothing here is written by hand). Repeat it with:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB RAM, "
        f"{info['platform']}, Python {info['python']}; {v}. Load average at the start "
        f"{load}, at the end {after}; the suite took {seconds:.0f} s.",
    ]


def command_line(script: str) -> str:
    return "python " + " ".join([script, *sys.argv[1:]])


def profiles_section(profiles: str) -> list[str]:
    """The report's section of profiles of the ockpt operations behind missed goals."""
    if not profiles:
        return []
    return [
        "",
        "## Profiles of the missed goals",
        "",
        "Each ockpt operation behind a missed goal, run once more under cProfile (the calling "
        "thread only: work on other threads shows as waiting), sorted by cumulative time.",
        "",
        profiles,
    ]
