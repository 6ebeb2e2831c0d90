"""The files of one pytree item, found and read one way for the reader and the validator.

Where an item keeps its strings and its ``array_metadatas``, in which order the files are
taken, and which entry of a param wins, is decided here once (spec JSON documents §6 and §7).
The reader reads what `ItemFiles` finds and raises on a bad file; the validator reads the
same files in the same order (checking each against its schema) and records findings: the
two never judge different files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .documents.array_metadatas import ArrayMetadata, ArrayMetadatas, process_index
from .documents.strings import StringsDocument
from .errors import FormatError
from .names import ARRAY_METADATAS_DIR, STRINGS_FILE
from .store import Store

__all__ = ["ItemFiles", "WrittenArray", "take_array_metadatas"]


@dataclass(frozen=True)
class WrittenArray:
    """The entry of a param in ``array_metadatas``: the one of the lowest process number that
    has one, the file it came from, and the files whose entry for it differs (ARRM-003)."""

    metadata: ArrayMetadata
    file: str
    differing: tuple[str, ...] = ()


class ItemFiles:
    """The item directory `store`: its strings document and ``array_metadatas`` files."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- array_metadatas ----------------------------------------------------------------------

    def array_metadata_files(self) -> list[str]:
        """The names ``process_<N>`` of ``array_metadatas/``, by N (``process_2`` before
        ``process_10``: ARRM-003); other names are no such file and are left out."""
        listing = self.store.child(ARRAY_METADATAS_DIR).list_dir()
        found = [(process_index(n), n) for n in listing.names]  # a FIFO: refused when read
        return [n for i, n in sorted((i, n) for i, n in found if i is not None)]

    def array_metadatas(self, *, marker: bytes | None = None) -> dict[str, WrittenArray]:
        """Param name -> its `WrittenArray`, every file read and parsed (a bad one raises) in
        `array_metadata_files`' order. With `marker`, the one file of a single-process item
        whose bytes lack it (and hold no ``\\u`` escape that could spell it) is skipped
        unparsed: for a reader after one field (``random_key_impl``) only. Of several files
        each is parsed: one without the field still decides the entries it holds."""
        sub = self.store.child(ARRAY_METADATAS_DIR)
        names = self.array_metadata_files()
        docs = []
        for name in names:
            data = sub.get(name)
            if data is None:
                continue
            if marker is not None and len(names) == 1 and marker not in data and b"\\u" not in data:
                continue
            docs.append((sub.file(name), ArrayMetadatas.from_bytes(data, file=sub.file(name))))
        return take_array_metadatas(docs)

    # -- strings ------------------------------------------------------------------------------

    def strings_locations(self, candidates: Iterable[str]) -> list[str]:
        """Where the strings document may be, in the order to look (JSON documents §7,
        STR-003): ``_strings.json`` at the item root; else, as releases up to 0.3.x wrote it,
        ``<P>/_strings.json`` for each param name P of `candidates` in the tree's order (0.3.5
        writes it in the first string leaf's directory); else a file named P."""
        names = list(dict.fromkeys(candidates))  # the tree's order, each name once
        return [STRINGS_FILE, *(f"{n}/{STRINGS_FILE}" for n in names), *names]

    def strings_location(self, candidates: Iterable[str]) -> str | None:
        """The first of `strings_locations` that holds the document: the item root's
        ``_strings.json`` when it names anything (a file that cannot be read is that file too:
        reading it reports why), else the first legacy place that reads as a file (a
        directory of that name, an array's, is no strings document); None when none does."""
        found = self._find_strings(candidates)
        return None if found is None else found[0]

    def strings_document(self, candidates: Iterable[str]) -> StringsDocument | None:
        """The item's strings document, from `strings_location`, parsed (a bad one raises);
        None when the item has none."""
        found = self._find_strings(candidates)
        if found is None:
            return None
        rel, data = found
        if data is None:
            data = self.store.get(rel)
        return None if data is None else StringsDocument.from_bytes(data, file=self.store.file(rel))

    def _find_strings(self, candidates: Iterable[str]) -> tuple[str, bytes | None] | None:
        """`strings_location`, with the bytes of a legacy place (read to tell it is a file)."""
        root, *legacy = self.strings_locations(candidates)
        if self.store.exists(root):
            return root, None
        for rel in legacy:
            try:
                data = self.store.get(rel)
            except (OSError, FormatError):
                continue  # a directory (an array's), or nothing readable: not the document
            if data is not None:
                return rel, data
        return None


def take_array_metadatas(docs: Iterable[tuple[str, ArrayMetadatas]]) -> dict[str, WrittenArray]:
    """Param name -> the entry that counts (ARRM-003): the first in `docs` (file, document),
    given in `ItemFiles.array_metadata_files`' order, with the files whose entry differs."""
    out: dict[str, WrittenArray] = {}
    for file, doc in docs:
        for a in doc.arrays:
            taken = out.get(a.param_name)
            if taken is None:
                out[a.param_name] = WrittenArray(a, file)
            elif taken.metadata != a and file not in taken.differing:
                out[a.param_name] = WrittenArray(
                    taken.metadata, taken.file, (*taken.differing, file)
                )
    return out
