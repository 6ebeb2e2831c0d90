"""`ockpt.ocdbt.format`: the byte layouts of OCDBT (varints, the envelope, manifests, version tree
and B+tree nodes, fixed-width fields, zstd), grouped by the function they guard. Each builds or
damages real OCDBT bytes and asserts what a reader sees: the value decoded, or the rule, file
and offset of the error (the mutants each kills: tests/mutation/RESULTS.md).
"""

from __future__ import annotations

import random
import struct

import pytest
import zstandard

from ockpt import bytecodecs
from ockpt.errors import OcdbtError, ZarrFormatError
from ockpt.limits import LIMITS
from ockpt.ocdbt import format as fmt
from tests.support.errors import assert_error, error_fields

# --------------------------------------------------------------------------------------------
# decode_varint


def test_decode_varint_reads_from_pos_and_stops_at_end():
    data = b"\xff\x96\x01\x05"  # 0x96 0x01 = 150 at position 1
    assert fmt.decode_varint(data, 1) == (150, 3)
    assert fmt.decode_varint(data, 3, end=4) == (5, 4)
    with pytest.raises(OcdbtError) as info:
        fmt.decode_varint(data, 1, end=2, file="m.bin")  # 0x96 continues past `end`
    assert error_fields(info) == {
        "rule": "OCDBT-007",
        "file": "m.bin",
        "message": "truncated varint value",
        "pointer": "@1",
    }


@pytest.mark.parametrize("value", [-1, 2**64])
def test_encode_varint_refuses_what_64_bits_cannot_hold(value):
    """Kills `encode_varint` 9 (no message); id at 88f069a."""
    with pytest.raises(ValueError) as info:
        fmt.encode_varint(value)
    assert str(info.value) == f"varint out of range: {value}"


# --------------------------------------------------------------------------------------------
# zstd_frame_size


@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_frame_size_is_the_length_of_the_first_frame(checksum):
    frame = zstandard.ZstdCompressor(write_checksum=checksum).compress(b"abc" * 1000)
    assert len(frame) < 1000  # a compressed block: it may decode to far more than its length
    assert bytecodecs.zstd_frame_size(frame) == len(frame)
    assert bytecodecs.zstd_frame_size(frame + b"\0" * 7) == len(frame)
    assert bytecodecs.zstd_frame_size(frame[:-1]) is None
    assert bytecodecs.zstd_frame_size(b"not a zstd frame") is None


# --------------------------------------------------------------------------------------------
# decode_version_tree_node

FILE = fmt.DataFileId(b"", b"d/x")


def _version_leaf(
    *, arity_log2: int = 4, generations: tuple[int, ...] = (1, 2), compression: int = 0
) -> bytes:
    """A version tree leaf node holding `generations`, each rooted in d/x."""
    stats = fmt.BtreeNodeStatistics(0, 10, 1)
    entries = tuple(
        fmt.BtreeGenerationReference(
            fmt.BtreeNodeReference(fmt.IndirectDataReference(FILE, 16 * g, 16), stats), g, 1, g
        )
        for g in generations
    )
    node = fmt.VersionTreeNode(0, arity_log2, entries)
    return fmt.encode_version_tree_node(node, compression=compression)


def test_a_version_node_read_with_no_transitive_path_names_its_files_as_written():
    node = fmt.decode_version_tree_node(_version_leaf())
    assert [e.root.location.file_id for e in node.entries] == [FILE, FILE]
    assert node.data_file_table == (FILE,)


def test_version_node_errors_point_at_file_offsets_from_the_node_offset():
    data = bytearray(_version_leaf())
    data[-1] ^= 1  # the stored CRC-32C
    with pytest.raises(OcdbtError) as info:
        fmt.decode_version_tree_node(bytes(data), file="d/x", offset=100)
    assert_error(info, rule="OCDBT-005", file="d/x", pointer=f"@{100 + len(data) - 4}")
    data[0] ^= 1  # the magic: reported at the node's first byte, 0 when no offset is given
    with pytest.raises(OcdbtError) as info:
        fmt.decode_version_tree_node(bytes(data), file="d/x")
    assert_error(info, rule="OCDBT-001", file="d/x", pointer="@0")


def error_of(fn) -> dict:
    """What the OcdbtError `fn()` raises says: its file, offset, message, expected/got and rule."""
    with pytest.raises(OcdbtError) as info:
        fn()
    return error_fields(info.value)


V = fmt.VERSION_NODE_MAGIC


@pytest.mark.parametrize(
    "body, compression, limit, message",
    [
        (
            b"",
            0,
            None,
            {
                "rule": "OCDBT-007",
                "message": "truncated: version_tree_arity_log2 needs 1 bytes",
                "pointer": "@114",
                "expected": 1,
                "got": 0,
            },
        ),
        (
            b"\4",
            0,
            None,
            {
                "rule": "OCDBT-007",
                "message": "truncated: height needs 1 bytes",
                "pointer": "@115",
                "expected": 1,
                "got": 0,
            },
        ),
        (
            b"\0\0",
            0,
            None,
            {
                "rule": "OCDBT-011",
                "message": "version_tree_arity_log2 out of range",
                "pointer": "@114",
                "expected": "1..16",
                "got": 0,
            },
        ),
        (
            b"\4\17",
            0,
            None,
            {
                "rule": "OCDBT-032",
                "message": "version tree node height too large for its arity",
                "pointer": "@115",
                "got": 15,
            },
        ),
        (
            b"\4\17",
            1,
            None,
            {
                "rule": "OCDBT-032",
                "message": "version tree node height too large for its arity",
                "pointer": "@100+body[1]",
                "got": 15,
            },
        ),
        (
            b"\4\17" * 10,
            0,
            19,
            {
                "rule": "OCDBT-006",
                "message": "version tree node body exceeds the decoded size limit",
                "pointer": "@114",
                "expected": "<= 19",
                "got": 20,
            },
        ),
    ],
)
def test_version_node_body_errors_name_file_offset_and_field(body, compression, limit, message):
    data = fmt.encode_envelope(V, body, compression=compression)
    kw = {} if limit is None else {"max_decoded_bytes": limit}
    got = error_of(lambda: fmt.decode_version_tree_node(data, file="d/x", offset=100, **kw))
    assert got == {"file": "d/x", **message}


@pytest.mark.parametrize("arity_log2, generations", [(1, (1,)), (4, (1, 2)), (16, (1, 2))])
def test_version_leaf_nodes_of_each_arity_decode_whole(arity_log2, generations):
    data = _version_leaf(arity_log2=arity_log2, generations=generations)
    node = fmt.decode_version_tree_node(data)
    assert (node.height, node.version_tree_arity_log2) == (0, arity_log2)
    assert [e.generation_number for e in node.entries] == list(generations)
    assert [e.root.location.offset for e in node.entries] == [16 * g for g in generations]


