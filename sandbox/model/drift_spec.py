"""Scenario field for drift: changes of a scale set's model, and of an AKS pool's node image, on the timeline.

The scenario gains, at the top level:

- `model_changes`: `[{"at", "scale_set" | "agent_pool", "resource_group"?, "node_image_version"?}]`: at `at` the
  scale set's model changes (a new image or cloud-init written to `virtualMachineProfile`, its etag bumped):
  instances created before report `latestModelApplied: false`, later ones true (sandbox.world.drift). Naming an
  `agent_pool` changes every scale set behind the pool (one per size of a VirtualMachines pool) and, with
  `node_image_version`, the pool's `nodeImageVersion`: nodes created after carry it as their
  `kubernetes.azure.com/node-image-version` label, older ones keep theirs (a node image upgrade that leaves
  the rollout to the autoscaler, as `az aks nodepool update` with node image auto-upgrade off does not: a
  modelling shortcut, said in docs/drift.md).

This module imports nothing of `sandbox.model.scenario`, which imports it: problems are raised as `FieldError`
(JSON path and problem), which the scenario parser reports as its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox.model.spec_fields import FieldError, duration, listed, obj, text

TOP_LEVEL_FIELDS = frozenset({"model_changes"})
_FIELDS = frozenset({"at", "scale_set", "agent_pool", "resource_group", "node_image_version"})


class _Pool(Protocol):
    name: str


class _Group(Protocol):
    """What this module reads of a parsed node group (sandbox.model.scenario.NodeGroupSpec)."""

    name: str
    resource_group: str

    @property
    def agent_pool(self) -> _Pool | None: ...


@dataclass(frozen=True, slots=True)
class ModelChangeSpec:
    """At `at` seconds the model of the named scale set (or of every set behind `agent_pool`) changes."""

    at: float
    scale_set: str | None = None
    agent_pool: str | None = None
    resource_group: str | None = None
    node_image_version: str | None = None  # AKS pools only: the pool's new nodeImageVersion

    def covers(self, group: _Group) -> bool:
        """Whether the change applies to the node group."""
        if self.resource_group is not None and group.resource_group.lower() != self.resource_group.lower():
            return False
        if self.agent_pool is not None:
            return group.agent_pool is not None and group.agent_pool.name == self.agent_pool
        return group.name == self.scale_set


def parse_sections(top: Mapping[str, Any], groups: Sequence[_Group], duration_s: float) -> dict[str, Any]:
    """The top-level drift fields, as keyword arguments of sandbox.model.scenario.Scenario."""
    return {"model_changes": tuple(_change(item, f"$.model_changes[{i}]", groups, duration_s)
                                   for i, item in enumerate(listed(top.get("model_changes", []), "$.model_changes")))}


def _change(value: Any, path: str, groups: Sequence[_Group], duration_s: float) -> ModelChangeSpec:
    fields = obj(value, path, _FIELDS, {"at"})
    at = duration(fields["at"], f"{path}.at")
    if not 0 <= at <= duration_s:
        raise FieldError(f"{path}.at", f"must be within the scenario's duration (0 to {duration_s:g} s), got {at:g}")
    if ("scale_set" in fields) == ("agent_pool" in fields):
        raise FieldError(path, "name exactly one of scale_set and agent_pool")
    change = ModelChangeSpec(
        at=at,
        scale_set=text(fields["scale_set"], f"{path}.scale_set") if "scale_set" in fields else None,
        agent_pool=text(fields["agent_pool"], f"{path}.agent_pool") if "agent_pool" in fields else None,
        resource_group=text(fields["resource_group"], f"{path}.resource_group") if "resource_group" in fields else None,
        node_image_version=text(fields["node_image_version"], f"{path}.node_image_version")
        if "node_image_version" in fields else None,
    )
    matches = [g for g in groups if change.covers(g)]
    named = change.scale_set or change.agent_pool
    field_name = "scale_set" if change.scale_set else "agent_pool"
    if not matches:
        raise FieldError(f"{path}.{field_name}", f"{named!r} names no {field_name.replace('_', ' ')} of node_groups")
    if change.scale_set is not None and len(matches) > 1:
        raise FieldError(f"{path}.scale_set", f"{named!r} is ambiguous: add its resource_group")
    if change.node_image_version is not None and change.agent_pool is None:
        raise FieldError(f"{path}.node_image_version", "only an AKS agent pool has a node image version: name its "
                                                       "agent_pool")
    return change
