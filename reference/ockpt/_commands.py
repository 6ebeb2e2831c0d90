"""The data commands of ``ockpt``: inspect, ls, cat, diff, fingerprint, compat, convert, cp.

Each command parses its arguments here and calls one module (`inspection`, `listing`, `diff`,
`fingerprints`, `compatibility`, `convert`, `transfer`). Exit status: 0 success (diff: no
differences; compat: readable by --require-orbax), 1 a checkpoint or format problem (diff:
differences found; compat: not readable), 2 a usage or I/O error.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .paths import printable

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

__all__ = ["JSON_HELP", "PATH_HELP", "add_parsers", "add_where"]

#: The help of every command's ``--json`` switch.
JSON_HELP = "print machine-readable JSON on stdout instead of text"
#: The help of a checkpoint path argument.
PATH_HELP = "item, v1 checkpoint, step or manager root: a directory or an s3:// / gs:// URL"


#: How the library's messages name an option (its Python parameter), and the flag that gives it
#: on the command line: the commands print errors in their own words (`in_flags`).
_FLAGS = (
    (re.compile(r"\boverwrite=True\b"), "--overwrite"),
    (re.compile(r"\bskip_unsupported=True\b"), "--skip-unsupported"),
    (re.compile(r"\bwiden=True\b"), "--widen"),
    (re.compile(r"\bitem=NAME\b"), "--item NAME"),
    (re.compile(r"\bitem='([^']*)'"), r"--item \1"),
    (re.compile(r"\bstep=(\d+)"), r"--step \1"),
    (re.compile(r'\bdst_format="([a-z]+)"'), r"--to \1"),
    (re.compile(r"\bdst_format\b"), "--to FORMAT"),
    (re.compile(r"\bmax_shard_size\b"), "--max-shard-size"),
    (re.compile(r"\bsep='([^']*)'"), r"--sep \1"),
    (re.compile(r"\bconfig file\b"), "--config"),
    (re.compile(r"\bconfig applies\b"), "--config applies"),
    (re.compile(r"\brules and --widen\b"), "--rename, --transpose, --dtype and --widen"),
    (re.compile(r"\brename it \(rules\)"), "--rename it"),
    (re.compile(r"\bthe rename rules\b"), "the --rename rules"),
    (re.compile(r"\ba slice applies\b"), "--slice applies"),
    (re.compile(r"\bleaves out \(select\)"), "leaves out (--select)"),
)


def in_flags(message: object) -> str:
    """An error's text as the command line says it, on one line: each option named by its
    flag, and every character a checkpoint's names may carry that is not printable escaped."""
    text = str(message)
    for pattern, flag in _FLAGS:
        text = pattern.sub(flag, text)
    return printable(text)


