"""TableStateStore against real Table storage (Azurite): round trips, ETag races, key encoding."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone

import pytest
from azure.data.tables import TableClient
from hypothesis import given
from hypothesis import strategies as st

from shared.adapters.storage_connection import StorageConnection
from shared.adapters.table_state import TableStateStore, decode_key, encode_key
from shared.domain import GroupState
from shared.ports import LedgerEntry
from shared.settings import load_settings

T0 = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=timezone.utc)
CET = timezone(timedelta(hours=1))
GROUP = "rg-nodes/pool-a"

# Names that Table storage would reject as keys, or that an escaping scheme could confuse.
AWKWARD_NAMES = [
    pytest.param("rg/vmss", id="slash"),
    pytest.param("rg\\vmss", id="backslash"),
    pytest.param("a#b", id="hash"),
    pytest.param("what?", id="question-mark"),
    pytest.param("100%", id="percent"),
    pytest.param("a%2Fb", id="already-escaped-looking"),
    pytest.param("tab\there", id="control-character"),
    pytest.param("o'brien", id="odata-quote"),
    pytest.param("nœud-ünïcode", id="unicode"),
    pytest.param("/\\#?%", id="all-forbidden"),
]
FORBIDDEN = set("/\\#?") | {chr(code) for code in [*range(0x20), *range(0x7F, 0xA0)]}


# --- key encoding (pure) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("rg/vmss", "rg%2Fvmss"),
        ("aks-nodepool1-12345678-vmss000001", "aks-nodepool1-12345678-vmss000001"),
        ("a\\b#c?d", "a%5Cb%23c%3Fd"),
        ("50%", "50%25"),
        ("line\nbreak", "line%0Abreak"),
        ("\x85", "%C2%85"),
        ("", ""),
    ],
)
def test_encode_key_escapes_only_what_tables_forbid(value: str, key: str) -> None:
    assert encode_key(value) == key
    assert decode_key(key) == value


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"])))
def test_encode_key_round_trips_and_leaves_no_forbidden_character(value: str) -> None:
    key = encode_key(value)
    assert decode_key(key) == value
    assert not FORBIDDEN & set(key)


# --- groups ----------------------------------------------------------------------------


def test_absent_group_reads_as_defaults_without_etag(state_store: TableStateStore) -> None:
    assert state_store.get_group(GROUP) == GroupState(GROUP)


def test_group_round_trip(state_store: TableStateStore) -> None:
    state = GroupState(
        GROUP,
        last_scale_up=T0,
        last_scale_down=T0 + timedelta(minutes=5),
        last_failure=(T0 + timedelta(minutes=7)).astimezone(CET),  # any zone in, UTC out
        removing={"node-1": "scale-down:node-1:1", "node/2": "scale-down:node/2:1"},
        committed=frozenset({"node/2"}),
        reclaim={"node-1": T0 + timedelta(minutes=3)},
        stopped=frozenset({"4", "7"}),
        stopped_at={"4": T0 - timedelta(hours=2), "7": (T0 - timedelta(minutes=1)).astimezone(CET)},
        backoff_until=T0 + timedelta(minutes=12),
        backoff_failures=2,
        backoff_reason="QuotaExceeded",
        throttled_until=T0 + timedelta(seconds=75),
    )
    assert state_store.update_group(state)
    read = state_store.get_group(GROUP)
    assert read.etag
    assert read == replace(state, etag=read.etag)
    for moment in (read.last_scale_up, read.last_scale_down, read.last_failure, read.backoff_until,
                   read.throttled_until):
        assert type(moment) is datetime
        assert moment is not None and moment.tzinfo == timezone.utc


def test_deallocation_times_are_kept_only_for_stopped_instances(state_store: TableStateStore) -> None:
    """A started instance's time is not carried on: stopped again later, it is not mistaken for an old one."""
    assert state_store.update_group(GroupState(GROUP, stopped=frozenset({"4"}), stopped_at={"4": T0, "9": T0}))
    assert state_store.get_group(GROUP).stopped_at == {"4": T0}


def test_update_replaces_the_whole_row(state_store: TableStateStore) -> None:
    assert state_store.update_group(GroupState(GROUP, last_scale_up=T0, last_failure=T0, removing={"node-1": "a1"}))
    read = state_store.get_group(GROUP)
    assert state_store.update_group(replace(read, last_failure=None, removing={}))
    assert state_store.get_group(GROUP) == GroupState(GROUP, last_scale_up=T0, etag=state_store.get_group(GROUP).etag)


