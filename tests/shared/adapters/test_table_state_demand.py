"""TableStateStore's demand rows written badly by someone else (Azurite): named by table, keys and column; the
listing leaves the row out and keeps the others; nothing is written over it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from azure.data.tables import TableClient, UpdateMode

from shared.adapters.storage_connection import StorageConnection
from shared.adapters.table_state import DEMAND_PARTITION, TableStateStore, encode_key
from shared.domain import DemandHistory
from shared.ports import UnreadableRow

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
GROUP = "rg-nodes/pool-a"
OTHER = "rg-nodes/pool-b"


@pytest.mark.parametrize(("column", "value"), [
    ("Peaks", "{not json"),
    ("Peaks", "{\"0\": 1}"),  # JSON, but not the list the column holds
    ("Peaks", "[1, -2]"),  # a negative peak
    ("Peaks", "[1, \"3\"]"),  # a peak as text
    ("Peaks", "[NaN]"),
    ("Peaks", "[" * 5_000),  # nesting deep enough to exhaust the parser's recursion
    ("Start", "not a time"),
])
def test_a_demand_row_that_cannot_be_read_is_named_and_left_out(
        state_store: TableStateStore, storage_connection: StorageConnection, column: str, value: str) -> None:
    assert state_store.update_demand(DemandHistory(GROUP, start=T0, peaks=(1, None, 2.5)))
    assert state_store.update_demand(DemandHistory(OTHER, start=T0, peaks=(4,)))
    with TableClient.from_connection_string(storage_connection.connection_string, state_store.table_name) as raw:
        raw.upsert_entity({"PartitionKey": DEMAND_PARTITION, "RowKey": encode_key(GROUP), column: value},
                          mode=UpdateMode.MERGE)
        before = dict(raw.get_entity(DEMAND_PARTITION, encode_key(GROUP)))

        with pytest.raises(UnreadableRow) as raised:
            state_store.get_demand(GROUP)

        error = raised.value
        assert (error.table, error.partition_key, error.row_key, error.column) == (
            state_store.table_name, DEMAND_PARTITION, encode_key(GROUP), column)
        assert [h.group_id for h in state_store.list_demand()] == [OTHER]
        assert dict(raw.get_entity(DEMAND_PARTITION, encode_key(GROUP))) == before
