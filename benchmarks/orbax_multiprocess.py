"""A checkpoint written by real Orbax from N JAX processes (jax.distributed on localhost, CPU).

    python benchmarks/orbax_multiprocess.py OUT [--processes 16] [--gib 0.5] [--leaves 8]
                                            [--zstd | --raw | --both] [--same-values]
                                            [--timeout 900]

Starts N child processes, each `jax.distributed.initialize` on 127.0.0.1 with one CPU device.
Every process builds `--leaves` float32 global arrays of shape `leaf_shape(...)`, `--gib` GiB
in all, sharded along the first axis over a 1-D mesh of the N devices (each process makes its
own shard with `jax.make_array_from_callback`), and saves them at OUT with
`ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_compression=...))`: OCDBT and zarr v2 as
Orbax 0.12 defaults, zarr chunks zstd-compressed (`--zstd`, the default, as
`ocp.PyTreeCheckpointer()` saves) or raw (`--raw`); `--both` saves OUT/zstd then OUT/raw from
the same processes (one start-up for two checkpoints). Values follow from the global index
alone (`expected(leaf, shape, region)`), so a reader checks them without the data.

Prints one JSON object: the arguments, the leaves' names and shapes, the checkpoints' paths,
the run's wall time and, per process, its peak RSS (VmHWM, over both saves with `--both`) and
wall times (``import``, ``init``: jax.distributed up, ``build``: its shards,
``save_<compression>``: Orbax's save, ``total``).

Measured here (2 cores, 24 GiB RAM, no swap, shared with other jobs, so the times are noisy;
16 processes, 8 leaves; per process: the range over the 16):

| compression | GiB | peak RSS per process | sum of peak RSS | save per process | run wall |
|---|---|---|---|---|---|
| zstd | 0.5 | 303-311 MiB | 4.8 GiB | 2.8-3.8 s | 22 s |
| zstd | 1 | 385-399 MiB | 6.2 GiB | 6.6-9.3 s | 42 s |
| zstd | 2 | 453-512 MiB | 7.8 GiB | 6.9-9.0 s | 55 s |
| zstd | 4 | 678-703 MiB | 11.0 GiB | 14.6-17.8 s | 62 s |
| raw | 0.5 | 256-284 MiB | 4.3 GiB | 1.7-2.7 s | 25 s |
| raw | 1 | 332-343 MiB | 5.3 GiB | 3.0-3.2 s | 32 s |
| raw | 2 | 382-412 MiB | 6.2 GiB | 3.9-6.5 s | 32 s |
| raw | 4 | 602-636 MiB | 9.7 GiB | 5.6-9.5 s | 48 s |
| raw | 6 | 812-860 MiB | 12.7 GiB | 7.0-11.6 s | 66 s |

With almost no data (4 MiB, 3 leaves) a process peaks at 221-225 MiB (the interpreter, jax,
orbax and tensorstore) and the run takes 24 s, nearly all of it 16 interpreters importing jax
and orbax on 2 cores (10-13 s each). A process's peak is about 225 MiB plus 1.8 times its
shard (`gib / 16`) with zstd, 1.6 times raw. Largest size for 16 processes here: keeping the sum
of the peaks under 20 GiB (24 GiB less the kernel, the parent and the page cache's floor), about
9 GiB with zstd (16 x 225 MiB + 1.8 x 9 GiB = 19.7 GiB) and 10 GiB raw on an otherwise idle
machine; measured up to 4 GiB (zstd) and 6 GiB (raw). Other jobs here held 4-9 GiB during these
runs; next to them 6 GiB (zstd: about 14.3 GiB in all) is the largest size that stays safe.

`--same-values` lifts that limit: every leaf holds leaf 0's values, written once to a file that
each process maps read-only; jax aliases an aligned read-only numpy array on CPU, so a shard is
a view of the file's pages (which the kernel may drop and read again), and a process holds only
Orbax's copy of what it saves. Measured here on an idle machine (zstd, leaves of 256 MiB):

| GiB | leaves | peak RSS per process | sum of peak RSS | least MemAvailable | run wall |
|---|---|---|---|---|---|
| 2 | 8 | 354 MiB | 5.5 GiB | 20.7 GB | 15 s |
| 8 | 32 | 700 MiB | 10.8 GiB | 15.2 GB | 32 s |
| 16 | 64 | 1157 MiB | 18.0 GiB | 7.5 GB | 48 s |

(MemAvailable sampled every 0.5 s, from 24.1 GB before the run.) About 225 MiB plus 0.9 times
the share: 16 GiB from 16 processes fits with 7 GB to spare.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

#: columns of every leaf; its rows are a multiple of the process count
COLUMNS = 1024
#: Knuth's multiplicative hash constant; values are `(hash of the flat index) mod 2**24`
_MULTIPLIER = 2654435761
_MASK = 2**24 - 1
#: `--zstd`, `--raw` or `--both`
Compression = Literal["zstd", "raw", "both"]


def leaf_name(leaf: int) -> str:
    """The tree key of leaf number `leaf` (zero-padded so names sort in leaf order)."""
    return f"leaf_{leaf:03d}"


def leaf_shape(gib: float, leaves: int, processes: int) -> tuple[int, int]:
    """The shape of every leaf: `gib` GiB of float32 over `leaves` leaves, rows a multiple of
    `processes` (at least one row per process), so each process holds an equal shard."""
    elements = int(gib * 2**30 / 4 / leaves)
    rows = max(processes, elements // COLUMNS // processes * processes)
    return rows, COLUMNS


def expected(leaf: int, shape: Sequence[int], region: tuple[slice, ...] = ()) -> np.ndarray:
    """The float32 values of `region` of leaf `leaf`: the hash of each element's flat global
    index (offset per leaf) mod 2**24, exact in float32; computed for the region alone."""
    region = tuple(region) + (slice(None),) * (len(shape) - len(region))
    flat = np.zeros((1,) * len(shape), dtype=np.uint64)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = np.arange(*region[axis].indices(shape[axis]), dtype=np.uint64)
        flat = flat + (index * np.uint64(stride)).reshape(
            [-1 if a == axis else 1 for a in range(len(shape))]
        )
        stride *= shape[axis]
    offset = np.uint64(leaf * stride)
    return (((flat + offset) * np.uint64(_MULTIPLIER)) & np.uint64(_MASK)).astype(np.float32)


def write_source(path: str, shape: tuple[int, int], rows: int = 4096) -> None:
    """Write leaf 0's values (`expected(0, shape)`) to `path` as raw float32, `rows` at a time."""
    with open(path, "wb") as f:
        for start in range(0, shape[0], rows):
            region = (slice(start, min(start + rows, shape[0])),)
            f.write(expected(0, shape, region).tobytes())


