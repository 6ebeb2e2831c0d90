"""Streamed checks of chunks too large to hold in memory (spec/validation.md, VAL-010).

A deep validator decodes every chunk. One whose decoded size is more than the memory the
process may use (LIMIT-006) is checked here instead: its stored bytes are read in pieces and
every bytes -> bytes codec is undone as a stream (zstd fed a KiB at a time, gzip with a
bounded output, crc32c compared at the end), the decoded bytes counted against the chunk's
size and dropped. Each stage is a reader with ``read(n)``, chained from the stored bytes
outward in; no stage holds more than a piece (a KiB of zstd decodes to at most 32 MiB,
whatever its ratio), so a 4 GiB chunk is checked in tens of MiB.
"""

from __future__ import annotations

import io
import itertools
import math
import zlib
from typing import Any, Protocol

import google_crc32c
import zstandard

from ..limits import current as limits_in_force
from ..store import ByteRange
from ._common import fail, intermediate_bound
from .array import missing_chunk
from .codecs import BytesCodec, CodecPipeline, Crc32cCodec, GzipCodec, ZstdCodec

__all__ = ["check_chunk", "check_shard", "streamable"]

#: Bytes read from a source, or asked of a stage, at a time.
STEP = 1 << 20
#: Bytes of a zstd frame given to its decoder at a time (`_Zstd`).
FEED = 1 << 10
#: The largest zstd window the stream decoder takes (zstd's default limit, 2^27); a frame
#: with a larger one is decoded in memory only (whole, it needs no window).
WINDOW_MAX = 1 << 27
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class NotStreamable(Exception):
    """A chunk this module cannot check as a stream (no fault of the chunk's)."""


class Reader(Protocol):
    def read(self, n: int) -> bytes: ...


def streamable(pipeline: CodecPipeline) -> bool:
    """True when every codec of `pipeline` can be undone here (no transpose needed: any
    order of the same bytes has the same size and checksums)."""
    return isinstance(pipeline.array_to_bytes, BytesCodec) and all(
        isinstance(c, (ZstdCodec, GzipCodec, Crc32cCodec)) for c in pipeline.bytes_to_bytes
    )


def check_chunk(
    pipeline: CodecPipeline, source: Reader, nbytes: int, *, file: object, pointer: str | None
) -> bool:
    """Decode the stored chunk `source` as a stream and check it gives exactly `nbytes`
    bytes; raise the codec's rule (ZARR-003, ZARR-016) at the first fault. False when it
    cannot be checked so (`NotStreamable`)."""
    try:
        _check_chunk(pipeline, source, nbytes, file=file, pointer=pointer)
    except NotStreamable:
        return False
    return True


def _check_chunk(
    pipeline: CodecPipeline, source: Reader, nbytes: int, *, file: object, pointer: str | None
) -> None:
    reader = source
    codecs = list(reversed(pipeline.bytes_to_bytes))
    for i, codec in enumerate(codecs):
        bound = nbytes if i == len(codecs) - 1 else intermediate_bound(nbytes)
        reader = _stage(codec, reader, bound, file=file, pointer=pointer)
    total = 0
    while piece := reader.read(STEP):
        total += len(piece)
        if total > nbytes:
            break
    if total != nbytes:
        raise fail(
            "chunk bytes do not match the chunk shape and element size",
            "ZARR-003",
            file=file,
            pointer=pointer,
            expected=nbytes,
            got=total if total <= nbytes else f"> {nbytes}",
        )


