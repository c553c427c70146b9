"""The replay's spot tier: a spot twin of every pool, trace pods that tolerate spot, and Azure evicting them.

`ReplayConfig.spot` (a mapping, checked here into `SpotTier`) turns it on; `ours+spot` and `ca+spot` run
with it (the sandbox's spot model: sandbox/world/spot.py, sandbox/model/spot_spec.py):

- every pool gets a twin `<pool>-spot`: the same VM size, limits and taints, `priority: Spot` with eviction
  policy `Delete` (AKS's default for spot pools; `Deallocate` on request), the AKS spot label and taint
  stamped on its nodes, billed at its size's spot fraction (`devtools.replay.spot_prices`);
- every trace pod tolerates `kubernetes.azure.com/scalesetpriority=spot:NoSchedule`: it may run on either,
  and whichever pool the autoscaler grows is where it runs;
- Azure evicts running spot instances as a Poisson process per instance-hour (seeded), announcing each with a
  Preempt Scheduled Event 30 s ahead (`notice`): by default at the rate of the size's eviction band
  (`devtools.replay.spot_market`), or every size at one `band`, or at a flat `eviction_rate_per_hour`;
- `scarcity` (default true): each spot set's availability is a seeded Markov chain of Spot Placement Score
  levels; at Medium the region holds only so many spot instances of the size, at Low none more (`SkuNotAvailable`
  beyond), and evictions are likelier the lower the level (`spot_market`);
- `cloud_node_lifecycle` (default true): the Node of an evicted VM is deleted 10 s later, as a cloud node
  lifecycle controller does (cloud-provider-azure on AKS; the replay's world deletes the Node of every VM
  deleted otherwise the same way). False leaves it NotReady, as on k3s or kubeadm without a cloud provider.

Every rate, price and availability figure is an ASSUMPTION (`SpotTier.assumptions` lists them for results.json,
`LIMITS` what the tier does not model). The quota (the subscription's `lowPriorityCores` for spot, `cores` and
families on demand) is `ReplayConfig.quotas`. `compare_lost` is the work-lost comparison's rule (nothing lost on
both sides is a tie) and `SPOT_SEEDS` the seeds spot targets are reported on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devtools.replay import spot_market
from devtools.replay.pools import PRICES_PER_HOUR, Pool
from devtools.replay.spot_prices import SPOT_PRICE_BASIS, SPOT_PRICE_DATE, spot_fraction
from shared.domain import Toleration

SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
SPOT_TOLERATION = Toleration(key=SPOT_LABEL, operator="Equal", value="spot", effect="NoSchedule")
_FIELDS = ("eviction_rate_per_hour", "band", "scarcity", "notice", "eviction_policy", "cloud_node_lifecycle",
           "price_fraction")
# The seeds a spot target is judged on: one seed's evictions and availability are a few dozen random events.
SPOT_SEEDS: tuple[int, ...] = (0, 1, 2)
# What the tier leaves out, for results.json and the docs.
LIMITS: tuple[str, ...] = (
    "spot prices do not move during a run, and no instance is evicted for price (max price -1)",
    "one region, no zones: availability and evictions are per size, independent of other sizes and of on-demand",
    "Spot Placement Score levels are taken as ground truth; Azure calls them a recommendation, not a guarantee",
    "a level changes only every 30 minutes and starts High; a Medium cap counts the subscription's spot instances "
    "of the size only, not other tenants'",
    "the evicted instance is drawn uniformly among the set's running ones; real evictions can come in bursts",
    "Preempt notice exactly 30 s ahead for every eviction (Azure: at least 30 s, best effort)",
)


def compare_lost(ours_lost_s: float, peer_lost_s: float, *, tolerance_s: float = 0.5) -> str:
    """"less", "tie" or "more": ours' running work lost against a peer's. Nothing lost on both sides is a tie,
    as is a difference within `tolerance_s` (rounding of the figures compared)."""
    if ours_lost_s < 0 or peer_lost_s < 0:
        raise ValueError(f"work lost cannot be negative: {ours_lost_s!r}, {peer_lost_s!r}")
    if abs(ours_lost_s - peer_lost_s) <= tolerance_s:
        return "tie"
    return "less" if ours_lost_s < peer_lost_s else "more"


@dataclass(frozen=True, slots=True)
class SpotTier:
    """What `ReplayConfig.spot` says, with its defaults."""

    eviction_rate_per_hour: float | None = None  # per running spot instance, every size; 0: none; None: by band
    band: str | None = None  # every size in this eviction band (spot_market.BAND_RATES); None: each size's own
    scarcity: bool = True  # spot availability as Spot Placement Score levels over the run (spot_market)
    notice: bool = True  # a Preempt Scheduled Event 30 s before each eviction
    eviction_policy: str = "Delete"
    cloud_node_lifecycle: bool = True
    price_fraction: float | None = None  # overrides the shipped table for every spot pool

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None) -> SpotTier | None:
        """The tier from a `ReplayConfig.spot` mapping (None: no spot tier); ValueError names a bad field."""
        if spec is None:
            return None
        unknown = sorted(set(spec) - set(_FIELDS))
        if unknown:
            raise ValueError(f"spot tier: unknown field {unknown[0]!r} (allowed: {', '.join(_FIELDS)})")
        tier = cls(**dict(spec))
        rate = tier.eviction_rate_per_hour
        if rate is not None and not (isinstance(rate, int | float) and not isinstance(rate, bool) and 0 <= rate < 1e6):
            raise ValueError(f"spot tier: eviction_rate_per_hour must be a number from 0, got {rate!r}")
        if tier.band is not None and tier.band not in spot_market.BAND_RATES:
            raise ValueError(f"spot tier: band must be one of {', '.join(spot_market.BAND_RATES)}, got {tier.band!r}")
        if tier.band is not None and rate is not None:
            raise ValueError("spot tier: give eviction_rate_per_hour or band, not both")
        if not isinstance(tier.scarcity, bool):
            raise ValueError(f"spot tier: scarcity must be true or false, got {tier.scarcity!r}")
        if tier.eviction_policy not in ("Delete", "Deallocate"):
            raise ValueError(f"spot tier: eviction_policy must be Delete or Deallocate, got {tier.eviction_policy!r}")
        if tier.price_fraction is not None and not 0 < tier.price_fraction <= 1:
            raise ValueError(f"spot tier: price_fraction must be above 0 and at most 1, got {tier.price_fraction!r}")
        return tier

    def pools(self, pools: Sequence[Pool]) -> tuple[Pool, ...]:
        """The spot twins of `pools`, in the same order."""
        return tuple(p.spot_twin(eviction_policy=self.eviction_policy, price_fraction=self.price_fraction) for p in pools)

    def band_of(self, vm_size: str) -> str | None:
        """The eviction band the size's evictions are drawn at (None: a flat rate)."""
        if self.eviction_rate_per_hour is not None:
            return None
        return self.band or spot_market.market_of(vm_size)[0]

    def rate_of(self, vm_size: str) -> float:
        """The size's mean eviction rate per running instance-hour."""
        band = self.band_of(vm_size)
        return float(self.eviction_rate_per_hour or 0.0) if band is None else spot_market.BAND_RATES[band]

    def scenario(self, pools: Sequence[Pool]) -> dict[str, Any]:
        """The scenario's top-level spot fields for these pools' twins (the node groups are added by the caller)."""
        out: dict[str, Any] = {"cloud_node_lifecycle": self.cloud_node_lifecycle}
        twins = self.pools(pools)
        if self.scarcity:
            out["spot_availability"] = [
                spot_market.availability_entry(twin.name, twin.vm_size, self.rate_of(twin.vm_size), notice=self.notice)
                for twin in twins]
            return out
        evictions = [{"scale_set": twin.name, "rate_per_hour": self.rate_of(twin.vm_size), "notice": self.notice}
                     for twin in twins if self.rate_of(twin.vm_size) > 0]
        if evictions:
            out["evictions"] = evictions
        return out

    def assumptions(self, pools: Sequence[Pool]) -> list[str]:
        """The tier's modelling assumptions for these pools' spot twins, one sentence each, for results.json."""
        out = []
        for pool in pools:
            size = pool.vm_size
            price = (f"{self.price_fraction:.3f} of on demand (overridden)" if self.price_fraction is not None else
                     f"{spot_fraction(size):.3f} of on demand ({SPOT_PRICE_BASIS.get(size, 'assumed: default')}, "
                     f"table {SPOT_PRICE_DATE})")
            band = self.band_of(size)
            rate = (f"{self.rate_of(size):.1%}/h, flat (given)" if band is None else
                    f"{self.rate_of(size):.1%}/h mean, the {band} band's rate ({'every size' if self.band else 'assumed for the size'})")
            line = f"{size}: spot price {price}; evictions {rate}"
            if self.scarcity:
                _, scarcity = spot_market.market_of(size)
                rates = spot_market.level_rates(self.rate_of(size), scarcity)
                share = spot_market.stationary(spot_market.CHAINS[scarcity])
                medium = max(1, spot_market.MEDIUM_VCPUS[scarcity] // spot_market.vcpus_of(size))
                line += (f"; availability {scarcity}: long-run High/Medium/Low "
                         f"{share['High']:.0%}/{share['Medium']:.0%}/{share['Low']:.0%} of the time, eviction rate "
                         f"{rates['High']:.1%}/{rates['Medium']:.1%}/{rates['Low']:.1%} per hour at each, at most "
                         f"{medium} spot instances at Medium, none more at Low ({spot_market.CAPACITY_CODE} beyond)")
            out.append(line)
        if self.scarcity:
            out.append(f"availability levels step every {spot_market.STEP_S / 60:.0f} minutes by a Markov chain seeded "
                       f"from the run's seed, starting {spot_market.INITIAL_LEVEL}")
        out.append("evicted with " + ("a Preempt Scheduled Event 30 s ahead" if self.notice else "no notice")
                   + f", eviction policy {self.eviction_policy}")
        return out

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}


