"""The `ockpt` command as a user runs it (a subprocess), on real fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import FIXTURES

CASES = FIXTURES / "orbax-0.12.8"


def ockpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_detect_text_and_json():
    result = ockpt(
        "detect",
        str(CASES / "manager" / "checkpoint"),
        str(CASES / "v1_checkpointables" / "checkpoint"),
    )
    assert result.returncode == 0, result.stderr
    assert "manager_root" in result.stdout and "step 2 (2): committed" in result.stdout
    assert "v1_checkpoint" in result.stdout and "item 'state':" in result.stdout
    result = ockpt("detect", "--json", str(CASES / "sharded" / "checkpoint"))
    assert result.returncode == 0
    (layout,) = json.loads(result.stdout)
    assert layout["kind"] == "pytree_item" and layout["item"]["storage"] == "ocdbt"
    assert layout["committed"] is True


def test_detect_exit_code_for_non_checkpoints(tmp_path):
    result = ockpt("detect", str(tmp_path))
    assert result.returncode == 1 and "not_a_checkpoint" in result.stdout


def test_tree_lists_leaves():
    result = ockpt("tree", "--json", str(CASES / "nested" / "checkpoint"))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows and all({"key_path", "param_name", "value_type"} <= set(r) for r in rows)
    assert {"None", "Dict", "List"} <= {r["value_type"] for r in rows}


def test_tree_reports_malformed_metadata(tmp_path):
    (tmp_path / "_METADATA").write_text('{"tree_metadata": {"x": 1}}')
    result = ockpt("tree", str(tmp_path))
    assert result.returncode == 1
    assert "_METADATA" in result.stderr and "META-002" in result.stderr
    assert "Traceback" not in result.stderr


def test_version():
    import ockpt as ockpt_api

    result = ockpt("--version")
    assert result.returncode == 0 and result.stdout == f"ockpt {ockpt_api.__version__}\n"


def _parsers(parser, path=("ockpt",)):
    """(command path, parser) for `parser` and every subcommand under it."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_command_and_argument_has_help():
    import argparse

    from ockpt.cli import build_parser

    missing = []
    for path, parser in _parsers(build_parser()):
        if len(path) > 1 and not parser.description:
            missing.append(f"{' '.join(path)}: no description")
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{' '.join(path)} {action.dest}: no help")
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest for a in action._choices_actions if a.help}
                missing += [
                    f"{' '.join(path)} {n}: no help" for n in action.choices if n not in listed
                ]
    assert not missing, "\n".join(missing)


def test_json_is_a_switch_everywhere():
    """Every command that prints results takes a bare --json (no value)."""
    from ockpt.cli import build_parser

    takes_json = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if "--json" in action.option_strings:
                assert action.nargs == 0, f"{' '.join(path)} --json takes a value"
                takes_json.append(path[-1])
    expected = {"detect", "tree", "validate", "inspect", "ls", "cat", "diff", "convert", "cp"}
    assert expected | {"conformance", "export"} <= set(takes_json)
    args = build_parser().parse_args(["conformance", "--json", "--report-json", "r.json"])
    assert args.json is True and args.report_json == "r.json"


def test_paths_print_as_given(tmp_path):
    """Relative paths stay relative in text, JSON and error messages."""
    rel = os.path.relpath(CASES, tmp_path)  # run from elsewhere: ../../.../orbax-0.12.8
    bad = os.path.relpath(FIXTURES / "bad", tmp_path)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "ockpt.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )

    given = f"./{rel}/manager/checkpoint"
    assert run("detect", given).stdout.startswith(f"{given}: manager_root")
    assert json.loads(run("validate", "--json", given).stdout)["path"] == given
    assert json.loads(run("ls", "--json", given).stdout)["path"] == given
    listing = json.loads(run("inspect", "--json", given).stdout)
    assert listing["path"] == given and listing["item_path"].startswith(given + "/")
    for case in ("ocdbt_manifest_crc", "ocdbt_node_crc"):  # errors of the OCDBT reader
        shown = f"./{bad}/{case}/checkpoint"
        result = run("cat", shown, "x")
        assert result.returncode == 1 and result.stderr.startswith(f"ockpt: {shown}/")
    src = f"{rel}/sharded/checkpoint"
    assert run("cp", "--no-progress", src, "copy").returncode == 0
    result = run("cp", "--no-progress", src, "./copy")
    assert result.returncode == 1
    assert result.stderr == (
        "ockpt: ./copy: a checkpoint already exists there; pass --overwrite to replace it "
        "[DIR-002]\n"
    )
    assert json.loads(run("cp", "--json", "--overwrite", src, "./copy").stdout)["dst"] == "./copy"
