"""Scale-up planning: which groups must grow, and by how much, to run the pending pods.

Pure module, no side effects. Like cluster-autoscaler's estimator: pending pods
first go onto free space of existing nodes and of nodes already booting or
requested (so a pod is never asked for twice), then onto new template nodes,
first-fit decreasing, per group; an expander picks among the groups.

Every placement passes kube-scheduler's filters (`predicates.check`) against a
`PlacementState` that holds the real nodes and pods, the nodes on their way and the
planned ones, so inter-pod affinity, anti-affinity, topology spread and host ports
see what is already placed, including earlier pods of the same plan. Planned nodes
get a hostname of their own and, in a group spanning several zones, the zone the
scale set's balancing would give them.

Pending pods fall into equivalence classes: same controller, same scheduling-relevant
spec (requests, selectors, affinity, tolerations, spread, ports) and same values for
the labels any selector in play looks at. Within a class:

- the static filters (labels, taints) are evaluated once per candidate node, or
  once per group and zone for planned nodes;
- a node that failed for a reason that can only get worse as pods are added
  (static, resources, ports, anti-affinity) is never tried again for that class, so
  thousands of replicas scan the node list about once in total;
- once a pod of the class fails on a fresh node of a group, the rest of the class
  skips that group.

Only affinity and spread failures can turn into passes as the plan grows, and only
those nodes stay on the class's list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from shared.domain import (
    DELETION_CANDIDATE_TAINT,
    LABEL_HOSTNAME,
    LABEL_ZONE,
    TO_BE_DELETED_TAINT,
    ClusterSnapshot,
    HostPort,
    NodeGroup,
    NodeTemplate,
    Pod,
    Resources,
)
from shared.engine.node_counts import present_by_group
from shared.engine.expanders import ExpansionOption, Priorities, choose
from shared.engine.gangs import gangs, partial_reason
from shared.engine.limits import (
    MAX_CLUSTER_CORES_REACHED,
    MAX_CLUSTER_MEMORY_REACHED,
    ClusterLimits,
    ClusterTotals,
    allowed_increase,
    balance_within_limits,
    cluster_totals,
    similar_groups,
)
from shared.engine.multi_size import (
    PRIORITIZED,
    cheapest_prefix,
    choose_lanes,
    lanes_by_parent,
    max_size_reason,
    set_headroom,
    work_units,
)
from shared.engine.placement import NodeView, PlacementState
from shared.engine.quota import Quota
from shared.engine.pod_rules import PodRules, is_virtual_node, split_demand
from shared.engine.predicates import (
    SpreadPlan,
    check,
    existing_anti_affinity_conflict,
    host_port_conflict,
    fits_resources,
    pod_affinity_mismatch,
    pod_anti_affinity_conflict,
    pod_requests,
    static_mismatch,
    spread_plan,
    spread_violation,
    unsupported_construct,
)
from shared.engine.daemonsets import daemonsets_seen_by_group, observed_daemonset_pods, template_daemonsets
from shared.engine.daemonsets import host_ports as daemonset_host_ports
from shared.engine.daemonsets import overhead as daemonset_overhead
from shared.engine.templates import (
    next_zone,
    planned_node_labels,
)


@dataclass(frozen=True, slots=True)
class ScaleUpOptions:
    max_nodes_per_scale_up: int = 1000
    expander: tuple[str, ...] = ("least-waste",)  # a chain, as in EXPANDER=priority,least-waste
    priorities: Priorities = Priorities()
    seed: int = 0  # for the random expander; the poll passes its time so choices vary between polls
    limits: ClusterLimits = ClusterLimits()
    pod_rules: PodRules = PodRules()
    unavailable: Mapping[str, str] = field(default_factory=dict)  # group id -> why it may not grow now (backoff)
    balance_similar: bool = False  # BALANCE_SIMILAR_NODE_GROUPS
    balancing_ignored_labels: tuple[str, ...] = ()  # on top of the labels CA ignores on Azure
    # Nodes being drained whose removal can still be cancelled: capacity the planner may take
    # back (after free and upcoming room, before new nodes), which cancels their drain.
    reclaimable: frozenset[str] = frozenset()
    # Keep a group's estimate from one round to the next while nothing it placed was taken (a measured
    # speed-up of large plans); False estimates every group again each round. The plan is the same
    # either way, which a property test checks.
    reuse_estimates: bool = True
    # Pending pods planned after all the others (keys): pods running on a virtual node that are demand for VMs
    # (engine.virtual_nodes), which take free room only after the pods that really wait.
    after: frozenset[str] = frozenset()
    # vCPUs left in the subscription's Compute quotas (engine.quota): each group's increase is capped at what
    # its quotas allow, and the pods beyond go to the next group in the same plan. None: quotas are not read.
    quota: Quota | None = None
    # Spot groups are tried first for pods that tolerate them (SPOT_FIRST): each round, when some spot group can
    # take pods, only spot options reach the expander.
    spot_first: bool = False
    # GANG_SCALE_UP=all-or-nothing: the pending pods of one gang (engine.gangs) are placed all or none; a gang
    # that only partly fits takes no room and asks for no node. False plans every pod on its own.
    gangs: bool = False


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
    ignored: Mapping[str, str] = field(default_factory=dict)  # pending pods that are not demand (expendable, delayed)
    reclaimed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # draining node -> pods that need it back
    # Unplaceable pods a group grown by this plan would have taken but for CORES_TOTAL or MEMORY_TOTAL
    # (pod -> group id). cluster-autoscaler estimates with node-count limits only and caps the count by
    # cores and memory afterwards, so it names these pods among those that triggered the scale-up.
    limited: Mapping[str, str] = field(default_factory=dict)
    quota_capped: tuple[str, ...] = ()  # groups whose increase a Compute quota held below what else allowed


@dataclass(frozen=True, slots=True)
class SimulationStep:
    """One change the planner made to its placement state: a node added (pod None), or a pod placed on `node`.

    `kind` says what the node is: "upcoming" (requested, not Ready yet) or "new" (this
    plan's scale-up) for added nodes; "existing", "upcoming", "reclaimed" (a draining
    node taken back) or "new" for placements.
    """

    kind: str
    node: NodeView
    pod: Pod | None = None
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class ScaleUpSimulation:
    """The plan and how it was reached: replaying `steps` on `initial_state(snapshot)` rebuilds the final state."""

    plan: ScaleUpPlan
    steps: tuple[SimulationStep, ...] = ()


@dataclass(frozen=True, slots=True)
class _Option:
    """What growing one group would achieve: handed to the expander that picks the group."""

    group: NodeGroup
    nodes: int
    placed: tuple[Pod, ...]
    waste: float
    steps: tuple[SimulationStep, ...] = ()


def existing_placements(simulation: ScaleUpSimulation) -> dict[str, tuple[str, ...]]:
    """Ready node -> the pending pods the simulation placed in its free room, in placement order.

    What scale-down must leave alone for pending pods: only a node the scale-up plan itself
    would use. A pod placed on no existing node (one that needs a new node, or one no group
    can hold) keeps no node.
    """
    placed: dict[str, list[str]] = {}
    for step in simulation.steps:
        if step.kind == "existing" and step.pod is not None:
            placed.setdefault(step.node.name, []).append(step.pod.key)
    return {node: tuple(pods) for node, pods in placed.items()}


def pending_pods(snapshot: ClusterSnapshot) -> list[Pod]:
    """Pods the scheduler gave up on: PodScheduled=False with reason Unschedulable."""
    return [p for p in snapshot.pods if p.unschedulable and p.node_name is None and not p.terminating]


def initial_state(snapshot: ClusterSnapshot) -> PlacementState:
    """Every observed node and the unfinished pods bound to them: what the scheduler's snapshot holds."""
    return PlacementState.from_cluster((NodeView.of(n) for n in snapshot.nodes), snapshot.pods)


