"""The replay's run-time estimates (the expected-runtime annotation on every trace pod), the spot settings ours+spot
runs with, and the expected spot loss reported beside the measured one."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from devtools.replay import runtime_estimates as re_
from devtools.replay.harness import Replay, ReplayConfig, build_world, workload_estimates
from devtools.replay.pools import CPU_POOL, GPU_POOL_2
from devtools.replay.run import replay
from devtools.replay.spot import SpotTier
from devtools.replay.traces import Trace, TracePod
from shared.engine.spot_work import EXPECTED_RUNTIME_ANNOTATION, break_even, expected_runtime

CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=600.0)
CALM = {"band": "0-5%", "scarcity": False}  # evictions rare, capacity never short: where pods run is the planner's


def pod(at: float, duration: float, *, job: str = "", cpu: int = 2000, gpus: int = 0) -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=2 << 30, gpus=gpus, job=job)


def test_a_job_pod_is_estimated_at_its_job_median() -> None:
    pods = [pod(i, d, job=job) for i, (job, d) in enumerate(
        [("a", 100), ("a", 300), ("a", 200), ("b", 50), ("b", 70)])]
    got = re_.estimates(pods, seed=0)
    for job in ("a", "b"):
        mine = [e for p, e in zip(pods, got, strict=True) if p.job == job]
        assert set(mine) == {statistics.median(p.duration for p in pods if p.job == job)}


def test_a_pod_without_a_job_is_its_duration_times_a_seeded_lognormal_error() -> None:
    pods = [pod(i, 60.0 + i) for i in range(4000)]
    got = re_.estimates(pods, seed=3)
    ratios = sorted(e / p.duration for p, e in zip(pods, got, strict=True))
    assert all(r != 1.0 for r in ratios)  # never the exact duration
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.05)
    assert ratios[int(0.95 * len(ratios))] == pytest.approx(re_.LOGNORMAL_P95, rel=0.1)
    assert re_.estimates(pods, seed=3) == got  # the same for every policy on a seed
    assert re_.estimates(pods, seed=4) != got


@pytest.mark.parametrize("seconds", [0.2, 1.0, 59.6, 3600.0, 86400.0 * 3])
def test_the_annotation_reads_back_as_the_estimate(seconds: float) -> None:
    parsed = re_.annotation_value(seconds)
    from shared.quantities import parse_duration
    assert parse_duration(parsed).total_seconds() == max(1, round(seconds))


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_a_bad_estimate_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="estimated run time"):
        re_.annotation_value(bad)


def test_every_pod_of_the_world_carries_its_estimate() -> None:
    pods = (pod(0, 600, job="a"), pod(0, 1200, job="a"), pod(5, 900), pod(6, 30))
    trace = Trace("tiny", "<test>", pods, "hand-made")
    world = build_world(trace, CONFIG)
    run = Replay(world, CONFIG)
    world.advance(world.start.replace() + (world.now - world.start) + __import__("datetime").timedelta(seconds=10))
    expected = workload_estimates(list(pods), seed=CONFIG.seed)
    seen = run.cluster.list_pods()
    assert len([p for p in seen if p.namespace == "default"]) == len(pods)
    for p in seen:
        if p.namespace != "default":
            continue
        runtime = expected_runtime(p)
        assert runtime is not None, p.key
        workload = p.labels.get("job-name") or ""
        assert runtime.total_seconds() == max(1, round(expected[workload]))


def test_ours_plus_spot_gets_the_main_pools_band_rate_and_spot_first_turns_the_rule_off() -> None:
    pools = (CPU_POOL, GPU_POOL_2)
    tier = SpotTier.of({})
    assert tier is not None
    for main in pools:
        work = {p.name: (10.0 if p is main else 1.0) for p in pools}
        settings = re_.spot_settings(pools, work, {})
        assert float(settings["SPOT_EVICTION_RATE"]) == pytest.approx(tier.rate_of(main.vm_size))
        assert "SPOT_MAX_RUNTIME" not in settings  # the product's default, auto
        assert re_.spot_settings(pools, work, {}, spot_first=True)["SPOT_MAX_RUNTIME"] == "off"
        limit = re_.limit_s(settings, pools)
        assert limit == pytest.approx(break_even(
            eviction_rate=tier.rate_of(main.vm_size), price_fraction=re_.price_fraction(pools),
            lost_work_cost=re_.DEFAULT_LOST_WORK_COST).total_seconds())
        assert re_.limit_s({**settings, "SPOT_MAX_RUNTIME": "off"}, pools) is None
        assert re_.limit_s({**settings, "SPOT_MAX_RUNTIME": "90m"}, pools) == 5400.0


def test_the_expected_loss_counts_the_pods_started_on_spot_only() -> None:
    rates = {"cpu-spot": 0.1}
    estimates = {"w-short": 1800.0, "w-long": 7200.0}
    report = [
        {"workload": "default/w-short", "group": "rg/cpu-spot", "started": 1.0},
        {"workload": "default/w-long", "group": "rg/cpu-spot", "started": 1.0},
        {"workload": "default/w-long", "group": "rg/cpu", "started": 1.0},  # on demand: no expected loss
        {"workload": "default/w-short", "group": None, "started": None},  # never ran
    ]
    got = re_.spot_work_section(report, estimates, rates, pod_estimates=[1800.0, 7200.0, 7200.0], limit=3600.0,
                                lost_work_s=12.0)
    hours = [0.5, 2.0]
    assert got["expected_loss_s"] == pytest.approx(sum(0.1 * h * h / 2 for h in hours) * 3600, abs=0.1)
    assert got["pods_started_on_spot"] == 2
    assert got["pods_over_limit"] == 2
    assert got["long_pods_started_on_spot"] == 1
    assert got["lost_work_s"] == 12.0
    assert "pods_over_limit" not in re_.spot_work_section(report, estimates, rates, pod_estimates=[], limit=None,
                                                          lost_work_s=0.0)


def test_ours_plus_spot_keeps_long_pods_off_spot_where_spot_first_puts_them_on_it() -> None:
    # Long jobs (2 h, over a 1 h limit) and short ones (5 min), each pod about a node's worth so none share.
    long_pods = [pod(i, 7200.0, job=f"long-{i}", cpu=14000) for i in range(3)]
    # The short ones come once the long ones run: which node a pending pod binds to is the scheduler's race.
    short = [pod(1800 + i, 300.0, job=f"short-{i}", cpu=14000) for i in range(3)]
    trace = Trace("tiny", "<test>", tuple(sorted([*long_pods, *short], key=lambda p: p.at)), "hand-made")
    config = replace(CONFIG, spot=CALM, settings={"SPOT_MAX_RUNTIME": "1h"})
    by_work = replay(trace, "ours+spot", config).result
    first = replay(trace, "ours+spot-first", replace(config, settings={})).result
    assert by_work["settings"]["SPOT_MAX_RUNTIME"] == "1h" and first["settings"]["SPOT_MAX_RUNTIME"] == "off"
    assert by_work["spot_work"]["pods_started_on_spot"] < first["spot_work"]["pods_started_on_spot"]
    assert by_work["spot_work"]["expected_loss_s"] < first["spot_work"]["expected_loss_s"]
    assert first["spot_work"]["limit_s"] is None and by_work["spot_work"]["limit_s"] == 3600.0
    assert by_work["spot_work"]["long_pods_started_on_spot"] == 0
    assert any(EXPECTED_RUNTIME_ANNOTATION in a for a in by_work["assumptions"])
