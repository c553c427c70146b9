"""The small world the warm-standby tests share: one D4s_v5 group `rg-sb/pool` (min 1, max 10, one node), and the
executor run on every queued message as the clock advances."""

from __future__ import annotations

from typing import Any

from shared.services.executor import Executor
from tests.memory_app import MemoryApp

GROUP = "rg-sb/pool"


def standby_scenario(tags: dict[str, str]) -> dict[str, Any]:
    """The scenario of the one group, with its scale set's `tags`."""
    return {
        "name": "standby", "cluster_name": "standby", "arm_throttling": False,
        "boot_delay": {"min": "40s", "max": "60s"},
        "node_groups": [
            {"resource_group": "rg-sb", "name": "pool", "vm_size": "Standard_D4s_v5",
             "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 10, "initial": 1,
             "tags": tags},
        ],
    }


def run_executor(app: MemoryApp, *, seconds: float, step: float = 10.0) -> list[str]:
    """Run the executor on every visible message, `step` seconds at a time, with no poll; the outcomes."""
    executor, outcomes = Executor(app.ports, app.settings), []
    for _ in range(int(seconds / step)):
        app.clock.advance(step)
        for text in app.take_queued():
            outcomes.append(executor.execute(text, now=app.clock.now()).outcome)
    return outcomes
