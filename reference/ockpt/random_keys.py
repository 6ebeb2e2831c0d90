"""Typed JAX PRNG keys: how a key array is stored and what a load gives for one (spec loading §4.3).

A typed key array (``jax.random.key(0)``) is stored as its raw key data, a ``uint32`` array with
the implementation's key-data dimensions after the key array's own, and the implementation's name
is recorded in ``array_metadatas/process_<N>`` as ``ext_metadata.random_key_impl``. Nothing here
imports jax: `RandomKey` is what a load gives for a key when the caller has not imported it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .errors import FormatError, UnsupportedError

__all__ = ["KEY_DATA_SHAPES", "KEY_DTYPE", "RandomKey", "key_data_shape", "key_shape"]

#: The key-data dimensions of each implementation Orbax records (ARRM-002).
KEY_DATA_SHAPES: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {"threefry2x32": (2,), "rbg": (4,), "unsafe_rbg": (4,)}
)
#: The element type of stored key data.
KEY_DTYPE = np.dtype(np.uint32)


def key_data_shape(
    impl: str, *, file: str | None = None, leaf: str | None = None
) -> tuple[int, ...]:
    """The key-data dimensions of `impl`; an implementation outside the table is unsupported."""
    shape = KEY_DATA_SHAPES.get(impl)
    if shape is None:
        raise UnsupportedError(
            f"{'' if leaf is None else f'leaf {leaf!r}: '}typed PRNG key implementation "
            f"{impl!r} is not one the format records (known: {', '.join(KEY_DATA_SHAPES)})",
            rule="ARRM-002",
            file=file,
        )
    return shape


def key_shape(
    impl: str,
    stored_shape: tuple[int, ...],
    stored_dtype: np.dtype,
    *,
    file: str | None = None,
    leaf: str | None = None,
) -> tuple[int, ...]:
    """The shape of the key array whose key data is stored as (`stored_shape`, `stored_dtype`).

    The stored array must be ``uint32`` and end with the implementation's key-data dimensions.
    """
    data = key_data_shape(impl, file=file, leaf=leaf)
    n = len(data)
    if stored_dtype != KEY_DTYPE or tuple(stored_shape[len(stored_shape) - n :]) != data:
        raise FormatError(
            f"recorded as a typed PRNG key ({impl}), but the stored array is "
            f"{np.dtype(stored_dtype)} {list(stored_shape)}, not uint32 [..., "
            f"{', '.join(map(str, data))}]",
            rule="ARRM-002",
            file=file,
            pointer=leaf,
        )
    return tuple(stored_shape[: len(stored_shape) - n])


@dataclass(frozen=True, eq=False)
class RandomKey:
    """A typed PRNG key array read without jax: its implementation and its raw key data.

    `data` is the stored ``uint32`` array; `shape` is the key array's shape (without the
    key-data dimensions). ``to_jax()`` makes the typed key array (imports jax).
    """

    impl: str
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return key_shape(self.impl, tuple(self.data.shape), self.data.dtype)

    @property
    def dtype(self) -> str:
        """The key type's name as jax spells the implementation (``key<threefry2x32>``)."""
        return f"key<{self.impl}>"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def __repr__(self) -> str:
        return f"RandomKey(impl={self.impl!r}, shape={self.shape})"

    def to_jax(self) -> Any:
        """The typed jax key array (``jax.random.wrap_key_data``) on the default device."""
        import jax

        return jax.random.wrap_key_data(self.data, impl=self.impl)
