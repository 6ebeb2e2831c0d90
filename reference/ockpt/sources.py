"""Sources: checkpoints and flat weight files (safetensors, .npz) read leaf by leaf.

A *source* lists its leaves (key path, shape, dtype; strings too) and the empty containers and
Nones it holds, and reads any leaf whole, by index, or in blocks along its first axis (at most
`BLOCK_BYTES` each). Callers that stream (`ockpt.convert`, `ockpt diff`) so keep memory near
one block, not the whole checkpoint: an Orbax leaf is read lazily through `ockpt.open`, and
safetensors tensors and .npz members are memory-mapped in place (npz members stored deflated
are first extracted to a temporary file), so reads touch only the bytes asked for.

Keys: a flat file's names are split on `sep` (``"."``, the default and Orbax's param-name
separator, or ``"/"``) into key paths.

Inputs are untrusted: an index's ``weight_map`` may name only plain file names in its own
folder; an .npz member's .npy header must describe exactly the member's declared size, which
must lie within the file (for a deflated member, within what DEFLATE can expand its stored
bytes to) and within the limits' `max_array_bytes`, so no extraction or mapping reaches past it.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from . import dtypes
from .documents._json import parse_json
from .errors import FormatError, NotACheckpointError, UnsupportedError
from .limits import current as limits_in_force
from .names import CHECKPOINT_METADATA_FILE
from .paths import EmptyNode, flatten, leaf_name
from .store import as_store
from .store.files import open_regular, read_file

__all__ = [
    "BLOCK_BYTES",
    "INDEX_SUFFIX",
    "Leaf",
    "Source",
    "OrbaxSource",
    "TreeSource",
    "SafetensorsSource",
    "NpzSource",
    "open_source",
    "guess_format",
    "suffix_format",
    "safetensors_code",
]

#: The largest block read from a source and written to a sink at once.
BLOCK_BYTES = 64 << 20
#: The suffix of a sharded safetensors model's index (Hugging Face's convention).
INDEX_SUFFIX = ".safetensors.index.json"


@dataclass(frozen=True)
class Leaf:
    """One leaf of a source: its key path, and for arrays its shape and dtype."""

    key: tuple[str, ...]
    kind: str  # "array" or "string"
    shape: tuple[int, ...] = ()
    dtype: np.dtype | None = None
    ref: Any = field(default=None, compare=False, repr=False)  # the source's own handle
    random_key_impl: str | None = None  # a typed PRNG key: the leaf is its uint32 key data
    chunk_shape: tuple[int, ...] | None = None  # the stored chunks, where the source has them

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
                    chunk_shape=tuple(node.chunk_shape) if node.chunk_shape else None,
                )
            )

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        value = self.ckpt[leaf.key]
        if leaf.kind == "string" or isinstance(value, (str, bytes)):
            return value
        return np.asarray(value[index])

    def close(self) -> None:
        self.ckpt.close()


class TreeSource(Source):
    """A pytree in memory (dicts, lists, tuples, NamedTuples; numpy or jax arrays, Python and
    numpy scalars, strings, None, typed PRNG keys as their key data), keyed as `ockpt.save_pytree`
    keys it (`paths.flatten`), so it compares with a checkpoint's tree by key path."""

    format = "tree"
    _EMPTY = {
        EmptyNode.DICT: "dict",
        EmptyNode.LIST: "list",
        EmptyNode.TUPLE: "tuple",
        EmptyNode.NAMED_TUPLE: "tuple",
        EmptyNode.NONE: "None",
    }

    def __init__(self, tree: Any, *, path: str = "<tree>") -> None:
        from ._jax import key_parts

        self.path = path
        self.leaves = []
        self.empties = []
        for keys, value in flatten(tree):
            key = tuple(e.key for e in keys)
            if isinstance(value, EmptyNode):
                self.empties.append((key, self._EMPTY[value]))
                continue
            if isinstance(value, str):
                self.leaves.append(Leaf(key, "string", ref=value))
                continue
            impl = None
            typed_key = key_parts(value)
            if typed_key is not None:
                impl, value = typed_key
            array = np.asarray(value)
            if array.dtype == object:
                raise TypeError(f"leaf {leaf_name(key)!r}: {type(value).__name__} is no array")
            self.leaves.append(
                Leaf(key, "array", array.shape, array.dtype, array, random_key_impl=impl)
            )

    def read(self, leaf: Leaf, index: Any = ...) -> Any:
        return leaf.ref if leaf.kind == "string" else leaf.ref[index]


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
        code = safetensors_code(dtype, TensorSpec)
        if code is not None:
            out[code] = dtype
    return out


def safetensors_code(dtype: np.dtype, spec_class: Any = None) -> str | None:
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
        if not 0 <= n <= limits_in_force().max_json_bytes:
            raise FormatError(
                "not a safetensors file: no header of a size within the JSON limit",
                rule="JSON-003",
                file=path,
            )
        return 8 + n, parse_json(f.read(n), file=path)


def _index_files(path: str) -> set[str]:
    """The shard file names a ``*.safetensors.index.json`` names. Each must be a plain file
    name in the index's own folder (no ``/``, ``\\``, ``..`` or NUL), so a crafted index
    cannot pull in other safetensors files on the disk."""
    data = read_file(path, limit=limits_in_force().max_json_bytes, rule="JSON-003")
    index = parse_json(data, file=path)  # bounded in size, depth and values (JSON-00x)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise FormatError("no weight_map object", file=path, pointer="/weight_map")
    for key, name in weight_map.items():
        if not isinstance(name, str) or not _plain_file_name(name):
            raise FormatError(
                f"weight_map names {name!r}, not a file name in the index's folder",
                file=path,
                pointer=f"/weight_map/{key}",
            )
    return set(weight_map.values())


