"""The replay's spot tier: a spot twin of every pool, trace pods that tolerate spot, and Azure evicting them.

`ReplayConfig.spot` (a mapping, checked here into `SpotTier`) turns it on; `ours+spot` and `ca+spot` run
with it (the sandbox's spot model: sandbox/world/spot.py, sandbox/model/spot_spec.py):

- every pool gets a twin `<pool>-spot`: the same VM size, limits and taints, `priority: Spot` with eviction
  policy `Delete` (AKS's default for spot pools; `Deallocate` on request), the AKS spot label and taint
  stamped on its nodes, billed at its size's spot fraction (`devtools.replay.spot_prices`);
- every trace pod tolerates `kubernetes.azure.com/scalesetpriority=spot:NoSchedule`: it may run on either,
  and whichever pool the autoscaler grows is where it runs;
- Azure evicts each running spot instance as a Poisson process of `eviction_rate_per_hour` per instance-hour
  (seeded), announcing each eviction with a Preempt Scheduled Event 30 s ahead (`notice`);
- `cloud_node_lifecycle` (default true): the Node of an evicted VM is deleted 10 s later, as a cloud node
  lifecycle controller does (cloud-provider-azure on AKS; the replay's world deletes the Node of every VM
  deleted otherwise the same way). False leaves it NotReady, as on k3s or kubeadm without a cloud provider.

The default eviction rate, 0.05 per instance-hour, is an ASSUMPTION: Azure shows spot eviction rates in
buckets (0-5 %, 5-10 %, ... 20 %+; Resource Graph `SpotResources` keeps the last 28 days), and a general-purpose
size in a large region usually sits in the lowest; 5 % per hour is that bucket's upper edge, so the replay
errs on the side of more evictions. It is not a measured figure for any size or region. The quota (the
subscription's `lowPriorityCores` for spot, `cores` and families on demand) is `ReplayConfig.quotas`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devtools.replay.pools import PRICES_PER_HOUR, Pool
from shared.domain import Toleration

DEFAULT_EVICTION_RATE_PER_HOUR = 0.05  # assumed; see the module docstring
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
SPOT_TOLERATION = Toleration(key=SPOT_LABEL, operator="Equal", value="spot", effect="NoSchedule")
_FIELDS = ("eviction_rate_per_hour", "notice", "eviction_policy", "cloud_node_lifecycle", "price_fraction")


@dataclass(frozen=True, slots=True)
class SpotTier:
    """What `ReplayConfig.spot` says, with its defaults."""

    eviction_rate_per_hour: float = DEFAULT_EVICTION_RATE_PER_HOUR  # per running spot instance; 0: no evictions
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
        if not (isinstance(tier.eviction_rate_per_hour, int | float) and 0 <= tier.eviction_rate_per_hour < 1e6):
            raise ValueError(f"spot tier: eviction_rate_per_hour must be a number from 0, got {tier.eviction_rate_per_hour!r}")
        if tier.eviction_policy not in ("Delete", "Deallocate"):
            raise ValueError(f"spot tier: eviction_policy must be Delete or Deallocate, got {tier.eviction_policy!r}")
        if tier.price_fraction is not None and not 0 < tier.price_fraction <= 1:
            raise ValueError(f"spot tier: price_fraction must be above 0 and at most 1, got {tier.price_fraction!r}")
        return tier

    def pools(self, pools: Sequence[Pool]) -> tuple[Pool, ...]:
        """The spot twins of `pools`, in the same order."""
        return tuple(p.spot_twin(eviction_policy=self.eviction_policy, price_fraction=self.price_fraction) for p in pools)

    def scenario(self, pools: Sequence[Pool]) -> dict[str, Any]:
        """The scenario's top-level spot fields for these pools' twins (the node groups are added by the caller)."""
        out: dict[str, Any] = {"cloud_node_lifecycle": self.cloud_node_lifecycle}
        if self.eviction_rate_per_hour > 0:
            out["evictions"] = [{"scale_set": twin.name, "rate_per_hour": float(self.eviction_rate_per_hour),
                                 "notice": self.notice} for twin in self.pools(pools)]
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
    }


def quiet_spot_logs() -> None:
    """The autoscaler logs a warning per spot eviction it handles (dozens a run): expected in a replay, not its
    output. Its other warnings still show."""
    for name in ("shared.services.spot", "shared.services.preemption"):
        logging.getLogger(name).setLevel(logging.ERROR)
