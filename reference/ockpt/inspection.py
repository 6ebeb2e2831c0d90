"""``ockpt inspect`` and ``ockpt cat``: what a checkpoint holds, and the values of one leaf.

Both read documents and array metadata only, except `cat`, which reads the chunks its slice
touches. Paths may be local or kvstore URLs; a checkpoint-manager root reads its latest
committed step unless a step is given (`layout.resolve`).
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from . import listing
from .documents.sharding import NamedShardingSpec, SingleDeviceShardingSpec
from .errors import MissingDataError

__all__ = ["inspect", "format_inspect", "parse_slice", "cat", "find_leaf", "to_json_value"]


def _sharding_json(spec: Any) -> dict[str, Any] | None:
    if spec is None:
        return None
    return spec.to_json() if hasattr(spec, "to_json") else {"repr": repr(spec)}


def _sharding_text(spec: Any) -> str:
    if isinstance(spec, NamedShardingSpec):
        mesh = ",".join(f"{a}={n}" for a, n in zip(spec.axis_names, spec.mesh_shape, strict=False))
        parts = []
        for entry in spec.partition_spec:
            if entry is None:
                parts.append("None")
            elif isinstance(entry, tuple):
                parts.append("(" + ",".join(repr(e) for e in entry) + ")")
            else:
                parts.append(repr(entry))
        return f"mesh({mesh}) P({', '.join(parts)})"
    if isinstance(spec, SingleDeviceShardingSpec):
        return f"device {spec.device_str}"
    return "-" if spec is None else type(spec).__name__


def _walk(node: Any, key: tuple[str, ...], out: list[tuple[tuple[str, ...], Any]]) -> None:
    if isinstance(node, dict):
        if not node:
            out.append((key, "{}"))
        for k, v in node.items():
            _walk(v, key + (str(k),), out)
    elif isinstance(node, (list, tuple)):
        if not node:
            out.append((key, "[]" if isinstance(node, list) else "()"))
        for i, v in enumerate(node):
            _walk(v, key + (str(i),), out)
    elif node is None:
        out.append((key, "None"))
    else:
        out.append((key, node))


def _leaf_row(key: tuple[str, ...], meta: Any) -> dict[str, Any]:
    if isinstance(meta, str):  # an empty container or None
        return {"key": list(key), "name": "/".join(key), "value_type": meta}
    return {
        "key": list(key),
        "name": "/".join(key),
        "param_name": meta.param_name,
        "value_type": meta.value_type,
        "shape": list(meta.shape),
        "dtype": None if meta.dtype is None else str(meta.dtype),
        "storage_dtype": None if meta.storage_dtype is None else str(meta.storage_dtype),
        "nbytes": int(meta.nbytes),
        "chunk_shape": None if meta.chunk_shape is None else list(meta.chunk_shape),
        "write_shape": None if meta.write_shape is None else list(meta.write_shape),
        "sharding": _sharding_json(meta.sharding),
        "sharding_text": _sharding_text(meta.sharding),
    }


def inspect(path: Any, *, step: int | None = None, item: str | None = None) -> dict[str, Any]:
    """A JSON-able report: the checkpoint's kind, steps or items, and one row per leaf with
    shape, dtype (as loaded and as stored), bytes, chunk shape and saved sharding; totals."""
    from .reader import open as open_checkpoint

    ckpt = open_checkpoint(path, step=step, item=item)
    resolved = ckpt.resolved
    with ckpt:
        found: list[tuple[tuple[str, ...], Any]] = []
        _walk(ckpt.metadata, (), found)
        item_path = ckpt.path
    rows = [_leaf_row(k, m) for k, m in found]
    leaves = [r for r in rows if "nbytes" in r]
    by_dtype: Counter[str] = Counter()
    for r in leaves:
        by_dtype[r["dtype"] or "string"] += r["nbytes"]
    report: dict[str, Any] = {
        "path": str(path),
        "kind": resolved.top.kind.value,
        "item_path": item_path,
        "leaves": rows,
        "totals": {
            "leaves": len(leaves),
            "arrays": sum(1 for r in leaves if r["dtype"] is not None and r["shape"]),
            "scalars": sum(1 for r in leaves if r["dtype"] is not None and not r["shape"]),
            "strings": sum(1 for r in leaves if r["dtype"] is None),
            "empty_nodes": len(rows) - len(leaves),
            "bytes": sum(r["nbytes"] for r in leaves),
            "bytes_by_dtype": dict(sorted(by_dtype.items())),
        },
    }
    if resolved.step is not None:
        top = resolved.top
        report["steps"] = [listing.step_entry(top, s).to_json() for s in top.steps]
        report["step"] = resolved.step.step
    if resolved.container is not None:
        items = resolved.container.checkpointables
        report["items"] = [{"name": n, "kind": c.kind.value} for n, c in items.items()]
    return report


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def format_inspect(report: dict[str, Any]) -> str:
    lines = [f"{report['path']}: {report['kind']}"]
    for s in report.get("steps", []):
        state = "committed" if s["committed"] else "UNCOMMITTED"
        when = s.get("commit_time", "-")
        mark = "  <- shown" if s.get("step") == report.get("step") and s["committed"] else ""
        lines.append(f"  step {s.get('step', s['name'])}: {state}  {when}{mark}")
    for it in report.get("items", []):
        lines.append(f"  item {it['name']}: {it['kind']}")
    lines.append(f"item {report['item_path']}:")
    head = ["leaf", "type", "shape", "dtype", "stored", "bytes", "chunks", "sharding"]
    rows = [head]
    for r in report["leaves"]:
        if "nbytes" not in r:
            rows.append([r["name"] or "<root>", r["value_type"], "", "", "", "", "", ""])
            continue
        rows.append(
            [
                r["name"] or "<root>",
                r["value_type"],
                "string" if r["dtype"] is None else str(tuple(r["shape"])),
                r["dtype"] or "",
                r["storage_dtype"] or ("inline" if r["dtype"] else ""),
                str(r["nbytes"]),
                "" if r["chunk_shape"] is None else str(tuple(r["chunk_shape"])),
                r["sharding_text"] if r["sharding"] else "",
            ]
        )
    lines += ["  " + line for line in _table(rows)]
    t = report["totals"]
    lines.append(
        f"total: {t['leaves']} leaves ({t['arrays']} arrays, {t['scalars']} scalars, "
        f"{t['strings']} strings), {t['bytes']} bytes ({_human(t['bytes'])})"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# cat

_SLICE_PART = re.compile(r"^\s*(-?[0-9]+)?\s*(?::\s*(-?[0-9]+)?\s*(?::\s*(-?[0-9]+)?\s*)?)?$")


def parse_slice(text: str) -> tuple[Any, ...]:
    """``"0:4,:"`` -> ``(slice(0, 4), slice(None))``; ints, ``...``, steps and negatives."""
    out: list[Any] = []
    for part in text.split(","):
        part = part.strip()
        if part in ("...", "…"):
            out.append(Ellipsis)
            continue
        m = _SLICE_PART.match(part)
        if m is None or part == "":
            raise ValueError(f"not a slice: {part!r} in {text!r} (for example 0:4,:,2)")
        start, stop, step = (None if g is None else int(g) for g in m.groups())
        if ":" not in part:
            out.append(start)
        else:
            if step == 0:
                raise ValueError(f"slice step cannot be zero: {part!r}")
            out.append(slice(start, stop, step))
    return tuple(out)


def find_leaf(ckpt: Any, text: str) -> str:
    """The param name of the leaf `text` names: a param name or a ``/``-joined key path."""
    if text in ckpt:
        return text
    names: dict[str, str] = {}
    found: list[tuple[tuple[str, ...], Any]] = []
    _walk(ckpt.metadata, (), found)
    for key, meta in found:
        if not isinstance(meta, str):
            names["/".join(key)] = meta.param_name
    if text in names:
        return names[text]
    close = difflib.get_close_matches(text, list(ckpt.keys()) + list(names), n=5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise MissingDataError(f"{ckpt.path}: no leaf {text!r}{hint} (see `ockpt inspect`)")


def cat(
    path: Any,
    leaf: str,
    *,
    index: tuple[Any, ...] | None = None,
    step: int | None = None,
    item: str | None = None,
) -> tuple[str, Any]:
    """(param name, value) of one leaf, or of the region `index` of it."""
    from .reader import open as open_checkpoint

    ckpt = open_checkpoint(path, step=step, item=item)
    with ckpt:
        name = find_leaf(ckpt, leaf)
        value = ckpt[name]
        if isinstance(value, (str, bytes)):
            if index:
                raise ValueError(f"leaf {name!r} is a string; --slice applies to arrays")
            return name, value
        return name, np.asarray(value[index if index else ...])


def to_json_value(value: Any) -> Any:
    """Array values as JSON: nested lists; NaN and infinities as the strings "nan", "inf",
    "-inf"; complex numbers as [real, imag]; extended float types as their float value."""
    if isinstance(value, (str, bytes)):
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    arr = np.asarray(value)
    if arr.dtype.kind == "c":
        return _nested(arr, lambda z: [_float(z.real), _float(z.imag)])
    if arr.dtype.kind in "biu":
        return arr.tolist()
    if arr.dtype.kind == "b" or arr.dtype == np.bool_:
        return arr.tolist()
    try:
        as_float = arr.astype(np.float64)
    except (TypeError, ValueError):
        return arr.astype(np.int64).tolist()  # sub-byte integer types
    if arr.dtype.name.startswith(("int", "uint")):
        return arr.astype(np.int64).tolist()
    return _nested(as_float, _float)


def _float(x: Any) -> Any:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _nested(arr: np.ndarray, conv: Any) -> Any:
    if arr.ndim == 0:
        return conv(arr[()])
    return [_nested(a, conv) for a in arr]
