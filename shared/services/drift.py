"""Drift in the services: the instance reads that model drift needs, and no more.

A node drifts by model when its instance reports `latestModelApplied: false` (engine.drift), which only the VMSS
VMs list of a Uniform scale set carries (a Flexible member is a plain VM without the field; an AKS pool's
machines neither, and its drift is the node image, read from the pool and the node's label). Node mapping lists
instances only when some node needs them (services.mapping), so a cluster of providerID-mapped nodes would never
see a stale instance: `with_model_state` lists the instances of its Uniform groups that were not listed this
poll, one VMSS VMs list per group, only while DRIFT_REPLACEMENT is on. A failed list leaves the group as it was
(its nodes are simply not drifted by model this poll), never the poll.

Reads are frugal: a model change writes the scale set, so its etag moves. Once a list found every instance on the
latest model, the set is not listed again (in this process) until its etag changes: a steady cluster pays no read.
A set whose etag keeps moving (every resize moves it) or that has drifted is listed at most once per
LIST_INTERVAL (cluster-autoscaler's instance cache refresh); in between, the last list stands: an instance created
since is on the latest model by construction, one deleted since has no node left to drift. A busy set thus costs
one VMSS VMs list per interval, not one per poll (one per poll made the replay's busiest sets run out of ARM's
read budget), and a model change is seen within the interval.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from shared.domain import UNIFORM_SCALE_SET, ClusterSnapshot, Instance, NodeGroup
from shared.ports import ComputeError, NodeGroupProvider

log = logging.getLogger(__name__)

LIST_INTERVAL = timedelta(minutes=5)

# Group id -> the etag at which a list found every instance on the latest model (per process: a cold start reads).
_ALL_LATEST: dict[str, str] = {}
# Group id -> (when it was last listed, what the list found).
_LAST_LIST: dict[str, tuple[datetime, tuple[Instance, ...]]] = {}


def forget_model_state() -> None:
    """Forget which sets were found all on their latest model: a process that runs another cluster (a replay, one
    after another) must list them afresh, as a cold start does."""
    _ALL_LATEST.clear()
    _LAST_LIST.clear()


def with_model_state(provider: NodeGroupProvider, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot whose Uniform groups with nodes carry their instances (and so `latest_model_applied`)."""
    with_nodes = {n.instance.group_id for n in snapshot.nodes if n.instance is not None}
    groups = []
    changed = False
    for group in snapshot.groups:
        if (group.provider == UNIFORM_SCALE_SET and not group.instances and group.id in with_nodes
                and not (group.etag and _ALL_LATEST.get(group.id) == group.etag)):
            listed = _recent(group, snapshot.taken_at) or _listed(provider, group, now=snapshot.taken_at)
            changed = changed or listed is not group
            groups.append(listed)
        else:
            groups.append(group)
    return replace(snapshot, groups=tuple(groups)) if changed else snapshot


def _recent(group: NodeGroup, now: datetime) -> NodeGroup | None:
    """The group with the instances its last list found, if that list is younger than LIST_INTERVAL."""
    last = _LAST_LIST.get(group.id)
    if last is None or not timedelta(0) <= now - last[0] < LIST_INTERVAL:
        return None
    return replace(group, instances=last[1])


def _listed(provider: NodeGroupProvider, group: NodeGroup, *, now: datetime) -> NodeGroup:
    try:
        instances = tuple(provider.list_instances(group))
    except ComputeError as exc:
        log.warning("drift: could not list the instances of %s (%s); its nodes are not checked for model drift "
                    "this poll", group.id, exc)
        return group
    _LAST_LIST[group.id] = (now, instances)
    if group.etag and all(i.latest_model_applied is not False for i in instances):
        _ALL_LATEST[group.id] = group.etag
    else:
        _ALL_LATEST.pop(group.id, None)
    return replace(group, instances=instances)
