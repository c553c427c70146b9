"""Unavailable offerings: which (VM size, zone, priority) Azure just refused, and for how long to believe it.

Pure module, no side effects. A scale-up that ARM refuses for capacity or quota tells us more than "this
group failed": a spot refusal says nothing about on-demand capacity of the same size, a zonal allocation
failure blocks that size in that zone for every group, a family quota refusal blocks every size of the
family, a low-priority quota refusal blocks all spot. As Karpenter on Azure does, each refusal marks the
offerings it covers unavailable for a lifetime that depends on what kind of failure it was (the defaults
below are Karpenter's, from `../shared/facts/burst-and-spot.md`); the planner skips groups whose offering
is marked, and a mark expires by itself, so capacity that comes back is used again without anyone acting.

A refusal that is not about an offering (regional cores quota, authorization, a provisioning timeout)
marks nothing: the group backs off as before (`engine.backoff`), and a quota refusal makes the next
poll read the quota again (`engine.quota`).

A refusal can also come late: a capacity increase whose operation succeeded may leave instances in provisioning
state Failed (`failed_allocations`, below). Their code is classified as a synchronous refusal's would be.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.domain import ANY_OFFERING as ANY
from shared.domain import REGULAR, SPOT, GroupState, Instance, NodeGroup, OfferingKey, UnavailableOffering

# Failure kinds and their default lifetimes (Karpenter's unavailable-offerings cache).
SPOT_CAPACITY = "spot-capacity"  # SkuNotAvailable for a spot VM: no spot capacity for the size
SKU_NOT_AVAILABLE = "sku-not-available"  # SkuNotAvailable on demand: the size is not offered there
ZONAL_ALLOCATION = "zonal-allocation"  # ZonalAllocationFailed: the zone has no room for the size
ALLOCATION = "allocation"  # AllocationFailed: the placement scope has no room for the size
OVERCONSTRAINED = "overconstrained"  # Overconstrained(Zonal)AllocationRequest: no room with the constraints asked
FAMILY_QUOTA = "family-quota"  # the family's cores quota is spent
FAMILY_QUOTA_ZERO = "family-quota-zero"  # ... and its limit is 0: nobody raised it, it will not come back soon
LOW_PRIORITY_QUOTA = "low-priority-quota"  # the region's spot (low-priority) cores quota is spent
SPOT_PREEMPTED = "spot-preempted"  # a Preempt notice: Azure is taking the size's spot capacity back (engine.spot)

DEFAULT_LIFETIMES: Mapping[str, timedelta] = {
    SPOT_CAPACITY: timedelta(hours=1),
    SKU_NOT_AVAILABLE: timedelta(hours=23),
    ZONAL_ALLOCATION: timedelta(hours=1),
    ALLOCATION: timedelta(hours=1),
    OVERCONSTRAINED: timedelta(hours=1),
    FAMILY_QUOTA: timedelta(minutes=10),
    FAMILY_QUOTA_ZERO: timedelta(hours=1),
    LOW_PRIORITY_QUOTA: timedelta(hours=1),
    SPOT_PREEMPTED: timedelta(minutes=3),  # Karpenter's (AWS) mark on a spot interruption warning
}
KINDS = tuple(DEFAULT_LIFETIMES)

# Codes Azure uses for a quota refusal; the message says which quota.
QUOTA_CODES = frozenset({"operationnotallowed", "quotaexceeded"})
_LIMIT = re.compile(r"current limit:\s*(\d+)", re.IGNORECASE)
_FAMILY = re.compile(r"approved\s+(\w+?)\s+(?:family\s+)?cores quota", re.IGNORECASE)


class OfferingError(ValueError):
    """UNAVAILABLE_OFFERING_TTL is malformed; the message says how."""


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long each failure kind marks its offerings (UNAVAILABLE_OFFERING_TTL overrides the defaults)."""

    by_kind: Mapping[str, timedelta] = field(default_factory=lambda: dict(DEFAULT_LIFETIMES))

    def of(self, kind: str) -> timedelta:
        return self.by_kind.get(kind, DEFAULT_LIFETIMES[kind])


def parse_lifetimes(text: str, *, parse_duration: Callable[[str], timedelta]) -> Lifetimes:
    """`spot-capacity=30m,family-quota=5m` -> the default lifetimes with those replaced; "" -> the defaults."""
    lifetimes = dict(DEFAULT_LIFETIMES)
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        kind, sep, value = item.partition("=")
        kind = kind.strip()
        if not sep or kind not in DEFAULT_LIFETIMES:
            raise OfferingError(f"{item!r}: expected <kind>=<duration> with a kind among {', '.join(KINDS)}")
        try:
            lifetime = parse_duration(value.strip())
        except ValueError as exc:
            raise OfferingError(f"{item!r}: {exc}") from None
        if lifetime <= timedelta(0):
            raise OfferingError(f"{item!r}: the lifetime must be positive")
        lifetimes[kind] = lifetime
    return Lifetimes(lifetimes)


