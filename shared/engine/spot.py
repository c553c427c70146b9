"""Spot capacity: pods kept off spot on request, evictions seen from outside the VM, their pods' replacements.

Pure module, no side effects. Azure evicts a spot VM when it needs the capacity back: with eviction policy
Delete the instance leaves the scale set, with Deallocate it stays in the capacity, stopped. Either way
the Node object stays behind, NotReady, on clusters without a cloud provider (k3s, kubeadm), and its pods
look bound and Running to the API until the node lifecycle controller evicts them five minutes later. An
outside observer sees an eviction in three ways, and each is handled here the same way:

- `deleted`: a node of a spot group whose instance the scale set no longer lists (and that we are not
  removing ourselves);
- `deallocated`: ... whose instance is deallocated though we did not deallocate it;
- `notice`/`signal`: Azure's 30 s Preempt notice (Scheduled Events through Event Grid), or a taint or
  condition an in-cluster agent put on the node (`SPOT_EVICTION_SIGNAL`), before the VM goes.

What is done about it (services.spot): the node is cordoned and its pods evicted at once (no waiting:
they die anyway); a Node object left behind by a gone VM is deleted; the pods' replacements are planned
in the same poll, from `replacement_demand`; Job pods that die with the VM are counted as lost work.

A Preempt notice also says that Azure wants the size's spot capacity back in those zones (or that its spot
price passed the group's max price): a replacement asked of the same offering would likely be refused, and a
refusal that comes as a failed operation comes after the notice's 30 s. So the notice marks that offering
unavailable for a short while (`preempted_offerings`), as Karpenter does on a spot interruption warning, and
the replacements go to the next option in the notice's own poll.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.domain import (
    DEFAULT_GRACE_SECONDS,
    SPOT_LABEL,
    SPOT_VALUE,
    ClusterSnapshot,
    GroupState,
    Instance,
    SPOT,
    LabelSelector,
    Node,
    NodeGroup,
    NodeSelectorTerm,
    OfferingKey,
    Pod,
    SelectorRequirement,
)

DELETED = "deleted"
DEALLOCATED = "deallocated"
NOTICE = "notice"
SIGNAL = "signal"

# Controllers that make a new pod when one of theirs dies: their pods' replacements are demand now.
_RECREATING = frozenset({"ReplicaSet", "StatefulSet", "Job", "ReplicationController"})


@dataclass(frozen=True, slots=True)
class EvictionSignal:
    """SPOT_EVICTION_SIGNAL: `taint:<key>` or `condition:<type>` an in-cluster agent sets on a node about to go."""

    kind: str  # taint | condition
    name: str

    @classmethod
    def parse(cls, text: str) -> EvictionSignal | None:
        text = text.strip()
        if not text:
            return None
        kind, sep, name = text.partition(":")
        if not sep or kind not in ("taint", "condition") or not name.strip():
            raise ValueError(f"{text!r}: expected taint:<key> or condition:<type>, e.g. taint:aks-node-termination-handler/spot")
        return cls(kind, name.strip())

    def on(self, node: Node) -> bool:
        if self.kind == "taint":
            return any(t.key == self.name for t in node.taints)
        return self.name in node.conditions


@dataclass(frozen=True, slots=True)
class Eviction:
    """One node lost (or about to be lost) to a spot eviction, and how we know."""

    node: str
    group_id: str
    instance_id: str
    how: str  # deleted | deallocated | notice | signal
    pods: tuple[str, ...] = ()  # the node's pods that die with it (DaemonSet and mirror pods left out)
    job_pods: tuple[str, ...] = ()  # of those, pods of Jobs (or BATCH_POD_SELECTOR): their work so far is lost

    @property
    def vm_gone(self) -> bool:
        return self.how in (DELETED, DEALLOCATED)


def require_on_demand(pod: Pod) -> Pod:
    """The pod as the planner sees it when it must not run on spot (ON_DEMAND_POD_SELECTOR): every required
    node-affinity term gains `kubernetes.azure.com/scalesetpriority NotIn [spot]`."""
    keep_off = SelectorRequirement(SPOT_LABEL, "NotIn", (SPOT_VALUE,))
    terms = pod.node_affinity or (NodeSelectorTerm(),)
    return replace(pod, node_affinity=tuple(replace(t, match_expressions=(*t.match_expressions, keep_off))
                                            for t in terms))


def keep_off_spot(pods: Sequence[Pod], selector: LabelSelector | None) -> tuple[Pod, ...]:
    """The pods, with those the selector picks kept off spot for planning."""
    if selector is None:
        return tuple(pods)
    return tuple(require_on_demand(p) if p.node_name is None and selector.matches(p.labels) else p for p in pods)


def find_evictions(snapshot: ClusterSnapshot, instances: Mapping[str, Sequence[Instance]],
                   states: Mapping[str, GroupState], *, signal: EvictionSignal | None = None,
                   noticed: Collection[str] = (), batch: Collection[str] = ()) -> list[Eviction]:
    """The spot evictions the snapshot shows. `instances`: the listed instances (with power state) of the spot
    groups that were read; `noticed`: nodes carrying our notice taint; a node whose instance its group's state
    holds as preempted (`GroupState.preempted`) is under notice too; `batch`: pod keys counted as batch work
    (Jobs or BATCH_POD_SELECTOR)."""
    spot = {g.id: g for g in snapshot.groups if g.is_spot}
    found: list[Eviction] = []
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or ref.group_id not in spot:
            continue
        state = states.get(ref.group_id)
        if state is not None and node.name in state.removing:
            continue  # ours: a scale-down in flight
        how = ""
        listed = instances.get(ref.group_id)
        if listed is not None:
            by_id = {i.instance_id.lower(): i for i in listed}
            instance = by_id.get(ref.instance_id.lower())
            if instance is None:
                how = DELETED
            elif instance.deallocated and (state is None or ref.instance_id not in state.stopped):
                how = DEALLOCATED
        if not how and (node.name in noticed or (state is not None and ref.instance_id in state.preempted)):
            how = NOTICE
        if not how and signal is not None and signal.on(node):
            how = SIGNAL
        if how:
            pods = [p for p in snapshot.pods_on(node.name) if not p.is_daemonset and not p.is_mirror]
            found.append(Eviction(node.name, ref.group_id, ref.instance_id, how,
                                  tuple(p.key for p in pods), tuple(p.key for p in pods if p.key in batch)))
    return found


def replacement_demand(snapshot: ClusterSnapshot, evictions: Sequence[Eviction]) -> ClusterSnapshot:
    """The snapshot the planner sees: the evicted nodes gone, and their recreated pods pending in their place,
    so their replacements are planned now rather than after the node lifecycle controller's five minutes.

    A pod evicted on notice may have its replacement already (its controller acts within a second): each
    dying pod stands for one replacement, so that many unscheduled pods of its owner created since are left
    out rather than planned twice.
    """
    if not evictions:
        return snapshot
    gone = {e.node for e in evictions}
    dying = {key for e in evictions for key in e.pods}
    stand_ins: dict[tuple[str, str, str], list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.key in dying and pod.owner is not None and pod.owner.kind in _RECREATING and not pod.is_finished:
            stand_ins.setdefault((pod.namespace, pod.owner.kind, pod.owner.name), []).append(pod)
    covered: set[str] = set()
    for owner, olds in stand_ins.items():
        # Only a pod already asked to go (evicted on the notice) can have a replacement by now.
        going = [p for p in olds if p.deleted_at is not None]
        if not going:
            continue
        since = min(_asked_to_go(p) for p in going)
        fresh = sorted((p for p in snapshot.pods if p.node_name is None and p.owner is not None
                        and (p.namespace, p.owner.kind, p.owner.name) == owner and p.created_at >= since
                        and p.key not in dying), key=lambda p: p.created_at)
        covered |= {p.key for p in fresh[:len(going)]}
    pods = []
    for pod in snapshot.pods:
        if pod.key in covered:
            continue
        if pod.key not in dying:
            pods.append(pod)
        elif pod.owner is not None and pod.owner.kind in _RECREATING and not pod.is_finished:
            pods.append(replace(pod, node_name=None, unschedulable=True, phase="Pending", terminating=False))
    # A node under notice still counts in its group's capacity until Azure takes the VM: written off now, so
    # the planner does not count on it as a node on its way and asks for the replacement's capacity at once.
    going = {}
    for eviction in evictions:
        if not eviction.vm_gone:
            going[eviction.group_id] = going.get(eviction.group_id, 0) + 1
    groups = tuple(replace(g, written_off=g.written_off + going[g.id]) if g.id in going else g for g in snapshot.groups)
    return replace(snapshot, nodes=tuple(n for n in snapshot.nodes if n.name not in gone), pods=tuple(pods),
                   groups=groups)


def preempted_without_node(snapshot: ClusterSnapshot, states: Mapping[str, GroupState]) -> dict[str, int]:
    """Group id -> instances under a notice that no node maps to yet (still booting when the notice came)."""
    mapped = {(n.instance.group_id, n.instance.instance_id) for n in snapshot.nodes if n.instance is not None}
    out: dict[str, int] = {}
    for group in snapshot.groups:
        state = states.get(group.id)
        if state is None or not group.is_spot:
            continue
        count = sum(1 for instance in state.preempted if (group.id, instance) not in mapped)
        if count:
            out[group.id] = count
    return out


def write_off(snapshot: ClusterSnapshot, counts: Mapping[str, int]) -> ClusterSnapshot:
    """The snapshot with these instances of each group written off: not counted on as nodes on their way."""
    if not counts:
        return snapshot
    return replace(snapshot, groups=tuple(replace(g, written_off=g.written_off + counts[g.id]) if g.id in counts else g
                                          for g in snapshot.groups))


def _asked_to_go(pod: Pod) -> datetime:
    """When the pod was asked to terminate: its deletionTimestamp is that moment plus its grace period (the API
    sets it to when the kubelet must be done)."""
    assert pod.deleted_at is not None
    return pod.deleted_at - timedelta(seconds=pod.termination_grace_seconds or DEFAULT_GRACE_SECONDS)


def stopped_by_eviction(evictions: Sequence[Eviction]) -> dict[str, set[str]]:
    """Group id -> instances Azure deallocated (Deallocate policy): stopped capacity, started before new VMs."""
    out: dict[str, set[str]] = {}
    for eviction in evictions:
        if eviction.how == DEALLOCATED:
            out.setdefault(eviction.group_id, set()).add(eviction.instance_id)
    return out


def lost_seconds(pods: Sequence[Pod], keys: Collection[str], *, now: datetime) -> float:
    """Seconds of work the batch pods among `keys` had done when they died: their run time so far."""
    total = 0.0
    for pod in pods:
        if pod.key in keys and pod.started_at is not None:
            total += max(0.0, (now - pod.started_at).total_seconds())
    return total


def preempted_offerings(group: NodeGroup) -> tuple[OfferingKey, ...]:
    """The offerings a Preempt notice for an instance of the spot group shows short: its VM size, spot only, in each
    of its zones (a regional group: every zone). On-demand offerings of the size and other spot sizes stay open."""
    location, size = group.location.strip().lower(), group.vm_size.strip().lower()
    return tuple(OfferingKey(location, "size", size, zone, SPOT) for zone in (tuple(group.zones) or ("",)))
