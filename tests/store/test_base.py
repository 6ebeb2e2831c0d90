"""ockpt/store/base.py called directly, for what the store contract
(tests/store/test_store_contract.py) leaves open: `is_url` and `check_key`, how a store names
its files, the base class's own `rename`, `create`, `replace`, `remove_temporaries`,
`remove_committed` and `__repr__` (run on a real `MemoryStore`, which inherits some of them),
the markers a save writes and their order, `refuse_existing`'s two refusals and a
`RangedFile` read a range at a time."""

from __future__ import annotations

import pytest

from ockpt.errors import FormatError, UnsupportedError, WriteConflictError
from ockpt.names import COMMIT_FILE, TMP_MARKER
from ockpt.store import base
from ockpt.store.base import RangedFile, Store, check_key, is_url
from ockpt.store.local import LocalStore
from ockpt.store.memory import MemoryStore
from tests.support.errors import assert_error, error_fields

# --- store/base.py: names, the base class's defaults, markers, refusals and RangedFile ---


def test_is_url_needs_a_scheme_and_two_slashes() -> None:
    for url in ("file:///tmp/x", "s3://b/k", "gs://b", "memory://", "a://", "Z9+.-://x"):
        assert is_url(url) is True, url
    for path in ("/tmp/x", "run/ckpt", "s3:/b", "s3:b", "9s://x", "+s://x", "x y://z", ""):
        assert is_url(path) is False, path
    assert is_url("run/s3://x") is False  # the scheme starts the name


def test_check_key_returns_the_key_or_refuses_it_naming_the_file() -> None:
    assert check_key("a/b/c") == "a/b/c"
    assert check_key("a//./b", file="shown") == "a//./b"
    for key in ("../x", "/abs", "a/../../x", "a\0b"):
        with pytest.raises(FormatError) as e:
            check_key(key, file="the file")
        assert_error(e, rule="PATH-003", file="the file", got=key)


def test_a_stores_name_and_the_names_of_its_files() -> None:
    store = MemoryStore(display="mem:/run/ckpt")
    assert store.name == "ckpt" and store.file("a/b") == "mem:/run/ckpt/a/b"
    assert store.file("") == "mem:/run/ckpt"
    slash = MemoryStore(display="gs://bucket/")
    assert slash.name == "bucket" and slash.file("k") == "gs://bucket/k"
    assert MemoryStore(display="run/ckpt//").name == "ckpt"
    bare = MemoryStore(display="")
    assert bare.file("k") == "k" and bare.file("") == "" and bare.name == ""
    assert MemoryStore(display="top").name == "top"
    named = store.child("x").with_display("shown")
    assert named.display == "shown" and named.file("v") == "shown/v"
    assert named.prefix == "x/" and store.child("x").display == "mem:/run/ckpt/x"  # a copy
    named.set("v", b"1")
    assert store.get("x/v") == b"1"  # the same values
    assert repr(store) == "MemoryStore('mem:/run/ckpt')"


def test_the_base_refuses_rename_and_create_naming_the_key() -> None:
    store = MemoryStore(display="mem")
    store.set("a", b"1")
    with pytest.raises(UnsupportedError) as e:
        Store.rename(store, "a", "b")
    assert error_fields(e)["message"] == "mem/a: this store cannot rename"
    with pytest.raises(UnsupportedError) as e:
        Store.create(store, "k", b"1")
    assert error_fields(e)["message"] == "mem/k: this store cannot create conditionally"
    assert store.list() == ["a"]


def test_the_base_replace_sets_the_value_whole() -> None:
    store = MemoryStore()
    store.set("k", b"old")
    assert Store.replace(store, "k", b"new") is None
    Store.replace(store, "d/n", b"v")
    assert store.get("k") == b"new" and store.get("d/n") == b"v"


def test_the_base_remove_temporaries_removes_each_name_and_what_is_below() -> None:
    root = MemoryStore(display="mem")
    for key in ("a.tmp/x", "a.tmp/y/z", "b.tmp", "a.tmpx/k", "keep/v", "X.tmpX/v"):
        root.set(key, b"1")
    got = Store.remove_temporaries(root, ["b.tmp", "a.tmp/", "X.tmpX"])
    assert got == ["mem/X.tmpX", "mem/a.tmp/", "mem/b.tmp"]
    assert root.list() == ["a.tmpx/k", "keep/v"]
    assert Store.remove_temporaries(root, []) == []


def test_the_base_remove_committed_removes_the_marker_first() -> None:
    root = MemoryStore(display="mem")
    step = root.child("step")
    step.set("d/v", b"1")
    step.set(COMMIT_FILE, b"done")
    root.set("other", b"2")
    seen = []

    def delete_prefix(prefix: str = "") -> None:
        seen.append((prefix, step.get(COMMIT_FILE)))
        MemoryStore.delete_prefix(step, prefix)

    step.delete_prefix = delete_prefix
    assert Store.remove_committed(step) is True
    assert seen == [("", None)]  # the marker was gone before anything else went
    assert root.list() == ["other"]
    assert Store.remove_committed(step) is False and seen == [("", None)]


