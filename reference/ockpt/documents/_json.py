"""Bounded, strict JSON parsing and typed field access shared by every document model.

Parsing is strict where Python's `json` is lenient: duplicate keys, NaN/Infinity and nesting
deeper than the limits' `max_depth` are errors. Field helpers raise `DocumentError` naming
file and pointer.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Generator, Mapping
from typing import Any, TypeVar

import numpy as np

from ..errors import DocumentError
from ..limits import current as limits_in_force
from ..store.files import read_file

T = TypeVar("T")


class _Absent:
    """Marks an optional field that a document lacks (distinct from a JSON null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


#: the pre-scan reads the document in windows of this many bytes: its memory does not grow with
#: the document (a full scan of 250 MB of brackets holds under 32 MB)
_SCAN_WINDOW = 1 << 20
#: bytes.translate table deleting every byte but quotes and brackets (UTF-8 never puts an ASCII
#: byte inside a multi-byte character, so the bytes kept are the characters kept)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("{"), ord("[")]] = 1
_STEP[[ord("}"), ord("]")]] = -1
_QUOTE = ord('"')


def _windows(doc: str | bytes) -> Generator[bytes, None, None]:
    for start in range(0, len(doc), _SCAN_WINDOW):
        piece = doc[start : start + _SCAN_WINDOW]
        yield piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else piece


def _bracket_depth(doc: str | bytes, *, stop: int | None = None) -> int:
    """The deepest nesting of objects and arrays in valid JSON `doc` (text, or its UTF-8 bytes),
    or the number of opening brackets when it is below the limits' `max_depth`; with `stop`,
    the depth reached once it reaches `stop`. Never negative.

    A quote preceded by an odd run of backslashes is escaped; brackets between an opening and a
    closing quote are in a string and skipped; in a document whose last string never closes,
    the brackets after its quote count and the quote closes one level (as ``"[^"]*"`` leaves
    it). The document is read in windows of `_SCAN_WINDOW` bytes, each reduced to its quotes
    and brackets at C speed: the depth, whether a string is open and the parity of a run of
    backslashes at a window's end carry over to the next, so the memory is independent of the
    document's size."""
    opens = (
        doc.count("{") + doc.count("[")
        if isinstance(doc, str)
        else doc.count(b"{") + doc.count(b"[")
    )
    if opens < limits_in_force().max_depth:  # too few brackets to nest deeper
        return opens
    depth = deepest = 0
    in_string = False
    # while a string is open: the depth and deepest as if it never closed (its quote then
    # counts as a closing bracket and the brackets after it count)
    open_depth = open_deepest = 0
    backslash = b""  # an odd run of backslashes ending the previous window
    for window in _windows(doc):
        if backslash:
            window = backslash + window
        head = window.rstrip(b"\\")  # a run at the end is settled with the next window
        backslash = b"\\" if (len(window) - len(head)) % 2 else b""
        if b"\\" in head:  # an escaped backslash, then an escaped quote, is no quote
            head = head.replace(b"\\\\", b"").replace(b'\\"', b"")
        kept = head.translate(None, _NOT_BRACKETS)
        if not kept:
            continue
        codes = np.frombuffer(kept, dtype=np.uint8)
        steps = _STEP[codes]
        quotes = codes == _QUOTE
        n_quotes = int(np.count_nonzero(quotes))
        if n_quotes or in_string:
            inside = (np.cumsum(quotes, dtype=np.int32) & 1).astype(bool)
            if in_string:
                inside = ~inside
            outside_steps = np.where(inside, 0, steps)
        else:
            outside_steps = steps
        levels = np.cumsum(outside_steps, dtype=np.int64)
        levels += depth
        deepest = max(deepest, int(levels.max()))
        if stop is not None and deepest >= stop:
            return deepest
        if n_quotes % 2:
            in_string = not in_string
        if in_string:
            if n_quotes:  # the string opened at this window's last quote
                last = len(codes) - 1 - int(np.argmax(quotes[::-1]))
                open_depth = int(levels[last]) - 1
                open_deepest = open_depth
                steps = steps[last + 1 :]
            if len(steps):
                after = np.cumsum(steps, dtype=np.int64)
                after += open_depth
                open_deepest = max(open_deepest, int(after.max()))
                open_depth = int(after[-1])
        depth = int(levels[-1])
    return max(deepest, open_deepest) if in_string else deepest


class _TooManyValues(Exception):
    def __init__(self, count: int, limit: int, *, exact: bool = True) -> None:
        self.count: int | str = count if exact else f"at least {count}"
        self.limit = limit


#: What each ASCII character is to the value count: 1 an opening bracket, 2 a closing one, 3 a
#: separator (comma, colon), 4 a quote, 5 a backslash, 0 anything else (any other character).
_KIND = np.zeros(256, dtype=np.int8)
_KIND[[ord("["), ord("{")]] = 1
_KIND[[ord("]"), ord("}")]] = 2
_KIND[[ord(","), ord(":")]] = 3
_KIND[ord('"')] = 4
_KIND[ord("\\")] = 5


def _quick_values(text: str | bytes, start: int = 0, end: int | None = None) -> int:
    """An upper bound on the values and member names of the JSON ``text[start:end]`` (text, or
    its UTF-8 bytes; `_values`), counted at C speed with the characters inside strings."""
    stop = len(text) if end is None else end
    if isinstance(text, bytes):
        return 1 + sum(text.count(c, start, stop) for c in (b",", b":", b"[", b"{"))
    return 1 + sum(text.count(c, start, stop) for c in ",:[{")


def _values(
    text: str | bytes, start: int = 0, *, whole: bool, stop: int | None = None
) -> tuple[int, int]:
    """(end, count) of the JSON value at `text[start]`: count is one plus its commas, colons
    and opening brackets outside strings, which bounds its values and member names (every
    element after a container's first follows a comma, every member name precedes a colon,
    every container opens with a bracket). With `whole`, the text is read to its end;
    otherwise up to the end of the container opening at `start` (a scalar counts 1). With
    `stop`, the count is given as soon as a window takes it past `stop` (the end then is -1).

    Read in windows with numpy, as `_bracket_depth` does (4 Ki characters first, doubling up
    to `_SCAN_WINDOW`, so that a small value costs little): the nesting depth, whether a
    string is open and the run of backslashes at a window's end carry over, so memory does
    not grow with the text."""
    if not whole and text[start : start + 1] not in ("[", "{", b"[", b"{"):
        return start, 1
    count, depth, in_string, run = 1, 0, False, 0
    at, size = start, min(_SCAN_WINDOW, 1 << 12)  # small first: most values are
    while at < len(text):
        piece = text[at : at + size]
        if isinstance(piece, bytes):  # UTF-8: no ASCII byte inside a multi-byte character
            kinds = _KIND[np.frombuffer(piece, dtype=np.uint8)]
        elif piece.isascii():
            kinds = _KIND[np.frombuffer(piece.encode("ascii"), dtype=np.uint8)]
        else:
            codes = np.frombuffer(piece.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            kinds = _KIND[np.where(codes < 128, codes, 0)]
        n = len(kinds)
        idx = np.arange(n, dtype=np.int32)
        slash = kinds == 5
        last_other = np.maximum.accumulate(np.where(slash, -1, idx))
        before = np.concatenate(([-1], last_other[:-1]))  # last non-backslash before each
        run_before = np.where(before >= 0, idx - 1 - before, idx + run)
        quotes = (kinds == 4) & (run_before % 2 == 0)
        opened = np.cumsum(quotes, dtype=np.int32) - quotes  # quotes before each character
        outside = (opened % 2 == 1) == in_string
        opens = (kinds == 1) & outside
        counted = opens | ((kinds == 3) & outside)
        if not whole:
            steps = opens.astype(np.int32) - ((kinds == 2) & outside)
            levels = np.cumsum(steps, dtype=np.int64) + depth
            closed = np.flatnonzero(levels == 0)
            if len(closed):
                last = int(closed[0])
                return at + last + 1, count + int(np.count_nonzero(counted[: last + 1]))
            depth = int(levels[-1])
        count += int(np.count_nonzero(counted))
        if stop is not None and count > stop and at + n < len(text):  # more to read
            return -1, count
        in_string ^= bool(np.count_nonzero(quotes) % 2)
        run = n - 1 - int(last_other[-1]) if last_other[-1] >= 0 else n + run
        at, size = at + n, min(2 * size, _SCAN_WINDOW)
    return len(text), count


class _Budget:
    """The values and member names a streamed parse of `text` holds at once, within `limit`:
    the members it keeps, and the value it is decoding. Nothing is counted while the whole
    text is within the limit (`_quick_values`); past it, each value is counted before it is
    decoded (`_values`), and `_TooManyValues` raised before a parse would exceed it."""

    def __init__(self, text: str, limit: int) -> None:
        self.text, self.limit = text, limit
        self.total = _quick_values(text)
        self.pos = self.before = self.held = 0

    def check(self, start: int) -> None:
        """Refuse the value at `start` if holding it would exceed the limit."""
        if self.total <= self.limit:
            return
        self.before += _quick_values(self.text, self.pos, start) - 1  # bound of text[:start]
        self.pos = start
        if self.held + self.total - self.before <= self.limit:
            return  # all that follows fits
        end, count = _values(self.text, start, whole=False, stop=self.limit - self.held)
        if self.held + count > self.limit:
            raise _TooManyValues(self.held + count, self.limit, exact=end >= 0)

    def hold(self, start: int, end: int) -> None:
        """Count the kept value of ``text[start:end]`` as held."""
        self.held += _quick_values(self.text, start, end)
        if self.held > self.limit:
            raise _TooManyValues(self.held, self.limit)


_SPACE = re.compile(rb"[ \t\n\r]*")
_BARE = re.compile(rb"[^,}\]\s]+")  # a number, true, false or null


def _string_end(raw: bytes, pos: int) -> int:
    """The end of the JSON string opening at ``raw[pos]`` (a quote), or -1 when it never
    closes: the first quote after it preceded by an even run of backslashes. Found with
    `bytes.find`, in memory independent of the string's length (a regular expression's
    repetition held gigabytes for a 50 MB string)."""
    at = pos + 1
    while (quote := raw.find(b'"', at)) >= 0:
        first = quote
        while first > pos + 1 and raw[first - 1] == 0x5C:  # the backslashes before it
            first -= 1
        if (quote - first) % 2 == 0:
            return quote + 1
        at = quote + 1
    return -1


def _kept_values(raw: bytes, streamed: Mapping[str, Any], limit: int) -> int:
    """The values and member names (`_values`) a streamed parse of the document `raw` keeps:
    all of them but the members named in `streamed`, counted on the bytes, before the text is
    decoded, and only until they pass `limit`. A document that is no object, or that this
    walk cannot follow (it is malformed: the parse names the fault), counts whole."""
    whole = limit + 1  # counted whole: it is over the limit (`_over_values`)
    pos = _SPACE.match(raw).end()
    if raw[pos : pos + 1] != b"{":
        return whole
    kept, pos = 1, pos + 1
    while True:
        pos = _SPACE.match(raw, pos).end()
        if raw[pos : pos + 1] == b"}":
            return kept
        key_end = _string_end(raw, pos) if raw[pos : pos + 1] == b'"' else -1
        if key_end < 0:
            return whole
        try:
            name = json.loads(raw[pos:key_end])
        except ValueError:
            return whole
        pos = _SPACE.match(raw, key_end).end()
        if raw[pos : pos + 1] != b":":
            return whole
        pos = _SPACE.match(raw, pos + 1).end()
        kept_here = name not in streamed
        end, count = _values(raw, pos, whole=False, stop=limit - kept if kept_here else None)
        if end < 0:  # stopped past the limit
            return kept + 1 + count
        if end == pos:  # a scalar: a string, or a number, true, false or null
            bare = _BARE.match(raw, pos)
            end = _string_end(raw, pos) if raw[pos : pos + 1] == b'"' else bare and bare.end()
            if not end or end < 0:
                return whole
        if kept_here:
            kept += 1 + count
        pos = _SPACE.match(raw, end).end()
        if raw[pos : pos + 1] == b",":
            pos += 1
        elif raw[pos : pos + 1] != b"}":
            return whole


def check_values(
    data: bytes, *, file: str, streamed: Collection[str] = (), pointer: str = ""
) -> bool:
    """Refuse (`DocumentError`, JSON-003) the document `data` when what its parse would keep
    (all of it but the `streamed` members, when it is large enough to be parsed streamed)
    holds more values and member names than the limits' `max_json_values`, counted on the
    bytes before anything is decoded or built. True when the whole document is over the
    limit: a streamed parse must then count its entries (`parse_json`'s ``over``)."""
    limit = limits_in_force().max_json_values
    kept = dict.fromkeys(streamed) if len(data) > _STREAM_ABOVE else None
    try:
        return _over_values(data, kept, limit)
    except _TooManyValues as e:
        raise _too_many_values(e, file=file, pointer=pointer) from None


def _too_many_values(e: _TooManyValues, *, file: str, pointer: str) -> DocumentError:
    return DocumentError(
        "more values than a reader builds for one document",
        rule="JSON-003",
        file=file,
        pointer=pointer,
        expected=f"<= {e.limit} values and member names",
        got=e.count,
    )


def _over_values(raw: str | bytes, streamed: Mapping[str, Any] | None, limit: int) -> bool:
    """Refuse (`_TooManyValues`) a document whose values and member names (`_values`) exceed
    `limit` in what its parse keeps (all of it, or with `streamed` all but those members),
    before it is parsed: a parse builds a Python object for each. True when the document as
    a whole is over the limit (its streamed members then need counting entry by entry)."""
    if _quick_values(raw) <= limit:
        return False
    end, count = _values(raw, whole=True, stop=limit)
    if count <= limit:
        return False
    if not streamed or isinstance(raw, str):
        raise _TooManyValues(count, limit, exact=end >= 0)
    kept = _kept_values(raw, streamed, limit)
    if kept > limit:
        raise _TooManyValues(kept, limit)
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999: out of range, Infinity by another name
        raise ValueError(f"number {text[:40]} is out of the range of a double")
    return value


def _check_depth(value: Any, file: str, pointer: str = "") -> None:
    if not isinstance(value, (dict, list)):
        return
    max_depth = limits_in_force().max_depth
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise DocumentError(
                f"JSON nesting deeper than {max_depth}",
                rule="JSON-003",
                file=file,
                pointer=pointer,
            )
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_no_constant, parse_float=_finite_float
)


def _object_members(text: str, idx: int) -> Generator[tuple[str, int], int, int]:
    """(key, start of its value) for each member of the JSON object at `text[idx]`; the caller
    parses the value and sends back where it ends. Raises `json.JSONDecodeError` as `json`."""
    skip = _WHITESPACE.match
    idx = skip(text, idx + 1).end()
    if text.startswith("}", idx):
        return idx + 1
    seen: set[str] = set()
    repeated: str | None = None  # refused when the object closes, as `json` does
    while True:
        if not text.startswith('"', idx):
            raise json.JSONDecodeError(
                "Expecting property name enclosed in double quotes", text, idx
            )
        key, idx = json.decoder.scanstring(text, idx + 1, True)
        if key in seen and repeated is None:
            repeated = key
        seen.add(key)
        idx = skip(text, idx).end()
        if not text.startswith(":", idx):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, idx)
        idx = yield key, skip(text, idx + 1).end()
        idx = skip(text, idx).end()
        if text.startswith(",", idx):
            idx = skip(text, idx + 1).end()
        elif text.startswith("}", idx):
            if repeated is not None:
                raise _DuplicateKey(repeated)
            return idx + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, idx)


