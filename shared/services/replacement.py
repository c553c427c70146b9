"""Replacements (consolidation and drift): the new capacity is asked first, the old nodes drained once it is Ready.

Called by the utilisation poll before it plans scale-down (`run_replacements`), each poll:

1. entries whose node is gone are dropped (done), and those older than REPLACEMENT_TIMEOUT whose removal has not
   started are given up (event `ReplacementGivenUp`; the old node stays, the new one is idle capacity that the
   ordinary scale-down removes): the entry stays as a tombstone (`given_up_at`), so the node is not proposed
   again until it expires (engine.replacement.TOMBSTONE_FACTOR timeouts later), when it is dropped;
2. the planners propose: engine.drift (DRIFT_REPLACEMENT) and engine.consolidation (unless CONSOLIDATION=off;
   with the budgets as its `admissible`, counting this round's drift proposals first);
3. the disruption budgets admit proposals (engine.disruption_budgets.admit), all of a proposal's nodes or none;
   a proposal whose target group has no room left under its max is refused too;
4. each admitted proposal: a `Replacement` entry per old node in its group's row (compare-and-swap), then ONE
   ScaleUp of the target group by `count` nodes (absolute target: its running target plus what this round asked
   before), and `ReplacingNode` events on the old nodes. A drifted node with no pods to move asks no node
   (`count` 0, engine.drift): no ScaleUp; its entry is Ready at once, so it is forced this very poll;
5. the nodes whose replacement is Ready are returned as `forced`: the poll makes them scale-down candidates
   (ScaleDownOptions.forced), so they leave by the ordinary drain (cordon, evictions honouring PDBs, delete).

With DRY_RUN, everything is decided and reported, nothing is written, sent or emitted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared import telemetry
from shared.actions import new_scale_up, scale_up_id
from shared.domain import DRIFTED, ClusterSnapshot, GroupState, Replacement
from shared.engine.backoff import backoff_reason
from shared.engine.consolidation import ConsolidationOptions, ConsolidationPlan, plan_consolidation
from shared.engine.disruption_budgets import admit
from shared.engine.drift import drifted_nodes, plan_drift
from shared.engine.replacement import (
    BACKOFF_OVER,
    GONE,
    ReplacementProposal,
    ready_replacements,
    retry_at,
    stale_replacements,
)
from shared.options import drain_rules
from shared.ports import ClusterEvent, Ports
from shared.services.drift import with_model_state
from shared.services.swap import StateConflict, swap_group
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplacementRound:
    """What one poll decided about replacements, for the scale-down plan, the status and `plan`."""

    drifted: Mapping[str, str] = field(default_factory=dict)  # node -> model | image | age
    proposals: tuple[ReplacementProposal, ...] = ()  # what the planners proposed
    admitted: tuple[ReplacementProposal, ...] = ()  # what was asked for this poll (with DRY_RUN: would be)
    refused: Mapping[str, str] = field(default_factory=dict)  # node -> why its proposal was not admitted
    waiting: Mapping[str, str] = field(default_factory=dict)  # drifted node -> why it is not proposed yet
    candidates: Mapping[str, str] = field(default_factory=dict)  # consolidation: node -> verdict
    forced: Mapping[str, Replacement] = field(default_factory=dict)  # node -> its entry, replacement Ready
    given_up: Mapping[str, str] = field(default_factory=dict)  # node -> why its replacement was given up this poll
    # Every tombstone left after this poll (given up now or before): node -> when it may be proposed again.
    retry_at: Mapping[str, datetime] = field(default_factory=dict)
    enqueued: tuple[str, ...] = ()  # ScaleUp action ids
    # The rows this round changed, as they are now (read back; with DRY_RUN, as they would be): the plan counts
    # the new entries (disruption budgets) and works on rows with their current ETags.
    states: Mapping[str, GroupState] = field(default_factory=dict)

    @property
    def forced_reasons(self) -> dict[str, str]:
        """ScaleDownOptions.forced: node -> its disruption reason."""
        return {node: entry.reason for node, entry in self.forced.items()}


def run_replacements(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: Mapping[str, GroupState],
                     *, now: datetime, unneeded: Collection[str],
                     proposals: Sequence[ReplacementProposal] | None = None) -> ReplacementRound:
    """One poll's replacements (see the module docstring). `states` are the readable groups' rows as read this
    poll; `unneeded` the nodes scale-down already tracks (consolidation leaves them to it). `proposals`, when
    given, stand for the planners' (tests, the replay)."""
    states = dict(states)
    touched: set[str] = set()
    given_up = _drop_stale(ports, settings, snapshot, states, now=now, touched=touched)
    drifted: dict[str, str] = {}
    waiting: Mapping[str, str] = {}
    candidates: Mapping[str, str] = {}
    if proposals is None:
        planned: list[ReplacementProposal] = []
        if settings.drift_replacement:
            # Uniform sets' instances (their latestModelApplied), where node mapping did not list them.
            snapshot = with_model_state(ports.provider, snapshot)
            drifted = drifted_nodes(snapshot, max_age=settings.node_max_age, now=now)
            drift = plan_drift(snapshot, states=states, drifted=drifted, now=now, drain=drain_rules(settings))
            planned += drift.proposals
            waiting = {**drift.waiting, **_given_up_waiting(states, drifted, settings)}
        consolidation = _consolidation_plan(ports, settings, snapshot, states, now=now, unneeded=unneeded,
                                            before=tuple(planned))
        if consolidation is not None:
            planned += consolidation.proposals
            candidates = consolidation.candidates
        # Plain text for the status document and `plan` (a verdict may be a KeptReason, a str subclass).
        waiting = {node: str(why) for node, why in waiting.items()}
        candidates = {node: str(verdict) for node, verdict in candidates.items()}
        proposals = planned
    proposals = tuple(proposals)
    # What cannot be asked for is refused before the budgets weigh the rest: it must not take their room.
    refused: dict[str, str] = {}
    feasible = []
    for proposal in proposals:
        why = _refusal(snapshot, states, proposal, {}, now=now)
        if why:
            refused.update({node: why for node, _ in proposal.nodes})
        else:
            feasible.append(proposal)
    admitted, over_budget = admit(feasible, snapshot, states, settings.disruption_budgets, now)
    refused.update(over_budget)
    asked: dict[str, int] = {}  # target group -> nodes asked of it this round
    done: list[ReplacementProposal] = []
    enqueued: list[str] = []
    for proposal in admitted:
        why = _refusal(snapshot, states, proposal, asked, now=now)  # the max, with what this round asked before
        if why:
            refused.update({node: why for node, _ in proposal.nodes})
            continue
        group = snapshot.group(proposal.to_group)
        target = group.running_target + asked.get(proposal.to_group, 0) + proposal.count
        # No capacity asked, no action: the entry stands alone (engine.replacement keys it by its node).
        action_id = "" if proposal.count == 0 else scale_up_id(proposal.to_group, target, now=now,
                                                                why=_kind(proposal.reason))
        entries = _entries(proposal, action_id, now=now)
        touched.update(entries)
        if settings.dry_run:
            for group_id, mine in entries.items():
                states[group_id] = replace(states.get(group_id, GroupState(group_id)),
                                           replacing={**states.get(group_id, GroupState(group_id)).replacing, **mine})
        else:
            why = _record(ports, entries)
            if why:
                refused.update({node: why for node, _ in proposal.nodes})
                continue
            if proposal.count:
                ports.queue.send(new_scale_up(action_id=action_id, group=proposal.to_group, target_size=target,
                                              now=now, ttl=settings.action_ttl, reason=f"{_kind(proposal.reason)}: "
                                              f"{proposal.detail or proposal.reason}", **telemetry.trace_fields()))
                enqueued.append(action_id)
            for node, _ in proposal.nodes:
                ports.events.emit(ClusterEvent("default", "Node", node, "", "ReplacingNode", _message(proposal), now))
        asked[proposal.to_group] = asked.get(proposal.to_group, 0) + proposal.count
        done.append(proposal)
        log.info("replacement %s: node(s) %s -> %d new node(s) of %s (%s) action=%s",
                 "decided (dry run)" if settings.dry_run else "decided", ", ".join(n for n, _ in proposal.nodes),
                 proposal.count, proposal.to_group, _message(proposal), action_id)
    if not settings.dry_run:
        states.update({group_id: ports.state.get_group(group_id) for group_id in touched})
    retry = {node: retry_at(entry, timeout=settings.replacement_timeout)
             for state in states.values() for node, entry in state.replacing.items() if entry.given_up_at is not None}
    return ReplacementRound(drifted=drifted, proposals=proposals, admitted=tuple(done), refused=refused,
                            waiting=waiting, candidates=candidates, forced=ready_replacements(snapshot, states),
                            given_up=given_up, retry_at=retry, enqueued=tuple(enqueued),
                            states={group_id: states[group_id] for group_id in touched if group_id in states})


