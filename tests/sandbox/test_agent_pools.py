"""AKS agent pools in the sandbox, driven through azure-mgmt-containerservice's ContainerServiceClient, unchanged."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute.models import Sku, VirtualMachineScaleSetUpdate
from azure.mgmt.containerservice import ContainerServiceClient
from azure.mgmt.containerservice.models import AgentPoolDeleteMachinesParameter
from kubernetes import client as k8s

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.model.agent_pools import resource_name_suffix
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client, kube_api_client, sandbox_credential
from tests.sandbox.helpers import scenario

FAST = 600.0  # sim seconds per wall second: a 60 s boot takes 0.1 s
AKS_RG = "rg-test-cluster"  # the server's default resource group of the managed cluster (rg-<cluster_name>)
CLUSTER = "test-cluster"
NODE_RG = f"MC_{AKS_RG}_{CLUSTER}_westeurope"
SUFFIX = resource_name_suffix("11111111-2222-3333-4444-555555555555", CLUSTER)
GPU_VMSS = f"aks-gpu-{SUFFIX}-vmss"
SYS_VMSS = f"aks-sys-{SUFFIX}-vmss"

GPU_POOL: dict[str, Any] = {
    "vm_size": "Standard_NC4as_T4_v3",
    "allocatable": {"cpu": "3860m", "memory": "24.5Gi", "nvidia.com/gpu": 1},
    "min": 0, "max": 5, "initial": 1, "zones": ["1", "2"],
    "labels": {"kubernetes.azure.com/accelerator": "nvidia"},
    "agent_pool": {"name": "gpu", "mode": "User", "enable_auto_scaling": False, "min_count": None, "max_count": None,
                   "tags": {"team": "ml"}, "node_labels": {"workload": "gpu"},
                   "node_taints": ["nvidia.com/gpu=true:NoSchedule"]},
}
SYS_POOL: dict[str, Any] = {
    "vm_size": "Standard_D2s_v5", "allocatable": {"cpu": "1900m", "memory": "5.5Gi"}, "initial": 2, "autoscaled": False,
    "agent_pool": {"name": "sys", "mode": "System", "enable_auto_scaling": True, "min_count": 1, "max_count": 3},
}


def aks_doc(gpu: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """The helpers' scenario (one plain scale set in rg-test) plus a GPU User pool and an autoscaled System pool."""
    doc = scenario(**overrides)
    doc["node_groups"] += [copy.deepcopy(gpu or GPU_POOL), copy.deepcopy(SYS_POOL)]
    return doc


def aks_client(server: SandboxServer, **kwargs: Any) -> ContainerServiceClient:
    return ContainerServiceClient(sandbox_credential(server), server.subscription_id, base_url=server.url,
                                  connection_verify=str(server.ca_path), **kwargs)


def arm_calls(server: SandboxServer) -> dict[str, Any]:
    return server.world.report()["api_calls"]["breakdown"]["arm"]


