"""The queue contract: a message is a request, never an order (issue 14, items 7-10).

A follow-up step is held to what the ledger recorded of its decision, limits are re-checked when a
scale-up runs, a message cannot extend its own life, ARM faults are retried to a deadline and end as a
recorded failure, and the last delivery of a failing step records an outcome before the host poisons it.

On both apps of test_executor.py: `real` (the sandbox and Azurite, as the executor runs in Azure) and
`memory` (in-memory ports over an in-process world); the tests that inject faults into the sandbox
server's HTTP answers take `real_app`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.actions import MAX_MESSAGE_CHARS, encode_action
from shared.services.executor import HOST_MAX_DEQUEUE_COUNT, TRANSIENT_FAULT_DEADLINE, Executor
from tests.shared.services.test_executor import (  # noqa: F401 (app, make, real_app: fixtures)
    GROUP, App, MakeApp, app, make, real_app, scale_down, scale_up)

ROOT_HOST_JSON = "host.json"


def _next(app: App) -> dict[str, Any]:
    """The one message the last step enqueued, taken off the queue."""
    [message] = app.queued()
    app.clear_queue()
    return message


class _Recorder:
    """The action queue, also remembering what was sent: a delayed message is invisible to a peek."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self.sent: list[Any] = []

    def send(self, action: Any, *, delay: timedelta = timedelta(0)) -> None:
        self.sent.append(action)

    def send_poison(self, text: str) -> None:
        self._queue.send_poison(text)


def _walker(app: App) -> tuple[Executor, _Recorder]:
    recorder = _Recorder(app.context.ports.queue)
    return Executor(replace(app.context.ports, queue=recorder), app.context.settings), recorder


def _deleted(app: App) -> dict[str, int]:
    return dict(app.arm().get("instances_deleted", {}))


def _cordoned_drain(app: App) -> tuple[str, str, dict[str, Any]]:
    """An idle node cordoned for removal; (its name, another idle node, the drain step's message)."""
    _, idle = app.busy_and_idle()
    assert app.run(scale_down(app, idle[0])).outcome == "waiting"
    return idle[0], idle[1], _next(app)


# -- 7. removal targets come from our own record ----------------------------------------------------------

def _target(app: Any, node: str) -> dict[str, str]:
    provider_id = app.provider_id(node)
    return {"name": node, "instance": provider_id.rsplit("/", 1)[-1], "provider_id": provider_id}


FORGERIES = [
    ("another instance's providerID",
     lambda app, other, m: {**m, "nodes": [{**m["nodes"][0], "provider_id": app.provider_id(other)}]},
     "decided on"),
    ("another node", lambda app, other, m: {**m, "nodes": [_target(app, other)]}, "not one this removal decided on"),
    ("a node added", lambda app, other, m: {**m, "nodes": [*m["nodes"], _target(app, other)]},
     "not one this removal decided on"),
    ("another instance", lambda app, other, m: {**m, "nodes": [{**m["nodes"][0], "instance": "99"}]},
     "named with instance '99'"),
    ("another group", lambda app, other, m: {**m, "group": "rg-exec/elsewhere"}, "the action recorded is"),
]


@pytest.mark.parametrize("step", ["drain", "delete", "confirm"])
@pytest.mark.parametrize("case_id,forge,reason", FORGERIES, ids=[c[0] for c in FORGERIES])
def test_a_follow_up_naming_anything_the_decision_did_not_is_refused_and_deletes_nothing(
    app: App, case_id: str, forge: Any, reason: str, step: str
) -> None:
    node, other, drain = _cordoned_drain(app)
    forged = forge(app, other, {**drain, "step": step})

    result = app.run(json.dumps(forged))

    assert result.outcome == "rejected" and reason in result.detail
    assert _deleted(app) == {}
    assert [json.loads(text) for text in app.poison()] == [forged]
    refused = [e for e in app.context.ports.state.list_ledger() if "#refused-" in e.action_id]
    assert len(refused) == 1 and refused[0].outcome.startswith("rejected: refused:")
    assert _events(app, "ScaleDownFailed") == [m["name"] for m in forged["nodes"] if "name" in m] or \
        case_id == "another group"
    # The true next step still runs: the forgery took nothing from it.
    assert app.run(json.dumps(drain)).outcome in ("waiting", "succeeded")
    assert app.context.ports.state.get_group(GROUP).removing.get(node) == drain["id"]


def _events(app: App, reason: str) -> list[str]:
    """The names of the objects the cluster's events of this reason are about."""
    return [e.name for e in app.events("default") if e.reason == reason]


