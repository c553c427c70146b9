"""Which instance of which node group each Kubernetes node runs on, decided per node.

Pure module: no I/O, no side effects, no SDK. The caller passes the nodes and the
discovered groups (with their instances' keys) and gets a `NodeMapping` to act on and
to show to the operator.

A node is mapped by one of three keys, tried in this order (NODE_MAPPING=auto), or by
only the one the operator forces:

1. `provider-id`: spec.providerID names the VM. cloud-provider-azure writes `azure://`
   and the VM's ARM id, either a Uniform scale-set instance
   (`.../virtualMachineScaleSets/<vmss>/virtualMachines/<id>`) or a plain VM, as Flexible
   members and AKS VirtualMachines pools are (`.../virtualMachines/<vm name>`).
2. `hostname`: the node name equals the instance's computer name, compared
   case-insensitively: Kubernetes lower-cases node names while a Uniform computer name ends
   in six base-36 digits that ARM may write in upper case (`nsgvmss00002D`). The default
   for k3s, RKE2 and kubeadm, whose providerIDs (`k3s://<name>`, empty) name no VM.
3. `ip`: one of the node's InternalIPs is one of the instance's private IPs.

Rules, each there so that the autoscaler never acts on a guess:

- An `azure://` providerID is authoritative: the cloud provider read it from the VM. When it
  names no instance of a discovered group (a VM outside our groups, a deleted instance, a
  stale node) the node is unmanaged; hostname and IP are not tried, since they could only
  contradict it. Any other providerID (`k3s://`, `rke2://`, empty) falls through.
- A key claimed by two instances (two scale sets with one computer-name prefix, a reused IP)
  makes every node matching that key ambiguous: reported, never guessed, no fall-through.
- An instance claimed by two nodes makes all of those nodes ambiguous.
- A node matching no instance is unmanaged: reported with what each method found, never touched.
- An instance no node maps to is booting (see `NodeMapping.booting`).

Indexes are built once per call, so mapping costs O(nodes + instances): clusters have
thousands of nodes.

Resource groups and names in ARM ids compare case-insensitively, as ARM compares them.
The subscription is not compared: the autoscaler works in one subscription
(AZURE_SUBSCRIPTION_ID) and a NodeGroup does not carry one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, Instance, Node, NodeGroup, parse_provider_id
from shared.engine.pod_rules import is_virtual_node

# The mapping methods, as NODE_MAPPING names them.
PROVIDER_ID = "provider-id"
HOSTNAME = "hostname"
IP = "ip"
AUTO = "auto"
METHODS = (AUTO, PROVIDER_ID, HOSTNAME, IP)
_AUTO_ORDER = (PROVIDER_ID, HOSTNAME, IP)


# A plain VM's providerID (Flexible members, AKS VirtualMachines pools); parse_provider_id reads the Uniform form.
_VM_PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachines/(?P<vm>[^/]+)$",
    re.IGNORECASE,
)
_AZURE_SCHEME = "azure://"


def parse_mapping_method(text: str) -> str:
    """NODE_MAPPING's value as a method; empty means auto. Raises ValueError naming the allowed values."""
    method = (text or "").strip().lower()
    if not method:
        return AUTO
    if method not in METHODS:
        raise ValueError(f"{text!r} is not a node mapping method; use one of {', '.join(METHODS)}")
    return method


@dataclass(frozen=True, slots=True)
class MappedNode:
    """A node and the one instance it runs on, with the method that found it."""

    node_name: str
    group_id: str
    instance_id: str
    method: str


