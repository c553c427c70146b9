"""State does not grow for ever (issue 14, item 12): the sweep removes what no decision reads any more.

The same assertions against the Table storage adapter (Azurite) and the in-memory store, so the two
cannot drift: finished ledger rows older than STATE_RETENTION go, in-flight ones and recent ones stay;
unneeded rows go only for nodes no longer in the cluster; a run deletes at most its limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
import pytest

from shared.adapters.table_state import TableStateStore
from shared.domain import Node, Resources
from shared.ports import LedgerEntry, Ports, StateStore
from shared.services.memory_state import MemoryStateStore
from shared.services.retention import run_state_sweep
from shared.settings import load_settings

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
SETTINGS = load_settings({"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg",
                          "KUBECONFIG_PATH": "/k", "STATE_RETENTION": "336h"})
OLD = NOW - timedelta(days=15)
RECENT = NOW - timedelta(days=13)


@dataclass
class _Cluster:
    names: list[str] = field(default_factory=list)

    def list_nodes(self) -> list[Node]:
        return [Node(name=name, allocatable=Resources(), created_at=OLD) for name in self.names]


def _ports(state: StateStore, nodes: list[str]) -> Ports:
    return Ports(cluster=_Cluster(nodes), provider=None, state=state, queue=None, clock=None,  # type: ignore[arg-type]
                 events=None)


@pytest.fixture(params=["table", "memory"])
def store(request: pytest.FixtureRequest) -> StateStore:
    if request.param == "memory":
        return MemoryStateStore()
    return request.getfixturevalue("state_store")  # type: ignore[no-any-return]


def _ledger(store: StateStore, action_id: str, *, updated: datetime, outcome: str) -> None:
    assert store.create_ledger_entry(LedgerEntry(action_id, "scale_down", "rg/pool", (3, 0), "done" if outcome else
                                                 "started", updated, outcome=outcome))


def test_finished_old_rows_go_and_everything_live_stays(store: StateStore) -> None:
    _ledger(store, "old-done", updated=OLD, outcome="succeeded: removed node(s) n1")
    _ledger(store, "old-refused", updated=OLD, outcome="rejected: refused: forged")
    _ledger(store, "old-in-flight", updated=OLD, outcome="")  # a lost action: reconcile's, never the sweep's
    _ledger(store, "recent-done", updated=RECENT, outcome="succeeded: x")
    store.set_unneeded("gone-old", OLD)
    store.set_unneeded("gone-recent", RECENT)
    store.set_unneeded("present-old", OLD)  # a live node's unneeded clock: the utilisation poll's
    before = store.get_group("rg/pool")

    result = run_state_sweep(_ports(store, ["present-old"]), SETTINGS, now=NOW)

    assert sorted(e.action_id for e in store.list_ledger()) == ["old-in-flight", "recent-done"]
    assert sorted(store.list_unneeded()) == ["gone-recent", "present-old"]
    assert (result.ledger_deleted, result.unneeded_deleted, result.more_left) == (2, 1, False)
    assert store.get_group("rg/pool") == before


def test_a_run_deletes_at_most_its_limit_and_the_next_takes_the_rest(store: StateStore) -> None:
    for i in range(5):
        _ledger(store, f"done-{i}", updated=OLD - timedelta(minutes=i), outcome="succeeded: x")

    first = run_state_sweep(_ports(store, []), SETTINGS, now=NOW, limit=3)
    assert first.ledger_deleted == 3 and first.more_left and len(store.list_ledger()) == 2
    second = run_state_sweep(_ports(store, []), SETTINGS, now=NOW, limit=3)
    assert second.ledger_deleted == 2 and not second.more_left and store.list_ledger() == []


def test_a_row_changed_after_it_was_listed_is_not_deleted(store: StateStore) -> None:
    _ledger(store, "done", updated=OLD, outcome="succeeded: x")
    [listed] = store.list_finished_ledger(updated_before=NOW, limit=10)
    current = store.get_ledger_entry("done")
    assert current is not None
    assert store.update_ledger_entry(current)  # someone wrote it meanwhile (a duplicate delivery counted)

    assert not store.delete_ledger_entry(listed)
    assert store.get_ledger_entry("done") is not None


def test_the_table_query_filters_on_the_service(state_store: TableStateStore) -> None:
    for i in range(3):
        _ledger(state_store, f"recent-{i}", updated=RECENT, outcome="succeeded: x")
    _ledger(state_store, "old", updated=OLD, outcome="succeeded: x")
    assert [e.action_id for e in state_store.list_finished_ledger(updated_before=NOW - timedelta(days=14), limit=10)] \
        == ["old"]


@pytest.mark.parametrize(("column", "value"), [("ProgressStep", "x"), ("Status", "finished"), ("Duplicates", "lots")])
def test_an_unreadable_finished_row_is_left_as_it_is_and_the_others_go(state_store: TableStateStore, column: str,
                                                                      value: str) -> None:
    """A row another tool wrote badly is for an operator to read: never deleted unread, never stopping the sweep."""
    from azure.data.tables import UpdateMode

    from shared.adapters.table_state import encode_key

    for action_id in ("done-a", "bad", "done-b"):
        _ledger(state_store, action_id, updated=OLD, outcome="succeeded: x")
    table = state_store._table  # the store's own TableClient: a column can really hold anything there
    table.upsert_entity({"PartitionKey": "ledger", "RowKey": encode_key("bad"), column: value}, mode=UpdateMode.MERGE)
    before = dict(table.get_entity("ledger", encode_key("bad")))

    result = run_state_sweep(_ports(state_store, []), SETTINGS, now=NOW)

    assert result.ledger_deleted == 2 and state_store.list_ledger() == []  # the bad row is listed by no one
    assert dict(table.get_entity("ledger", encode_key("bad"))) == before
