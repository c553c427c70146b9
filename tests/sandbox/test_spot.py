"""Spot scale sets in the sandbox: the scenario fields, how ARM and nodes show them, capacity failures, evictions."""

from __future__ import annotations

import copy
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
import requests
from azure.core.exceptions import HttpResponseError

from sandbox.api import agent_pools_api, arm_api, flexible
from sandbox.api.server import SandboxServer
from sandbox.api.wire import Request
from sandbox.clock import ManualClock
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from sandbox.world.compute import ScaleSetSim
from sandbox.world.errors import ArmError
from sandbox.world.identity import ARM_AUDIENCE
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client
from tests.sandbox.helpers import ARM_AUTH, ARM_TOKEN, POOL, RG, START, SUB, VMSS, grant, job, scenario

REGULAR = "pool-r"
SPOT_KEY = "kubernetes.azure.com/scalesetpriority"
TOLERATE_SPOT = [{"key": SPOT_KEY, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]
# helpers.BASE: boot 60 s (provisioned at 30 s), delete 30 s, node removal 10 s


def spot_doc(*, initial: int = 2, group: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """helpers' pool-a made Spot (2 nodes) plus a Regular pool-r (no node), both Standard_D4s_v5 (4 vCPUs)."""
    doc = scenario(**top)
    spot = doc["node_groups"][0]
    spot.update(priority="Spot", initial=initial, **(group or {}))
    regular = copy.deepcopy(scenario()["node_groups"][0])
    regular.update(name=REGULAR, initial=0, labels={"pool": "r"})
    doc["node_groups"].append(regular)
    return doc


def make(doc: dict[str, Any]) -> World:
    world = World(doc, start=START)
    grant(world, ARM_AUDIENCE, ARM_TOKEN)
    return world


def group_of(world: World, name: str = POOL) -> ScaleSetSim:
    return world.scale_set(SUB, RG, name)


def patch_capacity(world: World, capacity: int, name: str = POOL) -> Any:
    body = {"sku": {"capacity": capacity}}
    return arm_api.handle(world, Request.build("PATCH", f"{VMSS}/{name}", "api-version=2024-07-01", ARM_AUTH, body))


def arm_get(world: World, path: str, query: str = "api-version=2024-07-01") -> Any:
    return arm_api.handle(world, Request.build("GET", path, query, ARM_AUTH))


def operation_of(world: World, response: Any) -> Any:
    return world.operation(response.headers["Azure-AsyncOperation"].split("/operations/")[1].split("?")[0])


# --- the scenario ------------------------------------------------------------------------------------------


def test_a_spot_group_defaults_as_azure_does_and_carries_the_spot_label_and_taint() -> None:
    regular, = load_scenario(scenario()).node_groups
    assert (regular.priority, regular.max_price) == ("Regular", -1.0) and SPOT_KEY not in regular.labels
    assert not regular.taints
    spot, _ = load_scenario(spot_doc()).node_groups
    assert (spot.priority, spot.eviction_policy, spot.max_price) == ("Spot", "Deallocate", -1.0)
    assert spot.labels[SPOT_KEY] == "spot" and spot.labels["pool"] == "a"
    assert [(t.key, t.value, t.effect) for t in spot.taints] == [(SPOT_KEY, "spot", "NoSchedule")]
    priced = load_scenario(spot_doc(group={"eviction_policy": "Delete", "max_price": 0.05})).node_groups[0]
    assert (priced.eviction_policy, priced.max_price) == ("Delete", 0.05)
    aks = scenario()
    aks["node_groups"] = [{"vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"}, "max": 3,
                           "priority": "Spot", "agent_pool": "spot"}]
    pool, = load_scenario(aks).node_groups
    assert (pool.priority, pool.eviction_policy) == ("Spot", "Delete")  # an AKS Spot pool's default


@pytest.mark.parametrize(
    ("group", "top", "path", "problem"),
    [
        ({"priority": "Low"}, {}, "$.node_groups[0].priority", "'Low' is not a priority"),
        ({"priority": "Regular", "eviction_policy": "Delete"}, {}, "$.node_groups[0].eviction_policy", "only Spot groups"),
        ({"priority": "Regular", "max_price": 0.1}, {}, "$.node_groups[0].max_price", "only Spot groups"),
        ({"priority": "Spot", "eviction_policy": "Stop"}, {}, "$.node_groups[0].eviction_policy", "not an eviction policy"),
        ({"priority": "Spot", "max_price": 0.123456}, {}, "$.node_groups[0].max_price", "at most 5 decimals"),
        ({"priority": "Spot", "max_price": 0}, {}, "$.node_groups[0].max_price", "must be -1 or a positive price"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": REGULAR, "at": ["1m"]}]}, "$.evictions[0].scale_set",
         "is a Regular scale set"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": "nope", "at": ["1m"]}]}, "$.evictions[0].scale_set",
         "names no scale set"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": POOL, "at": ["1m"], "rate_per_hour": 1}]}, "$.evictions[0]",
         "exactly one of at"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": POOL, "rate_per_hour": 1, "count": 2}]},
         "$.evictions[0].count", "only with at"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": POOL, "rate_per_hour": 0}]}, "$.evictions[0].rate_per_hour",
         "above 0"),
        ({"priority": "Spot"}, {"evictions": [{"scale_set": POOL, "at": []}]}, "$.evictions[0].at", "at least one"),
        ({"priority": "Spot"}, {"spot_capacity": [{"scale_set": POOL, "available": 1, "code": "Nope"}]},
         "$.spot_capacity[0].code", "not a Spot capacity failure code"),
        ({"priority": "Spot"}, {"spot_capacity": [{"scale_set": POOL, "available": 1, "code": "AllocationFailed",
                                                   "from": "10m", "until": "5m"}]},
         "$.spot_capacity[0].until", "must be later than from"),
        ({"priority": "Spot"}, {"spot_capacity": [{"scale_set": REGULAR, "available": 1, "code": "AllocationFailed"}]},
         "$.spot_capacity[0].scale_set", "is a Regular scale set"),
        ({}, {"quotas": {"cores": -1}}, "$.quotas.cores", "at least 0"),
        ({}, {"quotas": {"cores": 4, "Cores": 8}}, "$.quotas.Cores", "case-insensitive"),
        ({}, {"quotas": {"gpus": 4}}, "$.quotas.gpus", "is not a quota"),
        ({}, {"cloud_node_lifecycle": "yes"}, "$.cloud_node_lifecycle", "true or false"),
    ],
)
def test_bad_spot_fields_are_reported_with_their_path(
    group: dict[str, Any], top: dict[str, Any], path: str, problem: str
) -> None:
    doc = spot_doc(**top)
    doc["node_groups"][0].pop("priority")
    doc["node_groups"][0].update(group)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(doc)
    assert caught.value.path == path and problem in caught.value.problem


# --- how ARM and the nodes show Spot ------------------------------------------------------------------------


@pytest.mark.parametrize("orchestration", ["Uniform", "Flexible"])
def test_scale_sets_show_priority_eviction_policy_and_max_price(orchestration: str) -> None:
    world = make(spot_doc(group={"orchestration": orchestration, "eviction_policy": "Delete", "max_price": 0.0321}))
    spot_profile = arm_get(world, f"{VMSS}/{POOL}").json()["properties"]["virtualMachineProfile"]
    assert (spot_profile["priority"], spot_profile["evictionPolicy"], spot_profile["billingProfile"]) == (
        "Spot", "Delete", {"maxPrice": 0.0321})
    regular_profile = arm_get(world, f"{VMSS}/{REGULAR}").json()["properties"]["virtualMachineProfile"]
    assert regular_profile["priority"] == "Regular"
    assert "evictionPolicy" not in regular_profile and "billingProfile" not in regular_profile
    if orchestration == "Flexible":  # a member is a plain VM carrying them itself
        group = group_of(world)
        vm = flexible.vm_json(world, group, world.instances(group)[0])["properties"]
        assert (vm["priority"], vm["evictionPolicy"], vm["billingProfile"]) == ("Spot", "Delete", {"maxPrice": 0.0321})


def test_an_aks_spot_pool_shows_its_scale_set_priority() -> None:
    doc = scenario()
    doc["node_groups"].append({"vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"}, "max": 3,
                               "initial": 1, "priority": "Spot", "agent_pool": "spot"})
    doc["node_groups"].append({"vm_size": "Standard_D2s_v5", "allocatable": {"cpu": "2", "memory": "8Gi"}, "max": 3,
                               "initial": 1, "agent_pool": {"name": "sys", "mode": "System"}})
    world = make(doc)
    spot, sys_pool = world.agent_pool("spot"), world.agent_pool("sys")
    properties = agent_pools_api.pool_properties(world, spot)
    assert (properties["scaleSetPriority"], properties["scaleSetEvictionPolicy"], properties["spotMaxPrice"]) == (
        "Spot", "Delete", -1.0)
    assert "scaleSetPriority" not in agent_pools_api.pool_properties(world, sys_pool)
    (node,) = [n for n in world.k8s_list("nodes") if n["metadata"]["labels"].get("agentpool") == "spot"]
    assert node["metadata"]["labels"][SPOT_KEY] == "spot"


