"""Removals only from our own decisions: scale-down messages no utilisation poll decided, and replayed steps.

Written as the attack of someone who can write to the action queue, on both apps of test_executor.py. Each
asserts that nothing was touched (no cordon, no taint, no eviction, no ARM write, no reservation taken or
kept) and that an outcome was recorded (a ledger row, a ScaleDownFailed event).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from tests.shared.services.test_executor import (  # noqa: F401 (make: fixture)
    GROUP,
    App,
    MakeApp,
    _node_of,
    _render,
    make,
    scale_down,
)
from tests.shared.services.decided import as_the_poll_decided


def _untouched(app: App, *nodes: str) -> None:
    """No node cordoned or tainted, no pod evicted, no instance deleted, nothing reserved or queued."""
    for name in nodes:
        node = app.context.ports.cluster.get_node(name)
        assert node is not None and not node.unschedulable and not node.is_being_deleted, name
    assert app.world.report()["running_pods_evicted"] == 0
    assert app.arm_calls("POST delete") == 0 and app.arm_calls("POST deallocate") == 0
    assert app.context.ports.state.get_group(GROUP).removing == {}
    assert app.queued() == []


def _refusal_recorded(app: App, action_id: str, node: str, words: str) -> None:
    entry = app.context.ports.state.get_ledger_entry(action_id)
    assert entry is not None and entry.status == "done", entry
    assert entry.outcome.startswith(("skipped", "rejected")) and words in entry.outcome, entry.outcome
    failed = [e for e in app.events("default") if e.reason == "ScaleDownFailed" and e.name == node]
    assert failed and words in failed[-1].message, failed


# -- a forged first step -------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["busy", "idle"])
def test_a_forged_first_step_for_a_node_no_poll_reserved_touches_nothing(make: MakeApp, which: str) -> None:
    """The probe's attack: a fresh id, step cordon, naming the node of a running web pod (3 of 3.86 CPU)."""
    app = make()
    busy, idle = app.busy_and_idle()
    node = busy if which == "busy" else idle[0]

    result = app.run(scale_down(app, node, decided=False))

    assert result.outcome == "skipped" and "no utilisation poll decided to remove it" in result.detail
    _untouched(app, busy, *idle)
    _refusal_recorded(app, f"down-{node}", node, "not reserved for action")
    assert app.node_names() == sorted([busy, *idle])


def test_a_forged_first_step_for_a_node_the_poll_reserved_for_another_action_leaves_it_to_that_action(
    make: MakeApp,
) -> None:
    app = make()
    _, idle = app.busy_and_idle()
    assert as_the_poll_decided(app.context.ports, GROUP, [idle[0]], "decided-1", now=app.clock.now()) == {idle[0]}

    result = app.run(scale_down(app, idle[0], decided=False))

    assert result.outcome == "skipped" and "removal already in progress by action decided-1" in result.detail
    assert app.context.ports.state.get_group(GROUP).removing == {idle[0]: "decided-1"}  # the poll's stands
    node = app.context.ports.cluster.get_node(idle[0])
    assert node is not None and not node.unschedulable
    assert app.world.report()["running_pods_evicted"] == 0 and app.arm_calls("POST delete") == 0


# -- a forged later step -------------------------------------------------------------------------------------

@pytest.mark.parametrize("step", ["drain", "delete", "confirm"])
def test_a_forged_later_step_with_no_action_of_ours_behind_it_touches_nothing(make: MakeApp, step: str) -> None:
    app = make()
    busy, idle = app.busy_and_idle()

    result = app.run(scale_down(app, busy, decided=False, step=step, attempt=3))

    assert result.outcome == "rejected" and "no ledger entry" in result.detail
    assert len(app.poison()) == 1  # for an operator to see
    _untouched(app, busy, *idle)
    _refusal_recorded(app, f"down-{busy}", busy, "no ledger entry")


