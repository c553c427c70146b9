"""Six-field NCRONTAB schedules, as the Functions timer trigger reads them.

Pure module: parsing and arithmetic on times it is given, no side effects. Fields are
`second minute hour day month day-of-week`; the parsing and the next-fire arithmetic are
croniter's (with the seconds field first), so the settings check, the local runner and the
replay agree with each other and with a maintained implementation of cron. What NCRONTAB
does not have (croniter's five-field form, `L`, `W`, `#`, `?`, a sixth year field) is refused, and so is a
schedule that does not fire in every year (`0 0 0 31 2 *`), which croniter accepts and then cannot step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_FIELDS = "second minute hour day month day-of-week"
# croniter's extensions that NCRONTAB lacks: `#` (nth weekday), `?`, and L/W standing alone or after a
# number (last day, nearest weekday); a month or day name such as JUL or WED is fine.
_NOT_NCRONTAB = re.compile(r"[#?]|(?<![A-Za-z])(?:\d*[LW]|LW)(?![A-Za-z])", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Schedule:
    expression: str

    def next_after(self, moment: datetime) -> datetime:
        """The first time the schedule fires strictly after `moment` (same time zone as `moment`)."""
        from croniter import croniter  # imported on first use: it and dateutil are a tenth of function_app's import

        result: datetime = croniter(self.expression, moment, second_at_beginning=True).get_next(datetime)
        return result

    def previous_before(self, moment: datetime) -> datetime:
        """The last time the schedule fired strictly before `moment` (same time zone as `moment`)."""
        from croniter import croniter

        result: datetime = croniter(self.expression, moment, second_at_beginning=True).get_prev(datetime)
        return result


def parse_ncrontab(expression: str) -> Schedule:
    """The schedule of a six-field NCRONTAB expression; ValueError naming what is wrong."""
    text = expression.strip()
    fields = text.split()
    if len(fields) != 6:
        raise ValueError(f"must be a six-field NCRONTAB expression ({_FIELDS}), got {expression!r}")
    extension = _NOT_NCRONTAB.search(text)
    if extension:
        raise ValueError(f"{extension.group(0)!r} is not NCRONTAB (fields: {_FIELDS}), got {expression!r}")
    from croniter import croniter

    if not croniter.is_valid(text, second_at_beginning=True):
        raise ValueError(f"not a valid NCRONTAB expression ({_FIELDS}): {expression!r}")
    _check_fires_every_year(text, expression)
    return Schedule(text)


# A year without 29 February, from its first second: a schedule that fires in it fires in every year (nothing
# in NCRONTAB depends on the year but that day), and one that does not (31 February, 31 April, only 29 February)
# would leave its function silent for years, or for ever.
_YEAR_START = datetime(2001, 1, 1)
_YEAR_END = datetime(2002, 1, 1)


def _check_fires_every_year(text: str, expression: str) -> None:
    from croniter import CroniterBadDateError, croniter

    try:
        first: datetime | None = croniter(text, _YEAR_START - timedelta(seconds=1), second_at_beginning=True,
                                          max_years_between_matches=1).get_next(datetime)
    except CroniterBadDateError:
        first = None
    if first is None or first >= _YEAR_END:
        raise ValueError(f"never fires within a year (a day that does not exist, or only 29 February): {expression!r}")