def test_spot_nodes_are_labelled_and_tainted_and_take_only_pods_that_tolerate_spot() -> None:
    doc = spot_doc(initial=1, workloads=[job("plain", duration="1h"), job("tolerant", duration="1h",
                                                                         tolerations=TOLERATE_SPOT)])
    doc["node_groups"][1]["initial"] = 0
    world = make(doc)
    node = world.k8s_get("nodes", "", "pool-a000000")
    assert node["metadata"]["labels"][SPOT_KEY] == "spot"
    assert {"key": SPOT_KEY, "value": "spot", "effect": "NoSchedule"} in node["spec"]["taints"]
    placed = {p["metadata"]["name"].rsplit("-", 1)[0]: p["spec"].get("nodeName") for p in world.k8s_list("pods", "default")}
    assert placed == {"plain": None, "tolerant": "pool-a000000"}


# --- Spot capacity ------------------------------------------------------------------------------------------


def test_no_spot_capacity_is_refused_at_once_with_sku_not_available() -> None:
    world = make(spot_doc(spot_capacity=[{"scale_set": POOL, "available": 3, "code": "SkuNotAvailable"}]))
    assert patch_capacity(world, 3).status == 200  # 3 Spot instances fit
    response = patch_capacity(world, 4)
    assert response.status == 409
    error = response.json()["error"]
    assert (error["code"], error["target"]) == ("SkuNotAvailable", "sku.name")
    assert error["message"].startswith("The requested VM size for resource 'Following SKUs have failed for Capacity "
                                       "Restrictions: Standard_D4s_v5' is currently not available in location 'westeurope'.")
    assert group_of(world).capacity == 3 and len(world.instances(group_of(world))) == 3
    spot = world.report()["spot"]
    assert spot["capacity_failures"] == {"SkuNotAvailable": 1}
    assert [(e["from"], e["to"], e["outcome"]) for e in spot["capacity_increases"]] == [(2, 3, "ok"), (3, 4, "SkuNotAvailable")]


