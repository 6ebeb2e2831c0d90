"""Every checkpointable (spec/checkpointables.md): `ockpt.load_checkpointables` and the commands
on the golden fixtures that hold one item of every handler Orbax 0.12.8 ships
(`checkpointables_all`, `v1_checkpointables_all`, `v1_training`), compared with each record and
with Orbax's own restore of the same directory."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _record
import numpy as np
import pytest

import ockpt
from ockpt import _jax, cli, limits
from ockpt import checkpointables as ckpt
from ockpt.documents._json import parse_json
from ockpt.errors import (
    DocumentError,
    FormatError,
    MissingDataError,
    NotACheckpointError,
    TargetError,
    UnsupportedError,
)
from ockpt.layout import Kind, detect, resolve
from ockpt.random_keys import RandomKey
from tests.support import FIXTURES, flat_leaves

CASES = FIXTURES / "orbax-0.12.8"
ALL = CASES / "checkpointables_all"
V1_ALL = CASES / "v1_checkpointables_all"
TRAINING = CASES / "v1_training"
READABLE = [
    "state",
    "tree",
    "meta",
    "nan_json",
    "array",
    "array_np",
    "array_scalar",
    "key",
    "raw_key",
    "np_key",
    "np_gen",
]


def _json_values(case: Path) -> dict:
    record = _record.load_expected(case)
    texts = {rel: json.loads(text) for rel, text in record.get("json_texts", {}).items()}
    return {**record["json_items"], **texts}


def _same_json(a, b) -> bool:
    """Equal JSON values, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _assert_tree(got, node: dict, case: Path) -> None:
    """`got` (as ockpt loads it) holds the record node's structure and values."""
    expected = _record.decode_tree(node, case)
    want = dict(flat_leaves(expected))
    have = dict(flat_leaves(got))
    assert sorted(have) == sorted(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert np.asarray(have[key]).dtype == value.dtype, key
            assert np.array_equal(np.asarray(have[key]), value, equal_nan=True), key
        elif isinstance(value, str):
            assert have[key] == value, key
        else:
            assert np.asarray(have[key]).item() == value, key


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------------------------
# load_checkpointables on the fixtures, against the records


def test_every_handler_of_a_manager_step_against_the_record():
    import jax

    record = _record.load_expected(ALL)
    got = ockpt.load_checkpointables(ALL / "checkpoint", READABLE)
    assert set(got) == set(READABLE)
    for rel, node in record["items"].items():
        _assert_tree(got[rel.split("/", 1)[1]], node, ALL)
    for rel, value in _json_values(ALL).items():
        assert _same_json(got[rel.split("/", 1)[1]], value), rel
    assert math.isnan(got["nan_json"]["loss"]) and got["nan_json"]["ninf"] == -math.inf
    parts = record["checkpointables"]
    for name in ("array", "array_np", "array_scalar"):  # ArrayCheckpointHandler: the leaf itself
        want = _record.decode_tree(parts[f"0/{name}"]["value"], ALL)
        assert np.asarray(got[name]).dtype == np.asarray(want).dtype, name
        assert np.array_equal(np.asarray(got[name]), np.asarray(want)), name
    assert isinstance(got["array_scalar"], np.float32)
    key = parts["0/key"]  # typed: a typed key array, jax being loaded here
    assert jax.dtypes.issubdtype(got["key"].dtype, jax.dtypes.prng_key)
    assert str(jax.random.key_impl(got["key"])) == key["impl"] == "threefry2x32"
    data = _record.decode_tree(key["key_data"], ALL)
    assert np.array_equal(np.asarray(jax.random.key_data(got["key"])), data)
    raw = _record.decode_tree(parts["0/raw_key"]["key_data"], ALL)  # raw: the uint32 data
    assert got["raw_key"].dtype == np.uint32 and np.array_equal(got["raw_key"], raw)


def test_numpy_random_states_restore_the_generators():
    got = ockpt.load_checkpointables(ALL / "checkpoint", ["np_key", "np_gen"])
    legacy = got["np_key"]  # the tuple of np.random.get_state(), Python scalars
    assert isinstance(legacy, tuple) and len(legacy) == 5 and legacy[0] == "MT19937"
    assert [type(x) for x in legacy[2:]] == [int, int, float]
    state = np.random.RandomState()
    state.set_state(legacy)
    assert state.random() == np.random.RandomState(1215).random()
    gen = np.random.Generator(np.random.MT19937())
    gen.bit_generator.state = got["np_gen"]  # the dict of bit_generator.state
    assert got["np_gen"]["bit_generator"] == "MT19937"
    assert gen.random() == np.random.Generator(np.random.MT19937(1215)).random()
    record = _record.load_expected(ALL)["checkpointables"]
    _assert_tree(got["np_key"], record["0/np_key"]["state"], ALL)
    _assert_tree(got["np_gen"], record["0/np_gen"]["state"], ALL)


def test_a_typed_key_without_jax_is_a_random_key():
    code = (
        "import sys, ockpt; from ockpt.random_keys import RandomKey\n"
        f"got = ockpt.load_checkpointables({str(ALL / 'checkpoint')!r}, ['key', 'raw_key'])\n"
        "assert isinstance(got['key'], RandomKey), got\n"
        "assert got['key'].impl == 'threefry2x32' and got['key'].data.tolist() == [0, 42]\n"
        "assert got['raw_key'].tolist() == [0, 7]\n"
        "assert 'jax' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


def test_proto_items_are_refused_by_name():
    """HANDLER-004: a protobuf message needs its type; the error names item and handler."""
    for path, handler in (
        (ALL / "checkpoint", "ProtoCheckpointHandler"),
        (V1_ALL / "checkpoint", "ProtoHandler"),
    ):
        for asked in (None, ["proto"]):
            with pytest.raises(UnsupportedError) as e:
                ockpt.load_checkpointables(path, asked)
            assert e.value.rule == "HANDLER-004" and e.value.file.endswith("/proto")
            assert "'proto'" in e.value.message and handler in e.value.message
    text = _record.load_expected(ALL)["checkpointables"]["0/proto"]["text"]
    assert (ALL / "checkpoint/0/proto/proto.pbtxt").read_text() == text


def test_v1_json_checkpointables_and_targets():
    got = ockpt.load_checkpointables(V1_ALL / "checkpoint", ["state", "config", "notes"])
    for name, value in _json_values(V1_ALL).items():
        assert _same_json(got[name], value), name
    assert got["notes"] == ["first", 2, None, True] and math.isnan(got["config"]["loss"])
    _assert_tree(got["state"], _record.load_expected(V1_ALL)["items"]["state"], V1_ALL)
    # a target applies to a pytree item; a JSON item takes none
    b = got["state"]["params"]["b"]
    part = ockpt.load_checkpointables(
        V1_ALL / "checkpoint",
        {"state": {"params": {"b": np.zeros(b.shape, np.float64)}}, "notes": None},
        partial=True,
    )
    assert part["state"]["params"]["b"].dtype == np.float64 and part["notes"] == got["notes"]
    with pytest.raises(ockpt.TargetError) as e:
        ockpt.load_checkpointables(V1_ALL / "checkpoint", {"notes": []})
    assert e.value.rule is None and e.value.file == str(V1_ALL / "checkpoint" / "notes")
    assert "only pytree items take a target" in e.value.message
    arr = ockpt.load_checkpointables(ALL / "checkpoint", {"array_np": np.zeros((2, 3), np.int32)})
    assert arr["array_np"].dtype == np.int32 and arr["array_np"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_v1_training_steps_and_metrics():
    record = _record.load_expected(TRAINING)
    latest = ockpt.load_checkpointables(TRAINING / "checkpoint")
    assert set(latest) == {"state", "metrics"}
    assert latest["metrics"] == record["json_items"]["1/metrics"]
    first = ockpt.load_checkpointables(TRAINING / "checkpoint", step=0)
    assert first["metrics"] == record["json_items"]["0/metrics"]
    _assert_tree(first["state"], record["items"]["0/state"], TRAINING)
    assert detect(TRAINING / "checkpoint/0/metrics").kind is Kind.JSON_ITEM


def test_an_item_given_directly_and_unknown_names():
    step = ALL / "checkpoint" / "0"
    assert ockpt.load_checkpointables(step / "meta") == {"meta": _json_values(ALL)["0/meta"]}
    assert ockpt.load_checkpointables(step / "raw_key")["raw_key"].tolist() == [0, 7]
    with pytest.raises(ockpt.NotACheckpointError) as e:
        ockpt.load_checkpointables(step, ["nope"])
    assert e.value.rule == "LOAD-052" and "'nope'" in e.value.message
    # the manager's JSON item through the manager API reads the same file the same way
    assert (
        ockpt.CheckpointManager(ALL / "checkpoint").restore(0, item="meta")
        == (_json_values(ALL)["0/meta"])
    )


def test_every_handler_through_a_url():
    """The same items from a kvstore URL (a memory:// copy), listed and read through kv."""
    ts = pytest.importorskip("tensorstore")
    ctx = ts.Context()
    src = ts.KvStore.open({"driver": "file", "path": str(ALL / "checkpoint") + "/"}).result()
    dst = ts.KvStore.open("memory://all/", context=ctx).result()
    for key in src.list().result():
        dst.write(key, src.read(key).result().value).result()
    names = ["meta", "nan_json", "array_np", "raw_key", "np_key", "tree"]
    remote = ockpt.load_checkpointables("memory://all/", names, context=ctx)
    local = ockpt.load_checkpointables(ALL / "checkpoint", names)
    for name in ("meta", "nan_json"):
        assert _same_json(remote[name], local[name]), name
    assert np.array_equal(remote["array_np"], local["array_np"])
    assert remote["raw_key"].tolist() == [0, 7] and remote["np_key"][2:] == local["np_key"][2:]
    assert remote["tree"]["s"] == "text"


def test_resolve_widens_to_any_item_or_the_checkpoint():
    root = ALL / "checkpoint"
    with pytest.raises(ockpt.NotACheckpointError) as e:
        resolve(root, item="meta")
    assert e.value.rule == "LOAD-050"
    assert resolve(root, item="meta", what="item").target.kind is Kind.JSON_ITEM
    assert resolve(root, item="key", what="item").target.kind is Kind.RANDOM_KEY_ITEM
    assert resolve(root, what="checkpoint").target.kind is Kind.STEP
    assert resolve(V1_ALL / "checkpoint", what="checkpoint").target.kind is Kind.V1_CHECKPOINT
    item = resolve(root / "0" / "proto", what="item").target
    assert item.kind is Kind.PROTO_ITEM and item.handler is None  # no step to name its handler
    handlers = {n: c.handler for n, c in detect(root / "0").checkpointables.items()}
    assert handlers["proto"].endswith(".ProtoCheckpointHandler")
    assert handlers["array"].endswith(".ArrayCheckpointHandler")


# ---------------------------------------------------------------------------------------------
# Orbax's own restore of the same directories


def _orbax_restore_all():
    ocp = pytest.importorskip("orbax.checkpoint")
    a = ocp.args
    names = {
        "state": a.StandardRestore(),
        "tree": a.PyTreeRestore(),
        "meta": a.JsonRestore(),
        "nan_json": a.JsonRestore(),
        "array": a.ArrayRestore(),
        "array_np": a.ArrayRestore(),
        "array_scalar": a.ArrayRestore(),
        "key": a.JaxRandomKeyRestore(),
        "raw_key": a.JaxRandomKeyRestore(),
        "np_key": a.NumpyRandomKeyRestore(),
        "np_gen": a.NumpyRandomKeyRestore(),
    }
    with ocp.CheckpointManager(ALL / "checkpoint", item_names=tuple(names)) as mngr:
        return mngr.restore(0, args=a.Composite(**names))


def _same_values(ours, theirs, where: str) -> None:
    import jax

    if isinstance(ours, dict):
        assert set(ours) == set(theirs), where
        for k in ours:
            _same_values(ours[k], theirs[k], f"{where}/{k}")
    elif isinstance(ours, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _same_values(a, b, f"{where}/{i}")
    elif isinstance(ours, str) or ours is None:
        assert ours == theirs, where
    elif isinstance(ours, float) and math.isnan(ours):
        assert math.isnan(theirs), where
    elif isinstance(theirs, (bool, int, float)):  # Orbax gives scalars as Python scalars
        assert np.asarray(ours).item() == theirs, where
    elif hasattr(ours, "dtype") and jax.dtypes.issubdtype(ours.dtype, jax.dtypes.prng_key):
        assert jax.random.key_impl(ours) == jax.random.key_impl(theirs), where
        assert np.array_equal(jax.random.key_data(ours), jax.random.key_data(theirs)), where
    else:
        assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes(), where


def test_matches_orbax_restore_of_every_handler():
    import jax  # noqa: F401 - typed keys come back as jax keys, as from Orbax

    theirs = _orbax_restore_all()
    ours = ockpt.load_checkpointables(ALL / "checkpoint", READABLE)
    for name in READABLE:
        _same_values(ours[name], theirs[name], name)
    assert type(ours["np_key"]) is type(theirs["np_key"]) is tuple


def test_matches_orbax_v1_load_checkpointables():
    ocp = pytest.importorskip("orbax.checkpoint")
    from google.protobuf import duration_pb2

    v1 = ocp.v1
    context = v1.Context()
    registry = v1.handlers.local_registry()
    for name in ("config", "notes"):
        registry.add(v1.handlers.JsonHandler, checkpointable_name=name)
    context.checkpointables.registry = registry
    with context:
        theirs = v1.load_checkpointables(
            V1_ALL / "checkpoint",
            {"state": None, "config": None, "notes": None, "proto": duration_pb2.Duration},
        )
    ours = ockpt.load_checkpointables(V1_ALL / "checkpoint", ["state", "config", "notes"])
    for name in ours:
        _same_values(ours[name], theirs[name], name)
    assert theirs["proto"] == duration_pb2.Duration(seconds=11, nanos=13)


# ---------------------------------------------------------------------------------------------
# Hostile and broken items: HANDLER-001..005


def _copy_step(tmp_path: Path) -> Path:
    step = tmp_path / "0"
    shutil.copytree(ALL / "checkpoint" / "0", step)
    return step


def _set_handler(step: Path, item: str, handler: str) -> None:
    meta_file = step / "_CHECKPOINT_METADATA"
    meta = json.loads(meta_file.read_text())
    meta["item_handlers"][item] = handler
    meta_file.write_text(json.dumps(meta))


def test_a_json_item_holds_one_file(tmp_path):
    step = _copy_step(tmp_path)
    (step / "meta" / "extra.json").write_text("{}")
    assert detect(step).checkpointables["meta"].kind is Kind.UNKNOWN_ITEM
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(step, ["meta"])
    assert e.value.rule == "HANDLER-001" and "JsonCheckpointHandler" in e.value.message
    report = ockpt.validate(step)
    assert any(f.rule == "HANDLER-001" for f in report.findings), report.format_text()


def test_json_item_values_are_strict_but_for_nan(tmp_path):
    step = _copy_step(tmp_path)
    (step / "meta" / "metadata").write_text('{"a": 1, "a": 2}')
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["meta"])
    assert e.value.rule == "JSON-002" and e.value.file == str(step / "meta" / "metadata")
    (step / "meta" / "metadata").write_text('{"a": ')
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["meta"])
    assert e.value.rule == "JSON-001"
    assert not ockpt.validate(step).ok
    assert math.isinf(parse_json(b"[Infinity]", file="x", constants=True)[0])
    with pytest.raises(DocumentError):
        parse_json(b"[NaN]", file="x")  # the format's own documents stay strict


def test_an_array_item_holds_one_leaf(tmp_path):
    step = _copy_step(tmp_path)
    _set_handler(step, "tree", "x.ArrayCheckpointHandler")
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(step, ["tree"])
    assert e.value.rule == "HANDLER-002"


def test_a_random_key_item_holds_both_parts(tmp_path):
    step = _copy_step(tmp_path)
    (step / "key" / "jax_random_key_metadata" / "metadata").write_text('{"typed": 1}')
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["key"])
    assert e.value.rule == "HANDLER-003" and e.value.pointer == "/typed"
    shutil.rmtree(step / "np_key" / "np_random_key_metadata")
    assert detect(step).checkpointables["np_key"].kind is Kind.UNKNOWN_ITEM
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(step, ["np_key"])
    assert e.value.rule == "HANDLER-003"


def test_a_typed_key_of_four_words_is_not_guessed(tmp_path):
    """HANDLER-005: key data ending in 4 is rbg or unsafe_rbg, which the item does not say."""
    item = tmp_path / "key"
    ockpt.save_pytree(
        item / "jax_random_key", {"checkpoint": np.arange(4, dtype=np.uint32)}, layout="item"
    )
    (item / "jax_random_key_metadata").mkdir()
    (item / "jax_random_key_metadata" / "metadata").write_text('{"typed": true}')
    assert detect(item).kind is Kind.RANDOM_KEY_ITEM
    with pytest.raises(UnsupportedError) as e:
        ockpt.load_checkpointables(item)
    assert e.value.rule == "HANDLER-005" and "rbg" in e.value.message
    (item / "jax_random_key_metadata" / "metadata").write_text('{"typed": false}')
    assert ockpt.load_checkpointables(item)["key"].tolist() == [0, 1, 2, 3]


def test_an_item_of_an_unread_handler_is_refused_by_name(tmp_path):
    root = tmp_path / "v1"
    shutil.copytree(V1_ALL / "checkpoint", root)
    (root / "counter").mkdir()
    (root / "counter" / "n.txt").write_text("5")
    _set_handler(root, "counter", "orbax.x.StatefulCheckpointableHandler")
    child = detect(root).checkpointables["counter"]
    assert child.kind is Kind.UNKNOWN_ITEM and child.handler.endswith("Handler")
    with pytest.raises(UnsupportedError) as e:
        ockpt.load_checkpointables(root, ["counter"])
    assert e.value.rule == "HANDLER-004" and "StatefulCheckpointableHandler" in e.value.message
    report = ockpt.validate(root)
    assert report.ok and not any(f.rule == "VAL-008" for f in report.findings)


def test_a_single_item_saved_alone_names_its_handler(tmp_path):
    """A `Checkpointer(JsonCheckpointHandler())` item: its own `_CHECKPOINT_METADATA` names
    the handler as a string; it is a JSON item, not a step of no items."""
    item = tmp_path / "alone"
    shutil.copytree(ALL / "checkpoint" / "0" / "meta", item)
    handler = "orbax.checkpoint._src.handlers.json_checkpoint_handler.JsonCheckpointHandler"
    (item / "_CHECKPOINT_METADATA").write_text(json.dumps({"item_handlers": handler}))
    layout = detect(item)
    assert layout.kind is Kind.JSON_ITEM and layout.handler == handler
    assert ockpt.load_checkpointables(item) == {"alone": _json_values(ALL)["0/meta"]}
    proto = tmp_path / "proto"
    proto.mkdir()
    (proto / "p.pbtxt").write_text("seconds: 1\n")
    (proto / "_CHECKPOINT_METADATA").write_text(
        json.dumps({"item_handlers": "x.ProtoCheckpointHandler"})
    )
    assert detect(proto).kind is Kind.PROTO_ITEM


# ---------------------------------------------------------------------------------------------
# The commands


def test_cat_prints_json_and_random_key_items():
    root = str(ALL / "checkpoint")
    code, out, err = _run("cat", root, "--item", "meta")
    assert code == 0, err
    assert json.loads(out) == _json_values(ALL)["0/meta"]
    code, out, err = _run("cat", root, "--item", "nan_json")
    assert code == 0 and '"loss": NaN' in out, err
    code, out, err = _run("cat", root, "--item", "key", "--json")
    assert code == 0, err
    assert json.loads(out)["values"] == {"random_key_impl": "threefry2x32", "key_data": [0, 42]}
    code, out, err = _run("cat", root, "--item", "proto")
    assert code == 1 and "[HANDLER-004]" in err and "ProtoCheckpointHandler" in err
    code, out, err = _run("cat", root, "--item", "meta", "name")
    assert code == 2 and "omit LEAF" in err
    code, out, err = _run("cat", root, "--item", "state")
    assert code == 2 and "name a leaf" in err
    code, out, err = _run("cat", root, "--item", "tree", "s")  # a leaf after the option
    assert code == 0 and out.strip() == "text", err


def test_inspect_ls_and_detect_show_every_item():
    root = str(ALL / "checkpoint")
    code, out, err = _run("inspect", root, "--item", "meta")
    assert code == 0, err
    assert "item meta: json_item (JsonCheckpointHandler)" in out
    assert '"name": "run"' in out
    code, out, err = _run("inspect", root, "--item", "proto", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["item_kind"] == "proto_item" and "value" not in report
    handlers = {i["name"]: i["handler"] for i in report["items"]}
    assert handlers["key"] == "JaxRandomKeyCheckpointHandler"
    assert handlers["array"] == "ArrayCheckpointHandler"
    code, out, err = _run("ls", root)
    assert code == 0, err
    assert "nan_json: json_item (JsonCheckpointHandler), committed" in out
    assert "np_key: random_key_item (NumpyRandomKeyCheckpointHandler), committed" in out
    assert "proto: proto_item (ProtoCheckpointHandler), committed" in out
    assert "array: pytree_item (ArrayCheckpointHandler, per_leaf_zarr), committed" in out
    code, out, err = _run("ls", "--json", str(V1_ALL / "checkpoint"))
    kinds = {c["name"]: (c["kind"], c.get("handler")) for c in json.loads(out)["children"]}
    assert kinds["config"] == ("json_item", "JsonHandler")
    assert kinds["proto"] == ("proto_item", "ProtoHandler")
    step = ALL / "checkpoint" / "0"
    code, out, err = _run("detect", str(step / "meta"), str(step / "key"), str(step / "proto"))
    assert code == 0, err
    assert f"{step / 'meta'}: json_item" in out and f"{step / 'key'}: random_key_item" in out
    assert f"{step / 'proto'}: proto_item" in out
    code, out, err = _run("detect", str(step))
    assert "handler: orbax.checkpoint._src.handlers.proto_checkpoint_handler." in out


def test_an_item_the_handlers_name_but_that_is_missing_is_refused():
    """LAYOUT-003: loading every item of a v1 checkpoint whose `item_handlers` names an item
    with no directory refuses, naming it, instead of returning the items present."""
    bad = (
        Path(__file__).resolve().parents[1] / "fixtures" / "bad" / "v1_missing_item" / "checkpoint"
    )
    with pytest.raises(ockpt.MissingDataError) as e:
        ockpt.load_checkpointables(bad)
    assert e.value.rule == "LAYOUT-003"


# --- checkpointables: load_checkpointables, _targets, load_item, _single_leaf, _only_key,
# read_json_item and _random_key (options passed through, item names, every refusal's rule,
# file and message, typed keys with and without jax) ---

_ALL = ALL / "checkpoint"
_V1_ALL = V1_ALL / "checkpoint"
_TRAINING = TRAINING / "checkpoint"


def _key_item(path: Path, tree: dict, typed: object = True) -> Path:
    """A JAX random-key item at `path` whose key data is the pytree `tree`."""
    ockpt.save_pytree(path / "jax_random_key", tree, layout="item")
    (path / "jax_random_key_metadata").mkdir()
    (path / "jax_random_key_metadata" / "metadata").write_text(json.dumps({"typed": typed}))
    return path


def test_load_checkpointables_defaults_load_whole_exact_and_unpadded() -> None:
    b = np.zeros(4, np.float32)
    with pytest.raises(TargetError):  # partial=False: the target must hold every leaf
        ockpt.load_checkpointables(_V1_ALL, {"state": {"params": {"b": b}}})
    with pytest.raises(TargetError):  # pad_or_truncate=False: shapes must match
        ockpt.load_checkpointables(
            _V1_ALL, {"state": {"params": {"b": np.zeros(6, np.float32)}}}, partial=True
        )
    with pytest.raises(TargetError):  # cast="exact": no narrowing
        ockpt.load_checkpointables(
            _V1_ALL, {"state": {"params": {"b": np.zeros(4, np.float16)}}}, partial=True
        )


def test_load_checkpointables_passes_cast_and_pad_or_truncate_to_each_item() -> None:
    want = ockpt.load_checkpointables(_V1_ALL, ["state"])["state"]["params"]["b"]
    got = ockpt.load_checkpointables(
        _V1_ALL,
        {"state": {"params": {"b": np.zeros(6, np.float16)}}},
        partial=True,
        cast="lossy",
        pad_or_truncate=True,
    )["state"]["params"]["b"]
    assert got.dtype == np.float16 and got.shape == (6,)
    assert np.array_equal(got[:4], want.astype(np.float16)) and not got[4:].any()


def test_load_item_defaults_load_whole_exact_and_unpadded() -> None:
    layout = detect(_V1_ALL).checkpointables["state"]
    whole = ckpt.load_item(layout, name="state")
    assert sorted(whole) == sorted(ockpt.load_pytree(_V1_ALL / "state"))
    with pytest.raises(TargetError):
        ckpt.load_item(layout, {"params": {"b": np.zeros(4, np.float32)}}, name="state")
    with pytest.raises(TargetError):
        ckpt.load_item(
            layout, {"params": {"b": np.zeros(6, np.float32)}}, name="state", partial=True
        )
    with pytest.raises(TargetError):
        ckpt.load_item(
            layout, {"params": {"b": np.zeros(4, np.float16)}}, name="state", partial=True
        )


def test_load_checkpointables_passes_context_and_backend_to_every_read(monkeypatch) -> None:
    """Each read of each item gets the caller's `context` and `backend` (a tensorstore
    context is recorded here and dropped, so that the python backend reads)."""
    context = object()
    calls: list[tuple[str, object, object]] = []

    def spy(name, real):
        def wrapped(*args, **kw):
            calls.append((name, kw.get("context", "missing"), kw.get("backend", "missing")))
            if kw.get("context") is context:
                kw["context"] = None
            return real(*args, **kw)

        return wrapped

    for name in ("resolve", "load_pytree", "pytree_metadata"):
        monkeypatch.setattr(ckpt, name, spy(name, getattr(ckpt, name)))
    got = ockpt.load_checkpointables(
        _ALL, ["array", "key", "state"], context=context, backend="python"
    )
    assert sorted(got) == ["array", "key", "state"]
    target = ockpt.load_checkpointables(
        _ALL, {"array": np.zeros((8, 4), np.float32)}, context=context, backend="python"
    )
    assert target["array"].shape == (8, 4)
    names = [c[0] for c in calls]
    assert names.count("resolve") == 2 and "pytree_metadata" in names
    assert names.count("load_pytree") == 4  # array, key data, state; array with a target
    for name, ctx, backend in calls:
        assert ctx is context, name
        if name != "resolve":
            assert backend == "python", name


def test_an_item_given_directly_is_named_after_its_directory(tmp_path) -> None:
    meta = _ALL / "0" / "meta"
    value = ockpt.load_checkpointables(meta)["meta"]
    assert ockpt.load_checkpointables(str(meta) + "/") == {"meta": value}
    odd = tmp_path / "meta X/"  # a name ending in letters of the separator's neighbours
    shutil.copytree(meta, tmp_path / "meta X")
    assert ockpt.load_checkpointables(str(odd)) == {"meta X": value}
    shutil.copytree(meta, tmp_path / "notesX")
    assert ockpt.load_checkpointables(tmp_path / "notesX") == {"notesX": value}


def test_load_checkpointables_refuses_a_missing_named_item_whole() -> None:
    bad = FIXTURES / "bad" / "v1_missing_item" / "checkpoint"
    (problem,) = [p for p in detect(bad).problems if p.rule == "LAYOUT-003"]
    with pytest.raises(MissingDataError) as e:
        ockpt.load_checkpointables(bad)
    assert e.value.rule == "LAYOUT-003"
    assert e.value.file == str(bad)
    assert e.value.message == problem.message


def test_load_checkpointables_refuses_a_str_and_unknown_names() -> None:
    with pytest.raises(TypeError) as e:
        ockpt.load_checkpointables(_ALL, "meta")
    assert str(e.value) == ("checkpointables must be a collection of names or a mapping, not a str")
    with pytest.raises(NotACheckpointError) as e:
        ockpt.load_checkpointables(_ALL, ["zz", "meta", "nope"])
    assert e.value.rule == "LOAD-052"
    assert e.value.file == str(_ALL / "0")
    items = sorted(detect(_ALL / "0").checkpointables)
    assert e.value.message == f"no item 'nope', 'zz'; items: {items}"


def test_every_item_by_default_leaves_stray_directories_aside(tmp_path) -> None:
    step = tmp_path / "1"
    shutil.copytree(_TRAINING / "1", step)
    (step / "stray").mkdir()
    (step / "stray" / "a").write_text("x")
    (step / "stray" / "b").write_text("y")
    assert sorted(ockpt.load_checkpointables(step)) == ["metrics", "state"]
    (step / "named").mkdir()  # an item the handlers name, but not what its handler writes
    (step / "named" / "a.json").write_text("{}")
    (step / "named" / "sub").mkdir()
    meta_file = step / "_CHECKPOINT_METADATA"
    meta = json.loads(meta_file.read_text())
    meta["item_handlers"]["named"] = "x.JsonCheckpointHandler"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(step)
    assert e.value.rule == "HANDLER-001" and e.value.file == str(step / "named")


def test_load_item_refusals_name_rule_file_and_item(tmp_path) -> None:
    with pytest.raises(TargetError) as e:
        ockpt.load_checkpointables(_V1_ALL, {"notes": []})
    assert e.value.file == str(_V1_ALL / "notes")
    assert e.value.message == "item 'notes' is a json_item: only pytree items take a target"
    step = _copy_step(tmp_path)
    for name in ("bad_json", "pytree_named", "stray", "stateful"):
        (step / name).mkdir()
        (step / name / "a").write_text("x")
        (step / name / "b").write_text("y")
    _set_handler(step, "bad_json", "x.JsonCheckpointHandler")
    _set_handler(step, "pytree_named", "x.PyTreeCheckpointHandler")
    _set_handler(step, "stateful", "x.StatefulCheckpointableHandler")
    layout = detect(step).checkpointables
    cases = {
        "bad_json": (FormatError, "HANDLER-001", "item 'bad_json': {}"),
        "pytree_named": (
            NotACheckpointError,
            "LOAD-050",
            "item 'pytree_named' is not a pytree item: {}",
        ),
        "stray": (NotACheckpointError, "LOAD-050", "item 'stray' is no item ockpt can type: {}"),
        "stateful": (UnsupportedError, "HANDLER-004", "item 'stateful': {}"),
    }
    for name, (cls, rule, message) in cases.items():
        with pytest.raises(cls) as e:
            ockpt.load_checkpointables(step, [name])
        assert type(e.value) is cls, name
        assert e.value.rule == rule, name
        assert e.value.file == str(step / name), name
        assert e.value.message == message.format(layout[name].reason), name
    assert layout["stateful"].reason == (
        "written by StatefulCheckpointableHandler, whose files ockpt does not read"
    )


def test_a_proto_item_is_refused_naming_its_writer_or_none(tmp_path) -> None:
    text = (
        "is a protobuf message in text format, which ockpt does not read: it needs the message "
        "type (parse the file with google.protobuf.text_format)"
    )
    with pytest.raises(UnsupportedError) as e:
        ockpt.load_checkpointables(_ALL, ["proto"])
    assert e.value.rule == "HANDLER-004" and e.value.file == str(_ALL / "0" / "proto")
    assert e.value.message == f"item 'proto' (written by ProtoCheckpointHandler) {text}"
    proto = detect(_ALL / "0").checkpointables["proto"]
    assert proto.kind is Kind.PROTO_ITEM
    with pytest.raises(UnsupportedError) as e:
        ckpt.load_item(dataclasses.replace(proto, handler=None), name="p")
    assert e.value.message == f"item 'p' (no handler named) {text}"


def test_an_array_item_must_hold_one_leaf(tmp_path) -> None:
    step = _copy_step(tmp_path)
    _set_handler(step, "tree", "x.ArrayCheckpointHandler")
    for target in (None, {"tree": np.zeros(3)}):
        with pytest.raises(FormatError) as e:
            ockpt.load_checkpointables(step, ["tree"] if target is None else target)
        assert e.value.rule == "HANDLER-002" and e.value.file == str(step / "tree")
        assert e.value.message == (
            "an item of one array saved alone must hold exactly one leaf, found 2 top-level keys"
        )
    item = tmp_path / "listed"
    ockpt.save_pytree(item, [np.arange(3)], layout="item")
    (item / "_CHECKPOINT_METADATA").write_text(
        json.dumps({"item_handlers": "x.ArrayCheckpointHandler"})
    )
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(item)
    assert e.value.rule == "HANDLER-002" and e.value.file == str(item)
    assert e.value.message.endswith("must hold exactly one leaf, found list")


def test_an_array_item_with_a_target_takes_the_load_options() -> None:
    want = ockpt.load_checkpointables(_ALL, ["array"])["array"]
    got = ockpt.load_checkpointables(
        _ALL, {"array": np.zeros((8, 5), np.float16)}, cast="lossy", pad_or_truncate=True
    )["array"]
    assert got.dtype == np.float16 and got.shape == (8, 5)
    assert np.array_equal(got[:, :4], want.astype(np.float16)) and not got[:, 4].any()


def test_read_json_item_refuses_more_than_one_file(tmp_path) -> None:
    step = _copy_step(tmp_path)
    layout = detect(step).checkpointables["meta"]
    assert layout.kind is Kind.JSON_ITEM
    (step / "meta" / "sub").mkdir()
    with pytest.raises(FormatError) as e:
        ckpt.read_json_item(layout)
    assert e.value.rule == "HANDLER-001" and e.value.file == str(step / "meta")
    assert e.value.message == (
        "a JSON item must hold exactly one file besides commit_success.txt, found "
        "['metadata'] and directories ['sub']"
    )
    (step / "meta" / "sub").rmdir()
    (step / "meta" / "extra").write_text("{}")
    with pytest.raises(FormatError) as e:
        ckpt.read_json_item(layout)
    assert e.value.rule == "HANDLER-001"
    assert e.value.message == (
        "a JSON item must hold exactly one file besides commit_success.txt, found "
        "['extra', 'metadata']"
    )


def test_read_json_item_is_bounded_by_the_json_limit(tmp_path) -> None:
    step = _copy_step(tmp_path)
    layout = detect(step).checkpointables["meta"]
    size = (step / "meta" / "metadata").stat().st_size
    with limits.applied(dataclasses.replace(limits.LIMITS, max_json_bytes=size)):
        assert ckpt.read_json_item(layout) == json.loads((step / "meta" / "metadata").read_text())
    with limits.applied(dataclasses.replace(limits.LIMITS, max_json_bytes=size - 1)):
        with pytest.raises(FormatError) as e:
            ckpt.read_json_item(layout)
    assert e.value.rule == "JSON-003"
    assert str(step / "meta" / "metadata") in str(e.value)


def test_read_json_item_of_a_file_removed_meanwhile(tmp_path, monkeypatch) -> None:
    step = _copy_step(tmp_path)
    layout = detect(step).checkpointables["meta"]
    store = type(layout.location)
    real = store.list_dir

    def list_then_remove(self, *args, **kw):
        listing = real(self, *args, **kw)
        (step / "meta" / "metadata").unlink()
        return listing

    monkeypatch.setattr(store, "list_dir", list_then_remove)
    with pytest.raises(NotACheckpointError) as e:
        ckpt.read_json_item(layout)
    assert e.value.rule == "LOAD-055"
    assert e.value.file == str(step / "meta" / "metadata")
    assert e.value.message == "removed meanwhile"


def test_a_random_key_item_needs_both_parts_of_their_kinds() -> None:
    key = detect(_ALL / "0").checkpointables["key"]
    data = key.checkpointables["jax_random_key"]
    meta = key.checkpointables["jax_random_key_metadata"]
    assert (data.kind, meta.kind) == (Kind.PYTREE_ITEM, Kind.JSON_ITEM)
    for parts in (
        {"jax_random_key_metadata": meta},
        {"jax_random_key": data},
        {"jax_random_key": meta, "jax_random_key_metadata": meta},
        {"jax_random_key": data, "jax_random_key_metadata": data},
    ):
        with pytest.raises(FormatError) as e:
            ckpt.load_item(dataclasses.replace(key, checkpointables=parts), name="k")
        assert e.value.rule == "HANDLER-003" and e.value.file == str(_ALL / "0" / "key")
        kind = "jax" if "jax_random_key" in parts else "np"  # no key data: a numpy item's
        assert e.value.message == (
            f"item 'k': a random-key item holds a pytree item {kind}_random_key/ and a JSON "
            f"item {kind}_random_key_metadata/"
        )


def test_a_random_key_items_metadata_must_say_typed_or_legacy(tmp_path) -> None:
    step = _copy_step(tmp_path)
    (step / "key" / "jax_random_key_metadata" / "metadata").write_text('{"typed": 1}')
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["key"])
    assert e.value.rule == "HANDLER-003" and e.value.pointer == "/typed"
    assert e.value.file == str(step / "key" / "jax_random_key_metadata")
    assert e.value.message == "must be an object with the boolean 'typed'"
    (step / "np_key" / "np_random_key_metadata" / "metadata").write_text("[]")
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["np_key"])
    assert e.value.pointer == "/legacy"
    assert e.value.message == "must be an object with the boolean 'legacy'"


