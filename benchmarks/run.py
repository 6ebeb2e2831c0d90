"""The ockpt benchmark suite: the goals of issue #19, against Orbax and the machine's ceilings.

    python benchmarks/run.py [--gib 1.0] [--leaves 16] [--meta-leaves 10000] [--rounds 5]
                             [--out benchmarks/RESULTS.md] [--no-profile] [--no-write]

One run:

1. writes (once, cached under ``--dir``) a checkpoint with Orbax: ``--gib`` GiB of random
   float32 in ``--leaves`` leaves, sharded on a (4, 2) mesh of 8 fake CPU devices, and a
   ``--meta-leaves``-leaf checkpoint of small arrays;
2. runs every operation (ockpt's and Orbax's, the ceilings too) in a fresh process, in
   ``--rounds`` rounds; within a round ockpt's and Orbax's versions of the same work run back
   to back, in the opposite order every other round;
3. prints and writes to ``--out`` every goal as measured / goal / met (the median over the
   rounds of a figure computed within each round, with its range; a range above 25% of the
   median is flagged "noisy"), the registered reason of each missed goal, a cProfile of the
   ockpt operation behind it, and the table of all operations.

Everything in ``--out`` is generated; nothing in it is kept from an earlier run.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import _harness as h
from _harness import Goal, Op, need, rate

DEFAULT_OUT = h.ROOT / "benchmarks" / "RESULTS.md"
JAX_NOTE = (
    "jax targets run on 8 fake CPU devices, where jax adopts ockpt's 64-byte-aligned host "
    "buffers without a copy; on a GPU or TPU every jax load, Orbax's too, would add the "
    "host-to-device copy"
)

TS_ID = "tensorstore_optional"
TS_ENGINE = (
    "the tensorstore engine reads through tensorstore's zarr driver and OCDBT store, as Orbax "
    "does, so it can at best match it; earlier profiles found tensorstore's read waiting rather "
    "than decoding (wall time above CPU time). The default engine reads local directories "
    "with the python engine."
)
# Why a goal is missed, as far as earlier profiles explain it: printed only when it is missed,
# with this run's figures interpolated ({cores}); the profile printed below it is this run's.
REASONS = {
    "load_numpy_vs_decode": (
        "the ceiling decodes the chunks into fresh `bytes` and stops; the load also reads "
        "each chunk file with `pread` and writes each decoded chunk into its place in new "
        "output arrays, whose pages a fresh process takes from the kernel at first touch: see "
        "the first-touch ceiling, whose spread from round to round is the kernel's (numpy "
        "asks for transparent huge pages for large arrays, and with `defrag=madvise` a first "
        "touch may wait for memory compaction). The warm goal, a second load in the same "
        "process, reuses memory numpy already holds."
    ),
    "load_numpy_warm_vs_decode": (
        "as for the first load, less the first touches of the thread pool and the allocator."
    ),
    "load_numpy_vs_orbax": (
        "both are bound by zstd decoding on {cores} cores; ockpt's margin over Orbax is what "
        "it saves outside decoding (see the decode-ceiling goal and the profile)."
    ),
    "numpy_vs_jax_orbax": (
        "a jax target on the saved sharding decodes each chunk straight into its shard's "
        "buffer, which jax on CPU adopts; a numpy target gathers the chunks of a leaf into "
        "one whole array, a strided copy into fresh pages."
    ),
    "numpy_vs_jax_auto": (
        "a raw value is copied once either way; a numpy target writes it into a whole-leaf "
        "array (strided, fresh pages) where a jax target on the saved sharding fills "
        "contiguous shard buffers."
    ),
    "raw_vs_page_cache": (
        "the ceiling reads each data file into fresh memory in one `readinto`; a load "
        "also opens the checkpoint, walks the B+tree, plans the reads and fills each leaf "
        "from its chunks; the profile shows the costliest calls."
    ),
    "load_numpy_process_vs_orbax": (
        "a whole process is the load plus the interpreter's start and the imports (ockpt "
        "and numpy; Orbax also imports jax); on {cores} cores the load itself is bound by "
        "zstd decoding (see the decode-ceiling goal)."
    ),
    "ts_numpy_vs_orbax": TS_ENGINE,
    "ts_jax_vs_orbax": TS_ENGINE,
    "ts_reshard_vs_orbax": TS_ENGINE,
    "save_zstd_vs_orbax": (
        "the part of the save outside zstd encoding: gathering the chunks, writing the values "
        "into OCDBT data files and B+tree nodes, and syncing them; the profile shows which."
    ),
    "save_zstd_vs_bound": (
        "as for the ratio to Orbax: the time outside encoding (writing, committing, syncing) "
        "is not hidden behind the encoding on {cores} cores."
    ),
    "save_none_vs_disk": (
        "the save writes the values through the page cache and fsyncs every file before it "
        "commits, as the ceiling does; the rest is gathering the chunks from the jax "
        "shards, the B+tree and the documents, and the commit's renames and directory "
        "syncs; the profile shows where the time goes."
    ),
    "save_auto_vs_disk": (
        "as for the uncompressed save, plus the trial compression of a sample of each "
        "array that decides raw or zstd."
    ),
    "auto_size_vs_orbax": (
        '`compression="auto"` stores an array raw when zstd would save little (WRITE-015); a '
        "larger size means raw arrays that zstd would shrink by more than the bound allows."
    ),
    "metadata_call": (
        "building the tree: `_METADATA` parsed into typed entries, one `LeafMetadata` per "
        "leaf and the zarr metadata of every array; the profile lists the costliest calls."
    ),
    "metadata_with_import": "the call (see above) plus the import of ockpt and numpy.",
    "metadata_vs_orbax": "follows from the time of the call (see above).",
    "validate_vs_metadata": (
        "validate checks `_METADATA` against its JSON schema and every stored key against "
        "the tree, beyond the parsing pytree_metadata does; the profile shows which check "
        "dominates."
    ),
    "deep_vs_load": (
        "validate --deep decodes every chunk on all {cores} cores as a load does, and also "
        "decodes every B+tree node of every generation of each database (the root's and each "
        "process's) and checks every document; the profile shows which part outweighs the "
        "load's copies into fresh memory."
    ),
    TS_ID: ("an import of tensorstore is still reached on this path (the error is in the row)."),
}

LABELS = {
    "orbax_load_numpy": "Orbax restore → numpy",
    "ockpt_python_load_numpy": "ockpt load (python) → numpy",
    "ockpt_python_load_numpy_warm": "ockpt load (python) → numpy, a process's second load",
    "ockpt_tensorstore_load_numpy": "ockpt load (tensorstore) → numpy",
    "orbax_load_jax": "Orbax restore → jax †",
    "ockpt_python_load_jax": "ockpt load (python) → jax †",
    "ockpt_tensorstore_load_jax": "ockpt load (tensorstore) → jax †",
    "orbax_load_reshard": "Orbax restore → jax, resharded †",
    "ockpt_python_load_reshard": "ockpt load (python) → jax, resharded †",
    "ockpt_tensorstore_load_reshard": "ockpt load (tensorstore) → jax, resharded †",
    "orbax_save": "Orbax save (zstd 1)",
    "ockpt_save_zstd1": "ockpt save zstd 1",
    "ockpt_save_none": "ockpt save uncompressed",
    "ockpt_save_auto": 'ockpt save compression="auto"',
    "ockpt_load_auto_numpy": 'ockpt load (python) of its "auto" save → numpy',
    "ockpt_load_auto_jax": 'ockpt load (python) of its "auto" save → jax †',
    "orbax_load_auto_numpy": 'Orbax restore of ockpt\'s "auto" save → numpy',
    "ockpt_load_none_numpy": "ockpt load (python) of its uncompressed save → numpy",
    "ockpt_validate_deep": "ockpt.validate(deep=True)",
}
# The Orbax operation doing the same work (same bytes read, or same tree saved).
SAME_WORK = {
    "ockpt_python_load_numpy": "orbax_load_numpy",
    "ockpt_tensorstore_load_numpy": "orbax_load_numpy",
    "ockpt_python_load_jax": "orbax_load_jax",
    "ockpt_tensorstore_load_jax": "orbax_load_jax",
    "ockpt_python_load_reshard": "orbax_load_reshard",
    "ockpt_tensorstore_load_reshard": "orbax_load_reshard",
    "ockpt_save_zstd1": "orbax_save",
    "ockpt_save_none": "orbax_save",
    "ockpt_save_auto": "orbax_save",
    "ockpt_load_auto_numpy": "orbax_load_auto_numpy",
}


# ---------------------------------------------------------------------------------------------
# the plan


def ensure_checkpoints(args: argparse.Namespace) -> tuple[Path, Path]:
    """The Orbax-written checkpoints the loads read, written once per size into ``--dir``."""
    cache = Path(args.dir)
    cache.mkdir(parents=True, exist_ok=True)
    main = cache / f"orbax-{args.gib:g}GiB-{args.leaves}"
    meta = cache / f"orbax-model-{args.meta_leaves}"
    for path, op, a in (
        (main, "orbax_save", {"gib": args.gib, "leaves": args.leaves}),
        (meta, "make_meta", {"meta_leaves": args.meta_leaves}),
    ):
        if not (path / "_METADATA").exists():
            shutil.rmtree(path, ignore_errors=True)
            h.log(f"writing {path} with Orbax ...")
            r = h.run_op(op, {**a, "path": str(path)}, timeout=args.timeout)
            if "error" in r:
                raise SystemExit(f"could not write {path} with Orbax: {r['error']}")
    return main, meta


def plan(args: argparse.Namespace, main: Path, meta: Path) -> list[list[Op]]:
    """The groups of one round, each the same work done by ockpt and by Orbax."""
    base = {"gib": args.gib, "leaves": args.leaves}
    saves = Path(args.dir) / "saves"
    saves.mkdir(parents=True, exist_ok=True)
    auto, raw = saves / "ockpt-auto", saves / "ockpt-none"
    ceilings = {"path": str(main), "scratch": str(saves)}
    groups: list[list[Op]] = [[Op("ceilings", "ceilings", ceilings)]]
    for t in ("numpy", "jax", "reshard"):
        a = {**base, "path": str(main), "target": t}
        group = [Op(f"orbax_load_{t}", "orbax_restore", a)]
        for b in ("python", "tensorstore"):
            group.append(Op(f"ockpt_{b}_load_{t}", "ockpt_load", {**a, "backend": b}))
        if t == "numpy":  # the same load as a process's second: warm
            warm = {**a, "backend": "python", "warm": True}
            group.append(Op("ockpt_python_load_numpy_warm", "ockpt_load", warm))
        groups.append(group)
    group = [
        Op("orbax_save", "orbax_save", {**base, "path": str(saves / "orbax")}, saves / "orbax")
    ]
    for comp, label in (("zstd", "zstd1"), (None, "none"), ("auto", "auto")):
        path = saves / f"ockpt-{label}"
        a = {**base, "path": str(path), "compression": comp}
        group.append(Op(f"ockpt_save_{label}", "ockpt_save", a, path))
    groups.append(group)
    on_auto = {**base, "path": str(auto), "backend": "python"}
    groups.append(
        [
            Op("ockpt_load_auto_numpy", "ockpt_load", {**on_auto, "target": "numpy"}),
            Op("ockpt_load_auto_jax", "ockpt_load", {**on_auto, "target": "jax"}),
            Op("orbax_load_auto_numpy", "orbax_restore", {**on_auto, "target": "numpy"}),
        ]
    )
    a = {**base, "path": str(raw), "target": "numpy", "backend": "python"}
    groups.append([Op("ockpt_load_none_numpy", "ockpt_load", a)])
    groups.append(
        [
            Op("orbax_metadata", "orbax_metadata", {"path": str(meta)}),
            Op("ockpt_metadata", "ockpt_metadata", {"path": str(meta)}),
            Op("ockpt_validate", "ockpt_validate", {"path": str(meta)}),
        ]
    )
    a = {**base, "path": str(main), "deep": True}
    groups.append([Op("ockpt_validate_deep", "ockpt_validate", a)])
    return groups


# ---------------------------------------------------------------------------------------------
# the goals


def _vs(key: str, orbax: str):  # type: ignore[no-untyped-def]
    return lambda r: rate(r, key) / rate(r, orbax)


def _zstd_save_bound(r: h.Round) -> float:
    """What bounds a zstd save, in GiB/s of uncompressed data: encoding on every core, or
    writing its compressed bytes to the disk."""
    disk = need(r, "ceilings", "write_fsync") / need(r, "ceilings", "zstd_ratio")
    return min(need(r, "ceilings", "zstd_encode_all"), disk)


def goals(meta_leaves: int) -> list[Goal]:
    """Issue #19's goals, each computed within a round."""
    m = f"{meta_leaves:,}"
    out = [
        Goal(
            "load_numpy_vs_orbax",
            "load → numpy (python engine) / Orbax restore → numpy",
            _vs("ockpt_python_load_numpy", "orbax_load_numpy"),
            1.5,
            profile="ockpt_python_load_numpy",
        ),
        Goal(
            "load_numpy_vs_decode",
            "load → numpy (python engine) / all-core zstd decode ceiling, cold (a fresh "
            "process's first load)",
            lambda r: rate(r, "ockpt_python_load_numpy") / need(r, "ceilings", "zstd_decode_all"),
            0.8,
            profile="ockpt_python_load_numpy",
        ),
        Goal(
            "load_numpy_warm_vs_decode",
            "load → numpy (python engine) / all-core zstd decode ceiling, warm (a process's "
            "second load)",
            lambda r: (
                rate(r, "ockpt_python_load_numpy_warm") / need(r, "ceilings", "zstd_decode_all")
            ),
            0.8,
            profile="ockpt_python_load_numpy_warm",
        ),
        Goal(
            "numpy_vs_jax_orbax",
            "load → numpy time / load → jax time (python engine, Orbax's zstd checkpoint) †",
            lambda r: need(r, "ockpt_python_load_numpy") / need(r, "ockpt_python_load_jax"),
            1.0,
            higher=False,
            profile="ockpt_python_load_numpy",
        ),
        Goal(
            "numpy_vs_jax_auto",
            'load → numpy time / load → jax time (python engine, ockpt\'s raw "auto" save) †',
            lambda r: need(r, "ockpt_load_auto_numpy") / need(r, "ockpt_load_auto_jax"),
            1.0,
            higher=False,
            profile="ockpt_load_auto_numpy",
        ),
        Goal(
            "load_numpy_process_vs_orbax",
            "load → numpy (python engine) / Orbax restore → numpy, each a whole fresh process "
            "(start, imports, the load, as a user runs it)",
            lambda r: (
                need(r, "orbax_load_numpy", "process_wall_seconds")
                / need(r, "ockpt_python_load_numpy", "process_wall_seconds")
            ),
            1.5,
            profile="ockpt_python_load_numpy",
        ),
        Goal(
            "raw_vs_page_cache",
            "load → numpy of an uncompressed checkpoint / page-cache read ceiling (into fresh "
            "memory)",
            lambda r: (
                rate(r, "ockpt_load_none_numpy") / need(r, "ceilings", "page_cache_read_fresh")
            ),
            0.9,
            profile="ockpt_load_none_numpy",
        ),
    ]
    for t, label in (("numpy", "numpy"), ("jax", "jax †"), ("reshard", "jax, resharded †")):
        out.append(
            Goal(
                f"ts_{t}_vs_orbax",
                f"load → {label} (tensorstore engine) / Orbax restore",
                _vs(f"ockpt_tensorstore_load_{t}", f"orbax_load_{t}"),
                1.0,
                profile=f"ockpt_tensorstore_load_{t}",
            )
        )
    out += [
        Goal(
            "save_zstd_vs_orbax",
            "save zstd 1 / Orbax save (the same tree)",
            _vs("ockpt_save_zstd1", "orbax_save"),
            2.0,
            profile="ockpt_save_zstd1",
        ),
        Goal(
            "save_zstd_vs_bound",
            "save zstd 1 / min(all-core zstd-1 encode ceiling, write + fsync ceiling / "
            "compressed fraction)",
            lambda r: rate(r, "ockpt_save_zstd1") / _zstd_save_bound(r),
            0.85,
            profile="ockpt_save_zstd1",
        ),
        *(
            Goal(
                f"save_{kind}_vs_disk",
                f"save {label} / write + fsync ceiling",
                lambda r, k=kind: rate(r, f"ockpt_save_{k}") / need(r, "ceilings", "write_fsync"),
                0.9,
                profile=f"ockpt_save_{kind}",
            )
            for kind, label in (("none", "uncompressed"), ("auto", 'compression="auto"'))
        ),
        Goal(
            "auto_size_vs_orbax",
            '"auto" save on-disk size / Orbax\'s',
            lambda r: (
                need(r, "ockpt_save_auto", "disk_bytes") / need(r, "orbax_save", "disk_bytes")
            ),
            1.10,
            higher=False,
            spec=".3f",
        ),
        Goal(
            "metadata_call",
            f"pytree_metadata, {m} leaves: the call",
            lambda r: need(r, "ockpt_metadata"),
            0.3,
            higher=False,
            spec=".3f",
            unit=" s",
            profile="ockpt_metadata",
        ),
        Goal(
            "metadata_with_import",
            f"pytree_metadata, {m} leaves: import ockpt + the call",
            lambda r: need(r, "ockpt_metadata") + need(r, "ockpt_metadata", "import_seconds"),
            0.5,
            higher=False,
            spec=".3f",
            unit=" s",
            profile="ockpt_metadata",
        ),
        Goal(
            "metadata_vs_orbax",
            f"Orbax metadata time / pytree_metadata time ({m} leaves)",
            lambda r: need(r, "orbax_metadata") / need(r, "ockpt_metadata"),
            10.0,
            spec=".1f",
            profile="ockpt_metadata",
        ),
        Goal(
            "validate_vs_metadata",
            f"validate (not deep) time / pytree_metadata time ({m} leaves)",
            lambda r: need(r, "ockpt_validate") / need(r, "ockpt_metadata"),
            2.0,
            higher=False,
            profile="ockpt_validate",
        ),
        Goal(
            "deep_vs_load",
            "validate --deep speed / full load → numpy speed (python engine)",
            lambda r: need(r, "ockpt_python_load_numpy") / need(r, "ockpt_validate_deep"),
            0.8,
            profile="ockpt_validate_deep",
        ),
    ]
    return out


