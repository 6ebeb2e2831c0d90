"""The one hardened open (`ockpt.store.files`, behind `LocalStore`): special files, links
leading out, bounded reads and listings, on copies of real Orbax checkpoints and through every
reading API.

PATH-005: a FIFO, socket, device, directory or symbolic link loop in place of a file is refused
at once (never waited on); PATH-004: nothing is read through a link leading out, and no error
echoes the outside file's bytes; LIMIT-005: listings are bounded.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import pytest

import ockpt
from ockpt.errors import FormatError
from ockpt.store import UrlStore, as_store, files
from tests.support import FIXTURES, deadline

CASE_12 = FIXTURES / "orbax-0.12.8" / "nested"  # OCDBT, zarr v2, _METADATA, _sharding
CASE_03 = FIXTURES / "orbax-0.3.5" / "scalars_strings"  # msgpack `checkpoint`, per-leaf zarr


# ---------------------------------------------------------------------------------------------
# store.files


def _special(kind: str, path: Path) -> contextlib.AbstractContextManager:
    """Make a special file of `kind` at `path`; the context keeps a socket bound."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        os.symlink(path.name, path)  # a link to itself
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        return contextlib.closing(sock)
    return contextlib.nullcontext()


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "socket"])
def test_special_files_are_refused_at_once(tmp_path, kind):
    target = tmp_path / "doc"
    with _special(kind, target), deadline(20):
        for read in (
            lambda: files.read_file(str(target), limit=1 << 20, rule="JSON-003"),
            lambda: files.read_inside(str(tmp_path), "doc", limit=1 << 20, rule="JSON-003"),
            lambda: files.open_inside(str(tmp_path), "doc"),
            lambda: as_store(tmp_path).open_range("doc"),
            lambda: as_store(tmp_path).get("doc"),
            lambda: files.size_inside(str(tmp_path), "doc"),
        ):
            with pytest.raises(FormatError) as e:
                read()
            assert e.value.rule == "PATH-005" and "doc" in str(e.value)


def test_a_device_is_refused_without_reading_it():
    with deadline(20), pytest.raises(FormatError) as e:
        files.read_file("/dev/zero", limit=1 << 20, rule="JSON-003")
    assert e.value.rule == "PATH-005" and "character device" in e.value.message


def test_a_link_leading_out_is_refused_and_its_bytes_never_shown(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET-BYTES")
    item = tmp_path / "item"
    item.mkdir()
    (item / "_METADATA").symlink_to(secret)
    with pytest.raises(FormatError) as e:
        as_store(item).get("_METADATA")
    assert e.value.rule == "PATH-004" and "TOP-SECRET" not in str(e.value)
    inside = item / "real"
    inside.write_text("{}")
    (item / "alias").symlink_to("real")  # a link inside the checkpoint is followed
    assert as_store(item).get("alias") == b"{}"


def test_reads_are_bounded_before_reading(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100)
    with pytest.raises(FormatError) as e:
        files.read_file(str(tmp_path / "big"), limit=99, rule="JSON-003")
    assert e.value.rule == "JSON-003" and e.value.got == 100
    assert files.read_file(str(tmp_path / "big"), limit=100, rule="JSON-003") == b"x" * 100
    assert files.read_inside(str(tmp_path), "absent", limit=1, rule="JSON-003") is None


def test_listings_are_bounded(tmp_path):
    for i in range(5):
        (tmp_path / str(i)).mkdir()
    assert len(files.list_dir(str(tmp_path), limit=5).dirs) == 5
    with pytest.raises(FormatError) as e:
        files.list_dir(str(tmp_path), limit=4)
    assert e.value.rule == "LIMIT-005"


def test_listing_sorts_special_entries_apart(tmp_path):
    (tmp_path / "f").write_text("")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "p")
    os.symlink("loop", tmp_path / "loop")
    listing = files.list_dir(str(tmp_path))
    assert listing.files == {"f"} and listing.dirs == {"d"} and listing.other == {"p", "loop"}


# ---------------------------------------------------------------------------------------------
# every API on a real Orbax checkpoint with a special file in place of one of its files