def test_markers_are_written_deepest_first_with_their_texts() -> None:
    root = MemoryStore(display="mem")
    final = root.child("final")
    written = []
    tmp = root.child("tmp")
    real_set = tmp.set

    def record(key, value):
        written.append(key)
        real_set(key, value)

    tmp.set = record
    base.write_markers(tmp, final, ["", "b/", "a", "/a/c", "b", "z", "X/"], {"a": b"given"})
    assert written == [
        f"a/c/{COMMIT_FILE}",
        f"X/{COMMIT_FILE}",
        f"a/{COMMIT_FILE}",
        f"b/{COMMIT_FILE}",
        f"z/{COMMIT_FILE}",
        COMMIT_FILE,
    ]
    assert tmp.get(f"a/{COMMIT_FILE}") == b"given"
    assert tmp.get(COMMIT_FILE) == b"Checkpoint commit was successful to mem/final"
    assert tmp.get(f"a/c/{COMMIT_FILE}") == b"Checkpoint commit was successful to mem/final/a/c"
    written.clear()
    base.write_markers(tmp, final, [""], None)
    assert written == [COMMIT_FILE]
    assert base.commit_text("gs://b/x") == "Checkpoint commit was successful to gs://b/x"


def test_refuse_existing_a_file_always_and_a_checkpoint_without_overwrite(tmp_path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    for overwrite in (False, True):
        with pytest.raises(FormatError) as e:
            base.refuse_existing(LocalStore(tmp_path / "file", display="F"), overwrite=overwrite)
        assert error_fields(e) == {
            "rule": "DIR-001",
            "file": "F",
            "message": "the checkpoint path exists and is not a directory",
            "pointer": None,
        }
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "v").write_bytes(b"1")
    store = LocalStore(tmp_path / "ck", display="C")
    with pytest.raises(WriteConflictError) as e:
        base.refuse_existing(store, overwrite=False)
    assert error_fields(e) == {
        "rule": "DIR-002",
        "file": "C",
        "message": "a checkpoint already exists there; pass overwrite=True to replace it",
    }
    assert base.refuse_existing(store, overwrite=True) is None
    assert base.refuse_existing(LocalStore(tmp_path / "none"), overwrite=False) is None


def test_check_target_refuses_the_temporary_marker_by_name() -> None:
    root = MemoryStore(display="mem")
    with pytest.raises(FormatError) as e:
        root.child(f"x{TMP_MARKER}y").check_target(overwrite=True)
    assert error_fields(e) == {
        "rule": "DIR-001",
        "file": f"mem/x{TMP_MARKER}y",
        "message": f"a checkpoint name must not contain {TMP_MARKER!r}",
        "pointer": None,
    }
    root.set("ck/v", b"1")
    assert root.child("ck").check_target(overwrite=True) is None
    with pytest.raises(WriteConflictError) as e:
        root.child("ck").check_target(overwrite=False)
    assert_error(e, rule="DIR-002", file="mem/ck")
    root.set(f"x{TMP_MARKER}y/sub/v", b"1")
    assert root.child(f"x{TMP_MARKER}y").child("sub2").check_target(overwrite=False) is None
    assert root.child("ck").write_path() == "mem/ck"


def test_a_ranged_file_reads_each_range_from_its_store() -> None:
    store = MemoryStore(display="mem")
    store.set("d/v", b"0123456789")
    f = store.open_file("d/v")
    assert isinstance(f, RangedFile)
    assert (f.store, f.key, f.display, f.identity, f.size) == (store, "d/v", "mem/d/v", None, 10)
    assert f.pread(3, 2) == b"234" and f.pread(5, 8) == b"89" and f.pread(4, 10) == b""
    buf = bytearray(b"..........")
    assert f.preadv(memoryview(buf)[1:5], 6) == 4 and buf == b".6789....."
    assert f.preadv(memoryview(buf)[:6], 7) == 3 and buf == b"78989....."
    assert f.byte_range(0, 4) is None and f.close() is None
    store.delete("d/v")
    assert f.pread(3, 0) == b""  # deleted since it was opened
    with pytest.raises(FileNotFoundError) as e:
        store.open_file("d/w")
    assert str(e.value) == "mem/d/w"


def test_a_ranged_file_of_a_store_without_sizes_asks_whether_it_exists() -> None:
    class NoSizes(MemoryStore):
        capabilities = base.Capabilities(
            atomic_rename=True,
            conditional_create=True,
            consistent_listing=True,
            sizes_known=False,
            random_access=False,
        )

        def size(self, key: str) -> int | None:
            raise UnsupportedError(key)

    store = NoSizes(display="mem")
    store.set("v", b"abc")
    f = store.open_file("v")
    assert f.size is None and f.pread(10, 1) == b"bc"
    with pytest.raises(FileNotFoundError) as e:
        store.open_file("w")
    assert str(e.value) == "mem/w"
    empty = MemoryStore(display="mem")
    empty.set("e", b"")
    assert empty.open_file("e").size == 0  # sized: no exists asked


def test_listing_names_and_the_base_defaults() -> None:
    listing = base.Listing(frozenset({"f"}), frozenset({"d"}), frozenset({"o"}))
    assert listing.names == {"f", "d", "o"}
    assert base.Listing(frozenset(), frozenset()).other == frozenset()
    store = MemoryStore()
    store.set("v", b"1")
    assert store.get_many([("v", 0, 1), ("w", 0, 1), ("v", 1, 1)]) == [b"1", None, b""]
    assert store.open_range("v") is None and store.identity("v") is None
    assert store.tensorstore_context() is None and store.check_tree() is None
    assert store.flush() is None and store.close() is None
    with store as entered:
        assert entered is store
