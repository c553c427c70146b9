"""Consolidation that replaces: several under-used nodes (or one) onto one cheaper new node.

Pure module, no side effects. Scale-down removes nodes whose pods fit on the nodes that stay; this module finds
what it cannot: nodes whose pods fit elsewhere only if a new, cheaper node is added. As Karpenter's
consolidation, multi-node first (the k least efficient candidates, k = `max_nodes` down to 2, replaced by one
node), then single-node (one candidate by one cheaper node); at most one proposal per poll. The proposal is
carried out by services.replacement: the new node is asked first and the old ones are drained (the ordinary
drain) only once it is Ready (engine.replacement), within the disruption budgets.

A candidate is a Ready, schedulable node of a managed group whose price is known (`snapshot.prices` by group
id: per lane for multi-size groups), older than `min_age`, not unneeded (removing it is scale-down's job), not
being removed or replaced, whose pods all move (engine.drainability): a node running batch pods (a Job's pod,
BATCH_POD_SELECTOR, `safe-to-evict: on-completion`) is never a candidate (it waits, as in scale-down), nor
one a pod pins (`karpenter.sh/do-not-disrupt`, `safe-to-evict: "false"`, local storage, no controller...),
nor one annotated `karpenter.sh/do-not-disrupt: "true"` or cluster-autoscaler's
`cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`. An empty node is scale-down's.

The replacement node is one node of a group (lane) with a template and a known price, room under its max and
not in backoff: its allocatable less the DaemonSets it would run (engine.daemonsets), labelled as a planned
node of the group (engine.templates), and the moved pods must all pass every scheduler filter on it
(engine.predicates.check on engine.placement, as the scale-up planner checks template nodes; the replaced nodes
stay in the simulation tainted ToBeDeleted, as scale-down keeps its candidates). The cheapest such group wins;
a spot group only when every moved pod tolerates spot (AKS's `kubernetes.azure.com/scalesetpriority=spot`
taint) and `on_demand_selector` picks none of them. Its saving is the old nodes' prices less the new node's,
and must be above 0.

Whether the saving is worth the disruption (`policy`):
- `always`: any saving;
- `balanced` (Karpenter's Balanced): (saving / hourly price of every candidate) / (pods moved / movable pods
  on every candidate) must be at least `threshold` (0.5 by default: the share of the saving is at least half
  the share of the disruption);
- `off`: nothing is proposed.
And in both: the pods' expected remaining time. A pod annotated `autoscaler.azure.com/expected-runtime` (a
duration, from the pod's start) is expected to run for what is left of it; one without it is long-running.
The saving accrues until the shortest such remaining time (unbounded when every pod is long-running) and must
exceed what the new node costs over its boot (the target group's measured boot estimate, engine.idle, else
`default_boot`): moving pods that end before the new node has paid for its boot saves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.domain import (
    LABEL_ZONE,
    REPLACE,
    SPOT_LABEL,
    SPOT_VALUE,
    ClusterSnapshot,
    GroupState,
    LabelSelector,
    Node,
    NodeGroup,
    NodeTemplate,
    Pod,
    Resources,
    Taint,
)
from shared.engine.daemonsets import daemonsets_seen_by_group, observed_daemonset_pods, template_daemonsets
from shared.engine.daemonsets import host_ports as daemonset_host_ports
from shared.engine.daemonsets import overhead as daemonset_overhead
from shared.engine.drainability import Budgets, DrainRules, drain_of
from shared.engine.idle import DEFAULT_BOOT, boot_estimate
from shared.engine.placement import NodeView, PlacementState
from shared.engine.pod_rules import is_virtual_node
from shared.engine.predicates import check, pod_requests
from shared.engine.replacement import ReplacementProposal
from shared.engine.scale_down import node_pin
from shared.engine.spot_work import expected_runtime
from shared.engine.templates import next_zone, planned_node_labels

BALANCED, ALWAYS, OFF = "balanced", "always", "off"
POLICIES = (BALANCED, ALWAYS, OFF)
SPOT_TAINT = Taint(SPOT_LABEL, SPOT_VALUE, "NoSchedule")
# Fit simulations (one placement state each) a plan may build: the cheap resource check before each keeps most
# attempts from getting that far, and this bounds a plan on a large cluster of nearly-fitting nodes.
MAX_FIT_ATTEMPTS = 40
NOTHING_CHEAPER = "no group with room offers a cheaper node"


@dataclass(frozen=True, slots=True)
class ConsolidationOptions:
    """CONSOLIDATION (`policy`), CONSOLIDATION_THRESHOLD (`threshold`) and the rules the drain would apply."""

    policy: str = BALANCED
    threshold: float = 0.5
    min_age: timedelta = timedelta(minutes=10)  # a node younger than this is never a candidate
    drain: DrainRules = DrainRules()
    max_nodes: int = 10  # the most nodes one proposal replaces
    default_boot: timedelta = DEFAULT_BOOT  # a target group's boot before its first measured one
    on_demand_selector: LabelSelector | None = None  # ON_DEMAND_POD_SELECTOR: such pods never go to spot
    # Why a proposal would not be admitted now ("" when it would): the caller's disruption budgets
    # (engine.disruption_budgets.admit). A refused proposal does not end the plan: fewer nodes may pass, as
    # Karpenter's multi-node consolidation takes no more candidates than the budgets allow.
    admissible: Callable[[ReplacementProposal], str] | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"consolidation policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.threshold < 0:
            raise ValueError(f"consolidation threshold must be at least 0, got {self.threshold}")
        if self.max_nodes < 1:
            raise ValueError(f"consolidation max_nodes must be at least 1, got {self.max_nodes}")
        if self.min_age < timedelta(0):
            raise ValueError(f"consolidation min_age must not be negative, got {self.min_age}")


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    """At most one proposal, and a verdict per node considered (node -> why it is or is not replaced)."""

    proposals: tuple[ReplacementProposal, ...] = ()
    candidates: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: Node
    group: NodeGroup
    price: float
    move: tuple[Pod, ...]
    usage: float  # the larger of CPU and memory requested by its movable pods over its allocatable


@dataclass(frozen=True, slots=True)
class _Target:
    group: NodeGroup
    template: NodeTemplate
    price: float
    allocatable: Resources  # less its DaemonSets
    view: NodeView


@dataclass(frozen=True, slots=True)
class _Attempt:
    nodes: tuple[_Candidate, ...]
    verdict: str
    proposal: ReplacementProposal | None = None
    judged: bool = False  # a target held the pods: the verdict is about the saving


def plan_consolidation(snapshot: ClusterSnapshot, *, states: Mapping[str, GroupState], unneeded: Collection[str],
                       options: ConsolidationOptions, now: datetime) -> ConsolidationPlan:
    """The replacement to ask this poll (multi-node first, then single-node), and every candidate's verdict."""
    if options.policy == OFF:
        return ConsolidationPlan()
    verdicts: dict[str, str] = {}
    candidates = _candidates(snapshot, states, frozenset(unneeded), options, now, verdicts)
    if not candidates:
        return ConsolidationPlan(candidates=verdicts)
    targets = _targets(snapshot, states, now)
    total_price = sum(c.price for c in candidates)
    total_pods = sum(len(c.move) for c in candidates)
    ordered = sorted(candidates, key=lambda c: (c.usage, len(c.move), c.node.name))
    budget = [MAX_FIT_ATTEMPTS]
    judged: dict[str, bool] = {}
    attempts = [tuple(ordered[:k]) for k in range(min(options.max_nodes, len(ordered)), 1, -1)]
    attempts += [(c,) for c in ordered]
    for nodes in attempts:
        attempt = _attempt(snapshot, states, nodes, targets, options, now, total_price, total_pods, budget)
        if attempt.proposal is not None:
            for c in nodes:
                verdicts[c.node.name] = attempt.verdict
            return ConsolidationPlan((attempt.proposal,), verdicts)
        for c in nodes:  # the latest verdict, unless an earlier one got further (a node that held the pods)
            if attempt.judged or not judged.get(c.node.name, False):
                verdicts[c.node.name], judged[c.node.name] = attempt.verdict, attempt.judged
    return ConsolidationPlan(candidates=verdicts)


