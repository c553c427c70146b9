from __future__ import annotations

import pytest

from dataclasses import replace

from shared.domain import OwnerRef, Pod, Resources
from shared.engine.utilization import UtilizationRules, node_utilization
from tests.builders import daemon_pod, node, pod, res

GPU_NODE = node("gpu", alloc=res(8, 32, 110, gpu=2))


@pytest.mark.parametrize("case_id,the_node,pods,rules,value,resource", [
    ("empty node (a tie goes to memory, as CA's)", node("n"), [], UtilizationRules(), 0.0, "memory"),
    ("cpu bound: the larger share counts", node("n"), [pod("a", cpu=2, mem=2, node_name="n")],
     UtilizationRules(), 0.5, "cpu"),
    ("memory bound", node("n"), [pod("a", cpu=1, mem=12, node_name="n")], UtilizationRules(), 0.75, "memory"),
    ("daemonset pods left out by default", node("n"), [daemon_pod("n", cpu=2)], UtilizationRules(), 0.0, "memory"),
    ("daemonset pods counted when asked", node("n"), [daemon_pod("n", cpu=2)],
     UtilizationRules(ignore_daemonsets=False), 0.5, "cpu"),
    ("finished pods hold nothing", node("n"), [pod("a", cpu=4, node_name="n", phase="Succeeded")],
     UtilizationRules(), 0.0, "memory"),
    ("gpu node: judged by its GPUs alone", GPU_NODE, [pod("a", cpu=7, node_name="gpu")],
     UtilizationRules(), 0.0, "nvidia.com/gpu"),
    ("gpu node with one of two GPUs busy", GPU_NODE, [pod("a", requests=res(1, 1, gpu=1), node_name="gpu")],
     UtilizationRules(gpu_threshold=0.6), 0.5, "nvidia.com/gpu"),
])
def test_node_utilization(case_id, the_node, pods, rules, value, resource) -> None:  # type: ignore[no-untyped-def]
    used = node_utilization(the_node, pods, rules=rules)
    assert used.value == pytest.approx(value, abs=0.01)
    assert used.resource == resource
    assert used.threshold == (rules.gpu_threshold if "gpu" in resource else rules.threshold)


# cluster-autoscaler's own cases (simulator/utilization/info_test.go, TestCalculate), its data in our builders:
# a node of 2000m and 2,000,000 bytes; p1 asks 100m and 200,000 bytes, p2 nothing.
CA_NODE = node("node1", alloc=Resources(cpu_milli=2000, memory_bytes=2_000_000, pods=110))
P = Resources(cpu_milli=100, memory_bytes=200_000)


def _p(name: str, **extra: object) -> Pod:
    base = pod(name, requests=P, node_name="node1")
    return replace(base, **extra)  # type: ignore[arg-type]


P1, P2 = _p("p1"), replace(pod("p2", requests=Resources(), node_name="node1"))
DS3 = _p("p3", owner=OwnerRef("DaemonSet", "ds"))
DS4 = _p("p4", owner=OwnerRef("CustomDaemonSet", "ds"),
         annotations={"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"})
MIRROR = _p("mirror", is_mirror=True, owner=None)
ALL = UtilizationRules(ignore_daemonsets=False, ignore_mirror_pods=False)


@pytest.mark.parametrize("case_id,pods,rules,value", [
    ("two pods: memory 0.2 beats cpu 0.1", [P1, P1, P2], ALL, 2.0 / 10),
    ("daemonset pods, and a custom controller's marked as such, leave both sides", [P1, P1, P2, DS3, DS4],
     UtilizationRules(ignore_daemonsets=True, ignore_mirror_pods=False), 2.5 / 10),
    ("daemonset pods counted when not ignored", [P1, P2, DS3], ALL, 2.0 / 10),
    ("a mirror pod leaves both sides", [P1, P1, P2, MIRROR], UtilizationRules(ignore_daemonsets=False), 2.0 / 9),
    ("a mirror pod counted when not ignored", [P1, P2, MIRROR], ALL, 2.0 / 10),
    ("daemonset and mirror pods both leave", [P1, MIRROR, DS3], UtilizationRules(), 1.0 / 8),
])
def test_utilization_as_cluster_autoscaler_computes_it(case_id: str, pods: list[Pod], rules: UtilizationRules,
                                                       value: float) -> None:
    assert node_utilization(CA_NODE, pods, rules=rules).value == pytest.approx(value, rel=0.01)


def test_a_gpu_node_is_judged_by_its_gpus_and_is_at_zero_until_they_are_allocatable() -> None:
    gpu_node = node("gpu_node", alloc=Resources(cpu_milli=2000, memory_bytes=2_000_000, extended=(("nvidia.com/gpu", 1),)))
    gpu_pod = pod("gpu_pod", requests=Resources(cpu_milli=100, memory_bytes=200_000, extended=(("nvidia.com/gpu", 1),)),
                  node_name="gpu_node")
    assert node_utilization(gpu_node, [P1, P1, gpu_pod]).value == pytest.approx(1.0)
    # AKS labels the node before the device plugin makes the GPUs allocatable: CA calls it 0, and so do we.
    unready = node("gpu_node", alloc=Resources(cpu_milli=2000, memory_bytes=2_000_000),
                   labels={"kubernetes.azure.com/accelerator": "nvidia"})
    used = node_utilization(unready, [P1, P1])
    assert (used.value, used.resource, used.low) == (0.0, "nvidia.com/gpu", True)


@pytest.mark.parametrize("threshold,value,candidate", [
    (0.5, 0.49, True), (0.5, 0.5, False),  # at the threshold: kept (CA: Utilization >= threshold is not underutilized)
    (0.0, 0.0, False),  # a threshold of 0 makes no node a candidate, not even an empty one, as in CA
    (1.0, 0.99, True),
])
def test_a_candidate_is_strictly_below_its_threshold(threshold: float, value: float, candidate: bool) -> None:
    from shared.engine.utilization import Utilization

    assert Utilization(value, "cpu", threshold).low is candidate


def test_a_long_terminating_pod_counts_for_nothing_as_in_cluster_autoscaler() -> None:
    from datetime import timedelta

    from tests.builders import T0

    # info_test.go: a pod deleted ten minutes ago (default grace) is left out: 0.2, as without it.
    terminated = _p("podTerminated", terminating=True, deleted_at=T0 - timedelta(minutes=10))
    assert node_utilization(CA_NODE, [P1, P1, P2, terminated], rules=ALL, now=T0).value == pytest.approx(0.2, rel=0.01)
    recent = _p("podTerminating", terminating=True, deleted_at=T0 - timedelta(seconds=5))
    assert node_utilization(CA_NODE, [P1, P1, P2, recent], rules=ALL, now=T0).value == pytest.approx(0.3, rel=0.01)