def test_a_forged_scale_up_confirm_cannot_change_what_a_failure_returns_to(app: App) -> None:
    assert app.run(scale_up(app, 5)).outcome == "waiting"
    confirm = _next(app)
    forged = {**confirm, "from_size": 1}

    result = app.run(json.dumps(forged))

    assert result.outcome == "rejected" and "from_size" in result.detail
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 5
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 1


# -- 8. limits re-checked at execution; a message cannot extend its life ------------------------------------

@pytest.mark.parametrize("settings,expected,outcome", [
    ({"MAX_NODES_TOTAL": "4"}, 4, "waiting"),  # 3 nodes now: one more fits of the two asked for
    ({"MAX_NODES_TOTAL": "3"}, 3, "skipped"),  # the cluster is already at the limit
    ({"MAX_NODES_PER_SCALE_UP": "1"}, 4, "waiting"),
    ({"CORES_TOTAL": "0:12"}, 3, "skipped"),  # 3 nodes of 4 whole cores: 12 cores used
])
def test_a_scale_up_is_shrunk_or_refused_by_limits_as_they_are_when_it_runs(
    make: MakeApp, settings: dict[str, str], expected: int, outcome: str,
) -> None:
    app = make(settings=settings)

    result = app.run(scale_up(app, 5))

    assert result.outcome == outcome, result.detail
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == expected
    if outcome == "skipped":
        assert app.arm_calls("PATCH virtualMachineScaleSets") == 0
        assert "reached at execution" in result.detail


def test_expires_at_never_reaches_past_action_ttl_from_creation(app: App) -> None:
    ttl = app.context.settings.action_ttl
    text = scale_up(app, 4)
    body = json.loads(text)
    body["expires_at"] = (datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
                          + timedelta(days=30)).isoformat()
    app.clock.advance(ttl.total_seconds() + 1)

    result = app.run(json.dumps(body))

    assert result.outcome == "rejected" and "expired" in result.detail
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0
    assert app.poison() == []  # stale, not malicious: dropped with a ledger outcome
    [entry] = app.context.ports.state.list_ledger()
    assert "expired" in entry.outcome


def test_an_action_created_in_the_future_is_refused(app: App) -> None:
    body = json.loads(scale_up(app, 4))
    created = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00")) + timedelta(days=1)
    body.update(created_at=created.isoformat(), expires_at=(created + timedelta(minutes=5)).isoformat())

    result = app.run(json.dumps(body))

    assert result.outcome == "rejected" and "in the future" in result.detail
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0


# -- 9. transient faults never poison ---------------------------------------------------------------------

def test_fifty_seconds_of_arm_5xx_are_waited_out_and_the_scale_up_completes(real_app: App) -> None:
    app = real_app  # real only: the 503s are injected into the sandbox server's HTTP answers
    executor, queue = _walker(app)
    fault = app.world.inject_fault(("arm", "*", "*"), status=503, code="ServiceUnavailable", count=10_000)
    result = executor.execute(scale_up(app, 4), now=app.clock.now())
    waited = 0
    while waited < 50:
        assert result.outcome == "waiting" and "ARM fault" in result.detail, result
        app.clock.advance(10)
        waited += 10
        result = executor.execute(encode_action(queue.sent[-1]), now=app.clock.now())
    fault.remaining = 0  # ARM recovers
    while result.outcome == "waiting":
        app.clock.advance(10)
        result = executor.execute(encode_action(queue.sent[-1]), now=app.clock.now())

    assert result.outcome == "succeeded", result
    assert app.poison() == []
    [entry] = app.context.ports.state.list_ledger()
    assert entry.outcome.startswith("succeeded") and entry.faulted_since is None
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 4


def test_arm_faults_past_the_deadline_end_a_removal_as_a_recorded_failure_with_its_node_given_back(
    real_app: App,
) -> None:
    app = real_app  # real only: the 500s are injected into the sandbox server's HTTP answers
    node, _, drain = _cordoned_drain(app)
    executor, queue = _walker(app)
    app.world.inject_fault(("arm", "*", "*"), status=500, code="InternalServerError", count=100_000)
    result = executor.execute(json.dumps(drain), now=app.clock.now())
    while result.outcome == "waiting":
        app.clock.advance(60)
        result = executor.execute(encode_action(queue.sent[-1]), now=app.clock.now())

    assert result.outcome == "failed" and "TRANSIENT_FAULT_DEADLINE" in result.detail
    assert app.poison() == []
    entry = app.context.ports.state.get_ledger_entry(drain["id"])
    assert entry is not None and entry.outcome.startswith("failed")
    state = app.context.ports.state.get_group(GROUP)
    assert node not in state.removing and state.last_failure is not None
    current = app.context.ports.cluster.get_node(node)
    assert current is not None and not current.unschedulable
    assert _deleted(app) == {}
    assert TRANSIENT_FAULT_DEADLINE <= timedelta(minutes=30)


