"""The conformance suite under pytest: 8 fake CPU devices (set before jax is first imported),
the golden fixtures on sys.path, and one run of the whole suite shared by the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    + ["--xla_force_host_platform_device_count=8"]
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
if str(ROOT / "reference") not in sys.path:
    sys.path.insert(0, str(ROOT / "reference"))


def c_build():
    """The example C reader's build module (`conformance/examples/c_reader/build.py`)."""
    import importlib.util

    path = ROOT / "conformance" / "examples" / "c_reader" / "build.py"
    spec = importlib.util.spec_from_file_location("c_reader_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
