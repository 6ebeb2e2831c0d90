"""`open_store` of ockpt/engines/__init__.py, the one place an engine is chosen: each engine's
`ArrayStore` (replaced here by one that records how it was made) gets the location, the item's
format and options (the tensorstore engine its context too); an unknown backend is refused."""

from __future__ import annotations

import pytest

from ockpt import engines
from ockpt.engines import python as python_engine
from ockpt.engines import tensorstore as tensorstore_engine

# --- engines/__init__.py: open_store chooses the engine and passes it the item's options ---


class _Engine:
    """An engine's ArrayStore that records how it was made."""

    made: list = []

    def __init__(self, location, fmt, **options):
        _Engine.made.append((type(self).__name__, location, fmt, options))


class _Python(_Engine):
    pass


class _Tensorstore(_Engine):
    pass


@pytest.fixture
def made(monkeypatch):
    monkeypatch.setattr(python_engine, "ArrayStore", _Python)
    monkeypatch.setattr(tensorstore_engine, "ArrayStore", _Tensorstore)
    _Engine.made = []
    return _Engine.made


def test_open_store_python_engine_gets_the_items_options(made) -> None:
    location, fmt = object(), object()
    got = engines.open_store(location, fmt, backend="python", context="ctx")
    assert type(got) is _Python
    got = engines.open_store(
        location, fmt, backend="python", zarr_version=3, missing_chunks_are_errors=True
    )
    assert made == [
        ("_Python", location, fmt, {"zarr_version": None, "missing_chunks_are_errors": False}),
        ("_Python", location, fmt, {"zarr_version": 3, "missing_chunks_are_errors": True}),
    ]


def test_open_store_tensorstore_engine_gets_the_context_too(made) -> None:
    location, fmt, context = object(), object(), object()
    got = engines.open_store(location, fmt, backend="tensorstore")
    assert type(got) is _Tensorstore
    engines.open_store(
        location,
        fmt,
        backend="tensorstore",
        context=context,
        zarr_version=2,
        missing_chunks_are_errors=True,
    )
    assert made == [
        (
            "_Tensorstore",
            location,
            fmt,
            {"zarr_version": None, "context": None, "missing_chunks_are_errors": False},
        ),
        (
            "_Tensorstore",
            location,
            fmt,
            {"zarr_version": 2, "context": context, "missing_chunks_are_errors": True},
        ),
    ]


def test_open_store_refuses_an_unknown_backend(made) -> None:
    assert engines.BACKENDS == ("python", "tensorstore")
    for backend in ("auto", "Python", "", "numpy"):
        with pytest.raises(ValueError) as e:
            engines.open_store(object(), object(), backend=backend)
        assert str(e.value) == f"backend must be one of ('python', 'tensorstore'), not {backend!r}"
    assert made == []
