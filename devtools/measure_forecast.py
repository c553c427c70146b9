"""What the demand forecast (shared.engine.forecast) can learn from the public traces, measured offline.

The replays cut each trace to about eight simulated hours, under the week the seasonal part needs, so there the
forecast is the recent level alone. This reads the raw files on their own clock instead and feeds the engine one
series per trace: per hour, the cores requested by the pods created in that hour (a proxy of the hour's peak
scale-up: the forecast's MAPE does not change with the unit, and no node shape or autoscaler is assumed). It
prints the model's one-hour-ahead MAPE beside two baselines: last hour's value (persistence) and the same hour a
week before (seasonal naive), each over the same hours with demand, the last `ERROR_HOURS` of the series.

Run: `python -m devtools.measure_forecast`. The figures are quoted in docs/forecast.md.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from devtools.replay.traces import TRACE_DIR, TRACE_FILES
from shared.domain import DemandHistory
from shared.engine.forecast import ERROR_HOURS, WEEK_HOURS, forecast_error, forecast_hour

T0 = datetime(2030, 1, 7, tzinfo=UTC)  # the series' first hour; only differences of time matter
HOUR_S = 3600.0


def hourly_cores_2018() -> list[float]:
    """alibaba2018: cores of every task instance, by the hour of its job's submit time (16.6 hours)."""
    hours: dict[int, float] = {}
    with (TRACE_DIR / TRACE_FILES["alibaba2018"]).open(newline="") as handle:
        for row in csv.DictReader(handle):
            hour = int(float(row["submit_time"]) // HOUR_S)
            hours[hour] = hours.get(hour, 0.0) + float(row["cpu"]) * int(row["instances_num"])
    return [hours.get(h, 0.0) for h in range(max(hours) + 1)]


def hourly_cores_2023() -> list[float]:
    """alibaba2023: cores requested by the pods created in each hour, from the first pod (about 5 months, most of
    them in the last 30 days)."""
    hours: dict[int, float] = {}
    with (TRACE_DIR / TRACE_FILES["alibaba2023"]).open(newline="") as handle:
        for row in csv.DictReader(handle):
            hour = int(float(row["creation_time"]) // HOUR_S)
            hours[hour] = hours.get(hour, 0.0) + int(row["cpu_milli"]) / 1000
    return [hours.get(h, 0.0) for h in range(max(hours) + 1)]


def baseline_mape(series: Sequence[float], predict: Callable[[int], float | None]) -> tuple[float | None, int]:
    """A baseline's MAPE over the last ERROR_HOURS hours with demand that it has a prediction for."""
    errors = [abs(made - series[i]) / series[i] for i in range(max(0, len(series) - ERROR_HOURS), len(series))
              if series[i] > 0 and (made := predict(i)) is not None]
    return (statistics.fmean(errors) if errors else None), len(errors)


def measure(name: str, series: Sequence[float]) -> str:
    # The last five weeks at most, as a demand row keeps them.
    series = list(series[-5 * WEEK_HOURS:])
    history = DemandHistory(name, start=T0, peaks=tuple(series))
    after = T0 + timedelta(hours=len(series), minutes=1)
    model, hours = forecast_error(history, now=after)
    persistence, _ = baseline_mape(series, lambda i: series[i - 1] if i >= 1 else None)
    weekly, weekly_hours = baseline_mape(series, lambda i: series[i - WEEK_HOURS] if i >= WEEK_HOURS else None)
    seasonal_hours = sum(1 for i in range(max(0, len(series) - ERROR_HOURS), len(series))
                         if series[i] > 0 and (made := forecast_hour(series, i, completed=i)) is not None
                         and "same hour of week" in made[1])
    nonzero = sum(1 for v in series if v > 0)

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0%}"

    return (f"{name}: {len(series)} hours kept ({nonzero} with demand); judged {hours} hour(s), {seasonal_hours} "
            f"with a season; MAPE model {pct(model)}, last hour {pct(persistence)}, same hour a week before "
            f"{pct(weekly)} (over {weekly_hours} hour(s))")


def main() -> None:
    print(measure("alibaba2018", hourly_cores_2018()))
    print(measure("alibaba2023", hourly_cores_2023()))


if __name__ == "__main__":
    main()