def _drop_stale(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, states: dict[str, GroupState], *,
                now: datetime, touched: set[str]) -> dict[str, str]:
    """Drop the entries whose node is gone or whose tombstone expired, and turn those whose replacement timed out
    into tombstones (in `states` too, their groups added to `touched`); node -> why, for those given up."""
    given_up: dict[str, str] = {}
    for group_id, node, why in stale_replacements(snapshot, states, now=now, timeout=settings.replacement_timeout):
        touched.add(group_id)
        entry = states[group_id].replacing[node]
        dropped = why in (GONE, BACKOFF_OVER)
        tombstone = replace(entry, given_up_at=now)
        kept = {n: r for n, r in states[group_id].replacing.items() if n != node}
        states[group_id] = replace(states[group_id], replacing=kept if dropped else {**kept, node: tombstone})
        if not dropped:
            given_up[node] = why
            log.warning("replacement of %s given up: %s; not proposed again before %s", node, why,
                        retry_at(tombstone, timeout=settings.replacement_timeout).isoformat())
        if settings.dry_run:
            continue

        def end(s: GroupState, node: str = node, entry: Replacement = entry,
                dropped: bool = dropped, tombstone: Replacement = tombstone) -> tuple[GroupState | None, None]:
            if s.replacing.get(node) != entry:
                return None, None  # changed since it was read (ended or given up by another poll): left alone
            rest = {n: r for n, r in s.replacing.items() if n != node}
            return replace(s, replacing=rest if dropped else {**rest, node: tombstone}), None

        try:
            swap_group(ports.state, group_id, end, what=f"end the replacement of {node}")
        except StateConflict as exc:
            log.warning("%s; tried again next poll", exc)
        if not dropped:
            ports.events.emit(ClusterEvent(
                "default", "Node", node, "", "ReplacementGivenUp",
                f"replacement ({entry.reason}) given up: {why}; not proposed again before "
                f"{retry_at(tombstone, timeout=settings.replacement_timeout).isoformat()}", now, "Warning"))
    return given_up


