"""ockpt/store/mapping.py called directly on real files: `FileMaps.view` (read-only views, one
mapping per file under any name, mapped again once grown, refusals past the end, of files that
cannot be mapped or were cut short), `_c`, and `assemble` (chunks side by side, private pages,
its refusals and the kernel's reason, the span given back once the view is gone).
tests/engines/python/test_mapped.py maps through loads."""

from __future__ import annotations

import mmap
import os
import sys

import pytest

from ockpt.store import mapping
from ockpt.store.byterange import ByteRange
from ockpt.store.mapping import FileMaps, MapRefused, assemble

# --- store/mapping.py: FileMaps.view, _c, assemble, called directly on real files ---

PAGE = mmap.PAGESIZE
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MAP_FIXED")


def _range(path, offset: int, length: int) -> ByteRange:
    return ByteRange(os.open(path, os.O_RDONLY), offset, length, str(path))


def test_a_view_is_the_files_bytes_read_only(tmp_path) -> None:
    path = tmp_path / "data"
    path.write_bytes(bytes(range(256)) * 4)
    maps = FileMaps()
    with _range(path, 10, 20) as r:
        view = maps.view(r)
        assert bytes(view) == (bytes(range(256)) * 4)[10:30] and view.readonly
        assert len(maps._maps) == 1
        st = os.fstat(r.fd)
        assert list(maps._maps) == [(st.st_dev, st.st_ino)]
    with _range(path, 1000, 24) as r:  # to the file's last byte
        assert bytes(maps.view(r)) == (bytes(range(256)) * 4)[1000:1024]


def test_the_values_of_one_file_share_one_mapping_under_any_name(tmp_path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100)
    os.link(path, tmp_path / "other")
    maps = FileMaps()
    with _range(path, 0, 10) as a, _range(tmp_path / "other", 50, 10) as b:
        maps.view(a)
        first = maps._maps[next(iter(maps._maps))]
        maps.view(b)
        assert len(maps._maps) == 1 and maps._maps[next(iter(maps._maps))] is first


def test_a_file_grown_since_it_was_mapped_is_mapped_again(tmp_path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"a" * 100)
    maps = FileMaps()
    with _range(path, 0, 100) as r:
        maps.view(r)
    first = next(iter(maps._maps.values()))
    with open(path, "ab") as f:
        f.write(b"b" * 50)
    with _range(path, 120, 30) as r:
        assert bytes(maps.view(r)) == b"b" * 30
    assert len(maps._maps) == 1 and next(iter(maps._maps.values())) is not first
    second = next(iter(maps._maps.values()))
    with _range(path, 140, 10) as r:  # to the end of the mapping: no new one
        assert bytes(maps.view(r)) == b"b" * 10
    assert next(iter(maps._maps.values())) is second
    with _range(path, 0, 100) as r:  # a range within the mapping: the same one
        maps.view(r)
    assert len(next(iter(maps._maps.values()))) == 150


def test_a_view_past_the_files_end_is_refused(tmp_path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100)
    maps = FileMaps()
    with _range(path, 90, 11) as r:
        with pytest.raises(MapRefused) as e:
            maps.view(r)
    assert str(e.value) == "the file holds 100 bytes, the value ends at 101"
    with _range(path, 90, 10) as r:
        assert bytes(maps.view(r)) == b"x" * 10


def test_a_file_that_cannot_be_mapped_is_refused(tmp_path, monkeypatch) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    maps = FileMaps()
    with _range(path, 0, 0) as r:
        with pytest.raises(MapRefused) as e:
            maps.view(r)  # an empty file: mmap refuses it
    assert str(e.value).startswith("the file cannot be mapped (")
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert maps._maps == {}

    def enomem(*args, **kw):
        raise OSError(12, "Cannot allocate memory")

    path = tmp_path / "data"
    path.write_bytes(b"x" * 10)
    monkeypatch.setattr(mapping.mmap, "mmap", enomem)
    with _range(path, 0, 5) as r:
        with pytest.raises(MapRefused) as e:
            maps.view(r)
    assert str(e.value) == "the file cannot be mapped ([Errno 12] Cannot allocate memory)"


def test_a_file_cut_short_after_its_size_was_read_is_refused(tmp_path, monkeypatch) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100)
    real = mmap.mmap

    def cut(fd, length, **kw):
        os.truncate(path, 40)
        return real(fd, length, **kw)

    monkeypatch.setattr(mapping.mmap, "mmap", cut)
    maps = FileMaps()
    with _range(path, 30, 20) as r:
        with pytest.raises(MapRefused) as e:
            maps.view(r)
    assert str(e.value) == "the file holds 40 bytes, the value ends at 50"
    assert maps._maps == {}


def test_the_c_librarys_mmap_is_loaded_once(monkeypatch) -> None:
    monkeypatch.setattr(mapping, "_libc", None)
    c = mapping._c()
    assert mapping._c() is c and mapping._libc is c
    assert c.mmap.restype is mapping.ctypes.c_void_p
    assert c.munmap.restype is mapping.ctypes.c_int
    assert len(c.mmap.argtypes) == 6 and len(c.munmap.argtypes) == 2


def _pages(tmp_path, *fills: bytes):
    path = tmp_path / "pages"
    path.write_bytes(b"".join(f * PAGE for f in fills))
    return path


