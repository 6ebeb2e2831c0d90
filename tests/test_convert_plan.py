"""`ockpt.convert`'s plan, in this process: sizes (`parse_size`), and what a dry run says it
would write (`ConvertResult.to_json` and each leaf's mapping row, compared whole), for
safetensors (one file and sharded), .npz with `widen` and `select`, and skipped leaves."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ockpt
from ockpt.convert import convert, parse_size
from ockpt.convert_rules import parse_rules
from ockpt.errors import OckptError
from ockpt.store.memory import MemoryStore
from tests.support import FIXTURES
from tests.support.errors import assert_error


@pytest.mark.parametrize(
    "text, size",
    [
        ("1", 1),
        (" 7 b ", 7),
        ("1K", 10**3),
        ("1kb", 10**3),
        ("2KiB", 2 * 2**10),
        ("1.5MB", 1_500_000),
        ("3MiB", 3 * 2**20),
        ("5GB", 5 * 10**9),
        ("2GiB", 2 * 2**30),
        ("1T", 10**12),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        (1234, 1234),
    ],
)
def test_parse_size_every_unit(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["0", "0.4", "0KB"])
def test_parse_size_refuses_nothing(text):
    with pytest.raises(ValueError) as info:
        parse_size(text)
    assert str(info.value) == f"size must be positive: {text!r}"


def _npz(tmp_path: Path) -> Path:
    src = tmp_path / "src.npz"
    arrays = {
        "a.w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "c": np.arange(4, dtype=np.int8),
        "s": np.array("hello"),
    }
    np.savez(src, **arrays)
    return src


def _row(source, source_shape, source_dtype, target, shape, dtype, file, **kw):
    row = {
        "source": source,
        "source_shape": source_shape,
        "source_dtype": source_dtype,
        "target": target,
        "shape": shape,
        "dtype": dtype,
        "transposed": None,
        "widened": False,
        "file": file,
    }
    return row | kw


def _result(fmt, files, leaves, nbytes, mapping, **kw):
    out = {
        "format": fmt,
        "files": files,
        "leaves": leaves,
        "bytes": nbytes,
        "skipped": [],
        "select": [],
        "left_out": [],
        "random_keys": [],
        "widened": [],
        "metadata_strings": [],
        "dry_run": True,
    }
    return out | kw | {"mapping": mapping}


def test_dry_run_of_sharded_safetensors_with_rules(tmp_path):
    rules = parse_rules(rename=[r"^a\.=b."], transpose=["w$"], dtype=["^c$=int16"])
    got = convert(
        str(_npz(tmp_path)),
        str(tmp_path / "out.safetensors"),
        dry_run=True,
        progress=False,
        rules=rules,
        max_shard_size=20,
    )
    one, two = (str(tmp_path / f"out-0000{i}-of-00002.safetensors") for i in (1, 2))
    index = str(tmp_path / "out.safetensors.index.json")
    assert got.to_json() == _result(
        "safetensors",
        [one, two, index],
        3,
        32,
        [
            _row("a.w", [2, 3], "float32", "b.w", [3, 2], "float32", one, transposed=[1, 0]),
            _row("c", [4], "int8", "c", [4], "int16", two),
            _row("s", [], "<U5", "s", [], "string", "__metadata__ of every file"),
        ],
        metadata_strings=["s"],
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "src.npz"]  # nothing written


def test_dry_run_of_npz_names_its_one_file(tmp_path):
    got = convert(str(_npz(tmp_path)), str(tmp_path / "out.npz"), dry_run=True, progress=False)
    out = str(tmp_path / "out.npz")
    assert got.to_json() == _result(
        "npz",
        [out],
        3,
        28,
        [
            _row("a.w", [2, 3], "float32", "a.w", [2, 3], "float32", out),
            _row("c", [4], "int8", "c", [4], "int8", out),
            _row("s", [], "<U5", "s", [], "string", out),
        ],
    )
    # a run that writes reports the same, without the mapping
    (tmp_path / "again").mkdir()
    result = convert(str(_npz(tmp_path / "again")), out, progress=False)
    assert result.mapping == () and result.dry_run is False
    done = result.to_json()
    assert "mapping" not in done and done["dry_run"] is False and done["files"] == [out]


def _orbax(tmp_path: Path) -> Path:
    tree = {
        "params": {
            "w": np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16),
            "q": np.arange(3, dtype=np.int8).astype(ml_dtypes.int4),
        },
        "opt": {"m": np.zeros(2, np.float32)},
        "name": "hi",
    }
    ockpt.save_pytree(tmp_path / "ck", tree)
    return tmp_path / "ck"


def test_dry_run_with_widen_and_select(tmp_path):
    ck = _orbax(tmp_path)
    out = str(tmp_path / "out.npz")
    got = convert(str(ck), out, dry_run=True, progress=False, widen=True, select=["params", "name"])
    assert got.to_json() == _result(
        "npz",
        [out],
        3,
        19,
        [
            _row("name", [], "string", "name", [], "string", out),
            _row("params.q", [3], "int4", "params.q", [3], "int8", out, widened=True),
            _row("params.w", [4], "bfloat16", "params.w", [4], "float32", out, widened=True),
        ],
        select=["params", "name"],
        left_out=["opt/m"],
        widened=[
            {"name": "params.q", "dtype": "int4", "stored": "int8"},
            {"name": "params.w", "dtype": "bfloat16", "stored": "float32"},
        ],
    )


def test_dry_run_with_leaves_skipped(tmp_path):
    ck = _orbax(tmp_path)
    out = str(tmp_path / "out.safetensors")
    got = convert(str(ck), out, dry_run=True, progress=False, skip_unsupported=True, sep="/")
    assert got.to_json() == _result(
        "safetensors",
        [out],
        3,
        16,
        [
            _row("name", [], "string", "name", [], "string", "__metadata__ of every file"),
            _row("opt/m", [2], "float32", "opt/m", [2], "float32", out),
            _row("params/w", [4], "bfloat16", "params/w", [4], "bfloat16", out),
        ],
        skipped=[{"name": "params/q", "reason": "safetensors has no dtype int4"}],
        metadata_strings=["name"],
    )


# ---------------------------------------------------------------------------------------------
# Refusals, before anything is written: each message whole


def _refused(kind, fn, *args, **kwargs) -> str:
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_leaves_a_format_cannot_hold_are_refused_naming_them(tmp_path):
    from ockpt.errors import UnsupportedError

    tree = {"params": {"q": np.arange(3, dtype=np.int8).astype(ml_dtypes.int4)}, "s": "x\0"}
    ockpt.save_pytree(tmp_path / "ck", tree)
    ck = str(tmp_path / "ck")
    kw = {"dry_run": True, "progress": False}
    assert _refused(
        UnsupportedError, convert, ck, str(tmp_path / "o.safetensors"), select=["params"], **kw
    ) == (
        "leaf 'params.q' (int4): safetensors has no dtype int4; pass skip_unsupported=True to "
        "leave such leaves out"
    )
    assert _refused(UnsupportedError, convert, ck, str(tmp_path / "o.npz"), select=["s"], **kw) == (
        "leaf 's' (string): a string ending in NUL cannot be stored in .npy exactly; use .pt or "
        "safetensors; pass skip_unsupported=True to leave such leaves out"
    )


def test_names_an_output_cannot_hold_are_refused(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.zeros(2), y=np.ones(2))
    src = str(tmp_path / "s.npz")
    kw = {"dry_run": True, "progress": False}
    out = str(tmp_path / "o.safetensors")
    rules = parse_rules(rename=["^x$=y"])
    assert _refused(ValueError, convert, src, out, rules=rules, **kw) == (
        "key paths ['x'] and ['y'] both become 'y'; check the rename rules"
    )
    rules = parse_rules(rename=["^x$=__metadata__"])
    assert _refused(ValueError, convert, src, out, rules=rules, **kw) == (
        "leaf 'x' would be the tensor '__metadata__', a name safetensors reserves for its "
        "metadata; rename it (rules)"
    )
    tree = {"x/y": np.zeros(2, np.float32), "x": {"y": np.zeros(2, np.float32)}}
    ockpt.save_pytree(tmp_path / "ck", tree)
    assert _refused(
        ValueError, convert, str(tmp_path / "ck"), str(tmp_path / "o.npz"), sep="/", **kw
    ) == ("key paths ['x', 'y'] and ['x/y'] both become 'x/y'; try sep='.'")


def test_npz_member_names_up_to_the_zip_limit(tmp_path):
    """A member name of 65,531 UTF-8 bytes (65,535 with ``.npy``) is written; one byte more
    is refused, naming the leaf's first 80 characters."""
    limit = 0xFFFF - len(".npy")
    np.savez(tmp_path / "s.npz", x=np.zeros(1))
    src = str(tmp_path / "s.npz")
    kw = {"dry_run": True, "progress": False}
    ok = convert(
        src, str(tmp_path / "o.npz"), rules=parse_rules(rename=[f"^x$={'n' * limit}"]), **kw
    )
    assert ok.mapping[0]["target"] == "n" * limit
    rules = parse_rules(rename=[f"^x$={'n' * (limit + 1)}"])
    assert _refused(ValueError, convert, src, str(tmp_path / "o.npz"), rules=rules, **kw) == (
        f"leaf 'x'... ({limit + 1} characters) would be an .npz member name longer than a zip "
        f"archive holds ({limit} UTF-8 bytes before .npy); rename it (rules) or choose another "
        "format"
    )


