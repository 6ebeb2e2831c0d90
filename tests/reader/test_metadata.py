"""`ockpt.reader.metadata`: `pytree_metadata` on every item of every golden case, each leaf's
`LeafMetadata` compared with the case's record and with what the item's own documents say."""

from __future__ import annotations

import json
import shutil

import msgpack
import numpy as np
import pytest

import ockpt
import ockpt.limits
from ockpt.documents.sharding import ShardingDocument
from ockpt.errors import FormatError
from ockpt.reader import metadata
from ockpt.reader.item import OpenedItem
from ockpt.reader.metadata import LeafMetadata
from tests.support import FIXTURES, record_key_impl
from tests.support.errors import assert_error
from tests.support.expected import ITEMS, expected_items, load_kwargs


def _recorded_leaves(tree, path=()):  # type: ignore[no-untyped-def]
    """(key texts, value) of every leaf of a record: NamedTuples by field, empty containers and
    None left out (they are no `LeafMetadata`)."""
    if type(tree).__name__ in ("PrngKey", "RandomKey"):
        yield path, tree
    elif isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        yield from _recorded_leaves(tree._asdict(), path)
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _recorded_leaves(v, (*path, str(k)))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _recorded_leaves(v, (*path, str(i)))
    elif tree is not None:
        yield path, tree


