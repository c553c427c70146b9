"""Instances with more than one NIC, through the real Compute and Network adapters against the sandbox's ARM double:
every private IP of an instance is listed (the primary NIC's first), and a node that registered with a secondary
NIC's address (kubeadm's `--node-ip`) maps to its own instance by IP, as one registered with the primary's does."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.compute import VmssCompute
from shared.adapters.flex_compute import FlexCompute
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import Node, NodeGroup
from shared.engine.node_mapping import IP
from shared.services.mapping import map_cluster
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

PRIMARY, SECONDARY = "10.224.0.0/16", "10.225.0.0/16"


def _scenario(orchestration: str, node_ip: str) -> dict[str, Any]:
    return {
        "name": "two-nics", "cluster_name": "two-nics", "flavour": "kubeadm", "arm_throttling": False,
        "arm_page_size": 2, "boot_delay": "60s",
        "node_groups": [{
            "resource_group": "rg-nics", "name": "workers", "vm_size": "Standard_D4s_v5", "orchestration": orchestration,
            "allocatable": {"cpu": "3860m", "memory": "13.8Gi"}, "min": 1, "max": 6, "initial": 3,
            # The secondary NIC is declared first: the model's order is not what makes a NIC primary.
            "nics": [{"name": "storage", "subnet": SECONDARY}, {"name": "nodes", "subnet": PRIMARY, "primary": True}],
            "node_ip": node_ip,
        }],
    }


@dataclass
class Cluster:
    server: SandboxServer
    provider: Any
    group: NodeGroup
    subnet: str  # where the nodes' InternalIPs are

    def nodes(self) -> list[Node]:
        cluster = KubernetesCluster.from_settings(load_settings(self.server.env()))
        try:
            return cluster.list_nodes()
        finally:
            cluster.close()

    def instance_of_node(self) -> dict[str, str]:
        """The world's truth: node name -> the ARM id of the VM it runs on."""
        (sim,) = self.server.world.scale_sets(self.server.world.subscription_id, "rg-nics")
        return {i.node_name: i.arm_id for i in self.server.world.instances(sim)}


@pytest.fixture(params=[(o, n) for o in ("Uniform", "Flexible") for n in ("nodes", "storage")],
                ids=lambda p: f"{p[0]}-registers-{'primary' if p[1] == 'nodes' else 'secondary'}")
def cluster(request: pytest.FixtureRequest, sandbox_factory: SandboxFactory) -> Iterator[Cluster]:
    orchestration, node_ip = request.param
    server = sandbox_factory(_scenario(orchestration, node_ip), clock=ManualClock(SANDBOX_START))
    settings = load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s"})
    lister = VmssCompute.from_settings(settings)  # discovery lists both modes and stamps Flexible ones
    try:
        (group,) = lister.list_node_groups()
    finally:
        lister.close()
    provider = FlexCompute.from_settings(settings) if orchestration == "Flexible" else VmssCompute.from_settings(settings)
    yield Cluster(server, provider, group, SECONDARY if node_ip == "storage" else PRIMARY)
    provider.close()


def test_every_instance_lists_both_addresses_the_primary_nics_first(cluster: Cluster) -> None:
    ips = cluster.provider.list_private_ips(cluster.group)
    assert sorted(ips) == sorted(cluster.instance_of_node().values())
    for addresses in ips.values():
        assert len(addresses) == 2 and len(set(addresses)) == 2
        assert ipaddress.ip_address(addresses[0]) in ipaddress.ip_network(PRIMARY)
        assert ipaddress.ip_address(addresses[1]) in ipaddress.ip_network(SECONDARY)


def test_each_node_maps_by_ip_to_the_instance_it_runs_on_whichever_nic_it_registered_with(cluster: Cluster) -> None:
    nodes = cluster.nodes()
    assert len(nodes) == 3
    assert all(ipaddress.ip_address(n.internal_ips[0]) in ipaddress.ip_network(cluster.subnet) for n in nodes)
    mapped = map_cluster(cluster.provider, nodes, [cluster.group])
    assert not mapped.mapping.unmanaged and not mapped.mapping.ambiguous
    found = {name: (m.instance_id, m.method) for name, m in mapped.mapping.mapped.items()}
    assert found == {name: (instance, IP) for name, instance in cluster.instance_of_node().items()}


def test_a_new_instance_gets_both_nics_and_its_node_maps_once_it_registers(cluster: Cluster) -> None:
    operation = cluster.provider.begin_resize(cluster.group, 4)
    cluster.server.clock.advance(90)  # boot_delay 60 s
    assert cluster.provider.get_resize_operation(operation.token).status == "Succeeded"
    group = cluster.provider.get_node_group(cluster.group.id)
    assert all(len(a) == 2 for a in cluster.provider.list_private_ips(group).values())
    mapped = map_cluster(cluster.provider, cluster.nodes(), [group])
    assert len(mapped.mapping.mapped) == 4 and not mapped.mapping.unmanaged and not mapped.mapping.ambiguous
    assert {n: m.instance_id for n, m in mapped.mapping.mapped.items()} == cluster.instance_of_node()
