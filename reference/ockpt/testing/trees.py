"""`assert_trees_equal`: `ockpt.diff` on two pytrees in memory, as a test assertion."""

from __future__ import annotations

from typing import Any

from ..diff import diff
from ..sources import TreeSource

__all__ = ["assert_trees_equal"]

#: The most differences a failure message lists (it counts the rest).
MAX_LISTED = 20


def assert_trees_equal(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Raise AssertionError unless pytrees `a` and `b` have the same leaves (by key path, as
    `ockpt.save_pytree` keys them), empty containers and Nones, dtypes, shapes and values:
    exactly by default (NaN equal to NaN, -0.0 to 0.0), else ``|a - b| <= atol + rtol * |b|``.
    Leaves are numpy or jax arrays, scalars, strings or typed PRNG keys (as their key data)."""
    if rtol < 0 or atol < 0:
        raise ValueError("rtol and atol must be >= 0")
    report = diff(
        TreeSource(a, path="a"), TreeSource(b, path="b"), rtol=rtol, atol=atol, progress=False
    )
    if report.equal:
        return
    found = report.differences
    lines = [d.text() for d in found[:MAX_LISTED]]
    if len(found) > MAX_LISTED:
        lines.append(f"... and {len(found) - MAX_LISTED} more")
    raise AssertionError(f"trees differ ({len(found)} difference(s)):\n  " + "\n  ".join(lines))
