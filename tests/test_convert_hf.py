"""`ockpt convert CKPT OUTDIR --to hf` and its rules on a real model definition: a tiny,
randomly initialised `transformers` Llama (its Linear layers store (out, in), so --transpose is
exercised) is saved as a Flax-style tree (``params/layers_0/self_attn/q_proj/kernel`` of shape
(in, out)), once by `ockpt.save_pytree` and once by real Orbax 0.12.8, converted through the
command line with rename / transpose rules, loaded with ``from_pretrained`` and compared
parameter by parameter and on one forward pass. Also: Hugging Face's shard naming and index,
the dry run, the README's commands, the rule parser's refusals, and that a transposition
streams. The model tests skip where transformers (or, for the Orbax one, orbax) is absent;
transformers is in the `test` extra."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ockpt
import ockpt.convert as conv
from ockpt.convert_rules import load_rules_file, parse_rules
from ockpt.sources import OrbaxSource
from tests.support import FIXTURES, ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

#: Flax names -> the torch model's, as a user would write them (README, "Hugging Face").
RULES = {
    "rename": [
        ["^params\\.", ""],
        ["^layers_(\\d+)\\.", "model.layers.\\1."],
        ["^(embed_tokens|norm)\\.", "model.\\1."],
        ["(kernel|scale|embedding)$", "weight"],
    ],
    "transpose": ["kernel$"],
}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ockpt.cli", *args], capture_output=True, text=True, timeout=300
    )


def _ok(*args: str) -> subprocess.CompletedProcess:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def model():
    """A tiny Llama with random weights; the tests using it skip without transformers."""
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install transformers)"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).eval()


def _flax_tree(model) -> dict:
    """The model's weights as a Flax training state would hold them: Linear weights as
    (in, out) kernels, norms as scales, the embedding as an embedding; plus a step and an
    optimizer count that --select leaves out."""
    params: dict = {}
    for name, tensor in model.state_dict().items():
        value = tensor.detach().numpy().copy()
        parts = name.split(".")
        parts = parts[1:] if parts[0] == "model" else parts
        if parts[0] == "layers":
            parts = [f"layers_{parts[1]}", *parts[2:]]
        if parts[-2] == "embed_tokens":
            parts[-1] = "embedding"
        elif parts[-2].endswith("norm"):
            parts[-1] = "scale"
        else:
            parts[-1], value = "kernel", np.ascontiguousarray(value.T)
        node = params
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return {"params": params, "step": np.int64(7), "opt_state": {"count": np.int32(3)}}


def _assert_same_model(model, outdir) -> None:
    """Every parameter bit-equal, and the same logits for one batch."""
    loaded = type(model).from_pretrained(str(outdir)).eval()
    want, got = model.state_dict(), loaded.state_dict()
    assert set(got) == set(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    ids = torch.tensor([[1, 5, 9, 42, 99, 0, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def _save_ockpt(model, path) -> None:
    ockpt.save_pytree(path, _flax_tree(model))


def test_flax_tree_to_hf_folder_loads_in_transformers(model, tmp_path):
    ckpt = tmp_path / "ckpt"
    _save_ockpt(model, ckpt)
    (tmp_path / "rules.json").write_text(json.dumps(RULES))
    model.config.to_json_file(tmp_path / "config.json")
    out = tmp_path / "hf"
    args = [str(ckpt), str(out), "--to", "hf", "--select", "params", "--rules"]
    result = _ok(
        "convert", *args, str(tmp_path / "rules.json"), "--config", str(tmp_path / "config.json")
    )
    assert "wrote 21 leaves" in result.stdout
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]  # one file: it fits
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}  # as save_pretrained writes it
    _assert_same_model(model, out)


def test_sharded_hf_folder_follows_hf_naming_and_loads(model, tmp_path):
    ckpt = tmp_path / "ckpt"
    _save_ockpt(model, ckpt)
    (tmp_path / "rules.json").write_text(json.dumps(RULES))
    out = tmp_path / "hf"
    _ok(
        "convert", str(ckpt), str(out), "--to", "hf", "--select", "params",
        "--rules", str(tmp_path / "rules.json"), "--max-shard-size", "20KB", "--no-progress",
    )  # fmt: skip
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    n = len(shards)
    assert n > 2 and shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert sorted(os.listdir(out)) == sorted([*shards, "model.safetensors.index.json"])
    assert set(index["weight_map"]) == set(model.state_dict())
    # Hugging Face's own save of the same model: the same total_size, the same naming scheme
    model.save_pretrained(tmp_path / "theirs", max_shard_size="20KB")
    theirs = json.loads((tmp_path / "theirs" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == theirs["metadata"]["total_size"]
    for shard in shards:  # a shard passes 20 kB only when it is one tensor larger than that
        size = os.path.getsize(out / shard)
        tensors = [k for k, v in index["weight_map"].items() if v == shard]
        assert size < 20_000 + 4096 or len(tensors) == 1, shard
    model.config.to_json_file(out / "config.json")
    _assert_same_model(model, out)
    # again without --overwrite: refused, naming the flag; with it, stale shards are removed
    again = _cli("convert", str(ckpt), str(out), "--to", "hf", "--select", "params")
    assert again.returncode == 1 and "pass --overwrite" in again.stderr
    assert "overwrite=True" not in again.stderr
    _ok("convert", str(ckpt), str(out), "--to", "hf", "--select", "params", "--overwrite",
        "--rules", str(tmp_path / "rules.json"), "--no-progress")  # fmt: skip
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    _assert_same_model(model, out)


def test_real_orbax_checkpoint_to_hf_with_command_line_rules(model, tmp_path):
    """The 'real Orbax bytes' rule: the tree saved by Orbax 0.12.8 itself, the rules given
    as command-line flags instead of a file."""
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is not installed")
    flat = {}

    def walk(node, key):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, (*key, k))
            else:
                flat["/".join((*key, k))] = v

    walk(_flax_tree(model), ())
    np.savez(tmp_path / "tree.npz", **flat)
    script = f"""
