"""Reading every group's state row for a poll or a step: one row that cannot be read never stops the others.

A group whose row is unreadable (`UnreadableRow`: a column not JSON, not a number) gets an empty state here
and is reported with the row named; the caller keeps it out of what it decides (the pending poll plans no
node onto it) while its nodes and capacity still count against the cluster-wide limits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from shared.domain import GroupState, NodeGroup
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
