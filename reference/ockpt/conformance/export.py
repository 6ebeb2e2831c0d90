"""``ockpt conformance export DIR``: the golden fixtures as a language-neutral test suite.

DIR receives::

    manifest.json                 the cases (schemas/export-manifest.schema.json)
    manifest.schema.json          that schema (JSON Schema draft 2020-12)
    command-output.schema.json    the schema of what a command reader writes (same leaf records)
    checkpoints/<set>/<case>/checkpoint/   every golden checkpoint, byte for byte
    expected/<set>/<case>/<n>[-<item>]/arrays/NNNN.npy   expected arrays of each case
    bad/<variant>/<path>          the bad-data tier, byte for byte
    databases/<set>/<case>/database/       bare OCDBT databases (when the fixtures have them)

Each case of ``manifest.json`` says where its checkpoint is, what it exercises (layout, zarr
version, OCDBT, release, features), how to reach the item (step, item) and what a reader must
give: the leaf records of `leaves` (the command protocol's output format, so an implementation
can compare its output with them directly), a refusal naming one of ``accepted_rules``, or the
keys of a database. Every path in the manifest is relative to DIR.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .. import __version__
from .cases import FEATURES, GROUPS
from .fixture_cases import bad_cases, database_cases, golden_cases
from .leaves import write_records

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "MANIFEST_FILE",
    "FEATURES",
    "export",
    "manifest_schema",
    "spec_version",
]

EXPORT_FORMAT = "ockpt-conformance-export"
#: semantic version of the manifest format (a new major version breaks its readers)
EXPORT_VERSION = "1.0.0"
MANIFEST_FILE = "manifest.json"
EXPORT_GROUPS = ("fixtures", "bad_corpus", "databases")

_SPEC_VERSION = re.compile(r"\*\*Specification version (\d+\.\d+\.\d+)\*\*")


def spec_version(repo: Path | None) -> str:
    """The version in the spec's README (``**Specification version X.Y.Z**``), or "unknown"."""
    readme = repo / "spec" / "README.md" if repo is not None else None
    if readme is None or not readme.is_file():
        return "unknown"
    found = _SPEC_VERSION.search(readme.read_text(encoding="utf-8"))
    return found.group(1) if found else "unknown"


@cache
def _schema_text(name: str) -> str:
    return resources.files(__package__).joinpath(f"schemas/{name}").read_text(encoding="utf-8")


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of ``manifest.json`` (draft 2020-12)."""
    return json.loads(_schema_text("export-manifest.schema.json"))


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def export(
    directory: str | Path,
    fixtures: str | Path,
    *,
    groups: Iterable[str] = EXPORT_GROUPS,
    progress: Any = None,
) -> dict[str, Any]:
    """Write the export into `directory` (which must not exist or be empty); returns the
    manifest."""
    out = Path(directory)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    fixtures = Path(fixtures)
    groups = set(groups)
    show = progress or (lambda _msg: None)
    cases: list[dict[str, Any]] = []
    golden = golden_cases(fixtures)

    if "fixtures" in groups:
        copied: set[Path] = set()
        index: dict[Path, int] = {}
        for fc in golden:
            show(f"export {fc.id}")
            ckpt = Path("checkpoints") / fc.fixture_set / fc.case_dir.name / "checkpoint"
            if fc.case_dir not in copied:
                _copy(fc.checkpoint, out / ckpt)
                copied.add(fc.case_dir)
            n = index[fc.case_dir] = index.get(fc.case_dir, -1) + 1
            exp = (
                Path("expected")
                / fc.fixture_set
                / fc.case_dir.name
                / (f"{n}" + (f"-{_slug(fc.rel)}" if fc.rel else ""))
            )
            leaves = write_records(fc.tree, out / exp)
            cases.append(
                {
                    "id": fc.id,
                    "group": "fixtures",
                    "description": fc.description,
                    "checkpoint": ckpt.as_posix(),
                    "exercises": {
                        "layout": fc.layout.get("kind", "item"),
                        **(
                            {"zarr": fc.layout["zarr_version"]}
                            if fc.layout.get("zarr_version")
                            else {}
                        ),
                        "ocdbt": bool(fc.layout.get("ocdbt", False)),
                        "release": fc.release,
                        "era": fc.era,
                        "writer": fc.source.split(" ")[0],
                        "source": fc.source,
                        "multiprocess": fc.multiprocess,
                        "features": fc.features,
                    },
                    "needs": fc.needs,
                    "reach": {"step": fc.step, "item": fc.item},
                    "expect": {
                        "outcome": "load",
                        "dir": exp.as_posix(),
                        "leaves": leaves,
                        "scalars_may_be_0d": fc.no_metadata,
                    },
                }
            )

    if "bad_corpus" in groups:
        for b in bad_cases(fixtures, golden):
            show(f"export {b.id}")
            rel = b.path.relative_to(fixtures / "bad")
            _copy(b.path, out / "bad" / rel)
            cases.append(
                {
                    "id": b.id,
                    "group": "bad_corpus",
                    "description": b.damage,
                    "checkpoint": (Path("bad") / rel).as_posix(),
                    "exercises": {
                        **(
                            {"layout": b.needs["layouts"]}
                            if isinstance(b.needs.get("layouts"), str)
                            else {}
                        ),
                        "features": b.features,
                    },
                    "needs": b.needs,
                    "reach": {"step": None, "item": None},
                    "expect": {
                        "outcome": b.outcome,
                        "rule": b.rule,
                        "accepted_rules": b.accepted_rules,
                        "error_class": b.error_class,
                        "damage": b.damage,
                        "note": b.note,
                        "known_reader_issue": b.known_reader_issue,
                        "base": b.base,
                    },
                }
            )

    if "databases" in groups:
        for dc in database_cases(fixtures):
            show(f"export {dc.id}")
            db = Path("databases") / dc.fixture_set / dc.case_dir.name / "database"
            _copy(dc.database, out / db)
            cases.append(
                {
                    "id": dc.id,
                    "group": "databases",
                    "description": dc.description,
                    "database": db.as_posix(),
                    "exercises": {"ocdbt": True, "features": dc.features},
                    "expect": {
                        "outcome": "keys",
                        "generations": len(dc.record.get("generations", [])) or 1,
                        "history": dc.record.get("generations", []),
                        "keys": [
                            {"key": k, "value_length": v[0], "sha256": v[1]}
                            for k, v in sorted(dc.keys.items())
                        ],
                    },
                }
            )

    manifest = {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_VERSION,
        "spec_version": spec_version(fixtures.parent),
        "generator": f"ockpt {__version__}",
        "output_format": "ockpt-conformance-output/1",
        "features": FEATURES,
        "groups": {g: GROUPS[g] for g in EXPORT_GROUPS if g in groups},
        "cases": cases,
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    for name in ("export-manifest.schema.json", "command-output.schema.json"):
        target = "manifest.schema.json" if name.startswith("export") else name
        (out / target).write_text(_schema_text(name), encoding="utf-8")
    return manifest
