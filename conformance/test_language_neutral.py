"""The language-neutral suite (issue 18): ``ockpt conformance export``, the command adapter,
ockpt run through it (scored like the Python adapter), and the example C reader."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from jsonschema import Draft202012Validator

from ockpt.cli import main as ockpt_main
from ockpt.conformance import run
from ockpt.conformance.cases import FEATURES
from ockpt.conformance.command import (
    CommandAdapter,
    CommandFailure,
    CommandRefusal,
    CommandUnsupported,
    OutputError,
    output_schema,
    validate_output,
)
from ockpt.conformance.compare import differences
from ockpt.conformance.export import MANIFEST_FILE, export, manifest_schema
from ockpt.conformance.fixture_cases import bad_cases, database_cases, golden_cases
from ockpt.conformance.leaves import tree_from_records, write_records
from ockpt.dtypes import SUPPORTED
from ockpt.ocdbt import Database

from .conftest import FIXTURES, c_build

PY = shlex.quote(sys.executable)
#: ockpt as a command reader (python backend), with its capabilities file
OCKPT_TEMPLATE = (
    f"{PY} -m ockpt.conformance.cmd_reader {{checkpoint}} {{out}} "
    "--step {step} --item {item} --kind {kind}"
)


def _ockpt_caps(tmp: Path) -> Path:
    out = subprocess.run(
        [sys.executable, "-m", "ockpt.conformance.cmd_reader", "--capabilities"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp / "ockpt-caps.json"
    path.write_text(out)
    return path


def _tree_hash(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
    }


# -- export -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "suite"
    manifest = export(out, FIXTURES)
    return out, manifest


def test_export_validates_against_its_schema(exported):
    """Plain jsonschema, with the schema file the export ships."""
    out, _ = exported
    schema = json.loads((out / "manifest.schema.json").read_text())
    assert schema == manifest_schema()
    Draft202012Validator.check_schema(schema)
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    errors = list(Draft202012Validator(schema).iter_errors(manifest))
    assert not errors, "\n".join(f"{e.json_path}: {e.message[:200]}" for e in errors[:5])
    assert manifest["format"] == "ockpt-conformance-export"
    assert manifest["format_version"].split(".")[0] == "1"
    assert manifest["spec_version"][0].isdigit()
    output = json.loads((out / "command-output.schema.json").read_text())
    assert output == output_schema()
    # the leaf record is one definition, shared by the manifest and the command output
    assert schema["$defs"]["leaf"] == output["$defs"]["leaf"]
    assert schema["$defs"]["dtype"]["enum"] == list(SUPPORTED)
    assert set(manifest["features"]) == set(FEATURES)


def test_export_holds_every_case_and_its_values(exported):
    out, manifest = exported
    by_id = {c["id"]: c for c in manifest["cases"]}
    golden = golden_cases(FIXTURES)
    assert {c.id for c in golden} == {
        c["id"] for c in manifest["cases"] if c["group"] == "fixtures"
    }
    assert any(c.fixture_set.startswith("ockpt-") for c in golden)
    bad = bad_cases(FIXTURES, golden)
    assert {b.id for b in bad} == {c["id"] for c in manifest["cases"] if c["group"] == "bad_corpus"}
    for fc in golden:
        case = by_id[fc.id]
        ckpt = out / case["checkpoint"]
        assert ckpt.is_dir() and any(ckpt.iterdir()), fc.id
        assert case["reach"] == {"step": fc.step, "item": fc.item}
        assert case["exercises"]["release"] == fc.release
        exp = case["expect"]
        # the expected leaves are the fixture's tree, read back from .npy + JSON alone
        got = tree_from_records(exp["leaves"], out / exp["dir"])
        assert not differences(got, fc.tree, strict=False), fc.id
        for rec in exp["leaves"]:
            if "file" in rec:
                stored = np.load(out / exp["dir"] / rec["file"], allow_pickle=False)
                assert stored.dtype.isbuiltin != 2, "plain numpy dtypes only"
    for b in bad:
        case = by_id[b.id]
        assert (out / case["checkpoint"]).exists(), b.id
        assert case["expect"]["rule"] == b.rule
        assert b.rule is None or b.rule in case["expect"]["accepted_rules"]


def test_ml_dtypes_are_exported_as_raw_bits(exported):
    out, manifest = exported
    seen = set()
    for case in manifest["cases"]:
        for rec in case.get("expect", {}).get("leaves", []):
            if rec["kind"] == "array" and "npy_dtype" in rec:
                stored = np.load(out / case["expect"]["dir"] / rec["file"])
                dtype = np.dtype(getattr(ml_dtypes, rec["dtype"]))
                assert stored.dtype.name == rec["npy_dtype"]
                assert stored.dtype.itemsize == dtype.itemsize
                seen.add(rec["dtype"])
    assert {"bfloat16", "int4", "float8_e4m3fn"} <= seen
    # a narrow type keeps its low bits only: int4 -1 is 0x0f, as zarr stores it
    recs = write_records({"a": np.array([-1, 7], dtype=ml_dtypes.int4)}, out / "_int4")
    assert np.load(out / "_int4" / recs[0]["file"]).tolist() == [0x0F, 0x07]


def test_export_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(FileExistsError):
        export(tmp_path, FIXTURES, groups=["bad_corpus"])


def test_export_command_line(tmp_path, capsys):
    assert ockpt_main(["conformance", "export", str(tmp_path / "e"), "--group", "bad_corpus"]) == 0
    assert "bad_corpus" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "e" / MANIFEST_FILE).read_text())
    Draft202012Validator(manifest_schema()).validate(manifest)
    assert {c["group"] for c in manifest["cases"]} == {"bad_corpus"}


# -- leaf records and the command protocol ----------------------------------------------------


def test_leaf_records_round_trip(tmp_path):
    tree = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "bf": np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16),
        "i4": np.array([-8, 7], dtype=ml_dtypes.int4),
        "empty": np.zeros((0, 4), np.int16),
        "l": [1, 2.5, True, "s", None, [], {}],
        "np": np.float32(0.25),
        "c": 1 + 2j,
        "nan": float("nan"),
        "big": 2**63 - 1,
        "odd key/with.dot": {"": np.int8(3)},
    }
    recs = write_records(tree, tmp_path)
    validate_output({"format": "ockpt-conformance-output/1", "leaves": recs}, "pytree_result")
    got = tree_from_records(json.loads(json.dumps(recs)), tmp_path)
    assert not differences(got, tree, strict=False)


def _program(tmp_path: Path, body: str) -> str:
    """A command template running a small Python program (its argv: checkpoint, out)."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import json, os, sys, time\nfrom pathlib import Path\n"
        "ckpt, out = sys.argv[1], Path(sys.argv[2])\n" + textwrap.dedent(body)
    )
    return f"{PY} {shlex.quote(str(script))} {{checkpoint}} {{out}}"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("sys.exit(3)\n", CommandFailure),  # no output
        ("(out / 'result.json').write_text('{')\n", OutputError),  # not JSON
        ("(out / 'result.json').write_text(json.dumps({'leaves': []}))\n", OutputError),  # schema
        (
            "(out / 'result.json').write_text(json.dumps({'format': "
            "'ockpt-conformance-output/1', 'leaves': [{'path': ['a'], 'kind': 'array', "
            "'dtype': 'float32', 'shape': [2], 'file': '../../etc/x.npy'}]}))\n",
            OutputError,  # a file outside {out}
        ),
        ("time.sleep(30)\n", CommandFailure),  # past the time limit
        (
            "(out / 'error.json').write_text(json.dumps({'rule': 'OCDBT-005', 'message': 'crc'}))\n"
            "sys.exit(1)\n",
            CommandRefusal,
        ),
        (
            "(out / 'error.json').write_text(json.dumps({'unsupported': True, 'message': 'v3'}))\n",
            CommandUnsupported,
        ),
    ],
)
def test_command_outcomes(tmp_path, body, error):
    adapter = CommandAdapter(_program(tmp_path, body), timeout=3)
    with pytest.raises(error) as info:
        adapter.read(tmp_path)
    if error is CommandRefusal:
        assert info.value.rule == "OCDBT-005"


