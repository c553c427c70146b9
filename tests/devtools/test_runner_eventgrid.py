"""The local runner delivers Event Grid events as Event Grid and the Functions host do.

Every event to every Event Grid function, bound as the worker binds it (func.EventGridEvent), in seq order,
once on success; a failed invocation is retried on Event Grid's schedule (10 s, 30 s, ... of the runner's
clock) without holding back later events, and dropped as dead-lettered after 5 attempts. A source that is not
there (the sandbox's 404) is no error. The events source is injected: no server except for the HTTP client test.
"""

from __future__ import annotations

import gc
import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import azure.functions as func
import pytest

from devtools import runner as runner_module
from devtools.eventgrid_delivery import MAX_ATTEMPTS, EventsSourceMissing
from devtools.runner import HostQueueConfig, LocalRunner, index_app, index_functions, sandbox_events_source

START = datetime(2026, 1, 1, tzinfo=UTC)


class _ManualClock:
    def __init__(self) -> None:
        self.t = START

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


class _EmptyQueue:
    name = "q"

    def receive(self, max_messages: int, *, visibility_timeout: timedelta) -> list[Any]:
        return []

    def count(self) -> int:
        return 0


def _event(seq: int, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "event": {
        "id": f"ev-{seq}", "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss",
        "subject": f"vmss/{seq}", "eventType": "Microsoft.Resources.ResourceActionSuccess",
        "eventTime": "2026-01-01T00:00:05.1234567Z", "dataVersion": "1", "metadataVersion": "1", "data": data,
    }}


class _Source:
    """The sandbox's events list: answers the entries after `after` (or all of them when `ignore_after`)."""

    def __init__(self, entries: list[dict[str, Any]], *, ignore_after: bool = False) -> None:
        self.entries = entries
        self.ignore_after = ignore_after
        self.asked: list[int] = []

    def __call__(self, after: int) -> list[dict[str, Any]]:
        self.asked.append(after)
        return [e for e in self.entries if self.ignore_after or e["seq"] > after]


def _app(on_event: Any, *, on_timer: Any = None, schedule: str = "0 0 0 1 1 *") -> func.FunctionApp:
    app = func.FunctionApp()

    @app.timer_trigger(arg_name="timer", schedule=schedule, run_on_startup=False)
    def tick(timer: func.TimerRequest) -> None:
        if on_timer is not None:
            on_timer(timer)

    @app.queue_trigger(arg_name="message", queue_name="q", connection="AzureWebJobsStorage")
    def on_message(message: func.QueueMessage) -> None:
        pass

    @app.event_grid_trigger(arg_name="grid_event")
    def on_grid_event(grid_event: func.EventGridEvent) -> None:
        on_event(grid_event)

    return app


def _runner(app: func.FunctionApp, source: Any, clock: Any = None) -> LocalRunner:
    return LocalRunner(app, env={}, clock=clock or _ManualClock(), queue=_EmptyQueue(),
                       host=HostQueueConfig(batch_size=4, new_batch_threshold=2), events=source)


def _tick(runner: LocalRunner) -> None:
    """One timer tick of the runner, waiting for the deliveries it started."""
    runner.poll_events()
    runner.drain_events(timeout=10)


def test_index_finds_the_event_grid_function_with_its_arg_name() -> None:
    app = _app(lambda e: None)

    indexed = index_functions(app, {})

    assert [(f.name, f.arg_name) for f in indexed.event_grid] == [("on_grid_event", "grid_event")]
    assert [t.name for t in indexed.timers] == ["tick"] and [q.name for q in indexed.queues] == ["on_message"]
    timers, queues = index_app(app, {})  # the two-list form callers use is unchanged
    assert [t.name for t in timers] == ["tick"] and [q.name for q in queues] == ["on_message"]
    assert [f.name for f in _runner(app, None).event_grid_functions] == ["on_grid_event"]


def test_each_app_is_indexed_as_itself_even_at_an_address_another_app_had() -> None:
    """Indexes were once kept by id(app): a new app at a collected app's address got the old app's functions."""
    for i in range(50):
        hits: list[int] = []
        app = _app(hits.append)
        [grid] = index_functions(app, {}).event_grid
        grid.call(i)
        assert hits == [i]  # its own function was called, not an earlier app's
        del app, grid
        gc.collect()


def test_events_are_delivered_in_seq_order_exactly_once_bound_as_the_worker_binds_them() -> None:
    seen: list[func.EventGridEvent] = []
    source = _Source([_event(2, n=2), _event(1, n=1), _event(3, n=3)])  # the answer's order is not seq order
    runner = _runner(_app(seen.append), source)

    _tick(runner)
    _tick(runner)
    _tick(runner)

    assert [e.id for e in seen] == ["ev-1", "ev-2", "ev-3"]
    assert source.asked == [0, 3, 3]
    first = seen[0]
    assert isinstance(first, func.EventGridEvent)
    assert first.get_json() == {"n": 1}
    assert first.subject == "vmss/1" and first.event_type == "Microsoft.Resources.ResourceActionSuccess"
    assert first.topic.endswith("/virtualMachineScaleSets/vmss") and first.data_version == "1"
    assert first.event_time == datetime(2026, 1, 1, 0, 0, 5, 123456, tzinfo=UTC)
    assert runner.stats.event_invocations == 3 and runner.stats.failures == 0
    assert runner.events.pending() == 0


