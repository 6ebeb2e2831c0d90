"""``ockpt conformance``: run the suite and write the matrix report."""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_IMPLS = ["ockpt-tensorstore", "ockpt-python"]


def add_parser(subparsers: object) -> None:
    p = subparsers.add_parser(  # type: ignore[attr-defined]
        "conformance",
        help="run the conformance suite against implementations (producer x consumer x case)",
        description=(
            "Run the conformance suite. --impl names an adapter: ockpt-tensorstore, "
            "ockpt-python, orbax (conformance/adapters/orbax_adapter.py of the repository) or "
            "path/to/module.py[:name] / package.module[:name] for your own."
        ),
    )
    p.add_argument("--impl", action="append", help="an adapter (repeat); default: both ockpt")
    p.add_argument("--report", help="write the Markdown report here (and its .json twin)")
    p.add_argument("--json", dest="json_path", help="write the JSON report here")
    p.add_argument("--fixtures", help="golden fixtures directory (default: ./fixtures)")
    p.add_argument("--group", action="append", help="run only these groups (repeat)")
    p.add_argument("--workdir", help="keep what the producers wrote here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    if "jax" not in sys.modules:  # the (4, 2) mesh cases need 8 devices in this process
        flags = os.environ.get("XLA_FLAGS", "")
        if "device_count" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from . import report
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
    if args.report:
        jp = report.write(result, args.report, args.json_path)
        print(f"wrote {args.report} and {jp}")
    elif args.json_path:
        import json

        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, indent=1)
    else:
        print(report.to_markdown(result))
    undocumented = result.failures(documented=False)
    print(
        f"{sum(r.status == 'pass' for r in result.results)} passed, "
        f"{len(result.failures())} failed ({len(undocumented)} undocumented), "
        f"{sum(r.status == 'n/a' for r in result.results)} n/a in {result.seconds:.0f} s",
        file=sys.stderr,
    )
    return 1 if undocumented else 0