def pool_nodes(server: SandboxServer, pool: str) -> list[Any]:
    core = k8s.CoreV1Api(kube_api_client(server))
    return sorted(core.list_node(label_selector=f"agentpool={pool}").items, key=lambda n: n.metadata.name)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(aks_doc(), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def fast(sandbox_factory: SandboxFactory) -> SandboxServer:
    # A long duration: at this speed the default 2 h would freeze the world after 12 wall seconds.
    return sandbox_factory(aks_doc(duration="48h"), speed=FAST)


# --- the scenario ------------------------------------------------------------------------------------------


def test_a_pool_is_a_scale_set_named_and_labelled_as_aks_does() -> None:
    loaded = load_scenario(aks_doc())
    plain, gpu, sys_pool = loaded.node_groups
    assert plain.agent_pool is None and plain.name == "pool-a" and dict(plain.labels) == {"pool": "a"}
    assert (gpu.resource_group, gpu.name, gpu.computer_name_prefix) == (NODE_RG, GPU_VMSS, GPU_VMSS)
    assert len(SUFFIX) == 8 and SUFFIX.isdigit() and sys_pool.name == SYS_VMSS
    assert {k: gpu.labels[k] for k in ("agentpool", "kubernetes.azure.com/agentpool", "kubernetes.azure.com/mode",
                                       "kubernetes.azure.com/cluster", "workload", "kubernetes.azure.com/accelerator")} == {
        "agentpool": "gpu", "kubernetes.azure.com/agentpool": "gpu", "kubernetes.azure.com/mode": "user",
        "kubernetes.azure.com/cluster": NODE_RG, "workload": "gpu", "kubernetes.azure.com/accelerator": "nvidia"}
    assert sys_pool.labels["kubernetes.azure.com/mode"] == "system"
    assert [(t.key, t.value, t.effect) for t in gpu.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert gpu.tags["team"] == "ml" and gpu.tags["aks-managed-poolName"] == "gpu"
    assert gpu.agent_pool is not None and gpu.agent_pool.node_taints == ("nvidia.com/gpu=true:NoSchedule",)
    short = load_scenario(aks_doc({**GPU_POOL, "agent_pool": "gpu"})).node_groups[1]
    assert short.agent_pool is not None and (short.agent_pool.name, short.agent_pool.mode) == ("gpu", "User")
    chosen = aks_doc({**GPU_POOL, "name": "aks-gpu-12345678-vmss"})
    chosen["node_groups"][2]["name"] = "aks-sys-12345678-vmss"  # every pool carries the same digits
    assert [g.name for g in load_scenario(chosen).node_groups[1:]] == ["aks-gpu-12345678-vmss", "aks-sys-12345678-vmss"]


def pool_with(**changes: Any) -> dict[str, Any]:
    group = copy.deepcopy(GPU_POOL)
    for key, value in changes.items():
        if key.startswith("pool_"):
            group["agent_pool"][key[5:]] = value
        elif value is None:
            group.pop(key, None)
        else:
            group[key] = value
    return group


@pytest.mark.parametrize(
    ("group", "top", "path", "problem"),
    [
        (pool_with(pool_name="GPU"), {}, "$.node_groups[1].agent_pool.name", "is not an AKS pool name"),
        (pool_with(pool_name="averylongname1"), {}, "$.node_groups[1].agent_pool.name", "1-12 lowercase"),
        (pool_with(pool_mode="Spot"), {}, "$.node_groups[1].agent_pool.mode", "must be System or User"),
        (pool_with(pool_min_count=1), {}, "$.node_groups[1].agent_pool.min_count", "must be null when"),
        (pool_with(pool_enable_auto_scaling=True), {}, "$.node_groups[1].agent_pool.min_count", "required when"),
        (pool_with(pool_enable_auto_scaling=True, pool_min_count=3, pool_max_count=2), {},
         "$.node_groups[1].agent_pool.max_count", "at least min_count (3)"),
        (pool_with(pool_enable_auto_scaling=True, pool_min_count=2, pool_max_count=4), {},
         "$.node_groups[1].initial", "between agent_pool.min_count (2) and max_count (4)"),
        (pool_with(pool_mode="System", initial=0), {}, "$.node_groups[1].initial", "a System pool has at least one node"),
        (pool_with(pool_node_taints=["gpu:Sometimes"]), {}, "$.node_groups[1].agent_pool.node_taints[0]", "effect"),
        (pool_with(pool_node_taints=["NoSchedule"]), {}, "$.node_groups[1].agent_pool.node_taints[0]", "is not a taint"),
        (pool_with(pool_node_labels={"kubernetes.azure.com/foo": "x"}), {},
         "$.node_groups[1].agent_pool.node_labels.kubernetes.azure.com/foo", "AKS's own"),
        (pool_with(pool_scale_down_mode="Deallocate"), {}, "$.node_groups[1].agent_pool.scale_down_mode", "Delete only"),
        (pool_with(pool_colour="red"), {}, "$.node_groups[1].agent_pool.colour", "unknown field"),
        (pool_with(computer_name_prefix="gpu"), {}, "$.node_groups[1].computer_name_prefix", "leave it out"),
        (pool_with(name="gpu-pool"), {}, "$.node_groups[1].name", "aks-gpu-<8 digits>-vmss"),
        (pool_with(location="northeurope"), {}, "$.node_groups[1].location", "cluster's location"),
        (pool_with(orchestration="Flexible"), {}, "$.node_groups[1].orchestration", "Uniform"),
        (pool_with(), {"flavour": "k3s"}, "$.node_groups[1].agent_pool", "need flavour aks-engine"),
        (pool_with(pool_name="sys"), {}, "$.node_groups[2].agent_pool.name", "appears twice"),
        (pool_with(resource_group="MC_custom"), {}, "$.node_groups[2].resource_group", "one node resource group"),
        (pool_with(name="aks-gpu-12345678-vmss"), {}, "$.node_groups[2].name", "the cluster's digits"),
    ],
)
def test_bad_pools_are_reported_with_their_path(group: dict[str, Any], top: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(aks_doc(group, **top))
    assert caught.value.path == path
    assert problem in caught.value.problem


def test_a_world_without_pools_serves_an_empty_pool_list(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(scenario(), clock=ManualClock(SANDBOX_START))
    client = aks_client(server)
    assert list(client.agent_pools.list(AKS_RG, CLUSTER)) == []
    with pytest.raises(ResourceNotFoundError):
        client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    assert World(scenario()).agent_pools() == []


# --- reads ---------------------------------------------------------------------------------------------------


def test_pools_are_listed_and_read_with_their_tags_and_autoscaling(still: SandboxServer) -> None:
    client = aks_client(still)
    pools = {p.name: p for p in client.agent_pools.list(AKS_RG, CLUSTER)}
    assert sorted(pools) == ["gpu", "sys"]
    gpu = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    assert gpu.id == f"{still.aks_cluster_id}/agentPools/gpu"
    assert gpu.type == "Microsoft.ContainerService/managedClusters/agentPools"
    assert (gpu.count, gpu.vm_size, gpu.mode, gpu.type_properties_type) == (1, "Standard_NC4as_T4_v3", "User",
                                                                           "VirtualMachineScaleSets")
    assert gpu.enable_auto_scaling is False and gpu.min_count is None and gpu.max_count is None
    assert gpu.tags == {"team": "ml", "cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": CLUSTER,
                        "min": "0", "max": "5"}
    assert gpu.node_labels == {"workload": "gpu"} and gpu.node_taints == ["nvidia.com/gpu=true:NoSchedule"]
    assert gpu.provisioning_state == "Succeeded" and gpu.power_state.code == "Running"
    assert gpu.availability_zones == ["1", "2"] and gpu.os_type == "Linux" and gpu.scale_down_mode == "Delete"
    assert gpu.orchestrator_version == "1.31.2" and gpu.max_pods == 110 and gpu.e_tag
    sys_pool = pools["sys"]
    assert (sys_pool.mode, sys_pool.enable_auto_scaling, sys_pool.min_count, sys_pool.max_count, sys_pool.count) == (
        "System", True, 1, 3, 2)
    assert sys_pool.tags is None  # autoscaled: false and no tags of its own
    cluster = client.managed_clusters.get(AKS_RG, CLUSTER)
    assert cluster.location == "westeurope" and cluster.node_resource_group == NODE_RG
    assert sorted(p.name for p in cluster.agent_pool_profiles) == ["gpu", "sys"]
    calls = arm_calls(still)
    assert calls["LIST agentPools"] == 1 and calls["GET agentPools"] == 1 and calls["GET managedClusters"] == 1


def test_the_scale_set_and_nodes_behind_a_pool(still: SandboxServer) -> None:
    vmss = compute_client(still).virtual_machine_scale_sets.get(NODE_RG, GPU_VMSS)
    assert vmss.orchestration_mode == "Uniform" and vmss.sku.capacity == 1
    assert vmss.tags["team"] == "ml" and vmss.tags["aks-managed-poolName"] == "gpu"
    assert vmss.tags["cluster-autoscaler-enabled"] == "true"
    (node,) = pool_nodes(still, "gpu")
    assert node.metadata.name == f"{GPU_VMSS}000000"
    assert node.spec.provider_id == (f"azure:///subscriptions/{still.subscription_id}/resourceGroups/{NODE_RG}"
                                     f"/providers/Microsoft.Compute/virtualMachineScaleSets/{GPU_VMSS}/virtualMachines/0")
    labels = node.metadata.labels
    assert labels["kubernetes.azure.com/agentpool"] == "gpu" and labels["kubernetes.azure.com/mode"] == "user"
    assert labels["workload"] == "gpu" and labels["node.kubernetes.io/instance-type"] == "Standard_NC4as_T4_v3"
    assert labels["topology.kubernetes.io/zone"] == "westeurope-1"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert [n.metadata.name for n in pool_nodes(still, "sys")] == [f"{SYS_VMSS}000000", f"{SYS_VMSS}000001"]


def test_machines_map_node_names_to_vm_ids_and_ips(still: SandboxServer) -> None:
    client = aks_client(still)
    machines = list(client.machines.list(AKS_RG, CLUSTER, "sys"))
    nodes = {n.metadata.name: n for n in pool_nodes(still, "sys")}
    assert [m.name for m in machines] == sorted(nodes)
    vms = {v.id.lower(): v for v in compute_client(still).virtual_machine_scale_set_vms.list(NODE_RG, SYS_VMSS)}
    for machine in machines:
        assert machine.type == "Microsoft.ContainerService/managedClusters/agentPools/machines"
        assert machine.id == f"{still.aks_cluster_id}/agentPools/sys/machines/{machine.name}"
        vm = vms[machine.properties.resource_id.lower()]
        assert vm.os_profile.computer_name == machine.name
        (address,) = machine.properties.network.ip_addresses
        internal = [a.address for a in nodes[machine.name].status.addresses if a.type == "InternalIP"]
        assert (address.family, [address.ip]) == ("IPv4", internal)
    one = client.machines.get(AKS_RG, CLUSTER, "gpu", f"{GPU_VMSS}000000")
    assert one.zones == ["1"] and one.properties.resource_id.endswith(f"/{GPU_VMSS}/virtualMachines/0")
    with pytest.raises(ResourceNotFoundError):
        client.machines.get(AKS_RG, CLUSTER, "gpu", f"{GPU_VMSS}00000z")
    assert arm_calls(still)["LIST machines"] == 1 and arm_calls(still)["GET machines"] == 2


def test_another_cluster_is_not_found(still: SandboxServer) -> None:
    client = aks_client(still)
    with pytest.raises(ResourceNotFoundError) as caught:
        list(client.agent_pools.list(AKS_RG, "other-cluster"))
    assert caught.value.error.code == "ResourceNotFound"


# --- scaling by count -------------------------------------------------------------------------------------------


def test_scaling_up_by_count_completes_once_the_new_nodes_are_ready(fast: SandboxServer) -> None:
    client = aks_client(fast, polling_interval=0)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    pool.count = 3
    poller = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool)
    result = poller.result()
    assert (result.count, result.provisioning_state) == (3, "Succeeded")
    nodes = pool_nodes(fast, "gpu")  # AKS's operation ends when its nodes have registered
    assert [n.metadata.name for n in nodes] == [f"{GPU_VMSS}00000{i}" for i in range(3)]
    assert all(c.status == "True" for n in nodes for c in n.status.conditions if c.type == "Ready")
    assert [m.name for m in client.machines.list(AKS_RG, CLUSTER, "gpu")] == [n.metadata.name for n in nodes]
    assert compute_client(fast).virtual_machine_scale_sets.get(NODE_RG, GPU_VMSS).sku.capacity == 3
    calls = arm_calls(fast)
    assert calls["PUT agentPools"] == 1 and calls["GET ContainerService operations"] >= 1


def test_a_pool_reads_scaling_until_its_operation_ends(still: SandboxServer) -> None:
    client = aks_client(still)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    pool.count = 2
    poller = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool, polling=False)
    assert poller.result().provisioning_state == "Scaling"
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").provisioning_state == "Scaling"
    with pytest.raises(HttpResponseError) as caught:  # one operation at a time per pool
        client.agent_pools.begin_delete_machines(AKS_RG, CLUSTER, "gpu",
                                                 AgentPoolDeleteMachinesParameter(machine_names=[f"{GPU_VMSS}000000"]))
    assert caught.value.status_code == 409 and caught.value.error.code == "OperationNotAllowed"
    assert "Another operation (gpu - Scaling) is in progress" in caught.value.error.message
    still.clock.advance(30)  # provisioned (0.5 of the 60 s boot) but not Ready: AKS still waits for the node
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").provisioning_state == "Scaling"
    still.clock.advance(31)
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").provisioning_state == "Succeeded"
    assert len(pool_nodes(still, "gpu")) == 2


def test_scaling_down_by_count_takes_cordoned_nodes_then_the_newest(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(aks_doc(pool_with(initial=4)), clock=ManualClock(SANDBOX_START))
    k8s.CoreV1Api(kube_api_client(server)).patch_node(f"{GPU_VMSS}000001", {"spec": {"unschedulable": True}})
    client = aks_client(server)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    pool.count = 2
    client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool, polling=False)
    vms = compute_client(server).virtual_machine_scale_set_vms.list(NODE_RG, GPU_VMSS)
    assert {v.instance_id: v.provisioning_state for v in vms} == {"0": "Succeeded", "1": "Deleting", "2": "Succeeded",
                                                                  "3": "Deleting"}
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").count == 2
    server.clock.advance(31)  # the instances are gone after the 30 s delete delay
    assert [m.name for m in client.machines.list(AKS_RG, CLUSTER, "gpu")] == [f"{GPU_VMSS}000000", f"{GPU_VMSS}000002"]
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").provisioning_state == "Succeeded"
    assert arm_calls(server)["instances_deleted"] == {}  # a smaller count names no instance


def test_a_count_change_is_refused_while_aks_autoscales_the_pool(still: SandboxServer) -> None:
    client = aks_client(still)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "sys")
    pool.count = 3
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "sys", pool)
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"
    assert caught.value.error.message.startswith("Cannot manually scale AgentPool 'sys'")

    gpu = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")  # turning it on and scaling in one PUT: refused too
    gpu.count, gpu.enable_auto_scaling, gpu.min_count, gpu.max_count = 2, True, 1, 3
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", gpu)
    assert "Cannot manually scale and enable cluster autoscaler" in caught.value.error.message
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").count == 1


