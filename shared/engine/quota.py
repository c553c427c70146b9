"""Compute quota before asking: how many more nodes of a group the subscription's vCPU quotas allow.

Pure module, no side effects. Azure refuses a capacity increase that would take any quota it counts
against over its limit, and refuses all of it: asking for 10 nodes where 3 fit gets none. So the planner
caps every group's increase at what its quotas have left, and the rest of its pods go to the next group
in the same poll.

Which quotas a node counts against (Azure's rules, `../shared/facts/burst-and-spot.md`):
- a regular (on-demand) VM: its size's family (`standardDSv5Family`) and the region's total (`cores`);
- a spot VM: the region's low-priority quota (`lowPriorityCores`) only.

A quota the usages did not list, or a size whose family or vCPUs are unknown, does not cap anything:
Azure is the judge then, and a refusal marks the offering unavailable (`engine.offerings`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from shared.domain import NodeGroup, QuotaUsage, VmSizeCapacity

REGIONAL = "cores"
LOW_PRIORITY = "lowprioritycores"


@dataclass(frozen=True, slots=True)
class Quota:
    """vCPUs left per (location, lower-cased quota name), and each size's family and vCPUs (lower-cased size)."""

    remaining: Mapping[tuple[str, str], int] = field(default_factory=dict)
    sizes: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)  # lower-cased quota name -> as ARM spells it
    # Each quota's limit (same keys as `remaining`): what it could hold with nothing in use.
    limits: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def pools(self, group: NodeGroup) -> tuple[str, ...]:
        """The quota names the group's new nodes count against (those this view knows of)."""
        location = group.location.strip().lower()
        if group.is_spot:
            names: tuple[str, ...] = (LOW_PRIORITY,)
        else:
            family = self.sizes.get(group.vm_size.lower(), ("", 0))[0]
            names = (family, REGIONAL) if family else (REGIONAL,)
        return tuple(name for name in names if (location, name) in self.remaining)

    def vcpus(self, group: NodeGroup) -> int:
        return self.sizes.get(group.vm_size.lower(), ("", 0))[1]

    def allowed(self, group: NodeGroup) -> tuple[int | None, str | None]:
        """The most new nodes the group's quotas allow (None: no known quota caps it), and, when that is
        what caps it, the quota that does so, in words."""
        vcpus = self.vcpus(group)
        if vcpus <= 0:
            return None, None
        location = group.location.strip().lower()
        best: tuple[int, str] | None = None
        for name in self.pools(group):
            left = max(0, self.remaining[(location, name)])
            nodes = left // vcpus
            if best is None or nodes < best[0]:
                best = (nodes, f"{_label(self.names.get(name, name))} quota has {left} vCPUs left in {location} "
                               f"({vcpus} per node)")
        if best is None:
            return None, None
        return best

    def consume(self, group: NodeGroup, nodes: int) -> Quota:
        """The view once `nodes` new nodes of the group are asked for."""
        vcpus = self.vcpus(group)
        if nodes <= 0 or vcpus <= 0:
            return self
        location = group.location.strip().lower()
        remaining = dict(self.remaining)
        for name in self.pools(group):
            remaining[(location, name)] -= nodes * vcpus
        return replace(self, remaining=remaining)


def _label(name: str) -> str:
    return {REGIONAL: "the regional cores", LOW_PRIORITY: "the low-priority (spot) cores"}.get(name.lower(), f"the {name}")


def quota_view(usages: Mapping[str, Sequence[QuotaUsage]], sizes: Sequence[VmSizeCapacity]) -> Quota:
    """The view from each location's usages and the sizes' SKU data (family, vCPUs)."""
    remaining = {
        (location.strip().lower(), usage.name.strip().lower()): usage.limit - usage.current
        for location, listed in usages.items() for usage in listed
    }
    names = {usage.name.strip().lower(): usage.name.strip() for listed in usages.values() for usage in listed}
    limits = {(location.strip().lower(), usage.name.strip().lower()): usage.limit
              for location, listed in usages.items() for usage in listed}
    return Quota(remaining, {size.name.lower(): (size.family.lower(), size.vcpus) for size in sizes}, names, limits)


def capped_target(group: NodeGroup, target: int, quota: Quota | None) -> tuple[int, str | None]:
    """The largest size up to `target` the group's quotas allow now (the executor's check before it asks)."""
    if quota is None or target <= group.capacity:
        return target, None
    allowed, why = quota.allowed(group)
    if allowed is None or group.capacity + allowed >= target:
        return target, None
    return group.capacity + allowed, why
