"""Flexible orchestration scale sets on the ARM double: members are plain VMs, their NICs standalone resources.

A node group with `"orchestration": "Flexible"` is a VM Scale Set in Flexible mode. The world keeps its
members as it keeps Uniform instances (keyed by an int, booting, registering, deleted, deallocated and
started alike: sandbox.world.scale_sets); ARM shows each as a `Microsoft.Compute/virtualMachines` resource
named `{vmss}_{8 hex}` (`InstanceSim.vm_name`, which is also its "instance id" in `instanceIds`), with
computer name `{computerNamePrefix}{6 hex}`. Facts: shared/facts/cluster-shapes.md, "VMSS Flexible
orchestration".

Routes served here, registered in sandbox.api.arm_api (azure-mgmt-compute 39.0.0 sends api-version 2026-04-01
for `virtual_machines.*`, azure-mgmt-network 33.1.0 sends 2026-03-01 for `network_interfaces.list/get`;
like the rest of the double, any api-version is taken):
- `GET .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines`: every Flexible member of the
  resource group (Uniform instances are not standalone VMs, so never listed); with
  `$filter='virtualMachineScaleSet/id' eq '<vmss id>'` the members of that scale set, and only then
  `$expand=instanceView` (VirtualMachines_List in the spec). Paged like the other lists; `nextLink` keeps
  `$filter` and `$expand`.
- `GET .../virtualMachines/{vm}` (`$expand=instanceView` adds `properties.instanceView`).
- `DELETE .../virtualMachines/{vm}`: 202 with `Azure-AsyncOperation` and `Location`, as the other
  long-running operations; the member goes as by a batch delete, and capacity drops (see
  `ScaleSetsPart.delete_instances`: inferred, unverified). A VM that does not exist: 204, ARM's answer to
  a DELETE of nothing (the spec lists 200/202/204).
- `POST .../virtualMachines/{vm}/deallocate`, `/start`: 202, as the scale set's deallocate and start.
- `GET .../resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces` (paged) and `.../{nic}`: each
  member's NICs, one per NIC configuration of the model: `{vm name}-nic` for the one NIC of a set that
  declares none, `{vm name}-{NIC name}` for each NIC of a set that declares `nics` (Azure's naming of
  implicitly created NICs is unverified: read the VM's `networkProfile.networkInterfaces[].id`), each with
  `properties.virtualMachine.id`, `primary`, and one primary ipConfiguration holding its private IP; the
  Node's InternalIP is one of them (the primary's unless the scenario's `node_ip` names another). They go
  with the VM.

Scale-set routes of sandbox.api.arm_api that answer otherwise for a Flexible set (`override`, `vmss_json`):
- the scale set itself: `orchestrationMode: Flexible`, `singlePlacementGroup: false`,
  `platformFaultDomainCount: 1`, a `virtualMachineProfile` with a `networkProfile` (and its
  `networkApiVersion`), no `upgradePolicy`, `overprovision` or `scaleInPolicy`.
- `GET .../virtualMachineScaleSets/{vmss}/virtualMachines`: bare `{name, id, instanceId, location}` entries
  (the docs: on Flexible "the list Virtual Machine Scale Sets VM command provides a list of scale sets VM
  IDs"; `id` being the VM's own id is our reading); with `$expand=instanceView`, 400 `BadRequest`
  "Operation 'VirtualMachineScaleSets.virtualMachines.GET' is not allowed on Virtual Machine Scale Set
  '<name>'." (the error users report).
- `GET .../virtualMachineScaleSets/{vmss}/virtualMachines/{id}`: 400 `InvalidParameter` "Virtual Machine
  Scale Set VM instanceId must be a number." (what users report for a VM name; a number names no member: 404).
- `PUT .../virtualMachineScaleSets/{vmss}/virtualMachines/{id}` (instance protection): answered as that GET.
  Microsoft documents Flexible instance protection from API 2023-09-01 without the call; not modelled.
- the Uniform NIC reads: `.../virtualMachineScaleSets/{vmss}/networkInterfaces` lists nothing (a Flexible set
  has no scale-set NICs), `.../virtualMachines/{id}/networkInterfaces` is 404 (as users report). Unverified.
- POST `.../delete`, `.../deallocate`, `.../start` take VM names in `instanceIds` (the world looks them up).
  Batch delete on Flexible is documented; batch deallocate and start are not (the docs point to the
  single-VM calls), but the sandbox serves them as for Uniform: unverified.
- `hibernate=true` on a deallocate: the members hibernate when the set was created hibernation-enabled (the
  scenario's `hibernation_enabled`, `additionalCapabilities.hibernationEnabled`), else refused
  (`sandbox.world.scale_sets.hibernation_refused`).

Throttling (sandbox.world.throttling): the VM list filtered on a scale set spends that set's `list` bucket, an
unfiltered one the resource group's (as scale-set lists do); a VM GET spends that VM's own `vm_get` bucket,
DELETE and deallocate its `vm_delete`, start its `vm_update`. NIC reads are the Network RP's, not modelled.
Faults (`["arm", method, resource]`): a VM route matches the VM's scale set name (the VM name when no member
has it), the VM list the scale set its filter names (else `virtualMachines`), NIC routes `networkInterfaces`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from sandbox.api.arm_paging import arm_page
from sandbox.api.wire import Request, Response, json_response
from sandbox.model import spot
from sandbox.model.instance_mix import MIX_SKU, sku_profile
from sandbox.model.nic_spec import NicSpec, group_nics, subnet_name
from sandbox.model.scenario import NodeGroupSpec
from sandbox.model.units import rfc3339_micro
from sandbox.world import World
from sandbox.world.compute import InstanceSim, Operation, ScaleSetSim, failed_statuses, nic_addresses
from sandbox.world.errors import ArmError
from sandbox.world.scale_sets import hibernation_refused

Handler = Callable[[World, Request, dict[str, str], str], Response]

LRO_RETRY_AFTER = 10  # sim seconds between polls, as sandbox.api.arm_api
# virtualMachineProfile.networkProfile.networkApiVersion: a Flexible set with a VM profile must name one.
PROFILE_NETWORK_API_VERSION = "2020-11-01"

_RG = r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
_VMS = _RG + r"/providers/Microsoft\.Compute/virtualMachines"
_VM = _VMS + r"/(?P<vm>[^/]+)"
_NICS = _RG + r"/providers/Microsoft\.Network/networkInterfaces"

# (method, path pattern, route name): sandbox.api.arm_api compiles them with its own routes.
ROUTES: list[tuple[str, str, str]] = [
    ("GET", _VMS, "flex_list_vms"),
    ("GET", _VM, "flex_get_vm"),
    ("DELETE", _VM, "flex_delete_vm"),
    ("POST", _VM + r"/deallocate", "flex_deallocate_vm"),
    ("POST", _VM + r"/start", "flex_start_vm"),
    ("GET", _NICS, "flex_list_nics"),
    ("GET", _NICS + r"/(?P<nic>[^/]+)", "flex_get_nic"),
]
# route name -> (operation name in the report, write?, throttling bucket), as sandbox.api.arm_api.OPERATIONS
OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "flex_list_vms": ("LIST virtualMachines (flex)", False, "list"),
    "flex_get_vm": ("GET virtualMachines (flex)", False, "vm_get"),
    "flex_delete_vm": ("DELETE virtualMachines", True, "vm_delete"),
    "flex_deallocate_vm": ("POST virtualMachines/deallocate", True, "vm_delete"),  # delete/power-off/deallocate
    "flex_start_vm": ("POST virtualMachines/start", True, "vm_update"),
    # Network RP reads with the Network RP's own limits: not modelled.
    "flex_list_nics": ("LIST networkInterfaces (flex)", False, None),
    "flex_get_nic": ("GET networkInterfaces (flex)", False, None),
}

_NOT_FOUND_HINT = "For more details please go to https://aka.ms/ARMResourceNotFoundFix"
_VMSS_FILTER = re.compile(r"^\s*'virtualMachineScaleSet/id'\s+eq\s+'?(?P<id>[^']+)'\s*$", re.IGNORECASE)
_PROVISIONING_DISPLAY = {
    "Creating": "Creating", "Succeeded": "Provisioning succeeded", "Updating": "Updating", "Deleting": "Deleting",
    "Failed": "Provisioning failed",
}
_POWER_DISPLAY = {
    "starting": "VM starting", "running": "VM running",
    "deallocating": "VM deallocating", "deallocated": "VM deallocated",
}
_IMAGE = {"publisher": "Canonical", "offer": "0001-com-ubuntu-server-jammy", "sku": "22_04-lts-gen2", "version": "latest"}
_LINUX = {"disablePasswordAuthentication": True, "provisionVMAgent": True}


# ---------------------------------------------------------------------------- ids and lookups


def _rg_id(world: World, group: ScaleSetSim) -> str:
    return f"/subscriptions/{world.subscription_id}/resourceGroups/{group.resource_group}"


def vmss_id(world: World, group: ScaleSetSim) -> str:
    return f"{_rg_id(world, group)}/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}"


def vm_id(world: World, group: ScaleSetSim, inst: InstanceSim) -> str:
    return f"{_rg_id(world, group)}/providers/Microsoft.Compute/virtualMachines/{inst.vm_name}"


def nic_name(inst: InstanceSim, nic: NicSpec | None = None) -> str:
    """A member's NIC: `{vm name}-nic` for the one NIC of a set that declares none, `{vm name}-{NIC name}` for
    each NIC a set declares (`nics`)."""
    return f"{inst.vm_name}-nic" if nic is None else f"{inst.vm_name}-{nic.name}"


def _subnet_id(world: World, group: ScaleSetSim, nic: NicSpec) -> str:
    return (f"{_rg_id(world, group)}/providers/Microsoft.Network/virtualNetworks/{world.scenario.cluster_name}-vnet/"
            f"subnets/{subnet_name(nic.subnet)}")


def member_nics(group: ScaleSetSim, inst: InstanceSim) -> list[tuple[str, NicSpec, str]]:
    """A member's NICs, in the model's order: (NIC name, its configuration, its address)."""
    declared = bool(group.spec.nics)
    return [(nic_name(inst, nic if declared else None), nic, ip) for nic, ip in nic_addresses(group.spec, inst.ip_index)]


def _configurations(world: World, group: ScaleSetSim) -> list[dict[str, Any]]:
    """The model's `networkInterfaceConfigurations`: `{scale set}-nic` for the default NIC, else one per NIC."""
    declared = bool(group.spec.nics)
    return [
        {
            "name": nic.name if declared else f"{group.name}-nic",
            "properties": {
                "primary": nic.primary,
                "enableAcceleratedNetworking": True,
                "deleteOption": "Delete",
                "ipConfigurations": [
                    {
                        "name": "ipconfig1",
                        "properties": {
                            "primary": True,
                            "subnet": {"id": _subnet_id(world, group, nic)},
                            "privateIPAddressVersion": "IPv4",
                        },
                    }
                ],
            },
        }
        for nic in group_nics(group.spec.nics, group.name)
    ]