@pytest.mark.parametrize("height, generations", [(1, (16, 32)), (14, (2**60,))])
def test_interior_version_nodes_decode_whole(height, generations):
    """Height 14 of arity 4 is the highest a node may have: (14 + 1) x 4 < 64."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    entries = tuple(fmt.VersionNodeReference(loc, g, height - 1, 16, g + 3) for g in generations)
    node = fmt.VersionTreeNode(height, 4, entries)
    got = fmt.decode_version_tree_node(fmt.encode_version_tree_node(node, compression=0))
    assert got == node
    assert (got.height, got.version_tree_arity_log2, got.data_file_table) == (height, 4, (FILE,))
    assert got.entries[0].location == loc


@pytest.mark.parametrize(
    "height, message",
    [
        (
            0,
            {
                "rule": "OCDBT-031",
                "message": "a version tree leaf node must reference at least one version",
                "pointer": "@117",
                "got": 0,
            },
        ),
        (
            1,
            {
                "rule": "OCDBT-031",
                "message": "an interior version node must have children",
                "pointer": "@117",
                "got": 0,
            },
        ),
    ],
)
def test_a_version_node_with_no_entries_is_named_by_kind(height, message):
    data = fmt.encode_envelope(V, bytes([4, height, 0, 0]))  # no files, no entries
    got = error_of(lambda: fmt.decode_version_tree_node(data, file="d/x", offset=100))
    assert got == {"file": "d/x", **message}


def test_bytes_after_a_version_node_body_are_counted_and_named():
    body = fmt.decode_envelope(_version_leaf(), magic=V).body
    data = fmt.encode_envelope(V, body + b"\0\0")
    got = error_of(lambda: fmt.decode_version_tree_node(data, file="d/x"))
    assert got == {
        "rule": "OCDBT-007",
        "file": "d/x",
        "message": "2 unexpected bytes after the version tree node",
        "pointer": f"@{14 + len(body)}",
        "expected": 0,
        "got": 2,
    }


# --------------------------------------------------------------------------------------------
# _Cursor: varint, count, need (through the decoders that use them)


@pytest.mark.parametrize(
    "data, result",
    [
        (b"\7" + b"\xff" * 9 + b"\1", (2**64 - 1, 11)),  # the largest value, in 10 bytes
        (b"\7" + b"\x80" * 9 + b"\0", (0, 11)),  # 10 bytes, the most a varint may take
        (
            b"\7" + b"\xff" * 9 + b"\2",
            {
                "rule": "OCDBT-008",
                "message": "varint value exceeds 2**64-1",
                "pointer": "@1",
                "got": 27670116110564327423,
            },
        ),
        (
            b"\7" + b"\x80" * 10 + b"\0",
            {
                "rule": "OCDBT-008",
                "message": "varint value longer than 10 bytes",
                "pointer": "@1",
            },
        ),
    ],
)
def test_varints_take_at_most_ten_bytes_and_64_bits(data, result):
    if isinstance(result, tuple):
        assert fmt.decode_varint(data, 1, file="f") == result
    else:
        assert error_of(lambda: fmt.decode_varint(data, 1, file="f")) == {"file": "f", **result}


B = fmt.BTREE_NODE_MAGIC


def _btree(body: bytes, **kw) -> fmt.BtreeNode:
    """`body` decoded as an uncompressed B+tree node at offset 100 of data file d/n."""
    return fmt.decode_btree_node(fmt.encode_envelope(B, body), file="d/n", offset=100, **kw)


@pytest.mark.parametrize(
    "body, result",
    [
        # height 0, no files, 1 entry: key suffix length 0, value length 0, kind 0 (inline):
        # the count's 3 bytes per entry fit exactly
        (b"\0\0\1\0\0\0", [(b"", b"")]),
        (b"\0\0\1\1k\5\0abcde", [(b"k", b"abcde")]),
        (
            b"\0\0\12" + b"\0" * 5,
            {
                "rule": "OCDBT-007",
                "message": "num_entries = 10 does not fit in the 5 bytes that remain",
                "pointer": "@116",
                "got": 10,
            },
        ),
        (
            b"\0\0\1\1k\5\0abc",
            {
                "rule": "OCDBT-007",
                "message": "truncated: inline values needs 5 bytes",
                "pointer": "@121",
                "expected": 5,
                "got": 3,
            },
        ),
        (
            b"\0\0\1\1k\5",
            {
                "rule": "OCDBT-007",
                "message": "truncated: value_kind needs 1 bytes",
                "pointer": "@120",
                "expected": 1,
                "got": 0,
            },
        ),
    ],
)
def test_btree_leaf_counts_and_lengths_are_checked_against_what_remains(body, result):
    if isinstance(result, list):
        assert [(e.key, e.value) for e in _btree(body).entries] == result
    else:
        assert error_of(lambda: _btree(body)) == {"file": "d/n", **result}


def _manifest(generations: tuple[int, ...], *, arity_log2: int = 1) -> fmt.Manifest:
    stats = fmt.BtreeNodeStatistics(0, 1, 1)
    versions = tuple(
        fmt.BtreeGenerationReference(
            fmt.BtreeNodeReference(fmt.IndirectDataReference(FILE, g, 3), stats), g, 1, g
        )
        for g in generations
    )
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, arity_log2, None)
    return fmt.Manifest(config, versions, ())


def test_a_manifest_holds_up_to_two_to_the_arity_inline_versions():
    full = _manifest((1, 2))
    assert fmt.decode_manifest(fmt.encode_manifest(full)) == full
    data = fmt.encode_manifest(_manifest((1, 2, 3)))
    assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {
        "rule": "OCDBT-008",
        "file": "m",
        "message": "num_versions out of range",
        "pointer": "@43",
        "expected": "<= 2",
        "got": 3,
    }


# --------------------------------------------------------------------------------------------
# decode_envelope

M = fmt.MANIFEST_MAGIC
BODY = fmt.encode_envelope(M, b"body")  # 22 bytes: header 12, version 0, compression 0, CRC


def reseal(data: bytes) -> bytes:
    """Fix length and CRC-32C after an edit, so the decoder looks past them."""
    data = data[:4] + struct.pack("<Q", len(data)) + data[12:]
    return data[:-4] + struct.pack("<I", bytecodecs.crc32c(data[:-4]))


def env_crc(data: bytes) -> int:
    """The CRC-32C an envelope stores in its last 4 bytes."""
    return struct.unpack("<I", data[-4:])[0]


def test_an_envelope_decodes_to_its_fields():
    env = fmt.decode_envelope(BODY, magic=M, file="f", offset=100)
    assert env == fmt.Envelope(M, 22, 0, 0, b"body", bytecodecs.crc32c(BODY[:-4]))
    assert env.crc32c == env_crc(BODY)
    empty = fmt.encode_envelope(M, b"")  # 18 bytes, the shortest envelope
    assert fmt.decode_envelope(empty, magic=M) == fmt.Envelope(M, 18, 0, 0, b"", env_crc(empty))
    packed = fmt.encode_envelope(M, b"body" * 10, compression=1)
    env = fmt.decode_envelope(packed, magic=M, max_decoded_bytes=40)  # exactly the bound
    assert (env.compression, env.body, env.length) == (1, b"body" * 10, len(packed))
    assert fmt.decode_envelope(BODY, magic=M, max_decoded_bytes=4).body == b"body"


@pytest.mark.parametrize(
    "data, kw, message",
    [
        (
            fmt.encode_envelope(M, b"")[:-1],
            {},
            {
                "rule": "OCDBT-002",
                "message": "manifest too short for its envelope",
                "pointer": "@100",
                "expected": ">= 18 bytes",
                "got": 17,
            },
        ),
        (
            b"\1\2\3\4" + BODY[4:],
            {},
            {
                "rule": "OCDBT-001",
                "message": "bad manifest magic",
                "pointer": "@100",
                "expected": "0x0cdb3a2a",
                "got": "0x01020304",
            },
        ),
        (
            b"\1\2\3\4" + BODY[4:],
            {"magic": 0x01020305},
            {
                "rule": "OCDBT-001",
                "message": "bad structure magic",
                "pointer": "@100",
                "expected": "0x01020305",
                "got": "0x01020304",
            },
        ),
        (
            BODY[:4] + struct.pack("<Q", 99) + BODY[12:],
            {},
            {
                "rule": "OCDBT-002",
                "message": "manifest length field does not match its size",
                "pointer": "@104",
                "expected": 22,
                "got": 99,
            },
        ),
        (
            BODY[:-1] + bytes([BODY[-1] ^ 1]),
            {},
            {
                "rule": "OCDBT-005",
                "message": "manifest CRC-32C mismatch",
                "pointer": "@118",
                "expected": "0x17de652f",
                "got": "0x16de652f",
            },
        ),
        (
            reseal(BODY[:12] + b"\1" + BODY[13:]),
            {},
            {
                "rule": "OCDBT-003",
                "message": "unsupported manifest format version",
                "pointer": "@112",
                "expected": 0,
                "got": 1,
            },
        ),
        (
            reseal(BODY[:13] + b"\2" + BODY[14:]),
            {},
            {
                "rule": "OCDBT-004",
                "message": "unknown manifest compression_format",
                "pointer": "@113",
                "expected": "0 or 1",
                "got": 2,
            },
        ),
        (
            BODY,
            {"max_decoded_bytes": 3},
            {
                "rule": "OCDBT-006",
                "message": "manifest body exceeds the decoded size limit",
                "pointer": "@114",
                "expected": "<= 3",
                "got": 4,
            },
        ),
        (
            fmt.encode_envelope(M, b"body" * 10, compression=1),
            {"max_decoded_bytes": 39},
            {
                "rule": "OCDBT-006",
                "message": "zstd content size exceeds the limit",
                "pointer": "@114",
                "expected": "<= 39",
                "got": 40,
            },
        ),
        (
            reseal(fmt.encode_envelope(M, b"")[:12] + b"\x80\x80" + b"\0" * 4),
            {},
            {"rule": "OCDBT-007", "message": "truncated varint version", "pointer": "@112"},
        ),
        (
            reseal(fmt.encode_envelope(M, b"")[:12] + b"\0\x80" + b"\0" * 4),
            {},
            {
                "rule": "OCDBT-007",
                "message": "truncated varint compression_format",
                "pointer": "@113",
            },
        ),
    ],
)
def test_envelope_errors_name_file_offset_and_values(data, kw, message):
    kw = {"magic": M, **kw}
    got = error_of(lambda: fmt.decode_envelope(data, file="f", offset=100, **kw))
    assert got == {"file": "f", **message}


def test_envelope_offsets_count_from_zero_by_default():
    got = error_of(lambda: fmt.decode_envelope(b"\1\2\3\4" + BODY[4:], magic=M, file="f"))
    assert (got["rule"], got["file"], got["pointer"]) == ("OCDBT-001", "f", "@0")
    assert got["message"] == "bad manifest magic"
    data = reseal(BODY[:14] + b"junk" + BODY[18:])  # compression 1, but no zstd frame
    data = data[:13] + b"\1" + data[14:]
    got = error_of(lambda: fmt.decode_envelope(reseal(data), magic=M, file="f", offset=100))
    assert (got["rule"], got["file"], got["pointer"]) == ("OCDBT-006", "f", "@114")
    assert got["message"].startswith("not a zstd frame: ")


# --------------------------------------------------------------------------------------------
# zstd_decompress

DATA = bytes(range(256)) * 40  # 10,240 bytes
KNOWN = zstandard.ZstdCompressor().compress(DATA)  # with its content size
UNKNOWN = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(DATA)


class CountingDecompressor:
    """zstandard.ZstdDecompressor that records the calls `zstd_decompress` makes of it."""

    calls: list[str] = []

    def __init__(self) -> None:
        self.real = ZSTD_DECOMPRESSOR()

    def decompress(self, data, **kw):
        self.calls.append("decompress")
        return self.real.decompress(data, **kw)

    def decompressobj(self):
        self.calls.append("decompressobj")
        return self.real.decompressobj()


ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor


@pytest.fixture
def zstd_calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(CountingDecompressor, "calls", calls)
    monkeypatch.setattr(zstandard, "ZstdDecompressor", CountingDecompressor)
    return calls


@pytest.mark.parametrize("frame", [KNOWN, UNKNOWN], ids=["known size", "unknown size"])
def test_a_frame_within_the_bound_is_decoded_in_one_call(frame, zstd_calls):
    assert bytecodecs.zstd_decompress(frame, max_output_size=len(DATA)) == DATA
    assert bytecodecs.zstd_decompress(memoryview(frame), max_output_size=1 << 20) == DATA
    assert zstd_calls == ["decompress", "decompress"]  # no stream


@pytest.mark.parametrize(
    "content_size, calls",
    [(True, ["decompressobj"]), (False, ["decompress", "decompressobj"])],
)
def test_an_empty_frame_is_checked_by_the_stream(content_size, calls, zstd_calls):
    """python-zstandard's one-shot call returns b"" for a frame that declares size 0 without
    decoding it, and refuses one that declares none with no room to decode into."""
    frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(b"")
    assert bytecodecs.zstd_decompress(frame, max_output_size=0) == b""
    assert zstd_calls == calls


@pytest.mark.parametrize(
    "frame, bound, message",
    [
        (
            KNOWN,
            10239,
            {
                "message": "zstd content size exceeds the limit",
                "expected": "<= 10239",
                "got": 10240,
            },
        ),
        (
            UNKNOWN,
            10239,
            {
                "message": "zstd stream decodes to more than the limit",
                "expected": "<= 10239",
                "got": "> 10239",
            },
        ),
        (KNOWN + b"xy", 10240, {"message": "bytes after the zstd frame", "expected": 0, "got": 2}),
        (
            UNKNOWN + b"xy",
            10240,
            {"message": "bytes after the zstd frame", "expected": 0, "got": 2},
        ),
        (KNOWN[:-3], 10240, {"message": "truncated zstd frame"}),
        (UNKNOWN[:-3], 10240, {"message": "truncated zstd frame"}),
        (
            UNKNOWN[:-1] + bytes([UNKNOWN[-1] ^ 1]),
            10240,
            {
                "message": (
                    "corrupt zstd frame: zstd decompressor error: Restored data doesn't match "
                    "checksum"
                )
            },
        ),
    ],
)
def test_zstd_errors_name_file_pointer_rule_and_sizes(frame, bound, message):
    got = error_of(
        lambda: bytecodecs.zstd_decompress(frame, max_output_size=bound, file="f", pointer="@5")
    )
    assert got == {"rule": "OCDBT-006", "file": "f", "pointer": "@5", **message}


def test_a_frame_of_known_size_that_the_one_call_refuses_is_named_corrupt():
    """A frame that declares its size, whose one-call decode fails (its checksum, here), is
    refused at once with zstd's reason: "corrupt zstd frame: ...". Kills `zstd_decompress` 54
    (no message); id at 88f069a."""
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(DATA)
    bad = frame[:-1] + bytes([frame[-1] ^ 1])
    got = error_of(lambda: bytecodecs.zstd_decompress(bad, max_output_size=10240, file="f"))
    assert got == {
        "rule": "OCDBT-006",
        "file": "f",
        "message": (
            "corrupt zstd frame: decompression error: Restored data doesn't match checksum"
        ),
        "pointer": None,
    }


RANDOM = random.Random(21).randbytes(300_000)  # three blocks, stored raw
LONG = zstandard.ZstdCompressor(write_content_size=False).compress(RANDOM)


@pytest.mark.parametrize(
    "frame, bound, message",
    [
        # the stream counts every step's output: 300,000 bytes in pieces of at most 128 KiB
        (
            LONG,
            len(RANDOM) - 1,
            {
                "message": "zstd stream decodes to more than the limit",
                "expected": "<= 299999",
                "got": "> 299999",
            },
        ),
        # steps of 512 bytes go on to the end of a frame much longer than two of them
        (
            LONG + b"xy",
            len(RANDOM),
            {"message": "bytes after the zstd frame", "expected": 0, "got": 2},
        ),
        # trailing bytes past the last step read are counted with those in it
        (
            KNOWN + b"\0" * 1000,
            10240,
            {"message": "bytes after the zstd frame", "expected": 0, "got": 1000},
        ),
    ],
    ids=["limit over steps", "long frame", "trailing past the step"],
)
def test_the_stream_reads_every_step_and_counts_all_it_gives(frame, bound, message):
    """The stream decode (a frame the one call refuses, or one with bytes after it) moves on
    by whole steps, adds up their output against the bound and counts every trailing byte.
    Kills `zstd_decompress` 71 (the position stuck at one step), 73 (only the last piece
    counted), 90 (bytes past the last step subtracted); ids at 88f069a."""
    got = error_of(lambda: bytecodecs.zstd_decompress(frame, max_output_size=bound, file="f"))
    assert got == {"rule": "OCDBT-006", "file": "f", "pointer": None, **message}


def test_a_frame_without_content_size_is_decoded_into_what_its_blocks_give(monkeypatch):
    """The walk of a frame's block headers measures it whole (block sizes past 16 bits
    included), and a frame without content size whose raw blocks give 300,000 bytes is
    decoded in one call into a buffer of exactly that; an empty one, whose blocks give
    nothing, takes the stream. Kills `_zstd_walk` 47 (`most` from 1) and 62 (the block
    header's third byte shifted by 17); ids at 88f069a."""
    assert bytecodecs.zstd_frame_size(LONG) == len(LONG)
    sizes: list[int] = []

    class Recording(CountingDecompressor):
        calls: list[str] = []  # its own

        def decompress(self, data, **kw):
            sizes.append(kw["max_output_size"])
            return self.real.decompress(data, **kw)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", Recording)
    assert bytecodecs.zstd_decompress(LONG, max_output_size=1 << 20) == RANDOM
    empty = zstandard.ZstdCompressor(write_content_size=False).compress(b"")
    assert bytecodecs.zstd_decompress(empty, max_output_size=100) == b""
    assert sizes == [len(RANDOM), 0]


def test_zstd_errors_take_the_callers_error_class_and_rule():
    with pytest.raises(ZarrFormatError) as info:
        bytecodecs.zstd_decompress(
            b"nope", max_output_size=9, file="c/0", rule="ZARR-1", error=ZarrFormatError
        )
    assert_error(info, rule="ZARR-1", file="c/0")
    assert info.value.message.startswith("not a zstd frame: ")


# --------------------------------------------------------------------------------------------
# _check_ranges, _file_ids, _generations

LEAF = b"\0" + b"\1\1\0f" + b"\1" + b"\1k"  # height 0, one data file "f", one entry, key "k"


def _indirect(length: int, file_id: int, offset: int) -> bytes:
    """LEAF's value: `length` bytes at `offset` of data file `file_id`."""
    return LEAF + fmt.encode_varint(length) + bytes([1, file_id]) + fmt.encode_varint(offset)


def test_a_value_may_end_at_the_last_byte_a_64_bit_range_reaches():
    (entry,) = _btree(_indirect(5, 0, 2**64 - 6)).entries
    assert entry.value == fmt.IndirectDataReference(fmt.DataFileId(b"", b"f"), 2**64 - 6, 5)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            _indirect(5, 0, 2**64 - 5),
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@125",
                "got": (18446744073709551611, 5),
            },
        ),
        (
            _indirect(2**64 - 1, 0, 1),
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@134",
                "got": (1, 18446744073709551615),
            },
        ),
        (
            _indirect(5, 1, 0),
            {
                "rule": "OCDBT-021",
                "message": "data_file_id out of range of the data file table",
                "pointer": "@124",
                "expected": "< 1",
                "got": 1,
            },
        ),
    ],
)
def test_a_leaf_value_must_lie_in_a_listed_file_within_64_bits(body, message):
    assert error_of(lambda: _btree(body)) == {"file": "d/n", **message}


