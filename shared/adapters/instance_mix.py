"""VMSS instance mix: a Flexible scale set with several VM sizes, listed as one node group per size ("lane").

Adapter helpers, no ARM call of their own. ARM's shape (Microsoft.Compute virtualMachineScaleSets, api-version
2024-07-01 on): `sku.name` "Mix" and `properties.skuProfile = {vmSizes: [{name, rank?}], allocationStrategy}`
(LowestPrice, CapacityOptimized or Prioritized); each member VM has its own `hardwareProfile.vmSize`. Azure picks
the size of each VM a capacity increase creates, by the strategy; it takes no count per size.

So the planner can ask for a given size, a lane's increase is ONE PATCH (If-Match the set's etag) that raises the
set's capacity and steers Azure to that size: `skuProfile = {vmSizes: [that size rank 0, the others 1, 2, ... in
the lanes' order], allocationStrategy: Prioritized}`. Since that overwrites the user's strategy, the first steering
write also stores it in the tag `autoscaler-allocation-strategy`, which is read before the skuProfile's from then
on; a user's Prioritized ranks go in the tag `autoscaler-allocation-ranks` (`Standard_D4s_v5=0,Standard_D2s_v5=1`)
the same way, so the lanes keep the user's order and not that of our last steering write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from azure.mgmt.compute.models import Sku, SkuProfile, SkuProfileVMSize, VirtualMachineScaleSetUpdate

from shared.domain import Instance, NodeGroup, VmSizeCapacity

MIX_SKU: Final = "Mix"
STRATEGY_TAG: Final = "autoscaler-allocation-strategy"
RANKS_TAG: Final = "autoscaler-allocation-ranks"
PRIORITIZED: Final = "Prioritized"
LOWEST_PRICE: Final = "LowestPrice"
CAPACITY_OPTIMIZED: Final = "CapacityOptimized"
STRATEGIES: Final = (LOWEST_PRICE, CAPACITY_OPTIMIZED, PRIORITIZED)  # the spec's allocationStrategy enum

_VCPUS_IN_NAME = re.compile(r"^Standard_[A-Za-z]+(?P<vcpus>\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MixProfile:
    """A set's `skuProfile`: its sizes as listed (spelled as the set spells them), their ranks, its strategy."""

    sizes: tuple[str, ...]
    ranks: tuple[int | None, ...]
    strategy: str


def _text(value: Any) -> str:
    return "" if value is None else str(getattr(value, "value", value))


def read_profile(vmss: Any) -> MixProfile | None:
    """The instance mix of a scale set (the SDK's model), None when its sku is not "Mix" or no size is listed."""
    sku = getattr(vmss, "sku", None)
    if sku is None or _text(sku.name).lower() != MIX_SKU.lower():
        return None
    properties = getattr(vmss, "properties", None)
    profile = getattr(properties, "sku_profile", None) if properties is not None else None
    entries = [v for v in (getattr(profile, "vm_sizes", None) or ()) if _text(getattr(v, "name", None))]
    if not entries:
        return None
    return MixProfile(
        sizes=tuple(_text(v.name) for v in entries),
        ranks=tuple(getattr(v, "rank", None) for v in entries),
        strategy=_text(getattr(profile, "allocation_strategy", None)),
    )


def user_strategy(profile: MixProfile, tags: Mapping[str, str]) -> str:
    """The strategy the user chose: our tag once we have steered the set, else the skuProfile's."""
    tagged = next((v for k, v in tags.items() if k.lower() == STRATEGY_TAG), "").strip()
    return next((s for s in STRATEGIES if s.lower() == tagged.lower()), "") or profile.strategy


def user_profile(profile: MixProfile, tags: Mapping[str, str]) -> MixProfile:
    """The profile as the user set it: their strategy (user_strategy) and, for Prioritized, their ranks from our
    tag when it names every size of the profile (else the profile's own)."""
    strategy = user_strategy(profile, tags)
    text = next((v for k, v in tags.items() if k.lower() == RANKS_TAG), "")
    ranks: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, rank = item.partition("=")
        if rank.strip().isdigit():
            ranks[name.strip().lower()] = int(rank)
    if strategy.lower() == PRIORITIZED.lower() and ranks and all(s.lower() in ranks for s in profile.sizes):
        return MixProfile(profile.sizes, tuple(ranks[s.lower()] for s in profile.sizes), strategy)
    return replace(profile, strategy=strategy)


def _ranks_tag(profile: MixProfile) -> str:
    return ",".join(f"{s}={r}" for s, r in zip(profile.sizes, profile.ranks, strict=True) if r is not None)


