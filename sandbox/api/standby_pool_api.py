"""The Standby Pool resource provider on the ARM double: `Microsoft.StandbyPool/standbyVirtualMachinePools`.

Shapes from azure-rest-api-specs `specification/standbypool/StandbyPool.Management` (standbyVMPool.tsp,
standbyVirtualMachinePoolRuntimeView.tsp and their examples); azure-mgmt-standbypool 2.1.0 sends api-version
2025-10-01; like the rest of the double, any api-version is taken. The pools and their VMs live in
sandbox.world.standby_pools. Routes (registered in sandbox.api.arm_api):

- `GET /subscriptions/{sub}/providers/Microsoft.StandbyPool/standbyVirtualMachinePools` (ListBySubscription) and
  `GET .../resourceGroups/{rg}/providers/Microsoft.StandbyPool/standbyVirtualMachinePools` (ListByResourceGroup):
  paged `{value, nextLink}`.
- `GET .../standbyVirtualMachinePools/{name}`: `{id, name, type, location, tags, systemData, properties:
  {elasticityProfile: {maxReadyCapacity, minReadyCapacity}, virtualMachineState, attachedVirtualMachineScaleSetId,
  provisioningState}}`.
- `PUT` (CreateOrUpdate, long-running, final state via Azure-AsyncOperation): 201 with `Azure-AsyncOperation` and
  `Retry-After` when created, 200 when replaced; `virtualMachineState` and `elasticityProfile.maxReadyCapacity`
  required. The operation is done at once (the pool fills on its own clock afterwards, so the resource is
  `Succeeded` while its VMs are still being created, as the spec's 201 example shows).
- `PATCH` (Update, synchronous): 200 with the resource; only the fields sent change.
- `DELETE` (long-running, without 200): 202 with `Location` and `Retry-After`, 204 when there is no such pool.
- `GET .../standbyVirtualMachinePools/{name}/runtimeViews/latest` (and the list of views, holding `latest` only):
  `properties.instanceCountSummary` per zone (`zone` left out for a regional set), `instanceCountsByState` for
  Creating, Running, Deallocating, Deallocated, Hibernating, Hibernated, Starting, Deleting (the 2025-10-01 enum),
  `status` HealthState/healthy.
- `GET .../providers/Microsoft.StandbyPool/locations/{loc}/operationStatuses/{op}`: the PUT's operation,
  `Succeeded`; `.../operationResults/{op}`: the DELETE's, 200 when done.

Checks (400 `InvalidParameter` unless said): capacities 0..2,000 and min <= max; the state one of Running,
Deallocated, Hibernated and no move between Deallocated and Hibernated (Learn standby-pools-update-delete.md);
the attached set a Flexible scale set of the subscription (Learn: Uniform sets, other subscriptions refused);
a second pool on one set 409 `Conflict`. Throttling: the Standby Pool RP's limits are unpublished: not modelled.
Faults (`["arm", method, resource]`) name the pool, or `standbyVirtualMachinePools` for a list.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from sandbox.api.arm_paging import arm_page
from sandbox.api.wire import Request, Response, json_response
from sandbox.model.standby_pool_spec import MAX_READY_LIMIT, VM_STATES
from sandbox.model.units import rfc3339_micro
from sandbox.world import World
from sandbox.world.errors import ArmError
from sandbox.world.standby_pools import StandbyPoolSim

Handler = Callable[[World, Request, dict[str, str], str], Response]

LRO_RETRY_AFTER = 10  # sim seconds between polls, as sandbox.api.arm_api
RESOURCE_TYPE = "Microsoft.StandbyPool/standbyVirtualMachinePools"
_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_PROVIDER = r"/providers/Microsoft\.StandbyPool"
_POOLS_IN_RG = _SUB + r"/resourceGroups/(?P<rg>[^/]+)" + _PROVIDER + r"/standbyVirtualMachinePools"
_POOL = _POOLS_IN_RG + r"/(?P<pool>[^/]+)"
_OPS = _SUB + _PROVIDER + r"/locations/(?P<loc>[^/]+)"
_OP_PREFIX = "svmp-"
_RUNTIME_STATES = ("Creating", "Running", "Starting", "Deallocating", "Deallocated", "Hibernating", "Hibernated",
                   "Deleting")
_UNREADABLE = "The request content was invalid and could not be deserialized."

ROUTES: list[tuple[str, str, str]] = [
    ("GET", _SUB + _PROVIDER + r"/standbyVirtualMachinePools", "svmp_list_all"),
    ("GET", _POOLS_IN_RG, "svmp_list"),
    ("GET", _POOL, "svmp_get"),
    ("PUT", _POOL, "svmp_put"),
    ("PATCH", _POOL, "svmp_patch"),
    ("DELETE", _POOL, "svmp_delete"),
    ("GET", _POOL + r"/runtimeViews", "svmp_list_views"),
    ("GET", _POOL + r"/runtimeViews/(?P<view>[^/]+)", "svmp_get_view"),
    ("GET", _OPS + r"/operationStatuses/(?P<op>[^/]+)", "svmp_operation_status"),
    ("GET", _OPS + r"/operationResults/(?P<op>[^/]+)", "svmp_operation_result"),
]
OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "svmp_list_all": ("LIST standbyVirtualMachinePools", False, None),
    "svmp_list": ("LIST standbyVirtualMachinePools", False, None),
    "svmp_get": ("GET standbyVirtualMachinePools", False, None),
    "svmp_put": ("PUT standbyVirtualMachinePools", True, None),
    "svmp_patch": ("PATCH standbyVirtualMachinePools", True, None),
    "svmp_delete": ("DELETE standbyVirtualMachinePools", True, None),
    "svmp_list_views": ("LIST standbyVirtualMachinePools/runtimeViews", False, None),
    "svmp_get_view": ("GET standbyVirtualMachinePools/runtimeViews", False, None),
    "svmp_operation_status": ("GET StandbyPool operationStatuses", False, None),
    "svmp_operation_result": ("GET StandbyPool operationResults", False, None),
}


def fault_resource(name: str, params: dict[str, str]) -> str | None:
    """The resource a fault names for this module's routes: the pool, or the type for lists and operations."""
    if name not in OPERATIONS:
        return None
    return params.get("pool") or "standbyVirtualMachinePools"


