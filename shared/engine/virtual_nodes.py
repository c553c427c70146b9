"""Virtual nodes (virtual-kubelet on Azure Container Instances): what ACI can run, how full it is, which of
the pods on it are demand for the scale sets, which to move back, and when to close it to new pods.

Pure module, no side effects; `now` is passed in.

A virtual node advertises near-unlimited room (10,000 CPUs, 4 TiB), so the scheduler overflows onto it
whenever no VM node fits a pod that tolerates it. Its real limits are ACI's regional core quota and its
container-group creation rate and how many container groups may exist at once (`AciLimits`, from settings). The planners never place a pod on a virtual node,
and never scale, drain or delete one: virtual nodes are a node group of their own kind (`domain.VIRTUAL_NODE`).

Each pod on a virtual node gets one decision (`PodDecision`):

- `stays`: a kube-system pod is never moved, whether ACI refused it or not; nor is a running pod the drainability
  rules protect from scale-down (`backfill_protected`); batch work (a Job's pod, BATCH_POD_SELECTOR) finishes where it started; a pod without a controller
  would not come back if moved; a pod that selects virtual nodes wants to be there; backfill is off for it
  (VIRTUAL_NODE_BACKFILL, its namespace or labels); or moving does not pay: ACI costs no more than its share
  of a VM, or it is expected to run for less than VIRTUAL_NODE_MIN_REMAINING.
- `backfill`: it is expected to run long enough on ACI, at a higher price than its share of a VM, that moving
  it pays: it is demand for the scale sets, planned with the pending pods, and moved back (evicted, so the
  scheduler's preference for VMs places its replacement) once simulated placement finds it room on a Ready VM.
- `failed`: ACI refused it (status reason ProviderFailed: quota, creation rate, a feature ACI lacks).
  virtual-kubelet never retries it, so it will never run there: it is demand whatever it is, and is moved
  once VM room is Ready.

Closing (quota-aware gating): when cores in use, container groups in use (one per pod) or container groups
created recently come within VIRTUAL_NODE_CLOSE_AT of ACI's limits, the next pods bound there would fail in the provider (and a
ReplicaSet's replacement may land there again), so the services taint the virtual node
(`CLOSED_TAINT`): overflow then stays pending and the scale sets grow for it. The taint is lifted when use
falls below VIRTUAL_NODE_REOPEN_AT (a gap between the two, so it does not flap).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from shared.domain import (
    ClusterSnapshot,
    DisruptionBudget,
    LabelSelector,
    Node,
    Pod,
    Resources,
    Taint,
)
from shared.engine.drainability import KUBE_SYSTEM, Disposition, DrainRules, classify, is_batch
from shared.engine.placement import NodeView, PlacementState
from shared.engine.predicates import check
from shared.engine.pod_rules import (
    VIRTUAL_KUBELET_LABEL,
    VIRTUAL_KUBELET_TAINT_KEY,
    VIRTUAL_NODES_V2_LABEL,
    is_virtual_node,
    virtual_node_reason,
)

PROVIDER_FAILED = "ProviderFailed"  # virtual-kubelet's status.reason for a pod its provider refused
# virtual-kubelet's Event on a pod whose container group its provider created (node/pod.go podEventCreateSuccess).
PROVIDER_CREATE_SUCCESS = "ProviderCreateSuccess"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
# Lower than a VM pod's default 0, so a ReplicaSet scaling in removes its ACI pods first.
VIRTUAL_NODE_DELETION_COST = "-100"
# Marks the deletion cost as ours: only an annotation we set is ever changed or removed by us.
DELETION_COST_OWNER_ANNOTATION = "vmss-autoscaler.io/deletion-cost"
# Our taint closing a virtual node; its value says why: an ACI limit nearly used, or between polled admissions.
CLOSED_TAINT_KEY = "vmss-autoscaler.io/virtual-node-closed"
CLOSED_TAINT = Taint(CLOSED_TAINT_KEY, "aci-full", "NoSchedule")
ADMISSION_TAINT = Taint(CLOSED_TAINT_KEY, "admission", "NoSchedule")

# Azure Container Instances, per region and subscription (facts/burst-and-spot.md, "ACI limits and price").
DEFAULT_QUOTA_CORES = 100
DEFAULT_CREATES_PER_5MIN = 100
DEFAULT_CREATES_PER_HOUR = 300
# Standard container groups that may exist at once: Azure's documented default of 100 per region and subscription
# (facts/burst-and-spot.md, "ACI limits and price": "100 standard container groups"; changeable by a quota request)
# beside the 100 cores: many small pods reach it long before the cores, and ACI refuses a creation past it.
DEFAULT_CONTAINER_GROUPS = 100
MAX_GROUP_MILLICORES = 31_000  # one standard container group: 31 vCPU, 240 GB
MAX_GROUP_MEMORY_BYTES = 240 * 10**9
# Linux pay-as-you-go per second. No current public figure was verified (the facts say so); these are the
# list prices as commonly quoted for a main region ($0.0486 per vCPU-hour, $0.00533 per GB-hour). Override
# with ACI_PRICE_VCPU_SECOND and ACI_PRICE_GB_SECOND.
DEFAULT_VCPU_SECOND = 0.0000135
DEFAULT_GB_SECOND = 0.0000015
GB = 10**9  # ACI bills memory per GB

# Volume kinds ACI mounts (azure-aci pkg/provider/aci_volumes.go); Virtual Nodes v2 adds persistent volume claims
# (Azure Files). Anything else fails in the provider with "unsupported type".
_ACI_VOLUMES = frozenset({"emptyDir", "secret", "configMap", "projected", "azureFile", "csi", "gitRepo",
                          "downwardAPI"})
_V2_VOLUMES = _ACI_VOLUMES | {"persistentVolumeClaim"}
_HOST_FEATURES = {"host-network": "host networking", "host-pid": "the host PID namespace",
                  "host-ipc": "the host IPC namespace"}
_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")

Verdict = Literal["stays", "backfill", "failed"]


@dataclass(frozen=True, slots=True)
class AciLimits:
    cores: int = DEFAULT_QUOTA_CORES  # regional standard-core quota
    creates_per_5min: int = DEFAULT_CREATES_PER_5MIN  # container groups created
    creates_per_hour: int = DEFAULT_CREATES_PER_HOUR
    container_groups: int = DEFAULT_CONTAINER_GROUPS  # container groups that may exist at once (one per pod)


@dataclass(frozen=True, slots=True)
class AciPrices:
    vcpu_second: float = DEFAULT_VCPU_SECOND
    gb_second: float = DEFAULT_GB_SECOND

    def per_hour(self, requests: Resources) -> float:
        """What a pod with these requests costs an hour on ACI (billed per vCPU and GB requested)."""
        return 3600 * (requests.cpu_milli / 1000 * self.vcpu_second + requests.memory_bytes / GB * self.gb_second)


@dataclass(frozen=True, slots=True)
class VirtualNodeOptions:
    limits: AciLimits = AciLimits()
    prices: AciPrices = AciPrices()
    backfill: bool = True  # VIRTUAL_NODE_BACKFILL
    backfill_selector: LabelSelector | None = None  # only pods it selects are moved (None: every pod)
    backfill_namespaces: frozenset[str] = frozenset()  # only pods of these are moved (empty: every namespace)
    batch_selector: LabelSelector | None = None  # BATCH_POD_SELECTOR: never moved, like Job pods
    max_backfill_per_poll: int = 10
    close_at: float = 0.9  # fraction of a limit in use at which the virtual node is closed
    reopen_at: float = 0.75  # ... and below which it is opened again
    gate: bool = True  # VIRTUAL_NODE_GATING
    admission: str = "polled"  # VIRTUAL_NODE_ADMISSION: polled | open (decide_gate)
    expected_runtime: timedelta = timedelta(hours=1)  # what a long-running pod without a deadline has left
    min_remaining: timedelta = timedelta(minutes=5)  # moving a pod with less left never pays (a VM boots for minutes)
    # The drainability rules (`options.drain_rules`): a pod they keep from scale-down is never moved by backfill.
    drain: DrainRules = DrainRules()


@dataclass(frozen=True, slots=True)
class AciUsage:
    """What the pods on the virtual nodes hold of ACI now, and the container groups created recently."""

    pods: int = 0  # pods holding a container group (bound, not refused, not finished)
    cpu_milli: int = 0
    memory_bytes: int = 0
    failed: int = 0  # pods ACI refused (ProviderFailed) still on a virtual node
    creates_5min: int = 0
    creates_hour: int = 0
    headed_milli: int = 0  # CPU of new pods not yet scheduled that the virtual nodes would take
    headed_pods: int = 0  # ... and how many: each would hold a container group
    # CPU of pods pending while the virtual nodes are closed that they would take once opened: lifting the taint
    # lets the scheduler bind all of them at once, so they must fit before it is lifted.
    waiting_milli: int = 0
    waiting_pods: int = 0  # ... and how many: each would be a container group created

    @property
    def cores(self) -> float:
        return self.cpu_milli / 1000


@dataclass(frozen=True, slots=True)
class PodDecision:
    pod: Pod
    verdict: Verdict
    why: str
    aci_per_hour: float  # USD
    vm_per_hour: float | None = None  # its share of the cheapest VM that could take it; None: no price known


@dataclass(frozen=True, slots=True)
class Gate:
    closed: bool
    why: str
    full: bool = False  # closed because an ACI limit is (nearly) used, not only between polled admissions

    @property
    def taint(self) -> Taint | None:
        """The taint the virtual nodes carry while closed, its value saying why; None when open."""
        return None if not self.closed else CLOSED_TAINT if self.full else ADMISSION_TAINT


@dataclass(frozen=True, slots=True)
class VirtualNodePlan:
    """The virtual nodes, what they hold, each pod's decision, and whether to close them to new pods."""

    nodes: tuple[str, ...] = ()
    usage: AciUsage = AciUsage()
    decisions: tuple[PodDecision, ...] = ()
    gate: Gate = Gate(False, "")
    # Pending pods the virtual nodes take when this poll opens them, and that would stay there (batch work):
    # not demand for VMs, which would boot for work ACI is about to run.
    admitted: frozenset[str] = frozenset()

    @property
    def demand(self) -> tuple[Pod, ...]:
        """The pods that are demand for the scale sets (backfill and failed), as pending pods to plan for."""
        return tuple(as_pending(d.pod) for d in self.decisions if d.verdict != "stays")

    def count(self, verdict: Verdict) -> int:
        return sum(1 for d in self.decisions if d.verdict == verdict)


