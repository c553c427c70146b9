"""The `Replacing` column of a group row (nodes being replaced, engine.replacement) against Azurite: every field
round-trips, in the memory stores too, and a value someone else wrote badly is named as any other column."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.data.tables import TableClient, UpdateMode

from devtools.replay.memory import MemoryStateStore as ReplayStateStore
from shared.adapters.storage_connection import StorageConnection
from shared.adapters.table_state import TableStateStore, encode_key
from shared.domain import DRIFTED, REPLACE, GroupState, Replacement
from shared.ports import StateStore, UnreadableRow
from shared.services.memory_state import MemoryStateStore

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
CET = timezone(timedelta(hours=1))
GROUP = "rg-nodes/pool-a~Standard_D8s_v5"
REPLACING = {
    "node-1": Replacement("node-1", REPLACE, "rg-nodes/pool-b", T0, action_id="scale-up:rg-nodes/pool-b:3:x",
                          count=1, together=("node-1", "node/2"), saving_per_hour=0.42,
                          detail="2 x Standard_D8s_v5 -> 1 x Standard_D16s_v5"),
    "node/2": Replacement("node/2", DRIFTED, GROUP, (T0 + timedelta(minutes=1)).astimezone(CET), detail="model"),
    # A given-up replacement's tombstone.
    "node-3": Replacement("node-3", DRIFTED, GROUP, T0 - timedelta(hours=1), detail="image",
                          given_up_at=(T0 - timedelta(minutes=20)).astimezone(CET)),
}


def _round_trip(store: StateStore) -> None:
    state = GroupState(GROUP, last_scale_up=T0, removing={"node/2": "down-1"}, replacing=REPLACING)
    assert store.update_group(state)
    read = store.get_group(GROUP)
    assert read == replace(state, etag=read.etag)
    # Dropped entries are dropped from the row (the column is replaced whole).
    assert store.update_group(replace(read, replacing={}))
    assert store.get_group(GROUP).replacing == {}


def test_replacing_round_trips_in_table_storage(state_store: TableStateStore) -> None:
    _round_trip(state_store)
    assert state_store.update_group(replace(state_store.get_group(GROUP), replacing=REPLACING))
    read = state_store.get_group(GROUP).replacing
    assert all(r.since.tzinfo == timezone.utc for r in read.values())
    assert read["node-3"].given_up_at is not None and read["node-3"].given_up_at.tzinfo == timezone.utc


@pytest.mark.parametrize("store", [MemoryStateStore, ReplayStateStore])
def test_replacing_round_trips_in_the_memory_stores(store: type[StateStore]) -> None:
    _round_trip(store())


@pytest.mark.parametrize("store", [MemoryStateStore, ReplayStateStore])
def test_the_memory_stores_refuse_a_naive_replacement_time(store: type[StateStore]) -> None:
    naive = {"node-1": replace(REPLACING["node-1"], since=T0.replace(tzinfo=None))}
    with pytest.raises(ValueError, match="Replacing"):
        store().update_group(GroupState(GROUP, replacing=naive))


def test_a_naive_replacement_time_is_refused_by_table_storage(state_store: TableStateStore) -> None:
    naive = {"node-1": replace(REPLACING["node-1"], since=T0.replace(tzinfo=None))}
    with pytest.raises(ValueError, match="Replacing"):
        state_store.update_group(GroupState(GROUP, replacing=naive))


def _corrupt(connection: StorageConnection, store: TableStateStore, **columns: Any) -> None:
    with TableClient.from_connection_string(connection.connection_string, store.table_name) as raw:
        raw.upsert_entity({"PartitionKey": "group", "RowKey": encode_key(GROUP), **columns}, mode=UpdateMode.MERGE)


@pytest.mark.parametrize("value", [
    "{not json",
    "[1, 2]",  # JSON, but not an object
    '{"node-1": 5}',  # an entry that is not an object
    '{"node-1": {"toGroup": "g", "since": "2026-01-01T00:00:00+00:00"}}',  # no reason
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "soon"}}',
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "2026-01-01T00:00:00+00:00", "count": "two"}}',
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "2026-01-01T00:00:00+00:00", "together": "a"}}',
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "2026-01-01T00:00:00+00:00", "savingPerHour": "x"}}',
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "2026-01-01T00:00:00+00:00", "givenUpAt": "later"}}',
    '{"node-1": {"reason": "Replace", "toGroup": "g", "since": "2026-01-01T00:00:00+00:00", "givenUpAt": 5}}',
])
def test_a_replacing_value_that_cannot_be_read_is_named(
        state_store: TableStateStore, storage_connection: StorageConnection, value: str) -> None:
    assert state_store.update_group(GroupState(GROUP, replacing=REPLACING))
    _corrupt(storage_connection, state_store, Replacing=value)

    with pytest.raises(UnreadableRow) as raised:
        state_store.get_group(GROUP)

    assert (raised.value.partition_key, raised.value.row_key, raised.value.column) == (
        "group", encode_key(GROUP), "Replacing")


def test_a_row_written_before_the_column_reads_as_no_replacement(
        state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    assert state_store.update_group(GroupState(GROUP, last_scale_up=T0))
    with TableClient.from_connection_string(storage_connection.connection_string, state_store.table_name) as raw:
        entity = dict(raw.get_entity("group", encode_key(GROUP)))
        entity.pop("Replacing")
        raw.upsert_entity(entity, mode=UpdateMode.REPLACE)
    assert state_store.get_group(GROUP).replacing == {}


@pytest.mark.parametrize("store", [MemoryStateStore, ReplayStateStore])
def test_the_memory_stores_refuse_a_naive_give_up_time(store: type[StateStore]) -> None:
    naive = {"node-3": replace(REPLACING["node-3"], given_up_at=T0.replace(tzinfo=None))}
    with pytest.raises(ValueError, match="Replacing"):
        store().update_group(GroupState(GROUP, replacing=naive))


def test_an_entry_written_before_given_up_at_reads_as_under_way(
        state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    assert state_store.update_group(GroupState(GROUP, replacing=REPLACING))
    _corrupt(storage_connection, state_store, Replacing='{"node-1": {"reason": "Replace", "toGroup": "g", '
                                                        '"since": "2026-01-01T00:00:00+00:00"}}')
    entry = state_store.get_group(GROUP).replacing["node-1"]
    assert entry.given_up_at is None and entry.since == datetime(2026, 1, 1, tzinfo=timezone.utc)
