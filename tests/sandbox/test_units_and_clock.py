from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from sandbox.clock import ManualClock, SimClock
from sandbox.model.units import format_bytes, format_cpu, parse_bytes, parse_count, parse_cpu_milli, parse_duration
from sandbox.world.compute import computer_name

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "milli"),
    [("1500m", 1500), ("2", 2000), ("0.5", 500), ("100m", 100), ("3860m", 3860), (1, 1000), ("2e0", 2000), ("0.1m", 1)],
)
def test_cpu_quantities_parse_to_millicores(text: str | int, milli: int) -> None:
    assert parse_cpu_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "count"),
    [("4Gi", 4 * 2**30), ("512Mi", 512 * 2**20), ("128974848", 128974848), ("1k", 1000), ("1M", 10**6), ("1.5Ki", 1536)],
)
def test_memory_quantities_parse_to_bytes(text: str, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "4GB", "--1", "1 Gi", "1e3m"])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("value", "expected"), [(2000, "2"), (1500, "1500m"), (3860, "3860m"), (0, "0")]
)
def test_cpu_formats_canonically(value: int, expected: str) -> None:
    assert format_cpu(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(4 * 2**30, "4Gi"), (14470348 * 1024, "14470348Ki"), (512 * 2**20, "512Mi"), (1000, "1000")]
)
def test_memory_formats_canonically(value: int, expected: str) -> None:
    assert format_bytes(value) == expected
    assert parse_bytes(expected) == value


def test_pod_counts_must_be_whole() -> None:
    assert parse_count("110") == 110
    with pytest.raises(ValueError, match="whole number"):
        parse_count("1.5")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("90", 90), (12.5, 12.5), ("1m30s", 90)],
)
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 m", "m5", "1d", "-3s", -1])
def test_bad_durations_are_refused(text: str | int) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("instance_id", "name"),
    [(0, "pool-d4000000"), (3, "pool-d4000003"), (35, "pool-d400000z"), (36, "pool-d4000010"), (46655, "pool-d4000zzz")],
)
def test_computer_names_follow_the_uniform_vmss_convention(instance_id: int, name: str) -> None:
    assert computer_name("pool-d4", instance_id) == name


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(START)
    assert clock.now() == START
    clock.advance(90)
    assert clock.now() == START + timedelta(seconds=90)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_sim_clock_runs_at_its_speed() -> None:
    clock = SimClock(START, speed=1000)
    time.sleep(0.05)
    elapsed = (clock.now() - START).total_seconds()
    assert 40 <= elapsed <= 5000
    assert clock.now().tzinfo is not None


@pytest.mark.parametrize("bad", [0, -2])
def test_sim_clock_needs_a_positive_speed(bad: float) -> None:
    with pytest.raises(ValueError):
        SimClock(START, bad)


def test_clocks_need_aware_starts() -> None:
    with pytest.raises(ValueError):
        ManualClock(datetime(2030, 1, 1))


# -- holds: the local runner keeps the running clock from getting ahead of it ---------------------------------


class _Wall:
    """A hand-moved stand-in for time.monotonic, so hold tests measure exact sim seconds."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> _Wall:
    fake = _Wall()
    monkeypatch.setattr("sandbox.clock.time.monotonic", fake)
    return fake


def _sim(clock: SimClock) -> float:
    return (clock.now() - START).total_seconds()


def test_a_held_clock_stands_still_and_runs_on_from_there_when_released(wall: _Wall) -> None:
    clock = SimClock(START, speed=30)
    wall.now += 2
    assert clock.hold("runner", until=None, lease=1000) == 60
    wall.now += 100  # a starved runner: 100 wall seconds that must not become 3000 sim seconds
    assert _sim(clock) == 60
    clock.release("runner")
    wall.now += 1
    assert _sim(clock) == 90


def test_a_clock_held_until_a_time_runs_up_to_it_and_stops_there(wall: _Wall) -> None:
    clock = SimClock(START, speed=10)
    clock.hold("runner", until=25, lease=1000)  # the next timer is due at 25
    wall.now += 2
    assert _sim(clock) == 20
    wall.now += 50
    assert _sim(clock) == 25 and clock.bound() == 25
    clock.hold("runner", until=40, lease=1000)  # fired; the one after is due at 40
    wall.now += 1
    assert _sim(clock) == 35


def test_a_bound_already_passed_stops_the_clock_where_it_is(wall: _Wall) -> None:
    clock = SimClock(START, speed=10)
    wall.now += 5
    assert clock.hold("runner", until=10) == 50
    wall.now += 5
    assert _sim(clock) == 50  # never back to 10, never on


def test_a_dead_holders_lease_runs_out_and_the_time_after_it_counts(wall: _Wall) -> None:
    clock = SimClock(START, speed=10)
    clock.hold("killed-runner", until=None, lease=3)
    wall.now += 5  # held for the lease's 3 wall seconds, then running for 2
    assert _sim(clock) == 20 and clock.bound() is None


def test_the_lowest_of_several_holds_bounds_the_clock(wall: _Wall) -> None:
    clock = SimClock(START, speed=10)
    clock.hold("a", until=30, lease=1000)
    clock.hold("b", until=12, lease=1000)
    wall.now += 10
    assert _sim(clock) == 12
    clock.release("b")
    wall.now += 10
    assert _sim(clock) == 30


@pytest.mark.parametrize(("holder", "until", "lease"), [
    ("", None, 10.0), ("r", float("nan"), 10.0), ("r", None, 0.0), ("r", None, float("inf")),
])
def test_a_malformed_hold_is_refused(holder: str, until: float | None, lease: float) -> None:
    clock = SimClock(START, speed=10)
    with pytest.raises(ValueError):
        clock.hold(holder, until=until, lease=lease)
    assert clock.bound() is None
