"""The Azure Resource Manager double for Microsoft.Compute scale sets: `handle(world, request) -> Response`.

Shaped after what azure-mgmt-compute 39 sends and accepts:
- `begin_update` (PATCH) accepts only 200 on the initial response, so PATCH
  answers 200 with the scale set and an `Azure-AsyncOperation` header; ARMPolling
  polls that operation, then GETs the scale set for the final result.
- `begin_delete_instances` (POST .../delete) accepts 200/202; we answer 202 with
  `Azure-AsyncOperation` and `Location`; after success the poller GETs Location.
- `begin_deallocate` / `begin_start` (POST .../deallocate, .../start, body `{"instanceIds": [...]}`,
  optional: none means every instance) accept 200/202 too and are answered like the delete.
  Deallocate is throttled with deletes (delete/power-off/deallocate), start with updates.
- `virtual_machine_scale_set_vms.get/list(..., expand="instanceView")` get `instanceView.statuses`
  (`ProvisioningState/...`, `PowerState/starting|running|deallocating|deallocated`); without it, none.
  Every VM model carries `osProfile.computerName` (the hostname; also `instanceView.computerName`).
- The Network RP's calls for Uniform scale-set NICs, served under the Compute path (azure-mgmt-network's
  `network_interfaces.list_virtual_machine_scale_set_network_interfaces(rg, vmss)` and
  `list_virtual_machine_scale_set_vm_network_interfaces(rg, vmss, instance_id)`, which send the api-version
  of the spec's vmssNetworkInterface.json, 2018-10-01): `GET .../virtualMachineScaleSets/{vmss}/networkInterfaces`
  and `.../virtualMachines/{id}/networkInterfaces` list each instance's NICs, one per NIC configuration of
  the model (one, named after the scale set, unless the scenario declares `nics`), each with `primary` and one
  primary ipConfiguration holding its private IP; the Node's InternalIP is one of them (`nic_json`). The
  scale set model carries the configurations (`networkProfile.networkInterfaceConfigurations`), a VM model
  references its NICs (`networkProfile.networkInterfaces`, with `primary`).
- `virtual_machine_scale_set_vms.begin_update` (PUT .../virtualMachines/{id}, instance protection): only
  `properties.protectionPolicy.protectFromScaleIn` is taken; answered 200 with the VM (provisioning state
  Succeeded, so the poller is done at once), which then carries `protectionPolicy`. A capacity decrease
  skips protected instances; a delete naming one still deletes it (sandbox.world.scale_sets).
- Lists page with `nextLink` (used verbatim by the SDK, so it carries api-version).
- `resource_skus.list(filter="location eq '<loc>'")` gets the VM sizes the scenario's
  scale sets use, with the capacity their nodes report (plus one availability-set and
  one disk SKU, as the real list mixes resource types), in one page as ARM answers it.
  A size in the scenario's `restricted_vm_sizes` carries a Location restriction
  `NotAvailableForSubscription`, and growing a scale set of that size is refused with
  409 `SkuNotAvailable`.
- azure-mgmt-monitor's `metrics.list(<scale set id>, metricnames="Percentage CPU", ...)`
  gets the Azure Monitor metrics response shape, split per instance by `VMName`,
  with values from `World.node_cpu` (see `_metrics`).
- Flexible scale sets (node groups with `"orchestration": "Flexible"`): their members' VM and NIC routes, and
  their own answers to the scale-set routes that are Uniform-only, live in `sandbox.api.flexible` (registered
  below: `flexible.ROUTES`, `OPERATIONS`, `HANDLERS`, and its `fault_resource`, `throttle_key` and
  `override` hooks in `_dispatch`).
- azure-mgmt-containerservice's `managed_clusters.list_cluster_user_credentials(rg, name)`
  (POST .../managedClusters/{name}/listClusterUserCredential) gets the user kubeconfig of
  `world.managed_cluster`, the simulated cluster as an Entra ID-enabled AKS cluster; any
  other cluster is 404 ResourceNotFound.
- The same cluster's GET, agent pools (list, get, PUT), deleteMachines, machines and AKS operations live in
  `sandbox.api.agent_pools_api` (registered below: its ROUTES, OPERATIONS, HANDLERS; faults name the pool).
- The Compute usages list (quota) and simulateEviction of Spot VMs live in `sandbox.api.spot_api` (registered below).
  A Spot scale set's `virtualMachineProfile` carries `priority`, `evictionPolicy` and `billingProfile.maxPrice`
  (`sandbox.model.spot.priority_profile`); growing one is checked against quota and Spot capacity by the world.

Every request needs a bearer token from `world.identity` that is unexpired and issued for
ARM's audience (`https://management.azure.com`, or the URL the server serves ARM at):
otherwise 401 with ARM's code (`AuthenticationFailed`, `InvalidAuthenticationToken`,
`ExpiredAuthenticationToken`, `InvalidAuthenticationTokenAudience`) and a
`WWW-Authenticate` challenge.

`Retry-After` values here are in SIM seconds; the server rescales them to wall
seconds by the clock's speed (in-process callers see sim seconds).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from sandbox.api import agent_pools_api, flexible, spot_api, standby_pool_api
from sandbox.api.arm_paging import arm_page
from sandbox.api.wire import Request, Response, json_response
from sandbox.model import quota, spot
from sandbox.model.instance_mix import MIX_SKU, InstanceMixSpec, sku_profile
from sandbox.world.instance_mix import steered
from sandbox.model.nic_spec import NicSpec, group_nics, subnet_name
from sandbox.model.resources import Amounts
from sandbox.model.units import parse_time, rfc3339, rfc3339_micro
from sandbox.world import World, drift
from sandbox.world.compute import InstanceSim, Operation, ScaleSetSim, failed_statuses, nic_addresses
from sandbox.world.errors import ArmError
from sandbox.world.faults import Fault, default_scale_up_message
from sandbox.world.identity import ARM, Verdict, quoted_list

LRO_RETRY_AFTER = 10  # sim seconds between polls of an async operation
_AUTHORITY = 'Bearer authorization_uri="https://login.microsoftonline.com/common"'
_CHALLENGE = {"WWW-Authenticate": f'{_AUTHORITY}, error="invalid_token"'}
_UNREADABLE = "The request content was invalid and could not be deserialized."
_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_COMPUTE = _SUB + r"/providers/Microsoft\.Compute"
_VMSS_IN_RG = _SUB + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/virtualMachineScaleSets"
_VMSS = _VMSS_IN_RG + r"/(?P<vmss>[^/]+)"
_AKS = _SUB + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.ContainerService/managedClusters/(?P<cluster>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern + "$", re.IGNORECASE), name)  # ARM paths are case-insensitive
    for method, pattern, name in [
        ("GET", _COMPUTE + r"/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)", "operation"),
        ("GET", _COMPUTE + r"/skus", "skus"),
        ("GET", _COMPUTE + r"/virtualMachineScaleSets", "list_all"),
        ("GET", _VMSS_IN_RG, "list"),
        ("GET", _VMSS, "get"),
        ("PATCH", _VMSS, "update"),
        ("PUT", _VMSS, "put"),
        ("POST", _VMSS + r"/delete", "delete_instances"),
        ("POST", _VMSS + r"/deallocate", "deallocate_instances"),
        ("POST", _VMSS + r"/start", "start_instances"),
        ("GET", _VMSS + r"/virtualMachines", "list_vms"),
        ("GET", _VMSS + r"/virtualMachines/(?P<id>[^/]+)", "get_vm"),
        ("PUT", _VMSS + r"/virtualMachines/(?P<id>[^/]+)", "put_vm"),
        ("GET", _VMSS + r"/networkInterfaces", "list_nics"),
        ("GET", _VMSS + r"/virtualMachines/(?P<id>[^/]+)/networkInterfaces", "list_vm_nics"),
        ("GET", _VMSS + r"/providers/Microsoft\.Insights/metrics", "metrics"),
        ("POST", _AKS + r"/listClusterUserCredential", "list_cluster_user_credential"),
        *flexible.ROUTES,  # Flexible members: plain VMs and standalone NICs
        *agent_pools_api.ROUTES,  # the managed cluster's agent pools, machines and AKS operations
        *spot_api.ROUTES,  # the usages list, simulateEviction
        *standby_pool_api.ROUTES,  # Microsoft.StandbyPool: a Flexible set's Standby Pool
    ]
]
# operation name in the report, write?, throttling bucket
OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "operation": ("GET operations", False, None),
    # ARM limits this read per subscription, far above one listing per location every few hours: not modelled.
    "skus": ("LIST skus", False, None),
    "list_all": ("LIST virtualMachineScaleSets", False, "list"),
    "list": ("LIST virtualMachineScaleSets", False, "list"),
    "get": ("GET virtualMachineScaleSets", False, "get"),
    "update": ("PATCH virtualMachineScaleSets", True, "update"),
    "put": ("PUT virtualMachineScaleSets", True, "update"),
    "delete_instances": ("POST delete", True, "delete"),
    "deallocate_instances": ("POST deallocate", True, "delete"),  # Azure's delete/power-off/deallocate bucket
    "start_instances": ("POST start", True, "update"),  # Azure's update/start bucket
    "list_vms": ("LIST virtualMachines", False, "list"),
    "get_vm": ("GET virtualMachines", False, "get"),
    # A VMSS VM update: Azure's bucket is per VM (4 a minute); charged here per scale set, the stricter reading.
    "put_vm": ("PUT virtualMachines", True, "vm_update"),
    # Network RP reads with the Network RP's own limits (per subscription, far above these reads): not modelled.
    "list_nics": ("LIST networkInterfaces", False, None),
    "list_vm_nics": ("LIST virtualMachines/networkInterfaces", False, None),
    # Azure Monitor has its own limits (per subscription, far above a call per scale set a minute): not modelled.
    "metrics": ("GET metrics", False, None),
    "list_cluster_user_credential": ("POST listClusterUserCredential", False, None),
    **flexible.OPERATIONS,
    **agent_pools_api.OPERATIONS,
    **spot_api.OPERATIONS,
    **standby_pool_api.OPERATIONS,
}
_DEFAULT_CODES = {
    400: "BadRequest", 401: "AuthenticationFailed", 403: "AuthorizationFailed", 404: "NotFound", 409: "Conflict",
    429: "TooManyRequests", 500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable", 504: "GatewayTimeout",
}


def _arm_headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    request_id = str(uuid.uuid4())
    return {"x-ms-request-id": request_id, "x-ms-correlation-request-id": request_id, **(extra or {})}


def error_response(error: ArmError, headers: dict[str, str] | None = None) -> Response:
    return json_response(error.status, error.body(), _arm_headers(headers))


def handle(world: World, request: Request) -> Response:
    """Serve one ARM request against the world (already advanced by the caller)."""
    with world.lock:
        api_version = request.query.get("api-version")
        if not api_version:
            message = "The api-version query parameter (?api-version=) is required for all requests."
            return error_response(ArmError(400, "MissingApiVersionParameter", message))
        token = request.bearer_token()
        if token is None:
            message = "Authentication failed. The 'Authorization' header is missing."
            return error_response(ArmError(401, "AuthenticationFailed", message), _CHALLENGE)
        refused = _refused_token(world, token)
        if refused is not None:
            return refused
        path_known = False
        for method, pattern, name in _ROUTES:
            match = pattern.match(request.path)
            if match and method == request.method:
                return _dispatch(world, request, name, match.groupdict(), api_version)
            path_known = path_known or match is not None
        if path_known:
            return error_response(
                ArmError(405, "MethodNotAllowed", f"The requested resource does not support http method '{request.method}'.")
            )
        message = f"The resource path '{request.path}' is not served by the sandbox."
        return error_response(ArmError(404, "InvalidResourceType", message))


def _refused_token(world: World, token: str) -> Response | None:
    """ARM's answer to a token it does not take, or None when the token is good."""
    check = world.identity.check(token, ARM)
    if check.ok:
        return None
    if check.verdict is Verdict.EXPIRED:
        assert check.issued is not None
        message = (f"The access token expiry UTC time '{check.issued.expiry_text()}' is earlier than current UTC time "
                   f"'{world.identity.now_text()}'.")
        challenge = {"WWW-Authenticate": f'{_AUTHORITY}, error="invalid_token", error_description="The access token has expired."'}
        return error_response(ArmError(401, "ExpiredAuthenticationToken", message), challenge)
    if check.verdict is Verdict.WRONG_AUDIENCE:
        assert check.issued is not None
        message = (f"The access token has been obtained for wrong audience or resource '{check.issued.resource}'. "
                   f"It should exactly match with one of the allowed audiences {quoted_list(world.identity.audiences(ARM))}.")
        return error_response(ArmError(401, "InvalidAuthenticationTokenAudience", message), _CHALLENGE)
    return error_response(ArmError(401, "InvalidAuthenticationToken", "The access token is invalid."), _CHALLENGE)


