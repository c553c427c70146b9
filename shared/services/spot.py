"""Spot evictions, seen by the pending poll and announced by Azure's Preempt notice (engine.spot says how).

- `find_and_handle`: each pending poll lists the spot groups' instances with their power state, finds the
  evicted nodes and the nodes under a notice or an agent's signal, acts on them, and returns the snapshot the
  planner sees (those nodes gone, their pods' replacements pending), so replacements are asked for now;
- `act_on_notice`: a node about to go (a notice or a signal): cordoned with our taint, its pods evicted at
  once (batch pods left to finish unless SPOT_NOTICE_BATCH_PODS=evict: evicting them early saves no work), the
  eviction recorded; a notice is held in the group's state (`record_notice`), so a node that registers after
  it is drained as soon as a poll sees it;
- a node whose VM is gone (deleted, or deallocated by Azure) has its Node object deleted, so its pods are
  garbage-collected and recreated at once rather than after the node lifecycle controller's five minutes;
  a deallocated instance becomes stopped capacity of its group, started again before new instances.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from shared import telemetry
from shared.domain import ClusterSnapshot, GroupState, Instance, Node, Pod, Taint
from shared.engine.drainability import is_batch
from shared.engine.templates import build_templates
from shared.engine.spot import (
    Eviction,
    find_evictions,
    lost_seconds,
    preempted_without_node,
    replacement_demand,
    stopped_by_eviction,
    write_off,
)
from shared.ports import ClusterError, ClusterEvent, ComputeError, Ports
from shared.services.swap import StateConflict, swap_group
from shared.settings import Settings

log = logging.getLogger(__name__)

# Our mark on a node Azure is about to evict: cordoned, and seen by every later poll as going.
PREEMPTED_TAINT = Taint("vmss-autoscaler.io/spot-preempted", "", "NoSchedule")
# Pods of a node under notice are given this long at most: the notice is 30 s before the VM goes.
NOTICE_GRACE_SECONDS = 20
_RECREATING = ("ReplicaSet", "StatefulSet", "Job", "ReplicationController")


def _batch(pods: Sequence[Pod], settings: Settings) -> frozenset[str]:
    return frozenset(p.key for p in pods if is_batch(p, settings.batch_pod_selector))


def find_and_handle(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: dict[str, GroupState], *,
                    now: datetime, listed: Mapping[str, Sequence[Instance]] | None = None,
                    ) -> tuple[ClusterSnapshot, list[Eviction]]:
    """The evictions this poll sees, acted on; and the snapshot to plan with (see the module docstring).

    `listed`: instances this poll listed already with their power state, by group id (not listed again)."""
    spot_groups = [g for g in snapshot.groups if g.is_spot]
    signal = settings.spot_eviction_signal
    if not spot_groups:
        return snapshot, []
    instances: dict[str, Sequence[Instance]] = {}
    for group in spot_groups:
        if listed is not None and group.id in listed:
            instances[group.id] = listed[group.id]
            continue
        try:
            instances[group.id] = ports.provider.list_instances(group, power_state=True)
        except ComputeError as exc:
            log.warning("instances of spot group %s could not be listed (%s): its evictions are seen next poll",
                        group.id, exc)
    if not settings.dry_run:
        _forget_done_notices(ports, states, instances, now=now)
    noticed = {n.name for n in snapshot.nodes if any(t.key == PREEMPTED_TAINT.key for t in n.taints)}
    evictions = find_evictions(snapshot, instances, states, signal=signal, noticed=noticed,
                               batch=_batch(snapshot.pods, settings))
    for eviction in evictions:
        node = next(n for n in snapshot.nodes if n.name == eviction.node)
        if settings.dry_run:
            log.info("dry run: spot node %s (%s) %s; would %s", node.name, eviction.group_id, eviction.how,
                     "delete its Node object" if eviction.vm_gone else "cordon it and evict its pods")
            continue
        if eviction.vm_gone:
            _forget_node(ports, node, eviction, snapshot, now=now, counted=_counted(node, eviction, states))
        elif not _marked(node):
            # An agent's signal, or a notice that came before this node registered (held in the group's state).
            act_on_notice(ports, settings, snapshot, eviction, now=now)
        else:
            _evict_pods(ports, settings, snapshot.pods_on(node.name))  # stragglers of an earlier notice
    if not settings.dry_run:
        _record_stopped(ports, states, evictions)
    # Instances under a notice with no node yet are written off too: their replacements are asked for now.
    planning = replacement_demand(write_off(snapshot, preempted_without_node(snapshot, states)), evictions)
    if evictions:
        # A group's template may have come from a node going away, with an agent's taint on it: from the rest.
        planning = replace(planning, templates=build_templates(planning.groups, planning.nodes,
                                                               vm_sizes=planning.vm_sizes))
    return planning, evictions


def _counted(node: Node, eviction: Eviction, states: Mapping[str, GroupState]) -> bool:
    """Whether the eviction was recorded already, when its notice was acted on."""
    state = states.get(eviction.group_id)
    return _marked(node) or (state is not None and eviction.instance_id in state.preempted)


# A notice whose VM is still there this long after its NotBefore was cancelled (Azure may cancel one).
NOTICE_KEPT = timedelta(minutes=15)


def _forget_done_notices(ports: Ports, states: dict[str, GroupState], instances: Mapping[str, Sequence[Instance]],
                         *, now: datetime) -> None:
    """Drop notices whose instance is gone or deallocated (the eviction happened), or long past due."""
    for group_id, listed in instances.items():
        state = states.get(group_id)
        if state is None or not state.preempted:
            continue
        alive = {i.instance_id for i in listed if not i.deallocated}
        stale = {i for i, due in state.preempted.items() if i not in alive or now - due > NOTICE_KEPT}
        if not stale:
            continue

        def drop(fresh: GroupState, stale: set[str] = stale) -> tuple[GroupState | None, GroupState]:
            kept = {i: due for i, due in fresh.preempted.items() if i not in stale}
            if len(kept) == len(fresh.preempted):
                return None, fresh
            changed = replace(fresh, preempted=kept)
            return changed, changed

        try:
            states[group_id] = swap_group(ports.state, group_id, drop, what="forget notices of evicted instances")
        except StateConflict as exc:
            log.warning("%s; the next poll forgets them", exc)


def record_notice(ports: Ports, group_id: str, instance_id: str, *, not_before: datetime) -> None:
    """Hold a Preempt notice in the group's state until the eviction is seen (the node may not be there yet)."""
    def hold(state: GroupState) -> tuple[GroupState | None, None]:
        if state.preempted.get(instance_id) == not_before:
            return None, None
        return replace(state, preempted={**state.preempted, instance_id: not_before}), None

    swap_group(ports.state, group_id, hold, what=f"hold the Preempt notice of instance {instance_id}")


