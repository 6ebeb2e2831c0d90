"""What an ockpt error says, as data. Tests assert an error's fields (its rule above all, then
the file, the pointer, expected and got) rather than its rendered text, so a better message
changes one snapshot (tests/test_errors.py) and not hundreds of tests, while a wrong rule id or
file name still fails the test that checks it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ockpt.errors import FormatError, LeafNameError, OckptError, TargetError


class Fields(dict):
    """An error's fields. Equal to a dict of the same fields whose `expected` and `got` are
    also of the same types (their repr()s agree): ``True``, ``1`` and ``1.0`` are equal in
    Python but an error that reports one must not report another."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, dict) or not dict.__eq__(self, other):
            return False
        return all(repr(self[k]) == repr(other[k]) for k in ("expected", "got") if k in self)

    def __ne__(self, other: object) -> bool:
        return not self == other


def error_fields(err: OckptError | pytest.ExceptionInfo) -> Fields:
    """The fields `err` carries, by name: `rule`, `file` and `message` of every error; a
    `FormatError`'s `pointer`, and `expected` and `got` when it was given them; a
    `TargetError`'s `leaf`, `missing` and `extra`; a `LeafNameError`'s `name` and `close`."""
    if isinstance(err, pytest.ExceptionInfo):
        err = err.value
    fields: dict[str, Any] = {
        "rule": err.rule,
        "file": getattr(err, "file", None),
        "message": getattr(err, "message", None),
    }
    if isinstance(err, FormatError):
        fields["pointer"] = err.pointer
        if err._has_expected:
            fields["expected"] = err.expected
        if err._has_got:
            fields["got"] = err.got
    if isinstance(err, TargetError):
        fields |= {"leaf": err.leaf, "missing": err.missing, "extra": err.extra}
    if isinstance(err, LeafNameError):
        fields |= {"name": err.name, "close": err.close}
    return Fields(fields)


def assert_error(err: OckptError | pytest.ExceptionInfo, **want: Any) -> None:
    """Assert the named fields of `err` (`rule=`, `file=`, `pointer=`, `message=`, `expected=`,
    `got=` ...); the others are not checked. The rule must always be given."""
    assert "rule" in want, "assert_error: say which rule the error must cite"
    if isinstance(err, pytest.ExceptionInfo):
        err = err.value
    fields = error_fields(err)
    unknown = set(want) - set(fields) - {"expected", "got"}
    assert not unknown, f"{type(err).__name__} has no fields {sorted(unknown)}"
    got = Fields({k: fields.get(k, "<not given>") for k in want})
    assert got == want, f"{type(err).__name__}: {got} != {want}"


def raised(kind: type[BaseException], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The exception of class `kind` that ``fn(*args, **kwargs)`` raises (the test fails if
    none)."""
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    return info.value


def raised_fields(
    kind: type[OckptError], fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Fields:
    """`error_fields` of the error of class `kind` that ``fn(*args, **kwargs)`` raises."""
    return error_fields(raised(kind, fn, *args, **kwargs))
