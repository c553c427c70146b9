"""Which instances should be protected from scale-in: those whose node runs batch work.

Pure module, no side effects. Anything but us that shrinks a scale set (a manual capacity decrease, Azure
Monitor autoscale, a script) lets Azure pick the instances, and it may pick a node half-way through a Job.
VMSS instance protection (`protectionPolicy.protectFromScaleIn`) makes Azure skip an instance on such a
scale-in; a delete naming the instance (our own removals) still deletes it. So a node running a pod that a
drain would wait for (`drainability.Disposition.WAIT`: a Job's pod or one BATCH_POD_SELECTOR selects, while
BATCH_PROTECTION is on; `safe-to-evict: on-completion`) is protected, and its protection lifted once it is idle.

Writes are frugal because ARM budgets them (VMSS VM updates: 4 a minute per resource, and the scale set's own
buckets may be charged too: unverified): only a change is written, never more than `max_writes_per_group`
per group per poll, protections before lifts; the rest waits for the next poll (`ProtectionPlan.deferred`).

An instance protected from scale-set actions is an operator's choice (it implies scale-in protection, and ARM
refuses lifting the one without the other): never changed. An instance whose protection was not read, or
with no node (still booting, or its node gone), is not lifted: nothing says the protection is ours to lift.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.domain import Instance, Node, Pod
from shared.engine.drainability import Disposition, DrainRules, classify

# Per group and poll (a minute by default). A VMSS VM update draws on that VM's update bucket (4 a minute), and
# perhaps on the scale set's (4 a minute, shared with our own capacity changes): two leave room for those.
MAX_WRITES_PER_GROUP = 2


@dataclass(frozen=True, slots=True)
class ProtectionChange:
    group_id: str
    instance_id: str
    node: str
    protect: bool  # True: protect from scale-in; False: lift the protection


@dataclass(frozen=True, slots=True)
class ProtectionPlan:
    changes: tuple[ProtectionChange, ...] = ()
    deferred: Mapping[str, int] = field(default_factory=dict)  # by group: changes left for a later poll (budget)


def busy_nodes(pods: Iterable[Pod], rules: DrainRules, *, now: datetime) -> frozenset[str]:
    """Names of the nodes running a pod that a drain would wait for (batch work)."""
    return frozenset(
        pod.node_name for pod in pods
        if pod.node_name and not pod.is_finished and classify(pod, rules, now=now).disposition is Disposition.WAIT
    )


def plan_protection(
    nodes: Sequence[Node], pods: Iterable[Pod], instances: Mapping[str, Sequence[Instance]], rules: DrainRules, *,
    now: datetime, max_writes_per_group: int = MAX_WRITES_PER_GROUP,
) -> ProtectionPlan:
    """The protection writes for the groups in `instances` (group id -> its listed instances), within the budget."""
    if max_writes_per_group < 0:
        raise ValueError(f"max_writes_per_group must be at least 0, not {max_writes_per_group}")
    busy = busy_nodes(pods, rules, now=now)
    node_of: dict[tuple[str, str], str] = {
        (ref.group_id, ref.instance_id): node.name for node in nodes if (ref := node.instance) is not None
    }
    changes: list[ProtectionChange] = []
    deferred: dict[str, int] = {}
    for group_id in sorted(instances):
        wanted = [c for inst in sorted(instances[group_id], key=lambda i: (len(i.instance_id), i.instance_id))
                  if (c := _change(group_id, inst, node_of.get((group_id, inst.instance_id)), busy)) is not None]
        wanted.sort(key=lambda c: not c.protect)  # a busy node at risk before an idle one's lift (stable sort)
        changes.extend(wanted[:max_writes_per_group])
        if len(wanted) > max_writes_per_group:
            deferred[group_id] = len(wanted) - max_writes_per_group
    return ProtectionPlan(tuple(changes), deferred)


def _change(group_id: str, inst: Instance, node: str | None, busy: frozenset[str]) -> ProtectionChange | None:
    if inst.deleting or inst.protected_from_scale_set_actions or node is None:
        return None
    if node in busy:
        return None if inst.protected_from_scale_in is True else ProtectionChange(group_id, inst.instance_id, node, True)
    if inst.protected_from_scale_in is True:
        return ProtectionChange(group_id, inst.instance_id, node, False)
    return None
