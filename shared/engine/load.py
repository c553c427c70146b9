"""Load-driven scale-up: groups whose work no pod asks for, such as a render farm's DaemonSet.

Pure module: no I/O, no side effects, no clock (the poll passes `now`).

A DaemonSet render farm runs one worker per node that pulls frames from shared storage or a queue.
No pod ever pends, and every node looks alike by requests, so the pending-pod planner never grows
the farm. For groups the operator marks as load-driven (tag `autoscaler-load-cpu=<fraction>`, or
the group named in LOAD_DRIVEN_GROUPS), this planner grows the group from what it measures, the
way a HorizontalPodAutoscaler sizes a Deployment:

- CPU: when the group's ready nodes average more than the threshold over the usage window
  (USAGE_WINDOW), the group grows to `ceil(nodes * average / threshold)`;
- backlog (optional): with `autoscaler-load-backlog-per-node=<n>` (or LOAD_BACKLOG_PER_NODE) and a
  backlog source (LOAD_BACKLOG_QUEUE), the group grows to at least `ceil(backlog / n)` nodes,
  from zero too, which CPU cannot do;

bounded by the group's max, the cluster's limits and MAX_NODES_PER_SCALE_UP (the caller applies
those), and never while nodes asked for earlier are still booting (their load is not measured yet)
or within LOAD_SCALE_UP_COOLDOWN of the group's last scale-up. Scale-down stays with the
utilisation poll, where measured usage keeps busy nodes and removes idle ones first.

CPU cannot tell new work from the last frames of a draining farm: both keep the remaining workers
busy. So CPU does not grow a group while any of its ready nodes is idle (below the scale-down
measured threshold: a pulling worker with nothing to pull), nor while any of its nodes is being
removed (reserved by a scale-down decision, `GroupState.removing`, or tainted ToBeDeletedByClusterAutoscaler:
idle capacity the autoscaler is giving back, cordoned and so no longer among the ready nodes), nor within
LOAD_SCALE_UP_COOLDOWN of the group's last scale-down (it just had a node to spare), nor when the group is
sized by a backlog that is empty. A removal in flight thus counts as a scale-down that has happened: the
cooldown runs from the decision, not from the removal's end (its instances may leave the scale set, and
the group's size drop, well before the action records `last_scale_down`). The backlog is the signal that
knows; the docs recommend it for long frames.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, GroupState, NodeGroup

# The group tags that mark a group load-driven (Azure tag names allow no '/').
TAG_CPU = "autoscaler-load-cpu"
TAG_BACKLOG_PER_NODE = "autoscaler-load-backlog-per-node"


@dataclass(frozen=True, slots=True)
class LoadRule:
    cpu_up: float  # grow when the group's average measured CPU (0..1) is above this
    backlog_per_node: int = 0  # frames one node takes on; 0: the backlog does not size this group


@dataclass(frozen=True, slots=True)
class LoadIncrease:
    group_id: str
    current_target: int
    new_target: int
    why: str


@dataclass(frozen=True, slots=True)
class LoadPlan:
    increases: tuple[LoadIncrease, ...] = ()
    waiting: Mapping[str, str] = field(default_factory=dict)  # group id -> why it is not grown now


class LoadRuleError(ValueError):
    """A load-driven group's tags are malformed; the message names the group and tag."""


def load_rules(
    groups: Collection[NodeGroup], *, named: Collection[str], default: LoadRule
) -> tuple[dict[str, LoadRule], dict[str, str]]:
    """The load rule of each load-driven group (its tags over `default`; groups in `named` use `default`),
    and, by group id, why a group's tags could not be read (that group is left alone; the others are not)."""
    rules: dict[str, LoadRule] = {}
    problems: dict[str, str] = {}
    wanted = {n.lower() for n in named}
    for group in groups:
        cpu_tag, backlog_tag = group.tags.get(TAG_CPU), group.tags.get(TAG_BACKLOG_PER_NODE)
        if cpu_tag is None and backlog_tag is None and group.id.lower() not in wanted:
            continue
        try:
            cpu_up = default.cpu_up if cpu_tag is None else _fraction(group, cpu_tag)
            per_node = default.backlog_per_node if backlog_tag is None else _count(group, backlog_tag)
        except LoadRuleError as exc:
            problems[group.id] = str(exc)
            continue
        rules[group.id] = LoadRule(cpu_up, per_node)
    return rules, problems


