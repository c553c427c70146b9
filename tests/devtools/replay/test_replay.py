"""The replay harness: deterministic, bounded below by the oracle, and each policy acting by its documented rule."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

import pytest

from devtools.replay.harness import Replay, ReplayConfig, build_world
from devtools.replay.metrics import demand_curve, run_result
from devtools.replay.policies import Static
from devtools.replay.policies.ca import ClusterAutoscaler
from devtools.replay.policies.ours import Ours
from devtools.replay.policies.vmss_cpu import VmssCpuAutoscale
from devtools.replay.pools import CPU_POOL, GPU_POOL_2
from devtools.replay.run import replay
from devtools.replay.traces import Trace, TracePod

GIB = 1 << 30
CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=900.0)
# What a CPU_POOL node offers pods once the DaemonSet has its share.
FREE_CPU = CPU_POOL.cpu_milli - 100


def trace(*pods: TracePod, name: str = "tiny") -> Trace:
    return Trace(name, "<test>", tuple(sorted(pods, key=lambda p: (p.at, p.job))), "hand-made")


def pod(at: float, duration: float, cpu: int, memory_gib: float = 1, *, job: str = "", gpus: int = 0) -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=round(memory_gib * 1024) << 20, gpus=gpus, job=job)


def burst(jobs: int = 12, seed_jobs: int = 0) -> Trace:
    """Waves of jobs of mixed shapes and lengths: enough to make every policy scale up and down."""
    pods = []
    for j in range(jobs):
        for k in range(6):
            pods.append(pod(at=300.0 * j, duration=(120, 600, 1200)[(j + k) % 3], cpu=(500, 2000, 4000)[(j * k + seed_jobs) % 3],
                            memory_gib=(1, 4)[k % 2], job=f"j{j}"))
    return trace(*pods, name="burst")


# -- the oracle ----------------------------------------------------------------------------


def test_oracle_is_the_hand_computed_lower_bound() -> None:
    # Two half-node pods fill one node for 10 minutes; a whole-node pod needs a second one for the last 5.
    tiny = trace(pod(0, 600, FREE_CPU // 2), pod(0, 600, FREE_CPU // 2), pod(300, 300, FREE_CPU))
    oracle = replay(tiny, "oracle", CONFIG).result
    assert oracle["node_seconds"] == pytest.approx(600 + 300)
    assert oracle["cost"] == pytest.approx(900 * CPU_POOL.price_per_hour / 3600, abs=1e-4)
    for policy in ("ours", "ca", "vmss-cpu", "static"):
        run = replay(tiny, policy, CONFIG).result
        assert run["node_seconds"] >= oracle["node_seconds"], policy
        assert run["cost_vs_oracle"] >= 1.0, policy


def test_demand_takes_the_scarcest_resource_per_pool() -> None:
    pods = [pod(0, 100, 1000, memory_gib=27.5), pod(0, 100, 1000, gpus=1, memory_gib=8)]
    curve = demand_curve(pods, (CPU_POOL, GPU_POOL_2))
    memory_nodes = 27.5 * 1024 / (CPU_POOL.memory_mib - 128)
    assert curve.nodes["cpu-d16"][0] == pytest.approx(memory_nodes)  # memory, not CPU, is what it fills
    assert curve.nodes["gpu-nc48"][0] == pytest.approx(0.5)  # one GPU of two
    assert curve.node_seconds("cpu-d16", until=1000) == pytest.approx(100 * memory_nodes)


# -- determinism ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["ours", "ca", "vmss-cpu"])
def test_same_seed_same_numbers(policy: str) -> None:
    first = replay(burst(), policy, CONFIG)
    second = replay(burst(), policy, CONFIG)
    assert first.result == second.result
    assert first.series == second.series


def test_the_seed_changes_boot_delays_and_so_the_numbers() -> None:
    results = {replay(burst(), "ours", replace(CONFIG, seed=seed)).result["node_seconds"] for seed in (1, 2, 3)}
    assert len(results) > 1


# -- each policy's documented rule -----------------------------------------------------------


def _two_half_idle_nodes() -> Trace:
    """Two nodes end up each holding one long Job pod at about a third of a node: either pod fits beside the other.

    The sandbox scheduler packs (MostAllocated), so fillers steer the long pods apart; the fillers end after 10 minutes.
    """
    return trace(
        pod(0, 3600, 5000, job="long-a"),
        pod(1, 600, 11000, job="filler-a"),
        pod(2, 600, 10000, job="filler-b"),
        pod(3, 3600, 4000, job="long-b"),
    )


def _run(policy_type: type, tr: Trace, *, initial: dict[str, int]) -> tuple[Replay, dict]:
    world = build_world(tr, CONFIG, initial=initial)
    run = Replay(world, CONFIG)
    policy = policy_type(run) if policy_type is not Static else Static()
    run.run(policy)
    return run, run_result(world, CONFIG.pools, scale_actions=policy.scale_actions(), oracle_cost=1.0,
                           removed=getattr(policy, "removed_nodes", None))


def test_ca_evicts_a_job_pod_to_remove_an_underused_node_and_ours_waits_for_it() -> None:
    tr = _two_half_idle_nodes()
    ca_run, ca = _run(ClusterAutoscaler, tr, initial={"cpu-d16": 2})
    assert ca["pods_killed"] >= 1 and ca["work_lost_s"] > 0
    assert sum(ca_run.world.counters.instances_deleted.values()) >= 1  # the drained node went
    # Its drain is a voluntary disruption, counted by CA's own kind of removal, every pod it stopped with it.
    assert ca["disruptions"]["nodes"] >= 1 and ca["disruptions_per_day"] > 0
    assert ca["disruptions"]["pods"] == ca["pods_killed"]
    assert set(ca["disruptions"]["by_reason"]) <= {"drain", "empty"}

    ours_run, ours = _run(Ours, tr, initial={"cpu-d16": 2})
    assert ours["pods_killed"] == 0 and ours["work_lost_s"] == 0
    assert ours["disruptions"]["nodes"] == 0 and ours["disruptions_per_day"] == 0  # removed empty, once done
    assert ours["pods_completed"] == 4
    # Ours still removed both nodes, each once its Job had finished.
    assert sum(ours_run.world.counters.instances_deleted.values()) == 2


def test_ours_notes_each_node_its_scale_downs_name_with_their_removal_kind() -> None:
    world = build_world(_two_half_idle_nodes(), CONFIG, initial={"cpu-d16": 2})
    run = Replay(world, CONFIG)
    ours = Ours(run)
    run.run(ours)
    # Both nodes went, each named by a ScaleDown of a planner kind; none while its Job ran, so no disruption.
    assert len(ours.removed_nodes) >= 2 and set(ours.removed_nodes.values()) <= {"empty", "batch", "drain", "unready"}
    result = run_result(world, CONFIG.pools, scale_actions=ours.scale_actions(), oracle_cost=1.0,
                        removed=ours.removed_nodes)
    assert result["disruptions"]["nodes"] == 0


def test_ca_keeps_idle_nodes_for_its_fixed_ten_minutes_whatever_our_default() -> None:
    """cluster-autoscaler has no break-even idle mode: its emulation runs fixed, on CPU and GPU groups alike."""
    from shared.engine.scale_down import group_rules

    run = Replay(build_world(_two_half_idle_nodes(), CONFIG, initial={"cpu-d16": 2}), CONFIG)
    ca = ClusterAutoscaler(run)
    for group in run.compute.list_node_groups():
        rules = group_rules(group, ca._down_options)
        assert (rules.idle_mode, rules.unneeded_time, rules.after_add) == ("fixed", timedelta(minutes=10),
                                                                          timedelta(minutes=10))


def test_vmss_cpu_removes_the_highest_instance_id_without_draining() -> None:
    # Memory keeps one pod per node, so CPU stays far below 30% and every node runs a pod.
    tr = trace(*(pod(i, 3600, 1000, memory_gib=50, job=f"j{i}") for i in range(3)))
    run, result = _run(VmssCpuAutoscale, tr, initial={"cpu-d16": 3})
    deleted = run.world.counters.instances_deleted
    first = next(iter(deleted))
    assert first.endswith("/2")  # the newest of instances 0, 1, 2
    assert result["pods_killed"] >= 1  # its pod was killed, not evicted first
    assert all(k.rsplit("/", 1)[1] != "0" for k in deleted)  # the profile's minimum of one stays


def test_static_never_changes_capacity() -> None:
    tr = burst(jobs=4)
    out = replay(tr, "static", CONFIG)
    assert out.result["scale_actions"] == 0 and out.result["arm_writes"] == 0
    assert len(set(out.series["nodes"])) == 1  # the same count all along
    peak = max(out.demand["nodes"])
    assert out.series["nodes"][0] == math.ceil(peak - 1e-9)


def test_ours_keeps_running_pods_and_completes_the_trace() -> None:
    out = replay(burst(), "ours", CONFIG)
    assert out.result["pods_killed"] == 0
    assert out.result["pods_completed"] == out.result["pods"] == 72
    assert out.result["scale_actions"] >= 2  # grew, then shrank
    assert out.series["nodes"][-1] == 0  # back to the pool's minimum once the work is done


def test_unknown_policy_and_unplaceable_pods_are_named() -> None:
    with pytest.raises(ValueError, match="unknown policy 'karpenter'"):
        replay(burst(jobs=1), "karpenter", CONFIG)
    huge = trace(pod(0, 60, 200_000))
    with pytest.raises(ValueError, match="no pod fits any pool"):
        replay(huge, "ours", CONFIG)
