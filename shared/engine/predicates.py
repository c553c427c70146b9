"""Does a pod fit a node (or a node-to-be)? kube-scheduler's filters, one function each.

Pure module, no side effects. Each predicate returns None when the pod passes, or
the reason in kube-scheduler's own words when it does not, so that callers can both
decide and explain (the reasons end up in NotTriggerScaleUp events):

| filter (kube-scheduler plugin)     | predicate                         | reason                                                        |
|------------------------------------|-----------------------------------|---------------------------------------------------------------|
| (none: our own honesty)            | `unsupported_construct`           | unsupported: <construct>                                      |
| NodeUnschedulable                  | `node_unschedulable`              | node(s) were unschedulable                                    |
| TaintToleration                    | `untolerated_taint`               | node(s) had untolerated taint {key: value}                    |
| NodeAffinity (nodeSelector too)    | `node_affinity_mismatch`          | node(s) didn't match Pod's node affinity/selector             |
| NodePorts                          | `host_port_conflict`              | node(s) didn't have free ports for the requested pod ports    |
| NodeResourcesFit                   | `insufficient_resources`          | Too many pods / Insufficient cpu / ... / Insufficient <name>  |
| PodTopologySpread (DoNotSchedule)  | `topology_spread_mismatch`        | node(s) didn't match pod topology spread constraints          |
| InterPodAffinity                   | `inter_pod_affinity_mismatch`     | node(s) didn't match pod affinity rules / anti-affinity ...   |

The stateful filters read a `PlacementState` (shared/engine/placement.py) that holds
what is, or is planned to be, on each node and in each topology domain.

`check` runs them in the scheduler's order, which is also cheapest first: the static
filters (those that depend only on the node's labels and taints) before the ones that
look at the `PlacementState`. The scheduler stops at a node's first failing filter,
and so do we, so a node's reason is the one the scheduler would give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.domain import Pod, Resources, Taint, TopologySpreadConstraint
from shared.engine.placement import (
    NodeView,
    PlacementState,
    SpreadIndex,
    TermKey,
    matches_node_affinity,
    term_key,
    tolerates_all,
)

__all__ = [
    "AFFINITY_RULES",
    "ANTI_AFFINITY_RULES",
    "EXISTING_ANTI_AFFINITY_RULES",
    "NODE_AFFINITY",
    "PORTS",
    "SPREAD",
    "SPREAD_MISSING_LABEL",
    "UNSCHEDULABLE",
    "check",
    "existing_anti_affinity_conflict",
    "fits_resources",
    "host_port_conflict",
    "insufficient",
    "insufficient_resources",
    "inter_pod_affinity_mismatch",
    "node_affinity_mismatch",
    "node_unschedulable",
    "pod_affinity_mismatch",
    "pod_anti_affinity_conflict",
    "pod_requests",
    "selector_mismatch",
    "SpreadDeparture",
    "spread_departures",
    "spread_plan",
    "spread_violation",
    "static_mismatch",
    "topology_spread_mismatch",
    "unsupported_construct",
    "untolerated_taint",
]

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
PORTS = "node(s) didn't have free ports for the requested pod ports"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = SPREAD + " (missing required label)"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES = "node(s) didn't satisfy existing pods anti-affinity rules"


def pod_requests(pod: Pod) -> Resources:
    """What the pod takes from a node: its requests, and always exactly one pod slot."""
    requests = pod.requests
    if requests.pods == 1:
        return requests
    return Resources(
        requests.cpu_milli, requests.memory_bytes, 1, requests.ephemeral_storage_bytes, requests.extended
    )


# --- Static filters: the node's labels and taints only ---------------------------------


def unsupported_construct(pod: Pod) -> str | None:
    """A pod using a construct we cannot evaluate fits nowhere, and says why, rather than fitting everywhere."""
    if pod.unsupported:
        return "unsupported: " + ", ".join(pod.unsupported)
    return None


def node_unschedulable(pod: Pod, node: NodeView) -> str | None:
    if node.unschedulable and not any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return UNSCHEDULABLE
    return None


def untolerated_taint(pod: Pod, taints: Iterable[Taint]) -> str | None:
    """NoSchedule and NoExecute taints block unless tolerated; PreferNoSchedule never does."""
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


def node_affinity_mismatch(pod: Pod, labels: Mapping[str, str], node_name: str = "") -> str | None:
    """nodeSelector (every pair) and required node affinity (any term; a term's requirements all)."""
    if matches_node_affinity(pod.node_selector, pod.node_affinity, labels, node_name):
        return None
    return NODE_AFFINITY


def selector_mismatch(pod: Pod, labels: Mapping[str, str]) -> str | None:
    """Kept for callers of the first slice: the NodeAffinity filter covers nodeSelector."""
    return node_affinity_mismatch(pod, labels)


def static_mismatch(pod: Pod, labels: Mapping[str, str], taints: Iterable[Taint], node_name: str = "") -> str | None:
    """The checks that do not depend on what else runs on the node, in the scheduler's order."""
    return untolerated_taint(pod, taints) or node_affinity_mismatch(pod, labels, node_name)


# --- Resources ----------------------------------------------------------------------------


def insufficient(requests: Resources, free: Resources) -> str | None:
    """NodeResourcesFit: the first resource short, in the scheduler's order (pods, cpu, memory, ephemeral, extended).

    A resource requested at zero is never short, even on an over-committed node.
    """
    if requests.pods > 0 and requests.pods > free.pods:
        return "Too many pods"
    if requests.cpu_milli > 0 and requests.cpu_milli > free.cpu_milli:
        return "Insufficient cpu"
    if requests.memory_bytes > 0 and requests.memory_bytes > free.memory_bytes:
        return "Insufficient memory"
    if requests.ephemeral_storage_bytes > 0 and requests.ephemeral_storage_bytes > free.ephemeral_storage_bytes:
        return "Insufficient ephemeral-storage"
    for name, amount in requests.extended:
        if amount > 0 and amount > free.amount(name):
            return f"Insufficient {name}"
    return None


def fits_resources(requests: Resources, node: NodeView, state: PlacementState) -> bool:
    """NodeResourcesFit as a yes/no, without building anything: the planner's hot path."""
    return state.fits(requests, node)


def insufficient_resources(requests: Resources, node: NodeView, state: PlacementState) -> str | None:
    """NodeResourcesFit against what the state has placed on the node so far."""
    if fits_resources(requests, node, state):
        return None
    return insufficient(requests, node.allocatable - state.requested(node.name))


# --- Host ports ---------------------------------------------------------------------------


def host_port_conflict(pod: Pod, node: NodeView, state: PlacementState) -> str | None:
    if not pod.host_ports:
        return None
    in_use = state.ports_in_use(node.name)
    for wanted in pod.host_ports:
        for used in in_use:
            if wanted.conflicts_with(used):
                return PORTS
    return None


# --- Inter-pod affinity ---------------------------------------------------------------------


def pod_affinity_mismatch(pod: Pod, node: NodeView, state: PlacementState) -> str | None:
    """Required pod affinity as kube-scheduler's InterPodAffinity filter (satisfyPodAffinity).

    The node must carry every term's topology key. Only pods matching *all* the terms
    count (one pod must satisfy every term; two pods each matching one term do not), and
    the node's value of each term's key must hold at least one of them. When no pod
    anywhere matches all the terms, the pod may still go where it matches its own terms,
    so the first replica of a self-affine group is not pending forever.
    """
    if not pod.pod_affinity:
        return None
    labels = node.labels
    keys: list[TermKey] = []
    for term in pod.pod_affinity:
        if term.topology_key not in labels:
            return AFFINITY_RULES
        key = term_key(term, pod.namespace)
        if key is None:  # an absent selector selects no pod, not even the pod itself
            return AFFINITY_RULES
        keys.append(key)
    counts = state.all_terms_counts(tuple(keys))
    if all(counts.get((term.topology_key, labels[term.topology_key]), 0) > 0 for term in pod.pod_affinity):
        return None
    if not counts and all(term.selects(pod, pod.namespace) for term in pod.pod_affinity):
        return None
    return AFFINITY_RULES


def pod_anti_affinity_conflict(pod: Pod, node: NodeView, state: PlacementState) -> str | None:
    """No pod matching a required anti-affinity term may be in the node's domain of its topology key.

    A node without the topology key cannot violate the term.
    """
    labels = node.labels
    for term in pod.pod_anti_affinity:
        value = labels.get(term.topology_key)
        key = term_key(term, pod.namespace)
        if value is None or key is None:
            continue
        counts, _ = state.term_counts(key)
        if counts.get(value, 0) > 0:
            return ANTI_AFFINITY_RULES
    return None


def existing_anti_affinity_conflict(pod: Pod, node: NodeView, state: PlacementState) -> str | None:
    """The pods already there (or planned) keep their own anti-affinity: the new pod may not join their domain."""
    if not state.has_anti_affinity:
        return None
    labels = node.labels
    for (topology_key, selector, namespaces), per_value in state.anti_affinity_terms().items():
        value = labels.get(topology_key)
        if value is None or per_value.get(value, 0) <= 0:
            continue
        if (namespaces == ("*",) or pod.namespace in namespaces) and selector.matches(pod.labels):
            return EXISTING_ANTI_AFFINITY_RULES
    return None


def inter_pod_affinity_mismatch(pod: Pod, node: NodeView, state: PlacementState) -> str | None:
    """InterPodAffinity, in its order: the pod's affinity, its anti-affinity, then existing pods' anti-affinity."""
    return (
        pod_affinity_mismatch(pod, node, state)
        or pod_anti_affinity_conflict(pod, node, state)
        or existing_anti_affinity_conflict(pod, node, state)
    )


# --- Topology spread ------------------------------------------------------------------------


def spread_key(pod: Pod, constraint: TopologySpreadConstraint, required_keys: frozenset[str]) -> tuple[object, ...]:
    """What a spread index depends on: the constraint, the namespace, and the rule that makes a node eligible."""
    affinity = (
        (tuple(sorted(pod.node_selector.items())), pod.node_affinity)
        if constraint.node_affinity_policy == "Honor"
        else None
    )
    tolerations = pod.tolerations if constraint.node_taints_policy == "Honor" else None
    return (constraint.label_selector, constraint.topology_key, pod.namespace, required_keys, affinity, tolerations)


def _eligible_rule(
    pod: Pod, constraint: TopologySpreadConstraint, required_keys: frozenset[str]
) -> Callable[[NodeView], bool]:
    """Which nodes are domains of the constraint (kube-scheduler's PreFilter).

    A node counts when it carries every topology key of the pod's constraints, and,
    per the inclusion policies, matches the pod's node selector and affinity (Honor,
    the default) and has no taint the pod does not tolerate (Honor; default Ignore).
    """
    honor_affinity = constraint.node_affinity_policy == "Honor"
    honor_taints = constraint.node_taints_policy == "Honor"
    node_selector = pod.node_selector
    node_affinity = pod.node_affinity
    tolerations = pod.tolerations

    def eligible(view: NodeView) -> bool:
        labels = view.labels
        for key in required_keys:
            if key not in labels:
                return False
        if honor_affinity and not matches_node_affinity(node_selector, node_affinity, labels, view.name):
            return False
        return not honor_taints or tolerates_all(tolerations, view.taints)

    return eligible


SpreadPlan = list[tuple[TopologySpreadConstraint, SpreadIndex, int]]


def spread_plan(pod: Pod, state: PlacementState) -> SpreadPlan:
    """The pod's DoNotSchedule constraints, each with its index in `state` and whether the pod matches itself."""
    constraints = [c for c in pod.topology_spread if c.is_filter]
    required_keys = frozenset(c.topology_key for c in constraints)
    return [
        (
            c,
            state.spread_index(
                spread_key(pod, c, required_keys), c, pod.namespace, _eligible_rule(pod, c, required_keys)
            ),
            1 if c.label_selector is not None and c.label_selector.matches(pod.labels) else 0,
        )
        for c in constraints
    ]


@dataclass(frozen=True, slots=True)
class SpreadDeparture:
    """One spread constraint's domains once a scale-down candidate's moving pods have left it.

    Scale-down moves a node's pods while they are still in the placement state: they would keep
    counting in the node's domain. cluster-autoscaler takes them off its snapshot first
    (RemovalSimulator.findPlaceFor) and keeps the node there, tainted ToBeDeleted
    (`NodeView.as_removed`): for a constraint that ignores taints (the default) its domain stays a
    domain at what is left there, so a zone held by that node alone drops to 0 and becomes the
    minimum; for one that honours them, the node leaves the constraint's domains, and a domain goes
    with its last node.
    """

    domain: str  # the departing node's domain
    count: int | None  # matching pods left there; None when the domain goes with the node
    minimum: int | None  # over the domains that remain
    domains: int


def spread_departures(pod: Pod, state: PlacementState, leaving: str,
                      moving: Iterable[Pod]) -> list[SpreadDeparture | None] | None:
    """Per constraint of the pod's `spread_plan`, how it looks once `moving` have left `leaving` (None: unchanged).

    `moving` are the candidate's pods as observed on `leaving` (the pod being placed among them).
    O(domains + pods on the node) per constraint: computed once per pod that moves, not per node tried.
    """
    if not pod.topology_spread or not state.has_node(leaving):
        return None
    view = state.node(leaving)
    ghost = view.as_removed()
    moving = tuple(moving)
    departures: list[SpreadDeparture | None] = []
    for constraint, index, _ in state.memo("spread", pod, lambda p: spread_plan(p, state)):
        domain = view.labels.get(constraint.topology_key)
        if domain is None or leaving not in index.eligible_nodes:
            departures.append(None)
            continue
        rest = [count for other, count in index.counts.items() if other != domain]
        if index.eligible(ghost):  # the node stays a domain, without its moving pods
            left = index.counts.get(domain, 0) - sum(1 for p in moving if index.counts_pod(p))
        elif index.nodes_per_domain.get(domain, 0) <= 1:  # the domain goes with its only node
            departures.append(SpreadDeparture(domain, None, min(rest, default=None), len(rest)))
            continue
        else:  # the node leaves the domain, every pod of it with it
            left = index.counts.get(domain, 0) - sum(1 for p in state.pods_on(leaving) if index.counts_pod(p))
        departures.append(SpreadDeparture(domain, left, min([*rest, left]), len(rest) + 1))
    return departures


def spread_violation(plan: SpreadPlan, labels: Mapping[str, str],
                     departures: Sequence[SpreadDeparture | None] | None = None) -> str | None:
    """`topology_spread_mismatch` for a node with these labels, given the pod's `spread_plan`."""
    for constraint, _, _ in plan:
        if constraint.topology_key not in labels:
            return SPREAD_MISSING_LABEL
    for i, (constraint, index, self_match) in enumerate(plan):
        domain = labels[constraint.topology_key]
        departure = departures[i] if departures is not None else None
        if departure is None:
            minimum, domains, count = index.global_min(), len(index.counts), index.counts.get(domain, 0)
        else:
            minimum, domains = departure.minimum, departure.domains
            same = domain == departure.domain and departure.count is not None
            count = departure.count if same else index.counts.get(domain, 0)
        if minimum is None:
            continue  # no eligible domain at all: the scheduler's minimum is "infinite", nothing to skew against
        if constraint.min_domains is not None and domains < constraint.min_domains:
            minimum = 0
        if count + self_match - minimum > constraint.max_skew:
            return SPREAD
    return None


def topology_spread_mismatch(pod: Pod, node: NodeView, state: PlacementState, *,
                             departures: Sequence[SpreadDeparture | None] | None = None) -> str | None:
    """PodTopologySpread with whenUnsatisfiable DoNotSchedule (ScheduleAnyway only scores).

    For each constraint: matching pods in the node's domain, plus one if the pod
    matches its own selector, minus the minimum over the eligible domains, must not
    exceed maxSkew. With fewer eligible domains than minDomains the minimum is 0.
    Only pods in the pod's namespace that are not terminating count, as in the scheduler.
    `departures` (`spread_departures`): the counts as they will be once a scale-down
    candidate's moving pods have left it.
    """
    if not pod.topology_spread:
        return None
    return spread_violation(state.memo("spread", pod, lambda p: spread_plan(p, state)), node.labels, departures)


# --- Everything ---------------------------------------------------------------------------


def check(pod: Pod, node: NodeView, state: PlacementState, requests: Resources | None = None, *,
          departures: Sequence[SpreadDeparture | None] | None = None) -> str | None:
    """Every filter, in the scheduler's order (cheap and static first); the first failure's reason, or None.

    `node` must be in `state` for the stateful filters to see its pods; `requests`
    defaults to `pod_requests(pod)` (pass it when calling in a loop).
    """
    return (
        unsupported_construct(pod)
        or node_unschedulable(pod, node)
        or untolerated_taint(pod, node.taints)
        or node_affinity_mismatch(pod, node.labels, node.name)
        or host_port_conflict(pod, node, state)
        or insufficient_resources(requests if requests is not None else pod_requests(pod), node, state)
        or topology_spread_mismatch(pod, node, state, departures=departures)
        or inter_pod_affinity_mismatch(pod, node, state)
    )