@pytest.mark.parametrize("code", ["AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest"])
def test_an_allocation_failure_fails_the_long_running_operation(code: str) -> None:
    world = make(spot_doc(spot_capacity=[{"scale_set": POOL, "available": 2, "code": code, "from": "1m", "until": "10m"}]))
    assert operation_of(world, patch_capacity(world, 3)).status == "InProgress"  # before `from`: capacity is there
    world.advance_by(120)
    response = patch_capacity(world, 5)
    assert response.status == 200 and response.json()["sku"]["capacity"] == 5  # ARM takes the request...
    op = operation_of(world, response)
    world.advance_by(5)  # ... and the operation fails (SCALE_UP_FAILURE_DELAY), capacity back, no instance made
    assert (op.status, op.error_code) == ("Failed", code) and "Allocation failed" in op.error_message
    assert group_of(world).capacity == 3 and len(world.instances(group_of(world))) == 3
    world.advance_by(600)  # after `until`: there is capacity again
    assert operation_of(world, patch_capacity(world, 5)).error_code is None
    assert world.report()["spot"]["capacity_failures"] == {code: 1}


def test_fallback_lag_runs_from_a_spot_failure_to_the_next_regular_increase() -> None:
    world = make(spot_doc(spot_capacity=[{"scale_set": POOL, "available": 2, "code": "SkuNotAvailable"}]))
    assert world.report()["spot"]["fallback_lag_seconds"] is None
    assert patch_capacity(world, 3).status == 409
    world.advance_by(40)
    assert world.report()["spot"]["fallback_lag_seconds"] == 40 and world.report()["spot"]["fallbacks_missing"] == 1
    assert patch_capacity(world, 1, REGULAR).status == 200
    world.advance_by(100)
    spot = world.report()["spot"]
    assert spot["fallback_lag_seconds"] == 40 and spot["fallbacks_missing"] == 0
    assert [(e["scale_set"], e["t"], e["outcome"], e["spot"]) for e in spot["capacity_increases"]] == [
        (POOL, 0.0, "SkuNotAvailable", True), (REGULAR, 40.0, "ok", False)]


