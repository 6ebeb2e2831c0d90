"""Fuzz targets: one function per parser of untrusted checkpoint bytes.

Each target takes arbitrary bytes and must either return or raise an allowed error (a
`ockpt.FormatError`, the family of every failure caused by the bytes of a checkpoint). Any
other exception, a hang or an unbounded allocation is a bug. The same targets drive the bounded
hypothesis tests (``tests/hostile/test_fuzz_parsers.py``) and the long-running harness (``fuzz/run.py``).

A target's first input byte chooses a variant (which document, which decoder, which seed file);
the rest is the payload. `seeds(name)` gives well-formed inputs (from the golden fixtures and
from ockpt's own writer) that mutation starts from.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
try:
    import ockpt
except ImportError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "reference"))
    import ockpt
from ockpt import bytecodecs  # noqa: E402
from ockpt import documents as docs  # noqa: E402
from ockpt.documents import _json  # noqa: E402
from ockpt.errors import FormatError  # noqa: E402
from ockpt.limits import Limits, applied  # noqa: E402
from ockpt.msgpack_legacy import decode_checkpoint, placeholders, to_json_view  # noqa: E402
from ockpt.ocdbt import format as ocdbt_format  # noqa: E402
from ockpt.zarr import read_region, stream  # noqa: E402
from ockpt.zarr.v2 import ArrayV2Metadata  # noqa: E402
from ockpt.zarr.v3 import ArrayV3Metadata  # noqa: E402

FIXTURES = ROOT / "fixtures"

#: What a target may raise: the bytes are bad (FormatError and its per-layer subclasses).
ALLOWED: tuple[type[BaseException], ...] = (FormatError,)

#: Bounds passed to the decoders so that one case stays small (the defaults are far larger).
_MAX_DECODED = 1 << 22
_MAX_ELEMENTS = 1 << 20


# ---------------------------------------------------------------------------------------------
# JSON documents


_DOCUMENTS: tuple[type, ...] = (
    docs.MetadataDocument,
    docs.CheckpointMetadata,
    docs.RootMetadata,
    docs.ShardingDocument,
    docs.ArrayMetadatas,
    docs.StringsDocument,
)


def _outcome_of(parse: Callable[[], object]) -> object:
    """What `parse` gives, or the rule of the FormatError it raises."""
    try:
        return parse()
    except FormatError as e:
        return e.rule


def json_target(data: bytes) -> None:
    """Parse one JSON document; a parsed document must re-encode and re-parse to itself. With
    the first byte's high bits set, also under a budget of a few values (`max_json_values`)
    and with every document parsed streamed: the same document, or JSON-003."""
    if not data:
        return
    cls = _DOCUMENTS[data[0] % len(_DOCUMENTS)]
    if data[0] >> 4:
        body = data[1:]
        want = _outcome_of(lambda: cls.from_bytes(body, file="fuzz").to_json())
        above, _json._STREAM_ABOVE = _json._STREAM_ABOVE, 0
        try:
            with applied(Limits(max_json_values=(data[0] >> 4) * 8)):
                got = _outcome_of(lambda: cls.from_bytes(body, file="fuzz").to_json())
        finally:
            _json._STREAM_ABOVE = above
        assert got == want or got == "JSON-003", ("under a budget", got, want)
        return
    doc = cls.from_bytes(data[1:], file="fuzz")
    again = cls.from_bytes(doc.to_bytes(), file="fuzz")
    assert again.to_json() == doc.to_json(), "round trip changed the document"
    if isinstance(doc, docs.StringsDocument):
        for i, name in enumerate(doc.names()):
            if i > 100:
                break
            doc.get(name)
    elif isinstance(doc, docs.MetadataDocument):
        doc.by_param_name()
    elif isinstance(doc, docs.ShardingDocument):
        dict(doc.shardings)


# ---------------------------------------------------------------------------------------------
# the legacy msgpack file


def msgpack_target(data: bytes) -> None:
    """Decode one msgpack file; under a budget of 32 values (`max_json_values`) it decodes to
    the same tree, or is refused with MSGPACK-001."""
    budgeted = len(data) % 2  # half of the cases, by length, also under a budget
    if budgeted:
        with applied(Limits(max_json_values=32)):
            got = _outcome_of(lambda: to_json_view(decode_checkpoint(data, file="fuzz")))
    tree = decode_checkpoint(data, file="fuzz")
    if budgeted:
        assert got in ("MSGPACK-001", to_json_view(tree)), ("under a budget", got)
    to_json_view(tree)
    placeholders(tree, file="fuzz")


# ---------------------------------------------------------------------------------------------
# OCDBT manifests, version nodes and B+tree nodes

_OCDBT = (
    ocdbt_format.decode_manifest,
    ocdbt_format.decode_version_tree_node,
    ocdbt_format.decode_btree_node,
)


_MAGICS = (
    ocdbt_format.MANIFEST_MAGIC,
    ocdbt_format.VERSION_NODE_MAGIC,
    ocdbt_format.BTREE_NODE_MAGIC,
)


def _reseal(data: bytes) -> bytes:
    """Fix an envelope's length and CRC-32C after an edit, so decoding looks past them."""
    if len(data) < 16:
        return data
    data = data[:4] + len(data).to_bytes(8, "little") + data[12:]
    return data[:-4] + bytecodecs.crc32c(data[:-4]).to_bytes(4, "little")


