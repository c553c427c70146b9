"""A Flexible scale set's instance mix in a scenario: the `instance_mix` section of a node group.

    "instance_mix": {"strategy": "LowestPrice",
                     "sizes": [{"vm_size": "Standard_D2s_v5", "allocatable": {...}, "capacity": {...}, "rank": 0}, ...]}

The set's ARM shape (Microsoft.Compute virtualMachineScaleSets, api-version 2024-07-01 on): `sku.name` "Mix" and
`properties.skuProfile: {"vmSizes": [{"name", "rank"?}], "allocationStrategy"}`; each member VM has its own
`hardwareProfile.vmSize`. Azure's rules kept here: a Flexible set only, 1 to 5 sizes, A, B, D, E or F series,
no Standby Pool; the sandbox also keeps the sizes to one quota family (as the scenario brief asks: one family's
quota and one node shape family), and `rank` only with `Prioritized`. Pure values: parsed here, the size of each
new VM chosen by sandbox.world.instance_mix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from sandbox.model.quota import vm_family
from sandbox.model.resources import Amounts
from sandbox.model.spec_fields import FieldError, choice, listed, obj, text, whole

if TYPE_CHECKING:
    from sandbox.model.scenario import NodeGroupSpec

FIELD = "instance_mix"
STRATEGIES = ("LowestPrice", "CapacityOptimized", "Prioritized")  # the spec's allocationStrategy enum
Strategy = Literal["LowestPrice", "CapacityOptimized", "Prioritized"]
MAX_SIZES = 5  # Azure's limit on skuProfile.vmSizes
MIX_SKU = "Mix"  # sku.name of an instance-mix set
_SERIES = re.compile(r"^Standard_(?P<series>[A-Za-z])", re.IGNORECASE)  # ARM compares sizes case-insensitively
_ALLOWED_SERIES = "ABDEF"  # instance mix supports the A, B, D, E and F families only
_SIZE_FIELDS = frozenset({"vm_size", "allocatable", "capacity", "rank"})


@dataclass(frozen=True, slots=True)
class MixSize:
    vm_size: str
    allocatable: Amounts
    capacity: Amounts
    rank: int | None = None  # Prioritized only: lower is preferred


@dataclass(frozen=True, slots=True)
class InstanceMixSpec:
    sizes: tuple[MixSize, ...]
    strategy: Strategy

    def size(self, vm_size: str) -> MixSize | None:
        """The size of that name (case-insensitive, as ARM compares sizes), None if not in the mix."""
        return next((s for s in self.sizes if s.vm_size.lower() == vm_size.lower()), None)

    def largest(self) -> MixSize:
        """The size with the most allocatable CPU, then memory: what stands for the set where one size is asked
        (whether a pod could ever fit the group, the quota a VM may take at most)."""
        return max(self.sizes, key=lambda s: (s.allocatable.cpu_milli, s.allocatable.memory_bytes))


ResourcesParser = Callable[[Any, str], Amounts]  # scenario's node-resource parser (cpu, memory, pods, ...)


def parse_instance_mix(
    value: Any, path: str, *, orchestration: str, has_standby_pool: bool, resources: ResourcesParser,
) -> InstanceMixSpec:
    """The section at `path`. `resources` parses a size's allocatable/capacity exactly as a group's are (passed in:
    the scenario parser owns it and imports this module)."""
    if orchestration != "Flexible":
        raise FieldError(path, "an instance mix needs a Flexible scale set (set orchestration: Flexible)")
    if has_standby_pool:
        raise FieldError(path, "an instance-mix scale set cannot have a Standby Pool (Azure does not support it)")
    fields = obj(value, path, {"sizes", "strategy"}, {"sizes", "strategy"})
    strategy = choice(fields["strategy"], f"{path}.strategy", STRATEGIES, "an allocation strategy")
    items = listed(fields["sizes"], f"{path}.sizes")
    if not 1 <= len(items) <= MAX_SIZES:
        raise FieldError(f"{path}.sizes", f"must list 1 to {MAX_SIZES} VM sizes, got {len(items)}")
    sizes = tuple(_size(item, f"{path}.sizes[{i}]", strategy, resources) for i, item in enumerate(items))
    _check_sizes(sizes, f"{path}.sizes")
    return InstanceMixSpec(sizes, strategy)  # type: ignore[arg-type]


def _size(value: Any, path: str, strategy: str, resources: ResourcesParser) -> MixSize:
    fields = obj(value, path, _SIZE_FIELDS, {"vm_size", "allocatable"})
    vm_size = text(fields["vm_size"], f"{path}.vm_size")
    if not allowed_series(vm_size):
        raise FieldError(
            f"{path}.vm_size", f"{vm_size!r} is not an A, B, D, E or F series size (instance mix takes only those)",
        )
    allocatable = resources(fields["allocatable"], f"{path}.allocatable")
    capacity = resources(fields["capacity"], f"{path}.capacity") if "capacity" in fields else allocatable
    if not allocatable.fits_in(capacity):
        raise FieldError(f"{path}.allocatable", "must not exceed capacity")
    rank = None
    if "rank" in fields:
        if strategy != "Prioritized":
            raise FieldError(f"{path}.rank", "a rank is only for the Prioritized strategy")
        rank = whole(fields["rank"], f"{path}.rank")
    return MixSize(vm_size, allocatable, capacity, rank)


def allowed_series(vm_size: str) -> bool:
    """Whether the size is of a series an instance mix takes (A, B, D, E or F)."""
    match = _SERIES.match(vm_size)
    return match is not None and match["series"].upper() in _ALLOWED_SERIES


def _check_sizes(sizes: tuple[MixSize, ...], path: str) -> None:
    """No size twice, and one quota family for all (the brief's rule: one node shape family, one quota)."""
    seen: set[str] = set()
    for i, size in enumerate(sizes):
        if size.vm_size.lower() in seen:
            raise FieldError(f"{path}[{i}].vm_size", f"{size.vm_size!r} is listed twice")
        seen.add(size.vm_size.lower())
    families = [vm_family(s.vm_size) for s in sizes]
    for i, family in enumerate(families):
        if family != families[0]:
            raise FieldError(
                f"{path}[{i}].vm_size",
                f"{sizes[i].vm_size!r} is of family {family}, the first size's is {families[0]} (one family per mix)",
            )


def sku_profile(mix: InstanceMixSpec) -> dict[str, Any]:
    """The set's `properties.skuProfile` as ARM returns it: ranks only where given (Prioritized)."""
    return {
        "vmSizes": [{"name": s.vm_size, **({"rank": s.rank} if s.rank is not None else {})} for s in mix.sizes],
        "allocationStrategy": mix.strategy,
    }


def member_spec(spec: NodeGroupSpec, vm_size: str) -> NodeGroupSpec:
    """The group's spec as one member VM of `vm_size` sees it: that size's name, allocatable and capacity (what
    its Node registers with). The group's own spec when it has no mix or the size is not in it."""
    mix = spec.instance_mix
    size = mix.size(vm_size) if mix is not None and vm_size else None
    if size is None:
        return spec
    return replace(spec, vm_size=size.vm_size, allocatable=size.allocatable, capacity=size.capacity)