def _parse_streamed(
    text: str, streamed: Mapping[str, Callable[[str, Any], Any]], limit: int | None
) -> tuple[Any, Exception | None]:
    """Parse the object document `text`; each value of a top-level member named in `streamed`
    (when that member is an object) goes through its function as soon as it is parsed. With
    `limit`, the members kept and the value being parsed hold at most that many values
    (`_Budget`).

    Returns the value and the first error a function raised: after one, the parse goes on
    without calling any, so that a fault of the JSON itself is still reported first."""
    skip = _WHITESPACE.match
    idx = skip(text, 0).end()
    if not text.startswith("{", idx):
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant,
                          parse_float=_finite_float), None  # fmt: skip
    out: dict[str, Any] = {}
    held: Exception | None = None
    budget = _Budget(text, limit) if limit is not None else None
    members = _object_members(text, idx)
    try:
        key, at = next(members)
        while True:
            convert = streamed.get(key)
            if convert is not None and text.startswith("{", at):
                value: Any = {}
                inner = _object_members(text, at)
                try:
                    name, start = next(inner)
                    while True:
                        if budget is not None:
                            budget.check(start)
                        raw, end = _DECODER.raw_decode(text, start)
                        if held is None:
                            try:
                                value[name] = convert(name, raw)
                            except Exception as e:  # noqa: BLE001 - raised after the parse
                                held = e
                        del raw
                        name, start = inner.send(end)
                except StopIteration as stop:
                    end = stop.value
            else:
                if budget is not None:
                    budget.check(at)
                value, end = _DECODER.raw_decode(text, at)
                if budget is not None:
                    budget.hold(at, end)
            out[key] = value
            key, at = members.send(end)
    except StopIteration as stop:
        end = stop.value
    end = skip(text, end).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return out, held