def plan_scale_up(snapshot: ClusterSnapshot, *, options: ScaleUpOptions = ScaleUpOptions()) -> ScaleUpPlan:
    return simulate_scale_up(snapshot, options=options).plan


# --- Equivalence classes ------------------------------------------------------------------

_FITS, _RETRY, _NEVER = 0, 1, 2  # a node's verdict for a pod; _NEVER holds for the rest of the class


@dataclass(slots=True)
class _PodClass:
    index: int
    requests: Resources
    unsupported: bool
    # The topology keys of the pod's spread constraints and affinity terms: only these
    # filters can fail now and pass later; without them every failure is final.
    topology_keys: tuple[str, ...]
    static: dict[object, bool] = field(default_factory=dict)  # candidate key -> passes the static filters
    spread: SpreadPlan | None = None  # the class's spread constraints with their indexes, once looked up
    live: list[int] | None = None  # existing and upcoming candidates still worth trying
    why: str | None = None


def _selector_keys(pods: Iterable[Pod], with_own_terms: bool) -> set[str]:
    keys: set[str] = set()
    for pod in pods:
        terms = (*pod.pod_affinity, *pod.pod_anti_affinity) if with_own_terms else pod.pod_anti_affinity
        for term in terms:
            if term.label_selector is not None:
                keys |= term.label_selector.keys
        if with_own_terms:
            for constraint in pod.topology_spread:
                if constraint.label_selector is not None:
                    keys |= constraint.label_selector.keys
    return keys


def _classify(pending: Sequence[Pod], snapshot: ClusterSnapshot) -> dict[int, _PodClass]:
    """Pods by id, each with its equivalence class."""
    # Labels matter only where a selector in play reads them: a pending pod's own terms and
    # spread (they select other pods and, for self-matching, the pod itself), and existing
    # pods' anti-affinity (it selects incoming pods). Other labels, such as a StatefulSet
    # pod's own name, must not split a class.
    relevant = _selector_keys(pending, True) | _selector_keys(
        (p for p in snapshot.pods if p.pod_anti_affinity and p.node_name), False
    )
    classes: dict[object, _PodClass] = {}
    by_pod: dict[int, _PodClass] = {}
    for pod in pending:
        if pod.owner is None:
            key: object = ("pod", pod.namespace, pod.name)  # as CA: no controller, no class
        else:
            key = (
                pod.owner.kind,
                pod.owner.name,
                pod.namespace,
                pod.requests,
                tuple(sorted(pod.node_selector.items())),
                pod.node_affinity,
                pod.tolerations,
                pod.pod_affinity,
                pod.pod_anti_affinity,
                pod.topology_spread,
                pod.host_ports,
                pod.unsupported,
                tuple(sorted((k, v) for k, v in pod.labels.items() if k in relevant)),
            )
        cls = classes.get(key)
        if cls is None:
            topology_keys = {c.topology_key for c in pod.topology_spread if c.is_filter}
            topology_keys |= {t.topology_key for t in pod.pod_affinity}
            cls = _PodClass(len(classes), pod_requests(pod), bool(pod.unsupported), tuple(sorted(topology_keys)))
            classes[key] = cls
        by_pod[id(pod)] = cls
    return by_pod


