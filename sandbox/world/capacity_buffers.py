"""CapacityBuffers (autoscaling.x-k8s.io/v1beta1) and PodTemplates in the world's object store, with the API's rules.

What the API server does for a custom resource with the `status` and `scale` subresources (the CRD we ship,
infra/kubernetes/capacitybuffer-v1beta1.yaml): a write to the main resource changes spec and metadata only and
bumps `metadata.generation` when the spec changed; a write to `/status` changes status only; `/scale` reads and
writes `spec.replicas` as an autoscaling/v1 Scale (status.replicas from `.status.replicas`). Optimistic
concurrency on resourceVersion, as every replace. Nothing here acts on a buffer: only an autoscaler does.
The scenario's `capacity_buffers` timeline (sandbox.model.buffer_spec) creates and scales them on the world's clock.
"""

from __future__ import annotations

import copy
from typing import Any

from sandbox.model.buffer_spec import BufferActionSpec
from sandbox.world.core import WorldCore
from sandbox.world.errors import KubeError, not_found

BUFFERS = "capacitybuffers"
TEMPLATES = "podtemplates"
API_VERSION = "autoscaling.x-k8s.io/v1beta1"


def _invalid(name: str, message: str) -> KubeError:
    return KubeError(422, "Invalid", f'CapacityBuffer.autoscaling.x-k8s.io "{name}" is invalid: {message}')


def _validate_spec(name: str, spec: Any) -> None:
    """The CRD's schema and its CEL rules, as far as an autoscaler could trip over them."""
    if not isinstance(spec, dict):
        raise _invalid(name, "spec: Required value")
    for field in ("replicas", "percentage"):
        value = spec.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _invalid(name, f"spec.{field}: Invalid value: {value!r}: must be an integer >= 0")
    if spec.get("podTemplateRef") is not None and spec.get("scalableRef") is not None:
        raise _invalid(name, "spec: Invalid value: You must define either PodTemplateRef or ScalableRef, but not both")
    if spec.get("podTemplateRef") is not None and spec.get("replicas") is None and spec.get("limits") is None:
        raise _invalid(name, "spec: Invalid value: If X is set, replicas or limits must also be set")


def create_buffer(world: WorldCore, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    with world.lock:
        body = copy.deepcopy(obj)
        _validate_spec(str((body.get("metadata") or {}).get("name") or ""), body.get("spec"))
        body["apiVersion"], body["kind"] = API_VERSION, "CapacityBuffer"
        body.setdefault("metadata", {})["generation"] = 1
        body.pop("status", None)  # status is a subresource: a create sets none
        return world.k8s_create(BUFFERS, namespace, body)  # type: ignore[attr-defined,no-any-return]


def create_pod_template(world: WorldCore, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    with world.lock:
        body = copy.deepcopy(obj)
        body["apiVersion"], body["kind"] = "v1", "PodTemplate"
        body.setdefault("metadata", {})["generation"] = 1
        return world.k8s_create(TEMPLATES, namespace, body)  # type: ignore[attr-defined,no-any-return]


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The buffer's autoscaling/v1 Scale (specReplicasPath .spec.replicas, statusReplicasPath .status.replicas)."""
    meta = obj["metadata"]
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                     if k in meta},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas") or 0},
        "status": {"replicas": (obj.get("status") or {}).get("replicas") or 0},
    }


def get_buffer(world: WorldCore, namespace: str, name: str, *, subresource: str | None = None) -> dict[str, Any]:
    with world.lock:
        current = world._store.get(BUFFERS, namespace, name)
        if current is None:
            raise not_found(BUFFERS, name)
        return scale_of(current) if subresource == "scale" else copy.deepcopy(current)


def replace_buffer(world: WorldCore, namespace: str, name: str, new: dict[str, Any], *,
                   subresource: str | None = None) -> dict[str, Any]:
    """PUT (and PATCH's last step) on the buffer, its `status` or its `scale`."""
    with world.lock:
        current = world.k8s_current_for_write(BUFFERS, namespace, name, new)  # type: ignore[attr-defined]
        meta = new.get("metadata") or {}
        updated = copy.deepcopy(current)
        if subresource == "status":
            updated["status"] = copy.deepcopy(new.get("status") or {})
        elif subresource == "scale":
            replicas = (new.get("spec") or {}).get("replicas")
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                raise KubeError(422, "Invalid", f'Scale "{name}" is invalid: spec.replicas: must be an integer >= 0')
            updated.setdefault("spec", {})["replicas"] = replicas
        else:
            _validate_spec(name, new.get("spec"))
            updated["spec"] = copy.deepcopy(new["spec"])
            for field in ("labels", "annotations"):
                if field in meta:
                    updated["metadata"][field] = copy.deepcopy(meta[field])
        if updated.get("spec") != current.get("spec"):
            updated["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        if updated != current:
            world._store.put(BUFFERS, updated)
        stored = world._store.get(BUFFERS, namespace, name)
        return scale_of(stored) if subresource == "scale" else copy.deepcopy(stored)


def schedule_actions(world: WorldCore) -> None:
    """The scenario's `capacity_buffers` on the event queue; each is an arrival due until applied, so the world
    is not done while a buffer is still to be created or scaled."""
    for spec in world.scenario.capacity_buffers:
        world._push(spec.at, "buffer_action", spec)
        world._arrivals_due += 1


def apply_action(world: WorldCore, spec: BufferActionSpec) -> None:
    """Create the buffer with its PodTemplate, or write its `/scale`, as a user or a workload autoscaler would."""
    world._arrivals_due -= 1
    if spec.action == "scale":
        replace_buffer(world, spec.namespace, spec.name, {"spec": {"replicas": spec.replicas}}, subresource="scale")
        return
    container = {"name": "placeholder", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"requests": dict(spec.requests or {})}}
    create_pod_template(world, spec.namespace, {
        "metadata": {"name": spec.pod_template}, "template": {"spec": {"containers": [container]}}})
    create_buffer(world, spec.namespace, {
        "metadata": {"name": spec.name},
        "spec": {"podTemplateRef": {"name": spec.pod_template}, "replicas": spec.replicas}})
