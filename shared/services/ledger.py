"""The action ledger's rules: who may run a step, and recording how it ended.

Delivery is at-least-once and several executors may run at once, so each step
of an action is claimed in Table storage before it runs. An action's progress
(step index, attempt) only moves forward; a delivery at or behind the recorded
progress is a duplicate, unless the delivery that claimed it gave it back
(released) or went silent for longer than the lease.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from shared.actions import AtomicScaleUp, Backfill, RefillStandby, ScaleAction, ScaleDown
from shared.ports import LedgerEntry, StateStore
from shared.services.swap import StateConflict, read_modify_write

log = logging.getLogger(__name__)

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

    def take(entry: LedgerEntry | None) -> tuple[LedgerEntry | None, LedgerEntry | None]:
        if decide_claim(entry, action.progress, now=now, lease=lease) == "duplicate":
            return None, entry
        same_step = entry is not None and entry.progress[0] == action.progress[0]
        return LedgerEntry(
            action_id=action.id,
            # Kind, group and record are ours from the first claim on; a message never rewrites them.
            kind=entry.kind if entry else action.kind,
            group=entry.group if entry else action.group,
            progress=action.progress,
            status="started",
            updated_at=now,
            operation=entry.operation if entry else "",
            node=",".join(action.nodes) if isinstance(action, ScaleDown) else "",
            duplicates=entry.duplicates if entry else 0,
            record=entry.record if entry else record_of(action),
            faulted_since=entry.faulted_since if entry is not None and same_step else None,
            step_started_at=step_started(entry, action.progress, now=now),
            etag=entry.etag if entry else None,
        ), None

    def write(entry: LedgerEntry | None) -> bool:
        assert entry is not None
        # No ETag: nobody had a row when we read, and the first writer wins the create.
        return state.create_ledger_entry(entry) if entry.etag is None else state.update_ledger_entry(entry)

    try:
        duplicate = read_modify_write(lambda: state.get_ledger_entry(action.id), write, take,
                                      what=f"claim step {action.step} of action {action.id}")
    except StateConflict as exc:
        log.warning("%s; the delivery is treated as a duplicate and the step runs on a later one", exc)
        return None
    if duplicate is not None:
        state.update_ledger_entry(replace(duplicate, duplicates=duplicate.duplicates + 1))  # best effort
        return None
    fresh = state.get_ledger_entry(action.id)
    # Another delivery may have taken the step over between our write and this read: then theirs stands.
    if fresh is not None and fresh.progress == action.progress and fresh.status == "started":
        return fresh
    return None


def step_started(entry: LedgerEntry | None, progress: tuple[int, int], *, now: datetime) -> datetime:
    """When the step a claim of `progress` runs first ran, by our own records: a message's word is never taken.

    A new step (or a row of an older version, which kept no time) starts now; a retry keeps the time.
    Taking over from a delivery that went silent holding this very progress, the time it sat there does
    not count against the step's deadlines (MAX_POD_EVICTION_TIME, BATCH_DRAIN_TIMEOUT).
    """
    if entry is None or entry.progress[0] != progress[0] or entry.step_started_at is None:
        return now
    if entry.progress == progress and entry.status == "started":
        return entry.step_started_at + max(now - entry.updated_at, timedelta(0))
    return entry.step_started_at


def update(state: StateStore, entry: LedgerEntry, **changes: object) -> LedgerEntry:
    """Change our claimed entry; if someone else moved it on meanwhile, theirs stands."""

    def change(current: LedgerEntry | None) -> tuple[LedgerEntry | None, LedgerEntry | None]:
        if current is None or current.progress != entry.progress:
            return None, current or entry
        return replace(current, **changes), None  # type: ignore[arg-type]

    try:
        theirs = read_modify_write(lambda: state.get_ledger_entry(entry.action_id),
                                   lambda new: new is not None and state.update_ledger_entry(new), change,
                                   what=f"update action {entry.action_id}", known=entry)
    except StateConflict as exc:
        log.warning("%s; the ledger row keeps its last state", exc)
        return entry
    return theirs or state.get_ledger_entry(entry.action_id) or entry


def record_rejection(state: StateStore, *, action_id: str, kind: str, group: str, reason: str, now: datetime) -> None:
    entry = state.get_ledger_entry(action_id)
    outcome = f"rejected: {reason}"
    if entry is None:
        state.create_ledger_entry(
            LedgerEntry(action_id, kind, group, (0, 0), "done", now, outcome=outcome)
        )
    elif not entry.outcome:
        update(state, entry, status="done", outcome=outcome, updated_at=now)


def record_of(action: ScaleAction) -> str:
    """What the ledger keeps of a decision, so that later messages of the action can be held to it.

    A removal's nodes with the providerIDs and instances its first step checked against the world; a scale-up's
    target, and once its first step has run, the sizes it asked ARM for (which a failure returns to).
    """
    if isinstance(action, ScaleDown):
        body: dict[str, object] = {"nodes": {t.node: t.provider_id.lower() for t in action.targets},
                                   "instances": {t.node: t.instance_id for t in action.targets}}
    elif isinstance(action, Backfill):
        body = {"pod": action.pod_key, "uid": action.uid}
    elif isinstance(action, AtomicScaleUp):
        # Its steps add what the resize added to this record (shared.services.atomic_steps), never the message.
        body = {"request": action.request, "uid": action.request_uid, "parts": [list(p) for p in action.parts]}
    elif isinstance(action, RefillStandby):
        body = {"count": action.count}
        if action.from_capacity is not None:
            body.update(from_capacity=action.from_capacity, instances=sorted(action.instances))
    else:
        body = {"target_size": action.target_size}
        if action.from_size is not None:
            body.update(from_size=action.from_size, resized_to=action.resized_to, starting=sorted(action.starting))
    body["created_at"] = action.created_at.isoformat()
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def contradiction(entry: LedgerEntry, action: ScaleAction) -> str | None:
    """Why this delivery contradicts what the ledger recorded of its action, or None if it agrees.

    A follow-up step may only name fewer nodes than were decided (the others were given back), never
    another node or instance, group or kind. Rows of older versions hold no record: nothing to hold to.
    """
    if entry.kind != action.kind or entry.group != action.group:
        return f"it names {action.kind} of {action.group!r}, but the action recorded is {entry.kind} of {entry.group!r}"
    if not entry.record:
        return None
    recorded = json.loads(entry.record)
    if recorded.get("created_at") != action.created_at.isoformat():
        return "its creation time differs from the one recorded"
    if isinstance(action, Backfill):
        if (recorded.get("pod"), recorded.get("uid")) != (action.pod_key, action.uid):
            return f"it names pod {action.pod_key} ({action.uid}), not the one recorded"
        return None
    if isinstance(action, AtomicScaleUp):
        decided = (recorded.get("request"), recorded.get("uid"), recorded.get("parts"))
        if decided != (action.request, action.request_uid, [list(p) for p in action.parts]):
            return f"it names request {action.request} ({action.request_uid}) and parts {list(action.parts)}, " \
                   "not the ones recorded"
        return None
    if isinstance(action, RefillStandby):
        if recorded.get("count") != action.count:
            return f"count {action.count} differs from the {recorded.get('count')} recorded"
        if action.is_first_step:
            return None
        if "from_capacity" not in recorded:
            return "it carries instances this refill never recorded"
        if recorded["from_capacity"] != action.from_capacity:
            return f"from_capacity {action.from_capacity!r} differs from the {recorded['from_capacity']!r} recorded"
        # Later steps may name fewer instances (those that never came are dropped), never another one.
        unknown = sorted(set(action.instances) - set(recorded.get("instances", [])))
        if unknown:
            return f"instance(s) {', '.join(unknown)} are not ones this refill created"
        return None
    if isinstance(action, ScaleDown):
        nodes: dict[str, str] = recorded.get("nodes", {})
        for target in action.targets:
            decided = nodes.get(target.node)
            if decided is None:
                return f"node {target.node} is not one this removal decided on ({', '.join(sorted(nodes)) or 'none'})"
            if decided != target.provider_id.lower():
                return (f"node {target.node} is named with providerID {target.provider_id!r}, but the removal "
                        f"decided on {decided!r}")
            instance = recorded.get("instances", {}).get(target.node)  # records of older versions have none
            if instance is not None and instance != target.instance_id:
                return (f"node {target.node} is named with instance {target.instance_id!r}, but the removal "
                        f"decided on {instance!r}")
        return None
    if recorded.get("target_size") != action.target_size:
        return f"target size {action.target_size} differs from the {recorded.get('target_size')} recorded"
    if action.is_first_step:
        return None  # the sizes are decided by this step
    if "from_size" not in recorded:
        return "it carries sizes this scale-up never recorded"
    carried = {"from_size": action.from_size, "resized_to": action.resized_to, "starting": sorted(action.starting)}
    for name, value in carried.items():
        if recorded[name] != value:
            return f"{name} {value!r} differs from the {recorded[name]!r} recorded"
    return None
