"""One measured operation per process, for `run.py` and `scale.py` (not meant to be run by hand).

    python benchmarks/_ops.py OP '{"json": "arguments"}'

Prints one line ``RESULT {json}``: ``seconds`` (wall time of the operation alone: imports, data
generation and target construction are outside it), ``cpu_seconds`` (user + system time of all
its threads over the same span), ``bytes`` (array bytes moved), ``base_rss`` (RSS just before
the operation), ``peak_rss`` (the process's peak RSS, VmHWM, counted from the start of the
operation; it includes the interpreter, the imports and anything already held) and
``import_seconds``. Running each operation in a fresh process keeps caches, thread pools and
peak RSS its own. With ``OCKPT_BENCH_PROFILE=FILE`` the timed call runs under cProfile and the
top of the profile is written to FILE.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reference"))

T0 = time.perf_counter()
GIB = float(2**30)


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
    """jax on `devices` fake CPU devices (jax adopts 64-byte-aligned host buffers without a
    copy there; a GPU or TPU would add the host-to-device copy)."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    return jax


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return r.ru_utime + r.ru_stime


def _profiled(fn: Callable[[], Any], out: str) -> Any:
    """`fn()` under cProfile; the 25 functions with the most cumulative time go to `out`."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    result = prof.runcall(fn)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("cumulative").print_stats(25)
    Path(out).write_text(text.getvalue())
    return result


def _timed(fn: Callable[[], Any]) -> tuple[Any, dict]:
    base = _status("VmRSS")
    _reset_peak()
    c = _cpu()
    t = time.perf_counter()
    profile = os.environ.get("OCKPT_BENCH_PROFILE")
    out = _profiled(fn, profile) if profile else fn()
    seconds = time.perf_counter() - t
    cpu = _cpu() - c
    return out, {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "base_rss": base,
        "peak_rss": _status("VmHWM"),
    }


def _nbytes(tree: Any) -> int:
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


def _leaves(tree: Any) -> int:
    if isinstance(tree, dict):
        return sum(_leaves(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_leaves(v) for v in tree)
    return 1


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


# ---------------------------------------------------------------------------------------------
# the trees


def leaf_shape(gib: float, leaves: int) -> tuple[int, int]:
    """Rows (a multiple of 8) x cols (even) so that `leaves` float32 leaves hold about `gib`."""
    n = int(gib * GIB / 4 / leaves)
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


def make_tree(gib: float, leaves: int) -> dict:
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


def abstract(gib: float, leaves: int, kind: str) -> dict:
    jax = _setup_jax()
    import numpy as np

    sharding = _mesh(jax, kind)
    shape = leaf_shape(gib, leaves)
    return {n: jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding) for n in names(leaves)}


def many_leaf_tree(n: int) -> dict:
    """`n` leaves of 4 float32 in nested dicts of at most 100 (the layers of a large model);
    leaf i holds the value i."""
    import numpy as np

    out: dict = {}
    for i in range(n):
        group = out.setdefault(f"block_{i // 1000:03d}", {}).setdefault(
            f"layer_{i // 100 % 10}", {}
        )
        group[f"p{i % 100:02d}"] = np.full((4,), i, dtype=np.float32)
    return out


def check_many_leaf_tree(got: Any, n: int) -> None:
    """Every leaf of a loaded `many_leaf_tree(n)` holds its value."""
    import numpy as np

    seen = 0
    for b, layers in got.items():
        for layer, params in layers.items():
            for p, v in params.items():
                i = int(b[6:]) * 1000 + int(layer[6:]) * 100 + int(p[1:])
                v = np.asarray(v)
                if v.dtype != np.float32 or not (v == i).all():
                    raise AssertionError(f"wrong value at {b}/{layer}/{p}")
                seen += 1
    if seen != n:
        raise AssertionError(f"{seen} leaves loaded, {n} saved")


def big_array(gib: float):  # type: ignore[no-untyped-def]
    import numpy as np

    n = int(gib * GIB) // 4
    a = np.empty((max(1, n // 4096), 4096), dtype=np.float32)
    rng = np.random.default_rng(0)
    for i in range(0, a.shape[0], 4096):  # random in blocks: no 2x temporary
        a[i : i + 4096] = rng.standard_normal((min(4096, a.shape[0] - i), 4096), np.float32)
    return a


def _checksum(a) -> float:  # type: ignore[no-untyped-def]
    return float(a[::997, ::61].astype("float64").sum())


# ---------------------------------------------------------------------------------------------
# operations: the 1 GiB checkpoint (run.py)


def op_orbax_save(a: dict) -> dict:
    tree = make_tree(a["gib"], a["leaves"])
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    _, r = _timed(lambda: ckptr.save(a["path"], tree))
    return {**r, "bytes": _nbytes(tree), "disk_bytes": _du(a["path"])}


def op_ockpt_save(a: dict) -> dict:
    """An item directory in zarr v2, as `PyTreeCheckpointer` writes (Orbax restores it)."""
    tree = make_tree(a["gib"], a["leaves"])
    import ockpt

    opts: dict = {"layout": "item", "zarr_version": 2, "compression": a["compression"]}
    if a["compression"] == "zstd":
        opts["compression_level"] = 1
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
    out, r = _timed(lambda: jax.block_until_ready(ckptr.restore(a["path"], args=args)))
    return {**r, "bytes": _nbytes(out)}


def op_ockpt_load(a: dict) -> dict:
    """Into numpy (no target) or jax.Arrays on the saved or another sharding; with `warm`,
    the load timed is the process's second (the first, untimed, leaves the page cache, the
    thread pool and the allocator warm)."""
    target = None
    if a["target"] in ("jax", "reshard"):
        jax = _setup_jax()
        target = abstract(a["gib"], a["leaves"], a["target"])
    import ockpt

    def run() -> Any:
        out = ockpt.load_pytree(a["path"], target, backend=a["backend"])
        return jax.block_until_ready(out) if target is not None else out

    if a.get("warm"):
        first = run()
        del first  # freed before the timed load, as a program loading twice would
    out, r = _timed(run)
    return {**r, "bytes": _nbytes(out), "jax_imported": "jax" in sys.modules}


def _write_fsync(directory: Path, nbytes: int = 1 << 30) -> float:
    """Seconds to write `nbytes` to a new file and fsync it (as ``dd bs=64M conv=fsync``):
    the disk's ceiling for a save, which must have its bytes on the disk before it commits."""
    block = os.urandom(64 << 20)
    path = directory / "ceiling-write.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        t = time.perf_counter()
        for _ in range(nbytes // len(block)):
            os.write(fd, block)
        os.fsync(fd)
        return time.perf_counter() - t
    finally:
        os.close(fd)
        path.unlink()


def op_ceilings(a: dict) -> dict:
    """The machine's ceilings on the checkpoint's own chunks, in GiB/s of uncompressed data:
    page-cache read of its data files into one reused buffer and into fresh memory (what a
    load must fill), zstd decode (into fresh `bytes`, and into a reused buffer) and level-1
    encode on all cores and on one, memcpy, write + fsync of 1 GiB (in GiB/s written), and the
    first touch of 1 GiB of fresh memory from numpy's allocator (the kernel's page faults: what
    a fresh process's load pays for its outputs)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import zstandard

    from ockpt.engines import python as python_engine

    item = Path(a["path"])
    files = sorted(p for p in item.glob("ocdbt.process_*/d/*") if p.is_file())
    out: dict = {"seconds": 0.0}
    t = time.perf_counter()  # first, while this process has taken no memory back from numpy
    fresh = np.empty(1 << 30, np.uint8)
    fresh[:] = 1
    out["first_touch"] = 1 / (time.perf_counter() - t)
    del fresh
    buf = bytearray(max(p.stat().st_size for p in files))

    def read_all() -> int:
        n = 0
        for p in files:
            with open(p, "rb", buffering=0) as f:
                n += f.readinto(buf)
        return n

    read_all()  # in the page cache
    t = time.perf_counter()
    out["page_cache_read"] = read_all() / (time.perf_counter() - t) / GIB

    def read_fresh() -> int:
        """Each file into new memory from numpy's allocator, as a load's outputs are (their
        pages faulted in by the read), by one ``os.preadv`` as a load reads a raw value
        (`FileIO.readinto` into fresh memory ran 4x slower here)."""
        n, held = 0, []
        for p in files:
            fresh = np.empty(p.stat().st_size, np.uint8)
            fd = os.open(p, os.O_RDONLY)
            try:
                n += os.preadv(fd, [fresh], 0)
            finally:
                os.close(fd)
            held.append(fresh)
        return n

    t = time.perf_counter()
    out["page_cache_read_fresh"] = read_fresh() / (time.perf_counter() - t) / GIB
    out["write_fsync"] = 1 / _write_fsync(Path(a["scratch"]))
    kv = python_engine.open_item_store(item)
    frames = [kv.get(k) for k in kv.list() if not k.endswith((".zarray", "zarr.json"))]
    kv.close()
    raw = [zstandard.ZstdDecompressor().decompress(f) for f in frames]
    plain = sum(len(x) for x in raw)
    out["zstd_ratio"] = sum(len(f) for f in frames) / plain

    def decode(f: bytes) -> int:
        return len(zstandard.ZstdDecompressor().decompress(f))

    def decode_reuse(f: bytes, _bufs: dict = {}) -> int:  # noqa: B006 - per-thread buffers
        """Decode into this thread's reused buffer: no fresh memory (no page faults)."""
        import threading

        size = zstandard.get_frame_parameters(f).content_size
        key = threading.get_ident()
        if len(_bufs.get(key, b"")) < size:
            _bufs[key] = bytearray(size)
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_size=len(f))
        return reader.readinto(memoryview(_bufs[key])[:size])

    def encode(x: bytes) -> int:
        return len(zstandard.ZstdCompressor(level=1).compress(x))

    cores = os.cpu_count() or 1
    for name, fn, data in (
        ("decode", decode, frames),
        ("decode_reuse", decode_reuse, frames),
        ("encode", encode, raw),
    ):
        for threads, label in ((cores, "all"), (1, "one")):
            with ThreadPoolExecutor(threads) as ex:
                t = time.perf_counter()
                list(ex.map(fn, data))
                out[f"zstd_{name}_{label}"] = plain / (time.perf_counter() - t) / GIB
    del raw, frames
    src = np.ones(256 * 2**20 // 8, np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = time.perf_counter()
    np.copyto(dst, src)
    out["memcpy"] = src.nbytes / (time.perf_counter() - t) / GIB
    return out


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
    out, r = _timed(lambda: ockpt.pytree_metadata(a["path"], backend=a.get("backend", "auto")))
    return {
        **r,
        "import_seconds": imported,
        "leaves": _leaves(out),
        "jax_imported": "jax" in sys.modules,
    }


def op_orbax_metadata(a: dict) -> dict:
    t = time.perf_counter()
    _setup_jax(1)
    import orbax.checkpoint as ocp

    imported = time.perf_counter() - t
    ckptr = ocp.PyTreeCheckpointer()
    out, r = _timed(lambda: ckptr.metadata(a["path"]))
    tree = getattr(out, "item_metadata", out)  # a StepMetadata in recent Orbax versions
    if tree is None:
        raise SystemExit(f"Orbax's metadata of {a['path']} holds no tree")
    return {**r, "import_seconds": imported, "leaves": _leaves(dict(tree))}


def op_ockpt_validate(a: dict) -> dict:
    """`ockpt.validate` (deep: every chunk read and decoded); `bytes` is the array data of the
    checkpoint when deep, so that its rate compares with a load's."""
    t = time.perf_counter()
    import ockpt

    imported = time.perf_counter() - t
    deep = bool(a.get("deep"))
    report, r = _timed(lambda: ockpt.validate(a["path"], deep=deep))
    if not report.ok:
        raise SystemExit(f"validate found errors: {[f.rule for f in report.findings][:5]}")
    rows, cols = leaf_shape(a["gib"], a["leaves"]) if deep else (0, 0)
    return {**r, "import_seconds": imported, "bytes": a.get("leaves", 0) * rows * cols * 4}


def op_without_tensorstore(a: dict) -> dict:
    """`import ockpt`, a local save and a load with the default engine while any import of
    tensorstore fails: whether tensorstore is optional."""
    import importlib.abc

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name == "tensorstore" or name.startswith("tensorstore."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)

    sys.meta_path.insert(0, Blocker())
    import numpy as np

    steps = {}
    try:
        import ockpt

        steps["import"] = True
        tree = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": {"c": np.ones(5)}}
        path = os.path.join(a["path"], "ckpt")
        ockpt.save_pytree(path, tree, overwrite=True)
        steps["save"] = True
        got = ockpt.load_pytree(path)
        if not (np.array_equal(got["a"], tree["a"]) and np.array_equal(got["b"]["c"], np.ones(5))):
            raise AssertionError("loaded values differ from the saved ones")
        steps["load"] = True
    except Exception as e:  # noqa: BLE001 - the failure is the answer
        steps["error"] = f"{type(e).__name__}: {e}"[:300]
    return {"seconds": 0.0, **steps, "tensorstore_imported": "tensorstore" in sys.modules}


# ---------------------------------------------------------------------------------------------
# operations: the 100,000-leaf tree and the big array (scale.py)


def op_tree_save(a: dict) -> dict:
    tree = many_leaf_tree(a["leaves"])
    import ockpt

    _, r = _timed(lambda: ockpt.save_pytree(a["path"], tree, layout="item"))
    return {**r, "bytes": _nbytes(tree), "disk_bytes": _du(a["path"])}


def op_orbax_tree_save(a: dict) -> dict:
    tree = many_leaf_tree(a["leaves"])
    _setup_jax(1)
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    _, r = _timed(lambda: ckptr.save(a["path"], tree))
    return {**r, "bytes": _nbytes(tree), "disk_bytes": _du(a["path"])}


def op_tree_load(a: dict) -> dict:
    import ockpt

    got, r = _timed(lambda: ockpt.load_pytree(a["path"], backend=a.get("backend", "auto")))
    check_many_leaf_tree(got, a["leaves"])
    return {**r, "bytes": _nbytes(got)}


def op_orbax_tree_restore(a: dict) -> dict:
    jax = _setup_jax(1)
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    got, r = _timed(lambda: jax.block_until_ready(ckptr.restore(a["path"])))
    check_many_leaf_tree(got, a["leaves"])
    return {**r, "bytes": _nbytes(got)}


def op_big_save(a: dict) -> dict:
    """One float32 array of `gib` GiB; with `one_chunk`, a single chunk (as Orbax writes a
    slice) instead of the default chunking."""
    arr = big_array(a["gib"])
    import ockpt

    limit = {"chunk_byte_size": 1 << 62} if a.get("one_chunk") else {}
    _, r = _timed(lambda: ockpt.save_pytree(a["path"], {"w": arr}, **limit))
    return {**r, "bytes": arr.nbytes, "checksum": _checksum(arr), "disk_bytes": _du(a["path"])}


def op_big_load(a: dict) -> dict:
    import ockpt

    got, r = _timed(lambda: ockpt.load_pytree(a["path"], backend=a.get("backend", "auto")))
    return {**r, "bytes": got["w"].nbytes, "checksum": _checksum(got["w"])}


# ---------------------------------------------------------------------------------------------
# operations: a checkpoint of many GiB (scale.py)


def _source(a: dict):  # type: ignore[no-untyped-def]
    """The values of every leaf of the big checkpoint: one leaf of random float32 in a file
    (written once), mapped, so that a save of many GiB holds no more than one leaf's pages."""
    import numpy as np

    rows = int(a["leaf_mib"] * 2**20) // 4096
    path = Path(a["source"])
    if not path.exists() or path.stat().st_size != rows * 4096:
        m = np.memmap(path.with_suffix(".tmp"), dtype=np.float32, mode="w+", shape=(rows, 1024))
        rng = np.random.default_rng(0)
        for i in range(0, rows, 4096):
            m[i : i + 4096] = rng.standard_normal(m[i : i + 4096].shape, dtype=np.float32)
        m.flush()
        del m
        os.replace(path.with_suffix(".tmp"), path)
    return np.memmap(path, dtype=np.float32, mode="r", shape=(rows, 1024))


def big_names(leaves: int) -> list[str]:
    return [f"layer{i:03d}" for i in range(leaves)]


def op_big_tree_save(a: dict) -> dict:
    """`leaves` leaves of `leaf_mib` MiB each (every one the same values), saved by ockpt as
    an item directory with its defaults: chunks of at most 64 MiB (WRITE-016), stored raw
    (`compression="auto"` keeps random floats raw)."""
    src = _source(a)
    import ockpt

    tree = dict.fromkeys(big_names(a["leaves"]), src)
    opts = {"layout": "item", "compression": "auto"}
    _, r = _timed(lambda: ockpt.save_pytree(a["path"], tree, **opts))
    return {**r, "bytes": src.nbytes * len(tree), "disk_bytes": _du(a["path"])}


def _evict(path: str) -> None:
    """Drop the checkpoint's files from the page cache (``POSIX_FADV_DONTNEED``: clean pages
    go; no privilege needed), so that the next read comes from the disk: a cold read."""
    for dirpath, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _sparse_sum(x) -> float:  # type: ignore[no-untyped-def]
    """A checksum reading one row in 997 (a page or two of each 4 MiB)."""
    return float(x.reshape(x.shape[0], -1)[::997].astype("float64").sum())


def op_big_read_one(a: dict) -> dict:
    """Open the checkpoint and read one leaf (`mmap`: mapped, the pages read when touched),
    cold (`cold`: its files out of the page cache first) or warm; then, outside the timed
    part, a checksum of one row in 997 and a sum of every byte, each timed on its own."""
    if a["cold"]:
        _evict(a["path"])
    import ockpt

    def run():  # type: ignore[no-untyped-def]
        with ockpt.open(a["path"]) as ckpt:
            return ckpt[a["name"]].read(mmap=a["mmap"])

    x, r = _timed(run)
    t = time.perf_counter()
    check = _sparse_sum(x)
    sparse = time.perf_counter() - t
    t = time.perf_counter()
    total = float(x.sum(dtype="float64"))
    return {
        **r,
        "bytes": int(x.nbytes),
        "mapped": not x.flags.writeable,
        "checksum": check,
        "sparse_seconds": sparse,
        "sum": total,
        "touch_seconds": time.perf_counter() - t,
    }


def op_big_subset(a: dict) -> dict:
    """A partial load of the first `subset` leaves into numpy (a target of zero-memory
    broadcast arrays gives each leaf's shape and dtype)."""
    import numpy as np

    import ockpt

    names = a.get("names") or big_names(a["leaves"])
    with ockpt.open(a["path"]) as ckpt:
        shapes = {n: ckpt[n].shape for n in names[: a["subset"]]}
    target = {n: np.broadcast_to(np.float32(0), s) for n, s in shapes.items()}
    out, r = _timed(lambda: ockpt.load_pytree(a["path"], target, partial=True))
    return {**r, "bytes": _nbytes(out), "checksum": sum(_sparse_sum(v) for v in out.values())}


def op_orbax_mp_save(a: dict) -> dict:
    """The checkpoint written by real Orbax from `processes` jax.distributed processes
    (`orbax_multiprocess.write`): its wall time and the largest and summed peak RSS."""
    import shutil

    import orbax_multiprocess

    shutil.rmtree(a["path"], ignore_errors=True)
    report = orbax_multiprocess.write(
        a["path"],
        processes=a["processes"],
        gib=a["gib"],
        leaves=a["leaves"],
        timeout=1800,
        same_values=True,
    )
    return {
        "seconds": report["wall_seconds"],
        "peak_rss": report["peak_rss_max"],
        "base_rss": 0,
        "peak_rss_sum": report["peak_rss_sum"],
        "bytes": int(a["gib"] * GIB),
        "disk_bytes": _du(a["path"]),
    }


def op_big_convert(a: dict) -> dict:
    """``ockpt convert PATH OUT --to hf --max-shard-size 2GiB`` in this process; the output is
    removed after it is measured."""
    import shutil

    from ockpt.cli import main as cli

    out = a["out"]
    shutil.rmtree(out, ignore_errors=True)
    argv = ["convert", a["path"], out, "--to", "hf", "--max-shard-size", "2GiB", "--no-progress"]
    code, r = _timed(lambda: cli(argv))
    written = _du(out)
    shutil.rmtree(out, ignore_errors=True)
    if code:
        raise SystemExit(f"convert failed with status {code}")
    return {**r, "bytes": written}


def op_big_validate(a: dict) -> dict:
    import ockpt

    report, r = _timed(lambda: ockpt.validate(a["path"], deep=True))
    if not report.ok:
        raise SystemExit(f"validate --deep found problems: {report.findings[:3]}")
    return {**r, "bytes": _du(a["path"])}


def main() -> None:
    op, args = sys.argv[1], json.loads(sys.argv[2])
    result = globals()[f"op_{op}"](args)
    result.setdefault("import_seconds", None)
    result["process_seconds"] = time.perf_counter() - T0
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
