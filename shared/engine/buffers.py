"""CapacityBuffers: how many chunks of spare room each buffer asks for, its placeholder pods, and its status.

Pure: no SDK, no I/O, `now` passed in. A buffer (autoscaling.x-k8s.io/v1beta1, as cluster-autoscaler reads it)
asks for `replicas` chunks shaped like one pod: its PodTemplate's, or the pods of the workload its scalableRef
names. The chunk count follows the upstream API's rule: the larger of `replicas` and `percentage` of the
workload's current replicas (rounded up), capped by `limits` on the buffer's total requests; with neither set, as
many chunks as fit the limits. The chunks become placeholder pods that exist only in the planner's memory: planned
after every real pending pod (`ScaleUpOptions.after`), so they never take room a real pod needs, and kept as load
by scale-down so the room they hold stays. A chunk is *ready* when its placeholder fits a Ready node's free room.

Statuses are what cluster-autoscaler writes (replicas, podTemplateRef, podTemplateGeneration, provisioningStrategy
and the conditions ReadyForProvisioning, Provisioning, LimitedByQuotas), plus the proposal's readyReplicas; a
condition keeps its transition time while its status holds, so an unchanged buffer is never written again.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from shared.domain import (
    ACTIVE_CAPACITY,
    BufferCondition,
    BufferStatus,
    BufferTemplate,
    CapacityBuffer,
    OwnerRef,
    Pod,
    Resources,
)

READY_FOR_PROVISIONING = "ReadyForProvisioning"
PROVISIONING = "Provisioning"
LIMITED_BY_QUOTAS = "LimitedByQuotas"
# Placeholder pods are named `<prefix><buffer>:<chunk>`: a colon is not allowed in a pod's name, so no real pod
# ever has one of these keys.
PLACEHOLDER_PREFIX = "capacitybuffer:"
PLACEHOLDER_OWNER = "CapacityBuffer"


@dataclass(frozen=True, slots=True)
class ResolvedBuffer:
    """A buffer with its pod shape read and its chunk count decided.

    `replicas`: the chunks to plan (0 when the buffer cannot be provisioned); `wanted`: before the limits;
    `problem`: why it is not ready for provisioning ("" when it is); `limited`: why the limits cut it ("" when not).
    """

    buffer: CapacityBuffer
    template: BufferTemplate | None
    replicas: int
    wanted: int
    problem: str = ""
    limited: str = ""
    ours: bool = True  # False: another provisioning strategy, left to whoever implements it


def _request_of(requests: Resources, name: str) -> int:
    if name == "cpu":
        return requests.cpu_milli
    if name == "memory":
        return requests.memory_bytes
    if name == "pods":
        return 1  # one chunk is one pod
    if name == "ephemeral-storage":
        return requests.ephemeral_storage_bytes
    return dict(requests.extended).get(name, 0)


def chunks_within(limits: Mapping[str, int], requests: Resources) -> tuple[int | None, str]:
    """How many chunks of `requests` the limits allow (None: no limit applies) and the resource that binds."""
    allowed: int | None = None
    binding = ""
    for name, amount in sorted(limits.items()):
        per_chunk = _request_of(requests, name)
        if per_chunk <= 0:
            continue  # a chunk that asks nothing of this resource is not limited by it
        fits = max(amount, 0) // per_chunk
        if allowed is None or fits < allowed:
            allowed, binding = fits, name
    return allowed, binding


def resolve(buffer: CapacityBuffer, template: BufferTemplate | None, *, scalable_replicas: int | None
            ) -> ResolvedBuffer:
    """The buffer's chunk count, or why it has none. `scalable_replicas`: the scalableRef's current replicas (its
    /scale), None when it has no scalableRef or the object is missing."""
    if buffer.strategy != ACTIVE_CAPACITY:
        return ResolvedBuffer(buffer, None, 0, 0, problem=f"provisioningStrategy {buffer.strategy!r} is not ours "
                              f"(we provision {ACTIVE_CAPACITY!r})", ours=False)
    if buffer.problem:
        return ResolvedBuffer(buffer, None, 0, 0, problem=buffer.problem)
    if (buffer.pod_template is None) == (buffer.scalable is None):
        return ResolvedBuffer(buffer, None, 0, 0, problem="exactly one of podTemplateRef and scalableRef must be set")
    if template is None:
        what = (f"PodTemplate {buffer.pod_template}" if buffer.pod_template is not None
                else f"{buffer.scalable.kind} {buffer.scalable.name}")  # type: ignore[union-attr]
        return ResolvedBuffer(buffer, None, 0, 0, problem=f"{what} not found in namespace {buffer.namespace}")
    counts = []
    if buffer.replicas is not None:
        counts.append(max(buffer.replicas, 0))
    if buffer.percentage is not None and buffer.scalable is not None:
        if scalable_replicas is None:
            return ResolvedBuffer(buffer, template, 0, 0, problem=f"{buffer.scalable.kind} {buffer.scalable.name} "
                                  "has no /scale to take a percentage of")
        counts.append(math.ceil(max(buffer.percentage, 0) * max(scalable_replicas, 0) / 100))
    allowed, binding = chunks_within(buffer.limits, template.pod.requests)
    if not counts:
        if allowed is None:
            return ResolvedBuffer(buffer, template, 0, 0, problem="none of replicas, percentage and limits is set "
                                  "(or the limits name nothing the pod requests)")
        return ResolvedBuffer(buffer, template, allowed, allowed)
    wanted = max(counts)
    if allowed is not None and allowed < wanted:
        return ResolvedBuffer(buffer, template, allowed, wanted,
                              limited=f"limits.{binding} allow {allowed} of {wanted} chunk(s)")
    return ResolvedBuffer(buffer, template, wanted, wanted)


def placeholder_name(buffer: CapacityBuffer, chunk: int) -> str:
    return f"{PLACEHOLDER_PREFIX}{buffer.name}:{chunk}"


def buffer_of(pod_key: str) -> str | None:
    """The buffer (namespace/name) whose placeholder this pod key is; None for a real pod."""
    namespace, _, name = pod_key.partition("/")
    if not name.startswith(PLACEHOLDER_PREFIX):
        return None
    buffer, _, _ = name[len(PLACEHOLDER_PREFIX):].rpartition(":")
    return f"{namespace}/{buffer}"


def placeholders(resolved: Iterable[ResolvedBuffer], *, now: datetime) -> tuple[Pod, ...]:
    """The chunks as pending pods in memory: the template's shape and constraints, unschedulable, never bound."""
    pods = []
    for one in resolved:
        if one.template is None or one.replicas <= 0:
            continue
        shape = one.template.pod
        for chunk in range(one.replicas):
            pods.append(replace(
                shape, namespace=one.buffer.namespace, name=placeholder_name(one.buffer, chunk), uid="",
                created_at=now, node_name=None, phase="Pending", unschedulable=True, terminating=False,
                deleted_at=None, started_at=None, owner=OwnerRef(PLACEHOLDER_OWNER, one.buffer.name),
            ))
    return tuple(pods)


