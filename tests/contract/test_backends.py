"""Every node-group backend against the sandbox's ARM double: the same assertions for each provider.

Uniform scale sets (VmssCompute), Flexible scale sets (FlexCompute) and AKS node pools (AksAgentPools),
each over a world of one group of that kind in each cluster flavour it serves: discovery finds the group
stamped with its kind; its instances carry the keys node mapping needs, and every node of the group maps
to exactly one of them; growing adds instances; deleting named instances removes exactly those and lowers
the size; operation tokens resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.aks_pools import AksAgentPools
from shared.adapters.compute import VmssCompute
from shared.adapters.flex_compute import FlexCompute
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import AKS_AGENT_POOL, FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, NodeGroup
from shared.ports import CHANGED_SINCE_READ, ComputeError, NodeGroupProvider, Operation
from shared.services.mapping import map_cluster
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}


def _settings(server: SandboxServer) -> Any:
    # No waiting on an operation inside a call: the test advances the clock and checks the token.
    return load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s"})


def _scenario(flavour: str, **group: Any) -> dict[str, Any]:
    # An agent pool's scale set is named and placed by AKS (sandbox.model.agent_pools): no name or resource group.
    where = {} if "agent_pool" in group else {"resource_group": "rg-b", "name": "farm"}
    return {
        "name": "backends", "cluster_name": "backends", "flavour": flavour, "arm_throttling": False,
        "arm_page_size": 2, "boot_delay": "60s", "delete_delay": "20s",
        "node_groups": [{**where, "vm_size": "Standard_D4s_v5", "allocatable": _D4,
                         "min": 1, "max": 6, "initial": 3, **group}],
    }


@dataclass
class Backend:
    kind: str
    scenario: dict[str, Any]
    make: Callable[[SandboxServer], Any]
    settings: dict[str, str]


BACKENDS = {
    "uniform/aks-engine": Backend(UNIFORM_SCALE_SET, _scenario("aks-engine"),
                                  lambda s: VmssCompute.from_settings(_settings(s)), {}),
    "uniform/k3s": Backend(UNIFORM_SCALE_SET, _scenario("k3s"),
                           lambda s: VmssCompute.from_settings(_settings(s)), {}),
    "uniform/kubeadm": Backend(UNIFORM_SCALE_SET, _scenario("kubeadm"),
                               lambda s: VmssCompute.from_settings(_settings(s)), {}),
    "flexible/aks-engine": Backend(FLEXIBLE_SCALE_SET, _scenario("aks-engine", orchestration="Flexible"),
                                   lambda s: FlexCompute.from_settings(_settings(s)), {}),
    "flexible/kubeadm": Backend(FLEXIBLE_SCALE_SET, _scenario("kubeadm", orchestration="Flexible"),
                                lambda s: FlexCompute.from_settings(_settings(s)), {}),
    # The pool's tags mark it (AKS copies them to its scale set); the sandbox's env sets MANAGE_AKS_POOLS.
    "aks-agentpool": Backend(AKS_AGENT_POOL, _scenario("aks-engine", agent_pool="farm"),
                             lambda s: AksAgentPools.from_settings(_settings(s), credential=_credential(s)), {}),
}


def _credential(server: SandboxServer) -> Any:
    from shared.adapters.credentials import make_azure_credential

    return make_azure_credential(_settings(server))


@dataclass
class Side:
    server: SandboxServer
    clock: ManualClock
    provider: NodeGroupProvider
    group: NodeGroup

    def settle(self, operation: Operation, check: Callable[[str], Operation], seconds: float = 120) -> Operation:
        self.clock.advance(seconds)
        return check(operation.token)

    def nodes(self) -> list[Any]:
        cluster = KubernetesCluster.from_settings(load_settings(self.server.env()))
        try:
            return cluster.list_nodes()
        finally:
            cluster.close()


@pytest.fixture(params=sorted(BACKENDS))
def side(request: pytest.FixtureRequest, sandbox_factory: SandboxFactory) -> Iterator[Side]:
    backend = BACKENDS[request.param]
    clock = ManualClock(SANDBOX_START)
    server = sandbox_factory(backend.scenario, clock=clock)
    provider = backend.make(server)
    discovered = _discover(server, provider)
    (group,) = [g for g in discovered if g.name == "farm"]
    assert group.provider == backend.kind
    yield Side(server, clock, provider, group)
    provider.close()


def _discover(server: SandboxServer, provider: Any) -> list[NodeGroup]:
    # Flexible sets are discovered by VmssCompute's listing (one listing for both modes).
    if isinstance(provider, FlexCompute):
        lister = VmssCompute.from_settings(_settings(server))
        try:
            return lister.list_node_groups()
        finally:
            lister.close()
    return provider.list_node_groups()


def test_instances_carry_the_keys_every_node_maps_by(side: Side) -> None:
    instances = side.provider.list_instances(side.group)
    assert len(instances) == side.group.capacity == 3
    assert all(i.instance_id and i.computer_name and i.resource_id for i in instances)
    nodes = side.nodes()
    mapped = map_cluster(side.provider, nodes, [side.group])
    ours = [n for n in mapped.nodes if n.instance is not None]
    assert len(ours) == 3 and not mapped.mapping.ambiguous
    assert {n.instance.instance_id for n in ours} == {i.instance_id for i in instances}  # type: ignore[union-attr]
    for instance in instances:
        assert side.provider.get_instance(side.group, instance.instance_id) == instance


def test_private_ips_are_the_nodes_internal_ips(side: Side) -> None:
    ips = side.provider.list_private_ips(side.group)
    nodes = {n.name: n for n in side.nodes()}
    mapped = map_cluster(side.provider, list(nodes.values()), [side.group], method="ip")
    assert len([n for n in mapped.nodes if n.instance is not None]) == 3
    for node in mapped.nodes:
        if node.instance is not None:
            assert set(node.internal_ips) & set(ips[node.instance.instance_id])


def test_a_resize_from_a_read_another_write_overtook_is_refused(side: Side) -> None:
    """Every backend sends its group's version (the scale set's etag, the agent pool's eTag) with a resize."""
    assert side.group.etag
    grown = side.provider.begin_resize(side.group, 4)  # another writer, from the same read
    side.settle(grown, side.provider.get_resize_operation)
    with pytest.raises(ComputeError) as caught:
        side.provider.begin_resize(side.group, 2)  # computed from the older read: would remove two instances
    assert caught.value.code == CHANGED_SINCE_READ
    fresh = side.provider.get_node_group(side.group.id)
    assert fresh is not None and fresh.capacity == 4 and fresh.etag != side.group.etag