# --- evictions ---------------------------------------------------------------------------------------------


def instance_view_power(world: World, instance_id: int) -> str:
    body = arm_get(world, f"{VMSS}/{POOL}/virtualMachines/{instance_id}", "api-version=2024-07-01&$expand=instanceView")
    return body.json()["properties"]["instanceView"]["statuses"][1]["code"]


@pytest.mark.parametrize("policy", ["Delete", "Deallocate"])
def test_an_eviction_deletes_or_deallocates_the_oldest_running_instance(policy: str) -> None:
    world = make(spot_doc(initial=3, group={"eviction_policy": policy},
                          evictions=[{"scale_set": POOL, "at": ["5m"], "count": 2}]))
    world.advance_by(299)
    assert [(i.instance_id, i.power) for i in world.instances(group_of(world))] == [(0, "running"), (1, "running"),
                                                                                   (2, "running")]
    world.advance_by(1)
    ids = [i.instance_id for i in world.instances(group_of(world))]
    listed = [v["instanceId"] for v in arm_get(world, f"{VMSS}/{POOL}/virtualMachines").json()["value"]]
    if policy == "Delete":  # gone: out of the set, out of every list, capacity down
        assert ids == [2] and listed == ["2"] and group_of(world).capacity == 1
        assert arm_get(world, f"{VMSS}/{POOL}/virtualMachines/0").status == 404
    else:  # deallocated: still in the set and in capacity, its power state deallocated
        assert ids == [0, 1, 2] and listed == ["0", "1", "2"] and group_of(world).capacity == 3
        assert [instance_view_power(world, i) for i in ids] == ["PowerState/deallocated"] * 2 + ["PowerState/running"]
    spot = world.report()["spot"]
    assert (spot["evictions"], spot["evictions_with_notice"], spot["notices_published"]) == (2, 2, 2)
    assert [(e["instance_id"], e["policy"], e["t"]) for e in spot["eviction_log"]] == [(0, policy, 300.0), (1, policy, 300.0)]


def test_a_deallocated_spot_instance_starts_again_under_spot_capacity() -> None:
    world = make(spot_doc(initial=1, evictions=[{"scale_set": POOL, "at": ["1m"], "notice": False}],
                          spot_capacity=[{"scale_set": POOL, "available": 0, "code": "SkuNotAvailable", "from": "2m",
                                          "until": "3m"}]))
    world.advance_by(130)
    group = group_of(world)
    with pytest.raises(ArmError) as caught:
        world.start_instances(group, ["0"])
    assert (caught.value.status, caught.value.code) == (409, "SkuNotAvailable")
    assert world.instances(group)[0].power == "deallocated"
    world.advance_by(60)  # after `until`
    op = world.start_instances(group, ["0"])
    world.advance_by(60)
    assert op.status == "Succeeded" and world.instances(group)[0].power == "running"
    node = world.k8s_get("nodes", "", "pool-a000000")
    assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    # Stale from the eviction (60 s) until the started VM's node was Ready again (190 s + a 60 s boot).
    assert world.report()["spot"]["stale_nodes_at_end"] == 0 and world.report()["spot"]["stale_node_seconds_max"] == 190


