"""The virtual-node (ACI) tiers the suite runs `ours+vn` and `ca+vn` at, and what each states. Pure data.

`VN_TIERS[cores]` is the tier's `virtual_node` scenario block (what it sets; the sandbox's defaults for the rest).
`tier_statement(cores)` is what results.json states of it: every ACI limit in force, the ones raised above
ACI's defaults (from what to what), and the modelling assumptions behind its figures. ACI's limits are per
region and subscription, all changeable by a quota request (shared/facts/burst-and-spot.md, "ACI limits and
price"): 100 standard cores, 100 container groups existing at once, 100 creations per 5 minutes, 300 per hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sandbox.model import aci
from sandbox.world.pod_lifecycle import JOB_ASSUMPTIONS, JOB_BACKOFF_LIMIT

# ACI's defaults, by the scenario key that sets each.
DEFAULT_LIMITS: Mapping[str, int] = MappingProxyType({
    "quota_cores": aci.DEFAULT_QUOTA_CORES,
    "max_container_groups": aci.DEFAULT_MAX_CONTAINER_GROUPS,
    "creates_per_5min": aci.DEFAULT_CREATES_PER_5MIN,
    "creates_per_hour": aci.DEFAULT_CREATES_PER_HOUR,
})

# Each VN policy's results are keyed `<policy>@<cores>`. The raised tier is a subscription that asked for ten times
# every ACI limit: at tenfold cores alone, the other limits bind first on a trace of short tasks (creations: 100 per
# 5 minutes; and, since many tasks ask for under a core, the 100 container groups that may exist at once).
VN_TIERS: Mapping[int, Mapping[str, int]] = MappingProxyType({
    100: MappingProxyType({"quota_cores": 100}),
    1000: MappingProxyType({"quota_cores": 1000, "max_container_groups": 1000, "creates_per_5min": 1000,
                            "creates_per_hour": 3000}),
})
VN_QUOTAS = tuple(VN_TIERS)

ASSUMPTIONS: tuple[str, ...] = (
    "ACI limits are per region and subscription; a creation past the container groups that may exist at once "
    "(ContainerGroups) or the cores (StandardCores) is refused with ContainerGroupQuotaReached, past the "
    "creation rate with a throttling error; virtual-kubelet then fails the pod (ProviderFailed) and never retries.",
    f"Billing: {aci.BILLING_SOURCE}; the start latency (creation to running, mostly the image pull) is billed in "
    "full, since how much of it precedes the pull is not published.",
    "Start latency: lognormal, median 30 s, p95 60 s, 10-180 s (public reports of 20-60 s; no official figure).",
    f"Prices: the Retail Prices rows serviceName '{aci.ACI_SERVICE_NAME}', skuName '{aci.ACI_SKU_NAME}', "
    + ", ".join(f"'{m.meter_name}' {m.unit_price} USD per '{m.unit_of_measure}'" for m in aci.ACI_METERS)
    + f" (East US, Linux, as recorded for {aci.ACI_PRICE_DATE}; not checked against the live API).",
    "A container group is deleted when its pod stops (completes, fails or is deleted): its cores, its place in "
    "the container-group count and its billing end then.",
    *JOB_ASSUMPTIONS,
)


def tier_statement(cores: int) -> dict[str, Any]:
    """What results.json states of the tier `cores`: its limits, those raised (default -> raised, by how many
    times), the Job backoffLimit and the assumptions. KeyError for a tier not in VN_TIERS."""
    limits = {**DEFAULT_LIMITS, **VN_TIERS[cores]}
    raised = [
        {"limit": key, "default": DEFAULT_LIMITS[key], "raised_to": value, "factor": round(value / DEFAULT_LIMITS[key], 2)}
        for key, value in limits.items() if value != DEFAULT_LIMITS[key]
    ]
    return {
        "limits": limits,
        "raised": raised,
        "job_backoff_limit": JOB_BACKOFF_LIMIT,
        "price_vcpu_second": aci.DEFAULT_PRICE_VCPU_SECOND,
        "price_gb_second": aci.DEFAULT_PRICE_GB_SECOND,
        "bill_start_latency": aci.VirtualNodeSpec().bill_start_latency,
        "assumptions": list(ASSUMPTIONS),
    }


VN_TIER_STATEMENTS: Mapping[int, Mapping[str, Any]] = MappingProxyType({cores: tier_statement(cores) for cores in VN_TIERS})
