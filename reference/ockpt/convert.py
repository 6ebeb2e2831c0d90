"""Orbax checkpoints to and from the formats other stacks load: safetensors, .npz, PyTorch .pt.

A conversion streams leaf by leaf: a *source* lists its leaves (key path, shape, dtype) and reads
any leaf in blocks along its first axis; a *sink* writes each block as it comes. Memory stays
near one block (at most `BLOCK_BYTES`, or one leaf's row), not the whole checkpoint:

* Orbax -> safetensors: the header is built from the leaves' shapes and dtypes first (as the
  safetensors format document lays it out: 8-byte little-endian header size, JSON header padded
  with spaces to a multiple of 8, then the tensors' bytes), then each leaf is written in
  blocks. The safetensors library decides which dtypes the format has (its `TensorSpec`
  refuses the others) and checks every written file when it is reopened. With
  ``max_shard_size`` the output is sharded with a ``<stem>.safetensors.index.json`` as the
  Hugging Face convention has it.
* Orbax -> .npz: each leaf is a stored (uncompressed) ``<key>.npy`` member, written through
  numpy's own ``.npy`` header functions. numpy files have no bfloat16, float8 or int4: such
  leaves are refused with an error (the choice documented here) unless skipped.
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
that join to the same name are refused. Strings are kept in .npz (0-d unicode arrays) and .pt
(Python str); safetensors has only tensors, so string leaves are refused unless skipped. Empty
containers and None hold no data and are left out of flat formats.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from . import dtypes
from .errors import FormatError, NotACheckpointError, UnsupportedError
from .kv import is_url
from .kv.files import open_regular, read_file
from .limits import LIMITS
from .names import CHECKPOINT_METADATA_FILE
from .paths import leaf_name, select_paths

__all__ = [
    "FORMATS",
    "Leaf",
    "Source",
    "OrbaxSource",
    "SafetensorsSource",
    "NpzSource",
    "open_source",
    "guess_format",
    "parse_size",
    "convert",
    "ConvertResult",
    "BLOCK_BYTES",
]

FORMATS = ("orbax", "safetensors", "npz", "pt")
#: The largest block read from a source and written to a sink at once.
BLOCK_BYTES = 64 << 20
_INDEX_SUFFIX = ".safetensors.index.json"
#: dtypes .npy describes natively (no ml_dtypes extension types).
_NUMPY_NAMES = tuple(n for n in dtypes.SUPPORTED if n not in dtypes.EXTENSION_NAMES)
#: numpy dtype names torch has a tensor dtype for (sub-byte ints are refused).
_TORCH_NAMES = _NUMPY_NAMES + (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)


# ---------------------------------------------------------------------------------------------
# Leaves and sources.


@dataclass(frozen=True)
class Leaf:
    """One leaf of a source: its key path, and for arrays its shape and dtype."""

    key: tuple[str, ...]
    kind: str  # "array" or "string"
    shape: tuple[int, ...] = ()
    dtype: np.dtype | None = None
    ref: Any = field(default=None, compare=False, repr=False)  # the source's own handle
    random_key_impl: str | None = None  # a typed PRNG key: the leaf is its uint32 key data

    @property
    def nbytes(self) -> int:
        if self.dtype is None:
            return 0
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def name(self, sep: str) -> str:
        return sep.join(self.key)


class Source:
    """Leaves to read: `leaves`, `empties` (key, kind) of empty containers / None, `read`."""

    format = ""
    path = ""
    leaves: list[Leaf]
    empties: list[tuple[tuple[str, ...], str]]

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        raise NotImplementedError

    def blocks(self, leaf: Leaf, max_bytes: int | None = None) -> Iterator[np.ndarray]:
        """The leaf's values as C-ordered blocks along its first axis (`BLOCK_BYTES` each)."""
        max_bytes = BLOCK_BYTES if max_bytes is None else max_bytes
        if leaf.nbytes <= max_bytes or len(leaf.shape) == 0 or leaf.shape[0] == 0:
            yield np.ascontiguousarray(self.read(leaf))
            return
        rows = max(1, max_bytes // max(1, leaf.nbytes // leaf.shape[0]))
        for start in range(0, leaf.shape[0], rows):
            yield np.ascontiguousarray(self.read(leaf, (slice(start, start + rows),)))

    def mapped(self, leaf: Leaf) -> Any:
        """The whole leaf, file-backed where the format allows (for `ockpt.save_pytree`)."""
        return self.read(leaf)

    def close(self) -> None:
        pass

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OrbaxSource(Source):
    """A pytree item of an Orbax checkpoint (item, v1 checkpoint, step or manager root;
    local or a kvstore URL), read lazily through `ockpt.open`."""

    format = "orbax"

    def __init__(self, path: Any, *, step: int | None = None, item: str | None = None) -> None:
        from .reader import open as open_checkpoint

        self.ckpt = open_checkpoint(path, step=step, item=item)
        self.path = self.ckpt.path
        self.leaves = []
        self.empties = []
        self._walk(self.ckpt.metadata, ())

    def _walk(self, node: Any, key: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            if not node:
                self.empties.append((key, "dict"))
            for k, v in node.items():
                self._walk(v, key + (str(k),))
        elif isinstance(node, (list, tuple)):
            if not node:
                self.empties.append((key, type(node).__name__))
            for i, v in enumerate(node):
                self._walk(v, key + (str(i),))
        elif node is None:
            self.empties.append((key, "None"))
        elif node.dtype is None:
            self.leaves.append(Leaf(key, "string", ref=node))
        else:
            self.leaves.append(
                Leaf(
                    key,
                    "array",
                    tuple(node.shape),
                    np.dtype(node.dtype),
                    node,
                    random_key_impl=node.random_key_impl,
                )
            )

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        value = self.ckpt[leaf.key]
        if leaf.kind == "string" or isinstance(value, (str, bytes)):
            return value
        return np.asarray(value[index])

    def close(self) -> None:
        self.ckpt.close()


def _split(name: str, sep: str) -> tuple[str, ...]:
    return tuple(name.split(sep)) if sep else (name,)


def _open(path: str) -> BinaryIO:
    """An input file opened through the one hardened open (regular files only, PATH-005)."""
    return os.fdopen(open_regular(path), "rb")


def _memmap(path: str, dtype: np.dtype, offset: int, shape: tuple[int, ...], order="C"):  # type: ignore[no-untyped-def]
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return np.empty(shape, dtype)
    with _open(path) as f:  # the map outlives the file object
        if not shape:
            return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=(1,)).reshape(())
        return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


def _safetensors_dtypes() -> dict[str, np.dtype]:
    """safetensors dtype code -> numpy dtype, as the safetensors library maps numpy names."""
    from safetensors import TensorSpec

    out: dict[str, np.dtype] = {}
    for dtype in dtypes.SUPPORTED.values():
        code = _safetensors_code(dtype, TensorSpec)
        if code is not None:
            out[code] = dtype
    return out


def _safetensors_code(dtype: np.dtype, spec_class: Any = None) -> str | None:
    """The safetensors dtype code of a numpy dtype, or None when the format has none."""
    if spec_class is None:
        from safetensors import TensorSpec as spec_class
    try:
        return str(
            spec_class(dtype=dtype.name, shape=[1], data_ptr=0, data_len=dtype.itemsize).dtype
        )
    except Exception:  # noqa: BLE001 - SafetensorError: "Unknown dtype"
        return None


def _read_header(path: str) -> tuple[int, dict[str, Any]]:
    with _open(path) as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 <= n <= LIMITS.max_json_bytes:
            raise FormatError(
                "not a safetensors file: no header of a size within the JSON limit",
                rule="JSON-003",
                file=path,
            )
        return 8 + n, json.loads(f.read(n))


class SafetensorsSource(Source):
    """One ``.safetensors`` file, or the shards named by a ``*.safetensors.index.json``. Each
    file is first opened with the safetensors library (which validates its header); tensors
    are then memory-mapped at their offsets, so reads touch only the bytes asked for."""

    format = "safetensors"

    def __init__(self, path: str, *, sep: str = ".") -> None:
        from safetensors import safe_open

        self.path = path
        files = [path]
        if path.endswith(".json"):
            index = json.loads(read_file(path, limit=LIMITS.max_json_bytes, rule="JSON-003"))
            base = os.path.dirname(path)
            files = sorted({os.path.join(base, f) for f in index["weight_map"].values()})
        codes = _safetensors_dtypes()
        self.leaves, self.empties, self.metadata = [], [], {}
        seen: dict[str, str] = {}
        for file in files:
            start, header = _read_header(file)  # first: refuses what is no regular file
            with safe_open(file, framework="numpy") as f:
                names = list(f.offset_keys())
                self.metadata.update(f.metadata() or {})
            for name in names:
                info = header[name]
                if info["dtype"] not in codes:
                    raise UnsupportedError(
                        f"{file}: tensor {name!r} has safetensors dtype {info['dtype']}, which "
                        f"numpy cannot hold (readable: {sorted(codes)})"
                    )
                if name in seen:
                    raise ValueError(f"tensor {name!r} is in both {seen[name]} and {file}")
                seen[name] = file
                dtype, shape = codes[info["dtype"]], tuple(info["shape"])
                ref = (file, start + info["data_offsets"][0])
                self.leaves.append(Leaf(_split(name, sep), "array", shape, dtype, ref))

    def mapped(self, leaf: Leaf) -> Any:
        file, offset = leaf.ref
        assert leaf.dtype is not None
        return _memmap(file, leaf.dtype, offset, leaf.shape)

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        return np.array(self.mapped(leaf)[index])


class NpzSource(Source):
    """A numpy ``.npz`` archive: members stored uncompressed are memory-mapped in place,
    deflated ones extracted to a temporary file first. Pickled (object) members are refused."""

    format = "npz"

    def __init__(self, path: str, *, sep: str = ".") -> None:
        self.path = path
        self.leaves, self.empties = [], []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        with _open(path) as raw, zipfile.ZipFile(raw) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                name = info.filename[: -len(".npy")]
                with zf.open(info) as f:
                    shape, fortran, dtype, header = _npy_header(f, f"{path}:{info.filename}")
                kind = "string" if dtype.kind == "U" else "array"
                ref = (info, fortran, header)
                self.leaves.append(Leaf(_split(name, sep), kind, shape, dtype, ref))

    def _file(self, leaf: Leaf) -> tuple[str, int]:
        info, _, header = leaf.ref
        if info.compress_type == zipfile.ZIP_STORED:
            with _open(self.path) as f:
                f.seek(info.header_offset)
                local = f.read(30)
                n, m = struct.unpack("<HH", local[26:30])
            return self.path, info.header_offset + 30 + n + m + header
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ockpt-npz-")
        out = os.path.join(self._tmp.name, f"{len(os.listdir(self._tmp.name))}.npy")
        with (
            _open(self.path) as raw,
            zipfile.ZipFile(raw) as zf,
            zf.open(info) as src,
            open(out, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        return out, header

    def mapped(self, leaf: Leaf) -> Any:
        if leaf.kind == "string":
            return self.read(leaf)
        file, offset = self._file(leaf)
        assert leaf.dtype is not None
        arr = _memmap(file, leaf.dtype, offset, leaf.shape, "F" if leaf.ref[1] else "C")
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        if leaf.kind == "string":
            with _open(self.path) as raw, zipfile.ZipFile(raw) as zf, zf.open(leaf.ref[0]) as f:
                return str(np.lib.format.read_array(f, allow_pickle=False)[()])
        return np.array(self.mapped(leaf)[index], order="C")

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _npy_header(f: Any, where: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    if dtype.hasobject:
        raise UnsupportedError(f"{where}: a pickled object array (not loaded: unsafe)")
    if dtype.kind == "V":
        raise UnsupportedError(
            f"{where}: raw dtype {dtype.str} (numpy saves bfloat16 and other ml_dtypes types "
            "as raw bytes, losing the type); convert from safetensors instead"
        )
    return tuple(shape), bool(fortran), dtype, f.tell()


def guess_format(path: str) -> str:
    """The format a path names: by suffix, else by contents; default "orbax"."""
    text = str(path).rstrip("/")
    lower = text.lower()
    if lower.endswith((".safetensors", _INDEX_SUFFIX)):
        return "safetensors"
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith((".pt", ".pth", ".bin")):
        return "pt"
    if os.path.isdir(text):
        index = [n for n in os.listdir(text) if n.endswith(_INDEX_SUFFIX)]
        plain = [n for n in os.listdir(text) if n.endswith(".safetensors")]
        if index or (plain and not os.path.exists(os.path.join(text, CHECKPOINT_METADATA_FILE))):
            return "safetensors"
    return "orbax"


def open_source(
    path: str,
    *,
    format: str | None = None,  # noqa: A002 - the CLI's word
    sep: str = ".",
    step: int | None = None,
    item: str | None = None,
) -> Source:
    """Open a checkpoint or a safetensors / npz file for reading leaf by leaf."""
    fmt = format or guess_format(path)
    if fmt == "orbax":
        return OrbaxSource(path, step=step, item=item)
    if is_url(path) and not path.startswith("file://"):
        raise UnsupportedError(f"{path}: {fmt} files are read from local paths only")
    if path.startswith("file://"):
        path = path[len("file://") :]
    if not os.path.exists(path):
        raise NotACheckpointError(f"{path}: no such file or directory")
    if fmt == "safetensors":
        if os.path.isdir(path):
            index = sorted(n for n in os.listdir(path) if n.endswith(_INDEX_SUFFIX))
            plain = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
            if len(index) == 1:
                path = os.path.join(path, index[0])
            elif len(plain) == 1 and not index:
                path = os.path.join(path, plain[0])
            else:
                raise ValueError(f"{path}: expected one *{_INDEX_SUFFIX} or one .safetensors file")
        return SafetensorsSource(path, sep=sep)
    if fmt == "npz":
        return NpzSource(path, sep=sep)
    raise UnsupportedError(f"{path}: reading {fmt} files is not supported (only writing)")


# ---------------------------------------------------------------------------------------------
# Sinks.


def parse_size(text: str | int) -> int:
    """``"5GB"`` -> 5*10**9, ``"500MiB"`` -> 500*2**20, ``"1000"`` -> 1000 (as Hugging Face)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?I?B?)\s*", text.upper())
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


def _why_not(fmt: str, leaf: Leaf, source: Source) -> str | None:
    """Why the format `fmt` cannot hold `leaf`, or None when it can."""
    if leaf.kind == "string":
        if fmt == "safetensors":
            return "safetensors holds only tensors, not strings"
        if fmt == "npz" and str(source.read(leaf)).endswith("\0"):  # numpy drops trailing NULs
            return "a string ending in NUL cannot be stored in .npy exactly; use .pt"
        return None
    assert leaf.dtype is not None
    name = leaf.dtype.name
    if fmt == "safetensors" and _safetensors_code(leaf.dtype) is None:
        return f"safetensors has no dtype {name}"
    if fmt == "npz" and name not in _NUMPY_NAMES:
        return f".npy has no dtype {name} (use safetensors or .pt, which have it)"
    if fmt == "pt" and name not in _TORCH_NAMES:
        return f"PyTorch has no tensor dtype {name}"
    return None


def _atomic_path(dst: str) -> str:
    return f"{dst}.ockpt-tmp"


@contextlib.contextmanager
def _removed_on_error(path: str) -> Iterator[None]:
    """Remove the partly written `path` when the block fails."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise


def _write_safetensors(
    source: Source, items: list[tuple[str, Leaf]], dst: str, *, max_shard_size: int | None, bar
) -> list[str]:
    shards: list[list[tuple[str, Leaf]]] = [[]]
    size = 0
    for name, leaf in items:
        if max_shard_size is not None and shards[-1] and size + leaf.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append((name, leaf))
        size += leaf.nbytes
    index_out = dst.endswith(_INDEX_SUFFIX)
    base = os.path.dirname(dst) or "."
    stem = os.path.basename(dst)
    stem = stem[: -len(_INDEX_SUFFIX)] if index_out else stem[: -len(".safetensors")]
    if len(shards) == 1 and not index_out:
        names = [dst]
    else:
        n = len(shards)
        names = [os.path.join(base, f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors") for i in range(n)]
    os.makedirs(base, exist_ok=True)
    weight_map: dict[str, str] = {}
    for file, shard in zip(names, shards, strict=True):
        # Largest items first keeps every tensor aligned to its item size (as the library does).
        shard = sorted(shard, key=lambda it: -(it[1].dtype.itemsize if it[1].dtype else 0))
        header: dict[str, Any] = {}
        offset = 0
        for name, leaf in shard:
            assert leaf.dtype is not None
            code = _safetensors_code(leaf.dtype)
            end = offset + leaf.nbytes
            header[name] = {"dtype": code, "shape": list(leaf.shape), "data_offsets": [offset, end]}
            offset = end
            weight_map[name] = os.path.basename(file)
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        text += b" " * (-len(text) % 8)
        tmp = _atomic_path(file)
        with _removed_on_error(tmp), open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, leaf in shard:
                for block in source.blocks(leaf):
                    f.write(_bytes_of(block))
                    bar.update(block.nbytes)
        from safetensors import safe_open

        with safe_open(tmp, framework="numpy") as check:  # the library checks what we wrote
            if set(check.keys()) != {name for name, _ in shard}:
                raise AssertionError(f"{tmp}: written tensors do not match the plan")
        os.replace(tmp, file)
    if len(names) > 1 or index_out:
        index_path = dst if index_out else os.path.join(base, f"{stem}{_INDEX_SUFFIX}")
        total = sum(leaf.nbytes for _, leaf in items)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(index_path, "w", encoding="utf-8") as f:
            json.dump(index, f, indent=2, ensure_ascii=False)
            f.write("\n")
        names.append(index_path)
    return names


def _write_npz(source: Source, items: list[tuple[str, Leaf]], dst: str, *, bar) -> list[str]:
    fmt = np.lib.format
    tmp = _atomic_path(dst)
    with (
        _removed_on_error(tmp),
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        for name, leaf in items:
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                if leaf.kind == "string":
                    text = str(source.read(leaf))  # no trailing NUL: `_why_not` refused it
                    fmt.write_array(f, np.array(text), allow_pickle=False)
                    continue
                assert leaf.dtype is not None
                dtype = leaf.dtype.newbyteorder("<") if leaf.dtype.byteorder == ">" else leaf.dtype
                d = {
                    "descr": fmt.dtype_to_descr(dtype),
                    "fortran_order": False,
                    "shape": leaf.shape,
                }
                try:
                    fmt.write_array_header_1_0(f, d)
                except ValueError:
                    fmt.write_array_header_2_0(f, d)
                for block in source.blocks(leaf):
                    f.write(_bytes_of(block))
                    bar.update(block.nbytes)
    os.replace(tmp, dst)
    return [dst]


def _import_torch():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError:
        raise UnsupportedError(
            "writing a PyTorch .pt file needs PyTorch: pip install torch"
        ) from None
    return torch


def _write_pt(source: Source, items: list[tuple[str, Leaf]], dst: str, *, bar) -> list[str]:
    torch = _import_torch()
    state: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ockpt-pt-", dir=os.path.dirname(dst) or ".") as tmpd:
        for i, (name, leaf) in enumerate(items):
            if leaf.kind == "string":
                state[name] = str(source.read(leaf))
                continue
            assert leaf.dtype is not None
            tdtype = getattr(torch, leaf.dtype.name)
            count = int(np.prod(leaf.shape, dtype=np.int64))
            if count == 0:
                state[name] = torch.empty(leaf.shape, dtype=tdtype)
                continue
            file = os.path.join(tmpd, f"{i}.bin")
            with open(file, "wb") as f:
                for block in source.blocks(leaf):
                    f.write(_bytes_of(block))
                    bar.update(block.nbytes)
            # File-backed (mmap) storage: torch.save reads it from page cache, not a copy.
            flat = torch.from_file(file, shared=True, size=count, dtype=tdtype)
            state[name] = flat.reshape(leaf.shape)
        tmp = _atomic_path(dst)
        torch.save(state, tmp)
        state.clear()
        os.replace(tmp, dst)
    return [dst]


def _nest(items: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in items:
        node = tree
        for i, part in enumerate(key[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"key {'/'.join(key)!r} nests under {'/'.join(key[: i + 1])!r}, which is a leaf"
                )
            node = child
        if key[-1] in node:
            raise ValueError(f"key {'/'.join(key)!r} is both a leaf and a subtree, or repeated")
        node[key[-1]] = value
    return tree


def _write_orbax(
    source: Source, leaves: list[Leaf], dst: str, *, layout: str, overwrite: bool, bar
):  # type: ignore[no-untyped-def]
    from .writer import save_pytree

    if any(not leaf.key for leaf in leaves):
        raise ValueError("a tensor with an empty name cannot be a pytree key")
    items = []
    for leaf in leaves:
        value = source.mapped(leaf)
        items.append((leaf.key, value))
    tree = _nest(items)
    total = sum(leaf.nbytes for leaf in leaves)
    save_pytree(dst, tree, layout=layout, overwrite=overwrite)  # type: ignore[arg-type]
    bar.update(total)
    return [dst]


# ---------------------------------------------------------------------------------------------
# convert


@dataclass(frozen=True)
class ConvertResult:
    """What `convert` wrote: its files (or checkpoint directory), the leaves it skipped as
    unsupported, and, with `select`, its patterns and the leaf names they left out."""

    format: str
    files: tuple[str, ...]
    leaves: int
    bytes: int
    skipped: tuple[tuple[str, str], ...]  # (name, why)
    select: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    random_keys: tuple[tuple[str, str], ...] = ()  # (name, implementation): written as key data

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "files": list(self.files),
            "leaves": self.leaves,
            "bytes": self.bytes,
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
            "select": list(self.select),
            "left_out": list(self.left_out),
            "random_keys": [{"name": n, "impl": i} for n, i in self.random_keys],
        }


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
) -> ConvertResult:
    """Convert `src` to `dst`, leaf by leaf (see the module docstring for each format).

    `select`: patterns (spec key-paths §7.4); only the leaves they select are converted, and
    each must select one (`LeafNameError`, PATH-007).

    `dst` may be a kvstore URL (``s3://``, ``gs://``): the output is written to a local
    temporary directory and then uploaded, ``commit_success.txt`` last (`transfer.copy`).
    """
    from . import _progress

    if sep not in (".", "/"):
        raise ValueError(f"sep must be '.' or '/', not {sep!r}")
    out_fmt = dst_format or guess_format(dst)
    if out_fmt not in FORMATS:
        raise ValueError(f"unknown format {out_fmt!r}; one of {FORMATS}")
    remote = is_url(dst) and not dst.startswith("file://")
    if dst.startswith("file://"):
        dst = dst[len("file://") :]
    shard = None if max_shard_size is None else parse_size(max_shard_size)
    if shard is not None and out_fmt != "safetensors":
        raise ValueError("--max-shard-size applies to safetensors output only")
    with open_source(src, format=src_format, sep=sep, step=step, item=item) as source:
        if source.format == "orbax" and out_fmt == "orbax":
            raise UnsupportedError(
                "both sides are Orbax checkpoints: copy one with `ockpt cp SRC DST`"
            )
        selected = source.leaves
        left_out: list[str] = []
        select = (select,) if isinstance(select, str) else tuple(select)
        if select:
            keep = set(select_paths(select, [leaf.key for leaf in selected], file=source.path))
            left_out = [leaf_name(x.key) for i, x in enumerate(selected) if i not in keep]
            selected = [x for i, x in enumerate(selected) if i in keep]
        chosen: list[Leaf] = []
        skipped: list[tuple[str, str]] = []
        for leaf in selected:
            why = None if out_fmt == "orbax" else _why_not(out_fmt, leaf, source)
            if why is not None:
                if not skip_unsupported:
                    raise UnsupportedError(
                        f"leaf {leaf.name(sep)!r} ({leaf.dtype or 'string'}): {why}; pass "
                        "--skip-unsupported to leave such leaves out"
                    )
                skipped.append((leaf.name(sep), why))
                continue
            chosen.append(leaf)
        items: list[tuple[str, Leaf]] = []
        if out_fmt != "orbax":
            names: dict[str, Leaf] = {}
            for leaf in chosen:
                name = leaf.name(sep)
                if name in names:
                    raise ValueError(
                        f"key paths {list(names[name].key)} and {list(leaf.key)} both join to "
                        f"{name!r} with sep {sep!r}; try --sep {'/' if sep == '.' else '.'}"
                    )
                names[name] = leaf
                items.append((name, leaf))
        total = sum(leaf.nbytes for leaf in chosen)
        work = tempfile.mkdtemp(prefix="ockpt-convert-") if remote else None
        try:
            local = dst
            if work is not None:
                local = os.path.join(work, dst.rstrip("/").rsplit("/", 1)[-1] or "out")
            with _progress.bar(total, f"{out_fmt}", enabled=progress) as bar:
                if out_fmt == "safetensors":
                    files = _write_safetensors(source, items, local, max_shard_size=shard, bar=bar)
                elif out_fmt == "npz":
                    files = _write_npz(source, items, local, bar=bar)
                elif out_fmt == "pt":
                    files = _write_pt(source, items, local, bar=bar)
                else:
                    files = _write_orbax(
                        source, chosen, local, layout=layout, overwrite=overwrite, bar=bar
                    )
            if work is not None:
                files = _upload(files, local, dst, out_fmt, overwrite=overwrite, progress=progress)
        finally:
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
    return ConvertResult(
        out_fmt,
        tuple(files),
        len(chosen),
        total,
        tuple(skipped),
        tuple(select),
        tuple(left_out),
        tuple((x.name(sep), x.random_key_impl) for x in chosen if x.random_key_impl is not None),
    )


def _upload(
    files: Sequence[str], local: str, dst: str, fmt: str, *, overwrite: bool, progress: bool
) -> list[str]:
    from . import transfer

    if fmt == "orbax":
        transfer.copy(local, dst, overwrite=overwrite, progress=progress)
        return [dst]
    base = os.path.dirname(local)
    parent = dst.rstrip("/").rsplit("/", 1)[0]
    out = []
    for file in files:
        rel = os.path.relpath(file, base)
        transfer.put_file(file, f"{parent}/{rel}", overwrite=overwrite)
        out.append(f"{parent}/{rel}")
    return out