def test_a_random_key_items_data_holds_one_leaf(tmp_path) -> None:
    item = _key_item(tmp_path / "key", {"a": np.zeros(2, np.uint32), "b": np.zeros(2, np.uint32)})
    with pytest.raises(FormatError) as e:
        ockpt.load_checkpointables(item)
    assert e.value.rule == "HANDLER-002" and e.value.file == str(item / "jax_random_key")


def test_typed_key_data_that_does_not_tell_its_implementation(tmp_path) -> None:
    for name, data in (("four", np.arange(4, dtype=np.uint32)), ("scalar", np.uint32(5))):
        item = _key_item(tmp_path / name, {"checkpoint": data})
        with pytest.raises(UnsupportedError) as e:
            ockpt.load_checkpointables(item)
        assert e.value.rule == "HANDLER-005" and e.value.file == str(item), name
        shape = list(np.asarray(data).shape)
        assert e.value.message == (
            f"item {name!r}: typed key data uint32 {shape} does not tell its implementation "
            "(a last dimension of 4 is rbg or unsafe_rbg, which JaxRandomKeyCheckpointHandler "
            "does not record); load the raw data with "
            f"load_pytree({str(item / 'jax_random_key')!r}) and wrap it with "
            "jax.random.wrap_key_data"
        ), name


