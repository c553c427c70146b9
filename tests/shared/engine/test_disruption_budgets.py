"""Disruption budgets: parsing, windows, the smallest budget winning, in-flight disruptions counted, lanes reading
their scale set's tag, and the plan filter (`apply_budgets`) and proposal admission (`admit`) built on them."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import (
    DISRUPTION_REASONS,
    DRIFTED,
    EMPTY,
    REPLACE,
    TO_BE_DELETED_TAINT,
    UNDERUTILIZED,
    GroupState,
    InstanceRef,
    Node,
    NodeGroup,
    Replacement,
    Taint,
)
from shared.engine import reasons
from shared.engine.disruption_budgets import (
    BUDGETS_TAG,
    Disrupting,
    admit,
    allowance,
    apply_budgets,
    limits,
    in_flight,
    parse_budgets,
    removal_reason,
    tag_problems,
)
from shared.engine.replacement import ReplacementProposal
from shared.engine.scale_down import Removal, ScaleDownPlan
from tests.builders import T0, group, node, snapshot

# --- parsing ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "field"), [
    ("reasons=Empty", "nodes"),
    ("nodes=ten", "nodes"),
    ("nodes=-1", "nodes"),
    ("nodes=150%", "nodes"),
    ("nodes=1&reasons=Evicted", "Evicted"),
    ("nodes=1&colour=red", "colour"),
    ("nodes=1&nodes=2", "nodes"),
    ("nodes=1&schedule=0 0 9 * * 1-5", "schedule"),
    ("nodes=1&duration=8h", "duration"),
    ("nodes=1&schedule=not a cron&duration=8h", "not a cron"),
    ("nodes=1&schedule=0 0 9 * * 1-5&duration=0s", "duration"),
])
def test_every_parse_error_names_the_budget_and_the_field(text: str, field: str) -> None:
    good = "nodes=5"
    with pytest.raises(ValueError) as caught:
        parse_budgets(f"{good}; {text}")
    message = str(caught.value)
    assert "budget 2" in message and repr(text) in message and field in message


@pytest.mark.parametrize(("percent", "nodes"), [(10, 1), (10, 9), (10, 10), (10, 11), (33, 7), (1, 250), (0, 40)])
def test_percentages_round_up(percent: int, nodes: int) -> None:
    (budget,) = parse_budgets(f"nodes={percent}%")
    assert budget.limit(nodes) == math.ceil(nodes * percent / 100)
    assert budget.limit(nodes) * 100 >= nodes * percent  # never below the share asked for
    assert percent == 0 or budget.limit(nodes) >= 1 or nodes == 0


# Monday 2026-11-23 is a weekday: business hours 09:00-17:00 UTC.
MONDAY = datetime(2026, 11, 23, tzinfo=timezone.utc)


@pytest.mark.parametrize(("at", "inside"), [
    (MONDAY + timedelta(hours=8, minutes=59), False),
    (MONDAY + timedelta(hours=9), True),
    (MONDAY + timedelta(hours=12), True),
    (MONDAY + timedelta(hours=16, minutes=59), True),
    (MONDAY + timedelta(hours=17), False),
    (MONDAY + timedelta(days=5, hours=12), False),  # Saturday
])
def test_a_scheduled_budget_applies_inside_its_window_only(at: datetime, inside: bool) -> None:
    (budget,) = parse_budgets("nodes=0&reasons=Replace,Drifted&schedule=0 0 9 * * 1-5&duration=8h")
    assert budget.active(at) is inside
    snap = snapshot(groups=[group(target=1)], nodes=[node("a")])
    got = allowance(REPLACE, group=None, snapshot=snap, cluster_budgets=(budget,), disrupting=(), now=at)
    assert got == (0 if inside else None)


# --- allowance ----------------------------------------------------------------------------------------------------


def _nodes(count: int, *, name: str = "pool", start: int = 0) -> list[Node]:
    return [node(f"{name}-{i}", group_name=name, instance=i) for i in range(start, start + count)]


def test_the_smallest_budget_wins_across_cluster_and_group() -> None:
    pool = group("pool", target=10, tags={BUDGETS_TAG: "nodes=3;nodes=50%&reasons=Drifted"})
    snap = snapshot(groups=[pool], nodes=_nodes(10))
    for cluster_text, reason in [("nodes=2", DRIFTED), ("nodes=20%", REPLACE), ("nodes=5", DRIFTED),
                                 ("nodes=1&reasons=Empty", EMPTY), ("nodes=1&reasons=Empty", REPLACE)]:
        cluster = parse_budgets(cluster_text)
        candidates = [b.limit(10) for b in (*cluster, *parse_budgets(pool.tags[BUDGETS_TAG])) if b.covers(reason)]
        got = allowance(reason, group=pool, snapshot=snap, cluster_budgets=cluster, disrupting=(), now=T0)
        assert got == min(candidates), (cluster_text, reason)


def test_empty_nodes_go_under_their_own_budget() -> None:
    snap = snapshot(groups=[group(target=4)], nodes=_nodes(4))
    budgets = parse_budgets("nodes=1&reasons=Empty;nodes=0&reasons=Underutilized,Replace,Drifted")
    busy = [Disrupting("pool-0", "rg/pool", UNDERUTILIZED)]
    assert allowance(EMPTY, group=None, snapshot=snap, cluster_budgets=budgets, disrupting=busy, now=T0) == 1
    empty = [Disrupting("pool-0", "rg/pool", EMPTY)]
    assert allowance(EMPTY, group=None, snapshot=snap, cluster_budgets=budgets, disrupting=empty, now=T0) == 0
    # The default setting budgets replacements and drift only: the scale-down we always did is unbudgeted.
    default = parse_budgets("nodes=10%&reasons=Replace,Drifted")
    for reason in (EMPTY, UNDERUTILIZED):
        assert allowance(reason, group=None, snapshot=snap, cluster_budgets=default, disrupting=(), now=T0) is None


def test_in_flight_counts_removals_deletions_and_replacements_once_each() -> None:
    deleting = replace(node("pool-3", instance=3), taints=(Taint(TO_BE_DELETED_TAINT, "1", "NoSchedule"),))
    snap = snapshot(groups=[group(target=5)], nodes=[*_nodes(3), deleting, node("pool-4", instance=4)])
    entry = Replacement("pool-1", DRIFTED, "rg/pool", T0)
    states = {"rg/pool": GroupState("rg/pool", removing={"pool-0": "a1", "pool-1": "a2"},
                                    replacing={"pool-1": entry, "pool-2": replace(entry, node="pool-2", reason=REPLACE)})}
    found = {d.node: d.reason for d in in_flight(snap, states)}
    assert found == {"pool-0": UNDERUTILIZED, "pool-1": DRIFTED, "pool-2": REPLACE, "pool-3": UNDERUTILIZED}
    budget = parse_budgets("nodes=3&reasons=Drifted,Underutilized")
    covered = sum(1 for reason in found.values() if reason in (DRIFTED, UNDERUTILIZED))
    got = allowance(DRIFTED, group=None, snapshot=snap, cluster_budgets=budget, disrupting=in_flight(snap, states),
                    now=T0)
    assert got == max(0, 3 - covered)


def test_a_given_up_replacement_is_no_disruption_in_flight() -> None:
    snap = snapshot(groups=[group(target=3)], nodes=_nodes(3))
    tombstone = Replacement("pool-1", DRIFTED, "rg/pool", T0, given_up_at=T0 + timedelta(minutes=30))
    under_way = Replacement("pool-2", DRIFTED, "rg/pool", T0)
    states = {"rg/pool": GroupState("rg/pool", removing={"pool-0": "a1"},
                                    replacing={"pool-0": replace(tombstone, node="pool-0"), "pool-1": tombstone,
                                               "pool-2": under_way})}
    found = {d.node: d.reason for d in in_flight(snap, states)}
    # pool-1 only waits out its back-off; pool-0's removal is ordinary scale-down, not its given-up replacement.
    assert found == {"pool-0": UNDERUTILIZED, "pool-2": DRIFTED}
    budget = parse_budgets("nodes=2&reasons=Drifted")
    assert allowance(DRIFTED, group=None, snapshot=snap, cluster_budgets=budget, disrupting=in_flight(snap, states),
                     now=T0) == 1


def _lane(size: str, *, count: int, tags: dict[str, str]) -> NodeGroup:
    return replace(group("mix", target=count, tags=tags), lane=size, vm_size=size, lanes=("D4", "D8"))


def _lane_node(name: str, size: str, index: int) -> Node:
    return replace(node(name, group_name="mix", instance=index), mapped=True,
                   mapped_to=InstanceRef("", "rg", "mix", str(index), lane=size))


def test_a_lane_reads_its_sets_tag_and_counts_the_sets_nodes() -> None:
    tags = {BUDGETS_TAG: "nodes=50%"}
    small, big = _lane("D4", count=3, tags=tags), _lane("D8", count=1, tags=tags)
    nodes = [_lane_node(f"s{i}", "D4", i) for i in range(3)] + [_lane_node("b0", "D8", 3), *_nodes(4, name="other")]
    snap = snapshot(groups=[small, big, group("other", target=4)], nodes=nodes)
    assert small.id != big.id and small.parent_id == big.parent_id
    # 50 % of the set's 4 nodes (both lanes), not of one lane's, nor of the cluster's 8.
    assert allowance(DRIFTED, group=big, snapshot=snap, cluster_budgets=(), disrupting=(), now=T0) == 2
    # A disruption in one lane counts against the other lane's share of the set.
    one = [Disrupting("s0", small.id, DRIFTED)]
    assert allowance(DRIFTED, group=big, snapshot=snap, cluster_budgets=(), disrupting=one, now=T0) == 1
    # Another set's disruptions do not.
    other = [Disrupting("other-0", "rg/other", DRIFTED), Disrupting("other-1", "rg/other", DRIFTED)]
    assert allowance(DRIFTED, group=big, snapshot=snap, cluster_budgets=(), disrupting=other, now=T0) == 2


def test_a_tag_that_does_not_parse_is_reported_and_holds_its_groups_disruptions() -> None:
    bad = group("bad", target=2, tags={BUDGETS_TAG: "nodes=lots"})
    snap = snapshot(groups=[bad, group("good", target=1)], nodes=[*_nodes(2, name="bad"), *_nodes(1, name="good")])
    problems = tag_problems(snap.groups)
    assert set(problems) == {"rg/bad"} and "nodes=" in problems["rg/bad"] and BUDGETS_TAG in problems["rg/bad"]
    for reason in DISRUPTION_REASONS:
        assert allowance(reason, group=bad, snapshot=snap, cluster_budgets=(), disrupting=(), now=T0) == 0
    plan = ScaleDownPlan(removals=(_removal("bad-0", "rg/bad", "empty"), _removal("good-0", "rg/good", "empty")))
    result = apply_budgets(plan, snap, {}, (), T0)  # never raises
    assert [r.node for r in result.removals] == ["good-0"]
    assert result.kept["bad-0"].code == reasons.DISRUPTION_BUDGET and "nodes=" in result.kept["bad-0"]


# --- the scale-down plan ------------------------------------------------------------------------------------------


def _removal(name: str, gid: str = "rg/pool", kind: str = "drain", reason: str = "") -> Removal:
    return Removal(name, gid, "", T0, kind, 0.1, timedelta(hours=1), reason=reason)


@pytest.mark.parametrize(("kind", "reason", "expected"), [
    ("empty", "", EMPTY), ("drain", "", UNDERUTILIZED), ("batch", "", UNDERUTILIZED), ("unready", "", ""),
    ("drain", DRIFTED, DRIFTED), ("empty", REPLACE, REPLACE),
])
def test_removal_reason(kind: str, reason: str, expected: str) -> None:
    assert removal_reason(_removal("n", kind=kind, reason=reason)) == expected


def test_apply_budgets_keeps_what_the_budget_does_not_allow_and_names_it() -> None:
    snap = snapshot(groups=[group(target=6)], nodes=_nodes(6))
    plan = ScaleDownPlan(removals=tuple(_removal(f"pool-{i}", kind="empty") for i in range(4))
                         + (_removal("pool-4", kind="unready"),))
    result = apply_budgets(plan, snap, {}, parse_budgets("nodes=2&reasons=Empty"), T0)
    assert [r.node for r in result.removals] == ["pool-0", "pool-1", "pool-4"]  # plan order; unready unbudgeted
    assert {n: k.code for n, k in result.kept.items()} == {"pool-2": reasons.DISRUPTION_BUDGET,
                                                             "pool-3": reasons.DISRUPTION_BUDGET}
    assert "nodes=2&reasons=Empty" in result.kept["pool-2"]
    # Without a budget for the reason the plan is the same object: nothing changes for clusters that set none.
    assert apply_budgets(plan, snap, {}, parse_budgets("nodes=10%&reasons=Replace,Drifted"), T0) is plan


def test_the_forced_drain_of_an_admitted_replacement_is_not_counted_twice() -> None:
    snap = snapshot(groups=[group(target=3)], nodes=_nodes(3))
    states = {"rg/pool": GroupState("rg/pool", replacing={"pool-0": Replacement("pool-0", DRIFTED, "rg/pool", T0)})}
    plan = ScaleDownPlan(removals=(_removal("pool-0", reason=DRIFTED), _removal("pool-1", reason=DRIFTED)))
    result = apply_budgets(plan, snap, states, parse_budgets("nodes=1&reasons=Drifted"), T0)
    assert [r.node for r in result.removals] == ["pool-0"] and result.kept["pool-1"].code == reasons.DISRUPTION_BUDGET


# --- admission of replacement proposals ---------------------------------------------------------------------------


def test_admit_is_all_or_nothing_per_proposal() -> None:
    snap = snapshot(groups=[group(target=5)], nodes=_nodes(5))
    three = ReplacementProposal(tuple((f"pool-{i}", "rg/pool") for i in range(3)), REPLACE, "rg/pool", 1)
    one = ReplacementProposal((("pool-3", "rg/pool"),), REPLACE, "rg/pool", 1)
    admitted, refused = admit([three, one], snap, {}, parse_budgets("nodes=2&reasons=Replace"), T0)
    assert admitted == (one,)
    assert set(refused) == {"pool-0", "pool-1", "pool-2"} and all("nodes=2" in why for why in refused.values())


# --- properties -----------------------------------------------------------------------------------------------------

_budget_text = st.builds(
    lambda nodes, reasons_: f"nodes={nodes}" + (f"&reasons={','.join(reasons_)}" if reasons_ else ""),
    st.one_of(st.integers(0, 6).map(str), st.integers(0, 100).map(lambda p: f"{p}%")),
    st.lists(st.sampled_from(DISRUPTION_REASONS), unique=True, max_size=3))


@settings(max_examples=150, deadline=None)
@given(cluster=st.lists(_budget_text, max_size=3), tag=st.lists(_budget_text, max_size=2),
       kinds=st.lists(st.tuples(st.sampled_from(("empty", "drain", "batch", "unready")),
                                st.sampled_from(("", REPLACE, DRIFTED))), min_size=1, max_size=12),
       busy=st.lists(st.sampled_from(DISRUPTION_REASONS), max_size=4))
def test_admitted_removals_per_reason_never_exceed_the_allowance(cluster: list[str], tag: list[str],
                                                                 kinds: list[tuple[str, str]], busy: list[str]) -> None:
    size = len(kinds) + len(busy)
    pool = group(target=size, tags={BUDGETS_TAG: ";".join(tag)} if tag else {})
    snap = snapshot(groups=[pool], nodes=_nodes(size))
    states = {"rg/pool": GroupState("rg/pool", replacing={
        f"pool-{len(kinds) + i}": Replacement(f"pool-{len(kinds) + i}", reason, "rg/pool", T0)
        for i, reason in enumerate(busy)})}
    budgets = parse_budgets(";".join(cluster))
    plan = ScaleDownPlan(removals=tuple(_removal(f"pool-{i}", kind=k, reason=r) for i, (k, r) in enumerate(kinds)))
    result = apply_budgets(plan, snap, states, budgets, T0)
    assert {r.node for r in result.removals} | set(result.kept) == {r.node for r in plan.removals}
    before = in_flight(snap, states)
    for reason in DISRUPTION_REASONS:
        allowed = allowance(reason, group=pool, snapshot=snap, cluster_budgets=budgets, disrupting=before, now=T0)
        taken = sum(1 for r in result.removals if removal_reason(r) == reason)
        assert allowed is None or taken <= allowed, reason
    # And no active budget counts more disruptions than its limit, unless it did before this plan.
    after = (*before, *(Disrupting(r.node, r.group_id, removal_reason(r)) for r in result.removals
                        if removal_reason(r)))
    for reason in DISRUPTION_REASONS:
        then = limits(reason, group=pool, snapshot=snap, cluster_budgets=budgets, disrupting=before, now=T0)
        now = limits(reason, group=pool, snapshot=snap, cluster_budgets=budgets, disrupting=after, now=T0)
        for old, new in zip(then, now, strict=True):
            assert new.disrupting <= max(new.limit, old.disrupting), (reason, new)
