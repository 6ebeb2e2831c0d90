"""Hostile checkpoints: every entry point, in a subprocess under a 4 GiB address-space limit and a
time limit (tests/support/children/hostile.py), on copies of real Orbax checkpoints with one file replaced.

Each case replaces one file of a real checkpoint by a FIFO or a symbolic link loop (PATH-005),
or by a link to a copy of it outside the checkpoint (PATH-004). Every entry point that reads the
file must refuse with that rule: an `ockpt.OckptError` (the API), a finding (the validator) or
exit status 1 with the rule on stderr (the commands). None may hang, crash, let another
exception escape, or exceed the time and memory bounds; the entry points that do not read the
file (`ls`, `detect`, and the loads that never need a `_sharding`) just answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import CHILDREN, FIXTURES, HAVE_TENSORSTORE

CHILD = CHILDREN / "hostile.py"
SECONDS = 30
PEAK_MB = 1500

OCDBT = FIXTURES / "orbax-0.12.8" / "nested"  # OCDBT, zarr v2, _METADATA, _sharding
PER_LEAF = FIXTURES / "orbax-0.12.8" / "no_ocdbt"  # one zarr directory per leaf
MSGPACK = FIXTURES / "orbax-0.3.5" / "scalars_strings"  # the legacy msgpack `checkpoint`

API = ["load_pytree", "load_pytree:tensorstore", "pytree_metadata", "open"]
VALIDATE = ["validate", "validate:deep"]
COMMANDS = ["cli:inspect", "cli:cat", "cli:tree", "cli:convert", "cli:diff", "cli:validate"]
ANSWER_ONLY = ["cli:ls", "cli:detect"]
EVERYTHING = API + VALIDATE + COMMANDS
#: Reads every file but `tree`, which reads the saved tree only (`_METADATA`, a msgpack file).
ALL_BUT_TREE = [e for e in EVERYTHING if e != "cli:tree"]


def _first_data_file(item: Path) -> str:
    return "d/" + sorted(os.listdir(item / "d"))[0]


#: (case, file) -> the entry points that read that file and so must refuse.
FILES = {
    (OCDBT, "_METADATA"): EVERYTHING,
    (OCDBT, "manifest.ocdbt"): ALL_BUT_TREE,
    (OCDBT, "d/*"): ALL_BUT_TREE,
    (OCDBT, "_sharding"): ["pytree_metadata", "load_pytree:tensorstore", *VALIDATE, "cli:inspect"],
    (OCDBT, "array_metadatas/process_0"): [
        "pytree_metadata",
        "load_pytree:tensorstore",
        *VALIDATE,
        "cli:inspect",
    ],
    (PER_LEAF, "a/.zarray"): ALL_BUT_TREE,
    (PER_LEAF, "a/0.0"): [
        "load_pytree",
        "load_pytree:tensorstore",
        "open",
        "validate:deep",
        "cli:convert",
        "cli:diff",
    ],
    (MSGPACK, "checkpoint"): EVERYTHING,
}


def _break(root: Path, name: str, how: str, outside: Path) -> None:
    target = root / name
    if how == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif how == "loop":
        target.unlink()
        os.symlink(target.name, target)
    else:  # a link to a copy of the file outside the checkpoint
        outside.write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(outside)


def _run(path: Path, entries: list[str]) -> dict:
    # without tensorstore (OCKPT_BLOCK_TENSORSTORE), its engine's entries are left out
    entries = [e for e in entries if HAVE_TENSORSTORE or not e.endswith(":tensorstore")]
    env = {**os.environ, "OCKPT_HOSTILE_SECONDS": str(SECONDS)}
    done = subprocess.run(
        [sys.executable, str(CHILD), str(path), *entries],
        capture_output=True,
        text=True,
        timeout=SECONDS * len(entries) + 60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["fifo", "loop", "link_out"])
@pytest.mark.parametrize(("case", "name"), list(FILES), ids=lambda x: getattr(x, "name", x))
def test_every_entry_point_refuses_a_replaced_file(tmp_path, case, name, how):
    root = tmp_path / case.name
    shutil.copytree(case / "checkpoint", root)
    if name == "d/*":
        name = _first_data_file(root)
    _break(root, name, how, tmp_path / "outside")
    rule = "PATH-004" if how == "link_out" else "PATH-005"
    must_refuse = FILES[(case, "d/*" if name.startswith("d/") else name)]
    _assert_refusals(_run(root, EVERYTHING + ANSWER_ONLY), must_refuse, rule)


def _assert_refusals(results: dict, must_refuse: list[str], rule: str) -> None:
    """No entry point escaped, was killed or passed the bounds; those in `must_refuse`
    refused with `rule`: an error (the API), a finding (the validator), exit 1 (commands)."""
    for entry, got in results.items():
        where = f"{entry}: {str(got)[:600]}"
        assert got["outcome"] not in ("escaped", "killed"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < PEAK_MB, where
        if entry not in must_refuse:
            continue
        if entry.startswith("cli:"):
            assert got["exit"] == 1 and f"[{rule}]" in got["output"], where
            assert "Traceback" not in got["output"], where
        elif entry.startswith("validate"):
            assert got["outcome"] == "invalid" and rule in got["rules"], where
        else:
            assert got["outcome"] == "refused" and got["rule"] == rule, where


def _declare(root: Path, shape_0: int, chunk_0: int) -> None:
    """Edit the `.zarray` of leaf `a` to declare another first dimension and chunk."""
    meta_file = root / "a" / ".zarray"
    meta = json.loads(meta_file.read_text())
    rank = len(meta["shape"])
    meta["shape"] = [shape_0] + [1] * (rank - 1)
    meta["chunks"] = [chunk_0] + [1] * (rank - 1)
    meta_file.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("shape_0", "chunk_0", "rule", "refusing"),
    [
        # 16 GiB declared, no more than 256 chunks: within the format's limits, more than the
        # memory: every load refuses before allocating (LIMIT-006)
        (1 << 32, 1 << 24, "LIMIT-006", ["load_pytree", "load_pytree:tensorstore", "open"]),
        # a shape no numpy array can have, or a grid of too many chunks (ZARR-005)
        (1 << 61, 1 << 30, "ZARR-005", [*API, "validate"]),
        (1 << 26, 1, "ZARR-005", [*API, "validate"]),
    ],
    ids=["16GiB", "2**61", "2**26-chunks"],
)
def test_declared_sizes_drive_no_work(tmp_path, shape_0, chunk_0, rule, refusing):
    """Declared sizes (issue 17): nothing is allocated or iterated for what a .zarray declares
    before it is checked against the limits and the memory available."""
    root = tmp_path / "item"
    shutil.copytree(PER_LEAF / "checkpoint", root)
    _declare(root, shape_0, chunk_0)
    results = _run(root, EVERYTHING + ANSWER_ONLY)
    for entry, got in results.items():
        where = f"{entry}: {got}"
        assert got["outcome"] not in ("escaped", "killed"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < PEAK_MB, where
        if entry in refusing and entry.startswith("validate"):
            assert got["outcome"] == "invalid" and rule in got["rules"], where
        elif entry in refusing:
            assert got["outcome"] == "refused" and got["rule"] == rule, where


@pytest.mark.slow  # the slow matrix: a 4 GiB chunk
def test_a_4gib_chunk_within_the_limits(tmp_path):
    """One 4 GiB chunk, within every limit of the format, in a process that may use 4 GiB
    (issue 17): the loads refuse before allocating (LIMIT-006); the deep validator checks it
    as a stream in a few MiB and finds it valid; nothing escapes, nothing is killed."""
    import zstandard

    root = tmp_path / "item"
    shutil.copytree(PER_LEAF / "checkpoint", root)
    _declare(root, 1 << 30, 1 << 30)  # float32: 4 GiB
    size = 4 << 30
    compressor = zstandard.ZstdCompressor(level=1).compressobj(size=size)
    zeros = bytes(64 << 20)
    with open(root / "a" / "0.0", "wb") as f:
        for _ in range(size // len(zeros)):
            f.write(compressor.compress(zeros))
        f.write(compressor.flush())
    results = _run(root, EVERYTHING + ANSWER_ONLY)
    for entry, got in results.items():
        where = f"{entry}: {got}"
        assert got["outcome"] not in ("escaped", "killed"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < PEAK_MB, where
    for entry in ("load_pytree", "load_pytree:tensorstore", "open"):
        if entry not in results:  # the tensorstore engine's, where it is not installed (`_run`)
            continue
        got = results[entry]
        assert got["outcome"] == "refused" and got["rule"] == "LIMIT-006", f"{entry}: {got}"
    for entry in ("validate", "validate:deep", "pytree_metadata"):
        assert results[entry]["outcome"] == "ok", f"{entry}: {results[entry]}"
    assert results["cli:convert"]["exit"] == 1 and "[LIMIT-006]" in results["cli:convert"]["output"]


def _wide_json(original: bytes) -> bytes:
    """`original` (a JSON object) with a member of 17M empty lists: 34M values counted, just
    past the default `max_json_values` (issue 32 item 1)."""
    head = json.dumps(json.loads(original))[:-1].encode()
    return head + b', "wide": [' + b"[]," * 17_000_000 + b"[]]}"


def _wide_msgpack(original: bytes) -> bytes:
    """A msgpack `checkpoint` file whose one array holds 34M nils (MSGPACK-001)."""
    n = 34_000_000
    return b"\x81\xa4wide\xdd" + n.to_bytes(4, "big") + b"\xc0" * n


#: (case, file, how to widen it, rule) -> the entry points that parse that file.
WIDE = {
    (OCDBT, "_METADATA", "JSON-003"): (_wide_json, EVERYTHING),
    # parsed for its leaves' metadata (a load skips it: it names no typed PRNG key)
    (OCDBT, "array_metadatas/process_0", "JSON-003"): (
        _wide_json,
        ["pytree_metadata", *VALIDATE, "cli:inspect", "cli:convert", "cli:diff", "cli:validate"],
    ),
    (MSGPACK, "checkpoint", "MSGPACK-001"): (_wide_msgpack, EVERYTHING),
}


#: The 34M-value JSON documents take a minute each on 2 cores: the slow matrix (the msgpack
#: one, and tests/hostile/test_bombs.py's bracket bomb, keep JSON breadth in the default run).
_WIDE_PARAMS = [
    pytest.param(*key, marks=pytest.mark.slow) if key[2] == "JSON-003" else key for key in WIDE
]


@pytest.mark.parametrize(
    ("case", "name", "rule"), _WIDE_PARAMS, ids=lambda x: getattr(x, "name", x)
)
def test_every_entry_point_refuses_a_wide_document(tmp_path, case, name, rule):
    """A document of more values than a reader builds (the breadth bomb, issue 32): every entry
    point that parses it refuses with its rule, within the time and memory bounds."""
    root = tmp_path / case.name
    shutil.copytree(case / "checkpoint", root)
    widen, must_refuse = WIDE[(case, name, rule)]
    (root / name).write_bytes(widen((root / name).read_bytes()))
    _assert_refusals(_run(root, EVERYTHING + ANSWER_ONLY), must_refuse, rule)


LOADS_TOO = [*API[:2], "open", *VALIDATE, "cli:validate", "cli:convert", "cli:diff"]


def _shared_value_bomb(root: Path, chunks: int, chunk_bytes: int, *, linked: bool = False) -> None:
    """Leaf ``mixed.0`` of the real checkpoint `root` (OCDBT, float32) made `chunks` chunks of
    `chunk_bytes` decoded, all pointing at the one stored zstd frame of a chunk of zeros: a
    database of a few KiB that declares ``chunks x chunk_bytes`` (issue 36 item 4). `linked`:
    each key names a data file of its own, every one a hard link to the one file."""
    import zstandard

    from ockpt.ocdbt.format import DataFileId, IndirectDataReference
    from ockpt.ocdbt.write import data_file_name
    from tests.support.ocdbt import rewrite_array

    frame = zstandard.ZstdCompressor().compress(bytes(chunk_bytes))
    names = [data_file_name() for _ in range(chunks if linked else 1)]
    refs = [IndirectDataReference(DataFileId(b"", n), 0, len(frame)) for n in names]
    items = chunk_bytes // 4
    meta = {
        "chunks": [items],
        "compressor": {"id": "zstd", "level": 1},
        "dimension_separator": ".",
        "dtype": "<f4",
        "fill_value": None,
        "filters": None,
        "order": "C",
        "shape": [chunks * items],
        "zarr_format": 2,
    }
    rewrite_array(root, b"mixed.0/", meta, {b"%d" % i: refs[i % len(refs)] for i in range(chunks)})
    (root / names[0].decode()).write_bytes(frame)
    for other in names[1:]:
        os.link(root / names[0].decode(), root / other.decode())
    assert sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) < 64 << 10


@pytest.mark.parametrize(
    ("chunks", "chunk_bytes", "linked", "refusing"),
    [
        # 1 TiB declared: the loads refuse by memory (LIMIT-006) before reading; everything
        # that reads chunk by chunk refuses the second chunk
        (16384, 64 << 20, False, [*VALIDATE, "cli:validate", "cli:convert", "cli:diff"]),
        # 64 MiB declared: the loads read, and refuse the second chunk as well
        (64, 1 << 20, False, LOADS_TOO),
        # the same through 64 data file names that are hard links to one file
        (64, 1 << 20, True, LOADS_TOO),
    ],
    ids=["1TiB", "64MiB", "64MiB-hard-links"],
)
def test_a_value_shared_by_many_keys_is_decoded_once(
    tmp_path, chunks, chunk_bytes, linked, refusing
):
    """The attack: thousands of chunk keys of a few-KiB database point at one small zstd frame
    that decodes to 64 MiB (issue 36 item 4). No two keys may share stored bytes (OCDBT-024):
    the validator reports it without decoding (shallow too), and every reader refuses the
    second key before decoding it, within the time and memory bounds."""
    root = tmp_path / "item"
    shutil.copytree(OCDBT / "checkpoint", root)
    _shared_value_bomb(root, chunks, chunk_bytes, linked=linked)
    _assert_refusals(_run(root, EVERYTHING + ANSWER_ONLY), refusing, "OCDBT-024")


@pytest.mark.parametrize("how", ["hard_link", "link_inside"])
def test_a_chunk_file_shared_by_many_keys_is_decoded_once(tmp_path, how):
    """The per-leaf form of the attack: the 64 chunk files of an array are hard links to one
    small zstd frame, or links inside the checkpoint to it (PATH-008): every reader refuses the
    second before decoding it."""
    import zstandard

    root = tmp_path / "item"
    shutil.copytree(PER_LEAF / "checkpoint", root)
    _declare(root, 64 << 18, 1 << 18)  # float32: 64 chunks of 1 MiB
    frame = zstandard.ZstdCompressor().compress(bytes(1 << 20))
    (root / "a" / "0.0").write_bytes(frame)
    for i in range(1, 64):
        if how == "hard_link":
            os.link(root / "a" / "0.0", root / "a" / f"{i}.0")
        else:
            os.symlink("0.0", root / "a" / f"{i}.0")
    refusing = ["load_pytree", "load_pytree:tensorstore", "open", "validate:deep", "cli:convert"]
    _assert_refusals(_run(root, EVERYTHING + ANSWER_ONLY), refusing + ["cli:diff"], "PATH-008")


def test_a_grid_of_2_24_chunks_none_stored(tmp_path):
    """The chunk-grid bomb within the limits (issue 36 item 5): a leaf declares 2^24 chunks
    (the most a grid may have) and stores none, the rest of the fill value being allowed. Every
    entry point answers within the bounds: work follows the chunks stored, and no plan holds an
    entry per chunk (the python engine ran out of memory; tensorstore took minutes and 16 GB)."""
    root = tmp_path / "item"
    shutil.copytree(PER_LEAF / "checkpoint", root)
    _declare(root, 1 << 24, 1)
    (root / "a" / "0.0").unlink()
    metadata = json.loads((root / "_METADATA").read_text())
    metadata["store_array_data_equal_to_fill_value"] = False
    (root / "_METADATA").write_text(json.dumps(metadata))
    results = _run(root, EVERYTHING + ANSWER_ONLY)
    for entry, got in results.items():
        where = f"{entry}: {got}"
        assert got["outcome"] not in ("escaped", "killed"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < PEAK_MB, where
    for entry in (*API, *VALIDATE):
        if entry in results:
            assert results[entry]["outcome"] == "ok", f"{entry}: {results[entry]}"


@pytest.mark.slow  # the slow matrix: 100,000 step directories
def test_a_manager_root_of_100_000_steps(tmp_path):
    """A manager root with 100,000 step directories (issue 32 item 6): every entry point
    answers within the bounds, the latest step being the one real checkpoint."""
    root = tmp_path / "root"
    root.mkdir()
    for step in range(100_000):
        (root / str(step)).mkdir()
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint" / "0", root / "100000")
    # the entry points that list a manager root's steps (each lists all 100,000)
    entries = ["load_pytree", "pytree_metadata", "validate", "cli:inspect", "cli:validate"]
    results = _run(root, entries + ANSWER_ONLY)
    for entry, got in results.items():
        where = f"{entry}: {str(got)[:600]}"
        assert got["outcome"] not in ("escaped", "killed"), where
        assert got["seconds"] < SECONDS and got["peak_mb"] < PEAK_MB, where
    assert results["cli:ls"]["exit"] == 0 and "100000" in results["cli:ls"]["output"]
