"""``ockpt compat``: which format features a checkpoint uses, and the oldest Orbax that reads it.

Each feature is found in the checkpoint's fingerprint (`fingerprints`: the one description of
how a checkpoint is stored) and dated by the release that first restores a checkpoint using it,
from spec/history.md and from restores by real releases (tests/test_compatibility.py runs every fixture
through the releases of `ockpt.testing.orbax_venvs` and checks each date). A *required* feature
sets the oldest release; an informative one is reported with the release that gives it meaning
(older releases restore the checkpoint without it: a typed PRNG key comes back as its uint32
data). "Restores" means ``PyTreeCheckpointer().restore`` of the pytree item, arrays as numpy.
Element types (int2, float4, ...) depend on the tensorstore a release is installed with, not on
the release: they give the oldest tensorstore instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from .fingerprints import fingerprint
from .names import MSGPACK_FILE, ROOT_METADATA_FILE, STRINGS_FILE, ZARR3_METADATA

__all__ = ["Feature", "CompatReport", "compat", "version_key", "BASELINE"]

#: The oldest release the real-release matrix installs (0.2.2 and older do not resolve with the
#: oldest pins, jax 0.4.13): a checkpoint of no dated feature restores there.
BASELINE = "0.2.3"
#: The specification version of this table, and the features added after 1.0.0.
SPEC_VERSION = "1.1.0"


@dataclass(frozen=True)
class Feature:
    """One format feature a checkpoint uses: `orbax` is the oldest release that restores a
    checkpoint using it (`required`), or that gives it its meaning (not `required`); `until`
    the newest that restores it, where later releases no longer do; `tensorstore` the oldest
    tensorstore that opens it (element types: whatever the Orbax release); `source` the history
    row or observation that dates it; `spec` the specification version that describes it."""

    name: str
    found: str
    orbax: str
    source: str
    required: bool = True
    spec: str = "1.0.0"
    until: str | None = None  # the newest release that restores it, where later ones cannot
    tensorstore: str | None = None


@dataclass(frozen=True)
class CompatReport:
    """What `compat` found: the features, the oldest Orbax release that restores the checkpoint
    (the latest `orbax` of its required features, at least `BASELINE`), the newest where a
    feature is no longer read by later releases (else None), the oldest tensorstore that opens
    its element types (None: any), and the specification version a reader needs."""

    path: str
    features: tuple[Feature, ...]
    oldest_orbax: str
    newest_orbax: str | None
    oldest_tensorstore: str | None
    spec_version: str

    def readable_by(self, release: str, tensorstore: str | None = None) -> bool:
        """Whether Orbax `release` restores the checkpoint, as far as its features say; with
        `tensorstore`, installed with that tensorstore."""
        key = version_key(release)
        if self.newest_orbax is not None and key > version_key(self.newest_orbax):
            return False
        if tensorstore is not None and self.oldest_tensorstore is not None:
            if version_key(tensorstore) < version_key(self.oldest_tensorstore):
                return False
        return key >= version_key(self.oldest_orbax)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "features": [asdict(f) for f in self.features],
            "oldest_orbax": self.oldest_orbax,
            "newest_orbax": self.newest_orbax,
            "oldest_tensorstore": self.oldest_tensorstore,
            "spec_version": self.spec_version,
        }

    def format_text(self) -> str:
        upto = "" if self.newest_orbax is None else f" and <= {self.newest_orbax}"
        ts = self.oldest_tensorstore
        with_ts = "" if ts is None else f", installed with tensorstore >= {ts}"
        lines = [f"{self.path}: restorable by Orbax >= {self.oldest_orbax}{upto}{with_ts}"]
        lines.append(f"specification version {self.spec_version}")
        for f in self.features:
            if f.tensorstore is not None:
                need = f"needs tensorstore {f.tensorstore}"
            else:
                need = f"needs {f.orbax}" if f.required else f"informative, since {f.orbax}"
            lines.append(f"  {f.name}: {f.found} ({need}; {f.source})")
        return "\n".join(lines)


def version_key(release: str) -> tuple[int, ...]:
    """A release number as a tuple that orders releases (``"0.11.28"`` -> ``(0, 11, 28)``)."""
    try:
        return tuple(int(part) for part in release.split("."))
    except ValueError:
        raise ValueError(f"not a release number: {release!r}") from None


# ---------------------------------------------------------------------------------------------
# What dates each feature.

_HISTORY = "spec/history.md"
#: Element types older tensorstores cannot open, whatever the Orbax release (Orbax 0.10.3 opens
#: all four when installed with tensorstore 0.1.86): name -> the oldest tensorstore seen to
#: open it, and the newest seen not to.
_DTYPES = {
    "int2": ("0.1.78", "0.1.71"),
    "float8_e3m4": ("0.1.78", "0.1.71"),
    "float4_e2m1fn": ("0.1.86", "0.1.78"),
    "float8_e8m0fnu": ("0.1.86", "0.1.78"),
}


def compat(path: Any) -> CompatReport:
    """The format features of the checkpoint at `path` (any layout, local or URL), dated."""
    described = fingerprint(path)
    found: dict[str, Feature] = {}
    for feature in _features(described):
        found.setdefault(feature.name, feature)
    root_strings = found.get("strings_at_root")
    if root_strings is not None and not _first_string_is_nested(path):
        # 0.4.0 and 0.4.1 look in the first string leaf's parent: the root, for a top-level leaf
        found["strings_at_root"] = replace(
            root_strings,
            orbax="0.4.0",
            source="0.3.5 looks for it in the first string leaf's own directory; 0.4.0 in its "
            "parent's, the root for a top-level leaf",
        )
    features = tuple(sorted(found.values(), key=lambda f: (version_key(f.orbax), f.name)))
    required = [f.orbax for f in features if f.required] + [BASELINE]
    until = [f.until for f in features if f.until is not None]
    stores = [f.tensorstore for f in features if f.tensorstore is not None]
    return CompatReport(
        path=str(path),
        features=features,
        oldest_orbax=max(required, key=version_key),
        newest_orbax=min(until, key=version_key) if until else None,
        oldest_tensorstore=max(stores, key=version_key) if stores else None,
        spec_version=max([f.spec for f in features] + ["1.0.0"], key=version_key),
    )


def _features(node: dict[str, Any], *, top: bool = True) -> Iterator[Feature]:
    """The features of a fingerprint node and of the nodes under it."""
    kind = node.get("kind")
    files = set(node.get("files", ()))
    if kind == "v1_checkpoint":
        yield Feature(
            "v1_checkpoint",
            "a v1 checkpoint (`orbax.checkpoint` marker)",
            "0.11.19",
            f"{_HISTORY} 0.11.19: the v1 API loads it; older releases restore its pytree "
            "directory with PyTreeCheckpointer",
            required=False,
        )
        if "state" in node.get("items", {}):
            yield Feature(
                "v1_state",
                "its pytree checkpointable is `state/`",
                "0.12.0",
                f"{_HISTORY} 0.12.0: `pytree/` renamed `state/`",
                required=False,
            )
    if kind in ("json_item", "random_key_item", "proto_item") and not top:
        yield Feature(
            f"checkpointable_{kind}",
            f"a {kind.replace('_', ' ')} beside the pytree",
            "0.4.8",
            "spec/checkpointables.md: read by its own handler, not by a pytree restore",
            required=False,
            spec="1.1.0",
        )
    if ROOT_METADATA_FILE in files:
        yield Feature(
            "root_metadata",
            "`metadata/_ROOT_METADATA`",
            "0.10.0",
            f"{_HISTORY} 0.10: root metadata in `_ROOT_METADATA`",
            required=False,
        )
    if kind == "pytree_item":
        yield from _item_features(node, files)
    for child in node.get("items", {}).values():
        yield from _features(child, top=False)
    for step in node.get("steps", ()):
        yield from _features(step, top=False)


def _item_features(node: dict[str, Any], files: set[str]) -> Iterator[Feature]:
    storage = node.get("storage")
    if storage == "ocdbt":
        yield Feature(
            "ocdbt",
            "arrays in an OCDBT database",
            "0.4.0",
            f"{_HISTORY} 0.4.0: OCDBT read by default (0.3.5's default restore refuses it)",
        )
    if "process_databases" in node.get("ocdbt", {}):
        yield Feature(
            "ocdbt_per_process",
            "per-process OCDBT databases merged by the root database",
            "0.4.0",
            f"{_HISTORY} 0.4.4 (written); 0.4.0 already restores them, through the root",
        )
    if storage != "inline" and MSGPACK_FILE not in files:
        yield Feature(
            "no_msgpack",
            "the tree only in `_METADATA` (no msgpack `checkpoint` file)",
            "0.5.21",
            "releases up to 0.5.20 take the tree from the msgpack file (0.5.20 cannot restore "
            "without it; 0.5.21 can)",
        )
    if any(ZARR3_METADATA in array for array in _arrays(node)):
        yield Feature("zarr3", "zarr v3 arrays", "0.4.5", f"{_HISTORY} 0.4.5")
    if STRINGS_FILE in files:
        yield Feature(
            "strings_at_root",
            "string leaves in `_strings.json` at the item root",
            "0.4.2",
            "0.4.1 looks for it in the directory of the first string leaf's parent, which is "
            "not the root: 0.4.2 reads the root",
        )
    elif f"<leaf>/{STRINGS_FILE}" in files:
        yield Feature(
            "strings_flat_form",
            "string leaves in the flat `_strings.json` of the first string leaf's directory",
            "0.3.0",
            f"{_HISTORY} <= 0.3.5: 0.2.7 has no string leaves; releases from 0.4.0 look for "
            "`_strings.json` elsewhere",
            until="0.3.5",
        )
    for dtype in node.get("dtypes", ()):
        if dtype in _DTYPES:
            opens, not_before = _DTYPES[dtype]
            yield Feature(
                f"dtype_{dtype}",
                f"{dtype} arrays",
                BASELINE,
                f"tensorstore {not_before} cannot open them, {opens} can",
                tensorstore=opens,
            )
    documents = json.dumps(node.get("documents", {}))
    if '"string=Tuple"' in documents:
        yield Feature(
            "empty_tuple",
            "an empty tuple recorded as value type `Tuple` in `_METADATA`",
            "0.7.0",
            f"{_HISTORY} <= 0.5.15 wrote it as `None`; 0.6.4 cannot restore `Tuple` "
            "(Unrecognized typestr), 0.7.0 can",
        )
    if "random_key_impl" in documents:
        yield Feature(
            "typed_prng_keys",
            "typed PRNG keys (`random_key_impl` in `array_metadatas`)",
            "0.11.9",
            f"{_HISTORY} 0.11.9: restored as keys; older releases give their uint32 key data",
            required=False,
            spec="1.1.0",
        )
    if '"store_array_data_equal_to_fill_value"' in documents:
        yield Feature(
            "fill_value_chunks_stored",
            "`_METADATA.store_array_data_equal_to_fill_value`",
            "0.10.0",
            f"{_HISTORY} 0.10: a missing chunk is an error when the flag is true",
            required=False,
        )


def _first_string_is_nested(path: Any) -> bool:
    """Whether the first string leaf of the pytree at `path`, in tree order (dict keys by code
    point, level by level; list items by index), is below the top level: releases 0.4.0 and
    0.4.1 look for `_strings.json` in its parent's directory, 0.3.5 in its own."""
    from .errors import OckptError
    from .reader import pytree_metadata

    try:
        tree = pytree_metadata(path)
    except OckptError:
        return True  # several pytrees, or none to read: the older readers' case is not excluded
    stack: list[tuple[int, Any]] = [(0, tree)]
    while stack:
        depth, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((depth + 1, node[k]) for k in sorted(node, reverse=True))
        elif isinstance(node, (list, tuple)):
            stack.extend((depth + 1, v) for v in reversed(node))
        elif node is not None and node.value_type == "string":
            return depth > 1
    return False


def _arrays(node: dict[str, Any]) -> list[dict[str, Any]]:
    arrays = node.get("arrays", [])
    return list(arrays.values()) if isinstance(arrays, dict) else list(arrays)
