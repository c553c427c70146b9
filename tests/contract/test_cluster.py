"""The Cluster contract: KubernetesCluster over the sandbox's Kubernetes API and WorldCluster in process.

The world (tests/contract/worlds.py): nodes pool-a000000, pool-a000001 (group rg-contract/pool-a) and
pool-manual000000, and the virtual node virtual-node-aci-linux with one `aci` pod on it; two `web` pods that a PodDisruptionBudget keeps both up, two `batch` Job pods that
finish after 60 s, one `huge` pod that fits nowhere, and kube-proxy and mirror pods on the nodes.
"""

from __future__ import annotations

import pytest

from shared.domain import Pod, Taint
from shared.ports import Cluster, ClusterError
from tests.contract import worlds
from tests.contract.sides import Opened, WorldSide

DRAIN = Taint("ToBeDeletedByClusterAutoscaler", "1700000000", "NoSchedule")
SOFT = Taint("DeletionCandidateOfClusterAutoscaler", "1700000000", "PreferNoSchedule")
NODE = worlds.POOL_A_NODES[1]


def named(pods: list[Pod], prefix: str) -> list[Pod]:
    return [p for p in pods if p.name.startswith(prefix)]


def test_both_implementations_read_the_same_world_the_same(twins: tuple[Opened, Opened]) -> None:
    """Whole answers, field by field: a converter or filter that drifts on either side shows here."""
    real, memory = twins
    for read in ("list_nodes", "list_pods", "list_daemonsets", "list_disruption_budgets"):
        assert sorted(getattr(real.cluster, read)(), key=repr) == sorted(getattr(memory.cluster, read)(), key=repr), read
    assert real.cluster.get_node(NODE) == memory.cluster.get_node(NODE)
    assert real.cluster.list_pods_on_node(NODE) == memory.cluster.list_pods_on_node(NODE)


def test_list_nodes(cluster_view: WorldSide[Cluster]) -> None:
    nodes = {n.name: n for n in cluster_view.port.list_nodes()}

    assert sorted(nodes) == sorted([*worlds.POOL_A_NODES, worlds.MANUAL_NODE, worlds.VIRTUAL_NODE])
    virtual = nodes.pop(worlds.VIRTUAL_NODE)
    assert virtual.labels["type"] == "virtual-kubelet" and virtual.instance is None
    assert [t.key for t in virtual.taints] == ["virtual-kubelet.io/provider"]
    assert all(n.ready and not n.unschedulable and n.taints == () for n in nodes.values())
    node = nodes[NODE]
    assert node.allocatable.cpu_milli == 3860 and node.allocatable.pods == 110
    assert node.instance is not None and (node.instance.group_id, node.instance.instance_id) == (worlds.POOL_A, "1")


def test_get_node(cluster_view: WorldSide[Cluster]) -> None:
    listed = {n.name: n for n in cluster_view.port.list_nodes()}
    assert cluster_view.port.get_node(NODE) == listed[NODE]
    assert cluster_view.port.get_node("ghost") is None


def test_list_pods_leaves_finished_pods_out(cluster: WorldSide[Cluster]) -> None:
    pods = cluster.port.list_pods()
    assert len(named(pods, "web-")) == 2 and len(named(pods, "batch-")) == 2
    [huge] = named(pods, "huge-")
    assert huge.unschedulable and huge.phase == "Pending" and huge.node_name is None
    assert {p.node_name for p in pods if p.is_mirror} == set(worlds.POOL_A_NODES)
    assert {p.owner.kind for p in pods if p.owner} >= {"ReplicaSet", "Job", "DaemonSet"}
    batch_nodes = {p.node_name for p in named(pods, "batch-")}

    cluster.advance(120)  # the batch Jobs run 60 s and succeed

    assert named(cluster.port.list_pods(), "batch-") == []
    for node in batch_nodes:
        assert node is not None and named(cluster.port.list_pods_on_node(node), "batch-") == []


