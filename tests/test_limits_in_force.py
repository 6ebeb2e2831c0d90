"""``limits=`` on `ockpt.open`, `load_pytree`, `pytree_metadata` and `validate` (issue 31): the
limits a caller passes replace `LIMITS` for everything the call reads, in every thread it reads
in, and for as long as an opened checkpoint lives; they never leak to the next call. Shown on
real Orbax 0.12.8 bytes, each limit set just below and just at what the fixture needs."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt import limits as limits_module
from ockpt.engines.python import fastread
from ockpt.errors import FormatError
from ockpt.limits import LIMITS, Limits, applied, current

ROOT = Path(__file__).resolve().parents[1]
SHARDED = ROOT / "fixtures" / "orbax-0.12.8" / "sharded" / "checkpoint"
LEAVES = 8  # the fixture's leaves (its tree_metadata entries)


def _tight(**kw: int) -> Limits:
    return Limits(**kw)


@pytest.mark.parametrize("call", ["load_pytree", "pytree_metadata", "open"])
def test_max_tree_entries_refuses_a_tree_one_entry_too_large(call):
    """Also shows that a `_METADATA` parsed under looser limits (the parse is cached) is not
    reused under stricter ones, and that the defaults are in force again after the call."""

    def run(limits: Limits | None):
        if call == "open":
            with ockpt.open(SHARDED, limits=limits) as ckpt:
                return ckpt.keys()
        return getattr(ockpt, call)(SHARDED, limits=limits)

    run(_tight(max_tree_entries=LEAVES))  # exactly its entries: read
    with pytest.raises(FormatError) as e:
        run(_tight(max_tree_entries=LEAVES - 1))
    assert e.value.rule == "LIMIT-002" and e.value.file.endswith("_METADATA")
    assert current() is LIMITS  # nothing leaks out of the call
    run(None)


def test_validate_reports_what_its_limits_refuse_as_a_finding():
    assert ockpt.validate(SHARDED, limits=_tight(max_tree_entries=LEAVES)).ok
    report = ockpt.validate(SHARDED, limits=_tight(max_tree_entries=LEAVES - 1))
    assert not report.ok
    assert any(f.rule == "LIMIT-002" and f.file.endswith("_METADATA") for f in report.errors)
    assert ockpt.validate(SHARDED).ok  # the defaults again


def test_an_opened_checkpoint_keeps_its_limits_for_later_reads(tmp_path):
    """Limits given to `open` hold for reads made after the call returned, outside any
    `applied` block: here the `_sharding` document, read when the metadata is first asked."""
    copy = tmp_path / "ckpt"
    shutil.copytree(SHARDED, copy)
    size = os.path.getsize(copy / "_sharding")
    # every document `open` reads is smaller, so only the later read of _sharding is refused
    assert size > os.path.getsize(copy / "_METADATA")
    ckpt = ockpt.open(copy, limits=_tight(max_json_bytes=size - 1))
    assert current() is LIMITS
    with ckpt, pytest.raises(FormatError) as e:
        ckpt.metadata  # noqa: B018 - reads _sharding now
    assert e.value.rule == "JSON-003" and e.value.file.endswith("_sharding")
    with ockpt.open(copy) as fine:
        assert len(fine.metadata) == LEAVES


def test_arrays_opened_later_are_held_to_the_checkpoint_limits():
    """An array opened after `open` returned (``ckpt[name]``) is held to the checkpoint's
    limits, whatever limits are in force where it is opened."""
    with ockpt.open(SHARDED, limits=_tight(max_array_bytes=64)) as ckpt:
        assert ckpt["single_device"].read().shape == (5,)  # 20 bytes
        with pytest.raises(FormatError) as e:
            ckpt["xy"]  # 8 x 4 float32: 128 bytes
        assert e.value.rule == "ZARR-005" and e.value.got == 128
    with applied(_tight(max_array_bytes=64)), ockpt.open(SHARDED, limits=LIMITS) as ckpt:
        assert ckpt["xy"].read().shape == (8, 4)


def test_reads_in_worker_threads_see_the_callers_limits(monkeypatch):
    """The python engine decodes chunks on a thread pool; each chunk's task runs in a copy of
    the caller's context, so a worker sees the caller's limits (forced onto the pool here by
    putting every chunk above the inline threshold)."""
    monkeypatch.setattr(fastread, "INLINE_BYTES", 0)
    seen: list[tuple[str, Limits]] = []
    read_chunk = fastread._read_chunk

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((threading.current_thread().name, current()))
        return read_chunk(*args, **kwargs)

    monkeypatch.setattr(fastread, "_read_chunk", spy)
    mine = Limits(max_json_bytes=1 << 20)
    tree = ockpt.load_pytree(SHARDED, limits=mine, backend="python")
    want = np.load(ROOT / "fixtures" / "orbax-0.12.8" / "sharded" / "arrays" / "0000.npy")
    assert any(np.array_equal(np.asarray(v), want) for v in tree.values() if np.ndim(v))
    workers = [lim for name, lim in seen if name.startswith("ockpt-read")]
    assert workers and all(lim is mine for lim in workers), seen


def test_applied_sets_restores_and_checks_its_argument():
    mine = Limits(max_depth=8)
    with applied(mine) as got:
        assert got is mine and current() is mine
        with applied(None) as inner:  # None leaves those in force
            assert inner is mine
    assert current() is LIMITS
    with pytest.raises(TypeError, match="ockpt.limits.Limits"), applied({"max_depth": 8}):  # type: ignore[arg-type]
        pass  # pragma: no cover
    with pytest.raises(TypeError), ockpt.open(SHARDED, limits=8):  # type: ignore[arg-type]
        pass  # pragma: no cover
    assert limits_module.LIMITS is LIMITS and ockpt.Limits is Limits
