"""The StateStore contract for the boot measurements of break-even idle mode (engine.idle), on every store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from shared.domain import GroupState
from shared.engine.idle import BOOT_WINDOW, REQUEST_WINDOW, measure_boots, note_boot_request
from shared.ports import StateStore

T0 = datetime(2030, 1, 7, 9, 0, 0, 123456, tzinfo=UTC)
GROUP = "rg-contract/pool-a"


def test_full_boot_and_request_windows_round_trip_in_order(store: StateStore) -> None:
    state = GroupState(GROUP)
    for i in range(REQUEST_WINDOW + 3):
        state = note_boot_request(state, 1 + i % 3, now=T0 + timedelta(seconds=i))
    # Requests of 1, 2, 3, 1, 2, 3... nodes: 46 nodes answer 23 whole requests and one of 3 in part.
    registered = [T0 + timedelta(seconds=60 + 7 * i) for i in range(46)]
    state = measure_boots(state, registered, now=T0 + timedelta(minutes=5), give_up=timedelta(minutes=15))
    assert len(state.boots) == BOOT_WINDOW and 0 < len(state.boot_requests) <= REQUEST_WINDOW
    assert any(asked != left for _, asked, left in state.boot_requests)  # one request partly answered
    assert store.update_group(state)

    read = store.get_group(GROUP)

    assert replace(read, etag=None) == state
    assert read.boots == state.boots  # oldest first, as measured


def test_a_measurement_is_written_over_the_row_it_read(store: StateStore) -> None:
    assert store.update_group(note_boot_request(GroupState(GROUP, last_scale_up=T0), 1, now=T0))
    row = store.get_group(GROUP)
    measured = measure_boots(row, [T0 + timedelta(seconds=88)], now=T0 + timedelta(seconds=90),
                             give_up=timedelta(minutes=15))
    assert store.update_group(measured)
    read = store.get_group(GROUP)
    assert (read.boots, read.boot_requests, read.boots_counted_until) == ((88,), (), T0 + timedelta(seconds=88))
    assert read.last_scale_up == T0  # the other columns untouched
