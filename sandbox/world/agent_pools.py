"""AKS agent pools in the world: the pools of the cluster as a managed cluster, their operations, their machines.

`AgentPoolsPart` keeps, for each node group declared with `agent_pool` (`sandbox.model.agent_pools`), what
the agentPools API can change: mode, AKS's autoscaler flag and bounds, tags, and the pool's latest
operation. `count` is the scale set's capacity, the machines are its instances (machine name = node
name), so the scale set stays the one source of truth. It answers `sandbox.api.agent_pools_api`:

- a PUT with a new `count` is a long-running operation over the scale set: growing creates instances
  (an allocation failure armed for the scale set fails it), shrinking deletes cordoned nodes' instances
  first, then the highest instance ids (what AKS does: the scale set's default scale-in policy, with
  cordoned nodes preferred; public test notes, unverified by Microsoft docs). AKS cordons and drains
  before a count scale-down; the sandbox does not model that drain. The operation succeeds once the
  new nodes have registered Ready (AKS waits for its nodes) or the deleted instances are gone, and the
  pool reads `Scaling` until then;
- `deleteMachines` deletes the named machines' instances and lowers `count` (no cordon, no drain);
- one operation at a time per pool: another PUT or deleteMachines meanwhile is refused with AKS's
  409 `OperationNotAllowed`.

A `VirtualMachines` pool (several sizes, AKS keeps plain VMs) stands on one Flexible scale set per size
(`sandbox.model.agent_pools.vm_pool_parts`), so its machines are plain VMs with their own ARM ids and
their size's allocatable: `count` is their sum, a PUT gives a count per size (`update_vm_agent_pool`:
each size's set grows or shrinks as a VMSS pool's does), deleteMachines deletes named machines of any size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sandbox.model.agent_pools import MAX_COUNT, AgentPoolSpec
from sandbox.world.compute import InstanceSim, Operation, OperationStatus, ScaleSetSim
from sandbox.world.core import WorldCore
from sandbox.world.errors import ArmError
from sandbox.world.faults import default_scale_up_message

_DISCOVERY_TAGS = ("cluster-autoscaler-enabled", "cluster-autoscaler-name", "min", "max")
PENDING_OPERATION_LINK = "https://aka.ms/aks-pending-operation"
# What AKS answers to a change of `count` on a pool its cluster autoscaler drives: wording from a public report
# (terraform-provider-azurerm PR #4543, 2019, against the managedClusters PUT); the agentPools PUT's is unverified.
AUTOSCALED_COUNT_MESSAGE = (
    "Cannot manually scale AgentPool '{pool}' of an AKS cluster with cluster autoscaler enabled. "
    "Please disable cluster autoscaler in the cluster to manually scale."
)
# Turning the autoscaler on while changing count (Azure/AKS#1248, 2019: 400 Bad Request; its code unverified).
ENABLE_AND_SCALE_MESSAGE = (
    "Cannot manually scale and enable cluster autoscaler in the same update operation on VMSS Agentpool '{pool}'."
)
# A count out of range (azure-cli PR #22442, 2022: 400 InvalidParameter, target agentPoolProfile.count).
INVALID_COUNT_MESSAGE = (
    "The value of parameter agentPoolProfile.count is invalid. Please see https://aka.ms/aks-naming-rules for more details."
)
# deleteMachines naming no machine of the pool (400 InvalidParameter; the wording Microsoft's
# karpenter-provider-azure quotes from AKS and matches on, aksmachineinstance helpers and their tests).
NO_VALID_MACHINES_MESSAGE = (
    "Cannot find any valid machines to delete. Please check your input machine names. "
    "The valid machines to delete in agent pool '{pool}' are: {machines}."
)


@dataclass(slots=True)
class AgentPoolSim:
    """What the agentPools API can change of a pool; `count` and the machines are its scale sets'."""

    spec: AgentPoolSpec
    group_keys: tuple[str, ...]  # its scale set; a VirtualMachines pool's: one per size, in its sizes' order
    mode: str
    enable_auto_scaling: bool
    min_count: int | None
    max_count: int | None
    tags: dict[str, str]
    version: int = 1  # bumped by every change through the API: the eTag
    operation: str | None = None  # the latest operation's id

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def group_key(self) -> str:
        """Its (first) scale set: a VMSS pool's only one."""
        return self.group_keys[0]

    @property
    def etag(self) -> str:
        return hashlib.sha256(f"{self.spec.name}/{self.version}".encode()).hexdigest()[:12]