def ocdbt_target(data: bytes) -> None:
    """Variant byte: kind = v % 4 (manifest, version node, B+tree node); bit 7: the payload is
    an uncompressed body that the target wraps in a valid envelope; bit 6: fix the length and
    CRC of a raw envelope (mutations then reach the body, which a CRC would otherwise guard)."""
    if not data:
        return
    kind = data[0] % 4 % len(_OCDBT)
    payload = data[1:]
    if data[0] & 0x80:
        payload = ocdbt_format.encode_envelope(_MAGICS[kind], payload, compression=0)
    elif data[0] & 0x40:
        payload = _reseal(payload)
    _OCDBT[kind](payload, file="fuzz", max_decoded_bytes=_MAX_DECODED)


# ---------------------------------------------------------------------------------------------
# zarr metadata (.zarray, zarr.json)


def _touch(meta) -> None:  # type: ignore[no-untyped-def]
    """Use what a reader uses of parsed metadata: grid, chunk keys, fill, a small read."""
    _ = meta.numpy_dtype, meta.fill
    shape = meta.shape
    n = int(np.prod(shape, dtype=object)) if shape else 1
    if n * meta.numpy_dtype.itemsize > _MAX_ELEMENTS:
        return
    out = np.empty(shape, meta.numpy_dtype)
    read_region(meta, lambda key: None, out, file="fuzz")


def zarr_metadata_target(data: bytes) -> None:
    if not data:
        return
    cls = (ArrayV2Metadata, ArrayV3Metadata)[data[0] % 2]
    meta = cls.from_bytes(data[1:], file="fuzz")
    again = cls.from_dict(meta.to_dict(), file="fuzz")
    assert again.to_dict() == meta.to_dict(), "round trip changed the metadata"
    _touch(meta)


# ---------------------------------------------------------------------------------------------
# chunk payloads and zarr v3 shard indexes, under fixed metadata


def _v2(compressor: object, dtype: str = "<i4", shape=(8, 8), chunks=(8, 8), order="C") -> bytes:
    import json

    return json.dumps(
        {
            "zarr_format": 2,
            "shape": list(shape),
            "chunks": list(chunks),
            "dtype": dtype,
            "compressor": compressor,
            "fill_value": 0,
            "order": order,
            "filters": None,
        }
    ).encode()


def _v3(codecs: list, dtype: str = "int32", shape=(8, 8), chunks=(8, 8)) -> bytes:
    import json

    return json.dumps(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(shape),
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": codecs,
        }
    ).encode()


_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
_ZSTD = {"name": "zstd", "configuration": {"level": 1}}


def _sharded(inner_codecs: list, index_at: str = "end") -> list:
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [4, 4],
                "codecs": inner_codecs,
                "index_codecs": [_BYTES, {"name": "crc32c"}],
                "index_location": index_at,
            },
        }
    ]


