"""Reading every group's state row for a poll or a step: one row that cannot be read never stops the others.

A group whose row is unreadable (`UnreadableRow`: a column not JSON, not a number) gets an empty state here
and is reported with the row named; the caller keeps it out of what it decides (the pending poll plans no
node onto it, the utilisation poll removes none of its nodes and gives none back) while its nodes and capacity
still count against the cluster-wide limits. Nothing here writes a row: an operator repairs or deletes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from shared.domain import ClusterSnapshot, GroupState, NodeGroup
from shared.ports import Ports, UnreadableRow

log = logging.getLogger(__name__)

UNREADABLE_STATE = "state row unreadable"


def read_group_states(ports: Ports, groups: Iterable[NodeGroup]) -> tuple[dict[str, GroupState], dict[str, str]]:
    """(each group's state, and for each group whose row cannot be read, why: the row and column named)."""
    states: dict[str, GroupState] = {}
    unreadable: dict[str, str] = {}
    for group in groups:
        try:
            states[group.id] = ports.state.get_group(group.id)
        except UnreadableRow as exc:
            log.error("group %s: %s; the group is left out until the row is repaired, the others go on",
                      group.id, exc)
            states[group.id] = GroupState(group.id)
            unreadable[group.id] = f"{UNREADABLE_STATE}: {exc}"
    return states, unreadable


def leave_out(snapshot: ClusterSnapshot, unreadable: Mapping[str, str]) -> ClusterSnapshot:
    """The snapshot without the groups whose row cannot be read, each among the refused groups with why.

    No decision then touches them: their nodes are no scale-down candidates (the planner maps a node only to a
    group of the snapshot), nothing is planned onto them, and the status ConfigMap (`refusedNodeGroups`) and
    the plan name the row to repair. Their nodes stay in the snapshot: pods run there, and room is room.
    """
    if not unreadable:
        return snapshot
    return replace(snapshot, groups=tuple(g for g in snapshot.groups if g.id not in unreadable),
                   refused={**snapshot.refused, **unreadable})


def nodes_of(snapshot: ClusterSnapshot, group_ids: Iterable[str]) -> frozenset[str]:
    """The names of the snapshot's nodes that belong to these groups (by their instance)."""
    wanted = frozenset(group_ids)
    return frozenset(node.name for node in snapshot.nodes
                     if (ref := node.instance) is not None and ref.group_id in wanted)


def removals_seen(snapshot: ClusterSnapshot, group_id: str) -> GroupState:
    """A stand-in for a group whose row cannot be read, for counting removals in flight only: its nodes that
    carry the ToBeDeleted taint count as being removed (by an action not known here), so they still hold their
    MAX_SCALE_DOWN_PARALLELISM slots. Never written, and never used to release or reserve anything."""
    return GroupState(group_id, removing={node.name: "" for node in snapshot.nodes
                                          if node.is_being_deleted and (ref := node.instance) is not None
                                          and ref.group_id == group_id})
