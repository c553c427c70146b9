"""Flexible orchestration scale sets: members are plain VMs, NICs standalone (sandbox.api.flexible), over HTTPS and the SDKs."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute.models import (
    Sku,
    VirtualMachineScaleSetUpdate,
    VirtualMachineScaleSetVMInstanceIDs,
    VirtualMachineScaleSetVMInstanceRequiredIDs,
)
from azure.mgmt.network import NetworkManagementClient
from kubernetes import client as k8s

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import SHUTDOWN_TAINT, TO_BE_DELETED_TAINT, World
from sandbox.world.compute import InstanceSim
from sandbox.world.identity import ARM_AUDIENCE
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client, kube_api_client, sandbox_credential
from tests.sandbox.helpers import POOL, RG, scenario

FLEX = "pool-flex"
FAST = 600.0  # sim seconds per wall second: a 60 s boot takes 0.1 s
SUB = "11111111-2222-3333-4444-555555555555"
VMSS_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{FLEX}"
VM_PREFIX = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/"
MEMBERS = f"'virtualMachineScaleSet/id' eq '{VMSS_ID}'"
COMPUTE_API = "2026-04-01"  # what azure-mgmt-compute 39.0.0 sends for virtual_machines.*
NETWORK_API = "2026-03-01"  # what azure-mgmt-network 33.1.0 sends for network_interfaces.list/get
VM_NAME = re.compile(rf"^{FLEX}_[0-9a-f]{{8}}$")
COMPUTER_NAME = re.compile(rf"^{FLEX}[0-9A-F]{{6}}$")


def with_flex(flavour: str = "aks-engine", initial: int = 2, **overrides: Any) -> dict[str, Any]:
    """helpers' Uniform pool-a (1 node) plus a Flexible pool in the same resource group, zones 1 and 2."""
    doc = scenario(flavour=flavour, **overrides)
    flex = copy.deepcopy(doc["node_groups"][0])
    flex.update(name=FLEX, orchestration="Flexible", initial=initial, zones=["1", "2"], labels={"pool": "flex"})
    doc["node_groups"].append(flex)
    return doc


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(with_flex(arm_throttling=True), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def fast(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(with_flex(duration="48h"), speed=FAST)


def members(server: SandboxServer) -> list[InstanceSim]:
    world = server.world
    return world.instances(world.scale_set(SUB, RG, FLEX))


def arm(server: SandboxServer, method: str, path: str, api_version: str = COMPUTE_API, **params: str) -> requests.Response:
    """A raw ARM call under the resource group (or an absolute nextLink), with a fresh token."""
    url = path if path.startswith("https://") else f"{server.url}/subscriptions/{SUB}/resourceGroups/{RG}/providers/{path}"
    query = None if path.startswith("https://") else {"api-version": api_version, **params}
    token = server.world.identity.issue(ARM_AUDIENCE).token
    return requests.request(method, url, params=query, headers={"Authorization": f"Bearer {token}"},
                            verify=str(server.ca_path), timeout=10)


def network_client(server: SandboxServer) -> NetworkManagementClient:
    return NetworkManagementClient(sandbox_credential(server), server.subscription_id, base_url=server.url,
                                   connection_verify=str(server.ca_path))


def grow(capacity: int) -> VirtualMachineScaleSetUpdate:
    return VirtualMachineScaleSetUpdate(sku=Sku(name="Standard_D4s_v5", tier="Standard", capacity=capacity))


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def flex_counts(server: SandboxServer) -> dict[str, Any]:
    return server.world.state()["groups"][f"{RG}/{FLEX}"]


# ---------------------------------------------------------------------------- the scenario field


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("flexible", "'flexible' is not an orchestration mode (allowed: Uniform, Flexible)"),
        (1, "a number is not an orchestration mode (allowed: Uniform, Flexible)"),
    ],
)
def test_orchestration_is_validated_naming_the_allowed_values(value: Any, problem: str) -> None:
    doc = with_flex()
    doc["node_groups"][1]["orchestration"] = value
    with pytest.raises(ScenarioError) as caught:
        load_scenario(doc)
    assert caught.value.path == "$.node_groups[1].orchestration" and caught.value.problem == problem


