from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import GroupState, NodeGroup, Resources
from shared.engine import reasons
from shared.engine.expanders import ExpansionOption
from shared.engine.multi_size import (
    cheapest_prefix,
    choose_lanes,
    clip_increases,
    clip_removals,
    cost_per_work,
    set_headroom,
    set_minimum,
    work_units,
)
from shared.engine.scale_down import Removal, ScaleDownPlan
from shared.engine.scale_up import GroupIncrease, ScaleUpPlan
from tests.builders import T0, group, pod, res, template

SIZES = ("Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5", "Standard_D32s_v5")


def lanes_of(counts: dict[str, int], *, set_min: int = 0, set_max: int = 20, name: str = "mix",
             strategy: str = "LowestPrice", order: tuple[str, ...] | None = None) -> list[NodeGroup]:
    """The lanes a provider lists for one multi-size set holding `counts` instances per size (design33 A)."""
    total = sum(counts.values())
    lanes = order or tuple(counts)
    out = []
    for size, capacity in counts.items():
        others = total - capacity
        base = group(name, target=capacity, vm_size=size)
        out.append(NodeGroup(base.resource_group, base.name, max(0, set_min - others), max(capacity, set_max - others),
                             capacity, size, lane=size, lanes=lanes, allocation_strategy=strategy,
                             location=base.location))
    return out


def option(lane: NodeGroup, *, nodes: int = 1, price: float | None = None, req: Resources | None = None,
           pods: int = 1) -> ExpansionOption:
    return ExpansionOption.build(lane, template(res(4, 16)), nodes, [pod(f"{lane.id}-p{i}") for i in range(pods)],
                                 requested=req if req is not None else res(1, 1), price_per_hour=price)


# --- choose_lanes -------------------------------------------------------------------------------

def _two(strategy: str) -> list[NodeGroup]:
    return lanes_of({SIZES[0]: 0, SIZES[2]: 0}, strategy=strategy, order=(SIZES[2], SIZES[0]))


CHOOSE_CASES = [
    # (id, options builder, the lanes expected to survive, by size)
    ("lowest price per work wins",
     lambda: [option(_two("LowestPrice")[0], price=0.1, req=res(2, 8)), option(_two("LowestPrice")[1], price=0.4,
                                                                               req=res(2, 8))],
     {SIZES[0]}),
    ("cheaper per work although dearer per node",
     lambda: [option(_two("")[0], nodes=4, price=0.1, req=res(7, 28)), option(_two("")[1], nodes=1, price=0.35,
                                                                          req=res(7, 28))],
     {SIZES[2]}),
    ("prioritized: rank first whatever the price",
     lambda: [option(_two("Prioritized")[0], price=0.01), option(_two("Prioritized")[1], price=9.0)],
     {SIZES[2]}),
    ("prioritized compares case-insensitively",
     lambda: [option(_two("prioritized")[0], price=0.01), option(_two("prioritized")[1], price=9.0)],
     {SIZES[2]}),
    ("capacity-optimized is priced as lowest-price",
     lambda: [option(_two("CapacityOptimized")[0], price=0.1), option(_two("CapacityOptimized")[1], price=0.2)],
     {SIZES[0]}),
    ("unknown price ranks last",
     lambda: [option(_two("LowestPrice")[0], price=None), option(_two("LowestPrice")[1], price=5.0)],
     {SIZES[2]}),
    ("equal cost: the option placing more work (a cut big-size option against small nodes for every pod)",
     lambda: [option(_two("LowestPrice")[0], nodes=3, price=0.1, req=res(3, 0)),
              option(_two("LowestPrice")[1], nodes=1, price=0.2, req=res(2, 0))],
     {SIZES[0]}),
    ("equal cost: fewer nodes",
     lambda: [option(_two("LowestPrice")[0], nodes=2, price=0.1), option(_two("LowestPrice")[1], nodes=1, price=0.2)],
     {SIZES[2]}),
    ("equal cost and nodes: lanes order",
     lambda: [option(_two("LowestPrice")[0], price=0.1), option(_two("LowestPrice")[1], price=0.1)],
     {SIZES[2]}),
    ("no price anywhere: lanes order",
     lambda: [option(_two("")[0]), option(_two("")[1])],
     {SIZES[2]}),
]


@pytest.mark.parametrize("case_id,build,expected", CHOOSE_CASES, ids=[c[0] for c in CHOOSE_CASES])
def test_choose_lanes_keeps_one_lane_per_set(case_id, build, expected) -> None:
    options = build()
    survivors = choose_lanes(options)
    assert {o.group.lane for o in survivors} == expected
    assert len(survivors) == 1


