"""CapacityBuffers (autoscaling.x-k8s.io/v1beta1) and the objects they refer to, between the API's JSON and domain values.

Shared by the Kubernetes adapter and the replay's world-backed cluster. Decoding is defensive: a buffer whose spec
cannot be read comes back with `problem` naming the field (its status says so and the planner skips it), never an
exception that would stop the poll.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.adapters.kube_conditions import conditions_from_json, conditions_json
from shared.domain import (
    ACTIVE_CAPACITY,
    BufferStatus,
    BufferTemplate,
    CapacityBuffer,
    ScalableRef,
)
from shared.quantities import parse_count, parse_cpu_milli, parse_memory_bytes

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1beta1"
PLURAL = "capacitybuffers"

# scalableRef kinds whose pod template and /scale we read: kind -> (API group, plural).
WORKLOADS: Mapping[str, tuple[str, str]] = {
    "Deployment": ("apps", "deployments"),
    "ReplicaSet": ("apps", "replicasets"),
    "StatefulSet": ("apps", "statefulsets"),
    "Job": ("batch", "jobs"),
}


def _optional_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer, not {value!r}")
    if value < 0:
        raise ValueError(f"{field} must not be negative, not {value}")
    return value


def _limits(raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"spec.limits must be a map of quantities, not {raw!r}")
    limits = {}
    for name, text in raw.items():
        try:
            limits[str(name)] = _quantity(str(name), str(text))
        except ValueError as exc:
            raise ValueError(f"spec.limits.{name}: {exc}") from None
    return limits


def _quantity(name: str, quantity: str) -> int:
    if name == "cpu":
        return parse_cpu_milli(quantity)
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        return parse_memory_bytes(quantity)
    return parse_count(quantity)


def status_from_json(raw: Any) -> BufferStatus:
    """The status as stored; anything unreadable is dropped (we write it afresh)."""
    if not isinstance(raw, Mapping):
        return BufferStatus()
    ref = raw.get("podTemplateRef")

    def number(name: str) -> int | None:
        value = raw.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return BufferStatus(
        replicas=number("replicas"), ready_replicas=number("readyReplicas"),
        pod_template=str(ref["name"]) if isinstance(ref, Mapping) and ref.get("name") else None,
        pod_template_generation=number("podTemplateGeneration"),
        strategy=str(raw["provisioningStrategy"]) if raw.get("provisioningStrategy") else None,
        conditions=conditions_from_json(raw.get("conditions")),
    )


def buffer_from_json(obj: Mapping[str, Any]) -> CapacityBuffer:
    """A CapacityBuffer as listed; a spec we cannot read sets `problem` rather than raising."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    generation = metadata.get("generation") if isinstance(metadata.get("generation"), int) else 0
    base = CapacityBuffer(namespace, name, uid=str(metadata.get("uid") or ""), generation=generation,
                          status=status_from_json(obj.get("status")))
    spec = obj.get("spec")
    try:
        if not isinstance(spec, Mapping):
            raise ValueError("spec is missing")
        template_ref, scalable = spec.get("podTemplateRef"), spec.get("scalableRef")
        template_name = None
        if template_ref is not None:
            if not isinstance(template_ref, Mapping) or not template_ref.get("name"):
                raise ValueError("spec.podTemplateRef.name is required")
            template_name = str(template_ref["name"])
        ref = None
        if scalable is not None:
            if not isinstance(scalable, Mapping) or not scalable.get("kind") or not scalable.get("name"):
                raise ValueError("spec.scalableRef needs kind and name")
            ref = ScalableRef(str(scalable.get("apiGroup") or ""), str(scalable["kind"]), str(scalable["name"]))
        return CapacityBuffer(
            namespace, name, uid=base.uid, generation=generation,
            strategy=str(spec.get("provisioningStrategy") or ACTIVE_CAPACITY),
            pod_template=template_name, scalable=ref,
            replicas=_optional_int(spec.get("replicas"), "spec.replicas"),
            percentage=_optional_int(spec.get("percentage"), "spec.percentage"),
            limits=_limits(spec.get("limits")), status=base.status,
        )
    except ValueError as exc:
        return CapacityBuffer(namespace, name, uid=base.uid, generation=generation, status=base.status,
                              problem=f"spec cannot be read: {exc}")


def status_json(status: BufferStatus) -> dict[str, Any]:
    """The status subresource's body (a merge patch: None removes a field we no longer set)."""
    return {
        "replicas": status.replicas,
        "readyReplicas": status.ready_replicas,
        "podTemplateRef": {"name": status.pod_template} if status.pod_template else None,
        "podTemplateGeneration": status.pod_template_generation,
        "provisioningStrategy": status.strategy,
        "conditions": conditions_json(status.conditions),
    }


def template_from_json(obj: Mapping[str, Any], kind: str) -> BufferTemplate:
    """The pod shape of a PodTemplate (`template`) or of a workload (`spec.template`)."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    template = obj.get("template") if kind == "PodTemplate" else (obj.get("spec") or {}).get("template")
    if not isinstance(template, Mapping):
        raise ValueError(f"{kind} {metadata.get('name', '?')} has no pod template")
    from shared.adapters.kubernetes import pod_from_json  # the one reading of a pod spec (imports this module)

    generation = metadata.get("generation") if isinstance(metadata.get("generation"), int) else 0
    shape = {"metadata": {"labels": (template.get("metadata") or {}).get("labels") or {}},
             "spec": template.get("spec") or {}}
    return BufferTemplate(pod_from_json(shape), str(metadata.get("name") or ""), generation)


def scale_replicas(obj: Mapping[str, Any], kind: str) -> int:
    """Current replicas: a /scale's status.replicas (spec's while status has none); a Job's parallelism."""
    if kind == "Job":
        value = (obj.get("spec") or {}).get("parallelism")
        return value if isinstance(value, int) else 1
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    value = status.get("replicas", spec.get("replicas"))
    if not isinstance(value, int):
        raise ValueError(f"{kind} /scale has no replicas")
    return value
