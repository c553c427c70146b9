"""Scheduled capacity: time windows during which a node group keeps at least a given number of nodes, or of
warm standby instances.

Pure module: no I/O, no side effects, no clock (the poll passes `now`).

A window starts when its six-field NCRONTAB schedule (seconds first, as the timer triggers' schedules;
shared.schedules) fires in its time zone and lasts `duration` of wall-clock time there (08:00 plus 11h is
19:00 on the days the clocks change too). Windows come from SCHEDULED_CAPACITY and from each group's tag
`autoscaler-scheduled-capacity` (TAG_SCHEDULED_CAPACITY, a compact form fit for a tag value: parse_tag_windows);
both are merged, so a group's windows may come from either or both.

A window sets a minimum (`min`), a standby count (`standby`), or both. While a window with a minimum is active
its group's minimum is raised to it: the pending poll grows the group to it with no pod asking, and the
scale-down never takes the group below it. While a window with a standby count is active, the group's warm
standby (instances kept deallocated, engine.standby) is at least that count. Overlapping windows of a group take
the largest minimum and, separately, the largest standby count; the group's own minimum still applies when it
is larger, and its maximum caps the minimum.

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

# The fields of one window in SCHEDULED_CAPACITY; `timezone` may be left out (UTC), and one of `min` and
# `standby` may be.
_FIELDS = ("group", "start", "duration", "min", "standby", "timezone")
_REQUIRED = ("group", "start", "duration")
_AT_LEAST_ONE = ("min", "standby")
# A window longer than a week would be a standing minimum: that is the group's own min tag.
MAX_DURATION = timedelta(days=7)

# The scale-set (or pool) tag that carries a group's own windows: `<start>|<duration>|min=<n>|standby=<n>|<zone>`,
# windows separated by `;` (Azure tag names allow no '/', values up to 256 characters).
TAG_SCHEDULED_CAPACITY = "autoscaler-scheduled-capacity"
TAG_WINDOW_SEPARATOR = ";"
TAG_FIELD_SEPARATOR = "|"
_TAG_KEYS = {"min": "min", "standby": "standby", "tz": "timezone"}


class WindowError(ValueError):
    """A scheduled-capacity window is malformed; the message names the window and its field."""


@dataclass(frozen=True, slots=True)
class CapacityWindow:
    group_id: str  # `<resource group>/<name>`, the resource group lower-cased as group ids are
    start: Schedule  # when the window opens, in `zone`
    duration: timedelta  # wall-clock time in `zone` from each start
    min_size: int | None  # the least nodes running while open; None: the window sets no minimum
    zone: str = "UTC"  # an IANA time zone name
    standby: int | None = None  # the least warm standby instances while open; None: the window sets none

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
    """What a group's active windows ask for now: the largest minimum and the largest standby count, each from
    the window that sets it (`until`/`zone` are the minimum's window's, or the standby's when no minimum is set)."""

    group_id: str
    min_size: int | None  # the window's minimum, before the group's own limits; None: no active window sets one
    effective_min: int  # max(window, group min), capped by the group's max (the group's min when none is set)
    until: datetime  # when it ends, in the window's zone
    zone: str
    standby: int | None = None  # the warm standby count an active window asks for; None: none does
    standby_until: datetime | None = None  # when the window setting `standby` ends, in its zone

    def describe(self) -> str:
        parts = []
        if self.min_size is not None:
            capped = f", capped at max {self.effective_min}" if self.effective_min < self.min_size else ""
            parts.append(f"min {self.min_size}{capped}")
        if self.standby is not None:
            if parts and self.standby_until != self.until:
                parts[-1] += f" until {_when(self.until)}"
            parts.append(f"standby {self.standby}")
        ends = self.standby_until if self.standby is not None and self.standby_until is not None else self.until
        return ", ".join(parts) + f" until {_when(ends)}"


def _when(instant: datetime) -> str:
    return f"{instant:%Y-%m-%d %H:%M} {instant.tzinfo}"


def active_windows(groups: Iterable[NodeGroup], windows: Collection[CapacityWindow], *,
                   now: datetime) -> dict[str, ActiveWindow]:
    """By group id, what the group's active windows ask for: `windows` (SCHEDULED_CAPACITY) and the windows in
    the group's own tag (a malformed tag is skipped here; tag_window_problems says why). The largest minimum
    wins, ties to the one lasting longest; the largest standby count likewise."""
    found: dict[str, ActiveWindow] = {}
    by_id = {g.id: g for g in groups}
    candidates: list[CapacityWindow] = list(windows)
    for group in by_id.values():
        if TAG_SCHEDULED_CAPACITY in group.tags:
            try:
                candidates.extend(parse_tag_windows(group))
            except WindowError:
                continue
    opened: dict[str, list[tuple[CapacityWindow, datetime]]] = {}
    for window in candidates:
        if window.group_id not in by_id:
            continue
        start = window.opened_at(now)
        if start is not None:
            until = window.closes_at(start).astimezone(ZoneInfo(window.zone))
            opened.setdefault(window.group_id, []).append((window, until))
    for group_id, active in opened.items():
        group = by_id[group_id]
        with_min = [(w.min_size, until, w.zone) for w, until in active if w.min_size is not None]
        with_standby = [(w.standby, until, w.zone) for w, until in active if w.standby is not None]
        best_standby = max(with_standby, key=lambda c: (c[0], c[1])) if with_standby else None
        if with_min:
            min_size, until, zone = max(with_min, key=lambda c: (c[0], c[1]))
            effective = min(max(min_size, group.min_size), group.max_size)
        elif best_standby is not None:
            min_size, (_, until, zone), effective = None, best_standby, group.min_size
        else:
            continue  # windows that set neither (parsing refuses them) ask for nothing
        found[group_id] = ActiveWindow(
            group_id, min_size, effective, until, zone,
            standby=best_standby[0] if best_standby else None,
            standby_until=best_standby[1] if best_standby else None)
    return found


def with_scheduled_minimums(groups: Iterable[NodeGroup], active: Mapping[str, ActiveWindow]) -> tuple[NodeGroup, ...]:
    """The groups with their minimum raised to the active window's effective minimum (scale-down's floor)."""
    return tuple(replace(g, min_size=active[g.id].effective_min) if g.id in active and
                 active[g.id].effective_min > g.min_size else g for g in groups)


def scheduled_standby(active: Mapping[str, ActiveWindow], group_id: str) -> int:
    """The warm standby count the group's active windows ask for now (0 when none does): the standby
    target takes the larger of this and its own."""
    window = active.get(group_id)
    return (window.standby or 0) if window is not None else 0


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
        if window is not None and window.min_size is not None and group.running_target < window.effective_min:
            found.append(ScheduledIncrease(group.id, group.running_target, window.effective_min,
                                           f"scheduled capacity: {window.describe()}"))
    return tuple(sorted(found, key=lambda i: i.group_id))


def parse_windows(raw: Any) -> tuple[CapacityWindow, ...]:
    """Windows from SCHEDULED_CAPACITY's decoded JSON: a list of objects with the fields
    `group`, `start` (six-field NCRONTAB), `duration` (e.g. `11h`), `min` and/or `standby`, and optionally
    `timezone`."""
    if not isinstance(raw, list):
        raise WindowError('must be a JSON list of windows, e.g. [{"group": "rg/vmss", "start": "0 0 8 * * 1-5", '
                          '"duration": "11h", "min": 10, "timezone": "Europe/Berlin"}]')
    found = []
    for number, item in enumerate(raw, start=1):
        where = f"window {number}"
        if not isinstance(item, dict):
            raise WindowError(f"{where}: must be an object with {', '.join(_FIELDS)}, got {type(item).__name__}")
        found.append(_window(where, item, fields=", ".join(_FIELDS), name_group=True))
    return tuple(found)


def parse_tag_windows(group: NodeGroup) -> tuple[CapacityWindow, ...]:
    """The windows in the group's tag `autoscaler-scheduled-capacity` (none without the tag), e.g.
    `0 0 8 * * 1-5|11h|min=10|Europe/Berlin;0 0 12 * * 1-5|2h|min=16|standby=2|Europe/Berlin`.

    Each window: the start (six-field NCRONTAB), the duration, then in any order `min=<n>`, `standby=<n>` and
    the time zone (bare, or `tz=<zone>`; UTC when left out), separated by `|`; windows separated by `;`. The
    same checks as SCHEDULED_CAPACITY's, and errors naming the group, the tag and the window."""
    text = group.tags.get(TAG_SCHEDULED_CAPACITY)
    if text is None:
        return ()
    tag = f"group {group.id}: tag {TAG_SCHEDULED_CAPACITY}"
    parts = [part.strip() for part in text.split(TAG_WINDOW_SEPARATOR)]
    while parts and not parts[-1]:
        parts.pop()  # a trailing `;`
    if not parts:
        raise WindowError(f"{tag}: is empty; give windows as `<start>|<duration>|min=<n>|<time zone>`, "
                          f"e.g. `0 0 8 * * 1-5|11h|min=10|Europe/Berlin`")
    return tuple(_window(f"{tag} window {number}", {"group": group.id, **_tag_fields(f"{tag} window {number}", part)},
                         fields="<start>|<duration>|min=<n>|standby=<n>|<time zone>", name_group=False)
                 for number, part in enumerate(parts, start=1))


def _tag_fields(where: str, text: str) -> dict[str, Any]:
    """One window of the tag as SCHEDULED_CAPACITY's fields (values still text where numbers are wanted)."""
    fields = [field.strip() for field in text.split(TAG_FIELD_SEPARATOR)]
    if len(fields) < 3 or not all(fields):
        raise WindowError(f"{where}: {text!r} is not `<start>|<duration>|min=<n>|standby=<n>|<time zone>` "
                          f"(min, standby or both; the time zone optional)")
    item: dict[str, Any] = {"start": fields[0], "duration": fields[1]}
    for field in fields[2:]:
        key, sep, value = field.partition("=")
        name = _TAG_KEYS.get(key.strip().lower()) if sep else "timezone"
        if name is None:
            raise WindowError(f"{where}: unknown field {key.strip()!r} (fields: min=<n>, standby=<n>, tz=<zone> "
                              f"or a bare time zone)")
        if name in item:
            raise WindowError(f"{where}: field {name!r} is given twice")
        value = value.strip() if sep else field
        item[name] = int(value) if name != "timezone" and value.isdigit() else value
    return item


def _window(where: str, item: dict[str, Any], *, fields: str, name_group: bool) -> CapacityWindow:
    """One window from its fields; `name_group`: add the group to `where` once it is known to be well formed."""
    unknown = sorted(set(item) - set(_FIELDS))
    if unknown:
        raise WindowError(f"{where}: unknown field {unknown[0]!r} (fields: {fields})")
    missing = [name for name in _REQUIRED if name not in item]
    if missing:
        raise WindowError(f"{where}: field {missing[0]!r} is missing (fields: {fields})")
    group = _group(where, item["group"])
    if name_group:
        where = f"{where} ({group})"
    if not any(name in item for name in _AT_LEAST_ONE):
        raise WindowError(f"{where}: give 'min', 'standby' or both (fields: {fields})")
    return CapacityWindow(
        group, _start(where, item["start"]), _duration(where, item["duration"]),
        _count(where, "min", item["min"]) if "min" in item else None,
        _zone(where, item.get("timezone", "UTC")),
        _count(where, "standby", item["standby"]) if "standby" in item else None)


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


def _count(where: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WindowError(f"{where}: field {name!r} must be a whole number from 0, got {value!r}")
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
