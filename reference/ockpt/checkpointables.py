"""`load_checkpointables`: every item of a step or v1 checkpoint, whatever handler wrote it.

Each item is read as spec/checkpointables.md says for the handler its step or v1 checkpoint
names (`_CHECKPOINT_METADATA.item_handlers`), or, where none is named, for what it holds:
pytree items as `load_pytree` gives them, one array saved alone (ArrayCheckpointHandler) as that
array, JSON items as Python values, random keys as keys or numpy random states. Items whose
files only their writer's code understands (protobuf messages, stateful checkpointables) are
refused by name (HANDLER-004). Paths resolve through `layout.resolve` like every other read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _jax
from .documents._json import parse_json
from .errors import (
    DocumentError,
    FormatError,
    MissingDataError,
    NotACheckpointError,
    TargetError,
    UnsupportedError,
)
from .layout import (
    ARRAY_HANDLER,
    JSON_HANDLERS,
    PROTO_HANDLERS,
    PYTREE_HANDLERS,
    RANDOM_KEY_HANDLERS,
    Kind,
    Layout,
    handler_class,
    resolve,
)
from .limits import current as limits_in_force
from .names import (
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    JAX_RANDOM_KEY_DIR,
    JAX_RANDOM_KEY_METADATA_DIR,
    NP_RANDOM_KEY_DIR,
    NP_RANDOM_KEY_METADATA_DIR,
)
from .random_keys import KEY_DATA_SHAPES, RandomKey
from .reader import load_pytree, pytree_metadata

if TYPE_CHECKING:
    import tensorstore as ts

    from .reader import CastPolicy

__all__ = ["load_checkpointables", "load_item", "read_json_item"]

#: The rule an item breaks when the handler that wrote it is one ockpt reads but the directory
#: does not hold what that handler writes.
_BROKEN = {
    **dict.fromkeys(JSON_HANDLERS | PROTO_HANDLERS, "HANDLER-001"),
    **dict.fromkeys(RANDOM_KEY_HANDLERS, "HANDLER-003"),
}

#: The implementation of typed key data by its last dimension, for the widths only one
#: implementation of the format's table has; a 4 is rbg or unsafe_rbg, which a JAX random-key
#: item does not tell apart (HANDLER-005).
_WIDTHS = [shape[-1] for shape in KEY_DATA_SHAPES.values()]
_KEY_IMPL_BY_DATA = {
    shape[-1]: impl for impl, shape in KEY_DATA_SHAPES.items() if _WIDTHS.count(shape[-1]) == 1
}


def load_checkpointables(
    path: Any,
    checkpointables: Mapping[str, Any] | Collection[str] | None = None,
    *,
    step: int | None = None,
    partial: bool = False,
    cast: CastPolicy = "exact",
    pad_or_truncate: bool = False,
    context: ts.Context | None = None,
    backend: str = "auto",
) -> dict[str, Any]:
    """Load the items (checkpointables) of a step, a v1 checkpoint, or one item directory.

    `path` may be a checkpoint-manager root (its latest committed step, or `step`), a step, a
    v1 checkpoint, or an item given directly (the result then has one entry, named after its
    directory). Without `checkpointables`, every item the checkpoint holds is loaded; with a
    collection of names, those; with a mapping name -> target, those, each pytree item with its
    target as `load_pytree` takes it (None: as saved; `partial`, `cast`, `pad_or_truncate`
    and `backend` apply to every pytree item).

    Values: pytree items as `load_pytree` gives them; an ArrayCheckpointHandler item as its
    one array; JSON items as Python values (``NaN`` and ``Infinity`` as floats); a JAX random
    key as a typed key array when jax is imported (else an `ockpt.random_keys.RandomKey`), or
    its raw uint32 data when it was saved raw; a numpy random state as the tuple of
    ``np.random.get_state()`` or the dict of ``bit_generator.state``. A protobuf or stateful
    item raises `UnsupportedError` naming it and its handler (HANDLER-004).
    """
    resolved = resolve(path, step=step, context=context, what="checkpoint")
    top = resolved.target
    if top.kind in (Kind.STEP, Kind.V1_CHECKPOINT):
        items = dict(top.checkpointables)
    else:
        items = {top.path.rstrip("/").rsplit("/", 1)[-1]: top}
    targets = _targets(top, items, checkpointables)
    out: dict[str, Any] = {}
    for name, target in targets.items():
        out[name] = load_item(
            items[name],
            target,
            name=name,
            partial=partial,
            cast=cast,
            pad_or_truncate=pad_or_truncate,
            context=context,
            backend=backend,
        )
    return out


def _targets(
    top: Layout, items: Mapping[str, Layout], asked: Mapping[str, Any] | Collection[str] | None
) -> dict[str, Any]:
    """Item name -> target of each item to load. By default every item, stray directories that
    no handler names and that are no item aside (directories §4: a reader may ignore them)."""
    if asked is None:
        for problem in top.problems:  # an item the handlers name is missing: not a whole load
            if problem.rule == "LAYOUT-003":
                raise MissingDataError(problem.message, rule="LAYOUT-003", file=top.path)
        return {
            n: None
            for n, c in items.items()
            if c.kind is not Kind.UNKNOWN_ITEM or c.handler is not None
        }
    if isinstance(asked, str):
        raise TypeError("checkpointables must be a collection of names or a mapping, not a str")
    wanted = dict(asked) if isinstance(asked, Mapping) else dict.fromkeys(asked)
    missing = sorted(set(wanted) - set(items))
    if missing:
        raise NotACheckpointError(
            f"no item {', '.join(map(repr, missing))}; items: {sorted(items)}",
            rule="LOAD-052",
            file=top.path,
        )
    return wanted


def load_item(
    layout: Layout,
    target: Any = None,
    *,
    name: str,
    partial: bool = False,
    cast: CastPolicy = "exact",
    pad_or_truncate: bool = False,
    context: ts.Context | None = None,
    backend: str = "auto",
) -> Any:
    """The value of one item (a `Layout` of a step or v1 checkpoint, or given directly)."""
    cls = handler_class(layout.handler)
    if layout.kind is Kind.PYTREE_ITEM:
        options = {
            "partial": partial,
            "cast": cast,
            "pad_or_truncate": pad_or_truncate,
            "context": context,
            "backend": backend,
        }
        if cls == ARRAY_HANDLER:
            return _single_leaf(layout, target, options)
        return load_pytree(layout.location, target, **options)
    if target is not None:
        raise TargetError(
            f"item {name!r} is a {layout.kind.value}: only pytree items take a target",
            file=layout.path,
        )
    if layout.kind is Kind.JSON_ITEM:
        return read_json_item(layout)
    if layout.kind is Kind.RANDOM_KEY_ITEM:
        return _random_key(layout, name, context=context, backend=backend)
    writer = f"written by {cls}" if cls else "no handler named"
    if layout.kind is Kind.PROTO_ITEM:
        raise UnsupportedError(
            f"item {name!r} ({writer}) is a protobuf message in text format, which ockpt does "
            "not read: it needs the message type (parse the file with "
            "google.protobuf.text_format)",
            rule="HANDLER-004",
            file=layout.path,
        )
    broken = _BROKEN.get(cls or "")
    if broken is not None:  # a handler ockpt reads, but the item is not what it writes
        raise FormatError(f"item {name!r}: {layout.reason}", rule=broken, file=layout.path)
    if cls in PYTREE_HANDLERS:
        raise NotACheckpointError(
            f"item {name!r} is not a pytree item: {layout.reason}",
            rule="LOAD-050",
            file=layout.path,
        )
    if cls is not None:
        raise UnsupportedError(
            f"item {name!r}: {layout.reason}",  # the reason names the handler
            rule="HANDLER-004",
            file=layout.path,
        )
    raise NotACheckpointError(
        f"item {name!r} is no item ockpt can type: {layout.reason}",
        rule="LOAD-050",
        file=layout.path,
    )


def _single_leaf(layout: Layout, target: Any, options: dict[str, Any]) -> Any:
    """The one leaf of an item that holds a single array (ArrayCheckpointHandler); `target`,
    when given, is that leaf's target."""
    if target is None:
        saved = load_pytree(layout.location, **options)
        return saved[_only_key(layout, saved)]
    meta = pytree_metadata(layout.location, context=options["context"], backend=options["backend"])
    key = _only_key(layout, meta)
    return load_pytree(layout.location, {key: target}, **options)[key]