def _dump(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    print()


def _guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input (a malformed slice, size, key or leaf name) is a usage error: message,
    exit 2."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        from .errors import LeafNameError, OckptError

        try:
            return func(args)
        except LeafNameError as e:
            if e.rule != "PATH-006":  # a name that names nothing: a checkpoint problem
                raise
            print(f"ockpt {args.command}: {in_flags(e)}", file=sys.stderr)
            return EXIT_USAGE
        except OckptError:
            raise
        except (ValueError, IndexError) as e:
            print(f"ockpt {args.command}: {in_flags(e)}", file=sys.stderr)
            return EXIT_USAGE

    return run


@_guard
def _cmd_inspect(args: argparse.Namespace) -> int:
    from .inspection import format_inspect, inspect

    report = inspect(args.path, step=args.step, item=args.item)
    if args.json:
        for row in report.get("leaves", []):
            row.pop("sharding_text", None)
        _dump(report)
    else:
        print(format_inspect(report))
    return EXIT_OK


def _print_entry(entry: Any, indent: str = "") -> None:
    from .listing import format_time

    state = "committed" if entry.committed else "UNCOMMITTED"
    if entry.kind == "manager_root":
        print(f"{indent}{printable(entry.path)}: manager_root, {len(entry.children)} step(s)")
    else:
        label = f"step {entry.step}" if entry.step is not None else entry.name or entry.path
        extra = ", ".join(x for x in (entry.handler, entry.storage) if x)
        extra = f" ({extra})" if extra else ""
        marker = ", commit_success.txt" if entry.has_commit_file else ""
        when = f"  {format_time(entry.commit_time_ns)}" if entry.commit_time_ns else ""
        print(f"{indent}{printable(f'{label}: {entry.kind}{extra}')}, {state}{marker}{when}")
    for child in entry.children:
        _print_entry(child, indent + "  ")


@_guard
def _cmd_ls(args: argparse.Namespace) -> int:
    from .listing import describe

    entry = describe(args.path)
    if args.json:
        _dump(entry.to_json())
    else:
        _print_entry(entry)
    return EXIT_OK if entry.kind != "unknown" else EXIT_INVALID


@_guard
def _cmd_cat(args: argparse.Namespace) -> int:
    from .inspection import cat, cat_item, parse_slice, to_json_value

    whole = cat_item(args.path, step=args.step, item=args.item)
    if whole is not None:  # an item that is no pytree (JSON, random key): its whole value
        return _print_item(args, *whole)
    if args.leaf is None:
        raise ValueError("name a leaf of the pytree item (see `ockpt inspect`)")
    index = parse_slice(args.slice) if args.slice else None
    name, value = cat(args.path, args.leaf, index=index, step=args.step, item=args.item)
    if args.json:
        out: dict[str, Any] = {"name": name}
        if not isinstance(value, (str, bytes)):
            out.update(shape=list(np.shape(value)), dtype=str(np.asarray(value).dtype))
        out["values"] = to_json_value(value)
        _dump(out)
    elif isinstance(value, (str, bytes)):
        print(value if isinstance(value, str) else value.decode("utf-8", "replace"))
    else:
        opts: dict[str, Any] = {"threshold": sys.maxsize} if args.full else {}
        with np.printoptions(**opts):
            print(np.asarray(value))
    return EXIT_OK


def _print_item(args: argparse.Namespace, name: str, kind: str, value: Any) -> int:
    """`cat` of an item that is no pytree: its value as JSON (NaN as the file writes it)."""
    if args.leaf is not None or args.slice:
        raise ValueError(f"item {name!r} is a {kind}, not a pytree: omit LEAF and --slice")
    if args.json:
        _dump({"name": name, "kind": kind, "values": value})
    else:
        print(json.dumps(value, indent=2, ensure_ascii=False))
    return EXIT_OK


@_guard
def _cmd_fingerprint(args: argparse.Namespace) -> int:
    from .fingerprints import dumps, fingerprint

    text = dumps(fingerprint(args.path, shapes=args.shapes))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


@_guard
def _cmd_compat(args: argparse.Namespace) -> int:
    from .compatibility import compat, version_key

    for release in (args.require_orbax, args.tensorstore):
        if release is not None:
            version_key(release)  # a usage error (ValueError) unless a release number
    report = compat(args.path)
    if args.json:
        _dump(report.to_json())
    else:
        for line in report.format_text().splitlines():
            print(printable(line))
    if args.require_orbax is None or report.readable_by(args.require_orbax, args.tensorstore):
        return EXIT_OK
    with_ts = "" if args.tensorstore is None else f" with tensorstore {args.tensorstore}"
    print(
        f"ockpt compat: Orbax {args.require_orbax}{with_ts} cannot restore {printable(args.path)}",
        file=sys.stderr,
    )
    return EXIT_INVALID


def _format_diff(args: argparse.Namespace) -> int:
    """``diff --format``: where the fingerprints of A and B differ (either may be a file that
    `ockpt fingerprint` wrote)."""
    from .fingerprints import compare, load

    changes = compare(load(args.a), load(args.b))
    if args.json:
        _dump({"equal": not changes, "changes": [c.to_json() for c in changes]})
    else:
        for change in changes:
            print(printable(change.text()))
        print("same format" if not changes else f"{len(changes)} format differences")
    return EXIT_INVALID if changes else EXIT_OK


@_guard
def _cmd_diff(args: argparse.Namespace) -> int:
    from .diff import diff
    from .sources import open_source

    if args.format:
        return _format_diff(args)

    if args.rtol < 0 or args.atol < 0:
        raise ValueError("--rtol and --atol must be >= 0")
    with (
        open_source(args.a, sep=args.sep, step=args.step_a, item=args.item) as a,
        open_source(args.b, sep=args.sep, step=args.step_b, item=args.item) as b,
    ):
        report = diff(
            a, b, rtol=args.rtol, atol=args.atol, sep=args.sep, progress=not args.no_progress
        )
    if args.json:
        _dump(report.to_json())
    else:
        print(report.format_text())
    return EXIT_OK if report.equal else EXIT_INVALID


@_guard
def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    result = convert(
        args.src,
        args.dst,
        src_format=args.from_format,
        dst_format=args.to_format,
        sep=args.sep,
        max_shard_size=args.max_shard_size,
        skip_unsupported=args.skip_unsupported,
        step=args.step,
        item=args.item,
        layout=args.layout,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        select=args.select or (),
        rules=_convert_rules(args),
        widen=args.widen,
        dry_run=args.dry_run,
        config=args.config,
    )
    if args.json:
        _dump(result.to_json())
        return EXIT_OK
    for row in result.mapping:
        print(printable(_mapping_line(row)))
    if result.select:
        print(printable(_selection_summary(result)), file=sys.stderr)
    notes = [f"skipped {name}: {why}" for name, why in result.skipped]
    notes += [
        f"{name}: a typed PRNG key ({impl}), written as its uint32 key data"
        for name, impl in result.random_keys
    ]
    notes += [
        f"widened {n}: {dtype} stored as {stored} (exact)" for n, dtype, stored in result.widened
    ]
    if result.metadata_strings:
        names = ", ".join(result.metadata_strings)
        notes.append(f"string leaves in the safetensors __metadata__: {names}")
    for note in notes:  # leaf names come from the checkpoint: one line each
        print(printable(note), file=sys.stderr)
    verb = "would write" if result.dry_run else "wrote"
    print(
        f"{verb} {result.leaves} leaves ({result.bytes} bytes) as {result.format}: "
        + ", ".join(result.files)
    )
    return EXIT_OK


def _shard_size(text: str) -> int:
    """--max-shard-size as bytes; a bad size is a usage error naming the option (exit 2)."""
    from .convert import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _convert_rules(args: argparse.Namespace) -> Any:
    """--rules files first, then --rename / --transpose / --dtype (`ockpt.convert_rules`)."""
    from .convert_rules import Rules, load_rules_file, parse_rules

    rules = Rules()
    for path in args.rules or ():
        rules = rules + load_rules_file(path)
    return rules + parse_rules(
        rename=args.rename or (), transpose=args.transpose or (), dtype=args.dtype or ()
    )


def _mapping_line(row: dict[str, Any]) -> str:
    """A dry run's line: ``src (shape) dtype -> dst (shape) dtype  file``."""

    def shape(dims: list[int]) -> str:
        return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"

    notes = []
    if row["transposed"] is not None:
        notes.append("transposed " + ",".join(map(str, row["transposed"])))
    if row["widened"]:
        notes.append("widened")
    note = f" [{'; '.join(notes)}]" if notes else ""
    return (
        f"{row['source']} {shape(row['source_shape'])} {row['source_dtype']} -> "
        f"{row['target']} {shape(row['shape'])} {row['dtype']}{note}  {row['file']}"
    )


def _selection_summary(result: Any) -> str:
    """What `--select` kept and what it left out, by top-level key."""
    from collections import Counter

    from .paths import leaf_name, parse_leaf_name

    patterns = " ".join(f"--select {p!r}" for p in result.select)
    kept = result.leaves + len(result.skipped)
    text = f"selected {kept} of {kept + len(result.left_out)} leaves with {patterns}"
    if not result.left_out:
        return text + "; left out none"
    tops = Counter(leaf_name(parse_leaf_name(n)[:1]) for n in result.left_out)
    parts = ", ".join(f"{top or '<root>'} ({count})" for top, count in tops.most_common())
    return f"{text}; left out {len(result.left_out)}: {parts}"


@_guard
def _cmd_cp(args: argparse.Namespace) -> int:
    from .transfer import copy

    count = copy(args.src, args.dst, overwrite=args.overwrite, progress=not args.no_progress)
    if args.json:
        _dump({"src": args.src, "dst": args.dst, "files": count})
    else:
        print(f"copied {count} files to {args.dst}")
    return EXIT_OK


def add_where(p: argparse.ArgumentParser, *, validate: bool = False) -> None:
    """--step / --item, as every command that takes a checkpoint path reads them."""
    if validate:
        p.add_argument("--step", type=int, help="validate only this step of a manager root")
        p.add_argument("--item", help="validate only this item of a step or v1 checkpoint")
        return
    p.add_argument("--step", type=int, help="step of a checkpoint-manager root (default: latest)")
    p.add_argument("--item", help="item of a step or v1 checkpoint (default: the pytree item)")


def add_parsers(sub: Any) -> None:
    """Add the data commands to the `ockpt` subparsers."""
    json_help = JSON_HELP
    p = sub.add_parser(
        "inspect",
        help="tree with shape, dtype, bytes, chunks and sharding per leaf; steps of a manager",
        description="Show every leaf of a checkpoint (item, v1 checkpoint, step or manager "
        "root; local or s3:// / gs:// URL) without reading array data.",
    )
    p.add_argument("path", help=PATH_HELP)
    add_where(p)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser(
        "ls",
        help="steps, checkpointables and items with commit state and times",
        description="List a checkpoint's steps, checkpointables and items, each with its "
        "kind, handler, storage, commit state and commit time. Exit 1 when PATH is no "
        "checkpoint.",
    )
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(func=_cmd_ls)

    p = sub.add_parser(
        "cat",
        help="values of one leaf (or a slice of it), or of a JSON or random-key item",
        description="Print the values of one leaf, or a slice of it read without reading the "
        "rest, or the whole value of a JSON or random-key item.",
    )
    p.add_argument("path", help=PATH_HELP)
    p.add_argument(
        "leaf",
        nargs="?",
        help="omitted for a JSON or random-key item (its whole value); a "
        "leaf name (params/dense/kernel; a '/' or '\\' in a key as \\/ or \\\\) "
        "or param name (params.dense.kernel)",
    )
    p.add_argument("--slice", help="numpy basic index, for example 0:4,: or 2,...,::2")
    p.add_argument("--full", action="store_true", help="print every value (no '...')")
    add_where(p)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(func=_cmd_cat)

    p = sub.add_parser(
        "diff",
        help="structure, dtype, shape and value differences (exit 1 when different)",
        description="Compare two checkpoints (Orbax, safetensors or npz). Exit 0 when equal, "
        "1 when different, 2 on errors.",
    )
    p.add_argument("a", help="a checkpoint (as for inspect), .safetensors(.index.json) or .npz")
    p.add_argument("b", help="the checkpoint or file to compare A with")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    p.add_argument("--sep", choices=(".", "/"), default=".", help="key separator for flat files")
    p.add_argument("--step-a", type=int, help="step of A when it is a manager root")
    p.add_argument("--step-b", type=int, help="step of B when it is a manager root")
    p.add_argument("--item", help="item of a step or v1 checkpoint")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--format",
        action="store_true",
        help="compare the on-disk formats, not the values: A and B are checkpoints or files "
        "that `ockpt fingerprint` wrote",
    )
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser(
        "compat",
        help="the format features a checkpoint uses, and the oldest Orbax release that reads it",
        description="List the format features of a checkpoint (layout, OCDBT, per-process "
        "databases, zarr 2/3, string leaves, typed PRNG keys, element types, ...), each dated by "
        "the Orbax release that first restores it, and from them the oldest (and, where a "
        "feature was dropped, the newest) release that restores the checkpoint. Exit 1 with "
        "--require-orbax when that release cannot.",
    )
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--require-orbax", metavar="VERSION", help="exit 1 unless VERSION restores it")
    p.add_argument(
        "--tensorstore",
        metavar="VERSION",
        help="with --require-orbax: the tensorstore that Orbax is installed with (element types "
        "such as int2 or float4 need a recent one)",
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=_cmd_compat)

    p = sub.add_parser(
        "fingerprint",
        help="a canonical, value-free JSON description of the on-disk format",
        description="Describe how a checkpoint is stored (layout, document keys and types, "
        "zarr metadata, OCDBT configuration, codecs, dtypes), leaving out values, timestamps, "
        "step and process numbers, leaf names and (unless --shapes) shapes. The same code "
        "saving other values gives the same bytes; compare two with `ockpt diff --format`.",
    )
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--shapes", action="store_true", help="keep shapes and chunk shapes, by leaf")
    p.add_argument("-o", "--out", help="write the fingerprint to this file, not stdout")
    p.set_defaults(func=_cmd_fingerprint)

    p = sub.add_parser(
        "convert",
        help="Orbax <-> safetensors (single or sharded), .npz; Orbax -> PyTorch .pt or a "
        "Hugging Face folder",
        description="Convert leaf by leaf. The format comes from the suffix (.safetensors, "
        ".safetensors.index.json, .npz, .pt) or --to (hf: a Hugging Face folder, "
        "model.safetensors or model-0000N-of-0000M.safetensors with "
        "model.safetensors.index.json); an Orbax checkpoint directory is written from "
        "safetensors or .npz. --rename, --transpose and --dtype map names and layouts onto "
        "another model's state_dict; --dry-run prints the mapping.",
    )
    p.add_argument("src", help="a checkpoint (as for inspect), .safetensors(.index.json) or .npz")
    p.add_argument("dst", help="the output file, folder (--to hf) or checkpoint directory")
    formats = ("orbax", "safetensors", "npz", "pt", "hf")
    p.add_argument("--to", dest="to_format", choices=formats, help="output format")
    p.add_argument(
        "--from", dest="from_format", choices=("orbax", "safetensors", "npz"), help="input format"
    )
    p.add_argument("--sep", choices=(".", "/"), default=".", help="key separator (default .)")
    p.add_argument(
        "--max-shard-size",
        type=_shard_size,
        help="shard safetensors output, e.g. 5GB (decimal) or 500MiB; --to hf: default 5GB",
    )
    p.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="leave out leaves the output format cannot hold (instead of failing)",
    )
    p.add_argument(
        "--select",
        action="append",
        metavar="PATTERN",
        help="convert only the leaves under this leaf name or matching this glob over leaf "
        "names (params, 'params/**', '**/kernel'); repeatable",
    )
    p.add_argument(
        "--rename",
        action="append",
        metavar="REGEX=REPLACEMENT",
        help="rename leaves: every rule applies, in order, as re.sub to the result of the one "
        "before ('^params\\.=', 'kernel$=weight'); split at the first '=' (\\= inside REGEX)",
    )
    p.add_argument(
        "--transpose",
        action="append",
        metavar="PATTERN[=AXES]",
        help="store the 2-D leaves whose name PATTERN matches (re.search) transposed, as a "
        "flax Dense kernel (in, out) becomes a torch Linear weight (out, in); =AXES (3,2,0,1) "
        "permutes a leaf of any rank; the first matching rule applies",
    )
    p.add_argument(
        "--dtype",
        action="append",
        metavar="PATTERN=DTYPE",
        help="store matching floating (or integer) leaves as DTYPE ('.*=bfloat16'); leaves of "
        "another family keep theirs; the first matching rule applies",
    )
    p.add_argument(
        "--rules",
        action="append",
        metavar="FILE.json",
        help='rename / transpose / dtype rules from a JSON file: {"rename": [[REGEX, '
        'REPLACEMENT], ...], "transpose": [PATTERN, ...], "dtype": ["PATTERN=DTYPE", ...]}; '
        "applied before the command line's",
    )
    p.add_argument(
        "--widen",
        action="store_true",
        help="store a dtype the output lacks (bfloat16, float8 in .npz; int4) in the narrowest "
        "one it has that holds every value exactly (float32, int8); the summary names them",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the mapping (source name, shape, dtype -> target name, shape, dtype, file) "
        "and write nothing",
    )
    p.add_argument("--config", help="--to hf: a config.json to copy into the folder")
    add_where(p)
    p.add_argument("--layout", choices=("v1", "item"), default="v1", help="Orbax output layout")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser(
        "cp",
        help="copy a checkpoint to or from a bucket (commit_success.txt written last)",
        description="Copy a checkpoint between local directories and s3:// / gs:// URLs. "
        "Unfinished saves are left out; in a bucket commit_success.txt is written last, so "
        "readers see a step only once it is complete.",
    )
    p.add_argument("src", help="the checkpoint to copy: a directory or a URL")
    p.add_argument("dst", help="where the copy goes (must not exist unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing destination")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_cp)