@dataclass(frozen=True, slots=True)
class BackfillMove:
    """One pod to move off a virtual node now: simulated placement found it room on `to` (a Ready VM node)."""

    pod: Pod
    to: str
    why: str


def virtual_nodes(nodes: Iterable[Node]) -> dict[str, Node]:
    return {n.name: n for n in nodes if is_virtual_node(n)}


def is_v2(node: Node) -> bool:
    key, value = VIRTUAL_NODES_V2_LABEL
    return node.labels.get(key) == value and node.labels.get(VIRTUAL_KUBELET_LABEL[0]) != VIRTUAL_KUBELET_LABEL[1]


def aci_unsupported(pod: Pod, *, v2: bool = False) -> str | None:
    """Why ACI cannot run the pod (the provider would refuse it), or None when it can.

    From the AKS virtual-node documentation and the azure-aci provider (facts/burst-and-spot.md): no DaemonSet
    pods, no host namespaces, no hostPath or (v1) persistent volumes, no init containers on v1 (the AKS page;
    the provider's README disagrees), no GPUs (unverified: ACI's GPU offering is not in the facts), at most
    31 vCPU / 240 GB per container group. Privileged containers are refused here though the facts leave it
    unverified: ACI runs containers in a shared, hypervisor-isolated sandbox.
    """
    if pod.is_daemonset:
        return "DaemonSet pods do not run on virtual nodes"
    for feature in pod.runtime_features:
        if feature in _HOST_FEATURES:
            return f"ACI offers no {_HOST_FEATURES[feature]}"
        if feature == "privileged":
            return "ACI runs no privileged containers"
        if feature == "init-containers" and not v2:
            return "init containers need Virtual Nodes v2"
        if feature.startswith("volume:"):
            _, kind, name = (feature.split(":", 2) + ["", ""])[:3]
            if kind not in (_V2_VOLUMES if v2 else _ACI_VOLUMES):
                return f"ACI cannot mount {kind} volume {name!r}"
    for gpu in _GPU_RESOURCES:
        if pod.requests.amount(gpu):
            return f"ACI offers no {gpu} here"
    if pod.requests.cpu_milli > MAX_GROUP_MILLICORES or pod.requests.memory_bytes > MAX_GROUP_MEMORY_BYTES:
        return "larger than one ACI container group (31 vCPU, 240 GB)"
    return None


