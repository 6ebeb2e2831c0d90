"""Real Orbax (whatever orbax-checkpoint release is installed) as a conformance adapter.

Writes with ``ocp.PyTreeCheckpointer`` (item layout) and ``ocp.v1.save_pytree`` (v1 layout);
reads every layout through ``ocp.PyTreeCheckpointer().restore`` on the pytree item directory
(a v1 checkpoint's ``state/``, a step's item). Targets are translated into Orbax's
``RestoreArgs``: a numpy leaf asks for ``restore_type=np.ndarray`` and its dtype, a
``jax.ShapeDtypeStruct`` or ``jax.Array`` leaf for ``ArrayRestoreArgs`` on its sharding.

Orbax is the format's origin, not its judge: where it does something the spec forbids (it
casts silently, ignores shapes of numpy targets, needs the saved devices without a target),
the report shows it, and `capabilities["deviations"]` lists the rules it is known to break.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

_STEP = re.compile(r"^(?:.*_)?(\d+)$")


class OrbaxAdapter:
    name = "orbax"

    def __init__(self) -> None:
        import importlib.metadata

        self.release = importlib.metadata.version("orbax-checkpoint")
        major_minor = ".".join(self.release.split(".")[:2])
        self.capabilities: dict[str, Any] = {
            "reads": {
                "layouts": ["item", "v1", "manager"],
                "zarr": [2, 3],
                "ocdbt": [True, False],
                # Releases whose golden fixtures this Orbax restores (0.3.x items without
                # _METADATA need restore arguments per leaf that a generic target lacks).
                "releases": ["0.4", "0.5", "0.10", "0.11", "0.12", major_minor],
                "options": ["partial", "placeholder", "cast:lossy", "jax"],
                "multiprocess": True,
                "typed_keys": True,
            },
            "writes": {
                "layouts": ["item", "v1"],
                "zarr": [2, 3],
                "ocdbt": [True, False],
                "leaves": [
                    "ndarray",
                    "jax.Array",
                    "scalar",
                    "numpy_scalar",
                    "string",
                    "none",
                    "empty",
                ],
                "dtypes": [
                    "bool",
                    "int8",
                    "int16",
                    "int32",
                    "int64",
                    "uint8",
                    "uint16",
                    "uint32",
                    "uint64",
                    "float16",
                    "float32",
                    "float64",
                    "complex64",
                    "complex128",
                    "bfloat16",
                    "float8_e4m3fn",
                    "float8_e5m2",
                    "float8_e4m3fnuz",
                    "float8_e5m2fnuz",
                    "float8_e4m3b11fnuz",
                    "int4",
                ],
                "options": ["chunk_byte_size"],
                "multiprocess": True,
                # ocp.v1 refuses numpy scalar leaves.
                "except": [{"layouts": "v1", "leaves": "numpy_scalar"}],
            },
            "deviations": {
                "LOAD-020": "casts to the target dtype silently, lossy or not",
                "LOAD-030": "ignores the target shape of numpy leaves",
                "LOAD-031": "no pad/truncate for numpy targets",
                "LOAD-032": "without a target, needs the devices named in _sharding",
                "LOAD-001": "a target key the checkpoint lacks is not always refused",
                "LOAD-002": "a target that leaves saved leaves out is not always refused",
                "LOAD-022": "tensorstore cannot cast to float8_e4m3, float6_*, uint2, uint4 and "
                "flushes float8_e8m0fnu 2**-127 to zero",
                "LOAD-033": "opens the directory of a placeholder leaf (fails when it is absent)",
                "PATH-001": "loads a tree whose param names collide",
                "STR-001": "loads a _strings.json value that is not a string",
            },
        }

    @property
    def version(self) -> str:
        return f"orbax-checkpoint {self.release}"

    # -- writing --------------------------------------------------------------------------

    def write(self, case: Any, directory: Path) -> None:
        import jax
        import orbax.checkpoint as ocp

        directory = Path(directory).absolute()
        chunk = case.options.get("chunk_byte_size")
        if case.layout == "v1":
            if chunk is not None:
                raise NotImplementedError("chunk_byte_size with the v1 API")
            with ocp.v1.Context(
                array_options=ocp.v1.options.ArrayOptions(
                    saving=ocp.v1.options.ArrayOptions.Saving(
                        use_ocdbt=case.ocdbt, use_zarr3=case.zarr == 3
                    )
                )
            ):
                ocp.v1.save_pytree(directory, case.tree)
            return
        save_args = None
        if chunk is not None:
            save_args = jax.tree_util.tree_map(
                lambda _: ocp.SaveArgs(chunk_byte_size=chunk), case.tree
            )
        checkpointer = ocp.PyTreeCheckpointer(use_ocdbt=case.ocdbt, use_zarr3=case.zarr == 3)
        checkpointer.save(directory, args=ocp.args.PyTreeSave(case.tree, save_args=save_args))
        checkpointer.close()

    # -- reading --------------------------------------------------------------------------

    @staticmethod
    def _item_dir(path: Path, step: int | None, item: str | None) -> Path:
        names = set(os.listdir(path))
        if names & {"_METADATA", "checkpoint", "manifest.ocdbt"}:
            return path
        steps = {}
        for n in names:
            m = _STEP.match(n)
            if m and (path / n).is_dir() and ".orbax-checkpoint-tmp" not in n:
                steps[int(m.group(1))] = n
        if steps and not names & {"state", "pytree"}:
            chosen = steps[step if step is not None else max(steps)]
            path = path / chosen
            names = set(os.listdir(path))
        if item is not None:
            return path / item
        for name in ("default", "state", "pytree"):
            if name in names:
                return path / name
        items = [n for n in names if (path / n / "_METADATA").exists()]
        return path / items[0] if len(items) == 1 else path

    @staticmethod
    def _restore_args(leaf: Any, pad: bool) -> Any:
        import jax
        import orbax.checkpoint as ocp

        if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
            return ocp.ArrayRestoreArgs(
                sharding=leaf.sharding,
                dtype=leaf.dtype,
                global_shape=leaf.shape,
                strict=not pad,
            )
        if isinstance(leaf, np.ndarray):
            return ocp.RestoreArgs(restore_type=np.ndarray, dtype=leaf.dtype)
        if isinstance(leaf, np.generic):
            return ocp.RestoreArgs(dtype=leaf.dtype)
        return ocp.RestoreArgs()

    def read(
        self,
        path: Path,
        target: Any = None,
        *,
        step: int | None = None,
        item: str | None = None,
        partial: bool = False,
        cast: str = "exact",
        pad_or_truncate: bool = False,
    ) -> Any:
        import jax
        import orbax.checkpoint as ocp

        if cast == "checked":
            raise NotImplementedError("Orbax has no checked casts")
        item_dir = self._item_dir(Path(path).absolute(), step, item)
        checkpointer = ocp.PyTreeCheckpointer()
        if target is None:
            return checkpointer.restore(item_dir)
        restore_args = jax.tree_util.tree_map(
            lambda x: self._restore_args(x, pad_or_truncate), target
        )
        return checkpointer.restore(
            item_dir,
            args=ocp.args.PyTreeRestore(
                item=target, restore_args=restore_args, partial_restore=partial
            ),
        )


def make_adapter() -> OrbaxAdapter:
    return OrbaxAdapter()
