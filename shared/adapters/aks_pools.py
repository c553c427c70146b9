"""The NodeGroupProvider of AKS node pools, through the agentPools API (azure-mgmt-containerservice).

Adapter module: every method calls Azure Resource Manager. On AKS, changing the node resource
group's scale sets directly is unsupported; the agent-pool API is the supported way:

* discovery (only with MANAGE_AKS_POOLS=true): the pools of `AKS_CLUSTER_ID` that the operator marks for
  us, with the scale sets' tags (`cluster-autoscaler-enabled=true`, `cluster-autoscaler-name=<CLUSTER_NAME>`, `min`, `max`)
  or by naming them in `AKS_NODE_POOLS` (`pool:min:max`). A marked pool whose AKS cluster autoscaler
  is on is refused (NodeGroup.refused says why): two autoscalers on one pool fight;
* VirtualMachines pools (several VM sizes in one pool, `virtualMachinesProfile.scale.manual` a count per
  size): one NodeGroup per size, a lane (`rg/pool~Standard_D4s_v5`, engine.multi_size), whose capacity is its
  size's count, whose instances are the machines of that size (`properties.hardware.vmSize`, read with
  MACHINES_API_VERSION), grown or shrunk by a PUT changing only its size's count; the pool's min and max
  bound its lanes together;
* instances: the pool's machines (`GET .../agentPools/<pool>/machines`): each machine's name is its
  node's name, and it carries the VM's ARM id and IPs, so every node maps without another read;
* growing: `count` on the pool (GET, change, PUT: a long-running operation, tracked like a scale
  set's); removing: `deleteMachines` with the drained nodes' names (AKS neither cordons nor drains:
  the executor has done both);
* deallocating and starting are AKS's own business (`scaleDownMode: Deallocate`): refused here;
* templates: the pool's VM size, node labels and taints, written as cluster-autoscaler's
  node-template tags on the group.

Groups are named after the pool in the cluster's resource group (`<rg>/<pool>`, a lane `<rg>/<pool>~<size>`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError

from shared import discovery_tags
from shared.adapters.compute import (
    ArmOperations,
    _text,
    arm_client_options,
    compute_error,
    found_or_none,
    if_unchanged,
)
from shared.adapters.compute import arm_id_leaf, with_instance_ids
from shared.adapters.instance_mix import as_lane
from shared.adapters.retail_prices import RetailPrices
from shared.domain import AKS_AGENT_POOL, Instance, NodeGroup, VmSizeCapacity, lane_of, parent_group_id
from shared.ports import CHANGED_SINCE_READ, SCALE_IN_PROTECTION_UNSUPPORTED, ComputeError, Operation
from shared.settings import Settings, parse_aks_cluster_id

log = logging.getLogger(__name__)

# The machines' api-version for VirtualMachines pools: a machine says its VM size (`properties.hardware.vmSize`)
# only from this preview on (azure-rest-api-specs, aks/Machine.tsp: MachineProperties.hardware is
# @added(v2026_03_02_preview)); the stable version the SDK sends (2026-08-01) lists machines without it.
MACHINES_API_VERSION = "2026-03-02-preview"
VIRTUAL_MACHINES = "virtualmachines"  # AgentPoolType of a pool of plain VMs, several sizes allowed
_RESOURCE_TAGS = discovery_tags.template_tag("resources", "")


class AksAgentPools:
    """`shared.ports.NodeGroupProvider` of kind `aks-agentpool` (see the module docstring)."""

    kind = AKS_AGENT_POOL

    def __init__(
        self,
        client: Any,  # azure.mgmt.containerservice.ContainerServiceClient
        *,
        cluster_id: str,
        cluster_name: str,
        named_pools: Mapping[str, tuple[int, int]],
        operation_wait: float,
        prices: RetailPrices | None = None,
        machines_client: Any = None,
    ) -> None:
        self._client = client
        # VirtualMachines pools' machines are read at MACHINES_API_VERSION (their sizes); the same client else.
        self._machines_client = machines_client if machines_client is not None else client
        self._cluster_id = cluster_id
        _, self._resource_group, self._cluster = parse_aks_cluster_id(cluster_id) if cluster_id else ("", "", "")
        self._cluster_name = cluster_name
        self._named = {k.lower(): v for k, v in named_pools.items()}
        self._operations = ArmOperations(operation_wait, client._config.base_url if client else "")  # noqa: SLF001
        self._prices = prices
        self._location = ""

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential) -> AksAgentPools:
        from azure.mgmt.containerservice import ContainerServiceClient

        client = machines = None
        if settings.manage_aks_pools and settings.aks_cluster_id:
            subscription, _, _ = parse_aks_cluster_id(settings.aks_cluster_id)
            options = arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=90)
            client = ContainerServiceClient(credential, subscription, **options)
            machines = ContainerServiceClient(credential, subscription, api_version=MACHINES_API_VERSION, **options)
        return cls(client, cluster_id=settings.aks_cluster_id, cluster_name=settings.cluster_name,
                   named_pools=settings.aks_node_pools, operation_wait=settings.arm_operation_wait.total_seconds(),
                   prices=RetailPrices.from_settings(settings), machines_client=machines)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._machines_client is not None and self._machines_client is not self._client:
            self._machines_client.close()

    def _arm(self, what: str, call: Any) -> Any:
        try:
            return call()
        except AzureError as exc:
            raise compute_error(what, exc) from exc

    # -- discovery ----------------------------------------------------------------------

    def _cluster_location(self) -> str:
        if not self._location:
            cluster = self._arm(f"get AKS cluster {self._cluster_id}",
                                lambda: self._client.managed_clusters.get(self._resource_group, self._cluster))
            self._location = _text(cluster.location)
        return self._location

    def list_node_groups(self) -> list[NodeGroup]:
        if self._client is None:
            return []
        pools = self._arm(f"list agent pools of AKS cluster {self._cluster_id}",
                          lambda: list(self._client.agent_pools.list(self._resource_group, self._cluster)))
        groups = [g for pool in pools for g in self._as_groups(pool)]
        if self._named:
            found = {g.name.lower() for g in groups}
            for name in sorted(set(self._named) - found):
                log.warning("AKS_NODE_POOLS names pool %s, which cluster %s does not have", name, self._cluster_id)
        return groups

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        if self._client is None:
            return None
        rg, _, name = parent_group_id(group_id).partition("/")
        lane = lane_of(group_id)
        if rg.lower() != self._resource_group.lower() or not name:
            return None
        pool = found_or_none(f"get agent pool {name} of AKS cluster {self._cluster_id}",
                             lambda: self._client.agent_pools.get(self._resource_group, self._cluster, name))
        groups = [] if pool is None else self._as_groups(pool)
        return next((g for g in groups if g.lane.lower() == lane.lower()), None)

    def _as_groups(self, pool: Any) -> list[NodeGroup]:
        """The node groups of a pool marked for us (none for a pool that is not): the pool, or one lane per size
        of a VirtualMachines pool. A marked pool AKS autoscales is a group with `refused` set: reported, never
        acted on."""
        group = self._as_group(pool)
        if group is None or not _is_vm_pool(pool):
            return [] if group is None else [group]
        counts = manual_counts(pool)
        if group.refused or not counts:
            why = group.refused or (f"pool {group.name} is of type VirtualMachines with no manual scale profile "
                                    "(virtualMachinesProfile.scale.manual): nothing says its sizes")
            return [replace(group, refused=why)]
        # Lanes take the pool's labels and taints; resource tags describe one size and would mislead the others.
        tags = {k: v for k, v in group.tags.items() if not k.startswith(_RESOURCE_TAGS)}
        sizes = tuple(size for size, _ in counts)
        total = sum(count for _, count in counts)
        lanes = []
        for size, count in counts:
            lanes.append(as_lane(group, size, lanes=sizes, count=count, others=total - count, tags=tags,
                                 allocation_strategy=""))
        return lanes

    def _as_group(self, pool: Any) -> NodeGroup | None:
        """The node group of a pool marked for us, as one group; None for a pool that is not."""
        name = _text(pool.name)
        tags = dict(getattr(pool, "tags", None) or {})
        label = f"AKS pool {self._cluster}/{name}"
        if name.lower() in self._named:
            limits: tuple[int, int] | None = self._named[name.lower()]
        elif discovery_tags.is_ours(tags, self._cluster_name):
            limits = discovery_tags.usable_limits(label, tags, warn=log.warning)
        else:
            return None
        if limits is None:
            return None
        refused = ""
        if getattr(pool, "enable_auto_scaling", False):
            refused = (f"the AKS cluster autoscaler is on for pool {name}: turn it off "
                       f"(az aks nodepool update --disable-cluster-autoscaler) for this autoscaler to manage it")
        autoscale = getattr(getattr(getattr(pool, "virtual_machines_profile", None), "scale", None), "autoscale", None)
        if _is_vm_pool(pool) and autoscale:
            refused = (f"AKS autoscales sizes of pool {name} (virtualMachinesProfile.scale.autoscale): remove its "
                       f"autoscale profiles for this autoscaler to manage it")
        template = {**tags, **self._template_tags(pool)}
        return NodeGroup(
            resource_group=self._resource_group,
            name=name,
            min_size=limits[0],
            max_size=limits[1],
            capacity=int(getattr(pool, "count", 0) or 0),
            vm_size=_text(getattr(pool, "vm_size", None)),
            tags=template,
            zones=tuple(getattr(pool, "availability_zones", None) or ()),
            location=self._cluster_location(),
            provider=self.kind,
            refused=refused,
            etag=_text(getattr(pool, "e_tag", None)),
            # AKS spot pools: scaleSetPriority Spot, eviction Delete unless set (AKS's default).
            priority="Spot" if _text(getattr(pool, "scale_set_priority", None)).lower() == "spot" else "Regular",
            eviction_policy=(_text(getattr(pool, "scale_set_eviction_policy", None)) or "Delete")
            if _text(getattr(pool, "scale_set_priority", None)).lower() == "spot" else "",
            # What new nodes boot with; a node labelled with another version drifted (engine.drift).
            node_image_version=_text(getattr(pool, "node_image_version", None)),
        )

    @staticmethod
    def _template_tags(pool: Any) -> dict[str, str]:
        """The pool's labels and taints as node-template tags, with the labels AKS puts on every node of it."""
        name = _text(pool.name)
        labels = {"kubernetes.azure.com/agentpool": name, "agentpool": name,
                  "kubernetes.azure.com/mode": _text(getattr(pool, "mode", None)).lower() or "user",
                  **dict(getattr(pool, "node_labels", None) or {})}
        tags = {discovery_tags.template_tag("label", k): v for k, v in labels.items()}
        for taint in getattr(pool, "node_taints", None) or ():
            head, _, effect = str(taint).rpartition(":")  # `key=value:Effect` or `key:Effect`
            key, _, value = head.partition("=")
            if key and effect:
                tags[discovery_tags.template_tag("taint", key)] = f"{value}:{effect}"
        return tags

    # -- instances ----------------------------------------------------------------------

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        """The pool's machines: name (= node name), VM id and IPs, in one list; a lane's: those of its size."""
        client = self._machines_client if group.lane else self._client
        machines = self._arm(f"list machines of agent pool {group.name}",
                             lambda: list(client.machines.list(self._resource_group, self._cluster, group.name)))
        machines = with_instance_ids(machines, machine_name, f"list machines of agent pool {group.id}")
        if group.lane:
            unsized = sorted(machine_name(m) for m in machines if not machine_size(m))
            if unsized:  # no lane can claim them: their nodes stay unmapped, never touched
                log.warning("agent pool %s: machines %s say no VM size (properties.hardware.vmSize); left out of its "
                            "lanes", group.name, ", ".join(unsized))
            machines = [m for m in machines if machine_size(m).lower() == group.lane.lower()]
        return [_instance(m) for m in machines]

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """The machine of that name; None if it is gone, or (a lane) of another size."""
        client = self._machines_client if group.lane else self._client
        machine = found_or_none(f"get machine {instance_id} of agent pool {group.name}",
                                lambda: client.machines.get(self._resource_group, self._cluster, group.name,
                                                            instance_id))
        if machine is None or (group.lane and machine_size(machine).lower() != group.lane.lower()):
            return None
        return _instance(machine)

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        return {i.instance_id: i.private_ips for i in self.list_instances(group)}

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        return []  # the router asks the default provider: VM sizes belong to the location

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        return {} if self._prices is None else self._prices.get_group_prices(groups)

    # -- changes ------------------------------------------------------------------------

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        """The pool's `count`: GET the pool, change it, PUT it back (what `az aks nodepool scale` does). A lane
        of a VirtualMachines pool: its size's count in `virtualMachinesProfile.scale.manual`, the other sizes'
        unchanged (and `count` their sum).

        The PUT carries If-Match with the pool's eTag, and a pool whose eTag is no longer the group's (a change
        since the caller read it) is refused as ARM refuses a stale If-Match: CHANGED_SINCE_READ."""
        what = f"scale agent pool {group.name} of AKS cluster {self._cluster} to {capacity}"
        self._refuse_if_refused(group, what)
        pool = self._arm(what, lambda: self._client.agent_pools.get(self._resource_group, self._cluster, group.name))
        if getattr(pool, "enable_auto_scaling", False):
            raise ComputeError(f"{what}: the AKS cluster autoscaler is on for this pool", code="OperationNotAllowed")
        etag = _text(getattr(pool, "e_tag", None))
        if group.etag and etag and etag != group.etag:
            raise ComputeError(f"{what}: the pool changed since it was read (eTag {group.etag} is now {etag})",
                               code=CHANGED_SINCE_READ)
        if group.lane:
            _set_manual_count(pool, group.lane, capacity, what)
        else:
            pool.count = capacity
        polling = self._operations.polling(poll_first=False)
        poller = self._arm(what, lambda: self._client.agent_pools.begin_create_or_update(
            self._resource_group, self._cluster, group.name, pool, polling=polling, **if_unchanged(etag)))
        return self._operations.outcome(what, poller, polling, resumed=False)

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        """deleteMachines with these machine (node) names; the pool's count drops with them."""
        from azure.mgmt.containerservice.models import AgentPoolDeleteMachinesParameter

        what = f"delete machines {','.join(instance_ids)} of agent pool {group.name}"
        if not instance_ids:
            raise ValueError(f"{what}: no machine names given")
        self._refuse_if_refused(group, what)
        body = AgentPoolDeleteMachinesParameter(machine_names=list(instance_ids))
        polling = self._operations.polling(poll_first=False)
        poller = self._arm(what, lambda: self._client.agent_pools.begin_delete_machines(
            self._resource_group, self._cluster, group.name, body, polling=polling))
        return self._operations.outcome(what, poller, polling, resumed=False)

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        """Refused, hibernating or not: AKS pools' nodes are stopped by AKS (hibernation_enabled stays false)."""
        raise ComputeError(f"deallocate machines of agent pool {group.name}: AKS deallocates through the pool's own "
                           "scaleDownMode; use SCALE_DOWN_MODE=delete for AKS pools", code="OperationNotAllowed")

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        raise ComputeError(f"start machines of agent pool {group.name}: not supported for AKS pools",
                           code="OperationNotAllowed")

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        """No: AKS does not support changing the pool's scale set (instance protection included) directly, and
        the agent-pool API has no per-machine protection."""
        return False

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        raise ComputeError(f"scale-in protection of machine {instance_id} of agent pool {group.name}: AKS-managed "
                           "pools have none (changing their scale sets directly is unsupported)",
                           code=SCALE_IN_PROTECTION_UNSUPPORTED)

    def _refuse_if_refused(self, group: NodeGroup, what: str) -> None:
        if group.refused:
            raise ComputeError(f"{what}: {group.refused}", code="OperationNotAllowed")

    def get_resize_operation(self, token: str) -> Operation:
        return self._operations.resume("check agent pool scale operation", token,
                                       lambda **kw: self._client.agent_pools.begin_create_or_update("", "", "", {}, **kw))

    def get_delete_operation(self, token: str) -> Operation:
        return self._operations.resume(
            "check deleteMachines operation", token,
            lambda **kw: self._client.agent_pools.begin_delete_machines("", "", "", {"machineNames": []}, **kw))

    def get_deallocate_operation(self, token: str) -> Operation:
        raise ComputeError("AKS pools have no deallocate operations of ours", code="OperationNotAllowed")

    def get_start_operation(self, token: str) -> Operation:
        raise ComputeError("AKS pools have no start operations of ours", code="OperationNotAllowed")


