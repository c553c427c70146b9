"""How busy a node is by its pods' requests, as cluster-autoscaler measures it for scale-down.

Pure module, no side effects. Utilisation is the larger of CPU requests over
allocatable and memory requests over allocatable; a node with GPUs is judged by
its GPU requests alone, against the GPU threshold, since an idle GPU is the cost
that matters there. DaemonSet and mirror pods are left out by default: they go
with the node and would come back on any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shared.domain import Node, Pod
from shared.engine.predicates import pod_requests

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


@dataclass(frozen=True, slots=True)
class UtilizationRules:
    threshold: float = 0.5  # SCALE_DOWN_UTILIZATION_THRESHOLD
    gpu_threshold: float = 0.5  # SCALE_DOWN_GPU_UTILIZATION_THRESHOLD
    ignore_daemonsets: bool = True  # SCALE_DOWN_IGNORE_DAEMONSETS_UTILIZATION
    ignore_mirror_pods: bool = True  # SCALE_DOWN_IGNORE_MIRROR_PODS_UTILIZATION


@dataclass(frozen=True, slots=True)
class Utilization:
    value: float  # what is compared with the threshold
    resource: str  # "cpu", "memory" or the GPU resource name
    threshold: float

    @property
    def low(self) -> bool:
        return self.value < self.threshold

    def describe(self) -> str:
        return f"{self.resource} utilization {self.value:.2f}"


def _gpus(node: Node) -> tuple[str, int] | None:
    extended = dict(node.allocatable.extended)
    for name in GPU_RESOURCES:
        if extended.get(name, 0) > 0:
            return name, extended[name]
    return None


def _counted(pod: Pod, rules: UtilizationRules) -> bool:
    if pod.is_finished:
        return False
    if pod.is_daemonset and rules.ignore_daemonsets:
        return False
    return not (pod.is_mirror and rules.ignore_mirror_pods)


def node_utilization(node: Node, pods: Iterable[Pod], *, rules: UtilizationRules = UtilizationRules()) -> Utilization:
    """`pods` are the pods bound to the node; the ones the rules leave out are skipped here."""
    counted = [pod_requests(p) for p in pods if _counted(p, rules)]
    gpu = _gpus(node)
    if gpu is not None:
        name, total = gpu
        used = sum(dict(r.extended).get(name, 0) for r in counted)
        return Utilization(used / total, name, rules.gpu_threshold)
    cpu = sum(r.cpu_milli for r in counted) / node.allocatable.cpu_milli if node.allocatable.cpu_milli else 1.0
    memory = (sum(r.memory_bytes for r in counted) / node.allocatable.memory_bytes
              if node.allocatable.memory_bytes else 1.0)
    if cpu >= memory:
        return Utilization(cpu, "cpu", rules.threshold)
    return Utilization(memory, "memory", rules.threshold)
