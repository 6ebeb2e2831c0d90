"""Guards no other test held (issue 32 item 4): each test here names the attack a security check
stops, and fails when that check is weakened the way an attacker would need it weakened (an
audit weakened each check in a copy of the package and ran the tests that should catch it;
these are the checks none caught). Real fixtures are copied and edited, as in test_hostile.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt import limits
from ockpt.errors import FormatError
from ockpt.store import as_store, files
from tests.support import FIXTURES, HAVE_TENSORSTORE, deadline
from tests.support.errors import assert_error

NO_OCDBT = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"  # a zarr directory per leaf
BACKENDS = ["python", "tensorstore"] if HAVE_TENSORSTORE else ["python"]


def _spy_opens(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """Every path `os.open` is asked to open from now on (relative names as given)."""
    opened: list[str] = []
    real = os.open

    def spy(path, *args, **kw):  # type: ignore[no-untyped-def]
        opened.append(os.fsdecode(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "open", spy)
    return opened


# ---------------------------------------------------------------------------------------------
# store/files.py: the hardened open


def test_open_regular_never_opens_what_is_no_regular_file(tmp_path, monkeypatch):
    """The attack: a file named on the command line (a safetensors or npz input, a JSON file)
    is a device or a FIFO. Opening a device can act on it (a tape rewinds, a terminal becomes
    the controlling terminal, a watchdog starts counting), so the hardened open refuses a
    name by its status and never calls open() on it (PATH-005)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    opened = _spy_opens(monkeypatch)
    for path, kind in ((str(fifo), "a FIFO"), ("/dev/null", "a character device")):
        with deadline(20), pytest.raises(FormatError) as e:
            files.read_file(path, limit=1 << 20, rule="JSON-003")
        assert e.value.rule == "PATH-005" and kind in e.value.message
        assert path not in opened


def test_a_special_file_inside_a_checkpoint_is_never_opened(tmp_path, monkeypatch):
    """The attack: a checkpoint (a tarball unpacked as root keeps device nodes) holds a device
    or a FIFO where a file belongs. `open_inside` promises that no device is touched: the
    entry's status is checked before the open, so open() is never called on it (PATH-005)."""
    item = tmp_path / "run"
    shutil.copytree(NO_OCDBT, item)
    (item / "_METADATA").unlink()
    os.mkfifo(item / "_METADATA")
    opened = _spy_opens(monkeypatch)
    with deadline(20), pytest.raises(FormatError) as e:
        as_store(item).get("_METADATA")
    assert e.value.rule == "PATH-005" and "a FIFO" in e.value.message
    assert not [p for p in opened if os.path.basename(p) == "_METADATA"], opened


def test_a_file_over_its_limit_is_refused_before_a_byte_is_read(tmp_path, monkeypatch, in_force):
    """The attack: a sparse `_METADATA` of 1 GiB that takes no disk space, against a limit of
    1 MiB. A reader that reads first and measures after allocates and reads the gigabyte;
    the size is checked before any read, and no read ever asks for more than the limit and
    one byte."""
    item = tmp_path / "run"
    shutil.copytree(NO_OCDBT, item)
    os.truncate(item / "_METADATA", 1 << 30)
    in_force(max_json_bytes=1 << 20)
    asked: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        asked.append(n)
        if n > (1 << 20) + 1:
            raise AssertionError(f"a read of {n} bytes, past the limit")
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "preadv", lambda *a: pytest.fail("a read past the limit"))
    with pytest.raises(FormatError) as e:
        as_store(item).get("_METADATA")
    assert e.value.rule == "JSON-003" and e.value.got == 1 << 30
    assert asked == []


