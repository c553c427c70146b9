"""Give back nodes whose removal lost its action: no node stays cordoned for a drain nobody runs.

A removal's action can be lost: its message moved to the poison queue after the host's retries,
or deleted by hand, or it finished without releasing its reservation (a crash between the two
writes). The group row then still names the node in `Deleting`, the node stays cordoned and
tainted, and the group's minimum and MAX_SCALE_DOWN_PARALLELISM count it forever.

The poll reserves the nodes it decides to remove (`reserve_decided`), so the next round neither
decides them again nor hands out their slots. Each utilisation poll looks at every reservation.
One whose action never started within ACTION_TTL, whose ledger row has an outcome, or has
not moved for `orphan_after` (several times the longest a live action ever waits between two
steps), is an orphan: if its delete was committed and the instance is gone or going, the removal
is finished (Node object removed); otherwise the node is uncordoned and the reservation released.

A reservation whose ledger row cannot be read (`UnreadableRow`) is no orphan and no live action either: what
its action did is unknown (the delete may be committed, the drain half done), so the node is left exactly as it
is, cordoned and reserved, and reported with the row named until an operator repairs or deletes the row. A group
whose own row cannot be read is not looked at (the caller leaves it out).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.actions import decided_at

from shared.domain import TO_BE_DELETED_TAINT, ClusterSnapshot, GroupState, Node
from shared.ports import ClusterEvent, LedgerEntry, Ports, UnreadableRow
from shared.services.swap import StateConflict, swap_group
from shared.settings import Settings

log = logging.getLogger(__name__)

# A decided action's message may be delivered a little after ACTION_TTL (queue latency, clock skew);
# it is then dropped as expired, with a ledger row. Without a row past this, it never will be.
_START_MARGIN = timedelta(minutes=1)


def orphan_after(settings: Settings) -> timedelta:
    """How long a removal's ledger row may stand still before its action counts as lost."""
    return 3 * max(settings.action_lease, settings.batch_check_interval, settings.step_retry_delay)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What one reconcile did: the nodes released, and what it left alone because a row could not be read
    (by node, or by group id for a group row that went bad meanwhile), with the row named."""

    released: tuple[str, ...] = ()
    unreadable: Mapping[str, str] = field(default_factory=dict)


def release_orphaned_removals(ports: Ports, settings: Settings, snapshot: ClusterSnapshot,
                              states: Mapping[str, GroupState], *, now: datetime) -> Reconciled:
    """Release every orphaned reservation among the groups' `states` (as just read; a group of the snapshot
    without one is not looked at). Nothing is touched for a row that cannot be read."""
    released: list[str] = []
    unreadable: dict[str, str] = {}
    nodes = {n.name: n for n in snapshot.nodes}
    entries: dict[str, LedgerEntry | None] = {}  # an action removing several nodes is read once
    bad: dict[str, UnreadableRow] = {}  # action id -> why its ledger row cannot be read
    for group in snapshot.groups:
        if group.id not in states:
            continue
        state = states[group.id]
        fresh: GroupState | None = None
        for node, action_id in sorted(state.removing.items()):
            if action_id not in entries and action_id not in bad:
                try:
                    entries[action_id] = ports.state.get_ledger_entry(action_id)
                except UnreadableRow as exc:
                    bad[action_id] = exc
            if action_id in bad:
                unreadable[node] = _left_as_it_is(node, action_id, bad[action_id])
                continue
            entry = entries[action_id]
            if _alive(entry, action_id, settings, now=now):
                continue
            # The poll read the group row before this ledger row: an action that finished in between has
            # released its nodes already. Only a reservation that still stands is an orphan.
            try:
                fresh = fresh or ports.state.get_group(group.id)
            except UnreadableRow as exc:
                log.error("group %s: %s; its reservations are left as they are", group.id, exc)
                unreadable[group.id] = str(exc)
                break
            if fresh.removing.get(node) != action_id:
                continue
            state = fresh
            why = (f"action {action_id} ended ({entry.outcome})" if entry is not None and entry.outcome
                   else f"action {action_id} never started" if entry is None
                   else f"action {action_id} made no progress for {orphan_after(settings)}")
            current = nodes.get(node)
            finished = node in state.committed and (current is None or current.instance is None
                                                    or not _instance_alive(ports, group.id, current))
            if finished:
                ports.cluster.delete_node(node)
                log.warning("node %s: removal finished for a lost action (%s)", node, why)
            else:
                if current is not None and current.is_being_deleted:
                    ports.cluster.uncordon(node, taint_key=TO_BE_DELETED_TAINT)
                    ports.events.emit(ClusterEvent("default", "Node", node, "", "ScaleDownFailed",
                                                   f"scale-down of the node abandoned: {why}", now, "Warning"))
                log.warning("node %s: removal abandoned and the node given back: %s", node, why)
            if entry is not None:
                ports.state.clear_unneeded(node)  # touched by an action: its unneeded clock starts over
            if _release(ports, group.id, node, action_id):
                released.append(node)
    return Reconciled(tuple(released), unreadable)


def _left_as_it_is(node: str, action_id: str, exc: UnreadableRow) -> str:
    """Why a reserved node is neither given back nor finished: its action's ledger row cannot be read."""
    why = f"removal {action_id}: {exc}"
    log.error("node %s: %s; the node is left as it is (cordoned, reserved) until the row is repaired or deleted",
              node, why)
    return why


