"""`_strings.json`: the values of string leaves, addressed by JSON pointer ``"/" + param name``.

Because the pointer is not escaped, a ``/`` inside a param name nests objects. Releases up to
0.3.x kept a flat object keyed by param name at `<first string param name>/_strings.json`;
`get` accepts both forms.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import DocumentError, MissingDataError
from ..names import STRINGS_FILE
from ..paths import strings_pointer
from ._base import Document
from ._json import child, expect_object, type_name

__all__ = ["StringsDocument"]


@dataclass(frozen=True)
class StringsDocument(Document):
    """The parsed `_strings.json`: the raw object, with lookup by param name."""

    FILE_NAME: ClassVar[str] = STRINGS_FILE
    COMPACT: ClassVar[bool] = True

    values: Mapping[str, Any]  # nested objects whose leaves are str
    file: str = field(default=STRINGS_FILE, compare=False)  # where it was read, for errors

    @classmethod
    def from_json(cls, obj: Any, *, file: str = STRINGS_FILE) -> StringsDocument:
        obj = expect_object(obj, file=file, pointer="", rule="STR-001")
        stack: list[tuple[str, Any]] = [("", obj)]
        while stack:
            pointer, node = stack.pop()
            for key, value in node.items():
                ptr = child(pointer, key)
                if isinstance(value, dict):
                    stack.append((ptr, value))
                elif not isinstance(value, str):
                    raise DocumentError(
                        "string leaf is not a string",
                        rule="STR-001",
                        file=file,
                        pointer=ptr,
                        expected="string",
                        got=type_name(value),
                    )
        return cls(obj, file)

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> StringsDocument:
        """Build the document for param name -> string, nesting at ``/`` as the format does."""
        root: dict[str, Any] = {}
        for name, text in values.items():
            *parents, last = strings_pointer(name)[1:].split("/")
            node = root
            for part in parents:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise DocumentError(
                        f"string leaf {name!r} nests under another string leaf",
                        rule="PATH-001",
                        file=STRINGS_FILE,
                        pointer=name,
                    )
            if last in node:
                raise DocumentError(
                    f"string leaf {name!r} collides with another",
                    rule="PATH-001",
                    file=STRINGS_FILE,
                    pointer=name,
                )
            node[last] = text
        return cls(root)

    def to_json(self) -> Mapping[str, Any]:
        return self.values

    def get(self, name: str) -> str:
        """The string stored for a param name; `MissingDataError` if absent (STR-002).

        The param name is looked up as the JSON pointer ``"/" + name``; when that finds nothing
        and the top-level object has a member named exactly `name` holding a string, that member
        is the value (STR-004: releases up to 0.3.x wrote a flat object keyed by param name).
        """
        try:
            return self._at_pointer(name)
        except MissingDataError:
            flat = self.values.get(name)
            if isinstance(flat, str):
                return flat
            raise

    def _at_pointer(self, name: str) -> str:
        node: Any = self.values
        for part in strings_pointer(name)[1:].split("/"):
            if not isinstance(node, dict) or part not in node:
                raise MissingDataError(
                    f"no string at {strings_pointer(name)!r} for param {name!r}",
                    rule="STR-002",
                    file=self.file,
                )
            node = node[part]
        if not isinstance(node, str):
            raise MissingDataError(
                f"{strings_pointer(name)!r} holds an object, not the string of param {name!r}",
                rule="STR-002",
                file=self.file,
            )
        return node

    def names(self) -> Iterator[str]:
        """Param names of every string stored (nested keys joined with ``/``)."""
        stack: list[tuple[tuple[str, ...], Mapping[str, Any]]] = [((), self.values)]
        while stack:
            prefix, node = stack.pop()
            for key, value in node.items():
                if isinstance(value, dict):
                    stack.append((prefix + (key,), value))
                else:
                    yield "/".join(prefix + (key,))
