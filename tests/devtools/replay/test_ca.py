"""The `ca` emulation keeps each behaviour its module documents, read against cluster-autoscaler's source.

Small hand-made worlds, driven loop by loop; each test records what the emulation asked of Azure and the
cluster and checks it against the documented rule (buffers, one group per loop, the expander's choice,
budgets for deletions in flight, the delays, the caches' TTLs, the provisioning backoff, one drain at a time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from devtools.replay.harness import Replay, ReplayConfig, build_world
from devtools.replay.policies import ca as ca_module
from devtools.replay.policies.ca import (
    CA_SETTINGS,
    GROUPS_TTL,
    INSTANCES_TTL,
    MAX_NODE_PROVISION_TIME,
    NEW_GPU_POD_BUFFER,
    NEW_POD_BUFFER,
    SCAN_INTERVAL,
    ClusterAutoscaler,
)
from devtools.replay.pools import CPU_POOL, CPU_POOL_LARGE, GPU_POOL_2
from devtools.replay.traces import Trace, TracePod
from shared.domain import TO_BE_DELETED_TAINT
from shared.ports import ClusterError

CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=3600.0)
UNNEEDED = timedelta(minutes=10)  # CA's --scale-down-unneeded-time
AFTER_ADD = timedelta(minutes=10)
AFTER_FAILURE = timedelta(minutes=3)
INITIAL_BACKOFF = timedelta(minutes=5)


def trace(*pods: TracePod) -> Trace:
    return Trace("ca", "<test>", tuple(sorted(pods, key=lambda p: (p.at, p.job))), "hand-made")


def pod(at: float, duration: float, cpu: int, memory_gib: float = 1, *, job: str = "", gpus: int = 0) -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=round(memory_gib * 1024) << 20, gpus=gpus,
                    job=job)


@dataclass
class Log:
    """What the emulation did, with the sim time of each call."""

    resizes: list[tuple[datetime, str, int]] = field(default_factory=list)  # (when, group name, capacity)
    deletes: list[tuple[datetime, str, int]] = field(default_factory=list)  # (when, group name, instances)
    group_lists: list[datetime] = field(default_factory=list)
    instance_lists: list[tuple[datetime, str]] = field(default_factory=list)
    max_drains: int = 0
    wakes: list[datetime] = field(default_factory=list)
    drains_before: dict[datetime, int] = field(default_factory=dict)  # wake -> drains in flight as it began

    def resizes_per_wake(self) -> dict[datetime, int]:
        counts: dict[datetime, int] = {}
        for when, _, _ in self.resizes:
            counts[when] = counts.get(when, 0) + 1
        return counts

    def deleted_per_wake(self) -> dict[datetime, int]:
        counts: dict[datetime, int] = {}
        for when, _, n in self.deletes:
            counts[when] = counts.get(when, 0) + n
        return counts


def _name(group: Any) -> str:
    return group.id.rsplit("/", 1)[-1]


def drive(tr: Trace, *, config: ReplayConfig = CONFIG, initial: Mapping[str, int] | None = None,
          settings: Mapping[str, str] | None = None, until_s: float | None = None,
          setup: Any = None) -> tuple[Replay, ClusterAutoscaler, Log]:
    """Run `ca` over the trace's world, recording every call that changes or lists Azure's scale sets."""
    world = build_world(tr, config, initial=initial)
    run = Replay(world, config)
    log = Log()
    compute = run.compute
    resize, delete = compute.begin_resize, compute.begin_delete_instances
    list_groups, list_instances = compute.list_node_groups, compute.list_instances

    def begin_resize(group: Any, capacity: int) -> Any:
        op = resize(group, capacity)  # recorded only once Azure accepted it
        log.resizes.append((world.now, _name(group), capacity))
        return op

    def begin_delete_instances(group: Any, ids: list[str]) -> Any:
        op = delete(group, ids)
        log.deletes.append((world.now, _name(group), len(ids)))
        return op

    def list_node_groups() -> Any:
        log.group_lists.append(world.now)
        return list_groups()

    def list_group_instances(group: Any, **kwargs: Any) -> Any:
        log.instance_lists.append((world.now, _name(group)))
        return list_instances(group, **kwargs)

    compute.begin_resize, compute.begin_delete_instances = begin_resize, begin_delete_instances  # type: ignore[method-assign]
    compute.list_node_groups, compute.list_instances = list_node_groups, list_group_instances  # type: ignore[method-assign]
    if setup is not None:
        setup(run)
    ca = ClusterAutoscaler(run, settings={**CA_SETTINGS, **(settings or {})})
    end = world.end if until_s is None else min(world.end, world.start + timedelta(seconds=until_s))
    while world.now < end:
        wakeup = ca.next_wakeup(world.now)
        if wakeup > end:
            break
        world.advance(wakeup)
        log.drains_before[world.now] = len(ca._drains)
        ca.wake(world.now)
        log.wakes.append(world.now)
        log.max_drains = max(log.max_drains, len(ca._drains))
    return run, ca, log


def seconds(run: Replay, when: datetime) -> float:
    return (when - run.world.start).total_seconds()


# -- scale-up ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpus", "buffer"), [(0, NEW_POD_BUFFER), (1, NEW_GPU_POD_BUFFER)])
@pytest.mark.parametrize("arrival", [1.0, 9.0, 25.0])
def test_new_pods_wait_out_their_buffer_before_a_scale_up(gpus: int, buffer: timedelta, arrival: float) -> None:
    """CA's unschedulablePodTimeBuffer (2 s) and unschedulablePodWithGpuTimeBuffer (30 s): the first scale-up is
    in the first loop after the oldest pending pod reached the buffer's age, never before."""
    config = replace(CONFIG, pools=(CPU_POOL, GPU_POOL_2))
    run, _, log = drive(trace(pod(arrival, 300, 1000, gpus=gpus, job="p")), config=config, until_s=arrival + 120)
    assert log.resizes, "the pod never triggered a scale-up"
    first = seconds(run, log.resizes[0][0])
    assert first >= arrival + buffer.total_seconds()
    assert first < arrival + buffer.total_seconds() + 2 * SCAN_INTERVAL.total_seconds()


