"""ockpt/store/claims.py called directly: the sorted blocks of `_Ranges` (overlaps on either side
of a start, splits, any insertion order), `ValueClaims` by file and key, and `ChunkFiles`
(PATH-008 for a chunk file that is another chunk's, documents left aside). The attack itself is
in tests/hostile/test_guards.py."""

from __future__ import annotations

import os
import random

import pytest

from ockpt.errors import FormatError
from ockpt.store import claims as claims_module
from ockpt.store.claims import _BLOCK, ChunkFiles, ValueClaims, _Ranges
from ockpt.store.local import LocalStore

# --- store/claims.py: _Ranges (holder, add, block splits), ValueClaims.claim, ChunkFiles.claim ---


def test_ranges_holder_finds_an_overlap_on_either_side_of_the_start() -> None:
    r = _Ranges()
    assert r.holder(0, 10) is None
    r.add(10, 20, b"a")
    r.add(30, 40, b"b")
    assert r.holder(10, 20) == (b"a", 10, 20)
    assert r.holder(19, 21) == (b"a", 10, 20)  # the range before the start
    assert r.holder(5, 11) == (b"a", 10, 20)  # the first range after the start
    assert r.holder(25, 31) == (b"b", 30, 40)
    assert r.holder(0, 10) is None and r.holder(20, 30) is None and r.holder(40, 50) is None
    assert r.holder(15, 35) == (b"a", 10, 20)
    assert r.holder(-5, 100) is not None


def test_ranges_keep_sorted_blocks_and_split_them() -> None:
    r = _Ranges()
    r.add(500, 501, b"first")
    assert r.firsts == [500] and r.blocks == [([500], [501], [b"first"])]
    r.add(100, 101, b"lower")  # before every block: the first block, its first start updated
    assert r.firsts == [100] and r.blocks[0][0] == [100, 500]
    assert r.blocks[0][2] == [b"lower", b"first"]
    starts = [1000 + 2 * i for i in range(2 * _BLOCK - 2)]
    for s in starts:
        r.add(s, s + 1, b"k%d" % s)
    assert len(r.blocks) == 1 and len(r.blocks[0][0]) == 2 * _BLOCK  # not split yet
    r.add(5000 + 1, 5000 + 2, b"split")  # one more than 2 x _BLOCK: split in two
    assert len(r.blocks) == 2
    assert [len(b[0]) for b in r.blocks] == [_BLOCK, _BLOCK + 1]
    assert r.firsts == [r.blocks[0][0][0], r.blocks[1][0][0]]
    every = [s for b in r.blocks for s in b[0]]
    assert every == sorted(every)
    for b in r.blocks:  # starts, ends and keys stay together
        for s, e, k in zip(*b, strict=True):
            assert e == s + 1 and k in (b"first", b"lower", b"split", b"k%d" % s)


def test_ranges_in_any_order_are_all_found_again() -> None:
    r = _Ranges()
    starts = list(range(0, 10 * 8 * _BLOCK, 10))
    random.Random(7).shuffle(starts)
    for s in starts:
        assert r.holder(s, s + 5) is None
        r.add(s, s + 5, b"%d" % s)
    assert len(r.blocks) > 2
    for b in range(len(r.blocks)):
        assert r.firsts[b] == r.blocks[b][0][0]
        assert r.blocks[b][0] == sorted(r.blocks[b][0])
        if b:
            assert r.blocks[b - 1][0][-1] < r.blocks[b][0][0]
    for s in starts:
        assert r.holder(s, s + 1) == (b"%d" % s, s, s + 5)
        assert r.holder(s + 4, s + 6) == (b"%d" % s, s, s + 5)
        assert r.holder(s + 5, s + 10) is None