def _verdict(
    pod: Pod, cls: _PodClass, node: NodeView, static_key: object, state: PlacementState, failed_domains: set[object]
) -> int:
    """Whether `pod` fits `node` now; on failure, whether it could ever fit it later in this plan.

    The same filters as `check`, ordered cheapest first (the reason is not needed here).
    Spread and affinity depend only on the node's values for their topology keys: within
    one scan, a domain that failed once (`failed_domains`) fails for all its nodes.
    """
    passes = cls.static.get(static_key)
    if passes is None:
        passes = not (node.unschedulable or static_mismatch(pod, node.labels, node.taints, node.name))
        cls.static[static_key] = passes
    if not passes:
        return _NEVER
    if pod.host_ports and host_port_conflict(pod, node, state):
        return _NEVER
    if not fits_resources(cls.requests, node, state):
        return _NEVER
    if cls.topology_keys:
        labels = node.labels
        domain = tuple([labels.get(key) for key in cls.topology_keys])
        if domain in failed_domains:
            return _RETRY
        if cls.spread is None:
            cls.spread = spread_plan(pod, state) if pod.topology_spread else []
        if (cls.spread and spread_violation(cls.spread, labels)) or (
            pod.pod_affinity and pod_affinity_mismatch(pod, node, state)
        ):
            failed_domains.add(domain)
            return _RETRY
    if pod.pod_anti_affinity and pod_anti_affinity_conflict(pod, node, state):
        return _NEVER
    if existing_anti_affinity_conflict(pod, node, state):
        return _NEVER
    return _FITS


def _first_fit(
    pod: Pod, cls: _PodClass, nodes: Sequence[NodeView], keys: Sequence[object], live: list[int], state: PlacementState
) -> tuple[int, list[int]]:
    """The first node on `live` the pod fits (-1 if none), and `live` without the nodes it can never fit."""
    kept: list[int] = []
    failed_domains: set[object] = set()
    for position, i in enumerate(live):
        verdict = _verdict(pod, cls, nodes[i], keys[i], state, failed_domains)
        if verdict == _FITS:
            if len(kept) == position:
                return i, live  # nothing dropped: keep the list as it is
            kept.extend(live[position:])
            return i, kept
        if verdict == _RETRY:
            kept.append(i)
    return -1, kept


# --- Groups -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _GroupPlan:
    """A group's template, with what each of its new nodes gives away to DaemonSets, and its nodes per zone."""

    group: NodeGroup
    template: NodeTemplate
    allocatable: Resources
    reserved_ports: tuple[HostPort, ...]
    per_zone: dict[str, int]
    upcoming: int = 0
    planned: int = 0
    price_per_hour: float | None = None  # one node's, when the provider knows it (the `price` expander)

    def view(self, name: str, zone: str | None) -> NodeView:
        labels = planned_node_labels(self.template, self.group, name, zone)
        return NodeView(name, labels, self.template.taints, self.allocatable, False, self.reserved_ports)

    def planned_name(self, offset: int) -> str:
        return f"planned/{self.group.id}/{self.planned + offset}"


def _group_plans(snapshot: ClusterSnapshot) -> dict[str, _GroupPlan]:
    per_zone: dict[str, dict[str, int]] = {}
    for node in snapshot.nodes:
        ref = node.instance
        zone = node.labels.get(LABEL_ZONE)
        if ref is not None and zone is not None and (node.ready or node.is_being_deleted):
            counts = per_zone.setdefault(ref.group_id, {})
            counts[zone] = counts.get(zone, 0) + 1
    seen = daemonsets_seen_by_group(snapshot.nodes, snapshot.pods)
    observed = tuple(observed_daemonset_pods(snapshot.pods).values())  # once, not once per group
    plans = {}
    for group in snapshot.groups:
        template = snapshot.templates.get(group.id)
        if template is None:
            continue
        daemons = template_daemonsets(
            snapshot.daemonsets, observed, template.labels, template.taints,
            seen_on_group=seen.get(group.id, frozenset()),
        )
        plans[group.id] = _GroupPlan(
            group, template, template.allocatable - daemonset_overhead(daemons), daemonset_host_ports(daemons),
            dict(per_zone.get(group.id, {})), price_per_hour=snapshot.prices.get(group.id),
        )
    return plans


