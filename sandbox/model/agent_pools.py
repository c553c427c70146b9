"""AKS agent pools in scenarios: the pool a node group stands for, and what AKS names and stamps it with.

A node group with an `agent_pool` field is one agent pool (type `VirtualMachineScaleSets`) of the
simulated cluster seen as an AKS managed cluster (`sandbox.world.managed_cluster`). Behind it the world
keeps an ordinary Uniform scale set, named and labelled as AKS does it:

- node resource group `MC_<cluster resource group>_<cluster>_<location>` (the cluster's resource group is
  `rg-<cluster_name>`, the server's default; a node group's `resource_group` stands for a custom
  `nodeResourceGroup`, the same for every pool);
- scale set `aks-<pool>-<8 digits>-vmss`, computer names (and node names) that plus 6 base-36 digits
  (`aks-nodepool1-42263519-vmss00000a`, azure-rest-api-specs AgentPoolsDeleteMachines.json). The digits
  are the same for every pool of a cluster (inference from real clusters' names), here a hash of the
  subscription and cluster name;
- node labels `agentpool` and `kubernetes.azure.com/agentpool` (the pool), `kubernetes.azure.com/mode`
  (`system` or `user`), `kubernetes.azure.com/cluster` (the node resource group) and the other
  `kubernetes.azure.com/*` labels `kubectl describe node` shows on AKS VMSS nodes, then the pool's
  `nodeLabels`; taints from `nodeTaints` (`key=value:Effect`);
- scale-set tags: the pool's tags (AKS propagates them) and AKS's own `aks-managed-*` tags.

`expand_node_group` turns such a node group into the plain one `sandbox.model.scenario` parses, plus the
`AgentPoolSpec`; this module imports nothing of the scenario, which imports it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from sandbox.model.kubernetes_version import KUBELET_VERSION

POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")  # Linux pools: lowercase letters and digits, a letter first, 1-12
COMPUTER_NAME_PREFIX = re.compile(r"^aks-[a-z][a-z0-9]{0,11}-\d{8}-vms(s|\d)?$")  # VMSS pools; VirtualMachines pools' sizes
POOL_TYPES = ("VirtualMachineScaleSets", "VirtualMachines")
MAX_SIZES = 5  # a VirtualMachines pool's scale profiles (azure-aks-docs virtual-machines-node-pools.md: up to 5)
MODES = ("System", "User")
MAX_COUNT = 1000  # user pools 0-1000, system pools 1-1000
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ORCHESTRATOR_VERSION = KUBELET_VERSION.lstrip("v")
NODE_IMAGE_VERSION = "AKSUbuntu-2204gen2containerd-202410.15.0"
OS_SKU = "Ubuntu"
STORAGE_TIER = "Premium_LRS"
_EMPTY: Mapping[str, str] = MappingProxyType({})
_RESERVED_LABEL_PREFIX = "kubernetes.azure.com/"


class AgentPoolError(ValueError):
    """An invalid agent pool in a scenario: the JSON path and the problem (sandbox.model.scenario reports both)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class AgentPoolSpec:
    """The agent pool a node group stands for, as the scenario declares it (the world keeps what PUTs change)."""

    name: str
    mode: str = "User"  # System or User
    enable_auto_scaling: bool = False  # AKS's own cluster autoscaler
    min_count: int | None = None  # set exactly when enable_auto_scaling
    max_count: int | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    node_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    node_taints: tuple[str, ...] = ()  # "key=value:Effect" or "key:Effect", as the API carries them
    scale_down_mode: str = "Delete"
    orchestrator_version: str = ORCHESTRATOR_VERSION
    resource_name_suffix: str = ""  # the 8 digits of aks-<pool>-<digits>-vmss
    node_resource_group: str = ""
    pool_type: str = "VirtualMachineScaleSets"  # or VirtualMachines: several sizes, one Flexible set per size here
    sizes: tuple[str, ...] = ()  # a VirtualMachines pool's sizes, in the scenario's order
    size: str = ""  # the size of the scale set behind this part of a VirtualMachines pool

    @property
    def multi_size(self) -> bool:
        return self.pool_type == "VirtualMachines"


