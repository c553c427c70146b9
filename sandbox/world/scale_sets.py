"""VM Scale Sets in the world: capacity, instances booting, deleted, deallocated and started, ARM operations.

`ScaleSetsPart` owns the scale sets (`ScaleSetSim`, by key) and their instances (`InstanceSim`),
instances already gone (for the report's node-seconds), the long-running operations ARM callers
poll (`Operation`, by id), the throttling token buckets, and the counts of instances alive, their
peak, and those created by scale-ups. It answers the ARM surface's scale set calls: PATCH capacity
(grow, shrink, or an injected allocation failure), delete, deallocate and start instances, and
finishes each operation when its instances get where it sent them. Node objects are
`sandbox.world.nodes`; injected failures come from `sandbox.world.fault_injection`; growing and starting
instances are first admitted (vCPU quota, Spot capacity) by `sandbox.world.spot`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from shared.domain import Taint, group_id
from sandbox.world import kobjects
from sandbox.world.compute import InstanceSim, Operation, ScaleSetSim, computer_name, flexible_names, nic_addresses
from sandbox.world.core import WorldCore
from sandbox.world.errors import ArmError
from sandbox.world.faults import default_scale_up_message
from sandbox.world.instance_mix import choose_size
from sandbox.world.throttling import BUCKETS, TokenBucket

MAX_CAPACITY = 1000  # a Uniform scale set without single placement group
SCALE_UP_FAILURE_DELAY = 5.0  # sim seconds before an injected allocation failure surfaces
# the cloud node lifecycle controller's taint on a node whose instance the provider reports shut down (deallocated)
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
PREEMPTED_MESSAGE = "Operation execution has been preempted by a more recent operation."


def hibernation_refused(group: ScaleSetSim, target: str = "") -> ArmError | None:
    """Why a deallocate with `hibernate=true` is refused on `group` (None: it is not): hibernation is for Flexible
    sets only, and for those created with `additionalCapabilities.hibernationEnabled` (the sandbox's wording, 400
    InvalidParameter on `hibernate`; the exact text Azure returns is unverified). `target`: the VM or set named."""
    if not group.flexible:
        return ArmError(400, "InvalidParameter", "Hibernation is supported only for virtual machine scale sets in "
                        "Flexible orchestration mode.", "hibernate")
    if not group.spec.hibernation_enabled:
        return ArmError(400, "InvalidParameter", f"Hibernation is not enabled on '{target or group.name}': its VMs "
                        "lack additionalCapabilities.hibernationEnabled.", "hibernate")
    return None


class ScaleSetsPart(WorldCore):
    """Scale sets, their instances and operations. See the module docstring."""

    def _init_scale_set_state(self) -> None:
        self._groups: dict[str, ScaleSetSim] = {}
        self._gone: list[InstanceSim] = []
        self._operations: dict[str, Operation] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}  # (scale set key or "rg:<name>", bucket)
        self._alive = 0
        self._nodes_max = 0
        self._ip_counter = itertools.count(1)
        self._created_by_group: Counter[str] = Counter()  # instances added by scale-ups (initial ones left out)
        # Instances protected from scale-in (VMSS `protectionPolicy.protectFromScaleIn`), by (scale set key, id).
        self._scale_in_protected: set[tuple[str, int]] = set()
        # Per scale set key, the scenario's `allocation_failures` still to come: [spec, increases left].
        self._allocation_failures: dict[str, list[list[Any]]] = {}
        # Instances left Failed by a successful operation, with when (the report's `allocation` section).
        self._failed_instances: list[tuple[float, InstanceSim]] = []
        self._failure_batches = 0  # armed allocation failures consumed so far (InstanceSim.failure_batch)

    def _init_scale_sets(self) -> None:
        for spec in self.scenario.node_groups:
            key = group_id(spec.resource_group, spec.name)
            tags = dict(spec.tags)
            if spec.autoscaled:
                tags |= {
                    "cluster-autoscaler-enabled": "true",
                    "cluster-autoscaler-name": self.scenario.cluster_name,
                    "min": str(spec.min_size),
                    "max": str(spec.max_size),
                }
            group = ScaleSetSim(spec=spec, key=key, capacity=0, tags=tags, unique_id=self._uid(), created_at=0.0)
            self._groups[key] = group
            for _ in range(spec.initial):
                inst = self._new_instance(group, already_running=True)
                self._register_node(inst, created=self.start - spec.initial_age)
            group.capacity = spec.initial
        for failure in self.scenario.scale_up_failures:
            self.fail_next_scale_up(
                failure.scale_set, code=failure.code, message=failure.message, count=failure.count,
                resource_group=failure.resource_group,
            )
        for spec in self.scenario.allocation_failures:
            matched = next(g for g in self._groups.values() if g.name == spec.scale_set
                           and (spec.resource_group is None or g.resource_group.lower() == spec.resource_group.lower()))
            self._allocation_failures.setdefault(matched.key, []).append([spec, spec.count])

    def _boot_delay(self, group: ScaleSetSim, instance_id: int) -> float:
        dist = group.spec.boot_delay or self.scenario.boot_delay
        return dist.sample(self._rng("boot", group.key, instance_id))

    def _new_instance(
        self, group: ScaleSetSim, *, already_running: bool = False, boot: float | None = None
    ) -> InstanceSim:
        """A new member; `boot` replaces the create-and-boot delay (a Standby Pool VM the scale-out took)."""
        instance_id = group.next_instance_id
        group.next_instance_id += 1
        if boot is None:
            boot = 0.0 if already_running else self._boot_delay(group, instance_id)
        zones = group.spec.zones
        vm_name = ""
        if group.flexible:  # a plain VM `{vmss}_{8 hex}`, hostname `{prefix}{6 hex}`, from its own seeded stream
            vm_name, hostname = self._flexible_names(group, instance_id)
        else:
            hostname = computer_name(group.spec.computer_name_prefix, instance_id)
        inst = InstanceSim(
            group_key=group.key,
            instance_id=instance_id,
            computer_name=hostname,
            vm_id=self._uid(),
            zone=zones[instance_id % len(zones)] if zones else "",
            created_at=self._t,
            boot_delay=boot,
            provision_at=self._t + boot * self.scenario.provisioning_fraction,
            ready_at=self._t + boot,
            state="Succeeded" if already_running else "Creating",
            power="running" if already_running else "starting",
            ip_index=(ip_index := next(self._ip_counter)),
            node_name=self._node_name(group, hostname),
            vm_name=vm_name,
            vm_size=self._mix_size(group),
        )
        nics = nic_addresses(group.spec, ip_index)
        inst.nic_ips = tuple(ip for _, ip in nics)
        inst.primary_nic = next(i for i, (nic, _) in enumerate(nics) if nic.primary)
        inst.node_nic = next((i for i, (nic, _) in enumerate(nics) if nic.name == group.spec.node_ip), inst.primary_nic)
        group.instances[instance_id] = inst
        if not already_running:
            self._created_by_group[group.key] += 1
        self._alive += 1
        self._nodes_max = max(self._nodes_max, self._alive)
        if not already_running:
            self._push(inst.provision_at, "provisioned", inst)
            self._push(inst.ready_at, "registered", inst)
        return inst

    @staticmethod
    def _mix_size(group: ScaleSetSim) -> str:
        """An instance-mix member's size, by the set's strategy (sandbox.world.instance_mix); "" without a mix."""
        mix = group.spec.instance_mix
        if mix is None:
            return ""
        return choose_size(mix, (i.vm_size for i in group.active())).vm_size

    def _flexible_names(self, group: ScaleSetSim, instance_id: int) -> tuple[str, str]:
        members = [*group.instances.values(), *(i for i in self._gone if i.group_key == group.key)]
        return flexible_names(
            self._rng("flexible-names", group.key, instance_id), group.name, group.spec.computer_name_prefix,
            {i.vm_name.lower() for i in members}, {i.computer_name.lower() for i in members},
        )

    def _instance_named(self, group: ScaleSetSim, raw: str) -> InstanceSim | None:
        """The instance an ARM `instanceIds` entry names: a Flexible member by VM name (case-insensitively, as
        ARM compares names), a Uniform instance by decimal id."""
        if group.flexible:
            wanted = str(raw).lower()
            return next((i for i in group.instances.values() if i.vm_name.lower() == wanted), None)
        return group.instances.get(int(raw)) if str(raw).isdigit() else None

    def _fail_allocations(self, group: ScaleSetSim, created: list[InstanceSim]) -> None:
        """The next `allocation_failures` entry of the set, if any: some of the instances just created will end
        Failed when they would have been provisioned (the operation still succeeds), never registering a node."""
        armed = self._allocation_failures.get(group.key)
        if not armed:
            return
        spec, left = armed[0]
        if left <= 1:
            armed.pop(0)
        else:
            armed[0][1] = left - 1
        message = spec.message or default_scale_up_message(spec.code, group.spec.vm_size, group.spec.location)
        self._failure_batches += 1
        for inst in created[: spec.instances or len(created)]:
            inst.error_code, inst.error_message = spec.code, message
            inst.failure_batch = self._failure_batches

    def _on_provisioned(self, inst: InstanceSim) -> None:
        if inst.state == "Creating" and inst.error_code:
            # Azure could not place it: Failed, no host, no node; still billed and in quota until it is deleted.
            inst.state = "Failed"
            inst.power_seq += 1  # its `registered` event is stale now
            self._groups[inst.group_key].generation += 1
            self._failed_instances.append((self._t, inst))
            return
        if inst.state == "Creating":
            inst.state = "Succeeded"
            inst.power = "running"
            self._groups[inst.group_key].generation += 1

    def _start_instance_delete(self, inst: InstanceSim) -> None:
        if inst.state == "Deleting":
            return
        group = self._groups[inst.group_key]
        inst.state = "Deleting"
        inst.delete_started_at = self._t
        inst.power_seq += 1  # a deallocation or start under way is preempted
        group.generation += 1
        delay = self.scenario.delete_delay.sample(self._rng("delete", group.key, inst.instance_id))
        self._push(self._t + delay, "vanish", inst)
        node = self._store.get("nodes", "", inst.node_name)
        if node is not None and not inst.node_deleted_by_api:
            self._node_lost(node)
            self._kill_pods_on(inst.node_name)

    def _on_vanish(self, inst: InstanceSim) -> None:
        group = self._groups[inst.group_key]
        inst.vanished_at = self._t
        self._scale_in_protected.discard((inst.group_key, inst.instance_id))
        group.instances.pop(inst.instance_id, None)
        group.generation += 1
        self._gone.append(inst)
        if inst.unbilled_since is None:  # a deallocated instance stopped counting when it was deallocated
            self._alive -= 1
        if inst.node_registered and not inst.node_deleted_by_api:
            self._push(self._t + self.scenario.node_removal_delay, "node_gc", inst)

    def _iter_instances(self) -> Iterator[InstanceSim]:
        for group in self._groups.values():
            yield from group.instances.values()
        yield from self._gone


    # ------------------------------------------------------------------ ARM surface

    def scale_sets(self, subscription_id: str, resource_group: str) -> list[ScaleSetSim]:
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            return sorted(
                (g for g in self._groups.values() if g.resource_group.lower() == resource_group.lower()),
                key=lambda g: g.name.lower(),
            )

    def scale_set(self, subscription_id: str, resource_group: str, name: str) -> ScaleSetSim:
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            group = self._groups.get(group_id(resource_group, name))
            if group is None:
                raise ArmError(
                    404,
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource group "
                    f"'{resource_group}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
                )
            return group

    def _check_resource_group(self, subscription_id: str, resource_group: str) -> None:
        if subscription_id.lower() != self.subscription_id.lower():
            raise ArmError(404, "SubscriptionNotFound", f"The subscription '{subscription_id}' could not be found.")
        if resource_group.lower() not in {rg.lower() for rg in self.scenario.resource_groups}:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{resource_group}' could not be found.")

    def instances(self, group: ScaleSetSim) -> list[InstanceSim]:
        with self.lock:
            return sorted(group.instances.values(), key=lambda i: i.instance_id)

    def provisioning_state(self, group: ScaleSetSim) -> str:
        with self.lock:
            busy = any(op.status == "InProgress" and op.group_key == group.key for op in self._operations.values())
            return "Updating" if busy else "Succeeded"

    def set_capacity(self, group: ScaleSetSim, capacity: int, tags: Mapping[str, str] | None = None) -> Operation:
        """PATCH sku.capacity: grow creates instances, shrink deletes the highest ids (Azure's default scale-in)."""
        with self.lock:
            if capacity < 0 or capacity > MAX_CAPACITY:
                raise ArmError(
                    400, "InvalidParameter", f"The value {capacity} of parameter 'sku.capacity' is out of range. "
                    f"The value must be between 0 and {MAX_CAPACITY}, inclusive.", "sku.capacity",
                )
            active = group.active()
            current = len(active)  # capacity can run ahead of instances while an injected failure is pending
            if capacity > current:
                # Quota, then Spot capacity (sandbox.world.spot): a refusal raises before anything changes; a Spot
                # allocation failure is armed at the front of scale_up_failures, consumed just below.
                self._admit_capacity_increase(group, current, capacity)
            if tags is not None:
                group.tags = dict(tags)
            op = Operation(op_id=self._uid(), kind="scale", group_key=group.key, started_at=self._t)
            self._operations[op.op_id] = op
            group.generation += 1
            if capacity > current and group.scale_up_failures:
                failure = group.scale_up_failures[0]
                self._log_increase(group, "capacity", group.capacity, capacity, failure.code)
                failure.remaining -= 1
                if failure.remaining <= 0:
                    group.scale_up_failures.pop(0)
                op.error_code, op.error_message = failure.code, failure.message
                op.revert_capacity_from, op.revert_capacity_to = capacity, current
                group.capacity = capacity
                self._push(self._t + SCALE_UP_FAILURE_DELAY, "op_fail", op)
                return op
            if capacity > current:
                self._log_increase(group, "capacity", group.capacity, capacity, "ok")
                # A Flexible set's Standby Pool gives its ready VMs first (sandbox.world.standby_pools).
                pooled = self._take_from_pool(group, capacity - current)
                created = [self._new_instance(group, boot=pooled[n] if n < len(pooled) else None)
                           for n in range(capacity - current)]
                self._fail_allocations(group, created)
                op.instance_ids = frozenset(i.instance_id for i in created)
                self._note_quota_peaks()
            elif capacity < current:
                # Azure's scale-in skips instances protected from scale-in (the scale-in policy's rules pick among
                # "the ones that are not protected"). With too few unprotected ones, the sandbox removes those it
                # may and capacity stops there: what Azure does then is unverified.
                unprotected = [i for i in active if not self.is_scale_in_protected(i)]
                victims = unprotected[len(unprotected) - min(current - capacity, len(unprotected)):]
                for inst in victims:
                    self._start_instance_delete(inst)
                op.kind = "delete"
                op.instance_ids = frozenset(i.instance_id for i in victims)
                capacity = current - len(victims)
            group.capacity = capacity
            self._dirty = True
            self._finish_operations()
            return op

    def is_scale_in_protected(self, inst: InstanceSim) -> bool:
        return (inst.group_key, inst.instance_id) in self._scale_in_protected

    def set_scale_in_protection(self, group: ScaleSetSim, instance_id: str, protect: bool) -> InstanceSim:
        """PUT a VMSS VM's `protectionPolicy.protectFromScaleIn` (Uniform only: sandbox.api.flexible answers Flexible
        sets). Applied at once; a delete naming the instance still deletes it, as Azure's docs say."""
        with self.lock:
            inst = self._instance_named(group, instance_id)
            if inst is None or group.flexible:
                raise ArmError(
                    404, "ResourceNotFound",
                    f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{instance_id}' "
                    f"under resource group '{group.spec.resource_group}' was not found.",
                )
            if inst.state == "Deleting":
                raise ArmError(409, "OperationNotAllowed",
                               f"Instance {instance_id} of scale set {group.name} is being deleted.")  # wording unverified
            self._touch_untagged_instances(group, [inst])
            key = (inst.group_key, inst.instance_id)
            (self._scale_in_protected.add if protect else self._scale_in_protected.discard)(key)
            return inst

    def delete_instances(self, group: ScaleSetSim, instance_ids: list[str]) -> Operation:
        """POST .../delete: the named instances go; capacity drops by the number that were active.

        Flexible sets name members by VM name, and a VM DELETE (sandbox.api.flexible) lands here too. Their
        sku.capacity is modelled as the member count, so deleting a VM either way lowers it: inferred, not
        verified (shared/facts/cluster-shapes.md says whether a direct VM DELETE lowers capacity is unverified)."""
        with self.lock:
            if not instance_ids:
                raise ArmError(400, "InvalidParameter", "The value of parameter instanceIds is invalid.", "instanceIds")
            targets: list[InstanceSim] = []
            for raw in instance_ids:
                inst = self._instance_named(group, raw)
                if inst is None:
                    # ARM refuses the whole request; count every instance it named (one gone already: a second delete).
                    for named in instance_ids:
                        self.counters.instance_deletes_refused[f"{group.name}/{named}"] += 1
                    raise ArmError(
                        400,
                        "InvalidParameter",
                        f"The provided instanceId {raw} is not an active Virtual Machine Scale Set VM instanceId.",
                        "instanceIds",
                    )
                if inst not in targets:
                    targets.append(inst)
            self._touch_untagged_instances(group, targets)
            op = Operation(
                op_id=self._uid(), kind="delete", group_key=group.key, started_at=self._t,
                instance_ids=frozenset(i.instance_id for i in targets),
            )
            self._operations[op.op_id] = op
            for inst in targets:
                self.counters.instances_deleted[f"{group.name}/{inst.arm_id}"] += 1
                if inst.state != "Deleting":
                    group.capacity -= 1
                    self._start_instance_delete(inst)
            group.generation += 1
            self._dirty = True
            return op


    # ------------------------------------------------------------------ deallocate and start instances

    def deallocate_instances(self, group: ScaleSetSim, instance_ids: list[str] | None, *,
                             hibernate: bool = False) -> Operation:
        """POST .../deallocate: the instances (every one when none are named, as ARM does) shut down and release
        their hardware; they stay in the scale set and in sku.capacity. Already deallocating or deallocated
        ones are left as they are. Not billed once deallocated. `hibernate` (the query parameter `hibernate=true`):
        their memory is kept on disk (billed as one, see the report's stopped_disks) and a start resumes them;
        refused, before anything changes, on a set not created hibernation-enabled (`hibernation_refused`)."""
        with self.lock:
            if hibernate:
                refusal = hibernation_refused(group)
                if refusal is not None:
                    raise refusal
            targets = self._power_targets(group, instance_ids, "deallocate")
            self._touch_untagged_instances(group, targets)
            for inst in targets:
                self.counters.instances_deallocated[f"{group.name}/{inst.arm_id}"] += 1
                if inst.power not in ("deallocating", "deallocated"):
                    self._start_deallocation(inst, hibernate=hibernate)
            return self._power_operation(group, "deallocate", targets)

    def start_instances(self, group: ScaleSetSim, instance_ids: list[str] | None) -> Operation:
        """POST .../start: deallocating or deallocated instances boot again (the scenario's start delay); their node
        registers Ready under the same name. Starting or running ones are left as they are (a no-op success)."""
        with self.lock:
            targets = self._power_targets(group, instance_ids, "start")
            # Quota and Spot capacity (sandbox.world.spot): a refusal raises before anything changes.
            self._touch_untagged_instances(group, targets)
            failure = self._admit_start(group, targets)
            for inst in targets:
                self.counters.instances_started[f"{group.name}/{inst.arm_id}"] += 1
            if failure is not None:  # a Spot allocation failure: the operation fails later, no instance starts
                op = Operation(
                    op_id=self._uid(), kind="start", group_key=group.key, started_at=self._t,
                    instance_ids=frozenset(i.instance_id for i in targets), error_code=failure[0],
                    error_message=failure[1],
                )
                self._operations[op.op_id] = op
                self._push(self._t + SCALE_UP_FAILURE_DELAY, "op_fail", op)
                return op
            for inst in targets:
                if inst.power in ("deallocating", "deallocated"):
                    self._start_boot(inst)
            self._note_quota_peaks()
            return self._power_operation(group, "start", targets)

    def _power_targets(self, group: ScaleSetSim, instance_ids: list[str] | None, verb: str) -> list[InstanceSim]:
        """The instances a deallocate or start names, all checked before anything changes (ARM refuses the whole
        request). None or [] means every instance of the scale set (those being deleted left out)."""
        if not instance_ids:
            return group.active()
        targets: list[InstanceSim] = []
        for raw in instance_ids:
            inst = self._instance_named(group, raw)
            if inst is None:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The provided instanceId {raw} is not an active Virtual Machine Scale Set VM instanceId.",
                    "instanceIds",
                )
            if inst.state == "Deleting":
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"Operation '{verb}' is not allowed on VM '{inst.vm_name or f'{group.name}_{inst.instance_id}'}' "
                    "since it is being deleted.",
                )
            if inst not in targets:
                targets.append(inst)
        return targets

    def _power_operation(
        self, group: ScaleSetSim, kind: Literal["deallocate", "start"], targets: list[InstanceSim]
    ) -> Operation:
        op = Operation(
            op_id=self._uid(), kind=kind, group_key=group.key, started_at=self._t,
            instance_ids=frozenset(i.instance_id for i in targets),
            power_seqs=tuple((i.instance_id, i.power_seq) for i in targets),
        )
        self._operations[op.op_id] = op
        group.generation += 1
        self._dirty = True
        self._finish_operations()  # nothing to do (already there): succeeded at once
        return op

    def _start_deallocation(self, inst: InstanceSim, *, hibernate: bool = False) -> None:
        """Provisioning Updating, power deallocating: the VM shuts down now, so kubelet stops (the node goes
        NotReady as when its VM is deleted, its workload pods die); deallocated after `deallocate_delay`."""
        group = self._groups[inst.group_key]
        inst.power_seq += 1
        inst.hibernated, inst.resumed = hibernate, False
        if inst.first_stopped_at is None:
            inst.first_stopped_at = self._t
        inst.state, inst.power = "Updating", "deallocating"
        group.generation += 1
        dist = self.scenario.deallocate_delay or self.scenario.delete_delay
        delay = dist.sample(self._rng("deallocate", group.key, inst.instance_id, inst.power_seq))
        self._push(self._t + delay, "power_done", (inst, inst.power_seq))
        node = self._store.get("nodes", "", inst.node_name)
        if node is not None and self._by_node.get(inst.node_name) is inst:
            self._node_lost(node)
            self._kill_pods_on(inst.node_name)
        self._dirty = True

    def _start_boot(self, inst: InstanceSim) -> None:
        """Provisioning Updating, power starting: billed again from now; running (the operation done) after
        `provisioning_fraction` of a start delay (the scenario's `start_delay`, not the create-and-boot
        `boot_delay`), the node Ready after all of it."""
        group = self._groups[inst.group_key]
        inst.power_seq += 1
        inst.starts += 1
        inst.start_times.append(self._t)
        if inst.unbilled_since is not None:
            inst.unbilled_seconds += self._t - inst.unbilled_since
            if inst.hibernated:
                inst.hibernated_seconds += self._t - inst.unbilled_since
            inst.unbilled_since = None
            self._alive += 1
            self._nodes_max = max(self._nodes_max, self._alive)
        inst.state, inst.power = "Updating", "starting"
        group.generation += 1
        # A start is not a create: its own delay (the scenario's `start_delay`), drawn from its own seeded stream. A
        # hibernated VM resumes: no published figure either, so the same distribution is assumed, from a stream of
        # its own (sandbox.model.os_disks and docs/scenarios.md say so).
        stream = "resume" if inst.hibernated else "start"
        inst.resumed, inst.hibernated = inst.hibernated, False
        inst.boot_delay = self.scenario.start_delay.sample(self._rng(stream, group.key, inst.instance_id, inst.starts))
        inst.provision_at = self._t + inst.boot_delay * self.scenario.provisioning_fraction
        inst.ready_at = self._t + inst.boot_delay
        inst.start_ready_times.append(inst.ready_at)
        self._push(inst.provision_at, "power_done", (inst, inst.power_seq))
        self._push(inst.ready_at, "rebooted", (inst, inst.power_seq))
        self._dirty = True

    def _on_power_done(self, payload: tuple[InstanceSim, int]) -> None:
        inst, seq = payload
        if not inst.alive or inst.power_seq != seq or inst.state == "Deleting":
            return  # preempted by a later deallocate, start or delete
        self._groups[inst.group_key].generation += 1
        if inst.power == "starting":
            inst.state, inst.power = "Succeeded", "running"
        elif inst.power == "deallocating":
            inst.state, inst.power = "Succeeded", "deallocated"
            inst.unbilled_since = self._t
            self._alive -= 1
            node = self._store.get("nodes", "", inst.node_name)
            if node is not None and self._by_node.get(inst.node_name) is inst:
                # The cloud node lifecycle controller: the provider reports the instance shut down.
                taints = node.setdefault("spec", {}).setdefault("taints", [])
                if not any(t.get("key") == SHUTDOWN_TAINT for t in taints):
                    taints.append(kobjects.taint_json(Taint(SHUTDOWN_TAINT, "", "NoSchedule"), self._ts()))
                self._store.touch(node)

    def _on_rebooted(self, payload: tuple[InstanceSim, int]) -> None:
        """A started instance has booted: kubelet registers its node again under the same name (the hostname,
        or the name the flavour's kubelet is configured with, is unchanged). A Node object left from before the deallocation is made Ready again (the
        lifecycle controllers lift their taints), keeping its labels, taints of ours and unschedulable flag; a
        deleted one is created afresh by a booted kubelet. A resumed (hibernated) VM's kubelet never stopped: it
        registered once and does not register again, so a Node deleted under it stays gone and the VM runs
        without one (the kubelet's behaviour: kubernetes/kubernetes#71398, #116485; an assumption for kubelets
        that may change it, stated in docs/standby.md)."""
        inst, seq = payload
        if not inst.alive or inst.power_seq != seq or inst.power != "running":
            return
        node = self._store.get("nodes", "", inst.node_name)
        if node is None or self._by_node.get(inst.node_name) is not inst:
            if inst.resumed:
                inst.lost_node = True
                return
            inst.node_deleted_by_api = False
            self._register_node(inst)
            return
        now = self._ts()
        kobjects.set_condition(
            node,
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            },
        )
        spec = node.setdefault("spec", {})
        lifted = ("node.kubernetes.io/unreachable", SHUTDOWN_TAINT)
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") not in lifted]
        if not spec["taints"]:
            del spec["taints"]
        node.setdefault("status", {}).setdefault("nodeInfo", {})["bootID"] = self._uid()
        self._store.touch(node)
        self._retry_all_pending = True


    # ------------------------------------------------------------------ long-running operations and throttling

    def operation(self, op_id: str) -> Operation | None:
        with self.lock:
            return self._operations.get(op_id)

    def _on_op_fail(self, op: Operation) -> None:
        group = self._groups[op.group_key]
        if group.capacity == op.revert_capacity_from and op.revert_capacity_to is not None:
            group.capacity = op.revert_capacity_to
            group.generation += 1
        op.status, op.ended_at = "Failed", self._t

    def _finish_operations(self) -> None:
        for op in self._operations.values():
            if op.status != "InProgress" or op.error_code is not None:
                continue
            group = self._groups[op.group_key]
            if op.kind == "scale":
                done = all(group.instances.get(i) is None or group.instances[i].state != "Creating" for i in op.instance_ids)
            elif op.kind in ("deallocate", "start"):
                # Done when every instance got there; failed when a later deallocate, start or delete took one over.
                goal = "deallocated" if op.kind == "deallocate" else "running"
                current = [(group.instances.get(i), seq) for i, seq in op.power_seqs]
                if any(inst is None or inst.power_seq != seq for inst, seq in current):
                    op.status, op.ended_at = "Failed", self._t
                    op.error_code, op.error_message = "OperationPreempted", PREEMPTED_MESSAGE
                    continue
                done = all(inst is not None and inst.power == goal for inst, _ in current)
            else:
                done = all(i not in group.instances for i in op.instance_ids)
            if done:
                op.status, op.ended_at = "Succeeded", self._t

    def allocation_report(self) -> dict[str, Any]:
        """The report's `allocation` section: instances a successful capacity increase left Failed, by code; how
        long each stayed before its delete was asked for (`detect_lag_s_max`; one still there counts to now);
        and how long after each increase's first failed instance another scale set was grown (`fallback_lag_s_max`;
        none: to now). Per increase, not per instance: its instances fail at their own provisioning times, and a
        later one's pods may fit room the first fallback already asked for, which needs no growth of its own (how
        long pods waited is `pending_wait_s`)."""
        with self.lock:
            by_code: Counter[str] = Counter()
            detect, fallback, log = [], [], []
            first_failure: dict[tuple[str, int], float] = {}
            for failed_at, inst in self._failed_instances:
                key = (inst.group_key, inst.failure_batch)
                first_failure[key] = min(failed_at, first_failure.get(key, failed_at))
            for (group_key, _), failed_at in first_failure.items():
                group = self._groups[group_key]
                grown = [e["t"] for e in self._capacity_log
                         if e["outcome"] == "ok" and e["scale_set"] != group.name and e["t"] >= failed_at]
                fallback.append((min(grown) if grown else self._t) - failed_at)
            for failed_at, inst in self._failed_instances:
                group = self._groups[inst.group_key]
                by_code[inst.error_code] += 1
                deleted_at = inst.delete_started_at
                detect.append((deleted_at if deleted_at is not None else self._t) - failed_at)
                log.append({"t": round(failed_at, 3), "scale_set": group.name, "instance": str(inst.report_id),
                            "code": inst.error_code,
                            "delete_asked": round(deleted_at, 3) if deleted_at is not None else None})
            return {
                "failed_instances": dict(sorted(by_code.items())),
                "failed_total": len(self._failed_instances),
                "deleted": sum(1 for _, inst in self._failed_instances if inst.delete_started_at is not None),
                "failed_at_end": sum(1 for _, inst in self._failed_instances if inst.alive),
                "detect_lag_s_max": round(max(detect), 3) if detect else None,
                "fallback_lag_s_max": round(max(fallback), 3) if fallback else None,
                "log": log,
            }

    def take_token(self, key: str, bucket: str) -> tuple[bool, int, float, str] | None:
        """Spend one token of a throttling bucket; None when the scenario turns throttling off."""
        with self.lock:
            if not self.scenario.arm_throttling:
                return None
            token_bucket = self._buckets.get((key, bucket))
            if token_bucket is None:
                token_bucket = self._buckets[(key, bucket)] = TokenBucket.full(BUCKETS[bucket], self._t)
            allowed, remaining, retry = token_bucket.take(self._t)
            if not allowed:
                self.counters.arm_throttled += 1
            return allowed, remaining, retry, token_bucket.header(remaining)

