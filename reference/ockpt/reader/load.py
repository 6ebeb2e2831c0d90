"""`load_pytree`: match the caller's target against the saved tree (LOAD-001..005), check every
requested dtype and shape (LOAD-020..031), then read only the regions the target needs."""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .. import _gc, _jax, dtypes, engines, random_keys
from ..errors import TargetError
from ..limits import Allocations, Limits, applied
from ..paths import EmptyNode, KeyType, param_name
from ..store.mapping import FileMaps, MapRefused

if TYPE_CHECKING:
    import tensorstore as ts
from ..saved_tree import EMPTY_VALUES, Empty, Node, SavedLeaf, leaves, node_at, ordered
from .item import OpenedItem

__all__ = ["CastPolicy", "CAST_POLICIES", "MmapPolicy", "load_pytree", "load_item", "mapped_leaf"]

CastPolicy = Literal["exact", "checked", "lossy"]
CAST_POLICIES = ("exact", "checked", "lossy")
#: False: read every leaf; True: map the leaves that can be (spec loading §6.1), read the rest;
#: "require": map every array leaf or refuse the load, naming the first that cannot be.
MmapPolicy = bool | Literal["require"]

# ---------------------------------------------------------------------------------------------
# Matching a target.

_Builder = Callable[[Sequence[Any]], Any]

#: A job's result not made yet (`_Loader.results`).
_PENDING: Any = object()


@dataclass(slots=True)
class _Job:
    """One leaf to load and what the target asks of it."""

    leaf: SavedLeaf
    want: Literal["as_saved", "numpy", "np_scalar", "py_scalar", "jax", "string"]
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    sharding: Any = None
    pytype: type | None = None
    key_impl: str | None = None  # a typed PRNG key of this implementation (LOAD-025)


def _const(value: Any) -> _Builder:
    return lambda results: value


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


_PY_SCALARS: dict[type, np.dtype] = {
    bool: np.dtype(bool),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}


