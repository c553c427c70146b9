"""What the world records about scale-down: node annotations from the scenario, idle nodes by name, and the
order in which removals started (a node marked ToBeDeletedByClusterAutoscaler or cordoned, then deleted)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sandbox.world import TO_BE_DELETED_TAINT, World
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"
DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


def three_nodes(**group: Any) -> World:
    doc = scenario(workloads=[job("w", cpu="1", memory="8Gi", duration="1h")])
    doc["node_groups"][0].update(initial=3, **group)
    return World(doc, seed=0, start=START)


def pool(world: World) -> Any:
    return world.scale_set(SUB, RG, POOL)


def mark(world: World, name: str, *, taint: bool = True, cordon: bool = True) -> None:
    """What the executor's cordon step sends (the ToBeDeleted taint and spec.unschedulable), or parts of it."""
    node = world.k8s_get("nodes", "", name)
    spec = node["spec"]
    if cordon:
        spec["unschedulable"] = True
    if taint:
        spec.setdefault("taints", []).append({"key": TO_BE_DELETED_TAINT, "value": "1", "effect": "NoSchedule"})
    world.k8s_replace("nodes", "", name, node)


def unmark(world: World, name: str) -> None:
    node = world.k8s_get("nodes", "", name)
    node["spec"].pop("unschedulable", None)
    node["spec"]["taints"] = [t for t in node["spec"].get("taints", []) if t["key"] != TO_BE_DELETED_TAINT]
    world.k8s_replace("nodes", "", name, node)


def test_pool_annotations_are_on_every_node_of_the_pool_only() -> None:
    world = three_nodes(annotations={DISABLED: "true"})
    world.set_capacity(pool(world), 4)
    world.advance_by(60)  # boot delay
    nodes = world.k8s_list("nodes")
    assert len(nodes) == 4
    assert all(n["metadata"]["annotations"][DISABLED] == "true" for n in nodes)
    assert "node.alpha.kubernetes.io/ttl" in nodes[0]["metadata"]["annotations"]  # kubelet's own stay
    plain = World(scenario(), seed=0, start=START)
    assert DISABLED not in plain.k8s_list("nodes")[0]["metadata"]["annotations"]


def test_state_names_the_idle_nodes_per_group() -> None:
    world = three_nodes()
    assert world.state()["idle_nodes"] == {f"{RG}/{POOL}": ["pool-a000001", "pool-a000002"]}  # the Job is on 000000
    world.delete_instances(pool(world), ["1"])
    assert world.state()["idle_nodes"] == {f"{RG}/{POOL}": ["pool-a000002"]}  # a node going away is not idle


def test_scale_down_order_lists_marked_then_deleted_nodes_as_they_were_when_marked() -> None:
    world = three_nodes()
    world.set_capacity(pool(world), 4)  # pool-a000003, Ready at 60 s
    world.advance_by(100)
    mark(world, "pool-a000000")  # holds the Job: 1 of 4 CPUs, 8 of 16Gi
    mark(world, "pool-a000001")
    world.advance_by(10)
    unmark(world, "pool-a000001")  # called off
    node = world.k8s_get("nodes", "", "pool-a000000")
    node["metadata"]["labels"]["touched"] = "yes"
    world.k8s_replace("nodes", "", "pool-a000000", node)  # still marked: its removal started at 100 s
    world.advance_by(10)
    world.delete_instances(pool(world), ["1"])  # deleted, but not marked any more
    mark(world, "pool-a000002", taint=False)  # cordoned only, and never deleted
    world.advance_by(30)
    world.delete_instances(pool(world), ["0"])
    world.advance_by(30)
    mark(world, "pool-a000003", cordon=False)  # tainted only
    world.advance_by(5)
    world.delete_instances(pool(world), ["3"])
    world.advance_by(60)

    order = world.report()["scale_down_order"]
    assert order == world.scale_down_order()
    assert [(e["node"], e["cordoned_at"], e["delete_started_at"]) for e in order] == [
        ("pool-a000000", 100, 150),
        ("pool-a000003", 180, 185),
    ]
    first, second = order
    assert first["group"] == f"{RG}/{POOL}" and first["instance_id"] == 0
    assert first["age_seconds"] == 3600 + 100  # initial nodes registered an hour before the start
    assert (first["utilization"], first["pods"]) == (0.5, 1)  # memory 8Gi of 16Gi; the DaemonSet pod left out
    assert second["age_seconds"] == 180 - 60  # Ready (created) at 60 s
    # The Job died with pool-a000000; its replacement went to pool-a000003 (pool-a000002 is cordoned).
    assert (second["utilization"], second["pods"]) == (0.5, 1)
    assert world.report()["pods_killed"] == 2