def _metadata_leaves(tree):  # type: ignore[no-untyped-def]
    if isinstance(tree, LeafMetadata):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _metadata_leaves(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _metadata_leaves(v)


@pytest.mark.parametrize("case,rel", ITEMS)
def test_every_leaf_of_every_golden_item(case, rel):
    kw = load_kwargs(case, rel)
    got = list(_metadata_leaves(ockpt.pytree_metadata(case / "checkpoint", backend="python", **kw)))
    recorded = dict(_recorded_leaves(expected_items(case)[rel]))
    assert sorted(m.path for m in got) == sorted(recorded), "the leaves are the record's"
    opened = {"step": None, "item": None, "context": None, **kw}
    with OpenedItem(case / "checkpoint", backend="python", **opened) as item:
        shardings = item.shardings()
        written = item.array_metadatas()
        for m in got:
            leaf = item.leaves[m.param_name]
            value = recorded[m.path]
            assert (m.path, m.value_type) == (leaf.path, leaf.value_type), m.param_name
            if leaf.source == "array":
                a = item.array(m.param_name)
                assert (m.shape, m.dtype, m.storage_dtype) == (a.shape, a.dtype, a.dtype)
                assert (m.chunk_shape, m.nbytes) == (a.chunk_shape, a.nbytes)
                assert m.sharding == shardings.get(m.param_name)
                assert m.write_shape == getattr(written.get(m.param_name), "write_shape", None)
                if type(value).__name__ in ("PrngKey", "RandomKey"):
                    data = np.asarray(value.data)
                    assert m.random_key_impl == value.impl
                    assert m.key_shape == data.shape[:-1]
                    assert (m.shape, m.dtype) == (data.shape, data.dtype)
                else:
                    assert (m.random_key_impl, m.key_shape) == (None, None)
                    data = np.asarray(value)
                    assert m.shape == data.shape and m.nbytes == data.nbytes, m.param_name
            elif leaf.source == "string":
                assert isinstance(value, str)
                want = ((), None, None, None, len(value.encode()), None, None)
                assert (
                    m.shape,
                    m.dtype,
                    m.storage_dtype,
                    m.chunk_shape,
                    m.nbytes,
                    m.sharding,
                    m.write_shape,
                ) == want
            elif isinstance(value, (str, bytes)):  # an inline text of the msgpack file
                size = len(value.encode()) if isinstance(value, str) else len(value)
                assert (m.shape, m.dtype, m.storage_dtype, m.chunk_shape, m.nbytes) == (
                    (),
                    None,
                    None,
                    None,
                    size,
                )
            else:  # an inline value of the msgpack file
                data = np.asarray(value)
                assert (m.shape, m.dtype, m.storage_dtype, m.chunk_shape) == (
                    data.shape,
                    data.dtype,
                    None,
                    None,
                )
                assert m.nbytes == data.nbytes and m.write_shape is None
                assert m.sharding == shardings.get(m.param_name)


@pytest.mark.parametrize("backend", ["python", "tensorstore"])
@pytest.mark.parametrize("name", ["random_keys", "sharded", "no_ocdbt", "zarr3"])
def test_both_engines_give_the_same_metadata(name, backend):
    """Each engine opens the arrays its own way (one walk, a quick store, a bulk open): the
    `LeafMetadata` are the same."""
    case = FIXTURES / "orbax-0.12.8" / name / "checkpoint"
    if backend == "tensorstore":
        pytest.importorskip("tensorstore")
    want = ockpt.pytree_metadata(case, backend="python")
    assert list(_metadata_leaves(ockpt.pytree_metadata(case, backend=backend))) == list(
        _metadata_leaves(want)
    )


def test_a_key_whose_data_is_not_its_implementations_names_the_array(tmp_path):
    """ARRM-002: a typed key recorded as `rbg` (key data of 4 words) whose stored array ends in
    2 words names the array's file and the leaf."""
    item = tmp_path / "item"
    shutil.copytree(FIXTURES / "orbax-0.12.8" / "random_keys" / "checkpoint", item)
    record_key_impl(item, "rngs.grid", "rbg")
    with pytest.raises(FormatError) as e:
        ockpt.pytree_metadata(item, backend="python")
    assert_error(e, rule="ARRM-002", file=f"{item}/manifest.ocdbt", pointer="rngs.grid")


def test_the_limits_given_apply_to_the_arrays_opened(tmp_path):
    """`limits` reach the opening of each array, not only the item's documents."""
    case = FIXTURES / "orbax-0.12.8" / "no_ocdbt" / "checkpoint"
    tight = ockpt.limits.Limits(max_array_bytes=4)
    with pytest.raises(FormatError) as e:
        ockpt.pytree_metadata(case, backend="python", limits=tight)
    assert_error(e, rule="ZARR-005", file=f"{case}/a/.zarray", expected="<= 4 bytes", got=24)


def test_what_is_asked_reaches_the_item_opened(monkeypatch):
    """`step`, `item`, `context`, `backend` and `limits` are handed to the item opened."""
    seen = []

    class Recording(OpenedItem):
        def __init__(self, path, **kw):  # type: ignore[no-untyped-def]
            seen.append(kw)
            super().__init__(path, **{**kw, "context": None})

    monkeypatch.setattr(metadata, "OpenedItem", Recording)
    root = FIXTURES / "orbax-0.12.8" / "manager" / "checkpoint"
    context, limits = object(), ockpt.limits.Limits()
    ockpt.pytree_metadata(
        root, step=0, item="params", context=context, backend="python", limits=limits
    )
    ockpt.pytree_metadata(root, item="params", backend="python")
    assert seen == [
        {"step": 0, "item": "params", "context": context, "backend": "python", "limits": limits},
        {"step": None, "item": "params", "context": None, "backend": "python", "limits": None},
    ]
    ockpt.pytree_metadata(root, step=0, item="params")
    assert seen[-1]["backend"] == "auto"


def test_the_inline_values_of_a_msgpack_file(tmp_path):
    """Values stored in the msgpack file itself: bytes and text by their length, a number by
    its numpy form, with its `_sharding` entry where the item has one."""
    item = tmp_path / "item"
    item.mkdir()
    (item / "checkpoint").write_bytes(msgpack.packb({"abc": 3, "raw": b"xyz", "text": "hé"}))
    saved = json.loads(
        (FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint" / "_sharding").read_text()
    )
    (item / "_sharding").write_text(json.dumps({"YWJj": saved["YmYxNl94"]}))  # abc, bf16_x
    spec = ShardingDocument.from_bytes((item / "_sharding").read_bytes()).shardings["abc"]
    assert ockpt.pytree_metadata(item, backend="python") == {
        "abc": LeafMetadata(("abc",), "abc", "inline", (), np.dtype(np.int64), None, None, 8, spec),
        "raw": LeafMetadata(("raw",), "raw", "inline", (), None, None, None, 3),
        "text": LeafMetadata(("text",), "text", "inline", (), None, None, None, 3),
    }


@pytest.mark.parametrize("backend", ["python", "tensorstore"])
def test_the_limits_given_apply_to_the_quick_open_of_an_ocdbt_item(backend):
    """Both engines open the arrays of an OCDBT item through a quick store (the python engine:
    one walk of its B+tree; the tensorstore engine: ockpt's own decoder) under the limits
    given, not those in force around the call."""
    if backend == "tensorstore":
        pytest.importorskip("tensorstore")
    case = FIXTURES / "orbax-0.12.8" / "sharded" / "checkpoint"
    tight = ockpt.limits.Limits(max_array_bytes=4)
    with pytest.raises(FormatError) as e:
        ockpt.pytree_metadata(case, backend=backend, limits=tight)
    assert_error(e, rule="ZARR-005", expected="<= 4 bytes")
    # (the engines name different files for it: the python engine the array's .zarray key,
    # the tensorstore engine's decoder the database's manifest)
    assert str(e.value.file).startswith(f"{case}/")
