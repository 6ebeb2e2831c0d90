"""`_CHECKPOINT_METADATA` (per item or step) and `metadata/_ROOT_METADATA` (per manager root).

Releases up to 0.11.0 write only the two timestamps; 0.11.1+ adds handler names, metrics and
user metadata (`custom` up to 0.11.7, `custom_metadata` from 0.11.8). Handler names are data:
ockpt never imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..names import CHECKPOINT_METADATA_FILE, ROOT_METADATA_FILE
from ._base import Document
from ._json import ABSENT, child, expect, expect_object

__all__ = ["CheckpointMetadata", "RootMetadata"]


def _optional(
    rest: dict[str, Any], key: str, kind: type | tuple[type, ...], *, file: str, rule: str
) -> Any:
    """Pop an optional field, checking its type unless it is absent or null."""
    value = rest.pop(key, ABSENT)
    if value is not ABSENT and value is not None:
        expect(value, kind, file=file, pointer="/" + key, rule=rule)
    return value


def _emit(out: dict[str, Any], doc: Any, names: tuple[str, ...]) -> dict[str, Any]:
    for name in names:
        value = getattr(doc, name)
        if value is not ABSENT:
            out[name] = value
    out.update(doc.extra)
    return out


@dataclass(frozen=True, kw_only=True)
class CheckpointMetadata(Document):
    """The parsed `_CHECKPOINT_METADATA` of an item directory, a step or a v1 checkpoint.

    `item_handlers` is one handler name (single item) or a map item name -> handler name
    (a step of a checkpoint manager, a v1 checkpoint).
    """

    FILE_NAME: ClassVar[str] = CHECKPOINT_METADATA_FILE

    item_handlers: str | Mapping[str, str] | None | Any = ABSENT
    metrics: Mapping[str, Any] | None | Any = ABSENT
    performance_metrics: Mapping[str, Any] | None | Any = ABSENT
    init_timestamp_nsecs: int | None | Any = ABSENT
    commit_timestamp_nsecs: int | None | Any = ABSENT
    custom_metadata: Mapping[str, Any] | None | Any = ABSENT
    extra: Mapping[str, Any] = field(default_factory=dict)

    _FIELDS = (
        "item_handlers",
        "metrics",
        "performance_metrics",
        "init_timestamp_nsecs",
        "commit_timestamp_nsecs",
        "custom_metadata",
    )

    @classmethod
    def from_json(cls, obj: Any, *, file: str = CHECKPOINT_METADATA_FILE) -> CheckpointMetadata:
        rest = dict(expect_object(obj, file=file, pointer="", rule="CKPT-001"))
        handlers = _optional(rest, "item_handlers", (str, dict), file=file, rule="CKPT-001")
        if isinstance(handlers, dict):
            for name, value in handlers.items():
                if value is not None:
                    expect(
                        value,
                        str,
                        file=file,
                        pointer=child("/item_handlers", name),
                        rule="CKPT-001",
                    )
        values = {
            "item_handlers": handlers,
            "metrics": _optional(rest, "metrics", dict, file=file, rule="CKPT-001"),
            "performance_metrics": _optional(
                rest, "performance_metrics", dict, file=file, rule="CKPT-001"
            ),
            "init_timestamp_nsecs": _optional(
                rest, "init_timestamp_nsecs", int, file=file, rule="CKPT-001"
            ),
            "commit_timestamp_nsecs": _optional(
                rest, "commit_timestamp_nsecs", int, file=file, rule="CKPT-001"
            ),
            "custom_metadata": _optional(rest, "custom_metadata", dict, file=file, rule="CKPT-001"),
        }
        custom = rest.get("custom")  # 0.11.1 to 0.11.7: the user metadata's earlier name
        if custom is not None:
            expect(custom, dict, file=file, pointer="/custom", rule="CKPT-001")
        return cls(**values, extra=rest)

    def to_json(self) -> dict[str, Any]:
        return _emit({}, self, self._FIELDS)

    @property
    def user_metadata(self) -> Mapping[str, Any] | None:
        """The user metadata: `custom_metadata`, or `custom` as 0.11.1 to 0.11.7 name it
        (json-documents §3); None when the document has neither."""
        for value in (self.custom_metadata, self.extra.get("custom", ABSENT)):
            if value is not ABSENT and value is not None:
                return value
        return None

    @property
    def item_names(self) -> tuple[str, ...] | None:
        """Names of the items (checkpointables) a step or v1 checkpoint says it holds."""
        if isinstance(self.item_handlers, Mapping):
            return tuple(self.item_handlers)
        return None


@dataclass(frozen=True, kw_only=True)
class RootMetadata(Document):
    """The parsed `metadata/_ROOT_METADATA` of a checkpoint-manager root (0.10+)."""

    FILE_NAME: ClassVar[str] = ROOT_METADATA_FILE

    internal_metadata: Mapping[str, Any] | None | Any = ABSENT
    custom_metadata: Mapping[str, Any] | None | Any = ABSENT
    extra: Mapping[str, Any] = field(default_factory=dict)

    _FIELDS = ("internal_metadata", "custom_metadata")

    @classmethod
    def from_json(cls, obj: Any, *, file: str = ROOT_METADATA_FILE) -> RootMetadata:
        rest = dict(expect_object(obj, file=file, pointer="", rule="ROOT-001"))
        values = {
            name: _optional(rest, name, dict, file=file, rule="ROOT-001") for name in cls._FIELDS
        }
        return cls(**values, extra=rest)

    def to_json(self) -> dict[str, Any]:
        return _emit({}, self, self._FIELDS)