def test_group_creation_race_first_writer_wins(state_store: TableStateStore) -> None:
    first = GroupState(GROUP, last_scale_up=T0)
    second = GroupState(GROUP, last_failure=T0)
    assert [state_store.update_group(first), state_store.update_group(second)] == [True, False]
    assert state_store.get_group(GROUP).last_scale_up == T0
    assert state_store.get_group(GROUP).last_failure is None


def test_group_update_race_exactly_one_writer_wins(state_store: TableStateStore) -> None:
    assert state_store.update_group(GroupState(GROUP))
    seen_by_a = state_store.get_group(GROUP)
    seen_by_b = state_store.get_group(GROUP)
    assert state_store.update_group(replace(seen_by_a, last_scale_up=T0))
    assert not state_store.update_group(replace(seen_by_b, last_scale_down=T0))
    current = state_store.get_group(GROUP)
    assert (current.last_scale_up, current.last_scale_down) == (T0, None)
    # The loser re-reads and tries again, as the services do.
    assert state_store.update_group(replace(current, last_scale_down=T0))
    assert state_store.get_group(GROUP).last_scale_down == T0


@pytest.mark.parametrize("create_first", [False, True], ids=["concurrent-create", "concurrent-update"])
def test_concurrent_writers_exactly_one_wins(
    storage_connection: StorageConnection, table_name: str, create_first: bool
) -> None:
    writers = 6
    stores = [TableStateStore(storage_connection, table_name) for _ in range(writers)]
    if create_first:
        assert stores[0].update_group(GroupState(GROUP))
    all_read = threading.Barrier(writers)
    results: dict[int, bool] = {}

    def write(index: int) -> None:
        seen = stores[index].get_group(GROUP)
        all_read.wait(timeout=10)  # everyone holds the same version before anyone writes
        results[index] = stores[index].update_group(replace(seen, removing={f"node-{index}": f"a{index}"}))

    threads = [threading.Thread(target=write, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for store in stores:
        store.close()
    winners = [index for index, won in results.items() if won]
    assert len(results) == writers and len(winners) == 1
    with TableStateStore(storage_connection, table_name) as reader:
        assert reader.get_group(GROUP).removing == {f"node-{winners[0]}": f"a{winners[0]}"}


def test_stale_etag_of_a_deleted_row_loses(state_store: TableStateStore, storage_connection: StorageConnection) -> None:
    assert state_store.update_group(GroupState(GROUP))
    seen = state_store.get_group(GROUP)
    # No port method deletes a group row; another tool (or an operator) might.
    with TableClient.from_connection_string(storage_connection.connection_string, state_store.table_name) as raw:
        raw.delete_entity("group", encode_key(GROUP))
    assert not state_store.update_group(replace(seen, last_scale_up=T0))


NAIVE = datetime(2026, 1, 1)


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda store: store.update_group(GroupState(GROUP, last_scale_up=NAIVE)), id="group"),
        pytest.param(lambda store: store.set_unneeded("node-1", NAIVE), id="unneeded"),
        pytest.param(lambda store: store.create_ledger_entry(_entry(updated_at=NAIVE)), id="ledger"),
    ],
)
def test_naive_times_are_refused(state_store: TableStateStore, write: Callable[[TableStateStore], object]) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        write(state_store)
    assert state_store.list_unneeded() == {}


# --- unneeded nodes ----------------------------------------------------------------------


def test_unneeded_set_list_clear(state_store: TableStateStore) -> None:
    assert state_store.list_unneeded() == {}
    state_store.set_unneeded("node-1", T0)
    state_store.set_unneeded("node-2", T0 + timedelta(minutes=1))
    state_store.set_unneeded("node-1", T0 + timedelta(minutes=2))  # set again: the new time replaces the old
    assert state_store.list_unneeded() == {"node-1": T0 + timedelta(minutes=2), "node-2": T0 + timedelta(minutes=1)}
    state_store.clear_unneeded("node-1")
    state_store.clear_unneeded("node-1")  # already gone: a no-op
    state_store.clear_unneeded("never-seen")
    assert state_store.list_unneeded() == {"node-2": T0 + timedelta(minutes=1)}


def test_unneeded_lists_every_node_and_nothing_else(state_store: TableStateStore) -> None:
    names = [f"node-{index:03d}" for index in range(40)]
    for name in names:
        state_store.set_unneeded(name, T0)
    state_store.update_group(GroupState(GROUP, last_scale_up=T0))  # other partitions stay out of the list
    assert state_store.list_unneeded() == dict.fromkeys(names, T0)


# --- ledger ------------------------------------------------------------------------------


def _entry(action_id: str = "act-1", **changes: object) -> LedgerEntry:
    entry = LedgerEntry(
        action_id=action_id, kind="scale_down", group=GROUP, progress=(0, 0), status="started", updated_at=T0
    )
    return replace(entry, **changes)  # type: ignore[arg-type]