def expected_remaining(pod: Pod, now: datetime) -> timedelta | None:
    """What is left of the pod's `autoscaler.azure.com/expected-runtime` from its start; None: long-running.

    A value that is not a positive duration is ignored (engine.spot_work.expected_runtime: the pod counts as
    long-running): consolidation then errs towards acting, as it would for a pod without the annotation.
    """
    runtime = expected_runtime(pod)
    if runtime is None:
        return None
    started = pod.started_at or pod.created_at
    return max(timedelta(0), runtime - (now - started))


def fit_on_new_node(snapshot: ClusterSnapshot, pods: Sequence[Pod], leaving: Collection[str], group: NodeGroup,
                    template: NodeTemplate) -> str | None:
    """Why `pods` (moved off the `leaving` nodes) do not all fit one new node of `group`; None when they do.

    The scale-up planner's check of a template node: allocatable less the DaemonSets it would run, every
    scheduler filter against the cluster as it would be with the pods gone from `leaving` (kept, tainted
    ToBeDeleted).
    """
    target = _target(snapshot, group, template, 0.0, _zone_counts(snapshot), _Daemons.of(snapshot))
    return _fits(_state_without(snapshot, pods, frozenset(leaving)), pods, target)


# --- candidates and targets -------------------------------------------------------------------


