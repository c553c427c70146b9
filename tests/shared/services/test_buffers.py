"""CapacityBuffers through the real polls on the in-process world: room kept, chunks planned after real pods, status
written as it changes (and only then), /scale to 0 releases the room."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.world import capacity_buffers as store
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.memory_app import MemoryApp, memory_app

CHUNK_CPU = "900m"  # four chunks fit one D4 (3860m allocatable, 150m of DaemonSets), five do not

SCENARIO: dict[str, Any] = {
    "name": "buffers-unit", "cluster_name": "sandbox", "duration": "30m",
    "boot_delay": {"median": "60s", "p95": "90s", "min": "45s", "max": "120s"},
    "node_groups": [{
        "resource_group": "rg-sandbox-nodes", "name": "pool-d4", "vm_size": "Standard_D4s_v5",
        "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}, "min": 0, "max": 10, "initial": 2,
    }],
    "daemonsets": [{"name": "kube-proxy", "namespace": "kube-system", "requests": {"cpu": "150m", "memory": "128Mi"}}],
    "workloads": [],
}


def _app() -> MemoryApp:
    app = memory_app(SCENARIO)
    store.create_pod_template(app.world, "default", {"metadata": {"name": "chunk"}, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": CHUNK_CPU, "memory": "1Gi"}}}]}}})
    store.create_buffer(app.world, "default", {"metadata": {"name": "headroom"},
                                               "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 4}})
    return app


def _status(app: MemoryApp) -> dict[str, Any]:
    return store.get_buffer(app.world, "default", "headroom").get("status") or {}


def _conditions(app: MemoryApp) -> dict[str, str]:
    return {c["type"]: c["status"] for c in _status(app).get("conditions", ())}


def _scale(app: MemoryApp, replicas: int) -> None:
    store.replace_buffer(app.world, "default", "headroom", {"spec": {"replicas": replicas}}, subresource="scale")


def test_a_buffer_that_fits_free_room_is_ready_asks_for_nothing_and_keeps_its_node() -> None:
    app = _app()
    app.clock.advance(10)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert not result.plan.increases and not app.queued()
    status = _status(app)
    assert status["replicas"] == status["readyReplicas"] == 4
    assert _conditions(app) == {"ReadyForProvisioning": "True", "Provisioning": "True", "LimitedByQuotas": "False"}
    down = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    nodes = {n["metadata"]["name"] for n in app.world.k8s_list("nodes")}
    # The chunks are load on the node holding them (no moved pod may take that room): it is needed, the other not.
    assert len(nodes) == 2 and len(down.plan.unneeded) == 1


def test_status_is_written_only_when_it_changes() -> None:
    app = _app()
    app.clock.advance(10)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    version = store.get_buffer(app.world, "default", "headroom")["metadata"]["resourceVersion"]
    app.clock.advance(10)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert store.get_buffer(app.world, "default", "headroom")["metadata"]["resourceVersion"] == version


def test_scaling_the_buffer_up_asks_for_a_node_and_to_zero_releases_the_room() -> None:
    app = _app()
    app.clock.advance(10)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    _scale(app, 12)  # two nodes' worth are there; a third is needed
    app.clock.advance(10)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert [i.delta for i in result.plan.increases] == [1]
    assert all(key.startswith("default/capacitybuffer:headroom:") for key in result.plan.increases[0].pods)
    assert _status(app)["readyReplicas"] == 8 and _conditions(app)["Provisioning"] == "True"
    assert any(e.kind == "CapacityBuffer" and e.reason == "TriggeredScaleUp" for e in app.events())
    assert not any(e.kind == "Pod" for e in app.events())  # placeholders are no pods: no pod events
    _scale(app, 0)
    app.clock.advance(10)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert _status(app)["replicas"] == 0
    down = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    ready = {n["metadata"]["name"] for n in app.world.k8s_list("nodes")}
    assert ready <= set(down.plan.unneeded)  # no room held any more: every empty node may go


def test_a_missing_template_is_reported_in_status_and_plans_nothing() -> None:
    app = memory_app(SCENARIO)
    store.create_buffer(app.world, "default", {"metadata": {"name": "headroom"},
                                               "spec": {"podTemplateRef": {"name": "nope"}, "replicas": 3}})
    app.clock.advance(10)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert not result.plan.increases
    status = _status(app)
    assert _conditions(app)["ReadyForProvisioning"] == "False" and "nope" in status["conditions"][0]["message"]


@pytest.mark.parametrize("spec", [{"podTemplateRef": {"name": "x"}, "scalableRef": {"kind": "Deployment", "name": "y"},
                                   "replicas": 1},
                                  {"podTemplateRef": {"name": "x"}},
                                  {"podTemplateRef": {"name": "x"}, "replicas": -1}])
def test_the_sandbox_refuses_what_the_crd_refuses(spec: dict[str, Any]) -> None:
    app = memory_app(SCENARIO)
    with pytest.raises(Exception, match="invalid"):
        store.create_buffer(app.world, "default", {"metadata": {"name": "bad"}, "spec": spec})
