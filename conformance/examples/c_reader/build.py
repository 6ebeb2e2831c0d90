"""Build the example C reader with the C compiler and libzstd found on this machine.

    python conformance/examples/c_reader/build.py [--sanitize] [OUT_DIR]   # prints the executable

`build()` returns the executable or raises `Unavailable` saying what is missing: no C compiler
(``$CC``, ``cc``, ``gcc``, ``clang``) or no libzstd to link (``-lzstd``, or the runtime library
``libzstd.so.1`` alone, as on machines without the development package; the source declares
the few zstd prototypes it needs, so no header is required).

``build(sanitize=True)`` (or ``OCKPT_C_SANITIZE=1`` in the environment when `sanitize` is not
given, so that ``ockpt conformance --impl c-example`` runs it too) builds with AddressSanitizer
and UndefinedBehaviorSanitizer (`SANITIZE_FLAGS`): every out-of-bounds access or undefined
operation stops the program with a report on stderr. `Unavailable` when the compiler or its
runtime cannot do that here.

Without `out_dir` the build is cached (keyed by the hash of the source and the flags, so the
suite's worker processes reuse one build) in ``$TMPDIR/ockpt-c-example-<uid>-<hash>/``. The
temporary directory is shared with every other user of the machine, so that directory is only
trusted when this process created it or it is a real directory (not a symbolic link) owned by
us that no one else may write to (mode 0700), holding an executable owned by us that no one
else may write to; anything else there may have been planted, and the build goes to a fresh
private directory (`tempfile.mkdtemp`) instead.

`ockpt conformance --impl c-example` builds and runs it through the command adapter with the
capabilities in ``capabilities.json``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ockpt_c_reader.c"
CAPABILITIES = HERE / "capabilities.json"
#: the command template the suite runs
TEMPLATE = "{exe} --kind {{kind}} {{checkpoint}} {{out}}"
#: compiler flags of the two builds (``-Wall`` and the libzstd flag come on top)
FLAGS = ["-std=c11", "-O2"]
SANITIZE_FLAGS = [
    "-std=c11",
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
    "-g",
    "-O1",
]
#: the environment variable that selects the sanitizer build when `build` is not told
SANITIZE_ENV = "OCKPT_C_SANITIZE"


class Unavailable(RuntimeError):
    """No toolchain to build the example here (the reason is the message)."""


def _compilers() -> list[str]:
    names = [os.environ["CC"]] if os.environ.get("CC") else []
    names += ["cc", "gcc", "clang"]
    return [p for p in dict.fromkeys(shutil.which(n) for n in names) if p]


def _names(sanitize: bool) -> tuple[str, str]:
    """(executable, stamp file) names of a build in its directory."""
    if sanitize:
        return "ockpt_c_reader-sanitized", "SOURCE_SHA256-sanitized"
    return "ockpt_c_reader", "SOURCE_SHA256"


def _digest(source: bytes, flags: list[str]) -> str:
    """The cache key: the source and the flags it is compiled with."""
    return hashlib.sha256(source + b"\0" + " ".join(flags).encode()).hexdigest()[:16]


def _ours(st: os.stat_result, kind: int) -> bool:
    """`st` (an lstat: a link is never ours) is of `kind`, owned by us, and no one else may
    change it (no write bit for group or other)."""
    return (
        stat.S_IFMT(st.st_mode) == kind
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _private_dir(path: Path) -> bool:
    """Whether `path` is a directory only we can use: created now with mode 0700, or already
    there as a real directory of ours with no permission for group or other."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return _ours(st, stat.S_IFDIR) and not st.st_mode & 0o077


def _cached(out: Path, exe: Path, stamp: Path, digest: str) -> bool:
    """Whether `out` already holds a build of `digest` we can trust to run."""
    try:
        st = os.lstat(exe)
        stamp_st = os.lstat(stamp)
    except OSError:
        return False
    if not (_ours(st, stat.S_IFREG) and _ours(stamp_st, stat.S_IFREG)):
        return False
    if not st.st_mode & stat.S_IXUSR:
        return False
    return stamp.read_text().strip() == digest


