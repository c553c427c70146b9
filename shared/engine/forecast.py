"""Forecasting a group's demand for the next hour from its hourly peaks: a plain seasonal model, with its error.

Pure module, no side effects; `now` is passed in.

Demand is what the pending poll notes per group (services.demand): the nodes asked for and not yet there
(the planned target less the Ready nodes), whose peak per whole UTC hour the group's `DemandHistory` keeps
for the last `WEEKS_KEPT` weeks (`note_demand`). A forecast learns from completed hours only, so it changes
once an hour.

The rule for one hour `h` (`forecast_hour`), from the completed hours before the current one:

- season: the mean of `h`'s peaks one, two, ... `WEEKS_KEPT` weeks before (the same hour of week; hours no
  poll observed are left out);
- level: the mean peak of the last `RECENT_HOURS` completed hours;
- with a season of `n` weeks: season + (level - the recent hours' own season) / (n + 1), at least 0. The
  season is shifted by part of how far the last hours ran above or below their own same hours of week, a
  part that shrinks as weeks accumulate; the level is never averaged in as such, so a quiet night does not
  pull down the forecast of the 08:00 peak;
- with no season yet (less than a week kept): the level alone, which is persistence of the recent peaks.

`forecast_next_hour` answers for the next 60 minutes, which touch the current hour and the next one: the larger
of the two hours' forecasts. Its error is the MAPE of the one-hour-ahead forecasts (`forecast_hour` of each
completed hour from the hours before it) over the last `ERROR_HOURS` completed hours, as a fraction. An hour
whose actual peak is 0 has no percentage error and is left out (a forecast of nodes for a quiet hour costs
standby disks, which the error does not show); with no such hour the MAPE is None.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from shared.domain import DemandHistory

HOUR = timedelta(hours=1)
WEEK_HOURS = 168
# Five weeks: four past same hours of week once the fifth week runs, enough for a mean that one odd week
# does not swing, and 840 numbers, a few KiB of JSON in one Table property (limit 64 KiB).
WEEKS_KEPT = 5
HISTORY_HOURS = WEEKS_KEPT * WEEK_HOURS
# The recent level: three hours follow a change of regime within the morning, and smooth one odd hour.
RECENT_HOURS = 3
# The error window: the last week's hours, so every hour of week counts once.
ERROR_HOURS = WEEK_HOURS


@dataclass(frozen=True, slots=True)
class Forecast:
    """The expected peak of nodes asked for and not yet there over the next hour, and how good such forecasts were.

    `mape`: the mean absolute percentage error of the one-hour-ahead forecasts over the recent hours, as a
    fraction (0.25 is 25 %); None while no hour had demand to compare with. `basis`: the rule that applied.
    """

    nodes: float
    mape: float | None
    basis: str


def hour_of(moment: datetime) -> datetime:
    """The whole UTC hour `moment` falls in."""
    if moment.tzinfo is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def note_demand(history: DemandHistory, nodes: float, *, now: datetime) -> DemandHistory:
    """The history with `nodes` counted in `now`'s hour: that hour's peak raised to it (the same history when it
    is not higher). A new hour is appended after None for any hours no poll observed, and hours older than
    `HISTORY_HOURS` are dropped. A time before the kept hours (a clock behind another instance's) changes nothing.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, (int, float)) or not math.isfinite(nodes) or nodes < 0:
        raise ValueError(f"demand must be a finite number of nodes, at least 0, got {nodes!r}")
    hour = hour_of(now)
    if history.start is None or not history.peaks:
        return replace(history, start=hour, peaks=(nodes,))
    index = _hours_between(history.start, hour)
    if index < 0:
        return history
    if index < len(history.peaks):
        known = history.peaks[index]
        if known is not None and known >= nodes:
            return history
        return replace(history, peaks=(*history.peaks[:index], nodes, *history.peaks[index + 1:]))
    peaks = (*history.peaks, *([None] * (index - len(history.peaks))), nodes)
    dropped = max(0, len(peaks) - HISTORY_HOURS)
    return replace(history, start=history.start + dropped * HOUR, peaks=peaks[dropped:])


def forecast_hour(peaks: Sequence[float | None], target: int, *, completed: int) -> tuple[float, str] | None:
    """The forecast of hour `target` (an index into `peaks`) from the hours before `completed`, and the rule that
    applied; None when none of those hours was observed. See the module's docstring for the rule."""
    if completed > target:
        raise ValueError(f"hour {target} cannot be forecast from hours up to {completed}")
    season = _season(peaks, target, completed=completed)
    recent = [p for p in peaks[max(0, completed - RECENT_HOURS):completed] if p is not None]
    level = statistics.fmean(recent) if recent else None
    if season is None:
        if level is None:
            return None
        return level, f"recent level: mean peak of the last {len(recent)} hour(s) (under a week of history)"
    seasonal, weeks = season
    if level is None:
        return seasonal, f"same hour of week over {weeks} week(s)"
    own = [s for i in range(max(0, completed - RECENT_HOURS), completed)
           if peaks[i] is not None and (s := _season(peaks, i, completed=completed)) is not None]
    if not own:
        return seasonal, f"same hour of week over {weeks} week(s)"
    shift = (level - statistics.fmean(s for s, _ in own)) / (weeks + 1)
    return max(0.0, seasonal + shift), (f"same hour of week over {weeks} week(s), shifted by 1/{weeks + 1} of the "
                                        f"last {len(recent)} hour(s)' deviation from their own")


def forecast_error(history: DemandHistory, *, now: datetime) -> tuple[float | None, int]:
    """The MAPE (a fraction) of the one-hour-ahead forecasts over the last `ERROR_HOURS` completed hours with
    demand, and how many hours it is over; (None, 0) without any."""
    completed = _completed(history, now=now)
    errors = []
    for index in range(max(0, completed - ERROR_HOURS), completed):
        actual = history.peaks[index]
        if actual is None or actual <= 0:
            continue  # no percentage error for an hour without demand (or unobserved)
        made = forecast_hour(history.peaks, index, completed=index)
        if made is not None:
            errors.append(abs(made[0] - actual) / actual)
    return (statistics.fmean(errors) if errors else None), len(errors)


def forecast_next_hour(history: DemandHistory, *, now: datetime) -> Forecast:
    """The expected peak over the next 60 minutes: the larger of the current and the next hour's forecasts, from
    the completed hours only. No history at all: 0 nodes, no error, and a basis saying so."""
    completed = _completed(history, now=now)
    current = max(completed, _hours_between(history.start, hour_of(now))) if history.start else 0
    made = [f for f in (forecast_hour(history.peaks, target, completed=completed)
                        for target in (current, current + 1)) if f is not None]
    mape, hours = forecast_error(history, now=now)
    if not made:
        return Forecast(0.0, mape, "no completed hour observed yet")
    nodes, basis = max(made, key=lambda f: f[0])
    error = f"MAPE over {hours} hour(s) with demand" if hours else "no hour with demand to measure the error yet"
    return Forecast(nodes, mape, f"{basis}; {error}")


def _season(peaks: Sequence[float | None], target: int, *, completed: int) -> tuple[float, int] | None:
    """The mean of `target`'s same hours of week among the hours before `completed`, and how many there were."""
    same = [p for week in range(1, WEEKS_KEPT + 1)
            if 0 <= (i := target - week * WEEK_HOURS) < completed and (p := peaks[i]) is not None]
    return (statistics.fmean(same), len(same)) if same else None


def _completed(history: DemandHistory, *, now: datetime) -> int:
    """How many of the history's hours are complete at `now` (all of them once `now` is past the last)."""
    if history.start is None:
        return 0
    return max(0, min(len(history.peaks), _hours_between(history.start, hour_of(now))))


def _hours_between(start: datetime, hour: datetime) -> int:
    return int((hour - start) // HOUR)
