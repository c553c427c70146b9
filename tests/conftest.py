"""Fixtures shared by the whole suite live in tests/fixtures/ and are registered here.

`make test` runs the suite on pytest-xdist workers (`-n auto --dist loadfile`): each test file runs on one
worker, so a module-scoped fixture (an end-to-end scenario run shared by its tests, the checkov report)
is set up once. (`--dist loadgroup` would be finer, but pytest-xdist 3.8 cannot tag node ids under
pytest 9.2, whose node ids are read-only: its groups are silently ignored.) Workers share one Azurite (a
file-locked lease) with a table and queue per test, and start their own sandbox on a free port.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = [
    "tests.fixtures.azurite",
    "tests.fixtures.sandbox",
]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    # Measured: an end-to-end scenario keeps a core 24% busy (tests/e2e/test_burst.py: 13 s CPU in 56 s wall),
    # waiting on the sandbox's accelerated clock, so two workers per core keep the cores busy while the
    # long scenarios run side by side. PYTEST_XDIST_AUTO_NUM_WORKERS overrides it.
    override = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if override:
        return int(override)
    return 2 * (os.cpu_count() or 1)