def _plain_file_name(name: str) -> bool:
    """Whether `name` is one file name, with no path separator, parent or NUL."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


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
            base = os.path.dirname(path)
            files = sorted({os.path.join(base, f) for f in _index_files(path)})
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
            size = os.fstat(raw.fileno()).st_size
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                name = info.filename[: -len(".npy")]
                where = f"{path}:{info.filename}"
                _check_member(info, size, where)
                with zf.open(info) as f:
                    shape, fortran, dtype, header = _npy_header(f, where)
                _check_member_data(info, header, shape, dtype, where)
                kind = "string" if dtype.kind == "U" else "array"
                ref = (info, fortran, header)
                self.leaves.append(Leaf(_split(name, sep), kind, shape, dtype, ref))

    def _file(self, leaf: Leaf) -> tuple[str, int]:
        info, _, header = leaf.ref
        where = f"{self.path}:{info.filename}"
        if info.compress_type == zipfile.ZIP_STORED:
            with _open(self.path) as f:
                f.seek(info.header_offset)
                local = f.read(30)
                size = os.fstat(f.fileno()).st_size
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise FormatError("no zip local file header at its offset", file=where)
            n, m = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + n + m
            if start + info.compress_size > size:  # the .npy header + data: `_check_member_data`
                raise FormatError("zip member runs past the end of the file", file=where, got=size)
            return self.path, start + header
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ockpt-npz-")
        out = os.path.join(self._tmp.name, f"{len(os.listdir(self._tmp.name))}.npy")
        with (
            _open(self.path) as raw,
            zipfile.ZipFile(raw) as zf,
            zf.open(info) as src,
            open(out, "wb") as dst,
        ):
            left = info.file_size  # checked: the .npy header + data, within limits
            while left:
                block = src.read(min(left, 1 << 20))
                if not block:
                    raise FormatError("zip member ends before its declared size", file=where)
                dst.write(block)
                left -= len(block)
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


#: DEFLATE's largest expansion (258 bytes from one code of about 2 bits: 1032 to 1).
_DEFLATE_RATIO = 1032


def _check_member(info: zipfile.ZipInfo, size: int, where: str) -> None:
    """Refuse a zip member whose declared sizes the archive cannot back: stored or deflated
    only, its compressed bytes within the file's `size`, and (deflated) no more decompressed
    bytes than DEFLATE can make of them, so extraction is bounded by the file's size."""
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise UnsupportedError(f"{where}: zip compression method {info.compress_type}")
    if info.header_offset + info.compress_size > size:
        raise FormatError(
            "zip member declares more bytes than the file holds",
            file=where,
            expected=f"<= {size - info.header_offset}",
            got=info.compress_size,
        )
    stored = info.compress_type == zipfile.ZIP_STORED
    most = info.compress_size if stored else _DEFLATE_RATIO * info.compress_size + 1024
    if info.file_size > most:
        raise FormatError(
            "zip member declares more bytes than its stored bytes can hold",
            file=where,
            expected=f"<= {most}",
            got=info.file_size,
        )


def _check_member_data(
    info: zipfile.ZipInfo, header: int, shape: tuple[int, ...], dtype: np.dtype, where: str
) -> None:
    """The .npy header's shape and dtype must describe exactly the member's bytes, within the
    array size limit: a stored member is then never mapped past its own end."""
    nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if nbytes > limits_in_force().max_array_bytes:
        raise FormatError(
            "array larger than the array size limit",
            file=where,
            expected=f"<= {limits_in_force().max_array_bytes}",
            got=nbytes,
        )
    if header + nbytes != info.file_size:
        raise FormatError(
            "the .npy header's shape and dtype do not match the member's size",
            file=where,
            expected=header + nbytes,
            got=info.file_size,
        )


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


def suffix_format(path: str) -> str | None:
    """The format a path's suffix names, or None."""
    lower = str(path).rstrip("/").lower()
    if lower.endswith((".safetensors", INDEX_SUFFIX)):
        return "safetensors"
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith((".pt", ".pth", ".bin")):
        return "pt"
    return None


def guess_format(path: str) -> str:
    """The format a path names: by suffix, else by contents; default "orbax"."""
    text = str(path).rstrip("/")
    by_suffix = suffix_format(text)
    if by_suffix is not None:
        return by_suffix
    if os.path.isdir(text):
        index = [n for n in os.listdir(text) if n.endswith(INDEX_SUFFIX)]
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
    store = as_store(path)
    if store.os_path() is None:  # memory-mapped: a file the operating system names
        raise UnsupportedError(f"{path}: {fmt} files are read from local paths only")
    path = store.display
    if not os.path.exists(path):
        raise NotACheckpointError(f"{path}: no such file or directory")
    if fmt == "safetensors":
        if os.path.isdir(path):
            index = sorted(n for n in os.listdir(path) if n.endswith(INDEX_SUFFIX))
            plain = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
            if len(index) == 1:
                path = os.path.join(path, index[0])
            elif len(plain) == 1 and not index:
                path = os.path.join(path, plain[0])
            else:
                raise ValueError(f"{path}: expected one *{INDEX_SUFFIX} or one .safetensors file")
        return SafetensorsSource(path, sep=sep)
    if fmt == "npz":
        return NpzSource(path, sep=sep)
    raise UnsupportedError(f"{path}: reading {fmt} files is not supported (only writing)")
