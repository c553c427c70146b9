"""Scenario fields for Spot VMs and quota: what the scenario file says, checked and frozen.

A node group gains `priority` (`Regular`, the default, or `Spot`), `eviction_policy` (`Delete` or
`Deallocate`; default `Deallocate` for a scale set, `Delete` for an AKS pool, as Azure defaults them) and
`max_price` (USD with at most 5 decimals, or -1, the default); the last two only on Spot groups. The
scenario gains, at the top level:

- `spot_capacity`: `[{"scale_set", "resource_group"?, "available", "code", "from"?, "until"?}]`: while
  `from <= t < until`, the region holds at most `available` Spot instances of that set; a capacity increase
  (or start) beyond it fails with `code` (`sandbox.model.spot.CAPACITY_CODES`).
- `quotas`: `{"cores": N, "lowPriorityCores": N, "<family>": N, ...}`: the subscription's regional vCPU
  limits, names matched case-insensitively; a name left out is unlimited.
- `evictions`: `[{"scale_set", "resource_group"?, "at": [durations] | "rate_per_hour": float, "count"?,
  "notice"?}]`: when Azure evicts Spot instances of that set (see `sandbox.world.spot`).
- `spot_availability`: `[{"scale_set", "resource_group"?, "step", "initial"?, "notice"?, "levels": {"High" |
  "Medium" | "Low": {"next": {level: probability}, "available"?, "code"?, "eviction_rate_per_hour"?}}}]`: the
  set's Spot Placement Score level as a Markov chain, one draw every `step` (seeded from the world's seed and the
  entry alone), starting at `initial` (default the first level listed). While a level holds, at most its
  `available` Spot instances of the set can be allocated (absent: no limit; beyond, `code`), and Azure evicts
  running ones as a Poisson process of its `eviction_rate_per_hour` per instance (absent or 0: none).
- `cloud_node_lifecycle`: true when a cloud node lifecycle controller deletes the Node of an evicted VM
  (after `node_removal_delay`); false (the default) leaves it, as on k3s or kubeadm without a cloud provider.

This module imports nothing of `sandbox.model.scenario`, which imports it: problems are raised as `SpotSpecError`
(JSON path and problem), which the scenario parser reports as its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from sandbox.model import quota
from sandbox.model.spot import (
    AKS_EVICTION_DEFAULT,
    CAPACITY_CODES,
    EVICTION_POLICIES,
    NO_MAX_PRICE,
    PRIORITIES,
    SCALE_SET_EVICTION_DEFAULT,
    EvictionPolicy,
    Priority,
)
from sandbox.model.spec_fields import FieldError, choice, duration, listed, obj, text, typename, whole

TOP_LEVEL_FIELDS = frozenset({"spot_capacity", "quotas", "evictions", "spot_availability", "cloud_node_lifecycle"})
# Spot Placement Score's levels (Learn "Spot Placement Score"): how likely a Spot deployment is to succeed.
AVAILABILITY_LEVELS = ("High", "Medium", "Low")
NODE_GROUP_FIELDS = frozenset({"priority", "eviction_policy", "max_price"})


# Kept as this module's name for its errors (sandbox.model.scenario catches it); one class with the scenario's own.
SpotSpecError = FieldError


class _Group(Protocol):
    """What this module reads of a parsed node group (sandbox.model.scenario.NodeGroupSpec)."""

    name: str
    resource_group: str
    priority: str


@dataclass(frozen=True, slots=True)
class SpotCapacitySpec:
    """While `since <= t < until`, at most `available` Spot instances of the set can be allocated; beyond, `code`."""

    scale_set: str
    available: int
    code: str
    resource_group: str | None = None
    since: float = 0.0  # the file's `from`
    until: float = math.inf

    def applies(self, t: float) -> bool:
        return self.since <= t < self.until


@dataclass(frozen=True, slots=True)
class EvictionSpec:
    """Azure evicting Spot instances of one set: at fixed times (`at`, `count` each, the oldest running ones) or
    as a Poisson process of `rate_per_hour` per running instance; announced 30 s ahead when `notice`."""

    scale_set: str
    resource_group: str | None = None
    at: tuple[float, ...] = ()
    rate_per_hour: float | None = None
    count: int = 1
    notice: bool = True


@dataclass(frozen=True, slots=True)
class AvailabilityLevel:
    """One Spot Placement Score level of a set: where the chain goes next, and what holds while it lasts."""

    name: str
    next: tuple[tuple[str, float], ...]  # (level, probability), in the file's order; the probabilities sum to 1
    available: int | None = None  # Spot instances of the set the region can hold; None: no limit
    code: str = "SkuNotAvailable"  # the failure beyond `available`
    eviction_rate_per_hour: float = 0.0  # per running instance


@dataclass(frozen=True, slots=True)
class AvailabilitySpec:
    """A set's Spot availability over the run: a Markov chain of `levels`, one step every `step` seconds."""

    scale_set: str
    step: float
    levels: tuple[AvailabilityLevel, ...]
    initial: str
    resource_group: str | None = None
    notice: bool = True

    def level(self, name: str) -> AvailabilityLevel:
        return next(lv for lv in self.levels if lv.name == name)

    @property
    def max_rate(self) -> float:
        return max(lv.eviction_rate_per_hour for lv in self.levels)