def test_a_typed_key_without_jax_loaded_is_a_random_key(monkeypatch) -> None:
    monkeypatch.setattr(_jax, "jax_loaded", lambda: False)
    got = ockpt.load_checkpointables(_ALL, ["key", "raw_key"])
    assert type(got["key"]) is RandomKey
    assert got["key"].impl == "threefry2x32" and got["key"].data.tolist() == [0, 42]
    assert got["key"].data.dtype == np.uint32
    assert type(got["raw_key"]) is np.ndarray and got["raw_key"].tolist() == [0, 7]


def test_a_typed_key_takes_the_implementation_its_data_tells(tmp_path) -> None:
    jax = pytest.importorskip("jax")
    default = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        got = ockpt.load_checkpointables(_ALL, ["key"])["key"]
    finally:
        jax.config.update("jax_default_prng_impl", default)
    assert str(jax.random.key_impl(got)) == "threefry2x32"
    assert np.asarray(jax.random.key_data(got)).tolist() == [0, 42]


def test_a_typed_key_recorded_in_array_metadatas(tmp_path, monkeypatch) -> None:
    """Key data whose array_metadatas record the implementation loads as a typed key already:
    its data is taken from it (jax loaded, or not)."""
    jax = pytest.importorskip("jax")
    item = _key_item(tmp_path / "key", {"checkpoint": jax.random.key(3)})
    want = np.asarray(jax.random.key_data(jax.random.key(3)))
    got = ockpt.load_checkpointables(item)["key"]
    assert str(jax.random.key_impl(got)) == "threefry2x32"
    assert np.array_equal(np.asarray(jax.random.key_data(got)), want)
    (item / "jax_random_key_metadata" / "metadata").write_text('{"typed": false}')
    raw = ockpt.load_checkpointables(item)["key"]
    assert type(raw) is np.ndarray and raw.dtype == np.uint32 and np.array_equal(raw, want)
    monkeypatch.setattr(_jax, "jax_loaded", lambda: False)
    raw = ockpt.load_checkpointables(item)["key"]
    assert type(raw) is np.ndarray and raw.dtype == np.uint32 and np.array_equal(raw, want)
    (item / "jax_random_key_metadata" / "metadata").write_text('{"typed": true}')
    key = ockpt.load_checkpointables(item)["key"]
    assert type(key) is RandomKey and key.impl == "threefry2x32"
    assert np.array_equal(key.data, want)
