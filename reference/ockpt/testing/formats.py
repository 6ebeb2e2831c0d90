"""`assert_same_format`: a checkpoint's fingerprint against one committed to the repository."""

from __future__ import annotations

import os
from typing import Any

from ..fingerprints import compare, dumps, fingerprint, load

__all__ = ["assert_same_format", "UPDATE_ENV"]

#: Set (to anything but "" or "0") to rewrite fingerprint files instead of failing; the pytest
#: option ``--ockpt-update-fingerprints`` sets it.
UPDATE_ENV = "OCKPT_UPDATE_FINGERPRINTS"
#: The most changes a failure message lists (it counts the rest).
MAX_LISTED = 30


def _updating() -> bool:
    return os.environ.get(UPDATE_ENV, "") not in ("", "0")


def assert_same_format(
    path: Any, fingerprint_file: str | os.PathLike[str], *, shapes: bool = False
) -> None:
    """Raise AssertionError, listing each JSON pointer that changed, unless the checkpoint at
    `path` has the fingerprint stored in `fingerprint_file` (`ockpt fingerprint`, with
    `shapes` as there). While updating (`UPDATE_ENV`) the file is written from `path`
    instead; a missing file fails, saying how to record it."""
    now = fingerprint(path, shapes=shapes)
    file = os.fspath(fingerprint_file)
    if _updating():
        with open(file, "w", encoding="utf-8") as f:
            f.write(dumps(now))
        return
    if not os.path.exists(file):
        raise AssertionError(
            f"no fingerprint file {file}: record the format of {os.fspath(path)} with "
            f"{UPDATE_ENV}=1 (or pytest --ockpt-update-fingerprints, or `ockpt fingerprint "
            f"PATH -o {file}`) and commit it"
        )
    changes = compare(load(file), now)
    if not changes:
        return
    lines = [c.text() for c in changes[:MAX_LISTED]]
    if len(changes) > MAX_LISTED:
        lines.append(f"... and {len(changes) - MAX_LISTED} more")
    raise AssertionError(
        f"the format of {os.fspath(path)} differs from {file} in {len(changes)} place(s) "
        f"(if intended, rerun with {UPDATE_ENV}=1 or pytest --ockpt-update-fingerprints):\n  "
        + "\n  ".join(lines)
    )
