"""The ARM double's Microsoft.ContainerService routes for the cluster as an AKS managed cluster and its agent pools.

`sandbox.api.arm_api` serves these next to its own routes (same token checks, call counting, fault
injection; no throttling: AKS's request limits are not modelled). Shaped after what
azure-mgmt-containerservice 41.8 sends (api-version 2026-08-01, any version is accepted) and the
stable spec's examples (AgentPoolsGet, AgentPoolsCreate_Update, AgentPoolsDeleteMachines, MachineList):

- `GET .../managedClusters/{cluster}`: the managed cluster (location, nodeResourceGroup, agentPoolProfiles).
- `GET .../agentPools` (`{"value": [...]}`) and `GET .../agentPools/{pool}`: each pool with `properties`
  `count` (its scale set's capacity), `vmSize`, `mode`, `type: VirtualMachineScaleSets`,
  `enableAutoScaling`, `minCount`/`maxCount` (when autoscaling), `scaleDownMode`, `nodeLabels`,
  `nodeTaints`, `tags`, `orchestratorVersion`, `provisioningState`, `powerState`, `eTag`, ... and for a Spot pool
  `scaleSetPriority`, `scaleSetEvictionPolicy`, `spotMaxPrice` (`sandbox.model.spot`; a PUT may not change them).
- `PUT .../agentPools/{pool}` with the whole pool: 200 with the pool and `Azure-AsyncOperation` (what
  `begin_create_or_update` polls, then GETs the pool). A new `count` scales the scale set
  (`Scaling` until done; see `sandbox.world.agent_pools`); tags, mode and the autoscaler flag and bounds
  change at once. `If-Match` must match the pool's `eTag` (412 otherwise). Immutable properties
  (`vmSize`, `osType`, `type`, `availabilityZones`, `maxPods`, `osDiskSizeGB`, `osSKU`) answer 400
  `PropertyChangeNotAllowed`; what the sandbox cannot do (new pools, upgrades, stopping, new labels or
  taints, `scaleDownMode: Deallocate`) 409 `OperationNotAllowed` saying so.
- `POST .../agentPools/{pool}/deleteMachines` `{"machineNames": [...]}`: 202 with `Location`
  (`.../operationresults/{id}`, as the spec example) and `Azure-AsyncOperation` (`.../operations/{id}`).
- `GET .../agentPools/{pool}/machines[/{machine}]`: machine name = node name, `properties.resourceId` =
  the scale set VM's id, `properties.network.ipAddresses` = its private IP; `zones` when zonal.
- `GET /subscriptions/{s}/providers/Microsoft.ContainerService/locations/{loc}/operations/{id}` (status
  `InProgress`, `Succeeded`, `Failed` with `error`) and `.../operationresults/{id}` (202 while running, then
  204, or the error with status 400).

A `VirtualMachines` pool (several sizes; `sandbox.model.agent_pools`) answers `vmSize: ""`,
`type: VirtualMachines`, `virtualMachinesProfile.scale.manual` (a count per size) and
`virtualMachineNodesStatus` (azure-rest-api-specs' managed cluster with a VirtualMachines pool); a PUT's
`manual` counts scale each size, and its machines carry their ARM VM id and, asked at a preview api-version
from MACHINE_HARDWARE_SINCE on, `properties.hardware.vmSize` (azure-rest-api-specs aks/Machine.tsp:
MachineProperties.hardware is @added(v2026_03_02_preview); the stable 2026-08-01 machine has no such field).

Every route but the operations checks the subscription (404 `SubscriptionNotFound`) and that the path
names `world.managed_cluster` (404 `ResourceNotFound`, as listClusterUserCredential does).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from sandbox.api.arm_paging import arm_page
from sandbox.api.wire import Request, Response, json_response
from sandbox.model import agent_pools, spot
from sandbox.model.units import rfc3339_micro
from sandbox.world import World, drift
from sandbox.world.agent_pools import AgentPoolSim, PoolOperation
from sandbox.world.compute import InstanceSim
from sandbox.world.errors import ArmError
from sandbox.world.identity import TENANT_ID
from sandbox.world.managed_cluster import ManagedCluster

LRO_RETRY_AFTER = 10  # sim seconds between polls of an AKS async operation
# The api-versions AKS puts in its operation links: operationresults as in the spec's AgentPoolsDeleteMachines
# example; 2016-03-30 for operations is a recollection of real Azure-AsyncOperation headers (unverified).
OPERATIONS_API_VERSION = "2016-03-30"
OPERATION_RESULTS_API_VERSION = "2017-08-31"

_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_AKS = _SUB + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.ContainerService/managedClusters/(?P<cluster>[^/]+)"
_POOLS = _AKS + r"/agentPools"
_POOL = _POOLS + r"/(?P<pool>[^/]+)"
_LOCATION = _SUB + r"/providers/Microsoft\.ContainerService/locations/(?P<loc>[^/]+)"

# (method, path pattern, route name): sandbox.api.arm_api compiles them with its own (anchored, case-insensitive)
ROUTES: list[tuple[str, str, str]] = [
    ("GET", _AKS, "aks_get_cluster"),
    ("GET", _POOLS, "aks_list_agent_pools"),
    ("GET", _POOL, "aks_get_agent_pool"),
    ("PUT", _POOL, "aks_put_agent_pool"),
    ("POST", _POOL + r"/deleteMachines", "aks_delete_machines"),
    ("GET", _POOL + r"/machines", "aks_list_machines"),
    ("GET", _POOL + r"/machines/(?P<machine>[^/]+)", "aks_get_machine"),
    ("GET", _LOCATION + r"/operations/(?P<op>[^/]+)", "aks_operation"),
    ("GET", _LOCATION + r"/operationresults/(?P<op>[^/]+)", "aks_operation_result"),
]
# operation name in the report, write?, throttling bucket (none: AKS's limits are not modelled)
OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "aks_get_cluster": ("GET managedClusters", False, None),
    "aks_list_agent_pools": ("LIST agentPools", False, None),
    "aks_get_agent_pool": ("GET agentPools", False, None),
    "aks_put_agent_pool": ("PUT agentPools", True, None),
    "aks_delete_machines": ("POST deleteMachines", True, None),
    "aks_list_machines": ("LIST machines", False, None),
    "aks_get_machine": ("GET machines", False, None),
    "aks_operation": ("GET ContainerService operations", False, None),
    "aks_operation_result": ("GET ContainerService operationresults", False, None),
}
# The fault-injection resource of the routes naming no pool (those naming one take the pool's name).
FAULT_RESOURCES = {"aks_list_agent_pools": "agentPools", "aks_operation": "operations", "aks_operation_result": "operations"}

_POOL_TYPE = "Microsoft.ContainerService/managedClusters/agentPools"
_MACHINE_TYPE = "Microsoft.ContainerService/managedClusters/agentPools/machines"
_OS_DISK_SIZE_GB = 128
_UNREADABLE = "The request content was invalid and could not be deserialized."


# ---------------------------------------------------------------------------- representations


def _cluster(world: World, params: dict[str, str]) -> ManagedCluster:
    if params["sub"].lower() != world.subscription_id.lower():
        raise ArmError(404, "SubscriptionNotFound", f"The subscription '{params['sub']}' could not be found.")
    cluster = world.managed_cluster
    if cluster is None or not cluster.matches(params["rg"], params["cluster"]):
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.ContainerService/managedClusters/{params['cluster']}' under resource group "
            f"'{params['rg']}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )
    return cluster


def _pool_id(cluster: ManagedCluster, pool: AgentPoolSim) -> str:
    return f"{cluster.id}/agentPools/{pool.name}"


def pool_properties(world: World, pool: AgentPoolSim) -> dict[str, Any]:
    """An agent pool's `properties`, as AKS answers them (nulls left out, as AKS leaves them out)."""
    group = world.agent_pool_group(pool)
    spec = group.spec
    properties: dict[str, Any] = {
        "eTag": pool.etag,
        "count": world.agent_pool_count(pool),
        "vmSize": spec.vm_size,
        "osDiskSizeGB": _OS_DISK_SIZE_GB,
        "osDiskType": "Managed",
        "kubeletDiskType": "OS",
        "maxPods": spec.allocatable.pods,
        "type": "VirtualMachineScaleSets",
        "enableAutoScaling": pool.enable_auto_scaling,
        "scaleDownMode": pool.spec.scale_down_mode,
        "provisioningState": world.agent_pool_state(pool),
        "powerState": {"code": "Running"},
        "orchestratorVersion": pool.spec.orchestrator_version,
        "currentOrchestratorVersion": pool.spec.orchestrator_version,
        "enableNodePublicIP": False,
        "mode": pool.mode,
        "osType": "Linux",
        "osSKU": agent_pools.OS_SKU,
        "nodeImageVersion": drift.node_image_version(world, group.key),  # a scenario's model_changes may bump it
        "upgradeSettings": {"maxSurge": "10%"},
        "enableFIPS": False,
        "enableEncryptionAtHost": False,
        "enableUltraSSD": False,
        **spot.agent_pool_priority(spec.priority, spec.eviction_policy, spec.max_price),  # Spot pools only
    }
    if pool.enable_auto_scaling:
        properties["minCount"], properties["maxCount"] = pool.min_count, pool.max_count
    if spec.zones:
        properties["availabilityZones"] = list(spec.zones)
    if pool.tags:
        properties["tags"] = dict(pool.tags)
    if pool.spec.node_labels:
        properties["nodeLabels"] = dict(pool.spec.node_labels)
    if pool.spec.node_taints:
        properties["nodeTaints"] = list(pool.spec.node_taints)
    if pool.spec.multi_size:
        properties.update(_vm_pool_properties(world, pool))
    return properties


