"""vCPU quota in the sandbox: VM size families, what every VM counts against, the usages API and quota refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError

from sandbox.api import arm_api
from sandbox.api.server import SandboxServer
from sandbox.api.wire import Request
from sandbox.clock import ManualClock
from sandbox.model.quota import localized_name, vm_family
from sandbox.world import World
from sandbox.world.errors import ArmError
from sandbox.world.identity import ARM_AUDIENCE
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client
from tests.sandbox.helpers import ARM_AUTH, ARM_TOKEN, POOL, RG, START, SUB, VMSS, grant, scenario

SPOT = "pool-s"
F8 = "pool-f8"
LINK = "https://docs.microsoft.com/en-us/azure/azure-supportability/per-vm-quota-requests"


def quota_doc(quotas: dict[str, int] | None = None, **top: Any) -> dict[str, Any]:
    """pool-a (Regular Standard_D4s_v5, 1 node), pool-s (Spot Standard_D4s_v5, 1 node), pool-f8 (Regular
    Standard_F8s_v2, none): 4 cores and 4 standardDSv5Family vCPUs in use, 4 lowPriorityCores."""
    doc = scenario(**top)
    spot = copy.deepcopy(doc["node_groups"][0])
    spot.update(name=SPOT, priority="Spot", labels={"pool": "s"})
    f8 = copy.deepcopy(doc["node_groups"][0])
    f8.update(name=F8, vm_size="Standard_F8s_v2", allocatable={"cpu": "8", "memory": "16Gi"}, initial=0, labels={})
    doc["node_groups"] += [spot, f8]
    if quotas is not None:
        doc["quotas"] = quotas
    return doc


def make(doc: dict[str, Any]) -> World:
    world = World(doc, start=START)
    grant(world, ARM_AUDIENCE, ARM_TOKEN)
    return world


def usage(world: World, location: str = "westeurope") -> dict[str, tuple[int, int]]:
    return {u["name"]["value"]: (u["currentValue"], u["limit"]) for u in world.usages(SUB, location)}


def patch_capacity(world: World, name: str, capacity: int) -> Any:
    body = {"sku": {"capacity": capacity}}
    return arm_api.handle(world, Request.build("PATCH", f"{VMSS}/{name}", "api-version=2024-07-01", ARM_AUTH, body))


# --- families ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "family", "localized"),
    [
        ("Standard_D4s_v5", "standardDSv5Family", "Standard DSv5 Family vCPUs"),
        ("Standard_D2s_v5", "standardDSv5Family", "Standard DSv5 Family vCPUs"),
        ("Standard_D8s_v5", "standardDSv5Family", "Standard DSv5 Family vCPUs"),
        ("Standard_F8s_v2", "standardFSv2Family", "Standard FSv2 Family vCPUs"),
        ("Standard_E4s_v5", "standardESv5Family", "Standard ESv5 Family vCPUs"),
        ("Standard_D4ds_v5", "standardDDSv5Family", "Standard DDSv5 Family vCPUs"),
        ("Standard_NC6s_v3", "standardNCSv3Family", "Standard NCSv3 Family vCPUs"),
        ("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs"),
        ("Standard_D2_v5", "standardDv5Family", "Standard Dv5 Family vCPUs"),
    ],
)
def test_vm_sizes_belong_to_their_quota_family(size: str, family: str, localized: str) -> None:
    assert vm_family(size) == family and localized_name(family) == localized


def test_the_resource_skus_double_names_the_same_family() -> None:
    world = make(quota_doc())
    response = arm_api.handle(world, Request.build(
        "GET", f"/subscriptions/{SUB}/providers/Microsoft.Compute/skus", "api-version=2021-07-01", ARM_AUTH))
    families = {s["name"]: s["family"] for s in response.json()["value"] if s["resourceType"] == "virtualMachines"}
    assert families == {"Standard_D4s_v5": "standardDSv5Family", "Standard_F8s_v2": "standardFSv2Family"}


# --- counting ------------------------------------------------------------------------------------------------


def test_regular_vms_count_against_cores_and_family_spot_vms_against_low_priority_cores() -> None:
    world = make(quota_doc({"cores": 20, "lowPriorityCores": 8, "standardDSv5Family": 12, "virtualMachines": 50}))
    assert usage(world) == {
        "cores": (4, 20), "lowPriorityCores": (4, 8), "virtualMachines": (2, 50), "virtualMachineScaleSets": (3, 10000),
        "standardDSv5Family": (4, 12), "standardFSv2Family": (0, 10000)}
    world.set_capacity(world.scale_set(SUB, RG, F8), 1)  # creating counts at once
    world.set_capacity(world.scale_set(SUB, RG, SPOT), 2)
    assert {k: usage(world)[k][0] for k in ("cores", "lowPriorityCores", "standardFSv2Family", "standardDSv5Family")} == {
        "cores": 12, "lowPriorityCores": 8, "standardFSv2Family": 8, "standardDSv5Family": 4}
    world.deallocate_instances(world.scale_set(SUB, RG, POOL), ["0"])
    world.deallocate_instances(world.scale_set(SUB, RG, SPOT), ["0"])
    world.advance_by(30)  # deallocated: both keep counting (Learn virtual-machines/quotas.md), each in its pool
    assert {k: usage(world)[k][0] for k in ("cores", "lowPriorityCores", "standardDSv5Family", "virtualMachines")} == {
        "cores": 12, "lowPriorityCores": 8, "standardDSv5Family": 4, "virtualMachines": 4}
    peaks = world.report()["quota"]["peak_usage"]
    assert {k: peaks[k] for k in ("cores", "lowPriorityCores", "standardDSv5Family", "standardFSv2Family")} == {
        "cores": 12, "lowPriorityCores": 8, "standardDSv5Family": 4, "standardFSv2Family": 8}


def test_an_evicted_deallocated_spot_vm_keeps_counting() -> None:
    world = make(quota_doc({"lowPriorityCores": 4}, evictions=[{"scale_set": SPOT, "at": ["1m"], "notice": False}]))
    world.advance_by(60)
    assert world.instances(world.scale_set(SUB, RG, SPOT))[0].power == "deallocated"
    assert usage(world)["lowPriorityCores"] == (4, 4)
    world.start_instances(world.scale_set(SUB, RG, SPOT), ["0"])  # starting it needs no more quota
    assert world.report()["quota"]["refused_requests"] == 0


def test_the_k3s_server_vm_counts_against_regional_cores() -> None:
    assert usage(make(quota_doc(flavour="k3s")))["cores"] == (6, 10000)


# --- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quotas", "group", "capacity", "what", "limit", "used", "required"),
    [
        ({"standardDSv5Family": 12}, POOL, 4, "standardDSv5Family Cores", 12, 4, 12),
        ({"cores": 16}, F8, 2, "Total Regional Cores", 16, 4, 16),
        ({"lowPriorityCores": 8}, SPOT, 3, "LowPriorityCores", 8, 4, 8),
        ({"STANDARDDSV5FAMILY": 4, "cores": 4}, POOL, 2, "standardDSv5Family Cores", 4, 4, 4),  # family first
        ({"cores": 4}, POOL, 2, "Total Regional Cores", 4, 4, 4),
    ],
)
def test_an_increase_over_quota_is_refused_with_arms_message_and_changes_nothing(
    quotas: dict[str, int], group: str, capacity: int, what: str, limit: int, used: int, required: int
) -> None:
    world = make(quota_doc(quotas))
    before = [(i.instance_id, i.state) for i in world.instances(world.scale_set(SUB, RG, group))]
    response = patch_capacity(world, group, capacity)
    assert response.status == 409
    error = response.json()["error"]
    assert error["code"] == "OperationNotAllowed"
    assert error["message"].startswith(
        f"Operation could not be completed as it results in exceeding approved {what} quota. Additional details - "
        f"Deployment Model: Resource Manager, Location: westeurope, Current Limit: {limit}, Current Usage: {used}, "
        f"Additional Required: {required}, (Minimum) New Limit Required: {used + required}. Submit a request for Quota "
        "increase at https://aka.ms/ProdportalCRP/")
    assert error["message"].endswith(f"Please read more about quota limits at {LINK}")
    scale_set = world.scale_set(SUB, RG, group)
    assert scale_set.capacity == len(before) and [(i.instance_id, i.state) for i in world.instances(scale_set)] == before
    report = world.report()
    assert (report["quota"]["refused_requests"], report["quota"]["requests"]) == (1, 1)
    assert report["quota"]["limits"] == quotas
    assert [(e["scale_set"], e["outcome"]) for e in report["spot"]["capacity_increases"]] == [(group, "OperationNotAllowed")]


def test_increases_within_quota_go_ahead_and_quotas_left_out_are_unlimited() -> None:
    world = make(quota_doc({"standardDSv5Family": 12}))
    assert patch_capacity(world, POOL, 3).status == 200  # 4 + 8 = 12: at the limit is allowed
    assert patch_capacity(world, F8, 100).status == 200  # no cores or FSv2 quota: 800 vCPUs are fine
    assert world.report()["quota"]["requests"] == 2 and world.report()["quota"]["refused_requests"] == 0


def test_a_deallocated_regular_instance_holds_its_cores_and_starts_without_more() -> None:
    world = make(quota_doc({"cores": 8}))
    pool = world.scale_set(SUB, RG, POOL)
    world.deallocate_instances(pool, ["0"])
    world.advance_by(30)
    with pytest.raises(ArmError) as caught:  # its 4 cores are still held: 8 more do not fit
        world.set_capacity(world.scale_set(SUB, RG, F8), 1)
    assert (caught.value.status, caught.value.code) == (409, "OperationNotAllowed")
    assert "Total Regional Cores quota" in caught.value.message and world.instances(pool)[0].power == "deallocated"
    world.start_instances(pool, ["0"])  # already counted: nothing more to admit
    assert world.instances(pool)[0].power == "starting"
    log = world.report()["spot"]["capacity_increases"]
    assert [(e["kind"], e["from"], e["to"], e["outcome"]) for e in log] == [
        ("capacity", 0, 1, "OperationNotAllowed"), ("start", 0, 1, "ok")]


def test_an_agent_pool_count_over_quota_is_refused_and_the_pool_is_unchanged() -> None:
    doc = scenario(quotas={"standardDSv5Family": 8})
    doc["node_groups"] = [{"vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"}, "max": 5,
                           "initial": 1, "agent_pool": {"name": "work", "mode": "System"}}]
    world = make(doc)
    pool = world.agent_pool("work")
    tags = dict(pool.tags)
    with pytest.raises(ArmError) as caught:
        world.update_agent_pool(pool, count=3, mode="User", enable_auto_scaling=False, min_count=None, max_count=None,
                                tags={"new": "tag"})
    assert caught.value.code == "OperationNotAllowed" and "standardDSv5Family Cores quota" in caught.value.message
    assert (pool.mode, pool.tags, world.agent_pool_count(pool), pool.operation) == ("System", tags, 1, None)
    op = world.update_agent_pool(pool, count=2, mode="System", enable_auto_scaling=False, min_count=None, max_count=None,
                                 tags=None)
    assert op.status == "InProgress" and world.agent_pool_count(pool) == 2


# --- the usages API through azure-mgmt-compute --------------------------------------------------------------------


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    doc = quota_doc({"cores": 100, "lowPriorityCores": 10, "standardDSv5Family": 40, "standardESv5Family": 16},
                    arm_page_size=2)
    return sandbox_factory(doc, clock=ManualClock(SANDBOX_START))


def test_usages_are_listed_through_the_sdk_page_by_page(still: SandboxServer) -> None:
    usages = list(compute_client(still).usage.list("westeurope"))
    listed = {u.name.value: (u.unit, u.current_value, u.limit, u.name.localized_value) for u in usages}
    assert listed == {
        "cores": ("Count", 4, 100, "Total Regional vCPUs"),
        "lowPriorityCores": ("Count", 4, 10, "Total Regional Low-priority vCPUs"),
        "virtualMachines": ("Count", 2, 10000, "Virtual Machines"),
        "virtualMachineScaleSets": ("Count", 3, 10000, "Virtual Machine Scale Sets"),
        "standardDSv5Family": ("Count", 4, 40, "Standard DSv5 Family vCPUs"),
        "standardESv5Family": ("Count", 0, 16, "Standard ESv5 Family vCPUs"),  # a quota of no size of the world
        "standardFSv2Family": ("Count", 0, 10000, "Standard FSv2 Family vCPUs"),
    }
    assert still.world.report()["api_calls"]["breakdown"]["arm"]["LIST usages"] == 4  # 7 usages, 2 a page


def test_usages_of_an_unknown_location_or_subscription_are_not_found(still: SandboxServer) -> None:
    with pytest.raises(ResourceNotFoundError) as caught:
        list(compute_client(still).usage.list("atlantis"))
    assert caught.value.status_code == 404
    world = make(quota_doc())
    response = arm_api.handle(world, Request.build(
        "GET", "/subscriptions/99999999-0000-0000-0000-000000000000/providers/Microsoft.Compute/locations/westeurope/usages",
        "api-version=2024-07-01", ARM_AUTH))
    assert response.status == 404 and response.json()["error"]["code"] == "SubscriptionNotFound"


def test_flexible_members_count_and_are_refused_like_uniform_instances() -> None:
    doc = quota_doc({"lowPriorityCores": 8})
    doc["node_groups"][1]["orchestration"] = "Flexible"
    world = make(doc)
    spot = world.scale_set(SUB, RG, SPOT)
    assert usage(world)["lowPriorityCores"] == (4, 8)
    world.set_capacity(spot, 2)
    with pytest.raises(ArmError) as caught:
        world.set_capacity(spot, 3)
    assert "LowPriorityCores quota" in caught.value.message and spot.capacity == 2