def holds_aci(pod: Pod) -> bool:
    """Whether the pod holds a container group: bound to a virtual node, not refused, not finished."""
    return not pod.is_finished and pod.status_reason != PROVIDER_FAILED


def aci_usage(pods: Iterable[Pod], names: Collection[str], *, now: datetime,
              creations: Sequence[tuple[datetime, int]] = ()) -> AciUsage:
    """ACI's use by the pods bound to the virtual nodes `names`.

    Container groups created recently: virtual-kubelet's `ProviderCreateSuccess` events (`creations`: when,
    how many), which the API server keeps an hour, since a short pod may start and finish between two polls and
    never be seen; at least the pods seen whose start (status.startTime, else creation) is that recent.
    """
    count = cpu = memory = failed = five = hour = 0
    for pod in pods:
        if pod.node_name not in names:
            continue
        created = pod.started_at or pod.created_at
        if now - created <= timedelta(minutes=5):
            five += 1
        if now - created <= timedelta(hours=1):
            hour += 1
        if pod.status_reason == PROVIDER_FAILED and not pod.is_finished:
            failed += 1
        elif holds_aci(pod):
            count += 1
            cpu += pod.requests.cpu_milli
            memory += pod.requests.memory_bytes
    five = max(five, sum(n for at, n in creations if now - at <= timedelta(minutes=5)))
    hour = max(hour, sum(n for at, n in creations if now - at <= timedelta(hours=1)))
    return AciUsage(count, cpu, memory, failed, five, hour)


