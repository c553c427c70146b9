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
    FREQUENT_LOOPS_SETTING,
    GROUPS_TTL,
    INSTANCES_TTL,
    LOOP_DURATION,
    MAX_NODE_PROVISION_TIME,
    MAX_POD_CHANGE_AGE,
    NEW_GPU_POD_BUFFER,
    NEW_POD_BUFFER,
    SCAN_INTERVAL,
    WATCH_PROBE,
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
          setup: Any = None, arrivals: bool = True) -> tuple[Replay, ClusterAutoscaler, Log]:
    """Run `ca` over the trace's world, recording every call that changes or lists Azure's scale sets; `arrivals`:
    the emulation is given the trace's arrival times, as run.py may give them."""
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
    ca = ClusterAutoscaler(run, settings={**CA_SETTINGS, **(settings or {})},
                           arrivals=[p.at for p in tr.pods] if arrivals else ())
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


@pytest.mark.parametrize("frequent", [True, False])
@pytest.mark.parametrize("parallelism", [3, 10])
def test_empty_nodes_go_in_bulk_within_the_parallelism_budget(parallelism: int, frequent: bool) -> None:
    """14 idle nodes: after the unneeded time, each loop deletes at most MAX_SCALE_DOWN_PARALLELISM of them
    (empty deletions leave CA's tracker within the loop), in consecutive timed loops, until all are gone. With
    frequent loops, the two loops that follow a deletion at once are in the delay after it; the timer then runs
    from the second of them."""
    nodes = 14
    run, _, log = drive(trace(), initial={CPU_POOL.name: nodes}, until_s=1200, settings={
        "MAX_SCALE_DOWN_PARALLELISM": str(parallelism), FREQUENT_LOOPS_SETTING: str(frequent).lower()})
    per_wake = log.deleted_per_wake()
    assert sum(per_wake.values()) == nodes
    assert max(per_wake.values()) == min(parallelism, nodes)
    first = min(per_wake)
    assert first - run.world.start >= UNNEEDED
    # The default delay after a delete (the scan interval) lets the very next loop continue.
    waves = sorted(per_wake)
    gap = SCAN_INTERVAL + (2 * LOOP_DURATION if frequent else timedelta(0))
    assert all(b - a == gap for a, b in zip(waves, waves[1:]))
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
    run, ca, log = drive(trace(pod(0, 300, 1000, job="p")), initial={CPU_POOL.name: 1}, until_s=1800)
    lists = log.group_lists
    assert len(lists) >= 1800 // GROUPS_TTL.total_seconds()
    assert all(b - a >= GROUPS_TTL for a, b in zip(lists, lists[1:]))
    instances = [when for when, name in log.instance_lists if name == CPU_POOL.name]
    assert len(instances) >= 1800 // INSTANCES_TTL.total_seconds()
    assert all(b - a >= INSTANCES_TTL for a, b in zip(instances, instances[1:]))
    # The loop itself runs at least every scan interval, far more often than either cache expires.
    assert all(LOOP_DURATION <= b - a <= SCAN_INTERVAL for a, b in zip(ca.loops, ca.loops[1:]))


# -- the loop trigger (--frequent-loops-enabled) ---------------------------------------------------


def _after(run: Replay, loops: list[datetime], at: float) -> datetime:
    """The first loop at or after sim second `at`."""
    return next(when for when in loops if seconds(run, when) >= at)


FAST_BOOT = replace(CONFIG, boot_median_s=4.0, boot_p95_s=6.0, boot_max_s=8.0)
BIG = 15_000  # a whole D16 each: no node, upcoming or not, holds two


@pytest.mark.parametrize("arrivals", [True, False])
@pytest.mark.parametrize("late_s", [4.5, 7.0])
def test_a_new_unschedulable_pod_starts_a_loop_between_ticks(arrivals: bool, late_s: float) -> None:
    """After a productive loop (the scale-up for pod `a`, whose node comes up within seconds) and its two
    immediate successors, a pod nothing can hold starts a loop when it arrives, not at the next tick; that loop
    finds it too new, and a second such pod 2 s or more later starts the loop that scales up for both. Without
    the arrivals the watch sees each within WATCH_PROBE."""
    lag = 0.0 if arrivals else WATCH_PROBE.total_seconds()
    tr = trace(pod(0, 900, BIG, job="a"), pod(25, 900, BIG, job="b"), pod(25 + late_s, 900, BIG, job="c"))
    run, ca, log = drive(tr, config=FAST_BOOT, until_s=80, arrivals=arrivals)
    first_up = log.resizes[0][0]
    # The productive loop is followed at once by two loops (LoopTrigger.Wait(previousRun)), then the timer.
    after = [when for when in ca.loops if when > first_up][:3]
    assert [w - first_up for w in after[:2]] == [LOOP_DURATION, 2 * LOOP_DURATION]
    assert after[2] - after[1] == SCAN_INTERVAL or seconds(run, after[2]) >= 25
    # Pod b arrives between ticks: a loop starts then, without a resize (b is too new).
    b_loop = _after(run, ca.loops, 25)
    assert seconds(run, b_loop) - 25 <= lag + 0.01
    ticks = [first_up + 2 * LOOP_DURATION + k * SCAN_INTERVAL for k in range(10)]
    assert b_loop not in ticks
    assert not any(when == b_loop for when, _, _ in log.resizes)
    # Pod c, late_s after b, starts the loop that grows the scale set for b and c (b is old enough).
    c_loop = _after(run, ca.loops, 25 + late_s)
    grow = next(when for when, _, _ in log.resizes if when > b_loop)
    assert grow == c_loop
    assert seconds(run, grow) - (25 + late_s) <= lag + 0.01
    assert grow - b_loop < SCAN_INTERVAL
    assert log.resizes[-1][2] - log.resizes[0][2] == 2


