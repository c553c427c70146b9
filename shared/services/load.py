"""The load-driven part of the pending poll: measure the load-driven groups and decide how far they grow.

Reads only when some group is load-driven: measured CPU of those groups' nodes (USAGE_SOURCE) and,
when a group is sized by it, the backlog queue's length. Either may be unavailable: the group then
follows what is left (CPU alone, the backlog alone, or nothing this poll), and the log says so.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime

from shared.domain import ClusterSnapshot, GroupState
from shared.engine.limits import allowed_target
from shared.engine.load import LoadIncrease, LoadPlan, LoadRule, load_rules, plan_load
from shared.ports import Ports, UsageUnavailable
from shared.services.observe import measured_cpu
from shared.settings import Settings

log = logging.getLogger(__name__)


def plan_load_increases(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: Mapping[str, GroupState],
                        *, unavailable: Collection[str], now: datetime) -> LoadPlan:
    """The load-driven groups' increases, within the cluster's limits; groups in backoff (`unavailable`) wait."""
    default = LoadRule(settings.load_scale_up_cpu, settings.load_backlog_per_node)
    rules, problems = load_rules(snapshot.groups, named=settings.load_driven_groups, default=default)
    for group_id, problem in problems.items():
        log.error("load-driven group left alone: %s", problem)
    if not rules:
        return LoadPlan()
    measured = _measured(ports, settings, snapshot, rules, now=now)
    backlog = _backlog(ports) if any(rule.backlog_per_node for rule in rules.values()) else None
    plan = plan_load(snapshot, rules=rules, measured=measured, backlog=backlog, states=states, now=now,
                     cooldown=settings.load_scale_up_cooldown, idle_below=settings.scale_down_measured_cpu_threshold)
    increases: list[LoadIncrease] = []
    waiting = dict(plan.waiting)
    for increase in plan.increases:
        if increase.group_id in unavailable:
            waiting[increase.group_id] = f"in backoff ({increase.why})"
            continue
        target, limit = allowed_target(snapshot, increase.group_id, increase.new_target,
                                       limits=settings.cluster_limits,
                                       max_nodes_per_scale_up=settings.max_nodes_per_scale_up)
        if target > increase.current_target:
            increases.append(LoadIncrease(increase.group_id, increase.current_target, target, increase.why))
        else:
            waiting[increase.group_id] = f"{limit} ({increase.why})"
    for group_id, why in waiting.items():
        log.info("load-driven group %s not grown now: %s", group_id, why)
    return LoadPlan(tuple(increases), waiting)


def _measured(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, rules: Mapping[str, LoadRule], *,
              now: datetime) -> dict[str, float] | None:
    if ports.usage is None:
        log.warning("load-driven groups %s need USAGE_SOURCE for CPU; without it only a backlog can grow them",
                    ", ".join(sorted(rules)))
        return None
    nodes = [n for n in snapshot.nodes if (ref := n.instance) is not None and ref.group_id in rules]
    if not nodes:
        return {}
    return measured_cpu(ports, settings, nodes, now=now, without="load-driven groups follow their backlog alone")


def _backlog(ports: Ports) -> int | None:
    if ports.backlog is None:
        return None
    try:
        return ports.backlog.get_backlog()
    except UsageUnavailable as exc:
        log.warning("backlog %s unavailable: load-driven groups follow CPU alone: %s", ports.backlog.name, exc)
        return None
