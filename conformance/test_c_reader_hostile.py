"""The example C reader on hostile input, built with AddressSanitizer and
UndefinedBehaviorSanitizer (``build(sanitize=True)``).

Every fixture, truncated and bit-flipped copies of their files (seeded, so every run tries the
same cases), a FIFO in place of a file, and checkpoints crafted to reach the bounds a reader
must check (spec/limits.md). Whatever the bytes, the reader must end by itself, never killed by
a signal, never with a sanitizer report, with its result or its usual refusal: ``error.json``
and exit status 1 (3: unsupported) for a read, ``RULE: message`` on stderr and exit status 1
for ``--list`` (conformance/README.md, "Command readers").
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ockpt.conformance import run as run_suite
from ockpt.conformance.command import OutputError, validate_output
from ockpt.conformance.fixture_cases import database_cases
from ockpt.ocdbt import Database
from ockpt.ocdbt.format import (
    BtreeGenerationReference,
    BtreeNode,
    BtreeNodeReference,
    BtreeNodeStatistics,
    Config,
    DataFileId,
    IndirectDataReference,
    InteriorNodeEntry,
    Manifest,
    crc32c,
    encode_btree_node,
    encode_envelope,
    encode_manifest,
    encode_varint,
)

from .conftest import FIXTURES, c_build

#: a sanitizer report ends the program with these exit statuses (not the reader's 1, 2 or 3)
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
}
SANITIZER_EXIT = {86: "AddressSanitizer", 87: "UndefinedBehaviorSanitizer"}
REPORT_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error", "LeakSanitizer")
TIMEOUT_S = 10
SEED = 20250101
WORKERS = max(2, min(4, os.cpu_count() or 2))

#: item fixtures whose files are cut and flipped: OCDBT with per-process databases, values
#: out of line, strings, per-leaf zarr; bare databases with interior nodes stored without
#: compression (their nodes are re-sealed with a correct CRC-32C after a flip, so that the
#: flip reaches the parser)
ITEMS = (
    "orbax-0.12.8/sharded",
    "orbax-0.12.8/ocdbt_values",
    "orbax-0.12.8/scalars_strings",
    "orbax-0.12.8/no_ocdbt",
)
DATABASES = ("tensorstore-0.1.86/btree_example", "tensorstore-0.1.86/version_tree_arity2")
#: files of an item the reader never opens
UNREAD = ("_CHECKPOINT_METADATA", "commit_success.txt", "array_metadatas")

MAGICS = (0x0CDB3A2A, 0x0CDB1234, 0x0CDB20DE)  # manifest, version tree node, B+tree node
BTREE_MAGIC = 0x0CDB20DE


@pytest.fixture(scope="module")
def build_module():
    return c_build()


@pytest.fixture(scope="module")
def sanitized(build_module, tmp_path_factory):
    try:
        return build_module.build(tmp_path_factory.mktemp("c_reader_sanitized"), sanitize=True)
    except build_module.Unavailable as e:
        pytest.skip(f"no sanitizer build of the example C reader here: {e}")


# -- running the reader -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run: ``--list DATABASE`` (`out` None) or ``--kind KIND TARGET OUT``."""

    label: str
    target: Path
    kind: str  # "pytree", "ocdbt" or "list"
    out: Path | None = None

    def argv(self, exe: Path) -> list[str]:
        if self.kind == "list":
            return [str(exe), "--list", str(self.target)]
        return [str(exe), "--kind", self.kind, str(self.target), str(self.out)]


