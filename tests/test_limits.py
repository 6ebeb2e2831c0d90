"""`ockpt.limits`: the bounded read (`read_capped`), the memory a process may still take
(`memory_available`, from /proc and the cgroup and rlimit figures) and the allocation check.

``limits=`` on `ockpt.open`, `load_pytree`, `pytree_metadata` and `validate` (issue 31): the
limits a caller passes replace `LIMITS` for everything the call reads, in every thread it reads
in, and for as long as an opened checkpoint lives; they never leak to the next call. Shown on
real Orbax 0.12.8 bytes, each limit set just below and just at what the fixture needs."""

from __future__ import annotations

import io
import os
import resource
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt import limits
from ockpt import limits as limits_module
from ockpt.engines.python import fastread
from ockpt.errors import FormatError, MemoryLimitError, OckptError
from ockpt.limits import LIMITS, Limits, applied, current, read_capped
from tests.support.errors import error_fields

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




def test_read_capped_reads_one_byte_past_the_limit_and_no_more(tmp_path) -> None:
    """The bounded read of spec/limits.md: `limit + 1` bytes of a longer file (so the caller
    sees it is over), the whole of a shorter one; also for objects without a file number."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    with open(path, "rb") as f:
        assert len(read_capped(f, 10)) == 11
    with open(path, "rb") as f:
        assert len(read_capped(f, 1000)) == 100
    assert len(read_capped(io.BytesIO(b"x" * 100), 10)) == 11




GIB = 1 << 30
MEMINFO_8G = {"/proc/meminfo": "MemTotal: 999 kB\nMemFree: 5 kB\nMemAvailable:   8388608 kB\n"}
V2 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"
V1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"
STATM = "/proc/self/statm"
PAGE = os.sysconf("SC_PAGE_SIZE")


def system(monkeypatch, files, soft=resource.RLIM_INFINITY):  # type: ignore[no-untyped-def]
    """Make `limits` see `files` (path -> text; any other path is missing) as the system's
    files, and `soft` as this process's address-space limit (RLIMIT_AS)."""
    monkeypatch.setattr(limits, "_system_file", lambda path: files.get(path))

    def getrlimit(which):  # type: ignore[no-untyped-def]
        assert which == resource.RLIMIT_AS, which
        return soft, resource.RLIM_INFINITY

    monkeypatch.setattr(resource, "getrlimit", getrlimit)


def group(paths, cap, used):  # type: ignore[no-untyped-def]
    """The files of a control group: its limit `cap` and usage `used` (texts, as the kernel
    writes them, or None for a file that is missing)."""
    return {p: t for p, t in zip(paths, (cap, used), strict=True) if t is not None}


# ---------------------------------------------------------------------------------------------
# memory_available


def test_memory_available_reads_memavailable_in_bytes(monkeypatch):
    """``MemAvailable`` of /proc/meminfo, in kB there, is the bound in bytes; with no figure
    at all (no meminfo, no group, no address-space limit) the answer is None, and a meminfo
    without ``MemAvailable`` (kernels before 3.14) gives none. Kills memory_available mutants
    2-6, 8-17 (file name, line prefix, field, unit), 1 and 73-75 (the list and the min); 7,
    ``or "XXXX"`` for a missing meminfo, is equivalent: that line is no MemAvailable either."""
    system(monkeypatch, MEMINFO_8G)
    assert limits.memory_available() == 8 * GIB
    system(monkeypatch, {"/proc/meminfo": "MemTotal: 999 kB\nMemFree: 5 kB\n"})
    assert limits.memory_available() is None
    system(monkeypatch, {})
    assert limits.memory_available() is None


