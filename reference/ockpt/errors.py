"""The one exception family of ockpt.

Every failure caused by the bytes of a checkpoint is a `FormatError` (or one of its per-layer
subclasses) that names the file, the key inside it, the rule of the spec it breaks, and what was
expected versus found. Callers catch `OckptError` to catch everything ockpt raises on purpose.
"""

from __future__ import annotations

import errno

__all__ = [
    "OckptError",
    "NotACheckpointError",
    "PathNotFoundError",
    "FormatError",
    "DocumentError",
    "MsgpackError",
    "ZarrFormatError",
    "OcdbtError",
    "MissingDataError",
    "UnsupportedError",
    "WriteConflictError",
    "TargetError",
    "MemoryLimitError",
    "LeafNameError",
    "OckptWarning",
]

_UNSET = object()


class OckptError(Exception):
    """Base class of every error ockpt raises on purpose.

    `rule` is the spec rule id the error cites (``LOAD-053``, ``PATH-004`` ...), or None: a
    caller (the validator, a test) reads it here, never from the message text.
    """

    rule: str | None = None


def _where(message: str, file: str | None, rule: str | None) -> str:
    text = f"{file}: {message}" if file else message
    return f"{text} [{rule}]" if rule else text


class _FileError(OckptError):
    """An error about one file or path as a whole: `message`, `rule`, `file`."""

    def __init__(self, message: str, *, rule: str | None = None, file: object = None) -> None:
        self.message = message
        self.rule = rule
        self.file = None if file is None else str(file)
        super().__init__(_where(message, self.file, rule))

    def __str__(self) -> str:
        return _where(self.message, self.file, self.rule)


class NotACheckpointError(_FileError, FileNotFoundError):
    """The path does not hold an Orbax checkpoint (or the part of one that was asked for).

    Attributes: `rule` (spec rule id, e.g. ``LOAD-053``), `file` (the path), `message`.
    """


class PathNotFoundError(NotACheckpointError):
    """Nothing exists at the path given: an I/O error (the command line exits 2), not a
    checkpoint problem. `errno` and `filename` are those of FileNotFoundError."""

    def __init__(self, message: str, *, rule: str | None = None, file: object = None) -> None:
        super().__init__(message, rule=rule, file=file)
        self.errno = errno.ENOENT
        self.strerror = message
        self.filename = self.file


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
    is also a `KeyError` for callers that look things up.
    """

    def __str__(self) -> str:  # KeyError would repr() the message
        return self._render()


class UnsupportedError(_FileError, NotImplementedError):
    """Valid input that this implementation does not (yet) handle.

    Attributes: `rule` (the spec rule id that says so, or None), `file`, `message`.
    """


class WriteConflictError(OckptError):
    """A save would overwrite or race with another checkpoint (`rule`: the DIR rule)."""

    def __init__(self, message: str, *, rule: str | None = None, file: object = None) -> None:
        self.message = message
        self.rule = rule
        self.file = None if file is None else str(file)
        super().__init__(_where(message, self.file, rule))


class MemoryLimitError(OckptError, MemoryError):
    """What a load or read would allocate, sized from the checkpoint's declared shapes, is more
    than the memory this process may still use (LIMIT-006): refused before allocating."""

    def __init__(self, message: str, *, rule: str = "LIMIT-006", file: object = None) -> None:
        self.message = message
        self.rule = rule
        self.file = None if file is None else str(file)
        super().__init__(_where(message, self.file, rule))


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
        super().__init__(_where(message, where, rule))


class LeafNameError(OckptError, KeyError, ValueError):
    """A leaf name or selection pattern that is malformed (`rule` ``PATH-006``) or that names
    nothing in the checkpoint (``PATH-007``).

    Attributes: `rule`, `file` (the checkpoint or file the name was looked up in, or None),
    `name` (the text given), `message`, `close` (names of the checkpoint close to it).
    """

    def __init__(
        self,
        message: str,
        *,
        rule: str,
        name: str,
        file: object = None,
        close: tuple[str, ...] = (),
    ) -> None:
        self.message = message
        self.rule = rule
        self.name = name
        self.file = None if file is None else str(file)
        self.close = tuple(close)
        super().__init__(self.__str__())

    def __str__(self) -> str:  # KeyError would repr() the message
        return _where(self.message, self.file, self.rule)


class OckptWarning(UserWarning):
    """A quirk that is tolerated (lenient reading) but worth knowing about."""