def test_the_notice_is_a_preempt_scheduled_event_published_30_seconds_before() -> None:
    world = make(spot_doc(evictions=[{"scale_set": POOL, "at": ["10m"]}]))
    world.advance_by(569)
    assert world.eventgrid_events() == []
    world.advance_by(1)
    ((entry),) = world.eventgrid_events()
    assert entry["seq"] == 1 and world.eventgrid_events(after=1) == []
    event = entry["event"]
    topic = f"{VMSS}/{POOL}"
    assert {k: event[k] for k in ("topic", "subject", "eventType", "eventTime", "dataVersion", "metadataVersion")} == {
        "topic": topic, "subject": f"{topic}/virtualMachines/0", "eventType": "Microsoft.Maintenance.ScheduledEventCreated",
        "eventTime": "2030-01-07T09:09:30Z", "dataVersion": "1.0", "metadataVersion": "1"}
    data = event["data"]
    assert data["EventId"] == event["id"] and len(event["id"]) == 36
    assert {k: v for k, v in data.items() if k != "EventId"} == {
        "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": [f"{POOL}_0"], "EventStatus": "Scheduled",
        "NotBefore": "Mon, 07 Jan 2030 09:10:00 GMT", "Description": "The virtual machine is being preempted by Azure.",
        "EventSource": "Platform", "DurationInSeconds": -1}
    assert parsedate_to_datetime(data["NotBefore"]) == START.replace(minute=10)
    assert world.instances(group_of(world))[0].power == "running"  # announced, not yet evicted
    world.advance_by(30)
    assert world.instances(group_of(world))[0].power == "deallocated"


def test_a_flexible_member_is_named_by_its_vm_in_the_notice() -> None:
    world = make(spot_doc(group={"orchestration": "Flexible"}, evictions=[{"scale_set": POOL, "at": ["1m"]}]))
    world.advance_by(30)
    (entry,) = world.eventgrid_events()
    vm_name = world.instances(group_of(world))[0].vm_name
    assert entry["event"]["subject"] == f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{vm_name}"
    assert entry["event"]["data"]["Resources"] == [vm_name] and entry["event"]["topic"] == f"{VMSS}/{POOL}"


def test_evictions_without_notice_publish_nothing() -> None:
    world = make(spot_doc(evictions=[{"scale_set": POOL, "at": ["1m"], "notice": False}]))
    world.advance_by(120)
    spot = world.report()["spot"]
    assert world.eventgrid_events() == [] and (spot["evictions"], spot["evictions_with_notice"], spot["notices_published"]) == (1, 0, 0)


@pytest.mark.parametrize(("lifecycle", "policy"), [(False, "Delete"), (False, "Deallocate"), (True, "Delete"),
                                                   (True, "Deallocate")])
def test_the_node_of_an_evicted_vm_lingers_unless_a_cloud_node_lifecycle_deletes_it(lifecycle: bool, policy: str) -> None:
    doc = spot_doc(initial=1, group={"eviction_policy": policy}, cloud_node_lifecycle=lifecycle,
                   evictions=[{"scale_set": POOL, "at": ["2m"]}],
                   workloads=[job("work", 2, duration="1h", tolerations=TOLERATE_SPOT)])
    world = make(doc)
    world.advance_by(120)
    node = world.k8s_get("nodes", "", "pool-a000000")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {("node.kubernetes.io/unreachable", "NoExecute"), ("node.kubernetes.io/unreachable", "NoSchedule")} <= {
        (t["key"], t["effect"]) for t in node["spec"]["taints"]}
    phases = [p["status"]["phase"] for p in world.k8s_list("pods", "default") if p["spec"].get("nodeName") == "pool-a000000"]
    assert phases == ["Failed", "Failed"]  # the containers died with the VM
    world.advance_by(10)  # node_removal_delay
    names = [n["metadata"]["name"] for n in world.k8s_list("nodes")]
    assert ("pool-a000000" in names) is not lifecycle
    world.advance_by(290)
    spot = world.report()["spot"]
    assert (spot["evicted_pods"], spot["evicted_job_pods"], spot["lost_work_seconds"]) == (2, 2, 240.0)
    assert (spot["stale_node_seconds_max"], spot["stale_nodes_at_end"]) == ((10.0, 0) if lifecycle else (300.0, 1))
    if not lifecycle:  # deleting the stale Node through the API ends it
        world.k8s_delete("nodes", "", "pool-a000000")
        world.advance_by(50)
        assert world.report()["spot"]["stale_nodes_at_end"] == 0 and world.report()["spot"]["stale_node_seconds_max"] == 300