import numpy as np
from orbax.checkpoint import v1 as ocp
tree = {{}}
with np.load({str(tmp_path / "tree.npz")!r}) as data:
    for name in data.files:
        node = tree
        *parents, last = name.split("/")
        for p in parents:
            node = node.setdefault(p, {{}})
        node[last] = data[name]
ocp.save_pytree({str(tmp_path / "orbax")!r}, tree)
"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rename = [f"--rename={a}={b}" for a, b in RULES["rename"]]
    _ok(
        "convert", str(tmp_path / "orbax"), str(tmp_path / "hf"), "--to", "hf",
        "--select", "params", *rename, "--transpose", "kernel$", "--no-progress",
    )  # fmt: skip
    model.config.to_json_file(tmp_path / "hf" / "config.json")
    _assert_same_model(model, tmp_path / "hf")


def test_dry_run_prints_the_mapping_and_writes_nothing(model, tmp_path):
    ckpt = tmp_path / "ckpt"
    _save_ockpt(model, ckpt)
    (tmp_path / "rules.json").write_text(json.dumps(RULES))
    out = tmp_path / "hf"
    args = ["convert", str(ckpt), str(out), "--to", "hf", "--rules", str(tmp_path / "rules.json")]
    text = _ok(*args, "--select", "params", "--dtype", ".*=bfloat16", "--dry-run").stdout
    line = next(x for x in text.splitlines() if x.startswith("params.layers_0.mlp.down_proj"))
    assert line == (
        "params.layers_0.mlp.down_proj.kernel (64, 32) float32 -> "
        f"model.layers.0.mlp.down_proj.weight (32, 64) bfloat16 [transposed 1,0]  {out}/"
        "model.safetensors"
    )
    assert "would write 21 leaves" in text and not out.exists()
    data = json.loads(_ok(*args, "--max-shard-size", "20KB", "--dry-run", "--json").stdout)
    assert data["dry_run"] and not out.exists()
    rows = {row["source"]: row for row in data["mapping"]}
    assert rows["step"]["target"] == "step" and rows["step"]["shape"] == []  # 0-d stays 0-d
    row = rows["params.lm_head.kernel"]
    assert (row["source_shape"], row["shape"], row["target"]) == (
        [32, 100],
        [100, 32],
        "lm_head.weight",
    )
    n = len(data["files"]) - 1  # the shards and the index
    assert row["file"] in data["files"] and row["file"].endswith(f"-of-{n:05d}.safetensors")


def test_transpose_streams_in_column_blocks_along_whole_chunks(tmp_path, monkeypatch):
    """A leaf larger than BLOCK_BYTES is read in column blocks (never whole), each spanning
    whole stored chunks, each element read once; the output is the exact transpose."""
    value = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)
    ockpt.save_pytree(tmp_path / "ck", {"k": value}, chunk_byte_size=8192, layout="item")
    assert ockpt.open(tmp_path / "ck").metadata["k"].chunk_shape == (32, 64)
    monkeypatch.setattr(conv, "BLOCK_BYTES", 20_000)  # 78 columns of 256 B: 64, one chunk
    reads: list[tuple] = []  # the index of every read of the source
    real_read = OrbaxSource.read

    def read(self, leaf, index=...):
        reads.append(index)
        return real_read(self, leaf, index)

    monkeypatch.setattr(OrbaxSource, "read", read)
    conv.convert(
        str(tmp_path / "ck"), str(tmp_path / "t.npz"), rules=parse_rules(transpose=["^k$"]),
        progress=False,
    )  # fmt: skip
    assert reads == [(slice(None), slice(s, s + 64)) for s in range(0, 256, 64)]
    with np.load(tmp_path / "t.npz") as data:
        assert data["k"].shape == (256, 64) and np.array_equal(data["k"], value.T)