def test_autoscaling_can_be_turned_off_then_the_count_changes(still: SandboxServer) -> None:
    client = aks_client(still, polling_interval=0)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "sys")
    pool.enable_auto_scaling, pool.min_count, pool.max_count = False, None, None
    done = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "sys", pool).result()  # no count change: at once
    assert done.enable_auto_scaling is False and done.min_count is None and done.provisioning_state == "Succeeded"
    done.count = 3
    poller = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "sys", done, polling=False)
    assert poller.result().count == 3
    back = client.agent_pools.get(AKS_RG, CLUSTER, "sys")
    back.enable_auto_scaling, back.min_count, back.max_count = True, 1, 5
    still.clock.advance(61)
    assert client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "sys", back).result().max_count == 5


@pytest.mark.parametrize(
    ("change", "status", "code", "message"),
    [
        ({"count": None}, 400, "InvalidParameter", "Required parameter properties.count is missing (null)."),
        ({"count": 1001}, 400, "InvalidParameter", "The value of parameter agentPoolProfile.count is invalid."),
        ({"vm_size": "Standard_D4s_v5"}, 400, "PropertyChangeNotAllowed", "Changing property 'vmSize' is not allowed."),
        ({"availability_zones": ["3"]}, 400, "PropertyChangeNotAllowed", "'availabilityZones'"),
        ({"min_count": 1}, 400, "InvalidParameter", "must be null when enableAutoScaling is false"),
        ({"node_labels": {"workload": "cpu"}}, 409, "OperationNotAllowed", "The sandbox cannot change"),
        ({"orchestrator_version": "1.32.0"}, 409, "OperationNotAllowed", "The sandbox cannot upgrade"),
    ],
)
def test_puts_are_checked_as_aks_checks_them(
    still: SandboxServer, change: dict[str, Any], status: int, code: str, message: str
) -> None:
    client = aks_client(still)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    for key, value in change.items():
        setattr(pool, key, value)
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool)
    assert (caught.value.status_code, caught.value.error.code) == (status, code)
    assert message in caught.value.error.message