@pytest.mark.parametrize("arrival_s", [13.5, 16.0, 19.5])
def test_a_new_pod_beside_older_pending_ones_is_scaled_up_for_at_once(arrival_s: float) -> None:
    """allPodsAreNew looks at every unschedulable pod: while pod `a` waits for its booting node, pod `b` starts a
    loop at its arrival and that loop grows the scale set for it, where the timer's loop would come later."""
    tr = trace(pod(0, 900, BIG, job="a"), pod(arrival_s, 900, BIG, job="b"))
    run, ca, log = drive(tr, until_s=60)
    assert len(log.resizes) == 2
    assert seconds(run, log.resizes[1][0]) == pytest.approx(arrival_s, abs=0.01)
    # With frequent loops off, the same scale-up waits for the next tick.
    off_run, _, off_log = drive(tr, settings={FREQUENT_LOOPS_SETTING: "false"}, until_s=60)
    grid = SCAN_INTERVAL.total_seconds()
    assert seconds(off_run, off_log.resizes[1][0]) == grid * (arrival_s // grid + 1)


def test_without_new_pods_an_unproductive_loop_waits_the_scan_interval() -> None:
    """Nothing to do (one pod fits the node there is, and is bound at once: no signal): loops come every scan
    interval, and none starts at the pod's arrival."""
    run, ca, _ = drive(trace(pod(33.5, 120, 1000, job="fits")), initial={CPU_POOL.name: 1}, until_s=300)
    assert ca.loops, "no loop ran"
    assert all(b - a == SCAN_INTERVAL for a, b in zip(ca.loops, ca.loops[1:]))
    assert seconds(run, ca.loops[0]) == SCAN_INTERVAL.total_seconds()


def test_a_pod_unschedulable_for_long_does_not_signal() -> None:
    """isRecentUnschedulablePod: an update to a pod whose condition changed more than maxPodChangeAge ago starts
    no loop. A GPU pod no group can take (its scale set is capped at 0) is updated by the scheduler when the node
    added for a CPU pod registers (its message counts the nodes); the loops stay on the timer all the same."""
    capped = replace(GPU_POOL_2, max_size=0)
    config = replace(CONFIG, pools=(CPU_POOL, capped))
    tr = trace(pod(0, 900, 1000, gpus=1, job="stuck"), pod(0, 900, 1000, job="cpu"))
    run, ca, log = drive(tr, config=config, until_s=400)
    assert [name for _, name, _ in log.resizes] == [CPU_POOL.name]
    registered = min(n.created_at for n in run.cluster.list_nodes())
    assert registered - run.world.start > MAX_POD_CHANGE_AGE + SCAN_INTERVAL
    settled = [w for w in ca.loops if w > log.resizes[0][0] + 2 * LOOP_DURATION]
    assert settled and any(w > registered for w in settled)
    assert all(b - a == SCAN_INTERVAL for a, b in zip(settled, settled[1:]))


@pytest.mark.parametrize("gap_s", [0.5, 3.0, 6.0])
def test_with_frequent_loops_off_loops_keep_the_tick(gap_s: float) -> None:
    """CA_FREQUENT_LOOPS=false: every loop on the scan interval's grid, whatever pods arrive or scale-ups happen;
    with it on, the same pods start loops off the grid."""
    tr = trace(pod(11.2, 600, 15_000, job="a"), pod(11.2 + gap_s, 600, 15_000, job="b"))
    off_run, off, off_log = drive(tr, settings={FREQUENT_LOOPS_SETTING: "false"}, until_s=120)
    grid = SCAN_INTERVAL.total_seconds()
    assert all(seconds(off_run, w) % grid == 0 for w in off.loops)
    assert [seconds(off_run, w) for w in off.loops] == [grid * k for k in range(1, len(off.loops) + 1)]
    assert off_log.resizes
    on_run, on, _ = drive(tr, until_s=120)
    assert any(seconds(on_run, w) % grid != 0 for w in on.loops)


@pytest.mark.parametrize(("raw", "frequent"), [(None, True), ("true", True), ("false", False), (" False ", False)])
def test_the_setting_turns_frequent_loops_on_and_off(raw: str | None, frequent: bool) -> None:
    settings = {} if raw is None else {FREQUENT_LOOPS_SETTING: raw}
    _, ca, _ = drive(trace(pod(5, 60, 15_000, job="a")), settings=settings, until_s=60)
    assert ca._frequent is frequent
    assert any("frequent-loops-enabled=" + str(frequent).lower() in a for a in ca.assumptions())


def test_a_malformed_setting_is_refused() -> None:
    with pytest.raises(ValueError, match=FREQUENT_LOOPS_SETTING):
        drive(trace(), settings={FREQUENT_LOOPS_SETTING: "sometimes"}, until_s=10)