@dataclass(frozen=True, slots=True)
class Classified:
    """What a refusal means: its kind ("" when it is not about an offering) and the keys it marks."""

    kind: str
    keys: tuple[OfferingKey, ...] = ()
    quota: bool = False  # a quota refusal of any kind: the quota is to be read again


def classify(code: str, message: str, *, group: NodeGroup, family: str = "") -> Classified:
    """The offerings a scale-up refusal of `group` (ARM error `code` and `message`) shows to be unavailable.

    `family` is the group's VM size family (from the resource SKUs API), "" when unknown: a family quota
    refusal then marks the size only.
    """
    lowered = code.strip().lower()
    text = message.lower()
    location = group.location.strip().lower()
    size = group.vm_size.strip().lower()
    zones = tuple(group.zones) or ("",)

    def sized(priority_: str) -> tuple[OfferingKey, ...]:
        return tuple(OfferingKey(location, "size", size, zone, priority_) for zone in zones)

    if lowered in QUOTA_CODES and "quota" in text:
        if "lowpriority" in text.replace("-", "").replace(" ", ""):
            return Classified(LOW_PRIORITY_QUOTA, (OfferingKey(location, "priority", ANY, "", SPOT),), quota=True)
        if "regional" in text:
            return Classified("", (), quota=True)  # no offering: every regular size counts against it
        limit = _LIMIT.search(message)
        kind = FAMILY_QUOTA_ZERO if limit is not None and int(limit.group(1)) == 0 else FAMILY_QUOTA
        named = _FAMILY.search(message)
        said = named.group(1).strip().lower() if named else ""
        # Azure names the family (`standardDSv5Family`); an older wording names the size: then the SKU's family.
        quota_family = said if said.endswith("family") else family.strip().lower()
        if group.is_spot:
            # Spot counts against the low-priority quota only; a family refusal of a spot set is odd, so be narrow.
            return Classified(kind, sized(SPOT), quota=True)
        if quota_family and quota_family.endswith("family"):
            return Classified(kind, (OfferingKey(location, "family", quota_family, "", REGULAR),), quota=True)
        return Classified(kind, sized(REGULAR), quota=True)
    if lowered == "skunotavailable":
        return Classified(SPOT_CAPACITY, sized(SPOT)) if group.is_spot else Classified(SKU_NOT_AVAILABLE, sized(REGULAR))
    if lowered == "zonalallocationfailed":
        return Classified(ZONAL_ALLOCATION, sized(ANY))
    if lowered == "allocationfailed":
        return Classified(ALLOCATION, sized(ANY))
    if lowered in ("overconstrainedallocationrequest", "overconstrainedzonalallocationrequest"):
        return Classified(OVERCONSTRAINED, sized(ANY))
    return Classified("")


def marks_for(classified: Classified, *, group: NodeGroup, code: str, message: str, now: datetime,
              lifetimes: Lifetimes = Lifetimes()) -> list[UnavailableOffering]:
    """The marks to record for a classified refusal (none when it is not about an offering)."""
    if not classified.kind:
        return []
    until = now + lifetimes.of(classified.kind)
    return [UnavailableOffering(key, until, now, classified.kind, code, group.id, message[:300])
            for key in classified.keys]


def covers(key: OfferingKey, group: NodeGroup, *, family: str = "") -> bool:
    """Whether a mark's key covers the group's offering (its location, size or family, zones and priority)."""
    if key.location != group.location.strip().lower():
        return False
    if key.priority != ANY and key.priority.lower() != group.priority.lower():
        return False
    if key.scope == "size" and key.name != group.vm_size.strip().lower():
        return False
    if key.scope == "family" and key.name != family.strip().lower():
        return False
    if key.zone and key.zone not in group.zones:
        return False
    # A regional mark ("" zone) covers zonal groups too; a zonal mark covers only groups in that zone, so a
    # regional group, which Azure may place in any zone, is not blocked by one full zone.
    return True


def blocked(group: NodeGroup, marks: Iterable[UnavailableOffering], *, now: datetime,
            family: str = "") -> UnavailableOffering | None:
    """The live mark that keeps the group from growing now, the one lasting longest; None if it may grow."""
    found = [m for m in marks if m.live(now) and covers(m.key, group, family=family)]
    return max(found, key=lambda m: m.until) if found else None


