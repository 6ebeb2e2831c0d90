"""The `ockpt` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

from . import __version__
from ._commands import JSON_HELP, PATH_HELP, add_where, in_flags
from .errors import OckptError, PathNotFoundError
from .layout import Kind, Layout, detect
from .paths import leaf_name, param_name, printable
from .store import deadline

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _layout_json(layout: Layout) -> dict[str, Any]:
    """A JSON view of a layout (its enums are `str` subclasses and dump as their values);
    its `location` (a kvstore spec) is left out: `path` says where it is."""
    out = {f.name: getattr(layout, f.name) for f in fields(layout) if f.name != "location"}
    out["item"] = None if layout.item is None else asdict(layout.item)
    out["checkpointables"] = {n: _layout_json(c) for n, c in layout.checkpointables.items()}
    out["steps"] = [asdict(s) for s in layout.steps]
    out["problems"] = [asdict(p) for p in layout.problems]
    out["committed"] = layout.committed
    return out


def _print_layout(layout: Layout, indent: str = "") -> None:
    def say(line: str) -> None:  # names, handlers and reasons come from the checkpoint
        print(indent + printable(line))

    say(f"{layout.path}: {layout.kind.value}")
    say(f"  {layout.reason}")
    if layout.handler:
        say(f"  handler: {layout.handler}")
    for problem in layout.problems:
        say(f"  problem: {problem}")
    for step in layout.steps:
        state = "committed" if step.committed else "UNFINISHED"
        say(f"  step {step.step} ({step.name}): {state}")
    for name, child in layout.checkpointables.items():
        say(f"  item {name!r}:")
        _print_layout(child, indent + "    ")


def _cmd_detect(args: argparse.Namespace) -> int:
    layouts = [detect(p) for p in args.paths]
    if args.json:
        json.dump([_layout_json(x) for x in layouts], sys.stdout, indent=2)
        print()
    else:
        for layout in layouts:
            _print_layout(layout)
    missing = [x.path for x in layouts if not x.exists]
    for path in missing:  # an I/O error, as from every other command
        print(f"ockpt: {path}: no such file or directory", file=sys.stderr)
    if missing:
        return EXIT_USAGE
    return EXIT_OK if all(x.kind is not Kind.NOT_A_CHECKPOINT for x in layouts) else EXIT_INVALID


def _cmd_tree(args: argparse.Namespace) -> int:
    from .reader.item import OpenedItem
    from .saved_tree import Empty, entries

    with OpenedItem(args.path, step=args.step, item=args.item, context=None) as opened:
        tree = opened.tree
    rows = []
    for texts, entry in entries(tree):
        empty = isinstance(entry, Empty)
        shape = None if empty else entry.write_shape
        rows.append(
            {
                "key_path": list(texts),
                "leaf_name": leaf_name(texts),
                "param_name": param_name(texts) if empty else entry.param_name,
                "value_type": entry.node.value if empty else entry.value_type,
                "write_shape": None if shape is None else list(shape),
            }
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        for row in rows:
            name = row["leaf_name"]
            shape = "" if row["write_shape"] is None else f"  write_shape={row['write_shape']}"
            param = row["param_name"]
            param = "" if param == name.replace("/", ".") else f"  param_name={param!r}"
            print(f"{printable(name) or '<root>'}: {row['value_type']}{shape}{printable(param)}")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from . import _progress
    from .validate import validate

    # a deep check reads every byte: one bar towards the bytes of the checkpoint's files
    show = _progress.enabled(args.deep and not args.no_progress)
    try:
        with _progress.Tracker("validating", enabled=show) as bar:
            report = validate(
                args.path,
                step=args.step,
                item=args.item,
                deep=args.deep,
                progress=bar if show else None,
            )
    except OSError as e:  # a path that does not exist or is no directory, an unreadable file
        print(f"ockpt: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        print(report.format_text())
    return EXIT_OK if report.ok else EXIT_INVALID


def build_parser() -> argparse.ArgumentParser:
    """The `ockpt` argument parser: every subcommand and every argument with its help text."""
    parser = argparse.ArgumentParser(
        prog="ockpt",
        description="Inspect, validate, compare, convert and copy Orbax checkpoints (local "
        "directories or s3:// / gs:// URLs) without JAX or Orbax. Exit status: 0 success, "
        "1 a checkpoint problem (diff: differences), 2 a usage or I/O error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"ockpt {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (COMMAND --help)"
    )
    p = sub.add_parser(
        "detect",
        help="say what each path is (item, v1, manager root, ...)",
        description="Say what each path is (pytree item, v1 checkpoint, step, manager root, "
        "temporary save, ...), with its steps and items and their commit state. Exit 0 when "
        "every path is a checkpoint, 1 when one is not, 2 when one does not exist.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="directories or s3:// / gs:// URLs")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=_cmd_detect)
    p = sub.add_parser(
        "tree",
        help="the saved tree of an item (_METADATA, or the legacy msgpack file): leaf names, "
        "param names, value types",
        description="List every entry of an item's saved tree by leaf name. PATH may be an "
        "item, a v1 checkpoint, a step or a manager root (latest committed step unless "
        "--step), local or an s3:// / gs:// URL.",
    )
    p.add_argument("path", help=PATH_HELP)
    add_where(p)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=_cmd_tree)
    p = sub.add_parser(
        "validate",
        help="check a whole checkpoint against the spec (exit 0 valid, 1 invalid, 2 error)",
        description="Check a local checkpoint (item, v1 checkpoint, step or manager root) "
        "against the spec; each finding names its rule id. Exit 0 valid, 1 invalid, 2 on a "
        "usage or I/O error.",
    )
    p.add_argument("path", help="a local checkpoint directory")
    add_where(p, validate=True)
    p.add_argument("--deep", action="store_true", help="decode every OCDBT node and every chunk")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (--deep on a terminal)"
    )
    p.set_defaults(func=_cmd_validate)
    from . import _commands  # inspect, ls, cat, diff, convert, cp

    _commands.add_parsers(sub)
    from .conformance.cli import add_parser as _add_conformance  # ockpt conformance

    _add_conformance(sub)
    for command in sub.choices.values():
        command.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="how long one request to an object store may take before ockpt gives up "
            f"(exit 2), plus a second per MiB it carries (default: ${deadline.ENV} or "
            f"{deadline.DEFAULT_SECONDS:g})",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ockpt` with `argv` (default: the process's arguments); returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "leaf", "") is None and len(extra) == 1:
        args.leaf = extra[0]  # `cat PATH --item I LEAF`: an optional positional after an option
    elif extra:
        parser.parse_args(argv)  # reports the unrecognized arguments (exit 2)
    try:
        given = getattr(args, "timeout", None)
        if given is None:
            seconds = deadline.request_timeout()
        else:
            seconds = deadline.positive_seconds(given, "--timeout")
    except ValueError as e:  # OCKPT_REQUEST_TIMEOUT or --timeout is no positive number
        print(f"ockpt: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with deadline.timeout(seconds):
            return int(args.func(args))
    except PathNotFoundError as e:  # an I/O error, not a checkpoint problem
        print(f"ockpt: {in_flags(e)}", file=sys.stderr)
        return EXIT_USAGE
    except OckptError as e:
        print(f"ockpt: {in_flags(e)}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        print(f"ockpt: {in_flags(e)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