def test_list_pods_on_node_is_the_nodes_share_of_list_pods(cluster_view: WorldSide[Cluster]) -> None:
    everything = cluster_view.port.list_pods()
    for node in [*worlds.POOL_A_NODES, worlds.MANUAL_NODE]:
        on_node = cluster_view.port.list_pods_on_node(node)
        assert on_node, node
        assert sorted(on_node, key=repr) == sorted([p for p in everything if p.node_name == node], key=repr)
    assert cluster_view.port.list_pods_on_node("ghost") == []


def test_cordon_then_uncordon_round_trip(cluster: WorldSide[Cluster]) -> None:
    cluster.port.cordon(NODE, taint=DRAIN)
    cluster.port.cordon(NODE, taint=DRAIN)  # a no-op the second time

    cordoned = cluster.port.get_node(NODE)
    assert cordoned is not None and cordoned.unschedulable and cordoned.taints == (DRAIN,)
    assert cordoned.is_being_deleted

    cluster.port.uncordon(NODE, taint_key=DRAIN.key)
    cluster.port.uncordon(NODE, taint_key=DRAIN.key)  # a no-op the second time
    cluster.port.uncordon("ghost", taint_key=DRAIN.key)  # and on a missing node

    back = cluster.port.get_node(NODE)
    assert back is not None and not back.unschedulable and back.taints == ()


def test_cordoning_a_missing_node_is_a_cluster_error(cluster: WorldSide[Cluster]) -> None:
    with pytest.raises(ClusterError) as caught:
        cluster.port.cordon("ghost", taint=DRAIN)
    assert not caught.value.transient


def test_a_taint_comes_and_goes_without_cordoning(cluster: WorldSide[Cluster]) -> None:
    cluster.port.add_taint(NODE, taint=SOFT)
    cluster.port.add_taint(NODE, taint=SOFT)
    cluster.port.add_taint("ghost", taint=SOFT)  # a node gone meanwhile is no error

    tainted = cluster.port.get_node(NODE)
    assert tainted is not None and not tainted.unschedulable and tainted.taints == (SOFT,)

    cluster.port.cordon(NODE, taint=DRAIN)
    cluster.port.remove_taint(NODE, taint_key=SOFT.key)
    cluster.port.remove_taint(NODE, taint_key=SOFT.key)
    cluster.port.remove_taint("ghost", taint_key=SOFT.key)

    untainted = cluster.port.get_node(NODE)
    assert untainted is not None and untainted.unschedulable and untainted.taints == (DRAIN,)  # cordon stays


def test_evict(cluster: WorldSide[Cluster]) -> None:
    pods = cluster.port.list_pods()
    batch = named(pods, "batch-")[0]
    web = named(pods, "web-")[0]

    assert cluster.port.evict(batch.namespace, batch.name, grace_period_seconds=0) == "evicted"
    assert cluster.port.evict(web.namespace, web.name) == "blocked"  # the budget wants both web pods up
    assert cluster.port.evict("default", "ghost") == "not_found"
    assert cluster.port.evict("no-such-namespace", "ghost") == "not_found"

    remaining = {p.key: p for p in cluster.port.list_pods()}
    assert batch.key not in remaining or remaining[batch.key].terminating
    assert web.key in remaining and not remaining[web.key].terminating


def test_get_pod_is_the_listed_pod_or_none(cluster_view: WorldSide[Cluster]) -> None:
    [web] = named(cluster_view.port.list_pods(), "web-")[:1]
    assert cluster_view.port.get_pod(web.namespace, web.name) == web
    assert cluster_view.port.get_pod("default", "ghost") is None
    assert cluster_view.port.get_pod("no-such-namespace", "ghost") is None


def test_annotate_pod_merges_and_removes_and_ignores_a_missing_pod(cluster: WorldSide[Cluster]) -> None:
    [web] = named(cluster.port.list_pods(), "web-")[:1]
    cluster.port.annotate_pod(web.namespace, web.name, annotations={"example.com/a": "1", "example.com/b": "2"})
    cluster.port.annotate_pod(web.namespace, web.name, annotations={"example.com/a": None})
    after = cluster.port.get_pod(web.namespace, web.name)
    assert after is not None and after.uid == web.uid
    assert {k: v for k, v in after.annotations.items() if k.startswith("example.com/")} == {"example.com/b": "2"}
    assert after.node_name == web.node_name and after.requests == web.requests  # nothing but the annotations
    cluster.port.annotate_pod("default", "ghost", annotations={"example.com/a": "1"})  # no error