def _members(world: World, subscription_id: str, resource_group: str) -> list[tuple[ScaleSetSim, InstanceSim]]:
    """Every Flexible member (alive, deleting ones included) of the resource group: by scale set, then creation.
    404 for an unknown subscription or resource group."""
    return [
        (group, inst)
        for group in world.scale_sets(subscription_id, resource_group)
        if group.flexible
        for inst in world.instances(group)
    ]


def _find_vm(world: World, params: dict[str, str]) -> tuple[ScaleSetSim, InstanceSim] | None:
    wanted = params["vm"].lower()
    return next(((g, i) for g, i in _members(world, params["sub"], params["rg"]) if i.vm_name.lower() == wanted), None)


def _vm(world: World, params: dict[str, str]) -> tuple[ScaleSetSim, InstanceSim]:
    found = _find_vm(world, params)
    if found is None:
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachines/{params['vm']}' under resource group '{params['rg']}' "
            f"was not found. {_NOT_FOUND_HINT}",
        )
    return found


def _filtered_set(world: World, request: Request, params: dict[str, str]) -> tuple[bool, ScaleSetSim | None]:
    """(filtered?, the scale set the VM list's `$filter` names, None when it names none of this resource group)."""
    text = request.query.get("$filter")
    groups = world.scale_sets(params["sub"], params["rg"])
    if text is None:
        return False, None
    match = _VMSS_FILTER.match(text)
    if match is None:  # the sandbox's wording: ARM's own for an unsupported filter is unverified
        message = f"The $filter '{text}' is not supported: only 'virtualMachineScaleSet/id' eq '<scale set id>' is."
        raise ArmError(400, "InvalidParameter", message, "$filter")
    wanted = match["id"].strip().lower()
    return True, next((g for g in groups if vmss_id(world, g).lower() == wanted), None)


