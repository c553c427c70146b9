"""Running headroom in the replay: the CapacityBuffers a run keeps, the frontier's buffer sizes, and the cheapest swept
point that meets a trace's wait target."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from devtools.replay.frontier import (
    BUFFER_SIZES,
    BUFFER_SIZES_LARGE,
    BUFFER_SIZES_LARGE_ON,
    BUFFER_WITH_STANDBY,
    OURS_BUFFER,
    buffer_points,
    cheapest_within,
    dominance,
    sweep_points,
)
from devtools.replay.harness import (
    DAEMONSET_CPU_MILLI,
    DAEMONSET_MEMORY_MIB,
    ReplayConfig,
    build_world,
    headroom_buffers,
)
from devtools.replay.pools import CPU_POOL, CPU_POOL_LARGE, GPU_POOL_2
from devtools.replay.run import replay
from devtools.replay.standby import STANDBY_TARGETS, evaluate_frontier_target
from devtools.replay.traces import Trace, TracePod
from sandbox.model.units import parse_bytes, parse_cpu_milli

GIB = 1 << 30


def _trace(*pods: TracePod) -> Trace:
    return Trace("tiny", "<test>", pods, "hand-made")


def _p(label: str, cost: float, p95: float, killed: int = 0) -> dict[str, Any]:
    return {"label": label, "settings": {}, "cost": cost, "p95_wait_s": p95, "pods_killed": killed,
            "work_lost_s": 0.0, "pods_completed": 10, "pods": 10}


# -- the buffers a run keeps ----------------------------------------------------------------------


@pytest.mark.parametrize("pools", [(CPU_POOL,), (CPU_POOL_LARGE, GPU_POOL_2), (CPU_POOL, CPU_POOL.spot_twin())])
@pytest.mark.parametrize("nodes", [1, 3])
def test_each_cpu_pool_gets_a_buffer_of_whole_empty_nodes(pools: tuple, nodes: int) -> None:
    buffers = headroom_buffers(pools, nodes)
    cpu_pools = [p for p in pools if not p.gpus and not p.is_spot]
    assert [b["name"] for b in buffers] == [f"headroom-{p.name}" for p in cpu_pools]
    for buffer, pool in zip(buffers, cpu_pools, strict=True):
        assert buffer["replicas"] == nodes and buffer["at"] == "0s"
        cpu, memory = parse_cpu_milli(buffer["requests"]["cpu"]), parse_bytes(buffer["requests"]["memory"])
        # One chunk is most of an empty node's room: it fits beside the DaemonSet, and two never share a node.
        room_cpu, room_memory = pool.cpu_milli - DAEMONSET_CPU_MILLI, (pool.memory_mib - DAEMONSET_MEMORY_MIB) << 20
        assert room_cpu / 2 < cpu <= room_cpu and room_memory / 2 < memory <= room_memory


def test_no_buffer_at_zero_and_a_bad_size_is_refused() -> None:
    assert headroom_buffers((CPU_POOL,), 0) == []
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="buffer_nodes"):
            ReplayConfig(buffer_nodes=bad)  # type: ignore[arg-type]


def test_the_world_holds_the_buffer_and_its_template_from_the_start() -> None:
    config = ReplayConfig(pools=(CPU_POOL,), tail_s=60.0, buffer_nodes=2)
    world = build_world(_trace(TracePod(at=600.0, duration=60.0, cpu_milli=100, memory_bytes=GIB)), config)
    world.advance_by(1.0)
    [buffer] = world.k8s_list("capacitybuffers")
    assert buffer["spec"]["replicas"] == 2
    template = world.k8s_get("podtemplates", "default", buffer["spec"]["podTemplateRef"]["name"])
    requests = template["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == headroom_buffers((CPU_POOL,), 2)[0]["requests"]
    unbuffered = build_world(_trace(TracePod(at=600.0, duration=60.0, cpu_milli=100, memory_bytes=GIB)),
                             replace(config, buffer_nodes=0))
    unbuffered.advance_by(1.0)
    assert unbuffered.k8s_list("capacitybuffers") == []


def test_a_buffer_keeps_a_node_ready_for_a_pod_that_comes_later() -> None:
    """Without a buffer the pod waits a boot; with one node's room kept, it starts on that node at once and the
    buffer costs the node's idle time."""
    pods = _trace(TracePod(at=1800.0, duration=300.0, cpu_milli=4000, memory_bytes=4 * GIB))
    config = ReplayConfig(pools=(CPU_POOL,), tail_s=600.0)
    plain = replay(pods, "ours", config).result
    kept = replay(pods, "ours", replace(config, buffer_nodes=1)).result
    assert plain["pods_completed"] == kept["pods_completed"] == 1
    assert plain["pending_wait_s"]["max"] >= 30.0  # a boot (the replay's boots are lognormal around 100 s)
    assert kept["pending_wait_s"]["max"] < plain["pending_wait_s"]["max"] / 2
    assert kept["cost"] > plain["cost"]


# -- the frontier's buffer sizes --------------------------------------------------------------------


@pytest.mark.parametrize("trace", [None, "alibaba2018", "alibaba2023"])
def test_the_sweep_runs_each_buffer_size_once_with_zero_as_the_default_run(trace: str | None) -> None:
    points = buffer_points(("ours", "ours+standby", "ca"), trace)
    assert {p.key for p in points} == {OURS_BUFFER}
    sizes = BUFFER_SIZES + (BUFFER_SIZES_LARGE if trace in BUFFER_SIZES_LARGE_ON else ())
    assert [p.buffer_nodes for p in points if p.policy == "ours"] == list(sizes)
    assert [p.buffer_nodes for p in points if p.policy == "ours+standby"] == list(BUFFER_WITH_STANDBY)
    assert len({p.label for p in points}) == len(points)
    for p in points:
        # Size 0 is the policy's own default run (reused); every other size is a run of its own with that buffer.
        assert p.default == (p.buffer_nodes == 0)
        assert p.config_changes().get("buffer_nodes", 0) == p.buffer_nodes
    assert buffer_points(("ca",), trace) == []