class _Planner:
    def __init__(self, item: OpenedItem, *, partial: bool) -> None:
        self.item = item
        self.partial = partial
        self.jobs: list[_Job] = []
        self.missing: list[str] = []
        self.extra: list[str] = []

    def _job(self, job: _Job) -> _Builder:
        index = len(self.jobs)
        self.jobs.append(job)
        return operator.itemgetter(index)

    def _extra(self, saved: Any, texts: tuple[str, ...]) -> None:
        names = [leaf.param_name for leaf in leaves(saved)]
        self.extra.extend(names or ([param_name(texts)] if not isinstance(saved, Empty) else []))

    def as_saved(self, saved: Any) -> _Builder:
        """The saved tree's leaves as jobs, in the tree's order; the builder walks the tree
        again and takes their results in that order (no builder per leaf is kept)."""
        first = len(self.jobs)
        self._as_saved_jobs(saved, self.item.random_key_impls())
        return lambda results: _rebuild(saved, itertools.count(first), results)

    def _as_saved_jobs(self, saved: Any, impls: Mapping[str, str]) -> None:
        if isinstance(saved, SavedLeaf):
            self.jobs.append(_Job(saved, "as_saved", key_impl=impls.get(saved.param_name)))
        elif isinstance(saved, Node):
            for _, child in ordered(saved):
                self._as_saved_jobs(child, impls)

    def plan(self, target: Any, saved: Any, texts: tuple[str, ...]) -> _Builder:
        if target is Ellipsis:
            if saved is None:
                self.missing.append(param_name(texts))
            return _const(Ellipsis)
        if saved is None:
            self.missing.append(param_name(texts))
            return _const(None)
        if target is None:
            if not (isinstance(saved, Empty) and saved.node is EmptyNode.NONE):
                if not self.partial:
                    self._extra(saved, texts)
            return _const(None)
        container = self._container(target)
        if container is not None:
            items, rebuild = container
            if not items:
                if isinstance(saved, Node) and not self.partial:
                    self._extra(saved, texts)
                elif isinstance(saved, SavedLeaf):
                    self._shape_error(saved, "an empty container")
                return lambda results: rebuild([])
            if not isinstance(saved, Node):
                if isinstance(saved, SavedLeaf):
                    self._shape_error(saved, f"a {type(target).__name__} node")
                self.missing.extend(param_name(texts + (k,)) for k, _ in items)
                return _const(None)
            parts = [self.plan(v, saved.children.get(k), texts + (k,)) for k, v in items]
            if not self.partial:
                wanted = {k for k, _ in items}
                for k, v in saved.children.items():
                    if k not in wanted:
                        self._extra(v, texts + (k,))
            return lambda results: rebuild([b(results) for b in parts])
        if not isinstance(saved, SavedLeaf):
            raise TargetError(
                f"the target has a leaf ({type(target).__name__}) where the checkpoint has "
                f"a {'subtree' if isinstance(saved, Node) else saved.node.value + ' node'}",
                rule="LOAD-003",
                file=self.item.metadata_file,
                leaf=param_name(texts),
            )
        return self._job(self._leaf_job(target, saved))

    def _key_job(self, leaf: SavedLeaf, shape: tuple[int, ...], impl: str, sharding: Any) -> _Job:
        """A typed-key target: its key data, placed so that no key is split (LOAD-025)."""
        file = self.item.metadata_file
        self._check_key_impl(leaf, impl)
        data = random_keys.key_data_shape(impl, file=file, leaf=leaf.param_name)
        placed = _jax.key_data_sharding(sharding, len(shape), len(data))
        if placed is None:
            raise TargetError(
                f"a typed-key target placed with {type(sharding).__name__} (use a NamedSharding "
                "or a single device)",
                rule="LOAD-025",
                file=file,
                leaf=leaf.param_name,
            )
        return _Job(leaf, "jax", shape + data, random_keys.KEY_DTYPE, placed, key_impl=impl)

    def _check_key_impl(self, leaf: SavedLeaf, impl: str) -> None:
        """A key target of another implementation than the one recorded is refused."""
        saved = self.item.random_key_impls().get(leaf.param_name)
        if saved is not None and saved != impl:
            raise TargetError(
                f"the checkpoint holds {saved} keys; the target asks for {impl} keys",
                rule="LOAD-025",
                file=self.item.metadata_file,
                leaf=leaf.param_name,
            )

    def _shape_error(self, saved: SavedLeaf, what: str) -> None:
        raise TargetError(
            f"the target has {what} where the checkpoint has a leaf",
            rule="LOAD-003",
            file=self.item.metadata_file,
            leaf=saved.param_name,
        )

    def _container(
        self, target: Any
    ) -> tuple[list[tuple[str, Any]], Callable[[list[Any]], Any]] | None:
        if isinstance(target, Mapping):
            keys = list(target)
            texts = [str(k) for k in keys]
            if len(set(texts)) != len(texts):
                raise TargetError("two target dict keys have the same text", rule="LOAD-004")
            cls = type(target)

            def rebuild_map(values: list[Any]) -> Any:
                data = dict(zip(keys, values, strict=True))
                if cls is dict:
                    return data
                try:
                    return cls(data)
                except TypeError:
                    return data

            return list(zip(texts, target.values(), strict=True)), rebuild_map
        if _is_namedtuple(target):
            cls = type(target)
            return (
                [(f, getattr(target, f)) for f in target._fields],
                lambda values: cls(*values),
            )
        if isinstance(target, (list, tuple)):
            make = list if isinstance(target, list) else type(target)
            return [(str(i), v) for i, v in enumerate(target)], lambda values: make(values)
        if isinstance(target, (np.ndarray, np.generic, str, bytes, bool, int, float, complex)):
            return None
        return _jax.children(target)

    def _leaf_job(self, target: Any, leaf: SavedLeaf) -> _Job:
        if isinstance(target, str):
            return _Job(leaf, "string")
        if isinstance(target, np.ndarray):
            return _Job(leaf, "numpy", tuple(target.shape), target.dtype)
        if isinstance(target, np.generic):
            return _Job(leaf, "np_scalar", (), target.dtype)
        if type(target) in _PY_SCALARS:
            return _Job(leaf, "py_scalar", (), _PY_SCALARS[type(target)], pytype=type(target))
        if isinstance(target, random_keys.RandomKey):  # a key as host data (LOAD-025)
            self._check_key_impl(leaf, target.impl)
            shape = tuple(target.data.shape)
            return _Job(leaf, "numpy", shape, random_keys.KEY_DTYPE, key_impl=target.impl)
        key = _jax.key_target(target)
        if key is not None:
            return self._key_job(leaf, *key)
        if _jax.is_array_target(target):
            shape, dtype, sharding = _jax.target_spec(target)
            return _Job(leaf, "jax", shape, dtype, sharding)
        raise TargetError(
            f"unsupported target leaf type {type(target).__name__} (use numpy.ndarray, "
            "jax.ShapeDtypeStruct, jax.Array, a scalar, str or ... to skip)",
            rule="LOAD-004",
            file=self.item.metadata_file,
            leaf=leaf.param_name,
        )