def test_tags_change_at_once_and_reach_the_scale_set_and_a_stale_etag_is_refused(still: SandboxServer) -> None:
    from azure.core import MatchConditions

    client = aks_client(still)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    etag = pool.e_tag
    pool.tags = {**pool.tags, "team": "vision", "cost-centre": "42"}
    done = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool, etag=etag,
                                                     match_condition=MatchConditions.IfNotModified).result()
    assert done.tags["team"] == "vision" and done.e_tag != etag
    vmss = compute_client(still).virtual_machine_scale_sets.get(NODE_RG, GPU_VMSS)
    assert vmss.tags["team"] == "vision" and vmss.tags["cost-centre"] == "42" and vmss.tags["aks-managed-poolName"] == "gpu"
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool, etag=etag,
                                                  match_condition=MatchConditions.IfNotModified)
    assert caught.value.status_code == 412


def test_a_failed_scale_up_fails_the_operation_and_the_pool(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(aks_doc(duration="48h"), speed=FAST)
    server.world.fail_next_scale_up(GPU_VMSS, code="QuotaExceeded")
    client = aks_client(server, polling_interval=0)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    pool.count = 4
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool).result()
    assert "QuotaExceeded" in str(caught.value)
    after = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    assert (after.count, after.provisioning_state) == (1, "Failed")


