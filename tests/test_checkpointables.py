"""Every checkpointable (spec/checkpointables.md): `ockpt.load_checkpointables` and the commands
on the golden fixtures that hold one item of every handler Orbax 0.12.8 ships
(`checkpointables_all`, `v1_checkpointables_all`, `v1_training`), compared with each record and
with Orbax's own restore of the same directory."""

from __future__ import annotations

import contextlib
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
from ockpt import cli
from ockpt.documents._json import parse_json
from ockpt.errors import DocumentError, FormatError, UnsupportedError
from ockpt.layout import Kind, detect, resolve
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
            assert e.value.rule == "HANDLER-004"
            assert "'proto'" in str(e.value) and handler in str(e.value)
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
    with pytest.raises(ockpt.TargetError, match="only pytree items take a target"):
        ockpt.load_checkpointables(V1_ALL / "checkpoint", {"notes": []})
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
    assert e.value.rule == "LOAD-052" and "'nope'" in str(e.value)
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
    assert e.value.rule == "HANDLER-001" and "JsonCheckpointHandler" in str(e.value)
    report = ockpt.validate(step)
    assert any(f.rule == "HANDLER-001" for f in report.findings), report.format_text()


def test_json_item_values_are_strict_but_for_nan(tmp_path):
    step = _copy_step(tmp_path)
    (step / "meta" / "metadata").write_text('{"a": 1, "a": 2}')
    with pytest.raises(DocumentError) as e:
        ockpt.load_checkpointables(step, ["meta"])
    assert e.value.rule == "JSON-002" and str(step / "meta" / "metadata") in str(e.value)
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
    assert e.value.rule == "HANDLER-005" and "rbg" in str(e.value)
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
    assert e.value.rule == "HANDLER-004" and "StatefulCheckpointableHandler" in str(e.value)
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
