"""`MemoryStore` of ockpt/store/memory.py called directly, for what the store contract
(tests/store/test_store_contract.py) leaves open: its places, names of children, `exists` of
a directory, `rename` of a missing key, `delete_prefix` without a prefix, and a joined save's
`overwrite`."""

from __future__ import annotations

import pytest

from ockpt.errors import WriteConflictError
from ockpt.store.memory import MemoryStore

# --- store/memory.py: MemoryStore's places, reads, writes and save protocol, called directly ---


def _tree() -> MemoryStore:
    root = MemoryStore()
    root.set("run/a", b"1")
    root.set("run/d/x", b"22")
    root.set("run/d/y/z", b"333")
    root.set("other/k", b"4")
    return root


def test_places_of_memory_stores() -> None:
    one, two = MemoryStore(), MemoryStore()
    assert one.child("a").place() == one.child("a").place()
    assert one.child("a").place() != two.child("a").place()  # another store's values
    assert one.child("a").overlaps(one.child("a").child("b"))
    assert not one.child("a").overlaps(two.child("a"))
    (namespace, parts) = one.child("a/b/").place()
    assert namespace[1] == id(one._values) and parts == ("a", "b")


def test_exists_of_values_and_directories() -> None:
    run = _tree().child("run")
    assert run.exists("a") and run.exists("d/x")
    assert run.exists("d") and run.exists("d/y")  # a directory: keys below it
    assert not run.exists("b") and not run.exists("d/x/q") and not run.exists("d/")
    assert not run.exists("dd")


def test_rename_moves_a_value_or_names_the_missing_one() -> None:
    run = _tree().child("run")
    run.rename("a", "b")
    assert run.get("b") == b"1" and run.get("a") is None
    with pytest.raises(FileNotFoundError) as e:
        run.rename("a", "c")
    assert str(e.value) == run.file("a")


def test_delete_prefix_without_one_deletes_the_whole_directory() -> None:
    root = _tree()
    root.child("run").delete_prefix()
    assert root.list() == ["other/k"]
    root.child("other").delete_prefix("x")
    assert root.list() == ["other/k"]


def test_a_joined_save_keeps_its_overwrite() -> None:
    root = _tree()
    run = root.child("run")
    pending = run.join(7, overwrite=True)
    assert pending.overwrite is True
    pending.store.set("new", b"n")
    pending.commit()
    assert run.get("new") == b"n"
    assert run.get("a") is None  # the old save is replaced
    refused = run.join(8, overwrite=False)
    assert refused.overwrite is False
    refused.store.set("v", b"v")
    with pytest.raises(WriteConflictError) as e:
        refused.commit()
    assert e.value.rule == "DIR-002"


def test_names_of_a_memory_store_and_its_children() -> None:
    root = MemoryStore()
    assert (root.prefix, root.display) == ("", "memory:")
    run = root.child("run")
    assert (run.prefix, run.display) == ("run/", "memory:/run")
    assert run.file("a") == "memory:/run/a"
    assert root.child("/run/").prefix == "run/" and root.child("a/b").prefix == "a/b/"
    assert root.child("runX").prefix == "runX/" and root.child(" x ").prefix == " x /"
    assert run.child("X").prefix == "run/X/"
