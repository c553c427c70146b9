"""The replay's in-memory state and queue keep the contracts the services rely on."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from devtools.replay.memory import MemoryQueue, MemoryStateStore
from shared.actions import new_scale_up
from shared.domain import GroupState
from shared.ports import LedgerEntry

T0 = datetime(2030, 1, 7, 9, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at


def test_group_rows_are_compare_and_swap() -> None:
    store = MemoryStateStore()
    fresh = store.get_group("rg/a")
    assert fresh.etag is None
    assert store.update_group(replace(fresh, last_scale_up=T0))
    read = store.get_group("rg/a")
    assert store.update_group(replace(read, last_failure=T0))
    assert not store.update_group(replace(read, last_scale_down=T0))  # stale etag: the other writer won
    assert not store.update_group(replace(fresh, last_scale_down=T0))  # "create" of a row that exists
    assert store.get_group("rg/a").last_failure == T0


def test_ledger_first_writer_wins_and_updates_need_the_current_etag() -> None:
    store = MemoryStateStore()
    entry = LedgerEntry("a1", "scale_up", "rg/a", (0, 0), "started", T0)
    assert store.create_ledger_entry(entry)
    assert not store.create_ledger_entry(entry)
    read = store.get_ledger_entry("a1")
    assert read is not None and store.update_ledger_entry(replace(read, status="done"))
    assert not store.update_ledger_entry(replace(read, status="released"))
    assert [e.status for e in store.list_ledger()] == ["done"]


def test_queue_delays_redelivers_and_poisons() -> None:
    clock = _Clock()
    queue = MemoryQueue(clock, max_dequeue_count=2, visibility_timeout=timedelta(seconds=10))
    action = new_scale_up(action_id="a1", group="rg/a", target_size=3, now=T0, ttl=timedelta(minutes=5))
    queue.send(action, delay=timedelta(seconds=5))
    assert queue.take_due(T0) is None and queue.next_visible() == T0 + timedelta(seconds=5)
    message = queue.take_due(T0 + timedelta(seconds=5))
    assert message is not None and action.id in message.text
    queue.failed(message, T0 + timedelta(seconds=5))  # first failure: back after the visibility timeout
    assert queue.next_visible() == T0 + timedelta(seconds=15)
    again = queue.take_due(T0 + timedelta(seconds=15))
    assert again is not None and again.dequeue_count == 1
    queue.failed(again, T0 + timedelta(seconds=15))  # second failure of two allowed: poison
    assert len(queue) == 0 and queue.poison == [message.text]
