"""The store contract (`ockpt.store.base.Store`), one class of tests that every store passes.

`StoreTests` holds the contract; each store subclasses it with a fixture `store` that gives a
fresh, empty directory of that store: a local directory, an in-process `MemoryStore`,
tensorstore's ``memory://``, ``s3://`` against moto's server and ``gs://`` against
fake-gcs-server. What a store declares in its `Capabilities` is tested where declared, and
its absence where not (a store without conditional create refuses `create`; one without
sizes refuses `size`; one without rename commits by ``commit_success.txt`` written last).
A save, a load and a validation through the public API close the class: every store holds
a real checkpoint.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import ockpt
from ockpt.errors import FormatError, UnsupportedError, WriteConflictError
from ockpt.names import COMMIT_FILE, TMP_MARKER
from ockpt.store import LocalStore, MemoryStore, Store, UrlStore, as_store


class StoreTests:
    """The contract; subclasses give `store`: a fresh, empty directory of their store."""

    @pytest.fixture
    def store(self) -> Store:  # pragma: no cover - each subclass gives its own
        raise NotImplementedError

    # -- reads and writes ---------------------------------------------------------------------

    def test_a_value_reads_back_whole_by_range_and_many_at_once(self, store: Store):
        store.set("a/b/value", b"0123456789")
        assert store.get("a/b/value") == b"0123456789"
        assert store.get_range("a/b/value", 2, 3) == b"234"
        assert store.get_range("a/b/value", 8, 5) == b"89"  # short at the end, as pread
        assert store.get_range("a/b/value", 10, 5) == b""
        assert store.get_range("absent", 0, 1) is None
        assert store.get("absent") is None
        got = store.get_many([("a/b/value", 0, 2), ("absent", 0, 1), ("a/b/value", 9, 4)])
        assert got == [b"01", None, b"9"]

    def test_a_value_over_the_limit_is_refused_with_the_callers_rule(self, store: Store):
        store.set("doc", b"x" * 100)
        assert store.get("doc", limit=100) == b"x" * 100
        with pytest.raises(FormatError) as e:
            store.get("doc", limit=99, rule="JSON-003")
        assert e.value.rule == "JSON-003" and e.value.file == store.file("doc")

    def test_set_replaces_and_writer_appends_in_order(self, store: Store):
        store.set("k", b"old")
        store.set("k", [b"n", memoryview(b"ew")])
        file = store.writer("f")
        file.append([b"ab", memoryview(b"cd")])
        file.append([b"ef"])
        file.close()
        store.flush()
        assert store.get("k") == b"new" and store.get("f") == b"abcdef"

    def test_exists_and_size(self, store: Store):
        store.set("d/v", b"12345")
        assert store.exists("d/v") and not store.exists("d/w")
        if store.capabilities.sizes_known:
            assert store.size("d/v") == 5 and store.size("d/w") is None
        else:
            with pytest.raises(UnsupportedError):
                store.size("d/v")

    def test_listings_are_sorted_bounded_by_prefix_and_split_by_directory(self, store: Store):
        for key in ("b", "a/2", "a/1", "a/sub/x", "c/y"):
            store.set(key, key.encode())
        assert store.list() == ["a/1", "a/2", "a/sub/x", "b", "c/y"]
        assert store.list("a/") == ["a/1", "a/2", "a/sub/x"]
        assert store.list("a/s") == ["a/sub/x"]
        top = store.list_dir()
        assert top.files == {"b"} and top.dirs == {"a", "c"}
        assert store.list_dir("a").files == {"1", "2"} and store.list_dir("a").dirs == {"sub"}
        assert store.list_dir("absent").names == frozenset()
        assert store.child("a").list() == ["1", "2", "sub/x"]

    def test_children_see_their_part_and_are_named_under_their_parent(self, store: Store):
        child = store.child("x/y")
        child.set("v", b"1")
        assert store.get("x/y/v") == b"1"
        assert child.display == store.file("x/y") and child.file("v") == store.file("x/y/v")
        assert child.name == "y"
        parent = child.parent()
        assert parent is not None and parent.get("y/v") == b"1"

    def test_is_directory(self, store: Store):
        assert store.is_directory() is False
        store.set("v", b"1")
        assert store.is_directory() is True

    def test_delete_and_delete_prefix(self, store: Store):
        for key in ("a/1", "a/2", "ab", "b"):
            store.set(key, b"x")
        store.delete("b")
        store.delete("never-there")
        assert store.list() == ["a/1", "a/2", "ab"]
        store.delete_prefix("a/")
        assert store.list() == ["ab"]
        store.delete_prefix("")
        assert store.list() == [] and store.is_directory() is False

    def test_names_that_leave_the_store_are_refused(self, store: Store):
        for name in ("../outside", "/abs", "a/../../x", "a\0b"):
            with pytest.raises(FormatError) as e:
                store.get(name)
            assert e.value.rule == "PATH-003"
            with pytest.raises(FormatError) as e:
                store.set(name, b"x")
            assert e.value.rule == "PATH-003"

    def test_conditional_create(self, store: Store):
        if not store.capabilities.conditional_create:
            with pytest.raises(UnsupportedError):
                store.create("k", b"1")
            return
        assert store.create("k", b"first") is True
        assert store.create("k", b"second") is False
        assert store.get("k") == b"first"

    def test_rename(self, store: Store):
        store.set("a", b"1")
        store.set("b", b"old")
        if not store.capabilities.atomic_rename:
            with pytest.raises(UnsupportedError):
                store.rename("a", "b")
            return
        store.rename("a", "b")
        assert store.list() == ["b"] and store.get("b") == b"1"

    def test_a_listing_shows_what_was_written(self, store: Store):
        assert store.capabilities.consistent_listing
        keys = [f"k{i:03d}" for i in range(40)]
        for key in keys:
            store.set(key, b"v")
        assert store.list() == keys

    # -- the save protocol --------------------------------------------------------------------

    def _markers(self, store: Store) -> list[str]:
        return [k for k in store.list() if k.rsplit("/", 1)[-1] == COMMIT_FILE]

    def test_a_save_is_seen_only_once_committed(self, store: Store):
        final = store.child("ckpt")
        pending = final.begin(overwrite=False)
        pending.store.set("item/data", b"new")
        pending.store.flush()
        if final.capabilities.atomic_rename:
            assert final.list() == []  # written elsewhere until the rename
        else:
            assert self._markers(final) == []  # written in place, not yet marked
        pending.commit(["item", ""])
        assert final.get("item/data") == b"new"
        assert self._markers(final) == [COMMIT_FILE, f"item/{COMMIT_FILE}"]
        assert final.get(COMMIT_FILE).decode().endswith(final.display)
        assert [k for k in store.list() if TMP_MARKER in k] == []

    def test_a_second_save_is_refused_without_overwrite(self, store: Store):
        final = store.child("ckpt")
        first = final.begin(overwrite=False)
        first.store.set("old", b"1")
        first.commit()
        with pytest.raises(WriteConflictError) as e:
            final.begin(overwrite=False)
        assert e.value.rule == "DIR-002"
        with pytest.raises(WriteConflictError):
            final.check_target(overwrite=False)
        second = final.begin(overwrite=True)
        second.store.set("new", b"2")
        second.commit()
        assert final.list() == [COMMIT_FILE, "new"]  # nothing of the old checkpoint is left

    def test_an_aborted_save_leaves_nothing(self, store: Store):
        final = store.child("ckpt")
        pending = final.begin(overwrite=False)
        pending.store.set("a", b"1")
        pending.abort()
        assert store.list() == []

    def test_other_processes_join_a_save_by_its_token(self, store: Store):
        final = store.child("ckpt")
        pending = final.begin(overwrite=False, token=0xABC)
        joined = final.join(0xABC, overwrite=False)
        joined.store.set("from-process-1", b"1")
        joined.store.flush()
        pending.store.set("from-process-0", b"0")
        pending.commit()
        assert final.list() == [COMMIT_FILE, "from-process-0", "from-process-1"]

    def test_names_with_the_temporary_marker_are_refused(self, store: Store):
        with pytest.raises(FormatError) as e:
            store.child(f"ckpt{TMP_MARKER}-x").check_target(overwrite=True)
        assert e.value.rule == "DIR-001"

    def test_remove_committed(self, store: Store):
        final = store.child("step")
        pending = final.begin(overwrite=False)
        pending.store.set("v", b"1")
        pending.commit()
        assert final.remove_committed() is True
        assert store.list() == [] and final.remove_committed() is False

    def test_overlaps_by_whole_path_components(self, store: Store):
        """`overlaps`: the same directory, or one inside the other, by path components (a
        sibling whose name extends another's is apart: `run` and `run-evil`)."""
        run = store.child("run")
        assert run.overlaps(store.child("run")) and run.overlaps(run.child("step/item"))
        assert run.child("x").overlaps(run) and store.overlaps(run)
        assert not run.overlaps(store.child("run-evil"))
        assert not run.child("a").overlaps(run.child("b"))
        assert run.with_display("shown otherwise").overlaps(run)

    # -- a checkpoint -------------------------------------------------------------------------

    def test_a_checkpoint_saves_loads_and_validates(self, store: Store):
        tree = {"w": np.arange(600, dtype=np.float32).reshape(20, 30), "b": {"x": np.int8(3)}}
        for use_ocdbt in (True, False):
            target = store.child(f"ckpt-{use_ocdbt}")
            ockpt.save_pytree(target, tree, use_ocdbt=use_ocdbt)
            got = ockpt.load_pytree(target, backend="python")
            np.testing.assert_array_equal(got["w"], tree["w"])
            assert got["b"]["x"] == 3
            report = ockpt.validate(target, deep=True)
            assert report.ok, report.format_text()
            if target.tensorstore_spec() is not None:
                got = ockpt.load_pytree(target, backend="tensorstore")
                np.testing.assert_array_equal(got["w"], tree["w"])

    def test_a_checkpoint_is_never_copied_into_itself(self, store: Store):
        """`cp` refuses a destination that is its source or lies inside it (the copy would
        land in the checkpoint it reads), and a source inside the destination (an overwrite
        there clears the destination first, where a store has no rename: the source with
        it); the source is left as it was (issue 32 item 6)."""
        from ockpt.transfer import copy

        src = store.child("run")
        ockpt.save_pytree(src, {"w": np.arange(6.0)})
        before = src.list()
        for dst in (src, src.child("inner"), store):
            with pytest.raises(ValueError, match="one is the other or lies inside it"):
                copy(src, dst, overwrite=True, progress=False)
        assert src.list() == before
        assert ockpt.load_pytree(src, backend="python")["w"].tolist() == list(range(6))


class TestLocalStore(StoreTests):
    @pytest.fixture
    def store(self, tmp_path) -> Store:
        return LocalStore(tmp_path / "root")

    def test_capabilities(self, store):
        c = store.capabilities
        assert c.atomic_rename and c.conditional_create and c.sizes_known and c.links
        assert store.os_path() == str(store.path) and store.child("x").os_path().endswith("/x")


class TestMemoryStore(StoreTests):
    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore().child("root")

    def test_no_file_system_path(self, store):
        assert store.os_path() is None

    def test_tensorstore_cannot_reach_it(self, store):
        ockpt.save_pytree(store.child("c"), {"a": np.arange(3)})
        with pytest.raises(UnsupportedError):
            ockpt.load_pytree(store.child("c"), backend="tensorstore")


def _url_store(url: str) -> Store:
    pytest.importorskip("tensorstore")
    found = as_store(url)
    assert isinstance(found, UrlStore)
    return found


class TestTensorstoreMemory(StoreTests):
    @pytest.fixture
    def store(self) -> Store:
        return _url_store(f"memory://bucket/{uuid.uuid4().hex}/root")


class TestS3(StoreTests):
    @pytest.fixture
    def store(self, s3, s3_bucket, monkeypatch) -> Store:
        for name, value in s3.items():
            monkeypatch.setenv(name, value)
        return _url_store(f"s3://{s3_bucket[0]}/root")


class TestGcs(StoreTests):
    @pytest.fixture
    def store(self, gcs, gcs_bucket, monkeypatch) -> Store:
        for name, value in gcs.items():
            monkeypatch.setenv(name, value)
        return _url_store(gcs_bucket.url("root"))

    def test_conditional_create(self, store):
        pytest.skip(
            "fake-gcs-server ignores ifGenerationMatch=0 on uploads (a second upload with it "
            "replaces the object), so the emulator cannot show GCS's conditional create"
        )