def test_transpose_and_cast_memory_stays_near_one_block(tmp_path, monkeypatch):
    """A 16 MiB leaf, blocks of 512 KiB: transposed (and cast) it peaks where the plain
    conversion does (about 2.5 MiB of numpy buffers, tracemalloc), far below the leaf."""
    import tracemalloc

    value = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    ockpt.save_pytree(tmp_path / "ck", {"k": value}, chunk_byte_size=512 << 10, layout="item")
    del value
    monkeypatch.setattr(conv, "BLOCK_BYTES", 512 << 10)
    peaks = {}
    for name, rules in [
        ("plain.npz", parse_rules()),
        ("t.npz", parse_rules(transpose=["k"])),
        ("t.safetensors", parse_rules(transpose=["k"], dtype=["k=bfloat16"])),
    ]:
        tracemalloc.start()
        conv.convert(str(tmp_path / "ck"), str(tmp_path / name), rules=rules, progress=False)
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert all(peak < 6 << 20 for peak in peaks.values()), peaks
    assert peaks["t.npz"] < peaks["plain.npz"] + (1 << 20), peaks


def test_transpose_rules_of_other_ranks(tmp_path):
    value = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    ockpt.save_pytree(tmp_path / "ck", {"conv": {"kernel": value}, "b": np.ones(3)})
    with pytest.raises(ValueError, match="2-D leaves only.*'kernel=2,1,0'"):
        conv.convert(
            str(tmp_path / "ck"), str(tmp_path / "a.npz"), rules=parse_rules(transpose=["kernel"])
        )
    rules = parse_rules(transpose=["kernel=1,2,0"], rename=["^conv\\.="])
    result = conv.convert(
        str(tmp_path / "ck"), str(tmp_path / "a.npz"), rules=rules, progress=False
    )
    assert result.leaves == 2
    with np.load(tmp_path / "a.npz") as data:
        assert np.array_equal(data["kernel"], value.transpose(1, 2, 0))
    with pytest.raises(ValueError, match="no permutation of the 3 axes"):
        conv.convert(
            str(tmp_path / "ck"),
            str(tmp_path / "b.npz"),
            rules=parse_rules(transpose=["kernel=1,0"]),
        )


def test_rule_parsing(tmp_path):
    rules = parse_rules(rename=["a\\=b=c", "^x(\\d)=y.\\1"], dtype=["w$=bfloat16"])
    assert rules.target_name("a=b") == "c" and rules.target_name("x7") == "y.7"
    assert rules.cast("w", np.dtype(np.float32)).name == "bfloat16"
    assert rules.cast("w", np.dtype(np.int32)) == np.int32  # integers keep their dtype
    for bad, match in [
        ({"rename": ["(="]}, "not a regular expression"),
        ({"rename": ["a=\\2"]}, "replacement"),
        ({"rename": ["no-equals"]}, "has no '='"),
        ({"dtype": ["x=float128"]}, "unknown dtype 'float128'"),
        ({"transpose": ["x=0,0"]}, "no permutation"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_rules(**bad)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rename": [["^p\\.", ""], "k$=w"], "transpose": ["k$"]}))
    rules = load_rules_file(str(path))
    assert rules.target_name("p.k") == "w" and rules.axes("p.k", (2, 3)) == (1, 0)
    path.write_text(json.dumps({"renames": []}))
    with pytest.raises(ValueError, match="expected an object with the lists"):
        load_rules_file(str(path))
    result = _cli("convert", "x", str(tmp_path / "y.safetensors"), "--dtype", "x=nope")
    assert result.returncode == 2 and "unknown dtype 'nope'" in result.stderr


def test_readme_hugging_face_commands_run_as_written(tmp_path):
    """The README's "Hugging Face folders" shell block, run by bash as written (its directory
    moved into tmp_path): the dry run writes nothing, the conversion writes HF-named shards
    whose tensors are the fixture's, renamed, transposed and cast as the rules say."""
    from safetensors import safe_open

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Hugging Face folders\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    script = block.replace("/tmp/ockpt-demo", str(tmp_path))
    result = subprocess.run(
        ["bash", "-euc", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "layer_0.kernel (64, 64) float32 -> model.layers.0.weight (64, 64) float32 " in (
        result.stdout
    )
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    src = ockpt.load_pytree(
        FIXTURES / "orbax-0.12.8" / "ocdbt_target_data_file_size" / "checkpoint"
    )
    for i in range(4):
        for leaf, name in [("kernel", "weight"), ("bias", "bias"), ("embedding", "embedding")]:
            target = f"model.layers.{i}.{name}"
            with safe_open(str(tmp_path / "hf" / index["weight_map"][target]), "pt") as f:
                got = f.get_tensor(target)
            want = np.asarray(src[f"layer_{i}"][leaf])
            want = want.T if leaf == "kernel" else want
            assert got.dtype == torch.bfloat16
            assert torch.equal(got, torch.from_numpy(np.ascontiguousarray(want)).to(torch.bfloat16))
