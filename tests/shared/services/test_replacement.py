"""services.replacement and the utilisation poll, in process over a sandbox world (tests.memory_app): a proposal
asks its new capacity (one ScaleUp, a Replacing entry, ReplacingNode events); once a new node is Ready the old one
leaves by the ordinary drain; a replacement that times out is given up; batch pods are never cut short; the
disruption budgets and the target's max size refuse; DRY_RUN changes nothing; no proposal, no change."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.actions import RemovalTarget, ScaleDown, ScaleUp, decode_message, new_scale_down, scale_down_id
from shared.domain import DRIFTED, REPLACE, ClusterSnapshot, GroupState, Replacement
from shared.engine.replacement import TOMBSTONE_FACTOR, ReplacementProposal, retry_at
from shared.engine.scale_down import BATCH_PODS_RUNNING
from shared.services.group_rows import read_group_states
from shared.services.observe import observe_or_skip
from shared.services.reconcile import reserve_decided
from shared.services.replacement import ReplacementRound, run_replacements
from shared.services.utilization import run_utilization_poll
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-sandbox-nodes/pool-a"
OTHER = "rg-sandbox-nodes/pool-b"
OLD = "pool-a000000"  # the node the world schedules every pod on
# Polls alone never remove a node here: only a replacement does.
SETTINGS = {"DRIFT_REPLACEMENT": "false", "CONSOLIDATION": "off", "SCALE_DOWN_UNNEEDED_TIME": "2h",
            "REPLACEMENT_TIMEOUT": "20m", "DISRUPTION_BUDGETS": ""}


def _pool(name: str, *, initial: int, max_size: int = 5) -> dict[str, Any]:
    return {"resource_group": "rg-sandbox-nodes", "name": name, "vm_size": "Standard_D4s_v5",
            "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}, "min": 0, "max": max_size, "initial": initial}


def _scenario(*, batch: bool = False, max_size: int = 5) -> dict[str, Any]:
    workloads: list[dict[str, Any]] = [
        {"name": "web", "kind": "ReplicaSet", "count": 2, "requests": {"cpu": "1", "memory": "1Gi"}}]
    if batch:
        workloads.append({"name": "render", "kind": "Job", "count": 1, "requests": {"cpu": "1", "memory": "1Gi"},
                          "duration": "50m"})
    return {"name": "replacement-unit", "cluster_name": "sandbox", "duration": "60m",
            "boot_delay": {"median": "60s", "p95": "90s", "min": "45s", "max": "120s"},
            "node_groups": [_pool("pool-a", initial=2, max_size=max_size), _pool("pool-b", initial=0)],
            "workloads": workloads}


def _app(*, batch: bool = False, max_size: int = 5, **settings: str) -> MemoryApp:
    app = memory_app(_scenario(batch=batch, max_size=max_size), settings={**SETTINGS, **settings})
    app.clock.advance(30)  # the pods scheduled
    return app


def _observe(app: MemoryApp) -> tuple[ClusterSnapshot, dict[str, GroupState]]:
    snapshot = observe_or_skip(app.ports, now=app.clock.now())
    assert snapshot is not None
    states, unreadable = read_group_states(app.ports, snapshot.groups)
    assert not unreadable
    return snapshot, states


def _propose(app: MemoryApp, *proposals: ReplacementProposal) -> ReplacementRound:
    snapshot, states = _observe(app)
    assert {p.node_name for p in snapshot.pods} == {OLD}  # what the tests rely on
    return run_replacements(app.ports, app.settings, snapshot, states, now=app.clock.now(), unneeded=(),
                            proposals=proposals)


def _drift(node: str = OLD) -> ReplacementProposal:
    return ReplacementProposal(((node, GROUP),), DRIFTED, GROUP, 1, detail="model")


def _consolidate(to_group: str = OTHER) -> ReplacementProposal:
    return ReplacementProposal(((OLD, GROUP),), REPLACE, to_group, 1, saving_per_hour=0.25,
                               detail="1 x Standard_D4s_v5 -> 1 x Standard_D4s_v5")


def _actions(app: MemoryApp) -> list[Any]:
    return [decode_message(text) for text in app.queued()]


def _nodes(app: MemoryApp) -> set[str]:
    snapshot, _ = _observe(app)
    return {n.name for n in snapshot.nodes}


@pytest.mark.parametrize("budgets", ["", "nodes=1&reasons=Replace,Drifted"])
@pytest.mark.parametrize(("proposal", "kind"), [(_drift(), "drift"), (_consolidate(), "replace")])
def test_a_proposal_asks_its_capacity_then_the_old_node_is_drained(proposal: ReplacementProposal, kind: str,
                                                                   budgets: str) -> None:
    # A budget of one: the replacement takes it, and its own drain is not counted twice.
    app = _app(DISRUPTION_BUDGETS=budgets)
    running = len([n for n in _nodes(app) if n.startswith(proposal.to_group.rsplit("/", 1)[1])])
    decided = _propose(app, proposal)

    assert decided.admitted == (proposal,) and len(decided.enqueued) == 1
    (up,) = _actions(app)
    assert isinstance(up, ScaleUp) and up.id == decided.enqueued[0]
    assert (up.group, up.target_size) == (proposal.to_group, running + 1)
    entry = app.ports.state.get_group(GROUP).replacing[OLD]
    assert (entry.reason, entry.to_group, entry.action_id, entry.count) == (
        proposal.reason, proposal.to_group, up.id, 1)
    assert [e.name for e in app.events() if e.reason == "ReplacingNode"] == [OLD]

    # Before the new node is Ready, the old one stays.
    early = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert early.replacements.forced == {} and not any(isinstance(a, ScaleDown) for a in _actions(app))
    app.run_actions()
    app.clock.advance(180)  # booted and Ready

    poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert set(poll.replacements.forced) == {OLD}
    downs = [a for a in _actions(app) if isinstance(a, ScaleDown)]
    assert [(d.nodes, d.removal_kind) for d in downs] == [((OLD,), kind)]
    for _ in range(20):  # the drain's steps, as the host runs them (some are delayed)
        app.run_actions()
        app.clock.advance(30)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())

    assert OLD not in _nodes(app)
    assert app.ports.state.get_group(GROUP).replacing == {}
    snapshot, _ = _observe(app)
    web = [p for p in snapshot.pods if p.owner is not None and p.owner.name == "web" and not p.is_finished]
    assert len(web) == 2 and all(p.node_name for p in web)  # the service kept its replicas, moved


def test_a_replacement_whose_capacity_never_comes_is_given_up() -> None:
    app = _app()
    decided = _propose(app, _drift())
    assert decided.enqueued
    app.clear_queue()  # the ScaleUp is lost: no new node ever comes
    app.clock.advance(10 * 60)
    assert run_utilization_poll(app.ports, app.settings, now=app.clock.now()).replacements.given_up == {}
    app.clock.advance(11 * 60)  # past REPLACEMENT_TIMEOUT

    poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())

    assert set(poll.replacements.given_up) == {OLD}
    # Kept as a tombstone, not dropped: the node is not proposed again before its back-off ends.
    tombstone = app.ports.state.get_group(GROUP).replacing[OLD]
    assert tombstone.given_up_at == app.clock.now()
    assert poll.replacements.retry_at == {OLD: retry_at(tombstone, timeout=app.settings.replacement_timeout)}
    assert [e.name for e in app.events() if e.reason == "ReplacementGivenUp"] == [OLD]
    assert OLD in _nodes(app) and not any(isinstance(a, ScaleDown) for a in _actions(app))


def test_a_given_up_node_is_not_proposed_again_until_its_tombstone_expires() -> None:
    app = _app(DISRUPTION_BUDGETS="nodes=1&reasons=Drifted")
    _propose(app, _drift())
    app.clear_queue()  # the new node never comes
    app.clock.advance(21 * 60)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    gave_up = app.ports.state.get_group(GROUP).replacing[OLD].given_up_at
    assert gave_up is not None
    app.clear_queue()

    again = _propose(app, _drift())
    assert again.admitted == () and OLD in again.refused and _actions(app) == []
    # The tombstone takes no room in the budget of one: another drifted node goes.
    other = _propose(app, _drift("pool-a000001"))
    assert len(other.admitted) == 1
    app.clear_queue()
    assert run_utilization_poll(app.ports, app.settings, now=app.clock.now()).replacements.forced == {}

    back_off = TOMBSTONE_FACTOR * app.settings.replacement_timeout
    app.clock.advance(int((gave_up + back_off - app.clock.now()).total_seconds()) - 60)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert app.ports.state.get_group(GROUP).replacing[OLD].given_up_at == gave_up  # not yet
    app.clock.advance(61)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert OLD not in app.ports.state.get_group(GROUP).replacing  # expired: dropped
    app.clear_queue()
    assert _propose(app, _drift()).admitted == (_drift(),)


EMPTY_NODE = "pool-a000001"  # no pod is ever scheduled there


@pytest.mark.parametrize("given_up", [False, True])
def test_the_executor_forces_a_replaced_node_but_not_a_tombstone(given_up: bool) -> None:
    # A ScaleDown of a node unneeded just now: only a replacement under way skips the unneeded wait (2h here).
    app = _app()
    now = app.clock.now()
    entry = Replacement(EMPTY_NODE, DRIFTED, GROUP, now - timedelta(minutes=40),
                        given_up_at=now - timedelta(minutes=10) if given_up else None)
    assert app.ports.state.update_group(replace(app.ports.state.get_group(GROUP), replacing={EMPTY_NODE: entry}))
    app.ports.state.set_unneeded(EMPTY_NODE, now)
    snapshot, _ = _observe(app)
    target = next(n for n in snapshot.nodes if n.name == EMPTY_NODE)
    action_id = scale_down_id([EMPTY_NODE], now=now)
    assert reserve_decided(app.ports, GROUP, [EMPTY_NODE], action_id) == {EMPTY_NODE}
    app.ports.queue.send(new_scale_down(
        action_id=action_id, group=GROUP, now=now, ttl=app.settings.action_ttl,
        targets=[RemovalTarget(EMPTY_NODE, target.provider_id, target.instance.instance_id)]))  # type: ignore[union-attr]
    for _ in range(20):
        app.run_actions()
        app.clock.advance(30)
    assert (EMPTY_NODE in _nodes(app)) is given_up


def test_an_empty_drifted_node_is_removed_without_a_new_node_first() -> None:
    app = _app(DISRUPTION_BUDGETS="nodes=1&reasons=Drifted")
    before = _nodes(app)
    empty = ReplacementProposal(((EMPTY_NODE, GROUP),), DRIFTED, GROUP, 0, detail="model")
    decided = _propose(app, empty)

    assert decided.admitted == (empty,) and decided.enqueued == () and _actions(app) == []  # no ScaleUp
    assert set(decided.forced) == {EMPTY_NODE}  # Ready at once: nothing to wait for
    assert app.ports.state.get_group(GROUP).replacing[EMPTY_NODE].count == 0
    poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert [(r.node, r.reason) for r in poll.plan.removals] == [(EMPTY_NODE, DRIFTED)]  # within the budget of one
    downs = [a for a in _actions(app) if isinstance(a, ScaleDown)]
    assert [(d.nodes, d.removal_kind) for d in downs] == [((EMPTY_NODE,), "drift")]
    assert not any(isinstance(a, ScaleUp) for a in _actions(app))
    for _ in range(20):
        app.run_actions()
        app.clock.advance(30)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert _nodes(app) == before - {EMPTY_NODE}  # removed, and nothing added
    assert app.ports.state.get_group(GROUP).replacing == {}


@pytest.mark.parametrize(("proposal", "settings"), [
    (ReplacementProposal(((EMPTY_NODE, GROUP),), DRIFTED, GROUP, 0), {"DISRUPTION_BUDGETS": "nodes=0&reasons=Drifted"}),
    (ReplacementProposal(((EMPTY_NODE, GROUP),), REPLACE, OTHER, 0), {}),  # only drift asks no node
    (ReplacementProposal(((EMPTY_NODE, GROUP),), DRIFTED, GROUP, -1), {}),
])
def test_a_proposal_asking_no_node_is_refused_unless_drift_within_its_budget(
        proposal: ReplacementProposal, settings: dict[str, str]) -> None:
    app = _app(**settings)
    decided = _propose(app, proposal)
    assert decided.admitted == () and EMPTY_NODE in decided.refused and decided.forced == {}
    assert _actions(app) == [] and app.ports.state.get_group(GROUP).replacing == {}


def test_a_node_running_batch_pods_is_never_drained_by_its_replacement() -> None:
    app = _app(batch=True)
    _propose(app, _drift())
    app.run_actions()
    for _ in range(4):  # the replacement Ready, poll after poll while the Job runs
        app.clock.advance(120)
        poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
        assert OLD not in {r.node for r in poll.plan.removals}
        assert not any(isinstance(a, ScaleDown) and OLD in a.nodes for a in _actions(app))
    assert poll.plan.kept[OLD].code == BATCH_PODS_RUNNING
    assert OLD in _nodes(app) and OLD in app.ports.state.get_group(GROUP).replacing


@pytest.mark.parametrize(("settings", "max_size", "backoff", "why"), [
    ({"DISRUPTION_BUDGETS": "nodes=0&reasons=Drifted"}, 5, False, "budget"),
    ({}, 2, False, "no room"),
    ({}, 5, True, "in backoff"),
])
def test_a_refused_proposal_asks_nothing(settings: dict[str, str], max_size: int, backoff: bool, why: str) -> None:
    app = _app(max_size=max_size, **settings)
    if backoff:
        assert app.ports.state.update_group(GroupState(GROUP, backoff_until=app.clock.now() + timedelta(minutes=5),
                                                       backoff_reason="AllocationFailed"))
    decided = _propose(app, _drift())
    assert decided.admitted == () and decided.enqueued == ()
    assert why in decided.refused[OLD]
    assert app.queued() == [] and app.ports.state.get_group(GROUP).replacing == {}


def test_a_dry_run_decides_and_changes_nothing() -> None:
    app = _app(DRY_RUN="true")
    decided = _propose(app, _drift())
    assert decided.admitted == (_drift(),) and decided.enqueued == ()
    assert OLD in decided.states[GROUP].replacing  # reported as it would be
    assert app.queued() == [] and app.ports.state.get_group(GROUP).replacing == {}
    assert not [e for e in app.events() if e.reason == "ReplacingNode"]


def test_without_proposals_the_poll_changes_nothing_of_replacements() -> None:
    app = _app()
    poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert poll.replacements == ReplacementRound()
    assert all(app.ports.state.get_group(g).replacing == {} for g in (GROUP, OTHER))
    assert not any(isinstance(a, ScaleUp) for a in _actions(app))


def test_the_replacing_column_is_what_the_row_holds() -> None:
    # The entry is in the group row as the Table adapter would write it (a JSON object per node).
    from shared.adapters.table_state import _replacing_text  # noqa: PLC0415

    app = _app()
    _propose(app, _consolidate())
    written = json.loads(_replacing_text(app.ports.state.get_group(GROUP).replacing))
    assert written[OLD]["toGroup"] == OTHER and written[OLD]["savingPerHour"] == 0.25
    assert timedelta(0) <= app.clock.now() - app.ports.state.get_group(GROUP).replacing[OLD].since


@pytest.mark.parametrize(("budgets", "removed"), [("", True), ("nodes=0&reasons=Empty", False)])
def test_the_poll_keeps_removals_within_the_disruption_budgets(budgets: str, removed: bool) -> None:
    from shared.engine import reasons  # noqa: PLC0415

    app = _app(SCALE_DOWN_UNNEEDED_TIME="1m", DISRUPTION_BUDGETS=budgets)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    app.clock.advance(120)
    poll = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    empty = "pool-a000001"
    assert (empty in {r.node for r in poll.plan.removals}) is removed
    assert any(isinstance(a, ScaleDown) and empty in a.nodes for a in _actions(app)) is removed
    if not removed:
        assert poll.plan.kept[empty].code == reasons.DISRUPTION_BUDGET and empty in poll.plan.unneeded


def test_a_proposal_that_cannot_be_asked_for_takes_no_budget_room() -> None:
    app = _app(DISRUPTION_BUDGETS="nodes=1&reasons=Replace,Drifted")
    nowhere = ReplacementProposal((("pool-a000001", GROUP),), REPLACE, "rg-sandbox-nodes/nope", 1)
    decided = _propose(app, nowhere, _drift())
    assert decided.admitted == (_drift(),)
    assert "not a discovered node group" in decided.refused["pool-a000001"]