def _wants_instance_view(request: Request) -> bool:
    return any(part.strip().lower() == "instanceview" for part in request.query.get("$expand", "").split(","))


# ---------------------------------------------------------------------------- hooks sandbox.api.arm_api calls


def fault_resource(world: World, name: str, params: dict[str, str], request: Request) -> str | None:
    """The `resource` an injected ARM fault must name to hit this Flexible route; None for other routes."""
    if name not in OPERATIONS:
        return None
    try:
        if "vm" in params:
            found = _find_vm(world, params)
            return found[0].name if found is not None else params["vm"]
        if name == "flex_list_vms":
            _, group = _filtered_set(world, request, params)
            return group.name if group is not None else "virtualMachines"
    except ArmError:  # the handler will answer it
        return "virtualMachines"
    return "networkInterfaces"


def throttle_key(world: World, request: Request, name: str, params: dict[str, str]) -> str | None:
    """The throttling bucket key of a Flexible route (see the module docstring); None for other routes."""
    if name == "flex_list_vms":
        _, group = _filtered_set(world, request, params)
        return group.key if group is not None else f"rg:{params['rg'].lower()}"
    if name in OPERATIONS and "vm" in params:
        world.scale_sets(params["sub"], params["rg"])  # 404 for an unknown subscription or resource group first
        return f"vm:{params['rg'].lower()}/{params['vm'].lower()}"
    return None