def without_tensorstore(args: argparse.Namespace) -> tuple[bool, str]:
    """Whether `import ockpt`, a local save and a load ran with tensorstore blocked."""
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        r = h.run_op("without_tensorstore", {"path": tmp}, timeout=args.timeout)
    if "error" in r and "import" not in r:  # the process itself failed
        return False, r["error"]
    if not r.get("load"):
        done = [s for s in ("import", "save", "load") if r.get(s)]
        return False, f"after {', '.join(done) or 'nothing'}: {r.get('error', '?')}"
    return True, "import, save and load ran"


# ---------------------------------------------------------------------------------------------
# the report


def operations_table(rounds: list[dict[str, dict]], order: list[str]) -> str:
    head = (
        "| operation | s: median (min-max) | GiB/s | vs Orbax, same work | CPU s | "
        "whole process s | peak - base MiB |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for key in order:
        if key not in LABELS:
            continue
        s = h.op_stat(rounds, key)
        if s.median is None:
            rows.append(f"| {LABELS[key]} | {s.error} | | | | | |")
            continue
        gibs = h.per_round(rounds, lambda r, k=key: rate(r, k))
        orbax = SAME_WORK.get(key)
        vs = h.per_round(rounds, _vs(key, orbax)) if orbax else h.Stat(None)
        cpu = h.op_stat(rounds, key, "cpu_seconds")
        whole = h.op_stat(rounds, key, "process_wall_seconds")
        above = h.per_round(
            rounds, lambda r, k=key: (need(r, k, "peak_rss") - need(r, k, "base_rss")) / h.MIB
        )
        rows.append(
            f"| {LABELS[key]} | {h.fmt_stat(s)} | {h.fmt(gibs.median)} | "
            f"{h.fmt(vs.median, '.2f')} | {h.fmt(cpu.median, '.2f')} | "
            f"{h.fmt(whole.median, '.2f')} | {h.fmt(above.median, '.0f')} |"
        )
    return head + "\n" + "\n".join(rows)


def metadata_table(rounds: list[dict[str, dict]]) -> str:
    head = (
        "| call | s: median (min-max) | import s | peak RSS MiB | leaves |\n"
        "|---|---:|---:|---:|---:|"
    )
    rows = []
    for key, label in (
        ("ockpt_metadata", "ockpt.pytree_metadata"),
        ("orbax_metadata", "Orbax PyTreeCheckpointer.metadata (jax imported)"),
        ("ockpt_validate", "ockpt.validate"),
    ):
        s = h.op_stat(rounds, key)
        if s.median is None:
            rows.append(f"| {label} | {s.error} | | | |")
            continue
        imp = h.op_stat(rounds, key, "import_seconds")
        peak = h.op_stat(rounds, key, "peak_rss")
        leaves = h.op_stat(rounds, key, "leaves")
        rows.append(
            f"| {label} | {h.fmt_stat(s)} | {h.fmt(imp.median)} | "
            f"{h.fmt(peak.median and peak.median / h.MIB, '.0f')} | {h.fmt(leaves.median, '.0f')} |"
        )
    return head + "\n" + "\n".join(rows)


def ceilings_text(rounds: list[dict[str, dict]]) -> str:
    parts = []
    for field, label in (
        ("first_touch", "first touch of 1 GiB of fresh memory (numpy's allocator)"),
        ("page_cache_read", "page-cache read of the data files into one reused buffer"),
        ("page_cache_read_fresh", "page-cache read of the data files into fresh memory"),
        ("write_fsync", "write + fsync of 1 GiB (GiB/s written)"),
        ("zstd_decode_all", "zstd decode, all cores"),
        ("zstd_decode_one", "zstd decode, one core"),
        ("zstd_decode_reuse_all", "zstd decode into a reused buffer, all cores"),
        ("zstd_decode_reuse_one", "zstd decode into a reused buffer, one core"),
        ("zstd_encode_all", "zstd-1 encode, all cores"),
        ("zstd_encode_one", "zstd-1 encode, one core"),
        ("memcpy", "memcpy"),
    ):
        parts.append(f"| {label} | {h.fmt_stat(h.op_stat(rounds, 'ceilings', field))} |")
    ratio = h.op_stat(rounds, "ceilings", "zstd_ratio")
    return (
        "| ceiling | GiB/s of uncompressed data: median (min-max) |\n|---|---:|\n"
        + "\n".join(parts)
        + f"\n\nzstd-1 compressed / plain size of the checkpoint's chunks: {h.fmt(ratio.median)}."
    )


def sizes_text(rounds: list[dict[str, dict]]) -> str:
    parts = []
    for key in ("orbax_save", "ockpt_save_zstd1", "ockpt_save_none", "ockpt_save_auto"):
        s = h.op_stat(rounds, key, "disk_bytes")
        if s.median is not None:
            parts.append(f"{LABELS[key]} {s.median / h.MIB:.1f} MiB")
    return "On-disk size: " + ("; ".join(parts) if parts else "no save succeeded") + "."


def report(
    args: argparse.Namespace, rounds: list, checked: list, ts_row: tuple, extra: dict
) -> str:
    ok, detail = ts_row
    row = (
        "| tensorstore optional: `import ockpt` + a local save and load (default engine) with "
        f"any import of tensorstore blocked | {'yes' if ok else 'no: ' + detail} | yes | "
        f"{'yes' if ok else '**no**'} |"
    )
    table = h.goal_table(checked) + "\n" + row
    missed = h.reasons(checked, REASONS, {"cores": extra["cores"]})
    if not ok:
        missed.append(f"- **tensorstore optional** (`tensorstore_optional`): {REASONS[TS_ID]}")
    order = [o.key for g in extra["groups"] for o in g]
    lines = h.header(
        "ockpt benchmark results (issue #19)",
        "benchmarks/run.py",
        extra["command"],
        extra["info"],
        extra["seconds"],
    )
    lines += [
        "",
        f"Checkpoint: {args.gib:g} GiB of random float32 in {args.leaves} leaves, written by "
        "Orbax 0.12 (`PyTreeCheckpointer`: OCDBT, zarr v2, zstd level 1), sharded on a (4, 2) "
        "mesh of 8 fake CPU devices; resharded loads target an (8,) mesh. The metadata goals "
        f"use an Orbax checkpoint of {args.meta_leaves} small arrays. Every operation ran in a "
        f"fresh process, once in each of {args.rounds} rounds; within a round ockpt's and "
        "Orbax's versions of the same work ran back to back, in the opposite order every other "
        "round, each with `OPENBLAS_NUM_THREADS=1` (numpy's idle BLAS threads otherwise "
        "spin on the cores the work uses). A ratio is computed within each round and the "
        "table gives its median and range "
        "over the rounds; a range wider than "
        f"{h.NOISY:.0%} of the median is marked **noisy** (a defect of the measurement to "
        "explain, usually other load on the machine). Seconds are the operation's wall time "
        "(imports, data generation and target construction excluded); GiB/s counts "
        f"uncompressed array bytes. † {JAX_NOTE}. `whole process s` is the life of the "
        "operation's process as the benchmark sees it (interpreter start, imports, building "
        "the target, the operation, exit): what a user who starts a program, loads once and "
        "exits waits for. It is the gap between this suite's ratios and a one-load-per-process "
        "measurement: both run every load in a fresh process, but the ratios of the call "
        "leave out the imports (ockpt and numpy; Orbax also jax), which such a measurement "
        "counts, and which the whole-process goal compares.",
        "",
        "## Goals",
        "",
        table,
        "",
        "## Missed goals: reasons",
        "",
        "\n".join(missed) or "Every goal was met.",
        "",
        "## All operations",
        "",
        "`vs Orbax, same work` divides ockpt's rate by that of Orbax doing the same work in the "
        "same round: the same checkpoint's bytes read into the same target, or the same tree "
        'saved. ockpt\'s loads of its own "auto" save are compared with Orbax restoring that '
        "same save, not with Orbax's zstd checkpoint (different bytes).",
        "",
        operations_table(rounds, order),
        "",
        sizes_text(rounds),
        "",
        f"Metadata of the {args.meta_leaves}-leaf checkpoint (a fresh process each):",
        "",
        metadata_table(rounds),
        "",
        "## Ceilings",
        "",
        "Measured in each round on the chunks of the Orbax checkpoint (zstandard, one thread "
        f"per core, {extra['cores']} cores).",
        "",
        ceilings_text(rounds),
    ]
    lines += h.profiles_section(extra["profiles"])
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the checkpoint (GiB)")
    ap.add_argument("--leaves", type=int, default=16, help="number of array leaves")
    ap.add_argument("--meta-leaves", type=int, default=10_000, help="leaves of the metadata case")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (each operation once a round)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per operation")
    ap.add_argument("--dir", default="/tmp/ockpt-bench", help="cache for checkpoints")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--no-profile", action="store_true", help="no profiles of missed goals")
    ap.add_argument("--no-write", action="store_true", help="print only, leave --out alone")
    args = ap.parse_args()
    command = h.command_line("benchmarks/run.py")
    info = h.machine()
    t = time.perf_counter()
    h.warm_imports()
    main_ckpt, meta = ensure_checkpoints(args)
    groups = plan(args, main_ckpt, meta)
    ts_row = without_tensorstore(args)
    rounds = h.run_rounds(groups, max(1, args.rounds), args.timeout)
    checked = h.check(goals(args.meta_leaves), rounds)
    ops = {o.key: o for g in groups for o in g}
    prof = "" if args.no_profile else h.profiles(checked, ops, args.timeout, Path(args.dir))
    extra = {
        "cores": info["cores"],
        "groups": groups,
        "command": command,
        "info": info,
        "seconds": time.perf_counter() - t,
        "profiles": prof,
    }
    text = report(args, rounds, checked, ts_row, extra)
    print(text)
    if not args.no_write:
        Path(args.out).write_text(text)
        h.log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
