"""``ockpt diff``: structure, dtype, shape and value differences between two checkpoints.

Either side may be an Orbax checkpoint (any layout, local or URL) or a safetensors / npz file
(`sources.open_source`). Two Orbax checkpoints are matched by key path; otherwise leaves are
matched by their key path joined with `sep`. Values are compared block by block (memory stays
near one block per side): exactly by default, with NaN equal to NaN (and -0.0 equal to 0.0);
with `rtol` / `atol` as ``|a - b| <= atol + rtol * |b|``. Leaves of different dtypes are
reported and, when their shapes agree, also compared by value in float64 / complex128.
Differences name leaves by their leaf names (spec/key-paths.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .paths import leaf_name, printable
from .sources import BLOCK_BYTES, Leaf, Source

__all__ = ["Difference", "DiffReport", "diff"]


@dataclass(frozen=True)
class Difference:
    """One difference: `kind` is ``only_in_a``, ``only_in_b``, ``structure``, ``kind``,
    ``dtype``, ``shape`` or ``values``."""

    kind: str
    name: str
    a: Any = None
    b: Any = None
    count: int | None = None  # values: elements that differ
    size: int | None = None  # values: elements compared
    max_abs: float | None = None
    first_index: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        for key in ("a", "b", "count", "size", "max_abs", "first_index"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def text(self) -> str:
        if self.kind == "only_in_a":
            return f"only in A: {self.name}"
        if self.kind == "only_in_b":
            return f"only in B: {self.name}"
        if self.kind == "values":
            where = "" if self.first_index is None else f", first at {list(self.first_index)}"
            big = "" if self.max_abs is None else f", max |a-b| = {self.max_abs:.6g}"
            return f"values differ: {self.name}: {self.count} of {self.size} elements{big}{where}"
        return f"{self.kind} differs: {self.name}: {self.a} vs {self.b}"


@dataclass
class DiffReport:
    a: str
    b: str
    compared: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "equal": self.equal,
            "compared": self.compared,
            "differences": [d.to_json() for d in self.differences],
        }

    def format_text(self) -> str:
        lines = [printable(d.text()) for d in self.differences]
        if self.equal:
            lines.append(f"no differences ({self.compared} leaves compared)")
        else:
            lines.append(
                f"{len(self.differences)} difference(s); {self.compared} leaves compared by value"
            )
        return "\n".join(lines)


def _keyed(source: Source, by_path: bool, sep: str) -> dict[Any, Leaf]:
    return {(leaf.key if by_path else leaf.name(sep)): leaf for leaf in source.leaves}


def _first_rows(leaf: Leaf) -> int:
    row = max(1, leaf.nbytes // max(1, leaf.shape[0])) if leaf.shape else 1
    return max(1, BLOCK_BYTES // row)


def _mismatch(x: np.ndarray, y: np.ndarray, rtol: float, atol: float, exact: bool) -> np.ndarray:
    """Boolean mask of elements that differ."""
    if exact:
        if x.dtype.kind in "biu" or x.dtype == np.bool_:
            return x != y
        try:
            nan = np.isnan(x) & np.isnan(y)
        except TypeError:
            return x != y
        return (x != y) & ~nan
    wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(y) else np.float64
    xa, ya = x.astype(wide), y.astype(wide)
    return ~np.isclose(xa, ya, rtol=rtol, atol=atol, equal_nan=True)


def _max_abs(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float | None:
    if x.dtype == np.bool_ or y.dtype == np.bool_:
        return None
    try:
        wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(y) else np.float64
        d = np.abs(x[mask].astype(wide) - y[mask].astype(wide))
    except (TypeError, ValueError):
        return None
    d = d[np.isfinite(d)]
    return float(d.max()) if d.size else None


def _compare_values(
    sa: Source, la: Leaf, sb: Source, lb: Leaf, *, rtol: float, atol: float, bar: Any
) -> tuple[int, int, float | None, tuple[int, ...] | None]:
    exact = rtol == 0 and atol == 0 and la.dtype == lb.dtype
    size = int(np.prod(la.shape, dtype=np.int64))
    count, biggest, first = 0, None, None
    if not la.shape or la.shape[0] == 0:
        blocks = [(...)]
    else:
        rows = min(_first_rows(la), _first_rows(lb))
        blocks = [(slice(i, i + rows),) for i in range(0, la.shape[0], rows)]
    for index in blocks:
        x, y = np.asarray(sa.read(la, index)), np.asarray(sb.read(lb, index))
        mask = _mismatch(x, y, rtol, atol, exact)
        n = int(np.count_nonzero(mask))
        if n:
            if first is None:
                at = np.argwhere(mask)[0] if mask.ndim else ()
                offset = index[0].start if index is not ... else 0
                first = tuple(int(v) + (offset if i == 0 else 0) for i, v in enumerate(at))
            m = _max_abs(x, y, mask)
            if m is not None:
                biggest = m if biggest is None else max(biggest, m)
            count += n
        bar.update(x.nbytes)
    return count, size, biggest, first


#: Sources whose leaves are keyed by key path, with empty containers and Nones in the tree.
_TREES = frozenset({"orbax", "tree"})


def diff(
    a: Source,
    b: Source,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    sep: str = ".",
    progress: bool = True,
) -> DiffReport:
    """Compare two opened sources (see `sources.open_source`)."""
    from . import _progress

    by_path = a.format in _TREES and b.format in _TREES
    ka, kb = _keyed(a, by_path, sep), _keyed(b, by_path, sep)
    report = DiffReport(a.path, b.path)
    out = report.differences
    for key in ka.keys() - kb.keys():
        out.append(Difference("only_in_a", leaf_name(ka[key].key)))
    for key in kb.keys() - ka.keys():
        out.append(Difference("only_in_b", leaf_name(kb[key].key)))
    if by_path:  # empty containers and None are part of an Orbax tree's structure
        ea, eb = dict(a.empties), dict(b.empties)
        for key in sorted(ea.keys() | eb.keys()):
            if ea.get(key) != eb.get(key) and key not in ka and key not in kb:
                out.append(Difference("structure", leaf_name(key), ea.get(key), eb.get(key)))
    common = [k for k in ka if k in kb]
    total = sum(ka[k].nbytes for k in common)
    with _progress.bar(total, "comparing", enabled=progress) as bar:
        for key in common:
            la, lb = ka[key], kb[key]
            name = leaf_name(la.key)
            if la.kind != lb.kind:
                out.append(Difference("kind", name, la.kind, lb.kind))
                bar.update(la.nbytes)  # not compared: counted so the bar ends at its total
                continue
            if la.kind == "string":
                va, vb = a.read(la), b.read(lb)
                report.compared += 1
                if va != vb:
                    out.append(Difference("values", name, va, vb, 1, 1))
                bar.update(la.nbytes)
                continue
            if la.dtype != lb.dtype:
                out.append(Difference("dtype", name, str(la.dtype), str(lb.dtype)))
            if la.shape != lb.shape:
                out.append(Difference("shape", name, list(la.shape), list(lb.shape)))
                bar.update(la.nbytes)
                continue
            report.compared += 1
            count, size, biggest, first = _compare_values(
                a, la, b, lb, rtol=rtol, atol=atol, bar=bar
            )
            if count:
                out.append(
                    Difference(
                        "values", name, count=count, size=size, max_abs=biggest, first_index=first
                    )
                )
    order = {"only_in_a": 0, "only_in_b": 1, "structure": 2, "kind": 3, "dtype": 4, "shape": 5}
    out.sort(key=lambda d: (order.get(d.kind, 6), d.name))
    return report
