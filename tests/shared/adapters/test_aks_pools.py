"""AksAgentPools without a server: which pools are groups, what is refused and why, and the template a pool's
VM size, labels and taints give the engine. (Against the sandbox's agentPools API: tests/contract/test_backends.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from shared.adapters.aks_pools import AksAgentPools, manual_counts
from shared.adapters.retail_prices import RetailPrices
from shared.domain import Taint
from shared.ports import ComputeError
from shared.engine.templates import template_from_tags

CLUSTER_ID = "/subscriptions/s/resourceGroups/rg-aks/providers/Microsoft.ContainerService/managedClusters/prod"
OURS = {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "prod", "min": "0", "max": "8"}


def provider(named: dict[str, tuple[int, int]] | None = None) -> AksAgentPools:
    client = SimpleNamespace(_config=SimpleNamespace(base_url="https://management.azure.com"),
                             managed_clusters=SimpleNamespace(get=lambda rg, name: SimpleNamespace(location="westeurope")))
    return AksAgentPools(client, cluster_id=CLUSTER_ID, cluster_name="prod", named_pools=named or {},
                         operation_wait=0)


def pool(name: str = "render", **properties: Any) -> SimpleNamespace:
    fields = {"tags": OURS, "count": 2, "vm_size": "Standard_D4s_v5", "enable_auto_scaling": False, "mode": "User",
              "node_labels": {}, "node_taints": [], "availability_zones": ["1", "2"], "type_properties_type":
              "VirtualMachineScaleSets", **properties}
    return SimpleNamespace(name=name, **fields)


D2, D4, D8 = "Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"


def vm_pool(*counts: tuple[str, int], autoscale: list[Any] | None = None, **properties: Any) -> SimpleNamespace:
    """A VirtualMachines pool as the agentPools API returns it (azure-rest-api-specs: no vmSize, a count per size
    in virtualMachinesProfile.scale.manual)."""
    manual = [SimpleNamespace(size=size, count=count) for size, count in counts]
    profile = SimpleNamespace(scale=SimpleNamespace(manual=manual, autoscale=autoscale))
    fields = {"type_properties_type": "VirtualMachines", "vm_size": None, "count": sum(c for _, c in counts),
              "availability_zones": None, "virtual_machines_profile": profile, **properties}
    return pool(**fields)


@pytest.mark.parametrize("case_id,the_pool,named,limits,refused", [
    ("tagged", pool(), None, (0, 8), ""),
    ("named in AKS_NODE_POOLS, untagged", pool(tags={}), {"render": (1, 20)}, (1, 20), ""),
    ("neither", pool(tags={}), None, None, None),
    ("AKS autoscales it", pool(enable_auto_scaling=True), None, (0, 8), "AKS cluster autoscaler is on"),
    ("a VirtualMachines pool with no manual profile", pool(type_properties_type="VirtualMachines"), None, (0, 8),
     "no manual scale profile"),
    ("a VirtualMachines pool AKS autoscales", vm_pool((D2, 2), autoscale=[SimpleNamespace(size=D2)]), None, (0, 8),
     "AKS autoscales sizes"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_which_pools_are_groups_and_which_are_refused(case_id, the_pool, named, limits, refused) -> None:  # type: ignore[no-untyped-def]
    groups = provider(named)._as_groups(the_pool)
    if limits is None:
        assert groups == []
        return
    (group,) = groups
    assert group is not None and (group.min_size, group.max_size) == limits
    assert (group.id, group.provider, group.capacity, group.location) == ("rg-aks/render", "aks-agentpool", 2,
                                                                          "westeurope")
    assert (refused in group.refused) if refused else group.refused == ""


def test_a_pool_s_template_has_its_labels_taints_and_vm_size() -> None:
    group = provider()._as_group(pool(node_labels={"workload": "render", "team/x": "a_b"},
                                      node_taints=["render=true:NoSchedule", "spot:PreferNoSchedule"]))
    assert group is not None
    template = template_from_tags(group)
    assert template is not None and template.allocatable.cpu_milli > 0  # from the VM size's table
    assert {"agentpool": "render", "kubernetes.azure.com/agentpool": "render", "kubernetes.azure.com/mode": "user",
            "workload": "render", "team/x": "a_b"}.items() <= dict(template.labels).items()
    assert set(template.taints) == {Taint("render", "true", "NoSchedule"), Taint("spot", "", "PreferNoSchedule")}


MACHINES = f"{CLUSTER_ID}/agentPools/render/machines/"
VMSS_VM = "/subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-render-vmss"


def machine(name: str | None, machine_id: str | None, vm: str) -> SimpleNamespace:
    """A Machines_List entry (azure-rest-api-specs MachineList.json): its own id, and its VM's in resourceId."""
    return SimpleNamespace(name=name, id=machine_id, properties=SimpleNamespace(
        resource_id=f"{VMSS_VM}/virtualMachines/{vm}", provisioning_state="Succeeded",
        network=SimpleNamespace(ip_addresses=[SimpleNamespace(ip="10.224.0.4", family="IPv4")])))


