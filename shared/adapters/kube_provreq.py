"""ProvisioningRequests (autoscaling.x-k8s.io/v1) between the API's JSON and domain values.

Shared by the Kubernetes adapter and the replay's world-backed cluster. Decoding is defensive: a request whose spec
cannot be read comes back with `problem` naming the field (the planner marks it Failed, InvalidRequest), never an
exception that would stop the poll; its class is still read when it can be, so a request of another autoscaler's
class is left alone even when its spec is odd.

Status writes: the v1 status holds only `conditions` and `provisioningClassDetails`, and only an autoscaler writes
it. Without details, a JSON merge patch of the conditions (a merge patch replaces a list whole, so the given
conditions replace the old ones, and the details are left as they are); with details, a JSON patch that adds
`/status` (replacing it whole, so a detail no longer given is gone, which a merge patch of the map would keep). One
request either way and no resourceVersion to hold: the domain value carries none, and a GET-then-PUT with
optimistic concurrency would cost a read per write to guard against a writer there is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.adapters.kube_conditions import conditions_from_json, conditions_json, timestamp
from shared.domain import Condition, PodSet, ProvisioningRequest

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _string_map(raw: Any, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field} must be a map of strings, not {raw!r}")
    for key, value in raw.items():
        if not isinstance(value, str):
            raise ValueError(f"{field}.{key} must be a string, not {value!r}")
    return {str(key): value for key, value in raw.items()}


def _pod_sets(raw: Any) -> tuple[PodSet, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError("spec.podSets must be a non-empty list")
    sets = []
    for i, item in enumerate(raw):
        field = f"spec.podSets[{i}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{field} must be an object")
        count = item.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{field}.count must be an integer >= 1, not {count!r}")
        ref = item.get("podTemplateRef")
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
            raise ValueError(f"{field}.podTemplateRef.name is required")
        sets.append(PodSet(ref["name"], count))
    return tuple(sets)


def request_from_json(obj: Mapping[str, Any]) -> ProvisioningRequest:
    """A ProvisioningRequest as listed; a spec we cannot read sets `problem` rather than raising."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    generation = metadata.get("generation")
    raw_status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    try:
        details = _string_map(raw_status.get("provisioningClassDetails"), "status.provisioningClassDetails")
    except ValueError:
        details = {}  # ours to write: an odd one is rewritten, not a reason to refuse the request
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else None
    class_name = spec.get("provisioningClassName") if spec is not None else None
    base = ProvisioningRequest(
        namespace, name, class_name if isinstance(class_name, str) else "",
        created_at=timestamp(metadata.get("creationTimestamp")), uid=str(metadata.get("uid") or ""),
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        conditions=conditions_from_json(raw_status.get("conditions")), details=details)
    try:
        if spec is None:
            raise ValueError("spec is missing")
        if not isinstance(class_name, str) or not class_name:
            raise ValueError("spec.provisioningClassName is required")
        return ProvisioningRequest(
            namespace, name, class_name, pod_sets=_pod_sets(spec.get("podSets")), created_at=base.created_at,
            uid=base.uid, generation=base.generation,
            parameters=_string_map(spec.get("parameters"), "spec.parameters"),
            conditions=base.conditions, details=details)
    except ValueError as exc:
        return ProvisioningRequest(
            namespace, name, base.class_name, created_at=base.created_at, uid=base.uid, generation=base.generation,
            conditions=base.conditions, details=details, problem=f"spec cannot be read: {exc}")


def status_json(conditions: Sequence[Condition], details: Mapping[str, str] | None,
                *, current: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole status after the write: these conditions, and `details` (the current ones when None)."""
    kept = (current or {}).get("provisioningClassDetails") if details is None else details
    status: dict[str, Any] = {"conditions": conditions_json(conditions)}
    if kept is not None:
        status["provisioningClassDetails"] = dict(kept)
    return status


def status_patch(conditions: Sequence[Condition], details: Mapping[str, str] | None) -> tuple[str, Any]:
    """(content type, body) of the one PATCH of /status that makes the write (see the module docstring)."""
    if details is None:
        return MERGE_PATCH, {"status": {"conditions": conditions_json(conditions)}}
    return JSON_PATCH, [{"op": "add", "path": "/status", "value": status_json(conditions, details)}]