def test_memory_available_takes_what_a_control_group_leaves(monkeypatch):
    """A control group's limit less its usage bounds the answer (cgroup v2 ``memory.max`` /
    ``memory.current``, else v1 ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``), the
    least of it and MemAvailable counts, and a group over its limit leaves 0. Kills mutants
    18-30 (the four file names and their reads), 39-46 (the difference, its floor of 0, and
    the v2 group's ``break``: v1's files are not read once v2's gave a bound)."""
    cases = [
        (group(V2, "3221225472\n", "1073741824\n"), 2 * GIB),  # 3 GiB - 1 GiB
        (group(V1, "2147483648\n", "536870912\n"), 3 * GIB // 2),  # 2 GiB - 0.5 GiB
        (group(V2, "1073741824\n", "2147483648\n"), 0),  # over its limit
        ({**group(V2, "5368709120\n", "0\n"), **group(V1, "1024\n", "0\n")}, 5 * GIB),
    ]
    for files, want in cases:
        system(monkeypatch, {**MEMINFO_8G, **files})
        assert limits.memory_available() == want, files
        system(monkeypatch, files)  # no MemAvailable: the group's figure alone
        assert limits.memory_available() == want, files
    system(monkeypatch, {**MEMINFO_8G, **group(V2, str(9 * GIB), "0")})  # group above meminfo
    assert limits.memory_available() == 8 * GIB


def test_memory_available_ignores_a_group_without_a_limit(monkeypatch):
    """No limit is no bound: v2's word ``max``, v1's 2^63 (rounded to a page), any limit of
    2^60 or more; a limit just under 2^60 counts. A group whose limit or usage is missing or
    unreadable gives no bound, and the v1 files are read then. Kills mutants 31-38 (the
    conditions and the 2^60 cut) and 27-30."""
    none = [
        group(V2, "max\n", "5\n"),
        group(V1, "9223372036854771712\n", "4096\n"),
        group(V2, f"{1 << 60}\n", "0\n"),
        group(V2, "1000\n", None),
        group(V2, None, "10\n"),
        group(V2, "max\n", None),
        group(V1, "", "10\n"),
    ]
    for files in none:
        system(monkeypatch, files)
        assert limits.memory_available() is None, files
        system(monkeypatch, {**MEMINFO_8G, **files})
        assert limits.memory_available() == 8 * GIB, files
    system(monkeypatch, group(V2, f"{(1 << 60) - 1}\n", "0\n"))
    assert limits.memory_available() == (1 << 60) - 1
    for v2 in (group(V2, "max\n", "5\n"), group(V2, "1000\n", None), group(V2, None, "5\n")):
        system(monkeypatch, {**v2, **group(V1, "2147483648\n", "536870912\n")})
        assert limits.memory_available() == 3 * GIB // 2, v2


def test_memory_available_takes_what_the_address_space_limit_leaves(monkeypatch):
    """A finite soft RLIMIT_AS less the process's size (the first field of /proc/self/statm,
    in pages) bounds the answer, with a floor of 0; an infinite limit, or a statm that is
    missing or unreadable, gives no bound. Kills mutants 47-55 and 57-72 (the limit, statm's
    name, field and separator, the page size, the condition, the difference and its floor;
    56, ``or "XXXX"`` for a missing statm, is equivalent: that text is no integer either)."""
    statm = {STATM: "1000 200 30 4 0 50 0\n"}
    system(monkeypatch, {**MEMINFO_8G, **statm}, soft=4 * GIB)
    assert limits.memory_available() == 4 * GIB - 1000 * PAGE
    system(monkeypatch, statm, soft=4 * GIB)
    assert limits.memory_available() == 4 * GIB - 1000 * PAGE
    system(monkeypatch, {**MEMINFO_8G, **statm}, soft=999 * PAGE)  # already over the limit
    assert limits.memory_available() == 0
    system(monkeypatch, {**MEMINFO_8G, **statm})  # no limit (RLIM_INFINITY)
    assert limits.memory_available() == 8 * GIB
    system(monkeypatch, statm)
    assert limits.memory_available() is None
    for broken in ({}, {STATM: ""}, {STATM: "x 200\n"}):
        system(monkeypatch, {**MEMINFO_8G, **broken}, soft=4 * GIB)
        assert limits.memory_available() == 8 * GIB, broken
    system(monkeypatch, {}, soft=4 * GIB)
    assert limits.memory_available() is None


def test_memory_available_answers_on_this_system():
    """Unpatched, on this system: a positive count of bytes where /proc/meminfo has
    ``MemAvailable`` (Linux since 3.14), else None or such a count. (Not compared with
    MemAvailable itself: that figure changes between two reads.)"""
    got = limits.memory_available()
    assert got is None or (type(got) is int and got > 0)
    meminfo = limits._system_file("/proc/meminfo") or ""
    if any(line.startswith("MemAvailable:") for line in meminfo.splitlines()):
        assert got is not None


# ---------------------------------------------------------------------------------------------
# _system_file and _number


def test_system_file_reads_the_first_64_kib_as_ascii(tmp_path):
    """A system file's text: its first 64 KiB (65536 bytes of a longer file), decoded as ASCII
    with any other byte replaced by U+FFFD, never an error. Kills _system_file mutants 1-15
    and 17-18 (open's path and mode, the read's size, the codec and its error handler); 16,
    codec ``"ASCII"``, is equivalent: Python's codec lookup ignores case."""
    small = tmp_path / "meminfo"
    small.write_bytes(b"MemAvailable:   8388608 kB\n")
    assert limits._system_file(str(small)) == "MemAvailable:   8388608 kB\n"
    odd = tmp_path / "odd"
    odd.write_bytes(b"caf\xc3\xa9 \xff1\n")
    assert limits._system_file(str(odd)) == "caf\ufffd\ufffd \ufffd1\n"
    big = tmp_path / "big"
    big.write_bytes(b"0123456789abcdef" * 12800)  # 200 KiB
    text = limits._system_file(str(big))
    assert text is not None and len(text) == 1 << 16
    assert text == ("0123456789abcdef" * 4096)


def test_system_file_is_none_for_what_cannot_be_read(tmp_path):
    """A missing file or a directory is None (an OSError, not raised)."""
    assert limits._system_file(str(tmp_path / "missing")) is None
    assert limits._system_file(str(tmp_path)) is None


def test_number_reads_an_integer_or_none():
    """The integer a system file holds, surrounding whitespace allowed; None for no text,
    cgroup v2's ``max`` and any other text that is not an integer. Kills _number mutants 1-4."""
    assert limits._number("3221225472\n") == 3221225472
    assert limits._number("  42 ") == 42
    assert limits._number("0") == 0
    assert limits._number(None) is None
    assert limits._number("max\n") is None
    assert limits._number("") is None
    assert limits._number("12 kB") is None


# ---------------------------------------------------------------------------------------------
# check_allocation


def available(monkeypatch, value):  # type: ignore[no-untyped-def]
    """Make `memory_available` answer `value`; the list returned counts its calls."""
    calls: list[None] = []

    def memory_available():  # type: ignore[no-untyped-def]
        calls.append(None)
        return value

    monkeypatch.setattr(limits, "memory_available", memory_available)
    return calls


def test_check_allocation_skips_allocations_under_64_mib(monkeypatch):
    """Allocations under CHECKED_ALLOCATION_BYTES (64 MiB) are not checked, and the memory
    figures are not read for them; 64 MiB itself is checked. Kills check_allocation mutant 1
    (``<=``)."""
    assert limits.CHECKED_ALLOCATION_BYTES == 64 << 20
    calls = available(monkeypatch, 0)
    limits.check_allocation((64 << 20) - 1, what="the chunk")
    limits.check_allocation(0, what="the chunk")
    assert calls == []
    with pytest.raises(MemoryLimitError):
        limits.check_allocation(64 << 20, what="the chunk")
    assert len(calls) == 1
    available(monkeypatch, (64 << 20) - 1)
    with pytest.raises(MemoryLimitError):
        limits.check_allocation(64 << 20, what="the chunk")


def test_check_allocation_refuses_only_more_than_is_available(monkeypatch):
    """Exactly the memory available is allowed, one byte more is refused; with no figure
    known (None) nothing is refused. Kills mutants 2-5 (no figure read, ``or``, ``is None``,
    ``>=``)."""
    n = 100 << 20
    available(monkeypatch, n)
    limits.check_allocation(n, what="the chunk")
    limits.check_allocation(n - 1, what="the chunk")
    with pytest.raises(MemoryLimitError):
        limits.check_allocation(n + 1, what="the chunk")
    available(monkeypatch, None)
    limits.check_allocation(1 << 62, what="the chunk")
    available(monkeypatch, 0)
    with pytest.raises(MemoryLimitError):
        limits.check_allocation(n, what="the chunk")


def test_check_allocation_error_says_what_how_much_and_where(monkeypatch, tmp_path):
    """The refusal is a MemoryLimitError (an OckptError and a MemoryError) with rule LIMIT-006,
    a message naming what was to be allocated, its bytes and the bytes available, and the file
    (as text) the sizes were declared in, or None. Kills mutants 6-9 (message, file)."""
    available(monkeypatch, 70 << 20)
    file = tmp_path / "c" / "a" / ".zarray"
    with pytest.raises(MemoryLimitError) as info:
        limits.check_allocation(100 << 20, what="param 'a'", file=file)
    e = info.value
    assert isinstance(e, OckptError) and isinstance(e, MemoryError)
    assert type(e) is ockpt.MemoryLimitError
    assert error_fields(e) == {
        "rule": "LIMIT-006",
        "file": str(file),
        "message": (
            "param 'a' needs 104857600 bytes, more than the 73400320 bytes of memory available"
        ),
    }
    with pytest.raises(MemoryLimitError) as info:
        limits.check_allocation(100 << 20, what="the decoded chunk")
    assert error_fields(info) == {
        "rule": "LIMIT-006",
        "file": None,
        "message": (
            "the decoded chunk needs 104857600 bytes, more than the 73400320 bytes of memory "
            "available"
        ),
    }


def test_check_allocation_reads_the_system_figures(monkeypatch):
    """Through `memory_available` (not replaced): with 100 MiB MemAvailable and a control
    group that leaves 80 MiB, 80 MiB may be allocated and a byte more is refused, naming the
    80 MiB."""
    files = {
        "/proc/meminfo": "MemAvailable: 102400 kB\n",
        **group(V2, f"{90 << 20}", f"{10 << 20}"),
    }
    system(monkeypatch, files)
    limits.check_allocation(80 << 20, what="the chunk")
    with pytest.raises(MemoryLimitError) as info:
        limits.check_allocation((80 << 20) + 1, what="the chunk", file="x/.zarray")
    assert info.value.message == (
        f"the chunk needs {(80 << 20) + 1} bytes, more than the {80 << 20} bytes of memory "
        "available"
    )
    assert info.value.file == "x/.zarray"