def test_a_flexible_scale_set_name_leaves_room_for_its_vm_names() -> None:
    doc = with_flex()
    doc["node_groups"][1].update(name="f" * 56, computer_name_prefix="flex")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(doc)
    assert caught.value.path == "$.node_groups[1].name" and "at most 55 characters" in caught.value.problem
    doc["node_groups"][1]["name"] = "f" * 55
    assert load_scenario(doc).node_groups[1].orchestration == "Flexible"
    assert load_scenario(scenario()).node_groups[0].orchestration == "Uniform"  # the default


def test_vm_and_computer_names_are_seeded_and_leave_uniform_instances_alone() -> None:
    def names(seed: int) -> list[tuple[str, str]]:
        world = World(with_flex(), seed=seed, start=SANDBOX_START)
        return [(i.vm_name, i.computer_name) for i in world.instances(world.scale_set(SUB, RG, FLEX))]

    assert names(0) == names(0) and names(0) != names(1)
    assert all(VM_NAME.match(vm) and COMPUTER_NAME.match(host) for vm, host in names(0))
    world = World(with_flex(), seed=0, start=SANDBOX_START)
    (uniform,) = world.instances(world.scale_set(SUB, RG, POOL))
    assert (uniform.vm_name, uniform.arm_id, uniform.computer_name) == ("", "0", "pool-a000000")


# ---------------------------------------------------------------------------- the scale set and its members


def test_the_scale_set_is_flexible(still: SandboxServer) -> None:
    compute = compute_client(still)
    flex = compute.virtual_machine_scale_sets.get(RG, FLEX)
    assert flex.orchestration_mode == "Flexible" and flex.single_placement_group is False
    assert flex.platform_fault_domain_count == 1 and flex.sku.capacity == 2 and flex.upgrade_policy is None
    assert flex.virtual_machine_profile.os_profile.computer_name_prefix == FLEX
    assert flex.virtual_machine_profile.network_profile.network_api_version == "2020-11-01"
    assert flex.tags["cluster-autoscaler-enabled"] == "true" and flex.zones == ["1", "2"]
    listed = {s.name: s.orchestration_mode for s in compute.virtual_machine_scale_sets.list(RG)}
    assert listed == {POOL: "Uniform", FLEX: "Flexible"}


def test_members_are_listed_by_their_scale_set_id(still: SandboxServer) -> None:
    compute = compute_client(still)
    vms = list(compute.virtual_machines.list(RG, filter=MEMBERS))
    assert [vm.name for vm in vms] == [i.vm_name for i in members(still)]
    for vm, inst in zip(vms, members(still), strict=True):
        assert VM_NAME.match(vm.name) and vm.id == VM_PREFIX + vm.name and vm.type == "Microsoft.Compute/virtualMachines"
        assert vm.virtual_machine_scale_set.id == VMSS_ID and vm.location == "westeurope"
        assert COMPUTER_NAME.match(vm.os_profile.computer_name) and vm.os_profile.computer_name == inst.computer_name
        assert vm.hardware_profile.vm_size == "Standard_D4s_v5" and vm.provisioning_state == "Succeeded"
        (nic,) = vm.network_profile.network_interfaces
        assert nic.primary is True and nic.id.endswith(f"/providers/Microsoft.Network/networkInterfaces/{vm.name}-nic")
        assert vm.instance_view is None  # only when expanded
    assert [vm.zones for vm in vms] == [["1"], ["2"]]
    expanded = list(compute.virtual_machines.list(RG, filter=MEMBERS, expand="instanceView"))
    assert [[s.code for s in vm.instance_view.statuses] for vm in expanded] == [
        ["ProvisioningState/succeeded", "PowerState/running"]] * 2
    assert [vm.instance_view.computer_name for vm in expanded] == [vm.os_profile.computer_name for vm in vms]
    # Without a filter: every VM of the resource group, which holds no Uniform instance (those are not plain VMs).
    assert [vm.name for vm in compute.virtual_machines.list(RG)] == [vm.name for vm in vms]
    uniform = f"'virtualMachineScaleSet/id' eq '{VMSS_ID.replace(FLEX, POOL)}'"
    assert list(compute.virtual_machines.list(RG, filter=uniform)) == []
    assert still.world.report()["api_calls"]["breakdown"]["arm"]["LIST virtualMachines (flex)"] == 4


