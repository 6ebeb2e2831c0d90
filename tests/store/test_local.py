"""`LocalStore` of ockpt/store/local.py called directly, for what the store contract
(tests/store/test_store_contract.py) leaves open: the names and options a parent keeps, how
errors of `exists`, `size`, `open_range` and `identity` name the file, `create` where a link
or a link loop stands, `delete_prefix` of a partial name, `replace`, `remove_temporaries`
and a joined save's `overwrite`."""

from __future__ import annotations

import os

import pytest

from ockpt.errors import FormatError
from ockpt.names import COMMIT_FILE, TMP_MARKER
from ockpt.store import commit
from ockpt.store.byterange import ByteRange
from ockpt.store.local import LocalStore
from tests.support.errors import assert_error, error_fields

# --- store/local.py: LocalStore's names, reads, writes and save protocol, called directly ---


def test_a_parent_is_named_by_the_displays_directory_and_keeps_the_options(tmp_path) -> None:
    context = object()
    ck = LocalStore(tmp_path / "run" / "ck", display="run/ck/", sync=False, context=context)
    up = ck.parent()
    assert up.path == str(tmp_path / "run") and up.display == "run"
    assert up._sync is False and up._context is context
    absolute = LocalStore(tmp_path / "a" / "b", display=f"{tmp_path}/a/b")
    up = absolute.parent()
    assert up.display == f"{tmp_path}/a" and up._sync is True and up._context is None
    assert up.parent().display == str(tmp_path)
    assert LocalStore("/").parent() is None
    top = LocalStore("/x", display="/x").parent()
    assert top.path == "/" and top.display == "/"


def test_exists_size_and_open_range_name_the_file_as_the_store_shows_it(tmp_path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "v").write_bytes(b"0123456789")
    os.mkfifo(root / "fifo")
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", root / "out")
    store = LocalStore(root, display="R")
    assert store.exists("v") and not store.exists("w") and not store.exists("v/x")
    assert store.exists("fifo") is True and store.exists("out") is True  # reading says why
    assert store.size("v") == 10 and store.size("w") is None
    long = "x" * 300  # ENAMETOOLONG: no answer, an OSError naming the file
    for call in (store.exists, store.size, store.open_range, store.identity, store.open_file):
        with pytest.raises(OSError) as e:
            call(long)
        assert e.value.filename == f"R/{long}", call
        for key, rule in (("fifo", "PATH-005"), ("out", "PATH-004")):
            if call == store.exists:
                continue
            with pytest.raises(FormatError) as e:
                call(key)
            assert_error(e, rule=rule, file=f"R/{key}")


def test_open_range_is_the_whole_file_on_a_descriptor_of_its_own(tmp_path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "v").write_bytes(b"0123456789")
    store = LocalStore(tmp_path, display="R")
    with store.open_range("d/v") as r:
        assert isinstance(r, ByteRange)
        assert (r.offset, r.length, r.display, r.owner) == (0, 10, "R/d/v", True)
        assert os.fstat(r.fd).st_ino == os.stat(tmp_path / "d" / "v").st_ino
        assert r.pread(0, 10) == b"0123456789" and r.pread(7, 5) == b"789"
    assert store.open_range("none") is None and store.open_range("d/v/x") is None
    (tmp_path / "empty").write_bytes(b"")
    with store.open_range("empty") as r:
        assert len(r) == 0


def test_identity_is_the_files_device_and_inode_whatever_its_name(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"1")
    os.link(tmp_path / "a", tmp_path / "hard")
    os.symlink("a", tmp_path / "soft")
    (tmp_path / "b").write_bytes(b"1")
    store = LocalStore(tmp_path)
    st = os.stat(tmp_path / "a")
    assert store.identity("a") == (st.st_dev, st.st_ino)
    assert store.identity("hard") == store.identity("soft") == store.identity("a")
    assert store.identity("b") != store.identity("a")
    assert store.identity("none") is None and store.identity("a/x") is None


