"""Every `ockpt` command shown in README.md's "Command line" section runs as shown (with its
output directory moved into a temporary directory) and prints what the fixture holds: the
steps, leaves, shapes and values that Orbax saved, as its recording (`expected.json` and the
`arrays/*.npy` beside each fixture) has them, and the files it writes hold those bytes."""

from __future__ import annotations

import json
import re
import shlex
import struct
import subprocess
import sys
from collections.abc import Callable

import numpy as np

from tests.support import FIXTURES, ROOT

CASES = FIXTURES / "orbax-0.12.8"
#: safetensors dtype names of the fixture's dtypes (the safetensors format's own table)
SAFETENSORS_DTYPES = {"float32": "F32", "int32": "I32", "bfloat16": "BF16", "int64": "I64"}


def _commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [
        shlex.split(line) for b in blocks for line in b.splitlines() if line.startswith("ockpt ")
    ]


def _leaves(case: str, item: str) -> dict[str, dict]:
    """The leaves of one item of a fixture, as its recording describes them."""
    expected = json.loads((CASES / case / "expected.json").read_text(encoding="utf-8"))
    return expected["items"][item]["items"]


def _saved(case: str, item: str = "") -> dict[str, np.ndarray]:
    """The arrays Orbax saved in an item of a fixture (bfloat16 recorded as its uint16 bits)."""
    return {n: np.load(CASES / case / e["file"]) for n, e in _leaves(case, item).items()}


def _table(text: str) -> dict[str, dict[str, str]]:
    """The rows of the first table in `text` (columns two or more spaces apart, a header
    starting with "leaf"), by leaf name: {column: cell}."""
    lines = [re.split(r"\s{2,}", ln.strip()) for ln in text.splitlines() if ln.strip()]
    start = next(i for i, cells in enumerate(lines) if cells[0] == "leaf")
    head = lines[start]
    rows = {}
    for cells in lines[start + 1 :]:
        if cells[0].startswith("total:"):
            break
        rows[cells[0]] = dict(zip(head, cells, strict=False))
    return rows


def check_inspect(out: str, args: list[str]) -> None:
    """Each step of the manager committed, the latest one shown, and each of its leaves with
    its shape and dtype."""
    for step in (0, 1, 2):
        assert re.search(rf"step {step}: committed", out), out
    assert re.search(r"step 2: committed.*<- shown", out), out
    rows = _table(out.split("/2/params:", 1)[1])  # the leaves of the item shown
    for name, leaf in _leaves("manager", "2/params").items():
        row = rows[name]
        assert row["shape"] == str(tuple(leaf.get("shape", ()))), row
        assert row["dtype"] == leaf.get("dtype", "int64"), row  # a Python int: int64
    assert re.search(r"\b3 leaves\b", out), out


def check_ls(out: str, args: list[str]) -> None:
    """Three steps, each committed, each with its items `meta` (JSON) and `params` (pytree)."""
    assert re.search(r"\b3 step\(s\)", out), out
    for step in (0, 1, 2):
        assert re.search(rf"step {step}: step, committed", out), out
    assert len(re.findall(r"^\s+meta: json_item .*committed", out, re.M)) == 3, out
    assert len(re.findall(r"^\s+params: pytree_item .*committed", out, re.M)) == 3, out


def check_cat(out: str, args: list[str]) -> None:
    """The printed values are those of rows 0:2 of `xy`, each the float32 Orbax saved."""
    want = _saved("sharded")["xy"][0:2, :]
    got = np.array([float(t) for t in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", out)], np.float32)
    assert got.reshape(want.shape).tobytes() == want.tobytes(), out


def check_convert(out: str, args: list[str]) -> None:
    """The safetensors file holds every leaf with its dtype, shape and saved bytes (read with
    the format's own layout: a little-endian header length, a JSON header, the data)."""
    saved = _saved("sharded")
    assert re.search(rf"\b{len(saved)} leaves\b", out), out
    data = (ROOT / args[-1]).read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    assert set(header) == set(saved)
    for name, leaf in _leaves("sharded", "").items():
        entry = header[name]
        start, end = entry["data_offsets"]
        assert entry["dtype"] == SAFETENSORS_DTYPES[leaf["dtype"]], name
        assert entry["shape"] == leaf["shape"], name
        assert data[8 + n + start : 8 + n + end] == saved[name].tobytes(), name


def check_diff(out: str, args: list[str]) -> None:
    """The checkpoint and its safetensors export are equal, every leaf compared."""
    assert "no differences" in out and re.search(rf"\b{len(_saved('sharded'))} leaves\b", out)


def check_cp(out: str, args: list[str]) -> None:
    """Every file of the manager root copied, byte for byte, and nothing else."""
    src, dst = ROOT / args[-2], ROOT / args[-1]
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert sorted(p.relative_to(dst) for p in dst.rglob("*") if p.is_file()) == files
    assert all((dst / f).read_bytes() == (src / f).read_bytes() for f in files)
    assert re.search(rf"\b{len(files)} files\b", out), out


def check_fingerprint(out: str, args: list[str]) -> None:
    """The file holds the fixture's fingerprint: an OCDBT item of zarr v2 arrays."""
    from ockpt import fingerprints

    written = (ROOT / args[-1]).read_text(encoding="utf-8")
    assert written == fingerprints.dumps(fingerprints.fingerprint(ROOT / args[1]))
    assert json.loads(written)["storage"] == "ocdbt" and '"zarr_format": 2' in written


def check_diff_format(out: str, args: list[str]) -> None:
    """zarr v2 against zarr v3: the arrays, their codecs, dtype names and OCDBT keys differ;
    the layout and the documents' forms that zarr does not touch do not."""
    changed = {line.split()[1].split("/")[1] for line in out.splitlines()[:-1]}
    assert {"arrays", "codecs", "dtypes", "ocdbt"} <= changed, out
    assert not changed & {"kind", "storage", "files"}, out
    assert out.splitlines()[-1].endswith("format differences"), out


def check_compat(out: str, args: list[str]) -> None:
    """An OCDBT item without the msgpack file: Orbax 0.5.21 or later, as --require-orbax 0.10.3
    agrees (exit 0); each feature on a line of its own."""
    lines = out.splitlines()
    assert lines[0].endswith("restorable by Orbax >= 0.5.21"), out
    assert any(line.strip().startswith("no_msgpack:") for line in lines), out
    assert any(line.strip().startswith("ocdbt_per_process:") for line in lines), out


#: what each command must print (its standard output) and write, given its arguments, and its
#: exit status, by the command's name (``diff --format`` apart from ``diff``)
CHECKS: dict[str, tuple[Callable[[str, list[str]], None], int]] = {
    "inspect": (check_inspect, 0),
    "ls": (check_ls, 0),
    "cat": (check_cat, 0),
    "convert": (check_convert, 0),
    "diff": (check_diff, 0),
    "fingerprint": (check_fingerprint, 0),
    "compat": (check_compat, 0),
    "diff --format": (check_diff_format, 1),  # the two fixtures' formats differ
    "cp": (check_cp, 0),
}


def _name(argv: list[str]) -> str:
    return f"{argv[1]} --format" if "--format" in argv else argv[1]


def test_readme_shows_each_command_once():
    names = [_name(c) for c in _commands()]
    assert sorted(names) == sorted(CHECKS)


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
        check, status = CHECKS[_name(argv)]
        assert result.returncode == status, (argv, result.stderr)
        check(result.stdout, args)
