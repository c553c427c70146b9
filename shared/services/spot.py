"""Spot evictions, seen by the pending poll and announced by Azure's Preempt notice (engine.spot says how).

- `find_and_handle`: each pending poll lists the spot groups' instances with their power state, finds the
  evicted nodes and the nodes under a notice or an agent's signal, acts on them, and returns the snapshot the
  planner sees (those nodes gone, their pods' replacements pending), so replacements are asked for now;
- `act_on_notice`: a node about to go (a notice or a signal): cordoned with our taint, its pods evicted at
  once (batch pods too: they die with the VM anyway), the eviction recorded;
- a node whose VM is gone (deleted, or deallocated by Azure) has its Node object deleted, so its pods are
  garbage-collected and recreated at once rather than after the node lifecycle controller's five minutes;
  a deallocated instance becomes stopped capacity of its group, started again before new instances.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from shared import telemetry
from shared.domain import ClusterSnapshot, GroupState, Instance, Node, Pod, Taint
from shared.engine.drainability import is_batch
from shared.engine.spot import (
    NOTICE,
    SIGNAL,
    Eviction,
    find_evictions,
    lost_seconds,
    replacement_demand,
    stopped_by_eviction,
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
                    now: datetime) -> tuple[ClusterSnapshot, list[Eviction]]:
    """The evictions this poll sees, acted on; and the snapshot to plan with (see the module docstring)."""
    spot_groups = [g for g in snapshot.groups if g.is_spot]
    signal = settings.spot_eviction_signal
    if not spot_groups:
        return snapshot, []
    instances: dict[str, Sequence[Instance]] = {}
    for group in spot_groups:
        try:
            instances[group.id] = ports.provider.list_instances(group, power_state=True)
        except ComputeError as exc:
            log.warning("instances of spot group %s could not be listed (%s): its evictions are seen next poll",
                        group.id, exc)
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
            _forget_node(ports, node, eviction, snapshot, now=now, counted=eviction.node in noticed)
        elif eviction.how == SIGNAL and not _marked(node):
            act_on_notice(ports, settings, snapshot, eviction, now=now)
        elif eviction.how == NOTICE:
            _evict_pods(ports, snapshot.pods_on(node.name))  # stragglers of an earlier notice: idempotent
    if not settings.dry_run:
        _record_stopped(ports, states, evictions)
    return replacement_demand(snapshot, evictions), evictions


def _marked(node: Node) -> bool:
    return node.unschedulable and any(t.key == PREEMPTED_TAINT.key for t in node.taints)


def act_on_notice(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, eviction: Eviction, *,
                  now: datetime) -> None:
    """Cordon the node with our taint and evict its pods at once; record the eviction."""
    ports.cluster.cordon(eviction.node, taint=PREEMPTED_TAINT)
    pods = [p for p in snapshot.pods_on(eviction.node) if not p.is_daemonset and not p.is_mirror]
    evicted = _evict_pods(ports, pods)
    _record(ports, eviction, snapshot, now=now)
    log.warning("spot node %s (%s) is about to be evicted (%s): cordoned, %d of %d pod(s) evicted",
                eviction.node, eviction.group_id, eviction.how, evicted, len(pods))


def _evict_pods(ports: Ports, pods: Sequence[Pod]) -> int:
    evicted = 0
    for pod in pods:
        if pod.terminating or pod.is_daemonset or pod.is_mirror:
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
    log.warning("spot node %s (%s): VM %s by Azure; Node object deleted, %d pod(s) to be replaced",
                node.name, eviction.group_id, eviction.how, len(eviction.pods))


def _record(ports: Ports, eviction: Eviction, snapshot: ClusterSnapshot, *, now: datetime) -> None:
    pods = {p.key: p for p in snapshot.pods}
    lost = lost_seconds(snapshot.pods, eviction.job_pods, now=now)
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

