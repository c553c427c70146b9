"""Spot VMs as Azure shows them: priorities, eviction policies, the node label and taint, capacity refusals.

Pure values and helpers the scenario parser, the world and the ARM doubles share. Facts:
shared/facts/burst-and-spot.md, "Spot VMs in scale sets".

- A scale set's `virtualMachineProfile` carries `priority` (`Regular` or `Spot`); a Spot one also
  `evictionPolicy` (`Deallocate`, the scale-set default, or `Delete`) and `billingProfile.maxPrice` (USD, or
  -1: never evicted for price). A Flexible member, a plain VM, carries the same three in its `properties`.
- An AKS pool carries `scaleSetPriority`, `scaleSetEvictionPolicy` (default `Delete`) and `spotMaxPrice`.
- Nodes of a Spot pool carry label `kubernetes.azure.com/scalesetpriority=spot` and taint
  `kubernetes.azure.com/scalesetpriority=spot:NoSchedule` (AKS stamps them; the sandbox stamps them on every
  Spot group, whatever the flavour, so pods must tolerate Spot to land there).
- No Spot capacity: `SkuNotAvailable`, refused at once (409). Allocation failures (`AllocationFailed`,
  `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`) fail the long-running operation instead.
  The wording follows the errors Microsoft's karpenter-provider-azure fakes carry (pkg/fake/aksmachinesapi.go).
"""

from __future__ import annotations

from typing import Any, Literal

from shared.domain import Taint

Priority = Literal["Regular", "Spot"]
EvictionPolicy = Literal["Delete", "Deallocate"]
PRIORITIES: tuple[Priority, ...] = ("Regular", "Spot")
EVICTION_POLICIES: tuple[EvictionPolicy, ...] = ("Delete", "Deallocate")
SCALE_SET_EVICTION_DEFAULT: EvictionPolicy = "Deallocate"  # a VMSS's default (use-spot.md)
AKS_EVICTION_DEFAULT: EvictionPolicy = "Delete"  # an AKS Spot pool's default (spot-node-pool.md)
NO_MAX_PRICE = -1.0  # pay up to the pay-as-you-go price, never evicted for price

SPOT_LABEL_KEY = "kubernetes.azure.com/scalesetpriority"
SPOT_LABEL_VALUE = "spot"
SPOT_TAINT = Taint(SPOT_LABEL_KEY, SPOT_LABEL_VALUE, "NoSchedule")

# How long before an eviction its Preempt Scheduled Event is published: Azure's minimum notice.
EVICTION_NOTICE_SECONDS = 30.0

SKU_NOT_AVAILABLE = "SkuNotAvailable"
ALLOCATION_CODES = ("AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest")
CAPACITY_CODES = (SKU_NOT_AVAILABLE, *ALLOCATION_CODES)


def priority_profile(priority: str, eviction_policy: str, max_price: float) -> dict[str, Any]:
    """What a VMSS `virtualMachineProfile` (or a Flexible member's `properties`) adds for its priority:
    `priority` always, the eviction policy and billing profile only for Spot."""
    if priority != "Spot":
        return {"priority": "Regular"}
    return {"priority": "Spot", "evictionPolicy": eviction_policy, "billingProfile": {"maxPrice": max_price}}


def agent_pool_priority(priority: str, eviction_policy: str, max_price: float) -> dict[str, Any]:
    """An AKS pool's Spot properties; a Regular pool leaves them out, as AKS leaves out nulls."""
    if priority != "Spot":
        return {}
    return {"scaleSetPriority": "Spot", "scaleSetEvictionPolicy": eviction_policy, "spotMaxPrice": max_price}


def capacity_message(code: str, vm_size: str, location: str, zone: str = "") -> str:
    """The message of a Spot capacity failure with `code` (one of CAPACITY_CODES)."""
    if code == SKU_NOT_AVAILABLE:
        return (
            f"The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {vm_size}' is "
            f"currently not available in location '{location}'. Please try another size or deploy to a different "
            "location or different zone. See https://aka.ms/azureskunotavailable for details."
        )
    if code == "ZonalAllocationFailed":
        return (
            f"Allocation failed. We do not have sufficient capacity for the requested VM size {vm_size} in zone "
            f"{zone or '1'}. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"
        )
    if code == "OverconstrainedAllocationRequest":
        constraints = [*(["Availability Zone"] if zone else []), "Low Priority VMs", "VM Size"]
        return (
            "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too "
            "restrictive. Please remove some constraints and try again. Constraints applied are:\n"
            + "".join(f"  - {c}\n" for c in constraints)
        )
    return (
        "Allocation failed. If you are trying to add a new VM to a Virtual Machine Scale Set with a single placement "
        "group or update/resize an existing VM in a Virtual Machine Scale Set with a single placement group, please "
        "note that such allocation is scoped to a single cluster, and it is possible that the cluster is out of "
        "capacity. Please read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance."
    )