def test_pods_moved_off_the_node_between_notice_and_eviction_are_counted() -> None:
    world = make(spot_doc(initial=1, evictions=[{"scale_set": POOL, "at": ["5m"]}],
                          workloads=[job("work", 3, duration="1h", tolerations=TOLERATE_SPOT)]))
    world.advance_by(275)  # the notice went out at 270 s
    node = world.k8s_get("nodes", "", "pool-a000000")
    node["spec"]["unschedulable"] = True  # what an autoscaler acting on the notice does: cordon, then evict
    world.k8s_replace("nodes", "", "pool-a000000", node)
    pods = sorted(p["metadata"]["name"] for p in world.k8s_list("pods", "default"))
    world.evict("default", pods[0])
    world.advance_by(25)
    spot = world.report()["spot"]
    assert (spot["pods_moved_before_eviction"], spot["evicted_pods"], spot["evicted_job_pods"]) == (1, 2, 2)
    assert spot["lost_work_seconds"] == 600.0


def test_a_poisson_rate_evicts_reproducibly_from_the_seed() -> None:
    doc = spot_doc(initial=4, group={"eviction_policy": "Delete", "max": 4}, duration="10h",
                   evictions=[{"scale_set": POOL, "rate_per_hour": 0.5}])

    def evicted(seed: int) -> list[tuple[float, Any]]:
        world = World(doc, start=START, seed=seed)
        world.advance_by(36000)
        return [(e["t"], e["instance_id"]) for e in world.report()["spot"]["eviction_log"]]

    first = evicted(1)
    assert first == evicted(1) and first != evicted(2)
    assert 1 <= len(first) <= 4  # at most the four instances there are; none replaced


# --- over HTTPS: the SDK, simulateEviction and the Event Grid control endpoint ------------------------------------


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    doc = spot_doc(group={"eviction_policy": "Delete", "max_price": 0.5})
    doc["node_groups"][1]["initial"] = 1
    return sandbox_factory(doc, clock=ManualClock(SANDBOX_START))


def test_the_sdk_reads_a_spot_scale_set(still: SandboxServer) -> None:
    profile = compute_client(still).virtual_machine_scale_sets.get(RG, POOL).virtual_machine_profile
    assert (profile.priority, profile.eviction_policy, profile.billing_profile.max_price) == ("Spot", "Delete", 0.5)


def test_simulate_eviction_announces_then_evicts_30_seconds_later(still: SandboxServer) -> None:
    compute = compute_client(still, retry_total=0)
    compute.virtual_machine_scale_set_vms.simulate_eviction(RG, POOL, "1")
    events = requests.get(f"{still.url}/sandbox/eventgrid/events?after=0", verify=str(still.ca_path), timeout=10).json()
    ((entry),) = events["events"]
    assert entry["seq"] == 1 and entry["event"]["data"]["Resources"] == [f"{POOL}_1"]
    assert entry["event"]["data"]["NotBefore"] == "Mon, 07 Jan 2030 09:00:30 GMT"
    later = requests.get(f"{still.url}/sandbox/eventgrid/events?after=1", verify=str(still.ca_path), timeout=10)
    assert later.json() == {"events": []}
    still.clock.advance(30)  # type: ignore[attr-defined]
    assert [v.instance_id for v in compute.virtual_machine_scale_set_vms.list(RG, POOL)] == ["0"]
    with pytest.raises(HttpResponseError) as caught:  # a Regular VM cannot be evicted
        compute.virtual_machine_scale_set_vms.simulate_eviction(RG, REGULAR, "0")
    assert caught.value.status_code == 409 and caught.value.error.code == "OperationNotAllowed"
    bad = requests.get(f"{still.url}/sandbox/eventgrid/events?after=x", verify=str(still.ca_path), timeout=10)
    assert bad.status_code == 400


