"""AKS VirtualMachines agent pools (several sizes in one pool) in the sandbox, driven through
azure-mgmt-containerservice's ContainerServiceClient, unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.containerservice import models
from azure.mgmt.containerservice.models import AgentPoolDeleteMachinesParameter

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.model.agent_pools import size_family
from sandbox.model.scenario import ScenarioError, load_scenario
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.sandbox.helpers import scenario
from tests.sandbox.test_agent_pools import (
    AKS_RG, CLUSTER, FAST, NODE_RG, SUFFIX, aks_client, arm_calls, pool_nodes, wait_for,
)

D2, D4, D8 = "Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"
PREVIEW = "2026-03-02-preview"  # machines say their size (properties.hardware) from this api-version on
MIX_POOL: dict[str, Any] = {
    "agent_pool": {"name": "mix", "type": "VirtualMachines", "tags": {"team": "render"}},
    "sizes": [
        {"vm_size": D2, "allocatable": {"cpu": "1900m", "memory": "5.5Gi", "pods": 30}, "count": 1},
        {"vm_size": D4, "allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": 30}},
        {"vm_size": D8, "allocatable": {"cpu": "7820m", "memory": "27Gi", "pods": 30},
         "capacity": {"cpu": "8", "memory": "32Gi", "pods": 30}, "count": 2},
    ],
}


def vms(index: int) -> str:
    return f"aks-mix-{SUFFIX}-vms{index}"


def mix_doc(group: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """The helpers' scenario (one plain scale set) plus the VirtualMachines pool `mix`."""
    doc = scenario(**overrides)
    doc["node_groups"].append(copy.deepcopy(group or MIX_POOL))
    return doc


