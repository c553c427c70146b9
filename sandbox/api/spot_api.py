"""The ARM double's quota and Spot routes: the Compute usages list and simulateEviction.

Registered in `sandbox.api.arm_api` next to its own routes (same token checks, call counting and fault injection;
no throttling: these limits are per subscription and far above what an autoscaler sends):

- `GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/usages` (azure-mgmt-compute's
  `usage.list(location)`, api-version 2026-04-01 in 39.0.0; any is taken): `{"value": [Usage], "nextLink"?}`,
  one `{"unit": "Count", "currentValue", "limit", "name": {"value", "localizedValue"}}` per quota
  (`sandbox.world.quota.QuotaPart.usages`), paged like the other lists. An unknown subscription or location
  is 404. Fault resource: `usages`.
- `POST .../virtualMachineScaleSets/{vmss}/virtualMachines/{instanceId}/simulateEviction` (a Uniform instance)
  and `POST .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}/simulateEviction` (a
  Flexible member): 204; the Preempt notice goes out at once and the VM is evicted 30 s later
  (`sandbox.world.spot.SpotPart.simulate_eviction`). Fault resource: the scale set's name.
"""

from __future__ import annotations

from collections.abc import Callable

from sandbox.api.arm_paging import arm_page
from sandbox.api.wire import Request, Response, json_response
from sandbox.world import World
from sandbox.world.compute import InstanceSim, ScaleSetSim
from sandbox.world.errors import ArmError

Handler = Callable[[World, Request, dict[str, str], str], Response]

_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourceGroups/(?P<rg>[^/]+)"
_VMSS = _RG + r"/providers/Microsoft\.Compute/virtualMachineScaleSets/(?P<vmss>[^/]+)"

# (method, path pattern, route name): sandbox.api.arm_api compiles them with its own (anchored, case-insensitive)
ROUTES: list[tuple[str, str, str]] = [
    ("GET", _SUB + r"/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/usages", "usages"),
    ("POST", _VMSS + r"/virtualMachines/(?P<id>[^/]+)/simulateEviction", "simulate_eviction"),
    ("POST", _RG + r"/providers/Microsoft\.Compute/virtualMachines/(?P<vm>[^/]+)/simulateEviction",
     "flex_simulate_eviction"),
]
# route name -> (operation name in the report, write?, throttling bucket), as sandbox.api.arm_api.OPERATIONS
OPERATIONS: dict[str, tuple[str, bool, str | None]] = {
    "usages": ("LIST usages", False, None),
    "simulate_eviction": ("POST simulateEviction", True, None),
    "flex_simulate_eviction": ("POST virtualMachines/simulateEviction", True, None),
}


def fault_resource(world: World, name: str, params: dict[str, str]) -> str | None:
    """The `resource` an injected fault names to hit these routes; None for other routes."""
    if name == "usages":
        return "usages"
    if name == "flex_simulate_eviction":
        found = _flexible_member(world, params)
        return found[0].name if found is not None else params["vm"]
    return None  # simulate_eviction: the scale set's name, as every scale-set route


def _usages(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    items = world.usages(params["sub"], params["loc"])
    return json_response(200, arm_page(items, request, page_size=world.scenario.arm_page_size, api_version=api_version))


def _simulate_eviction(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    group = world.scale_set(params["sub"], params["rg"], params["vmss"])
    if group.flexible:  # the sandbox's wording: Flexible members are evicted through their own VM route
        raise ArmError(400, "InvalidParameter", f"Virtual Machine Scale Set '{group.name}' is in Flexible orchestration "
                                                "mode: simulate the eviction of its VM instead.", "instanceId")
    inst = next((i for i in world.instances(group) if str(i.instance_id) == params["id"]), None)
    if inst is None:
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{params['id']}' "
            f"under resource group '{params['rg']}' was not found.",
        )
    world.simulate_eviction(group, inst)
    return json_response(204, None)


def _flexible_member(world: World, params: dict[str, str]) -> tuple[ScaleSetSim, InstanceSim] | None:
    wanted = params["vm"].lower()
    for group in world.scale_sets(params["sub"], params["rg"]):
        if group.flexible:
            for inst in world.instances(group):
                if inst.vm_name.lower() == wanted:
                    return group, inst
    return None


def _flex_simulate_eviction(world: World, request: Request, params: dict[str, str], api_version: str) -> Response:
    found = _flexible_member(world, params)
    if found is None:
        raise ArmError(
            404, "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachines/{params['vm']}' under resource group '{params['rg']}' "
            "was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )
    world.simulate_eviction(*found)
    return json_response(204, None)


HANDLERS: dict[str, Handler] = {
    "usages": _usages,
    "simulate_eviction": _simulate_eviction,
    "flex_simulate_eviction": _flex_simulate_eviction,
}