def test_command_placeholders_and_environment(tmp_path):
    body = """
    import numpy as np
    env = {k: v for k, v in os.environ.items() if k.startswith('OCKPT_CONFORMANCE_')}
    np.save(out / 'x.npy', np.arange(3, dtype=np.int64))
    leaves = [{'path': ['argv'], 'kind': 'string', 'value': json.dumps(sys.argv[1:])},
              {'path': ['env'], 'kind': 'string', 'value': json.dumps(env)},
              {'path': ['x', 0], 'kind': 'array', 'dtype': 'int64', 'shape': [3], 'file': 'x.npy'}]
    (out / 'result.json').write_text(json.dumps(
        {'format': 'ockpt-conformance-output/1', 'leaves': leaves}))
    """
    template = _program(tmp_path, body) + " --step {step} --item {item} {kind}"
    got = CommandAdapter(template).read(tmp_path / "a b", step=3, item="params")
    argv = json.loads(got["argv"])
    assert argv[0] == str(tmp_path / "a b") and argv[2:] == [
        "--step",
        "3",
        "--item",
        "params",
        "pytree",
    ]
    env = json.loads(got["env"])
    assert env["OCKPT_CONFORMANCE_STEP"] == "3" and env["OCKPT_CONFORMANCE_KIND"] == "pytree"
    assert got["x"][0].tolist() == [0, 1, 2]
    assert CommandAdapter(template).read(tmp_path)["argv"].count('""') == 2  # no step, no item