def decide_gate(usage: AciUsage, options: VirtualNodeOptions, *, closed: bool) -> Gate:
    """Whether the virtual nodes should be closed to new pods (our taint on them), and why.

    `closed`: whether they are closed now. Either way they close when any of ACI's limits is nearly used
    (VIRTUAL_NODE_CLOSE_AT). Closed, they open only when the pods waiting for them would fit too: lifting the
    taint lets the scheduler bind all of them at once. With VIRTUAL_NODE_ADMISSION=open they then stay open
    until a limit is nearly used again, and reopen below VIRTUAL_NODE_REOPEN_AT; with `polled` they are open
    only for the poll after one that found pods waiting that fit, so a burst that arrives while they are
    closed waits for a poll instead of being bound past ACI's limits and refused.
    """
    if not options.gate:
        return Gate(False, "gating off (VIRTUAL_NODE_GATING=false)")
    now_label, now = _fullest(usage, options.limits, 0, 0)
    if now >= options.close_at:
        return Gate(True, f"ACI nearly full: {now_label} (closes at {options.close_at:.0%})", full=True)
    polled = options.admission == "polled"
    if not closed:
        if polled:
            return Gate(True, "admitted what waited; closed until more pods wait (VIRTUAL_NODE_ADMISSION=polled)")
        return Gate(False, f"ACI has room: {now_label}")
    if polled and not usage.waiting_pods:
        return Gate(True, "no pod waits for it (VIRTUAL_NODE_ADMISSION=polled)")
    after_label, after = _fullest(usage, options.limits, usage.waiting_milli, usage.waiting_pods)
    threshold = options.close_at if polled else options.reopen_at
    if after >= threshold:
        waiting = f"with the {usage.waiting_pods} pod(s) waiting for it, " if usage.waiting_pods else ""
        return Gate(True, f"ACI still busy: {waiting}{after_label} (opens below {threshold:.0%})", full=True)
    if usage.waiting_pods:
        return Gate(False, f"ACI has room for the {usage.waiting_pods} pod(s) waiting for it: {after_label}")
    return Gate(False, f"ACI has room: {after_label}")