def billed_pools(pools: Sequence[Pool], spot: Mapping[str, Any] | None) -> tuple[Pool, ...]:
    """Every pool a run's world has (the spot twins after the pools), for pricing its node-seconds."""
    tier = SpotTier.of(spot)
    return tuple(pools) + (tier.pools(pools) if tier is not None else ())


def spot_section(report: Mapping[str, Any], pools: Sequence[Pool]) -> dict[str, Any]:
    """The results.json entry's `spot` part, from the world's report: evictions and what they cost, where the
    capacity ran (spot and on-demand node-hours) and the quota refusals."""
    spot, quota = report["spot"], report.get("quota") or {}
    spot_pools = {p.name: p for p in pools if p.is_spot}
    by_group = {key.rsplit("/", 1)[-1]: seconds for key, seconds in report["node_seconds_by_group"].items()}
    spot_seconds = sum(s for name, s in by_group.items() if name in spot_pools)
    spot_cost = sum(s * spot_pools[name].price_per_hour / 3600 for name, s in by_group.items() if name in spot_pools)
    at_on_demand = sum(s * PRICES_PER_HOUR[spot_pools[name].vm_size] / 3600
                       for name, s in by_group.items() if name in spot_pools)
    total = sum(by_group.values())
    peaks = quota.get("peak_usage") or {}
    availability = spot.get("availability") or []
    return {
        "evictions": spot["evictions"],
        "notices_published": spot["notices_published"],
        "evicted_pods": spot["evicted_pods"],
        "evicted_job_pods": spot["evicted_job_pods"],
        # Run time of the pods that died with an evicted VM (the world's figure: pods moved off at the notice are not
        # in it; the result's `work_lost_s` counts those too, with every other running pod killed or evicted).
        "lost_work_s": round(spot["lost_work_seconds"], 1),
        "pods_moved_before_eviction": spot["pods_moved_before_eviction"],
        "stale_node_seconds_max": spot["stale_node_seconds_max"],
        "spot_node_seconds": round(spot_seconds, 1),
        "spot_share": round(spot_seconds / total, 4) if total else 0.0,
        "spot_cost": round(spot_cost, 4),  # what the spot nodes were billed
        "spot_cost_at_on_demand": round(at_on_demand, 4),  # ... and what the same node-hours cost on demand
        "capacity_failures": dict(spot["capacity_failures"]),
        "quota_refused_requests": quota.get("refused_requests", 0),
        "low_priority_cores_peak": peaks.get("lowPriorityCores", 0),
        # Spot capacity increases refused or failed for availability (by code in capacity_failures), in all.
        "capacity_refusals": sum(spot["capacity_failures"].values()),
        # Per spot set: seconds at each Spot Placement Score level, and the level changes.
        "availability": {a["scale_set"]: {"seconds_at": a["seconds_at"], "changes": len(a["levels"]) - 1,
                                          "refusals_by_level": a["refusals_by_level"]} for a in availability},
    }


def quiet_spot_logs() -> None:
    """The autoscaler logs a warning per spot eviction it handles (dozens a run): expected in a replay, not its
    output. Its other warnings still show."""
    for name in ("shared.services.spot", "shared.services.preemption"):
        logging.getLogger(name).setLevel(logging.ERROR)
