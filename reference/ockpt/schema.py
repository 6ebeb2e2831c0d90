"""The JSON Schemas of the format's documents, and checks that report rule ids.

The schemas ship inside the package (``ockpt/schemas/*.json``, JSON Schema draft 2020-12) and are
loaded with `importlib.resources`, so an installed ockpt carries them. Each constrained subschema
has a ``"$comment"`` holding a rule id; a schema failure is reported under the id of the nearest
``$comment`` on the path from the schema root to the failing keyword.

* `validate_document(kind, obj)`: the schema alone, on an already parsed document (plus, for
  ``sharding``, each decoded inner sharding document against ``sharding-spec``).
* `check_document(kind, data)`: everything a strict reader checks on one document: strict
  parsing of the bytes (JSON-001..003), the schema, then the rules a schema cannot express
  (tree keys, tree shape, canonical base64, mesh shape), via the document models.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from .errors import FormatError, MsgpackError
from .findings import Finding
from .names import (
    ARRAY_METADATAS_DIR,
    ARRAY_METADATAS_PROCESS_FILE,
    CHECKPOINT_METADATA_FILE,
    METADATA_FILE,
    MSGPACK_FILE,
    ROOT_METADATA_NAME,
    SHARDING_FILE,
    STRINGS_FILE,
)
from .rules import RULES

if TYPE_CHECKING:  # jsonschema is imported when a document is first checked, not with ockpt
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

__all__ = [
    "SCHEMA_FILES",
    "load_schema",
    "schema_kinds",
    "validate_document",
    "check_document",
    "kind_for_path",
]

#: Document kind -> schema file name inside ``ockpt/schemas``.
SCHEMA_FILES: Mapping[str, str] = {
    "metadata": "metadata.schema.json",
    "checkpoint-metadata": "checkpoint-metadata.schema.json",
    "root-metadata": "root-metadata.schema.json",
    "sharding": "sharding.schema.json",
    "sharding-spec": "sharding-spec.schema.json",
    "array-metadatas": "array-metadatas.schema.json",
    "strings": "strings.schema.json",
    "msgpack-view": "msgpack-view.schema.json",
    "zarray": "zarray.schema.json",
    "zarr-json": "zarr-json.schema.json",
    "ocdbt-keys": "ocdbt-keys.schema.json",
}

_RULE_ID = re.compile(r"[A-Z]+(?:-[A-Z]+)*-[0-9]{3}")


def schema_kinds() -> tuple[str, ...]:
    """The document kinds that have a schema."""
    return tuple(SCHEMA_FILES)


@functools.cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files("ockpt").joinpath("schemas", name).read_text(encoding="utf-8")
    return json.loads(text)


def load_schema(kind: str) -> dict[str, Any]:
    """The schema of a document kind (a fresh copy the caller may change)."""
    if kind not in SCHEMA_FILES:
        raise KeyError(f"no schema for document kind {kind!r}; kinds: {sorted(SCHEMA_FILES)}")
    return json.loads(json.dumps(_load(SCHEMA_FILES[kind])))


@functools.cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources_ = [
        (schema["$id"], Resource.from_contents(schema))
        for schema in (_load(name) for name in SCHEMA_FILES.values())
    ]
    return Registry().with_resources(resources_)


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_load(SCHEMA_FILES[kind]), registry=_registry())


def _resolve(ref: str, base: dict[str, Any], root: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Follow a ``$ref`` (local ``#...`` or another schema's ``$id``): (target, its root)."""
    uri, _, fragment = ref.partition("#")
    if uri:
        root = _registry().contents(uri)
    node: Any = root
    for token in fragment.split("/")[1:] if fragment else ():
        token = token.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node, root


def _rule_for(error: ValidationError, root: dict[str, Any]) -> str:
    """The rule id of the nearest ``$comment`` on the way to the failing keyword."""
    rule = "JSON-004"
    node: Any = root

    def note(n: Any) -> None:
        nonlocal rule
        if isinstance(n, dict):
            comment = n.get("$comment")
            if isinstance(comment, str) and _RULE_ID.fullmatch(comment) and comment in RULES:
                rule = comment

    note(node)
    for step in error.absolute_schema_path:
        # jsonschema leaves `$ref` hops out of the path: follow them when the step is not here.
        hops = 0
        while isinstance(node, dict) and step not in node and "$ref" in node and hops < 32:
            node, root = _resolve(node["$ref"], node, root)
            note(node)
            hops += 1
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            break
        note(node)
    return rule