PoolOperationKind = Literal["update", "scale", "delete_machines"]


@dataclass(slots=True)
class PoolOperation:
    """An AKS async operation on a pool, over the scale set operation doing the work (none for a plain update)."""

    op_id: str
    pool: str
    kind: PoolOperationKind
    started_at: float
    compute_ops: tuple[str, ...] = ()  # one per scale set it changes (a VirtualMachines pool's sizes: several)
    created: frozenset[tuple[str, int]] = frozenset()  # (group key, instance id) of new instances whose nodes
    # must register before it succeeds
    status: OperationStatus = "InProgress"
    ended_at: float | None = None
    error_code: str | None = None
    error_message: str | None = None


class AgentPoolsPart(WorldCore):
    """AKS agent pools over the scale sets behind them. See the module docstring."""

    def _init_agent_pools(self) -> None:
        """The scenario's pools, after the scale sets (their discovery tags are the pool's too: AKS propagates
        a pool's tags to its scale set)."""
        self._agent_pools: dict[str, AgentPoolSim] = {}
        self._pool_operations: dict[str, PoolOperation] = {}
        for group in self._groups.values():
            pool = group.spec.agent_pool
            if pool is None:
                continue
            known = self._agent_pools.get(pool.name)
            if known is not None and pool.multi_size:  # the next size of a VirtualMachines pool
                known.group_keys = (*known.group_keys, group.key)
                continue
            discovery = {k: v for k, v in group.tags.items() if k in _DISCOVERY_TAGS} if group.spec.autoscaled else {}
            self._agent_pools[pool.name] = AgentPoolSim(
                spec=pool, group_keys=(group.key,), mode=pool.mode, enable_auto_scaling=pool.enable_auto_scaling,
                min_count=pool.min_count, max_count=pool.max_count, tags={**pool.tags, **discovery},
            )

    def _is_managed_set(self, group: ScaleSetSim) -> bool:
        """Whether an autoscaler may touch the scale set's nodes: it carries the discovery tags, or it is a size of
        a VirtualMachines pool whose own tags mark it for this cluster (such sizes have no bounds of their own,
        so their sets are `autoscaled: false`)."""
        pool = group.spec.agent_pool
        if group.spec.autoscaled or pool is None or not pool.multi_size:
            return group.spec.autoscaled
        sim = self._agent_pools.get(pool.name)
        tags = sim.tags if sim is not None else {}
        return (tags.get("cluster-autoscaler-enabled", "").lower() == "true"
                and tags.get("cluster-autoscaler-name") == self.scenario.cluster_name)

    # ------------------------------------------------------------------ reads

    def agent_pools(self) -> list[AgentPoolSim]:
        with self.lock:
            return sorted(self._agent_pools.values(), key=lambda p: p.name)

    def agent_pool(self, name: str) -> AgentPoolSim:
        with self.lock:
            pool = self._agent_pools.get(name.lower())
            if pool is None:
                # Code as AKS answers a missing pool (404 NotFound); the wording is unverified.
                raise ArmError(404, "NotFound", f"Agent pool '{name}' was not found in the managed cluster.")
            return pool

    def agent_pool_group(self, pool: AgentPoolSim) -> ScaleSetSim:
        with self.lock:
            return self._groups[pool.group_key]

    def agent_pool_groups(self, pool: AgentPoolSim) -> list[ScaleSetSim]:
        """The scale sets behind the pool: one, or a VirtualMachines pool's one per size (its sizes' order)."""
        with self.lock:
            return [self._groups[key] for key in pool.group_keys]

    def agent_pool_count(self, pool: AgentPoolSim) -> int:
        with self.lock:
            return sum(group.capacity for group in self.agent_pool_groups(pool))

    def agent_pool_size_counts(self, pool: AgentPoolSim) -> list[tuple[str, int]]:
        """(size, count) of each of the pool's sizes (a VMSS pool: its one size), as `scale.manual` lists them."""
        with self.lock:
            return [(group.spec.vm_size, group.capacity) for group in self.agent_pool_groups(pool)]

    def agent_pool_state(self, pool: AgentPoolSim) -> str:
        """provisioningState: Scaling while a count change or deleteMachines runs, Failed after a failed one."""
        with self.lock:
            op = self.agent_pool_operation(pool.operation) if pool.operation else None
            if op is None or op.status == "Succeeded":
                return "Succeeded"
            if op.status == "Failed":
                return "Failed"
            return "Updating" if op.kind == "update" else "Scaling"

    def agent_pool_operation(self, op_id: str) -> PoolOperation | None:
        with self.lock:
            op = self._pool_operations.get(op_id)
            if op is not None:
                self._settle(op)
            return op

    def machines(self, pool: AgentPoolSim) -> list[InstanceSim]:
        """The pool's machines: its scale sets' instances (those being deleted too, until they are gone)."""
        with self.lock:
            return [inst for group in self.agent_pool_groups(pool)
                    for inst in sorted(group.instances.values(), key=lambda i: i.instance_id)]

    def machine_group(self, inst: InstanceSim) -> ScaleSetSim:
        with self.lock:
            return self._groups[inst.group_key]

    def machine(self, pool: AgentPoolSim, name: str) -> InstanceSim | None:
        with self.lock:
            return next((i for i in self.machines(pool) if i.node_name.lower() == name.lower()), None)

    # ------------------------------------------------------------------ changes

    def update_agent_pool(
        self, pool: AgentPoolSim, *, count: int, mode: str, enable_auto_scaling: bool, min_count: int | None,
        max_count: int | None, tags: Mapping[str, str] | None,
    ) -> PoolOperation:
        """A PUT of the pool (already parsed): checked as AKS checks it, then applied; a new count starts the scale."""
        with self.lock:
            self._refuse_if_busy(pool)
            group = self._groups[pool.group_key]
            current = group.capacity
            if not (1 if mode == "System" else 0) <= count <= MAX_COUNT:
                raise ArmError(400, "InvalidParameter", INVALID_COUNT_MESSAGE, "agentPoolProfile.count")
            _check_autoscale_bounds(mode, enable_auto_scaling, min_count, max_count)
            if enable_auto_scaling and count != current:
                message = AUTOSCALED_COUNT_MESSAGE if pool.enable_auto_scaling else ENABLE_AND_SCALE_MESSAGE
                raise ArmError(400, "InvalidParameter", message.format(pool=pool.name), "properties.count")
            self._refuse_restricted_increase(group, count, "properties.vmSize")
            # Growing first: a refusal for quota or Spot capacity (sandbox.world.spot) leaves the pool unchanged.
            compute = self.set_capacity(group, count) if count > current else None
            pool.mode, pool.enable_auto_scaling = mode, enable_auto_scaling
            pool.min_count, pool.max_count = min_count, max_count
            self._retag_pool(pool, tags)
            if compute is not None:
                op = self._pool_operation(pool, "scale", [compute], created=_created(group, compute))
            elif count < current:
                op = self._pool_operation(pool, "scale", [self._scale_in(group, current - count)])
            else:
                op = self._pool_operation(pool, "update", [])
            return op

    def update_vm_agent_pool(self, pool: AgentPoolSim, *, counts: Mapping[str, int],
                             tags: Mapping[str, str] | None) -> PoolOperation:
        """A PUT of a VirtualMachines pool (already parsed): `counts` by size (every size of the pool, as
        `virtualMachinesProfile.scale.manual` gives them); each size's scale set grows or shrinks to its count."""
        with self.lock:
            self._refuse_if_busy(pool)
            groups = {group.spec.vm_size.lower(): group for group in self.agent_pool_groups(pool)}
            total = sum(counts.values())
            if not (1 if pool.mode == "System" else 0) <= total <= MAX_COUNT:
                raise ArmError(400, "InvalidParameter", INVALID_COUNT_MESSAGE, "agentPoolProfile.count")
            targets = [(groups[size.lower()], count) for size, count in counts.items()]
            for group, count in targets:
                self._refuse_restricted_increase(group, count, "properties.virtualMachinesProfile")
            grown: list[tuple[ScaleSetSim, Operation]] = []
            for group, count in targets:  # growing first: a refusal (quota) leaves the shrinking sizes alone
                if count > group.capacity:
                    grown.append((group, self.set_capacity(group, count)))
            shrunk = [self._scale_in(group, group.capacity - count) for group, count in targets
                      if count < group.capacity]
            self._retag_pool(pool, tags)
            created = frozenset().union(*(_created(group, op) for group, op in grown))
            operations = [op for _, op in grown] + shrunk
            return self._pool_operation(pool, "scale" if operations else "update", operations, created=created)

    def _refuse_restricted_increase(self, group: ScaleSetSim, count: int, target: str) -> None:
        """Growing a set of a size restricted for the subscription is refused (logged), as the scale set double
        refuses it; what AKS answers for a restricted size is unverified."""
        if count > group.capacity and _restricted(self.scenario.restricted_vm_sizes, group.spec.vm_size):
            message = default_scale_up_message("SkuNotAvailable", group.spec.vm_size, group.spec.location)
            self._log_increase(group, "capacity", group.capacity, count, "SkuNotAvailable")
            raise ArmError(409, "SkuNotAvailable", message, target)

    def _retag_pool(self, pool: AgentPoolSim, tags: Mapping[str, str] | None) -> None:
        """New pool tags on every scale set behind it (AKS propagates a pool's tags): the old ones go."""
        if tags is None or dict(tags) == pool.tags:
            return
        for group in self.agent_pool_groups(pool):
            group.tags = {k: v for k, v in group.tags.items() if k not in pool.tags} | dict(tags)
            group.generation += 1
        pool.tags = dict(tags)

    def delete_agent_pool_machines(self, pool: AgentPoolSim, names: list[str]) -> PoolOperation:
        """deleteMachines: the named machines' instances go and `count` drops with them. AKS neither cordons nor
        drains. Names of no machine of the pool are left out (the wording of AKS's error, "Cannot find any valid
        machines", suggests it goes on with the valid ones; unverified); none valid refuses the request."""
        with self.lock:
            self._refuse_if_busy(pool)
            by_name = {i.node_name.lower(): i for group in self.agent_pool_groups(pool) for i in group.instances.values()}
            keys = set(pool.group_keys)
            valid: list[InstanceSim] = []
            refused: list[str] = []
            for name in names:
                inst = by_name.get(name.lower())
                if inst is None:
                    refused.append(name)
                elif inst not in valid:
                    valid.append(inst)
            gone = {i.node_name.lower(): i for i in self._gone if i.group_key in keys}
            first = self._groups[pool.group_key]
            for name in refused:  # one gone already (deleted before) counts under its instance id, as for scale sets
                named = gone.get(name.lower())
                where = self._groups[named.group_key].name if named else first.name
                self.counters.instance_deletes_refused[f"{where}/{named.report_id if named else name}"] += 1
            active = [i for group in self.agent_pool_groups(pool) for i in group.active()]
            if not valid:
                choices = ", ".join(i.node_name for i in active)
                raise ArmError(400, "InvalidParameter", NO_VALID_MACHINES_MESSAGE.format(pool=pool.name, machines=choices))
            remaining = len(active) - sum(1 for i in valid if i.state != "Deleting")
            if pool.mode == "System" and remaining < 1:  # a System pool keeps a node (AKS's answer here: unverified)
                raise ArmError(400, "InvalidParameter", INVALID_COUNT_MESSAGE, "agentPoolProfile.count")
            operations = [
                self.delete_instances(group, [i.arm_id for i in valid if i.group_key == group.key])
                for group in self.agent_pool_groups(pool) if any(i.group_key == group.key for i in valid)
            ]
            return self._pool_operation(pool, "delete_machines", operations)

    def _refuse_if_busy(self, pool: AgentPoolSim) -> None:
        op = self.agent_pool_operation(pool.operation) if pool.operation else None
        if op is not None and op.status == "InProgress":
            state = "Updating" if op.kind == "update" else "Scaling"
            # AKS's wording (seen in public CI logs, e.g. Azure/azure-workload-identity#417): 409 OperationNotAllowed.
            raise ArmError(
                409, "OperationNotAllowed",
                f"Operation is not allowed: Another operation ({pool.name} - {state}) is in progress, please wait for "
                f"it to finish before starting a new operation. See {PENDING_OPERATION_LINK} for more details",
            )

    def _scale_in(self, group: ScaleSetSim, how_many: int) -> Operation:
        """Lower capacity as AKS does for a smaller count: cordoned nodes' instances first, then the highest ids."""
        active = group.active()

        def cordoned(inst: InstanceSim) -> bool:
            node = self._store.get("nodes", "", inst.node_name)
            return bool(node is not None and (node.get("spec") or {}).get("unschedulable"))

        ranked = sorted(active, key=lambda i: (not cordoned(i), -i.instance_id))
        victims = ranked[:how_many]
        op = Operation(
            op_id=self._uid(), kind="delete", group_key=group.key, started_at=self._t,
            instance_ids=frozenset(i.instance_id for i in victims),
        )
        self._operations[op.op_id] = op
        for inst in victims:  # no instance is named by the caller: counted in neither instances_deleted nor refused
            self._start_instance_delete(inst)
        group.capacity -= len(victims)
        group.generation += 1
        self._dirty = True
        return op

    def _pool_operation(
        self, pool: AgentPoolSim, kind: PoolOperationKind, compute: list[Operation],
        created: frozenset[tuple[str, int]] = frozenset(),
    ) -> PoolOperation:
        op = PoolOperation(
            op_id=self._uid(), pool=pool.name, kind=kind, started_at=self._t,
            compute_ops=tuple(c.op_id for c in compute), created=created,
        )
        self._pool_operations[op.op_id] = op
        pool.operation = op.op_id
        pool.version += 1
        self._settle(op)
        return op

    def _settle(self, op: PoolOperation) -> None:
        """Bring an operation up to date with the scale sets': failed with the first that failed, or done once all
        are and every new instance's node has registered (or the instance went meanwhile)."""
        if op.status != "InProgress":
            return
        if not op.compute_ops:
            op.status, op.ended_at = "Succeeded", op.started_at
            return
        computes = [self._operations[op_id] for op_id in op.compute_ops]
        failed = next((c for c in computes if c.status == "Failed"), None)
        if failed is not None:
            op.status, op.ended_at = "Failed", failed.ended_at
            op.error_code, op.error_message = failed.error_code, failed.error_message
            return
        if any(c.status != "Succeeded" for c in computes):
            return
        created = [self._groups[key].instances.get(i) for key, i in op.created]
        live = [i for i in created if i is not None and i.state != "Deleting" and i.power_seq == 0]
        if any(not i.node_registered for i in live):
            return
        op.status = "Succeeded"
        op.ended_at = max([*(c.ended_at or self._t for c in computes), *(i.ready_at for i in live)])


