"""CapacityBuffers in the polls: read and resolve them, hand their placeholder pods to the planners, write status.

The pending poll plans the placeholders after every real pending pod (`ScaleUpOptions.after`) and writes each
buffer's status when it changed; the utilisation poll keeps their room (`keep_room`). Placeholders exist only in
memory. A cluster without the CRD (the list answers 404) has the feature off: logged once per process. A buffer
that cannot be read or resolved is reported in its own status and skipped; a failed read or write of buffers is
logged and never stops the poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from shared.domain import BufferStatus, BufferTemplate, CapacityBuffer, ClusterSnapshot, Pod
from shared.engine.buffers import (
    ResolvedBuffer,
    bound_placeholders,
    buffer_of,
    buffer_status,
    placeholders,
    ready_counts,
    resolve,
    status_changed,
)
from shared.engine.scale_up import ScaleUpPlan
from shared.ports import ClusterError, ClusterEvent, Ports
from shared.services.optional_crds import OptionalCrd

log = logging.getLogger(__name__)

_CRD = OptionalCrd("capacitybuffers.autoscaling.x-k8s.io", "capacity buffers")


@dataclass(frozen=True, slots=True)
class Buffers:
    """This poll's buffers, resolved, and the placeholder pods of those we provision."""

    resolved: tuple[ResolvedBuffer, ...] = ()
    pods: tuple[Pod, ...] = ()

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(pod.key for pod in self.pods)

    def with_placeholders(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        return replace(snapshot, pods=(*snapshot.pods, *self.pods)) if self.pods else snapshot


def read_buffers(ports: Ports, *, now: datetime) -> Buffers:
    """Every buffer, resolved (its pod shape and its workload's replicas read), and the placeholders."""
    listed = _CRD.read(ports.cluster.list_capacity_buffers)
    if listed is None:
        return Buffers()
    shapes: dict[tuple[str, str, str, str], BufferTemplate | None] = {}
    resolved = tuple(_resolve(ports, buffer, shapes) for buffer in listed)
    return Buffers(resolved, placeholders(resolved, now=now))


def _resolve(ports: Ports, buffer: CapacityBuffer,
             shapes: dict[tuple[str, str, str, str], BufferTemplate | None]) -> ResolvedBuffer:
    if buffer.problem or (buffer.pod_template is None) == (buffer.scalable is None):
        return resolve(buffer, None, scalable_replicas=None)
    ref = buffer.scalable
    kind, group, name = ("PodTemplate", "", buffer.pod_template) if ref is None else (ref.kind, ref.api_group, ref.name)
    try:
        key = (buffer.namespace, kind, group, name or "")
        if key not in shapes:
            shapes[key] = ports.cluster.get_pod_template(buffer.namespace, name or "", kind=kind, api_group=group)
        template = shapes[key]
        replicas = (None if ref is None or buffer.percentage is None or template is None
                    else ports.cluster.get_scale(buffer.namespace, ref.name, kind=ref.kind, api_group=ref.api_group))
    except (ClusterError, ValueError) as exc:
        return resolve(replace(buffer, problem=f"{kind} {name}: {exc}"), None, scalable_replicas=None)
    return resolve(buffer, template, scalable_replicas=replicas)


def scaling_up_for(plan: ScaleUpPlan) -> frozenset[str]:
    """Buffers (namespace/name) some of whose chunks this plan asks new nodes for."""
    return frozenset(b for increase in plan.increases for key in increase.pods if (b := buffer_of(key)) is not None)


def statuses(buffers: Buffers, placements: Mapping[str, Sequence[str]], plan: ScaleUpPlan, *,
             now: datetime) -> dict[str, BufferStatus]:
    """Each buffer's status after this poll's plan: `placements` are its existing-node placements."""
    ready = ready_counts(placements)
    growing = scaling_up_for(plan)
    return {one.buffer.key: buffer_status(one, ready=ready.get(one.buffer.key, 0),
                                          scaling_up=one.buffer.key in growing, now=now)
            for one in buffers.resolved}


def write_statuses(ports: Ports, buffers: Buffers, computed: Mapping[str, BufferStatus], *, dry_run: bool) -> int:
    """Write the statuses that changed (none otherwise: no write per poll); how many were written."""
    written = 0
    for one in buffers.resolved:
        new = computed[one.buffer.key]
        if not status_changed(one.buffer.status, new) or dry_run:
            continue
        try:
            ports.cluster.update_capacity_buffer_status(one.buffer.namespace, one.buffer.name, status=new)
        except ClusterError as exc:
            log.warning("capacity buffer %s: status not written (%s); the next poll tries again", one.buffer.key, exc)
            continue
        written += 1
        log.info("capacity buffer %s: replicas=%s ready=%s %s", one.buffer.key, new.replicas, new.ready_replicas,
                 ", ".join(f"{c.type}={c.status}({c.reason})" for c in new.conditions))
    return written


def real_pod_events(events: Sequence[ClusterEvent], plan: ScaleUpPlan, *, now: datetime) -> list[ClusterEvent]:
    """Pod events without the placeholders' (they are no pods), and one TriggeredScaleUp per buffer instead."""
    kept = [e for e in events if not (e.kind == "Pod" and buffer_of(f"{e.namespace}/{e.name}") is not None)]
    for increase in plan.increases:
        counts: dict[str, int] = {}
        for key in increase.pods:
            if (buffer := buffer_of(key)) is not None:
                counts[buffer] = counts.get(buffer, 0) + 1
        for buffer, count in sorted(counts.items()):
            namespace, _, name = buffer.partition("/")
            kept.append(ClusterEvent(namespace, "CapacityBuffer", name, "", "TriggeredScaleUp",
                                     f"buffer triggered scale-up for {count} chunk(s): [{{{increase.group_id} "
                                     f"{increase.current_target}->{increase.new_target}}}]", now))
    return kept


def status_lines(computed: Mapping[str, BufferStatus]) -> dict[str, dict[str, object]]:
    """The status ConfigMap's and `plan`'s view: per buffer, replicas, ready and the conditions."""
    return {key: {"replicas": status.replicas, "ready": status.ready_replicas,
                  "conditions": {c.type: f"{c.status} ({c.reason})" for c in status.conditions}}
            for key, status in sorted(computed.items())}


def keep_room(ports: Ports, snapshot: ClusterSnapshot,
              placements_of: Callable[[ClusterSnapshot, frozenset[str]], Mapping[str, tuple[str, ...]]], *,
              now: datetime) -> tuple[ClusterSnapshot, Mapping[str, tuple[str, ...]] | None]:
    """The utilisation poll's view with the buffers' room kept: the snapshot with the placeholders that fit Ready
    nodes bound there (load no moved pod may take), and the pending placements computed with the placeholders
    planned after the real pods (the nodes they hold are kept). (snapshot, None) when there is no buffer.
    `placements_of(snapshot, after)`: the pending poll's `pending_placements` on that snapshot."""
    buffers = read_buffers(ports, now=now)
    if not buffers.pods:
        return snapshot, None
    placements = placements_of(buffers.with_placeholders(snapshot), buffers.keys)
    bound = bound_placeholders(buffers.pods, placements)
    return replace(snapshot, pods=(*snapshot.pods, *bound)), placements