@pytest.mark.parametrize("machines,ids,warned", [
    ([machine(None, MACHINES + "aks-render-123-vmss000000", "0")], ["aks-render-123-vmss000000"], False),
    ([machine(None, None, "0"), machine("aks-render-123-vmss000001", MACHINES + "aks-render-123-vmss000001", "1")],
     ["aks-render-123-vmss000001"], True),
], ids=["name read from the machine's id, not its VM's", "neither: left out"])
def test_a_machine_listed_without_a_name_is_read_from_its_arm_id_or_left_out(
    caplog: pytest.LogCaptureFixture, machines: list[SimpleNamespace], ids: list[str], warned: bool
) -> None:
    aks = provider()
    aks._client.machines = SimpleNamespace(list=lambda rg, cluster, pool: machines)  # type: ignore[attr-defined]
    (group,) = aks._as_groups(pool())
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        listed = aks.list_instances(group)
    assert [i.instance_id for i in listed] == ids and [i.computer_name for i in listed] == ids
    assert ("rg-aks/render: a listed VM has no instance id" in caplog.text) == warned


RESOURCE_TAG = "k8s.io_cluster-autoscaler_node-template_resources_cpu"


@pytest.mark.parametrize("counts,limits", [
    (((D2, 1), (D4, 0), (D8, 2)), (0, 8)),
    (((D8, 3), (D2, 0)), (2, 5)),
    (((D4, 6), (D2, 1)), (1, 7)),  # already at the pool's max
    (((D2, 0),), (1, 3)),
], ids=["three sizes", "min above the others", "at max", "one size"])
def test_a_virtual_machines_pool_is_one_lane_per_size(counts: tuple[tuple[str, int], ...],
                                                       limits: tuple[int, int]) -> None:
    tags = {**OURS, "min": str(limits[0]), "max": str(limits[1]), RESOURCE_TAG: "4"}
    lanes = provider()._as_groups(vm_pool(*counts, tags=tags, node_labels={"workload": "render"}))
    total = sum(c for _, c in counts)
    assert [(g.lane, g.vm_size, g.capacity) for g in lanes] == [(s, s, c) for s, c in counts]
    for lane in lanes:
        others = total - lane.capacity
        assert lane.id == f"rg-aks/render~{lane.lane}" and lane.parent_id == "rg-aks/render"
        assert lane.lanes == tuple(s for s, _ in counts) and lane.allocation_strategy == "" and not lane.refused
        # Together the lanes stay within the pool's limits: each lane's bounds are what the others leave.
        assert lane.min_size + others >= limits[0] or lane.min_size == 0
        assert lane.max_size + others == max(limits[1], total) or lane.max_size == lane.capacity
        assert 0 <= lane.min_size <= lane.max_size and lane.capacity <= lane.max_size
        assert RESOURCE_TAG not in lane.tags  # one size's resources would mislead the others
        template = template_from_tags(lane)
        assert template is not None and dict(template.labels)["workload"] == "render"


def sized_machine(name: str, size: str | None, sdk_shape: bool) -> Any:
    """A machine of a VirtualMachines pool: `properties.hardware.vmSize` as the SDK model keeps it (a mapping)
    or as a typed model would (attributes)."""
    vm = f"/subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/{name}"
    hardware = None if size is None else ({"vmSize": size} if sdk_shape else SimpleNamespace(vm_size=size))
    if sdk_shape:
        from azure.mgmt.containerservice.models import MachineProperties

        properties: Any = MachineProperties({"resourceId": vm, **({"hardware": hardware} if hardware else {})})
    else:
        properties = SimpleNamespace(resource_id=vm, provisioning_state="Succeeded", network=None, hardware=hardware)
    return SimpleNamespace(name=name, id=MACHINES + name, properties=properties)