def _only_key(layout: Layout, tree: Any) -> Any:
    if not isinstance(tree, dict) or len(tree) != 1:
        raise FormatError(
            "an item of one array saved alone must hold exactly one leaf, found "
            + (f"{len(tree)} top-level keys" if isinstance(tree, dict) else type(tree).__name__),
            rule="HANDLER-002",
            file=layout.path,
        )
    (key,) = tree
    return key


def read_json_item(layout: Layout) -> Any:
    """The value of a JSON item's one file (checkpointables §4): bounded (JSON-003), parsed
    strictly but for ``NaN`` / ``Infinity``, which Python's `json` writes."""
    loc = layout.location
    assert loc is not None
    listing = loc.list_dir()
    files = (listing.files | listing.other) - {COMMIT_FILE, CHECKPOINT_METADATA_FILE}
    if len(files) != 1 or listing.dirs:
        raise FormatError(
            f"a JSON item must hold exactly one file besides {COMMIT_FILE}, found "
            f"{sorted(files)}"
            + (f" and directories {sorted(listing.dirs)}" if listing.dirs else ""),
            rule="HANDLER-001",
            file=layout.path,
        )
    (file_name,) = files
    data = loc.get(file_name, limit=limits_in_force().max_json_bytes, rule="JSON-003")
    if data is None:
        raise NotACheckpointError("removed meanwhile", rule="LOAD-055", file=loc.file(file_name))
    return parse_json(data, file=loc.file(file_name), constants=True)