def _fullest(usage: AciUsage, limits: AciLimits, more_milli: int, more_groups: int) -> tuple[str, float]:
    """The limit nearest to full, with `more` cores and container groups on top of what is used and on its way.

    Container groups in use: one per pod holding one, plus one per pod on its way (headed there, or `more`), as
    ACI counts the groups that exist against the concurrent limit whatever their size."""
    milli = usage.cpu_milli + usage.headed_milli + more_milli
    more = f" (+{(usage.headed_milli + more_milli) / 1000:g} on the way)" if usage.headed_milli or more_milli else ""
    coming = usage.headed_pods + more_groups
    groups = usage.pods + coming
    more_held = f" (+{coming} on the way)" if coming else ""
    fives, hours = usage.creates_5min + more_groups, usage.creates_hour + more_groups
    fractions = {
        f"cores {usage.cores:g}{more} of {limits.cores}": milli / 1000 / limits.cores if limits.cores else 1.0,
        f"container groups {usage.pods}{more_held} of the {limits.container_groups} that may exist at once":
            groups / limits.container_groups if limits.container_groups else 1.0,
        f"{fives} container groups created in 5 min of {limits.creates_per_5min}":
            fives / limits.creates_per_5min if limits.creates_per_5min else 1.0,
        f"{hours} created in an hour of {limits.creates_per_hour}":
            hours / limits.creates_per_hour if limits.creates_per_hour else 1.0,
    }
    return max(fractions.items(), key=lambda item: item[1])


def vm_share_per_hour(pod: Pod, snapshot: ClusterSnapshot) -> float | None:
    """The pod's share of the cheapest VM of a group whose nodes could take it: the node's price times the
    larger of the pod's CPU and memory fractions. None when no such group has a price."""
    best: float | None = None
    for group in snapshot.groups:
        price, template = snapshot.prices.get(group.id), snapshot.templates.get(group.id)
        if price is None or template is None:
            continue
        alloc = template.allocatable
        if not alloc.cpu_milli or not alloc.memory_bytes or not pod.requests.fits_in(alloc):
            continue
        share = price * max(pod.requests.cpu_milli / alloc.cpu_milli, pod.requests.memory_bytes / alloc.memory_bytes)
        best = share if best is None else min(best, share)
    return best


def expected_remaining(pod: Pod, options: VirtualNodeOptions, *, now: datetime) -> timedelta:
    """How long the pod is expected to keep running: to its activeDeadlineSeconds, else VIRTUAL_NODE_EXPECTED_RUNTIME."""
    if pod.active_deadline_seconds is not None:
        started = pod.started_at or pod.created_at
        left = started + timedelta(seconds=pod.active_deadline_seconds) - now
        return max(left, timedelta(0))
    return options.expected_runtime


def backfill_protected(pod: Pod, rules: DrainRules, *, now: datetime) -> str | None:
    """Why backfill never moves this running pod, or None: the drainability rules protect it from scale-down (it
    would pin its node, or be waited for: safe-to-evict, do-not-disrupt, local storage, an unknown controller...)."""
    verdict = classify(pod, rules, now=now)
    if verdict.disposition is Disposition.PIN:
        return f"protected from scale-down, so never moved: {verdict.reason}"
    if verdict.disposition is Disposition.WAIT:
        return f"left to finish where it runs: {verdict.reason}"
    return None


