"""Build the example C reader with the C compiler and libzstd found on this machine.

    python conformance/examples/c_reader/build.py [OUT_DIR]   # prints the executable's path

`build()` returns the executable (cached by the hash of the source, so the suite's worker
processes reuse one build) or raises `Unavailable` saying what is missing: no C compiler
(``$CC``, ``cc``, ``gcc``, ``clang``) or no libzstd to link (``-lzstd``, or the runtime library
``libzstd.so.1`` alone, as on machines without the development package; the source declares
the few zstd prototypes it needs, so no header is required).

`ockpt conformance --impl c-example` builds and runs it through the command adapter with the
capabilities in ``capabilities.json``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ockpt_c_reader.c"
CAPABILITIES = HERE / "capabilities.json"
#: the command template the suite runs
TEMPLATE = "{exe} --kind {{kind}} {{checkpoint}} {{out}}"


class Unavailable(RuntimeError):
    """No toolchain to build the example here (the reason is the message)."""


def _compilers() -> list[str]:
    names = [os.environ["CC"]] if os.environ.get("CC") else []
    names += ["cc", "gcc", "clang"]
    return [p for p in dict.fromkeys(shutil.which(n) for n in names) if p]


def build(out_dir: str | os.PathLike[str] | None = None) -> Path:
    """The built executable (built now unless a build of the same source exists)."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    out = Path(out_dir) if out_dir else Path(tempfile.gettempdir()) / f"ockpt-c-example-{digest}"
    exe = out / "ockpt_c_reader"
    if exe.is_file() and os.access(exe, os.X_OK) and (out / "SOURCE_SHA256").is_file():
        if (out / "SOURCE_SHA256").read_text().strip() == digest:
            return exe
    compilers = _compilers()
    if not compilers:
        raise Unavailable("no C compiler found ($CC, cc, gcc, clang)")
    out.mkdir(parents=True, exist_ok=True)
    errors = []
    for cc in compilers:
        for lib in (["-lzstd"], ["-l:libzstd.so.1"]):
            tmp = out / f".ockpt_c_reader.{os.getpid()}"
            cmd = [cc, "-std=c11", "-O2", "-Wall", "-o", str(tmp), str(SOURCE), *lib]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                os.replace(tmp, exe)
                (out / "SOURCE_SHA256").write_text(digest + "\n")
                return exe
            errors.append(f"{Path(cc).name} {lib[0]}: {proc.stderr.strip().splitlines()[-1:]}")
    raise Unavailable("cannot build with libzstd: " + "; ".join(errors))


def spec(exe: Path) -> str:
    """The ``--impl`` spec string of the built reader."""
    return f"cmd({CAPABILITIES}):" + TEMPLATE.format(exe=shlex.quote(str(exe)))


if __name__ == "__main__":
    try:
        print(build(sys.argv[1] if len(sys.argv) > 1 else None))
    except Unavailable as e:
        print(f"not built: {e}", file=sys.stderr)
        sys.exit(1)