def test_the_instance_view_needs_the_filter_and_the_filter_its_one_form(still: SandboxServer) -> None:
    compute = compute_client(still, retry_total=0)
    with pytest.raises(HttpResponseError) as caught:
        list(compute.virtual_machines.list(RG, expand="instanceView"))
    assert caught.value.status_code == 400 and caught.value.error.target == "$expand"
    with pytest.raises(HttpResponseError) as caught:
        list(compute.virtual_machines.list(RG, filter="name eq 'x'"))
    assert caught.value.status_code == 400 and caught.value.error.target == "$filter"
    with pytest.raises(ResourceNotFoundError) as missing:
        list(compute.virtual_machines.list("rg-missing", filter=MEMBERS))
    assert missing.value.error.code == "ResourceGroupNotFound"


def test_member_lists_page_keeping_filter_and_expand(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(with_flex(arm_page_size=1, initial=3), clock=ManualClock(SANDBOX_START))
    first = arm(server, "GET", "Microsoft.Compute/virtualMachines", **{"$filter": MEMBERS, "$expand": "instanceView"}).json()
    assert len(first["value"]) == 1 and first["value"][0]["properties"]["instanceView"]["statuses"]
    second = arm(server, "GET", first["nextLink"]).json()
    third = arm(server, "GET", second["nextLink"]).json()
    assert "nextLink" not in third and third["value"][0]["properties"]["instanceView"]
    assert [p["value"][0]["name"] for p in (first, second, third)] == [i.vm_name for i in members(server)]
    assert [vm.name for vm in compute_client(server).virtual_machines.list(RG, filter=MEMBERS)] == [
        i.vm_name for i in members(server)]


def test_one_member_by_name(still: SandboxServer) -> None:
    compute = compute_client(still)
    inst = members(still)[1]
    vm = compute.virtual_machines.get(RG, inst.vm_name)
    assert (vm.name, vm.vm_id, vm.os_profile.computer_name) == (inst.vm_name, inst.vm_id, inst.computer_name)
    assert vm.instance_view is None
    viewed = compute.virtual_machines.get(RG, inst.vm_name.upper(), expand="instanceView")  # names compare so
    assert viewed.name == inst.vm_name and viewed.instance_view.statuses[1].display_status == "VM running"
    with pytest.raises(ResourceNotFoundError) as caught:
        compute.virtual_machines.get(RG, f"{FLEX}_00000000")
    assert caught.value.error.code == "ResourceNotFound" and "Microsoft.Compute/virtualMachines/" in caught.value.error.message


def test_uniform_only_scale_set_calls_answer_as_on_flexible(still: SandboxServer) -> None:
    base = f"Microsoft.Compute/virtualMachineScaleSets/{FLEX}"
    listed = arm(still, "GET", f"{base}/virtualMachines")
    assert listed.status_code == 200
    assert listed.json()["value"] == [
        {"name": i.vm_name, "id": VM_PREFIX + i.vm_name, "instanceId": i.vm_name, "location": "westeurope"}
        for i in members(still)
    ]
    expanded = arm(still, "GET", f"{base}/virtualMachines", **{"$expand": "instanceView"})
    assert expanded.status_code == 400 and expanded.json()["error"] == {
        "code": "BadRequest",
        "message": f"Operation 'VirtualMachineScaleSets.virtualMachines.GET' is not allowed on Virtual Machine Scale Set '{FLEX}'.",
    }
    one = arm(still, "GET", f"{base}/virtualMachines/{members(still)[0].vm_name}")
    assert one.status_code == 400 and one.json()["error"]["message"] == "Virtual Machine Scale Set VM instanceId must be a number."
    assert arm(still, "GET", f"{base}/networkInterfaces").json() == {"value": []}
    assert arm(still, "GET", f"{base}/virtualMachines/{members(still)[0].vm_name}/networkInterfaces").status_code == 404
    # The Uniform pool next to it is untouched.
    assert arm(still, "GET", f"Microsoft.Compute/virtualMachineScaleSets/{POOL}/virtualMachines/0").json()["name"] == "pool-a_0"


# ---------------------------------------------------------------------------- growing, nodes


def test_growing_creates_vms_whose_nodes_register_with_vm_provider_ids(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    assert compute.virtual_machine_scale_sets.begin_update(RG, FLEX, grow(4)).result().sku.capacity == 4
    vms = list(compute.virtual_machines.list(RG, filter=MEMBERS))
    assert len(vms) == 4 and len({vm.name for vm in vms}) == 4 and all(VM_NAME.match(vm.name) for vm in vms)
    assert [vm.zones for vm in vms] == [["1"], ["2"], ["1"], ["2"]]
    wait_for(lambda: flex_counts(fast)["ready"] == 4)
    nodes = {n.spec.provider_id: n for n in k8s.CoreV1Api(kube_api_client(fast)).list_node().items}
    for vm in vms:
        node = nodes[f"azure://{vm.id}"]
        assert node.metadata.name == vm.os_profile.computer_name.lower()
        assert node.metadata.labels["pool"] == "flex" and node.metadata.labels["agentpool"] == FLEX
    assert fast.world.report()["instances_created_by_group"][f"{RG}/{FLEX}"] == 2


def test_a_scale_up_failure_creates_no_vm(fast: SandboxServer) -> None:
    fast.world.fail_next_scale_up(FLEX, code="QuotaExceeded")
    compute = compute_client(fast)
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_update(RG, FLEX, grow(5)).result()
    assert "QuotaExceeded" in str(caught.value)
    assert compute.virtual_machine_scale_sets.get(RG, FLEX).sku.capacity == 2
    assert len(list(compute.virtual_machines.list(RG, filter=MEMBERS))) == 2


@pytest.mark.parametrize(
    ("flavour", "name", "provider_id"),
    [
        ("k3s", lambda i: i.computer_name.lower(), lambda i: f"k3s://{i.computer_name.lower()}"),
        ("kubeadm", lambda i: None, lambda i: None),
    ],
)
def test_other_flavours_name_flexible_nodes_as_they_name_uniform_ones(flavour: str, name: Any, provider_id: Any) -> None:
    world = World(with_flex(flavour), start=SANDBOX_START)
    nodes = {n["status"]["addresses"][0]["address"]: n for n in world.k8s_list("nodes")}
    for inst in world.instances(world.scale_set(SUB, RG, FLEX)):
        node = nodes[inst.private_ip]
        assert node["metadata"]["name"] == (name(inst) or inst.node_name)
        assert node["spec"].get("providerID") == provider_id(inst)
    if flavour == "kubeadm":
        assert sorted(i.node_name for i in world.instances(world.scale_set(SUB, RG, FLEX))) == [
            "worker-pool-flex-2", "worker-pool-flex-3"]


# ---------------------------------------------------------------------------- deleting


def test_deleting_members_through_the_scale_set_by_vm_name(fast: SandboxServer) -> None:
    compute = compute_client(fast, retry_total=0)
    first, second = (i.vm_name for i in members(fast))
    assert compute.virtual_machine_scale_sets.begin_delete_instances(
        RG, FLEX, VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=[first])).result() is None
    assert [vm.name for vm in compute.virtual_machines.list(RG, filter=MEMBERS)] == [second]
    assert compute.virtual_machine_scale_sets.get(RG, FLEX).sku.capacity == 1
    with pytest.raises(HttpResponseError) as caught:  # gone already: ARM refuses the whole request
        compute.virtual_machine_scale_sets.begin_delete_instances(
            RG, FLEX, VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=[first]))
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"
    arm_calls = fast.world.report()["api_calls"]["breakdown"]["arm"]
    assert arm_calls["instances_deleted"] == {f"{FLEX}/{first}": 1}
    assert arm_calls["instance_deletes_refused"] == {f"{FLEX}/{first}": 1}