def test_create_where_a_link_or_a_link_loop_stands_creates_nothing(tmp_path) -> None:
    os.symlink("loop", tmp_path / "loop")
    os.symlink("nowhere", tmp_path / "dangling")
    store = LocalStore(tmp_path)
    assert store.create("dangling", b"1") is False  # EEXIST: a link is something
    assert store.create("loop/x/k", b"1") is False  # ELOOP below a loop
    assert sorted(os.listdir(tmp_path)) == ["dangling", "loop"]
    assert store.create("d/k", b"1") is True and store.get("d/k") == b"1"
    with pytest.raises(OSError) as e:
        store.create("x" * 300, b"1")  # another failure is no "exists"
    assert e.value.errno == 36


@pytest.mark.parametrize("sync", [True, False])
def test_create_set_and_writer_flush_to_disk_as_the_store_says(tmp_path, monkeypatch, sync):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    store = LocalStore(tmp_path, sync=sync)
    assert store.create("c", b"1") is True
    assert len(synced) == int(sync)
    f = store.writer("w")
    f.append([b"ab"])
    f.close()
    assert len(synced) == 2 * int(sync) and store.get("w") == b"ab"
    child = store.child("sub")
    assert child.create("c", b"2") is True and len(synced) == 3 * int(sync)


def test_delete_prefix_of_a_partial_name_deletes_the_keys_it_starts(tmp_path) -> None:
    store = LocalStore(tmp_path / "root")
    for key in ("a/1", "a/b/2", "ab", "abc/3", "b", "ba/4"):
        store.set(key, b"x")
    store.delete_prefix("ab")
    assert store.list() == ["a/1", "a/b/2", "b", "ba/4"]
    store.delete_prefix("a/b")
    assert store.list() == ["a/1", "b", "ba/4"]
    store.delete_prefix("ba/")
    assert store.list() == ["a/1", "b"] and not (tmp_path / "root" / "ba").exists()
    store.delete_prefix()
    assert not (tmp_path / "root").exists()


def test_replace_writes_a_small_value_whole(tmp_path) -> None:
    store = LocalStore(tmp_path / "root")
    store.replace("d/k", b"one")
    store.replace("d/k", b"two")
    assert store.get("d/k") == b"two" and store.list() == ["d/k"]
    with pytest.raises(FormatError) as e:
        store.replace("../k", b"x")
    assert_error(e, rule="PATH-003")


def test_remove_temporaries_names_what_it_removed(tmp_path) -> None:
    store = LocalStore(tmp_path, display="R")
    stale = f"ck{TMP_MARKER}-1234"
    (tmp_path / stale).mkdir()
    (tmp_path / stale / "v").write_bytes(b"1")
    (tmp_path / "keep").mkdir()
    assert store.remove_temporaries([stale]) == [f"R/{stale}"]
    assert sorted(os.listdir(tmp_path)) == ["keep"]
    assert store.remove_temporaries([]) == []


def test_a_joined_local_save_keeps_its_overwrite(tmp_path) -> None:
    final = LocalStore(tmp_path / "ck", display="C")
    pending = final.begin(overwrite=False, token=0x42)
    for overwrite in (False, True):
        joined = final.join(0x42, overwrite=overwrite)
        assert joined.overwrite is overwrite and joined.pending.overwrite is overwrite
        assert joined.store.path == pending.store.path and joined.final == "C"
    joined.store.set("from-1", b"1")
    pending.commit()
    assert sorted(os.listdir(tmp_path / "ck")) == [COMMIT_FILE, "from-1"]
    assert final.write_path() == commit.temporary_name(str(tmp_path / "ck"), 0)


def test_places_children_and_reads_name_files_under_the_display(tmp_path) -> None:
    from ockpt import limits

    context = object()
    store = LocalStore(tmp_path / "root", display="R", context=context)
    assert store.place() == (("file",), tuple(str(tmp_path / "root").strip("/").split("/")))
    assert LocalStore("/no\0where").place() == (("file",), ("no\0where",))  # realpath refuses
    child = store.child("a/b")
    assert child.display == "R/a/b" and child._context is context and child._sync is True
    assert LocalStore(tmp_path, sync=False).child("x")._sync is False
    store.set("k", b"12345")
    with limits.applied(limits.Limits(max_json_bytes=4)):
        with pytest.raises(FormatError) as e:
            store.get("k")
    assert_error(e, rule="JSON-003", file="R/k", expected="<= 4 bytes", got=5)
    assert store.open_file("k").display == "R/k"
    with pytest.raises(FormatError) as e:
        store.set("../k", b"1")
    assert_error(e, rule="PATH-003", file="R/../k")
    store.set("a b/c d", b"1")
    assert (tmp_path / "root" / "a b" / "c d").read_bytes() == b"1"
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(FormatError) as e:
        LocalStore(tmp_path / "loop").list_dir()
    assert_error(e, rule="PATH-005", file=str(tmp_path / "loop"))