def _dispatch(world: World, request: Request, name: str, params: dict[str, str], api_version: str) -> Response:
    label, write, bucket = OPERATIONS[name]
    world.count_call("arm", label, write=write)
    fault_resource = flexible.fault_resource(world, name, params, request) or spot_api.fault_resource(world, name, params) or (
        standby_pool_api.fault_resource(name, params)) or (
        "metrics" if name == "metrics"
        else params.get("pool") or agent_pools_api.FAULT_RESOURCES.get(name)  # an agent pool's name
        or params.get("cluster") or params.get("vmss")
        or {"operation": "operations", "skus": "skus"}.get(name, "virtualMachineScaleSets")
    )
    fault = world.take_fault("arm", request.method, fault_resource)
    if fault is not None:
        return _fault_response(fault)
    try:
        extra: dict[str, str] = {}
        if bucket is not None:
            key = flexible.throttle_key(world, request, name, params) or (
                world.scale_set(params["sub"], params["rg"], params["vmss"]).key
                if "vmss" in params
                else f"rg:{params.get('rg', '').lower()}"
            )
            spent = world.take_token(key, bucket)
            if spent is not None:
                allowed, remaining, retry_after, header = spent
                extra["x-ms-ratelimit-remaining-resource"] = header
                if not allowed:
                    return _throttled(header, retry_after)
        handler = flexible.override(world, name, params) or _HANDLERS[name]  # a Flexible set's own answer
        response = handler(world, request, params, api_version)
        response.headers.update(_arm_headers(extra))
        return response
    except ArmError as error:
        return error_response(error)