# ---------------------------------------------------------------------------- small readers


_typename, _obj, _int, _duration, _str, _choice = typename, obj, whole, duration, text, choice


def _list(obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
    return listed(obj.get(key, []), f"{path}.{key}")


# ---------------------------------------------------------------------------- node groups


def parse_priority(obj: Mapping[str, Any], path: str, *, agent_pool: bool) -> tuple[Priority, EvictionPolicy, float]:
    """A node group's (priority, eviction policy, max price). Azure refuses an eviction policy or a max price on
    Regular VMs, so the scenario does too."""
    priority = _choice(obj.get("priority", "Regular"), f"{path}.priority", PRIORITIES, "a priority")
    if priority == "Regular":
        for key in ("eviction_policy", "max_price"):
            if key in obj:
                raise SpotSpecError(f"{path}.{key}", 'only Spot groups have one (set "priority": "Spot")')
        return "Regular", SCALE_SET_EVICTION_DEFAULT, NO_MAX_PRICE
    default = AKS_EVICTION_DEFAULT if agent_pool else SCALE_SET_EVICTION_DEFAULT
    policy = _choice(obj.get("eviction_policy", default), f"{path}.eviction_policy", EVICTION_POLICIES,
                     "an eviction policy")
    price = obj.get("max_price", NO_MAX_PRICE)
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price):
        raise SpotSpecError(f"{path}.max_price", f"must be a number of USD or -1, got {_typename(price)}")
    # Azure's MaxPriceValueInvalid: -1, or a positive price with at most 5 decimals.
    if price != NO_MAX_PRICE and (price <= 0 or round(price, 5) != price):
        raise SpotSpecError(f"{path}.max_price", f"must be -1 or a positive price with at most 5 decimals, got {price!r}")
    return "Spot", policy, float(price)  # type: ignore[return-value]


# ---------------------------------------------------------------------------- top-level sections


def _find_group(groups: Sequence[_Group], name: str, resource_group: str | None, path: str) -> _Group:
    matches = [g for g in groups if g.name == name
               and (resource_group is None or g.resource_group.lower() == resource_group.lower())]
    if len(matches) != 1:
        problem = "names no scale set of node_groups" if not matches else "is ambiguous: add its resource_group"
        raise SpotSpecError(path, f"{name!r} {problem}")
    return matches[0]