def _probe(exe: Path) -> str | None:
    """None when the built program starts (a sanitizer runtime may refuse to: no shadow
    memory under a small address-space limit, say); else why not."""
    try:
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {exe.name}: {e}"
    if proc.returncode != 2 or "usage:" not in proc.stderr:
        return f"{exe.name} does not start: {proc.stderr.strip().splitlines()[-1:]}"
    return None


def _compile(out: Path, exe: Path, flags: list[str], sanitize: bool) -> None:
    compilers = _compilers()
    if not compilers:
        raise Unavailable("no C compiler found ($CC, cc, gcc, clang)")
    errors = []
    for cc in compilers:
        for lib in (["-lzstd"], ["-l:libzstd.so.1"]):
            tmp = out / f".{exe.name}.{os.getpid()}"
            cmd = [cc, *flags, "-Wall", "-o", str(tmp), str(SOURCE), *lib]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                why = _probe(tmp) if sanitize else None
                if why is None:
                    os.replace(tmp, exe)
                    return
                tmp.unlink(missing_ok=True)
                errors.append(f"{Path(cc).name} {lib[0]}: {why}")
                continue
            errors.append(f"{Path(cc).name} {lib[0]}: {proc.stderr.strip().splitlines()[-1:]}")
    what = "with -fsanitize=address,undefined and libzstd" if sanitize else "with libzstd"
    raise Unavailable(f"cannot build {what}: " + "; ".join(errors))


def _sanitize(sanitize: bool | None) -> bool:
    if sanitize is None:
        return os.environ.get(SANITIZE_ENV, "") not in ("", "0")
    return sanitize


def cache_dir(sanitize: bool | None = None) -> Path:
    """Where `build` without `out_dir` caches the build of the current source (it may not
    exist, or not be trusted: see the module docstring)."""
    flags = SANITIZE_FLAGS if _sanitize(sanitize) else FLAGS
    digest = _digest(SOURCE.read_bytes(), flags)
    return Path(tempfile.gettempdir()) / f"ockpt-c-example-{os.getuid()}-{digest}"


def build(out_dir: str | os.PathLike[str] | None = None, sanitize: bool | None = None) -> Path:
    """The built executable (built now unless a trusted build of the same source and flags
    exists). `sanitize`: the sanitizer build; None: as ``$OCKPT_C_SANITIZE`` says (off)."""
    sanitize = _sanitize(sanitize)
    flags = SANITIZE_FLAGS if sanitize else FLAGS
    digest = _digest(SOURCE.read_bytes(), flags)
    exe_name, stamp_name = _names(sanitize)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = cache_dir(sanitize)
        if not _private_dir(out):  # not ours alone: never run or write what is in it
            out = Path(tempfile.mkdtemp(prefix="ockpt-c-example-"))
    exe, stamp = out / exe_name, out / stamp_name
    if _cached(out, exe, stamp, digest):
        return exe
    _compile(out, exe, flags, sanitize)
    tmp = out / f".{stamp_name}.{os.getpid()}"
    tmp.write_text(digest + "\n")
    os.replace(tmp, stamp)
    return exe


def spec(exe: Path) -> str:
    """The ``--impl`` spec string of the built reader."""
    return f"cmd({CAPABILITIES}):" + TEMPLATE.format(exe=shlex.quote(str(exe)))


if __name__ == "__main__":
    args = sys.argv[1:]
    sanitize = "--sanitize" in args
    args = [a for a in args if a != "--sanitize"]
    try:
        print(build(args[0] if args else None, sanitize=sanitize or None))
    except Unavailable as e:
        print(f"not built: {e}", file=sys.stderr)
        sys.exit(1)
