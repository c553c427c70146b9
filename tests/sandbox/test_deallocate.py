"""Deallocating and starting scale-set instances in-process: capacity, billing, the node's life, operations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.world import SHUTDOWN_TAINT, World
from sandbox.world.compute import ScaleSetSim
from sandbox.world.errors import ArmError
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"
KEY = f"{RG}/{POOL}"
# helpers.BASE: boot 60 s (provisioned at 30 s), delete 30 s, node removal 10 s


def make(initial: int = 2, **overrides: Any) -> World:
    doc = scenario(**overrides)
    doc["node_groups"][0]["initial"] = initial
    return World(doc, start=START)


def pool(world: World) -> ScaleSetSim:
    return world.scale_set(SUB, RG, POOL)


def states(world: World) -> list[tuple[int, str, str]]:
    return [(i.instance_id, i.state, i.power) for i in world.instances(pool(world))]


def ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def taint_keys(node: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["key"], t["effect"]) for t in node["spec"].get("taints") or []]


def pods_on(world: World, node: str) -> list[dict[str, Any]]:
    return [p for p in world.k8s_list("pods") if p["spec"].get("nodeName") == node]


def test_deallocation_keeps_capacity_and_stops_billing_once_deallocated() -> None:
    world = make()
    op = world.deallocate_instances(pool(world), ["1"])
    assert states(world) == [(0, "Succeeded", "running"), (1, "Updating", "deallocating")]
    assert op.status == "InProgress" and pool(world).capacity == 2
    assert world.state()["groups"][KEY] | {} == {
        "ready": 1, "booting": 0, "deleting": 0, "deallocated": 1, "target": 2, "min": 0, "max": 10, "idle": 1,
        "autoscaled": True}
    world.advance_by(29)
    assert op.status == "InProgress"
    world.advance_by(1)  # deallocate_delay defaults to delete_delay: 30 s
    assert states(world) == [(0, "Succeeded", "running"), (1, "Succeeded", "deallocated")]
    assert op.status == "Succeeded" and op.ended_at == 30 and pool(world).capacity == 2
    world.advance_by(70)
    report = world.report()
    assert report["node_seconds"] == 100 + 30  # instance 1 is paid for until it is deallocated
    assert report["node_seconds_by_group"][KEY] == 130 and report["nodes_max"] == 2
    assert report["nodes_by_group"][KEY]["deallocated"] == 1 and report["nodes_by_group"][KEY]["ready"] == 1
    assert report["timeline"][-1]["groups"][KEY]["deallocated"] == 1
    arm = report["api_calls"]["breakdown"]["arm"]
    assert arm["instances_deallocated"] == {f"{POOL}/1": 1} and arm["instances_started"] == {}


def test_a_deallocating_node_goes_not_ready_its_pods_die_and_it_stays_with_the_shutdown_taint() -> None:
    world = make(initial=1, workloads=[job("work", cpu="1", duration="1h")])
    (pod,) = [p for p in pods_on(world, "pool-a000000") if p["metadata"]["name"].startswith("work-")]
    world.advance_by(10)
    world.deallocate_instances(pool(world), ["0"])
    node = world.k8s_get("nodes", "", "pool-a000000")
    ready = ready_condition(node)
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert taint_keys(node) == [("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")]
    assert world.k8s_get("pods", "default", pod["metadata"]["name"])["status"]["phase"] == "Failed"
    world.advance_by(30)  # deallocated: the cloud node lifecycle controller reports it shut down
    node = world.k8s_get("nodes", "", "pool-a000000")
    assert (SHUTDOWN_TAINT, "NoSchedule") in taint_keys(node)
    world.advance_by(600)  # nobody deletes the Node: it stays, NotReady
    assert ready_condition(world.k8s_get("nodes", "", "pool-a000000"))["status"] == "Unknown"
    report = world.report()
    assert report["pods_killed"] == 1  # the workload pod; the DaemonSet pod is not counted
    assert [p["outcome"] for p in report["pods"] if p["name"] == pod["metadata"]["name"]] == ["killed"]
    assert report["pods_pending"] == 1  # the Job's replacement has no node to go to


def test_start_brings_the_same_node_name_back_ready_after_the_boot_delay() -> None:
    world = make(initial=1)
    world.deallocate_instances(pool(world), ["0"])
    world.advance_by(30)
    world.k8s_delete("nodes", "", "pool-a000000")  # what the autoscaler does once the deallocation is done
    world.advance_by(70)
    op = world.start_instances(pool(world), ["0"])
    assert states(world) == [(0, "Updating", "starting")] and op.status == "InProgress"
    assert world.state()["groups"][KEY]["booting"] == 1
    world.advance_by(30)  # provisioning_fraction 0.5 of the 60 s boot delay
    assert states(world) == [(0, "Succeeded", "running")] and op.status == "Succeeded" and op.ended_at == 130
    assert world.k8s_list("nodes") == []
    world.advance_by(30)
    (node,) = world.k8s_list("nodes")
    assert node["metadata"]["name"] == "pool-a000000" and ready_condition(node)["status"] == "True"
    assert node["metadata"]["creationTimestamp"] == "2030-01-07T09:02:40Z"
    assert SHUTDOWN_TAINT not in [k for k, _ in taint_keys(node)]
    assert [p["metadata"]["name"].startswith("kube-proxy-") for p in pods_on(world, "pool-a000000")] == [True]
    world.advance_by(40)
    report = world.report()
    assert report["node_seconds"] == 30 + 100  # 0-30 and 100-200: the deallocated spell is free
    assert report["nodes_max"] == 1 and report["nodes_by_group"][KEY]["ready"] == 1
    assert report["api_calls"]["breakdown"]["arm"]["instances_started"] == {f"{POOL}/0": 1}


def test_a_node_object_left_in_place_is_made_ready_again() -> None:
    world = make(initial=1)
    before = world.k8s_get("nodes", "", "pool-a000000")
    world.deallocate_instances(pool(world), ["0"])
    world.advance_by(30)
    world.start_instances(pool(world), ["0"])
    world.advance_by(59)
    assert ready_condition(world.k8s_get("nodes", "", "pool-a000000"))["status"] == "Unknown"
    world.advance_by(1)
    node = world.k8s_get("nodes", "", "pool-a000000")
    assert ready_condition(node)["status"] == "True" and taint_keys(node) == []
    # kubelet re-registers with the Node it finds: same object, a new boot
    assert node["metadata"]["uid"] == before["metadata"]["uid"]
    assert node["metadata"]["creationTimestamp"] == before["metadata"]["creationTimestamp"]
    assert node["status"]["nodeInfo"]["bootID"] != before["status"]["nodeInfo"]["bootID"]
    assert world.state()["groups"][KEY]["ready"] == 1


def test_starting_a_running_instance_or_deallocating_a_deallocated_one_is_a_no_op() -> None:
    world = make(initial=1)
    op = world.start_instances(pool(world), ["0"])
    assert op.status == "Succeeded" and op.ended_at == 0 and states(world) == [(0, "Succeeded", "running")]
    world.deallocate_instances(pool(world), ["0"])
    world.advance_by(30)
    again = world.deallocate_instances(pool(world), ["0"])
    assert again.status == "Succeeded" and states(world) == [(0, "Succeeded", "deallocated")]
    arm = world.report()["api_calls"]["breakdown"]["arm"]
    assert arm["instances_started"] == {f"{POOL}/0": 1} and arm["instances_deallocated"] == {f"{POOL}/0": 2}


@pytest.mark.parametrize("verb", ["deallocate", "start"])
@pytest.mark.parametrize("ids", [["42"], ["0", "42"], ["abc"]])
def test_an_unknown_instance_id_refuses_the_whole_request(verb: str, ids: list[str]) -> None:
    world = make()
    act = world.deallocate_instances if verb == "deallocate" else world.start_instances
    with pytest.raises(ArmError) as caught:
        act(pool(world), ids)
    assert (caught.value.status, caught.value.code, caught.value.target) == (400, "InvalidParameter", "instanceIds")
    assert caught.value.message == f"The provided instanceId {ids[-1]} is not an active Virtual Machine Scale Set VM instanceId."
    assert states(world) == [(0, "Succeeded", "running"), (1, "Succeeded", "running")]
    arm = world.report()["api_calls"]["breakdown"]["arm"]
    assert arm["instances_deallocated"] == {} and arm["instances_started"] == {}


def test_an_instance_being_deleted_cannot_be_deallocated_or_started() -> None:
    world = make()
    world.delete_instances(pool(world), ["1"])
    for act in (world.deallocate_instances, world.start_instances):
        with pytest.raises(ArmError) as caught:
            act(pool(world), ["1"])
        assert (caught.value.status, caught.value.code) == (409, "OperationNotAllowed")


def test_no_instance_ids_means_every_instance() -> None:
    world = make(initial=3)
    world.deallocate_instances(pool(world), None)
    world.advance_by(30)
    assert [power for _, _, power in states(world)] == ["deallocated"] * 3
    world.start_instances(pool(world), [])
    assert [power for _, _, power in states(world)] == ["starting"] * 3


def test_growing_adds_new_instances_and_leaves_deallocated_ones_deallocated() -> None:
    world = make()
    world.deallocate_instances(pool(world), ["1"])
    world.advance_by(30)
    world.set_capacity(pool(world), 3)
    assert states(world) == [(0, "Succeeded", "running"), (1, "Succeeded", "deallocated"), (2, "Creating", "starting")]
    world.advance_by(60)
    assert states(world)[2] == (2, "Succeeded", "running")
    assert world.state()["groups"][KEY] | {} == {
        "ready": 2, "booting": 0, "deleting": 0, "deallocated": 1, "target": 3, "min": 0, "max": 10, "idle": 2,
        "autoscaled": True}
    world.set_capacity(pool(world), 1)  # scale-in takes the highest ids, deallocated or not
    assert [(i, s) for i, s, _ in states(world)] == [(0, "Succeeded"), (1, "Deleting"), (2, "Deleting")]


def test_deleting_a_deallocated_instance_counts_it_out_once() -> None:
    world = make()
    world.deallocate_instances(pool(world), ["1"])
    world.advance_by(40)
    world.delete_instances(pool(world), ["1"])
    world.advance_by(30)  # vanished at 70
    assert states(world) == [(0, "Succeeded", "running")]
    world.set_capacity(pool(world), 3)  # two new instances: three alive at once
    world.advance_by(30)
    report = world.report()
    assert report["nodes_max"] == 3
    assert report["node_seconds"] == 100 + 30 + 2 * 30  # instance 1 unpaid from 30 until it vanished at 70


def test_a_start_preempts_a_deallocation_under_way() -> None:
    world = make(initial=1)
    deallocation = world.deallocate_instances(pool(world), ["0"])
    world.advance_by(10)
    start = world.start_instances(pool(world), ["0"])
    world.advance_by(0)
    assert (deallocation.status, deallocation.error_code) == ("Failed", "OperationPreempted")
    world.advance_by(60)
    assert start.status == "Succeeded" and states(world) == [(0, "Succeeded", "running")]
    assert ready_condition(world.k8s_get("nodes", "", "pool-a000000"))["status"] == "True"
    assert world.report()["node_seconds"] == 70  # never deallocated: paid throughout


def test_the_deallocate_delay_can_be_set_apart_from_the_delete_delay() -> None:
    world = make(initial=1, deallocate_delay="90s")
    op = world.deallocate_instances(pool(world), ["0"])
    world.advance_by(89)
    assert op.status == "InProgress"
    world.advance_by(1)
    assert op.status == "Succeeded" and states(world) == [(0, "Succeeded", "deallocated")]
