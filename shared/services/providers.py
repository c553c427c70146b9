"""Several node-group backends behind one NodeGroupProvider: each call goes to the provider of its group.

Discovery asks every provider and stamps nothing itself: each provider marks its groups with its own
`kind` (NodeGroup.provider), and a call about a group goes to the provider of that kind. Calls that name
only a group id (`get_node_group`) go to the provider that last listed the group, else to each in turn;
calls that carry only an operation token go to the provider whose kind prefixes the token.

Tokens of the first provider (the default, today's Uniform scale sets) travel unprefixed, so ledger rows
and queue messages written before providers existed resume as they are; any other provider's tokens are
`<kind>|<token>` (ARM's continuation tokens are base64: no `|`).

No I/O of its own: it only dispatches to the providers it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from shared.domain import AKS_AGENT_POOL, Instance, NodeGroup, VmSizeCapacity
from shared.ports import NodeGroupProvider, Operation

_SEPARATOR = "|"
log = logging.getLogger(__name__)


# AKS writes this tag on the scale set behind each agent pool: the pool's name.
AKS_POOL_TAG = "aks-managed-poolName"


def _without_pool_scale_sets(groups: list[NodeGroup]) -> list[NodeGroup]:
    """The groups, less each scale set behind an AKS pool that the agent-pool backend manages.

    AKS copies a pool's tags to its scale set, so a pool tagged for us shows up twice when the node resource
    group is also in NODE_RESOURCE_GROUPS: once as the pool, once as its scale set. Only the pool is kept;
    changing the scale set directly is what AKS does not support. A scale set whose pool is not managed
    as a pool stays a scale-set group, as cluster-autoscaler treats it.
    """
    pools = {g.name.lower() for g in groups if g.provider == AKS_AGENT_POOL}
    if not pools:
        return groups
    kept = []
    for group in groups:
        pool = group.tags.get(AKS_POOL_TAG, "")
        if group.provider != AKS_AGENT_POOL and pool.lower() in pools:
            log.info("scale set %s is AKS pool %s's, which is managed through the agentPools API: skipped",
                     group.id, pool)
            continue
        kept.append(group)
    return kept


class ProviderRouter:
    """A NodeGroupProvider over several, one per kind; the first is the default."""

    def __init__(self, providers: Sequence[NodeGroupProvider]) -> None:
        if not providers:
            raise ValueError("ProviderRouter needs at least one provider")
        kinds = [p.kind for p in providers]
        if len(set(kinds)) != len(kinds) or any(_SEPARATOR in k or not k for k in kinds):
            raise ValueError(f"provider kinds must be distinct, non-empty and without {_SEPARATOR!r}: {kinds}")
        self._by_kind = {p.kind: p for p in providers}
        self._default = providers[0]
        self.kind = self._default.kind
        self._owner: dict[str, NodeGroupProvider] = {}  # group id -> provider that listed it last

    @property
    def providers(self) -> tuple[NodeGroupProvider, ...]:
        return tuple(self._by_kind.values())

    def _of(self, group: NodeGroup) -> NodeGroupProvider:
        try:
            return self._by_kind[group.provider]
        except KeyError:
            raise ValueError(f"group {group.id} comes from provider {group.provider!r}, which is not configured "
                             f"(configured: {', '.join(self._by_kind)})") from None

    # Tokens: the default provider's unprefixed, others' `<kind>|<token>`.
    def _tagged(self, provider: NodeGroupProvider, operation: Operation) -> Operation:
        if provider is self._default:
            return operation
        return Operation(f"{provider.kind}{_SEPARATOR}{operation.token}", operation.status,
                         operation.error_code, operation.error_message)

    def _resume(self, token: str, get: Callable[[NodeGroupProvider, str], Operation]) -> Operation:
        kind, separator, rest = token.partition(_SEPARATOR)
        provider = self._by_kind.get(kind) if separator else None
        if provider is None or provider is self._default:
            return get(self._default, token)
        return self._tagged(provider, get(provider, rest))

    # -- discovery and reads ------------------------------------------------------------
    def list_node_groups(self) -> list[NodeGroup]:
        groups: list[NodeGroup] = []
        owner: dict[str, NodeGroupProvider] = {}
        for provider in self._by_kind.values():
            for group in provider.list_node_groups():
                if group.id in owner:
                    raise ValueError(f"group {group.id} is discovered by both {owner[group.id].kind} "
                                     f"and {provider.kind}")
                owner[group.id] = provider
                groups.append(group)
        groups = _without_pool_scale_sets(groups)
        self._owner = {g.id: owner[g.id] for g in groups}
        return groups

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        known = self._owner.get(group_id)
        if known is not None:
            return known.get_node_group(group_id)
        for provider in self._by_kind.values():
            group = provider.get_node_group(group_id)
            if group is not None:
                self._owner[group_id] = provider
                return group
        return None

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        return self._of(group).get_instance(group, instance_id)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        return self._of(group).list_instances(group, power_state=power_state)

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        return self._of(group).list_private_ips(group)

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        # VM sizes are a property of the location, not of a backend: the default provider's answer.
        return self._default.list_vm_sizes(location)

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        prices: dict[str, float] = {}
        for kind, provider in self._by_kind.items():
            mine = [g for g in groups if g.provider == kind]
            if mine:
                prices.update(provider.list_prices(mine))
        return prices

    # -- changes ------------------------------------------------------------------------
    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        provider = self._of(group)
        return self._tagged(provider, provider.begin_resize(group, capacity))

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        provider = self._of(group)
        return self._tagged(provider, provider.begin_delete_instances(group, instance_ids))

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        provider = self._of(group)
        # Asked only when hibernating, so a provider written before the keyword still serves plain deallocates.
        options = {"hibernate": True} if hibernate else {}
        return self._tagged(provider, provider.begin_deallocate_instances(group, instance_ids, **options))

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        provider = self._of(group)
        return self._tagged(provider, provider.begin_start_instances(group, instance_ids))

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        return self._of(group).supports_scale_in_protection(group)

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        self._of(group).set_scale_in_protection(group, instance_id, protect=protect)

    def get_resize_operation(self, token: str) -> Operation:
        return self._resume(token, lambda p, t: p.get_resize_operation(t))

    def get_delete_operation(self, token: str) -> Operation:
        return self._resume(token, lambda p, t: p.get_delete_operation(t))

    def get_deallocate_operation(self, token: str) -> Operation:
        return self._resume(token, lambda p, t: p.get_deallocate_operation(t))

    def get_start_operation(self, token: str) -> Operation:
        return self._resume(token, lambda p, t: p.get_start_operation(t))