def _fault_response(fault: Fault) -> Response:
    headers = {"Retry-After": _number(fault.retry_after)} if fault.retry_after is not None else None
    code = fault.code or _DEFAULT_CODES.get(fault.status, "InternalServerError")
    return error_response(ArmError(fault.status, code, fault.message or f"Injected fault: {code}."), headers)


def _throttled(header: str, retry_after: float) -> Response:
    policy = header.split(";")[0].split("/")[-1]
    details = json.dumps({"operationGroup": policy, "allowedRequestCount": 0, "measuredRequestCount": 1})
    body = {
        "error": {
            "code": "OperationNotAllowed",
            "message": "The server rejected the request because too many requests have been received for this subscription.",
            "details": [{"code": "TooManyRequests", "target": policy, "message": details}],
        }
    }
    headers = {"Retry-After": _number(retry_after), "x-ms-ratelimit-remaining-resource": header}
    return json_response(429, body, _arm_headers(headers))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# ---------------------------------------------------------------------------- representations


def _vmss_id(world: World, group: ScaleSetSim) -> str:
    return (
        f"/subscriptions/{world.subscription_id}/resourceGroups/{group.resource_group}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}"
    )


def vmss_json(world: World, group: ScaleSetSim) -> dict[str, Any]:
    if group.flexible:
        return flexible.vmss_json(world, group)
    spec = group.spec
    body: dict[str, Any] = {
        "name": group.name,
        "id": _vmss_id(world, group),
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": spec.location,
        "tags": dict(group.tags),
        "etag": vmss_etag(group),
        "sku": {"name": spec.vm_size, "tier": "Standard", "capacity": group.capacity},
        "properties": {
            "singlePlacementGroup": False,
            "orchestrationMode": "Uniform",
            "upgradePolicy": {"mode": "Manual"},
            "scaleInPolicy": {"rules": ["Default"], "forceDeletion": False},
            "virtualMachineProfile": {
                "osProfile": {
                    "computerNamePrefix": spec.computer_name_prefix,
                    "adminUsername": "azureuser",
                    "linuxConfiguration": {"disablePasswordAuthentication": True, "provisionVMAgent": True},
                },
                "storageProfile": {
                    "imageReference": {
                        "publisher": "Canonical",
                        "offer": "0001-com-ubuntu-server-jammy",
                        "sku": "22_04-lts-gen2",
                        "version": "latest",
                    },
                    "osDisk": {
                        "osType": "Linux",
                        "createOption": "FromImage",
                        "caching": "ReadWrite",
                        "managedDisk": {"storageAccountType": "Premium_LRS"},
                        "diskSizeGB": 128,
                    },
                },
                "networkProfile": network_profile(world, group),
                **spot.priority_profile(spec.priority, spec.eviction_policy, spec.max_price),
            },
            "provisioningState": world.provisioning_state(group),
            "overprovision": False,
            "doNotRunExtensionsOnOverprovisionedVMs": False,
            "uniqueId": group.unique_id,
            "platformFaultDomainCount": 1,
            "timeCreated": rfc3339_micro(world.start),
        },
    }
    if spec.zones:
        body["zones"] = list(spec.zones)
    return body


