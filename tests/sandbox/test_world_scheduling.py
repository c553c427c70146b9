"""Scheduling inside the world: the pod JSON a scenario produces, and the scheduler acting on it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.world import World
from sandbox.world.errors import KubeError
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
ZONE = "topology.kubernetes.io/zone"
GPU_POOL: dict[str, Any] = {
    "resource_group": RG, "name": "pool-gpu", "vm_size": "Standard_NC4as_T4_v3",
    "allocatable": {"cpu": "3860m", "memory": "24Gi", "nvidia.com/gpu": 1},
    "min": 0, "max": 3, "initial": 1,
    "labels": {"kubernetes.azure.com/accelerator": "nvidia"},
    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ANTI_HOSTNAME = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def make(doc: dict[str, Any]) -> World:
    return World(doc, seed=0, start=START)


def pods(world: World) -> list[dict[str, Any]]:
    return world.k8s_list("pods", "default")


def with_gpu_pool(**overrides: Any) -> dict[str, Any]:
    doc = scenario(**overrides)
    doc["node_groups"].append(dict(GPU_POOL))
    return doc


def test_workload_pods_carry_the_scenario_in_the_api_shape() -> None:
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": {"app": "w"}}}]
    doc = with_gpu_pool(workloads=[job(
        "w", labels={"app": "w"}, annotations={"team": "ml"}, priority=1000,
        requests={"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": 1},
        tolerations=[GPU_TOLERATION], affinity=ANTI_HOSTNAME, topology_spread_constraints=spread,
        host_ports=[8080, {"port": 5353, "protocol": "UDP"}],
    )])
    (pod,) = pods(make(doc))
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},  # extended resources are not overcommitted: limits equal requests
    }
    assert container["ports"] == [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"},
                                  {"containerPort": 5353, "hostPort": 5353, "protocol": "UDP"}]
    assert spec["affinity"] == ANTI_HOSTNAME
    assert spec["topologySpreadConstraints"] == spread
    assert spec["tolerations"] == [GPU_TOLERATION | {"operator": "Exists"}]
    assert spec["priority"] == 1000
    assert pod["metadata"]["annotations"] == {"team": "ml"}
    # The GPU pool's node has no ephemeral-storage in allocatable: like kube-scheduler, none is free.
    assert pod["status"]["phase"] == "Pending"
    assert "Insufficient ephemeral-storage" in pod["status"]["conditions"][0]["message"]


def test_gpu_pods_go_only_to_gpu_nodes_and_others_stay_off_them() -> None:
    doc = with_gpu_pool(workloads=[
        job("train", count=2, requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}, tolerations=[GPU_TOLERATION]),
        job("plain", count=2, cpu="1"),
    ])
    world = make(doc)
    placed = {(p["metadata"]["name"].split("-")[0], p["spec"].get("nodeName")) for p in pods(world)}
    assert ("train", "pool-gpu000000") in placed and ("train", None) in placed  # one GPU, two pods
    assert {node for name, node in placed if name == "plain"} == {"pool-a000000"}
    waiting = next(p for p in pods(world) if p["metadata"]["name"].startswith("train") and p["status"]["phase"] == "Pending")
    # The tolerating pod passes the GPU node's taint and finds its GPU taken; pool-a has no GPU at all.
    assert waiting["status"]["conditions"][0]["message"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")


def test_topology_spread_fills_zones_evenly_in_the_world() -> None:
    doc = scenario(workloads=[job(
        "w", count=6, cpu="100m", memory="100Mi", labels={"app": "w"},
        topology_spread_constraints=[{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                      "labelSelector": {"matchLabels": {"app": "w"}}}],
    )])
    doc["node_groups"][0] |= {"zones": ["1", "2", "3"], "initial": 3}
    world = make(doc)
    zones = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in world.k8s_list("nodes")}
    counts: dict[str, int] = {}
    for pod in pods(world):
        counts[zones[pod["spec"]["nodeName"]]] = counts.get(zones[pod["spec"]["nodeName"]], 0) + 1
    assert counts == {"westeurope-1": 2, "westeurope-2": 2, "westeurope-3": 2}


def test_anti_affinity_replicas_wait_for_new_nodes_and_then_spread() -> None:
    world = make(scenario(workloads=[job("w", count=3, cpu="100m", labels={"app": "w"}, affinity=ANTI_HOSTNAME,
                                         kind="ReplicaSet", duration=None)]))
    assert sorted(p["status"]["phase"] for p in pods(world)) == ["Pending", "Pending", "Running"]
    world.set_capacity(world.scale_set(world.subscription_id, RG, POOL), 3)
    world.advance_by(60)
    assert len({p["spec"]["nodeName"] for p in pods(world)}) == 3
    assert world.done() == (True, "workload-complete")


def test_host_ports_allow_one_pod_per_node() -> None:
    world = make(scenario(workloads=[job("w", count=2, cpu="100m", host_ports=[9100])]))
    phases = sorted(p["status"]["phase"] for p in pods(world))
    assert phases == ["Pending", "Running"]
    pending = next(p for p in pods(world) if p["status"]["phase"] == "Pending")
    assert "1 node(s) didn't have free ports for the requested pod ports" in pending["status"]["conditions"][0]["message"]


@pytest.mark.parametrize(
    ("extra", "unplaceable"),
    [
        ({"cpu": "200"}, True),  # bigger than any node of any pool
        ({"cpu": "6"}, False),  # too big for pool-a, fits an empty node of the bigger pool at zero
        ({"cpu": "1", "node_selector": {"pool": "nowhere"}}, True),
        ({"cpu": "3950m", "node_selector": {"pool": "a"}}, True),  # 4 CPUs, but a DaemonSet pod takes 100m
    ],
)
def test_done_does_not_wait_for_pods_no_pool_could_ever_hold(extra: dict[str, Any], unplaceable: bool) -> None:
    doc = scenario(workloads=[job("w", **extra)])
    doc["node_groups"].append({"resource_group": RG, "name": "pool-big", "vm_size": "Standard_D8s_v5",
                               "allocatable": {"cpu": "8", "memory": "32Gi"}, "min": 0, "max": 2, "initial": 0,
                               "labels": {"pool": "big"}})
    world = make(doc)
    assert pods(world)[0]["status"]["phase"] == "Pending"
    assert world.state()["pending_unplaceable"] == int(unplaceable)
    assert world.done() == ((True, "workload-complete") if unplaceable else (False, None))


def test_scale_up_failures_declared_in_the_scenario_apply_from_the_start() -> None:
    world = make(scenario(scale_up_failures=[{"scale_set": POOL, "code": "AllocationFailed", "count": 2}]))
    group = world.scale_set(world.subscription_id, RG, POOL)
    codes = []
    for _ in range(3):
        op = world.set_capacity(group, group.capacity + 1)
        world.advance_by(5)
        codes.append(op.error_code)
    assert codes == ["AllocationFailed", "AllocationFailed", None]


def test_api_pods_are_scheduled_from_their_spec_and_bad_specs_are_refused() -> None:
    world = make(with_gpu_pool())
    body = {"metadata": {"name": "gpu-job"}, "spec": {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}}],
        "tolerations": [GPU_TOLERATION]}}
    world.k8s_create("pods", "default", body)
    assert world.k8s_get("pods", "default", "gpu-job")["spec"]["nodeName"] == "pool-gpu000000"
    bad = {"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k", "operator": "Near"}]}]}}}}}
    with pytest.raises(KubeError) as refused:
        world.k8s_create("pods", "default", bad)
    assert (refused.value.code, refused.value.reason) == (422, "Invalid")
    assert "matchExpressions[0].operator" in refused.value.message


def test_the_report_names_each_pods_group_and_counts_api_events_by_reason() -> None:
    world = make(scenario(workloads=[job("w"), job("big", cpu="64")]))
    for i, reason in enumerate(["TriggeredScaleUp", "NotTriggerScaleUp", "NotTriggerScaleUp"]):
        world.k8s_create("events", "default", {"metadata": {"name": f"e{i}"}, "reason": reason, "message": "m",
                                               "involvedObject": {"kind": "Pod", "name": "w", "namespace": "default"}})
    report = world.report()
    assert {p["name"].split("-")[0]: p["group"] for p in report["pods"]} == {"w": f"{RG.lower()}/{POOL}", "big": None}
    assert report["events_by_reason"] == {"NotTriggerScaleUp": 2, "TriggeredScaleUp": 1}
