"""Asynchronous allocation failures, seen by the pending poll: instances a successful capacity increase left Failed.

Azure can accept a capacity increase, succeed its long-running operation, and leave some of the new instances in
provisioning state Failed (`ZonalAllocationFailed`, `AllocationFailed`, `SkuNotAvailable` on spot, ...): they will
never become nodes, yet they bill and hold quota. cluster-autoscaler waits MAX_NODE_PROVISION_TIME for them unless
an opt-in flag is set. Here each pending poll lists the instances of the groups with a scale-up of ours on its way
(one list per such group; none while no group is growing) and, for each Failed instance that never became a node
(engine.offerings.failed_allocations):

- deletes it (one delete per group and poll; a refused delete is tried again by the next poll);
- marks its offering unavailable exactly as a synchronous refusal with the same code does (services.offerings), or
  backs the group off when the code is not about an offering;
- reports it as cluster-autoscaler does: a Warning `ScaleUpFailed` event on the status ConfigMap, "Failed adding N
  nodes to group G due to OutOfResource.<code>; source errors: ...";
- and returns the snapshot with those instances written off, so the same poll plans their pods onto the next group.

The error code comes from the instance view (`ProvisioningState/failed/<code>`), read by the provider only for the
instances the list shows Failed.

A failure can also take the capacity back: ARM reverts a scale set's capacity when its increase fails, some seconds
before the executor's confirm step reads the failure, records it and marks the offering. A poll in between would see
the group at its old size with its pods still pending, and ask for the same nodes again, to be refused again.
`with_scale_ups_in_flight` counts the nodes of every scale-up action without an outcome yet as on their way while the
capacity does not show them (engine.node_counts.with_scale_ups_in_flight), and plans no more nodes onto a group whose
accepted increase ARM took back; the executor's record (the offering marked, or the group backed off) then re-plans
the pods at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from shared.domain import ClusterSnapshot, GroupState, Instance, LimitReservation, NodeGroup
from shared.engine import node_counts
from shared.engine.backoff import after_failure
from shared.engine.node_counts import present_by_group
from shared.engine.offerings import FailedAllocation, failed_allocations, growing, without_failed
from shared.ports import ComputeError, LedgerEntry, Ports, UnreadableRow
from shared.services import offerings
from shared.services.events import status_event
from shared.services.swap import StateConflict, swap_group
from shared.settings import Settings

log = logging.getLogger(__name__)

# cluster-autoscaler's event reason for instances that failed after the scale-up was accepted (clusterstate).
SCALE_UP_FAILED = "ScaleUpFailed"


def list_growing(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: Mapping[str, GroupState], *,
                 now: datetime) -> dict[str, Sequence[Instance]]:
    """The instances of each group with nodes of ours on their way, by group id (spot groups with their power
    state, so the spot eviction check reuses the list). Instances mapping listed already are reused."""
    present = present_by_group(snapshot.nodes)
    listed: dict[str, Sequence[Instance]] = {}
    for group in snapshot.groups:
        state = states.get(group.id)
        if state is None or not growing(group, state, present=present.get(group.id, 0), now=now,
                                        provision_time=settings.max_node_provision_time):
            continue
        if group.instances and not group.is_spot:
            listed[group.id] = group.instances
            continue
        try:
            listed[group.id] = ports.provider.list_instances(group, power_state=group.is_spot)
        except ComputeError as exc:
            log.warning("instances of growing group %s could not be listed (%s): failed allocations are looked "
                        "for next poll", group.id, exc)
    return listed


def find_and_handle(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: dict[str, GroupState],
                    listed: Mapping[str, Sequence[Instance]], *,
                    now: datetime) -> tuple[ClusterSnapshot, list[FailedAllocation]]:
    """The failed allocations among `listed`, acted on (see the module docstring); the snapshot to plan with."""
    with_node: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None:
            with_node.setdefault(ref.group_id, set()).add(ref.instance_id.lower())
    groups = {g.id: g for g in snapshot.groups}
    failures: list[FailedAllocation] = []
    for group_id, instances in listed.items():
        group = groups.get(group_id)
        if group is not None:
            failures += failed_allocations(group, instances, with_node=with_node.get(group_id, set()))
    for failure in failures:
        _handle(ports, settings, groups[failure.group_id], failure, states, now=now)
    if not failures:
        return snapshot, []
    planning = tuple(without_failed(g, failures) for g in snapshot.groups)
    return replace(snapshot, groups=planning), failures


def _handle(ports: Ports, settings: Settings, group: NodeGroup, failure: FailedAllocation,
            states: dict[str, GroupState], *, now: datetime) -> None:
    count = len(failure.instance_ids)
    ids = ", ".join(failure.instance_ids)
    if settings.dry_run:
        log.info("dry run: %d instance(s) of %s left Failed (%s): %s; would delete them and mark the offering",
                 count, group.id, failure.code, ids)
        return
    try:
        ports.provider.begin_delete_instances(group, list(failure.instance_ids))
    except ComputeError as exc:
        log.warning("instance(s) %s of %s, left Failed (%s), could not be deleted: %s; the next poll tries again",
                    ids, group.id, failure.code, exc)
    state = states.get(group.id)
    if state is not None and _recorded(state, failure):
        # This scale-up's failure with this code is recorded (an earlier poll, other instances): not twice.
        log.info("instance(s) %s of %s left Failed (%s) too: deleted; recorded already", ids, group.id, failure.code)
        return
    classified = offerings.record_refusal(ports, settings, group, code=failure.code, message=failure.message, now=now)

    def record(fresh: GroupState) -> tuple[GroupState | None, GroupState]:
        if _recorded(fresh, failure):
            return None, fresh
        if classified.kind:
            # The offering is marked: every group of it is skipped while the mark lives; no backoff, as for a refusal.
            changed = replace(fresh, last_failure=now, backoff_reason=failure.code)
        else:
            changed = after_failure(fresh, now=now, code=failure.code)
        return changed, changed

    try:
        states[group.id] = swap_group(ports.state, group.id, record, what="record a failed allocation")
    except StateConflict as exc:
        log.warning("%s; the next poll records it", exc)
    log.warning("Failed adding %d nodes to group %s due to %s; instance(s) %s deleted; source errors: %s",
                count, group.id, failure.reason, ids, failure.message or "(none given)")
    event = status_event(settings, SCALE_UP_FAILED,
                         f"Failed adding {count} nodes to group {group.id} due to {failure.reason}; source errors: "
                         f"{failure.message or failure.code}", now=now, type="Warning")
    if event is not None:
        ports.events.emit(event)


def _recorded(state: GroupState, failure: FailedAllocation) -> bool:
    """Whether this scale-up's failure with this code is in the group's state already."""
    return (state.backoff_reason == failure.code and state.last_failure is not None
            and state.last_scale_up is not None and state.last_failure >= state.last_scale_up)


def with_scale_ups_in_flight(ports: Ports, snapshot: ClusterSnapshot, *,
                             now: datetime) -> tuple[ClusterSnapshot, dict[str, str]]:
    """The snapshot to plan with, the nodes of scale-ups in flight that their group's capacity does not show counted
    as on their way; and the groups whose scale-up is failing (ARM took back an increase it had accepted), with why:
    no more nodes are planned onto those until the executor records the outcome (see the module docstring).

    In flight: a live reservation on the limits row (taken before the capacity write, given back when the action
    records its outcome) whose action's ledger row has no outcome. Failing: its ledger row holds the operation the
    capacity write started, yet the capacity is back below it. A write not made yet (no operation recorded) blocks
    nothing: a healthy group grows on. One read of the limits row per poll; a ledger row is read only for a
    reservation whose group's capacity shows none of it.
    """
    try:
        row = ports.state.get_limit_reservations()
    except UnreadableRow as exc:
        log.error("%s; scale-ups in flight are not counted by this poll", exc)
        return snapshot, {}
    live = [r for r in row.reservations.values() if r.live(now)]
    hidden = _raised(snapshot.groups, node_counts.with_scale_ups_in_flight(snapshot.groups, live, now=now))
    if not hidden:
        return snapshot, {}
    going: list[LimitReservation] = []
    failing: dict[str, str] = {}
    for reservation in live:
        if reservation.group_id not in hidden:
            going.append(reservation)
            continue
        entry, readable = _ledger_entry(ports, reservation)
        if readable and (entry is None or entry.outcome):
            continue  # ended: its reservation is given back or lapses
        going.append(reservation)
        if entry is not None and entry.operation:
            failing[reservation.group_id] = (f"its scale-up {reservation.action_id} to {reservation.target} was taken "
                                             "back by Azure (capacity below it); waiting for the action's outcome")
    planned = node_counts.with_scale_ups_in_flight(snapshot.groups, going, now=now)
    for group_id, count in _raised(snapshot.groups, planned).items():
        log.info("group %s: %d node(s) of a scale-up in flight are not in its capacity (%s): counted as on their way "
                 "until the action records its outcome", group_id, count,
                 failing.get(group_id, "its capacity write is not made yet"))
    return replace(snapshot, groups=planned), failing


def _raised(before: Sequence[NodeGroup], after: Sequence[NodeGroup]) -> dict[str, int]:
    """Group id -> nodes of scale-ups in flight counted in, for the groups whose capacity was raised."""
    return {b.id: a.capacity - b.capacity for b, a in zip(before, after, strict=True) if a.capacity != b.capacity}


def _ledger_entry(ports: Ports, reservation: LimitReservation) -> tuple[LedgerEntry | None, bool]:
    """The reservation's action's ledger row, and whether it could be read (an unreadable row counts as an action
    still going: its reservation lapses by itself)."""
    try:
        # An atomic scale-up's later parts are keyed `<action id>#<group>` (services.atomic_steps._reservation).
        return ports.state.get_ledger_entry(reservation.action_id.partition("#")[0]), True
    except UnreadableRow as exc:
        log.warning("%s; its reservation counts until it lapses", exc)
        return None, False
