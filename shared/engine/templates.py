"""What a new node of each group would look like, for planning scale-up.

Pure module, no side effects. Sources, best first: a live Ready node of the group;
else cluster-autoscaler's node-template tags on the scale set; else the VM size's
capacity minus a system reservation, so scale-from-zero does not over-promise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.domain import Node, NodeGroup, NodeTemplate, Pod, Resources, Taint
from shared.engine.vm_sizes import allocatable_for_vm_size
from shared.quantities import parse_count, parse_cpu_milli, parse_memory_bytes

TAG_PREFIX = "k8s.io_cluster-autoscaler_node-template_"


def decode_tag_key(key: str) -> str:
    """CA's tag encoding: '_' stands for '/', and '~2' for a literal '_'."""
    return key.replace("_", "/").replace("~2", "_")


def build_templates(groups: Iterable[NodeGroup], nodes: Iterable[Node]) -> dict[str, NodeTemplate]:
    live: dict[str, Node] = {}
    for node in nodes:
        ref = node.instance
        if ref is not None and node.ready and not node.is_being_deleted:
            live.setdefault(ref.group_id, node)
    templates: dict[str, NodeTemplate] = {}
    for group in groups:
        node = live.get(group.id)
        if node is not None:
            templates[group.id] = template_from_node(node)
        else:
            template = template_from_tags(group)
            if template is not None:
                templates[group.id] = template
    return templates


def template_from_node(node: Node) -> NodeTemplate:
    # Labels unique to one machine would make every template differ; drop them.
    labels = {k: v for k, v in node.labels.items() if k != "kubernetes.io/hostname"}
    taints = tuple(t for t in node.taints if not _is_autoscaler_taint(t))
    return NodeTemplate(allocatable=node.allocatable, labels=labels, taints=taints, source="live-node")


def template_from_tags(group: NodeGroup) -> NodeTemplate | None:
    labels: dict[str, str] = {
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": group.vm_size,
        "agentpool": group.name,
    }
    taints: list[Taint] = []
    resources: dict[str, str] = {}
    for key, value in group.tags.items():
        if not key.startswith(TAG_PREFIX):
            continue
        rest = key[len(TAG_PREFIX):]
        kind, _, name = rest.partition("_")
        if kind == "label":
            labels[decode_tag_key(name)] = value
        elif kind == "taint":
            taint_value, _, effect = value.rpartition(":")
            taints.append(Taint(decode_tag_key(name), taint_value, effect or "NoSchedule"))
        elif kind == "resources":
            resources[decode_tag_key(name)] = value
    base = allocatable_for_vm_size(group.vm_size)
    if base is None and not {"cpu", "memory"} <= resources.keys():
        return None
    allocatable = _apply_resource_tags(base or Resources(pods=110), resources)
    source = "tags" if resources else "vm-size"
    return NodeTemplate(allocatable=allocatable, labels=labels, taints=tuple(taints), source=source)


def daemonset_overhead(pods: Iterable[Pod]) -> Resources:
    """Requests of one pod per DaemonSet: what each new node gives away before any workload lands."""
    per_owner: dict[str, Resources] = {}
    for pod in pods:
        if pod.is_daemonset and pod.owner is not None:
            per_owner.setdefault(f"{pod.namespace}/{pod.owner.name}", Resources(pod.requests.cpu_milli, pod.requests.memory_bytes, 1))
    total = Resources()
    for requests in per_owner.values():
        total = total + requests
    return total


def _apply_resource_tags(base: Resources, tags: Mapping[str, str]) -> Resources:
    cpu = parse_cpu_milli(tags["cpu"]) if "cpu" in tags else base.cpu_milli
    memory = parse_memory_bytes(tags["memory"]) if "memory" in tags else base.memory_bytes
    pods = parse_count(tags["pods"]) if "pods" in tags else base.pods
    return Resources(cpu, memory, pods)


def _is_autoscaler_taint(taint: Taint) -> bool:
    return taint.key in ("ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler") or taint.key.startswith(
        "node.kubernetes.io/"
    )
