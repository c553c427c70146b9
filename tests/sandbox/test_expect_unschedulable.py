"""A scenario's `expect_unschedulable`: `done` does not wait for those pods, and state and report list the ones
Pending with the autoscaler's latest NotTriggerScaleUp message about each."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sandbox.world import World
from tests.sandbox.helpers import scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SOLO = {"name": "solo", "kind": "ReplicaSet", "count": 2, "requests": {"cpu": "250m", "memory": "256Mi"},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}


def _world(**expect: Any) -> World:
    return World(scenario(workloads=[SOLO], **expect), seed=0, start=START)


def _stuck(world: World) -> str:
    (pod,) = [p for p in world.k8s_list("pods", "default") if p["status"].get("phase") == "Pending"]
    return str(pod["metadata"]["name"])


def test_without_the_field_a_pod_stuck_on_anti_affinity_holds_up_done() -> None:
    world = _world()
    world.advance_by(5)
    assert world.state()["pending"] == 1 and world.state()["pending_unplaceable"] == 0  # the sandbox cannot tell
    assert world.done() == (False, None)
    assert "expect_unschedulable" not in world.state()


def test_expected_pods_do_not_hold_up_done_and_carry_the_autoscalers_reason() -> None:
    world = _world(expect_unschedulable=[{"workload": "solo", "count": 1}])
    world.advance_by(5)
    stuck = _stuck(world)
    assert world.done() == (True, "workload-complete")
    assert world.state()["expect_unschedulable"] == {
        "default/solo": {"expected": 1, "pending": [{"pod": f"default/{stuck}", "reason": None}]}}

    message = "pod didn't trigger scale-up: rg-test/pool-a: node(s) didn't match pod anti-affinity rules"
    world.k8s_create("events", "default", {
        "metadata": {"generateName": f"{stuck}."}, "reason": "NotTriggerScaleUp", "message": message, "type": "Normal",
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": stuck}})
    expected = {"default/solo": {"expected": 1, "pending": [{"pod": f"default/{stuck}", "reason": message}]}}
    assert world.state()["expect_unschedulable"] == expected
    assert world.report()["expect_unschedulable"] == expected
