"""Scale-up onto a multi-size set planned as lanes: one NodeGroup per VM size, sharing the set's max."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import NodeGroup
from shared.engine.expanders import ExpansionOption
from shared.engine.multi_size import cost_per_work
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from tests.builders import group, pod, res, snapshot, template

SMALL, BIG = "Standard_D2s_v5", "Standard_D16s_v5"
# Per node-hour (USD), the shape of Azure's list prices: the big size costs 8x the small one per node.
PRICES = {SMALL: 0.096, BIG: 0.768}
ALLOCATABLE = {SMALL: res(1.9, 5.5, 110), BIG: res(15.8, 58, 110)}


def lanes(*, strategy: str = "LowestPrice", order: tuple[str, ...] = (SMALL, BIG), set_max: int = 10,
          counts: dict[str, int] | None = None) -> list[NodeGroup]:
    counts = counts or {SMALL: 0, BIG: 0}
    total = sum(counts.values())
    base = group("mix", target=0)
    return [NodeGroup(base.resource_group, "mix", 0, max(counts[size], set_max - (total - counts[size])), counts[size],
                      size, lane=size, lanes=order, allocation_strategy=strategy, location=base.location)
            for size in (SMALL, BIG)]


def two_lanes(pods: list, *, expander: tuple[str, ...] = ("least-waste",), **kw: object):
    groups = lanes(**kw)  # type: ignore[arg-type]
    snap = snapshot(groups=groups, pods=pods, templates={g.id: template(ALLOCATABLE[g.lane]) for g in groups})
    snap = replace(snap, prices={g.id: PRICES[g.lane] for g in groups})
    return snap, {g.lane: g.id for g in groups}, ScaleUpOptions(expander=expander)


@pytest.mark.parametrize("expander", [("least-waste",), ("most-pods",), ("price",), ("random",)])
def test_a_small_pod_goes_to_the_cheap_small_lane_and_a_big_pod_to_the_big_lane(expander) -> None:
    """The big pod fills a big node, so the small one needs a node of its own: the small size's is cheaper."""
    snap, ids, options = two_lanes([pod("small", pending=True, cpu=1, mem=2), pod("big", pending=True, cpu=15, mem=54)],
                                   expander=expander)
    plan = plan_scale_up(snap, options=options)
    by_group = {i.group_id: set(i.pods) for i in plan.increases}
    assert by_group == {ids[SMALL]: {"default/small"}, ids[BIG]: {"default/big"}}
    assert not plan.unplaceable


def test_a_small_pod_that_fits_beside_a_big_one_shares_its_node() -> None:
    """One big node holding both costs less than a big and a small node: the lane rule prices the whole option."""
    snap, ids, options = two_lanes([pod("small", pending=True, cpu=1, mem=2), pod("big", pending=True, cpu=12, mem=40)])
    plan = plan_scale_up(snap, options=options)
    assert [(i.group_id, i.delta, set(i.pods)) for i in plan.increases] == [(ids[BIG], 1, {"default/small", "default/big"})]


def test_many_small_pods_go_where_the_work_costs_least() -> None:
    """Fourteen one-core pods: seven small nodes cost less than one big node, so they take the small lane."""
    snap, ids, options = two_lanes([pod(f"p{i}", pending=True, cpu=0.9, mem=2) for i in range(14)])
    plan = plan_scale_up(snap, options=options)
    assert [i.group_id for i in plan.increases] == [ids[SMALL]]
    small = plan.increases[0]
    assert small.delta * PRICES[SMALL] < PRICES[BIG]  # the choice really is the cheaper one


def test_prioritized_set_uses_its_first_rank_whatever_the_price() -> None:
    snap, ids, options = two_lanes([pod("small", pending=True, cpu=1, mem=2)], strategy="Prioritized",
                                   order=(BIG, SMALL))
    plan = plan_scale_up(snap, options=options)
    assert [i.group_id for i in plan.increases] == [ids[BIG]]


