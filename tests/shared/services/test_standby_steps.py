"""The standby refill on in-memory ports over a real world: the utilisation poll enqueues one refill for a quiet
group short of its standby; its steps create instances, wait for their nodes, cordon and deallocate them into
GroupState.stopped; a repeated or crashed delivery never grows twice; a scale-up starts them again as fresh,
uncordoned nodes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shared.actions import decode_action
from shared.domain import TO_BE_DELETED_TAINT
from shared.services.executor import Executor
from shared.services.standby_refill import REFILL_PREFIX
from shared.services.utilization import run_utilization_poll
from tests.shared.services.standby_world import GROUP, run_executor, standby_scenario
from tests.memory_app import MemoryApp, memory_app

STANDBY = 2


def _app(standby: int = STANDBY) -> MemoryApp:
    return memory_app(standby_scenario({"autoscaler-standby": str(standby)}),
                      settings={"STEP_RETRY_DELAY": "10s", "SCALE_DOWN_UNNEEDED_TIME": "10m"})


def _refills(texts: list[str]) -> list[str]:
    return [t for t in texts if json.loads(t).get("kind") == "refill_standby"]


def _poll(app: MemoryApp) -> list[str]:
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    return _refills(app.queued())


def _stopped(app: MemoryApp) -> frozenset[str]:
    return app.ports.state.get_group(GROUP).stopped


def _instances(app: MemoryApp) -> dict[str, str]:
    (group,) = app.ports.provider.list_node_groups()
    return {i.instance_id: i.power_state for i in app.ports.provider.list_instances(group, power_state=True)}


def test_a_quiet_group_short_of_its_standby_gets_one_refill_and_ends_with_it_parked() -> None:
    app = _app()
    (text,) = _poll(app)
    action = decode_action(text)
    assert action.group == GROUP and action.id.startswith(REFILL_PREFIX) and action.count == STANDBY
    outcomes = run_executor(app, seconds=300)
    assert outcomes[-1] == "succeeded", outcomes
    stopped = _stopped(app)
    assert len(stopped) == STANDBY
    powers = _instances(app)
    assert all(powers[i] in ("deallocating", "deallocated") for i in stopped)
    # No node of a parked instance is left behind, and every node left runs uncordoned.
    nodes = app.ports.cluster.list_nodes()
    assert len(nodes) == 1 and not nodes[0].is_being_deleted and not nodes[0].unschedulable
    state = app.ports.state.get_group(GROUP)
    assert not state.removing and not state.committed and set(state.stopped_at) == stopped
    assert app.ports.state.get_limit_reservations().reservations == {}
    assert [e.reason for e in app.events() if e.reason.startswith("Standby")] == ["StandbyRefilled"]
    # Full: the next poll enqueues nothing.
    app.clear_queue()
    assert _poll(app) == []


def test_one_refill_in_flight_per_group() -> None:
    app = _app()
    assert len(_poll(app)) == 1
    run_executor(app, seconds=20)  # grow ran: the refill is in flight
    app.clear_queue()
    app.clock.advance(60)
    assert _poll(app) == []


def test_a_group_without_standby_is_never_refilled() -> None:
    app = _app(standby=0)
    assert _poll(app) == []


@pytest.mark.parametrize("repeat_step", ["grow", "registered", "park"])
def test_a_delivery_repeated_after_its_step_ran_changes_nothing(repeat_step: str) -> None:
    """At-least-once delivery: each step's message delivered twice; the second is a duplicate."""
    app = _app()
    (text,) = _poll(app)
    app.take_queued()
    executor = Executor(app.ports, app.settings)
    pending, seen = [text], set()
    for _ in range(60):
        app.clock.advance(10)
        for message in [*pending, *app.take_queued()]:
            first = executor.execute(message, now=app.clock.now())
            step = decode_action(message).step
            if step == repeat_step and step not in seen:
                seen.add(step)
                assert executor.execute(message, now=app.clock.now()).outcome == "duplicate"
            assert first.outcome in ("waiting", "succeeded"), first
        pending = []
    assert len(_stopped(app)) == STANDBY
    assert len(_instances(app)) == 1 + STANDBY  # grown once


def test_a_crash_after_the_resize_is_repeated_without_growing_twice() -> None:
    """The grow step's delivery dies after ARM accepted the resize: its redelivery finds the instances."""
    app = _app()
    (text,) = _poll(app)
    app.take_queued()
    executor = Executor(app.ports, app.settings)
    resize = app.ports.provider.begin_resize

    def crash_after(group, capacity):  # type: ignore[no-untyped-def]
        resize(group, capacity)
        raise RuntimeError("the host died after the resize")

    app.ports.provider.begin_resize = crash_after  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        executor.execute(text, now=app.clock.now())
    app.ports.provider.begin_resize = resize  # type: ignore[method-assign]
    app.clear_queue()
    assert executor.execute(text, now=app.clock.now()).outcome == "waiting"  # released: the redelivery runs
    run_executor(app, seconds=300)
    assert len(_stopped(app)) == STANDBY
    assert len(_instances(app)) == 1 + STANDBY


