"""The pending poll measures each group's boots (engine.idle) and break-even mode removes idle nodes after one."""

from __future__ import annotations

from typing import Any

import pytest

from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-idle/pool"
BOOT_S = 75


def _app(**settings: str) -> MemoryApp:
    return memory_app({
        "name": "idle", "cluster_name": "idle", "arm_throttling": False, "boot_delay": f"{BOOT_S}s",
        "delete_delay": "20s",
        "node_groups": [{"resource_group": "rg-idle", "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": 1, "max": 10, "initial": 1}],
        # Three pods of 3 CPU: one fits the first node, two more nodes are needed; they run 4 minutes.
        "workloads": [{"name": "job", "kind": "Job", "count": 3, "at": "5s", "spread": "0s", "duration": "4m",
                       "requests": {"cpu": "3", "memory": "2Gi"}}],
    }, settings={"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", **settings})


def _scale_up_and_wait(app: MemoryApp) -> Any:
    app.clock.advance(10)
    first = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert [i.new_target for i in first.plan.increases] == [3]
    app.run_actions()
    assert app.ports.state.get_group(GROUP).boot_requests[0][1:] == (2, 2)  # two new instances, no node yet
    for _ in range(8):  # the pending poll every 30 s, as its schedule
        app.clock.advance(30)
        run_pending_poll(app.ports, app.settings, now=app.clock.now())
    return app.ports.state.get_group(GROUP)


def test_the_pending_poll_measures_each_new_node_from_its_scale_up() -> None:
    state = _scale_up_and_wait(_app())
    assert state.boots == (BOOT_S,)  # the request's median node's, from the request to its registration
    assert state.boot_requests == ()


@pytest.mark.parametrize("mode,removed", [("break-even", True), ("fixed", False)])
def test_break_even_removes_a_node_idle_for_longer_than_its_measured_boot(mode: str, removed: bool) -> None:
    app = _app(SCALE_DOWN_IDLE_MODE=mode)
    _scale_up_and_wait(app)
    app.clock.advance(240)  # the Jobs end
    nodes = len(app.ports.cluster.list_nodes())
    for _ in range(4):  # four minutes of utilisation polls: past 75 s idle, short of the fixed 10 minutes
        app.clock.advance(60)
        run_utilization_poll(app.ports, app.settings, now=app.clock.now())
        app.run_actions()
    assert (len(app.ports.cluster.list_nodes()) < nodes) is removed


@pytest.mark.parametrize("mode,unneeded_s", [("break-even", BOOT_S), ("fixed", 600)])
def test_plan_shows_when_each_unneeded_node_becomes_removable_by_its_groups_time(mode: str, unneeded_s: int) -> None:
    from datetime import datetime, timedelta

    from shared.services.plan import plan_now

    app = _app(SCALE_DOWN_IDLE_MODE=mode)
    _scale_up_and_wait(app)
    app.clock.advance(300)  # the Jobs are done: the new nodes are empty
    report = plan_now(app.ports, app.settings, now=app.clock.now(), state=app.ports.state).as_dict()
    assert report["unneeded"], report["kept"]
    for entry in report["unneeded"].values():
        since, removable = (datetime.fromisoformat(entry[k]) for k in ("since", "removable_from"))
        assert removable - since == timedelta(seconds=unneeded_s)  # the group's measured boot, or the 10 min
