"""What every document model shares: reading from bytes or a file and writing bytes.

A model defines `FILE_NAME` (the default name in errors), `from_json` and `to_json`; the
entry points here add the strict, bounded JSON layer of `_json`.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, TypeVar

from ._json import dump_json, parse_json, read_json

D = TypeVar("D", bound="Document")


class Document:
    """Base of the JSON document models."""

    FILE_NAME: ClassVar[str]
    #: Written without spaces (as tensorstore writes), or with Python's default separators.
    COMPACT: ClassVar[bool] = False

    @classmethod
    def from_json(cls: type[D], obj: Any, *, file: str) -> D:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_json(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def from_bytes(cls: type[D], data: bytes, *, file: str | None = None) -> D:
        """Parse the document from its bytes; errors name `file` (default `FILE_NAME`)."""
        name = cls.FILE_NAME if file is None else file
        return cls.from_json(parse_json(data, file=name), file=name)

    @classmethod
    def read(cls: type[D], path: str | os.PathLike[str]) -> D:
        """Read and parse the document at `path` (its size is checked before reading)."""
        return cls.from_json(read_json(path), file=os.fspath(path))

    def to_bytes(self) -> bytes:
        """The document as Orbax writes it."""
        return dump_json(self.to_json(), compact=self.COMPACT)
