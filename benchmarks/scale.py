"""Scale: the 100,000-leaf tree and the single-chunk 4 GiB array of issue #19, with Orbax's figures
for the same tree.

    python benchmarks/scale.py [--leaves 100000] [--gib 4] [--rounds 5] [--orbax-rounds 1]
                               [--orbax-timeout 600] [--engine auto]
                               [--out benchmarks/RESULTS-scale.md] [--no-profile] [--no-write]

Every operation runs in a fresh process (so its peak RSS, VmHWM, is its own), once per round;
ockpt's and Orbax's versions of the same work run back to back, in the opposite order every
other round. Orbax's operations run in the first ``--orbax-rounds`` rounds only (they are for
comparison: no goal divides by them) and each within ``--orbax-timeout`` seconds, after which
the table says "timed out". Values are checked after loading (every leaf of the tree; a strided
checksum of the big array). Everything in ``--out`` is generated from the run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _harness as h
from _harness import Goal, Op, need

DEFAULT_OUT = h.ROOT / "benchmarks" / "RESULTS-scale.md"
MB = 1e6

# Why a goal is missed, as far as earlier profiles explain it: printed only when it is missed,
# with this run's figures interpolated ({leaves}); the profile printed below it is this run's.
REASONS = {
    "tree_save": (
        "per-leaf work in Python: a zarr metadata document, a key and a value per leaf "
        "written into the OCDBT database, and `_METADATA` with {leaves} entries; the profile "
        "lists the costliest calls."
    ),
    "tree_load": (
        "per-leaf work in Python: `_METADATA` parsed into typed entries, a B+tree lookup, a "
        "small read and decode and an output array per leaf, {leaves} times."
    ),
    "tree_metadata": (
        "`_METADATA` ({leaves} entries) parsed into typed entries and a `LeafMetadata` built "
        "per leaf; the profile lists the costliest calls."
    ),
    "tree_load_memory": (
        "held at once: the typed `_METADATA` document, the tree and its per-leaf records, the "
        "load's plan (a job per leaf), and the decoded OCDBT leaf node, whose decompressed "
        "body stays alive until every entry is copied out."
    ),
    "big_save_memory": (
        "a single chunk is encoded as one zstd frame: the encoded chunk, the value assembled "
        "from it and the copy made when it is written into the data file coexist."
    ),
}

LABELS = {
    "ockpt_tree_save": "ockpt save, {leaves:,}-leaf tree",
    "orbax_tree_save": "Orbax save, the same tree",
    "ockpt_tree_load": "ockpt load → numpy ({engine} engine)",
    "orbax_tree_restore": "Orbax restore of ockpt's save → numpy (same bytes)",
    "ockpt_tree_metadata": "ockpt pytree_metadata ({engine} engine)",
    "orbax_tree_metadata": "Orbax metadata of ockpt's save",
    "ockpt_big_save": "ockpt save, one {gib:g} GiB float32 array in a single chunk",
    "ockpt_big_load": "ockpt load of it → numpy ({engine} engine)",
}


def plan(args: argparse.Namespace) -> list[list[Op]]:
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    tree, orbax_tree, big = work / "tree", work / "tree-orbax", work / "big"
    n = {"leaves": args.leaves}
    on_tree = {**n, "path": str(tree), "backend": args.engine}
    orbax = {"timeout": args.orbax_timeout, "max_rounds": args.orbax_rounds}
    groups = [
        [
            Op("ockpt_tree_save", "tree_save", {**n, "path": str(tree)}, tree),
            Op(
                "orbax_tree_save",
                "orbax_tree_save",
                {**n, "path": str(orbax_tree)},
                orbax_tree,
                **orbax,
            ),
        ],
        [
            Op("ockpt_tree_load", "tree_load", on_tree),
            Op("orbax_tree_restore", "orbax_tree_restore", on_tree, **orbax),
        ],
        [
            Op("ockpt_tree_metadata", "ockpt_metadata", on_tree),
            Op("orbax_tree_metadata", "orbax_metadata", on_tree, **orbax),
        ],
    ]
    if args.gib > 0:
        a = {"gib": args.gib, "path": str(big), "one_chunk": True, "backend": args.engine}
        groups.append([Op("ockpt_big_save", "big_save", a, big)])
        groups.append([Op("ockpt_big_load", "big_load", a)])
    return groups


def goals(args: argparse.Namespace) -> list[Goal]:
    leaves = f"{args.leaves:,}"

    def above(r: h.Round, key: str) -> float:
        return need(r, key, "peak_rss") - need(r, key, "base_rss")

    out = [
        Goal(
            "tree_save",
            f"save, {leaves} leaves",
            lambda r: need(r, "ockpt_tree_save"),
            5.0,
            higher=False,
            unit=" s",
            profile="ockpt_tree_save",
        ),
        Goal(
            "tree_load",
            f"load, {leaves} leaves",
            lambda r: need(r, "ockpt_tree_load"),
            5.0,
            higher=False,
            unit=" s",
            profile="ockpt_tree_load",
        ),
        Goal(
            "tree_metadata",
            f"pytree_metadata, {leaves} leaves",
            lambda r: need(r, "ockpt_tree_metadata"),
            2.0,
            higher=False,
            unit=" s",
            profile="ockpt_tree_metadata",
        ),
        Goal(
            "tree_load_memory",
            f"load, {leaves} leaves: peak RSS above the RSS before the call",
            lambda r: above(r, "ockpt_tree_load") / MB,
            145,
            higher=False,
            spec=".0f",
            unit=" MB",
            profile="ockpt_tree_load",
        ),
    ]
    if args.gib > 0:
        out.append(
            Goal(
                "big_save_memory",
                f"save of one {args.gib:g} GiB array in a single chunk: peak RSS above the "
                "RSS before the call / the array's bytes",
                lambda r: above(r, "ockpt_big_save") / need(r, "ockpt_big_save", "bytes"),
                1.2,
                higher=False,
                profile="ockpt_big_save",
            )
        )
    return out


def check_checksums(rounds: list[dict]) -> None:
    """A load of the big array whose checksum differs from the save's is a failure."""
    for r in rounds:
        saved, got = r.get("ockpt_big_save", {}), r.get("ockpt_big_load", {})
        if "checksum" in got and got["checksum"] != saved.get("checksum"):
            r["ockpt_big_load"] = {
                "error": f"checksum {got['checksum']} != {saved.get('checksum')}"
            }


