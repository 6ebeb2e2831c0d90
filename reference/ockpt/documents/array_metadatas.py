"""`array_metadatas/process_<N>`: per-process records of how each array was written (0.11.9+)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import DocumentError
from ..names import ARRAY_METADATAS_DIR, ARRAY_METADATAS_PROCESS_FILE
from ._base import Document
from ._json import (
    child,
    expect,
    expect_int_list,
    expect_object,
    require,
)

__all__ = ["ArrayMetadata", "ArrayMetadatas", "RANDOM_KEY_MARKER", "process_index"]

#: the document's one field, named like its directory
_LIST_KEY = "array_metadatas"
_LIST_POINTER = "/" + _LIST_KEY


#: the `ext_metadata` key that marks a typed PRNG key array, as bytes: a document without it
#: records no key and need not be parsed to find one
RANDOM_KEY_MARKER = b'"random_key_impl"'


def process_index(file_name: str) -> int | None:
    """The process index in a `process_<N>` file name, or None if the name is not one."""
    m = ARRAY_METADATAS_PROCESS_FILE.fullmatch(file_name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, kw_only=True)
class ArrayMetadata:
    """One array as a process wrote it: its param name, write shape and chunk shape."""

    param_name: str
    write_shape: tuple[int, ...] | None
    chunk_shape: tuple[int, ...] | None
    ext_metadata: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def random_key_impl(self) -> str | None:
        """The PRNG implementation of a typed jax random key array, if this is one."""
        if isinstance(self.ext_metadata, Mapping):
            value = self.ext_metadata.get("random_key_impl")
            return value if isinstance(value, str) else None
        return None

    @classmethod
    def from_json(cls, obj: Any, *, file: str, pointer: str) -> ArrayMetadata:
        rest = dict(expect_object(obj, file=file, pointer=pointer, rule="ARRM-001"))
        name = expect(
            require(rest, "param_name", file=file, pointer=pointer, rule="ARRM-001"),
            str,
            file=file,
            pointer=child(pointer, "param_name"),
            rule="ARRM-001",
        )
        rest.pop("param_name")
        shapes = {}
        for key in ("write_shape", "chunk_shape"):
            value = rest.pop(key, None)
            shapes[key] = (
                None
                if value is None
                else expect_int_list(value, file=file, pointer=child(pointer, key), rule="ARRM-001")
            )
        ext = rest.pop("ext_metadata", None)
        if ext is not None:
            expect_object(ext, file=file, pointer=child(pointer, "ext_metadata"), rule="ARRM-001")
        return cls(param_name=name, ext_metadata=ext, extra=rest, **shapes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "param_name": self.param_name,
            "write_shape": None if self.write_shape is None else list(self.write_shape),
            "chunk_shape": None if self.chunk_shape is None else list(self.chunk_shape),
            "ext_metadata": self.ext_metadata,
        }
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True)
class ArrayMetadatas(Document):
    """The parsed `array_metadatas/process_<N>` file of one writing process."""

    FILE_NAME: ClassVar[str] = ARRAY_METADATAS_DIR

    arrays: tuple[ArrayMetadata, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any, *, file: str = ARRAY_METADATAS_DIR) -> ArrayMetadatas:
        rest = dict(expect_object(obj, file=file, pointer="", rule="ARRM-001"))
        items = expect(
            require(rest, _LIST_KEY, file=file, pointer="", rule="ARRM-001"),
            list,
            file=file,
            pointer=_LIST_POINTER,
            rule="ARRM-001",
        )
        rest.pop(_LIST_KEY)
        arrays = []
        for i, item in enumerate(items):
            ptr = child(_LIST_POINTER, i)
            wrapper = expect_object(item, file=file, pointer=ptr, rule="ARRM-001")
            if set(wrapper) != {"array_metadata"}:
                raise DocumentError(
                    "entry must hold exactly 'array_metadata'",
                    rule="ARRM-001",
                    file=file,
                    pointer=ptr,
                    expected=["array_metadata"],
                    got=sorted(wrapper),
                )
            arrays.append(
                ArrayMetadata.from_json(
                    wrapper["array_metadata"], file=file, pointer=child(ptr, "array_metadata")
                )
            )
        return cls(arrays=tuple(arrays), extra=rest)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {_LIST_KEY: [{"array_metadata": a.to_json()} for a in self.arrays]}
        out.update(self.extra)
        return out

    def by_param_name(self) -> dict[str, ArrayMetadata]:
        return {a.param_name: a for a in self.arrays}
