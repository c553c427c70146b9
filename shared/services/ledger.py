"""The action ledger's rules: who may run a step, and recording how it ended.

Delivery is at-least-once and several executors may run at once, so each step
of an action is claimed in Table storage before it runs. An action's progress
(step index, attempt) only moves forward; a delivery at or behind the recorded
progress is a duplicate, unless the delivery that claimed it gave it back
(released) or went silent for longer than the lease.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from shared.actions import ScaleAction
from shared.ports import LedgerEntry, StateStore

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 5


def decide_claim(
    entry: LedgerEntry | None, progress: tuple[int, int], *, now: datetime, lease: timedelta
) -> Literal["claim", "duplicate"]:
    if entry is None:
        return "claim"
    if entry.outcome or progress < entry.progress:
        return "duplicate"
    if progress > entry.progress:
        return "claim"
    if entry.status == "released":
        return "claim"
    if entry.status == "started" and now - entry.updated_at >= lease:
        return "claim"  # the delivery that took it went silent: take over
    return "duplicate"


def claim(state: StateStore, action: ScaleAction, *, now: datetime, lease: timedelta) -> LedgerEntry | None:
    """The claimed entry, or None when this delivery is a duplicate (counted on the entry)."""
    for _ in range(_CAS_ATTEMPTS):
        entry = state.get_ledger_entry(action.id)
        if decide_claim(entry, action.progress, now=now, lease=lease) == "duplicate":
            assert entry is not None
            state.update_ledger_entry(replace(entry, duplicates=entry.duplicates + 1))  # lost race: the count is best effort
            return None
        claimed = LedgerEntry(
            action_id=action.id,
            kind=action.kind,
            group=action.group,
            progress=action.progress,
            status="started",
            updated_at=now,
            operation=entry.operation if entry else "",
            node=",".join(action.nodes),
            duplicates=entry.duplicates if entry else 0,
            etag=entry.etag if entry else None,
        )
        won = state.create_ledger_entry(claimed) if entry is None else state.update_ledger_entry(claimed)
        if won:
            fresh = state.get_ledger_entry(action.id)
            if fresh is not None and fresh.progress == action.progress and fresh.status == "started":
                return fresh
    log.warning("action %s: gave up claiming step %s after %d races", action.id, action.step, _CAS_ATTEMPTS)
    return None


def update(state: StateStore, entry: LedgerEntry, **changes: object) -> LedgerEntry:
    """Change our claimed entry; if someone else moved it on meanwhile, theirs stands."""
    for _ in range(_CAS_ATTEMPTS):
        if state.update_ledger_entry(replace(entry, **changes)):  # type: ignore[arg-type]
            return state.get_ledger_entry(entry.action_id) or entry
        current = state.get_ledger_entry(entry.action_id)
        if current is None or current.progress != entry.progress:
            return current or entry
        entry = current
    return entry


def record_rejection(state: StateStore, *, action_id: str, kind: str, group: str, reason: str, now: datetime) -> None:
    entry = state.get_ledger_entry(action_id)
    outcome = f"rejected: {reason}"
    if entry is None:
        state.create_ledger_entry(
            LedgerEntry(action_id, kind, group, (0, 0), "done", now, outcome=outcome)
        )
    elif not entry.outcome:
        update(state, entry, status="done", outcome=outcome, updated_at=now)
