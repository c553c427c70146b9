"""Stopping instances into a group's standby: hibernated where asked for and allowed, else plainly deallocated.

The choice is `shared.engine.hibernation`'s (STANDBY_HIBERNATE, the tag `autoscaler-standby-hibernate`, the set's
`hibernation_enabled`). A set that refuses the hibernation (ARM answers 400 before anything changes: an image or
size that cannot hibernate, a set discovered wrongly) is deallocated plainly in the same call, with a warning, so a
removal or a refill never stops half-way over it. Throttling and server faults are not refusals: they go to the
caller, which retries the step as for any deallocate.

A hibernated instance keeps its Node object (`keeps_node`): it resumes its running kubelet, and a kubelet that
registered once does not register again when its Node was deleted under it (kubernetes/kubernetes#71398, closed
unfixed; #116485, open, "mostly still happening in the latest releases" in 2025; the re-registration of #123535
was closed unmerged). The Node stays cordoned with our taint while the instance is stopped, out of the planners'
snapshot (`observe.running_sizes`), and the scale-up that starts the instance uncordons it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from shared.domain import TO_BE_DELETED_TAINT, NodeGroup
from shared.engine.hibernation import hibernation_choice
from shared.ports import Cluster, ComputeError, NodeGroupProvider, Operation
from shared.services.mapping import map_cluster
from shared.settings import Settings

log = logging.getLogger(__name__)

THROTTLED = "TooManyRequests"
# The kinds a stop operation is followed under (the ledger's `kind:token`): both are deallocations to ARM.
DEALLOCATE = "deallocate"
HIBERNATE = "hibernate"
STOP_KINDS = (DEALLOCATE, HIBERNATE)


def hibernates(settings: Settings, group: NodeGroup) -> bool:
    """Whether the group's stopped instances are to be hibernated; a malformed tag counts as no (and is logged)."""
    try:
        return hibernation_choice(group, setting=settings.standby_hibernate).hibernate
    except ValueError as exc:
        log.warning("%s; its instances are deallocated without hibernation", exc)
        return False


def begin_stop_instances(provider: NodeGroupProvider, settings: Settings, group: NodeGroup,
                         instance_ids: list[str]) -> Operation:
    """Deallocate `instance_ids` of `group`, hibernating them where `hibernates` says so (see the module)."""
    return begin_stop(provider, settings, group, instance_ids)[0]


def begin_stop(provider: NodeGroupProvider, settings: Settings, group: NodeGroup,
               instance_ids: list[str]) -> tuple[Operation, str]:
    """`begin_stop_instances`, with the operation's kind: HIBERNATE if the instances hibernate, else DEALLOCATE
    (not asked for, not allowed, or refused). The callers follow the operation under that kind, so the step that
    sees it succeed knows whether the Node objects are to be kept (`keeps_node`)."""
    if not hibernates(settings, group):
        return provider.begin_deallocate_instances(group, instance_ids), DEALLOCATE
    try:
        return provider.begin_deallocate_instances(group, instance_ids, hibernate=True), HIBERNATE
    except ComputeError as exc:
        if exc.transient or exc.code == THROTTLED:
            raise
        log.warning("hibernating instance(s) %s of %s was refused (%s); deallocating them without hibernation",
                    ", ".join(instance_ids), group.id, exc)
        return provider.begin_deallocate_instances(group, instance_ids), DEALLOCATE


def keeps_node(kind: str) -> bool:
    """Whether instances stopped by an operation of `kind` keep their Node objects: a hibernated one resumes a
    kubelet that would not register a deleted Node again (see the module); a deallocated one boots and registers
    afresh, so its Node is deleted as before."""
    return kind == HIBERNATE


def uncordon_resumed(cluster: Cluster, provider: NodeGroupProvider, group: NodeGroup, instance_ids: Iterable[str],
                     *, node_mapping: str) -> list[str]:
    """Give the kept Node objects of `instance_ids` (being started) back to scheduling: uncordoned, our taint
    dropped; the names of those it found. A started instance whose Node was deleted has none (it registers afresh).

    Done when the start is asked for, not once the node is Ready: cordoned with our taint, a NotReady node would
    count as present to the planners (on its way out) while it can take no pod, so they would plan another node
    for the pods it is about to take; uncordoned early it counts as a node on its way, and the scheduler still
    places nothing on it until it is Ready (its not-ready and shutdown taints go only then). Idempotent."""
    names = _kept_nodes(cluster, provider, group, instance_ids, node_mapping=node_mapping, cordoned_only=True)
    for name in names:
        cluster.uncordon(name, taint_key=TO_BE_DELETED_TAINT)
    if names:
        log.info("resuming instance(s) of %s: node(s) %s uncordoned", group.id, ", ".join(names))
    return names


def delete_kept_nodes(cluster: Cluster, provider: NodeGroupProvider, group: NodeGroup, instance_ids: Iterable[str],
                      *, node_mapping: str) -> list[str]:
    """Delete the kept Node objects of stopped `instance_ids` that are being deleted themselves (the deallocated
    cap's trim): nothing will resume them, so their Nodes would otherwise wait for the cloud node lifecycle
    controller, counted as present meanwhile. The names deleted; idempotent (a Node gone already is skipped)."""
    names = _kept_nodes(cluster, provider, group, instance_ids, node_mapping=node_mapping, cordoned_only=False)
    for name in names:
        cluster.delete_node(name)
    if names:
        log.info("instance(s) of %s deleted from the standby: kept node(s) %s deleted", group.id, ", ".join(names))
    return names


def _kept_nodes(cluster: Cluster, provider: NodeGroupProvider, group: NodeGroup, instance_ids: Iterable[str], *,
                node_mapping: str, cordoned_only: bool) -> list[str]:
    """The names of the Nodes that map to `instance_ids` of `group` (only those carrying our taint with
    `cordoned_only`), sorted; none, and nothing listed, for a set that cannot hibernate: it kept no Node."""
    wanted = set(instance_ids)
    if not wanted or not group.hibernation_enabled:
        return []
    mapped = map_cluster(provider, cluster.list_nodes(), [group], method=node_mapping)
    return sorted(node.name for node in mapped.nodes
                  if (ref := node.instance) is not None and ref.group_id == group.id and ref.instance_id in wanted
                  and (node.is_being_deleted or not cordoned_only))
