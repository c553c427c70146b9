"""Warm standby's decision: the target per group (fixed, auto, windows, caps), the view of what is stopped, refills."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine.standby import (
    STANDBY_TAG, StandbyTarget, break_even_cap, os_disk_price_hour, parse_standby, refill_count, saving_per_use,
    standby_target, standby_view, start_estimate,
)
from tests.builders import group

BOOT = timedelta(seconds=180)
START = timedelta(seconds=90)


@dataclass(frozen=True)
class _Forecast:
    nodes: float
    mape: float | None = None


def _target(g=None, *, configured="0", max_auto=10, forecast=None, boot=BOOT, start=START,  # type: ignore[no-untyped-def]
            disk=None, node=None, window=None) -> StandbyTarget:
    return standby_target(g or group(max_size=20), configured=configured, max_auto=max_auto, forecast=forecast,
                          boot=boot, start=start, disk_price_hour=disk, node_price_hour=node, window_standby=window)


@pytest.mark.parametrize("text,expected", [("0", 0), (" 3 ", 3), ("AUTO", "auto"), ("auto", "auto")])
def test_parse_standby_accepts_counts_and_auto(text, expected) -> None:  # type: ignore[no-untyped-def]
    assert parse_standby(text) == expected


@pytest.mark.parametrize("text", ["-1", "two", "", "1.5", "auto2"])
def test_parse_standby_refuses_others(text) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="whole number|negative"):
        parse_standby(text)


def test_a_malformed_tag_names_the_group_and_the_tag() -> None:
    g = group(tags={"Autoscaler-Standby": "lots"})
    with pytest.raises(ValueError, match=rf"rg/pool.*{STANDBY_TAG}.*lots"):
        _target(g)


@pytest.mark.parametrize(
    "case_id,tags,configured,expected",
    [
        ("setting", {}, "3", 3),
        ("tag wins over the setting", {STANDBY_TAG: "5"}, "3", 5),
        ("tag key in any case", {"AUTOSCALER-STANDBY": "0"}, "3", 0),
        ("capped at max - min", {}, "50", 20 - 4),
    ],
)
def test_fixed_counts(case_id, tags, configured, expected) -> None:  # type: ignore[no-untyped-def]
    target = _target(group(min_size=4, max_size=20, tags=tags), configured=configured)
    assert target.count == expected
    assert target.why


@pytest.mark.parametrize("configured", ["0", "4", "auto"])
@pytest.mark.parametrize("min_size,max_size", [(0, 3), (2, 2), (5, 30)])
def test_never_more_than_could_be_started(configured, min_size, max_size) -> None:  # type: ignore[no-untyped-def]
    g = group(min_size=min_size, max_size=max_size)
    for window in (None, 0, 7, 100):
        target = _target(g, configured=configured, forecast=_Forecast(12.0), window=window)
        assert 0 <= target.count <= max_size - min_size


def test_spot_with_delete_eviction_keeps_none() -> None:
    spot = replace(group(max_size=20), priority="Spot", eviction_policy="Delete")
    assert _target(spot, configured="5", window=3).count == 0
    assert _target(replace(spot, eviction_policy="Deallocate"), configured="5").count == 5


@pytest.mark.parametrize(
    "case_id,forecast,max_auto,expected",
    [
        ("no forecast: none", None, 10, 0),
        ("rounded up", _Forecast(2.2), 10, 3),
        ("a whole forecast stays", _Forecast(4.0), 10, 4),
        ("zero", _Forecast(0.0), 10, 0),
        ("capped by STANDBY_MAX", _Forecast(30.0), 6, 6),
    ],
)
def test_auto_follows_the_forecast_without_prices(case_id, forecast, max_auto, expected) -> None:  # type: ignore[no-untyped-def]
    target = _target(configured="auto", forecast=forecast, max_auto=max_auto)
    assert target.count == expected
    assert "auto" in target.why


def test_auto_keeps_none_when_a_start_saves_nothing() -> None:
    assert _target(configured="auto", forecast=_Forecast(5), boot=START, start=START).count == 0


@pytest.mark.parametrize("disk", [0.001, 0.01, 0.027, 0.1, 1.0])
@pytest.mark.parametrize("nodes", [0.5, 1.0, 3.0, 8.0])
def test_auto_break_even_keeps_disk_cost_within_the_savings(disk, nodes) -> None:  # type: ignore[no-untyped-def]
    node_price = 0.192
    target = _target(configured="auto", forecast=_Forecast(nodes), disk=disk, node=node_price, max_auto=50)
    saved = nodes * saving_per_use(boot=BOOT, start=START, node_price_hour=node_price)
    assert target.count * disk <= saved + 1e-9  # the standby's disks never cost more than its starts save
    assert target.count <= math.ceil(nodes)
    # ... and it is the largest such count: one more would cost more than is saved, or exceed the forecast.
    assert (target.count + 1) * disk > saved - 1e-9 or target.count == math.ceil(nodes)


def test_cheaper_disks_never_mean_less_standby() -> None:
    counts = [_target(configured="auto", forecast=_Forecast(6), disk=d, node=0.2).count
              for d in (0.5, 0.1, 0.03, 0.01, 0.001)]
    assert counts == sorted(counts)
    assert counts[0] < counts[-1]


def test_break_even_cap_grows_with_the_saving() -> None:
    caps = [break_even_cap(10, boot=BOOT, start=START * f, disk_price_hour=0.027, node_price_hour=0.192)
            for f in (1.9, 1.5, 1.0, 0.5, 0.0)]
    assert caps == sorted(caps)
    assert caps[0] == 0 or caps[0] < caps[-1]


@pytest.mark.parametrize(
    "configured,window,expected",
    [("2", 5, 5), ("7", 5, 7), ("0", None, 0), ("auto", 4, 4)],
)
def test_a_window_raises_the_target_to_its_standby(configured, window, expected) -> None:  # type: ignore[no-untyped-def]
    target = _target(configured=configured, window=window)
    assert target.count == max(expected, 0)
    if window is not None and window > (int(configured) if configured.isdigit() else 0):
        assert "window" in target.why


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="STANDBY_MAX"):
        _target(max_auto=-1)
    with pytest.raises(ValueError, match="window"):
        _target(window=-2)
    with pytest.raises(ValueError):
        StandbyTarget(-1, "")


def test_standby_view_counts_only_present_instances() -> None:
    state = GroupState("rg/pool", stopped=frozenset({"10", "2", "7"}))
    view = standby_view(state, {"2", "10", "3"})
    assert view.stopped == ("2", "10")
    assert view.count == 2
    assert view.gone == {"7"}
    assert set(view.stopped) | view.gone == state.stopped


@pytest.mark.parametrize(
    "count,stopped,capacity,max_size,expected",
    [
        (3, 0, 5, 10, 3),  # lacks 3, room for 5
        (3, 2, 5, 10, 1),
        (3, 4, 6, 10, 0),  # more than the target: nothing to create
        (5, 0, 8, 10, 2),  # only 2 could be started now
        (5, 1, 11, 10, 0),  # at max already
    ],
)
def test_refill_count(count, stopped, capacity, max_size, expected) -> None:  # type: ignore[no-untyped-def]
    g = replace(group(target=capacity, max_size=max_size), stopped=stopped)
    view = standby_view(GroupState("rg/pool", stopped=frozenset(str(i) for i in range(stopped))),
                        {str(i) for i in range(stopped)})
    n = refill_count(StandbyTarget(count, "t"), view, g)
    assert n == expected
    assert view.count + n <= max(count, view.count)
    assert g.running_target + n <= max(max_size, g.running_target)


@pytest.mark.parametrize("boot_s", [0, 60, 180, 600])
def test_an_unmeasured_start_is_estimated_no_faster_than_half_a_boot(boot_s) -> None:  # type: ignore[no-untyped-def]
    boot = timedelta(seconds=boot_s)
    assert start_estimate(boot) * 2 == boot
    assert start_estimate(boot, ()) * 2 == boot


@pytest.mark.parametrize("starts", [(40,), (40, 60), (30, 45, 600), (200, 20, 55, 70)])
def test_measured_starts_give_their_median_whatever_the_boot(starts) -> None:  # type: ignore[no-untyped-def]
    for boot in (timedelta(seconds=60), BOOT):
        estimate = start_estimate(boot, starts).total_seconds()
        assert sum(x < estimate for x in starts) == sum(x > estimate for x in starts)  # the median
        assert min(starts) <= estimate <= max(starts)


@pytest.mark.parametrize(("measured", "says"), [(0, "assumed"), (5, "measured")])
def test_auto_says_whether_its_start_is_measured_or_assumed(measured, says) -> None:  # type: ignore[no-untyped-def]
    target = standby_target(group(max_size=20), configured="auto", max_auto=10, forecast=_Forecast(3),
                            boot=BOOT, start=START, disk_price_hour=None, node_price_hour=None,
                            starts_measured=measured)
    assert says in target.why and f"{START.total_seconds():.0f} s" in target.why
    assert ("measured" in target.why) is bool(measured)
    fixed = standby_target(group(max_size=20), configured="2", max_auto=10, forecast=_Forecast(3), boot=BOOT,
                           start=START, disk_price_hour=None, node_price_hour=None, starts_measured=measured)
    assert "measured" not in fixed.why and "assumed" not in fixed.why  # a fixed count does not use the start


def test_os_disk_prices_grow_with_the_size() -> None:
    prices = [os_disk_price_hour(v) for v in (1, 2, 4, 7, 8, 15, 16, 63, 64, 128)]
    assert prices == sorted(prices)
    assert all(p > 0 for p in prices)
    assert os_disk_price_hour(2) == os_disk_price_hour(4)  # the same tier
    with pytest.raises(ValueError, match="vCPU"):
        os_disk_price_hour(0)


@pytest.mark.parametrize("provider,keeps", [("vmss-uniform", True), ("vmss-flexible", True), ("aks-agentpool", False)])
def test_standby_is_kept_on_scale_sets_only(provider, keeps) -> None:  # type: ignore[no-untyped-def]
    target = _target(replace(group(max_size=20), provider=provider), configured="3", window=2)
    assert (target.count > 0) is keeps
    if not keeps:
        assert "AKS" in target.why


def test_standby_options_refuse_what_settings_would() -> None:
    from shared.engine.standby import StandbyOptions

    assert StandbyOptions("auto", 3).max_auto == 3
    with pytest.raises(ValueError):
        StandbyOptions("many", 3)
    with pytest.raises(ValueError, match="STANDBY_MAX"):
        StandbyOptions("2", -1)
