"""The byte codecs every layer of the format shares: CRC-32C and zstd frames.

OCDBT envelopes, zarr codecs and shard indexes, and the writer's encoders all use these; each
passes its own rule and error class, so a fault is reported in the words of its layer. No I/O.
"""

from __future__ import annotations

import threading
from typing import Any

import google_crc32c
import zstandard

from .errors import OcdbtError

__all__ = ["crc32c", "zstd_compress", "zstd_decompress", "zstd_frame_size"]

_ZSTD_UNKNOWN = zstandard.CONTENTSIZE_UNKNOWN
_ZSTD_ERROR = zstandard.CONTENTSIZE_ERROR


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) of `data`, as an unsigned 32-bit integer."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


_compressors = threading.local()  # each thread's zstd compressors, by (level, threads)


def zstd_compress(data: Any, *, level: int, threads: int = 0) -> bytes:
    """One zstd frame of the bytes `data` at `level`, its content size recorded; `threads`
    more than 0 compresses on that many threads (one frame still). Each thread keeps one
    compressor per setting."""
    cache = _compressors.__dict__.setdefault("by_settings", {})
    compressor = cache.get((level, threads))
    if compressor is None:
        compressor = cache[level, threads] = zstandard.ZstdCompressor(level=level, threads=threads)
    return compressor.compress(data)


#: compressed bytes the streaming decoder takes at a time: a zstd block of >= 4 bytes decodes
#: to <= 128 KiB, so one step decodes to at most 16 MiB, however hostile the frame
_ZSTD_STEP = 1 << 9


def zstd_decompress(
    data: bytes | memoryview,
    *,
    max_output_size: int,
    file: object = None,
    pointer: str | None = None,
    rule: str = "OCDBT-006",
    error: type[Exception] = OcdbtError,
) -> bytes:
    """Decode exactly one complete zstd frame, refusing more than `max_output_size` bytes.

    The frame may omit its content size. One whole frame is decoded in one call into one buffer
    of its content size, or else of the most its blocks can give, within the bound (only what
    is decoded is touched); a frame that call refuses (one decoding past the bound) is decoded
    as a stream, in bounded steps whose output is counted and dropped, stopping at the bound (a
    frame the steps accept is decoded again, into one buffer of the size they found). No frame
    makes this hold more than the bound plus a few steps, nor a second copy of its output.
    Trailing bytes after the frame, a truncated frame, a content size above the bound, a stream
    decoding past it, or any decoding error raise `error` (an `OcdbtError` by default) with
    `rule`.
    """

    def fail(message: str, **kw) -> Exception:
        return error(message, rule=rule, file=file, pointer=pointer, **kw)

    data = bytes(data)
    try:
        params = zstandard.get_frame_parameters(data)
    except zstandard.ZstdError as exc:
        raise fail(f"not a zstd frame: {exc}") from None
    size = params.content_size
    known = size not in (_ZSTD_UNKNOWN, _ZSTD_ERROR)
    if known and size > max_output_size:
        raise fail(
            "zstd content size exceeds the limit", expected=f"<= {max_output_size}", got=size
        )
    dctx = zstandard.ZstdDecompressor()
    walk = _zstd_walk(data)
    # python-zstandard's one-shot call returns an empty frame's b"" without decoding it (nor
    # checking its checksum): empty frames take the stream below, which does
    if walk is not None and walk[0] == len(data) and not (known and size == 0):
        # One frame, nothing after it (the one-shot decoder ignores trailing bytes): one call
        # that releases the GIL (parallel chunk reads need it), into one buffer of the
        # declared size or, without one, of the most the blocks can give within the bound
        # (only the bytes decoded are touched). A frame it refuses, one decoding past that
        # buffer included, takes the stream below, which names the fault.
        try:
            out = dctx.decompress(
                data, max_output_size=size if known else min(walk[1], max_output_size)
            )
        except zstandard.ZstdError as exc:
            if known:
                raise fail(f"corrupt zstd frame: {exc}") from None
        else:
            if known and len(out) != size:
                raise fail("zstd frame decodes to a size other than its content size")
            return out
    # A frame the walk refuses, or one the one-shot decoder refused: in bounded steps.
    dobj = dctx.decompressobj()
    produced = 0
    pos = 0
    try:
        while pos < len(data) and not dobj.eof:
            piece = dobj.decompress(data[pos : pos + _ZSTD_STEP])
            pos += _ZSTD_STEP
            produced += len(piece)
            if produced > max_output_size:
                raise fail(
                    "zstd stream decodes to more than the limit",
                    expected=f"<= {max_output_size}",
                    got=f"> {max_output_size}",
                )
            del piece
    except zstandard.ZstdError as exc:
        raise fail(f"corrupt zstd frame: {exc}") from None
    if not dobj.eof:
        raise fail("truncated zstd frame")
    trailing = len(dobj.unused_data) + max(len(data) - pos, 0)
    if trailing:
        raise fail("bytes after the zstd frame", expected=0, got=trailing)
    if known and produced != size:
        raise fail("zstd frame decodes to a size other than its content size")
    del dobj
    if not produced:
        return b""
    try:  # a known output size: one buffer of exactly that size
        out = dctx.decompress(data, max_output_size=produced)
    except zstandard.ZstdError as exc:
        raise fail(f"corrupt zstd frame: {exc}") from None
    if len(out) != produced:
        raise fail("zstd frame decodes to a size other than the stream gave")
    return out


def zstd_frame_size(data: bytes) -> int | None:
    """The length of the zstd frame at the start of `data` (RFC 8878 section 3.1.1), from its
    header and block headers alone; None when they do not form a frame within `data` (or hold
    more blocks than `_ZSTD_WALK_BLOCKS`)."""
    walk = _zstd_walk(data)
    return None if walk is None else walk[0]


_ZSTD_BLOCK_MAX = 1 << 17  # no block decodes to more (RFC 8878 section 3.1.1.2.3)
#: the most blocks the header walk reads: a frame of the largest chunk a reader takes (16 GiB,
#: limits §2) in full blocks has 131,072; a frame of more (millions of empty blocks) is left to
#: the streaming decoder, which reads them at C speed, not one Python step a block
_ZSTD_WALK_BLOCKS = 1 << 18


def _zstd_walk(data: bytes) -> tuple[int, int] | None:
    """(length, most bytes it can decode to) of the zstd frame at the start of `data`, from
    its header and block headers alone; None when they do not form a frame within `data` or
    it has more than `_ZSTD_WALK_BLOCKS` blocks."""
    n = len(data)
    if n < 6 or data[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = data[4]
    fcs_flag, single, checksum, did_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
    if fhd & 0x08:  # reserved bit
        return None
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    pos += (1 if single else 0, 2, 4, 8)[fcs_flag]
    most = 0
    for _ in range(_ZSTD_WALK_BLOCKS):
        if pos + 3 > n:
            return None
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            return None
        pos += 3 + (1 if kind == 1 else size)
        most += _ZSTD_BLOCK_MAX if kind == 2 else size  # raw and RLE blocks: `size` bytes
        if last:
            break
    else:
        return None  # more blocks than any frame a reader takes
    pos += 4 if checksum else 0
    return (pos, most) if pos <= n else None