def _version(generation: int, location: fmt.IndirectDataReference | None):
    stats = fmt.BtreeNodeStatistics(0, 1, 1)
    height = 0 if location is None else 1
    return fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(location, stats), generation, height, generation
    )


HUGE = fmt.IndirectDataReference(FILE, 1, 2**64 - 1)
SMALL = fmt.IndirectDataReference(FILE, 1, 2)


@pytest.mark.parametrize(
    "versions, message",
    [
        (
            [_version(1, HUGE)],
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@47",
                "got": (1, 18446744073709551615),
            },
        ),
        # a version with no root (both fields 2**64-1) is skipped, not the versions after it
        (
            [_version(1, None), _version(2, HUGE)],
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@53",
                "got": (1, 18446744073709551615),
            },
        ),
        (
            [_version(1, SMALL), _version(1, SMALL)],
            {
                "rule": "OCDBT-030",
                "message": "generation numbers must be non-zero and strictly increasing",
                "pointer": "@44",
                "got": [1, 1],
            },
        ),
    ],
)
def test_manifest_versions_are_checked_one_by_one(versions, message):
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, 1, None)
    data = fmt.encode_manifest(fmt.Manifest(config, tuple(versions), ()))
    assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {"file": "m", **message}


# --------------------------------------------------------------------------------------------
# _Cursor.varints (a column of varints: one-byte ones at C speed, the others one by one)


def test_a_two_byte_value_length_starting_with_0x80_is_not_taken_for_one_byte():
    (entry,) = _btree(LEAF + b"\x80\x01" + b"\0" + b"v" * 128).entries  # 128, inline
    assert entry == fmt.LeafNodeEntry(b"k", b"v" * 128)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            LEAF + b"\x80" * 10 + b"\0\0",
            {
                "rule": "OCDBT-008",
                "message": "varint value_length longer than 10 bytes",
                "pointer": "@122",
            },
        ),
        (
            LEAF + b"\x80",
            {
                "rule": "OCDBT-007",
                "message": "truncated varint value_length",
                "pointer": "@122",
            },
        ),
        # one data file whose path suffix is one byte longer than a path may be
        (
            b"\0\1" + fmt.encode_varint(65536) + b"\0",
            {
                "rule": "OCDBT-008",
                "message": "path_suffix_length out of range",
                "pointer": "@116",
                "expected": "<= 65535",
                "got": 65536,
            },
        ),
        # 65535 is allowed: the decoder goes on to the (missing) entries
        (
            b"\0\1" + fmt.encode_varint(65535) + b"\0" + b"x" * 65535,
            {"rule": "OCDBT-007", "message": "truncated varint num_entries", "pointer": "@65655"},
        ),
    ],
)
def test_a_column_of_varints_checks_each_for_length_end_and_range(body, message):
    assert error_of(lambda: _btree(body)) == {"file": "d/n", **message}


# --------------------------------------------------------------------------------------------
# fixed-width fields: signed zstd level, unsigned 64-bit length and commit time


