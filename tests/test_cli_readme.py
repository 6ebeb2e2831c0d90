"""Every `ockpt` command shown in README.md's "Command line" section runs as shown (with its
output directory moved into a temporary directory)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from conftest import ROOT


def _commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [
        shlex.split(line) for b in blocks for line in b.splitlines() if line.startswith("ockpt ")
    ]


def test_readme_shows_each_command_once():
    names = [c[1] for c in _commands()]
    assert sorted(names) == sorted({"inspect", "ls", "cat", "convert", "diff", "cp"})


def test_readme_commands_run(tmp_path):
    for argv in _commands():
        args = [a.replace("/tmp/ockpt-demo", str(tmp_path)) for a in argv[1:]]
        result = subprocess.run(
            [sys.executable, "-m", "ockpt.cli", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, (argv, result.stderr)
        assert result.stdout.strip(), argv
