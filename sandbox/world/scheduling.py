"""A kube-scheduler stand-in: the default filter plugins in their order, then three of its score plugins.

Filters, as kube-scheduler runs them, each node stopping at the first that fails
(so a node contributes one plugin's reasons to the FailedScheduling message):

1. NodeUnschedulable: cordoned nodes, unless the pod tolerates `node.kubernetes.io/unschedulable`.
2. TaintToleration: NoSchedule and NoExecute taints block unless tolerated (PreferNoSchedule never
   does); a NotReady node carries `node.kubernetes.io/not-ready` as the node lifecycle controller adds it.
3. NodeAffinity: nodeSelector and required node affinity.
4. NodePorts: host ports (same port and protocol, same IP or the wildcard).
5. NodeResourcesFit: cpu, memory, ephemeral-storage, extended resources and the pod count against
   allocatable minus what the node's unfinished pods request.
6. PodTopologySpread: `DoNotSchedule` constraints, maxSkew over the eligible domains.
7. InterPodAffinity: existing pods' required anti-affinity, the pod's required anti-affinity and
   affinity, on any topology key (hostname and zone are the common ones).

Scoring sums three of the default profile's score plugins, each 0..100 times its default weight
(pkg/scheduler/apis/config/v1/default_plugins.go), over the nodes that passed the filters:

- NodeResourcesFit, weight 1: MostAllocated (the sandbox's chosen strategy, not kube's default
  LeastAllocated) so work packs tightly and idle nodes appear for the autoscaler to remove. Kept as a
  fraction where kube rounds down to whole points, so near-equal nodes are not left to the name order.
- NodeAffinity, weight 2: the weights of the preferred node affinity terms a node matches, scaled so the
  best feasible node has 100 (helper.DefaultNormalizeScore; all 0 when no node matches any term).
- TaintToleration, weight 3: the node's PreferNoSchedule taints the pod does not tolerate, reversed (the
  fewest get 100; all 100 when no feasible node has any).

The highest total wins, ties going to the first node by name. So a pod tolerating a virtual node's taint
and preferring VM nodes goes to the virtual node only when no VM node fits. The other default score
plugins are not run: NodeResourcesBalancedAllocation, ImageLocality, and InterPodAffinity and
PodTopologySpread (which score preferred pod (anti-)affinity and ScheduleAnyway constraints). A pod without
preferred node terms in a cluster without PreferNoSchedule taints scores MostAllocated alone: the other two
are equal on every node then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from shared.domain import Taint, Toleration
from sandbox.model.podspec import HostPort, PodNeeds, selector_matches
from sandbox.model.resources import Amounts

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_PREFER_NO_SCHEDULE = "PreferNoSchedule"
MAX_NODE_SCORE = 100  # framework.MaxNodeScore
# The default profile's score plugin weights (pkg/scheduler/apis/config/v1/default_plugins.go).
FIT_WEIGHT = 1
NODE_AFFINITY_WEIGHT = 2
TAINT_TOLERATION_WEIGHT = 3
NOT_READY_TAINT = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
UNREACHABLE_KEY = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

# kube-scheduler's reason strings (pkg/scheduler/framework/plugins/...).
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
REASON_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_ANTI = "node(s) didn't match pod anti-affinity rules"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"


@dataclass(slots=True)
class NodeSlot:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Amounts
    used: Amounts
    ready: bool
    unschedulable: bool
    ports: list[HostPort] = field(default_factory=list)

    def effective_taints(self) -> tuple[Taint, ...]:
        if self.ready or any(t.key == UNREACHABLE_KEY for t in self.taints):
            return self.taints
        return (*self.taints, NOT_READY_TAINT)


class PlacedPod(Protocol):
    """A pod bound to a node and still holding its resources (the world's PodSim satisfies this)."""

    @property
    def needs(self) -> PodNeeds: ...
    @property
    def node(self) -> str | None: ...
    @property
    def terminating(self) -> bool: ...


def untolerated_taint(taints: Iterable[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def taint_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def static_reasons(needs: PodNeeds, node: NodeSlot) -> list[str]:
    """The filters that look at the pod and the node alone, NodeUnschedulable through NodeResourcesFit."""
    tolerations = needs.tolerations
    if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
        return [REASON_UNSCHEDULABLE]
    taint = untolerated_taint(node.effective_taints(), tolerations)
    if taint is not None:
        return [taint_reason(taint)]
    if not needs.matches_node_affinity(node.name, node.labels):
        return [REASON_NODE_AFFINITY]
    if needs.host_ports and any(p.conflicts(used) for p in needs.host_ports for used in node.ports):
        return [REASON_PORTS]
    requests, allocatable, used = needs.requests, node.allocatable, node.used
    # Cheap comparisons first: most pods fit and request no scalar resources.
    if (
        requests.scalars
        or requests.pods > allocatable.pods - used.pods
        or requests.cpu_milli > allocatable.cpu_milli - used.cpu_milli
        or requests.memory_bytes > allocatable.memory_bytes - used.memory_bytes
    ):
        return requests.insufficient(allocatable - used)
    return []


# ---------------------------------------------------------------------------- per-pod context


@dataclass(slots=True)
class _SpreadState:
    key: str
    max_skew: int
    counts: dict[str, int]  # eligible domain -> matching pods
    minimum: int | None  # None when no domain is eligible: nothing to skew against
    self_match: int


@dataclass(slots=True)
class _PodContext:
    """What one pod's inter-pod checks need, computed once per pod over the whole cluster."""

    existing_anti: set[tuple[str, str]] = field(default_factory=set)
    anti: list[tuple[str, set[str]]] = field(default_factory=list)  # (topology key, forbidden values)
    affinity_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    affinity_self_ok: bool = False  # no pod matches anywhere and the pod matches its own terms
    spread: list[_SpreadState] = field(default_factory=list)


class ClusterView:
    """One scheduling pass: node slots plus where pods are. `place` books a pod onto a slot; the caller
    makes the pod visible through `pods()` (the world's own index) before the next pod is chosen."""

    def __init__(
        self,
        nodes: list[NodeSlot],
        pods: Callable[[], Iterable[PlacedPod]] = lambda: (),
        anti_affinity_pods: Callable[[], Iterable[PlacedPod]] = lambda: (),
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self._pods = pods
        self._anti_pods = anti_affinity_pods
        self._namespace_labels = namespace_labels or {}
        # Taints do not change during a pass. Without any PreferNoSchedule taint TaintToleration scores every
        # node alike, and pods without preferred node terms can skip the two-pass scoring.
        self._soft_taints = {
            n.name: soft for n in nodes if (soft := tuple(t for t in n.taints if t.effect == _PREFER_NO_SCHEDULE))
        }

    def place(self, needs: PodNeeds, node: NodeSlot) -> None:
        node.used = node.used + needs.requests
        if needs.host_ports:
            node.ports.extend(needs.host_ports)

    # ------------------------------------------------------------------ choosing

    def choose(self, needs: PodNeeds) -> tuple[NodeSlot | None, Counter[str]]:
        """The best fitting node (ties broken by name), or None with per-reason node counts."""
        context = self._context(needs)
        # Normalised scores need every feasible node first; without them one pass keeps the running best.
        normalised = bool(needs.preferred_node_affinity or self._soft_taints)
        feasible: list[NodeSlot] = []
        best: NodeSlot | None = None
        best_score = -1.0
        failures: list[list[str]] = []
        for node in self.nodes:
            reasons = self.filter_reasons(needs, node, context)
            if reasons:
                failures.append(reasons)
                continue
            if normalised:
                feasible.append(node)
                continue
            score = most_allocated_score(needs.requests, node)
            if score > best_score or (score == best_score and best is not None and node.name < best.name):
                best, best_score = node, score
        if feasible:
            best = self._best_scored(needs, feasible)
        if best is not None:
            return best, Counter()
        counts: Counter[str] = Counter()
        for reasons in failures:
            counts.update(reasons)
        return None, counts

    def _best_scored(self, needs: PodNeeds, feasible: list[NodeSlot]) -> NodeSlot:
        """The feasible node with the highest weighted sum of the three scores; ties go to the first by name.
        A plugin that scores every node alike (no preferred terms; no PreferNoSchedule taint) is left out."""
        totals = [FIT_WEIGHT * MAX_NODE_SCORE * most_allocated_score(needs.requests, n) for n in feasible]
        if needs.preferred_node_affinity:
            raw = [preferred_affinity_score(needs, n) for n in feasible]
            for i, score in enumerate(default_normalize(raw, reverse=False)):
                totals[i] += NODE_AFFINITY_WEIGHT * score
        if self._soft_taints:
            tolerations = needs.tolerations
            raw = [
                sum(1 for taint in self._soft_taints.get(n.name, ()) if not any(t.tolerates(taint) for t in tolerations))
                for n in feasible
            ]
            for i, score in enumerate(default_normalize(raw, reverse=True)):
                totals[i] += TAINT_TOLERATION_WEIGHT * score
        best, best_score = feasible[0], totals[0]
        for node, score in zip(feasible, totals, strict=True):
            if score > best_score or (score == best_score and node.name < best.name):
                best, best_score = node, score
        return best

    def filter_reasons(self, needs: PodNeeds, node: NodeSlot, context: _PodContext | None = None) -> list[str]:
        """Why the pod cannot go on the node, in kube-scheduler's words (one plugin's); empty when it fits."""
        reasons = static_reasons(needs, node)
        if reasons:
            return reasons
        if context is None:
            context = self._context(needs)
        return self._inter_pod_reasons(needs, node, context)

    def _inter_pod_reasons(self, needs: PodNeeds, node: NodeSlot, context: _PodContext) -> list[str]:
        labels = node.labels
        for state in context.spread:
            value = labels.get(state.key)
            if value is None:
                return [REASON_SPREAD_LABEL]
            if state.minimum is not None and state.counts.get(value, 0) + state.self_match - state.minimum > state.max_skew:
                return [REASON_SPREAD]
        if context.existing_anti and any((k, v) in context.existing_anti for k, v in labels.items()):
            return [REASON_EXISTING_ANTI]
        for key, forbidden in context.anti:
            if labels.get(key) in forbidden:
                return [REASON_ANTI]
        if needs.affinity:
            values = [labels.get(term.topology_key) for term in needs.affinity]
            if any(v is None for v in values):
                return [REASON_AFFINITY]
            found = all(
                context.affinity_counts[(term.topology_key, v)] > 0 for term, v in zip(needs.affinity, values, strict=True)
            )
            if not found and not context.affinity_self_ok:
                return [REASON_AFFINITY]
        return []

    # ------------------------------------------------------------------ per-pod precomputation

    def _domain(self, pod: PlacedPod, key: str) -> str | None:
        node = self.by_name.get(pod.node or "")
        return None if node is None else node.labels.get(key)

    def _context(self, needs: PodNeeds) -> _PodContext:
        context = _PodContext()
        ns_labels = self._namespace_labels
        for other in self._anti_pods():
            for term in other.needs.anti_affinity:
                if term.matches(needs.namespace, needs.labels, other.needs.namespace, ns_labels):
                    value = self._domain(other, term.topology_key)
                    if value is not None:
                        context.existing_anti.add((term.topology_key, value))
        if not needs.needs_pod_view:
            return context
        pods = list(self._pods())
        for term in needs.anti_affinity:
            forbidden = {
                value
                for other in pods
                if term.matches(other.needs.namespace, other.needs.labels, needs.namespace, ns_labels)
                and (value := self._domain(other, term.topology_key)) is not None
            }
            context.anti.append((term.topology_key, forbidden))
        if needs.affinity:
            self._affinity(needs, pods, context)
        if needs.spread:
            self._spread(needs, pods, context)
        return context

    def _affinity(self, needs: PodNeeds, pods: list[PlacedPod], context: _PodContext) -> None:
        # Like kube-scheduler, an existing pod counts only when it matches every affinity term.
        ns_labels = self._namespace_labels

        def matches_all(namespace: str, labels: Mapping[str, str]) -> bool:
            return all(t.matches(namespace, labels, needs.namespace, ns_labels) for t in needs.affinity)

        for other in pods:
            if matches_all(other.needs.namespace, other.needs.labels):
                for term in needs.affinity:
                    value = self._domain(other, term.topology_key)
                    if value is not None:
                        context.affinity_counts[(term.topology_key, value)] += 1
        # The first pod of a group with affinity to itself would otherwise wait forever.
        context.affinity_self_ok = not context.affinity_counts and matches_all(needs.namespace, needs.labels)

    def _spread(self, needs: PodNeeds, pods: list[PlacedPod], context: _PodContext) -> None:
        keys = [c.topology_key for c in needs.spread]
        states: list[_SpreadState] = []
        eligible: list[set[str]] = [set() for _ in needs.spread]  # per constraint: nodes counted
        for node in self.nodes:
            if any(k not in node.labels for k in keys):
                continue  # a node must carry every constraint's key to count at all
            for i, c in enumerate(needs.spread):
                if c.honor_node_affinity and not needs.matches_node_affinity(node.name, node.labels):
                    continue
                if c.honor_node_taints and untolerated_taint(node.effective_taints(), needs.tolerations) is not None:
                    continue
                eligible[i].add(node.name)
        for i, c in enumerate(needs.spread):
            counts = {self.by_name[name].labels[c.topology_key]: 0 for name in eligible[i]}
            for other in pods:
                if other.node in eligible[i] and not other.terminating and other.needs.namespace == needs.namespace \
                        and selector_matches(c.selector, other.needs.labels):
                    counts[self.by_name[other.node].labels[c.topology_key]] += 1
            if not counts:
                minimum = None
            elif len(counts) < c.min_domains:
                minimum = 0  # fewer domains than required: the global minimum is taken as zero
            else:
                minimum = min(counts.values())
            self_match = 1 if selector_matches(c.selector, needs.labels) else 0
            states.append(_SpreadState(c.topology_key, c.max_skew, counts, minimum, self_match))
        context.spread = states


def default_normalize(scores: list[int], *, reverse: bool) -> list[int]:
    """helper.DefaultNormalizeScore: scale so the highest is MAX_NODE_SCORE (integer division, as in Go),
    reversed if asked; all zero scores stay 0, or all become MAX_NODE_SCORE when reversed."""
    highest = max(scores, default=0)
    if highest == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in scores]
    scaled = [MAX_NODE_SCORE * score // highest for score in scores]
    return [MAX_NODE_SCORE - score for score in scaled] if reverse else scaled


def preferred_affinity_score(needs: PodNeeds, node: NodeSlot) -> int:
    """NodeAffinity's raw score: the summed weights of the preferred terms the node matches."""
    return sum(weight for weight, term in needs.preferred_node_affinity if term.matches(node.name, node.labels))


def most_allocated_score(requests: Amounts, node: NodeSlot) -> float:
    """Mean of cpu and memory utilisation after placing the pod (higher is better)."""
    allocatable = node.allocatable
    cpu = (node.used.cpu_milli + requests.cpu_milli) / allocatable.cpu_milli if allocatable.cpu_milli else 1.0
    memory = (node.used.memory_bytes + requests.memory_bytes) / allocatable.memory_bytes if allocatable.memory_bytes else 1.0
    return (cpu + memory) / 2


def unschedulable_message(node_count: int, reasons: Counter[str]) -> str:
    """The FailedScheduling message kube-scheduler writes on the PodScheduled condition: "<count> <reason>"
    entries sorted as strings, as its FitError does."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    details = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    return (
        f"0/{node_count} nodes are available: {details}. preemption: 0/{node_count} nodes are available: "
        f"{node_count} Preemption is not helpful for scheduling."
    )

