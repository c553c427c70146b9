"""The utilisation poll: track unneeded nodes in Table storage, enqueue removals that are due.

If anything cannot be observed (the Kubernetes API fails, ARM fails), the poll
raises before touching state or the queue: no scale-down happens on a partial view.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from shared.actions import new_scale_down
from shared.engine.cooldowns import ScaleDownDelays
from shared.engine.scale_down import ScaleDownOptions, ScaleDownPlan, plan_scale_down
from shared.ports import Ports
from shared.services.observe import observe_or_skip
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UtilizationPollResult:
    plan: ScaleDownPlan
    enqueued: tuple[str, ...]


def scale_down_options(settings: Settings) -> ScaleDownOptions:
    return ScaleDownOptions(
        unneeded_time=settings.scale_down_unneeded_time,
        max_parallelism=settings.max_scale_down_parallelism,
        delays=ScaleDownDelays(
            after_add=settings.scale_down_delay_after_add,
            after_delete=settings.scale_down_delay_after_delete,
            after_failure=settings.scale_down_delay_after_failure,
        ),
    )


def run_utilization_poll(ports: Ports, settings: Settings, *, now: datetime) -> UtilizationPollResult:
    if not settings.scale_down_enabled:
        return UtilizationPollResult(ScaleDownPlan(), ())
    snapshot = observe_or_skip(ports, now=now)
    if snapshot is None:
        return UtilizationPollResult(ScaleDownPlan(), ())
    previous = ports.state.list_unneeded()
    group_states = {group.id: ports.state.get_group(group.id) for group in snapshot.groups}
    plan = plan_scale_down(
        snapshot, unneeded_since=previous, group_states=group_states, now=now, options=scale_down_options(settings)
    )
    for node, since in plan.unneeded.items():
        if previous.get(node) != since:
            ports.state.set_unneeded(node, since)
    for node in previous.keys() - plan.unneeded.keys():
        ports.state.clear_unneeded(node)

    enqueued = []
    for removal in plan.removals:
        # One id per decision: a decision the executor skipped (a race with the minimum, a cooldown)
        # must not block the next one. Two live actions for one node are kept apart by the group's
        # reservation, which names the action holding the node.
        action_id = f"scale-down:{removal.node}:{now:%Y%m%dT%H%M%SZ}"
        ports.queue.send(
            new_scale_down(
                action_id=action_id,
                group=removal.group_id,
                node=removal.node,
                provider_id=removal.provider_id,
                now=now,
                ttl=settings.action_ttl,
                reason=f"empty since {removal.unneeded_since.isoformat()}",
            )
        )
        enqueued.append(action_id)
        log.info("scale-down decided: node=%s group=%s action=%s", removal.node, removal.group_id, action_id)
    for node, reason in plan.kept.items():
        log.debug("node %s kept: %s", node, reason)
    return UtilizationPollResult(plan=plan, enqueued=tuple(enqueued))
