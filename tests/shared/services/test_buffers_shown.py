"""CapacityBuffers where users look: the status ConfigMap's clusterWide.capacityBuffers and `plan`'s lines say what
the buffer's own status says (replicas, readyReplicas, conditions), through the real polls on the in-process world."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.world import capacity_buffers as store
from shared import yaml_text
from shared.services.pending import run_pending_poll
from shared.services.plan import plan_now, render_text
from shared.services.utilization import run_utilization_poll
from tests.memory_app import MemoryApp, memory_app

SCENARIO: dict[str, Any] = {
    "name": "buffers-shown", "cluster_name": "sandbox", "duration": "30m",
    "node_groups": [{
        "resource_group": "rg-sandbox-nodes", "name": "pool-d4", "vm_size": "Standard_D4s_v5",
        "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}, "min": 0, "max": 10, "initial": 1,
    }],
    "daemonsets": [{"name": "kube-proxy", "namespace": "kube-system", "requests": {"cpu": "150m", "memory": "128Mi"}}],
    "workloads": [],
}
KEY = "default/headroom"


def _app(replicas: int) -> MemoryApp:
    """One D4 holds four chunks of 900m: replicas over four ask for a node, four or fewer are ready there."""
    app = memory_app(SCENARIO)
    store.create_pod_template(app.world, "default", {"metadata": {"name": "chunk"}, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "900m", "memory": "1Gi"}}}]}}})
    store.create_buffer(app.world, "default", {"metadata": {"name": "headroom"},
                                               "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": replicas}})
    app.clock.advance(10)
    return app


def _buffer_lines(app: MemoryApp) -> dict[str, Any]:
    """What the buffer's own status says, in the shape the status and plan show."""
    status = store.get_buffer(app.world, "default", "headroom")["status"]
    return {"replicas": status["replicas"], "ready": status["readyReplicas"],
            "conditions": {c["type"]: f"{c['status']} ({c['reason']})" for c in status["conditions"]}}


def _configmap_doc(app: MemoryApp) -> dict[str, Any]:
    namespace, name = app.settings.status_configmap or ("", "")
    data = app.world.k8s_get("configmaps", namespace, name)["data"]["status"]
    doc = yaml_text.safe_load(data)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("replicas", [2, 4, 7])
def test_the_status_configmap_shows_each_buffer_as_its_status_says(replicas: int) -> None:
    app = _app(replicas)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    shown = _configmap_doc(app)["clusterWide"]["capacityBuffers"]
    assert shown == {KEY: _buffer_lines(app)}
    assert shown[KEY]["replicas"] == replicas and shown[KEY]["ready"] <= replicas
    # The utilisation poll plans no scale-up: it keeps the pending poll's lines rather than dropping them.
    app.clock.advance(10)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert _configmap_doc(app)["clusterWide"]["capacityBuffers"] == shown


@pytest.mark.parametrize("replicas", [2, 7])
def test_plan_prints_each_buffer_beside_the_scale_up_it_asks_for(replicas: int) -> None:
    app = _app(replicas)
    report = plan_now(app.ports, app.settings, now=app.clock.now(), state=app.ports.state)
    data = report.as_dict()
    lines = data["capacity_buffers"][KEY]
    assert lines["replicas"] == replicas
    assert bool(data["scale_up"]) == (lines["ready"] < replicas)  # a buffer short of room is what asks for a node
    text = render_text(report)
    assert f"  {KEY}: {lines['ready']} of {replicas} ready" in text
    assert all(f"{kind}={value.split()[0]}" in text for kind, value in lines["conditions"].items())
    for increase in data["scale_up"]:  # the chunks are named as such, not as pending pods (there are none)
        assert f"for {len(increase['pods'])} capacity buffer chunk(s)" in text and "pending pod(s)" not in text
    # plan writes nothing: the buffer's status is still unwritten.
    assert "status" not in store.get_buffer(app.world, "default", "headroom")