@functools.cache
def _chunk_metadatas() -> tuple:
    raw = [
        _v2(None),
        _v2({"id": "zstd", "level": 1}),
        _v2({"id": "gzip", "level": 1}),
        _v2({"id": "zstd", "level": 1}, dtype="|b1", order="F"),
        _v3([_BYTES]),
        _v3([_BYTES, _ZSTD]),
        _v3([_BYTES, {"name": "gzip", "configuration": {"level": 1}}]),
        _v3([_BYTES, {"name": "crc32c"}]),
        _v3([{"name": "transpose", "configuration": {"order": [1, 0]}}, _BYTES, _ZSTD]),
        _v3(_sharded([_BYTES, _ZSTD])),
        _v3(_sharded([_BYTES])),
        _v3(_sharded([_BYTES, _ZSTD], index_at="start")),
    ]
    out = []
    for text in raw:
        cls = ArrayV2Metadata if b'"zarr_format": 2' in text else ArrayV3Metadata
        out.append(cls.from_bytes(text, file="seed"))
    return tuple(out)


def _fix_crc(i: int, payload: bytes) -> bytes:
    """Recompute the CRC-32C a mutation broke (crc32c codec, shard index), for variant i."""
    crc = bytecodecs.crc32c
    if i == 7 and len(payload) >= 4:
        return payload[:-4] + crc(payload[:-4]).to_bytes(4, "little")
    if i in (9, 10) and len(payload) >= 68:
        return payload[:-4] + crc(payload[-68:-4]).to_bytes(4, "little")
    if i == 11 and len(payload) >= 68:
        return payload[:64] + crc(payload[:64]).to_bytes(4, "little") + payload[68:]
    return payload


def chunk_target(data: bytes) -> None:
    """Decode `data[1:]` as every chunk of a fixed array (codec chain chosen by `data[0] % 16`;
    bit 7 fixes the CRC-32C of the chunk or shard index first)."""
    if not data:
        return
    metas = _chunk_metadatas()
    i = (data[0] & 0x7F) % len(metas)
    meta = metas[i]
    payload = data[1:]
    if data[0] & 0x80:
        payload = _fix_crc(i, payload)
    out = np.empty(meta.shape, meta.numpy_dtype)
    decoded = _outcome(lambda: read_region(meta, lambda key: payload, out, file="fuzz"))
    streamed = _outcome(lambda: _check_streamed(meta, payload))
    if streamed is not None and _rule(streamed) != _rule(decoded):  # the validator's check
        raise AssertionError(f"streamed check: {streamed}, decoding in memory: {decoded}")
    if isinstance(decoded, FormatError):
        raise decoded


def _outcome(fn: Callable[[], object]) -> object:
    """What `fn` gives: "ok", False (no streamed check), or the FormatError it raised."""
    try:
        return "ok" if fn() is not False else None
    except FormatError as e:
        return e


def _rule(outcome: object) -> object:
    return outcome.rule if isinstance(outcome, FormatError) else outcome


def _check_streamed(meta: ArrayV2Metadata | ArrayV3Metadata, payload: bytes) -> bool:
    """The deep validator's check of one chunk too large for memory (`zarr.stream`)."""
    if getattr(meta, "sharding", None) is not None:
        return stream.check_shard(meta, payload, file="fuzz", missing="fill")
    if not stream.streamable(meta.pipeline):
        return False
    nbytes = int(np.prod(meta.chunk_shape)) * meta.numpy_dtype.itemsize
    return stream.check_chunk(meta.pipeline, io.BytesIO(payload), nbytes, file="fuzz", pointer=None)


# ---------------------------------------------------------------------------------------------
# whole checkpoints: one file of a golden fixture replaced by the payload, then loaded

#: (fixture case, file inside its checkpoint directory) pairs whose bytes the target replaces.
CHECKPOINT_FILES: tuple[tuple[str, str], ...] = (
    ("orbax-0.12.8/sharded", "_METADATA"),
    ("orbax-0.12.8/sharded", "manifest.ocdbt"),
    ("orbax-0.12.8/sharded", "_sharding"),
    ("orbax-0.12.8/sharded", "array_metadatas/process_0"),
    ("orbax-0.12.8/scalars_strings", "_strings.json"),
    ("orbax-0.12.8/scalars_strings", "_METADATA"),
    ("orbax-0.12.8/no_ocdbt", "_METADATA"),
    ("orbax-0.12.8/zarr3", "manifest.ocdbt"),
    ("orbax-0.12.8/nested", "manifest.ocdbt"),
    ("orbax-0.3.5/aggregated", "checkpoint"),
    ("orbax-0.3.5/aggregated", "tensorstore_leaf/.zarray"),
    ("orbax-0.3.5/aggregated", "tensorstore_leaf/0"),
    ("orbax-0.3.5/scalars_strings", "checkpoint"),
)