_PROVISIONING_DISPLAY = {
    "Creating": "Creating", "Succeeded": "Provisioning succeeded", "Updating": "Updating", "Deleting": "Deleting",
    "Failed": "Provisioning failed",
}
_POWER_DISPLAY = {
    "starting": "VM starting", "running": "VM running",
    "deallocating": "VM deallocating", "deallocated": "VM deallocated",
}


def _instance_view(inst: InstanceSim) -> dict[str, Any]:
    """What `$expand=instanceView` adds: the provisioning and power state statuses (as ARM lists them)."""
    if inst.state == "Failed":
        return {"computerName": inst.computer_name, "statuses": failed_statuses(inst)}
    provisioning: dict[str, Any] = {
        "code": f"ProvisioningState/{inst.state.lower()}", "level": "Info",
        "displayStatus": _PROVISIONING_DISPLAY[inst.state],
    }
    power = {"code": f"PowerState/{inst.power}", "level": "Info", "displayStatus": _POWER_DISPLAY[inst.power]}
    return {"computerName": inst.computer_name, "statuses": [provisioning, power]}


def vm_json(world: World, group: ScaleSetSim, inst: InstanceSim, *, instance_view: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"{group.name}_{inst.instance_id}",
        "id": f"{_vmss_id(world, group)}/virtualMachines/{inst.instance_id}",
        "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "location": group.spec.location,
        "instanceId": str(inst.instance_id),
        "sku": {"name": group.spec.vm_size, "tier": "Standard"},
        "properties": {
            "latestModelApplied": drift.latest_model_applied(world, group, inst),
            "modelDefinitionApplied": "VirtualMachineScaleSet",
            "vmId": inst.vm_id,
            "provisioningState": inst.state,
            "timeCreated": rfc3339_micro(_at(world, inst.created_at)),
            "hardwareProfile": {"vmSize": group.spec.vm_size},
            "osProfile": {
                "computerName": inst.computer_name,
                "adminUsername": "azureuser",
                "linuxConfiguration": {"disablePasswordAuthentication": True, "provisionVMAgent": True},
            },
            "networkProfile": vm_network_profile(world, group, inst),
        },
    }
    if instance_view:
        body["properties"]["instanceView"] = _instance_view(inst)
    if world.is_scale_in_protected(inst):  # absent until set, as on an instance nobody protected
        body["properties"]["protectionPolicy"] = {"protectFromScaleIn": True, "protectFromScaleSetActions": False}
    if inst.zone:
        body["zones"] = [inst.zone]
    return body


def _subnet_id(world: World, group: ScaleSetSim, nic: NicSpec) -> str:
    return (f"/subscriptions/{world.subscription_id}/resourceGroups/{group.resource_group}/providers/Microsoft.Network/"
            f"virtualNetworks/{world.scenario.cluster_name}-vnet/subnets/{subnet_name(nic.subnet)}")


def _vm_id(world: World, group: ScaleSetSim, inst: InstanceSim) -> str:
    return f"{_vmss_id(world, group)}/virtualMachines/{inst.instance_id}"


def network_profile(world: World, group: ScaleSetSim) -> dict[str, Any]:
    """The scale set model's `networkProfile`: one `networkInterfaceConfigurations` entry per NIC (its name,
    `primary`, one primary ipConfiguration in its subnet), as the VMSS model carries them."""
    return {"networkInterfaceConfigurations": [
        {"name": nic.name, "properties": {
            "primary": nic.primary, "enableAcceleratedNetworking": True, "enableIPForwarding": False,
            "ipConfigurations": [{"name": "ipconfig1", "properties": {
                "primary": True, "subnet": {"id": _subnet_id(world, group, nic)}, "privateIPAddressVersion": "IPv4"}}],
        }}
        for nic in group_nics(group.spec.nics, group.name)
    ]}


def vm_network_profile(world: World, group: ScaleSetSim, inst: InstanceSim) -> dict[str, Any]:
    """A VMSS VM's `networkProfile`: a reference to each of its NICs, with `primary`."""
    return {"networkInterfaces": [
        {"id": f"{_vm_id(world, group, inst)}/networkInterfaces/{nic.name}", "properties": {"primary": nic.primary}}
        for nic in group_nics(group.spec.nics, group.name)
    ]}


def nic_json(world: World, group: ScaleSetSim, inst: InstanceSim) -> list[dict[str, Any]]:
    """The instance's NICs as the Network RP lists Uniform scale-set NICs (the shape of the
    VmssNetworkInterfaceList example of the spec's vmssNetworkInterface.json), one per NIC configuration of the
    model and named after it (AKS names its one configuration after the scale set): `primary` on the NIC and
    one primary ipConfiguration holding its `privateIPAddress` (never changing). The Node's InternalIP is one
    of them: the primary's unless the scenario's `node_ip` names another."""
    vm_id = _vm_id(world, group, inst)
    nics = []
    for position, (nic, ip) in enumerate(nic_addresses(group.spec, inst.ip_index)):
        nic_id = f"{vm_id}/networkInterfaces/{nic.name}"
        # Unique per NIC: the index fits two bytes (a /16 holds every VM's address), the NIC's position the third.
        mac = "-".join(f"{b:02X}" for b in (0x00, 0x0D, 0x3A, 0xE0 | position & 0x0F,
                                             (inst.ip_index >> 8) & 0xFF, inst.ip_index & 0xFF))
        nics.append({
            "name": nic.name,
            "id": nic_id,
            "etag": f'W/"{inst.vm_id}"',
            "properties": {
                "provisioningState": "Succeeded",
                "resourceGuid": inst.vm_id,
                "ipConfigurations": [
                    {
                        "name": "ipconfig1",
                        "id": f"{nic_id}/ipConfigurations/ipconfig1",
                        "etag": f'W/"{inst.vm_id}"',
                        "properties": {
                            "provisioningState": "Succeeded",
                            "privateIPAddress": ip,
                            "privateIPAllocationMethod": "Dynamic",
                            "privateIPAddressVersion": "IPv4",
                            "subnet": {"id": _subnet_id(world, group, nic)},
                            "primary": True,
                        },
                    }
                ],
                "dnsSettings": {"dnsServers": [], "appliedDnsServers": []},
                "macAddress": mac,
                "enableAcceleratedNetworking": True,
                "enableIPForwarding": False,
                "primary": nic.primary,
                "virtualMachine": {"id": vm_id},
            },
        })
    return nics


