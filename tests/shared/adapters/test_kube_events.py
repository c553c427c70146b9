"""The Event sink names the involved object's API version by its kind, so `kubectl describe` finds the Events."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes.client import ApiClient

from shared.adapters.kube_events import KubernetesEventSink
from shared.ports import ClusterEvent


class _Core:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.bodies.append(body)


@pytest.mark.parametrize(("kind", "api_version"), [
    ("Pod", "v1"),
    ("Node", "v1"),
    ("ConfigMap", "v1"),
    ("CapacityBuffer", "autoscaling.x-k8s.io/v1beta1"),
    ("ProvisioningRequest", "autoscaling.x-k8s.io/v1"),
])
def test_the_involved_object_carries_its_kinds_api_version(kind: str, api_version: str) -> None:
    sink = KubernetesEventSink(ApiClient())
    core = _Core()
    sink._core = core  # type: ignore[assignment]
    sink.emit(ClusterEvent("ml", kind, "train-1", "uid-1", "Provisioned", "capacity is provisioned",
                           datetime(2026, 11, 29, tzinfo=timezone.utc)))
    (body,) = core.bodies
    assert body["involvedObject"] == {"apiVersion": api_version, "kind": kind, "namespace": "ml", "name": "train-1",
                                      "uid": "uid-1"}
    assert body["metadata"]["namespace"] == "ml" and body["reason"] == "Provisioned"
