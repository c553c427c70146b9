"""MAX_SCALE_DOWN_PARALLELISM slots (issue 14, items 3 and 4): held only by removals that drain now, given to
nodes removable at once before nodes that would only wait for batch pods, and shared by pools in turn."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared.domain import GroupState
from shared.engine import reasons
from shared.engine.scale_down import ScaleDownOptions, plan_scale_down
from tests.builders import T0, group, node, pod, snapshot

OLD = T0 - timedelta(minutes=11)


def _opts(parallelism: int) -> ScaleDownOptions:
    return ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=parallelism)


def _job(name: str, node_name: str) -> object:
    return pod(name, cpu=0.5, node_name=node_name, owner="Job")


def _plan(snap, states, parallelism):  # type: ignore[no-untyped-def]
    return plan_scale_down(snap, unneeded_since={n.name: OLD for n in snap.nodes}, group_states=states, now=T0,
                           options=_opts(parallelism))


def test_a_committed_delete_holds_no_slot() -> None:
    nodes = [node("gone", instance=0), node("idle", instance=1)]
    states = {"rg/pool": GroupState("rg/pool", removing={"gone": "a1"}, committed=frozenset({"gone"}))}
    result = _plan(snapshot(groups=[group(target=2)], nodes=nodes), states, parallelism=1)
    assert [r.node for r in result.removals] == ["idle"]


def test_a_removal_that_only_waits_for_batch_pods_holds_no_slot_but_one_that_evicts_does() -> None:
    nodes = [node("waiting", instance=0), node("idle", instance=1)]
    states = {"rg/pool": GroupState("rg/pool", removing={"waiting": "a1"})}
    waiting = _plan(snapshot(groups=[group(target=2)], nodes=nodes, pods=[_job("render", "waiting")]),
                    states, parallelism=1)
    assert [r.node for r in waiting.removals] == ["idle"]
    evicting = _plan(snapshot(groups=[group(target=2)], nodes=nodes, pods=[pod("web", cpu=0.5, node_name="waiting")]),
                     states, parallelism=1)
    assert evicting.removals == () and evicting.kept["idle"].code == reasons.MAX_PARALLELISM_REACHED


def test_a_batch_node_takes_no_slot_while_a_node_removable_at_once_is_turned_away() -> None:
    nodes = [node("empty-a", instance=0), node("empty-b", instance=1), node("batch", instance=2),
             node("spare", instance=3)]
    pods = [_job("render", "batch"), pod("keep", cpu=3, node_name="spare")]
    result = _plan(snapshot(groups=[group(target=4)], nodes=nodes, pods=pods), {}, parallelism=1)
    assert [r.node for r in result.removals] == ["empty-a"]
    assert result.kept["empty-b"].code == reasons.MAX_PARALLELISM_REACHED
    assert result.kept["batch"].code == reasons.MAX_PARALLELISM_REACHED and "batch" in str(result.kept["batch"])
    # With room for all, the batch node is taken too, last.
    roomy = _plan(snapshot(groups=[group(target=4)], nodes=nodes, pods=pods), {}, parallelism=5)
    assert [r.node for r in roomy.removals] == ["empty-a", "empty-b", "batch"]


def test_pools_take_turns_for_the_slots() -> None:
    # Pool "old" has the oldest nodes; sorted by age alone it would take every slot.
    old = [node(f"old-{i}", group_name="old", instance=i) for i in range(4)]
    new = [node(f"new-{i}", group_name="new", instance=i) for i in range(4)]
    old = [replace(n, created_at=T0 - timedelta(days=2)) for n in old]
    snap = snapshot(groups=[group("old", target=4), group("new", target=4)], nodes=old + new)
    result = _plan(snap, {}, parallelism=4)
    by_pool = [r.group_id for r in result.removals]
    assert by_pool.count("rg/old") == 2 and by_pool.count("rg/new") == 2
    assert by_pool[:2] in (["rg/old", "rg/new"], ["rg/new", "rg/old"])  # alternating, not one pool first



def test_a_pool_whose_removals_arm_throttles_gives_its_slots_to_the_others_until_then() -> None:
    old = [node(f"old-{i}", group_name="old", instance=i) for i in range(4)]
    new = [node(f"new-{i}", group_name="new", instance=i) for i in range(4)]
    snap = snapshot(groups=[group("old", target=4), group("new", target=4)], nodes=old + new)
    throttled = {"rg/old": GroupState("rg/old", throttled_until=T0 + timedelta(seconds=15))}
    during = _plan(snap, throttled, parallelism=4)
    assert [r.group_id for r in during.removals] == ["rg/new"] * 4  # all four slots
    assert {during.kept[n.name].code for n in old} == {reasons.ARM_THROTTLED}
    expired = {"rg/old": GroupState("rg/old", throttled_until=T0)}  # until is exclusive: the budget is back
    assert sorted({r.group_id for r in _plan(snap, expired, parallelism=4).removals}) == ["rg/new", "rg/old"]
