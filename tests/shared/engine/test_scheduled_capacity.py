"""Scheduled-capacity windows: when a window is active, which minimum wins, and which configurations are refused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from shared.domain import NodeGroup
from shared.engine.scheduled_capacity import (
    WindowError,
    active_windows,
    parse_windows,
    scheduled_increases,
    with_scheduled_minimums,
)

UTC = timezone.utc
GROUP = "rg/pool"


def group(min_size: int = 1, max_size: int = 20, capacity: int = 2) -> NodeGroup:
    return NodeGroup("rg", "pool", min_size=min_size, max_size=max_size, capacity=capacity, vm_size="Standard_D4s_v5")


def window(**fields: Any) -> dict[str, Any]:
    return {"group": GROUP, "start": "0 0 8 * * 1-5", "duration": "11h", "min": 10, "timezone": "Europe/Berlin",
            **fields}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# 2026-11-30 is a Monday, 2026-11-29 a Sunday; Berlin is UTC+1 in winter, UTC+2 in summer (from 29 March 2026).
@pytest.mark.parametrize(("now", "active"), [
    ("2026-11-30T07:59:59+01:00", False),  # a second before the start
    ("2026-11-30T08:00:00+01:00", True),   # the start itself
    ("2026-11-30T18:59:59+01:00", True),   # the last second
    ("2026-11-30T19:00:00+01:00", False),  # the end is not in the window
    ("2026-11-29T10:00:00+01:00", False),  # Sunday: no window
    ("2026-12-04T12:00:00+01:00", True),   # Friday
    ("2026-07-01T07:30:00+01:00", True),   # summer time: 08:30 in Berlin (UTC+2), though 07:30 in UTC+1
    ("2026-07-01T18:30:00+01:00", False),  # 19:30 in Berlin: over, though 18:30 in UTC+1
])
def test_a_weekday_window_is_active_from_its_start_until_its_end_in_its_time_zone(now: str, active: bool) -> None:
    windows = parse_windows([window()])
    found = active_windows([group()], windows, now=at(now))
    assert (GROUP in found) is active
    if active:
        until = found[GROUP].until
        assert (until.hour, until.minute) == (19, 0) and at(now) < until
        assert str(until.tzinfo) == "Europe/Berlin"


@pytest.mark.parametrize(("now", "active"), [
    # 29 March 2026: Berlin's clocks go from 02:00 to 03:00. A window 01:00 + 3h ends at 04:00 local wall-clock
    # time, 02:00 UTC, two real hours after it opened.
    ("2026-03-29T00:00:00+00:00", True),
    ("2026-03-29T01:59:59+00:00", True),
    ("2026-03-29T02:00:00+00:00", False),
    # 25 October 2026: back from 03:00 to 02:00; 01:00 + 3h is 04:00 CET, 03:00 UTC, four real hours on.
    ("2026-10-24T23:00:00+00:00", True),
    ("2026-10-25T02:59:59+00:00", True),
    ("2026-10-25T03:00:00+00:00", False),
])
def test_the_duration_is_wall_clock_time_in_the_zone_across_a_clock_change(now: str, active: bool) -> None:
    windows = parse_windows([window(start="0 0 1 * * *", duration="3h")])
    found = active_windows([group()], windows, now=at(now))
    assert (GROUP in found) is active
    if active:
        assert (found[GROUP].until.hour, found[GROUP].until.minute) == (4, 0)


def test_a_window_running_past_midnight_is_active_after_midnight() -> None:
    windows = parse_windows([window(start="0 0 22 * * *", duration="8h", timezone="UTC")])
    assert GROUP in active_windows([group()], windows, now=at("2026-11-30T05:59:59+00:00"))
    assert GROUP not in active_windows([group()], windows, now=at("2026-11-30T06:00:00+00:00"))


@pytest.mark.parametrize(("mins", "own_min", "max_size", "effective"), [
    ((10, 4), 1, 20, 10),   # overlapping windows: the largest
    ((4, 10), 1, 20, 10),   # in whatever order they are listed
    ((3,), 5, 20, 5),       # the group's own minimum when larger
    ((30,), 1, 20, 20),     # capped by the group's max
    ((0,), 0, 20, 0),       # a window may keep nothing
])
def test_overlapping_windows_take_the_largest_minimum_within_the_groups_limits(
        mins: tuple[int, ...], own_min: int, max_size: int, effective: int) -> None:
    windows = parse_windows([window(min=m, timezone="UTC", start="0 0 0 * * *", duration="24h") for m in mins])
    the_group = group(min_size=own_min, max_size=max_size)
    found = active_windows([the_group], windows, now=at("2026-11-30T12:00:00+00:00"))
    active = found[GROUP]
    assert active.min_size == max(mins) and active.effective_min == effective
    assert own_min <= active.effective_min <= max_size
    (raised,) = with_scheduled_minimums([the_group], found)
    assert raised.min_size == max(own_min, effective)
    increases = scheduled_increases([the_group], found)
    assert [(i.current_target, i.new_target) for i in increases] == (
        [(2, effective)] if effective > the_group.running_target else [])


def test_only_the_windows_group_is_raised_and_a_group_at_its_minimum_is_not_grown() -> None:
    other = NodeGroup("rg", "other", min_size=0, max_size=5, capacity=0, vm_size="Standard_D4s_v5")
    full = group(capacity=12)
    windows = parse_windows([window(timezone="UTC", start="0 0 0 * * *", duration="24h")])
    found = active_windows([full, other], windows, now=at("2026-11-30T12:00:00+00:00"))
    assert set(found) == {GROUP}
    assert scheduled_increases([full, other], found) == ()
    assert with_scheduled_minimums([other], found) == (other,)


def test_a_window_for_a_group_not_observed_is_ignored() -> None:
    windows = parse_windows([window(group="rg/gone", timezone="UTC", start="0 0 0 * * *", duration="24h")])
    assert active_windows([group()], windows, now=at("2026-11-30T12:00:00+00:00")) == {}


def test_the_resource_group_compares_case_insensitively() -> None:
    (parsed,) = parse_windows([window(group="RG/pool")])
    assert parsed.group_id == GROUP


@pytest.mark.parametrize(("raw", "named"), [
    ({"group": GROUP}, "JSON list"),
    (["0 0 8 * * 1-5"], "window 1"),
    ([window(), {**window(), "minimum": 3}], "window 2: unknown field 'minimum'"),
    ([{k: v for k, v in window().items() if k != "duration"}], "field 'duration' is missing"),
    ([window(group="pool")], "field 'group'"),
    ([window(start="0 8 * * 1-5")], "field 'start'"),          # five fields: not NCRONTAB
    ([window(start="0 0 8 * * MON#1")], "field 'start'"),
    ([window(duration="eleven hours")], "field 'duration'"),
    ([window(duration="0s")], "field 'duration'"),
    ([window(duration="8d")], "field 'duration'"),
    ([window(min=-1)], "field 'min'"),
    ([window(min=2.5)], "field 'min'"),
    ([window(min=True)], "field 'min'"),
    ([window(min="10")], "field 'min'"),
    ([window(timezone="Mars/Olympus")], "field 'timezone'"),
    ([window(timezone="../../etc/passwd")], "field 'timezone'"),
    ([window(timezone="")], "field 'timezone'"),
])
def test_malformed_windows_are_refused_naming_the_window_and_field(raw: Any, named: str) -> None:
    with pytest.raises(WindowError) as caught:
        parse_windows(raw)
    assert named in str(caught.value)


def test_a_window_without_a_time_zone_is_in_utc() -> None:
    (parsed,) = parse_windows([{k: v for k, v in window().items() if k != "timezone"}])
    assert parsed.zone == "UTC" and parsed.duration == timedelta(hours=11)
