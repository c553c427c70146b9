"""The managed OS disk of a node VM: its tier, and what it bills while the VM is stopped (deallocated).

A deallocated VM bills no compute but still bills its disks (AKS scale-down mode Deallocate, azure-aks-docs
scale-down-mode.md; shared/facts/cluster-shapes.md). Deallocate needs a managed OS disk (ephemeral OS disks are
unsupported there), so a standby node keeps one. AKS sizes a managed OS disk by the VM's vCPUs (azure-aks-docs
concepts-storage.md, "Managed OS disks"): 1-7 vCPUs P10/128 GiB, 8-15 P15/256 GiB, 16-63 P20/512 GiB, 64+ P30/1024 GiB.

Prices are Premium SSD LRS list prices, East US, USD per disk-month, as the Retail Prices API publishes them
(serviceName 'Storage', productName 'Premium SSD Managed Disks', meterName '<tier> LRS Disk', unitOfMeasure
'1/Month'), served by `sandbox.api.prices_api` so the world and that API answer the same price. The P10 figure
matches public retail-price fixtures; P15, P20 and P30 are the pricing page's figures as remembered: unverified
against the live API. A month is Azure's 730 hours. Only deallocated time is priced: a running node's OS disk is
left out of the bench's cost, as before.

A hibernated VM (a deallocate with `hibernate=true`, on a set created with `additionalCapabilities.hibernationEnabled`)
keeps its memory's contents on disk while stopped. The model bills that as a second managed disk, the "memory disk":
the smallest tier of the same table that holds the memory (as many of the largest as needed beyond it), priced from
the same rows. An assumption, stated where the figures are produced: Azure writes the hibernation file to the OS
disk, whose size must cover the memory, and publishes no separate meter; so the sizes AKS gives (above) may already
hold it, and this charge is an upper estimate of what hibernating adds. The table's smallest tier is 128 GiB, so a
memory below it is billed as 128 GiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

DISK_PRICE_DATE: Final = "2026-11"
SERVICE_NAME: Final = "Storage"
SERVICE_FAMILY: Final = "Storage"
PRODUCT_NAME: Final = "Premium SSD Managed Disks"
UNIT_OF_MEASURE: Final = "1/Month"
HOURS_PER_MONTH: Final = 730.0


@dataclass(frozen=True, slots=True)
class OsDiskTier:
    """A Premium SSD LRS tier: its name, size and monthly list price."""

    tier: str  # "P10"
    size_gib: int
    usd_per_month: float
    min_vcpus: int  # AKS gives this tier to VM sizes with at least this many vCPUs (and fewer than the next's)

    @property
    def sku_name(self) -> str:
        return f"{self.tier} LRS"

    @property
    def meter_name(self) -> str:
        return f"{self.tier} LRS Disk"

    @property
    def usd_per_second(self) -> float:
        return self.usd_per_month / (HOURS_PER_MONTH * 3600)


OS_DISK_TIERS: Final[tuple[OsDiskTier, ...]] = (
    OsDiskTier("P10", 128, 19.71, 1),
    OsDiskTier("P15", 256, 38.01, 8),
    OsDiskTier("P20", 512, 73.22, 16),
    OsDiskTier("P30", 1024, 135.17, 64),
)


@dataclass(frozen=True, slots=True)
class MemoryDisk:
    """What a hibernated VM's memory is billed as: `count` disks of `tier`."""

    tier: OsDiskTier
    count: int

    @property
    def usd_per_second(self) -> float:
        return self.count * self.tier.usd_per_second


def memory_disk_for(memory_gib: float) -> MemoryDisk:
    """The managed disk(s) a hibernated VM's `memory_gib` of memory is billed as: the smallest tier holding it, or
    as many of the largest as it takes."""
    if memory_gib <= 0:
        raise ValueError(f"a VM's memory must be positive to hibernate it, got {memory_gib} GiB")
    for tier in OS_DISK_TIERS:
        if memory_gib <= tier.size_gib:
            return MemoryDisk(tier, 1)
    largest = OS_DISK_TIERS[-1]
    return MemoryDisk(largest, math.ceil(memory_gib / largest.size_gib))


def os_disk_for(vcpus: int) -> OsDiskTier:
    """The managed OS disk AKS gives a VM size of `vcpus` vCPUs by default."""
    return [t for t in OS_DISK_TIERS if vcpus >= t.min_vcpus or t is OS_DISK_TIERS[0]][-1]
