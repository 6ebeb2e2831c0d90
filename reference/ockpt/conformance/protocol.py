"""The adapter protocol: what an implementation fills in to be run by the conformance suite.

An adapter is any object with a `name`, a `capabilities` mapping (data, see below) and two
methods, `write(case, directory)` and `read(path, target, **options)`. The suite never calls
anything else, so an adapter can wrap any implementation, in any language, behind a
subprocess if it must.

Capabilities are plain data::

    {
      "reads": {
        "layouts": ["item", "v1", "manager"],   # what `read` can be pointed at
        "zarr": [2, 3], "ocdbt": [True, False],
        "releases": ["0.3", "0.4", "0.5", "0.10", "0.11", "0.12"],  # fixture eras (major.minor)
        "options": ["partial", "placeholder", "pad_or_truncate",
                    "cast:checked", "cast:lossy", "jax"],
        "multiprocess": True,                   # checkpoints saved by several processes
        "typed_keys": True,                     # typed PRNG keys come back as keys
        "errors": "ockpt",                      # raises ockpt's error classes (bad corpus)
      },
      "writes": {
        "layouts": ["item", "v1"], "zarr": [2, 3], "ocdbt": [True, False],
        "leaves": ["ndarray", "jax.Array", "scalar", "numpy_scalar", "string", "none", "empty"],
        "dtypes": ["bool", "int8", ...],        # dtype names of spec/loading.md §4.1
        "options": ["chunk_byte_size"],
        "multiprocess": True,                   # `write` may be called under jax.distributed
        "except": [{"layout": "v1", "leaves": "numpy_scalar"}],  # combinations it refuses
      },
      "deviations": {"LOAD-020": "why"},        # spec rules it is known to break (reported)
    }

A case is run for an adapter only when the adapter declares everything the case needs; the
report shows the other cells as "n/a". Refusals that the spec requires of every reader
(LOAD-001, LOAD-002, LOAD-020, LOAD-030) are not options: every reader is checked for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["Adapter", "WriteCase", "supports"]


@dataclass(frozen=True)
class WriteCase:
    """What a producer writes: a tree and the options of one save.

    `layout` is ``"item"`` (a single pytree item directory) or ``"v1"`` (a v1 checkpoint with
    the pytree in ``state/``); `zarr` 2 or 3; `ocdbt` True or False; `options` holds further
    options (``{"chunk_byte_size": 64}``). `tree` is the in-memory pytree (numpy arrays,
    jax.Arrays, Python and numpy scalars, strings, None, containers).
    """

    name: str
    tree: Any
    layout: str = "item"
    zarr: int = 2
    ocdbt: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Adapter(Protocol):
    """An implementation under test."""

    name: str
    capabilities: Mapping[str, Any]

    def write(self, case: WriteCase, directory: Path) -> None:
        """Save `case.tree` with the case's options at `directory` (which does not exist)."""

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
        """Load the pytree at `path` (an item, a v1 checkpoint or a manager root).

        Without `target`: the tree as saved (host arrays). With `target`: a tree of the
        target's structure whose leaves are numpy arrays / scalars / strings (load as that
        dtype and shape), jax.ShapeDtypeStruct (a jax.Array on its sharding) or ``...``
        (skip the leaf). `cast` is ``"exact"``, ``"checked"`` or ``"lossy"`` (spec/loading.md
        §4.2). A refusal is any raised exception.
        """


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]


def supports(side: Mapping[str, Any] | None, needs: Mapping[str, Any]) -> str | None:
    """None when capabilities `side` (``caps["reads"]`` or ``caps["writes"]``) cover `needs`,
    else the reason they do not.

    Each key of `needs` names a capability list; its value (or every element of a list
    value) must be in that list. An ``except`` entry of `side` whose keys all match `needs`
    excludes the combination.
    """
    if not side:
        return "not declared"
    for key, want in needs.items():
        have = side.get(key)
        if isinstance(have, bool):
            if want and not have:
                return f"{key} not declared"
            continue
        have = _as_list(have) if have is not None else []
        missing = [w for w in _as_list(want) if w not in have]
        if missing:
            return f"{key} {', '.join(map(str, missing))} not declared"
    for combo in side.get("except", ()):
        if all(
            any(v in _as_list(needs.get(k, [])) for v in _as_list(vals))
            for k, vals in combo.items()
        ):
            return "excluded: " + ", ".join(f"{k}={v}" for k, v in combo.items())
    return None
