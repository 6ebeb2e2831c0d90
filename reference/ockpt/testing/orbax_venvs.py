"""Virtual environments holding real Orbax releases, built from the package registries when
missing and kept between runs, so that a test can check that a given release restores a
checkpoint (`ockpt.testing.assert_restorable`) on any machine with the registries.

Where: ``$OCKPT_ORBAX_VENVS/orbax-<release>`` (default ``~/.cache/ockpt/orbax-venvs``). Pins:
`PINS` (the versions each release was observed with, as the table "Pins" of fixtures/README.md
lists them); a release not in it gets ``orbax-checkpoint==<release>`` and whatever pip resolves
with it, unless the caller gives pins. A venv is built under a temporary name and renamed into
place when its imports work, under a file lock, so a killed or concurrent build never leaves a
half-built venv that a later run would trust.

Run as a module to build them ahead of a test run (ockpt's `.ci/run` builds `MATRIX` and
`COMPAT`):
``python -m ockpt.testing.orbax_venvs 0.10.3 0.11.28``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_NEW = ("numpy==2.4.6", "ml_dtypes==0.6.0")
_OLD_NUMPY = "numpy==1.26.4"
_JAX_0413 = ("jax==0.4.13", "jaxlib==0.4.13", "tensorstore==0.1.41", _OLD_NUMPY, "ml_dtypes==0.2.0")
_JAX_0423 = ("jax==0.4.23", "jaxlib==0.4.23", "tensorstore==0.1.51", _OLD_NUMPY, "ml_dtypes==0.5.4")
_JAX_0430 = ("jax==0.4.30", "jaxlib==0.4.30", "tensorstore==0.1.63", _OLD_NUMPY, "ml_dtypes==0.4.0")
_JAX_0438 = ("jax==0.4.38", "jaxlib==0.4.38", "tensorstore==0.1.71", *_NEW)
#: release -> the packages pinned with it (fixtures/README.md, "Pins"). Releases without
#: fixtures (0.2.3, 0.2.7, 0.3.0, 0.4.0-0.4.2, 0.5.20, 0.5.21, 0.6.4, 0.7.0: the neighbours
#: tests/test_compatibility.py restores with to check `ockpt compat`'s dates) take the pins of the
#: nearest release with them.
PINS: dict[str, tuple[str, ...]] = {
    "0.2.3": _JAX_0413,
    "0.2.7": _JAX_0413,
    "0.3.0": _JAX_0413,
    "0.3.5": _JAX_0413,
    "0.4.0": _JAX_0423,
    "0.4.1": _JAX_0423,
    "0.4.2": _JAX_0423,
    "0.4.8": _JAX_0423,
    "0.5.15": _JAX_0430,
    "0.5.20": _JAX_0430,
    "0.5.21": _JAX_0430,
    "0.6.4": _JAX_0430,
    "0.7.0": _JAX_0438,
    "0.10.3": _JAX_0438,
    "0.11.1": _JAX_0438,
    "0.11.8": ("jax==0.5.0", "jaxlib==0.5.0", "tensorstore==0.1.71", *_NEW),
    "0.11.9": ("jax==0.5.0", "jaxlib==0.5.0", "tensorstore==0.1.71", *_NEW),
    "0.11.28": ("jax==0.8.0", "jaxlib==0.8.0", "tensorstore==0.1.78", *_NEW),
}
#: The releases that restore ockpt's output, checked in ockpt's CI (tests/interop/test_writer_releases.py).
MATRIX = ("0.10.3", "0.11.28")
#: The releases that check `ockpt compat`'s dates in ockpt's CI (tests/test_compatibility.py).
COMPAT = (
    "0.2.3", "0.2.7", "0.3.0", "0.3.5", "0.4.0", "0.4.1", "0.4.2", "0.4.8", "0.5.15", "0.5.20",
    "0.5.21", "0.6.4", "0.7.0", "0.10.3", "0.11.28",
)  # fmt: skip
#: A generous bound on one build (downloads from the registry mirror included).
BUILD_TIMEOUT_S = 900


def venvs_root() -> Path:
    """The directory holding the venvs: $OCKPT_ORBAX_VENVS, else ~/.cache/ockpt/orbax-venvs."""
    env = os.environ.get("OCKPT_ORBAX_VENVS")
    return Path(env) if env else Path.home() / ".cache" / "ockpt" / "orbax-venvs"


def _clean_env() -> dict[str, str]:
    """The environment for the venv's processes: none of the test process's import tweaks."""
    drop = ("PYTHONPATH", "XLA_FLAGS", "PYTHONHOME")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _works(python: Path) -> bool:
    probe = "import orbax.checkpoint, jax, tensorstore, numpy"
    try:
        done = subprocess.run(
            [str(python), "-c", probe], env=_clean_env(), capture_output=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def release_python(release: str, pins: tuple[str, ...] | None = None) -> Path:
    """The python of a venv with orbax-checkpoint `release` and `pins` (default: its `PINS`,
    or none for a release not listed), built if missing.

    Raises RuntimeError (with pip's output) when the build fails."""
    if pins is None:
        pins = PINS.get(release, ())
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)", release):
        raise ValueError(f"not a release number: {release!r}")
    root = venvs_root()
    name = f"orbax-{release}"
    if tuple(pins) != PINS.get(release, ()):  # other pins: a venv of their own
        name += "-" + hashlib.sha256("\n".join(pins).encode()).hexdigest()[:8]
    final = root / name
    python = final / "bin" / "python"
    if python.exists():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same venv
        if python.exists():
            return python
        staging = root / f".{name}.building"
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True, timeout=300)
        packages = (f"orbax-checkpoint=={release}", *pins)
        pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", *packages]
        done = subprocess.run(
            pip, env=_clean_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
        if done.returncode != 0 or not _works(staging / "bin" / "python"):
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(
                f"building a venv for orbax-checkpoint {release} failed: "
                + (done.stdout + done.stderr)[-3000:]
            )
        staging.rename(final)
    return python


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(set(MATRIX) | set(COMPAT)):
        print(f"orbax-checkpoint {name}: {release_python(name)}", flush=True)