def _pointer(parts: Any, prefix: str = "") -> str:
    return prefix + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _schema_findings(
    kind: str, obj: Any, *, file: str | None, prefix: str = ""
) -> Iterator[Finding]:
    validator = _validator(kind)
    root = _load(SCHEMA_FILES[kind])
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    for error in errors:
        parts = list(error.absolute_path)
        if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
            parts.append(error.instance)  # the offending key itself
        yield Finding.of(
            _rule_for(error, root),
            error.message if len(error.message) <= 300 else error.message[:300] + "...",
            file=file,
            pointer=_pointer(parts, prefix),
        )


# ---------------------------------------------------------------------------------------------
# The tree entries of `_METADATA`, checked without jsonschema where they are plainly valid


#: `$defs/key` for a sequence key (``key_type`` 1); `fullmatch` is stricter than the schema's
#: ``^...$`` (which lets a final newline through)
_SEQUENCE_KEY = re.compile(r"0|[1-9][0-9]*")


def _key_conforms(k: Any) -> bool:
    if type(k) is not dict or len(k) != 2:
        return False
    text, kind = k.get("key"), k.get("key_type")
    if type(text) is not str or type(kind) is not int:
        return False
    return kind == 2 or (kind == 1 and _SEQUENCE_KEY.fullmatch(text) is not None)


def _value_conforms(value: Any, value_types: frozenset[str]) -> bool:
    if type(value) is not dict or value.get("value_type") not in value_types:
        return False
    if "skip_deserialize" in value and type(value["skip_deserialize"]) is not bool:
        return False
    shape = value.get("write_shape")
    return shape is None or (type(shape) is list and all(type(n) is int and n >= 0 for n in shape))


def _entry_conforms(entry: Any, value_types: frozenset[str]) -> bool:
    """Whether one `_METADATA` tree entry surely meets the schema's ``$defs/entry``: a
    sufficient test, stricter than the schema (no integral floats, no extra key fields), so
    False only means that jsonschema decides."""
    if type(entry) is not dict:
        return False
    keys, value = entry.get("key_metadata"), entry.get("value_metadata")
    return (
        type(keys) is list
        and all(_key_conforms(k) for k in keys)
        and _value_conforms(value, value_types)
    )


def _schema_input(kind: str, obj: Any) -> Any:
    """What jsonschema is given for `obj`: a `_METADATA` whose tree entries all pass
    `_entry_conforms` goes without them (it then finds what it finds in the whole document:
    only the entries fall under ``tree_metadata``). jsonschema takes about 0.2 ms per entry,
    this test a few microseconds: 2 s against 30 ms for 10,000 leaves."""
    if kind != "metadata" or type(obj) is not dict:
        return obj
    tree = obj.get("tree_metadata")
    if type(tree) is not dict:
        return obj
    from .documents.metadata import VALUE_TYPES

    if not all(_entry_conforms(e, VALUE_TYPES) for e in tree.values()):
        return obj
    return {**obj, "tree_metadata": {}}


def validate_document(kind: str, obj: Any, *, file: str | None = None) -> list[Finding]:
    """Check a parsed document against the schema of `kind`; one finding per failure.

    For ``sharding`` the inner documents (JSON strings) are decoded, strictly, and checked
    against ``sharding-spec`` too; their findings carry pointers into the outer document.
    """
    if kind not in SCHEMA_FILES:
        raise KeyError(f"no schema for document kind {kind!r}; kinds: {sorted(SCHEMA_FILES)}")
    findings = list(_schema_findings(kind, _schema_input(kind, obj), file=file))
    if kind == "sharding" and isinstance(obj, dict):
        from .documents._json import child, parse_json

        for key, value in obj.items():
            if not isinstance(value, str):
                continue  # already reported (SHARD-002)
            pointer = child("", key)
            try:
                inner = parse_json(value, file=file or SHARDING_FILE, pointer=pointer)
            except FormatError as e:
                findings.append(Finding.from_error(e, file=file))
                continue
            findings.extend(_schema_findings("sharding-spec", inner, file=file, prefix=pointer))
    return findings