def test_lanes_share_the_sets_max_within_one_plan() -> None:
    """The set holds at most 3: two lanes growing in the same plan stop there together; the rest is reported."""
    pods = [pod(f"s{i}", pending=True, cpu=1, mem=2) for i in range(2)] + \
           [pod(f"b{i}", pending=True, cpu=15, mem=54) for i in range(2)]
    snap, ids, options = two_lanes(pods, set_max=3)
    plan = plan_scale_up(snap, options=options)
    assert sum(i.delta for i in plan.increases) == 3
    assert len(plan.unplaceable) == 1
    assert "multi-size group rg/mix at its max size" in next(iter(plan.unplaceable.values()))


def test_the_choice_matches_the_cost_per_work_rule() -> None:
    """A pod that fits both: the lane chosen is the one with the lower cost per unit of work."""
    snap, ids, options = two_lanes([pod("mid", pending=True, cpu=1.5, mem=4)])
    plan = plan_scale_up(snap, options=options)
    costs = {size: cost_per_work(ExpansionOption.build(g, snap.templates[g.id], 1, [snap.pods[0]],
                                                       price_per_hour=PRICES[size]))
             for size, g in ((g.lane, g) for g in snap.groups)}
    cheapest = min(costs, key=lambda s: costs[s])  # type: ignore[arg-type, return-value]
    assert [i.group_id for i in plan.increases] == [ids[cheapest]]


def test_linear_prices_pods_one_per_small_node_rather_than_a_mid_size_cut_short() -> None:
    """Three pods that fit one per D2, two per D4: at prices linear in vCPUs a D4 holding two costs what two D2s do;
    the D2 option places more of the work at that cost, so all three go to D2s (no node of a mid size)."""
    sizes = (SMALL, "Standard_D4s_v5", BIG)
    price = {SMALL: 0.096, "Standard_D4s_v5": 0.192, BIG: 0.768}
    alloc = {SMALL: res(1.9, 5.5, 110), "Standard_D4s_v5": res(3.86, 13.8, 110), BIG: res(15.8, 58, 110)}
    base = group("mix", target=0)
    groups = [NodeGroup(base.resource_group, "mix", 0, 10, 0, s, lane=s, lanes=sizes, allocation_strategy="LowestPrice",
                        location=base.location) for s in sizes]
    snap = snapshot(groups=groups, pods=[pod(f"s{i}", pending=True, cpu=1.5, mem=3) for i in range(3)],
                    templates={g.id: template(alloc[g.lane]) for g in groups})
    plan = plan_scale_up(replace(snap, prices={g.id: price[g.lane] for g in groups}))
    assert [(i.group_id, i.delta) for i in plan.increases] == [(groups[0].id, 3)]


@given(st.lists(st.tuples(st.sampled_from([0.25, 0.5, 1, 1.5, 3, 6, 12, 15]), st.sampled_from([1, 2, 4])),
                min_size=1, max_size=25),
       st.integers(2, 12), st.sampled_from(["LowestPrice", "Prioritized", ""]))
@settings(max_examples=60, deadline=None)
def test_lane_plans_keep_the_engines_invariants(shapes, set_max, strategy) -> None:
    """Whatever the pods: the lanes never pass the set's max together, every pod is placed or reported, and reusing
    estimates between rounds changes nothing (as for one-size groups)."""
    pods = [pod(f"p{i}", pending=True, cpu=cpu, mem=cpu * per) for i, (cpu, per) in enumerate(shapes)]
    snap, _, options = two_lanes(pods, strategy=strategy, set_max=set_max)
    plan = plan_scale_up(snap, options=options)
    assert sum(i.delta for i in plan.increases) <= set_max
    placed = {p for i in plan.increases for p in i.pods} | set(plan.absorbed) | set(plan.unplaceable)
    assert placed == {p.key for p in pods}
    assert plan_scale_up(snap, options=replace(options, reuse_estimates=False)) == plan
