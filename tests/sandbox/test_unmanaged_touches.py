"""`unmanaged_nodes_touched`: writes to nodes the autoscaler does not manage, those of no scale set and those of
a scale set without the cluster-autoscaler discovery tags alike (sandbox/world/kube_resources.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sandbox.world import World
from tests.memory_app import memory_app
from tests.sandbox.helpers import POOL, RG, START, SUB, job, scenario

UNTAGGED = "pool-fixed"
GROUPS = [
    {"resource_group": RG, "name": POOL, "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"},
     "min": 0, "max": 5, "initial": 1, "labels": {"pool": "a"}},
    {"resource_group": RG, "name": UNTAGGED, "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"},
     "autoscaled": False, "min": 0, "initial": 2, "computer_name_prefix": "fixed", "labels": {"pool": "fixed"}},
]


def _world() -> World:
    doc = scenario(node_groups=GROUPS, workloads=[job("web", 2, cpu="500m", duration=None, node_selector={"pool": "fixed"})])
    world = World(doc, seed=0, start=START)
    world.advance_by(30)
    return world


def _node_of(world: World, group: str) -> str:
    return next(i.node_name for i in world.instances(world.scale_set(SUB, RG, group)))


def _cordon(world: World, node: str) -> None:
    obj = world.k8s_get("nodes", "", node)
    obj["spec"]["unschedulable"] = True
    world.k8s_replace("nodes", "", node, obj)


def _evict_a_pod(world: World, node: str) -> None:
    pod = next(p for p in world.k8s_list("pods", "default") if p["spec"].get("nodeName") == node)
    world.evict("default", pod["metadata"]["name"])


def _instance_id(world: World, group: str, node: str) -> str:
    return next(i.arm_id for i in world.instances(world.scale_set(SUB, RG, group)) if i.node_name == node)


WRITES: dict[str, Callable[[World, str, str], Any]] = {
    "cordon": lambda world, group, node: _cordon(world, node),
    "delete the Node": lambda world, group, node: world.k8s_delete("nodes", "", node),
    "evict a pod": lambda world, group, node: _evict_a_pod(world, node),
    "delete the instance": lambda world, group, node: world.delete_instances(
        world.scale_set(SUB, RG, group), [_instance_id(world, group, node)]),
    "deallocate the instance": lambda world, group, node: world.deallocate_instances(
        world.scale_set(SUB, RG, group), [_instance_id(world, group, node)]),
    "protect the instance from scale-in": lambda world, group, node: world.set_scale_in_protection(
        world.scale_set(SUB, RG, group), _instance_id(world, group, node), True),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_to_a_node_of_a_scale_set_without_the_discovery_tags_is_counted(write: str) -> None:
    world = _world()
    node = _node_of(world, UNTAGGED)
    WRITES[write](world, UNTAGGED, node)
    assert world.report()["unmanaged_nodes_touched"] == {node: 1}


@pytest.mark.parametrize("write", [w for w in WRITES if w != "evict a pod"])
def test_the_same_write_to_a_node_of_a_tagged_scale_set_is_not(write: str) -> None:
    world = _world()
    WRITES[write](world, POOL, _node_of(world, POOL))
    assert world.report()["unmanaged_nodes_touched"] == {}


def test_the_autoscaler_shrinks_the_tagged_set_and_leaves_every_node_of_the_untagged_set_alone() -> None:
    """Both sets hold idle capacity above their minimum (the untagged one has no minimum the autoscaler could
    read): the autoscaler removes the tagged set's idle node and writes nothing to the untagged set's nodes."""
    doc = scenario(node_groups=GROUPS, workloads=[])
    doc["node_groups"][1]["initial"] = 2
    app = memory_app(doc, settings={"SCALE_DOWN_UNNEEDED_TIME": "1m", "SCALE_DOWN_DELAY_AFTER_ADD": "0s",
                                    "ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s"})
    fixed = {i.node_name for i in app.world.instances(app.world.scale_set(SUB, RG, UNTAGGED))}
    for _ in range(40):  # 20 minutes: the polls every 30 s, each action run as it is queued
        app.tick(30)
    assert app.world.instances(app.world.scale_set(SUB, RG, POOL)) == []  # the autoscaler did act
    assert {i.node_name for i in app.world.instances(app.world.scale_set(SUB, RG, UNTAGGED))} == fixed
    assert app.world.report()["unmanaged_nodes_touched"] == {}
