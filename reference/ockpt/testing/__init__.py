"""Assertions for users' own test suites about checkpoints (ockpt's own suite uses them too).

- `assert_trees_equal(a, b, rtol=..., atol=...)`: two pytrees hold the same structure, dtypes,
  shapes and values; the message names every leaf that differs by its leaf name.
- `assert_same_format(path, fingerprint_file)`: a checkpoint is stored as a committed
  fingerprint says (`ockpt fingerprint`); ``pytest --ockpt-update-fingerprints`` rewrites it.
- `assert_restorable(path, orbax="0.10.3")`: a real Orbax release restores the checkpoint, in a
  venv built from the package registries and kept (`orbax_venvs`), to the values ockpt reads.
- `strategies`: Hypothesis strategies for pytrees of every dtype and shape the format holds
  (imported on its own: ``from ockpt.testing import strategies``; needs hypothesis).

The pytest plugin (`plugin`, registered by entry point) adds the update option; the functions
work without pytest too (they raise AssertionError).
"""

from .formats import assert_same_format
from .releases import assert_restorable
from .trees import assert_trees_equal

__all__ = ["assert_trees_equal", "assert_same_format", "assert_restorable"]
