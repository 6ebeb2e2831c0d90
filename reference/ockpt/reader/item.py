"""One opened pytree item: resolved, its documents parsed, its saved tree built, its array
engine open (`engines.open_store`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _gc, engines
from ..documents.array_metadatas import RANDOM_KEY_MARKER
from ..documents.metadata import MetadataDocument
from ..documents.sharding import ShardingDocument, ShardingSpec
from ..documents.strings import StringsDocument
from ..errors import MissingDataError, NotACheckpointError
from ..item_files import ItemFiles
from ..layout import Resolved, Storage, resolve
from ..limits import Limits, applied
from ..limits import current as limits_in_force
from ..msgpack_legacy import decode_checkpoint
from ..names import (
    METADATA_FILE,
    MSGPACK_FILE,
    SHARDING_FILE,
    STRINGS_FILE,
)
from ..paths import check_relative
from ..store import as_store

if TYPE_CHECKING:
    import tensorstore as ts
from ..saved_tree import (
    SavedLeaf,
    by_param_name,
    from_metadata,
    from_msgpack,
    leaves,
    placeholder_names,
)

__all__ = ["OpenedItem"]

F = TypeVar("F", bound=Callable[..., Any])


def in_its_limits(method: F) -> F:
    """Run a method of an object with a `limits` attribute under those limits: what an item
    reads after it was opened is held to the limits it was opened with."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if limits_in_force() is self.limits:  # already inside them (a load, per leaf)
            return method(self, *args, **kwargs)
        with applied(self.limits):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# One opened item.