def override(world: World, name: str, params: dict[str, str]) -> Handler | None:
    """A Flexible scale set's own answer to a scale-set route whose Uniform answer does not apply, else None."""
    answer = _SCALE_SET_ANSWERS.get(name)
    if answer is None or "vmss" not in params:
        return None
    return answer if world.scale_set(params["sub"], params["rg"], params["vmss"]).flexible else None


# ---------------------------------------------------------------------------- representations


def vmss_json(world: World, group: ScaleSetSim) -> dict[str, Any]:
    """A Flexible scale set as ARM returns it."""
    spec = group.spec
    body: dict[str, Any] = {
        "name": group.name,
        "id": vmss_id(world, group),
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": spec.location,
        "tags": dict(group.tags),
        "etag": f'"{group.generation}"',
        "sku": _sku(spec, group.capacity),
        "properties": {
            "singlePlacementGroup": False,
            "orchestrationMode": "Flexible",
            **({"skuProfile": sku_profile(spec.instance_mix)} if spec.instance_mix is not None else {}),
            "virtualMachineProfile": {
                "osProfile": {
                    "computerNamePrefix": spec.computer_name_prefix,
                    "adminUsername": "azureuser",
                    "linuxConfiguration": dict(_LINUX),
                },
                "storageProfile": {
                    "imageReference": dict(_IMAGE),
                    "osDisk": {
                        "osType": "Linux", "createOption": "FromImage", "caching": "ReadWrite",
                        "managedDisk": {"storageAccountType": "Premium_LRS"}, "deleteOption": "Delete",
                        "diskSizeGB": 128,
                    },
                },
                "networkProfile": {
                    "networkApiVersion": PROFILE_NETWORK_API_VERSION,
                    "networkInterfaceConfigurations": _configurations(world, group),
                },
                **spot.priority_profile(spec.priority, spec.eviction_policy, spec.max_price),
            },
            "provisioningState": world.provisioning_state(group),
            "uniqueId": group.unique_id,
            "platformFaultDomainCount": 1,
            "timeCreated": rfc3339_micro(world.start),
            # VirtualMachineScaleSetProperties.additionalCapabilities: shown when the set was created with it.
            **({"additionalCapabilities": {"hibernationEnabled": True}} if spec.hibernation_enabled else {}),
        },
    }
    if spec.zones:
        body["zones"] = list(spec.zones)
    return body