def operations_table(rounds: list[dict], groups: list[list[Op]], args: argparse.Namespace) -> str:
    head = (
        "| operation | s: median (min-max) | rounds | peak RSS MB | peak - base MB |\n"
        "|---|---:|---:|---:|---:|"
    )
    rows = []
    for o in (o for g in groups for o in g):
        label = LABELS[o.key].format(leaves=args.leaves, gib=args.gib, engine=args.engine)
        s = h.op_stat(rounds, o.key)
        if s.median is None:
            rows.append(f"| {label} | {s.error} | | | |")
            continue
        runs = sum(1 for r in rounds if "error" not in r.get(o.key, {"error": ""}))
        peak = h.op_stat(rounds, o.key, "peak_rss")
        base = h.per_round(
            rounds, lambda r, k=o.key: need(r, k, "peak_rss") - need(r, k, "base_rss")
        )
        rows.append(
            f"| {label} | {h.fmt_stat(s)} | {runs} | {h.fmt((peak.median or 0) / MB, '.0f')} | "
            f"{h.fmt((base.median or 0) / MB, '.0f')} |"
        )
    return head + "\n" + "\n".join(rows)


def report(args: argparse.Namespace, rounds: list, checked: list, extra: dict) -> str:
    missed = h.reasons(checked, REASONS, {"leaves": f"{args.leaves:,}"})
    lines = h.header(
        "ockpt at scale (issue #19)",
        "benchmarks/scale.py",
        extra["command"],
        extra["info"],
        extra["seconds"],
    )
    lines += [
        "",
        f"The tree: {args.leaves:,} float32 leaves of 4 values in nested dicts of at most 100 "
        "(the layers of a large model); ockpt saves it as an item directory (as "
        "`PyTreeCheckpointer` writes), which ockpt and Orbax then load and describe: the "
        "same bytes. Every operation ran in a fresh process, ockpt's in each of "
        f"{args.rounds} rounds and Orbax's in the first {args.orbax_rounds} (for comparison; "
        f"no goal divides by them), each Orbax operation within {args.orbax_timeout:g} s. "
        "Seconds are the call's wall time (building the tree or the array, and imports, "
        "excluded); the base of the memory figures is the process's RSS just before the call "
        "(interpreter, numpy and ockpt imported; for saves the tree or array already built). "
        f"A range wider than {h.NOISY:.0%} of the median is marked **noisy**; MB = 10^6 bytes.",
        "",
        "## Goals",
        "",
        h.goal_table(checked),
        "",
        "## Missed goals: reasons",
        "",
        "\n".join(missed) or "Every goal was met.",
        "",
        "## All operations",
        "",
        operations_table(rounds, extra["groups"], args),
    ]
    lines += h.profiles_section(extra["profiles"])
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--leaves", type=int, default=100_000, help="leaves of the many-leaf tree")
    ap.add_argument("--gib", type=float, default=4.0, help="size of the big array; 0: none")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of ockpt's operations")
    ap.add_argument("--orbax-rounds", type=int, default=1, help="rounds of Orbax's operations")
    ap.add_argument("--orbax-timeout", type=float, default=600, help="seconds per Orbax op")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per ockpt operation")
    ap.add_argument("--engine", default="auto", help="engine of ockpt's loads (backend=)")
    ap.add_argument("--dir", default="/tmp/ockpt-scale")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--no-profile", action="store_true", help="no profiles of missed goals")
    ap.add_argument("--no-write", action="store_true", help="print only, leave --out alone")
    args = ap.parse_args()
    command = h.command_line("benchmarks/scale.py")
    info = h.machine()
    t = time.perf_counter()
    h.warm_imports()
    groups = plan(args)
    rounds = h.run_rounds(groups, max(1, args.rounds), args.timeout)
    check_checksums(rounds)
    checked = h.check(goals(args), rounds)
    ops = {o.key: o for g in groups for o in g}
    prof = "" if args.no_profile else h.profiles(checked, ops, args.timeout, Path(args.dir))
    extra = {
        "groups": groups,
        "command": command,
        "info": info,
        "seconds": time.perf_counter() - t,
        "profiles": prof,
    }
    text = report(args, rounds, checked, extra)
    print(text)
    if not args.no_write:
        Path(args.out).write_text(text)
        h.log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
