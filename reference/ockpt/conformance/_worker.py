"""Work done in a fresh subprocess of the conformance runner (one JSON task on stdin, one JSON
object per line on stdout). Tasks: ``topology`` (load on this process's device count),
``mp_save`` (one process of a 2-process save), ``bad`` (an adapter on the bad corpus)."""

from __future__ import annotations

import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


def _load(spec: str, repo: str | None) -> Any:
    from ockpt.conformance.adapters import load_adapter

    return load_adapter(spec, repo=Path(repo) if repo else None)


def _bad(task: dict[str, Any]) -> None:
    adapter = _load(task["adapter"], task.get("repo"))

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError("the read ran past the time limit")

    signal.signal(signal.SIGALRM, expire)
    strip = task.get("fixtures") or "\0"
    for name, path in task["variants"]:
        _emit({"start": name})
        signal.alarm(int(task.get("timeout", 30)))
        try:
            adapter.read(Path(path))
            out = {"name": name, "outcome": "loaded"}
        except BaseException as e:  # noqa: BLE001 - every outcome is data
            if isinstance(e, KeyboardInterrupt):
                raise
            out = {
                "name": name,
                "outcome": "raised",
                "classes": [c.__name__ for c in type(e).__mro__],
                "rule": getattr(e, "rule", None),
                "message": " ".join(str(e).replace(strip, "fixtures").split())[:200],
            }
        finally:
            signal.alarm(0)
        _emit(out)


def _mp_save(task: dict[str, Any]) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{task['port']}",
        num_processes=2,
        process_id=task["pid"],
        initialization_timeout=60,
    )
    from ockpt.conformance import trees
    from ockpt.conformance.protocol import WriteCase

    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    tree = trees.build("sharded", mesh)
    for spec in task["adapters"]:
        adapter = _load(spec, task.get("repo"))
        try:
            adapter.write(WriteCase("sharded_2proc", tree), Path(task["out"]) / adapter.name)
            _emit({"adapter": adapter.name, "status": "ok"})
        except Exception as e:  # noqa: BLE001
            _emit({"adapter": adapter.name, "status": "error", "error": f"{type(e).__name__}: {e}"})
    jax.distributed.shutdown()


def _spec_for(shape: tuple[int, ...], mesh: Any, flip: bool) -> Any:
    from jax.sharding import PartitionSpec as P

    axes = ["y", "x"] if flip else ["x", "y"]
    spec: list[Any] = []
    for dim in shape[:2]:
        axis = next((a for a in axes if dim % mesh.shape[a] == 0), None)
        if axis is not None:
            axes.remove(axis)
        spec.append(axis)
    return P(*spec)


def _topology(task: dict[str, Any]) -> None:
    import jax
    from jax.sharding import NamedSharding

    from ockpt.conformance.compare import differences

    n = task["devices"]
    devices = jax.devices()
    mesh = jax.sharding.Mesh(np.array(devices[:n]).reshape(task["mesh"]), ("x", "y"))
    readers = [_load(s, task.get("repo")) for s in task["adapters"]]
    for source in task["sources"]:
        case = f"{source['label']} @ {n} devices"
        if "fixture" in source:
            from ockpt.conformance.fixture_cases import record_module

            _record = record_module(Path(task["fixtures"]))
            node = _record.load_expected(Path(source["fixture"]))["items"][""]
            expected = _record.decode_tree(node, Path(source["fixture"]))
            on_device = {k for k, v in node["items"].items() if v["type"] == "jax.Array"}
        else:
            from ockpt.conformance import trees

            expected = trees.sharded_values()
            on_device = {k for k in expected if k != "host"}
        target = {}
        for i, (key, value) in enumerate(expected.items()):
            if key in on_device:
                sharding = NamedSharding(mesh, _spec_for(value.shape, mesh, flip=bool(i % 2)))
                target[key] = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
            else:
                target[key] = value
        for reader in readers:
            problems = []
            try:
                got = reader.read(Path(source["path"]), target)
                for key in on_device:
                    leaf = got[key]
                    if not isinstance(leaf, jax.Array):
                        problems.append(f"{key}: {type(leaf).__name__}, not a jax.Array")
                    elif not leaf.sharding.is_equivalent_to(target[key].sharding, leaf.ndim):
                        problems.append(f"{key}: sharding {leaf.sharding} != the target's")
                problems += differences(
                    {k: np.asarray(v) if k in on_device else v for k, v in got.items()},
                    expected,
                    strict=True,
                )
            except Exception as e:  # noqa: BLE001
                problems.append(f"target on {n} devices: {type(e).__name__}: {e}")
            if n == 1:  # without a target: the saved devices need not exist (LOAD-032)
                try:
                    got = reader.read(Path(source["path"]))
                    problems += [
                        f"no target: {d}" for d in differences(got, expected, strict=False)
                    ]
                except Exception as e:  # noqa: BLE001
                    problems.append(f"no target: {type(e).__name__}: {e}")
            _emit(
                {
                    "case": case,
                    "producer": source["producer"],
                    "consumer": reader.name,
                    "status": "fail" if problems else "pass",
                    "rule": "LOAD-032",
                    "reason": " ".join("; ".join(problems[:2]).split())[:240],
                }
            )


def main() -> int:
    task = json.loads(sys.stdin.read())
    try:
        {"bad": _bad, "mp_save": _mp_save, "topology": _topology}[task["kind"]](task)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
