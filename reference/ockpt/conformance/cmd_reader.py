"""ockpt as a program of the command protocol (conformance/README.md, `command.py`).

    python -m ockpt.conformance.cmd_reader CHECKPOINT OUT [--step S] [--item I]
        [--kind pytree|ocdbt] [--backend python|tensorstore]
    ockpt conformance read CHECKPOINT OUT [same options]

Loads CHECKPOINT with `ockpt.load_pytree` (no target) and writes ``OUT/result.json`` with the
leaf records of `leaves` and the arrays as ``OUT/arrays/NNNN.npy``; a refusal (an
`ockpt.OckptError`) becomes ``OUT/error.json`` with the rule id the error names. With
``--kind ocdbt`` CHECKPOINT is a bare OCDBT database and ``result.json`` lists the keys of its
latest generation with the length and the sha256 digest of each value. Any other exception is left
to crash the program: the suite scores a crash as a failure, as it scores a non-ockpt error of
the Python adapter. An empty ``--step`` / ``--item`` means "not given" (a command template
expands ``{step}`` and ``{item}`` to empty words when a case names neither).

``--capabilities`` prints the capabilities file of this reader (for ``cmd(FILE):``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from .command import ERROR_FILE, OUTPUT_FORMAT, RESULT_FILE
from .leaves import write_records

__all__ = ["main", "capabilities", "add_arguments", "run"]


def capabilities(backend: str = "python") -> dict[str, Any]:
    """The capabilities file of ``cmd_reader --backend BACKEND`` (reads only, no target)."""
    from .adapters import RELEASES

    return {
        "name": f"cmd:ockpt-{backend}",
        "version": f"ockpt through the command protocol (backend={backend})",
        "capabilities": {
            "reads": {
                "layouts": ["item", "v1", "manager"],
                "zarr": [2, 3],
                "ocdbt": [True, False],
                "releases": RELEASES,
                "options": [],
                "multiprocess": True,
                "typed_keys": True,
                "targets": False,
                "databases": True,
                "errors": "rules",
            },
            "writes": {},
        },
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", nargs="?", help="what to read ({checkpoint})")
    p.add_argument("out", nargs="?", help="an empty directory for the output ({out})")
    p.add_argument("--step", default="", help="step to load (empty: the reader's default)")
    p.add_argument("--item", default="", help="item to load (empty: the reader's default)")
    p.add_argument(
        "--kind",
        default="pytree",
        choices=["pytree", "ocdbt"],
        help="what CHECKPOINT is: a checkpoint, or a bare OCDBT database (default: pytree)",
    )
    p.add_argument(
        "--backend",
        default="python",
        choices=["python", "tensorstore"],
        help="the ockpt engine that reads (default: python)",
    )
    p.add_argument(
        "--capabilities", action="store_true", help="print this reader's capabilities file"
    )


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    if args.capabilities:
        print(json.dumps(capabilities(args.backend), indent=1))
        return 0
    if not args.checkpoint or not args.out:
        print("cmd_reader: CHECKPOINT and OUT are required", file=sys.stderr)
        return 2
    from ..errors import OckptError

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reader = f"ockpt (backend={args.backend})"
    try:
        if args.kind == "ocdbt":
            from ..ocdbt import Database

            with Database(args.checkpoint) as db:
                keys = []
                for key, value in db.items():
                    entry: dict[str, Any] = {"value_length": len(value)}
                    try:
                        entry["key"] = key.decode("utf-8")
                    except UnicodeDecodeError:
                        entry["key_hex"] = key.hex()
                    entry["sha256"] = hashlib.sha256(value).hexdigest()
                    keys.append(entry)
            _write_json(
                out / RESULT_FILE, {"format": OUTPUT_FORMAT, "reader": reader, "keys": keys}
            )
            return 0
        from ..reader import load_pytree

        options: dict[str, Any] = {"backend": args.backend}
        if args.step != "":
            options["step"] = int(args.step)
        if args.item != "":
            options["item"] = args.item
        tree = load_pytree(args.checkpoint, **options)
        leaves = write_records(tree, out)
    except OckptError as e:
        _write_json(out / ERROR_FILE, {"rule": e.rule, "message": str(e)})
        return 1
    _write_json(out / RESULT_FILE, {"format": OUTPUT_FORMAT, "reader": reader, "leaves": leaves})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ockpt.conformance.cmd_reader",
        description="ockpt as a reader of the conformance suite's command protocol",
    )
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
