"""The executor: runs one scale action message, one step at a time.

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
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from shared.actions import InvalidAction, ScaleAction, decode_action, encode_action
from shared.domain import TO_BE_DELETED_TAINT, GroupState, NodeGroup, Pod, Taint
from shared.engine.backoff import ALLOCATION_FAILURES, after_failure
from shared.engine.cooldowns import scale_down_blocked
from shared.engine.drainability import KUBE_SYSTEM, NodeDrain, drain_of
from shared.ports import ClusterEvent, ComputeError, LedgerEntry, Operation, Ports
from shared.services import ledger
from shared.services.utilization import drain_rules, scale_down_options
from shared.settings import Settings

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "waiting", "skipped", "rejected", "duplicate", "failed", "dry-run"]

_CAS_ATTEMPTS = 5
DEFAULT_GRACE_SECONDS = 30  # the API's default terminationGracePeriodSeconds


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

    def execute(self, raw: str | bytes, *, now: datetime) -> ExecutionResult:
        try:
            action = decode_action(raw)
        except InvalidAction as exc:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            return self._reject_raw(text, str(exc), now=now)

        entry = self._ports.state.get_ledger_entry(action.id)
        if entry is None and not action.is_first_step:
            return self._reject(action, "a follow-up step with no ledger entry", now=now, poison=True)
        if entry is None and now > action.expires_at:
            return self._reject(action, f"expired at {action.expires_at.isoformat()} before it started", now=now, poison=False)

        claimed = ledger.claim(self._ports.state, action, now=now, lease=self._settings.action_lease)
        if claimed is None:
            log.info("action %s step %s: duplicate delivery suppressed", action.id, action.step)
            return ExecutionResult("duplicate", action_id=action.id)
        try:
            return self._run_step(action, claimed, now=now)
        except ComputeError as exc:
            if exc.code == "TooManyRequests":
                # Throttling is not the action's fault: wait as ARM asks, outside this invocation.
                delay = timedelta(seconds=exc.retry_after or self._settings.step_retry_delay.total_seconds())
                return self._continue(action.retried(), claimed, delay=delay, now=now, detail=f"throttled by ARM: {exc}")
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
        group = self._ports.compute.get_node_group(action.group)
        if group is None:
            return self._reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True, entry=entry)
        target = action.target_size or 0
        if not group.min_size <= target <= group.max_size:
            return self._reject(
                action, f"target size {target} is outside the group's limits {group.min_size}..{group.max_size}",
                now=now, poison=True, entry=entry,
            )
        if group.target_size >= target:
            return self._finish(action, entry, "skipped", f"group already at {group.target_size} >= {target}", now=now)
        if self._settings.dry_run:
            return self._finish(action, entry, "dry-run", f"would resize {group.id} {group.target_size} -> {target}", now=now)
        log.info("resizing %s %d -> %d (action %s)", group.id, group.target_size, target, action.id)
        action = replace(action, from_size=group.target_size)
        try:
            operation = self._ports.compute.begin_resize(group, target)
        except ComputeError as exc:
            if exc.code not in ALLOCATION_FAILURES:
                raise
            # ARM refused at once (quota, SKU, policy): the same outcome as a failed operation.
            operation = Operation(token="", status="Failed", error_code=exc.code, error_message=str(exc))
        self._update_group(group.id, lambda s: replace(s, last_scale_up=now))
        return self._follow(action, entry, operation, next_step="confirm", now=now)

    def _confirm_resize(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        operation = self._ports.compute.get_resize_operation(entry.operation)
        return self._follow(action, entry, operation, next_step="confirm", now=now)

    # -- scale down ----------------------------------------------------------------

    def _cordon(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        assert action.node is not None and action.provider_id is not None
        group = self._ports.compute.get_node_group(action.group)
        if group is None:
            return self._reject(action, f"group {action.group!r} is not a discovered node group", now=now, poison=True, entry=entry)
        node = self._ports.cluster.get_node(action.node)
        if node is None:
            return self._finish(action, entry, "skipped", "node no longer exists", now=now)
        ref = node.instance
        if ref is None or ref.group_id != group.id or node.provider_id.lower() != action.provider_id.lower():
            return self._reject(
                action, f"node {node.name} (providerID {node.provider_id!r}) is not the decided instance of {group.id}",
                now=now, poison=True, entry=entry,
            )
        if self._ports.compute.get_instance(group, ref.instance_id) is None:
            return self._finish(action, entry, "skipped", f"instance {ref.instance_id} is not in {group.id}", now=now)
        pinned = self._drain_of(node.name).pinned_by
        if pinned:
            return self._finish(action, entry, "skipped", f"no longer removable: {pinned}", now=now)
        refusal = self._reserve_removal(group, node.name, action.id, now=now)
        if refusal:
            return self._finish(action, entry, "skipped", refusal, now=now)
        if self._settings.dry_run:
            self._update_group(group.id, lambda s: replace(s, deleting=_without(s.deleting, node.name)))
            return self._finish(action, entry, "dry-run", f"would remove node {node.name}", now=now)
        log.info("cordoning %s for removal (action %s)", node.name, action.id)
        self._ports.cluster.cordon(node.name, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
        self._ports.events.emit(ClusterEvent("default", "Node", node.name, "", "ScaleDown",
                                             f"marked the node as toBeDeleted/unschedulable: {action.reason}", now))
        return self._continue(action.at_step("drain", now=now), entry, delay=timedelta(0), now=now)

    def _drain_of(self, node_name: str) -> NodeDrain:
        pods = self._ports.cluster.list_pods_on_node(node_name)
        budgets = self._ports.cluster.list_disruption_budgets() if any(p.namespace == KUBE_SYSTEM for p in pods) else []
        return drain_of(pods, drain_rules(self._settings), budgets)

    def _drain(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        """Evict the pods that may move, wait for batch pods to finish, then go on to delete.

        Runs again every few seconds while pods are leaving, every BATCH_CHECK_INTERVAL while
        only batch pods run; never waits in-process.
        """
        assert action.node is not None
        if action.node in self._ports.state.get_group(action.group).reclaim:
            return self._abort_removal(action, entry, "pending pods can use the node", now=now, reclaimed=True)
        drain = self._drain_of(action.node)
        if drain.pinned_by is not None:
            # A pod that must not be disrupted landed before the taint did: keep the node.
            return self._abort_removal(action, entry, f"no longer removable: {drain.pinned_by}", now=now)
        started = action.step_started_at or action.created_at
        move, wait = list(drain.move), list(drain.wait)
        evict_from = started
        timeout = self._settings.batch_drain_timeout
        if wait and timeout > timedelta(0) and now - started >= timeout:
            log.warning("node %s: batch pods still running after BATCH_DRAIN_TIMEOUT (%s); evicting them: %s",
                        action.node, timeout, ", ".join(p.key for p in wait[:3]))
            move, wait, evict_from = move + wait, [], started + timeout
        leaving = [p for p in move if not p.deleting]
        if not move and not wait:
            return self._continue(action.at_step("delete", now=now), entry, delay=timedelta(0), now=now)
        if leaving and now - evict_from > self._settings.max_pod_eviction_time:
            return self._abort_removal(
                action, entry, f"pods not evicted within MAX_POD_EVICTION_TIME: {', '.join(p.key for p in leaving[:3])}",
                now=now,
            )
        for pod in leaving:
            outcome = self._ports.cluster.evict(pod.namespace, pod.name, grace_period_seconds=self._grace(pod))
            log.info("evicting %s from %s: %s", pod.key, action.node, outcome)
            if outcome == "evicted":
                self._ports.events.emit(ClusterEvent(
                    pod.namespace, "Pod", pod.name, pod.uid, "ScaleDown",
                    f"deleting pod for node scale down (node {action.node})", now))
        delay = self._settings.step_retry_delay if move else self._settings.batch_check_interval
        detail = f"waiting for {len(wait)} batch pod(s)" if not move else f"{len(move)} pod(s) leaving"
        return self._continue(action.retried(), entry, delay=delay, now=now, detail=detail)

    def _grace(self, pod: Pod) -> int | None:
        """The pod's own grace period, capped at MAX_GRACEFUL_TERMINATION_SEC (None: the pod's own applies)."""
        cap = self._settings.max_graceful_termination_sec
        own = pod.termination_grace_seconds if pod.termination_grace_seconds is not None else DEFAULT_GRACE_SECONDS
        return cap if own > cap else None

    def _delete(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        assert action.provider_id is not None
        group = self._ports.compute.get_node_group(action.group)
        instance_id = action.provider_id.rsplit("/", 1)[-1]
        instance = self._ports.compute.get_instance(group, instance_id) if group else None
        if group is None or instance is None or instance.provisioning_state.lower() == "deleting":
            # Already gone or going (a crash after the delete call): never delete twice.
            return self._continue(action.at_step("confirm", now=now), entry, delay=timedelta(0), now=now)
        if not self._commit_removal(action.group, action.node or ""):
            return self._abort_removal(action, entry, "pending pods can use the node", now=now, reclaimed=True)
        log.info("deleting instance %s of %s (node %s, action %s)", instance_id, group.id, action.node, action.id)
        operation = self._ports.compute.begin_delete_instances(group, [instance_id])
        return self._follow(action, entry, operation, next_step="confirm", now=now)

    def _confirm_delete(self, action: ScaleAction, entry: LedgerEntry, now: datetime) -> ExecutionResult:
        assert action.node is not None and action.provider_id is not None
        if entry.operation:
            return self._follow(action, entry, self._ports.compute.get_delete_operation(entry.operation),
                                next_step="confirm", now=now)
        # No operation recorded (a crash right after the delete call): wait until the instance is gone.
        group = self._ports.compute.get_node_group(action.group)
        instance_id = action.provider_id.rsplit("/", 1)[-1]
        if group is not None and self._ports.compute.get_instance(group, instance_id) is not None:
            return self._continue(action.retried(), entry, delay=self._settings.step_retry_delay, now=now)
        return self._finish_removal(action, entry, now=now)

    def _finish_removal(self, action: ScaleAction, entry: LedgerEntry, *, now: datetime) -> ExecutionResult:
        """The instance is gone: remove a lingering Node object and release the group's reservation."""
        assert action.node is not None
        self._ports.cluster.delete_node(action.node)
        self._ports.state.clear_unneeded(action.node)
        node = action.node
        self._update_group(action.group, lambda s: replace(_released(s, node), last_scale_down=now))
        return self._finish(action, entry, "succeeded", f"removed node {action.node}", now=now)

    def _reserve_removal(self, group: NodeGroup, node: str, action_id: str, *, now: datetime) -> str | None:
        """Add the node to the group's in-flight removals, unless a rule forbids it (compare-and-swap)."""
        delays = scale_down_options(self._settings).delays
        for _ in range(_CAS_ATTEMPTS):
            state = self._ports.state.get_group(group.id)
            holder = state.deleting.get(node)
            if holder == action_id:
                return None  # our own earlier, interrupted delivery reserved it
            if holder:
                return f"removal already in progress by action {holder}"
            blocked = scale_down_blocked(state, now=now, delays=delays)
            if blocked:
                return blocked
            if group.target_size - len(state.deleting) - 1 < group.min_size:
                return f"group {group.id} would go below its minimum {group.min_size}"
            if self._ports.state.update_group(replace(state, deleting={**state.deleting, node: action_id})):
                return None
        return "lost the race for the group's state too often; will be decided again"

    def _commit_removal(self, group_id: str, node: str) -> bool:
        """Mark the removal past the point of no return, unless pending pods asked for the node back first.

        The same compare-and-swap as the pending poll's reclaim request: exactly one of them wins.
        """
        for _ in range(_CAS_ATTEMPTS):
            state = self._ports.state.get_group(group_id)
            if node in state.reclaim:
                return False
            if node in state.committed:
                return True  # our own earlier, interrupted delivery committed it
            if self._ports.state.update_group(replace(state, committed=state.committed | {node})):
                return True
        raise RuntimeError(f"lost the race for group {group_id}'s state {_CAS_ATTEMPTS} times; the step is retried")

    def _abort_removal(
        self, action: ScaleAction, entry: LedgerEntry, why: str, *, now: datetime, failed: bool = False,
        reclaimed: bool = False,
    ) -> ExecutionResult:
        """Give the node back: uncordoned, untainted, no longer reserved; a failure starts the group's cooldown."""
        assert action.node is not None
        if reclaimed:
            log.info("removal of %s cancelled: %s (action %s)", action.node, why, action.id)
        else:
            log.warning("removal of %s aborted: %s (action %s)", action.node, why, action.id)
        if self._ports.cluster.get_node(action.node) is not None:
            self._ports.cluster.uncordon(action.node, taint_key=TO_BE_DELETED_TAINT)
            self._ports.events.emit(ClusterEvent("default", "Node", action.node, "", "ScaleDownFailed",
                                                 f"scale-down of the node cancelled: {why}", now,
                                                 "Normal" if reclaimed else "Warning"))
        node = action.node
        self._ports.state.clear_unneeded(node)  # its unneeded clock starts over, if it ever is again

        def release(state: GroupState) -> GroupState:
            state = _released(state, node)
            return replace(state, last_failure=now) if failed else state

        self._update_group(action.group, release)
        outcome: Outcome = "failed" if failed else "skipped"
        return self._finish(action, entry, outcome, f"{'cancelled' if reclaimed else 'aborted'}: {why}", now=now)

    # -- common ----------------------------------------------------------------------

    def _follow(
        self, action: ScaleAction, entry: LedgerEntry, operation: Operation, *, next_step: str, now: datetime
    ) -> ExecutionResult:
        """Finish, fail, or come back later for a long-running ARM operation."""
        if operation.status == "InProgress":
            entry = ledger.update(self._ports.state, entry, operation=operation.token)
            following = action.retried() if action.step == next_step else action.at_step(next_step, now=now)
            return self._continue(following, entry, delay=self._settings.step_retry_delay, now=now)
        if operation.status == "Succeeded":
            if action.kind == "scale_down":
                return self._finish_removal(action, entry, now=now)
            return self._finish(action, entry, "succeeded", f"{action.group} at {action.target_size}", now=now)
        detail = f"{operation.error_code or operation.status}: {operation.error_message}".strip(": ")
        if action.kind == "scale_down":
            return self._abort_removal(action, entry, detail, now=now, failed=True)
        code = operation.error_code or operation.status
        self._update_group(action.group, lambda s: after_failure(s, now=now, code=code))
        self._return_capacity(action)
        log.warning("scale-up of %s failed (%s): group in backoff, pods go to the next best group", action.group, code)
        return self._finish(action, entry, "failed", detail, now=now)

    def _return_capacity(self, action: ScaleAction) -> None:
        """Give back capacity a failed scale-up asked for, unless someone has changed the target since."""
        if action.from_size is None:
            return
        group = self._ports.compute.get_node_group(action.group)
        if group is not None and group.target_size == action.target_size and action.from_size < group.target_size:
            log.info("returning %s to %d after the failed scale-up", group.id, action.from_size)
            self._ports.compute.begin_resize(group, action.from_size)

    def _continue(
        self, following: ScaleAction, entry: LedgerEntry, *, delay: timedelta, now: datetime, detail: str = ""
    ) -> ExecutionResult:
        # Enqueue first, then mark done: a crash in between only repeats this (idempotent) step.
        self._ports.queue.send(following, delay=delay)
        ledger.update(self._ports.state, entry, status="done", updated_at=now)
        return ExecutionResult("waiting", detail or f"next: {following.step} #{following.attempt}", following.id)

    def _finish(
        self, action: ScaleAction, entry: LedgerEntry, outcome: Outcome, detail: str, *, now: datetime
    ) -> ExecutionResult:
        ledger.update(self._ports.state, entry, status="done", outcome=f"{outcome}: {detail}", operation="", updated_at=now)
        log.info("action %s %s: %s", action.id, outcome, detail)
        return ExecutionResult(outcome, detail, action.id)

    def _release(self, entry: LedgerEntry, *, now: datetime) -> None:
        try:
            ledger.update(self._ports.state, entry, status="released", updated_at=now)
        except Exception:  # the original error matters more; the lease expires anyway
            log.exception("could not release action %s", entry.action_id)

    def _reject(
        self, action: ScaleAction, reason: str, *, now: datetime, poison: bool, entry: LedgerEntry | None = None
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
        return ExecutionResult("rejected", reason, action.id)

    def _reject_raw(self, text: str, reason: str, *, now: datetime) -> ExecutionResult:
        action_id = "invalid-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        log.warning("message rejected (%s): %s", action_id, reason)
        self._ports.queue.send_poison(text)
        ledger.record_rejection(self._ports.state, action_id=action_id, kind="invalid", group="", reason=reason, now=now)
        return ExecutionResult("rejected", reason, action_id)

    def _update_group(self, group_id: str, change: Callable[[GroupState], GroupState]) -> None:
        for _ in range(_CAS_ATTEMPTS):
            state = self._ports.state.get_group(group_id)
            if self._ports.state.update_group(change(state)):
                return
        log.warning("group %s: state update lost %d races; cooldown may be off by one action", group_id, _CAS_ATTEMPTS)


def _without(deleting: Mapping[str, str], node: str) -> dict[str, str]:
    return {name: holder for name, holder in deleting.items() if name != node}


def _released(state: GroupState, node: str) -> GroupState:
    """The group's state with no trace of the node's removal: reservation, commitment, reclaim request."""
    return replace(state, deleting=_without(state.deleting, node), committed=state.committed - {node},
                   reclaim={name: at for name, at in state.reclaim.items() if name != node})
