"""FlexCompute's lanes of an instance mix without a server: a lane's instances are its size's, and the set's member
listing is reused by its lanes only at the same etag and within MEMBERS_REUSE_SECONDS (a one-size set always lists).
(Against the sandbox: tests/contract/test_instance_mix.py.)"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import InstanceViewStatus, VirtualMachine, VirtualMachineInstanceView

from shared.adapters import flex_compute
from shared.adapters.compute import VmssCompute
from shared.adapters.credentials import StaticTokenCredential
from shared.adapters.flex_compute import FlexCompute, list_members
from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup

SET_ID = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/flex"
D2, D16 = "Standard_D2s_v5", "Standard_D16s_v5"


def _vm(name: str, size: str) -> VirtualMachine:
    return VirtualMachine({"location": "eastus", "name": name, "id": f"/x/virtualMachines/{name}",
                           "properties": {"virtualMachineScaleSet": {"id": SET_ID}, "provisioningState": "Succeeded",
                                          "hardwareProfile": {"vmSize": size}}})


class Fake:
    def __init__(self) -> None:
        self.now = 100.0
        self.calls = 0
        self.vms = [_vm("flex_a", D2), _vm("flex_b", D2), _vm("flex_c", D16)]
        client = ComputeManagementClient(StaticTokenCredential(), "sub", base_url="https://127.0.0.1:1")
        self.flex = FlexCompute(client, cluster_name="demo", resource_groups=["rg"], operation_wait=0,
                                monotonic=lambda: self.now)
        self.flex._client = SimpleNamespace(  # type: ignore[assignment]
            _config=client._config, virtual_machines=SimpleNamespace(list=self._list))

    def _list(self, rg: str, **kw: Any) -> list[VirtualMachine]:
        self.calls += 1
        return list(self.vms)


SET = NodeGroup(resource_group="rg", name="flex", min_size=0, max_size=9, capacity=3, vm_size="Mix",
                provider=FLEXIBLE_SCALE_SET, etag='"4"')


def _lane(size: str, etag: str = '"4"') -> NodeGroup:
    return replace(SET, lane=size, vm_size=size, lanes=(D2, D16), etag=etag)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    flex_compute._recent_members.clear()


def test_a_lanes_instances_are_its_size_and_one_listing_serves_discovery_and_every_lane() -> None:
    fake = Fake()
    assert len(list_members(fake.flex, SET, reuse=True)) == 3  # discovery
    d2 = fake.flex.list_instances(_lane(D2))
    d16 = fake.flex.list_instances(_lane(D16))
    assert sorted(i.instance_id for i in d2) == ["flex_a", "flex_b"] and all(i.vm_size == D2 for i in d2)
    assert [i.instance_id for i in d16] == ["flex_c"]
    assert fake.calls == 1


@pytest.mark.parametrize("change", ["etag", "time", "power"])
def test_the_listing_is_read_again_after_a_change_a_while_or_for_power_states(change: str) -> None:
    fake = Fake()
    list_members(fake.flex, SET, reuse=True)
    fake.vms.append(_vm("flex_d", D2))
    etag = '"5"' if change == "etag" else '"4"'
    if change == "time":
        fake.now += flex_compute.MEMBERS_REUSE_SECONDS + 0.1
    listed = fake.flex.list_instances(_lane(D2, etag), power_state=change == "power")
    assert fake.calls == 2 and "flex_d" in {i.instance_id for i in listed}


def test_a_one_size_set_always_lists_and_its_instances_carry_no_size() -> None:
    fake = Fake()
    one = replace(SET, vm_size=D2)
    first = fake.flex.list_instances(one)
    fake.flex.list_instances(one)
    assert fake.calls == 2 and len(first) == 3 and {i.vm_size for i in first} == {""}


def test_a_failed_members_error_is_read_whichever_provider_listed_the_set_first() -> None:
    """Discovery lists an instance mix through the Uniform provider and the lanes reuse that listing: a failed
    member must carry its error there too, or a lane would see it failed without a cause."""
    fake = Fake()
    failed = _vm("flex_f", D2)
    failed.provisioning_state = "Failed"
    fake.vms.append(failed)
    viewed = _vm("flex_f", D2)
    viewed.instance_view = VirtualMachineInstanceView(statuses=[InstanceViewStatus(
        code="ProvisioningState/failed/ZonalAllocationFailed", message="no room")])
    fake.flex._client.virtual_machines.get = lambda rg, name, **kw: viewed  # type: ignore[attr-defined]
    uniform = VmssCompute(fake.flex._client, cluster_name="demo", resource_groups=["rg"],  # type: ignore[arg-type]
                          operation_wait=0, monotonic=lambda: fake.now)
    list_members(uniform, SET, reuse=True)  # discovery
    lane = {i.instance_id: i for i in fake.flex.list_instances(_lane(D2))}
    assert fake.calls == 1 and lane["flex_f"].error_code == "ZonalAllocationFailed"
