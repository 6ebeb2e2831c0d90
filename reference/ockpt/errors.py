"""The one exception family of ockpt.

Every failure caused by the bytes of a checkpoint is a `FormatError` (or one of its per-layer
subclasses) that names the file, the key inside it, the rule of the spec it breaks, and what was
expected versus found. Callers catch `OckptError` to catch everything ockpt raises on purpose.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "OckptError",
    "NotACheckpointError",
    "FormatError",
    "DocumentError",
    "MsgpackError",
    "ZarrFormatError",
    "OcdbtError",
    "MissingDataError",
    "UnsupportedError",
    "WriteConflictError",
    "TargetError",
    "OckptWarning",
]

_UNSET = object()
_TRAILING_RULE = re.compile(r"\s*\[([A-Z]+(?:-[A-Z]+)*-[0-9]{3})\]$")


class OckptError(Exception):
    """Base class of every error ockpt raises on purpose."""


class NotACheckpointError(OckptError, FileNotFoundError):
    """The path does not hold an Orbax checkpoint (or the part of one that was asked for)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FormatError(OckptError, ValueError):
    """Bytes or a document break the format.

    Attributes:
        rule: the spec rule id the input breaks (e.g. ``META-003``), or None.
        file: the path of the offending file, relative or absolute, or None.
        pointer: where inside the file: a JSON pointer, a key, or ``@offset``.
        expected, got: what the rule asks for and what was found, when meaningful.
    """

    def __init__(
        self,
        message: str,
        *,
        rule: str | None = None,
        file: object = None,
        pointer: str | None = None,
        expected: object = _UNSET,
        got: object = _UNSET,
    ) -> None:
        self.message = message
        self.rule = rule
        self.file = None if file is None else str(file)
        self.pointer = pointer
        self.expected = None if expected is _UNSET else expected
        self.got = None if got is _UNSET else got
        self._has_expected = expected is not _UNSET
        self._has_got = got is not _UNSET
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.file or ""
        if self.pointer not in (None, ""):
            where += f" at {self.pointer}" if where else f"at {self.pointer}"
        text = f"{where}: {self.message}" if where else self.message
        details = []
        if self._has_expected:
            details.append(f"expected {self.expected!r}")
        if self._has_got:
            details.append(f"got {self.got!r}")
        if details:
            text += f" ({', '.join(details)})"
        if self.rule:
            text += f" [{self.rule}]"
        return text

    def __str__(self) -> str:
        return self._render()


class DocumentError(FormatError):
    """A JSON document (`_METADATA`, `_sharding`, ...) is malformed or breaks its schema."""


class MsgpackError(FormatError):
    """The legacy msgpack `checkpoint` file is malformed."""


class ZarrFormatError(FormatError):
    """Zarr array metadata or chunk bytes are malformed."""


class OcdbtError(FormatError):
    """An OCDBT manifest, node or value reference is malformed."""


class MissingDataError(FormatError, KeyError):
    """A leaf, chunk or file that the checkpoint promises is absent.

    A checkpoint that lacks what it promises breaks the format, so this is a `FormatError`; it
    is also a `KeyError` for callers that look things up. A message ending in ``[RULE-ID]``
    sets `rule` when none is given.
    """

    def __init__(self, message: str, **kwargs: Any) -> None:
        m = _TRAILING_RULE.search(message)
        if m and kwargs.get("rule") is None:
            kwargs["rule"] = m.group(1)
            message = message[: m.start()]
        super().__init__(message, **kwargs)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self._render()


class UnsupportedError(OckptError, NotImplementedError):
    """Valid input that this implementation does not (yet) handle."""


class WriteConflictError(OckptError):
    """A save would overwrite or race with another checkpoint."""


class TargetError(OckptError, ValueError):
    """What a load asks for does not fit the checkpoint: a target tree whose keys differ from
    the saved tree, a refused (lossy) cast, a shape mismatch, a target leaf of unknown type.

    Attributes: `rule` (spec rule id), `file` (the checkpoint file the leaf is described in),
    `leaf` (the param name, or None for the whole tree), `missing` / `extra` (key paths the
    target has and the checkpoint lacks, and the reverse).
    """

    def __init__(
        self,
        message: str,
        *,
        rule: str | None = None,
        file: object = None,
        leaf: str | None = None,
        missing: tuple[str, ...] = (),
        extra: tuple[str, ...] = (),
    ) -> None:
        self.message = message
        self.rule = rule
        self.file = None if file is None else str(file)
        self.leaf = leaf
        self.missing = tuple(missing)
        self.extra = tuple(extra)
        where = self.file or "<checkpoint>"
        if leaf is not None:
            where += f": leaf {leaf!r}"
        text = f"{where}: {message}"
        if rule:
            text += f" [{rule}]"
        super().__init__(text)


class OckptWarning(UserWarning):
    """A quirk that is tolerated (lenient reading) but worth knowing about."""
