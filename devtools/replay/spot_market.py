"""The spot market the replay's spot tier runs in: eviction-rate bands, each size's band, and how scarce it is.

Pure data and arithmetic, no side effects. ASSUMED throughout, not measured for any size or region:

- Eviction rates: Azure shows each size's rate in bands of evictions per instance-hour (0-5 %, 5-10 %, 10-15 %,
  15-20 %, 20 %+; portal and Resource Graph `SpotResources`, last 28 days; ../shared/facts/burst-and-spot.md).
  The replay uses each band's midpoint, and 25 % for the open 20 %+ band. General-purpose sizes up to 16 vCPUs
  are put in the lowest band, larger ones and the T4 in the next, the A100 sizes higher.
- Availability: a size's Spot Placement Score level (High, Medium, Low; Learn "Spot Placement Score") as a Markov
  chain stepped every STEP_S, starting High. A "common" size is mostly High; a "scarce" one (the A100s, the
  largest D) sits at Medium or Low a good share of the time. At High spot capacity is unlimited; at Medium the
  region holds at most MEDIUM_VCPUS of the size, at Low none more; beyond, a capacity increase is refused at once
  with `SkuNotAvailable`, Azure's code for no Spot capacity (error-codes-spot.md). Not `AllocationFailed`: an
  autoscaler following Karpenter's cache reads that as the size being full on demand too, for an hour, while
  this model keeps on-demand capacity unlimited, so a spot-only shortage would be punished twice.
- Evictions follow the level: each level's rate is the band's rate times a multiplier (High 0.5, Medium 1.5,
  Low 4, scaled so the long-run mean over the chain's stationary levels is the band's rate, which is what the
  band reports).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

# Band name -> the eviction rate per instance-hour the replay uses within it.
BAND_RATES: Final[Mapping[str, float]] = MappingProxyType({
    "0-5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, "20%+": 0.25,
})
DEFAULT_BAND: Final = "5-10%"  # a size missing below
STEP_S: Final = 1800.0  # how often a level may change
LEVELS: Final = ("High", "Medium", "Low")
INITIAL_LEVEL: Final = "High"
CAPACITY_CODE: Final = "SkuNotAvailable"  # the refusal beyond a level's cap (see the module docstring)
MEDIUM_VCPUS: Final[Mapping[str, int]] = MappingProxyType({"common": 640, "scarce": 192})
_RAW_MULTIPLIER: Final[Mapping[str, float]] = MappingProxyType({"High": 0.5, "Medium": 1.5, "Low": 4.0})
# Level -> next level -> probability, per STEP_S.
CHAINS: Final[Mapping[str, Mapping[str, Mapping[str, float]]]] = MappingProxyType({
    "common": {"High": {"High": 0.95, "Medium": 0.05},
               "Medium": {"High": 0.30, "Medium": 0.60, "Low": 0.10},
               "Low": {"Medium": 0.50, "Low": 0.50}},
    "scarce": {"High": {"High": 0.80, "Medium": 0.15, "Low": 0.05},
               "Medium": {"High": 0.20, "Medium": 0.60, "Low": 0.20},
               "Low": {"Medium": 0.30, "Low": 0.70}},
})
# VM size -> (eviction band, scarcity); a size missing here is (DEFAULT_BAND, "scarce").
SIZE_MARKET: Final[Mapping[str, tuple[str, str]]] = MappingProxyType({
    "Standard_D2s_v5": ("0-5%", "common"), "Standard_D4s_v5": ("0-5%", "common"),
    "Standard_D8s_v5": ("0-5%", "common"), "Standard_D16s_v5": ("0-5%", "common"),
    "Standard_D32s_v5": ("5-10%", "common"), "Standard_D48s_v5": ("5-10%", "common"),
    "Standard_D64s_v5": ("5-10%", "scarce"),
    "Standard_E4s_v5": ("0-5%", "common"), "Standard_E8s_v5": ("0-5%", "common"),
    "Standard_F8s_v2": ("0-5%", "common"), "Standard_NC4as_T4_v3": ("5-10%", "scarce"),
    "Standard_NC24ads_A100_v4": ("10-15%", "scarce"), "Standard_NC48ads_A100_v4": ("15-20%", "scarce"),
    "Standard_NC96ads_A100_v4": ("15-20%", "scarce"),
})
_VCPUS = re.compile(r"^Standard_[A-Za-z]+?(\d+)")


def market_of(vm_size: str) -> tuple[str, str]:
    """The size's (eviction band, scarcity)."""
    return SIZE_MARKET.get(vm_size, (DEFAULT_BAND, "scarce"))


def vcpus_of(vm_size: str) -> int:
    """The size's vCPUs, from its name (`Standard_D16s_v5`: 16)."""
    match = _VCPUS.match(vm_size)
    if match is None:
        raise ValueError(f"no vCPU count in VM size {vm_size!r}")
    return int(match[1])


def stationary(chain: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The chain's long-run share of time at each level (power iteration from all-High)."""
    share = {level: float(level == INITIAL_LEVEL) for level in LEVELS}
    for _ in range(2000):
        share = {level: sum(share[src] * chain[src].get(level, 0.0) for src in LEVELS) for level in LEVELS}
    return share


def level_rates(band_rate: float, scarcity: str) -> dict[str, float]:
    """Each level's eviction rate per instance-hour: the band's rate times the level's multiplier, the
    multipliers scaled so the mean over the chain's stationary levels is the band's rate."""
    share = stationary(CHAINS[scarcity])
    mean = sum(share[level] * _RAW_MULTIPLIER[level] for level in LEVELS)
    return {level: band_rate * _RAW_MULTIPLIER[level] / mean for level in LEVELS}


def availability_entry(scale_set: str, vm_size: str, band_rate: float, *, notice: bool) -> dict[str, Any]:
    """The sandbox scenario's `spot_availability` entry for one spot scale set of `vm_size`."""
    _, scarcity = market_of(vm_size)
    rates = level_rates(band_rate, scarcity)
    medium = max(1, MEDIUM_VCPUS[scarcity] // vcpus_of(vm_size))
    limits: dict[str, dict[str, Any]] = {
        "High": {}, "Medium": {"available": medium, "code": CAPACITY_CODE},
        "Low": {"available": 0, "code": CAPACITY_CODE},
    }
    levels = {
        level: {"next": dict(CHAINS[scarcity][level]), **limits[level],
                **({"eviction_rate_per_hour": round(rates[level], 6)} if band_rate > 0 else {})}
        for level in LEVELS
    }
    return {"scale_set": scale_set, "step": STEP_S, "initial": INITIAL_LEVEL, "notice": notice, "levels": levels}