def mix_with(**changes: Any) -> dict[str, Any]:
    """MIX_POOL with `pool_<field>` set in agent_pool, `size<i>_<field>` in sizes[i], others on the group
    (None removes)."""
    group = copy.deepcopy(MIX_POOL)
    for key, value in changes.items():
        target, field = group, key
        if key.startswith("pool_"):
            target, field = group["agent_pool"], key[5:]
        elif key.startswith("size") and key[4].isdigit():
            target, field = group["sizes"][int(key[4])], key[6:]
        if value is None:
            target.pop(field, None)
        else:
            target[field] = value
    return group


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(mix_doc(), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def fast(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(mix_doc(duration="48h"), speed=FAST)


# --- the scenario ------------------------------------------------------------------------------------------


def test_a_virtual_machines_pool_is_one_flexible_set_per_size() -> None:
    plain, *parts = load_scenario(mix_doc()).node_groups
    assert plain.agent_pool is None
    assert [(g.name, g.vm_size, g.initial, g.orchestration, g.autoscaled) for g in parts] == [
        (vms(0), D2, 1, "Flexible", False), (vms(1), D4, 0, "Flexible", False), (vms(2), D8, 2, "Flexible", False)]
    assert {g.resource_group for g in parts} == {NODE_RG}
    assert [g.agent_pool.size for g in parts if g.agent_pool] == [D2, D4, D8]
    assert all(g.agent_pool and g.agent_pool.sizes == (D2, D4, D8) and g.agent_pool.multi_size for g in parts)
    assert parts[2].allocatable != parts[2].capacity  # each size its own allocatable and capacity
    assert parts[0].allocatable != parts[1].allocatable
    assert {g.labels["kubernetes.azure.com/nodepool-type"] for g in parts} == {"VirtualMachines"}
    assert {g.tags["aks-managed-poolName"] for g in parts} == {"mix"} and parts[0].tags["team"] == "render"


def test_size_families() -> None:
    assert size_family(D2) == size_family(D8) == "Ds_v5"
    assert size_family("Standard_D8ds_v5") == "Dds_v5" and size_family("Standard_E8s_v5") == "Es_v5"
    assert size_family("Standard_NC4as_T4_v3") == size_family("Standard_NC8as_T4_v3") == "NCas_T4_v3"
    assert size_family("D4") is None and size_family("Standard_d4s_v5") is None


@pytest.mark.parametrize(
    ("group", "path", "problem"),
    [
        (mix_with(pool_type="Machines"), "$.node_groups[1].agent_pool.type", "must be one of"),
        (mix_with(sizes=[]), "$.node_groups[1].sizes", "1 to 5 sizes"),
        (mix_with(sizes=None), "$.node_groups[1].sizes", "1 to 5 sizes"),
        (mix_with(sizes=[{"vm_size": f"Standard_D{n}s_v5", "allocatable": {"cpu": "1"}} for n in (2, 4, 8, 16, 32, 48)]),
         "$.node_groups[1].sizes", "1 to 5 sizes"),
        (mix_with(size2_vm_size="Standard_E8s_v5"), "$.node_groups[1].sizes[2].vm_size", "of one family (Ds_v5"),
        (mix_with(size1_vm_size=D2), "$.node_groups[1].sizes[1].vm_size", "appears twice"),
        (mix_with(size1_vm_size="big"), "$.node_groups[1].sizes[1].vm_size", "Azure size name"),
        (mix_with(size0_allocatable=None), "$.node_groups[1].sizes[0].allocatable", "required field"),
        (mix_with(size0_count=-1), "$.node_groups[1].sizes[0].count", "between 0 and 1000"),
        (mix_with(size0_zones=["1"]), "$.node_groups[1].sizes[0].zones", "unknown field"),
        (mix_with(vm_size=D2), "$.node_groups[1].vm_size", "give each size's vm_size in sizes"),
        (mix_with(initial=2), "$.node_groups[1].initial", "count in sizes"),
        (mix_with(zones=["1"]), "$.node_groups[1].zones", "availability zones"),
        (mix_with(instance_mix={}), "$.node_groups[1].instance_mix", "in sizes"),
        (mix_with(autoscaled=True), "$.node_groups[1].autoscaled", "must be false"),
        (mix_with(name=vms(0)), "$.node_groups[1].name", "leave it out"),
        (mix_with(pool_mode="System", size0_count=0, size2_count=0), "$.node_groups[1].sizes", "System pool"),
        # A size's allocatable and capacity are checked as a node group's (the path names the group's field).
        (mix_with(size0_allocatable={"cpu": "lots", "memory": "1Gi", "pods": 30}), "$.node_groups[1].allocatable.cpu", ""),
    ],
)
def test_bad_virtual_machines_pools_are_refused_with_their_path(group: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(mix_doc(group))
    assert caught.value.path == path
    assert problem in caught.value.problem


def test_a_pool_name_is_still_one_pool() -> None:
    doc = mix_doc()
    doc["node_groups"].append(copy.deepcopy(MIX_POOL))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(doc)
    assert "appears twice" in caught.value.problem


# --- reads ---------------------------------------------------------------------------------------------------


def test_get_shows_the_sizes_and_their_counts(still: SandboxServer) -> None:
    pool = aks_client(still).agent_pools.get(AKS_RG, CLUSTER, "mix")
    assert (pool.type_properties_type, pool.vm_size, pool.count) == ("VirtualMachines", "", 3)
    manual = pool.virtual_machines_profile.scale.manual
    assert [(m.size, m.count) for m in manual] == [(D2, 1), (D4, 0), (D8, 2)]
    assert [(s.size, s.count) for s in pool.virtual_machine_nodes_status] == [(D2, 1), (D8, 2)]
    assert pool.tags == {"team": "render"} and not pool.availability_zones
    listed = {p.name: p for p in aks_client(still).agent_pools.list(AKS_RG, CLUSTER)}
    assert listed["mix"].count == 3


def test_nodes_are_plain_vms_with_their_sizes_allocatable(still: SandboxServer) -> None:
    nodes = pool_nodes(still, "mix")
    assert len(nodes) == 3
    by_size: dict[str, list[Any]] = {}
    for node in nodes:
        by_size.setdefault(node.metadata.labels["node.kubernetes.io/instance-type"], []).append(node)
        prefix = f"azure:///subscriptions/{still.subscription_id}/resourceGroups/{NODE_RG}/providers/Microsoft.Compute/virtualMachines/"
        assert node.spec.provider_id.startswith(prefix) and "virtualMachineScaleSets" not in node.spec.provider_id
        assert node.metadata.labels["kubernetes.azure.com/nodepool-type"] == "VirtualMachines"
    assert sorted(by_size) == [D2, D8] and len(by_size[D8]) == 2
    assert {n.status.allocatable["cpu"] for n in by_size[D2]} == {"1900m"}
    assert {n.status.allocatable["cpu"] for n in by_size[D8]} == {"7820m"}


def test_machines_say_their_size_and_vm_id(still: SandboxServer) -> None:
    machines = list(aks_client(still, api_version=PREVIEW).machines.list(AKS_RG, CLUSTER, "mix"))
    nodes = {n.metadata.name: n for n in pool_nodes(still, "mix")}
    assert sorted(m.name for m in machines) == sorted(nodes)
    for machine in machines:
        node = nodes[machine.name]
        assert machine.properties["hardware"] == {"vmSize": node.metadata.labels["node.kubernetes.io/instance-type"]}
        assert f"azure://{machine.properties.resource_id}" == node.spec.provider_id
    one = aks_client(still, api_version=PREVIEW).machines.get(AKS_RG, CLUSTER, "mix", machines[0].name)
    assert one.properties["hardware"]["vmSize"] == D2


@pytest.mark.parametrize("api_version", ["2026-08-01", "2025-10-02-preview"])
def test_machines_asked_at_a_version_without_hardware_do_not_say_their_size(
    still: SandboxServer, api_version: str,
) -> None:
    machines = list(aks_client(still, api_version=api_version).machines.list(AKS_RG, CLUSTER, "mix"))
    assert machines and all("hardware" not in m.properties and m.properties.resource_id for m in machines)


# --- changes -------------------------------------------------------------------------------------------------


def manual(*counts: tuple[str, int]) -> models.VirtualMachinesProfile:
    return models.VirtualMachinesProfile(scale=models.ScaleProfile(
        manual=[models.ManualScaleProfile(size=size, count=count) for size, count in counts]))


def test_a_put_changes_the_counts_per_size(fast: SandboxServer) -> None:
    client = aks_client(fast, polling_interval=0, api_version=PREVIEW)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "mix")
    pool.virtual_machines_profile = manual((D2, 0), (D4, 2), (D8, 2))
    pool.count = None
    result = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "mix", pool).result()
    assert (result.count, result.provisioning_state) == (4, "Succeeded")
    assert [(m.size, m.count) for m in result.virtual_machines_profile.scale.manual] == [(D2, 0), (D4, 2), (D8, 2)]
    sizes = sorted(m.properties["hardware"]["vmSize"] for m in client.machines.list(AKS_RG, CLUSTER, "mix"))
    assert sizes == [D4, D4, D8, D8]
    wait_for(lambda: sorted(n.metadata.labels["node.kubernetes.io/instance-type"] for n in pool_nodes(fast, "mix"))
             == [D4, D4, D8, D8])
    assert arm_calls(fast)["PUT agentPools"] == 1


def test_a_size_left_out_of_the_profile_goes_to_zero(still: SandboxServer) -> None:
    client = aks_client(still, api_version=PREVIEW)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "mix")
    pool.virtual_machines_profile = manual((D2, 1))
    pool.count = None
    result = client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "mix", pool, polling=False).result()
    assert result.provisioning_state == "Scaling" and result.count == 1
    still.clock.advance(31)  # the deleted instances are gone after the delete delay
    assert client.agent_pools.get(AKS_RG, CLUSTER, "mix").provisioning_state == "Succeeded"
    assert [m.properties["hardware"]["vmSize"] for m in client.machines.list(AKS_RG, CLUSTER, "mix")] == [D2]


