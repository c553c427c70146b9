"""What every action kind's steps share: the step table's shape, and the moves a step may make.

An action kind is one step table (`StepTable`): its action class (a frozen dataclass of
`shared.actions`), each step a named handler with the steps it may hand over to, and what ends the
action when a long-running operation succeeds or fails, or when it must be failed from outside (the
fault deadline, the host's last delivery). `shared.services.scale_up_steps` and
`shared.services.scale_down_steps` are today's two; the executor (`shared.services.executor`) picks the
table by the action's type and runs the step the message names.

A handler gets a `Run`: the ports, the settings, and the protocol's moves, which keep the executor's
promise (a crash at any point leaves a redelivery that repeats at most an idempotent step):
`continue_` enqueues the next step before marking this one done; `finish` records an outcome;
`reject` refuses an action; `follow` tracks a long-running ARM operation; `after_fault` turns
throttling and passing faults into a later retry of the same step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Generic, Literal, TypeVar

from shared import telemetry
from shared.actions import ScaleAction, encode_action
from shared.domain import GroupState
from shared.ports import ClusterError, ComputeError, LedgerEntry, Operation, Ports, UnreadableRow
from shared.services import ledger
from shared.services.events import status_event
from shared.services.swap import StateConflict, update_group
from shared.settings import Settings

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "waiting", "skipped", "rejected", "duplicate", "failed", "dry-run"]

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
# The kinds of long-running operation a ledger row may be following, stored as `kind:token`.
OPERATION_KINDS = ("resize", "delete", "start", "deallocate", "hibernate")  # hibernate: a deallocate that hibernates


class OutcomeNotRecorded(RuntimeError):
    """An action's outcome could not be written to its ledger row (the row kept changing under us)."""


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    outcome: Outcome
    detail: str = ""
    action_id: str = ""


A = TypeVar("A", bound=ScaleAction)
Handler = Callable[["Run[A]", A, LedgerEntry, datetime], ExecutionResult]


@dataclass(frozen=True, slots=True)
class Step(Generic[A]):
    """One step: what it does, and the steps it may hand the action over to (itself when it waits)."""

    run: Handler[A]
    next: tuple[str, ...] = ()