def check_shard(meta: Any, shard: Any, *, file: object, missing: str) -> bool:
    """Check every inner chunk of the zarr v3 shard `shard` (a `ByteRange`, or bytes) as a
    stream, one at a time; False when its inner codecs cannot be streamed."""
    sharding = meta.sharding
    inner = tuple(sharding.chunk_shape)
    if not streamable(sharding.codecs):
        return False
    index = sharding.decode_index(shard, tuple(meta.chunk_shape), file=file, pointer="shard index")
    nbytes = math.prod(inner) * meta.numpy_dtype.itemsize
    for sub in itertools.product(*(range(n) for n in sharding.grid(tuple(meta.chunk_shape)))):
        pointer = f"inner chunk {list(sub)}"
        entry = index.get(sub)
        if entry is None:
            if missing == "error":
                raise missing_chunk(file, f"{pointer} of the shard")
            continue
        offset, stored = entry
        if isinstance(shard, ByteRange):
            source: Reader = shard.part(offset, stored)
        else:
            source = io.BytesIO(shard[offset : offset + stored])
        if not check_chunk(sharding.codecs, source, nbytes, file=file, pointer=pointer):
            return False
    return True


def _stage(codec: Any, upstream: Reader, bound: int, *, file: object, pointer: str | None):
    if isinstance(codec, ZstdCodec):
        return _Zstd(upstream, bound, file=file, pointer=pointer)
    if isinstance(codec, GzipCodec):
        return _Gzip(upstream, codec, bound, file=file, pointer=pointer)
    return _Crc32c(upstream, file=file, pointer=pointer)


class _Stage:
    """What every stage shares: its upstream, where it reads, and its bounded output."""

    name = ""
    rule = "ZARR-003"

    def __init__(self, upstream: Reader, bound: int, *, file: object, pointer: str | None):
        self.upstream = upstream
        self.bound = bound
        self.file = file
        self.pointer = pointer
        self.produced = 0
        self.done = False
        self.out = bytearray()

    def fail(self, message: str, **kw: Any) -> Exception:
        """This stage's error, made once the stages outside it have read all their input:
        their faults (a checksum) come first, as when the chunk is decoded in memory."""
        if isinstance(self.upstream, _Stage):
            while self.upstream.read(STEP):
                pass
        return fail(message, self.rule, file=self.file, pointer=self.pointer, **kw)

    def exact(self, n: int, what: str) -> bytes:
        """`n` bytes of upstream, or the error of a truncated stream."""
        data = b""
        while len(data) < n:
            more = self.upstream.read(n - len(data))
            if not more:
                raise self.fail(f"truncated {self.name} stream ({what})")
            data += more
        return data

    def read(self, n: int) -> bytes:
        while len(self.out) < n and not self.done:
            self.out += self.more(n - len(self.out))
        piece = bytes(self.out[:n])
        del self.out[:n]
        self.produced += len(piece)
        if self.produced > self.bound:
            raise self.fail(
                f"{self.name} stream decodes to more than the chunk size",
                expected=f"<= {self.bound}",
                got=f"> {self.bound}",
            )
        return piece

    def more(self, n: int) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def no_trailing(self) -> None:
        if self.upstream.read(1):
            raise self.fail(f"bytes after the {self.name} stream")


