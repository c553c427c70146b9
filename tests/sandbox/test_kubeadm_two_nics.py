"""The `kubeadm-two-nics` scenario through the real services in memory: nodes that registered with their VM's
secondary NIC address are each mapped by IP to their own instance, new ones included, and the pool grows for the
burst and shrinks back without a node left unmanaged or ambiguous, nothing evicted or killed."""

from __future__ import annotations

import ipaddress

from sandbox.model.scenario import load_scenario
from shared.engine.node_mapping import IP
from shared.services.mapping import map_cluster
from tests.memory_app import MemoryApp, memory_app

SECONDARY = ipaddress.ip_network("10.225.0.0/16")


def _instances(app: MemoryApp) -> dict[str, str]:
    """The world's truth: node name -> the instance it runs on (registered nodes only)."""
    (group,) = app.world.scale_sets(app.world.subscription_id, "rg-kubeadm-nics")
    return {i.node_name: str(i.instance_id) for i in app.world.instances(group) if i.node_registered}


def _check_mapping(app: MemoryApp) -> int:
    nodes = app.ports.cluster.list_nodes()
    assert nodes and all(ipaddress.ip_address(n.internal_ips[0]) in SECONDARY for n in nodes)
    mapped = map_cluster(app.ports.provider, nodes, app.ports.provider.list_node_groups())
    assert not mapped.mapping.unmanaged and not mapped.mapping.ambiguous
    assert {n: (m.instance_id, m.method) for n, m in mapped.mapping.mapped.items()} == {
        n: (i, IP) for n, i in _instances(app).items()}
    return len(nodes)


def test_nodes_registered_on_the_secondary_nic_are_mapped_grown_and_removed() -> None:
    scenario = load_scenario("kubeadm-two-nics")
    (group,) = scenario.node_groups
    assert group.node_ip == "storage" and not next(n for n in group.nics if n.name == "storage").primary
    app = memory_app(scenario, settings={"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s",
                                         "SCALE_DOWN_UNNEEDED_TIME": "2m", "SCALE_DOWN_DELAY_AFTER_ADD": "2m"})
    most = 0
    for tick in range(80):  # 40 minutes: both polls every 30 s, each action run as it is queued
        app.tick(30)
        if tick % 10 == 9:
            most = max(most, _check_mapping(app))
    report = app.world.report()
    assert most > 3  # the burst grew the pool
    assert report["nodes_by_group"]["rg-kubeadm-nics/workers"]["ready"] == 1  # and it shrank back
    assert report["running_pods_evicted"] == 0 and report["pods_killed"] == 0
    assert report["unmanaged_nodes_touched"] == {}
