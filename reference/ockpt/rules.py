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
        ("JSON-003", "error", "a JSON document must respect the size, nesting and value limits"),
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
        (
            "ARRM-002",
            "error",
            "a random_key_impl names a known implementation whose uint32 key data is stored",
        ),
        (
            "ARRM-003",
            "error",
            "array_metadatas files are taken by process number; one param's entries must agree",
        ),
        ("STR-001", "error", "_strings.json must be an object whose leaves are strings"),
        ("STR-002", "error", "every string leaf must be found at its JSON pointer"),
        ("STR-003", "error", "without _strings.json, look in <param>/_strings.json (up to 0.3.x)"),
        ("STR-004", "error", "a string is the flat member named by its param name if no pointer"),
    ),
    **_rules(
        "key-paths.md",
        ("PATH-001", "error", "param names of one item must not collide"),
        ("PATH-002", "error", "a string leaf's param name must form a valid JSON pointer"),
        (
            "PATH-003",
            "error",
            "a name used as a path must be relative, without NUL and without '', '.', '..' parts",
        ),
        ("PATH-006", "error", "a malformed leaf name or selection pattern must be refused"),
        ("PATH-007", "error", "a name or selection pattern that names nothing must be refused"),
    ),
    **_rules(
        "directories.md",
        ("LAYOUT-001", "error", "a committed checkpoint must not carry a temporary name"),
        ("LAYOUT-002", "warning", "a step directory should carry commit_success.txt (0.12.3+)"),
        (
            "LAYOUT-003",
            "error",
            "every item named by item_handlers of a step or v1 checkpoint must be a directory",
        ),
        ("LAYOUT-004", "warning", "the step directories of one root should share one name format"),
        ("PATH-004", "error", "no file may be reached through a symbolic link leading out"),
        ("PATH-005", "error", "a file a reader opens must be a regular file (no FIFO, loop, ...)"),
        ("PATH-008", "error", "no two chunk files of a checkpoint may be one file (links)"),
        (
            "LAYOUT-005",
            "error",
            "a step-named directory holding only items is a step (up to 0.4.8)",
        ),
        ("LAYOUT-006", "warning", "a reader should name the -replaced sibling of a missing path"),
        (
            "LAYOUT-007",
            "error",
            "two directories of one root must not name the same step; a read of it is refused",
        ),
    ),
    **_rules(
        "checkpointables.md",
        (
            "HANDLER-001",
            "error",
            "a JSON or proto item must hold exactly one file besides its commit marker",
        ),
        ("HANDLER-002", "error", "an ArrayCheckpointHandler item must hold exactly one leaf"),
        (
            "HANDLER-003",
            "error",
            "a random-key item must hold its data item and its metadata {typed} / {legacy}",
        ),
        (
            "HANDLER-004",
            "error",
            "an item whose handler a reader does not read must be refused naming both",
        ),
        ("HANDLER-005", "error", "a typed key's implementation must not be guessed"),
    ),
    **_rules(
        "msgpack.md",
        (
            "MSGPACK-001",
            "error",
            "the checkpoint file must not exceed the reader's size limit (checked before "
            "reading) nor hold more values than its value limit",
        ),
        (
            "MSGPACK-002",
            "error",
            "the file must be one well-formed msgpack value (valid type bytes, UTF-8 strings)",
        ),
        ("MSGPACK-003", "error", "the file must not end before its msgpack value is complete"),
        ("MSGPACK-004", "error", "no bytes may follow the single top-level msgpack value"),
        (
            "MSGPACK-005",
            "error",
            "maps, arrays and tuples must not nest deeper than MAX_DEPTH (64)",
        ),
        ("MSGPACK-006", "error", "every map key must be a string"),
        ("MSGPACK-007", "error", "a map must not repeat a key"),
        (
            "MSGPACK-008",
            "error",
            "ext type codes must be 1 (ndarray), 2 (complex), 3 (numpy scalar) or 4 (tuple)",
        ),
        (
            "MSGPACK-009",
            "error",
            "an ext payload must be exactly one msgpack value of the layout its code defines",
        ),
        (
            "MSGPACK-010",
            "error",
            "an array dtype name must be one of the allowed numpy / ml_dtypes names",
        ),
        (
            "MSGPACK-011",
            "error",
            "an array shape must be at most MAX_NDIM non-negative ints whose size fits int64",
        ),
        ("MSGPACK-012", "error", "array data must be exactly prod(shape) * itemsize bytes"),
        ("MSGPACK-013", "error", "a numpy scalar (ext 3) must have shape []"),
        (
            "MSGPACK-014",
            "error",
            "a chunked array map must hold exactly the marker true, shape {'0'..}, chunks {'0'..}",
        ),
        (
            "MSGPACK-015",
            "error",
            "chunks must be non-empty 1-D ext-1 arrays of one dtype totalling prod(shape) elements",
        ),
        ("MSGPACK-016", "error", "bool array data bytes must be 0 or 1"),
        ("MSGPACK-017", "error", "two placeholders must not name the same param name"),
    ),
    **_rules(
        "loading.md",
        ("LOAD-001", "error", "every key path of a load target must exist in the saved tree"),
        ("LOAD-002", "error", "without a partial load, the target must match every saved leaf"),
        ("LOAD-003", "error", "a target leaf must meet a saved leaf, a target container a node"),
        ("LOAD-004", "error", "a target leaf must be of a kind the loading chapter lists"),
        ("LOAD-005", "error", "string leaves load only as strings, arrays only as arrays"),
        ("LOAD-006", "error", "a target empty container matches any saved empty node, None too"),
        ("LOAD-020", "error", "a lossy cast must not happen without the caller opting in"),
        ("LOAD-021", "error", "a checked cast must be refused when a value would change"),
        ("LOAD-022", "error", "an exact cast must give every value unchanged"),
        ("LOAD-023", "error", "a load without target gives every leaf in its stored type"),
        ("LOAD-024", "error", "a device-array type the framework would narrow must be refused"),
        ("LOAD-025", "error", "a typed key loads as a key of its implementation, never bare"),
        ("LOAD-030", "error", "a shape mismatch is refused unless pad/truncate (same rank)"),
        ("LOAD-031", "error", "padding fills zeros; truncation keeps the leading elements"),
        ("LOAD-032", "error", "placement follows the target sharding, never the saved one"),
        ("LOAD-033", "error", "placeholder and left-out leaves must not have array bytes read"),
        ("LOAD-034", "error", "a mapped leaf must equal its read, checked as a read is checked"),
        ("LOAD-040", "error", "every saved array leaf must have its zarr array"),
        ("LOAD-041", "error", "a missing chunk is an error when data equal to fill is stored"),
        ("LOAD-042", "error", "every string leaf must be found in _strings.json or older places"),
        ("LOAD-043", "error", "a msgpack placeholder resolves by param name to array or string"),
        ("LOAD-044", "error", "without _METADATA a 0-d placeholder leaf loads as a 0-d array"),
        ("LOAD-050", "error", "a load path must resolve to one pytree item"),
        ("LOAD-051", "error", "v1 pytree: state/, pytree/, the only one; else refused, all named"),
        ("LOAD-052", "error", "a step with several pytree items needs the item named"),
        ("LOAD-053", "error", "a manager root loads its latest committed step or the one asked"),
        ("LOAD-054", "error", "an unfinished (temporary) save must never be read"),
        ("LOAD-055", "error", "a step removed while listed or read is absent, not a failure"),
        ("LOAD-060", "error", "state dict names: key texts joined; two leaves on one name refused"),
        ("LOAD-061", "error", "torch dtypes keep bits; dtypes torch lacks refused unless widened"),
        ("LOAD-062", "error", "scalars stay 0-d tensors; strings stay str (or are left out)"),
        ("LOAD-063", "error", "a sharded (DCP) read reads only the chunks its regions overlap"),
    ),
    **_rules(
        "ocdbt.md",
        ("OCDBT-001", "error", "a manifest, version node or B+tree node must start with its magic"),
        ("OCDBT-002", "error", "the length field must equal the size of the encoded structure"),
        ("OCDBT-003", "error", "the format version must be 0"),
        ("OCDBT-004", "error", "compression_format must be 0 (none) or 1 (zstd)"),
        ("OCDBT-005", "error", "the CRC-32C must match every byte before it"),
        ("OCDBT-006", "error", "a zstd body must be one whole frame within the decoded-size limit"),
        ("OCDBT-007", "error", "every field must lie within the body and the body be used exactly"),
        (
            "OCDBT-008",
            "error",
            "a varint must be at most 10 bytes and below 2**64 (and its field's cap)",
        ),
        ("OCDBT-010", "error", "manifest_kind must be 0 (single) or 1 (numbered)"),
        ("OCDBT-011", "error", "version_tree_arity_log2 must be 1..16 and the same in every node"),
        (
            "OCDBT-012",
            "error",
            "compression_method must be 0 (none) or 1 (zstd with an int32 level)",
        ),
        (
            "OCDBT-020",
            "error",
            "a data file table's prefix and base path lengths must be consistent",
        ),
        ("OCDBT-021", "error", "a data_file_id must index the data file table"),
        ("OCDBT-022", "error", "a reference must lie within an existing data file"),
        ("OCDBT-023", "error", "a data file path must be relative and stay inside the checkpoint"),
        ("OCDBT-024", "error", "no two keys' values may share stored bytes"),
        ("OCDBT-025", "error", "a reader must accept data file bytes that no reference names"),
        ("OCDBT-030", "error", "generation numbers must be non-zero and strictly increasing"),
        ("OCDBT-031", "error", "version counts must respect the version tree arity"),
        ("OCDBT-032", "error", "version node heights must match their references and decrease"),
        ("OCDBT-033", "error", "a version without a root has offset = length = 2**64-1, height 0"),
        ("OCDBT-034", "error", "a version node reference must match its subtree's generations"),
        (
            "OCDBT-040",
            "error",
            "a B+tree node must be non-empty and of the height its parent implies",
        ),
        ("OCDBT-041", "error", "keys within a B+tree node must be strictly increasing"),
        ("OCDBT-042", "error", "subtree_common_prefix_length must not exceed the entry's key"),
        ("OCDBT-043", "error", "value_kind must be 0 (inline) or 1 (out of line)"),
        ("OCDBT-044", "error", "a child's keys must lie between its entry key and the next one"),
        ("OCDBT-050", "error", "a numbered-kind database's latest manifest.<016x> must be valid"),
    ),
    **_rules(
        "arrays.md",
        ("ZARR-001", "error", "an element type must be one of the spec's dtype table"),
        ("ZARR-002", "error", ".zarray must be an object with the required fields, zarr_format 2"),
        ("ZARR-003", "error", "a stored chunk must decode to exactly the chunk's bytes"),
        ("ZARR-004", "error", "a v2 array must use order C or F, no filters, a known compressor"),
        ("ZARR-005", "error", "shape and chunk shape must be integer lists of one rank"),
        ("ZARR-006", "error", "a v2 chunk key joins the grid indices by dimension_separator"),
        ("ZARR-007", "error", "fill_value must be representable in the element type"),
        ("ZARR-008", "error", "an absent chunk reads as the fill value unless all data is stored"),
        (
            "ZARR-009",
            "error",
            "a zero-size array has no chunks: it reads as an empty array, no chunk is missing",
        ),
        ("ZARR-010", "error", "zarr.json must be a v3 array document with the required fields"),
        ("ZARR-011", "error", "chunk_grid must be regular with one chunk size per dimension"),
        ("ZARR-012", "error", "chunk_key_encoding must be default or v2 with separator / or ."),
        ("ZARR-013", "error", "codecs must come from the spec's subset, in kind order"),
        ("ZARR-014", "error", "sharding_indexed must tile the shard and index with bytes+crc32c"),
        ("ZARR-015", "error", "a shard index entry must lie within the shard or be empty"),
        ("ZARR-016", "error", "the shard index CRC-32C must match"),
        ("ZARR-020", "error", "each param of an item must have exactly one zarr metadata key"),
        ("ZARR-021", "error", "every other key of an item must be a chunk key of one param"),
    ),
    **_rules(
        "validation.md",
        ("VAL-001", "error", "the path given to a validator must be a checkpoint"),
        (
            "VAL-002",
            "warning",
            "a temporary step directory of a manager root is reported and not validated",
        ),
        ("VAL-003", "error", "an item's array storage must hold no key that no array leaf owns"),
        ("VAL-004", "error", "every array leaf of the tree must have its zarr array"),
        ("VAL-005", "error", "every zarr array must have the zarr format use_zarr3 states"),
        (
            "VAL-006",
            "error",
            "zarr shapes must agree with value_type, write_shape and array_metadatas",
        ),
        ("VAL-007", "error", "_sharding and array_metadatas must name only array leaves"),
        ("VAL-008", "warning", "every directory of a step or v1 checkpoint should be an item"),
        ("VAL-009", "error", "every file, key and value a checkpoint refers to must be present"),
        ("VAL-010", "warning", "a deep validator reports a chunk too large for its memory"),
    ),
    **_rules(
        "writing.md",
        ("WRITE-001", "error", "a writer must refuse a leaf of a kind the format cannot store"),
        ("WRITE-002", "error", "a writer must refuse a Python int outside the int64 range"),
        ("WRITE-003", "error", "a writer must refuse an array with a zero-size dimension"),
        ("WRITE-004", "error", "an array's param name must have no empty, '.' or '..' segment"),
        ("WRITE-005", "error", "a writer must refuse names its array store cannot hold"),
        ("WRITE-006", "error", "a typed PRNG key is stored as its uint32 key data, impl recorded"),
        ("WRITE-010", "error", "the chunk is the slice, or lowered to divisors as Orbax does it"),
        ("WRITE-011", "error", "a written .zarray must hold the fields and values Orbax writes"),
        ("WRITE-012", "error", "a written zarr.json must use sharding_indexed as Orbax does"),
        ("WRITE-013", "error", "every chunk must be stored, even one equal to the fill value"),
        ("WRITE-014", "error", "per-process OCDBT databases use Orbax's config, then a merge"),
        ("WRITE-015", "warning", "a writer may store chunks raw where zstd saves little"),
        ("WRITE-016", "warning", "a writer should divide slices over 64 MiB into chunks"),
        ("WRITE-017", "warning", "a writer should start out-of-line values at 64-byte offsets"),
        ("WRITE-020", "error", "_METADATA must list every leaf and empty node with its flags"),
        ("WRITE-021", "error", "_sharding must describe every jax.Array's sharding"),
        ("WRITE-022", "error", "each process must write array_metadatas/process_<N>"),
        ("WRITE-023", "error", "_CHECKPOINT_METADATA must hold handlers, timestamps, metadata"),
        ("WRITE-030", "error", "each unique shard must be written once, by its replica-0 owner"),
        ("WRITE-031", "error", "zarr metadata must be written once, by the primary process"),
        ("WRITE-032", "error", "the primary must merge and commit only after every process wrote"),
        ("WRITE-040", "error", "an async save must copy every value to the host before returning"),
        ("DIR-001", "error", "the checkpoint path must be a usable local directory or absent"),
        ("DIR-002", "error", "an existing checkpoint must be refused unless overwriting"),
        ("DIR-003", "error", "a save must write only its own temporary directory"),
        ("DIR-004", "error", "a save must commit in order: tmp, data, documents, marker, rename"),
        ("DIR-005", "error", "a step must be renamed to a temporary name before it is deleted"),
        ("DIR-006", "error", "an overwrite keeps the path whole (exchange) or the old -replaced"),
        ("DIR-007", "error", "a missing path's -replaced checkpoint is renamed back, not removed"),
        ("DIR-008", "error", "concurrent saves to one path each commit a whole tree or conflict"),
    ),
    **_rules(
        "limits.md",
        ("LIMIT-001", "error", "a reader must enforce the limits of the table or document its own"),
        ("LIMIT-002", "error", "_METADATA must not hold more tree_metadata entries than the limit"),
        ("LIMIT-003", "error", "a key text must not be longer than the key length limit"),
        ("LIMIT-004", "error", "a key path must not hold more keys than the depth limit"),
        ("LIMIT-005", "error", "a reader must not list more directory entries than the limit"),
        ("LIMIT-006", "error", "a reader must not allocate past the memory it may use"),
    ),
}

RULES: Mapping[str, Rule] = MappingProxyType(_ALL)


def rule(rule_id: str) -> Rule:
    """The rule with this id; KeyError for an unknown id (a bug in ockpt, not in the input)."""
    return RULES[rule_id]