@linux_only
def test_assemble_maps_chunks_side_by_side(tmp_path) -> None:
    path = _pages(tmp_path, b"a", b"b", b"c", b"d")
    with _range(path, 2 * PAGE, PAGE) as c, _range(path, 0, PAGE) as a:
        with _range(path, 3 * PAGE, PAGE) as d:
            view = assemble([(c, PAGE), (a, PAGE), (d, 10)])
    assert len(view) == 2 * PAGE + 10 and view.format == "B"
    assert bytes(view) == b"c" * PAGE + b"a" * PAGE + b"d" * 10
    view[0] = ord("z")  # private pages: a write never reaches the file
    assert path.read_bytes()[2 * PAGE] == ord("c")
    with _range(path, PAGE, PAGE) as b:
        one = assemble([(b, PAGE)])
    assert bytes(one) == b"b" * PAGE
    with _range(path, 0, 4 * PAGE) as whole:
        assert bytes(assemble([(whole, 4 * PAGE - 1)])) == path.read_bytes()[:-1]


@linux_only
def test_assemble_refuses_chunks_off_pages_or_short(tmp_path) -> None:
    path = _pages(tmp_path, b"a", b"b", b"c")
    cases = [
        ([(1, PAGE, PAGE)], "a chunk starts at byte 1 of its file, not on a page"),
        (
            [(0, PAGE, PAGE - 1), (PAGE, PAGE, PAGE)],
            f"its chunks hold {PAGE - 1} bytes, not whole pages of {PAGE}",
        ),
        ([(0, PAGE, PAGE + 1)], "a chunk's file is shorter than its value"),
        ([(2 * PAGE, 2 * PAGE, PAGE + 1)], "a chunk's file is shorter than its value"),
    ]
    for parts, message in cases:
        ranges = [(_range(path, off, length), used) for off, length, used in parts]
        try:
            with pytest.raises(MapRefused) as e:
                assemble(ranges)
            assert str(e.value) == message
        finally:
            for r, _ in ranges:
                r.close()
    with _range(path, 0, PAGE) as a, _range(path, PAGE, PAGE) as b:
        assert bytes(assemble([(a, PAGE), (b, 1)])) == b"a" * PAGE + b"b"  # the last: any
        assert bytes(assemble([(a, PAGE), (b, PAGE)])) == b"a" * PAGE + b"b" * PAGE


def test_assemble_needs_linux(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(mapping.sys, "platform", "darwin")
    path = _pages(tmp_path, b"a")
    with _range(path, 0, PAGE) as r:
        with pytest.raises(MapRefused) as e:
            assemble([(r, PAGE)])
    assert str(e.value) == "a view of several chunks needs Linux (MAP_FIXED)"


@linux_only
def test_assemble_refuses_what_the_kernel_refuses(tmp_path, monkeypatch) -> None:
    path = _pages(tmp_path, b"a")
    c = mapping._c()

    class NoSpace:
        def __getattr__(self, name):
            return getattr(c, name)

        def mmap(self, *args):
            return None

    monkeypatch.setattr(mapping, "_c", NoSpace)
    with _range(path, 0, PAGE) as r:
        with pytest.raises(MapRefused) as e:
            assemble([(r, PAGE)])
    assert str(e.value).startswith("no address space for it (")

    class Failed(NoSpace):
        def mmap(self, *args):
            return mapping.ctypes.c_void_p(-1).value

    monkeypatch.setattr(mapping, "_c", Failed)
    with _range(path, 0, PAGE) as r:
        with pytest.raises(MapRefused) as e:
            assemble([(r, PAGE)])
    assert str(e.value).startswith("no address space for it (")

    class FixedElsewhere(NoSpace):
        calls = 0

        def mmap(self, addr, length, prot, flags, fd, offset):
            FixedElsewhere.calls += 1
            got = c.mmap(addr, length, prot, flags, fd, offset)
            return got if FixedElsewhere.calls == 1 else got + PAGE

    monkeypatch.setattr(mapping, "_c", FixedElsewhere)
    with _range(path, 0, PAGE) as r:
        with pytest.raises(MapRefused) as e:
            assemble([(r, PAGE)])
    assert str(e.value).startswith("a chunk cannot be mapped (")


def _mapped_at(address: int) -> bool:
    with open("/proc/self/maps") as f:
        return any(int(line.split("-", 1)[0], 16) == address for line in f)


@linux_only
def test_an_assembled_views_address_space_is_given_back_once_it_is_gone(tmp_path) -> None:
    import ctypes
    import gc

    path = _pages(tmp_path, b"a", b"b")
    with _range(path, 0, PAGE) as a, _range(path, PAGE, PAGE) as b:
        view = assemble([(a, PAGE), (b, PAGE)])
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    assert _mapped_at(address) and bytes(view[PAGE - 1 : PAGE + 1]) == b"ab"
    del view
    gc.collect()
    assert not _mapped_at(address)


@linux_only
def test_assemble_names_the_kernels_reason(tmp_path, monkeypatch) -> None:
    import ctypes

    monkeypatch.setattr(mapping, "_libc", None)  # loaded here: with errno saved
    path = _pages(tmp_path, b"a")
    ctypes.set_errno(0)
    r = ByteRange(os.open(path, os.O_WRONLY), 0, PAGE, str(path))  # no reading: no mapping
    with r:
        with pytest.raises(MapRefused) as e:
            assemble([(r, PAGE)])
    assert str(e.value) == f"a chunk cannot be mapped ({os.strerror(13)})"