def _add_upcoming(
    snapshot: ClusterSnapshot, plans: Mapping[str, _GroupPlan], state: PlacementState, steps: list[SimulationStep]
) -> list[NodeView]:
    """Nodes a group has been asked for but that are not Ready yet count as free template nodes."""
    present = present_by_group(snapshot.nodes)
    views: list[NodeView] = []
    for group in snapshot.groups:
        plan = plans.get(group.id)
        if plan is None:
            continue
        for _ in range(max(0, group.running_target - present.get(group.id, 0))):
            zone = next_zone(group, plan.per_zone)
            view = plan.view(f"upcoming/{group.id}/{plan.upcoming}", zone)
            plan.upcoming += 1
            _count_zone(plan, view)
            state.add_node(view)
            steps.append(SimulationStep("upcoming", view, None, group.id))
            views.append(view)
    return views


def _reclaimable(snapshot: ClusterSnapshot, names: frozenset[str]) -> list[NodeView]:
    """Draining nodes as they would be once their removal is cancelled: schedulable, without our taints."""
    if not names:
        return []
    ours = (TO_BE_DELETED_TAINT, DELETION_CANDIDATE_TAINT)
    return [
        replace(NodeView.of(n), unschedulable=False, taints=tuple(t for t in n.taints if t.key not in ours))
        for n in snapshot.nodes if n.name in names and n.ready and n.is_being_deleted
    ]


def _count_zone(plan: _GroupPlan, view: NodeView) -> None:
    zone = view.labels.get(LABEL_ZONE)
    if zone is not None:
        plan.per_zone[zone] = plan.per_zone.get(zone, 0) + 1


# --- The plan -----------------------------------------------------------------------------------


def simulate_scale_up(snapshot: ClusterSnapshot, *, options: ScaleUpOptions = ScaleUpOptions(),
                      state: PlacementState | None = None) -> ScaleUpSimulation:
    """The plan and its steps. `state`: the observed cluster (`initial_state(snapshot)`) when the caller
    shares it with the scale-down plan of the same poll; the simulation uses it and leaves it as found
    (every change it makes is journaled, and rolled back), which saves building it twice.
    """
    if state is None:
        return _simulate_scale_up(snapshot, options, None)
    checkpoint = state.checkpoint()
    try:
        return _simulate_scale_up(snapshot, options, state)
    finally:
        state.rollback(checkpoint)


def _simulate_scale_up(snapshot: ClusterSnapshot, options: ScaleUpOptions,
                       state: PlacementState | None) -> ScaleUpSimulation:
    virtual = {n.name for n in snapshot.nodes if is_virtual_node(n)}
    split = split_demand(pending_pods(snapshot), now=snapshot.taken_at, rules=options.pod_rules, virtual_nodes=virtual)
    pending = list(split.demand)
    if not pending:
        return ScaleUpSimulation(ScaleUpPlan(ignored=dict(split.ignored)))
    if state is None:
        state = initial_state(snapshot)
    members = gangs(pending) if options.gangs else {}
    if not members:
        return _plan(snapshot, options, state, pending, split.ignored, virtual, {})
    return _plan_gangs(snapshot, options, state, pending, split.ignored, virtual, members)


# Plans in which the gangs left over may still take the room a partial gang gave back; then only the gangs
# the last plan placed whole are planned again, so identical gangs behind a limit cost one plan, not one each.
MAX_GANG_ROUNDS = 4


def _plan_gangs(snapshot: ClusterSnapshot, options: ScaleUpOptions, state: PlacementState, pending: list[Pod],
                ignored: Mapping[str, str], virtual: set[str], members: Mapping[str, list[Pod]]) -> ScaleUpSimulation:
    """The plan with every gang placed whole or not at all.

    Plan; a gang only partly placed is left out and the rest planned again, so the room it took goes to
    pods that can use it. When several gangs are partial, the first in the plan's order is kept one more
    round (the others' room may complete it), so two gangs competing for room that fits one do not
    starve each other. Every round leaves out at least one gang, and the loop ends only on a plan with no
    partial gang: the answer never holds part of a gang.
    """
    gang_of_pod = {id(pod): gang for gang, pods in members.items() for pod in pods}
    gang_of_key = {pod.key: gang for gang, pods in members.items() for pod in pods}
    left_out: dict[str, str] = {}  # pod key -> why, for every pod of a gang left out
    spared: set[str] = set()
    rounds = 0
    checkpoint = state.checkpoint()
    while True:
        planned = [p for p in pending if p.key not in left_out]
        simulation = _plan(snapshot, options, state, planned, ignored, virtual, gang_of_pod)  # sorts `planned`
        unplaced: dict[str, int] = {}
        for key in simulation.plan.unplaceable:
            gang = gang_of_key.get(key)
            if gang is not None:
                unplaced[gang] = unplaced.get(gang, 0) + 1
        # In the plan's order (that of each gang's first pod), so the gang kept is the one planned first.
        in_order = dict.fromkeys(gang_of_pod[id(p)] for p in planned if id(p) in gang_of_pod)
        partial = [g for g in in_order if 0 < unplaced.get(g, 0) < len(members[g])]
        if not partial:
            break
        rounds += 1
        if rounds >= MAX_GANG_ROUNDS:
            drop = [g for g in in_order if unplaced.get(g, 0)]
        elif len(partial) > 1 and partial[0] not in spared:
            spared.add(partial[0])
            drop = partial[1:]
        else:
            drop = partial
        for gang in drop:
            count = len(members[gang])
            why = partial_reason(gang, count - unplaced[gang], count)
            for pod in members[gang]:
                # A gang none of whose pods fit keeps the plan's own reason (a filter, a limit).
                left_out[pod.key] = why if unplaced[gang] < count else simulation.plan.unplaceable[pod.key]
        state.rollback(checkpoint)
    if not left_out:
        return simulation
    return replace(simulation, plan=replace(simulation.plan, unplaceable={**simulation.plan.unplaceable, **left_out}))


