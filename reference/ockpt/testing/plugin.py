"""The pytest plugin of `ockpt.testing` (entry point ``pytest11``): the option
``--ockpt-update-fingerprints``, under which `assert_same_format` rewrites fingerprint files
instead of failing."""

from __future__ import annotations

import os
from typing import Any


def pytest_addoption(parser: Any) -> None:
    parser.getgroup("ockpt").addoption(
        "--ockpt-update-fingerprints",
        action="store_true",
        help="ockpt.testing.assert_same_format: write each fingerprint file from its "
        "checkpoint instead of comparing (then review and commit the change)",
    )


def pytest_configure(config: Any) -> None:
    if config.getoption("ockpt_update_fingerprints"):
        from .formats import UPDATE_ENV

        os.environ[UPDATE_ENV] = "1"