def test_command_arguments_never_reach_a_shell(tmp_path):
    """The audit of issue 32 item 6: a checkpoint path and an item name holding spaces, quotes,
    ``;``, ``$(...)`` and backticks are each one argument of the program, as given; nothing
    they spell runs (no shell parses the template once it is filled in)."""
    body = """
    leaves = [{'path': ['argv'], 'kind': 'string', 'value': json.dumps(sys.argv[1:])}]
    (out / 'result.json').write_text(json.dumps(
        {'format': 'ockpt-conformance-output/1', 'leaves': leaves}))
    """
    pwned = tmp_path / "PWNED"
    hostile = f"a b'\"; touch {pwned}; $(touch {pwned}) `touch {pwned}`"
    template = _program(tmp_path, body) + " --item {item}"
    got = CommandAdapter(template).read(tmp_path / hostile, item=hostile)
    argv = json.loads(got["argv"])
    assert argv[0] == str(tmp_path / hostile) and argv[2:] == ["--item", hostile]
    assert not pwned.exists()


# -- ockpt through the command adapter scores as the Python adapter ---------------------------


@pytest.mark.slow  # the slow matrix: the whole suite through a subprocess per case
def test_ockpt_through_the_command_adapter_scores_like_the_python_adapter(tmp_path):
    spec = f"cmd({_ockpt_caps(tmp_path)}):{OCKPT_TEMPLATE}"
    groups = ["fixtures", "bad_corpus", "databases"]
    result = run(["ockpt-python", spec], fixtures=FIXTURES, groups=groups)
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in result.results:
        cells.setdefault((r.group, r.case), {})[r.consumer] = r.status
    want = {"fixtures", "bad_corpus"} | ({"databases"} if database_cases(FIXTURES) else set())
    assert {g for g, _ in cells} == want
    differ = {k: v for k, v in cells.items() if len(v) != 2 or len(set(v.values())) != 1}
    assert not differ, differ
    assert sum(v["ockpt-python"] == "pass" for v in cells.values()) >= len(cells) - 2
    # the bad corpus is scored by rule id for the command reader: every refusal it passes
    # names one of the variant's accepted rules
    cmd = [
        r for r in result.results if r.consumer == "cmd:ockpt-python" and r.group == "bad_corpus"
    ]
    assert all(
        "[" in r.reason for r in cmd if r.status == "pass" and r.reason.startswith("Command")
    )


def test_cmd_reader_command_line_matches_the_module(tmp_path):
    case = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint"
    a, b = tmp_path / "a", tmp_path / "b"
    assert ockpt_main(["conformance", "read", str(case), str(a), "--step", "1", "--item", ""]) == 0
    subprocess.run(
        [sys.executable, "-m", "ockpt.conformance.cmd_reader", str(case), str(b), "--step", "1"],
        check=True,
    )
    assert (a / "result.json").read_text() == (b / "result.json").read_text()
    assert _tree_hash(a) == _tree_hash(b)
    bad = FIXTURES / "bad" / "ocdbt_node_crc" / "checkpoint"
    assert ockpt_main(["conformance", "read", str(bad), str(tmp_path / "c")]) == 1
    assert json.loads((tmp_path / "c" / "error.json").read_text())["rule"] == "OCDBT-005"


# -- the example C reader ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def c_reader(tmp_path_factory):
    build = c_build()
    try:
        exe = build.build(tmp_path_factory.mktemp("c_reader"))
    except build.Unavailable as e:
        pytest.skip(f"example C reader not built: {e}")
    return exe, build.spec(exe)


def test_c_reader_lists_the_keys_ockpt_lists(c_reader, tmp_path):
    exe, _ = c_reader
    for case in ("orbax-0.12.8/sharded", "orbax-0.5.15/zero_size", "orbax-0.4.8/numpy_dtypes"):
        db = FIXTURES / case / "checkpoint"
        out = subprocess.run([exe, "--list", str(db)], capture_output=True, check=True).stdout
        listed = [line.split(b"\t")[0] for line in out.splitlines()]
        with Database(db) as ref:
            assert listed == ref.list(), case