#: a document this large or smaller is parsed whole even in `streamed` mode, then its streamed
#: members converted: the C parser is about twice as fast as parsing member by member, and the
#: parsed JSON of 4 MiB (about 20,000 `_METADATA` entries) is held only while converted
_STREAM_ABOVE = 4 << 20


def _convert_members(
    value: Any, streamed: Mapping[str, Callable[[str, Any], Any]]
) -> tuple[Any, Exception | None]:
    """What `_parse_streamed` gives, for a document parsed whole: each value of a top-level
    member named in `streamed` (an object) replaced by what its function returns, in order,
    and the first error a function raised (none is called after it)."""
    if type(value) is not dict:
        return value, None
    held: Exception | None = None
    for key, member in value.items():
        convert = streamed.get(key)
        if convert is None or type(member) is not dict:
            continue
        converted: dict[str, Any] = {}
        for name, raw in member.items():
            try:
                converted[name] = convert(name, raw)
            except Exception as e:  # noqa: BLE001 - raised by the caller, as when streamed
                held = e
                break
        value[key] = converted
        if held is not None:
            break
    return value, held


def parse_json(
    data: bytes | bytearray | memoryview | str,
    *,
    file: str,
    pointer: str = "",
    max_bytes: int | None = None,
    streamed: Mapping[str, Callable[[str, Any], Any]] | None = None,
    constants: bool = False,
    over: bool | None = None,
) -> Any:
    """Parse one JSON document strictly; every failure is a `DocumentError` naming `file` (and
    `pointer`, for JSON nested as a string inside another document).

    `constants` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (the user JSON of a JSON item,
    which Python's `json` writes; spec/checkpointables.md §3); it does not combine with
    `streamed`.

    `streamed` maps top-level member names to ``f(key, value)``: each value of such a member
    (when it is an object) is replaced by what `f` returns. In a document over
    `_STREAM_ABOVE` bytes that happens as soon as the value is parsed, so the parsed JSON of a
    large map (the 100,000 entries of a `_METADATA` tree) is never held at once; a smaller
    one is parsed whole first. Errors `f` raises pass through, after any fault of the JSON
    itself. `max_bytes` defaults to the limits' `max_json_bytes`. `over` is what
    `check_values` gave, when the caller ran it already (else it runs here)."""
    limits = limits_in_force()
    if max_bytes is None:
        max_bytes = limits.max_json_bytes
    if len(data) > max_bytes:
        raise DocumentError(
            "document too large",
            rule="JSON-003",
            file=file,
            pointer=pointer,
            expected=f"<= {max_bytes} bytes",
            got=len(data),
        )
    held: Exception | None = None
    try:
        raw = data if isinstance(data, (str, bytes)) else bytes(data)
        # what the parse would build, counted before the text is decoded (or anything built)
        # values nest one deeper than their container; the scan holds a few windows
        deep = _bracket_depth(raw, stop=limits.max_depth) + 1 > limits.max_depth
        stream = bool(streamed) and not deep and len(raw) > _STREAM_ABOVE
        if over is None or not stream:  # parsed whole: everything counts
            over = _over_values(raw, streamed if stream else None, limits.max_json_values)
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
        if stream:  # else checked whole, below
            # past the limit as a whole (but not in what it keeps): each entry is counted
            value, held = _parse_streamed(text, streamed, limits.max_json_values if over else None)
        else:
            value = json.loads(
                text,
                object_pairs_hook=_pairs,
                parse_constant=float if constants else _no_constant,
                parse_float=_finite_float,
            )
            if streamed and not deep:
                value, held = _convert_members(value, streamed)
    except _DuplicateKey as e:
        raise DocumentError(
            f"duplicate key {e.key!r}", rule="JSON-002", file=file, pointer=pointer
        ) from None
    except _TooManyValues as e:
        raise _too_many_values(e, file=file, pointer=pointer) from None
    except UnicodeDecodeError as e:
        raise DocumentError(
            f"not UTF-8 at byte {e.start}", rule="JSON-001", file=file, pointer=pointer
        ) from None
    except RecursionError:
        raise DocumentError(
            f"JSON nesting deeper than {limits.max_depth}",
            rule="JSON-003",
            file=file,
            pointer=pointer,
        ) from None
    except ValueError as e:  # JSONDecodeError and rejected constants
        raise DocumentError(
            f"malformed JSON: {e}", rule="JSON-001", file=file, pointer=pointer
        ) from None
    if held is not None:
        raise held
    if deep:
        _check_depth(value, file, pointer)
    return value


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read and parse a JSON file, refusing one over the limits' `max_json_bytes` before reading
    it."""
    file = os.fspath(path)
    limit = limits_in_force().max_json_bytes
    return parse_json(read_file(file, limit=limit, rule="JSON-003"), file=file)


def dump_json(value: Any, *, compact: bool = False) -> bytes:
    """Serialize as Orbax does: Python's default separators, or none (`compact`) for the
    documents tensorstore writes."""
    separators = (",", ":") if compact else None
    return json.dumps(value, allow_nan=False, separators=separators).encode("utf-8")


_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def type_name(value: Any) -> str:
    """The JSON type name of a parsed value, for error messages."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def expect(
    value: Any, kind: type[T] | tuple[type, ...], *, file: str, pointer: str, rule: str = "JSON-004"
) -> T:
    """Return `value` if it is of `kind` (bool is never an int here), else raise."""
    ok = isinstance(value, kind)
    if ok and isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = bool in kinds
    if not ok:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise DocumentError(
            "wrong type",
            rule=rule,
            file=file,
            pointer=pointer,
            expected=want,
            got=type_name(value),
        )
    return value  # type: ignore[return-value]


