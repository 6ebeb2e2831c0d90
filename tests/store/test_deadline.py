"""A network that never answers (issue 32 item 2): every request of an object store has a
deadline (``OCKPT_REQUEST_TIMEOUT``, ``--timeout``), and running past it ends in an OSError
naming the URL, exit 2 from the CLI, within seconds: against a server that accepts and never
answers, one that drip-feeds a byte every few seconds and one that sends an endless body, for
``s3://`` and ``gs://``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ockpt.store import deadline
from tests.support import HAVE_TENSORSTORE
from tests.support.object_stores import ockpt

pytestmark = pytest.mark.slow  # the slow matrix: servers that never answer, each waited out

MODES = ("silent", "drip", "endless")


def _answer(conn: socket.socket, mode: str, stop: threading.Event) -> None:
    with conn:
        try:
            conn.settimeout(0.5)
            request = b""
            while not stop.is_set():  # the request, however slowly the client sends it
                try:
                    request = conn.recv(1 << 16)
                    if request:
                        break
                except TimeoutError:
                    continue
                return  # the client closed
            if not request:
                return  # stopped before any request came
            if request.startswith(b"HEAD "):  # no body follows: its bytes would read as the
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n")  # next reply
                stop.wait()  # and the client waits for the next request's answer
            elif mode == "drip":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                while not stop.wait(2):
                    conn.sendall(b"x")
            elif mode == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
                block = b"x" * (1 << 16)
                while not stop.is_set():
                    conn.sendall(block)
            else:
                stop.wait()
        except OSError:
            pass  # the client gave up


@pytest.fixture(params=MODES)
def stalling(request) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The URL of a loopback HTTP server that stalls in the parameter's way."""
    stop = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=_answer, args=(conn, request.param, stop), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


ENVS = {
    "s3": lambda url: {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    },
    "gs": lambda url: {"TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "t"},
}


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore: object stores use it")
@pytest.mark.parametrize("scheme", sorted(ENVS))
@pytest.mark.parametrize("command", ["ls", "validate"])
def test_a_stalled_endpoint_ends_in_exit_2_naming_the_url(stalling, scheme, command):
    url = f"{scheme}://bucket/run"
    start = time.monotonic()
    result = ockpt(ENVS[scheme](stalling), command, url, "--timeout", "2", check=False)
    elapsed = time.monotonic() - start
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"ockpt: {url}" in result.stderr and "no answer within 2 s" in result.stderr
    assert "--timeout" in result.stderr and "Traceback" not in result.stderr
    assert elapsed < 30, elapsed  # the child's start-up, one deadline, not a retry storm


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore: object stores use it")
def test_the_environment_sets_the_deadline_for_the_library(stalling, monkeypatch):
    """In the library the deadline is `OCKPT_REQUEST_TIMEOUT`; the error is a TimeoutError
    (an OSError) naming the URL."""
    for key, value in ENVS["s3"](stalling).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(deadline.ENV, "1.5")
    import ockpt as library

    with pytest.raises(OSError) as e:
        library.pytree_metadata("s3://bucket/run")
    assert isinstance(e.value, TimeoutError) and "s3://bucket/run" in str(e.value)
    assert "no answer within 1.5 s" in str(e.value)


def test_the_deadline_is_a_positive_number_and_grows_with_the_payload(monkeypatch):
    monkeypatch.delenv(deadline.ENV, raising=False)
    assert deadline.request_timeout() == deadline.DEFAULT_SECONDS
    monkeypatch.setenv(deadline.ENV, "7.5")
    assert deadline.request_timeout() == 7.5
    with deadline.timeout(3):
        assert deadline.request_timeout() == 3
    assert deadline.request_timeout() == 7.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv(deadline.ENV, bad)
        with pytest.raises(ValueError, match=deadline.ENV):
            deadline.request_timeout()
    monkeypatch.setenv(deadline.ENV, "2")

    class Never:
        cancelled = False

        def result(self, timeout: float) -> None:
            self.waited = timeout
            raise TimeoutError

        def cancel(self) -> None:
            self.cancelled = True

    never = Never()
    with pytest.raises(TimeoutError, match="gs://b/x: no answer within 6 s"):
        deadline.wait(never, "gs://b/x", nbytes=4 << 20)  # 2 s + 1 s per MiB
    assert never.waited == 6 and never.cancelled
    with pytest.raises(TimeoutError, match="no answer within 2 s"):  # never below the base
        deadline.wait(Never(), "gs://b/x", nbytes=-5)


def test_the_cli_refuses_a_timeout_that_is_no_positive_number(tmp_path, monkeypatch):
    from ockpt.cli import main

    assert main(["ls", str(tmp_path), "--timeout", "0"]) == 2
    monkeypatch.setenv(deadline.ENV, "never")
    assert main(["ls", str(tmp_path)]) == 2


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore: the engine under test")
@pytest.mark.parametrize("backend", ["tensorstore", "python"])
def test_array_reads_wait_within_the_deadline_on_both_engines(backend, monkeypatch):
    """Both engines' reads of a store's arrays go through `deadline.wait`, with the bytes of
    what they read as its allowance (here a checkpoint in tensorstore's ``memory://`` store)."""
    import numpy as np

    import ockpt as library
    from ockpt.store import as_store

    store = as_store(f"memory://deadline/{backend}")
    tree = {"w": np.arange(1 << 16, dtype=np.float32), "b": np.ones(3, np.int8)}
    library.save_pytree(store, tree)
    waited: list[tuple[str, int]] = []
    real = deadline.wait

    def spy(future, shown, *, nbytes=0):  # type: ignore[no-untyped-def]
        waited.append((shown, nbytes))
        return real(future, shown, nbytes=nbytes)

    monkeypatch.setattr(deadline, "wait", spy)
    got = library.load_pytree(store, backend=backend)
    assert np.array_equal(got["w"], tree["w"]) and np.array_equal(got["b"], tree["b"])
    assert waited and all(shown.startswith("memory://deadline/") for shown, _ in waited)
    if backend == "tensorstore":  # one read per array, allowed its bytes
        assert (1 << 18) in {n for _, n in waited} and 3 in {n for _, n in waited}


@pytest.mark.skipif(not HAVE_TENSORSTORE, reason="needs tensorstore: the store under test")
def test_a_read_to_the_end_of_an_object_gets_the_whole_base_deadline(monkeypatch):
    """A range to the end of an object (``slice(offset, None)``: a short read) carries no
    known size: its deadline is the base one, never less (a negative allowance once made a
    read give up at once)."""
    from ockpt.store import as_store

    store = as_store("memory://deadline/short")
    store.set("x", b"0123456789")
    waited: list[int] = []
    real = deadline.wait

    def spy(future, shown, *, nbytes=0):  # type: ignore[no-untyped-def]
        waited.append(nbytes)
        return real(future, shown, nbytes=nbytes)

    monkeypatch.setattr(deadline, "wait", spy)
    assert store.get_range("x", 6, 100) == b"6789"  # past the end: read again to the end
    assert store.get_range("x", 2, 3) == b"234"
    assert min(waited) >= 0 and 3 in waited