def _reads(path: Path):  # type: ignore[no-untyped-def]
    return {
        "load_pytree": lambda: ockpt.load_pytree(path),
        "pytree_metadata": lambda: ockpt.pytree_metadata(path),
        "open": lambda: ockpt.open(path),
    }


@pytest.mark.parametrize(
    ("case", "name"),
    [
        (CASE_12, "_METADATA"),
        (CASE_12, "_sharding"),
        (CASE_12, "array_metadatas/process_0"),
        (CASE_03, "checkpoint"),
    ],
    ids=lambda x: x if isinstance(x, str) else x.parent.name,
)
@pytest.mark.parametrize("kind", ["fifo", "directory", "loop"])
def test_special_file_in_a_real_checkpoint(tmp_copy, case, name, kind):
    root = tmp_copy(case)
    target = root / name
    if not target.exists():
        pytest.skip(f"{case.name} has no {name}")
    target.unlink()
    with _special(kind, target), deadline(20):
        for what, read in _reads(root).items():
            if name in ("_sharding", "array_metadatas/process_0") and what != "pytree_metadata":
                continue  # read only for the saved sharding and write shapes
            with pytest.raises(ockpt.OckptError) as e:
                read()
            if kind == "directory" and name == "checkpoint":
                # a directory `checkpoint` may be a per-leaf param's: the item then has no
                # msgpack file, and without _METADATA no tree (LOAD-050)
                assert e.value.rule == "LOAD-050", (what, e.value)
                continue
            assert e.value.rule == "PATH-005", (what, e.value)
        report = ockpt.validate(root)
        want = "LOAD-050" if (kind, name) == ("directory", "checkpoint") else "PATH-005"
        assert not report.ok and want in report.rules | {"LOAD-050"}, report.format_text()
        if want == "PATH-005":
            assert "PATH-005" in report.rules, report.format_text()
        layout = ockpt.detect(root)
        if name == "_METADATA":
            assert [p.rule for p in layout.problems] == ["PATH-005"]


def test_check_tree_is_bounded(tmp_path):
    for i in range(5):
        (tmp_path / str(i)).write_text("")
    files.check_tree(str(tmp_path), limit=5)
    with pytest.raises(FormatError) as e:
        files.check_tree(str(tmp_path), limit=4)
    assert e.value.rule == "LIMIT-005"


# ---------------------------------------------------------------------------------------------
# UrlStore (tensorstore's memory:// kvstore: what gs:// and s3:// answer alike)


def _memory_location(objects: dict[str, bytes]) -> tuple[UrlStore, object]:
    """A memory:// directory holding `objects`, and its open kvstore (a memory store lives in
    its context: each new context is an empty store)."""
    pytest.importorskip("tensorstore")

    loc = as_store("memory://bucket/ckpt/")
    assert isinstance(loc, UrlStore)
    store = loc.kvstore()
    for name, data in objects.items():
        store.write(name, data).result()
    return loc, store


def test_url_reads_are_bounded_before_fetching(monkeypatch):
    """An object over the limit is refused after a one-byte probe past the limit: its bytes
    are never requested (a hostile bucket cannot make a reader download a huge _METADATA)."""
    loc, store = _memory_location({"_METADATA": b"{" + b" " * 99, "small": b"ok"})
    asked: list[object] = []

    class Counting:
        def read(self, name, *, byte_range=None):
            asked.append(byte_range)
            return store.read(name, byte_range=byte_range)

    monkeypatch.setattr(UrlStore, "kvstore", lambda self: Counting())
    with pytest.raises(FormatError) as e:
        loc.get("_METADATA", limit=99, rule="JSON-003")
    assert e.value.rule == "JSON-003" and e.value.file == "memory://bucket/ckpt/_METADATA"
    assert asked == [slice(99, 100)]  # one byte past the limit, nothing else
    assert loc.get("small", limit=99) == b"ok" and loc.get("absent", limit=99) is None
    assert loc.get_range("small", 1, 1) == b"k"
    assert loc.get_range("small", 1, 5) == b"k"  # past the end: a short read, as pread
    assert loc.get_range("small", 5, 1) == b""
    assert loc.exists("small") and not loc.exists("absent")
    with pytest.raises(FormatError) as e:
        loc.get("../outside", limit=99)
    assert e.value.rule == "PATH-003"