def test_ledger_entry_absent_is_none(state_store: TableStateStore) -> None:
    assert state_store.get_ledger_entry("act-1") is None
    assert state_store.list_ledger() == []


def test_every_ledger_field_is_stored(state_store: TableStateStore) -> None:
    values = {
        "action_id": "act/1",
        "kind": "scale_down",
        "group": GROUP,
        "progress": (2, 3),
        "status": "released",
        "updated_at": T0.astimezone(CET),
        "outcome": "failed: drain timed out",
        "operation": "token-" + "x" * 2000,
        "node": "node-1",
        "duplicates": 4,
        "record": '{"nodes":{"node-1":"azure:///x"}}',
        "faulted_since": T0.astimezone(CET),
        "step_started_at": T0.astimezone(CET),
    }
    # A field added to LedgerEntry must be added here and to the adapter's columns.
    assert set(values) == {field.name for field in fields(LedgerEntry)} - {"etag"}
    entry = LedgerEntry(**values)  # type: ignore[arg-type]
    assert state_store.create_ledger_entry(entry)
    read = state_store.get_ledger_entry("act/1")
    assert read is not None and read.etag
    assert read == replace(entry, etag=read.etag)
    assert read.updated_at.tzinfo == timezone.utc
    assert read.faulted_since is not None and read.faulted_since.tzinfo == timezone.utc
    assert read.step_started_at is not None and read.step_started_at.tzinfo == timezone.utc


def test_ledger_first_writer_wins(state_store: TableStateStore) -> None:
    assert state_store.create_ledger_entry(_entry(node="first"))
    assert not state_store.create_ledger_entry(_entry(node="second"))
    read = state_store.get_ledger_entry("act-1")
    assert read is not None and read.node == "first"


def test_ledger_update_is_compare_and_swap(state_store: TableStateStore) -> None:
    assert state_store.create_ledger_entry(_entry())
    seen_by_a = state_store.get_ledger_entry("act-1")
    seen_by_b = state_store.get_ledger_entry("act-1")
    assert seen_by_a is not None and seen_by_b is not None
    assert state_store.update_ledger_entry(replace(seen_by_a, progress=(1, 0), status="done"))
    assert not state_store.update_ledger_entry(replace(seen_by_b, progress=(0, 1)))
    current = state_store.get_ledger_entry("act-1")
    assert current is not None
    assert (current.progress, current.status) == ((1, 0), "done")
    assert current.etag != seen_by_a.etag


def test_ledger_update_needs_the_etag_it_read(state_store: TableStateStore) -> None:
    with pytest.raises(ValueError, match="etag"):
        state_store.update_ledger_entry(_entry())


def test_list_ledger_returns_every_entry(state_store: TableStateStore) -> None:
    ids = [f"act-{index}" for index in range(5)]
    for action_id in ids:
        assert state_store.create_ledger_entry(_entry(action_id))
    state_store.set_unneeded("node-1", T0)
    listed = state_store.list_ledger()
    assert sorted(entry.action_id for entry in listed) == ids
    assert all(entry.etag for entry in listed)


# --- key encoding through real Table storage -------------------------------------------


@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_awkward_names_round_trip_as_keys(state_store: TableStateStore, name: str) -> None:
    assert state_store.update_group(GroupState(name, last_scale_up=T0))
    assert state_store.get_group(name).last_scale_up == T0
    state_store.set_unneeded(name, T0)
    assert state_store.list_unneeded() == {name: T0}
    assert state_store.create_ledger_entry(_entry(name))
    assert [entry.action_id for entry in state_store.list_ledger()] == [name]
    state_store.clear_unneeded(name)
    assert state_store.list_unneeded() == {}


def test_names_that_look_escaped_do_not_collide(state_store: TableStateStore) -> None:
    state_store.set_unneeded("a/b", T0)
    state_store.set_unneeded("a%2Fb", T0 + timedelta(seconds=1))
    assert state_store.list_unneeded() == {"a/b": T0, "a%2Fb": T0 + timedelta(seconds=1)}


def test_table_is_created_on_first_use(storage_connection: StorageConnection, table_name: str) -> None:
    env = {
        "CLUSTER_NAME": "c1",
        "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
        "NODE_RESOURCE_GROUPS": "rg",
        "KUBECONFIG_PATH": "/tmp/kubeconfig",
        "STATE_TABLE": table_name,
        "AzureWebJobsStorage": storage_connection.connection_string,
    }
    with TableStateStore.from_settings(load_settings(env), env=env) as store:
        assert store.table_name == table_name
        store.set_unneeded("node-1", T0)
    with TableStateStore(storage_connection, table_name, create_table=False) as again:
        assert again.list_unneeded() == {"node-1": T0}