def _random_key(layout: Layout, name: str, **options: Any) -> Any:
    """A JAX random key or a numpy random state (checkpointables §4)."""
    parts = layout.checkpointables
    jax_key = JAX_RANDOM_KEY_DIR in parts
    data_name, meta_name = (
        (JAX_RANDOM_KEY_DIR, JAX_RANDOM_KEY_METADATA_DIR)
        if jax_key
        else (NP_RANDOM_KEY_DIR, NP_RANDOM_KEY_METADATA_DIR)
    )
    data_part, meta_part = parts.get(data_name), parts.get(meta_name)
    if (
        data_part is None
        or meta_part is None
        or data_part.kind is not Kind.PYTREE_ITEM
        or meta_part.kind is not Kind.JSON_ITEM
    ):
        raise FormatError(
            f"item {name!r}: a random-key item holds a pytree item {data_name}/ and a JSON item "
            f"{meta_name}/",
            rule="HANDLER-003",
            file=layout.path,
        )
    flag = "typed" if jax_key else "legacy"
    meta = read_json_item(meta_part)
    if not isinstance(meta, dict) or not isinstance(meta.get(flag), bool):
        raise DocumentError(
            f"must be an object with the boolean {flag!r}",
            rule="HANDLER-003",
            file=meta_part.path,
            pointer=f"/{flag}",
        )
    saved = load_pytree(data_part.location, **options)
    if not jax_key:
        state = _python_scalars(saved)
        return tuple(state) if meta[flag] else state
    data = saved[_only_key(data_part, saved)]
    parts = _jax.key_parts(data)  # array_metadatas may record the key (a typed key already)
    data = np.asarray(data.data if isinstance(data, RandomKey) else parts[1] if parts else data)
    if not meta[flag]:
        return data
    impl = _KEY_IMPL_BY_DATA.get(data.shape[-1] if data.ndim else 0)
    if data.dtype != np.uint32 or impl is None:
        raise UnsupportedError(
            f"item {name!r}: typed key data {data.dtype} {list(data.shape)} does not tell its "
            "implementation (a last dimension of 4 is rbg or unsafe_rbg, which "
            "JaxRandomKeyCheckpointHandler does not record); load the raw data with "
            f"load_pytree({data_part.path!r}) and wrap it with jax.random.wrap_key_data",
            rule="HANDLER-005",
            file=layout.path,
        )
    return _jax.wrap_key(data, impl) if _jax.jax_loaded() else RandomKey(impl, data)


def _python_scalars(node: Any) -> Any:
    """`node` with numpy scalars as Python scalars (as ``np.random.set_state`` takes them)."""
    if isinstance(node, dict):
        return {k: _python_scalars(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_python_scalars(v) for v in node]
    if isinstance(node, np.generic):
        return node.item()
    return node
