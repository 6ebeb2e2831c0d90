"""`assert_restorable`: a real Orbax release restores a checkpoint, to the values expected.

The release runs in its own venv (`orbax_venvs`), in a subprocess that restores the pytree item
with ``PyTreeCheckpointer().restore``, every array as numpy (so the devices that saved it do not
matter: a release that cannot read a saved sharding still restores the values), and prints,
per leaf, its dtype, shape and a SHA-256 of its bytes (scalars and strings by value). The same
digest of the expected tree (default: what `ockpt.load_pytree` reads) must match leaf for leaf.
Empty containers and Nones are not compared: releases restore them differently
(spec/history.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from typing import Any

import numpy as np

from .._jax import key_parts
from ..layout import resolve
from ..paths import EmptyNode, flatten, leaf_name

__all__ = ["assert_restorable", "digest"]

#: What the release's python runs: restore every array as numpy (so the devices that saved it do
#: not matter) by the tree's structure given on stdin, then one JSON line of digests by key texts.
_RESTORE = r"""
import hashlib, json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np, jax
import orbax.checkpoint as ocp

def restore_args(shape):
    if isinstance(shape, dict):
        return {k: restore_args(v) for k, v in shape.items()}
    if isinstance(shape, list):
        return [restore_args(v) for v in shape]
    return ocp.RestoreArgs(restore_type=np.ndarray) if shape == "array" else ocp.RestoreArgs()

def text(k):
    for name in ("key", "idx", "name"):
        if hasattr(k, name):
            return str(getattr(k, name))
    return str(k)

def digest(x):
    if isinstance(x, str):
        return {"str": x}
    if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    a = np.asarray(x)
    if a.ndim == 0:
        return {"value": json.dumps(a.item())}
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}

args = ocp.args.PyTreeRestore(restore_args=restore_args(json.loads(sys.stdin.read())))
tree = ocp.PyTreeCheckpointer().restore(sys.argv[1], args=args)
leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
out = {json.dumps([text(k) for k in path]): digest(x) for path, x in leaves if x is not None}
print("DIGESTS " + json.dumps(out, sort_keys=True))
"""


#: `LeafMetadata.value_type`s of arrays (`_METADATA`'s, and a msgpack-era array).
_ARRAY_TYPES = frozenset({"jax.Array", "np.ndarray", "array"})


def _structure(node: Any) -> Any:
    """The saved tree's shape for the restoring subprocess: its dicts and lists, each leaf
    ``"array"`` (restored as numpy) or ``"other"`` (strings, scalars: as saved), None kept."""
    if isinstance(node, dict):
        return {k: _structure(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_structure(v) for v in node]
    if node is None:
        return None
    return "array" if node.value_type in _ARRAY_TYPES else "other"


def digest(value: Any) -> dict[str, Any]:
    """A leaf's digest as the restoring subprocess makes it: a string by value, a scalar (0-d)
    by its JSON value, an array by dtype, shape and the SHA-256 of its C-ordered bytes; a typed
    PRNG key as its key data."""
    if isinstance(value, str):
        return {"str": value}
    parts = key_parts(value)
    array = np.asarray(parts[1] if parts is not None else value)
    if array.ndim == 0:
        return {"value": json.dumps(array.item())}
    array = np.ascontiguousarray(array)
    return {
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
    }


def _digests(tree: Any) -> dict[str, dict[str, Any]]:
    return {
        json.dumps([e.key for e in path]): digest(leaf)
        for path, leaf in flatten(tree)
        if not isinstance(leaf, EmptyNode)
    }


def assert_restorable(
    path: Any,
    *,
    orbax: str,
    expected: Any = None,
    pins: tuple[str, ...] | None = None,
    timeout: float = 600,
) -> None:
    """Raise AssertionError unless Orbax release `orbax` restores the pytree of the checkpoint
    at `path` (an item, v1 checkpoint, step or manager root: its latest committed step) to
    `expected` (default: what `ockpt.load_pytree` reads), leaf for leaf. The release's venv is
    built on first use with `pins` (default `orbax_venvs.PINS`); RuntimeError if that fails."""
    from ..reader import load_pytree, pytree_metadata
    from . import orbax_venvs  # not at import: `python -m ockpt.testing.orbax_venvs` runs it

    item = resolve(path).pytree
    shown = item.path
    python = orbax_venvs.release_python(orbax, pins)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    local = item.location.os_path()
    if local is None:
        raise ValueError(f"assert_restorable needs a local checkpoint, not {shown}")
    structure = json.dumps(_structure(pytree_metadata(local)))
    try:
        done = subprocess.run(
            [str(python), "-c", _RESTORE, local],
            input=structure,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"Orbax {orbax} did not restore {shown} within {timeout:g} s"
        ) from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("DIGESTS ")]
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"Orbax {orbax} cannot restore {shown} (exit {done.returncode}):\n"
            + (done.stdout + done.stderr)[-3000:]
        )
    got = json.loads(lines[-1].removeprefix("DIGESTS "))
    want = _digests(load_pytree(local) if expected is None else expected)
    problems = []
    for key in sorted(want.keys() | got.keys()):
        name = leaf_name(json.loads(key)) or "<root>"
        if key not in got:
            problems.append(f"{name}: not restored")
        elif key not in want:
            problems.append(f"{name}: restored, not expected")
        elif got[key] != want[key]:
            problems.append(f"{name}: restored {got[key]}, expected {want[key]}")
    if problems:
        raise AssertionError(
            f"Orbax {orbax} restores {shown} differently ({len(problems)} leaves):\n  "
            + "\n  ".join(problems[:20])
        )
