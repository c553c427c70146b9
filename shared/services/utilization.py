"""The utilisation poll: track unneeded nodes in Table storage, enqueue removals that are due.

If anything cannot be observed (the Kubernetes API fails, ARM fails), the poll
raises before touching state or the queue: no scale-down happens on a partial view.

A stored row that cannot be read stops only what depends on it: a group whose state row is unreadable is left
out (none of its nodes removed, given back, tainted or cleared; its nodes being deleted still hold their slots)
and listed among the refused groups of the status ConfigMap; a removal whose ledger row is unreadable leaves its
node as it is (services.reconcile). The other groups are planned as usual.

Replacements (consolidation, drift: services.replacement) are decided first: their new capacity is asked, and the
nodes whose replacement is Ready are forced scale-down candidates. The plan then keeps multi-size sets at their
minimum and its removals within the disruption budgets (engine.disruption_budgets.apply_budgets).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared import telemetry
from shared.actions import RemovalTarget, new_scale_down, scale_down_id
from shared.domain import DELETION_CANDIDATE_TAINT, DRIFTED, REPLACE, ClusterSnapshot, GroupState, Taint
from shared.engine import reasons
from shared.engine.backoff import backoff_reason
from shared.engine.disruption_budgets import apply_budgets, removal_reason
from shared.engine.multi_size import clip_removals
from shared.engine.scale_down import Removal, ScaleDownPlan, plan_scale_down
from shared.engine.scale_up import initial_state, pending_pods
from shared.options import scale_down_options, scale_up_options
from shared.gc_pause import gc_paused
from shared.ports import Ports
from shared.services.buffers import keep_room
from shared.services.gpu_readiness import report_overdue as report_gpu_not_ready
from shared.services.group_rows import leave_out, nodes_of, read_group_states, removals_seen
from shared.services.observe import measured_cpu, observe_or_skip, running_sizes
from shared.services.scheduled_capacity import with_windows
from shared.services.standby import standby_targets, with_standby_room
from shared.services.standby_pools import adjust_standby_pools, list_pools, pooled_ids
from shared.services.plan_lease import plan_lease
from shared.services.provisioning import hold_room
from shared.services.protection import apply_scale_in_protection
from shared.services.replacement import ReplacementRound, run_replacements
from shared.services.rounds import request_round
from shared.services.pending import pending_placements
from shared.services.reconcile import release_orphaned_removals, reserve_decided
from shared.services.standby_refill import plan_refills
from shared.services.status import disruption_report, publish_status, status_inputs
from shared.settings import Settings

log = logging.getLogger(__name__)

# The candidate pool's rotation (ScaleDownPlan.simulated_at: candidate -> when its removal was last simulated),
# per state store, i.e. per Function instance (and per replay run). In memory on purpose: it only says whose turn
# it is. A cold instance starts the rotation afresh, never-simulated candidates first, which can delay a verdict
# by one rotation but never makes one stale: the unneeded-since times that decide removals are in the table, and
# only a node simulated in this poll is removed. Bounded: the plan keeps entries of current candidates only.
_ROTATION: weakref.WeakKeyDictionary[object, dict[str, datetime]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class UtilizationPollResult:
    plan: ScaleDownPlan
    enqueued: tuple[str, ...]
    # Rows this poll could not read, with the row named: groups left out (by id), and nodes whose removal's
    # ledger row (or whose group's row, read again) could not be read, left as they are (by node name).
    unreadable_groups: Mapping[str, str] = field(default_factory=dict)
    unreadable_removals: Mapping[str, str] = field(default_factory=dict)
    replacements: ReplacementRound = ReplacementRound()  # what this poll decided about replacements


def run_utilization_poll(ports: Ports, settings: Settings, *, now: datetime) -> UtilizationPollResult:
    # A span (actions carry its context) and the poll's duration; the cyclic GC waits (shared.gc_pause).
    with telemetry.poll("poll_utilization"), gc_paused():
        if settings.dry_run or not settings.scale_down_enabled:
            return _utilization_poll(ports, settings, now=now)  # reserves nothing, hands out no slot
        with plan_lease(ports, now=now) as held:
            if not held:  # a round or the timer's poll is planning now: two would share out the same slots
                return UtilizationPollResult(ScaleDownPlan(), ())
            return _utilization_poll(ports, settings, now=now)


def _utilization_poll(ports: Ports, settings: Settings, *, now: datetime) -> UtilizationPollResult:
    if not settings.scale_down_enabled:
        return UtilizationPollResult(ScaleDownPlan(), ())
    snapshot = observe_or_skip(ports, now=now, with_budgets=True, node_mapping=settings.node_mapping,
                               gpu_readiness=settings.gpu_readiness)
    if snapshot is None:
        return UtilizationPollResult(ScaleDownPlan(), ())
    observed = snapshot
    group_states, unreadable = read_group_states(ports, observed.groups)
    snapshot, group_states = _readable(snapshot, group_states, unreadable)
    left_alone: dict[str, str] = {}
    if not settings.dry_run:
        reconciled = release_orphaned_removals(ports, settings, snapshot, group_states, now=now)
        left_alone.update(reconciled.unreadable)
        if reconciled.released:
            group_states, more = read_group_states(ports, snapshot.groups)
            unreadable.update(more)
            snapshot, group_states = _readable(snapshot, group_states, unreadable)
    previous = ports.state.list_unneeded()
    snapshot = running_sizes(snapshot, group_states)
    # Flexible groups' Standby Pools follow the standby decision (STANDBY_POOLS; errors logged, never fatal),
    # listed once (none without the port); a group served by one keeps no standby of its own.
    pools = list_pools(ports, snapshot.groups)
    pooled = pooled_ids(snapshot.groups, pools)
    snapshot, _ = with_windows(settings, snapshot, now=now)  # scale-down keeps an active window's minimum
    targets = standby_targets(ports, settings, snapshot.groups, states=group_states, now=now)
    adjust_standby_pools(ports, settings, snapshot.groups, targets, pools=pools)
    # ProvisioningRequests' booked room is load first (services.provisioning), then CapacityBuffers' room is kept:
    # their placeholders hold the nodes they fit and are load there (services.buffers).
    booked = hold_room(ports, settings, snapshot, options=scale_up_options(settings, now=now), now=now)
    planned, placements = keep_room(ports, booked, lambda held, after: pending_placements(
        held, group_states, settings, now=now, after=after), now=now)
    state = initial_state(planned)  # one placement state for the scale-up simulation and the plan
    # Replacements first: new capacity asked for admitted proposals, and the nodes whose replacement is Ready are
    # forced candidates of this plan. The rows it changed are read back (its own entries count in the budgets).
    replacements = run_replacements(ports, settings, snapshot, group_states, now=now, unneeded=previous.keys())
    group_states = {**group_states, **replacements.states}
    plan = plan_scale_down(
        # A left-out group's nodes being deleted still hold their slots: its own removals in flight are unknown.
        planned, unneeded_since=previous, now=now,
        options=replace(with_standby_room(ports, settings, scale_down_options(settings), snapshot.groups, now=now,
                                          states=group_states, pooled=pooled, targets=targets),
                        forced=replacements.forced_reasons),
        group_states={**group_states, **{gid: removals_seen(observed, gid) for gid in unreadable}},
        measured_cpu=measured_cpu(ports, settings, snapshot.nodes, now=now),
        pending_placements=(placements if placements is not None
                            else pending_placements(planned, group_states, settings, now=now, state=state)),
        simulated_at=_rotation(ports.state), state=state,
    )
    if plan.simulated_at:
        _ROTATION[ports.state] = dict(plan.simulated_at)
    # A multi-size set's lanes together stay at or above the set's minimum; then within the disruption budgets.
    # The removals either keeps wait (and stay unneeded) for a later poll.
    plan = clip_removals(plan, snapshot.groups, states=group_states)
    plan = apply_budgets(plan, snapshot, group_states, settings.disruption_budgets, now)
    for node, since in plan.unneeded.items():
        if previous.get(node) != since:
            ports.state.set_unneeded(node, since)
    # A node being removed keeps its row: the executor clears it when the removal ends or is given
    # back, and a decision that never started is decided again on the same clock.
    # A left-out group's nodes keep theirs too: nothing of that group changes until its row is repaired.
    in_flight = {node for state in group_states.values() for node in state.removing}
    untouched = nodes_of(observed, unreadable)
    for node in previous.keys() - plan.unneeded.keys() - in_flight - untouched:
        ports.state.clear_unneeded(node)
    if not settings.dry_run:
        _soft_taints(ports, snapshot, plan, now=now, untouched=untouched)
    # Nodes running batch work get scale-in protection, so no other tool shrinking a scale set takes them. It
    # reads no state row, so a group left out above is protected all the same.
    apply_scale_in_protection(ports, settings, replace(snapshot, groups=(*snapshot.groups, *(
        g for g in observed.groups if g.id in unreadable))), now=now)

    enqueued = []
    disruptions: dict[str, int] = {}  # by reason, the removals sent (a replacement is counted at its drain)
    for batch in _batches(plan.removals):
        # One id per decision: a decision the executor skipped (a race with the minimum, a cooldown)
        # must not block the next one. Two live actions for one node are kept apart by the group's
        # reservation, which names the action holding the node.
        action_id = scale_down_id([r.node for r in batch], now=now)
        if not settings.dry_run:
            # Reserved now, not at the cordon step: the next round must not hand out these nodes (or their
            # slots) again while the message waits in the queue. The cordon step finds its own reservation.
            held = reserve_decided(ports, batch[0].group_id, [r.node for r in batch], action_id)
            batch = [r for r in batch if r.node in held]
            if not batch:
                continue
        first = batch[0]
        ports.queue.send(
            new_scale_down(
                action_id=action_id,
                group=first.group_id,
                targets=[RemovalTarget(r.node, r.provider_id, r.instance_id) for r in batch],
                now=now,
                ttl=settings.action_ttl,
                reason=_reason(batch),
                removal_kind=_REPLACEMENT_KINDS.get(first.reason, first.kind),
                **telemetry.trace_fields(),
            )
        )
        enqueued.append(action_id)
        for removal in batch:
            disruptions[removal_reason(removal)] = disruptions.get(removal_reason(removal), 0) + 1
            log.info("scale-down decided: node=%s group=%s kind=%s utilization=%.2f age=%s action=%s",
                     removal.node, removal.group_id, removal.kind, removal.utilization, removal.node_age, action_id)
    for node, reason in plan.kept.items():
        # Flat keys: they become custom dimensions in Application Insights (a dict would arrive as one string).
        log.info("node %s kept (%s): %s", node, reason.code, reason, extra={"node": node, "kept_reason": reason.code})
    # Warm standby short and the group quiet: create and park instances (with DRY_RUN the executor only records it).
    enqueued += plan_refills(ports, settings, snapshot, group_states, unneeded=plan.unneeded, now=now,
                             pooled=pooled, targets=targets)
    telemetry.record_utilization_poll(len(plan.unneeded), group_states, now=now)
    if not settings.dry_run:
        telemetry.record_disruptions(disruptions)
    report_gpu_not_ready(ports, settings, snapshot, now=now)  # GPU nodes whose device plugin never reported
    waiting = waiting_for_slots(snapshot, plan)
    throttled = any(reason.code == reasons.ARM_THROTTLED for reason in plan.kept.values())
    if (waiting or throttled) and not settings.dry_run:
        request_round(ports, settings, now=now)  # freed slots (and budgets) are used before the next tick
    backoff = {gid: why for gid, state in group_states.items() if (why := backoff_reason(state, now=now)) is not None}
    publish_status(ports, settings, snapshot, status_inputs(
        settings, group_states=group_states, unneeded=plan.unneeded, backoff=backoff,
        scale_up_needed=None, unschedulable_pods=len(pending_pods(snapshot)),
        waiting_for_slots=waiting, disruption=disruption_report(replacements),
    ), now=now)
    return UtilizationPollResult(plan=plan, enqueued=tuple(enqueued), unreadable_groups=unreadable,
                                 unreadable_removals=left_alone, replacements=replacements)


def _readable(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], unreadable: Mapping[str, str]
              ) -> tuple[ClusterSnapshot, dict[str, GroupState]]:
    """The snapshot and states without the groups whose row cannot be read (among the snapshot's refused)."""
    return leave_out(snapshot, unreadable), {gid: state for gid, state in states.items() if gid not in unreadable}


def _rotation(state: object) -> dict[str, datetime] | None:
    """The pool's rotation kept for this state store; None (every candidate simulated) for a store that cannot
    key one (a test double without weak references or a hash): a pool that cannot rotate must not be used."""
    try:
        weakref.ref(state)
        return _ROTATION.get(state, {})
    except TypeError:
        return None


def _batches(removals: Sequence[Removal]) -> list[list[Removal]]:
    """One action per removal, except empty nodes: one action per group for all of them (one delete call)."""
    empty: dict[str, list[Removal]] = {}
    batches: list[list[Removal]] = []
    for removal in removals:
        if removal.kind == "empty" and not removal.reason:  # a replacement's drain is an action of its own
            if removal.group_id not in empty:
                empty[removal.group_id] = []
                batches.append(empty[removal.group_id])
            empty[removal.group_id].append(removal)
        else:
            batches.append([removal])
    return batches


# A forced removal's kind for telemetry: a replacement's (consolidation) or a drift's drain.
_REPLACEMENT_KINDS = {REPLACE: "replace", DRIFTED: "drift"}


def _reason(batch: Sequence[Removal]) -> str:
    removal = batch[0]
    since = removal.unneeded_since.isoformat()
    if removal.reason in _REPLACEMENT_KINDS:
        return (f"{_REPLACEMENT_KINDS[removal.reason]}: the replacement is Ready; {len(removal.move)} pod(s) to move"
                + (f", {len(removal.wait)} batch pod(s) to wait for" if removal.wait else ""))
    if len(batch) > 1:
        return f"{len(batch)} empty nodes, unneeded since {min(r.unneeded_since for r in batch).isoformat()}"
    if removal.kind == "batch":
        return f"unneeded since {since}; waits for {len(removal.wait)} batch pod(s)"
    if removal.kind == "drain":
        return f"unneeded since {since}; {len(removal.move)} pod(s) to move"
    return f"{removal.kind} since {since}"


def _soft_taints(ports: Ports, snapshot: ClusterSnapshot, plan: ScaleDownPlan, *, now: datetime,
                 untouched: Collection[str] = ()) -> None:
    """DeletionCandidateOfClusterAutoscaler:PreferNoSchedule on unneeded nodes, off the others (as CA does).

    The scheduler then prefers other nodes for new pods, so an unneeded node stays empty
    instead of catching the next pod and starting its unneeded clock over. Nodes `untouched` (of a group
    left out this poll) keep their taints as they are.
    """
    taint = Taint(DELETION_CANDIDATE_TAINT, str(int(now.timestamp())), "PreferNoSchedule")
    for node in snapshot.nodes:
        if node.name in untouched:
            continue
        marked = any(t.key == DELETION_CANDIDATE_TAINT for t in node.taints)
        if node.name in plan.unneeded and not marked:
            ports.cluster.add_taint(node.name, taint=taint)
        elif marked and node.name not in plan.unneeded and not node.is_being_deleted:
            ports.cluster.remove_taint(node.name, taint_key=DELETION_CANDIDATE_TAINT)


def waiting_for_slots(snapshot: ClusterSnapshot, plan: ScaleDownPlan) -> dict[str, int]:
    """Per group, the nodes the plan kept only for want of a MAX_SCALE_DOWN_PARALLELISM slot."""
    groups = {node.name: ref.group_id for node in snapshot.nodes if (ref := node.instance) is not None}
    waiting: dict[str, int] = {}
    for node, reason in plan.kept.items():
        if reason.code == reasons.MAX_PARALLELISM_REACHED and node in groups:
            waiting[groups[node]] = waiting.get(groups[node], 0) + 1
    return waiting
