"""Targets of sharded `jax.Array`s for a fixture's record, on any mesh, and the check that a
load into them gave every shard its values (the reader's jax tests and the tensorstore stage's
share them)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.expected import assert_same

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Mesh:
    """A mesh of the first prod(shape) devices."""
    n = int(np.prod(shape))
    return Mesh(np.array(jax.devices()[:n]).reshape(shape), names)


def _specs(shape: tuple[int, ...], m: Mesh, salt: int) -> P:
    """A PartitionSpec for `shape` on mesh `m` (varied by `salt`), sharding where divisible."""
    names = list(m.axis_names)
    sizes = dict(m.shape)
    candidates = []
    for order in (names, names[::-1]):
        spec: list = [None] * len(shape)
        free = list(range(len(shape)))
        if salt % 2:
            free.reverse()
        for name in order:
            for d in free:
                if spec[d] is None and shape[d] % sizes[name] == 0 and shape[d] >= sizes[name]:
                    spec[d] = name
                    break
        candidates.append(P(*spec))
    candidates.append(P())
    return candidates[salt % len(candidates)]


def jax_target(tree, m: Mesh, counter=None):
    """The record tree with every array leaf replaced by a sharded ShapeDtypeStruct."""
    counter = counter if counter is not None else [0]
    if isinstance(tree, dict):
        return {k: jax_target(v, m, counter) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        return type(tree)(*(jax_target(v, m, counter) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(jax_target(v, m, counter) for v in tree)
    if isinstance(tree, np.ndarray):
        counter[0] += 1
        spec = _specs(tree.shape, m, counter[0])
        return jax.ShapeDtypeStruct(tree.shape, tree.dtype, sharding=NamedSharding(m, spec))
    if type(tree).__name__ in ("PrngKey", "RandomKey"):  # a typed-key target, as eval_shape makes
        counter[0] += 1
        spec = _specs(tree.shape, m, counter[0])
        dtype = jax.eval_shape(lambda: jax.random.key(0, impl=tree.impl)).dtype
        return jax.ShapeDtypeStruct(tree.shape, dtype, sharding=NamedSharding(m, spec))
    return tree


def check_jax(got, target, expected, where=""):
    """`got` (loaded into `target`) has the target's shardings, and each shard holds its part of
    `expected` (the record)."""
    if isinstance(target, jax.ShapeDtypeStruct) and type(expected).__name__ in (
        "PrngKey",
        "RandomKey",
    ):
        # jax writes a key array's spec with an entry per dimension (P() as P(None))
        assert got.sharding.is_equivalent_to(target.sharding, got.ndim), where
        assert got.dtype == target.dtype and got.shape == target.shape, where
        assert_same(got, expected, where)
        return
    if isinstance(target, jax.ShapeDtypeStruct):
        assert isinstance(got, jax.Array), where
        assert got.sharding == target.sharding, f"{where}: {got.sharding} != {target.sharding}"
        assert got.dtype == expected.dtype and got.shape == expected.shape, where
        host = np.asarray(got)
        assert host.tobytes() == expected.tobytes(), f"{where}: values differ"
        for shard in got.addressable_shards:
            assert np.asarray(shard.data).tobytes() == expected[shard.index].tobytes(), where
        return
    if isinstance(target, dict):
        for k in target:
            check_jax(got[k], target[k], expected[k], f"{where}.{k}")
        return
    if isinstance(target, (list, tuple)):
        assert type(got) is type(target), where
        for i, (g, t, e) in enumerate(zip(got, target, expected, strict=True)):
            check_jax(g, t, e, f"{where}.{i}")
        return
    assert_same(got, expected, where, strict=True)