@pytest.mark.parametrize(
    ("change", "status", "code", "target"),
    [
        ({"virtual_machines_profile": manual((D2, 1), ("Standard_D16s_v5", 1))}, 409, "OperationNotAllowed",
         "properties.virtualMachinesProfile.scale.manual[1].size"),
        ({"virtual_machines_profile": manual((D2, 1), (D2, 2))}, 400, "InvalidParameter",
         "properties.virtualMachinesProfile.scale.manual[1].size"),
        ({"virtual_machines_profile": manual((D2, -1))}, 400, "InvalidParameter",
         "properties.virtualMachinesProfile.scale.manual[0]"),
        ({"count": 7}, 400, "InvalidParameter", "properties.count"),
        ({"vm_size": D2}, 400, "PropertyChangeNotAllowed", "properties.vmSize"),
        ({"type_properties_type": "VirtualMachineScaleSets"}, 400, "PropertyChangeNotAllowed", "properties.type"),
        ({"enable_auto_scaling": True, "min_count": 0, "max_count": 5}, 409, "OperationNotAllowed",
         "properties.enableAutoScaling"),
    ],
)
def test_bad_puts_are_refused_and_change_nothing(
    still: SandboxServer, change: dict[str, Any], status: int, code: str, target: str,
) -> None:
    client = aks_client(still)
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "mix")
    for key, value in change.items():
        setattr(pool, key, value)
    with pytest.raises(HttpResponseError) as caught:
        client.agent_pools.begin_create_or_update(AKS_RG, CLUSTER, "mix", pool, polling=False)
    assert (caught.value.status_code, caught.value.error.code, caught.value.error.target) == (status, code, target)
    after = client.agent_pools.get(AKS_RG, CLUSTER, "mix")
    assert [(m.size, m.count) for m in after.virtual_machines_profile.scale.manual] == [(D2, 1), (D4, 0), (D8, 2)]


