"""What a new node of each group would look like, for planning scale-up.

Pure module, no side effects. Sources, best first: a live Ready node of the group;
else cluster-autoscaler's node-template tags on the scale set; else the VM size's
capacity minus a system reservation, so scale-from-zero does not over-promise. The
capacity comes from the Compute resource SKUs API when observe listed the size, else
from a shipped table (`vm_sizes`); `NodeTemplate.source` says which: `live-node`,
`tags`, `vm-size:skus-api` or `vm-size:table`. The SKU's capacity also fills in what
resource tags leave out (a GPU count, the disk) and decides the accelerator label.

A lane of a multi-size set (`NodeGroup.lane`: one VM size of an instance mix or an AKS
VirtualMachines pool) gets the set's label and taint tags but never its resource tags,
which can only describe one of its sizes: its template is a live node of that lane, else
its own size's capacity (SKUs API, else the table), else none.

Tags, as cluster-autoscaler's Azure provider reads them (azure_template.go):

- `k8s.io_cluster-autoscaler_node-template_label_<key>: <value>`
- `k8s.io_cluster-autoscaler_node-template_taint_<key>: <value>:<Effect>`
- `k8s.io_cluster-autoscaler_node-template_resources_<name>: <quantity>`: `cpu`,
  `memory`, `pods`, `ephemeral-storage`, and any extended resource, e.g.
  `..._resources_nvidia.com_gpu: 1` for `nvidia.com/gpu`.

Azure tag names cannot hold `/`, so in `<key>` and `<name>` a `_` stands for `/` and
`~2` for a literal `_` (`_` is decoded first). CA applies this rule to labels and
taints; for resources its code turns `~2` into `/` as well, which can only yield an
invalid resource name (two slashes), so we apply the label rule to resources too: a
tag that means anything under CA means the same here.

Labels a template carries beyond the tags, as AKS and CA label nodes:
`kubernetes.io/os`, `kubernetes.io/arch`, the instance type, `agentpool`, the region,
and the zone: `topology.kubernetes.io/zone` (with its legacy and Azure Disk twins) is
`<location>-<zone>` (e.g. `westeurope-1`) for a group pinned to one zone, and `0` for
a group without zones, as CA does. A group spanning several zones gets no zone in its
template: the scale set balances new instances across its zones, so the estimator
gives each planned node the zone that balancing would pick (`next_zone`).

`kubernetes.io/hostname` is a placeholder (`PLANNED_HOSTNAME`) in every template: the
estimator replaces it with a name unique to each planned node, so that hostname
topology (anti-affinity, spread) tells planned nodes apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

from shared.discovery_tags import TEMPLATE_TAG_PREFIX, decode_tag_key
from shared.domain import (
    LABEL_AZURE_DISK_ZONE,
    LABEL_HOSTNAME,
    LABEL_REGION,
    LABEL_REGION_LEGACY,
    LABEL_ZONE,
    LABEL_ZONE_LEGACY,
    SPOT_LABEL,
    SPOT_VALUE,
    Node,
    NodeGroup,
    NodeTemplate,
    Resources,
    Taint,
    VmSizeCapacity,
)
from shared.engine.vm_sizes import NO_SIZES, allocatable_for_capacity, nvidia_gpus, vm_size_capacity
from shared.quantities import parse_count, parse_cpu_milli, parse_memory_bytes

TAG_PREFIX = TEMPLATE_TAG_PREFIX
PLANNED_HOSTNAME = "(planned)"
ZONE_LABELS = (LABEL_ZONE, LABEL_ZONE_LEGACY, LABEL_AZURE_DISK_ZONE)
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
# AKS tags its scale sets with the pool name; the `agentpool` label carries it.
_POOL_NAME_TAGS = ("aks-managed-poolName", "poolName")
# Arm64 sizes have a "p" among the features after the vCPU count: Standard_D4ps_v5, Standard_E8pds_v5.
_ARM64_SIZE = re.compile(r"^standard_[a-z]+\d+[a-z]*p[a-z]*_v\d+$", re.IGNORECASE)


def zone_label_value(location: str, zone: str) -> str:
    """AKS's zone label: the region and the zone number, `westeurope-1`."""
    return f"{location.lower()}-{zone}"