def expect_object(value: Any, *, file: str, pointer: str, rule: str = "JSON-004") -> dict:
    return expect(value, dict, file=file, pointer=pointer, rule=rule)


def require(
    obj: Mapping[str, Any], key: str, *, file: str, pointer: str, rule: str = "JSON-005"
) -> Any:
    """`obj[key]`, or a `DocumentError` saying the required field is missing."""
    if key not in obj:
        raise DocumentError(
            f"required field {key!r} is missing", rule=rule, file=file, pointer=pointer
        )
    return obj[key]


def expect_int_list(
    value: Any, *, file: str, pointer: str, rule: str = "JSON-004", non_negative: bool = True
) -> tuple[int, ...]:
    """A JSON array of integers (dimension sizes), as a tuple."""
    items = expect(value, list, file=file, pointer=pointer, rule=rule)
    out = []
    for i, item in enumerate(items):
        n = expect(item, int, file=file, pointer=f"{pointer}/{i}", rule=rule)
        if non_negative and n < 0:
            raise DocumentError(
                "negative size",
                rule=rule,
                file=file,
                pointer=f"{pointer}/{i}",
                expected=">= 0",
                got=n,
            )
        out.append(n)
    return tuple(out)


def child(pointer: str, key: str | int) -> str:
    """Extend a JSON pointer by one reference token (escaping `~` and `/`)."""
    token = str(key).replace("~", "~0").replace("/", "~1")
    return f"{pointer}/{token}"
