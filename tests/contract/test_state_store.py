"""The StateStore contract: TableStateStore on Azurite, MemoryStateStore, and MemoryStateStore as an overlay."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.domain import GroupState
from shared.ports import LedgerEntry, StateStore

T0 = datetime(2030, 1, 7, 9, 0, 0, 123456, tzinfo=UTC)
CET = timezone(timedelta(hours=1))
GROUP = "rg-contract/pool-a"  # a `/`, which Table keys forbid, as every group id has


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def entry(action_id: str = "scale-up:rg-contract/pool-a:1", *, minutes: float = 0, outcome: str = "",
          **fields: object) -> LedgerEntry:
    return LedgerEntry(action_id=action_id, kind="scale_up", group=GROUP, progress=(0, 0), status="started",
                       updated_at=at(minutes), outcome=outcome, **fields)  # type: ignore[arg-type]


def unstamped(value: GroupState | LedgerEntry | None) -> GroupState | LedgerEntry | None:
    return None if value is None else replace(value, etag=None)


# --- groups ----------------------------------------------------------------------------------------------


def test_an_unknown_group_is_an_empty_state_without_etag(store: StateStore) -> None:
    assert store.get_group(GROUP) == GroupState(GROUP)


def test_every_group_field_round_trips(store: StateStore) -> None:
    written = GroupState(
        group_id="rg-contract/pool#1?",  # characters Table storage forbids in keys
        last_scale_up=at(1),
        last_scale_down=at(2).astimezone(CET),  # another offset: the same instant comes back
        last_failure=at(3),
        removing={"pool-a000001": "scale-down:pool-a000001:20300107T090000Z", "pool-a000002": "scale-down:x"},
        committed=frozenset({"pool-a000001"}),
        reclaim={"pool-a000002": at(4)},
        stopped=frozenset({"3", "4"}),
        stopped_at={"3": at(5), "4": at(6)},
        backoff_until=at(7),
        backoff_failures=3,
        backoff_reason="QuotaExceeded",
        throttled_until=at(8),
        preempted={"7": at(9), "vm-flex_1a2b3c4d": at(10).astimezone(CET)},
        boots=(95, 101, 240),
        boot_requests=((at(11), 3, 2), (at(12).astimezone(CET), 1, 1)),
        boots_counted_until=at(13),
        starts=(41, 55),
        start_requests=((at(14), ("3", "vm-flex_1a2b3c4d"), ("vm-flex_1a2b3c4d",)),
                        (at(15).astimezone(CET), ("4",), ())),
        atomic_holder="provreq:0b6f2c1e-5d7a-4a1b-9c3e-2f8d7e6a5b4c",
        atomic_since=at(16).astimezone(CET),
    )
    assert store.update_group(written)

    read = store.get_group(written.group_id)

    assert read.etag
    assert unstamped(read) == written
    assert store.get_group("rg-contract/pool#2?") == GroupState("rg-contract/pool#2?")  # keys stay apart


def test_empty_collections_and_absent_times_round_trip(store: StateStore) -> None:
    assert store.update_group(GroupState(GROUP, last_scale_up=at(1)))
    first = store.get_group(GROUP)
    assert store.update_group(replace(first, last_scale_up=None, removing={}, backoff_failures=0))
    assert unstamped(store.get_group(GROUP)) == GroupState(GROUP)


def test_update_group_is_compare_and_swap_on_the_etag(store: StateStore) -> None:
    assert store.update_group(GroupState(GROUP, last_scale_up=at(1)))  # no etag: create
    assert not store.update_group(GroupState(GROUP, last_scale_up=at(9)))  # no etag again: the row exists
    read = store.get_group(GROUP)

    assert store.update_group(replace(read, last_scale_up=at(2)))
    assert not store.update_group(replace(read, last_scale_up=at(3)))  # `read`'s etag is stale now

    now = store.get_group(GROUP)
    assert now.last_scale_up == at(2) and now.etag != read.etag


def test_update_group_with_an_etag_of_a_row_that_does_not_exist_loses(store: StateStore) -> None:
    assert store.update_group(GroupState(GROUP, last_scale_up=at(1)))
    etag = store.get_group(GROUP).etag

    assert not store.update_group(GroupState("rg-contract/pool-gone", etag=etag))
    assert store.get_group("rg-contract/pool-gone") == GroupState("rg-contract/pool-gone")


# --- unneeded nodes --------------------------------------------------------------------------------------


def test_unneeded_nodes_set_list_and_clear(store: StateStore) -> None:
    assert store.list_unneeded() == {}
    store.set_unneeded("pool-a000000", at(1))
    store.set_unneeded("pool-a000001", at(2).astimezone(CET))
    store.set_unneeded("pool-a000000", at(3))  # set again: the newer time replaces the older
    assert store.list_unneeded() == {"pool-a000000": at(3), "pool-a000001": at(2)}

    store.clear_unneeded("pool-a000000")
    store.clear_unneeded("pool-a000000")  # already cleared: no error
    store.clear_unneeded("never-unneeded")

    assert store.list_unneeded() == {"pool-a000001": at(2)}


# --- ledger ----------------------------------------------------------------------------------------------


def test_an_unknown_ledger_entry_is_none(store: StateStore) -> None:
    assert store.get_ledger_entry("scale-up:nothing") is None
    assert store.list_ledger() == []


def test_every_ledger_field_round_trips(store: StateStore) -> None:
    written = LedgerEntry(
        action_id="scale-down:pool-a000001+2:20300107T090000Z",
        kind="scale_down",
        group=GROUP,
        progress=(2, 3),
        status="done",
        updated_at=at(1).astimezone(CET),
        outcome="failed: drain timed out",
        operation="b" * 2000,  # continuation tokens are long
        node="pool-a000001",
        duplicates=4,
        record='{"nodes": ["pool-a000001"]}',
        faulted_since=at(0.5),
    )
    assert store.create_ledger_entry(written)

    read = store.get_ledger_entry(written.action_id)

    assert read is not None and read.etag
    assert unstamped(read) == written
    assert [unstamped(e) for e in store.list_ledger()] == [written]


def test_the_first_writer_of_a_ledger_entry_wins(store: StateStore) -> None:
    first = entry(node="first")
    assert store.create_ledger_entry(first)
    assert not store.create_ledger_entry(replace(first, node="second"))
    assert unstamped(store.get_ledger_entry(first.action_id)) == first


def test_update_ledger_entry_is_compare_and_swap_on_the_etag(store: StateStore) -> None:
    assert store.create_ledger_entry(entry())
    read = store.get_ledger_entry(entry().action_id)
    assert read is not None

    assert store.update_ledger_entry(replace(read, progress=(1, 0), status="done"))
    assert not store.update_ledger_entry(replace(read, progress=(1, 1)))  # stale etag

    now = store.get_ledger_entry(read.action_id)
    assert now is not None and (now.progress, now.status) == ((1, 0), "done") and now.etag != read.etag
    assert not store.update_ledger_entry(replace(now, action_id="scale-up:never-created"))  # no such row
    assert store.get_ledger_entry("scale-up:never-created") is None


def test_list_finished_ledger_keeps_finished_entries_older_than_the_cutoff(store: StateStore) -> None:
    rows = {
        "a-old-succeeded": entry("a-old-succeeded", minutes=1, outcome="succeeded"),
        "b-old-failed": entry("b-old-failed", minutes=2, outcome="failed: quota"),
        "c-old-running": entry("c-old-running", minutes=3),  # no outcome: not finished
        "d-at-cutoff": entry("d-at-cutoff", minutes=10, outcome="succeeded"),  # not before the cutoff
        "e-new": entry("e-new", minutes=20, outcome="skipped: cooldown"),
    }
    for row in rows.values():
        assert store.create_ledger_entry(row)

    finished = store.list_finished_ledger(updated_before=at(10), limit=100)

    assert sorted(e.action_id for e in finished) == ["a-old-succeeded", "b-old-failed"]
    assert all(e.etag for e in finished)
    assert {e.action_id: unstamped(e) for e in finished} == {k: rows[k] for k in ("a-old-succeeded", "b-old-failed")}
    assert sorted(e.action_id for e in store.list_ledger()) == sorted(rows)


def test_list_finished_ledger_returns_at_most_limit_entries(store: StateStore) -> None:
    for index in range(5):
        assert store.create_ledger_entry(entry(f"done-{index}", minutes=index, outcome="succeeded"))

    some = store.list_finished_ledger(updated_before=at(60), limit=2)

    # Which two is the implementation's business (by key in Table storage, oldest first in memory).
    assert len(some) == 2 and {e.action_id for e in some} <= {f"done-{i}" for i in range(5)}
    assert len(store.list_finished_ledger(updated_before=at(60), limit=10)) == 5


def test_delete_ledger_entry_is_compare_and_swap_on_the_etag(store: StateStore) -> None:
    assert store.create_ledger_entry(entry(outcome="succeeded"))
    read = store.get_ledger_entry(entry().action_id)
    assert read is not None
    assert store.update_ledger_entry(replace(read, duplicates=1))

    assert not store.delete_ledger_entry(read)  # stale etag: changed since it was read
    assert store.get_ledger_entry(read.action_id) is not None

    current = store.get_ledger_entry(read.action_id)
    assert current is not None and store.delete_ledger_entry(current)
    assert store.get_ledger_entry(read.action_id) is None
    assert store.list_ledger() == []
    assert store.list_finished_ledger(updated_before=at(60), limit=10) == []

    assert store.create_ledger_entry(entry())  # the id can be taken again
    assert unstamped(store.get_ledger_entry(read.action_id)) == entry()


def test_deleting_a_ledger_entry_already_gone_loses(store: StateStore) -> None:
    assert store.create_ledger_entry(entry(outcome="succeeded"))
    read = store.get_ledger_entry(entry().action_id)
    assert read is not None and store.delete_ledger_entry(read)

    assert not store.delete_ledger_entry(read)  # another sweeper got there first: the row changed (it is gone)


# --- caller bugs: refused, not lost races ------------------------------------------------------------------


def test_a_ledger_write_without_the_etag_it_read_is_refused_as_a_bug(store: StateStore) -> None:
    assert store.create_ledger_entry(entry(outcome="succeeded"))
    with pytest.raises(ValueError, match="etag"):
        store.update_ledger_entry(entry(outcome="succeeded"))
    with pytest.raises(ValueError, match="etag"):
        store.delete_ledger_entry(entry(outcome="succeeded"))


def test_a_naive_time_is_refused(store: StateStore) -> None:
    naive = datetime(2030, 1, 7, 9, 0)
    with pytest.raises(ValueError, match="timezone-aware"):
        store.update_group(GroupState(GROUP, last_scale_up=naive))
    with pytest.raises(ValueError, match="timezone-aware"):
        store.set_unneeded("pool-a000000", naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create_ledger_entry(replace(entry(), updated_at=naive))


@pytest.mark.parametrize("naive_state", [
    pytest.param(GroupState(GROUP, backoff_until=datetime(2030, 1, 7, 9, 0)), id="backoff-until"),
    pytest.param(GroupState(GROUP, reclaim={"pool-a000001": datetime(2030, 1, 7, 9, 0)}), id="reclaim"),
    pytest.param(GroupState(GROUP, stopped=frozenset({"3"}), stopped_at={"3": datetime(2030, 1, 7, 9, 0)}),
                 id="stopped-at"),
    pytest.param(GroupState(GROUP, boot_requests=((datetime(2030, 1, 7, 9, 0), 2, 2),)), id="boot-requests"),
    pytest.param(GroupState(GROUP, boots_counted_until=datetime(2030, 1, 7, 9, 0)), id="boots-counted-until"),
    pytest.param(GroupState(GROUP, start_requests=((datetime(2030, 1, 7, 9, 0), ("3",), ("3",)),)),
                 id="start-requests"),
    pytest.param(GroupState(GROUP, atomic_holder="provreq:u", atomic_since=datetime(2030, 1, 7, 9, 0)),
                 id="atomic-since"),
])
def test_a_naive_time_anywhere_in_a_group_is_refused_and_nothing_written(store: StateStore,
                                                                          naive_state: GroupState) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        store.update_group(naive_state)
    assert store.get_group(GROUP) == GroupState(GROUP)


def test_a_naive_time_in_a_ledger_write_or_query_is_refused(store: StateStore) -> None:
    naive = datetime(2030, 1, 7, 9, 0)
    assert store.create_ledger_entry(entry())
    read = store.get_ledger_entry(entry().action_id)
    assert read is not None
    with pytest.raises(ValueError, match="timezone-aware"):
        store.update_ledger_entry(replace(read, faulted_since=naive))
    with pytest.raises(ValueError, match="timezone-aware"):
        store.list_finished_ledger(updated_before=naive, limit=10)
    assert store.update_ledger_entry(replace(read, status="done"))  # `read`'s etag still holds: nothing was written


# --- unavailable offerings --------------------------------------------------------------------------------


def test_unavailable_offerings_put_list_replace_and_delete(store: StateStore) -> None:
    from shared.domain import OfferingKey, UnavailableOffering

    spot = OfferingKey("westeurope", "size", "standard_d4s_v5", "1", "Spot")
    family = OfferingKey("westeurope", "family", "standarddsv5family", "", "Regular")
    first = UnavailableOffering(spot, until=at(60), since=at(0), kind="spot-capacity", code="SkuNotAvailable",
                                group=GROUP, message="no spot capacity")
    store.put_offering(first)
    store.put_offering(UnavailableOffering(family, until=at(10).astimezone(CET), since=at(0), kind="family-quota",
                                           code="OperationNotAllowed"))
    assert {m.key: (m.until, m.kind, m.code, m.group) for m in store.list_offerings()} == {
        spot: (at(60), "spot-capacity", "SkuNotAvailable", GROUP),
        family: (at(10), "family-quota", "OperationNotAllowed", ""),
    }
    store.put_offering(replace(first, until=at(120)))  # one row per key: a later mark replaces it
    assert sorted((m.key.text, m.until) for m in store.list_offerings()) == sorted(
        [(spot.text, at(120)), (family.text, at(10))])
    store.delete_offering(spot.text)
    store.delete_offering(spot.text)  # gone already: no error
    assert [m.key for m in store.list_offerings()] == [family]
