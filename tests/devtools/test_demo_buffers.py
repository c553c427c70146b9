"""summary.json's capacity_buffers: each buffer at the end as the cluster holds it, spec beside the status the
autoscaler wrote, read through the same Cluster port the polls use."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from devtools.demo import buffers_at_end
from sandbox.world import capacity_buffers as store
from shared.services.pending import run_pending_poll
from tests.memory_app import memory_app

SCENARIO: dict[str, Any] = {
    "name": "demo-buffers", "duration": "30m",
    "node_groups": [{"resource_group": "rg", "name": "pool", "vm_size": "Standard_D4s_v5", "min": 0, "max": 4,
                     "initial": 1, "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}}],
}


def test_each_buffer_shows_its_spec_and_the_status_written_for_it() -> None:
    app = memory_app(SCENARIO)
    context = SimpleNamespace(ports=app.ports)
    assert buffers_at_end(context) == {}
    store.create_pod_template(app.world, "default", {"metadata": {"name": "chunk"}, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}})
    store.create_buffer(app.world, "default", {"metadata": {"name": "room"},
                                               "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 5}})
    unwritten = buffers_at_end(context)["default/room"]
    assert unwritten["spec_replicas"] == 5 and unwritten["replicas"] is None and unwritten["conditions"] == {}
    app.clock.advance(10)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    status = store.get_buffer(app.world, "default", "room")["status"]
    shown = buffers_at_end(context)["default/room"]
    assert (shown["replicas"], shown["ready_replicas"]) == (status["replicas"], status["readyReplicas"])
    assert shown["conditions"] == {c["type"]: f"{c['status']} ({c['reason']})" for c in status["conditions"]}
    assert shown["ready_replicas"] < shown["spec_replicas"]  # five chunks of 1 CPU do not fit one D4
