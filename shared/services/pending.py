"""The pending-pods poll: observe, plan scale-up, enqueue one action per group to grow.

Pending pods first take free room, then nodes on their way, then nodes being drained
whose removal can still be cancelled (a reclaim request in the group's state row, acted
on by the executor), and only then new nodes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared import telemetry, yaml_text
from shared.actions import new_scale_up, scale_up_id
from shared.domain import BufferStatus, ClusterSnapshot, GroupState, NodeGroup
from shared.engine.backoff import after_failure, backoff_view, provision_timed_out
from shared.engine.node_counts import present_by_group
from shared.engine.expanders import ExpanderError, Priorities, parse_priorities
from shared.engine.forecast import Forecast
from shared.engine.idle import measure_boots, measure_starts, starting_instances
from shared.engine.scale_up import (
    GroupIncrease,
    ScaleUpPlan,
    existing_placements,
    pending_pods,
    simulate_scale_up,
)
from shared.engine.load import LoadIncrease
from shared.engine.multi_size import clip_increases
from shared.engine.scheduled_capacity import ActiveWindow, ScheduledIncrease
from shared.engine.offerings import FailedAllocation, describe
from shared.engine.provisioning import restore_targets
from shared.engine.placement import PlacementState
from shared.engine.spot import Eviction, keep_off_spot
from shared.engine.spot_work import (
    EXPECTED_RUNTIME_ANNOTATION,
    SPOT_ANNOTATION,
    expected_loss,
    expected_runtime,
    plan_spot_work,
    price_fraction,
    rule_of,
)
from shared.engine.virtual_nodes import VirtualNodePlan, plan_virtual_nodes, planning_snapshot, status_of
from shared.options import scale_up_options, virtual_node_options
from shared.gc_pause import gc_paused
from shared.ports import Ports
from shared.services.events import scale_up_events
from shared.services import allocation, demand, offerings, provisioning, spot, virtual_nodes
from shared.services.buffers import read_buffers, real_pod_events, status_lines, statuses, write_statuses
from shared.services.gpu_readiness import boot_holds as gpu_boot_holds
from shared.services.group_rows import leave_out, read_group_states
from shared.services.load import plan_load_increases
from shared.services.scheduled_capacity import plan_scheduled_increases, with_windows
from shared.services.observe import observe_or_skip, running_sizes
from shared.services.status import publish_status, status_inputs
from shared.services.swap import StateConflict, swap_group
from shared.settings import Settings

log = logging.getLogger(__name__)

# cluster-autoscaler's priority expander reads this ConfigMap in its own namespace, key `priorities`.
PRIORITY_CONFIG_MAP = ("kube-system", "cluster-autoscaler-priority-expander")


@dataclass(frozen=True, slots=True)
class PendingPollResult:
    pending: int
    plan: ScaleUpPlan
    enqueued: tuple[str, ...]  # action ids
    observed: ClusterSnapshot | None = None  # what the poll saw (None: it skipped); `plan` shows groups and nodes
    virtual: VirtualNodePlan = VirtualNodePlan()  # the virtual nodes: ACI's use, each pod's decision, the gate
    evictions: tuple[Eviction, ...] = ()  # spot nodes lost (or about to be) that this poll saw
    failed_allocations: tuple[FailedAllocation, ...] = ()  # instances a successful scale-up left Failed, this poll
    limits: offerings.PlanningLimits = offerings.PlanningLimits()  # unavailable offerings and quotas planned with
    windows: Mapping[str, ActiveWindow] = field(default_factory=dict)  # SCHEDULED_CAPACITY windows active, by group
    buffers: Mapping[str, BufferStatus] = field(default_factory=dict)  # CapacityBuffers' statuses, by namespace/name
    forecasts: Mapping[str, Forecast] = field(default_factory=dict)  # each group's demand forecast for the next hour
    # ProvisioningRequests as this poll leaves them, by namespace/name (services.provisioning.status_lines).
    provisioning_requests: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def priority_rules(ports: Ports, settings: Settings) -> Priorities:
    """The priority expander's rules: the CA ConfigMap when present and valid, else PRIORITY_EXPANDER_CONFIG.

    Users switching from cluster-autoscaler keep their ConfigMap. A ConfigMap we cannot use
    is logged as an error naming what is wrong and the app setting applies, so a typo in it
    never stops scale-up.
    """
    namespace, name = PRIORITY_CONFIG_MAP
    fallback = parse_priorities(dict(settings.priority_expander_config))
    data = ports.cluster.get_config_map(namespace, name)
    if data is None:
        return fallback
    text = data.get("priorities")
    if text is None:
        log.error("ConfigMap %s/%s has no key 'priorities'; using PRIORITY_EXPANDER_CONFIG", namespace, name)
        return fallback
    try:
        return parse_priorities(yaml_text.safe_load(text) or {})
    except (yaml_text.YAMLError, ExpanderError) as exc:
        log.error("ConfigMap %s/%s key 'priorities' is invalid (%s); using PRIORITY_EXPANDER_CONFIG",
                  namespace, name, exc)
        return fallback


def run_pending_poll(ports: Ports, settings: Settings, *, now: datetime) -> PendingPollResult:
    # A span (actions carry its context) and the poll's duration; the cyclic GC waits (shared.gc_pause).
    with telemetry.poll("poll_pending_pods"), gc_paused():
        return _pending_poll(ports, settings, now=now)


def _pending_poll(ports: Ports, settings: Settings, *, now: datetime) -> PendingPollResult:
    snapshot = observe_or_skip(ports, now=now, node_mapping=settings.node_mapping,
                               gpu_readiness=settings.gpu_readiness)
    if snapshot is None:
        return PendingPollResult(pending=0, plan=ScaleUpPlan(), enqueued=())
    states, unreadable = read_group_states(ports, snapshot.groups)
    if unreadable:
        # A group whose state row cannot be read is neither planned onto nor written (reported by the read);
        # the other groups keep scaling. It is listed among the refused groups, as the utilisation poll lists it.
        snapshot = leave_out(snapshot, unreadable)
        states = {group_id: state for group_id, state in states.items() if group_id not in unreadable}
    observed = snapshot = running_sizes(snapshot, states)
    _measure_boots(ports, snapshot, states, settings, now=now)
    # Instances a successful scale-up left Failed: deleted, their offering marked (or the group backed off), and
    # written off, so their pods are planned elsewhere now. Growing spot groups are listed once for both checks.
    growing = allocation.list_growing(ports, settings, snapshot, states, now=now)
    snapshot, failed = allocation.find_and_handle(ports, settings, snapshot, states, growing, now=now)
    snapshot, backed_off = _apply_backoff(ports, snapshot, states, settings, now=now)
    # Spot evictions: the lost nodes leave the snapshot and their pods' replacements are planned now.
    snapshot, evictions = spot.find_and_handle(ports, settings, snapshot, states, now=now,
                                               listed={g: i for g, i in growing.items() if g in _spot_ids(snapshot)})
    snapshot = running_sizes(snapshot, states)  # instances Azure deallocated are stopped capacity from now on
    # Nodes of scale-ups in flight that the capacity does not show (not written yet, or taken back by ARM after a
    # failed allocation the executor has not recorded yet) are on their way, not room to ask for again.
    snapshot, failing = allocation.with_scale_ups_in_flight(ports, snapshot, now=now)
    # Groups in a SCHEDULED_CAPACITY window plan with the window's minimum.
    snapshot, windows = with_windows(settings, snapshot, now=now)
    # Offerings Azure refused lately, and what the quotas have left: groups blocked, increases capped.
    limits = offerings.planning_limits(ports, settings, snapshot.groups, now=now)
    unavailable = {**failing, **limits.blocked, **backed_off}
    snapshot = replace(snapshot, pods=keep_off_spot(snapshot.pods, settings.on_demand_pod_selector))
    options = replace(scale_up_options(settings, now=now), unavailable=unavailable,
                      reclaimable=reclaimable_nodes(states.values()), quota=limits.quota)
    if "priority" in settings.expander:
        options = replace(options, priorities=priority_rules(ports, settings))
    if "price" in settings.expander:
        # Only the price expander reads prices; the provider caches them for a day.
        snapshot = replace(snapshot, prices=ports.provider.list_prices(snapshot.groups))
    elif any(g.lane for g in snapshot.groups):
        # A multi-size set's lanes compete on price per unit of work whatever the expander (engine.multi_size).
        snapshot = replace(snapshot, prices=ports.provider.list_prices([g for g in snapshot.groups if g.lane]))
    snapshot = _spot_by_work(ports, settings, snapshot)
    # Pods on virtual nodes that are demand for VMs are planned with the pending pods, after them.
    virtual = virtual_nodes.plan_for(ports, settings, snapshot, now=now)
    # ProvisioningRequests come before every real pod: booked room and in-flight nodes are theirs, new atomic
    # scale-ups are decided (and their quota counted), and pods consuming a live request are not planned.
    requests = provisioning.read_requests(ports, settings, snapshot, now=now)
    decided = provisioning.plan_requests(ports, settings, virtual.snapshot, requests, options=options, now=now)
    options = replace(options, quota=decided.quota)
    # CapacityBuffers' placeholder pods are planned after every pod that really waits, so they never take its room.
    buffers = read_buffers(ports, now=now)
    options = replace(options, after=virtual.after | buffers.keys)
    planning = buffers.with_placeholders(decided.snapshot)
    simulation = simulate_scale_up(planning, options=options)
    plan = restore_targets(simulation.plan, decided.held)  # nodes held for requests are still the groups'
    load = plan_load_increases(ports, settings, snapshot, states, unavailable=unavailable, now=now)
    scheduled = plan_scheduled_increases(settings, snapshot, windows, unavailable=unavailable)
    plan = _with_increases(plan, (*load.increases, *scheduled))
    # The lanes of a multi-size set grow it together: never past the set's own max (engine.multi_size).
    plan = clip_increases(plan, snapshot.groups)
    # Demand by hour for the forecast (services.demand): a group's row is written when its hour's peak rises.
    forecasts = demand.note_and_forecast(ports.state, demand.demand_by_group(observed, snapshot.groups, plan), now=now)
    why_load = {i.group_id: i.why for i in load.increases}
    why_scheduled = {i.group_id: i.why for i in scheduled}
    enqueued = []
    planned_groups = {g.id: g for g in virtual.snapshot.groups}
    for increase in plan.increases:
        planned = planned_groups.get(increase.group_id)
        if planned is not None and planned.written_off:
            # Nodes written off (a spot VM under a Preempt notice) are still in the capacity the executor counts:
            # the target it is sent is in its terms, within the group's max (a replacement beyond max waits for
            # the VM to go).
            target = min(increase.new_target + planned.written_off, planned.max_size)
            if target <= planned.capacity - planned.stopped:
                continue
            increase = replace(increase, new_target=target,
                               current_target=increase.current_target + planned.written_off)
        # The poll time makes the id unique per decision; two polls deciding the same
        # increase are reconciled by the executor, which skips a group already at its target.
        action_id = scale_up_id(increase.group_id, increase.new_target, now=now)
        hidden = sum(1 for key in increase.pods if key in virtual.after)
        chunks = sum(1 for key in increase.pods if key in buffers.keys)
        reason = f"{len(increase.pods) - hidden - chunks} pending pod(s)" + (
            f", {hidden} on virtual nodes" if hidden else "") + (f", {chunks} capacity buffer chunk(s)" if chunks else "")
        if increase.group_id in why_load:
            reason = f"load: {why_load[increase.group_id]}" + (f"; {reason}" if increase.pods else "")
        if increase.group_id in why_scheduled:
            pods_or_load = increase.pods or increase.group_id in why_load
            reason = why_scheduled[increase.group_id] + (f"; {reason}" if pods_or_load else "")
        if planned is not None:
            # Until the executor asks Azure (and reads the quotas afresh), later polls count this decision as used.
            offerings.note_requested(ports, limits.quota, planned, increase.delta)
        ports.queue.send(
            new_scale_up(
                action_id=action_id,
                group=increase.group_id,
                target_size=increase.new_target,
                now=now,
                ttl=settings.action_ttl,
                reason=reason,
                **telemetry.trace_fields(),
            )
        )
        enqueued.append(action_id)
        log.info(
            "scale-up decided: group=%s %d -> %d for %s action=%s",
            increase.group_id, increase.current_target, increase.new_target, reason, action_id,
        )
    for node, pods in plan.reclaimed.items():
        _request_reclaim(ports, states, node, pods, now=now)
    enqueued += virtual_nodes.act(ports, settings, virtual, simulation, now=now)
    enqueued += provisioning.act(ports, settings, snapshot, requests, decided, limits.quota, now=now)
    for pod, reason in plan.unplaceable.items():
        log.info("pod %s fits no node group: %s", pod, reason)
    for event in real_pod_events(scale_up_events(planning, plan, now=now), plan, now=now):
        ports.events.emit(event)
    buffer_statuses = statuses(buffers, existing_placements(simulation), plan, now=now)
    write_statuses(ports, buffers, buffer_statuses, dry_run=settings.dry_run)
    result = PendingPollResult(pending=len(pending_pods(snapshot)), plan=plan, enqueued=tuple(enqueued),
                               observed=observed, virtual=virtual.plan, evictions=tuple(evictions), limits=limits,
                               failed_allocations=tuple(failed), windows=windows, buffers=buffer_statuses,
                               forecasts=forecasts, provisioning_requests=decided.lines)
    telemetry.record_offerings(Counter(mark.kind for mark in limits.marks), quota_capped=len(plan.quota_capped))
    telemetry.record_pending_poll(observed, states, unavailable, pending=result.pending, now=now,
                                  provision_time=settings.max_node_provision_time)
    publish_status(ports, settings, observed, status_inputs(
        # A group an unavailable offering blocks shows as backed off, with the mark's reason.
        settings, group_states=states, unneeded=None, backoff=unavailable,
        scale_up_needed=frozenset(i.group_id for i in plan.increases), unschedulable_pods=result.pending,
        virtual_nodes=status_of(virtual.plan, virtual.options) if virtual.plan.nodes else None,
        unavailable_offerings=tuple(describe(m) for m in limits.marks),
        spot_evictions={e.node: e.how for e in evictions}, capacity_buffers=status_lines(buffer_statuses),
        provisioning_requests=decided.lines,
    ), now=now)
    return result


def _spot_by_work(ports: Ports, settings: Settings, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Pending pods whose expected run time is over the spot limit planned off spot (engine.spot_work).

    Prices are read (the provider caches them) only when a spot group exists and a pending pod says something
    the rule reads, so clusters without spot or without the annotations pay nothing for it.
    """
    if not any(g.is_spot for g in snapshot.groups):
        return snapshot
    pending = [p for p in snapshot.pods if p.node_name is None and not p.is_finished
               and (EXPECTED_RUNTIME_ANNOTATION in p.annotations or SPOT_ANNOTATION in p.annotations)]
    if not pending:
        return snapshot
    rule = rule_of(settings.spot_max_runtime, eviction_rate=settings.spot_eviction_rate,
                   lost_work_cost=settings.spot_lost_work_cost)
    prices = snapshot.prices
    if rule.enabled and rule.max_runtime is None and not all(g.id in prices for g in snapshot.groups):
        prices = {**ports.provider.list_prices(snapshot.groups), **prices}
    decided = plan_spot_work(pending, rule, fraction=price_fraction(snapshot.groups, prices))
    telemetry.record_spot_by_work(kept_off=len(decided.kept_off), expected_loss_s=sum(
        expected_loss(runtime, eviction_rate=rule.eviction_rate).total_seconds()
        for p in pending if p.key not in decided.kept_off and (runtime := expected_runtime(p)) is not None))
    if not decided.kept_off:
        return snapshot
    changed = {p.key: p for p in decided.pods if p.key in decided.kept_off}
    for key, why in decided.kept_off.items():
        log.info("pod %s planned off spot: %s", key, why, extra={"pod": key, "off_spot_reason": why})
    return replace(snapshot, pods=tuple(changed.get(p.key, p) for p in snapshot.pods))


