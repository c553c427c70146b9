"""The replay's Cluster and Compute ports over an in-process sandbox World, held to shared/ports.py's contracts.

Only the ports' public methods are asserted on; the World is the fixture that drives time. (The replay's
StateStore and queue live in devtools/replay/memory.py and are tested in test_memory.py.)
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from devtools.replay.world_ports import WorldCluster, WorldCompute
from sandbox.world import World
from shared.domain import TO_BE_DELETED_TAINT, NodeGroup, Taint
from shared.ports import ClusterError, ComputeError
from tests.builders import GIB
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
CLUSTER = "test-cluster"
WEB = job("web", count=3, cpu="100m", memory="100Mi", duration=None, kind="ReplicaSet", labels={"app": "web"})
BATCH = job("batch", cpu="1", memory="1Gi", duration="60s", labels={"app": "batch"})
TAINT = Taint(TO_BE_DELETED_TAINT, "1893574800", "NoSchedule")


def make_world(*, initial: int = 2, **overrides: Any) -> World:
    doc = scenario(workloads=[WEB, BATCH], pdbs=[{"name": "web", "selector": {"app": "web"}, "max_unavailable": 1}],
                   **overrides)
    doc["node_groups"][0]["initial"] = initial
    doc["node_groups"].append({"resource_group": RG, "name": "system", "vm_size": "Standard_D2s_v5",
                               "allocatable": {"cpu": "2", "memory": "8Gi"}, "initial": 1, "autoscaled": False,
                               "tags": {"team": "platform"}})
    world = World(doc, seed=0, start=START)
    world.advance_by(5)  # the workload's pods are bound and running
    return world


@pytest.fixture
def world() -> World:
    return make_world()


@pytest.fixture
def cluster(world: World) -> WorldCluster:
    return WorldCluster(world)


def compute_of(world: World, **kw: Any) -> WorldCompute:
    return WorldCompute(world, cluster_name=kw.pop("cluster_name", CLUSTER), resource_groups=(RG,), **kw)


@pytest.fixture
def compute(world: World) -> WorldCompute:
    return compute_of(world)


def pool(compute: WorldCompute) -> NodeGroup:
    (group,) = [g for g in compute.list_node_groups() if g.name == POOL]
    return group


def states(compute: WorldCompute, group: NodeGroup) -> dict[str, str]:
    return {i.instance_id: i.provisioning_state for i in compute.list_instances(group)}


# --- Cluster: reads ------------------------------------------------------------------------


def test_list_pods_leaves_finished_pods_out(world: World, cluster: WorldCluster) -> None:
    assert any(p.name.startswith("batch") for p in cluster.list_pods())
    world.advance_by(120)  # the Job's pod has run its 60 s
    listed = cluster.list_pods()
    assert listed and all(p.phase not in ("Succeeded", "Failed") for p in listed)
    assert not any(p.name.startswith("batch") for p in listed)
    assert sum(p.name.startswith("web") for p in listed) == 3


def test_list_pods_on_node_is_the_listed_pods_bound_there(cluster: WorldCluster) -> None:
    every = cluster.list_pods()
    for node in cluster.list_nodes():
        on_node = cluster.list_pods_on_node(node.name)
        assert {p.key for p in on_node} == {p.key for p in every if p.node_name == node.name}
        assert all(p.node_name == node.name for p in on_node)


def test_get_node_reads_one_node_and_none_when_missing(cluster: WorldCluster) -> None:
    for node in cluster.list_nodes():
        assert cluster.get_node(node.name) == node
    assert cluster.get_node("no-such-node") is None


def test_nodes_are_ready_and_name_their_scale_set_instance(cluster: WorldCluster) -> None:
    nodes = cluster.list_nodes()
    assert nodes and all(n.ready for n in nodes)
    pool_nodes = [n for n in nodes if n.instance is not None and n.instance.scale_set == POOL]
    assert sorted(n.instance.instance_id for n in pool_nodes if n.instance) == ["0", "1"]


def test_disruption_budgets_say_how_many_more_pods_may_go_now(cluster: WorldCluster) -> None:
    (budget,) = cluster.list_disruption_budgets()
    assert (budget.namespace, budget.name, budget.disruptions_allowed) == ("default", "web", 1)
    assert sum(budget.covers(p) for p in cluster.list_pods()) == 3


def test_daemonsets_are_listed_with_their_requests(cluster: WorldCluster) -> None:
    (ds,) = cluster.list_daemonsets()
    assert ds.key == "kube-system/kube-proxy"
    assert (ds.requests.cpu_milli, ds.requests.memory_bytes) == (100, 128 * 1024 * 1024)


# --- Cluster: config maps --------------------------------------------------------------------


def test_config_map_is_none_until_written_then_writes_merge(cluster: WorldCluster) -> None:
    assert cluster.get_config_map("kube-system", "status") is None
    cluster.write_config_map("kube-system", "status", data={"a": "1"}, annotations={"x": "1"})
    assert cluster.get_config_map("kube-system", "status") == {"a": "1"}
    cluster.write_config_map("kube-system", "status", data={"b": "2", "a": "3"}, annotations={"y": "2"})
    assert cluster.get_config_map("kube-system", "status") == {"a": "3", "b": "2"}


# --- Cluster: node changes -------------------------------------------------------------------


def test_cordon_marks_unschedulable_and_taints_once_and_uncordon_undoes_it(cluster: WorldCluster) -> None:
    name = cluster.list_nodes()[0].name
    cluster.cordon(name, taint=TAINT)
    cluster.cordon(name, taint=TAINT)  # a no-op where both are already there
    node = cluster.get_node(name)
    assert node is not None and node.unschedulable and node.taints == (TAINT,)
    cluster.uncordon(name, taint_key=TO_BE_DELETED_TAINT)
    node = cluster.get_node(name)
    assert node is not None and not node.unschedulable and node.taints == ()


def test_taints_come_and_go_without_touching_cordoning(cluster: WorldCluster) -> None:
    name = cluster.list_nodes()[0].name
    cluster.add_taint(name, taint=TAINT)
    cluster.add_taint(name, taint=TAINT)
    node = cluster.get_node(name)
    assert node is not None and node.taints == (TAINT,) and not node.unschedulable
    cluster.cordon(name, taint=Taint("other", "", "NoSchedule"))
    cluster.remove_taint(name, taint_key=TO_BE_DELETED_TAINT)
    node = cluster.get_node(name)
    assert node is not None and node.unschedulable and [t.key for t in node.taints] == ["other"]


@pytest.mark.parametrize("change", ["uncordon", "add_taint", "remove_taint", "delete_node"])
def test_changes_to_a_missing_node_are_no_ops(cluster: WorldCluster, change: str) -> None:
    before = cluster.list_nodes()
    call = {
        "uncordon": lambda: cluster.uncordon("gone", taint_key=TO_BE_DELETED_TAINT),
        "add_taint": lambda: cluster.add_taint("gone", taint=TAINT),
        "remove_taint": lambda: cluster.remove_taint("gone", taint_key=TO_BE_DELETED_TAINT),
        "delete_node": lambda: cluster.delete_node("gone"),
    }[change]
    call()
    assert cluster.list_nodes() == before


def test_delete_node_removes_it_and_a_second_delete_is_a_no_op(cluster: WorldCluster) -> None:
    name = cluster.list_nodes()[-1].name
    cluster.delete_node(name)
    cluster.delete_node(name)
    assert cluster.get_node(name) is None
    assert name not in {n.name for n in cluster.list_nodes()}


# --- Cluster: evictions ----------------------------------------------------------------------


def test_eviction_is_blocked_once_the_budget_is_spent(cluster: WorldCluster) -> None:
    web = sorted((p for p in cluster.list_pods() if p.labels.get("app") == "web"), key=lambda p: p.name)
    outcomes = [cluster.evict(p.namespace, p.name) for p in web]
    assert outcomes == ["evicted", "blocked", "blocked"]  # the budget allows one disruption
    after = {p.key: p for p in cluster.list_pods()}
    evicted = web[0].key
    assert evicted not in after or after[evicted].terminating
    assert all(not after[p.key].terminating for p in web[1:])


def test_evicting_a_missing_pod_says_not_found(cluster: WorldCluster) -> None:
    assert cluster.evict("default", "no-such-pod") == "not_found"


def test_a_pod_no_budget_covers_is_evicted(cluster: WorldCluster) -> None:
    batch = next(p for p in cluster.list_pods() if p.labels.get("app") == "batch")
    assert cluster.evict(batch.namespace, batch.name) == "evicted"


# --- Compute: groups and instances -----------------------------------------------------------


def test_only_scale_sets_tagged_for_this_cluster_are_groups(world: World, compute: WorldCompute) -> None:
    (group,) = compute.list_node_groups()  # the untagged "system" scale set is not one
    assert (group.name, group.min_size, group.max_size, group.capacity) == (POOL, 0, 10, 2)
    assert group.tags["cluster-autoscaler-name"] == CLUSTER
    assert compute_of(world, cluster_name="another-cluster").list_node_groups() == []


def test_get_node_group_is_a_fresh_read_and_none_when_unknown(compute: WorldCompute) -> None:
    group = pool(compute)
    assert compute.get_node_group(group.id) == group
    assert compute.get_node_group(f"{RG}/no-such-pool") is None
    assert compute.get_node_group(f"{RG}/system") is None  # exists, not tagged for us


def test_get_instance_agrees_with_list_instances(compute: WorldCompute) -> None:
    group = pool(compute)
    listed = compute.list_instances(group)
    assert [i.instance_id for i in listed] == ["0", "1"]
    for inst in listed:
        assert compute.get_instance(group, inst.instance_id) == inst
    assert compute.get_instance(group, "99") is None


def test_vm_sizes_list_the_scenario_sizes_with_their_hardware(compute: WorldCompute) -> None:
    sizes = {s.name: s for s in compute.list_vm_sizes("westeurope")}
    d4 = sizes["Standard_D4s_v5"]
    assert (d4.vcpus, d4.memory_bytes, d4.gpus) == (4, 16 * GIB, 0)


# --- Compute: changes and their operations ----------------------------------------------------


def test_growing_a_group_shows_in_its_size_then_in_ready_nodes(world: World, compute: WorldCompute,
                                                               cluster: WorldCluster) -> None:
    group = pool(compute)
    op = compute.begin_resize(group, 4)
    assert not op.done
    assert compute.get_node_group(group.id).capacity == 4  # type: ignore[union-attr]
    assert states(compute, group) == {"0": "Succeeded", "1": "Succeeded", "2": "Creating", "3": "Creating"}
    world.advance_by(120)
    assert compute.get_resize_operation(op.token).status == "Succeeded"
    assert set(states(compute, group).values()) == {"Succeeded"}
    pool_nodes = {n.instance.instance_id for n in cluster.list_nodes() if n.instance and n.instance.scale_set == POOL}
    assert pool_nodes == {"0", "1", "2", "3"}


def test_shrinking_a_group_deletes_instances_until_they_are_gone(world: World, compute: WorldCompute) -> None:
    group = pool(compute)
    op = compute.begin_resize(group, 1)
    assert compute.get_node_group(group.id).capacity == 1  # type: ignore[union-attr]
    assert list(states(compute, group).values()).count("Deleting") == 1
    world.advance_by(60)
    assert compute.get_resize_operation(op.token).status == "Succeeded"
    assert len(compute.list_instances(group)) == 1


def test_deleting_an_instance_lowers_the_size_and_removes_it_and_its_node(world: World, compute: WorldCompute,
                                                                         cluster: WorldCluster) -> None:
    group = pool(compute)
    victim = compute.get_instance(group, "1")
    assert victim is not None
    op = compute.begin_delete_instances(group, ["1"])
    assert compute.get_node_group(group.id).capacity == 1  # type: ignore[union-attr]
    assert compute.get_instance(group, "1").deleting  # type: ignore[union-attr]
    world.advance_by(60)
    assert compute.get_delete_operation(op.token).status == "Succeeded"
    assert compute.get_instance(group, "1") is None
    assert [i.instance_id for i in compute.list_instances(group)] == ["0"]
    assert cluster.get_node(victim.computer_name) is None


def test_deleting_an_unknown_instance_fails_and_changes_nothing(compute: WorldCompute) -> None:
    group = pool(compute)
    with pytest.raises(ComputeError) as caught:
        compute.begin_delete_instances(group, ["1", "99"])
    assert caught.value.code == "InvalidParameter"
    assert compute.get_node_group(group.id).capacity == 2  # type: ignore[union-attr]
    assert states(compute, group) == {"0": "Succeeded", "1": "Succeeded"}


def test_deallocating_keeps_capacity_and_starting_brings_the_instance_back(world: World,
                                                                           compute: WorldCompute) -> None:
    group = pool(compute)
    op = compute.begin_deallocate_instances(group, ["1"])
    assert states(compute, group) == {"0": "Succeeded", "1": "Updating"}  # the other one is left alone
    world.advance_by(60)
    assert compute.get_deallocate_operation(op.token).status == "Succeeded"
    assert compute.get_node_group(group.id).capacity == 2  # type: ignore[union-attr]
    assert [i.instance_id for i in compute.list_instances(group)] == ["0", "1"]
    op = compute.begin_start_instances(group, ["1"])
    world.advance_by(120)
    assert compute.get_start_operation(op.token).status == "Succeeded"
    assert states(compute, group) == {"0": "Succeeded", "1": "Succeeded"}


@pytest.mark.parametrize("getter", ["get_resize_operation", "get_delete_operation", "get_deallocate_operation",
                                    "get_start_operation"])
def test_an_unknown_operation_token_is_not_found(compute: WorldCompute, getter: str) -> None:
    with pytest.raises(ComputeError) as caught:
        getattr(compute, getter)("no-such-token")
    assert caught.value.code == "NotFound"


def test_failure_rate_fails_capacity_increases_as_failed_operations(world: World) -> None:
    compute = compute_of(world, failure_rate=1.0)
    group = pool(compute)
    op = compute.begin_resize(group, 4)
    world.advance_by(30)
    done = compute.get_resize_operation(op.token)
    assert (done.status, done.error_code) == ("Failed", "QuotaExceeded")
    assert compute.get_node_group(group.id).capacity == 2  # type: ignore[union-attr]
    assert [i.instance_id for i in compute.list_instances(group)] == ["0", "1"]
    shrink = compute.begin_resize(pool(compute), 1)  # a decrease is never failed (from a fresh read: its etag)
    world.advance_by(60)
    assert compute.get_resize_operation(shrink.token).status == "Succeeded"


def test_throttled_calls_raise_too_many_requests_with_retry_after() -> None:
    world = make_world(arm_throttling=True)
    compute = compute_of(world)
    group = pool(compute)
    with pytest.raises(ComputeError) as caught:
        for _ in range(200):  # far beyond any bucket of ARM's per-scale-set read budget
            compute.get_node_group(group.id)
    assert caught.value.code == "TooManyRequests"
    assert caught.value.retry_after is not None and caught.value.retry_after > 0


def test_without_throttling_calls_are_never_refused(compute: WorldCompute) -> None:
    group = pool(compute)
    for _ in range(200):
        assert compute.get_node_group(group.id) is not None


# --- Divergences from the contract ------------------------------------------------------------


def test_deallocating_no_instances_stops_none(world: World, compute: WorldCompute) -> None:
    group = pool(compute)
    try:
        compute.begin_deallocate_instances(group, [])
    except (ValueError, ComputeError):
        pass
    assert states(compute, group) == {"0": "Succeeded", "1": "Succeeded"}


@pytest.mark.parametrize("call,error", [
    ("cordon a missing node", ClusterError),
    ("resize a scale set that no longer exists", ComputeError),
])
def test_failures_surface_as_the_ports_errors(cluster: WorldCluster, compute: WorldCompute, call: str,
                                              error: type[Exception]) -> None:
    run = {
        "cordon a missing node": lambda: cluster.cordon("gone", taint=TAINT),
        "resize a scale set that no longer exists": lambda: compute.begin_resize(replace(pool(compute), name="gone"), 3),
    }[call]
    with pytest.raises(error):
        run()
