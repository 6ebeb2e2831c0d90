"""What a writer refuses so that every reader accepts what it writes (writing §2, limits §1).

A reader refuses a checkpoint that exceeds `LIMITS` (spec/limits.md), and tensorstore refuses
names it cannot store only once the save is under way. The writer's planning step calls these
checks before anything is written, with the limits and rule ids of the reader:

* `_METADATA`: at most `max_tree_entries` entries (LIMIT-002), key paths of at most
  `max_depth` keys (LIMIT-004), key texts of at most `max_key_bytes` UTF-8 bytes (LIMIT-003);
* JSON documents: at most `max_json_bytes` and `max_depth` levels of nesting (JSON-003); a
  ``/`` in a string leaf's param name nests `_strings.json` one level deeper;
* zarr arrays: rank, chunk, array and grid sizes as the reader's zarr parser checks them
  (ZARR-005), and OCDBT keys ``<param name>/<zarr key>`` of at most `max_key_bytes` (OCDBT-008);
* names the store cannot hold (WRITE-005): a key text without a UTF-8 encoding, and, without
  OCDBT, where each array is a directory, a segment longer than `NAME_MAX`, a ``\\``, a name of
  the item's own files, or a file path longer than `PATH_MAX` allows.
"""

from __future__ import annotations

import math
import os
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .documents._json import parse_json
from .errors import FormatError
from .limits import LIMITS
from .names import (
    ARRAY_METADATAS_DIR,
    CHECKPOINT_METADATA_FILE,
    COMMIT_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    MSGPACK_FILE,
    OCDBT_DATA_DIR,
    OCDBT_PROCESS_DIR,
    SHARDING_FILE,
    STRINGS_FILE,
    ZARR2_METADATA,
    ZARR3_METADATA,
)
from .paths import KeyPath, array_prefix, param_name
from .zarr._common import check_extent

if TYPE_CHECKING:
    from ._zarr_write import ArrayWrite

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "ITEM_NAMES",
    "check_key_paths",
    "check_string_name",
    "check_array_name",
    "check_array_dirs",
    "check_array",
    "check_array_path",
    "check_documents",
    "check_json",
    "zarr_key_bytes",
]

#: Bytes of one file or directory name (NAME_MAX of Linux, macOS and Windows file systems).
NAME_MAX = 255
#: Bytes of a path, its terminating NUL included (PATH_MAX of Linux).
PATH_MAX = 4096
#: tensorstore writes each file of a per-leaf array as ``<file>.__lock`` first, then renames it.
_LOCK_SUFFIX = ".__lock"

#: The first segments a per-leaf array may not have: the names of the item directory's own
#: files and directories (directories §2), which the array would stand in place of, or make
#: the item look like an OCDBT or msgpack one (`OCDBT_PROCESS_DIR` too).
ITEM_NAMES = frozenset(
    {
        METADATA_FILE,
        CHECKPOINT_METADATA_FILE,
        SHARDING_FILE,
        ARRAY_METADATAS_DIR,
        STRINGS_FILE,
        MSGPACK_FILE,
        MANIFEST_FILE,
        OCDBT_DATA_DIR,
        COMMIT_FILE,
    }
)


def _shown(name: str) -> str:
    """`name` for a message: its repr, cut short when long (a key may be 64 KiB)."""
    return repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"