def _plan(snapshot: ClusterSnapshot, options: ScaleUpOptions, state: PlacementState, pending: list[Pod],
          ignored: Mapping[str, str], virtual: set[str], gang_of_pod: Mapping[int, str]) -> ScaleUpSimulation:
    """One plan of `pending` (the demand) on `state`, which it changes (the caller rolls it back)."""
    if not pending:
        return ScaleUpSimulation(ScaleUpPlan(ignored=dict(ignored)))
    classes = _classify(pending, snapshot)

    after = options.after

    def size_order(pod: Pod) -> tuple[bool, int, int, str, int, str]:
        # First-fit decreasing; a gang's pods, then a class's, stay together among equals: a gang reaches
        # the limits whole or late, and a class's caches stay warm. Without gangs, the gang is "" for all.
        cls = classes[id(pod)]
        return (pod.key in after, -cls.requests.cpu_milli, -cls.requests.memory_bytes, gang_of_pod.get(id(pod), ""),
                cls.index, pod.key)

    pending.sort(key=size_order)
    plans = _group_plans(snapshot)
    steps: list[SimulationStep] = []

    # 1. Free space on Ready nodes, then on nodes requested but not Ready yet, then on
    #    draining nodes whose removal may still be cancelled: cheaper than a new VM.
    candidates = [
        NodeView.of(n) for n in snapshot.nodes
        if n.ready and not n.unschedulable and not n.is_being_deleted and n.name not in virtual
    ]
    kinds = ["existing"] * len(candidates)
    upcoming = _add_upcoming(snapshot, plans, state, steps)
    candidates += upcoming
    kinds += ["upcoming"] * len(upcoming)
    reclaimable = _reclaimable(snapshot, options.reclaimable)
    candidates += reclaimable
    kinds += ["reclaimed"] * len(reclaimable)
    reclaimed: dict[str, list[str]] = {}
    keys = [view.name for view in candidates]
    absorbed: list[str] = []
    remaining: list[Pod] = []
    for pod in pending:
        cls = classes[id(pod)]
        if cls.unsupported:
            remaining.append(pod)
            continue
        if cls.live is None:
            cls.live = list(range(len(candidates)))
        index, cls.live = _first_fit(pod, cls, candidates, keys, cls.live, state)
        if index < 0:
            remaining.append(pod)
            continue
        state.place(pod, candidates[index].name, cls.requests)
        steps.append(SimulationStep(kinds[index], candidates[index], pod))
        absorbed.append(pod.key)
        if kinds[index] == "reclaimed":
            reclaimed.setdefault(candidates[index].name, []).append(pod.key)

    # Existing and booting nodes a hostname-spread pod may go back to once new nodes raise the
    # spread's minimum (cluster-autoscaler's estimator does so for such pods; see _estimate).
    retry_on = _RetryNodes(
        [view for view, kind in zip(candidates, kinds, strict=True) if kind != "reclaimed"],
        [kind for kind in kinds if kind != "reclaimed"],
    )

    # 2. New nodes: estimate every group, let the expander pick one, commit it, repeat for the rest.
    totals = cluster_totals(snapshot, exclude=virtual)
    room: dict[str, int] = {}
    room_reason: dict[str, str] = {}
    added: dict[str, tuple[int, list[str]]] = {}
    groups = sorted(snapshot.groups, key=lambda g: g.id)
    estimates: dict[str, _Option | None] = {}
    estimated_room: dict[str, int] = {}
    quota = options.quota
    capped: set[str] = set()
    # Lanes of one multi-size set share its max: what one lane takes in this plan, the others cannot.
    parents = lanes_by_parent(groups)
    headroom = {parent: set_headroom(lanes) for parent, lanes in parents.items()}
    while remaining:
        for group in groups:
            # Per-group max, MAX_NODES_PER_SCALE_UP and the cluster-wide node, core and memory limits.
            taken = added.get(group.id, (0, []))[0]
            plan_of = plans.get(group.id)
            if plan_of is None or group.id in options.unavailable:
                room[group.id] = 0
                if group.id in options.unavailable:
                    room_reason[group.id] = options.unavailable[group.id]
                continue
            allowance = allowed_increase(
                len(remaining), group=replace(group, capacity=group.capacity + taken), template=plan_of.template,
                totals=totals, limits=options.limits, max_nodes_per_scale_up=options.max_nodes_per_scale_up - taken,
            )
            room[group.id] = allowance.count
            if allowance.reason and allowance.reason != "max nodes per scale-up reached":  # _why_not says it with N
                room_reason[group.id] = allowance.reason
            if quota is not None:
                cap, why = quota.allowed(group)
                if cap is not None and cap < room[group.id]:
                    room[group.id] = cap
                    room_reason[group.id] = f"quota: {why}"
                    capped.add(group.id)
            if group.lane:
                left = headroom[group.parent_id] - sum(added.get(g.id, (0, []))[0] for g in parents[group.parent_id])
                if left < room[group.id]:
                    room[group.id] = max(0, left)
                    room_reason[group.id] = max_size_reason(group.parent_id)
        # Without affinity, anti-affinity or spread among the pods left, one group's new nodes
        # cannot change another's estimate: an estimate stays valid until a pod it placed is
        # taken by the group chosen, and only those are estimated again.
        reuse = options.reuse_estimates and not any(p.topology_spread or p.pod_affinity or p.pod_anti_affinity for p in remaining)
        candidates = []
        for group in groups:
            if reuse and group.id in estimates and estimated_room.get(group.id) == room[group.id]:
                option = estimates[group.id]
            else:
                option = estimates[group.id] = _estimate(
                    plans.get(group.id), remaining, room[group.id], state, classes, retry_on)
                estimated_room[group.id] = room[group.id]
            if option is not None:
                candidates.append(option)
        if not candidates:
            break
        if options.spot_first:
            candidates = [o for o in candidates if o.group.is_spot] or candidates
        best = _expand(candidates, plans, options)
        chosen = [best]
        if options.balance_similar:
            chosen = _balanced(best, candidates, plans, state, classes, totals, added, options) or chosen
            if quota is not None and not _within_quota(chosen, quota):
                chosen = [best]  # balancing splits without looking at quotas; the best option alone fits them
        placed: set[int] = set()
        for option in chosen:
            _commit(option, plans[option.group.id], state, steps)
            if quota is not None:
                quota = quota.consume(option.group, option.nodes)
            totals = totals.plus(option.nodes, plans[option.group.id].template.allocatable)
            room[option.group.id] -= option.nodes
            nodes, pods = added.get(option.group.id, (0, []))
            added[option.group.id] = (nodes + option.nodes, pods + [p.key for p in option.placed])
            placed |= {id(p) for p in option.placed}
        remaining = [p for p in remaining if id(p) not in placed]
        grown = {option.group.id for option in chosen}
        for group_id, option in list(estimates.items()):
            if group_id in grown or (option is not None and any(id(p) in placed for p in option.placed)):
                del estimates[group_id]

    increases = tuple(
        GroupIncrease(group.id, group.running_target, group.running_target + added[group.id][0], tuple(added[group.id][1]))
        for group in snapshot.groups
        if group.id in added
    )
    unplaceable = {
        pod.key: _why_not(pod, classes[id(pod)], snapshot, plans, room, added, options, state, room_reason)
        for pod in remaining
    }
    limited = _limited(remaining, classes, plans, room, room_reason, added, state)
    plan = ScaleUpPlan(increases=increases, absorbed=tuple(absorbed), unplaceable=unplaceable,
                       ignored=dict(ignored), reclaimed={n: tuple(p) for n, p in reclaimed.items()},
                       limited=limited, quota_capped=tuple(sorted(capped)))
    return ScaleUpSimulation(plan, tuple(steps))