def _spot_ids(snapshot: ClusterSnapshot) -> frozenset[str]:
    return frozenset(g.id for g in snapshot.groups if g.is_spot)


def _with_increases(plan: ScaleUpPlan, increases: Sequence[LoadIncrease | ScheduledIncrease]) -> ScaleUpPlan:
    """The pending-pod plan with the load-driven and scheduled increases: per group, the largest target."""
    if not increases:
        return plan
    by_group = {i.group_id: i for i in plan.increases}
    for extra in increases:
        mine = by_group.get(extra.group_id)
        if mine is None:
            by_group[extra.group_id] = GroupIncrease(extra.group_id, extra.current_target, extra.new_target, ())
        elif extra.new_target > mine.new_target:
            by_group[extra.group_id] = replace(mine, new_target=extra.new_target)
    return replace(plan, increases=tuple(by_group[g] for g in sorted(by_group)))


def pending_placements(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], settings: Settings, *,
                       now: datetime, state: PlacementState | None = None,
                       after: frozenset[str] = frozenset()) -> dict[str, tuple[str, ...]]:
    """Existing node -> the pending pods this poll's scale-up simulation would place in its free room.

    The utilisation poll keeps exactly these nodes for pending pods: the same simulation with the
    same options (backoff, reclaimable nodes) as here, read-only (this poll records provision
    timeouts; a group not yet marked only changes which new nodes would be asked for, never
    which existing node a pod takes). The expander is left out: it picks among new nodes only.

    `state`: `initial_state(snapshot)`, when the caller plans scale-down on it too (the simulation
    leaves it as found). The planning views below change pending pods' flags and the groups, never a
    node or a bound pod, which are all the state holds.

    `after`: pending pods planned after the others (CapacityBuffers' placeholders, `services.buffers`).
    """
    plan = plan_virtual_nodes(snapshot, virtual_node_options(settings), now=now)
    if not pending_pods(snapshot) and not plan.demand:
        return {}
    # Room the virtual nodes' demand would move to is kept too (VM prices are not read here: a pod that
    # stays on ACI only because ACI is cheaper may keep a node one poll longer).
    extra_after = after
    snapshot, after = planning_snapshot(snapshot, plan)
    snapshot, backed_off = backoff_view(snapshot, states, now=now)
    options = replace(scale_up_options(settings, now=now), unavailable=backed_off,
                      reclaimable=reclaimable_nodes(states.values()), after=after | extra_after)
    return existing_placements(simulate_scale_up(snapshot, options=options, state=state))