def _marked(node: Node) -> bool:
    return node.unschedulable and any(t.key == PREEMPTED_TAINT.key for t in node.taints)


def act_on_notice(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, eviction: Eviction, *,
                  now: datetime) -> None:
    """Cordon the node with our taint and evict its pods at once (batch pods per SPOT_NOTICE_BATCH_PODS);
    record the eviction."""
    ports.cluster.cordon(eviction.node, taint=PREEMPTED_TAINT)
    pods = [p for p in snapshot.pods_on(eviction.node) if not p.is_daemonset and not p.is_mirror]
    evicted = _evict_pods(ports, settings, pods)
    _record(ports, eviction, snapshot, now=now, batch_lost=settings.spot_notice_batch_pods == "evict")
    log.warning("spot node %s (%s) is about to be evicted (%s): cordoned, %d of %d pod(s) evicted",
                eviction.node, eviction.group_id, eviction.how, evicted, len(pods))


def _evict_pods(ports: Ports, settings: Settings, pods: Sequence[Pod]) -> int:
    evicted = 0
    for pod in pods:
        if pod.terminating or pod.is_daemonset or pod.is_mirror:
            continue
        if settings.spot_notice_batch_pods == "keep" and is_batch(pod, settings.batch_pod_selector):
            # Evicting a batch pod 30 s early saves none of its work, and it may finish before the VM goes;
            # its replacement is planned now either way (engine.spot.replacement_demand).
            continue
        grace = min(pod.termination_grace_seconds if pod.termination_grace_seconds is not None else 30,
                    NOTICE_GRACE_SECONDS)
        try:
            # Through the Eviction API, so budgets are asked; a pod a budget holds dies with the VM anyway.
            if ports.cluster.evict(pod.namespace, pod.name, grace_period_seconds=grace) == "evicted":
                evicted += 1
        except ClusterError as exc:
            log.warning("could not evict %s before its spot node goes: %s", pod.key, exc)
    return evicted