def default_node_resource_group(cluster_name: str, location: str) -> str:
    """AKS's default node resource group for the cluster the server serves (`rg-<cluster_name>`/`<cluster_name>`)."""
    return f"MC_rg-{cluster_name}_{cluster_name}_{location}"


def resource_name_suffix(subscription_id: str, cluster_name: str) -> str:
    """The 8 digits AKS puts in the pools' scale-set names: here a stable hash of the cluster's identity."""
    digest = hashlib.sha256(f"{subscription_id.lower()}/{cluster_name.lower()}".encode()).hexdigest()
    return str(int(digest, 16) % 10**8).zfill(8)


def vmss_name(pool: str, suffix: str) -> str:
    return f"aks-{pool}-{suffix}-vmss"


def vms_name(pool: str, suffix: str, index: int) -> str:
    """The Flexible scale set the sandbox keeps behind one size of a VirtualMachines pool (AKS keeps plain VMs
    named aks-<pool>-<digits>-vms<n>; the sandbox groups them by size, so its VM names differ from AKS's)."""
    return f"aks-{pool}-{suffix}-vms{index}"


def parse_taint(text: Any, path: str) -> dict[str, str]:
    """`key=value:Effect` or `key:Effect` (the API's nodeTaints form) as a scenario taint object."""
    if not isinstance(text, str) or not text:
        raise AgentPoolError(path, "must be a taint as `key=value:Effect` or `key:Effect`")
    head, colon, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    if not colon or not key:
        raise AgentPoolError(path, f"{text!r} is not a taint as `key=value:Effect` or `key:Effect`")
    if effect not in TAINT_EFFECTS:
        raise AgentPoolError(path, f"{text!r}: the effect must be one of {', '.join(TAINT_EFFECTS)}")
    return {"key": key, "value": value, "effect": effect}


def aks_node_labels(pool: AgentPoolSpec) -> dict[str, str]:
    """The labels AKS puts on every node of a VMSS pool (as `kubectl describe node` shows them), nodeLabels after."""
    return {
        "agentpool": pool.name,
        "kubernetes.azure.com/agentpool": pool.name,
        "kubernetes.azure.com/cluster": pool.node_resource_group,
        "kubernetes.azure.com/mode": pool.mode.lower(),
        "kubernetes.azure.com/node-image-version": NODE_IMAGE_VERSION,
        "kubernetes.azure.com/nodepool-type": pool.pool_type,
        "kubernetes.azure.com/os-sku": OS_SKU,
        "kubernetes.azure.com/role": "agent",
        "kubernetes.azure.com/storageprofile": "managed",
        "kubernetes.azure.com/storagetier": STORAGE_TIER,
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        "storageprofile": "managed",
        "storagetier": STORAGE_TIER,
        **pool.node_labels,
    }


def aks_managed_tags(pool: AgentPoolSpec) -> dict[str, str]:
    """AKS's own tags on a pool's scale set (`aks-managed-poolName` from the facts; the others an unverified recollection)."""
    name = vmss_name(pool.name, pool.resource_name_suffix)
    return {
        "aks-managed-creationSource": f"vmssclient-{name}",
        "aks-managed-orchestrator": f"Kubernetes:{pool.orchestrator_version}",
        "aks-managed-poolName": pool.name,
        "aks-managed-resourceNameSuffix": pool.resource_name_suffix,
    }


# ---------------------------------------------------------------------------- scenario parsing