def _vm_pool_properties(world: World, pool: AgentPoolSim) -> dict[str, Any]:
    """What a VirtualMachines pool answers in place of a VMSS pool's size (AgentPoolsCreate_VirtualMachines-style
    shape: `vmSize` empty, the sizes' counts in `virtualMachinesProfile.scale.manual`, the machines there are
    per size in `virtualMachineNodesStatus`)."""
    groups = world.agent_pool_groups(pool)
    status = [{"size": group.spec.vm_size, "count": len(group.active())} for group in groups]
    return {
        "vmSize": "",
        "type": "VirtualMachines",
        "virtualMachinesProfile": {"scale": {"manual": [{"size": size, "count": count}
                                                        for size, count in world.agent_pool_size_counts(pool)]}},
        "virtualMachineNodesStatus": [entry for entry in status if entry["count"]],
    }


def pool_json(world: World, cluster: ManagedCluster, pool: AgentPoolSim) -> dict[str, Any]:
    return {"id": _pool_id(cluster, pool), "name": pool.name, "type": _POOL_TYPE,
            "properties": pool_properties(world, pool)}


MACHINE_HARDWARE_SINCE = "2026-03-02-preview"  # the first api-version whose machines say their hardware


def _has_machine_hardware(api_version: str) -> bool:
    """Whether machines asked at this api-version carry `properties.hardware` (previews from
    MACHINE_HARDWARE_SINCE on; ISO dates compare as text)."""
    return api_version.endswith("-preview") and api_version >= MACHINE_HARDWARE_SINCE