def test_deleting_a_member_vm_lowers_capacity_and_its_node_goes(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    gone, kept = members(fast)
    assert compute.virtual_machines.begin_delete(RG, gone.vm_name).result() is None
    assert [vm.name for vm in compute.virtual_machines.list(RG, filter=MEMBERS)] == [kept.vm_name]
    assert compute.virtual_machine_scale_sets.get(RG, FLEX).sku.capacity == 1  # modelled so: unverified on Azure
    wait_for(lambda: not any(n["metadata"]["name"] == gone.node_name for n in fast.world.k8s_list("nodes")))
    again = arm(fast, "DELETE", f"Microsoft.Compute/virtualMachines/{gone.vm_name}")
    assert again.status_code == 204 and again.content == b""  # ARM's answer to deleting what is not there
    report = fast.world.report()
    assert report["api_calls"]["breakdown"]["arm"]["DELETE virtualMachines"] == 2
    assert report["api_calls"]["breakdown"]["arm"]["instances_deleted"] == {f"{FLEX}/{gone.vm_name}": 1}


def test_a_vm_delete_answers_202_with_an_operation_and_spends_the_vms_bucket(still: SandboxServer) -> None:
    inst = members(still)[0]
    response = arm(still, "DELETE", f"Microsoft.Compute/virtualMachines/{inst.vm_name}")
    assert response.status_code == 202 and response.content == b""
    assert "/operations/" in response.headers["Azure-AsyncOperation"] and response.headers["Retry-After"] == "10"
    assert response.headers["Location"].endswith("&monitor=true")
    assert response.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/DeleteVM3Min;11"
    assert inst.state == "Deleting" and flex_counts(still)["deleting"] == 1 and flex_counts(still)["target"] == 1
    operation = arm(still, "GET", response.headers["Azure-AsyncOperation"])
    assert operation.json()["status"] == "InProgress"
    still.clock.advance(30)  # type: ignore[attr-defined]  # helpers' delete_delay
    assert arm(still, "GET", response.headers["Azure-AsyncOperation"]).json()["status"] == "Succeeded"


def test_scale_down_order_names_flexible_members_by_vm_name() -> None:
    world = World(with_flex(), start=SANDBOX_START)
    inst = world.instances(world.scale_set(SUB, RG, FLEX))[0]
    node = world.k8s_get("nodes", "", inst.node_name)
    node["spec"]["unschedulable"] = True
    node["spec"].setdefault("taints", []).append({"key": TO_BE_DELETED_TAINT, "value": "1", "effect": "NoSchedule"})
    world.k8s_replace("nodes", "", inst.node_name, node)
    world.delete_instances(world.scale_set(SUB, RG, FLEX), [inst.vm_name])
    world.advance_by(60)
    report = world.report()
    (entry,) = report["scale_down_order"]
    assert (entry["node"], entry["group"], entry["instance_id"]) == (inst.node_name, f"{RG}/{FLEX}", inst.vm_name)
    assert report["nodes_by_group"][f"{RG}/{FLEX}"]["target"] == 1 and report["node_seconds_by_group"][f"{RG}/{FLEX}"] == 60 + 30


# ---------------------------------------------------------------------------- deallocating and starting


def power(compute: Any, vm_name: str) -> tuple[str, list[str]]:
    vm = compute.virtual_machines.get(RG, vm_name, expand="instanceView")
    return vm.provisioning_state, [s.code for s in vm.instance_view.statuses]


def test_deallocating_and_starting_one_vm(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    inst, other = members(fast)
    assert compute.virtual_machines.begin_deallocate(RG, inst.vm_name).result() is None
    assert power(compute, inst.vm_name) == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/deallocated"])
    assert power(compute, other.vm_name)[1][1] == "PowerState/running"
    assert compute.virtual_machine_scale_sets.get(RG, FLEX).sku.capacity == 2  # still a member
    node = fast.world.k8s_get("nodes", "", inst.node_name)
    assert SHUTDOWN_TAINT in [t["key"] for t in node["spec"]["taints"]]
    assert flex_counts(fast)["deallocated"] == 1

    assert compute.virtual_machines.begin_start(RG, inst.vm_name).result() is None
    assert power(compute, inst.vm_name) == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"])
    wait_for(lambda: flex_counts(fast)["ready"] == 2)
    arm_calls = fast.world.report()["api_calls"]["breakdown"]["arm"]
    assert (arm_calls["POST virtualMachines/deallocate"], arm_calls["POST virtualMachines/start"]) == (1, 1)
    assert arm_calls["instances_deallocated"] == arm_calls["instances_started"] == {f"{FLEX}/{inst.vm_name}": 1}


def test_the_scale_sets_batch_deallocate_and_start_take_vm_names(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    inst = members(fast)[1]
    ids = VirtualMachineScaleSetVMInstanceIDs(instance_ids=[inst.vm_name])
    assert compute.virtual_machine_scale_sets.begin_deallocate(RG, FLEX, ids).result() is None
    assert power(compute, inst.vm_name)[1][1] == "PowerState/deallocated"
    assert compute.virtual_machine_scale_sets.begin_start(RG, FLEX, ids).result() is None
    assert power(compute, inst.vm_name)[1][1] == "PowerState/running"


def test_power_calls_on_missing_or_deleting_vms_are_refused(still: SandboxServer) -> None:
    compute = compute_client(still, retry_total=0)
    with pytest.raises(ResourceNotFoundError):
        compute.virtual_machines.begin_deallocate(RG, f"{FLEX}_00000000")
    inst = members(still)[0]
    compute.virtual_machines.begin_delete(RG, inst.vm_name, polling=False)
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machines.begin_start(RG, inst.vm_name)
    assert caught.value.status_code == 409 and caught.value.error.code == "OperationNotAllowed"
    assert f"on VM '{inst.vm_name}' since it is being deleted" in caught.value.error.message
    hibernate = arm(still, "POST", f"Microsoft.Compute/virtualMachines/{members(still)[1].vm_name}/deallocate", hibernate="true")
    assert hibernate.status_code == 400 and hibernate.json()["error"]["target"] == "hibernate"


# ---------------------------------------------------------------------------- NICs


def test_standalone_nics_give_every_node_its_vm(still: SandboxServer) -> None:
    network = network_client(still)
    nics = list(network.network_interfaces.list(RG))
    by_ip = {a.address: n.metadata.name for n in k8s.CoreV1Api(kube_api_client(still)).list_node().items
             for a in n.status.addresses if a.type == "InternalIP"}
    assert len(nics) == 2  # the Uniform pool's NIC is a scale-set NIC, not a standalone one
    for nic, inst in zip(nics, members(still), strict=True):
        assert nic.name == f"{inst.vm_name}-nic" and nic.primary is True
        assert nic.virtual_machine.id == VM_PREFIX + inst.vm_name
        (config,) = nic.ip_configurations
        assert config.primary is True and config.private_ip_address == inst.private_ip
        assert by_ip[inst.private_ip] == inst.node_name
        assert network.network_interfaces.get(RG, nic.name).id == nic.id
    vm = compute_client(still).virtual_machines.get(RG, members(still)[0].vm_name)
    assert vm.network_profile.network_interfaces[0].id == nics[0].id
    with pytest.raises(ResourceNotFoundError):
        network.network_interfaces.get(RG, "missing-nic")
    arm_calls = still.world.report()["api_calls"]["breakdown"]["arm"]
    assert (arm_calls["LIST networkInterfaces (flex)"], arm_calls["GET networkInterfaces (flex)"]) == (1, 3)


def test_the_nic_list_pages_and_is_not_throttled(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(with_flex(arm_page_size=1, initial=3, arm_throttling=True), clock=ManualClock(SANDBOX_START))
    first = arm(server, "GET", "Microsoft.Network/networkInterfaces", NETWORK_API)
    assert "x-ms-ratelimit-remaining-resource" not in first.headers
    assert f"api-version={NETWORK_API}" in first.json()["nextLink"]
    ips = [nic.ip_configurations[0].private_ip_address for nic in network_client(server).network_interfaces.list(RG)]
    assert ips == [i.private_ip for i in members(server)]


# ---------------------------------------------------------------------------- throttling and faults


def test_member_calls_spend_per_vm_and_per_scale_set_budgets(still: SandboxServer) -> None:
    first, second = (i.vm_name for i in members(still))
    listed = arm(still, "GET", "Microsoft.Compute/virtualMachines", **{"$filter": MEMBERS})
    assert listed.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/HighCostGetVMScaleSet3Min;29"
    unfiltered = arm(still, "GET", "Microsoft.Compute/virtualMachines")
    assert unfiltered.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/HighCostGetVMScaleSet3Min;29"
    for remaining in (35, 34):
        got = arm(still, "GET", f"Microsoft.Compute/virtualMachines/{first}")
        assert got.headers["x-ms-ratelimit-remaining-resource"] == f"Microsoft.Compute/LowCostGet3Min;{remaining}"
    other = arm(still, "GET", f"Microsoft.Compute/virtualMachines/{second}")
    assert other.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/LowCostGet3Min;35"
    started = arm(still, "POST", f"Microsoft.Compute/virtualMachines/{second}/start")
    assert started.status_code == 202
    assert started.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/PutVM3Min;11"
    for _ in range(12):  # the VM's delete/deallocate bucket holds 12
        assert arm(still, "POST", f"Microsoft.Compute/virtualMachines/{first}/deallocate").status_code == 202
    refused = arm(still, "POST", f"Microsoft.Compute/virtualMachines/{first}/deallocate")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "15"
    assert arm(still, "POST", f"Microsoft.Compute/virtualMachines/{second}/deallocate").status_code == 202
    assert still.world.report()["api_calls"]["arm_throttled"] == 1


def test_faults_hit_member_calls_through_their_scale_set_name(still: SandboxServer) -> None:
    still.world.inject_fault(("arm", "DELETE", FLEX), status=409, code="Conflict", message="busy")
    still.world.inject_fault(("arm", "GET", "networkInterfaces"), status=503)
    inst = members(still)[0]
    refused = arm(still, "DELETE", f"Microsoft.Compute/virtualMachines/{inst.vm_name}")
    assert refused.status_code == 409 and refused.json()["error"] == {"code": "Conflict", "message": "busy"}
    assert arm(still, "GET", "Microsoft.Network/networkInterfaces", NETWORK_API).status_code == 503
    assert arm(still, "DELETE", f"Microsoft.Compute/virtualMachines/{inst.vm_name}").status_code == 202  # once only
    assert still.world.report()["api_calls"]["faults_triggered"] == 2


def test_percentage_cpu_splits_flexible_members_by_vm_name(still: SandboxServer) -> None:
    response = arm(still, "GET", f"Microsoft.Compute/virtualMachineScaleSets/{FLEX}/providers/Microsoft.Insights/metrics",
                   "2023-10-01", metricnames="Percentage CPU", **{"$filter": "VMName eq '*'"})
    names = [s["metadatavalues"][0]["value"] for s in response.json()["value"][0]["timeseries"]]
    assert names == [i.vm_name for i in members(still)]


def test_a_world_with_flexible_groups_reports(fast: SandboxServer) -> None:
    compute_client(fast).virtual_machine_scale_sets.begin_update(RG, FLEX, grow(3)).result()
    wait_for(lambda: flex_counts(fast)["ready"] == 3)
    report = fast.world.report()
    assert report["nodes_by_group"][f"{RG}/{FLEX}"]["ready"] == 3 and report["nodes_max"] == 4
    assert set(report["node_seconds_by_group"]) == {f"{RG}/{POOL}", f"{RG}/{FLEX}"}
    assert datetime.fromisoformat(report["now"]) > SANDBOX_START.astimezone(UTC)