def reclaimable_nodes(states: Iterable[GroupState]) -> frozenset[str]:
    """Nodes whose removal is in flight but not yet past the delete: pending pods may take them back."""
    return frozenset(node for state in states for node in state.removing if node not in state.committed)


def _request_reclaim(ports: Ports, states: Mapping[str, GroupState], node: str, pods: Sequence[str], *,
                     now: datetime) -> None:
    """Ask the executor to cancel the node's removal; loses gracefully to a delete that got there first.

    The group row is the arbiter: the executor marks a removal committed in it, with the same
    compare-and-swap, before it asks ARM to delete, so a reclaim and a delete never both win.
    """
    group_id = next((gid for gid, state in states.items() if node in state.removing), None)
    if group_id is None:
        return
    def ask(state: GroupState) -> tuple[GroupState | None, str]:
        if node not in state.removing or node in state.committed:
            return None, "late"
        if node in state.reclaim:
            return None, "asked"  # asked already; the executor acts on its next step
        return replace(state, reclaim={**state.reclaim, node: now}), "now"

    try:
        asked = swap_group(ports.state, group_id, ask, what=f"take back node {node}")
    except StateConflict as exc:
        log.warning("%s; will ask again next poll", exc)
        return
    if asked == "late":
        log.info("node %s: too late to take back, its delete is under way; pods wait for new capacity", node)
    elif asked == "now":
        log.info("node %s: removal to be cancelled, %d pending pod(s) can use it: %s", node, len(pods), ", ".join(pods[:3]))


