"""The item model shared by the reader and the validator (`ockpt.item_files`), on the
twelve-process checkpoint real Orbax wrote (`orbax-0.12.8/multiprocess12`): the
``array_metadatas`` files are taken by process number (ARRM-003), the strings document is
looked for in one order, and the reader and the validator judge the same entries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.errors import FormatError
from ockpt.item_files import ItemFiles, take_array_metadatas
from ockpt.reader.item import OpenedItem
from ockpt.store import as_store
from tests.support import FIXTURES

CASE = FIXTURES / "orbax-0.12.8" / "multiprocess12"
CHECKPOINT = CASE / "checkpoint"
N = 12


def test_the_files_are_taken_by_number_not_by_name():
    files = ItemFiles(as_store(CHECKPOINT))
    assert files.array_metadata_files() == [f"process_{i}" for i in range(N)]
    names = sorted(f"process_{i}" for i in range(N))
    assert names[2:4] == ["process_10", "process_11"]  # what an order by name would give


def test_twelve_processes_read_and_validate_alike():
    """Every file holds every array (twelve equal files): the reader and the validator take
    process_0's entries, and both accept the checkpoint."""
    item = OpenedItem(CHECKPOINT, step=None, item=None, context=None)
    written = item.files.array_metadatas()
    assert set(written) == {"cols", "replicated", "rows"}
    assert {w.file.rsplit("/", 1)[-1] for w in written.values()} == {"process_0"}
    assert all(w.differing == () for w in written.values())
    report = ockpt.validate(CHECKPOINT, deep=True)
    assert report.ok and report.findings == [], report.format_text()
    expected = json.loads((CASE / "expected.json").read_text())
    got = ockpt.load_pytree(CHECKPOINT)
    assert sorted(got) == sorted(expected["items"][""]["items"])
    assert got["rows"].shape == (2 * N, 3) and got["cols"].shape == (4, N)


def _edit(path: Path, name: str, edit) -> None:
    doc = json.loads(path.read_text())
    doc["array_metadatas"] = edit(doc["array_metadatas"])
    path.write_text(json.dumps(doc))


def test_the_entry_of_the_lowest_number_counts_for_reader_and_validator(tmp_path):
    """process_0 and process_1 hold no entry for `rows`; process_10 (first by name) says it is
    an rbg key, process_2 (first by number) that it is an array. Both the reader and the
    validator take process_2's: `rows` loads as float32, ARM-002 is not raised, and the
    validator names process_10 for disagreeing (ARRM-003)."""
    ckpt = tmp_path / "c"
    shutil.copytree(CHECKPOINT, ckpt)
    metas = ckpt / "array_metadatas"
    for p in (0, 1):
        _edit(
            metas / f"process_{p}",
            "rows",
            lambda a: [e for e in a if e["array_metadata"]["param_name"] != "rows"],
        )

    def to_key(entries):
        for e in entries:
            if e["array_metadata"]["param_name"] == "rows":
                e["array_metadata"]["ext_metadata"] = {"random_key_impl": "rbg"}
        return entries

    _edit(metas / "process_10", "rows", to_key)
    item = OpenedItem(ckpt, step=None, item=None, context=None)
    rows = item.files.array_metadatas()["rows"]
    assert rows.file.endswith("array_metadatas/process_2")
    assert rows.differing == (str(metas / "process_10"),)
    assert item.random_key_impls() == {}
    got = ockpt.load_pytree(ckpt)
    assert got["rows"].dtype == np.float32
    report = ockpt.validate(ckpt)
    found = [(f.rule, f.file, f.pointer) for f in report.findings]
    assert found == [("ARRM-003", str(metas / "process_10"), "rows")]


def test_take_array_metadatas_keeps_the_first_and_names_the_differing():
    from ockpt.documents.array_metadatas import ArrayMetadatas

    def doc(ws):
        return ArrayMetadatas.from_json(
            {"array_metadatas": [{"array_metadata": {"param_name": "a", "write_shape": ws}}]}
        )

    taken = take_array_metadatas([("p0", doc([1])), ("p1", doc([1])), ("p2", doc([2]))])
    assert taken["a"].file == "p0" and taken["a"].metadata.write_shape == (1,)
    assert taken["a"].differing == ("p2",)


def test_strings_are_looked_for_in_one_order(tmp_path):
    """The root `_strings.json`, then `<P>/_strings.json` in the tree's order, then a file
    named P (STR-003, STR-004); the reader and the validator use that one order."""
    store = as_store(tmp_path)
    files = ItemFiles(store)
    assert files.strings_locations(["b", "a", "b"]) == [
        "_strings.json",
        "b/_strings.json",
        "a/_strings.json",
        "b",
        "a",
    ]
    assert files.strings_location(["b", "a"]) is None
    store.set("a/_strings.json", b'{"a": "x"}')
    store.set("b/_strings.json", b'{"b": "y"}')
    assert files.strings_location(["b", "a"]) == "b/_strings.json"  # the tree's first
    assert files.strings_location(["a", "b"]) == "a/_strings.json"
    store.set("_strings.json", b"{")
    assert files.strings_location(["a"]) == "_strings.json"
    with pytest.raises(FormatError):
        files.strings_document(["a"])


def test_reader_and_validator_read_items_through_the_item_model():
    """Architecture: the order of array_metadatas and of the strings locations is decided in
    `item_files` only; neither the reader nor the validator sorts those files itself."""
    root = Path(ockpt.__file__).parent
    for path in [root / "validate.py", *sorted((root / "reader").glob("*.py"))]:
        text = path.read_text()
        assert "process_index" not in text, path
        assert "ARRAY_METADATAS_DIR}/" not in text, path
    assert "ItemFiles" in (root / "validate.py").read_text()
    assert "ItemFiles" in (root / "reader" / "item.py").read_text()
