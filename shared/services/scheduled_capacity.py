"""Scheduled capacity in the polls: the groups' active windows (SCHEDULED_CAPACITY and each group's tag
`autoscaler-scheduled-capacity`) as raised minimums and standby counts.

The pending poll grows a group below its active window's minimum (an increase like a load-driven one,
within the cluster's limits and MAX_NODES_PER_SCALE_UP, never for a group in backoff); both polls plan on
groups whose `min_size` is the window's, so scale-down keeps them there (engine.scheduled_capacity). A group
whose tag is malformed keeps its SCHEDULED_CAPACITY windows; the error naming the group and the tag is logged
each poll, as a load-driven group's malformed tags are.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime

from shared.domain import ClusterSnapshot, NodeGroup
from shared.engine.limits import allowed_target
from shared.engine.scheduled_capacity import (
    TAG_SCHEDULED_CAPACITY,
    ActiveWindow,
    ScheduledIncrease,
    WindowError,
    active_windows,
    parse_tag_windows,
    scheduled_increases,
    with_scheduled_minimums,
)
from shared.settings import Settings

log = logging.getLogger(__name__)


def with_windows(settings: Settings, snapshot: ClusterSnapshot, *,
                 now: datetime) -> tuple[ClusterSnapshot, dict[str, ActiveWindow]]:
    """The snapshot with each group's minimum raised to its active window's, and the active windows."""
    for group_id, problem in tag_window_problems(snapshot.groups).items():
        log.error("scheduled-capacity tag of group %s ignored: %s", group_id, problem)
    if not settings.scheduled_capacity and not any(TAG_SCHEDULED_CAPACITY in g.tags for g in snapshot.groups):
        return snapshot, {}
    active = active_windows(snapshot.groups, settings.scheduled_capacity, now=now)
    if not active:
        return snapshot, active
    return replace(snapshot, groups=with_scheduled_minimums(snapshot.groups, active)), active


def tag_window_problems(groups: Collection[NodeGroup]) -> dict[str, str]:
    """By group id, why the group's scheduled-capacity tag cannot be read (its windows are then left out)."""
    problems = {}
    for group in groups:
        try:
            parse_tag_windows(group)
        except WindowError as exc:
            problems[group.id] = str(exc)
    return problems


def with_window_min(settings: Settings, group: NodeGroup, *, now: datetime) -> NodeGroup:
    """The group with its minimum raised by its active window, if any (the executor's last check)."""
    active = active_windows((group,), settings.scheduled_capacity, now=now)
    return with_scheduled_minimums((group,), active)[0]


def plan_scheduled_increases(settings: Settings, snapshot: ClusterSnapshot, active: Mapping[str, ActiveWindow], *,
                             unavailable: Collection[str]) -> tuple[ScheduledIncrease, ...]:
    """The increases that bring groups up to their windows' minimums, within the cluster's limits."""
    found = []
    for increase in scheduled_increases(snapshot.groups, active):
        if increase.group_id in unavailable:
            log.info("group %s not grown to its %s now: in backoff", increase.group_id, increase.why)
            continue
        target, limit = allowed_target(snapshot, increase.group_id, increase.new_target,
                                       limits=settings.cluster_limits,
                                       max_nodes_per_scale_up=settings.max_nodes_per_scale_up)
        if target > increase.current_target:
            found.append(replace(increase, new_target=target))
        else:
            log.info("group %s not grown to its %s now: %s", increase.group_id, increase.why, limit)
    return tuple(found)
