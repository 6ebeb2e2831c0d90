"""Orbax checkpoints to and from the formats other stacks load: safetensors, Hugging Face
folders, .npz, PyTorch .pt.

A conversion streams leaf by leaf: a *source* lists its leaves (key path, shape, dtype) and reads
any leaf in blocks along its first axis; a *sink* writes each block as it comes. Memory stays
near one block (at most `BLOCK_BYTES`, or one leaf's row), not the whole checkpoint:

* Orbax -> safetensors: the header is built from the leaves' shapes and dtypes first (as the
  safetensors format document lays it out: 8-byte little-endian header size, JSON header padded
  with spaces to a multiple of 8, then the tensors' bytes), then each leaf is written in
  blocks. The safetensors library decides which dtypes the format has (its `TensorSpec`
  refuses the others). With
  ``max_shard_size`` the output is sharded with a ``<stem>.safetensors.index.json`` as the
  Hugging Face convention has it. String leaves go into the header's ``__metadata__`` (target
  name -> text; every shard carries them all).
* Orbax -> a Hugging Face folder (``"hf"``, a directory): ``model.safetensors`` when the
  tensors fit in ``max_shard_size`` (default `HF_MAX_SHARD_SIZE`, "5GB", decimal, as
  huggingface_hub), else ``model-0000N-of-0000M.safetensors`` and
  ``model.safetensors.index.json`` (``metadata.total_size``, ``weight_map``): a tensor closes
  the current shard when it would take it past the limit, so one larger than the limit gets a
  shard of its own. ``__metadata__`` has ``"format": "pt"`` as ``save_pretrained`` writes it.
  Other files of the folder (config.json, a tokenizer) are left alone; `config` copies one in.
* Orbax -> .npz: each leaf is a stored (uncompressed) ``<key>.npy`` member, written through
  numpy's own ``.npy`` header functions. numpy files have no bfloat16, float8 or int4: such
  leaves are refused with an error (the choice documented here) unless skipped, or widened.
* Orbax -> .pt: a ``torch.save`` state_dict of tensors. Each tensor is backed by a temporary
  file (``torch.from_file``), so torch serializes from file pages, not from a copy of the
  checkpoint in memory. torch is optional: imported only for this format.
* safetensors / .npz -> Orbax: the tensors are memory-mapped in place (npz members stored
  deflated are first extracted to a temporary file) and handed to `ockpt.save_pytree`, which
  writes a checkpoint real Orbax restores.

Keys: the leaf's key path joined with `sep` (``"."``, the default and Orbax's param-name
separator, or ``"/"``); flat names are split on `sep` back into nested dicts. `select` keeps only
the leaves that its patterns (leaf names of subtrees, or globs over leaf names: spec
key-paths §7.4) select, so an export can leave out, say, the optimizer state. Two key paths
that become the same name are refused. Strings are kept in .npz (0-d unicode arrays; one ending
in NUL is refused, as numpy drops it), .pt (Python str) and safetensors (``__metadata__``).
0-d leaves stay 0-d in every format. Empty containers and None hold no data and are left out of
flat formats.

Flat outputs take `rules` (`ockpt.convert_rules`: ordered renames, transpositions and casts,
matched on the source names). A transposed leaf streams too: its output rows are slices of the
source along the permutation's first axis (for a 2-D transpose, column blocks), each block at
most `BLOCK_BYTES` and spanning whole stored chunks when one fits, so a leaf is read whole only
when it is at most `BLOCK_BYTES`. `widen` stores a dtype the output lacks in the narrowest one
it has that holds every value exactly (bfloat16, float8, float4 -> float32; int4, int2 ->
int8): bfloat16 by its bits (NaN payloads too), the others through ml_dtypes (NaN stays NaN,
though a NaN's payload bits may not). Rules and `widen` do not apply to an Orbax output.

Outputs: an existing output file (or a folder's weight files, or its config.json with
`config`) is replaced only with `overwrite`, as `ockpt cp` does; the refusal names the
command-line flag. Every file is written through the store of its folder (a local directory or
an object-store URL: no local copy of a bucket's output is made). Where the store renames, each
file is written under a temporary name first and renamed into place only when all are written:
the old index is removed first and the new one renamed in last, so an interrupted overwrite
leaves the old model, the new one, or no index, never an index naming shards of two
conversions. In an object store, which has no rename, the old index is removed before the first
file is written and the new index is written last, each object whole (held in memory until its
one write: ``max_shard_size`` bounds it). Each safetensors file's header is read back from the
store and compared with what was written. `config` is read and checked before anything is
written. The format is `dst_format` or the output's suffix, never what a folder holds: an
existing folder of safetensors files is a `ValueError` asking for ``--to hf``; from an Orbax
source, an unknown suffix (``model.safetensor``) is a `ValueError` listing the known ones.

Inputs are read through `ockpt.sources`, which treats them as untrusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes
from .convert_rules import Rules
from .documents._json import parse_json
from .errors import MemoryLimitError, OckptError, UnsupportedError, WriteConflictError
from .limits import current as limits_in_force
from .paths import leaf_name, nest, select_paths
from .sources import (
    BLOCK_BYTES,
    INDEX_SUFFIX,
    Leaf,
    Source,
    guess_format,
    open_source,
    safetensors_code,
    suffix_format,
)
from .store import Store, as_store
from .store.files import read_file

__all__ = [
    "FORMATS",
    "parse_size",
    "convert",
    "ConvertResult",
    "HF_MAX_SHARD_SIZE",
]

#: Output formats; "hf" is a Hugging Face folder of safetensors weights (input: "safetensors").
FORMATS = ("orbax", "safetensors", "npz", "pt", "hf")
#: dtypes .npy describes natively (no ml_dtypes extension types).
_NUMPY_NAMES = tuple(n for n in dtypes.SUPPORTED if n not in dtypes.EXTENSION_NAMES)


# ---------------------------------------------------------------------------------------------
# Sizes and blocks.


def parse_size(text: str | int) -> int:
    """``"5GB"`` -> 5*10**9, ``"500MiB"`` -> 500*2**20, ``"1000"`` -> 1000 (as Hugging Face)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*((?:[KMGT]I?)?B?)\s*", text.upper())
    if m is None:
        raise ValueError(f"not a size: {text!r} (for example 5GB, 500MB, 2GiB or 1000000)")
    unit = m.group(2).rstrip("B")
    scale = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    scale.update({"KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40})
    size = int(float(m.group(1)) * scale[unit])
    if size <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return size


def _bytes_of(block: np.ndarray) -> memoryview:
    arr = np.ascontiguousarray(block).reshape(-1)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return memoryview(arr.view(np.uint8))


# ---------------------------------------------------------------------------------------------
# The plan: each leaf as the output stores it.


@dataclass(frozen=True)
class _Target:
    """A leaf as the output stores it: its name there and, for arrays, its shape and dtype
    after the rules (`axes`: a transposition) and `widen`."""

    leaf: Leaf
    name: str
    shape: tuple[int, ...] = ()
    dtype: np.dtype | None = None
    axes: tuple[int, ...] | None = None
    widened: bool = False

    @property
    def nbytes(self) -> int:
        if self.dtype is None:
            return 0
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def row(self, sep: str, file: str) -> dict[str, Any]:
        """The dry run's line: source name, shape, dtype -> target name, shape, dtype, file."""
        leaf = self.leaf
        return {
            "source": leaf.name(sep),
            "source_shape": list(leaf.shape),
            "source_dtype": str(leaf.dtype or "string"),
            "target": self.name,
            "shape": list(self.shape),
            "dtype": str(self.dtype or "string"),
            "transposed": list(self.axes) if self.axes is not None else None,
            "widened": self.widened,
            "file": file,
        }


#: What `widen` turns a dtype that a format lacks into: the first of these that the format
#: holds and that holds every value exactly (`dtypes.cast_kind`).
_WIDER = ("uint8", "int8", "int16", "float32", "float64")


def _lacks(fmt: str, dtype: np.dtype) -> str | None:
    """Why the format `fmt` cannot hold `dtype`, or None when it can."""
    name = dtype.name
    if fmt in ("safetensors", "hf") and safetensors_code(dtype) is None:
        return f"safetensors has no dtype {name}"
    if fmt == "npz" and name not in _NUMPY_NAMES:
        return f".npy has no dtype {name} (use safetensors or .pt, which have it, or widen=True)"
    if fmt == "pt" and name not in dtypes.TORCH_NAMES:
        return f"PyTorch has no tensor dtype {name}"
    return None


def _wider(fmt: str, dtype: np.dtype) -> np.dtype | None:
    """The narrowest dtype `fmt` holds that holds every value of `dtype`, or None."""
    for name in _WIDER:
        wide = dtypes.SUPPORTED[name]
        if dtypes.cast_kind(dtype, wide) == "exact" and _lacks(fmt, wide) is None:
            return wide
    return None


def _string_value(source: Source, leaf: Leaf) -> str:
    """A string leaf's text (an Orbax string leaf read as bytes is UTF-8)."""
    value = source.read(leaf)
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _string_problem(fmt: str, source: Source, leaf: Leaf) -> str | None:
    """Why `fmt` cannot hold this string exactly, or None."""
    if fmt == "npz" and _string_value(source, leaf).endswith("\0"):  # numpy drops trailing NULs
        return "a string ending in NUL cannot be stored in .npy exactly; use .pt or safetensors"
    return None


def _target(
    leaf: Leaf, fmt: str, sep: str, rules: Rules, widen: bool
) -> tuple[_Target, str | None]:
    """The leaf as `fmt` will store it, and why it cannot (None when it can)."""
    source_name = leaf.name(sep)
    name = rules.target_name(source_name)
    if leaf.kind == "string":
        return _Target(leaf, name), None
    assert leaf.dtype is not None
    axes = rules.axes(source_name, leaf.shape)
    shape = leaf.shape if axes is None else tuple(leaf.shape[a] for a in axes)
    dtype = rules.cast(source_name, leaf.dtype)
    widened = False
    if widen and _lacks(fmt, dtype) is not None and (wide := _wider(fmt, dtype)) is not None:
        dtype, widened = wide, True
    return _Target(leaf, name, shape, dtype, axes, widened), _lacks(fmt, dtype)


def _plan(
    source: Source,
    leaves: list[Leaf],
    fmt: str,
    *,
    sep: str,
    rules: Rules,
    widen: bool,
    skip_unsupported: bool,
) -> tuple[list[_Target], list[tuple[str, str]]]:
    """The targets of the leaves a flat format `fmt` can hold, and the (name, why) of those
    skipped; a leaf it cannot hold is an error unless `skip_unsupported`."""
    targets: list[_Target] = []
    skipped: list[tuple[str, str]] = []
    by_name: dict[str, _Target] = {}
    for leaf in leaves:
        target, why = _target(leaf, fmt, sep, rules, widen)
        if why is None and leaf.kind == "string":
            why = _string_problem(fmt, source, leaf)
        if why is not None:
            if not skip_unsupported:
                raise UnsupportedError(
                    f"leaf {leaf.name(sep)!r} ({target.dtype or 'string'}): {why}; pass "
                    "skip_unsupported=True to leave such leaves out"
                )
            skipped.append((leaf.name(sep), why))
            continue
        if (
            fmt in ("safetensors", "hf")
            and target.dtype is not None
            and (target.name == _SAFETENSORS_METADATA)
        ):
            raise ValueError(
                f"leaf {leaf.name(sep)!r} would be the tensor {target.name!r}, a name safetensors "
                "reserves for its metadata; rename it (rules)"
            )
        if fmt == "npz" and len(target.name.encode("utf-8", "surrogatepass")) > _NPZ_NAME_BYTES:
            raise ValueError(
                f"leaf {leaf.name(sep)[:80]!r}... ({len(target.name)} characters) would be an "
                f".npz member name longer than a zip archive holds ({_NPZ_NAME_BYTES} UTF-8 "
                "bytes before .npy); rename it (rules) or choose another format"
            )
        if target.name in by_name:
            other = by_name[target.name].leaf
            hint = "check the rename rules" if rules.rename else f"try sep={_other(sep)!r}"
            raise ValueError(
                f"key paths {list(other.key)} and {list(leaf.key)} both become "
                f"{target.name!r}; {hint}"
            )
        by_name[target.name] = target
        targets.append(target)
    return targets, skipped


#: The longest `.npz` member name before its ``.npy``: a zip header holds a name of at most
#: 65,535 bytes.
_NPZ_NAME_BYTES = 0xFFFF - len(".npy")


def _other(sep: str) -> str:
    return "/" if sep == "." else "."


def _cast(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`block` as `dtype`; bfloat16 -> float32 by its bits (exact for every pattern, NaN
    payloads too: bfloat16 is the top half of a float32)."""
    if block.dtype.name == "bfloat16" and dtype == np.float32:
        return (block.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return dtypes.astype(block, dtype)


def _target_blocks(source: Source, target: _Target) -> Iterator[np.ndarray]:
    """The target's values in C order, in blocks of at most `BLOCK_BYTES` (or one row of the
    output, when a row is larger), transposed and cast as planned."""
    leaf = target.leaf
    assert leaf.dtype is not None and target.dtype is not None
    budget = max(1, BLOCK_BYTES * leaf.dtype.itemsize // max(1, target.dtype.itemsize))
    if target.axes is None:
        blocks = source.blocks(leaf, min(budget, BLOCK_BYTES))
    else:
        blocks = _permuted_blocks(source, leaf, target.axes, min(budget, BLOCK_BYTES))
    for block in blocks:
        yield block if block.dtype == target.dtype else _cast(block, target.dtype)


def _permuted_blocks(
    source: Source, leaf: Leaf, axes: tuple[int, ...], max_bytes: int
) -> Iterator[np.ndarray]:
    """``numpy.transpose(leaf, axes)`` in C-ordered blocks: output rows are slices of the
    source along axis ``axes[0]`` (for a 2-D transpose, column blocks), so a block is read
    and permuted with nothing else of the leaf in memory. Blocks span whole stored chunks
    along that axis when a whole chunk fits in `max_bytes`, so each chunk is decoded once."""
    axis = axes[0]
    extent = leaf.shape[axis] if leaf.shape else 0
    if leaf.nbytes <= max_bytes or extent == 0:
        yield np.ascontiguousarray(np.transpose(source.read(leaf), axes))
        return
    count = max(1, max_bytes // max(1, leaf.nbytes // extent))
    chunk = leaf.chunk_shape[axis] if leaf.chunk_shape else extent
    if chunk < extent and count >= chunk:
        count -= count % chunk
    for start in range(0, extent, count):
        index = [slice(None)] * len(leaf.shape)
        index[axis] = slice(start, start + count)
        yield np.ascontiguousarray(np.transpose(source.read(leaf, tuple(index)), axes))


# ---------------------------------------------------------------------------------------------
# Sinks.


#: The suffix a flat output's file carries until every file of the output is written.
_TMP_SUFFIX = ".ockpt-tmp"


class _File:
    """A new file of an output as a binary stream (``write``, ``tell``; no ``seek``: zipfile
    writes its members with data descriptors, torch.save streams), over `Store.writer`. With
    `copy`, each buffer written is copied: for a writer that reuses its buffers (torch.save),
    since a store may hold them until the file is closed."""

    def __init__(self, file: Any, *, copy: bool = False) -> None:
        self._file = file
        self._copy = copy
        self._at = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._file.append([bytes(view) if self._copy else view])
        self._at += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._at

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()


class _Output:
    """The files of a flat output, in the store of their folder.

    Where the store renames (`Capabilities.atomic_rename`), each file is written under a
    temporary name and all are renamed into place once every one is written (`publish`), so
    an interrupted conversion leaves the old output as it was. Where it does not (an object
    store, whose objects appear whole when written), each is written under its own name, the
    files `publish` would remove first (an old index) are removed before the first is written,
    and the index is written last. On failure, `discard` removes what was written."""

    def __init__(self, folder: Store, *, remove_first: Sequence[str] = ()) -> None:
        self.folder = folder
        self.staged = folder.capabilities.atomic_rename
        self.remove_first = list(remove_first)
        self.written: list[str] = []
        if not self.staged:
            self._remove(self.remove_first)

    def _remove(self, names: Sequence[str]) -> None:
        for name in names:
            self.folder.delete(name)

    def key(self, name: str) -> str:
        """Where the file `name` is written until `publish`."""
        return name + _TMP_SUFFIX if self.staged else name

    def open(self, name: str, *, copy: bool = False) -> _File:
        self.written.append(name)
        return _File(self.folder.writer(self.key(name)), copy=copy)

    def put(self, name: str, data: bytes) -> None:
        file = self.open(name)
        file.write(data)
        file.close()

    def publish(self) -> list[str]:
        """Put every written file in place, in the order written (the index last), after
        removing `remove_first`; returns the files, as the folder names them."""
        self.folder.flush()
        if self.staged:
            self._remove(self.remove_first)
            for name in self.written:
                self.folder.rename(self.key(name), name)
        done, self.written = self.written, []
        return [self.folder.file(name) for name in done]

    def discard(self) -> None:
        """Remove what was written and not yet put in place."""
        with contextlib.suppress(OSError, OckptError):
            self.folder.flush()
        for name in self.written:
            with contextlib.suppress(OSError, OckptError):
                self.folder.delete(self.key(name))
        self.written = []


def _refuse_existing(folder: Store, names: Sequence[str], *, overwrite: bool) -> None:
    """Like `ockpt cp`: an existing output is replaced only with `overwrite`."""
    existing = [folder.file(n) for n in names if folder.exists(n)]
    if existing and not overwrite:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if existing[3:] else "")
        raise WriteConflictError(f"{shown}: exists; pass overwrite=True to replace it")


@dataclass(frozen=True)
class _SafetensorsPlan:
    """The files of a safetensors output, named in their folder: `shards` (file, its tensors)
    and the index file (None for a single file), Hugging Face's naming:
    ``<stem>-0000N-of-0000M.safetensors``."""

    shards: list[tuple[str, list[_Target]]]
    index: str | None

    @property
    def files(self) -> list[str]:
        return [f for f, _ in self.shards] + ([self.index] if self.index else [])


def _plan_safetensors(
    targets: list[_Target], name: str, max_shard_size: int | None
) -> _SafetensorsPlan:
    """Tensors in order; a shard closes when the next tensor would take it past
    `max_shard_size` (so a tensor larger than the limit gets a shard of its own), as
    huggingface_hub's ``split_state_dict_into_shards`` does."""
    groups: list[list[_Target]] = [[]]
    size = 0
    for target in targets:
        if target.dtype is None:
            continue  # strings go into every shard's __metadata__
        if max_shard_size is not None and groups[-1] and size + target.nbytes > max_shard_size:
            groups.append([])
            size = 0
        groups[-1].append(target)
        size += target.nbytes
    index_out = name.endswith(INDEX_SUFFIX)
    stem = name[: -len(INDEX_SUFFIX)] if index_out else name[: -len(".safetensors")]
    if len(groups) == 1 and not index_out:
        return _SafetensorsPlan([(name, groups[0])], None)
    n = len(groups)
    names = [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    index = name if index_out else f"{stem}{INDEX_SUFFIX}"
    return _SafetensorsPlan(list(zip(names, groups, strict=True)), index)


def _metadata(
    source: Source, targets: list[_Target], base: dict[str, str]
) -> dict[str, str] | None:
    """The ``__metadata__`` of each file: `base` and every string leaf (target name -> text)."""
    out = dict(base)
    for target in targets:
        if target.dtype is None:
            if target.name in out:
                raise ValueError(
                    f"string leaf {target.leaf.name('.')!r} would be __metadata__ key "
                    f"{target.name!r}, which the output already uses; rename it (rules)"
                )
            out[target.name] = _string_value(source, target.leaf)
    return out or None


#: The longest header the safetensors library reads (its ``MAX_HEADER_SIZE``).
_SAFETENSORS_HEADER_MAX = 100_000_000


def _safetensors_header(
    shard: list[_Target], metadata: dict[str, str] | None
) -> tuple[list[_Target], bytes, int]:
    """The shard's tensors in file order (largest items first: every tensor aligned to its
    item size, as the library writes them), its header (padded to 8 bytes) and data bytes."""
    shard = sorted(shard, key=lambda t: -(t.dtype.itemsize if t.dtype else 0))
    header: dict[str, Any] = {_SAFETENSORS_METADATA: metadata} if metadata else {}
    offset = 0
    for target in shard:
        assert target.dtype is not None
        end = offset + target.nbytes
        header[target.name] = {
            "dtype": safetensors_code(target.dtype),
            "shape": list(target.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return shard, text + b" " * (-len(text) % 8), offset


def _write_safetensors(
    source: Source,
    plan: _SafetensorsPlan,
    metadata: dict[str, str] | None,
    out: _Output,
    *,
    bar: Any,
) -> None:
    """Write the planned files (`out` puts them in place: see `_Output`), each file's header
    read back from the store and checked against what was written."""
    weight_map: dict[str, str] = {}
    headers = [_safetensors_header(shard, metadata) for _, shard in plan.shards]
    for (name, _), (_, text, _) in zip(plan.shards, headers, strict=True):
        if len(text) > _SAFETENSORS_HEADER_MAX:  # before anything is written
            raise ValueError(
                f"the header of {name} would be {len(text)} bytes (its string leaves and tensor "
                f"names), more than the {_SAFETENSORS_HEADER_MAX} the safetensors library "
                "reads; leave the string leaves out (select) or choose .npz or .pt"
            )
    for (name, _), (shard, text, offset) in zip(plan.shards, headers, strict=True):
        weight_map.update(dict.fromkeys((t.name for t in shard), name))
        f = out.open(name)
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for target in shard:
            for block in _target_blocks(source, target):
                f.write(_bytes_of(block))
                bar.update(block.nbytes)
        f.close()
        _check_written(out, name, struct.pack("<Q", len(text)) + text, 8 + len(text) + offset)
    if plan.index is not None:
        total = sum(t.nbytes for _, shard in plan.shards for t in shard)
        index = {
            "metadata": {"total_size": total},
            "weight_map": dict(sorted(weight_map.items())),
        }
        out.put(plan.index, (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode())


def _check_written(out: _Output, name: str, head: bytes, size: int) -> None:
    """The file `name` as the store holds it: its header `head` and `size` bytes, no more."""
    out.folder.flush()
    key = out.key(name)
    got = out.folder.get_range(key, 0, len(head))
    tail = out.folder.get_range(key, size - 1, 2) if size else b""
    if got != head or tail is None or len(tail) != (1 if size else 0):
        raise OckptError(f"{out.folder.file(key)}: the file written is not the one planned")


#: The header key safetensors reserves for its string metadata: no tensor may take it.
_SAFETENSORS_METADATA = "__metadata__"

#: The weight files of a Hugging Face folder (`--to hf`): one, or shards and their index.
_HF_WEIGHTS = re.compile(r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json")
_HF_FILE = "model.safetensors"
_HF_CONFIG = "config.json"
#: huggingface_hub's default ``max_shard_size`` (transformers 4.x's too; 5.x's is 50GB).
HF_MAX_SHARD_SIZE = "5GB"


def _hf_stale(folder: Store, plan: _SafetensorsPlan) -> list[str]:
    """Weight files already in the Hugging Face folder that this conversion would not write,
    index files first (`_Output` removes them before the new files are put in place)."""
    ours = set(plan.files)
    names = [n for n in folder.list_dir().files if _HF_WEIGHTS.fullmatch(n) and n not in ours]
    return sorted(names, key=lambda n: (not n.endswith(INDEX_SUFFIX), n))


def _read_config(config: str) -> bytes:
    """The bytes of `config`, checked before anything is written: a regular file within the
    JSON size limit that parses as a JSON object (as from_pretrained needs it)."""
    try:
        data = read_file(config, limit=limits_in_force().max_json_bytes, rule="JSON-003")
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"config file {config}: no such file") from None
    try:
        ok = isinstance(parse_json(data, file=config), dict)
    except ValueError:  # DocumentError: not JSON, or beyond its bounds
        ok = False
    if not ok:
        raise ValueError(f"config file {config}: not a JSON object")
    return data


def _write_npz(source: Source, targets: list[_Target], out: _Output, name: str, *, bar) -> None:
    fmt = np.lib.format
    file = out.open(name)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:  # type: ignore[arg-type]
        for target in targets:
            with zf.open(f"{target.name}.npy", "w", force_zip64=True) as f:
                if target.dtype is None:  # no trailing NUL: `_string_problem` refused it
                    value = np.array(_string_value(source, target.leaf))
                    fmt.write_array(f, value, allow_pickle=False)
                    continue
                dtype = target.dtype
                dtype = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
                d = {
                    "descr": fmt.dtype_to_descr(dtype),
                    "fortran_order": False,
                    "shape": target.shape,
                }
                try:
                    fmt.write_array_header_1_0(f, d)
                except ValueError:
                    fmt.write_array_header_2_0(f, d)
                for block in _target_blocks(source, target):
                    f.write(_bytes_of(block))
                    bar.update(block.nbytes)
    file.close()


def _write_pt(source: Source, targets: list[_Target], out: _Output, name: str, *, bar) -> None:
    from .torch.runtime import import_torch

    torch = import_torch("writing a PyTorch .pt file")
    state: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ockpt-pt-") as tmpd:
        for i, target in enumerate(targets):
            if target.dtype is None:
                state[target.name] = _string_value(source, target.leaf)
                continue
            tdtype = getattr(torch, target.dtype.name)
            count = int(np.prod(target.shape, dtype=np.int64))
            if count == 0:
                state[target.name] = torch.empty(target.shape, dtype=tdtype)
                continue
            file = os.path.join(tmpd, f"{i}.bin")
            with open(file, "wb") as f:
                for block in _target_blocks(source, target):
                    f.write(_bytes_of(block))
                    bar.update(block.nbytes)
            # File-backed (mmap) storage: torch.save reads it from page cache, not a copy.
            try:
                flat = torch.from_file(file, shared=True, size=count, dtype=tdtype)
            except RuntimeError as e:  # no address space for the map (a process limit)
                raise MemoryLimitError(
                    f"cannot map the {count * target.dtype.itemsize} bytes of leaf "
                    f"{target.name!r} to write them to the .pt file: {e}",
                    file=name,
                ) from None
            state[target.name] = flat.reshape(target.shape)
        output = out.open(name, copy=True)  # torch.save may reuse its buffers
        torch.save(state, output)
        output.close()
        state.clear()


def _write_orbax(
    source: Source, leaves: list[Leaf], dst: str, *, layout: str, overwrite: bool, progress: bool
) -> list[str]:
    from . import _progress
    from .writer import save_pytree

    if any(not leaf.key for leaf in leaves):
        raise ValueError("a tensor with an empty name cannot be a pytree key")
    tree = nest((leaf.key, source.mapped(leaf)) for leaf in leaves)
    total = sum(leaf.nbytes for leaf in leaves)
    with _progress.bar(total, "orbax", enabled=progress) as bar:
        save_pytree(dst, tree, layout=layout, overwrite=overwrite)  # type: ignore[arg-type]
        bar.update(total)
    return [dst]


# ---------------------------------------------------------------------------------------------
# convert


@dataclass(frozen=True)
class ConvertResult:
    """What `convert` wrote (or, with `dry_run`, would write): its files (or checkpoint
    directory), the leaves it skipped as unsupported, with `select` its patterns and the leaf
    names they left out, the leaves `widen` widened and, for a dry run, the mapping."""

    format: str
    files: tuple[str, ...]
    leaves: int
    bytes: int
    skipped: tuple[tuple[str, str], ...]  # (name, why)
    select: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    random_keys: tuple[tuple[str, str], ...] = ()  # (name, implementation): written as key data
    widened: tuple[tuple[str, str, str], ...] = ()  # (target name, dtype, stored dtype)
    metadata_strings: tuple[str, ...] = ()  # string leaves written to safetensors __metadata__
    dry_run: bool = False
    mapping: tuple[dict[str, Any], ...] = ()  # with dry_run: `_Target.row` of every leaf

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": self.format,
            "files": list(self.files),
            "leaves": self.leaves,
            "bytes": self.bytes,
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
            "select": list(self.select),
            "left_out": list(self.left_out),
            "random_keys": [{"name": n, "impl": i} for n, i in self.random_keys],
            "widened": [{"name": n, "dtype": a, "stored": b} for n, a, b in self.widened],
            "metadata_strings": list(self.metadata_strings),
            "dry_run": self.dry_run,
        }
        if self.dry_run:
            out["mapping"] = list(self.mapping)
        return out


#: Output names `guess_format` knows, for the error on a name it does not.
_KNOWN_OUTPUTS = (
    ".safetensors, .safetensors.index.json, .npz, .pt (.pth, .bin), a folder with "
    'dst_format="hf", '
    "or an Orbax checkpoint directory (from safetensors or .npz)"
)


def _output_format(src: str, dst: str, src_format: str | None, dst_format: str | None) -> str:
    """The output format: `dst_format`, else by `dst`'s suffix only (never by what a folder
    holds). An existing folder of safetensors files (a Hugging Face folder) is a usage error
    naming ``dst_format="hf"``, not a guess: it is neither one ``.safetensors`` file nor an Orbax
    checkpoint. An Orbax source makes an unknown suffix (``model.safetensor``) a usage error
    rather than an Orbax output."""
    if dst_format is not None:
        if dst_format not in FORMATS:
            raise ValueError(f"unknown output format {dst_format!r}; known: {', '.join(FORMATS)}")
        return dst_format
    fmt = suffix_format(dst) or "orbax"
    if fmt == "orbax" and guess_format(dst) == "safetensors":
        raise ValueError(
            f'{dst}: a folder of safetensors files; pass dst_format="hf" to write a Hugging Face '
            "folder there (or another dst_format)"
        )
    if fmt == "orbax" and (src_format or guess_format(src)) == "orbax":
        suffix = os.path.splitext(os.path.basename(dst.rstrip("/")))[1]
        if suffix:
            raise ValueError(
                f"unknown output format {suffix!r} ({dst}); known: {_KNOWN_OUTPUTS}, "
                "or pass dst_format"
            )
    return fmt


def _output_folder(fmt: str, dst: str) -> tuple[Store, str]:
    """The store of the folder an output's files go into, and the name of its (first) file:
    a Hugging Face folder is its own folder; a file or checkpoint lies in its parent's."""
    store = as_store(dst)
    if fmt == "hf":
        return store, _HF_FILE
    folder = store.parent()
    if folder is None:
        raise ValueError(f"{dst}: no file name to write to")
    return folder, store.name


def _output_files(
    fmt: str, targets: list[_Target], name: str, shard: int | None
) -> tuple[_SafetensorsPlan | None, list[str]]:
    """The safetensors plan (safetensors and hf) and the names of the files the output will
    have in its folder."""
    if fmt in ("hf", "safetensors"):
        plan = _plan_safetensors(targets, name, shard)
        return plan, plan.files
    return None, [name]


def convert(
    src: str,
    dst: str,
    *,
    src_format: str | None = None,
    dst_format: str | None = None,
    sep: str = ".",
    max_shard_size: int | str | None = None,
    skip_unsupported: bool = False,
    step: int | None = None,
    item: str | None = None,
    layout: str = "v1",
    overwrite: bool = False,
    progress: bool = True,
    select: Sequence[str] = (),
    rules: Rules | None = None,
    widen: bool = False,
    dry_run: bool = False,
    config: str | None = None,
) -> ConvertResult:
    """Convert `src` to `dst`, leaf by leaf (see the module docstring for each format).

    `select`: patterns (spec key-paths §7.4); only the leaves they select are converted, and
    each must select one (`LeafNameError`, PATH-007). `rules` (`ockpt.convert_rules`) rename,
    transpose and cast leaves of a flat output; `widen` stores a dtype the output lacks in the
    narrowest one it has that holds every value exactly. `dry_run` plans, checks and returns
    the mapping without writing. `config`: a ``config.json`` copied into a `hf` folder.

    `dst` may be a kvstore URL (``s3://``, ``gs://``): the output is written straight to the
    store (an Orbax checkpoint with ``commit_success.txt`` last; each flat file whole, held in
    memory until written: a shard's size bounds it).
    """
    if sep not in (".", "/"):
        raise ValueError(f"sep must be '.' or '/', not {sep!r}")
    rules = rules or Rules()
    out_fmt = _output_format(src, dst, src_format, dst_format)
    shard = None if max_shard_size is None else parse_size(max_shard_size)
    if shard is not None and out_fmt not in ("safetensors", "hf"):
        raise ValueError("max_shard_size applies to safetensors and hf output only")
    if out_fmt == "hf" and shard is None:
        shard = parse_size(HF_MAX_SHARD_SIZE)
    if config is not None and out_fmt != "hf":
        raise ValueError('config applies to dst_format="hf" only')
    config_data = None if config is None else _read_config(config)
    if out_fmt == "orbax" and (rules or widen):
        raise UnsupportedError("rules and widen=True apply to flat outputs")
    with open_source(src, format=src_format, sep=sep, step=step, item=item) as source:
        if source.format == "orbax" and out_fmt == "orbax":
            raise UnsupportedError(
                "both sides are Orbax checkpoints: copy one with `ockpt cp SRC DST`; to convert, "
                f"name an output {_KNOWN_OUTPUTS}"
            )
        selected, left_out, select = _selected(source, select)
        if out_fmt == "orbax":  # a string leaf is a string there too (a flat format's target)
            targets = [
                _Target(x, x.name(sep), x.shape, x.dtype)
                if x.kind != "string"
                else _Target(x, x.name(sep))
                for x in selected
            ]
            skipped: list[tuple[str, str]] = []
        else:
            targets, skipped = _plan(
                source,
                selected,
                out_fmt,
                sep=sep,
                rules=rules,
                widen=widen,
                skip_unsupported=skip_unsupported,
            )
        folder, name = _output_folder(out_fmt, dst)
        plan, names = _output_files(out_fmt, targets, name, shard)
        stale = _hf_stale(folder, plan) if out_fmt == "hf" and plan is not None else []
        _refuse_existing(folder, names + stale, overwrite=overwrite)
        if config is not None:
            _refuse_existing(folder, [_HF_CONFIG], overwrite=overwrite)
        files = [folder.file(n) for n in names]
        if dry_run:
            mapping = _mapping(targets, plan, files, sep)
        elif out_fmt == "orbax":
            mapping = ()
            files = _write_orbax(
                source,
                [t.leaf for t in targets],
                dst,
                layout=layout,
                overwrite=overwrite,
                progress=progress,
            )
        else:
            mapping = ()
            index = [plan.index] if plan is not None and plan.index is not None else []
            out = _Output(folder, remove_first=index + stale)
            try:
                _write(source, targets, out, out_fmt, plan, name, progress=progress)
                if config_data is not None:
                    out.put(_HF_CONFIG, config_data)
                files = out.publish()
            except BaseException:
                out.discard()
                raise
    return ConvertResult(
        out_fmt,
        tuple(files),
        len(targets),
        sum(t.nbytes for t in targets),
        tuple(skipped),
        tuple(select),
        tuple(left_out),
        tuple((t.name, t.leaf.random_key_impl) for t in targets if t.leaf.random_key_impl),
        tuple((t.name, str(t.leaf.dtype), str(t.dtype)) for t in targets if t.widened),
        tuple(t.name for t in targets if t.dtype is None and out_fmt in ("safetensors", "hf")),
        dry_run,
        mapping,
    )


def _selected(
    source: Source, select: Sequence[str] | str
) -> tuple[list[Leaf], list[str], tuple[str, ...]]:
    """The leaves `select` keeps, the leaf names it leaves out, and the patterns."""
    patterns = (select,) if isinstance(select, str) else tuple(select)
    if not patterns:
        return source.leaves, [], ()
    keep = set(select_paths(patterns, [leaf.key for leaf in source.leaves], file=source.path))
    left_out = [leaf_name(x.key) for i, x in enumerate(source.leaves) if i not in keep]
    return [x for i, x in enumerate(source.leaves) if i in keep], left_out, patterns


def _mapping(
    targets: list[_Target], plan: _SafetensorsPlan | None, files: list[str], sep: str
) -> tuple[dict[str, Any], ...]:
    """Every target's dry-run row, with the file that will hold it (`files`: the output's
    files as its folder names them, in the plan's order)."""
    shown = dict(zip(plan.files, files, strict=True)) if plan else {}
    where = {id(t): shown[f] for f, shard in plan.shards for t in shard} if plan else {}
    default = "__metadata__ of every file" if plan else files[0]  # strings in safetensors
    return tuple(t.row(sep, where.get(id(t), default)) for t in targets)


def _write(
    source: Source,
    targets: list[_Target],
    out: _Output,
    fmt: str,
    plan: _SafetensorsPlan | None,
    name: str,
    *,
    progress: bool,
) -> None:
    """Write the planned flat output's files into `out`."""
    from . import _progress

    total = sum(t.nbytes for t in targets)
    with _progress.bar(total, fmt, enabled=progress) as bar:
        if plan is not None:
            base = {"format": "pt"} if fmt == "hf" else {}  # as save_pretrained writes
            _write_safetensors(source, plan, _metadata(source, targets, base), out, bar=bar)
        elif fmt == "npz":
            _write_npz(source, targets, out, name, bar=bar)
        else:
            _write_pt(source, targets, out, name, bar=bar)
