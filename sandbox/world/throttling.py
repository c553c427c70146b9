"""Compute resource provider throttling: per-scale-set token buckets in sim time.

Numbers from /work/shared/facts/azure.md (refill per minute / bucket size).
The real service names its buckets in `x-ms-ratelimit-remaining-resource`,
e.g. `Microsoft.Compute/HighCostGetVMScaleSet3Min;107`; we keep that shape so
code that logs or parses the header sees what Azure sends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BucketSpec:
    header_name: str  # the policy name in x-ms-ratelimit-remaining-resource
    refill_per_minute: float
    size: int


BUCKETS: dict[str, BucketSpec] = {
    "update": BucketSpec("Microsoft.Compute/PutVMScaleSet3Min", 4, 12),  # PATCH/PUT of a scale set, start instances
    "delete": BucketSpec("Microsoft.Compute/DeleteVMScaleSet3Min", 4, 12),  # delete and deallocate instances
    "get": BucketSpec("Microsoft.Compute/GetVMScaleSet3Min", 12, 36),  # low-cost GET of one scale set
    "list": BucketSpec("Microsoft.Compute/HighCostGetVMScaleSet3Min", 10, 30),  # lists (scale sets, VMs)
    # Per VM (Flexible members, sandbox.api.flexible), at the per-resource VMSS VM rates of facts/azure.md (the
    # standalone-VM figures are unverified). PutVM3Min and LowCostGet3Min are names Azure sends; DeleteVM3Min
    # is a guess.
    "vm_update": BucketSpec("Microsoft.Compute/PutVM3Min", 4, 12),  # start a VM
    "vm_delete": BucketSpec("Microsoft.Compute/DeleteVM3Min", 4, 12),  # delete or deallocate a VM
    "vm_get": BucketSpec("Microsoft.Compute/LowCostGet3Min", 12, 36),  # GET one VM
}


@dataclass(slots=True)
class TokenBucket:
    spec: BucketSpec
    tokens: float
    updated_at: float  # sim seconds since the world started

    @classmethod
    def full(cls, spec: BucketSpec, now: float) -> TokenBucket:
        return cls(spec, float(spec.size), now)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(float(self.spec.size), self.tokens + elapsed * self.spec.refill_per_minute / 60.0)
        self.updated_at = max(self.updated_at, now)

    def take(self, now: float) -> tuple[bool, int, float]:
        """(allowed, whole tokens remaining, sim seconds until the next token when refused)."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True, int(self.tokens), 0.0
        wait = (1.0 - self.tokens) * 60.0 / self.spec.refill_per_minute
        return False, 0, math.ceil(wait)

    def header(self, remaining: int) -> str:
        return f"{self.spec.header_name};{remaining}"