def zone_labels(group: NodeGroup, zone: str | None) -> dict[str, str]:
    """The zone labels of a node of `group` in `zone` (one of group.zones); None for a group without zones."""
    if zone is None:
        return {LABEL_ZONE: "0", LABEL_ZONE_LEGACY: "0", LABEL_AZURE_DISK_ZONE: ""}
    value = zone_label_value(group.location, zone)
    return {label: value for label in ZONE_LABELS}


def next_zone(group: NodeGroup, nodes_per_zone: Mapping[str, int]) -> str | None:
    """The zone the scale set will put its next instance in: the one with fewest (zone balancing), first on ties.

    `nodes_per_zone` counts by zone label value. None when the group is not spread
    over several zones (its template already says where its nodes go).
    """
    if len(group.zones) < 2:
        return None
    return min(group.zones, key=lambda z: (nodes_per_zone.get(zone_label_value(group.location, z), 0), z))


def _live_nodes(nodes: Iterable[Node]) -> dict[str, Node]:
    """One Ready node per group id that is not being removed: the best template there is."""
    live: dict[str, Node] = {}
    for node in nodes:
        ref = node.instance
        if ref is not None and node.ready and not node.is_being_deleted:
            live.setdefault(ref.group_id, node)
    return live


def build_templates(
    groups: Iterable[NodeGroup],
    nodes: Iterable[Node],
    *,
    vm_sizes: Mapping[str, VmSizeCapacity] = NO_SIZES,
) -> dict[str, NodeTemplate]:
    """A template per group that can have one; `vm_sizes` are the SKU capacities observed, by lower-cased name."""
    live = _live_nodes(nodes)
    templates: dict[str, NodeTemplate] = {}
    for group in groups:
        node = live.get(group.id)
        if node is not None:
            templates[group.id] = template_from_node(node, group)
        else:
            template = template_from_tags(group, vm_sizes=vm_sizes)
            if template is not None:
                templates[group.id] = template
    return templates


def groups_needing_vm_size(groups: Iterable[NodeGroup], nodes: Iterable[Node]) -> list[NodeGroup]:
    """Groups whose template must size the node from its VM size: no live Ready node, no cpu and memory tags
    (a multi-size set's lane: no live Ready node of that lane, since resource tags do not apply to lanes).

    Observe reads the resource SKUs API only for these, so a cluster whose groups all
    have nodes (or tags) makes no extra ARM call.
    """
    live = _live_nodes(nodes)
    return [g for g in groups if g.id not in live and (g.lane or not {"cpu", "memory"} <= _resource_tags(g).keys())]


def template_from_node(node: Node, group: NodeGroup | None = None) -> NodeTemplate:
    labels = dict(node.labels)
    # A machine's own name would make every planned node look like it; the estimator names each.
    labels[LABEL_HOSTNAME] = PLANNED_HOSTNAME
    if group is not None and len(group.zones) > 1:
        # The sample node's zone says nothing of where the next instance lands.
        for label in ZONE_LABELS:
            labels.pop(label, None)
    taints = tuple(t for t in node.taints if not _is_autoscaler_taint(t))
    return NodeTemplate(allocatable=node.allocatable, labels=labels, taints=taints, source="live-node")