def _candidates(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], unneeded: frozenset[str],
                options: ConsolidationOptions, now: datetime, verdicts: dict[str, str]) -> list[_Candidate]:
    groups = {g.id: g for g in snapshot.groups}
    busy = {n for s in states.values() for n in (*s.removing, *s.replacing)}
    pods_on: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and not pod.is_finished:
            pods_on.setdefault(pod.node_name, []).append(pod)
    found = []
    for node in snapshot.nodes:
        ref = node.instance
        group = groups.get(ref.group_id) if ref is not None else None
        if group is None or is_virtual_node(node) or not node.ready or node.unschedulable or node.is_being_deleted:
            continue
        if node.name in busy or node.name in unneeded or now - node.created_at < options.min_age:
            continue
        price = snapshot.prices.get(group.id)
        if price is None:
            continue
        pin = node_pin(node)
        why = f"not moved: node {pin}" if pin else ""
        drain = None if why else drain_of(pods_on.get(node.name, ()), options.drain, snapshot.disruption_budgets,
                                         now=now)
        if drain is not None and drain.pinned_by is not None:
            why = f"not moved: {drain.pinned_by}"
        elif drain is not None and drain.wait:
            why = f"not moved: batch pods running ({drain.wait[0].key})"
        if why:
            verdicts[node.name] = why
            continue
        assert drain is not None
        if not drain.move:
            continue  # empty: scale-down removes it
        found.append(_Candidate(node, group, price, drain.move, _usage(node, drain.move)))
    return found


def _usage(node: Node, pods: Sequence[Pod]) -> float:
    total = Resources()
    for pod in pods:
        total = total + pod_requests(pod)
    alloc = node.allocatable
    shares = [total.cpu_milli / alloc.cpu_milli if alloc.cpu_milli else 1.0,
              total.memory_bytes / alloc.memory_bytes if alloc.memory_bytes else 1.0]
    return max(shares)


def _zone_counts(snapshot: ClusterSnapshot) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for node in snapshot.nodes:
        ref, zone = node.instance, node.labels.get(LABEL_ZONE)
        if ref is not None and zone is not None and node.ready:
            per = counts.setdefault(ref.group_id, {})
            per[zone] = per.get(zone, 0) + 1
    return counts


def _targets(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], now: datetime) -> list[_Target]:
    """Groups that can take one more node now, cheapest first."""
    zones, known = _zone_counts(snapshot), _Daemons.of(snapshot)
    found = []
    for group in snapshot.groups:
        template, price = snapshot.templates.get(group.id), snapshot.prices.get(group.id)
        if template is None or price is None or group.running_target + 1 > group.max_size:
            continue
        state = states.get(group.id)
        if state is not None and state.backoff_until is not None and state.backoff_until > now:
            continue
        found.append(_target(snapshot, group, template, price, zones, known))
    return sorted(found, key=lambda t: (t.price, t.group.id))


@dataclass(frozen=True, slots=True)
class _Daemons:
    """The cluster's DaemonSet pods, read once per plan: which DaemonSets a new node of a group would run."""

    observed: tuple[Pod, ...]
    seen: Mapping[str, frozenset[tuple[str, str]]]

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> _Daemons:
        return cls(tuple(observed_daemonset_pods(snapshot.pods).values()),
                   daemonsets_seen_by_group(snapshot.nodes, snapshot.pods))


def _target(snapshot: ClusterSnapshot, group: NodeGroup, template: NodeTemplate, price: float,
            zones: Mapping[str, Mapping[str, int]], known: _Daemons) -> _Target:
    daemons = template_daemonsets(snapshot.daemonsets, known.observed, template.labels, template.taints,
                                  seen_on_group=known.seen.get(group.id, frozenset()))
    allocatable = template.allocatable - daemonset_overhead(daemons)
    name = f"consolidation/{group.id}"
    labels = planned_node_labels(template, group, name, next_zone(group, zones.get(group.id, {})))
    view = NodeView(name, labels, template.taints, allocatable, False, daemonset_host_ports(daemons))
    return _Target(group, template, price, allocatable, view)


# --- one attempt ------------------------------------------------------------------------------