# ---------------------------------------------------------------------------- JSON


def pool_id(world: World, pool: StandbyPoolSim) -> str:
    return (f"/subscriptions/{world.subscription_id}/resourceGroups/{pool.resource_group}"
            f"/providers/{RESOURCE_TYPE}/{pool.name}")


def pool_json(world: World, pool: StandbyPoolSim) -> dict[str, Any]:
    created = rfc3339_micro(world.start + timedelta(seconds=pool.created_at))
    changed = rfc3339_micro(world.start + timedelta(seconds=pool.writes[-1][0] if pool.writes else pool.created_at))
    return {
        "id": pool_id(world, pool),
        "name": pool.name,
        "type": RESOURCE_TYPE,
        "location": pool.location,
        "tags": dict(pool.tags),
        "systemData": {"createdBy": "sandbox", "createdByType": "Application", "createdAt": created,
                       "lastModifiedBy": "sandbox", "lastModifiedByType": "Application", "lastModifiedAt": changed},
        "properties": {
            "elasticityProfile": {"maxReadyCapacity": pool.max_ready, "minReadyCapacity": pool.min_ready},
            "virtualMachineState": pool.vm_state,
            "attachedVirtualMachineScaleSetId": pool.attached_id,
            "provisioningState": "Succeeded",
        },
    }


