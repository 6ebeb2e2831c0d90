"""The reader on the bad-data corpus: an `ockpt.OckptError` of the stated class, never another
exception, a hang or a crash.

Every variant whose damage lies on the reader's path must make `ockpt.load_pytree` raise the
error class `fixtures/bad/expected.json` names (`FormatError`, or its subclass `MissingDataError` /
`NotACheckpointError` where a file, chunk or item is absent). Variants off that path ("may
load") may load; they must still not raise anything but an `OckptError`.

All variants run in one worker subprocess (tensorstore is imported once), each under an alarm,
and the worker as a whole under a timeout: a crash or a hang fails the variant it was on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ockpt
from tests.support import FIXTURES

BAD = FIXTURES / "bad"
EXPECTED = json.loads((BAD / "expected.json").read_text(encoding="utf-8"))["variants"]
PER_VARIANT_SECONDS = 60

if not hasattr(ockpt, "load_pytree"):  # pragma: no cover - the reader lands separately
    pytest.skip("ockpt.load_pytree is not available yet", allow_module_level=True)

WORKER = r"""
import json, signal, sys, traceback
import ockpt

def expire(signum, frame):
    raise TimeoutError("load_pytree ran past the time limit")

signal.signal(signal.SIGALRM, expire)
for line in sys.stdin:
    name, path = json.loads(line)
    print(json.dumps({"start": name}), flush=True)
    signal.alarm(int(sys.argv[1]))
    try:
        ockpt.load_pytree(path)
        out = {"name": name, "outcome": "loaded"}
    except ockpt.OckptError as e:
        out = {"name": name, "outcome": "raised", "classes": [c.__name__ for c in type(e).__mro__],
               "rule": getattr(e, "rule", None), "message": str(e)[:500]}
    except BaseException as e:
        out = {"name": name, "outcome": "other", "type": type(e).__name__,
               "message": "".join(traceback.format_exception(e))[-2000:]}
    finally:
        signal.alarm(0)
    print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(FIXTURES.parent / "reference") + os.pathsep + env.get("PYTHONPATH", "")
    jobs = "".join(
        json.dumps([name, str(BAD / name / e["path"])]) + "\n"
        for name, e in sorted(EXPECTED.items())
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", WORKER, str(PER_VARIANT_SECONDS)],
            input=jobs,
            capture_output=True,
            text=True,
            env=env,
            timeout=PER_VARIANT_SECONDS + 10 * len(EXPECTED),
        )
        stdout, rc, stderr = proc.stdout, proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, stderr = None, "worker timed out"
    results: dict[str, dict] = {}
    started = None
    for line in stdout.splitlines():
        msg = json.loads(line)
        if "start" in msg:
            started = msg["start"]
        else:
            results[msg["name"]] = msg
            started = None
    if started is not None:  # the worker died (crash, hang) inside this variant
        results[started] = {"outcome": "crashed", "rc": rc, "stderr": stderr[-2000:]}
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reader_on_bad_variant(name, outcomes, request):
    entry = EXPECTED[name]
    if entry.get("known_reader_issue"):
        request.applymarker(pytest.mark.xfail(reason=entry["known_reader_issue"], strict=False))
    got = outcomes.get(name)
    assert got is not None, "the worker never reached this variant (an earlier one crashed?)"
    assert got["outcome"] in ("loaded", "raised"), got
    want = entry["reader"]
    if want["outcome"] == "raises":
        assert got["outcome"] == "raised", f"loaded, but {want['error']} was expected"
        assert want["error"] in got["classes"], got
        if want["error"] != "NotACheckpointError":  # damaged bytes are a FormatError (issue 7)
            assert "FormatError" in got["classes"], got