def _spot_group(obj: Mapping[str, Any], path: str, groups: Sequence[_Group]) -> tuple[str, str | None]:
    name = _str(obj["scale_set"], f"{path}.scale_set")
    resource_group = _str(obj["resource_group"], f"{path}.resource_group") if "resource_group" in obj else None
    group = _find_group(groups, name, resource_group, f"{path}.scale_set")
    if group.priority != "Spot":
        raise SpotSpecError(f"{path}.scale_set", f"{name!r} is a Regular scale set: only Spot sets "
                                                 '("priority": "Spot") have Spot capacity and evictions')
    return name, resource_group


def _spot_capacity(value: Any, path: str, groups: Sequence[_Group]) -> SpotCapacitySpec:
    obj = _obj(value, path, {"scale_set", "resource_group", "available", "code", "from", "until"},
               {"scale_set", "available", "code"})
    name, resource_group = _spot_group(obj, path, groups)
    since = _duration(obj["from"], f"{path}.from") if "from" in obj else 0.0
    until = _duration(obj["until"], f"{path}.until") if "until" in obj else math.inf
    if until <= since:
        raise SpotSpecError(f"{path}.until", f"must be later than from ({since:g}s)")
    return SpotCapacitySpec(
        scale_set=name,
        resource_group=resource_group,
        available=_int(obj["available"], f"{path}.available"),
        code=_choice(obj["code"], f"{path}.code", CAPACITY_CODES, "a Spot capacity failure code"),
        since=since,
        until=until,
    )


def _eviction(value: Any, path: str, groups: Sequence[_Group]) -> EvictionSpec:
    obj = _obj(value, path, {"scale_set", "resource_group", "at", "rate_per_hour", "count", "notice"}, {"scale_set"})
    name, resource_group = _spot_group(obj, path, groups)
    if ("at" in obj) == ("rate_per_hour" in obj):
        raise SpotSpecError(path, "needs exactly one of at (times) and rate_per_hour (a Poisson rate)")
    notice = obj.get("notice", True)
    if not isinstance(notice, bool):
        raise SpotSpecError(f"{path}.notice", f"must be true or false, got {_typename(notice)}")
    if "rate_per_hour" in obj:
        if "count" in obj:
            raise SpotSpecError(f"{path}.count", "only with at: a Poisson eviction takes one instance at a time")
        rate = obj["rate_per_hour"]
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf:
            raise SpotSpecError(f"{path}.rate_per_hour", f"must be a number above 0, got {rate!r}")
        return EvictionSpec(name, resource_group, rate_per_hour=float(rate), notice=notice)
    times = _list(obj, "at", path)
    if not times:
        raise SpotSpecError(f"{path}.at", "must hold at least one time")
    return EvictionSpec(
        name, resource_group,
        at=tuple(sorted(_duration(t, f"{path}.at[{i}]") for i, t in enumerate(times))),
        count=_int(obj.get("count", 1), f"{path}.count", 1),
        notice=notice,
    )


