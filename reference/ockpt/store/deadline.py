"""How long ockpt waits for one request to an object store: a network that never answers, or
answers a byte at a time, ends in an error naming the URL instead of a hang.

A request may take `request_timeout` seconds (``OCKPT_REQUEST_TIMEOUT``, the CLI's
``--timeout``; 60 by default) plus one second per MiB it carries, so that a large transfer on a
slow link is not cut. A request that runs past its deadline is cancelled and raises
`TimeoutError` (an `OSError`) naming what it read or wrote.
"""

from __future__ import annotations

import contextvars
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ENV", "DEFAULT_SECONDS", "positive_seconds", "request_timeout", "timeout", "wait"]

#: The environment variable that sets the seconds of `request_timeout`.
ENV = "OCKPT_REQUEST_TIMEOUT"
DEFAULT_SECONDS = 60.0
#: Bytes per second a request's payload adds to its deadline (1 MiB/s).
_ALLOWED_RATE = 1 << 20

_SET: contextvars.ContextVar[float | None] = contextvars.ContextVar("ockpt_timeout", default=None)


def positive_seconds(value: object, where: str) -> float:
    """`value` as seconds; a `ValueError` naming `where` when it is no positive number."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{where} must be a positive number of seconds, not {value!r}")
    return seconds


def request_timeout() -> float:
    """The seconds a request may take before its payload's allowance: those of an enclosing
    `timeout`, else ``OCKPT_REQUEST_TIMEOUT``, else `DEFAULT_SECONDS`. A value that is no
    positive number is a `ValueError`."""
    chosen = _SET.get()
    if chosen is not None:
        return chosen
    text = os.environ.get(ENV)
    return DEFAULT_SECONDS if not text else positive_seconds(text, ENV)


@contextmanager
def timeout(seconds: float) -> Iterator[float]:
    """Make `seconds` the request timeout inside the block (the CLI's ``--timeout``)."""
    token = _SET.set(positive_seconds(seconds, "the request timeout"))
    try:
        yield _SET.get() or seconds
    finally:
        _SET.reset(token)


def wait(future: Any, shown: str, *, nbytes: int = 0) -> Any:
    """The result of the tensorstore `future` of a request about `shown` (a URL) carrying
    `nbytes`; past its deadline the request is cancelled and `TimeoutError` raised."""
    limit = request_timeout() + max(nbytes, 0) / _ALLOWED_RATE
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        future.cancel()
        raise TimeoutError(
            f"{shown}: no answer within {limit:g} s (raise it with {ENV} or --timeout)"
        ) from None