def test_check_tree_judges_a_link_by_the_special_file_it_reaches(tmp_path, monkeypatch):
    """The attack: a chunk file of a per-leaf array is a link, inside the checkpoint, to a FIFO
    kept in a directory the reader may search but not list (mode 0o111), so a walk of the
    tree never meets the FIFO itself. tensorstore, which follows links and opens what it
    finds, would block on the FIFO forever: the tree check refuses the link by what it reaches
    (PATH-005), and so does every engine."""
    item = tmp_path / "run"
    shutil.copytree(NO_OCDBT, item)
    hidden = item / "hidden"
    hidden.mkdir()
    os.mkfifo(hidden / "pipe")
    chunk = item / "a" / "0.0"
    chunk.unlink()
    os.symlink("../hidden/pipe", chunk)
    hidden.chmod(0o111)
    real_scandir = os.scandir

    def scandir(path="."):  # type: ignore[no-untyped-def]
        # root lists any directory: fail the listing as it fails for everyone else
        if os.path.realpath(path) == os.path.realpath(hidden):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    try:
        with deadline(20), pytest.raises(FormatError) as e:
            files.check_tree(str(item))
        assert e.value.rule == "PATH-005" and "a FIFO" in e.value.message
        for backend in BACKENDS:
            with deadline(20), pytest.raises(FormatError) as e:
                ockpt.load_pytree(item, backend=backend)
            assert e.value.rule == "PATH-005", backend
    finally:
        hidden.chmod(0o755)


# ---------------------------------------------------------------------------------------------
# store/local.py: LocalStore.list (validate, per-leaf arrays, cp)


def test_a_listing_is_bounded_across_directories(tmp_path, in_force):
    """The attack: files spread over many directories, each under the per-directory entry
    limit, millions together. A recursive listing (what `validate`, the per-leaf reader and
    `cp` walk) would hold every name: the whole listing is bounded too (LIMIT-005)."""
    for d in range(3):
        (tmp_path / f"d{d}").mkdir()
        for f in range(3):
            (tmp_path / f"d{d}" / f"f{f}").write_bytes(b"")
    in_force(max_directory_entries=9)
    assert len(as_store(tmp_path).list()) == 9
    in_force(max_directory_entries=4)  # every directory holds at most 3 entries
    with pytest.raises(FormatError) as e:
        as_store(tmp_path).list()
    assert e.value.rule == "LIMIT-005"


def test_a_listing_is_bounded_in_depth(tmp_path, in_force):
    """The attack: directories nested thousands deep. A recursive walk without a bound
    exhausts the stack (RecursionError) or runs on: it stops at the depth limit (LIMIT-001)."""
    deep = tmp_path.joinpath(*"abcdef")
    deep.mkdir(parents=True)
    (deep / "leaf").write_bytes(b"")
    in_force(max_depth=6)
    assert as_store(tmp_path).list() == ["a/b/c/d/e/f/leaf"]
    in_force(max_depth=3)
    with pytest.raises(FormatError) as e:
        as_store(tmp_path).list()
    assert e.value.rule == "LIMIT-001"


