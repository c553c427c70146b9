"""Drift: which nodes no longer match what their group would boot today, and which of them to replace now.

Pure module, no side effects. A node has drifted when
- its instance does not run the scale set's latest model (ARM's `latestModelApplied: false`: the image, the
  cloud-init or another part of the model changed after it was created): `model`;
- it is an AKS node whose `kubernetes.azure.com/node-image-version` label differs from the pool's node image
  version (the version the pool's new nodes get): `image`;
- NODE_MAX_AGE is set and the node is older than that (Karpenter's `expireAfter`): `age`.

A drifted node is replaced capacity first (engine.replacement): one proposal per node, asking one new node of
its own group, oldest nodes first. A drifted node with no pods to move (only DaemonSet and mirror pods, or none)
needs no new node first, as Karpenter deletes empty drifted nodes: its proposal asks none (`count` 0) and the
node is removed by the ordinary drain at once, within the Drifted budget; unless its group would fall below its
minimum size, where it asks one as any other (scale-down never takes a group below its minimum). Nodes whose removal or replacement is already under way are left out; a node
that runs batch work (or anything a drain would wait for) waits until it is done, as does one that a pod or an
annotation pins (`karpenter.sh/do-not-disrupt`, `safe-to-evict: "false"`, cluster-autoscaler's
`scale-down-disabled`): they are reported in `DriftPlan.waiting` with the reason. How many proposals proceed at
once is the disruption budgets' business (engine.disruption_budgets.admit), not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.domain import DRIFTED, ClusterSnapshot, GroupState, Node, NodeGroup, Pod
from shared.engine.drainability import DrainRules, drain_of
from shared.engine.pod_rules import is_virtual_node
from shared.engine.replacement import ReplacementProposal
from shared.engine.scale_down import node_pin

NODE_IMAGE_LABEL = "kubernetes.azure.com/node-image-version"
MODEL, IMAGE, AGE = "model", "image", "age"  # why a node drifted, in order of precedence


@dataclass(frozen=True, slots=True)
class DriftPlan:
    """Replacements to ask for this poll, and the drifted nodes that wait (node -> why)."""

    proposals: tuple[ReplacementProposal, ...] = ()
    waiting: Mapping[str, str] = field(default_factory=dict)


def drifted_nodes(snapshot: ClusterSnapshot, *, max_age: timedelta, now: datetime) -> dict[str, str]:
    """Node -> why it drifted (`model`, `image` or `age`), for the nodes of managed groups that did.

    `model` needs the groups' instances (`NodeGroup.instances`): a node whose instance was not listed, or whose
    backend does not report `latestModelApplied` (None), never drifts by model. `max_age` of zero turns ages off.
    """
    if max_age < timedelta(0):
        raise ValueError(f"max_age must not be negative, got {max_age}")
    groups = {g.id: g for g in snapshot.groups}
    drifted: dict[str, str] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or is_virtual_node(node):
            continue
        group = groups.get(ref.group_id)
        if group is None:
            continue
        why = _drift_of(node, group, ref.instance_id, max_age=max_age, now=now)
        if why:
            drifted[node.name] = why
    return drifted


def _drift_of(node: Node, group: NodeGroup, instance_id: str, *, max_age: timedelta, now: datetime) -> str:
    wanted = instance_id.lower()
    instance = next((i for i in group.instances if i.instance_id.lower() == wanted), None)
    if instance is not None and instance.latest_model_applied is False:
        return MODEL
    image = node.labels.get(NODE_IMAGE_LABEL)
    if group.node_image_version and image and image != group.node_image_version:
        return IMAGE
    # A node whose creation time is unknown (the adapter reads it as the epoch) never ages.
    if max_age and node.created_at.timestamp() > 0 and now - node.created_at > max_age:
        return AGE
    return ""


def plan_drift(snapshot: ClusterSnapshot, *, states: Mapping[str, GroupState], drifted: Mapping[str, str],
               now: datetime, drain: DrainRules) -> DriftPlan:
    """One replacement proposal per drifted node that may go now, oldest first; the others wait, with the reason.

    A proposal asks one new node of the node's own group (`to_group`, `count` 1, `detail` the drift), so the
    replacement boots on the latest model before the old node is drained; none (`count` 0) for a node with no
    pods to move while its group has room above its minimum (the module docstring). Nodes being removed, deleted or
    replaced already are neither proposed nor reported waiting: their replacement is under way.
    """
    busy = {n for s in states.values() for n in (*s.removing, *s.replacing)}
    # Room above each group's minimum for nodes removed without a new one first (its removals in flight taken).
    room = {g.id: g.running_target - len(states[g.id].removing if g.id in states else ()) - g.min_size
            for g in snapshot.groups}
    by_name = {n.name: n for n in snapshot.nodes}
    nodes = sorted((by_name[name] for name in drifted if name in by_name), key=lambda n: (n.created_at, n.name))
    pods_on: dict[str, list[Pod]] = {}  # read once: every node may drift at once (NODE_MAX_AGE)
    for pod in snapshot.pods:
        if pod.node_name in drifted and not pod.is_finished:
            pods_on.setdefault(pod.node_name, []).append(pod)
    proposals: list[ReplacementProposal] = []
    waiting: dict[str, str] = {}
    for node in nodes:
        ref = node.instance
        if ref is None or node.name in busy or node.is_being_deleted:
            continue
        why, movable = _waits_for(node, pods_on.get(node.name, []), snapshot, drain, now=now)
        if why:
            waiting[node.name] = why
            continue
        count = 1
        if not movable and room.get(ref.group_id, 0) > 0:
            count = 0  # nothing to move: removed directly, no new node first
            room[ref.group_id] -= 1
        proposals.append(ReplacementProposal(nodes=((node.name, ref.group_id),), reason=DRIFTED,
                                             to_group=ref.group_id, count=count, detail=drifted[node.name]))
    return DriftPlan(tuple(proposals), waiting)


def _waits_for(node: Node, pods: Sequence[Pod], snapshot: ClusterSnapshot, drain: DrainRules, *,
               now: datetime) -> tuple[str, bool]:
    """Why the drifted node (running `pods`) may not be replaced now ("" when it may), and whether it has pods
    to move."""
    pin = node_pin(node)
    if pin:
        return pin, True
    if not node.ready:
        return "not Ready: left to scale-down's unready rules", True
    verdict = drain_of(pods, drain, snapshot.disruption_budgets, now=now)
    if verdict.pinned_by is not None:
        return str(verdict.pinned_by), True
    if verdict.wait:
        keys = [p.key for p in verdict.wait]
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        return f"batch pods running: {', '.join(keys[:3])}{more}", True
    return "", bool(verdict.move)