def lane_order(profile: MixProfile, strategy: str, *, sizes: Mapping[str, VmSizeCapacity],
               prices: Mapping[str, float]) -> tuple[str, ...]:
    """The sizes in the order the strategy prefers them. Prioritized: by rank (unranked last); LowestPrice: by
    price where every size has one, else by vCPUs then memory (the Resource SKUs' figures, else the vCPUs a size's
    name carries); CapacityOptimized (and anything else): as listed. `sizes` and `prices` by lower-cased size."""
    listed = {size: i for i, size in enumerate(profile.sizes)}
    if strategy.lower() == PRIORITIZED.lower():
        rank = dict(zip(profile.sizes, profile.ranks, strict=True))
        return tuple(sorted(profile.sizes, key=lambda s: (rank[s] is None, rank[s] or 0, listed[s])))
    if strategy.lower() != LOWEST_PRICE.lower():
        return profile.sizes
    if all(s.lower() in prices for s in profile.sizes):
        return tuple(sorted(profile.sizes, key=lambda s: (prices[s.lower()], listed[s])))
    return tuple(sorted(profile.sizes, key=lambda s: (*_shape(s, sizes), listed[s])))


def _shape(size: str, sizes: Mapping[str, VmSizeCapacity]) -> tuple[float, float]:
    known = sizes.get(size.lower())
    if known is not None:
        return float(known.vcpus), float(known.memory_bytes)
    match = _VCPUS_IN_NAME.match(size)
    return (float(match["vcpus"]) if match else float("inf")), float("inf")


def as_lanes(group: NodeGroup, profile: MixProfile, members: Sequence[Instance], *,
             order: tuple[str, ...]) -> list[NodeGroup]:
    """One NodeGroup per size of the set `group` (as discovery read it): `capacity` the members of that size
    (Deleting ones excluded), `min_size`/`max_size` what the members of the other sizes leave of the set's limits.
    Members whose size the profile no longer lists count as the others' of every lane."""
    alive = [m for m in members if not m.deleting]
    strategy = user_strategy(profile, group.tags)
    lanes = []
    for size in order:
        mine = sum(1 for m in alive if m.vm_size.lower() == size.lower())
        lanes.append(as_lane(group, size, lanes=order, count=mine, others=len(alive) - mine,
                             allocation_strategy=strategy))
    return lanes


def as_lane(group: NodeGroup, size: str, *, lanes: tuple[str, ...], count: int, others: int,
            **fields: Any) -> NodeGroup:
    """One size of the multi-size group `group` (a scale set's instance mix, a VirtualMachines pool) as its own
    NodeGroup: `capacity` its `count`, `min_size`/`max_size` what the `others` (of the other sizes) leave of the
    group's limits, so the lanes stay within them together; `fields` any other field of the lane."""
    return replace(group, lane=size, vm_size=size, lanes=lanes, capacity=count,
                   min_size=max(0, group.min_size - others), max_size=max(count, group.max_size - others), **fields)


def of_lane(instances: Sequence[Instance], lane: NodeGroup) -> list[Instance]:
    """The members of the lane's size; for a group that is no lane, all of them without a size of their own
    (`Instance.vm_size` is only set where a group holds several)."""
    if not lane.lane:
        return [replace(i, vm_size="") if i.vm_size else i for i in instances]
    return [i for i in instances if i.vm_size.lower() == lane.lane.lower()]


def resize_update(lane: NodeGroup, capacity: int, *, set_sku_name: str, set_capacity: int,
                  profile: MixProfile, tags: Mapping[str, str]) -> VirtualMachineScaleSetUpdate:
    """The PATCH that takes `lane` to `capacity` instances: the set's capacity moves by the difference; an
    increase also steers Azure to the lane's size (see the module docstring). `set_capacity`, `profile` and `tags`
    are the set's as read with the lane's etag."""
    if capacity < 0:
        raise ValueError(f"resize lane {lane.id}: capacity must be >= 0, got {capacity}")
    new_capacity = max(0, set_capacity + capacity - lane.capacity)
    sku = Sku(name=set_sku_name or MIX_SKU, capacity=new_capacity)
    if capacity <= lane.capacity:
        return VirtualMachineScaleSetUpdate(sku=sku)  # Azure picks the VMs; our scale-down deletes named ones
    first = next((s for s in profile.sizes if s.lower() == lane.lane.lower()), None)
    if first is None:
        raise ValueError(f"resize lane {lane.id}: the scale set's skuProfile no longer lists {lane.lane}")
    position = {s.lower(): i for i, s in enumerate(lane.lanes)}
    rest = sorted((s for s in profile.sizes if s != first),
                  key=lambda s: (position.get(s.lower(), len(position)), profile.sizes.index(s)))
    steering = SkuProfile(
        vm_sizes=[SkuProfileVMSize(name=s, rank=rank) for rank, s in enumerate((first, *rest))],
        allocation_strategy=PRIORITIZED,
    )
    extra: dict[str, Any] = {}
    if not any(k.lower() == STRATEGY_TAG for k in tags):
        strategy = lane.allocation_strategy or profile.strategy
        ranks = {RANKS_TAG: _ranks_tag(profile)} if strategy.lower() == PRIORITIZED.lower() and _ranks_tag(profile) \
            else {}
        extra["tags"] = {**tags, STRATEGY_TAG: strategy, **ranks}
    return VirtualMachineScaleSetUpdate(sku=sku, sku_profile=steering, **extra)