def test_a_listing_follows_no_directory_link(tmp_path):
    """The attack: a checkpoint holds a link to a directory outside it (``sub -> /home``) and a
    link to itself (``loop -> .``). A walk that follows them lists (and `cp` would try to copy)
    the files of another tree, and walks the loop until a limit stops it: links to
    directories are not followed, so the listing is the checkpoint's own files."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    run = tmp_path / "run"
    run.mkdir()
    (run / "x").write_bytes(b"x")
    os.symlink(outside, run / "sub")
    os.symlink(".", run / "loop")
    assert as_store(run).list() == ["x"]


# ---------------------------------------------------------------------------------------------
# transfer.py: cp


def test_cp_refuses_a_destination_inside_its_source_through_a_link(tmp_path):
    """The attack (on the user's data): ``ockpt cp`` given the same checkpoint by two names, one
    a link to the other, or a destination inside its source. A copy from a directory into
    itself reads what it writes, and with ``--overwrite`` clears its own source: refused by
    where the directories really are, before anything is written."""
    from ockpt import transfer

    src = tmp_path / "run"
    ockpt.save_pytree(src, {"w": np.arange(6, dtype=np.float32)})
    alias = tmp_path / "alias"
    os.symlink(src, alias)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    for s, d in ((src, src / "copy"), (alias, src), (src, alias / "copy")):
        with pytest.raises(ValueError, match="one is the other or lies inside it"):
            transfer.copy(s, d, overwrite=True, progress=False)
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before


# ---------------------------------------------------------------------------------------------
# paths.printable: names from a checkpoint on a terminal


@pytest.mark.parametrize(
    "char",
    ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c", "\u200b"],
)
def test_printable_escapes_bidirectional_and_invisible_characters(char):
    """The attack ("Trojan Source", CVE-2021-42574): a leaf name holding a right-to-left
    override or isolate (or an invisible character) is shown with its text reordered or
    hidden, so ``ockpt tree`` or ``diff`` shows a name other than the one stored. Format
    characters print as their escapes, like control characters."""
    from ockpt.paths import printable

    shown = printable(f"w{char}gpj.exe")
    assert shown == "w" + repr(char)[1:-1] + "gpj.exe" and char not in shown


# ---------------------------------------------------------------------------------------------
# sources.py: convert's inputs


def test_a_safetensors_header_length_past_the_json_limit_is_refused_unread(tmp_path):
    """The attack: a safetensors file whose first 8 bytes declare a header of 2^62 bytes. A
    reader that trusts it allocates that much to read the header (MemoryError, or a swap
    storm for a few hundred GiB); it is refused by the JSON limit before any read (JSON-003)."""
    from ockpt.sources import open_source

    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 62) + b'{"__metadata__": {}}')
    with pytest.raises(FormatError) as e:
        open_source(str(path), format="safetensors")
    assert e.value.rule == "JSON-003"


def test_an_npz_member_running_past_the_end_of_the_file_is_not_mapped(tmp_path):
    """The attack: a truncated ``.npz`` whose central directory still declares the member's
    full size, which fits the file but not after the member's local header: the array would
    be mapped past the end of the file (a SIGBUS where a mapping may reach past it). The
    member's extent is checked from its local header before it is mapped."""
    import io
    import zipfile

    from ockpt.sources import open_source

    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float32))
    full = buf.getvalue()
    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("w.npy", full[:-90])  # central entry (46 + 5) and end record (22): 73 bytes
    data = bytearray(path.read_bytes())
    central = struct.unpack_from("<I", data, len(data) - 22 + 16)[0]
    struct.pack_into("<II", data, central + 20, len(full), len(full))  # compressed, size
    path.write_bytes(bytes(data))
    source = open_source(str(path), format="npz")
    try:
        (leaf,) = source.leaves
        with pytest.raises(FormatError) as e:
            source.read(leaf)
    finally:
        source.close()
    assert_error(e, rule=None, file=f"{path}:w.npy")  # the npz source: no rule of the spec
    assert "runs past the end of the file" in e.value.message


# ---------------------------------------------------------------------------------------------
# msgpack_legacy.py: the legacy `checkpoint` file


