"""Scheduled capacity from a group's tag and standby windows: the tag's compact form parsed with the setting's
checks, merged with SCHEDULED_CAPACITY, and standby counts taken apart from minimums."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from shared.domain import NodeGroup
from shared.engine.scheduled_capacity import (
    TAG_SCHEDULED_CAPACITY,
    WindowError,
    active_windows,
    parse_tag_windows,
    parse_windows,
    scheduled_increases,
    scheduled_standby,
    with_scheduled_minimums,
)

UTC = timezone.utc
GROUP = "rg/pool"
MONDAY_NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # 13:00 in Berlin
AZURE_TAG_VALUE_LIMIT = 256  # characters (Learn: azure-resource-manager/management/tag-resources, limitations)


def group(tag: str | None = None, *, min_size: int = 1, max_size: int = 20, capacity: int = 2) -> NodeGroup:
    tags = {} if tag is None else {TAG_SCHEDULED_CAPACITY: tag}
    return NodeGroup("RG", "pool", min_size=min_size, max_size=max_size, capacity=capacity,
                     vm_size="Standard_D4s_v5", tags=tags)


def json_window(**fields: Any) -> dict[str, Any]:
    return {"group": GROUP, "start": "0 0 0 * * *", "duration": "24h", "timezone": "UTC", **fields}


@pytest.mark.parametrize(("tag", "expected"), [
    # (start, duration hours, min, standby, zone) per window
    ("0 0 8 * * 1-5|11h|min=10|Europe/Berlin", [("0 0 8 * * 1-5", 11, 10, None, "Europe/Berlin")]),
    ("0 0 8 * * 1-5|11h|min=10", [("0 0 8 * * 1-5", 11, 10, None, "UTC")]),
    ("0 0 8 * * 1-5|11h|standby=3|tz=Europe/Berlin", [("0 0 8 * * 1-5", 11, None, 3, "Europe/Berlin")]),
    ("0 0 8 * * 1-5|11h|Europe/Berlin|standby=3|min=2", [("0 0 8 * * 1-5", 11, 2, 3, "Europe/Berlin")]),
    (" 0 0 8 * * 1-5 | 11h | MIN=10 ; 0 0 12 * * 1-5|2h|min=16|standby=2|Europe/Berlin;",
     [("0 0 8 * * 1-5", 11, 10, None, "UTC"), ("0 0 12 * * 1-5", 2, 16, 2, "Europe/Berlin")]),
])
def test_the_tag_holds_windows_in_a_compact_form(tag: str, expected: list[tuple[Any, ...]]) -> None:
    windows = parse_tag_windows(group(tag))
    assert [(w.start.expression, w.duration.total_seconds() / 3600, w.min_size, w.standby, w.zone)
            for w in windows] == expected
    assert all(w.group_id == GROUP for w in windows)  # the group's own id, resource group lower-cased


def test_a_group_without_the_tag_has_no_tag_windows() -> None:
    assert parse_tag_windows(group()) == ()


def test_four_windows_with_every_field_fit_in_one_azure_tag_value() -> None:
    one = "0 45 7 * * 1-5|11h15m|min=10|standby=2|Europe/Berlin"
    tag = ";".join([one] * 4)
    assert len(tag) <= AZURE_TAG_VALUE_LIMIT
    assert len(parse_tag_windows(group(tag))) == 4


@pytest.mark.parametrize(("tag", "named"), [
    ("", "is empty"),
    (";", "is empty"),
    ("0 0 8 * * 1-5|11h", "window 1: '0 0 8 * * 1-5|11h' is not"),
    ("0 0 8 * * 1-5|11h|Europe/Berlin", "give 'min', 'standby' or both"),
    ("0 0 8 * * 1-5||min=3", "is not"),
    ("0 0 8 * * 1-5|11h|min=10;0 8 * * 1-5|1h|min=3", "window 2: field 'start'"),
    ("0 0 8 * * 1-5|eleven|min=3", "window 1: field 'duration'"),
    ("0 0 8 * * 1-5|8d|min=3", "field 'duration'"),
    ("0 0 8 * * 1-5|11h|min=ten", "field 'min' must be a whole number from 0, got 'ten'"),
    ("0 0 8 * * 1-5|11h|min=-1", "field 'min'"),
    ("0 0 8 * * 1-5|11h|min=", "field 'min'"),
    ("0 0 8 * * 1-5|11h|standby=2.5", "field 'standby'"),
    ("0 0 8 * * 1-5|11h|min=1|min=2", "field 'min' is given twice"),
    ("0 0 8 * * 1-5|11h|min=1|UTC|Europe/Berlin", "field 'timezone' is given twice"),
    ("0 0 8 * * 1-5|11h|max=4", "unknown field 'max'"),
    ("0 0 8 * * 1-5|11h|min=1|Mars/Olympus", "field 'timezone'"),
    ("0 0 8 * * 1-5|11h|min=1|../../etc/passwd", "field 'timezone'"),
])
def test_a_malformed_tag_is_refused_naming_the_group_the_tag_and_the_window(tag: str, named: str) -> None:
    with pytest.raises(WindowError) as caught:
        parse_tag_windows(group(tag))
    message = str(caught.value)
    assert message.startswith(f"group {GROUP}: tag {TAG_SCHEDULED_CAPACITY}") and named in message


def test_a_malformed_tag_is_left_out_and_the_settings_windows_still_apply() -> None:
    windows = parse_windows([json_window(min=4)])
    found = active_windows([group("0 0 8 * * 1-5|11h|min=lots")], windows, now=MONDAY_NOON)
    assert found[GROUP].min_size == 4


@pytest.mark.parametrize(("tag_min", "setting_min"), [(10, 4), (4, 10), (6, None), (None, 6)])
def test_tag_and_setting_windows_merge_and_overlaps_take_the_largest_minimum(
        tag_min: int | None, setting_min: int | None) -> None:
    tag = None if tag_min is None else f"0 0 8 * * 1-5|11h|min={tag_min}|Europe/Berlin"
    windows = parse_windows([] if setting_min is None else [json_window(min=setting_min)])
    the_group = group(tag)
    found = active_windows([the_group], windows, now=MONDAY_NOON)
    expected = max(m for m in (tag_min, setting_min) if m is not None)
    assert found[GROUP].min_size == expected == found[GROUP].effective_min
    (raised,) = with_scheduled_minimums([the_group], found)
    assert raised.min_size == expected


def test_the_tag_window_is_active_only_while_open() -> None:
    the_group = group("0 0 8 * * 1-5|11h|min=10|Europe/Berlin")
    assert GROUP in active_windows([the_group], (), now=datetime(2026, 11, 30, 17, 59, tzinfo=UTC))
    assert active_windows([the_group], (), now=datetime(2026, 11, 30, 18, 0, tzinfo=UTC)) == {}  # 19:00 Berlin


@pytest.mark.parametrize(("windows", "min_size", "standby"), [
    # (min, standby) per overlapping window -> the largest of each, taken apart
    ([(None, 3)], None, 3),
    ([(5, None)], 5, None),
    ([(5, 1), (None, 3)], 5, 3),
    ([(2, 4), (6, None), (None, 1)], 6, 4),
    ([(0, 0)], 0, 0),
])
def test_standby_windows_take_the_largest_standby_apart_from_the_largest_minimum(
        windows: list[tuple[int | None, int | None]], min_size: int | None, standby: int | None) -> None:
    raw = [json_window(**({"min": m} if m is not None else {}), **({"standby": s} if s is not None else {}))
           for m, s in windows]
    the_group = group(min_size=1, capacity=2)
    found = active_windows([the_group], parse_windows(raw), now=MONDAY_NOON)
    active = found[GROUP]
    assert (active.min_size, active.standby) == (min_size, standby)
    assert scheduled_standby(found, GROUP) == (standby or 0)
    assert active.effective_min == max(min_size or 0, the_group.min_size)
    # A standby-only window grows nothing running: standby instances are the standby target's to keep.
    grown = scheduled_increases([the_group], found)
    assert bool(grown) == (min_size is not None and min_size > the_group.running_target)
    assert ("standby" in active.describe()) == (standby is not None)
    assert ("min" in active.describe()) == (min_size is not None)


def test_no_active_window_asks_for_no_standby() -> None:
    assert scheduled_standby({}, GROUP) == 0


def test_a_minimum_and_a_standby_from_different_windows_each_say_when_they_end() -> None:
    raw = [json_window(min=5, start="0 0 12 * * *", duration="1h"), json_window(standby=2, start="0 0 10 * * *",
                                                                                 duration="4h")]
    active = active_windows([group()], parse_windows(raw), now=MONDAY_NOON)[GROUP]
    assert active.until != active.standby_until
    assert active.describe() == "min 5 until 2026-11-30 13:00 UTC, standby 2 until 2026-11-30 14:00 UTC"


@pytest.mark.parametrize(("raw", "named"), [
    ([{"group": GROUP, "start": "0 0 8 * * 1-5", "duration": "11h"}], "window 1 (rg/pool): give 'min', 'standby'"),
    ([json_window(standby=-1)], "field 'standby'"),
    ([json_window(standby="2")], "field 'standby'"),
    ([json_window(standby=True)], "field 'standby'"),
])
def test_a_json_window_needs_a_minimum_or_a_standby_count(raw: Any, named: str) -> None:
    with pytest.raises(WindowError) as caught:
        parse_windows(raw)
    assert named in str(caught.value)
