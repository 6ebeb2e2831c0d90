"""The zarr codecs Orbax's arrays use (spec/arrays.md), both directions: each codec decodes
what is stored (bounded, hostile input refused) and encodes what the writer stores.

Three kinds, named by what they take and give (each codec's `kind`): array -> array
(`TransposeCodec`), array -> bytes (`BytesCodec`, `ShardingCodec` in `shard_index`), bytes ->
bytes (`ZstdCodec`, `GzipCodec`, `Crc32cCodec`). `CodecPipeline` is one chain of them, built
from a zarr v3 ``codecs`` list (`parse_codecs`) or a zarr v2 ``compressor``
(`from_v2_compressor`). Every decoder bounds its output by the size the chunk must have;
`CodecPipeline.encode` runs the chain the other way.

Codecs are looked up by the name their JSON gives, in `CODECS` (zarr v3 ``codecs`` entries)
and `V2_COMPRESSORS` (zarr v2 ``compressor`` ids): `register_codec` adds one. This module
registers its own; `shard_index` registers ``sharding_indexed`` (it parses the inner codecs
with `parse_codecs`: the lookup goes one way, and this module never imports it).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ..bytecodecs import crc32c, zstd_compress, zstd_decompress
from ..errors import ZarrFormatError
from ..limits import check_allocation
from ._common import fail, intermediate_bound

__all__ = [
    "BytesCodec",
    "TransposeCodec",
    "ZstdCodec",
    "GzipCodec",
    "Crc32cCodec",
    "CodecPipeline",
    "CODECS",
    "V2_COMPRESSORS",
    "register_codec",
    "parse_codec",
    "parse_codecs",
    "from_v2_compressor",
]

Kind = Literal["array_to_array", "array_to_bytes", "bytes_to_bytes"]

#: A zarr v3 codec entry's parser: ``parse(entry, rank=, dtype=, file=, pointer=)`` gives the
#: codec (its `kind` says where it may stand in a pipeline) or raises ZARR-013 / ZARR-014.
CodecParser = Callable[..., Any]

#: The zarr v3 codecs this decoder knows, by their JSON ``name``.
CODECS: dict[str, CodecParser] = {}

#: The zarr v2 compressors this decoder knows, by their JSON ``id``: ``make(compressor,
#: file=, pointer=)`` gives the bytes -> bytes codec.
V2_COMPRESSORS: dict[str, Callable[..., Any]] = {}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def register_codec(name: str) -> Callable[[CodecParser], CodecParser]:
    """Register the parser of the zarr v3 codec named `name` in `CODECS`."""

    def add(parse: CodecParser) -> CodecParser:
        CODECS[name] = parse
        return parse

    return add


# ------------------------------------------------------------------------------ bytes -> bytes


@dataclass(frozen=True)
class ZstdCodec:
    level: int = 0
    checksum: bool = False
    name = "zstd"
    kind: ClassVar[Kind] = "bytes_to_bytes"

    def encode(self, data: Any, *, threads: int = 0) -> bytes:
        """One zstd frame of `data` (its content size recorded), on `threads` more threads."""
        return zstd_compress(data, level=self.level, threads=threads)

    def decode(self, data: bytes, *, max_size: int, file: object, pointer: str | None) -> bytes:
        return zstd_decompress(
            data,
            max_output_size=max_size,
            file=file,
            pointer=pointer,
            rule="ZARR-003",
            error=ZarrFormatError,
        )


@dataclass(frozen=True)
class GzipCodec:
    level: int = 0
    wbits: int = 31  # 31: gzip header; 15: zlib header
    name = "gzip"
    kind: ClassVar[Kind] = "bytes_to_bytes"

    def encode(self, data: Any) -> bytes:
        c = zlib.compressobj(self.level if self.level > 0 else -1, zlib.DEFLATED, self.wbits)
        return c.compress(data) + c.flush()

    def decode(self, data: bytes, *, max_size: int, file: object, pointer: str | None) -> bytes:
        d = zlib.decompressobj(self.wbits)
        try:
            out = d.decompress(data, max_size + 1)
        except zlib.error as e:
            raise fail(
                f"corrupt {self.name} stream: {e}", "ZARR-003", file=file, pointer=pointer
            ) from None
        if len(out) > max_size:
            raise fail(
                f"{self.name} stream decodes to more than the chunk size",
                "ZARR-003",
                file=file,
                pointer=pointer,
            )
        if not d.eof or d.unused_data:
            raise fail(
                f"truncated or trailing {self.name} stream", "ZARR-003", file=file, pointer=pointer
            )
        return out


@dataclass(frozen=True)
class Crc32cCodec:
    name = "crc32c"
    kind: ClassVar[Kind] = "bytes_to_bytes"

    def encode(self, data: Any) -> bytes:
        """`data` followed by its CRC-32C, little-endian."""
        body = bytes(data)
        return body + crc32c(body).to_bytes(4, "little")

    def decode(self, data: bytes, *, max_size: int, file: object, pointer: str | None) -> bytes:
        if len(data) < 4:
            raise fail(
                "too short for a crc32c checksum",
                "ZARR-016",
                file=file,
                pointer=pointer,
                got=len(data),
            )
        body, stored = data[:-4], int.from_bytes(data[-4:], "little")
        actual = crc32c(body)
        if actual != stored:
            raise fail(
                "crc32c mismatch",
                "ZARR-016",
                file=file,
                pointer=pointer,
                expected=f"0x{actual:08x}",
                got=f"0x{stored:08x}",
            )
        return body


# ------------------------------------------------------------------------------ array -> bytes


@dataclass(frozen=True)
class BytesCodec:
    endian: str | None = "little"  # None: only for 1-byte element types
    name = "bytes"
    kind: ClassVar[Kind] = "array_to_bytes"

    def encode(self, array: np.ndarray) -> memoryview:
        """The elements of `array` in C order and this codec's byte order, as bytes (a view,
        no copy, of a C-contiguous array already in that order)."""
        dtype = array.dtype
        if dtype.itemsize > 1:
            dtype = dtype.newbyteorder("<" if self.endian == "little" else ">")
        data = np.ascontiguousarray(array, dtype=dtype)
        return memoryview(data.reshape(-1).view(np.uint8))

    def decode(
        self, data: bytes, shape: tuple[int, ...], dtype: np.dtype, *, file: object, pointer
    ) -> np.ndarray:
        expected = math.prod(shape) * dtype.itemsize
        if len(data) != expected:
            raise fail(
                "chunk bytes do not match the chunk shape and element size",
                "ZARR-003",
                file=file,
                pointer=pointer,
                expected=expected,
                got=len(data),
            )
        if dtype.itemsize > 1:
            dtype = dtype.newbyteorder("<" if self.endian == "little" else ">")
        return np.frombuffer(data, dtype=dtype).reshape(shape)


# ------------------------------------------------------------------------------ array -> array


@dataclass(frozen=True)
class TransposeCodec:
    order: tuple[int, ...]
    name = "transpose"
    kind: ClassVar[Kind] = "array_to_array"

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[i] for i in self.order)

    def encode(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, self.order)

    def decode(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, np.argsort(self.order))


# ------------------------------------------------------------------------------ pipeline


@dataclass(frozen=True)
class CodecPipeline:
    """array -> array codecs, one array -> bytes codec, bytes -> bytes codecs (encode order)."""

    array_to_array: tuple[TransposeCodec, ...]
    array_to_bytes: Any  # BytesCodec or shard_index.ShardingCodec
    bytes_to_bytes: tuple[Any, ...]

    def encode(self, array: np.ndarray) -> Any:
        """One chunk (not a shard) as stored: the codecs in order (array -> array, array ->
        bytes, bytes -> bytes); a byte view of `array` when no codec changes its bytes."""
        for c in self.array_to_array:
            array = c.encode(array)
        data = self.array_to_bytes.encode(array)
        for c in self.bytes_to_bytes:
            data = c.encode(data)
        return data

    def decode_bytes(self, data: bytes, final_size: int, *, file: object, pointer) -> bytes:
        """Undo the bytes -> bytes codecs; `final_size` bounds the innermost output. A chunk
        too large for the memory left is refused before it is decoded (LIMIT-006)."""
        n = len(self.bytes_to_bytes)
        largest = final_size if n <= 1 else intermediate_bound(final_size)
        check_allocation(largest, what="the decoded chunk", file=file)
        for i, codec in enumerate(reversed(self.bytes_to_bytes)):
            bound = final_size if i == n - 1 else intermediate_bound(final_size)
            data = codec.decode(data, max_size=bound, file=file, pointer=pointer)
        return data

    def decode(
        self, data: bytes, shape: tuple[int, ...], dtype: np.dtype, *, file: object, pointer
    ) -> np.ndarray:
        """Decode one chunk (not a shard) to an array of `shape`."""
        enc_shape = shape
        for c in self.array_to_array:
            enc_shape = c.encoded_shape(enc_shape)
        raw = self.decode_bytes(data, math.prod(shape) * dtype.itemsize, file=file, pointer=pointer)
        array = self.array_to_bytes.decode(raw, enc_shape, dtype, file=file, pointer=pointer)
        for c in reversed(self.array_to_array):
            array = c.decode(array)
        return array


def _config(entry: dict, keys: set[str], *, file, pointer) -> dict:
    conf = entry.get("configuration", {})
    if not isinstance(conf, dict):
        raise fail(
            "codec configuration must be an object",
            "ZARR-013",
            file=file,
            pointer=pointer + "/configuration",
        )
    extra = set(conf) - keys
    if extra:
        raise fail(
            f"unknown codec configuration keys {sorted(extra)}",
            "ZARR-013",
            file=file,
            pointer=pointer + "/configuration",
        )
    return conf


def _int(conf: dict, key: str, default: int, *, file, pointer, rule: str = "ZARR-013") -> int:
    """`conf[key]` (`default` when absent), a 32-bit integer; `pointer` locates `conf`."""
    v = conf.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 31) <= v < 1 << 31:
        raise fail(
            f"{key} must be a 32-bit integer", rule, file=file, pointer=f"{pointer}/{key}", got=v
        )
    return v


def parse_codec(entry: object, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    """One codec of a zarr v3 ``codecs`` list, parsed by the parser `CODECS` holds for its
    name."""
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise fail(
            "a codec must be an object with a name",
            "ZARR-013",
            file=file,
            pointer=pointer,
            got=entry,
        )
    extra = set(entry) - {"name", "configuration", "must_understand"}
    if extra:
        raise fail(f"unknown codec keys {sorted(extra)}", "ZARR-013", file=file, pointer=pointer)
    name = entry["name"]
    parse = CODECS.get(name)
    if parse is None:
        raise fail(
            f"codec {name!r} is not one the spec allows",
            "ZARR-013",
            file=file,
            pointer=pointer,
            expected=_listed(list(CODECS)),
            got=name,
        )
    return parse(entry, rank=rank, dtype=dtype, file=file, pointer=pointer)


@register_codec("bytes")
def _parse_bytes(entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    conf = _config(entry, {"endian"}, file=file, pointer=pointer)
    endian = conf.get("endian")
    if endian not in (None, "little", "big"):
        raise fail(
            "bytes endian must be 'little' or 'big'",
            "ZARR-013",
            file=file,
            pointer=pointer,
            got=endian,
        )
    if endian is None and dtype.itemsize > 1:
        raise fail(
            "bytes codec needs endian for multi-byte element types",
            "ZARR-013",
            file=file,
            pointer=pointer,
        )
    return BytesCodec(endian)


@register_codec("transpose")
def _parse_transpose(entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    conf = _config(entry, {"order"}, file=file, pointer=pointer)
    order = conf.get("order")
    if (
        not isinstance(order, list)
        or not all(type(i) is int for i in order)  # not bool, float or str
        or sorted(order) != list(range(rank))
    ):
        raise fail(
            "transpose order must be a permutation of the dimensions",
            "ZARR-013",
            file=file,
            pointer=pointer,
            got=order,
        )
    return TransposeCodec(tuple(order))


@register_codec("zstd")
def _parse_zstd(entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    conf = _config(entry, {"level", "checksum"}, file=file, pointer=pointer)
    checksum = conf.get("checksum", False)
    if not isinstance(checksum, bool):
        raise fail(
            "zstd checksum must be a boolean",
            "ZARR-013",
            file=file,
            pointer=pointer,
            got=checksum,
        )
    return ZstdCodec(
        _int(conf, "level", 0, file=file, pointer=f"{pointer}/configuration"), checksum
    )


@register_codec("gzip")
def _parse_gzip(entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    conf = _config(entry, {"level"}, file=file, pointer=pointer)
    return GzipCodec(_int(conf, "level", 0, file=file, pointer=f"{pointer}/configuration"))


@register_codec("crc32c")
def _parse_crc32c(entry: dict, *, rank: int, dtype: np.dtype, file: object, pointer: str):
    _config(entry, set(), file=file, pointer=pointer)
    return Crc32cCodec()


def parse_codecs(
    codecs: object, *, rank: int, dtype: np.dtype, file: object, pointer: str = "/codecs"
) -> CodecPipeline:
    """A zarr v3 ``codecs`` list: array->array*, exactly one array->bytes, bytes->bytes*."""
    if not isinstance(codecs, list) or not codecs or len(codecs) > 16:
        raise fail(
            "codecs must be a non-empty list", "ZARR-013", file=file, pointer=pointer, got=codecs
        )
    a2a: list = []
    a2b = None
    b2b: list = []
    for i, entry in enumerate(codecs):
        where = f"{pointer}/{i}"
        codec = parse_codec(entry, rank=rank, dtype=dtype, file=file, pointer=where)
        if codec.kind == "array_to_array":
            if a2b is not None:
                raise fail(
                    "array->array codec after the array->bytes codec",
                    "ZARR-013",
                    file=file,
                    pointer=where,
                )
            a2a.append(codec)
        elif codec.kind == "array_to_bytes":
            if a2b is not None:
                raise fail("more than one array->bytes codec", "ZARR-013", file=file, pointer=where)
            a2b = codec
        else:
            if a2b is None:
                raise fail(
                    "bytes->bytes codec before the array->bytes codec",
                    "ZARR-013",
                    file=file,
                    pointer=where,
                )
            b2b.append(codec)
    if a2b is None:
        raise fail("codecs lack an array->bytes codec", "ZARR-013", file=file, pointer=pointer)
    return CodecPipeline(tuple(a2a), a2b, tuple(b2b))


def from_v2_compressor(
    compressor: object,
    dtype: np.dtype,
    *,
    order: str = "C",
    rank: int = 0,
    file: object = None,
    pointer: str = "/compressor",
) -> CodecPipeline:
    """The pipeline of a zarr v2 array: C or F order raw bytes, then the compressor
    (F order is a transpose that reverses the dimensions)."""
    endian = None if dtype.itemsize == 1 else ("big" if dtype.byteorder == ">" else "little")
    a2b = BytesCodec(endian)
    if compressor is None:
        b2b: tuple = ()
    elif isinstance(compressor, dict) and isinstance(compressor.get("id"), str):
        cid = compressor["id"]
        make = V2_COMPRESSORS.get(cid)
        if make is not None:
            b2b = (make(compressor, file=file, pointer=pointer),)
        else:
            raise fail(
                f"compressor {cid!r} is not one the spec allows",
                "ZARR-004",
                file=file,
                pointer=pointer,
                expected=_listed(["null", *V2_COMPRESSORS]),
                got=cid,
            )
    else:
        raise fail(
            "compressor must be null or an object with an id",
            "ZARR-004",
            file=file,
            pointer=pointer,
            got=compressor,
        )
    a2a: tuple = (
        (TransposeCodec(tuple(reversed(range(rank)))),) if order == "F" and rank > 1 else ()
    )
    return CodecPipeline(a2a, a2b, b2b)


def _v2_zstd(compressor: dict, *, file: object, pointer: str) -> ZstdCodec:
    return ZstdCodec(_int(compressor, "level", 0, file=file, pointer=pointer, rule="ZARR-004"))


def _v2_deflate(wbits: int) -> Callable[..., GzipCodec]:
    def make(compressor: dict, *, file: object, pointer: str) -> GzipCodec:
        level = _int(compressor, "level", 0, file=file, pointer=pointer, rule="ZARR-004")
        return GzipCodec(level, wbits)

    return make


V2_COMPRESSORS.update(zstd=_v2_zstd, gzip=_v2_deflate(31), zlib=_v2_deflate(15))
