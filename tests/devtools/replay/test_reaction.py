"""The reaction-time study: its arithmetic by hand, the interval honoured, and a shorter poll never waiting longer."""

from __future__ import annotations

import math
from typing import Any

import pytest

from devtools.replay.harness import ReplayConfig
from devtools.replay.pools import CPU_POOL
from devtools.replay.reaction import (
    FlexPrices,
    OursRun,
    busiest_hour,
    figures,
    markdown_table,
    per_day,
    recommend,
    run_ours,
    schedule_for,
    study,
)
from devtools.replay.traces import Trace, TracePod

# One pod arriving 5 s in, needing one new node; the boot delay is fixed (median = p95), so two runs differ
# only in when the pending poll first sees the pod.
LONE_POD = Trace("lone", "<test>", (TracePod(at=5.0, duration=300.0, cpu_milli=2000, memory_bytes=4 << 30),), "hand-made")
CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=900.0, boot_median_s=100.0, boot_p95_s=100.0)
END_S = math.ceil(5 + 300 + 900)  # the world's duration: the pod's end plus the tail


def _with_interval(interval_s: int) -> ReplayConfig:
    return ReplayConfig(pools=CONFIG.pools, tail_s=CONFIG.tail_s, boot_median_s=CONFIG.boot_median_s,
                        boot_p95_s=CONFIG.boot_p95_s, settings={"PENDING_POLL_SCHEDULE": schedule_for(interval_s)})


# -- arithmetic ----------------------------------------------------------------------------


@pytest.mark.parametrize(("duration_s", "billed_s"), [
    (0.0, 1.0), (0.2, 1.0), (1.0, 1.0), (1.01, 1.1), (1.1, 1.1), (2.0, 2.0), (2.34, 2.4),
])
def test_an_execution_is_billed_at_least_a_second_then_in_whole_100_ms(duration_s: float, billed_s: float) -> None:
    assert FlexPrices().billed_seconds(duration_s) == pytest.approx(billed_s)


def test_one_execution_costs_its_gb_seconds_plus_its_share_of_a_million() -> None:
    # 1 s x 2 GB x $0.000026 + $0.40 / 1,000,000
    assert FlexPrices().usd_per_execution() == pytest.approx(0.000052 + 0.0000004)
    # 1.5 s billed as 1.5 s on a 4 GB instance
    assert FlexPrices(instance_memory_gb=4, billed_seconds_per_execution=1.5).usd_per_execution() == pytest.approx(
        1.5 * 4 * 0.000026 + 0.0000004)


def test_executions_and_their_bill_per_day_are_scaled_from_the_run() -> None:
    run = OursRun(
        result={"pending_wait_s": {"p50": 0.0, "p95": 40.0, "p99": 60.0, "max": 90.0}, "cost": 12.0,
                "arm_reads": 1800, "arm_writes": 12, "throttle_violations": 0},
        executions={"poll_pending_pods": 360, "poll_utilization": 60, "execute_scale_action": 12},
        sim_seconds=3600.0,
        arm_read_samples=((0.0, 0), (1800.0, 500), (3600.0, 1800)),
    )
    row = figures(run)
    # (360 + 60 + 12) an hour -> 10,368 a day, at $0.0000524 each
    assert row["executions_per_day"] == 10_368
    assert row["functions_usd_per_day"] == pytest.approx(0.5433, abs=1e-4)
    assert row["node_usd_per_day"] == pytest.approx(12.0 * 24)
    assert row["arm_reads_per_hour"] == 1800
    assert row["arm_reads_busiest_hour"] == 1800


@pytest.mark.parametrize(("count", "seconds", "expected"), [(100, 43_200, 200), (24, 86_400, 24), (1, 3600, 24)])
def test_per_day(count: int, seconds: float, expected: float) -> None:
    assert per_day(count, seconds) == pytest.approx(expected)


def test_per_day_refuses_an_empty_run() -> None:
    with pytest.raises(ValueError, match="some time"):
        per_day(1, 0)


@pytest.mark.parametrize(("samples", "expected"), [
    ((), 0),
    (((0.0, 0), (1800.0, 300)), 300),  # shorter than an hour: all of it
    (((0.0, 0), (1800.0, 100), (3600.0, 200), (5400.0, 1200), (7200.0, 1300)), 1100),  # 1800-5400 s
    (((0.0, 0), (600.0, 50), (4200.0, 60), (4800.0, 2000)), 1950),  # 600-4800 s: the window reaches back past an hour
])
def test_busiest_hour(samples: tuple[tuple[float, int], ...], expected: int) -> None:
    assert busiest_hour(samples) == expected