def runtime_view_json(world: World, pool: StandbyPoolSim) -> dict[str, Any]:
    summary = []
    for zone, counts in sorted(world.pool_vm_counts(pool).items()) or [("", {})]:
        entry: dict[str, Any] = {"instanceCountsByState": [{"state": s, "count": counts.get(s, 0)} for s in _RUNTIME_STATES]}
        if zone:
            entry = {"zone": int(zone), **entry}
        summary.append(entry)
    return {
        "id": f"{pool_id(world, pool)}/runtimeViews/latest",
        "name": "latest",
        "type": f"{RESOURCE_TYPE}/runtimeViews",
        "properties": {
            "instanceCountSummary": summary,
            "provisioningState": "Succeeded",
            "status": {"code": "HealthState/healthy", "message": "The pool is healthy."},
        },
    }


# ---------------------------------------------------------------------------- handlers


def _list_all(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    pools = world.standby_pools(params["sub"], None)
    items = [pool_json(world, p) for p in pools]
    return json_response(200, arm_page(items, request, page_size=world.scenario.arm_page_size, api_version=api_version))


def _list(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    pools = world.standby_pools(params["sub"], params["rg"])
    items = [pool_json(world, p) for p in pools]
    return json_response(200, arm_page(items, request, page_size=world.scenario.arm_page_size, api_version=api_version))


def _get(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    return json_response(200, pool_json(world, world.standby_pool(params["sub"], params["rg"], params["pool"])))


def _body(request: Request) -> dict[str, Any]:
    try:
        body = request.json() or {}
    except ValueError:
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE) from None
    if not isinstance(body, dict):
        raise ArmError(400, "InvalidRequestContent", _UNREADABLE)
    return body


def _capacity(profile: dict[str, Any], field: str, *, required: bool) -> int | None:
    value = profile.get(field)
    if value is None:
        if required:
            raise ArmError(400, "InvalidParameter", f"The '{field}' property is required.",
                           f"properties.elasticityProfile.{field}")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_READY_LIMIT:
        raise ArmError(400, "InvalidParameter", f"The value {value!r} of '{field}' must be a whole number from 0 to "
                                                f"{MAX_READY_LIMIT}.", f"properties.elasticityProfile.{field}")
    return value


def _state(value: Any, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if value not in VM_STATES:
        raise ArmError(400, "InvalidParameter", f"The value {value!r} of 'virtualMachineState' is not one of "
                                                f"{', '.join(VM_STATES)}.", "properties.virtualMachineState")
    return str(value)


def _tags(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ArmError(400, "InvalidParameter", "Tags must be an object of strings.", "tags")
    return dict(value)


def _put(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    body = _body(request)
    props = body.get("properties")
    if not isinstance(props, dict):
        raise ArmError(400, "InvalidParameter", "The 'properties' property is required.", "properties")
    location = body.get("location")
    if not isinstance(location, str) or not location:
        raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
    profile = props.get("elasticityProfile")
    if not isinstance(profile, dict):
        raise ArmError(400, "InvalidParameter", "The 'elasticityProfile' property is required.",
                       "properties.elasticityProfile")
    max_ready = _capacity(profile, "maxReadyCapacity", required=True)
    min_ready = _capacity(profile, "minReadyCapacity", required=False) or 0
    assert max_ready is not None
    if min_ready > max_ready:
        raise ArmError(400, "InvalidParameter", f"MinReadyCapacity ({min_ready}) cannot exceed MaxReadyCapacity "
                                                f"({max_ready}).", "properties.elasticityProfile.minReadyCapacity")
    state = _state(props.get("virtualMachineState"), required=True)
    assert state is not None
    attached = props.get("attachedVirtualMachineScaleSetId") or ""
    if not isinstance(attached, str):
        raise ArmError(400, "InvalidParameter", "attachedVirtualMachineScaleSetId must be a string.",
                       "properties.attachedVirtualMachineScaleSetId")
    pool, created = world.put_standby_pool(
        params["sub"], params["rg"], params["pool"], location=location, vm_state=state, max_ready=max_ready,
        min_ready=min_ready, attached_id=attached, tags=_tags(body.get("tags")) or {},
    )
    if not created:
        return json_response(200, pool_json(world, pool))
    status_url, _ = _operation_urls(request, params, pool.location, world)
    return json_response(201, pool_json(world, pool),
                         {"Azure-AsyncOperation": status_url, "Retry-After": str(LRO_RETRY_AFTER)})


def _patch(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    pool = world.standby_pool(params["sub"], params["rg"], params["pool"])
    body = _body(request)
    props = body.get("properties") or {}
    if not isinstance(props, dict):
        raise ArmError(400, "InvalidParameter", "'properties' must be an object.", "properties")
    profile = props.get("elasticityProfile") or {}
    if not isinstance(profile, dict):
        raise ArmError(400, "InvalidParameter", "'elasticityProfile' must be an object.", "properties.elasticityProfile")
    attached = props.get("attachedVirtualMachineScaleSetId")
    if attached is not None and not isinstance(attached, str):
        raise ArmError(400, "InvalidParameter", "attachedVirtualMachineScaleSetId must be a string.",
                       "properties.attachedVirtualMachineScaleSetId")
    world.patch_standby_pool(
        pool, vm_state=_state(props.get("virtualMachineState"), required=False),
        max_ready=_capacity(profile, "maxReadyCapacity", required=False),
        min_ready=_capacity(profile, "minReadyCapacity", required=False),
        attached_id=attached, tags=_tags(body.get("tags")),
    )
    return json_response(200, pool_json(world, pool))


def _delete(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    existing = world.standby_pools(params["sub"], params["rg"])
    location = next((p.location for p in existing if p.name.lower() == params["pool"].lower()), None)
    if not world.delete_standby_pool(params["sub"], params["rg"], params["pool"]):
        return Response(204, {}, b"")
    _, result_url = _operation_urls(request, params, location or "", world)
    return Response(202, {"Location": result_url, "Retry-After": str(LRO_RETRY_AFTER)}, b"")


def _list_views(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    pool = world.standby_pool(params["sub"], params["rg"], params["pool"])
    return json_response(200, {"value": [runtime_view_json(world, pool)]})


def _get_view(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    pool = world.standby_pool(params["sub"], params["rg"], params["pool"])
    if params["view"].lower() != "latest":
        raise ArmError(404, "ResourceNotFound", f"The runtime view '{params['view']}' was not found; only 'latest' "
                                                "is served.")
    return json_response(200, runtime_view_json(world, pool))


def _operation_urls(request: Request, params: dict[str, str], location: str, world: World) -> tuple[str, str]:
    """(Azure-AsyncOperation, Location) of a new operation; it is done at once (see the module docstring)."""
    op = f"{_OP_PREFIX}{world.new_standby_pool_operation_id()}"
    base = (f"https://{request.header('host', '127.0.0.1')}/subscriptions/{params['sub']}/providers/"
            f"Microsoft.StandbyPool/locations/{quote(location.replace(' ', '').lower() or 'unknown')}")
    query = f"api-version={quote(request.query.get('api-version', ''))}"
    return f"{base}/operationStatuses/{op}?{query}", f"{base}/operationResults/{op}?{query}"


def _operation_status(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    _known_operation(params["op"])
    now = rfc3339_micro(world.now)
    return json_response(200, {"id": request.path, "name": params["op"], "status": "Succeeded",
                               "startTime": now, "endTime": now})


def _operation_result(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    _known_operation(params["op"])
    return Response(200, {}, b"")


def _known_operation(op: str) -> None:
    if not op.startswith(_OP_PREFIX):
        raise ArmError(404, "ResourceNotFound", f"The operation '{op}' was not found.")


HANDLERS: dict[str, Handler] = {
    "svmp_list_all": _list_all,
    "svmp_list": _list,
    "svmp_get": _get,
    "svmp_put": _put,
    "svmp_patch": _patch,
    "svmp_delete": _delete,
    "svmp_list_views": _list_views,
    "svmp_get_view": _get_view,
    "svmp_operation_status": _operation_status,
    "svmp_operation_result": _operation_result,
}
