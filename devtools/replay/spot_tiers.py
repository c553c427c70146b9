"""The spot tiers the suite runs `ours+spot` and `ca+spot` at, with what each assumes and leaves out. Pure data.

Each spot policy's results are keyed `<policy>@<tier>`. Every tier has scarcity on (spot availability as Spot
Placement Score levels over the run, devtools/replay/spot_market.py) and per-size spot prices (the Retail Prices
double's Spot rows). Eviction rates are by Azure's bands, at the rate stated for each band
(`spot_market.BAND_RATES`: the midpoints, 25 % for 20 %+):

- `by-size`, the tier the spot targets are judged at: each size in the band assumed for it (general purpose up to
  16 vCPUs 0-5 %, larger D and the T4 5-10 %, the A100s 10-15 % and 15-20 %);
- `20%+`: every size in the worst band, to show how the conclusions hold when evictions are frequent;
- `by-size,quota320`: `by-size` with a lowPriorityCores quota of 320 vCPUs (20 D16 nodes, a quarter of
  alibaba2018's unconstrained peak), which the batch trace's bursts exceed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from devtools.replay.pools import Pool
from devtools.replay.spot import LIMITS, SpotTier

SPOT_TARGET_TIER = "by-size"
SPOT_TIERS: Mapping[str, Mapping[str, Any]] = {
    "by-size": {"spot": {}},
    "20%+": {"spot": {"band": "20%+"}},
    "by-size,quota320": {"spot": {}, "quotas": {"lowPriorityCores": 320}},
}


def tier_facts(tier: str, pools: Sequence[Pool]) -> dict[str, Any]:
    """What results.json says of one tier on a trace's pools: its settings, assumptions and limits."""
    changes = SPOT_TIERS[tier]
    spot = SpotTier.of(changes.get("spot"))
    assert spot is not None  # every tier has a spot mapping
    assumptions = spot.assumptions(pools)
    quotas = changes.get("quotas") or {}
    assumptions += [f"subscription quota {name} = {limit} vCPUs" for name, limit in quotas.items()]
    return {"spot": spot.as_json(), "quotas": dict(quotas), "assumptions": assumptions, "limits": list(LIMITS)}