def test_a_failed_event_is_retried_after_its_back_off_without_holding_back_the_next() -> None:
    seen: list[str] = []
    failures = {"ev-1": 1}

    def on_event(event: func.EventGridEvent) -> None:
        seen.append(event.id)
        if failures.get(event.id, 0) > 0:
            failures[event.id] -= 1
            raise RuntimeError("the function failed")

    clock = _ManualClock()
    runner = _runner(_app(on_event), _Source([_event(1), _event(2)]), clock)

    _tick(runner)
    assert seen == ["ev-1", "ev-2"]  # ev-1 failed; ev-2 went on
    clock.advance(9)
    _tick(runner)
    assert seen == ["ev-1", "ev-2"]  # not before 10 s of the runner's clock
    clock.advance(1)
    _tick(runner)
    assert seen == ["ev-1", "ev-2", "ev-1"]
    clock.advance(600)
    _tick(runner)
    assert seen == ["ev-1", "ev-2", "ev-1"]  # delivered: never again
    assert runner.stats.event_invocations == 3 and runner.stats.failures == 1 and runner.stats.dead_lettered == 0


def test_an_event_that_keeps_failing_is_dead_lettered_after_five_attempts(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[datetime] = []
    clock = _ManualClock()

    def on_event(event: func.EventGridEvent) -> None:
        attempts.append(clock.now())
        raise RuntimeError("always")

    runner = _runner(_app(on_event), _Source([_event(1)]), clock)
    for _ in range(60):
        _tick(runner)
        clock.advance(10)

    assert MAX_ATTEMPTS == 5
    assert [(t - START).total_seconds() for t in attempts] == [0, 10, 40, 100, 400]  # 10 s, 30 s, 1 min, 5 min
    assert runner.stats.dead_lettered == 1 and runner.stats.failures == 5
    assert runner.events.pending() == 0
    assert any("dead-lettered" in r.getMessage() for r in caplog.records)


def test_a_source_that_repeats_old_events_does_not_redeliver_them() -> None:
    seen: list[str] = []
    source = _Source([_event(1), _event(2)], ignore_after=True)
    runner = _runner(_app(lambda e: seen.append(e.id)), source)

    _tick(runner)
    _tick(runner)
    source.entries.append(_event(3))
    _tick(runner)
    _tick(runner)

    assert seen == ["ev-1", "ev-2", "ev-3"]
    assert source.asked == [0, 2, 2, 3]


def test_a_missing_source_is_no_error_and_is_not_asked_every_tick(caplog: pytest.LogCaptureFixture) -> None:
    asked: list[int] = []

    def missing(after: int) -> list[dict[str, Any]]:
        asked.append(after)
        raise EventsSourceMissing("404")

    runner = _runner(_app(lambda e: None), missing)
    with caplog.at_level("DEBUG", logger="devtools.runner"):
        for _ in range(5):
            _tick(runner)

    assert asked == [0]
    assert [r.levelname for r in caplog.records if "events source" in r.getMessage()] == ["DEBUG"]


def test_a_failing_source_is_asked_again_next_tick() -> None:
    answers: list[Any] = [OSError("connection refused"), [_event(1)]]
    seen: list[str] = []

    def flaky(after: int) -> list[dict[str, Any]]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    runner = _runner(_app(lambda e: seen.append(e.id)), flaky)
    _tick(runner)
    _tick(runner)

    assert seen == ["ev-1"]


def test_no_source_means_no_events() -> None:
    runner = _runner(_app(lambda e: None), None)

    assert runner.poll_events() == []
    assert not runner.events.active


class _RealTime:
    def now(self) -> datetime:
        return datetime.now(UTC)


def test_a_slow_event_function_does_not_stall_the_timers() -> None:
    """The event's invocation waits for two timer runs: it can only see them if the timers go on meanwhile."""
    timer_runs: list[bool] = []
    two_timer_runs = threading.Event()
    outcome: list[bool] = []

    def on_timer(timer: func.TimerRequest) -> None:
        timer_runs.append(timer.past_due)
        if len(timer_runs) >= 2:
            two_timer_runs.set()

    def on_event(event: func.EventGridEvent) -> None:
        outcome.append(two_timer_runs.wait(timeout=15))

    runner = _runner(_app(on_event, on_timer=on_timer, schedule="* * * * * *"), _Source([_event(1)]), _RealTime())

    finished = runner.run(until=lambda: bool(outcome), wall_timeout=30, tick_seconds=0.01)

    assert finished and outcome == [True]
    assert runner.stats.event_invocations == 1


class _EventsHandler(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, Any]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, body = self.answers.get(self.path, (404, {"error": f"no control endpoint GET {self.path}"}))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_sandbox_source_asks_after_the_seq_and_maps_404_to_a_missing_source() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EventsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        _EventsHandler.answers = {"/sandbox/eventgrid/events?after=7": (200, {"events": [_event(8)]})}
        assert sandbox_events_source(url, ca_path="")(7) == [_event(8)]
        with pytest.raises(EventsSourceMissing):
            sandbox_events_source(url, ca_path="")(0)
    finally:
        server.shutdown()
        server.server_close()


def test_build_runner_without_a_sandbox_has_no_events_source(monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.context

    made: dict[str, Any] = {}

    class _Context:
        class ports:
            queue = _EmptyQueue()

    monkeypatch.setattr(shared.context, "build_context", lambda env, clock: _Context())
    monkeypatch.setattr(shared.context, "install_context", lambda context: None)
    monkeypatch.setattr(runner_module, "LocalRunner", lambda app, **kwargs: made.update(kwargs) or "runner")

    assert runner_module.build_runner({}) == "runner"
    assert made["events"] is None
