"""Forced scale-down candidates (ScaleDownOptions.forced): nodes whose replacement is Ready are removed at once,
whatever their utilisation, when their pods fit elsewhere and no batch pod runs on them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DRIFTED, REPLACE, GroupState
from shared.engine import reasons
from shared.engine.scale_down import BATCH_PODS_RUNNING, ScaleDownOptions, plan_scale_down
from tests.builders import T0, group, node, pod, res, snapshot

OPTS = ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=10)
GID = "rg/pool"


def _cluster(*, busy_cpu: float = 3, spare_cpu: float = 10, extra: tuple = ()):  # type: ignore[no-untyped-def]
    """`old` busy (3 of 4 cores by default); `spare`, too busy to be a candidate itself, has `spare_cpu` cores
    with 40 % of them free for the pods of `old`."""
    nodes = [node("old"), node("spare", instance=1, alloc=res(spare_cpu, 64, 110))]
    pods = [pod("web", cpu=busy_cpu, node_name="old"), pod("keep", cpu=spare_cpu * 0.6, node_name="spare"), *extra]
    return snapshot(groups=[group(target=2, max_size=5)], nodes=nodes, pods=pods)


def _plan(snap, *, forced=None, states=None, options=OPTS, measured=None):  # type: ignore[no-untyped-def]
    return plan_scale_down(snap, unneeded_since={}, group_states=states or {}, now=T0,
                           options=replace(options, forced=forced or {}), measured_cpu=measured)


@pytest.mark.parametrize("reason", [REPLACE, DRIFTED])
def test_a_busy_forced_node_is_removed_at_once_with_its_reason(reason: str) -> None:
    snap = _cluster()
    assert _plan(snap).removals == ()  # not forced: 75 % used, not a candidate
    removals = _plan(snap, forced={"old": reason}).removals
    assert [(r.node, r.reason, r.kind) for r in removals] == [("old", reason, "drain")]
    assert removals[0].move == ("default/web",)


def test_a_forced_node_whose_pods_fit_nowhere_stays() -> None:
    result = _plan(_cluster(spare_cpu=2), forced={"old": REPLACE})
    assert result.removals == ()
    assert result.kept["old"].code == reasons.NO_PLACE_TO_MOVE_PODS


def test_a_forced_node_running_batch_pods_waits_for_them() -> None:
    job = replace(pod("render", cpu=0.5, node_name="old", owner="Job"), started_at=T0 - timedelta(minutes=5))
    result = _plan(_cluster(extra=(job,)), forced={"old": DRIFTED})
    assert result.removals == ()
    assert result.kept["old"].code == BATCH_PODS_RUNNING


def test_a_forced_node_ignores_the_delay_after_a_scale_up_but_not_other_guard_rails() -> None:
    just_grown = {GID: GroupState(GID, last_scale_up=T0 - timedelta(minutes=1))}
    assert [r.node for r in _plan(_cluster(), forced={"old": REPLACE}, states=just_grown).removals] == ["old"]
    # An ordinary idle node of the same group waits out the delay.
    idle = _cluster(busy_cpu=0.1)
    kept = plan_scale_down(idle, unneeded_since={"old": T0 - timedelta(hours=1)}, group_states=just_grown, now=T0,
                           options=OPTS)
    assert kept.removals == () and kept.kept["old"].code == reasons.SCALE_DOWN_COOLDOWN
    # The group's minimum still holds.
    at_min = replace(_cluster(), groups=(group(target=2, min_size=2, max_size=5),))
    result = _plan(at_min, forced={"old": REPLACE})
    assert result.removals == () and result.kept["old"].code == reasons.NODE_GROUP_MIN_SIZE_REACHED


def test_measured_cpu_does_not_keep_a_forced_node() -> None:
    assert [r.node for r in _plan(_cluster(), forced={"old": REPLACE}, measured={"old": 0.95}).removals] == ["old"]


def test_a_forced_node_is_simulated_whatever_the_candidate_pool() -> None:
    # Pool of one: three idle nodes with pods compete for it, the forced node is simulated besides.
    nodes = [node(f"idle{i}", instance=i) for i in range(3)]
    nodes += [node("old", instance=3), node("spare", instance=4, alloc=res(32, 128, 110))]
    pods = [pod(f"p{i}", cpu=0.2, node_name=f"idle{i}") for i in range(3)] + [pod("web", cpu=3, node_name="old")]
    snap = snapshot(groups=[group(target=5, max_size=9)], nodes=nodes, pods=pods)
    options = replace(OPTS, candidates_pool_ratio=0.01, candidates_pool_min_count=1)
    result = plan_scale_down(snap, unneeded_since={}, group_states={}, now=T0, simulated_at={},
                             options=replace(options, forced={"old": REPLACE}))
    assert "old" in {r.node for r in result.removals}
    assert result.simulated_at["old"] == T0


def test_no_forced_node_no_change() -> None:
    snap = _cluster(busy_cpu=0.1)
    since = {"old": T0 - timedelta(hours=1)}
    plain = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=OPTS)
    assert plain == plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0,
                                    options=replace(OPTS, forced={}))
    assert all(r.reason == "" for r in plain.removals) and plain.removals