def test_list_event_times_finds_virtual_kubelets_creations(cluster_view: WorldSide[Cluster]) -> None:
    [aci] = named(cluster_view.port.list_pods(), "aci-")
    assert aci.node_name == worlds.VIRTUAL_NODE
    created = cluster_view.port.list_event_times("ProviderCreateSuccess")
    assert [count for _, count in created] == [1]
    assert cluster_view.port.list_event_times("NoSuchReason") == []


def test_list_disruption_budgets(cluster_view: WorldSide[Cluster]) -> None:
    [budget] = cluster_view.port.list_disruption_budgets()
    assert (budget.namespace, budget.name, budget.disruptions_allowed) == ("default", "web", 0)
    assert budget.selector.match_labels == (("app", "web"),)


def test_delete_node_is_idempotent(cluster: WorldSide[Cluster]) -> None:
    cluster.port.delete_node(worlds.MANUAL_NODE)
    cluster.port.delete_node(worlds.MANUAL_NODE)
    cluster.port.delete_node("ghost")

    assert cluster.port.get_node(worlds.MANUAL_NODE) is None
    assert worlds.MANUAL_NODE not in {n.name for n in cluster.port.list_nodes()}


def test_config_map_write_then_read(cluster: WorldSide[Cluster]) -> None:
    assert cluster.port.get_config_map("kube-system", "cluster-autoscaler-status") is None

    cluster.port.write_config_map("kube-system", "cluster-autoscaler-status", data={"status": "one"},
                                  annotations={"cluster-autoscaler.kubernetes.io/last-updated": "t1"})
    assert cluster.port.get_config_map("kube-system", "cluster-autoscaler-status") == {"status": "one"}

    # Written again: these keys are set, the others stay.
    cluster.port.write_config_map("kube-system", "cluster-autoscaler-status", data={"status": "two", "more": "x"},
                                  annotations={"cluster-autoscaler.kubernetes.io/last-updated": "t2"})
    assert cluster.port.get_config_map("kube-system", "cluster-autoscaler-status") == {"status": "two", "more": "x"}
    cluster.port.write_config_map("kube-system", "cluster-autoscaler-status", data={"only": "y"}, annotations={})
    assert cluster.port.get_config_map("kube-system", "cluster-autoscaler-status") == {
        "status": "two", "more": "x", "only": "y"}
    assert cluster.port.get_config_map("default", "cluster-autoscaler-status") is None  # namespaced


def test_list_daemonsets(cluster_view: WorldSide[Cluster]) -> None:
    [proxy] = cluster_view.port.list_daemonsets()
    assert (proxy.namespace, proxy.name) == ("kube-system", "kube-proxy")
    assert (proxy.requests.cpu_milli, proxy.requests.memory_bytes) == (100, 128 * 2**20)


# --- refusals: every answer that is no outcome of the port is a ClusterError --------------------------------


def test_writing_a_config_map_into_a_missing_namespace_is_a_cluster_error(cluster: WorldSide[Cluster]) -> None:
    with pytest.raises(ClusterError) as caught:
        cluster.port.write_config_map("no-such-namespace", "status", data={"a": "b"}, annotations={})
    assert "no-such-namespace/status" in str(caught.value) and not caught.value.transient


def test_evicting_a_pod_under_two_budgets_is_a_cluster_error(cluster: WorldSide[Cluster]) -> None:
    pdbs = [*worlds.SCENARIO["pdbs"], {"name": "everything", "selector": {}, "max_unavailable": 1}]
    side = cluster.variant(worlds.scenario(pdbs=pdbs))
    [web, *_] = named(side.port.list_pods(), "web-")  # under `web` and `everything`

    with pytest.raises(ClusterError) as caught:
        side.port.evict(web.namespace, web.name)
    assert web.name in str(caught.value) and caught.value.transient  # a 500