@dataclass(frozen=True, slots=True)
class UnmappedNode:
    """A node left alone (unmanaged or ambiguous), with a sentence saying why, for the operator."""

    node_name: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeMapping:
    """The outcome of `map_nodes`.

    `mapped`: by node name. `unmanaged`: nodes of no instance of any discovered group.
    `ambiguous`: nodes with more than one candidate instance, or sharing one with another
    node. `held`: (group id, instance id) of the instances an ambiguous node may run on:
    such an instance is neither mapped nor booting, since a node may well be on it.
    """

    mapped: Mapping[str, MappedNode] = field(default_factory=lambda: MappingProxyType({}))
    unmanaged: tuple[UnmappedNode, ...] = ()
    ambiguous: tuple[UnmappedNode, ...] = ()
    held: frozenset[tuple[str, str]] = frozenset()
    # Derived from `mapped` once, so per-group questions do not scan every node.
    _by_group: Mapping[str, tuple[MappedNode, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_group: dict[str, list[MappedNode]] = {}
        for mapped in self.mapped.values():
            by_group.setdefault(mapped.group_id, []).append(mapped)
        object.__setattr__(self, "_by_group", {g: tuple(ms) for g, ms in by_group.items()})

    def instance_of(self, node_name: str) -> MappedNode | None:
        return self.mapped.get(node_name)

    def nodes_of(self, group_id: str) -> tuple[MappedNode, ...]:
        """The group's mapped nodes, in the order the nodes were given."""
        return self._by_group.get(group_id, ())

    def booting(self, group: NodeGroup) -> tuple[Instance, ...]:
        """The group's instances no node maps to (nor may map to, see `held`): their nodes are yet to register.

        Every provisioning state counts, as before this module; a caller that must leave out
        instances being deleted filters on `Instance.deleting`.
        """
        taken = {m.instance_id for m in self.nodes_of(group.id)}
        return tuple(
            i for i in group.instances if i.instance_id not in taken and (group.id, i.instance_id) not in self.held
        )


VIRTUAL_NODE_REASON = "a virtual node (virtual-kubelet on ACI): a node group of its own kind, never scaled or drained"

def map_nodes(nodes: Sequence[Node], groups: Sequence[NodeGroup], *, method: str = AUTO) -> NodeMapping:
    """Map each node to at most one instance of `groups`, by `method` (AUTO tries each in turn)."""
    if method not in METHODS:
        raise ValueError(f"unknown node mapping method {method!r}; use one of {', '.join(METHODS)}")
    indexes = _Indexes(groups)
    order = _AUTO_ORDER if method == AUTO else (method,)

    found: dict[str, tuple[_Ref, str]] = {}  # node name -> its one instance, and how
    unmanaged: list[UnmappedNode] = []
    ambiguous: dict[str, UnmappedNode] = {}
    held: set[tuple[str, str]] = set()
    for node in nodes:
        if is_virtual_node(node):
            # Not an instance of any group, whatever its name or addresses: never matched, so never touched.
            unmanaged.append(UnmappedNode(node.name, VIRTUAL_NODE_REASON))
            continue
        outcome = _match(node, indexes, order)
        if outcome.match is not None:
            found[node.name] = (outcome.match, outcome.method)
        elif outcome.candidates:
            ambiguous[node.name] = UnmappedNode(node.name, outcome.reason)
            held.update(ref.key for ref in outcome.candidates)
        else:
            unmanaged.append(UnmappedNode(node.name, outcome.reason))

    # One instance, one node: when several nodes claim an instance, none of them gets it.
    claims: dict[tuple[str, str], list[str]] = {}
    for name, (ref, _) in found.items():
        claims.setdefault(ref.key, []).append(name)
    for key, names in claims.items():
        if len(names) < 2:
            continue
        ref = found[names[0]][0]
        how = ", ".join(f"{n} by {found[n][1]}" for n in names)
        for name in names:
            ambiguous[name] = UnmappedNode(
                name, f"ambiguous: nodes {_and(names)} {_both(names)} map to instance {ref.label} ({how})")
            del found[name]
        held.add(key)

    mapped = {name: MappedNode(name, ref.group.id, ref.instance.instance_id, how) for name, (ref, how) in found.items()}
    order_of = {node.name: i for i, node in enumerate(nodes)}
    return NodeMapping(
        mapped=MappingProxyType(mapped),
        unmanaged=tuple(unmanaged),
        ambiguous=tuple(sorted(ambiguous.values(), key=lambda u: order_of[u.node_name])),
        held=frozenset(held),
    )


def needs_ips(nodes: Sequence[Node], groups: Sequence[NodeGroup], method: str = AUTO) -> bool:
    """Whether the caller must fetch the instances' private IPs (list network interfaces) before `map_nodes`.

    Yes when IP mapping is forced, or in AUTO when some node with an InternalIP is left
    for the IP step: neither its providerID nor its name settled it. `groups` are passed
    as discovered, without IPs. Virtual nodes do not count: `map_nodes` never matches them, and
    their InternalIP is a pod's address, so it would only buy a NIC list per group for nothing.
    """
    if method == IP:
        return True
    if method != AUTO:
        return False
    indexes = _Indexes(groups)
    return any(
        node.internal_ips and _match(node, indexes, (PROVIDER_ID, HOSTNAME)).falls_through
        for node in _mappable(nodes)
    )


def needs_instances(nodes: Sequence[Node], groups: Sequence[NodeGroup], method: str = AUTO) -> bool:
    """Whether `map_nodes` needs the groups' instance lists (one high-cost ARM read per group).

    Not when providerIDs settle every node by themselves: Uniform groups only (the AKS, CAPZ and
    aks-engine shape), and every node `map_nodes` may match (virtual nodes never are: no providerID,
    a pod's IP) has an `azure://` providerID (authoritative, see above), or provider-id mapping is
    forced. Then `instances_named_by_nodes` stands in for the lists.
    """
    if method in (HOSTNAME, IP):
        return True
    if any(g.provider != UNIFORM_SCALE_SET for g in groups):
        return True  # a Flexible member's or pool VM's name does not say which group it is in
    if method == PROVIDER_ID:
        return False
    return any(not node.provider_id.strip().lower().startswith(_AZURE_SCHEME) for node in _mappable(nodes))


def _mappable(nodes: Iterable[Node]) -> Iterable[Node]:
    """The nodes `map_nodes` tries to match: all but virtual ones, so what it reads is decided by these alone."""
    return (node for node in nodes if not is_virtual_node(node))


def instances_named_by_nodes(nodes: Sequence[Node], groups: Sequence[NodeGroup]) -> list[NodeGroup]:
    """Uniform groups with, as their instances, those their nodes' providerIDs name.

    All that provider-id mapping reads of a Uniform instance is its id, so where `needs_instances`
    says no list is needed this stands in for one, and a cluster of cloud-provider-azure nodes
    costs no ARM read for mapping.
    """
    named: dict[str, list[Instance]] = {}
    for node in nodes:
        ref = parse_provider_id(node.provider_id)
        if ref is not None:
            named.setdefault(ref.group_id, []).append(Instance(ref.instance_id))
    return [replace(g, instances=tuple(named.get(g.id, ()))) for g in groups]


# --- Matching ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class _Ref:
    """One instance of one group: what a key points to."""

    group: NodeGroup
    instance: Instance

    @property
    def key(self) -> tuple[str, str]:
        return (self.group.id, self.instance.instance_id)

    @property
    def label(self) -> str:
        return f"{self.group.id}/{self.instance.instance_id}"


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one node's matching found: one instance, several (ambiguous), or none and why."""

    method: str = ""
    match: _Ref | None = None
    candidates: tuple[_Ref, ...] = ()  # when ambiguous
    reason: str = ""
    final: bool = False  # a miss that ends the search (an azure:// providerID naming no instance)

    @property
    def falls_through(self) -> bool:
        return self.match is None and not self.candidates and not self.final


class _Indexes:
    """Every instance by each key a node can name it by; built once, read once per node."""

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self.by_arm_id: dict[str, list[_Ref]] = {}
        self.by_computer_name: dict[str, list[_Ref]] = {}
        self.by_ip: dict[str, list[_Ref]] = {}
        for group in groups:
            for instance in group.instances:
                ref = _Ref(group, instance)
                _add(self.by_arm_id, (_instance_arm_key(group, instance),), ref)
                if instance.computer_name:
                    _add(self.by_computer_name, (instance.computer_name.lower(),), ref)
                _add(self.by_ip, instance.private_ips, ref)


def _add(index: dict[str, list[_Ref]], keys: Iterable[str], ref: _Ref) -> None:
    for key in keys:
        refs = index.setdefault(key, [])
        if not any(r.key == ref.key for r in refs):  # an instance listing one IP twice is still one instance
            refs.append(ref)


def _match(node: Node, indexes: _Indexes, order: Sequence[str]) -> _Outcome:
    misses: list[str] = []
    for method in order:
        outcome = _STEPS[method](node, indexes)
        if not outcome.falls_through:
            if outcome.match is None and not outcome.candidates:
                return _Outcome(method, reason="; ".join([*misses, outcome.reason]), final=True)
            return outcome
        misses.append(outcome.reason)
    return _Outcome(reason="; ".join(misses))


def _decide(method: str, refs: Sequence[_Ref], what: str, miss: str, *, final: bool = False) -> _Outcome:
    if len(refs) == 1:
        return _Outcome(method, match=refs[0])
    if refs:
        labels = [r.label for r in refs]
        return _Outcome(method, candidates=tuple(refs),
                        reason=f"ambiguous: instances {_and(labels)} {_both(labels)} have {what}")
    return _Outcome(method, reason=miss, final=final)


def _by_provider_id(node: Node, indexes: _Indexes) -> _Outcome:
    provider_id = node.provider_id.strip()
    if not provider_id:
        return _Outcome(PROVIDER_ID, reason="no providerID")
    if not provider_id.lower().startswith(_AZURE_SCHEME):
        return _Outcome(PROVIDER_ID, reason=f"providerID {provider_id} names no Azure VM")
    key = _arm_key(provider_id)
    refs = indexes.by_arm_id.get(key, []) if key else []
    return _decide(PROVIDER_ID, refs, f"providerID {provider_id}",
                   f"providerID {provider_id} names no instance of a discovered group", final=True)


def _by_hostname(node: Node, indexes: _Indexes) -> _Outcome:
    refs = indexes.by_computer_name.get(node.name.lower(), [])
    return _decide(HOSTNAME, refs, f"computer name {node.name}", f"no instance has computer name {node.name}")


def _by_ip(node: Node, indexes: _Indexes) -> _Outcome:
    if not node.internal_ips:
        return _Outcome(IP, reason="node has no InternalIP")
    refs: list[_Ref] = []
    matched: list[str] = []
    for ip in node.internal_ips:
        hits = indexes.by_ip.get(ip, [])
        if hits and ip not in matched:
            matched.append(ip)
        for ref in hits:
            if not any(r.key == ref.key for r in refs):  # one instance holding two of the node's IPs
                refs.append(ref)
    what = f"IP {matched[0]}" if len(matched) == 1 else f"one of IPs {', '.join(matched)}"
    return _decide(IP, refs, what, f"no instance has IP {', '.join(node.internal_ips)}")


_STEPS: Mapping[str, Callable[[Node, _Indexes], _Outcome]] = {
    PROVIDER_ID: _by_provider_id,
    HOSTNAME: _by_hostname,
    IP: _by_ip,
}


def _arm_key(provider_id: str) -> str | None:
    """A VM's identity in an `azure://` providerID, lower-cased and without the subscription; None if no VM form."""
    ref = parse_provider_id(provider_id)
    if ref is not None:
        return _scale_set_vm_key(ref.resource_group, ref.scale_set, ref.instance_id)
    match = _VM_PROVIDER_ID.match(provider_id)
    if match is not None:
        return _vm_key(match["rg"], match["vm"])
    return None


def _instance_arm_key(group: NodeGroup, instance: Instance) -> str:
    """The key a node's providerID must have to name `instance`.

    From the instance's ARM id when the provider gave one (the only reliable source for
    AKS pools, whose group is not named after its scale set), else from the group: a
    Flexible member is a VM named by its instance id, anything else a Uniform instance.
    """
    if instance.resource_id:
        key = _arm_key(_AZURE_SCHEME + instance.resource_id.strip())
        if key is not None:
            return key
    if group.provider == FLEXIBLE_SCALE_SET:
        return _vm_key(group.resource_group, instance.instance_id)
    return _scale_set_vm_key(group.resource_group, group.name, instance.instance_id)


def _scale_set_vm_key(resource_group: str, scale_set: str, instance_id: str) -> str:
    return f"{resource_group}/virtualMachineScaleSets/{scale_set}/virtualMachines/{instance_id}".lower()


def _vm_key(resource_group: str, vm_name: str) -> str:
    return f"{resource_group}/virtualMachines/{vm_name}".lower()


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _both(items: Sequence[str]) -> str:
    return "both" if len(items) == 2 else "all"