def machine_json(world: World, cluster: ManagedCluster, pool: AgentPoolSim, inst: InstanceSim,
                 api_version: str) -> dict[str, Any]:
    """One machine as the spec's MachineList example has it: name = node name, the VM's ARM id and IP; a
    VirtualMachines pool's machine is a plain VM and says its size (`properties.hardware.vmSize`) at the
    api-versions that have the field."""
    group = world.machine_group(inst)
    compute = f"/subscriptions/{world.subscription_id}/resourceGroups/{group.resource_group}/providers/Microsoft.Compute"
    resource_id = (f"{compute}/virtualMachines/{inst.vm_name}" if pool.spec.multi_size
                   else f"{compute}/virtualMachineScaleSets/{group.name}/virtualMachines/{inst.instance_id}")
    body: dict[str, Any] = {
        "id": f"{_pool_id(cluster, pool)}/machines/{inst.node_name}",
        "name": inst.node_name,
        "type": _MACHINE_TYPE,
        "properties": {
            "network": {"ipAddresses": [{"ip": inst.private_ip, "family": "IPv4"}]},
            "resourceId": resource_id,
        },
    }
    if pool.spec.multi_size and _has_machine_hardware(api_version):
        body["properties"]["hardware"] = {"vmSize": group.spec.vm_size}
    if inst.zone:
        body["zones"] = [inst.zone]
    return body


