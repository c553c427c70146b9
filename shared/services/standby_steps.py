"""The standby refill's steps: `grow` creates instances, `registered` waits for their nodes, `park` cordons and
deallocates them into the group's warm standby (GroupState.stopped).

grow ──> registered ──> park ──> (succeeded: StandbyRefilled | failed: the nodes given back as capacity)

- grow: re-reads the group and its state and recomputes the shortfall (`standby_refill.refill_shortfall`: the
  message's count is only an upper bound); reserves the room under the cluster-wide limits
  (`limit_reservations`, released when the action ends: that reservation is also how the polls see a refill in
  flight); lists the instances, resizes with If-Match on that read, lists again: the new instances are the
  difference. The capacity it grew from and the instances listed before are written to the ledger before the
  resize, so a redelivery after a crash never grows twice: it finds the instances by the same difference.
  `last_scale_up` is set as a scale-up sets it: the nodes on their way must not read as a provision timeout.
- registered: each new node, as soon as it registers, is reserved for this action (GroupState.removing, as a
  removal reserves: scale-down leaves it alone, a lost action's node is given back by the utilisation poll's
  reconcile, and pending pods may take it back through a reclaim request) and cordoned with
  ToBeDeletedByClusterAutoscaler, so no pod lands. Waits, a step delay at a time, until every new node is
  Ready; past MAX_NODE_PROVISION_TIME the missing ones (and any that failed) are deleted.
- park: a node pending pods asked back, or already running a pod that is not a DaemonSet's, is left as ordinary
  capacity (uncordoned, released). The rest are committed (no reclaim wins after this), deallocated, their Node
  objects deleted (as a deallocating removal does: a started instance registers afresh, uncordoned; a hibernated
  one keeps its Node, cordoned, which the scale-up starting it uncordons: services.hibernation), and listed
  in GroupState.stopped with stopped_at; the event StandbyRefilled is written.

Every step is safe to repeat on redelivery: cordon and reservation are idempotent, the deallocation is followed
by its operation token in the ledger, and the state updates are unions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from shared.actions import RefillStandby
from shared.domain import TO_BE_DELETED_TAINT, GroupState, Node, NodeGroup, Taint, instance_order
from shared.engine.quota import capped_target
from shared.ports import CHANGED_SINCE_READ, ComputeError, LedgerEntry
from shared.services import ledger, limit_reservations, offerings
from shared.services.execution import ExecutionResult, Run, Step, StepTable, untag
from shared.services.hibernation import begin_stop, keeps_node
from shared.services.mapping import map_cluster
from shared.services.standby_refill import refill_shortfall
from shared.services.swap import StateConflict, swap_group

log = logging.getLogger(__name__)

Runs = Run[RefillStandby]
RESIZE_ATTEMPTS = 3  # as scale_up_steps: each refusal means another writer changed the group meanwhile


# -- grow ---------------------------------------------------------------------------------------

def grow(run: Runs, action: RefillStandby, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True,
                          entry=entry)
    recorded = json.loads(entry.record) if entry.record else {}
    if "before" in recorded:
        # A redelivery after the resize was asked for: never grow twice; the instances are the difference.
        return _after_resize(run, action, entry, group, before=set(recorded["before"]),
                             from_capacity=recorded["from_capacity"], now=now)
    state = run.ports.state.get_group(group.id)
    count, why = refill_shortfall(run.ports, run.settings, group, state, now=now, action_id=action.id)
    count = min(count, action.count)
    if count <= 0:
        return run.finish(action, entry, "skipped", f"no shortfall: {why}", now=now)
    limits = offerings.planning_limits(run.ports, run.settings, [group], now=now, fresh=True)
    if group.id in limits.blocked:
        return run.finish(action, entry, "skipped", limits.blocked[group.id], now=now)
    allowed, quota_why = capped_target(group, group.capacity + count, limits.quota)
    count = min(count, allowed - group.capacity)
    if count <= 0:
        return run.finish(action, entry, "skipped", f"quota: {quota_why}", now=now)
    if run.settings.dry_run:
        return run.finish(action, entry, "dry-run", f"would add {count} standby instance(s) to {group.id} ({why})",
                          now=now)
    running = group.capacity - len(state.stopped)  # deallocated instances are capacity, not nodes
    try:
        within, limit = limit_reservations.reserve(run.ports, run.settings, action_id=action.id, group=group,
                                                   target=running + count, now=now)
    except StateConflict as exc:
        return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now,
                             detail=f"limits row contended: {exc}")
    count = min(count, within - running)
    if count <= 0:
        return run.finish(action, entry, "skipped", f"{limit}: no room for standby", now=now)
    for attempt in range(1, RESIZE_ATTEMPTS + 1):
        fresh = run.ports.provider.get_node_group(group.id) or group
        before = {i.instance_id for i in run.ports.provider.list_instances(fresh)}
        # Written before the resize: a redelivery finds it and only looks for the new instances.
        entry = ledger.update(run.ports.state, entry, record=_with(entry.record, before=sorted(before),
                                                                    from_capacity=fresh.capacity))
        try:
            run.ports.provider.begin_resize(fresh, fresh.capacity + count)
        except ComputeError as exc:
            if exc.code == CHANGED_SINCE_READ and attempt < RESIZE_ATTEMPTS:
                continue
            if exc.code == CHANGED_SINCE_READ:
                raise ComputeError(f"{group.id} changed between each read and its resize: {exc}",
                                   code=CHANGED_SINCE_READ, transient=True) from exc
            entry = ledger.update(run.ports.state, entry, record=_without(entry.record, "before", "from_capacity"))
            return failed(run, action, entry, f"{exc.code}: {exc}", exc.code or "Failed", "resize", now)
        log.info("standby refill of %s: %d -> %d (action %s; %s)", group.id, fresh.capacity,
                 fresh.capacity + count, action.id, why)
        return _after_resize(run, action, entry, fresh, before=before, from_capacity=fresh.capacity, now=now)
    raise AssertionError("unreachable")


def _after_resize(run: Runs, action: RefillStandby, entry: LedgerEntry, group: NodeGroup, *, before: set[str],
                  from_capacity: int, now: datetime) -> ExecutionResult:
    """The new instances (listed now, not before), carried to `registered`; those ARM lists only later are not
    ours to park (they stay ordinary capacity, which scale-down takes back when idle)."""
    new = sorted((i.instance_id for i in run.ports.provider.list_instances(group)
                  if i.instance_id not in before and not i.deleting), key=instance_order)[:action.count]
    # Standby from now on: no planner counts them as capacity for pods or for the group's minimum while they boot,
    # and a scale-up may take them (it starts them: a no-op on a running VM), which the next steps respect.
    def listed(state: GroupState) -> tuple[GroupState | None, None]:
        fresh = set(new) - state.stopped
        return (replace(state, stopped=state.stopped | fresh,
                        stopped_at={**state.stopped_at, **{i: now for i in fresh}}) if fresh else None), None

    swap_group(run.ports.state, group.id, listed, what=f"list the standby instances of {action.id}")
    # The room under the limits was for the resize: the nodes count as registered nodes from here on, and a
    # reservation kept would read to the scale-up planner as nodes on their way for pods.
    limit_reservations.release(run.ports, action.id, now=now)
    following = replace(action, from_capacity=from_capacity, instances=tuple(new)).at_step("registered", now=now)
    record = _with(ledger.record_of(following), before=sorted(before))
    return run.continue_(following, entry, delay=run.settings.step_retry_delay, now=now, record=record,
                         detail=f"created {', '.join(new) or 'nothing yet'}")


# -- registered ---------------------------------------------------------------------------------

def registered(run: Runs, action: RefillStandby, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.finish(action, entry, "failed", f"group {action.group!r} is gone", now=now)
    instances = {i.instance_id: i for i in run.ports.provider.list_instances(group)}
    taken = _taken(run, action)
    broken = [i for i in action.instances if i in instances and instances[i].provisioning_state == "Failed"]
    alive = [i for i in action.instances if i in instances and not instances[i].deleting and i not in broken]
    nodes = _nodes_of(run, group, alive)
    for instance in [i for i in alive if i in taken]:
        if instance in nodes:
            _give_back(run, action, nodes[instance].name, "a scale-up started it", instance=instance)
    alive = [i for i in alive if i not in taken]
    nodes = {i: n for i, n in nodes.items() if i in alive}
    kept = _reserve_and_cordon(run, action, nodes, now=now)
    alive = [i for i in alive if i not in kept]  # pending pods took them back: ordinary capacity now
    waiting = [i for i in alive if i not in nodes or not nodes[i].ready]
    started = action.step_started_at or now
    if waiting and now - started < run.settings.max_node_provision_time:
        following = replace(action, instances=tuple(alive)).retried()
        return run.continue_(following, entry, delay=run.settings.step_retry_delay, now=now,
                             detail=f"waiting for {len(waiting)} node(s)")
    late = waiting if waiting else []
    _delete(run, group, [*broken, *late], why="failed or not Ready within MAX_NODE_PROVISION_TIME")
    for instance in late:
        if instance in nodes:
            _release(run, action, nodes[instance].name)
    _unlist(run, action, [*broken, *late])
    ready = [i for i in alive if i not in late]
    if not ready:
        if late or broken:
            return run.finish(action, entry, "failed", "no new node became Ready", now=now,
                              error_code="ProvisionTimeout" if late else "Failed")
        return run.finish(action, entry, "skipped", "no new instance to park (taken by a scale-up, asked back, "
                          "or never listed)", now=now)
    return run.continue_(replace(action, instances=tuple(ready)).at_step("park", now=now), entry,
                         delay=timedelta(0), now=now)


def _reserve_and_cordon(run: Runs, action: RefillStandby, nodes: Mapping[str, Node], *,
                        now: datetime) -> set[str]:
    """Reserve each registered new node for this action and cordon it; the instances whose node pending pods
    asked back (given back here) or another action holds (left alone)."""
    if not nodes:
        return set()
    names = {node.name: instance for instance, node in nodes.items()}

    def reserve(state: GroupState) -> tuple[GroupState | None, tuple[set[str], set[str]]]:
        ours = {n for n in names if state.removing.get(n, action.id) == action.id and n not in state.reclaim}
        back = {n for n in names if n in state.reclaim and state.removing.get(n) == action.id}
        new = {n for n in ours if n not in state.removing}
        changed = replace(state, removing={**state.removing, **{n: action.id for n in new}}) if new else None
        return changed, (ours, back)

    ours, back = swap_group(run.ports.state, action.group, reserve, what=f"reserve the standby nodes of {action.id}")
    for name in sorted(ours):
        if not nodes[names[name]].is_being_deleted:
            run.ports.cluster.cordon(name, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
    for name in sorted(back):
        _give_back(run, action, name, "pending pods asked for it", instance=names[name])
    return {names[n] for n in names if n not in ours}


# -- park ---------------------------------------------------------------------------------------

def park(run: Runs, action: RefillStandby, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    if entry.operation:
        kind, token = untag(entry.operation, default="deallocate")
        return run.follow(action, entry, run.ports.provider.get_deallocate_operation(token), next_step="park",
                          now=now, kind=kind)
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.finish(action, entry, "failed", f"group {action.group!r} is gone", now=now)
    nodes = _nodes_of(run, group, list(action.instances))
    busy = {i for i, node in nodes.items() if _runs_workload(run, node.name)}
    for instance in sorted(busy):
        _give_back(run, action, nodes[instance].name, "a pod runs there already", instance=instance)
    candidates = {nodes[i].name: i for i in action.instances if i in nodes and i not in busy}

    def commit(state: GroupState) -> tuple[GroupState | None, set[str]]:
        # Still ours (reserved, not asked back) and still standby (no scale-up started it meanwhile).
        ours = {n for n, i in candidates.items()
                if state.removing.get(n) == action.id and n not in state.reclaim and i in state.stopped}
        return (None if ours <= state.committed else replace(state, committed=state.committed | ours)), ours

    committed = swap_group(run.ports.state, action.group, commit, what=f"commit the standby nodes of {action.id}")
    for name in sorted(set(candidates) - committed):
        _give_back(run, action, name, "pending pods asked for it, or a scale-up started it",
                   instance=candidates[name])
    ids = sorted((candidates[n] for n in committed), key=instance_order)
    action = replace(action, instances=tuple(ids))
    if not ids:
        return run.finish(action, entry, "skipped", "every new node is in use: none parked", now=now)
    log.info("parking %s of %s in standby (action %s)", ", ".join(ids), group.id, action.id)
    # hibernated where STANDBY_HIBERNATE and the set allow it (kind "hibernate": the Node objects are kept)
    operation, kind = begin_stop(run.ports.provider, run.settings, group, ids)
    return run.follow(action, entry, operation, next_step="park", now=now, kind=kind)


def succeeded(run: Runs, action: RefillStandby, entry: LedgerEntry, kind: str, now: datetime) -> ExecutionResult:
    ids = set(action.instances)
    group = run.ports.provider.get_node_group(action.group)
    nodes = _nodes_of(run, group, sorted(ids)) if group is not None else {}
    for node in nodes.values():
        if not keeps_node(kind):  # a hibernated instance keeps its Node, cordoned, for its resuming kubelet
            run.ports.cluster.delete_node(node.name)
        run.ports.state.clear_unneeded(node.name)

    def release(state: GroupState) -> tuple[GroupState | None, None]:
        held = [n for n, holder in state.removing.items() if holder == action.id]
        for name in held:
            state = state.without_removal(name)
        # Listed since the grow step; listed again in case a scale-up's failure handling dropped one meanwhile.
        return (replace(state, stopped=state.stopped | ids) if held or not ids <= state.stopped else None), None

    # Not the lenient update: a lost race raises, and the redelivery finds the operation done and repeats this.
    swap_group(run.ports.state, action.group, release, what=f"release the standby nodes of {action.id}")
    run.status_event("StandbyRefilled", f"Standby of group {action.group}: {len(ids)} instance(s) created and "
                     f"deallocated ({', '.join(sorted(ids, key=instance_order))})", now=now)
    return run.finish(action, entry, "succeeded", f"{len(ids)} instance(s) parked in standby", now=now)


def failed(run: Runs, action: RefillStandby, entry: LedgerEntry, detail: str, code: str, kind: str,
           now: datetime) -> ExecutionResult:
    if kind == "resize":
        group = run.ports.provider.get_node_group(action.group)
        if group is not None:
            offerings.record_refusal(run.ports, run.settings, group, code=code, message=detail, now=now)
    else:  # the deallocation failed: the nodes stay as ordinary capacity, committed ones too
        _give_back_all(run, action, f"deallocation failed: {detail}", committed_too=True)
    run.status_event("StandbyRefillFailed", f"Standby refill of group {action.group} failed: {detail}", now=now,
                     type="Warning")
    return run.finish(action, entry, "failed", detail, now=now, error_code=code)


def fail(run: Runs, action: RefillStandby, entry: LedgerEntry, why: str, code: str, now: datetime) -> ExecutionResult:
    """End the refill from outside its steps: nodes not yet committed to deallocation are given back; committed
    ones are left to the utilisation poll's reconcile (finished if their instance stopped, else given back)."""
    _give_back_all(run, action, why)
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


