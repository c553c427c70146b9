"""The pending poll notes each group's demand in its demand row and returns its forecast (services.demand)."""

from __future__ import annotations

from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-demand/pool"


def _app() -> MemoryApp:
    return memory_app({
        "name": "demand", "cluster_name": "demand", "arm_throttling": False, "boot_delay": "75s",
        "node_groups": [{"resource_group": "rg-demand", "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": 1, "max": 10, "initial": 1}],
        # Four pods of 3 CPU: one fits the first node, three more nodes are asked for.
        "workloads": [{"name": "job", "kind": "Job", "count": 4, "at": "5s", "spread": "0s", "duration": "30m",
                       "requests": {"cpu": "3", "memory": "2Gi"}}],
    }, settings={"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s"})


def test_the_poll_notes_the_nodes_asked_for_until_they_are_there() -> None:
    app = _app()
    executor = Executor(app.ports, app.settings)
    peaks = []
    for _ in range(12):  # two minutes of polls: the scale-up, its nodes booting, then Ready
        app.clock.advance(10)
        result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
        for text in app.take_queued():
            executor.execute(text, now=app.clock.now())
        peaks.append(app.ports.state.get_demand(GROUP).peaks[-1])
        assert set(result.forecasts) == {GROUP}
    assert max(peaks) == 3  # the three new nodes, seen whole while they boot
    assert peaks == sorted(peaks)  # an hour's peak never falls
    assert len(app.ports.state.get_demand(GROUP).peaks) == 1  # one hour so far
