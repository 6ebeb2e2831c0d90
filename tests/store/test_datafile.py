"""`LocalFile` of ockpt/store/datafile.py on real files: size, identity (the same for two names
of one file), reads like `pread`, a byte range on a descriptor of its own, and closing its
descriptor once."""

from __future__ import annotations

import os

import pytest

from ockpt.store.byterange import ByteRange
from ockpt.store.datafile import LocalFile

# --- store/datafile.py: LocalFile ---


def _open(tmp_path, data: bytes):
    path = tmp_path / "d"
    path.write_bytes(data)
    return path, os.open(path, os.O_RDONLY)


def test_a_local_file_knows_its_size_identity_and_name(tmp_path) -> None:
    path, fd = _open(tmp_path, b"0123456789")
    f = LocalFile(fd, "d/abc")
    st = os.stat(path)
    assert f.fd == fd and f.display == "d/abc"
    assert f.size == 10
    assert f.identity == (st.st_dev, st.st_ino)
    os.link(path, tmp_path / "other")  # another name of the same file: the same identity
    g = LocalFile(os.open(tmp_path / "other", os.O_RDONLY), "other")
    assert g.identity == f.identity
    g.close()
    f.close()


def test_a_local_file_reads_like_pread(tmp_path) -> None:
    _, fd = _open(tmp_path, b"0123456789")
    f = LocalFile(fd, "d")
    assert f.pread(3, 2) == b"234"
    assert f.pread(5, 8) == b"89"  # short at the end
    assert f.pread(4, 20) == b""
    view = memoryview(bytearray(4))
    assert f.preadv(view, 7) == 3 and bytes(view[:3]) == b"789"
    assert f.preadv(view, 1) == 4 and bytes(view) == b"1234"
    f.close()


def test_a_local_files_byte_range_has_a_descriptor_of_its_own(tmp_path) -> None:
    _, fd = _open(tmp_path, b"0123456789")
    f = LocalFile(fd, "d")
    r = f.byte_range(3, 4)
    assert isinstance(r, ByteRange)
    assert (r.offset, r.length, r.display, r.owner) == (3, 4, "d", True)
    assert r.fd not in (fd, -1)
    f.close()  # the range's own descriptor stays open
    assert r.read(10) == b"3456"
    r.close()


def test_closing_a_local_file_closes_its_descriptor_once(tmp_path) -> None:
    _, fd = _open(tmp_path, b"xy")
    f = LocalFile(fd, "d")
    f.close()
    assert f.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    other = os.open(os.devnull, os.O_RDONLY)  # may reuse the number: a second close leaves it
    try:
        f.close()
        os.fstat(other)
    finally:
        os.close(other)


def test_a_local_file_on_descriptor_0_is_closed_too(tmp_path) -> None:
    """A process started with stdin closed gets descriptor 0 for the first file it opens."""
    _, fd = _open(tmp_path, b"xy")
    saved = os.dup(0)
    try:
        os.dup2(fd, 0)
        os.close(fd)
        f = LocalFile(0, "d")
        assert f.pread(2, 0) == b"xy"
        f.close()
        assert f.fd == -1
        with pytest.raises(OSError):
            os.fstat(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
