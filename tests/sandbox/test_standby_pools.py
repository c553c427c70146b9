"""The Standby Pool double: the resource's shape, PUT/PATCH/GET/LIST/DELETE as the spec says, the pool's own
refill clock, and a Flexible scale-out taking ready pool VMs before it creates any."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.api import arm_api
from sandbox.api.wire import Request
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from sandbox.world.identity import ARM_AUDIENCE
from sandbox.world.standby_pools import MAX_POOL_AND_SET, pool_size
from tests.sandbox.helpers import grant

SUB = "5a3e1f6c-2b7d-4c8e-9f10-0a1b2c3d4e5f"
POOLS = f"/subscriptions/{SUB}/resourceGroups/rg-flex/providers/Microsoft.StandbyPool/standbyVirtualMachinePools"
SET_ID = f"/subscriptions/{SUB}/resourceGroups/rg-flex/providers/Microsoft.Compute/virtualMachineScaleSets/pool-flex"
_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}


def scenario(pool: dict[str, Any] | None = None, *, orchestration: str = "Flexible") -> dict[str, Any]:
    group: dict[str, Any] = {"resource_group": "rg-flex", "name": "pool-flex", "vm_size": "Standard_D4s_v5",
                             "allocatable": _D4, "min": 1, "max": 20, "initial": 1, "orchestration": orchestration}
    if pool is not None:
        group["standby_pool"] = pool
    return {"name": "pools", "subscription_id": SUB, "arm_throttling": False, "boot_delay": "100s",
            "start_delay": "40s", "deallocate_delay": "20s", "node_groups": [group]}


def call(world: World, method: str, path: str, body: Any = None) -> Any:
    headers = {**grant(world, ARM_AUDIENCE, "arm-token"), "host": "sandbox"}
    request = Request.build(method, path, query={"api-version": "2025-10-01"}, body=body if body is not None else b"",
                            headers=headers)
    return arm_api.handle(world, request)


def pool_world(**pool: Any) -> World:
    return World(scenario({"name": "standby", "max_ready": 4, "min_ready": 4, "refill_interval": "60s", **pool}))


def test_the_resource_has_the_specs_shape() -> None:
    world = pool_world()
    response = call(world, "GET", f"{POOLS}/standby")
    assert response.status == 200
    body = response.json()
    assert body["type"] == "Microsoft.StandbyPool/standbyVirtualMachinePools"
    assert body["id"].endswith("/standbyVirtualMachinePools/standby") and body["name"] == "standby"
    props = body["properties"]
    assert props["elasticityProfile"] == {"maxReadyCapacity": 4, "minReadyCapacity": 4}
    assert props["virtualMachineState"] == "Deallocated"
    assert props["attachedVirtualMachineScaleSetId"].lower() == SET_ID.lower()
    assert props["provisioningState"] == "Succeeded"
    listed = call(world, "GET", POOLS).json()["value"]
    by_sub = call(world, "GET", f"/subscriptions/{SUB}/providers/Microsoft.StandbyPool/standbyVirtualMachinePools")
    assert [p["id"] for p in listed] == [p["id"] for p in by_sub.json()["value"]] == [body["id"]]


def test_runtime_view_counts_every_pool_vm_by_state() -> None:
    world = pool_world(initial_ready=False)
    view = lambda: call(world, "GET", f"{POOLS}/standby/runtimeViews/latest").json()  # noqa: E731
    counts = lambda: {c["state"]: c["count"] for s in view()["properties"]["instanceCountSummary"]  # noqa: E731
                      for c in s["instanceCountsByState"]}
    assert sum(counts().values()) == 0  # starts empty, fills on its clock
    world.advance_by(61)
    assert counts()["Creating"] == 4
    world.advance_by(400)
    assert counts()["Deallocated"] == 4 and sum(counts().values()) == 4
    assert view()["properties"]["status"]["code"] == "HealthState/healthy"


def test_put_creates_with_an_async_operation_and_replaces_with_200() -> None:
    world = World(scenario())
    body = {"location": "westeurope", "properties": {"virtualMachineState": "Running",
            "elasticityProfile": {"maxReadyCapacity": 3}, "attachedVirtualMachineScaleSetId": SET_ID}}
    created = call(world, "PUT", f"{POOLS}/fresh", body)
    assert created.status == 201 and "Azure-AsyncOperation" in created.headers
    status_path = created.headers["Azure-AsyncOperation"].split("sandbox", 1)[1].split("?")[0]
    assert call(world, "GET", status_path).json()["status"] == "Succeeded"
    replaced = call(world, "PUT", f"{POOLS}/fresh", body)
    assert replaced.status == 200 and "Azure-AsyncOperation" not in replaced.headers
    assert replaced.json()["properties"]["elasticityProfile"]["minReadyCapacity"] == 0


@pytest.mark.parametrize("props,status,code", [
    ({"virtualMachineState": "Running", "elasticityProfile": {"maxReadyCapacity": 2001}}, 400, "InvalidParameter"),
    ({"virtualMachineState": "Running", "elasticityProfile": {"maxReadyCapacity": 2, "minReadyCapacity": 3}},
     400, "InvalidParameter"),
    ({"virtualMachineState": "Stopped", "elasticityProfile": {"maxReadyCapacity": 2}}, 400, "InvalidParameter"),
    ({"elasticityProfile": {"maxReadyCapacity": 2}}, 400, "InvalidParameter"),
], ids=["max above 2000", "min above max", "unknown state", "no state"])
def test_put_refuses_what_the_spec_refuses(props: dict[str, Any], status: int, code: str) -> None:
    world = World(scenario())
    response = call(world, "PUT", f"{POOLS}/bad", {"location": "westeurope", "properties": {
        **props, "attachedVirtualMachineScaleSetId": SET_ID}})
    assert (response.status, response.json()["error"]["code"]) == (status, code)


def test_a_second_pool_on_one_set_conflicts_and_a_uniform_set_is_refused() -> None:
    world = pool_world()
    body = {"location": "westeurope", "properties": {"virtualMachineState": "Running",
            "elasticityProfile": {"maxReadyCapacity": 1}, "attachedVirtualMachineScaleSetId": SET_ID}}
    assert call(world, "PUT", f"{POOLS}/second", body).status == 409
    uniform = World(scenario(orchestration="Uniform"))
    assert call(uniform, "PUT", f"{POOLS}/second", body).status == 400


def test_patch_changes_only_what_it_sends_and_refuses_deallocated_to_hibernated() -> None:
    world = pool_world()
    patched = call(world, "PATCH", f"{POOLS}/standby", {"properties": {"elasticityProfile": {"maxReadyCapacity": 9}}})
    assert patched.status == 200
    props = patched.json()["properties"]
    assert props["elasticityProfile"] == {"maxReadyCapacity": 9, "minReadyCapacity": 4}
    assert props["virtualMachineState"] == "Deallocated"
    moved = call(world, "PATCH", f"{POOLS}/standby", {"properties": {"virtualMachineState": "Hibernated"}})
    assert moved.status == 400
    assert call(world, "PATCH", f"{POOLS}/missing", {"properties": {}}).status == 404


def test_delete_is_202_with_location_then_204() -> None:
    world = pool_world()
    first = call(world, "DELETE", f"{POOLS}/standby")
    assert first.status == 202 and "Location" in first.headers
    assert call(world, "GET", f"{POOLS}/standby").status == 404
    assert call(world, "DELETE", f"{POOLS}/standby").status == 204


@pytest.mark.parametrize("vm_state", ["Deallocated", "Running"])
def test_a_scale_out_takes_ready_pool_vms_first_and_the_pool_refills(vm_state: str) -> None:
    world = pool_world(vm_state=vm_state)
    group = world.scale_set(SUB, "rg-flex", "pool-flex")
    world.set_capacity(group, 7)  # 6 new members: 4 from the pool, 2 created
    new = [i for i in world.instances(group) if i.instance_id > 0]
    delays = sorted(i.boot_delay for i in new)
    assert sum(1 for d in delays if d < 60) == 4, delays
    if vm_state == "Running":
        assert delays[:4] == [0.0] * 4
    assert all(d > 40 for d in delays[4:])  # created: a boot (the scenario's fixed 100 s), not the 40 s start
    pool = world.standby_pool_report()["rg-flex/standby"]
    assert (pool["taken"], pool["vms"]) == (4, 0)
    world.advance_by(61)  # the pool's clock: 4 new VMs creating
    assert world.standby_pool_report()["rg-flex/standby"]["vms"] == 4


@pytest.mark.parametrize("max_ready,min_ready,count", [(15, 0, 10), (15, 0, 20), (4, 4, 10), (20, 0, 995)])
def test_pool_size_follows_the_docs_formula(max_ready: int, min_ready: int, count: int) -> None:
    size = pool_size(max_ready, min_ready, count)
    assert size >= 0 and size + count <= max(MAX_POOL_AND_SET, count)
    assert size == min(max(min_ready, max_ready - count), MAX_POOL_AND_SET - count)
    assert size >= min(min_ready, MAX_POOL_AND_SET - count)


@pytest.mark.parametrize("pool,orchestration,problem", [
    ({"name": "ok-pool"}, "Uniform", "Flexible scale set only"),
    ({"name": "x"}, "Flexible", "not a pool name"),
    ({"name": "ok-pool", "max_ready": 1, "min_ready": 2}, "Flexible", "must not exceed max_ready"),
    ({"name": "ok-pool", "vm_state": "Stopped"}, "Flexible", "not a pool VM state"),
])
def test_the_scenario_section_names_what_is_wrong(pool: dict[str, Any], orchestration: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        load_scenario(scenario(pool, orchestration=orchestration))