def _fraction(group: NodeGroup, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise LoadRuleError(f"group {group.id}: tag {TAG_CPU}={text!r} is not a number (0.7 for 70%)") from None
    if not 0 < value <= 1:
        raise LoadRuleError(f"group {group.id}: tag {TAG_CPU}={text!r} must be a fraction above 0 and at most 1")
    return value


def _count(group: NodeGroup, text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise LoadRuleError(f"group {group.id}: tag {TAG_BACKLOG_PER_NODE}={text!r} must be a whole number from 1")
    return int(text)


def plan_load(
    snapshot: ClusterSnapshot,
    *,
    rules: Mapping[str, LoadRule],
    measured: Mapping[str, float] | None,
    backlog: int | None,
    states: Mapping[str, GroupState],
    now: datetime,
    cooldown: timedelta,
    idle_below: float = 0.5,
) -> LoadPlan:
    """How far each load-driven group should grow now (never shrink), and why the others wait.

    `idle_below`: a node measured below this share of its CPU is idle (SCALE_DOWN_MEASURED_CPU_THRESHOLD).
    """
    increases: list[LoadIncrease] = []
    waiting: dict[str, str] = {}
    by_group: dict[str, list[str]] = {}
    present: dict[str, int] = {}
    # Nodes being removed, by group: our reservations (kept until the removal ends, though the node may no
    # longer map to an instance), and the taint on a node still mapped.
    leaving: dict[str, set[str]] = {group_id: set(state.removing) for group_id, state in states.items()}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None:
            continue
        present[ref.group_id] = present.get(ref.group_id, 0) + 1
        if node.is_being_deleted:
            leaving.setdefault(ref.group_id, set()).add(node.name)
        elif node.ready and not node.unschedulable:
            by_group.setdefault(ref.group_id, []).append(node.name)
    for group in snapshot.groups:
        rule = rules.get(group.id)
        if rule is None:
            continue
        current = group.running_target
        booting = current - present.get(group.id, 0)
        if booting > 0:
            waiting[group.id] = f"{booting} node(s) asked for are not registered yet"
            continue
        state = states.get(group.id)
        if state is not None and state.last_scale_up is not None and now - state.last_scale_up < cooldown:
            waiting[group.id] = f"scaled up {int((now - state.last_scale_up).total_seconds())}s ago (cooldown)"
            continue
        ready = by_group.get(group.id, [])
        values = [measured[n] for n in ready if measured is not None and n in measured]
        desired, why = current, ""
        if values:
            average = sum(values) / len(values)
            if average > rule.cpu_up:
                veto = _cpu_veto(ready, measured or {}, state, rule, backlog, leaving=leaving.get(group.id, set()),
                                 now=now, cooldown=cooldown, idle_below=idle_below)
                if veto:
                    waiting[group.id] = f"CPU {average:.0%} above {rule.cpu_up:.0%}, but {veto}"
                else:
                    desired = math.ceil(len(ready) * average / rule.cpu_up)
                    why = f"CPU {average:.0%} over {len(values)} node(s), above {rule.cpu_up:.0%}"
        if rule.backlog_per_node and backlog is not None:
            for_backlog = math.ceil(backlog / rule.backlog_per_node)
            if for_backlog > desired:
                desired, why = for_backlog, f"backlog of {backlog} at {rule.backlog_per_node} per node"
        target = min(desired, group.max_size)
        if target > current:
            increases.append(LoadIncrease(group.id, current, target, why))
            waiting.pop(group.id, None)  # a backlog grows it although CPU was vetoed
        elif desired > current:
            waiting[group.id] = f"at its max size {group.max_size} ({why})"
    return LoadPlan(tuple(increases), waiting)


def _cpu_veto(ready: list[str], measured: Mapping[str, float], state: GroupState | None, rule: LoadRule,
              backlog: int | None, *, leaving: Collection[str], now: datetime, cooldown: timedelta,
              idle_below: float) -> str:
    """Why high CPU must not grow the group now ("" when it may): see the module docstring."""
    if rule.backlog_per_node and backlog == 0:
        return "the backlog is empty: the busy nodes are finishing work, none is waiting"
    if leaving:
        names = sorted(leaving)
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return (f"node {names[0]}{more} being removed as idle: the farm has room, no work is waiting "
                f"(the scale-down cooldown runs from the decision)")
    idle = sorted(n for n in ready if n in measured and measured[n] < idle_below)
    if idle:
        return f"node {idle[0]} is idle ({measured[idle[0]]:.0%}): the farm has room, no work is waiting"
    if state is not None and state.last_scale_down is not None and now - state.last_scale_down < cooldown:
        return f"it removed an idle node {int((now - state.last_scale_down).total_seconds())}s ago"
    return ""
