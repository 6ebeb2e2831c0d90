"""`load_state_dict`: a pytree item of an Orbax checkpoint as a flat PyTorch state dict.

The mapping (spec/loading.md §9.1, LOAD-060 to LOAD-062):

* **names**: a leaf's key path joined with `sep` (``"."``, PyTorch's and Orbax's param-name
  separator, by default): ``{"params": {"dense": {"kernel": x}}}`` gives
  ``"params.dense.kernel"``, a list element its index (``"layers.0.w"``). Two key paths that
  join to the same name (a key holding the separator) are refused: pass another `sep`.
* **arrays**: tensors sharing the memory of the numpy arrays the reader returns
  (``torch.from_numpy``), no copy. numpy has no bfloat16 or float8, so those arrays are viewed
  as the unsigned integer of the same width and the tensor is viewed back as the torch dtype
  of the same name: still no copy. A read-only or byte-swapped buffer is copied once.
* **dtypes** torch lacks (the 2- and 4-bit integers, float4, float6, and the float8 variants
  other than e4m3fn, e4m3fnuz, e5m2, e5m2fnuz and e8m0fnu) raise `UnsupportedError` naming
  the leaf, unless ``widen=True``: then they load as the narrowest dtype in `WIDE_NAMES` that
  holds each of their values exactly (int4 as int8, uint4 as uint8, float8_e4m3 as float16).
* **scalars** stay 0-d tensors of their stored dtype (a Python int leaf is a 0-d int64).
* **strings** stay Python ``str`` values (a state dict may hold non-tensor values, and
  ``torch.save`` keeps them); ``strings="skip"`` leaves them out, ``strings="error"`` refuses.
* **typed PRNG keys** are their uint32 key data; **None and empty containers** hold no data
  and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .. import dtypes
from ..errors import LeafNameError, UnsupportedError
from ..paths import leaf_name, select_paths
from ..sources import Leaf, OrbaxSource
from .runtime import import_torch

if TYPE_CHECKING:
    import torch

__all__ = [
    "load_state_dict",
    "flat_leaves",
    "torch_dtype_name",
    "to_tensor",
    "WIDE_NAMES",
]

#: What a dtype torch lacks is widened to with ``widen=True``: the first of these whose cast
#: from it is exact (spec/loading.md §4.2).
WIDE_NAMES = ("uint8", "int8", "float16", "float32")


def torch_dtype_name(
    dtype: np.dtype, *, name: str, widen: bool = False, file: object = None
) -> str:
    """The name of the torch dtype a leaf of numpy `dtype` loads as (the same name when torch
    has it); `UnsupportedError` (LOAD-061) naming the leaf `name` of the checkpoint `file`
    when torch lacks it and not `widen`."""
    if dtype.name in dtypes.TORCH_NAMES:
        return dtype.name
    if widen:
        for wide in WIDE_NAMES:
            if dtypes.cast_kind(dtype, wide) == "exact":
                return wide
    raise UnsupportedError(
        f"leaf {name!r}: PyTorch has no tensor dtype {dtype.name}; pass widen=True to load it "
        "as a wider dtype that holds its values exactly",
        rule="LOAD-061",
        file=file,
    )


def to_tensor(
    array: np.ndarray, *, name: str, widen: bool = False, file: object = None
) -> torch.Tensor:
    """`array` as a tensor sharing its memory (see the module docstring); `name` and `file`
    are the leaf and checkpoint named in errors."""
    torch = import_torch()
    array = np.asarray(array)
    target = torch_dtype_name(array.dtype, name=name, widen=widen, file=file)
    if target != array.dtype.name:
        array = dtypes.astype(array, np.dtype(target))
    elif not array.dtype.isnative or not array.flags.writeable:
        array = array.astype(array.dtype.newbyteorder("="))  # torch needs native, writable
    if array.dtype.isbuiltin == 2:  # an ml_dtypes type: through the same-width unsigned int
        bits = torch.from_numpy(array.view(f"u{array.dtype.itemsize}"))
        return bits.view(getattr(torch, target))
    return torch.from_numpy(array)


def flat_leaves(
    source: OrbaxSource, *, sep: str = ".", select: Sequence[str] | str = ()
) -> list[tuple[str, Leaf]]:
    """(flat name, leaf) of the source's leaves (those `select` selects, spec key-paths §7.4,
    when given), in the saved order; `LeafNameError` (LOAD-060, a ValueError) when two key
    paths join to one name."""
    if not sep:
        raise ValueError("sep must be a non-empty string")
    leaves = source.leaves
    if select:
        patterns = (select,) if isinstance(select, str) else tuple(select)
        keep = select_paths(patterns, [leaf.key for leaf in leaves], file=source.path)
        leaves = [leaves[i] for i in keep]
    named: dict[str, Leaf] = {}
    for leaf in leaves:
        flat = sep.join(leaf.key)
        if flat in named:
            raise LeafNameError(
                f"leaves {leaf_name(named[flat].key)!r} and {leaf_name(leaf.key)!r} both join "
                f"to {flat!r} with sep {sep!r}; pass another sep",
                rule="LOAD-060",
                name=flat,
                file=source.path,
            )
        named[flat] = leaf
    return list(named.items())


def load_state_dict(
    path: Any,
    *,
    step: int | None = None,
    item: str | None = None,
    sep: str = ".",
    select: Sequence[str] | str = (),
    strings: Literal["keep", "skip", "error"] = "keep",
    widen: bool = False,
) -> dict[str, Any]:
    """The pytree item at `path` (item, v1 checkpoint, step or manager root, local or a
    kvstore URL) as ``{name: torch.Tensor}``, mapped as the module docstring says.

    `step` / `item` choose a step of a manager root and an item, as `ockpt.load_pytree`;
    `select`: patterns (leaf names of subtrees or globs, spec key-paths §7.4): only the leaves
    they select are read, and each must select one (`LeafNameError`, PATH-007). `strings`:
    ``"keep"`` (str values), ``"skip"`` or ``"error"`` (`UnsupportedError`). `widen`: load
    dtypes torch lacks as a wider dtype, exactly.
    """
    if strings not in ("keep", "skip", "error"):
        raise ValueError(f"strings must be 'keep', 'skip' or 'error', not {strings!r}")
    import_torch("ockpt.torch.load_state_dict")
    state: dict[str, Any] = {}
    with OrbaxSource(path, step=step, item=item) as source:
        for name, leaf in flat_leaves(source, sep=sep, select=select):
            if leaf.kind == "string":
                if strings == "error":
                    raise UnsupportedError(
                        f"leaf {name!r} is a string, not a tensor; pass strings='keep' or 'skip'",
                        rule="LOAD-062",
                        file=source.path,
                    )
                if strings == "keep":
                    state[name] = str(source.read(leaf))
                continue
            assert leaf.dtype is not None
            torch_dtype_name(leaf.dtype, name=name, widen=widen, file=source.path)  # before reading
            state[name] = to_tensor(source.read(leaf), name=name, widen=widen, file=source.path)
    return state
