"""``ockpt ls``: what a checkpoint path holds, as a tree of entries with commit state and times.

A view of `layout.detect` (the one resolver): the same kinds, steps and commit state that
every reader sees. A manager root lists each step with its items; where saves rename (local
paths, ``file://``, ``memory://``) a step is committed when its name is not a temporary one
(LAYOUT-001), on object stores only once it holds ``commit_success.txt``.
Reads only directory listings and the small ``_CHECKPOINT_METADATA`` documents.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .layout import Kind, Layout, ManagerRootLayout, Step, detect_step, handler_class, select

if TYPE_CHECKING:
    import tensorstore as ts

__all__ = ["Entry", "describe", "step_entry", "format_time"]


@dataclass(frozen=True)
class Entry:
    """One directory of a checkpoint: what it is (a `layout.Kind` value), whether it is
    committed, and its parts (the steps of a manager root, the items of a step or v1
    checkpoint). Times are ``_CHECKPOINT_METADATA``'s, in ns."""

    name: str
    path: str
    kind: str
    committed: bool
    has_commit_file: bool
    step: int | None = None
    storage: str | None = None
    handler: str | None = None  # the class that wrote an item (`item_handlers`), when named
    init_time_ns: int | None = None
    commit_time_ns: int | None = None
    children: tuple[Entry, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "committed": self.committed,
            "has_commit_file": self.has_commit_file,
        }
        for key in ("step", "storage", "handler", "init_time_ns", "commit_time_ns"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.commit_time_ns is not None:
            out["commit_time"] = format_time(self.commit_time_ns)
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        return out


def format_time(ns: int | None) -> str:
    if ns is None:
        return "-"
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _entry(
    layout: Layout,
    *,
    name: str,
    step: Step | None = None,
    children: tuple[Entry, ...] | None = None,
) -> Entry:
    """The entry of `layout`; its children are its items unless given (a root's steps)."""
    committed = layout.committed and (step is None or step.committed)
    if children is None:
        children = tuple(_entry(c, name=n) for n, c in layout.checkpointables.items())
    return Entry(
        name=name,
        path=layout.path,
        kind=layout.kind.value,
        committed=committed,
        has_commit_file=layout.has_commit_file,
        step=None if step is None else step.step,
        storage=None if layout.item is None else layout.item.storage.value,
        handler=handler_class(layout.handler),
        init_time_ns=layout.init_time_ns,
        commit_time_ns=layout.commit_time_ns,
        children=children,
    )


def step_entry(root: ManagerRootLayout, step: Step) -> Entry:
    """The entry of one step of the manager root `root`, with its items."""
    return _entry(detect_step(root, step), name=step.name, step=step)


def describe(path: Any, *, context: ts.Context | None = None) -> Entry:
    """Describe a checkpoint path (local or URL): its kind, steps or items, commit state.
    Raises `PathNotFoundError` for a missing path."""
    top = select(path, context=context).top
    name = top.path.rstrip("/").rsplit("/", 1)[-1]
    steps = None
    if top.kind is Kind.MANAGER_ROOT:
        steps = tuple(step_entry(top, s) for s in top.steps)
    return _entry(top, name=name, children=steps)