def _utf8_bytes(text: str) -> int | None:
    """Bytes of `text` in UTF-8, or None when it has no UTF-8 encoding (a lone surrogate)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def _refuse(name: str, message: str, rule: str, **kw: object) -> FormatError:
    """The error refusing the leaf `name` (shown cut short when long)."""
    pointer = name if len(name) <= 80 else name[:60] + "..."
    return FormatError(f"leaf {_shown(name)}: {message}", rule=rule, pointer=pointer, **kw)


def check_key_paths(paths: Sequence[KeyPath]) -> None:
    """Refuse the tree of `paths` (one per leaf and empty node) where the reader refuses its
    `_METADATA`: too many entries (LIMIT-002), a key path too deep (LIMIT-004), a key text
    too long (LIMIT-003) or without a UTF-8 encoding (WRITE-005)."""
    if len(paths) > LIMITS.max_tree_entries:
        raise FormatError(
            "too many leaves and empty nodes for _METADATA",
            rule="LIMIT-002",
            expected=f"<= {LIMITS.max_tree_entries}",
            got=len(paths),
        )
    for path in paths:
        if len(path) > LIMITS.max_depth:
            raise _refuse(
                param_name(path),
                "key path too deep",
                "LIMIT-004",
                expected=f"<= {LIMITS.max_depth} keys",
                got=len(path),
            )
        for entry in path:
            _check_key_text(entry.key, path)


def _check_key_text(key: str, path: KeyPath) -> None:
    """LIMIT-003 (or WRITE-005) for one key text of the key path `path`."""
    size = _utf8_bytes(key)
    if size is None:
        raise _refuse(param_name(path), f"key {_shown(key)} has no UTF-8 encoding", "WRITE-005")
    if size > LIMITS.max_key_bytes:
        raise _refuse(
            param_name(path),
            "key text too long",
            "LIMIT-003",
            expected=f"<= {LIMITS.max_key_bytes} UTF-8 bytes",
            got=size,
        )


def check_string_name(name: str) -> None:
    """JSON-003: the value of the string leaf `name` nests in `_strings.json` at depth 2 (in
    the document's object), one deeper per ``/`` of its param name."""
    depth = name.count("/") + 2
    if depth > LIMITS.max_depth:
        raise _refuse(
            name,
            f"its '/'s nest {STRINGS_FILE} too deep",
            "JSON-003",
            expected=f"<= {LIMITS.max_depth} levels",
            got=depth,
        )


def check_array_name(name: str, *, use_ocdbt: bool) -> None:
    """WRITE-005: without OCDBT the param name of an array is a path of directories: each
    segment at most `NAME_MAX` bytes, no ``\\`` (tensorstore's file driver takes it for a
    separator), and a first segment that is none of `ITEM_NAMES`."""
    if use_ocdbt:
        return
    segments = name.split("/")
    if segments[0] in ITEM_NAMES or OCDBT_PROCESS_DIR.fullmatch(segments[0]):
        raise _refuse(
            name, f"without OCDBT its directory {segments[0]!r} is the item's own", "WRITE-005"
        )
    if "\\" in name:
        raise _refuse(name, "without OCDBT a '\\' would separate directories", "WRITE-005")
    longest = max(len(s.encode("utf-8")) for s in segments)
    if longest > NAME_MAX:
        raise _refuse(
            name,
            "without OCDBT each '/'-separated part is a directory name, and one is too long",
            "WRITE-005",
            expected=f"<= {NAME_MAX} UTF-8 bytes",
            got=longest,
        )


def check_array_dirs(names: Iterable[str], *, use_ocdbt: bool) -> None:
    """WRITE-005: without OCDBT, no two array directories may differ only in the case or the
    Unicode normalization of a path segment: a case-insensitive or normalizing file system
    (macOS, Windows) holds them as one directory."""
    if use_ocdbt:
        return
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for name in names:
        segments = tuple(name.split("/"))
        for end in range(1, len(segments) + 1):
            path = segments[:end]
            folded = tuple(unicodedata.normalize("NFC", s).casefold() for s in path)
            other = seen.setdefault(folded, path)
            if other != path:
                raise _refuse(
                    name,
                    f"without OCDBT its directory {'/'.join(path)!r} and "
                    f"{'/'.join(other)!r} differ only in case or Unicode normalization: one "
                    "directory on macOS and Windows",
                    "WRITE-005",
                )


def zarr_key_bytes(shape: Sequence[int], grid: Sequence[int], zarr_version: int) -> int:
    """Bytes of the longest key of a zarr array after its prefix: its metadata document or
    its last chunk (`grid`: the stored chunk shape; v2 ``i.j``, v3 ``c/i/j``)."""
    last = [str(-(-n // g) - 1) for n, g in zip(shape, grid, strict=True)]
    if zarr_version == 2:
        return max(len(ZARR2_METADATA), len(".".join(last) or "0"))
    return max(len(ZARR3_METADATA), len("/".join(["c", *last])))


def _stored_grid(a: ArrayWrite, zarr_version: int) -> tuple[int, ...]:
    """The chunk shape that names stored values: v2 chunks, v3 shards."""
    return a.chunk_shape if zarr_version == 2 else a.write_shape


def check_array(a: ArrayWrite, *, zarr_version: int, use_ocdbt: bool) -> None:
    """Refuse the array write `a` where the reader refuses its zarr metadata (ZARR-005: rank,
    chunk, shard, array and grid sizes) or, with OCDBT, one of its keys (OCDBT-008). An array
    of at most `max_chunks` elements and `max_chunk_bytes` bytes has no grid over a limit, and
    a name under half `max_key_bytes` no key (its zarr keys take some dozens of bytes): those
    are not computed for the many small arrays of a tree."""
    if len(a.shape) > LIMITS.max_zarr_ndim:
        raise _refuse(
            a.param_name,
            "too many dimensions for a zarr array",
            "ZARR-005",
            expected=f"<= {LIMITS.max_zarr_ndim}",
            got=len(a.shape),
        )
    elements = math.prod(a.shape)
    if elements > LIMITS.max_chunks or elements * a.dtype.itemsize > LIMITS.max_chunk_bytes:
        for grid in dict.fromkeys((_stored_grid(a, zarr_version), a.chunk_shape)):
            check_extent(a.shape, grid, a.dtype, file=None, pointer=_shown(a.param_name))
    if not use_ocdbt or 4 * len(a.param_name) < LIMITS.max_key_bytes // 2:
        return
    prefix = len(array_prefix(a.param_name).encode("utf-8"))
    size = prefix + zarr_key_bytes(a.shape, _stored_grid(a, zarr_version), zarr_version)
    if size > LIMITS.max_key_bytes:
        raise _refuse(
            a.param_name,
            "its OCDBT keys would be too long",
            "OCDBT-008",
            expected=f"<= {LIMITS.max_key_bytes} bytes",
            got=size,
        )


def check_array_path(item_dir: str, a: ArrayWrite, *, zarr_version: int) -> None:
    """WRITE-005: every file of the per-leaf array `a` in `item_dir` (the directory a save
    writes, the longest it uses) must have a path tensorstore can write, under `PATH_MAX`."""
    directory = len(os.fsencode(os.path.join(item_dir, a.param_name)))
    key = zarr_key_bytes(a.shape, _stored_grid(a, zarr_version), zarr_version)
    size = directory + 1 + key + len(_LOCK_SUFFIX)
    if size >= PATH_MAX:
        raise _refuse(
            a.param_name,
            "without OCDBT the path of one of its files would be too long",
            "WRITE-005",
            expected=f"< {PATH_MAX} bytes",
            got=size,
        )


def check_documents(bound: int, build: Callable[[], Mapping[str, bytes]]) -> None:
    """JSON-003: refuse documents longer than `max_json_bytes`. `bound` is an upper bound on
    their bytes; only above the limit are they built (`build`: file name -> bytes) and
    measured, so a tree of a few leaves is not serialized twice."""
    if bound <= LIMITS.max_json_bytes:
        return
    for file, data in build().items():
        if len(data) > LIMITS.max_json_bytes:
            raise FormatError(
                "document too large",
                rule="JSON-003",
                file=file,
                expected=f"<= {LIMITS.max_json_bytes} bytes",
                got=len(data),
            )


def check_json(data: bytes, *, file: str) -> None:
    """Refuse the JSON document `data` where the reader's parser refuses it (JSON-003: its
    size or nesting)."""
    parse_json(data, file=file)
