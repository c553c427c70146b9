"""The spot tier's market: per-size prices as the Retail Prices double serves them, eviction rates by band, the
availability chain, the tiers' stated assumptions and limits, and the work-lost comparison's tie rule."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from devtools.replay import spot_market
from devtools.replay.harness import ReplayConfig, build_world
from devtools.replay.pools import CPU_POOL, GPU_POOL_2, GPU_POOL_4, POOL_SETS, PRICES_PER_HOUR
from devtools.replay.spot import LIMITS, SPOT_SEEDS, SpotTier, compare_lost
from devtools.replay.spot_prices import SPOT_PRICE_BASIS, SPOT_PRICE_FRACTION
from devtools.replay.spot_tiers import SPOT_TARGET_TIER, SPOT_TIERS, tier_facts
from devtools.replay.traces import Trace, TracePod
from sandbox.api import prices_api
from sandbox.api.wire import Request

# -- prices -------------------------------------------------------------------------------------


def _spot_row(size: str, region: str = "eastus") -> float:
    """The double's Linux Spot retailPrice for the size, read as a client would (a filter through the handler, then
    the row with "Spot" in its meter name and not "Windows" in its product)."""
    text = f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{size}'"
    items = prices_api.handle(Request.build("GET", prices_api.PREFIX, {"$filter": text}), base_url="https://x").json()["Items"]
    linux = [i for i in items if "Windows" not in i["productName"] and "Spot" in i["meterName"]]
    assert len(linux) == 1, linux
    return linux[0]["retailPrice"]


@pytest.mark.parametrize("size", sorted(PRICES_PER_HOUR))
def test_the_bill_and_the_doubles_spot_row_agree_for_every_size(size: str) -> None:
    assert _spot_row(size) == pytest.approx(PRICES_PER_HOUR[size] * SPOT_PRICE_FRACTION[size], abs=1e-6)
    assert 0.05 <= SPOT_PRICE_FRACTION[size] <= 0.5  # public ranges: 50-95 % off
    assert SPOT_PRICE_BASIS[size].startswith(("quoted:", "assumed:"))  # every figure says where it comes from


def test_spot_fractions_vary_by_size_and_grow_within_a_family() -> None:
    assert len(set(SPOT_PRICE_FRACTION.values())) > len(SPOT_PRICE_FRACTION) // 2
    dsv5 = sorted((int(s.split("_D")[1].split("s")[0]), f) for s, f in SPOT_PRICE_FRACTION.items()
                  if s.startswith("Standard_D") and s.endswith("s_v5"))
    assert [f for _, f in dsv5] == sorted(f for _, f in dsv5)  # a bigger size, a smaller discount
    a100 = [SPOT_PRICE_FRACTION[p.vm_size] for p in (GPU_POOL_2, GPU_POOL_4)]
    assert min(a100) >= SPOT_PRICE_FRACTION[CPU_POOL.vm_size]  # the A100s no cheaper than a D16


def test_a_spot_pool_is_billed_at_its_sizes_row() -> None:
    for pool in (CPU_POOL, GPU_POOL_2, GPU_POOL_4):
        assert pool.spot_twin().price_per_hour == pytest.approx(_spot_row(pool.vm_size), abs=1e-6)


# -- eviction bands -----------------------------------------------------------------------------


def test_band_rates_lie_within_their_bands() -> None:
    for band, rate in spot_market.BAND_RATES.items():
        low, _, high = band.rstrip("%+").partition("-")
        assert float(low) / 100 < rate < (float(high) / 100 if high else math.inf), band
    rates = list(spot_market.BAND_RATES.values())
    assert rates == sorted(rates)


@pytest.mark.parametrize(("spec", "size", "rate"), [
    ({}, CPU_POOL.vm_size, spot_market.BAND_RATES[spot_market.market_of(CPU_POOL.vm_size)[0]]),
    ({}, GPU_POOL_4.vm_size, spot_market.BAND_RATES[spot_market.market_of(GPU_POOL_4.vm_size)[0]]),
    ({"band": "20%+"}, CPU_POOL.vm_size, spot_market.BAND_RATES["20%+"]),
    ({"band": "0-5%"}, GPU_POOL_4.vm_size, spot_market.BAND_RATES["0-5%"]),
    ({"eviction_rate_per_hour": 0.3}, CPU_POOL.vm_size, 0.3),
])
def test_a_tiers_rate_is_its_bands(spec: dict, size: str, rate: float) -> None:
    tier = SpotTier.of(spec)
    assert tier is not None and tier.rate_of(size) == rate


def test_the_a100s_sit_in_higher_bands_than_general_purpose() -> None:
    cpu = SpotTier().rate_of(CPU_POOL.vm_size)
    assert all(SpotTier().rate_of(p.vm_size) > cpu for p in (GPU_POOL_2, GPU_POOL_4))


@pytest.mark.parametrize("scarcity", sorted(spot_market.CHAINS))
@pytest.mark.parametrize("band_rate", [0.025, 0.25])
def test_level_rates_average_to_the_band_and_rise_as_availability_falls(scarcity: str, band_rate: float) -> None:
    rates = spot_market.level_rates(band_rate, scarcity)
    share = spot_market.stationary(spot_market.CHAINS[scarcity])
    assert sum(share.values()) == pytest.approx(1.0)
    assert sum(share[level] * rates[level] for level in spot_market.LEVELS) == pytest.approx(band_rate)
    assert rates["High"] < rates["Medium"] < rates["Low"]


def test_scarce_sizes_spend_more_time_low() -> None:
    common, scarce = (spot_market.stationary(spot_market.CHAINS[s]) for s in ("common", "scarce"))
    assert common["High"] > scarce["High"] and common["Low"] < scarce["Low"]


# -- what the replay's world gets ---------------------------------------------------------------


def test_the_default_tier_gives_every_spot_set_a_chain_with_caps_and_codes() -> None:
    pools = POOL_SETS["alibaba2023"]
    config = ReplayConfig(pools=pools, spot={})
    world = build_world(Trace("t", "<test>", (TracePod(0, 60, 1000, 1 << 30, 0, "a"),), "x"), config)
    entries = {a.scale_set: a for a in world.scenario.spot_availability}
    assert set(entries) == {f"{p.name}-spot" for p in pools}
    for pool in pools:
        entry = entries[f"{pool.name}-spot"]
        high, medium, low = (entry.level(level) for level in spot_market.LEVELS)
        assert entry.initial == "High" and entry.step == spot_market.STEP_S
        assert high.available is None  # High: no cap
        assert medium.code == "SkuNotAvailable" and 0 < medium.available  # type: ignore[operator]
        assert (low.available, low.code) == (0, "SkuNotAvailable")  # Low: none more; both refused at once
        assert high.eviction_rate_per_hour < medium.eviction_rate_per_hour < low.eviction_rate_per_hour
    # Scarcity off: a flat Poisson rate per set, no chain.
    flat = replace(config, spot={"scarcity": False})
    world = build_world(Trace("t", "<test>", (TracePod(0, 60, 1000, 1 << 30, 0, "a"),), "x"), flat)
    assert not world.scenario.spot_availability
    assert {e.scale_set: e.rate_per_hour for e in world.scenario.evictions} == {
        f"{p.name}-spot": SpotTier().rate_of(p.vm_size) for p in pools}


# -- the tiers' facts ---------------------------------------------------------------------------


@pytest.mark.parametrize("tier", sorted(SPOT_TIERS))
def test_every_tier_states_its_assumptions_and_limits(tier: str) -> None:
    pools = POOL_SETS["alibaba2023"]
    facts = tier_facts(tier, pools)
    assert facts["limits"] == list(LIMITS) and facts["limits"]
    text = " ".join(facts["assumptions"])
    for pool in pools:  # each size's price, band and availability named
        assert pool.vm_size in text
    assert text.count("availability") >= len(pools)  # every tier runs with scarcity: each size's chain stated
    assert ("quota" in text) == bool(SPOT_TIERS[tier].get("quotas"))
    assert all(isinstance(line, str) and line for line in facts["assumptions"])


def test_the_target_tier_is_a_tier_and_targets_span_seeds() -> None:
    assert SPOT_TARGET_TIER in SPOT_TIERS
    assert len(SPOT_SEEDS) >= 2 and len(set(SPOT_SEEDS)) == len(SPOT_SEEDS)


# -- the work-lost comparison -------------------------------------------------------------------


@pytest.mark.parametrize(("ours", "peer", "outcome"), [
    (0.0, 0.0, "tie"),  # nothing lost on both sides: not a win
    (0.0, 0.4, "tie"),  # within rounding
    (0.0, 120.0, "less"),
    (100.0, 200.0, "less"),
    (200.0, 100.0, "more"),
    (50.0, 0.0, "more"),
    (1e6, 1e6, "tie"),
])
def test_compare_lost(ours: float, peer: float, outcome: str) -> None:
    assert compare_lost(ours, peer) == outcome
    mirrored = {"less": "more", "more": "less", "tie": "tie"}[outcome]
    assert compare_lost(peer, ours) == mirrored


def test_compare_lost_refuses_negative_work() -> None:
    with pytest.raises(ValueError, match="negative"):
        compare_lost(-1.0, 0.0)