def _within_quota(options: Sequence[_Option], quota: Quota) -> bool:
    for option in options:
        cap, _ = quota.allowed(option.group)
        if cap is not None and option.nodes > cap:
            return False
        quota = quota.consume(option.group, option.nodes)
    return True


@dataclass(frozen=True, slots=True)
class _RetryNodes:
    """Nodes outside the estimate (existing, upcoming) that hostname-spread pods may be placed on again."""

    views: Sequence[NodeView]
    kinds: Sequence[str]


def _uses_hostname_spread(pod: Pod) -> bool:
    # cluster-autoscaler's isPodUsingHostNameTopologyKey.
    return any(c.topology_key == LABEL_HOSTNAME for c in pod.topology_spread)


def _estimate(
    plan: _GroupPlan | None,
    pods: Sequence[Pod],
    room: int,
    state: PlacementState,
    classes: Mapping[int, _PodClass],
    retry_on: _RetryNodes = _RetryNodes((), ()),
) -> _Option | None:
    """Bin-pack `pods` onto at most `room` new nodes of the group, first-fit decreasing; the state is left as found.

    As cluster-autoscaler's binpacking estimator, a pod with a hostname topology spread
    that fits none of the new nodes first tries every other node (existing and booting
    ones too) before a node is added for it: each new node raises the spread's global
    minimum, so an existing node that had to be skipped before may take the pod now.
    Without this, every new node would hold maxSkew pods more than the emptiest existing
    node, and a large scale-up would ask for about twice the nodes CA does.
    """
    if plan is None or room <= 0:
        return None
    group = plan.group
    checkpoint = state.checkpoint()
    try:
        opened: list[NodeView] = []
        opened_keys: list[object] = []
        steps: list[SimulationStep] = []
        placed: list[Pod] = []
        per_zone = dict(plan.per_zone)
        given_up: set[int] = set()  # classes that failed on a fresh node of this group
        live: dict[int, tuple[list[int], int]] = {}  # class -> (opened nodes worth trying, opened nodes seen)
        retry_live: dict[int, list[int]] = {}  # class -> retry_on nodes worth trying
        for pod in pods:
            cls = classes[id(pod)]
            if cls.unsupported or cls.index in given_up:
                continue
            tried, seen = live.get(cls.index, ([], 0))
            if seen < len(opened):
                tried = tried + list(range(seen, len(opened)))
            index, tried = _first_fit(pod, cls, opened, opened_keys, tried, state)
            live[cls.index] = (tried, len(opened))
            if index >= 0:
                state.place(pod, opened[index].name, cls.requests)
                steps.append(SimulationStep("new", opened[index], pod, group.id))
                placed.append(pod)
                continue
            if retry_on.views and _uses_hostname_spread(pod):
                retry = retry_live.get(cls.index)
                if retry is None:
                    retry = list(range(len(retry_on.views)))
                view_names = [v.name for v in retry_on.views]
                index, retry_live[cls.index] = _first_fit(pod, cls, retry_on.views, view_names, retry, state)
                if index >= 0:
                    state.place(pod, retry_on.views[index].name, cls.requests)
                    steps.append(SimulationStep(retry_on.kinds[index], retry_on.views[index], pod))
                    placed.append(pod)
                    continue
            if len(opened) >= room:
                continue  # no more nodes in this group; a smaller pod may still fit an open one
            zone = next_zone(group, per_zone)
            view = plan.view(plan.planned_name(len(opened)), zone)
            static_key = (group.id, zone)
            before = state.checkpoint()
            state.add_node(view)
            if _verdict(pod, cls, view, static_key, state, set()) != _FITS:
                state.rollback(before)
                given_up.add(cls.index)  # as CA: if a fresh node will not do, no pod of the class will
                continue
            state.place(pod, view.name, cls.requests)
            steps.append(SimulationStep("new", view, None, group.id))
            steps.append(SimulationStep("new", view, pod, group.id))
            opened.append(view)
            opened_keys.append(static_key)
            placed.append(pod)
            zone_value = view.labels.get(LABEL_ZONE)
            if zone is not None and zone_value is not None:
                per_zone[zone_value] = per_zone.get(zone_value, 0) + 1
        if not placed:
            return None
        return _Option(group, len(opened), tuple(placed), _waste(plan.allocatable, opened, state), tuple(steps))
    finally:
        state.rollback(checkpoint)