def reserve_decided(ports: Ports, group_id: str, nodes: list[str], action_id: str) -> set[str]:
    """Reserve the nodes the poll just decided to remove for `action_id`; those it got (compare-and-swap).

    A node another action holds meanwhile is left out. The action's first step finds its own
    reservation; if the message never arrives, the reservation is released as an orphan once
    the action could no longer start (`_alive`).
    """
    def reserve(state: GroupState) -> tuple[GroupState | None, set[str]]:
        free = [n for n in nodes if n not in state.removing]
        return replace(state, removing={**state.removing, **{n: action_id for n in free}}) if free else None, set(free)

    try:
        return swap_group(ports.state, group_id, reserve, what=f"reserve {', '.join(nodes)} for {action_id}")
    except StateConflict as exc:
        log.warning("%s: the nodes are decided again by the next round", exc)
        return set()
    except UnreadableRow as exc:
        log.error("group %s: %s; nothing reserved, the nodes are not removed", group_id, exc)
        return set()


def _alive(entry: LedgerEntry | None, action_id: str, settings: Settings, *, now: datetime) -> bool:
    """Whether the action holding a reservation may still move: it has not ended and has moved lately,
    or it has not started yet but still may (the poll reserved it; it starts within ACTION_TTL)."""
    if entry is None:
        decided = decided_at(action_id)
        return decided is not None and now - decided < settings.action_ttl + _START_MARGIN
    return not entry.outcome and now - entry.updated_at < orphan_after(settings)


def _instance_alive(ports: Ports, group_id: str, node: Node) -> bool:
    group = ports.provider.get_node_group(group_id)
    ref = node.instance
    if group is None or ref is None:
        return False
    instance = ports.provider.get_instance(group, ref.instance_id)
    return instance is not None and not instance.deleting


def _release(ports: Ports, group_id: str, node: str, action_id: str) -> bool:
    def release(state: GroupState) -> tuple[GroupState | None, bool]:
        if state.removing.get(node) != action_id:
            return None, False  # someone else moved it on meanwhile
        return state.without_removal(node), True

    try:
        return swap_group(ports.state, group_id, release, what=f"release node {node} from {action_id}")
    except StateConflict as exc:
        log.warning("%s: released by a later poll", exc)
        return False
    except UnreadableRow as exc:
        log.error("group %s: %s; node %s stays reserved for %s", group_id, exc, node, action_id)
        return False
