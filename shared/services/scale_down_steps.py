"""The scale-down action's steps: remove one drained node, or several empty nodes of one group in bulk.

cordon ──> drain ──> delete ──> confirm ──> (succeeded: Node objects gone, reservations released)
   └────────── empty nodes: delete at once ──┘

`cordon` checks every node against the world and our state (only a node the utilisation poll reserved for
this action id goes on, and only while the poll's rules still hold for it), then taints it; `drain` evicts what may move
and waits for batch pods; `delete` commits the removal (past the point of no return, unless pending
pods asked for the node back first) and deletes or deallocates the instances; `confirm` follows ARM's
operation. A node that turns out not removable is given back (uncordoned, reservation released) and the
action carries on with the others; the message of each next step names only those left. Every time a
step counts from (its start, for BATCH_DRAIN_TIMEOUT and MAX_POD_EVICTION_TIME) is our ledger's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from shared import telemetry
from shared.actions import RemovalTarget, ScaleDown
from shared.domain import DEFAULT_GRACE_SECONDS, TO_BE_DELETED_TAINT, GroupState, Instance, Node, NodeGroup, Pod, Taint
from shared.engine.cooldowns import scale_down_blocked
from shared.engine.drainability import KUBE_SYSTEM, NodeDrain, drain_of
from shared.engine.limits import at_min_size
from shared.engine.scale_down import SCALE_DOWN_DISABLED, group_rules
from shared.engine.utilization import node_utilization
from shared.options import drain_rules, scale_down_options
from shared.ports import ClusterError, ClusterEvent, ComputeError, LedgerEntry
from shared.services import ledger
from shared.services.deallocated import enforce_deallocated_max, removal_verb
from shared.services.standby import with_standby_room
from shared.services.scheduled_capacity import with_window_min
from shared.services.execution import ExecutionResult, Outcome, Run, Step, StepTable, untag
from shared.services.hibernation import STOP_KINDS, begin_stop, keeps_node
from shared.services.mapping import map_cluster
from shared.services.swap import swap_group

log = logging.getLogger(__name__)

Runs = Run[ScaleDown]


# -- cordon -------------------------------------------------------------------------------------

def cordon(run: Runs, action: ScaleDown, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True,
                          entry=entry)
    # Validate every node before touching any: a node that does not map to the decided instance now (its
    # providerID changed, its instance is gone, another node claims it) rejects the action.
    present = [node for t in action.targets if (node := run.ports.cluster.get_node(t.node)) is not None]
    mapped = map_cluster(run.ports.provider, present, [group], method=run.settings.node_mapping)
    nodes = {node.name: node for node in mapped.nodes}
    for target in action.targets:
        node = nodes.get(target.node)
        if node is None:
            continue
        ref = node.mapped_to
        if (ref is None or ref.group_id != group.id or ref.instance_id != target.instance_id
                or node.provider_id.lower() != target.provider_id.lower()):
            return run.reject(
                action, f"node {node.name} (providerID {node.provider_id!r}) is not the decided instance "
                f"{target.instance_id} of {group.id}", now=now, poison=True, entry=entry,
            )
    skipped: list[str] = []
    kept: list[str] = []
    instances = _instances(run, group, action, listed=mapped.groups[0].instances if mapped.listed else None)
    # Our own state, read once for every node: who holds each node, and since when the poll found it unneeded.
    state = run.ports.state.get_group(group.id)
    unneeded = run.ports.state.list_unneeded()
    for target in action.targets:
        node = nodes.get(target.node)
        refusal = _removable(run, group, node, target, instances, action.id, state=state, unneeded=unneeded,
                             now=now)
        if refusal is None:
            kept.append(target.node)
        else:
            skipped.append(f"{target.node}: {refusal}")
            # An earlier delivery of this step may have cordoned it before a crash: undo only what we hold.
            give_back(run, action, target.node, refusal, now=now, quiet=True)
            if node is not None:
                ours = state.removing.get(target.node) == action.id
                run.ports.events.emit(ClusterEvent("default", "Node", target.node, "", "ScaleDownFailed",
                                                   f"scale-down refused: {refusal}", now,
                                                   "Normal" if ours else "Warning"))
    if not kept:
        return run.finish(action, entry, "skipped", "; ".join(skipped), now=now)
    if run.settings.dry_run:
        for name in kept:
            run.update_group(group.id, lambda s, name=name: s.without_removal(name))
        return run.finish(action, entry, "dry-run", f"would remove node(s) {', '.join(kept)}", now=now)
    for name in kept:
        log.info("cordoning %s for removal (action %s)", name, action.id)
        if action.removal_kind == "empty":
            run.status_event("ScaleDownEmpty", f'Scale-down: removing empty node "{name}"', now=now)
        run.ports.cluster.cordon(name, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
        run.ports.events.emit(ClusterEvent("default", "Node", name, "", "ScaleDown",
                                           f"marked the node as toBeDeleted/unschedulable: {action.reason}", now))
    if skipped:
        log.info("action %s goes on without %s", action.id, "; ".join(skipped))
    following = action.keeping(kept).at_step("drain", now=now)
    # From here on the ledger names exactly the nodes checked against the world above.
    record = ledger.record_of(following)
    if action.removal_kind == "empty" and all(_drain_of(run, name, now=now).empty for name in kept):
        # Still empty now that no pod can land (cluster-autoscaler's empty-node path): the delete
        # goes out at once, two queue hops sooner, so the node's parallelism slot is free sooner.
        # A pod bound just before the taint makes the drain step run as for any node. The delete
        # step is idempotent, so a redelivery of this step after a crash repeats nothing.
        # The group and instances read above are milliseconds old: the delete reuses them (two ARM reads fewer).
        entry = ledger.update(run.ports.state, entry, record=record)
        deleting = following.at_step("delete", now=now)
        try:
            return _delete_from(run, deleting, entry, group, instances, now=now)
        except (ComputeError, ClusterError) as exc:
            # The nodes are cordoned and recorded: throttling or a passing fault retries the delete
            # step, never this one (which would cordon again and emit its events a second time).
            result = run.after_fault(deleting, entry, exc, now=now)
            if result is None:
                raise
            return result
    return run.continue_(following, entry, delay=timedelta(0), now=now, record=record)


def _instances(run: Runs, group: NodeGroup, action: ScaleDown,
               listed: Sequence[Instance] | None = None) -> dict[str, Instance | None]:
    """The instances of the action's targets by instance id (None: gone), in as few ARM reads as can be.

    ARM budgets GETs per scale set (12 a minute): one per node of a bulk removal, every step,
    starves everything else on the scale set, so several targets cost one list instead; and the
    list node mapping just read (`listed`) costs nothing.
    """
    if listed is not None:
        by_id = {i.instance_id: i for i in listed}
        return {t.instance_id: by_id.get(t.instance_id) for t in action.targets}
    if len(action.targets) == 1:
        (target,) = action.targets
        return {target.instance_id: run.ports.provider.get_instance(group, target.instance_id)}
    listed = {i.instance_id: i for i in run.ports.provider.list_instances(group)}
    return {t.instance_id: listed.get(t.instance_id) for t in action.targets}


def _removable(run: Runs, group: NodeGroup, node: Node | None, target: RemovalTarget,
               instances: Mapping[str, Instance | None], action_id: str, *, state: GroupState,
               unneeded: Mapping[str, datetime], now: datetime) -> str | None:
    """Why the node may not be removed now, or None: the poll reserved it for this action and its rules still hold.

    A removal is only ever our own decision: the utilisation poll reserves the nodes it decides on
    (`reconcile.reserve_decided`) before it sends the message, so a node no poll reserved for this
    action id is refused, whatever the message says. The poll's rules are then checked again against
    the node, its pods and the group as they are now: unneeded long enough by the unneeded-since row
    (the group's own unneeded time), still below its utilisation threshold (or NotReady), not cordoned
    by someone else, still drainable, the group out of its cooldowns and above its minimum.
    """
    if node is None:
        return "node no longer exists"
    if instances[target.instance_id] is None:
        return f"instance {target.instance_id} is not in {group.id}"
    holder = state.removing.get(node.name)
    if holder and holder != action_id:
        return f"removal already in progress by action {holder}"
    if holder is None and not run.settings.dry_run:  # a dry-run poll reserves nothing
        return f"not reserved for action {action_id}: no utilisation poll decided to remove it"
    # A standby with room for the node shortens the break-even time, as the poll planned it (services.standby).
    options = with_standby_room(run.ports, run.settings, scale_down_options(run.settings), (group,), now=now,
                                states={group.id: state})
    try:
        # The group's own rules: in break-even idle mode its unneeded time follows its measured boots.
        rules = group_rules(group, options, state)
    except ValueError as exc:  # a scale-set tag malformed since the poll decided: no rule to remove by
        return str(exc)
    if node.annotations.get(SCALE_DOWN_DISABLED) == "true":
        return f"annotation {SCALE_DOWN_DISABLED}=true"
    if node.unschedulable and not node.is_being_deleted:
        return "cordoned by someone else"
    unready = not node.ready
    # A node being replaced was forced by the poll once its replacement was Ready (engine.replacement): it is
    # removed whatever its utilisation, with no unneeded wait and no delay after the scale-up that replaced it.
    # A given-up replacement's tombstone is never forced: such a node goes by the ordinary rules only.
    entry = state.replacing.get(node.name)
    replaced = entry is not None and entry.given_up_at is None
    since = unneeded.get(node.name)
    if since is None:
        return "no unneeded-since record: no poll found it unneeded"
    wait = timedelta(0) if replaced else rules.wait(unready=unready)
    if now - since < wait:
        state_word = "unready" if unready else "unneeded"
        return f"{state_word} for {int((now - since).total_seconds())}s of {int(wait.total_seconds())}s"
    pods = run.ports.cluster.list_pods_on_node(node.name)
    if not unready and not replaced:
        thresholds = replace(options.utilization, threshold=rules.threshold, gpu_threshold=rules.gpu_threshold)
        used = node_utilization(node, pods, rules=thresholds, now=now)
        if not used.low:
            return f"no longer underutilised: {used.describe()}, threshold {used.threshold:.2f}"
    pinned = _drain_of(run, node.name, now=now, pods=pods).pinned_by
    if pinned:
        return f"no longer removable: {pinned}"
    delays = rules.delays(options)
    blocked = scale_down_blocked(state, now=now, delays=replace(delays, after_add=timedelta(0)) if replaced else delays)
    if blocked:
        return blocked
    others = len(state.removing) - (holder == action_id)
    group = with_window_min(run.settings, group, now=now)  # a SCHEDULED_CAPACITY window may have opened since
    if at_min_size(group, running=group.capacity - len(state.stopped), removing=others):
        return f"group {group.id} would go below its minimum {group.min_size}"
    return None


def _drain_of(run: Runs, node_name: str, *, now: datetime, pods: Sequence[Pod] | None = None) -> NodeDrain:
    if pods is None:
        pods = run.ports.cluster.list_pods_on_node(node_name)
    # Budgets decide only whether a kube-system pod may move; DaemonSet and mirror pods (kube-proxy and
    # the like, on every node) never move, so they cost no list call.
    system = any(p.namespace == KUBE_SYSTEM and not p.is_node_bound_system_pod for p in pods)
    budgets = run.ports.cluster.list_disruption_budgets() if system else []
    return drain_of(pods, drain_rules(run.settings), budgets, now=now)


# -- drain --------------------------------------------------------------------------------------

def drain(run: Runs, action: ScaleDown, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    """Evict the pods that may move, wait for batch pods to finish, then go on to delete.

    Runs again every few seconds while pods are leaving, every BATCH_CHECK_INTERVAL while
    only batch pods run; never waits in-process.
    """
    state = run.ports.state.get_group(action.group)
    kept: list[str] = []
    given_back: list[str] = []
    moving = waiting = 0
    for name in action.nodes:
        if state.removing.get(name) != action.id:
            given_back.append(f"{name}: given back earlier")  # by an interrupted delivery of this step
            continue
        if name in state.reclaim:
            given_back.append(give_back(run, action, name, "pending pods can use the node", now=now, reclaimed=True))
            continue
        left = _drain_node(run, action, name, started=entry.step_started_at or now, now=now)
        if isinstance(left, str):
            given_back.append(left)
            continue
        kept.append(name)
        moving += left[0]
        waiting += left[1]
    if not kept:
        return run.finish(action, entry, "skipped", "; ".join(given_back), now=now)
    if not moving and not waiting:
        return run.continue_(action.keeping(kept).at_step("delete", now=now), entry, delay=timedelta(0), now=now)
    delay = run.settings.step_retry_delay if moving else run.settings.batch_check_interval
    detail = f"{moving} pod(s) leaving" if moving else f"waiting for {waiting} batch pod(s)"
    return run.continue_(action.keeping(kept).retried(), entry, delay=delay, now=now, detail=detail)


def _drain_node(run: Runs, action: ScaleDown, name: str, *, started: datetime,
                now: datetime) -> tuple[int, int] | str:
    """One node's drain pass: (pods still to leave, batch pods waited for), or why it was given back.

    `started`: when the drain step first ran, from our ledger (a message's time is never trusted).
    """
    drained = _drain_of(run, name, now=now)
    if drained.pinned_by is not None:
        # A pod that must not be disrupted landed before the taint did: keep the node.
        return give_back(run, action, name, f"no longer removable: {drained.pinned_by}", now=now)
    move, wait = list(drained.move), list(drained.wait)
    evict_from = started
    timeout = run.settings.batch_drain_timeout
    if wait and timeout > timedelta(0) and now - started >= timeout:
        log.warning("node %s: batch pods still running after BATCH_DRAIN_TIMEOUT (%s); evicting them: %s",
                    name, timeout, ", ".join(p.key for p in wait[:3]))
        move, wait, evict_from = move + wait, [], started + timeout
    leaving = [p for p in move if not p.terminating]
    if leaving and now - evict_from > run.settings.max_pod_eviction_time:
        return give_back(run, action, name, "pods not evicted within MAX_POD_EVICTION_TIME: "
                         f"{', '.join(p.key for p in leaving[:3])}", now=now)
    for pod in leaving:
        outcome = run.ports.cluster.evict(pod.namespace, pod.name, grace_period_seconds=_grace(run, pod))
        log.info("evicting %s from %s: %s", pod.key, name, outcome)
        telemetry.record_eviction(outcome)
        if outcome == "evicted":
            run.ports.events.emit(ClusterEvent(
                pod.namespace, "Pod", pod.name, pod.uid, "ScaleDown",
                f"deleting pod for node scale down (node {name})", now))
    return len(move), len(wait)


def _grace(run: Runs, pod: Pod) -> int | None:
    """The pod's own grace period, capped at MAX_GRACEFUL_TERMINATION_SEC (None: the pod's own applies)."""
    cap = run.settings.max_graceful_termination_sec
    own = pod.termination_grace_seconds if pod.termination_grace_seconds is not None else DEFAULT_GRACE_SECONDS
    return cap if own > cap else None


# -- delete -------------------------------------------------------------------------------------

def delete(run: Runs, action: ScaleDown, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    group = run.ports.provider.get_node_group(action.group)
    if group is None:
        return run.continue_(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
    return _delete_from(run, action, entry, group, _instances(run, group, action), now=now)


def _delete_from(run: Runs, action: ScaleDown, entry: LedgerEntry, group: NodeGroup,
                 instances: Mapping[str, Instance | None], *, now: datetime) -> ExecutionResult:
    """The delete step, given the group and the targets' instances as just read."""
    found = [(t, instance) for t in action.targets if (instance := instances[t.instance_id]) is not None]
    live = [t for t, _ in found]
    if not live or any(instance.deleting for _, instance in found):
        # Already gone or going (a crash after the delete call): never delete twice.
        return run.continue_(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
    committed = _commit_removals(run, group.id, [t.node for t in live], action.id)
    given_back = {t.node: give_back(run, action, t.node, "pending pods can use the node", now=now, reclaimed=True)
                  for t in live if t.node not in committed}
    if len(given_back) == len(action.targets):
        return run.finish(action, entry, "skipped", "; ".join(given_back.values()), now=now)
    # Nodes whose instance vanished on its own stay in the action, so confirm cleans them up too.
    action = action.keeping([name for name in action.nodes if name not in given_back])
    ids = [t.instance_id for t in live if t.node not in given_back]
    if not ids:
        return run.continue_(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
    return _remove_instances(run, action, entry, group, ids, now=now)


def _commit_removals(run: Runs, group_id: str, nodes: list[str], action_id: str) -> set[str]:
    """Mark the removals past the point of no return, except of nodes pending pods asked back first.

    One compare-and-swap for all, the same as the pending poll's reclaim request: for each node
    exactly one of them wins. A node no longer reserved for this action (given back before a
    crash) is not committed either.
    """
    def commit(state: GroupState) -> tuple[GroupState | None, set[str]]:
        ours = {n for n in nodes if state.removing.get(n) == action_id and n not in state.reclaim}
        # Nothing new (ours <= committed): our own earlier, interrupted delivery committed them.
        return (None if ours <= state.committed else replace(state, committed=state.committed | ours)), ours

    # Losing every race raises StateConflict: the step is retried by the queue, nothing committed half-way.
    return swap_group(run.ports.state, group_id, commit, what=f"commit the removal of {', '.join(nodes)}")


def _remove_instances(run: Runs, action: ScaleDown, entry: LedgerEntry, group: NodeGroup, ids: list[str], *,
                      now: datetime) -> ExecutionResult:
    """Delete the instances, or deallocate them with SCALE_DOWN_MODE=deallocate (idempotent, so repeatable)."""
    # deallocate mode, or a standby with room for these nodes
    verb = removal_verb(run.settings, group, ports=run.ports, now=now, nodes=action.nodes)
    log.info("%s instance(s) %s of %s (node(s) %s, action %s)", "deleting" if verb == "delete" else "deallocating",
             ", ".join(ids), group.id, ", ".join(action.nodes), action.id)
    if verb == "deallocate":  # hibernated where STANDBY_HIBERNATE and the set allow it (kind "hibernate")
        operation, verb = begin_stop(run.ports.provider, run.settings, group, ids)
    else:
        operation = run.ports.provider.begin_delete_instances(group, ids)
    return run.follow(action, entry, operation, next_step="confirm", now=now, kind=verb)


def throttled(run: Runs, action: ScaleDown, delay: timedelta, now: datetime) -> None:
    """ARM throttled a delete: until it goes out, a removal the planner adds to the group would only wait
    behind it for the same budget, so the planner gives those slots to other groups (`throttled_until`)."""
    if action.step != "delete":
        return
    until = now + delay
    run.update_group(action.group, lambda s: replace(s, throttled_until=max(until, s.throttled_until or until)))


# -- confirm ------------------------------------------------------------------------------------

def confirm(run: Runs, action: ScaleDown, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    if entry.operation:
        kind, token = untag(entry.operation, default="delete")
        provider = run.ports.provider
        check = provider.get_deallocate_operation if kind in STOP_KINDS else provider.get_delete_operation
        return run.follow(action, entry, check(token), next_step="confirm", now=now, kind=kind)
    group = run.ports.provider.get_node_group(action.group)
    instances = _instances(run, group, action) if group is not None else {}
    if group is not None and removal_verb(run.settings, group, ports=run.ports, now=now,
                                                nodes=action.nodes) == "deallocate":
        # No operation recorded (a crash right after the call): deallocating again is harmless.
        ids = [t.instance_id for t in action.targets if instances[t.instance_id]]
        if ids:
            return _remove_instances(run, action, entry, group, ids, now=now)
    # No operation recorded (a crash right after the delete call): wait until the instances are gone.
    if any(instances.values()):
        return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now)
    return _finish_removal(run, action, entry, now=now)


def succeeded(run: Runs, action: ScaleDown, entry: LedgerEntry, kind: str, now: datetime) -> ExecutionResult:
    return _finish_removal(run, action, entry, now=now, deallocated=kind in STOP_KINDS, keep_nodes=keeps_node(kind))


def failed(run: Runs, action: ScaleDown, entry: LedgerEntry, detail: str, code: str, kind: str,
           now: datetime) -> ExecutionResult:
    return _abort_removal(run, action, entry, detail, now=now, failed=True, error_code=code)


def _finish_removal(run: Runs, action: ScaleDown, entry: LedgerEntry, *, now: datetime,
                    deallocated: bool = False, keep_nodes: bool = False) -> ExecutionResult:
    """The instances are gone (or deallocated): remove lingering Node objects, release the reservations.

    `keep_nodes`: the instances hibernated; their Node objects stay, cordoned with our taint, for the kubelet
    that resumes with them (services.hibernation)."""
    for name in action.nodes:
        if not keep_nodes:
            run.ports.cluster.delete_node(name)
        run.ports.state.clear_unneeded(name)

    def release(state: GroupState) -> GroupState:
        for name in action.nodes:
            state = state.without_removal(name)
        # A replaced node's entry ends with its removal (a hibernated node's Node object stays: no poll would see
        # it gone).
        state = replace(state, replacing={n: r for n, r in state.replacing.items() if n not in action.nodes})
        if deallocated:
            ids = {t.instance_id for t in action.targets}
            state = replace(state, stopped=state.stopped | ids,
                            # A redelivery keeps the first time; an instance stopped again gets a new one.
                            stopped_at={**state.stopped_at, **{i: now for i in ids - state.stopped}})
        return replace(state, last_scale_down=now)

    run.update_group(action.group, release)
    if deallocated:
        enforce_deallocated_max(run.ports, run.settings, action.group, now=now)  # the cap, standby included
    return run.finish(action, entry, "succeeded", f"removed node(s) {', '.join(action.nodes)}", now=now)


# -- giving nodes back --------------------------------------------------------------------------

def give_back(run: Runs, action: ScaleDown, node: str, why: str, *, now: datetime, failed: bool = False,
              reclaimed: bool = False, quiet: bool = False) -> str:
    """Undo what this action did to one node: uncordon and untaint it, release its reservation.

    `quiet`: the cordon step turning down a node it may never have touched; only what this
    action holds is undone, and nothing is said unless there was something to undo.
    """
    state = run.ports.state.get_group(action.group)
    ours = state.removing.get(node) == action.id
    said = f"{node}: {'cancelled' if reclaimed else 'aborted'}: {why}"
    if quiet and not ours:
        return said
    if reclaimed:
        log.info("removal of %s cancelled: %s (action %s)", node, why, action.id)
    else:
        log.warning("removal of %s aborted: %s (action %s)", node, why, action.id)
    current = run.ports.cluster.get_node(node)
    if current is not None and current.is_being_deleted:
        run.ports.cluster.uncordon(node, taint_key=TO_BE_DELETED_TAINT)
        run.ports.events.emit(ClusterEvent("default", "Node", node, "", "ScaleDownFailed",
                                           f"scale-down of the node cancelled: {why}", now,
                                           "Normal" if reclaimed else "Warning"))
        run.ports.state.clear_unneeded(node)  # it was cordoned: its unneeded clock starts over
    # A node turned down before its cordon (the group at its minimum, a cooldown) is as unneeded as it
    # was: its clock runs on, or the next round would wait SCALE_DOWN_UNNEEDED_TIME again for it.

    def release(state: GroupState) -> GroupState:
        if state.removing.get(node) == action.id:
            state = state.without_removal(node)
        return replace(state, last_failure=now) if failed else state

    run.update_group(action.group, release)
    return said


def _abort_removal(run: Runs, action: ScaleDown, entry: LedgerEntry, why: str, *, now: datetime,
                   failed: bool = False, error_code: str = "") -> ExecutionResult:
    """Give every node of the action back and end it."""
    for name in action.nodes:
        give_back(run, action, name, why, now=now, failed=failed)
    outcome: Outcome = "failed" if failed else "skipped"
    return run.finish(action, entry, outcome, f"aborted: {why}", now=now, error_code=error_code)


def fail(run: Runs, action: ScaleDown, entry: LedgerEntry, why: str, code: str, now: datetime) -> ExecutionResult:
    """End the removal as failed from outside its steps.

    A node whose delete was committed may be on its way out: it stays reserved, and the utilisation
    poll's reconcile removes its Node object once the instance is gone, or gives it back. The rest are
    given back now, uncordoned.
    """
    committed = run.ports.state.get_group(action.group).committed
    for name in action.nodes:
        if name not in committed:
            give_back(run, action, name, why, now=now, failed=True)
    run.update_group(action.group, lambda s: replace(s, last_failure=now))
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


def refused(run: Runs, action: ScaleDown, why: str, now: datetime) -> None:
    for name in action.nodes:
        run.ports.events.emit(ClusterEvent("default", "Node", name, "", "ScaleDownFailed",
                                           f"a scale-down step was refused: {why}", now, "Warning"))


TABLE = StepTable(
    action=ScaleDown,
    steps={
        # Each step may also hand the action to itself: it waits, is throttled, or a fault passes.
        "cordon": Step(cordon, next=("cordon", "drain", "delete", "confirm")),  # empty nodes: delete at once
        "drain": Step(drain, next=("drain", "delete")),
        "delete": Step(delete, next=("delete", "confirm")),
        "confirm": Step(confirm, next=("confirm",)),
    },
    succeeded=succeeded,
    failed=failed,
    fail=fail,
    refused=refused,
    throttled=throttled,
)
