"""`ockpt fingerprint` and `ockpt diff --format` (issue 35): a value-free description of the
on-disk format that is the same for the same code whatever the values, steps, processes and
copies, and that differs exactly where real Orbax's options change the format."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ockpt
from ockpt import fingerprints as fp


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *argv], capture_output=True, text=True, timeout=120
    )


def _tree(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((8, 4)).astype(np.float32),
        "b": rng.integers(0, 100, (4,), dtype=np.int32),
        "nested": {"s": np.float32(rng.standard_normal()), "n": f"name-{seed}"},
    }


def _sections(changes: list[fp.Change]) -> set[str]:
    """The top-level members of the fingerprint where `changes` are."""
    return {c.pointer.split("/")[1] for c in changes}


# ---------------------------------------------------------------------------------------------
# Stable: the same code gives the same bytes.


def test_same_code_other_values_copies_and_steps_give_the_same_bytes(tmp_path: Path) -> None:
    """Values, step numbers, timestamps and OCDBT file names differ between these saves; the
    fingerprint does not, across two runs, a copy, and two managers saving other steps."""
    a, b = tmp_path / "a", tmp_path / "b"
    ockpt.save_pytree(a, _tree(1))
    ockpt.save_pytree(b, _tree(2))
    text = fp.dumps(ockpt.fingerprint(a))
    assert text == fp.dumps(ockpt.fingerprint(a))  # two runs
    assert text == fp.dumps(ockpt.fingerprint(b))  # other values, other data file names
    shutil.copytree(a, tmp_path / "copy")
    assert text == fp.dumps(ockpt.fingerprint(tmp_path / "copy"))
    names = [sorted(p.name for p in (root / "state" / "d").iterdir()) for root in (a, b)]
    assert names[0] != names[1]  # the data files' names differ, the fingerprints do not

    roots = []
    for root, steps in (("m1", (1, 2)), ("m2", (700,))):
        with ockpt.CheckpointManager(tmp_path / root) as manager:
            for step in steps:
                manager.save(step, _tree(step))
        roots.append(fp.dumps(ockpt.fingerprint(tmp_path / root)))
    assert roots[0] == roots[1]
    assert json.loads(roots[0])["kind"] == "manager_root"
    assert json.loads(roots[0])["step_name"] == "<step>"


def test_shapes_are_left_out_unless_asked(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    ockpt.save_pytree(small, {"w": np.zeros((2, 3), np.float32)})
    ockpt.save_pytree(big, {"w": np.zeros((20, 30), np.float32)})
    assert fp.compare(ockpt.fingerprint(small), ockpt.fingerprint(big)) == []
    changes = fp.compare(ockpt.fingerprint(small, shapes=True), ockpt.fingerprint(big, shapes=True))
    doc = "/items/state/arrays/w/zarr.json"  # ockpt's default: a v1 checkpoint, zarr v3
    assert {c.pointer for c in changes} == {
        f"{doc}/shape/0",
        f"{doc}/shape/1",
        f"{doc}/chunk_grid/configuration/chunk_shape/0",
        f"{doc}/chunk_grid/configuration/chunk_shape/1",
        f"{doc}/codecs/0/configuration/chunk_shape/0",  # the sharding codec's inner chunk
        f"{doc}/codecs/0/configuration/chunk_shape/1",
    }
    assert {(c.old, c.new) for c in changes} == {(2, 20), (3, 30)}


def test_fingerprint_of_a_fixture_names_its_parts() -> None:
    """Orbax 0.12.8's sharded fixture: OCDBT with per-process databases, zarr v2 with zstd,
    the documents' keys and vocabulary, the data files and process numbers replaced."""
    root = Path(__file__).resolve().parents[1] / "fixtures" / "orbax-0.12.8" / "sharded"
    print_ = ockpt.fingerprint(root / "checkpoint")
    assert print_["kind"] == "pytree_item" and print_["storage"] == "ocdbt"
    assert "ocdbt.process_<N>/d/<file>" in print_["files"] and "d/<file>" in print_["files"]
    assert print_["ocdbt"]["keys"] == ["<leaf>/.zarray", "<leaf>/<chunk>"]
    assert print_["ocdbt"]["root"]["max_inline_value_bytes"] == 1024
    assert print_["codecs"] == [{"compressor": {"id": "zstd", "level": 1}, "filters": None}]
    assert print_["dtypes"] == ["<f4", "<i4", "bfloat16"]
    meta = print_["documents"]["_METADATA"]["tree_metadata"]["*"][0]["value_metadata"]
    assert meta["value_type"] == "string=jax.Array"
    assert "shape" not in print_["arrays"][0][".zarray"]
    sharding_types = {s["sharding_type"] for s in print_["documents"]["_sharding"]["*"]}
    assert sharding_types == {"string=NamedSharding", "string=SingleDeviceSharding"}
    assert print_["documents"]["_CHECKPOINT_METADATA"]["commit_timestamp_nsecs"] == "integer"


# ---------------------------------------------------------------------------------------------
# Real Orbax: each option changes exactly its part of the fingerprint.

ORBAX_VARIANTS = {
    # option -> the top-level members of the fingerprint it changes
    "use_ocdbt": ({"use_ocdbt": False}, {"storage", "files", "ocdbt"}),
    "use_zarr3": ({"use_zarr3": True}, {"arrays", "codecs", "dtypes", "ocdbt"}),
    "use_compression": ({"use_compression": False}, {"arrays", "codecs"}),
}


