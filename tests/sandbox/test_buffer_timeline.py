"""The scenario's `capacity_buffers` timeline: the section's checks, and the world creating and scaling the buffer
on its clock, through the same rules as the API (generation bumped by /scale, not done while one is due)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sandbox.model.scenario import ScenarioError, load_scenario, scenario_from_dict
from sandbox.world import World

BASE = load_scenario("buffer-headroom")
CREATE: dict[str, Any] = {"at": "0s", "action": "create", "namespace": "default", "name": "room", "replicas": 2,
                          "requests": {"cpu": "500m", "memory": "1Gi"}}
SCALE: dict[str, Any] = {"at": "60s", "action": "scale", "namespace": "default", "name": "room", "replicas": 0}


def _document(actions: list[Any]) -> dict[str, Any]:
    return {"name": "t", "duration": "10m",
            "node_groups": [{"resource_group": "rg", "name": "pool", "vm_size": "Standard_D4s_v5", "min": 0,
                             "max": 2, "initial": 0, "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}}],
            "capacity_buffers": actions}


@pytest.mark.parametrize(("actions", "path", "words"), [
    ([{**CREATE, "action": "delete"}], "$.capacity_buffers[0].action", "not a buffer action"),
    ([{k: v for k, v in CREATE.items() if k != "requests"}], "$.capacity_buffers[0].requests", "required"),
    ([{**CREATE, "requests": {"cpu": "0", "memory": "1Gi"}}], "$.capacity_buffers[0].requests.cpu", "more than zero"),
    ([{**CREATE, "requests": {"cpu": "lots", "memory": "1Gi"}}], "$.capacity_buffers[0].requests.cpu", ""),
    ([{**CREATE, "replicas": -1}], "$.capacity_buffers[0].replicas", "at least 0"),
    ([{**CREATE, "name": "Room"}], "$.capacity_buffers[0].name", "not an object name"),
    ([{**CREATE, "namespace": "elsewhere"}], "$.capacity_buffers[0].namespace", "not in the scenario's namespaces"),
    ([{**CREATE, "at": "10m"}], "$.capacity_buffers[0].at", "within the scenario's duration"),
    ([CREATE, CREATE], "$.capacity_buffers[1].name", "created twice"),
    ([SCALE, CREATE], "$.capacity_buffers[0].name", "scaled before a create"),
    ([{**SCALE, "requests": {"cpu": "1", "memory": "1Gi"}}, CREATE], "$.capacity_buffers[0].requests",
     "unknown field"),
])
def test_a_bad_action_is_named_by_its_path(actions: list[Any], path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(_document(actions))
    assert path in str(caught.value) and words in str(caught.value)


def test_the_world_creates_the_buffer_and_scales_it_on_its_clock() -> None:
    world = World(_document([CREATE, SCALE]))
    template = world.k8s_get("podtemplates", "default", "room-template")
    requests = template["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == CREATE["requests"]
    buffer = world.k8s_get("capacitybuffers", "default", "room")
    assert buffer["spec"] == {"podTemplateRef": {"name": "room-template"}, "replicas": CREATE["replicas"]}
    assert not world.done()[0]  # the /scale is still due
    world.advance_by(59)
    assert world.k8s_get("capacitybuffers", "default", "room")["spec"]["replicas"] == CREATE["replicas"]
    world.advance_by(1)
    scaled = world.k8s_get("capacitybuffers", "default", "room")
    assert scaled["spec"]["replicas"] == SCALE["replicas"]
    assert scaled["metadata"]["generation"] == buffer["metadata"]["generation"] + 1


def test_the_shipped_scenario_scales_its_buffer_after_the_deployment_arrives() -> None:
    create, scale = BASE.capacity_buffers
    deployment = next(w for w in BASE.workloads if w.namespace == create.namespace)
    assert create.action == "create" and scale.action == "scale" and scale.key == create.key
    assert create.at < deployment.at < scale.at < BASE.duration
    assert deployment.count == create.replicas and scale.replicas == 0


def test_a_scenario_without_the_section_has_no_buffer() -> None:
    document = copy.deepcopy(_document([]))
    del document["capacity_buffers"]
    world = World(document)
    assert world.k8s_list("capacitybuffers") == [] and world.k8s_list("podtemplates") == []