def _measure_boots(ports: Ports, snapshot: ClusterSnapshot, states: dict[str, GroupState], settings: Settings, *,
                   now: datetime) -> None:
    """Record how long the groups' new Ready nodes took from their scale-up (engine.idle.measure_boots), and
    their started instances from their start (engine.idle.measure_starts).

    Written only for a group with a scale-up waiting for nodes, and only when a node answered it or
    it expired: most polls write nothing. Every idle mode measures, so switching to break-even
    starts from the boots measured so far.
    """
    ready: dict[str, dict[str, datetime]] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None and node.ready:
            ready.setdefault(ref.group_id, {})[ref.instance_id] = node.created_at
    give_up = settings.max_node_provision_time
    holds = gpu_boot_holds(settings, snapshot, now=now)  # GPU groups: measured to when their nodes became usable

    def measured(state: GroupState) -> GroupState:
        nodes = ready.get(state.group_id, {})
        # A started instance's fresh node is a start, not a boot: left out of the boots.
        starting = starting_instances(state)
        hold = holds.get(state.group_id)
        booted = measure_boots(state, [at for i, at in nodes.items() if i not in starting], now=now, give_up=give_up,
                               not_yet=hold.not_yet if hold else (), usable_at=hold.usable_at if hold else None)
        return measure_starts(booted, nodes, now=now, give_up=give_up)

    for group in snapshot.groups:
        state = states[group.id]
        if not (state.boot_requests or state.start_requests) or measured(state) == state:
            continue

        def measure(fresh: GroupState) -> tuple[GroupState | None, GroupState]:
            # Against the row as it is now: the executor may have noted another request meanwhile.
            after = measured(fresh)
            return (None if after == fresh else after), after

        try:
            states[group.id] = swap_group(ports.state, group.id, measure, what="record boot times")
        except StateConflict as exc:
            log.warning("%s; the next poll measures them", exc)