def test_fixed_width_fields_keep_their_sign():
    stats = fmt.BtreeNodeStatistics(2**63, 2**64 - 1, 7)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(SMALL, stats),
        1,
        1,
        2**64 - 1,  # commit time: unsigned
    )
    config = fmt.Config(b"\1" * 16, 0, 2**40, 1 << 20, 1, fmt.ZstdCompression(-5))  # signed
    manifest = fmt.Manifest(config, (version,), ())
    got = fmt.decode_manifest(fmt.encode_manifest(manifest, compression=0))
    assert got == manifest
    assert got.config.compression.level == -5 and got.versions[0].commit_time == 2**64 - 1
    data = BODY[:4] + struct.pack("<Q", 2**64 - 1) + BODY[12:]
    assert error_of(lambda: fmt.decode_envelope(data, magic=M, file="f", offset=100)) == {
        "rule": "OCDBT-002",
        "file": "f",
        "message": "manifest length field does not match its size",
        "pointer": "@104",
        "expected": 22,
        "got": 18446744073709551615,
    }


# --------------------------------------------------------------------------------------------
# _zstd_walk (through zstd_frame_size): frame header and block headers of RFC 8878


def _block(kind: int, size: int, *, last: bool) -> bytes:
    """A block header (3 bytes, little-endian: last, kind, size) and its content."""
    header = int(last) | kind << 1 | size << 3
    content = b"\xab" if kind == 1 else b"\xcd" * size  # RLE: one byte, repeated size times
    return header.to_bytes(3, "little") + content


@pytest.mark.parametrize("single", [0, 1])
@pytest.mark.parametrize("did_flag, did", [(0, b""), (1, b"\1"), (2, b"\1\2"), (3, b"\1\2\3\4")])
@pytest.mark.parametrize("fcs_flag", [0, 1, 2, 3])
@pytest.mark.parametrize("checksum", [0, 1])
def test_a_frame_header_of_every_shape_is_measured(single, did_flag, did, fcs_flag, checksum):
    fhd = fcs_flag << 6 | single << 5 | checksum << 2 | did_flag
    window = b"" if single else b"\x40"
    fcs = b"\7" * ((1 if single else 0), 2, 4, 8)[fcs_flag]
    blocks = _block(0, 300, last=False) + _block(1, 70000, last=False) + _block(2, 5, last=True)
    frame = b"\x28\xb5\x2f\xfd" + bytes([fhd]) + window + did + fcs + blocks
    frame += b"\xee" * 4 * checksum
    assert bytecodecs.zstd_frame_size(frame) == len(frame)
    assert bytecodecs.zstd_frame_size(frame + b"\0" * 9) == len(frame)
    assert bytecodecs.zstd_frame_size(frame[:-1]) is None


@pytest.mark.parametrize(
    "frame",
    [
        b"\x28\xb5\x2f\xfd\x20",  # 5 bytes: no room for a block
        b"\x28\xb5\x2f\xfd\x28" + _block(0, 1, last=True),  # the reserved bit set
        b"\x28\xb5\x2f\xfd\x20\0" + (1 | 3 << 1 | 1 << 3).to_bytes(3, "little") + b"\0",  # kind 3
        b"\x28\xb5\x2f\xfe\x20\0" + _block(0, 1, last=True),  # another magic
        b"\x28\xb5\x2f\xfd\x20\0" + _block(0, 1, last=True)[:2],  # a cut block header
    ],
)
def test_what_is_not_a_frame_has_no_size(frame):
    assert bytecodecs.zstd_frame_size(frame) is None


def test_the_smallest_frame_is_measured():
    frame = b"\x28\xb5\x2f\xfd\x20\0" + _block(0, 0, last=True)  # single segment, size 0
    assert len(frame) == 9 and bytecodecs.zstd_frame_size(frame) == 9


@pytest.mark.parametrize(
    "data", [bytes(range(256)) * 600, b"\0" * 300000, bytes((i * 7919) % 251 for i in range(1000))]
)
def test_frames_of_raw_rle_and_compressed_blocks_decode_in_one_call(data, zstd_calls):
    """Without a content size the one-shot buffer is what the blocks can give: raw and RLE
    blocks their size, compressed ones 128 KiB each; too small a buffer would take the
    stream."""
    for level in (-100, 3):
        frame = zstandard.ZstdCompressor(level=level, write_content_size=False).compress(data)
        assert bytecodecs.zstd_decompress(frame, max_output_size=len(data)) == data
    assert zstd_calls == ["decompress", "decompress"]


# --------------------------------------------------------------------------------------------
# _interior_versions: how many children a manifest and a version tree node may list


def test_a_manifest_lists_more_version_tree_nodes_than_two_to_the_arity():
    """The manifest's `version_tree_nodes` hold one node per height (up to 64 / arity_log2 + 1),
    not 2^arity_log2 children as a node does."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    nodes = tuple(fmt.VersionNodeReference(loc, g, h, 4, g) for g, h in ((8, 3), (12, 2), (14, 1)))
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), 15, 1, 15
    )
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, 1, None)
    manifest = fmt.Manifest(config, (version,), nodes)
    assert fmt.decode_manifest(fmt.encode_manifest(manifest)) == manifest


def test_a_version_tree_node_lists_at_most_two_to_the_arity_children():
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    children = tuple(fmt.VersionNodeReference(loc, 16 * i, 0, 16, i) for i in range(1, 18))
    data = fmt.encode_version_tree_node(fmt.VersionTreeNode(1, 4, children), compression=0)
    assert error_of(lambda: fmt.decode_version_tree_node(data, file="d/x", offset=100)) == {
        "rule": "OCDBT-008",
        "file": "d/x",
        "message": "num_children out of range",
        "pointer": "@122",
        "expected": "<= 16",
        "got": 17,
    }


def _manifest_listing(arity_log2: int, n: int) -> bytes:
    """A manifest of one inline version whose `version_tree_nodes` count is `n`, followed by
    13 zero bytes per node (the least a node takes)."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), 1, 1, 1
    )
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, arity_log2, None)
    body = fmt.decode_envelope(fmt.encode_manifest(fmt.Manifest(config, (version,), ())), magic=M)
    assert body.body[-1] == 0  # no version tree nodes
    return fmt.encode_envelope(M, body.body[:-1] + fmt.encode_varint(n) + b"\0" * (13 * n))


@pytest.mark.parametrize(
    "arity_log2, n, message",
    [
        (
            1,
            66,
            {
                "rule": "OCDBT-008",
                "message": "num_children out of range",
                "pointer": "@60",
                "expected": "<= 65",
                "got": 66,
            },
        ),
        (
            3,
            23,
            {
                "rule": "OCDBT-008",
                "message": "num_children out of range",
                "pointer": "@60",
                "expected": "<= 22",
                "got": 23,
            },
        ),
        (
            4,
            18,
            {
                "rule": "OCDBT-008",
                "message": "num_children out of range",
                "pointer": "@60",
                "expected": "<= 17",
                "got": 18,
            },
        ),
        (
            5,
            14,
            {
                "rule": "OCDBT-008",
                "message": "num_children out of range",
                "pointer": "@60",
                "expected": "<= 13",
                "got": 14,
            },
        ),
        # 64 / 4 = 16 nodes pass the count; their generation numbers (0) do not
        (
            4,
            16,
            {
                "rule": "OCDBT-030",
                "message": "generation numbers must be non-zero and strictly increasing",
                "pointer": "@61",
                "got": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            },
        ),
    ],
)
def test_a_manifest_lists_at_most_64_over_the_arity_plus_one_version_tree_nodes(
    arity_log2, n, message
):
    data = _manifest_listing(arity_log2, n)
    assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {"file": "m", **message}


# --------------------------------------------------------------------------------------------
# encode_version_tree_node, encode_btree_node: the default compression


