"""What the providers read for drift (engine.drift), without a server: a Uniform instance's `latestModelApplied`,
a Flexible member's (ARM's VM has none: None), and an AKS pool's `nodeImageVersion`. The sandbox's ARM double
serves the field after a model change: the last test, over HTTPS."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from azure.mgmt.compute.models import VirtualMachine

from shared.adapters.aks_pools import AksAgentPools
from shared.adapters.compute import VmssCompute
from shared.adapters.flex_compute import _member
from sandbox.clock import ManualClock
from shared.domain import UNIFORM_SCALE_SET, NodeGroup
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters import sandbox_world
from tests.shared.adapters.uniform_vms import uniform

CLUSTER_ID = "/subscriptions/s/resourceGroups/rg-aks/providers/Microsoft.ContainerService/managedClusters/prod"


@pytest.mark.parametrize("wire, expected", [
    ({"latestModelApplied": True}, True),
    ({"latestModelApplied": False}, False),
    ({}, None),  # not reported: never taken for drift
], ids=["latest", "stale", "absent"])
def test_a_uniform_instance_list_reports_whether_the_latest_model_is_applied(wire: dict[str, Any],
                                                                            expected: bool | None) -> None:
    vm = {"location": "westeurope", "instanceId": "3", "properties": {"provisioningState": "Succeeded", **wire}}
    group = NodeGroup("rg", "pool", 0, 10, 1, "Standard_D4s_v5", provider=UNIFORM_SCALE_SET, location="westeurope")
    (listed,) = uniform([vm]).list_instances(group)
    assert listed.latest_model_applied is expected


def test_a_flexible_member_has_no_latest_model_field() -> None:
    # VirtualMachineProperties carries no latestModelApplied (azure-rest-api-specs): a member's model drift is
    # unknown, so it never drifts by model.
    vm = VirtualMachine({"location": "westeurope", "name": "pool_ab12", "id": "/x/virtualMachines/pool_ab12",
                         "properties": {"provisioningState": "Succeeded", "latestModelApplied": False}})
    assert _member(vm).latest_model_applied is None


@pytest.mark.parametrize("version", ["AKSUbuntu-2204gen2containerd-202611.10.0", None])
def test_an_aks_pool_reports_its_node_image_version(version: str | None) -> None:
    client = SimpleNamespace(_config=SimpleNamespace(base_url="https://management.azure.com"),
                             managed_clusters=SimpleNamespace(get=lambda rg, name: SimpleNamespace(location="westeurope")))
    pools = AksAgentPools(client, cluster_id=CLUSTER_ID, cluster_name="prod", named_pools={}, operation_wait=0)
    tags = {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "prod", "min": "0", "max": "8"}
    pool = SimpleNamespace(name="render", tags=tags, count=2, vm_size="Standard_D4s_v5", enable_auto_scaling=False,
                           mode="User", node_labels={}, node_taints=[], availability_zones=[],
                           type_properties_type="VirtualMachineScaleSets", node_image_version=version)
    group = pools._as_group(pool)
    assert group is not None and group.node_image_version == (version or "")


# --- against the sandbox's ARM over HTTPS ---------------------------------------------------


def test_a_model_change_reads_as_stale_instances_over_the_wire(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(sandbox_world.scenario(model_changes=[{"at": "1m", "scale_set": "pool-a"}]),
                             clock=ManualClock(SANDBOX_START))
    compute = VmssCompute.from_settings(sandbox_world.settings_for(server, ARM_OPERATION_WAIT="0s"))
    try:
        group = next(g for g in compute.list_node_groups() if g.name == "pool-a")
        assert {i.latest_model_applied for i in compute.list_instances(group)} == {True}
        server.world.advance_by(61)
        changed = next(g for g in compute.list_node_groups() if g.name == "pool-a")
        assert changed.etag != group.etag  # the model's write moved the etag (services.drift reads again)
        assert {i.latest_model_applied for i in compute.list_instances(changed)} == {False}
    finally:
        compute.close()
