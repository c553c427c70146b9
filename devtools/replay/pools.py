"""Node pools the replays run on, and the shipped price table their cost is computed from.

Prices: approximate Linux pay-as-you-go list prices per hour in US dollars, East US region,
as Microsoft's public price list showed them when the table was written (PRICE_DATE). They
are not fetched (nothing here reaches the internet): comparisons between policies use the same
table, so their ratios do not depend on its exactness. The table lives with the sandbox's Retail
Prices double (`sandbox.api.prices_api`), so the replay and the `price` expander see the same prices.
A spot pool (`Pool.spot_twin`, the replay's spot tier) is billed at its size's spot fraction of that
price (`devtools.replay.spot_prices`, dated, assumed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from devtools.replay.spot_prices import spot_fraction
from sandbox.api.prices_api import LIST_PRICES_PER_HOUR, PRICE_DATE, PRICE_SOURCE

__all__ = ["NAP_POOL_SETS", "POOL_SETS", "PRICE_DATE", "PRICE_SOURCE", "PRICES_PER_HOUR", "SIZE_GROUPS", "Pool",
           "nap_pools", "sized_pools"]

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
    priority: str = "Regular"  # "Spot": a spot scale set (see spot_twin)
    eviction_policy: str = "Delete"  # a spot pool's (AKS's default for spot pools); ignored on Regular ones
    spot_price_fraction: float | None = None  # a spot pool's price over on-demand; None: the shipped table
    max_pods: int = 110  # the kubelet's maxPods (the Kubernetes default; NAP's nodes take 250)
    # Extra scale-set tags, (name, value) pairs: an operator's per-group choices, e.g. ("autoscaler-standby", "2").
    tags: tuple[tuple[str, str], ...] = ()
    # The multi-size group this pool is one size ("lane") of, e.g. "cpu-small"; "" for a one-size pool. The world
    # keeps each size its own Flexible scale set (members are plain VMs, as in a VirtualMachines pool); the replay's
    # provider presents the sizes of one group as that group's lanes (devtools.replay.world_ports).
    multi_size: str = ""

    @property
    def is_spot(self) -> bool:
        return self.priority == "Spot"

    @property
    def price_per_hour(self) -> float:
        try:
            on_demand = PRICES_PER_HOUR[self.vm_size]
        except KeyError:
            raise ValueError(f"pool {self.name}: no price for VM size {self.vm_size} in the shipped table") from None
        if not self.is_spot:
            return on_demand
        fraction = self.spot_price_fraction if self.spot_price_fraction is not None else spot_fraction(self.vm_size)
        return on_demand * fraction

    def spot_twin(self, *, eviction_policy: str = "Delete", price_fraction: float | None = None) -> Pool:
        """The same pool as a spot scale set, `<name>-spot`: same size, limits and taints; billed at the spot price."""
        return replace(self, name=f"{self.name}-spot", priority="Spot", eviction_policy=eviction_policy,
                       spot_price_fraction=price_fraction)

    def node_group(self, *, resource_group: str, initial: int = 0, fixed: bool = False) -> dict[str, Any]:
        """The pool as a sandbox scenario node group; `fixed` pins it at `initial` (min = max)."""
        allocatable: dict[str, Any] = {"cpu": f"{self.cpu_milli}m", "memory": f"{self.memory_mib}Mi",
                                       "pods": self.max_pods}
        if self.gpus:
            allocatable["nvidia.com/gpu"] = self.gpus
        group: dict[str, Any] = {
            "resource_group": resource_group, "name": self.name, "vm_size": self.vm_size, "allocatable": allocatable,
            "min": initial if fixed else self.min_size, "max": initial if fixed else self.max_size, "initial": initial,
        }
        if self.gpus:  # GPU nodes keep CPU-only pods off, as operators taint them
            group["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            group["labels"] = {"accelerator": "nvidia"}
        if self.is_spot:  # the sandbox stamps AKS's spot label and taint on its nodes
            group["priority"] = "Spot"
            group["eviction_policy"] = self.eviction_policy
        if self.tags:
            group["tags"] = dict(self.tags)
        if self.multi_size:  # a VirtualMachines pool's or instance mix's VM: no scale-set instance of its own
            group["orchestration"] = "Flexible"
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


# Node Auto Provisioning (the `nap` policy): one scale set per VM size the emulated Karpenter may choose, each from 0.
# The general-purpose sizes are D2s_v5 to D64s_v5 (NAP's default NodePool takes the D family); D16s_v5 and D48s_v5 keep
# the standard pools' allocatable, so a pod fits the same size whichever policy runs; the others take AKS's
# kube-reserved (CPU: 60m for the first core, 10m the second, 5m each of the next two, 2.5m each beyond; memory:
# 25 % of the first 4 GiB, 20 % of the next 4, 10 % of the next 8, 6 % up to 128 GiB, 2 % beyond, plus the 750 MiB
# eviction threshold), rounded down as the standard pools are. maxPods 250: karpenter-provider-azure's default with
# Azure CNI Overlay (AKSNodeClass `maxPods`, pkg/apis/v1beta1/aksnodeclass.go), the network NAP runs on.
NAP_MAX_PODS = 250
NAP_GENERAL: tuple[Pool, ...] = (
    Pool("nap-d2s-v5", "Standard_D2s_v5", 1_900, 5_000, max_pods=NAP_MAX_PODS),
    Pool("nap-d4s-v5", "Standard_D4s_v5", 3_900, 12_000, max_pods=NAP_MAX_PODS),
    Pool("nap-d8s-v5", "Standard_D8s_v5", 7_900, 28_000, max_pods=NAP_MAX_PODS),
    replace(CPU_POOL, name="nap-d16s-v5", max_pods=NAP_MAX_PODS),
    Pool("nap-d32s-v5", "Standard_D32s_v5", 31_800, 120_000, max_pods=NAP_MAX_PODS),
    replace(CPU_POOL_LARGE, name="nap-d48s-v5", max_pods=NAP_MAX_PODS),
    Pool("nap-d64s-v5", "Standard_D64s_v5", 63_700, 247_000, max_pods=NAP_MAX_PODS),
)


def nap_pools(standard: tuple[Pool, ...]) -> tuple[Pool, ...]:
    """NAP's sizes for a run whose standard pools are `standard`: the general-purpose sizes, plus a NAP twin of each
    GPU pool (same size and allocatable: a GPU NodePool an operator adds, NAP's default one takes the D family only)."""
    gpus = tuple(replace(p, name=f"nap-{p.vm_size.removeprefix('Standard_').split('_')[0].lower()}",
                         max_pods=NAP_MAX_PODS) for p in standard if p.gpus and not p.is_spot)
    return NAP_GENERAL + gpus


NAP_POOL_SETS: dict[str, tuple[Pool, ...]] = {name: nap_pools(pools) for name, pools in POOL_SETS.items()}


# `ours+sizes`: ours on multi-size groups holding the sizes `nap` chooses from (NAP_GENERAL), with the same
# allocatable and maxPods, so both pick among the same sizes. Azure takes at most 5 sizes per instance mix or
# VirtualMachines pool, so the seven sizes are split into two groups: the small ones and the large ones. Each group
# has the standard CPU pool's limits (min 0, max 1000 nodes over all its sizes); GPU pools stay one size each.
SIZE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cpu-small", ("Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5")),
    ("cpu-large", ("Standard_D32s_v5", "Standard_D48s_v5", "Standard_D64s_v5")),
)
MAX_SIZES_PER_GROUP = 5  # Azure's limit for an instance mix (skuProfile.vmSizes) and a VirtualMachines pool


def sized_pools(standard: tuple[Pool, ...]) -> tuple[Pool, ...]:
    """The pools of `ours+sizes` for a run whose standard pools are `standard`: every size of SIZE_GROUPS as a lane
    pool `<group>-<size>` (`cpu-small-d2s`) of its group (NAP's allocatable and maxPods for that size), then the standard GPU pools
    unchanged. The lanes are listed by size, smallest first, as `pool_of` wants them."""
    by_size = {pool.vm_size: pool for pool in NAP_GENERAL}
    lanes: list[Pool] = []
    for group, sizes in SIZE_GROUPS:
        if len(sizes) > MAX_SIZES_PER_GROUP:
            raise ValueError(f"multi-size group {group}: {len(sizes)} sizes, Azure takes at most {MAX_SIZES_PER_GROUP}")
        for size in sizes:
            # `cpu-small-d8s`: a computer name prefix (the pool's name) has at most 15 characters
            slug = size.removeprefix("Standard_").split("_")[0].lower()
            lanes.append(replace(by_size[size], name=f"{group}-{slug}", multi_size=group))
    return (*lanes, *(p for p in standard if p.gpus and not p.is_spot))
