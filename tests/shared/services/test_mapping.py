"""services.mapping: what node mapping reads from the provider (nothing, instance lists, NIC lists), and
that every node comes back marked with its instance or with none."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from sandbox.model import aci
from sandbox.world import kobjects
from shared.adapters.kubernetes import node_from_json
from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, Instance, Node, NodeGroup
from shared.services.mapping import map_cluster
from tests.builders import T0, node, res

RG = "rg"


@dataclass
class Listing:
    """The part of a NodeGroupProvider mapping reads, counting the reads."""

    instances: dict[str, list[Instance]]
    ips: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        self.calls.append(f"list_instances {group.name}")
        return self.instances.get(group.name, [])

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        self.calls.append(f"list_private_ips {group.name}")
        return self.ips.get(group.name, {})


def pool(name: str, kind: str = UNIFORM_SCALE_SET) -> NodeGroup:
    return NodeGroup(RG, name, 0, 10, 2, "Standard_D4s_v5", provider=kind)


def bare(name: str, *, provider_id: str = "", ips: tuple[str, ...] = ()) -> Node:
    return Node(name, res(4, 16, 110), T0, provider_id, internal_ips=ips, ready=True)


K3S = Listing({"farm": [Instance("0", computer_name="farm000000"), Instance("1", computer_name="farm000001")]})
KUBEADM = Listing({"farm": [Instance("0", computer_name="farm000000"), Instance("1", computer_name="farm000001")]},
                  ips={"farm": {"0": ("10.0.0.4",), "1": ("10.0.0.5",)}})

CASES = [
    # (id, listing, nodes, groups, method, expected reads, node -> (group id, instance) or None)
    ("cloud-provider-azure nodes on Uniform sets: no read at all", Listing({}),
     [node("a", group_name="farm", instance=0), node("b", group_name="farm", instance=1)], [pool("farm")], "auto",
     [], {"a": ("rg/farm", "0"), "b": ("rg/farm", "1")}),
    ("k3s nodes: one instance list per group, no NIC list", K3S,
     [bare("farm000000", provider_id="k3s://farm000000", ips=("10.0.0.4",)),
      bare("farm000001", provider_id="k3s://farm000001", ips=("10.0.0.5",)),
      bare("k3s-server", provider_id="k3s://k3s-server")],
     [pool("farm")], "auto", ["list_instances farm"],
     {"farm000000": ("rg/farm", "0"), "farm000001": ("rg/farm", "1"), "k3s-server": None}),
    ("kubeadm nodes: instance list, then NICs for the nodes left", KUBEADM,
     [bare("worker-1", ips=("10.0.0.5",)), bare("worker-2", ips=("10.0.0.4",))], [pool("farm")], "auto",
     ["list_instances farm", "list_private_ips farm"], {"worker-1": ("rg/farm", "1"), "worker-2": ("rg/farm", "0")}),
    ("provider-id forced: k3s nodes are unmanaged and nothing is read", K3S,
     [bare("farm000000", provider_id="k3s://farm000000")], [pool("farm")], "provider-id", [], {"farm000000": None}),
    ("a Flexible set is always listed (its VM names say nothing of their group)",
     Listing({"flex": [Instance("flex_1a2b3c4d", computer_name="flex1a2b3c",
                                resource_id=f"/subscriptions/s/resourceGroups/{RG}/providers/Microsoft.Compute/"
                                            "virtualMachines/flex_1a2b3c4d")]}),
     [bare("flex1a2b3c", provider_id=f"azure:///subscriptions/s/resourceGroups/{RG}/providers/Microsoft.Compute/"
                                     "virtualMachines/flex_1a2b3c4d")],
     [pool("flex", FLEXIBLE_SCALE_SET)], "auto", ["list_instances flex"], {"flex1a2b3c": ("rg/flex", "flex_1a2b3c4d")}),
]


@pytest.mark.parametrize("case_id,listing,nodes,groups,method,reads,expected", CASES, ids=[c[0] for c in CASES])
def test_mapping_reads_only_what_it_needs_and_marks_every_node(
    case_id, listing, nodes, groups, method, reads, expected  # type: ignore[no-untyped-def]
) -> None:
    listing = replace(listing, calls=[])
    mapped = map_cluster(listing, nodes, groups, method=method)  # type: ignore[arg-type]
    assert listing.calls == reads
    assert all(n.mapped for n in mapped.nodes) and [n.name for n in mapped.nodes] == [n.name for n in nodes]
    got = {n.name: (n.instance.group_id, n.instance.instance_id) if n.instance else None for n in mapped.nodes}
    assert got == expected
    # A node left alone is reported with a reason; a mapped one with its method.
    for name, target in expected.items():
        if target is None:
            assert name in {u.node_name for u in (*mapped.mapping.unmanaged, *mapped.mapping.ambiguous)}
        else:
            assert mapped.mapping.instance_of(name) is not None
    assert mapped.listed == bool(reads)


def test_a_node_mapped_by_providerid_keeps_its_subscription_and_others_get_the_group_s_names() -> None:
    listing = replace(K3S, calls=[])
    mapped = map_cluster(listing, [node("a", group_name="farm", instance=0), bare("farm000001")], [pool("farm")])
    by_name = {n.name: n.instance for n in mapped.nodes}
    assert by_name["a"] is not None and by_name["a"].subscription_id  # from the providerID
    assert by_name["farm000001"] is not None and by_name["farm000001"].subscription_id == ""
    assert (by_name["farm000001"].resource_group, by_name["farm000001"].scale_set) == (RG, "farm")


# --- Virtual nodes cost no reads ------------------------------------------------------------------------------------

AKS_FIXTURE = Path(__file__).parents[2] / "fixtures" / "kube_responses" / "aks-nodes.json"


def recorded_aks_node() -> Node:
    """The recorded AKS node (cloud-provider-azure providerID on a Uniform scale set), as the adapter reads it."""
    return node_from_json(json.loads(AKS_FIXTURE.read_text())["items"][0])


def virtual_kubelet_node(version: int) -> Node:
    """virtual-kubelet's Node as the AKS add-on (v1) or the v2 Helm chart registers it: no providerID, the
    provider's labels and taint, its own pod's IP as the only address; read by the adapter as any node."""
    name = aci.DEFAULT_NAMES[version]
    capacity = aci.node_capacity(version)
    return node_from_json(kobjects.node_object(
        name=name, uid=f"uid-{name}", created="2026-11-21T11:00:00Z", provider_id="",
        labels=aci.node_labels(name, version), taints=(aci.TAINT,), capacity=capacity, allocatable=capacity,
        internal_ip=aci.INTERNAL_IP, pod_cidr="", machine_id="", kubelet_version=aci.KUBELET_VERSION,
        container_runtime=""))


AKS_POOL = NodeGroup("mc_davidaks16_davidaks16_westus2", "aks-nodepool1-24816391-vmss", 0, 10, 1, "Standard_DS2_v2")


@pytest.mark.parametrize("version", aci.VERSIONS, ids=lambda v: f"virtual-kubelet v{v}")
def test_a_virtual_node_on_a_cloud_provider_azure_cluster_costs_no_instance_or_nic_list(version: int) -> None:
    """AKS with the virtual node add-on: every VM node names its instance by providerID, so mapping reads nothing;
    the virtual node (no providerID, a pod IP) is never mapped and must not buy every group's lists each poll."""
    virtual = virtual_kubelet_node(version)
    assert not virtual.provider_id and virtual.internal_ips == (aci.INTERNAL_IP,)  # the shape the attack needs
    listing = Listing({})
    mapped = map_cluster(listing, [recorded_aks_node(), virtual], [AKS_POOL, pool("spare")])  # type: ignore[arg-type]
    assert listing.calls == [] and not mapped.listed
    by_name = {n.name: n for n in mapped.nodes}
    aks = by_name["aks-nodepool1-24816391-vmss000000"].instance
    assert aks is not None and (aks.group_id, aks.instance_id) == (AKS_POOL.id, "0")
    assert by_name[virtual.name].mapped and by_name[virtual.name].instance is None
    assert virtual.name in {u.node_name for u in mapped.mapping.unmanaged}


