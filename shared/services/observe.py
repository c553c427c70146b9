"""Observe: read the cluster and the scale sets into one snapshot for the engine."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from shared.domain import (
    AKS_AGENT_POOL,
    ClusterSnapshot,
    DaemonSet,
    DisruptionBudget,
    GroupState,
    Node,
    NodeGroup,
    NodeTemplate,
    Pod,
    VmSizeCapacity,
)
from shared.engine.daemonsets import daemonsets_seen_by_group, unpredicted_daemonsets
from shared.engine.gpu_readiness import gpu_template, hold_back
from shared.engine.node_mapping import AUTO, NodeMapping
from shared.engine.templates import build_templates, groups_needing_vm_size, template_from_tags
from shared.ports import ComputeError, NodeGroupProvider, Ports, UsageUnavailable
from shared.services.mapping import map_cluster
from shared.settings import Settings

log = logging.getLogger(__name__)


def observe(ports: Ports, *, now: datetime, with_budgets: bool = False, node_mapping: str = AUTO,
            with_pods: bool = True, gpu_readiness: bool = True) -> ClusterSnapshot:
    """One consistent-enough view: groups first, so nodes booting meanwhile count as upcoming, not missing.

    `with_budgets` also lists PodDisruptionBudgets, which only scale-down needs. Each node is mapped to
    its instance by `node_mapping` (NODE_MAPPING; services.mapping says what that reads). `with_pods=False`
    lists no pods, DaemonSets or budgets (the snapshot has none): for a caller that reads only nodes, groups
    and templates, such as the executor's limits check, the pod list is most of a poll's read.
    `gpu_readiness` (GPU_READINESS) presents a Ready node whose GPUs are not allocatable yet as not Ready
    (engine.gpu_readiness.hold_back): every planner then sees it as capacity on its way, and no template is
    built from it.
    """
    # The pod list is the long read (hundreds of pages in a big cluster); it runs beside discovery and the node
    # list, which wait on ARM and on the API server, instead of after them. The smaller lists follow it there.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="observe") as reader:
        later = reader.submit(contextvars.copy_context().run, _list_pods_and_more, ports, with_budgets, with_pods)
        # Should this thread's reads fail, that error is the poll's (the pool waits for the other read, whose
        # own failure then says nothing new).
        listed = ports.provider.list_node_groups()
        refused = {g.id: g.refused for g in listed if g.refused}
        for group_id, why in refused.items():
            log.warning("node group %s is marked for this autoscaler but refused: %s", group_id, why)
        groups = [g for g in listed if not g.refused]
        mapped = map_cluster(ports.provider, ports.cluster.list_nodes(), groups, method=node_mapping)
        pods, budgets, daemonsets = later.result()  # its failure, if any, is raised here
    nodes, groups = list(mapped.nodes), list(mapped.groups)
    _report_unmapped(mapped.mapping)
    vm_sizes = scale_from_zero_sizes(ports.provider, groups, nodes)
    templates = build_templates(groups, nodes, vm_sizes=vm_sizes)
    held = hold_back(nodes, _gpu_templates(groups, templates, vm_sizes)) if gpu_readiness else None
    if held is not None:
        # Templates again, from usable nodes only: a live node still without its GPUs would give its group a
        # template without them (its pods would then fit no group).
        nodes = list(held)
        vm_sizes = scale_from_zero_sizes(ports.provider, groups, nodes)
        templates = build_templates(groups, nodes, vm_sizes=vm_sizes)
    _cross_check_daemonsets(daemonsets, nodes, pods, templates)
    return ClusterSnapshot(
        taken_at=now,
        nodes=tuple(nodes),
        pods=tuple(pods),
        groups=tuple(groups),
        templates=templates,
        vm_sizes=vm_sizes,
        disruption_budgets=tuple(budgets),
        daemonsets=tuple(daemonsets),
        mapped_by={name: m.method for name, m in mapped.mapping.mapped.items()},
        unmapped=_with_refusals({u.node_name: u.reason for u in (*mapped.mapping.unmanaged, *mapped.mapping.ambiguous)},
                                nodes, [g for g in listed if g.refused]),
        ambiguous=frozenset(u.node_name for u in mapped.mapping.ambiguous),
        refused=refused,
    )


def _gpu_templates(groups: Sequence[NodeGroup], templates: Mapping[str, NodeTemplate],
                   vm_sizes: Mapping[str, VmSizeCapacity]) -> dict[str, NodeTemplate]:
    """Per group, the template that says whether its nodes have GPUs: the live node's, unless it has none and the
    group's tags or VM size do (that live node may be one still waiting for its GPUs)."""
    chosen = dict(templates)
    for group in groups:
        live = templates.get(group.id)
        if live is not None and gpu_template(live):
            continue
        sized = template_from_tags(group, vm_sizes=vm_sizes)
        if sized is not None and gpu_template(sized):
            chosen[group.id] = sized
    return chosen


def _list_pods_and_more(ports: Ports, with_budgets: bool,
                        with_pods: bool = True) -> tuple[list[Pod], list[DisruptionBudget], list[DaemonSet]]:
    if not with_pods:
        return [], [], []
    pods = ports.cluster.list_pods()
    budgets = ports.cluster.list_disruption_budgets() if with_budgets else []
    return pods, budgets, ports.cluster.list_daemonsets()


_AKS_POOL_LABEL = "kubernetes.azure.com/agentpool"


