"""Tests written to kill the mutants that survived the mutation run of the format core
(tests/mutation/RESULTS.md names each mutant and the test here that now kills it)."""

from __future__ import annotations

import io

from ockpt.limits import read_capped


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
