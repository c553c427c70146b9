"""The pending-pods poll: observe, plan scale-up, enqueue one action per group to grow."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from shared.actions import new_scale_up
from shared.engine.backoff import backoff_reason
from shared.engine.scale_up import ScaleUpOptions, ScaleUpPlan, pending_pods, plan_scale_up
from shared.ports import Ports
from shared.services.events import scale_up_events
from shared.services.observe import observe_or_skip
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PendingPollResult:
    pending: int
    plan: ScaleUpPlan
    enqueued: tuple[str, ...]  # action ids


def run_pending_poll(ports: Ports, settings: Settings, *, now: datetime) -> PendingPollResult:
    snapshot = observe_or_skip(ports, now=now)
    if snapshot is None:
        return PendingPollResult(pending=0, plan=ScaleUpPlan(), enqueued=())
    backed_off = {}
    for group in snapshot.groups:
        reason = backoff_reason(ports.state.get_group(group.id), now=now)
        if reason:
            backed_off[group.id] = reason
            log.info("group %s: %s", group.id, reason)
    # A group in backoff keeps what it has and is asked for nothing more, so pods go elsewhere now.
    snapshot = replace(snapshot, groups=tuple(
        replace(g, max_size=min(g.max_size, g.target_size)) if g.id in backed_off else g for g in snapshot.groups
    ))
    plan = plan_scale_up(snapshot, options=ScaleUpOptions(max_nodes_per_scale_up=settings.max_nodes_per_scale_up))
    enqueued = []
    for increase in plan.increases:
        # The poll time makes the id unique per decision; two polls deciding the same
        # increase are reconciled by the executor, which skips a group already at its target.
        action_id = f"scale-up:{increase.group_id}:{increase.new_target}:{now:%Y%m%dT%H%M%SZ}"
        ports.queue.send(
            new_scale_up(
                action_id=action_id,
                group=increase.group_id,
                target_size=increase.new_target,
                now=now,
                ttl=settings.action_ttl,
                reason=f"{len(increase.pods)} pending pod(s)",
            )
        )
        enqueued.append(action_id)
        log.info(
            "scale-up decided: group=%s %d -> %d for %d pending pod(s) action=%s",
            increase.group_id, increase.current_target, increase.new_target, len(increase.pods), action_id,
        )
    for pod, reason in plan.unplaceable.items():
        log.info("pod %s fits no node group: %s", pod, reason)
    for event in scale_up_events(snapshot, plan, now=now):
        ports.events.emit(event)
    return PendingPollResult(pending=len(pending_pods(snapshot)), plan=plan, enqueued=tuple(enqueued))
