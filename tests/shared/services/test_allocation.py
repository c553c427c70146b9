"""Asynchronous allocation failures through the services: instances a successful capacity increase left Failed are
found by the next pending poll, deleted, their offering marked (or the group backed off), reported as
cluster-autoscaler reports OutOfResources, and their pods planned onto the next group in that same poll.
In-memory ports over the sandbox's world (the `allocation-failure` scenario)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.actions import ScaleUp, decode_message
from shared.engine.offerings import OUT_OF_RESOURCES
from shared.services.allocation import SCALE_UP_FAILED
from shared.services.executor import Executor
from shared.services.pending import PendingPollResult, run_pending_poll
from tests.memory_app import MemoryApp, memory_app

SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s"}
SCENARIO = Path(__file__).parents[3] / "sandbox" / "scenarios" / "allocation-failure.json"
D4, E4 = "rg-sandbox-nodes/pool-d4", "rg-sandbox-nodes/pool-e4"


def _scenario(**changes: Any) -> dict[str, Any]:
    doc = json.loads(SCENARIO.read_text())
    doc.pop("expect_at_least"), doc.pop("expect_at_most")
    return {**doc, **changes}


def _scale_ups(texts: list[str]) -> dict[str, int]:
    actions = [decode_message(t) for t in texts]
    return {a.group: a.target_size for a in actions if isinstance(a, ScaleUp) and a.step == "resize"}


def _until_failed(app: MemoryApp, *, polls: int = 30) -> tuple[PendingPollResult, list[str]]:
    """Poll every 10 s, executing what each poll decides, until a poll sees a failed allocation: that poll's
    result, and what it enqueued (before anything executes it)."""
    executor = Executor(app.ports, app.settings)
    for _ in range(polls):
        app.clock.advance(10)
        result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
        if result.failed_allocations:
            return result, app.take_queued()
        for _ in range(10):  # the actions to their end (confirm steps come back through the queue)
            texts = app.take_queued()
            if not texts:
                break
            for text in texts:
                executor.execute(text, now=app.clock.now())
    raise AssertionError("no poll saw a failed allocation")


def _run_to_end(app: MemoryApp, *, seconds: int) -> None:
    executor = Executor(app.ports, app.settings)
    for _ in range(seconds // 10):
        for text in app.take_queued():
            executor.execute(text, now=app.clock.now())
        app.clock.advance(10)
        run_pending_poll(app.ports, app.settings, now=app.clock.now())


@pytest.mark.parametrize(("code", "kind"), [
    ("ZonalAllocationFailed", "zonal-allocation"),
    ("AllocationFailed", "allocation"),
    ("OverconstrainedAllocationRequest", "overconstrained"),
])
def test_failed_instances_are_deleted_marked_and_their_pods_planned_elsewhere_in_the_same_poll(
        code: str, kind: str) -> None:
    app = memory_app(_scenario(allocation_failures=[{"scale_set": "pool-d4", "code": code}]), settings=SETTINGS)
    result, enqueued = _until_failed(app)
    [failure] = result.failed_allocations
    assert failure.group_id == D4 and failure.code == code  # the code read from the instance view
    # Deleted at once: a Failed instance bills and holds quota.
    deleted = app.world.counters.instances_deleted
    assert {f"pool-d4/{i}" for i in failure.instance_ids} <= {k for k, n in deleted.items() if n}
    # The offering marked as a synchronous refusal with this code marks it, with the same lifetime.
    [mark] = app.ports.state.list_offerings()
    assert (mark.kind, mark.code, mark.key.name, mark.key.zone) == (kind, code, "standard_d4s_v5", "1")
    assert mark.until - mark.since == app.settings.unavailable_offering_ttl.of(kind)
    # The same poll plans the pods onto the next group, and never onto the failed one.
    ups = _scale_ups(enqueued)
    assert E4 in ups and D4 not in ups, ups
    # Reported as cluster-autoscaler reports it (clusterstate's ScaleUpFailed, class OutOfResource).
    [event] = [e for e in app.events() if e.reason == SCALE_UP_FAILED]
    assert event.type == "Warning" and event.kind == "ConfigMap"
    assert f"due to {OUT_OF_RESOURCES}.{code}" in event.message and D4 in event.message
    # A marked offering is no backoff (as for a synchronous refusal): the mark alone keeps the group out.
    state = app.ports.state.get_group(D4)
    assert state.backoff_until is None and state.backoff_reason == code
    _run_to_end(app, seconds=600)
    report = app.world.report()
    assert report["allocation"]["failed_at_end"] == 0
    assert report["pods_pending"] == 0 and report["pods_killed"] == 0


def test_a_failure_whose_code_is_not_about_an_offering_backs_the_group_off() -> None:
    app = memory_app(_scenario(allocation_failures=[{"scale_set": "pool-d4", "code": "InternalOperationError"}]),
                     settings=SETTINGS)
    result, enqueued = _until_failed(app)
    assert [f.code for f in result.failed_allocations] == ["InternalOperationError"]
    assert app.ports.state.list_offerings() == []  # nothing to mark
    state = app.ports.state.get_group(D4)
    assert state.backoff_until is not None and state.backoff_reason == "InternalOperationError"
    ups = _scale_ups(enqueued)
    assert E4 in ups and D4 not in ups, ups  # backed off: its pods go elsewhere now all the same


def test_a_second_poll_before_the_delete_lands_records_nothing_twice() -> None:
    app = memory_app(_scenario(), settings=SETTINGS)
    result, _ = _until_failed(app)
    first = app.ports.state.get_group(D4)
    again = run_pending_poll(app.ports, app.settings, now=app.clock.now())  # the delete asked, not yet done
    assert app.ports.state.get_group(D4).last_failure == first.last_failure
    assert len([e for e in app.events() if e.reason == SCALE_UP_FAILED]) == 1
    assert len(app.ports.state.list_offerings()) == 1
    assert not again.failed_allocations or again.failed_allocations == result.failed_allocations


def test_dry_run_deletes_and_marks_nothing_and_a_real_poll_then_does() -> None:
    app = memory_app(_scenario(), settings=SETTINGS)
    executor = Executor(app.ports, app.settings)
    while D4 not in _scale_ups(app.queued()):  # until a poll decides to grow pool-d4
        app.clock.advance(10)
        run_pending_poll(app.ports, app.settings, now=app.clock.now())
    for _ in range(5):
        for text in app.take_queued():
            executor.execute(text, now=app.clock.now())
    app.clock.advance(120)  # past provisioning, no poll meanwhile: its new instances are Failed now
    dry = run_pending_poll(app.ports, replace(app.settings, dry_run=True), now=app.clock.now())
    assert dry.failed_allocations  # seen and said
    assert sum(app.world.counters.instances_deleted.values()) == 0
    assert app.ports.state.list_offerings() == []
    real = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert real.failed_allocations == dry.failed_allocations
    assert sum(app.world.counters.instances_deleted.values()) == len(real.failed_allocations[0].instance_ids)


def test_no_instance_is_listed_while_no_group_is_growing_and_no_view_is_read_while_none_failed() -> None:
    app = memory_app(_scenario(allocation_failures=[]), settings=SETTINGS)
    calls = lambda name: int(app.world.report()["api_calls"]["breakdown"]["arm"].get(name, 0))  # noqa: E731
    for _ in range(2):  # before the Jobs arrive: nothing pending, nothing growing
        app.clock.advance(10)
        run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert calls("LIST virtualMachines") == 0
    _run_to_end(app, seconds=300)  # grown, booted, running: no instance ever Failed
    assert calls("GET virtualMachines") == 0


# --- A scale-up whose capacity ARM took back, seen by a poll before the executor records it ---------------------------

SPOT_FALLBACK = SCENARIO.parent / "spot-fallback.json"
SPOT, ON_DEMAND = "rg-sandbox-nodes/pool-spot", "rg-sandbox-nodes/pool-od"


def _spot_storm(*, failing: bool = True) -> dict[str, Any]:
    """spot-fallback with its spot refusals late: every spot increase is accepted and its operation fails
    (SkuNotAvailable) five seconds later, when ARM takes the capacity back; `failing` False: spot is plentiful."""
    doc = json.loads(SPOT_FALLBACK.read_text())
    doc.pop("expect_at_least"), doc.pop("expect_at_most")
    failures = [{"scale_set": "pool-spot", "code": "SkuNotAvailable", "count": 5}] if failing else []
    return {**doc, "spot_capacity": [], "scale_up_failures": failures}


def _spot_requests(app: MemoryApp) -> list[dict[str, Any]]:
    """The capacity increases of pool-spot Azure was asked for, with their outcome."""
    return [e for e in app.world.report()["spot"]["capacity_increases"] if e["scale_set"] == "pool-spot"]


def test_a_poll_between_the_arm_failure_and_the_executors_record_does_not_ask_again() -> None:
    app = memory_app(_spot_storm(), settings=SETTINGS)
    executor = Executor(app.ports, app.settings)
    app.clock.advance(65)  # every Job pending
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    first = app.take_queued()
    assert _scale_ups(first) == {SPOT: 6}
    for text in first:
        executor.execute(text, now=app.clock.now())  # accepted: capacity 6, its operation in flight
    confirm = app.take_queued()  # the confirm step, not yet run
    app.clock.advance(6)  # the operation failed and ARM took the capacity back; nothing recorded yet
    spot = app.ports.provider.get_node_group(SPOT)
    assert spot is not None and spot.capacity == 0
    assert app.ports.state.list_offerings() == [] and app.ports.state.get_group(SPOT).backoff_reason == ""
    race = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert SPOT not in _scale_ups(app.queued())  # the same increase is not asked for again
    assert len(race.plan.absorbed) == 12  # its pods wait on the nodes still the action's to bring or to fail
    # ... and the group shows why on the status ConfigMap, as a group in backoff does.
    status_map = app.ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status") or {}
    status = yaml.safe_load(status_map["status"])
    [shown] = [g for g in status["nodeGroups"] if g["name"] == "pool-spot"]
    assert shown["scaleUp"]["status"] == "Backoff" and "taken back by Azure" in shown["scaleUp"]["backoffInfo"]["errorMessage"]
    assert len(_spot_requests(app)) == 1
    # The executor records the failure: the offering marked, the pods re-planned onto on demand at once.
    for text in confirm:
        executor.execute(text, now=app.clock.now())
    assert _scale_ups(app.queued()) == {ON_DEMAND: 6}
    assert [m.kind for m in app.ports.state.list_offerings()] == ["spot-capacity"]
    assert app.ports.state.get_limit_reservations().reservations.keys() <= {
        decode_message(t).id for t in app.queued()}  # the failed action holds no room any more
    assert [e["outcome"] for e in _spot_requests(app)] == ["SkuNotAvailable"]  # refused once, not twice


def _write_not_made_yet(app: MemoryApp, text: str) -> None:
    """The resize step up to its capacity write: claimed in the ledger and its room reserved, no PATCH yet."""
    from shared.services import ledger, limit_reservations

    action = decode_message(text)
    assert isinstance(action, ScaleUp)
    assert ledger.claim(app.ports.state, action, now=app.clock.now(), lease=app.settings.action_lease) is not None
    group = app.ports.provider.get_node_group(action.group)
    assert group is not None
    limit_reservations.reserve(app.ports, app.settings, action_id=action.id, group=group, target=action.target_size,
                               now=app.clock.now())


def _ended_without_giving_back(app: MemoryApp, text: str) -> None:
    """An action that recorded its outcome but whose reservation was never given back (it lapses by itself)."""
    from shared.services import ledger

    _write_not_made_yet(app, text)
    entry = app.ports.state.get_ledger_entry(decode_message(text).id)
    assert entry is not None
    ledger.update(app.ports.state, entry, status="done", outcome="skipped: test", updated_at=app.clock.now())


def _written(app: MemoryApp, text: str) -> None:
    Executor(app.ports, app.settings).execute(text, now=app.clock.now())  # capacity written, operation in flight
    app.take_queued()


@pytest.mark.parametrize(("moment", "counted"), [
    (_written, True),  # the capacity shows the increase
    (_write_not_made_yet, True),  # the capacity does not show it yet: on its way all the same, the group not blocked
    (_ended_without_giving_back, False),  # a reservation left behind by an ended action holds nothing
])
def test_a_healthy_group_grows_on_while_its_scale_up_is_in_flight(moment: Any, counted: bool) -> None:
    app = memory_app(_spot_storm(failing=False), settings=SETTINGS)
    app.clock.advance(40)  # the first Jobs pending
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    [first] = app.take_queued()
    asked = _scale_ups([first])[SPOT]
    assert 0 < asked < 6
    moment(app, first)
    app.clock.advance(25)  # every Job pending: more than the first increase holds
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    # The pods beyond the first increase go to the same group: it grows on, to the size all 12 need, from the first
    # increase's nodes while that action is going (counted once: neither asked for twice nor lost).
    assert [(i.group_id, i.current_target, i.new_target) for i in result.plan.increases] == [
        (SPOT, asked if counted else 0, 6)]
