"""Run the case catalogue against a set of adapters and collect one result per cell.

A cell is (group, case, producer, consumer). Its status is ``pass``, ``fail`` (the consumer or
producer does not do what the spec says; `rule` names the rule and `reason` says how),
``n/a`` (an adapter does not declare what the case needs) or ``xfail`` (a known issue recorded
with the case, such as a bad-corpus variant's ``known_reader_issue``). A failure on a rule the
adapter lists in ``capabilities["deviations"]`` is marked ``documented``.

Topology, multi-process and bad-corpus cases run in fresh subprocesses (`_worker.py`): a
device count is fixed when jax starts, a 2-process save needs two processes, and a damaged
checkpoint may crash or hang a reader.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import SUPPORTED
from . import cases as C
from . import casts as K
from . import trees
from .adapters import find_repo_file, load_adapter
from .command import CommandFailure, CommandUnsupported
from .compare import differences
from .fixture_cases import BadCase, bad_cases, database_cases, golden_cases
from .leaves import tree_features
from .protocol import Adapter, WriteCase, supports

__all__ = ["Result", "Run", "run", "find_fixtures"]

WORKER_TIMEOUT_S = 240


@dataclass
class Result:
    group: str
    case: str
    producer: str
    consumer: str
    status: str
    rule: str | None = None
    reason: str = ""
    documented: bool = False


@dataclass
class Run:
    adapters: dict[str, dict[str, Any]]
    results: list[Result] = field(default_factory=list)
    fixtures: str | None = None
    seconds: float = 0.0
    environment: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "ockpt-conformance/1",
            "adapters": self.adapters,
            "groups": C.GROUPS,
            "environment": self.environment,
            "seconds": round(self.seconds, 1),
            "results": [asdict(r) for r in self.results],
        }

    def failures(self, *, documented: bool | None = None) -> list[Result]:
        return [
            r
            for r in self.results
            if r.status == "fail" and (documented is None or r.documented == documented)
        ]


def find_fixtures(hint: str | os.PathLike[str] | None = None) -> Path | None:
    """The golden fixtures directory (holding `_record.py`)."""
    if hint is not None:
        return Path(hint)
    found = find_repo_file("fixtures/_record.py")
    return found.parent if found else None


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _takes_targets(adapter: Adapter) -> bool:
    """Whether the adapter loads into a target (capability ``targets``, default true; the
    command protocol passes none)."""
    return (adapter.capabilities.get("reads") or {}).get("targets", True) is not False


def _reads_support(adapter: Adapter, needs: dict[str, Any], features: list[str]) -> str | None:
    """`supports` on the reads side; a reader that declares ``features`` must declare every
    feature of the case (one that declares none is taken to handle all)."""
    reads = adapter.capabilities.get("reads")
    if reads and "features" in reads:
        needs = {**needs, "features": features}
    return supports(reads, needs)


def _exc(e: BaseException) -> str:
    rule = getattr(e, "rule", None)
    return _short(f"{type(e).__name__}{f' [{rule}]' if rule else ''}: {e}")


class _Runner:
    def __init__(
        self,
        adapters: list[Adapter],
        specs: list[str],
        fixtures: Path | None,
        work: Path,
        progress: Callable[[str], None] | None,
        repo: Path | None,
    ) -> None:
        self.adapters = adapters
        self.specs = dict(zip([a.name for a in adapters], specs, strict=True))
        self.fixtures = fixtures
        self.work = work
        self.progress = progress or (lambda _msg: None)
        self.repo = repo
        self.results: list[Result] = []
        self.jax_ok = self._jax_devices() >= 8
        self._written: dict[str, dict[tuple[str, str], Path]] = {}
        self.bad: list[BadCase] = []
        self._golden: list[Any] | None = None

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _jax_devices() -> int:
        try:
            import jax

            return len(jax.devices())
        except Exception:  # noqa: BLE001 - no jax (or no backend): jax cases are n/a
            return 0

    def add(
        self,
        group: str,
        case: str,
        producer: str,
        consumer: Adapter | str,
        status: str,
        rule: str | None = None,
        reason: str = "",
    ) -> None:
        name = consumer if isinstance(consumer, str) else consumer.name
        reason = reason.replace(str(self.work), "<workdir>")
        if self.fixtures is not None:
            reason = reason.replace(str(self.fixtures.resolve()), "fixtures")
            reason = reason.replace(str(self.fixtures), "fixtures")
        documented = status == "fail" and any(
            a.name in (name, producer) and rule in a.capabilities.get("deviations", {})
            for a in self.adapters
        )
        self.results.append(
            Result(group, case, producer, name, status, rule, _short(reason, 240), documented)
        )

    def readers(self) -> list[Adapter]:
        return [a for a in self.adapters if a.capabilities.get("reads")]

    def writers(self) -> list[Adapter]:
        return [a for a in self.adapters if a.capabilities.get("writes")]

    # -- round trips ---------------------------------------------------------------------

    def round_trips(self) -> None:
        for producer in self.writers():
            written = self._written.setdefault(producer.name, {})
            for tree_name in C.ROUND_TRIP_TREES:
                for layout_name, layout, zarr, ocdbt, extra in C.WRITE_LAYOUTS:
                    case = f"{tree_name}/{layout_name}"
                    self.progress(f"round trip {producer.name} {case}")
                    wneeds: dict[str, Any] = {
                        "layouts": layout,
                        "zarr": zarr,
                        "ocdbt": ocdbt,
                        "options": list(extra),
                    }
                    if tree_name == "sharded" and not self.jax_ok:
                        self._na_all("round_trip", case, producer.name, "needs jax with 8 devices")
                        continue
                    tree = trees.build(tree_name)
                    wneeds["leaves"] = sorted(trees.leaf_kinds(tree))
                    wneeds["dtypes"] = sorted(trees.tree_dtypes(tree))
                    why = supports(producer.capabilities.get("writes"), wneeds)
                    if why:
                        self._na_all("round_trip", case, producer.name, f"producer: {why}")
                        continue
                    path = self.work / "rt" / producer.name / tree_name / layout_name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        producer.write(
                            WriteCase(
                                case, tree, layout=layout, zarr=zarr, ocdbt=ocdbt, options=extra
                            ),
                            path,
                        )
                    except Exception as e:  # noqa: BLE001 - a failed save is a failed cell
                        for consumer in self.readers():
                            self.add(
                                "round_trip",
                                case,
                                producer.name,
                                consumer,
                                "fail",
                                "WRITE-001",
                                f"the producer's save raised {_exc(e)}",
                            )
                        continue
                    written[(tree_name, layout_name)] = path
                    rneeds: dict[str, Any] = {"layouts": layout, "zarr": zarr, "ocdbt": ocdbt}
                    if tree_name == "sharded":
                        rneeds["options"] = ["jax"]
                    features = tree_features(tree)
                    for consumer in self.readers():
                        why = _reads_support(consumer, rneeds, features)
                        if why:
                            self.add(
                                "round_trip",
                                case,
                                producer.name,
                                consumer,
                                "n/a",
                                reason=f"consumer: {why}",
                            )
                            continue
                        self._round_trip_read(case, producer, consumer, path, tree)

    def _na_all(self, group: str, case: str, producer: str, reason: str) -> None:
        for consumer in self.readers():
            self.add(group, case, producer, consumer, "n/a", reason=reason)

    def _round_trip_read(
        self, case: str, producer: Adapter, consumer: Adapter, path: Path, tree: Any
    ) -> None:
        item = "state" if "v1" in case else None
        problems = []
        try:
            got = consumer.read(path, None, item=item)
            problems += [f"no target: {d}" for d in differences(got, tree, strict=False)]
        except CommandUnsupported as e:
            return self.add(
                "round_trip", case, producer.name, consumer, "n/a", reason=f"unsupported: {e}"
            )
        except Exception as e:  # noqa: BLE001
            problems.append(f"no target: raised {_exc(e)}")
        rule = "LOAD-023" if problems else None
        diffs = []
        if _takes_targets(consumer):
            try:
                got = consumer.read(path, tree, item=item)
                diffs = differences(got, tree, strict=True)
                problems += [f"target: {d}" for d in diffs]
            except Exception as e:  # noqa: BLE001
                diffs = [str(e)]
                problems.append(f"target: raised {_exc(e)}")
        if diffs and rule is None:
            rule = "LOAD-022"
        self.add(
            "round_trip",
            case,
            producer.name,
            consumer,
            "fail" if problems else "pass",
            rule,
            "; ".join(problems[:2]),
        )

    # -- golden fixtures -----------------------------------------------------------------

    def fixture_reads(self) -> None:
        if self.fixtures is None:
            return
        # Every pytree item of every golden set: written by Orbax releases (orbax-<version>),
        # by ockpt's writer (ockpt-<version>) and any other set holding expected.json records.
        for fc in self.golden():
            self.progress(f"fixture {fc.id}")
            for consumer in self.readers():
                why = _reads_support(consumer, fc.needs, fc.features)
                if why:
                    self.add("fixtures", fc.id, fc.source, consumer, "n/a", reason=why)
                    continue
                self._fixture_read(
                    fc.id,
                    fc.source,
                    consumer,
                    fc.checkpoint,
                    fc.tree,
                    fc.kwargs,
                    fc.multiprocess,
                    fc.no_metadata,
                )

    def _fixture_read(
        self,
        case: str,
        source: str,
        consumer: Adapter,
        path: Path,
        tree: Any,
        kwargs: dict[str, Any],
        multiprocess: bool,
        no_metadata: bool,
    ) -> None:
        problems, rule = [], None
        try:
            got = consumer.read(path, None, **kwargs)
            diffs = differences(got, tree, strict=False, scalars_0d=no_metadata)
            problems += [f"no target: {d}" for d in diffs]
        except CommandUnsupported as e:
            return self.add("fixtures", case, source, consumer, "n/a", reason=f"unsupported: {e}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"no target: raised {_exc(e)}")
        if problems:
            rule = "LOAD-032" if multiprocess else "LOAD-023"
        diffs = []
        if _takes_targets(consumer):
            # a key target is its uint32 key data, which every reader can ask for (LOAD-025)
            target = trees.keys_as_data(tree)
            try:
                got = consumer.read(path, target, **kwargs)
                diffs = [f"target: {d}" for d in differences(got, target, strict=True)]
            except Exception as e:  # noqa: BLE001
                diffs = [f"target: raised {_exc(e)}"]
        if diffs and rule is None:
            rule = "LOAD-022"
        problems += diffs
        self.add(
            "fixtures",
            case,
            source,
            consumer,
            "fail" if problems else "pass",
            rule,
            "; ".join(problems[:2]),
        )

    # -- bare OCDBT databases ------------------------------------------------------------

    def databases(self) -> None:
        """The keys (and value lengths and digests) of the latest generation of every bare
        OCDBT database fixture, for readers that declare ``databases``."""
        if self.fixtures is None:
            return
        for dc in database_cases(self.fixtures):
            self.progress(f"database {dc.id}")
            for consumer in self.readers():
                reads = consumer.capabilities.get("reads") or {}
                why = None if reads.get("databases") else "databases not declared"
                if why is None and "features" in reads:
                    why = supports(reads, {"features": dc.features})
                if why or not hasattr(consumer, "read_database"):
                    self.add("databases", dc.id, dc.fixture_set, consumer, "n/a", reason=why or "")
                    continue
                self._database_read(dc, consumer)

    def _database_read(self, dc: Any, consumer: Adapter) -> None:
        try:
            got = consumer.read_database(dc.database)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001
            rule = getattr(e, "rule", None) or "OCDBT-040"
            return self.add(
                "databases", dc.id, dc.fixture_set, consumer, "fail", rule, f"raised {_exc(e)}"
            )
        want = {k.encode("utf-8"): v for k, v in dc.keys.items()}
        problems = []
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        if missing:
            problems.append(f"{len(missing)} keys missing, first {missing[0]!r}")
        if extra:
            problems.append(f"{len(extra)} keys not in the database, first {extra[0]!r}")
        for key in sorted(set(want) & set(got)):
            length, digest = want[key]
            g = got[key]
            if g.get("value_length") != length or g.get("sha256") not in (None, digest):
                problems.append(f"value of {key!r} differs ({g.get('value_length')} bytes)")
                break
        self.add(
            "databases",
            dc.id,
            dc.fixture_set,
            consumer,
            "fail" if problems else "pass",
            "OCDBT-041" if problems else None,
            "; ".join(problems[:2]),
        )

    # -- consumer cases ------------------------------------------------------------------

    def consumer_reads(self) -> None:
        tree = C.read_tree()
        for producer in self.writers():
            needs = {
                "layouts": "item",
                "zarr": 2,
                "ocdbt": False,
                "leaves": sorted(trees.leaf_kinds(tree)),
            }
            why = supports(producer.capabilities.get("writes"), needs)
            if why:
                for case in C.READ_CASES:
                    self._na_all("reads", case["name"], producer.name, f"producer: {why}")
                continue
            base = self.work / "reads" / producer.name / "base"
            base.parent.mkdir(parents=True, exist_ok=True)
            try:
                producer.write(WriteCase("reads", tree, layout="item", zarr=2, ocdbt=False), base)
            except Exception as e:  # noqa: BLE001
                for case in C.READ_CASES:
                    for consumer in self.readers():
                        self.add(
                            "reads",
                            case["name"],
                            producer.name,
                            consumer,
                            "fail",
                            "WRITE-001",
                            f"the producer's save raised {_exc(e)}",
                        )
                continue
            for case in C.READ_CASES:
                self.progress(f"reads {producer.name} {case['name']}")
                path = base
                if case.get("delete"):
                    path = self.work / "reads" / producer.name / case["name"]
                    shutil.copytree(base, path)
                    for param in case["delete"]:
                        shutil.rmtree(path / param)
                for consumer in self.readers():
                    why = supports(
                        consumer.capabilities.get("reads"),
                        {"layouts": "item", "zarr": 2, "ocdbt": False, **case["needs"]},
                    )
                    if not why and not _takes_targets(consumer):
                        why = "loads into a target not declared (targets: false)"
                    if why:
                        self.add("reads", case["name"], producer.name, consumer, "n/a", reason=why)
                        continue
                    self._read_case(case, producer, consumer, path, tree)

    def _read_case(
        self, case: dict[str, Any], producer: Adapter, consumer: Adapter, path: Path, tree: Any
    ) -> None:
        target = case["target"](tree)
        try:
            got = consumer.read(path, target, **case["options"])
        except Exception as e:  # noqa: BLE001
            if case["expect"] == "refuse":
                return self.add(
                    "reads",
                    case["name"],
                    producer.name,
                    consumer,
                    "pass",
                    case["rule"],
                    f"refused: {_exc(e)}",
                )
            return self.add(
                "reads",
                case["name"],
                producer.name,
                consumer,
                "fail",
                case["rule"],
                f"raised {_exc(e)}",
            )
        if case["expect"] == "refuse":
            return self.add(
                "reads",
                case["name"],
                producer.name,
                consumer,
                "fail",
                case["rule"],
                f"loaded instead of refusing: {_describe(got)}",
            )
        diffs = differences(got, case["expected"](tree), strict=True)
        self.add(
            "reads",
            case["name"],
            producer.name,
            consumer,
            "fail" if diffs else "pass",
            case["rule"],
            "; ".join(diffs[:2]),
        )

    # -- the cast table ------------------------------------------------------------------

    def cast_table(self) -> None:
        producer = next(
            (
                w
                for w in self.writers()
                if not supports(
                    w.capabilities["writes"],
                    {"layouts": "item", "zarr": 2, "ocdbt": False, "leaves": "ndarray"},
                )
            ),
            None,
        )
        if producer is None:
            return
        saved = [n for n in K.TARGETS if n in producer.capabilities["writes"].get("dtypes", [])]
        values = {n: K.saved_values(n) for n in saved}
        path = self.work / "casts" / producer.name
        path.parent.mkdir(parents=True, exist_ok=True)
        producer.write(WriteCase("casts", values, layout="item", zarr=2, ocdbt=False), path)
        for consumer in self.readers():
            self.progress(f"casts {consumer.name}")
            opts = consumer.capabilities["reads"].get("options", [])
            if "partial" not in opts:
                for s in saved:
                    for d in K.TARGETS:
                        self.add(
                            "casts",
                            f"{s}->{d}",
                            producer.name,
                            consumer,
                            "n/a",
                            reason="partial loads not declared",
                        )
                continue
            for d in K.TARGETS:
                exact = [s for s in saved if K.expected_kind(s, d) == "exact"]
                lossy = [s for s in saved if s not in exact]
                self._cast_batch(producer, consumer, path, values, exact, d, "exact", "load")
                self._cast_batch(producer, consumer, path, values, lossy, d, "exact", "refuse")
                if "cast:lossy" in opts:
                    self._cast_batch(
                        producer, consumer, path, values, lossy, d, "lossy", "load", record=False
                    )

    def _cast_batch(
        self,
        producer: Adapter,
        consumer: Adapter,
        path: Path,
        values: dict[str, np.ndarray],
        names: list[str],
        d: str,
        cast: str,
        expect: str,
        record: bool = True,
        single: bool = False,
    ) -> None:
        if not names:
            return
        dt = SUPPORTED[d]
        target = {s: np.zeros(values[s].shape, dt) for s in names}
        rule = {"load": "LOAD-022", "refuse": "LOAD-020"}[expect] if cast == "exact" else "LOAD-020"
        try:
            got = consumer.read(path, target, partial=True, cast=cast)
        except Exception as e:  # noqa: BLE001
            if expect == "refuse" and (single or len(names) == 1):
                return self._cast_cell(
                    producer,
                    consumer,
                    names[0],
                    d,
                    cast,
                    "pass",
                    rule,
                    f"refused: {_exc(e)}",
                    record,
                )
            if len(names) == 1:
                return self._cast_cell(
                    producer, consumer, names[0], d, cast, "fail", rule, f"raised {_exc(e)}", record
                )
            for s in names:  # find which pair(s) the refusal was about
                self._cast_batch(
                    producer, consumer, path, values, [s], d, cast, expect, record, single=True
                )
            return
        for s in names:
            if expect == "refuse":
                leaf = got.get(s) if isinstance(got, dict) else None
                changed = leaf is not None and K.check_exact(values[s], leaf, d) is not None
                how = "changing values" if changed else "(no value changed on this data)"
                self._cast_cell(
                    producer,
                    consumer,
                    s,
                    d,
                    cast,
                    "fail",
                    rule,
                    f"performed the lossy cast {s}->{d} without opt-in {how}",
                    record,
                )
                continue
            check = K.check_exact if cast == "exact" else K.check_lossy
            why = check(values[s], got.get(s) if isinstance(got, dict) else None, d)
            self._cast_cell(
                producer, consumer, s, d, cast, "fail" if why else "pass", rule, why or "", record
            )

    def _cast_cell(
        self,
        producer: Adapter,
        consumer: Adapter,
        s: str,
        d: str,
        cast: str,
        status: str,
        rule: str,
        reason: str,
        record: bool,
    ) -> None:
        case = f"{s}->{d}" if cast == "exact" else f"{s}->{d} (cast={cast})"
        if record or status == "fail":
            self.add("casts", case, producer.name, consumer, status, rule, reason)

    # -- subprocess groups ---------------------------------------------------------------

    def _env(self, devices: int | None) -> dict[str, str]:
        env = dict(os.environ)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        paths = [pkg_parent]
        if self.repo is not None:
            paths.append(str(self.repo))
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["JAX_PLATFORMS"] = "cpu"
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
        if devices:
            flags.append(f"--xla_force_host_platform_device_count={devices}")
        env["XLA_FLAGS"] = " ".join(flags)
        return env

    def _spawn(self, task: dict[str, Any], devices: int | None) -> subprocess.Popen[str]:
        """Start a worker; its output goes to files (a full pipe would stall it)."""
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=logs, suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(task, f)
        out = open(name + ".out", "w+", encoding="utf-8")  # noqa: SIM115 - closed in _collect
        err = open(name + ".err", "w+", encoding="utf-8")  # noqa: SIM115
        with open(name, encoding="utf-8") as stdin:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ockpt.conformance._worker"],
                stdin=stdin,
                stdout=out,
                stderr=err,
                text=True,
                env=self._env(devices),
            )
        proc._ockpt_files = (out, err)  # type: ignore[attr-defined]
        return proc

    @staticmethod
    def _collect(proc: subprocess.Popen[str], timeout: float) -> tuple[list[dict], str]:
        note = ""
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            note = f"timed out after {timeout:.0f}s\n"
        out_f, err_f = proc._ockpt_files  # type: ignore[attr-defined]
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
        out_f.close()
        err_f.close()
        lines = []
        for line in out.splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        tail = err.strip().splitlines()[-3:]
        status = f" (exit status {proc.returncode})" if proc.returncode else ""
        return lines, note + " / ".join(tail) + status

    def start_multiprocess_save(self) -> tuple[list[subprocess.Popen[str]], Path, list[str]]:
        producers = [
            w.name
            for w in self.writers()
            if w.capabilities["writes"].get("multiprocess")
            and not supports(
                w.capabilities["writes"],
                {"layouts": "item", "zarr": 2, "ocdbt": True, "leaves": "jax.Array"},
            )
        ]
        out = self.work / "mp"
        out.mkdir(parents=True, exist_ok=True)
        if not producers or not self.jax_ok:
            return [], out, []
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [
            self._spawn(
                {
                    "kind": "mp_save",
                    "pid": pid,
                    "port": port,
                    "out": str(out),
                    "adapters": [self.specs[p] for p in producers],
                    "repo": _str(self.repo),
                },
                devices=4,
            )
            for pid in (0, 1)
        ]
        return procs, out, producers

    def golden(self) -> list[Any]:
        """The golden fixture cases (computed once)."""
        if self._golden is None:
            self._golden = golden_cases(self.fixtures) if self.fixtures is not None else []
        return self._golden

    def start_bad_corpus(self) -> list[tuple[Adapter, subprocess.Popen[str] | None]]:
        if self.fixtures is None:
            return []
        self.bad = bad_cases(self.fixtures, self.golden())
        running: list[tuple[Adapter, subprocess.Popen[str] | None]] = []
        for r in self.readers():
            # a reader runs the variants whose base it declares it can read
            jobs = [
                [b.name, str(b.path)]
                for b in self.bad
                if not _reads_support(r, b.needs, b.features)
            ]
            proc = None
            if jobs:
                proc = self._spawn(
                    {
                        "kind": "bad",
                        "adapter": self.specs[r.name],
                        "variants": jobs,
                        "repo": _str(self.repo),
                        "timeout": 30,
                        "fixtures": str(self.fixtures),
                    },
                    devices=8,
                )
            running.append((r, proc))
        return running

    def finish_bad_corpus(
        self, running: list[tuple[Adapter, subprocess.Popen[str] | None]]
    ) -> None:
        for reader, proc in running:
            lines, err = self._collect(proc, WORKER_TIMEOUT_S) if proc is not None else ([], "")
            outcomes = {m["name"]: m for m in lines if "name" in m}
            started = [m["start"] for m in lines if "start" in m]
            crashed = started[-1] if started and started[-1] not in outcomes else None
            for b in self.bad:
                why = _reads_support(reader, b.needs, b.features)
                if why:
                    self.add("bad_corpus", b.name, "fixtures/bad", reader, "n/a", reason=why)
                    continue
                got = outcomes.get(b.name)
                if got is None:
                    why = "crashed or hung here" if b.name == crashed else "not reached"
                    self.add(
                        "bad_corpus",
                        b.name,
                        "fixtures/bad",
                        reader,
                        "fail",
                        b.rule,
                        f"{why}: {_short(err[-300:])}",
                    )
                    continue
                status, reason = self._bad_outcome(reader, b, got)
                self.add("bad_corpus", b.name, "fixtures/bad", reader, status, b.rule, reason)

    @staticmethod
    def _bad_outcome(reader: Adapter, b: BadCase, got: dict[str, Any]) -> tuple[str, str]:
        """(status, reason) of one reader on one bad variant. ``errors: "ockpt"``: a refusal
        must be the named ockpt error class; ``errors: "rules"``: it must name one of the
        variant's accepted rule ids; otherwise any refusal counts. A crash, a hang or an
        invalid output of a command reader is never a refusal."""
        errors = reader.capabilities["reads"].get("errors")
        classes = got.get("classes", [])
        if "CommandUnsupported" in classes:
            return "n/a", f"unsupported: {got['message']}"
        crash = {CommandFailure.__name__, "OutputError"} | ({"TimeoutError"} if errors else set())
        if got["outcome"] == "raised" and crash & set(classes):
            return "fail", f"crashed, hung or wrote no valid output: {got['message']}"
        status, reason = "pass", ""
        named = f" [{got.get('rule')}]" if got.get("rule") else ""
        if b.outcome == "error":
            if got["outcome"] != "raised":
                status, reason = "fail", f"loaded the damaged checkpoint ({b.damage})"
            elif errors == "ockpt" and b.error_class not in classes:
                status = "fail"
                reason = f"raised {classes[0]}, want {b.error_class}: {got['message']}"
            elif errors == "rules" and got.get("rule") not in b.accepted_rules:
                status = "fail"
                reason = (
                    f"refused naming {got.get('rule') or 'no rule'}, want one of "
                    f"{', '.join(b.accepted_rules)}: {got['message']}"
                )
            else:
                reason = f"{classes[0]}{named}: {got['message']}"
        elif got["outcome"] == "raised":
            if errors == "ockpt" and "OckptError" not in classes:
                status = "fail"
                reason = f"raised {classes[0]}, not an OckptError: {got['message']}"
            else:
                reason = f"refused (may load): {classes[0]}{named}"
        if status == "fail" and b.known_reader_issue and errors == "ockpt":
            status, reason = "xfail", f"known issue: {b.known_reader_issue}"
        return status, reason

    def topology(self, mp: tuple[list[subprocess.Popen[str]], Path, list[str]]) -> None:
        procs, out, producers = mp
        sources: list[dict[str, Any]] = []
        if procs:
            lines = []
            errs = ""
            for p in procs:
                got, err = self._collect(p, WORKER_TIMEOUT_S)
                lines += got
                errs += err
            for name in producers:
                ok = [m for m in lines if m.get("adapter") == name]
                if len(ok) == 2 and all(m["status"] == "ok" for m in ok):
                    sources.append(
                        {
                            "label": "2-process save",
                            "producer": name,
                            "path": str(out / name),
                            "tree": "sharded",
                        }
                    )
                else:
                    reason = "; ".join(m.get("error", "") for m in ok) or _short(errs[-300:])
                    self._na_topology_fail(
                        name, "2-process save", "WRITE-030", f"the 2-process save failed: {reason}"
                    )
        for name, written in self._written.items():
            path = written.get(("sharded", "item-zarr2-ocdbt"))
            if path is not None:
                sources.append(
                    {
                        "label": "(4,2) mesh save",
                        "producer": name,
                        "path": str(path),
                        "tree": "sharded",
                    }
                )
        if self.fixtures is not None:
            for case in ("sharded", "multiprocess"):
                case_dir = self.fixtures / "orbax-0.12.8" / case
                if case_dir.is_dir():
                    sources.append(
                        {
                            "label": f"fixture {case}",
                            "producer": "orbax 0.12.8",
                            "path": str(case_dir / "checkpoint"),
                            "fixture": str(case_dir),
                            "multiprocess": case == "multiprocess",
                        }
                    )
        if not sources:
            return
        readers = []
        for r in self.readers():
            why = supports(r.capabilities["reads"], {"options": "jax"})
            if why:
                for s in sources:
                    for n in C.TOPOLOGY_DEVICES:
                        self.add(
                            "topology",
                            f"{s['label']} @ {n} devices",
                            s["producer"],
                            r,
                            "n/a",
                            reason=why,
                        )
            else:
                readers.append(r)
        if not readers:
            return
        pending = list(C.TOPOLOGY_DEVICES)
        running: list[tuple[int, subprocess.Popen[str]]] = []
        while pending or running:
            while pending and len(running) < 2:
                n = pending.pop()
                self.progress(f"topology on {n} devices")
                task = {
                    "kind": "topology",
                    "devices": n,
                    "mesh": C.TOPOLOGY_DEVICES[n],
                    "adapters": [self.specs[r.name] for r in readers],
                    "sources": sources,
                    "fixtures": _str(self.fixtures),
                    "repo": _str(self.repo),
                }
                running.append((n, self._spawn(task, devices=n)))
            n, proc = running.pop(0)
            lines, err = self._collect(proc, WORKER_TIMEOUT_S)
            seen = set()
            for m in lines:
                if "case" in m:
                    seen.add((m["case"], m["producer"], m["consumer"]))
                    self.add(
                        "topology",
                        m["case"],
                        m["producer"],
                        m["consumer"],
                        m["status"],
                        m.get("rule"),
                        m.get("reason", ""),
                    )
            for s in sources:
                for r in readers:
                    case = f"{s['label']} @ {n} devices"
                    if (case, s["producer"], r.name) not in seen:
                        self.add(
                            "topology",
                            case,
                            s["producer"],
                            r,
                            "fail",
                            "LOAD-032",
                            f"the worker did not report this cell: {_short(err[-300:])}",
                        )

    def _na_topology_fail(self, producer: str, label: str, rule: str, reason: str) -> None:
        for r in self.readers():
            for n in C.TOPOLOGY_DEVICES:
                self.add("topology", f"{label} @ {n} devices", producer, r, "fail", rule, reason)


def _str(p: Path | None) -> str | None:
    return None if p is None else str(p)


def _describe(x: Any) -> str:
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in list(x.items())[:3]) + "}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}{list(x.shape)}"
    return _short(repr(x), 40)


ALL_GROUPS = tuple(C.GROUPS)


def run(
    adapters: Iterable[str],
    *,
    fixtures: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    groups: Iterable[str] = ALL_GROUPS,
    progress: Callable[[str], None] | None = None,
) -> Run:
    """Run the suite for the adapters named by `adapters` (spec strings, see `load_adapter`).

    `fixtures` is the golden fixtures directory (default: ``fixtures/`` of the working directory
    or of the source checkout); `workdir` keeps what the producers wrote (default: a temporary
    directory, removed afterwards); `groups` selects groups of `cases.GROUPS`.
    """
    start = time.monotonic()
    specs = list(adapters)
    fixtures_dir = find_fixtures(fixtures)
    repo = fixtures_dir.parent if fixtures_dir is not None else None
    loaded = [load_adapter(s, repo=repo) for s in specs]
    names = [a.name for a in loaded]
    if len(set(names)) != len(names):
        raise ValueError(f"adapter names must be unique: {names}")
    groups = set(groups)
    unknown = groups - set(ALL_GROUPS)
    if unknown:
        raise ValueError(f"unknown groups {sorted(unknown)}; known: {list(ALL_GROUPS)}")
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="ockpt-conformance-")
        work = Path(tmp)
    else:
        work = Path(workdir)
        work.mkdir(parents=True, exist_ok=True)
    try:
        r = _Runner(loaded, specs, fixtures_dir, work, progress, repo)
        mp = r.start_multiprocess_save() if "topology" in groups else ([], work, [])
        bad = r.start_bad_corpus() if "bad_corpus" in groups else []
        if "round_trip" in groups or "topology" in groups:
            r.round_trips()
            if "round_trip" not in groups:
                r.results = [x for x in r.results if x.group != "round_trip"]
        if "fixtures" in groups:
            r.fixture_reads()
        if "databases" in groups:
            r.databases()
        if "reads" in groups:
            r.consumer_reads()
        if "casts" in groups:
            r.cast_table()
        if "topology" in groups:
            r.topology(mp)
        if bad:
            r.finish_bad_corpus(bad)
        out = Run(
            adapters={
                a.name: {
                    "spec": s,
                    "version": str(getattr(a, "version", "")),
                    "capabilities": _jsonable(a.capabilities),
                }
                for a, s in zip(loaded, specs, strict=True)
            },
            results=r.results,
            fixtures=str(fixtures_dir) if fixtures_dir else None,
            environment=_environment(),
        )
        out.seconds = time.monotonic() - start
        return out
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _environment() -> dict[str, Any]:
    import importlib.metadata
    import platform

    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("orbax-checkpoint", "jax", "tensorstore", "numpy", "ml_dtypes"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out
