"""Scale-up planning: which groups must grow, and by how much, to run the pending pods.

Pure module, no side effects. Like cluster-autoscaler's estimator: pending pods
first go onto free space of existing nodes and of nodes already booting or
requested (so a pod is never asked for twice), then onto new template nodes,
first-fit decreasing, per group; an expander picks among the groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shared.domain import ClusterSnapshot, NodeGroup, NodeTemplate, Pod, Resources, Taint
from shared.engine.predicates import insufficient, pod_requests, static_mismatch
from shared.engine.templates import daemonset_overhead


@dataclass(frozen=True, slots=True)
class ScaleUpOptions:
    max_nodes_per_scale_up: int = 1000


@dataclass(frozen=True, slots=True)
class GroupIncrease:
    group_id: str
    current_target: int
    new_target: int
    pods: tuple[str, ...]  # the pending pods this increase is for

    @property
    def delta(self) -> int:
        return self.new_target - self.current_target


@dataclass(frozen=True, slots=True)
class ScaleUpPlan:
    increases: tuple[GroupIncrease, ...] = ()
    absorbed: tuple[str, ...] = ()  # pending pods that fit capacity already there or on its way
    unplaceable: Mapping[str, str] = field(default_factory=dict)  # pod -> why no group can take it


@dataclass(slots=True)
class _Bin:
    """Free space on one node, real or planned."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    free: Resources

    def try_place(self, pod: Pod, requests: Resources) -> bool:
        if static_mismatch(pod, self.labels, self.taints) or not requests.fits_in(self.free):
            return False
        self.free = self.free - requests
        return True


@dataclass(frozen=True, slots=True)
class _Option:
    group: NodeGroup
    nodes: int
    placed: tuple[Pod, ...]
    waste: float


def pending_pods(snapshot: ClusterSnapshot) -> list[Pod]:
    """Pods the scheduler gave up on: PodScheduled=False with reason Unschedulable."""
    return [p for p in snapshot.pods if p.unschedulable and p.node_name is None and not p.deleting]


def plan_scale_up(snapshot: ClusterSnapshot, *, options: ScaleUpOptions = ScaleUpOptions()) -> ScaleUpPlan:
    pending = sorted(
        pending_pods(snapshot),
        key=lambda p: (-p.requests.cpu_milli, -p.requests.memory_bytes, p.key),
    )
    if not pending:
        return ScaleUpPlan()
    overhead = daemonset_overhead(snapshot.pods)
    bins = _existing_bins(snapshot) + _upcoming_bins(snapshot, overhead)
    absorbed: list[str] = []
    remaining: list[Pod] = []
    for pod in pending:
        requests = pod_requests(pod)
        if any(b.try_place(pod, requests) for b in bins):
            absorbed.append(pod.key)
        else:
            remaining.append(pod)

    room = {g.id: max(0, min(g.max_size - g.target_size, options.max_nodes_per_scale_up)) for g in snapshot.groups}
    added: dict[str, tuple[int, list[str]]] = {}
    while remaining:
        candidates = [
            option
            for group in sorted(snapshot.groups, key=lambda g: g.id)
            if (option := _estimate(group, snapshot.templates.get(group.id), overhead, remaining, room[group.id]))
        ]
        if not candidates:
            break
        best = min(candidates, key=lambda o: (o.waste, -len(o.placed), o.group.id))  # least-waste
        room[best.group.id] -= best.nodes
        nodes, pods = added.get(best.group.id, (0, []))
        added[best.group.id] = (nodes + best.nodes, pods + [p.key for p in best.placed])
        placed = {p.key for p in best.placed}
        remaining = [p for p in remaining if p.key not in placed]

    increases = tuple(
        GroupIncrease(group.id, group.target_size, group.target_size + added[group.id][0], tuple(added[group.id][1]))
        for group in snapshot.groups
        if group.id in added
    )
    unplaceable = {pod.key: _why_not(pod, snapshot, overhead, room) for pod in remaining}
    return ScaleUpPlan(increases=increases, absorbed=tuple(absorbed), unplaceable=unplaceable)


def _existing_bins(snapshot: ClusterSnapshot) -> list[_Bin]:
    used: dict[str, Resources] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.is_finished:
            used[pod.node_name] = used.get(pod.node_name, Resources()) + pod_requests(pod)
    return [
        _Bin(node.labels, node.taints, node.allocatable - used.get(node.name, Resources()))
        for node in snapshot.nodes
        if node.ready and not node.unschedulable and not node.is_being_deleted
    ]


def _upcoming_bins(snapshot: ClusterSnapshot, overhead: Resources) -> list[_Bin]:
    """Nodes a group has been asked for but that are not Ready yet count as free template nodes."""
    present: dict[str, int] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None and (node.ready or node.is_being_deleted):
            present[ref.group_id] = present.get(ref.group_id, 0) + 1
    bins: list[_Bin] = []
    for group in snapshot.groups:
        template = snapshot.templates.get(group.id)
        if template is None:
            continue
        for _ in range(max(0, group.target_size - present.get(group.id, 0))):
            bins.append(_Bin(template.labels, template.taints, template.allocatable - overhead))
    return bins


def _estimate(
    group: NodeGroup, template: NodeTemplate | None, overhead: Resources, pods: Sequence[Pod], room: int
) -> _Option | None:
    if template is None or room <= 0:
        return None
    capacity = template.allocatable - overhead
    bins: list[_Bin] = []
    placed: list[Pod] = []
    for pod in pods:
        requests = pod_requests(pod)
        if static_mismatch(pod, template.labels, template.taints) or not requests.fits_in(capacity):
            continue
        if any(b.try_place(pod, requests) for b in bins):
            placed.append(pod)
        elif len(bins) < room:
            new_bin = _Bin(template.labels, template.taints, capacity)
            new_bin.try_place(pod, requests)
            bins.append(new_bin)
            placed.append(pod)
    if not placed:
        return None
    return _Option(group, len(bins), tuple(placed), _waste(capacity, bins))


def _waste(capacity: Resources, bins: Sequence[_Bin]) -> float:
    """cluster-autoscaler's least-waste score: unused share of CPU plus unused share of memory."""
    total_cpu = capacity.cpu_milli * len(bins) or 1
    total_memory = capacity.memory_bytes * len(bins) or 1
    free_cpu = sum(b.free.cpu_milli for b in bins)
    free_memory = sum(b.free.memory_bytes for b in bins)
    return free_cpu / total_cpu + free_memory / total_memory


def _why_not(pod: Pod, snapshot: ClusterSnapshot, overhead: Resources, room: Mapping[str, int]) -> str:
    reasons = []
    for group in sorted(snapshot.groups, key=lambda g: g.id):
        template = snapshot.templates.get(group.id)
        if template is None:
            reason = "no node template"
        else:
            reason = static_mismatch(pod, template.labels, template.taints) or insufficient(
                pod_requests(pod), template.allocatable - overhead
            )
            if reason is None and room.get(group.id, 0) <= 0:
                reason = "max size reached"
        reasons.append(f"{group.id}: {reason or 'no room left in this plan'}")
    return "; ".join(reasons) if reasons else "no node groups discovered"