def cluster_json(world: World, cluster: ManagedCluster) -> dict[str, Any]:
    """The managed cluster (a subset of ManagedClustersGet): what a client reads to find its location and pools."""
    pools = world.agent_pools()
    location = world.scenario.location
    node_rg = (pools[0].spec.node_resource_group if pools
               else agent_pools.default_node_resource_group(cluster.name, location))
    version = agent_pools.ORCHESTRATOR_VERSION
    return {
        "id": cluster.id,
        "name": cluster.name,
        "type": "Microsoft.ContainerService/ManagedClusters",
        "location": location,
        "sku": {"name": "Base", "tier": "Free"},
        "properties": {
            "provisioningState": "Succeeded",
            "powerState": {"code": "Running"},
            "kubernetesVersion": version,
            "currentKubernetesVersion": version,
            "dnsPrefix": f"{cluster.name}-dns",
            "fqdn": urlparse(cluster.server).hostname or cluster.server,
            "agentPoolProfiles": [{"name": p.name, **pool_properties(world, p)} for p in pools],
            "nodeResourceGroup": node_rg,
            "enableRBAC": True,
            "aadProfile": {"managed": True, "enableAzureRBAC": False, "tenantID": TENANT_ID},
            "networkProfile": {
                "networkPlugin": "azure", "networkPluginMode": "overlay", "podCidr": "10.244.0.0/16",
                "serviceCidr": "10.0.0.0/16", "dnsServiceIP": "10.0.0.10", "outboundType": "loadBalancer",
                "loadBalancerSku": "standard",
            },
            "maxAgentPools": 100,
            "supportPlan": "KubernetesOfficial",
        },
    }


def _operation_json(world: World, op: PoolOperation) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": op.op_id, "status": op.status, "startTime": rfc3339_micro(world.start + timedelta(seconds=op.started_at)),
    }
    if op.ended_at is not None:
        body["endTime"] = rfc3339_micro(world.start + timedelta(seconds=op.ended_at))
    if op.status == "Failed":
        body["error"] = {"code": op.error_code, "message": op.error_message}
    return body


def _operation_headers(world: World, request: Request, op: PoolOperation) -> dict[str, str]:
    base = (f"https://{request.header('host', '127.0.0.1')}/subscriptions/{world.subscription_id}"
            f"/providers/Microsoft.ContainerService/locations/{world.scenario.location}")
    return {
        "Azure-AsyncOperation": f"{base}/operations/{op.op_id}?api-version={OPERATIONS_API_VERSION}",
        "Location": f"{base}/operationresults/{op.op_id}?api-version={OPERATION_RESULTS_API_VERSION}",
        "Retry-After": str(LRO_RETRY_AFTER),
    }


def _page(items: list[dict[str, Any]], request: Request, page_size: int, api_version: str) -> dict[str, Any]:
    return arm_page(items, request, page_size=page_size, api_version=api_version)


# ---------------------------------------------------------------------------- handlers


