#!/usr/bin/env python
"""Time-budgeted fuzzing of one ockpt parser (see fuzz/README.md).

    python fuzz/run.py --parser ocdbt --minutes 30
    python fuzz/run.py --parser json --minutes 5 --engine random --seed 1

Engines: ``atheris`` (coverage-guided libFuzzer, when `atheris` is installed) and ``random`` (a
mutation loop over the seed inputs, pure Python). Each case runs under a per-case time limit
(``--case-timeout`` seconds: SIGALRM, or libFuzzer's ``-timeout``). A case that raises anything
but `ockpt.FormatError`, exceeds its time or runs out of memory is a failure: its input is saved
under ``--out`` (default ``fuzz/crashes/<parser>/``) and reported. The last line printed is a
summary: parser, engine, seconds, cases, failures.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class CaseTimeout(BaseException):
    """A case ran past --case-timeout (BaseException: no target may swallow it)."""


def _on_alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise CaseTimeout


# ---------------------------------------------------------------------------------------------
# the random engine: byte- and structure-level mutations of the seeds

_INTERESTING = [
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xff\xff\xff\xff",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x00\x00\x00\x80",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"-1",
    b"0",
    b"1e308",
    b"9223372036854775808",
    b"18446744073709551616",
    b'"..',
    b"../",
    b"/",
    b"\\u0000",
    b"[" * 70,
    b"{",
    b"}",
    b"null",
    b"true",
    b'""',
]


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """1-8 random edits of `data` (the first byte, the variant, is mutated rarely)."""
    head, b = data[:1], bytearray(data[1:])
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(10)
        n = len(b)
        if op == 0 and n:  # flip a bit
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            b[rng.randrange(n)] = rng.randrange(256)
        elif op == 2 and n:  # delete a range
            i = rng.randrange(n)
            del b[i : i + rng.randint(1, 16)]
        elif op == 3:  # insert random bytes
            i = rng.randint(0, n)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4:  # insert or overwrite an interesting token
            i = rng.randint(0, n)
            tok = rng.choice(_INTERESTING)
            if rng.random() < 0.5:
                b[i:i] = tok
            else:
                b[i : i + len(tok)] = tok
        elif op == 5 and n:  # truncate
            del b[rng.randint(0, n) :]
        elif op == 6 and n:  # duplicate a range
            i = rng.randrange(n)
            j = min(n, i + rng.randint(1, 64))
            k = rng.randint(0, n)
            b[k:k] = b[i:j]
        elif op == 7 and pool:  # splice with another input
            other = rng.choice(pool)[1:]
            if other:
                i = rng.randint(0, n)
                j = rng.randrange(len(other))
                b[i:] = other[j:]
        elif op == 8 and n >= 2:  # add/sub a small number to a byte or a little-endian word
            i = rng.randrange(n)
            width = rng.choice((1, 2, 4, 8))
            chunk = bytes(b[i : i + width])
            v = int.from_bytes(chunk, "little") + rng.choice((-1, 1, -128, 128, 1 << 31))
            b[i : i + len(chunk)] = (v % (1 << (8 * len(chunk)))).to_bytes(len(chunk), "little")
        elif op == 9 and n:  # replace a digit run (JSON numbers, lengths in text)
            i = rng.randrange(n)
            if chr(b[i]).isdigit():
                b[i : i + 1] = str(rng.choice((0, -1, 2**31, 2**63, 2**64, 10**30))).encode()
    if rng.random() < 0.02:
        head = bytes([rng.randrange(256)])
    return head + bytes(b)


def _save(out: Path, data: bytes, what: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{what}-{hashlib.sha1(data).hexdigest()[:16]}"
    path.write_bytes(data)
    return path


def run_random(args: argparse.Namespace) -> int:
    import targets

    target = targets.TARGETS[args.parser]
    seeds = list(targets.seeds(args.parser))
    pool = list(seeds)  # inputs that raised nothing (decoded) join the pool for splicing
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _on_alarm)
    deadline = time.monotonic() + args.minutes * 60
    cases = failures = passed = 0
    slowest = 0.0
    seen: set[str] = set()
    out = Path(args.out)
    start = time.monotonic()
    next_report = start + 60
    while time.monotonic() < deadline and (args.max_cases <= 0 or cases < args.max_cases):
        base = rng.choice(pool if rng.random() < 0.3 else seeds)
        data = mutate(rng, base, pool)
        cases += 1
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, args.case_timeout)
        try:
            target(data)
            passed += 1
            if len(pool) < 2000 and rng.random() < 0.05:
                pool.append(data)
        except targets.ALLOWED:
            pass
        except CaseTimeout:
            failures += 1
            path = _save(out, data, "timeout")
            print(f"TIMEOUT after {args.case_timeout}s: {path}", flush=True)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            signal.setitimer(signal.ITIMER_REAL, 0)
            sig = f"{type(e).__name__}:{traceback.extract_tb(e.__traceback__)[-1][:2]}"
            failures += 1
            path = _save(out, data, "crash")
            if sig not in seen:
                seen.add(sig)
                print(f"FAILURE {sig}: {path}", flush=True)
                traceback.print_exception(e, limit=-6)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.monotonic() - t0)
        if time.monotonic() > next_report:
            next_report += 60
            print(
                f"[{args.parser}] {time.monotonic() - start:.0f}s cases={cases} decoded={passed} "
                f"failures={failures} slowest={slowest:.2f}s",
                flush=True,
            )
    targets.cleanup()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"SUMMARY parser={args.parser} engine=random seconds={time.monotonic() - start:.0f} "
        f"cases={cases} decoded={passed} failures={failures} distinct={len(seen)} "
        f"slowest_case={slowest:.2f}s peak_rss={rss}MiB",
        flush=True,
    )
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------
# the atheris engine


def run_atheris(args: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=["ockpt"]):
        import targets

    target = targets.TARGETS[args.parser]
    corpus = Path(args.corpus or HERE / "corpus" / args.parser)
    corpus.mkdir(parents=True, exist_ok=True)
    for data in targets.seeds(args.parser):
        (corpus / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    seen: set[str] = set()

    def one(data: bytes) -> None:
        # an unexpected exception is recorded and the run goes on (libFuzzer would stop at the
        # first); timeouts and running out of memory still stop it, with the input saved
        try:
            target(data)
        except targets.ALLOWED:
            pass
        except Exception as e:  # noqa: BLE001
            sig = f"{type(e).__name__}:{traceback.extract_tb(e.__traceback__)[-1][:2]}"
            path = _save(out, data, "crash")
            if sig not in seen:
                seen.add(sig)
                print(f"FAILURE {sig}: {path}", flush=True)
                traceback.print_exception(e, limit=-6)

    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={int(args.minutes * 60)}",
        f"-timeout={max(1, int(args.case_timeout))}",
        f"-rss_limit_mb={args.rss_mb}",
        f"-max_len={args.max_len}",
        f"-artifact_prefix={out}/",
        "-print_final_stats=1",
    ]
    if args.seed:
        argv.append(f"-seed={args.seed}")
    if args.max_cases > 0:
        argv.append(f"-runs={args.max_cases}")
    atheris.Setup(argv, one)
    atheris.Fuzz()  # exits the process
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parser", required=True, choices=sorted(_names()))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--case-timeout", type=float, default=10.0)
    parser.add_argument("--max-cases", type=int, default=0, help="stop after N cases (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="where failing inputs are saved")
    parser.add_argument("--corpus", default=None, help="atheris corpus directory")
    parser.add_argument("--rss-mb", type=int, default=4096)
    parser.add_argument("--max-len", type=int, default=1 << 16)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = args.out or str(HERE / "crashes" / args.parser)
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    # the address space bounds what one case may allocate (a length taken unchecked from
    # the input shows up as MemoryError, a failure)
    limit = args.rss_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit * 4, resource.RLIM_INFINITY))
    if engine == "random":
        return run_random(args)
    if args.child:
        return run_atheris(args)
    return _supervise(args)


def _supervise(args: argparse.Namespace) -> int:
    """Run the atheris engine in a child process (libFuzzer ends its process with exit(), so
    nothing after the fuzzing loop runs there), then report the failing inputs it saved."""
    import subprocess

    out = Path(args.out)

    def saved() -> set[Path]:  # ours (crash-) and libFuzzer's (timeout-, oom-, crash-)
        return {p for kind in ("crash", "timeout", "oom") for p in out.glob(f"{kind}-*")}

    before = saved()
    start = time.monotonic()
    rc = subprocess.call([sys.executable, __file__, *sys.argv[1:], "--child"])
    found = saved() - before
    print(
        f"SUMMARY parser={args.parser} engine=atheris seconds={time.monotonic() - start:.0f} "
        f"failures={len(found)} libfuzzer_exit={rc} (failing inputs: {out})",
        flush=True,
    )
    return 1 if found or rc else 0


def _names() -> list[str]:
    return ["json", "msgpack", "ocdbt", "zarr", "chunk", "checkpoint", "directory"]


if __name__ == "__main__":
    sys.exit(main())