def test_nodes_are_encoded_zstd_compressed_by_default():
    """Both node encoders write a zstd-compressed envelope (compression 1, level 0) unless told
    otherwise, and it decodes back to the node. Kills `encode_version_tree_node` 2 (default 2:
    ValueError) and 36 (`compression` not passed on: uncompressed); ids at 88f069a."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    version = fmt.VersionTreeNode(1, 4, (fmt.VersionNodeReference(loc, 16, 0, 16, 19),))
    btree = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"k" * 40, b"v" * 40),))
    for magic, node, encode, decode in [
        (V, version, fmt.encode_version_tree_node, fmt.decode_version_tree_node),
        (B, btree, fmt.encode_btree_node, fmt.decode_btree_node),
    ]:
        data = encode(node)
        env = fmt.decode_envelope(data, magic=magic)
        assert env.compression == 1
        plain = fmt.decode_envelope(encode(node, compression=0), magic=magic)
        assert plain.compression == 0
        assert data == fmt.encode_envelope(magic, plain.body, compression=1, level=0)
        assert decode(data) == node


def test_a_zstd_level_may_end_the_manifest_and_is_named_when_cut():
    """The zstd level (4 bytes, signed) of a numbered-kind manifest is the last field of its
    body: read whole when its 4 bytes are there, and named, with the bytes it needs and has,
    when cut. Kills `_Cursor.i32le` 2 (no field name) and 5 (5 bytes needed); ids at
    88f069a."""
    level = fmt.ZstdCompression(-5)
    config = fmt.Config(b"\1" * 16, fmt.MANIFEST_KIND_NUMBERED, 8, 1 << 20, 1, level)
    data = fmt.encode_manifest(fmt.Manifest(config, (), ()), compression=0)
    assert fmt.decode_manifest(data, file="m") == fmt.Manifest(config, (), ())
    body = fmt.decode_envelope(data, magic=M).body
    cut = fmt.encode_envelope(M, body[:-1])
    assert error_of(lambda: fmt.decode_manifest(cut, file="m")) == {
        "rule": "OCDBT-007",
        "file": "m",
        "message": "truncated: zstd level needs 4 bytes",
        "pointer": "@37",
        "expected": 4,
        "got": 3,
    }


# --------------------------------------------------------------------------------------------
# _common_prefix: each key of a B+tree node stores only what it does not share with the key
# before it


@pytest.mark.parametrize(
    "first, second, shared",
    [
        (b"a", b"b", 0),
        (b"ab", b"ac", 1),  # all but the last byte of the shorter key
        (b"abcd", b"abce", 3),
        (b"abcd", b"abx", 2),
        (b"axxx", b"ayyy", 1),  # the bisection's first probe (2 bytes) differs
        (b"ab", b"abc", 2),  # the whole shorter key
        (b"abcdefgh", b"xbcdefgh", 0),
    ],
)
def test_a_leaf_key_stores_the_whole_prefix_it_shares_with_the_key_before(first, second, shared):
    """The prefix-length column holds the longest common prefix, as tensorstore writes it,
    and the suffix column the rest. Kills `_common_prefix` 10 (a prefix one byte short of
    the shorter key found one byte short) and 22 (the bisection's upper bound moved two
    bytes down when a probe differs); ids at 88f069a."""
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(first, b"x"), fmt.LeafNodeEntry(second, b"y")))
    body = fmt.decode_envelope(fmt.encode_btree_node(node, compression=0), magic=B).body
    suffix = second[shared:]
    assert body == (
        b"\0\0\2"  # height 0, no data files, 2 entries
        + bytes([shared, len(first), len(suffix)])
        + first
        + suffix
        + b"\1\1\0\0xy"  # value lengths, kinds (inline), values
    )
    assert _btree(body).entries == node.entries


# --------------------------------------------------------------------------------------------
# _keys: the key columns of a B+tree node, and every error they raise


@pytest.mark.parametrize(
    "body, message",
    [
        (
            b"\0\0\2\3\1\1ab\1\1\0\0xy",
            {
                "rule": "OCDBT-041",
                "message": "entry 1: key_prefix_length exceeds the previous key",
                "pointer": "@117",
                "expected": "<= 1",
                "got": 3,
            },
        ),
        (
            b"\0\0\2\0\1\1ba\1\1\0\0xy",
            {
                "rule": "OCDBT-041",
                "message": "entry 1: keys must be strictly increasing",
                "pointer": "@117",
                "expected": "> b'b'",
                "got": b"a",
            },
        ),
        (
            b"\0\0\2\1\1\0a\1\1\0\0xy",
            {
                "rule": "OCDBT-041",
                "message": "entry 1: keys must be strictly increasing",
                "pointer": "@117",
                "expected": "> b'a'",
                "got": b"a",
            },
        ),
        (
            b"\0\0\1\x80\x80\x04" + b"k" * 65536 + b"\1\0x",
            {
                "rule": "OCDBT-008",
                "message": "entry 0: key too long",
                "pointer": "@117",
                "expected": "<= 65535 bytes",
                "got": 65536,
            },
        ),
        (
            b"\0\0\2" + b"\x80" * 10 + b"\1" + b"\0" * 8,
            {
                "rule": "OCDBT-008",
                "message": "varint key_prefix_length longer than 10 bytes",
                "pointer": "@117",
            },
        ),
        (
            b"\0\0\2\0" + b"\x80" * 10 + b"\1" + b"\0" * 8,
            {
                "rule": "OCDBT-008",
                "message": "varint key_suffix_length longer than 10 bytes",
                "pointer": "@118",
            },
        ),
        (
            b"\0\0\2\0\1\x14ab\1\1\0\0xy",
            {
                "rule": "OCDBT-007",
                "message": "truncated: key_suffix needs 21 bytes",
                "pointer": "@120",
                "expected": 21,
                "got": 8,
            },
        ),
        # an interior node (height 1): the subtree_common_prefix_length column
        (
            b"\1\0\1\1\2a" + b"\0" * 20,
            {
                "rule": "OCDBT-042",
                "message": "entry 0: subtree_common_prefix_length exceeds the key",
                "pointer": "@117",
                "expected": "<= 1",
                "got": 2,
            },
        ),
        (
            b"\1\0\1\1" + b"\x80" * 10 + b"\1a" + b"\0" * 20,
            {
                "rule": "OCDBT-008",
                "message": "varint subtree_common_prefix_length longer than 10 bytes",
                "pointer": "@118",
            },
        ),
    ],
)
def test_key_column_errors_name_the_offset_of_the_columns_the_field_and_the_rule(body, message):
    """Each check of the key columns names its field, the offset where the columns start
    (the body starts at 114: a 14-byte envelope header at offset 100), what it expected and
    what it got. Kills `_keys` 1, 4, 9, 10, 13, 16, 17, 22, 25, 26, 29, 33, 34, 51-62, 68-75,
    80-89, 94, 96 (field names, offsets, messages, rules or expected/got dropped or changed);
    ids at 88f069a."""
    assert error_of(lambda: _btree(body)) == {"file": "d/n", **message}


def test_a_database_without_a_node_size_target_bounds_its_nodes_by_the_limit_alone():
    """`max_decoded_node_bytes` 0 means no target: the bound is the caller's limit; a target
    of 1 byte gives the formula's bound. Kills `node_bound` 2 (`== 1` for `== 0`); ids at
    88f069a."""
    no_target = fmt.Config(b"\1" * 16, 0, 8, 0, 4, None)
    assert fmt.node_bound(no_target) == LIMITS.max_node_bytes
    assert fmt.node_bound(no_target, limit=1 << 40) == 1 << 40
    one_byte = fmt.Config(b"\1" * 16, 0, 8, 1, 4, None)
    assert fmt.node_bound(one_byte, limit=1 << 40) == 2 + 4 * 8 + (1 << 14) + (1 << 20)


# --------------------------------------------------------------------------------------------
# decode_btree_node: the fields around the key columns, in leaf and interior nodes

# height 1, one data file "f", one entry: key "k", subtree_common_prefix_length 0, file id 0;
# then data_file_offset, data_file_length, num_keys, num_tree_bytes, num_indirect_value_bytes
INTERIOR = b"\1" + b"\1\1\0f" + b"\1" + b"\1" + b"\0" + b"k" + b"\0"
LONG_VARINT = b"\x80" * 10 + b"\1"  # an 11-byte varint
NONE = fmt.encode_varint(2**64 - 1)  # the "no root" value of a manifest's version


def test_an_interior_node_decodes_to_its_child_reference_and_statistics():
    """Kills `decode_btree_node` 262, 265 (the data file table not kept); ids at 88f069a."""
    node = _btree(INTERIOR + b"\3\4\1\2\3")
    assert node.data_file_table == (fmt.DataFileId(b"", b"f"),)
    (entry,) = node.entries
    assert entry == fmt.InteriorNodeEntry(
        b"k",
        0,
        fmt.BtreeNodeReference(
            fmt.IndirectDataReference(fmt.DataFileId(b"", b"f"), 3, 4),
            fmt.BtreeNodeStatistics(num_indirect_value_bytes=3, num_tree_bytes=2, num_keys=1),
        ),
    )


@pytest.mark.parametrize(
    "body, message",
    [
        (
            b"",
            {
                "rule": "OCDBT-007",
                "message": "truncated: height needs 1 bytes",
                "pointer": "@114",
                "expected": 1,
                "got": 0,
            },
        ),
        (
            b"\0\0\0",
            {
                "rule": "OCDBT-040",
                "message": "a B+tree node must hold at least one entry",
                "pointer": "@116",
                "got": 0,
            },
        ),
        (
            LEAF + b"\0\2",
            {
                "rule": "OCDBT-043",
                "message": "value_kind must be 0 or 1",
                "pointer": "@123",
                "got": 2,
            },
        ),
        (
            LEAF + b"\5\1\0" + LONG_VARINT,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_offset longer than 10 bytes",
                "pointer": "@125",
            },
        ),
        # both fields 2**64-1 mean "no root" in a manifest only, never in a node
        (
            LEAF + NONE + b"\1\0" + NONE,
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@134",
                "got": (18446744073709551615, 18446744073709551615),
            },
        ),
        (
            INTERIOR + NONE + NONE + b"\1\2\3",
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@124",
                "got": (18446744073709551615, 18446744073709551615),
            },
        ),
        (
            INTERIOR + fmt.encode_varint(2**64 - 5) + b"\5\1\2\3",
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@124",
                "got": (18446744073709551611, 5),
            },
        ),
        (
            INTERIOR + LONG_VARINT + b"\4\1\2\3",
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_offset longer than 10 bytes",
                "pointer": "@124",
            },
        ),
        (
            INTERIOR + b"\3" + LONG_VARINT + b"\1\2\3",
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_length longer than 10 bytes",
                "pointer": "@125",
            },
        ),
        (
            INTERIOR + b"\3\4\1\2\3\0\0",
            {
                "rule": "OCDBT-007",
                "message": "2 unexpected bytes after the B+tree node",
                "pointer": "@129",
                "expected": 0,
                "got": 2,
            },
        ),
        (
            INTERIOR + b"\3\4" + LONG_VARINT + b"\2\3",
            {
                "rule": "OCDBT-008",
                "message": "varint num_keys longer than 10 bytes",
                "pointer": "@126",
            },
        ),
        (
            INTERIOR + b"\3\4\1" + LONG_VARINT + b"\3",
            {
                "rule": "OCDBT-008",
                "message": "varint num_tree_bytes longer than 10 bytes",
                "pointer": "@127",
            },
        ),
        (
            INTERIOR + b"\3\4\1\2" + LONG_VARINT,
            {
                "rule": "OCDBT-008",
                "message": "varint num_indirect_value_bytes longer than 10 bytes",
                "pointer": "@128",
            },
        ),
    ],
)
def test_btree_node_errors_name_offset_field_and_rule(body, message):
    """Kills `decode_btree_node` 22-24, 30, 41-54, 82-91, 108-112, 123 (a leaf value of
    2**64-1 bytes at 2**64-1 taken for "no root"), 185-230 (field names of the
    interior columns; 210: an interior child of 2**64-1 bytes at 2**64-1), 256-259 (the
    name in the trailing-bytes error); ids at 88f069a."""
    assert error_of(lambda: _btree(body)) == {"file": "d/n", **message}


# --------------------------------------------------------------------------------------------
# _interior_versions: the columns of an interior version node and of the manifest's
# version_tree_nodes, and the checks of their heights and child counts

# arity_log2 4, height 1, data file "d/x", one child; then generation_number, data_file_id 0,
# data_file_offset, data_file_length, num_generations, commit_time (8 bytes)
VERSION_HEAD = b"\4\1" + b"\1\3\0d/x" + b"\1"
TIME = b"\0" * 8


@pytest.mark.parametrize(
    "body, message",
    [
        (
            VERSION_HEAD + LONG_VARINT + b"\0\5\7\x10" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint generation_number longer than 10 bytes",
                "pointer": "@123",
            },
        ),
        (
            VERSION_HEAD + b"\x10\0" + LONG_VARINT + b"\7\x10" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_offset longer than 10 bytes",
                "pointer": "@125",
            },
        ),
        (
            VERSION_HEAD + b"\x10\0\5" + LONG_VARINT + b"\x10" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_length longer than 10 bytes",
                "pointer": "@126",
            },
        ),
        (
            VERSION_HEAD + b"\x10\0" + fmt.encode_varint(2**64 - 5) + b"\5\x10" + TIME,
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@125",
                "got": (18446744073709551611, 5),
            },
        ),
        (
            VERSION_HEAD + b"\x10\0" + NONE + NONE + b"\x10" + TIME,
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@125",
                "got": (18446744073709551615, 18446744073709551615),
            },
        ),
        (
            VERSION_HEAD + b"\x10\0\5\7" + LONG_VARINT + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint num_generations longer than 10 bytes",
                "pointer": "@127",
            },
        ),
        (
            VERSION_HEAD + b"\x90\1\0\5\7\x10" + TIME[:7],  # generation 144: two bytes
            {
                "rule": "OCDBT-007",
                "message": "truncated: commit_time needs 8 bytes",
                "pointer": "@129",
                "expected": 8,
                "got": 7,
            },
        ),
        (
            VERSION_HEAD + b"\x10\0\5\7\0" + TIME,
            {
                "rule": "OCDBT-031",
                "message": "num_generations must not be 0",
                "pointer": "@122",
                "got": [0],
            },
        ),
    ],
)
def test_interior_version_node_errors_name_offset_field_and_rule(body, message):
    """Kills `_interior_versions` 43-95 (field names, the offset of the reference columns,
    and 81: a child of 2**64-1 bytes at 2**64-1 taken for "no root"); ids at 88f069a."""
    data = fmt.encode_envelope(V, body)
    got = error_of(lambda: fmt.decode_version_tree_node(data, file="d/x", offset=100))
    assert got == {"file": "d/x", **message}


@pytest.mark.parametrize(
    "generations, limit",
    [((2, 4), None), ((2,), None), ((1, 2), 1), ((5, 6), 1)],
)
def test_an_interior_version_node_holds_the_children_its_last_generation_allows(generations, limit):
    """At arity 2 (arity_log2 1) and height 1 each child covers 2 generations: a node whose
    last child ends at generation 2 or 6 holds 1 child (the one for 1-2, or 5-6), one ending
    at 4 holds 2. Kills `_interior_versions` 143 (`<<` for `>>`), 148 (modulo 2^(arity_log2
    + 1)), 149 (`+ 2`), 152-154 (message, rule, offset); ids at 88f069a."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    children = tuple(fmt.VersionNodeReference(loc, g, 0, 2, g) for g in generations)
    node = fmt.VersionTreeNode(1, 1, children)
    data = fmt.encode_version_tree_node(node, compression=0)
    if limit is None:
        assert fmt.decode_version_tree_node(data) == node
    else:
        assert error_of(lambda: fmt.decode_version_tree_node(data, file="d/x", offset=100)) == {
            "rule": "OCDBT-031",
            "file": "d/x",
            "message": "interior version node holds more children than the arity allows",
            "pointer": "@122",
            "expected": f"<= {limit}",
            "got": len(generations),
        }


