"""Disruption budgets: how many nodes may be disrupted at once, per reason, optionally only in NCRONTAB windows.

Pure module, no side effects. As Karpenter's NodePool `disruption.budgets`: each budget allows `nodes` (a count or
a percentage of the nodes it covers, rounded up) to be disrupted at the same time for the `reasons` it names
(every reason when it names none); with a `schedule` and a `duration` it applies only in the windows that open
when the schedule fires and last `duration`. Where several budgets apply to a reason, the smallest wins.

The text form (the `DISRUPTION_BUDGETS` setting, cluster-wide, and the scale-set or pool tag
`autoscaler-disruption-budgets`, per group): budgets separated by `;`, each an `&`-separated list of fields:

    nodes=10%&reasons=Replace,Drifted
    nodes=0&reasons=Replace,Drifted&schedule=0 0 9 * * 1-5&duration=8h

Reasons are engine names: `Empty`, `Underutilized`, `Replace`, `Drifted` (shared.domain.DISRUPTION_REASONS).

Applying them (`apply_budgets` to a scale-down plan, `admit` to replacement proposals): a budget's allowance is its
limit less the nodes in its scope already being disrupted for a reason it covers (`in_flight`: removals in flight,
nodes being deleted, nodes being replaced), floored at 0. Cluster budgets cover every node mapped to a group; a
group's tag budgets cover its scale set's (or pool's) nodes, every lane of a multi-size group together. A tag that
does not parse never raises here: its group is reported (`tag_problems`) and its budgeted disruptions wait (we
cannot tell what the operator allowed, and a disruption cannot be taken back while a wait can).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from shared.domain import (
    DISRUPTION_REASONS,
    EMPTY,
    UNDERUTILIZED,
    ClusterSnapshot,
    GroupState,
    NodeGroup,
    parent_group_id,
)
from shared.engine import reasons
from shared.engine.reasons import KeptReason
from shared.quantities import parse_duration
from shared.schedules import Schedule, parse_ncrontab


# What is read of scale_down's Removal and ScaleDownPlan and of replacement's ReplacementProposal: described here
# rather than imported, so that the status (a sibling of scale_down in the engine's layers) may read budgets.
class Removal(Protocol):
    @property
    def node(self) -> str: ...
    @property
    def group_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def reason(self) -> str: ...


class ScaleDownPlan(Protocol):
    @property
    def removals(self) -> tuple[Removal, ...]: ...
    @property
    def kept(self) -> Mapping[str, KeptReason]: ...


class ReplacementProposal(Protocol):
    @property
    def nodes(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def reason(self) -> str: ...


PlanT = TypeVar("PlanT", bound=ScaleDownPlan)
ProposalT = TypeVar("ProposalT", bound=ReplacementProposal)

BUDGETS_TAG = "autoscaler-disruption-budgets"
_FIELDS = ("nodes", "reasons", "schedule", "duration")


@dataclass(frozen=True, slots=True)
class NodeBudget:
    """One budget: `count` nodes, or `percent` of the nodes covered (exactly one is set), for `reasons`."""

    count: int | None = None
    percent: float | None = None
    reasons: frozenset[str] = frozenset()  # empty: every reason
    schedule: Schedule | None = None
    duration: timedelta | None = None
    text: str = ""  # as written, for reports

    def covers(self, reason: str) -> bool:
        return not self.reasons or reason in self.reasons

    def active(self, now: datetime) -> bool:
        """Whether the budget applies at `now`: always without a schedule, else inside a window."""
        if self.schedule is None or self.duration is None:
            return True
        # The window that opened last: the schedule's last firing at or before now.
        opened = self.schedule.previous_before(now + timedelta(seconds=1))
        return now < opened + self.duration

    def limit(self, nodes: int) -> int:
        """How many of `nodes` covered nodes may be disrupted at once."""
        if self.count is not None:
            return self.count
        return math.ceil(nodes * (self.percent or 0.0) / 100.0)


def parse_budgets(text: str) -> tuple[NodeBudget, ...]:
    """The budgets of a setting or tag; ValueError naming the budget and field that is wrong."""
    budgets = []
    for index, raw in enumerate(part for part in text.split(";") if part.strip()):
        budgets.append(_parse_one(raw.strip(), index + 1))
    return tuple(budgets)


def _parse_one(raw: str, index: int) -> NodeBudget:
    where = f"budget {index} ({raw!r})"
    fields: dict[str, str] = {}
    for item in raw.split("&"):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in _FIELDS:
            raise ValueError(f"{where}: {item.strip()!r} is not one of {', '.join(f + '=...' for f in _FIELDS)}")
        if key in fields:
            raise ValueError(f"{where}: {key} given twice")
        fields[key] = value.strip()
    if "nodes" not in fields:
        raise ValueError(f"{where}: nodes=<count or percentage> is required")
    count, percent = _nodes(fields["nodes"], where)
    reasons = frozenset(r.strip() for r in fields.get("reasons", "").split(",") if r.strip())
    unknown = sorted(reasons - set(DISRUPTION_REASONS))
    if unknown:
        raise ValueError(f"{where}: unknown reason(s) {', '.join(unknown)} (known: {', '.join(DISRUPTION_REASONS)})")
    schedule = duration = None
    if ("schedule" in fields) != ("duration" in fields):
        raise ValueError(f"{where}: schedule and duration go together")
    if "schedule" in fields:
        try:
            schedule = parse_ncrontab(fields["schedule"])
            duration = parse_duration(fields["duration"])
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from error
        if duration <= timedelta(0):
            raise ValueError(f"{where}: duration must be positive")
    return NodeBudget(count, percent, reasons, schedule, duration, raw)


def _nodes(value: str, where: str) -> tuple[int | None, float | None]:
    try:
        if value.endswith("%"):
            percent = float(value[:-1])
            if not 0 <= percent <= 100:
                raise ValueError
            return None, percent
        count = int(value)
        if count < 0:
            raise ValueError
        return count, None
    except ValueError as error:
        raise ValueError(f"{where}: nodes={value!r} is not a count (0 or more) or a percentage (0-100%)") from error


# --- applying budgets ---------------------------------------------------------------------------------------------

CLUSTER_SCOPE = "cluster"  # BudgetLimit.scope of the DISRUPTION_BUDGETS setting's budgets


def removal_reason(removal: Removal) -> str:
    """A removal's disruption reason: its own (a forced replacement or drift drain), else its kind's.

    Empty nodes are `Empty`, nodes with pods to move or batch pods to wait for `Underutilized`; an unready node's
    removal is "" (not a voluntary disruption: no budget applies, as in Karpenter).
    """
    if removal.reason:
        return removal.reason
    return {"empty": EMPTY, "drain": UNDERUTILIZED, "batch": UNDERUTILIZED}.get(removal.kind, "")


@dataclass(frozen=True, slots=True)
class Disrupting:
    """A node being disrupted now (or admitted to be in this plan), counted against the budgets."""

    node: str
    group_id: str
    reason: str


def in_flight(snapshot: ClusterSnapshot, states: Mapping[str, GroupState]) -> tuple[Disrupting, ...]:
    """The nodes being disrupted: removals in flight, nodes being deleted, nodes being replaced (each once).

    A removal in flight takes its node's replacement reason if it has one, else `Underutilized` (the state does not
    keep the removal's kind); so does a node carrying the ToBeDeleted taint that no state row names (a removal
    whose row was lost, or another tool's). A node being replaced counts from the moment its replacement was
    admitted, before its drain starts, as Karpenter counts a node marked for disruption. A given-up replacement's
    tombstone (`given_up_at`) is no disruption: its node stays; removed by scale-down, it is Underutilized.
    """
    found: dict[str, Disrupting] = {}
    for gid, state in sorted(states.items()):
        live = {node: entry for node, entry in state.replacing.items() if entry.given_up_at is None}
        for node in state.removing:
            entry = live.get(node)
            found[node] = Disrupting(node, gid, entry.reason if entry is not None else UNDERUTILIZED)
        for node, entry in live.items():
            found.setdefault(node, Disrupting(node, gid, entry.reason))
    for node in snapshot.nodes:
        ref = node.instance
        if node.is_being_deleted and ref is not None and node.name not in found:
            found[node.name] = Disrupting(node.name, ref.group_id, UNDERUTILIZED)
    return tuple(found[name] for name in sorted(found))


def group_budgets(group: NodeGroup) -> tuple[tuple[NodeBudget, ...], str]:
    """The group's tag budgets (a lane's are its scale set's: lanes carry the set's tags) and "" or what is wrong."""
    text = group.tags.get(BUDGETS_TAG, "")
    if not text.strip():
        return (), ""
    try:
        return parse_budgets(text), ""
    except ValueError as error:
        return (), f"tag {BUDGETS_TAG} of {group.parent_id}: {error}"


def tag_problems(groups: Iterable[NodeGroup]) -> dict[str, str]:
    """Scale set (or pool) id -> why its budgets tag does not parse, for the groups whose tag is wrong."""
    problems: dict[str, str] = {}
    for group in groups:
        _, problem = group_budgets(group)
        if problem:
            problems[group.parent_id] = problem
    return problems


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    """One budget that applies to a reason now: where (`scope`: CLUSTER_SCOPE or a scale set's id), its limit for
    the nodes in that scope, and how many of them are disrupted for reasons it covers."""

    scope: str
    budget: NodeBudget
    nodes: int
    limit: int
    disrupting: int

    @property
    def allowed(self) -> int:
        return max(0, self.limit - self.disrupting)

    def describe(self, reason: str) -> str:
        where = "cluster-wide DISRUPTION_BUDGETS" if self.scope == CLUSTER_SCOPE else f"tag of {self.scope}"
        return (f"disruption budget {self.budget.text!r} ({where}) allows {self.allowed} more {reason} disruption(s) "
                f"now: {self.disrupting} of {self.limit} in flight ({self.nodes} node(s) covered)")


def _mapped_nodes(snapshot: ClusterSnapshot) -> dict[str, str]:
    """Node -> its group id, for nodes mapped to a group of the snapshot."""
    known = {g.id for g in snapshot.groups}
    return {node.name: ref.group_id for node in snapshot.nodes
            if (ref := node.instance) is not None and ref.group_id in known}


def limits(reason: str, *, group: NodeGroup | None, snapshot: ClusterSnapshot, cluster_budgets: Sequence[NodeBudget],
           disrupting: Sequence[Disrupting], now: datetime, mapped: Mapping[str, str] | None = None
           ) -> list[BudgetLimit]:
    """Every budget active now that covers `reason` for a node of `group` (None: cluster budgets only); `mapped`
    (node -> group id, as `_mapped_nodes` finds it) saves reading the snapshot again."""
    mapped = _mapped_nodes(snapshot) if mapped is None else mapped
    found: list[BudgetLimit] = []
    for budget in cluster_budgets:
        if budget.covers(reason) and budget.active(now):
            counted = sum(1 for d in disrupting if budget.covers(d.reason))
            found.append(BudgetLimit(CLUSTER_SCOPE, budget, len(mapped), budget.limit(len(mapped)), counted))
    if group is not None:
        own, _ = group_budgets(group)
        parent = group.parent_id
        nodes = sum(1 for gid in mapped.values() if parent_group_id(gid) == parent)
        for budget in own:
            if budget.covers(reason) and budget.active(now):
                counted = sum(1 for d in disrupting if parent_group_id(d.group_id) == parent and budget.covers(d.reason))
                found.append(BudgetLimit(parent, budget, nodes, budget.limit(nodes), counted))
    return found


def allowance(reason: str, *, group: NodeGroup | None, snapshot: ClusterSnapshot,
              cluster_budgets: Sequence[NodeBudget], disrupting: Sequence[Disrupting], now: datetime) -> int | None:
    """How many more nodes of `group` may be disrupted for `reason` now; None when no budget applies.

    The smallest allowance of the active budgets covering the reason (cluster-wide and the group's tag), each its
    limit less the disruptions it already counts, floored at 0. A group whose tag does not parse allows none, for
    every reason (its operator meant a limit we cannot read); `tag_problems` reports it.
    """
    return _allowance(reason, group=group, snapshot=snapshot, cluster_budgets=cluster_budgets,
                      disrupting=disrupting, now=now)[0]


def _allowance(reason: str, *, group: NodeGroup | None, snapshot: ClusterSnapshot,
               cluster_budgets: Sequence[NodeBudget], disrupting: Sequence[Disrupting], now: datetime,
               mapped: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """`allowance`, and why it allows no disruption of a node of `group` now ("" when it allows one)."""
    if reason not in DISRUPTION_REASONS:
        return None, ""
    if group is not None and (problem := group_budgets(group)[1]):
        return 0, f"{problem}; its {reason} disruptions wait until the tag is fixed"
    found = limits(reason, group=group, snapshot=snapshot, cluster_budgets=cluster_budgets,
                   disrupting=disrupting, now=now, mapped=mapped)
    if not found:
        return None, ""
    tightest = min(found, key=lambda limit: (limit.allowed, limit.limit - limit.disrupting))
    return tightest.allowed, tightest.describe(reason) if tightest.allowed < 1 else ""


def apply_budgets(plan: PlanT, snapshot: ClusterSnapshot, states: Mapping[str, GroupState],
                  cluster_budgets: Sequence[NodeBudget], now: datetime) -> PlanT:
    """The plan with only the removals the budgets allow now; the others kept (DISRUPTION_BUDGET, naming it).

    Removals are admitted in plan order, each counted against the budgets before the next is weighed. A removal of
    a node already counted (being replaced: the forced drain of an admitted replacement) passes without counting it
    again; so do removals whose reason no budget limits (unready nodes).
    """
    if not _any_budget(snapshot, cluster_budgets, {removal_reason(r) for r in plan.removals}):
        return plan  # the common case (default budgets, no tags): nothing to count
    mapped = _mapped_nodes(snapshot)
    disrupting = list(in_flight(snapshot, states))
    counted = {d.node for d in disrupting}
    admitted = []
    kept: dict[str, KeptReason] = {}
    for removal in plan.removals:
        reason = removal_reason(removal)
        if removal.node in counted or reason not in DISRUPTION_REASONS:
            admitted.append(removal)
            continue
        _, why = _allowance(reason, group=snapshot.group(removal.group_id), snapshot=snapshot,
                            cluster_budgets=cluster_budgets, disrupting=disrupting, now=now, mapped=mapped)
        if why:
            kept[removal.node] = KeptReason(reasons.DISRUPTION_BUDGET, why)
            continue
        admitted.append(removal)
        disrupting.append(Disrupting(removal.node, removal.group_id, reason))
        counted.add(removal.node)
    if not kept:
        return plan
    return replace(plan, removals=tuple(admitted), kept={**plan.kept, **kept})  # type: ignore[type-var]


def _any_budget(snapshot: ClusterSnapshot, cluster_budgets: Sequence[NodeBudget], reasons_: set[str]) -> bool:
    """Whether any budget (cluster-wide, or any group's tag, readable or not) might limit one of `reasons_`."""
    budgeted = reasons_ & set(DISRUPTION_REASONS)
    if not budgeted:
        return False
    if any(b.covers(r) for b in cluster_budgets for r in budgeted):
        return True
    return any(g.tags.get(BUDGETS_TAG, "").strip() for g in snapshot.groups)


def admit(proposals: Sequence[ProposalT], snapshot: ClusterSnapshot, states: Mapping[str, GroupState],
          cluster_budgets: Sequence[NodeBudget], now: datetime) -> tuple[tuple[ProposalT, ...], dict[str, str]]:
    """The replacement proposals the budgets allow now, in order, and node -> why for those refused.

    A proposal is all or nothing: each of its nodes is counted (against its own group's budgets and the cluster's)
    before the next is weighed, and if one does not fit, none of them is admitted and every one of them is named.
    """
    mapped = _mapped_nodes(snapshot)
    disrupting = list(in_flight(snapshot, states))
    counted = {d.node for d in disrupting}
    admitted: list[ProposalT] = []
    refused: dict[str, str] = {}
    for proposal in proposals:
        trial = list(disrupting)
        why = ""
        for node, gid in proposal.nodes:
            if node in counted:
                continue
            _, why = _allowance(proposal.reason, group=snapshot.group(gid), snapshot=snapshot,
                                cluster_budgets=cluster_budgets, disrupting=trial, now=now, mapped=mapped)
            if why:
                break
            trial.append(Disrupting(node, gid, proposal.reason))
        if why:
            refused.update({node: why for node, _ in proposal.nodes})
            continue
        admitted.append(proposal)
        disrupting = trial
        counted.update(node for node, _ in proposal.nodes)
    return tuple(admitted), refused


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """One budget as the status and `plan` show it: where, as written, whether active now, allowance per reason."""

    scope: str  # CLUSTER_SCOPE or a scale set's (pool's) id
    text: str
    active: bool
    nodes: int  # covered
    allowed: Mapping[str, int]  # reason it covers -> disruptions it still allows now (0 for every one when inactive)


def budget_status(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], cluster_budgets: Sequence[NodeBudget],
                  now: datetime) -> tuple[BudgetStatus, ...]:
    """Every budget, cluster-wide then per scale set, with its allowance per reason it covers as of now."""
    disrupting = in_flight(snapshot, states)
    mapped = _mapped_nodes(snapshot)
    lines: list[BudgetStatus] = []
    parents: dict[str, NodeGroup] = {}
    for group in sorted(snapshot.groups, key=lambda g: g.id):
        parents.setdefault(group.parent_id, group)
    scopes: list[tuple[str, tuple[NodeBudget, ...], int, Sequence[Disrupting]]] = [
        (CLUSTER_SCOPE, tuple(cluster_budgets), len(mapped), disrupting)]
    for parent, group in parents.items():
        own, _ = group_budgets(group)
        if own:
            nodes = sum(1 for gid in mapped.values() if parent_group_id(gid) == parent)
            scopes.append((parent, own, nodes, [d for d in disrupting if parent_group_id(d.group_id) == parent]))
    for scope, budgets, nodes, counted in scopes:
        for budget in budgets:
            active = budget.active(now)
            # One count for every reason it covers: a budget counts all its reasons' disruptions together.
            spent = sum(1 for d in counted if budget.covers(d.reason))
            left = max(0, budget.limit(nodes) - spent) if active else 0
            allowed = {reason: left for reason in DISRUPTION_REASONS if budget.covers(reason)}
            lines.append(BudgetStatus(scope, budget.text, active, nodes, allowed))
    return tuple(lines)


def cluster_allowance(snapshot: ClusterSnapshot, states: Mapping[str, GroupState],
                      cluster_budgets: Sequence[NodeBudget], now: datetime) -> dict[str, int | None]:
    """Reason -> disruptions the cluster-wide budgets allow now (None: unlimited cluster-wide)."""
    disrupting = in_flight(snapshot, states)
    return {reason: allowance(reason, group=None, snapshot=snapshot, cluster_budgets=cluster_budgets,
                              disrupting=disrupting, now=now) for reason in DISRUPTION_REASONS}
