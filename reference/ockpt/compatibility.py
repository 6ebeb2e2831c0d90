"""``ockpt compat``: which format features a checkpoint uses, and the oldest Orbax that reads it.

Each feature is found in the checkpoint's fingerprint (`fingerprints`: the one description of
how a checkpoint is stored) and dated by the release that first restores a checkpoint using it,
from spec/history.md and from restores by real releases (tests/test_compat.py runs every fixture
through the releases of `ockpt.testing.orbax_venvs` and checks each date). A *required* feature
sets the oldest release; an informative one is reported with the release that gives it meaning
(older releases restore the checkpoint without it: a typed PRNG key comes back as its uint32
data). "Restores" means ``PyTreeCheckpointer().restore`` of the pytree item, arrays as numpy;
element types depend on the tensorstore a release is installed with, and their dates are those
of the pins of fixtures/README.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .fingerprints import fingerprint
from .names import MSGPACK_FILE, ROOT_METADATA_FILE, STRINGS_FILE, ZARR3_METADATA

__all__ = ["Feature", "CompatReport", "compat", "version_key", "BASELINE"]

#: The oldest release the real-release matrix holds: a checkpoint of no dated feature reads there
#: (older releases may read it too; nothing here says).
BASELINE = "0.3.5"
#: The specification version of this table, and the features added after 1.0.0.
SPEC_VERSION = "1.1.0"


@dataclass(frozen=True)
class Feature:
    """One format feature a checkpoint uses: `orbax` is the oldest release that restores a
    checkpoint using it (`required`), or that gives it its meaning (not `required`); `until`
    the newest that restores it, where later releases no longer do; `source` the history row
    or observation that dates it; `spec` the specification version that describes it."""

    name: str
    found: str
    orbax: str
    source: str
    required: bool = True
    spec: str = "1.0.0"
    until: str | None = None  # the newest release that restores it, where later ones cannot


@dataclass(frozen=True)
class CompatReport:
    """What `compat` found: the features, the oldest Orbax release that restores the checkpoint
    (the latest `orbax` of its required features, at least `BASELINE`), the newest where a
    feature is no longer read by later releases (else None), and the specification version a
    reader needs."""

    path: str
    features: tuple[Feature, ...]
    oldest_orbax: str
    newest_orbax: str | None
    spec_version: str

    def readable_by(self, release: str) -> bool:
        """Whether Orbax `release` restores the checkpoint, as far as its features say."""
        key = version_key(release)
        if self.newest_orbax is not None and key > version_key(self.newest_orbax):
            return False
        return key >= version_key(self.oldest_orbax)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "features": [asdict(f) for f in self.features],
            "oldest_orbax": self.oldest_orbax,
            "newest_orbax": self.newest_orbax,
            "spec_version": self.spec_version,
        }

    def format_text(self) -> str:
        upto = "" if self.newest_orbax is None else f" and <= {self.newest_orbax}"
        lines = [f"{self.path}: restorable by Orbax >= {self.oldest_orbax}{upto}"]
        lines.append(f"specification version {self.spec_version}")
        for f in self.features:
            kind = "needs" if f.required else "informative, since"
            lines.append(f"  {f.name}: {f.found} ({kind} {f.orbax}; {f.source})")
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
#: Element types that the tensorstore pinned with earlier releases cannot open: name -> (the
#: oldest release that restores it, with its pinned tensorstore; the release before that fails).
_DTYPES = {
    "int2": ("0.11.28", "0.10.3 (tensorstore 0.1.71) cannot open it; 0.11.28 (0.1.78) can"),
    "float8_e3m4": ("0.11.28", "0.10.3 (tensorstore 0.1.71) cannot open it; 0.11.28 (0.1.78) can"),
    "float4_e2m1fn": ("0.12.8", "0.11.28 (tensorstore 0.1.78) cannot open it; 0.12.8 (0.1.86) can"),
    "float8_e8m0fnu": (
        "0.12.8",
        "0.11.28 (tensorstore 0.1.78) cannot open it; 0.12.8 (0.1.86) can",
    ),
}


def compat(path: Any) -> CompatReport:
    """The format features of the checkpoint at `path` (any layout, local or URL), dated."""
    described = fingerprint(path)
    found: dict[str, Feature] = {}
    for feature in _features(described):
        found.setdefault(feature.name, feature)
    features = tuple(sorted(found.values(), key=lambda f: (version_key(f.orbax), f.name)))
    required = [f.orbax for f in features if f.required] + [BASELINE]
    until = [f.until for f in features if f.until is not None]
    return CompatReport(
        path=str(path),
        features=features,
        oldest_orbax=max(required, key=version_key),
        newest_orbax=min(until, key=version_key) if until else None,
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
            "0.4.4",
            f"{_HISTORY} 0.4.4",
        )
    if storage != "inline" and MSGPACK_FILE not in files:
        yield Feature(
            "no_msgpack",
            "the tree only in `_METADATA` (no msgpack `checkpoint` file)",
            "0.5.16",
            f"{_HISTORY} 0.5.16: releases up to 0.5.15 take the tree from the msgpack file",
        )
    if any(ZARR3_METADATA in array for array in _arrays(node)):
        yield Feature("zarr3", "zarr v3 arrays", "0.4.5", f"{_HISTORY} 0.4.5")
    if STRINGS_FILE in files:
        yield Feature(
            "strings_at_root",
            "string leaves in `_strings.json` at the item root",
            "0.4.8",
            f"{_HISTORY} 0.4.8",
        )
    elif f"<leaf>/{STRINGS_FILE}" in files:
        yield Feature(
            "strings_flat_form",
            "string leaves in the flat `_strings.json` of the first string leaf's directory",
            BASELINE,
            f"{_HISTORY} <= 0.3.5: releases from 0.4.8 read `_strings.json` at the item root "
            "only (0.4.8 cannot restore it)",
            until="0.3.5",
        )
    for dtype in node.get("dtypes", ()):
        if dtype in _DTYPES:
            release, why = _DTYPES[dtype]
            yield Feature(f"dtype_{dtype}", f"{dtype} arrays", release, why)
    documents = json.dumps(node.get("documents", {}))
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


def _arrays(node: dict[str, Any]) -> list[dict[str, Any]]:
    arrays = node.get("arrays", [])
    return list(arrays.values()) if isinstance(arrays, dict) else list(arrays)
