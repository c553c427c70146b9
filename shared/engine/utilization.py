"""How busy a node is by its pods' requests, as cluster-autoscaler measures it for scale-down.

Pure module, no side effects. cluster-autoscaler's `utilization.Calculate` (simulator/utilization/info.go):

- utilisation is the larger of CPU and memory requests over allocatable; a GPU node (GPUs in its
  allocatable, or AKS's accelerator label) is judged by its GPU requests alone, against the GPU
  threshold, since an idle GPU is the cost that matters there;
- a GPU node whose GPUs are not allocatable yet (the device plugin has not started) is at 0, so a
  node whose GPUs never come up can still be removed;
- DaemonSet and mirror pods are left out by default (they go with the node and come back on any
  other), and left out of *both* sides: their requests are taken off the allocatable too, so a node
  looks as full as it is to the pods that could move;
- a node is a candidate when its utilisation is strictly below the threshold; at the threshold it
  is kept (CA's eligibility: `Utilization >= threshold` is not underutilized). A threshold of 0
  therefore makes no node a candidate, as in CA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from shared.domain import Node, Pod, Resources
from shared.engine.predicates import pod_requests

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
# AKS labels GPU nodes with these (CA's Azure provider reads the first as its GPU label, the second is legacy).
GPU_LABELS = ("kubernetes.azure.com/accelerator", "accelerator")


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
    """(GPU resource, allocatable count) of a GPU node, the count 0 while its GPUs are not allocatable yet;
    None for a node without GPUs."""
    extended = dict(node.allocatable.extended)
    for name in GPU_RESOURCES:
        if extended.get(name, 0) > 0:
            return name, extended[name]
    if any(node.labels.get(label) for label in GPU_LABELS):
        return GPU_RESOURCES[0], 0
    return None


def _left_out(pod: Pod, rules: UtilizationRules) -> bool:
    """DaemonSet and mirror pods the rules leave out: off the requests and off the allocatable alike."""
    return (pod.is_daemonset and rules.ignore_daemonsets) or (pod.is_mirror and rules.ignore_mirror_pods)


def node_utilization(node: Node, pods: Iterable[Pod], *, rules: UtilizationRules = UtilizationRules(),
                     now: datetime | None = None) -> Utilization:
    """`pods` are the pods bound to the node; finished pods count for nothing, nor (with `now`) long-terminating ones."""
    counted: list[Resources] = []
    left_out: list[Resources] = []
    for pod in pods:
        if pod.is_finished:
            continue
        if _left_out(pod, rules):
            left_out.append(pod_requests(pod))
        elif now is None or not pod.long_terminating(now):
            counted.append(pod_requests(pod))
    gpu = _gpus(node)
    if gpu is not None:
        name, total = gpu
        if total == 0:
            return Utilization(0.0, name, rules.gpu_threshold)  # GPUs not ready: removable like an empty node
        return Utilization(_share(counted, left_out, total, lambda r: dict(r.extended).get(name, 0)), name,
                           rules.gpu_threshold)
    cpu = _share(counted, left_out, node.allocatable.cpu_milli, lambda r: r.cpu_milli)
    memory = _share(counted, left_out, node.allocatable.memory_bytes, lambda r: r.memory_bytes)
    if cpu > memory:
        return Utilization(cpu, "cpu", rules.threshold)
    return Utilization(memory, "memory", rules.threshold)


def _share(counted: list[Resources], left_out: list[Resources], allocatable: int,
           amount: Callable[[Resources], int]) -> float:
    """Requests of the counted pods over what the left-out pods leave of the allocatable."""
    room = allocatable - sum(amount(r) for r in left_out)
    if room <= 0:
        return 1.0  # nothing left for movable pods (or nothing known): never call such a node idle
    return sum(amount(r) for r in counted) / room