def _at(world: World, t: float) -> datetime:
    return world.start + timedelta(seconds=t)


def _operation_json(world: World, op: Operation) -> dict[str, Any]:
    body: dict[str, Any] = {"name": op.op_id, "status": op.status, "startTime": rfc3339_micro(_at(world, op.started_at))}
    if op.ended_at is not None:
        body["endTime"] = rfc3339_micro(_at(world, op.ended_at))
    if op.status == "Failed":
        body["error"] = {"code": op.error_code, "message": op.error_message}
    return body


_GIB = 1024**3
_GPU = "nvidia.com/gpu"
# The real list mixes resource types; these two keep a client honest about filtering on resourceType.
_OTHER_SKUS: tuple[dict[str, Any], ...] = (
    {"resourceType": "availabilitySets", "name": "Aligned",
     "capabilities": [{"name": "MaximumPlatformFaultDomainCount", "value": "3"}]},
    {"resourceType": "disks", "name": "Premium_LRS", "tier": "Premium", "size": "P10", "family": "PremiumDisk",
     "capabilities": [{"name": "MaxSizeGiB", "value": "128"}, {"name": "MaxIOps", "value": "500"}]},
)


def vm_size_catalogue(world: World) -> dict[str, tuple[str, Amounts]]:
    """The VM sizes the scenario's scale sets use, by lower-cased name: (name, the capacity their nodes report)."""
    sizes: dict[str, tuple[str, Amounts]] = {}
    for spec in world.scenario.node_groups:
        mix_sizes = spec.instance_mix.sizes if spec.instance_mix is not None else ()
        for name, capacity in ((spec.vm_size, spec.capacity), *((m.vm_size, m.capacity) for m in mix_sizes)):
            sizes.setdefault(name.lower(), (name, capacity))
    return sizes


def is_restricted(world: World, vm_size: str) -> bool:
    return vm_size.lower() in {name.lower() for name in world.scenario.restricted_vm_sizes}


def sku_json(world: World, name: str, capacity: Amounts, location: str) -> dict[str, Any]:
    """One virtualMachines ResourceSku: capability values are strings, as ARM sends them."""
    zones = sorted({"1", "2", "3"} | {z for g in world.scenario.node_groups if g.vm_size.lower() == name.lower() for z in g.zones})
    vcpus = str(quota.vcpus(capacity))
    capabilities = [
        {"name": "vCPUs", "value": vcpus},
        {"name": "MemoryGB", "value": f"{round(capacity.memory_bytes / _GIB, 2):g}"},
        {"name": "HyperVGenerations", "value": "V1,V2"},
        {"name": "LowPriorityCapable", "value": "True"},
        {"name": "vCPUsAvailable", "value": vcpus},
    ]
    if capacity.scalar(_GPU):
        capabilities.append({"name": "GPUs", "value": str(capacity.scalar(_GPU))})
    restrictions: list[dict[str, Any]] = []
    if is_restricted(world, name):
        restrictions.append({
            "type": "Location", "values": [location], "restrictionInfo": {"locations": [location]},
            "reasonCode": "NotAvailableForSubscription",
        })
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.split("_", 1)[-1],
        "family": quota.vm_family(name),  # the usages API's family name (sandbox.model.quota: the rule)
        "locations": [location],
        "locationInfo": [{"location": location, "zones": zones, "zoneDetails": []}],
        "capabilities": capabilities,
        "restrictions": restrictions,
    }


def _operation_urls(world: World, request: Request, group: ScaleSetSim, op: Operation, api_version: str) -> tuple[str, str]:
    base = f"https://{request.header('host', '127.0.0.1')}"
    path = (
        f"/subscriptions/{world.subscription_id}/providers/Microsoft.Compute/locations/{group.spec.location}"
        f"/operations/{op.op_id}"
    )
    query = f"p={op.op_id}&api-version={quote(api_version)}"
    return f"{base}{path}?{query}", f"{base}{path}?{query}&monitor=true"


def _page(items: list[dict[str, Any]], request: Request, page_size: int, api_version: str) -> dict[str, Any]:
    return arm_page(items, request, page_size=page_size, api_version=api_version)


# ---------------------------------------------------------------------------- handlers