def _nothing(*_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class StepTable(Generic[A]):
    """One action kind: its steps in order (the action class's STEPS) and how its operations end it."""

    action: type[A]
    steps: Mapping[str, Step[A]]
    # A followed operation of this `kind` (resize, start, delete, deallocate) succeeded / failed.
    succeeded: Callable[[Run[A], A, LedgerEntry, str, datetime], ExecutionResult]
    failed: Callable[[Run[A], A, LedgerEntry, str, str, str, datetime], ExecutionResult]  # detail, code, kind
    # End the action as failed from outside its steps (the fault deadline, the host's last delivery).
    fail: Callable[[Run[A], A, LedgerEntry, str, str, datetime], ExecutionResult]  # why, code
    # A delivery of the action was refused as contradicting the ledger: say so where operators look.
    refused: Callable[[Run[A], A, str, datetime], None] = field(default=_nothing)
    # The action expired on the queue before its first step ran: what the kind tells besides the ledger (why).
    expired: Callable[[Run[A], A, str, datetime], None] = field(default=_nothing)
    # ARM throttled the step for `delay`: what the kind does besides waiting.
    throttled: Callable[[Run[A], A, timedelta, datetime], None] = field(default=_nothing)
    # The action is about to record its outcome: give back what it held (a scale-up's room under the limits).
    ended: Callable[[Run[A], A, datetime], None] = field(default=_nothing)

    def __post_init__(self) -> None:
        if tuple(self.steps) != self.action.STEPS:
            raise ValueError(f"{self.action.__name__}: steps {tuple(self.steps)} are not its STEPS {self.action.STEPS}")
        for name, step in self.steps.items():
            unknown = set(step.next) - set(self.steps)
            if unknown:
                raise ValueError(f"{self.action.__name__}: step {name} hands over to unknown step(s) {sorted(unknown)}")


class Run(Generic[A]):
    """One delivery of one action's step: the ports, the settings and the moves a handler may make."""

    def __init__(self, ports: Ports, settings: Settings, table: StepTable[A], step: str) -> None:
        self.ports = ports
        self.settings = settings
        self.table = table
        self.step = step  # the step this delivery runs: `continue_` holds it to the step's `next`

    # -- moving on ---------------------------------------------------------------------------

    def continue_(
        self, following: A, entry: LedgerEntry, *, delay: timedelta, now: datetime, detail: str = "",
        record: str | None = None, faulted_since: datetime | None = None,
    ) -> ExecutionResult:
        """Enqueue the next step (or this one again), then mark this one done."""
        allowed = self.table.steps[self.step].next
        if following.step not in allowed:
            raise AssertionError(f"step {self.step} of {self.table.action.__name__} may hand over to "
                                 f"{', '.join(allowed) or 'nothing'}, not {following.step}")
        # Enqueue first, then mark done: a crash in between only repeats this (idempotent) step.
        self.ports.queue.send(following, delay=delay)
        ledger.update(self.ports.state, entry, status="done", updated_at=now, faulted_since=faulted_since,
                      record=entry.record if record is None else record)
        return ExecutionResult("waiting", detail or f"next: {following.step} #{following.attempt}", following.id)

    def finish(
        self, action: A, entry: LedgerEntry, outcome: Outcome, detail: str, *, now: datetime,
        error_code: str = "", old_size: int | None = None,
    ) -> ExecutionResult:
        self._ended(action, now=now)
        recorded = ledger.update(self.ports.state, entry, status="done", outcome=f"{outcome}: {detail}", operation="",
                                 updated_at=now)
        if recorded.progress == entry.progress and not recorded.outcome:
            # Never let the message go as if the outcome were written: this delivery fails, the step runs again.
            raise OutcomeNotRecorded(f"action {action.id}: its outcome ({outcome}: {detail}) could not be written "
                                     "to the ledger")
        log.info("action %s %s: %s", action.id, outcome, detail)
        telemetry.action_ended(action, outcome, detail=detail, now=now, error_code=error_code,
                               dry_run=self.settings.dry_run, old_size=old_size)
        return ExecutionResult(outcome, detail, action.id)

    def reject(
        self, action: A, reason: str, *, now: datetime, poison: bool, entry: LedgerEntry | None = None,
        outcome: str = "rejected",
    ) -> ExecutionResult:
        log.warning("action %s rejected: %s", action.id, reason)
        if poison:
            self.ports.queue.send_poison(encode_action(action))
        if entry is not None:
            self._ended(action, now=now)  # only with our claim: a message alone never releases what an action holds
            ledger.update(self.ports.state, entry, status="done", outcome=f"rejected: {reason}", updated_at=now)
        else:
            ledger.record_rejection(
                self.ports.state, action_id=action.id, kind=action.kind, group=action.group, reason=reason, now=now
            )
        telemetry.action_ended(action, outcome, detail=reason, now=now, poison=poison, dry_run=self.settings.dry_run)
        return ExecutionResult("rejected", reason, action.id)

    def follow(self, action: A, entry: LedgerEntry, operation: Operation, *, next_step: str, now: datetime,
               kind: str) -> ExecutionResult:
        """Finish, fail, or come back later for a long-running ARM operation of this `kind` (resize, start, ...)."""
        if operation.status == "InProgress":
            # The record is what the next step's message is held to (the sizes a failure returns to).
            entry = ledger.update(self.ports.state, entry, operation=f"{kind}:{operation.token}",
                                  record=ledger.record_of(action))
            following = action.retried() if action.step == next_step else action.at_step(next_step, now=now)
            return self.continue_(following, entry, delay=self.settings.step_retry_delay, now=now)
        if operation.status == "Succeeded":
            return self.table.succeeded(self, action, entry, kind, now)
        detail = f"{operation.error_code or operation.status}: {operation.error_message}".strip(": ")
        return self.table.failed(self, action, entry, detail, operation.error_code or operation.status, kind, now)

    # -- faults ------------------------------------------------------------------------------

    def after_fault(self, action: A, entry: LedgerEntry, exc: ComputeError | ClusterError, *,
                    now: datetime) -> ExecutionResult | None:
        """Throttling or a fault that passes: this step (`action`) again later. None: neither (the caller raises)."""
        if isinstance(exc, ComputeError) and exc.code == "TooManyRequests":
            # Throttling is not the action's fault: wait outside this invocation, at least as long as ARM
            # asks and longer each time in a row, so that actions sharing a scale set's budget do not
            # each take the one token that came back and starve one another (a livelock, seen in replays).
            delay = throttled_delay(exc.retry_after, self.settings.step_retry_delay, attempt=action.attempt)
            self.table.throttled(self, action, delay, now)
            return self.continue_(action.retried(), entry, delay=delay, now=now, detail=f"throttled by ARM: {exc}")
        if exc.transient:
            source = "ARM" if isinstance(exc, ComputeError) else "Kubernetes API"
            return self._after_transient_fault(action, entry, exc, now=now, source=source)
        return None

    def _after_transient_fault(self, action: A, entry: LedgerEntry, exc: ComputeError | ClusterError, *,
                               now: datetime, source: str) -> ExecutionResult:
        """ARM or the Kubernetes API failed in a way that passes (5xx, a timeout): come back later, until
        TRANSIENT_FAULT_DEADLINE.

        Never left to the host's retries, which are seconds apart and end in the poison queue with the
        action half done; past the deadline the action ends as a recorded failure.
        """
        since = entry.faulted_since or now
        if now - since < TRANSIENT_FAULT_DEADLINE:
            retry_after = exc.retry_after if isinstance(exc, ComputeError) else None
            delay = throttled_delay(retry_after, self.settings.step_retry_delay, attempt=action.attempt)
            log.warning("action %s step %s: %s fault, again in %ss: %s", action.id, action.step, source,
                        int(delay.total_seconds()), exc)
            return self.continue_(action.retried(), entry, delay=delay, now=now, faulted_since=since,
                                  detail=f"{source} fault, retrying: {exc}")
        why = f"{source} kept failing for {now - since} (TRANSIENT_FAULT_DEADLINE {TRANSIENT_FAULT_DEADLINE}): {exc}"
        code = (exc.code if isinstance(exc, ComputeError) else "") or "TransientFault"
        return self.table.fail(self, action, entry, why, code, now)

    # -- bookkeeping -------------------------------------------------------------------------

    def _ended(self, action: A, *, now: datetime) -> None:
        try:
            self.table.ended(self, action, now)
        except Exception:  # noqa: BLE001 - what it held lapses on its own; the outcome must still be recorded
            log.exception("action %s: could not give back what it held; it lapses with its lifetime", action.id)

    def update_group(self, group_id: str, change: Callable[[GroupState], GroupState]) -> None:
        try:
            update_group(self.ports.state, group_id, change, what="update")
        except StateConflict as exc:
            # Bookkeeping after the fact (a cooldown, a released reservation the orphan sweep also finds):
            # the action's outcome stands.
            log.warning("%s; cooldown may be off by one action", exc)
        except UnreadableRow as exc:
            # The group's row cannot be read, so it is not written either (an operator repairs it): the action's
            # outcome is recorded all the same.
            log.error("group %s left as it is: %s", group_id, exc)

    def status_event(self, reason: str, message: str, *, now: datetime,
                     type: Literal["Normal", "Warning"] = "Normal") -> None:
        event = status_event(self.settings, reason, message, now=now, type=type)
        if event is not None:
            self.ports.events.emit(event)


def throttled_delay(retry_after: float | None, step_retry_delay: timedelta, *, attempt: int) -> timedelta:
    """How long a throttled step waits: ARM's Retry-After (or STEP_RETRY_DELAY), doubled per attempt, capped."""
    base = max(retry_after or 0.0, step_retry_delay.total_seconds(), 1.0)
    return min(timedelta(seconds=base * 2 ** min(attempt, 8)), MAX_THROTTLED_DELAY)


def untag(stored: str, *, default: str) -> tuple[str, str]:
    """(kind, token) from a ledger operation `kind:token`; a bare token (older entries) is of the default kind."""
    kind, sep, token = stored.partition(":")
    if sep and kind in OPERATION_KINDS:
        return kind, token
    return default, stored