def template_from_tags(group: NodeGroup, *, vm_sizes: Mapping[str, VmSizeCapacity] = NO_SIZES) -> NodeTemplate | None:
    """The template of an empty group: its tags, over its VM size's capacity (`vm_sizes` first, then the table)."""
    arch = "arm64" if _ARM64_SIZE.match(group.vm_size) else "amd64"
    pool = next((group.tags[t] for t in _POOL_NAME_TAGS if group.tags.get(t)), group.name)
    labels: dict[str, str] = {
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": group.vm_size,
        "beta.kubernetes.io/instance-type": group.vm_size,
        "agentpool": pool,
        "kubernetes.azure.com/agentpool": pool,
        LABEL_HOSTNAME: PLANNED_HOSTNAME,
    }
    if group.location:
        labels[LABEL_REGION] = labels[LABEL_REGION_LEGACY] = group.location.lower()
    if len(group.zones) <= 1:
        labels.update(zone_labels(group, group.zones[0] if group.zones else None))
    sized = vm_size_capacity(group.vm_size, vm_sizes)
    if sized is not None and nvidia_gpus(sized[0]) > 0:
        labels[ACCELERATOR_LABEL] = "nvidia"
    taints: list[Taint] = []
    if group.is_spot:
        # As AKS marks spot nodes (and as a spot group's nodes are expected to be marked): only pods that
        # tolerate eviction are planned there. Tags below may say otherwise.
        labels[SPOT_LABEL] = SPOT_VALUE
        taints.append(Taint(SPOT_LABEL, SPOT_VALUE, "NoSchedule"))
    resources: dict[str, str] = {}
    for kind, name, value in _template_tags(group):
        if kind == "label":
            labels[name] = value
        elif kind == "taint":
            taint_value, _, effect = value.rpartition(":")
            taints = [t for t in taints if t.key != name]
            taints.append(Taint(name, taint_value, effect or "NoSchedule"))
        elif kind == "resources" and not group.lane:
            # The set's resource tags describe one size; a lane of a multi-size set is sized by its own VM size.
            resources[name] = value
    base = None if sized is None else allocatable_for_capacity(sized[0])
    if base is None and not {"cpu", "memory"} <= resources.keys():
        return None
    allocatable = apply_resource_tags(base or Resources(pods=110), resources)
    source = "tags" if resources or sized is None else f"vm-size:{sized[1]}"
    return NodeTemplate(allocatable=allocatable, labels=labels, taints=tuple(taints), source=source)


def _template_tags(group: NodeGroup) -> Iterator[tuple[str, str, str]]:
    """(kind, decoded name, value) of each node-template tag; kind is `label`, `taint` or `resources`."""
    for key, value in group.tags.items():
        if not key.startswith(TAG_PREFIX):
            continue
        kind, _, name = key[len(TAG_PREFIX):].partition("_")
        if name:
            yield kind, decode_tag_key(name), value


def _resource_tags(group: NodeGroup) -> dict[str, str]:
    return {name: value for kind, name, value in _template_tags(group) if kind == "resources"}


def planned_node_labels(template: NodeTemplate, group: NodeGroup, name: str, zone: str | None) -> dict[str, str]:
    """A planned node's labels: the template's, its own hostname, and the zone predicted for it (multi-zone groups)."""
    labels = dict(template.labels)
    labels[LABEL_HOSTNAME] = name
    if zone is not None:
        labels.update(zone_labels(group, zone))
    return labels


def apply_resource_tags(base: Resources, tags: Mapping[str, str]) -> Resources:
    """Resources from `resources_<name>` tags over `base`; a value that is not a quantity is skipped, as CA does."""
    cpu, memory, pods, ephemeral = base.cpu_milli, base.memory_bytes, base.pods, base.ephemeral_storage_bytes
    extended = dict(base.extended)
    for name, text in tags.items():
        try:
            if name == "cpu":
                cpu = parse_cpu_milli(text)
            elif name == "memory":
                memory = parse_memory_bytes(text)
            elif name == "pods":
                pods = parse_count(text)
            elif name == "ephemeral-storage":
                ephemeral = parse_memory_bytes(text)
            elif name.startswith("hugepages-"):
                extended[name] = parse_memory_bytes(text)
            else:
                extended[name] = parse_count(text)
        except ValueError:
            continue
    return Resources(cpu, memory, pods, ephemeral, tuple(extended.items()))


def _is_autoscaler_taint(taint: Taint) -> bool:
    # Ours (`vmss-autoscaler.io/...`, e.g. a spot node under a Preempt notice) and CA's say what happens to that
    # node, not what a new node of its group would look like.
    return taint.key in ("ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler") or taint.key.startswith(
        ("node.kubernetes.io/", "vmss-autoscaler.io/")
    )