def _is_vm_pool(pool: Any) -> bool:
    pool_type = _text(getattr(pool, "type_properties_type", None) or getattr(pool, "type", None))
    return pool_type.lower() == VIRTUAL_MACHINES


def _manual_entries(pool: Any) -> list[Any]:
    scale = getattr(getattr(pool, "virtual_machines_profile", None), "scale", None)
    return [m for m in getattr(scale, "manual", None) or () if _text(getattr(m, "size", None))]


def manual_counts(pool: Any) -> list[tuple[str, int]]:
    """A VirtualMachines pool's (size, count) pairs, as `virtualMachinesProfile.scale.manual` lists them."""
    return [(_text(m.size), int(getattr(m, "count", 0) or 0)) for m in _manual_entries(pool)]


def _set_manual_count(pool: Any, size: str, count: int, what: str) -> None:
    """Set one size's count in the pool read back (the others as read) and `count` to their sum."""
    entries = _manual_entries(pool)
    entry = next((m for m in entries if _text(m.size).lower() == size.lower()), None)
    if entry is None:
        raise ComputeError(f"{what}: the pool no longer has size {size} (its sizes: "
                           f"{', '.join(_text(m.size) for m in entries) or 'none'})", code="NotFound")
    entry.count = count
    pool.count = sum(int(getattr(m, "count", 0) or 0) for m in entries)


