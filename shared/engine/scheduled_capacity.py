"""Scheduled capacity: time windows during which a node group keeps at least a given number of nodes.

Pure module: no I/O, no side effects, no clock (the poll passes `now`).

A window starts when its six-field NCRONTAB schedule (seconds first, as the timer triggers' schedules;
shared.schedules) fires in its time zone and lasts `duration` of wall-clock time there (08:00 plus 11h is
19:00 on the days the clocks change too). While a window is active its group's minimum is raised to the
window's `min`: the pending poll grows the group to it with no pod asking, and the scale-down never takes the
group below it. Overlapping windows of a group take the largest minimum; the group's own minimum still
applies when it is larger, and its maximum caps the result.

The poll raises the minimum at the window's start, so nodes are Ready a boot later: a window should start
that much before the work it is for (docs/scheduled-capacity.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.domain import NodeGroup
from shared.quantities import parse_duration
from shared.schedules import Schedule, parse_ncrontab

# The fields of one window in SCHEDULED_CAPACITY; `timezone` may be left out (UTC).
_FIELDS = ("group", "start", "duration", "min", "timezone")
_REQUIRED = ("group", "start", "duration", "min")
# A window longer than a week would be a standing minimum: that is the group's own min tag.
MAX_DURATION = timedelta(days=7)


class WindowError(ValueError):
    """A scheduled-capacity window is malformed; the message names the window and its field."""


@dataclass(frozen=True, slots=True)
class CapacityWindow:
    group_id: str  # `<resource group>/<name>`, the resource group lower-cased as group ids are
    start: Schedule  # when the window opens, in `zone`
    duration: timedelta  # wall-clock time in `zone` from each start
    min_size: int
    zone: str = "UTC"  # an IANA time zone name

    def opened_at(self, now: datetime) -> datetime | None:
        """The start of this window's occurrence active at `now` (aware, in the window's zone), or None."""
        tz = ZoneInfo(self.zone)
        # The latest start at or before `now`: starts are whole seconds, so strictly before the next second.
        local = now.astimezone(tz).replace(microsecond=0) + timedelta(seconds=1)
        fired = self.start.previous_before(local)
        return fired if now < self.closes_at(fired) else None

    def closes_at(self, opened: datetime) -> datetime:
        """When the occurrence that opened at `opened` ends: wall-clock arithmetic in the zone, as an instant."""
        end = (opened.replace(tzinfo=None) + self.duration).replace(tzinfo=ZoneInfo(self.zone))
        return end.astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class ActiveWindow:
    """The window that sets a group's minimum now (the largest of those active)."""

    group_id: str
    min_size: int  # the window's minimum, before the group's own limits
    effective_min: int  # max(window, group min), capped by the group's max
    until: datetime  # when it ends, in the window's zone
    zone: str

    def describe(self) -> str:
        capped = f", capped at max {self.effective_min}" if self.effective_min < self.min_size else ""
        return f"min {self.min_size}{capped} until {self.until:%Y-%m-%d %H:%M} {self.zone}"


def active_windows(groups: Iterable[NodeGroup], windows: Collection[CapacityWindow], *,
                   now: datetime) -> dict[str, ActiveWindow]:
    """By group id, the active window with the largest minimum (ties: the one lasting longest)."""
    found: dict[str, ActiveWindow] = {}
    if not windows:
        return found
    by_id = {g.id: g for g in groups}
    for window in windows:
        group = by_id.get(window.group_id)
        if group is None:
            continue
        opened = window.opened_at(now)
        if opened is None:
            continue
        until = window.closes_at(opened).astimezone(ZoneInfo(window.zone))
        effective = min(max(window.min_size, group.min_size), group.max_size)
        candidate = ActiveWindow(group.id, window.min_size, effective, until, window.zone)
        best = found.get(group.id)
        if best is None or (candidate.min_size, candidate.until) > (best.min_size, best.until):
            found[group.id] = candidate
    return found