@pytest.mark.parametrize(
    "arity_log2, heights, error",
    [
        (4, (2, 1), None),
        (4, (14,), None),  # (14 + 1) x 4 = 60 < 64
        (1, (62,), None),
        (4, (15,), ("@74", [15])),
        (1, (63,), ("@74", [63])),
        (4, (0,), ("@74", [0])),
        (4, (1, 1), ("@87", [1, 1])),
        (4, (1, 2), ("@87", [1, 2])),
    ],
)
def test_manifest_version_tree_node_heights_decrease_and_fit_64_bits(arity_log2, heights, error):
    """Kills `_interior_versions` 96 (offset of the heights), 111 (equal heights), 114-118
    (the bound (height + 1) x arity_log2 < 64 moved), 119-128 (message, rule, value); ids at
    88f069a."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), 15, 1, 15
    )
    nodes = tuple(fmt.VersionNodeReference(loc, 8 + i, h, 4, 8) for i, h in enumerate(heights))
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, arity_log2, None)
    manifest = fmt.Manifest(config, (version,), nodes)
    data = fmt.encode_manifest(manifest, compression=0)
    if error is None:
        assert fmt.decode_manifest(data) == manifest
    else:
        pointer, got = error
        assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {
            "rule": "OCDBT-032",
            "file": "m",
            "message": "version_tree_nodes heights must be >= 1 and strictly decreasing",
            "pointer": pointer,
            "got": got,
        }
    # each further node takes 13 bytes before the heights column; the last height cut off
    cut = fmt.encode_envelope(M, fmt.decode_envelope(data, magic=M).body[:-1])
    assert error_of(lambda: fmt.decode_manifest(cut, file="m")) == {
        "rule": "OCDBT-007",
        "file": "m",
        "message": f"truncated: entry_height needs {len(heights)} bytes",
        "pointer": f"@{74 + 13 * (len(heights) - 1)}",
        "expected": len(heights),
        "got": len(heights) - 1,
    }


# --------------------------------------------------------------------------------------------
# _data_file_table: paths stored as prefix + suffix, each split into base path and the rest

ENTRY = b"\1\1k\1\0x"  # after a leaf's data file table: one entry, key "k", inline value "x"


@pytest.mark.parametrize(
    "table, transitive_path, files",
    [
        # two files: prefix [2], suffixes "a/x" and "y", base lengths 2 and 2
        (b"\2\2\3\1\2\2a/xy", b"", [(b"a/", b"x"), (b"a/", b"y")]),
        # the shared prefix may reach the shorter of two different base paths, no further
        (b"\2\2\3\2\2\3a/xzy", b"", [(b"a/", b"x"), (b"a/z", b"y")]),
        (b"\1\3\2a/x", b"t/", [(b"t/a/", b"x")]),
        (b"\1\1\0a", b"t" * 65534, [(b"t" * 65534, b"a")]),  # 65,535 bytes in all
    ],
)
def test_data_file_paths_are_rebuilt_from_prefix_suffix_and_base(table, transitive_path, files):
    node = _btree(b"\0" + table + ENTRY, transitive_path=transitive_path)
    assert [(f.base_path, f.relative_path) for f in node.data_file_table] == files


@pytest.mark.parametrize(
    "table, transitive_path, message",
    [
        (
            b"\2\5\1\1\0\0ab",
            b"",
            {
                "rule": "OCDBT-020",
                "message": "data file 1: path_prefix_length exceeds the previous path",
                "pointer": "@117",
                "expected": "<= 1",
                "got": 5,
            },
        ),
        (
            b"\1\1\2a",
            b"",
            {
                "rule": "OCDBT-020",
                "message": "data file 0: base_path_length exceeds the path",
                "pointer": "@118",
                "expected": "<= 1",
                "got": 2,
            },
        ),
        (
            b"\2\2\3\1\2\0a/xy",
            b"",
            {
                "rule": "OCDBT-020",
                "message": (
                    "data file 1: shared prefix extends past a base path that differs from the "
                    "previous one"
                ),
                "pointer": "@124",
            },
        ),
        (
            b"\1\1\0a",
            b"t" * 65535,
            {
                "rule": "OCDBT-020",
                "message": "data file 0: path longer than 65535 bytes",
                "pointer": "@118",
                "got": 65536,
            },
        ),
        (
            LONG_VARINT,
            b"",
            {
                "rule": "OCDBT-008",
                "message": "varint num_files longer than 10 bytes",
                "pointer": "@115",
            },
        ),
        (
            b"\x09\0\0",  # and ENTRY's 6 bytes
            b"",
            {
                "rule": "OCDBT-007",
                "message": "num_files = 9 does not fit in the 8 bytes that remain",
                "pointer": "@115",
                "got": 9,
            },
        ),
        # every length column is bounded by the longest path (`_data_file_table` 15, 41)
        (
            b"\2\x80\x80\x04\1\1\0\0ab",
            b"",
            {
                "rule": "OCDBT-008",
                "message": "path_prefix_length out of range",
                "pointer": "@116",
                "expected": "<= 65535",
                "got": 65536,
            },
        ),
        (
            b"\2\0\1\1\0\x80\x80\x04ab",
            b"",
            {
                "rule": "OCDBT-008",
                "message": "base_path_length out of range",
                "pointer": "@120",
                "expected": "<= 65535",
                "got": 65536,
            },
        ),
        # 5 files take at least 14 bytes; with ENTRY, 12 remain: past the count's bound of 2
        # bytes a file, so the columns report the cut (`_data_file_table` 8: 3 a file)
        (
            b"\5" + b"\0" * 6,
            b"",
            {
                "rule": "OCDBT-007",
                "message": "truncated: base_path_length needs 5 bytes",
                "pointer": "@125",
                "expected": 5,
                "got": 3,
            },
        ),
        (
            b"\2" + LONG_VARINT + b"\0" * 8,
            b"",
            {
                "rule": "OCDBT-008",
                "message": "varint path_prefix_length longer than 10 bytes",
                "pointer": "@116",
            },
        ),
        (
            b"\2\0" + LONG_VARINT + b"\0" * 8,
            b"",
            {
                "rule": "OCDBT-008",
                "message": "varint path_suffix_length longer than 10 bytes",
                "pointer": "@117",
            },
        ),
        (
            b"\2\0\1\1" + LONG_VARINT + b"\0" * 8,
            b"",
            {
                "rule": "OCDBT-008",
                "message": "varint base_path_length longer than 10 bytes",
                "pointer": "@119",
            },
        ),
        (
            b"\1\x14\0ab",
            b"",
            {
                "rule": "OCDBT-007",
                "message": "truncated: path_suffix needs 20 bytes",
                "pointer": "@118",
                "expected": 20,
                "got": 8,
            },
        ),
    ],
)
def test_data_file_table_errors_name_offset_field_and_rule(table, transitive_path, message):
    """The table starts at 115 (after the height); prefix-length errors point at the suffix
    lengths, the others at the path they concern. Kills `_data_file_table`'s field names,
    offsets, bounds and messages."""
    body = b"\0" + table + ENTRY
    got = error_of(lambda: _btree(body, transitive_path=transitive_path))
    assert got == {"file": "d/n", **message}


# --------------------------------------------------------------------------------------------
# _leaf_versions: the versions of a version tree leaf node (and of a manifest)

# arity_log2 4, height 0, data file "d/x", one version; then generation_number, root_height,
# data_file_id, data_file_offset, data_file_length, num_keys, num_tree_bytes,
# num_indirect_value_bytes, commit_time (8 bytes)
VERSION_LEAF_HEAD = b"\4\0" + b"\1\3\0d/x" + b"\1"


def _version_leaf_node(body: bytes) -> fmt.VersionTreeNode:
    data = fmt.encode_envelope(V, body)
    return fmt.decode_version_tree_node(data, file="d/x", offset=100)


def test_a_version_decodes_to_its_root_statistics_and_time():
    (version,) = _version_leaf_node(VERSION_LEAF_HEAD + b"\1\1\0\5\7\1\2\3" + TIME).entries
    assert version == fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(
            fmt.IndirectDataReference(FILE, 5, 7),
            fmt.BtreeNodeStatistics(num_indirect_value_bytes=3, num_tree_bytes=2, num_keys=1),
        ),
        generation_number=1,
        root_height=1,
        commit_time=0,
    )
    # both fields 2**64-1: a version with no root (an empty database), whose height is 0
    body = VERSION_LEAF_HEAD + b"\1\0\0" + NONE + NONE + b"\1\2\3" + TIME
    (empty,) = _version_leaf_node(body).entries
    assert (empty.root.location, empty.root_height) == (None, 0)
    # one of the two at 2**64-1 is a real (if odd) range: offset 2**64-1 with length 0, or
    # length 2**64-1 at offset 0, both within 64 bits (`_leaf_versions` 129: `or`)
    for offset, length in [(2**64 - 1, 0), (0, 2**64 - 1)]:
        fields = fmt.encode_varint(offset) + fmt.encode_varint(length)
        body = VERSION_LEAF_HEAD + b"\1\1\0" + fields + b"\1\2\3" + TIME
        (version,) = _version_leaf_node(body).entries
        assert version.root.location == fmt.IndirectDataReference(FILE, offset, length)
        assert version.root_height == 1


@pytest.mark.parametrize(
    "body, message",
    [
        (
            VERSION_LEAF_HEAD + LONG_VARINT + b"\1\0\5\7\1\2\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint generation_number longer than 10 bytes",
                "pointer": "@123",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1" + LONG_VARINT + b"\5\7\1\2\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_id longer than 10 bytes",
                "pointer": "@125",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\1\5\7\1\2\3" + TIME,
            {
                "rule": "OCDBT-021",
                "message": "data_file_id out of range of the data file table",
                "pointer": "@125",
                "expected": "< 1",
                "got": 1,
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0" + LONG_VARINT + b"\7\1\2\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_offset longer than 10 bytes",
                "pointer": "@126",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0\5" + LONG_VARINT + b"\1\2\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint data_file_length longer than 10 bytes",
                "pointer": "@127",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0" + fmt.encode_varint(2**64 - 5) + b"\5\1\2\3" + TIME,
            {
                "rule": "OCDBT-022",
                "message": "data_file_offset + data_file_length overflows 64 bits",
                "pointer": "@126",
                "got": (18446744073709551611, 5),
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0" + NONE + NONE + b"\1\2\3" + TIME,
            {
                "rule": "OCDBT-033",
                "message": "root_height must be 0 when a version has no root node",
                "pointer": "@122",
                "got": 1,
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0\5\7" + LONG_VARINT + b"\2\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint num_keys longer than 10 bytes",
                "pointer": "@128",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0\5\7\1" + LONG_VARINT + b"\3" + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint num_tree_bytes longer than 10 bytes",
                "pointer": "@129",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\1\1\0\5\7\1\2" + LONG_VARINT + TIME,
            {
                "rule": "OCDBT-008",
                "message": "varint num_indirect_value_bytes longer than 10 bytes",
                "pointer": "@130",
            },
        ),
        (
            VERSION_LEAF_HEAD + b"\x90\1\1\0\5\7\1\2\3" + TIME[:7],  # generation 144
            {
                "rule": "OCDBT-007",
                "message": "truncated: commit_time needs 8 bytes",
                "pointer": "@132",
                "expected": 8,
                "got": 7,
            },
        ),
    ],
)
def test_version_errors_name_offset_field_and_rule(body, message):
    """Kills `_leaf_versions`' field names, offsets, and messages."""
    assert error_of(lambda: _version_leaf_node(body)) == {"file": "d/x", **message}