def test_value_claims_by_file_and_key() -> None:
    claims = ValueClaims()
    assert claims.claim(b"a", ("dev", 1), 10, 20) is None
    assert claims.claim(b"b", ("dev", 2), 10, 20) is None  # another file
    assert claims.claim(b"b", ("dev", 1), 10, 20) == (b"a", 10, 20)  # another key, same bytes
    assert claims.claim(b"a", ("dev", 1), 10, 20) is None  # the same key again
    assert claims.claim(b"a", ("dev", 1), 12, 14) == (b"a", 10, 20)  # itself, another range
    assert claims.claim(b"c", ("dev", 1), 15, 15) is None  # empty: shares no byte
    assert claims.claim(b"c", ("dev", 3), 7, 7) is None
    assert ("dev", 3) not in claims._files  # nothing recorded for an empty value
    assert claims.claim(b"d", ("dev", 1), 20, 30) is None
    assert claims.claim(b"e", ("dev", 1), 25, 26) == (b"d", 20, 30)  # recorded


def _item(tmp_path):
    item = tmp_path / "item"
    (item / "a").mkdir(parents=True)
    (item / "a" / "0.0").write_bytes(b"chunk")
    (item / "a" / ".zarray").write_text("{}")
    (item / "b").mkdir()
    os.link(item / "a" / "0.0", item / "b" / "0.0")
    os.link(item / "a" / ".zarray", item / "b" / ".zarray")
    return LocalStore(str(item))


def test_chunk_files_refuse_a_chunk_file_that_is_another_chunks(tmp_path) -> None:
    store = _item(tmp_path)
    chunks = ChunkFiles()
    chunks.claim(store, "a/0.0")
    chunks.claim(store, "a/0.0")  # the same key again
    chunks.claim(store, "a/.zarray")
    chunks.claim(store, "b/.zarray")  # documents are no chunks
    chunks.claim(store, "missing/0.0")  # no file: nothing to claim
    with pytest.raises(FormatError) as e:
        chunks.claim(store, "b/0.0")
    assert e.value.rule == "PATH-008"
    assert e.value.file == store.file("b/0.0")
    assert e.value.message == (
        "chunk file 'b/0.0' is the same file as chunk file 'a/0.0' (a hard link or a link "
        "inside the checkpoint): no two keys may share stored bytes"
    )


def test_chunk_files_name_keys_that_are_no_utf8(tmp_path, monkeypatch) -> None:
    store = _item(tmp_path)
    monkeypatch.setattr(LocalStore, "identity", lambda self, key: "one file")
    chunks = ChunkFiles()
    chunks.claim(store, "a/\udcff")
    with pytest.raises(FormatError) as e:
        chunks.claim(store, "b/\udcfe")
    assert "chunk file 'b/\\udcfe' is the same file as chunk file 'a/\\udcff'" in e.value.message


def test_chunk_files_claim_by_identity_a_one_byte_range(monkeypatch) -> None:
    seen = []
    real = ValueClaims.claim

    def spy(self, key, file, start, end):
        seen.append((key, file, start, end))
        return real(self, key, file, start, end)

    monkeypatch.setattr(claims_module.ValueClaims, "claim", spy)

    class Store:
        def identity(self, key):
            return None if key == "gone" else ("id", key[-1])

        def file(self, key):
            return "/x/" + key

    chunks = ChunkFiles()
    chunks.claim(Store(), "a/1")
    chunks.claim(Store(), "gone")
    chunks.claim(Store(), "x/zarr.json")
    assert seen == [(b"a/1", ("id", "1"), 0, 1)]


def test_chunk_files_leave_the_documents_of_nested_arrays_aside(tmp_path, monkeypatch) -> None:
    store = _item(tmp_path)
    monkeypatch.setattr(LocalStore, "identity", lambda self, key: "one file")
    chunks = ChunkFiles()
    for key in ("p/q/.zarray", "r/s/t/.zarray", "u/v/zarr.json", ".zattrs", "w/x/.zgroup"):
        chunks.claim(store, key)
    chunks.claim(store, "p/q/0.0")
    with pytest.raises(FormatError):
        chunks.claim(store, "p/q/.zarray/0")  # a chunk key below a name like a document's
