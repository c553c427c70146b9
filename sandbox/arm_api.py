"""The Azure Resource Manager double for Microsoft.Compute scale sets: `handle(world, request) -> Response`.

Shaped after what azure-mgmt-compute 39 sends and accepts:
- `begin_update` (PATCH) accepts only 200 on the initial response, so PATCH
  answers 200 with the scale set and an `Azure-AsyncOperation` header; ARMPolling
  polls that operation, then GETs the scale set for the final result.
- `begin_delete_instances` (POST .../delete) accepts 200/202; we answer 202 with
  `Azure-AsyncOperation` and `Location`; after success the poller GETs Location.
- Lists page with `nextLink` (used verbatim by the SDK, so it carries api-version).

`Retry-After` values here are in SIM seconds; the server rescales them to wall
seconds by the clock's speed (in-process callers see sim seconds).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from sandbox.compute import InstanceSim, Operation, ScaleSetSim
from sandbox.errors import ArmError
from sandbox.faults import Fault
from sandbox.units import rfc3339_micro
from sandbox.wire import Request, Response, json_response
from sandbox.world import World

LRO_RETRY_AFTER = 10  # sim seconds between polls of an async operation
_CHALLENGE = {"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"'}
_UNREADABLE = "The request content was invalid and could not be deserialized."
_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_COMPUTE = _SUB + r"/providers/Microsoft\.Compute"
_VMSS_IN_RG = _SUB + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/virtualMachineScaleSets"
_VMSS = _VMSS_IN_RG + r"/(?P<vmss>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern + "$", re.IGNORECASE), name)  # ARM paths are case-insensitive
    for method, pattern, name in [
        ("GET", _COMPUTE + r"/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)", "operation"),
        ("GET", _COMPUTE + r"/virtualMachineScaleSets", "list_all"),
        ("GET", _VMSS_IN_RG, "list"),
        ("GET", _VMSS, "get"),
        ("PATCH", _VMSS, "update"),
        ("PUT", _VMSS, "put"),
        ("POST", _VMSS + r"/delete", "delete_instances"),
        ("GET", _VMSS + r"/virtualMachines", "list_vms"),
        ("GET", _VMSS + r"/virtualMachines/(?P<id>[^/]+)", "get_vm"),
    ]
]
# operation name in the report, write?, throttling bucket
_OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "operation": ("GET operations", False, None),
    "list_all": ("LIST virtualMachineScaleSets", False, "list"),
    "list": ("LIST virtualMachineScaleSets", False, "list"),
    "get": ("GET virtualMachineScaleSets", False, "get"),
    "update": ("PATCH virtualMachineScaleSets", True, "update"),
    "put": ("PUT virtualMachineScaleSets", True, "update"),
    "delete_instances": ("POST delete", True, "delete"),
    "list_vms": ("LIST virtualMachines", False, "list"),
    "get_vm": ("GET virtualMachines", False, "get"),
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
        if token != world.token:
            return error_response(ArmError(401, "InvalidAuthenticationToken", "The access token is invalid."), _CHALLENGE)
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


def _dispatch(world: World, request: Request, name: str, params: dict[str, str], api_version: str) -> Response:
    label, write, bucket = _OPERATIONS[name]
    world.count_call("arm", label, write=write)
    fault_resource = params.get("vmss") or ("operations" if name == "operation" else "virtualMachineScaleSets")
    fault = world.take_fault("arm", request.method, fault_resource)
    if fault is not None:
        return _fault_response(fault)
    try:
        extra: dict[str, str] = {}
        if bucket is not None:
            key = (
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
        response = _HANDLERS[name](world, request, params, api_version)
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
    spec = group.spec
    body: dict[str, Any] = {
        "name": group.name,
        "id": _vmss_id(world, group),
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": spec.location,
        "tags": dict(group.tags),
        "etag": f'"{group.generation}"',
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


def vm_json(world: World, group: ScaleSetSim, inst: InstanceSim) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"{group.name}_{inst.instance_id}",
        "id": f"{_vmss_id(world, group)}/virtualMachines/{inst.instance_id}",
        "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "location": group.spec.location,
        "instanceId": str(inst.instance_id),
        "sku": {"name": group.spec.vm_size, "tier": "Standard"},
        "properties": {
            "latestModelApplied": True,
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
        },
    }
    if inst.zone:
        body["zones"] = [inst.zone]
    return body


def _at(world: World, t: float) -> datetime:
    return world.start + timedelta(seconds=t)


def _operation_json(world: World, op: Operation) -> dict[str, Any]:
    body: dict[str, Any] = {"name": op.op_id, "status": op.status, "startTime": rfc3339_micro(_at(world, op.started_at))}
    if op.ended_at is not None:
        body["endTime"] = rfc3339_micro(_at(world, op.ended_at))
    if op.status == "Failed":
        body["error"] = {"code": op.error_code, "message": op.error_message}
    return body


def _operation_urls(world: World, request: Request, group: ScaleSetSim, op: Operation, api_version: str) -> tuple[str, str]:
    base = f"https://{request.header('host', '127.0.0.1')}"
    path = (
        f"/subscriptions/{world.subscription_id}/providers/Microsoft.Compute/locations/{group.spec.location}"
        f"/operations/{op.op_id}"
    )
    query = f"p={op.op_id}&api-version={quote(api_version)}"
    return f"{base}{path}?{query}", f"{base}{path}?{query}&monitor=true"


def _page(items: list[dict[str, Any]], request: Request, page_size: int, api_version: str) -> dict[str, Any]:
    try:
        skip = int(request.query.get("$skiptoken", "0"))
    except ValueError:
        raise ArmError(400, "InvalidSkipToken", "The $skiptoken is invalid.") from None
    body: dict[str, Any] = {"value": items[skip : skip + page_size]}
    if skip + page_size < len(items):
        base = f"https://{request.header('host', '127.0.0.1')}"
        body["nextLink"] = f"{base}{request.path}?api-version={quote(api_version)}&$skiptoken={skip + page_size}"
    return body


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


def _capacity_request(group: ScaleSetSim, request: Request) -> tuple[int, dict[str, str] | None]:
    try:
        body = request.json() or {}
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    if not isinstance(body, dict):
        raise ArmError(400, "InvalidRequestContent", "The request content must be a JSON object.")
    sku = body.get("sku") or {}
    if sku.get("name") and str(sku["name"]).lower() != group.spec.vm_size.lower():
        raise ArmError(409, "OperationNotAllowed", "The sandbox cannot change the VM size of a scale set.", "sku.name")
    capacity = sku.get("capacity", group.capacity)
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        message = f"The value '{capacity}' of parameter 'sku.capacity' is invalid."
        raise ArmError(400, "InvalidParameter", message, "sku.capacity")
    tags = body.get("tags")
    if tags is not None and (not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values())):
        raise ArmError(400, "InvalidParameter", "Tags must be a map of strings.", "tags")
    return capacity, tags


def _update(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    capacity, tags = _capacity_request(group, request)
    op = world.set_capacity(group, capacity, tags)
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


def _list_vms(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    items = [vm_json(world, group, inst) for inst in world.instances(group)]
    return json_response(200, _page(items, request, world.scenario.arm_page_size, api_version))


def _get_vm(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    inst = next((i for i in world.instances(group) if str(i.instance_id) == params["id"]), None)
    if inst is None:
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{params['id']}' "
            f"under resource group '{params['rg']}' was not found.",
        )
    return json_response(200, vm_json(world, group, inst))


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


_HANDLERS: dict[str, Callable[[World, Request, dict[str, str], str], Response]] = {
    "operation": _operation,
    "list_all": _list_all,
    "list": _list,
    "get": _get,
    "update": _update,
    "put": _put,
    "delete_instances": _delete_instances,
    "list_vms": _list_vms,
    "get_vm": _get_vm,
}
