"""Scale (issues #19 and #33): the 100,000- and 1,000,000-leaf trees, the single-chunk 4 GiB
array, a checkpoint of many GiB written by ockpt (open and read one leaf mapped, cold and warm;
load a 1 GiB subset; convert to a Hugging Face folder in 2 GiB shards; validate --deep) and one
written by real Orbax from 16 `jax.distributed` processes (read one leaf, the subset, convert,
validate --deep), with Orbax's figures for the 100,000-leaf tree.

    python benchmarks/scale.py [--leaves 100000] [--million 1000000] [--gib 4]
                               [--big-gib 16] [--big-leaf-mib 256]
                               [--orbax-gib 16] [--processes 16] [--orbax-leaves 64]
                               [--rounds 5] [--orbax-rounds 1] [--orbax-timeout 600]
                               [--engine auto] [--out benchmarks/RESULTS-scale.md]
                               [--no-profile] [--no-write]

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
    "million_metadata": (
        "as at {leaves} leaves, ten times over: `_METADATA` ({million} entries) parsed, the "
        "saved tree built (twice: once for the META-006 check, once for the result), a "
        "`LeafMetadata` per leaf, and one walk of the B+tree for the arrays' zarr metadata; "
        "the profile lists the costliest calls."
    ),
    "million_metadata_memory": (
        "held at once: the parsed `_METADATA`, the saved tree, a `LeafMetadata` per leaf and "
        "the decoded B+tree leaf node of {million} entries."
    ),
    "million_load": (
        "per-leaf work in Python, as at {leaves} leaves: a plan, a read and an output per leaf."
    ),
    "bigckpt_mmap_cold": (
        "the call opens the checkpoint (documents, the B+tree) and maps the leaf's chunk "
        "files; a cold open reads the documents and the nodes from the disk first."
    ),
    "bigckpt_mmap_warm": "as cold, without the disk reads.",
    "bigckpt_convert_memory": (
        "convert holds a leaf and the safetensors shard being written; the profile shows what else."
    ),
    "bigckpt_validate_memory": "the deep check's chunks out at once and its windows.",
    "orbax_mp_convert_memory": "as for the checkpoint of many GiB.",
    "orbax_mp_validate_memory": "as for the checkpoint of many GiB.",
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
    "ockpt_million_save": "ockpt save, {million:,}-leaf tree",
    "ockpt_million_load": "ockpt load of it → numpy ({engine} engine)",
    "ockpt_million_metadata": "ockpt pytree_metadata of it ({engine} engine)",
    "ockpt_bigckpt_save": "ockpt save, {big_gib:g} GiB in {big_leaves} leaves of {leaf_mib} MiB",
    "ockpt_bigckpt_read_mmap_cold": "open + read one leaf, mmap=True, cold",
    "ockpt_bigckpt_read_mmap_warm": "open + read one leaf, mmap=True, warm",
    "ockpt_bigckpt_read_cold": "open + read one leaf into memory, cold",
    "ockpt_bigckpt_subset": "load a {subset_gib:g} GiB subset ({subset} leaves) → numpy",
    "ockpt_bigckpt_convert": "convert --to hf, 2 GiB shards",
    "ockpt_bigckpt_validate": "validate --deep",
    "orbax_mp_save": "Orbax save, {orbax_gib:g} GiB from {processes} processes, {orbax_leaves} "
    "leaves (once; peak RSS: the largest process)",
    "orbax_mp_read_cold": "its one leaf read into memory, cold (chunked: not mapped)",
    "orbax_mp_subset": "its {orbax_subset_gib:g} GiB subset ({orbax_subset} leaves) → numpy",
    "orbax_mp_convert": "its convert --to hf, 2 GiB shards",
    "orbax_mp_validate": "its validate --deep",
    "ockpt_tree_save": "ockpt save, {leaves:,}-leaf tree",
    "orbax_tree_save": "Orbax save, the same tree",
    "ockpt_tree_load": "ockpt load → numpy ({engine} engine)",
    "orbax_tree_restore": "Orbax restore of ockpt's save → numpy (same bytes)",
    "ockpt_tree_metadata": "ockpt pytree_metadata ({engine} engine)",
    "orbax_tree_metadata": "Orbax metadata of ockpt's save",
    "ockpt_big_save": "ockpt save, one {gib:g} GiB float32 array in a single chunk",
    "ockpt_big_load": "ockpt load of it → numpy ({engine} engine)",
}


def _big(args: argparse.Namespace) -> dict:
    """The arguments of every operation on the checkpoint of many GiB."""
    leaves = max(1, round(args.big_gib * 1024 / args.big_leaf_mib))
    return {
        "path": str(Path(args.dir) / "bigckpt"),
        "source": str(Path(args.dir) / "bigckpt-source.f32"),
        "leaf_mib": args.big_leaf_mib,
        "leaves": leaves,
        "name": f"layer{leaves // 2:03d}",
        "subset": max(1, 1024 // args.big_leaf_mib),
    }


def _orbax_mp(args: argparse.Namespace) -> dict:
    """The arguments of every operation on the checkpoint Orbax writes from many processes."""
    import orbax_multiprocess

    leaves = args.orbax_leaves
    shape = orbax_multiprocess.leaf_shape(args.orbax_gib, leaves, args.processes)
    leaf_mib = shape[0] * shape[1] * 4 / 2**20
    names = [orbax_multiprocess.leaf_name(i) for i in range(leaves)]
    return {
        "path": str(Path(args.dir) / f"orbax-mp-{args.orbax_gib:g}GiB-{args.processes}"),
        "gib": args.orbax_gib,
        "processes": args.processes,
        "leaves": leaves,
        "names": names,
        "name": names[leaves // 2],
        "leaf_mib": leaf_mib,
        "subset": max(1, min(leaves, round(1024 / leaf_mib))),
    }


def formats(args: argparse.Namespace) -> dict:
    """The figures the labels, goals and reasons interpolate."""
    big = _big(args)
    mp = _orbax_mp(args)
    return {
        "orbax_gib": args.orbax_gib,
        "processes": args.processes,
        "orbax_leaves": args.orbax_leaves,
        "orbax_subset": mp["subset"],
        "orbax_subset_gib": mp["subset"] * mp["leaf_mib"] / 1024,
        "leaves": args.leaves,
        "million": args.million,
        "gib": args.gib,
        "engine": args.engine,
        "big_gib": args.big_gib,
        "big_leaves": big["leaves"],
        "leaf_mib": args.big_leaf_mib,
        "subset": big["subset"],
        "subset_gib": big["subset"] * args.big_leaf_mib / 1024,
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
    if args.million > 0:
        million = work / "million"
        m = {"leaves": args.million, "path": str(million), "backend": args.engine}
        groups.append([Op("ockpt_million_save", "tree_save", m, million, max_rounds=1)])
        groups.append([Op("ockpt_million_metadata", "ockpt_metadata", m)])
        groups.append([Op("ockpt_million_load", "tree_load", m)])
    if args.gib > 0:
        a = {"gib": args.gib, "path": str(big), "one_chunk": True, "backend": args.engine}
        groups.append([Op("ockpt_big_save", "big_save", a, big)])
        groups.append([Op("ockpt_big_load", "big_load", a)])
    if args.big_gib > 0:
        b = _big(args)
        path = Path(b["path"])
        groups.append([Op("ockpt_bigckpt_save", "big_tree_save", b, path, max_rounds=1)])
        groups.append(
            [
                Op(
                    "ockpt_bigckpt_read_mmap_cold",
                    "big_read_one",
                    {**b, "mmap": True, "cold": True},
                ),
                Op(
                    "ockpt_bigckpt_read_mmap_warm",
                    "big_read_one",
                    {**b, "mmap": True, "cold": False},
                ),
                Op("ockpt_bigckpt_read_cold", "big_read_one", {**b, "mmap": False, "cold": True}),
            ]
        )
        groups.append([Op("ockpt_bigckpt_subset", "big_subset", b)])
        out = str(work / "bigckpt-hf")
        groups.append([Op("ockpt_bigckpt_convert", "big_convert", {**b, "out": out})])
        groups.append([Op("ockpt_bigckpt_validate", "big_validate", b)])
    if args.orbax_gib > 0:
        m = _orbax_mp(args)
        groups.append([Op("orbax_mp_save", "orbax_mp_save", m, max_rounds=1, timeout=1800)])
        cold = {**m, "mmap": True, "cold": True}  # mapped where it can be: it cannot
        groups.append([Op("orbax_mp_read_cold", "big_read_one", cold)])
        groups.append([Op("orbax_mp_subset", "big_subset", m)])
        out = str(work / "orbax-mp-hf")
        groups.append([Op("orbax_mp_convert", "big_convert", {**m, "out": out})])
        groups.append([Op("orbax_mp_validate", "big_validate", m)])
    return groups


def _seconds(gid: str, text: str, key: str, target: float) -> Goal:
    """A goal of at most `target` seconds for the operation `key`."""
    return Goal(gid, text, lambda r: need(r, key), target, higher=False, unit=" s", profile=key)


def _megabytes(gid: str, text: str, key: str, target: float, *, whole: bool = False) -> Goal:
    """A goal of at most `target` MB of peak RSS for the operation `key`: above the RSS before
    its call, or (`whole`) of its whole process."""

    def value(r: h.Round) -> float:
        base = 0 if whole else need(r, key, "base_rss")
        return (need(r, key, "peak_rss") - base) / MB

    return Goal(gid, text, value, target, higher=False, spec=".0f", unit=" MB", profile=key)


ABOVE = "peak RSS above the RSS before the call"


def goals(args: argparse.Namespace) -> list[Goal]:
    leaves = f"{args.leaves:,}"
    out = [
        _seconds("tree_save", f"save, {leaves} leaves", "ockpt_tree_save", 3.0),
        _seconds("tree_load", f"load, {leaves} leaves", "ockpt_tree_load", 3.0),
        _seconds("tree_metadata", f"pytree_metadata, {leaves} leaves", "ockpt_tree_metadata", 1.0),
        _megabytes("tree_load_memory", f"load, {leaves} leaves: {ABOVE}", "ockpt_tree_load", 145),
    ]
    if args.gib > 0:
        out.append(
            Goal(
                "big_save_memory",
                f"save of one {args.gib:g} GiB array in a single chunk: {ABOVE} / the array's "
                "bytes",
                lambda r: (
                    (need(r, "ockpt_big_save", "peak_rss") - need(r, "ockpt_big_save", "base_rss"))
                    / need(r, "ockpt_big_save", "bytes")
                ),
                1.2,
                higher=False,
                profile="ockpt_big_save",
            )
        )
    if args.million > 0:
        million = f"{args.million:,}"
        key = "ockpt_million_metadata"
        out += [
            _seconds("million_metadata", f"pytree_metadata, {million} leaves", key, 10.0),
            _megabytes(
                "million_metadata_memory",
                f"pytree_metadata, {million} leaves: peak RSS of the process",
                key,
                1500,
                whole=True,
            ),
            _seconds("million_load", f"load, {million} leaves", "ockpt_million_load", 30.0),
        ]
    if args.big_gib > 0:
        bound = (2**30 + args.big_leaf_mib * 2**20) / MB
        within = f"{args.big_gib:g} GiB checkpoint"
        for key, what in (("cold", "cold (files out of the page cache)"), ("warm", "warm")):
            out.append(
                Goal(
                    f"bigckpt_mmap_{key}",
                    f"open + mmap read of one {args.big_leaf_mib} MiB leaf of a {within}, {what}",
                    lambda r, k=key: need(r, f"ockpt_bigckpt_read_mmap_{k}") * 1000,
                    50,
                    higher=False,
                    spec=".1f",
                    unit=" ms",
                    profile=f"ockpt_bigckpt_read_mmap_{key}",
                )
            )
        out += _memory_bounds("bigckpt", "ockpt_bigckpt", within, bound)
    if args.orbax_gib > 0:
        m = _orbax_mp(args)
        bound = (2**30 + m["leaf_mib"] * 2**20) / MB
        within = f"{args.orbax_gib:g} GiB checkpoint Orbax wrote from {args.processes} processes"
        out += _memory_bounds("orbax_mp", "orbax_mp", within, bound)
    return out


def _memory_bounds(gid: str, key: str, within: str, bound: float) -> list[Goal]:
    """The peak RSS goals of a convert and a deep validate of a big checkpoint."""
    return [
        _megabytes(
            f"{gid}_{op}_memory",
            f"{what} of a {within}: {ABOVE} (bound: 1 GiB + the largest leaf)",
            f"{key}_{op}",
            bound,
        )
        for op, what in (("convert", "convert --to hf"), ("validate", "validate --deep"))
    ]


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
        label = LABELS[o.key].format(**formats(args))
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
    values = {k: f"{v:,}" if isinstance(v, int) else v for k, v in formats(args).items()}
    missed = h.reasons(checked, REASONS, values)
    lines = h.header(
        "ockpt at scale (issues #19 and #33)",
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
        *big_text(args),
        *orbax_mp_text(args),
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
        *reads_table(rounds, args),
    ]
    lines += h.profiles_section(extra["profiles"])
    return "\n".join(lines) + "\n"


def reads_table(rounds: list, args: argparse.Namespace) -> list[str]:
    """The reads of one leaf of the checkpoint of many GiB: the call, then touching it."""
    if args.big_gib <= 0:
        return []
    rows = [
        "",
        f"Reads of one {args.big_leaf_mib} MiB leaf of the {args.big_gib:g} GiB checkpoint "
        "(seconds: median (min-max); the touches come after the read, outside its time):",
        "",
        "| read | mapped | the call | touch one row in 997 | then sum every byte |",
        "|---|:---:|---:|---:|---:|",
    ]
    for key in ("read_mmap_cold", "read_mmap_warm", "read_cold"):
        k = f"ockpt_bigckpt_{key}"
        mapped = {r.get(k, {}).get("mapped") for r in rounds} - {None}
        cells = [
            h.fmt_stat(h.op_stat(rounds, k, f))
            for f in ("seconds", "sparse_seconds", "touch_seconds")
        ]
        label = LABELS[k].format(**formats(args))
        rows.append(
            f"| {label} | {'yes' if mapped == {True} else 'no'} | " + " | ".join(cells) + " |"
        )
    return rows


def big_text(args: argparse.Namespace) -> list[str]:
    """What the checkpoint of many GiB is and how its reads are measured."""
    if args.big_gib <= 0:
        return []
    f = formats(args)
    return [
        f"The checkpoint of many GiB: {f['big_gib']:g} GiB of float32 in {f['big_leaves']} "
        f"leaves of {f['leaf_mib']} MiB (every leaf holds the same random values, read from "
        "one mapped source file so that the save holds one leaf's pages), saved once by ockpt "
        "as an item directory with its defaults: chunks of whole rows of at most 64 MiB, "
        "stored raw, each on a page of its file (so a mapped leaf is one view of its chunks). "
        "Cold reads first drop the checkpoint's files from the page cache "
        "(`posix_fadvise(POSIX_FADV_DONTNEED)`, no privilege needed); warm reads find them "
        "there. A read of one leaf is `ockpt.open` and `[name].read(mmap=...)`: with "
        "`mmap=True` the array is the file's pages, read from the disk when touched; the "
        "times to touch one row in 997 and then every byte afterwards are in the table of "
        "reads below. The 1 GiB "
        "subset is a partial load of the first leaves; `convert` writes a Hugging Face "
        "folder of 2 GiB safetensors shards (removed after each run).",
        "",
    ]


def orbax_mp_text(args: argparse.Namespace) -> list[str]:
    """What the checkpoint Orbax writes from many processes is, and how it fits in memory."""
    if args.orbax_gib <= 0:
        return []
    m = _orbax_mp(args)
    return [
        f"The multi-process checkpoint: {args.orbax_gib:g} GiB of float32 in {m['leaves']} "
        f"leaves of {m['leaf_mib']:g} MiB, saved once by real Orbax "
        f"(`benchmarks/orbax_multiprocess.py`: {args.processes} `jax.distributed` processes "
        f"on localhost, one CPU device each, every leaf sharded by rows over the "
        f"{args.processes}: OCDBT with {args.processes} per-process databases, zarr v2, zstd). "
        "Every leaf holds the same values (`--same-values`: each process's shards are views "
        "of one mapped file, which jax aliases without a copy), so that the processes hold "
        "Orbax's copies of their shards and not also the arrays: with arrays of their own, a "
        "process peaks at about 225 MiB plus 1.8 times its share, and 16 GiB would need about "
        f"{(args.processes * 225 + 1.8 * 16 * 1024) / 1024:.0f} GiB of this machine's 24 GiB "
        "(see the module's docstring for the measurements). Its leaves are chunked (a chunk "
        "per process), so they are read, not mapped.",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--leaves", type=int, default=100_000, help="leaves of the many-leaf tree")
    ap.add_argument(
        "--million", type=int, default=1_000_000, help="leaves of the big tree; 0: none"
    )
    ap.add_argument("--gib", type=float, default=4.0, help="size of the big array; 0: none")
    ap.add_argument("--big-gib", type=float, default=16.0, help="checkpoint of many GiB; 0: none")
    ap.add_argument("--big-leaf-mib", type=int, default=256, help="its leaves' size in MiB")
    ap.add_argument(
        "--orbax-gib", type=float, default=16.0, help="checkpoint Orbax writes from many processes"
    )
    ap.add_argument("--processes", type=int, default=16, help="processes that write it")
    ap.add_argument("--orbax-leaves", type=int, default=64, help="its leaves")
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