def _check_autoscale_bounds(mode: str, enabled: bool, min_count: int | None, max_count: int | None) -> None:
    """AKS's rules for minCount and maxCount (InvalidParameter; the wording here is unverified)."""
    if not enabled:
        if min_count is not None or max_count is not None:
            raise ArmError(400, "InvalidParameter", "minCount and maxCount must be null when enableAutoScaling is "
                                                    "false.", "properties.minCount")
        return
    lowest = 1 if mode == "System" else 0
    for field_name, value in (("minCount", min_count), ("maxCount", max_count)):
        if value is None:
            raise ArmError(400, "InvalidParameter", f"Required parameter properties.{field_name} is missing (null).",
                           f"properties.{field_name}")
        if not lowest <= value <= MAX_COUNT:
            raise ArmError(400, "InvalidParameter", f"The value of parameter agentPoolProfile.{field_name} is invalid. "
                                                    f"It must be between {lowest} and {MAX_COUNT}.",
                           f"agentPoolProfile.{field_name}")
    assert min_count is not None and max_count is not None
    if min_count > max_count:
        raise ArmError(400, "InvalidParameter", f"The value of parameter agentPoolProfile.maxCount ({max_count}) must "
                                                f"be at least agentPoolProfile.minCount ({min_count}).",
                       "agentPoolProfile.maxCount")


def _created(group: ScaleSetSim, compute: Operation) -> frozenset[tuple[str, int]]:
    return frozenset((group.key, i) for i in compute.instance_ids)


def _restricted(sizes: tuple[str, ...], vm_size: str) -> bool:
    return vm_size.lower() in {s.lower() for s in sizes}
