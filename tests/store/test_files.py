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
import stat
from pathlib import Path

import pytest

import ockpt
from ockpt.errors import FormatError
from ockpt.store import UrlStore, as_store, files
from tests.support import FIXTURES, deadline
from tests.support.errors import error_fields

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


# ---------------------------------------------------------------------------------------------
# store/files.py called directly: how each refusal names the file and says why, check_tree on
# every kind of entry, a file replaced or grown while it is opened and read, listings


def _fields(e) -> tuple:
    return (e.value.rule, e.value.file, e.value.message)


def _sorted_scandir(monkeypatch, *, refuse_first_below: str | None = None) -> list[str]:
    """`os.scandir` yielding entries sorted by name (the checks must hold in any order the
    file system gives); with `refuse_first_below`, the first directory scanned below that
    root is refused as an unreadable one is (PermissionError). Returns the refused ones."""
    real = os.scandir
    refused: list[str] = []

    class Entries(list):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def entries(path):
        with real(path) as it:
            return Entries(sorted(it, key=lambda e: e.name))

    def scandir(path="."):
        if refuse_first_below and path != refuse_first_below and not refused:
            refused.append(str(path))
            raise PermissionError(13, "Permission denied", path)
        return entries(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return refused


def test_check_tree_refuses_each_kind_of_entry_naming_where_it_stands(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "v").write_bytes(b"1")
    (root / "alias").symlink_to("d/e/v")  # a link inside: followed
    (root / "dlink").symlink_to("d")
    (root / "dangling").symlink_to("nowhere")
    files.check_tree(str(root))
    files.check_tree(str(root), file="shown")
    os.mkfifo(root / "d" / "e" / "p")
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root), file="CK")
    assert _fields(e) == ("PATH-005", "CK/d/e/p", "a FIFO stands where a regular file must be")
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root))
    assert e.value.file == f"{root}/d/e/p"
    os.unlink(root / "d" / "e" / "p")
    os.mkfifo(tmp_path / "fifo")
    (root / "d" / "to-fifo").symlink_to(tmp_path / "fifo")  # leads out
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root), file="CK")
    assert (e.value.rule, e.value.file) == ("PATH-004", "CK")
    assert e.value.message == (
        f"symbolic link {str(root / 'd' / 'to-fifo')!r} leads out of the checkpoint to "
        f"{str(tmp_path / 'fifo')!r}"
    )
    (root / "d" / "to-fifo").unlink()
    os.mkfifo(root / "d" / "zz-fifo")
    (root / "d" / "to-fifo").symlink_to("zz-fifo")  # inside, but no regular file
    _sorted_scandir(monkeypatch)  # the link is seen before the FIFO itself
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root / "d"), file="D")
    assert _fields(e) == ("PATH-005", "D/to-fifo", "a FIFO stands where a regular file must be")
    (root / "d" / "to-fifo").unlink()
    (root / "d" / "zz-fifo").unlink()
    (root / "d" / "loop").symlink_to("loop")
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root / "d"), file="D")
    assert _fields(e) == (
        "PATH-005",
        "D/loop",
        "a symbolic link loop stands where a regular file must be",
    )


