"""The multi-pool and quota-fallback scenarios: their structure, and the world placing their pods as
kube-scheduler would once an autoscaler (played here by hand) adds the nodes."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.domain import Taint
from sandbox.model.resources import Amounts, parse_resource_list
from sandbox.model.scenario import NodeGroupSpec, load_scenario
from sandbox.world import World

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
RG = "rg-sandbox-nodes"
LABEL_TAG = "k8s.io_cluster-autoscaler_node-template_label_"
TAINT_TAG = "k8s.io_cluster-autoscaler_node-template_taint_"
RESOURCES_TAG = "k8s.io_cluster-autoscaler_node-template_resources_"


def decode_tag_name(encoded: str, *, resource: bool = False) -> str:
    """cluster-autoscaler's Azure provider (azure_template.go): `_` stands for `/`, then `~2` for `_` in
    label and taint keys; in resource names it maps `~2` to `/` as well."""
    return encoded.replace("_", "/").replace("~2", "/" if resource else "_")


@pytest.mark.parametrize(
    ("encoded", "resource", "decoded"),
    [
        ("kubernetes.azure.com_accelerator", False, "kubernetes.azure.com/accelerator"),
        ("nvidia.com_gpu", False, "nvidia.com/gpu"),
        ("example.com_my~2label", False, "example.com/my_label"),
        ("nvidia.com_gpu", True, "nvidia.com/gpu"),
        ("ephemeral-storage", True, "ephemeral-storage"),
    ],
)
def test_tag_names_decode_as_cluster_autoscaler_does(encoded: str, resource: bool, decoded: str) -> None:
    assert decode_tag_name(encoded, resource=resource) == decoded


def template_from_tags(tags: dict[str, str]) -> tuple[dict[str, str], set[Taint], Amounts]:
    labels = {decode_tag_name(k[len(LABEL_TAG):]): v for k, v in tags.items() if k.startswith(LABEL_TAG)}
    taints = set()
    for key, value in tags.items():
        if key.startswith(TAINT_TAG):
            taint_value, effect = value.split(":", 1)
            taints.add(Taint(decode_tag_name(key[len(TAINT_TAG):]), taint_value, effect))
    resources = {
        decode_tag_name(k[len(RESOURCES_TAG):], resource=True): v for k, v in tags.items() if k.startswith(RESOURCES_TAG)
    }
    return labels, taints, parse_resource_list(resources)


def _group(name: str, groups: tuple[NodeGroupSpec, ...]) -> NodeGroupSpec:
    return next(g for g in groups if g.name == name)


def _without_pods(amounts: Amounts) -> Amounts:
    return Amounts(amounts.cpu_milli, amounts.memory_bytes, 0, amounts.scalars)


# ---------------------------------------------------------------------------- structure


def test_multi_pool_declares_three_autoscaled_pools_in_one_resource_group() -> None:
    loaded = load_scenario("multi-pool")
    assert {(g.resource_group, g.name, g.vm_size, g.min_size, g.max_size, g.initial) for g in loaded.node_groups} == {
        (RG, "pool-general", "Standard_D4s_v5", 1, 10, 1),
        (RG, "pool-memory", "Standard_E8s_v5", 0, 5, 0),
        (RG, "pool-gpu", "Standard_NC4as_T4_v3", 0, 3, 0),
    }
    assert all(g.autoscaled for g in loaded.node_groups)
    gpu = _group("pool-gpu", loaded.node_groups)
    assert gpu.taints == (Taint("nvidia.com/gpu", "true", "NoSchedule"),)
    assert gpu.labels == {"kubernetes.azure.com/accelerator": "nvidia"}
    assert gpu.allocatable.scalar("nvidia.com/gpu") == 1
    assert "Expected:" in loaded.description and "oversized" in loaded.description


@pytest.mark.parametrize("name", ["pool-general", "pool-memory", "pool-gpu"])
def test_multi_pool_tags_describe_the_nodes_exactly(name: str) -> None:
    """Scale from zero: the tags are the autoscaler's only source, and nodes boot as they promise."""
    group = _group(name, load_scenario("multi-pool").node_groups)
    labels, taints, resources = template_from_tags(dict(group.tags))
    assert labels == dict(group.labels)
    assert taints == set(group.taints)
    assert resources == _without_pods(group.allocatable)