def test_grow_then_delete_exactly_the_named_instance(side: Side) -> None:
    grown = side.provider.begin_resize(side.group, 4)
    assert side.settle(grown, side.provider.get_resize_operation).status == "Succeeded"
    group = side.provider.get_node_group(side.group.id)
    assert group is not None and group.capacity == 4
    before = {i.instance_id for i in side.provider.list_instances(group)}
    assert len(before) == 4
    victim = sorted(before)[0]
    deleted = side.provider.begin_delete_instances(group, [victim])
    assert side.settle(deleted, side.provider.get_delete_operation).status == "Succeeded"
    after = {i.instance_id for i in side.provider.list_instances(group) if not i.deleting}
    assert after == before - {victim}
    assert side.provider.get_instance(group, victim) is None
    group = side.provider.get_node_group(side.group.id)
    assert group is not None and group.capacity == 3


def test_deallocate_then_start_keeps_the_instance(side: Side) -> None:
    (first, *_) = sorted(i.instance_id for i in side.provider.list_instances(side.group))
    if side.group.provider == AKS_AGENT_POOL:
        # AKS deallocates through the pool's own scaleDownMode: refused, with a code the executor reports.
        with pytest.raises(ComputeError) as refused:
            side.provider.begin_deallocate_instances(side.group, [first])
        assert refused.value.code == "OperationNotAllowed"
        return
    stopped = side.provider.begin_deallocate_instances(side.group, [first])
    assert side.settle(stopped, side.provider.get_deallocate_operation).status == "Succeeded"
    started = side.provider.begin_start_instances(side.group, [first])
    assert side.settle(started, side.provider.get_start_operation).status == "Succeeded"
    assert side.provider.get_instance(side.group, first) is not None


def test_an_allocation_failure_is_a_failed_operation_with_its_code(side: Side) -> None:
    """Backoff and fallback read the code of a failed grow the same way whatever the backend."""
    scale_set = next(iter(side.server.world._groups.values())).spec  # noqa: SLF001 - the one group's scale set
    side.server.world.fail_next_scale_up(scale_set.name, code="QuotaExceeded", resource_group=scale_set.resource_group)
    grown = side.provider.begin_resize(side.group, 5)
    if grown.status == "InProgress":
        grown = side.settle(grown, side.provider.get_resize_operation)
    assert (grown.status, grown.error_code) == ("Failed", "QuotaExceeded") and grown.error_message
