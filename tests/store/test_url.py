"""`UrlStore` of ockpt/store/url.py called directly, for what the store contract
(tests/store/test_store_contract.py) and the slow bucket tests leave open.

Without tensorstore: `_successor`, the capabilities each driver declares, places, children,
parents, `size`, `writer`'s parts and the refusal of `import_tensorstore`. With tensorstore
(skipped without it): `url_spec` and `new_context`, reads bounded before the value is fetched
(and a value that grows or goes between the two requests), short ranges, listings bounded in
entries, what `deadline.wait` is told, writes in flight, `clear` and `remove_committed`, and a
store that never answers (an S3 endpoint on a closed port, no retries), whose every failure is
an `OSError` naming the key: in-process ``memory://`` and ``file://`` kvstores, no server.
"""

from __future__ import annotations

import sys
import uuid

import pytest

from ockpt.errors import FormatError, NotACheckpointError, UnsupportedError
from ockpt.names import COMMIT_FILE
from ockpt.store import deadline, url
from ockpt.store.url import UrlPending, UrlStore, _successor
from tests.support.errors import assert_error, error_fields

# --- store/url.py without tensorstore: names, capabilities, parts held until close ---


def test_successor_is_the_first_key_past_every_key_with_the_prefix() -> None:
    assert _successor(b"abc") == b"abd"
    assert _successor(b"a\xff") == b"b"
    assert _successor(b"a\xfe\xff\xff") == b"a\xff"
    assert _successor(b"\xff\xff") == b"" and _successor(b"") == b""
    assert _successor(b"\x00") == b"\x01"


def test_capabilities_of_each_driver() -> None:
    for driver in ("gcs", "memory", "s3"):
        c = UrlStore({"driver": driver, "path": "p/"}, "x").capabilities
        assert c.conditional_create is True, driver
        assert (c.atomic_rename, c.sizes_known, c.random_access, c.links) == (
            False,
            False,
            False,
            False,
        )
        assert c.consistent_listing is True
    assert UrlStore({"driver": "file", "path": "/p/"}, "x").capabilities.conditional_create is False
    assert UrlStore({}, "x").capabilities.conditional_create is False


def test_places_children_and_parents() -> None:
    root = UrlStore({"driver": "gcs", "bucket": "b", "path": "run/"}, "gs://b/run")
    assert root.place() == (("kvstore", ("bucket", "b"), ("driver", "gcs")), ("run",))
    child = root.child("/ck/item/")
    assert child.spec == {"driver": "gcs", "bucket": "b", "path": "run/ck/item/"}
    assert child.display == "gs://b/run//ck/item/" and child._shared is root._shared
    assert root.child("x").display == "gs://b/run/x"
    assert child.place()[1] == ("run", "ck", "item") and root.overlaps(child)
    other = UrlStore({"driver": "gcs", "bucket": "c", "path": "run/"}, "gs://c/run")
    assert not root.overlaps(other)
    up = root.child("ck/item").parent()
    assert up.spec["path"] == "run/ck/" and up.display == "gs://b/run/ck"
    assert up._shared is root._shared
    top = root.parent()
    assert top.spec == {"driver": "gcs", "bucket": "b", "path": ""} and top.display == "gs://b"
    assert top.parent() is None and top.place()[1] == ()
    assert UrlStore({"driver": "memory"}, "memory://").parent() is None
    assert UrlStore({"driver": "memory"}, "memory://").child("a").spec["path"] == "a/"
    assert root.tensorstore_spec() is root.spec
    assert root.write_path() == "run" and top.write_path() == ""
    assert UrlStore({"driver": "memory"}, "m").write_path() == ""
    # names ending or starting with what a wrong strip would take off
    bare = UrlStore({"driver": "memory"}, "m")
    assert bare.place() == (("kvstore", ("driver", "memory")), ())
    assert root.child("Xa/").spec["path"] == "run/Xa/"
    x = UrlStore({"driver": "memory", "path": "a/X/"}, "/m/X")
    assert x.parent().spec["path"] == "a/" and x.parent().display == "/m"
    assert UrlStore({"driver": "memory", "path": "X/"}, "m/").parent().spec["path"] == ""
    assert UrlStore({"driver": "memory", "path": "a/b/"}, "gs://b/a/b/").parent().display == (
        "gs://b/a"
    )
    assert UrlStore({"driver": "memory", "path": "runX/"}, "m").write_path() == "runX"


