from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain import GroupState, Taint
from shared.engine.cooldowns import ScaleDownDelays, scale_down_blocked
from shared.engine.scale_down import ScaleDownOptions, plan_scale_down
from tests.builders import T0, daemon_pod, group, node, pod, snapshot

OLD = T0 - timedelta(minutes=11)
OPTS = ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=10)


def three_nodes(**group_kw: object) -> list:
    return [group(target=3, **group_kw)], [node(f"n{i}", instance=i) for i in range(3)]  # type: ignore[arg-type]


def plan(snap, since=None, states=None, options=OPTS):  # type: ignore[no-untyped-def]
    return plan_scale_down(snap, unneeded_since=since or {}, group_states=states or {}, now=T0, options=options)


def test_new_idle_node_becomes_unneeded_now() -> None:
    groups, nodes = three_nodes()
    result = plan(snapshot(groups=groups, nodes=nodes))
    assert result.unneeded == {"n0": T0, "n1": T0, "n2": T0}
    assert result.removals == ()


@pytest.mark.parametrize(
    "case_id,extra_pods,expected_removed",
    [
        ("only daemonset pods: removable", [daemon_pod("n0")], {"n0"}),
        ("a running replica keeps the node", [pod("web", node_name="n0")], set()),
        ("a finished pod does not", [pod("done", node_name="n0", phase="Succeeded")], {"n0"}),
        ("pending pod that fits keeps it", [pod("wait", pending=True)], set()),
        ("pending pod that fits nowhere here does not", [pod("huge", cpu=64, pending=True)], {"n0"}),
    ],
)
def test_idle_rules(case_id, extra_pods, expected_removed) -> None:  # type: ignore[no-untyped-def]
    groups = [group(target=2, min_size=1)]
    nodes = [node("n0"), node("n1", instance=1)]
    busy = [pod("keep", node_name="n1")]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=busy + extra_pods), since={"n0": OLD})
    assert {r.node for r in result.removals} == expected_removed


@pytest.mark.parametrize(
    "case_id,node_kw,reason_part",
    [
        ("annotation opt-out", {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}, "disabled"),
        ("not ready", {"ready": False}, "not ready"),
        ("cordoned by someone", {"cordoned": True}, "cordoned"),
        ("already being deleted", {"taints": (Taint("ToBeDeletedByClusterAutoscaler"),)}, "being deleted"),
    ],
)
def test_kept_with_reason(case_id, node_kw, reason_part) -> None:  # type: ignore[no-untyped-def]
    result = plan(snapshot(groups=[group(target=2)], nodes=[node("n0", **node_kw)]), since={"n0": OLD})
    assert result.removals == ()
    assert reason_part in result.kept["n0"]


def test_removal_waits_for_unneeded_time() -> None:
    groups, nodes = three_nodes()
    result = plan(snapshot(groups=groups, nodes=nodes), since={"n0": T0 - timedelta(minutes=9)})
    assert result.removals == ()
    assert "unneeded for 540s" in result.kept["n0"]


def test_never_below_min_and_oldest_unneeded_first() -> None:
    groups, nodes = three_nodes(min_size=1)
    since = {"n0": OLD, "n1": OLD - timedelta(minutes=5), "n2": OLD - timedelta(minutes=1)}
    result = plan(snapshot(groups=groups, nodes=nodes), since=since)
    assert [r.node for r in result.removals] == ["n1", "n2"]
    assert "minimum" in result.kept["n0"]


def test_in_flight_deletions_count_against_min_and_parallelism() -> None:
    groups, nodes = three_nodes(min_size=1)
    states = {"rg/pool": GroupState("rg/pool", deleting={"other": "action-1"})}
    result = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes}, states=states)
    assert len(result.removals) == 1
    limited = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes},
                   options=ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=1))
    assert len(limited.removals) == 1


def test_nodes_outside_discovered_groups_are_ignored() -> None:
    result = plan(snapshot(groups=[group("other", target=1)], nodes=[node("n0")]), since={"n0": OLD})
    assert result.unneeded == {} and result.removals == ()


@pytest.mark.parametrize(
    "case_id,state,blocked",
    [
        ("fresh group", GroupState("g"), None),
        ("just scaled up", GroupState("g", last_scale_up=T0 - timedelta(minutes=5)), "after-add"),
        ("scaled up long ago", GroupState("g", last_scale_up=T0 - timedelta(minutes=15)), None),
        ("recent failure", GroupState("g", last_failure=T0 - timedelta(minutes=1)), "after-failure"),
        ("delete delay zero", GroupState("g", last_scale_down=T0), None),
    ],
)
def test_cooldowns(case_id, state, blocked) -> None:  # type: ignore[no-untyped-def]
    reason = scale_down_blocked(state, now=T0, delays=ScaleDownDelays())
    assert (reason is None) if blocked is None else (blocked in reason)


def test_cooldown_keeps_node() -> None:
    groups, nodes = three_nodes()
    states = {"rg/pool": GroupState("rg/pool", last_scale_up=T0 - timedelta(minutes=1))}
    result = plan(snapshot(groups=groups, nodes=nodes), since={"n0": OLD}, states=states)
    assert result.removals == () and "after-add" in result.kept["n0"]
