"""The values of ockpt/store/deadline.py called directly: `positive_seconds`, `request_timeout`
(environment, default), the `timeout` block and `wait` on a stand-in future (the payload's
allowance, the cancel and the error naming the URL). tests/store/test_deadline.py waits out
servers that never answer (slow)."""

from __future__ import annotations

import math
import threading

import pytest

from ockpt.store import deadline

# --- store/deadline.py: positive_seconds, request_timeout, timeout, wait, called directly ---


class _Future:
    """A tensorstore future that answers `value`, or never (TimeoutError) when `value` is
    None; it records the timeout it was given and whether it was cancelled."""

    def __init__(self, value=None):
        self.value = value
        self.waited = None
        self.cancelled = False

    def result(self, timeout: float):
        self.waited = timeout
        if self.value is None:
            raise TimeoutError("tensorstore's own text")
        return self.value

    def cancel(self) -> None:
        self.cancelled = True


@pytest.mark.parametrize(
    ("value", "seconds"), [(1, 1.0), ("2.5", 2.5), (1e-9, 1e-9), (" 3 ", 3.0), (True, 1.0)]
)
def test_positive_seconds_takes_any_positive_finite_number(value, seconds) -> None:
    got = deadline.positive_seconds(value, "w")
    assert got == seconds and type(got) is float


@pytest.mark.parametrize("value", [0, -1, "0", "-0.5", "nan", math.inf, "inf", "soon", None, [1]])
def test_positive_seconds_refuses_naming_where_and_the_value(value) -> None:
    with pytest.raises(ValueError) as e:
        deadline.positive_seconds(value, "--timeout")
    assert str(e.value) == f"--timeout must be a positive number of seconds, not {value!r}"


def test_request_timeout_of_the_environment_or_the_default(monkeypatch) -> None:
    monkeypatch.delenv(deadline.ENV, raising=False)
    assert deadline.ENV == "OCKPT_REQUEST_TIMEOUT"
    assert deadline.request_timeout() == deadline.DEFAULT_SECONDS == 60.0
    monkeypatch.setenv(deadline.ENV, "")
    assert deadline.request_timeout() == 60.0  # empty: unset
    monkeypatch.setenv(deadline.ENV, "0.25")
    assert deadline.request_timeout() == 0.25
    monkeypatch.setenv(deadline.ENV, "x")
    with pytest.raises(ValueError) as e:
        deadline.request_timeout()
    assert str(e.value) == "OCKPT_REQUEST_TIMEOUT must be a positive number of seconds, not 'x'"


def test_timeout_sets_the_deadline_inside_its_block_only(monkeypatch) -> None:
    monkeypatch.setenv(deadline.ENV, "7")
    with deadline.timeout("3") as seconds:
        assert seconds == 3.0 and type(seconds) is float
        assert deadline.request_timeout() == 3.0
        with deadline.timeout(0.5) as inner:
            assert inner == 0.5 and deadline.request_timeout() == 0.5
        assert deadline.request_timeout() == 3.0
    assert deadline.request_timeout() == 7.0
    with pytest.raises(RuntimeError), deadline.timeout(2):
        raise RuntimeError
    assert deadline.request_timeout() == 7.0
    seen = []  # a context variable: another thread keeps its own
    with deadline.timeout(2):
        thread = threading.Thread(target=lambda: seen.append(deadline.request_timeout()))
        thread.start()
        thread.join()
    assert seen == [7.0]


def test_timeout_refuses_what_is_no_positive_number() -> None:
    with pytest.raises(ValueError) as e, deadline.timeout(0):
        pass
    assert str(e.value) == "the request timeout must be a positive number of seconds, not 0"


def test_wait_gives_the_result_within_the_deadline_and_its_payload_allowance(monkeypatch) -> None:
    monkeypatch.setenv(deadline.ENV, "2")
    future = _Future("value")
    assert deadline.wait(future, "gs://b/x") == "value"
    assert future.waited == 2.0 and not future.cancelled
    future = _Future(b"")
    assert deadline.wait(future, "gs://b/x", nbytes=3 << 19) == b""  # 1.5 MiB: 1.5 s more
    assert future.waited == 3.5
    future = _Future(0)
    deadline.wait(future, "gs://b/x", nbytes=-(1 << 30))  # never below the base
    assert future.waited == 2.0


def test_wait_past_its_deadline_cancels_and_names_the_url(monkeypatch) -> None:
    monkeypatch.setenv(deadline.ENV, "0.5")
    future = _Future()
    with pytest.raises(TimeoutError) as e:
        deadline.wait(future, "s3://b/k", nbytes=1 << 20)
    assert future.cancelled and future.waited == 1.5
    assert str(e.value) == (
        "s3://b/k: no answer within 1.5 s (raise it with OCKPT_REQUEST_TIMEOUT or --timeout)"
    )
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with deadline.timeout(100):
        with pytest.raises(TimeoutError) as e:
            deadline.wait(_Future(), "s3://b/k")
    assert "no answer within 100 s" in str(e.value)