@pytest.mark.parametrize(("interval_s", "expression"), [(10, "*/10 * * * * *"), (15, "*/15 * * * * *"),
                                                        (30, "*/30 * * * * *"), (60, "0 * * * * *")])
def test_schedule_for(interval_s: int, expression: str) -> None:
    assert schedule_for(interval_s) == expression


@pytest.mark.parametrize("interval_s", [0, 7, 45, 90])
def test_schedule_for_refuses_an_interval_that_does_not_divide_a_minute(interval_s: int) -> None:
    with pytest.raises(ValueError, match="divide a minute"):
        schedule_for(interval_s)


# -- the recommendation ----------------------------------------------------------------------


def _row(p95: float, node_usd: float, busiest: int = 1000, functions_usd: float = 0.2) -> dict[str, Any]:
    return {"pending_wait_s": {"p50": 0.0, "p95": p95, "p99": p95}, "node_usd_per_day": node_usd,
            "functions_usd_per_day": functions_usd, "arm_reads_busiest_hour": busiest}


@pytest.mark.parametrize(("ten", "fifteen", "chosen"), [
    (_row(60, 1000.5, functions_usd=0.6), _row(70, 1000.2), 10),  # clearly faster at +0.1 %: the fastest
    (_row(60, 1100.0), _row(70, 1000.2), 15),  # 10 s costs 10 % more
    (_row(60, 1000.0, busiest=7000), _row(88, 1000.0), 30),  # 10 s too close to the ARM limit; 15 s gains 2 s only
    (_row(91, 990.0), _row(95, 990.0), 30),  # a longer p95 is not bought, however cheap
    (_row(70, 1000.0), _row(70, 1000.0), 15),  # a tie goes to the longer interval
])
def test_recommend_a_shorter_interval_only_for_a_clearly_better_p95_at_a_small_cost(
        ten: dict[str, Any], fifteen: dict[str, Any], chosen: int) -> None:
    per_trace = {
        "a": {"ours@10s": ten, "ours@15s": fifteen, "ours@30s": _row(90, 1000.0)},
        "b": {"ours@10s": _row(50, 500.0), "ours@15s": _row(50, 500.0), "ours@30s": _row(50, 500.0)},
    }
    verdict = recommend(per_trace)
    assert verdict["interval_s"] == chosen
    assert verdict["changed"] == (chosen != 30)
    assert verdict["schedule"] == schedule_for(chosen)
    assert set(verdict["why_not"]) <= {"10 s", "15 s"}


# -- the replay ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lone_pod_runs() -> dict[int, OursRun]:
    return {interval: run_ours(LONE_POD, _with_interval(interval)) for interval in (10, 30)}


def test_the_interval_setting_is_honoured_and_every_execution_counted(lone_pod_runs: dict[int, OursRun]) -> None:
    for interval, run in lone_pod_runs.items():
        assert run.sim_seconds == END_S
        # The world starts on a whole minute: the poll fires at interval, 2 x interval, ... up to the end.
        assert run.executions["poll_pending_pods"] == END_S // interval
        assert run.executions["poll_utilization"] == END_S // 60
        assert run.executions["execute_scale_action"] >= 1  # the one scale-up, at least
        row = figures(run)
        total = sum(run.executions.values())
        assert row["executions_per_day"] == pytest.approx(total * 86_400 / END_S, abs=0.05)
        assert row["functions_usd_per_day"] == pytest.approx(row["executions_per_day"] * 0.0000524, abs=1e-4)


def test_a_shorter_poll_never_waits_longer_and_here_saves_the_poll_lag(lone_pod_runs: dict[int, OursRun]) -> None:
    fast = lone_pod_runs[10].result["pending_wait_s"]["max"]
    slow = lone_pod_runs[30].result["pending_wait_s"]["max"]
    assert fast <= slow
    # Seen at 10 s rather than 30 s, the same node (same boot delay) is asked for 20 s earlier.
    assert slow - fast == pytest.approx(20.0, abs=1.0)


def test_study_tabulates_every_interval_and_recommends_from_the_figures() -> None:
    data, text = study(traces=[LONE_POD], intervals_s=(10, 30), include_ca=True, base=CONFIG)
    rows = data["traces"]["lone"]
    assert set(rows) == {"ours@10s", "ours@30s", "ca"}
    assert rows["ours@10s"]["executions_per_day"] > rows["ours@30s"]["executions_per_day"]
    assert data["recommendation"]["interval_s"] in (10, 30)
    assert markdown_table(data["traces"]) in text
    assert "Recommended PENDING_POLL_SCHEDULE" in text


def test_study_wants_the_default_interval_to_compare_with() -> None:
    with pytest.raises(ValueError, match="default interval"):
        study(traces=[LONE_POD], intervals_s=(10, 15), base=CONFIG)
