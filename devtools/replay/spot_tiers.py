"""The spot tiers the suite runs `ours+spot` and `ca+spot` at. Pure data, no side effects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The spot tier (devtools/replay/spot.py): each spot policy's results are keyed `<policy>@<tier>`. The eviction
# rates are assumptions (Azure shows buckets 0-5 %, ..., 20 %+ per hour): the lowest bucket's upper edge, where the
# targets are judged, and the highest; then the first with a lowPriorityCores quota of 320 vCPUs (20 D16 nodes,
# a quarter of alibaba2018's unconstrained peak), which the batch trace's bursts exceed.
SPOT_TIERS: Mapping[str, Mapping[str, Any]] = {
    "5%": {"spot": {"eviction_rate_per_hour": 0.05}},
    "20%": {"spot": {"eviction_rate_per_hour": 0.20}},
    "5%,quota320": {"spot": {"eviction_rate_per_hour": 0.05}, "quotas": {"lowPriorityCores": 320}},
}
