"""Refilling a group's warm standby: when the utilisation poll enqueues a RefillStandby, and how many instances
the executor may still add when it runs (the action's steps are `standby_steps`).

A group's standby is its stopped instances (GroupState.stopped). A refill lists the instances it creates there
from its grow step on, so that no planner counts them as capacity for pods or for the group's minimum while they
boot, and the shortfall counts them at once. A refill in flight is seen (one per group) by the room its grow step
reserves under the cluster-wide limits (`limit_reservations`, keyed by its id, `refill-standby:...`) and by the
nodes it holds reserved in the group row: one reservation row per poll, no ledger scan.

The poll enqueues one refill for a group when all of these hold:
- its standby is below its target (engine.standby: the setting STANDBY_INSTANCES or the tag
  `autoscaler-standby`), less the idle nodes scale-down may still take from it (they are deallocated into
  the standby rather than deleted, so creating instances for them would pay twice);
- no refill is in flight for it (one at a time per group);
- it is not served by a VMSS Standby Pool (services.standby_pools: the pool is its standby);
- with STANDBY_REFILL_WAITS_FOR_IDLE, it has been quiet since its last scale-up for as long as scale-down needs
  to take a node that went idle at once into the standby (`quiet_until`: the group's delay after a scale-up
  plus its unneeded time with standby room, engine.scale_down.group_rules). A burst's own nodes may go idle
  soon after it and be deallocated into the standby for free; instances created meanwhile are paid twice (a
  boot's compute, then the burst's nodes deleted for want of room). After that, nodes still busy are not waited
  for. A refill's grow step sets `last_scale_up` too, so a refill capped below the shortfall is followed by the
  next after as long. Off by default: on the replayed traces the wait saved little and cost hits for the waves
  that follow (docs/standby.md has the figures). Idle nodes are taken off the shortfall either way;
- it has no pending demand: no scale-up in flight (a live limits reservation of another action), and no
  pending pod this poll's scale-up simulation places on it;
- quotas and offering marks leave room for it (`offerings.planning_limits`); the cluster-wide limits are
  checked by the executor, which reserves the room before it writes any capacity.

Nothing in the message is trusted that state can tell: the executor recomputes the shortfall
(`refill_shortfall`) from a fresh instance list, and the message's count is only an upper bound.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from shared import telemetry
from shared.actions import MAX_NODES_PER_ACTION, new_refill_standby
from shared.domain import ClusterSnapshot, GroupState, LimitReservations, NodeGroup
from shared.engine.placement import PlacementState
from shared.engine.quota import capped_target
from shared.engine.scale_down import group_rules
from shared.engine.scale_up import pending_pods, simulate_scale_up
from shared.engine.standby import StandbyTarget, StandbyView, refill_count, standby_view
from shared.engine.virtual_nodes import plan_virtual_nodes, planning_snapshot
from shared.options import scale_down_options, scale_up_options, virtual_node_options
from shared.engine.backoff import backoff_view
from shared.ports import Ports
from shared.services import offerings
from shared.services.pending import reclaimable_nodes
from shared.services.standby import REFILL_PREFIX, get_standby_target, may_keep_standby
from shared.services.standby_pools import pooled_group_ids
from shared.settings import Settings

log = logging.getLogger(__name__)


def group_target(ports: Ports, settings: Settings, group: NodeGroup, state: GroupState, *,
                 now: datetime) -> StandbyTarget:
    """The group's standby target (services.standby: forecast, estimates, prices, windows); ValueError on a
    malformed tag."""
    return get_standby_target(ports, settings, group, state=state, now=now)


def refill_in_flight(row: LimitReservations, state: GroupState, *, now: datetime, other_than: str = "") -> bool:
    """Whether a refill of the group (but `other_than`) is in flight: its grow step holds room under the limits,
    or its registered nodes are reserved in the group row. A gate only (one refill at a time per group): what
    a refill creates is listed in GroupState.stopped from its grow step on, so the shortfall counts it anyway."""
    if any(key.startswith(REFILL_PREFIX) and key != other_than and r.group_id == state.group_id and r.live(now)
           for key, r in row.reservations.items()):
        return True
    return any(holder.startswith(REFILL_PREFIX) and holder != other_than for holder in state.removing.values())


def scale_up_in_flight(row: LimitReservations, group_id: str, *, now: datetime) -> bool:
    """Whether a scale-up of the group holds room under the limits (from its check until its outcome)."""
    return any(not key.startswith(REFILL_PREFIX) and r.group_id == group_id and r.live(now)
               for key, r in row.reservations.items())


def refill_shortfall(ports: Ports, settings: Settings, group: NodeGroup, state: GroupState, *, now: datetime,
                     action_id: str) -> tuple[int, str]:
    """How many instances the refill `action_id` may add now, and why (the executor's check, from a fresh
    instance list): the target less the listed stopped instances that exist, within the group's max."""
    try:
        target = group_target(ports, settings, group, state, now=now)
    except ValueError as exc:
        return 0, str(exc)
    row = ports.state.get_limit_reservations()
    if scale_up_in_flight(row, group.id, now=now):
        return 0, "a scale-up of the group is in flight"
    if refill_in_flight(row, state, now=now, other_than=action_id):
        return 0, "another refill of the group is in flight"
    present = {i.instance_id for i in ports.provider.list_instances(group) if not i.deleting}
    view = standby_view(state, present)
    count = refill_count(target, view, replace(group, stopped=view.count))
    return count, f"target {target.count} ({target.why}), {view.count} stopped"