def test_one_group_grows_per_loop_and_it_is_the_expanders_choice() -> None:
    """Pending pods for two groups at once: CA carries out the expander's one best option per loop. The
    least-waste option (the D16 for a 15-core pod) goes first though the D48's scale set is listed (and named)
    first; the D48, the only group that holds the 40-core pod, follows in a later loop."""
    small, big = replace(CPU_POOL, name="z-small"), replace(CPU_POOL_LARGE, name="a-big")
    config = replace(CONFIG, pools=(big, small))
    tr = trace(pod(0, 600, 15_000, job="small"), pod(0, 600, 40_000, job="big"))
    run, _, log = drive(tr, config=config, until_s=120)
    assert all(count == 1 for count in log.resizes_per_wake().values())
    assert [name for _, name, _ in log.resizes[:2]] == [small.name, big.name]
    assert log.resizes[1][0] > log.resizes[0][0]


def test_the_expander_choice_is_the_plans_first_new_node() -> None:
    from shared.engine.scale_up import ScaleUpPlan, ScaleUpSimulation, SimulationStep

    def step(kind: str, group: str | None, placed: bool) -> SimulationStep:
        return SimulationStep(kind, None, object() if placed else None, group)  # type: ignore[arg-type]

    cases = [
        ((), None),
        ((step("existing", None, True),), None),
        ((step("upcoming", "a", False), step("new", "b", False), step("new", "b", True), step("new", "a", False)), "b"),
        ((step("new", "c", False), step("new", "a", False)), "c"),
    ]
    for steps, expected in cases:
        assert ca_module.expander_choice(ScaleUpSimulation(ScaleUpPlan(), steps)) == expected


