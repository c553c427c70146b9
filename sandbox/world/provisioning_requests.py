"""ProvisioningRequests (autoscaling.x-k8s.io/v1) in the world's object store, with the API's rules.

What the API server does for the CRD we ship (infra/kubernetes/provisioningrequest-v1.yaml, kubernetes/autoscaler's
schema): the schema is checked on every write, giving the API server's 422 (`<Kind>.<group> "<name>" is invalid:
<field>: <why>`, the causes in `details`); the spec is immutable (the CRD's `self == oldSelf` rules on
provisioningClassName, podSets and parameters), so `metadata.generation` stays 1; a write to the main resource
changes metadata only and keeps status; a write to `/status` changes status only (its conditions checked like a
metav1.Condition list keyed by type). Optimistic concurrency on resourceVersion, as every replace. Nothing here acts
on a request: only an autoscaler (and the Kueue double, as a user) does. PodTemplates are the buffers' store
(`sandbox.world.capacity_buffers.create_pod_template`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from sandbox.world.core import WorldCore
from sandbox.world.errors import KubeError

REQUESTS = "provisioningrequests"
GROUP = "autoscaling.x-k8s.io"
API_VERSION = f"{GROUP}/v1"
KIND = "ProvisioningRequest"

# The CRD's limits (openAPIV3Schema of v1).
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
MAX_POD_SETS = 32
MAX_PARAMETERS, MAX_PARAMETER_LENGTH = 100, 255
MAX_DETAILS, MAX_DETAIL_LENGTH = 64, 32768
_INT32_MAX = 2**31 - 1


class _Invalid(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _refusal(name: str, problems: list[_Invalid]) -> KubeError:
    """The API server's 422 for a custom resource: every problem in the message and as a cause."""
    text = ", ".join(str(p) for p in problems)
    if len(problems) > 1:
        text = f"[{text}]"
    causes = [{"reason": "FieldValueRequired" if p.message.startswith("Required value") else "FieldValueInvalid",
               "message": p.message, "field": p.field} for p in problems]
    return KubeError(422, "Invalid", f'{KIND}.{GROUP} "{name}" is invalid: {text}',
                     {"name": name, "group": GROUP, "kind": KIND, "causes": causes})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_string_map(value: Any, field: str, *, max_items: int, max_length: int) -> list[_Invalid]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [_Invalid(field, f'Invalid value: "{type(value).__name__}": {field} in body must be of type object')]
    problems = [_Invalid(f"{field}.{key}", f"Invalid value: {item!r}: {field}.{key} in body must be of type string")
                for key, item in value.items() if not isinstance(item, str)]
    problems += [_Invalid(f"{field}.{key}", f"Too long: may not be more than {max_length} bytes")
                 for key, item in value.items() if isinstance(item, str) and len(item.encode()) > max_length]
    if len(value) > max_items:
        problems.append(_Invalid(field, f"Too many: {len(value)}: must have at most {max_items} items"))
    return problems


def _check_spec(spec: Any) -> list[_Invalid]:
    """The v1 schema of spec: provisioningClassName and podSets required, each podSet a count >= 1 and a
    podTemplateRef with a valid name, parameters a map of short strings."""
    if not isinstance(spec, Mapping):
        return [_Invalid("spec", "Required value")]
    problems: list[_Invalid] = []
    class_name = spec.get("provisioningClassName")
    if class_name is None or class_name == "":
        problems.append(_Invalid("spec.provisioningClassName", "Required value"))
    elif not isinstance(class_name, str) or len(class_name) > 253 or not _DNS_SUBDOMAIN.match(class_name):
        problems.append(_Invalid("spec.provisioningClassName",
                                 f"Invalid value: {class_name!r}: must be a lowercase DNS subdomain of at most 253 "
                                 "characters"))
    pod_sets = spec.get("podSets")
    if pod_sets is None:
        problems.append(_Invalid("spec.podSets", "Required value"))
    elif not isinstance(pod_sets, list):
        problems.append(_Invalid("spec.podSets", "Invalid value: spec.podSets in body must be of type array"))
    elif not 1 <= len(pod_sets) <= MAX_POD_SETS:
        problems.append(_Invalid("spec.podSets", f"Invalid value: {len(pod_sets)}: must have between 1 and "
                                                 f"{MAX_POD_SETS} items"))
    else:
        for i, pod_set in enumerate(pod_sets):
            problems += _check_pod_set(pod_set, f"spec.podSets[{i}]")
    problems += _check_string_map(spec.get("parameters"), "spec.parameters", max_items=MAX_PARAMETERS,
                                  max_length=MAX_PARAMETER_LENGTH)
    return problems


def _check_pod_set(pod_set: Any, field: str) -> list[_Invalid]:
    if not isinstance(pod_set, Mapping):
        return [_Invalid(field, f"Invalid value: {field} in body must be of type object")]
    problems = []
    count = pod_set.get("count")
    if count is None:
        problems.append(_Invalid(f"{field}.count", "Required value"))
    elif not _is_int(count):
        problems.append(_Invalid(f"{field}.count", f"Invalid value: {count!r}: {field}.count in body must be of "
                                                   "type integer"))
    elif not 1 <= count <= _INT32_MAX:
        problems.append(_Invalid(f"{field}.count", f"Invalid value: {count}: {field}.count in body should be "
                                                   "greater than or equal to 1"))
    ref = pod_set.get("podTemplateRef")
    if ref is None:
        problems.append(_Invalid(f"{field}.podTemplateRef", "Required value"))
    elif not isinstance(ref, Mapping) or not ref.get("name"):
        problems.append(_Invalid(f"{field}.podTemplateRef.name", "Required value"))
    elif not isinstance(ref["name"], str) or len(ref["name"]) > 253 or not _DNS_SUBDOMAIN.match(ref["name"]):
        problems.append(_Invalid(f"{field}.podTemplateRef.name",
                                 f"Invalid value: {ref['name']!r}: must be a lowercase DNS subdomain"))
    return problems


