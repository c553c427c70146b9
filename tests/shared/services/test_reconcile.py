"""The lost-removal reconcile reads the group row again before it acts (issue 14, item 4): an action that
finished between the poll's read of the row and its read of the ledger is no lost action. A row it cannot read
(the ledger row of a removal, or the group row read again) leaves everything of it as it is."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from shared.domain import GroupState
from shared.ports import LedgerEntry, UnreadableRow
from shared.services.memory_state import MemoryStateStore
from shared.services.reconcile import orphan_after, release_orphaned_removals
from shared.settings import load_settings
from tests.builders import T0, group, node, snapshot

SETTINGS = load_settings({"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg",
                          "KUBECONFIG_PATH": "/k"})


class _Refuse:
    """Any call is a bug here: the reconcile must not touch the cluster or ARM for a finished action."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"unexpected call {name}")


def test_a_removal_that_finished_after_the_poll_read_its_group_is_not_called_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from shared.ports import Ports

    store = MemoryStateStore()
    pool = group(target=2)
    read_by_the_poll = GroupState(pool.id, removing={"n0": "down-n0"}, committed=frozenset({"n0"}))
    # Meanwhile the action finished: it released the node, then recorded its outcome.
    store.create_ledger_entry(LedgerEntry("down-n0", "scale_down", pool.id, (3, 0), "done", T0,
                                          outcome="succeeded: removed node(s) n0"))
    ports = Ports(cluster=_Refuse(), provider=_Refuse(), state=store, queue=_Refuse(), clock=_Refuse(),  # type: ignore[arg-type]
                  events=_Refuse())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        released = release_orphaned_removals(ports, SETTINGS, snapshot(groups=[pool], nodes=[node("n1", instance=1)]),
                                              {pool.id: read_by_the_poll}, now=T0)
    assert released.released == ()
    assert not [r for r in caplog.records if "lost action" in r.getMessage()]


def test_a_reservation_still_standing_for_an_ended_action_is_released() -> None:
    from shared.ports import Ports

    store = MemoryStateStore()
    pool = group(target=2)
    standing = GroupState(pool.id, removing={"n0": "down-n0"})
    assert store.update_group(replace(store.get_group(pool.id), removing=dict(standing.removing)))
    store.create_ledger_entry(LedgerEntry("down-n0", "scale_down", pool.id, (1, 0), "done", T0,
                                          outcome="failed: something"))

    class _Cluster:
        def get_node(self, name: str) -> None:
            return None

    ports = Ports(cluster=_Cluster(), provider=_Refuse(), state=store, queue=_Refuse(), clock=_Refuse(),  # type: ignore[arg-type]
                  events=_Refuse())  # type: ignore[arg-type]
    released = release_orphaned_removals(ports, SETTINGS, snapshot(groups=[pool], nodes=[]), {pool.id: standing},
                                         now=T0)
    assert released.released == ("n0",) and store.get_group(pool.id).removing == {}


class _BadRows(MemoryStateStore):
    """The in-memory store with some rows that cannot be read, as a Table row another tool wrote badly."""

    def __init__(self, *, ledger: frozenset[str] = frozenset(), groups: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.bad_ledger, self.bad_groups = ledger, groups

    def get_ledger_entry(self, action_id: str) -> LedgerEntry | None:
        if action_id in self.bad_ledger:
            raise UnreadableRow(table="t", partition_key="ledger", row_key=action_id, column="ProgressStep",
                                problem="not a whole number")
        return super().get_ledger_entry(action_id)

    def get_group(self, group_id: str) -> GroupState:
        if group_id in self.bad_groups:
            raise UnreadableRow(table="t", partition_key="group", row_key=group_id, column="Deleting",
                                problem="not JSON")
        return super().get_group(group_id)


@pytest.mark.parametrize("committed", [False, True], ids=["cordoned", "delete committed"])
def test_a_reservation_whose_ledger_row_cannot_be_read_is_left_as_it_is(committed: bool) -> None:
    """Neither given back (uncordoned) nor finished (Node deleted): what its action did is unknown."""
    from shared.ports import Ports

    store = _BadRows(ledger=frozenset({"down-n0"}))
    pool = group(target=2)
    standing = GroupState(pool.id, removing={"n0": "down-n0"}, committed=frozenset({"n0"} if committed else ()))
    assert store.update_group(replace(store.get_group(pool.id), removing=dict(standing.removing),
                                      committed=standing.committed))
    store.set_unneeded("n0", T0)
    ports = Ports(cluster=_Refuse(), provider=_Refuse(), state=store, queue=_Refuse(), clock=_Refuse(),  # type: ignore[arg-type]
                  events=_Refuse())  # type: ignore[arg-type]
    later = T0 + orphan_after(SETTINGS) * 10

    reconciled = release_orphaned_removals(ports, SETTINGS, snapshot(groups=[pool], nodes=[]),
                                           {pool.id: store.get_group(pool.id)}, now=later)

    assert reconciled.released == () and "RowKey='down-n0'" in reconciled.unreadable["n0"]
    assert store.get_group(pool.id).removing == {"n0": "down-n0"} and store.list_unneeded() == {"n0": T0}


def test_a_group_row_that_went_bad_after_the_poll_read_it_stops_only_that_group() -> None:
    from shared.ports import Ports

    pool = group(target=2)
    store = _BadRows(groups=frozenset({pool.id}))
    store.create_ledger_entry(LedgerEntry("down-n0", "scale_down", pool.id, (1, 0), "done", T0, outcome="failed: x"))
    ports = Ports(cluster=_Refuse(), provider=_Refuse(), state=store, queue=_Refuse(), clock=_Refuse(),  # type: ignore[arg-type]
                  events=_Refuse())  # type: ignore[arg-type]

    reconciled = release_orphaned_removals(ports, SETTINGS, snapshot(groups=[pool], nodes=[]),
                                           {pool.id: GroupState(pool.id, removing={"n0": "down-n0"})}, now=T0)

    assert reconciled.released == () and "'Deleting'" in reconciled.unreadable[pool.id]
