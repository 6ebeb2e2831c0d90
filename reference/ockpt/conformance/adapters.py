"""The adapters shipped with ockpt, and how an adapter is found from its spec string.

Spec strings (``--impl`` on the command line, ``adapters=`` of `run`):

- ``ockpt-tensorstore``, ``ockpt-python``: the reference reader with either backend (the
  writer is the same for both, so only ``ockpt-tensorstore`` declares writes);
- ``ockpt-torch-dcp``: a consumer reading through `torch.distributed.checkpoint` with
  `ockpt.torch.OrbaxReader` (needs PyTorch);
- ``orbax``: real Orbax, whatever release is installed: `conformance/adapters/orbax_adapter.py`
  of the ockpt repository (it imports orbax, so it lives outside the package);
- ``cmd:PROGRAM {checkpoint} {out}`` or ``cmd(capabilities.json):PROGRAM ...``: any
  executable, through the command protocol (`command.py`, conformance/README.md);
- ``c-example``: the example C reader of the repository (`conformance/examples/c_reader/`),
  built with the local C compiler and libzstd;
- ``path/to/module.py`` or ``package.module``, optionally ``:name``: an adapter from
  anywhere. ``name`` is an attribute that is an adapter or a callable returning one; without
  it the module's ``make_adapter()`` or ``ADAPTER`` is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import SUPPORTED
from .protocol import Adapter, WriteCase

__all__ = ["OckptAdapter", "TorchDcpAdapter", "load_adapter", "BUILTIN", "find_repo_file"]

RELEASES = ["0.3", "0.4", "0.5", "0.10", "0.11", "0.12"]
#: dtypes tensorstore (and so ockpt's writer) cannot store.
_UNWRITABLE = {"float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "uint2", "uint4"}
LEAVES = ["ndarray", "jax.Array", "scalar", "numpy_scalar", "string", "none", "empty"]


class OckptAdapter:
    """The reference implementation: `ockpt.load_pytree` with one backend, `ockpt.save_pytree`."""

    def __init__(self, backend: str = "tensorstore") -> None:
        self.backend = backend
        self.name = f"ockpt-{backend}"
        reads: dict[str, Any] = {
            "layouts": ["item", "v1", "manager"],
            "zarr": [2, 3],
            "ocdbt": [True, False],
            "releases": RELEASES,
            "options": [
                "partial",
                "placeholder",
                "pad_or_truncate",
                "cast:checked",
                "cast:lossy",
                "jax",
            ],
            "multiprocess": True,
            "typed_keys": True,
            "databases": True,
            "errors": "ockpt",
        }
        writes: dict[str, Any] = {
            "layouts": ["item", "v1"],
            "zarr": [2, 3],
            "ocdbt": [True, False],
            "leaves": LEAVES,
            "dtypes": sorted(set(SUPPORTED) - _UNWRITABLE),
            "options": ["chunk_byte_size"],
            "multiprocess": True,
        }
        # One writer serves both backends: the python adapter is a reader only.
        self.capabilities = {"reads": reads, "writes": writes if backend == "tensorstore" else {}}

    @property
    def version(self) -> str:
        from .. import __version__

        return f"ockpt {__version__} (backend={self.backend})"

    def write(self, case: WriteCase, directory: Path) -> None:
        from ..writer import save_pytree

        save_pytree(
            directory,
            case.tree,
            layout=case.layout,
            use_ocdbt=case.ocdbt,
            zarr_version=case.zarr,
            chunk_byte_size=case.options.get("chunk_byte_size"),
        )

    def read(self, path: Path, target: Any = None, **options: Any) -> Any:
        from ..reader import load_pytree

        return load_pytree(path, target, backend=self.backend, **options)

    def read_database(self, path: Path) -> dict[bytes, dict[str, Any]]:
        """Key -> value length and sha256 digest of the latest generation of a bare OCDBT database:
        ockpt's decoder (python) or tensorstore's ``ocdbt`` driver (tensorstore)."""
        import hashlib

        def entry(value: bytes) -> dict[str, Any]:
            return {"value_length": len(value), "sha256": hashlib.sha256(value).hexdigest()}

        if self.backend == "python":
            from ..ocdbt import Database

            with Database(path) as db:
                return {k: entry(v) for k, v in db.items()}
        import tensorstore as ts

        kv = ts.KvStore.open(
            {"driver": "ocdbt", "base": f"file://{Path(path).resolve()}/"}
        ).result()
        return {bytes(k): entry(bytes(kv.read(k).result().value)) for k in kv.list().result()}


class TorchDcpAdapter:
    """A consumer through PyTorch: ``dcp.load`` (one process, ``no_dist=True``) with
    `ockpt.torch.OrbaxReader` fills a state dict of plain tensors (and str for string leaves)
    allocated from the reader's DCP metadata; the tree is then rebuilt from
    `pytree_metadata` (containers, None, empty nodes) and the tensors given back as numpy.

    It loads without a target only. Leaves of dtypes torch lacks (int4, float6, ...) are read
    widened (exact, spec/loading.md §9.1) and narrowed back to their stored dtype; a typed PRNG
    key is its uint32 key data from DCP with the implementation `pytree_metadata` records.
    Names join key texts with ``.``, or, when a key of the checkpoint holds a dot, with a
    separator no key holds.
    """

    name = "ockpt-torch-dcp"
    capabilities: dict[str, Any] = {
        "reads": {
            "layouts": ["item", "v1", "manager"],
            "zarr": [2, 3],
            "ocdbt": [True, False],
            "releases": RELEASES,
            "options": [],
            "multiprocess": True,
            "typed_keys": True,
            "targets": False,
        },
        "writes": {},
        "deviations": {
            "LOAD-023": "a dtype torch lacks is read widened (float8_e3m4 as float16): every value "
            "is exact (spec/loading.md §4.2), but NaN payloads are not kept",
        },
    }

    @property
    def version(self) -> str:
        import torch

        from .. import __version__

        return f"ockpt {__version__} through torch {torch.__version__} (DCP)"

    def write(self, case: WriteCase, directory: Path) -> None:
        raise NotImplementedError("ockpt-torch-dcp is a reader")

    def read(
        self,
        path: Path,
        target: Any = None,
        *,
        step: int | None = None,
        item: str | None = None,
        **options: Any,
    ) -> Any:
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata

        from ..reader import open as open_checkpoint
        from ..torch import OrbaxReader

        if target is not None or any(options.values()):
            raise NotImplementedError("ockpt-torch-dcp loads without a target or options only")
        with open_checkpoint(path, step=step, item=item) as ckpt:
            tree = ckpt.metadata
        sep = _separator(tree)
        reader = OrbaxReader(path, step=step, item=item, sep=sep, widen=True)
        state: dict[str, Any] = {}
        for name, md in reader.read_metadata().state_dict_metadata.items():
            if isinstance(md, BytesStorageMetadata):
                state[name] = ""
            else:
                state[name] = torch.empty(md.size, dtype=md.properties.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process"
            dcp.load(state, storage_reader=reader, no_dist=True)
        reader.close()
        return _rebuilt(tree, state, sep, ())


def _key_texts(tree: Any) -> Iterator[str]:
    """Every dict key text of a `pytree_metadata` tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield str(k)
            yield from _key_texts(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _key_texts(v)


def _separator(tree: Any) -> str:
    """``.`` unless a key holds it; then the first of ``/`` and two control characters that
    no key holds."""
    keys = set(_key_texts(tree))
    return next(s for s in (".", "/", "\x1f", "\x1e") if not any(s in k for k in keys))


def _rebuilt(node: Any, state: dict[str, Any], sep: str, key: tuple[str, ...]) -> Any:
    """The `pytree_metadata` tree `node` with each leaf's value from the loaded `state`, as
    numpy in the stored dtype."""
    import torch

    from ..dtypes import astype
    from ..random_keys import RandomKey

    if isinstance(node, dict):
        return {k: _rebuilt(v, state, sep, (*key, str(k))) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(_rebuilt(v, state, sep, (*key, str(i))) for i, v in enumerate(node))
    if node is None:
        return None
    value = state[sep.join(key)]
    if isinstance(value, str):
        return value
    if not isinstance(value, torch.Tensor):  # a Python scalar (a bytes entry, loading §9.2)
        return np.asarray(value).astype(np.dtype(node.dtype))[()]
    stored = np.dtype(node.dtype)
    if stored.isbuiltin != 2:
        array = value.numpy()
    elif value.dtype == getattr(torch, stored.name, None):  # bfloat16, float8: the same bits
        array = value.view(getattr(torch, f"uint{8 * stored.itemsize}")).numpy().view(stored)
    else:  # read widened: narrowed back, exactly
        array = astype(value.numpy(), stored)
    if node.random_key_impl is not None:
        return RandomKey(node.random_key_impl, array)
    return array[()] if node.value_type == "scalar" else array


BUILTIN = {
    "ockpt-tensorstore": lambda: OckptAdapter("tensorstore"),
    "ockpt-python": lambda: OckptAdapter("python"),
    "ockpt-torch-dcp": TorchDcpAdapter,
}
ALIASES = {"orbax": "conformance/adapters/orbax_adapter.py"}
#: the example C reader: built from the repository's source with the local toolchain
C_EXAMPLE = "conformance/examples/c_reader/build.py"


def find_repo_file(rel: str, *hints: Path) -> Path | None:
    """`rel` under the first of the hint directories that has it, else under the source
    checkout this package was loaded from (``<root>/reference/ockpt``).

    Never the working directory: these files are code that runs (`_record.py`, `build.py`, an
    adapter), and a directory a user merely stands in may be anybody's."""
    for base in (*hints, _source_checkout()):
        if base is not None and (Path(base) / rel).exists():
            return Path(base) / rel
    return None


_WHERE = "(name a checkout's fixtures with --fixtures: the working directory is not searched)"


def _source_checkout() -> Path | None:
    """The repository root when this package is its ``reference/ockpt`` (an editable install),
    else None (an installed wheel has no repository around it)."""
    package = Path(__file__).resolve().parents[1]
    root = package.parents[1]
    return root if package == root / "reference" / "ockpt" else None


def _from_module(module: Any, attr: str | None, spec: str) -> Adapter:
    if attr is None:
        attr = next((a for a in ("make_adapter", "ADAPTER") if hasattr(module, a)), None)
        if attr is None:
            raise ValueError(f"{spec}: the module has neither make_adapter() nor ADAPTER")
    obj = getattr(module, attr)
    adapter = obj() if callable(obj) and not isinstance(obj, Adapter) else obj
    if not isinstance(adapter, Adapter):
        raise TypeError(f"{spec}: {attr} is not an adapter (name, capabilities, write, read)")
    return adapter


def _c_example(repo: Path | None) -> Adapter:
    """The example C reader of the repository, built here (RuntimeError: no toolchain)."""
    from .command import CommandAdapter

    found = find_repo_file(C_EXAMPLE, *([repo] if repo else []))
    if found is None:
        raise FileNotFoundError(f"adapter 'c-example': {C_EXAMPLE} not found {_WHERE}")
    mspec = importlib.util.spec_from_file_location("_ockpt_c_example_build", found)
    if mspec is None or mspec.loader is None:
        raise ImportError(f"cannot load {found}")
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    try:
        exe = module.build()
    except module.Unavailable as e:
        raise RuntimeError(f"adapter 'c-example' is not available here: {e}") from None
    return CommandAdapter.from_spec(module.spec(exe))


def load_adapter(spec: str, *, repo: Path | None = None) -> Adapter:
    """The adapter a spec string names (see the module docstring)."""
    if spec.startswith(("cmd:", "cmd(")):
        from .command import CommandAdapter

        return CommandAdapter.from_spec(spec)
    if spec == "c-example":
        return _c_example(repo)
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec in ALIASES:
        found = find_repo_file(ALIASES[spec], *([repo] if repo else []))
        if found is None:
            raise FileNotFoundError(f"adapter {spec!r}: {ALIASES[spec]} not found {_WHERE}")
        spec = str(found)
    target, attr = spec, None
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier():
        target, attr = head, tail
    if target.endswith(".py") or os.sep in target:
        path = Path(target).resolve()
        name = f"_ockpt_adapter_{abs(hash(str(path)))}"
        module = sys.modules.get(name)
        if module is None:
            mspec = importlib.util.spec_from_file_location(name, path)
            if mspec is None or mspec.loader is None:
                raise ImportError(f"cannot load adapter module {path}")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[name] = module
            mspec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return _from_module(module, attr or None, spec)
