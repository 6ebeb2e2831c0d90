"""Virtual environments holding older Orbax releases, built from the package registries when
missing and kept between runs, so the checks that those releases restore ockpt's output run on
any machine (issue 21), not only where someone built the venvs by hand.

Where: ``$OCKPT_ORBAX_VENVS/orbax-<release>`` (default ``~/.cache/ockpt/orbax-venvs``). Pins:
the table "Pins" of fixtures/README.md. A venv is built under a temporary name and renamed into
place when its imports work, under a file lock, so a killed or concurrent build never leaves a
half-built venv that a later run would trust.

Run as a script to build them ahead of the suite (`.ci/run` does):
``python tests/orbax_venvs.py 0.10.3 0.11.28``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: release -> the packages pinned with it (fixtures/README.md, "Pins").
PINS: dict[str, tuple[str, ...]] = {
    "0.10.3": ("jax==0.4.38", "jaxlib==0.4.38", "tensorstore==0.1.71"),
    "0.11.28": ("jax==0.8.0", "jaxlib==0.8.0", "tensorstore==0.1.78"),
}
_COMMON = ("numpy==2.4.6", "ml_dtypes==0.6.0")
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


def release_python(release: str) -> Path:
    """The python of a venv with orbax-checkpoint `release` and its pins, built if missing.

    Raises RuntimeError (with pip's output) when the build fails."""
    root = venvs_root()
    final = root / f"orbax-{release}"
    python = final / "bin" / "python"
    if python.exists():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".orbax-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same venv
        if python.exists():
            return python
        staging = root / f".orbax-{release}.building"
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True, timeout=300)
        packages = (f"orbax-checkpoint=={release}", *PINS[release], *_COMMON)
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
    for name in sys.argv[1:] or sorted(PINS):
        print(f"orbax-checkpoint {name}: {release_python(name)}", flush=True)
