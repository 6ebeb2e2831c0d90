"""Bounded structured fuzzing of every parser of untrusted bytes (the targets of fuzz/).

Invariant: for any input a parser returns or raises `ockpt.FormatError`, nothing else, within
a second. The JSON documents, zarr metadata, chunk payloads and zarr v3 shard indexes, OCDBT
bodies (behind a valid envelope) and whole checkpoints (one file of a golden fixture replaced)
are fuzzed here; the msgpack file and raw OCDBT envelopes have their own fuzz tests
(tests/test_msgpack_legacy.py, tests/ocdbt/test_format_corrupt.py). `python fuzz/run.py` runs the same
targets for as long as one likes (fuzz/README.md). About a minute in all on two cores.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
import targets  # noqa: E402

from ockpt.errors import FormatError  # noqa: E402

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CASE_SECONDS = 5


def run(name: str, data: bytes) -> None:
    """One case under an alarm: FormatError or nothing."""

    def alarm(signum, frame):  # type: ignore[no-untyped-def]
        raise AssertionError(f"{name}: case ran over {CASE_SECONDS}s: {data[:200]!r}")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        targets.TARGETS[name](data)
    except FormatError as e:
        assert e.rule, e  # every refusal names its rule
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def mutated(name: str) -> st.SearchStrategy[bytes]:
    """A seed of the target with a few byte edits, insertions, deletions and a cut."""
    seeds = targets.seeds(name)

    def apply(seed: bytes, edits, inserts, cut) -> bytes:  # type: ignore[no-untyped-def]
        b = bytearray(seed[1:])
        for at, value in edits:
            if b:
                b[at % len(b)] = value
        for at, chunk in inserts:
            i = at % (len(b) + 1)
            b[i:i] = chunk
        if cut is not None:
            del b[cut % (len(b) + 1) :]
        return seed[:1] + bytes(b)

    return st.builds(
        apply,
        st.sampled_from(seeds),
        st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6),
        st.lists(
            st.tuples(
                st.integers(0, 1 << 20),
                st.sampled_from([b"\xff" * 8, b"\x00", b"..", b"[", b"1e999", b"-1", b'"']),
            ),
            max_size=2,
        ),
        st.one_of(st.none(), st.integers(0, 1 << 20)),
    )


# ---------------------------------------------------------------------------------------------
# byte-level mutation of valid inputs, per parser


@FUZZ
@given(mutated("json"))
def test_fuzz_json_documents_mutated(data):
    run("json", data)


@FUZZ
@given(mutated("zarr"))
def test_fuzz_zarr_metadata_mutated(data):
    run("zarr", data)


@FUZZ
@given(mutated("chunk"))
def test_fuzz_chunks_and_shard_indexes_mutated(data):
    run("chunk", data)


@FUZZ
@given(mutated("ocdbt").filter(lambda d: d[0] & 0xC0))  # bodies behind a valid envelope
def test_fuzz_ocdbt_bodies_mutated(data):
    run("ocdbt", data)


@SLOW
@given(mutated("checkpoint"))
def test_fuzz_whole_checkpoints_mutated(data):
    run("checkpoint", data)


# ---------------------------------------------------------------------------------------------
# structure-level: valid JSON of the wrong shape, for each document and zarr metadata

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
_json = st.recursive(
    _scalar,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)


def _replace_somewhere(doc, path: list[int], value):  # type: ignore[no-untyped-def]
    """`doc` with the node that `path` picks (child indices, taken modulo) set to `value`."""
    if not path or not isinstance(doc, (dict, list)) or not doc:
        return value
    if isinstance(doc, dict):
        key = sorted(doc)[path[0] % len(doc)]
        return {**doc, key: _replace_somewhere(doc[key], path[1:], value)}
    i = path[0] % len(doc)
    return doc[:i] + [_replace_somewhere(doc[i], path[1:], value)] + doc[i + 1 :]


@FUZZ
@given(
    st.sampled_from([s for s in targets.seeds("json") if s[1:2] in (b"{", b"[")]),
    st.lists(st.integers(0, 50), max_size=6),
    _json,
)
def test_fuzz_json_documents_structured(seed, path, value):
    doc = json.loads(seed[1:])
    run("json", seed[:1] + json.dumps(_replace_somewhere(doc, path, value)).encode())


@FUZZ
@given(
    st.sampled_from(targets.seeds("zarr")),
    st.lists(st.integers(0, 50), max_size=4),
    _json,
)
def test_fuzz_zarr_metadata_structured(seed, path, value):
    doc = json.loads(seed[1:])
    run("zarr", seed[:1] + json.dumps(_replace_somewhere(doc, path, value)).encode())


@FUZZ
@given(st.integers(0, 255), st.binary(max_size=300))
def test_fuzz_random_bytes_every_parser(variant, payload):
    for name in ("json", "msgpack", "ocdbt", "zarr", "chunk"):
        run(name, bytes([variant]) + payload)


def test_fuzz_seeds_decode_cleanly():
    """Every seed is valid: mutation starts from inputs that reach deep into the parsers."""
    for name in targets.TARGETS:
        for data in targets.seeds(name):
            targets.TARGETS[name](data)


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    targets.cleanup()


# ---------------------------------------------------------------------------------------------
# the streamed JSON parse (`_METADATA`'s tree entries converted as parsed) against the whole one


def _parse_both(text: str):  # type: ignore[no-untyped-def]
    from ockpt.documents._json import parse_json

    results = []
    for streamed in (None, {"t": lambda key, value: [key, value]}):
        try:
            results.append(("ok", parse_json(text, file="f", streamed=streamed)))
        except FormatError as e:
            results.append(("error", e.rule))
    return results


def _unstreamed(value):  # type: ignore[no-untyped-def]
    if isinstance(value, dict) and isinstance(value.get("t"), dict):
        return {**value, "t": {k: [k, v] for k, v in value["t"].items()}}
    return value


@FUZZ
@given(
    st.dictionaries(st.sampled_from(["t", "a", "b"]), _json, max_size=3),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from(list(' ,:{}[]"\\x1') + [""])),
             max_size=3),
    st.sampled_from(["", " ", "\n\t", "  {}"]),
)  # fmt: skip
def test_streamed_json_parse_equals_the_whole_parse(doc, edits, tail):
    """Valid or broken (characters inserted, trailing text), a document parses the same when
    the object under "t" is converted member by member: the same value (each member through
    the converter), or a DocumentError with the same rule."""
    text = json.dumps(doc, indent=1 if len(doc) % 2 else None) + tail
    for at, ch in edits:
        at %= len(text) + 1
        text = text[:at] + ch + text[at:]
    whole, streamed = _parse_both(text)
    if whole[0] == "ok":
        assert streamed == ("ok", _unstreamed(whole[1]))
    else:
        assert streamed == whole


def test_streamed_json_parse_refuses_what_the_whole_parse_refuses():
    for text, rule in [
        ('{"t": {"a": 1, "a": 2}}', "JSON-002"),
        ('{"t": {}, "t": {}}', "JSON-002"),
        ('{"t": {"a": NaN}}', "JSON-001"),
        ('{"t": {"a": 1,}}', "JSON-001"),
        ('{"t": {"a": 1}} x', "JSON-001"),
        ('{"t": {"a": 1e999}}', "JSON-001"),
    ]:
        assert _parse_both(text) == [("error", rule)] * 2, text


def test_streamed_json_parse_reports_json_faults_first():
    """A repeated key is refused when its object closes, after its values parsed, and an error
    of the converter only after the whole document parsed: the same rule as the whole parse."""
    for text in ('{"t":{"a":1,"a":2,"b":NaN}}', '{"t":{"a":1,"a":2', '{"t":{"a":1},"t":{"a":NaN}}'):
        assert _parse_both(text) == [("error", "JSON-001")] * 2, text
    from ockpt.documents._json import parse_json

    with pytest.raises(FormatError, match="'x'"):  # the inner object closes first
        parse_json('{"t":{"a":1,"a":{"x":1,"x":2}}}', file="f", streamed={"t": lambda k, v: v})

    def refuse(key, value):
        raise KeyError(key)  # any error of the converter passes through unchanged

    with pytest.raises(KeyError):
        parse_json('{"t":{"a":1}}', file="f", streamed={"t": refuse})
    with pytest.raises(FormatError, match="JSON-001"):  # but a fault of the JSON comes first
        parse_json('{"t":{"a":1}, "b": NaN}', file="f", streamed={"t": refuse})
    data = b'{"t":{"a":[1,2]}}'
    for form in (bytearray(data), memoryview(data)):
        assert parse_json(form, file="f", streamed={"t": lambda k, v: v}) == {"t": {"a": [1, 2]}}


@SLOW
@given(st.binary(min_size=4, max_size=40) | mutated("directory"))
def test_fuzz_directories(data):
    """Changes of file kind, links and sizes in whole checkpoints (fuzz/targets.py)."""
    run("directory", data)
