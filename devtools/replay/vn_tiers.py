"""The virtual-node (ACI) tiers the suite runs `ours+vn` and `ca+vn` at. Pure data, no side effects."""

from __future__ import annotations

from collections.abc import Mapping

# The virtual-node tier runs at ACI's default regional limits and at raised ones: each VN policy's
# results are keyed `<policy>@<cores>`. A subscription that raises its core quota tenfold raises its
# container-group creation limits too: at the default 100 per 5 minutes, creations, not cores, bind first on
# a trace of short tasks (measured: the gate closed on "100 container groups created in 5 min" at 1,000 cores).
VN_TIERS: Mapping[int, Mapping[str, int]] = {
    100: {"quota_cores": 100},
    1000: {"quota_cores": 1000, "creates_per_5min": 1000, "creates_per_hour": 3000},
}
VN_QUOTAS = tuple(VN_TIERS)