def _semantic(kind: str, obj: Any, *, file: str, data: bytes | None = None) -> list[Finding]:
    """The rules a schema cannot state, checked by parsing with the document model; from the
    document's bytes `data` where given (`obj` parsed from them): a `_METADATA` that
    detecting the layout parsed is then not parsed again (`MetadataDocument.from_bytes`)."""
    from .documents import (
        ArrayMetadatas,
        CheckpointMetadata,
        MetadataDocument,
        RootMetadata,
        ShardingDocument,
        StringsDocument,
    )
    from .documents.sharding import parse_sharding

    models: dict[str, Any] = {
        "metadata": MetadataDocument,
        "checkpoint-metadata": CheckpointMetadata,
        "root-metadata": RootMetadata,
        "sharding": ShardingDocument,
        "array-metadatas": ArrayMetadatas,
        "strings": StringsDocument,
    }
    try:
        if kind == "sharding-spec":
            parse_sharding(json.dumps(obj), file=file)
        elif kind in models and data is not None:
            models[kind].from_bytes(data, file=file)
        elif kind in models:
            models[kind].from_json(obj, file=file)
    except FormatError as e:
        return [Finding.from_error(e, file=file)]
    return []


def check_document(kind: str, data: bytes | str | Any, *, file: str | None = None) -> list[Finding]:
    """Every check a strict reader makes on one document.

    `data` is the raw bytes (or text) of the file; for ``msgpack-view`` it is the bytes of the
    legacy msgpack ``checkpoint`` file, which is decoded, turned into its JSON view and checked.
    Parsed objects (not bytes/str) skip the parsing step. Schema failures come first; the rules
    only the models check are looked at when the schema found no error.
    """
    name = file or kind
    if kind == "msgpack-view":
        return _check_msgpack(data, file=name)
    if isinstance(data, (bytes, bytearray, str)):
        from .documents._json import parse_json

        try:
            obj = parse_json(bytes(data) if isinstance(data, bytearray) else data, file=name)
        except FormatError as e:
            return [Finding.from_error(e, file=name)]
    else:
        obj = data
    findings = validate_document(kind, obj, file=name)
    if not any(f.is_error for f in findings):
        raw = data if isinstance(data, bytes) else None
        findings.extend(_semantic(kind, obj, file=name, data=raw))
    return findings


def _check_msgpack(data: Any, *, file: str) -> list[Finding]:
    from .msgpack_legacy import decode_checkpoint, placeholders, to_json_view

    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            tree = decode_checkpoint(bytes(data), file=file)
        except MsgpackError as e:
            return [Finding.from_error(e, file=file)]
        view = to_json_view(tree)
    else:
        tree, view = None, data
    findings = validate_document("msgpack-view", view, file=file)
    if tree is not None:
        try:
            placeholders(tree, file=file)
        except MsgpackError as e:
            findings.append(Finding.from_error(e, file=file))
    return findings


def kind_for_path(path: str | os.PathLike[str]) -> str | None:
    """The document kind of a checkpoint file, from its name (None: no schema applies).

    ``_METADATA``, ``_CHECKPOINT_METADATA``, ``_ROOT_METADATA``, ``_sharding``,
    ``_strings.json``, ``array_metadatas/process_<N>`` and the legacy msgpack ``checkpoint``.
    """
    p = os.fspath(path)
    name = os.path.basename(p)
    parent = os.path.basename(os.path.dirname(p))
    fixed = {
        METADATA_FILE: "metadata",
        CHECKPOINT_METADATA_FILE: "checkpoint-metadata",
        ROOT_METADATA_NAME: "root-metadata",
        SHARDING_FILE: "sharding",
        STRINGS_FILE: "strings",
        MSGPACK_FILE: "msgpack-view",
    }
    if name in fixed:
        return fixed[name]
    if parent == ARRAY_METADATAS_DIR and ARRAY_METADATAS_PROCESS_FILE.fullmatch(name):
        return "array-metadatas"
    return None