@pytest.mark.parametrize("last, accepted", [(16, True), (17, False)])
def test_a_leaf_holds_the_versions_of_one_run_of_two_to_the_arity(last, accepted):
    """At arity_log2 4 a leaf holds generations 16k+1 .. 16k+16: 15 and 16 share one, 15 and
    17 do not, in a version tree leaf node as in a manifest."""
    body = b"\4\0\1\3\0d/x\2" + bytes([15, last]) + b"\1\1\0\0\5\5\7\7\1\1\2\2\3\3" + TIME * 2
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    versions = tuple(
        fmt.BtreeGenerationReference(
            fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), g, 1, g
        )
        for g in (15, last)
    )
    config = fmt.Config(b"\1" * 16, 0, 8, 1 << 20, 4, None)
    manifest = fmt.Manifest(config, versions, ())
    data = fmt.encode_manifest(manifest, compression=0)
    if accepted:
        assert [v.generation_number for v in _version_leaf_node(body).entries] == [15, 16]
        assert fmt.decode_manifest(data) == manifest
    else:
        assert error_of(lambda: _version_leaf_node(body)) == {
            "rule": "OCDBT-031",
            "file": "d/x",
            "message": (
                "a version tree leaf node holds more versions than the version tree arity allows"
            ),
            "pointer": "@122",
            "expected": "<= 1",
            "got": 2,
        }
        assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {
            "rule": "OCDBT-031",
            "file": "m",
            "message": "the manifest holds more versions than the version tree arity allows",
            "pointer": "@43",
            "expected": "<= 1",
            "got": 2,
        }


# --------------------------------------------------------------------------------------------
# decode_manifest: the configuration and what follows it

UUID = b"\1" * 16
# manifest_kind 1 (numbered), max_inline_value_bytes 8, max_decoded_node_bytes 2**20 (3 bytes)
NUMBERED = UUID + b"\1\x08\x80\x80\x40"


def _manifest_body(body: bytes) -> fmt.Manifest:
    return fmt.decode_manifest(fmt.encode_envelope(M, body), file="m")


def test_a_numbered_kind_manifest_holds_its_configuration_alone():
    """Arity 16 is the largest; the body starts at 14 (after the envelope header)."""
    assert _manifest_body(NUMBERED + b"\x10\0").config == fmt.Config(
        UUID, fmt.MANIFEST_KIND_NUMBERED, 8, 1 << 20, 16, None
    )


@pytest.mark.parametrize(
    "body, message",
    [
        (
            UUID[:15],
            {
                "rule": "OCDBT-007",
                "message": "truncated: uuid needs 16 bytes",
                "pointer": "@14",
                "expected": 16,
                "got": 15,
            },
        ),
        (
            UUID,
            {
                "rule": "OCDBT-007",
                "message": "truncated: manifest_kind needs 1 bytes",
                "pointer": "@30",
                "expected": 1,
                "got": 0,
            },
        ),
        (
            UUID + b"\2\x08\x80\x80\x40\x04\0",
            {
                "rule": "OCDBT-010",
                "message": "unknown manifest_kind",
                "pointer": "@30",
                "expected": "0 or 1",
                "got": 2,
            },
        ),
        (
            UUID + b"\1" + LONG_VARINT + b"\x80\x80\x40\x04\0",
            {
                "rule": "OCDBT-008",
                "message": "varint max_inline_value_bytes longer than 10 bytes",
                "pointer": "@31",
            },
        ),
        (
            UUID + b"\1\x08" + LONG_VARINT + b"\x04\0",
            {
                "rule": "OCDBT-008",
                "message": "varint max_decoded_node_bytes longer than 10 bytes",
                "pointer": "@32",
            },
        ),
        (
            NUMBERED,
            {
                "rule": "OCDBT-007",
                "message": "truncated: version_tree_arity_log2 needs 1 bytes",
                "pointer": "@35",
                "expected": 1,
                "got": 0,
            },
        ),
        (
            NUMBERED + b"\0\0",
            {
                "rule": "OCDBT-011",
                "message": "version_tree_arity_log2 out of range",
                "pointer": "@35",
                "expected": "1..16",
                "got": 0,
            },
        ),
        (
            NUMBERED + b"\x11\0",
            {
                "rule": "OCDBT-011",
                "message": "version_tree_arity_log2 out of range",
                "pointer": "@35",
                "expected": "1..16",
                "got": 17,
            },
        ),
        (
            NUMBERED + b"\4" + LONG_VARINT,
            {
                "rule": "OCDBT-008",
                "message": "varint compression_method longer than 10 bytes",
                "pointer": "@36",
            },
        ),
        (
            NUMBERED + b"\4\2",
            {
                "rule": "OCDBT-012",
                "message": "unknown compression_method",
                "pointer": "@36",
                "expected": "0 or 1",
                "got": 2,
            },
        ),
        (
            NUMBERED + b"\4\0\0",
            {
                "rule": "OCDBT-007",
                "message": "1 unexpected bytes after the configuration of a numbered-kind manifest",
                "pointer": "@37",
                "expected": 0,
                "got": 1,
            },
        ),
    ],
)
def test_manifest_configuration_errors_name_offset_field_and_rule(body, message):
    """Kills `decode_manifest`'s field names, offsets, bounds and messages."""
    assert error_of(lambda: _manifest_body(body)) == {"file": "m", **message}