def with_scheduled_minimums(groups: Iterable[NodeGroup], active: Mapping[str, ActiveWindow]) -> tuple[NodeGroup, ...]:
    """The groups with their minimum raised to the active window's effective minimum (scale-down's floor)."""
    return tuple(replace(g, min_size=active[g.id].effective_min) if g.id in active and
                 active[g.id].effective_min > g.min_size else g for g in groups)


@dataclass(frozen=True, slots=True)
class ScheduledIncrease:
    group_id: str
    current_target: int
    new_target: int
    why: str


def scheduled_increases(groups: Iterable[NodeGroup], active: Mapping[str, ActiveWindow]) -> tuple[ScheduledIncrease, ...]:
    """Groups whose running target is below their active window's minimum, grown to it (sorted by group id)."""
    found = []
    for group in groups:
        window = active.get(group.id)
        if window is not None and group.running_target < window.effective_min:
            found.append(ScheduledIncrease(group.id, group.running_target, window.effective_min,
                                           f"scheduled capacity: {window.describe()}"))
    return tuple(sorted(found, key=lambda i: i.group_id))


def parse_windows(raw: Any) -> tuple[CapacityWindow, ...]:
    """Windows from SCHEDULED_CAPACITY's decoded JSON: a list of objects with the fields
    `group`, `start` (six-field NCRONTAB), `duration` (e.g. `11h`), `min`, and optionally `timezone`."""
    if not isinstance(raw, list):
        raise WindowError('must be a JSON list of windows, e.g. [{"group": "rg/vmss", "start": "0 0 8 * * 1-5", '
                          '"duration": "11h", "min": 10, "timezone": "Europe/Berlin"}]')
    return tuple(_window(i, item) for i, item in enumerate(raw, start=1))


def _window(number: int, item: Any) -> CapacityWindow:
    where = f"window {number}"
    if not isinstance(item, dict):
        raise WindowError(f"{where}: must be an object with {', '.join(_FIELDS)}, got {type(item).__name__}")
    unknown = sorted(set(item) - set(_FIELDS))
    if unknown:
        raise WindowError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(_FIELDS)})")
    missing = [name for name in _REQUIRED if name not in item]
    if missing:
        raise WindowError(f"{where}: field {missing[0]!r} is missing (fields: {', '.join(_FIELDS)})")
    group = _group(where, item["group"])
    where = f"{where} ({group})"
    return CapacityWindow(group, _start(where, item["start"]), _duration(where, item["duration"]),
                          _min(where, item["min"]), _zone(where, item.get("timezone", "UTC")))


def _text(where: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WindowError(f"{where}: field {name!r} must be non-empty text, got {value!r}")
    return value.strip()


def _group(where: str, value: Any) -> str:
    text = _text(where, "group", value)
    rg, sep, name = text.partition("/")
    if not sep or not rg or not name or "/" in name:
        raise WindowError(f"{where}: field 'group' {text!r} is not a node group id, `<resource group>/<name>`")
    return f"{rg.lower()}/{name}"


def _start(where: str, value: Any) -> Schedule:
    try:
        return parse_ncrontab(_text(where, "start", value))
    except WindowError:
        raise
    except ValueError as exc:
        raise WindowError(f"{where}: field 'start' {exc}") from None


def _duration(where: str, value: Any) -> timedelta:
    text = _text(where, "duration", value)
    try:
        duration = parse_duration(text)
    except (ValueError, OverflowError) as exc:
        raise WindowError(f"{where}: field 'duration' {text!r}: {exc}") from None
    if not timedelta(0) < duration <= MAX_DURATION:
        raise WindowError(f"{where}: field 'duration' {text!r} must be above 0 and at most 7 days")
    return duration


def _min(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WindowError(f"{where}: field 'min' must be a whole number from 0, got {value!r}")
    return value


_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")


def _zone(where: str, value: Any) -> str:
    text = _text(where, "timezone", value)
    # ZoneInfo reads a file named by the key: only names shaped like IANA's are asked for.
    if not _ZONE_NAME.fullmatch(text):
        raise WindowError(f"{where}: field 'timezone' {text!r} is not an IANA time zone name (like Europe/Berlin)")
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(f"{where}: field 'timezone' {text!r} is not a known IANA time zone (like Europe/Berlin)") from None
    return text