def test_c_reader_through_the_command_adapter(c_reader, tmp_path):
    """Built with the local toolchain, run on a copy of the fixtures (a reader under test must
    not be able to change them): no failure in the fixtures, bad corpus and database groups;
    what it does not declare is n/a."""
    _, spec = c_reader
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    before = _tree_hash(copy)
    result = run([spec], fixtures=copy, groups=["fixtures", "bad_corpus", "databases"])
    fails = [
        f"{r.group} {r.case}: [{r.rule}] {r.reason}" for r in result.results if r.status == "fail"
    ]
    assert not fails, "\n".join(fails)
    passed = {
        g: sum(r.status == "pass" and r.group == g for r in result.results)
        for g in ("fixtures", "bad_corpus", "databases")
    }
    assert passed["fixtures"] >= 30 and passed["bad_corpus"] >= 30, passed
    # bare databases with interior nodes and version tree nodes: every key listed
    assert passed["databases"] == len(database_cases(copy)), passed
    na = [r for r in result.results if r.status == "n/a" and r.group == "fixtures"]
    assert all(r.reason for r in na)
    assert _tree_hash(copy) == before, "the reader changed its input"


# -- building it: a private cache, never a program someone else put there ---------------------

SHARDED_DB = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The build module with the system's temporary directory moved under `tmp_path`."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp))
    monkeypatch.delenv("OCKPT_C_SANITIZE", raising=False)
    return c_build(), tmp


def _lists_like_ockpt(exe: Path) -> None:
    out = subprocess.run([exe, "--list", str(SHARDED_DB)], capture_output=True, check=True)
    with Database(SHARDED_DB) as ref:
        assert [line.split(b"\t")[0] for line in out.stdout.splitlines()] == ref.list()


def test_c_reader_build_cache_is_private(private_tmp):
    import os
    import stat

    build, tmp = private_tmp
    try:
        exe = build.build()
    except build.Unavailable as e:
        pytest.skip(f"example C reader not built: {e}")
    cache = build.cache_dir()
    assert exe.parent == cache and cache.parent == tmp
    st = os.lstat(cache)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid() == os.lstat(exe).st_uid
    assert not os.lstat(exe).st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    built = os.lstat(exe).st_mtime_ns
    assert build.build() == exe and os.lstat(exe).st_mtime_ns == built  # reused, not rebuilt
    _lists_like_ockpt(exe)


def _plant(directory: Path, marker: Path, digest: str, mode: int = 0o755) -> None:
    """A program where a cached build lies, with the stamp of the current source: run, it
    would only leave `marker` behind."""
    program = directory / "ockpt_c_reader"
    program.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\n")
    program.chmod(mode)
    (directory / "SOURCE_SHA256").write_text(digest + "\n")


@pytest.mark.parametrize("planted", ["open_directory", "symlink", "writable_program"])
def test_c_reader_build_never_runs_a_planted_program(private_tmp, tmp_path, planted):
    """``$TMPDIR`` is shared: a directory at the cache's path that others may write to, a
    symbolic link there, or a program there that others may write to is not trusted; the
    reader is built afresh and the planted program never runs."""
    import os
    import stat

    build, tmp = private_tmp
    cache = build.cache_dir()
    digest = cache.name.rsplit("-", 1)[1]
    marker = tmp_path / "planted-program-ran"
    if planted == "open_directory":
        cache.mkdir()
        cache.chmod(0o777)
        _plant(cache, marker, digest)
    elif planted == "symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        _plant(elsewhere, marker, digest)
        cache.symlink_to(elsewhere)
    else:
        cache.mkdir(mode=0o700)
        _plant(cache, marker, digest, mode=0o777)
    try:
        exe = build.build()
    except build.Unavailable as e:
        pytest.skip(f"example C reader not built: {e}")
    assert exe.read_bytes()[:4] == b"\x7fELF"
    _lists_like_ockpt(exe)
    assert not marker.exists(), "the planted program ran"
    if planted == "writable_program":
        assert exe.parent == cache  # our private directory: rebuilt in place
    else:
        assert exe.parent.parent == tmp and exe.parent != cache  # a fresh private directory
        assert stat.S_IMODE(os.lstat(exe.parent).st_mode) == 0o700
    if planted == "symlink":
        assert (tmp_path / "elsewhere" / "ockpt_c_reader").read_text().startswith("#!/bin/sh")
    assert not marker.exists()


def test_c_reader_sanitizer_build_unavailable(tmp_path, monkeypatch):
    """A compiler that cannot build with the sanitizers: `Unavailable`, saying so."""
    build = c_build()
    fake = tmp_path / "cc"
    fake.write_text('#!/bin/sh\necho "error: unsupported option -fsanitize" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setattr(build, "_compilers", lambda: [str(fake)])
    with pytest.raises(build.Unavailable, match="fsanitize"):
        build.build(tmp_path / "out", sanitize=True)
    assert build.cache_dir(sanitize=True) != build.cache_dir(sanitize=False)