@pytest.mark.parametrize("node_generation", [15, 16, 17])
def test_version_tree_nodes_hold_only_generations_before_the_inline_versions(node_generation):
    """A manifest's version tree nodes end before its first inline version (here 17), and
    its data file table is kept; bytes after the last field are counted and named."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), 17, 1, 17
    )
    node = fmt.VersionNodeReference(loc, node_generation, 1, 4, 8)
    config = fmt.Config(UUID, 0, 8, 1 << 20, 4, None)
    manifest = fmt.Manifest(config, (version,), (node,))
    data = fmt.encode_manifest(manifest, compression=0)
    if node_generation < 17:
        got = fmt.decode_manifest(data)
        assert (got, got.data_file_table) == (manifest, (FILE,))
    else:
        assert error_of(lambda: fmt.decode_manifest(data, file="m")) == {
            "rule": "OCDBT-032",
            "file": "m",
            "message": (
                "version_tree_nodes must hold only generations older than the inline versions"
            ),
            "pointer": "@75",
            "got": (17, 17),
        }
    body = fmt.decode_envelope(fmt.encode_manifest(fmt.Manifest(config, (version,), ())), magic=M)
    assert error_of(lambda: _manifest_body(body.body + b"\0")) == {
        "rule": "OCDBT-007",
        "file": "m",
        "message": "1 unexpected bytes after the manifest",
        "pointer": "@61",
        "expected": 0,
        "got": 1,
    }


# --------------------------------------------------------------------------------------------
# _prefix_lengths: 64 keys or more are compared as rows of a byte matrix


def _shared(a: bytes, b: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


@pytest.mark.parametrize("count", [63, 64, 100])
def test_many_keys_store_the_prefix_each_shares_with_the_key_before(count):
    """Keys of different lengths, some the prefix of the next (where the matrix's zero
    padding must not count as shared), some differing in their first or last byte: the
    prefix column is the longest common prefix of each key with the one before, with 63
    keys (compared pairwise) as with 64 or more (compared as a matrix)."""
    rng = random.Random(count)
    keys = set()
    while len(keys) < count:
        stem = bytes(rng.choice(b"ab\0") for _ in range(rng.randrange(0, 6)))
        keys.add(stem)
        keys.add(stem + b"\0")
        keys.add(stem + bytes([rng.randrange(256)]) * rng.randrange(1, 4))
    keys = sorted(keys)[:count]
    node = fmt.BtreeNode(0, tuple(fmt.LeafNodeEntry(k, b"") for k in keys))
    body = fmt.decode_envelope(fmt.encode_btree_node(node, compression=0), magic=B).body
    prefixes = [_shared(a, b) for a, b in zip(keys, keys[1:], strict=False)]
    assert max(prefixes) < 128 and count < 128  # one byte per varint
    assert body[:3] == bytes([0, 0, count])
    assert list(body[3 : 3 + count - 1]) == prefixes
    assert list(body[2 + count : 2 + 2 * count]) == [
        len(k) - p for k, p in zip(keys, [0, *prefixes], strict=True)
    ]
    assert _btree(body).entries == node.entries


# --------------------------------------------------------------------------------------------
# the encoders: defaults, refusals, base paths, 64-bit times; _Cursor.varints' bounds


def test_structures_are_compressed_at_zstds_default_level_unless_told():
    """Level 0 (zstd's default, 3) unless a level is given: the bytes differ from level 1's.
    Kills `encode_envelope` 2 and `encode_btree_node` 3 (default level 1); ids at 88f069a."""
    rng = random.Random(1)
    body = bytes(rng.choice(b"abcdefgh") for _ in range(20000))
    assert zstandard.ZstdCompressor(level=1).compress(body) != (
        zstandard.ZstdCompressor(level=3).compress(body)
    )
    assert fmt.encode_envelope(M, body, compression=1) == fmt.encode_envelope(
        M, body, compression=1, level=0
    )
    assert fmt.encode_envelope(M, body, compression=1) != fmt.encode_envelope(
        M, body, compression=1, level=1
    )
    keys = [b"k%05d" % i + bytes(rng.choice(b"ab") for _ in range(30)) for i in range(300)]
    node = fmt.BtreeNode(0, tuple(fmt.LeafNodeEntry(k, b"v") for k in keys))
    assert fmt.encode_btree_node(node) == fmt.encode_btree_node(node, level=0)
    assert fmt.encode_btree_node(node) != fmt.encode_btree_node(node, level=1)


@pytest.mark.parametrize(
    "config_compression, compression, expected",
    [
        (None, None, 0),
        (fmt.ZstdCompression(0), None, 1),
        (None, 1, 1),
        (fmt.ZstdCompression(0), 0, 0),
    ],
)
def test_a_manifest_is_compressed_as_its_configuration_says_unless_told(
    config_compression, compression, expected
):
    """Kills `_compression_of` 3, 6 and `encode_manifest` 36-38 (the configuration's
    compression not followed, or the caller's ignored); ids at 88f069a."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(loc, fmt.BtreeNodeStatistics(0, 1, 1)), 1, 1, 1
    )
    config = fmt.Config(UUID, 0, 8, 1 << 20, 4, config_compression)
    manifest = fmt.Manifest(config, (version,), ())
    data = fmt.encode_manifest(manifest, compression=compression)
    assert fmt.decode_envelope(data, magic=M).compression == expected
    assert fmt.decode_manifest(data) == manifest


def test_encoders_refuse_what_they_cannot_write_and_say_why():
    """Kills `encode_envelope` 10-12 and `_encode_table` 4-6 (messages); ids at 88f069a."""
    with pytest.raises(ValueError, match=r"^compression must be 0 or 1$"):
        fmt.encode_envelope(M, b"", compression=2)
    ref = fmt.IndirectDataReference(fmt.DataFileId(b"b/", b"x"), 0, 1)
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"k", ref),))
    with pytest.raises(ValueError, match=r"^a data file's base path must start with the "):
        fmt.encode_btree_node(node, transitive_path=b"a/")


@pytest.mark.parametrize("seed", range(6))
def test_data_files_with_different_base_paths_round_trip(seed):
    """Files whose base paths differ, share prefixes or nest, under a transitive path: the
    table written shares no more than the decoder allows and decodes to the same files.
    Kills `_encode_table` 28, 30, 31, 36-40 (the shared prefix against differing base
    paths); ids at 88f069a."""
    rng = random.Random(seed)
    files = set()
    while len(files) < 12:
        base = bytes(rng.choice(b"ab/") for _ in range(rng.randrange(0, 4)))
        rel = bytes(rng.choice(b"ab/x") for _ in range(rng.randrange(1, 4)))
        files.add(fmt.DataFileId(b"t/" + base, rel))
    entries = tuple(
        fmt.LeafNodeEntry(b"k%02d" % i, fmt.IndirectDataReference(f, i, 1))
        for i, f in enumerate(sorted(files, key=lambda f: f.base_path))
    )
    node = fmt.BtreeNode(0, entries)
    data = fmt.encode_btree_node(node, transitive_path=b"t/", compression=0)
    got = fmt.decode_btree_node(data, transitive_path=b"t/")
    assert got == node
    assert set(got.data_file_table) == files


def test_commit_times_use_all_64_bits_unsigned():
    """Kills `_encode_interior_versions` 27 (`<q`: signed); ids at 88f069a."""
    loc = fmt.IndirectDataReference(FILE, 5, 7)
    node = fmt.VersionTreeNode(1, 4, (fmt.VersionNodeReference(loc, 16, 0, 16, 2**64 - 1),))
    assert fmt.decode_version_tree_node(fmt.encode_version_tree_node(node)) == node


def test_structures_decode_from_a_memoryview_as_from_bytes():
    """The CRC-32C of a memoryview is that of its bytes. Kills `crc32c` 4 (`bytes(None)`); ids
    at 88f069a."""
    node = fmt.BtreeNode(0, (fmt.LeafNodeEntry(b"k", b"v"),))
    data = fmt.encode_btree_node(node)
    assert bytecodecs.crc32c(memoryview(data)) == bytecodecs.crc32c(data)
    assert fmt.decode_btree_node(memoryview(data)) == node


def test_a_column_of_varints_checks_its_least_size_and_takes_its_bound():
    """n varints need n bytes (named when they are not there); a value equal to the bound,
    read on the slow path (3 bytes), is accepted. Kills `_Cursor.varints` 2 and 48; ids at
    88f069a."""
    assert error_of(lambda: _btree(b"\0\0\2\0\1\1ab\0")) == {
        "rule": "OCDBT-007",
        "file": "d/n",
        "message": "truncated: value_length needs 2 bytes",
        "pointer": "@122",
        "expected": 2,
        "got": 1,
    }
    node = _btree(b"\0\1\xff\xff\3\0" + b"p" * 65535 + ENTRY)
    assert node.data_file_table == (fmt.DataFileId(b"", b"p" * 65535),)