def test_one_size_groups_and_lone_lanes_pass_unchanged_in_order() -> None:
    plain = [option(group("a"), price=1.0), option(group("b"), price=0.1)]
    lone = option(lanes_of({SIZES[1]: 0})[0], price=3.0)
    options = [plain[0], lone, plain[1]]
    assert choose_lanes(options) == options


def test_lanes_of_different_sets_compete_separately() -> None:
    first = lanes_of({SIZES[0]: 0, SIZES[1]: 0}, name="a")
    second = lanes_of({SIZES[0]: 0, SIZES[1]: 0}, name="b")
    options = [option(first[0], price=0.2), option(first[1], price=0.1), option(second[0], price=0.1),
               option(second[1], price=0.2), option(group("plain"), price=9.0)]
    survivors = choose_lanes(options)
    assert [o.group.id for o in survivors] == [first[1].id, second[0].id, group("plain").id]


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.one_of(st.none(), st.floats(0.01, 5)),
                          st.integers(1, 5)), min_size=1, max_size=12),
       st.sampled_from(["LowestPrice", "Prioritized", "CapacityOptimized", ""]))
@settings(max_examples=150, deadline=None)
def test_choose_lanes_properties(specs, strategy) -> None:
    """At most one option per set survives, every one-size option survives, and a set with options keeps one."""
    sets = {i: lanes_of({s: 0 for s in SIZES}, name=f"s{i}", strategy=strategy) for i in range(2)}
    options = [option(sets[s][size] if s < 2 else group(f"plain{size}"), price=price, nodes=nodes)
               for s, size, price, nodes in specs]
    survivors = choose_lanes(options)
    parents = [o.group.parent_id for o in survivors if o.group.lane]
    assert len(parents) == len(set(parents))
    assert {o.group.parent_id for o in options if o.group.lane} == set(parents)
    assert [o for o in options if not o.group.lane] == [o for o in survivors if not o.group.lane]
    assert all(any(o is s for o in options) for s in survivors)


def test_work_units_weigh_memory_per_4_gib_and_gpus_as_8_cores() -> None:
    assert work_units(res(2, 8)) == 4
    assert work_units(res(1, 0, gpu=1)) == 9
    assert work_units(res(0, 0, ext={"amd.com/gpu": 2})) == 16


def test_cost_per_work_counts_nodes_and_at_least_one_unit() -> None:
    lane = lanes_of({SIZES[0]: 0})[0]
    assert cost_per_work(option(lane, nodes=2, price=0.5, req=res(4, 0))) == pytest.approx(0.25)
    assert cost_per_work(option(lane, price=0.5, req=Resources())) == pytest.approx(0.5)
    assert cost_per_work(option(lane, price=None)) is None


@pytest.mark.parametrize("work,expected", [
    ([28, 1], 1),          # a big pod's node, then a node opened for one small pod: cut the small one
    ([4, 4, 4], 3),        # evenly used nodes: keep them all
    ([4, 4, 0.5], 2),
    ([1, 8], 2),           # a poorly used first node is no reason to stop before a well used one
    ([0, 0], 1),           # no measurable work counts as one unit: one node a round
], ids=["big-then-small", "even", "tail", "better-later", "no-work"])
def test_cheapest_prefix_keeps_the_nodes_that_place_work_cheapest(work, expected) -> None:
    node_work = [Fraction(w) for w in work]
    keep = cheapest_prefix(0.5, node_work)
    assert keep == expected
    ratio = lambda k: Fraction(0.5) * k / max(sum(node_work[:k]), Fraction(1))  # noqa: E731
    assert all(ratio(keep) <= ratio(k) for k in range(1, len(work) + 1))


# --- the set's min and max read back from its lanes -------------------------------------------------

@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.integers(0, 30), st.integers(0, 30))
def test_set_headroom_and_minimum_read_back_the_sets_own(counts, set_min, set_max) -> None:
    set_min, set_max = min(set_min, set_max), max(set_min, set_max)
    lanes = lanes_of(dict(zip(SIZES, counts)), set_min=set_min, set_max=set_max)
    total = sum(counts)
    assert set_headroom(lanes) == max(0, set_max - total)
    floor = set_minimum(lanes)
    assert floor >= set_min or floor >= total  # never lower than the set's min: removals stay safe
    if any(g.min_size > 0 for g in lanes):
        assert floor == set_min


# --- clip_increases -----------------------------------------------------------------------------

def _increase(lane: NodeGroup, delta: int, pods: int) -> GroupIncrease:
    return GroupIncrease(lane.id, lane.running_target, lane.running_target + delta,
                         tuple(f"{lane.lane}-p{i}" for i in range(pods)))