def _data_files(case: str) -> list[str]:
    """The OCDBT data files (d/...) of a fixture, which also hold nodes."""
    root = FIXTURES / case / "checkpoint"
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.parent.name == "d"
    )


@functools.cache
def _checkpoint_files() -> tuple[tuple[str, str], ...]:
    extra = [("orbax-0.12.8/sharded", f) for f in _data_files("orbax-0.12.8/sharded")]
    extra += [("orbax-0.12.8/zarr3", f) for f in _data_files("orbax-0.12.8/zarr3")]
    return tuple(
        (case, name)
        for case, name in CHECKPOINT_FILES + tuple(extra)
        if (FIXTURES / case / "checkpoint" / name).is_file()
    )


class _Workspace:
    """Copies of the fixtures in a temporary directory; a case overwrites one file and puts the
    original bytes back afterwards (so the copy is made once, not per case)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ockpt-fuzz-"))
        self.copies: dict[str, Path] = {}

    def copy(self, case: str) -> Path:
        if case not in self.copies:
            dst = self.dir / case.replace("/", "_")
            shutil.copytree(FIXTURES / case / "checkpoint", dst)
            self.copies[case] = dst
        return self.copies[case]

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


_WORKSPACE: _Workspace | None = None


def _workspace() -> _Workspace:
    global _WORKSPACE
    if _WORKSPACE is None:
        _WORKSPACE = _Workspace()
    return _WORKSPACE


def checkpoint_target(data: bytes) -> None:
    """Load a fixture with one file replaced by `data[1:]` (python backend; then the metadata
    tree). The file is restored afterwards."""
    if not data:
        return
    files = _checkpoint_files()
    case, name = files[data[0] % len(files)]
    root = _workspace().copy(case)
    path = root / name
    original = path.read_bytes()
    path.write_bytes(data[1:])
    try:
        ockpt.load_pytree(root, backend="python")
        ockpt.pytree_metadata(root, backend="python")
    finally:
        path.write_bytes(original)


# ---------------------------------------------------------------------------------------------
# whole directories: file kinds, links and sizes


#: Fixtures a directory case starts from (small, of every storage kind and era).
DIRECTORY_CASES = (
    "orbax-0.12.8/nested",
    "orbax-0.12.8/no_ocdbt",
    "orbax-0.12.8/v1_checkpointables",
    "orbax-0.12.8/manager",
    "orbax-0.3.5/scalars_strings",
    "orbax-0.3.5/manager",
)
#: Sizes a file may be cut or (sparsely) grown to: around the limits, and absurd.
_SIZES = (0, 1, 7, 64, 4096, 1 << 20, 1 << 26, (1 << 34) + 1, (1 << 40) + 3)
_OPERATIONS = ("fifo", "directory", "loop", "link_out", "dangling", "resize", "delete", "link_in")


def _mutate(root: Path, outside: Path, entries: list[Path], op: int, pick: int, arg: int) -> None:
    """One change of file kind, link or size at one entry of the copy `root`."""
    if not entries:
        return
    target = entries[pick % len(entries)]
    what = _OPERATIONS[op % len(_OPERATIONS)]
    if not (target.exists() or target.is_symlink()):
        return  # removed by an earlier change
    if what == "resize":
        if target.is_file() and not target.is_symlink():
            with open(target, "r+b") as f:
                f.truncate(_SIZES[arg % len(_SIZES)])  # grows sparsely: no bytes written
        return
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink()
    if what == "fifo":
        os.mkfifo(target)
    elif what == "directory":
        target.mkdir()
    elif what == "loop":
        os.symlink(target.name, target)
    elif what == "link_out":
        os.symlink(outside, target)
    elif what == "dangling":
        os.symlink(target.name + ".gone", target)
    elif what == "link_in":  # a link to another entry of the checkpoint (allowed)
        os.symlink(os.path.relpath(entries[arg % len(entries)], target.parent), target)


def directory_target(data: bytes) -> None:
    """Load, describe and validate a fixture after changes of file kind (FIFO, directory,
    link loop), links (leading out, dangling, inside) and sizes (cut, grown sparsely past the
    limits): `data[0]` picks the fixture, each further 3 bytes one change. Every entry point
    must answer or raise `FormatError` (a missing or no longer recognised checkpoint is a
    `NotACheckpointError`, also allowed here), at once."""
    if not data:
        return
    case = DIRECTORY_CASES[data[0] % len(DIRECTORY_CASES)]
    with tempfile.TemporaryDirectory(prefix="ockpt-fuzz-dir-") as tmp:
        root = Path(tmp) / "checkpoint"
        shutil.copytree(FIXTURES / case / "checkpoint", root)
        outside = Path(tmp) / "outside"
        outside.write_bytes(b"SECRET OUTSIDE BYTES")
        entries = sorted(root.rglob("*"))
        for i in range(1, len(data) - 2, 3):
            _mutate(root, outside, entries, data[i], data[i + 1], data[i + 2])
        for read in (
            lambda: ockpt.load_pytree(root, backend="python"),
            lambda: ockpt.pytree_metadata(root, backend="python"),
            lambda: ockpt.validate(root),
            lambda: ockpt.detect(root),
        ):
            try:
                read()
            except ockpt.NotACheckpointError:
                pass  # the changes left no checkpoint, or not the one asked for
            except FormatError as e:
                assert b"SECRET" not in str(e).encode(), e  # nothing outside is shown


# ---------------------------------------------------------------------------------------------
# registry and seeds

TARGETS: dict[str, Callable[[bytes], None]] = {
    "json": json_target,
    "msgpack": msgpack_target,
    "ocdbt": ocdbt_target,
    "zarr": zarr_metadata_target,
    "chunk": chunk_target,
    "checkpoint": checkpoint_target,
    "directory": directory_target,
}


def _fixture_files(pattern: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted(FIXTURES.glob(pattern)) if p.is_file()]


def _json_seeds() -> list[bytes]:
    names = {
        0: "orbax-*/*/checkpoint/_METADATA",
        1: "orbax-*/*/checkpoint/_CHECKPOINT_METADATA",
        2: "orbax-*/manager*/checkpoint/_ROOT_METADATA",
        3: "orbax-*/*/checkpoint/_sharding",
        4: "orbax-*/*/checkpoint/array_metadatas/process_0",
        5: "orbax-*/*/checkpoint/_strings.json",
    }
    out = []
    for kind, pattern in names.items():
        files = _fixture_files(pattern)
        # the smallest few of each kind: mutation works best on short inputs
        out += [bytes([kind]) + f for f in sorted(files, key=len)[:4]]
    return out


def _msgpack_seeds() -> list[bytes]:
    files = _fixture_files("orbax-*/*/checkpoint/checkpoint")
    files += _fixture_files("orbax-*/*/checkpoint/*/checkpoint")
    return sorted(set(files), key=len)[:8]


def _ocdbt_seeds() -> list[bytes]:
    from ockpt.ocdbt.tree import Database

    out = [bytes([0]) + f for f in sorted(_fixture_files("orbax-*/*/checkpoint/manifest.ocdbt"))]
    out = out[:6]
    for case in ("orbax-0.12.8/sharded", "orbax-0.12.8/nested"):
        with Database(FIXTURES / case / "checkpoint") as db:
            m = db.manifest
            for ref in m.version_tree_nodes[:2]:
                out.append(bytes([1]) + _raw(db, ref.location))
            for version in m.versions[-1:]:
                if version.root is not None:
                    out.append(bytes([2]) + _raw(db, version.root.location))
    bodies = []
    for seed in out:
        kind = seed[0] % 3
        env = ocdbt_format.decode_envelope(seed[1:], magic=_MAGICS[kind])
        bodies.append(bytes([0x80 | kind]) + env.body)  # the decoded body, in a fresh envelope
        bodies.append(bytes([0x40 | kind]) + seed[1:])  # raw, resealed after mutation
    return out + bodies


def _raw(db, ref) -> bytes:  # type: ignore[no-untyped-def]
    """The stored bytes of a node reference, undecoded (`Database.read_range`)."""
    return db.read_range(ref)


def _zarr_seeds() -> list[bytes]:
    out = [bytes([0]) + f for f in _fixture_files("orbax-*/*/checkpoint/*/.zarray")[:6]]
    out += [bytes([1]) + f for f in _fixture_files("orbax-*/*/checkpoint/*/zarr.json")[:6]]
    import json

    for m in _chunk_metadatas():
        kind = 0 if isinstance(m, ArrayV2Metadata) else 1
        out.append(bytes([kind]) + json.dumps(m.to_dict()).encode())
    return out


def _chunk_seeds() -> list[bytes]:
    out = _encode_chunks()
    return out + [bytes([0x80 | s[0]]) + s[1:] for s in out if s[0] in (7, 9, 10, 11)]


def _encode_chunks() -> list[bytes]:
    """A valid chunk (or shard) for each fixed metadata, written by ockpt's own encoder."""
    import zstandard

    values = np.arange(64, dtype="<i4").reshape(8, 8)
    raw = values.tobytes()
    out = []
    for i, meta in enumerate(_chunk_metadatas()):
        v = values.astype(meta.numpy_dtype)
        b = (np.asfortranarray(v).tobytes("F")) if i == 3 else v.tobytes()
        if i in (0, 4):
            out.append(bytes([i]) + b)
        elif i in (1, 3, 5):
            out.append(bytes([i]) + zstandard.ZstdCompressor().compress(b))
        elif i in (2, 6):
            out.append(bytes([i]) + _gzip(b))
        elif i == 7:
            out.append(bytes([i]) + raw + ockpt_crc(raw).to_bytes(4, "little"))
        elif i == 8:
            t = np.ascontiguousarray(values.T).tobytes()
            out.append(bytes([i]) + zstandard.ZstdCompressor().compress(t))
        else:
            out.append(bytes([i]) + _shard(values, compress=i != 10, index_first=i == 11))
    return out


