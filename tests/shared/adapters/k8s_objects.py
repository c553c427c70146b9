"""Builders of Kubernetes API objects in their JSON shape, for adapter tests."""

from __future__ import annotations

from typing import Any


def container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "busybox", "resources": {"requests": requests}, **extra}


def pod_json(
    *,
    name: str = "p",
    namespace: str = "default",
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"containers": containers if containers is not None else [container("100m", "128Mi")]}
    if init_containers is not None:
        body_spec["initContainers"] = init_containers
    body_spec.update(spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": "2024-05-01T12:00:00Z",
            **(metadata or {}),
        },
        "spec": body_spec,
        "status": status if status is not None else {"phase": "Pending"},
    }


def node_json(
    *,
    name: str = "n",
    allocatable: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    spec: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2024-05-01T11:00:00Z", "resourceVersion": "7", **(metadata or {})},
        "spec": spec or {},
        "status": {
            "allocatable": allocatable if allocatable is not None else {"cpu": "3860m", "memory": "14Gi", "pods": "110"},
            "conditions": conditions if conditions is not None else [{"type": "Ready", "status": "True"}],
        },
    }