# --- deleteMachines ---------------------------------------------------------------------------------------------


def test_delete_machines_removes_exactly_the_named_machines_and_lowers_count(fast: SandboxServer) -> None:
    client = aks_client(fast, polling_interval=0)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")
    pool.count = 3
    client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool).result()
    doomed = f"{GPU_VMSS}000001"
    poller = client.agent_pools.begin_delete_machines(AKS_RG, CLUSTER, "gpu",
                                                      AgentPoolDeleteMachinesParameter(machine_names=[doomed]))
    assert poller.result() is None
    assert [m.name for m in client.machines.list(AKS_RG, CLUSTER, "gpu")] == [f"{GPU_VMSS}000000", f"{GPU_VMSS}000002"]
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").count == 2
    vms = compute_client(fast).virtual_machine_scale_set_vms.list(NODE_RG, GPU_VMSS)
    assert [v.instance_id for v in vms] == ["0", "2"]
    calls = arm_calls(fast)
    assert calls["POST deleteMachines"] == 1 and calls["instances_deleted"] == {f"{GPU_VMSS}/1": 1}
    wait_for(lambda: doomed not in [n.metadata.name for n in pool_nodes(fast, "gpu")])


def test_delete_machines_does_not_cordon_or_drain(still: SandboxServer) -> None:
    client = aks_client(still)
    name = f"{SYS_VMSS}000001"
    client.agent_pools.begin_delete_machines(AKS_RG, CLUSTER, "sys", AgentPoolDeleteMachinesParameter(machine_names=[name]),
                                             polling=False)
    node = next(n for n in pool_nodes(still, "sys") if n.metadata.name == name)
    assert not node.spec.unschedulable  # gone NotReady with its VM, never cordoned
    assert {t.key for t in node.spec.taints or ()} == {"node.kubernetes.io/unreachable"}
    assert client.agent_pools.get(AKS_RG, CLUSTER, "sys").count == 1