def test_multi_pool_workloads_cover_selectors_tolerations_gpus_anti_affinity_and_an_impossible_pod() -> None:
    workloads = {w.name: w for w in load_scenario("multi-pool").workloads}
    assert set(workloads) == {"web", "batch", "analytics", "training", "oversized"}
    assert not workloads["batch"].node_selector and not workloads["batch"].tolerations
    assert workloads["analytics"].node_selector == {"workload": "memory"}
    assert workloads["training"].extended == {"nvidia.com/gpu": 1}
    assert workloads["training"].tolerations[0].key == "nvidia.com/gpu"
    web = workloads["web"]
    assert (web.kind, web.count, web.duration) == ("ReplicaSet", 3, None)
    (term,) = (web.affinity or {})["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert workloads["oversized"].cpu.values == (200_000,)
    finite = [w for w in workloads.values() if w.name != "web"]
    assert all(w.duration is not None for w in finite)


def test_quota_fallback_fails_the_preferred_pools_scale_ups() -> None:
    loaded = load_scenario("quota-fallback")
    groups = {g.name: g for g in loaded.node_groups}
    assert set(groups) == {"system", "pool-d4", "pool-f8"}
    assert not groups["system"].autoscaled and groups["system"].taints
    assert all(groups[n].initial == 0 and groups[n].autoscaled for n in ("pool-d4", "pool-f8"))
    (failure,) = loaded.scale_up_failures
    assert (failure.scale_set, failure.code, failure.count) == ("pool-d4", "QuotaExceeded", 5)
    for name in ("pool-d4", "pool-f8"):
        _, _, resources = template_from_tags(dict(groups[name].tags))
        assert resources == _without_pods(groups[name].allocatable)
    assert "15 minutes" in loaded.description


# ---------------------------------------------------------------------------- the world at work


def _pods(world: World) -> list[dict[str, Any]]:
    return world.k8s_list("pods", "default")


def _owner(pod: dict[str, Any]) -> str:
    return pod["metadata"]["name"].rsplit("-", 1)[0]


def _scheduled_condition(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")


def _grow(world: World, sizes: dict[str, int]) -> None:
    for name, size in sizes.items():
        world.set_capacity(world.scale_set(world.subscription_id, RG, name), size)


def test_multi_pool_pods_wait_for_the_right_pools() -> None:
    world = World("multi-pool", seed=0, start=START)
    world.advance_by(60)
    pending = {_owner(p): _scheduled_condition(p)["message"] for p in _pods(world) if p["status"]["phase"] == "Pending"}
    assert "Insufficient nvidia.com/gpu" in pending["training"]
    assert "didn't match Pod's node affinity/selector" in pending["analytics"]
    assert "anti-affinity" in pending["web"]
    running_web = [p for p in _pods(world) if _owner(p) == "web" and p["status"]["phase"] == "Running"]
    assert len(running_web) == 1  # one replica per node, and there is one node
    state = world.state()
    assert state["pending_unplaceable"] == 1  # the oversized pod
    assert state["pending"] > 1 and not state["done"]


def test_multi_pool_places_every_pod_as_kube_scheduler_would() -> None:
    world = World("multi-pool", seed=0, start=START)
    world.advance_by(60)
    _grow(world, {"pool-general": 5, "pool-memory": 2, "pool-gpu": 2})
    world.advance_by(1800)
    assert world.done() == (True, "workload-complete")

    report = world.report()
    placements = Counter((p["workload"], p["group"]) for p in report["pods"])
    assert placements == {
        ("default/web", f"{RG}/pool-general"): 3,
        ("default/batch", f"{RG}/pool-general"): 12,
        ("default/analytics", f"{RG}/pool-memory"): 4,
        ("default/training", f"{RG}/pool-gpu"): 2,
        ("default/oversized", None): 1,
    }
    web_nodes = [p["node"] for p in report["pods"] if p["workload"] == "default/web"]
    assert len(set(web_nodes)) == 3  # required anti-affinity on the hostname
    gpu_nodes = {n["metadata"]["name"] for n in world.k8s_list("nodes") if n["metadata"]["name"].startswith("pool-gpu")}
    assert {p["node"] for p in report["pods"] if p["node"] in gpu_nodes} == {
        p["node"] for p in report["pods"] if p["workload"] == "default/training"}

    (oversized,) = [p for p in _pods(world) if _owner(p) == "oversized"]
    condition = _scheduled_condition(oversized)
    assert (oversized["status"]["phase"], condition["status"], condition["reason"]) == ("Pending", "False", "Unschedulable")
    assert condition["message"].startswith(
        "0/9 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}, 7 Insufficient cpu."
    )
    assert report["pods_unplaceable"] == 1 and report["pods_unschedulable"] == 1


def test_multi_pool_gpu_nodes_boot_with_the_tagged_taint_label_and_gpu() -> None:
    world = World("multi-pool", seed=0, start=START)
    _grow(world, {"pool-gpu": 1})
    world.advance_by(700)  # the GPU pool boots in at most 660 s
    (gpu_node,) = [n for n in world.k8s_list("nodes") if n["metadata"]["name"].startswith("pool-gpu")]
    assert gpu_node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu_node["metadata"]["labels"]["kubernetes.azure.com/accelerator"] == "nvidia"
    assert gpu_node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "westeurope-1"
    assert gpu_node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert gpu_node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    system_pods = {p["metadata"]["name"].rsplit("-", 1)[0] for p in world.k8s_list("pods", "kube-system")
                   if p["spec"]["nodeName"] == gpu_node["metadata"]["name"]}
    assert system_pods == {"kube-proxy", "log-agent", "nvidia-device-plugin"}


def test_quota_fallback_refuses_the_preferred_scale_ups_and_the_fallback_runs_everything() -> None:
    world = World("quota-fallback", seed=0, start=START)
    world.advance_by(60)
    messages = {_scheduled_condition(p)["message"] for p in _pods(world)}
    assert messages == {
        "0/1 nodes are available: 1 node(s) had untolerated taint {CriticalAddonsOnly: true}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    }
    preferred = world.scale_set(world.subscription_id, RG, "pool-d4")
    failed = world.set_capacity(preferred, 6)
    world.advance_by(5)
    assert (failed.status, failed.error_code) == ("Failed", "QuotaExceeded")
    assert preferred.capacity == 0 and world.instances(preferred) == []
    _grow(world, {"pool-f8": 6})
    world.advance_by(900)
    report = world.report()
    assert Counter(p["group"] for p in report["pods"]) == {f"{RG}/pool-f8": 12}
    assert report["pod_wait_seconds"]["max"] < 900  # MAX_NODE_PROVISION_TIME
    retry = world.set_capacity(preferred, 1)  # the quota is still spent: refused again, as every declared one
    world.advance_by(5)
    assert (retry.status, retry.error_code) == ("Failed", "QuotaExceeded") and world.instances(preferred) == []


def test_allocation_failure_leaves_the_first_increase_failed_with_a_successful_operation() -> None:
    loaded = load_scenario("allocation-failure")
    (failure,) = loaded.allocation_failures
    assert (failure.scale_set, failure.code, failure.instances, failure.count) == (
        "pool-d4", "ZonalAllocationFailed", None, 1)
    world = World(loaded, seed=0, start=START)
    world.advance_by(60)
    preferred = world.scale_set(world.subscription_id, RG, "pool-d4")
    grown = world.set_capacity(preferred, 3)
    world.advance_by(120)  # past provisioning (boot 90-150 s, provisioning a third of it), not past a boot
    assert grown.status == "Succeeded"  # Azure's operation succeeded...
    instances = world.instances(preferred)
    assert [i.state for i in instances] == ["Failed"] * 3  # ...and left every new instance Failed
    assert {i.error_code for i in instances} == {"ZonalAllocationFailed"}
    assert preferred.capacity == 3  # still in the capacity: billed and in quota until deleted
    world.advance_by(300)
    assert not any(n["metadata"]["name"].startswith("pool-d4") for n in world.k8s_list("nodes", ""))  # no node ever
    again = world.set_capacity(preferred, 4)  # count 1: the next increase is an ordinary one
    world.advance_by(300)
    assert again.status == "Succeeded" and world.instances(preferred)[-1].state == "Succeeded"
    deleted = world.delete_instances(preferred, [str(i.instance_id) for i in instances])
    world.advance_by(60)
    assert deleted.status == "Succeeded" and preferred.capacity == 1
    report = world.report()["allocation"]
    assert (report["failed_total"], report["deleted"], report["failed_at_end"]) == (3, 3, 0)