# ---------------------------------------------------------------------------------------------
# Loading.


def _rebuild(saved: Any, indices: Iterator[int], results: Sequence[Any]) -> Any:
    """The value of the saved tree `saved` as saved: each leaf the result of the next job
    index (`_Planner.as_saved` made its jobs in the tree's order)."""
    if isinstance(saved, SavedLeaf):
        return results[next(indices)]
    if isinstance(saved, Empty):
        return EMPTY_VALUES[saved.node]()
    if saved.kind is KeyType.SEQUENCE:
        return [_rebuild(v, indices, results) for _, v in ordered(saved)]
    return {k: _rebuild(v, indices, results) for k, v in saved.children.items()}


def _check_job(
    job: _Job,
    array_shape: tuple[int, ...],
    array_dtype: np.dtype,
    *,
    file: str,
    cast: str,
    pad_or_truncate: bool,
) -> None:
    name = job.leaf.param_name
    if job.want == "as_saved":
        job.shape, job.dtype = array_shape, array_dtype
        return
    assert job.shape is not None and job.dtype is not None
    if job.key_impl is not None and array_dtype != random_keys.KEY_DTYPE:
        raise TargetError(
            f"a {job.key_impl} key target needs uint32 key data; the checkpoint holds "
            f"{array_dtype} {list(array_shape)}",
            rule="LOAD-025",
            file=file,
            leaf=name,
        )
    if job.shape != array_shape:
        if not (pad_or_truncate and len(job.shape) == len(array_shape) and job.shape):
            raise TargetError(
                f"shape mismatch: the checkpoint holds {list(array_shape)}, the target asks "
                f"for {list(job.shape)}"
                + ("" if pad_or_truncate else " (pass pad_or_truncate=True to pad or cut)"),
                rule="LOAD-030",
                file=file,
                leaf=name,
            )
    if job.want == "jax":
        canonical = _jax.canonical_dtype(job.dtype)
        if canonical != job.dtype:
            raise TargetError(
                f"jax would store {job.dtype} as {canonical} (64-bit types need "
                "jax_enable_x64); ask for the narrower dtype explicitly",
                rule="LOAD-024",
                file=file,
                leaf=name,
            )
    try:
        kind = dtypes.cast_kind(array_dtype, job.dtype)
    except (KeyError, ValueError):
        kind = "lossy"
    if kind == "lossy" and cast == "exact":
        raise TargetError(
            f"cast from {array_dtype} to {job.dtype} is lossy; pass cast='checked' (refuse "
            "if a value changes) or cast='lossy' to allow it",
            rule="LOAD-020",
            file=file,
            leaf=name,
        )


def _final(job: _Job, value: Any) -> Any:
    if job.key_impl is not None:  # LOAD-025: a typed key where jax is loaded, else RandomKey
        if job.want == "jax" or (job.want == "as_saved" and _jax.jax_loaded()):
            return _jax.wrap_key(value, job.key_impl)
        return random_keys.RandomKey(job.key_impl, value)
    if job.want == "as_saved":
        # a msgpack placeholder without _METADATA (value_type "array") stays a 0-d array: nothing
        # says it was a scalar (LOAD-044)
        if job.leaf.value_type == "scalar" and isinstance(value, np.ndarray):
            return value[()]
        return value
    if job.want == "np_scalar":
        return np.asarray(value)[()]
    if job.want == "py_scalar":
        assert job.pytype is not None
        return job.pytype(np.asarray(value)[()].item())
    return value