def test_a_virtual_node_beside_k3s_nodes_costs_no_nic_list() -> None:
    """Hostname mapping settles every VM node; the virtual node's InternalIP must not send mapping to the NICs."""
    listing = replace(K3S, calls=[])
    nodes = [bare("farm000000", provider_id="k3s://farm000000", ips=("10.0.0.4",)), virtual_kubelet_node(1)]
    mapped = map_cluster(listing, nodes, [pool("farm")])  # type: ignore[arg-type]
    assert listing.calls == ["list_instances farm"]
    assert {n.name: n.instance is not None for n in mapped.nodes} == {"farm000000": True, aci.DEFAULT_NAMES[1]: False}


# --- Lanes of a multi-size set ----------------------------------------------------------------------------------------

SMALL, BIG = "Standard_D2s_v5", "Standard_D8s_v5"


@dataclass
class LaneListing:
    """list_instances(lane) lists the set's instances of that lane's size only, as the providers do."""

    instances: dict[str, list[Instance]]
    calls: list[str] = field(default_factory=list)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        self.calls.append(f"list_instances {group.id}")
        return self.instances.get(group.lane, [])

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        self.calls.append(f"list_private_ips {group.id}")
        return {}


def _vm_id(vm: str) -> str:
    return f"/subscriptions/s/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{vm}"


def lane(size: str, kind: str) -> NodeGroup:
    return NodeGroup(RG, "mix", 0, 10, 1, size, provider=kind, lane=size, lanes=(SMALL, BIG))


@pytest.mark.parametrize("kind", [FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET], ids=["flexible", "uniform-typed"])
def test_a_lanes_node_maps_to_its_lane_by_the_lanes_own_instance_list(kind: str) -> None:
    """Every lane is listed (its VMs' providerIDs name no size), and each node's ref names its lane's id."""
    listing = LaneListing({SMALL: [Instance("mix_a", vm_size=SMALL, resource_id=_vm_id("mix_a"))],
                           BIG: [Instance("mix_b", vm_size=BIG, resource_id=_vm_id("mix_b"))]})
    lanes = [lane(SMALL, kind), lane(BIG, kind)]
    nodes = [bare("mixa", provider_id=f"azure://{_vm_id('mix_a')}"), bare("mixb", provider_id=f"azure://{_vm_id('mix_b')}")]
    mapped = map_cluster(listing, nodes, lanes)  # type: ignore[arg-type]
    assert sorted(listing.calls) == sorted(f"list_instances {g.id}" for g in lanes) and mapped.listed
    refs = {n.name: n.instance for n in mapped.nodes}
    assert {name: (ref.group_id, ref.lane) for name, ref in refs.items() if ref is not None} == {
        "mixa": (lanes[0].id, SMALL), "mixb": (lanes[1].id, BIG)}
    assert all(ref is not None and ref.scale_set == "mix" for ref in refs.values())