def test_delete_machines_naming_no_machine_of_the_pool_is_refused(still: SandboxServer) -> None:
    client = aks_client(still)
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_delete_machines(AKS_RG, CLUSTER, "gpu",
                                                 AgentPoolDeleteMachinesParameter(machine_names=[f"{SYS_VMSS}000000"]))
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"
    assert caught.value.error.message == (
        "Cannot find any valid machines to delete. Please check your input machine names. "
        f"The valid machines to delete in agent pool 'gpu' are: {GPU_VMSS}000000.")
    assert client.agent_pools.get(AKS_RG, CLUSTER, "gpu").count == 1
    assert arm_calls(still)["instance_deletes_refused"] == {f"{GPU_VMSS}/{SYS_VMSS}000000": 1}


def test_the_last_node_of_a_system_pool_stays(sandbox_factory: SandboxFactory) -> None:
    doc = aks_doc()
    doc["node_groups"][2]["initial"] = 1
    server = sandbox_factory(doc, clock=ManualClock(SANDBOX_START))
    with pytest.raises(HttpResponseError) as caught:
        aks_client(server).agent_pools.begin_delete_machines(
            AKS_RG, CLUSTER, "sys", AgentPoolDeleteMachinesParameter(machine_names=[f"{SYS_VMSS}000000"]))
    assert caught.value.status_code == 400


# --- faults -----------------------------------------------------------------------------------------------------


def test_faults_are_injected_by_pool_name(still: SandboxServer) -> None:
    still.world.inject_fault(("arm", "POST", "gpu"), status=429, code="TooManyRequests", retry_after=30)
    still.world.inject_fault(("arm", "PUT", "gpu"), status=500)
    client = aks_client(still, retry_total=0)
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_delete_machines(AKS_RG, CLUSTER, "gpu",
                                                 AgentPoolDeleteMachinesParameter(machine_names=[f"{GPU_VMSS}000000"]))
    assert caught.value.status_code == 429 and caught.value.response.headers["Retry-After"] == "30"
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "gpu")  # GETs are not hit
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "gpu", pool)
    assert caught.value.status_code == 500
    assert pool.count == 1 and still.world.faults() == []
    assert still.world.report()["api_calls"]["faults_triggered"] == 2
