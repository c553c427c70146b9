"""How far may a scale-up go? Cluster-wide limits, per-group limits, and balancing similar groups.

Pure module, no side effects. Follows cluster-autoscaler (CA):

- `--max-nodes-total`, `--cores-total min:max`, `--memory-total min:max` (GiB) bound the whole
  cluster, counting registered nodes plus the nodes already asked for (upcoming); a max of 0
  means no limit. The minimums only ever stop a scale-down.
- a node counts as whole cores, rounded up, as CA counts a node's CPU.
- `--balance-similar-node-groups` spreads one scale-up over groups whose nodes look alike
  (same resources within CA's tolerances, same labels but the ones that name the zone, the host
  or the pool), filling the smallest first.

We know a node's allocatable, not its capacity, so the memory counted against MEMORY_TOTAL is a
little lower than CA's for the same nodes (CPU rounds up to the same whole cores).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from shared.domain import ClusterSnapshot, LimitReservation, NodeGroup, NodeTemplate, Resources, Taint
from shared.engine.node_counts import registered_by_group

GIB = 1024**3

# CA's defaults: --max-nodes-total 0, --cores-total 0:320000, --memory-total 0:6400000 (GiB).
DEFAULT_CORES_TOTAL = (0, 320_000)
DEFAULT_MEMORY_TOTAL = (0, 6_400_000 * GIB)

# Reasons, in CA's words where CA has some, so events and logs read alike.
MAX_SIZE_REACHED = "max size reached"
MAX_NODES_PER_SCALE_UP_REACHED = "max nodes per scale-up reached"
MAX_TOTAL_NODES_REACHED = "max total nodes reached"
MAX_CLUSTER_CORES_REACHED = "max cluster cores reached"
MAX_CLUSTER_MEMORY_REACHED = "max cluster memory reached"
MIN_CLUSTER_CORES_REACHED = "min cluster cores reached"
MIN_CLUSTER_MEMORY_REACHED = "min cluster memory reached"


def parse_min_max(text: str, *, name: str = "") -> tuple[int, int]:
    """`"0:320000"` -> (0, 320000); whole numbers, 0 <= min <= max, as CA validates its flags.

    Errors start with `name` when given (settings add the setting's name themselves).
    """
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"{name + ' ' if name else ''}must be min:max in whole numbers, e.g. 0:320000, got {text!r}")
    low, high = int(match[1]), int(match[2])
    if low > high:
        raise ValueError(f"{name + ': ' if name else ''}min {low} is greater than max {high}")
    return low, high


@dataclass(frozen=True, slots=True)
class ClusterLimits:
    max_nodes_total: int = 0  # 0: unlimited
    cores_total: tuple[int, int] = DEFAULT_CORES_TOTAL  # whole cores (min, max); max 0: unlimited
    memory_total: tuple[int, int] = DEFAULT_MEMORY_TOTAL  # bytes (min, max); max 0: unlimited

    @classmethod
    def parse(cls, *, max_nodes_total: int = 0, cores_total: str = "0:320000",
              memory_total_gib: str = "0:6400000") -> ClusterLimits:
        """From CA-style flag text; memory in GiB as CA's `--memory-total` takes it."""
        low, high = parse_min_max(memory_total_gib, name="memory total")
        return cls(max_nodes_total, parse_min_max(cores_total, name="cores total"), (low * GIB, high * GIB))


def node_cores(resources: Resources) -> int:
    """Whole cores, rounded up, as CA counts a node's CPU."""
    return max(0, -(-resources.cpu_milli // 1000))


@dataclass(frozen=True, slots=True)
class ClusterTotals:
    """What the cluster holds or has asked for: registered nodes plus upcoming ones."""

    nodes: int = 0
    cores: int = 0
    memory_bytes: int = 0

    def plus(self, count: int, node: Resources) -> ClusterTotals:
        """The totals once `count` more nodes like `node` are added (for planning several groups in turn)."""
        return ClusterTotals(self.nodes + count, self.cores + count * node_cores(node),
                             self.memory_bytes + count * max(0, node.memory_bytes))


def cluster_totals(snapshot: ClusterSnapshot, *, exclude: Collection[str] = (),
                   reserved: Iterable[LimitReservation] = ()) -> ClusterTotals:
    """Registered nodes plus, per group, the nodes asked for but not registered yet (priced by the template).

    `exclude` names nodes not to count: virtual nodes (`pod_rules.is_virtual_node`), which CA ignores.
    `reserved`: the live reservations of scale-ups in flight (`LimitReservation`): a group counts up to the
    largest target reserved for it (a target its capacity reached already adds nothing), and a group no
    longer discovered counts its reservations' own nodes.
    """
    totals = ClusterTotals()
    for node in snapshot.nodes:
        if node.name not in exclude:
            totals = totals.plus(1, node.allocatable)
    registered = registered_by_group(snapshot.nodes, exclude=exclude)
    largest = largest_reservations(reserved)
    for group in snapshot.groups:
        upcoming = group.running_target - registered.get(group.id, 0)
        template = snapshot.templates.get(group.id)
        if upcoming > 0:
            totals = totals.plus(upcoming, template.allocatable if template else Resources())
        if group.id in largest:
            reservation = largest[group.id]
            held = reservation.target - max(group.running_target, registered.get(group.id, 0))
            if held > 0:
                totals = totals.plus(held, _reserved_node(reservation))
    known = {group.id for group in snapshot.groups}
    for reservation in reserved:
        if reservation.group_id not in known:
            totals = totals.plus(reservation.nodes, _reserved_node(reservation))
    return totals


def largest_reservations(reserved: Iterable[LimitReservation]) -> dict[str, LimitReservation]:
    """Per group, the reservation with the largest target: targets are absolute, so it covers the others."""
    largest: dict[str, LimitReservation] = {}
    for reservation in reserved:
        known = largest.get(reservation.group_id)
        if known is None or reservation.target > known.target:
            largest[reservation.group_id] = reservation
    return largest


def _reserved_node(reservation: LimitReservation) -> Resources:
    return Resources(cpu_milli=reservation.cores * 1000, memory_bytes=reservation.memory_bytes)


@dataclass(frozen=True, slots=True)
class Allowance:
    count: int  # nodes the group may add now
    reason: str | None = None  # the limit that capped it below the desired count; None: not capped


def allowed_increase(
    desired: int,
    *,
    group: NodeGroup,
    template: NodeTemplate,
    totals: ClusterTotals,
    limits: ClusterLimits = ClusterLimits(),
    max_nodes_per_scale_up: int = 1000,
) -> Allowance:
    """How many of `desired` new nodes of `template` the group may add, and which limit stopped the rest.

    The count is the largest that breaks no limit: the group's max, MAX_NODES_PER_SCALE_UP,
    MAX_NODES_TOTAL, and the max of CORES_TOTAL and MEMORY_TOTAL. When several limits bind, the
    reason names the first in that order.
    """
    desired = max(0, desired)
    node = template.allocatable  # counted as `cluster_totals` counts nodes, DaemonSets included
    caps: list[tuple[int, str]] = [
        (group.max_size - group.running_target, MAX_SIZE_REACHED),
        (max_nodes_per_scale_up, MAX_NODES_PER_SCALE_UP_REACHED),
    ]
    if limits.max_nodes_total > 0:
        caps.append((limits.max_nodes_total - totals.nodes, MAX_TOTAL_NODES_REACHED))
    cores = node_cores(node)
    if limits.cores_total[1] > 0 and cores > 0:
        caps.append(((limits.cores_total[1] - totals.cores) // cores, MAX_CLUSTER_CORES_REACHED))
    memory = max(0, node.memory_bytes)
    if limits.memory_total[1] > 0 and memory > 0:
        caps.append(((limits.memory_total[1] - totals.memory_bytes) // memory, MAX_CLUSTER_MEMORY_REACHED))
    count = max(0, min([desired] + [cap for cap, _ in caps]))
    if count >= desired:
        return Allowance(count)
    return Allowance(count, next(reason for cap, reason in caps if max(0, cap) == count))


def removal_blocked(node: Resources, *, totals: ClusterTotals, limits: ClusterLimits = ClusterLimits()) -> str | None:
    """Why removing `node` would take the cluster below CORES_TOTAL's or MEMORY_TOTAL's min; None if it would not."""
    if totals.cores - node_cores(node) < limits.cores_total[0]:
        return MIN_CLUSTER_CORES_REACHED
    if totals.memory_bytes - max(0, node.memory_bytes) < limits.memory_total[0]:
        return MIN_CLUSTER_MEMORY_REACHED
    return None


def at_min_size(group: NodeGroup, *, running: int, removing: int) -> bool:
    """Whether removing one more node would take the group below its minimum size.

    `running`: the nodes the group is to have running (its running target); `removing`: those of them
    already on their way out (reserved by removals in flight, or planned in this pass).
    """
    return running - removing - 1 < group.min_size


def allowed_target(snapshot: ClusterSnapshot, group_id: str, target: int, *, limits: ClusterLimits = ClusterLimits(),
                   max_nodes_per_scale_up: int = 1000, exclude: Collection[str] = (),
                   reserved: Iterable[LimitReservation] = ()) -> tuple[int, str | None]:
    """The largest size up to `target` the group may be grown to now, and the limit that capped it.

    What the executor asks before it resizes: a decision is only a request, and the cluster (other
    groups grown meanwhile, limits changed) may have moved since it was made. `exclude` as for
    `cluster_totals`; `reserved` the live reservations of the other scale-ups in flight, which count against
    every limit as if their capacity were written (a target another one reserved for this group is allowed
    as it stands: it needs no more room). A group not in the snapshot is allowed nothing.
    """
    group = next((g for g in snapshot.groups if g.id == group_id), None)
    if group is None:
        return 0, "the group is not in the snapshot"
    reserved = tuple(reserved)
    others = largest_reservations(reserved).get(group_id)
    base = max(group.running_target, others.target if others else 0)
    if target <= base:
        return target, None
    template = snapshot.templates.get(group_id) or NodeTemplate(allocatable=Resources())
    held = base - group.running_target  # nodes of this group another scale-up holds already
    allowance = allowed_increase(target - base, group=replace(group, capacity=group.capacity + held),
                                 template=template, totals=cluster_totals(snapshot, exclude=exclude, reserved=reserved),
                                 limits=limits, max_nodes_per_scale_up=max(0, max_nodes_per_scale_up - held))
    return base + allowance.count, allowance.reason


# --- Balancing similar node groups -------------------------------------------------------------

# CA's basic ignored labels: the host, the zone and the region (stable and beta), and two of its own.
BASIC_IGNORED_LABELS = frozenset({
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/fluentd-ds-ready",
    "kops.k8s.io/instancegroup",
})
# What CA's Azure comparator ignores on top: the pool's name (AKS and legacy), the disk CSI zone,
# and labels AKS puts on every scale set that differ between otherwise identical pools.
AZURE_POOL_LABELS = ("kubernetes.azure.com/agentpool", "agentpool")
AZURE_IGNORED_LABELS = BASIC_IGNORED_LABELS | frozenset({
    *AZURE_POOL_LABELS,
    "topology.disk.csi.azure.com/zone",
    "aksEngineVersion",
    "creationSource",
    "poolName",
    "resourceNameSuffix",
    "kubernetes.azure.com/node-image-version",
    "kubernetes.azure.com/consolidated-additional-properties",
})

# CA's tolerances (--memory-difference-ratio, --max-allocatable-difference-ratio). CA compares
# capacity (CPU exact, memory within 1.5%) and allocatable (within 5%); we only know
# allocatable, so we hold it to the capacity rules for CPU and memory and to 5% for the rest.
MEMORY_DIFFERENCE_RATIO = 0.015
ALLOCATABLE_DIFFERENCE_RATIO = 0.05


def _within(a: int, b: int, ratio: float) -> bool:
    larger, smaller = max(a, b), min(a, b)
    return larger - smaller <= larger * ratio


def _resources_similar(a: Resources, b: Resources) -> bool:
    # Field by field, so resources the domain grows later (extended resources) are compared too.
    for f in fields(Resources):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "cpu_milli":
            ok = x == y
        elif f.name == "memory_bytes":
            ok = _within(x, y, MEMORY_DIFFERENCE_RATIO)
        elif isinstance(x, int):
            ok = _within(x, y, ALLOCATABLE_DIFFERENCE_RATIO)
        elif isinstance(x, Mapping):
            ok = dict(x) == dict(y)  # counted devices (GPUs...): CA wants exact capacity
        else:
            ok = x == y
        if not ok:
            return False
    return True


def _labels_similar(a: Mapping[str, str], b: Mapping[str, str], ignored: Collection[str]) -> bool:
    return {k: v for k, v in a.items() if k not in ignored} == {k: v for k, v in b.items() if k not in ignored}


def _taint_set(taints: Iterable[Taint]) -> frozenset[tuple[str, str, str]]:
    return frozenset((t.key, t.value, t.effect) for t in taints)


def templates_similar(a: NodeTemplate, b: NodeTemplate, *, extra_ignored_labels: Collection[str] = ()) -> bool:
    """Would nodes of two groups be interchangeable for the pods? CA's Azure comparator, plus taints.

    Nodes of the same Azure pool (same non-empty `kubernetes.azure.com/agentpool` or
    `agentpool` label) are similar outright, as in CA. Otherwise resources must match within
    CA's tolerances and labels must match except the ignored ones. We also require the same
    taints, which CA does not check: a group whose taint the pods do not tolerate cannot take
    its share of a balanced scale-up.
    """
    for label in AZURE_POOL_LABELS:
        pool = a.labels.get(label, "")
        if pool and pool == b.labels.get(label, ""):
            return True
    ignored = AZURE_IGNORED_LABELS | frozenset(extra_ignored_labels)
    return (
        _resources_similar(a.allocatable, b.allocatable)
        and _labels_similar(a.labels, b.labels, ignored)
        and _taint_set(a.taints) == _taint_set(b.taints)
    )


def similar_groups(
    group: NodeGroup,
    candidates: Iterable[NodeGroup],
    templates: Mapping[str, NodeTemplate],
    *,
    extra_ignored_labels: Collection[str] = (),
) -> list[NodeGroup]:
    """The candidates (never `group` itself) whose template is similar to `group`'s, by group id.

    A group without a template is never similar: we cannot tell what its nodes look like.
    """
    template = templates.get(group.id)
    if template is None:
        return []
    return sorted(
        (
            other
            for other in candidates
            if other.id != group.id
            and (other_template := templates.get(other.id)) is not None
            and templates_similar(template, other_template, extra_ignored_labels=extra_ignored_labels)
        ),
        key=lambda g: g.id,
    )


def balance(node_count: int, groups: Sequence[NodeGroup], *, room: Mapping[str, int] | None = None) -> dict[str, int]:
    """Split `node_count` new nodes over `groups`, smallest group first, to even out their sizes.

    CA's BalanceScaleUpBetweenGroups: one node at a time to the group with the smallest
    target (ties: lowest id, where CA's order is arbitrary), never beyond a group's room
    (`max - target`, or `room[group id]` when given, e.g. already capped by other limits).
    More nodes than the groups have room for are capped to the room. Returns the increase
    per group id, only for groups that grow.
    """
    heap: list[tuple[int, str]] = []
    left: dict[str, int] = {}
    for group in groups:
        space = group.max_size - group.running_target if room is None else room.get(group.id, 0)
        space = min(space, group.max_size - group.running_target)
        if space > 0 and group.id not in left:
            left[group.id] = space
            heap.append((group.running_target, group.id))
    heapq.heapify(heap)
    added: dict[str, int] = {}
    remaining = max(0, node_count)
    while remaining > 0 and heap:
        size, group_id = heapq.heappop(heap)
        added[group_id] = added.get(group_id, 0) + 1
        left[group_id] -= 1
        remaining -= 1
        if left[group_id] > 0:
            heapq.heappush(heap, (size + 1, group_id))
    return added


@dataclass(frozen=True, slots=True)
class BalancedIncrease:
    increases: Mapping[str, int]  # group id -> nodes to add, only groups that grow
    reason: str | None = None  # why fewer than the nodes asked for were placed; None when all were


def balance_within_limits(
    node_count: int,
    groups: Sequence[NodeGroup],
    templates: Mapping[str, NodeTemplate],
    *,
    totals: ClusterTotals,
    limits: ClusterLimits = ClusterLimits(),
    max_nodes_per_scale_up: int = 1000,
) -> BalancedIncrease:
    """`balance`, with every node also checked against `allowed_increase` as the split proceeds.

    What a balanced scale-up should use: each node goes to the smallest group (lowest id on
    ties) that may still take one under its max, MAX_NODES_PER_SCALE_UP and the cluster limits,
    so the groups together never pass a cluster limit even when their templates differ slightly.
    """
    added: dict[str, int] = {}
    open_groups = {g.id: g for g in groups if g.id in templates}  # without a template, no node can be priced
    reason: str | None = None
    for _ in range(max(0, node_count)):
        chosen: NodeGroup | None = None
        for group_id in sorted(open_groups, key=lambda i: (open_groups[i].running_target + added.get(i, 0), i)):
            group = open_groups[group_id]
            grown = added.get(group_id, 0)
            allowance = allowed_increase(
                1,
                group=replace(group, capacity=group.capacity + grown),
                template=templates[group_id],
                totals=totals,
                limits=limits,
                max_nodes_per_scale_up=max_nodes_per_scale_up - grown,
            )
            if allowance.count:
                chosen = group
                break
            reason = allowance.reason
            del open_groups[group_id]
        if chosen is None:
            break
        added[chosen.id] = added.get(chosen.id, 0) + 1
        totals = totals.plus(1, templates[chosen.id].allocatable)
    placed = sum(added.values())
    return BalancedIncrease(added, None if placed >= node_count else reason or "no group to grow")
