"""Which pods may be moved off a node, which must be waited for, and which pin the node.

Pure module, no side effects. cluster-autoscaler's drainability rules, in its
order, plus two of ours:

- mirror, DaemonSet (owned by one, or annotated `cluster-autoscaler.kubernetes.io/daemonset-pod: "true"`),
  finished and long-terminating pods (asked to terminate more than their grace period and 30 s ago,
  CA's IsPodLongTerminating) are ignored: they go with the node. A pod still within its grace period
  goes through the rules like any other: it may pin the node, or it must still leave it;
- `cluster-autoscaler.kubernetes.io/safe-to-evict: "true"` makes any other pod movable;
- `safe-to-evict: "false"` and Karpenter's `karpenter.sh/do-not-disrupt: "true"` pin the node;
- `safe-to-evict: "on-completion"` (cluster-autoscaler 1.36+) is never evicted: the node waits for the
  pod to finish, as for batch work, whatever BATCH_PROTECTION says (the pod asked for it);
- batch work (ours): a running pod owned by a Job, or matching BATCH_POD_SELECTOR, is
  never evicted; the node waits for it to finish;
- local storage (hostPath, emptyDir not in memory) pins the node unless every such
  volume is listed in `cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes`;
- a pod with no controller pins the node (its replacement would never be created), and so does, by
  default, one owned by a controller cluster-autoscaler does not know (a workflow engine's, an
  operator's): only ReplicationController, ReplicaSet, StatefulSet and Job owners are known to
  recreate a pod elsewhere (CA's `--skip-nodes-with-custom-controller-pods`, default true);
- a kube-system pod with no PodDisruptionBudget pins the node until it is older than
  BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT (CA's `--blocking-system-pod-distruption-timeout`, default 1 h):
  counted from the pod's creation, strictly after it (a pod exactly that old still pins), and a pod whose
  creation time is unknown never ages. A covered pod is the budget's business, not this rule's: one whose
  budget allows no disruption pins the node however old it is;
- a pod whose PodDisruptionBudget has no disruption left pins the node (the budgets
  are counted across all nodes of one plan: `Budgets`).

Expendable pods (priority below the cutoff) are movable whatever they are: CA deletes
them without a second thought, and so do we.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from shared.domain import DisruptionBudget, LabelSelector, Pod
from shared.engine import reasons
from shared.engine.reasons import KeptReason

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
ON_COMPLETION = "on-completion"  # safe-to-evict's value for "let it finish, then remove the node"
KUBE_SYSTEM = "kube-system"
# The owners cluster-autoscaler counts as replicating their pods (rules/replicated); DaemonSet pods go with
# their node and never get this far.
REPLICATED_KINDS = frozenset({"ReplicationController", "ReplicaSet", "StatefulSet", "Job"})


class Disposition(Enum):
    IGNORE = "ignore"  # goes with the node: DaemonSet, mirror, finished, terminating
    MOVE = "move"  # evicted; must fit on another node
    WAIT = "wait"  # batch work: the node is cordoned and waits for it to finish
    PIN = "pin"  # the node cannot be removed while the pod is there


@dataclass(frozen=True, slots=True)
class DrainRules:
    protect_batch: bool = True  # BATCH_PROTECTION
    batch_selector: LabelSelector | None = None  # BATCH_POD_SELECTOR; Job pods are batch regardless
    skip_system_pods: bool = True  # CA's --skip-nodes-with-system-pods
    # CA's --blocking-system-pod-distruption-timeout (BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT): how old a kube-system
    # pod without a PodDisruptionBudget must be before it stops pinning its node.
    system_pod_disruption_timeout: timedelta = timedelta(hours=1)
    skip_local_storage: bool = True  # CA's --skip-nodes-with-local-storage
    skip_custom_controllers: bool = True  # CA's --skip-nodes-with-custom-controller-pods
    expendable_priority_cutoff: int = -10


@dataclass(frozen=True, slots=True)
class PodVerdict:
    pod: Pod
    disposition: Disposition
    reason: str = ""  # why it pins the node (a KeptReason, with its code), or why it is waited for


def is_batch(pod: Pod, batch_selector: LabelSelector | None) -> bool:
    """Batch work: a Job's pod, or one BATCH_POD_SELECTOR selects. Left to finish where it runs."""
    if pod.owner is not None and pod.owner.kind == "Job":
        return True
    return batch_selector is not None and batch_selector.matches(pod.labels)