class _Zstd(_Stage):
    """One zstd frame, decoded by zstd's own stream decoder fed at most `FEED` bytes at a
    time: a byte of a frame decodes to at most 32 KiB (an RLE block: 4 bytes, 128 KiB), so
    no feed gives more than 32 MiB, whatever the frame's ratio, and a frame of any number of
    blocks costs one call per KiB."""

    name = "zstd"

    def __init__(self, upstream: Reader, bound: int, *, file: object, pointer: str | None):
        super().__init__(upstream, bound, file=file, pointer=pointer)
        self.dobj = zstandard.ZstdDecompressor().decompressobj()
        self.started = False
        self.pending = memoryview(b"")
        self.size: int | None = None

    def feed(self, data: bytes | memoryview) -> bytes:
        try:
            return self.dobj.decompress(data)
        except zstandard.ZstdError as e:
            raise self.fail(f"corrupt zstd frame: {e}") from None

    def header(self) -> bytes:
        head = self.exact(5, "frame header")
        if head[:4] != _ZSTD_MAGIC:
            raise self.fail("not a zstd frame")
        fhd = head[4]
        fcs, single, did = fhd >> 6, (fhd >> 5) & 1, fhd & 3
        if fhd & 0x08:
            raise self.fail("not a zstd frame: reserved bit set")
        rest = (0 if single else 1) + (0, 1, 2, 4)[did] + (1 if single else 0, 2, 4, 8)[fcs]
        head += self.exact(rest, "frame header")
        try:
            params = zstandard.get_frame_parameters(head)
        except zstandard.ZstdError as e:
            raise self.fail(f"corrupt zstd frame: {e}") from None
        size = params.content_size
        if size not in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
            if size > self.bound:
                raise self.fail(
                    "zstd content size exceeds the chunk size", expected=self.bound, got=size
                )
            self.size = size
        if params.window_size > WINDOW_MAX:
            # a window decoding in memory does without, streaming needs: not checked here
            raise NotStreamable(f"a zstd window of {params.window_size} bytes")
        return self.feed(head)

    def more(self, n: int) -> bytes:
        out = b""
        if not self.started:
            self.started = True
            out = self.header()
        while not out and not self.done:
            if not self.pending:
                self.pending = memoryview(self.upstream.read(STEP))
                if not self.pending:
                    raise self.fail("truncated zstd frame")
            piece, self.pending = self.pending[:FEED], self.pending[FEED:]
            out = self.feed(piece)
            if self.dobj.eof:
                if self.dobj.unused_data or self.pending:
                    raise self.fail("bytes after the zstd frame")
                self.no_trailing()
                self.done = True
                if self.size is not None and self.produced + len(self.out) + len(out) != self.size:
                    raise self.fail("zstd frame decodes to a size other than its content size")
        return out


class _Gzip(_Stage):
    """A gzip or zlib stream (the codec's `wbits`), its output bounded at each call."""

    def __init__(
        self, upstream: Reader, codec: GzipCodec, bound: int, *, file: object, pointer: str | None
    ):
        super().__init__(upstream, bound, file=file, pointer=pointer)
        self.name = codec.name
        self.dobj = zlib.decompressobj(codec.wbits)
        self.pending = b""

    def more(self, n: int) -> bytes:
        if not self.pending:
            self.pending = self.upstream.read(STEP)
            if not self.pending:
                raise self.fail(f"truncated or trailing {self.name} stream")
        try:
            out = self.dobj.decompress(self.pending, max(n, STEP))
        except zlib.error as e:
            raise self.fail(f"corrupt {self.name} stream: {e}") from None
        self.pending = self.dobj.unconsumed_tail
        if self.dobj.eof:
            if self.dobj.unused_data or self.pending:
                raise self.fail(f"truncated or trailing {self.name} stream")
            self.no_trailing()
            self.done = True
        return out


class _Crc32c(_Stage):
    """The bytes before a trailing CRC-32C, passed on as they come; the checksum is compared
    when the stream ends (ZARR-016)."""

    name = "crc32c"
    rule = "ZARR-016"

    def __init__(self, upstream: Reader, *, file: object, pointer: str | None):
        super().__init__(upstream, limits_in_force().max_chunk_bytes, file=file, pointer=pointer)
        self.tail = b""  # the last 4 bytes seen: the checksum, if the stream ends there
        self.crc = 0

    def more(self, n: int) -> bytes:
        data = self.tail + self.upstream.read(max(n, 4))
        if len(data) - len(self.tail) == 0:  # the stream ended: `tail` is the checksum
            if len(self.tail) < 4:
                raise self.fail("too short for a crc32c checksum", got=len(self.tail))
            stored = int.from_bytes(self.tail, "little")
            if stored != self.crc:
                raise self.fail(
                    "crc32c mismatch", expected=f"0x{self.crc:08x}", got=f"0x{stored:08x}"
                )
            self.done = True
            return b""
        body, self.tail = data[:-4], data[-4:]
        self.crc = google_crc32c.extend(self.crc, body)
        return body
