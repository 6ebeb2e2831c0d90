"""A step manager whose directories are those of Orbax's `CheckpointManager`, both ways.

Layout (spec/directories.md §5): ``<root>/<step>/`` (or ``<prefix>_<step>``, optionally
zero-padded), each step holding ``_CHECKPOINT_METADATA``, ``commit_success.txt`` and one
subdirectory per item (``default/`` for a single unnamed pytree); root metadata in
``<root>/metadata/_ROOT_METADATA``. The root is any `store.Store`; steps are committed the way
it allows (`Store.begin`: a rename, or ``commit_success.txt`` last); a directory with a
temporary name is never a step.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

from .checkpointables import read_json_item
from .documents import RootMetadata
from .errors import NotACheckpointError, OckptWarning, WriteConflictError
from .layout import Kind, detect, is_temporary_name, parse_step_name, scan_steps
from .names import (
    DEFAULT_ITEM,
    REPLACED_SUFFIX,
    ROOT_METADATA_DIR,
    ROOT_METADATA_FILE,
)
from .reader import CastPolicy, load_pytree
from .save_options import SaveOptions, from_keywords
from .store import Store, as_store
from .writer import plan_save

__all__ = ["CheckpointManager", "DEFAULT_ITEM"]


class CheckpointManager:
    """Save and restore numbered steps under `root`.

    Args:
        root: the manager root directory (created on the first save): a path, a URL or a
            `store.Store`.
        max_to_keep: keep at most this many committed steps (the newest); None keeps all.
        save_interval_steps: `save` writes a step only when ``step % save_interval_steps == 0``
            (unless ``force=True``).
        step_prefix: name steps ``<prefix>_<step>``.
        step_format_fixed_length: zero-pad step numbers to this width.
        metadata: a JSON object written once to ``metadata/_ROOT_METADATA`` (custom_metadata).
        options: the storage options of every save (`SaveOptions`; its defaults when None).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | Store,
        *,
        max_to_keep: int | None = None,
        save_interval_steps: int = 1,
        step_prefix: str | None = None,
        step_format_fixed_length: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        options: SaveOptions | None = None,
    ) -> None:
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"max_to_keep must be a positive int or None, got {max_to_keep!r}")
        if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
            raise ValueError(
                f"save_interval_steps must be a positive int, got {save_interval_steps}"
            )
        if step_prefix is not None and (not step_prefix or "/" in step_prefix):
            raise ValueError(f"invalid step_prefix {step_prefix!r}")
        self.store = as_store(root)
        self.root = self.store.display
        self.max_to_keep = max_to_keep
        self.save_interval_steps = save_interval_steps
        self.step_prefix = step_prefix
        self.step_format_fixed_length = step_format_fixed_length
        self._metadata = None if metadata is None else dict(metadata)
        self._save_options = from_keywords(options)
        if self._metadata is not None:
            json.dumps(self._metadata, allow_nan=False)  # refuse non-JSON early
        left = self.temporaries()
        if left:  # an earlier save or delete was interrupted: say so, touch nothing
            present = self.store.list_dir().names
            parked = [
                p
                for p in left
                if p.endswith(REPLACED_SUFFIX)
                and os.path.basename(p[: -len(REPLACED_SUFFIX)]) not in present
            ]
            note = (
                f"; {len(parked)} of them hold the only copy of a step an interrupted overwrite "
                f"left aside ({os.path.basename(parked[0])}), which remove_temporaries() "
                "renames back [DIR-007]"
                if parked
                else ""
            )
            warnings.warn(
                f"{self.root}: {len(left)} temporary director{'y' if len(left) == 1 else 'ies'} "
                f"of unfinished saves or deletes ({os.path.basename(left[0])}, ...); they are "
                f"not steps; remove_temporaries() removes them{note}",
                OckptWarning,
                stacklevel=2,
            )

    # -- names ------------------------------------------------------------------------------

    def _step_name(self, step: int) -> str:
        text = str(step)
        if self.step_format_fixed_length:
            text = text.zfill(self.step_format_fixed_length)
        return f"{self.step_prefix}_{text}" if self.step_prefix else text

    def _steps(self) -> dict[int, str]:
        """Committed step -> directory name, of this manager's prefix (`layout.scan_steps`,
        as every reader sees them; a step removed meanwhile is absent, LOAD-055)."""
        out: dict[int, str] = {}
        for step in scan_steps(self.store):
            parsed = parse_step_name(step.name)
            if step.committed and parsed is not None and parsed[0] == self.step_prefix:
                out.setdefault(step.step, step.name)
        return out

    def temporaries(self) -> list[str]:
        """Paths under the root left by saves or deletes that did not finish (names carrying
        the temporary marker: ``<step>.orbax-checkpoint-tmp``, ``…-deleted``, ``…-replaced``,
        and temporary files of the root metadata). They are never steps (LOAD-054), even a
        ``…-replaced`` whose step is missing (see `remove_temporaries`)."""
        out = []
        for base in (self.store, self.store.child(ROOT_METADATA_DIR)):
            names = base.list_dir().names  # empty when it does not exist
            out += [base.file(n) for n in names if is_temporary_name(n)]
        return sorted(out)

    def remove_temporaries(self) -> list[str]:
        """Remove what `temporaries` lists and return it. Committed steps are not touched.

        A ``<step>.orbax-checkpoint-tmp-replaced`` directory whose step is missing is the only
        copy of that step, left by an interrupted overwrite: it is renamed back to the step,
        not removed (DIR-007). The temporary directory of an ockpt save still running (in
        any process) is left alone (DIR-003); one of another writer (Orbax) cannot be told
        from a leftover: call this only when no other program is saving under this root."""
        found = []
        for base in (self.store, self.store.child(ROOT_METADATA_DIR)):
            names = [n for n in base.list_dir().names if is_temporary_name(n)]
            found += base.remove_temporaries(names) if names else []
        return sorted(found)

    def step_path(self, step: int) -> str:
        """The directory of a committed step (as the root's store names it)."""
        return self._step(step).display

    def _step(self, step: int) -> Store:
        steps = self._steps()
        if step not in steps:
            raise NotACheckpointError(f"no committed step {step}", rule="LOAD-053", file=self.root)
        return self.store.child(steps[step])

    # -- queries ----------------------------------------------------------------------------

    def all_steps(self) -> list[int]:
        """Committed steps, ascending."""
        return sorted(self._steps())

    def latest_step(self) -> int | None:
        steps = self._steps()
        return max(steps) if steps else None

    def should_save(self, step: int) -> bool:
        return step % self.save_interval_steps == 0 and step not in self._steps()

    def metadata(self) -> Mapping[str, Any] | None:
        """The root's custom metadata (`metadata/_ROOT_METADATA`), or None."""
        data = self.store.get(ROOT_METADATA_FILE)
        if data is None:
            return None
        custom = RootMetadata.from_bytes(data, file=self.store.file(ROOT_METADATA_FILE))
        custom = custom.custom_metadata
        return custom if isinstance(custom, Mapping) else None

    # -- save / restore / delete ------------------------------------------------------------

    def save(
        self,
        step: int,
        tree: Any = None,
        *,
        items: Mapping[str, Any] | None = None,
        force: bool = False,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Save one step: `tree` as the item ``default``, or several named `items` (pytrees or
        `JsonItem`). Returns False when the interval policy skips the step.

        Raises WriteConflictError when the step exists already.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        if (tree is None) == (items is None):
            raise ValueError("pass exactly one of tree and items")
        if not force and step % self.save_interval_steps != 0:
            return False
        if step in (steps := self._steps()):
            raise WriteConflictError(
                f"step {step} exists already",
                rule="DIR-002",
                file=self.store.child(steps[step]).display,
            )
        parts = {DEFAULT_ITEM: tree} if items is None else dict(items)
        save = plan_save(
            self.store.child(self._step_name(step)),
            parts,
            layout="step",
            overwrite=False,
            custom_metadata=custom_metadata,
            copy=False,
            options=self._save_options,
        )
        if save.job.primary:
            self._write_root_metadata()
        save.save()
        if save.job.primary:
            self._collect()
        return True

    def _write_root_metadata(self) -> None:
        if self._metadata is None or self.store.exists(ROOT_METADATA_FILE):
            return
        doc = RootMetadata(internal_metadata={}, custom_metadata=self._metadata)
        self.store.replace(ROOT_METADATA_FILE, doc.to_bytes())

    def _collect(self) -> None:
        if self.max_to_keep is None:
            return
        steps = sorted(self._steps())
        for step in steps[: max(0, len(steps) - self.max_to_keep)]:
            try:
                self.delete(step)
            except NotACheckpointError:
                pass  # another manager of this root deleted it meanwhile

    def delete(self, step: int) -> None:
        """Delete a committed step: renamed to a temporary name first, so a reader never sees
        it half deleted (DIR-005)."""
        found = self._step(step)
        if not found.remove_committed():
            raise NotACheckpointError(
                f"step {step} was removed meanwhile", rule="LOAD-055", file=found.display
            )

    def restore(
        self,
        step: int | None = None,
        target: Any = None,
        *,
        item: str | None = None,
        partial: bool = False,
        cast: CastPolicy = "exact",
        pad_or_truncate: bool = False,
        backend: str = "auto",
    ) -> Any:
        """Load one item of a step (the latest by default) with `ockpt.load_pytree`.

        `item` defaults to ``default``, or to the only item of the step. A JSON item returns
        its JSON value.
        """
        if step is None:
            step = self.latest_step()
            if step is None:
                raise NotACheckpointError("no committed step", rule="LOAD-053", file=self.root)
        path = self._step(step)
        layout = detect(path)
        if layout.kind is not Kind.STEP:  # removed since it was listed
            raise NotACheckpointError(
                f"step {step} was removed meanwhile", rule="LOAD-055", file=path.display
            )
        items = layout.checkpointables
        if item is None:
            item = DEFAULT_ITEM if DEFAULT_ITEM in items or len(items) != 1 else next(iter(items))
        chosen = items.get(item)
        if chosen is not None and chosen.kind is Kind.JSON_ITEM:
            return read_json_item(chosen)
        return load_pytree(
            path,
            target,
            item=item,
            partial=partial,
            cast=cast,
            pad_or_truncate=pad_or_truncate,
            backend=backend,
        )

    def close(self) -> None:
        """Nothing to flush: every save is committed before `save` returns."""

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
