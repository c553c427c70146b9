"""The status ConfigMap as the polls write it, read back as CA's YAML; on both apps of test_executor.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.shared.services.test_executor import App, MakeApp, make  # noqa: F401 (make: fixture)

STATUS = ("kube-system", "cluster-autoscaler-status")


@pytest.fixture
def app(make: MakeApp) -> App:
    return make(settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})


def _status(app: App) -> dict[str, Any]:
    data = app.context.ports.cluster.get_config_map(*STATUS)
    assert data is not None, "no status ConfigMap"
    return yaml.safe_load(data["status"])


def test_each_poll_writes_cas_status(app: App) -> None:
    ports, settings = app.context.ports, app.context.settings
    run_utilization_poll(ports, settings, now=app.clock.now())
    first = _status(app)
    assert first["autoscalerStatus"] == "Running"
    (pool,) = first["nodeGroups"]
    assert pool["name"] == "pool"
    health = pool["health"]
    assert (health["status"], health["cloudProviderTarget"], health["minSize"], health["maxSize"]) == ("Healthy", 3, 1, 5)
    assert health["nodeCounts"]["registered"]["ready"] == 3
    assert pool["scaleDown"]["status"] == "CandidatesPresent" and pool["scaleDown"]["candidates"] == 2
    assert first["clusterWide"]["scaleUp"]["status"] == "NoActivity"

    app.clock.advance(3600 + 5)  # four burst pods arrive and need new nodes
    run_pending_poll(ports, settings, now=app.clock.now())
    after = _status(app)
    assert after["nodeGroups"][0]["scaleUp"]["status"] == "Needed"
    # The scale-down section did not change status, so its transition time is the first poll's.
    assert after["clusterWide"]["scaleDown"]["lastTransitionTime"] == first["clusterWide"]["scaleDown"]["lastTransitionTime"]
    meta = app.world.k8s_get("configmaps", *STATUS)["metadata"]["annotations"]
    assert meta["cluster-autoscaler.kubernetes.io/last-updated"] == after["time"]


def test_status_configmap_can_be_moved_or_turned_off(make: MakeApp) -> None:
    app = make(settings={"STATUS_CONFIGMAP": "default/autoscaler-status"})
    run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert app.context.ports.cluster.get_config_map(*STATUS) is None
    assert "status" in (app.context.ports.cluster.get_config_map("default", "autoscaler-status") or {})


def test_the_utilisation_poll_counts_the_nodes_kept_for_want_of_a_slot() -> None:
    from shared.engine.reasons import KeptReason
    from shared.engine.scale_down import ScaleDownPlan
    from shared.services.utilization import waiting_for_slots

    from shared.domain import ClusterSnapshot
    from tests.builders import T0, group, node

    a, b = group("pool-a", target=2), group("pool-b", target=1)
    snapshot = ClusterSnapshot(taken_at=T0, nodes=(node("a0", group_name="pool-a"),
                                                   node("a1", group_name="pool-a", instance=1),
                                                   node("b0", group_name="pool-b")), pods=(), groups=(a, b))
    plan = ScaleDownPlan(unneeded={}, removals=(), kept={
        "a0": KeptReason("MaxParallelismReached", "slots"), "a1": KeptReason("NotUnneededLongEnough", "young"),
        "b0": KeptReason("MaxParallelismReached", "slots")})
    assert waiting_for_slots(snapshot, plan) == {a.id: 1, b.id: 1}