def test_listings_under_a_prefix_walk_from_its_directory(tmp_path) -> None:
    from ockpt import limits

    store = LocalStore(tmp_path / "root", display="R")
    for key in ("a/b/1", "a/b/c/2", "a/bc/3", "aX/b/4", "a/x/y/z/deep/5"):
        store.set(key, b"v")
    os.symlink(tmp_path / "root" / "a", tmp_path / "root" / "alink")  # not followed
    assert store.list() == ["a/b/1", "a/b/c/2", "a/bc/3", "a/x/y/z/deep/5", "aX/b/4"]
    assert store.list("aX/") == ["aX/b/4"] and store.list("aX/b/") == ["aX/b/4"]
    with limits.applied(limits.Limits(max_depth=3)):
        # the walk starts at the prefix's directory: the deep branch beside it is not visited
        assert store.list("a/b/") == ["a/b/1", "a/b/c/2"]
        assert store.list("a/b/c/") == ["a/b/c/2"]
        with pytest.raises(FormatError) as e:
            store.list("a/")
    assert error_fields(e) == {
        "rule": "LIMIT-001",
        "file": "R/a/x/y/z",
        "message": "directories nested deeper than the limit",
        "pointer": None,
        "expected": "<= 3 levels",
    }
    with limits.applied(limits.Limits(max_depth=5)):
        assert store.list("a/x/") == ["a/x/y/z/deep/5"]
    store.set("a/b/c/3", b"v")
    with limits.applied(limits.Limits(max_directory_entries=2)):
        assert store.list("a/b/c/") == ["a/b/c/2", "a/b/c/3"]  # as many as allowed
        with pytest.raises(FormatError) as e:
            store.list("a/b/")  # no directory holds more than 2 entries
    assert error_fields(e) == {
        "rule": "LIMIT-005",
        "file": "R",
        "message": "too many files under the directory",
        "pointer": None,
        "expected": "<= 2",
    }


def test_delete_prefix_of_a_directory_removes_a_link_not_its_target(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"1")
    store = LocalStore(tmp_path / "root")
    store.set("aX/v", b"1")
    store.set("a/v", b"1")
    os.symlink(outside, tmp_path / "root" / "link")
    store.delete_prefix("link/")
    assert (outside / "keep").read_bytes() == b"1" and not os.path.lexists(
        tmp_path / "root" / "link"
    )
    store.delete_prefix("aX/")
    assert store.list() == ["a/v"]


def test_writes_of_a_save_flush_at_commit_only_and_keep_the_given_markers(
    tmp_path, monkeypatch
) -> None:
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    context = object()
    store = LocalStore(tmp_path / "ck", display="C", context=context)
    pending = store.begin(overwrite=False)
    assert pending.store._context is context and pending.final == "C"
    pending.store.set("a/v", b"1")
    f = pending.store.writer("a/w")
    f.append([b"2"])
    f.close()
    assert synced == []  # flushed whole at commit
    pending.commit(["a", ""], texts={"": b"given", "a": b"item"})
    assert synced  # the commit's flush
    assert (tmp_path / "ck" / COMMIT_FILE).read_bytes() == b"given"
    assert (tmp_path / "ck" / "a" / COMMIT_FILE).read_bytes() == b"item"
    synced.clear()
    LocalStore(tmp_path / "s", sync=False).set("k", b"1")
    assert synced == []
    LocalStore(tmp_path / "s", sync=True).set("k", b"1")
    assert len(synced) == 1


