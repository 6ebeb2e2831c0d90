"""`ockpt.errors`: one snapshot of the rendered text of each error class, with every field and
with none, so a change of wording or layout is seen here, once; every other test asserts an
error's fields (`tests.support.errors`). Also what each class is besides an `OckptError`."""

from __future__ import annotations

import errno

import pytest

from ockpt.errors import (
    DocumentError,
    FormatError,
    LeafNameError,
    MemoryLimitError,
    MissingDataError,
    MsgpackError,
    NotACheckpointError,
    OcdbtError,
    OckptError,
    PathNotFoundError,
    TargetError,
    UnsupportedError,
    WriteConflictError,
    ZarrFormatError,
)
from tests.support.errors import assert_error, error_fields

FORMAT_ERRORS = [FormatError, DocumentError, MsgpackError, ZarrFormatError, OcdbtError]


@pytest.mark.parametrize("cls", [*FORMAT_ERRORS, MissingDataError], ids=lambda c: c.__name__)
def test_format_error_renders_file_pointer_message_details_and_rule(cls):
    full = cls(
        "bad length", rule="OCDBT-007", file="d/x", pointer="@12", expected=4, got="3"
    )
    assert str(full) == "d/x at @12: bad length (expected 4, got '3') [OCDBT-007]"
    assert str(cls("bad", file="f", pointer="")) == "f: bad"
    assert str(cls("bad", pointer="/a/0")) == "at /a/0: bad"
    assert str(cls("bad", expected=None)) == "bad (expected None)"
    assert str(cls("bad", got=[1])) == "bad (got [1])"
    assert str(cls("bad")) == "bad"
    assert isinstance(full, (OckptError, ValueError))
    assert error_fields(full) == {
        "rule": "OCDBT-007",
        "file": "d/x",
        "message": "bad length",
        "pointer": "@12",
        "expected": 4,
        "got": "3",
    }
    assert error_fields(cls("bad", rule="X-001")) == {
        "rule": "X-001", "file": None, "message": "bad", "pointer": None
    }


def test_missing_data_error_is_a_key_error_that_renders_like_the_others():
    err = MissingDataError("chunk 0.0 is missing", rule="ZARR-020", file="a/0.0")
    assert isinstance(err, KeyError)
    assert str(err) == "a/0.0: chunk 0.0 is missing [ZARR-020]"  # not KeyError's repr()


@pytest.mark.parametrize(
    "cls, also",
    [
        (NotACheckpointError, FileNotFoundError),
        (PathNotFoundError, FileNotFoundError),
        (UnsupportedError, NotImplementedError),
        (WriteConflictError, OckptError),
        (MemoryLimitError, MemoryError),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_file_errors_render_file_message_and_rule(cls, also):
    err = cls("cannot", rule="DIR-001", file="/ckpt")
    assert str(err) == "/ckpt: cannot [DIR-001]"
    assert isinstance(err, also) and isinstance(err, OckptError)
    assert error_fields(err) == {"rule": "DIR-001", "file": "/ckpt", "message": "cannot"}
    if cls is MemoryLimitError:
        assert str(cls("too big")) == "too big [LIMIT-006]"  # its rule unless told
    else:
        assert str(cls("cannot")) == "cannot"


def test_path_not_found_is_an_os_error_of_enoent():
    err = PathNotFoundError("no such path", rule="LOAD-053", file="/nope")
    assert (err.errno, err.filename, err.strerror) == (errno.ENOENT, "/nope", "no such path")


def test_target_error_renders_checkpoint_leaf_message_and_rule():
    err = TargetError(
        "keys differ", rule="LOAD-010", file="ckpt", leaf="a.b", missing=["x"], extra=("y",)
    )
    assert str(err) == "ckpt: leaf 'a.b': keys differ [LOAD-010]"
    assert str(TargetError("keys differ")) == "<checkpoint>: keys differ"
    assert error_fields(err) == {
        "rule": "LOAD-010",
        "file": "ckpt",
        "message": "keys differ",
        "leaf": "a.b",
        "missing": ("x",),
        "extra": ("y",),
    }


def test_leaf_name_error_renders_like_a_file_error_not_a_key_error():
    err = LeafNameError("no leaf 'a.c'", rule="PATH-007", name="a.c", file="ckpt", close=["a.b"])
    assert str(err) == "ckpt: no leaf 'a.c' [PATH-007]"
    assert isinstance(err, KeyError) and isinstance(err, ValueError)
    assert_error(err, rule="PATH-007", name="a.c", close=("a.b",))


def test_fields_tell_values_of_other_types_apart():
    """True, 1 and 1.0 are equal in Python; the fields of an error that got True are not those
    of one that got 1 (the rendered text tells them apart too)."""
    err = FormatError("bad", rule="X-001", expected=1, got=True)
    fields = {"rule": "X-001", "file": None, "message": "bad", "pointer": None}
    assert error_fields(err) == fields | {"expected": 1, "got": True}
    assert error_fields(err) != fields | {"expected": 1, "got": 1}
    assert error_fields(err) != fields | {"expected": 1.0, "got": True}
    assert error_fields(err) != fields | {"expected": 1}
    with pytest.raises(AssertionError):
        assert_error(err, rule="X-001", got=1)
    assert_error(err, rule="X-001", got=True)


def test_assert_error_fails_on_a_wrong_field_and_on_a_missing_rule():
    err = OcdbtError("bad", rule="OCDBT-001", file="f", pointer="@0")
    assert_error(err, rule="OCDBT-001", file="f", pointer="@0")
    with pytest.raises(AssertionError):
        assert_error(err, rule="OCDBT-002")
    with pytest.raises(AssertionError):
        assert_error(err, rule="OCDBT-001", file="g")
    with pytest.raises(AssertionError):
        assert_error(err, rule="OCDBT-001", expected=1)  # it was given none
    with pytest.raises(AssertionError):
        assert_error(err, file="f")
    with pytest.raises(AssertionError):
        assert_error(err, rule="OCDBT-001", leaf="a")  # not a field of this class
