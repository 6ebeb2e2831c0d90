"""Child process of tests/durability/test_concurrent_saves.py: one writer among several, saving to the
same paths in lockstep with the others.

    python _concurrent_child.py MODE DIR WRITER TRIALS WRITERS

MODE is ``plain`` (``save_pytree``), ``overwrite`` (``save_pytree(..., overwrite=True)``),
``overwrite-fallback`` (the same without renameat2: the rename fallback of DIR-006) or
``manager`` (a `CheckpointManager` of ``DIR/root`` with ``max_to_keep=2`` saving step T).
Trial T saves writer WRITER's tree to ``DIR/T/ckpt`` (or step T). Before each trial the
writer creates ``DIR/ready-T-WRITER`` and waits for ``DIR/go-T``, so the writers start
together. The last line printed is a JSON list: the outcome of each trial, ``"saved"``,
``"conflict"`` (`WriteConflictError`) or ``"error: <traceback>"``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "reference"))

import numpy as np  # noqa: E402


def tree(writer: int, trial: int) -> dict:
    """What WRITER saves in TRIAL: every value tells both (a mixed tree shows at once)."""
    seed = writer * 1000 + trial
    return {
        "w": np.arange(200_000, dtype=np.float32).reshape(400, 500) + seed,
        "b": np.full((7,), seed, dtype=np.int64),
        "layers": [{"k": np.full((64, 64), seed, dtype=np.int32)} for _ in range(4)],
        "name": f"writer-{writer}-trial-{trial}",
    }


def main() -> None:
    mode, base, writer, trials = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    import ockpt
    from ockpt.store import commit

    if mode == "overwrite-fallback":
        commit._renameat2 = lambda src, dst, flags: False  # as without renameat2
    manager = None
    if mode == "manager":
        manager = ockpt.CheckpointManager(base / "root", max_to_keep=2)
    outcomes = []
    for trial in range(trials):
        (base / f"ready-{trial}-{writer}").touch()
        deadline = time.monotonic() + 60
        while not (base / f"go-{trial}").exists() and time.monotonic() < deadline:
            time.sleep(0.0005)
        try:
            if manager is not None:
                manager.save(trial, tree(writer, trial))
            else:
                path = base / str(trial) / "ckpt"
                ockpt.save_pytree(path, tree(writer, trial), overwrite=mode != "plain")
            outcomes.append("saved")
        except ockpt.WriteConflictError:
            outcomes.append("conflict")
        except BaseException:  # noqa: BLE001 - anything else is the finding
            outcomes.append("error: " + traceback.format_exc()[-3000:])
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