def _sku(spec: NodeGroupSpec, capacity: int) -> dict[str, Any]:
    """The set's `sku`: an instance-mix set's is named "Mix" without a tier (its sizes are in `skuProfile`)."""
    if spec.instance_mix is not None:
        return {"name": MIX_SKU, "capacity": capacity}
    return {"name": spec.vm_size, "tier": "Standard", "capacity": capacity}


def _instance_view(inst: InstanceSim) -> dict[str, Any]:
    """VirtualMachineInstanceView: the computer name and the provisioning and power state statuses."""
    if inst.state == "Failed":
        return {"computerName": inst.computer_name, "statuses": failed_statuses(inst)}
    provisioning = {
        "code": f"ProvisioningState/{inst.state.lower()}", "level": "Info",
        "displayStatus": _PROVISIONING_DISPLAY[inst.state],
    }
    power = {"code": f"PowerState/{inst.power}", "level": "Info", "displayStatus": _POWER_DISPLAY[inst.power]}
    return {
        "computerName": inst.computer_name,
        "osName": "ubuntu",
        "osVersion": "22.04",
        "hyperVGeneration": "V2",
        "statuses": [provisioning, power],
    }


def vm_json(world: World, group: ScaleSetSim, inst: InstanceSim, *, instance_view: bool = False) -> dict[str, Any]:
    """A Flexible member as a plain VM (VirtualMachine in the spec's virtualMachine.json)."""
    body: dict[str, Any] = {
        "name": inst.vm_name,
        "id": vm_id(world, group, inst),
        "type": "Microsoft.Compute/virtualMachines",
        "location": group.spec.location,
        "properties": {
            "vmId": inst.vm_id,
            "hardwareProfile": {"vmSize": inst.vm_size or group.spec.vm_size},  # a mix member has its own
            "storageProfile": {
                "imageReference": dict(_IMAGE),
                "osDisk": {
                    "osType": "Linux", "name": f"{inst.vm_name}_OsDisk_1_{inst.vm_id.replace('-', '')}",
                    "createOption": "FromImage", "caching": "ReadWrite",
                    "managedDisk": {"storageAccountType": "Premium_LRS"}, "deleteOption": "Delete", "diskSizeGB": 128,
                },
                "dataDisks": [],
            },
            "osProfile": {
                "computerName": inst.computer_name,
                "adminUsername": "azureuser",
                "linuxConfiguration": dict(_LINUX),
                "secrets": [],
                "allowExtensionOperations": True,
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": f"{_rg_id(world, group)}/providers/Microsoft.Network/networkInterfaces/{name}",
                     "properties": {"primary": nic.primary, "deleteOption": "Delete"}}
                    for name, nic, _ in member_nics(group, inst)
                ]
            },
            "virtualMachineScaleSet": {"id": vmss_id(world, group)},
            # A member is a plain VM: it carries its scale set's priority, eviction policy and max price itself.
            **spot.priority_profile(group.spec.priority, group.spec.eviction_policy, group.spec.max_price),
            "provisioningState": inst.state,
            "timeCreated": rfc3339_micro(world.start + timedelta(seconds=inst.created_at)),
        },
    }
    if instance_view:
        body["properties"]["instanceView"] = _instance_view(inst)
    if inst.zone:
        body["zones"] = [inst.zone]
    return body