def test_a_forged_later_step_of_a_real_removal_naming_another_node_touches_nothing(make: MakeApp) -> None:
    """The id of a removal the poll decided (so a ledger row exists), its drain step naming the busy node."""
    app = make()
    busy, idle = app.busy_and_idle()
    assert app.run(scale_down(app, idle[0])).outcome == "waiting"  # cordoned: the drain step is queued
    [drain] = app.queued()
    app.clear_queue()
    instance = app.provider_id(busy).rsplit("/", 1)[-1]
    forged = {**drain, "nodes": [{"name": busy, "instance": instance, "provider_id": app.provider_id(busy)}],
              "attempt": 1}

    result = app.run(json.dumps(forged))

    assert result.outcome == "rejected" and f"node {busy} is not one this removal decided on" in result.detail
    node = app.context.ports.cluster.get_node(busy)
    assert node is not None and not node.unschedulable and not node.is_being_deleted
    assert busy not in app.context.ports.state.get_group(GROUP).removing
    assert app.world.report()["running_pods_evicted"] == 0 and app.arm_calls("POST delete") == 0
    assert any(e.reason == "ScaleDownFailed" and e.name == busy for e in app.events("default"))


# -- a reserved node whose rules no longer hold --------------------------------------------------------------

NO_LONGER = [
    # (case, which node, unneeded for (None: no row), what the refusal says)
    ("unneeded too briefly", "idle", timedelta(minutes=1), "unneeded for 60s of"),
    ("never found unneeded", "idle", None, "no unneeded-since record"),
    ("busy again", "busy", timedelta(days=1), "no longer underutilised: cpu utilization 0.80"),
]


@pytest.mark.parametrize("case,which,unneeded_for,words", NO_LONGER, ids=[c[0] for c in NO_LONGER])
def test_a_reserved_node_the_poll_rules_no_longer_allow_removing_is_given_back_untouched(
    make: MakeApp, case: str, which: str, unneeded_for: timedelta | None, words: str,
) -> None:
    app = make()
    ports, now = app.context.ports, app.clock.now()
    busy, idle = app.busy_and_idle()
    node = busy if which == "busy" else idle[0]
    if unneeded_for is not None:
        ports.state.set_unneeded(node, now - unneeded_for)
    text = scale_down(app, node, decided=False)
    assert ports.state.get_group(GROUP).removing == {}
    from shared.services.reconcile import reserve_decided

    assert reserve_decided(ports, GROUP, [node], f"down-{node}") == {node}  # as the poll does, without its rules

    result = app.run(text)

    assert result.outcome == "skipped" and words in result.detail, result.detail
    _untouched(app, busy, *idle)  # the reservation is released too
    _refusal_recorded(app, f"down-{node}", node, words)


# -- a replayed step -----------------------------------------------------------------------------------------

def test_a_replayed_drain_with_an_old_start_time_does_not_run_out_batch_drain_timeout(make: MakeApp) -> None:
    """The drain step's start is our ledger's: a replay claiming the step began hours ago evicts nothing early."""
    app = make(workloads=(_render("2h"),), settings={"BATCH_DRAIN_TIMEOUT": "30m"})
    node = _node_of(app, "render")
    assert app.run(scale_down(app, node)).outcome == "waiting"  # cordon
    [drain] = app.queued()
    app.clear_queue()
    app.clock.advance(60)
    assert "batch pod" in app.run(json.dumps(drain)).detail  # the drain's first run starts its clock
    started = app.clock.now()
    [again] = app.queued()
    app.clear_queue()
    entry = app.context.ports.state.get_ledger_entry(again["id"])
    assert entry is not None and entry.step_started_at == started

    app.clock.advance(60)
    replayed: dict[str, Any] = {**again, "attempt": again["attempt"] + 5,
                                "step_started_at": (started - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    result = app.run(json.dumps(replayed))

    assert result.outcome == "waiting" and "waiting for 1 batch pod(s)" in result.detail
    assert app.world.report()["running_pods_evicted"] == 0  # the Job's pod runs on
    entry = app.context.ports.state.get_ledger_entry(again["id"])
    assert entry is not None and entry.step_started_at == started
    [follow] = app.queued()
    assert follow["step"] == "drain"  # and the node is still draining, nothing deleted
    assert app.arm_calls("POST delete") == 0
