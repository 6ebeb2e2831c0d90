"""The registry of spec rules: one id per normative statement that code checks.

Ids tie the spec text (``{#META-003}`` anchors), the JSON Schemas (``"$comment"``), validator
findings and ``FormatError.rule`` together. A new check gets a new id here, never a new class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = ["Rule", "RULES", "rule"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    """One checkable statement of the spec."""

    id: str
    severity: Severity
    summary: str
    spec: str  # spec file that states the rule


def _rules(spec: str, *entries: tuple[str, Severity, str]) -> dict[str, Rule]:
    return {rid: Rule(rid, sev, summary, spec) for rid, sev, summary in entries}


_ALL: dict[str, Rule] = {
    **_rules(
        "json-documents.md",
        (
            "JSON-001",
            "error",
            "a JSON document must be well-formed UTF-8 JSON without NaN/Infinity",
        ),
        ("JSON-002", "error", "a JSON document must not repeat a key within one object"),
        ("JSON-003", "error", "a JSON document must respect the size and nesting limits"),
        ("JSON-004", "error", "a field must have the type the spec gives it"),
        ("JSON-005", "error", "a required field must be present"),
        ("META-001", "error", "_METADATA must hold a tree_metadata object"),
        ("META-002", "error", "each tree_metadata entry must hold key_metadata and value_metadata"),
        ("META-003", "error", "a tree_metadata key must equal the repr of the tuple of its keys"),
        ("META-004", "error", "key_type must be 1 (sequence index) or 2 (dict key or field)"),
        ("META-005", "error", "a sequence index key must be a non-negative decimal integer"),
        ("META-006", "error", "tree_metadata entries must form one consistent tree"),
        ("META-007", "warning", "value_type should be one the spec lists"),
        ("CKPT-001", "error", "_CHECKPOINT_METADATA fields must have the spec's types"),
        ("ROOT-001", "error", "_ROOT_METADATA fields must have the spec's types"),
        ("SHARD-001", "error", "a _sharding key must be URL-safe base64 of a UTF-8 param name"),
        ("SHARD-002", "error", "a _sharding value must be a JSON string holding a sharding object"),
        (
            "SHARD-003",
            "error",
            "a sharding object must be of a known sharding_type with its fields",
        ),
        ("ARRM-001", "error", "array_metadatas/process_N must hold a list of array_metadata"),
        ("STR-001", "error", "_strings.json must be an object whose leaves are strings"),
        ("STR-002", "error", "every string leaf must be found at its JSON pointer"),
    ),
    **_rules(
        "key-paths.md",
        ("PATH-001", "error", "param names of one item must not collide"),
        ("PATH-002", "error", "a string leaf's param name must form a valid JSON pointer"),
    ),
    **_rules(
        "directories.md",
        ("LAYOUT-001", "error", "a committed checkpoint must not carry a temporary name"),
        ("LAYOUT-002", "warning", "a step directory should carry commit_success.txt (0.12.3+)"),
    ),
}

RULES: Mapping[str, Rule] = MappingProxyType(_ALL)


def rule(rule_id: str) -> Rule:
    """The rule with this id; KeyError for an unknown id (a bug in ockpt, not in the input)."""
    return RULES[rule_id]