class OpenedItem:
    """A pytree item: its documents, its saved tree and its array store. Everything it reads,
    when opened and later, is held to `limits` (default: the limits in force when it opens)."""

    def __init__(
        self,
        path: Any,
        *,
        step: int | None,
        item: str | None,
        context: ts.Context | None,
        backend: str = "auto",
        limits: Limits | None = None,
    ) -> None:
        self.limits: Limits = limits_in_force() if limits is None else limits
        with applied(self.limits), _gc.paused():  # the documents and saved tree: per leaf
            self._open(path, step=step, item=item, context=context, backend=backend)

    def _open(
        self, path: Any, *, step: int | None, item: str | None, context: Any, backend: str
    ) -> None:
        if backend not in ("auto", *engines.BACKENDS):
            raise ValueError(f"backend must be 'auto', 'tensorstore' or 'python', not {backend!r}")
        loc = as_store(path, context=context)
        if backend == "auto":  # ockpt's own decoders where reads are cheap; else tensorstore's
            backend = "python" if loc.capabilities.random_access else "tensorstore"
        self.resolved: Resolved = resolve(loc, step=step, item=item)
        loc = self.resolved.location
        fmt = self.resolved.pytree.item
        self.location = loc
        self.files = ItemFiles(loc)
        self.format = fmt
        # the document's entries are kept only until the saved tree is built from them (a
        # tree of 100,000 leaves: 12 MB), so it is taken out of the parse cache (`keep`)
        doc: MetadataDocument | None = None
        if fmt.has_metadata:
            data = loc.get(METADATA_FILE)
            if data is None:
                raise MissingDataError(
                    "removed meanwhile", rule="LOAD-050", file=loc.file(METADATA_FILE)
                )
            doc = MetadataDocument.from_bytes(data, file=loc.file(METADATA_FILE), keep=False)
            del data
        self.has_metadata = doc is not None
        self.msgpack: Any = None
        if fmt.has_msgpack:
            limit = self.limits.max_msgpack_bytes
            data = loc.get(MSGPACK_FILE, limit=limit, rule="MSGPACK-001")
            if data is None:
                raise MissingDataError(
                    "removed meanwhile", rule="LOAD-050", file=loc.file(MSGPACK_FILE)
                )
            self.msgpack = decode_checkpoint(data, file=loc.file(MSGPACK_FILE))
        self.metadata_file = loc.file(METADATA_FILE if doc is not None else MSGPACK_FILE)
        self._strings: StringsDocument | None = None
        self._strings_loaded = False
        self._string_names: set[str] | None = None
        self.tree = self._saved_tree(doc)
        self.leaves = by_param_name(leaves(self.tree), file=self.metadata_file)
        if fmt.storage is not Storage.OCDBT:  # each array is the directory <param name>/
            for name, leaf in self.leaves.items():
                if leaf.source == "array":
                    check_relative(name, file=self.metadata_file, absolute_ok=True)
        zarr_version = None
        if doc is not None and isinstance(doc.use_zarr3, bool):
            zarr_version = 3 if doc.use_zarr3 else 2
        strict = doc is not None and doc.store_array_data_equal_to_fill_value is True
        del doc
        # the tensorstore engine refuses a local item with links leading out (PATH-004) or
        # anything but regular files and directories (PATH-005) before tensorstore sees it
        self.store: engines.ArrayStore = engines.open_store(
            loc,
            fmt,
            backend=backend,
            zarr_version=zarr_version,
            missing_chunks_are_errors=strict,
        )
        self._arrays: dict[str, engines.StoredArray] = {}
        self._key_impls: dict[str, str] | None = None

    # -- the saved tree --------------------------------------------------------------------

    def _saved_tree(self, doc: MetadataDocument | None) -> Any:
        if doc is not None:
            return from_metadata(doc, self.msgpack)
        if self.msgpack is None:
            raise NotACheckpointError(
                f"neither {METADATA_FILE} nor {MSGPACK_FILE}",
                rule="LOAD-050",
                file=self.location.display,
            )
        has_placeholders = next(placeholder_names(self.msgpack), None) is not None
        return from_msgpack(self.msgpack, self._msgpack_strings() if has_placeholders else ())

    def _msgpack_strings(self) -> set[str]:
        """Param names stored as strings (placeholders for strings, no _METADATA)."""
        if self._string_names is None:
            doc = self._strings_document(placeholder_names(self.msgpack))
            self._string_names = set(doc.names()) if doc is not None else set()
        return self._string_names

    # -- documents -------------------------------------------------------------------------

    def _strings_document(self, candidates: Iterable[str]) -> StringsDocument | None:
        """The item's strings document, or None when it has none (`ItemFiles`: JSON
        documents §7, STR-003)."""
        if not self._strings_loaded:
            self._strings = self.files.strings_document(candidates)
            self._strings_loaded = True
        return self._strings

    @in_its_limits
    def strings(self, leaf: SavedLeaf) -> str:
        names = [n for n, lf in self.leaves.items() if lf.source == "string"]
        doc = self._strings_document(names)
        if doc is None:
            raise MissingDataError(
                "missing (nor found in the directory of a string leaf); needed for string leaf "
                f"{leaf.param_name!r}",
                rule="LOAD-042",
                file=self.location.file(STRINGS_FILE),
            )
        return doc.get(leaf.param_name)

    @in_its_limits
    def shardings(self) -> Mapping[str, ShardingSpec]:
        data = self.location.get(SHARDING_FILE)
        if data is None:
            return {}
        return ShardingDocument.from_bytes(data, file=self.location.file(SHARDING_FILE)).shardings

    @in_its_limits
    def array_metadatas(self, *, marker: bytes | None = None) -> dict[str, Any]:
        """Param name -> `ArrayMetadata` of ``array_metadatas/process_<N>``, the entry of the
        lowest N (`ItemFiles`, ARRM-003). With `marker`, a document whose bytes lack it (and
        hold no ``\\u`` escape that could spell it) is skipped unparsed."""
        found = self.files.array_metadatas(marker=marker)
        return {name: written.metadata for name, written in found.items()}

    @in_its_limits
    def random_key_impls(self) -> Mapping[str, str]:
        """Param name -> PRNG implementation of each typed key array (`array_metadatas`'
        `ext_metadata.random_key_impl`, 0.11.9+); empty for items without `_METADATA`."""
        if self._key_impls is None:
            found = self.array_metadatas(marker=RANDOM_KEY_MARKER) if self.has_metadata else {}
            self._key_impls = {
                name: a.random_key_impl
                for name, a in found.items()
                if a.random_key_impl is not None
                and getattr(self.leaves.get(name), "source", None) == "array"
            }
        return self._key_impls

    @in_its_limits
    def arrays(self, names: list[str]) -> dict[str, engines.StoredArray]:
        """The named arrays, opened together and kept for the item's lifetime."""
        todo = [n for n in names if n not in self._arrays]
        if todo:
            self._arrays.update(self.store.open_many(todo))
        return {n: self._arrays[n] for n in names}

    def close(self) -> None:
        """Release what the item holds: its opened arrays, its engine's databases and files,
        its store. Reads after it open them again."""
        self._arrays.clear()
        self.store.close()
        self.location.close()

    def __enter__(self) -> OpenedItem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @in_its_limits
    def array(self, name: str) -> engines.StoredArray:
        """One array: the kept one, else opened now and not kept."""
        hit = self._arrays.get(name)
        return hit if hit is not None else self.store.open(name)
