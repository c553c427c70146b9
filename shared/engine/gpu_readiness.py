"""Whether a node is usable capacity yet: Ready, and where GPUs are expected, its GPUs allocatable.

Pure module, no side effects. A GPU VM's kubelet turns the node Ready before the GPU driver and the device
plugin have run, and only then does `nvidia.com/gpu` (or `amd.com/gpu`) appear in the node's allocatable. A pod
asking for a GPU cannot land there until then, so the planners must count such a node as capacity still on its
way, not as room (cluster-autoscaler's `FilterOutNodesWithUnreadyResources` does the same for GPU nodes).

A node is expected to have GPUs when its group's template says so (GPUs in the template's allocatable, or a GPU
label), or when the node's own labels say so: AKS's `kubernetes.azure.com/accelerator`, NVIDIA's GPU feature
discovery `nvidia.com/gpu.present`, or the legacy `accelerator`.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.domain import Node, NodeTemplate, Resources

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_LABELS = ("kubernetes.azure.com/accelerator", "nvidia.com/gpu.present", "accelerator")
# Label values that say "no GPU" (GPU feature discovery writes "false" on a node it found without one).
_NO_GPU_VALUES = frozenset({"", "false", "none", "0"})


def gpu_count(allocatable: Resources) -> int:
    """The GPUs in an allocatable: the sum over the GPU resource names (a node has one vendor's)."""
    return sum(max(0, allocatable.amount(name)) for name in GPU_RESOURCES)


def _labelled_gpu(labels: Mapping[str, str]) -> bool:
    return any(labels.get(label, "").strip().lower() not in _NO_GPU_VALUES for label in GPU_LABELS)


def expected_gpus(node: Node, template: NodeTemplate | None) -> int:
    """GPUs the node should offer once its device plugin runs; 0 for a node nothing says has GPUs.

    The template's count first (the size's GPUs), then what the node already offers; a node only labelled as a
    GPU node (its count unknown) expects at least one.
    """
    if template is not None:
        from_template = gpu_count(template.allocatable)
        if from_template > 0:
            return from_template
    offered = gpu_count(node.allocatable)
    if offered > 0:
        return offered
    if _labelled_gpu(node.labels) or (template is not None and _labelled_gpu(template.labels)):
        return 1
    return 0


def usable(node: Node, template: NodeTemplate | None) -> bool:
    """Ready and, where GPUs are expected, with at least one GPU allocatable."""
    if not node.ready:
        return False
    return expected_gpus(node, template) == 0 or gpu_count(node.allocatable) > 0
