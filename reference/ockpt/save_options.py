"""`SaveOptions`: how a save stores its arrays, validated once for every writer entry point.

`save_pytree`, `save_checkpointables`, `save_pytree_async` and `CheckpointManager` take the
same storage options, either as one `SaveOptions` or as keywords of the same names
(`from_keywords`); the layout-dependent defaults (zarr version, zstd level) are resolved by
the writer.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import numpy as np

__all__ = ["SaveOptions", "StorageDtypes", "Compression", "UNSET", "Unset"]

#: param name -> dtype to store an array leaf as, or ``(param_name, dtype) -> dtype | None``.
StorageDtypes: TypeAlias = Mapping[str, Any] | Callable[[str, np.dtype], Any] | None
Compression: TypeAlias = Literal["zstd", "auto"] | None

_ZSTD_LEVELS = (-131072, 22)


@dataclass(frozen=True)
class SaveOptions:
    """The storage options of a save (validated on construction; ValueError when bad).

    Attributes:
        use_ocdbt: store arrays in OCDBT databases (default) or one zarr directory per leaf.
        zarr_version: 2 or 3; None: 3 for a v1 checkpoint, 2 for an item or a manager step
            (as Orbax).
        compression: ``"zstd"``, ``"auto"`` (per array: no compressor where storing it raw
            costs at most 10% more disk than zstd, as for float weights; zstd elsewhere) or
            None.
        compression_level: zstd level; None: 1 for zarr v2, 3 for zarr v3.
        chunk_byte_size: split each written slice into chunks of at most this many bytes.
        storage_dtypes: param name -> dtype to store an array leaf as (or a callable
            ``(param_name, dtype) -> dtype | None``); values are cast on write. A mapping is
            copied, read-only.
    """

    use_ocdbt: bool = True
    zarr_version: int | None = None
    compression: Compression = "zstd"
    compression_level: int | None = None
    chunk_byte_size: int | None = None
    storage_dtypes: StorageDtypes = None

    def __post_init__(self) -> None:
        if self.zarr_version is not None and self.zarr_version not in (2, 3):
            raise ValueError(f"zarr_version must be 2 or 3, got {self.zarr_version!r}")
        if self.compression not in ("zstd", "auto", None):
            raise ValueError(
                f"compression must be 'zstd', 'auto' or None, got {self.compression!r}"
            )
        level = self.compression_level
        if self.compression is None and level is not None:
            raise ValueError("compression_level needs compression='zstd' or 'auto'")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int):
                raise ValueError(f"compression_level must be an int, got {level!r}")
            if not _ZSTD_LEVELS[0] <= level <= _ZSTD_LEVELS[1]:
                raise ValueError(f"zstd level must be in -131072..22, got {level}")
        size = self.chunk_byte_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise ValueError(f"chunk_byte_size must be a positive int, got {size!r}")
        sd = self.storage_dtypes
        if isinstance(sd, Mapping):
            object.__setattr__(self, "storage_dtypes", MappingProxyType(dict(sd)))
        elif sd is not None and not callable(sd):
            raise ValueError("storage_dtypes must be a mapping param name -> dtype, or a callable")


class _Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "<unset>"


#: The default of the storage keywords of the save functions: "not passed", so that the value
#: comes from `options=` (or the `SaveOptions` default) and a clash with it can be detected.
UNSET: Final = _Unset.UNSET
Unset: TypeAlias = Literal[_Unset.UNSET]


def from_keywords(options: SaveOptions | None, **keywords: Any) -> SaveOptions:
    """The options of a save given as `options=` and/or storage keywords (those not `UNSET`);
    the one place the writer's entry points build them. A keyword that disagrees with
    `options` is a ValueError: each option is said once."""
    given = {name: value for name, value in keywords.items() if value is not UNSET}
    if options is None:
        return SaveOptions(**given)
    if not isinstance(options, SaveOptions):
        raise TypeError(f"options must be an ockpt.SaveOptions, got {type(options).__name__}")
    clash = [
        f"{name}={value!r} (options has {getattr(options, name)!r})"
        for name, value in given.items()
        if value != getattr(options, name)
    ]
    if clash:
        raise ValueError(
            f"storage keyword(s) contradict options=: {', '.join(clash)}; pass each option "
            "once, in the SaveOptions or as a keyword"
        )
    return options