def _box_of(shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple((0, n) for n in shape)


def _clip(box, stored_shape):  # type: ignore[no-untyped-def]
    return tuple((a, min(b, n)) for (a, b), n in zip(box, stored_shape, strict=True))


class _Loader:
    def __init__(
        self,
        item: OpenedItem,
        jobs: list[_Job],
        *,
        cast: str,
        pad_or_truncate: bool,
        max_in_flight: int,
        mmap: MmapPolicy = False,
    ) -> None:
        self.item = item
        self.jobs = jobs
        self.cast = cast
        self.pad = pad_or_truncate
        self.max_in_flight = max_in_flight
        self.mmap = mmap
        self.maps = FileMaps() if mmap else None
        # each job's result by its index (`_PENDING` until made): a list, not a dict of
        # 100,000 int keys
        self.results: list[Any] = [_PENDING] * len(jobs)
        self.allocations = Allocations()  # every output, small ones together (LIMIT-006)

    def run(self) -> list[Any]:
        pending: dict[int, dict[Any, Any]] = {}
        for request, data in engines.read_regions(
            self._requests(pending), max_in_flight=self.max_in_flight
        ):
            index, box, devices = request.tag
            job = self.jobs[index]
            host = self._finish_region(job, request, data, box)
            if devices is None:
                self.results[index] = _final(job, host)
                continue
            placed = pending[index]["arrays"]
            for device in devices:
                placed[device] = _jax.to_device(host, device)
            del host, data
            if len(placed) == pending[index]["count"]:
                whole = _jax.assemble(job.shape, job.sharding, placed)
                self.results[index] = _final(job, whole)
                del pending[index]
        return self.results

    def _requests(self, pending: dict[int, dict[Any, Any]]) -> Iterator[engines.ReadRequest]:
        """The reads of every job, made as reading reaches them. Before the first, strings and
        inline values are settled and every leaf a target asks for is checked against its
        stored array, so that a mismatch is refused before anything is read. A backend that
        opens arrays one at a time (`BULK_OPEN` false) opens each array when it is needed and
        keeps none (twice with a target), so memory does not grow with the leaf count."""
        file = self.item.metadata_file
        open_array: Callable[[str], Any] = self.item.array
        if self.item.store.BULK_OPEN:
            names = [j.leaf.param_name for j in self.jobs if j.leaf.source == "array"]
            open_array = self.item.arrays(names).__getitem__
        check = functools.partial(_check_job, file=file, cast=self.cast, pad_or_truncate=self.pad)
        for index, job in enumerate(self.jobs):
            if job.leaf.source == "string" or job.want == "string":
                self.results[index] = self._string(job)
            elif job.leaf.source == "inline":
                self.results[index] = self._inline(job)
            elif job.want != "as_saved":
                array = open_array(job.leaf.param_name)
                check(job, array.shape, array.dtype)
        for index, job in enumerate(self.jobs):
            if self.results[index] is not _PENDING:
                continue
            array = open_array(job.leaf.param_name)
            check(job, array.shape, array.dtype)  # as saved: sets the job's shape and dtype
            if job.key_impl is not None:  # the stored array must be this key's data (ARRM-002)
                random_keys.key_shape(
                    job.key_impl,
                    array.shape,
                    array.dtype,
                    file=array.file,
                    leaf=job.leaf.param_name,
                )
            if self.maps is not None and (view := self._mapped(job, array)) is not None:
                self.results[index] = _final(job, view)
                continue
            read_dtype = job.dtype if self.cast == "exact" or job.dtype == array.dtype else None
            assert job.shape is not None and job.dtype is not None
            by_box: dict[Any, list[Any] | None] = {_box_of(job.shape): None}
            if job.want == "jax":  # this process's shards only, each read once
                boxes = _jax.shard_boxes(job.shape, job.sharding)
                pending[index] = {"count": len(boxes), "arrays": {}}
                by_box = {}
                for device, box in boxes.items():
                    by_box.setdefault(box, []).append(device)  # type: ignore[union-attr]
            # read as stored then cast: both copies are held at once
            item = job.dtype.itemsize + (array.dtype.itemsize if read_dtype is None else 0)
            cells = sum(math.prod(b - a for a, b in box) for box in by_box)
            self.allocations.check(
                cells * item, what=f"param {job.leaf.param_name!r}", file=array.file
            )
            for box, devices in by_box.items():
                yield self._request(array, box, read_dtype, (index, box, devices))

    def _mapped(self, job: _Job, array: Any) -> np.ndarray | None:
        """The leaf as a read-only view of its file's pages (LOAD-034), or None to read it;
        with ``mmap="require"`` a leaf that cannot be mapped is refused, saying why."""
        assert self.maps is not None
        why = None
        if job.want == "jax":
            why = "the target is a device array"
        elif job.dtype != array.dtype:
            why = f"the target asks for {job.dtype}, the checkpoint holds {array.dtype}"
        elif job.shape != array.shape:
            why = f"the target's shape {list(job.shape or ())} is not the stored one"
        return mapped_leaf(array, self.maps, self.mmap, leaf=job.leaf.param_name, why=why)

    def _request(self, array, box, dtype, tag) -> engines.ReadRequest:  # type: ignore[no-untyped-def]
        return engines.ReadRequest(array, _clip(box, array.shape), dtype, tag)

    def _finish_region(self, job: _Job, request: engines.ReadRequest, data: np.ndarray, box):  # type: ignore[no-untyped-def]
        assert job.dtype is not None
        if data.dtype != job.dtype:
            data = self._cast(job, data)
        if request.box != box:  # pad: the target region reaches past the stored array
            out = np.zeros(tuple(b - a for a, b in box), dtype=job.dtype)
            out[tuple(slice(0, b - a) for a, b in request.box)] = data
            data = out
        return data

    def _cast(self, job: _Job, data: np.ndarray) -> np.ndarray:
        assert job.dtype is not None
        if self.cast == "checked":
            changed = dtypes.lossy_values(data, job.dtype)
            if changed.any():
                where = tuple(int(i) for i in np.argwhere(changed)[0])
                raise TargetError(
                    f"cast from {data.dtype} to {job.dtype} would change "
                    f"{int(changed.sum())} value(s), first at {list(where)} "
                    f"({data[where]!r})",
                    rule="LOAD-021",
                    file=self.item.metadata_file,
                    leaf=job.leaf.param_name,
                )
        return dtypes.astype(data, job.dtype)

    def _string(self, job: _Job) -> Any:
        leaf = job.leaf
        if leaf.source == "inline":
            value = leaf.inline
        elif leaf.source == "string":
            value = self.item.strings(leaf)
        else:
            value = None
        if not isinstance(value, str) or job.want not in ("string", "as_saved"):
            have = "a string" if isinstance(value, str) else "an array"
            raise TargetError(
                f"the checkpoint holds {have}; the target asks for "
                f"{'a string' if job.want == 'string' else 'an array'}",
                rule="LOAD-005",
                file=self.item.metadata_file,
                leaf=leaf.param_name,
            )
        return value

    def _inline(self, job: _Job) -> Any:
        value = job.leaf.inline
        if job.want == "as_saved":
            return value
        if isinstance(value, (str, bytes)):
            return self._string(job)
        host = np.asarray(value)
        _check_job(
            job,
            tuple(host.shape),
            host.dtype,
            file=self.item.metadata_file,
            cast=self.cast,
            pad_or_truncate=self.pad,
        )
        assert job.shape is not None
        region = _box_of(job.shape)
        clipped = _clip(region, host.shape)
        part = host[tuple(slice(a, b) for a, b in clipped)]
        request = engines.ReadRequest(None, clipped)  # type: ignore[arg-type]
        data = self._finish_region(job, request, np.array(part), region)
        if job.key_impl is not None:  # the inline data must be this key's data (ARRM-002)
            random_keys.key_shape(
                job.key_impl,
                data.shape,
                data.dtype,
                file=self.item.metadata_file,
                leaf=job.leaf.param_name,
            )
        if job.want == "jax":
            return _final(job, _jax.from_host(data, job.sharding))
        return _final(job, data)


def mapped_leaf(
    array: Any, maps: FileMaps, mmap: MmapPolicy, *, leaf: str, why: str | None = None
) -> np.ndarray | None:
    """The stored `array` mapped from its files (LOAD-034), or None to read it: where `why`
    (a reason it cannot be) is given, where its engine maps nothing, or where it is not stored
    so. With ``mmap="require"`` that is refused instead, naming the leaf and the reason."""
    if why is None:
        if not hasattr(array, "map"):
            why = "the tensorstore engine reads through tensorstore (use backend='python')"
        else:
            try:
                return array.map(maps)  # type: ignore[no-any-return]
            except MapRefused as e:
                why = str(e)
    if mmap == "require":
        raise TargetError(
            f"cannot map the leaf into memory: {why}",
            rule="LOAD-034",
            file=getattr(array, "file", None),
            leaf=leaf,
        )
    return None


def _check_structure(planner: _Planner, item: OpenedItem) -> None:
    if planner.missing or (planner.extra and not planner.partial):
        parts = []
        if planner.missing:
            parts.append(f"missing from the checkpoint: {planner.missing}")
        if planner.extra and not planner.partial:
            parts.append(f"in the checkpoint but not in the target: {planner.extra}")
        hint = " (pass partial=True to load a subset)" if not planner.missing else ""
        raise TargetError(
            "target tree does not match the saved tree; " + "; ".join(parts) + hint,
            rule="LOAD-001" if planner.missing else "LOAD-002",
            file=item.metadata_file,
            missing=tuple(planner.missing),
            extra=tuple(planner.extra),
        )


def load_item(
    item: OpenedItem,
    target: Any,
    *,
    partial: bool,
    cast: str,
    pad_or_truncate: bool,
    max_in_flight: int,
    at: tuple[str, ...] = (),
    mmap: MmapPolicy = False,
) -> Any:
    """Load the item, or only its subtree at the key texts `at` (the caller checks it exists),
    held to the limits the item was opened with."""
    if cast not in CAST_POLICIES:
        raise ValueError(f"cast must be one of {CAST_POLICIES}, got {cast!r}")
    if not (isinstance(mmap, bool) or mmap == "require"):
        raise ValueError(f"mmap must be False, True or 'require', got {mmap!r}")
    with applied(item.limits), _gc.paused():  # a job, a request, an output per leaf
        planner = _Planner(item, partial=partial)
        saved = node_at(item.tree, at)
        if target is None:
            build = planner.as_saved(saved)
        else:
            build = planner.plan(target, saved, at)
            _check_structure(planner, item)
        results = _Loader(
            item,
            planner.jobs,
            cast=cast,
            pad_or_truncate=pad_or_truncate,
            max_in_flight=max_in_flight,
            mmap=mmap,
        ).run()
        return build(results)


def load_pytree(
    path: Any,
    target: Any = None,
    *,
    step: int | None = None,
    item: str | None = None,
    partial: bool = False,
    cast: CastPolicy = "exact",
    pad_or_truncate: bool = False,
    max_in_flight: int = engines.DEFAULT_MAX_IN_FLIGHT,
    context: ts.Context | None = None,
    backend: str = "auto",
    limits: Limits | None = None,
    mmap: MmapPolicy = False,
) -> Any:
    """Load a pytree checkpoint.

    Without `target`: the tree exactly as saved: arrays as numpy.ndarray, scalars as numpy
    scalars of their stored dtype, strings as str (dicts for dict nodes, lists for sequences).

    With `target`: the result takes the target's structure (dict, list, tuple, NamedTuple,
    registered custom nodes); each target leaf says what to load: numpy.ndarray (shape and
    dtype), a numpy or Python scalar, str, jax.ShapeDtypeStruct (optionally with a sharding)
    or jax.Array (built shard by shard on the target's sharding, reading only what each
    addressable shard needs), or ``...`` to skip the leaf (no bytes read).

    Typed PRNG keys (spec loading §4.3): without a target a key leaf comes back as a jax key
    array of its recorded implementation where jax is imported, else as a `RandomKey`
    (implementation and uint32 key data); a typed-key target (``jax.eval_shape`` gives one)
    loads on its sharding, a `RandomKey` target as a `RandomKey`, a uint32 array target as
    the raw key data.

    Options: `partial` allows a target holding a subset of the saved leaves; `cast` is
    ``"exact"`` (only casts that keep every value), ``"checked"`` (lossy casts allowed when
    no value actually changes) or ``"lossy"``; `pad_or_truncate` zero-pads or cuts arrays
    whose saved shape differs from the target's; `step` / `item` choose a step of a
    checkpoint-manager root and an item of a step or v1 checkpoint; `max_in_flight` bounds
    concurrent reads; `context` is a parent tensorstore context (e.g. for ``memory://``);
    `backend` is ``"python"`` (ockpt's own OCDBT and zarr decoders; a URL's objects are
    read by ranged requests), ``"tensorstore"``, or ``"auto"`` (the default: python for a
    local directory, tensorstore for a URL); `limits` replaces the default
    `ockpt.limits.LIMITS` on what the checkpoint's files may declare. `mmap=True` gives
    every leaf stored raw as one value of a local file as a read-only numpy array over the
    file's pages (no copy; the file must not change while it is in use) and reads the others;
    ``mmap="require"`` refuses the load where a leaf cannot be mapped (spec loading §6.1).
    """
    opened = OpenedItem(path, step=step, item=item, context=context, backend=backend, limits=limits)
    with opened as handle:
        return load_item(
            handle,
            target,
            partial=partial,
            cast=cast,
            pad_or_truncate=pad_or_truncate,
            max_in_flight=max_in_flight,
            mmap=mmap,
        )