def machine_size(machine: Any) -> str:
    """A machine's VM size (`properties.hardware.vmSize`), "" where not said. The stable SDK model keeps
    `hardware` among its extra fields (read by key); a model that types it reads the same by key."""
    properties = getattr(machine, "properties", None)
    hardware = (properties.get("hardware") if isinstance(properties, Mapping)
                else getattr(properties, "hardware", None))
    size = hardware.get("vmSize") if isinstance(hardware, Mapping) else getattr(hardware, "vm_size", None)
    return _text(size)


def machine_name(machine: Any) -> str:
    """A machine's name (its node's name and its instance id here), else the last segment of its own ARM id
    (`.../agentPools/<pool>/machines/<name>`; not `properties.resourceId`, which is its VM's)."""
    return _text(machine.name) or arm_id_leaf(_text(getattr(machine, "id", None)), "machines")


def _instance(machine: Any) -> Instance:
    properties = getattr(machine, "properties", None)
    network = getattr(properties, "network", None)
    ips = tuple(_text(a.ip) for a in getattr(network, "ip_addresses", None) or () if getattr(a, "ip", None))
    name = machine_name(machine)
    return Instance(
        instance_id=name,
        provisioning_state=_text(getattr(properties, "provisioning_state", None)) or "Succeeded",
        computer_name=name,
        private_ips=ips,
        resource_id=_text(getattr(properties, "resource_id", None)),
        vm_size=machine_size(machine),
    )
