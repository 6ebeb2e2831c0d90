"""ockpt/store/__init__.py: `as_store` (a store as it is, a local path, a `file://` URL, a
kvstore URL to `UrlStore.from_url`, replaced here so that no test needs tensorstore) and the
names imported when first asked for (`MemoryStore`, the url module's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ockpt.store
from ockpt.store import LocalStore, Store, as_store, memory, url

# --- store/__init__.py: as_store and the names imported when first asked for ---


def test_as_store_returns_a_store_as_it_is(tmp_path) -> None:
    store = LocalStore(tmp_path)
    assert as_store(store) is store
    assert as_store(store, context=object()) is store


def _no_url_store(monkeypatch) -> None:
    def from_url(cls, text, *, context=None):
        raise AssertionError(f"a url store for {text!r}")

    monkeypatch.setattr(url.UrlStore, "from_url", classmethod(from_url))


def test_as_store_of_a_local_path(tmp_path, monkeypatch) -> None:
    _no_url_store(monkeypatch)
    monkeypatch.chdir(tmp_path)
    context = object()
    for given in ("run/ck", Path("run/ck")):
        store = as_store(given, context=context)
        assert type(store) is LocalStore and isinstance(store, Store)
        assert store.path == os.path.join(str(tmp_path), "run", "ck")
        assert store.display == "run/ck"
        assert store._context is context
    assert as_store("run")._context is None


def test_as_store_of_a_file_url_is_its_path(tmp_path, monkeypatch) -> None:
    _no_url_store(monkeypatch)
    store = as_store(f"file://{tmp_path}/ck")
    assert type(store) is LocalStore
    assert store.path == f"{tmp_path}/ck" and store.display == f"{tmp_path}/ck"


def test_as_store_of_a_kvstore_url(monkeypatch) -> None:
    asked = []

    def from_url(cls, text, *, context=None):
        asked.append((cls, text, context))
        return "a url store"

    monkeypatch.setattr(url.UrlStore, "from_url", classmethod(from_url))
    context = object()
    assert as_store("gs://bucket/run", context=context) == "a url store"
    assert as_store("memory://x") == "a url store"
    assert asked == [
        (url.UrlStore, "gs://bucket/run", context),
        (url.UrlStore, "memory://x", None),
    ]


def test_the_stores_imported_when_first_asked_for() -> None:
    assert ockpt.store.MemoryStore is memory.MemoryStore
    assert ockpt.store.UrlStore is url.UrlStore
    assert ockpt.store.import_tensorstore is url.import_tensorstore
    assert ockpt.store.new_context is url.new_context
    with pytest.raises(AttributeError) as e:
        _ = ockpt.store.nothing
    assert str(e.value) == "module 'ockpt.store' has no attribute 'nothing'"
