"""FlexCompute without a server: member VMs listed without a name are read from their ARM id or left out.
(Against the sandbox's ARM double: tests/contract/test_backends.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine

from shared.adapters.credentials import StaticTokenCredential
from shared.adapters.flex_compute import FlexCompute
from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup

SET_ID = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/flex"
VM_ID = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/"
MEMBER = {"virtualMachineScaleSet": {"id": SET_ID}, "provisioningState": "Succeeded"}
# VirtualMachines_List entries: azure-rest-api-specs' MinimumSet example has an id and no name.
ONLY_ARM_ID = {"location": "eastus", "id": VM_ID + "flex_1a2b3c4d", "properties": MEMBER}
FULL = {"location": "eastus", "id": VM_ID + "flex_5e6f7a8b", "name": "flex_5e6f7a8b",
        "properties": {**MEMBER, "osProfile": {"computerName": "flex5e6f7a"}}}
NO_ID_AT_ALL = {"location": "eastus", "properties": {**MEMBER, "osProfile": {"computerName": "flex9c8d7e"}}}


def provider(entries: list[dict[str, Any]]) -> FlexCompute:
    client = ComputeManagementClient(StaticTokenCredential(), "sub", base_url="https://127.0.0.1:1")
    flex = FlexCompute(client, cluster_name="demo", resource_groups=["rg"], operation_wait=0)
    vms = [VirtualMachine(e) for e in entries]  # the SDK's model over the wire's JSON
    flex._client = SimpleNamespace(  # type: ignore[assignment]
        _config=client._config, virtual_machines=SimpleNamespace(list=lambda rg, **kw: vms))
    return flex


@pytest.mark.parametrize("entries,ids,warned", [
    ([ONLY_ARM_ID, FULL], ["flex_1a2b3c4d", "flex_5e6f7a8b"], False),
    ([NO_ID_AT_ALL, FULL], ["flex_5e6f7a8b"], True),
    ([{**NO_ID_AT_ALL, "id": SET_ID}], [], True),  # an id, but of no VM
], ids=["only an ARM id", "no id at all", "the scale set's id"])
def test_a_member_listed_without_a_name_is_read_from_its_arm_id_or_left_out(
    caplog: pytest.LogCaptureFixture, entries: list[dict[str, Any]], ids: list[str], warned: bool
) -> None:
    group = NodeGroup("rg", "flex", 0, 10, 2, "Standard_D4s_v5", provider=FLEXIBLE_SCALE_SET)
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        listed = provider(entries).list_instances(group)
    assert [i.instance_id for i in listed] == ids
    assert ("rg/flex: a listed VM has no instance id" in caplog.text) == warned
    if warned:
        assert "flex9c8d7e" in caplog.text