def decide(pod: Pod, snapshot: ClusterSnapshot, options: VirtualNodeOptions, *, now: datetime) -> PodDecision:
    """One pod on a virtual node: stays, backfill or failed (see the module docstring), with why."""
    aci = options.prices.per_hour(pod.requests)
    if pod.namespace == KUBE_SYSTEM:  # the cluster's own add-ons (coredns...): never moved, refused or not
        return PodDecision(pod, "stays", "a kube-system pod is never moved by backfill", aci)
    if pod.status_reason == PROVIDER_FAILED:
        message = pod.status_message or "no message"
        return PodDecision(pod, "failed", f"ACI refused it (ProviderFailed: {message[:200]})", aci)
    if pod.terminating:
        return PodDecision(pod, "stays", "terminating", aci)
    if is_batch(pod, options.batch_selector):
        return PodDecision(pod, "stays", "batch work finishes where it started", aci)
    protected = backfill_protected(pod, options.drain, now=now)
    if protected is not None:
        return PodDecision(pod, "stays", protected, aci)
    if pod.owner is None:
        return PodDecision(pod, "stays", "no controller would re-create it elsewhere", aci)
    if pod.owner.kind == "DaemonSet":
        return PodDecision(pod, "stays", "a DaemonSet pod goes with its node", aci)
    wants = virtual_node_reason(replace(pod, node_name=None, tolerations=()))
    if wants is not None:
        return PodDecision(pod, "stays", f"it {wants}", aci)
    if not options.backfill:
        return PodDecision(pod, "stays", "backfill is off (VIRTUAL_NODE_BACKFILL=false)", aci)
    if options.backfill_namespaces and pod.namespace not in options.backfill_namespaces:
        return PodDecision(pod, "stays", f"namespace {pod.namespace} is not in VIRTUAL_NODE_BACKFILL_NAMESPACES", aci)
    if options.backfill_selector is not None and not options.backfill_selector.matches(pod.labels):
        return PodDecision(pod, "stays", "not selected by VIRTUAL_NODE_BACKFILL_SELECTOR", aci)
    vm = vm_share_per_hour(pod, snapshot)
    left = expected_remaining(pod, options, now=now)
    if left < options.min_remaining:
        return PodDecision(pod, "stays", f"expected to finish within {_minutes(left)}: moving would not pay", aci, vm)
    if vm is not None and vm >= aci:
        return PodDecision(pod, "stays", f"ACI is as cheap: ${aci:.4f}/h there, ${vm:.4f}/h on a VM", aci, vm)
    hours = left.total_seconds() / 3600
    saving = f"saves ${(aci - vm) * hours:.3f} over {_minutes(left)}" if vm is not None else "VM price unknown"
    return PodDecision(pod, "backfill", f"${aci:.4f}/h on ACI; {saving}", aci, vm)


def _minutes(value: timedelta) -> str:
    return f"{value.total_seconds() / 60:.0f} min"


def plan_virtual_nodes(snapshot: ClusterSnapshot, options: VirtualNodeOptions, *, now: datetime,
                       creations: Sequence[tuple[datetime, int]] = ()) -> VirtualNodePlan:
    """The virtual nodes of the snapshot, ACI's use, every pod's decision and the gate.

    `creations`: container groups created recently, from virtual-kubelet's events (`aci_usage`).
    """
    nodes = virtual_nodes(snapshot.nodes)
    if not nodes:
        return VirtualNodePlan()
    on_virtual = [p for p in snapshot.pods if p.node_name in nodes]
    usage = aci_usage(on_virtual, nodes, now=now, creations=creations)
    closed = any(any(t.key == CLOSED_TAINT_KEY for t in n.taints) for n in nodes.values())
    v2 = any(is_v2(n) for n in nodes.values())
    waiting = [p for p in snapshot.pods if _waiting(p, v2=v2)] if closed else []
    headed = [p for p in snapshot.pods if _headed(p, v2=v2)]
    usage = replace(usage, headed_milli=sum(p.requests.cpu_milli for p in headed), headed_pods=len(headed),
                    waiting_milli=sum(p.requests.cpu_milli for p in waiting), waiting_pods=len(waiting))
    decisions = tuple(decide(p, snapshot, options, now=now) for p in on_virtual if not p.is_finished)
    gate = decide_gate(usage, options, closed=closed)
    admitted: frozenset[str] = frozenset()
    if closed and not gate.closed:
        name = min(nodes)
        admitted = frozenset(p.key for p in waiting
                             if decide(replace(p, node_name=name), snapshot, options, now=now).verdict == "stays")
    return VirtualNodePlan(tuple(sorted(nodes)), usage, decisions, gate, admitted)


