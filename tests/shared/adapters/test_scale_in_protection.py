"""Scale-in protection in the providers without a server: what a Uniform instance list reports, and the backends
without protection (Flexible, AKS-managed pools) refusing with their own code before any ARM call.
(The Uniform write against the sandbox's ARM double: tests/contract/test_node_group_provider.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from azure.mgmt.compute import ComputeManagementClient

from shared.adapters.aks_pools import AksAgentPools
from shared.adapters.credentials import StaticTokenCredential
from shared.adapters.flex_compute import FlexCompute
from shared.domain import AKS_AGENT_POOL, FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, NodeGroup
from shared.ports import SCALE_IN_PROTECTION_UNSUPPORTED, ComputeError
from tests.shared.adapters.uniform_vms import uniform

CLUSTER_ID = "/subscriptions/s/resourceGroups/rg-aks/providers/Microsoft.ContainerService/managedClusters/prod"


def group(kind: str) -> NodeGroup:
    return NodeGroup("rg", "pool", 0, 10, 2, "Standard_D4s_v5", provider=kind, location="westeurope")


def vm(instance_id: str, policy: dict[str, bool] | None) -> dict[str, Any]:
    properties: dict[str, Any] = {"provisioningState": "Succeeded"}
    if policy is not None:
        properties["protectionPolicy"] = policy
    return {"location": "westeurope", "instanceId": instance_id, "properties": properties}


@pytest.mark.parametrize("policy,scale_in,scale_set_actions", [
    (None, False, False),  # never protected: ARM leaves the policy out
    ({"protectFromScaleIn": False, "protectFromScaleSetActions": False}, False, False),
    ({"protectFromScaleIn": True}, True, False),
    ({"protectFromScaleIn": True, "protectFromScaleSetActions": True}, True, True),
    ({"protectFromScaleSetActions": True}, True, True),  # it implies scale-in protection
], ids=["no policy", "both off", "scale-in", "both", "scale-set actions only"])
def test_a_uniform_instance_list_reports_its_protection(policy: dict[str, bool] | None, scale_in: bool,
                                                        scale_set_actions: bool) -> None:
    (listed,) = uniform([vm("3", policy)]).list_instances(group(UNIFORM_SCALE_SET))
    assert (listed.protected_from_scale_in, listed.protected_from_scale_set_actions) == (scale_in, scale_set_actions)


def flexible() -> FlexCompute:
    client = ComputeManagementClient(StaticTokenCredential(), "sub", base_url="https://127.0.0.1:1")
    flex = FlexCompute(client, cluster_name="demo", resource_groups=["rg"], operation_wait=0)
    flex._client = SimpleNamespace(_config=client._config)  # type: ignore[assignment]  # any ARM call fails
    return flex


def aks_pools() -> AksAgentPools:
    client = SimpleNamespace(_config=SimpleNamespace(base_url="https://management.azure.com"))  # no ARM call works
    return AksAgentPools(client, cluster_id=CLUSTER_ID, cluster_name="prod", named_pools={}, operation_wait=0)


@pytest.mark.parametrize("make,kind", [(flexible, FLEXIBLE_SCALE_SET), (aks_pools, AKS_AGENT_POOL)],
                         ids=["Flexible scale set", "AKS-managed pool"])
@pytest.mark.parametrize("protect", [True, False])
def test_a_backend_without_protection_says_so_and_calls_nothing(make: Any, kind: str, protect: bool) -> None:
    provider = make()
    assert provider.supports_scale_in_protection(group(kind)) is False
    with pytest.raises(ComputeError) as caught:  # an ARM call would have failed with AttributeError instead
        provider.set_scale_in_protection(group(kind), "pool_1a2b3c4d", protect=protect)
    assert caught.value.code == SCALE_IN_PROTECTION_UNSUPPORTED and not caught.value.transient


def test_the_uniform_provider_refuses_a_flexible_group_it_was_handed() -> None:
    """Discovery stamps Flexible sets with their own kind; a Flexible group routed here by mistake is refused."""
    compute = uniform([])
    assert compute.supports_scale_in_protection(group(FLEXIBLE_SCALE_SET)) is False
    with pytest.raises(ComputeError) as caught:
        compute.set_scale_in_protection(group(FLEXIBLE_SCALE_SET), "flex_1a2b3c4d", protect=True)
    assert caught.value.code == SCALE_IN_PROTECTION_UNSUPPORTED
