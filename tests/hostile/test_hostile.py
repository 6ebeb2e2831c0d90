"""Hostile checkpoints: the limits of spec/limits.md (LIMIT-001..004) and names or links that
would lead out of the checkpoint (PATH-003, PATH-004), on real fixtures copied and edited."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt.documents import MetadataDocument
from ockpt.errors import FormatError
from ockpt.limits import LIMITS, Limits, applied
from ockpt.paths import tree_key, unsafe_path
from ockpt.store import as_store
from ockpt.store.files import check_tree, resolve_inside
from tests.support import FIXTURES
from tests.support.errors import assert_error

NO_OCDBT = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"
OCDBT = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"
BACKENDS = ["python", "tensorstore"]


def _entry(keys: list[str]) -> tuple[str, dict]:
    return tree_key(keys), {
        "key_metadata": [{"key": k, "key_type": 2} for k in keys],
        "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False},
    }


def _metadata(*paths: list[str]) -> bytes:
    return json.dumps({"tree_metadata": dict(_entry(p) for p in paths)}).encode()


def _rule(excinfo) -> str:  # type: ignore[no-untyped-def]
    return excinfo.value.rule


# ---------------------------------------------------------------------------------------------
# limits


def test_limit_001_defaults_are_the_spec_table():
    """LIMIT-001: the reference reader enforces exactly the table of spec/limits.md."""
    table = (Path(__file__).resolve().parents[2] / "spec" / "limits.md").read_text()
    assert "| 1 GiB (2^30) | `JSON-003` |" in table and LIMITS.max_json_bytes == 1 << 30
    assert "| 2^24 | `LIMIT-002` |" in table and LIMITS.max_tree_entries == 1 << 24
    assert "| 65 535 | `LIMIT-003` |" in table and LIMITS.max_key_bytes == 65535
    assert "| 64 | `LIMIT-004` |" in table and LIMITS.max_depth == 64
    assert LIMITS.max_node_bytes == 1 << 30
    assert LIMITS.max_chunk_bytes == LIMITS.max_msgpack_bytes == 1 << 34
    assert LIMITS.max_ndim == 64 and LIMITS.max_zarr_ndim == 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.max_depth = 1  # type: ignore[misc]


def test_limit_001_every_parser_reads_the_limits_in_force():
    """Each parser takes its bound from the limits in force when it runs (`limits.current`,
    set by a caller's ``limits=``), not from a value fixed at import."""
    from ockpt.documents._json import parse_json
    from ockpt.msgpack_legacy import decode_checkpoint
    from ockpt.ocdbt import format as ocdbt_format
    from ockpt.zarr._common import check_extent

    def rule_of(call) -> str:  # type: ignore[no-untyped-def]
        with pytest.raises(FormatError) as e:
            call()
        return e.value.rule

    with applied(Limits(max_json_bytes=1)):
        assert rule_of(lambda: parse_json(b"[]", file="j")) == "JSON-003"
    with applied(Limits(max_depth=1)):
        assert rule_of(lambda: parse_json(b"[[]]", file="j")) == "JSON-003"
        assert rule_of(lambda: decode_checkpoint(b"\x81\xa1a\x81\xa1b\x01")) == "MSGPACK-005"
    with applied(Limits(max_msgpack_bytes=2)):
        assert rule_of(lambda: decode_checkpoint(b"\x81\xa1a\x01")) == "MSGPACK-001"
    with applied(Limits(max_chunks=3)):
        grid = lambda: check_extent((4,), (1,), np.dtype("u1"), file="z", pointer="")  # noqa: E731
        assert rule_of(grid) == "ZARR-005"
    unbounded = ocdbt_format.Config(b"u" * 16, 0, 0, 0, 4, None)  # no node size target
    with applied(Limits(max_node_bytes=1234)):
        assert ocdbt_format.node_bound(unbounded) == 1234
    assert ocdbt_format.node_bound(unbounded) == LIMITS.max_node_bytes
    assert ocdbt_format._MAX_VARINT_BYTES == 10  # a format fact, not a limit: ceil(64 / 7)


def test_limit_002_tree_entries():
    with applied(Limits(max_tree_entries=2)):
        _limit_002()


def _limit_002() -> None:
    MetadataDocument.from_bytes(_metadata(["a"], ["b"]), file="m")
    for n in (3, 50):  # refused while parsing, at the first entry over the limit
        with pytest.raises(FormatError) as e:
            MetadataDocument.from_bytes(_metadata(*[[f"k{i}"] for i in range(n)]), file="m")
        assert _rule(e) == "LIMIT-002" and e.value.got == "more than 2"
    with pytest.raises(FormatError) as e:  # a parsed document given to from_json: its count
        MetadataDocument.from_json(json.loads(_metadata(["a"], ["b"], ["c"])), file="m")
    assert _rule(e) == "LIMIT-002" and e.value.got == 3


def test_limit_003_key_length():
    ok = "k" * LIMITS.max_key_bytes
    MetadataDocument.from_bytes(_metadata([ok]), file="m")
    with pytest.raises(FormatError) as e:
        MetadataDocument.from_bytes(_metadata([ok + "k"]), file="m")
    assert _rule(e) == "LIMIT-003"
    wide = "\u043a" * (LIMITS.max_key_bytes // 2 + 1)  # two UTF-8 bytes each
    with pytest.raises(FormatError) as e:
        MetadataDocument.from_bytes(_metadata([wide]), file="m")
    assert_error(e, rule="LIMIT-003", file="m")
    # lone surrogates (JSON "\ud800", 3 bytes each in UTF-8): counted, never UnicodeEncodeError
    lone = "\ud800" * (LIMITS.max_key_bytes // 3 + 1)
    with pytest.raises(FormatError) as e:
        MetadataDocument.from_bytes(_metadata([lone]), file="m")
    assert_error(e, rule="LIMIT-003", file="m")


def test_limit_004_key_path_depth():
    MetadataDocument.from_bytes(_metadata(["k"] * LIMITS.max_depth), file="m")
    with pytest.raises(FormatError) as e:
        MetadataDocument.from_bytes(_metadata(["k"] * (LIMITS.max_depth + 1)), file="m")
    assert _rule(e) == "LIMIT-004"


@pytest.mark.parametrize("number", ["1e999", "-1e400", "1E+309"])
def test_json_number_out_of_double_range_is_json_001(number):
    """Found by fuzzing: 1e999 parsed to inf, which JSON-001 forbids (and which then could not
    be written back)."""
    with pytest.raises(FormatError) as e:
        ockpt.CheckpointMetadata.from_bytes(f'{{"init_timestamp_nsecs": {number}}}'.encode())
    assert _rule(e) == "JSON-001"


@pytest.mark.parametrize("order", ['[1, "regular", 0]', "[true, false]", "[1.0, 0]", '"01"'])
def test_transpose_order_of_other_types_is_zarr_013(order):
    """Found by fuzzing (zarr target): an order mixing strings and ints raised TypeError from
    sorting it; booleans and floats equal to a permutation were accepted."""
    from ockpt.zarr.v3 import ArrayV3Metadata

    text = (
        '{"zarr_format": 3, "node_type": "array", "shape": [8, 8], "data_type": "int32",'
        ' "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},'
        ' "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": ['
        f'{{"name": "transpose", "configuration": {{"order": {order}}}}},'
        ' {"name": "bytes", "configuration": {"endian": "little"}}]}'
    )
    with pytest.raises(FormatError) as e:
        ArrayV3Metadata.from_bytes(text.encode(), file="zarr.json")
    assert _rule(e) == "ZARR-013"


# ---------------------------------------------------------------------------------------------
# paths: names


@pytest.mark.parametrize(
    "name, bad",
    [
        ("a", False),
        ("a/b.c", False),
        ("a/", False),
        ("a//b", False),
        ("./a", False),
        ("..a/b..", False),
        ("..", True),
        ("a/../../b", True),
        ("a/..", True),
        ("/etc/passwd", True),
        ("a\0b", True),
    ],
)
def test_path_003_unsafe_path(name, bad):
    assert (unsafe_path(name) is not None) == bad


def _edit_metadata(item: Path, rename: dict[str, str]) -> None:
    """Rename keys of `_METADATA` (tree keys follow)."""
    doc = json.loads((item / "_METADATA").read_text())
    tree = {}
    for entry in doc["tree_metadata"].values():
        for k in entry["key_metadata"]:
            k["key"] = rename.get(k["key"], k["key"])
        tree[tree_key([k["key"] for k in entry["key_metadata"]])] = entry
    doc["tree_metadata"] = tree
    (item / "_METADATA").write_text(json.dumps(doc))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("evil", ["../../outside", "x/../../../outside", "a\0b"])
def test_path_003_reader_refuses_param_names_leaving_the_item(tmp_path, backend, evil):
    """A per-leaf param name with `..` (or NUL) is refused before any file is opened."""
    item = tmp_path / "item"
    shutil.copytree(NO_OCDBT, item)
    outside = tmp_path / "outside"
    shutil.copytree(NO_OCDBT / "a", outside)  # a valid zarr array where `..` would lead
    _edit_metadata(item, {"a": evil})
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend=backend)
    assert _rule(e) == "PATH-003"


def test_path_003_ocdbt_keys_may_hold_dots(tmp_path):
    """Within OCDBT a param name is only a key: `..` there opens nothing and is not refused
    by the path check (the key is simply absent)."""
    item = tmp_path / "item"
    shutil.copytree(OCDBT, item)
    name = next(k for k in json.loads((item / "_METADATA").read_text())["tree_metadata"])
    first = json.loads((item / "_METADATA").read_text())["tree_metadata"][name]
    key = first["key_metadata"][0]["key"]
    _edit_metadata(item, {key: "../" + key})
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend="python")
    assert _rule(e) != "PATH-003"


def test_path_003_location_read_refuses_escaping_names(tmp_path):
    (tmp_path / "secret").write_text("{}")
    item = tmp_path / "item"
    item.mkdir()
    loc = as_store(item)
    for name in ("../secret", "/etc/passwd", "a\0b", "x/../../secret"):
        with pytest.raises(FormatError) as e:
            loc.get(name)
        assert _rule(e) == "PATH-003"
    assert loc.get("missing") is None


def test_path_003_writer_refuses_names_leaving_the_target(tmp_path):
    x = np.arange(3, dtype=np.int32)
    for tree in ({"a/../../b": x}, {"/abs": x}, {"a\0b": x}, {"a": {"..": {"/": x}}}):
        before = sorted(os.listdir(tmp_path))
        with pytest.raises(FormatError) as e:
            ockpt.save_pytree(tmp_path / "ckpt", tree, use_ocdbt=False)
        assert _rule(e) == "WRITE-004"
        assert sorted(os.listdir(tmp_path)) == before  # nothing written, inside or out


# ---------------------------------------------------------------------------------------------
# paths: symbolic links


def _link_out(item: Path, rel: str, tmp_path: Path) -> None:
    """Replace the file `rel` by a link to an identical copy outside the item."""
    outside = tmp_path / "elsewhere" / rel.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    shutil.copyfile(item / rel, outside)
    (item / rel).unlink()
    os.symlink(outside, item / rel)


@pytest.mark.parametrize("backend", BACKENDS)
def test_path_004_ocdbt_data_file_linked_out(tmp_path, backend):
    item = tmp_path / "item"
    shutil.copytree(OCDBT, item)
    data = sorted(p.relative_to(item) for p in (item / "d").iterdir())[0]
    _link_out(item, str(data), tmp_path)
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend=backend)
    assert _rule(e) == "PATH-004"


