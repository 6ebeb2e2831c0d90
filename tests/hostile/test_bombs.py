"""Bombs (issue 17, items 4 and 5): files that are small or plain but would make a reader claim
far more memory than they hold, built from copies of real Orbax checkpoints.

- A `_METADATA` of nested brackets: the nesting pre-scan of `documents._json` reads the document
  in windows, so its memory does not grow with the file (the whole-document scan it replaced
  took about 16 bytes a bracket: 3.3 GB for 250 MB); the document is refused with `JSON-003`.
- An OCDBT node whose zstd frame declares no content size: it is decoded up to the bound its
  manifest's configuration gives (`format.node_bound`, spec/ocdbt.md section 5.1) and no
  further, keeping one copy, and refused with `OCDBT-006` naming the data file and the bound.

Entry points run in a subprocess under an address-space limit (tests/support/children/hostile.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import zstandard

import ockpt
from ockpt import bytecodecs
from ockpt.documents import _json
from ockpt.errors import DocumentError, OcdbtError
from ockpt.limits import LIMITS, Limits, applied
from ockpt.ocdbt import format as fmt
from ockpt.ocdbt.tree import Database
from tests.support import CHILDREN, FIXTURES, HAVE_TENSORSTORE, flat_leaves
from tests.support.errors import assert_error

CHILD = CHILDREN / "hostile.py"
SECONDS = 30
OCDBT = FIXTURES / "orbax-0.12.8" / "nested"  # OCDBT root database, zarr v2, _METADATA

API = ["load_pytree", "load_pytree:tensorstore", "pytree_metadata", "open"]
VALIDATE = ["validate", "validate:deep"]
COMMANDS = ["cli:inspect", "cli:cat", "cli:tree", "cli:convert", "cli:diff", "cli:validate"]


def _run(path: Path, entries: list[str], *, as_bytes: int) -> dict:
    # without tensorstore (OCKPT_BLOCK_TENSORSTORE), its engine's entries are left out
    entries = [e for e in entries if HAVE_TENSORSTORE or not e.endswith(":tensorstore")]
    env = {
        **os.environ,
        "OCKPT_HOSTILE_SECONDS": str(SECONDS),
        "OCKPT_HOSTILE_AS_BYTES": str(as_bytes),
    }
    done = subprocess.run(
        [sys.executable, str(CHILD), str(path), *entries],
        capture_output=True,
        text=True,
        timeout=SECONDS * len(entries) + 60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_refused(results: dict, rule: str, peak_mb: float, *, naming: str = "") -> None:
    for entry, got in results.items():
        where = f"{entry}: {got}"
        assert got["outcome"] not in ("escaped", "killed", "ok"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < peak_mb, where
        if entry.startswith("cli:"):
            assert got["exit"] == 1 and f"[{rule}]" in got["output"], where
            assert naming in got["output"] and "Traceback" not in got["output"], where
        elif entry.startswith("validate"):
            assert got["outcome"] == "invalid" and rule in got["rules"], where
        else:
            assert got["outcome"] == "refused" and got["rule"] == rule, where
            assert naming in got["message"], where


# ---------------------------------------------------------------------------------------------
# the JSON nesting pre-scan

_STRING = re.compile(r'"[^"]*"')


def _whole_document_depth(text: str) -> int:
    """The scan the windowed one replaced (the whole document at once), as the oracle."""
    opens = text.count("{") + text.count("[")
    if opens < LIMITS.max_depth:
        return opens
    text = text.replace("\\\\", "").replace('\\"', "")
    text = "".join(c for c in text if c in '"[]{}')
    brackets = _STRING.sub("", text)
    if not brackets:
        return 0
    steps = [1 if c in "{[" else -1 for c in brackets]
    return max(0, int(np.cumsum(steps).max()))


def test_windowed_scan_equals_the_whole_document_scan(monkeypatch):
    """Escapes, strings, an unclosed string and runs of backslashes across window boundaries:
    the same depth as the whole-document scan, for text and for its UTF-8 bytes."""
    rng = random.Random(17)
    alphabet = ['"', "[", "]", "{", "}", "\\", "a", "é", "[", "{", '"', "\\\\", '\\"']
    for _ in range(400):
        weights = [rng.random() for _ in alphabet]
        doc = "".join(rng.choices(alphabet, weights, k=rng.randint(0, 300)))
        if rng.random() < 0.6:
            doc = "[" * rng.randint(60, 80) + doc
        want = _whole_document_depth(doc)
        for window in (1, 2, 3, 7, 64, 1 << 20):
            monkeypatch.setattr(_json, "_SCAN_WINDOW", window)
            assert _json._bracket_depth(doc) == want, (doc, window)
            assert _json._bracket_depth(doc.encode()) == want, (doc, window)


def test_scan_memory_does_not_grow_with_the_document():
    """A full scan of 64 MB of brackets (nesting 32M deep) holds a few windows, not 16 bytes a
    bracket (the whole-document scan: over 1 GiB)."""
    n = 32 << 20
    doc = b"[" * n + b"]" * n
    tracemalloc.start()
    try:
        assert _json._bracket_depth(doc) == n
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    with pytest.raises(DocumentError) as e:  # stops at the limit, then refused
        _json.parse_json(doc, file="_METADATA", streamed={"tree_metadata": lambda k, v: v})
    assert e.value.rule == "JSON-003"


def test_bracket_bomb_metadata_is_refused_in_bounded_memory(tmp_path):
    """A 100 MB `_METADATA` of brackets in a real Orbax checkpoint: every entry point that reads
    it refuses with JSON-003 under a 2 GiB address-space limit (the whole-document scan needed
    about 2 GB for the scan alone and raised MemoryError)."""
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    n = 50_000_000
    (root / "_METADATA").write_bytes(b"[" * n + b"]" * n)
    entries = ["load_pytree", "pytree_metadata", "open", *VALIDATE, "cli:inspect", "cli:tree"]
    results = _run(root, entries, as_bytes=2 << 30)
    # the file, its text and the interpreter: about 2 x 100 MB and what ockpt imports
    _assert_refused(results, "JSON-003", peak_mb=700)


# ---------------------------------------------------------------------------------------------
# Wide documents (issue 32 item 1): breadth, not depth. A parse builds a Python object for every
# value; what a document may hold is bounded by `max_json_values` (JSON-003), counted before
# the parse: at C speed when the whole text is within it, else outside strings (`_values`).


def _reference_values(text: str, start: int = 0, *, whole: bool) -> tuple[int, int]:
    """`_json._values` one character at a time: the oracle."""
    if not whole and text[start] not in "[{":
        return start, 1
    count, depth, in_string, escaped = 1, 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            count, depth = count + 1, depth + 1
        elif c in "]}":
            depth -= 1
            if not whole and depth == 0:
                return i + 1, count
        elif c in ",:":
            count += 1
    return len(text), count


def test_the_value_count_follows_its_rule_for_every_window(monkeypatch):
    """Strings holding separators, brackets, escaped quotes and runs of backslashes, ASCII and
    not, across window boundaries: the same count and end as the oracle."""
    rng = random.Random(32)

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 4 or r < 0.3:
            return rng.choice([1, "a,b", 'x\\"[', "é:{", None, "\\\\", True, "]]"])
        if r < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(["k", "q,", '"]']): value(depth + 1) for _ in range(rng.randint(0, 3))}

    for window in (1, 2, 3, 7, 64, 1 << 20):
        monkeypatch.setattr(_json, "_SCAN_WINDOW", window)
        for _ in range(60):
            pad = " " * rng.randint(0, 3)
            text = pad + json.dumps(value(0), ensure_ascii=rng.random() < 0.5) + " "
            got = _json._values(text, len(pad), whole=False)
            assert got == _reference_values(text, len(pad), whole=False), (window, text)
            assert _json._values(text, whole=True) == _reference_values(text, whole=True)
            assert _json._values(text, whole=True)[1] <= _json._quick_values(text)


def _wide(n: int, *, entries: int = 0) -> bytes:
    """A `_METADATA` with `entries` plain tree entries and a member "x" of `n` empty lists."""
    tree = ", ".join(
        f'"(\'k{i}\',)": {{"key_metadata": [{{"key": "k{i}", "key_type": 2}}], '
        '"value_metadata": {"value_type": "scalar", "skip_deserialize": false}}'
        for i in range(entries)
    )
    return b'{"tree_metadata": {' + tree.encode() + b'}, "x": [' + b"[]," * n + b"[]]}"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_wide_member_is_refused_before_it_is_built(streamed, monkeypatch):
    """The attack: a `_METADATA` whose unknown member holds thousands of empty lists. Refused
    (JSON-003, naming the file and the count) before `json` builds it, by the whole parse (the
    whole document counts) and by the streamed parse of a large document (the members it keeps
    count; the tree's entries one at a time); at exactly the limit it is read."""
    monkeypatch.setattr(_json, "_STREAM_ABOVE", 0 if streamed else 1 << 30)
    data = _wide(5_000, entries=3)
    text = data.decode()
    x = text.index('"x"') + 5
    whole = _json._values(text, whole=True)[1]
    # streamed: the document's root, the name "x" and its value; the tree's entries aside
    count = 2 + _json._values(text, x, whole=False)[1] if streamed else whole
    built: list[int] = []
    real = _json._DECODER.raw_decode

    class Spy:  # what the streamed parse decodes
        def raw_decode(self, text, at):  # type: ignore[no-untyped-def]
            built.append(at)
            return real(text, at)

    monkeypatch.setattr(_json, "_DECODER", Spy())
    tree = {"tree_metadata": lambda key, value: key}
    with applied(Limits(max_json_values=count)):
        got = _json.parse_json(data, file="m", streamed=tree)
    assert len(got["tree_metadata"]) == 3 and len(got["x"]) == 5_001
    built.clear()
    with applied(Limits(max_json_values=count - 1)), pytest.raises(DocumentError) as e:
        _json.parse_json(data, file="m", streamed=tree)
    assert (e.value.rule, e.value.file, e.value.got) == ("JSON-003", "m", count)
    assert e.value.expected == f"<= {count - 1} values and member names"
    assert x not in built  # refused, never decoded


def test_metadata_documents_are_bounded_on_every_path():
    """`MetadataDocument.from_bytes` (its plain fast path, the streamed and the whole parse)
    refuses the wide document under a low limit and reads it under the default."""
    from ockpt.documents import MetadataDocument

    for data in (_wide(2_000, entries=2), _wide(2_000, entries=2).replace(b": ", b":")):
        assert len(MetadataDocument.from_bytes(data, file="m").extra["x"]) == 2_001
        with applied(Limits(max_json_values=1_000)), pytest.raises(DocumentError) as e:
            MetadataDocument.from_bytes(data, file="m")
        assert e.value.rule == "JSON-003"


def test_a_wide_tree_entry_is_refused_before_it_is_built(monkeypatch):
    """One entry of a streamed tree_metadata holding the bomb: counted before it is decoded."""
    from ockpt.documents import MetadataDocument

    monkeypatch.setattr(_json, "_STREAM_ABOVE", 0)
    data = b'{"tree_metadata": {"(\'k\',)": [' + b"[]," * 5_000 + b"[]]}}"
    with applied(Limits(max_json_values=9_000)), pytest.raises(DocumentError) as e:
        MetadataDocument.from_bytes(data, file="m")
    assert e.value.rule == "JSON-003" and e.value.got > 9_000


def test_commas_inside_strings_do_not_count(monkeypatch):
    """The C-speed bound counts separators inside strings; past the limit the count outside
    strings decides, so a document of long strings full of commas is read."""
    text = json.dumps(["," * 5_000, ":[{" * 1_000])
    assert _json._quick_values(text) > 8_000 and _json._values(text, whole=True)[1] == 3
    with applied(Limits(max_json_values=3)):
        assert _json.parse_json(text, file="s") == json.loads(text)
    with applied(Limits(max_json_values=2)), pytest.raises(DocumentError) as e:
        _json.parse_json(text, file="s")
    assert_error(e, rule="JSON-003", file="s")


@pytest.mark.slow  # the slow matrix: a 34M-value document
def test_wide_metadata_bomb_is_refused_in_bounded_memory(tmp_path):
    """The issue's document: 240 MB of ``[],`` (80M empty lists) in an unknown member of a real
    checkpoint's `_METADATA`, default limits. It took 84 s and 6.3 GB, then succeeded; now every
    entry point refuses it with JSON-003 under twice the file's size of resident memory (the
    file is read once, and counted before it is decoded); 3.2 s on a quiet 2-core machine
    (`ockpt tree` of it), not asserted here beyond the suite's 30 s bound."""
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    doc = json.loads((root / "_METADATA").read_bytes())
    head = json.dumps(doc)[:-1].encode()
    n = 80_000_000
    with open(root / "_METADATA", "wb") as f:
        f.write(head + b', "x": [')
        for _ in range(n // 10_000_000):
            f.write(b"[]," * 10_000_000)
        f.write(b"[]]}")
    size_mb = (root / "_METADATA").stat().st_size / 2**20
    results = _run(root, ["pytree_metadata", "validate", "cli:tree"], as_bytes=3 << 30)
    _assert_refused(results, "JSON-003", peak_mb=2 * size_mb)  # and within the 30 s bound


# ---------------------------------------------------------------------------------------------
# zstd frames without a content size


def _stream_frame(*pieces: bytes, repeat: int = 1) -> bytes:
    """One zstd frame written by the streaming compressor: no content size in its header."""
    c = zstandard.ZstdCompressor(level=1).compressobj()
    out = [c.compress(p) for _ in range(repeat) for p in pieces]
    frame = b"".join(out) + c.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    return frame


def _rule(excinfo) -> str:  # type: ignore[no-untyped-def]
    return excinfo.value.rule


@pytest.mark.parametrize("steps", [False, True], ids=["one-call", "steps"])
@pytest.mark.parametrize("size", [1, 1000, 5_000_001])
def test_frame_without_content_size_decodes_up_to_the_bound(monkeypatch, size, steps):
    """Exactly at the bound a frame decodes, one byte over it is refused (OCDBT-006): in one
    call, and in the bounded steps that name the faults (then decoded again, into one
    buffer)."""
    if steps:  # a frame the header walk does not accept takes the steps
        monkeypatch.setattr(bytecodecs, "_zstd_walk", lambda data: None)
    raw = np.random.default_rng(size).integers(0, 4, size, dtype=np.uint8).tobytes()
    frame = _stream_frame(raw)
    assert bytecodecs.zstd_decompress(frame, max_output_size=size) == raw
    assert bytecodecs.zstd_decompress(frame, max_output_size=1 << 30) == raw
    with pytest.raises(OcdbtError) as e:
        bytecodecs.zstd_decompress(frame, max_output_size=size - 1, file="d/x")
    assert_error(e, rule="OCDBT-006", file="d/x", expected=f"<= {size - 1}")


def test_frame_faults_are_named():
    frame = _stream_frame(b"abc" * 1000)
    with pytest.raises(OcdbtError) as e:
        bytecodecs.zstd_decompress(frame[:-3], max_output_size=1 << 20)
    assert_error(e, rule="OCDBT-006")
    assert "truncated" in e.value.message
    # bytes after the frame, also where the frame ends exactly at a step of the stream decoder
    pad = (-len(frame)) % bytecodecs._ZSTD_STEP
    for extra in (b"x", b"x" * bytecodecs._ZSTD_STEP):
        with pytest.raises(OcdbtError) as e:
            bytecodecs.zstd_decompress(frame + b"\0" * pad + extra, max_output_size=1 << 20)
        assert_error(e, rule="OCDBT-006")
        assert "bytes after the zstd frame" in e.value.message
    sized = zstandard.ZstdCompressor().compress(b"abc" * 1000)
    with pytest.raises(OcdbtError) as e:
        bytecodecs.zstd_decompress(sized, max_output_size=2999)
    assert_error(e, rule="OCDBT-006")
    assert "content size exceeds" in e.value.message


def test_node_bound_follows_the_manifest():
    orbax = fmt.Config(b"\0" * 16, 0, 1024, 100_000_000, 4, fmt.ZstdCompression(0))
    assert fmt.node_bound(orbax) == 200_000_000 + 4 * 1024 + (16 << 10) + (1 << 20)
    assert fmt.node_bound(orbax, limit=1000) == 1000
    no_target = fmt.Config(b"\0" * 16, 0, 1024, 0, 4, None)
    assert fmt.node_bound(no_target) == LIMITS.max_node_bytes
    huge = fmt.Config(b"\0" * 16, 0, 1 << 62, 1 << 63, 16, None)
    assert fmt.node_bound(huge) == LIMITS.max_node_bytes


def test_nodes_tensorstore_writes_stay_within_the_bound(tmp_path):
    """A target of 1 byte, keys of up to 65,000 bytes and inline values of 64 KiB: tensorstore's
    nodes exceed `max_decoded_node_bytes` by their one (two) entries, and stay far within the
    bound."""
    from tests.support.ocdbt import write_database

    rng = random.Random(5)
    keys = [b"k%03d" % i + b"x" * rng.choice([0, 100, 30_000, 65_000]) for i in range(24)]
    config = {"max_decoded_node_bytes": 1, "max_inline_value_bytes": 1 << 16}
    path = write_database(tmp_path / "db", [{k: b"z" * (1 << 16) for k in keys}], config=config)
    bodies = []
    decode = fmt.decode_envelope

    def spy(data, **kw):  # type: ignore[no-untyped-def]
        env = decode(data, **kw)
        bodies.append(len(env.body))
        return env

    fmt.decode_envelope = spy
    try:
        db = Database(path)
        assert [k for k, _ in db.entries()] == sorted(keys)
    finally:
        fmt.decode_envelope = decode
    assert db.node_bound < 2 << 20 and max(bodies) < db.node_bound / 4


# ---------------------------------------------------------------------------------------------
# OCDBT nodes of a real Orbax checkpoint, replaced


def _envelope(magic: int, frame: bytes) -> bytes:
    """A structure whose body is `frame` as it is (encode_envelope compresses with a content
    size)."""
    tail = fmt.encode_varint(0) + fmt.encode_varint(1) + frame
    head = struct.pack(">I", magic) + struct.pack("<Q", 12 + len(tail) + 4)
    return head + tail + struct.pack("<I", bytecodecs.crc32c(head + tail))


def _replace_root_node(
    root: Path, *, extra: int = 0, max_decoded_node_bytes: int | None = None
) -> str:
    """Re-encode the root B+tree node of the item database at `root` with a zstd frame that
    declares no content size, its body followed by `extra` zero bytes (a node past its end
    decodes to more than the bound, or is refused for the bytes left over); optionally with
    another `max_decoded_node_bytes` in the manifest. Returns the node's data file."""
    db = Database(root)
    manifest = db.manifest
    version = manifest.versions[-1]
    ref = version.root.location
    name = ref.file_id.path.decode()
    data = (root / name).read_bytes()[ref.offset : ref.offset + ref.length]
    body = fmt.decode_envelope(data, magic=fmt.BTREE_NODE_MAGIC).body
    db.close()
    zeros = bytes(1 << 24)
    frame = _stream_frame(body, *[zeros] * (extra // len(zeros)), zeros[: extra % len(zeros)])
    node = _envelope(fmt.BTREE_NODE_MAGIC, frame)
    (root / name).write_bytes(node)
    location = fmt.IndirectDataReference(ref.file_id, 0, len(node))
    new_version = fmt.BtreeGenerationReference(
        fmt.BtreeNodeReference(location, version.root.statistics),
        version.generation_number,
        version.root_height,
        version.commit_time,
    )
    config = manifest.config
    if max_decoded_node_bytes is not None:
        config = fmt.Config(
            config.uuid,
            config.manifest_kind,
            config.max_inline_value_bytes,
            max_decoded_node_bytes,
            config.version_tree_arity_log2,
            config.compression,
        )
    new = fmt.Manifest(config, (*manifest.versions[:-1], new_version), manifest.version_tree_nodes)
    (root / "manifest.ocdbt").write_bytes(fmt.encode_manifest(new))
    return name


def _leaves(path: Path) -> dict:
    return {k: np.asarray(v) for k, v in flat_leaves(ockpt.load_pytree(path, backend="python"))}


def test_node_without_content_size_within_the_bound_decodes(tmp_path):
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    _replace_root_node(root)
    want, got = _leaves(OCDBT / "checkpoint"), _leaves(root)
    assert want.keys() == got.keys()
    for k in want:
        assert want[k].tobytes() == got[k].tobytes(), k
    assert ockpt.validate(root).ok


def test_node_past_the_manifests_bound_is_refused(tmp_path):
    """The bound is the manifest's: with `max_decoded_node_bytes` 1 MiB, a node decoding to
    8 MiB is refused at its bound (3,166,208 bytes), naming the data file; with Orbax's
    100,000,000 the same node decodes, and is refused for the bytes after its fields."""
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    name = _replace_root_node(root, extra=8 << 20, max_decoded_node_bytes=1 << 20)
    db = Database(root)
    bound = db.node_bound
    assert bound == fmt.node_bound(db.config) == (2 << 20) + 4096 + (16 << 10) + (1 << 20)
    with pytest.raises(OcdbtError) as e:
        db.get(b"x")
    assert_error(e, rule="OCDBT-006", expected=f"<= {bound}")
    assert e.value.file.endswith(name)
    with pytest.raises(OcdbtError) as e:
        ockpt.load_pytree(root, backend="python")
    assert _rule(e) == "OCDBT-006"

    shutil.rmtree(root)
    shutil.copytree(OCDBT / "checkpoint", root)
    _replace_root_node(root, extra=8 << 20)
    with pytest.raises(OcdbtError) as e:
        Database(root).get(b"x")
    assert _rule(e) == "OCDBT-007"


def test_node_bomb_is_refused_in_bounded_memory(tmp_path):
    """The node of issue 17: a data file of about 40 KB whose frame decodes to 1 GiB (the old
    reader: 2.1 GB). Every entry point that reads the tree refuses with OCDBT-006 naming the
    data file, holding no more than the bound (Orbax's configuration: about 201 MB)."""
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    name = _replace_root_node(root, extra=1 << 30)
    assert (root / name).stat().st_size < 64 << 10
    entries = ["load_pytree", "pytree_metadata", "open", *VALIDATE, "cli:inspect", "cli:cat"]
    results = _run(root, entries, as_bytes=4 << 30)
    _assert_refused(results, "OCDBT-006", peak_mb=600, naming=name)


# ---------------------------------------------------------------------------------------------
# zarr chunks: the same decoder, bounded by the chunk's decoded size

PER_LEAF = FIXTURES / "orbax-0.12.8" / "no_ocdbt"  # one zarr v2 directory per leaf, zstd


def test_chunk_without_content_size(tmp_path):
    """A zarr chunk whose frame declares no content size decodes as the original; one that
    decodes to 1 GiB is refused at the chunk's 24 bytes (ZARR-003) by both engines, holding
    no more than a step of the stream decoder."""
    root = tmp_path / "item"
    shutil.copytree(PER_LEAF / "checkpoint", root)
    chunk = root / "a" / "0.0"
    raw = zstandard.ZstdDecompressor().decompress(chunk.read_bytes())
    chunk.write_bytes(_stream_frame(raw))
    assert _leaves(root)[("a",)].tobytes() == _leaves(PER_LEAF / "checkpoint")[("a",)].tobytes()
    chunk.write_bytes(_stream_frame(raw, bytes(1 << 24), repeat=64))
    results = _run(root, ["load_pytree", "load_pytree:tensorstore", "open"], as_bytes=4 << 30)
    _assert_refused(results, "ZARR-003", peak_mb=300, naming="0.0")


# ---------------------------------------------------------------------------------------------
# Many small leaves (issue 32 item 5): LIMIT-006 counts them together


def test_many_small_leaves_are_checked_together(tmp_path):
    """96 leaves of 32 MiB of zeros (3 GiB declared, a few MB stored), each under the 64 MiB a
    check of one allocation starts at, loaded under a 2 GiB address-space limit: refused with
    LIMIT-006 naming a leaf, not a MemoryError, because the smaller allocations are checked
    each time they add up to 64 MiB."""
    import ockpt

    path = tmp_path / "c"
    zeros = np.zeros(8 << 20, np.float32)
    ockpt.save_pytree(path, {f"w{i:02d}": zeros for i in range(96)})
    results = _run(path, ["load_pytree"], as_bytes=2 << 30)
    _assert_refused(results, "LIMIT-006", peak_mb=2100, naming="and the smaller ones before it")


def test_a_frame_of_millions_of_empty_blocks_is_not_walked_block_by_block():
    """A zstd frame of empty raw blocks (3 bytes each, decoding to nothing): the header walk
    reads at most `_ZSTD_WALK_BLOCKS` blocks in Python (a frame of the largest chunk a reader
    takes has fewer) and leaves a longer frame to the streaming decoder, which reads them at C
    speed; 10^8 of them took minutes (issue 32 item 5). The result is unchanged: b""."""

    def frame(blocks: int) -> bytes:
        return b"\x28\xb5\x2f\xfd\x00\x50" + b"\x00\x00\x00" * (blocks - 1) + b"\x01\x00\x00"

    most = bytecodecs._ZSTD_WALK_BLOCKS
    assert bytecodecs.zstd_frame_size(frame(most)) == len(frame(most))
    assert bytecodecs.zstd_frame_size(frame(most + 1)) is None
    bomb = frame(20 * most)
    assert bytecodecs.zstd_decompress(bomb, max_output_size=1 << 20) == b""
    with pytest.raises(OcdbtError) as e:
        bytecodecs.zstd_decompress(bomb + b"\x00", max_output_size=1 << 20)
    assert_error(e, rule="OCDBT-006")
    assert "bytes after the zstd frame" in e.value.message


def test_the_kept_count_walks_members_in_memory_independent_of_their_size():
    """`_kept_values` (the bytes walk of a streamed document's top-level members) counts every
    member but the streamed ones, as `_values` counts each; a 20 MB member name is stepped
    over with `bytes.find` (a regular expression's repetition held gigabytes for one)."""
    rng = random.Random(320)

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice([1, -2.5e3, "a,b", 'x\\"[', "é:{", None, True, "\\\\", ""])
        if r < 0.6:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        keys = ["k", "q,", '"]', "tree_metadata"]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 3))}

    for _ in range(500):
        doc = {rng.choice(["a", "tree_metadata", "b,:", 'c"']): value(0) for _ in range(4)}
        raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
        want = 1 + sum(
            1 + _json._values(json.dumps(v), whole=True)[1]
            for k, v in doc.items()
            if k != "tree_metadata"
        )
        assert _json._kept_values(raw, {"tree_metadata": None}, 1 << 40) == want, raw
    long_name = b'{"' + b"a" * (20 << 20) + b'": [1, 2], "tree_metadata": {}}'
    tracemalloc.start()
    try:
        assert _json._kept_values(long_name, {"tree_metadata": None}, 1 << 40) == 5
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (64 << 20), peak  # the name's bytes and its text once each, not per character