def bound_placeholders(pods: Sequence[Pod], placements: Mapping[str, Sequence[str]]) -> tuple[Pod, ...]:
    """The placeholders the scale-up simulation put in existing nodes' free room, bound there as running pods:
    scale-down then sees the room as taken and moves no other pod into it."""
    where = {key: node for node, keys in placements.items() for key in keys}
    return tuple(replace(pod, node_name=where[pod.key], phase="Running", unschedulable=False)
                 for pod in pods if pod.key in where)


def ready_counts(placements: Mapping[str, Sequence[str]]) -> Counter[str]:
    """Buffer (namespace/name) -> its chunks that fit Ready nodes' free room (scale_up.existing_placements)."""
    counts: Counter[str] = Counter()
    for keys in placements.values():
        for key in keys:
            buffer = buffer_of(key)
            if buffer is not None:
                counts[buffer] += 1
    return counts


def _condition(previous: BufferStatus, type_: str, status: str, reason: str, message: str, *, now: datetime,
               generation: int) -> BufferCondition:
    """A condition that keeps its transition time while its status holds (metav1.Condition's rule)."""
    old = next((c for c in previous.conditions if c.type == type_), None)
    since = old.since if old is not None and old.status == status and old.since is not None else now
    return BufferCondition(type_, status, reason, message, since, generation)


def buffer_status(resolved: ResolvedBuffer, *, ready: int, scaling_up: bool, now: datetime) -> BufferStatus:
    """The status to write: CA's fields and conditions, readyReplicas = chunks in Ready nodes' free room.

    `scaling_up`: this poll asked for nodes for some of the buffer's chunks.
    """
    buffer, previous = resolved.buffer, resolved.buffer.status
    generation = buffer.generation
    if not resolved.ours:
        # Another autoscaler's strategy: say so once, and leave its fields to it.
        condition = _condition(previous, PROVISIONING, "False", "StrategyNotSupported", resolved.problem,
                               now=now, generation=generation)
        kept = tuple(c for c in previous.conditions if c.type != PROVISIONING)
        return replace(previous, conditions=(*kept, condition))
    conditions = []
    if resolved.problem:
        conditions.append(_condition(previous, READY_FOR_PROVISIONING, "False", "BufferInvalid", resolved.problem,
                                     now=now, generation=generation))
        return BufferStatus(replicas=0, ready_replicas=0, strategy=buffer.strategy, conditions=tuple(conditions))
    template = resolved.template
    conditions.append(_condition(previous, READY_FOR_PROVISIONING, "True", "AttributesSetSuccessfully",
                                 f"{resolved.replicas} chunk(s) shaped like {template.name if template else '?'}",
                                 now=now, generation=generation))
    ready = min(ready, resolved.replicas)
    if ready >= resolved.replicas:
        conditions.append(_condition(previous, PROVISIONING, "True", "CapacityReady",
                                     f"{ready}/{resolved.replicas} chunk(s) fit Ready nodes",
                                     now=now, generation=generation))
    elif scaling_up:
        conditions.append(_condition(previous, PROVISIONING, "True", "ScaleUpTriggered",
                                     f"{ready}/{resolved.replicas} chunk(s) ready; nodes asked for the rest",
                                     now=now, generation=generation))
    else:
        conditions.append(_condition(previous, PROVISIONING, "False", "CapacityPending",
                                     f"{ready}/{resolved.replicas} chunk(s) ready; the rest wait for nodes "
                                     "on their way or fit no node group",
                                     now=now, generation=generation))
    conditions.append(_condition(previous, LIMITED_BY_QUOTAS, "True" if resolved.limited else "False",
                                 "LimitsExceeded" if resolved.limited else "WithinLimits",
                                 resolved.limited or "the buffer's limits allow every chunk asked for",
                                 now=now, generation=generation))
    return BufferStatus(
        replicas=resolved.replicas, ready_replicas=ready,
        pod_template=template.name if template is not None and buffer.pod_template is not None else None,
        pod_template_generation=template.generation if template is not None else None,
        strategy=buffer.strategy, conditions=tuple(conditions),
    )


def status_changed(old: BufferStatus, new: BufferStatus) -> bool:
    """Whether writing `new` over `old` changes anything (transition times follow status, so they are compared)."""
    return old != new
