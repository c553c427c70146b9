"""Cluster flavours (`flavour`): how nodes are named and identified, and the NICs that tie them to their VMs.

aks-engine (the default) names a node after its computer name and gives the Azure providerID; k3s
gives `k3s://<name>` and a server node outside the scale sets; kubeadm gives no providerID and names
of its own, so only the InternalIP (the instance's private IP, read from the scale set NICs) maps a
node to its VM. azure-mgmt-network is not installed here, so the NIC routes are driven with raw
HTTPS requests, as azure-mgmt-network would send them (api-version 2018-10-01, `microsoft.Compute`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from kubernetes import client as k8s

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.model.scenario import FLAVOURS, ScenarioError, load_scenario
from sandbox.world import World
from sandbox.world.compute import InstanceSim, private_ip
from sandbox.world.identity import ARM_AUDIENCE
from sandbox.world.nodes import K3S_SERVER
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client, kube_api_client
from tests.sandbox.helpers import POOL, RG, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"
NIC_API_VERSION = "2018-10-01"  # vmssNetworkInterface.json's version, which azure-mgmt-network sends for these calls


def two_pools(flavour: str | None, **overrides: Any) -> dict[str, Any]:
    """pool-a (2 nodes, label pool=a) and an unmanaged `Pool_B` (1 node): a name that is no DNS label."""
    doc = scenario(**overrides) if flavour is None else scenario(flavour=flavour, **overrides)
    doc["node_groups"][0]["initial"] = 2
    doc["node_groups"].append({"resource_group": RG, "name": "Pool_B", "vm_size": "Standard_D2s_v5",
                               "allocatable": {"cpu": "2", "memory": "8Gi"}, "initial": 1, "autoscaled": False,
                               "computer_name_prefix": "poolb"})
    return doc


def make(flavour: str | None, **overrides: Any) -> World:
    return World(two_pools(flavour, **overrides), start=START)


def instances(world: World) -> list[InstanceSim]:
    return [i for rg in world.scenario.resource_groups for g in world.scale_sets(SUB, rg) for i in world.instances(g)]


def nodes(world: World) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in world.k8s_list("nodes")}


def internal_ip(node: dict[str, Any]) -> str:
    (address,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    return address


# ---------------------------------------------------------------------------- the scenario field


def test_the_flavour_defaults_to_aks_engine_and_takes_every_known_value() -> None:
    assert load_scenario(scenario()).flavour == "aks-engine"
    assert FLAVOURS == ("aks-engine", "k3s", "kubeadm")
    for flavour in FLAVOURS:
        assert load_scenario(scenario(flavour=flavour)).flavour == flavour


@pytest.mark.parametrize(("value", "shown"), [("k8s", "'k8s'"), ("K3S", "'K3S'"), (3, "a number"), (None, "null")])
def test_an_unknown_flavour_is_refused_naming_it_and_the_allowed_ones(value: Any, shown: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(scenario(flavour=value))
    assert caught.value.path == "$.flavour"
    assert str(caught.value) == (
        f"<memory>: $.flavour: {shown} is not a cluster flavour (allowed: aks-engine, k3s, kubeadm)"
    )


# ---------------------------------------------------------------------------- nodes per flavour


def test_aks_engine_nodes_are_named_after_computer_names_with_the_azure_provider_id() -> None:
    world = make(None)
    by_name = nodes(world)
    assert K3S_SERVER not in by_name and len(by_name) == 3
    for inst in instances(world):
        group = world._groups[inst.group_key]
        node = by_name[inst.computer_name]
        assert inst.node_name == inst.computer_name
        assert node["spec"]["providerID"] == (
            f"azure:///subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute"
            f"/virtualMachineScaleSets/{group.name}/virtualMachines/{inst.instance_id}"
        )
        assert internal_ip(node) == inst.private_ip == private_ip(inst.ip_index)
        assert node["metadata"]["labels"]["agentpool"] == group.name


def test_k3s_nodes_carry_k3s_provider_ids_lowercased_hostnames_and_k3s_labels() -> None:
    world = make("k3s")
    by_name = nodes(world)
    for inst in instances(world):
        node = by_name[inst.computer_name.lower()]
        assert inst.node_name == inst.computer_name.lower()
        assert node["spec"]["providerID"] == f"k3s://{inst.node_name}"
        assert internal_ip(node) == inst.private_ip
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == inst.node_name
        assert labels["node.kubernetes.io/instance-type"] == labels["beta.kubernetes.io/instance-type"] == "k3s"
        assert not {"agentpool", "topology.kubernetes.io/region", "topology.kubernetes.io/zone"} & set(labels)
        assert node["metadata"]["annotations"]["k3s.io/internal-ip"] == inst.private_ip
        assert node["status"]["nodeInfo"]["kubeletVersion"].endswith("+k3s1")
    assert by_name["pool-a000000"]["metadata"]["labels"]["pool"] == "a"  # the pool's own labels stay


def test_the_k3s_server_is_registered_at_start_in_no_scale_set_and_never_removed() -> None:
    doc = two_pools("k3s")
    doc["node_groups"][0]["initial_age"] = "3h"
    world = World(doc, start=START)
    server = nodes(world)[K3S_SERVER]
    assert server["spec"]["providerID"] == f"k3s://{K3S_SERVER}"
    assert server["metadata"]["creationTimestamp"] == "2030-01-07T06:00:00Z"  # as old as the oldest pool
    labels = server["metadata"]["labels"]
    assert labels["node-role.kubernetes.io/control-plane"] == labels["node-role.kubernetes.io/master"] == "true"
    assert "taints" not in server["spec"]  # k3s leaves its server schedulable
    assert internal_ip(server) not in {i.private_ip for i in instances(world)}
    assert K3S_SERVER not in {i.node_name for i in instances(world)}
    # DaemonSets run on it; its CPU is measured like any Ready node's.
    on_server = [p for p in world.k8s_list("pods") if p["spec"].get("nodeName") == K3S_SERVER]
    assert [p["metadata"]["name"].rsplit("-", 1)[0] for p in on_server] == ["kube-proxy"]
    assert on_server[0]["status"]["hostIP"] == internal_ip(server)
    assert world.node_cpu([K3S_SERVER])[K3S_SERVER].capacity_milli == 2000
    # Scale every pool to zero: the agents go, the server stays.
    pool_a = world.scale_set(SUB, RG, POOL)
    world.set_capacity(pool_a, 0)
    world.set_capacity(world.scale_set(SUB, RG, "Pool_B"), 0)
    world.advance_by(600)
    assert list(nodes(world)) == [K3S_SERVER]
    assert world.state()["groups"][f"{RG}/{POOL}".lower()]["ready"] == 0


def test_kubeadm_nodes_have_no_provider_id_and_names_of_their_own() -> None:
    world = make("kubeadm")
    by_name = nodes(world)
    insts = instances(world)
    assert sorted(i.node_name for i in insts) == ["worker-pool-a-1", "worker-pool-a-2", "worker-pool-b-3"]
    for inst in insts:
        node = by_name[inst.node_name]
        assert inst.node_name != inst.computer_name and inst.computer_name not in by_name
        assert "providerID" not in node["spec"]
        assert internal_ip(node) == inst.private_ip
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == inst.node_name
        assert "node.kubernetes.io/instance-type" not in node["metadata"]["labels"]
    # The IP is the only key: one node per private IP, one instance per node.
    assert {internal_ip(n): name for name, n in by_name.items()} == {i.private_ip: i.node_name for i in insts}


def test_kubeadm_names_count_on_per_world_and_survive_a_deallocation() -> None:
    world = make("kubeadm", boot_delay="60s")
    pool_a = world.scale_set(SUB, RG, POOL)
    world.set_capacity(pool_a, 3)
    world.advance_by(61)
    assert "worker-pool-a-4" in nodes(world)
    first = world.instances(pool_a)[0]
    world.deallocate_instances(pool_a, [str(first.instance_id)])
    world.advance_by(120)
    world.start_instances(pool_a, [str(first.instance_id)])
    world.advance_by(120)
    node = nodes(world)["worker-pool-a-1"]
    assert internal_ip(node) == first.private_ip and node["status"]["conditions"][-1]["status"] == "True"
    assert all(re.fullmatch(r"worker-pool-[ab]-\d+", name) for name in nodes(world))


def test_a_provider_id_may_be_set_once_on_a_node_that_has_none() -> None:
    world = make("kubeadm")
    node = nodes(world)["worker-pool-a-1"]
    node["spec"]["providerID"] = "azure:///whatever"
    assert world.k8s_replace("nodes", "", "worker-pool-a-1", node)["spec"]["providerID"] == "azure:///whatever"
    untouched = nodes(world)["worker-pool-a-2"]
    assert "providerID" not in world.k8s_replace("nodes", "", "worker-pool-a-2", untouched)["spec"]


# ---------------------------------------------------------------------------- over HTTPS: ARM NICs and the Kubernetes API


@pytest.fixture(params=FLAVOURS)
def served(request: pytest.FixtureRequest, sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(two_pools(request.param), clock=ManualClock(SANDBOX_START))


def arm_get(server: SandboxServer, path: str, api_version: str = NIC_API_VERSION) -> requests.Response:
    """A GET as azure-mgmt-network sends it (the Compute segment lower-case, its own api-version)."""
    url = path if path.startswith("https://") else (
        f"{server.url}/subscriptions/{server.subscription_id}/resourceGroups/{RG}/providers/microsoft.Compute"
        f"/virtualMachineScaleSets/{path}?api-version={api_version}"
    )
    token = server.world.identity.issue(ARM_AUDIENCE).token
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, verify=str(server.ca_path), timeout=10)


def test_the_scale_set_nics_give_every_node_its_instance(served: SandboxServer) -> None:
    """What a mapper by IP does: list the NICs, read each primary private IP, find the Node with that InternalIP."""
    world = served.world
    by_ip = {a.address: n.metadata.name for n in k8s.CoreV1Api(kube_api_client(served)).list_node().items
             for a in n.status.addresses if a.type == "InternalIP"}
    for vmss in (POOL, "Pool_B"):
        response = arm_get(served, f"{vmss}/networkInterfaces")
        assert response.status_code == 200
        group = world.scale_set(SUB, RG, vmss)
        expected = {f"{group.name}_{i.instance_id}": i for i in world.instances(group)}
        assert len(response.json()["value"]) == len(expected)
        for nic in response.json()["value"]:
            vm_id = nic["properties"]["virtualMachine"]["id"]
            inst = expected[f"{vmss}_{vm_id.rsplit('/', 1)[1]}"]
            assert vm_id == (f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute"
                             f"/virtualMachineScaleSets/{vmss}/virtualMachines/{inst.instance_id}")
            assert nic["id"] == f"{vm_id}/networkInterfaces/{nic['name']}"
            assert nic["properties"]["primary"] is True
            (config,) = nic["properties"]["ipConfigurations"]
            assert config["properties"]["primary"] is True and config["id"].startswith(f"{nic['id']}/ipConfigurations/")
            assert config["properties"]["privateIPAddress"] == inst.private_ip
            assert by_ip[inst.private_ip] == inst.node_name
    assert world.report()["api_calls"]["breakdown"]["arm"]["LIST networkInterfaces"] == 2


def test_the_vm_model_carries_the_computer_name(served: SandboxServer) -> None:
    world = served.world
    group = world.scale_set(SUB, RG, POOL)
    vms = {vm.instance_id: vm for vm in compute_client(served).virtual_machine_scale_set_vms.list(RG, POOL)}
    for inst in world.instances(group):
        assert vms[str(inst.instance_id)].os_profile.computer_name == inst.computer_name


@pytest.fixture
def kubeadm(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(two_pools("kubeadm", arm_page_size=1), clock=ManualClock(SANDBOX_START))


def test_one_instances_nics(kubeadm: SandboxServer) -> None:
    world = kubeadm.world
    second = world.instances(world.scale_set(SUB, RG, POOL))[1]
    response = arm_get(kubeadm, f"{POOL}/virtualMachines/{second.instance_id}/networkInterfaces")
    assert response.status_code == 200 and "nextLink" not in response.json()
    (nic,) = response.json()["value"]
    assert nic["properties"]["virtualMachine"]["id"].endswith(f"/virtualMachines/{second.instance_id}")
    assert nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"] == second.private_ip
    missing = arm_get(kubeadm, f"{POOL}/virtualMachines/42/networkInterfaces")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ResourceNotFound"
    assert arm_get(kubeadm, "pool-missing/networkInterfaces").json()["error"]["code"] == "ResourceNotFound"


def test_the_nic_list_pages_with_next_links(kubeadm: SandboxServer) -> None:
    first = arm_get(kubeadm, f"{POOL}/networkInterfaces").json()
    assert len(first["value"]) == 1 and f"api-version={NIC_API_VERSION}" in first["nextLink"]
    second = arm_get(kubeadm, first["nextLink"]).json()
    assert "nextLink" not in second
    ips = [nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
           for nic in (*first["value"], *second["value"])]
    assert ips == [i.private_ip for i in kubeadm.world.instances(kubeadm.world.scale_set(SUB, RG, POOL))]


def test_kubeadm_nodes_reach_the_official_client_without_a_provider_id(kubeadm: SandboxServer) -> None:
    listed = k8s.CoreV1Api(kube_api_client(kubeadm)).list_node().items
    assert sorted(n.metadata.name for n in listed) == ["worker-pool-a-1", "worker-pool-a-2", "worker-pool-b-3"]
    assert {n.spec.provider_id for n in listed} == {None}