def test_size_is_refused_and_a_writer_holds_its_parts_until_close() -> None:
    store = UrlStore({"driver": "memory", "path": "p/"}, "memory://p")
    with pytest.raises(UnsupportedError) as e:
        store.size("k")
    assert (
        error_fields(e)["message"] == "memory://p/k: an object store tells no size without a read"
    )
    started = []
    store._start = lambda key, value: started.append((key, value))
    part = bytearray(b"cd")
    f = store.writer("d/k", background=object())
    f.append([b"ab", memoryview(part)])
    f.append([])
    f.append([b"e"])
    assert started == []
    part[:] = b"CD"  # held as given, not copied
    f.close()
    f.close()  # once
    assert started == [("d/k", b"abCDe")]
    with pytest.raises(FormatError) as e:
        store.writer("../k")
    assert_error(e, rule="PATH-003", file="memory://p/../k")


def test_a_pending_save_names_its_store() -> None:
    store = UrlStore({"driver": "memory", "path": "p/"}, "memory://p")
    for overwrite in (False, True):
        pending = store.join(7, overwrite=overwrite)
        assert isinstance(pending, UrlPending)
        assert (pending.store, pending.final, pending.overwrite) == (store, "memory://p", overwrite)


def test_import_tensorstore_refused_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorstore", None)
    with pytest.raises(UnsupportedError) as e:
        url.import_tensorstore()
    message = error_fields(e)["message"]
    assert message.startswith("this needs tensorstore (") and e.value.__cause__ is None
    assert message.endswith(
        '): pip install "ockpt[tensorstore]"; local directories are read and written without '
        "it (backend='python')"
    )


# --- store/url.py with tensorstore: in-process kvstores and a store that never answers ---


@pytest.fixture
def ts():
    return pytest.importorskip("tensorstore")


def _memory(ts, path: str = "root") -> UrlStore:
    return UrlStore.from_url(f"memory://{uuid.uuid4().hex}/{path}/")


