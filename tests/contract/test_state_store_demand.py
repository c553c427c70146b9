"""The StateStore contract for the demand rows of the forecast (engine.forecast), on every store."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.domain import DemandHistory
from shared.engine.forecast import HISTORY_HOURS, note_demand
from shared.ports import StateStore

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
CET = timezone(timedelta(hours=1))
GROUP = "rg-contract/pool-a"  # a `/`, which Table keys forbid


def full_history() -> DemandHistory:
    """Every hour kept, with fractions, zeros and hours not observed among whole numbers."""
    history = DemandHistory(GROUP)
    for hour in range(HISTORY_HOURS + 30):
        if hour % 97 == 5:
            continue  # no poll that hour: null
        history = note_demand(history, (hour * 7) % 13 + (0.5 if hour % 11 == 0 else 0), now=T0 + hour * timedelta(hours=1))
    return history


def test_an_unknown_group_has_an_empty_history(store: StateStore) -> None:
    assert store.get_demand(GROUP) == DemandHistory(GROUP)
    assert store.list_demand() == []


def test_a_full_history_round_trips_and_is_listed(store: StateStore) -> None:
    written = full_history()
    assert len(written.peaks) == HISTORY_HOURS and None in written.peaks and 0 in written.peaks
    other = DemandHistory("rg-contract/pool#2?", start=T0.astimezone(CET), peaks=(3,))
    assert store.update_demand(written) and store.update_demand(other)

    read = store.get_demand(GROUP)

    assert read.etag and replace(read, etag=None) == written
    assert store.get_demand(other.group_id).start == T0  # the same instant, whatever the offset written
    assert sorted((h.group_id, h.peaks) for h in store.list_demand()) == sorted(
        [(GROUP, written.peaks), (other.group_id, (3,))])


def test_the_full_history_fits_a_table_property() -> None:
    # Table storage: 64 KiB per string property (32 K UTF-16 characters); the adapter writes compact JSON.
    text = json.dumps([int(p) if p is not None and float(p).is_integer() else p for p in full_history().peaks],
                      separators=(",", ":"))
    assert len(text) < 32 * 1024


def test_update_demand_is_compare_and_swap_on_the_etag(store: StateStore) -> None:
    first = note_demand(DemandHistory(GROUP), 2, now=T0)
    assert store.update_demand(first)  # no etag: create
    assert not store.update_demand(note_demand(DemandHistory(GROUP), 5, now=T0))  # no etag again: the row exists
    read = store.get_demand(GROUP)
    assert store.update_demand(note_demand(read, 4, now=T0))
    assert not store.update_demand(note_demand(read, 6, now=T0))  # the etag it read is stale now
    assert store.get_demand(GROUP).peaks == (4,)


def test_a_naive_start_is_refused(store: StateStore) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        store.update_demand(DemandHistory(GROUP, start=datetime(2030, 1, 7, 9), peaks=(1,)))
    assert store.get_demand(GROUP) == DemandHistory(GROUP)
