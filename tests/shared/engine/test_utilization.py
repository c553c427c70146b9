from __future__ import annotations

import pytest

from shared.engine.utilization import UtilizationRules, node_utilization
from tests.builders import daemon_pod, node, pod, res

GPU_NODE = node("gpu", alloc=res(8, 32, 110, gpu=2))


@pytest.mark.parametrize("case_id,the_node,pods,rules,value,resource", [
    ("empty node", node("n"), [], UtilizationRules(), 0.0, "cpu"),
    ("cpu bound: the larger share counts", node("n"), [pod("a", cpu=2, mem=2, node_name="n")],
     UtilizationRules(), 0.5, "cpu"),
    ("memory bound", node("n"), [pod("a", cpu=1, mem=12, node_name="n")], UtilizationRules(), 0.75, "memory"),
    ("daemonset pods left out by default", node("n"), [daemon_pod("n", cpu=2)], UtilizationRules(), 0.0, "cpu"),
    ("daemonset pods counted when asked", node("n"), [daemon_pod("n", cpu=2)],
     UtilizationRules(ignore_daemonsets=False), 0.5, "cpu"),
    ("finished pods hold nothing", node("n"), [pod("a", cpu=4, node_name="n", phase="Succeeded")],
     UtilizationRules(), 0.0, "cpu"),
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
