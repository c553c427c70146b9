"""Label and field selectors as the Kubernetes API server parses them.

Label selectors: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`,
comma-joined (all must hold). Field selectors: `path=value`, `path==value`,
`path!=value`, comma-joined, over a per-resource whitelist of fields, like the
real server which refuses unknown field labels.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.engine.selectors import parse_requirements


class SelectorError(ValueError):
    """An unparsable selector; the API answers 400 BadRequest."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # = != exists !exists in notin
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    try:
        return tuple(Requirement(key, op, values) for key, op, values in parse_requirements(text))
    except ValueError as exc:
        raise SelectorError(str(exc)) from exc


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


# The fields each resource supports in fieldSelector (the server's field label conversion functions).
FIELD_LABELS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
        }
    ),
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "events": frozenset(
        {
            "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
            "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
            "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
            "source", "type",
        }
    ),
}
_DEFAULT_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


def parse_field_selector(text: str | None, resource: str) -> tuple[FieldRequirement, ...]:
    if not text or not text.strip():
        return ()
    allowed = FIELD_LABELS.get(resource, _DEFAULT_FIELDS)
    requirements = []
    for part in text.split(","):
        match = re.match(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if match is None:
            raise SelectorError(f"invalid field selector requirement {part.strip()!r}")
        if match[1] not in allowed:
            raise SelectorError(f'field label not supported: {match[1]}')
        requirements.append(FieldRequirement(match[1], match[2] != "!=", match[3]))
    return tuple(requirements)


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    if dotted == "source":  # events: the reporting component lives in source.component
        dotted = "source.component"
    current: Any = obj
    for part in dotted.split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
    if current is None:
        return ""
    if isinstance(current, bool):  # the server renders booleans as Go does
        return "true" if current else "false"
    return str(current)


def fields_match(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all((_field_value(obj, r.field) == r.value) == r.equal for r in requirements)


def object_filter(
    label_selector: str | None, field_selector: str | None, resource: str
) -> Callable[[Mapping[str, Any]], bool]:
    """One predicate for both selectors (raises SelectorError before any object is read)."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, resource)

    def accept(obj: Mapping[str, Any]) -> bool:
        return labels_match(labels, obj.get("metadata", {}).get("labels")) and fields_match(fields, obj)

    return accept