def _with_refusals(unmapped: dict[str, str], nodes: Sequence[Node], refused: Sequence[NodeGroup]) -> dict[str, str]:
    """A node of a refused AKS pool (its `agentpool` label) is unmanaged because of the refusal: say that."""
    pools = {g.name: g for g in refused if g.provider == AKS_AGENT_POOL}
    for node in nodes:
        pool = pools.get(node.labels.get(_AKS_POOL_LABEL, ""))
        if pool is not None and node.name in unmapped:
            unmapped[node.name] = f"in node group {pool.id}, which is refused: {pool.refused}"
    return unmapped


_reported: dict[str, str] = {}  # node -> the reason last logged, so a steady state is logged once per process


def _report_unmapped(mapping: NodeMapping) -> None:
    """Log a node left alone when its reason is new: the status ConfigMap and `plan` show it every poll."""
    for entry in mapping.ambiguous:
        if _reported.get(entry.node_name) != entry.reason:
            log.error("node %s is not managed: %s", entry.node_name, entry.reason)
    for entry in mapping.unmanaged:
        if _reported.get(entry.node_name) != entry.reason:
            log.info("node %s is not managed: %s", entry.node_name, entry.reason)
    _reported.clear()
    _reported.update({u.node_name: u.reason for u in (*mapping.unmanaged, *mapping.ambiguous)})


def _cross_check_daemonsets(
    daemonsets: Sequence[DaemonSet], nodes: Sequence[Node], pods: Sequence[Pod], templates: Mapping[str, NodeTemplate]
) -> None:
    """Warn where a group's nodes run a DaemonSet pod its template says they would not: the engine counts it anyway."""
    seen = daemonsets_seen_by_group(nodes, pods)
    for group_id, keys in seen.items():
        template = templates.get(group_id)
        if template is None:
            continue
        for key in unpredicted_daemonsets(daemonsets, template.labels, template.taints, keys):
            log.warning(
                "scale set %s: its nodes run DaemonSet %s, which by its selector, affinity and tolerations would not "
                "run on its template; counted as overhead all the same", group_id, key,
            )


def scale_from_zero_sizes(
    compute: NodeGroupProvider, groups: Sequence[NodeGroup], nodes: Sequence[Node]
) -> dict[str, VmSizeCapacity]:
    """SKU capacities of the sizes of groups that need a VM-size template, by lower-cased name.

    Only those groups' locations are listed (and the adapter caches each for hours), so a
    cluster whose groups all have a live node or resource tags makes no extra ARM call.
    """
    needy = groups_needing_vm_size(groups, nodes)
    sizes: dict[str, VmSizeCapacity] = {}
    for location in sorted({g.location.lower() for g in needy if g.location}):
        listed = {size.name.lower(): size for size in compute.list_vm_sizes(location)}
        for group in (g for g in needy if g.location.lower() == location):
            size = listed.get(group.vm_size.lower())
            if size is None:
                continue
            sizes.setdefault(group.vm_size.lower(), size)
            if size.restriction:
                log.warning(
                    "scale set %s: VM size %s is not available to this subscription in %s (%s); its scale-ups will fail",
                    group.id, size.name, location, size.restriction,
                )
    return sizes


def measured_cpu(ports: Ports, settings: Settings, nodes: Sequence[Node], *, now: datetime,
                 without: str = "scale-down decides by requests alone") -> dict[str, float] | None:
    """Measured CPU of these nodes from USAGE_SOURCE, or None when off or unavailable (`without` says what
    the caller does then, in the warning)."""
    if ports.usage is None:
        return None
    try:
        return dict(ports.usage.get_node_cpu_usage(nodes, window=settings.usage_window, now=now))
    except UsageUnavailable as exc:
        # A second opinion, never a requirement: say so, in a line operators can alert on.
        log.warning("measured usage unavailable (source=%s): %s: %s", ports.usage.name, without, exc,
                    extra={"usage_source": ports.usage.name, "usage_available": False})
        return None


def running_sizes(snapshot: ClusterSnapshot, states: Mapping[str, GroupState]) -> ClusterSnapshot:
    """The snapshot with each group's deallocated instances counted (`NodeGroup.stopped`), from its state.

    A deallocated instance stays in the scale set's capacity, but it is no node and no node on its
    way; min and max apply to running instances (`running_target`), and the next scale-up starts it again.
    The Node object a hibernated instance keeps while stopped (services.hibernation) is left out of the snapshot:
    it is no capacity and no node on its way, and not an unready node to remove (one still reserved by the
    action stopping it stays, for that action).
    """
    groups = tuple(
        replace(g, stopped=len(states[g.id].stopped)) if g.id in states else g
        for g in snapshot.groups
    )
    nodes = tuple(n for n in snapshot.nodes if not _parked(n, states))
    return replace(snapshot, groups=groups, nodes=nodes)


def _parked(node: Node, states: Mapping[str, GroupState]) -> bool:
    """Whether the node is a stopped instance's, kept while it is stopped and held by no action."""
    ref = node.instance
    state = states.get(ref.group_id) if ref is not None else None
    return state is not None and ref is not None and ref.instance_id in state.stopped \
        and node.name not in state.removing


def observe_or_skip(ports: Ports, *, now: datetime, with_budgets: bool = False,
                    node_mapping: str = AUTO, gpu_readiness: bool = True) -> ClusterSnapshot | None:
    """observe(), or None when ARM throttles us: a skipped tick is harmless, a retry storm is not."""
    try:
        return observe(ports, now=now, with_budgets=with_budgets, node_mapping=node_mapping,
                       gpu_readiness=gpu_readiness)
    except ComputeError as exc:
        if exc.code != "TooManyRequests":
            raise
        log.warning("ARM is throttling discovery (retry after %ss): skipping this poll", exc.retry_after)
        return None
