"""The scale-down candidate pool (issue 19): bounded simulation per plan, rotation, timers kept, no stale removal.

Also the placement state shared with the scale-up simulation, and pending pods checked once per
equivalence class.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

import pytest

from devtools.bench_scale import tick_cluster
from shared.domain import GroupState
from shared.engine import scale_up
from shared.engine.reasons import NOT_SIMULATED
from shared.engine.scale_down import ScaleDownOptions, ScaleDownPlan, plan_scale_down
from shared.engine.scale_up import existing_placements, initial_state, simulate_scale_up
from shared.settings import SettingsError, load_settings
from shared.options import scale_down_options
from tests.builders import T0, daemon_pod, group, node, pod, res, sel, snapshot, spread
from tests.shared.test_settings import REQUIRED

OLD = T0 - timedelta(minutes=30)


def cluster(light: int, empty: int = 0, *, pod_slots: int = 110):  # type: ignore[no-untyped-def]
    """`light` candidates with one small pod each, `empty` ones with only a DaemonSet pod, and a big busy node
    that can take every moved pod (it is no candidate). `pod_slots`: pods a light node may run."""
    nodes = [node(f"light-{i:02d}", instance=i, alloc=res(4, 16, pod_slots)) for i in range(light)]
    nodes += [node(f"empty-{i:02d}", instance=light + i) for i in range(empty)]
    nodes.append(node("sink", instance=light + empty, alloc=res(400, 1600, 1000)))
    pods = [pod(f"web-{i:02d}", node_name=f"light-{i:02d}", owner_name="web") for i in range(light)]
    pods += [daemon_pod(n.name) for n in nodes]
    pods.append(pod("busy", cpu=300, mem=1000, node_name="sink"))
    return snapshot(groups=[group(target=len(nodes), max_size=1000)], nodes=nodes, pods=pods)


def options(min_count: int, ratio: float = 0.01, **kw: object) -> ScaleDownOptions:
    return ScaleDownOptions(candidates_pool_ratio=ratio, candidates_pool_min_count=min_count,
                            **kw)  # type: ignore[arg-type]


def simulated_now(result: ScaleDownPlan, now=T0) -> set[str]:  # type: ignore[no-untyped-def]
    return {name for name, at in result.simulated_at.items() if at == now}


def not_simulated(result: ScaleDownPlan) -> set[str]:
    return {name for name, reason in result.kept.items() if reason.code == NOT_SIMULATED}


@pytest.mark.parametrize(
    "light,empty,ratio,min_count,pool",
    [
        (12, 0, 0.01, 5, 5),  # the minimum count rules a small cluster
        (12, 3, 0.01, 5, 5),  # empty candidates are always simulated, outside the bound
        (30, 2, 0.2, 3, 7),  # ceil(0.2 x 33 nodes) = 7 beats the minimum
        (4, 0, 0.01, 5, 4),  # fewer candidates than the pool: all simulated
    ],
)
def test_pool_bound(light: int, empty: int, ratio: float, min_count: int, pool: int) -> None:
    snap = cluster(light, empty)
    opts = options(min_count, ratio)
    assert opts.pool_size(len(snap.nodes)) == max(math.ceil(ratio * len(snap.nodes)), min_count)
    result = plan_scale_down(snap, unneeded_since={}, group_states={}, now=T0, options=opts, simulated_at={})
    simulated = simulated_now(result)
    assert len({n for n in simulated if n.startswith("light")}) == pool
    assert {n for n in simulated if n.startswith("empty")} == {f"empty-{i:02d}" for i in range(empty)}
    assert not_simulated(result) == {f"light-{i:02d}" for i in range(light)} - simulated
    assert set(result.unneeded) == simulated  # only a fresh verdict makes a node unneeded


def test_without_rotation_every_candidate_is_simulated() -> None:
    snap = cluster(12, 2)
    result = plan_scale_down(snap, unneeded_since={}, group_states={}, now=T0, options=options(2))
    assert len(result.unneeded) == 14 and not not_simulated(result) and result.simulated_at == {}


def test_timers_of_unsimulated_nodes_are_kept_and_never_acted_on() -> None:
    snap = cluster(8)
    since = {f"light-{i:02d}": OLD - timedelta(minutes=i) for i in range(8)}  # all unneeded and due
    result = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=options(4),
                             simulated_at={})
    left_out = not_simulated(result)
    assert len(left_out) == 4
    for name in left_out:
        assert result.unneeded[name] == since[name]  # the clock runs on
        assert "removable only once simulated again" in result.kept[name]
    removed = {r.node for r in result.removals}
    assert removed and removed <= simulated_now(result) and not removed & left_out


def test_no_removal_on_a_stale_verdict() -> None:
    """A node unneeded before whose pods can no longer move must not go on its old verdict: not simulated, it stays;
    simulated, it is found needed and its timer ends."""
    snap = cluster(6, pod_slots=2)  # a DaemonSet pod and its replica: a light node takes no other pod
    full = replace(snap, pods=snap.pods + (pod("filler", cpu=99, mem=590, node_name="sink"),))  # the sink is full
    since = {f"light-{i:02d}": OLD for i in range(6)}
    opts = options(2)
    first = plan_scale_down(full, unneeded_since=since, group_states={}, now=T0, options=opts, simulated_at={})
    assert first.removals == ()
    for name in not_simulated(first):
        assert first.unneeded[name] == OLD
    for name in simulated_now(first):
        assert name not in first.unneeded
    # Ticks later, every node has had its fresh verdict: none is unneeded any more, none was removed.
    result, rotation, unneeded = first, dict(first.simulated_at), dict(first.unneeded)
    for tick in range(1, 3):
        now = T0 + timedelta(minutes=tick)
        result = plan_scale_down(full, unneeded_since=unneeded, group_states={}, now=now, options=opts,
                                 simulated_at=rotation)
        assert result.removals == ()
        rotation, unneeded = dict(result.simulated_at), dict(result.unneeded)
    assert unneeded == {}


@pytest.mark.parametrize("light,min_count", [(12, 5), (10, 5), (9, 2), (7, 7)])
def test_rotation_simulates_every_candidate_within_ceil_n_over_pool_plans(light: int, min_count: int) -> None:
    snap = cluster(light)
    opts = options(min_count, unneeded_time=timedelta(hours=1))  # nobody due: the rotation alone decides
    rotation: dict = {}
    unneeded: dict = {}
    seen: set[str] = set()
    for tick in range(math.ceil(light / min_count)):
        now = T0 + timedelta(minutes=tick)
        result = plan_scale_down(snap, unneeded_since=unneeded, group_states={}, now=now, options=opts,
                                 simulated_at=rotation)
        fresh = simulated_now(result, now)
        assert len(fresh) == min(min_count, light)
        if len(seen) + min_count <= light:
            assert not fresh & seen  # never simulated first
        seen |= fresh
        rotation, unneeded = dict(result.simulated_at), dict(result.unneeded)
        assert set(rotation) == seen  # the simulated candidates, no other node
    assert seen == {f"light-{i:02d}" for i in range(light)}
    # Every candidate found unneeded has its clock, started on its first verdict.
    assert set(unneeded) == seen


def test_due_nodes_come_first_but_take_at_most_half_the_pool() -> None:
    """Nodes whose unneeded time is over need a fresh verdict to go now, even if simulated a minute ago; but a group
    at its minimum would keep them due forever, so the other half of the pool keeps rotating."""
    snap = cluster(10)
    due = {f"light-{i:02d}" for i in range(5)}
    since = {name: OLD for name in due}
    recently = {name: T0 - timedelta(minutes=1) for name in due}  # the others were never simulated
    result = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=options(4),
                             simulated_at=recently)
    fresh = simulated_now(result)
    assert len(fresh) == 4 and len(fresh & due) == 2


@pytest.mark.parametrize("light,empty", [(6, 2), (15, 0)])
def test_a_pool_covering_every_candidate_plans_as_before(light: int, empty: int) -> None:
    snap = cluster(light, empty)
    since = {f"light-{i:02d}": OLD for i in range(0, light, 2)}
    opts = options(light)
    before = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=opts)
    pooled = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=opts, simulated_at={})
    assert (pooled.unneeded, pooled.removals, pooled.kept) == (before.unneeded, before.removals, before.kept)


def test_a_pool_covering_every_candidate_plans_as_before_on_the_bench_cluster() -> None:
    snap = tick_cluster(120)
    since = {n.name: OLD for n in snap.nodes[::3]}
    states = {g.id: GroupState(g.id) for g in snap.groups}
    opts = ScaleDownOptions(candidates_pool_ratio=1.0)
    before = plan_scale_down(snap, unneeded_since=since, group_states=states, now=T0, options=opts)
    pooled = plan_scale_down(snap, unneeded_since=since, group_states=states, now=T0, options=opts, simulated_at={})
    assert before.removals and (pooled.unneeded, pooled.removals, dict(pooled.kept)) == (
        before.unneeded, before.removals, dict(before.kept))


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"candidates_pool_ratio": 0.0}, "candidates_pool_ratio must be above 0 and at most 1"),
        ({"candidates_pool_ratio": 1.5}, "candidates_pool_ratio must be above 0 and at most 1"),
        ({"candidates_pool_min_count": 0}, "candidates_pool_min_count must be at least 1"),
    ],
)
def test_options_refuse_a_pool_that_simulates_nothing(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScaleDownOptions(**kw)


@pytest.mark.parametrize(
    "env,problem",
    [
        ({"SCALE_DOWN_CANDIDATES_POOL_RATIO": "0"}, "SCALE_DOWN_CANDIDATES_POOL_RATIO"),
        ({"SCALE_DOWN_CANDIDATES_POOL_RATIO": "10%"}, "SCALE_DOWN_CANDIDATES_POOL_RATIO"),
        ({"SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT": "0"}, "SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT"),
    ],
)
def test_settings_refuse_a_bad_pool(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_settings({**REQUIRED, **env})


def test_settings_reach_the_options() -> None:
    settings = load_settings({**REQUIRED, "SCALE_DOWN_CANDIDATES_POOL_RATIO": "0.25",
                              "SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT": "7"})
    opts = scale_down_options(settings)
    assert (opts.candidates_pool_ratio, opts.candidates_pool_min_count) == (0.25, 7)
    defaults = scale_down_options(load_settings(REQUIRED))
    assert (defaults.candidates_pool_ratio, defaults.candidates_pool_min_count) == (0.1, 50)  # CA's defaults


# --- one placement state for both simulations ------------------------------------------------------


def shared_state_cluster():  # type: ignore[no-untyped-def]
    """Pending pods that fit existing nodes (so the scale-up simulation places some), spread and anti-affinity."""
    zones = ("1", "2", "3")
    nodes = [node(f"n{i}", instance=i, zone=zones[i % 3]) for i in range(6)]
    web = sel(app="web")
    pods = [pod(f"web-{i}", node_name=f"n{i % 4}", labels={"app": "web"}, owner_name="web",
                spread=(spread("topology.kubernetes.io/zone", web),)) for i in range(5)]
    pods += [pod(f"db-{i}", cpu=2.5, node_name=f"n{i}", labels={"app": "db"}, owner_name="db") for i in range(2)]
    pods += [pod(f"wait-{i}", pending=True, labels={"app": "web"}, owner_name="web",
                 spread=(spread("topology.kubernetes.io/zone", web),)) for i in range(3)]
    pods.append(pod("huge", cpu=64, pending=True))
    return snapshot(groups=[group(target=6, min_size=1)], nodes=nodes, pods=pods)


def test_scale_up_simulation_leaves_a_shared_state_as_found() -> None:
    snap = shared_state_cluster()
    state = initial_state(snap)
    own = simulate_scale_up(snap)
    shared = simulate_scale_up(snap, state=state)
    assert shared == own and existing_placements(shared)
    fresh = initial_state(snap)
    assert state.checkpoint() == 0 and set(state.nodes) == set(fresh.nodes)
    for name in fresh.nodes:
        assert list(state.pods_on(name)) == list(fresh.pods_on(name))
        assert state.requested(name) == fresh.requested(name)


@pytest.mark.parametrize("snap_factory", [shared_state_cluster, lambda: tick_cluster(90)])
def test_scale_down_on_the_shared_state_plans_as_on_its_own(snap_factory) -> None:  # type: ignore[no-untyped-def]
    snap = snap_factory()
    since = {n.name: OLD for n in snap.nodes}
    states = {g.id: GroupState(g.id) for g in snap.groups}
    alone = plan_scale_down(snap, unneeded_since=since, group_states=states, now=T0,
                            pending_placements=existing_placements(simulate_scale_up(snap)))
    state = initial_state(snap)
    placements = existing_placements(simulate_scale_up(snap, state=state))
    shared = plan_scale_down(snap, unneeded_since=since, group_states=states, now=T0, state=state,
                             pending_placements=placements)
    inside = plan_scale_down(snap, unneeded_since=since, group_states=states, now=T0)  # builds one, shares it
    for other in (shared, inside):
        assert (other.unneeded, other.removals, dict(other.kept)) == (alone.unneeded, alone.removals, dict(alone.kept))


# --- pending pods: one check per equivalence class -------------------------------------------------


def test_pending_replicas_are_checked_against_the_nodes_once_per_class(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Scale-down keeps nodes for pending pods through the scale-up simulation, which groups them by equivalence:
    a hundred replicas that fit no node cost the node scan of one."""
    calls = []
    real = scale_up.static_mismatch

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(scale_up, "static_mismatch", counting)
    counts = []
    for replicas in (1, 100):
        base = cluster(10)
        pending = tuple(pod(f"big-{r}", cpu=3, pending=True, owner_name="big", selector={"disk": "ssd"})
                        for r in range(replicas))
        snap = replace(base, pods=base.pods + pending)
        calls.clear()
        plan_scale_down(snap, unneeded_since={}, group_states={}, now=T0)
        counts.append(len(calls))
    assert counts[0] > 0 and counts[1] == counts[0]