@pytest.mark.parametrize("backend", BACKENDS)
def test_path_004_per_leaf_chunk_linked_out(tmp_path, backend):
    """A chunk reached through a link leading out is refused, never read as the fill value."""
    item = tmp_path / "item"
    shutil.copytree(NO_OCDBT, item)
    chunk = next(p for p in (item / "a").iterdir() if not p.name.startswith("."))
    _link_out(item, f"a/{chunk.name}", tmp_path)
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend=backend)
    assert _rule(e) == "PATH-004"


@pytest.mark.parametrize("backend", BACKENDS)
def test_path_004_document_linked_out(tmp_path, backend):
    item = tmp_path / "item"
    shutil.copytree(NO_OCDBT, item)
    _link_out(item, "_strings.json", tmp_path)
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend=backend)
    assert _rule(e) == "PATH-004"


def test_path_004_links_inside_are_fine(tmp_path):
    """A link that stays inside the checkpoint (or a checkpoint path that is itself a link) is
    no escape."""
    item = tmp_path / "item"
    shutil.copytree(NO_OCDBT, item)
    os.rename(item / "_strings.json", item / "strings-copy")
    os.symlink("strings-copy", item / "_strings.json")
    link = tmp_path / "link"
    os.symlink(item, link)
    check_tree(str(link))  # raises for a link leading out (PATH-004)
    assert resolve_inside(str(link), "_strings.json").endswith("strings-copy")
    for backend in BACKENDS:
        ockpt.load_pytree(link, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_path_004_a_sibling_whose_name_extends_the_checkpoint_name_is_outside(tmp_path, backend):
    """The attack: a checkpoint at ``.../run`` links a file into ``.../run-evil/``, whose path
    starts with the checkpoint's path as text. "Inside" is decided by whole path components,
    so the link leads out (PATH-004): for the hardened open, the tree check that guards
    tensorstore, the validator and both engines."""
    item = tmp_path / "run"
    shutil.copytree(NO_OCDBT, item)
    evil = tmp_path / "run-evil"
    evil.mkdir()
    shutil.move(item / "_strings.json", evil / "_strings.json")
    os.symlink(evil / "_strings.json", item / "_strings.json")
    with pytest.raises(FormatError) as e:
        resolve_inside(str(item), "_strings.json")
    assert _rule(e) == "PATH-004" and "run-evil" in e.value.message
    with pytest.raises(FormatError) as e:
        check_tree(str(item))
    assert _rule(e) == "PATH-004"
    with pytest.raises(FormatError) as e:
        as_store(item).get("_strings.json")
    assert _rule(e) == "PATH-004"
    with pytest.raises(FormatError) as e:
        ockpt.load_pytree(item, backend=backend)
    assert _rule(e) == "PATH-004"
    report = ockpt.validate(item)
    assert any(f.rule == "PATH-004" and "_strings.json" in f.file for f in report.errors)


def test_path_004_detect_does_not_open_a_linked_out_metadata(tmp_path):
    item = tmp_path / "item"
    shutil.copytree(NO_OCDBT, item)
    _link_out(item, "_METADATA", tmp_path)
    layout = ockpt.detect(item)
    assert any(p.rule == "PATH-004" for p in layout.problems)


def _plant_after_check(monkeypatch, item: Path, name: str, target: Path) -> None:
    """The race, made certain: `name` in `item` becomes a link to `target` the moment after
    the hardened open has resolved and checked it."""
    from ockpt.store import files

    resolve = files._resolve

    def then_swap(root, key, shown):  # type: ignore[no-untyped-def]
        found = resolve(root, key, shown)
        if key.startswith(name):
            victim = item / name
            (shutil.rmtree if victim.is_dir() else os.remove)(victim)
            os.symlink(target, victim)
        return found

    monkeypatch.setattr(files, "_resolve", then_swap)


@pytest.mark.parametrize("planted", ["file", "directory"])
def test_path_004_a_link_planted_after_the_check_is_not_followed(tmp_path, monkeypatch, planted):
    """The attack: a process swaps a checked file (or a directory on its path) for a link
    leading out between the check and the open. The open follows no link, so the outside
    file is never read: PATH-004."""
    item = tmp_path / "run"
    shutil.copytree(OCDBT, item)
    outside = tmp_path / "outside"
    shutil.copytree(item / "d", outside)
    (outside / "_METADATA").write_bytes(b'{"secret": 1}')
    key = "_METADATA" if planted == "file" else f"d/{sorted(os.listdir(item / 'd'))[0]}"
    name = key.split("/")[0]
    _plant_after_check(
        monkeypatch, item, name, outside / "_METADATA" if planted == "file" else outside
    )
    store = as_store(item)
    for read in (store.get, store.size, store.open_file, store.open_range):
        with pytest.raises(FormatError) as e:
            read(key)
        assert _rule(e) == "PATH-004" and "planted" in e.value.message
        os.remove(item / name)  # the next read checks a real file again
        shutil.copy(outside / "_METADATA", item / name) if planted == "file" else shutil.copytree(
            outside, item / name
        )


def test_path_004_a_concurrent_link_swap_never_reads_the_outside_file(tmp_path):
    """The attack as it happens: another process swaps `_METADATA` for a link to an outside
    file and back, as fast as it can, while the checkpoint is read. Every read gives the real
    document or PATH-004; none gives the outside file."""
    import subprocess
    import sys
    import time

    item = tmp_path / "run"
    shutil.copytree(OCDBT, item)
    real = (item / "_METADATA").read_bytes()
    (tmp_path / "saved").write_bytes(real)
    outside = tmp_path / "outside.json"
    outside.write_bytes(b'{"tree_metadata": {}, "outside": true}')
    swapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "d, saved, out = sys.argv[1:]\n"
            "m = os.path.join(d, '_METADATA')\n"
            "while True:\n"
            "    os.symlink(out, m + '.l'); os.replace(m + '.l', m)\n"
            "    os.link(saved, m + '.r'); os.replace(m + '.r', m)\n",
            str(item),
            str(tmp_path / "saved"),
            str(outside),
        ]
    )
    outcomes = {"real": 0, "refused": 0}
    try:
        store = as_store(item)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                data = store.get("_METADATA")
            except FormatError as e:
                assert e.rule == "PATH-004", e
                outcomes["refused"] += 1
                continue
            assert data == real, "the outside file was read"
            outcomes["real"] += 1
    finally:
        swapper.kill()
        swapper.wait()
    assert outcomes["real"] and outcomes["refused"], outcomes


