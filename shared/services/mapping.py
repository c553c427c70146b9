"""Node mapping in the services: read what `engine.node_mapping` needs, and no more, then mark each node.

Reads, per poll: nothing for a cluster whose nodes all carry cloud-provider-azure providerIDs on
Uniform scale sets (AKS, CAPZ, aks-engine), virtual nodes aside (never mapped, so they decide no read); otherwise one instance list per group, plus one
network-interface list per group only when some node is left for IP mapping (kubeadm without a
cloud provider). A multi-size set's lanes (one group per VM size) are always listed: a node's providerID
names its VM, not its size, and the lane's own list is what tells which lane it is in. Every node comes back with `Node.mapped` set, and `mapped_to` naming its
instance or None: a node that is unmanaged or ambiguous is never touched.

The executor maps its targets afresh over their one group before it touches them, by the same rules:
a node the poll mapped but this read does not (its instance gone, its IP changed, another node now
claiming its instance) is not touched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shared.domain import InstanceRef, Node, NodeGroup, parse_provider_id
from shared.engine.node_mapping import (
    AUTO,
    PROVIDER_ID,
    NodeMapping,
    instances_named_by_nodes,
    map_nodes,
    needs_instances,
    needs_ips,
)
from shared.ports import NodeGroupProvider

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MappedCluster:
    nodes: tuple[Node, ...]  # every node, `mapped` set
    groups: tuple[NodeGroup, ...]  # the groups, with their instances when `listed`
    mapping: NodeMapping
    listed: bool = False  # the groups' instances were listed for mapping (callers may reuse them)


def map_cluster(
    provider: NodeGroupProvider, nodes: Sequence[Node], groups: Sequence[NodeGroup], *, method: str = AUTO
) -> MappedCluster:
    """Map every node to its instance (or to none, with the reason), reading instances only when needed."""
    listed = list(groups)
    # A lane's nodes are told from its set's other sizes only by its own instance list (list_instances(lane)).
    read = needs_instances(nodes, groups, method) or any(g.lane for g in groups)
    if read:
        listed = [replace(g, instances=tuple(provider.list_instances(g))) for g in groups]
        if needs_ips(nodes, listed, method):
            listed = [_with_ips(provider, g) for g in listed]
        keys = listed
    else:
        keys = instances_named_by_nodes(nodes, groups)
    mapping = map_nodes(nodes, keys, method=method)
    by_id = {g.id: g for g in keys}
    marked = tuple(_marked(node, mapping, by_id) for node in nodes)
    return MappedCluster(marked, tuple(listed), mapping, listed=read)


def _with_ips(provider: NodeGroupProvider, group: NodeGroup) -> NodeGroup:
    ips = provider.list_private_ips(group)
    return replace(group, instances=tuple(replace(i, private_ips=ips.get(i.instance_id, i.private_ips))
                                          for i in group.instances))


def _marked(node: Node, mapping: NodeMapping, groups: dict[str, NodeGroup]) -> Node:
    found = mapping.instance_of(node.name)
    if found is None:
        return replace(node, mapped=True, mapped_to=None)
    ref = parse_provider_id(node.provider_id) if found.method == PROVIDER_ID else None
    if ref is None or ref.group_id != found.group_id:
        group = groups[found.group_id]
        # A lane's node names the lane (ref.group_id is the lane's id): its size's state, template and prices.
        ref = InstanceRef("", group.resource_group, group.name, found.instance_id, lane=group.lane)
    return replace(node, mapped=True, mapped_to=ref)
