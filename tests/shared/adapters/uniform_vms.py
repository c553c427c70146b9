"""A Uniform scale-set adapter whose VMSS VMs list returns given VMs (the wire's JSON through the SDK's model)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachineScaleSetVM

from shared.adapters.compute import VmssCompute
from shared.adapters.credentials import StaticTokenCredential


def uniform(vms: list[dict[str, Any]]) -> VmssCompute:
    client = ComputeManagementClient(StaticTokenCredential(), "sub", base_url="https://127.0.0.1:1")
    compute = VmssCompute(client, cluster_name="demo", resource_groups=["rg"], operation_wait=0)
    listed = [VirtualMachineScaleSetVM(vm) for vm in vms]  # the SDK's model over the wire's JSON
    compute._client = SimpleNamespace(  # type: ignore[assignment]
        _config=client._config, virtual_machine_scale_set_vms=SimpleNamespace(list=lambda rg, name, **kw: listed))
    return compute
