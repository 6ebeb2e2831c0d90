"""Decoder for the legacy msgpack ``checkpoint`` file of an item directory.

Orbax wrote this file (named ``checkpoint``) up to release 0.5.15. It is one msgpack value that
mirrors the saved tree:

* maps have string keys, in the order the writer flattened the tree (sorted dict keys);
  tuples and lists are both written as msgpack arrays, named tuples as maps;
* a leaf whose value lives in the array store (OCDBT / zarr) is the string
  ``PLACEHOLDER://<param name>`` (older writers: ``AGGREGATED://<param name>``);
* an inline ("aggregated") leaf is a plain msgpack value (int, float, bool, str, bin, nil) or
  one of these ext types:

  ====  ==================  =====================================================
  code  meaning             payload (itself one msgpack value)
  ====  ==================  =====================================================
  1     numpy array         ``[shape: [uint, ...], dtype name: str, data: bin]``
  2     Python complex      ``[real: float, imag: float]``
  3     numpy scalar        as code 1, with ``shape == []``
  4     tuple               ``[item, ...]`` (items decoded like any other value)
  ====  ==================  =====================================================

  ``data`` is the array in C order, little-endian, ``prod(shape) * itemsize`` bytes (ml_dtypes
  types such as ``int4`` take one byte per element).
* an array larger than the writer's chunk limit (2**30 bytes in Orbax) is a map
  ``{"__msgpack_chunked_array__": true, "shape": {"0": d0, "1": d1, ...},
  "chunks": {"0": <ext 1, 1-D>, "1": <ext 1, 1-D>, ...}}``: the C-order flattened array cut
  into consecutive 1-D pieces.

What Orbax 0.5.15 puts there (observed): a plain save writes a placeholder for every leaf,
including None, empty dicts and empty lists, but nil for an empty tuple. With
``SaveArgs(aggregate=True)`` tuples become arrays and named tuples maps (ext 4 is never written
by a checkpointer, though Orbax's reader accepts it), numpy scalars become ext 3, and a Python
complex, a numpy bool scalar and an ml_dtypes scalar (e.g. bfloat16) become nil: their value
is lost. Ext 2 is read by Orbax but was not seen written. Integer dict keys are written as
strings.

`decode_checkpoint` is pure (bytes in, tree out). It uses the ``msgpack`` package for the
container syntax only and checks every value it turns into a Python object; every failure is a
`MsgpackError` naming the file, the key path inside the tree (a JSON pointer such as
``/b/f/0``) or the byte offset, and the rule broken (``MSGPACK-*`` ids of `ockpt.rules.RULES`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from . import dtypes
from .errors import MsgpackError, NotACheckpointError
from .limits import Limits
from .limits import current as limits_in_force
from .names import MSGPACK_FILE
from .store.files import read_file

__all__ = [
    "PLACEHOLDER_SCHEMES",
    "CHUNKED_MARKER",
    "Placeholder",
    "decode_checkpoint",
    "read_checkpoint_file",
    "to_json_view",
    "placeholders",
]


_INT64_MAX = 2**63 - 1
PLACEHOLDER_SCHEMES = ("PLACEHOLDER", "AGGREGATED")
CHUNKED_MARKER = "__msgpack_chunked_array__"

_EXT_NDARRAY = 1
_EXT_COMPLEX = 2
_EXT_NPSCALAR = 3
_EXT_TUPLE = 4


@dataclass(frozen=True)
class Placeholder:
    """A leaf whose value is stored as an array outside the msgpack file.

    ``scheme`` is ``"PLACEHOLDER"`` or ``"AGGREGATED"`` (the text before ``://``);
    ``param_name`` is the text after it, the name of the array in the array store.
    """

    param_name: str
    scheme: str

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.param_name}"


# --------------------------------------------------------------------------------------------
# container layer: msgpack syntax -> raw values (_Pairs for maps, _Ext for ext values)
# --------------------------------------------------------------------------------------------


class _Pairs(list):
    """A msgpack map as its list of (key, value) pairs (keeps duplicates and any key type)."""

    __slots__ = ()


class _Ext:
    """An ext value as found: its type code (-128..127) and payload bytes."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data


class _TooManyValues(Exception):
    """Raised by a `_Ctx` hook inside the unpacker; `_unpack` names the file and rule."""


class _Ctx:
    """Per-call state: the file name for errors and the limits in force (``max_msgpack_bytes``,
    ``max_depth``: nesting of maps, arrays and tuples, the top-level value at depth 0, and
    ``max_ndim``: dimensions of one array)."""

    __slots__ = ("file", "limits", "values")

    def __init__(self, file: str) -> None:
        self.file = file
        self.limits: Limits = limits_in_force()
        self.values = 1  # values and map keys built so far (the top-level value counts one)

    def count(self, n: int) -> None:
        """`n` more values built; past the limits' `max_json_values` the file is refused
        (MSGPACK-001): a decode builds a Python object for each."""
        self.values += n
        if self.values > self.limits.max_json_values:
            raise _TooManyValues

    def counted_list(self, items: list) -> list:
        self.count(len(items))
        return items

    def counted_pairs(self, pairs: list) -> _Pairs:
        self.count(2 * len(pairs))
        return _Pairs(pairs)

    def error(self, rule: str, message: str, pointer: str | None, **kw: Any) -> MsgpackError:
        return MsgpackError(message, rule=rule, file=self.file, pointer=pointer, **kw)


def _pointer(path: tuple[str, ...]) -> str:
    """JSON pointer of a key path (``~`` -> ``~0``, ``/`` -> ``~1``); the root is ``""``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _unpack(ctx: _Ctx, data: bytes, path: tuple[str, ...] | None, *, what: str) -> Any:
    """One msgpack value from ``data``, with maps as `_Pairs` and ext values as `_Ext`.

    ``path`` is None for the file itself (errors then carry byte offsets and the container
    rules MSGPACK-002..005); for an ext payload it is the key path of that ext value and
    malformed payloads break MSGPACK-009.
    """
    n = len(data)
    most = min(n, ctx.limits.max_json_values)  # a longer array or map is refused unbuilt
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=False,
            list_hook=ctx.counted_list,
            object_pairs_hook=ctx.counted_pairs,
            ext_hook=_Ext,
            timestamp=0,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=most,
            max_map_len=most,
            max_ext_len=n,
        )
    except _TooManyValues:
        raise _too_many_values(ctx, path, what) from None
    except msgpack.ExtraData as e:
        offset = n - len(e.extra)
        if path is None:
            raise ctx.error(
                "MSGPACK-004",
                "extra bytes after the top-level msgpack value",
                f"@{offset}",
                expected=f"{offset} bytes",
                got=f"{n} bytes",
            ) from None
        raise ctx.error(
            "MSGPACK-009",
            f"{what}: extra bytes after the payload value",
            _pointer(path),
            expected=f"{offset} bytes",
            got=f"{n} bytes",
        ) from None
    except msgpack.StackError:
        raise ctx.error(
            "MSGPACK-005",
            f"{what}: msgpack nesting exceeds the unpacker's stack",
            None if path is None else _pointer(path),
            expected=f"depth <= {ctx.limits.max_depth}",
        ) from None
    except msgpack.OutOfData:
        return _raise_truncated(ctx, n, path, what)
    except RecursionError:  # the pure-Python msgpack fallback recurses on nesting
        raise ctx.error(
            "MSGPACK-005",
            f"{what}: nesting too deep",
            None if path is None else _pointer(path),
            expected=f"depth <= {ctx.limits.max_depth}",
        ) from None
    except UnicodeDecodeError as e:
        rule = "MSGPACK-002" if path is None else "MSGPACK-009"
        raise ctx.error(
            rule,
            f"{what}: a string is not valid UTF-8 ({e.reason})",
            None if path is None else _pointer(path),
        ) from None
    except ValueError as e:
        # "exceeds max_*_len": a length header larger than the whole input (the limits are set
        # to len(data)), so the value cannot be complete either; or an array or map longer
        # than the values a reader builds (`most`, when that is less)
        if most < n and ("exceeds max_array_len" in str(e) or "exceeds max_map_len" in str(e)):
            raise _too_many_values(ctx, path, what) from None
        if "incomplete" in str(e) or "exceeds max_" in str(e):
            return _raise_truncated(ctx, n, path, what)
        rule = "MSGPACK-002" if path is None else "MSGPACK-009"
        raise ctx.error(
            rule,
            f"{what}: not well-formed msgpack ({type(e).__name__}: {e})",
            None if path is None else _pointer(path),
        ) from None
    except Exception as e:  # anything else msgpack may raise on hostile bytes
        rule = "MSGPACK-002" if path is None else "MSGPACK-009"
        raise ctx.error(
            rule,
            f"{what}: not well-formed msgpack ({type(e).__name__}: {e})",
            None if path is None else _pointer(path),
        ) from None


def _too_many_values(ctx: _Ctx, path: tuple[str, ...] | None, what: str) -> MsgpackError:
    return ctx.error(
        "MSGPACK-001",
        f"{what}: more values than a reader builds for one file",
        None if path is None else _pointer(path),
        expected=f"<= {ctx.limits.max_json_values} values and map keys",
    )


def _raise_truncated(ctx: _Ctx, n: int, path: tuple[str, ...] | None, what: str) -> Any:
    if path is None:
        raise ctx.error(
            "MSGPACK-003",
            "data ends inside the msgpack value",
            f"@{n}",
            expected="more bytes",
            got=f"{n} bytes",
        )
    raise ctx.error(
        "MSGPACK-009",
        f"{what}: payload ends inside its msgpack value",
        _pointer(path),
        expected="more bytes",
        got=f"{n} bytes",
    )


# --------------------------------------------------------------------------------------------
# value layer: raw values -> tree
# --------------------------------------------------------------------------------------------


def _decode_value(ctx: _Ctx, raw: Any, path: tuple[str, ...], depth: int) -> Any:
    t = type(raw)
    if t is str:
        for scheme in PLACEHOLDER_SCHEMES:
            prefix = scheme + "://"
            if raw.startswith(prefix):
                return Placeholder(param_name=raw[len(prefix) :], scheme=scheme)
        return raw
    if raw is None or t in (bool, int, float, bytes):
        return raw
    if t is _Pairs:
        _check_depth(ctx, path, depth)
        return _decode_map(ctx, raw, path, depth)
    if t is list:
        _check_depth(ctx, path, depth)
        return [_decode_value(ctx, v, path + (str(i),), depth + 1) for i, v in enumerate(raw)]
    if t is _Ext:
        return _decode_ext(ctx, raw, path, depth)
    if t is msgpack.Timestamp:
        raise ctx.error(
            "MSGPACK-008", "unknown ext type code", _pointer(path), expected=[1, 2, 3, 4], got=-1
        )
    # unreachable with the unpackb options above; kept so nothing unexpected slips through
    raise ctx.error("MSGPACK-002", f"unexpected msgpack value of type {t.__name__}", _pointer(path))


def _check_depth(ctx: _Ctx, path: tuple[str, ...], depth: int) -> None:
    if depth >= ctx.limits.max_depth:
        raise ctx.error(
            "MSGPACK-005",
            "containers nest too deep",
            _pointer(path),
            expected=f"depth < {ctx.limits.max_depth}",
            got=depth,
        )


def _map_items(ctx: _Ctx, pairs: _Pairs, path: tuple[str, ...]) -> dict[str, Any]:
    """The raw (key -> value) dict of a map, after the key rules (MSGPACK-006/007)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if type(key) is not str:
            raise ctx.error(
                "MSGPACK-006",
                "map key is not a string",
                _pointer(path),
                expected="str",
                got=_describe(key),
            )
        if key in out:
            raise ctx.error(
                "MSGPACK-007", f"map key {key!r} appears twice", _pointer(path + (key,))
            )
        out[key] = value
    return out


def _describe(raw: Any) -> str:
    if type(raw) is _Pairs:
        return "map"
    if type(raw) is list:
        return "array"
    if type(raw) is _Ext:
        return f"ext {raw.code}"
    text = repr(raw)
    return f"{type(raw).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _decode_map(ctx: _Ctx, pairs: _Pairs, path: tuple[str, ...], depth: int) -> Any:
    items = _map_items(ctx, pairs, path)
    if CHUNKED_MARKER in items:
        return _decode_chunked(ctx, items, path)
    return {k: _decode_value(ctx, v, path + (k,), depth + 1) for k, v in items.items()}


def _decode_ext(ctx: _Ctx, ext: _Ext, path: tuple[str, ...], depth: int) -> Any:
    code = ext.code
    if code == _EXT_NDARRAY:
        return _decode_array(ctx, ext.data, path, scalar=False)
    if code == _EXT_NPSCALAR:
        return _decode_array(ctx, ext.data, path, scalar=True)
    if code == _EXT_COMPLEX:
        return _decode_complex(ctx, ext.data, path)
    if code == _EXT_TUPLE:
        _check_depth(ctx, path, depth)
        items = _unpack(ctx, ext.data, path, what="tuple (ext 4) payload")
        if type(items) is not list:
            raise ctx.error(
                "MSGPACK-009",
                "tuple (ext 4) payload must be a msgpack array",
                _pointer(path),
                expected="array",
                got=_describe(items),
            )
        return tuple(
            _decode_value(ctx, v, path + (str(i),), depth + 1) for i, v in enumerate(items)
        )
    raise ctx.error(
        "MSGPACK-008", "unknown ext type code", _pointer(path), expected=[1, 2, 3, 4], got=code
    )


def _decode_complex(ctx: _Ctx, data: bytes, path: tuple[str, ...]) -> complex:
    parts = _unpack(ctx, data, path, what="complex (ext 2) payload")
    if type(parts) is not list or len(parts) != 2 or any(type(p) is not float for p in parts):
        raise ctx.error(
            "MSGPACK-009",
            "complex (ext 2) payload must be [real, imag] floats",
            _pointer(path),
            expected="[float, float]",
            got=_describe(parts),
        )
    return complex(parts[0], parts[1])


def _resolve_dtype(ctx: _Ctx, name: Any, path: tuple[str, ...], what: str) -> np.dtype:
    if type(name) is not str:
        raise ctx.error(
            "MSGPACK-009",
            f"{what}: dtype name must be a string",
            _pointer(path),
            expected="str",
            got=_describe(name),
        )
    # Names are looked up in the dtype table before any dtype is built, so ``np.dtype`` never
    # sees a string from the file ('O', structured and string dtypes are refused).
    if name in dtypes.SUPPORTED:
        found = dtypes.SUPPORTED[name]
        return found if found.isbuiltin == 2 else found.newbyteorder("<")
    if name in dtypes.EXTENSION_NAMES:
        raise ctx.error(
            "MSGPACK-010",
            f"{what}: dtype {name!r} needs a newer ml_dtypes package than the one installed",
            _pointer(path),
            got=name,
        )
    shown = name if len(name) <= 40 else name[:40] + "..."
    raise ctx.error(
        "MSGPACK-010",
        f"{what}: dtype name is not allowed",
        _pointer(path),
        expected="a numpy or ml_dtypes name such as 'float32' or 'bfloat16'",
        got=shown,
    )


def _decode_array(ctx: _Ctx, data: bytes, path: tuple[str, ...], *, scalar: bool) -> Any:
    what = "numpy scalar (ext 3)" if scalar else "ndarray (ext 1)"
    fields = _unpack(ctx, data, path, what=f"{what} payload")
    if type(fields) is not list or len(fields) != 3:
        got = f"array of {len(fields)}" if type(fields) is list else _describe(fields)
        raise ctx.error(
            "MSGPACK-009",
            f"{what} payload must be [shape, dtype name, data]",
            _pointer(path),
            expected="array of 3",
            got=got,
        )
    shape_raw, name, buf = fields
    if type(shape_raw) is not list:
        raise ctx.error(
            "MSGPACK-009",
            f"{what}: shape must be a msgpack array",
            _pointer(path),
            expected="array",
            got=_describe(shape_raw),
        )
    if type(buf) is not bytes:
        raise ctx.error(
            "MSGPACK-009",
            f"{what}: data must be msgpack bin",
            _pointer(path),
            expected="bin",
            got=_describe(buf),
        )
    dtype = _resolve_dtype(ctx, name, path, what)
    shape = _check_shape(ctx, shape_raw, dtype.itemsize, path, what)
    if scalar and shape:
        raise ctx.error(
            "MSGPACK-013",
            "numpy scalar (ext 3) must have shape []",
            _pointer(path),
            expected=[],
            got=list(shape),
        )
    array = _array_from_bytes(ctx, buf, dtype, shape, path, what)
    return array[()] if scalar else array


def _check_shape(
    ctx: _Ctx, shape: list, itemsize: int, path: tuple[str, ...], what: str
) -> tuple[int, ...]:
    if len(shape) > ctx.limits.max_ndim:
        raise ctx.error(
            "MSGPACK-011",
            f"{what}: too many dimensions",
            _pointer(path),
            expected=f"<= {ctx.limits.max_ndim}",
            got=len(shape),
        )
    for d in shape:
        if type(d) is not int or d < 0:
            raise ctx.error(
                "MSGPACK-011",
                f"{what}: shape entries must be non-negative ints",
                _pointer(path),
                expected="uint",
                got=_describe(d),
            )
    # Python ints cannot overflow: compute the nominal size exactly, then bound it by what numpy
    # can address (numpy refuses shapes whose non-zero extents overflow intp, even when empty).
    nominal = itemsize
    for d in shape:
        nominal *= max(d, 1)
        if nominal > _INT64_MAX:
            raise ctx.error(
                "MSGPACK-011",
                f"{what}: shape too large",
                _pointer(path),
                expected=f"size * itemsize <= {_INT64_MAX}",
                got=list(shape),
            )
    return tuple(shape)


def _array_from_bytes(
    ctx: _Ctx, buf: bytes, dtype: np.dtype, shape: tuple[int, ...], path: tuple[str, ...], what: str
) -> np.ndarray:
    expected = math.prod(shape) * dtype.itemsize
    if expected != len(buf):
        raise ctx.error(
            "MSGPACK-012",
            f"{what}: data size does not match shape and dtype {list(shape)} {dtype.name}",
            _pointer(path),
            expected=expected,
            got=len(buf),
        )
    if dtype.kind == "b":
        raw = np.frombuffer(buf, dtype=np.uint8)
        if raw.size and int(raw.max()) > 1:
            bad = int(np.argmax(raw > 1))
            raise ctx.error(
                "MSGPACK-016",
                f"{what}: bool data byte {bad} is not 0 or 1",
                _pointer(path),
                expected="0 or 1",
                got=int(raw[bad]),
            )
    try:
        if dtype.itemsize > 1 and dtype.byteorder not in "<|" and sys.byteorder != "little":
            # ml_dtypes types are native-order only: swap through an unsigned view
            # (reachable only on big-endian hosts).
            unsigned = np.dtype(f"<u{dtype.itemsize}")
            array = np.frombuffer(buf, dtype=unsigned).astype(unsigned.newbyteorder("="))
            array = array.view(dtype).reshape(shape)
        else:
            array = np.frombuffer(buf, dtype=dtype).reshape(shape)
    except (ValueError, TypeError, MemoryError) as e:  # pragma: no cover - guarded above
        raise ctx.error(
            "MSGPACK-011",
            f"{what}: numpy cannot represent this array ({e})",
            _pointer(path),
            got=list(shape),
        ) from None
    array.flags.writeable = False
    return array


def _index_keys(ctx: _Ctx, raw: Any, path: tuple[str, ...], field: str) -> list[Any]:
    """Values of a ``{"0": v0, "1": v1, ...}`` map in index order (chunked arrays)."""
    if type(raw) is not _Pairs:
        raise ctx.error(
            "MSGPACK-014",
            f"chunked array {field!r} must be a map",
            _pointer(path + (field,)),
            expected="map",
            got=_describe(raw),
        )
    items = _map_items(ctx, raw, path + (field,))
    expected = [str(i) for i in range(len(items))]
    if sorted(items, key=lambda k: (len(k), k)) != expected:
        shown = list(items)[:8]
        raise ctx.error(
            "MSGPACK-014",
            f"chunked array {field!r} keys must be '0'..'n-1'",
            _pointer(path + (field,)),
            expected=expected[:8],
            got=shown,
        )
    return [items[k] for k in expected]


def _decode_chunked(ctx: _Ctx, items: Mapping[str, Any], path: tuple[str, ...]) -> np.ndarray:
    keys = set(items)
    wanted = {CHUNKED_MARKER, "shape", "chunks"}
    if keys != wanted:
        raise ctx.error(
            "MSGPACK-014",
            "chunked array map has wrong keys",
            _pointer(path),
            expected=sorted(wanted),
            got=sorted(keys)[:8],
        )
    if items[CHUNKED_MARKER] is not True:
        raise ctx.error(
            "MSGPACK-014",
            "chunked array marker must be true",
            _pointer(path + (CHUNKED_MARKER,)),
            expected=True,
            got=_describe(items[CHUNKED_MARKER]),
        )
    what = "chunked array"
    shape_raw = _index_keys(ctx, items["shape"], path, "shape")
    chunks_raw = _index_keys(ctx, items["chunks"], path, "chunks")
    if not chunks_raw:
        raise ctx.error(
            "MSGPACK-015",
            "chunked array has no chunks",
            _pointer(path + ("chunks",)),
            expected=">= 1 chunk",
            got=0,
        )
    pieces: list[np.ndarray] = []
    dtype: np.dtype | None = None
    for i, raw in enumerate(chunks_raw):
        cpath = path + ("chunks", str(i))
        if type(raw) is not _Ext or raw.code != _EXT_NDARRAY:
            raise ctx.error(
                "MSGPACK-015",
                "a chunk must be an ndarray (ext 1)",
                _pointer(cpath),
                expected="ext 1",
                got=_describe(raw),
            )
        piece = _decode_array(ctx, raw.data, cpath, scalar=False)
        if piece.ndim != 1 or piece.size == 0:
            raise ctx.error(
                "MSGPACK-015",
                "a chunk must be a non-empty 1-D array",
                _pointer(cpath),
                expected="shape [n], n >= 1",
                got=list(piece.shape),
            )
        if dtype is None:
            dtype = piece.dtype
        elif piece.dtype != dtype:
            raise ctx.error(
                "MSGPACK-015",
                "chunks must share one dtype",
                _pointer(cpath),
                expected=dtype.name,
                got=piece.dtype.name,
            )
        pieces.append(piece)
    assert dtype is not None
    shape = _check_shape(ctx, shape_raw, dtype.itemsize, path + ("shape",), what)
    total = sum(p.size for p in pieces)
    if total != math.prod(shape):
        raise ctx.error(
            "MSGPACK-015",
            f"chunks hold {total} elements, shape {list(shape)} needs {math.prod(shape)}",
            _pointer(path + ("chunks",)),
            expected=math.prod(shape),
            got=total,
        )
    array = np.concatenate(pieces).reshape(shape)
    array.flags.writeable = False
    return array


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def decode_checkpoint(
    data: bytes, *, file: str = MSGPACK_FILE, max_bytes: int | None = None
) -> object:
    """Decode the bytes of a legacy msgpack ``checkpoint`` file into a tree.

    The tree is made of: ``dict`` (str keys, file order), ``list``, ``tuple`` (ext 4),
    ``numpy.ndarray`` (ext 1 and chunked arrays; read-only, little-endian, dtype from numpy or
    ml_dtypes), numpy scalars (ext 3), ``complex`` (ext 2), ``int``, ``float``, ``bool``,
    ``None``, ``str``, ``bytes`` and `Placeholder` (for ``PLACEHOLDER://`` / ``AGGREGATED://``
    strings; an inline string value with one of those prefixes cannot be told apart).

    Raises `MsgpackError` (and only that, for any bytes) when the input breaks one of the
    ``MSGPACK-*`` rules; ``data`` over ``max_bytes`` (default: the limits' ``max_msgpack_bytes``)
    is refused before decoding (MSGPACK-001).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
    ctx = _Ctx(str(file))
    if isinstance(data, memoryview) and (data.ndim != 1 or data.itemsize != 1):
        data = data.cast("B") if data.c_contiguous else data.tobytes()
    size = len(data)
    if max_bytes is None:
        max_bytes = ctx.limits.max_msgpack_bytes
    if size > max_bytes:
        raise ctx.error(
            "MSGPACK-001",
            "checkpoint file is larger than the size limit",
            None,
            expected=f"<= {max_bytes} bytes",
            got=size,
        )
    raw = _unpack(ctx, data, None, what="checkpoint")
    return _decode_value(ctx, raw, (), 0)


def read_checkpoint_file(path: str | os.PathLike, *, max_bytes: int | None = None) -> object:
    """Read and decode a ``checkpoint`` file, refusing it by size before reading.

    Raises `NotACheckpointError` when the file is missing, `FormatError` (PATH-005) when it is
    no regular file, and `MsgpackError` for its size (MSGPACK-001) and as `decode_checkpoint`
    does.
    """
    name = os.fspath(path)
    if max_bytes is None:
        max_bytes = limits_in_force().max_msgpack_bytes
    try:
        data = read_file(name, limit=max_bytes, rule="MSGPACK-001", error=MsgpackError)
    except OSError as e:
        raise NotACheckpointError(
            f"cannot read the msgpack checkpoint file ({e.strerror})", rule="LOAD-050", file=name
        ) from None
    return decode_checkpoint(data, file=name, max_bytes=max_bytes)


_VIEW_TAGS = frozenset(
    {
        "__ndarray__",
        "__npscalar__",
        "__placeholder__",
        "__tuple__",
        "__complex__",
        "__float__",
        "__bytes__",
        "__dict__",
    }
)


def _json_float(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def to_json_view(tree: object) -> object:
    """A JSON-able view of a decoded tree (no array data), for schema checks and display.

    The view maps each node as follows:

    * ``dict`` -> JSON object with the same keys and order; a dict whose only key is one of the
      tags below is wrapped as ``{"__dict__": {...}}`` so the view stays unambiguous;
    * ``list`` -> JSON array;  ``tuple`` -> ``{"__tuple__": [...]}``;
    * ``numpy.ndarray`` -> ``{"__ndarray__": {"dtype": name, "shape": [int, ...]}}``;
    * numpy scalar -> ``{"__npscalar__": {"dtype": name}}``;
    * `Placeholder` -> ``{"__placeholder__": {"scheme": ..., "param_name": ...}}``;
    * ``bytes`` -> ``{"__bytes__": {"length": n}}``;
    * ``complex`` -> ``{"__complex__": [real, imag]}``;
    * ``float`` -> itself, or ``{"__float__": "nan" | "inf" | "-inf"}`` when not finite
      (parts of a complex use those strings directly);
    * ``str``, ``int``, ``bool``, ``None`` -> themselves.
    """
    return _view(tree, 0)


def _view(x: object, depth: int) -> object:
    if depth > limits_in_force().max_depth + 2:
        raise ValueError("tree nests too deep for to_json_view")
    if x is None or isinstance(x, (bool, int, str)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, float) and not isinstance(x, np.generic):
        f = _json_float(x)
        return f if isinstance(f, float) else {"__float__": f}
    if isinstance(x, Placeholder):
        return {"__placeholder__": {"scheme": x.scheme, "param_name": x.param_name}}
    if isinstance(x, np.ndarray):
        return {"__ndarray__": {"dtype": x.dtype.name, "shape": [int(d) for d in x.shape]}}
    if isinstance(x, np.generic):
        return {"__npscalar__": {"dtype": x.dtype.name}}
    if isinstance(x, complex):
        return {"__complex__": [_json_float(x.real), _json_float(x.imag)]}
    if isinstance(x, bytes):
        return {"__bytes__": {"length": len(x)}}
    if isinstance(x, dict):
        out = {str(k): _view(v, depth + 1) for k, v in x.items()}
        if len(out) == 1 and next(iter(out)) in _VIEW_TAGS:
            return {"__dict__": out}
        return out
    if isinstance(x, tuple):
        return {"__tuple__": [_view(v, depth + 1) for v in x]}
    if isinstance(x, list):
        return [_view(v, depth + 1) for v in x]
    raise TypeError(f"to_json_view: not a decoded checkpoint value: {type(x).__name__}")


def _walk(x: object, path: tuple[str, ...], depth: int) -> Iterator[tuple[tuple[str, ...], Any]]:
    if depth > limits_in_force().max_depth + 2:
        raise ValueError("tree nests too deep")
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _walk(v, path + (str(k),), depth + 1)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _walk(v, path + (str(i),), depth + 1)
    else:
        yield path, x


def placeholders(tree: object, *, file: str = MSGPACK_FILE) -> dict[str, Placeholder]:
    """The placeholders of a decoded tree, param name -> `Placeholder`, in tree order.

    Raises `MsgpackError` (MSGPACK-017) when two leaves name the same param name.
    """
    found: dict[str, Placeholder] = {}
    where: dict[str, tuple[str, ...]] = {}
    for path, leaf in _walk(tree, (), 0):
        if isinstance(leaf, Placeholder):
            if leaf.param_name in found:
                raise MsgpackError(
                    f"param name {leaf.param_name!r} is also used at "
                    f"{_pointer(where[leaf.param_name])!r}",
                    rule="MSGPACK-017",
                    file=str(file),
                    pointer=_pointer(path),
                )
            found[leaf.param_name] = leaf
            where[leaf.param_name] = path
    return found