# ---------------------------------------------------------------------------------------------
# no code from data


def test_handler_names_are_never_imported(tmp_path, monkeypatch):
    """Handler class names of _CHECKPOINT_METADATA are data: a module they name is never
    imported, whatever the name."""
    import builtins
    import sys

    step = tmp_path / "step"
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint", step)
    evil = "evil_module_that_must_not_load.Handler"
    for meta in step.rglob("_CHECKPOINT_METADATA"):
        doc = json.loads(meta.read_text())
        handlers = doc.get("item_handlers")
        if isinstance(handlers, dict):
            doc["item_handlers"] = {k: evil for k in handlers}
        elif isinstance(handlers, str):
            doc["item_handlers"] = evil
        meta.write_text(json.dumps(doc))
    imported = []
    real_import = builtins.__import__

    def spy(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("evil_module"):
            imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", spy)
    try:
        ockpt.load_pytree(step, backend="python")
    except ockpt.OckptError:
        pass
    ockpt.validate(step)
    assert imported == [] and "evil_module_that_must_not_load" not in sys.modules


def test_no_pickle_eval_or_dynamic_import_in_the_package():
    root = Path(ockpt.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        for word in ("pickle", "eval(", "exec(", "importlib.import_module", "__import__("):
            hits = [  # numpy's allow_pickle=False is the refusal of pickles, not a use
                ln
                for ln in text.splitlines()
                if word in ln.replace("allow_pickle=False", "") and not ln.lstrip().startswith("#")
            ]
            allowed = (path.name == "sources.py" and word == "pickle") or (  # refuses pickled .npy
                path.name == "adapters.py" and word == "importlib.import_module"
            )  # the conformance adapter the *command line* names, never a checkpoint's text
            assert not hits or allowed, (path, word, hits[:3])


def test_limit_006_memory_available_counts_the_control_group(monkeypatch):
    """LIMIT-006: the memory a reader may use is the least of the system's available memory
    and what a control group's limit leaves (a container, a batch job), v2 or v1; no limit
    (v2 ``max``, v1's 2^63) counts as none."""
    from ockpt import limits

    def system(files):  # type: ignore[no-untyped-def]
        return lambda path: files.get(path)

    meminfo = {"/proc/meminfo": "MemTotal: 999 kB\nMemAvailable:   8388608 kB\n"}
    v2 = {
        "/sys/fs/cgroup/memory.max": "3221225472\n",
        "/sys/fs/cgroup/memory.current": "1073741824\n",
    }
    v1 = {
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648\n",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes": "536870912\n",
    }
    none = {"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory.current": "5\n"}
    cases = [({}, 8 << 30), (v2, 2 << 30), (v1, 3 << 29), (none, 8 << 30)]
    for files, want in cases:
        monkeypatch.setattr(limits, "_system_file", system({**meminfo, **files}))
        assert limits.memory_available() == want, files
    monkeypatch.setattr(limits, "_system_file", system(v2))  # no MemAvailable: the group's
    assert limits.memory_available() == 2 << 30
    monkeypatch.setattr(limits, "_system_file", system({}))
    assert limits.memory_available() is None or limits.memory_available() > 0


def test_limit_006_counts_what_a_load_holds_at_once(tmp_path, monkeypatch):
    """LIMIT-006 counts what a load holds at once: an array read as stored and then cast
    holds both copies (int64 read, int8 returned: 9 bytes an element, not 1)."""
    from ockpt import limits

    ockpt.save_pytree(tmp_path / "c", {"a": np.arange(1000, dtype=np.int64)})
    monkeypatch.setattr(limits, "CHECKED_ALLOCATION_BYTES", 0)
    monkeypatch.setattr(limits, "memory_available", lambda: 5000)
    target = {"a": np.zeros(1000, np.int8)}
    with pytest.raises(ockpt.MemoryLimitError) as e:  # 1000 x (8 + 1) bytes
        ockpt.load_pytree(tmp_path / "c", target, cast="lossy", backend="python")
    assert_error(e, rule="LIMIT-006")
    assert "'a'" in e.value.message
    monkeypatch.setattr(limits, "memory_available", lambda: 9000)
    got = ockpt.load_pytree(tmp_path / "c", target, cast="lossy", backend="python")
    assert got["a"].dtype == np.int8
