"""The sandbox's CapacityBuffer API through the official client and our adapter: list, status and /scale
subresources, generation on spec changes, and a buffer that cannot be read reported rather than raised."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import BufferCondition, BufferStatus
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.sandbox.helpers import scenario

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1beta1", "capacitybuffers"


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(scenario(workloads=[]), clock=ManualClock(SANDBOX_START))


def _buffer(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CapacityBuffer", "metadata": {"name": name}, "spec": spec}


def test_buffers_round_trip_through_the_adapter_and_scale_to_zero(server: SandboxServer) -> None:
    api = kube_api_client(server)
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    core.create_namespaced_pod_template("default", {"metadata": {"name": "chunk"}, "template": {"spec": {
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}]}}})
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                           _buffer("room", {"podTemplateRef": {"name": "chunk"}, "replicas": 3}))
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                           _buffer("odd", {"podTemplateRef": {"name": "chunk"}, "replicas": 1,
                                                           "limits": {"cpu": "lots"}}))
    cluster = KubernetesCluster(api)
    buffers = {b.name: b for b in cluster.list_capacity_buffers() or []}
    assert buffers["room"].replicas == 3 and buffers["room"].generation == 1 and not buffers["room"].problem
    assert "limits" in buffers["odd"].problem  # reported on the buffer, not raised
    template = cluster.get_pod_template("default", "chunk")
    assert template is not None and template.pod.requests.cpu_milli == 500
    assert cluster.get_pod_template("default", "missing") is None

    status = BufferStatus(replicas=3, ready_replicas=1, pod_template="chunk", pod_template_generation=1,
                          conditions=(BufferCondition("Provisioning", "True", "ScaleUpTriggered", "", SANDBOX_START, 1),))
    cluster.update_capacity_buffer_status("default", "room", status=status)
    cluster.update_capacity_buffer_status("default", "gone", status=status)  # a missing buffer: a no-op
    read = {b.name: b for b in cluster.list_capacity_buffers() or []}["room"]
    assert read.status == status and read.generation == 1  # a status write is no spec change

    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "room")
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "room", {"spec": {"replicas": 0}},
                                                _content_type="application/merge-patch+json")
    after = {b.name: b for b in cluster.list_capacity_buffers() or []}["room"]
    assert after.replicas == 0 and after.generation == 2 and after.status == status


def test_the_api_refuses_a_buffer_the_crd_refuses(server: SandboxServer) -> None:
    custom = k8s.CustomObjectsApi(kube_api_client(server))
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _buffer(
            "both", {"podTemplateRef": {"name": "a"}, "scalableRef": {"kind": "Deployment", "name": "b"},
                     "replicas": 1}))
    assert refused.value.status == 422
