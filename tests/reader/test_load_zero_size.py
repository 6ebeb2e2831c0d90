"""Zero-size arrays as Orbax 0.5.15 and 0.10.3 wrote them (spec/arrays.md §5, ZARR-009).

A zero-size array (a 0 in its shape) has an empty chunk grid: only its metadata key is stored.
A reader returns an empty array of the stored shape and type without reading any chunk, also
where every chunk must be stored (0.10.3's store_array_data_equal_to_fill_value, ZARR-008 /
LOAD-041), and a validator reports no missing chunk for it. The fixtures were written by the
releases themselves (fixtures/_cases_0_5.py, fixtures/_cases_0_10.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import _record
import numpy as np
import pytest

import ockpt
from ockpt.store import files as kv_files
from ockpt.validate import validate
from ockpt.zarr.array import open_metadata, read_region
from tests.support import FIXTURES, assert_backends_agree

CASES = [
    FIXTURES / "orbax-0.5.15" / "zero_size",
    FIXTURES / "orbax-0.5.15" / "zero_size_no_ocdbt",
    FIXTURES / "orbax-0.10.3" / "zero_size_no_ocdbt",
    FIXTURES / "orbax-0.10.3" / "zero_size_zarr3",
]
IDS = [f"{c.parent.name}/{c.name}" for c in CASES]

#: leaf -> (shape, dtype name, chunk shape Orbax wrote): each 0 of the shape made 1.
ZERO_SIZE = {
    "rows0": ((0, 4), "float32", (1, 4)),
    "cols0": ((4, 0), "int32", (4, 1)),
    "empty1d": ((0,), "bfloat16", (1,)),
    "mid0": ((2, 0, 3), "int8", (2, 1, 3)),
    "jax_rows0": ((0, 4), "float32", (1, 2)),  # on P(None, 'y'): the written slice's chunks
    "jax_1d": ((0,), "float32", (1,)),
}


def _metadata_files(case: Path) -> dict[str, dict]:
    """leaf -> its zarr metadata document, for the cases with per-leaf directories."""
    out = {}
    for leaf in ZERO_SIZE:
        for name in (".zarray", "zarr.json"):
            path = case / "checkpoint" / leaf / name
            if path.exists():
                out[leaf] = json.loads(path.read_text())
    return out


@pytest.mark.parametrize("case", [c for c in CASES if "no_ocdbt" in c.name], ids=str)
def test_bytes_a_zero_size_array_is_its_metadata_key_only(case):
    """ZARR-009, from the bytes: the leaf directory holds only `.zarray` / `zarr.json`, whose
    chunk shape makes each 0 of the shape a 1, so the grid has no chunk."""
    docs = _metadata_files(case)
    assert set(docs) == set(ZERO_SIZE)
    for leaf, (shape, _, chunks) in ZERO_SIZE.items():
        doc = docs[leaf]
        stored = doc.get("chunks") or doc["chunk_grid"]["configuration"]["chunk_shape"]
        assert tuple(doc["shape"]) == shape and tuple(stored) == chunks, leaf
        files = sorted(p.name for p in (case / "checkpoint" / leaf).rglob("*") if p.is_file())
        assert files == [".zarray" if "chunks" in doc else "zarr.json"], leaf
        assert np.prod([-(-s // c) for s, c in zip(shape, chunks, strict=True)]) == 0
    meta = json.loads((case / "checkpoint" / "_METADATA").read_text())
    strict = meta.get("store_array_data_equal_to_fill_value", False)
    assert strict == ("0.10.3" in case.parent.name)  # 0.10.3 promises every chunk is stored


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("backend", ["python", "tensorstore"])
def test_loads_as_empty_arrays_of_the_stored_shape_and_type(case, backend):
    """ZARR-009: both backends return empty arrays (no LOAD-041 under 0.10.3's promise)."""
    tree = ockpt.load_pytree(case / "checkpoint", backend=backend)
    for leaf, (shape, dtype, _) in ZERO_SIZE.items():
        value = np.asarray(tree[leaf])
        assert value.shape == shape and value.dtype.name == dtype, leaf
    assert tree["w"].tolist() == [0, 1, 2]
    record = _record.load_expected(case)
    expected = _record.decode_tree(record["items"][""], case)
    for leaf in ZERO_SIZE:
        assert np.asarray(tree[leaf]).tobytes() == np.asarray(expected[leaf]).tobytes() == b""


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_backends_agree_and_metadata_reads_no_bytes(case):
    assert_backends_agree(case / "checkpoint")
    meta = ockpt.pytree_metadata(case / "checkpoint")
    for leaf, (shape, dtype, chunks) in ZERO_SIZE.items():
        assert meta[leaf].shape == shape and meta[leaf].dtype.name == dtype
        assert meta[leaf].chunk_shape == chunks and meta[leaf].nbytes == 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_targets_padding_and_slices(case):
    """A target of the stored shape gets an empty array; padding fills zeros (LOAD-031);
    `ockpt.open` slices are empty too. No chunk is needed for any of them."""
    target = {
        leaf: np.zeros(shape, dtype=_record.numpy_dtype(d))
        for leaf, (shape, d, _) in ZERO_SIZE.items()
    }
    target["w"] = np.zeros(3, np.int32)
    tree = ockpt.load_pytree(case / "checkpoint", target)
    assert all(tree[leaf].shape == ZERO_SIZE[leaf][0] for leaf in ZERO_SIZE)
    padded = ockpt.load_pytree(
        case / "checkpoint", {**target, "rows0": np.ones((2, 4), np.float32)}, pad_or_truncate=True
    )
    assert padded["rows0"].tolist() == [[0.0] * 4] * 2
    with ockpt.open(case / "checkpoint") as ckpt:
        assert ckpt["rows0"][...].shape == (0, 4)
        assert ckpt["mid0"][:, :, 1:].shape == (2, 0, 2)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_validator_reports_no_missing_chunk(case):
    """ZARR-009: a deep validation finds nothing, though 0.10.3 promises every chunk."""
    report = validate(case / "checkpoint", deep=True)
    assert report.ok and not report.findings, [str(f) for f in report.findings]


def test_the_promise_is_in_force_for_the_other_leaves(tmp_copy):
    """Control: in the same 0.10.3 checkpoint, a removed chunk of the ordinary leaf is missing
    data (ZARR-008 for the validator, LOAD-041 for a load), so the silence above is ZARR-009's."""
    path = tmp_copy(FIXTURES / "orbax-0.10.3" / "zero_size_no_ocdbt")
    (path / "w" / "0").unlink()
    assert "ZARR-008" in validate(path).rules
    with pytest.raises(ockpt.MissingDataError) as info:
        ockpt.load_pytree(path, backend="python")
    assert info.value.rule == "LOAD-041"


def test_a_key_stored_for_a_zero_size_array_is_outside_its_grid(tmp_copy):
    """A chunk key under a zero-size array names no chunk (VAL-003), and readers never read it
    (garbage there changes nothing)."""
    path = tmp_copy(FIXTURES / "orbax-0.10.3" / "zero_size_no_ocdbt")
    (path / "rows0" / "0.0").write_bytes(b"not a zstd frame")
    report = validate(path, deep=True)
    assert report.rules == {"VAL-003"}, [str(f) for f in report.findings]
    for backend in ("python", "tensorstore"):
        assert ockpt.load_pytree(path, backend=backend)["rows0"].shape == (0, 4)


@pytest.mark.parametrize("case", [c for c in CASES if "no_ocdbt" in c.name], ids=str)
def test_python_backend_opens_no_file_of_a_zero_size_array_but_its_metadata(case, monkeypatch):
    """No chunk read: every file the python backend opens under a zero-size leaf's directory is
    its metadata document."""
    opened: list[str] = []
    real = kv_files.open_inside

    def spy(root, name, *args, **kwargs):
        opened.append(os.path.join(root, name))
        return real(root, name, *args, **kwargs)

    monkeypatch.setattr(kv_files, "open_inside", spy)
    ockpt.load_pytree(case / "checkpoint", backend="python")
    root = (case / "checkpoint").resolve()
    under = [
        Path(p).resolve().relative_to(root) for p in opened if root in Path(p).resolve().parents
    ]
    leaf_files = [p for p in under if p.parts[0] in ZERO_SIZE]
    assert leaf_files, "the spy saw no metadata read: it is not on the read path"
    assert all(p.name in (".zarray", "zarr.json") for p in leaf_files), leaf_files


@pytest.mark.parametrize("version", [2, 3])
def test_read_region_asks_for_no_chunk_key(version):
    """The zarr decoder (`read_region`) on a zero-size array asks the store for nothing, with
    absent chunks as errors (missing="error", as under store_array_data_equal_to_fill_value)."""
    case = FIXTURES / "orbax-0.10.3" / ("zero_size_no_ocdbt" if version == 2 else "zero_size_zarr3")
    if version == 2:
        doc = (case / "checkpoint" / "rows0" / ".zarray").read_bytes()
        key = ".zarray"
    else:  # the zarr3 case is in OCDBT; its document is what 0.10.3 writes without OCDBT too
        doc = json.dumps(
            {
                "chunk_grid": {"configuration": {"chunk_shape": [1, 4]}, "name": "regular"},
                "chunk_key_encoding": {"name": "default"},
                "codecs": [
                    {
                        "configuration": {
                            "chunk_shape": [1, 4],
                            "codecs": [
                                {"configuration": {"endian": "little"}, "name": "bytes"},
                                {"configuration": {"checksum": False, "level": 3}, "name": "zstd"},
                            ],
                            "index_codecs": [
                                {"configuration": {"endian": "little"}, "name": "bytes"},
                                {"name": "crc32c"},
                            ],
                        },
                        "name": "sharding_indexed",
                    }
                ],
                "data_type": "float32",
                "fill_value": 0.0,
                "node_type": "array",
                "shape": [0, 4],
                "zarr_format": 3,
            }
        ).encode()
        key = "zarr.json"
    meta = open_metadata(lambda k: doc if k == key else None)
    assert meta is not None and tuple(meta.shape) == (0, 4)
    asked: list[str] = []

    def get(k: str) -> bytes | None:
        asked.append(k)
        return None

    out = read_region(meta, get, np.empty((0, 4), np.float32), missing="error")
    assert out.shape == (0, 4) and asked == []