@pytest.fixture(scope="module")
def orbax_saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tree saved by real Orbax with its defaults, with each option of
    `ORBAX_VARIANTS` changed, twice with the defaults (other values), and with a typed PRNG
    key in place of its raw uint32 key data."""
    ocp = pytest.importorskip("orbax.checkpoint")
    jax = pytest.importorskip("jax")
    base = tmp_path_factory.mktemp("orbax-fp")
    key = jax.random.key(0)
    tree = {"w": np.arange(32, dtype=np.float32).reshape(8, 4), "b": np.ones(4, np.int32)}
    paths = {}

    def save(name: str, value: dict, **options: bool) -> None:
        with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(**options)) as ckptr:
            ckptr.save(base / name, args=ocp.args.PyTreeSave(value))
        paths[name] = base / name

    save("default", {**tree, "k": jax.random.key_data(key)})
    save("default_other_values", {**_tree(5), "k": jax.random.key_data(jax.random.key(9))})
    save("default_again", {**tree, "k": jax.random.key_data(key)})
    for name, (options, _) in ORBAX_VARIANTS.items():
        save(name, {**tree, "k": jax.random.key_data(key)}, **options)
    save("typed_key", {**tree, "k": key})
    return paths


def test_orbax_saves_of_the_same_format_have_the_same_bytes(orbax_saves: dict[str, Path]) -> None:
    default = fp.dumps(ockpt.fingerprint(orbax_saves["default"]))
    assert default == fp.dumps(ockpt.fingerprint(orbax_saves["default_again"]))


@pytest.mark.parametrize("option", sorted(ORBAX_VARIANTS))
def test_an_orbax_option_changes_exactly_its_part(
    orbax_saves: dict[str, Path], option: str
) -> None:
    changes = fp.compare(
        ockpt.fingerprint(orbax_saves["default"]), ockpt.fingerprint(orbax_saves[option])
    )
    assert _sections(changes) == ORBAX_VARIANTS[option][1], [c.text() for c in changes]


def test_a_typed_key_changes_only_the_array_metadatas(orbax_saves: dict[str, Path]) -> None:
    """A typed key is saved as its raw uint32 data plus `random_key_impl` in
    `array_metadatas` (spec/json-documents.md §6.1): only that document changes."""
    changes = fp.compare(
        ockpt.fingerprint(orbax_saves["default"]), ockpt.fingerprint(orbax_saves["typed_key"])
    )
    assert {c.pointer.rsplit("/-", 1)[0] for c in changes} == {
        "/documents/array_metadatas~1process_<N>/array_metadatas"
    }
    assert "random_key_impl" in json.dumps([c.new for c in changes])


def test_other_values_and_tree_change_only_what_they_hold(orbax_saves: dict[str, Path]) -> None:
    """Another tree with the same format (a scalar and a string leaf added, other dtypes)
    changes the dtypes, arrays and document forms it uses, never the layout or databases."""
    changes = fp.compare(
        ockpt.fingerprint(orbax_saves["default"]),
        ockpt.fingerprint(orbax_saves["default_other_values"]),
    )
    assert not _sections(changes) & {"storage", "ocdbt", "kind", "handler"}


# ---------------------------------------------------------------------------------------------
# The command line.


def test_cli_fingerprint_and_diff_format(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ockpt.save_pytree(a, _tree(1), compression="zstd", layout="item")
    ockpt.save_pytree(b, _tree(1), compression=None, layout="item")
    saved = tmp_path / "a.fingerprint.json"
    run = _run("fingerprint", str(a), "-o", str(saved))
    assert run.returncode == 0, run.stderr
    assert saved.read_text() == fp.dumps(ockpt.fingerprint(a))
    assert _run("fingerprint", str(a)).stdout == saved.read_text()

    same = _run("diff", "--format", str(saved), str(a))
    assert (same.returncode, same.stdout.strip()) == (0, "same format"), same.stderr
    differ = _run("diff", "--format", str(saved), str(b), "--json")
    assert differ.returncode == 1, differ.stderr
    report = json.loads(differ.stdout)
    assert report["equal"] is False
    assert {c["pointer"].split("/")[1] for c in report["changes"]} == {"arrays", "codecs"}
    text = _run("diff", "--format", str(a), str(b))
    assert text.returncode == 1 and "changed /arrays" not in text.stdout  # sets: added/removed
    assert "removed /codecs/-" in text.stdout and "added /codecs/-" in text.stdout


def test_cli_refuses_what_is_no_checkpoint_or_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    run = _run("fingerprint", str(tmp_path / "empty"))
    assert run.returncode == 1 and "empty" in run.stderr and "Traceback" not in run.stderr
    run = _run("fingerprint", str(tmp_path / "nothing"))  # an I/O error: exit 2
    assert run.returncode == 2 and "nothing" in run.stderr and "Traceback" not in run.stderr
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"fingerprint": 99}')
    with pytest.raises(ockpt.FormatError) as e:
        fp.load(wrong)
    assert e.value.file == str(wrong) and e.value.pointer == "/fingerprint"
    run = _run("diff", "--format", str(wrong), str(wrong))
    assert run.returncode == 1 and "not a fingerprint" in run.stderr


def test_compare_reports_added_removed_and_changed_members() -> None:
    old = {"fingerprint": 1, "kind": "pytree_item", "files": ["a", "b"], "x": {"y": 1}}
    new = {"fingerprint": 1, "kind": "step", "files": ["b", "c"], "z": 2, "x": {"y": 1}}
    got = fp.compare(old, new)
    assert got == [
        fp.Change("/files/-", "a", None),
        fp.Change("/files/-", None, "c"),
        fp.Change("/kind", "pytree_item", "step"),
        fp.Change("/z", None, 2),
    ]
    assert fp.compare(new, new) == []
    assert fp.Change("/a~1b", 1, True).text() == "changed /a~1b: 1 -> true"
