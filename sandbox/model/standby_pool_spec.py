"""A Flexible scale set's Standby Pool in a scenario: the `standby_pool` section of a node group.

    "standby_pool": {"name": "gpu-pool", "vm_state": "Deallocated", "max_ready": 4, "min_ready": 0,
                     "refill_interval": "60s", "initial_ready": true}

`name` is the `Microsoft.StandbyPool/standbyVirtualMachinePools` resource (3-24 letters, digits, dashes, as the
spec's pattern), in the scale set's resource group and attached to it. `vm_state` is the pool's
`virtualMachineState` (Running, Deallocated, Hibernated). `max_ready`/`min_ready` are the elasticity profile's
`maxReadyCapacity`/`minReadyCapacity` at the start (the autoscaler may change them). `refill_interval` is the
pool's own clock: how often it compares its size with its target and creates or deletes pool VMs (Azure
publishes no figure; the default is an assumption, see sandbox.world.standby_pools). `initial_ready`: the
pool's VMs exist at the start in their final state (true, the default), or the pool starts empty and fills on
its clock. Pure values: parsed here, run by sandbox.world.standby_pools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.model.spec_fields import FieldError, duration, obj, text, typename, whole

VM_STATES = ("Running", "Deallocated", "Hibernated")
VmState = Literal["Running", "Deallocated", "Hibernated"]
MAX_READY_LIMIT = 2000  # the spec's @maxValue on maxReadyCapacity and minReadyCapacity
DEFAULT_REFILL_INTERVAL = 60.0  # sim seconds between two refills of the pool: an assumption, no figure published
_POOL_NAME = re.compile(r"^[a-zA-Z0-9-]{3,24}$")  # the spec's pattern for standbyVirtualMachinePoolName
FIELDS = frozenset({"name", "vm_state", "max_ready", "min_ready", "refill_interval", "initial_ready"})


@dataclass(frozen=True, slots=True)
class StandbyPoolSpec:
    name: str
    vm_state: VmState = "Deallocated"
    max_ready: int = 0
    min_ready: int = 0
    refill_interval: float = DEFAULT_REFILL_INTERVAL
    initial_ready: bool = True


def parse_standby_pool(value: Any, path: str, *, orchestration: str, priority: str) -> StandbyPoolSpec:
    """The section at `path`; a pool only on a Flexible set of regular VMs (Azure refuses Uniform sets, and a
    scenario's Spot set has no pool: spot pools are out of this model)."""
    if orchestration != "Flexible":
        raise FieldError(path, "a Standby Pool attaches to a Flexible scale set only (set orchestration: Flexible)")
    if priority != "Regular":
        raise FieldError(path, "the sandbox models Standby Pools of regular VMs only")
    fields = obj(value, path, FIELDS, {"name"})
    name = text(fields["name"], f"{path}.name")
    if not _POOL_NAME.match(name):
        raise FieldError(f"{path}.name", f"{name!r} is not a pool name (3-24 letters, digits or dashes)")
    vm_state = fields.get("vm_state", "Deallocated")
    if vm_state not in VM_STATES:
        shown = repr(vm_state) if isinstance(vm_state, str) else typename(vm_state)
        raise FieldError(f"{path}.vm_state", f"{shown} is not a pool VM state (allowed: {', '.join(VM_STATES)})")
    max_ready = whole(fields.get("max_ready", 0), f"{path}.max_ready")
    min_ready = whole(fields.get("min_ready", 0), f"{path}.min_ready")
    if max_ready > MAX_READY_LIMIT:
        raise FieldError(f"{path}.max_ready", f"must be at most {MAX_READY_LIMIT}, got {max_ready}")
    if min_ready > max_ready:
        raise FieldError(f"{path}.min_ready", f"must not exceed max_ready ({max_ready}), got {min_ready}")
    interval = duration(fields.get("refill_interval", DEFAULT_REFILL_INTERVAL), f"{path}.refill_interval")
    if interval <= 0:
        raise FieldError(f"{path}.refill_interval", "must be a positive duration")
    initial_ready = fields.get("initial_ready", True)
    if not isinstance(initial_ready, bool):
        raise FieldError(f"{path}.initial_ready", f"must be a boolean, got {typename(initial_ready)}")
    return StandbyPoolSpec(name, vm_state, max_ready, min_ready, interval, initial_ready)
