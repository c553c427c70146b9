"""The scale-up action's steps: `resize` grows one group (starting deallocated instances first), `confirm`
follows the ARM operation until the capacity is there or the attempt failed.

The resize reserves its room under the cluster-wide limits before it writes any capacity, and the room is
given back when the action records its outcome (`limit_reservations`).

resize ──> confirm ──> (succeeded | failed: capacity asked for given back, then
                         refused for capacity or quota: the offering marked unavailable, and the pending pods
                                                        re-planned at once onto the next group (the same poll);
                         any other failure: the group backed off)
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from shared.actions import ScaleUp
from shared.domain import NodeGroup, instance_order
from shared.engine.backoff import ALLOCATION_FAILURES, after_failure
from shared.engine.idle import note_boot_request, note_start_request
from shared.engine.quota import capped_target
from shared.ports import CHANGED_SINCE_READ, ComputeError, LedgerEntry, Operation
from shared.services.execution import ExecutionResult, Run, Step, StepTable, throttled_delay, untag
from shared.services import limit_reservations, offerings, standby
from shared.services.hibernation import uncordon_resumed
from shared.services.pending import run_pending_poll
from shared.services.swap import StateConflict

log = logging.getLogger(__name__)

# Reads and If-Match PATCHes of one resize before the step is left to run again later: each refusal means another
# writer changed the group in the round trip between our read and our PATCH.
RESIZE_ATTEMPTS = 3


def resize(run: Run[ScaleUp], action: ScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True,
                          entry=entry)
    target = action.target_size
    if not group.min_size <= target <= group.max_size:
        return run.reject(
            action, f"target size {target} is outside the group's limits {group.min_size}..{group.max_size}",
            now=now, poison=True, entry=entry,
        )
    state = run.ports.state.get_group(group.id)
    running = group.capacity - len(state.stopped)  # deallocated instances are capacity, not nodes
    if running >= target:
        return run.finish(action, entry, "skipped", f"group already at {running} >= {target}", now=now,
                          old_size=running)
    limits = offerings.planning_limits(run.ports, run.settings, [group], now=now, fresh=True)
    if group.id in limits.blocked:
        return run.finish(action, entry, "skipped", f"{limits.blocked[group.id]}: {group.id} stays at {running}",
                          now=now, old_size=running)
    # Quotas, again at execution: what other groups took since the poll decided is no longer there.
    allowed, why = capped_target(replace(group, capacity=running), target, limits.quota)
    limit = f"quota: {why}" if allowed < target else None
    if allowed <= running:
        return run.finish(action, entry, "skipped", f"{limit} at execution: {group.id} stays at {running}",
                          now=now, old_size=running)
    # The cluster-wide limits, again at execution, with the room reserved for this action before any capacity
    # is written: the other scale-ups in flight count with what exists (limit_reservations).
    try:
        within, reason = limit_reservations.reserve(run.ports, run.settings, action_id=action.id, group=group,
                                                    target=allowed, now=now, write=not run.settings.dry_run)
    except StateConflict as exc:
        delay = throttled_delay(None, run.settings.step_retry_delay, attempt=action.attempt)
        return run.continue_(action.retried(), entry, delay=delay, now=now, detail=f"limits row contended: {exc}")
    if within < allowed:
        allowed, limit = within, reason
    if allowed <= running:
        return run.finish(action, entry, "skipped", f"{limit} at execution: {group.id} stays at {running}",
                          now=now, old_size=running)
    if allowed < target:
        log.info("scale-up of %s shrunk at execution: %d instead of %d (%s)", group.id, allowed, target, limit)
        target = allowed
        action = replace(action, target_size=target)
    need = target - running
    start = sorted(state.stopped, key=instance_order)[:need]
    grow = need - len(start)
    if run.settings.dry_run:
        return run.finish(action, entry, "dry-run", f"would grow {group.id} {running} -> {target} "
                          f"(starting {len(start)} deallocated instance(s))", now=now, old_size=running)
    log.info("growing %s %d -> %d: starting %d deallocated instance(s), adding %d (action %s)",
             group.id, running, target, len(start), grow, action.id)
    standby.note_standby_used(run.ports, run.settings, group, started=len(start), created=grow, now=now)
    run.status_event("ScaledUpGroup", f"Scale-up: setting group {group.id} size to {target} instead of "
                     f"{running} (max: {group.max_size})", now=now)
    action = replace(action, from_size=group.capacity, resized_to=group.capacity + grow if grow else None,
                     starting=tuple(start))
    # Recorded before the ARM calls: a crash after them leaves a redelivery that finds the group at its
    # target and skips, and the scale-down delay and the provision timeout must still count from now.
    # The new instances (`grow`) are noted for the boot measurement (engine.idle), the started ones for the start's.
    run.update_group(group.id, lambda s: note_start_request(
        note_boot_request(replace(s, last_scale_up=now), grow, now=now), start, now=now))
    operation, kind = None, "resize"
    if start:
        # Starting is idempotent: a crash before the state update below repeats it harmlessly.
        operation, kind = run.ports.provider.begin_start_instances(group, start), "start"
        # A hibernated instance kept its Node, cordoned: uncordoned now, before the state update, so a redelivery
        # after a crash does it again (services.hibernation.uncordon_resumed says why not once it is Ready).
        uncordon_resumed(run.ports.cluster, run.ports.provider, group, start, node_mapping=run.settings.node_mapping)
        run.update_group(group.id, lambda s: replace(s, stopped=s.stopped - set(start)))
    if grow:
        reached = group.capacity + grow
        try:
            resized = _resize_unless_reached(run, group, reached)
        except ComputeError as exc:
            if exc.code not in ALLOCATION_FAILURES:
                raise
            # ARM refused at once (quota, SKU, policy): the same outcome as a failed operation.
            operation = Operation(token="", status="Failed", error_code=exc.code, error_message=str(exc))
        else:
            if resized is None:  # another action got the group there meanwhile: nothing to add
                action = replace(action, resized_to=None)
                if operation is None:
                    return run.finish(action, entry, "skipped", f"{group.id} reached {reached} meanwhile", now=now,
                                      old_size=running)
            else:
                operation, kind = resized, "resize"
                offerings.note_requested(run.ports, limits.quota, group, grow if group.is_spot else need)
    assert operation is not None
    # With both, the capacity PATCH is followed; instances that fail to start show up as nodes that
    # never become Ready, which MAX_NODE_PROVISION_TIME turns into a backoff.
    return run.follow(action, entry, operation, next_step="confirm", now=now, kind=kind)


def _resize_unless_reached(run: Run[ScaleUp], group: NodeGroup, capacity: int) -> Operation | None:
    """The group resized to `capacity` from a fresh read, with If-Match on that read; None when the group is at
    `capacity` or more already.

    The queue runs actions side by side, and this step reads the group, then observes the cluster and the
    quotas before it resizes: another scale-up of the same group can PATCH in between. A capacity computed
    from the older read may then be lower than the group's, and lowering a scale set's capacity removes
    instances Azure picks, running pods and all (seen in the quota-fallback demo under load: two instances
    of pool-f8 created and gone without a delete). So the group is read again just before the PATCH, and
    the PATCH carries that read's etag: a change in the round trip between them is refused by ARM
    (CHANGED_SINCE_READ), and the group is read again, up to RESIZE_ATTEMPTS times; then the step is retried
    later as after a passing fault.
    """
    for attempt in range(1, RESIZE_ATTEMPTS + 1):
        fresh = run.ports.provider.get_node_group(group.id) or group
        if fresh.capacity >= capacity:
            log.info("%s is at %d since it was read, not below %d: no resize", group.id, fresh.capacity, capacity)
            return None
        if fresh.capacity > group.capacity:
            log.info("%s grew to %d since it was read; growing on to %d", group.id, fresh.capacity, capacity)
        try:
            return run.ports.provider.begin_resize(fresh, capacity)
        except ComputeError as exc:
            if exc.code != CHANGED_SINCE_READ:
                raise
            if attempt == RESIZE_ATTEMPTS:
                raise ComputeError(f"{group.id} changed between each of {RESIZE_ATTEMPTS} reads and its resize: {exc}",
                                   code=CHANGED_SINCE_READ, transient=True) from exc
            log.info("%s changed between its read and the resize to %d; reading it again", group.id, capacity)
    raise AssertionError("unreachable")


def confirm(run: Run[ScaleUp], action: ScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    kind, token = untag(entry.operation, default="resize")
    provider = run.ports.provider
    check = provider.get_start_operation if kind == "start" else provider.get_resize_operation
    return run.follow(action, entry, check(token), next_step="confirm", now=now, kind=kind)


def succeeded(run: Run[ScaleUp], action: ScaleUp, entry: LedgerEntry, kind: str, now: datetime) -> ExecutionResult:
    return run.finish(action, entry, "succeeded", f"{action.group} at {action.target_size}", now=now)


def failed(run: Run[ScaleUp], action: ScaleUp, entry: LedgerEntry, detail: str, code: str, kind: str,
           now: datetime) -> ExecutionResult:
    starting = set(action.starting) if kind == "start" else set()
    group = run.ports.provider.get_node_group(action.group)
    classified = offerings.record_refusal(run.ports, run.settings, group, code=code, message=detail, now=now) \
        if group is not None else None
    if classified is not None and classified.kind:
        # The offering is marked: every group of it is skipped while the mark lives, this one included; no backoff.
        run.update_group(action.group, lambda s: replace(s, last_failure=now, backoff_reason=code,
                                                          stopped=s.stopped | starting))
    else:
        # Instances that did not start are deallocated still: they go back on the group's list.
        run.update_group(action.group, lambda s: replace(after_failure(s, now=now, code=code),
                                                          stopped=s.stopped | starting))
    _return_capacity(run, action)
    log.warning("scale-up of %s failed (%s): pods go to the next best group now", action.group, code)
    run.status_event("FailedToScaleUpGroup", f"Scale-up failed for group {action.group}: {detail}", now=now,
                     type="Warning")
    result = run.finish(action, entry, "failed", detail, now=now, error_code=code)
    _replan(run, now=now)  # the group is marked or backed off now: its pods go elsewhere
    return result


def _replan(run: Run[ScaleUp], *, now: datetime) -> None:
    """The fallback within the same poll: plan the pending pods again now, with the refused group (or its
    offering) unavailable, rather than at the next scheduled poll."""
    if run.settings.dry_run:
        return
    try:
        result = run_pending_poll(run.ports, run.settings, now=now)
    except Exception:  # noqa: BLE001 - the scheduled poll plans them anyway; never fail the finished step
        log.exception("re-planning after the failed scale-up failed; the next pending poll plans the pods")
        return
    log.info("re-planned after the failed scale-up: %d action(s) enqueued", len(result.enqueued))


def _return_capacity(run: Run[ScaleUp], action: ScaleUp) -> None:
    """Give back capacity a failed scale-up asked for, unless someone has changed the target since."""
    if action.from_size is None:
        return
    group = run.ports.provider.get_node_group(action.group)
    asked = action.resized_to if action.resized_to is not None else action.target_size
    if action.resized_to is None and action.starting:
        return  # only started instances: no capacity was added
    if group is not None and group.capacity == asked and action.from_size < group.capacity:
        log.info("returning %s to %d after the failed scale-up", group.id, action.from_size)
        try:
            run.ports.provider.begin_resize(group, action.from_size)  # If-Match on the read just above
        except ComputeError as exc:
            if exc.code != CHANGED_SINCE_READ:
                raise
            # Someone changed the group since that read: lowering it now could remove their instances.
            log.info("%s changed since it was read; its capacity is left as it is: %s", group.id, exc)


def fail(run: Run[ScaleUp], action: ScaleUp, entry: LedgerEntry, why: str, code: str, now: datetime) -> ExecutionResult:
    """End the scale-up as failed from outside its steps: back the group off, record why.

    No capacity is returned: the resize may well have gone through; nodes that never come are caught
    by MAX_NODE_PROVISION_TIME, never by scaling in arbitrary instances.
    """
    run.update_group(action.group, lambda s: after_failure(s, now=now, code=code))
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


def ended(run: Run[ScaleUp], action: ScaleUp, now: datetime) -> None:
    """The scale-up has its outcome: the room it reserved under the cluster-wide limits is given back."""
    limit_reservations.release(run.ports, action.id, now=now)


TABLE = StepTable(
    action=ScaleUp,
    steps={
        "resize": Step(resize, next=("resize", "confirm")),  # itself: throttled or a passing fault
        "confirm": Step(confirm, next=("confirm",)),
    },
    succeeded=succeeded,
    failed=failed,
    fail=fail,
    ended=ended,
)
