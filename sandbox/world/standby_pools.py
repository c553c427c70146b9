"""Standby Pools in the world: pre-provisioned VMs a Flexible scale set's scale-out takes before it creates any.

A `Microsoft.StandbyPool/standbyVirtualMachinePools` resource (`StandbyPoolSim`) is attached to one Flexible
scale set. Its VMs (`PoolVmSim`) are not members of the set: not listed, not in `sku.capacity`, no node (the
sandbox's pool VMs do not join the cluster while pooled; on Azure a Running pool VM may have: docs/standby-pools.md).

- **Size** (Learn `standby-pools-overview.md`): the pool holds `maxReadyCapacity - instanceCount` VMs, never fewer
  than `minReadyCapacity` (our reading of the minimum), and pool plus set at most 1,000 VMs.
- **Its own clock**: every `refill_interval` of the scenario's section the pool compares its VMs with that size,
  creates the missing ones and deletes the surplus (those not yet ready first). A new pool VM is created and
  booted (the group's create-and-boot delay), then, for a Deallocated or Hibernated pool, shut down (the
  scenario's deallocate delay); only then is it ready to be taken. Azure publishes neither figure: both are
  assumptions stated in docs/standby-pools.md.
- **A scale-out takes ready pool VMs first** (`_take_from_pool`, called by `ScaleSetsPart.set_capacity`): a
  Running one is a member at once (its node registers without a boot), a Deallocated or Hibernated one is
  started (the scenario's `start_delay`, as a start of our own deallocated instances). Only VMs already in the
  pool's state are given out; those still creating are not (the docs: other states fall back to a create).
- **Cost**: the report's `standby_pools` section counts, per pool, VM-seconds running (compute billed: every VM
  while it boots, a Running pool's always) and stopped (deallocated or hibernated: the OS disk only).
  Quota: pool VMs' cores are not counted against the sandbox's Compute quota (not modelled).

The ARM surface is sandbox.api.standby_pool_api. Worlds without a pool draw no ids and push no events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandbox.model.standby_pool_spec import DEFAULT_REFILL_INTERVAL, MAX_READY_LIMIT, StandbyPoolSpec
from sandbox.world.compute import ScaleSetSim
from sandbox.world.core import WorldCore
from sandbox.world.errors import ArmError

MAX_POOL_AND_SET = 1000  # a pool and its scale set together hold at most 1,000 VMs (Learn standby-pools-overview.md)
_NOT_FOUND_HINT = "For more details please go to https://aka.ms/ARMResourceNotFoundFix"
# Moves between pool states Azure supports (Learn standby-pools-update-delete.md): not Deallocated <-> Hibernated.
_UNSUPPORTED_MOVES = {("Deallocated", "Hibernated"), ("Hibernated", "Deallocated")}


@dataclass(slots=True)
class PoolVmSim:
    """One VM of a pool: created at `created_at`, booted at `booted_at`, in the pool's state at `ready_at`."""

    seq: int
    zone: str
    created_at: float
    booted_at: float
    ready_at: float
    state: str  # the pool's virtualMachineState when it was created


@dataclass(slots=True)
class StandbyPoolSim:
    name: str
    resource_group: str
    location: str
    vm_state: str
    max_ready: int
    min_ready: int
    attached_key: str | None  # the scale set's key (shared.domain.group_id), None when attached to nothing we hold
    attached_id: str  # attachedVirtualMachineScaleSetId as written
    refill_interval: float
    created_at: float
    tags: dict[str, str] = field(default_factory=dict)
    vms: list[PoolVmSim] = field(default_factory=list)
    next_seq: int = 0
    ticking: bool = False
    # the report: VMs created, taken by a scale-out, deleted by a refill; VM-seconds running and stopped
    created: int = 0
    taken: int = 0
    deleted: int = 0
    running_seconds: float = 0.0
    stopped_seconds: float = 0.0
    last_accounted: float = 0.0
    writes: list[tuple[float, int, int]] = field(default_factory=list)  # (t, max_ready, min_ready) per change

    @property
    def key(self) -> str:
        return f"{self.resource_group.lower()}/{self.name.lower()}"


def pool_size(max_ready: int, min_ready: int, set_count: int) -> int:
    """The VMs a pool holds beside a set of `set_count` instances: maxReadyCapacity minus the set's instances,
    at least minReadyCapacity, pool and set together at most 1,000."""
    return max(0, min(max(min_ready, max_ready - set_count), MAX_POOL_AND_SET - set_count))