def test_url_spec_ends_with_a_slash_and_finds_an_s3_endpoint(ts, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    assert url.url_spec("memory://b/x") == {"driver": "memory", "path": "b/x/"}
    assert url.url_spec("memory://b/x/") == {"driver": "memory", "path": "b/x/"}
    assert url.url_spec("memory://") == {"driver": "memory"}
    assert url.url_spec("gs://bucket-a/p") == {"driver": "gcs", "bucket": "bucket-a", "path": "p/"}
    s3 = {"driver": "s3", "bucket": "bucket-a", "path": "p/"}
    assert url.url_spec("s3://bucket-a/p") == s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://any:1")
    assert url.url_spec("s3://bucket-a/p") == {**s3, "endpoint": "http://any:1"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3:2")
    assert url.url_spec("s3://bucket-a/p") == {**s3, "endpoint": "http://s3:2"}
    assert url.url_spec("gs://bucket-a/p") == {"driver": "gcs", "bucket": "bucket-a", "path": "p/"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "")
    assert url.url_spec("s3://bucket-a/p")["endpoint"] == "http://any:1"
    with pytest.raises(NotACheckpointError) as e:
        url.url_spec("nope://x")
    assert_error(e, rule="LOAD-050", file=None)
    assert error_fields(e)["message"].startswith("nope://x: not a kvstore URL tensorstore knows (")


def test_new_context_caches_nodes_and_retries_unless_the_caller_says(ts) -> None:
    c = url.new_context()
    assert c["cache_pool"].to_json() == {"total_bytes_limit": 256 << 20}
    assert c["cache_pool#chunks"].to_json() in ({}, {"total_bytes_limit": 0})
    retries = {"max_retries": 8, "initial_delay": "500ms", "max_delay": "8s"}
    assert c["s3_request_retries"].to_json() == retries
    assert c["gcs_request_retries"].to_json() == retries
    parent = ts.Context({"gcs_request_retries": {"max_retries": 2}})
    c = url.new_context(parent)
    assert c.parent is parent and c["gcs_request_retries"].to_json() == {"max_retries": 2}
    assert c["cache_pool"].to_json() == {"total_bytes_limit": 256 << 20}
    assert c["s3_request_retries"].to_json() != retries
    store = UrlStore.from_url("memory://b/x/", context=parent)
    assert store.display == "memory://b/x" and store._shared.given is parent
    first = store.tensorstore_context()
    assert first.parent is parent and store.child("y").tensorstore_context() is first


def test_reads_are_bounded_before_the_value_is_fetched(ts, monkeypatch) -> None:
    store = _memory(ts)
    store.set("doc", b"x" * 10)
    asked = []
    real = UrlStore._request
    monkeypatch.setattr(
        UrlStore, "_request", lambda self, key, r: asked.append((key, r)) or real(self, key, r)
    )
    assert store.get("doc", limit=10) == b"x" * 10
    assert asked == [("doc", slice(10, 11)), ("doc", None)]
    asked.clear()
    with pytest.raises(FormatError) as e:
        store.get("doc", limit=9, rule="RULE-1")
    assert asked == [("doc", slice(9, 10))]  # the value itself is never fetched
    assert error_fields(e) == {
        "rule": "RULE-1",
        "file": store.file("doc"),
        "message": "file larger than its size limit",
        "pointer": None,
        "expected": "<= 9 bytes",
    }
    asked.clear()
    assert store.exists("doc") and not store.exists("absent")
    # no byte of the value is asked for
    assert [(k, r.stop - (r.start or 0)) for k, r in asked] == [("doc", 0), ("absent", 0)]
    assert store.get("absent") is None and store.get("doc") == b"x" * 10
    from ockpt import limits

    with limits.applied(limits.Limits(max_json_bytes=9)):
        with pytest.raises(FormatError) as e:
            store.get("doc")
    assert_error(e, rule="JSON-003", file=store.file("doc"), expected="<= 9 bytes")
    with pytest.raises(FormatError) as e:
        store.get("/abs")
    assert_error(e, rule="PATH-003", file=store.file("/abs"))


def test_a_value_that_grows_or_goes_between_the_two_requests(ts, monkeypatch) -> None:
    store = _memory(ts)
    store.set("doc", b"small")
    real = UrlStore._request

    def then(change):
        def request(self, key, r):
            got = real(self, key, r)
            if r is not None:
                change()
            return got

        return request

    monkeypatch.setattr(UrlStore, "_request", then(lambda: store.set("doc", b"y" * 50)))
    with pytest.raises(FormatError) as e:
        store.get("doc", limit=20, rule="RULE-2")
    assert error_fields(e) == {
        "rule": "RULE-2",
        "file": store.file("doc"),
        "message": "file larger than its size limit",
        "pointer": None,
        "expected": "<= 20 bytes",
        "got": 50,
    }
    store.set("doc", b"small")
    monkeypatch.setattr(UrlStore, "_request", then(lambda: store.delete("doc")))
    assert store.get("doc", limit=20) is None


def test_ranges_are_short_at_the_end_and_none_for_no_value(ts, monkeypatch) -> None:
    store = _memory(ts)
    store.set("v", b"0123456789")
    told = []
    real = deadline.wait
    monkeypatch.setattr(
        deadline, "wait", lambda f, shown, nbytes=0: told.append((shown, nbytes)) or real(f, shown)
    )
    assert store.get_range("v", 2, 3) == b"234"
    assert told == [(store.file("v"), 3)]
    assert store.get_range("v", 8, 5) == b"89" and store.get_range("v", 10, 5) == b""
    assert store.get_range("v", 12, 5) == b"" and store.get_range("none", 0, 5) is None
    told.clear()
    got = store.get_many([("v", 1, 2), ("none", 0, 1), ("v", 9, 4), ("v", 11, 1), ("v", 0, 0)])
    assert got == [b"12", None, b"9", b"", b""]
    assert told[:2] == [(store.file("v"), 2), (store.file("none"), 1)]
    with pytest.raises(FormatError) as e:
        store.get_many([("v", 0, 1), ("../x", 0, 1)])
    assert_error(e, rule="PATH-003", file=store.file("../x"))
    assert store.exists("v") and not store.exists("none")
    with pytest.raises(FormatError) as e:
        store.get_range("a/../../b", 0, 1)
    assert_error(e, rule="PATH-003", file=store.file("a/../../b"))
    with pytest.raises(FormatError) as e:
        store.exists("\0")
    assert_error(e, rule="PATH-003", file=store.file("\0"))
    for call in (store.delete, lambda k: store.set(k, b"1")):
        with pytest.raises(FormatError) as e:
            call("../d")
        assert_error(e, rule="PATH-003", file=store.file("../d"))


def test_writes_tell_the_deadline_their_size(ts, monkeypatch) -> None:
    store = _memory(ts)
    store.kvstore()
    told = []
    real = deadline.wait
    monkeypatch.setattr(
        deadline, "wait", lambda f, shown, nbytes=0: told.append((shown, nbytes)) or real(f, shown)
    )
    store.set("a", [b"12", memoryview(b"345")])
    store.set("b", bytearray(b"67"))
    assert store.create("c", b"8901") is True and store.create("c", b"x") is False
    store.delete("a")
    assert told == [
        (store.file("a"), 5),
        (store.file("b"), 2),
        (store.file("c"), 4),
        (store.file("c"), 1),
        (store.file("a"), 0),
    ]
    assert store.list() == ["b", "c"] and store.get("c") == b"8901"
    told.clear()
    f = store.writer("w")
    f.append([b"abc"])
    f.close()
    assert store._shared.inflight._held == 3
    store.flush()
    assert told == [(store.file("w"), 3)] and store._shared.inflight._held == 0
    assert store.get("w") == b"abc"
    for i in range(20):  # more writes than may be in flight: the oldest are waited for
        f = store.writer(f"many/{i:02d}")
        f.append([b"m"])
        f.close()
        assert len(store._shared.inflight._futures) <= 16
    store.flush()
    assert store.list("many/") == [f"many/{i:02d}" for i in range(20)]
    told.clear()
    store.list()
    store.list("a")
    store.delete_prefix("zz")
    assert told == [(store.display, 0)] * 3
    with pytest.raises(FormatError) as e:
        store.create("../c", b"1")
    assert_error(e, rule="PATH-003", file=store.file("../c"))


def test_listings_by_prefix_are_bounded(ts, monkeypatch) -> None:
    from ockpt import limits

    store = _memory(ts)
    for key in ("a/1", "a/2", "a/sub/x", "ab", "b", "\xff/k", "c\xff"):
        store.set(key, b"v")
    assert store.list("a") == ["a/1", "a/2", "a/sub/x", "ab"]
    assert store.list("a/") == ["a/1", "a/2", "a/sub/x"]
    assert store.list("c") == ["c\xff"] and store.list("\xff") == ["\xff/k"]
    assert store.list_dir() == url.Listing(
        frozenset({"ab", "b", "c\xff"}), frozenset({"a", "\xff"})
    )
    assert store.list_dir("/a/") == url.Listing(frozenset({"1", "2"}), frozenset({"sub"}))
    assert store.list_dir("none").names == frozenset()
    assert store.is_directory() is True and store.child("none").is_directory() is False
    with limits.applied(limits.Limits(max_directory_entries=4)):
        assert len(store.list("a")) == 4
        with pytest.raises(FormatError) as e:
            store.list()
    assert error_fields(e) == {
        "rule": "LIMIT-005",
        "file": store.display,
        "message": "too many objects under the directory",
        "pointer": None,
        "expected": "<= 4",
        "got": 7,
    }
    store.delete_prefix("a/s")
    store.delete_prefix("\xff")
    assert store.list() == ["a/1", "a/2", "ab", "b", "c\xff"]
    store.delete_prefix("c")
    store.delete_prefix("a")
    assert store.list() == ["b"]
    store.delete_prefix()
    assert store.list() == [] and store.is_directory() is False


def test_clear_removes_markers_first_deepest_first(ts, monkeypatch) -> None:
    store = _memory(ts)
    for key in (f"b/{COMMIT_FILE}", f"a/c/{COMMIT_FILE}", COMMIT_FILE, "a/v", f"x{COMMIT_FILE}"):
        store.set(key, b"1")
    deleted = []
    real = UrlStore.delete
    monkeypatch.setattr(UrlStore, "delete", lambda self, k: deleted.append(k) or real(self, k))
    assert store.remove_committed() is True
    assert deleted == [COMMIT_FILE, f"b/{COMMIT_FILE}", f"a/c/{COMMIT_FILE}"]
    assert store.list() == [] and store.remove_committed() is False


def test_a_save_begins_clears_commits_and_aborts(ts) -> None:
    store = _memory(ts)
    store.set("old", b"1")
    with pytest.raises(Exception) as e:
        store.begin(overwrite=False)
    assert_error(e, rule="DIR-002", file=store.display)
    pending = store.begin(overwrite=True)
    assert store.list() == [] and pending.overwrite is True
    f = pending.store.writer("item/data")
    f.append([b"x"])
    f.close()
    marked = []
    real_set = pending.store.set

    def set_marker(key, value):
        marked.append((key, pending.store._shared.inflight._held))  # nothing left in flight
        real_set(key, value)

    pending.store.set = set_marker
    pending.commit(["item", ""], texts={"item": b"given"})
    assert marked == [(f"item/{COMMIT_FILE}", 0), (COMMIT_FILE, 0)]
    assert store.list() == [COMMIT_FILE, "item/commit_success.txt", "item/data"]
    assert store.get(f"item/{COMMIT_FILE}") == b"given"
    assert store.get(COMMIT_FILE).endswith(store.display.encode())
    other = _memory(ts)
    pending = other.begin(overwrite=False)
    pending.store.set("a", b"1")
    pending.abort()
    assert other.list() == []
    store.close()
    assert store._store is None and store.get("item/data") == b"x"  # reopened, same context


def test_a_store_that_never_answers_is_an_os_error_naming_the_key(ts, monkeypatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",  # discard: nothing listens
    }.items():
        monkeypatch.setenv(name, value)
    context = ts.Context({"s3_request_retries": {"max_retries": 0}})
    store = UrlStore.from_url("s3://bucket-x/root", context=context)
    key = store.file("k")
    for call, shown in (
        (lambda: store.get("k"), key),
        (lambda: store.get_range("k", 0, 1), key),
        (lambda: store.get_many([("k", 0, 1)]), key),
        (lambda: store.exists("k"), key),
        (lambda: store.set("k", b"1"), key),
        (lambda: store.create("k", b"1"), key),
        (lambda: store.delete("k"), key),
        (lambda: store.list("a"), store.display),
        (lambda: store.list(), store.display),
        (lambda: store.delete_prefix("a"), store.display),
        (lambda: store.is_directory(), store.display),
    ):
        with pytest.raises(OSError) as e:
            call()
        assert type(e.value) is OSError and str(e.value).startswith(f"{shown}: "), shown
        assert "retry attempts failed" in str(e.value)  # tensorstore's reason, kept
        assert len(str(e.value)) <= len(shown) + 2 + 400
    f = store.writer("w")
    f.append([b"1"])
    f.close()
    with pytest.raises(OSError) as e:
        store.flush()
    assert str(e.value).startswith(f"{store.file('w')}: ")
    f = store.writer("w2")
    f.close()
    pending = store.join(1, overwrite=False)
    with pytest.raises(OSError) as e:
        pending.abort()  # a failed write is no reason not to try deleting
    assert str(e.value).startswith(f"{store.display}: ")


def test_a_kvstore_that_cannot_open_is_an_os_error(ts) -> None:
    store = UrlStore({"driver": "no-such-driver", "path": "x/"}, "shown")
    with pytest.raises(OSError) as e:
        store.kvstore()
    assert str(e.value).startswith('shown: Error parsing object member "driver"')
    store = UrlStore({"driver": "d" * 500, "path": "x/"}, "shown")
    with pytest.raises(OSError) as e:
        store.kvstore()
    assert len(str(e.value)) == len("shown: ") + 400  # tensorstore's text cut at 400
    memory = _memory(ts)
    assert memory.kvstore() is memory.kvstore()


def test_failures_name_the_key_and_keep_400_characters_of_tensorstores_text(ts, tmp_path) -> None:
    """A ``file://`` kvstore's errors name the whole path: with a name too long for the file
    system they are longer than the 400 characters an OSError keeps."""
    root = tmp_path / ("d" * 200) / ("e" * 200)
    root.mkdir(parents=True)
    (root / "v").write_bytes(b"0123")
    store = UrlStore(url.url_spec(f"file://{root}"), "F")
    with pytest.raises(UnsupportedError) as e:
        store.create("k", b"1")  # the file driver has no conditional write
    assert error_fields(e)["message"] == "F/k: this store cannot create conditionally"
    assert store.from_url(f"file://{root}X/").display == f"file://{root}X"
    long = "x" * 300
    for call, shown in (
        (lambda: store.get(long), store.file(long)),
        (lambda: store.get_range(long, 0, 1), store.file(long)),
        (lambda: store.get_many([(long, 0, 1)]), store.file(long)),
        (lambda: store.exists(long), store.file(long)),
        (lambda: store.set(f"v/{long}", b"1"), store.file(f"v/{long}")),
        (lambda: store.delete(long), store.file(long)),
    ):
        with pytest.raises(OSError) as e:
            call()
        text = str(e.value)
        assert text.startswith(f"{shown}: ") and len(text) == len(shown) + 2 + 400, shown
        assert "d" * 100 in text  # tensorstore names the path


def test_what_each_read_tells_the_deadline(ts, monkeypatch) -> None:
    store = _memory(ts)
    told = []
    real = deadline.wait
    monkeypatch.setattr(
        deadline, "wait", lambda f, shown, nbytes=0: told.append((shown, nbytes)) or real(f, shown)
    )
    store.set("v", b"0123456789")
    assert told[0] == (store.display, 0)  # the open
    told.clear()
    assert store.get("v", limit=20) == b"0123456789"
    assert store.exists("v") and store.get_range("v", 0, 4) == b"0123"
    assert told == [
        (store.file("v"), 1),  # the byte past the limit
        (store.file("v"), 0),  # the whole value: no size known
        (store.file("v"), 0),
        (store.file("v"), 4),
    ]


def test_keys_that_are_no_utf8_and_a_root_that_is_a_file(ts, tmp_path) -> None:
    store = _memory(ts)
    store.kvstore().write(b"\xff/k", b"1").result()  # not UTF-8: listed with surrogates
    store.kvstore().write(b"X/v", b"1").result()
    assert store.list() == ["X/v", "\udcff/k"] and store.list("\udcff") == ["\udcff/k"]
    assert store.list_dir() == url.Listing(frozenset(), frozenset({"X", "\ufffd"}))
    assert store.list_dir("X") == url.Listing(frozenset({"v"}), frozenset())
    assert store.list_dir("/") == store.list_dir()
    store.delete_prefix("\udcff")
    assert store.list() == ["X/v"]
    root = tmp_path / ("d" * 200) / ("e" * 200)
    root.parent.mkdir()
    root.write_bytes(b"x")
    f = UrlStore(url.url_spec(f"file://{root}"), "F")
    for call in (f.list, lambda: f.list("a"), lambda: f.delete_prefix("a"), f.delete_prefix):
        with pytest.raises(OSError) as e:
            call()
        text = str(e.value)
        assert text.startswith("F: ") and len(text) == 3 + 400 and "d" * 100 in text
