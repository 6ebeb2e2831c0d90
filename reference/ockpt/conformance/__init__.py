"""The ockpt conformance suite: run any implementation of the Orbax checkpoint format against
the spec's cases, as producer (writer) and consumer (reader), and report a matrix.

`run(["ockpt-tensorstore", "orbax", "my_adapter.py"])` returns a `Run`; `report.write(run,
"out.md")` writes the Markdown and JSON reports. The adapter protocol is in `protocol`; the
case catalogue (data) in `cases`. ``ockpt conformance`` is the command-line entry. Importing
this package imports neither jax nor orbax.
"""

from .adapters import OckptAdapter, load_adapter
from .protocol import Adapter, WriteCase, supports
from .runner import Result, Run, run

__all__ = [
    "Adapter",
    "WriteCase",
    "supports",
    "OckptAdapter",
    "load_adapter",
    "run",
    "Run",
    "Result",
    "add_cli",
]


def add_cli(subparsers: object) -> None:
    """Register the ``conformance`` subcommand on an argparse subparsers object."""
    from .cli import add_parser

    add_parser(subparsers)
