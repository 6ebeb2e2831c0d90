"""The golden fixtures as conformance cases: one list, shared by the runner and the export.

- `golden_cases(fixtures)`: every pytree item of every golden fixture set
  (``fixtures/<set>/<case>/expected.json``: ``orbax-<version>``, ``ockpt-<version>`` and any
  other set holding such records), with the tree a reader must give back without a target,
  how to reach the item, and what it needs of a reader (capabilities and features);
- `database_cases(fixtures)`: bare OCDBT databases (``fixtures/<set>/<case>/expected-ocdbt.json``,
  ``fixtures/_record_ocdbt.py``): the keys of the latest generation, with value lengths and
  digests;
- `bad_cases(fixtures, golden)`: the variants of the bad-data tier (``fixtures/bad``) with the
  rule ids a refusal may name.

The fixtures' own record readers (``fixtures/_record.py``, ``_record_ocdbt.py``) are imported
from the fixtures directory; this module reads no checkpoint file itself.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..names import METADATA_FILE, MSGPACK_FILE
from .cases import READER_RULES
from .leaves import tree_features

__all__ = [
    "FixtureCase",
    "DatabaseCase",
    "BadCase",
    "golden_cases",
    "database_cases",
    "bad_cases",
    "record_module",
]


@dataclass
class FixtureCase:
    """One pytree item of a golden fixture."""

    id: str  # "<set without 'orbax-'>/<case>[/<item path>]", as the report names it
    fixture_set: str  # directory name: "orbax-0.12.8", "ockpt-0.1.0"
    case_dir: Path
    rel: str  # the item's path under checkpoint/ ("" = checkpoint/ itself)
    source: str  # "orbax 0.12.8", "ockpt 0.1.0"
    release: str  # Orbax release whose format it holds, "0.12.8"
    era: str  # "0.12"
    layout: dict[str, Any]  # {"kind", "ocdbt", "zarr_version"}
    tree: Any  # what a load without target gives back (numpy, Python scalars, PrngKey ...)
    step: int | None
    item: str | None
    needs: dict[str, Any]  # reads capabilities the case needs (protocol.supports)
    features: list[str]
    no_metadata: bool  # no _METADATA: a scalar may come back as a 0-d array
    multiprocess: bool
    description: str = ""

    @property
    def checkpoint(self) -> Path:
        return self.case_dir / "checkpoint"

    @property
    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.step is not None:
            out["step"] = self.step
        if self.item is not None:
            out["item"] = self.item
        return out


@dataclass
class DatabaseCase:
    """A bare OCDBT database and the keys of its latest generation."""

    id: str
    fixture_set: str
    case_dir: Path
    database: Path
    keys: dict[str, list[Any]]  # key -> [value length, sha256 hex]
    features: list[str]
    description: str = ""
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class BadCase:
    """A variant of the bad-data tier."""

    id: str  # "bad/<variant>"
    name: str
    path: Path
    outcome: str  # "error" (a reader must refuse) or "may_error"
    rule: str | None  # the rule a validator reports
    accepted_rules: list[str]  # the rules a reader's refusal may name
    error_class: str | None  # ockpt's error class for a refusal
    damage: str
    note: str
    known_reader_issue: str | None
    base: str
    needs: dict[str, Any]
    features: list[str]
    entry: dict[str, Any] = field(default_factory=dict)


def record_module(fixtures: Path, name: str = "_record") -> Any:
    """A record reader of the fixtures directory (``_record``, ``_record_ocdbt``), loaded from
    that file alone: the directory is not put on ``sys.path``, so nothing else in it can be
    imported in its place."""
    if name not in ("_record", "_record_ocdbt"):
        raise ValueError(f"no record reader {name!r}")
    path = (Path(fixtures) / f"{name}.py").resolve()
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def _item_kwargs(rel: str) -> tuple[int | None, str | None]:
    if "/" in rel:
        step_dir, item = rel.split("/", 1)
        digits = "".join(ch for ch in step_dir.split("_")[-1] if ch.isdigit())
        return int(digits), item
    return None, (rel or None)


def golden_cases(fixtures: Path) -> list[FixtureCase]:
    """Every pytree item of every golden fixture set, in a stable order."""
    fixtures = Path(fixtures)
    _record = record_module(fixtures)
    out: list[FixtureCase] = []
    records = [
        p
        for p in fixtures.glob("*/*/expected.json")
        if p.parts[-3] != "bad" and not p.parts[-3].startswith(("_", "."))
    ]
    for path in sorted(records):
        case_dir = path.parent
        record = _record.load_expected(case_dir)
        versions = record["versions"]
        writer = versions.get("writer", "orbax")
        release = ".".join(map(str, _record.release_of(record)))
        era = ".".join(release.split(".")[:2])
        fixture_set = case_dir.parent.name.removeprefix("orbax-")
        source = f"{writer} {versions['orbax-checkpoint' if writer == 'orbax' else writer]}"
        lay = dict(record.get("layout", {}))
        multiprocess = "devices" in record.get("options", {})
        for rel in record["items"]:
            # what the checkpoint can give back (a key saved before its implementation was
            # recorded is its key data)
            tree = _record.decode_tree(_record.as_restored(record, rel, case_dir), case_dir)
            for name in record.get("restored_as_none", []):
                if isinstance(tree, dict):
                    tree[name] = None
            step, item = _item_kwargs(rel)
            needs: dict[str, Any] = {
                "layouts": lay.get("kind", "item"),
                "releases": era,
                "ocdbt": bool(lay.get("ocdbt", False)),
            }
            if lay.get("zarr_version"):
                needs["zarr"] = lay["zarr_version"]
            if multiprocess:
                needs["multiprocess"] = True
            features = set(tree_features(tree))
            if "typed_keys" in features:
                needs["typed_keys"] = True
            item_dir = case_dir / "checkpoint" / rel
            if multiprocess:
                features.add("multiprocess")
            if record.get("options", {}).get("aggregate"):
                features.add("aggregated")
            if (item_dir / MSGPACK_FILE).is_file():
                features.add("msgpack")
            no_metadata = not (item_dir / METADATA_FILE).exists()
            if no_metadata:
                features.add("no_metadata")
            out.append(
                FixtureCase(
                    id=f"{fixture_set}/{case_dir.name}" + (f"/{rel}" if rel else ""),
                    fixture_set=case_dir.parent.name,
                    case_dir=case_dir,
                    rel=rel,
                    source=source,
                    release=release,
                    era=era,
                    layout=lay,
                    tree=tree,
                    step=step,
                    item=item,
                    needs=needs,
                    features=sorted(features),
                    no_metadata=no_metadata,
                    multiprocess=multiprocess,
                    description=record.get("description", ""),
                )
            )
    return out


def database_cases(fixtures: Path) -> list[DatabaseCase]:
    """Every bare OCDBT database fixture (``expected-ocdbt.json`` records)."""
    fixtures = Path(fixtures)
    if not (fixtures / "_record_ocdbt.py").is_file():
        return []
    rec = record_module(fixtures, "_record_ocdbt")
    out = []
    for path in sorted(fixtures.glob(f"*/*/{rec.RECORD_FILE}")):
        case_dir = path.parent
        record = rec.load(case_dir)
        structure = record.get("structure", {})
        features = []
        if structure.get("min_root_height", 0) > 0:
            features.append("btree_interior_nodes")
        if structure.get("version_tree_node_heights"):
            features.append("version_tree_nodes")
        compression = structure.get("compression", "zstd")
        if compression is None:
            features.append("uncompressed_nodes")
        elif compression != "zstd":
            features.append(f"compression:{compression}")
        out.append(
            DatabaseCase(
                id=f"{case_dir.parent.name}/{case_dir.name}",
                fixture_set=case_dir.parent.name,
                case_dir=case_dir,
                database=case_dir / rec.DATABASE_DIR,
                keys=dict(record.get("keys", {})),
                features=features,
                description=record.get("description", ""),
                record=record,
            )
        )
    return out


def _base_needs(
    base: str, by_case: dict[str, list[FixtureCase]], fixtures: Path
) -> tuple[dict[str, Any], list[str]]:
    """What reading a bad variant's base asks of a reader: the golden case's needs (every item
    of it), or, for a base of the bad tier itself, what its checkpoint holds."""
    items = by_case.get(base.split(" ")[0])
    if items:
        needs: dict[str, Any] = {}
        features: set[str] = set()
        for c in items:
            for k, v in c.needs.items():
                if k in ("multiprocess", "typed_keys"):  # flags: needed by any item
                    needs[k] = needs.get(k, False) or v
                else:
                    needs.setdefault(k, [])
                    for x in v if isinstance(v, list) else [v]:
                        if x not in needs[k]:
                            needs[k].append(x)
            features.update(c.features)
        return needs, sorted(features)
    # A base built for the bad tier (bad/_base/...): ask the checkpoint what it is.
    from ..layout import Kind, detect
    from ..reader import load_pytree

    needs = {}
    release = base.split("(orbax ", 1)[1].split(",")[0].split(")")[0] if "(orbax " in base else None
    if release:
        needs["releases"] = ".".join(release.split(".")[:2])
    base_dir = fixtures / base.split(" ")[0]
    layout = detect(base_dir / "checkpoint")
    if layout.item is not None:
        needs["zarr"] = layout.item.zarr_version
        needs["ocdbt"] = layout.item.storage.value == "ocdbt"
    needs["layouts"] = {Kind.PYTREE_ITEM: "item"}.get(layout.kind, "item")
    try:
        tree = load_pytree(base_dir / "checkpoint", backend="python")
        features = tree_features(tree)
    except Exception:  # noqa: BLE001 - unknown: assume nothing special
        features = []
    return needs, features


def bad_cases(fixtures: Path, golden: list[FixtureCase] | None = None) -> list[BadCase]:
    """The variants of ``fixtures/bad/expected.json``, with the needs of their base."""
    fixtures = Path(fixtures)
    expected = fixtures / "bad" / "expected.json"
    if not expected.is_file():
        return []
    variants = json.loads(expected.read_text(encoding="utf-8"))["variants"]
    by_case: dict[str, list[FixtureCase]] = {}
    for c in golden if golden is not None else golden_cases(fixtures):
        by_case.setdefault(f"{c.fixture_set}/{c.case_dir.name}", []).append(c)
    out = []
    for name, entry in sorted(variants.items()):
        path = fixtures / "bad" / name / entry["path"]
        validator = entry.get("validator", {})
        rule = validator.get("rule")
        accepted = [r for r in [rule, *validator.get("also", [])] if r]
        for r in list(accepted):
            accepted += [x for x in READER_RULES.get(r, ()) if x not in accepted]
        needs, features = _base_needs(entry.get("base", ""), by_case, fixtures)
        out.append(
            BadCase(
                id=f"bad/{name}",
                name=name,
                path=path,
                outcome="error" if entry["reader"]["outcome"] == "raises" else "may_error",
                rule=rule,
                accepted_rules=accepted,
                error_class=entry["reader"].get("error"),
                damage=entry.get("damage", ""),
                note=entry.get("note", ""),
                known_reader_issue=entry.get("known_reader_issue"),
                base=entry.get("base", ""),
                needs=needs,
                features=features,
                entry=entry,
            )
        )
    return out
