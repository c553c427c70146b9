"""Six-field NCRONTAB schedules, as the Functions timer trigger reads them.

Fields: second minute hour day month day-of-week, each `*`, `n`, `a-b`, lists
with `,` and steps with `/`. Enough to fire our timers on their schedules in
sandbox time; the real host uses its own implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_NAMES = ("second", "minute", "hour", "day", "month", "day-of-week")


@dataclass(frozen=True)
class Schedule:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday

    def matches(self, moment: datetime) -> bool:
        return (
            moment.second in self.seconds
            and moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.day in self.days
            and moment.month in self.months
            and (moment.isoweekday() % 7) in self.weekdays
        )

    def next_after(self, moment: datetime) -> datetime:
        """The first matching whole second strictly after `moment`."""
        candidate = moment.replace(microsecond=0) + timedelta(seconds=1)
        for _ in range(366 * 24 * 60 * 2):
            if self.matches(candidate):
                return candidate
            if candidate.minute not in self.minutes or candidate.hour not in self.hours or not self._day_ok(candidate):
                candidate = candidate.replace(second=0) + timedelta(minutes=1)  # nothing in this minute can match
            else:
                candidate += timedelta(seconds=1)
        raise ValueError("schedule never fires within a year")

    def _day_ok(self, moment: datetime) -> bool:
        return moment.day in self.days and moment.month in self.months and (moment.isoweekday() % 7) in self.weekdays


def parse_ncrontab(expression: str) -> Schedule:
    fields = expression.split()
    if len(fields) != 6:
        raise ValueError(f"NCRONTAB needs six fields (second minute hour day month day-of-week): {expression!r}")
    sets = [_parse_field(text, low, high, name) for text, (low, high), name in zip(fields, _RANGES, _NAMES)]
    return Schedule(*sets)


def _parse_field(text: str, low: int, high: int, name: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            start, end = low, high
        elif "-" in base:
            start, end = (int(x) for x in base.split("-", 1))
        else:
            start = int(base)
            end = high if step_text else start
        if not (low <= start <= high and low <= end <= high) or step < 1:
            raise ValueError(f"{name} field {text!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)