def test_a_msgpack_array_header_preallocates_nothing_past_the_value_limit(in_force):
    """The attack: a legacy msgpack `checkpoint` file whose array header declares as many
    elements as the file has bytes (8M nils in 8 MiB). A decoder that takes the header's word
    preallocates a list of 8 bytes per declared element (8x the file) before any count can
    refuse it; the decoder is given the value limit as its longest array, so the file is
    refused with nothing built (MSGPACK-001)."""
    import tracemalloc

    from ockpt.msgpack_legacy import decode_checkpoint

    n = 8 << 20
    data = b"\x81\xa1a\xdd" + n.to_bytes(4, "big") + b"\xc0" * n
    in_force(max_json_values=1000)
    tracemalloc.start()
    try:
        with pytest.raises(FormatError) as e:
            decode_checkpoint(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.rule == "MSGPACK-001" and peak < 8 << 20, peak


# ---------------------------------------------------------------------------------------------
# store/url.py: object stores


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore: object stores use it")
def test_an_object_store_listing_is_bounded(in_force):
    """The attack: a bucket prefix holding millions of objects (cheap to create, each empty):
    `validate`, `cp` and the per-leaf reader list it, and would hold every key. The listing
    is refused past the entry limit (LIMIT-005)."""
    store = as_store("memory://bucket/run/")
    kv = store.kvstore()
    for i in range(5):
        kv.write(f"a/{i}", b"").result()
    in_force(max_directory_entries=5)
    assert len(store.list()) == 5
    in_force(max_directory_entries=4)
    with pytest.raises(FormatError) as e:
        store.list()
    assert e.value.rule == "LIMIT-005"


# ---------------------------------------------------------------------------------------------
# store/claims.py: no two keys decode the same stored bytes (OCDBT-024, PATH-008)


def test_a_value_overlapping_the_start_of_another_keys_value_is_refused():
    """The attack: OCDBT leaf entries whose value ranges overlap without starting at the same
    byte (key ``b`` reads bytes 5..15 of a data file, key ``a`` 10..20), so one small zstd
    frame is decoded again for every key that points into it. A claim is checked against
    the recorded ranges on both sides of its start, across the sorted blocks they are kept
    in, not only against the one starting at or before it."""
    from ockpt.store.claims import _BLOCK, ValueClaims

    claims = ValueClaims()
    assert claims.claim(b"a", "file", 10, 20) is None
    assert claims.claim(b"b", "file", 5, 15) == (b"a", 10, 20)
    assert claims.claim(b"c", "file", 0, 10) is None  # touching is not overlapping
    assert claims.claim(b"a", "file", 10, 20) is None  # the same key read again
    many = ValueClaims()  # enough ranges to be kept in several blocks
    for i in range(4 * _BLOCK):
        assert many.claim(b"k%d" % i, "file", 100 * i + 50, 100 * i + 60) is None
    for i in range(1, 4 * _BLOCK):
        assert many.claim(b"x", "file", 100 * i + 40, 100 * i + 55) == (
            b"k%d" % i,
            100 * i + 50,
            100 * i + 60,
        ), i


# ---------------------------------------------------------------------------------------------
# LIMIT-006: what tensorstore decodes for a lazy read


def _one_chunk_of(item: Path, shape_0: int, chunk_0: int) -> None:
    """Make leaf `a` of the per-leaf `item` a float32 array of `shape_0` elements in chunks of
    `chunk_0`, its first chunk a zstd frame of zeros (a few KiB for 128 MiB)."""
    import json

    import zstandard

    meta_file = item / "a" / ".zarray"
    meta = json.loads(meta_file.read_text())
    meta["shape"], meta["chunks"] = [shape_0, 1], [chunk_0, 1]
    meta_file.write_text(json.dumps(meta))
    size = chunk_0 * 4
    compressor = zstandard.ZstdCompressor(level=1).compressobj(size=size)
    zeros = bytes(16 << 20)
    with open(item / "a" / "0.0", "wb") as f:
        for _ in range(size // len(zeros)):
            f.write(compressor.compress(zeros))
        f.write(compressor.flush())


def test_a_lazy_read_of_one_element_is_checked_for_the_chunk_it_decodes(tmp_path, monkeypatch):
    """The attack: an array stored as one chunk of 128 MiB that is a few KiB of zstd on disk;
    reading one element makes tensorstore decode the whole chunk (and tensorstore aborts the
    process when that allocation fails). The one-element result is small, so the check of
    the result passes: the chunks tensorstore decodes are checked against the memory left
    before it reads (LIMIT-006)."""
    item = tmp_path / "run"
    shutil.copytree(NO_OCDBT, item)
    _one_chunk_of(item, 1 << 25, 1 << 25)
    for backend in BACKENDS:  # the python engine checks each chunk it decodes itself
        monkeypatch.setattr(limits, "memory_available", lambda: 100 << 20)
        with ockpt.open(item, backend=backend) as ckpt:
            with pytest.raises(ockpt.MemoryLimitError) as e:
                ckpt["a"][:1]
        assert e.value.rule == "LIMIT-006", backend
        monkeypatch.setattr(limits, "memory_available", lambda: 1 << 30)
        with ockpt.open(item, backend=backend) as ckpt:
            assert ckpt["a"][:1].tolist() == [[0.0]], backend