def _mac(ip_index: int, position: int = 0) -> str:
    """Unique per NIC: the index fits two bytes (a /16 holds every VM's address), the NIC's position the third."""
    return "-".join(f"{b:02X}" for b in (0x00, 0x22, 0x48, position & 0xFF, (ip_index >> 8) & 0xFF, ip_index & 0xFF))


def nic_json(world: World, group: ScaleSetSim, inst: InstanceSim, name: str, nic: NicSpec, ip: str,
             position: int = 0) -> dict[str, Any]:
    """One of a member's NICs (`member_nics`) as the Network RP returns a standalone NetworkInterface: `primary`
    and one primary ipConfiguration holding its address, which never changes."""
    nic_ref = f"{_rg_id(world, group)}/providers/Microsoft.Network/networkInterfaces/{name}"
    etag = f'W/"{inst.vm_id}"'
    return {
        "name": name,
        "id": nic_ref,
        "etag": etag,
        "type": "Microsoft.Network/networkInterfaces",
        "location": group.spec.location,
        "properties": {
            "provisioningState": "Succeeded",
            "resourceGuid": inst.vm_id,
            "ipConfigurations": [
                {
                    "name": "ipconfig1",
                    "id": f"{nic_ref}/ipConfigurations/ipconfig1",
                    "etag": etag,
                    "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
                    "properties": {
                        "provisioningState": "Succeeded",
                        "privateIPAddress": ip,
                        "privateIPAllocationMethod": "Dynamic",
                        "subnet": {"id": _subnet_id(world, group, nic)},
                        "primary": True,
                        "privateIPAddressVersion": "IPv4",
                    },
                }
            ],
            "dnsSettings": {"dnsServers": [], "appliedDnsServers": []},
            "macAddress": _mac(inst.ip_index, position),
            "enableAcceleratedNetworking": True,
            "vnetEncryptionSupported": False,
            "enableIPForwarding": False,
            "primary": nic.primary,
            "virtualMachine": {"id": vm_id(world, group, inst)},
            "nicType": "Standard",
        },
    }


def _page(world: World, items: list[dict[str, Any]], request: Request, api_version: str) -> dict[str, Any]:
    return arm_page(items, request, page_size=world.scenario.arm_page_size, api_version=api_version)


def _accepted(world: World, request: Request, group: ScaleSetSim, op: Operation, api_version: str) -> Response:
    """202 with the operation to poll, as sandbox.api.arm_api answers the scale set's long-running POSTs."""
    path = (
        f"/subscriptions/{world.subscription_id}/providers/Microsoft.Compute/locations/{group.spec.location}"
        f"/operations/{op.op_id}"
    )
    url = f"https://{request.header('host', '127.0.0.1')}{path}?p={op.op_id}&api-version={quote(api_version)}"
    headers = {"Azure-AsyncOperation": url, "Location": f"{url}&monitor=true", "Retry-After": str(LRO_RETRY_AFTER)}
    return json_response(202, None, headers)


# ---------------------------------------------------------------------------- handlers: VMs and NICs


