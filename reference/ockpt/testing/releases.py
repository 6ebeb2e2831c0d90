"""`assert_restorable`: a real Orbax release restores a checkpoint, to the values expected.

The release runs in its own venv (`orbax_venvs`), in a subprocess that restores the pytree item
with ``PyTreeCheckpointer().restore``, every array as numpy (so the devices that saved it do not
matter: a release that cannot read a saved sharding still restores the values), and prints,
per leaf, its dtype, shape and a SHA256 digest of its bytes (scalars and strings by value). The same
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

__all__ = ["assert_restorable", "restore", "digest"]

#: What the release's python runs: for each (item path, structure) of the JSON list on stdin,
#: restore every array as numpy (so the devices that saved it do not matter), then print one
#: JSON line of its digests by key texts, or of the error.
_RESTORE = r"""
import hashlib, json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np, jax
import orbax.checkpoint as ocp

def restore_args(shape):
    if shape is None:
        return None
    if isinstance(shape, dict):
        return {k: restore_args(v) for k, v in shape.items()}
    if isinstance(shape, list):
        return [restore_args(v) for v in shape]
    if shape == "array":
        return ocp.RestoreArgs(restore_type=np.ndarray)
    return ocp.RestoreArgs(restore_type=str) if shape == "string" else ocp.RestoreArgs()

def text(k):
    for name in ("key", "idx", "name"):
        if hasattr(k, name):
            return str(getattr(k, name))
    return str(k)

def digest(x):
    if isinstance(x, str):
        return {"str": x}
    key = getattr(jax.dtypes, "prng_key", None)  # jax before 0.4.16 has no typed keys
    if key is not None and hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, key):
        x = jax.random.key_data(x)
    a = np.asarray(x)
    if a.ndim == 0:
        return {"value": repr(a.item())}
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}

def restore(path, shape):
    args, checkpointer = restore_args(shape), ocp.PyTreeCheckpointer()
    if hasattr(ocp, "args") and hasattr(ocp.args, "PyTreeRestore"):
        return checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=args))
    return checkpointer.restore(path, restore_args=args)  # releases before 0.4.x

for path, shape in json.loads(sys.stdin.read()):
    try:
        leaves = jax.tree_util.tree_flatten_with_path(restore(path, shape))[0]
        out = {json.dumps([text(k) for k in p]): digest(x) for p, x in leaves if x is not None}
        result = {"digests": out}
    except Exception as e:
        result = {"error": (type(e).__name__ + ": " + str(e))[:2000]}
    print("RESULT " + json.dumps([path, result], sort_keys=True), flush=True)
"""


#: `LeafMetadata.value_type`s of arrays (`_METADATA`'s, and a msgpack-era array).
_ARRAY_TYPES = frozenset({"jax.Array", "np.ndarray", "array"})


def _structure(node: Any) -> Any:
    """The saved tree's shape for the restoring subprocess: its dicts and lists, each leaf
    ``"array"`` (restored as numpy), ``"string"`` or ``"other"`` (scalars: as saved), None
    kept."""
    if isinstance(node, dict):
        return {k: _structure(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_structure(v) for v in node]
    if node is None:
        return None
    if node.value_type in _ARRAY_TYPES:
        return "array"
    return "string" if node.value_type == "string" else "other"


def digest(value: Any) -> dict[str, Any]:
    """A leaf's digest as the restoring subprocess makes it: a string by value, a scalar (0-d)
    by the repr of its Python value, an array by dtype, shape and the SHA256 digest of its C-ordered
    bytes; a typed PRNG key as its key data."""
    if isinstance(value, str):
        return {"str": value}
    parts = key_parts(value)
    array = np.asarray(parts[1] if parts is not None else value)
    if array.ndim == 0:
        return {"value": repr(array.item())}
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


def restore(
    paths: list[Any],
    *,
    orbax: str,
    pins: tuple[str, ...] | None = None,
    python: str | os.PathLike[str] | None = None,
    timeout: float = 600,
) -> dict[str, dict[str, Any]]:
    """Restore the pytree of each checkpoint of `paths` (local; any layout) with Orbax release
    `orbax`, in one process of its venv (built on first use with `pins`, default
    `orbax_venvs.PINS`; `python` instead: an interpreter that has it). Returns, by the item
    directory restored, ``{"digests": {key path (JSON): digest}}`` or ``{"error": text}``."""
    from ..reader import pytree_metadata
    from . import orbax_venvs  # not at import: `python -m ockpt.testing.orbax_venvs` runs it

    items = []
    for path in paths:
        item = resolve(path).pytree
        local = item.location.os_path()
        if local is None:
            raise ValueError(f"restoring with Orbax needs a local checkpoint, not {item.path}")
        items.append([local, _structure(pytree_metadata(local))])
    if python is None:
        python = orbax_venvs.release_python(orbax, pins)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    try:
        done = subprocess.run(
            [str(python), "-c", _RESTORE],
            input=json.dumps(items),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"Orbax {orbax} did not finish within {timeout:g} s") from None
    results = dict(
        json.loads(line.removeprefix("RESULT "))
        for line in done.stdout.splitlines()
        if line.startswith("RESULT ")
    )
    tail = (done.stdout + done.stderr)[-3000:]
    return {
        local: results.get(local, {"error": f"no result (exit {done.returncode}): {tail}"})
        for local, _ in items
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
    from ..reader import load_pytree

    ((local, result),) = restore([path], orbax=orbax, pins=pins, timeout=timeout).items()
    if "error" in result:
        raise AssertionError(f"Orbax {orbax} cannot restore {local}:\n{result['error']}")
    got = result["digests"]
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
            f"Orbax {orbax} restores {local} differently ({len(problems)} leaves):\n  "
            + "\n  ".join(problems[:20])
        )
