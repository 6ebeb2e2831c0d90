"""One measured operation per process, for `benchmarks/run.py` (not meant to be run by hand).

    python benchmarks/_ops.py OP '{"json": "arguments"}'

Prints one JSON line: ``seconds`` (wall time of the operation alone: imports, data generation
and target construction are outside it), ``cpu_seconds`` (user + system time of all its
threads over the same span), ``bytes`` (array bytes moved), ``base_rss`` (RSS just
before the operation), ``peak_rss`` (the process's peak RSS, VmHWM, counted from the start of
the operation; it includes the interpreter, the imports and anything already held) and
``import_seconds``. Running each operation in a fresh process keeps caches, thread pools and
peak RSS its own.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reference"))

T0 = time.perf_counter()


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    """Start VmHWM afresh (Linux: writing 5 to clear_refs resets the peak RSS)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _setup_jax(devices: int = 8):  # type: ignore[no-untyped-def]
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    return jax


def leaf_shape(gib: float, leaves: int) -> tuple[int, int]:
    """Rows (a multiple of 8) x cols (even) so that `leaves` float32 leaves hold about `gib`."""
    n = int(gib * 2**30 / 4 / leaves)
    rows = max(8, int(n**0.5) // 8 * 8)
    cols = max(2, n // rows // 2 * 2)
    return rows, cols


def names(leaves: int) -> list[str]:
    return [f"w{i:03d}" for i in range(leaves)]


def _mesh(jax, kind: str):  # type: ignore[no-untyped-def]
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    if kind == "reshard":  # saved on (4, 2), loaded on (8,)
        mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
        return NamedSharding(mesh, P("x", None))
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    return NamedSharding(mesh, P("x", "y"))


def make_tree(gib: float, leaves: int):  # type: ignore[no-untyped-def]
    """Random float32 weights (standard normal: zstd barely shrinks them) on a (4, 2) mesh."""
    jax = _setup_jax()
    import numpy as np

    sharding = _mesh(jax, "save")
    rows, cols = leaf_shape(gib, leaves)
    rng = np.random.default_rng(0)
    tree = {}
    for name in names(leaves):
        host = rng.standard_normal((rows, cols), dtype=np.float32)
        tree[name] = jax.device_put(host, sharding)
        del host
    jax.block_until_ready(tree)
    return tree


def abstract(gib: float, leaves: int, kind: str, subset: list[str] | None = None) -> dict:
    jax = _setup_jax()
    import numpy as np

    sharding = _mesh(jax, kind)
    shape = leaf_shape(gib, leaves)
    return {
        n: jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)
        for n in (subset or names(leaves))
    }


def _nbytes(tree) -> int:  # type: ignore[no-untyped-def]
    total = 0
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif hasattr(x, "nbytes"):
            total += int(x.nbytes)
    return total


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return r.ru_utime + r.ru_stime


def _timed(fn):  # type: ignore[no-untyped-def]
    base = _status("VmRSS")
    _reset_peak()
    c = _cpu()
    t = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t
    cpu = _cpu() - c
    return out, {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "base_rss": base,
        "peak_rss": _status("VmHWM"),
    }


# ---------------------------------------------------------------------------------------------
# operations


def op_orbax_save(a: dict) -> dict:
    tree = make_tree(a["gib"], a["leaves"])
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    _, r = _timed(lambda: ckptr.save(a["path"], tree))
    return {**r, "bytes": _nbytes(tree), "disk_bytes": _du(a["path"])}


def op_ockpt_save(a: dict) -> dict:
    tree = make_tree(a["gib"], a["leaves"])
    import ockpt

    opts = {"layout": "item", "zarr_version": 2}
    if a["compression"] == "zstd":
        opts.update(compression="zstd", compression_level=1)
    else:
        opts["compression"] = a["compression"]
    _, r = _timed(lambda: ockpt.save_pytree(a["path"], tree, **opts))
    return {**r, "bytes": _nbytes(tree), "disk_bytes": _du(a["path"])}


def op_orbax_restore(a: dict) -> dict:
    jax = _setup_jax()
    import numpy as np
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    if a["target"] == "numpy":
        restore_args = {n: ocp.RestoreArgs(restore_type=np.ndarray) for n in names(a["leaves"])}
        args = ocp.args.PyTreeRestore(restore_args=restore_args)
    else:
        item = abstract(a["gib"], a["leaves"], a["target"])
        restore_args = ocp.checkpoint_utils.construct_restore_args(item)
        args = ocp.args.PyTreeRestore(item=item, restore_args=restore_args)

    def run():  # type: ignore[no-untyped-def]
        return jax.block_until_ready(ckptr.restore(a["path"], args=args))

    out, r = _timed(run)
    return {**r, "bytes": _nbytes(out)}


def op_ockpt_load(a: dict) -> dict:
    target = None
    subset = None
    if a["target"] == "partial":
        count = max(1, round(a["leaves"] / 10))
        subset = names(a["leaves"])[:count]
    if a["target"] in ("jax", "reshard"):
        jax = _setup_jax()
        target = abstract(a["gib"], a["leaves"], a["target"])
    import numpy as np

    import ockpt
    import ockpt.engines.python  # noqa: F401 - imported before the clock starts

    if subset is not None:  # numpy targets that hold no memory
        shape = leaf_shape(a["gib"], a["leaves"])
        target = {n: np.broadcast_to(np.float32(0), shape) for n in subset}

    def run():  # type: ignore[no-untyped-def]
        out = ockpt.load_pytree(a["path"], target, backend=a["backend"], partial=subset is not None)
        if a["target"] in ("jax", "reshard"):
            jax.block_until_ready(out)
        return out

    out, r = _timed(run)
    r["jax_imported"] = "jax" in sys.modules
    return {**r, "bytes": _nbytes(out)}


def op_make_meta(a: dict) -> dict:
    """A many-leaf checkpoint written by Orbax, shaped like a model: layers of 100 parameters
    whose shapes differ within a layer and repeat across layers."""
    _setup_jax(1)
    import numpy as np
    import orbax.checkpoint as ocp

    n = a["meta_leaves"]
    tree: dict = {}
    for i in range(n):
        tree.setdefault(f"layer{i // 100:03d}", {})[f"p{i % 100:02d}"] = np.full(
            (4, 1 + i % 100), i, np.float32
        )
    ckptr = ocp.PyTreeCheckpointer()
    _, r = _timed(lambda: ckptr.save(a["path"], tree))
    return {**r, "bytes": _nbytes(tree)}


def op_ockpt_metadata(a: dict) -> dict:
    t = time.perf_counter()
    import ockpt

    imported = time.perf_counter() - t
    out, r = _timed(lambda: ockpt.pytree_metadata(a["path"]))
    leaves = sum(len(v) for v in out.values())
    return {**r, "import_seconds": imported, "leaves": leaves, "jax_imported": "jax" in sys.modules}


def op_orbax_metadata(a: dict) -> dict:
    t = time.perf_counter()
    _setup_jax(1)
    import orbax.checkpoint as ocp

    imported = time.perf_counter() - t
    ckptr = ocp.PyTreeCheckpointer()
    out, r = _timed(lambda: ckptr.metadata(a["path"]))
    tree = getattr(out, "item_metadata", None) or getattr(out, "tree", None) or out
    try:
        leaves = sum(len(v) for v in dict(tree).values())
    except (TypeError, ValueError, AttributeError):
        leaves = -1
    return {**r, "import_seconds": imported, "leaves": leaves}


def op_ockpt_validate(a: dict) -> dict:
    t = time.perf_counter()
    import ockpt

    imported = time.perf_counter() - t
    report, r = _timed(lambda: ockpt.validate(a["path"]))
    return {**r, "import_seconds": imported, "ok": bool(report.ok)}


def main() -> None:
    op, args = sys.argv[1], json.loads(sys.argv[2])
    profile = os.environ.get("OCKPT_BENCH_PROFILE")
    fn = globals()[f"op_{op}"]
    if profile:  # pyinstrument around the whole operation (setup included)
        from pyinstrument import Profiler

        with Profiler(interval=0.001) as p:
            result = fn(args)
        Path(profile).write_text(p.output_text(unicode=True, color=False, show_all=False))
    else:
        result = fn(args)
    result.setdefault("import_seconds", None)
    result["process_seconds"] = time.perf_counter() - T0
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
