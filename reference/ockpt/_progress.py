"""Progress bars for long commands: one tqdm bar on stderr, shown only when stderr is a terminal.

Every bar has its total before it starts (bytes, or files for `cp`), so it shows a fraction
and a time left, never a count that only grows. `bar(total, ...)` is for a command that knows
its total when it starts; `Tracker` is a `progress(done, total, what)` callback for work that
learns its total inside a library call (`validate`), drawing the bar from its first call.

A terminal that reports no width (a pseudo-terminal of 0 columns: some CI runners, `script`,
editors' shells) gets a bar of `FALLBACK_COLUMNS`; tqdm asked to size itself to 0 columns
would draw a cut-off bar or, in some releases, nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["FALLBACK_COLUMNS", "Tracker", "bar", "enabled"]

#: The width of a bar on a terminal that reports none.
FALLBACK_COLUMNS = 80


class _Quiet:
    """A bar that draws nothing: progress off, or stderr no terminal (a pipe, a file)."""

    n = 0

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


def enabled(wanted: bool = True) -> bool:
    """Whether a bar would be drawn: `wanted` (no ``--no-progress``) and stderr a terminal."""
    return wanted and sys.stderr.isatty()


def _columns() -> int | None:
    """The width stderr's terminal reports, or None where it reports none (0 columns)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or None
    except (OSError, ValueError):
        return None


def bar(total: int, desc: str, *, enabled: bool = True, unit: str = "B") -> Any:
    """A progress bar towards `total` (bytes when `unit` is "B"), or a no-op one when
    `enabled` is False or stderr is not a terminal. Use it as a context manager and call
    `update(n)`; it is erased when closed, so the command's own output follows cleanly."""
    if not enabled or not sys.stderr.isatty():
        return _Quiet()
    from tqdm import tqdm

    columns = _columns()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=columns is not None,  # follow a resize where the terminal has a width
        ncols=None if columns is not None else FALLBACK_COLUMNS,
    )


class Tracker:
    """A `progress(done, total, what)` callback drawing one `bar`, made at the first call
    (when the total is known) and closed by `close` or on leaving a ``with`` block. `total`
    must not change between calls; `done` only grows."""

    def __init__(self, desc: str, *, enabled: bool = True, unit: str = "B") -> None:
        self.desc, self.unit, self.enabled = desc, unit, enabled
        self._bar: Any = None

    def __call__(self, done: int, total: int, what: str) -> None:
        """Move the bar to `done` of `total` (`what` is not shown: it would squeeze the bar)."""
        if self._bar is None:
            self._bar = bar(total, self.desc, enabled=self.enabled, unit=self.unit)
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        """Erase the bar (if one was drawn)."""
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