def test_check_tree_goes_on_past_what_it_cannot_read(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        os.mkfifo(root / d / "p")
    refused = _sorted_scandir(monkeypatch, refuse_first_below=str(root))
    with pytest.raises(FormatError) as e:
        files.check_tree(str(root), file="CK")
    assert refused and e.value.rule == "PATH-005"
    monkeypatch.undo()
    other = tmp_path / "other"
    other.mkdir()
    (other / "a-dangling").symlink_to("nowhere")
    (other / "b-long").symlink_to("x" * 300)  # ENAMETOOLONG when followed
    os.mkfifo(other / "c-fifo")
    _sorted_scandir(monkeypatch)
    with pytest.raises(FormatError) as e:
        files.check_tree(str(other), file="O")
    assert _fields(e) == ("PATH-005", "O/c-fifo", "a FIFO stands where a regular file must be")


def test_check_tree_is_bounded_by_the_limits_in_force(tmp_path):
    from ockpt import limits

    for i in range(3):
        (tmp_path / str(i)).write_text("")
    files.check_tree(str(tmp_path))
    with limits.applied(limits.Limits(max_directory_entries=2)):
        with pytest.raises(FormatError) as e:
            files.check_tree(str(tmp_path), file="T")
        files.check_tree(str(tmp_path), limit=3)
    assert error_fields(e) == {
        "rule": "LIMIT-005",
        "file": "T",
        "message": "the checkpoint holds more entries than the limit",
        "pointer": None,
        "expected": "<= 2",
    }
    with pytest.raises(FormatError) as e:
        files.check_tree(str(tmp_path), limit=2)
    assert e.value.file == str(tmp_path)


def test_a_block_device_and_other_kinds_are_named(tmp_path):
    assert files._what(stat.S_IFLNK) == "not a regular file"  # no other kind is left
    try:
        os.mknod(tmp_path / "blk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    except PermissionError:
        pytest.skip("making a block device needs root")
    with pytest.raises(FormatError) as e:
        files.read_file(str(tmp_path / "blk"), limit=10, rule="JSON-003")
    assert _fields(e) == (
        "PATH-005",
        str(tmp_path / "blk"),
        "a block device stands where a regular file must be",
    )


def test_read_file_names_the_file_as_shown_or_by_its_path(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 10)
    os.symlink("loop", tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    big, loop, fifo = (str(tmp_path / n) for n in ("big", "loop", "fifo"))
    with pytest.raises(FormatError) as e:
        files.read_file(big, limit=9, rule="R-1", file="B")
    assert error_fields(e) == {
        "rule": "R-1",
        "file": "B",
        "message": "file larger than its size limit",
        "pointer": None,
        "expected": "<= 9 bytes",
        "got": 10,
    }
    with pytest.raises(FormatError) as e:
        files.read_file(big, limit=9, rule="R-1")
    assert e.value.file == big
    for path, why in ((loop, "a symbolic link loop"), (fifo, "a FIFO")):
        for shown in (None, "S"):
            with pytest.raises(FormatError) as e:
                files.read_file(path, limit=9, rule="R-1", file=shown)
            assert _fields(e) == (
                "PATH-005",
                shown or path,
                f"{why} stands where a regular file must be",
            )
            with pytest.raises(FormatError) as e:
                files.open_regular(path, file=shown)
            assert e.value.file == (shown or path)


def test_a_file_replaced_between_the_check_and_the_open_is_refused(tmp_path, monkeypatch):
    """`open_regular` checks the name, then opens it: what stands there at the open (another
    writer replaced the file meanwhile; here the check is let through) is refused too."""
    monkeypatch.setattr(files, "_stat_regular", lambda path, shown: None)
    os.symlink("loop", tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "sock"))
    with contextlib.closing(sock):
        for name, why in (("loop", "not a regular file"), ("sock", "not a regular file")):
            for shown in (None, "S"):
                with pytest.raises(FormatError) as e:
                    files.open_regular(str(tmp_path / name), file=shown)
                assert _fields(e) == (
                    "PATH-005",
                    shown or str(tmp_path / name),
                    f"{why} stands where a regular file must be",
                )
        with pytest.raises(FormatError) as e:
            files.open_regular(str(tmp_path / "fifo"), file="F")
        assert _fields(e) == ("PATH-005", "F", "a FIFO stands where a regular file must be")
        with pytest.raises(FileNotFoundError):
            files.open_regular(str(tmp_path / "none"))


def test_a_link_planted_after_the_check_is_refused_not_followed(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    (root / "d").mkdir(parents=True)
    (root / "d" / "v").write_bytes(b"inside")
    (root / "other").write_bytes(b"other")
    real = files._resolve

    def resolve_then_plant(base, name, shown):
        got = real(base, name, shown)
        os.unlink(root / "d" / "v")
        os.symlink("../other", root / "d" / "v")  # a concurrent writer
        return got

    monkeypatch.setattr(files, "_resolve", resolve_then_plant)
    with pytest.raises(FormatError) as e:
        files.read_inside(str(root), "d/v", limit=100, rule="R", file="CK/d/v")
    assert _fields(e) == (
        "PATH-004",
        "CK/d/v",
        "a symbolic link was planted at 'v' after the path was checked (the checkpoint is "
        "being changed while it is read)",
    )
    monkeypatch.undo()
    os.unlink(root / "d" / "v")
    os.symlink("v", root / "d" / "v")  # a loop: left unresolved by the check
    for shown in ("CK/d/v", None):
        with pytest.raises(FormatError) as e:
            files.read_inside(str(root), "d/v", limit=100, rule="R", file=shown)
        assert _fields(e) == (
            "PATH-005",
            shown or os.path.join(str(root), "d/v"),
            "a symbolic link loop stands where a regular file must be",
        )


def test_failures_of_a_relative_open_name_the_whole_path(tmp_path):
    (tmp_path / "d").mkdir()
    long = "x" * 300
    for name in (long, f"d/{long}"):
        with pytest.raises(OSError) as e:
            files.open_inside(str(tmp_path), name, file="SHOWN")
        assert (type(e.value), e.value.errno, e.value.strerror, e.value.filename) == (
            OSError,
            36,
            "File name too long",
            "SHOWN",
        )
    with pytest.raises(OSError) as e:
        files.open_inside(str(tmp_path), f"d/{long}")
    assert e.value.filename == os.path.join(str(tmp_path), f"d/{long}")
    with pytest.raises(FileNotFoundError) as e:
        files.open_inside(str(tmp_path), "d/none", file="SHOWN")
    assert (e.value.errno, e.value.strerror, e.value.filename) == (
        2,
        "No such file or directory",
        "SHOWN",
    )


def test_size_inside_names_the_file_as_shown_or_by_its_path(tmp_path):
    (tmp_path / "v").write_bytes(b"12345")
    os.mkfifo(tmp_path / "fifo")
    assert files.size_inside(str(tmp_path), "v") == 5
    assert files.size_inside(str(tmp_path), "none") is None
    assert files.size_inside(str(tmp_path), "v/x") is None
    for shown in (None, "S"):
        with pytest.raises(FormatError) as e:
            files.size_inside(str(tmp_path), "fifo", file=shown)
        assert e.value.file == (shown or os.path.join(str(tmp_path), "fifo"))


def test_a_file_growing_while_read_is_read_to_the_size_asked(tmp_path, monkeypatch):
    """`_read_fd` reads `size` bytes: where the first read comes back short and the file has
    grown since (a writer appending), the rest is read in a loop; `read_file` then refuses a
    file grown past its limit."""
    path = tmp_path / "v"
    path.write_bytes(b"0123456789")
    real = os.pread
    grown = []

    def pread(fd, n, offset):
        got = real(fd, n, offset)
        if not grown:
            grown.append(n)
            with open(path, "ab") as f:
                f.write(b"abcdefghij")
        return got

    monkeypatch.setattr(os, "pread", pread)
    real_preadv = os.preadv
    # each read gives at most 4 bytes, as Linux's give at most 0x7ffff000
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, at: real_preadv(fd, [bufs[0][:4]], at))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert files._read_fd(fd, 15) == b"0123456789abcde"
        grown.clear()
        path.write_bytes(b"0123456789")
        assert files._read_fd(fd, 30) == b"0123456789abcdefghij"
    finally:
        os.close(fd)
    grown.clear()
    path.write_bytes(b"0123456789")
    with pytest.raises(FormatError) as e:
        files.read_file(str(path), limit=10, rule="R", file="V")
    assert error_fields(e) == {
        "rule": "R",
        "file": "V",
        "message": "file grew past its size limit while read",
        "pointer": None,
        "expected": 10,
    }


def test_list_dir_classifies_and_names_what_it_refuses(tmp_path):
    from ockpt import limits

    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"")
    (tmp_path / "dl").symlink_to("d")
    (tmp_path / "fl").symlink_to("f")
    (tmp_path / "dangling").symlink_to("nowhere")
    assert files.list_dir(str(tmp_path)) == files.Listing(
        frozenset({"f", "fl"}), frozenset({"d", "dl"}), frozenset({"dangling"})
    )
    with limits.applied(limits.Limits(max_directory_entries=4)):
        with pytest.raises(FormatError) as e:
            files.list_dir(str(tmp_path))
        assert len(files.list_dir(str(tmp_path), limit=5).names) == 5
    assert error_fields(e) == {
        "rule": "LIMIT-005",
        "file": str(tmp_path),
        "message": "directory holds more entries than the limit",
        "pointer": None,
        "expected": "<= 4",
    }
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(FormatError) as e:
        files.list_dir(str(tmp_path / "loop"))
    assert error_fields(e) == {
        "rule": "PATH-005",
        "file": str(tmp_path / "loop"),
        "message": "a symbolic link loop stands where a directory must be",
        "pointer": None,
    }
    with pytest.raises(NotADirectoryError):
        files.list_dir(str(tmp_path / "f"))
    with pytest.raises(FileNotFoundError):
        files.list_dir(str(tmp_path / "none"))


def test_resolve_inside_is_the_real_path_or_a_refusal_naming_the_file(tmp_path):
    root = tmp_path / "ck "  # a name ending in a space is still the checkpoint's
    (root / "d").mkdir(parents=True)
    (root / "d" / "v").write_bytes(b"1")
    (root / "alias").symlink_to("d/v")
    (tmp_path / "secret").write_bytes(b"s")
    (root / "out").symlink_to(tmp_path / "secret")
    assert files.resolve_inside(str(root), "alias") == str(root / "d" / "v")
    assert files.resolve_inside(str(root), "d/none") == str(root / "d" / "none")
    assert files.read_inside(str(root), "alias", limit=9, rule="R") == b"1"
    with pytest.raises(FormatError) as e:
        files.resolve_inside(str(root), "out", file="S")
    assert _fields(e) == (
        "PATH-004",
        "S",
        f"'out' resolves to {str(tmp_path / 'secret')!r}, outside the checkpoint "
        f"{str(root)!r} (a symbolic link leads out)",
    )
    with pytest.raises(FormatError) as e:
        files.resolve_inside(str(root), "../x", file="S")
    assert (e.value.rule, e.value.file) == ("PATH-003", "S")
    with pytest.raises(FormatError) as e:
        files.read_inside(str(root), "../x", limit=9, rule="R", file="S")
    assert (e.value.rule, e.value.file) == ("PATH-003", "S")


@pytest.mark.parametrize("failing", [1, 2])
def test_a_link_changed_while_it_is_followed_is_refused(tmp_path, monkeypatch, failing):
    """`os.path.realpath` fails where a link is swapped while it is followed (here it is
    made to fail on the root's resolution, then on the name's): PATH-004 naming the file."""
    (tmp_path / "v").write_bytes(b"1")
    real = os.path.realpath
    calls = []

    def realpath(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == failing:
            raise OSError(2, "No such file or directory", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", realpath)
    with pytest.raises(FormatError) as e:
        files.read_inside(str(tmp_path), "v", limit=9, rule="R", file="S")
    assert _fields(e) == (
        "PATH-004",
        "S",
        f"{calls[-1]!r} changed while its links were followed (No such file or directory)",
    )
    (tmp_path / "alias").symlink_to("v")  # check_tree resolves the root, then each link
    calls.clear()
    with pytest.raises(FormatError) as e:
        files.check_tree(str(tmp_path), file="S")
    assert (e.value.rule, e.value.file) == ("PATH-004", "S" if failing == 1 else "S/alias")


@pytest.mark.parametrize("what", ["link", "loop", "socket", "fifo", "removed"])
def test_what_stands_at_the_name_when_it_is_opened_is_refused(tmp_path, monkeypatch, what):
    """`open_inside` checks each component, then opens it following no link: a writer that
    replaces the file between the two (here: just before the open) is refused as what it
    put there, naming the file."""
    root = tmp_path / "ck"
    (root / "d").mkdir(parents=True)
    (root / "d" / "v").write_bytes(b"1")
    (root / "other").write_bytes(b"2")
    real = os.open
    holder = []

    def replace_then_open(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None and path == "v":
            os.unlink(root / "d" / "v")
            if what == "link":
                os.symlink("../other", root / "d" / "v")
            elif what == "loop":
                os.symlink("v", root / "d" / "v")
            elif what == "fifo":
                os.mkfifo(root / "d" / "v")
            elif what == "socket":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.bind(str(root / "d" / "v"))
                holder.append(sock)
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", replace_then_open)
    try:
        if what == "removed":
            with pytest.raises(FileNotFoundError) as e:
                files.open_inside(str(root), "d/v", file="S")
            assert (e.value.errno, e.value.filename) == (2, "S")
            return
        with pytest.raises(FormatError) as e:
            files.open_inside(str(root), "d/v", file="S")
    finally:
        for sock in holder:
            sock.close()
    why = {
        "link": (
            "PATH-004",
            "a symbolic link was planted at 'v' after the path was checked (the checkpoint "
            "is being changed while it is read)",
        ),
        "loop": ("PATH-005", "a symbolic link loop stands where a regular file must be"),
        "socket": ("PATH-005", "not a regular file stands where a regular file must be"),
        "fifo": ("PATH-005", "a FIFO stands where a regular file must be"),
    }[what]
    assert _fields(e) == (why[0], "S", why[1])


@pytest.mark.parametrize("relative", [True, False])
def test_open_inside_opens_the_file_checked_and_names_what_it_refuses(
    tmp_path, monkeypatch, relative
):
    """With openat (`_OPENS_RELATIVE`) and, as on a system without it, by the resolved path."""
    monkeypatch.setattr(files, "_OPENS_RELATIVE", relative)
    root = tmp_path / "ck"
    (root / "a b").mkdir(parents=True)
    (root / "a b" / "c d").write_bytes(b"spaced")
    (root / "f").write_bytes(b"file")
    os.mkfifo(root / "p")
    monkeypatch.chdir(tmp_path)  # names are resolved from the checkpoint, not from here
    fd = files.open_inside(str(root), "a b/c d")
    try:
        assert os.read(fd, 100) == b"spaced"
        assert os.get_blocking(fd) and not os.get_inheritable(fd)
    finally:
        os.close(fd)
    for shown in (None, "S"):
        with pytest.raises(FormatError) as e:
            files.open_inside(str(root), "p", file=shown)
        assert _fields(e) == (
            "PATH-005",
            shown or os.path.join(str(root), "p"),
            "a FIFO stands where a regular file must be",
        )
    if not relative:
        return
    for name in ("", "."):
        with pytest.raises(FormatError) as e:
            files.open_inside(str(root), name, file="S")
        assert _fields(e) == ("PATH-005", "S", "a directory stands where a regular file must be")
    with pytest.raises(NotADirectoryError) as e:
        files.open_inside(str(root), "f/x", file="S")
    assert (e.value.errno, e.value.filename) == (20, "S")
    with pytest.raises(FileNotFoundError) as e:
        files.open_inside(str(tmp_path / "none"), "v", file="S")
    assert (e.value.errno, e.value.strerror, e.value.filename) == (
        2,
        "No such file or directory",
        "S",
    )


def test_open_regular_gives_a_blocking_descriptor_closed_on_exec(tmp_path):
    (tmp_path / "v").write_bytes(b"1")
    fd = files.open_regular(str(tmp_path / "v"))
    try:
        assert os.get_blocking(fd) and not os.get_inheritable(fd)
    finally:
        os.close(fd)
