"""Compare a loaded tree with the tree that was saved, returning differences as text.

``strict`` (a load with a target): container types, key types and NamedTuple classes must be
the target's. Loose (a load without target): the format does not record tuple vs list,
NamedTuple classes or int dict keys (spec/loading.md §3.1), so a tuple may come back as a
list, a NamedTuple as a dict and an int key as its text; a Python scalar may come back as a
numpy scalar of its stored dtype (bool, int64, float64). In both modes a numpy scalar may come
back as a Python scalar of the same value (an API choice of Orbax, not a format matter).
Arrays compare dtype, shape and bytes; jax.Arrays are compared through their host value.
A typed PRNG key of the record (an object with `impl` and `data`) must come back as a key of
that implementation with equal key data: a jax key array, or any object with `impl` and
`data` (spec loading §4.3).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["differences", "same_bits"]

_PY = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _is_key(x: Any) -> bool:
    """A typed PRNG key as records and host readers hold one: `impl` and `data`."""
    return isinstance(getattr(x, "impl", None), str) and _is_array(getattr(x, "data", None))


def _key_parts(x: Any) -> tuple[str | None, Any]:
    """(implementation, key data) of a loaded key; (None, x) for anything else."""
    if _is_key(x):
        return x.impl, np.asarray(x.data)
    jax = sys.modules.get("jax")  # a jax key array can only come from a caller that has jax
    if jax is not None and isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return str(jax.random.key_impl(x)), np.asarray(jax.random.key_data(x))
    return None, x


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def differences(
    got: Any, want: Any, *, strict: bool, where: str = "", limit: int = 5, scalars_0d: bool = False
) -> list[str]:
    """The first `limit` differences between `got` and the saved tree `want`.

    `scalars_0d`: a scalar leaf may come back as a 0-d array of its stored dtype (items without
    `_METADATA`, where the format does not record that a 0-d array was a scalar).
    """
    out: list[str] = []
    _walk(got, want, strict, where, out, scalars_0d and not strict)
    return out[:limit]


def _fail(out: list[str], where: str, text: str) -> None:
    out.append(f"{where or '<root>'}: {text}")


def _walk(got: Any, want: Any, strict: bool, where: str, out: list[str], zd: bool = False) -> None:
    if len(out) > 20:
        return
    if zd and isinstance(got, np.ndarray) and got.ndim == 0 and not _is_array(want):
        got = got[()]
    if _is_key(want):
        impl, data = _key_parts(got)
        if impl != want.impl:
            what = f"a {impl} key" if impl else type(got).__name__
            return _fail(out, where, f"expected a {want.impl} key, got {what}")
        if not same_bits(data, np.asarray(want.data)):
            _fail(out, where, "key data differ")
        return
    if _is_namedtuple(want):
        if _is_namedtuple(got) and type(got).__name__ == type(want).__name__:
            got = got._asdict()
        elif not strict and isinstance(got, dict):
            pass
        else:
            return _fail(out, where, f"expected {type(want).__name__}, got {type(got).__name__}")
        want = want._asdict()
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return _fail(out, where, f"expected dict, got {type(got).__name__}")
        keyed = {str(k): k for k in want} if not strict else {k: k for k in want}
        if strict and set(got) != set(want):
            return _fail(out, where, f"keys {sorted(map(repr, got))} != {sorted(map(repr, want))}")
        gotk = {str(k): v for k, v in got.items()} if not strict else got
        if not strict and set(gotk) != set(keyed):
            return _fail(out, where, f"keys {sorted(gotk)} != {sorted(keyed)}")
        for k, orig in keyed.items():
            _walk(gotk[k], want[orig], strict, f"{where}/{k}", out, zd)
        return
    if isinstance(want, (list, tuple)):
        ok_types = (type(want),) if strict else (list, tuple)
        if not isinstance(got, ok_types) or _is_namedtuple(got) != _is_namedtuple(want):
            if not (not strict and not want and got in (None, {}, [], ())):
                _fail(out, where, f"expected {type(want).__name__}, got {type(got).__name__}")
            return
        if len(got) != len(want):
            return _fail(out, where, f"length {len(got)} != {len(want)}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _walk(g, w, strict, f"{where}/{i}", out, zd)
        return
    if want is None or isinstance(want, str):
        if got != want or type(got) is not type(want):
            _fail(out, where, f"{_short(got)} != {_short(want)}")
        return
    if _is_array(want):
        if not _is_array(got):
            return _fail(out, where, f"expected an array, got {type(got).__name__}")
        if strict and isinstance(want, np.ndarray) and not isinstance(got, np.ndarray):
            return _fail(out, where, f"expected numpy.ndarray, got {type(got).__name__}")
        g, w = np.asarray(got), np.asarray(want)
        if g.dtype != w.dtype or g.shape != w.shape:
            return _fail(out, where, f"{g.dtype}{list(g.shape)} != {w.dtype}{list(w.shape)}")
        if g.tobytes() != w.tobytes():
            _fail(out, where, "values differ")
        return
    # scalars
    if isinstance(want, np.generic):
        if isinstance(got, np.generic) or (strict and _is_array(got)):
            g = np.asarray(got)
            if g.dtype != want.dtype or g.tobytes() != np.asarray(want).tobytes():
                _fail(out, where, f"{_short(got)} ({g.dtype}) != {_short(want)} ({want.dtype})")
            return
        if not isinstance(got, (bool, int, float, complex)):
            return _fail(
                out, where, f"expected numpy {want.dtype} scalar, got {type(got).__name__}"
            )
        if np.asarray(got).astype(want.dtype).tobytes() != np.asarray(want).tobytes():
            _fail(out, where, f"{_short(got)} != {_short(want)}")
        return
    if isinstance(got, np.generic) and not strict:
        w = np.asarray(want, dtype=_PY.get(type(want)))
        if got.dtype != w.dtype or np.asarray(got).tobytes() != w.tobytes():
            _fail(out, where, f"{_short(got)} ({got.dtype}) != {_short(want)} ({w.dtype})")
        return
    if type(got) is not type(want):
        return _fail(out, where, f"expected {type(want).__name__}, got {type(got).__name__}")
    if np.asarray(got).tobytes() != np.asarray(want).tobytes():
        _fail(out, where, f"{_short(got)} != {_short(want)}")


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."
