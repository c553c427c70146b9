"""TableStateStore against rows someone else wrote badly (Azurite): the row that cannot be read is named, by table,
keys and column, and a listing leaves it out and goes on with the others; nothing is written over it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.data.tables import TableClient, UpdateMode

from shared.adapters.storage_connection import StorageConnection
from shared.adapters.table_state import TableStateStore, encode_key
from shared.domain import GroupState, LimitReservation, LimitReservations, OfferingKey, UnavailableOffering
from shared.ports import LedgerEntry, UnreadableRow

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
GROUP = "rg-nodes/pool-a"


def _corrupt(connection: StorageConnection, store: TableStateStore, partition: str, row: str, **columns: Any) -> dict:
    """Merge `columns` into the stored row as raw values, as another tool could; the row as it is afterwards."""
    with TableClient.from_connection_string(connection.connection_string, store.table_name) as raw:
        raw.upsert_entity({"PartitionKey": partition, "RowKey": encode_key(row), **columns}, mode=UpdateMode.MERGE)
        return dict(raw.get_entity(partition, encode_key(row)))


def _row(connection: StorageConnection, store: TableStateStore, partition: str, row: str) -> dict:
    with TableClient.from_connection_string(connection.connection_string, store.table_name) as raw:
        return dict(raw.get_entity(partition, encode_key(row)))


@pytest.mark.parametrize(("column", "value"), [
    ("Deleting", "{not json"),
    ("Deleting", "[1, 2]"),  # JSON, but not the object the column holds
    ("Committed", "{\"a\": 1}"),
    ("Stopped", "[[[]]]"),
    ("StoppedAt", "{\"0\": \"yesterday\"}"),
    ("Reclaim", "{\"node-1\": 5}"),
    ("Preempted", "null-ish"),
    ("Boots", "[\"fast\"]"),
    ("BootRequests", "[[\"2026-01-01T00:00:00+00:00\", 1]]"),
    ("Starts", "[1.5]"),
    ("StartRequests", "[[\"2026-01-01T00:00:00+00:00\", 1, 1]]"),  # counts where the instance ids go
    ("StartRequests", "[[\"2026-01-01T00:00:00+00:00\", [\"3\"]]]"),
    ("StartRequests", "[[\"never\", [\"3\"], []]]"),
    ("StartRequests", "[[\"2026-01-01T00:00:00+00:00\", [3], [3]]]"),  # ids are text
    ("BackoffFailures", "many"),
    ("LastScaleUp", "not a time"),
    ("Deleting", "[" * 5_000),  # nesting deep enough to exhaust the parser's recursion
])
def test_a_group_row_column_that_cannot_be_read_is_named(
        state_store: TableStateStore, storage_connection: StorageConnection, column: str, value: str) -> None:
    assert state_store.update_group(GroupState(GROUP, last_scale_up=T0, removing={"node-1": "down-1"}))
    before = _corrupt(storage_connection, state_store, "group", GROUP, **{column: value})

    with pytest.raises(UnreadableRow) as raised:
        state_store.get_group(GROUP)

    error = raised.value
    assert (error.table, error.partition_key, error.row_key, error.column) == (
        state_store.table_name, "group", encode_key(GROUP), column)
    assert state_store.table_name in str(error) and encode_key(GROUP) in str(error) and column in str(error)
    assert _row(storage_connection, state_store, "group", GROUP) == before  # read, never repaired in place


def _entry(action_id: str) -> LedgerEntry:
    return LedgerEntry(action_id, "scale-up", GROUP, (1, 0), "started", T0, record="{}")


@pytest.mark.parametrize(("column", "value"), [
    ("ProgressStep", "confirm"),
    ("ProgressAttempt", 1.5),
    ("Status", "finished"),
    ("UpdatedAt", "noon"),
    ("Duplicates", "a few"),
    ("FaultedSince", "earlier"),
    ("Outcome", 42),
])
def test_a_ledger_row_that_cannot_be_read_is_named_and_left_out_of_listings(
        state_store: TableStateStore, storage_connection: StorageConnection, column: str, value: object) -> None:
    assert state_store.create_ledger_entry(_entry("up-bad"))
    assert state_store.create_ledger_entry(_entry("up-good"))
    _corrupt(storage_connection, state_store, "ledger", "up-bad", **{column: value})

    with pytest.raises(UnreadableRow) as raised:
        state_store.get_ledger_entry("up-bad")

    assert (raised.value.partition_key, raised.value.row_key, raised.value.column) == ("ledger", "up-bad", column)
    assert [e.action_id for e in state_store.list_ledger()] == ["up-good"]
    assert state_store.get_ledger_entry("up-good") is not None


def test_a_missing_ledger_column_is_named(state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    assert state_store.create_ledger_entry(_entry("up-1"))
    with TableClient.from_connection_string(storage_connection.connection_string, state_store.table_name) as raw:
        entity = dict(raw.get_entity("ledger", "up-1"))
        del entity["ProgressStep"]
        raw.upsert_entity(entity, mode=UpdateMode.REPLACE)

    with pytest.raises(UnreadableRow, match="column 'ProgressStep'.*missing"):
        state_store.get_ledger_entry("up-1")


def test_unreadable_unneeded_and_offering_rows_are_left_out_and_the_others_kept(
        state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    state_store.set_unneeded("node-good", T0)
    state_store.set_unneeded("node-bad", T0)
    _corrupt(storage_connection, state_store, "unneeded", "node-bad", Since="a while ago")
    good = UnavailableOffering(OfferingKey.parse("westeurope/size/Standard_D4s_v5/-/regular"), until=T0 + timedelta(hours=1),
                               since=T0, kind="capacity", code="SkuNotAvailable")
    bad = UnavailableOffering(OfferingKey.parse("westeurope/size/Standard_D8s_v5/-/regular"), until=T0 + timedelta(hours=1),
                              since=T0, kind="capacity", code="SkuNotAvailable")
    state_store.put_offering(good)
    state_store.put_offering(bad)
    _corrupt(storage_connection, state_store, "offering", bad.key.text, Until="tomorrow")

    assert state_store.list_unneeded() == {"node-good": T0}
    assert [m.key for m in state_store.list_offerings()] == [good.key]


def test_the_limits_row_round_trips_and_an_unreadable_one_is_named(
        state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    assert state_store.get_limit_reservations() == LimitReservations()
    held = LimitReservation("up-1", GROUP, target=4, nodes=3, cores=4, memory_bytes=16 * 1024**3,
                            until=T0 + timedelta(minutes=5))
    assert state_store.update_limit_reservations(LimitReservations({"up-1": held}))
    assert not state_store.update_limit_reservations(LimitReservations())  # the row exists: first writer won
    row = state_store.get_limit_reservations()
    assert row.reservations == {"up-1": held} and row.etag is not None
    assert state_store.update_limit_reservations(LimitReservations({}, etag=row.etag))
    assert not state_store.update_limit_reservations(LimitReservations({"up-1": held}, etag=row.etag))  # stale etag

    _corrupt(storage_connection, state_store, "limits", "cluster", Reservations='{"up-2": {"group": "g"}}')
    with pytest.raises(UnreadableRow, match="'Reservations'") as raised:
        state_store.get_limit_reservations()
    assert (raised.value.partition_key, raised.value.row_key) == ("limits", "cluster")
