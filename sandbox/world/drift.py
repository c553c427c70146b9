"""Drift in the world: scale-set model changes and AKS node image upgrades (the scenario's `model_changes`).

A model change at t bumps the scale set's etag; from then on its instances created before t report
`latestModelApplied: false` in the VMSS VMs list (sandbox.api.arm_api), later ones true. With a node image version
(AKS pools), the pool reports it as `nodeImageVersion` (sandbox.api.agent_pools_api) and nodes created after t
carry it as their `kubernetes.azure.com/node-image-version` label; older nodes keep the version they booted with.
Nothing in the world rolls instances over: that is the autoscaler's job (engine.drift).

The report's `drift` (None without model changes) says, per scale set changed: the changes, how many of the
instances alive at the end run the latest model and how many do not, how many stale instances were deleted,
and the most stale nodes disrupted at once: cordoned, tainted ToBeDeletedByClusterAutoscaler or being deleted,
counted at each timeline sample (every `timeline_interval`: a disruption shorter than that may be missed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox.model import agent_pools
from sandbox.model.drift_spec import ModelChangeSpec

if TYPE_CHECKING:
    from sandbox.world import World
    from sandbox.world.compute import InstanceSim, ScaleSetSim

NODE_IMAGE_LABEL = "kubernetes.azure.com/node-image-version"
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


@dataclass(slots=True)
class DriftState:
    """Per scale set (group key): its model changes as (t, node image version or None), in time order."""

    changes: dict[str, list[tuple[float, str | None]]] = field(default_factory=dict)
    disrupted_max: dict[str, int] = field(default_factory=dict)  # the most stale nodes disrupted at one sample
    disrupted_max_at: dict[str, float] = field(default_factory=dict)


_NONE = DriftState()  # before `schedule` (the initial nodes register first): no change yet


def _state(world: World) -> DriftState:
    return getattr(world, "_drift", _NONE)


def schedule(world: World) -> None:
    """The scenario's model changes on the world's clock; pushes no event and draws no id without any."""
    world._drift = DriftState()
    for spec in world.scenario.model_changes:
        world._push(spec.at, "model_change", spec)


def on_event(world: World, spec: ModelChangeSpec) -> None:
    """Apply a model change to every scale set it covers: a new model, a new etag (the PUT that wrote it)."""
    for group in world._groups.values():
        if spec.covers(group.spec):
            _state(world).changes.setdefault(group.key, []).append((world._t, spec.node_image_version))
            group.generation += 1


def latest_model_applied(world: World, group: ScaleSetSim, inst: InstanceSim) -> bool:
    """Whether the instance was created under the set's current model (no change after its creation)."""
    return all(t <= inst.created_at for t, _ in _state(world).changes.get(group.key, ()))


def node_image_version(world: World, group_key: str, *, at: float | None = None) -> str:
    """The node image version new nodes of the set get at `at` (now by default): the last change's, else AKS's."""
    when = world._t if at is None else at
    versions = [v for t, v in _state(world).changes.get(group_key, ()) if v is not None and t <= when]
    return versions[-1] if versions else agent_pools.NODE_IMAGE_VERSION


def node_labels(world: World, inst: InstanceSim, labels: dict[str, str]) -> dict[str, str]:
    """The labels of the instance's Node: an AKS node carries the image version of its creation time."""
    if NODE_IMAGE_LABEL not in labels or inst.group_key not in _state(world).changes:
        return labels
    return {**labels, NODE_IMAGE_LABEL: node_image_version(world, inst.group_key, at=inst.created_at)}


def sample(world: World, at: float) -> None:
    """Count the stale nodes disrupted now, per changed scale set (the report keeps the most)."""
    for key, changes in _state(world).changes.items():
        group = world._groups[key]
        last = changes[-1][0]
        disrupted = 0
        for inst in group.instances.values():
            if inst.created_at >= last or not inst.alive:
                continue
            if inst.state == "Deleting" or _disrupted_node(world, inst):
                disrupted += 1
        if disrupted > _state(world).disrupted_max.get(key, 0):
            _state(world).disrupted_max[key] = disrupted
            _state(world).disrupted_max_at[key] = at


def _disrupted_node(world: World, inst: InstanceSim) -> bool:
    node = world._store.get("nodes", "", inst.node_name) if inst.node_registered else None
    if node is None:
        return False
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(t.get("key") == TO_BE_DELETED_TAINT for t in spec.get("taints") or ())


def report(world: World) -> dict[str, Any] | None:
    """Per changed scale set: its changes, instances on the latest model or not at the end, stale ones deleted,
    the most stale nodes disrupted at once. None for a world without model changes."""
    if not world.scenario.model_changes:
        return None
    groups: dict[str, Any] = {}
    for key, changes in _state(world).changes.items():
        group = world._groups[key]
        last = changes[-1][0]
        first = changes[0][0]
        alive = [i for i in group.instances.values() if i.alive and i.state != "Deleting"]
        stale_ever = [i for i in world._iter_instances() if i.group_key == key and i.created_at < last
                      and (i.vanished_at is None or i.vanished_at > first)]
        groups[key] = {
            "changes": [{"t": round(t, 3), **({"node_image_version": v} if v else {})} for t, v in changes],
            "latest_at_end": sum(1 for i in alive if i.created_at >= last),
            "stale_at_end": sum(1 for i in alive if i.created_at < last),
            "stale_replaced": sum(1 for i in stale_ever if not i.alive or i.state == "Deleting"),
            "stale_disrupted_max": _state(world).disrupted_max.get(key, 0),
            "stale_disrupted_max_at": _state(world).disrupted_max_at.get(key),
        }
    return {
        "groups": groups,
        "stale_at_end": sum(g["stale_at_end"] for g in groups.values()),
        "stale_replaced": sum(g["stale_replaced"] for g in groups.values()),
        "stale_disrupted_max": max((g["stale_disrupted_max"] for g in groups.values()), default=0),
    }