def test_a_scale_up_starts_the_standby_as_fresh_uncordoned_nodes() -> None:
    scenario = standby_scenario({"autoscaler-standby": str(STANDBY)})
    scenario["workloads"] = [{"name": "burst", "kind": "Job", "count": 2, "at": "6m",
                              "requests": {"cpu": "3", "memory": "1Gi"}, "duration": "20m"}]
    app = memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s", "SCALE_DOWN_UNNEEDED_TIME": "10m"})
    for _ in range(33):  # to 5.5 minutes: the standby refilled before the burst
        app.tick(10)
    stopped = _stopped(app)
    assert len(stopped) == STANDBY
    for _ in range(24):  # the burst at 6 minutes, 4 minutes to run
        app.tick(10)
    started = stopped - _stopped(app)
    assert started, "the scale-up started no standby instance"
    nodes = app.ports.cluster.list_nodes()
    assert len(nodes) == 1 + len(started)
    assert all(not n.unschedulable and TO_BE_DELETED_TAINT not in {t.key for t in n.taints} for n in nodes)
    pods = [p for p in app.ports.cluster.list_pods() if p.namespace == "default" and p.name.startswith("burst")]
    assert len(pods) == 2 and all(p.node_name for p in pods)


def test_pending_pods_planned_onto_the_group_hold_its_refill_back() -> None:
    scenario = standby_scenario({"autoscaler-standby": str(STANDBY)})
    scenario["workloads"] = [{"name": "wave", "kind": "Job", "count": 3, "at": "0s",
                              "requests": {"cpu": "3", "memory": "1Gi"}, "duration": "10m"}]
    app = memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s"})
    app.clock.advance(5)
    assert _poll(app) == []  # the pods need the group's new nodes: demand first, standby after


@pytest.mark.parametrize("initial,expected", [(1, STANDBY), (2, STANDBY - 1), (3, 0), (5, 0)])
def test_idle_nodes_scale_down_may_take_count_as_standby_to_be(initial: int, expected: int) -> None:
    """Idle nodes above the minimum are deallocated into the standby when removed: a refill creates only the rest."""
    scenario = standby_scenario({"autoscaler-standby": str(STANDBY)})
    scenario["node_groups"][0]["initial"] = initial
    app = memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s"})
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())  # the idle nodes are seen unneeded
    app.clear_queue()
    app.clock.advance(60)
    counts = [decode_action(t).count for t in _poll(app)]
    assert counts == ([expected] if expected else [])


def test_an_instance_a_scale_up_starts_while_it_boots_is_given_back_as_capacity() -> None:
    app = _app()
    _poll(app)
    run_executor(app, seconds=20)  # grown and listed stopped
    stopped = sorted(_stopped(app), key=int)
    assert len(stopped) == STANDBY
    taken = stopped[0]
    # What the scale-up's resize step does to a standby instance it starts: off the list.
    state = app.ports.state.get_group(GROUP)
    assert app.ports.state.update_group(replace(state, stopped=state.stopped - {taken}))
    outcomes = run_executor(app, seconds=300)
    assert outcomes[-1] == "succeeded", outcomes
    assert _stopped(app) == frozenset(stopped[1:])
    nodes = {n.name: n for n in app.ports.cluster.list_nodes()}
    (kept,) = [n for n in nodes.values() if n.provider_id.endswith(f"/virtualMachines/{taken}")]
    assert not kept.unschedulable and not kept.is_being_deleted
    assert not app.ports.state.get_group(GROUP).removing


def test_a_crash_after_the_deallocation_call_is_repeated_safely() -> None:
    """The park step's delivery dies after ARM accepted the deallocation: its redelivery deallocates again
    (idempotent) and ends with the instances listed once and no node left behind."""
    app = _app()
    _poll(app)
    executor = Executor(app.ports, app.settings)
    deallocate = app.ports.provider.begin_deallocate_instances
    crashed: list[str] = []

    def crash_once(group, ids):  # type: ignore[no-untyped-def]
        operation = deallocate(group, ids)
        if not crashed:
            crashed.append(",".join(ids))
            raise RuntimeError("the host died after the deallocation call")
        return operation

    app.ports.provider.begin_deallocate_instances = crash_once  # type: ignore[method-assign]
    outcomes = []
    for _ in range(40):
        app.clock.advance(10)
        for text in app.take_queued():
            try:
                outcomes.append(executor.execute(text, now=app.clock.now()).outcome)
            except RuntimeError:
                app.ports.queue.send(decode_action(text))  # the host's redelivery of the same message
    assert crashed and outcomes[-1] == "succeeded", outcomes
    assert len(_stopped(app)) == STANDBY
    assert len(app.ports.cluster.list_nodes()) == 1  # the group's own node; no parked one left behind
    assert not app.ports.state.get_group(GROUP).removing and not app.ports.state.get_group(GROUP).committed


def test_with_dry_run_the_refill_is_decided_and_recorded_and_nothing_changes() -> None:
    app = memory_app(standby_scenario({"autoscaler-standby": str(STANDBY)}), settings={"DRY_RUN": "true"})
    (text,) = _poll(app)
    assert run_executor(app, seconds=30) == ["dry-run"]
    (group,) = app.ports.provider.list_node_groups()
    assert group.capacity == 1 and _stopped(app) == frozenset()