def _attempt(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], nodes: tuple[_Candidate, ...],
             targets: Sequence[_Target], options: ConsolidationOptions, now: datetime, total_price: float,
             total_pods: int, budget: list[int]) -> _Attempt:
    old_price = sum(c.price for c in nodes)
    pods = tuple(p for c in nodes for p in c.move)
    own = {c.group.id for c in nodes} if len(nodes) == 1 else set()
    cheaper = [t for t in targets if t.price < old_price and t.group.id not in own]
    if not cheaper:
        return _Attempt(nodes, NOTHING_CHEAPER)
    spot_ok = all(_tolerates_spot(p, options.on_demand_selector) for p in pods)
    needed = Resources()
    for pod in pods:
        needed = needed + pod_requests(pod)
    why = "pods don't fit one node of a cheaper group"
    leaving = frozenset(c.node.name for c in nodes)
    state: PlacementState | None = None  # built at the first target worth a simulation, shared by the next ones
    for target in cheaper:
        if target.group.is_spot and not spot_ok:
            why = f"pods don't all tolerate spot ({target.group.id} is spot)"
            continue
        if not needed.fits_in(target.allocatable):
            continue
        if budget[0] <= 0:
            return _Attempt(nodes, "not evaluated: the plan's fit simulations are spent")
        budget[0] -= 1
        state = state if state is not None else _state_without(snapshot, pods, leaving)
        misfit = _fits(state, pods, target)
        if misfit is not None:
            why = f"pods don't fit one node of {target.group.id}: {misfit}"
            continue
        return _judge(snapshot, states, nodes, pods, target, options, now, old_price, total_price, total_pods)
    return _Attempt(nodes, why)


def _judge(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], nodes: tuple[_Candidate, ...],
           pods: tuple[Pod, ...], target: _Target, options: ConsolidationOptions, now: datetime, old_price: float,
           total_price: float, total_pods: int) -> _Attempt:
    """The cheapest fitting target found: whether the saving is worth the disruption."""
    saving = old_price - target.price
    detail = f"{_sizes(nodes)} -> 1 x {target.group.vm_size}"
    if options.policy == BALANCED:
        score = (saving / total_price) / (len(pods) / total_pods)
        if score < options.threshold:
            return _Attempt(nodes, f"{detail} saves ${saving:.2f}/h, too little for moving {len(pods)} pods "
                                   f"(balanced score {score:.2f} < {options.threshold:.2f})", judged=True)
    budgets = Budgets(snapshot.disruption_budgets)
    short = budgets.short(pods)
    if short is not None:
        return _Attempt(nodes, f"{detail}: {short}", judged=True)
    remaining = [r for p in pods if (r := expected_remaining(p, now)) is not None]
    if remaining:
        horizon = min(remaining)
        state = states.get(target.group.id)
        boot = boot_estimate(state.boots if state is not None else (), default=options.default_boot)
        gained, boot_cost = saving * horizon.total_seconds() / 3600, target.price * boot.total_seconds() / 3600
        if gained <= boot_cost:
            return _Attempt(nodes, f"{detail} saves ${gained:.3f} before pod work ends in {horizon}, not more than "
                                   f"the new node's boot costs (${boot_cost:.3f})", judged=True)
    proposal = ReplacementProposal(
        nodes=tuple((c.node.name, c.group.id) for c in nodes), reason=REPLACE, to_group=target.group.id, count=1,
        saving_per_hour=round(saving, 6), detail=detail,
    )
    refused = options.admissible(proposal) if options.admissible is not None else ""
    if refused:
        return _Attempt(nodes, f"{detail} saves ${saving:.2f}/h, not now: {refused}", judged=True)
    return _Attempt(nodes, f"replace {detail}: saves ${saving:.2f}/h", proposal, judged=True)


def _state_without(snapshot: ClusterSnapshot, pods: Sequence[Pod], leaving: frozenset[str]) -> PlacementState:
    """The cluster with `pods` gone and the `leaving` nodes tainted ToBeDeleted (kept: their topology domains)."""
    moving = {id(p) for p in pods}
    views = (NodeView.of(n).as_removed() if n.name in leaving else NodeView.of(n) for n in snapshot.nodes)
    return PlacementState.from_cluster(views, (p for p in snapshot.pods if id(p) not in moving))


def _fits(state: PlacementState, pods: Sequence[Pod], target: _Target) -> str | None:
    """Whether every pod passes the filters on the target's new node; the state is left as found."""
    checkpoint = state.checkpoint()
    try:
        state.add_node(target.view)
        for pod in sorted(pods, key=lambda p: (-pod_requests(p).cpu_milli, -pod_requests(p).memory_bytes, p.key)):
            requests = pod_requests(pod)
            why = check(pod, target.view, state, requests)
            if why is not None:
                return f"pod {pod.key}: {why}"
            state.place(pod, target.view.name, requests)
        return None
    finally:
        state.rollback(checkpoint)


def _tolerates_spot(pod: Pod, on_demand: LabelSelector | None) -> bool:
    if on_demand is not None and on_demand.matches(pod.labels):
        return False
    return any(t.tolerates(SPOT_TAINT) for t in pod.tolerations)


def _sizes(nodes: Sequence[_Candidate]) -> str:
    counts: dict[str, int] = {}
    for c in nodes:
        counts[c.group.vm_size] = counts.get(c.group.vm_size, 0) + 1
    return " + ".join(f"{n} x {size}" for size, n in sorted(counts.items()))
