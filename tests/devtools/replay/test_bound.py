"""The lower bound: whole nodes, each billed a boot from creation, idle gaps kept or released at best, zero wait.

Hand-computed on small traces, checked against a brute-force sum on random ones, never under the oracle
and never over a simple feasible schedule.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from devtools.replay.__main__ import main
from devtools.replay.harness import ReplayConfig, placeable
from devtools.replay.metrics import (
    DemandCurve,
    lower_bound_for,
    demand_curve,
    lower_bound_seconds,
    oracle_result,
    with_cost_vs_lower_bound,
)
from devtools.replay.pools import CPU_POOL, GPU_POOL_2, POOL_SETS
from devtools.replay.run import replay
from devtools.replay.suite import config_for
from devtools.replay.traces import TRACE_DIR, TRACE_FILES, Trace, TracePod, load_trace

GIB = 1 << 30
FREE_CPU = CPU_POOL.cpu_milli - 100  # what a D16 node offers pods once the DaemonSet has its share: 15,640m
BOOT = 100.0
CONFIG = ReplayConfig(pools=(CPU_POOL,), boot_median_s=BOOT, tail_s=900.0)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def trace(*pods: TracePod) -> Trace:
    return Trace("tiny", "<test>", tuple(sorted(pods, key=lambda p: (p.at, p.job))), "hand-made")


def pod(at: float, duration: float, cpu: int, *, gpus: int = 0) -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=GIB, gpus=gpus)


# -- by hand ------------------------------------------------------------------------------------


def test_bound_by_hand_with_a_short_gap_a_long_gap_and_a_second_level() -> None:
    # One D16 pool at $0.768/h, boot 100 s. Whole-node pods A [200, 600), B [650, 950), C [1450, 1550), and a
    # half-node pod D [300, 400) that needs a second node (ceil(1.5) = 2).
    # Level 1: boot 100 before A + needed 400 + 300 + 100 + the 50 s gap A-B kept idle (50 < 100)
    #          + the 500 s gap B-C released and re-booted (100) = 1,050 node-s.
    # Level 2: boot 100 + needed 100 = 200 node-s. Total 1,250 node-s = 1,250 x 0.768 / 3,600 = $0.26667.
    # Oracle: 400 + 300 + 100 + 0.5 x 100 = 850 node-s = $0.18133, $0.1813 as results.json rounds it; the bound
    # over it: 0.26667 / 0.1813 = 1.4709 (a ratio divides by the oracle's rounded cost, as cost_vs_oracle does).
    tiny = trace(pod(200, 400, FREE_CPU), pod(300, 100, FREE_CPU // 2), pod(650, 300, FREE_CPU),
                 pod(1450, 100, FREE_CPU))
    bound = lower_bound_for(tiny, CONFIG)
    assert bound["node_seconds"] == 1250.0
    assert bound["cost"] == 0.2667
    assert bound["cost_vs_oracle"] == 1.4709
    assert bound["cost_vs_lower_bound"] == 1.0 and bound["boot_s"] == BOOT
    assert replay(tiny, "oracle", CONFIG).result["cost"] == 0.1813


@pytest.mark.parametrize(("pods", "node_seconds", "cost"), [
    # A pod at t=30: its node's boot is cut at the world's start (30 s, not 100): 30 + 60 = 90 node-s = $0.0192.
    ([pod(30, 60, FREE_CPU)], 90.0, 0.0192),
    # A gap of exactly one boot: keeping and re-booting cost the same, 100. 100 + 200 + 100 + 200 = 600 = $0.128.
    ([pod(500, 200, FREE_CPU), pod(800, 200, FREE_CPU)], 600.0, 0.128),
    # A tenth of a node still takes a whole node: 100 + 36 = 136 node-s = $0.029013.
    ([pod(1000, 36, FREE_CPU // 10)], 136.0, 0.029),
    # Two pods back to back: no gap, one boot. 100 + 300 + 300 = 700 node-s = $0.14933.
    ([pod(100, 300, FREE_CPU), pod(400, 300, FREE_CPU)], 700.0, 0.1493),
])
def test_bound_by_hand_small_cases(pods: list[TracePod], node_seconds: float, cost: float) -> None:
    bound = lower_bound_for(trace(*pods), CONFIG)
    assert bound["node_seconds"] == node_seconds
    assert bound["cost"] == cost


def test_bound_prices_each_pool_like_the_oracle() -> None:
    # A 1-GPU pod on the 2-GPU NC48 pool ($7.346/h): half a node for the oracle, a whole one for the bound.
    # Bound: 100 + 3,600 = 3,700 node-s = 3,700 x 7.346 / 3,600 = $7.5501; oracle 1,800 node-s = $3.673.
    config = replace(CONFIG, pools=(CPU_POOL, GPU_POOL_2))
    bound = lower_bound_for(trace(pod(600, 3600, 1000, gpus=1)), config)
    assert bound["node_seconds"] == 3700.0
    assert bound["cost"] == 7.5501
    assert bound["cost_vs_oracle"] == round(7.5501 / 3.673, 4)


def test_levels_by_hand_on_a_demand_curve() -> None:
    # n(t): 3 on [0, 10), 1 on [10, 60), 3 on [60, 70), 0 after; boot 20.
    # Level 1: 70 needed, cut boot 0. Levels 2 and 3: 10 + 10 needed + min(50, 20) = 40 each. Total 150.
    curve = DemandCurve((0.0, 10.0, 60.0, 70.0), {"p": (2.5, 0.4, 2.2, 0.0)})
    assert lower_bound_seconds(curve, "p", boot_s=20.0, until=1000.0) == 150.0
    # With a zero boot it is the whole-node demand's integral: 30 + 50 + 30 = 110.
    assert lower_bound_seconds(curve, "p", boot_s=0.0, until=1000.0) == 110.0
    # Cut at `until`: the second peak counts up to 65 only: 70 - 5 = 65, and 10 + 5 + 20 = 35 per upper level.
    assert lower_bound_seconds(curve, "p", boot_s=20.0, until=65.0) == 135.0


# -- against independent computations, on random traces ----------------------------------------------


def _random_trace(seed: int) -> Trace:
    rng = random.Random(seed)
    pods = [pod(rng.randrange(0, 3000), rng.randrange(1, 400), rng.choice((FREE_CPU // 4, FREE_CPU // 2, FREE_CPU,
                                                                          3000, 11_000)))
            for _ in range(rng.randrange(1, 40))]
    return trace(*pods)


def _whole_nodes(curve: DemandCurve, pool: str, at: float) -> int:
    """n(at): the whole-node demand in force at `at`."""
    value = 0.0
    for start, v in zip(curve.times, curve.nodes[pool]):
        if start > at:
            break
        value = v
    return math.ceil(value - 1e-9) if value > 1e-9 else 0


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_bound_is_the_brute_force_sum_over_seconds(seed: int) -> None:
    # Integer times, integer boot: each second s >= 0 bills max(n(s), ..., n(s + boot)) nodes (the nodes ready
    # in the next boot's time are alive now).
    tiny = _random_trace(seed)
    pods, _ = placeable(tiny, CONFIG.pools)
    curve = demand_curve(pods, CONFIG.pools)
    boot = 37
    end = int(max(p.at + p.duration for p in pods))
    n = [_whole_nodes(curve, CPU_POOL.name, s) for s in range(end + boot + 1)]
    brute = sum(max(n[s:s + boot + 1]) for s in range(end))
    assert lower_bound_seconds(curve, CPU_POOL.name, boot_s=float(boot), until=end + 900.0) == pytest.approx(brute)


def _segments(curve: DemandCurve, pool: str) -> list[tuple[float, float, int]]:
    times, values = curve.times, curve.nodes[pool]
    return [(times[i], times[i + 1], math.ceil(v - 1e-9) if v > 1e-9 else 0) for i, v in enumerate(values[:-1])]


def _level_intervals(curve: DemandCurve, pool: str) -> dict[int, list[tuple[float, float]]]:
    levels: dict[int, list[tuple[float, float]]] = {}
    for start, stop, n in _segments(curve, pool):
        for k in range(1, n + 1):
            spans = levels.setdefault(k, [])
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], stop)
            else:
                spans.append((start, stop))
    return levels


def _simple_schedules(tiny: Trace, curve: DemandCurve, boot: float) -> dict[str, float]:
    """Node-seconds of feasible zero-wait schedules anyone could write down, each node billed `boot` before ready."""
    pods, _ = placeable(tiny, CONFIG.pools)
    levels = _level_intervals(curve, CPU_POOL.name)
    first = min(p.at for p in pods)
    last = max(p.at + p.duration for p in pods)
    peak = max((n for _, _, n in _segments(curve, CPU_POOL.name)), default=0)
    return {
        # One node per pod, created a boot before it arrives (not before t = 0), deleted when it ends.
        "node per pod": sum(p.duration + min(p.at, boot) for p in pods),
        # The peak's nodes from a boot before the first arrival to the last end.
        "static from first need": peak * (last - max(0.0, first - boot)),
        # Per level of whole-node demand: keep each node from its first need to its last.
        "never release": sum(spans[-1][1] - max(0.0, spans[0][0] - boot) for spans in levels.values()),
        # Per level: release in every gap and boot a new node for the next need.
        "always release": sum(stop - start + min(start, boot) for spans in levels.values() for start, stop in spans),
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_bound_is_above_the_oracle_and_below_simple_schedules(seed: int) -> None:
    tiny = _random_trace(seed)
    pods, _ = placeable(tiny, CONFIG.pools)
    curve = demand_curve(pods, CONFIG.pools)
    until = math.ceil(max(p.at + p.duration for p in pods) + CONFIG.tail_s)
    oracle = oracle_result(curve, CONFIG.pools, until=until)
    for boot in (0.0, 30.0, BOOT, 300.0):
        bound = lower_bound_for(tiny, replace(CONFIG, boot_median_s=boot))
        assert bound["node_seconds"] >= oracle["node_seconds"] - 0.1, boot
        assert bound["cost"] >= oracle["cost"], boot
        for name, seconds in _simple_schedules(tiny, curve, boot).items():
            assert bound["node_seconds"] <= seconds + 0.1, (boot, name)


def test_bound_grows_with_the_boot() -> None:
    tiny = _random_trace(3)
    costs = [lower_bound_for(tiny, replace(CONFIG, boot_median_s=boot))["cost"] for boot in (0.0, 10.0, 100.0, 1000.0)]
    assert costs == sorted(costs) and costs[0] < costs[-1]


def test_static_capacity_never_costs_less_than_the_bound() -> None:
    # Static keeps the peak's nodes from t = 0 (booted before the start) to the end: a feasible zero-wait schedule.
    tiny = trace(pod(200, 400, FREE_CPU), pod(300, 100, FREE_CPU // 2), pod(650, 300, FREE_CPU))
    bound = lower_bound_for(tiny, CONFIG)
    static = with_cost_vs_lower_bound(replay(tiny, "static", CONFIG).result, bound["cost"])
    assert static["cost_vs_lower_bound"] >= 1.0


@pytest.mark.skipif(not (TRACE_DIR / TRACE_FILES["alibaba2018"]).exists(),
                    reason=f"the shared traces are not at {TRACE_DIR}")
@pytest.mark.parametrize("name", sorted(POOL_SETS))
def test_bound_on_the_real_traces_lies_between_the_oracle_and_static(name: str) -> None:
    config = config_for(name)
    real = load_trace(name)
    bound = lower_bound_for(real, config)
    pods, _ = placeable(real, config.pools)
    curve = demand_curve(pods, config.pools)
    end = max(p.at + p.duration for p in pods)
    static = sum(math.ceil(curve.peak(p.name) - 1e-9) * end * p.price_per_hour / 3600 for p in config.pools)
    assert 1.0 < bound["cost_vs_oracle"] and bound["cost"] < static


# -- the results' layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("bound_cost", "expected"), [(50.0, 2.0), (0.0, None)])
def test_cost_vs_bound_follows_cost_vs_oracle(bound_cost: float, expected: float | None) -> None:
    result = {"node_seconds": 1.0, "cost": 100.0, "cost_vs_oracle": 4.0, "pods_killed": 0}
    out = with_cost_vs_lower_bound(result, bound_cost)
    assert list(out) == ["node_seconds", "cost", "cost_vs_oracle", "cost_vs_lower_bound", "pods_killed"]
    assert out["cost_vs_lower_bound"] == expected
    assert with_cost_vs_lower_bound(out, 25.0)["cost_vs_lower_bound"] == 4.0  # recomputed, not repeated
    assert with_cost_vs_lower_bound({"cost": 1.0}, 2.0) == {"cost": 1.0, "cost_vs_lower_bound": 0.5}


def test_replay_command_shows_the_bound_and_each_cost_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "one.json"
    assert main(["replay", "--trace", str(FIXTURES / "pods.csv"), "--policy", "static", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cost vs lower bound" in printed and "| lower_bound |" in printed and "| static |" in printed
    per_policy = json.loads(out.read_text())["replay"]["pods"]
    bound, static = per_policy["lower_bound"], per_policy["static"]
    assert bound["cost_vs_lower_bound"] == 1.0 and bound["boot_s"] == 100.0
    assert static["cost_vs_lower_bound"] == round(static["cost"] / bound["cost"], 4) >= 1.0