_VK_TAINT = Taint(VIRTUAL_KUBELET_TAINT_KEY, "azure", "NoSchedule")


def _headed(pod: Pod, *, v2: bool) -> bool:
    """A new pod, not yet tried by the scheduler, that a virtual node would take if no VM fits it: it counts
    against ACI's quota before it gets there, so the gate closes before ACI refuses anything."""
    return pod.node_name is None and not pod.unschedulable and _aci_would_take(pod, v2=v2)


def _waiting(pod: Pod, *, v2: bool) -> bool:
    """A pending pod the scheduler gave up on that a virtual node would take once open."""
    return pod.node_name is None and pod.unschedulable and _aci_would_take(pod, v2=v2)


def _aci_would_take(pod: Pod, *, v2: bool) -> bool:
    """A live pod that tolerates the virtual node and that ACI can run."""
    return (not pod.terminating and not pod.is_finished and any(t.tolerates(_VK_TAINT) for t in pod.tolerations)
            and aci_unsupported(pod, v2=v2) is None)


def as_pending(pod: Pod) -> Pod:
    """The pod as the scale-up simulation plans for it: unbound and unschedulable, as if it waited."""
    return replace(pod, node_name=None, unschedulable=True, phase="Pending", status_reason="", status_message="")


def planning_snapshot(snapshot: ClusterSnapshot, plan: VirtualNodePlan) -> tuple[ClusterSnapshot, frozenset[str]]:
    """The snapshot the scale-up planner sees: the virtual nodes' demand pods pending instead of bound, so
    the same simulation plans VM room for them, and the pods this poll admits to them (`admitted`) no longer
    waiting; and the demand pods' keys (planned after the truly pending pods)."""
    demand = plan.demand
    if not demand and not plan.admitted:
        return snapshot, frozenset()
    keys = frozenset(p.key for p in demand)
    pods = tuple(replace(p, unschedulable=False) if p.key in plan.admitted else p
                 for p in snapshot.pods if p.key not in keys) + demand
    return replace(snapshot, pods=pods), keys


def select_backfill(plan: VirtualNodePlan, placements: Mapping[str, str], budgets: Sequence[DisruptionBudget],
                    options: VirtualNodeOptions, *, in_flight: Collection[str] = ()) -> tuple[BackfillMove, ...]:
    """The pods to move now: demand pods the simulation placed on a Ready VM node (`placements`: pod key ->
    node), at most VIRTUAL_NODE_MAX_BACKFILL_PER_POLL, within their PodDisruptionBudgets, refused pods first.

    `in_flight`: pods whose move was already sent (not moved again). A pod under a budget that allows no
    disruption now is left for a later poll (the Eviction API would refuse it anyway); several pods under one
    budget take from its allowance in turn, so one poll never takes a workload below its budget.
    """
    allowance = {(b.namespace, b.name): b.disruptions_allowed for b in budgets}
    moves: list[BackfillMove] = []
    ordered = sorted((d for d in plan.decisions if d.verdict != "stays"),
                     key=lambda d: (d.verdict != "failed", -(d.aci_per_hour - (d.vm_per_hour or 0.0)), d.pod.key))
    for decision in ordered:
        if len(moves) >= options.max_backfill_per_poll:
            break
        pod = decision.pod
        to = placements.get(pod.key)
        if to is None or pod.key in in_flight:
            continue
        covering = [(b.namespace, b.name) for b in budgets if b.covers(pod)]
        if decision.verdict == "backfill" and any(allowance[k] <= 0 for k in covering):
            continue  # a refused pod is not running: evicting it disrupts nothing, so budgets do not hold it
        if decision.verdict == "backfill":
            for k in covering:
                allowance[k] -= 1
        moves.append(BackfillMove(pod, to, decision.why))
    return tuple(moves)


