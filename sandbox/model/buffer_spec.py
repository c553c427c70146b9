"""CapacityBuffers on a scenario's timeline: the top-level `capacity_buffers` section.

    "capacity_buffers": [
      {"at": "0s", "action": "create", "namespace": "default", "name": "web-headroom", "replicas": 4,
       "requests": {"cpu": "900m", "memory": "3Gi"}},
      {"at": "25m", "action": "scale", "namespace": "default", "name": "web-headroom", "replicas": 0}
    ]

`create` writes a PodTemplate (`<name>-template` unless `pod_template` names it) holding one container with
`requests`, then a CapacityBuffer (autoscaling.x-k8s.io/v1beta1) whose `podTemplateRef` names it and whose
`spec.replicas` is `replicas`: what a user applies with kubectl. `scale` writes the buffer's `/scale` subresource
as `kubectl scale capacitybuffer` or an autoscaler would. Pure values: parsed here, applied by
sandbox.world.capacity_buffers on the world's clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.model.spec_fields import FieldError, choice, duration, listed, obj, text, typename, whole
from sandbox.model.units import parse_bytes, parse_cpu_milli

ACTIONS = ("create", "scale")
FIELD = "capacity_buffers"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label, as object names in a namespace
_CREATE = frozenset({"at", "action", "namespace", "name", "replicas", "requests", "pod_template"})
_SCALE = frozenset({"at", "action", "namespace", "name", "replicas"})


@dataclass(frozen=True, slots=True)
class BufferActionSpec:
    """At `at` (sim seconds), create the buffer (and its PodTemplate) or set its replicas through `/scale`."""

    at: float
    action: Literal["create", "scale"]
    namespace: str
    name: str
    replicas: int
    requests: Mapping[str, str] | None = None  # create only: the template's container requests, as quantities
    pod_template: str = ""  # create only: the PodTemplate's name

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _name(value: Any, path: str) -> str:
    name = text(value, path)
    if not _NAME.match(name):
        raise FieldError(path, f"{name!r} is not an object name (lowercase letters, digits and '-', at most 63)")
    return name


def _requests(value: Any, path: str) -> dict[str, str]:
    fields = obj(value, path, {"cpu", "memory"}, {"cpu", "memory"})
    for key, parse in (("cpu", parse_cpu_milli), ("memory", parse_bytes)):
        raw = fields[key]
        if not isinstance(raw, str):
            raise FieldError(f"{path}.{key}", f"must be a quantity such as '500m' or '2Gi', got {typename(raw)}")
        try:
            if parse(raw) <= 0:
                raise FieldError(f"{path}.{key}", f"must be more than zero, got {raw!r}")
        except ValueError as exc:
            raise FieldError(f"{path}.{key}", str(exc)) from None
    return {"cpu": fields["cpu"], "memory": fields["memory"]}


def _action(value: Any, path: str, namespaces: Sequence[str]) -> BufferActionSpec:
    if not isinstance(value, dict):
        raise FieldError(path, f"must be an object, got {typename(value)}")
    action = choice(value.get("action"), f"{path}.action", ACTIONS, "a buffer action")
    fields = obj(value, path, _CREATE if action == "create" else _SCALE,
                 {"at", "action", "name", "replicas", *(("requests",) if action == "create" else ())})
    namespace = _name(fields.get("namespace", "default"), f"{path}.namespace")
    if namespace != "default" and namespace not in namespaces:
        raise FieldError(f"{path}.namespace", f"{namespace!r} is not in the scenario's namespaces")
    name = _name(fields["name"], f"{path}.name")
    at = duration(fields["at"], f"{path}.at")
    replicas = whole(fields["replicas"], f"{path}.replicas")
    if action == "scale":
        return BufferActionSpec(at, "scale", namespace, name, replicas)
    template = _name(fields.get("pod_template", f"{name}-template"), f"{path}.pod_template")
    return BufferActionSpec(at, "create", namespace, name, replicas, _requests(fields["requests"], f"{path}.requests"),
                            template)


def parse_buffer_actions(top: Mapping[str, Any], namespaces: Sequence[str], duration_s: float
                         ) -> tuple[BufferActionSpec, ...]:
    """The section, in document order: a buffer is created once, before any scale of it, within the run."""
    if FIELD not in top:
        return ()
    actions = tuple(_action(item, f"$.{FIELD}[{i}]", namespaces) for i, item in enumerate(listed(top[FIELD], f"$.{FIELD}")))
    created: dict[str, float] = {}
    for i, spec in enumerate(actions):
        path = f"$.{FIELD}[{i}]"
        if spec.at >= duration_s:
            raise FieldError(f"{path}.at", f"{spec.at:g}s is not within the scenario's duration ({duration_s:g}s)")
        if spec.action == "create":
            if spec.key in created:
                raise FieldError(f"{path}.name", f"buffer {spec.key} is created twice")
            created[spec.key] = spec.at
        elif spec.key not in created or spec.at < created[spec.key]:
            raise FieldError(f"{path}.name", f"buffer {spec.key} is scaled before a create of it")
    return actions
