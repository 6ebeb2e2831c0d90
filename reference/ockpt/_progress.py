"""Progress bars for long commands: tqdm on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["bar"]


class _Quiet:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def bar(total: int | None, desc: str, *, enabled: bool = True, unit: str = "B") -> Any:
    """A byte-counting progress bar, or a no-op one when disabled or stderr is not a TTY."""
    if not enabled or not sys.stderr.isatty():
        return _Quiet()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
    )