def ended(run: Runs, action: RefillStandby, now: datetime) -> None:
    """The refill has its outcome: its room under the limits (and its mark as a refill in flight) goes."""
    limit_reservations.release(run.ports, action.id, now=now)


# -- shared -------------------------------------------------------------------------------------

def _nodes_of(run: Runs, group: NodeGroup, instances: Sequence[str]) -> dict[str, Node]:
    """The registered nodes of these instances of the group, by instance id (mapped by the poll's rules)."""
    if not instances:
        return {}
    wanted = set(instances)
    mapped = map_cluster(run.ports.provider, run.ports.cluster.list_nodes(), [group], method=run.settings.node_mapping)
    return {ref.instance_id: node for node in mapped.nodes
            if (ref := node.instance) is not None and ref.group_id == group.id and ref.instance_id in wanted}


def _runs_workload(run: Runs, node: str) -> bool:
    return any(not p.is_node_bound_system_pod and not p.is_finished for p in run.ports.cluster.list_pods_on_node(node))


def _give_back(run: Runs, action: RefillStandby, node: str, why: str, *, instance: str) -> None:
    """Leave the node as ordinary capacity: uncordoned, its reservation (and any reclaim request) released, its
    instance off the stopped list (it runs)."""
    log.info("standby refill %s: node %s stays as capacity: %s", action.id, node, why)
    current = run.ports.cluster.get_node(node)
    if current is not None and current.is_being_deleted:
        run.ports.cluster.uncordon(node, taint_key=TO_BE_DELETED_TAINT)
    _release(run, action, node)
    _unlist(run, action, [instance])


