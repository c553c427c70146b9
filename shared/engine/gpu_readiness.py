"""Whether a node is usable capacity yet: Ready, and where GPUs are expected, its GPUs allocatable.

Pure module, no side effects. A GPU VM's kubelet turns the node Ready before the GPU driver and the device
plugin have run, and only then does `nvidia.com/gpu` (or `amd.com/gpu`) appear in the node's allocatable. A pod
asking for a GPU cannot land there until then, so the planners must count such a node as capacity still on its
way, not as room (cluster-autoscaler's `FilterOutNodesWithUnreadyResources` does the same for GPU nodes).

A node is expected to have GPUs when its group's template says so (GPUs in the template's allocatable, or a GPU
label), or when the node's own labels say so: AKS's `kubernetes.azure.com/accelerator`, NVIDIA's GPU feature
discovery `nvidia.com/gpu.present`, or the legacy `accelerator`.

`hold_back` (and `as_capacity` over a snapshot) presents a Ready node that is not usable yet as not Ready, as
cluster-autoscaler overrides such a node's Ready condition (reason ResourceUnready): the planners then count it as
a node on its way, and one that never gets its GPUs is removed on the unready clock. The node keeps a marker condition (`GPU_NOT_READY`) so the
report of GPU nodes overdue (`overdue`) tells them from nodes whose kubelet is not Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, Node, NodeTemplate, Resources

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_LABELS = ("kubernetes.azure.com/accelerator", "nvidia.com/gpu.present", "accelerator")
# Label values that say "no GPU" (GPU feature discovery writes "false" on a node it found without one).
_NO_GPU_VALUES = frozenset({"", "false", "none", "0"})
# The marker condition type a held-back node carries in the snapshot (never written to the cluster).
GPU_NOT_READY = "GPUNotReady"


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


def gpu_template(template: NodeTemplate | None) -> bool:
    """Whether a group's new nodes will have GPUs (its template's allocatable or labels say so)."""
    return template is not None and (gpu_count(template.allocatable) > 0 or _labelled_gpu(template.labels))


def template_of(snapshot: ClusterSnapshot, node: Node) -> NodeTemplate | None:
    """The template of the node's group, None for a node of no discovered group."""
    ref = node.instance
    return None if ref is None else snapshot.templates.get(ref.group_id)


def waiting_for_gpus(node: Node, template: NodeTemplate | None) -> bool:
    """Ready, but its expected GPUs not allocatable yet."""
    return node.ready and not usable(node, template)


def hold_back(nodes: Sequence[Node], templates: Mapping[str, NodeTemplate]) -> tuple[Node, ...] | None:
    """The nodes with every one waiting for its GPUs presented as not Ready and marked `GPU_NOT_READY`
    (`templates`: by group id); None when no node waits, so a cluster without GPU nodes pays one scan."""
    def template(node: Node) -> NodeTemplate | None:
        ref = node.instance
        return None if ref is None else templates.get(ref.group_id)

    held = {node.name for node in nodes if waiting_for_gpus(node, template(node))}
    if not held:
        return None
    return tuple(
        replace(node, ready=False, conditions=node.conditions | {GPU_NOT_READY}) if node.name in held else node
        for node in nodes
    )


def as_capacity(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with its nodes held back (`hold_back`) by its own templates; itself when none waits."""
    nodes = hold_back(snapshot.nodes, snapshot.templates)
    return snapshot if nodes is None else replace(snapshot, nodes=nodes)


def held_back(node: Node) -> bool:
    """Whether `as_capacity` held this node back (it is Ready, its GPUs are not allocatable yet)."""
    return GPU_NOT_READY in node.conditions


def overdue(nodes: Iterable[Node], *, now: datetime, give_up: timedelta) -> tuple[Node, ...]:
    """The held-back nodes created more than `give_up` (MAX_NODE_PROVISION_TIME) ago: their device plugin never
    reported, to be reported and removed like unready nodes."""
    return tuple(node for node in nodes if held_back(node) and now - node.created_at > give_up)