def test_delete_machines_removes_named_machines_of_any_size(fast: SandboxServer) -> None:
    client = aks_client(fast, polling_interval=0, api_version=PREVIEW)
    machines = {m.name: m.properties["hardware"]["vmSize"] for m in client.machines.list(AKS_RG, CLUSTER, "mix")}
    doomed = sorted(name for name, size in machines.items() if size == D8)[0]
    client.agent_pools.begin_delete_machines(
        AKS_RG, CLUSTER, "mix", AgentPoolDeleteMachinesParameter(machine_names=[doomed])).result()
    pool = client.agent_pools.get(AKS_RG, CLUSTER, "mix")
    assert pool.count == 2
    assert [(m.size, m.count) for m in pool.virtual_machines_profile.scale.manual] == [(D2, 1), (D4, 0), (D8, 1)]
    assert doomed not in {m.name for m in client.machines.list(AKS_RG, CLUSTER, "mix")}
    wait_for(lambda: doomed not in [n.metadata.name for n in pool_nodes(fast, "mix")])


@pytest.mark.parametrize(("tags", "counted"), [
    ({"team": "render"}, True),
    ({"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "someone-else"}, True),
    ({"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "<cluster>", "min": "0", "max": "6"}, False),
], ids=["not marked", "marked for another cluster", "marked for this cluster"])
def test_a_machine_deleted_counts_as_unmanaged_unless_the_pool_is_marked_for_this_cluster(
    sandbox_factory: SandboxFactory, tags: dict[str, str], counted: bool,
) -> None:
    doc = mix_doc()
    marked = {k: (doc["cluster_name"] if v == "<cluster>" else v) for k, v in tags.items()}
    doc["node_groups"][-1]["agent_pool"]["tags"] = marked
    server = sandbox_factory(doc, clock=ManualClock(SANDBOX_START))
    client = aks_client(server)
    doomed = sorted(m.name for m in client.machines.list(AKS_RG, CLUSTER, "mix"))[0]
    client.agent_pools.begin_delete_machines(
        AKS_RG, CLUSTER, "mix", AgentPoolDeleteMachinesParameter(machine_names=[doomed]), polling=False)
    touched = server.world.report()["unmanaged_nodes_touched"]
    assert (doomed in touched) == counted
