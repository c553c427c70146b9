"""The utilisation poll keeps a node for pending pods only where the pending poll's simulation would put them."""

from __future__ import annotations

from shared.engine import reasons
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.shared.services.test_executor import MakeApp, make  # noqa: F401 (make: fixture; on both apps)

# Fits a node's allocatable (3860m), never its free room once kube-proxy (100m) runs there, nor a new node's.
TOO_BIG = {"name": "big", "kind": "ReplicaSet", "count": 1, "requests": {"cpu": "3800m", "memory": "1Gi"}}


def test_a_pod_no_node_or_group_can_hold_keeps_no_idle_node(make: MakeApp) -> None:
    app = make(workloads=(TOO_BIG,), settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    ports, settings = app.context.ports, app.context.settings
    _, idle = app.busy_and_idle()
    pending = run_pending_poll(ports, settings, now=app.clock.now())
    assert pending.pending == 1 and not pending.plan.increases
    (why,) = pending.plan.unplaceable.values()  # reported, with the reason per group
    assert why.startswith("rg-exec/pool: ") and "Insufficient cpu" in why, why

    result = run_utilization_poll(ports, settings, now=app.clock.now())
    assert set(idle) <= set(result.plan.unneeded)
    assert not [n for n, r in result.plan.kept.items() if r.code == reasons.PENDING_PODS_COULD_USE], result.plan.kept