def _forget_node(ports: Ports, node: Node, eviction: Eviction, snapshot: ClusterSnapshot, *, now: datetime,
                 counted: bool) -> None:
    """The VM is gone: delete the Node object it left behind; record the eviction unless its notice did."""
    try:
        ports.cluster.delete_node(node.name)
    except ClusterError as exc:
        log.warning("Node %s, whose spot VM is gone, could not be deleted: %s; next poll tries again", node.name, exc)
    if not counted:
        _record(ports, eviction, snapshot, now=now)
    else:
        # Recorded at its notice; the batch pods left to finish that were still running died with the VM.
        telemetry.spot_work_lost(lost_seconds(snapshot.pods, eviction.job_pods, now=now))
    log.warning("spot node %s (%s): VM %s by Azure; Node object deleted, %d pod(s) to be replaced",
                node.name, eviction.group_id, eviction.how, len(eviction.pods))


def _record(ports: Ports, eviction: Eviction, snapshot: ClusterSnapshot, *, now: datetime,
            batch_lost: bool = True) -> None:
    """The eviction, as telemetry and a Node event; `batch_lost`: its batch pods' work is lost now (False: they
    were left to finish on a notice, and what dies with the VM is counted when it goes)."""
    pods = {p.key: p for p in snapshot.pods}
    lost = lost_seconds(snapshot.pods, eviction.job_pods, now=now) if batch_lost else 0.0
    replacements = sum(1 for key in eviction.pods if (p := pods.get(key)) is not None and p.owner is not None
                       and p.owner.kind in _RECREATING)
    telemetry.spot_eviction(eviction.node, group=eviction.group_id, how=eviction.how, pods=len(eviction.pods),
                            batch_pods=len(eviction.job_pods), lost_seconds=lost, replacements=replacements)
    ports.events.emit(ClusterEvent(
        "default", "Node", eviction.node, "", "SpotEvicted",
        f"Spot VM of group {eviction.group_id} evicted by Azure ({eviction.how}): {len(eviction.pods)} pod(s), "
        f"{len(eviction.job_pods)} batch pod(s) with {lost:.0f} s of work lost; {replacements} replacement(s) "
        f"planned now", now, "Warning"))


def _record_stopped(ports: Ports, states: dict[str, GroupState], evictions: Sequence[Eviction]) -> None:
    """Instances Azure deallocated become stopped capacity of their group (started before new ones)."""
    for group_id, instances in stopped_by_eviction(evictions).items():
        def stop(state: GroupState, instances: set[str] = instances) -> tuple[GroupState | None, GroupState]:
            if instances <= state.stopped:
                return None, state
            changed = replace(state, stopped=state.stopped | instances)
            return changed, changed

        try:
            states[group_id] = swap_group(ports.state, group_id, stop, what="record instances deallocated by Azure")
        except StateConflict as exc:
            log.warning("%s; the next poll records it", exc)

