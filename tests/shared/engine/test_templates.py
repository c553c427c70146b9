"""Node templates: CA's tag encoding, resources from tags, zone and hostname labels, DaemonSet overhead."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import NodeGroup, Resources, Taint, VmSizeCapacity
from shared.engine.templates import (
    PLANNED_HOSTNAME,
    apply_resource_tags,
    build_templates,
    decode_tag_key,
    groups_needing_vm_size,
    next_zone,
    planned_node_labels,
    template_from_node,
    template_from_tags,
)
from shared.engine.vm_sizes import DEFAULT_EPHEMERAL_STORAGE, allocatable_for_capacity
from tests.builders import GIB, group, node, res

PREFIX = "k8s.io_cluster-autoscaler_node-template_"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

DECODING = [
    ("a plain key", "pool", "pool"),
    ("'_' is '/'", "nvidia.com_gpu", "nvidia.com/gpu"),
    ("'~2' is '_'", "my~2label", "my_label"),
    ("both", "example.com_my~2key", "example.com/my_key"),
    ("'~2' is decoded after '_', so it never becomes '/'", "a~2_b", "a_/b"),
]


@pytest.mark.parametrize(("encoded", "decoded"), [c[1:] for c in DECODING], ids=[c[0] for c in DECODING])
def test_decode_tag_key(encoded: str, decoded: str) -> None:
    assert decode_tag_key(encoded) == decoded


RESOURCE_TAGS = [
    ("cpu, memory and pods", {"cpu": "3800m", "memory": "11Gi", "pods": "30"}, Resources(3800, 11 * GIB, 30, 5 * GIB)),
    ("ephemeral storage", {"ephemeral-storage": "100Gi"}, Resources(4000, 16 * GIB, 110, 100 * GIB)),
    ("a GPU count", {"nvidia.com/gpu": "2"}, Resources(4000, 16 * GIB, 110, 5 * GIB, (("nvidia.com/gpu", 2),))),
    ("hugepages in bytes", {"hugepages-2Mi": "1Gi"}, Resources(4000, 16 * GIB, 110, 5 * GIB, (("hugepages-2Mi", GIB),))),
    ("a value that is not a quantity is skipped, as CA does", {"cpu": "lots"}, Resources(4000, 16 * GIB, 110, 5 * GIB)),
]


@pytest.mark.parametrize(("tags", "expected"), [c[1:] for c in RESOURCE_TAGS], ids=[c[0] for c in RESOURCE_TAGS])
def test_apply_resource_tags(tags: dict[str, str], expected: Resources) -> None:
    assert apply_resource_tags(Resources(4000, 16 * GIB, 110, 5 * GIB), tags) == expected


def test_template_from_tags_reads_labels_taints_and_resources_as_ca_encodes_them() -> None:
    tags = {
        f"{PREFIX}label_kubernetes.azure.com_accelerator": "nvidia",
        f"{PREFIX}label_team~2name": "ml",
        f"{PREFIX}taint_nvidia.com_gpu": "true:NoSchedule",
        f"{PREFIX}resources_nvidia.com_gpu": "1",
        f"{PREFIX}resources_cpu": "5800m",
        f"{PREFIX}resources_memory": "100Gi",
        f"{PREFIX}resources_ephemeral-storage": "200Gi",
        "unrelated": "x",
    }
    template = template_from_tags(group("gpu", target=0, tags=tags, vm_size="Standard_NC6s_v3", zones=("2",)))
    assert template is not None
    assert template.source == "tags"
    assert template.labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert template.labels["team_name"] == "ml"
    assert template.taints == (Taint("nvidia.com/gpu", "true", "NoSchedule"),)
    assert template.allocatable == Resources(5800, 100 * GIB, 110, 200 * GIB, (("nvidia.com/gpu", 1),))
    assert template.labels[ZONE] == "westeurope-2"  # pinned to one zone, as AKS labels it
    assert template.labels["topology.kubernetes.io/region"] == "westeurope"
    assert template.labels[HOST] == PLANNED_HOSTNAME


def test_template_from_vm_size_alone_has_the_sizes_gpus_and_a_conservative_disk() -> None:
    template = template_from_tags(group("gpu", target=0, vm_size="Standard_NC6s_v3"))
    assert template is not None and template.source == "vm-size:table"
    assert template.allocatable.amount("nvidia.com/gpu") == 1
    assert template.allocatable.ephemeral_storage_bytes == DEFAULT_EPHEMERAL_STORAGE
    assert template.labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert template.labels["kubernetes.io/arch"] == "amd64"


ZONE_CASES = [
    ("no zones: CA's '0'", (), "0"),
    ("one zone", ("3",), "westeurope-3"),
    ("several zones: none promised, the estimator predicts one per node", ("1", "2", "3"), None),
]


@pytest.mark.parametrize(("zones", "label"), [c[1:] for c in ZONE_CASES], ids=[c[0] for c in ZONE_CASES])
def test_zone_labels_of_tag_templates(zones: tuple[str, ...], label: str | None) -> None:
    template = template_from_tags(group(zones=zones, location="WestEurope"))
    assert template is not None
    assert template.labels.get(ZONE) == label


def test_an_unknown_size_without_cpu_and_memory_tags_has_no_template() -> None:
    assert template_from_tags(group(vm_size="Standard_Unknown")) is None
    tagged = template_from_tags(group(vm_size="Standard_D4ps_v9", tags={f"{PREFIX}resources_cpu": "4",
                                                                          f"{PREFIX}resources_memory": "16Gi"}))
    assert tagged is not None
    assert tagged.allocatable.ephemeral_storage_bytes == 0  # unknown disk: pods asking for it say so
    assert tagged.labels["kubernetes.io/arch"] == "arm64"


def sku(name: str, vcpus: int, mem_gib: float, gpus: int = 0, restriction: str = "") -> VmSizeCapacity:
    return VmSizeCapacity(name, vcpus, int(mem_gib * GIB), gpus, restriction)


# (case, the group's size, what the SKUs API listed, expected source, expected capacity or None, accelerator label?)
SIZE_SOURCES: list[tuple[str, str, list[VmSizeCapacity], str | None, VmSizeCapacity | None, bool]] = [
    ("the SKUs API over the table", "Standard_D4s_v5", [sku("Standard_D4s_v5", 8, 32)],
     "vm-size:skus-api", sku("x", 8, 32), False),
    ("names compare case-insensitively", "standard_d4s_v5", [sku("Standard_D4s_v5", 8, 32)],
     "vm-size:skus-api", sku("x", 8, 32), False),
    ("the table when the API did not list the size", "Standard_D4s_v5", [sku("Standard_E8s_v5", 8, 64)],
     "vm-size:table", sku("x", 4, 16), False),
    ("the table when the API was not read", "Standard_E8s_v5", [], "vm-size:table", sku("x", 8, 64), False),
    ("a size only the API knows", "Standard_D96s_v6", [sku("Standard_D96s_v6", 96, 384)],
     "vm-size:skus-api", sku("x", 96, 384), False),
    ("constrained cores: what the adapter read as available", "Standard_E4-2s_v3", [sku("Standard_E4-2s_v3", 2, 32)],
     "vm-size:skus-api", sku("x", 2, 32), False),
    ("the API's GPUs make nvidia.com/gpu and the accelerator label", "Standard_NC24ads_A100_v4",
     [sku("Standard_NC24ads_A100_v4", 24, 220, gpus=1)], "vm-size:skus-api", sku("x", 24, 220, 1), True),
    ("the API's word on GPUs over the table's", "Standard_NC6s_v3", [sku("Standard_NC6s_v3", 6, 112, gpus=0)],
     "vm-size:skus-api", sku("x", 6, 112), False),
    ("AMD GPUs are not nvidia.com/gpu", "Standard_NV32as_v4", [sku("Standard_NV32as_v4", 32, 112, gpus=1)],
     "vm-size:skus-api", sku("Standard_NV32as_v4", 32, 112, 1), False),
    ("a restricted size still has a template: ARM's refusal backs the group off", "Standard_D4s_v5",
     [sku("Standard_D4s_v5", 4, 16, restriction="NotAvailableForSubscription")], "vm-size:skus-api", sku("x", 4, 16), False),
    ("unknown to both, no tags: no template, as before", "Standard_Unknown", [sku("Standard_D4s_v5", 4, 16)],
     None, None, False),
]


@pytest.mark.parametrize(
    ("vm_size", "listed", "source", "capacity", "accelerator"),
    [c[1:] for c in SIZE_SOURCES],
    ids=[c[0] for c in SIZE_SOURCES],
)
def test_scale_from_zero_sizes_nodes_from_the_skus_api_first_then_the_table(
    vm_size: str, listed: list[VmSizeCapacity], source: str | None, capacity: VmSizeCapacity | None, accelerator: bool
) -> None:
    vm_sizes = {s.name.lower(): s for s in listed}
    templates = build_templates([group("empty", target=0, vm_size=vm_size)], [], vm_sizes=vm_sizes)
    template = templates.get("rg/empty")
    if source is None:
        assert template is None
        return
    assert template is not None and capacity is not None
    assert template.source == source
    # The same reservation whatever the source: the capacity minus what AKS keeps for the system.
    assert template.allocatable == allocatable_for_capacity(capacity)
    assert template.allocatable.cpu_milli < capacity.vcpus * 1000
    assert ("kubernetes.azure.com/accelerator" in template.labels) is accelerator


def test_resource_tags_override_the_skus_capacity_and_keep_its_gpus() -> None:
    tags = {f"{PREFIX}resources_cpu": "3", f"{PREFIX}resources_memory": "20Gi"}
    vm_sizes = {"standard_nc24ads_a100_v4": sku("Standard_NC24ads_A100_v4", 24, 220, gpus=1)}
    template = template_from_tags(group(vm_size="Standard_NC24ads_A100_v4", tags=tags), vm_sizes=vm_sizes)
    assert template is not None and template.source == "tags"
    assert (template.allocatable.cpu_milli, template.allocatable.memory_bytes) == (3000, 20 * GIB)
    assert template.allocatable.amount("nvidia.com/gpu") == 1


CPU_AND_MEMORY = {f"{PREFIX}resources_cpu": "4", f"{PREFIX}resources_memory": "16Gi"}
# (case, the group, its nodes' readiness and taints (None: no node), needs a VM-size template?)
NEEDING: list[tuple[str, NodeGroup, tuple[bool, tuple[Taint, ...]] | None, bool]] = [
    ("a live Ready node", group("g"), (True, ()), False),
    ("no node", group("g", target=0), None, True),
    ("a node that is not Ready", group("g"), (False, ()), True),
    ("a node being removed", group("g"), (True, (Taint("ToBeDeletedByClusterAutoscaler"),)), True),
    ("cpu and memory tags", group("g", target=0, tags=CPU_AND_MEMORY), None, False),
    ("a cpu tag alone", group("g", target=0, tags={f"{PREFIX}resources_cpu": "4"}), None, True),
]


@pytest.mark.parametrize(("grp", "live", "needed"), [c[1:] for c in NEEDING], ids=[c[0] for c in NEEDING])
def test_groups_needing_a_vm_size_template(
    grp: NodeGroup, live: tuple[bool, tuple[Taint, ...]] | None, needed: bool
) -> None:
    nodes = [] if live is None else [node("n0", group_name="g", ready=live[0], taints=live[1])]
    assert groups_needing_vm_size([grp], nodes) == ([grp] if needed else [])


def test_template_from_a_live_node() -> None:
    live = node("aks-pool-0", zone="westeurope-1", labels={"agentpool": "pool"},
                taints=(Taint("ToBeDeletedByClusterAutoscaler"), Taint("dedicated", "x")))
    single = template_from_node(live, group(zones=("1",)))
    assert single.labels[HOST] == PLANNED_HOSTNAME
    assert single.labels[ZONE] == "westeurope-1"
    assert single.taints == (Taint("dedicated", "x"),)
    multi = template_from_node(live, group(zones=("1", "2", "3")))
    assert ZONE not in multi.labels  # the sample's zone says nothing of the next instance's


def test_build_templates_prefers_a_live_ready_node() -> None:
    groups = [group("a"), group("b", target=0)]
    templates = build_templates(groups, [node("n0", group_name="a", alloc=res(3, 12, 100))])
    assert templates["rg/a"].source == "live-node"
    assert templates["rg/a"].allocatable == res(3, 12, 100)
    assert templates["rg/b"].source == "vm-size:table"


def test_next_zone_follows_the_scale_sets_balancing() -> None:
    multi = group(zones=("1", "2", "3"))
    assert next_zone(multi, {}) == "1"
    assert next_zone(multi, {"westeurope-1": 2, "westeurope-2": 1, "westeurope-3": 1}) == "2"
    assert next_zone(multi, {"westeurope-1": 1, "westeurope-2": 1}) == "3"
    assert next_zone(group(zones=("1",)), {}) is None
    assert next_zone(group(), {}) is None


def test_planned_node_labels_give_each_node_its_hostname_and_zone() -> None:
    template = template_from_tags(group(zones=("1", "2")))
    assert template is not None
    labels = planned_node_labels(template, group(zones=("1", "2")), "planned/rg/pool/3", "2")
    assert labels[HOST] == "planned/rg/pool/3"
    assert labels[ZONE] == "westeurope-2"
    assert labels["failure-domain.beta.kubernetes.io/zone"] == "westeurope-2"




# --- Lanes of a multi-size set: the set's resource tags never size a lane ------------------------------------------

def lane_group(size: str, tags: dict[str, str]) -> NodeGroup:
    base = group("mix", target=0, vm_size=size, tags=tags)
    return NodeGroup(base.resource_group, base.name, 0, 10, 0, size, tags=tags, location=base.location, lane=size,
                     lanes=("Standard_D2s_v5", size))


LANE_TAGS = {**CPU_AND_MEMORY, f"{PREFIX}label_team": "render", f"{PREFIX}taint_dedicated": "render:NoSchedule"}
# (case, the lane's size, what the SKUs API listed, expected source, expected capacity or None)
LANE_SOURCES: list[tuple[str, str, list[VmSizeCapacity], str | None, VmSizeCapacity | None]] = [
    ("its size from the SKUs API", "Standard_D16s_v5", [sku("Standard_D16s_v5", 16, 64)], "vm-size:skus-api",
     sku("x", 16, 64)),
    ("its size from the table", "Standard_D16s_v5", [], "vm-size:table", sku("x", 16, 64)),
    ("a size neither knows: no template, although the set has cpu and memory tags", "Standard_Unknown", [], None, None),
]


@pytest.mark.parametrize(("size", "listed", "source", "capacity"), [c[1:] for c in LANE_SOURCES],
                         ids=[c[0] for c in LANE_SOURCES])
def test_a_lanes_template_is_its_own_sizes_with_the_sets_labels_and_taints(
    size: str, listed: list[VmSizeCapacity], source: str | None, capacity: VmSizeCapacity | None
) -> None:
    lane = lane_group(size, LANE_TAGS)
    assert groups_needing_vm_size([lane], []) == [lane]  # resource tags do not spare a lane the SKUs read
    template = build_templates([lane], [], vm_sizes={s.name.lower(): s for s in listed}).get(lane.id)
    if source is None:
        assert template is None
        return
    assert template is not None and capacity is not None
    assert template.source == source
    assert template.allocatable == allocatable_for_capacity(capacity)  # not the set's 4 cpu / 16Gi tags
    assert template.labels["team"] == "render" and template.labels["node.kubernetes.io/instance-type"] == size
    assert Taint("dedicated", "render", "NoSchedule") in template.taints


def test_a_lanes_live_node_is_its_template_and_other_lanes_keep_theirs() -> None:
    small, big = lane_group("Standard_D2s_v5", {}), lane_group("Standard_D16s_v5", {})
    unmapped = node("mix-a", group_name="mix", alloc=res(1.9, 5.5, 110))
    assert unmapped.instance is not None
    live = replace(unmapped, mapped=True, mapped_to=replace(unmapped.instance, lane=small.lane))  # as services.mapping
    templates = build_templates([small, big], [live])
    assert templates[small.id].source == "live-node" and templates[small.id].allocatable == res(1.9, 5.5, 110)
    assert templates[big.id].source == "vm-size:table"
    assert groups_needing_vm_size([small, big], [live]) == [big]