# -- scale-down ----------------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [3, 10])
def test_empty_nodes_go_in_bulk_within_the_parallelism_budget(parallelism: int) -> None:
    """14 idle nodes: after the unneeded time, each loop deletes at most MAX_SCALE_DOWN_PARALLELISM of them
    (empty deletions leave CA's tracker within the loop), in consecutive loops, until all are gone."""
    nodes = 14
    run, _, log = drive(trace(), initial={CPU_POOL.name: nodes},
                        settings={"MAX_SCALE_DOWN_PARALLELISM": str(parallelism)}, until_s=1200)
    per_wake = log.deleted_per_wake()
    assert sum(per_wake.values()) == nodes
    assert max(per_wake.values()) == min(parallelism, nodes)
    first = min(per_wake)
    assert first - run.world.start >= UNNEEDED
    # The default delay after a delete (the scan interval) lets the very next loop continue.
    waves = sorted(per_wake)
    assert all(b - a == SCAN_INTERVAL for a, b in zip(waves, waves[1:]))
    assert len(waves) == -(-nodes // parallelism)


@pytest.mark.parametrize("delay_s", [10, 60, 300])
def test_removals_wait_out_the_delay_after_a_delete(delay_s: int) -> None:
    """--scale-down-delay-after-delete: the next removal starts no sooner than this after the last one."""
    run, _, log = drive(trace(), initial={CPU_POOL.name: 4},
                        settings={"MAX_SCALE_DOWN_PARALLELISM": "1", "SCALE_DOWN_DELAY_AFTER_DELETE": f"{delay_s}s"},
                        until_s=600 + 4 * delay_s + 60)
    waves = sorted(log.deleted_per_wake())
    assert len(waves) == 4
    gaps = [(b - a).total_seconds() for a, b in zip(waves, waves[1:])]
    assert all(delay_s <= gap < delay_s + SCAN_INTERVAL.total_seconds() for gap in gaps), gaps


@pytest.mark.parametrize("after_add", [timedelta(minutes=2), AFTER_ADD])
def test_no_removal_within_the_delay_after_a_scale_up(after_add: timedelta) -> None:
    """--scale-down-delay-after-add: with a short unneeded time, the idle node added for a short pod is removed
    only once the delay after the scale-up is over."""
    settings = {"SCALE_DOWN_UNNEEDED_TIME": "1m", "SCALE_DOWN_DELAY_AFTER_ADD": f"{int(after_add.total_seconds())}s"}
    run, _, log = drive(trace(pod(0, 30, 1000, job="short")), settings=settings, until_s=1500)
    assert log.resizes and log.deletes
    last_up = log.resizes[-1][0]
    first_delete = log.deletes[0][0]
    assert first_delete - last_up >= after_add
    # Not held longer than the delay, the unneeded time and the boot allow.
    assert first_delete - last_up < after_add + timedelta(seconds=CONFIG.boot_max_s) + timedelta(minutes=2)


def test_a_failed_scale_down_holds_removals_for_the_delay_after_failure() -> None:
    """The actuator's synchronous failure (tainting) starts --scale-down-delay-after-failure (3 min)."""
    failures: list[datetime] = []

    def fail_first_taint(run: Replay) -> None:
        cordon = run.cluster.cordon

        def flaky(node_name: str, *, taint: Any) -> None:
            if not failures:
                failures.append(run.world.now)
                raise ClusterError("patch node: conflict", transient=True)
            cordon(node_name, taint=taint)

        run.cluster.cordon = flaky  # type: ignore[method-assign]

    run, _, log = drive(trace(), initial={CPU_POOL.name: 2}, until_s=1200, setup=fail_first_taint)
    assert failures and log.deletes
    assert log.deletes[0][0] - failures[0] >= AFTER_FAILURE
    assert log.deletes[0][0] - failures[0] < AFTER_FAILURE + 2 * SCAN_INTERVAL
    # Nothing was left tainted by the failed attempt: both nodes went.
    assert sum(n for _, _, n in log.deletes) == 2


def _two_half_idle_nodes() -> Trace:
    """Nodes each holding one long Job pod at about a third of a node: either pod fits beside the other."""
    return trace(
        pod(0, 3600, 5000, job="long-a"),
        pod(1, 600, 11000, job="filler-a"),
        pod(2, 600, 10000, job="filler-b"),
        pod(3, 3600, 4000, job="long-b"),
        pod(4, 600, 11000, job="filler-c"),
        pod(5, 3600, 3000, job="long-c"),
    )


def test_non_empty_nodes_are_drained_one_at_a_time() -> None:
    """--max-drain-parallelism=1: however many under-used nodes, at most one drain is in flight, and a drained
    node is deleted (its pods evicted first)."""
    run, _, log = drive(_two_half_idle_nodes(), initial={CPU_POOL.name: 3}, until_s=3000)
    assert log.max_drains == 1
    assert log.deletes, "no under-used node was drained"
    assert sum(run.world.counters.instances_deleted.values()) >= 1


# -- provisioning and caches ---------------------------------------------------------------------


def test_nodes_that_never_register_back_the_group_off() -> None:
    """--max-node-provision-time (15 min): CA gives the missing instances up, and the group is backed off (5 min)
    before it is asked to grow again."""
    slow = replace(CONFIG, boot_median_s=2400.0, boot_p95_s=2700.0, boot_max_s=3000.0)
    run, _, log = drive(trace(pod(0, 7200, 1000, job="p")), config=slow, until_s=2400)
    first_when, group, target = log.resizes[0]
    assert target >= 1
    give_up = next((r for r in log.resizes[1:] if r[2] < target), None)
    assert give_up is not None, "the unregistered nodes were never given up"
    assert give_up[0] - first_when >= MAX_NODE_PROVISION_TIME
    assert give_up[0] - first_when < MAX_NODE_PROVISION_TIME + 2 * SCAN_INTERVAL
    again = next((r for r in log.resizes if r[0] > give_up[0] and r[2] > give_up[2]), None)
    assert again is not None and again[0] - give_up[0] >= INITIAL_BACKOFF


def test_scale_sets_and_instances_are_listed_at_their_cache_ttls() -> None:
    """The provider's caches: scale sets listed every 60 s, each scale set's instances every 5 min."""
    run, _, log = drive(trace(pod(0, 300, 1000, job="p")), initial={CPU_POOL.name: 1}, until_s=1800)
    lists = log.group_lists
    assert len(lists) >= 1800 // GROUPS_TTL.total_seconds()
    assert all(b - a >= GROUPS_TTL for a, b in zip(lists, lists[1:]))
    instances = [when for when, name in log.instance_lists if name == CPU_POOL.name]
    assert len(instances) >= 1800 // INSTANCES_TTL.total_seconds()
    assert all(b - a >= INSTANCES_TTL for a, b in zip(instances, instances[1:]))
    # The loop itself runs every scan interval, far more often than either cache expires.
    assert all(b - a == SCAN_INTERVAL for a, b in zip(log.wakes, log.wakes[1:]))
