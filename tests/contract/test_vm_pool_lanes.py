"""An AKS VirtualMachines agent pool against the sandbox's agentPools API: one lane per size.

AksAgentPools lists the pool as one NodeGroup per VM size; each lane's instances are the machines of its
size, every node maps to the lane of its size by its providerID (a plain VM's), growing one lane changes
only its size's count, and deleting a machine of another lane removes exactly that machine from it. All
lanes share the pool's eTag: a write from an older read is refused whichever lane it is for. End to end, the
polls and the executor remove an idle machine of one size through its lane.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.aks_pools import AksAgentPools
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import NodeGroup, parent_group_id
from shared.ports import CHANGED_SINCE_READ, ComputeError
from shared.services.mapping import map_cluster
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.services.test_executor import BASE_SETTINGS, deliver, real_app_of

D2, D4, D8 = "Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"
COUNTS = {D2: 1, D4: 0, D8: 2}
SCENARIO: dict[str, Any] = {
    "name": "vm-pool-lanes", "cluster_name": "lanes", "flavour": "aks-engine", "arm_throttling": False,
    "arm_page_size": 2, "boot_delay": "60s", "delete_delay": "20s",
    "node_groups": [{
        "agent_pool": {"name": "mix", "type": "VirtualMachines", "tags": {
            "cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "lanes", "min": "1", "max": "6"}},
        "sizes": [
            {"vm_size": D2, "allocatable": {"cpu": "1900m", "memory": "5.5Gi", "pods": 30}, "count": COUNTS[D2]},
            {"vm_size": D4, "allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": 30}, "count": COUNTS[D4]},
            {"vm_size": D8, "allocatable": {"cpu": "7820m", "memory": "27Gi", "pods": 30}, "count": COUNTS[D8]},
        ],
    }],
}


class Pool:
    def __init__(self, server: SandboxServer, clock: ManualClock) -> None:
        self.server, self.clock = server, clock
        settings = load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s"})
        from shared.adapters.credentials import make_azure_credential

        self.provider = AksAgentPools.from_settings(settings, credential=make_azure_credential(settings))

    def lanes(self) -> dict[str, NodeGroup]:
        return {g.lane: g for g in self.provider.list_node_groups() if g.name == "mix"}

    def capacities(self) -> dict[str, int]:
        return {lane: g.capacity for lane, g in self.lanes().items()}

    def settle(self, token: str, check: Any) -> str:
        self.clock.advance(120)
        return str(check(token).status)

    def nodes(self) -> list[Any]:
        cluster = KubernetesCluster.from_settings(load_settings(self.server.env()))
        try:
            return cluster.list_nodes()
        finally:
            cluster.close()


@pytest.fixture
def pool(sandbox_factory: SandboxFactory) -> Iterator[Pool]:
    clock = ManualClock(SANDBOX_START)
    the_pool = Pool(sandbox_factory(SCENARIO, clock=clock), clock)
    yield the_pool
    the_pool.provider.close()


def test_the_pool_is_one_lane_per_size_within_its_limits(pool: Pool) -> None:
    lanes = pool.lanes()
    assert list(lanes) == list(COUNTS) and pool.capacities() == COUNTS
    total = sum(COUNTS.values())
    for lane, group in lanes.items():
        assert (group.vm_size, group.lanes, group.refused) == (lane, tuple(COUNTS), "")
        assert parent_group_id(group.id) == group.parent_id and group.id != group.parent_id
        assert pool.provider.get_node_group(group.id) == group
        others = total - group.capacity
        assert group.max_size + others <= 6 or group.max_size == group.capacity
        assert group.min_size + others >= 1 or group.min_size == 0
    assert pool.provider.get_node_group(lanes[D2].parent_id) is None  # the pool itself is its lanes
    assert {g.etag for g in lanes.values()} == {lanes[D2].etag} and lanes[D2].etag


def test_every_node_maps_to_the_lane_of_its_size(pool: Pool) -> None:
    lanes = pool.lanes()
    instances = {lane: pool.provider.list_instances(g) for lane, g in lanes.items()}
    assert {lane: len(found) for lane, found in instances.items()} == COUNTS
    assert all(i.vm_size == lane and i.resource_id for lane, found in instances.items() for i in found)
    nodes = pool.nodes()
    mapped = map_cluster(pool.provider, nodes, list(lanes.values()))
    assert not mapped.mapping.ambiguous
    ours = {n.name: n for n in nodes if mapped.mapping.instance_of(n.name) is not None}
    assert len(ours) == sum(COUNTS.values())
    for name, node in ours.items():
        found = mapped.mapping.instance_of(name)
        assert found is not None
        assert found.group_id == lanes[node.labels["node.kubernetes.io/instance-type"]].id
        assert "/providers/Microsoft.Compute/virtualMachines/" in node.provider_id  # a plain VM's providerID
    marked = {n.name: n.instance for n in mapped.nodes if n.instance is not None}
    assert {name: ref.group_id for name, ref in marked.items()} == {
        name: lanes[node.labels["node.kubernetes.io/instance-type"]].id for name, node in ours.items()}


def test_grow_one_size_then_delete_a_machine_of_another(pool: Pool) -> None:
    lanes = pool.lanes()
    grown = pool.provider.begin_resize(lanes[D4], 2)
    assert pool.settle(grown.token, pool.provider.get_resize_operation) == "Succeeded"
    assert pool.capacities() == {**COUNTS, D4: 2}
    fresh = pool.lanes()
    assert [i.vm_size for i in pool.provider.list_instances(fresh[D4])] == [D4, D4]

    before = {i.instance_id for i in pool.provider.list_instances(fresh[D8])}
    victim = sorted(before)[0]
    deleted = pool.provider.begin_delete_instances(fresh[D8], [victim])
    assert pool.settle(deleted.token, pool.provider.get_delete_operation) == "Succeeded"
    after = {i.instance_id for i in pool.provider.list_instances(fresh[D8]) if not i.deleting}
    assert after == before - {victim}
    assert pool.provider.get_instance(fresh[D8], victim) is None
    assert pool.capacities() == {**COUNTS, D4: 2, D8: COUNTS[D8] - 1}
    assert len(pool.provider.list_instances(fresh[D2])) == COUNTS[D2]


def test_a_lane_is_not_resized_from_a_read_another_lane_s_write_overtook(pool: Pool) -> None:
    lanes = pool.lanes()
    grown = pool.provider.begin_resize(lanes[D4], 1)
    pool.settle(grown.token, pool.provider.get_resize_operation)
    with pytest.raises(ComputeError) as caught:
        pool.provider.begin_resize(lanes[D2], 2)  # the pool changed since this lane was read
    assert caught.value.code == CHANGED_SINCE_READ
    assert pool.capacities() == {**COUNTS, D4: 1}


# -- the polls and the executor, end to end on a lane (Azurite for state and queue) ----------------------------

EXECUTOR_SCENARIO: dict[str, Any] = {
    **SCENARIO, "name": "vm-pool-lanes-executor",
    "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
    # Fills the D2 node and one D8 node; the other D8 node is idle.
    "workloads": [{"name": "web", "kind": "ReplicaSet", "count": 2, "requests": {"cpu": "1500m", "memory": "1Gi"},
                   "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}],
}


def test_an_idle_machine_of_one_size_is_removed_by_the_polls_and_the_executor(
    sandbox_factory: SandboxFactory, azurite: str, table_name: str, queue_name: str,
) -> None:
    """The utilisation poll finds the idle D8 node unneeded, the executor maps it afresh over its lane (a plain
    VM's providerID), drains it and deletes exactly that machine; the other sizes keep their counts."""
    app = real_app_of(sandbox_factory, azurite, table_name, queue_name, EXECUTOR_SCENARIO,
                      settings={**BASE_SETTINGS, "SCALE_DOWN_UNNEEDED_TIME": "5m"})
    ports, settings = app.context.ports, app.context.settings
    lanes = {g.lane: g for g in ports.provider.list_node_groups() if g.name == "mix"}
    assert {lane: g.capacity for lane, g in lanes.items()} == COUNTS
    busy = {p.node_name for p in ports.cluster.list_pods() if p.name.startswith("web")}
    d8_nodes = {n.name for n in ports.cluster.list_nodes() if n.labels.get("node.kubernetes.io/instance-type") == D8}
    [idle] = sorted(d8_nodes - busy)

    first = run_utilization_poll(ports, settings, now=app.clock.now())
    assert idle in first.plan.unneeded
    app.clock.advance(settings.scale_down_unneeded_time.total_seconds() + 60)
    second = run_utilization_poll(ports, settings, now=app.clock.now())
    assert [(r.node, r.group_id) for r in second.plan.removals] == [(idle, lanes[D8].id)]
    results = deliver(app, step_seconds=30)
    assert results and results[-1].outcome == "succeeded", results

    app.clock.advance(60)  # the machine's delete completes
    after = {g.lane: g.capacity for g in ports.provider.list_node_groups() if g.name == "mix"}
    assert after == {**COUNTS, D8: COUNTS[D8] - 1}
    assert idle not in {n.name for n in ports.cluster.list_nodes()}
    assert app.world.report()["running_pods_evicted"] == 0
    assert app.world.report()["unmanaged_nodes_touched"] == {}  # the pool is marked for us: its nodes are ours


def test_a_pod_only_the_big_size_holds_grows_that_lane_from_zero_through_the_executor(
    sandbox_factory: SandboxFactory, azurite: str, table_name: str, queue_name: str,
) -> None:
    """No D8 machine yet; a pending pod of 6 CPUs fits only a D8: the pending poll grows the D8 lane from zero,
    the executor PUTs the pool with only D8's count changed, and the pod runs on the new D8 node."""
    pool = copy.deepcopy(SCENARIO["node_groups"][0])
    pool["sizes"][2]["count"] = 0
    scenario = {**EXECUTOR_SCENARIO, "node_groups": [pool], "workloads": [
        {"name": "big", "kind": "Job", "count": 1, "at": "1m", "duration": "1h",
         "requests": {"cpu": "6", "memory": "8Gi"}}]}
    app = real_app_of(sandbox_factory, azurite, table_name, queue_name, scenario, settings=BASE_SETTINGS)
    ports, settings = app.context.ports, app.context.settings
    before = {g.lane: g.capacity for g in ports.provider.list_node_groups() if g.name == "mix"}
    assert before == {**COUNTS, D8: 0}
    app.clock.advance(90)  # the Job's pod arrives and stays pending

    [increase] = run_pending_poll(ports, settings, now=app.clock.now()).plan.increases
    assert (increase.group_id, increase.current_target, increase.new_target) == (f"{pool_id(ports)}~{D8}", 0, 1)
    results = deliver(app, step_seconds=30)
    assert results and results[-1].outcome == "succeeded", results

    after = {g.lane: g.capacity for g in ports.provider.list_node_groups() if g.name == "mix"}
    assert after == {**before, D8: 1}
    app.clock.advance(180)  # the D8 machine boots and the scheduler binds the pod
    [big] = [p for p in ports.cluster.list_pods() if p.name.startswith("big")]
    node = ports.cluster.get_node(big.node_name) if big.node_name else None
    assert node is not None and node.labels["node.kubernetes.io/instance-type"] == D8


def pool_id(ports: Any) -> str:
    return next(g.parent_id for g in ports.provider.list_node_groups() if g.name == "mix")
