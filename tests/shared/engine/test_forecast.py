"""engine.forecast: noting hourly demand peaks, the seasonal forecast of the next hour, and its MAPE."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import DemandHistory
from shared.engine.forecast import (
    ERROR_HOURS,
    HISTORY_HOURS,
    RECENT_HOURS,
    WEEK_HOURS,
    forecast_error,
    forecast_hour,
    forecast_next_hour,
    hour_of,
    note_demand,
)

T0 = datetime(2030, 1, 7, 0, 0, tzinfo=UTC)  # a Monday, 00:00 UTC
HOUR = timedelta(hours=1)
GROUP = "rg/pool"


def history_of(peaks: list[float | None], *, start: datetime = T0) -> DemandHistory:
    return DemandHistory(GROUP, start=start, peaks=tuple(peaks))


def after(history: DemandHistory, minutes: int = 5) -> datetime:
    """A moment in the hour after the history's last one: every hour kept is complete."""
    assert history.start is not None
    return history.start + len(history.peaks) * HOUR + timedelta(minutes=minutes)


def office_week(weeks: int, *, busy: float = 10.0, quiet: float = 1.0) -> list[float | None]:
    """Weekdays 08:00-19:00 busy, other hours quiet, for `weeks` whole weeks from a Monday 00:00."""
    return [busy if (h // 24) % 7 < 5 and 8 <= h % 24 < 19 else quiet for h in range(weeks * WEEK_HOURS)]


# --- noting demand -----------------------------------------------------------------------------------------


def test_the_first_note_starts_the_history_at_its_whole_utc_hour() -> None:
    noted = note_demand(DemandHistory(GROUP), 3, now=datetime(2030, 1, 7, 10, 42, 7, tzinfo=timezone(timedelta(hours=2))))
    assert (noted.start, noted.peaks) == (datetime(2030, 1, 7, 8, tzinfo=UTC), (3,))


@pytest.mark.parametrize(("peaks", "nodes", "minutes", "expected"), [
    ([2, 5], 4, 60 + 30, [2, 5]),  # lower than the hour's peak: unchanged
    ([2, 5], 5, 60 + 30, [2, 5]),  # equal: unchanged
    ([2, 5], 7, 60 + 30, [2, 7]),  # higher: raised
    ([2, 5], 0, 120, [2, 5, 0]),  # a new hour: appended, a zero too (observed, unlike a missing hour)
    ([2, 5], 1, 4 * 60 + 1, [2, 5, None, None, 1]),  # hours no poll saw are None
    ([2, 5], 9, 30, [9, 5]),  # an earlier hour still kept (a clock behind another instance's): raised
    ([2, 5], 9, -30, [2, 5]),  # before the first hour kept: nothing
])
def test_note_demand_keeps_each_hours_peak(peaks: list[float | None], nodes: float, minutes: int,
                                           expected: list[float | None]) -> None:
    history = history_of(peaks)
    noted = note_demand(history, nodes, now=T0 + timedelta(minutes=minutes))
    assert list(noted.peaks) == expected and noted.start == T0
    assert (noted is history) == (expected == peaks)  # unchanged means no write


def test_at_most_history_hours_are_kept_the_oldest_dropped() -> None:
    history = history_of(list(range(HISTORY_HOURS)))
    noted = note_demand(history, 1, now=after(history, minutes=0) + 2 * HOUR)
    assert len(noted.peaks) == HISTORY_HOURS
    assert noted.start == T0 + 3 * HOUR and noted.peaks[:2] == (3, 4) and noted.peaks[-3:] == (None, None, 1)


@pytest.mark.parametrize("nodes", [-1, math.nan, math.inf, True, "3"])
def test_a_demand_that_is_not_a_number_of_nodes_is_refused(nodes: object) -> None:
    with pytest.raises(ValueError, match="demand must be"):
        note_demand(DemandHistory(GROUP), nodes, now=T0)  # type: ignore[arg-type]


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        note_demand(DemandHistory(GROUP), 1, now=datetime(2030, 1, 7, 9))
    with pytest.raises(ValueError, match="timezone-aware"):
        hour_of(datetime(2030, 1, 7, 9))


# --- the forecast ------------------------------------------------------------------------------------------


def test_with_no_history_the_forecast_is_zero_and_has_no_error() -> None:
    forecast = forecast_next_hour(DemandHistory(GROUP), now=T0)
    assert (forecast.nodes, forecast.mape) == (0.0, None) and forecast.basis
    only_current = note_demand(DemandHistory(GROUP), 8, now=T0)
    assert forecast_next_hour(only_current, now=T0 + timedelta(minutes=30)).nodes == 0.0  # the hour is not complete


@pytest.mark.parametrize("peaks", [[4, 8, 6], [1, 2, 3, 4, 5, 9, 1], [0, 0, 7], [5, None, 2, None]])
def test_under_a_week_the_forecast_is_the_recent_level(peaks: list[float | None]) -> None:
    history = history_of(peaks)
    recent = [p for p in peaks[-RECENT_HOURS:] if p is not None]
    forecast = forecast_next_hour(history, now=after(history))
    assert forecast.nodes == pytest.approx(sum(recent) / len(recent))
    assert "recent level" in forecast.basis


def test_only_completed_hours_count() -> None:
    history = history_of([3, 3, 3])
    now = after(history)
    before = forecast_next_hour(history, now=now)
    rising = note_demand(history, 50, now=now)  # the current hour's peak
    assert forecast_next_hour(rising, now=now) == before


@pytest.mark.parametrize("weeks", [2, 3, 5])
def test_a_pattern_that_repeats_every_week_is_forecast_exactly(weeks: int) -> None:
    peaks = office_week(weeks)
    history = history_of(peaks)
    for hours in range(WEEK_HOURS + RECENT_HOURS, len(peaks) - 1, 7):  # at many hours of the week
        partial = history_of(peaks[:hours])
        forecast = forecast_next_hour(partial, now=after(partial))
        assert forecast.nodes == max(peaks[hours], peaks[hours + 1])  # the next 60 minutes touch both hours
    assert forecast_error(history, now=after(history)) == (pytest.approx(0.0, abs=1e-12), ERROR_HOURS)


def test_the_forecast_sees_a_peak_starting_next_hour() -> None:
    # Monday 07:xx after a week of office hours: the 08:00 peak is forecast before it starts.
    peaks = office_week(1) + office_week(1)[:7]
    history = history_of(peaks)
    forecast = forecast_next_hour(history, now=after(history, minutes=20))
    assert forecast.nodes == 10.0 and "same hour of week over 1 week" in forecast.basis


@pytest.mark.parametrize("weeks", [1, 2, 4])
def test_recent_hours_above_their_season_shift_the_forecast_by_a_part_shrinking_with_the_weeks(weeks: int) -> None:
    peaks = office_week(weeks) + office_week(1)[:12]
    peaks[-RECENT_HOURS:] = [p + 6 for p in peaks[-RECENT_HOURS:]]  # the last hours ran 6 above their season
    history = history_of(peaks)
    made = forecast_hour(history.peaks, len(peaks), completed=len(peaks))
    assert made is not None
    assert made[0] == pytest.approx(10.0 + 6 / (weeks + 1))


def test_unobserved_hours_are_left_out_of_the_season() -> None:
    peaks = office_week(3) + office_week(1)[:9]
    peaks[WEEK_HOURS + 9] = None  # a week ago that hour no poll ran
    peaks[2 * WEEK_HOURS + 9] = 40  # two weeks ago a burst
    history = history_of(peaks)
    made = forecast_hour(history.peaks, len(peaks), completed=len(peaks))
    assert made is not None and "over 2 week(s)" in made[1]
    assert made[0] == pytest.approx((10 + 40) / 2)


def test_a_forecast_needs_the_hours_before_its_target() -> None:
    with pytest.raises(ValueError, match="cannot be forecast"):
        forecast_hour((1, 2, 3), 1, completed=2)


# --- the error ---------------------------------------------------------------------------------------------


def test_hours_without_demand_are_left_out_of_the_mape() -> None:
    history = history_of([0.0] * 30)
    assert forecast_error(history, now=after(history)) == (None, 0)
    assert forecast_next_hour(history, now=after(history)).mape is None
    spiky = history_of([0, 0, 0, 4, 0, 0, 0])  # one hour with demand: forecast 0 against 4
    assert forecast_error(spiky, now=after(spiky)) == (1.0, 1)


def test_the_mape_is_over_the_last_error_hours_one_hour_ahead() -> None:
    peaks: list[float | None] = [float(1 + (h * 5) % 9) for h in range(ERROR_HOURS + 2 * WEEK_HOURS // 3)]
    history = history_of(peaks)
    mape, hours = forecast_error(history, now=after(history))
    # Each hour judged by the forecast made from the hours before it only.
    expected = [abs(made[0] - peaks[i]) / peaks[i]  # type: ignore[operator]
                for i in range(len(peaks) - ERROR_HOURS, len(peaks))
                if (made := forecast_hour(history.peaks, i, completed=i)) is not None]
    assert hours == ERROR_HOURS == len(expected)
    assert mape == pytest.approx(sum(expected) / len(expected))
    earlier = history_of(peaks[:-1])
    assert forecast_error(earlier, now=after(history))[1] == ERROR_HOURS  # the window moves with the hours kept


@settings(max_examples=60, deadline=None)
@given(peaks=st.lists(st.one_of(st.none(), st.integers(0, 40).map(float)), min_size=1, max_size=WEEK_HOURS + 40),
       scale=st.sampled_from([2.0, 3.0, 0.5]))
def test_forecasts_are_never_negative_and_scale_with_demand(peaks: list[float | None], scale: float) -> None:
    history = history_of(peaks)
    now = after(history)
    forecast = forecast_next_hour(history, now=now)
    scaled = forecast_next_hour(replace(history, peaks=tuple(None if p is None else p * scale for p in peaks)), now=now)
    assert forecast.nodes >= 0
    assert scaled.nodes == pytest.approx(forecast.nodes * scale)
    assert (scaled.mape is None) == (forecast.mape is None)
    if forecast.mape is not None:
        assert forecast.mape >= 0 and scaled.mape == pytest.approx(forecast.mape)