def _get_cluster(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    return json_response(200, cluster_json(world, _cluster(world, params)))


def _list_agent_pools(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = _cluster(world, params)
    return json_response(200, {"value": [pool_json(world, cluster, p) for p in world.agent_pools()]})


def _get_agent_pool(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = _cluster(world, params)
    return json_response(200, pool_json(world, cluster, world.agent_pool(params["pool"])))


def _sandbox_cannot(what: str, target: str) -> ArmError:
    return ArmError(409, "OperationNotAllowed", f"The sandbox cannot {what}.", target)


def _unchanged(properties: dict[str, Any], key: str, current: Any, *, normalise: Callable[[Any], Any] = lambda v: v) -> bool:
    """True when the body leaves `key` out, nulls it, or gives the current value."""
    value = properties.get(key)
    return value is None or normalise(value) == normalise(current)


def _put_agent_pool(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = _cluster(world, params)
    name = params["pool"]
    if name.lower() not in {p.name for p in world.agent_pools()}:
        raise _sandbox_cannot(f"create agent pool '{name}': declare it in the scenario's node_groups", "name")
    pool = world.agent_pool(name)
    if_match = request.header("if-match")
    if if_match and if_match.strip('"') not in ("*", pool.etag):
        raise ArmError(412, "PreconditionFailed", f"The eTag '{if_match}' does not match the agent pool's current "
                                                  f"eTag '{pool.etag}'.")  # code and wording unverified
    if request.header("if-none-match").strip() == "*":
        raise ArmError(412, "PreconditionFailed", f"Agent pool '{pool.name}' already exists.")  # unverified
    try:
        body = request.json()
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    properties = body.get("properties") if isinstance(body, dict) else None
    if not isinstance(properties, dict):
        raise ArmError(400, "InvalidRequestContent", "The request content must be an agent pool with properties.")
    group = world.agent_pool_group(pool)
    spec = group.spec
    multi = pool.spec.multi_size
    immutable: list[tuple[str, Any, Callable[[Any], Any]]] = [
        ("vmSize", "" if multi else spec.vm_size, lambda v: str(v).lower()),
        ("osType", "Linux", lambda v: str(v).lower()),
        ("osSKU", agent_pools.OS_SKU, lambda v: str(v).lower()),
        ("type", pool.spec.pool_type, lambda v: str(v).lower()),
        ("availabilityZones", list(spec.zones), lambda v: sorted(map(str, v)) if isinstance(v, list) else v),
        ("maxPods", spec.allocatable.pods, lambda v: v),
        ("osDiskSizeGB", _OS_DISK_SIZE_GB, lambda v: v),
        # Fixed at creation (spot-node-pool.md): priority and max price; the eviction policy likewise (unverified).
        # A Regular pool's eviction policy and max price mean nothing: left unchecked.
        ("scaleSetPriority", spec.priority, lambda v: str(v).lower()),
        *([("scaleSetEvictionPolicy", spec.eviction_policy, lambda v: str(v).lower()),
           ("spotMaxPrice", spec.max_price, lambda v: float(v) if isinstance(v, int | float) else v)]
          if spec.priority == "Spot" else []),
    ]
    for key, current, normalise in immutable:
        if not _unchanged(properties, key, current, normalise=normalise):
            # AKS's code and wording for immutable properties (as in Azure/AKS#575: "Changing property 'enableRBAC'
            # is not allowed."); that it names agent pool properties the same way is unverified.
            raise ArmError(400, "PropertyChangeNotAllowed", f"Changing property '{key}' is not allowed.",
                           f"properties.{key}")
    version = properties.get("orchestratorVersion")
    if version not in (None, "", pool.spec.orchestrator_version):
        raise _sandbox_cannot(f"upgrade agent pools (orchestratorVersion {pool.spec.orchestrator_version})",
                              "properties.orchestratorVersion")
    if not _unchanged(properties, "nodeLabels", dict(pool.spec.node_labels), normalise=lambda v: v or {}):
        raise _sandbox_cannot("change an agent pool's nodeLabels", "properties.nodeLabels")
    if not _unchanged(properties, "nodeTaints", list(pool.spec.node_taints), normalise=lambda v: list(v or [])):
        raise _sandbox_cannot("change an agent pool's nodeTaints", "properties.nodeTaints")
    if not _unchanged(properties, "scaleDownMode", "Delete"):
        raise _sandbox_cannot("model scaleDownMode Deallocate", "properties.scaleDownMode")
    power = properties.get("powerState")
    if isinstance(power, dict) and power.get("code") not in (None, "Running"):
        raise _sandbox_cannot("stop agent pools", "properties.powerState")

    if multi:
        return _put_vm_agent_pool(world, request, cluster, pool, properties)
    count = properties.get("count")
    if count is None:  # AKS's answer (seen in public reports, 2023)
        raise ArmError(400, "InvalidParameter", "Required parameter properties.count is missing (null).",
                       "properties.count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise ArmError(400, "InvalidParameter", f"The value '{count}' of parameter 'properties.count' is invalid.",
                       "properties.count")
    mode = properties.get("mode") or pool.mode
    if mode not in agent_pools.MODES:
        raise ArmError(400, "InvalidParameter", f"The value '{mode}' of parameter 'properties.mode' is invalid: "
                                                "it must be System or User.", "properties.mode")
    enabled = properties.get("enableAutoScaling")
    if enabled is None:
        enabled = pool.enable_auto_scaling
    if not isinstance(enabled, bool):
        raise ArmError(400, "InvalidParameter", "The value of parameter 'properties.enableAutoScaling' is invalid.",
                       "properties.enableAutoScaling")
    bounds: dict[str, int | None] = {}
    for key, current in (("minCount", pool.min_count), ("maxCount", pool.max_count)):
        value = properties[key] if key in properties else (current if enabled else None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ArmError(400, "InvalidParameter", f"The value '{value}' of parameter 'properties.{key}' is invalid.",
                           f"properties.{key}")
        bounds[key] = value
    tags = _tags(properties)

    op = world.update_agent_pool(
        pool, count=count, mode=mode, enable_auto_scaling=enabled, min_count=bounds["minCount"],
        max_count=bounds["maxCount"], tags=tags,
    )
    headers = _operation_headers(world, request, op)
    del headers["Location"]  # a PUT's answer carries the async operation only
    return json_response(200, pool_json(world, cluster, pool), headers)


def _tags(properties: dict[str, Any]) -> dict[str, str] | None:
    """The PUT's `properties.tags` (None: left out), a map of strings."""
    tags = properties.get("tags")
    if tags is not None and (not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values())):
        raise ArmError(400, "InvalidParameter", "Tags must be a map of strings.", "properties.tags")
    return tags


def _manual_counts(pool: AgentPoolSim, sizes: list[str], profile: Any) -> dict[str, int]:
    """`virtualMachinesProfile.scale.manual` as a count per size of the pool (a size left out: 0 machines)."""
    target = "properties.virtualMachinesProfile.scale.manual"
    scale = profile.get("scale") if isinstance(profile, dict) else None
    manual = scale.get("manual") if isinstance(scale, dict) else None
    if not isinstance(manual, list):
        raise ArmError(400, "InvalidParameter", f"The value of parameter {target} is invalid: it must be a list of "
                                                "sizes and counts.", target)
    if isinstance(scale, dict) and scale.get("autoscale"):
        raise _sandbox_cannot("model autoscale profiles of VirtualMachines pools", "properties.virtualMachinesProfile")
    known = {size.lower(): size for size in sizes}
    counts = {size: 0 for size in sizes}
    seen: set[str] = set()
    for i, entry in enumerate(manual):
        size = entry.get("size") if isinstance(entry, dict) else None
        count = entry.get("count") if isinstance(entry, dict) else None
        if not isinstance(size, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ArmError(400, "InvalidParameter", f"The value of parameter {target}[{i}] is invalid: it must be "
                                                    "a size and a count of at least 0.", f"{target}[{i}]")
        if size.lower() in seen:  # code and wording unverified
            raise ArmError(400, "InvalidParameter", f"The size {size} appears more than once in {target}.",
                           f"{target}[{i}].size")
        seen.add(size.lower())
        if size.lower() not in known:
            raise _sandbox_cannot(f"add size {size} to agent pool '{pool.name}' (its sizes: {', '.join(sizes)})",
                                  f"{target}[{i}].size")
        counts[known[size.lower()]] = count
    return counts


def _put_vm_agent_pool(
    world: World, request: Request, cluster: ManagedCluster, pool: AgentPoolSim, properties: dict[str, Any],
) -> Response:
    """A PUT of a VirtualMachines pool: the counts per size from `virtualMachinesProfile.scale.manual` (left out:
    unchanged); `count`, when given, must be their sum; AKS's autoscaler and a new mode are not modelled here."""
    current = dict(world.agent_pool_size_counts(pool))
    profile = properties.get("virtualMachinesProfile")
    counts = _manual_counts(pool, list(current), profile) if profile is not None else current
    count = properties.get("count")
    if count is not None and count != sum(counts.values()):  # code and wording unverified
        raise ArmError(400, "InvalidParameter", f"properties.count ({count}) must be the sum of the counts in "
                                                f"properties.virtualMachinesProfile.scale.manual "
                                                f"({sum(counts.values())}).", "properties.count")
    if properties.get("enableAutoScaling"):
        raise _sandbox_cannot("model AKS's autoscaler on VirtualMachines pools", "properties.enableAutoScaling")
    if (properties.get("mode") or pool.mode) != pool.mode:
        raise _sandbox_cannot("change the mode of VirtualMachines pools", "properties.mode")
    tags = _tags(properties)
    op = world.update_vm_agent_pool(pool, counts=counts, tags=tags)
    headers = _operation_headers(world, request, op)
    del headers["Location"]  # a PUT's answer carries the async operation only
    return json_response(200, pool_json(world, cluster, pool), headers)


def _delete_machines(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    _cluster(world, params)
    pool = world.agent_pool(params["pool"])
    try:
        body = request.json()
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    names = body.get("machineNames") if isinstance(body, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ArmError(400, "InvalidParameter", "The value of parameter machineNames is invalid.", "machineNames")
    op = world.delete_agent_pool_machines(pool, names)
    return json_response(202, None, _operation_headers(world, request, op))


def _list_machines(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = _cluster(world, params)
    pool = world.agent_pool(params["pool"])
    items = [machine_json(world, cluster, pool, inst, api_version) for inst in world.machines(pool)]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _get_machine(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = _cluster(world, params)
    pool = world.agent_pool(params["pool"])
    inst = world.machine(pool, params["machine"])
    if inst is None:  # 404 as karpenter-provider-azure expects of AKS; code and wording unverified
        raise ArmError(404, "NotFound", f"Machine '{params['machine']}' was not found in agent pool '{pool.name}'.")
    return json_response(200, machine_json(world, cluster, pool, inst, api_version))


def _find_operation(world: World, params: dict[str, str]) -> PoolOperation:
    op = world.agent_pool_operation(params["op"])
    if op is None or params["sub"].lower() != world.subscription_id.lower():
        raise ArmError(404, "NotFound", f"The operation '{params['op']}' was not found.")
    return op


def _operation(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    op = _find_operation(world, params)
    headers = {"Retry-After": str(LRO_RETRY_AFTER)} if op.status == "InProgress" else {}
    return json_response(200, _operation_json(world, op), headers)


def _operation_result(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    op = _find_operation(world, params)
    if op.status == "InProgress":
        location = _operation_headers(world, request, op)["Location"]
        return json_response(202, None, {"Location": location, "Retry-After": str(LRO_RETRY_AFTER)})
    if op.status == "Failed":  # the failure's status on the result link is unverified
        return json_response(400, {"error": {"code": op.error_code, "message": op.error_message}})
    return json_response(204, None)


HANDLERS: dict[str, Callable[[World, Request, dict[str, str], str], Response]] = {
    "aks_get_cluster": _get_cluster,
    "aks_list_agent_pools": _list_agent_pools,
    "aks_get_agent_pool": _get_agent_pool,
    "aks_put_agent_pool": _put_agent_pool,
    "aks_delete_machines": _delete_machines,
    "aks_list_machines": _list_machines,
    "aks_get_machine": _get_machine,
    "aks_operation": _operation,
    "aks_operation_result": _operation_result,
}
