"""Where pods are, or are planned to be: the state the scheduler's stateful filters look at.

Pure module, no I/O. Resources, host ports, inter-pod affinity and topology spread
all depend on what else runs on a node or in a topology domain (a zone, a
hostname, any node label). `PlacementState` holds the nodes (real, booting, and
planned from templates) and the pods placed on them, and keeps the indexes those
filters need so that a check costs about the same whatever the cluster's size:

- per node: requested resources, the host ports in use, the pods;
- per pod affinity term (label selector, namespaces, topology key): the number of
  matching pods per topology value, built the first time a term is asked about and
  kept up to date as pods are placed;
- the required anti-affinity terms of placed pods, per topology value, so a new pod
  can be checked against every existing pod's anti-affinity without visiting them;
- per topology spread constraint (with its eligible-node rule): matching pods per
  domain and the global minimum.

The estimator tries a group's new nodes, then forgets them: `checkpoint()` and
`rollback()` undo placements and node additions exactly, in reverse order, which is
far cheaper than copying the indexes for every group it tries.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from shared.domain import (
    EMPTY_MAP,
    TO_BE_DELETED_TAINT,
    HostPort,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Resources,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_T = TypeVar("_T")
_NO_RESOURCES = Resources()


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the scheduler's filters see it: a real node, one booting, or one planned from a template.

    `reserved_ports` are host ports taken before any workload lands (the DaemonSets of a
    planned node); real nodes show their DaemonSets' ports through their pods instead.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = _NO_RESOURCES
    unschedulable: bool = False
    reserved_ports: tuple[HostPort, ...] = ()

    @classmethod
    def of(cls, node: Node) -> NodeView:
        return cls(node.name, node.labels, node.taints, node.allocatable, node.unschedulable)

    def as_removed(self) -> NodeView:
        """The node as cluster-autoscaler's simulation keeps one it found removable: tainted ToBeDeleted.

        It stays a topology domain for constraints that ignore taints (nodeTaintsPolicy's default), and
        leaves those that honour them when the pod does not tolerate the taint.
        """
        if any(t.key == TO_BE_DELETED_TAINT for t in self.taints):
            return self
        return replace(self, taints=(*self.taints, Taint(TO_BE_DELETED_TAINT, "", "NoSchedule")))


def tolerates_all(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> bool:
    """Whether every NoSchedule/NoExecute taint is tolerated (PreferNoSchedule never blocks)."""
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


def matches_node_affinity(
    node_selector: Mapping[str, str], terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str], node_name: str
) -> bool:
    """The pod's nodeSelector (all pairs) and required node affinity (any term)."""
    for key, value in node_selector.items():
        if labels.get(key) != value:
            return False
    if terms:
        for term in terms:
            if term.matches(labels, node_name):
                return True
        return False
    return True


# --- Indexes --------------------------------------------------------------------------

_ALL = ("*",)  # stands for "every namespace" in an index key


def _namespaces_key(term: PodAffinityTerm, owner_namespace: str) -> tuple[str, ...]:
    if term.all_namespaces:
        return _ALL
    if term.namespaces:
        return tuple(sorted(set(term.namespaces)))
    return (owner_namespace,)


def _in_namespaces(key: tuple[str, ...], namespace: str) -> bool:
    return key == _ALL or namespace in key


TermKey = tuple[str, LabelSelector, tuple[str, ...]]  # (topology key, selector, namespaces)


def term_key(term: PodAffinityTerm, owner_namespace: str) -> TermKey | None:
    """The index key of an affinity term carried by a pod in `owner_namespace`; None when it selects nothing."""
    if term.label_selector is None:
        return None
    return (term.topology_key, term.label_selector, _namespaces_key(term, owner_namespace))


@dataclass(slots=True)
class _TermCounts:
    """Pods matching one term, per value of its topology key (pods on nodes without the key do not count)."""

    topology_key: str
    selector: LabelSelector
    namespaces: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def record(self, pod: Pod, node_name: str, node_labels: Mapping[str, str], delta: int) -> None:
        value = node_labels.get(self.topology_key)
        if value is not None and _in_namespaces(self.namespaces, pod.namespace) and self.selector.matches(pod.labels):
            count = self.counts.get(value, 0) + delta
            if count:
                self.counts[value] = count
            else:
                del self.counts[value]
            self.total += delta


@dataclass(slots=True)
class _AllTermsCounts:
    """Pods matching every one of a pod's affinity terms, per (topology key, value) of each term.

    As the scheduler's InterPodAffinity PreFilter: an existing pod counts only when it
    matches all the incoming pod's required affinity terms, and then counts once for each
    term's topology pair on its node (a node without a term's key adds nothing for it).
    So two terms cannot be satisfied by two different pods.
    """

    terms: tuple[TermKey, ...]
    counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def record(self, pod: Pod, node_name: str, node_labels: Mapping[str, str], delta: int) -> None:
        for _, selector, namespaces in self.terms:
            if not (_in_namespaces(namespaces, pod.namespace) and selector.matches(pod.labels)):
                return
        counts = self.counts
        for topology_key, _, _ in self.terms:
            value = node_labels.get(topology_key)
            if value is None:
                continue
            pair = (topology_key, value)
            count = counts.get(pair, 0) + delta
            if count:
                counts[pair] = count
            else:
                del counts[pair]


@dataclass(slots=True)
class SpreadIndex:
    """One topology spread constraint of one kind of pod: matching pods per eligible domain, and the minimum."""

    namespace: str
    selector: LabelSelector | None
    topology_key: str
    eligible: Callable[[NodeView], bool]
    counts: dict[str, int] = field(default_factory=dict)  # domain -> matching pods on its eligible nodes
    nodes_per_domain: dict[str, int] = field(default_factory=dict)
    eligible_nodes: set[str] = field(default_factory=set)
    # The minimum over domains, kept incrementally: `at_min` domains hold it; recomputed when that reaches 0.
    minimum: int = 0
    at_min: int = 0
    min_valid: bool = False

    def counts_pod(self, pod: Pod) -> bool:
        # As the scheduler's countPodsMatchSelector: same namespace, not terminating.
        return (
            pod.namespace == self.namespace
            and not pod.terminating
            and self.selector is not None
            and self.selector.matches(pod.labels)
        )

    def record(self, pod: Pod, node_name: str, node_labels: Mapping[str, str], delta: int) -> None:
        if node_name in self.eligible_nodes and self.counts_pod(pod):
            self.bump(node_labels[self.topology_key], delta)

    def global_min(self) -> int | None:
        if not self.counts:
            return None
        if not self.min_valid:
            self.minimum = min(self.counts.values())
            self.at_min = sum(1 for c in self.counts.values() if c == self.minimum)
            self.min_valid = True
        return self.minimum

    def bump(self, domain: str, delta: int) -> None:
        before = self.counts[domain]
        after = before + delta
        self.counts[domain] = after
        if not self.min_valid:
            return
        if before == self.minimum:
            self.at_min -= 1
        if after < self.minimum:
            self.minimum, self.at_min = after, 1
        elif after == self.minimum:
            self.at_min += 1
        if self.at_min == 0:
            self.min_valid = False

    def add_domain(self, domain: str) -> None:
        self.counts[domain] = 0
        if self.min_valid:
            if self.minimum > 0:
                self.minimum, self.at_min = 0, 1
            else:
                self.at_min += 1

    def drop_domain(self, domain: str) -> None:
        count = self.counts.pop(domain)
        if self.min_valid and count == self.minimum:
            self.at_min -= 1
            if self.at_min == 0:
                self.min_valid = False


SpreadKey = Hashable


_COMPACT_AT = 4096  # stale entries of dropped nodes tolerated before the lists are compacted


class PlacementState:
    """Nodes and the pods on them (placed or planned), with the indexes the stateful filters need.

    Mutable by design, and pure: no I/O, no clock. Build it with `from_cluster`, then
    `add_node` and `place` as the estimator plans; `checkpoint`/`rollback` undo.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeView] = {}
        # Requested per node as a mutable [cpu, memory, pods, ephemeral, {extended}]: placing
        # and undoing then cost a few additions, not a new Resources each time.
        self._used: dict[str, list[Any]] = {}
        self._pods: dict[str, list[Pod]] = {}
        self._ports: dict[str, list[HostPort]] = {}
        self._by_namespace: dict[str, list[tuple[Pod, str]]] = {}
        self._terms: dict[TermKey, _TermCounts] = {}
        self._all_terms: dict[tuple[TermKey, ...], _AllTermsCounts] = {}
        # Required anti-affinity terms of placed pods: key -> topology value -> count.
        self._anti: dict[TermKey, dict[str, int]] = {}
        self._spread: dict[SpreadKey, SpreadIndex] = {}
        # The indexes a placed pod may count in, reached from its labels: each is filed under
        # one of its selector's matchLabels pairs (a pod without that pair cannot match it),
        # or under None when the selector has none. A placement then visits the few indexes
        # that can concern it, not all of them.
        self._watchers: dict[tuple[str, str] | None, list[_TermCounts | _AllTermsCounts | SpreadIndex]] = {}
        # Placed pods by label pair, built the first time an index is: building an index
        # for `app=web` then visits the web pods, not the whole cluster.
        self._by_pair: dict[tuple[str, str], list[tuple[Pod, str]]] | None = None
        # Per-pod derived values (see memo); the pod is kept alive so its id stays its own.
        self._memo: dict[tuple[str, int], tuple[Pod, object]] = {}
        # Undo log: ("node", name) or ("pod", pod, node name, requests), newest last.
        self._journal: list[tuple[object, ...]] = []
        # Pods removed for good (remove_pods), by id, whose entries are still in _by_namespace and _by_pair:
        # skipped by readers and compacted away in bulk (the pod is kept here, so its id stays its own).
        # Rebuilding those lists at each removal made a scale-down pass quadratic in the cluster's pods.
        self._gone: dict[int, Pod] = {}
        self._stale = 0
        # Journaled placements per node: what remove_pods checks, without scanning the journal each time.
        self._journaled_on: dict[str, int] = {}

    # -- building -------------------------------------------------------------------

    @classmethod
    def from_cluster(cls, nodes: Iterable[NodeView], pods: Iterable[Pod]) -> PlacementState:
        """The observed cluster: every node, and every unfinished pod bound to one of them.

        Each pod takes its requests and one pod slot, as the scheduler counts it. Pods
        naming a node we do not know are left out: they take no capacity we could plan
        with. Loading is a bulk path (tens of thousands of pods) and is not journaled,
        so a rollback never undoes the observed cluster.
        """
        state = cls()
        for view in nodes:
            state._add_node(view)
        known = state._nodes
        totals: dict[str, list[int]] = {}
        extended: dict[str, dict[str, int]] = {}
        for pod in pods:
            node_name = pod.node_name
            if node_name is None or node_name not in known or pod.phase in ("Succeeded", "Failed"):
                continue
            requests = pod.requests
            acc = totals.get(node_name)
            if acc is None:
                acc = totals[node_name] = [0, 0, 0, 0]
            acc[0] += requests.cpu_milli
            acc[1] += requests.memory_bytes
            acc[2] += 1
            acc[3] += requests.ephemeral_storage_bytes
            if requests.extended:
                per_node = extended.setdefault(node_name, {})
                for name, amount in requests.extended:
                    per_node[name] = per_node.get(name, 0) + amount
            state._pods.setdefault(node_name, []).append(pod)
            state._by_namespace.setdefault(pod.namespace, []).append((pod, node_name))
            if pod.host_ports:
                state._ports.setdefault(node_name, []).extend(pod.host_ports)
            if pod.pod_anti_affinity:
                state._count(pod, node_name, 1)
        for node_name, (cpu, memory, count, ephemeral) in totals.items():
            state._used[node_name] = [cpu, memory, count, ephemeral, extended.get(node_name, {})]
        return state

    def add_node(self, view: NodeView) -> None:
        if view.name in self._nodes:
            raise ValueError(f"node {view.name} is already in the placement state")
        self._add_node(view)
        self._journal.append(("node", view.name))

    def place(self, pod: Pod, node_name: str, requests: Resources) -> None:
        """Put `pod` on `node_name`, taking `requests` (as the scheduler counts them, one pod slot included)."""
        if node_name not in self._nodes:
            raise KeyError(f"unknown node {node_name}")
        self._place(pod, node_name, requests)
        self._journal.append(("pod", pod, node_name, requests))
        self._journaled_on[node_name] = self._journaled_on.get(node_name, 0) + 1

    def remove_pods(self, name: str, pods: Iterable[Pod]) -> None:
        """`pods`, observed on node `name`, leave it for good (a removable scale-down candidate's moved pods).

        The node stays, as cluster-autoscaler keeps a node it found removable in its simulation: its
        topology domains still count, at what is left there (often 0), for the pods of later candidates.
        Not journaled, so not undone by a rollback: call it only when no checkpoint taken before it will
        be rolled back, and on a node no journaled placement went to.
        """
        if self._journaled_on.get(name):
            raise ValueError(f"node {name} received planned pods; its observed pods cannot be removed")
        leaving = {id(pod): pod for pod in pods}
        if not leaving:
            return
        on_node = self._pods.get(name, [])
        kept = [pod for pod in on_node if id(pod) not in leaving]
        if len(on_node) - len(kept) != len(leaving):
            missing = sorted(p.key for p in leaving.values() if not any(p is q for q in on_node))
            raise ValueError(f"pods not observed on node {name}: {', '.join(missing)}")
        for pod in leaving.values():
            self._count(pod, name, -1)
            requests = pod.requests  # as from_cluster counted it: its requests and one pod slot
            self._add_used(name, Resources(requests.cpu_milli, requests.memory_bytes, 1,
                                           requests.ephemeral_storage_bytes, requests.extended), -1)
        self._pods[name] = kept
        if name in self._ports:
            self._ports[name] = [*self._nodes[name].reserved_ports, *(hp for pod in kept for hp in pod.host_ports)]
        self._gone.update(leaving)
        self._stale += len(leaving)
        if self._stale >= _COMPACT_AT and 4 * self._stale >= sum(len(v) for v in self._by_namespace.values()):
            self._compact()

    def replace_node(self, view: NodeView) -> None:
        """Node `view.name` now looks like `view` (its taints, say), with the same labels: spread domains follow.

        Not journaled, so not undone by a rollback; refused for a node a journaled placement went to, whose
        rollback would count its pods against the node's new eligibility.
        """
        name = view.name
        old = self._nodes[name]
        if dict(old.labels) != dict(view.labels):
            raise ValueError(f"node {name}: replace_node keeps the labels; the topology indexes are built on them")
        if self._journaled_on.get(name):
            raise ValueError(f"node {name} received planned pods; it cannot be replaced")
        for index in self._spread.values():
            if name in index.eligible_nodes and not index.eligible(view):
                domain = view.labels[index.topology_key]
                for pod in self._pods.get(name, ()):
                    if index.counts_pod(pod):
                        index.bump(domain, -1)
                index.eligible_nodes.discard(name)
                self._leave_domain(index, domain)
        self._nodes[name] = view
        for index in self._spread.values():
            if name not in index.eligible_nodes and index.eligible(view) and view.labels.get(index.topology_key):
                self._spread_add_node(index, view)
                for pod in self._pods.get(name, ()):
                    if index.counts_pod(pod):
                        index.bump(view.labels[index.topology_key], 1)

    def _compact(self) -> None:
        """Remove the entries of removed pods from the pod lists, keeping the order of the rest (rollback pops)."""
        gone = self._gone
        for namespace, placed in self._by_namespace.items():
            self._by_namespace[namespace] = [e for e in placed if id(e[0]) not in gone]
        if self._by_pair is not None:
            for pair, placed in self._by_pair.items():
                self._by_pair[pair] = [e for e in placed if id(e[0]) not in gone]
        self._gone = {}
        self._stale = 0

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        """Undo every add_node and place since `checkpoint`, newest first."""
        while len(self._journal) > checkpoint:
            entry = self._journal.pop()
            if entry[0] == "pod":
                _, pod, node_name, requests = entry
                assert isinstance(pod, Pod) and isinstance(node_name, str) and isinstance(requests, Resources)
                self._unplace(pod, node_name, requests)
                self._journaled_on[node_name] -= 1
            else:
                name = entry[1]
                assert isinstance(name, str)
                self._remove_node(name)

    def placed_since(self, checkpoint: int) -> set[str]:
        """The nodes that received a pod since `checkpoint`."""
        return {str(entry[2]) for entry in self._journal[checkpoint:] if entry[0] == "pod"}

    # -- queries ----------------------------------------------------------------------

    def node(self, name: str) -> NodeView:
        return self._nodes[name]

    def has_node(self, name: str) -> bool:
        return name in self._nodes

    @property
    def nodes(self) -> Mapping[str, NodeView]:
        return self._nodes

    def requested(self, node_name: str) -> Resources:
        used = self._used.get(node_name)
        if used is None:
            return _NO_RESOURCES
        return Resources(used[0], used[1], used[2], used[3], tuple(used[4].items()))

    def fits(self, requests: Resources, node: NodeView) -> bool:
        """NodeResourcesFit as a yes/no against what is placed on `node`: a zero request always fits."""
        alloc = node.allocatable
        used = self._used.get(node.name)
        if used is None:
            return requests.fits_in(alloc)
        if (
            (requests.pods > 0 and requests.pods + used[2] > alloc.pods)
            or (requests.cpu_milli > 0 and requests.cpu_milli + used[0] > alloc.cpu_milli)
            or (requests.memory_bytes > 0 and requests.memory_bytes + used[1] > alloc.memory_bytes)
            or (
                requests.ephemeral_storage_bytes > 0
                and requests.ephemeral_storage_bytes + used[3] > alloc.ephemeral_storage_bytes
            )
        ):
            return False
        if requests.extended:
            extended = used[4]
            for name, amount in requests.extended:
                if amount > 0 and amount + extended.get(name, 0) > alloc.amount(name):
                    return False
        return True

    def free(self, node_name: str) -> Resources:
        return self._nodes[node_name].allocatable - self.requested(node_name)

    def pods_on(self, node_name: str) -> Sequence[Pod]:
        return self._pods.get(node_name, ())

    def ports_in_use(self, node_name: str) -> Sequence[HostPort]:
        return self._ports.get(node_name, ())

    def term_counts(self, key: TermKey) -> tuple[Mapping[str, int], int]:
        """Pods matching an affinity term per topology value, and their total; built on first use."""
        index = self._terms.get(key)
        if index is None:
            index = self._build_term(key)
            self._terms[key] = index
            self._watch(key[1], index)
        return index.counts, index.total

    def all_terms_counts(self, keys: tuple[TermKey, ...]) -> Mapping[tuple[str, str], int]:
        """Pods matching every term of `keys`, per (topology key, value) of each term; built on first use.

        Only pairs with a count above zero are present, so an empty mapping means no such pod
        runs on any node carrying one of the terms' topology keys.
        """
        index = self._all_terms.get(keys)
        if index is None:
            index = _AllTermsCounts(keys)
            # A pod matching all terms matches the first: its candidates are a superset.
            _, selector, namespaces = keys[0]
            nodes = self._nodes
            for pod, node_name in self._candidates(selector, namespaces):
                index.record(pod, node_name, nodes[node_name].labels, 1)
            self._all_terms[keys] = index
            self._watch(selector, index)
        return index.counts

    @property
    def has_anti_affinity(self) -> bool:
        return bool(self._anti)

    def anti_affinity_terms(self) -> Mapping[TermKey, Mapping[str, int]]:
        """Required anti-affinity terms of placed pods: per term, pods holding it per topology value."""
        return self._anti

    def spread_index(
        self, key: SpreadKey, constraint: TopologySpreadConstraint, namespace: str, eligible: Callable[[NodeView], bool]
    ) -> SpreadIndex:
        """The matching-pod counts per eligible domain of one spread constraint; built on first use.

        `key` must identify the constraint's selector and topology key, the namespace and
        the eligibility rule: callers build it from those (see predicates.spread_key).
        """
        index = self._spread.get(key)
        if index is None:
            index = SpreadIndex(namespace, constraint.label_selector, constraint.topology_key, eligible)
            for view in self._nodes.values():
                self._spread_add_node(index, view)
            if index.selector is not None:
                for pod, node_name in self._candidates(index.selector, (namespace,)):
                    if node_name in index.eligible_nodes and index.counts_pod(pod):
                        index.bump(self._nodes[node_name].labels[index.topology_key], 1)
            self._spread[key] = index
            if index.selector is not None:  # an absent selector counts no pod
                self._watch(index.selector, index)
        return index

    def memo(self, kind: str, pod: Pod, compute: Callable[[Pod], _T]) -> _T:
        """`compute(pod)`, once per pod and kind: what a filter derives from a pod alone, reused for every node."""
        entry = self._memo.get((kind, id(pod)))
        if entry is None or entry[0] is not pod:
            value = compute(pod)
            self._memo[(kind, id(pod))] = (pod, value)
            return value
        return entry[1]  # type: ignore[return-value]

    # -- internals --------------------------------------------------------------------

    def _add_node(self, view: NodeView) -> None:
        self._nodes[view.name] = view
        if view.reserved_ports:
            self._ports[view.name] = list(view.reserved_ports)
        for index in self._spread.values():
            self._spread_add_node(index, view)

    def _remove_node(self, name: str) -> None:
        view = self._nodes.pop(name)
        self._used.pop(name, None)
        self._pods.pop(name, None)
        self._ports.pop(name, None)
        for index in self._spread.values():
            if name in index.eligible_nodes:
                index.eligible_nodes.discard(name)
                self._leave_domain(index, view.labels[index.topology_key])

    @staticmethod
    def _leave_domain(index: SpreadIndex, domain: str) -> None:
        """One eligible node fewer in `domain`: the domain goes with its last one."""
        left = index.nodes_per_domain[domain] - 1
        if left:
            index.nodes_per_domain[domain] = left
        else:
            del index.nodes_per_domain[domain]
            index.drop_domain(domain)

    @staticmethod
    def _spread_add_node(index: SpreadIndex, view: NodeView) -> None:
        domain = view.labels.get(index.topology_key)
        if domain is None or not index.eligible(view):
            return
        index.eligible_nodes.add(view.name)
        if domain in index.nodes_per_domain:
            index.nodes_per_domain[domain] += 1
        else:
            index.nodes_per_domain[domain] = 1
            index.add_domain(domain)

    def _place(self, pod: Pod, node_name: str, requests: Resources) -> None:
        self._add_used(node_name, requests, 1)
        self._pods.setdefault(node_name, []).append(pod)
        self._by_namespace.setdefault(pod.namespace, []).append((pod, node_name))
        if pod.host_ports:
            self._ports.setdefault(node_name, []).extend(pod.host_ports)
        if self._by_pair is not None:
            for pair in pod.labels.items():
                self._by_pair.setdefault(pair, []).append((pod, node_name))
        self._count(pod, node_name, 1)

    def _unplace(self, pod: Pod, node_name: str, requests: Resources) -> None:
        # Journal order is a stack, so the pod is the last entry of each list it joined.
        self._count(pod, node_name, -1)
        if pod.host_ports:
            del self._ports[node_name][-len(pod.host_ports):]
        self._by_namespace[pod.namespace].pop()
        self._pods[node_name].pop()
        if self._by_pair is not None:
            for pair in pod.labels.items():
                placed = self._by_pair[pair]
                # Usually the last entry; the index may have been built after some journaled placements.
                for i in range(len(placed) - 1, -1, -1):
                    if placed[i][0] is pod:
                        del placed[i]
                        break
        self._add_used(node_name, requests, -1)

    def _add_used(self, node_name: str, requests: Resources, sign: int) -> None:
        used = self._used.get(node_name)
        if used is None:
            used = self._used[node_name] = [0, 0, 0, 0, {}]
        used[0] += sign * requests.cpu_milli
        used[1] += sign * requests.memory_bytes
        used[2] += sign * requests.pods
        used[3] += sign * requests.ephemeral_storage_bytes
        if requests.extended:
            extended = used[4]
            for name, amount in requests.extended:
                left = extended.get(name, 0) + sign * amount
                if left:
                    extended[name] = left
                else:
                    extended.pop(name, None)

    def _watch(self, selector: LabelSelector, index: _TermCounts | _AllTermsCounts | SpreadIndex) -> None:
        pair = selector.match_labels[0] if selector.match_labels else None
        self._watchers.setdefault(pair, []).append(index)

    def _count(self, pod: Pod, node_name: str, delta: int) -> None:
        labels = self._nodes[node_name].labels
        watchers = self._watchers
        if watchers:
            for index in watchers.get(None, ()):
                index.record(pod, node_name, labels, delta)
            for pair in pod.labels.items():
                concerned = watchers.get(pair)
                if concerned:
                    for index in concerned:
                        index.record(pod, node_name, labels, delta)
        for term in pod.pod_anti_affinity:
            key = term_key(term, pod.namespace)
            value = labels.get(term.topology_key)
            if key is None or value is None:
                continue
            per_value = self._anti.setdefault(key, {})
            per_value[value] = per_value.get(value, 0) + delta
            if not per_value[value]:
                del per_value[value]
                if not per_value:
                    del self._anti[key]

    def _candidates(self, selector: LabelSelector, namespaces: tuple[str, ...]) -> Iterable[tuple[Pod, str]]:
        """Placed pods (with their node) that may match `selector` in `namespaces`: a superset, never missing one."""
        if selector.match_labels:
            if self._by_pair is None:
                self._by_pair = {}
                for placed in self._by_namespace.values():
                    for pod, node_name in placed:
                        for pair in pod.labels.items():
                            self._by_pair.setdefault(pair, []).append((pod, node_name))
            found: Iterable[tuple[Pod, str]] = self._by_pair.get(selector.match_labels[0], ())
        elif namespaces == _ALL:
            found = (entry for placed in self._by_namespace.values() for entry in placed)
        else:
            found = (entry for ns in namespaces for entry in self._by_namespace.get(ns, ()))
        if self._gone:
            gone = self._gone
            return (entry for entry in found if id(entry[0]) not in gone)
        return found

    def _build_term(self, key: TermKey) -> _TermCounts:
        topology_key, selector, namespaces = key
        index = _TermCounts(topology_key, selector, namespaces)
        nodes = self._nodes
        for pod, node_name in self._candidates(selector, namespaces):
            index.record(pod, node_name, nodes[node_name].labels, 1)
        return index