def _list_vms(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    filtered, group = _filtered_set(world, request, params)
    expand = request.query.get("$expand")
    if expand is not None:
        if not _wants_instance_view(request):
            raise ArmError(400, "InvalidParameter", f"The value '{expand}' of parameter '$expand' is invalid.", "$expand")
        if not filtered:  # the spec: "this can only be specified if a valid $filter option is specified"
            message = "$expand=instanceView can only be specified with a valid $filter on 'virtualMachineScaleSet/id'."
            raise ArmError(400, "InvalidParameter", message, "$expand")
    if filtered:
        members = [(group, inst) for inst in world.instances(group)] if group is not None and group.flexible else []
    else:
        members = _members(world, params["sub"], params["rg"])
    items = [vm_json(world, g, inst, instance_view=expand is not None) for g, inst in members]
    return json_response(200, _page(world, items, request, api_version))


def _get_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group, inst = _vm(world, params)
    return json_response(200, vm_json(world, group, inst, instance_view=_wants_instance_view(request)))


def _delete_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    found = _find_vm(world, params)
    if found is None:
        return json_response(204, None)  # ARM: a DELETE of a resource that does not exist
    group, inst = found
    return _accepted(world, request, group, world.delete_instances(group, [inst.vm_name]), api_version)


def _deallocate_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group, inst = _vm(world, params)
    hibernate = request.query.get("hibernate", "").lower() == "true"
    refusal = hibernation_refused(group, inst.vm_name) if hibernate else None
    if refusal is not None:
        raise refusal
    operation = world.deallocate_instances(group, [inst.vm_name], hibernate=hibernate)
    return _accepted(world, request, group, operation, api_version)


def _start_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group, inst = _vm(world, params)
    return _accepted(world, request, group, world.start_instances(group, [inst.vm_name]), api_version)


def _list_nics(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    items = [nic_json(world, group, inst, *nic, position=position) for group, inst in _members(world, params["sub"], params["rg"])
             for position, nic in enumerate(member_nics(group, inst))]
    return json_response(200, _page(world, items, request, api_version))


def _get_nic(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    wanted = params["nic"].lower()
    found = next(
        ((g, i, nic, position) for g, i in _members(world, params["sub"], params["rg"])
         for position, nic in enumerate(member_nics(g, i)) if nic[0].lower() == wanted),
        None,
    )
    if found is None:
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.Network/networkInterfaces/{params['nic']}' under resource group "
            f"'{params['rg']}' was not found. {_NOT_FOUND_HINT}",
        )
    group, inst, nic, position = found
    return json_response(200, nic_json(world, group, inst, *nic, position=position))


HANDLERS: dict[str, Handler] = {
    "flex_list_vms": _list_vms,
    "flex_get_vm": _get_vm,
    "flex_delete_vm": _delete_vm,
    "flex_deallocate_vm": _deallocate_vm,
    "flex_start_vm": _start_vm,
    "flex_list_nics": _list_nics,
    "flex_get_nic": _get_nic,
}


# ---------------------------------------------------------------------------- handlers: Uniform-only scale-set calls


def _scale_set(world: World, params: dict[str, str]) -> ScaleSetSim:
    return world.scale_set(params["sub"], params["rg"], params["vmss"])


def _vmss_vm_list(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = _scale_set(world, params)
    if _wants_instance_view(request):
        message = f"Operation 'VirtualMachineScaleSets.virtualMachines.GET' is not allowed on Virtual Machine Scale Set '{group.name}'."
        raise ArmError(400, "BadRequest", message)
    items = [
        {"name": inst.vm_name, "id": vm_id(world, group, inst), "instanceId": inst.vm_name, "location": group.spec.location}
        for inst in world.instances(group)
    ]
    return json_response(200, _page(world, items, request, api_version))


def _vmss_vm_missing(group: ScaleSetSim, params: dict[str, str]) -> ArmError:
    if not params["id"].isdigit():
        return ArmError(400, "InvalidParameter", "Virtual Machine Scale Set VM instanceId must be a number.", "instanceId")
    return ArmError(
        404, "ResourceNotFound",
        f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{params['id']}' "
        f"under resource group '{params['rg']}' was not found.",
    )


def _vmss_vm_get(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    raise _vmss_vm_missing(_scale_set(world, params), params)


def _vmss_nic_list(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    _scale_set(world, params)
    return json_response(200, {"value": []})


def _vmss_vm_nic_list(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = _scale_set(world, params)
    raise ArmError(
        404, "ResourceNotFound",
        f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{params['id']}' "
        f"under resource group '{params['rg']}' was not found.",
    )


# sandbox.api.arm_api route name -> the Flexible answer
_SCALE_SET_ANSWERS: dict[str, Handler] = {
    "list_vms": _vmss_vm_list,
    "get_vm": _vmss_vm_get,
    "put_vm": _vmss_vm_get,  # an update names the member as a GET does; Flexible protection is not modelled
    "list_nics": _vmss_nic_list,
    "list_vm_nics": _vmss_vm_nic_list,
}