def quiet_until(settings: Settings, group: NodeGroup, state: GroupState) -> datetime | None:
    """When a refill may next create instances for the group: its last scale-up plus the time scale-down needs
    to take a node idle since then into the standby (its delay after a scale-up and its unneeded time, the
    latter a start's worth in break-even mode as the group's standby has room); None: not held back (never
    without STANDBY_REFILL_WAITS_FOR_IDLE). ValueError on a malformed scale-down tag (the poll reports it)."""
    if not settings.standby_refill_waits_for_idle or state.last_scale_up is None:
        return None
    options = replace(scale_down_options(settings), standby_room=frozenset({group.id}))
    rules = group_rules(group, options, state)
    return state.last_scale_up + max(rules.after_add, timedelta(0)) + rules.wait(unready=False)


def plan_refills(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: Mapping[str, GroupState], *,
                 unneeded: Collection[str], now: datetime, state: PlacementState | None = None,
                 pooled: Collection[str] | None = None,
                 targets: Mapping[str, StandbyTarget] | None = None) -> tuple[str, ...]:
    """Enqueue one RefillStandby for each group whose standby is short and that has no pending demand (see the
    module docstring); the ids of those enqueued. `pooled`: the groups served by a Standby Pool (None: looked
    up through the cached pool list); `targets`: the poll's standby targets (None: computed here)."""
    candidates: list[tuple[NodeGroup, StandbyTarget]] = []
    keeping = [g for g in snapshot.groups if g.id in states and may_keep_standby(settings, g)]
    if keeping and pooled is None:
        pooled = pooled_group_ids(ports, keeping)
    for group in keeping:  # no read at all for a group that keeps no standby or whose row is unreadable
        if group.id in (pooled or ()):
            continue  # its Standby Pool is its standby (services.standby_pools)
        try:
            target = (targets[group.id] if targets is not None and group.id in targets
                      else group_target(ports, settings, group, states[group.id], now=now))
        except ValueError as exc:
            log.warning("standby not refilled: %s", exc)
            continue
        if target.count:
            candidates.append((group, target))
    if not candidates:
        return ()  # the usual case: no group keeps a standby
    row = ports.state.get_limit_reservations()
    demand = _demand_groups(snapshot, states, settings, now=now, state=state)
    idle = _idle_by_group(snapshot, unneeded)
    limits = offerings.planning_limits(ports, settings, [g for g, _ in candidates], now=now)
    enqueued = []
    for group, target in candidates:
        gstate = states[group.id]
        why = _blocked(row, group, gstate, demand, limits.blocked, now=now)
        if why is None:
            why = _not_quiet(settings, group, gstate, now=now)
        if why is not None:
            log.debug("standby of %s not refilled: %s", group.id, why)
            continue
        view = StandbyView(stopped=tuple(sorted(gstate.stopped)))
        # Idle nodes beyond the minimum go to the standby when scale-down takes them (deallocated, not deleted).
        takeable = min(idle.get(group.id, 0), max(group.running_target - group.min_size, 0))
        count = min(refill_count(target, view, group) - takeable, MAX_NODES_PER_ACTION)
        if count <= 0:
            continue
        allowed, quota_why = capped_target(group, group.capacity + count, limits.quota)
        count = min(count, allowed - group.capacity)
        if count <= 0:
            log.info("standby of %s not refilled: quota: %s", group.id, quota_why)
            continue
        action = new_refill_standby(group=group.id, count=count, now=now, ttl=settings.action_ttl,
                                    reason=f"standby {view.count} of {target.count} ({target.why})",
                                    **telemetry.trace_fields())
        ports.queue.send(action)
        enqueued.append(action.id)
        log.info("standby refill decided: group=%s adds up to %d (stopped %d, target %d: %s) action=%s",
                 group.id, count, view.count, target.count, target.why, action.id)
    return tuple(enqueued)


def _blocked(row: LimitReservations, group: NodeGroup, state: GroupState, demand: Collection[str],
             blocked: Mapping[str, str], *, now: datetime) -> str | None:
    if refill_in_flight(row, state, now=now):
        return "a refill is in flight"
    if scale_up_in_flight(row, group.id, now=now):
        return "a scale-up is in flight"
    if group.id in demand:
        return "pending pods are planned onto it"
    if group.id in blocked:
        return blocked[group.id]
    return None


def _not_quiet(settings: Settings, group: NodeGroup, state: GroupState, *, now: datetime) -> str | None:
    try:
        until = quiet_until(settings, group, state)
    except ValueError as exc:
        return str(exc)
    if until is not None and now < until:
        return f"its last scale-up's nodes may still go idle into it (quiet until {until.isoformat()})"
    return None


def _idle_by_group(snapshot: ClusterSnapshot, unneeded: Collection[str]) -> dict[str, int]:
    idle: dict[str, int] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None and node.name in unneeded and not node.is_being_deleted:
            idle[ref.group_id] = idle.get(ref.group_id, 0) + 1
    return idle


def _demand_groups(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], settings: Settings, *,
                   now: datetime, state: PlacementState | None) -> frozenset[str]:
    """Groups this poll's scale-up simulation places pending pods on (their nodes on the way, or new ones): the
    same simulation as the pending poll's, read-only. Nothing pending: none, and no simulation is run."""
    if not pending_pods(snapshot):
        return frozenset()
    plan = plan_virtual_nodes(snapshot, virtual_node_options(settings), now=now)
    view, after = planning_snapshot(snapshot, plan)
    view, backed_off = backoff_view(view, states, now=now)
    options = replace(scale_up_options(settings, now=now), unavailable=backed_off,
                      reclaimable=reclaimable_nodes(states.values()), after=after)
    simulation = simulate_scale_up(view, options=options, state=state)
    groups = {step.group_id for step in simulation.steps if step.pod is not None and step.group_id}
    groups |= {increase.group_id for increase in simulation.plan.increases}
    return frozenset(groups)