@pytest.mark.parametrize("sdk_shape", [True, False], ids=["sdk model", "typed"])
def test_a_lane_lists_and_gets_the_machines_of_its_size(caplog: pytest.LogCaptureFixture, sdk_shape: bool) -> None:
    machines = [sized_machine("m0", D2, sdk_shape), sized_machine("m1", D8, sdk_shape),
                sized_machine("m2", D8, sdk_shape), sized_machine("m3", None, sdk_shape)]
    aks = provider()
    preview = SimpleNamespace(machines=SimpleNamespace(
        list=lambda rg, cluster, name: machines,
        get=lambda rg, cluster, name, machine: next(m for m in machines if m.name == machine)))
    aks._machines_client = preview  # type: ignore[attr-defined]
    lanes = {g.lane: g for g in aks._as_groups(vm_pool((D2, 1), (D4, 0), (D8, 2)))}
    with caplog.at_level(logging.WARNING, logger="shared.adapters.aks_pools"):
        listed = {lane: aks.list_instances(g) for lane, g in lanes.items()}
    assert {lane: sorted(i.instance_id for i in found) for lane, found in listed.items()} == {
        D2: ["m0"], D4: [], D8: ["m1", "m2"]}
    assert all(i.vm_size == lane for lane, found in listed.items() for i in found)
    assert "m3" in caplog.text  # a machine of no known size is in no lane, and said
    for lane, group in lanes.items():
        for name in ("m0", "m1"):
            got = aks.get_instance(group, name)
            assert (got is not None) == (name in {i.instance_id for i in listed[lane]})


class _Sent(Exception):
    """The PUT was sent (what happens after it is other tests' business)."""


class _Pools:
    """agent_pools of a client: get returns the pool, begin_create_or_update records the body it PUTs."""

    def __init__(self, the_pool: SimpleNamespace) -> None:
        self.pool, self.put = the_pool, None

    def get(self, rg: str, cluster: str, name: str) -> SimpleNamespace:
        return self.pool

    def begin_create_or_update(self, rg: str, cluster: str, name: str, body: Any, **kw: Any) -> Any:
        self.put = body
        raise _Sent


@pytest.mark.parametrize("lane,capacity", [(D4, 3), (D8, 0), (D2, 1)])
def test_resizing_a_lane_changes_only_its_size_count(lane: str, capacity: int) -> None:
    counts = ((D2, 1), (D4, 0), (D8, 2))
    aks = provider()
    pools = _Pools(vm_pool(*counts, e_tag="e1"))
    aks._client.agent_pools = pools  # type: ignore[attr-defined]
    group = next(g for g in aks._as_groups(pools.pool) if g.lane == lane)
    with pytest.raises(_Sent):
        aks.begin_resize(group, capacity)
    assert pools.put is not None
    after = dict(manual_counts(pools.put))
    assert after == {**dict(counts), lane: capacity}
    assert pools.put.count == sum(after.values())


def test_resizing_a_size_the_pool_no_longer_has_is_refused() -> None:
    aks = provider()
    pools = _Pools(vm_pool((D2, 1), (D8, 2)))
    aks._client.agent_pools = pools  # type: ignore[attr-defined]
    lane = next(g for g in aks._as_groups(pools.pool) if g.lane == D8)
    pools.pool = vm_pool((D2, 1))
    with pytest.raises(ComputeError, match="no longer has size"):
        aks.begin_resize(lane, 3)
    assert pools.put is None


def test_each_lane_is_priced_by_its_own_size() -> None:
    prices = {D2: 0.096, D4: 0.192, D8: 0.384}
    aks = AksAgentPools(provider()._client, cluster_id=CLUSTER_ID, cluster_name="prod", named_pools={},
                        operation_wait=0, prices=RetailPrices(None, overrides=prices))
    lanes = aks._as_groups(vm_pool((D2, 1), (D4, 0), (D8, 2)))
    assert aks.list_prices(lanes) == {g.id: prices[g.lane] for g in lanes}