def test_outputs_of_no_known_format_are_refused(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.zeros(2))
    src = str(tmp_path / "s.npz")
    kw = {"dry_run": True, "progress": False}
    assert _refused(ValueError, convert, src, str(tmp_path / "o"), dst_format="xyz", **kw) == (
        "unknown output format 'xyz'; known: orbax, safetensors, npz, pt, hf"
    )
    ockpt.save_pytree(tmp_path / "ck", {"x": np.zeros(2, np.float32)})
    dst = str(tmp_path / "o.safetensor")
    assert _refused(ValueError, convert, str(tmp_path / "ck"), dst + "/", **kw) == (
        f"unknown output format '.safetensor' ({dst}/); known: .safetensors, "
        '.safetensors.index.json, .npz, .pt (.pth, .bin), a folder with dst_format="hf", or an '
        "Orbax checkpoint directory (from safetensors or .npz), or pass dst_format"
    )
    # named by src_format too
    assert _refused(
        ValueError, convert, str(tmp_path / "ck"), dst, src_format="orbax", **kw
    ).startswith("unknown output format '.safetensor'")
    from safetensors.numpy import save_file

    (tmp_path / "hf").mkdir()
    save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "hf" / "model.safetensors"))
    assert _refused(ValueError, convert, src, str(tmp_path / "hf"), **kw) == (
        f'{tmp_path / "hf"}: a folder of safetensors files; pass dst_format="hf" to write a '
        "Hugging Face folder there (or another dst_format)"
    )


# ---------------------------------------------------------------------------------------------
# What is written: byte order, widened bits, empty tensors, the Orbax layout


