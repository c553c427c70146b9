"""ours+standby in the replay: its settings, hits, misses and refills counted from the world, slow pods by cause, and
its targets judged (never asserted) against the same run's ours and ca."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from devtools.replay.frontier import dominance, sweep_points
from devtools.replay.harness import RESOURCE_GROUP, ReplayConfig, build_world
from devtools.replay.metrics import STOPPED_INSTANCE_ASSUMPTIONS
from devtools.replay.pools import CPU_POOL
from devtools.replay.standby import (
    ASSUMPTIONS,
    FRONTIER_SIZES,
    POLICY,
    STANDBY_TARGETS,
    evaluate_standby_targets,
    slow_pods,
    standby_section,
    standby_settings,
)
from devtools.replay.traces import Trace, TracePod

GIB = 1 << 30
CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=900.0)
WHOLE_NODE = CPU_POOL.cpu_milli - 200  # one such pod per node, beside the DaemonSet


@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, "auto"),
    ({"STANDBY_INSTANCES": "5"}, "5"),  # a frontier point's size wins over the policy's auto
])
def test_the_policy_sets_auto_standby_unless_the_run_says_otherwise(overrides: dict, expected: str) -> None:
    settings = standby_settings({"SCALE_DOWN_UNNEEDED_TIME": "2m", **overrides})
    assert settings["STANDBY_INSTANCES"] == expected and settings["SCALE_DOWN_UNNEEDED_TIME"] == "2m"


def test_the_stopped_instance_assumptions_are_stated_with_the_policy() -> None:
    assert set(STOPPED_INSTANCE_ASSUMPTIONS) <= set(ASSUMPTIONS)


def _group(world):  # noqa: ANN001, ANN202 - the world's scale set
    return world.scale_set(world.subscription_id, RESOURCE_GROUP, CPU_POOL.name)


def test_hits_misses_and_refills_are_counted_from_the_worlds_instances() -> None:
    # Two whole-node pods, the second arriving when the only node is taken: a created node runs it (a miss). A
    # third instance is created and stopped before any pod (a refill), then started (a hit).
    pods = (TracePod(at=0.0, duration=3000.0, cpu_milli=WHOLE_NODE, memory_bytes=GIB),
            TracePod(at=30.0, duration=600.0, cpu_milli=WHOLE_NODE, memory_bytes=GIB))
    world = build_world(Trace("two", "<test>", pods, "hand-made"), CONFIG, initial={CPU_POOL.name: 1})
    group = _group(world)
    world.advance_by(40)
    world.set_capacity(group, 2)  # the miss: the pending pod's node
    world.advance_by(1000)  # every boot done (the boot delay is capped at 900 s)
    world.set_capacity(group, 3)  # the refill
    world.advance_by(1000)
    refill = max(world.instances(group), key=lambda i: i.instance_id)
    world.deallocate_instances(group, [str(refill.instance_id)])
    world.advance_by(200)
    world.start_instances(group, [str(refill.instance_id)])
    world.advance_by(1000)
    section = standby_section(world, slow_s=60.0)
    assert (section["hits"], section["misses"], section["refills"]) == (1, 1, 1)
    assert section["hit_rate"] == pytest.approx(0.5)
    assert section["deallocations"] == 1 and section["stopped_peak"] >= 1
    assert section["disk_cost"] > 0 and section["disk_seconds"] > 0
    # The second pod waited for a create (its node came up after it was created), longer than a minute.
    assert section["slow_pods"]["by_cause"].get("create") == 1


def _inst(created: float, *starts: float, node: str = "n1", boot: float = 30.0) -> Any:
    """An instance created at `created` (Ready `boot` later, 0 for the pools' initial ones) and started at `starts`
    (each Ready `boot` later)."""
    return SimpleNamespace(node_name=node, created_at=created, registered_at=created + boot if created else None,
                           start_times=list(starts), start_ready_times=[at + boot for at in starts],
                           group_key="rg/pool-a")


def _pod(created: float, started: float | None, node: str | None = "n1", outcome: str = "succeeded") -> dict:
    return {"waiting_since": created, "started": started, "node": node, "outcome": outcome}


@pytest.mark.parametrize(("pod", "inst", "cause"), [
    (_pod(100, 200), _inst(150), "create"),  # its node was created after it
    (_pod(100, 200), _inst(90), "create"),  # created just before it, still booting when it came
    (_pod(100, 200), _inst(0, 150), "start"),  # its node was started after it
    (_pod(100, 200), _inst(0, 80), "start"),  # started before it, Ready only after it came
    (_pod(100, 200), _inst(0, 50), "room"),  # its node was Ready: it waited for room
    (_pod(100, 200), _inst(10), "room"),  # created and Ready before it came
    (_pod(100, 200), _inst(0, 150, 250), "start"),  # a later start (after its own) does not count
    (_pod(100, None, node=None), _inst(0), "never_ran"),
])
def test_a_slow_pod_is_put_down_to_what_it_waited_for(pod: dict, inst: Any, cause: str) -> None:
    result = slow_pods([pod], [inst], slow_s=60.0)
    assert result["by_cause"] == {cause: 1} and result["count"] == 1
    assert result["by_group"] == {"pool-a" if pod["node"] else "none": 1}


def test_pods_within_the_threshold_and_refused_ones_are_not_slow() -> None:
    pods = [_pod(100, 150), _pod(100, 160), _pod(0, 500, outcome="failed")]
    assert slow_pods(pods, [_inst(0)], slow_s=60.0)["count"] == 0


def _run(cost: float, p95: float, **standby: Any) -> dict:
    return {"cost": cost, "pending_wait_s": {"p95": p95}, "pods_killed": 0, "work_lost_s": 0.0,
            "standby": {"disk_cost": 1.5, "hits": 3, "misses": 1, "forecast_mape": None, **standby}}


@pytest.mark.parametrize(("cost", "wait_over_target", "met"), [
    (50, -5, [True, True]),
    (70, -5, [True, False]),  # dearer than the run it is held to
    (50, 30, [False, True]),  # slower than the target
    (60, 0, [True, True]),  # at the limits
])
@pytest.mark.parametrize("target", STANDBY_TARGETS, ids=lambda t: t.trace)
def test_the_standby_targets_judge_wait_and_cost_against_the_same_run(target: Any, cost: float,
                                                                      wait_over_target: float, met: list[bool]) -> None:
    per_policy = {POLICY: _run(cost, target.p95_s + wait_over_target), target.cost_at_most: _run(60, 150)}
    targets = evaluate_standby_targets(target.trace, per_policy)
    assert [t["met"] for t in targets] == met
    assert "disk cost $1.50" in targets[0]["detail"] and "MAPE n/a" in targets[0]["detail"]


def test_no_standby_target_on_a_trace_without_one_or_without_the_run() -> None:
    assert evaluate_standby_targets("tiny", {POLICY: _run(1, 1)}) == []
    assert evaluate_standby_targets(STANDBY_TARGETS[0].trace, {"ours": _run(1, 1)}) == []


def test_the_frontier_sweeps_every_standby_size_and_counts_them_as_ours() -> None:
    points = [p for p in sweep_points(("ours", POLICY, "ca")) if p.key == POLICY]
    assert [p.label for p in points] == [f"standby {size}" for size in FRONTIER_SIZES]
    assert [p.label for p in points if p.default] == ["standby auto"]  # the main table's run, not replayed again
    assert [p.config_changes() for p in points] == [{"settings": {"STANDBY_INSTANCES": size}} for size in FRONTIER_SIZES]
    frontier = {
        "ours": [{"label": "auto", "cost": 100.0, "p95_wait_s": 140.0, "pods_killed": 0, "work_lost_s": 0.0}],
        POLICY: [{"label": "standby 5", "cost": 90.0, "p95_wait_s": 50.0, "pods_killed": 0, "work_lost_s": 0.0}],
        "ca": [{"label": "10m/10m", "cost": 95.0, "p95_wait_s": 60.0, "pods_killed": 0, "work_lost_s": 0.0}],
    }
    result = dominance(frontier)
    [row] = result["rows"]  # ours+standby is not a peer
    assert row["policy"] == "ca" and row["ours"] == "standby 5" and row["met"]


def test_the_forecast_error_is_none_until_an_hour_with_demand_was_judged() -> None:
    from datetime import UTC, datetime

    from devtools.replay.memory import MemoryStateStore
    from devtools.replay.standby import forecast_mape

    assert forecast_mape(MemoryStateStore(), datetime(2030, 1, 7, tzinfo=UTC)) is None


def _seed(seed: int, mine: tuple[float, float], theirs: tuple[float, float], held_to: str) -> dict:
    return {"seed": seed, POLICY: {"p95": mine[0], "cost": mine[1]}, held_to: {"p95": theirs[0], "cost": theirs[1]}}


@pytest.mark.parametrize(("rows", "met"), [
    # (ours+standby's p95 over the target's limit, its cost), per seed; the run it is held to costs 100
    ([(-6, 90), (2, 95)], True),  # 2 s under the limit on average, cheaper
    ([(-5, 90), (15, 95)], False),  # 5 s over on average
    ([(-5, 110), (-5, 95)], False),  # dearer on average
])
@pytest.mark.parametrize("target", STANDBY_TARGETS, ids=lambda t: t.trace)
def test_the_standby_targets_are_judged_on_the_seeds_means_too(target: Any, rows: list, met: bool) -> None:
    seeds = [_seed(i, (target.p95_s + over, cost), (70, 100), target.cost_at_most)
             for i, (over, cost) in enumerate(rows)]
    per_policy = {POLICY: _run(90, 40), target.cost_at_most: _run(100, 70)}
    targets = evaluate_standby_targets(target.trace, per_policy, seeds)
    assert len(targets) == 3 and targets[2]["met"] is met
    assert targets[2]["name"].endswith("means over seeds 0-1")
    assert len(evaluate_standby_targets(target.trace, per_policy, seeds[:1])) == 2  # one seed: no mean row


def test_the_suites_seed_rows_carry_ours_standby_when_the_run_has_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from devtools.replay import suite
    replayed: list[tuple[str, int]] = []

    def fake_replay(trace, policy, config):  # type: ignore[no-untyped-def]
        replayed.append((policy, config.seed))
        return SimpleNamespace(result=_run(100 + config.seed, 40 + config.seed))

    monkeypatch.setattr(suite, "replay", fake_replay)
    monkeypatch.setattr(suite, "load_trace", lambda name, *, seed: f"{name}@{seed}")
    per_policy = {"ours": _run(99, 5), "ca": _run(98, 6), POLICY: _run(97, 4)}
    rows = suite.wait_over_seeds("alibaba2023", per_policy, seed=0, count=2)
    assert rows[0][POLICY] == {"p95": 4, "cost": 97} and rows[1][POLICY] == {"p95": 41, "cost": 101}
    assert sorted(replayed) == [("ca", 1), ("ours", 1), (POLICY, 1)]


def test_a_pools_tags_reach_its_scale_set() -> None:
    from dataclasses import replace as with_

    pool = with_(CPU_POOL, tags=(("autoscaler-standby", "4"),))
    world = build_world(Trace("none", "<test>", (TracePod(at=0.0, duration=60.0, cpu_milli=100, memory_bytes=GIB),),
                              "hand-made"), ReplayConfig(pools=(pool,), tail_s=60.0))
    assert _group(world).tags.get("autoscaler-standby") == "4"
    assert "tags" not in CPU_POOL.node_group(resource_group="rg")  # no tags, none written