def _gzip(b: bytes) -> bytes:
    import gzip

    return gzip.compress(b)


def ockpt_crc(b: bytes) -> int:
    return bytecodecs.crc32c(b)


def _shard(values: np.ndarray, *, compress: bool, index_first: bool) -> bytes:
    import zstandard

    chunks = []
    for idx in np.ndindex(2, 2):
        sl = tuple(slice(i * 4, (i + 1) * 4) for i in idx)
        b = values[sl].tobytes()
        chunks.append(zstandard.ZstdCompressor().compress(b) if compress else b)
    index_size = 4 * 16 + 4
    data = bytearray()
    entries = []
    base = index_size if index_first else 0
    for c in chunks:
        entries += [base + len(data), len(c)]
        data += c
    idx = np.array(entries, "<u8").tobytes()
    idx += ockpt_crc(idx).to_bytes(4, "little")
    return idx + bytes(data) if index_first else bytes(data) + idx


def _checkpoint_seeds() -> list[bytes]:
    out = []
    for i, (case, name) in enumerate(_checkpoint_files()):
        out.append(bytes([i]) + (FIXTURES / case / "checkpoint" / name).read_bytes())
    return out


def _directory_seeds() -> list[bytes]:
    """One seed a fixture and operation: each change alone, at a few entries."""
    out = []
    for case in range(len(DIRECTORY_CASES)):
        for op in range(len(_OPERATIONS)):
            out.append(bytes([case, op, 3 * op + case, op]))
    return out


_SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "json": _json_seeds,
    "msgpack": _msgpack_seeds,
    "ocdbt": _ocdbt_seeds,
    "zarr": _zarr_seeds,
    "chunk": _chunk_seeds,
    "checkpoint": _checkpoint_seeds,
    "directory": _directory_seeds,
}


@functools.cache
def seeds(name: str) -> tuple[bytes, ...]:
    """Well-formed inputs for target `name` (each with its variant byte first)."""
    return tuple(_SEEDS[name]())


def check(name: str, data: bytes) -> BaseException | None:
    """Run target `name` on `data`: None when it passed or raised an allowed error, else the
    unexpected exception (a bug)."""
    try:
        TARGETS[name](data)
    except ALLOWED:
        return None
    except Exception as e:  # noqa: BLE001 - reporting anything else is the point
        return e
    return None


def cleanup() -> None:
    global _WORKSPACE
    if _WORKSPACE is not None:
        _WORKSPACE.close()
        _WORKSPACE = None


__all__ = ["TARGETS", "ALLOWED", "seeds", "check", "cleanup", "CHECKPOINT_FILES"]
