"""What the utilisation poll writes before it sends a removal, for tests that send one themselves.

The executor removes only nodes a poll decided on: reserved for the action's id in the group's row
(`reconcile.reserve_decided`) and unneeded since long enough (the unneeded-since row). A test that builds
its own scale-down message writes the same first, as the poll does, or its message is refused as forged.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from shared.ports import Ports
from shared.services.reconcile import reserve_decided

# Longer than any group's unneeded or unready time in the tests.
LONG_UNNEEDED = timedelta(days=1)


def as_the_poll_decided(ports: Ports, group_id: str, nodes: Sequence[str], action_id: str, *,
                        now: datetime) -> set[str]:
    """Mark the nodes unneeded (keeping a time a test set) and reserve them for `action_id`; those reserved."""
    unneeded = ports.state.list_unneeded()
    for node in nodes:
        if node not in unneeded:
            ports.state.set_unneeded(node, now - LONG_UNNEEDED)
    return reserve_decided(ports, group_id, list(nodes), action_id)
