"""Older Orbax releases restore what ockpt writes in the item and manager layouts.

The item layout ockpt writes (OCDBT or per-leaf zarr, zarr v2 or v3, `_METADATA` without a
msgpack file) is the one Orbax has written since 0.10; each release's venv
(`ockpt.testing.orbax_venvs`: built from the package registries with the pins of
fixtures/README.md when missing, and kept) restores it in a subprocess. Releases up to 0.5.x
need the msgpack `checkpoint` file, which ockpt does not write.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from ockpt.manager import CheckpointManager  # noqa: E402
from ockpt.testing import orbax_venvs  # noqa: E402
from ockpt.writer import save_pytree  # noqa: E402

pytestmark = pytest.mark.slow  # the slow matrix: old Orbax releases in their venvs

RELEASES = orbax_venvs.MATRIX

READER = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import numpy as np, jax, ml_dtypes
    import orbax.checkpoint as ocp

    root = sys.argv[1]
    want = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "bf": np.array([1.5, -2.0], ml_dtypes.bfloat16),
        "j": np.arange(8, dtype=np.float32),
        "s": "str", "n": 3, "none": None, "e": {},
    }

    def check(label, got):
        assert set(got) == set(want), (label, sorted(got))
        for k, v in want.items():
            if isinstance(v, np.ndarray):
                g = np.asarray(got[k])
                assert g.dtype == v.dtype and g.tobytes() == v.tobytes(), (label, k)
            else:
                assert got[k] == v, (label, k, got[k])
        print("OK", label)

    for name in ("v2", "v3", "no_ocdbt"):
        check(name, ocp.PyTreeCheckpointer().restore(os.path.join(root, name)))
    mngr = ocp.CheckpointManager(os.path.join(root, "mgr"))
    assert list(mngr.all_steps()) == [1], mngr.all_steps()
    check("manager", mngr.restore(1, args=ocp.args.StandardRestore()))
    """
)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("releases")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    tree = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "bf": np.array([1.5, -2.0], ml_dtypes.bfloat16),
        "j": jax.device_put(np.arange(8, dtype=np.float32), sharding),
        "s": "str",
        "n": 3,
        "none": None,
        "e": {},
    }
    save_pytree(root / "v2", tree, layout="item")
    save_pytree(root / "v3", tree, layout="item", zarr_version=3)
    save_pytree(root / "no_ocdbt", tree, layout="item", use_ocdbt=False)
    CheckpointManager(root / "mgr").save(1, tree)
    return root


@pytest.mark.parametrize("release", RELEASES)
def test_older_release_restores(written, release):
    try:
        python = orbax_venvs.release_python(release)
    except RuntimeError as e:
        if os.environ.get("CI"):  # CI installs from the registries: a failed build is a failure
            raise
        pytest.skip(str(e))  # a machine without the package registries
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    out = subprocess.run(
        [str(python), "-c", READER, str(written)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    for label in ("v2", "v3", "no_ocdbt", "manager"):
        assert f"OK {label}" in out.stdout