def _given_up_waiting(states: Mapping[str, GroupState], drifted: Mapping[str, str],
                      settings: Settings) -> dict[str, str]:
    """Drifted nodes whose replacement was given up (the planner leaves them out as under way) -> why they wait."""
    return {node: f"replacement given up at {entry.given_up_at.isoformat()}; not proposed again before "
                  f"{retry_at(entry, timeout=settings.replacement_timeout).isoformat()}"
            for state in states.values() for node, entry in state.replacing.items()
            if node in drifted and entry.given_up_at is not None}


def _refusal(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], proposal: ReplacementProposal,
             asked: Mapping[str, int], *, now: datetime) -> str:
    """Why the proposal cannot be asked for now; "" when it can."""
    # Only a drifted node with nothing to move goes without a new node first (engine.drift).
    if proposal.count < 0 or (proposal.count == 0 and proposal.reason != DRIFTED):
        return f"a {proposal.reason} replacement asks at least one node, not {proposal.count}"
    group = snapshot.group(proposal.to_group)
    if group is None:
        return f"group {proposal.to_group} is not a discovered node group"
    busy = {n for s in states.values() for n in (*s.removing, *s.replacing)}
    taken = [node for node, _ in proposal.nodes if node in busy]
    if taken:
        return f"node(s) {', '.join(taken)} already being removed or replaced"
    if proposal.count == 0:
        return ""  # nothing asked of the group: its backoff and max do not apply
    backoff = backoff_reason(states.get(group.id, GroupState(group.id)), now=now)
    if backoff:  # its ScaleUp would not be made: the old nodes would only wait for the timeout
        return f"group {proposal.to_group} {backoff}"
    target = group.running_target + asked.get(proposal.to_group, 0) + proposal.count
    if target > group.max_size:
        return f"group {proposal.to_group} has no room for {proposal.count} more node(s) (max {group.max_size})"
    return ""