def _give_back_all(run: Runs, action: RefillStandby, why: str, *, committed_too: bool = False) -> None:
    """Every instance of the refill not committed to its deallocation (`committed_too`: every one) goes back to
    ordinary capacity."""
    group = run.ports.provider.get_node_group(action.group)
    nodes = _nodes_of(run, group, list(action.instances)) if group is not None else {}
    committed = run.ports.state.get_group(action.group).committed
    for instance in action.instances:
        node = nodes.get(instance)
        if node is None:
            _unlist(run, action, [instance])  # never registered: it runs (or is gone), never counted as standby
        elif committed_too or node.name not in committed:
            _give_back(run, action, node.name, why, instance=instance)


def _taken(run: Runs, action: RefillStandby) -> set[str]:
    """The refill's instances no longer listed stopped: a scale-up started them (they are its capacity now)."""
    return set(action.instances) - run.ports.state.get_group(action.group).stopped


def _unlist(run: Runs, action: RefillStandby, instances: Sequence[str]) -> None:
    gone = set(instances)
    if gone:
        run.update_group(action.group, lambda s: replace(
            s, stopped=s.stopped - gone, stopped_at={i: t for i, t in s.stopped_at.items() if i not in gone}))


def _release(run: Runs, action: RefillStandby, node: str) -> None:
    run.update_group(action.group, lambda s: s.without_removal(node) if s.removing.get(node) == action.id else s)


def _delete(run: Runs, group: NodeGroup, ids: Sequence[str], *, why: str) -> None:
    if not ids:
        return
    log.warning("standby refill of %s: deleting %s (%s)", group.id, ", ".join(ids), why)
    try:
        run.ports.provider.begin_delete_instances(group, list(ids))
    except ComputeError as exc:  # the instances stay as ordinary capacity; scale-down removes them when idle
        log.warning("standby refill of %s: deleting %s failed: %s", group.id, ", ".join(ids), exc)


def _with(record: str, **fields: object) -> str:
    body = json.loads(record) if record else {}
    return json.dumps({**body, **fields}, sort_keys=True, separators=(",", ":"))


def _without(record: str, *names: str) -> str:
    body = {k: v for k, v in (json.loads(record) if record else {}).items() if k not in names}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


TABLE = StepTable(
    action=RefillStandby,
    steps={
        "grow": Step(grow, next=("grow", "registered")),  # itself: throttled, contended or a passing fault
        "registered": Step(registered, next=("registered", "park")),
        "park": Step(park, next=("park",)),
    },
    succeeded=succeeded,
    failed=failed,
    fail=fail,
    ended=ended,
)