def test_big_endian_sources_are_written_little_endian(tmp_path):
    from safetensors.numpy import load_file

    arrays = {"a.b": np.arange(3, dtype=">f4") / 3, "c": np.arange(2, dtype=">i8") - 7}
    np.savez(tmp_path / "s.npz", **arrays)
    src = str(tmp_path / "s.npz")
    convert(src, str(tmp_path / "o.npz"), progress=False)
    with np.load(tmp_path / "o.npz") as got:
        for name, want in arrays.items():
            assert got[name].dtype.str == want.dtype.newbyteorder("<").str
            assert np.array_equal(got[name], want)
    convert(src, str(tmp_path / "o.safetensors"), progress=False)
    got = load_file(str(tmp_path / "o.safetensors"))
    for name, want in arrays.items():
        assert got[name].dtype.str == want.dtype.newbyteorder("<").str
        assert np.array_equal(got[name], want)


def test_bfloat16_widens_to_float32_by_its_bits(tmp_path):
    """Every bfloat16 pattern, NaN payloads and signs too, is the top half of its float32."""
    bits = np.array([0x0000, 0x8000, 0x3F80, 0x7F80, 0xFF80, 0x7FC1, 0xFFA5, 0x7F81], np.uint16)
    ockpt.save_pytree(tmp_path / "ck", {"w": bits.view(ml_dtypes.bfloat16)})
    convert(str(tmp_path / "ck"), str(tmp_path / "o.npz"), widen=True, progress=False)
    with np.load(tmp_path / "o.npz") as got:
        assert got["w"].dtype == np.float32
        assert got["w"].view(np.uint32).tolist() == [int(b) << 16 for b in bits]


def test_pt_keeps_empty_tensors_and_the_leaves_after_them(tmp_path):
    torch = pytest.importorskip("torch")
    tree = {
        "a": np.zeros((0, 3), np.float32),
        "b": np.arange(4, dtype=np.int16),
        "c": np.zeros((2, 0), np.int8),
        "d": np.arange(2, dtype=np.float64),
        "s": np.array("text"),
    }
    np.savez(tmp_path / "s.npz", **tree)  # (Orbax has no zero-size arrays: WRITE-003)
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.pt"), progress=False)
    got = torch.load(tmp_path / "o.pt", weights_only=True)
    assert sorted(got) == ["a", "b", "c", "d", "s"]
    assert got["s"] == "text"
    for name in "abcd":
        want = tree[name]
        assert tuple(got[name].shape) == want.shape, name
        assert str(got[name].dtype) == f"torch.{want.dtype.name}", name
        assert np.array_equal(got[name].numpy(), want), name


@pytest.mark.parametrize("layout, kind", [("v1", "V1_CHECKPOINT"), ("item", "PYTREE_ITEM")])
def test_an_orbax_output_takes_the_layout_asked_for(tmp_path, layout, kind):
    np.savez(tmp_path / "s.npz", **{"a.b": np.arange(3, dtype=np.float32)})
    dst = tmp_path / "ck"
    got = convert(str(tmp_path / "s.npz"), str(dst), layout=layout, progress=False)
    assert got.files == (str(dst),) and got.format == "orbax" and got.mapping == ()
    assert ockpt.detect(dst).kind is getattr(ockpt.Kind, kind)


# ---------------------------------------------------------------------------------------------
# Hugging Face folders: the index as written, and what is refused


def test_a_sharded_folders_index_as_hugging_face_writes_it(tmp_path):
    np.savez(tmp_path / "s.npz", **{f"w{i}": np.zeros(4, np.float32) for i in range(5)})
    src, hf = str(tmp_path / "s.npz"), tmp_path / "hf"
    rules = parse_rules(rename=["^w0$=ü"])
    convert(src, str(hf), dst_format="hf", max_shard_size=16, progress=False, rules=rules)
    assert (hf / "model.safetensors.index.json").read_text(encoding="utf-8") == (
        '{\n  "metadata": {\n    "total_size": 80\n  },\n  "weight_map": {\n'
        '    "w1": "model-00002-of-00005.safetensors",\n'
        '    "w2": "model-00003-of-00005.safetensors",\n'
        '    "w3": "model-00004-of-00005.safetensors",\n'
        '    "w4": "model-00005-of-00005.safetensors",\n'
        '    "ü": "model-00001-of-00005.safetensors"\n  }\n}\n'
    )
    from ockpt.errors import WriteConflictError

    shards = [str(hf / f"model-0000{i}-of-00005.safetensors") for i in (1, 2, 3)]
    message = _refused(
        WriteConflictError, convert, src, str(hf), dst_format="hf", max_shard_size=16,
        progress=False,
    )  # fmt: skip
    assert message == (f"{', '.join(shards)} and 3 more: exists; pass overwrite=True to replace it")


def test_hf_outputs_refuse_a_string_leaf_on_a_metadata_key_and_a_broken_config(tmp_path):
    ockpt.save_pytree(tmp_path / "ck", {"x": {"y": "text"}, "w": np.zeros(2, np.float32)})
    rules = parse_rules(rename=[r"^x\.y$=format"])
    assert _refused(
        ValueError, convert, str(tmp_path / "ck"), str(tmp_path / "hf"), dst_format="hf",
        progress=False, rules=rules,
    ) == (
        "string leaf 'x.y' would be __metadata__ key 'format', which the output already uses; "
        "rename it (rules)"
    )  # fmt: skip
    (tmp_path / "c.json").write_text("{oops")
    assert _refused(
        ValueError, convert, str(tmp_path / "ck"), str(tmp_path / "hf"), dst_format="hf",
        progress=False, config=str(tmp_path / "c.json"),
    ) == f"config file {tmp_path / 'c.json'}: not a JSON object"  # fmt: skip
    assert not (tmp_path / "hf").exists()


def test_an_output_needs_a_file_name(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.zeros(2))
    assert _refused(
        ValueError, convert, str(tmp_path / "s.npz"), "/", dst_format="npz", progress=False
    ) == ("/: no file name to write to")


