"""``ockpt inspect`` and ``ockpt cat``: what a checkpoint holds, and the values of one leaf.

Both read documents and array metadata only, except `cat`, which reads the chunks its slice
touches. Paths may be local or kvstore URLs; a checkpoint-manager root reads its latest
committed step unless a step is given (`layout.resolve`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from . import _jax, listing
from .checkpointables import load_item
from .documents.sharding import NamedShardingSpec, SingleDeviceShardingSpec
from .layout import Kind, Layout, Resolved, handler_class, resolve
from .paths import leaf_name, printable
from .random_keys import RandomKey

__all__ = [
    "inspect",
    "item_report",
    "format_inspect",
    "parse_slice",
    "cat",
    "cat_item",
    "item_json",
    "to_json_value",
]


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
        return {"key": list(key), "name": leaf_name(key), "value_type": meta}
    impl = meta.random_key_impl  # a typed PRNG key loads as a key, its data stored as uint32
    return {
        "key": list(key),
        "name": leaf_name(key),
        "param_name": meta.param_name,
        "value_type": meta.value_type,
        "shape": list(meta.shape),
        "dtype": f"key<{impl}>" if impl else None if meta.dtype is None else str(meta.dtype),
        "random_key_impl": impl,
        "key_shape": None if meta.key_shape is None else list(meta.key_shape),
        "storage_dtype": None if meta.storage_dtype is None else str(meta.storage_dtype),
        "nbytes": int(meta.nbytes),
        "chunk_shape": None if meta.chunk_shape is None else list(meta.chunk_shape),
        "write_shape": None if meta.write_shape is None else list(meta.write_shape),
        "sharding": _sharding_json(meta.sharding),
        "sharding_text": _sharding_text(meta.sharding),
    }


def inspect(path: Any, *, step: int | None = None, item: str | None = None) -> dict[str, Any]:
    """A JSON-able report: the checkpoint's kind, steps or items, and one row per leaf with
    shape, dtype (as loaded and as stored), bytes, chunk shape and saved sharding; totals.
    For an item that is no pytree (a JSON, random-key or proto item): what it is, its handler
    and, where ockpt reads it, its value (`item_report`)."""
    from .reader import open as open_checkpoint

    chosen = resolve(path, step=step, item=item, what="item")
    if chosen.target.kind is not Kind.PYTREE_ITEM:
        return item_report(path, chosen)
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
            "zero_d_arrays": sum(1 for r in leaves if r["dtype"] is not None and not r["shape"]),
            "strings": sum(1 for r in leaves if r["dtype"] is None),
            "empty_nodes": len(rows) - len(leaves),
            "bytes": sum(r["nbytes"] for r in leaves),
            "bytes_by_dtype": dict(sorted(by_dtype.items())),
        },
    }
    return _with_context(report, resolved)


def _with_context(report: dict[str, Any], resolved: Resolved) -> dict[str, Any]:
    """`report` with the steps of the manager root and the items of the step or v1 checkpoint
    the item was chosen from, each item with the handler that wrote it."""
    if resolved.step is not None:
        top = resolved.top
        report["steps"] = [listing.step_entry(top, s).to_json() for s in top.steps]
        report["step"] = resolved.step.step
    if resolved.container is not None:
        items = resolved.container.checkpointables
        report["items"] = [
            {"name": n, "kind": c.kind.value, "handler": handler_class(c.handler)}
            for n, c in items.items()
        ]
    return report


def item_report(path: Any, resolved: Resolved) -> dict[str, Any]:
    """The `inspect` report of an item that is no pytree: its kind, handler and why it is that
    kind; the value of a JSON or random-key item (bounded reads); proto and unknown items are
    described, not read (HANDLER-004)."""
    target = resolved.target
    report: dict[str, Any] = {
        "path": str(path),
        "kind": resolved.top.kind.value,
        "item_path": target.path,
        "item_kind": target.kind.value,
        "handler": target.handler,
        "reason": target.reason,
    }
    if target.kind in (Kind.JSON_ITEM, Kind.RANDOM_KEY_ITEM):
        report["value"] = item_json(load_item(target, name=_item_name(target)))
    return _with_context(report, resolved)


def _item_name(layout: Layout) -> str:
    return layout.path.rstrip("/").rsplit("/", 1)[-1]


def item_json(value: Any) -> Any:
    """The value of an item that is no pytree as JSON: JSON values as they are, arrays as
    `to_json_value` gives them, a random key as its implementation and key data."""
    if isinstance(value, dict):
        return {str(k): item_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [item_json(v) for v in value]
    if isinstance(value, RandomKey):
        return {"random_key_impl": value.impl, "key_data": to_json_value(value.data)}
    key = _jax.key_parts(value)  # a typed jax key array (jax loaded by the caller)
    if key is not None:
        return {"random_key_impl": key[0], "key_data": to_json_value(np.asarray(key[1]))}
    if isinstance(value, (np.ndarray, np.generic)):
        return to_json_value(value)
    return value


def cat_item(
    path: Any, *, step: int | None = None, item: str | None = None
) -> tuple[str, str, Any] | None:
    """(item name, kind, value as `item_json`) of the item `path`, `step` and `item` lead to
    when it is no pytree (a JSON or random-key item; a proto or unknown item raises by name,
    HANDLER-004); None for a pytree item, whose leaves `cat` reads."""
    target = resolve(path, step=step, item=item, what="item").target
    if target.kind is Kind.PYTREE_ITEM:
        return None
    name = _item_name(target)
    return name, target.kind.value, item_json(load_item(target, name=name))


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
    lines = [f"{printable(report['path'])}: {report['kind']}"]
    for s in report.get("steps", []):
        state = "committed" if s["committed"] else "UNCOMMITTED"
        when = s.get("commit_time", "-")
        mark = "  <- shown" if s.get("step") == report.get("step") and s["committed"] else ""
        lines.append(f"  step {printable(str(s.get('step', s['name'])))}: {state}  {when}{mark}")
    for it in report.get("items", []):
        by = f" ({it['handler']})" if it.get("handler") else ""
        lines.append(f"  item {printable(it['name'])}: {it['kind']}{by}")
    if "leaves" not in report:  # an item that is no pytree
        lines.append(f"item {printable(report['item_path'])}: {report['item_kind']}")
        lines.append(f"  {report['reason']}")
        if report["handler"]:
            lines.append(f"  handler: {report['handler']}")
        if "value" in report:
            text = json.dumps(report["value"], indent=2, ensure_ascii=False)
            lines += ["  " + line for line in text.splitlines()]
        return "\n".join(lines)
    lines.append(f"item {printable(report['item_path'])}:")
    head = ["leaf", "type", "shape", "dtype", "stored", "bytes", "chunks", "sharding"]
    rows = [head]
    for r in report["leaves"]:
        if "nbytes" not in r:
            rows.append([printable(r["name"]) or "<root>", r["value_type"], "", "", "", "", "", ""])
            continue
        rows.append(
            [
                printable(r["name"]) or "<root>",
                r["value_type"],
                "string"
                if r["dtype"] is None
                else str(tuple(r["key_shape"] if r["key_shape"] is not None else r["shape"])),
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
        f"total: {t['leaves']} leaves ({t['arrays']} arrays, {t['zero_d_arrays']} 0-d arrays, "
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


def cat(
    path: Any,
    leaf: str,
    *,
    index: tuple[Any, ...] | None = None,
    step: int | None = None,
    item: str | None = None,
) -> tuple[str, Any]:
    """(leaf name, value) of the leaf that `leaf` names (a leaf name, or a param name: spec
    key-paths §7.3), or of the region `index` of it."""
    from .reader import Subtree
    from .reader import open as open_checkpoint

    ckpt = open_checkpoint(path, step=step, item=item)
    with ckpt:
        name = leaf_name(ckpt.find(leaf))
        value = ckpt[leaf]
        if isinstance(value, Subtree):
            prefix = f"{value.name}/" if value.name else ""
            shown = ", ".join(repr(prefix + k) for k in value.keys()[:3])
            more = ", ..." if len(value) > 3 else ""
            raise ValueError(
                f"{leaf!r} names a subtree of {len(value)} leaves ({shown}{more}), not one leaf"
            )
        if isinstance(value, (str, bytes)):
            if index:
                raise ValueError(f"leaf {name!r} is a string; a slice applies to arrays only")
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
