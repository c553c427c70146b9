"""The sandbox's model changes (`model_changes`): stale instances report latestModelApplied false, new ones true;
an AKS pool's nodeImageVersion moves and new nodes carry it; the report counts stale nodes and their disruption."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sandbox.api.agent_pools_api import pool_properties
from sandbox.api.arm_api import vm_json
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from tests.sandbox.helpers import POOL, RG, scenario
from tests.sandbox.test_agent_pools import GPU_POOL, aks_doc

NEW_IMAGE = "AKSUbuntu-2204gen2containerd-202612.01.0"
IMAGE_LABEL = "kubernetes.azure.com/node-image-version"


def _pool(world: World, name: str = POOL) -> Any:
    return next(g for g in world._groups.values() if g.name == name)


def _latest(world: World, group: Any) -> dict[str, bool]:
    return {str(i.instance_id): vm_json(world, group, i)["properties"]["latestModelApplied"]
            for i in group.instances.values() if i.state != "Deleting"}


def test_a_model_change_makes_existing_instances_stale_and_new_ones_latest() -> None:
    doc = scenario(model_changes=[{"at": "5m", "scale_set": POOL}])
    doc["node_groups"][0]["initial"] = 3
    world = World(doc, seed=1)
    group = _pool(world)
    assert set(_latest(world, group).values()) == {True}  # before the change, every instance is latest
    etag = group.generation
    world.advance_by(301)
    assert group.generation > etag  # the model's PUT changed the set
    assert set(_latest(world, group).values()) == {False}
    world.set_capacity(group, 5)
    world.advance_by(120)
    latest = _latest(world, group)
    assert sorted(latest.values()) == [False, False, False, True, True]
    drift = world.report()["drift"]
    assert drift is not None and drift["stale_at_end"] == 3 and drift["groups"][group.key]["latest_at_end"] == 2


def test_deleting_stale_instances_counts_them_replaced_and_disrupted() -> None:
    doc = scenario(model_changes=[{"at": "1m", "scale_set": POOL}], timeline_interval="5s")
    doc["node_groups"][0]["initial"] = 3
    world = World(doc, seed=1)
    group = _pool(world)
    world.advance_by(90)
    stale = [i.arm_id for i in group.instances.values()][:2]
    world.delete_instances(group, stale)
    world.advance_by(120)
    drift = world.report()["drift"]
    assert drift["stale_replaced"] == 2 and drift["stale_at_end"] == 1
    assert drift["stale_disrupted_max"] == 2  # both were being deleted at one sample


def test_no_model_changes_no_drift_report_and_every_instance_latest() -> None:
    world = World(scenario(), seed=1)
    assert world.report()["drift"] is None
    assert set(_latest(world, _pool(world)).values()) == {True}


def test_an_aks_node_image_upgrade_moves_the_pool_version_and_labels_new_nodes_only() -> None:
    doc = aks_doc(model_changes=[{"at": "2m", "agent_pool": "gpu", "node_image_version": NEW_IMAGE}])
    world = World(doc, seed=1)
    pool = next(p for p in world._agent_pools.values() if p.spec.name == "gpu")
    group = world.agent_pool_group(pool)
    old = pool_properties(world, pool)["nodeImageVersion"]
    assert old != NEW_IMAGE
    old_nodes = {i.node_name for i in group.instances.values()}
    world.advance_by(121)
    assert pool_properties(world, pool)["nodeImageVersion"] == NEW_IMAGE
    world.set_capacity(group, group.capacity + 1)
    world.advance_by(300)
    labels = {i.node_name: world._store.get("nodes", "", i.node_name)["metadata"]["labels"].get(IMAGE_LABEL)
              for i in group.instances.values() if i.node_registered}
    assert {labels[n] for n in old_nodes} == {old}
    assert {v for n, v in labels.items() if n not in old_nodes} == {NEW_IMAGE}


@pytest.mark.parametrize("change, problem", [
    ({"at": "1m", "scale_set": "nope"}, "names no scale set"),
    ({"at": "1m"}, "exactly one of scale_set and agent_pool"),
    ({"at": "1m", "scale_set": POOL, "node_image_version": "x"}, "node image version"),
    ({"at": "9h", "scale_set": POOL}, "within the scenario's duration"),
    ({"at": "1m", "scale_set": POOL, "surprise": 1}, "unknown field"),
])
def test_bad_model_changes_are_refused_naming_the_field(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        load_scenario(scenario(model_changes=[copy.deepcopy(change)]))


def test_a_scenario_model_change_parses() -> None:
    parsed = load_scenario(scenario(model_changes=[{"at": "90s", "scale_set": POOL, "resource_group": RG}]))
    (change,) = parsed.model_changes
    assert (change.at, change.scale_set, change.resource_group) == (90.0, POOL, RG)
    pool_change = load_scenario(aks_doc(model_changes=[
        {"at": "2m", "agent_pool": GPU_POOL["agent_pool"]["name"], "node_image_version": "v2"}])).model_changes
    assert [(c.agent_pool, c.node_image_version, c.scale_set) for c in pool_change] == [("gpu", "v2", None)]
