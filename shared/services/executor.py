"""The executor: runs one scale action message, one step at a time (and hands scale-down rounds to the poll).

Each action kind is a step table (`shared.services.execution.StepTable`): `scale_up_steps`,
`scale_down_steps`, `backfill_steps` (moving a pod off a virtual node), `standby_steps` (refilling a
group's warm standby) and `atomic_steps` (a ProvisioningRequest's nodes all at once, or none) today.
This module is the protocol around them: decode, expire, hold a delivery to what the ledger recorded, claim the step, run
the named step's handler, and turn faults into retries or recorded failures. A new action kind is one
new step table added to `TABLES`.

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
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared import telemetry
from shared.actions import (
    AtomicScaleUp,
    Backfill,
    InvalidAction,
    RefillStandby,
    ScaleAction,
    ScaleDown,
    ScaleDownRound,
    ScaleUp,
    decode_message,
    encode_action,
)
from shared.ports import ClusterError, ComputeError, LedgerEntry, Ports, UnreadableRow
from shared.services import atomic_steps, backfill_steps, ledger, scale_down_steps, scale_up_steps, standby_steps
from shared.services.execution import (
    CLOCK_SKEW,
    HOST_MAX_DEQUEUE_COUNT,
    MAX_POISON_CHARS,
    MAX_THROTTLED_DELAY,
    TRANSIENT_FAULT_DEADLINE,
    ExecutionResult,
    Outcome,
    Run,
    StepTable,
    throttled_delay,
)
from shared.services.rounds import take_round
from shared.services.utilization import run_utilization_poll
from shared.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["Executor", "ExecutionResult", "Outcome", "TABLES", "HOST_MAX_DEQUEUE_COUNT", "MAX_THROTTLED_DELAY",
           "TRANSIENT_FAULT_DEADLINE", "throttled_delay"]

# One step table per action kind, by the action's class.
TABLES: dict[type, StepTable[Any]] = {ScaleUp: scale_up_steps.TABLE, ScaleDown: scale_down_steps.TABLE,
                                      Backfill: backfill_steps.TABLE, RefillStandby: standby_steps.TABLE,
                                      AtomicScaleUp: atomic_steps.TABLE}


class Executor:
    def __init__(self, ports: Ports, settings: Settings) -> None:
        self._ports = ports
        self._settings = settings

    def _run(self, action: ScaleAction) -> Run[Any]:
        return Run(self._ports, self._settings, TABLES[type(action)], action.step)

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
        run = self._run(action)
        try:
            entry = self._ports.state.get_ledger_entry(action.id)
        except UnreadableRow as exc:
            return self._unreadable_ledger_row(run, action, exc, now=now)
        if entry is None and not action.is_first_step:
            # No action of ours ever got this far: a forged or corrupted step. Said where operators look, too.
            why = "a follow-up step with no ledger entry"
            run.table.refused(run, action, why, now)
            return run.reject(action, why, now=now, poison=True)
        if entry is None:
            if action.created_at - now > CLOCK_SKEW:
                return run.reject(action, f"created at {action.created_at.isoformat()}, in the future", now=now,
                                  poison=True)
            # ACTION_TTL bounds a decision's life whatever the message says: a message cannot extend itself.
            expires = min(action.expires_at, action.created_at + self._settings.action_ttl)
            if now > expires:
                why = f"expired at {expires.isoformat()} before it started"
                run.table.expired(run, action, why, now)
                return run.reject(action, why, now=now,
                                  poison=False, outcome="expired")
        elif ledger.decide_claim(entry, action.progress, now=now, lease=self._settings.action_lease) == "claim":
            why = ledger.contradiction(entry, action)
            if why is not None:
                return self._refuse_contradiction(run, action, why, now=now)

        claimed = ledger.claim(self._ports.state, action, now=now, lease=self._settings.action_lease)
        if claimed is None:
            log.info("action %s step %s: duplicate delivery suppressed", action.id, action.step)
            return ExecutionResult("duplicate", action_id=action.id)
        # When this step started is our ledger's word (`ledger.step_started`), never the message's: a replayed
        # step with an old time must not run its deadlines (BATCH_DRAIN_TIMEOUT, MAX_POD_EVICTION_TIME) out early.
        action = replace(action, step_started_at=claimed.step_started_at or now)
        try:
            return run.table.steps[action.step].run(run, action, claimed, now)
        except (ComputeError, ClusterError) as exc:
            result = run.after_fault(action, claimed, exc, now=now)
            if result is not None:
                return result
            self._release(claimed, now=now)
            raise
        except UnreadableRow as exc:
            # A stored row the step needs cannot be read: no retry reads it better. End the action now, with
            # its outcome recorded (the kind's `fail`, or a minimal outcome when that needs the row too).
            log.error("action %s step %s: %s", action.id, action.step, exc)
            return self._fail_recorded(run, action, claimed, f"stored state cannot be read: {exc}", "UnreadableRow",
                                       now=now)
        except Exception:
            # Give the step back so the host's retry of this message may take it at once.
            self._release(claimed, now=now)
            raise

    def _release(self, entry: LedgerEntry, *, now: datetime) -> None:
        try:
            ledger.update(self._ports.state, entry, status="released", updated_at=now)
        except Exception:  # the original error matters more; the lease expires anyway
            log.exception("could not release action %s", entry.action_id)

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

    def _refuse_contradiction(self, run: Run[Any], action: ScaleAction, why: str, *, now: datetime) -> ExecutionResult:
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
        run.table.refused(run, action, why, now)
        telemetry.action_ended(action, "rejected", detail=reason, now=now, poison=True, dry_run=self._settings.dry_run)
        return ExecutionResult("rejected", reason, action.id)

    def _fail_last_delivery(self, action: ScaleAction, exc: Exception, *, now: datetime) -> None:
        """The host's last delivery failed too: end the action with a recorded outcome before it is poisoned."""
        run = self._run(action)
        try:
            entry = self._ports.state.get_ledger_entry(action.id)
        except UnreadableRow as unreadable:
            self._unreadable_ledger_row(run, action, unreadable, now=now)
            return
        if entry is None or entry.outcome:
            return
        self._fail_recorded(run, action, entry, f"failed on the last delivery: {type(exc).__name__}: {exc}",
                            type(exc).__name__, now=now)

    def _fail_recorded(self, run: Run[Any], action: ScaleAction, entry: LedgerEntry, why: str, code: str, *,
                       now: datetime) -> ExecutionResult:
        """End the action as failed by its kind's `fail`; when that fails too (the group's row unreadable, say),
        a minimal outcome is written to the ledger row all the same: an action never ends without one."""
        try:
            return run.table.fail(run, action, entry, why, code, now)
        except Exception:  # noqa: BLE001 - the outcome below matters more than the bookkeeping that failed
            log.exception("action %s: its kind's failure handling failed; recording a minimal outcome", action.id)
        ledger.update(self._ports.state, entry, status="done", outcome=f"failed: {why}", operation="", updated_at=now)
        telemetry.action_ended(action, "failed", detail=why, now=now, error_code=code, dry_run=self._settings.dry_run)
        return ExecutionResult("failed", why, action.id)

    def _unreadable_ledger_row(self, run: Run[Any], action: ScaleAction, exc: UnreadableRow, *,
                               now: datetime) -> ExecutionResult:
        """The action's own ledger row cannot be read: nothing is run (what it recorded is unknown), the message
        goes to the poison queue, and the outcome is recorded on a row of its own beside the bad one (which is
        left as it is for an operator)."""
        reason = f"refused: its ledger row cannot be read: {exc}"
        log.error("action %s step %s %s; nothing done", action.id, action.step, reason)
        self._ports.queue.send_poison(encode_action(action))
        ledger.record_rejection(self._ports.state, action_id=f"{action.id}#unreadable", kind=action.kind,
                                group=action.group, reason=reason, now=now)
        run.table.refused(run, action, reason, now)
        telemetry.action_ended(action, "rejected", detail=reason, now=now, poison=True, dry_run=self._settings.dry_run)
        return ExecutionResult("rejected", reason, action.id)