def test_the_last_delivery_of_a_failing_step_records_the_failure_before_the_host_poisons_it(app: App) -> None:
    node, _, drain = _cordoned_drain(app)

    class Broken(Exception):
        pass

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise Broken("the cluster adapter has a bug")

    executor = Executor(app.context.ports, app.context.settings)
    ports = app.context.ports
    original = ports.cluster.list_pods_on_node
    ports.cluster.list_pods_on_node = broken  # type: ignore[method-assign]
    try:
        for delivery in range(1, HOST_MAX_DEQUEUE_COUNT):
            with pytest.raises(Broken):
                executor.execute(json.dumps(drain), now=app.clock.now(), dequeue_count=delivery)
            entry = ports.state.get_ledger_entry(drain["id"])
            assert entry is not None and entry.outcome == ""  # the host will try again
        with pytest.raises(Broken):
            executor.execute(json.dumps(drain), now=app.clock.now(), dequeue_count=HOST_MAX_DEQUEUE_COUNT)
    finally:
        ports.cluster.list_pods_on_node = original  # type: ignore[method-assign]

    entry = ports.state.get_ledger_entry(drain["id"])
    assert entry is not None and entry.outcome.startswith("failed") and "Broken" in entry.outcome
    assert node not in ports.state.get_group(GROUP).removing
    current = ports.cluster.get_node(node)
    assert current is not None and not current.unschedulable


def test_host_json_max_dequeue_count_is_the_one_the_executor_knows() -> None:
    from pathlib import Path

    host = json.loads((Path(__file__).resolve().parents[3] / ROOT_HOST_JSON).read_text())
    assert host["extensions"]["queues"]["maxDequeueCount"] == HOST_MAX_DEQUEUE_COUNT


# -- 10. malformed input is rejected cleanly ---------------------------------------------------------------

MALFORMED = [
    ("deeply nested", lambda app: "[" * 30_000 + "]" * 30_000, "nested too deeply"),
    ("nested in a field", lambda app: json.dumps({**json.loads(scale_up(app, 4)), "reason": None})
     .replace("null", "[" * 3000 + "]" * 3000), "nested too deeply"),
    ("oversized id", lambda app: scale_up(app, 4, id="x" * 2000), "'id' is 2000 characters long"),
    ("oversized node name", lambda app: scale_down(app, app.busy_and_idle()[1][0]).replace(
        app.busy_and_idle()[1][0], "n" * 1500), "characters long"),
    ("over a queue message", lambda app: scale_up(app, 4, reason="r" * (MAX_MESSAGE_CHARS + 1)), "at most"),
    ("wrong type", lambda app: scale_up(app, 4, target_size="4"), "target_size must be a positive integer"),
    ("nodes not a list", lambda app: scale_down(app, app.busy_and_idle()[1][0], nodes={"a": 1}), "must be a list"),
    ("unknown version", lambda app: scale_up(app, 4, version=4), "unknown schema version"),
]


@pytest.mark.parametrize("case_id,build,reason", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_messages_are_one_rejection_each_never_a_traceback(
    app: App, case_id: str, build: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    text = build(app)

    result = app.run(text)

    assert result.outcome == "rejected" and reason in result.detail, result.detail
    assert len(app.poison()) == 1
    entries = app.context.ports.state.list_ledger()
    assert len(entries) == 1 and entries[0].outcome.startswith("rejected")
    assert all(len(e.action_id) <= 256 for e in entries)
    assert not any(r.exc_info for r in caplog.records)
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0


def test_a_kubernetes_api_outage_during_a_drain_is_waited_out_not_poisoned(real_app: App) -> None:
    app = real_app  # real only: the 503s are injected into the sandbox server's HTTP answers
    node, _, drain = _cordoned_drain(app)
    executor, queue = _walker(app)
    fault = app.world.inject_fault(("k8s", "*", "pods"), status=503, count=10_000)
    result = executor.execute(json.dumps(drain), now=app.clock.now())
    assert result.outcome == "waiting" and "Kubernetes API fault" in result.detail, result
    app.clock.advance(30)
    result = executor.execute(encode_action(queue.sent[-1]), now=app.clock.now())
    assert result.outcome == "waiting" and "Kubernetes API fault" in result.detail, result
    fault.remaining = 0  # the API server is back
    while result.outcome == "waiting":
        app.clock.advance(30)
        result = executor.execute(encode_action(queue.sent[-1]), now=app.clock.now())
    assert result.outcome == "succeeded", result
    assert app.poison() == []
    assert node not in app.node_names()
