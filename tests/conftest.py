"""Test setup: 8 fake CPU devices for JAX (set before jax is first imported) and the shared pytest
fixtures; shared helpers are in tests/support/."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

import tests.support  # noqa: E402, F401  (puts fixtures/ on sys.path: fixtures/_record.py)


@pytest.fixture
def tmp_copy(tmp_path: Path):
    """Copy a fixture's checkpoint into tmp_path so a test may damage it."""
    import shutil

    def copy(case: Path) -> Path:
        dst = tmp_path / case.name
        shutil.copytree(case / "checkpoint", dst)
        return dst

    return copy


@pytest.fixture
def in_force():
    """``in_force(max_depth=3, ...)``: make those limits (the rest default) the ones in force
    until the test ends (`ockpt.limits.applied`); a later call replaces an earlier one."""
    from ockpt.limits import Limits, applied

    with contextlib.ExitStack() as stack:
        yield lambda **kw: stack.enter_context(applied(Limits(**kw)))


# The object-store emulators (moto's S3, fake-gcs-server), one per test module that asks.
from tests.support.object_stores import gcs, gcs_bucket, s3, s3_bucket  # noqa: E402, F401
