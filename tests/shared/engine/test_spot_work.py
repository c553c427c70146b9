"""Spot or on demand by the work (engine.spot_work): the break-even, the annotations, the planner's view of pods."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from shared.domain import SPOT, NodeGroup, Pod, Resources, SPOT_LABEL, SPOT_VALUE
from shared.engine.spot_work import (
    DEFAULT_PRICE_FRACTION,
    EXPECTED_RUNTIME_ANNOTATION,
    SPOT_ANNOTATION,
    SpotWorkRule,
    break_even,
    expected_loss,
    expected_runtime,
    parse_max_runtime,
    parse_rate,
    plan_spot_work,
    price_fraction,
)

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def pod(name: str, **annotations: str) -> Pod:
    return Pod("default", name, Resources(cpu_milli=1000), NOW, unschedulable=True, annotations=annotations)


def kept_off_spot(p: Pod) -> bool:
    """Every required node-affinity term keeps the pod off nodes labelled spot."""
    return bool(p.node_affinity) and all(
        any(r.key == SPOT_LABEL and r.operator == "NotIn" and SPOT_VALUE in r.values for r in t.match_expressions)
        for t in p.node_affinity)


@pytest.mark.parametrize("rate, fraction, cost", [(0.05, 0.2, 4.0), (0.15, 0.185, 4.0), (0.025, 0.1, 1.0)])
def test_at_the_break_even_the_expected_loss_equals_the_saving(rate: float, fraction: float, cost: float) -> None:
    limit = break_even(eviction_rate=rate, price_fraction=fraction, lost_work_cost=cost)
    hours = limit.total_seconds() / 3600
    loss_hours = expected_loss(limit, eviction_rate=rate).total_seconds() / 3600
    assert loss_hours * cost == pytest.approx((1 - fraction) * hours)


def test_break_even_falls_as_evictions_rise() -> None:
    limits = [break_even(eviction_rate=r, price_fraction=0.2, lost_work_cost=4) for r in (0.025, 0.05, 0.1, 0.2)]
    assert limits == sorted(limits, reverse=True)


@pytest.mark.parametrize("runtime_h, kept", [(1, False), (7.9, False), (8.1, True), (30, True)])
def test_pods_longer_than_the_limit_are_kept_off_spot(runtime_h: float, kept: bool) -> None:
    rule = SpotWorkRule(eviction_rate=0.05, lost_work_cost=4)  # limit 2 * 0.8 / 0.2 = 8 h at f = 0.2
    plan = plan_spot_work([pod("p", **{EXPECTED_RUNTIME_ANNOTATION: f"{runtime_h}h"})], rule, fraction=0.2)
    assert kept_off_spot(plan.pods[0]) is kept
    assert ("default/p" in plan.kept_off) is kept


@pytest.mark.parametrize("annotations, kept", [
    ({SPOT_ANNOTATION: "avoid"}, True),
    ({SPOT_ANNOTATION: "prefer", EXPECTED_RUNTIME_ANNOTATION: "100h"}, False),
    ({}, False),  # no estimate: left as spot-first plans it
    ({EXPECTED_RUNTIME_ANNOTATION: "soon"}, False),  # unreadable estimate: none
])
def test_annotations_say_what_the_user_wants(annotations: dict[str, str], kept: bool) -> None:
    plan = plan_spot_work([pod("p", **annotations)], SpotWorkRule(), fraction=0.2)
    assert kept_off_spot(plan.pods[0]) is kept


def test_off_keeps_only_what_the_user_asked_off_spot() -> None:
    rule = SpotWorkRule(enabled=False)
    pods = [pod("long", **{EXPECTED_RUNTIME_ANNOTATION: "100h"}), pod("avoid", **{SPOT_ANNOTATION: "avoid"})]
    plan = plan_spot_work(pods, rule, fraction=0.2)
    assert plan.limit is None
    assert [kept_off_spot(p) for p in plan.pods] == [False, True]


def test_a_fixed_limit_wins_over_the_break_even() -> None:
    rule = SpotWorkRule(max_runtime=timedelta(minutes=30))
    plan = plan_spot_work([pod("p", **{EXPECTED_RUNTIME_ANNOTATION: "45m"})], rule, fraction=0.2)
    assert plan.limit == timedelta(minutes=30) and kept_off_spot(plan.pods[0])


def test_bound_pods_are_never_changed() -> None:
    bound = Pod("default", "b", Resources(cpu_milli=1), NOW, node_name="n1", phase="Running",
                annotations={SPOT_ANNOTATION: "avoid"})
    plan = plan_spot_work([bound], SpotWorkRule(), fraction=0.2)
    assert plan.pods == (bound,) and not plan.kept_off


def test_price_fraction_compares_spot_groups_with_on_demand_groups_of_their_size() -> None:
    groups = [NodeGroup("rg", "d16", 0, 10, 0, "Standard_D16s_v5"),
              NodeGroup("rg", "d16-spot", 0, 10, 0, "Standard_D16s_v5", priority=SPOT),
              NodeGroup("rg", "nc-spot", 0, 10, 0, "Standard_NC24ads_A100_v4", priority=SPOT)]
    prices = {"rg/d16": 0.768, "rg/d16-spot": 0.162, "rg/nc-spot": 0.7}
    assert price_fraction(groups, prices) == pytest.approx(0.162 / 0.768)
    assert price_fraction(groups[2:], prices) == DEFAULT_PRICE_FRACTION


@pytest.mark.parametrize("text", ["0", "-5m", "sometimes"])
def test_bad_max_runtime_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_max_runtime(text)


@pytest.mark.parametrize("text, rate", [("5%", 0.05), ("0.1", 0.1), ("100%", 1.0)])
def test_rates(text: str, rate: float) -> None:
    assert parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize("text", ["0", "0%", "150%", "fast", "-1"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rate(text)


def test_expected_runtime_reads_durations() -> None:
    assert expected_runtime(pod("p", **{EXPECTED_RUNTIME_ANNOTATION: "1h30m"})) == timedelta(minutes=90)
    assert expected_runtime(pod("p")) is None
