"""The executor: runs one scale action message, one step at a time (and hands scale-down rounds to the poll).

Each step re-checks the world, does its external effect idempotently, then
either finishes the action or enqueues the next step (possibly delayed) before
marking its own step done, so a crash at any point leaves a redelivery that
repeats at most an idempotent step. Nothing here waits in-process for long:
a step that must wait re-enqueues itself with a visibility delay.

Rejections: a message that is malformed, names an unknown group, asks for a
size outside the group's limits, or contradicts the world (a providerID that is
not an instance of the group) goes to `<queue>-poison` at once, since retrying
cannot help and an operator should see it. A well-formed message that merely
expired before it started is dropped (logged and recorded in the ledger): a
stale decision is normal, not an error.

Telemetry (shared.telemetry, docs/observability.md): each step runs in a span whose parent is the
deciding poll's (the message carries its trace context); every action that reaches an outcome
(`_finish`, `_reject`, `_reject_raw`) emits a ScaleUp, ScaleDown or ScaleActionRejected event and
its counters; evictions are counted where they are asked for.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from shared import telemetry
from shared.actions import InvalidAction, RemovalTarget, ScaleAction, ScaleDownRound, decode_message, encode_action
from shared.domain import (
    DEFAULT_GRACE_SECONDS,
    TO_BE_DELETED_TAINT,
    GroupState,
    Instance,
    Node,
    NodeGroup,
    Pod,
    Taint,
)
from shared.engine.backoff import ALLOCATION_FAILURES, after_failure
from shared.engine.cooldowns import scale_down_blocked
from shared.engine.drainability import KUBE_SYSTEM, NodeDrain, drain_of
from shared.engine.limits import allowed_target
from shared.engine.pod_rules import is_virtual_node
from shared.ports import ClusterError, ClusterEvent, ComputeError, LedgerEntry, Operation, Ports
from shared.services import ledger
from shared.services.deallocated import enforce_deallocated_max, removal_verb
from shared.services.events import status_event
from shared.services.observe import observe, running_sizes
from shared.services.rounds import take_round
from shared.services.swap import StateConflict, swap_group, update_group
from shared.options import drain_rules, scale_down_options
from shared.services.utilization import run_utilization_poll
from shared.settings import Settings

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "waiting", "skipped", "rejected", "duplicate", "failed", "dry-run"]



@dataclass(frozen=True, slots=True)
class ExecutionResult:
    outcome: Outcome
    detail: str = ""
    action_id: str = ""


class Executor:
    def __init__(self, ports: Ports, settings: Settings) -> None:
        self._ports = ports
        self._settings = settings

    # -- entry point -------------------------------------------------------------

    def execute(self, raw: str | bytes, *, now: datetime, dequeue_count: int = 1) -> ExecutionResult:
        """Run one delivery. `dequeue_count`: the host's count for this message; on its last delivery
        (HOST_MAX_DEQUEUE_COUNT, host.json's maxDequeueCount) a step that fails unexpectedly ends the
        action with a recorded failure before the host moves the message to the poison queue."""
        with telemetry.timed("execute_scale_action"):
            try:
                action = decode_message(raw)
            except InvalidAction as exc:
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
                return self._reject_raw(text, str(exc), now=now)
            if isinstance(action, ScaleDownRound):
                return self._round(action, now=now)
            # A child of the decision's span: the message carries the poll's trace context.
            with telemetry.action_span(action):
                try:
                    return self._execute(action, now=now)
                except Exception as exc:
                    if dequeue_count >= HOST_MAX_DEQUEUE_COUNT:
                        self._fail_last_delivery(action, exc, now=now)
                    raise

    def _round(self, round_: ScaleDownRound, *, now: datetime) -> ExecutionResult:
        """A scale-down round (`shared.services.rounds`): the utilisation poll, if it is the pending round."""
        if not take_round(self._ports, self._settings, round_, now=now):
            return ExecutionResult("skipped", "not the pending scale-down round", round_.id)
        result = run_utilization_poll(self._ports, self._settings, now=now)
        return ExecutionResult("succeeded", f"scale-down round: {len(result.enqueued)} removal(s) sent", round_.id)

    def _execute(self, action: ScaleAction, *, now: datetime) -> ExecutionResult:
        entry = self._ports.state.get_ledger_entry(action.id)
        if entry is None and not action.is_first_step:
            return self._reject(action, "a follow-up step with no ledger entry", now=now, poison=True)
        if entry is None:
            if action.created_at - now > CLOCK_SKEW:
                return self._reject(action, f"created at {action.created_at.isoformat()}, in the future", now=now,
                                    poison=True)
            # ACTION_TTL bounds a decision's life whatever the message says: a message cannot extend itself.
            expires = min(action.expires_at, action.created_at + self._settings.action_ttl)
            if now > expires:
                return self._reject(action, f"expired at {expires.isoformat()} before it started", now=now,
                                    poison=False, outcome="expired")
        elif ledger.decide_claim(entry, action.progress, now=now, lease=self._settings.action_lease) == "claim":
            why = ledger.contradiction(entry, action)
            if why is not None:
                return self._refuse_contradiction(action, why, now=now)

        claimed = ledger.claim(self._ports.state, action, now=now, lease=self._settings.action_lease)
        if claimed is None:
            log.info("action %s step %s: duplicate delivery suppressed", action.id, action.step)
            return ExecutionResult("duplicate", action_id=action.id)
        if (entry is not None and entry.status == "started" and entry.progress == action.progress
                and action.step_started_at is not None):
            # We took over from a delivery that died holding this step: the time it sat on the step
            # must not count against the step's deadlines (MAX_POD_EVICTION_TIME, BATCH_DRAIN_TIMEOUT).
            action = replace(action, step_started_at=action.step_started_at + (now - entry.updated_at))
        try:
            return self._run_step(action, claimed, now=now)
        except (ComputeError, ClusterError) as exc:
            result = self._after_fault(action, claimed, exc, now=now)
            if result is not None:
                return result
            self._release(claimed, now=now)
            raise
        except Exception:
            # Give the step back so the host's retry of this message may take it at once.
            self._release(claimed, now=now)
            raise

    def _run_step(self, action: ScaleAction, entry: LedgerEntry, *, now: datetime) -> ExecutionResult:
        handler = {
            ("scale_up", "resize"): self._resize,
            ("scale_up", "confirm"): self._confirm_resize,
            ("scale_down", "cordon"): self._cordon,
            ("scale_down", "drain"): self._drain,
            ("scale_down", "delete"): self._delete,
            ("scale_down", "confirm"): self._confirm_delete,
        }[(action.kind, action.step)]
        return handler(action, entry, now)

    # -- scale up ------------------------------------------------------------------

    def _resize(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        group = self._ports.provider.get_node_group(action.group)
        if group is None:
            return self._reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True, entry=entry)
        target = action.target_size or 0
        if not group.min_size <= target <= group.max_size:
            return self._reject(
                action, f"target size {target} is outside the group's limits {group.min_size}..{group.max_size}",
                now=now, poison=True, entry=entry,
            )
        state = self._ports.state.get_group(group.id)
        running = group.target_size - len(state.stopped)  # deallocated instances are capacity, not nodes
        if running >= target:
            return self._finish(action, entry, "skipped", f"group already at {running} >= {target}", now=now,
                                old_size=running)
        allowed, limit = self._allowed_target(group, target, now=now)
        if allowed <= running:
            return self._finish(action, entry, "skipped", f"{limit} at execution: {group.id} stays at {running}",
                                now=now, old_size=running)
        if allowed < target:
            log.info("scale-up of %s shrunk at execution: %d instead of %d (%s)", group.id, allowed, target, limit)
            target = allowed
            action = replace(action, target_size=target)
        need = target - running
        start = sorted(state.stopped, key=_instance_order)[:need]
        grow = need - len(start)
        if self._settings.dry_run:
            return self._finish(action, entry, "dry-run", f"would grow {group.id} {running} -> {target} "
                                f"(starting {len(start)} deallocated instance(s))", now=now, old_size=running)
        log.info("growing %s %d -> %d: starting %d deallocated instance(s), adding %d (action %s)",
                 group.id, running, target, len(start), grow, action.id)
        self._status_event("ScaledUpGroup", f"Scale-up: setting group {group.id} size to {target} instead of "
                           f"{running} (max: {group.max_size})", now=now)
        action = replace(action, from_size=group.target_size, resized_to=group.target_size + grow if grow else None,
                         starting=tuple(start))
        # Recorded before the ARM calls: a crash after them leaves a redelivery that finds the group at its
        # target and skips, and the scale-down delay and the provision timeout must still count from now.
        self._update_group(group.id, lambda s: replace(s, last_scale_up=now))
        operation, kind = None, "resize"
        if start:
            # Starting is idempotent: a crash before the state update below repeats it harmlessly.
            operation, kind = self._ports.provider.begin_start_instances(group, start), "start"
            self._update_group(group.id, lambda s: replace(s, stopped=s.stopped - set(start)))
        if grow:
            try:
                operation, kind = self._ports.provider.begin_resize(group, group.target_size + grow), "resize"
            except ComputeError as exc:
                if exc.code not in ALLOCATION_FAILURES:
                    raise
                # ARM refused at once (quota, SKU, policy): the same outcome as a failed operation.
                operation = Operation(token="", status="Failed", error_code=exc.code, error_message=str(exc))
        assert operation is not None
        # With both, the capacity PATCH is followed; instances that fail to start show up as nodes that
        # never become Ready, which MAX_NODE_PROVISION_TIME turns into a backoff.
        return self._follow(action, entry, operation, next_step="confirm", now=now, kind=kind)

    def _allowed_target(self, group: NodeGroup, target: int, *, now: datetime) -> tuple[int, str | None]:
        """How far the group may grow now: the cluster-wide limits and MAX_NODES_PER_SCALE_UP, re-checked
        against the world as it is at execution, not as it was when the poll decided."""
        snapshot = observe(self._ports, now=now)
        states = {g.id: self._ports.state.get_group(g.id) for g in snapshot.groups}
        snapshot = running_sizes(snapshot, states)
        return allowed_target(snapshot, group.id, target, limits=self._settings.cluster_limits,
                              max_nodes_per_scale_up=self._settings.max_nodes_per_scale_up,
                              exclude={n.name for n in snapshot.nodes if is_virtual_node(n)})

    def _confirm_resize(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        kind, token = _untag(entry.operation, default="resize")
        check = self._ports.provider.get_start_operation if kind == "start" else self._ports.provider.get_resize_operation
        return self._follow(action, entry, check(token), next_step="confirm", now=now, kind=kind)

    # -- scale down ----------------------------------------------------------------
    # A scale-down names one node, or several empty nodes of one group removed in bulk. A node
    # that turns out not removable is given back (uncordoned, reservation released) and the
    # action carries on with the others; the message of each next step names only those left.

    def _cordon(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        group = self._ports.provider.get_node_group(action.group)
        if group is None:
            return self._reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True, entry=entry)
        # Validate every node before touching any: a providerID that contradicts the world rejects the action.
        nodes: dict[str, Node] = {}
        for target in action.targets:
            node = self._ports.cluster.get_node(target.node)
            if node is None:
                continue
            ref = node.instance
            if ref is None or ref.group_id != group.id or node.provider_id.lower() != target.provider_id.lower():
                return self._reject(
                    action, f"node {node.name} (providerID {node.provider_id!r}) is not the decided instance of {group.id}",
                    now=now, poison=True, entry=entry,
                )
            nodes[target.node] = node
        skipped: list[str] = []
        kept: list[str] = []
        instances = self._instances(group, action)
        for target in action.targets:
            node = nodes.get(target.node)
            refusal = self._removable(group, node, target, instances, action.id, now=now)
            if refusal is None:
                kept.append(target.node)
            else:
                skipped.append(f"{target.node}: {refusal}")
                # An earlier delivery of this step may have reserved or cordoned it before a crash.
                self._give_back(action, target.node, refusal, now=now, quiet=True)
        if not kept:
            return self._finish(action, entry, "skipped", "; ".join(skipped), now=now)
        if self._settings.dry_run:
            for name in kept:
                self._update_group(group.id, lambda s, name=name: s.without_removal(name))
            return self._finish(action, entry, "dry-run", f"would remove node(s) {', '.join(kept)}", now=now)
        for name in kept:
            log.info("cordoning %s for removal (action %s)", name, action.id)
            if action.removal_kind == "empty":
                self._status_event("ScaleDownEmpty", f'Scale-down: removing empty node "{name}"', now=now)
            self._ports.cluster.cordon(name, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
            self._ports.events.emit(ClusterEvent("default", "Node", name, "", "ScaleDown",
                                                 f"marked the node as toBeDeleted/unschedulable: {action.reason}", now))
        if skipped:
            log.info("action %s goes on without %s", action.id, "; ".join(skipped))
        following = action.keeping(kept).at_step("drain", now=now)
        # From here on the ledger names exactly the nodes checked against the world above.
        record = ledger.record_of(following)
        if action.removal_kind == "empty" and all(self._drain_of(name, now=now).empty for name in kept):
            # Still empty now that no pod can land (cluster-autoscaler's empty-node path): the delete
            # goes out at once, two queue hops sooner, so the node's parallelism slot is free sooner.
            # A pod bound just before the taint makes the drain step run as for any node. The delete
            # step is idempotent, so a redelivery of this step after a crash repeats nothing.
            # The group and instances read above are milliseconds old: the delete reuses them (two ARM reads fewer).
            entry = ledger.update(self._ports.state, entry, record=record)
            delete = following.at_step("delete", now=now)
            try:
                return self._delete_from(delete, entry, group, instances, now=now)
            except (ComputeError, ClusterError) as exc:
                # The nodes are cordoned and recorded: throttling or a passing fault retries the delete
                # step, never this one (which would cordon again and emit its events a second time).
                result = self._after_fault(delete, entry, exc, now=now)
                if result is None:
                    raise
                return result
        return self._continue(following, entry, delay=timedelta(0), now=now, record=record)

    def _instances(self, group: NodeGroup, action: ScaleAction) -> dict[str, Instance | None]:
        """The instances of the action's targets by instance id (None: gone), in as few ARM reads as can be.

        ARM budgets GETs per scale set (12 a minute): one per node of a bulk removal, every step,
        starves everything else on the scale set, so several targets cost one list instead.
        """
        if len(action.targets) == 1:
            (target,) = action.targets
            return {target.instance_id: self._ports.provider.get_instance(group, target.instance_id)}
        listed = {i.instance_id: i for i in self._ports.provider.list_instances(group)}
        return {t.instance_id: listed.get(t.instance_id) for t in action.targets}

    def _removable(self, group: NodeGroup, node: Node | None, target: RemovalTarget,
                   instances: Mapping[str, Instance | None], action_id: str, *, now: datetime) -> str | None:
        """Why the node may not be removed now, or None once it is reserved for this action."""
        if node is None:
            return "node no longer exists"
        if instances[target.instance_id] is None:
            return f"instance {target.instance_id} is not in {group.id}"
        pinned = self._drain_of(node.name, now=now).pinned_by
        if pinned:
            return f"no longer removable: {pinned}"
        return self._reserve_removal(group, node.name, action_id, now=now)

    def _drain_of(self, node_name: str, *, now: datetime) -> NodeDrain:
        pods = self._ports.cluster.list_pods_on_node(node_name)
        # Budgets decide only whether a kube-system pod may move; DaemonSet and mirror pods (kube-proxy and
        # the like, on every node) never move, so they cost no list call.
        system = any(p.namespace == KUBE_SYSTEM and not p.is_node_bound_system_pod for p in pods)
        budgets = self._ports.cluster.list_disruption_budgets() if system else []
        return drain_of(pods, drain_rules(self._settings), budgets, now=now)

    def _drain(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        """Evict the pods that may move, wait for batch pods to finish, then go on to delete.

        Runs again every few seconds while pods are leaving, every BATCH_CHECK_INTERVAL while
        only batch pods run; never waits in-process.
        """
        state = self._ports.state.get_group(action.group)
        kept: list[str] = []
        given_back: list[str] = []
        moving = waiting = 0
        for name in action.nodes:
            if state.deleting.get(name) != action.id:
                given_back.append(f"{name}: given back earlier")  # by an interrupted delivery of this step
                continue
            if name in state.reclaim:
                given_back.append(self._give_back(action, name, "pending pods can use the node", now=now, reclaimed=True))
                continue
            left = self._drain_node(action, name, now=now)
            if isinstance(left, str):
                given_back.append(left)
                continue
            kept.append(name)
            moving += left[0]
            waiting += left[1]
        if not kept:
            return self._finish(action, entry, "skipped", "; ".join(given_back), now=now)
        if not moving and not waiting:
            return self._continue(action.keeping(kept).at_step("delete", now=now), entry, delay=timedelta(0), now=now)
        delay = self._settings.step_retry_delay if moving else self._settings.batch_check_interval
        detail = f"{moving} pod(s) leaving" if moving else f"waiting for {waiting} batch pod(s)"
        return self._continue(action.keeping(kept).retried(), entry, delay=delay, now=now, detail=detail)

    def _drain_node(self, action: ScaleAction, name: str, *, now: datetime) -> tuple[int, int] | str:
        """One node's drain pass: (pods still to leave, batch pods waited for), or why it was given back."""
        drain = self._drain_of(name, now=now)
        if drain.pinned_by is not None:
            # A pod that must not be disrupted landed before the taint did: keep the node.
            return self._give_back(action, name, f"no longer removable: {drain.pinned_by}", now=now)
        started = action.step_started_at or action.created_at
        move, wait = list(drain.move), list(drain.wait)
        evict_from = started
        timeout = self._settings.batch_drain_timeout
        if wait and timeout > timedelta(0) and now - started >= timeout:
            log.warning("node %s: batch pods still running after BATCH_DRAIN_TIMEOUT (%s); evicting them: %s",
                        name, timeout, ", ".join(p.key for p in wait[:3]))
            move, wait, evict_from = move + wait, [], started + timeout
        leaving = [p for p in move if not p.deleting]
        if leaving and now - evict_from > self._settings.max_pod_eviction_time:
            return self._give_back(action, name, "pods not evicted within MAX_POD_EVICTION_TIME: "
                                   f"{', '.join(p.key for p in leaving[:3])}", now=now)
        for pod in leaving:
            outcome = self._ports.cluster.evict(pod.namespace, pod.name, grace_period_seconds=self._grace(pod))
            log.info("evicting %s from %s: %s", pod.key, name, outcome)
            telemetry.record_eviction(outcome)
            if outcome == "evicted":
                self._ports.events.emit(ClusterEvent(
                    pod.namespace, "Pod", pod.name, pod.uid, "ScaleDown",
                    f"deleting pod for node scale down (node {name})", now))
        return len(move), len(wait)

    def _grace(self, pod: Pod) -> int | None:
        """The pod's own grace period, capped at MAX_GRACEFUL_TERMINATION_SEC (None: the pod's own applies)."""
        cap = self._settings.max_graceful_termination_sec
        own = pod.termination_grace_seconds if pod.termination_grace_seconds is not None else DEFAULT_GRACE_SECONDS
        return cap if own > cap else None

    def _delete(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        group = self._ports.provider.get_node_group(action.group)
        if group is None:
            return self._continue(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
        return self._delete_from(action, entry, group, self._instances(group, action), now=now)

    def _delete_from(self, action: ScaleAction, entry: LedgerEntry, group: NodeGroup,
                     instances: Mapping[str, Instance | None], *, now: datetime) -> ExecutionResult:
        """The delete step, given the group and the targets' instances as just read."""
        found = [(t, instance) for t in action.targets if (instance := instances[t.instance_id]) is not None]
        live = [t for t, _ in found]
        if not live or any(instance.deleting for _, instance in found):
            # Already gone or going (a crash after the delete call): never delete twice.
            return self._continue(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
        committed = self._commit_removals(group.id, [t.node for t in live], action.id)
        given_back = {t.node: self._give_back(action, t.node, "pending pods can use the node", now=now, reclaimed=True)
                      for t in live if t.node not in committed}
        if len(given_back) == len(action.targets):
            return self._finish(action, entry, "skipped", "; ".join(given_back.values()), now=now)
        # Nodes whose instance vanished on its own stay in the action, so confirm cleans them up too.
        action = action.keeping([name for name in action.nodes if name not in given_back])
        ids = [t.instance_id for t in live if t.node not in given_back]
        if not ids:
            return self._continue(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
        return self._remove_instances(action, entry, group, ids, now=now)

    def _remove_instances(self, action: ScaleAction, entry: LedgerEntry, group: NodeGroup, ids: list[str], *,
                          now: datetime) -> ExecutionResult:
        """Delete the instances, or deallocate them with SCALE_DOWN_MODE=deallocate (idempotent, so repeatable)."""
        verb = removal_verb(self._settings, group)  # deallocate, unless the group may keep no instance stopped
        log.info("%s instance(s) %s of %s (node(s) %s, action %s)", "deleting" if verb == "delete" else "deallocating",
                 ", ".join(ids), group.id, ", ".join(action.nodes), action.id)
        if verb == "deallocate":
            operation = self._ports.provider.begin_deallocate_instances(group, ids)
        else:
            operation = self._ports.provider.begin_delete_instances(group, ids)
        return self._follow(action, entry, operation, next_step="confirm", now=now, kind=verb)

    def _confirm_delete(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        if entry.operation:
            kind, token = _untag(entry.operation, default="delete")
            check = (self._ports.provider.get_deallocate_operation if kind == "deallocate"
                     else self._ports.provider.get_delete_operation)
            return self._follow(action, entry, check(token), next_step="confirm", now=now, kind=kind)
        group = self._ports.provider.get_node_group(action.group)
        instances = self._instances(group, action) if group is not None else {}
        if group is not None and removal_verb(self._settings, group) == "deallocate":
            # No operation recorded (a crash right after the call): deallocating again is harmless.
            ids = [t.instance_id for t in action.targets if instances[t.instance_id]]
            if ids:
                return self._remove_instances(action, entry, group, ids, now=now)
        # No operation recorded (a crash right after the delete call): wait until the instances are gone.
        if any(instances.values()):
            return self._continue(action.retried(), entry, delay=self._settings.step_retry_delay, now=now)
        return self._finish_removal(action, entry, now=now)

    def _finish_removal(self, action: ScaleAction, entry: LedgerEntry, *, now: datetime,
                        deallocated: bool = False) -> ExecutionResult:
        """The instances are gone (or deallocated): remove lingering Node objects, release the reservations."""
        for name in action.nodes:
            self._ports.cluster.delete_node(name)
            self._ports.state.clear_unneeded(name)

        def release(state: GroupState) -> GroupState:
            for name in action.nodes:
                state = state.without_removal(name)
            if deallocated:
                ids = {t.instance_id for t in action.targets}
                state = replace(state, stopped=state.stopped | ids,
                                # A redelivery keeps the first time; an instance stopped again gets a new one.
                                stopped_at={**state.stopped_at, **{i: now for i in ids - state.stopped}})
            return replace(state, last_scale_down=now)

        self._update_group(action.group, release)
        if deallocated:
            enforce_deallocated_max(self._ports, self._settings, action.group)  # SCALE_DOWN_DEALLOCATED_MAX
        return self._finish(action, entry, "succeeded", f"removed node(s) {', '.join(action.nodes)}", now=now)

    def _reserve_removal(self, group: NodeGroup, node: str, action_id: str, *, now: datetime) -> str | None:
        """Hold the node in the group's in-flight removals, unless a rule forbids it (compare-and-swap).

        The deciding poll reserved it already (`reconcile.reserve_decided`); the rules are checked
        again here, against the group as it is now.
        """
        delays = scale_down_options(self._settings).delays

        def reserve(state: GroupState) -> tuple[GroupState | None, str | None]:
            holder = state.deleting.get(node)
            if holder and holder != action_id:
                return None, f"removal already in progress by action {holder}"
            blocked = scale_down_blocked(state, now=now, delays=delays)
            if blocked:
                return None, blocked
            others = len(state.deleting) - (holder == action_id)
            if group.target_size - len(state.stopped) - others - 1 < group.min_size:
                return None, f"group {group.id} would go below its minimum {group.min_size}"
            if holder == action_id:
                return None, None  # reserved by the poll that decided it, or by an earlier delivery of this step
            return replace(state, deleting={**state.deleting, node: action_id}), None

        try:
            return swap_group(self._ports.state, group.id, reserve, what=f"reserve node {node}")
        except StateConflict:
            return "lost the race for the group's state too often; will be decided again"

    def _commit_removals(self, group_id: str, nodes: list[str], action_id: str) -> set[str]:
        """Mark the removals past the point of no return, except of nodes pending pods asked back first.

        One compare-and-swap for all, the same as the pending poll's reclaim request: for each node
        exactly one of them wins. A node no longer reserved for this action (given back before a
        crash) is not committed either.
        """
        def commit(state: GroupState) -> tuple[GroupState | None, set[str]]:
            ours = {n for n in nodes if state.deleting.get(n) == action_id and n not in state.reclaim}
            # Nothing new (ours <= committed): our own earlier, interrupted delivery committed them.
            return (None if ours <= state.committed else replace(state, committed=state.committed | ours)), ours

        # Losing every race raises StateConflict: the step is retried by the queue, nothing committed half-way.
        return swap_group(self._ports.state, group_id, commit, what=f"commit the removal of {', '.join(nodes)}")

    def _give_back(self, action: ScaleAction, node: str, why: str, *, now: datetime, failed: bool = False,
                   reclaimed: bool = False, quiet: bool = False) -> str:
        """Undo what this action did to one node: uncordon and untaint it, release its reservation.

        `quiet`: the cordon step turning down a node it may never have touched; only what this
        action holds is undone, and nothing is said unless there was something to undo.
        """
        state = self._ports.state.get_group(action.group)
        ours = state.deleting.get(node) == action.id
        said = f"{node}: {'cancelled' if reclaimed else 'aborted'}: {why}"
        if quiet and not ours:
            return said
        if reclaimed:
            log.info("removal of %s cancelled: %s (action %s)", node, why, action.id)
        else:
            log.warning("removal of %s aborted: %s (action %s)", node, why, action.id)
        current = self._ports.cluster.get_node(node)
        if current is not None and current.is_being_deleted:
            self._ports.cluster.uncordon(node, taint_key=TO_BE_DELETED_TAINT)
            self._ports.events.emit(ClusterEvent("default", "Node", node, "", "ScaleDownFailed",
                                                 f"scale-down of the node cancelled: {why}", now,
                                                 "Normal" if reclaimed else "Warning"))
            self._ports.state.clear_unneeded(node)  # it was cordoned: its unneeded clock starts over
        # A node turned down before its cordon (the group at its minimum, a cooldown) is as unneeded as it
        # was: its clock runs on, or the next round would wait SCALE_DOWN_UNNEEDED_TIME again for it.

        def release(state: GroupState) -> GroupState:
            if state.deleting.get(node) == action.id:
                state = state.without_removal(node)
            return replace(state, last_failure=now) if failed else state

        self._update_group(action.group, release)
        return said

    def _abort_removal(
        self, action: ScaleAction, entry: LedgerEntry, why: str, *, now: datetime, failed: bool = False,
        error_code: str = "",
    ) -> ExecutionResult:
        """Give every node of the action back and end it."""
        for name in action.nodes:
            self._give_back(action, name, why, now=now, failed=failed)
        outcome: Outcome = "failed" if failed else "skipped"
        return self._finish(action, entry, outcome, f"aborted: {why}", now=now, error_code=error_code)

    # -- common ----------------------------------------------------------------------

    def _follow(
        self, action: ScaleAction, entry: LedgerEntry, operation: Operation, *, next_step: str, now: datetime,
        kind: str,
    ) -> ExecutionResult:
        """Finish, fail, or come back later for a long-running ARM operation of this `kind` (resize, start, ...)."""
        if operation.status == "InProgress":
            # The record is what the next step's message is held to (the sizes a failure returns to).
            entry = ledger.update(self._ports.state, entry, operation=f"{kind}:{operation.token}",
                                  record=ledger.record_of(action))
            following = action.retried() if action.step == next_step else action.at_step(next_step, now=now)
            return self._continue(following, entry, delay=self._settings.step_retry_delay, now=now)
        if operation.status == "Succeeded":
            if action.kind == "scale_down":
                return self._finish_removal(action, entry, now=now, deallocated=kind == "deallocate")
            return self._finish(action, entry, "succeeded", f"{action.group} at {action.target_size}", now=now)
        detail = f"{operation.error_code or operation.status}: {operation.error_message}".strip(": ")
        code = operation.error_code or operation.status
        if action.kind == "scale_down":
            return self._abort_removal(action, entry, detail, now=now, failed=True, error_code=code)
        starting = set(action.starting) if kind == "start" else set()
        # Instances that did not start are deallocated still: they go back on the group's list.
        self._update_group(action.group, lambda s: replace(after_failure(s, now=now, code=code),
                                                            stopped=s.stopped | starting))
        self._return_capacity(action)
        log.warning("scale-up of %s failed (%s): group in backoff, pods go to the next best group", action.group, code)
        self._status_event("FailedToScaleUpGroup", f"Scale-up failed for group {action.group}: {detail}", now=now,
                           type="Warning")
        return self._finish(action, entry, "failed", detail, now=now, error_code=code)

    def _return_capacity(self, action: ScaleAction) -> None:
        """Give back capacity a failed scale-up asked for, unless someone has changed the target since."""
        if action.from_size is None:
            return
        group = self._ports.provider.get_node_group(action.group)
        asked = action.resized_to if action.resized_to is not None else action.target_size
        if action.resized_to is None and action.starting:
            return  # only started instances: no capacity was added
        if group is not None and group.target_size == asked and action.from_size < group.target_size:
            log.info("returning %s to %d after the failed scale-up", group.id, action.from_size)
            self._ports.provider.begin_resize(group, action.from_size)

    def _continue(
        self, following: ScaleAction, entry: LedgerEntry, *, delay: timedelta, now: datetime, detail: str = "",
        record: str | None = None, faulted_since: datetime | None = None,
    ) -> ExecutionResult:
        # Enqueue first, then mark done: a crash in between only repeats this (idempotent) step.
        self._ports.queue.send(following, delay=delay)
        ledger.update(self._ports.state, entry, status="done", updated_at=now, faulted_since=faulted_since,
                      record=entry.record if record is None else record)
        return ExecutionResult("waiting", detail or f"next: {following.step} #{following.attempt}", following.id)

    def _finish(
        self, action: ScaleAction, entry: LedgerEntry, outcome: Outcome, detail: str, *, now: datetime,
        error_code: str = "", old_size: int | None = None,
    ) -> ExecutionResult:
        ledger.update(self._ports.state, entry, status="done", outcome=f"{outcome}: {detail}", operation="", updated_at=now)
        log.info("action %s %s: %s", action.id, outcome, detail)
        telemetry.action_ended(action, outcome, detail=detail, now=now, error_code=error_code,
                               dry_run=self._settings.dry_run, old_size=old_size)
        return ExecutionResult(outcome, detail, action.id)

    def _release(self, entry: LedgerEntry, *, now: datetime) -> None:
        try:
            ledger.update(self._ports.state, entry, status="released", updated_at=now)
        except Exception:  # the original error matters more; the lease expires anyway
            log.exception("could not release action %s", entry.action_id)

    def _reject(
        self, action: ScaleAction, reason: str, *, now: datetime, poison: bool, entry: LedgerEntry | None = None,
        outcome: str = "rejected",
    ) -> ExecutionResult:
        log.warning("action %s rejected: %s", action.id, reason)
        if poison:
            self._ports.queue.send_poison(encode_action(action))
        if entry is not None:
            ledger.update(self._ports.state, entry, status="done", outcome=f"rejected: {reason}", updated_at=now)
        else:
            ledger.record_rejection(
                self._ports.state, action_id=action.id, kind=action.kind, group=action.group, reason=reason, now=now
            )
        telemetry.action_ended(action, outcome, detail=reason, now=now, poison=poison, dry_run=self._settings.dry_run)
        return ExecutionResult("rejected", reason, action.id)

    def _reject_raw(self, text: str, reason: str, *, now: datetime) -> ExecutionResult:
        action_id = "invalid-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        log.warning("message rejected (%s): %s", action_id, reason)
        if len(text) > MAX_POISON_CHARS:
            # It never came off a queue whole (a queue message is smaller): keep what fits, say it is cut.
            text = text[:MAX_POISON_CHARS] + f"... [cut: {len(text)} characters in all, {action_id}]"
        self._ports.queue.send_poison(text)
        ledger.record_rejection(self._ports.state, action_id=action_id, kind="invalid", group="", reason=reason, now=now)
        telemetry.message_rejected(action_id, reason, dry_run=self._settings.dry_run)
        return ExecutionResult("rejected", reason, action_id)

    def _refuse_contradiction(self, action: ScaleAction, why: str, *, now: datetime) -> ExecutionResult:
        """A delivery that contradicts the ledger's record (forged, corrupted or stale): do nothing it asks.

        The action it names is left as it is: if the message really was its next step, the action stops
        here and the utilisation poll gives its nodes back once it sees the action idle (`reconcile`).
        The refusal gets a ledger row of its own, the message goes to the poison queue for an operator.
        """
        reason = f"refused: {why}"
        log.error("action %s step %s refused; nothing done: %s", action.id, action.step, why)
        self._ports.queue.send_poison(encode_action(action))
        digest = hashlib.sha256(encode_action(action).encode()).hexdigest()[:12]
        ledger.record_rejection(self._ports.state, action_id=f"{action.id}#refused-{digest}", kind=action.kind,
                                group=action.group, reason=reason, now=now)
        if action.kind == "scale_down":
            for name in action.nodes:
                self._ports.events.emit(ClusterEvent("default", "Node", name, "", "ScaleDownFailed",
                                                     f"a scale-down step was refused: {why}", now, "Warning"))
        telemetry.action_ended(action, "rejected", detail=reason, now=now, poison=True, dry_run=self._settings.dry_run)
        return ExecutionResult("rejected", reason, action.id)

    def _after_fault(self, action: ScaleAction, entry: LedgerEntry, exc: ComputeError | ClusterError, *,
                     now: datetime) -> ExecutionResult | None:
        """Throttling or a fault that passes: this step (`action`) again later. None: neither (the caller raises)."""
        if isinstance(exc, ComputeError) and exc.code == "TooManyRequests":
            # Throttling is not the action's fault: wait outside this invocation, at least as long as ARM
            # asks and longer each time in a row, so that actions sharing a scale set's budget do not
            # each take the one token that came back and starve one another (a livelock, seen in replays).
            delay = throttled_delay(exc.retry_after, self._settings.step_retry_delay, attempt=action.attempt)
            if action.kind == "scale_down" and action.step == "delete":
                # Until this delete goes out, a removal the planner adds to the group would only wait behind it
                # for the same budget: the planner gives those slots to other groups (`GroupState.throttled_until`).
                until = now + delay
                self._update_group(action.group, lambda s: replace(
                    s, throttled_until=max(until, s.throttled_until or until)))
            return self._continue(action.retried(), entry, delay=delay, now=now, detail=f"throttled by ARM: {exc}")
        if exc.transient:
            source = "ARM" if isinstance(exc, ComputeError) else "Kubernetes API"
            return self._after_transient_fault(action, entry, exc, now=now, source=source)
        return None

    def _after_transient_fault(self, action: ScaleAction, entry: LedgerEntry, exc: ComputeError | ClusterError, *,
                               now: datetime, source: str) -> ExecutionResult:
        """ARM or the Kubernetes API failed in a way that passes (5xx, a timeout): come back later, until
        TRANSIENT_FAULT_DEADLINE.

        Never left to the host's retries, which are seconds apart and end in the poison queue with the
        action half done; past the deadline the action ends as a recorded failure.
        """
        since = entry.faulted_since or now
        if now - since < TRANSIENT_FAULT_DEADLINE:
            retry_after = exc.retry_after if isinstance(exc, ComputeError) else None
            delay = throttled_delay(retry_after, self._settings.step_retry_delay, attempt=action.attempt)
            log.warning("action %s step %s: %s fault, again in %ss: %s", action.id, action.step, source,
                        int(delay.total_seconds()), exc)
            return self._continue(action.retried(), entry, delay=delay, now=now, faulted_since=since,
                                  detail=f"{source} fault, retrying: {exc}")
        why = f"{source} kept failing for {now - since} (TRANSIENT_FAULT_DEADLINE {TRANSIENT_FAULT_DEADLINE}): {exc}"
        code = (exc.code if isinstance(exc, ComputeError) else "") or "TransientFault"
        return self._fail(action, entry, why, code=code, now=now)

    def _fail(self, action: ScaleAction, entry: LedgerEntry, why: str, *, code: str, now: datetime) -> ExecutionResult:
        """End the action as failed: release what it holds, back the group off, record why."""
        if action.kind == "scale_up":
            # No capacity is returned: the resize may well have gone through; nodes that never come
            # are caught by MAX_NODE_PROVISION_TIME, never by scaling in arbitrary instances.
            self._update_group(action.group, lambda s: after_failure(s, now=now, code=code))
            return self._finish(action, entry, "failed", why, now=now, error_code=code)
        # A node whose delete was committed may be on its way out: it stays reserved, and the utilisation
        # poll's reconcile removes its Node object once the instance is gone, or gives it back. The rest
        # are given back now, uncordoned.
        committed = self._ports.state.get_group(action.group).committed
        for name in action.nodes:
            if name not in committed:
                self._give_back(action, name, why, now=now, failed=True)
        self._update_group(action.group, lambda s: replace(s, last_failure=now))
        return self._finish(action, entry, "failed", why, now=now, error_code=code)

    def _fail_last_delivery(self, action: ScaleAction, exc: Exception, *, now: datetime) -> None:
        """The host's last delivery failed too: end the action with a recorded outcome before it is poisoned."""
        entry = self._ports.state.get_ledger_entry(action.id)
        if entry is None or entry.outcome:
            return
        try:
            self._fail(action, entry, f"failed on the last delivery: {type(exc).__name__}: {exc}",
                       code=type(exc).__name__, now=now)
        except Exception:  # the original error is what the host logs; this one only adds to it
            log.exception("action %s: could not record the failure of its last delivery", action.id)

    def _status_event(self, reason: str, message: str, *, now: datetime,
                      type: Literal["Normal", "Warning"] = "Normal") -> None:
        event = status_event(self._settings, reason, message, now=now, type=type)
        if event is not None:
            self._ports.events.emit(event)

    def _update_group(self, group_id: str, change: Callable[[GroupState], GroupState]) -> None:
        try:
            update_group(self._ports.state, group_id, change, what="update")
        except StateConflict as exc:
            # Bookkeeping after the fact (a cooldown, a released reservation the orphan sweep also finds):
            # the action's outcome stands.
            log.warning("%s; cooldown may be off by one action", exc)


MAX_THROTTLED_DELAY = timedelta(minutes=5)
# How long a step keeps retrying ARM faults (5xx, timeouts) before its action fails: ARM incidents
# of a few minutes are common and pass; one that lasts longer is better surfaced than waited out.
TRANSIENT_FAULT_DEADLINE = timedelta(minutes=10)
# host.json's extensions.queues.maxDequeueCount (a test holds them equal).
HOST_MAX_DEQUEUE_COUNT = 5
# What of a rejected text goes to the poison queue: base64 makes 48 KiB the most a message can carry.
MAX_POISON_CHARS = 32 * 1024
# Tolerated difference between the deciding poll's clock and ours.
CLOCK_SKEW = timedelta(minutes=5)


def throttled_delay(retry_after: float | None, step_retry_delay: timedelta, *, attempt: int) -> timedelta:
    """How long a throttled step waits: ARM's Retry-After (or STEP_RETRY_DELAY), doubled per attempt, capped."""
    base = max(retry_after or 0.0, step_retry_delay.total_seconds(), 1.0)
    return min(timedelta(seconds=base * 2 ** min(attempt, 8)), MAX_THROTTLED_DELAY)


def _untag(stored: str, *, default: str) -> tuple[str, str]:
    """(kind, token) from a ledger operation `kind:token`; a bare token (older entries) is of the default kind."""
    kind, sep, token = stored.partition(":")
    if sep and kind in ("resize", "delete", "start", "deallocate"):
        return kind, token
    return default, stored


def _instance_order(instance_id: str) -> tuple[int, str]:
    return (int(instance_id), "") if instance_id.isdigit() else (1 << 62, instance_id)