def _apply_backoff(ports: Ports, snapshot: ClusterSnapshot, states: dict[str, GroupState], settings: Settings, *,
                   now: datetime) -> tuple[ClusterSnapshot, dict[str, str]]:
    """Record the groups whose scale-up timed out (the engine's `provision_timed_out`: a backoff), then the
    groups in backoff (with why) and the snapshot as the planner should see it (`backoff_view`)."""
    present = present_by_group(snapshot.nodes)
    for group in snapshot.groups:
        state = states[group.id]
        there = present.get(group.id, 0)
        if provision_timed_out(group, state, present=there, now=now,
                               max_node_provision_time=settings.max_node_provision_time):
            log.warning("group %s: %d node(s) not Ready %s after the scale-up: backing off", group.id,
                        group.running_target - there, settings.max_node_provision_time)
            def back_off(fresh: GroupState, group: NodeGroup = group, there: int = there) -> tuple[GroupState | None, GroupState]:
                # Against the row as it is now: another poll may have recorded it meanwhile.
                if not provision_timed_out(group, fresh, present=there, now=now,
                                           max_node_provision_time=settings.max_node_provision_time):
                    return None, fresh
                failed = after_failure(fresh, now=now, code="ProvisionTimeout")
                return failed, failed

            try:
                states[group.id] = swap_group(ports.state, group.id, back_off, what="record a provision timeout")
            except StateConflict as exc:
                log.warning("%s; the next poll records it", exc)
                continue
            if states[group.id].backoff_reason == "ProvisionTimeout" and states[group.id].last_failure == now:
                telemetry.provision_timeout(group.id, present=there, target=group.running_target, now=now)
    snapshot, backed_off = backoff_view(snapshot, states, now=now)
    for group_id, reason in backed_off.items():
        log.info("group %s: %s", group_id, reason)
    return snapshot, backed_off