def deletion_cost_changes(pods: Iterable[Pod], names: Collection[str]) -> dict[str, tuple[Pod, str | None]]:
    """pod key -> (pod, the deletion cost to set, or None to remove ours).

    A controller's pod on a virtual node gets VIRTUAL_NODE_DELETION_COST unless it carries one already (a
    user's own cost is never overwritten); a pod we marked that is no longer there loses the mark.
    """
    changes: dict[str, tuple[Pod, str | None]] = {}
    for pod in pods:
        if pod.is_finished or pod.terminating or pod.owner is None:
            continue
        ours = pod.annotations.get(DELETION_COST_OWNER_ANNOTATION) is not None
        if pod.node_name in names:
            if DELETION_COST_ANNOTATION not in pod.annotations:
                changes[pod.key] = (pod, VIRTUAL_NODE_DELETION_COST)
        elif ours:
            changes[pod.key] = (pod, None)
    return changes


def vm_room(pod: Pod, nodes: Sequence[Node], pods: Sequence[Pod], *, prefer: str = "") -> str | None:
    """A Ready VM node the pod fits now, as the scheduler's filters see it (`prefer` tried first), or None.

    What the executor checks just before it moves a pod: the room the poll found may have been taken since.
    """
    vms = [n for n in nodes if n.ready and not n.unschedulable and not n.is_being_deleted and not is_virtual_node(n)]
    state = PlacementState.from_cluster((NodeView.of(n) for n in vms), (p for p in pods if p.key != pod.key))
    moving = as_pending(pod)
    for node in sorted(vms, key=lambda n: (n.name != prefer, n.name)):
        if check(moving, NodeView.of(node), state) is None:
            return node.name
    return None


@dataclass(frozen=True, slots=True)
class VirtualNodeStatus:
    """What the status ConfigMap says of the virtual nodes (engine.status renders it)."""

    nodes: tuple[str, ...]
    pods: int
    cores: float
    quota_cores: int
    failed: int
    backfill: int
    stays: int
    closed: bool
    why: str
    decisions: Mapping[str, str] = field(default_factory=dict)  # a few pods -> "verdict: why"


def status_of(plan: VirtualNodePlan, options: VirtualNodeOptions, *, limit: int = 10) -> VirtualNodeStatus:
    shown = {d.pod.key: f"{d.verdict}: {d.why}" for d in sorted(plan.decisions, key=lambda d: d.pod.key)[:limit]}
    return VirtualNodeStatus(plan.nodes, plan.usage.pods, plan.usage.cores, options.limits.cores, plan.usage.failed,
                             plan.count("backfill"), plan.count("stays"), plan.gate.closed, plan.gate.why, shown)


__all__ = [
    "ADMISSION_TAINT", "CLOSED_TAINT", "CLOSED_TAINT_KEY", "DELETION_COST_ANNOTATION", "PROVIDER_FAILED", "VIRTUAL_KUBELET_TAINT_KEY", "AciLimits",
    "AciPrices", "AciUsage", "BackfillMove", "Gate", "PodDecision", "VirtualNodeOptions", "VirtualNodePlan",
    "VirtualNodeStatus", "aci_unsupported", "aci_usage", "as_pending", "decide", "decide_gate",
    "deletion_cost_changes", "plan_virtual_nodes", "planning_snapshot", "select_backfill", "status_of",
    "virtual_nodes", "vm_room", "vm_share_per_hour",
]
