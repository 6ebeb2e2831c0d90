"""Tests written to kill the mutants that survived the mutation run of the format core
(tests/mutation/RESULTS.md names each mutant and the test here that now kills it)."""

from __future__ import annotations
