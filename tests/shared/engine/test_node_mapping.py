"""Mapping nodes to node-group instances by providerID, hostname or IP (shared/engine/node_mapping.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from shared.domain import Instance, Node, NodeGroup, Taint
from shared.engine.node_mapping import (
    AUTO,
    HOSTNAME,
    IP,
    METHODS,
    PROVIDER_ID,
    NodeMapping,
    map_nodes,
    needs_instances,
    needs_ips,
    parse_mapping_method,
)
from tests.builders import SUB, T0, provider_id, res

FLEX = "vmss-flexible"


def vm_id(rg: str, vm: str) -> str:
    return f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}"


def inst(instance_id: str, computer: str = "", *ips: str, rid: str = "") -> Instance:
    return Instance(instance_id, computer_name=computer, private_ips=ips, resource_id=rid)


def grp(name: str, *instances: Instance, rg: str = "rg", provider: str = "vmss-uniform") -> NodeGroup:
    return NodeGroup(rg, name, 0, 10, len(instances), "Standard_D4s_v5", instances=instances, provider=provider)


def nd(name: str, pid: str = "", *ips: str) -> Node:
    return Node(name, res(4, 16, 110), T0, pid, internal_ips=ips)


# Uniform scale set "nsgvmss" in resource group "RG-One": computer names end in base-36 instance ids,
# which ARM may write in upper case (85 -> 00002D), while node names are lower case.
UNIFORM = grp("nsgvmss", inst("85", "nsgvmss00002D", "10.0.0.5"), inst("10", "nsgvmss00000A", "10.0.0.6"),
              inst("11", "nsgvmss00000B", "10.0.0.7"), rg="RG-One")
# A Flexible scale set: instance ids are VM names.
FLEXIBLE = grp("flex", inst("flex_1a2b3c4d", "flex1a2b3c", "10.1.0.4", rid=vm_id("rg-flex", "flex_1a2b3c4d")),
               inst("flex_5e6f7a8b", "flex5e6f7a", "10.1.0.5"), rg="rg-flex", provider=FLEX)
# Two scale sets built from one template: their computer names collide.
TWIN_A = grp("twin-a", inst("0", "worker000000", "10.2.0.4"), inst("1", "worker000001", "10.2.0.5"))
TWIN_B = grp("twin-b", inst("0", "worker000000", "10.3.0.4"))


@dataclass(frozen=True)
class Case:
    id: str
    nodes: tuple[Node, ...]
    groups: tuple[NodeGroup, ...]
    mapped: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # node -> (group id, instance id, method)
    unmanaged: dict[str, str] = field(default_factory=dict)  # node -> a part of its reason
    ambiguous: dict[str, str] = field(default_factory=dict)  # node -> a part of its reason
    booting: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group id -> instance ids
    method: str = AUTO


CASES = [
    Case("providerID with an upper-case resource group names a lower-cased group's instance",
         (nd("a", provider_id("nsgvmss", 85, rg="RG-ONE")), nd("b", provider_id("NSGVMSS", 10, rg="rg-one"))),
         (UNIFORM,),
         mapped={"a": ("rg-one/nsgvmss", "85", PROVIDER_ID), "b": ("rg-one/nsgvmss", "10", PROVIDER_ID)},
         booting={"rg-one/nsgvmss": ("11",)}),
    Case("hostname matches a base-36 computer name whatever its case",
         (nd("nsgvmss00002d", "k3s://nsgvmss00002d"), nd("nsgvmss00000b")),
         (UNIFORM,),
         mapped={"nsgvmss00002d": ("rg-one/nsgvmss", "85", HOSTNAME), "nsgvmss00000b": ("rg-one/nsgvmss", "11", HOSTNAME)},
         booting={"rg-one/nsgvmss": ("10",)}),
    Case("one cluster, three methods",
         (nd("a", provider_id("nsgvmss", 85, rg="RG-One")), nd("nsgvmss00000a", "rke2://nsgvmss00000a"),
          nd("renamed-by-hand", "", "10.0.0.7")),
         (UNIFORM,),
         mapped={"a": ("rg-one/nsgvmss", "85", PROVIDER_ID), "nsgvmss00000a": ("rg-one/nsgvmss", "10", HOSTNAME),
                 "renamed-by-hand": ("rg-one/nsgvmss", "11", IP)},
         booting={"rg-one/nsgvmss": ()}),
    Case("Flexible providerIDs match by resource id or by VM name, case-insensitively",
         (nd("f1", "azure://" + vm_id("RG-FLEX", "FLEX_1A2B3C4D")), nd("f2", "azure://" + vm_id("rg-flex", "flex_5e6f7a8b"))),
         (FLEXIBLE,),
         mapped={"f1": ("rg-flex/flex", "flex_1a2b3c4d", PROVIDER_ID), "f2": ("rg-flex/flex", "flex_5e6f7a8b", PROVIDER_ID)},
         booting={"rg-flex/flex": ()}),
    Case("an instance's ARM id wins over its group's names (AKS pools live in the node resource group)",
         (nd("aks-pool1-12345678-vmss000003", provider_id("aks-pool1-12345678-vmss", 3, rg="MC_rg_aks_westeurope")),),
         (grp("pool1", inst("3", rid=provider_id("aks-pool1-12345678-vmss", 3, rg="MC_rg_aks_westeurope")
                            .removeprefix("azure://")), inst("4"), rg="rg", provider="aks-agentpool"),),
         mapped={"aks-pool1-12345678-vmss000003": ("rg/pool1", "3", PROVIDER_ID)},
         booting={"rg/pool1": ("4",)}),
    Case("an azure:// providerID naming no instance is authoritative: no fall-through to hostname or IP",
         (nd("nsgvmss00002d", provider_id("nsgvmss", 99, rg="RG-One"), "10.0.0.5"),
          nd("flex1a2b3c", "azure://" + vm_id("rg-flex", "elsewhere"))),
         (UNIFORM, FLEXIBLE),
         unmanaged={"nsgvmss00002d": "names no instance of a discovered group",
                    "flex1a2b3c": "virtualMachines/elsewhere names no instance"},
         booting={"rg-one/nsgvmss": ("85", "10", "11"), "rg-flex/flex": ("flex_1a2b3c4d", "flex_5e6f7a8b")}),
    Case("a node matching nothing is unmanaged, with what each method found",
         (nd("server", "k3s://server", "10.9.9.9"), nd("bare")),
         (UNIFORM,),
         unmanaged={"server": "providerID k3s://server names no Azure VM; no instance has computer name server; "
                              "no instance has IP 10.9.9.9",
                    "bare": "no providerID; no instance has computer name bare; node has no InternalIP"},
         booting={"rg-one/nsgvmss": ("85", "10", "11")}),
    Case("a node whose IP changed to no instance's is unmanaged",
         (nd("moved", "", "10.0.0.99"),),
         (UNIFORM,),
         unmanaged={"moved": "no instance has IP 10.0.0.99"}),
    Case("a node whose IP changed to another instance's maps to that one",
         (nd("moved", "", "10.0.0.6"),),
         (UNIFORM,),
         mapped={"moved": ("rg-one/nsgvmss", "10", IP)},
         booting={"rg-one/nsgvmss": ("85", "11")}),
    Case("a computer name shared by two scale sets is ambiguous, never guessed, not even by IP",
         (nd("worker000000", "", "10.2.0.4"), nd("worker000001")),
         (TWIN_A, TWIN_B),
         mapped={"worker000001": ("rg/twin-a", "1", HOSTNAME)},
         ambiguous={"worker000000": "instances rg/twin-a/0 and rg/twin-b/0 both have computer name worker000000"},
         booting={"rg/twin-a": (), "rg/twin-b": ()}),  # held: the ambiguous node may run on either
    Case("an IP held by two instances is ambiguous",
         (nd("n", "", "10.5.0.1"),),
         (grp("x", inst("0", "x0", "10.5.0.1")), grp("y", inst("0", "y0", "10.5.0.1"))),
         ambiguous={"n": "instances rg/x/0 and rg/y/0 both have IP 10.5.0.1"}),
    Case("one instance claimed by two nodes: both are ambiguous",
         (nd("a", provider_id("nsgvmss", 85, rg="RG-One")), nd("nsgvmss00002d")),
         (UNIFORM,),
         ambiguous={"a": "nodes a and nsgvmss00002d both map to instance rg-one/nsgvmss/85 "
                         "(a by provider-id, nsgvmss00002d by hostname)",
                    "nsgvmss00002d": "both map to instance rg-one/nsgvmss/85"},
         booting={"rg-one/nsgvmss": ("10", "11")}),
    Case("forced ip ignores a matching hostname and providerID",
         (nd("nsgvmss00002d", provider_id("nsgvmss", 85, rg="RG-One"), "10.0.0.7"), nd("nsgvmss00000a")),
         (UNIFORM,),
         mapped={"nsgvmss00002d": ("rg-one/nsgvmss", "11", IP)},
         unmanaged={"nsgvmss00000a": "node has no InternalIP"},
         method=IP),
    Case("forced hostname ignores an azure:// providerID naming no instance",
         (nd("nsgvmss00000a", provider_id("gone", 1)),),
         (UNIFORM,),
         mapped={"nsgvmss00000a": ("rg-one/nsgvmss", "10", HOSTNAME)},
         method=HOSTNAME),
    Case("forced provider-id does not fall through",
         (nd("nsgvmss00000a", "k3s://nsgvmss00000a", "10.0.0.6"),),
         (UNIFORM,),
         unmanaged={"nsgvmss00000a": "providerID k3s://nsgvmss00000a names no Azure VM"},
         method=PROVIDER_ID),
    # Two NICs per VM (primary in 10.224, secondary in 10.225): an instance is keyed by every address it has, and
    # the node's InternalIP decides which instance it is, whichever NIC the kubelet registered with.
    Case("nodes registered with their secondary NIC's address map to their own instances",
         (nd("worker-1", "", "10.225.0.6"), nd("worker-2", "", "10.225.0.5")),
         (grp("two", inst("0", "two000000", "10.224.0.5", "10.225.0.5"), inst("1", "two000001", "10.224.0.6", "10.225.0.6")),),
         mapped={"worker-1": ("rg/two", "1", IP), "worker-2": ("rg/two", "0", IP)}),
    Case("one node registered with its primary's address, the other with its secondary's",
         (nd("worker-1", "", "10.224.0.5"), nd("worker-2", "", "10.225.0.6")),
         (grp("two", inst("0", "two000000", "10.224.0.5", "10.225.0.5"), inst("1", "two000001", "10.224.0.6", "10.225.0.6")),),
         mapped={"worker-1": ("rg/two", "0", IP), "worker-2": ("rg/two", "1", IP)}),
    Case("a node reporting both of one VM's addresses is that VM's",
         (nd("worker-1", "", "10.224.0.6", "10.225.0.6"),),
         (grp("two", inst("0", "two000000", "10.224.0.5", "10.225.0.5"), inst("1", "two000001", "10.224.0.6", "10.225.0.6")),),
         mapped={"worker-1": ("rg/two", "1", IP)}, booting={"rg/two": ("0",)}),
    Case("a node's addresses on two VMs (one's primary, another's secondary) is ambiguous, never guessed",
         (nd("worker-1", "", "10.224.0.5", "10.225.0.6"),),
         (grp("two", inst("0", "two000000", "10.224.0.5", "10.225.0.5"), inst("1", "two000001", "10.224.0.6", "10.225.0.6")),),
         ambiguous={"worker-1": "one of IPs 10.224.0.5, 10.225.0.6"}, booting={"rg/two": ()}),
    Case("no discovered group: every node is unmanaged",
         (nd("a", provider_id("nsgvmss", 85, rg="RG-One")),),
         (),
         unmanaged={"a": "names no instance"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_map_nodes(case: Case) -> None:
    mapping = map_nodes(case.nodes, case.groups, method=case.method)

    assert {n: (m.group_id, m.instance_id, m.method) for n, m in mapping.mapped.items()} == case.mapped
    assert {u.node_name for u in mapping.unmanaged} == set(case.unmanaged)
    assert {u.node_name for u in mapping.ambiguous} == set(case.ambiguous)
    for unmapped in (*mapping.unmanaged, *mapping.ambiguous):
        assert {**case.unmanaged, **case.ambiguous}[unmapped.node_name] in unmapped.reason
    for u in mapping.ambiguous:
        assert u.reason.startswith("ambiguous: ")
    for group_id, instance_ids in case.booting.items():
        group = next(g for g in case.groups if g.id == group_id)
        assert tuple(i.instance_id for i in mapping.booting(group)) == instance_ids
    assert_invariants(mapping, case.nodes, case.groups)


def assert_invariants(mapping: NodeMapping, nodes: tuple[Node, ...], groups: tuple[NodeGroup, ...]) -> None:
    # Every node lands in exactly one outcome.
    outcomes = [*mapping.mapped, *(u.node_name for u in mapping.unmanaged), *(u.node_name for u in mapping.ambiguous)]
    assert sorted(outcomes) == sorted(n.name for n in nodes)
    # One instance, one node; and it is an instance of a discovered group.
    claimed = [(m.group_id, m.instance_id) for m in mapping.mapped.values()]
    assert len(claimed) == len(set(claimed))
    instances = {(g.id, i.instance_id) for g in groups for i in g.instances}
    assert set(claimed) <= instances
    for g in groups:
        # A group's instances are mapped, held by an ambiguous node, or booting: exactly one of them.
        booting = {(g.id, i.instance_id) for i in mapping.booting(g)}
        mine = {(g.id, i.instance_id) for i in g.instances}
        assert booting | (set(claimed) & mine) | (mapping.held & mine) == mine
        assert not booting & set(claimed) and not booting & mapping.held
        assert [m.node_name for m in mapping.nodes_of(g.id)] == [n for n, m in mapping.mapped.items() if m.group_id == g.id]
        for m in mapping.nodes_of(g.id):
            assert mapping.instance_of(m.node_name) == m


def test_nodes_not_mapped_have_no_instance() -> None:
    mapping = map_nodes([nd("server", "k3s://server")], [UNIFORM])
    assert mapping.instance_of("server") is None and mapping.nodes_of("rg-one/nsgvmss") == ()


def test_an_empty_mapping_is_valid() -> None:
    mapping = NodeMapping()
    assert mapping.instance_of("x") is None and mapping.booting(UNIFORM) == UNIFORM.instances


@pytest.mark.parametrize("text,method", [
    ("", AUTO), ("  ", AUTO), ("auto", AUTO), ("provider-id", PROVIDER_ID), ("Hostname", HOSTNAME), (" ip ", IP),
])
def test_parse_mapping_method(text: str, method: str) -> None:
    assert parse_mapping_method(text) == method


@pytest.mark.parametrize("text", ["providerid", "provider_id", "name", "ip,hostname"])
def test_parse_mapping_method_names_the_bad_value_and_the_allowed_ones(text: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_mapping_method(text)
    assert repr(text) in str(error.value)
    assert all(m in str(error.value) for m in METHODS)


def test_map_nodes_refuses_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="hostnames"):
        map_nodes([], [], method="hostnames")


# virtual-kubelet's node: no providerID, its own pod's IP as InternalIP, the provider's label and taint.
VIRTUAL = Node("virtual-node-aci-linux", res(10_000, 4096, 5000), T0, "", internal_ips=("10.241.0.4",),
               labels={"type": "virtual-kubelet"}, taints=(Taint("virtual-kubelet.io/provider", "azure", "NoSchedule"),))

# needs_ips sees groups as discovered: no IPs yet.
BARE = grp("nsgvmss", inst("85", "nsgvmss00002D"), inst("10", "nsgvmss00000A"), rg="RG-One")


@pytest.mark.parametrize("nodes,method,needed", [
    ([nd("a", provider_id("nsgvmss", 85, rg="RG-One"), "10.0.0.5")], AUTO, False),  # providerID settles it
    ([nd("nsgvmss00000a", "k3s://nsgvmss00000a", "10.0.0.6")], AUTO, False),  # hostname settles it
    ([nd("gone", provider_id("nsgvmss", 99, rg="RG-One"), "10.0.0.9")], AUTO, False),  # azure:// is final
    ([nd("worker", "k3s://worker", "10.0.0.9")], AUTO, True),  # only the IP can tell
    ([nd("worker", "k3s://worker")], AUTO, False),  # no InternalIP: the IP could not tell
    ([nd("nsgvmss00000a", "", "10.0.0.6")], IP, True),  # forced
    ([nd("worker", "k3s://worker", "10.0.0.9")], HOSTNAME, False),
    ([nd("worker", "k3s://worker", "10.0.0.9")], PROVIDER_ID, False),
    ([], IP, True),
    ([], AUTO, False),
    ([nd("a", provider_id("nsgvmss", 85, rg="RG-One"), "10.0.0.5"), VIRTUAL], AUTO, False),  # never mapped
])
def test_needs_ips(nodes: list[Node], method: str, needed: bool) -> None:
    assert needs_ips(nodes, [BARE], method) is needed


def test_an_ambiguous_hostname_does_not_need_ips() -> None:
    twins = [grp("twin-a", inst("0", "worker000000")), grp("twin-b", inst("0", "worker000000"))]
    assert needs_ips([nd("worker000000", "", "10.2.0.4")], twins, AUTO) is False


def test_mapping_many_nodes_builds_indexes_once() -> None:
    """5,000 nodes over 50 groups map in one pass (a nested loop would take minutes here)."""
    groups = [grp(f"g{g}", *(inst(str(i), f"g{g}-{i:06d}", f"10.{g}.{i // 250}.{i % 250}") for i in range(100)))
              for g in range(50)]
    nodes = [nd(f"g{g}-{i:06d}") if i % 2 else nd(f"ip-{g}-{i}", "", f"10.{g}.{i // 250}.{i % 250}")
             for g in range(50) for i in range(100)]
    mapping = map_nodes(nodes, groups)
    assert len(mapping.mapped) == 5000 and not mapping.unmanaged and not mapping.ambiguous
    assert {m.method for m in mapping.mapped.values()} == {HOSTNAME, IP}


@pytest.mark.parametrize("nodes,needed", [
    ([nd("a", provider_id("nsgvmss", 85, rg="RG-One"))], False),
    ([nd("a", provider_id("nsgvmss", 85, rg="RG-One")), VIRTUAL], False),  # never mapped: decides no read
    ([VIRTUAL], False),
    ([nd("a", provider_id("nsgvmss", 85, rg="RG-One")), nd("worker", "k3s://worker")], True),
])
def test_needs_instances_looks_only_at_nodes_mapping_may_match(nodes: list[Node], needed: bool) -> None:
    assert needs_instances(nodes, [BARE], AUTO) is needed