def _balanced(
    best: _Option,
    candidates: Sequence[_Option],
    plans: Mapping[str, _GroupPlan],
    state: PlacementState,
    classes: Mapping[int, _PodClass],
    totals: ClusterTotals,
    added: Mapping[str, tuple[int, list[str]]],
    options: ScaleUpOptions,
) -> list[_Option]:
    """The best option's nodes split over it and its similar groups, smallest group first (CA's balancing).

    As in CA, a similar group takes part only if its own estimate placed every pod the best
    option placed, so the split never sends a pod to a group that cannot run it. Each share
    is estimated again on the state the earlier shares left, so every placement still passes
    the filters (zone spread, anti-affinity) against what the plan has placed so far. Returns
    [] when there is nothing to balance, and the state is left as found.
    """
    wanted = {id(p) for p in best.placed}
    peers = [o.group for o in candidates if o.group.id != best.group.id and wanted <= {id(p) for p in o.placed}]
    templates = {gid: plan.template for gid, plan in plans.items()}
    similar = similar_groups(best.group, peers, templates, extra_ignored_labels=options.balancing_ignored_labels)
    if not similar:
        return []
    grown = {g.id: added.get(g.id, (0, []))[0] for g in [best.group, *similar]}
    split = balance_within_limits(
        best.nodes,
        [replace(g, capacity=g.capacity + grown[g.id]) for g in [best.group, *similar]],
        templates,
        totals=totals,
        limits=options.limits,
        max_nodes_per_scale_up=options.max_nodes_per_scale_up - max(grown.values()),
    )
    checkpoint = state.checkpoint()
    shares: list[_Option] = []
    try:
        pods = list(best.placed)
        for group_id in sorted(split.increases):
            share = _estimate(plans[group_id], pods, split.increases[group_id], state, classes)
            if share is None:
                continue
            _replay(share, state)
            shares.append(share)
            taken = {id(p) for p in share.placed}
            pods = [p for p in pods if id(p) not in taken]
    finally:
        state.rollback(checkpoint)
    return shares


def _replay(option: _Option, state: PlacementState) -> None:
    """The option's nodes and placements join the state."""
    for step in option.steps:
        if step.pod is None:
            state.add_node(step.node)
        else:
            state.place(step.pod, step.node.name, pod_requests(step.pod))


def _commit(option: _Option, plan: _GroupPlan, state: PlacementState, steps: list[SimulationStep]) -> None:
    """Replay the chosen option's steps for good, and count its nodes in the group's plan."""
    _replay(option, state)
    for step in option.steps:
        if step.pod is None:
            _count_zone(plan, step.node)
    steps.extend(option.steps)
    plan.planned += option.nodes


def _waste(capacity: Resources, nodes: Sequence[NodeView], state: PlacementState) -> float:
    """cluster-autoscaler's least-waste score: unused share of CPU plus unused share of memory."""
    total_cpu = capacity.cpu_milli * len(nodes) or 1
    total_memory = capacity.memory_bytes * len(nodes) or 1
    free_cpu = sum(capacity.cpu_milli - state.requested(n.name).cpu_milli for n in nodes)
    free_memory = sum(capacity.memory_bytes - state.requested(n.name).memory_bytes for n in nodes)
    return free_cpu / total_cpu + free_memory / total_memory