class StandbyPoolsPart(WorldCore):
    """Standby Pools and their VMs. See the module docstring."""

    def _init_standby_pool_state(self) -> None:
        self._standby_pools: dict[str, StandbyPoolSim] = {}
        self._gone_pools: list[StandbyPoolSim] = []  # deleted ones, kept for the report

    def _init_standby_pools(self) -> None:
        for group in list(self._groups.values()):
            spec: StandbyPoolSpec | None = group.spec.standby_pool
            if spec is None:
                continue
            pool = StandbyPoolSim(
                name=spec.name, resource_group=group.resource_group, location=group.spec.location,
                vm_state=spec.vm_state, max_ready=spec.max_ready, min_ready=spec.min_ready,
                attached_key=group.key, attached_id=self._vmss_arm_id(group), refill_interval=spec.refill_interval,
                created_at=0.0,
            )
            pool.writes.append((0.0, pool.max_ready, pool.min_ready))
            self._standby_pools[pool.key] = pool
            if spec.initial_ready:  # already filled at the start, in the pool's state
                for _ in range(self._pool_target(pool)):
                    self._new_pool_vm(pool, ready_now=True)
            self._start_pool_clock(pool)

    def _vmss_arm_id(self, group: ScaleSetSim) -> str:
        return (f"/subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
                f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}")

    # ------------------------------------------------------------------ the pool's clock

    def _start_pool_clock(self, pool: StandbyPoolSim) -> None:
        if not pool.ticking:
            pool.ticking = True
            self._push(self._t + pool.refill_interval, "standby_pool_tick", pool.key)

    def _on_standby_pool_tick(self, key: str) -> None:
        pool = self._standby_pools.get(key)
        if pool is None:
            return  # deleted: its clock stops
        self._refill(pool)
        self._push(self._t + pool.refill_interval, "standby_pool_tick", key)

    def _pool_set(self, pool: StandbyPoolSim) -> ScaleSetSim | None:
        return self._groups.get(pool.attached_key) if pool.attached_key else None

    def _pool_target(self, pool: StandbyPoolSim) -> int:
        group = self._pool_set(pool)
        return pool_size(pool.max_ready, pool.min_ready, len(group.active()) if group is not None else 0)

    def _refill(self, pool: StandbyPoolSim) -> None:
        self._account(pool)
        target = self._pool_target(pool)
        while len(pool.vms) < target:
            self._new_pool_vm(pool)
        if len(pool.vms) > target:
            # the surplus goes, those furthest from ready first
            surplus = sorted(pool.vms, key=lambda vm: (vm.ready_at, vm.seq))[target:]
            for vm in surplus:
                pool.vms.remove(vm)
                pool.deleted += 1

    def _new_pool_vm(self, pool: StandbyPoolSim, *, ready_now: bool = False) -> PoolVmSim:
        group = self._pool_set(pool)
        seq = pool.next_seq
        pool.next_seq += 1
        zones = group.spec.zones if group is not None else ()
        if ready_now:
            boot = stop = 0.0
        else:
            dist = (group.spec.boot_delay if group is not None else None) or self.scenario.boot_delay
            boot = dist.sample(self._rng("standby-pool-boot", pool.key, seq))
            stop = 0.0
            if pool.vm_state != "Running":
                stop_dist = self.scenario.deallocate_delay or self.scenario.delete_delay
                stop = stop_dist.sample(self._rng("standby-pool-stop", pool.key, seq))
        vm = PoolVmSim(seq=seq, zone=zones[seq % len(zones)] if zones else "", created_at=self._t,
                       booted_at=self._t + boot, ready_at=self._t + boot + stop, state=pool.vm_state)
        pool.vms.append(vm)
        pool.created += 0 if ready_now else 1
        return vm

    def _account(self, pool: StandbyPoolSim) -> None:
        """Adds the VM-seconds since the last call: running while a VM boots (and always in a Running pool),
        stopped once a Deallocated or Hibernated pool's VM is shut down (shutting down counts as running)."""
        start, end = pool.last_accounted, self._t
        for vm in pool.vms:
            lo, hi = max(start, vm.created_at), end
            if hi <= lo:
                continue
            if vm.state == "Running":
                pool.running_seconds += hi - lo
                continue
            running = max(0.0, min(hi, vm.ready_at) - lo)
            pool.running_seconds += running
            pool.stopped_seconds += (hi - lo) - running
        pool.last_accounted = end

    def _take_from_pool(self, group: ScaleSetSim, count: int) -> list[float]:
        """For a scale-out of `count` new members: the boot delay of each one a ready pool VM becomes (0 for a
        Running pool, a start delay otherwise), oldest first; fewer (or none) when the pool has fewer ready."""
        pool = next((p for p in self._standby_pools.values() if p.attached_key == group.key), None)
        if pool is None or count <= 0:
            return []
        self._account(pool)
        ready = sorted((vm for vm in pool.vms if vm.ready_at <= self._t and vm.state == pool.vm_state),
                       key=lambda vm: vm.seq)[:count]
        delays: list[float] = []
        for vm in ready:
            pool.vms.remove(vm)
            pool.taken += 1
            if pool.vm_state == "Running":
                delays.append(0.0)
            else:  # started (or resumed) by the scale set: a start, not a create
                delays.append(self.scenario.start_delay.sample(self._rng("standby-pool-start", pool.key, vm.seq)))
        return delays

    # ------------------------------------------------------------------ ARM surface

    def new_standby_pool_operation_id(self) -> str:
        """An id for a Standby Pool RP operation (drawn only when a pool is written through ARM)."""
        with self.lock:
            return self._uid()

    def standby_pools(self, subscription_id: str, resource_group: str | None) -> list[StandbyPoolSim]:
        with self.lock:
            if subscription_id.lower() != self.subscription_id.lower():
                raise ArmError(404, "SubscriptionNotFound", f"The subscription '{subscription_id}' could not be found.")
            if resource_group is not None:
                self._check_resource_group(subscription_id, resource_group)
            pools = [p for p in self._standby_pools.values()
                     if resource_group is None or p.resource_group.lower() == resource_group.lower()]
            for pool in pools:
                self._account(pool)
            return sorted(pools, key=lambda p: p.key)

    def standby_pool(self, subscription_id: str, resource_group: str, name: str) -> StandbyPoolSim:
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            pool = self._standby_pools.get(f"{resource_group.lower()}/{name.lower()}")
            if pool is None:
                raise ArmError(
                    404, "ResourceNotFound",
                    f"The Resource 'Microsoft.StandbyPool/standbyVirtualMachinePools/{name}' under resource group "
                    f"'{resource_group}' was not found. {_NOT_FOUND_HINT}",
                )
            self._account(pool)
            return pool

    def put_standby_pool(
        self, subscription_id: str, resource_group: str, name: str, *, location: str, vm_state: str,
        max_ready: int, min_ready: int, attached_id: str, tags: dict[str, str],
    ) -> tuple[StandbyPoolSim, bool]:
        """Create or replace a pool (validated by the caller's shape checks; the attachment checked here).
        Returns the pool and whether it was created."""
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            key = f"{resource_group.lower()}/{name.lower()}"
            existing = self._standby_pools.get(key)
            attached_key = self._attachable(attached_id, key) if attached_id else None
            if existing is not None:
                self._check_move(existing.vm_state, vm_state)
                self._account(existing)
                existing.location, existing.tags = location, tags
                existing.attached_id, existing.attached_key = attached_id, attached_key
                self._set_pool_fields(existing, vm_state=vm_state, max_ready=max_ready, min_ready=min_ready)
                return existing, False
            spec = self._groups[attached_key].spec.standby_pool if attached_key else None
            pool = StandbyPoolSim(
                name=name, resource_group=resource_group, location=location, vm_state=vm_state,
                max_ready=max_ready, min_ready=min_ready, attached_key=attached_key, attached_id=attached_id,
                refill_interval=spec.refill_interval if spec is not None else DEFAULT_REFILL_INTERVAL, created_at=self._t,
                tags=tags, last_accounted=self._t,
            )
            pool.writes.append((self._t, max_ready, min_ready))
            self._standby_pools[key] = pool
            self._start_pool_clock(pool)
            return pool, True

    def patch_standby_pool(
        self, pool: StandbyPoolSim, *, vm_state: str | None, max_ready: int | None, min_ready: int | None,
        attached_id: str | None, tags: dict[str, str] | None,
    ) -> StandbyPoolSim:
        with self.lock:
            self._account(pool)
            if vm_state is not None:
                self._check_move(pool.vm_state, vm_state)
            new_max = pool.max_ready if max_ready is None else max_ready
            new_min = pool.min_ready if min_ready is None else min_ready
            if new_min > new_max:
                raise ArmError(400, "InvalidParameter", f"MinReadyCapacity ({new_min}) cannot exceed MaxReadyCapacity "
                                                        f"({new_max}).", "properties.elasticityProfile.minReadyCapacity")
            if attached_id is not None:
                pool.attached_key = self._attachable(attached_id, pool.key)
                pool.attached_id = attached_id
            if tags is not None:
                pool.tags = tags
            self._set_pool_fields(pool, vm_state=vm_state or pool.vm_state, max_ready=new_max, min_ready=new_min)
            return pool

    def delete_standby_pool(self, subscription_id: str, resource_group: str, name: str) -> bool:
        """Deletes the pool and its VMs (the set's members stay); False when there was none."""
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            pool = self._standby_pools.pop(f"{resource_group.lower()}/{name.lower()}", None)
            if pool is None:
                return False
            self._account(pool)
            pool.deleted += len(pool.vms)
            pool.vms.clear()
            self._gone_pools.append(pool)
            return True

    def pool_vm_counts(self, pool: StandbyPoolSim) -> dict[str, dict[str, int]]:
        """Per zone ("" when zoneless), the pool's VMs by runtime-view state (Creating, Running, Deallocating,
        Deallocated, Hibernating, Hibernated)."""
        with self.lock:
            counts: dict[str, dict[str, int]] = {}
            for vm in pool.vms:
                if vm.booted_at > self._t:
                    state = "Creating"
                elif vm.state == "Running":
                    state = "Running"
                elif vm.ready_at > self._t:
                    state = "Hibernating" if vm.state == "Hibernated" else "Deallocating"
                else:
                    state = vm.state
                by_state = counts.setdefault(vm.zone, {})
                by_state[state] = by_state.get(state, 0) + 1
            return counts

    def standby_pool_report(self) -> dict[str, Any]:
        """Per pool: VMs created, taken, deleted; VM-seconds running and stopped; each write of its capacities."""
        with self.lock:
            rows = {}
            for pool in [*self._standby_pools.values(), *self._gone_pools]:
                self._account(pool)
                rows[pool.key] = {
                    "scale_set": pool.attached_key, "vm_state": pool.vm_state, "vms": len(pool.vms),
                    "created": pool.created, "taken": pool.taken, "deleted": pool.deleted,
                    "running_seconds": round(pool.running_seconds, 3),
                    "stopped_seconds": round(pool.stopped_seconds, 3),
                    "writes": [{"t": round(t, 3), "max_ready": mx, "min_ready": mn} for t, mx, mn in pool.writes],
                }
            return rows

    # ------------------------------------------------------------------ checks

    def _set_pool_fields(self, pool: StandbyPoolSim, *, vm_state: str, max_ready: int, min_ready: int) -> None:
        if vm_state != pool.vm_state:
            # VMs already pooled move to the new state on the pool's clock: modelled as replaced by new ones.
            pool.deleted += len(pool.vms)
            pool.vms.clear()
            pool.vm_state = vm_state
        if (max_ready, min_ready) != (pool.max_ready, pool.min_ready):
            pool.max_ready, pool.min_ready = max_ready, min_ready
            pool.writes.append((self._t, max_ready, min_ready))

    def _check_move(self, current: str, wanted: str) -> None:
        if (current, wanted) in _UNSUPPORTED_MOVES:
            raise ArmError(400, "InvalidParameter", f"Changing the virtual machine state of a standby pool from "
                                                    f"{current} to {wanted} is not supported; move to Running first.",
                           "properties.virtualMachineState")

    def _attachable(self, attached_id: str, pool_key: str) -> str:
        """The key of the Flexible scale set `attached_id` names; 400 for another subscription, a set we do not
        hold or a Uniform one, 409 when another pool is attached to it already."""
        parts = attached_id.strip("/").split("/")
        lowered = [p.lower() for p in parts]
        if (len(parts) != 8 or lowered[0] != "subscriptions" or lowered[2] != "resourcegroups"
                or lowered[5:7] != ["microsoft.compute", "virtualmachinescalesets"]):
            raise ArmError(400, "InvalidParameter", f"'{attached_id}' is not a virtual machine scale set id.",
                           "properties.attachedVirtualMachineScaleSetId")
        if lowered[1] != self.subscription_id.lower():
            raise ArmError(400, "InvalidParameter", "A standby pool must be in the subscription of its scale set.",
                           "properties.attachedVirtualMachineScaleSetId")
        group = self._groups.get(f"{parts[3].lower()}/{parts[7].lower()}")
        group = group or next((g for g in self._groups.values()
                               if g.resource_group.lower() == lowered[3] and g.name.lower() == lowered[7]), None)
        if group is None:
            raise ArmError(400, "InvalidParameter", f"The virtual machine scale set '{attached_id}' was not found.",
                           "properties.attachedVirtualMachineScaleSetId")
        if not group.flexible:
            raise ArmError(400, "InvalidParameter", "Standby pools support Virtual Machine Scale Sets with Flexible "
                                                    "orchestration only.", "properties.attachedVirtualMachineScaleSetId")
        other = next((p for p in self._standby_pools.values() if p.attached_key == group.key and p.key != pool_key),
                     None)
        if other is not None:
            raise ArmError(409, "Conflict", f"The virtual machine scale set '{group.name}' already has the standby "
                                            f"pool '{other.name}'.")
        return group.key


__all__ = ["MAX_POOL_AND_SET", "MAX_READY_LIMIT", "PoolVmSim", "StandbyPoolSim", "StandbyPoolsPart", "pool_size"]
