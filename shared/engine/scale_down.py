"""Scale-down planning: which nodes are unneeded, and which of them to remove now.

Pure module, no side effects. This slice removes only nodes that hold nothing
but DaemonSet and mirror pods; utilisation-based removal and drains of busy
nodes come with the batch-safe scale-down engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, GroupState, Node, Pod
from shared.engine.cooldowns import ScaleDownDelays, scale_down_blocked
from shared.engine.predicates import pod_requests, static_mismatch
from shared.engine.scale_up import pending_pods

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


@dataclass(frozen=True, slots=True)
class ScaleDownOptions:
    unneeded_time: timedelta = timedelta(minutes=10)
    max_parallelism: int = 10
    delays: ScaleDownDelays = ScaleDownDelays()


@dataclass(frozen=True, slots=True)
class Removal:
    node: str
    group_id: str
    provider_id: str
    unneeded_since: datetime


@dataclass(frozen=True, slots=True)
class ScaleDownPlan:
    unneeded: Mapping[str, datetime] = field(default_factory=dict)  # the new unneeded-since map
    removals: tuple[Removal, ...] = ()
    kept: Mapping[str, str] = field(default_factory=dict)  # unneeded nodes not removed now, and why


def plan_scale_down(
    snapshot: ClusterSnapshot,
    *,
    unneeded_since: Mapping[str, datetime],
    group_states: Mapping[str, GroupState],
    now: datetime,
    options: ScaleDownOptions = ScaleDownOptions(),
) -> ScaleDownPlan:
    groups = {g.id: g for g in snapshot.groups}
    waiting = pending_pods(snapshot)
    busy = {p.node_name for p in snapshot.pods if p.node_name and not p.is_finished and not p.is_node_bound_system_pod}

    unneeded: dict[str, datetime] = {}
    kept: dict[str, str] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or ref.group_id not in groups or node.name in busy:
            continue
        reason = _not_removable(node)
        if reason is None and any(_could_run(p, node) for p in waiting):
            reason = "pending pods could use it"
        if reason is not None:
            if reason != "pending pods could use it":
                kept[node.name] = reason
            continue
        unneeded[node.name] = unneeded_since.get(node.name, now)

    in_flight = sum(len(s.deleting) for s in group_states.values())
    budget = options.max_parallelism - in_flight
    planned_per_group: dict[str, int] = {}
    removals: list[Removal] = []
    nodes = {node.name: node for node in snapshot.nodes}
    for name, since in sorted(unneeded.items(), key=lambda item: (item[1], item[0])):
        node = nodes[name]
        ref = node.instance
        assert ref is not None  # filtered above
        group = groups[ref.group_id]
        state = group_states.get(group.id, GroupState(group.id))
        if now - since < options.unneeded_time:
            kept[name] = f"unneeded for {int((now - since).total_seconds())}s of {int(options.unneeded_time.total_seconds())}s"
            continue
        blocked = scale_down_blocked(state, now=now, delays=options.delays)
        planned = planned_per_group.get(group.id, 0)
        if blocked:
            kept[name] = blocked
        elif group.target_size - len(state.deleting) - planned <= group.min_size:
            kept[name] = f"group at minimum size {group.min_size}"
        elif budget <= 0:
            kept[name] = f"max scale-down parallelism {options.max_parallelism} reached"
        elif name in state.deleting:
            kept[name] = "scale-down already in progress"
        else:
            removals.append(Removal(name, group.id, node.provider_id, since))
            planned_per_group[group.id] = planned + 1
            budget -= 1
    return ScaleDownPlan(unneeded=unneeded, removals=tuple(removals), kept=kept)


def _not_removable(node: Node) -> str | None:
    if node.annotations.get(SCALE_DOWN_DISABLED) == "true":
        return "scale-down disabled by annotation"
    if node.is_being_deleted:
        return "being deleted"
    if not node.ready:
        return "not ready"
    if node.unschedulable:
        return "cordoned by someone else"
    return None


def _could_run(pod: Pod, node: Node) -> bool:
    return static_mismatch(pod, node.labels, node.taints) is None and pod_requests(pod).fits_in(node.allocatable)