def _check_status(status: Any) -> list[_Invalid]:
    """The v1 schema of status: metav1.Conditions (a list map keyed by type) and provisioningClassDetails."""
    if status is None:
        return []
    if not isinstance(status, Mapping):
        return [_Invalid("status", "Invalid value: status in body must be of type object")]
    problems: list[_Invalid] = []
    conditions = status.get("conditions")
    if conditions is not None and not isinstance(conditions, list):
        problems.append(_Invalid("status.conditions", "Invalid value: status.conditions in body must be of type array"))
    seen: set[str] = set()
    for i, condition in enumerate(conditions if isinstance(conditions, list) else ()):
        field = f"status.conditions[{i}]"
        if not isinstance(condition, Mapping):
            problems.append(_Invalid(field, f"Invalid value: {field} in body must be of type object"))
            continue
        for required in ("type", "status", "reason", "message", "lastTransitionTime"):
            if condition.get(required) is None:
                problems.append(_Invalid(f"{field}.{required}", "Required value"))
        kind, state, reason = condition.get("type"), condition.get("status"), condition.get("reason")
        if kind is not None and (not isinstance(kind, str) or not _CONDITION_TYPE.match(kind)):
            problems.append(_Invalid(f"{field}.type", f"Invalid value: {kind!r}: must be CamelCase"))
        if isinstance(kind, str) and kind in seen:
            problems.append(_Invalid(field, f'Duplicate value: map[string]interface {{}}{{"type":"{kind}"}}'))
        seen.add(str(kind))
        if state is not None and state not in ("True", "False", "Unknown"):
            problems.append(_Invalid(f"{field}.status", f'Unsupported value: {state!r}: supported values: "True", '
                                                        '"False", "Unknown"'))
        if reason is not None and (not isinstance(reason, str) or len(reason) > 1024 or not _REASON.match(reason)):
            problems.append(_Invalid(f"{field}.reason", f"Invalid value: {reason!r}: must be a non-empty CamelCase "
                                                        "identifier"))
        message = condition.get("message")
        if message is not None and (not isinstance(message, str) or len(message) > 32768):
            problems.append(_Invalid(f"{field}.message", "Invalid value: must be a string of at most 32768 bytes"))
        since = condition.get("lastTransitionTime")
        if since is not None and (not isinstance(since, str) or not _RFC3339.match(since)):
            problems.append(_Invalid(f"{field}.lastTransitionTime",
                                     f"Invalid value: {since!r}: must be an RFC 3339 date-time"))
        generation = condition.get("observedGeneration")
        if generation is not None and (not _is_int(generation) or generation < 0):
            problems.append(_Invalid(f"{field}.observedGeneration",
                                     f"Invalid value: {generation!r}: must be an integer >= 0"))
    problems += _check_string_map(status.get("provisioningClassDetails"), "status.provisioningClassDetails",
                                  max_items=MAX_DETAILS, max_length=MAX_DETAIL_LENGTH)
    return problems


def create_provisioning_request(world: WorldCore, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """POST: the schema checked, no status (a subresource: a create sets none), generation 1."""
    with world.lock:
        body = copy.deepcopy(obj)
        name = str((body.get("metadata") or {}).get("name") or (body.get("metadata") or {}).get("generateName") or "")
        problems = _check_spec(body.get("spec"))
        if problems:
            raise _refusal(name, problems)
        body["apiVersion"], body["kind"] = API_VERSION, KIND
        body.setdefault("metadata", {})["generation"] = 1
        body.pop("status", None)
        return world.k8s_create(REQUESTS, namespace, body)  # type: ignore[attr-defined,no-any-return]


def get_provisioning_request(world: WorldCore, namespace: str, name: str) -> dict[str, Any] | None:
    """A copy of the stored request, None when there is none."""
    with world.lock:
        current = world._store.get(REQUESTS, namespace, name)
        return None if current is None else copy.deepcopy(current)


def replace_provisioning_request(world: WorldCore, namespace: str, name: str, new: dict[str, Any], *,
                                 subresource: str | None = None) -> dict[str, Any]:
    """PUT (and PATCH's last step) on the request or its `status`."""
    with world.lock:
        current = world.k8s_current_for_write(REQUESTS, namespace, name, new)  # type: ignore[attr-defined]
        meta = new.get("metadata") or {}
        updated = copy.deepcopy(current)
        if subresource == "status":
            status = new.get("status")
            problems = _check_status(status)
            if problems:
                raise _refusal(name, problems)
            updated["status"] = copy.deepcopy(status or {})
        else:
            spec = new.get("spec")
            problems = _check_spec(spec)
            old = current.get("spec") or {}
            if not problems and isinstance(spec, Mapping):
                problems = [_Invalid(f"spec.{field}", f'Invalid value: "{_json_type(spec.get(field))}": '
                                                      "Value is immutable")
                            for field in ("provisioningClassName", "podSets", "parameters")
                            if spec.get(field) != old.get(field)]
            if problems:
                raise _refusal(name, problems)
            for field in ("labels", "annotations", "ownerReferences", "finalizers"):
                if field in meta:
                    updated["metadata"][field] = copy.deepcopy(meta[field])
                else:
                    updated["metadata"].pop(field, None)
        if updated != current:
            world._store.put(REQUESTS, updated)
        return copy.deepcopy(world._store.get(REQUESTS, namespace, name))


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "string" if isinstance(value, str) else "null"