def _list(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    groups = world.scale_sets(params["sub"], params["rg"])
    items = [vmss_json(world, g) for g in groups]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _list_all(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    groups = [g for rg in world.scenario.resource_groups for g in world.scale_sets(params["sub"], rg)]
    items = [vmss_json(world, g) for g in groups]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _get(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    return json_response(200, vmss_json(world, world.scale_set(params["sub"], params["rg"], params["vmss"])))


def _check_if_match(group: ScaleSetSim, request: Request) -> None:
    """If-Match against the scale set's etag (`"<generation>"`, which every model change bumps): a write made from
    an older read is refused with 412 and changes nothing. `*` matches any existing scale set."""
    if_match = request.header("if-match").strip()
    if if_match and if_match != "*" and if_match != vmss_etag(group):
        raise ArmError(412, "PreconditionFailed", vm_etag_refusal(if_match, group))


def vmss_etag(group: ScaleSetSim) -> str:
    """The scale set's etag: its generation, which every change of its model or capacity bumps."""
    return f'"{group.generation}"'


def vm_etag_refusal(if_match: str, group: ScaleSetSim) -> str:
    return (f"The specified precondition 'If-Match = {if_match}' failed: the scale set's etag is "
            f"{vmss_etag(group)}.")  # wording unverified


def _capacity_request(group: ScaleSetSim, request: Request) -> tuple[int, dict[str, str] | None,
                                                                     InstanceMixSpec | None]:
    try:
        body = request.json() or {}
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    if not isinstance(body, dict):
        raise ArmError(400, "InvalidRequestContent", "The request content must be a JSON object.")
    sku = body.get("sku") or {}
    mix = group.spec.instance_mix
    if sku.get("name") and str(sku["name"]).lower() != (MIX_SKU if mix is not None else group.spec.vm_size).lower():
        raise ArmError(409, "OperationNotAllowed", "The sandbox cannot change the VM size of a scale set.", "sku.name")
    mix = _sku_profile_request(group, body)
    capacity = sku.get("capacity", group.capacity)
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        message = f"The value '{capacity}' of parameter 'sku.capacity' is invalid."
        raise ArmError(400, "InvalidParameter", message, "sku.capacity")
    tags = body.get("tags")
    if tags is not None and (not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values())):
        raise ArmError(400, "InvalidParameter", "Tags must be a map of strings.", "tags")
    return capacity, tags, mix


def _sku_profile_request(group: ScaleSetSim, body: dict[str, Any]) -> InstanceMixSpec | None:
    """The instance mix a write's `properties.skuProfile` asks for: None when it sends none or the set's own; new
    ranks and strategy for the same sizes (sandbox.world.instance_mix.steered, which refuses what ARM refuses).
    The sandbox gives no mix to a set without one."""
    properties = body.get("properties")
    sent = properties.get("skuProfile") if isinstance(properties, dict) else None
    if sent is None:
        return None
    mix = group.spec.instance_mix
    if mix is None:
        raise ArmError(409, "OperationNotAllowed", "The sandbox cannot give an instance mix to a scale set.",
                       "properties.skuProfile")
    return None if _same_sku_profile(sent, sku_profile(mix)) else steered(mix, sent)


def _same_sku_profile(sent: Any, current: dict[str, Any]) -> bool:
    """Equal but for the case of names and strategy (ARM compares them case-insensitively)."""
    def norm(profile: Any) -> Any:
        if not isinstance(profile, dict) or not isinstance(profile.get("vmSizes"), list):
            return None
        sizes = [(str(v.get("name", "")).lower(), v.get("rank")) if isinstance(v, dict) else None
                 for v in profile["vmSizes"]]
        return sorted(sizes, key=repr), str(profile.get("allocationStrategy", "")).lower()
    return norm(sent) is not None and norm(sent) == norm(current)


def _update(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    _check_if_match(group, request)
    capacity, tags, mix = _capacity_request(group, request)
    if capacity > group.capacity and is_restricted(world, group.spec.vm_size):
        message = default_scale_up_message("SkuNotAvailable", group.spec.vm_size, group.spec.location)
        world.note_refused_increase(group, capacity, "SkuNotAvailable")
        raise ArmError(409, "SkuNotAvailable", message, "sku.name")
    with world.lock:  # a new profile (ranks, strategy) chooses the sizes of this write's new VMs
        before = group.spec
        if mix is not None:
            group.spec = replace(group.spec, instance_mix=mix)
        try:
            op = world.set_capacity(group, capacity, tags)
        except ArmError:
            group.spec = before  # refused: nothing changed
            raise
    async_url, _ = _operation_urls(world, request, group, op, api_version)
    headers = {"Azure-AsyncOperation": async_url, "Retry-After": str(LRO_RETRY_AFTER)}
    return json_response(200, vmss_json(world, group), headers)


def _put(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    """create_or_update on an existing scale set: only sku.capacity and tags take effect."""
    return _update(world, request, params, api_version)


def _delete_instances(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    try:
        body = request.json() or {}
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    ids = body.get("instanceIds") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str | int) for i in ids):
        raise ArmError(400, "InvalidParameter", "The value of parameter instanceIds is invalid.", "instanceIds")
    op = world.delete_instances(group, [str(i) for i in ids])
    async_url, location = _operation_urls(world, request, group, op, api_version)
    headers = {"Azure-AsyncOperation": async_url, "Location": location, "Retry-After": str(LRO_RETRY_AFTER)}
    return json_response(202, None, headers)


def _power_instance_ids(request: Request) -> list[str] | None:
    """`instanceIds` of a deallocate or start body; None when omitted (ARM then acts on every instance)."""
    try:
        body = request.json()
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    if body is None:
        return None
    if not isinstance(body, dict):
        raise ArmError(400, "InvalidRequestContent", "The request content must be a JSON object.")
    ids = body.get("instanceIds")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str | int) and not isinstance(i, bool) for i in ids):
        raise ArmError(400, "InvalidParameter", "The value of parameter instanceIds is invalid.", "instanceIds")
    return [str(i) for i in ids]


def _power_action(
    world: World, request: Request, params: dict[str, str], api_version: str,
    act: Callable[[ScaleSetSim, list[str] | None], Operation],
) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    op = act(group, _power_instance_ids(request))
    async_url, location = _operation_urls(world, request, group, op, api_version)
    headers = {"Azure-AsyncOperation": async_url, "Location": location, "Retry-After": str(LRO_RETRY_AFTER)}
    return json_response(202, None, headers)


def _deallocate_instances(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    # `hibernate=true`: the world hibernates them, or refuses a set not created hibernation-enabled.
    hibernate = request.query.get("hibernate", "").lower() == "true"
    return _power_action(world, request, params, api_version,
                         lambda group, ids: world.deallocate_instances(group, ids, hibernate=hibernate))


def _start_instances(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    return _power_action(world, request, params, api_version, world.start_instances)


def _wants_instance_view(request: Request) -> bool:
    return any(part.strip().lower() == "instanceview" for part in request.query.get("$expand", "").split(","))


def _list_vms(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    view = _wants_instance_view(request)
    items = [vm_json(world, group, inst, instance_view=view) for inst in world.instances(group)]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _instance_or_404(world: World, group: ScaleSetSim, params: dict[str, str]) -> InstanceSim:
    inst = next((i for i in world.instances(group) if str(i.instance_id) == params["id"]), None)
    if inst is None:
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{params['id']}' "
            f"under resource group '{params['rg']}' was not found.",
        )
    return inst


def _get_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    inst = _instance_or_404(world, group, params)
    return json_response(200, vm_json(world, group, inst, instance_view=_wants_instance_view(request)))


def _put_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    """VirtualMachineScaleSetVMs_Update: only `properties.protectionPolicy.protectFromScaleIn` takes effect (the
    body of Microsoft's instance-protection example); protection from scale-set actions is not modelled."""
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    _instance_or_404(world, group, params)
    try:
        body = request.json() or {}
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    policy = (body.get("properties") or {}).get("protectionPolicy") if isinstance(body, dict) else None
    protect = policy.get("protectFromScaleIn") if isinstance(policy, dict) else None
    if not isinstance(protect, bool):
        raise ArmError(400, "InvalidParameter", "The sandbox takes only properties.protectionPolicy.protectFromScaleIn "
                       "(a boolean) in a VM update.", "properties.protectionPolicy.protectFromScaleIn")
    if policy.get("protectFromScaleSetActions"):
        raise ArmError(400, "InvalidParameter", "The sandbox does not model protection from scale-set actions.",
                       "properties.protectionPolicy.protectFromScaleSetActions")
    inst = world.set_scale_in_protection(group, params["id"], protect)
    return json_response(200, vm_json(world, group, inst))


def _list_nics(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    items = [nic for inst in world.instances(group) for nic in nic_json(world, group, inst)]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _list_vm_nics(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    inst = _instance_or_404(world, group, params)
    return json_response(200, _page(nic_json(world, group, inst), request, world.scenario.arm_page_size, api_version))


_LOCATION_FILTER = re.compile(r"^\s*location\s+eq\s+'(?P<loc>[^']+)'\s*$", re.IGNORECASE)


def _list_skus(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    if params["sub"].lower() != world.subscription_id.lower():
        raise ArmError(404, "SubscriptionNotFound", f"The subscription '{params['sub']}' could not be found.")
    locations = sorted({world.scenario.location.lower()} | {g.location.lower() for g in world.scenario.node_groups})
    wanted = request.query.get("$filter")
    if wanted is not None:
        match = _LOCATION_FILTER.match(wanted)
        if match is None:
            message = f"The filter '{wanted}' is not supported: only location eq '<location>' is."
            raise ArmError(400, "InvalidParameter", message, "$filter")
        locations = [loc for loc in locations if loc == match["loc"].lower()]
    items: list[dict[str, Any]] = []
    for location in locations:
        items += [sku_json(world, name, capacity, location) for name, capacity in vm_size_catalogue(world).values()]
        items += [
            {**other, "locations": [location], "locationInfo": [{"location": location, "zones": [], "zoneDetails": []}],
             "restrictions": []}
            for other in _OTHER_SKUS
        ]
    # One page, as ARM answers this list (its nextLink is null).
    return json_response(200, {"value": items})


def _operation(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    op = world.operation(params["op"])
    if op is None or params["sub"].lower() != world.subscription_id.lower():
        raise ArmError(404, "NotFound", f"The operation '{params['op']}' was not found.")
    if request.query.get("monitor") == "true":
        if op.status == "InProgress":
            return json_response(202, None, {"Location": _self_url(request), "Retry-After": str(LRO_RETRY_AFTER)})
        if op.status == "Failed":
            return json_response(200, {"error": {"code": op.error_code, "message": op.error_message}})
        return json_response(200, None)
    headers = {"Retry-After": str(LRO_RETRY_AFTER)} if op.status == "InProgress" else {}
    return json_response(200, _operation_json(world, op), headers)


def _self_url(request: Request) -> str:
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in request.query.items())
    return f"https://{request.header('host', '127.0.0.1')}{request.path}?{query}"


# ---------------------------------------------------------------------------- Azure Monitor metrics

_METRIC = "Percentage CPU"
_ISO_DURATION = re.compile(r"^PT(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?$", re.IGNORECASE)
_DEFAULT_TOP = 10  # series per resource when a dimension is split, unless `top` says otherwise
_MAX_POINTS = 1440  # a day of minutes: the real API refuses far larger answers too


def _iso_duration(text: str) -> timedelta | None:
    match = _ISO_DURATION.match(text)
    if match is None or not any(match.groupdict().values()):
        return None
    return timedelta(hours=int(match["h"] or 0), minutes=int(match["m"] or 0), seconds=int(match["s"] or 0))


def _metrics_timespan(text: str | None, now: datetime) -> tuple[datetime, datetime]:
    """`start/end` or `start/duration` in ISO 8601; none means the API's default, the last hour."""
    if not text:
        return now - timedelta(hours=1), now
    start_text, _, end_text = text.partition("/")
    problem = ArmError(400, "BadRequest", f"Invalid time interval: {text!r} (use start/end in ISO 8601).")
    try:
        start = parse_time(start_text)
        duration = _iso_duration(end_text)
        end = start + duration if duration is not None else parse_time(end_text)
    except ValueError:
        raise problem from None
    if end <= start:
        raise problem
    return start, end


def _metrics(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    """`Percentage CPU` of a scale set, whole or split by `VMName` (`$filter=VMName eq '*'` or `eq '<name>'`).

    Values come from `World.node_cpu`: the sandbox keeps no history, so each interval since an
    instance's node came up carries the current usage; intervals before have no `average`, as
    Azure leaves them. Instances without a Ready node report nothing.
    """
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    names = [n.strip() for n in request.query.get("metricnames", "").split(",") if n.strip()]
    if [n.lower() for n in names] != [_METRIC.lower()]:
        message = (
            f"Failed to find metric configuration for provider: Microsoft.Compute, resource Type: "
            f"virtualMachineScaleSets, metric: {','.join(names) or '(none)'}. The sandbox serves '{_METRIC}' only."
        )
        raise ArmError(400, "BadRequest", message)
    aggregations = {a.strip().lower() for a in request.query.get("aggregation", "average").split(",")}
    if "average" not in aggregations:
        raise ArmError(400, "BadRequest", "The sandbox serves the Average aggregation only.")
    start, end = _metrics_timespan(request.query.get("timespan"), world.now)
    interval_text = request.query.get("interval", "PT1M")
    interval = _iso_duration(interval_text)
    if interval is None or interval < timedelta(minutes=1):
        raise ArmError(400, "BadRequest", f"Invalid interval {interval_text!r} (use e.g. PT1M or PT5M).")
    if (end - start) / interval > _MAX_POINTS:
        raise ArmError(400, "BadRequest", "The requested time range holds too many data points; use a larger interval.")
    split, only = _vm_name_filter(request.query.get("$filter"))
    try:
        top = int(request.query.get("top", _DEFAULT_TOP))
    except ValueError:
        raise ArmError(400, "BadRequest", "top must be a whole number.") from None

    measured = world.node_cpu()
    instances = [
        (inst.vm_name or f"{group.name}_{inst.instance_id}", measured[inst.node_name])
        for inst in world.instances(group)
        if inst.node_name in measured
    ]
    stamps: list[datetime] = []
    at = start
    while at < end:
        stamps.append(at)
        at += interval

    def points(cpus: list[Any]) -> list[dict[str, Any]]:
        data = []
        for stamp in stamps:
            live = [c for c in cpus if c.since <= stamp]
            point: dict[str, Any] = {"timeStamp": rfc3339(stamp)}
            if live:
                point["average"] = round(sum(c.fraction for c in live) / len(live) * 100, 4)
            data.append(point)
        return data

    if split:
        chosen = [(name, cpu) for name, cpu in instances if only is None or name.lower() == only.lower()][: max(top, 0)]
        timeseries = [
            {"metadatavalues": [{"name": {"value": "vmname", "localizedValue": "vmname"}, "value": name}],
             "data": points([cpu])}
            for name, cpu in chosen
        ]
    else:
        timeseries = [{"metadatavalues": [], "data": points([cpu for _, cpu in instances])}]
    resource_id = _vmss_id(world, group)
    body = {
        "cost": len(stamps) * max(1, len(timeseries)),
        "timespan": f"{rfc3339(start)}/{rfc3339(end)}",
        "interval": interval_text.upper(),
        "namespace": "Microsoft.Compute/virtualMachineScaleSets",
        "resourceregion": group.spec.location,
        "value": [
            {
                "id": f"{resource_id}/providers/Microsoft.Insights/metrics/{_METRIC}",
                "type": "Microsoft.Insights/metrics",
                "name": {"value": _METRIC, "localizedValue": _METRIC},
                "displayDescription": (
                    "The percentage of allocated compute units that are currently in use by the Virtual Machine(s)"
                ),
                "unit": "Percent",
                "timeseries": timeseries,
                "errorCode": "Success",
            }
        ],
    }
    return json_response(200, body)


_VM_NAME_FILTER = re.compile(r"^\s*VMName\s+eq\s+'(?P<value>[^']*)'\s*$", re.IGNORECASE)


def _vm_name_filter(text: str | None) -> tuple[bool, str | None]:
    """(split by VMName?, the one VMName asked for or None for all)."""
    if not text:
        return False, None
    match = _VM_NAME_FILTER.match(text)
    if match is None:
        raise ArmError(400, "BadRequest", f"The sandbox understands only $filter=VMName eq '<name or *>', got {text!r}.")
    value = match["value"]
    return True, None if value == "*" else value


# ---------------------------------------------------------------------------- AKS


def _list_cluster_user_credential(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    cluster = world.managed_cluster
    if params["sub"].lower() != world.subscription_id.lower():
        raise ArmError(404, "SubscriptionNotFound", f"The subscription '{params['sub']}' could not be found.")
    if cluster is None or not cluster.matches(params["rg"], params["cluster"]):
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.ContainerService/managedClusters/{params['cluster']}' under resource group "
            f"'{params['rg']}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )
    return json_response(200, cluster.credential_results())


_HANDLERS: dict[str, Callable[[World, Request, dict[str, str], str], Response]] = {
    "operation": _operation,
    "skus": _list_skus,
    "list_all": _list_all,
    "list": _list,
    "get": _get,
    "update": _update,
    "put": _put,
    "delete_instances": _delete_instances,
    "deallocate_instances": _deallocate_instances,
    "start_instances": _start_instances,
    "list_vms": _list_vms,
    "get_vm": _get_vm,
    "put_vm": _put_vm,
    "list_nics": _list_nics,
    "list_vm_nics": _list_vm_nics,
    "metrics": _metrics,
    "list_cluster_user_credential": _list_cluster_user_credential,
    **flexible.HANDLERS,
    **agent_pools_api.HANDLERS,
    **spot_api.HANDLERS,
    **standby_pool_api.HANDLERS,
}