def test_buffer_points_are_in_the_sweep_and_count_as_ours_in_dominance() -> None:
    assert any(p.key == OURS_BUFFER for p in sweep_points(("ours", "ca")))
    frontier = {"ours": [_p("auto", 100, 140)], OURS_BUFFER: [_p("buffer 4", 90, 60)], "ca": [_p("10m/10m", 95, 70)]}
    [row] = dominance(frontier)["rows"]
    assert row["ours"] == "buffer 4" and row["met"]


# -- the cheapest point that meets a wait target ----------------------------------------------------


@pytest.mark.parametrize(("frontier", "limit", "expected"), [
    # the cheapest within the limit, whichever family it is in
    ({"ours": [_p("auto", 50, 140)], OURS_BUFFER: [_p("buffer 8", 90, 55), _p("buffer 16", 120, 40)],
      "ours+standby": [_p("standby 20", 80, 59)]}, 60.0, "standby 20"),
    # a point that kills pods is never the answer, nor is a peer's
    ({"ours": [_p("fixed 1m", 30, 50, killed=2), _p("auto", 50, 70)], "ca": [_p("1m/1m", 10, 10)]}, 60.0, None),
    # cost ties go to the shorter wait
    ({"ours": [_p("a", 50, 59), _p("b", 50, 40)]}, 60.0, "b"),
])
def test_cheapest_within_takes_the_cheapest_ours_point_under_the_limit(frontier: dict, limit: float,
                                                                       expected: str | None) -> None:
    found = cheapest_within(frontier, p95_s=limit)
    assert (found[1]["label"] if found else None) == expected
    if found:
        assert found[1]["p95_wait_s"] <= limit and found[0] in frontier


@pytest.mark.parametrize(("cost", "p95", "met"), [(90.0, 40.0, True), (110.0, 40.0, False)])
def test_the_frontier_target_holds_the_cheapest_point_to_the_targets_cost(cost: float, p95: float, met: bool) -> None:
    target = STANDBY_TARGETS[0]
    frontier = {"ours": [_p("auto", 50, target.p95_s + 80)], OURS_BUFFER: [_p("buffer 16", cost, p95)]}
    [row] = evaluate_frontier_target(target.trace, frontier, {target.cost_at_most: 100.0})
    assert row["met"] is met
    assert "buffer 16" in row["detail"] and f"{p95:.0f} s" in row["detail"]


def test_the_frontier_target_names_the_shortest_wait_when_no_point_meets_it() -> None:
    target = STANDBY_TARGETS[0]
    frontier = {"ours": [_p("auto", 50, target.p95_s + 80)], OURS_BUFFER: [_p("buffer 32", 250, target.p95_s + 10)]}
    [row] = evaluate_frontier_target(target.trace, frontier, {})
    assert not row["met"] and "buffer 32" in row["detail"]
    assert evaluate_frontier_target("no-such-trace", frontier, {}) == []
    assert evaluate_frontier_target(target.trace, {"ca": [_p("1m/1m", 1, 1)]}, {}) == []


def test_a_frontier_run_takes_each_policys_cost_from_its_default_point() -> None:
    from devtools.replay.suite import default_costs

    frontier = {"ours": [_p("auto", 50, 140), _p("fixed 1m", 40, 150)],
                "ca": [_p("1m/1m", 30, 160), _p("10m/10m", 70, 130)],
                OURS_BUFFER: [_p("buffer 0", 50, 140), _p("buffer 1", 60, 120)]}
    assert default_costs(frontier) == {"ours": 50, "ca": 70}


def test_a_configuration_the_sweep_lists_twice_is_replayed_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from devtools.replay import suite

    replayed: list[tuple[str, str, int]] = []

    def fake_replay(trace, policy, config):  # type: ignore[no-untyped-def]
        replayed.append((policy, repr(sorted(config.settings.items())), config.buffer_nodes))
        result = {"cost": 10.0 + config.buffer_nodes, "pending_wait_s": {"p95": 100.0 - config.buffer_nodes},
                  "pods_killed": 0, "work_lost_s": 0.0}
        return type("Outcome", (), {"result": result})()

    monkeypatch.setattr(suite, "replay", fake_replay)
    policies = ("ours", "ours+standby")
    frontiers, _ = suite.frontier_section({"t": "trace"}, seed=0, policies=policies, workers=1, show=lambda _: None)
    frontier = frontiers["t"]
    assert len(replayed) == len(set(replayed))  # `auto` and `buffer 0`, `standby auto` and `+ buffer 0`: once each
    points = sweep_points(policies, trace="t")
    assert len(replayed) == len(points) - 2
    [auto] = [p for p in frontier["ours"] if p["label"] == "auto"]
    [zero] = [p for p in frontier[OURS_BUFFER] if p["label"] == "buffer 0"]
    assert auto["cost"] == zero["cost"]
    assert [p["cost"] for p in frontier[OURS_BUFFER] if p["label"].startswith("buffer ")] == \
        [10.0 + n for n in BUFFER_SIZES]


def test_the_assumptions_state_the_chunk_share_the_harness_uses() -> None:
    from devtools.replay.frontier import ASSUMPTIONS
    from devtools.replay.harness import CHUNK_SHARE

    assert any(OURS_BUFFER in text and f"{CHUNK_SHARE:g}" in text for text in ASSUMPTIONS)
