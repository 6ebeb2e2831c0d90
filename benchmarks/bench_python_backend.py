"""Throughput of the python backend against the tensorstore backend on one Orbax checkpoint.

    python benchmarks/bench_python_backend.py [--gib 1.0] [--dir /tmp/ockpt-bench] [--zarr3]

Writes (once) an Orbax 0.12 checkpoint of `--gib` GiB of random float32 in 16 leaves sharded
over 8 fake CPU devices (in a subprocess, with orbax and jax), then reads every array in full
with each backend, twice, and prints GiB/s. The reading process imports neither orbax nor jax.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reference"))

WRITE = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    out, gib, zarr3 = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    n = int(gib * 2**30 / 4 / 16)
    rows = max(8, int(n ** 0.5) // 8 * 8)
    cols = max(2, n // rows // 2 * 2)
    rng = np.random.default_rng(0)
    tree = {
        f"w{i:02d}": jax.device_put(
            rng.standard_normal((rows, cols), dtype=np.float32), NamedSharding(mesh, P("x", "y"))
        )
        for i in range(16)
    }
    ckptr = ocp.PyTreeCheckpointer(use_zarr3=zarr3)
    ckptr.save(out, tree)
    print("written", rows, cols)
    """
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/tmp/ockpt-bench")
    ap.add_argument("--zarr3", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    path = Path(args.dir) / f"{'v3' if args.zarr3 else 'v2'}-{args.gib:g}GiB"
    if not path.exists():
        subprocess.run(
            [sys.executable, "-c", WRITE, str(path), str(args.gib), "1" if args.zarr3 else "0"],
            check=True,
        )
    import numpy as np

    from ockpt import engines
    from ockpt.engines import python as python_engine
    from ockpt.layout import detect
    from ockpt.store import as_store, new_context

    names = sorted(python_engine.key_listing(python_engine.item_keys(path))["params"])
    loc = as_store(path)
    fmt = detect(path).item
    backends = {
        "tensorstore": lambda: engines.open_store(
            loc, fmt, backend="tensorstore", context=new_context()
        ),
        "python": lambda: engines.open_store(loc, fmt, backend="python"),
    }
    results = {}
    for name, make in backends.items():
        best = None
        for _ in range(args.repeat):
            store = make()
            t0 = time.perf_counter()
            arrays = store.open_many(names)
            total = 0
            for a in arrays.values():
                box = tuple((0, n) for n in a.shape)
                data = np.asarray(a.read(box).result())
                total += data.nbytes
                del data
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        results[name] = (total, best)
        print(
            f"{name:12s} {total / 2**30:.3f} GiB in {best:.2f} s = {total / 2**30 / best:.3f} GiB/s"
        )
    ts_rate = results["tensorstore"][0] / results["tensorstore"][1]
    py_rate = results["python"][0] / results["python"][1]
    print(f"python / tensorstore = {py_rate / ts_rate:.2f} (cores: {os.cpu_count()})")


if __name__ == "__main__":
    main()