def test_the_save_protocol_names_the_checkpoint_as_shown(tmp_path) -> None:
    from ockpt.errors import WriteConflictError

    store = LocalStore(tmp_path / "ck", display="C")
    pending = store.begin(overwrite=False)
    pending.store.set("v", b"1")
    pending.commit()
    assert store.check_target(overwrite=True) is None
    for call in (store.check_target, store.begin):
        with pytest.raises(WriteConflictError) as e:
            call(overwrite=False)
        assert_error(e, rule="DIR-002", file="C")
    again = store.begin(overwrite=True)
    again.store.set("w", b"2")
    again.commit()
    assert sorted(os.listdir(tmp_path / "ck")) == [COMMIT_FILE, "w"]


def test_a_writer_with_a_background_writes_on_its_thread(tmp_path, monkeypatch) -> None:
    import threading

    from ockpt.store.inflight import BackgroundWriter

    threads = []
    real = os.writev
    monkeypatch.setattr(
        os, "writev", lambda fd, b: threads.append(threading.current_thread()) or real(fd, b)
    )
    store = LocalStore(tmp_path)
    background = BackgroundWriter()
    f = store.writer("w", background=background)
    f.append([b"ab", b"cd"])
    f.close()
    background.finish()
    assert store.get("w") == b"abcd"
    assert threads and threading.main_thread() not in threads
    threads.clear()
    f = store.writer("x")
    f.append([b"1"])
    f.close()
    assert threads == [threading.main_thread()]


def test_what_tensorstore_is_given_for_a_local_directory(tmp_path) -> None:
    store = LocalStore(tmp_path / "root")
    assert store.tensorstore_spec() == {"driver": "file", "path": f"{tmp_path}/root/"}
    assert LocalStore("/").tensorstore_spec() == {"driver": "file", "path": "/"}
    store.set("v", b"1")
    assert store.check_tree() is None
    os.mkfifo(tmp_path / "root" / "p")
    with pytest.raises(FormatError) as e:
        LocalStore(tmp_path / "root", display="R").check_tree()
    assert_error(e, rule="PATH-005", file="R/p")


def test_a_local_directorys_tensorstore_context_keeps_the_callers() -> None:
    ts = pytest.importorskip("tensorstore")
    parent = ts.Context({"cache_pool": {"total_bytes_limit": 1}})
    context = LocalStore("/tmp", context=parent).tensorstore_context()
    assert context.parent is parent
    assert context["cache_pool"].to_json() == {"total_bytes_limit": 256 << 20}
    assert LocalStore("/tmp").tensorstore_context().parent is None


def test_a_link_to_a_directory_is_not_walked(tmp_path) -> None:
    store = LocalStore(tmp_path / "root")
    store.set("d/f", b"1")
    store.set("d/sub/g", b"2")
    os.symlink(tmp_path / "root" / "d", tmp_path / "root" / "dlink")
    os.symlink("..", tmp_path / "root" / "d" / "sub" / "up")
    assert store.list() == ["d/f", "d/sub/g"]
    assert store.list_dir().dirs == {"d", "dlink"}  # listed, never walked
    assert store.child("dlink").list() == ["f", "sub/g"]  # the link given is followed


def test_the_tensorstore_path_of_a_directory_ending_in_x(tmp_path) -> None:
    store = LocalStore(tmp_path / "rootX")
    assert store.tensorstore_spec()["path"] == f"{tmp_path}/rootX/"


def test_a_listing_never_walks_a_directory_outside_the_store(tmp_path) -> None:
    """A prefix whose directory leaves the store (``..``, absolute) is refused as a key that
    leaves it is (PATH-003): the walk starts at the prefix's directory, and it listed the
    parent's files (``../sibling``) or the root's (``/etc/...``)."""
    (tmp_path / "sibling").write_bytes(b"s")
    store = LocalStore(tmp_path / "root", display="R")
    store.set("a/..b", b"1")
    store.set("..c", b"2")
    for prefix in ("../", "../s", "/", f"{tmp_path}/s", "a/../../", "a/../x"):
        with pytest.raises(FormatError) as e:
            store.list(prefix)
        assert_error(e, rule="PATH-003", file=f"R/{prefix}")
        if prefix != "/":  # (delete_prefix("/") is this whole directory, as "")
            with pytest.raises(FormatError) as e:
                store.delete_prefix(prefix)
            assert_error(e, rule="PATH-003")
    assert store.list("a/..") == ["a/..b"] and store.list("..") == ["..c"]
    assert (tmp_path / "sibling").read_bytes() == b"s"
