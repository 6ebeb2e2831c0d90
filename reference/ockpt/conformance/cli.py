"""``ockpt conformance``: run the suite and write the matrix report."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_IMPLS = ["ockpt-tensorstore", "ockpt-python"]


def add_parser(subparsers: object) -> None:
    p = subparsers.add_parser(  # type: ignore[attr-defined]
        "conformance",
        help="run the conformance suite against implementations (producer x consumer x case)",
        description=(
            "Run the conformance suite. --impl names an adapter: ockpt-tensorstore, "
            "ockpt-python, ockpt-torch-dcp (ockpt.torch's DCP storage reader as a consumer), "
            "orbax (conformance/adapters/orbax_adapter.py of the repository), "
            "c-example (the example C reader, built here), path/to/module.py[:name] / "
            "package.module[:name] for your own, or 'cmd[(CAPABILITIES.json)]:PROGRAM "
            "{checkpoint} {out}' for any executable (conformance/README.md, Command readers)."
        ),
    )
    p.add_argument("--impl", action="append", help="an adapter (repeat); default: both ockpt")
    p.add_argument(
        "--report", metavar="FILE", help="write the Markdown report here (and its .json twin)"
    )
    p.add_argument(
        "--report-json",
        metavar="FILE",
        help="write the JSON report here (default with --report: its twin, FILE.json)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the JSON report on stdout instead of the Markdown one",
    )
    p.add_argument(
        "--fixtures",
        metavar="DIR",
        help="golden fixtures directory (default: those of the ockpt checkout this package runs "
        "from; never the working directory, whose code would run)",
    )
    p.add_argument("--group", action="append", help="run only these groups (repeat)")
    p.add_argument("--workdir", metavar="DIR", help="keep what the producers wrote here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run_command)
    sub = p.add_subparsers(
        dest="conformance_command",
        metavar="{export,read}",
        help="export the cases for another language, or read one checkpoint as a command "
        "reader (default: run the suite)",
    )
    e = sub.add_parser(
        "export",
        help="write the golden fixtures, the bad-data tier and a versioned manifest to DIR",
        description=(
            "Write every golden fixture (checkpoints byte for byte), the bad-data tier and the "
            "bare OCDBT databases into DIR, with manifest.json (cases, what each exercises, the "
            "expected leaves as .npy + JSON or the expected refusal) and its JSON Schema."
        ),
    )
    e.add_argument("dir", help="output directory (must not exist or be empty)")
    e.add_argument(
        "--fixtures",
        dest="export_fixtures",
        help="golden fixtures (default: those of the ockpt checkout this package runs from)",
    )
    e.add_argument(
        "--group",
        dest="export_groups",
        action="append",
        choices=["fixtures", "bad_corpus", "databases"],
        help="export only these groups (repeat)",
    )
    e.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    r = sub.add_parser(
        "read",
        help="ockpt as a program of the command protocol: read CHECKPOINT, write OUT",
        description="Load CHECKPOINT with ockpt and write result.json + .npy files (or "
        "error.json) into OUT, as a command reader does (conformance/README.md).",
    )
    from .cmd_reader import add_arguments

    add_arguments(r)


def run_command(args: argparse.Namespace) -> int:
    action = getattr(args, "conformance_command", None)
    if action == "export":
        return export_command(args)
    if action == "read":
        from .cmd_reader import run

        return run(args)
    if "jax" not in sys.modules:  # the (4, 2) mesh cases need 8 devices in this process
        flags = os.environ.get("XLA_FLAGS", "")
        if "device_count" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from .runner import ALL_GROUPS, run

    def show(msg: str) -> None:
        if not args.quiet:
            sys.stderr.write(f"\r\033[K{msg[:100]}" if sys.stderr.isatty() else f"{msg}\n")
            sys.stderr.flush()

    result = run(
        args.impl or DEFAULT_IMPLS,
        fixtures=args.fixtures,
        workdir=args.workdir,
        groups=args.group or ALL_GROUPS,
        progress=None if args.quiet else show,
    )
    if not args.quiet and sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    _write_reports(args, result)
    undocumented = result.failures(documented=False)
    print(
        f"{sum(r.status == 'pass' for r in result.results)} passed, "
        f"{len(result.failures())} failed ({len(undocumented)} undocumented), "
        f"{sum(r.status == 'n/a' for r in result.results)} n/a in {result.seconds:.0f} s",
        file=sys.stderr,
    )
    return 1 if undocumented else 0


def _write_reports(args: argparse.Namespace, result: Any) -> None:
    """The report files asked for (--report, --report-json), then stdout: the JSON report with
    --json, else the Markdown one where no file was asked for (stdout stays pure JSON with
    --json: what was written is said on stderr)."""
    from . import report

    said = sys.stderr if args.json else sys.stdout
    if args.report:
        jp = report.write(result, args.report, args.report_json)
        print(f"wrote {args.report} and {jp}", file=said)
    elif args.report_json:
        text = json.dumps(result.to_json(), indent=1)
        Path(args.report_json).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.report_json}", file=said)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        print()
    elif not (args.report or args.report_json):
        print(report.to_markdown(result))


def export_command(args: argparse.Namespace) -> int:
    from .export import EXPORT_GROUPS, MANIFEST_FILE, export
    from .runner import find_fixtures

    fixtures = find_fixtures(args.export_fixtures)
    if fixtures is None or not fixtures.is_dir():
        print("ockpt conformance export: no fixtures directory (use --fixtures)", file=sys.stderr)
        return 2
    try:
        manifest = export(args.dir, fixtures, groups=args.export_groups or EXPORT_GROUPS)
    except FileExistsError as e:
        print(f"ockpt conformance export: {e}", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for case in manifest["cases"]:
        counts[case["group"]] = counts.get(case["group"], 0) + 1
    written = os.path.join(args.dir, MANIFEST_FILE)
    if args.json:
        json.dump({"manifest": written, "cases": counts}, sys.stdout, indent=2)
        print()
    else:
        summary = ", ".join(f"{n} {g}" for g, n in counts.items())
        print(f"wrote {written}: {summary}")
    return 0