def _entries(proposal: ReplacementProposal, action_id: str, *, now: datetime) -> dict[str, dict[str, Replacement]]:
    """The proposal's `Replacement` entries, by the old nodes' group id, then node."""
    together = tuple(node for node, _ in proposal.nodes)
    by_group: dict[str, dict[str, Replacement]] = {}
    for node, group_id in proposal.nodes:
        by_group.setdefault(group_id, {})[node] = Replacement(
            node, proposal.reason, proposal.to_group, now, action_id=action_id, count=proposal.count,
            together=together, saving_per_hour=proposal.saving_per_hour, detail=proposal.detail)
    return by_group


def _record(ports: Ports, by_group: Mapping[str, Mapping[str, Replacement]]) -> str:
    """The entries written into each old group's row; "" once all are, else why not.

    Entries already written for this proposal stay if a later row refuses: no ScaleUp is sent for them, and the
    next polls' `stale_replacements` give them up after the timeout."""
    for group_id, entries in by_group.items():

        def add(state: GroupState, entries: Mapping[str, Replacement] = entries) -> tuple[GroupState | None, str]:
            clash = [n for n in entries if n in state.removing or n in state.replacing]
            if clash:
                return None, f"node(s) {', '.join(clash)} already being removed or replaced"
            return replace(state, replacing={**state.replacing, **entries}), ""

        try:
            why = swap_group(ports.state, group_id, add, what="record a replacement")
        except StateConflict as exc:
            return str(exc)
        if why:
            return why
    return ""


def _consolidation_plan(ports: Ports, settings: Settings, snapshot: ClusterSnapshot,
                        states: Mapping[str, GroupState], *, now: datetime, unneeded: Collection[str],
                        before: Sequence[ReplacementProposal]) -> ConsolidationPlan | None:
    """engine.consolidation's plan, None with CONSOLIDATION=off. `before`: this round's drift proposals, which
    the budgets weigh first (a consolidation the budgets would refuse after them gives way to a smaller one)."""
    if settings.consolidation == "off":
        return None
    if not snapshot.prices:
        # Consolidation weighs prices; the utilisation poll reads them only for it (the provider caches them).
        snapshot = replace(snapshot, prices=ports.provider.list_prices(snapshot.groups))

    def admissible(proposal: ReplacementProposal) -> str:
        _, refused = admit((*before, proposal), snapshot, states, settings.disruption_budgets, now)
        return next((refused[node] for node, _ in proposal.nodes if node in refused), "")

    options = ConsolidationOptions(policy=settings.consolidation, threshold=settings.consolidation_threshold,
                                   drain=drain_rules(settings), on_demand_selector=settings.on_demand_pod_selector,
                                   admissible=admissible)
    return plan_consolidation(snapshot, states=states, unneeded=unneeded, options=options, now=now)


def _kind(reason: str) -> str:
    """The telemetry removal kind and ScaleUp reason prefix of a replacement: `drift` or `replace`."""
    return "drift" if reason == DRIFTED else "replace"


def _message(proposal: ReplacementProposal) -> str:
    if proposal.count == 0:
        return (f"{proposal.reason}: no pods to move, removed without a new node first"
                + (f" ({proposal.detail})" if proposal.detail else ""))
    nodes = len(proposal.nodes)
    text = (f"{proposal.reason}: {nodes} node(s) replaced by {proposal.count} new node(s) of {proposal.to_group}"
            + (f" ({proposal.detail})" if proposal.detail else ""))
    if proposal.saving_per_hour > 0:
        text += f", saving ${proposal.saving_per_hour:.2f}/h"
    return text + "; drained once the new capacity is Ready"