def _execute(exe: Path, run: Run) -> subprocess.CompletedProcess | None:
    """The finished process, or None when it ran past `TIMEOUT_S` (killed then)."""
    env = dict(os.environ, **SANITIZER_ENV)
    try:
        return subprocess.run(
            run.argv(exe),
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None


def _report(stderr: str) -> str:
    """The lines of a sanitizer report that say what and where."""
    lines = stderr.splitlines()
    keep = [ln.strip() for ln in lines if any(m in ln for m in REPORT_MARKS)]
    frames = [ln.strip() for ln in lines if ln.strip().startswith("#") and "ockpt_c_reader.c" in ln]
    return " | ".join(keep[:2] + frames[:2])


def _protocol_problem(run: Run, status: int) -> str | None:
    """What is wrong with the output of a read that ended with `status` (None: nothing)."""
    assert run.out is not None
    try:
        if status in (1, 3):
            doc = json.loads((run.out / "error.json").read_text(encoding="utf-8"))
            validate_output(doc, "error")
            if bool(doc.get("unsupported")) != (status == 3):
                return f"exit status {status} with error.json {doc}"
            return None
        if status == 0:
            doc = json.loads((run.out / "result.json").read_text(encoding="utf-8"))
            validate_output(doc, "pytree_result" if run.kind == "pytree" else "keys_result")
            return None
    except (OSError, ValueError, OutputError) as e:  # JSON and UTF-8 errors are ValueErrors
        return f"exit status {status}, output not of the protocol: {type(e).__name__}: {e}"
    return f"exit status {status}"


def problem(exe: Path, run: Run) -> str | None:
    """None when the reader ended this run as it should; else what went wrong."""
    proc = _execute(exe, run)
    if proc is None:
        return f"{run.label}: still running after {TIMEOUT_S} s (killed)"
    stderr = proc.stderr.decode("utf-8", "replace")
    status = proc.returncode
    if status < 0:
        return f"{run.label}: killed by signal {-status} {_report(stderr)}"
    if status in SANITIZER_EXIT or any(m in stderr for m in REPORT_MARKS):
        return f"{run.label}: {SANITIZER_EXIT.get(status, 'sanitizer')}: {_report(stderr)}"
    if run.kind == "list":
        if status == 0 or (status == 1 and stderr.strip()):
            return None
        return f"{run.label}: exit status {status}: {stderr.strip()[-200:]}"
    why = _protocol_problem(run, status)
    return f"{run.label}: {why}" if why else None


def sweep(exe: Path, runs: list[Run]) -> None:
    """Run them all (a few at a time); fail listing every run that went wrong."""
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        problems = [p for p in pool.map(lambda r: problem(exe, r), runs) if p]
    shown = "\n".join(problems[:40])
    assert not problems, f"{len(problems)} of {len(runs)} runs went wrong:\n{shown}"


def _database_of(item: Path, rel: Path) -> Path | None:
    """The OCDBT database directory holding the file `rel` of `item` (None: not an OCDBT file)."""
    if rel.name == "manifest.ocdbt":
        return item / rel.parent
    if rel.parent.name == "d":
        return item / rel.parent.parent
    return None


# -- cases: copies of fixtures with one file changed ------------------------------------------


@dataclass(frozen=True)
class Source:
    """A fixture to damage: an item (read as a pytree) or a bare database."""

    name: str
    root: Path  # the directory handed to the reader
    database: bool

    def files(self, limit: int = 12) -> list[Path]:
        """The files the reader may open (relative), at most `limit`, spread over the list."""
        found = sorted(
            p.relative_to(self.root)
            for p in self.root.rglob("*")
            if p.is_file() and p.relative_to(self.root).parts[0] not in UNREAD
        )
        ocdbt = [p for p in found if p.name == "manifest.ocdbt"]
        rest = [p for p in found if p not in ocdbt]
        if len(rest) > limit - len(ocdbt):
            step = len(rest) / max(1, limit - len(ocdbt))
            rest = [rest[int(i * step)] for i in range(limit - len(ocdbt))]
        return ocdbt + rest


SOURCES = [Source(n, FIXTURES / n / "checkpoint", False) for n in ITEMS] + [
    Source(n, FIXTURES / n / "database", True) for n in DATABASES
]


def _case(source: Source, rel: Path, label: str, data: bytes, base: Path) -> list[Run]:
    """Copy `source` under `base`, write `data` over its file `rel`; the runs that read it."""
    copy = base / "in"
    shutil.copytree(source.root, copy)
    (copy / rel).write_bytes(data)
    if source.database:
        return [Run(label, copy, "list"), Run(label, copy, "ocdbt", base / "out")]
    runs = [Run(label, copy, "pytree", base / "out")]
    db = _database_of(copy, rel)
    if db is not None:
        runs.append(Run(label + " (--list)", db, "list"))
    return runs


def _cuts(n: int) -> list[int]:
    return sorted({c for c in (0, 1, 4, 13, 17, n // 2, n - 5, n - 1) if 0 <= c < n})


def _flip(data: bytes, rng: random.Random, lo: int = 0, hi: int | None = None) -> bytes:
    """`data` with 1 to 3 random bits of [lo, hi) flipped."""
    out = bytearray(data)
    hi = len(out) if hi is None else hi
    for _ in range(rng.randint(1, 3)):
        pos = rng.randrange(lo, hi)
        out[pos] ^= 1 << rng.randrange(8)
    return bytes(out)


def _reseals(source: Source, rel: Path) -> int:
    """How many re-sealed flips to try in this file: the manifests of the bare databases and
    the one data file of the B+tree of height 2 (the other database's data files are mostly
    old generations, which the reader does not open)."""
    if not source.database:
        return 0
    if rel.name == "manifest.ocdbt":
        return 16
    return 100 if source.name == "tensorstore-0.1.86/btree_example" else 0


def envelopes(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each OCDBT structure stored whole in `data` (magic, length, CRC)."""
    found = []
    for magic in MAGICS:
        at = data.find(struct.pack(">I", magic))
        while at >= 0:
            if at + 12 <= len(data):
                (length,) = struct.unpack_from("<Q", data, at + 4)
                end = at + length
                if 18 <= length and end <= len(data):
                    (crc,) = struct.unpack_from("<I", data, end - 4)
                    if crc32c(data[at : end - 4]) == crc:
                        found.append((at, length))
            at = data.find(struct.pack(">I", magic), at + 1)
    return sorted(found)


def _reseal(data: bytes, rng: random.Random) -> bytes | None:
    """`data` with bits flipped inside the body of one of its structures, its CRC-32C made
    right again, so that the reader decodes the damaged body (None: no structure)."""
    found = envelopes(data)
    if not found:
        return None
    at, length = rng.choice(found)
    body = at + 14  # magic, length, format version 0 and compression (one byte each)
    end = at + length - 4
    if body >= end:
        return None
    out = bytearray(_flip(data, rng, body, end))
    struct.pack_into("<I", out, end, crc32c(bytes(out[at:end])))
    return bytes(out)


# -- every fixture ----------------------------------------------------------------------------


def test_sanitized_reader_on_every_fixture(sanitized, tmp_path):
    """Every item directory and checkpoint of the fixtures (the bad corpus too) as a pytree,
    and every OCDBT database in them through ``--list`` and ``--kind ocdbt``."""
    items = {p.parent for p in FIXTURES.rglob("_METADATA")}
    items |= {p for p in FIXTURES.glob("*/*/checkpoint") if p.is_dir()}
    databases = {p.parent for p in FIXTURES.rglob("manifest.ocdbt")}
    runs = []
    for i, item in enumerate(sorted(items)):
        runs.append(Run(str(item.relative_to(FIXTURES)), item, "pytree", tmp_path / f"p{i}"))
    for i, db in enumerate(sorted(databases)):
        label = str(db.relative_to(FIXTURES))
        runs += [Run(label, db, "list"), Run(label, db, "ocdbt", tmp_path / f"o{i}")]
    assert len(items) > 150 and len(databases) > 300
    sweep(sanitized, runs)


def test_sanitized_reader_lists_the_keys_ockpt_lists(sanitized):
    for case in ("orbax-0.12.8/sharded", "orbax-0.5.15/zero_size", "orbax-0.4.8/numpy_dtypes"):
        db = FIXTURES / case / "checkpoint"
        proc = subprocess.run(
            [sanitized, "--list", str(db)],
            env=dict(os.environ, **SANITIZER_ENV),
            capture_output=True,
            check=True,
        )
        listed = [line.split(b"\t")[0] for line in proc.stdout.splitlines()]
        with Database(db) as ref:
            assert listed == ref.list(), case


def test_sanitized_reader_through_the_command_adapter(
    build_module, sanitized, tmp_path, monkeypatch
):
    """The suite's groups through the command adapter, as with the plain build: a sanitizer
    report would end a run without error.json, which the adapter scores as a failure."""
    monkeypatch.setenv("ASAN_OPTIONS", SANITIZER_ENV["ASAN_OPTIONS"])
    monkeypatch.setenv("UBSAN_OPTIONS", SANITIZER_ENV["UBSAN_OPTIONS"])
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_suite(
        [build_module.spec(sanitized)],
        fixtures=copy,
        groups=["fixtures", "bad_corpus", "databases"],
    )
    fails = [
        f"{r.group} {r.case}: [{r.rule}] {r.reason}" for r in result.results if r.status == "fail"
    ]
    assert not fails, "\n".join(fails)
    passed = sum(r.status == "pass" and r.group == "databases" for r in result.results)
    assert passed == len(database_cases(copy))


# -- damaged copies ---------------------------------------------------------------------------


def test_truncated_files(sanitized, tmp_path):
    """Each file the reader opens, cut at several points (empty, inside the envelope header,
    half way, a few bytes short)."""
    runs = []
    for source in SOURCES:
        for rel in source.files():
            data = (source.root / rel).read_bytes()
            for cut in _cuts(len(data)):
                label = f"{source.name}/{rel} cut at {cut} of {len(data)}"
                runs += _case(source, rel, label, data[:cut], tmp_path / f"t{len(runs):05d}")
    assert len(runs) > 300
    sweep(sanitized, runs)


def test_bit_flips(sanitized, tmp_path):
    """Seeded random bit flips: anywhere in each file (a flip in a structure mostly fails its
    CRC-32C; values and JSON documents carry none), and inside the bodies of the structures
    of the bare databases with their CRC-32C made right again."""
    runs = []
    for source in SOURCES:
        for rel in source.files():
            data = (source.root / rel).read_bytes()
            if not data:
                continue
            rng = random.Random(f"{SEED}:{source.name}/{rel}")
            for k in range(6):
                label = f"{source.name}/{rel} flip #{k}"
                flipped = _flip(data, rng)
                runs += _case(source, rel, label, flipped, tmp_path / f"f{len(runs):05d}")
            for k in range(_reseals(source, rel)):
                resealed = _reseal(data, rng)
                if resealed is None:
                    break
                label = f"{source.name}/{rel} resealed flip #{k}"
                runs += _case(source, rel, label, resealed, tmp_path / f"r{len(runs):05d}")
    assert len(runs) > 400
    sweep(sanitized, runs)


# -- special files ----------------------------------------------------------------------------

SHARDED = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"  # its values are all inline
#: a data file holding values out of line (the root database's table points into it)
VALUES = FIXTURES / "orbax-0.12.8" / "ocdbt_values" / "checkpoint"
VALUE_FILE = "ocdbt.process_0/d/14b86f76cfe1ed640bd49dd24582e0dc"


def _first(root: Path, pattern: str) -> str:
    return str(sorted(root.glob(pattern))[0].relative_to(root))


@pytest.mark.parametrize(
    ("root", "rel"),
    [
        (SHARDED, "manifest.ocdbt"),
        (SHARDED, _first(SHARDED, "d/*")),
        (SHARDED, "_METADATA"),
        (VALUES, VALUE_FILE),
        (FIXTURES / "orbax-0.12.8" / "scalars_strings" / "checkpoint", "_strings.json"),
        (FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint", "a/.zarray"),
        (FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint", "a/0.0"),
    ],
    ids=["manifest", "node", "_METADATA", "value", "_strings.json", ".zarray", "chunk"],
)
def test_fifo_in_place_of_a_file_is_refused(sanitized, tmp_path, root, rel):
    """A FIFO is never opened for reading as if it were a file (an open without O_NONBLOCK
    waits for a writer for ever): refused at once, PATH-005."""
    copy = tmp_path / "in"
    shutil.copytree(root, copy)
    (copy / rel).unlink()
    os.mkfifo(copy / rel)
    run = Run(f"FIFO at {rel}", copy, "pytree", tmp_path / "out")
    assert problem(sanitized, run) is None
    doc = json.loads((tmp_path / "out" / "error.json").read_text())
    assert doc["rule"] == "PATH-005", doc
    if rel == "manifest.ocdbt":
        proc = _execute(sanitized, Run(rel, copy, "list"))
        assert proc is not None, "--list waited on the FIFO"
        assert proc.returncode == 1 and proc.stderr.startswith(b"PATH-005: "), proc.stderr


def test_directory_in_place_of_a_file_is_refused(sanitized, tmp_path):
    copy = tmp_path / "in"
    shutil.copytree(VALUES, copy)
    (copy / VALUE_FILE).unlink()
    (copy / VALUE_FILE).mkdir()
    assert problem(sanitized, Run("dir", copy, "pytree", tmp_path / "out")) is None
    assert json.loads((tmp_path / "out" / "error.json").read_text())["rule"] == "PATH-005"


def test_link_leading_out_of_the_checkpoint_is_refused(sanitized, tmp_path):
    """A data file that is a symbolic link to a file outside the checkpoint: PATH-004."""
    copy = tmp_path / "in"
    shutil.copytree(VALUES, copy)
    rel = VALUE_FILE
    outside = tmp_path / "outside"
    shutil.copyfile(copy / rel, outside)
    (copy / rel).unlink()
    (copy / rel).symlink_to(outside)
    run = Run("link out", copy, "pytree", tmp_path / "out")
    assert problem(sanitized, run) is None
    assert json.loads((tmp_path / "out" / "error.json").read_text())["rule"] == "PATH-004"
    # a link that stays inside the checkpoint is followed
    (copy / rel).unlink()
    shutil.copyfile(outside, copy / "moved")
    (copy / rel).symlink_to(Path("../..") / "moved")
    run = Run("link in", copy, "pytree", tmp_path / "out2")
    assert problem(sanitized, run) is None
    assert (tmp_path / "out2" / "result.json").is_file()


# -- crafted checkpoints ----------------------------------------------------------------------


def _leaf_body(keys: list[tuple[int, bytes]], values: list[bytes]) -> bytes:
    """A B+tree leaf (spec/ocdbt.md §8.2) of inline values, keys given as (prefix length,
    suffix): written by hand, so that a prefix length can be wrong."""
    out = bytearray([0])  # height
    out += encode_varint(0)  # data file table: no files
    out += encode_varint(len(keys))
    for prefix, _ in keys[1:]:
        out += encode_varint(prefix)
    for _, suffix in keys:
        out += encode_varint(len(suffix))
    for _, suffix in keys:
        out += suffix
    for v in values:
        out += encode_varint(len(v))
    out += bytes(len(values))  # value_kind 0: inline
    for v in values:
        out += v
    return bytes(out)


def _database(path: Path, leaf_keys: list[tuple[int, bytes]]) -> None:
    """A database of height 1: a root whose one entry ``params/abc`` gives its leaf the key
    prefix ``params/`` (subtree_common_prefix_length 7), and that leaf."""
    (path / "d").mkdir(parents=True)
    file = DataFileId(b"", b"d/x")
    stats = BtreeNodeStatistics(0, 0, 0)
    leaf = encode_envelope(BTREE_MAGIC, _leaf_body(leaf_keys, [b"1"] * len(leaf_keys)))
    child = BtreeNodeReference(IndirectDataReference(file, 0, len(leaf)), stats)
    root = encode_btree_node(
        BtreeNode(1, (InteriorNodeEntry(b"params/abc", 7, child),)), compression=0
    )
    (path / "d" / "x").write_bytes(leaf + root)
    config = Config(b"\0" * 16, 0, 100, 1 << 20, 4, None)
    version = BtreeGenerationReference(
        BtreeNodeReference(IndirectDataReference(file, len(leaf), len(root)), stats), 1, 1, 0
    )
    (path / "manifest.ocdbt").write_bytes(encode_manifest(Manifest(config, (version,), ())))


def test_crafted_database_is_read(sanitized, tmp_path):
    """The crafted database of the next test with a right prefix length: both keys listed."""
    _database(tmp_path / "db", [(0, b"b"), (1, b"z")])
    proc = subprocess.run(
        [sanitized, "--list", str(tmp_path / "db")],
        env=dict(os.environ, **SANITIZER_ENV),
        capture_output=True,
        check=True,
    )
    assert [ln.split(b"\t")[0] for ln in proc.stdout.splitlines()] == [b"params/b", b"params/bz"]


def test_key_prefix_longer_than_the_previous_relative_key(sanitized, tmp_path):
    """A key_prefix_length of 5 after the relative key ``b`` (full key ``params/b``, 8 bytes):
    OCDBT-041, without reading past the previous key."""
    _database(tmp_path / "db", [(0, b"b"), (5, b"z")])
    db = tmp_path / "db"
    runs = [Run("list", db, "list"), Run("read", db, "ocdbt", tmp_path / "o")]
    sweep(sanitized, runs)
    doc = json.loads((tmp_path / "o" / "error.json").read_text())
    assert doc["rule"] == "OCDBT-041", doc


def _item(path: Path, zarray: dict | None = None, metadata: bytes | None = None) -> Path:
    """A per-leaf zarr item of one array ``x`` with this .zarray (JSON written as given)."""
    path.mkdir(parents=True)
    if metadata is None:
        metadata = json.dumps(
            {
                "tree_metadata": {
                    "('x',)": {
                        "key_metadata": [{"key": "x", "key_type": 2}],
                        "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False},
                    }
                },
                "use_zarr3": False,
            }
        ).encode()
    (path / "_METADATA").write_bytes(metadata)
    if zarray is not None:
        (path / "x").mkdir()
        (path / "x" / ".zarray").write_bytes(json.dumps(zarray).encode())
    return path


def _zarray(shape: list[int], chunks: list[int], dtype: str = "|u1") -> dict:
    return {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": dtype,
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }


def _read(sanitized: Path, item: Path, out: Path) -> dict:
    """Read `item` (it must end cleanly); its error.json or result.json."""
    assert problem(sanitized, Run(item.name, item, "pytree", out)) is None
    name = "error.json" if (out / "error.json").exists() else "result.json"
    return json.loads((out / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "document",
    [b"1", b"-12", b"3.5e1", b'{"tree_metadata": {}, "x": 12', b"[0"],
    ids=["integer", "negative", "exponent", "in-object", "in-list"],
)
def test_number_at_the_end_of_a_document(sanitized, tmp_path, document):
    """A number that runs to the last byte of the file: parsed without reading past it."""
    item = _item(tmp_path / "item", metadata=document)
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc.get("rule") in ("META-001", "JSON-001"), doc


@pytest.mark.parametrize(
    "token", [b"-Infinity", b"-nan", b"0x10", b"01", b"1.", b"-", b"1e", b".5"]
)
def test_numbers_outside_json_are_refused(sanitized, tmp_path, token):
    """strtod reads more than JSON allows (hexadecimal, infinities, leading zeros)."""
    body = b'{"tree_metadata": {}, "n": ' + token + b"}"
    doc = _read(sanitized, _item(tmp_path / "item", metadata=body), tmp_path / "out")
    assert doc.get("rule") == "JSON-001", doc


def test_npy_header_of_32_long_dimensions(sanitized, tmp_path):
    """An empty array of 32 dimensions, 31 of them 2^40 long: its .npy header is longer than a
    small buffer would hold."""
    item = _item(tmp_path / "item", _zarray([0] + [1 << 40] * 31, [1] * 32))
    doc = _read(sanitized, item, tmp_path / "out")
    assert "leaves" in doc or doc.get("unsupported") or doc.get("rule"), doc


def test_chunk_size_that_overflows(sanitized, tmp_path):
    """Chunks of 2^32 x 2^32 bytes: 2^64 wraps to 0 in 64-bit arithmetic."""
    item = _item(tmp_path / "item", _zarray([2, 1], [1 << 32, 1 << 32]))
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc.get("rule") == "ZARR-005" or doc.get("unsupported"), doc


def test_array_size_that_overflows(sanitized, tmp_path):
    """A shape of 2^32 x 2^32 bytes: 2^64 wraps to 0, but it is not an empty array."""
    item = _item(tmp_path / "item", _zarray([1 << 32, 1 << 32], [1, 1]))
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc.get("rule") == "ZARR-005" or doc.get("unsupported"), doc


def test_grid_of_too_many_chunks(sanitized, tmp_path):
    """2^25 chunks of one byte (spec/limits.md: at most 2^24 per array), none of them stored:
    refused before looking up each one."""
    item = _item(tmp_path / "item", _zarray([1 << 25], [1]))
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc.get("rule") == "ZARR-005", doc


@pytest.mark.parametrize(
    "dtype",
    [b"<f\xff4", b"<f\xc0\xb04", b"<f\xed\xa0\x804", b"<f\xe2\x82"],
    ids=["ff", "overlong", "surrogate", "cut"],
)
def test_invalid_utf8_is_refused_in_valid_json(sanitized, tmp_path, dtype):
    """A document that is not UTF-8 is refused (JSON-001), and error.json stays UTF-8."""
    item = _item(tmp_path / "item", _zarray([1], [1]))
    raw = (item / "x" / ".zarray").read_bytes().replace(b'"|u1"', b'"' + dtype + b'"')
    (item / "x" / ".zarray").write_bytes(raw)
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc.get("rule") == "JSON-001", doc


def test_bytes_of_a_path_in_a_message_stay_utf8(sanitized, tmp_path):
    """A data file path of the database that is not UTF-8 appears in the refusal's message
    as valid JSON text."""
    db = tmp_path / "db"
    (db / "d").mkdir(parents=True)
    file = DataFileId(b"", b"d/\xff\xfe")
    stats = BtreeNodeStatistics(0, 0, 0)
    config = Config(b"\0" * 16, 0, 100, 1 << 20, 4, None)
    version = BtreeGenerationReference(
        BtreeNodeReference(IndirectDataReference(file, 0, 30), stats), 1, 0, 0
    )
    (db / "manifest.ocdbt").write_bytes(encode_manifest(Manifest(config, (version,), ())))
    out = tmp_path / "out"
    assert problem(sanitized, Run("path", db, "ocdbt", out)) is None
    doc = json.loads((out / "error.json").read_text(encoding="utf-8"))
    assert doc["rule"] == "OCDBT-022" and "\ufffd" in doc["message"], doc


def test_strings_keep_lone_surrogates(sanitized, tmp_path):
    """A key written as the escape of a lone surrogate comes back as that escape (the same
    string as Python's json reads), not as bytes that are not UTF-8."""
    metadata = {
        "tree_metadata": {
            "('\\ud800',)": {
                "key_metadata": [{"key": "\ud800", "key_type": 2}],
                "value_metadata": {"value_type": "None", "skip_deserialize": False},
            }
        }
    }
    item = _item(tmp_path / "item", metadata=json.dumps(metadata).encode())
    doc = _read(sanitized, item, tmp_path / "out")
    assert doc["leaves"][0]["path"] == ["\ud800"], doc


def test_environment_selects_the_sanitizer_build(build_module, sanitized, monkeypatch):
    """``OCKPT_C_SANITIZE=1`` makes `build()` (as ``--impl c-example`` calls it) give the
    sanitizer build; an explicit ``sanitize=`` wins."""
    monkeypatch.setenv("OCKPT_C_SANITIZE", "1")
    assert build_module.build(sanitized.parent) == sanitized  # cached there: not rebuilt
    assert build_module.cache_dir() == build_module.cache_dir(sanitize=True)
    monkeypatch.setenv("OCKPT_C_SANITIZE", "0")
    assert build_module.cache_dir() == build_module.cache_dir(sanitize=False)
