"""A Preempt notice whose spot replacement Azure would refuse: the replacement is asked of on demand within the
notice (shared/services/preemption.py). In-memory ports over the sandbox's world (the `spot-eviction` scenario, its
own evictions left out: the notice is delivered here as Event Grid delivers it)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from sandbox.model.scenario import load_scenario
from sandbox.world.faults import ScaleUpFailure
from shared.actions import ScaleUp, decode_message
from shared.engine.offerings import SPOT_PREEMPTED
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.preemption import handle_scheduled_event
from tests.fixtures.sandbox import SANDBOX_START
from tests.memory_app import MemoryApp, memory_app

SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "10s"}
SCENARIO = Path(__file__).parents[3] / "sandbox" / "scenarios" / "spot-eviction.json"
NOTICE = timedelta(seconds=30)

# How Azure refuses spot capacity from the notice on: at the PATCH (409), or by failing the accepted operation
# five seconds later and taking the capacity back; or not at all.
SHORT_AT_THE_PATCH = {"spot_capacity": [{"scale_set": "pool-spot", "available": 6, "code": "SkuNotAvailable"}]}
SHORT_BY_ITS_OPERATION = {"scale_up_failures": [{"scale_set": "pool-spot", "code": "SkuNotAvailable", "count": 5}]}


def _app(refusal: dict[str, Any]) -> MemoryApp:
    """Six spot nodes up and running their pods, then spot capacity runs out as `refusal` says."""
    doc = json.loads(SCENARIO.read_text())
    doc.pop("expect_at_least"), doc.pop("expect_at_most")
    app = memory_app({**doc, "evictions": []}, settings=SETTINGS)
    app.clock.advance(60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    _execute(app, seconds=30)
    app.clock.advance(300)
    assert len(_spot_nodes(app)) == 6
    if refusal:
        # From now on (the world reads its scenario's spot capacity and failures as it goes).
        app.world.scenario = load_scenario({**doc, "evictions": [], **refusal})
        for failure in refusal.get("scale_up_failures", []):
            group = app.world.scale_set(app.world.subscription_id, "rg-sandbox-nodes", failure["scale_set"])
            group.scale_up_failures.append(ScaleUpFailure(failure["scale_set"], failure["code"], "no spot capacity",
                                                          failure["count"]))
    return app


def _execute(app: MemoryApp, *, seconds: int) -> None:
    """The executor taking each message as it comes due, second by second (the host polls its queue every 2 s)."""
    executor = Executor(app.ports, app.settings)
    for _ in range(seconds):
        for text in app.take_queued():
            executor.execute(text, now=app.clock.now())
        app.clock.advance(1)


def _spot_nodes(app: MemoryApp) -> list[str]:
    return sorted(n.name for n in app.ports.cluster.list_nodes() if n.name.startswith("pool-spot"))


def _granted(app: MemoryApp, scale_set: str, *, since: float) -> list[float]:
    """Sim seconds of the capacity increases of `scale_set` Azure granted at or after `since`."""
    return [e["t"] for e in app.world.report()["spot"]["capacity_increases"]
            if e["scale_set"] == scale_set and e["outcome"] == "ok" and e["t"] >= since]


def _asked(app: MemoryApp, scale_set: str, *, since: float) -> list[dict[str, Any]]:
    return [e for e in app.world.report()["spot"]["capacity_increases"]
            if e["scale_set"] == scale_set and e["t"] >= since]


def _notice(app: MemoryApp) -> tuple[dict[str, Any], float]:
    """A Preempt notice for the newest spot VM, due 30 s from now; and when it came, in sim seconds."""
    instance = _spot_nodes(app)[-1].removeprefix("pool-spot").lstrip("0") or "0"
    due = app.clock.now() + NOTICE
    event = {"id": "e1", "subject": "", "eventType": "Microsoft.Maintenance.ScheduledEventCreated",
             "data": {"EventType": "Preempt", "Resources": [f"pool-spot_{instance}"],
                      "NotBefore": format_datetime(due, usegmt=True)}}
    return event, (app.clock.now() - SANDBOX_START).total_seconds()


@pytest.mark.parametrize("refusal", [SHORT_AT_THE_PATCH, SHORT_BY_ITS_OPERATION, {}],
                         ids=["refused-at-the-patch", "refused-by-its-operation", "spot-plentiful"])
def test_a_preempt_notice_gets_its_replacement_on_demand_before_not_before(refusal: dict[str, Any]) -> None:
    app = _app(refusal)
    event, at = _notice(app)
    result = handle_scheduled_event(app.ports, app.settings, event, now=app.clock.now())
    assert result.outcome == "acted"
    # Within the notice's own invocation: the replacement is asked of on demand, the spot offering marked.
    asked = [a for a in map(decode_message, app.queued()) if isinstance(a, ScaleUp) and a.id in result.enqueued]
    assert [(a.group, a.target_size) for a in asked] == [("rg-sandbox-nodes/pool-od", 1)]
    [mark] = app.ports.state.list_offerings()
    assert (mark.kind, mark.key.priority, mark.until - mark.since) == (
        SPOT_PREEMPTED, "Spot", app.settings.unavailable_offering_ttl.of(SPOT_PREEMPTED))
    _execute(app, seconds=int(NOTICE.total_seconds()))
    # Granted before NotBefore, and spot was never asked again (so never refused, at once or late).
    granted = _granted(app, "pool-od", since=at)
    assert granted and granted[0] < at + NOTICE.total_seconds()
    assert _asked(app, "pool-spot", since=at) == []


def test_the_mark_of_a_notice_lapses_and_spot_is_asked_again() -> None:
    app = _app({})
    event, at = _notice(app)
    handle_scheduled_event(app.ports, app.settings, event, now=app.clock.now())
    _execute(app, seconds=60)  # the VM goes (the test's world evicts nothing by itself: it is deleted here)
    [mark] = app.ports.state.list_offerings()
    app.clock.advance((mark.until - app.clock.now()).total_seconds() + 1)
    group = app.world.scale_set(app.world.subscription_id, "rg-sandbox-nodes", "pool-spot")
    app.world.delete_instances(group, [_spot_nodes(app)[0].removeprefix("pool-spot").lstrip("0") or "0"])
    app.clock.advance(60)  # its Node stays behind NotReady (k3s-like): the poll sees the VM gone
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    asked = [decode_message(t) for t in app.queued()]
    assert "rg-sandbox-nodes/pool-spot" in {a.group for a in asked if isinstance(a, ScaleUp) and a.step == "resize"}


def test_a_dry_run_marks_nothing() -> None:
    app = _app({})
    event, _ = _notice(app)
    dry = replace(app.settings, dry_run=True)
    assert handle_scheduled_event(app.ports, dry, event, now=app.clock.now()).outcome == "acted"
    assert app.ports.state.list_offerings() == []
