"""GPU nodes whose device plugin never reported: told to the operator, once per poll and per node.

The snapshot already presents a GPU node without allocatable GPUs as not Ready (engine.gpu_readiness.as_capacity,
applied by services.observe), so the scale-up planner waits for it as a node on its way, a ProvisionTimeout
backs its group off after MAX_NODE_PROVISION_TIME (its pods are then planned elsewhere), and scale-down removes it
on the unready clock (SCALE_DOWN_UNREADY_TIME) like any NotReady node. What is left here is saying so: a held-back
node older than MAX_NODE_PROVISION_TIME gets a Warning event `GPUNotReady`, a warning log line and the gauge
`vmss_autoscaler_gpu_not_ready_nodes`.

`boot_holds` gives the boot measurement (services.pending) what it needs to measure a GPU group's boots to the
point its nodes became usable, not to their registration.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from shared import telemetry
from shared.domain import ClusterSnapshot
from shared.engine.gpu_readiness import expected_gpus, gpu_template, held_back, overdue, template_of
from shared.ports import ClusterEvent, Ports
from shared.settings import Settings

log = logging.getLogger(__name__)

GPU_NOT_READY_REASON = "GPUNotReady"


@dataclass(frozen=True, slots=True)
class BootHold:
    """engine.idle.measure_boots' options for a GPU group: its nodes not usable yet, and this poll's time."""

    not_yet: tuple[datetime, ...]  # when the group's nodes that are not usable (not Ready, or no GPUs yet) registered
    usable_at: datetime


def boot_holds(settings: Settings, snapshot: ClusterSnapshot, *, now: datetime) -> Mapping[str, BootHold]:
    """By group id, for every group of GPU nodes (its template, or a node held back for its GPUs, says so):
    what the boot measurement needs to measure to the point a node became usable. Empty with
    GPU_READINESS=false: boots are then measured to registration, as for any group."""
    if not settings.gpu_readiness:
        return {}
    gpu_groups = {g.id for g in snapshot.groups if gpu_template(snapshot.templates.get(g.id))}
    gpu_groups |= {n.instance.group_id for n in snapshot.nodes if n.instance is not None and held_back(n)}
    not_yet: dict[str, list[datetime]] = {group_id: [] for group_id in gpu_groups}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None and ref.group_id in not_yet and not node.ready and not node.is_being_deleted:
            not_yet[ref.group_id].append(node.created_at)
    return {group_id: BootHold(tuple(times), now) for group_id, times in not_yet.items()}


def report_overdue(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, *, now: datetime) -> tuple[str, ...]:
    """Report the GPU nodes Ready for longer than MAX_NODE_PROVISION_TIME since creation without their GPUs;
    returns their names. Nothing with GPU_READINESS=false (no node is held back then)."""
    if not settings.gpu_readiness:
        return ()
    late = overdue(snapshot.nodes, now=now, give_up=settings.max_node_provision_time)
    for node in late:
        age = now - node.created_at
        expected = expected_gpus(node, template_of(snapshot, node))
        message = (f"node is Ready but none of its {expected} GPU(s) is allocatable {int(age.total_seconds())}s after "
                   f"it was created (MAX_NODE_PROVISION_TIME {int(settings.max_node_provision_time.total_seconds())}s):"
                   " the GPU driver or device plugin has not reported; it is removed as an unready node")
        log.warning("node %s: %s", node.name, message, extra={"node": node.name})
        ports.events.emit(ClusterEvent("", "Node", node.name, "", GPU_NOT_READY_REASON, message, now, "Warning"))
    telemetry.record_gpu_not_ready(len(late))
    return tuple(node.name for node in late)