def _expand(estimates: Sequence[_Option], plans: Mapping[str, _GroupPlan], options: ScaleUpOptions) -> _Option:
    """The expander chain's choice among the groups' estimates, after each multi-size set's lanes chose one."""
    estimates = [_cheapest_nodes(e, plans[e.group.id]) if e.group.lane else e for e in estimates]
    by_group = {estimate.group.id: estimate for estimate in estimates}
    candidates = choose_lanes([
        ExpansionOption.build(
            estimate.group, plans[estimate.group.id].template, estimate.nodes, estimate.placed,
            capacity=plans[estimate.group.id].allocatable, price_per_hour=plans[estimate.group.id].price_per_hour,
        )
        for estimate in estimates
    ])
    chosen = choose(candidates, chain=options.expander, priorities=options.priorities, rng=options.seed)
    assert chosen is not None  # estimates is never empty here
    return by_group[chosen.group.id]


def _cheapest_nodes(option: _Option, plan: _GroupPlan) -> _Option:
    """A lane's option cut to the nodes that place work cheapest (engine.multi_size.cheapest_prefix).

    The pods of the nodes cut are planned again in the next round, where a smaller size may take them.
    Left whole: a lane without a price, a Prioritized set's (the user's ranks decide, not price), and an
    option that put hostname-spread pods back on other nodes (those placements count on every new node).
    """
    price = plan.price_per_hour
    if price is None or option.nodes < 2 or option.group.allocation_strategy.strip().lower() == PRIORITIZED:
        return option
    if any(step.kind != "new" for step in option.steps):
        return option
    opened = [step.node.name for step in option.steps if step.pod is None]
    work = dict.fromkeys(opened, Fraction(0))
    for step in option.steps:
        if step.pod is not None:
            work[step.node.name] += work_units(pod_requests(step.pod))
    keep = cheapest_prefix(price, [work[name] for name in opened])
    if keep >= len(opened):
        return option
    kept = set(opened[:keep])
    steps = tuple(step for step in option.steps if step.node.name in kept)
    return replace(option, nodes=keep, placed=tuple(step.pod for step in steps if step.pod is not None), steps=steps)


def _limited(
    remaining: Sequence[Pod],
    classes: Mapping[int, _PodClass],
    plans: Mapping[str, _GroupPlan],
    room: Mapping[str, int],
    room_reason: Mapping[str, str],
    added: Mapping[str, tuple[int, list[str]]],
    state: PlacementState,
) -> dict[str, str]:
    """Pods left over only because a grown group hit the cluster's cores or memory max (see ScaleUpPlan.limited)."""
    capped = [
        group_id for group_id in sorted(added)
        if room.get(group_id, 0) <= 0 and room_reason.get(group_id) in (MAX_CLUSTER_CORES_REACHED, MAX_CLUSTER_MEMORY_REACHED)
    ]
    if not capped:
        return {}
    fits: dict[tuple[int, str], bool] = {}
    limited: dict[str, str] = {}
    for pod in remaining:
        cls = classes[id(pod)]
        if cls.unsupported:
            continue
        for group_id in capped:
            known = fits.get((cls.index, group_id))
            if known is None:
                plan = plans[group_id]
                checkpoint = state.checkpoint()
                view = plan.view(plan.planned_name(0), next_zone(plan.group, plan.per_zone))
                state.add_node(view)
                known = fits[(cls.index, group_id)] = check(pod, view, state, cls.requests) is None
                state.rollback(checkpoint)
            if known:
                limited[pod.key] = group_id
                break
    return limited


def _why_not(
    pod: Pod,
    cls: _PodClass,
    snapshot: ClusterSnapshot,
    plans: Mapping[str, _GroupPlan],
    room: Mapping[str, int],
    added: Mapping[str, tuple[int, list[str]]],
    options: ScaleUpOptions,
    state: PlacementState,
    room_reason: Mapping[str, str] | None = None,
) -> str:
    """Per group, the first filter a fresh node of the group fails, or the limit that stopped it; once per class."""
    if cls.why is not None:
        return cls.why
    unsupported = unsupported_construct(pod)
    if unsupported is not None:
        cls.why = unsupported
        return unsupported
    reasons = []
    for group in sorted(snapshot.groups, key=lambda g: g.id):
        plan = plans.get(group.id)
        if plan is None:
            reasons.append(f"{group.id}: no node template")
            continue
        checkpoint = state.checkpoint()
        view = plan.view(plan.planned_name(0), next_zone(group, plan.per_zone))
        state.add_node(view)
        reason = check(pod, view, state, cls.requests)
        state.rollback(checkpoint)
        if reason is None:
            if group.running_target + added.get(group.id, (0, []))[0] >= group.max_size:
                reason = "max size reached"
            elif room.get(group.id, 0) <= 0:
                reason = (room_reason or {}).get(group.id) or f"max nodes per scale-up ({options.max_nodes_per_scale_up}) reached"
            else:
                reason = "no room left in this plan"
        reasons.append(f"{group.id}: {reason}")
    cls.why = "; ".join(reasons) if reasons else "no node groups discovered"
    return cls.why
