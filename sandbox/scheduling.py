"""A kube-scheduler stand-in: filters like the default plugins, scores by MostAllocated.

Filters, in kube-scheduler's order: NodeUnschedulable, TaintToleration (NoSchedule
and NoExecute block unless tolerated; PreferNoSchedule never blocks),
NodeAffinity (nodeSelector), NodeResourcesFit (cpu, memory, pod count against
allocatable minus what bound pods request). Scoring prefers the most allocated
node so work packs tightly and idle nodes appear for the autoscaler to remove.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from shared.domain import Resources, Taint, Toleration

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class PodNeeds:
    requests: Resources  # pods=1 for a pod
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(slots=True)
class NodeSlot:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    used: Resources
    ready: bool
    unschedulable: bool


def untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def filter_reasons(pod: PodNeeds, node: NodeSlot) -> list[str]:
    """Why the pod cannot go on the node, in kube-scheduler's words; empty when it fits."""
    if not node.ready:
        # kube-scheduler sees the not-ready taint the node lifecycle controller adds.
        return ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
    if node.unschedulable:
        return ["node(s) were unschedulable"]
    taint = untolerated_taint(node.taints, pod.tolerations)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"]
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return ["node(s) didn't match Pod's node affinity/selector"]
    free = node.allocatable - node.used
    reasons = []
    if pod.requests.pods > free.pods:
        reasons.append("Too many pods")
    if pod.requests.cpu_milli > free.cpu_milli:
        reasons.append("Insufficient cpu")
    if pod.requests.memory_bytes > free.memory_bytes:
        reasons.append("Insufficient memory")
    return reasons


def most_allocated_score(pod: PodNeeds, node: NodeSlot) -> float:
    """Mean of cpu and memory utilisation after placing the pod (higher is better)."""
    after = node.used + pod.requests
    cpu = after.cpu_milli / node.allocatable.cpu_milli if node.allocatable.cpu_milli else 1.0
    memory = after.memory_bytes / node.allocatable.memory_bytes if node.allocatable.memory_bytes else 1.0
    return (cpu + memory) / 2


def fits(pod: PodNeeds, node: NodeSlot) -> bool:
    """filter_reasons(pod, node) == [] without building messages: the hot path of every scheduling pass."""
    if not node.ready or node.unschedulable:
        return False
    requests, allocatable, used = pod.requests, node.allocatable, node.used
    if (
        requests.cpu_milli > allocatable.cpu_milli - used.cpu_milli
        or requests.memory_bytes > allocatable.memory_bytes - used.memory_bytes
        or requests.pods > allocatable.pods - used.pods
    ):
        return False
    if pod.node_selector and any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return not node.taints or untolerated_taint(node.taints, pod.tolerations) is None


def choose_node(pod: PodNeeds, nodes: list[NodeSlot]) -> tuple[NodeSlot | None, Counter[str]]:
    """The best fitting node (ties broken by name), or None with per-reason node counts."""
    best: NodeSlot | None = None
    best_score = -1.0
    for node in nodes:
        if not fits(pod, node):
            continue
        score = most_allocated_score(pod, node)
        if score > best_score or (score == best_score and best is not None and node.name < best.name):
            best, best_score = node, score
    if best is not None:
        return best, Counter()
    reasons: Counter[str] = Counter()
    for node in nodes:
        reasons.update(filter_reasons(pod, node))
    return None, reasons


def unschedulable_message(node_count: int, reasons: Counter[str]) -> str:
    """The FailedScheduling message kube-scheduler writes on the PodScheduled condition."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    details = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return (
        f"0/{node_count} nodes are available: {details}. preemption: 0/{node_count} nodes are available: "
        f"{node_count} Preemption is not helpful for scheduling."
    )