def _rate(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise SpotSpecError(path, f"must be a number from 0, got {value!r}")
    return float(value)


def _level(name: str, value: Any, path: str, names: Sequence[str]) -> AvailabilityLevel:
    obj = _obj(value, path, {"next", "available", "code", "eviction_rate_per_hour"}, {"next"})
    if not isinstance(obj["next"], dict) or not obj["next"]:
        raise SpotSpecError(f"{path}.next", "must be an object of level: probability")
    moves: list[tuple[str, float]] = []
    for target, p in obj["next"].items():
        _choice(target, f"{path}.next", names, "a level of this entry")
        moves.append((target, _rate(p, f"{path}.next.{target}")))
    if not math.isclose(sum(p for _, p in moves), 1.0, abs_tol=1e-9):
        raise SpotSpecError(f"{path}.next", f"probabilities must sum to 1, got {sum(p for _, p in moves):g}")
    if "code" in obj and "available" not in obj:
        raise SpotSpecError(f"{path}.code", "only with available (the limit it is the failure of)")
    return AvailabilityLevel(
        name=name, next=tuple(moves),
        available=_int(obj["available"], f"{path}.available") if "available" in obj else None,
        code=_choice(obj.get("code", CAPACITY_CODES[0]), f"{path}.code", CAPACITY_CODES, "a Spot capacity failure code"),
        eviction_rate_per_hour=_rate(obj.get("eviction_rate_per_hour", 0), f"{path}.eviction_rate_per_hour"),
    )


def _availability(value: Any, path: str, groups: Sequence[_Group]) -> AvailabilitySpec:
    obj = _obj(value, path, {"scale_set", "resource_group", "step", "initial", "notice", "levels"},
               {"scale_set", "step", "levels"})
    name, resource_group = _spot_group(obj, path, groups)
    step = _duration(obj["step"], f"{path}.step")
    if step <= 0:
        raise SpotSpecError(f"{path}.step", "must be above 0")
    levels = obj["levels"]
    if not isinstance(levels, dict) or not levels:
        raise SpotSpecError(f"{path}.levels", f"must be an object of levels ({', '.join(AVAILABILITY_LEVELS)})")
    names = list(levels)
    for level in names:
        _choice(level, f"{path}.levels", AVAILABILITY_LEVELS, "a Spot Placement Score level")
    initial = _choice(obj.get("initial", names[0]), f"{path}.initial", names, "a level of this entry")
    notice = obj.get("notice", True)
    if not isinstance(notice, bool):
        raise SpotSpecError(f"{path}.notice", f"must be true or false, got {_typename(notice)}")
    return AvailabilitySpec(
        scale_set=name, resource_group=resource_group, step=step, initial=initial, notice=notice,
        levels=tuple(_level(level, levels[level], f"{path}.levels.{level}", names) for level in names),
    )


def _quotas(value: Any, path: str) -> Mapping[str, int]:
    if not isinstance(value, dict):
        raise SpotSpecError(path, f"must be an object of vCPU limits, got {_typename(value)}")
    seen: dict[str, str] = {}
    for key, limit in value.items():
        if not isinstance(key, str) or not key:
            raise SpotSpecError(path, "quota names must be non-empty strings")
        if key.lower() in seen:
            raise SpotSpecError(f"{path}.{key}", f"names the same quota as {seen[key.lower()]!r} (names are "
                                                 "case-insensitive)")
        seen[key.lower()] = key
        _int(limit, f"{path}.{key}")
    known = {quota.CORES.lower(), quota.LOW_PRIORITY_CORES.lower(), quota.VIRTUAL_MACHINES.lower(),
             quota.VIRTUAL_MACHINE_SCALE_SETS.lower()}
    for key in value:
        if key.lower() not in known and not key.lower().endswith("family"):
            raise SpotSpecError(f"{path}.{key}", f"{key!r} is not a quota: use cores, lowPriorityCores, "
                                                 "virtualMachines, virtualMachineScaleSets or a family such as "
                                                 "standardDSv5Family")
    return MappingProxyType(dict(value))


def parse_sections(top: Mapping[str, Any], groups: Sequence[_Group]) -> dict[str, Any]:
    """The top-level Spot and quota fields, as keyword arguments of sandbox.model.scenario.Scenario."""
    lifecycle = top.get("cloud_node_lifecycle", False)
    if not isinstance(lifecycle, bool):
        raise SpotSpecError("$.cloud_node_lifecycle", f"must be true or false, got {_typename(lifecycle)}")
    return {
        "spot_capacity": tuple(_spot_capacity(item, f"$.spot_capacity[{i}]", groups)
                               for i, item in enumerate(_list(top, "spot_capacity", "$"))),
        "quotas": _quotas(top.get("quotas", {}), "$.quotas"),
        "evictions": tuple(_eviction(item, f"$.evictions[{i}]", groups)
                           for i, item in enumerate(_list(top, "evictions", "$"))),
        "spot_availability": tuple(_availability(item, f"$.spot_availability[{i}]", groups)
                                   for i, item in enumerate(_list(top, "spot_availability", "$"))),
        "cloud_node_lifecycle": lifecycle,
    }
