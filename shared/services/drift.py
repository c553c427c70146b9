"""Drift in the services: the instance reads that model drift needs, and no more.

A node drifts by model when its instance reports `latestModelApplied: false` (engine.drift), which only the VMSS
VMs list of a Uniform scale set carries (a Flexible member is a plain VM without the field; an AKS pool's
machines neither, and its drift is the node image, read from the pool and the node's label). Node mapping lists
instances only when some node needs them (services.mapping), so a cluster of providerID-mapped nodes would never
see a stale instance: `with_model_state` lists the instances of its Uniform groups that were not listed this
poll, one VMSS VMs list per group, only while DRIFT_REPLACEMENT is on. A failed list leaves the group as it was
(its nodes are simply not drifted by model this poll), never the poll.

Reads are frugal: a model change writes the scale set, so its etag moves. Once a list found every instance on the
latest model, the set is not listed again (by this provider, i.e. in this process) until its etag changes: a steady cluster pays no read.
A set whose etag keeps moving (every resize moves it) or that has drifted is listed at most once per
LIST_INTERVAL (cluster-autoscaler's instance cache refresh); in between, the last list stands: an instance created
since is on the latest model by construction, one deleted since has no node left to drift. A busy set thus costs
one VMSS VMs list per interval, not one per poll (one per poll made the replay's busiest sets run out of ARM's
read budget), and a model change is seen within the interval.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.domain import UNIFORM_SCALE_SET, ClusterSnapshot, Instance, NodeGroup
from shared.ports import ComputeError, NodeGroupProvider

log = logging.getLogger(__name__)

LIST_INTERVAL = timedelta(minutes=5)

@dataclass
class _Reads:
    """What one provider's earlier lists found (per process: a cold start reads). `all_latest`: group id -> the etag
    at which a list found every instance on the latest model; `last`: group id -> when it was last listed, and
    what the list found."""

    all_latest: dict[str, str] = field(default_factory=dict)
    last: dict[str, tuple[datetime, tuple[Instance, ...]]] = field(default_factory=dict)


# Per provider, as the rotation of services.utilization is per state store: a process runs one provider (the
# composition root's), and a replay's every run its own, so no run inherits another's reads.
_READS: weakref.WeakKeyDictionary[object, _Reads] = weakref.WeakKeyDictionary()


def with_model_state(provider: NodeGroupProvider, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot whose Uniform groups with nodes carry their instances (and so `latest_model_applied`)."""
    reads = _reads_of(provider)
    with_nodes = {n.instance.group_id for n in snapshot.nodes if n.instance is not None}
    groups = []
    changed = False
    for group in snapshot.groups:
        if (group.provider == UNIFORM_SCALE_SET and not group.instances and group.id in with_nodes
                and not (group.etag and reads.all_latest.get(group.id) == group.etag)):
            listed = _recent(reads, group, snapshot.taken_at) or _listed(provider, reads, group, now=snapshot.taken_at)
            changed = changed or listed is not group
            groups.append(listed)
        else:
            groups.append(group)
    return replace(snapshot, groups=tuple(groups)) if changed else snapshot


def _reads_of(provider: NodeGroupProvider) -> _Reads:
    """The provider's reads; fresh ones (nothing remembered) for a provider that cannot be weakly referenced."""
    try:
        return _READS.setdefault(provider, _Reads())
    except TypeError:
        return _Reads()


def _recent(reads: _Reads, group: NodeGroup, now: datetime) -> NodeGroup | None:
    """The group with the instances its last list found, if that list is younger than LIST_INTERVAL."""
    last = reads.last.get(group.id)
    if last is None or not timedelta(0) <= now - last[0] < LIST_INTERVAL:
        return None
    return replace(group, instances=last[1])


def _listed(provider: NodeGroupProvider, reads: _Reads, group: NodeGroup, *, now: datetime) -> NodeGroup:
    try:
        instances = tuple(provider.list_instances(group))
    except ComputeError as exc:
        log.warning("drift: could not list the instances of %s (%s); its nodes are not checked for model drift "
                    "this poll", group.id, exc)
        return group
    reads.last[group.id] = (now, instances)
    if group.etag and all(i.latest_model_applied is not False for i in instances):
        reads.all_latest[group.id] = group.etag
    else:
        reads.all_latest.pop(group.id, None)
    return replace(group, instances=instances)
