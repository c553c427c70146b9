"""Virtual nodes in the pending poll: their demand planned with the pending pods, then the gate, the pods'
deletion cost, events, telemetry and the backfill actions (`engine.virtual_nodes` decides all of it).

Order within a poll: `plan_for` (before the scale-up simulation: what the virtual nodes hold, each pod's
decision, and the snapshot the planner sees, with their demand pending), then `act` (after it: the pods the
simulation placed on Ready VM nodes are moved, within the budgets and the per-poll pace).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from shared import telemetry
from shared.actions import new_backfill
from shared.domain import ClusterSnapshot, Resources
from shared.engine.scale_up import ScaleUpSimulation
from shared.engine.virtual_nodes import (
    CLOSED_TAINT,
    CLOSED_TAINT_KEY,
    DELETION_COST_ANNOTATION,
    DELETION_COST_OWNER_ANNOTATION,
    PROVIDER_CREATE_SUCCESS,
    VirtualNodeOptions,
    VirtualNodePlan,
    deletion_cost_changes,
    plan_virtual_nodes,
    planning_snapshot,
    select_backfill,
    virtual_nodes,
)
from shared.options import virtual_node_options
from shared.ports import ClusterEvent, Ports
from shared.settings import Settings

log = logging.getLogger(__name__)

BURST_EVENT = "BurstToVirtualNode"
# Annotation patches one poll makes at most: a burst of hundreds of pods is marked over a few polls rather than
# in one long invocation (the annotation is best effort: it matters only when a ReplicaSet scales in).
MAX_ANNOTATIONS_PER_POLL = 50


@dataclass(frozen=True, slots=True)
class VirtualNodeRound:
    plan: VirtualNodePlan
    options: VirtualNodeOptions
    snapshot: ClusterSnapshot  # what the scale-up planner sees: the virtual nodes' demand pods pending
    after: frozenset[str]  # their keys, planned after the truly pending pods
    observed: ClusterSnapshot  # the cluster as observed: every pod where it is


class _Meter:
    """ACI core-seconds between polls of this function instance (the first poll of an instance counts none)."""

    last: datetime | None = None


def plan_for(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, *, now: datetime) -> VirtualNodeRound:
    options = virtual_node_options(settings)
    names = virtual_nodes(snapshot.nodes)
    if not names:
        return VirtualNodeRound(VirtualNodePlan(), options, snapshot, frozenset(), snapshot)
    if not snapshot.prices and any(p.node_name in names for p in snapshot.pods if p.owner is not None):
        # Whether moving a pod pays needs VM prices (cached a day by the provider).
        snapshot = replace(snapshot, prices=ports.provider.list_prices(snapshot.groups))
    # Short pods may start and finish between polls: virtual-kubelet's events count their container groups.
    creations = ports.cluster.list_event_times(PROVIDER_CREATE_SUCCESS)
    plan = plan_virtual_nodes(snapshot, options, now=now, creations=creations)
    planned, after = planning_snapshot(snapshot, plan)
    return VirtualNodeRound(plan, options, planned, after, snapshot)


def act(ports: Ports, settings: Settings, round_: VirtualNodeRound, simulation: ScaleUpSimulation, *,
        now: datetime) -> tuple[str, ...]:
    """Gate, mark, report and move; the ids of the backfill actions sent."""
    plan = round_.plan
    if not plan.nodes:
        return ()
    _gate(ports, settings, round_, now=now)
    _mark_deletion_cost(ports, settings, round_, now=now)
    _meter(settings, round_, now=now)
    placements = {step.pod.key: step.node.name for step in simulation.steps
                  if step.kind == "existing" and step.pod is not None and step.pod.key in round_.after}
    sent: list[str] = []
    if placements:
        budgets = ports.cluster.list_disruption_budgets()
        for move in select_backfill(plan, placements, budgets, round_.options):
            action = new_backfill(node=move.pod.node_name or "", namespace=move.pod.namespace, pod=move.pod.name,
                                  uid=move.pod.uid, to=move.to, now=now, ttl=settings.action_ttl,
                                  reason=move.why[:1000], **telemetry.trace_fields())
            ports.queue.send(action)
            sent.append(action.id)
            log.info("backfill decided: %s off %s onto room on %s (%s)", move.pod.key, move.pod.node_name, move.to,
                     move.why)
    usage = plan.usage
    telemetry.note_virtual_node_decisions(backfill=plan.count("backfill"), stays=plan.count("stays"),
                                          failed=plan.count("failed"), admitted=len(plan.admitted),
                                          closed=plan.gate.closed, why=plan.gate.why)
    log.info("virtual nodes %s: %d pod(s) on ACI, %g of %d cores, %d refused; backfill %d, stay %d; %s; %s",
             ", ".join(plan.nodes), usage.pods, usage.cores, round_.options.limits.cores, usage.failed,
             plan.count("backfill"), plan.count("stays"), "closed" if plan.gate.closed else "open", plan.gate.why)
    return tuple(sent)


def _gate(ports: Ports, settings: Settings, round_: VirtualNodeRound, *, now: datetime) -> None:
    """Put our taint on the virtual nodes while they are to be closed (its value saying why), take it off when
    they open.

    Closing because an ACI limit is nearly used (value `aci-full`) is a warning and a `VirtualNodeClosed` event,
    and opening from it a `VirtualNodeOpened` event; the routine closing and opening of polled admission
    (value `admission`) is only logged.
    """
    if settings.dry_run:
        return
    gate = round_.plan.gate
    wanted = gate.taint
    for node in round_.observed.nodes:
        if node.name not in round_.plan.nodes:
            continue
        current = next((t for t in node.taints if t.key == CLOSED_TAINT_KEY), None)
        if current == wanted:
            continue
        if current is not None:
            ports.cluster.remove_taint(node.name, taint_key=CLOSED_TAINT_KEY)
        if wanted is not None:
            ports.cluster.add_taint(node.name, taint=wanted)
        if wanted == CLOSED_TAINT:
            log.warning("virtual node %s closed to new pods: %s", node.name, gate.why)
            ports.events.emit(ClusterEvent("default", "Node", node.name, "", "VirtualNodeClosed", gate.why, now,
                                           "Warning"))
        else:
            log.info("virtual node %s %s: %s", node.name, "closed" if wanted else "open", gate.why)
            if current == CLOSED_TAINT:
                ports.events.emit(ClusterEvent("default", "Node", node.name, "", "VirtualNodeOpened", gate.why, now))


def _mark_deletion_cost(ports: Ports, settings: Settings, round_: VirtualNodeRound, *, now: datetime) -> None:
    """Pods on a virtual node get a low pod-deletion-cost (a ReplicaSet scaling in removes them first) and a
    BurstToVirtualNode event, once; pods we marked that left lose the mark."""
    if settings.dry_run:
        return
    names = set(round_.plan.nodes)
    changes = deletion_cost_changes(round_.observed.pods, names)
    for pod, cost in list(changes.values())[:MAX_ANNOTATIONS_PER_POLL]:
        if cost is None:
            ports.cluster.annotate_pod(pod.namespace, pod.name, annotations={
                DELETION_COST_ANNOTATION: None, DELETION_COST_OWNER_ANNOTATION: None})
            continue
        ports.cluster.annotate_pod(pod.namespace, pod.name, annotations={
            DELETION_COST_ANNOTATION: cost, DELETION_COST_OWNER_ANNOTATION: "virtual-node"})
        # Marking happens once per pod, so this is the pod's one burst event.
        ports.events.emit(ClusterEvent(pod.namespace, "Pod", pod.name, pod.uid, BURST_EVENT,
                                       f"running on virtual node {pod.node_name} (ACI); deletion cost {cost}", now))


def _meter(settings: Settings, round_: VirtualNodeRound, *, now: datetime) -> None:
    usage, prices = round_.plan.usage, round_.options.prices
    seconds = 0.0
    if _Meter.last is not None:
        # At most one poll interval's worth: a function instance that slept long did not see the time between.
        seconds = min(max((now - _Meter.last).total_seconds(), 0.0), 600.0)
    _Meter.last = now
    cost = seconds / 3600 * prices.per_hour(Resources(cpu_milli=usage.cpu_milli, memory_bytes=usage.memory_bytes))
    telemetry.record_virtual_nodes(pods=usage.pods, cores=usage.cores, quota=round_.options.limits.cores,
                                   failed=usage.failed, closed=round_.plan.gate.closed,
                                   core_seconds=seconds * usage.cores, cost_usd=cost)