def _typename(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _string_map(value: Any, path: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise AgentPoolError(path, f"must be an object of strings, got {_typename(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise AgentPoolError(f"{path}.{key}", f"must be a string, got {_typename(item)}")
    return MappingProxyType(dict(value))


def _count(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AgentPoolError(path, f"must be a whole number, got {_typename(value)}")
    if not minimum <= value <= MAX_COUNT:
        raise AgentPoolError(path, f"must be between {minimum} and {MAX_COUNT}, got {value}")
    return value


_POOL_FIELDS = {
    "name", "mode", "enable_auto_scaling", "min_count", "max_count", "tags", "node_labels", "node_taints",
    "scale_down_mode", "type",
}


def parse_agent_pool(value: Any, path: str, *, suffix: str, node_resource_group: str) -> AgentPoolSpec:
    """`"gpu"` (a User pool with AKS's autoscaler off) or the object form; see docs/scenarios.md."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise AgentPoolError(path, f"must be a pool name or an object, got {_typename(value)}")
    unknown = sorted(set(value) - _POOL_FIELDS)
    if unknown:
        raise AgentPoolError(f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_POOL_FIELDS))})")
    if "name" not in value:
        raise AgentPoolError(f"{path}.name", "required field is missing")
    name = value["name"]
    if not isinstance(name, str) or not POOL_NAME.match(name):
        raise AgentPoolError(f"{path}.name", f"{name!r} is not an AKS pool name (1-12 lowercase letters and digits, "
                                             "a letter first)")
    mode = value.get("mode", "User")
    if mode not in MODES:
        raise AgentPoolError(f"{path}.mode", f"must be System or User, got {mode!r}")
    minimum = 1 if mode == "System" else 0
    autoscaling = value.get("enable_auto_scaling", False)
    if not isinstance(autoscaling, bool):
        raise AgentPoolError(f"{path}.enable_auto_scaling", f"must be true or false, got {_typename(autoscaling)}")
    min_count = value.get("min_count")
    max_count = value.get("max_count")
    if autoscaling:
        for key, bound in (("min_count", min_count), ("max_count", max_count)):
            if bound is None:
                raise AgentPoolError(f"{path}.{key}", "required when enable_auto_scaling is true (AKS wants both)")
        min_count = _count(min_count, f"{path}.min_count", minimum)
        max_count = _count(max_count, f"{path}.max_count", minimum)
        if max_count < min_count:
            raise AgentPoolError(f"{path}.max_count", f"must be at least min_count ({min_count}), got {max_count}")
    else:
        for key, bound in (("min_count", min_count), ("max_count", max_count)):
            if bound is not None:
                raise AgentPoolError(f"{path}.{key}", "must be null when enable_auto_scaling is false (AKS refuses "
                                                      "minCount and maxCount on a pool it does not autoscale)")
    labels = _string_map(value.get("node_labels", {}), f"{path}.node_labels")
    for key in labels:
        if key.startswith(_RESERVED_LABEL_PREFIX):
            raise AgentPoolError(f"{path}.node_labels.{key}", f"the {_RESERVED_LABEL_PREFIX} prefix is AKS's own "
                                                             "(put such labels in the node group's labels)")
    taints = value.get("node_taints", [])
    if not isinstance(taints, list):
        raise AgentPoolError(f"{path}.node_taints", f"must be a list, got {_typename(taints)}")
    for i, taint in enumerate(taints):
        parse_taint(taint, f"{path}.node_taints[{i}]")
    scale_down_mode = value.get("scale_down_mode", "Delete")
    if scale_down_mode != "Delete":
        raise AgentPoolError(f"{path}.scale_down_mode", f"the sandbox models scaleDownMode Delete only, got "
                                                        f"{scale_down_mode!r}")
    pool_type = value.get("type", "VirtualMachineScaleSets")
    if pool_type not in POOL_TYPES:
        raise AgentPoolError(f"{path}.type", f"must be one of {', '.join(POOL_TYPES)}, got {pool_type!r}")
    return AgentPoolSpec(
        name=name,
        pool_type=pool_type,
        mode=mode,
        enable_auto_scaling=autoscaling,
        min_count=min_count,
        max_count=max_count,
        tags=_string_map(value.get("tags", {}), f"{path}.tags"),
        node_labels=labels,
        node_taints=tuple(taints),
        scale_down_mode=scale_down_mode,
        resource_name_suffix=suffix,
        node_resource_group=node_resource_group,
    )


_NAME_SUFFIX = re.compile(r"^aks-(?P<pool>[a-z][a-z0-9]{0,11})-(?P<suffix>\d{8})-vmss$")


def expand_node_group(
    group: Mapping[str, Any], path: str, *, cluster_name: str, subscription_id: str, location: str, flavour: str
) -> tuple[dict[str, Any], AgentPoolSpec]:
    """A node group with `agent_pool` as the plain node group behind it (scale set name, resource group, computer
    name prefix, labels, taints and tags filled in as AKS does) and the pool. The plain group's own fields are
    left for the scenario parser to check; this checks what the pool adds."""
    where = f"{path}.agent_pool"
    parts = group.get(_PART)
    if _declares_vm_pool(group) and not isinstance(parts, tuple):
        vm_pool_parts(group, path)  # raises: a valid VirtualMachines pool comes here split by split_vm_pool
        raise AgentPoolError(f"{path}.sizes", "a VirtualMachines pool must be split before it is expanded")
    if flavour != "aks-engine":
        raise AgentPoolError(where, f"AKS agent pools need flavour aks-engine (AKS nodes run the Azure cloud "
                                    f"provider), the scenario's is {flavour!r}")
    if parts is None and group.get("orchestration", "Uniform") != "Uniform":
        raise AgentPoolError(f"{path}.orchestration", "AKS keeps a VirtualMachineScaleSets pool in a Uniform scale set")
    if "computer_name_prefix" in group:
        raise AgentPoolError(f"{path}.computer_name_prefix", "AKS names a pool's machines aks-<pool>-<digits>-vmss"
                                                             "<6 base-36 digits>: leave it out")
    if "location" in group and str(group["location"]).lower() != location.lower():
        raise AgentPoolError(f"{path}.location", f"an agent pool is in its cluster's location ({location}), "
                                                 f"got {group['location']!r}")
    suffix = resource_name_suffix(subscription_id, cluster_name)
    raw = group["agent_pool"]
    pool_name = raw.get("name") if isinstance(raw, dict) else raw
    if "name" in group:
        match = _NAME_SUFFIX.match(str(group["name"]))
        if match is None or match["pool"] != pool_name:
            raise AgentPoolError(f"{path}.name", f"AKS names the pool's scale set aks-{pool_name}-<8 digits>-vmss "
                                                 f"(e.g. {vmss_name(str(pool_name), suffix)}); got {group['name']!r}")
        suffix = match["suffix"]
    node_resource_group = group.get("resource_group", default_node_resource_group(cluster_name, location))
    if not isinstance(node_resource_group, str):
        node_resource_group = ""  # the scenario parser reports the bad resource_group
    pool = parse_agent_pool(raw, where, suffix=suffix, node_resource_group=node_resource_group)
    if isinstance(parts, tuple):  # one size of a VirtualMachines pool: (its index, every size of the pool)
        index, sizes = parts
        pool = replace(pool, sizes=sizes, size=sizes[index])
    initial = group.get("initial", group.get("min", 0))
    if isinstance(initial, int) and not isinstance(initial, bool):  # else the scenario parser reports it
        if pool.mode == "System" and initial < 1:
            raise AgentPoolError(f"{path}.initial", "a System pool has at least one node, got 0")
        if pool.min_count is not None and pool.max_count is not None and not pool.min_count <= initial <= pool.max_count:
            raise AgentPoolError(f"{path}.initial", f"must be between agent_pool.min_count ({pool.min_count}) and "
                                                    f"max_count ({pool.max_count}) when AKS autoscales, got {initial}")
    plain = {key: value for key, value in group.items() if key not in ("agent_pool", _PART)}
    name = vmss_name(pool.name, suffix) if not isinstance(parts, tuple) else vms_name(pool.name, suffix, parts[0])
    plain["name"] = name
    plain["resource_group"] = node_resource_group
    plain["computer_name_prefix"] = name
    if isinstance(plain.get("labels", {}), dict):
        plain["labels"] = {**aks_node_labels(pool), **plain.get("labels", {})}
    if isinstance(plain.get("taints", []), list):
        plain["taints"] = [*plain.get("taints", []), *(parse_taint(t, where) for t in pool.node_taints)]
    if isinstance(plain.get("tags", {}), dict):
        plain["tags"] = {**plain.get("tags", {}), **pool.tags, **aks_managed_tags(pool)}
    return plain, pool


# ---------------------------------------------------------------------------- VirtualMachines pools

_PART = "__vm_pool_part"  # set by split_vm_pool only, a tuple (which JSON cannot give): (index, sizes)
_SIZE_FIELDS = {"vm_size", "allocatable", "capacity", "count"}
# Fields of one size that the pool gives by its sizes or AKS fixes for VirtualMachines pools.
_VM_POOL_REFUSED = {
    "vm_size": "give each size's vm_size in sizes",
    "allocatable": "give each size's allocatable in sizes",
    "capacity": "give each size's capacity in sizes",
    "initial": "give each size's count in sizes",
    "min": "a VirtualMachines pool has no scale set bounds (AKS's autoscaler is not modelled for it)",
    "max": "a VirtualMachines pool has no scale set bounds (AKS's autoscaler is not modelled for it)",
    "orchestration": "AKS keeps a VirtualMachines pool's machines as plain VMs (the sandbox: a Flexible set per size)",
    "zones": "VirtualMachines pools do not support availability zones",
    "name": "AKS names the pool's machines: leave it out",
    "computer_name_prefix": "AKS names the pool's machines: leave it out",
    "standby_pool": "a standby pool needs a scale set; a VirtualMachines pool has none",
    "hibernation_enabled": "hibernation is not modelled for VirtualMachines pools",
    "instance_mix": "a VirtualMachines pool gives its sizes in sizes",
}
_SIZE_NAME = re.compile(
    r"^Standard_(?P<series>[A-Z]+)(?P<cores>\d+)(?P<extra>[a-z-]*\d*[a-z]*)(?:_(?P<accel>[A-Z]+\d+))?(?:_(?P<version>v\d+))?$"
)


def _declares_vm_pool(group: Mapping[str, Any]) -> bool:
    raw = group.get("agent_pool")
    return isinstance(raw, dict) and raw.get("type") == "VirtualMachines"


def size_family(vm_size: str) -> str | None:
    """A size's family as the pool's one-family rule means it (Standard_D4s_v5 and Standard_D8s_v5: `Ds_v5`);
    None for a name of another shape. An approximation of Azure's families (inference from the size names)."""
    match = _SIZE_NAME.match(vm_size)
    if match is None:
        return None
    accelerator = f"_{match['accel']}" if match["accel"] else ""
    return f"{match['series']}{match['extra']}{accelerator}_{match['version'] or 'v1'}"


def _size_entry(value: Any, path: str) -> tuple[str, int]:
    """One of `sizes`: its vm_size and count (allocatable and capacity are left for the scenario parser)."""
    if not isinstance(value, dict):
        raise AgentPoolError(path, f"must be an object with vm_size, allocatable and count, got {_typename(value)}")
    unknown = sorted(set(value) - _SIZE_FIELDS)
    if unknown:
        raise AgentPoolError(f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_SIZE_FIELDS))})")
    for key in ("vm_size", "allocatable"):
        if key not in value:
            raise AgentPoolError(f"{path}.{key}", "required field is missing")
    vm_size = value["vm_size"]
    if not isinstance(vm_size, str) or size_family(vm_size) is None:
        raise AgentPoolError(f"{path}.vm_size", f"must be an Azure size name such as Standard_D4s_v5, got {vm_size!r}")
    return vm_size, _count(value.get("count", 0), f"{path}.count", 0)


def vm_pool_parts(group: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """A node group with a VirtualMachines pool as one node group per size (the scale set behind that size),
    each marked with its index and the pool's sizes for expand_node_group; AgentPoolError for bad input."""
    for key, why in _VM_POOL_REFUSED.items():
        if key in group:
            raise AgentPoolError(f"{path}.{key}", f"not allowed with agent_pool.type VirtualMachines: {why}")
    if group.get("autoscaled", False) is not False:
        raise AgentPoolError(f"{path}.autoscaled", "must be false for a VirtualMachines pool (its sizes have no scale "
                                                   "set bounds: mark the pool with the discovery tags in "
                                                   "agent_pool.tags)")
    sizes = group.get("sizes")
    if not isinstance(sizes, list) or not 1 <= len(sizes) <= MAX_SIZES:
        raise AgentPoolError(f"{path}.sizes", f"a VirtualMachines pool needs a list of 1 to {MAX_SIZES} sizes, got "
                                              f"{len(sizes) if isinstance(sizes, list) else _typename(sizes)}")
    entries = [_size_entry(value, f"{path}.sizes[{i}]") for i, value in enumerate(sizes)]
    seen: set[str] = set()
    family = size_family(entries[0][0])
    for i, (vm_size, _) in enumerate(entries):
        if vm_size.lower() in seen:
            raise AgentPoolError(f"{path}.sizes[{i}].vm_size", f"{vm_size} appears twice")
        seen.add(vm_size.lower())
        if size_family(vm_size) != family:
            raise AgentPoolError(f"{path}.sizes[{i}].vm_size", f"every size of a VirtualMachines pool is of one family "
                                                               f"({family}, from {entries[0][0]}), got {vm_size}")
    total = sum(count for _, count in entries)
    if total > MAX_COUNT:
        raise AgentPoolError(f"{path}.sizes", f"the counts add up to {total}, more than {MAX_COUNT}")
    raw = group.get("agent_pool")
    if isinstance(raw, dict) and raw.get("mode") == "System" and total < 1:
        raise AgentPoolError(f"{path}.sizes", "a System pool has at least one node, the counts add up to 0")
    names = tuple(vm_size for vm_size, _ in entries)
    base = {key: value for key, value in group.items() if key != "sizes"}
    return [
        {**base, **{k: v for k, v in size.items() if k != "count"}, "initial": count, "autoscaled": False,
         "orchestration": "Flexible", _PART: (i, names)}
        for i, (size, (_, count)) in enumerate(zip(sizes, entries, strict=True))
    ]


def split_vm_pool(group: Any, path: str) -> list[Any]:
    """The node groups a scenario's node group stands for: one per size of a valid VirtualMachines pool, else the
    group itself (an invalid pool is reported by expand_node_group, where the scenario parser catches it)."""
    if not isinstance(group, dict) or not _declares_vm_pool(group):
        return [group]
    try:
        return vm_pool_parts(group, path)
    except AgentPoolError:
        return [group]


def check_pools(pools: list[tuple[int, AgentPoolSpec]]) -> tuple[str, str] | None:
    """(JSON path, problem) when the scenario's pools cannot be one cluster's; None when they can."""
    names: set[str] = set()
    first: AgentPoolSpec | None = None
    for index, pool in pools:
        where = f"$.node_groups[{index}]"
        if pool.name in names and pool.multi_size and pool.size != pool.sizes[0]:
            continue  # the next size of a VirtualMachines pool (split_vm_pool keeps them together)
        if pool.name in names:
            return f"{where}.agent_pool.name", f"agent pool {pool.name!r} appears twice"
        names.add(pool.name)
        if first is None:
            first = pool
            continue
        if pool.node_resource_group.lower() != first.node_resource_group.lower():
            return (f"{where}.resource_group", f"every agent pool is in the cluster's one node resource group "
                                               f"({first.node_resource_group!r}), got {pool.node_resource_group!r}")
        if pool.resource_name_suffix != first.resource_name_suffix:
            return (f"{where}.name", f"every agent pool's scale set carries the cluster's digits "
                                     f"({first.resource_name_suffix}), got {pool.resource_name_suffix}")
    return None