def classify(pod: Pod, rules: DrainRules, budgets: Sequence[DisruptionBudget] = (), *,
             now: datetime | None = None) -> PodVerdict:
    """One pod's verdict, PodDisruptionBudgets aside from their existence (see `Budgets` for counting).

    `now` tells a long-terminating pod from one still within its grace period; without it (or without
    the pod's deletion time) a terminating pod is ignored, as it soon will be gone. It also ages
    kube-system pods (`system_pod_blocks`); without it they pin their node.
    """
    if pod.is_node_bound_system_pod or pod.is_finished:
        return PodVerdict(pod, Disposition.IGNORE)
    if pod.terminating and (now is None or pod.deleted_at is None or pod.long_terminating(now)):
        return PodVerdict(pod, Disposition.IGNORE)
    if pod.priority < rules.expendable_priority_cutoff:
        return PodVerdict(pod, Disposition.MOVE)
    safe = pod.annotations.get(SAFE_TO_EVICT)
    if safe == "true":
        return PodVerdict(pod, Disposition.MOVE)
    if safe == "false":
        return PodVerdict(pod, Disposition.PIN, KeptReason(
            reasons.NOT_SAFE_TO_EVICT, f"pod {pod.key} has annotation {SAFE_TO_EVICT}=false"))
    if safe == ON_COMPLETION:
        return PodVerdict(pod, Disposition.WAIT, f"pod {pod.key} has annotation {SAFE_TO_EVICT}={ON_COMPLETION}")
    if pod.annotations.get(DO_NOT_DISRUPT) == "true":
        return PodVerdict(pod, Disposition.PIN, KeptReason(
            reasons.DO_NOT_DISRUPT, f"pod {pod.key} has annotation {DO_NOT_DISRUPT}=true"))
    if rules.protect_batch and is_batch(pod, rules.batch_selector):
        return PodVerdict(pod, Disposition.WAIT, f"batch pod {pod.key} is running")
    if rules.skip_local_storage and pod.local_volumes:
        allowed = {v.strip() for v in pod.annotations.get(SAFE_TO_EVICT_LOCAL_VOLUMES, "").split(",") if v.strip()}
        unlisted = [v for v in pod.local_volumes if v not in allowed]
        if unlisted:
            return PodVerdict(pod, Disposition.PIN, KeptReason(
                reasons.LOCAL_STORAGE, f"pod {pod.key} has local storage ({', '.join(unlisted)})"))
    if pod.owner is None:
        return PodVerdict(pod, Disposition.PIN, KeptReason(reasons.NOT_REPLICATED, f"pod {pod.key} has no controller"))
    if rules.skip_custom_controllers and pod.owner.kind not in REPLICATED_KINDS:
        return PodVerdict(pod, Disposition.PIN, KeptReason(
            reasons.NOT_REPLICATED, f"pod {pod.key} is owned by {pod.owner.kind} {pod.owner.name}, a controller not "
                                    "known to recreate it (SKIP_NODES_WITH_CUSTOM_CONTROLLER_PODS)"))
    if rules.skip_system_pods and system_pod_blocks(pod, rules, budgets, now=now):
        return PodVerdict(pod, Disposition.PIN, KeptReason(
            reasons.UNMOVABLE_KUBE_SYSTEM_POD,
            f"kube-system pod {pod.key} has no PodDisruptionBudget and is not older than "
            f"{_describe(rules.system_pod_disruption_timeout)} (BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT)"))
    return PodVerdict(pod, Disposition.MOVE)


def system_pod_blocks(pod: Pod, rules: DrainRules, budgets: Sequence[DisruptionBudget] = (), *,
                      now: datetime | None) -> bool:
    """CA's system rule: a kube-system pod no PodDisruptionBudget covers, not yet past the disruption timeout.

    As CA's isBspPassedDisruptionTimeout: past it only when `now` is strictly after creation plus the
    timeout, and never when the creation time (or `now`) is unknown: the adapter reads a missing
    creationTimestamp as the Unix epoch, which would otherwise make the pod the oldest of all.
    """
    if pod.namespace != KUBE_SYSTEM or any(b.covers(pod) for b in budgets):
        return False
    if now is None or pod.created_at.timestamp() <= 0:
        return True
    return not now > pod.created_at + rules.system_pod_disruption_timeout


def _describe(timeout: timedelta) -> str:
    seconds = int(timeout.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


@dataclass(slots=True)
class Budgets:
    """Disruptions left per PodDisruptionBudget while a plan takes pods off several nodes.

    `take` consumes one disruption from every budget covering each pod, or none at all
    when any of them would go below zero, as the Eviction API refuses such an eviction.
    """

    budgets: Sequence[DisruptionBudget]
    left: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.left = {(b.namespace, b.name): b.disruptions_allowed for b in self.budgets}

    def short(self, pods: Iterable[Pod]) -> KeptReason | None:
        """The first budget the pods would exhaust, named, or None when they may all go."""
        need: dict[tuple[str, str], int] = {}
        for pod in pods:
            for budget in self.budgets:
                if budget.covers(pod):
                    key = (budget.namespace, budget.name)
                    need[key] = need.get(key, 0) + 1
        for key, count in sorted(need.items()):
            if count > self.left[key]:
                return KeptReason(reasons.NOT_ENOUGH_PDB,
                                  f"PodDisruptionBudget {key[0]}/{key[1]} allows {self.left[key]} more "
                                  f"disruption(s), {count} needed")
        return None

    def take(self, pods: Iterable[Pod]) -> None:
        for pod in pods:
            keys = [(b.namespace, b.name) for b in self.budgets if b.covers(pod)]
            if all(self.left[key] > 0 for key in keys):
                for key in keys:
                    self.left[key] -= 1


@dataclass(frozen=True, slots=True)
class NodeDrain:
    """What removing one node would involve."""

    move: tuple[Pod, ...] = ()
    wait: tuple[Pod, ...] = ()
    pinned_by: KeptReason | None = None  # the first pod rule that keeps the node

    @property
    def empty(self) -> bool:
        """Nothing to move or wait for: the node can go in bulk without a drain."""
        return not self.move and not self.wait and self.pinned_by is None


def drain_of(pods: Iterable[Pod], rules: DrainRules, budgets: Sequence[DisruptionBudget] = (), *,
             now: datetime | None = None) -> NodeDrain:
    move: list[Pod] = []
    wait: list[Pod] = []
    for pod in sorted(pods, key=lambda p: p.key):
        verdict = classify(pod, rules, budgets, now=now)
        if verdict.disposition is Disposition.PIN:
            assert isinstance(verdict.reason, KeptReason)  # every PIN verdict carries its code
            return NodeDrain(pinned_by=verdict.reason)
        if verdict.disposition is Disposition.MOVE:
            move.append(pod)
        elif verdict.disposition is Disposition.WAIT:
            wait.append(pod)
    return NodeDrain(tuple(move), tuple(wait))

