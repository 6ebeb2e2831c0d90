"""`Finding`: one broken rule found in a checkpoint, as schema checks and the validator report it.

A finding names the rule (an id of `ockpt.rules.RULES`), its severity, the file, where inside the
file (a JSON pointer, a key or ``@offset``) and a message. `FormatError`s convert one to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import FormatError
from .rules import RULES, Severity

__all__ = ["Finding"]


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One rule a document or file breaks."""

    rule: str
    severity: Severity
    file: str | None
    pointer: str | None
    message: str

    @classmethod
    def of(
        cls, rule: str, message: str, *, file: str | None = None, pointer: str | None = None
    ) -> Finding:
        """A finding of `rule`, with the severity the registry gives it."""
        return cls(
            rule=rule,
            severity=RULES[rule].severity,
            file=file,
            pointer=pointer,
            message=message,
        )

    @classmethod
    def from_error(
        cls, error: FormatError, *, file: str | None = None, default_rule: str = "JSON-001"
    ) -> Finding:
        """The finding a `FormatError` stands for (its rule, or `default_rule` when it has
        none, must be a registered id)."""
        rule = error.rule or default_rule
        message = error.message
        details = []
        if error.expected is not None:
            details.append(f"expected {error.expected!r}")
        if error.got is not None:
            details.append(f"got {error.got!r}")
        if details:
            message += f" ({', '.join(details)})"
        return cls.of(rule, message, file=error.file or file, pointer=error.pointer)

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "pointer": self.pointer,
            "message": self.message,
        }

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.pointer:
            where += f" at {self.pointer}"
        return f"{where}: {self.severity}: {self.message} [{self.rule}]"
