"""Drift in the services: the instance reads that model drift needs, and no more.

A node drifts by model when its instance reports `latestModelApplied: false` (engine.drift), which only the VMSS
VMs list of a Uniform scale set carries (a Flexible member is a plain VM without the field; an AKS pool's
machines neither, and its drift is the node image, read from the pool and the node's label). Node mapping lists
instances only when some node needs them (services.mapping), so a cluster of providerID-mapped nodes would never
see a stale instance: `with_model_state` lists the instances of its Uniform groups that were not listed this
poll, one VMSS VMs list per group, only while DRIFT_REPLACEMENT is on. A failed list leaves the group as it was
(its nodes are simply not drifted by model this poll), never the poll.

Reads are frugal: a model change writes the scale set, so its etag moves. Once a list found every instance on the
latest model, the set is not listed again (in this process) until its etag changes: a steady cluster pays no
read, a resize one, a drifted set one per poll until it is all on the new model.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from shared.domain import UNIFORM_SCALE_SET, ClusterSnapshot, NodeGroup
from shared.ports import ComputeError, NodeGroupProvider

log = logging.getLogger(__name__)

# Group id -> the etag at which a list found every instance on the latest model (per process: a cold start reads).
_ALL_LATEST: dict[str, str] = {}


def forget_model_state() -> None:
    """Forget which sets were found all on their latest model: a process that runs another cluster (a replay, one
    after another) must list them afresh, as a cold start does."""
    _ALL_LATEST.clear()


def with_model_state(provider: NodeGroupProvider, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot whose Uniform groups with nodes carry their instances (and so `latest_model_applied`)."""
    with_nodes = {n.instance.group_id for n in snapshot.nodes if n.instance is not None}
    groups = []
    changed = False
    for group in snapshot.groups:
        if (group.provider == UNIFORM_SCALE_SET and not group.instances and group.id in with_nodes
                and not (group.etag and _ALL_LATEST.get(group.id) == group.etag)):
            listed = _listed(provider, group)
            changed = changed or listed is not group
            groups.append(listed)
        else:
            groups.append(group)
    return replace(snapshot, groups=tuple(groups)) if changed else snapshot


def _listed(provider: NodeGroupProvider, group: NodeGroup) -> NodeGroup:
    try:
        instances = tuple(provider.list_instances(group))
    except ComputeError as exc:
        log.warning("drift: could not list the instances of %s (%s); its nodes are not checked for model drift "
                    "this poll", group.id, exc)
        return group
    if group.etag and all(i.latest_model_applied is not False for i in instances):
        _ALL_LATEST[group.id] = group.etag
    else:
        _ALL_LATEST.pop(group.id, None)
    return replace(group, instances=instances)