def describe(mark: UnavailableOffering) -> str:
    key = mark.key
    what = {"size": key.name, "family": f"family {key.name}", "priority": "every size"}.get(key.scope, key.name)
    where = f" zone {key.zone}" if key.zone else ""
    priority = "" if key.priority == ANY else f" ({key.priority})"
    return (f"offering {what}{priority} in {key.location}{where} unavailable until {mark.until.isoformat()} "
            f"after {mark.code} ({mark.kind})")


def unavailable_groups(groups: Sequence[NodeGroup], marks: Sequence[UnavailableOffering], *, now: datetime,
                       families: Mapping[str, str]) -> dict[str, str]:
    """Group id -> why its offering is unavailable now, for the groups a live mark covers.

    `families`: lower-cased VM size -> its quota family.
    """
    live = [m for m in marks if m.live(now)]
    if not live:
        return {}
    out: dict[str, str] = {}
    for group in groups:
        mark = blocked(group, live, now=now, family=families.get(group.vm_size.lower(), ""))
        if mark is not None:
            out[group.id] = describe(mark)
    return out


def merge(existing: UnavailableOffering | None, new: UnavailableOffering) -> UnavailableOffering:
    """Two marks of one key: the one lasting longer wins, so a short mark never cuts a long one."""
    return new if existing is None or new.until >= existing.until else existing


# --- Refusals seen late: instances a successful capacity increase left Failed -------------------------------------

# cluster-autoscaler's class of such a failure (cloudprovider.OutOfResourcesErrorClass, shown "OutOfResource"):
# what its event and our status say, so tools that read CA's words read ours.
OUT_OF_RESOURCES = "OutOfResource"
# The code reported when a Failed instance's instance view names none (a backend that does not read it).
PROVISIONING_FAILED = "ProvisioningStateFailed"
# Power states of a VM that got a host: a Failed provisioning state then means a later operation failed on a VM that
# runs (an extension, a model update), not an allocation; such a VM is left alone, as cluster-autoscaler does.
_HAS_HOST = frozenset({"running", "starting"})


@dataclass(frozen=True, slots=True)
class FailedAllocation:
    """Instances of one group, left in provisioning state Failed with one error code by a capacity increase."""

    group_id: str
    instance_ids: tuple[str, ...]
    code: str  # the instance view's `ProvisioningState/failed/<code>`, or PROVISIONING_FAILED
    message: str = ""

    @property
    def reason(self) -> str:
        """As cluster-autoscaler's ScaleUpFailed event names it: `<error class>.<code>`."""
        return f"{OUT_OF_RESOURCES}.{self.code}"


def growing(group: NodeGroup, state: GroupState, *, present: int, now: datetime, provision_time: timedelta) -> bool:
    """Whether the group has nodes on their way from a scale-up of ours that is not yet past MAX_NODE_PROVISION_TIME:
    the groups whose instances a pending poll looks at for failed allocations."""
    return (state.last_scale_up is not None and now - state.last_scale_up <= provision_time
            and group.running_target > present)


def failed_allocations(group: NodeGroup, instances: Iterable[Instance], *,
                       with_node: Collection[str]) -> list[FailedAllocation]:
    """The group's instances in provisioning state Failed that never became a node and never got a host, by code.

    `with_node`: lower-cased ids of the group's instances a node maps to. Such an instance will not become a node:
    Azure could not place it (`ZonalAllocationFailed`, `AllocationFailed`, `SkuNotAvailable` for spot, ...) although
    the operation that asked for it succeeded.
    """
    by_code: dict[str, list[Instance]] = {}
    for instance in instances:
        if not instance.failed or instance.instance_id.lower() in with_node:
            continue
        if instance.power_state.lower() in _HAS_HOST:
            continue
        by_code.setdefault(instance.error_code or PROVISIONING_FAILED, []).append(instance)
    return [FailedAllocation(group.id, tuple(i.instance_id for i in found), code,
                             next((i.error_message for i in found if i.error_message), ""))
            for code, found in sorted(by_code.items())]


def without_failed(group: NodeGroup, failures: Sequence[FailedAllocation]) -> NodeGroup:
    """The group as the planner should see it: its Failed instances are no nodes on their way (written off until
    their delete lowers the capacity)."""
    lost = sum(len(f.instance_ids) for f in failures if f.group_id == group.id)
    return replace(group, written_off=group.written_off + lost) if lost else group
