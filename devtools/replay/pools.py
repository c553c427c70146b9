"""Node pools the replays run on, and the shipped price table their cost is computed from.

Prices: approximate Linux pay-as-you-go list prices per hour in US dollars, East US region,
as Microsoft's public price list showed them when the table was written (PRICE_DATE). They
are not fetched (nothing here reaches the internet): comparisons between policies use the same
table, so their ratios do not depend on its exactness. The table lives with the sandbox's Retail
Prices double (`sandbox.prices_api`), so the replay and the `price` expander see the same prices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.prices_api import LIST_PRICES_PER_HOUR, PRICE_DATE, PRICE_SOURCE

__all__ = ["POOL_SETS", "PRICE_DATE", "PRICE_SOURCE", "PRICES_PER_HOUR", "Pool"]

# One table for the replay's costs and the sandbox's Retail Prices double.
PRICES_PER_HOUR: dict[str, float] = dict(LIST_PRICES_PER_HOUR)


@dataclass(frozen=True, slots=True)
class Pool:
    """One scale set of the replayed cluster: size, what its nodes offer pods, and its limits."""

    name: str
    vm_size: str
    cpu_milli: int  # allocatable
    memory_mib: int  # allocatable
    gpus: int = 0
    max_size: int = 1000
    min_size: int = 0

    @property
    def price_per_hour(self) -> float:
        try:
            return PRICES_PER_HOUR[self.vm_size]
        except KeyError:
            raise ValueError(f"pool {self.name}: no price for VM size {self.vm_size} in the shipped table") from None

    def node_group(self, *, resource_group: str, initial: int = 0, fixed: bool = False) -> dict[str, Any]:
        """The pool as a sandbox scenario node group; `fixed` pins it at `initial` (min = max)."""
        allocatable: dict[str, Any] = {"cpu": f"{self.cpu_milli}m", "memory": f"{self.memory_mib}Mi", "pods": 110}
        if self.gpus:
            allocatable["nvidia.com/gpu"] = self.gpus
        group: dict[str, Any] = {
            "resource_group": resource_group, "name": self.name, "vm_size": self.vm_size, "allocatable": allocatable,
            "min": initial if fixed else self.min_size, "max": initial if fixed else self.max_size, "initial": initial,
        }
        if self.gpus:  # GPU nodes keep CPU-only pods off, as operators taint them
            group["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            group["labels"] = {"accelerator": "nvidia"}
        return group


# Allocatable is capacity less kubelet and system reservations, as AKS-style nodes report it.
CPU_POOL = Pool("cpu-d16", "Standard_D16s_v5", 15_740, 56_000)
CPU_POOL_LARGE = Pool("cpu-d48", "Standard_D48s_v5", 47_600, 180_000)
GPU_POOL_2 = Pool("gpu-nc48", "Standard_NC48ads_A100_v4", 47_600, 420_000, gpus=2)
GPU_POOL_4 = Pool("gpu-nc96", "Standard_NC96ads_A100_v4", 95_400, 840_000, gpus=4)

POOL_SETS: dict[str, tuple[Pool, ...]] = {
    "alibaba2018": (CPU_POOL,),
    "alibaba2023": (CPU_POOL_LARGE, GPU_POOL_2, GPU_POOL_4),
}
DEFAULT_POOLS = (CPU_POOL, GPU_POOL_2, GPU_POOL_4)
