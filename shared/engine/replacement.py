"""Replacements: capacity asked first, the replaced nodes drained once it is Ready (consolidation and drift).

Pure module, no side effects. A planner (engine.drift, engine.consolidation) proposes; the utilisation poll
(services.replacement) admits proposals within the disruption budgets, records a `Replacement` per node in its
group's state and asks the new capacity; once that capacity is Ready, the node is a forced scale-down candidate
and leaves by the ordinary drain.

A replacement given up at the timeout (the new capacity never came, or the node could not be drained) leaves a
tombstone (`Replacement.given_up_at`): the node stays out of the planners' proposals, is never forced and is not
counted as disrupted until the tombstone expires, `TOMBSTONE_FACTOR` timeouts after the give-up. Without it, a
node that can never be drained would cost one short-lived extra node every timeout. A fixed multiple rather than
a doubling per consecutive give-up: the entry is dropped at expiry, so a count of give-ups would need state of
its own; with 4, such a node costs at most one timeout of extra capacity in every five, and a node whose obstacle
clears (a PDB relaxed, capacity back) is tried again within a few hours at the default timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, GroupState, Node, Replacement

TOMBSTONE_FACTOR = 4  # a given-up node is not proposed again for this many REPLACEMENT_TIMEOUTs


@dataclass(frozen=True, slots=True)
class ReplacementProposal:
    """Replace `nodes` ((node, its group id) pairs) by `count` new nodes of `to_group`, for `reason`."""

    nodes: tuple[tuple[str, str], ...]
    reason: str  # shared.domain.REPLACE | DRIFTED
    to_group: str  # the group (lane) that grows; for drift, the node's own group
    count: int
    saving_per_hour: float = 0.0  # USD per hour, consolidation
    detail: str = ""  # drift: model | image | age; consolidation: e.g. "3 x Standard_D8s_v5 -> 1 x Standard_D16s_v5"


def ready_replacements(snapshot: ClusterSnapshot, states: Mapping[str, GroupState]) -> dict[str, Replacement]:
    """The nodes whose replacement capacity is Ready (node -> its entry): they may be drained now.

    Entries asked together (one action: same `to_group`, `action_id` and `since`) share the `count` nodes it
    asked for. A node of `to_group` counts when it is Ready, was created at or after the entry's `since`, is
    not being deleted and is not itself being replaced; each counts for one action only. The actions asked
    last are matched first: the nodes they may use are also usable by every earlier one (created later than
    an earlier `since`), so no action takes a node that only a later one could use.
    """
    present = {node.name for node in snapshot.nodes}
    replacing = {node for state in states.values() for node, entry in state.replacing.items()
                 if entry.given_up_at is None}
    fresh: dict[str, list[Node]] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or not node.ready or node.is_being_deleted or node.name in replacing:
            continue
        fresh.setdefault(ref.group_id, []).append(node)
    actions: dict[tuple[str, str, datetime], list[Replacement]] = {}
    for state in states.values():
        for node, entry in state.replacing.items():
            if node in present and entry.given_up_at is None:  # a tombstone is never forced
                key = (entry.to_group, entry.action_id or f"node:{node}", entry.since)
                actions.setdefault(key, []).append(entry)
    used: set[str] = set()
    ready: dict[str, Replacement] = {}
    for key in sorted(actions, key=lambda k: (k[2], k[1]), reverse=True):
        to_group, _, since = key
        entries = actions[key]
        count = max(e.count for e in entries)
        usable = sorted((n for n in fresh.get(to_group, ()) if n.created_at >= since and n.name not in used),
                        key=lambda n: (n.created_at, n.name))
        if len(usable) < count:
            continue
        used.update(n.name for n in usable[:count])
        ready.update((e.node, e) for e in entries)
    return ready


def stale_replacements(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], *, now: datetime,
                       timeout: timedelta) -> list[tuple[str, str, str]]:
    """Entries whose replacement has ended, as (group id, node, why). `why` is GONE (the node is gone: its
    replacement is done, or its tombstone is no longer needed) or BACKOFF_OVER (a tombstone expired: the node
    may be proposed again): the caller drops those entries. Any other `why` starts with TIMED_OUT: the
    replacement was asked more than `timeout` ago and its removal has not started (the new capacity never came,
    or the node could not be drained); the caller keeps the entry as a tombstone (`given_up_at`)."""
    present = {node.name: node for node in snapshot.nodes}
    stale = []
    for group_id, state in sorted(states.items()):
        for node, entry in sorted(state.replacing.items()):
            current = present.get(node)
            if current is None:
                stale.append((group_id, node, GONE))
            elif entry.given_up_at is not None:
                if now >= retry_at(entry, timeout=timeout):
                    stale.append((group_id, node, BACKOFF_OVER))
            elif now - entry.since > timeout and node not in state.removing and not current.is_being_deleted:
                stale.append((group_id, node, f"{TIMED_OUT} after {_minutes(now - entry.since)} "
                                              f"(asked of {entry.to_group} at {entry.since.isoformat()})"))
    return stale


def retry_at(entry: Replacement, *, timeout: timedelta) -> datetime:
    """When a given-up replacement's tombstone expires (its node may be proposed again); `entry` must be one."""
    if entry.given_up_at is None:
        raise ValueError(f"the replacement of {entry.node} was not given up: it has no retry time")
    return entry.given_up_at + TOMBSTONE_FACTOR * timeout


GONE = "node gone"
TIMED_OUT = "given up"
BACKOFF_OVER = "back-off over"


def _minutes(span: timedelta) -> str:
    return f"{int(span.total_seconds() // 60)} min"