def checkpoints(out: str | os.PathLike[str], compression: Compression) -> dict[str, Path]:
    """Where each checkpoint of a run goes: OUT itself, or OUT/zstd and OUT/raw for ``both``."""
    if compression == "both":
        return {c: Path(out) / c for c in ("zstd", "raw")}
    return {compression: Path(out)}


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def _worker(args: argparse.Namespace) -> None:
    """One process of the save: join the coordinator, build this process's shards, save."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import orbax.checkpoint as ocp

    times["import"] = time.perf_counter() - start
    mark = time.perf_counter()
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{args.port}",
        num_processes=args.processes,
        process_id=args.process_id,
        initialization_timeout=int(args.timeout),
    )
    assert jax.process_count() == args.processes and len(jax.local_devices()) == 1
    times["init"] = time.perf_counter() - mark
    mark = time.perf_counter()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("p",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("p"))
    shape = leaf_shape(args.gib, args.leaves, args.processes)
    if args.source:
        # jax aliases a read-only, aligned numpy array on CPU: every leaf's shard is a view of
        # the same pages of the mapped file, which the kernel may drop and read again
        source = np.memmap(args.source, dtype=np.float32, mode="r", shape=shape)
        tree = {
            leaf_name(leaf): jax.make_array_from_callback(shape, sharding, source.__getitem__)
            for leaf in range(args.leaves)
        }
    else:
        tree = {
            leaf_name(leaf): jax.make_array_from_callback(
                shape, sharding, lambda region, leaf=leaf: expected(leaf, shape, region)
            )
            for leaf in range(args.leaves)
        }
    times["build"] = time.perf_counter() - mark
    for compression, path in checkpoints(args.out, args.compression).items():
        mark = time.perf_counter()
        handler = ocp.PyTreeCheckpointHandler(use_compression=compression == "zstd")
        checkpointer = ocp.Checkpointer(handler)
        checkpointer.save(path.absolute(), args=ocp.args.PyTreeSave(tree))
        checkpointer.close()
        times[f"save_{compression}"] = time.perf_counter() - mark
    jax.distributed.shutdown()
    times["total"] = time.perf_counter() - start
    result = {"process": args.process_id, "peak_rss": _peak_rss(), "seconds": times}
    print("RESULT " + json.dumps(result), flush=True)


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for the coordinator."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(
    out: str | os.PathLike[str],
    *,
    processes: int = 16,
    gib: float = 0.5,
    leaves: int = 8,
    compression: Compression = "zstd",
    timeout: float = 900,
    same_values: bool = False,
) -> dict[str, Any]:
    """Save the checkpoint at `out` from `processes` child processes; returns the report
    (what `main` prints). Raises RuntimeError, with the failing process's log, if any fails.
    With `same_values` every leaf holds leaf 0's values, read from one mapped file."""
    if compression == "both":
        os.makedirs(out)  # the two checkpoints' parent; like a checkpoint, it must not exist
    port = _free_port()
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    env["JAX_PLATFORMS"] = "cpu"
    command = [sys.executable, os.path.abspath(__file__), os.fspath(out), "--port", str(port)]
    command += ["--processes", str(processes), "--gib", str(gib), "--leaves", str(leaves)]
    command += ["--timeout", str(timeout), f"--{compression}"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as logs:
        if same_values:
            source = os.path.join(logs, "source.f32")
            write_source(source, leaf_shape(gib, leaves, processes))
            command += ["--source", source]
        procs = []
        for pid in range(processes):
            log = open(os.path.join(logs, f"{pid}.log"), "w+")  # noqa: SIM115 - closed below
            child = [*command, "--process-id", str(pid)]
            procs.append((subprocess.Popen(child, env=env, stdout=log, stderr=log), log))
        deadline = time.monotonic() + timeout
        codes = [proc.poll() for proc, _ in procs]
        while None in codes and not any(codes) and time.monotonic() < deadline:
            time.sleep(0.1)  # a failed process leaves the others waiting at a barrier
            codes = [proc.poll() for proc, _ in procs]
        timed_out = None in codes and not any(codes)
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        wall = time.perf_counter() - start
        results = []
        for pid, (proc, log) in enumerate(procs):
            log.seek(0)
            text = log.read()
            log.close()
            lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                why = f"timed out after {timeout:g} s" if timed_out else f"exit {proc.returncode}"
                raise RuntimeError(f"process {pid} of {processes} failed ({why}):\n{text[-4000:]}")
            results.append(json.loads(lines[-1].removeprefix("RESULT ")))
    rss = [r["peak_rss"] for r in results]
    return {
        "out": os.fspath(out),
        "processes": processes,
        "gib": gib,
        "leaves": {
            leaf_name(leaf): list(leaf_shape(gib, leaves, processes)) for leaf in range(leaves)
        },
        "same_values": same_values,
        "checkpoints": {c: os.fspath(p) for c, p in checkpoints(out, compression).items()},
        "wall_seconds": wall,
        "peak_rss_max": max(rss),
        "peak_rss_sum": sum(rss),
        "per_process": results,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line: the parent starts the processes; `--process-id` runs one."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="the checkpoint directory to write (must not exist)")
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--gib", type=float, default=0.5, help="array bytes in all, GiB")
    parser.add_argument("--leaves", type=int, default=8)
    mode = parser.add_mutually_exclusive_group()
    for name, text in [
        ("zstd", "zarr chunks compressed with zstd (Orbax's default)"),
        ("raw", "use_compression=False"),
        ("both", "OUT/zstd and OUT/raw, saved one after the other by the same processes"),
    ]:
        mode.add_argument(
            f"--{name}", dest="compression", action="store_const", const=name, help=text
        )
    parser.set_defaults(compression="zstd")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole save")
    parser.add_argument(
        "--same-values",
        action="store_true",
        help="every leaf holds leaf 0's values, mapped from one file: a process holds no copy "
        "of its shards (jax aliases the mapped pages), so the save fits in less memory",
    )
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.process_id is not None:
        _worker(args)
        return
    report = write(
        args.out,
        processes=args.processes,
        gib=args.gib,
        leaves=args.leaves,
        compression=args.compression,
        timeout=args.timeout,
        same_values=args.same_values,
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
