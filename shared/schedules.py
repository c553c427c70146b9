"""Six-field NCRONTAB schedules, as the Functions timer trigger reads them.

Pure module: parsing and arithmetic on times it is given, no side effects. Fields are
`second minute hour day month day-of-week`; the parsing and the next-fire arithmetic are
croniter's (with the seconds field first), so the settings check, the local runner and the
replay agree with each other and with a maintained implementation of cron. What NCRONTAB
does not have (croniter's five-field form, `L`, `W`, `#`, `?`, a sixth year field) is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

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
    return Schedule(text)
