"""AksAgentPools without a server: which pools are groups, what is refused and why, and the template a pool's
VM size, labels and taints give the engine. (Against the sandbox's agentPools API: tests/contract/test_backends.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from shared.adapters.aks_pools import AksAgentPools
from shared.domain import Taint
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


@pytest.mark.parametrize("case_id,the_pool,named,limits,refused", [
    ("tagged", pool(), None, (0, 8), ""),
    ("named in AKS_NODE_POOLS, untagged", pool(tags={}), {"render": (1, 20)}, (1, 20), ""),
    ("neither", pool(tags={}), None, None, None),
    ("AKS autoscales it", pool(enable_auto_scaling=True), None, (0, 8), "AKS cluster autoscaler is on"),
    ("a VirtualMachines pool", pool(type_properties_type="VirtualMachines"), None, (0, 8), "VirtualMachineScaleSets"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_which_pools_are_groups_and_which_are_refused(case_id, the_pool, named, limits, refused) -> None:  # type: ignore[no-untyped-def]
    group = provider(named)._as_group(the_pool)
    if limits is None:
        assert group is None
        return
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
    group = aks._as_group(pool())
    assert group is not None
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        listed = aks.list_instances(group)
    assert [i.instance_id for i in listed] == ids and [i.computer_name for i in listed] == ids
    assert ("rg-aks/render: a listed VM has no instance id" in caplog.text) == warned