def test_simulate_eviction_of_a_flexible_member_goes_through_its_vm_route() -> None:
    world = make(spot_doc(group={"orchestration": "Flexible"}))
    group = group_of(world)
    vm_name = world.instances(group)[0].vm_name
    path = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{vm_name}/simulateEviction"
    response = arm_api.handle(world, Request.build("POST", path, "api-version=2024-07-01", ARM_AUTH))
    assert response.status == 204 and response.body == b""
    again = arm_api.handle(world, Request.build("POST", path, "api-version=2024-07-01", ARM_AUTH))
    assert again.status == 409  # already being evicted
    uniform_route = arm_api.handle(world, Request.build("POST", f"{VMSS}/{POOL}/virtualMachines/0/simulateEviction",
                                                        "api-version=2024-07-01", ARM_AUTH))
    assert uniform_route.status == 400
    world.advance_by(30)
    assert [i.power for i in world.instances(group)] == ["deallocated", "running"]
    assert world.report()["spot"]["eviction_log"][0]["instance_id"] == vm_name


# --- Spot availability: Spot Placement Score levels over the run ---------------------------------------------


def availability(*, step: str = "10m", initial: str = "High", notice: bool = True,
                 high: dict[str, Any] | None = None, medium: dict[str, Any] | None = None,
                 low: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `spot_availability` entry for pool-a: a chain over High, Medium, Low (moving every step by default)."""
    return {"scale_set": POOL, "step": step, "initial": initial, "notice": notice, "levels": {
        "High": {"next": {"High": 0.5, "Medium": 0.5}, **(high or {})},
        "Medium": {"next": {"High": 0.3, "Medium": 0.3, "Low": 0.4}, **(medium or {})},
        "Low": {"next": {"Medium": 0.5, "Low": 0.5}, **(low or {})},
    }}


def levels_over(doc: dict[str, Any], seed: int, seconds: float) -> list[tuple[float, str]]:
    world = World(doc, start=START, seed=seed)
    world.advance_by(seconds)
    entry, = world.report()["spot"]["availability"]
    return [(change["t"], change["level"]) for change in entry["levels"]]


def test_availability_levels_change_every_step_from_the_seed_alone() -> None:
    doc = spot_doc(duration="10h", spot_availability=[availability()])
    first = levels_over(doc, 1, 36000)
    assert first == levels_over(doc, 1, 36000) and first != levels_over(doc, 2, 36000)
    assert first[0] == (0.0, "High") and len(first) > 5
    assert all(t % 600 == 0 for t, _ in first)  # changes happen on steps only
    assert all(a != b for (_, a), (_, b) in zip(first, first[1:], strict=False))  # a change is a change
    moves = {(a, b) for (_, a), (_, b) in zip(first, first[1:], strict=False)}
    assert ("High", "Low") not in moves  # the chain has no such move
    # The autoscaler's doings draw nothing from the chain: the same levels with a workload that grows the set.
    busy = spot_doc(duration="10h", spot_availability=[availability()], workloads=[job("w", 8, cpu="3")])
    assert levels_over(busy, 1, 36000) == first


def test_the_report_counts_the_seconds_at_each_level() -> None:
    world = World(spot_doc(duration="10h", spot_availability=[availability()]), start=START, seed=3)
    world.advance_by(36000)
    entry, = world.report()["spot"]["availability"]
    assert sum(entry["seconds_at"].values()) == pytest.approx(world.t)
    changes = entry["levels"] + [{"t": world.t, "level": ""}]
    for level in ("High", "Medium", "Low"):
        expected = sum(b["t"] - a["t"] for a, b in zip(changes, changes[1:], strict=False) if a["level"] == level)
        assert entry["seconds_at"][level] == pytest.approx(expected)


@pytest.mark.parametrize(("level", "limit", "code", "refused_at_once"), [
    ("Low", 0, "SkuNotAvailable", True),
    ("Low", 2, "SkuNotAvailable", True),
    ("Medium", 3, "AllocationFailed", False),
])
def test_a_level_caps_spot_capacity_with_its_code(level: str, limit: int, code: str, refused_at_once: bool) -> None:
    caps = {level.lower(): {"available": limit, "code": code}}
    # Held at `level` (its only move is to itself): increases within the cap go, beyond it fail with its code.
    entry = availability(initial=level, **caps)
    entry["levels"][level]["next"] = {level: 1.0}
    world = make(spot_doc(initial=min(2, limit), spot_availability=[entry]))
    held = min(2, limit)
    if limit > held:
        assert operation_of(world, patch_capacity(world, limit)).status == "InProgress"
        held = limit
    response = patch_capacity(world, held + 1)
    if refused_at_once:
        assert response.status == 409 and response.json()["error"]["code"] == code
    else:
        assert response.status == 200
        op = operation_of(world, response)
        world.advance_by(5)
        assert (op.status, op.error_code) == ("Failed", code)
    assert group_of(world).capacity == held
    spot = world.report()["spot"]
    assert spot["capacity_failures"] == {code: 1}
    assert spot["availability"][0]["refusals_by_level"] == {level: 1}


def test_high_without_a_cap_refuses_nothing() -> None:
    entry = availability()
    entry["levels"]["High"]["next"] = {"High": 1.0}
    world = make(spot_doc(spot_availability=[entry]))
    assert operation_of(world, patch_capacity(world, 40)).status == "InProgress"
    assert world.report()["spot"]["capacity_failures"] == {}


@pytest.mark.parametrize("level", ["High", "Low"])
def test_evictions_follow_the_level_rate(level: str) -> None:
    # Ten instances held at one level for 10 hours; only Low evicts (a high rate), High evicts none.
    entry = availability(initial=level, high={"eviction_rate_per_hour": 0.0}, low={"eviction_rate_per_hour": 0.5})
    entry["levels"][level]["next"] = {level: 1.0}
    doc = spot_doc(initial=10, group={"eviction_policy": "Delete", "max": 10}, duration="10h",
                   spot_availability=[entry])
    world = World(doc, start=START, seed=4)
    world.advance_by(36000)
    spot = world.report()["spot"]
    if level == "High":
        assert spot["evictions"] == 0 and spot["notices_published"] == 0
    else:  # each of the 10 lives about 2 h: nearly all gone in 10 h, each announced first
        assert 7 <= spot["evictions"] <= 10 and spot["notices_published"] == spot["evictions"]
        assert world.next_notice_at() is not None  # the process goes on


@pytest.mark.parametrize(("entry", "path", "problem"), [
    ({"step": "0s"}, "$.spot_availability[0].step", "above 0"),
    ({"initial": "Gone"}, "$.spot_availability[0].initial", "not a level of this entry"),
    ({"levels": {"Great": {"next": {"Great": 1.0}}}}, "$.spot_availability[0].levels", "Spot Placement Score level"),
    ({"levels": {"High": {"next": {"High": 0.7}}}}, "$.spot_availability[0].levels.High.next", "sum to 1"),
    ({"levels": {"High": {"next": {"Low": 1.0}}}}, "$.spot_availability[0].levels.High.next", "not a level"),
    ({"levels": {"High": {"next": {"High": 1.0}, "code": "AllocationFailed"}}},
     "$.spot_availability[0].levels.High.code", "only with available"),
    ({"levels": {"High": {"next": {"High": 1.0}, "eviction_rate_per_hour": -1}}},
     "$.spot_availability[0].levels.High.eviction_rate_per_hour", "from 0"),
])
def test_bad_availability_fields_are_reported_with_their_path(entry: dict[str, Any], path: str, problem: str) -> None:
    bad = availability() | entry
    with pytest.raises(ScenarioError) as caught:
        load_scenario(spot_doc(spot_availability=[bad]))
    assert caught.value.path == path and problem in caught.value.problem


def test_availability_needs_a_spot_set() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(spot_doc(spot_availability=[availability() | {"scale_set": REGULAR}]))
    assert "Regular scale set" in caught.value.problem