def test_hf_output_strings_and_dtypes(tmp_path):
    """A Hugging Face folder is safetensors: its string leaves go to every file's
    `__metadata__` beside ``"format": "pt"``, and a dtype safetensors lacks is skipped."""
    from safetensors import safe_open

    ck = _orbax(tmp_path)
    hf = tmp_path / "hf"
    got = convert(str(ck), str(hf), dst_format="hf", skip_unsupported=True, progress=False)
    assert got.metadata_strings == ("name",)
    assert got.skipped == (("params.q", "safetensors has no dtype int4"),)
    with safe_open(str(hf / "model.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"format": "pt", "name": "hi"}
        assert sorted(f.keys()) == ["opt.m", "params.w"]


def test_dry_run_names_a_random_key_as_key_data(tmp_path):
    jax = pytest.importorskip("jax")
    ockpt.save_pytree(tmp_path / "ck", {"k": jax.random.key(0), "w": np.zeros(2, np.float32)})
    got = convert(str(tmp_path / "ck"), str(tmp_path / "o.npz"), dry_run=True, progress=False)
    assert got.to_json()["random_keys"] == [{"name": "k", "impl": "threefry2x32"}]


# ---------------------------------------------------------------------------------------------
# safetensors files: shards, header


def test_shards_fill_up_to_the_limit_and_an_index_may_be_named(tmp_path):
    np.savez(tmp_path / "s.npz", a=np.zeros(2, np.float32), b=np.zeros(2, np.float32))
    src = str(tmp_path / "s.npz")
    kw = {"dry_run": True, "progress": False}
    one = convert(src, str(tmp_path / "o.safetensors"), max_shard_size=16, **kw)
    assert one.files == (str(tmp_path / "o.safetensors"),)  # 8 + 8 bytes fit in 16
    two = convert(src, str(tmp_path / "o.safetensors"), max_shard_size=15, **kw)
    assert len(two.files) == 3
    index = convert(src, str(tmp_path / "m.safetensors.index.json"), **kw)
    assert index.files == (
        str(tmp_path / "m-00001-of-00001.safetensors"),
        str(tmp_path / "m.safetensors.index.json"),
    )


def test_a_safetensors_header_is_compact_aligned_and_padded(tmp_path):
    import json
    import struct

    arrays = {"b": np.arange(3, dtype=np.int8), "ü": np.arange(2.0), "c": np.ones(1, np.float32)}
    np.savez(tmp_path / "s.npz", **arrays)
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.safetensors"), progress=False)
    data = (tmp_path / "o.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    assert size % 8 == 0
    text = data[8 : 8 + size]
    body = text.rstrip(b" ")
    assert body == json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False).encode()
    assert "ü".encode() in body and b"__metadata__" not in body
    header = json.loads(body)
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    assert order == ["ü", "c", "b"]  # largest items first, each aligned to its size
    for name, width in (("ü", 8), ("c", 4), ("b", 1)):
        assert header[name]["data_offsets"][0] % width == 0


def test_a_header_larger_than_the_library_reads_is_refused_before_writing(tmp_path, monkeypatch):
    import ockpt.convert as convert_module

    np.savez(tmp_path / "s.npz", a=np.zeros(2, np.float32))
    monkeypatch.setattr(convert_module, "_SAFETENSORS_HEADER_MAX", 8)
    out = tmp_path / "o.safetensors"
    assert _refused(ValueError, convert, str(tmp_path / "s.npz"), str(out), progress=False) == (
        f"the header of {out.name} would be 56 bytes (its string leaves and tensor names), more "
        "than the 8 the safetensors library reads; leave the string leaves out (select) or "
        "choose .npz or .pt"
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# .pt and transposed blocks


def test_pt_writes_nothing_outside_its_temporary_folder(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import ockpt.torch.runtime as runtime

    purposes = []
    import_torch = runtime.import_torch

    def recording(purpose):
        purposes.append(purpose)
        return import_torch(purpose)

    monkeypatch.setattr(runtime, "import_torch", recording)
    np.savez(tmp_path / "s.npz", a=np.arange(3, dtype=np.float32), b=np.arange(2))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.pt"), progress=False)
    assert list(cwd.iterdir()) == []
    assert purposes == ["writing a PyTorch .pt file"]


def test_a_transpose_of_three_axes_streams_in_blocks(tmp_path, monkeypatch):
    """From .npz (no stored chunks), a leaf larger than a block is permuted block by block."""
    import ockpt.convert as convert_module

    w = np.arange(6 * 4 * 5, dtype=np.float32).reshape(6, 4, 5)
    np.savez(tmp_path / "s.npz", w=w)
    monkeypatch.setattr(convert_module, "BLOCK_BYTES", 64)
    rules = parse_rules(transpose=["^w$=1,0,2"])
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.npz"), rules=rules, progress=False)
    with np.load(tmp_path / "o.npz") as got:
        assert np.array_equal(got["w"], np.transpose(w, (1, 0, 2)))


def test_npz_name_refusal_shows_the_first_80_characters(tmp_path):
    limit = 0xFFFF - len(".npy")
    source = "k" * 100
    np.savez(tmp_path / "s.npz", **{source: np.zeros(1)})
    rules = parse_rules(rename=[f"^k+$={'n' * (limit + 1)}"])
    message = _refused(
        ValueError, convert, str(tmp_path / "s.npz"), str(tmp_path / "o.npz"), rules=rules,
        dry_run=True, progress=False,
    )  # fmt: skip
    assert message.startswith(f"leaf {'k' * 80!r}... ({limit + 1} characters)")


# ---------------------------------------------------------------------------------------------
# convert's own arguments


def test_arguments_that_do_not_apply_are_refused(tmp_path):
    from ockpt.errors import UnsupportedError

    np.savez(tmp_path / "s.npz", x=np.zeros(2, np.float32))
    src, npz = str(tmp_path / "s.npz"), str(tmp_path / "o.npz")
    assert _refused(ValueError, convert, src, npz, sep="-") == "sep must be '.' or '/', not '-'"
    assert _refused(ValueError, convert, src, npz, max_shard_size="1KB") == (
        "max_shard_size applies to safetensors and hf output only"
    )
    assert _refused(ValueError, convert, src, npz, config=src) == (
        'config applies to dst_format="hf" only'
    )
    ck = str(tmp_path / "ck")
    for kw in ({"rules": parse_rules(rename=["x=y"])}, {"widen": True}):
        assert _refused(UnsupportedError, convert, src, ck, **kw) == (
            "rules and widen=True apply to flat outputs"
        )
    ockpt.save_pytree(ck, {"x": np.zeros(2, np.float32)})
    assert _refused(UnsupportedError, convert, ck, str(tmp_path / "ck2"), progress=False) == (
        "both sides are Orbax checkpoints: copy one with `ockpt cp SRC DST`; to convert, name an "
        "output .safetensors, .safetensors.index.json, .npz, .pt (.pth, .bin), a folder with "
        'dst_format="hf", or an Orbax checkpoint directory (from safetensors or .npz)'
    )
    assert not (tmp_path / "ck2").exists()


def test_a_hf_folder_is_sharded_by_default_and_a_safetensors_file_is_not(tmp_path, monkeypatch):
    import ockpt.convert as convert_module

    monkeypatch.setattr(convert_module, "HF_MAX_SHARD_SIZE", "16")
    np.savez(tmp_path / "s.npz", a=np.zeros(4, np.float32), b=np.zeros(4, np.float32))
    src = str(tmp_path / "s.npz")
    kw = {"dry_run": True, "progress": False}
    hf = convert(src, str(tmp_path / "hf"), dst_format="hf", **kw)
    assert [os.path.basename(f) for f in hf.files] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    one = convert(src, str(tmp_path / "o.safetensors"), **kw)
    assert one.files == (str(tmp_path / "o.safetensors"),)


def test_the_source_is_opened_as_asked(tmp_path):
    """`src_format`, `sep`, `select` (a string or patterns), `step` and `item` reach the
    source; a pattern that selects nothing names the source."""
    from ockpt.errors import LeafNameError

    with open(tmp_path / "data.bin", "wb") as f:  # an .npz of another suffix
        np.savez(f, **{"a/b": np.zeros(2, np.float32), "c": np.zeros(1)})
    src = str(tmp_path / "data.bin")
    kw = {"dry_run": True, "progress": False}
    got = convert(src, str(tmp_path / "o.safetensors"), src_format="npz", sep="/", select="a", **kw)
    assert [r["source"] for r in got.mapping] == ["a/b"] and got.left_out == ("c",)
    with pytest.raises(LeafNameError) as info:
        convert(src, str(tmp_path / "o.npz"), src_format="npz", select=["nothing"], **kw)
    assert info.value.file == src
    root = tmp_path / "root"
    ockpt.save_pytree(root / "1", {"one": np.zeros(1)}, layout="step")
    ockpt.save_pytree(root / "2", {"two": np.zeros(1)}, layout="step")
    got = convert(str(root), str(tmp_path / "o.npz"), step=1, item="state", **kw)
    assert [r["source"] for r in got.mapping] == ["one"]


def test_an_orbax_output_counts_its_leaves_and_bytes(tmp_path):
    np.savez(tmp_path / "s.npz", a=np.zeros(3, np.float32), b=np.zeros(2, np.int8))
    got = convert(str(tmp_path / "s.npz"), str(tmp_path / "ck"), progress=False)
    assert (got.leaves, got.bytes) == (2, 14)


def test_shard_sizes_restart_at_zero_and_refusals_count_the_rest(tmp_path):
    from ockpt.errors import WriteConflictError

    np.savez(tmp_path / "s.npz", **{k: np.zeros(2, np.float32) for k in "abcd"})
    src = str(tmp_path / "s.npz")
    got = convert(src, str(tmp_path / "o.safetensors"), max_shard_size=16, dry_run=True)
    assert [[r["source"] for r in got.mapping if r["file"] == f] for f in got.files[:-1]] == [
        ["a", "b"],
        ["c", "d"],
    ]
    np.savez(tmp_path / "t.npz", **{k: np.zeros(4, np.float32) for k in "abc"})
    hf = tmp_path / "hf"
    kw = {"dst_format": "hf", "max_shard_size": 16, "progress": False}
    convert(str(tmp_path / "t.npz"), str(hf), **kw)  # 3 shards and the index
    shards = [str(hf / f"model-0000{i}-of-00003.safetensors") for i in (1, 2, 3)]
    assert _refused(WriteConflictError, convert, str(tmp_path / "t.npz"), str(hf), **kw) == (
        f"{', '.join(shards)} and 1 more: exists; pass overwrite=True to replace it"
    )


def test_select_of_one_string_and_a_suffix_ending_in_x(tmp_path):
    np.savez(tmp_path / "s.npz", **{"ab.c": np.zeros(2), "d": np.zeros(1)})
    src = str(tmp_path / "s.npz")
    got = convert(src, str(tmp_path / "o.npz"), select="ab", dry_run=True, progress=False)
    assert got.select == ("ab",) and got.left_out == ("d",)
    ockpt.save_pytree(tmp_path / "ck", {"x": np.zeros(2, np.float32)})
    dst = str(tmp_path / "o.binX")
    message = _refused(ValueError, convert, str(tmp_path / "ck"), dst, dry_run=True)
    assert message.startswith(f"unknown output format '.binX' ({dst}); known: ")


# ---------------------------------------------------------------------------------------------
# The progress bar


class _Bar:
    """A bar as `ockpt._progress.bar` was asked for it: its total, its label, whether it is
    drawn (as the real one: only when `enabled`) and the bytes it was moved by."""

    def __init__(self, total, desc, *, enabled=True, unit="B"):
        self.total, self.desc, self.drawn, self.done = total, desc, bool(enabled), 0

    def update(self, n=1):
        self.done += n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.parametrize(
    "fmt, dst", [("safetensors", "o.safetensors"), ("hf", "hf"), ("npz", "o.npz"),
                 ("pt", "o.pt"), ("orbax", "ck")],
)  # fmt: skip
def test_the_progress_bar_counts_every_byte_written(tmp_path, monkeypatch, fmt, dst):
    """A bar by default, none with ``progress=False``: its total the bytes written, moved by
    each block, labelled with the output's format."""
    from ockpt import _progress

    if fmt == "pt":
        pytest.importorskip("torch")
    bars: list[_Bar] = []
    monkeypatch.setattr(_progress, "bar", lambda *a, **kw: bars.append(_Bar(*a, **kw)) or bars[-1])
    tree = {"a": np.arange(6, dtype=np.float32), "b": np.arange(3, dtype=np.int16), "s": "x"}
    np.savez(tmp_path / "s.npz", **tree)
    src, out = str(tmp_path / "s.npz"), str(tmp_path / dst)
    kw = {"dst_format": "hf"} if fmt == "hf" else {}
    convert(src, out, **kw)
    convert(src, out, progress=False, overwrite=True, **kw)
    total = 34 if fmt == "orbax" else 30  # the bar of an Orbax output counts the <U1 array
    assert [(b.total, b.desc, b.drawn, b.done) for b in bars] == [
        (total, fmt, True, total),
        (total, fmt, False, total),
    ]


# ---------------------------------------------------------------------------------------------
# The store written through: staged or not, buffers held, failures


class _Folder(MemoryStore):
    """The output's folder, in memory, logging its writes (a file closed), deletes and
    renames. ``renames=False`` makes it an object store as `UrlStore` is: no rename, and a new
    file's parts held as given, not copied, until it is closed. `change` alters each value
    stored (a store that reads back other bytes); `fail` names the file whose writes fail,
    after which `flush` raises `flush_error` and deletes raise `delete_errors`' errors."""

    def __init__(self, *, renames=True, change=None, fail=None, flush_error=None, delete_errors=()):
        super().__init__("out/", display="mem://out")
        self.capabilities = dataclasses.replace(MemoryStore.capabilities, atomic_rename=renames)
        self.change, self.fail, self.failed = change, fail, False
        self.flush_error, self.delete_errors = flush_error, dict(delete_errors)
        self.log: list[tuple[str, ...]] = []

    def writer(self, key, *, background=None):
        return _HeldFile(self, key)

    def flush(self):
        if self.failed and self.flush_error is not None:
            raise self.flush_error

    def delete(self, key):
        self.log.append(("delete", key))
        if self.failed and key in self.delete_errors:
            raise self.delete_errors[key]
        super().delete(key)

    def rename(self, src, dst):
        self.log.append(("rename", src, dst))
        super().rename(src, dst)

    def value(self, key):
        return self.get(key, limit=1 << 30)


class _HeldFile:
    """A new file of `_Folder`: its parts held as given until `close` stores them whole."""

    def __init__(self, folder: _Folder, key: str) -> None:
        self.folder, self.key, self.parts = folder, key, []

    def append(self, parts):
        if self.key.startswith(self.folder.fail or "\0"):
            self.folder.failed = True
            raise _Boom(self.key)
        self.parts.extend(parts)

    def close(self):
        value = b"".join(self.parts)
        self.folder.set(self.key, self.folder.change(value) if self.folder.change else value)
        self.folder.log.append(("write", self.key))


class _Boom(Exception):
    """The store failing a write."""


class _InFolder:
    """What `as_store` gives for a file of `_Folder`: its name, and the folder as its parent."""

    def __init__(self, folder: _Folder, name: str) -> None:
        self.folder, self.name = folder, name

    def parent(self):
        return self.folder


def _write_into(monkeypatch, folder: _Folder) -> None:
    """Make convert write its outputs into `folder` (a folder output is `folder` itself)."""
    import ockpt.convert as convert_module

    def as_store(dst):
        return folder if not Path(dst).suffix else _InFolder(folder, Path(dst).name)

    monkeypatch.setattr(convert_module, "as_store", as_store)


def test_a_pt_file_in_a_store_that_holds_its_buffers(tmp_path, monkeypatch):
    """torch.save reuses its buffers: an object store holds each part until the file is
    closed, so the parts are copied as written."""
    import io

    torch = pytest.importorskip("torch")
    tree = {f"w{i}": np.arange(i + 1, dtype=np.float32) * i for i in range(6)} | {"s": "text"}
    np.savez(tmp_path / "s.npz", **tree)
    folder = _Folder(renames=False)
    _write_into(monkeypatch, folder)
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.pt"), progress=False)
    assert folder.log == [("write", "o.pt")]
    got = torch.load(io.BytesIO(folder.value("o.pt")), weights_only=True)
    assert sorted(got) == sorted(tree) and got["s"] == "text"
    for i in range(6):
        assert np.array_equal(got[f"w{i}"].numpy(), tree[f"w{i}"])


HF_SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
HF_INDEX = "model.safetensors.index.json"


@pytest.mark.parametrize("renames", [True, False])
def test_old_weights_go_index_first_and_new_files_appear_index_last(tmp_path, monkeypatch, renames):
    """Where the store renames, files are written under temporary names and renamed in once
    all are written, the old weight files removed just before (the old index first); in an
    object store they are written under their own names, the old files removed first (the
    index first) and the new index written last."""
    np.savez(tmp_path / "s.npz", **{k: np.arange(4, dtype=np.float32) for k in "abc"})
    folder = _Folder(renames=renames)
    _write_into(monkeypatch, folder)
    src, kw = str(tmp_path / "s.npz"), {"dst_format": "hf", "progress": False}
    t = ".ockpt-tmp" if renames else ""
    got = convert(src, "hf", max_shard_size=16, **kw)
    assert got.files == tuple(f"mem://out/{n}" for n in [*HF_SHARDS, HF_INDEX])
    written = [("write", n + t) for n in [*HF_SHARDS, HF_INDEX]]
    renamed = [("rename", n + t, n) for n in [*HF_SHARDS, HF_INDEX]]
    removed = [("delete", HF_INDEX)]
    assert folder.log == (written + removed + renamed if renames else removed + written)
    folder.log.clear()
    convert(src, "hf", overwrite=True, **kw)  # one file now: the old shards and index go
    removed = [("delete", n) for n in [HF_INDEX, *HF_SHARDS]]
    written = [("write", "model.safetensors" + t)]
    renamed = [("rename", "model.safetensors" + t, "model.safetensors")]
    assert folder.log == (written + removed + renamed if renames else removed + written)
    assert folder.list() == ["model.safetensors"]


@pytest.mark.parametrize("flush_error", [OSError("flush"), OckptError("flush")])
def test_a_failed_write_leaves_the_old_output_and_removes_the_new_files(
    tmp_path, monkeypatch, flush_error
):
    """The store's error reaches the caller; the files written are removed, the old output
    kept; errors of that cleanup (the store's flush, its deletes) do not hide it."""
    np.savez(tmp_path / "s.npz", a=np.zeros(4, np.float32), b=np.ones(4, np.float32))
    src, dst = str(tmp_path / "s.npz"), str(tmp_path / "o.safetensors")
    folder = _Folder()
    _write_into(monkeypatch, folder)
    convert(src, dst, progress=False)
    old = folder.value("o.safetensors")
    shards = [f"o-0000{i}-of-00002.safetensors.ockpt-tmp" for i in (1, 2)]
    folder.fail = shards[1]  # the second shard's first write fails
    with pytest.raises(_Boom) as info:
        convert(src, dst, progress=False, overwrite=True, max_shard_size=16)
    assert info.value.args == (shards[1],)
    assert folder.list() == ["o.safetensors"] and folder.value("o.safetensors") == old
    assert folder.log[-2:] == [("delete", shards[0]), ("delete", shards[1])]
    # the same failure, the cleanup failing too
    folder.fail, folder.failed = shards[1], False
    folder.flush_error = flush_error
    folder.delete_errors = {shards[0]: OSError("delete"), shards[1]: OckptError("delete")}
    with pytest.raises(_Boom) as info:
        convert(src, dst, progress=False, overwrite=True, max_shard_size=16)
    assert info.value.args == (shards[1],)
    assert folder.value("o.safetensors") == old


@pytest.mark.parametrize(
    "change",
    [lambda v: v + b"\0", lambda v: v[:-1], lambda v: v[:8] + b"[" + v[9:]],
    ids=["longer", "shorter", "header"],
)
def test_a_file_read_back_other_than_written_is_an_error(tmp_path, monkeypatch, change):
    """Each safetensors file is read back from the store: its header and its size."""
    np.savez(tmp_path / "s.npz", a=np.arange(4, dtype=np.float32))
    folder = _Folder(change=change)
    _write_into(monkeypatch, folder)
    message = _refused(
        OckptError, convert, str(tmp_path / "s.npz"), str(tmp_path / "o.safetensors"),
        progress=False,
    )  # fmt: skip
    assert message == "mem://out/o.safetensors.ockpt-tmp: the file written is not the one planned"
    assert folder.list() == []


def test_a_pt_tensor_that_cannot_be_mapped_is_a_memory_error(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from ockpt.errors import MemoryLimitError

    def from_file(*args, **kwargs):
        raise RuntimeError("no address space")

    monkeypatch.setattr(torch, "from_file", from_file)
    np.savez(tmp_path / "s.npz", a=np.arange(6, dtype=np.float32))
    with pytest.raises(MemoryLimitError) as info:
        convert(str(tmp_path / "s.npz"), str(tmp_path / "o.pt"), progress=False)
    assert (info.value.message, info.value.file, info.value.rule) == (
        "cannot map the 24 bytes of leaf 'a' to write them to the .pt file: no address space",
        "o.pt",
        "LIMIT-006",
    )
    assert sorted(os.listdir(tmp_path)) == ["s.npz"]


# ---------------------------------------------------------------------------------------------
# .npz archives, safetensors headers, configs at their limits


def test_npz_members_record_their_offsets(tmp_path):
    """The zip's central directory gives each member's local header and its own offset as
    they lie in the file (the archive is written as a stream, counting its bytes)."""
    import struct

    np.savez(tmp_path / "s.npz", a=np.arange(3, dtype=np.float32), b=np.arange(2))
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.npz"), progress=False)
    data = (tmp_path / "o.npz").read_bytes()
    end = data.rindex(b"PK\x05\x06")
    count, size, start = struct.unpack_from("<HII", data, end + 10)
    assert count == 2 and start + size == end and data[start : start + 4] == b"PK\x01\x02"
    entry, offsets = start, []
    for _ in range(count):
        assert data[entry : entry + 4] == b"PK\x01\x02"
        n, m, k = struct.unpack_from("<HHH", data, entry + 28)
        offsets.append(struct.unpack_from("<I", data, entry + 42)[0])
        entry += 46 + n + m + k
    assert offsets[0] == 0 and all(data[o : o + 4] == b"PK\x03\x04" for o in offsets)


def test_npz_members_past_the_zip64_limit(tmp_path, monkeypatch):
    """A member larger than a plain zip entry holds (4 GiB; here the limit narrowed) is written
    with its ZIP64 sizes: each member is opened for them, its size unknown in advance."""
    import zipfile

    w = np.arange(300, dtype=np.float32)
    np.savez(tmp_path / "s.npz", w=w, b=np.arange(2, dtype=np.int8))
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 1000)
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.npz"), progress=False)
    monkeypatch.undo()
    with np.load(tmp_path / "o.npz") as got:
        assert np.array_equal(got["w"], w) and got["b"].tolist() == [0, 1]


def test_a_header_of_exactly_the_librarys_limit_is_written(tmp_path, monkeypatch):
    import ockpt.convert as convert_module

    np.savez(tmp_path / "s.npz", a=np.zeros(2, np.float32))
    monkeypatch.setattr(convert_module, "_SAFETENSORS_HEADER_MAX", 56)  # this header's size
    convert(str(tmp_path / "s.npz"), str(tmp_path / "o.safetensors"), progress=False)
    assert (tmp_path / "o.safetensors").read_bytes()[:8] == (56).to_bytes(8, "little")


def test_a_config_over_the_json_size_limit_is_refused(tmp_path):
    import dataclasses as dc

    from ockpt import limits
    from ockpt.errors import FormatError

    np.savez(tmp_path / "s.npz", a=np.zeros(2, np.float32))
    (tmp_path / "config.json").write_text('{"a": 12345}')  # 12 bytes
    with limits.applied(dc.replace(limits.LIMITS, max_json_bytes=11)):
        with pytest.raises(FormatError) as info:
            convert(
                str(tmp_path / "s.npz"), str(tmp_path / "hf"), dst_format="hf",
                config=str(tmp_path / "config.json"), progress=False,
            )  # fmt: skip
    assert_error(info, rule="JSON-003", file=str(tmp_path / "config.json"))
    assert not (tmp_path / "hf").exists()


# ---------------------------------------------------------------------------------------------
# Sources and outputs: strings read as bytes, items, Orbax outputs, neighbours of a file


def test_a_string_leaf_read_as_bytes_is_utf8_text(tmp_path):
    """A msgpack item's inline bytes are a string leaf that the reader gives as bytes."""
    import msgpack

    item = tmp_path / "item"
    item.mkdir()
    (item / "checkpoint").write_bytes(msgpack.packb({"raw": "hé".encode(), "text": "hé"}))
    convert(str(item), str(tmp_path / "o.npz"), progress=False)
    with np.load(tmp_path / "o.npz") as got:
        assert (str(got["raw"]), str(got["text"])) == ("hé", "hé")


def test_the_item_asked_for_of_a_checkpoint_with_two(tmp_path):
    case = FIXTURES / "orbax-0.12.8" / "v1_checkpointables" / "checkpoint"
    kw = {"dry_run": True, "progress": False}
    got = convert(str(case), str(tmp_path / "o.safetensors"), item="aux", **kw)
    assert [r["source"] for r in got.mapping] == ["counts", "flag"]


def test_src_format_decides_whether_a_suffix_is_an_unknown_format(tmp_path):
    """From an .npz without its suffix (`src_format`), a name with a dot is an Orbax output;
    from an Orbax checkpoint it is an unknown format."""
    with open(tmp_path / "weights", "wb") as f:
        np.savez(f, **{"a.b": np.arange(3, dtype=np.float32)})
    dst = tmp_path / "run.v2"
    got = convert(str(tmp_path / "weights"), str(dst), src_format="npz", progress=False)
    assert got.files == (str(dst),) and got.format == "orbax"
    assert ockpt.load_pytree(dst)["a"]["b"].tolist() == [0.0, 1.0, 2.0]


def test_dry_run_of_an_orbax_output(tmp_path):
    np.savez(tmp_path / "s.npz", **{"a.b": np.arange(3, dtype=np.float32), "c": np.arange(2)})
    ck = str(tmp_path / "ck")
    got = convert(str(tmp_path / "s.npz"), ck, dry_run=True, progress=False)
    assert got.to_json() == _result(
        "orbax",
        [ck],
        2,
        28,
        [
            _row("a.b", [3], "float32", "a.b", [3], "float32", ck),
            _row("c", [2], "int64", "c", [2], "int64", ck),
        ],
    )
    assert sorted(os.listdir(tmp_path)) == ["s.npz"]


def test_a_safetensors_file_leaves_a_hugging_face_model_beside_it_alone(tmp_path):
    """Only a Hugging Face folder's own weight files are its output's: another file of that
    name beside a .safetensors output is neither refused nor removed."""
    np.savez(tmp_path / "s.npz", a=np.zeros(2, np.float32))
    (tmp_path / "model.safetensors").write_bytes(b"another model")
    (tmp_path / HF_INDEX).write_bytes(b"{}")
    for overwrite in (False, True):
        convert(str(tmp_path / "s.npz"), str(tmp_path / "o.safetensors"), overwrite=overwrite)
    assert (tmp_path / "model.safetensors").read_bytes() == b"another model"
    assert (tmp_path / HF_INDEX).read_bytes() == b"{}"


def test_a_string_leaf_of_an_orbax_output_is_a_string(tmp_path):
    """An .npz string (a 0-d unicode array) is a string in the checkpoint: its dry-run row
    says so and it has no tensor bytes, as in a flat output."""
    np.savez(tmp_path / "s.npz", **{"a.b": np.arange(3, dtype=np.float32), "s": np.array("t")})
    ck = str(tmp_path / "ck")
    got = convert(str(tmp_path / "s.npz"), ck, dry_run=True, progress=False)
    assert got.to_json() == _result(
        "orbax",
        [ck],
        2,
        12,
        [
            _row("a.b", [3], "float32", "a.b", [3], "float32", ck),
            _row("s", [], "<U1", "s", [], "string", ck),
        ],
    )
    done = convert(str(tmp_path / "s.npz"), ck, progress=False)
    assert (done.leaves, done.bytes) == (2, 12) and ockpt.load_pytree(ck)["s"] == "t"