def test_clip_increases_trims_the_last_lane_first_and_reports_its_pods() -> None:
    lanes = lanes_of({SIZES[0]: 2, SIZES[1]: 1}, set_max=6)  # 3 more allowed across both
    plan = ScaleUpPlan(increases=(_increase(lanes[0], 2, 4), _increase(lanes[1], 3, 3)))
    clipped = clip_increases(plan, lanes)
    assert [(i.group_id, i.delta) for i in clipped.increases] == [(lanes[0].id, 2), (lanes[1].id, 1)]
    assert len(clipped.increases[1].pods) == 1
    assert set(clipped.unplaceable) == {"Standard_D4s_v5-p1", "Standard_D4s_v5-p2"}
    assert all("rg/mix at its max size" in why for why in clipped.unplaceable.values())


def test_clip_increases_leaves_one_size_groups_and_plans_within_the_max_alone() -> None:
    lanes = lanes_of({SIZES[0]: 1, SIZES[1]: 1}, set_max=10)
    plain = group("plain", target=1, max_size=2)
    plan = ScaleUpPlan(increases=(_increase(lanes[0], 3, 3), _increase(lanes[1], 5, 5),
                                  GroupIncrease(plain.id, 1, 9, ("x",))))
    assert clip_increases(plan, [*lanes, plain]) is plan


@given(st.lists(st.integers(0, 5), min_size=2, max_size=5), st.lists(st.integers(0, 6), min_size=5, max_size=5),
       st.integers(0, 25))
@settings(max_examples=200, deadline=None)
def test_clip_increases_never_passes_the_sets_max(counts, deltas, set_max) -> None:
    lanes = lanes_of(dict(zip(SIZES, counts)), set_max=set_max)
    plan = ScaleUpPlan(increases=tuple(_increase(lane, d, d) for lane, d in zip(lanes, deltas) if d))
    clipped = clip_increases(plan, lanes)
    total = sum(counts)
    assert sum(i.delta for i in clipped.increases) <= max(0, set_max - total)
    assert all(i.delta > 0 for i in clipped.increases)
    pods_before = {p for i in plan.increases for p in i.pods}
    pods_after = {p for i in clipped.increases for p in i.pods} | set(clipped.unplaceable)
    assert pods_before == pods_after  # every pod is either still asked for or reported
    if sum(i.delta for i in plan.increases) <= max(0, set_max - total):
        assert clipped == plan


# --- clip_removals ------------------------------------------------------------------------------

def _removal(lane: NodeGroup, index: int) -> Removal:
    return Removal(node=f"{lane.lane}-{index}", group_id=lane.id, provider_id="", unneeded_since=T0, kind="empty",
                   utilization=0.0, node_age=timedelta(hours=1))


def test_clip_removals_keeps_what_would_pass_the_sets_min() -> None:
    lanes = lanes_of({SIZES[0]: 3, SIZES[1]: 2}, set_min=3)  # 2 may go
    plan = ScaleDownPlan(removals=(_removal(lanes[0], 0), _removal(lanes[1], 0), _removal(lanes[0], 1)))
    clipped = clip_removals(plan, lanes)
    assert [r.node for r in clipped.removals] == [plan.removals[0].node, plan.removals[1].node]
    kept = clipped.kept[plan.removals[2].node]
    assert kept.code == reasons.NODE_GROUP_MIN_SIZE_REACHED and "rg/mix" in kept


def test_clip_removals_counts_removals_in_flight() -> None:
    lanes = lanes_of({SIZES[0]: 3, SIZES[1]: 2}, set_min=3)
    states = {lanes[1].id: GroupState(lanes[1].id, removing={"busy": T0})}
    plan = ScaleDownPlan(removals=(_removal(lanes[0], 0), _removal(lanes[0], 1)))
    assert [r.node for r in clip_removals(plan, lanes, states=states).removals] == [plan.removals[0].node]


def test_clip_removals_leaves_one_size_groups_alone() -> None:
    plain = group("plain", target=1, min_size=1)
    plan = ScaleDownPlan(removals=(_removal(plain, 0),))
    assert clip_removals(plan, [plain]) is plan


@given(st.lists(st.integers(0, 5), min_size=2, max_size=5), st.lists(st.integers(0, 5), min_size=5, max_size=5),
       st.integers(0, 25))
@settings(max_examples=200, deadline=None)
def test_clip_removals_never_takes_the_set_below_its_min(counts, removed, set_min) -> None:
    lanes = lanes_of(dict(zip(SIZES, counts)), set_min=set_min, set_max=30)
    plan = ScaleDownPlan(removals=tuple(_removal(lane, i) for lane, r in zip(lanes, removed) for i in range(min(r, lane.capacity))))
    clipped = clip_removals(plan, lanes)
    total = sum(counts)
    assert total - len(clipped.removals) >= min(set_min, total)
    assert len(clipped.removals) + len(set(clipped.kept) - set(plan.kept)) == len(plan.removals)
    assert set_minimum(lanes) >= set_min or set_minimum(lanes) >= total
